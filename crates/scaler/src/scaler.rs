//! The [`Scaler`]: its settings, the store of its record, and one pass at a time, led or stood by.

use orca::{Provider, Timestamp};

use crate::pass::concurrency::Concurrency;
use crate::pass::{self, PassCtx};
use crate::record::{Key, Record};
use crate::report::PassReport;
use crate::store::{Role, Store, StoreError};
use crate::Settings;

/// The autoscaler: its settings and the store of its record.
#[derive(Debug)]
pub struct Scaler {
    /// Its settings.
    pub settings: Settings,
    store: Box<dyn Store>,
    record: Option<Record>,
    /// Conflicts met whose write failed (or was cut off): written on the next pass this replica
    /// leads, before anything else, so that the other writer's machine is never taken for this
    /// record's own (its name is still recorded as creating).
    unrecorded: Vec<pass::Unrecorded>,
    /// How many calls a pass runs at once: up to `settings.parallel`, fewer after the cloud throttled.
    concurrency: Concurrency,
}

impl Scaler {
    /// A scaler of `settings` keeping its record in `store`.
    pub fn new(settings: Settings, store: Box<dyn Store>) -> Self {
        Scaler {
            concurrency: Concurrency::new(),
            settings,
            store,
            record: None,
            unrecorded: Vec::new(),
        }
    }

    /// The record as the last pass left it (`None` before the first pass, or after a pass that
    /// stopped early).
    pub fn record(&self) -> Option<&Record> {
        self.record.as_ref()
    }

    /// How many creates and deletes the next pass runs at once: [`Settings::parallel`] until the
    /// cloud throttles, then half as many, one more back after each round of calls it did not throttle.
    pub fn concurrency(&self) -> usize {
        self.concurrency.limit(self.settings.parallel)
    }

    /// The store.
    pub fn store(&self) -> &dyn Store {
        &*self.store
    }

    /// Resolves once this replica's store has lost the lead it may hold (PostgreSQL: the session
    /// that held the lock is gone), at once when it already has; never for a store that cannot
    /// lose it. A program watches it between passes to stop showing this replica as the leader.
    pub async fn lead_lost(&self) {
        match self.store.lost() {
            Some(mut rx) => {
                let _ = rx.wait_for(|lost| *lost).await;
            }
            None => std::future::pending().await,
        }
    }

    /// One pass at time `now` on `p`: bring the pool to its size, if this replica leads.
    pub async fn pass(&mut self, p: &dyn Provider, now: Timestamp) -> PassReport {
        let key = Key::new(p.kind(), p.owner(), &self.settings.pool);
        let mut report = PassReport::new(&key, self.settings.size, now);
        self.record = None;
        match self.store.lead(&key).await {
            Ok(Role::Leader) => {}
            Ok(standby) => {
                report.role = standby;
                return report;
            }
            Err(e) => {
                report.stopped = Some(e.to_string());
                return report;
            }
        }
        let lost = self.store.lost();
        let settings = self.settings.clone();
        let cx = PassCtx {
            settings: &settings,
            p,
            now,
            key: &key,
            concurrency: &self.concurrency,
        };
        let run = pass::run(&mut *self.store, &mut self.unrecorded, cx, &mut report);
        let result = match lost {
            Some(mut rx) => {
                tokio::select! {
                    r = run => r,
                    _ = async move { let _ = rx.wait_for(|lost| *lost).await; } => Err(StoreError::LostLeadership(
                        "the database session that held the lead is gone: stopped at once".into(),
                    )),
                }
            }
            None => run.await,
        };
        match result {
            Ok(record) => self.record = record,
            Err(e) => report.stopped = Some(e.to_string()),
        }
        report
    }
}
