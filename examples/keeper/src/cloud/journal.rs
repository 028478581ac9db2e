//! The VM journal `keeper.cloud_vms`: one row per VM a `created` step asks a cloud for, written
//! before the cloud is asked, so that what was made is never forgotten.
//!
//! A row moves `requested` -> `made` (the VM id known) -> `recorded` (its soul exists), or ends
//! `failed` (nothing made), `kept` (made, its step failed and the VM could not be destroyed) or
//! `destroyed`. Every move goes through one statement ([`move_row`]).

use deadpool_postgres::GenericClient;

use super::Keeper;
use crate::db::begin;
use crate::error::{db_error, Result};

/// A journal row's move to a new state.
#[derive(Debug, Clone)]
pub(crate) struct JournalUpdate {
    /// The row.
    pub id: i64,
    /// Its new state.
    pub state: &'static str,
    /// The VM's id, when the move learns it.
    pub vm_id: Option<String>,
    /// The VM's SID, when the move learns it.
    pub sid: Option<String>,
    /// Why; `None` keeps the row's detail.
    pub detail: Option<String>,
    /// Move the row only from this state (`None`: from any): of two writers racing for one row,
    /// only the first moves it.
    pub from: Option<&'static str>,
}

impl JournalUpdate {
    /// Row `id` to `state`, saying `detail`.
    pub fn new(id: i64, state: &'static str, detail: impl Into<String>) -> Self {
        JournalUpdate {
            id,
            state,
            vm_id: None,
            sid: None,
            detail: Some(detail.into()),
            from: None,
        }
    }

    /// The same move, learning the VM's id.
    pub fn vm(mut self, vm_id: Option<&str>) -> Self {
        self.vm_id = vm_id.map(str::to_string);
        self
    }

    /// The same move, only from `state`.
    pub fn from(mut self, state: &'static str) -> Self {
        self.from = Some(state);
        self
    }

    /// The same move, learning the VM's SID.
    pub fn sid(mut self, sid: Option<String>) -> Self {
        self.sid = sid;
        self
    }
}

/// Moves one row through `c` (a transaction, or a connection); answers whether it moved (a move
/// `from` a state the row has left moves nothing).
pub(crate) async fn move_row<C: GenericClient>(c: &C, u: &JournalUpdate) -> Result<bool> {
    let moved = c
        .execute(
            "UPDATE keeper.cloud_vms SET state = $2, vm_id = COALESCE($3, vm_id),
             sid = COALESCE($4, sid), detail = COALESCE($5, detail), updated_at = now()
             WHERE id = $1 AND ($6::text IS NULL OR state = $6)",
            &[&u.id, &u.state, &u.vm_id, &u.sid, &u.detail, &u.from],
        )
        .await
        .map_err(db_error("journal"))?;
    Ok(moved == 1)
}

/// Moves one row of the resize journal `keeper.vm_resizes` (`resizing` -> `done` or `started`)
/// through `c`, as [`move_row`] moves the VM journal's (its `vm_id` and `sid` are not used).
pub(crate) async fn move_resize<C: GenericClient>(c: &C, u: &JournalUpdate) -> Result<bool> {
    let moved = c
        .execute(
            "UPDATE keeper.vm_resizes SET state = $2, detail = COALESCE($3, detail), updated_at = now()
             WHERE id = $1 AND ($4::text IS NULL OR state = $4)",
            &[&u.id, &u.state, &u.detail, &u.from],
        )
        .await
        .map_err(db_error("resize journal"))?;
    Ok(moved == 1)
}

impl Keeper {
    /// Moves one journal row; answers whether it moved (see [`move_row`]).
    pub(super) async fn journal(&self, u: JournalUpdate) -> Result<bool> {
        let client = self.pool.get().await?;
        move_row(&client, &u).await
    }

    /// Moves several journal rows, each to its state, in one transaction: all of them or none.
    pub(super) async fn journal_all(&self, updates: &[JournalUpdate]) -> Result<()> {
        if updates.is_empty() {
            return Ok(());
        }
        let mut client = self.pool.get().await?;
        let tx = begin(&mut client).await?;
        for u in updates {
            move_row(&tx, u).await?;
        }
        tx.commit().await.map_err(db_error("commit the journal"))?;
        Ok(())
    }
}
