//! The record in PostgreSQL, for several replicas of the scaler: one acts at a time per
//! (kind, owner, pool).
//!
//! - Everything lives in the schema `orca_pool` (tables `records`, `machines`, `cooling`, `events`,
//!   `schema_migrations`), made by versioned migrations run on connect under a transaction-scoped
//!   advisory lock, so replicas starting together do not race.
//! - The lead: a session-level advisory lock on `hashtextextended('orca_pool/<kind>/<owner>/<pool>', 0)`
//!   held by the store's one connection. Taking it raises the record's `epoch`; every commit checks the
//!   epoch in its transaction, on the connection that holds the lock. When that connection is gone the
//!   lock is gone: [`Store::lost`] turns true at once and every later commit fails, so the replica stops
//!   acting; the next [`Store::lead`] reconnects and becomes a standby (or the leader again).
//! - Every intent and outcome is written with the record rows it changed, in one transaction, into
//!   `orca_pool.events` (kept 30 days).

use std::time::Duration;

use async_trait::async_trait;
use orca::Timestamp;
use tokio::sync::watch;
use tokio_postgres::config::Host;
use tokio_postgres::{Client, NoTls, Transaction};

use super::{Role, Store, StoreError};
use crate::record::{Entry, Event, Key, Phase, Record};
use crate::Offering;

/// The migrations, in order: (version, name, SQL).
pub const MIGRATIONS: &[(i32, &str, &str)] = &[
    (
        1,
        "records, machines, cooling, events",
        include_str!("migrations/0001_records.sql"),
    ),
    (
        2,
        "records.conflict",
        include_str!("migrations/0002_conflict.sql"),
    ),
    (
        3,
        "records.writer",
        include_str!("migrations/0003_writer.sql"),
    ),
    (
        4,
        "machines.leftovers",
        include_str!("migrations/0004_leftovers.sql"),
    ),
];

/// The schema everything lives in.
pub const SCHEMA: &str = "orca_pool";

/// A PostgreSQL store: one connection, which holds the lead when this replica has it.
pub struct PgStore {
    url: String,
    replica: String,
    client: Client,
    lost: watch::Receiver<bool>,
    /// The key led and the epoch it was taken at.
    leading: Option<(Key, i64)>,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("database", &redact(&self.url))
            .field("replica", &self.replica)
            .field("leading", &self.leading)
            .finish()
    }
}

/// The connection string with its password replaced by `***`, for logs and errors: the scheme given,
/// the user, every `host:port` and the database. The URL is parsed as the driver parses it, so that a
/// password given anywhere (before the host, or as a query parameter) is never shown; what is shown
/// is rebuilt from the parsed parts alone. Key=value settings show as `<not a URL>`, and a URL the
/// driver reads otherwise than meant as `<scheme>://<unreadable>`.
pub fn redact(url: &str) -> String {
    let Some((scheme, _)) = url.split_once("://") else {
        return "<not a URL>".to_string();
    };
    let unreadable = || format!("{scheme}://<unreadable>");
    // The driver takes the credentials up to the first `@`: a second one means a password that
    // holds an unencoded `@`, and what follows it would show part of the password.
    if url.matches('@').count() > 1 {
        return unreadable();
    }
    let Ok(c) = url.parse::<tokio_postgres::Config>() else {
        return unreadable();
    };
    let ports = c.get_ports();
    let hosts: Vec<String> = c
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let host = match h {
                Host::Tcp(name) => plain_host(name)?.to_string(),
                #[cfg(unix)]
                Host::Unix(path) => plain_socket_dir(path)?,
            };
            Some(match ports.get(i).or(ports.first()) {
                Some(port) => format!("{host}:{port}"),
                None => host,
            })
        })
        .collect::<Option<_>>()
        .unwrap_or_default();
    if hosts.is_empty() && !c.get_hosts().is_empty() {
        return unreadable();
    }
    let user = c.get_user().unwrap_or("");
    if !user
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
    {
        // Read otherwise than meant, as a host can be: the "user" may hold the password.
        return unreadable();
    }
    let auth = match (user.is_empty(), c.get_password().is_some()) {
        (true, false) => String::new(),
        (_, true) => format!("{user}:***@"),
        (false, false) => format!("{user}@"),
    };
    format!(
        "{scheme}://{auth}{}/{}",
        hosts.join(","),
        c.get_dbname().unwrap_or("")
    )
}

/// `name` when it is a plain host name or address (letters, digits, `.`, `-`, `_`, `:`): anything
/// else means the URL was read otherwise than meant (an unencoded `@` in a password, say), and may
/// hold part of the password.
fn plain_host(name: &str) -> Option<&str> {
    name.bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'_'))
        .then_some(name)
}

/// The socket folder `path` when it is a plain absolute path (letters, digits, `.`, `-`, `_`, `/`),
/// for the same reason: a host read from a URL is taken for a folder when it holds a `/`.
#[cfg(unix)]
fn plain_socket_dir(path: &std::path::Path) -> Option<String> {
    let s = path.to_str()?;
    (s.starts_with('/')
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b'/')))
    .then(|| s.to_string())
}

/// The servers `cfg` connects to, for errors that name them: `host:port` each, a socket folder as
/// `<folder> (socket, port <port>)`, never the password; a host that does not read as one (it may
/// hold part of the password) is named only as such.
pub fn servers(cfg: &tokio_postgres::Config) -> String {
    let port = |i: usize| {
        cfg.get_ports()
            .get(i)
            .or(cfg.get_ports().first())
            .copied()
            .unwrap_or(5432)
    };
    let hosts: Vec<String> = cfg
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, h)| match h {
            Host::Tcp(name) => match plain_host(name) {
                Some(name) => format!("{name}:{}", port(i)),
                None => "(a host name that does not read as one)".to_string(),
            },
            #[cfg(unix)]
            Host::Unix(dir) => match plain_socket_dir(dir) {
                Some(dir) => format!("{dir} (socket, port {})", port(i)),
                None => "(a socket folder that does not read as one)".to_string(),
            },
        })
        .collect();
    if hosts.is_empty() {
        format!("the default host, port {}", port(0))
    } else {
        hosts.join(", ")
    }
}

fn db(what: &str) -> impl Fn(tokio_postgres::Error) -> StoreError + '_ {
    move |e| StoreError::Failed(format!("{what}: {}", describe_pg(&e)))
}

/// A database error in words, with the server's message when there is one.
fn describe_pg(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(d) => format!("{} ({})", d.message(), d.code().code()),
        None => match std::error::Error::source(e) {
            Some(s) => format!("{e}: {s}"),
            None => e.to_string(),
        },
    }
}

async fn connect(url: &str) -> Result<(Client, watch::Receiver<bool>), StoreError> {
    let mut config: tokio_postgres::Config = url.parse().map_err(|e: tokio_postgres::Error| {
        StoreError::Failed(format!(
            "{}: not a PostgreSQL connection string: {e}",
            redact(url)
        ))
    })?;
    if config.get_application_name().is_none() {
        config.application_name("orca-pool");
    }
    config
        .connect_timeout(Duration::from_secs(10))
        .keepalives(true)
        .keepalives_idle(Duration::from_secs(10))
        .keepalives_interval(Duration::from_secs(5))
        .keepalives_retries(3);
    let (client, connection) = config.connect(NoTls).await.map_err(|e| {
        StoreError::Failed(format!(
            "cannot connect to {}: {}",
            redact(url),
            describe_pg(&e)
        ))
    })?;
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::warn!(error = %e, "orca-pool: the database connection ended");
        }
        let _ = tx.send(true);
    });
    // The server drops the session (and its lock) soon after this client is gone.
    let _ = client
        .batch_execute(
            "SET tcp_keepalives_idle = 10; SET tcp_keepalives_interval = 5; SET tcp_keepalives_count = 3",
        )
        .await;
    Ok((client, rx))
}

/// Runs the migrations not yet applied, in order, in one transaction under an advisory lock.
pub async fn migrate(client: &mut Client) -> Result<Vec<i32>, StoreError> {
    let tx = client.transaction().await.map_err(db("migrations"))?;
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended('orca_pool/migrations', 0))",
        &[],
    )
    .await
    .map_err(db("migrations lock"))?;
    tx.batch_execute(
        "CREATE SCHEMA IF NOT EXISTS orca_pool;
         CREATE TABLE IF NOT EXISTS orca_pool.schema_migrations (
             version integer PRIMARY KEY,
             name text NOT NULL,
             applied_at timestamptz NOT NULL DEFAULT now())",
    )
    .await
    .map_err(db("migrations table"))?;
    let done: Vec<i32> = tx
        .query("SELECT version FROM orca_pool.schema_migrations", &[])
        .await
        .map_err(db("migrations read"))?
        .iter()
        .map(|r| r.get(0))
        .collect();
    if let Some(newer) = done
        .iter()
        .find(|v| !MIGRATIONS.iter().any(|(m, _, _)| m == *v))
    {
        return Err(StoreError::Failed(format!(
            "the database's orca_pool schema is at migration {newer}, which this orca-pool does not know: a newer orca-pool made it"
        )));
    }
    let mut applied = Vec::new();
    for (version, name, sql) in MIGRATIONS {
        if done.contains(version) {
            continue;
        }
        tx.batch_execute(sql)
            .await
            .map_err(db(&format!("migration {version} ({name})")))?;
        tx.execute(
            "INSERT INTO orca_pool.schema_migrations (version, name) VALUES ($1, $2)",
            &[version, name],
        )
        .await
        .map_err(db("migrations record"))?;
        applied.push(*version);
    }
    tx.commit().await.map_err(db("migrations commit"))?;
    Ok(applied)
}

fn lock_key(key: &Key) -> String {
    format!("orca_pool/{}/{}/{}", key.kind, key.owner, key.pool)
}

impl PgStore {
    /// Connects to `url` as replica `replica` (a name for messages and the event log) and runs the
    /// migrations.
    pub async fn connect(url: &str, replica: &str) -> Result<Self, StoreError> {
        let (mut client, lost) = connect(url).await?;
        migrate(&mut client).await?;
        Ok(PgStore {
            url: url.to_string(),
            replica: replica.to_string(),
            client,
            lost,
            leading: None,
        })
    }

    /// This replica's name.
    pub fn replica(&self) -> &str {
        &self.replica
    }

    /// The process id of the database session that holds (or would hold) the lead.
    pub async fn backend_pid(&self) -> Result<i32, StoreError> {
        let row = self
            .client
            .query_one("SELECT pg_backend_pid()", &[])
            .await
            .map_err(db("backend pid"))?;
        Ok(row.get(0))
    }

    async fn reconnect_if_lost(&mut self) -> Result<(), StoreError> {
        if !*self.lost.borrow() && !self.client.is_closed() {
            return Ok(());
        }
        self.leading = None;
        let (client, lost) = connect(&self.url).await?;
        self.client = client;
        self.lost = lost;
        Ok(())
    }

    async fn standby(&self, key: &Key) -> Result<Role, StoreError> {
        let leader = self
            .client
            .query_opt(
                "SELECT leader FROM orca_pool.records WHERE kind = $1 AND owner = $2 AND pool = $3",
                &[&key.kind, &key.owner, &key.pool],
            )
            .await
            .map_err(db("read leader"))?
            .map(|r| r.get::<_, String>(0))
            .unwrap_or_default();
        Ok(Role::Standby { leader })
    }
}

#[async_trait]
impl Store for PgStore {
    fn describe(&self) -> String {
        format!("postgres {}", redact(&self.url))
    }

    async fn lead(&mut self, key: &Key) -> Result<Role, StoreError> {
        self.reconnect_if_lost().await?;
        if let Some((led, epoch)) = &self.leading {
            if led == key {
                let now: Option<i64> = self
                    .client
                    .query_opt(
                        "SELECT epoch FROM orca_pool.records WHERE kind = $1 AND owner = $2 AND pool = $3",
                        &[&key.kind, &key.owner, &key.pool],
                    )
                    .await
                    .map_err(db("read epoch"))?
                    .map(|r| r.get(0));
                if now == Some(*epoch) {
                    return Ok(Role::Leader);
                }
                // Someone else took it: this session cannot hold the lock any more.
                self.leading = None;
                return self.standby(key).await;
            }
        }
        let got: bool = self
            .client
            .query_one(
                "SELECT pg_try_advisory_lock(hashtextextended($1, 0))",
                &[&lock_key(key)],
            )
            .await
            .map_err(db("take the lead"))?
            .get(0);
        if !got {
            return self.standby(key).await;
        }
        let replica = self.replica.clone();
        let tx = self
            .client
            .transaction()
            .await
            .map_err(db("take the lead"))?;
        tx.execute(
            "INSERT INTO orca_pool.records (kind, owner, pool) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
            &[&key.kind, &key.owner, &key.pool],
        )
        .await
        .map_err(db("take the lead"))?;
        let epoch: i64 = tx
            .query_one(
                "UPDATE orca_pool.records SET epoch = epoch + 1, leader = $4, leader_since = now()
                 WHERE kind = $1 AND owner = $2 AND pool = $3 RETURNING epoch",
                &[&key.kind, &key.owner, &key.pool, &replica],
            )
            .await
            .map_err(db("take the lead"))?
            .get(0);
        tx.execute(
            "INSERT INTO orca_pool.events (kind, owner, pool, epoch, replica, event, detail)
             VALUES ($1, $2, $3, $4, $5, 'leader', '{}')",
            &[&key.kind, &key.owner, &key.pool, &epoch, &replica],
        )
        .await
        .map_err(db("take the lead"))?;
        tx.execute(
            "DELETE FROM orca_pool.events WHERE kind = $1 AND owner = $2 AND pool = $3 AND at < now() - interval '30 days'",
            &[&key.kind, &key.owner, &key.pool],
        )
        .await
        .map_err(db("prune events"))?;
        tx.commit().await.map_err(db("take the lead"))?;
        self.leading = Some((key.clone(), epoch));
        tracing::info!(key = %key, epoch, replica = %self.replica, "took the lead");
        Ok(Role::Leader)
    }

    async fn load(&mut self, key: &Key) -> Result<Option<Record>, StoreError> {
        let Some(row) = self
            .client
            .query_opt(
                "SELECT established, next_number, conflict, writer FROM orca_pool.records WHERE kind = $1 AND owner = $2 AND pool = $3",
                &[&key.kind, &key.owner, &key.pool],
            )
            .await
            .map_err(db("read record"))?
        else {
            return Ok(None);
        };
        let mut record = Record::new(key.clone());
        record.established = row.get(0);
        record.next = u64::try_from(row.get::<_, i64>(1)).unwrap_or(0);
        record.conflict = row.get(2);
        record.writer = row.get(3);
        for r in self
            .client
            .query(
                "SELECT name, machine_type, location, phase, machine_id, intent_at, created_at,
                        unhealthy_since, changed_at, note, leftovers
                 FROM orca_pool.machines WHERE kind = $1 AND owner = $2 AND pool = $3",
                &[&key.kind, &key.owner, &key.pool],
            )
            .await
            .map_err(db("read machines"))?
        {
            let name: String = r.get(0);
            let phase: String = r.get(3);
            let phase = Phase::from_word(&phase).ok_or_else(|| {
                StoreError::Failed(format!("machine {name}: unknown phase {phase:?}"))
            })?;
            record.entries.insert(
                name.clone(),
                Entry {
                    name,
                    offering: Offering {
                        machine_type: r.get(1),
                        location: r.get(2),
                    },
                    phase,
                    id: r.get(4),
                    intent_at: r.get(5),
                    created_at: r.get(6),
                    unhealthy_since: r.get(7),
                    changed_at: r.get(8),
                    note: r.get(9),
                    leftovers: r.get(10),
                },
            );
        }
        for r in self
            .client
            .query(
                "SELECT offering, until FROM orca_pool.cooling WHERE kind = $1 AND owner = $2 AND pool = $3",
                &[&key.kind, &key.owner, &key.pool],
            )
            .await
            .map_err(db("read cooling"))?
        {
            record
                .cooling
                .insert(r.get::<_, String>(0), r.get::<_, Timestamp>(1));
        }
        Ok(Some(record))
    }

    async fn commit(&mut self, record: &Record, events: &[Event]) -> Result<(), StoreError> {
        let key = &record.key;
        let epoch = self.leading_epoch(key)?;
        let replica = self.replica.clone();
        let tx = self.client.transaction().await.map_err(lost_session)?;
        if let Err(e) = check_epoch(&tx, key, epoch).await {
            drop(tx);
            self.leading = None;
            return Err(e);
        }
        write_record(&tx, record).await?;
        write_machines(&tx, record, events).await?;
        if events.iter().any(|e| matches!(e, Event::Cooling { .. })) {
            write_cooling(&tx, record).await?;
        }
        write_events(&tx, key, epoch, &replica, events).await?;
        tx.commit().await.map_err(lost_session)?;
        Ok(())
    }

    fn lost(&self) -> Option<watch::Receiver<bool>> {
        Some(self.lost.clone())
    }
}

impl PgStore {
    /// The epoch this replica leads `key` at; fails when it does not lead it, or its session is gone.
    fn leading_epoch(&mut self, key: &Key) -> Result<i64, StoreError> {
        let epoch = match &self.leading {
            Some((led, epoch)) if led == key => *epoch,
            _ => {
                return Err(StoreError::LostLeadership(format!(
                    "replica {} does not lead {key}",
                    self.replica
                )))
            }
        };
        if *self.lost.borrow() {
            self.leading = None;
            return Err(StoreError::LostLeadership(format!(
                "the database session of replica {} that held the lead of {key} is gone",
                self.replica
            )));
        }
        Ok(epoch)
    }
}

/// A failed statement on the session that holds the lead: the lead is lost.
fn lost_session(e: tokio_postgres::Error) -> StoreError {
    StoreError::LostLeadership(format!(
        "could not record on the session that holds the lead ({})",
        describe_pg(&e)
    ))
}

/// Fails unless the record's epoch is still `epoch` (no other replica took the lead), locking the
/// record's row for the transaction.
async fn check_epoch(tx: &Transaction<'_>, key: &Key, epoch: i64) -> Result<(), StoreError> {
    let now: Option<i64> = tx
        .query_opt(
            "SELECT epoch FROM orca_pool.records WHERE kind = $1 AND owner = $2 AND pool = $3 FOR UPDATE",
            &[&key.kind, &key.owner, &key.pool],
        )
        .await
        .map_err(lost_session)?
        .map(|r| r.get(0));
    if now == Some(epoch) {
        return Ok(());
    }
    Err(StoreError::LostLeadership(format!(
        "another replica took the lead of {key} (epoch {} after {epoch})",
        now.map(|n| n.to_string()).unwrap_or_else(|| "none".into())
    )))
}

/// The record's own row.
async fn write_record(tx: &Transaction<'_>, record: &Record) -> Result<(), StoreError> {
    let key = &record.key;
    let next = i64::try_from(record.next).unwrap_or(i64::MAX);
    tx.execute(
        "UPDATE orca_pool.records SET established = $4, next_number = $5, conflict = $6,
             writer = $7, updated_at = now()
         WHERE kind = $1 AND owner = $2 AND pool = $3",
        &[
            &key.kind,
            &key.owner,
            &key.pool,
            &record.established,
            &next,
            &record.conflict,
            &record.writer,
        ],
    )
    .await
    .map_err(db("write record"))?;
    Ok(())
}

/// The rows of the machines `events` name (or pruned): written as the record has them, deleted when
/// it no longer has them.
async fn write_machines(
    tx: &Transaction<'_>,
    record: &Record,
    events: &[Event],
) -> Result<(), StoreError> {
    let key = &record.key;
    for name in super::named(events) {
        match record.entries.get(name) {
            Some(e) => write_machine(tx, key, e).await?,
            None => {
                tx.execute(
                    "DELETE FROM orca_pool.machines WHERE kind = $1 AND owner = $2 AND pool = $3 AND name = $4",
                    &[&key.kind, &key.owner, &key.pool, &name],
                )
                .await
                .map_err(db("write machine"))?;
            }
        }
    }
    Ok(())
}

async fn write_machine(tx: &Transaction<'_>, key: &Key, e: &Entry) -> Result<(), StoreError> {
    tx.execute(
        "INSERT INTO orca_pool.machines (kind, owner, pool, name, machine_type, location, phase,
             machine_id, intent_at, created_at, unhealthy_since, changed_at, note, leftovers)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
         ON CONFLICT (kind, owner, pool, name) DO UPDATE SET
             machine_type = EXCLUDED.machine_type, location = EXCLUDED.location,
             phase = EXCLUDED.phase, machine_id = EXCLUDED.machine_id,
             intent_at = EXCLUDED.intent_at, created_at = EXCLUDED.created_at,
             unhealthy_since = EXCLUDED.unhealthy_since, changed_at = EXCLUDED.changed_at,
             note = EXCLUDED.note, leftovers = EXCLUDED.leftovers",
        &[
            &key.kind,
            &key.owner,
            &key.pool,
            &e.name,
            &e.offering.machine_type,
            &e.offering.location,
            &e.phase.as_str(),
            &e.id,
            &e.intent_at,
            &e.created_at,
            &e.unhealthy_since,
            &e.changed_at,
            &e.note,
            &e.leftovers,
        ],
    )
    .await
    .map_err(db("write machine"))?;
    Ok(())
}

/// The offerings that rest, as the record has them.
async fn write_cooling(tx: &Transaction<'_>, record: &Record) -> Result<(), StoreError> {
    let key = &record.key;
    tx.execute(
        "DELETE FROM orca_pool.cooling WHERE kind = $1 AND owner = $2 AND pool = $3",
        &[&key.kind, &key.owner, &key.pool],
    )
    .await
    .map_err(db("write cooling"))?;
    for (offering, until) in &record.cooling {
        tx.execute(
            "INSERT INTO orca_pool.cooling (kind, owner, pool, offering, until) VALUES ($1, $2, $3, $4, $5)",
            &[&key.kind, &key.owner, &key.pool, offering, until],
        )
        .await
        .map_err(db("write cooling"))?;
    }
    Ok(())
}

/// The events, in the event log.
async fn write_events(
    tx: &Transaction<'_>,
    key: &Key,
    epoch: i64,
    replica: &str,
    events: &[Event],
) -> Result<(), StoreError> {
    for e in events {
        let detail = serde_json::to_string(e).unwrap_or_default();
        tx.execute(
            "INSERT INTO orca_pool.events (kind, owner, pool, epoch, replica, event, name, detail)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            &[
                &key.kind,
                &key.owner,
                &key.pool,
                &epoch,
                &replica,
                &e.kind(),
                &e.name(),
                &detail,
            ],
        )
        .await
        .map_err(db("write event"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_the_driver_reads_otherwise_than_meant_is_never_shown() {
        // An unencoded '@' in the password: the driver takes the credentials up to the first '@'.
        let shown = redact("postgres://pool:p@ss@db/k");
        assert!(!shown.contains("ss@") && !shown.contains("ss"), "{shown}");
        // A password in the query: everything before its '@' is read as the user.
        let shown = redact("postgres://db/k?user=pool&password=s3cret@x");
        assert!(!shown.contains("s3cret"), "{shown}");
        let shown = redact("postgres://db/k?user=pool&password=s3cret");
        assert!(!shown.contains("s3cret"), "{shown}");
        // A user read from garbage (a '/' in the password before its '@') may hold the password.
        let shown = redact("postgres://pool/s3cret:x@db/k");
        assert!(!shown.contains("s3cret"), "{shown}");
    }

    #[test]
    fn servers_are_named_by_host_and_port_without_the_password() {
        let named = |url: &str| servers(&url.parse().unwrap());
        assert_eq!(
            named("postgres://app:hunter2@db.example:6432/k"),
            "db.example:6432"
        );
        assert_eq!(
            named("host=/run/postgresql,10.0.0.2 port=5433 password=hunter2"),
            "/run/postgresql (socket, port 5433), 10.0.0.2:5433"
        );
        let shown = named("postgres://app:p@ss@db/k");
        assert!(!shown.contains("ss"), "{shown}");
        assert_eq!(named("dbname=k"), "the default host, port 5432");
    }

    #[test]
    fn urls_lose_their_password() {
        assert_eq!(
            redact("postgres://app:hunter2@db:5432/k?sslmode=disable"),
            "postgres://app:***@db:5432/k"
        );
        assert_eq!(
            redact("postgres://postgres@127.0.0.1:5432/postgres"),
            "postgres://postgres@127.0.0.1:5432/postgres"
        );
        assert_eq!(redact("host=x password=y"), "<not a URL>");
        // A password the driver reads from the query; one with an unencoded '@' makes the URL
        // read otherwise than meant, and nothing of it is shown.
        assert_eq!(
            redact("postgres://db/k?user=app&password=p%40ss"),
            "postgres://app:***@db:5432/k"
        );
        let shown = redact("postgres://db/k?user=app&password=p@ss");
        assert!(!shown.contains("p@ss") && !shown.contains("ss"), "{shown}");
        let shown = redact("postgres://app:p@ss@db/k");
        assert!(!shown.contains("p@ss") && !shown.contains("ss@"), "{shown}");
        let shown = redact("postgres://app:ab@cd/ef@db/k");
        assert!(!shown.contains("cd") && !shown.contains("ef"), "{shown}");
        assert_eq!(
            redact("postgresql://app:hunter2@a:5432,b:5433/k"),
            "postgresql://app:***@a:5432,b:5433/k"
        );
    }
}
