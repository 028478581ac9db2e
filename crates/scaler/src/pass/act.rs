//! Acting on a plan: deletes first, then the creates, as many at once as the cloud's pace allows (up to
//! `parallel`), each intent written before its call and each outcome after. A record that cannot be written stops everything at once.

use std::collections::BTreeSet;

use futures::stream::{FuturesUnordered, StreamExt};
use orca::{ErrorKind, Timestamp};
use tokio::sync::Mutex;

use super::clean::{self, CleanJob};
use super::concurrency::Kind;
use super::{create, PassCtx, Unrecorded};
use crate::record::{Entry, Event, Phase, Record};
use crate::report::{Action, PassReport};
use crate::store::{Store, StoreError};
use crate::Offering;

/// A delete to make.
#[derive(Debug, Clone)]
pub(crate) struct DeleteJob {
    pub name: String,
    pub id: String,
    pub offering: Offering,
    pub cause: &'static str,
    pub why: String,
    /// Not the machine the record's entry of its name stands for (a second machine of a recorded
    /// name, or another writer's machine carrying it): that entry stays as it is.
    pub duplicate: bool,
    /// Counted toward the size before the pass (a surplus delete lowers the count).
    pub counted: bool,
}

#[derive(Debug, Clone)]
pub(super) enum Job {
    Delete(DeleteJob),
    /// Remove by name what the creates of a name given up may have left.
    Clean(CleanJob),
    /// Retry the recorded create of this name (the driver adopts what an earlier attempt made).
    Retry(String),
    /// A new name from the first offering not resting.
    New,
}

/// What the jobs of a pass share, behind one lock: the record and its store, and what they did.
pub(super) struct Shared<'a> {
    pub record: Record,
    pub store: &'a mut dyn Store,
    pub actions: Vec<Action>,
    /// The cloud throttled without saying when: the pass starts nothing more.
    pub throttled: bool,
    /// By [`Kind`]: the cloud named a time for calls of that kind past what a pass waits. Only that
    /// kind's calls are left to the next passes; the other kind goes on, and nothing is halved.
    pub held: [bool; 2],
    pub made: usize,
    pub deleted_counted: usize,
    pub no_offering: usize,
    /// Offerings that answered no stock, or refused a create, in this pass: not tried again in it,
    /// whatever their rest (a cool-down of zero ends it at once, and the pass would otherwise pick
    /// the same offering under a new name without end).
    pub spent: BTreeSet<String>,
    /// Another writer was met: nothing more is started.
    pub conflict: Option<String>,
    /// Conflicts met and not yet written (the scaler's).
    pub unrecorded: &'a mut Vec<Unrecorded>,
}

impl Shared<'_> {
    pub async fn commit(&mut self, events: Vec<Event>) -> Result<(), StoreError> {
        self.store.commit(&self.record, &events).await
    }

    /// A call of `kind` failed with `err`: when the cloud throttled it, the pass starts nothing more
    /// (and halves how many run at once), unless the cloud said when to try again: then calls of
    /// that kind wait until that time.
    pub fn throttle(&mut self, cx: PassCtx<'_>, kind: Kind, err: &orca::Error) {
        if err.kind() != ErrorKind::Throttled {
            return;
        }
        match err.retry_after() {
            Some(after) => cx.concurrency.told_to_wait(kind, after),
            None => self.throttled = true,
        }
    }

    /// Whether a job making a call of `kind` may start: not after a conflict, nor once the cloud
    /// throttles, nor while that kind waits past the pass for the time the cloud named (said, as
    /// `what` left for the next pass, on `offering`).
    pub fn may_start(&mut self, kind: Kind, offering: &str, what: &str) -> bool {
        if self.conflict.is_some() {
            return false;
        }
        let why = if self.throttled {
            "the cloud throttles"
        } else if self.held[kind as usize] {
            "the cloud said when to try again, later than a pass waits"
        } else {
            return true;
        };
        self.actions.push(Action::Skipped {
            offering: offering.into(),
            reason: format!("{what} left for the next pass: {why}"),
        });
        false
    }
}

/// The jobs of a pass, in order: deletes, clean-ups, retried creates, new creates.
pub(super) fn jobs(
    deletes: Vec<DeleteJob>,
    cleans: Vec<CleanJob>,
    retries: Vec<String>,
    new: usize,
) -> Vec<Job> {
    let mut jobs: Vec<Job> = deletes.into_iter().map(Job::Delete).collect();
    jobs.extend(cleans.into_iter().map(Job::Clean));
    jobs.extend(retries.into_iter().map(Job::Retry));
    jobs.extend(std::iter::repeat_n(Job::New, new));
    jobs
}

/// Runs `jobs`, a bounded number at a time, and reports what they did. Returns the record as they left it.
pub(super) async fn act(
    store: &mut dyn Store,
    unrecorded: &mut Vec<Unrecorded>,
    record: Record,
    jobs: Vec<Job>,
    serving: usize,
    cx: PassCtx<'_>,
    report: &mut PassReport,
) -> Result<Option<Record>, StoreError> {
    let shared = Mutex::new(Shared {
        record,
        store,
        actions: Vec::new(),
        throttled: false,
        held: [false; 2],
        made: 0,
        deleted_counted: 0,
        no_offering: 0,
        spent: BTreeSet::new(),
        conflict: None,
        unrecorded,
    });
    let stopped = run_jobs(&shared, cx, jobs).await.err();
    let shared = shared.into_inner();
    report.actions.extend(shared.actions);
    if let Some(c) = shared.conflict {
        report.stopped = Some(c);
    }
    if shared.no_offering > 0 {
        report.actions.push(Action::Short {
            missing: shared.no_offering,
            why: "every offering is resting after no stock, or answered no stock (or refused) in this pass"
                .into(),
        });
    }
    report.serving = (serving + shared.made).saturating_sub(shared.deleted_counted);
    match stopped {
        Some(e) => Err(e),
        None => Ok(Some(shared.record)),
    }
}

/// Runs `jobs` in order, as many at once as the pass's [`Concurrency`](super::concurrency) allows,
/// telling it after each call whether the cloud throttled. A record that cannot be written stops
/// everything at once: the calls in flight are dropped.
async fn run_jobs(
    sh: &Mutex<Shared<'_>>,
    cx: PassCtx<'_>,
    jobs: Vec<Job>,
) -> Result<(), StoreError> {
    let bound = cx.settings.parallel;
    let mut waiting = jobs.into_iter();
    let mut running = FuturesUnordered::new();
    let mut throttled = false;
    loop {
        while running.len() < cx.concurrency.limit(bound) {
            match waiting.next() {
                // Whether the pass met a throttle is read inside the job's own future: a job may
                // hold the shared lock across an await, and only polling the jobs lets it go.
                Some(job) => running.push(async move {
                    run_job(sh, cx, job).await?;
                    Ok::<bool, StoreError>(sh.lock().await.throttled)
                }),
                None => break,
            }
        }
        let Some(done) = running.next().await else {
            return Ok(());
        };
        let now_throttled = done?;
        // One throttled burst halves once: the calls already in flight were started before the
        // cloud said so, and after it the pass starts nothing more.
        if throttled {
            continue;
        }
        if now_throttled {
            throttled = true;
            cx.concurrency.throttled(bound);
        } else {
            cx.concurrency.unthrottled(bound);
        }
    }
}

async fn run_job(sh: &Mutex<Shared<'_>>, cx: PassCtx<'_>, job: Job) -> Result<(), StoreError> {
    let kind = match job {
        Job::Delete(_) | Job::Clean(_) => Kind::Delete,
        Job::Retry(_) | Job::New => Kind::Create,
    };
    if !cx.concurrency.ready(kind).await {
        // The cloud named a time past what a pass waits for calls of this kind: those left are the
        // next passes'. The other kind goes on, and nothing is halved: the cloud said its pace.
        sh.lock().await.held[kind as usize] = true;
    }
    match job {
        Job::Delete(d) => delete_job(sh, cx, d).await,
        Job::Clean(c) => clean::clean_job(sh, cx, c).await,
        Job::Retry(name) => create::create_job(sh, cx, Some(name)).await,
        Job::New => create::create_job(sh, cx, None).await,
    }
}

async fn delete_job(
    sh: &Mutex<Shared<'_>>,
    cx: PassCtx<'_>,
    d: DeleteJob,
) -> Result<(), StoreError> {
    let (p, now) = (cx.p, cx.now);
    {
        let mut s = sh.lock().await;
        let what = format!("delete of {} ({})", d.name, d.id);
        if !s.may_start(Kind::Delete, &d.offering.to_string(), &what) {
            return Ok(());
        }
        intend_delete(&mut s, &d, now).await?;
    }
    let r = p.delete(&d.id).await;
    let mut s = sh.lock().await;
    match r {
        Ok(_) => deleted(&mut s, d, now).await,
        Err(err) => delete_failed(&mut s, cx, d, err).await,
    }
}

/// Records the delete before its call.
async fn intend_delete(
    s: &mut Shared<'_>,
    d: &DeleteJob,
    now: Timestamp,
) -> Result<(), StoreError> {
    if !d.duplicate {
        let e = s.record.entries.entry(d.name.clone()).or_insert(Entry {
            name: d.name.clone(),
            offering: d.offering.clone(),
            phase: Phase::Deleting,
            id: Some(d.id.clone()),
            intent_at: now,
            created_at: None,
            unhealthy_since: None,
            changed_at: now,
            note: String::new(),
            leftovers: false,
        });
        e.phase = Phase::Deleting;
        e.id = Some(d.id.clone());
        e.changed_at = now;
        e.note = d.why.clone();
    }
    s.commit(vec![Event::IntendDelete {
        name: d.name.clone(),
        id: d.id.clone(),
        why: d.why.clone(),
    }])
    .await
}

async fn deleted(s: &mut Shared<'_>, d: DeleteJob, now: Timestamp) -> Result<(), StoreError> {
    if !d.duplicate {
        if let Some(e) = s.record.entries.get_mut(&d.name) {
            e.phase = Phase::Gone;
            e.changed_at = now;
        }
    }
    s.commit(vec![Event::Gone {
        name: d.name.clone(),
        why: format!("deleted: {}", d.why),
    }])
    .await?;
    if d.counted {
        s.deleted_counted += 1;
    }
    s.actions.push(Action::Deleted {
        name: d.name,
        id: d.id,
        cause: d.cause.into(),
        why: d.why,
    });
    Ok(())
}

async fn delete_failed(
    s: &mut Shared<'_>,
    cx: PassCtx<'_>,
    d: DeleteJob,
    err: orca::Error,
) -> Result<(), StoreError> {
    if let Some(e) = s.record.entries.get_mut(&d.name) {
        if !d.duplicate {
            e.note = format!("{}; last delete failed: {err}", d.why);
        }
        // A delete that removed the machine but not everything beside it names what it left:
        // once the machine is gone, only a removal by name reaches those pieces. A duplicate's
        // pieces carry the same name as the entry's own machine, so the entry keeps the mark
        // (for a second machine of the name too): they are removed once the entry is retired or
        // gone, never while a machine of the name is to stand.
        e.leftovers |= !err.left().is_empty();
    }
    s.commit(vec![Event::Failed {
        name: d.name.clone(),
        error: err.to_string(),
    }])
    .await?;
    s.throttle(cx, Kind::Delete, &err);
    s.actions.push(Action::Failed {
        operation: "delete".into(),
        doing: format!("delete {} ({}), {}", d.name, d.id, d.why),
        error: err.to_string(),
    });
    Ok(())
}
