//! PostgreSQL session advisory locks, shared by every keeper on one database:
//! - a running `created` step holds its step's lock ([`step_key`]), so that the reconciler leaves the
//!   journal rows of a step still running alone, and two reconcilers never resolve one step twice;
//! - a VM's lock ([`vm_key`]) is held while the VM is looked up and destroyed, so that of two steps
//!   destroying one VM at once only the one that found it counts it.
//!
//! The locks live in a session of their own, taken out of the connection pool: a step may run for
//! minutes, and neither it nor a caller waiting for a lock keeps a pooled connection from the others.
//! The session ends when its [`LockSession`] is dropped, and its locks with it, so that a keeper that
//! stops, or is killed, lets go of every lock it held.

use std::time::Duration;

use deadpool_postgres::ClientWrapper;

use crate::db::Db;
use crate::error::{db_error, describe_db, Error, Result};

/// How long a caller waits for a lock that another holds (a VM another step is destroying).
pub(crate) const LOCK_WAIT: Duration = Duration::from_secs(600);

/// The lock a running `created` step holds for its whole run.
pub(crate) fn step_key(step_id: &str) -> String {
    format!("keeper.step/{step_id}")
}

/// The lock held while VM `vm_id` of `provider` is looked up and destroyed.
pub(crate) fn vm_key(provider: &str, vm_id: &str) -> String {
    format!("keeper.cloud_vm/{provider}/{vm_id}")
}

/// A PostgreSQL session of its own, for advisory locks.
pub(crate) struct LockSession {
    client: ClientWrapper,
}

impl LockSession {
    /// A session taken out of `pool` (the pool makes another connection in its place).
    pub(crate) async fn open(pool: &Db) -> Result<Self> {
        let client = deadpool_postgres::Object::take(pool.get().await?);
        client
            .batch_execute(&format!("SET lock_timeout = '{}s'", LOCK_WAIT.as_secs()))
            .await
            .map_err(db_error("open a lock session"))?;
        Ok(LockSession { client })
    }

    /// A session holding `key`, for as long as it lives (or until [`LockSession::release`]).
    pub(crate) async fn holding(pool: &Db, key: &str) -> Result<Self> {
        let session = Self::open(pool).await?;
        if !session.try_lock(key).await? {
            return Err(Error::new(
                500,
                "registry.failed",
                format!("the lock {key} is held by another session"),
            ));
        }
        Ok(session)
    }

    /// A transaction in this session, begun only while the session still holds `key`. A session
    /// that ends lets its locks go and takes its open transaction with it, so a commit of this
    /// transaction proves the lock was held until then: no other session can have taken it
    /// meanwhile. `registry.lock_lost` when the session or the lock is gone.
    pub(crate) async fn transaction_holding(
        &mut self,
        key: &str,
    ) -> Result<deadpool_postgres::Transaction<'_>> {
        let lost = |why: String| {
            Error::new(
                500,
                "registry.lock_lost",
                format!("the lock {key} was lost ({why})"),
            )
        };
        let tx = self
            .client
            .transaction()
            .await
            .map_err(|e| lost(describe_db(&e)))?;
        // An advisory lock on a bigint key is listed as its high and low 32 bits.
        let held: bool = tx
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted
                   AND pid = pg_backend_pid() AND objsubid = 1
                   AND ((classid::bigint << 32) | objid::bigint) = hashtextextended($1, 0))",
                &[&key],
            )
            .await
            .map_err(|e| lost(describe_db(&e)))?
            .get(0);
        if !held {
            return Err(lost("the session no longer holds it".to_string()));
        }
        Ok(tx)
    }

    /// Takes `key` when no other session holds it; answers whether it did.
    pub(crate) async fn try_lock(&self, key: &str) -> Result<bool> {
        let row = self
            .client
            .query_one(
                "SELECT pg_try_advisory_lock(hashtextextended($1, 0))",
                &[&key],
            )
            .await
            .map_err(db_error("take a lock"))?;
        Ok(row.get(0))
    }

    /// Takes `key`, waiting at most [`LOCK_WAIT`] for another session to let it go (then the error's
    /// SQLSTATE is `55P03`).
    pub(crate) async fn lock(&self, key: &str) -> std::result::Result<(), tokio_postgres::Error> {
        self.client
            .execute("SELECT pg_advisory_lock(hashtextextended($1, 0))", &[&key])
            .await
            .map(|_| ())
    }

    /// Lets `key` go. `Ok(true)` also proves it was held all along; `Ok(false)` or an error means the
    /// session (and the lock) ended meanwhile.
    pub(crate) async fn unlock(
        &self,
        key: &str,
    ) -> std::result::Result<bool, tokio_postgres::Error> {
        let row = self
            .client
            .query_one(
                "SELECT pg_advisory_unlock(hashtextextended($1, 0))",
                &[&key],
            )
            .await?;
        Ok(row.get(0))
    }

    /// Lets `key` go now (rather than when the server notices the session closed), and ends the
    /// session.
    pub(crate) async fn release(self, key: &str) {
        if let Err(e) = self.unlock(key).await {
            tracing::debug!(lock = %key, error = %e, "lock: the session ended before its release");
        }
    }
}
