//! PostgreSQL session advisory locks, shared by every keeper on one database:
//! - a running `created` or `resized` step holds its step's lock ([`step_key`]), so that the
//!   reconciler leaves the journal rows of a step still running alone, and two reconcilers never resolve one step twice;
//! - a VM's lock ([`vm_key`]) is held while the VM is looked up and destroyed, so that of two steps
//!   destroying one VM at once only the one that found it counts it.
//!
//! The locks live in a session of their own, a connection of the lock sessions' pool ([`Db`]): a step
//! may run for minutes, and neither it nor a caller waiting for a lock keeps a connection of the
//! queries' pool from the others; and as that pool is bounded, so are the sessions, however many
//! steps run (a step beyond them waits for one, then fails naming the pool).
//!
//! Advisory locks and settings belong to the session, not to a transaction, so a connection goes back
//! to the pool only through [`LockSession::close`], which lets every lock go and resets the setting
//! first: the next user of the connection inherits neither. A session dropped without it (a failure
//! on the way, a step cancelled, a keeper stopping) is closed instead, and the server lets its locks
//! go as the session ends.

use std::time::Duration;

use deadpool_postgres::Object;

use crate::db::Db;
use crate::error::{db_error, describe_db, Error, Result};

/// How long a caller waits for a lock that another holds (a VM another step is destroying).
pub(crate) const LOCK_WAIT: Duration = Duration::from_secs(600);

/// How often a caller waiting for a lock tries it again ([`LockSession::lock`]).
const LOCK_POLL: Duration = Duration::from_millis(200);

/// The lock a running `created` or `resized` step holds for its whole run.
pub(crate) fn step_key(step_id: &str) -> String {
    format!("keeper.step/{step_id}")
}

/// The lock held while VM `vm_id` of `provider` is looked up and destroyed.
pub(crate) fn vm_key(provider: &str, vm_id: &str) -> String {
    format!("keeper.cloud_vm/{provider}/{vm_id}")
}

/// A PostgreSQL session of its own, for advisory locks: a connection of the lock sessions' pool, lent
/// until [`LockSession::close`].
pub(crate) struct LockSession {
    /// `None` once closed or dropped.
    client: Option<Object>,
}

impl LockSession {
    /// A session of `pool`'s lock sessions.
    pub(crate) async fn open(pool: &Db) -> Result<Self> {
        let session = LockSession {
            client: Some(pool.lock_session().await?),
        };
        session
            .client()
            .batch_execute(&format!("SET lock_timeout = '{}s'", LOCK_WAIT.as_secs()))
            .await
            .map_err(db_error("open a lock session"))?;
        Ok(session)
    }

    fn client(&self) -> &Object {
        self.client
            .as_ref()
            .expect("a session is used only until it is closed")
    }

    /// A session holding `key`, until it is closed (or dropped).
    pub(crate) async fn holding(pool: &Db, key: &str) -> Result<Self> {
        let session = Self::open(pool).await?;
        if !session.try_lock(key).await? {
            session.close().await;
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
        let lost = |why: String| Error::lock_lost(format!("the lock {key} was lost ({why})"));
        let tx = self
            .client
            .as_mut()
            .expect("a session is used only until it is closed")
            .transaction()
            .await
            .map_err(|e| lost(describe_db(&e)))?;
        // An advisory lock on a bigint key is listed as its high and low 32 bits.
        let sql = "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted
                   AND pid = pg_backend_pid() AND objsubid = 1
                   AND ((classid::bigint << 32) | objid::bigint) = hashtextextended($1, 0))";
        let held: bool = tx
            .query_one(sql, &[&key])
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
        let sql = "SELECT pg_try_advisory_lock(hashtextextended($1, 0))";
        let row = self.client().query_one(sql, &[&key]).await;
        Ok(row.map_err(db_error("take a lock"))?.get(0))
    }

    /// Takes `key`, waiting at most [`LOCK_WAIT`] for another session to let it go; answers whether
    /// it did.
    ///
    /// The wait is a try every [`LOCK_POLL`], not `pg_advisory_lock`: a backend blocked on a lock
    /// does not notice that its client is gone, so a caller that gave up its wait (a cancelled step)
    /// would leave its session queued on the server until the lock came free or `lock_timeout` ran
    /// out, beside the session the pool opens in its place: keeper's connections would pass their
    /// bound. Between tries nothing waits on the server.
    pub(crate) async fn lock(&self, key: &str) -> std::result::Result<bool, tokio_postgres::Error> {
        let deadline = tokio::time::Instant::now() + LOCK_WAIT;
        loop {
            let sql = "SELECT pg_try_advisory_lock(hashtextextended($1, 0))";
            if self.client().query_one(sql, &[&key]).await?.get(0) {
                return Ok(true);
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Ok(false);
            }
            tokio::time::sleep(LOCK_POLL.min(deadline - now)).await;
        }
    }

    /// Lets `key` go. `Ok(true)` also proves it was held all along; `Ok(false)` or an error means the
    /// session (and the lock) ended meanwhile.
    pub(crate) async fn unlock(
        &self,
        key: &str,
    ) -> std::result::Result<bool, tokio_postgres::Error> {
        let sql = "SELECT pg_advisory_unlock(hashtextextended($1, 0))";
        Ok(self.client().query_one(sql, &[&key]).await?.get(0))
    }

    /// Lets every lock of the session go, resets its lock wait and gives its connection back to the
    /// pool; a session that cannot be cleaned (it ended, or the server fails) is closed instead.
    pub(crate) async fn close(mut self) {
        let Some(client) = self.client.take() else {
            return;
        };
        // Both outlive any transaction: returned as they are, the next user of the pooled connection
        // would hold these locks without knowing, and wait as long as a lock session does.
        if let Err(e) = client
            .batch_execute("SELECT pg_advisory_unlock_all(); RESET lock_timeout")
            .await
        {
            tracing::debug!(error = %describe_db(&e), "lock: the session could not be cleaned, it is closed");
            discard(client);
        }
    }
}

impl Drop for LockSession {
    fn drop(&mut self) {
        // Not closed: it may still hold locks, and nothing can be awaited here to let them go, so the
        // connection is closed rather than returned to the pool; the server lets its locks go.
        if let Some(client) = self.client.take() {
            discard(client);
        }
    }
}

/// Closes `client`'s connection: taken out of its pool and dropped, its session ends.
fn discard(client: Object) {
    drop(Object::take(client));
}
