//! Where the record lives: the [`Store`] trait and its two implementations, a local file
//! ([`file::FileStore`], the default, one process at a time) and PostgreSQL ([`postgres::PgStore`],
//! several replicas of which one acts at a time).

use async_trait::async_trait;
use serde::Serialize;

use crate::record::{Event, Key, Record};

pub mod file;
mod journal;
#[cfg(feature = "postgres")]
pub mod postgres;

/// What a store address names: a PostgreSQL database or a file. Its `Debug` never shows a
/// connection string (it may hold a password).
#[derive(PartialEq, Eq)]
#[non_exhaustive]
pub enum Address<'a> {
    /// A PostgreSQL database: a URL, or key=value settings.
    Postgres(&'a str),
    /// A file.
    File(&'a str),
}

impl std::fmt::Debug for Address<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Address::Postgres(_) => f.write_str("Postgres(..)"),
            Address::File(path) => f.debug_tuple("File").field(path).finish(),
        }
    }
}

impl<'a> Address<'a> {
    /// Reads a store address: a path that starts with `/` or `.` is a file; a URL (`scheme://`)
    /// must be PostgreSQL's; any word with `=` makes key=value settings (`host=... dbname=...`);
    /// anything else is a file. A connection string taken for a file name would give each replica
    /// a record of its own (two would act at once) and write its password into a file's name, so
    /// any other URL is refused; the refusal does not repeat the address, which may hold a password.
    pub fn parse(address: &'a str) -> Result<Self, String> {
        if address.starts_with(['/', '.']) {
            return Ok(Address::File(address));
        }
        if let Some((scheme, _)) = address.split_once("://") {
            return match scheme.to_ascii_lowercase().as_str() {
                "postgres" | "postgresql" => Ok(Address::Postgres(address)),
                _ => Err("a URL that is not postgres:// or postgresql:// (give a PostgreSQL URL, key=value settings, or a file path)".into()),
            };
        }
        if address.split_whitespace().any(|w| w.contains('=')) {
            return Ok(Address::Postgres(address));
        }
        Ok(Address::File(address))
    }

    /// Opens the store this address names; `replica` names this process in a PostgreSQL record
    /// (unset: [`replica_name`]).
    pub async fn open(&self, replica: Option<&str>) -> Result<Box<dyn Store>, StoreError> {
        match *self {
            #[cfg(feature = "postgres")]
            Address::Postgres(url) => {
                let replica = replica.map_or_else(replica_name, str::to_string);
                Ok(Box::new(postgres::PgStore::connect(url, &replica).await?))
            }
            #[cfg(not(feature = "postgres"))]
            Address::Postgres(_) => {
                let _ = replica;
                Err(StoreError::Failed(
                    "a PostgreSQL store: this build has no postgres feature".into(),
                ))
            }
            Address::File(path) => Ok(Box::new(file::FileStore::open(path)?)),
        }
    }
}

/// A replica's name when none is given: the host's name and the process id.
pub fn replica_name() -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "host".into());
    format!("{host}-{}", std::process::id())
}

/// The names of the entries `events` change: those they name and those they prune, sorted, once each.
pub(crate) fn named(events: &[Event]) -> Vec<&str> {
    let mut names: Vec<&str> = events.iter().filter_map(|e| e.name()).collect();
    for e in events {
        if let Event::Pruned { names: pruned } = e {
            names.extend(pruned.iter().map(String::as_str));
        }
    }
    names.sort_unstable();
    names.dedup();
    names
}

/// Whether this replica may act on a pool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Role {
    /// This replica is the one that acts.
    Leader,
    /// Another replica acts; this one only watches.
    Standby {
        /// The replica that acts, as it named itself (empty when unknown).
        leader: String,
    },
}

/// What can go wrong with a store. Any error while recording an intent or outcome stops the pass:
/// the scaler never acts on something it could not write down.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreError {
    /// Another process holds the record; this one is refused.
    Busy(String),
    /// This replica no longer leads (its lock is gone, or another replica took over).
    LostLeadership(String),
    /// The record cannot be read or written.
    Failed(String),
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreError::Busy(m) => write!(f, "record in use: {m}"),
            StoreError::LostLeadership(m) => write!(f, "lost the lead: {m}"),
            StoreError::Failed(m) => write!(f, "record store: {m}"),
        }
    }
}

impl std::error::Error for StoreError {}

/// Where records are kept. Every method that writes is atomic: a [`commit`](Store::commit) writes the
/// record and the events that produced it together, or nothing.
#[async_trait]
pub trait Store: Send + Sync + std::fmt::Debug {
    /// Where the records are, for messages (`file orca-pool-lab.json`, `postgres db@host`).
    fn describe(&self) -> String;

    /// Becomes the one replica that acts on `key`, if no other does: [`Role::Leader`], or
    /// [`Role::Standby`] naming the leader. A store without replicas always leads.
    async fn lead(&mut self, key: &Key) -> Result<Role, StoreError>;

    /// The record of `key`, or `None` when there is none.
    async fn load(&mut self, key: &Key) -> Result<Option<Record>, StoreError>;

    /// Writes `record` (of its key) with the `events` that produced it, in one transaction; fails
    /// with [`StoreError::LostLeadership`] when this replica no longer leads. A commit writes what
    /// changed, so that it costs the same whatever the record's size: the record's own fields
    /// (established, next name, cooling, conflict, writer) and the entries that `events` name (or
    /// prune) as `record` has them; an entry changed without an event naming it may not be written.
    async fn commit(&mut self, record: &Record, events: &[Event]) -> Result<(), StoreError>;

    /// A signal that turns true when this replica loses the lead between commits (the database
    /// session that held the lock is gone); `None` for a store that cannot lose it.
    fn lost(&self) -> Option<tokio::sync::watch::Receiver<bool>> {
        None
    }

    /// `Ok` while this process may still act on the store's records some day; an error when it
    /// never can again (a file store whose lock file was removed or replaced: another process may
    /// hold a new lock at its path), so that a program stops rather than run passes that can only
    /// stop. A replica that lost the lead to another is still `Ok`: it may lead again.
    fn still_held(&self) -> Result<(), StoreError> {
        Ok(())
    }

    /// Remarks for the operator about what the store found (an older record format, ...).
    fn notes(&self) -> Vec<String> {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_address_names_a_database_or_a_file_and_a_file_opens() {
        for db in ["postgresql://u@db/orca", "host=db dbname=orca"] {
            assert_eq!(Address::parse(db), Ok(Address::Postgres(db)));
        }
        for file in ["lab.json", "./a=b.json", "/var/lib/lab.json"] {
            assert_eq!(Address::parse(file), Ok(Address::File(file)));
        }
        let db = Address::parse("postgresql://u:s3cret@db/orca").unwrap();
        assert_eq!(format!("{db:?}"), "Postgres(..)");
        let e = Address::parse("mysql://u:s3cret@db/orca").unwrap_err();
        assert!(e.contains("postgres://") && !e.contains("s3cret"), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lab.json").display().to_string();
        let store = Address::parse(&path).unwrap().open(None).await;
        assert!(store.is_ok());
        assert!(replica_name().ends_with(&format!("-{}", std::process::id())));
    }
}
