//! PostgreSQL: the connection pool ([`Db`]) and the versioned migrations run on start.
//!
//! Every table lives in the schema [`SCHEMA`] (`keeper`), so that keeper shares a server with other
//! programs (the pool autoscaler keeps its own schema). Migrations are numbered SQL files
//! (`migrations/NNNN_name.sql`), applied in order, all pending ones in one transaction under an
//! advisory lock (two keepers starting at once apply each exactly once); each applied migration is
//! recorded with the SHA-256 of its text, and a changed or unknown applied migration stops keeper.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{
    Manager, ManagerConfig, Object, Pool, PoolError, RecyclingMethod, Runtime, Status, TimeoutType,
    Transaction,
};
use orca_scaler::store::postgres::{redact, servers};
use tokio_postgres::NoTls;

use crate::error::{db_error, describe_db, Error, Result};

/// The schema keeper's tables live in.
pub const SCHEMA: &str = "keeper";

/// The database keeper uses when `DATABASE_URL` is not set.
pub const DEFAULT_DATABASE_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// The advisory lock key migrations are applied under ("keeper" in ASCII).
const MIGRATION_LOCK: i64 = 0x6b_65_65_70_65_72;

/// A migration: its version, name and SQL.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    /// Its number, from 1, without gaps.
    pub version: i32,
    /// Its name.
    pub name: &'static str,
    /// Its SQL.
    pub sql: &'static str,
}

/// Every migration, in order.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "registries",
        sql: include_str!("../migrations/0001_registries.sql"),
    },
    Migration {
        version: 2,
        name: "vm_pool",
        sql: include_str!("../migrations/0002_vm_pool.sql"),
    },
    Migration {
        version: 3,
        name: "vm_resizes",
        sql: include_str!("../migrations/0003_vm_resizes.sql"),
    },
];

/// How long a step or a request waits for a connection of the pool (all of them in use) or for a new
/// one to be made, before it fails naming the database pool.
pub const POOL_WAIT: Duration = Duration::from_secs(30);

/// keeper's connections to its database: a pool for queries, a pool for the sessions holding advisory
/// locks, and the server it connects to (host and port, never the password), which every connection
/// failure names.
///
/// The lock sessions have a pool of their own: a step holds its lock session for its whole run and
/// still needs connections for its queries meanwhile, so that, sharing one pool, as many running
/// steps as connections would hold them all and wait on each other until the pool's wait ran out.
/// Both pools are bounded, so keeper never opens more than [`Db::max_connections`] at once.
#[derive(Debug, Clone)]
pub struct Db {
    pool: Pool,
    locks: Pool,
    server: Arc<str>,
}

impl Db {
    /// A connection of the pool; a failure names the server or the exhausted pool (503,
    /// `registry.unavailable`).
    pub async fn get(&self) -> Result<Object> {
        self.pool
            .get()
            .await
            .map_err(|e| unavailable(&e, &self.server, "database pool"))
    }

    /// A connection of the lock sessions' pool (see [`Db`]); a failure names the server or the
    /// exhausted pool, as [`Db::get`]'s does.
    pub(crate) async fn lock_session(&self) -> Result<Object> {
        self.locks
            .get()
            .await
            .map_err(|e| unavailable(&e, &self.server, "database pool of lock sessions"))
    }

    /// The server: `host:port` (every one of them, when the URL names several).
    pub fn server(&self) -> &str {
        &self.server
    }

    /// The most connections to the server this keeper opens at once.
    pub fn max_connections(&self) -> usize {
        self.pool.status().max_size + self.locks.status().max_size
    }

    /// How many connections the pool has, and how many of them are free.
    pub fn status(&self) -> Status {
        self.pool.status()
    }
}

/// A transaction on `client` (500, `registry.failed`, when it cannot begin).
pub async fn begin(client: &mut Object) -> Result<Transaction<'_>> {
    client.transaction().await.map_err(db_error("begin"))
}

/// The error of a connection `server` could not give, from the pool called `pool`.
fn unavailable(e: &PoolError, server: &str, pool: &str) -> Error {
    let detail = match e {
        PoolError::Backend(pe) => format!("to {server}: {}", describe_db(pe)),
        PoolError::Timeout(TimeoutType::Wait) => format!("the {pool} is exhausted: every connection stayed in use past the pool's wait (long steps, or too many at once)"),
        PoolError::Timeout(TimeoutType::Create) => format!("to {server}: the {pool} could not open a new connection within its wait"),
        other => format!("to {server}: the {pool}: {other}"),
    };
    Error::new(
        503,
        "registry.unavailable",
        format!("no PostgreSQL connection {detail}"),
    )
}

/// Connection pools on `url` (a `postgres://` URL or a key=value string), of at most `max_size`
/// connections for queries and as many for lock sessions; a caller waits at most [`POOL_WAIT`] for
/// one.
pub fn pool(url: &str, max_size: usize) -> Result<Db> {
    pool_with_wait(url, max_size, POOL_WAIT)
}

/// [`pool`] whose callers wait at most `wait` for a connection (for a free one, and for a new one to
/// be made).
pub fn pool_with_wait(url: &str, max_size: usize, wait: Duration) -> Result<Db> {
    let cfg = tokio_postgres::Config::from_str(url).map_err(|e| {
        Error::config(format!(
            "DATABASE_URL {}: not a PostgreSQL URL: {e}",
            redact(url)
        ))
        .with_field("DATABASE_URL")
    })?;
    Ok(Db {
        server: servers(&cfg).into(),
        pool: bounded(cfg.clone(), max_size, wait)?,
        locks: bounded(cfg, max_size, wait)?,
    })
}

/// A pool on `cfg` of at most `max_size` connections, whose callers wait at most `wait`.
fn bounded(cfg: tokio_postgres::Config, max_size: usize, wait: Duration) -> Result<Pool> {
    let mgr = Manager::from_config(
        cfg,
        NoTls,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(mgr)
        .max_size(max_size.max(1))
        .runtime(Runtime::Tokio1)
        .wait_timeout(Some(wait))
        .create_timeout(Some(wait))
        .build()
        .map_err(|e| Error::config(format!("connection pool: {e}")))
}

fn checksum(sql: &str) -> String {
    hex::encode(crate::tokens::sha256(sql))
}

/// Applies the pending migrations; answers the versions applied now (empty when none was pending).
pub async fn migrate(pool: &Db) -> Result<Vec<i32>> {
    let mut client = pool.get().await?;
    let tx = client
        .transaction()
        .await
        .map_err(db_error("begin migrations"))?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(db_error("migration lock"))?;
    // Only the first start creates the schema: later starts need no privilege to create anything
    // unless a migration is pending.
    let sql = format!("SELECT to_regclass('{SCHEMA}.schema_migrations') IS NOT NULL");
    let known: bool = tx
        .query_one(&sql, &[])
        .await
        .map_err(db_error("read schema_migrations"))?
        .get(0);
    if !known {
        tx.batch_execute(&format!(
            "CREATE SCHEMA IF NOT EXISTS {SCHEMA};
             CREATE TABLE {SCHEMA}.schema_migrations (
                 version    integer PRIMARY KEY,
                 name       text NOT NULL,
                 checksum   text NOT NULL,
                 applied_at timestamptz NOT NULL DEFAULT now()
             );"
        ))
        .await
        .map_err(db_error("create schema_migrations"))?;
    }
    let sql =
        format!("SELECT version, name, checksum FROM {SCHEMA}.schema_migrations ORDER BY version");
    let rows = tx
        .query(&sql, &[])
        .await
        .map_err(db_error("read schema_migrations"))?;
    for row in &rows {
        let (version, name, sum): (i32, String, String) = (row.get(0), row.get(1), row.get(2));
        let Some(m) = MIGRATIONS.iter().find(|m| m.version == version) else {
            return Err(Error::schema(format!("the database has migration {version} ({name}), which this keeper does not know: it is newer than this keeper")));
        };
        if checksum(m.sql) != sum {
            return Err(Error::schema(format!("migration {version} ({name}) was applied with other SQL than this keeper's (checksum differs)")));
        }
    }
    let mut applied = Vec::new();
    for m in MIGRATIONS {
        if rows.iter().any(|r| r.get::<_, i32>(0) == m.version) {
            continue;
        }
        tx.batch_execute(m.sql).await.map_err(|e| {
            Error::schema(format!(
                "migration {} ({}) failed: {}",
                m.version,
                m.name,
                describe_db(&e)
            ))
        })?;
        let insert = format!(
            "INSERT INTO {SCHEMA}.schema_migrations (version, name, checksum) VALUES ($1, $2, $3)"
        );
        tx.execute(&insert, &[&m.version, &m.name, &checksum(m.sql)])
            .await
            .map_err(db_error("record migration"))?;
        applied.push(m.version);
    }
    tx.commit().await.map_err(db_error("commit migrations"))?;
    if !applied.is_empty() {
        tracing::info!(versions = ?applied, "applied migrations");
    }
    Ok(applied)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_are_numbered_from_one_without_gaps() {
        for (i, m) in MIGRATIONS.iter().enumerate() {
            assert_eq!(m.version as usize, i + 1, "{}", m.name);
            assert!(m.sql.contains("keeper."), "{} keeps to its schema", m.name);
        }
    }

    #[test]
    fn the_server_is_named_by_host_and_port_without_the_password() {
        let db = pool("postgres://app:hunter2@db.example:6432/k", 1).unwrap();
        assert_eq!(db.server(), "db.example:6432");
        let db = pool(
            "host=/run/postgresql,10.0.0.2 port=5433 password=hunter2",
            1,
        )
        .unwrap();
        assert_eq!(
            db.server(),
            "/run/postgresql (socket, port 5433), 10.0.0.2:5433"
        );
    }
}
