//! The record in a local JSON file: the default store.
//!
//! The file holds the records of every (kind, owner, pool) kept in it. It is written whole, to a
//! temporary file in the same folder that is synced and then renamed over the old one, so a crash
//! leaves the old or the new file, never a torn one. A lock file beside it (`<file>.lock`, an
//! exclusive `flock` held as long as the store is open) refuses a second process on the same file.
//! The lock is checked before every pass ([`Store::lead`]) and every write: when someone removed or
//! replaced the lock file, a second process may have locked a new file at the same path, so this
//! store stops for good ([`StoreError::LostLeadership`]) rather than write over the other's record.
//! The write is orca's atomic write ([`orca::fs::write_atomic`]); the temporary file that a crashed
//! writer left behind is never read, and is removed when the store is next opened.

use std::path::{Path, PathBuf};

use async_trait::async_trait;
use orca::fs::{FileLock, FsError};
use serde::{Deserialize, Serialize};

use super::{Role, Store, StoreError};
use crate::record::{Event, Key, Record};

/// The format tag of the file.
pub const FORMAT: &str = "orca-pool/2";

#[derive(Debug, Default, Serialize, Deserialize)]
struct Contents {
    format: String,
    records: Vec<Record>,
    /// A record of an older orca-pool (keyed by pool only), kept as it was found: never read as this
    /// pool's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    legacy: Option<serde_json::Value>,
}

/// A record file, locked for this process.
#[derive(Debug)]
pub struct FileStore {
    path: PathBuf,
    contents: Contents,
    /// Held for as long as the store is open: the exclusive lock.
    lock: FileLock,
}

fn io(path: &Path, what: &str, e: std::io::Error) -> StoreError {
    StoreError::Failed(format!("{} ({what}): {e}", path.display()))
}

impl FileStore {
    /// Opens (or prepares) the record file at `path`, taking its lock: a second process (or a second
    /// store in this one) on the same file is refused with [`StoreError::Busy`].
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        let path = path.as_ref().to_path_buf();
        let lock = lock(&path)?;
        remove_leftovers(&path);
        let contents = match std::fs::read(&path) {
            Ok(bytes) => parse(&path, &bytes)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Contents {
                format: FORMAT.into(),
                ..Contents::default()
            },
            Err(e) => return Err(io(&path, "read", e)),
        };
        Ok(FileStore {
            path,
            contents,
            lock,
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `Ok` while the lock file is still the one this store locked; else
    /// [`StoreError::LostLeadership`] naming it, for good: another process may hold a new lock
    /// file at its path and act on the record.
    fn check_lock(&self) -> Result<(), StoreError> {
        self.lock.still_held().map_err(|e| match e {
            FsError::Replaced { .. } => StoreError::LostLeadership(format!(
                "{e}; {} is no longer this process's record: stopped, nothing more is made or deleted",
                self.path.display()
            )),
            other => StoreError::Failed(other.to_string()),
        })
    }

    fn write(&self) -> Result<(), StoreError> {
        self.check_lock()?;
        let bytes = serde_json::to_vec_pretty(&self.contents)
            .map_err(|e| StoreError::Failed(format!("{}: {e}", self.path.display())))?;
        orca::fs::write_atomic(&self.path, &bytes).map_err(|e| StoreError::Failed(e.to_string()))
    }
}

/// Takes the exclusive lock of the record file at `path` (`<path>.lock`, held as long as the
/// returned lock lives), without waiting.
fn lock(path: &Path) -> Result<FileLock, StoreError> {
    let lock_path = FileLock::path_for(path);
    FileLock::try_lock(&lock_path).map_err(|e| match e {
        FsError::Busy { .. } => StoreError::Busy(format!(
            "{} is used by another orca-pool (it holds {}): run one scaler per record file, or run replicas on PostgreSQL (--store postgres://...)",
            path.display(),
            lock_path.display()
        )),
        other => StoreError::Failed(other.to_string()),
    })
}

/// Removes the temporary files of `path` that writers which crashed before renaming them left
/// behind. Called with the lock held: no other process is writing one.
fn remove_leftovers(path: &Path) {
    match orca::fs::remove_stale_temps(path) {
        Ok(removed) => {
            for file in removed {
                tracing::info!(
                    file = %file.display(),
                    "removed the temporary file of a record write that did not finish"
                );
            }
        }
        Err(e) => tracing::warn!(
            error = %e,
            "could not remove the temporary files of record writes that did not finish"
        ),
    }
}

fn parse(path: &Path, bytes: &[u8]) -> Result<Contents, StoreError> {
    let value: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| {
        StoreError::Failed(format!("{}: not an orca-pool record: {e}", path.display()))
    })?;
    match value.get("format").and_then(|f| f.as_str()) {
        Some(FORMAT) => serde_json::from_value(value).map_err(|e| {
            StoreError::Failed(format!("{}: not an orca-pool record: {e}", path.display()))
        }),
        Some(other) => Err(StoreError::Failed(format!(
            "{}: record format {other:?} is not {FORMAT:?} (written by another version of orca-pool)",
            path.display()
        ))),
        // The first orca-pool's record: machines by id, no kind or owner. Kept aside, never read as
        // this pool's record.
        None if value.get("known").is_some() => Ok(Contents {
            format: FORMAT.into(),
            records: Vec::new(),
            legacy: Some(value),
        }),
        None => Err(StoreError::Failed(format!(
            "{}: not an orca-pool record",
            path.display()
        ))),
    }
}

#[async_trait]
impl Store for FileStore {
    fn describe(&self) -> String {
        format!("file {}", self.path.display())
    }

    async fn lead(&mut self, _key: &Key) -> Result<Role, StoreError> {
        self.check_lock()?;
        Ok(Role::Leader)
    }

    async fn load(&mut self, key: &Key) -> Result<Option<Record>, StoreError> {
        Ok(self
            .contents
            .records
            .iter()
            .find(|r| &r.key == key)
            .cloned())
    }

    async fn commit(&mut self, record: &Record, _events: &[Event]) -> Result<(), StoreError> {
        let previous = std::mem::take(&mut self.contents.records);
        let mut records: Vec<Record> = previous
            .iter()
            .filter(|r| r.key != record.key)
            .cloned()
            .collect();
        records.push(record.clone());
        records.sort_by(|a, b| a.key.cmp(&b.key));
        self.contents.records = records;
        if let Err(e) = self.write() {
            self.contents.records = previous;
            return Err(e);
        }
        Ok(())
    }

    fn still_held(&self) -> Result<(), StoreError> {
        self.check_lock()
    }

    fn notes(&self) -> Vec<String> {
        match &self.contents.legacy {
            Some(v) => {
                let n = v
                    .get("known")
                    .and_then(|k| k.as_object())
                    .map(|o| o.len())
                    .unwrap_or(0);
                vec![format!(
                    "{} also holds a record of an older orca-pool, keyed by pool only ({n} machine ids); it is kept but not read as any pool's record",
                    self.path.display()
                )]
            }
            None => Vec::new(),
        }
    }
}
