//! The fault layer: errors, latency, lost answers and hangs by operation, and gates that hold calls.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::watch;

use super::{Answer, Call, Layer, Next, Op};
use crate::error::{Error, ErrorKind, Result};
use crate::kit::no_stock;

/// What an injected fault does to one call.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Fault {
    /// The call is refused with an error of this kind before it reaches the inner provider, so it
    /// changes nothing ([`Error::made_nothing`] for a refusal kind). No stock on a create is the
    /// create's own outcome, [`Created::NoStock`](crate::Created::NoStock), as a driver answers it.
    Fail(ErrorKind),
    /// The call reaches the inner provider and acts; then the caller gets an error of this kind,
    /// marked as one an attempt may have acted on ([`Error::may_have_acted`]).
    FailAfter(ErrorKind),
    /// The call reaches the inner provider and acts; its answer is lost: the caller gets a passing
    /// failure ([`Error::Transient`]), the ambiguous failure of a dropped connection.
    LoseAnswer,
    /// The call waits this long (on tokio's clock), then runs.
    Latency(Duration),
    /// The call never answers: what a process stopped mid-call looks like to the code above.
    Hang,
}

/// Where a gate of [`Faults::hold`] holds a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Point {
    /// Before the call reaches the inner provider (and before any fault).
    Before,
    /// After the inner provider answered, before the caller gets the answer.
    After,
}

#[derive(Debug)]
struct Rule {
    op: Option<Op>,
    fault: Fault,
    skip: u32,
    remaining: u32,
}

#[derive(Debug)]
struct Gate {
    held: watch::Sender<bool>,
    entered: watch::Sender<usize>,
}

impl Gate {
    async fn pass(&self) {
        self.entered.send_modify(|n| *n += 1);
        let mut held = self.held.subscribe();
        // The sender lives as long as the gate: the wait ends when the gate is released.
        let released = held.wait_for(|h| !*h).await.is_ok();
        debug_assert!(released);
    }
}

#[derive(Debug, Default)]
struct State {
    rules: Vec<Rule>,
    applied: u64,
    gates: HashMap<(Op, Point), Arc<Gate>>,
}

/// A layer that injects faults by operation, for the code above a provider (a program's tests, a
/// chaos run): errors before or after the inner call, lost answers, latency and hangs, and gates
/// that hold every call of an operation until released. Cheap to clone: the clones share the
/// faults, so a test keeps one while the layered provider holds another.
///
/// Faults apply to whole calls as the caller sees them: above the driver's retries (a driver's own
/// retry never sees them). A fault applies to the next calls of its operation, `times` of them, in
/// the order the faults were injected.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use orca_machines::layer::{Fault, Faults, Layered, Op};
/// use orca_machines::{memory::MemoryCloud, ErrorKind, MachineSpec, Provider};
/// let cloud = MemoryCloud::new();
/// let faults = Faults::new();
/// let p = Layered::new(cloud.provider("stack-1")?, faults.clone());
/// let spec = MachineSpec::new("w-1", "amd64-small", "zone-a", "lab");
/// faults.inject(Op::Create, Fault::Fail(ErrorKind::Quota), 1);
/// assert!(p.create(&spec).await.unwrap_err().made_nothing());
/// faults.inject(Op::Create, Fault::LoseAnswer, 1);
/// assert!(!p.create(&spec).await.unwrap_err().made_nothing());
/// assert!(p.machine_named("lab", "w-1").await?.is_some(), "the lost create made it");
/// # Ok::<(), orca_machines::Error>(()) }).unwrap();
/// ```
#[derive(Debug, Clone, Default)]
pub struct Faults {
    state: Arc<Mutex<State>>,
}

impl Faults {
    /// No fault, no gate held.
    pub fn new() -> Self {
        Self::default()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Gives the next `times` calls of `op` the fault.
    pub fn inject(&self, op: Op, fault: Fault, times: u32) {
        self.push(Some(op), fault, 0, times);
    }

    /// Gives the next `times` calls of any operation the fault.
    pub fn inject_any(&self, fault: Fault, times: u32) {
        self.push(None, fault, 0, times);
    }

    /// Lets the next `skip` calls of `op` pass, then gives the `times` after them the fault (the
    /// second create from now hangs: `inject_after(Op::Create, 1, Fault::Hang, 1)`).
    pub fn inject_after(&self, op: Op, skip: u32, fault: Fault, times: u32) {
        self.push(Some(op), fault, skip, times);
    }

    fn push(&self, op: Option<Op>, fault: Fault, skip: u32, times: u32) {
        if times > 0 {
            self.state().rules.push(Rule {
                op,
                fault,
                skip,
                remaining: times,
            });
        }
    }

    /// Removes every fault not yet applied (gates stay as they are).
    pub fn clear(&self) {
        self.state().rules.clear();
    }

    /// How many faults were applied so far.
    pub fn applied(&self) -> u64 {
        self.state().applied
    }

    /// Holds every call of `op` at `at` until [`Faults::release`].
    pub fn hold(&self, op: Op, at: Point) {
        self.gate(op, at).held.send_replace(true);
    }

    /// Lets the calls of `op` held at `at` go on, and the next ones pass.
    pub fn release(&self, op: Op, at: Point) {
        self.gate(op, at).held.send_replace(false);
    }

    /// How many calls of `op` reached `at` so far (held or not).
    pub fn entered(&self, op: Op, at: Point) -> usize {
        *self.gate(op, at).entered.borrow()
    }

    /// Waits until `n` calls of `op` in all have reached `at` (a test's sign that a held call is
    /// now held).
    pub async fn until_entered(&self, op: Op, at: Point, n: usize) {
        let mut entered = self.gate(op, at).entered.subscribe();
        let reached = entered.wait_for(|c| *c >= n).await.is_ok();
        debug_assert!(reached);
    }

    fn gate(&self, op: Op, at: Point) -> Arc<Gate> {
        self.state()
            .gates
            .entry((op, at))
            .or_insert_with(|| {
                Arc::new(Gate {
                    held: watch::channel(false).0,
                    entered: watch::channel(0).0,
                })
            })
            .clone()
    }

    /// The fault for this call of `op`, if one applies: every rule for `op` that still lets calls
    /// pass counts this one; the first rule ready gives its fault.
    fn take(&self, op: Op) -> Option<Fault> {
        let mut s = self.state();
        let mut chosen = None;
        for r in s.rules.iter_mut().filter(|r| r.op.is_none_or(|o| o == op)) {
            if r.skip > 0 {
                r.skip -= 1;
            } else if chosen.is_none() && r.remaining > 0 {
                r.remaining -= 1;
                chosen = Some(r.fault.clone());
            }
        }
        s.rules.retain(|r| r.remaining > 0);
        if chosen.is_some() {
            s.applied += 1;
        }
        chosen
    }
}

/// The error of an injected fault of `kind` on `op`.
fn injected(op: Op, kind: ErrorKind) -> Error {
    Error::of_kind(kind, format!("injected fault on {op}")).with_operation(op.as_str())
}

/// The answer of a call refused by a fault of `kind` before it reached the inner provider.
fn refused(call: &Call<'_>, kind: ErrorKind) -> Result<Answer> {
    match (call, kind) {
        (Call::Create { spec }, ErrorKind::NoStock) => Ok(Answer::Created(no_stock(
            spec,
            "injected fault on create: no stock",
        ))),
        _ => Err(injected(call.op(), kind)),
    }
}

#[async_trait]
impl Layer for Faults {
    async fn around(&self, call: Call<'_>, next: Next<'_>) -> Result<Answer> {
        let op = call.op();
        self.gate(op, Point::Before).pass().await;
        let answer = match self.take(op) {
            None => next.run(call).await,
            Some(Fault::Latency(d)) => {
                tokio::time::sleep(d).await;
                next.run(call).await
            }
            Some(Fault::Hang) => std::future::pending().await,
            Some(Fault::Fail(kind)) => refused(&call, kind),
            Some(Fault::FailAfter(kind)) => {
                let acted = next.run(call).await;
                tracing::debug!(%op, answered = acted.is_ok(), "injected fault after the call");
                Err(injected(op, kind).with_may_have_acted())
            }
            Some(Fault::LoseAnswer) => {
                let acted = next.run(call).await;
                tracing::debug!(%op, answered = acted.is_ok(), "injected lost answer");
                Err(Error::transient(format!(
                    "injected fault on {op}: the answer was lost after the call"
                ))
                .with_operation(op.as_str())
                .with_may_have_acted())
            }
        };
        self.gate(op, Point::After).pass().await;
        answer
    }
}
