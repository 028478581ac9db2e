//! Cleaning up after a name given up: a create that failed, or whose answer was never seen, may have
//! left pieces beside its machine (a boot disk, an interface, an address) that no listing shows
//! and `delete(id)` cannot name. They are removed by name (`Provider::delete_named`) before the name
//! is forgotten: the entry keeps its mark ([`Entry::leftovers`](crate::Entry::leftovers)) until that
//! call succeeds, so that a failed call is tried again by a later pass and the name is not pruned
//! before.

use tokio::sync::Mutex;

use super::act::Shared;
use super::concurrency::Kind;
use super::PassCtx;
use crate::record::{Event, Phase};
use crate::report::Action;
use crate::store::StoreError;

/// A name to clean up after, and why.
#[derive(Debug, Clone)]
pub(crate) struct CleanJob {
    pub name: String,
    pub why: String,
}

impl CleanJob {
    /// The clean-up due for the entry of `name` in `s`'s record: one given up (retired or gone)
    /// whose creates may have left pieces.
    pub fn due(s: &Shared<'_>, name: &str) -> Option<CleanJob> {
        let e = s.record.entries.get(name)?;
        (e.leftovers && matches!(e.phase, Phase::Retired | Phase::Gone)).then(|| CleanJob {
            name: name.to_string(),
            why: format!("given up ({}); its create may have left pieces", e.note),
        })
    }
}

/// Removes by name what the creates of `c.name` may have left, unless the pass starts nothing more
/// (the cloud throttles, another writer was met): then a later pass does, as the mark stays.
pub(super) async fn clean_job(
    sh: &Mutex<Shared<'_>>,
    cx: PassCtx<'_>,
    c: CleanJob,
) -> Result<(), StoreError> {
    {
        let mut s = sh.lock().await;
        if !s.may_start(Kind::Delete, "-", &format!("the clean-up after {}", c.name)) {
            return Ok(());
        }
    }
    // The shared lock is not held across the call: other jobs write their outcomes meanwhile.
    let r = cx.p.delete_named(&cx.key.pool, &c.name).await;
    let mut s = sh.lock().await;
    match r {
        Ok(removed) => cleaned(&mut s, c, removed).await,
        Err(err) => clean_failed(&mut s, cx, c, err).await,
    }
}

/// The clean-up succeeded: the mark is cleared, and the name is pruned after the retention as any
/// other retired or gone name.
async fn cleaned(s: &mut Shared<'_>, c: CleanJob, removed: bool) -> Result<(), StoreError> {
    if let Some(e) = s.record.entries.get_mut(&c.name) {
        e.leftovers = false;
    }
    s.commit(vec![Event::Cleaned {
        name: c.name.clone(),
        removed,
    }])
    .await?;
    s.actions.push(Action::Cleaned {
        name: c.name,
        removed,
        why: c.why,
    });
    Ok(())
}

/// The clean-up failed (a piece could not be removed, or the call itself failed): the name stays
/// marked, and the next pass tries again.
async fn clean_failed(
    s: &mut Shared<'_>,
    cx: PassCtx<'_>,
    c: CleanJob,
    err: orca::Error,
) -> Result<(), StoreError> {
    if let Some(e) = s.record.entries.get_mut(&c.name) {
        e.note = format!("its clean-up by name failed (the next pass tries again): {err}");
    }
    s.commit(vec![Event::Failed {
        name: c.name.clone(),
        error: format!("clean-up by name: {err}"),
    }])
    .await?;
    s.throttle(cx, Kind::Delete, &err);
    s.actions.push(Action::Failed {
        operation: "delete_named".into(),
        doing: format!(
            "remove by name what the creates of {} left, {} (the name stays recorded; the next pass tries again)",
            c.name, c.why
        ),
        error: err.to_string(),
    });
    Ok(())
}
