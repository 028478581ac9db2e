//! The recording layer: every call by operation, its subject and outcome, the specs created, and
//! the calls in flight.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use super::{Answer, Call, Layer, Next, Op};
use crate::error::{ErrorKind, Result};
use crate::spec::MachineSpec;

/// One call as the [`Recorder`] saw it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Recorded {
    /// The operation.
    pub op: Op,
    /// What it was about ([`Call::subject`]).
    pub subject: String,
    /// The spec of a create.
    pub spec: Option<MachineSpec>,
    /// `None` while the call runs (or when it was dropped before it answered); then `Ok` or the
    /// error's kind.
    pub outcome: Option<std::result::Result<(), ErrorKind>>,
}

#[derive(Debug, Default)]
struct State {
    calls: Vec<Recorded>,
    in_flight: HashMap<Op, usize>,
    max_in_flight: HashMap<Op, usize>,
    /// How many times the record was cleared: a call that started before a clear does not write
    /// its outcome on another call's entry.
    clears: u64,
}

/// A layer that records every call that passes, in order: by operation, with its subject, the
/// spec of each create and the outcome, and counts the calls in flight (the most at once, per
/// operation). Cheap to clone: the clones share one record, so a test keeps one while the layered
/// provider holds another.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use orca_machines::layer::{Layered, Op, Recorder};
/// use orca_machines::{memory::MemoryCloud, ErrorKind, Provider};
/// let recorder = Recorder::new();
/// let p = Layered::new(MemoryCloud::new().provider("stack-1")?, recorder.clone());
/// p.machines("lab").await?;
/// assert!(p.delete("a/b").await.is_err());
/// assert_eq!((recorder.count(Op::Machines), recorder.count(Op::Delete)), (1, 1));
/// assert_eq!(recorder.subjects(Op::Delete), ["a/b"]);
/// assert_eq!(recorder.of(Op::Delete)[0].outcome, Some(Err(ErrorKind::InvalidSpec)));
/// # Ok::<(), orca_machines::Error>(()) }).unwrap();
/// ```
#[derive(Debug, Clone, Default)]
pub struct Recorder {
    state: Arc<Mutex<State>>,
}

impl Recorder {
    /// An empty record.
    pub fn new() -> Self {
        Self::default()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every call so far, in the order they started.
    pub fn calls(&self) -> Vec<Recorded> {
        self.state().calls.clone()
    }

    /// The calls of `op`, in order.
    pub fn of(&self, op: Op) -> Vec<Recorded> {
        self.state()
            .calls
            .iter()
            .filter(|c| c.op == op)
            .cloned()
            .collect()
    }

    /// How many calls of `op` started.
    pub fn count(&self, op: Op) -> usize {
        self.state().calls.iter().filter(|c| c.op == op).count()
    }

    /// How many calls of `op` answered an error.
    pub fn failed(&self, op: Op) -> usize {
        let failed = |c: &&Recorded| c.op == op && matches!(c.outcome, Some(Err(_)));
        self.state().calls.iter().filter(failed).count()
    }

    /// The subjects of the calls of `op` (the ids deleted, the pools listed, ...), in order.
    pub fn subjects(&self, op: Op) -> Vec<String> {
        self.of(op).into_iter().map(|c| c.subject).collect()
    }

    /// The spec of every create, in order.
    pub fn specs(&self) -> Vec<MachineSpec> {
        self.state()
            .calls
            .iter()
            .filter_map(|c| c.spec.clone())
            .collect()
    }

    /// Calls of `op` running now.
    pub fn in_flight(&self, op: Op) -> usize {
        self.state().in_flight.get(&op).copied().unwrap_or(0)
    }

    /// The most calls of `op` that ran at once.
    pub fn max_in_flight(&self, op: Op) -> usize {
        self.state().max_in_flight.get(&op).copied().unwrap_or(0)
    }

    /// Forgets every call recorded (the counts of calls in flight stay right).
    pub fn clear(&self) {
        let mut s = self.state();
        s.calls.clear();
        s.max_in_flight.clear();
        s.clears += 1;
    }

    fn start(&self, call: &Call<'_>) -> Running<'_> {
        let op = call.op();
        let mut s = self.state();
        s.calls.push(Recorded {
            op,
            subject: call.subject(),
            spec: match call {
                Call::Create { spec } => Some((*spec).clone()),
                _ => None,
            },
            outcome: None,
        });
        let index = s.calls.len() - 1;
        let now = {
            let n = s.in_flight.entry(op).or_insert(0);
            *n += 1;
            *n
        };
        let max = s.max_in_flight.entry(op).or_insert(0);
        *max = (*max).max(now);
        Running {
            recorder: self,
            op,
            index,
            clears: s.clears,
        }
    }
}

/// A call in flight: counted down when it ends, answered or dropped.
struct Running<'a> {
    recorder: &'a Recorder,
    op: Op,
    index: usize,
    clears: u64,
}

impl Running<'_> {
    fn answered(&self, outcome: &Result<Answer>) {
        let mut s = self.recorder.state();
        if s.clears == self.clears {
            if let Some(c) = s.calls.get_mut(self.index) {
                c.outcome = Some(outcome.as_ref().map(|_| ()).map_err(|e| e.kind()));
            }
        }
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        let mut s = self.recorder.state();
        if let Some(n) = s.in_flight.get_mut(&self.op) {
            *n = n.saturating_sub(1);
        }
    }
}

#[async_trait]
impl Layer for Recorder {
    async fn around(&self, call: Call<'_>, next: Next<'_>) -> Result<Answer> {
        let running = self.start(&call);
        let outcome = next.run(call).await;
        running.answered(&outcome);
        outcome
    }
}
