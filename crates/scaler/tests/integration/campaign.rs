//! The fault campaign: the scaler runs for at least 1,000 cloud operations with 20 % of them faulted
//! (errors of every kind, latency, answers lost after the machine was made) and process crashes
//! between any two steps, simulated by dropping the scaler and reloading its store: mid-call,
//! before or after the cloud acted; and at record writes, before a write lands, while it is written
//! (the file store's temporary file written but not renamed; PostgreSQL's transaction cut between
//! two statements) or after it landed, so between an intent and its outcome and between the two
//! writes of a delete; a record write may also just fail. After every crash the record read back
//! must be the last one that landed (the old one after a torn write). On the in-memory provider
//! (with the file store, and with two replicas on PostgreSQL in one run), on the fake Hetzner,
//! Compute Engine and Azure APIs, and on EC2 (moto behind the EC2 tests' proxy, under
//! `scripts/with-moto`; skipped without it, a failure under CI). At the end it prints and asserts:
//! machines leaked (in the cloud, not in the record, not deleted), duplicates (one name, two
//! machines), machines of another owner touched, and the final size against the target.
//!
//! Every random choice (faults, crashes, sizes, the operator, the weather) comes from one generator
//! seeded from `ORCA_CAMPAIGN_SEED`, or at random; each run prints its seed, so that a failure can be
//! replayed with the same choices (the order in which concurrent calls draw them can still differ).
//!
//! Run: `scripts/with-moto cargo test --workspace --test integration campaign:: -- --nocapture`

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use orca::layer::{Answer, Call as LayerCall, Layer, Layered, Next};
use orca::memory::{FaultKind, MemoryCloud, Operation};
use orca::{ErrorKind, Machine, MachineSpec, Provider, Status};
use orca_scaler::{
    Action, Event, FileStore, PassReport, PgStore, Phase, Record, Scaler, Settings, Store,
    StoreError,
};
use support::TestDb;

/// Cloud operations the campaign runs at least.
const OPERATIONS: usize = 1000;
/// The share of operations faulted.
const FAULT_RATE: f64 = 0.2;
/// The share of operations at which the process "crashes".
const CRASH_RATE: f64 = 0.03;
/// The share of record writes that fail or at which the process "crashes".
const WRITE_FAULT_RATE: f64 = 0.05;
/// The target at the end.
const TARGET: usize = 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Arch,
    Create,
    List,
    Read,
    Delete,
}

/// Injects one fault for the next call of an operation, chosen by the backend from `pick`.
type Injector = Arc<dyn Fn(Op, u32) + Send + Sync>;

/// The campaign's dice: one generator, shared by every random choice, so that a seed replays them.
#[derive(Debug)]
struct Dice {
    seed: u64,
    rng: Mutex<fastrand::Rng>,
}

impl Dice {
    /// Dice seeded from `ORCA_CAMPAIGN_SEED`, or at random; the seed is printed for `test`.
    fn new(test: &str) -> Arc<Dice> {
        let seed = match std::env::var("ORCA_CAMPAIGN_SEED") {
            Ok(s) if !s.trim().is_empty() => s
                .trim()
                .parse::<u64>()
                .unwrap_or_else(|e| panic!("ORCA_CAMPAIGN_SEED={s:?} is not a number: {e}")),
            _ => fastrand::u64(..),
        };
        // Written to the process's stderr itself, past the harness's capture: a failed run always
        // shows the seed that replays it.
        use std::io::Write;
        // The workspace's test form, not `-p orca-scaler`: that one unifies other features and
        // builds the SDK again. The EC2 campaign needs moto.
        let moto = if test.ends_with("_moto") {
            "scripts/with-moto "
        } else {
            ""
        };
        let _ = writeln!(
            std::io::stderr(),
            "fault campaign {test}: seed {seed} (replay: ORCA_CAMPAIGN_SEED={seed} {moto}cargo test --workspace --test integration campaign::{test} -- --nocapture)"
        );
        Arc::new(Dice {
            seed,
            rng: Mutex::new(fastrand::Rng::with_seed(seed)),
        })
    }

    fn rng(&self) -> std::sync::MutexGuard<'_, fastrand::Rng> {
        self.rng.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn chance(&self, p: f64) -> bool {
        self.rng().f64() < p
    }

    fn u32(&self) -> u32 {
        self.rng().u32(..)
    }

    fn bool(&self) -> bool {
        self.rng().bool()
    }

    fn below(&self, n: usize) -> usize {
        self.rng().usize(..n)
    }

    fn upto(&self, n: usize) -> usize {
        self.rng().usize(0..=n)
    }
}

#[derive(Debug, Default)]
struct Stats {
    ops: AtomicUsize,
    faults: AtomicUsize,
    /// Calls the scaler saw fail (an injected fault, no stock, or the cloud's own answer).
    errors: AtomicUsize,
    crashes: AtomicUsize,
    /// Crashes just before a cloud call, and just after it.
    crashed_before_call: AtomicUsize,
    crashed_after_call: AtomicUsize,
    /// Record writes asked for.
    writes: AtomicUsize,
    /// Faults at record writes: (the fault, the events the write carried) -> how many.
    write_faults: Mutex<BTreeMap<(WriteFault, String), usize>>,
    /// Records read back that were not the last one that landed (nor one whose write may have
    /// landed), and the first few, described.
    misread: AtomicUsize,
    misread_first: Mutex<Vec<String>>,
    /// Temporary files of a torn write still there after the next write landed.
    stale_temp: AtomicUsize,
    /// Every machine id seen for each name.
    names: Mutex<BTreeMap<String, BTreeSet<String>>>,
    /// Machines the operator deleted behind the scaler's back (their names may be made again).
    operator_deleted: Mutex<BTreeSet<String>>,
    /// Calls that named a machine of another owner (or pool).
    foreign_touched: AtomicUsize,
}

/// The layer of a replica's provider that injects faults and crashes and counts what it sees.
struct Chaos {
    stats: Arc<Stats>,
    inject: Injector,
    foreign: Arc<BTreeSet<String>>,
    crash: Arc<tokio::sync::Notify>,
    armed: Arc<AtomicBool>,
    dice: Arc<Dice>,
}

impl std::fmt::Debug for Chaos {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Chaos")
    }
}

#[derive(PartialEq)]
enum Crash {
    No,
    Before,
    After,
}

impl Chaos {
    fn step(&self, op: Op) -> Crash {
        self.stats.ops.fetch_add(1, Ordering::SeqCst);
        if !self.armed.load(Ordering::SeqCst) {
            return Crash::No;
        }
        if self.dice.chance(FAULT_RATE) {
            self.stats.faults.fetch_add(1, Ordering::SeqCst);
            (self.inject)(op, self.dice.u32());
        }
        if op != Op::Arch && self.dice.chance(CRASH_RATE) {
            self.stats.crashes.fetch_add(1, Ordering::SeqCst);
            if self.dice.bool() {
                self.stats
                    .crashed_before_call
                    .fetch_add(1, Ordering::SeqCst);
                Crash::Before
            } else {
                self.stats.crashed_after_call.fetch_add(1, Ordering::SeqCst);
                Crash::After
            }
        } else {
            Crash::No
        }
    }

    async fn crash_now<T>(&self) -> T {
        self.crash.notify_one();
        futures::future::pending::<T>().await
    }

    fn saw(&self, m: &Machine) {
        self.stats
            .names
            .lock()
            .unwrap()
            .entry(m.name.clone())
            .or_default()
            .insert(m.id.clone());
    }

    fn answered<T>(&self, r: &orca::Result<T>) {
        if r.is_err() {
            self.stats.errors.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn named(&self, id: &str) {
        if self.foreign.contains(id) {
            self.stats.foreign_touched.fetch_add(1, Ordering::SeqCst);
        }
    }
}

#[async_trait]
impl Layer for Chaos {
    async fn around(&self, call: LayerCall<'_>, next: Next<'_>) -> orca::Result<Answer> {
        let op = match call {
            LayerCall::Arch { .. } => Op::Arch,
            LayerCall::Create { .. } => Op::Create,
            LayerCall::Machines { .. } => Op::List,
            LayerCall::Machine { .. } => Op::Read,
            // A clean-up by name deletes as a delete does: it meets the same faults and crashes.
            LayerCall::Delete { .. } | LayerCall::DeleteNamed { .. } => Op::Delete,
            other => return next.run(other).await,
        };
        if let LayerCall::Machine { id } | LayerCall::Delete { id } = call {
            self.named(id);
        }
        let crash = self.step(op);
        if crash == Crash::Before {
            return self.crash_now().await;
        }
        let r = next.run(call).await;
        self.answered(&r);
        if let Ok(a) = &r {
            a.machines().into_iter().for_each(|m| self.saw(m));
        }
        if crash == Crash::After {
            return self.crash_now().await;
        }
        r
    }
}

/// A fault at a record write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum WriteFault {
    /// The write fails with an error (nothing written); the process goes on.
    Fail,
    /// The process crashes before the write starts.
    Before,
    /// The process crashes while the write is made: the file store's temporary file written (whole
    /// or in part) but not renamed over the record; PostgreSQL's transaction cut between two
    /// statements (landed or not, as the server got it).
    During,
    /// The process crashes just after the write landed, before the next step.
    After,
}

impl WriteFault {
    fn label(self) -> &'static str {
        match self {
            WriteFault::Fail => "failed",
            WriteFault::Before => "before",
            WriteFault::During => "during",
            WriteFault::After => "after",
        }
    }
}

/// What a record says, as far as the stores keep it alike (no timestamps or notes).
#[derive(Debug, Clone, PartialEq, Default)]
struct Shape {
    established: bool,
    next: u64,
    conflict: Option<String>,
    /// name -> (phase, id, offering)
    entries: BTreeMap<String, (Phase, Option<String>, String)>,
}

impl Shape {
    /// How `self` differs from `other`, in words.
    fn diff(&self, other: &Shape) -> String {
        let mut v = Vec::new();
        if self.established != other.established {
            v.push(format!(
                "established {} not {}",
                self.established, other.established
            ));
        }
        if self.next != other.next {
            v.push(format!("next {} not {}", self.next, other.next));
        }
        if self.conflict != other.conflict {
            v.push(format!(
                "conflict {:?} not {:?}",
                self.conflict, other.conflict
            ));
        }
        let names: BTreeSet<&String> = self.entries.keys().chain(other.entries.keys()).collect();
        for n in names {
            let (a, b) = (self.entries.get(n), other.entries.get(n));
            if a != b {
                v.push(format!("{n}: {a:?} not {b:?}"));
            }
        }
        v.join("; ")
    }

    fn of(r: Option<&Record>) -> Shape {
        match r {
            None => Shape::default(),
            Some(r) => Shape {
                established: r.established,
                next: r.next,
                conflict: r.conflict.clone(),
                entries: r
                    .entries
                    .values()
                    .map(|e| {
                        (
                            e.name.clone(),
                            (e.phase, e.id.clone(), e.offering.to_string()),
                        )
                    })
                    .collect(),
            },
        }
    }
}

/// What the record in the store must read, shared by the replicas of a campaign.
#[derive(Debug, Default)]
struct Durable {
    /// The record as the last write that surely landed left it.
    landed: Shape,
    /// Records of writes that may have landed (cut, failed, or not answered yet).
    doubt: Vec<Shape>,
    /// The temporary file of a torn write, which must be gone once the next write landed.
    torn: Option<std::path::PathBuf>,
}

/// A record store that fails or "crashes" the process at some writes (chosen by the dice), and
/// checks every record it reads against what was written.
struct Faulty {
    inner: Box<dyn Store>,
    /// The record file (the file store), for a torn write; `None` on PostgreSQL.
    file: Option<std::path::PathBuf>,
    crash: Arc<tokio::sync::Notify>,
    armed: Arc<AtomicBool>,
    dice: Arc<Dice>,
    stats: Arc<Stats>,
    durable: Arc<Mutex<Durable>>,
}

impl std::fmt::Debug for Faulty {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Faulty")
            .field("inner", &self.inner)
            .finish()
    }
}

impl Faulty {
    fn fault(&self) -> Option<WriteFault> {
        if !self.armed.load(Ordering::SeqCst) || !self.dice.chance(WRITE_FAULT_RATE) {
            return None;
        }
        Some(match self.dice.below(4) {
            0 => WriteFault::Fail,
            1 => WriteFault::Before,
            2 => WriteFault::During,
            _ => WriteFault::After,
        })
    }

    fn tally(&self, fault: WriteFault, events: &[Event]) {
        let mut kinds: Vec<&str> = Vec::new();
        for e in events {
            if !kinds.contains(&e.kind()) {
                kinds.push(e.kind());
            }
        }
        let what = kinds.join("+");
        *self
            .stats
            .write_faults
            .lock()
            .unwrap()
            .entry((fault, what))
            .or_default() += 1;
        if fault != WriteFault::Fail {
            self.stats.crashes.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn durable(&self) -> std::sync::MutexGuard<'_, Durable> {
        self.durable.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn crash_now<T>(&self) -> T {
        self.crash.notify_one();
        futures::future::pending::<T>().await
    }

    /// Writes what a crashed write of `record` leaves of the record file: its temporary file (the
    /// file store's name for it, with the crashed process's id, which is not the next one's), a
    /// random part of it or all, never renamed.
    fn tear(&self, path: &std::path::Path, record: &Record) {
        let name = path.file_name().unwrap().to_string_lossy();
        let pid = std::process::id() + 1 + self.dice.below(1000) as u32;
        let tmp = path.with_file_name(format!(".{name}.tmp-{pid}"));
        let bytes = serde_json::to_vec_pretty(&serde_json::json!({
            "format": orca_scaler::store::file::FORMAT,
            "records": [record],
        }))
        .unwrap();
        let cut = self.dice.upto(bytes.len());
        std::fs::write(&tmp, &bytes[..cut]).unwrap();
        self.durable().torn = Some(tmp);
    }

    /// The write landed: it is what the record must read from now on.
    fn landed(&self, shape: Shape) {
        let mut d = self.durable();
        d.landed = shape;
        d.doubt.clear();
        if let Some(tmp) = d.torn.take() {
            if tmp.exists() {
                self.stats.stale_temp.fetch_add(1, Ordering::SeqCst);
            }
        }
    }
}

#[async_trait]
impl Store for Faulty {
    fn describe(&self) -> String {
        self.inner.describe()
    }

    async fn lead(&mut self, key: &orca_scaler::Key) -> Result<orca_scaler::Role, StoreError> {
        self.inner.lead(key).await
    }

    async fn load(&mut self, key: &orca_scaler::Key) -> Result<Option<Record>, StoreError> {
        let r = self.inner.load(key).await?;
        let got = Shape::of(r.as_ref());
        let mut d = self.durable();
        let wrong = got != d.landed && !d.doubt.contains(&got);
        if wrong && self.stats.misread.fetch_add(1, Ordering::SeqCst) < 3 {
            self.stats.misread_first.lock().unwrap().push(format!(
                "read against the last record that landed: {}{}",
                got.diff(&d.landed),
                if d.doubt.is_empty() {
                    String::new()
                } else {
                    format!(" ({} more in doubt)", d.doubt.len())
                }
            ));
        }
        d.landed = got;
        d.doubt.clear();
        Ok(r)
    }

    async fn commit(&mut self, record: &Record, events: &[Event]) -> Result<(), StoreError> {
        self.stats.writes.fetch_add(1, Ordering::SeqCst);
        let fault = self.fault();
        let shape = Shape::of(Some(record));
        match fault {
            Some(WriteFault::Fail) => {
                self.tally(WriteFault::Fail, events);
                return Err(StoreError::Failed(
                    "injected: the record could not be written (no space left on device)".into(),
                ));
            }
            Some(WriteFault::Before) => {
                self.tally(WriteFault::Before, events);
                return self.crash_now().await;
            }
            Some(WriteFault::During) => {
                if let Some(path) = self.file.clone() {
                    self.tear(&path, record);
                    self.tally(WriteFault::During, events);
                    return self.crash_now().await;
                }
                // Cut the transaction after a few round trips to the server.
                self.durable().doubt.push(shape.clone());
                let polls = 1 + self.dice.below(8);
                let mut write = self.inner.commit(record, events);
                let mut pending = 0;
                let done = std::future::poll_fn(|cx| match write.as_mut().poll(cx) {
                    std::task::Poll::Ready(r) => std::task::Poll::Ready(Some(r)),
                    std::task::Poll::Pending => {
                        pending += 1;
                        if pending >= polls {
                            std::task::Poll::Ready(None)
                        } else {
                            std::task::Poll::Pending
                        }
                    }
                })
                .await;
                drop(write);
                match done {
                    None => self.tally(WriteFault::During, events),
                    // Done before the cut: a crash after the write (or after it failed).
                    Some(r) => {
                        if r.is_ok() {
                            self.landed(shape);
                        }
                        self.tally(WriteFault::After, events);
                    }
                }
                return self.crash_now().await;
            }
            Some(WriteFault::After) | None => {}
        }
        self.durable().doubt.push(shape.clone());
        let r = self.inner.commit(record, events).await;
        if r.is_ok() {
            self.landed(shape);
        }
        if fault == Some(WriteFault::After) {
            self.tally(WriteFault::After, events);
            return self.crash_now().await;
        }
        r
    }

    fn lost(&self) -> Option<tokio::sync::watch::Receiver<bool>> {
        self.inner.lost()
    }

    fn notes(&self) -> Vec<String> {
        self.inner.notes()
    }
}

type Truth = Arc<
    dyn Fn() -> Pin<Box<dyn Future<Output = (Vec<Machine>, Vec<Machine>)> + Send>> + Send + Sync,
>;

/// Makes a provider (a new one each call: a restarted process makes its own).
type Make = Arc<dyn Fn() -> Pin<Box<dyn Future<Output = Arc<dyn Provider>> + Send>> + Send + Sync>;

/// What an operator does behind the scaler's back; the id of a machine it deleted.
type Operator = Arc<dyn Fn(&[Machine], &Dice) -> Option<String> + Send + Sync>;

/// The cloud's stock changing now and then (an offering out of stock, or back), when the backend can.
type Weather = Arc<dyn Fn(&Dice) + Send + Sync>;

/// One backend under test.
struct Backend {
    /// Our owner's provider (a new one each call: a restarted process makes its own).
    provider: Make,
    inject: Injector,
    /// Clears the faults and restores the stock; how many injected faults no request ever met, when
    /// the backend can tell.
    clear: Arc<dyn Fn() -> Option<usize> + Send + Sync>,
    weather: Option<Weather>,
    /// (our machines of the pool, the other owner's and other pool's machines), read without faults.
    truth: Truth,
    requests: Arc<dyn Fn() -> u64 + Send + Sync>,
    offers: Vec<String>,
    /// Things an operator does behind the scaler's back (stop, delete), when the backend can; the id
    /// of a machine it deleted.
    operator: Option<Operator>,
    now: Arc<dyn Fn() -> orca::Timestamp + Send + Sync>,
}

#[derive(Debug)]
struct Figures {
    seed: u64,
    ops: usize,
    requests: u64,
    faults: usize,
    /// Injected faults no request met (left when the campaign ended), when the backend can tell.
    unmet: Option<usize>,
    errors: usize,
    no_stock: usize,
    fallback: usize,
    /// Names given up after a create that may have left pieces, cleaned up by name.
    cleaned: usize,
    crashes: usize,
    /// How long the campaign ran.
    elapsed: Duration,
    crashed_before_call: usize,
    crashed_after_call: usize,
    /// Record writes asked for, and the faults at them by kind and by what the write carried.
    writes: usize,
    write_faults: BTreeMap<(WriteFault, String), usize>,
    /// What a crash during a write leaves, on this store.
    during: &'static str,
    misread: usize,
    misread_first: Vec<String>,
    stale_temp: usize,
    passes: usize,
    leaked: usize,
    duplicates: usize,
    foreign_touched: usize,
    deleted_as_unknown: usize,
    final_size: usize,
    target: usize,
}

impl Figures {
    fn print(&self, name: &str) {
        println!(
            "fault campaign {name} (seed {}): {} cloud operations ({} requests), {} faults injected ({:.1} % of operations; {}), {} crashes, {} passes, {:.1} s",
            self.seed,
            self.ops,
            self.requests,
            self.faults,
            100.0 * self.faults as f64 / self.ops.max(1) as f64,
            match self.unmet {
                Some(n) => format!("{} met by a request, {n} never", self.faults - n),
                None => "each on the next call of its operation".into(),
            },
            self.crashes,
            self.passes,
            self.elapsed.as_secs_f64()
        );
        println!(
            "  calls the scaler saw fail:         {} (a driver retries throttling, server errors and lost answers within a call)",
            self.errors
        );
        let by = |f: WriteFault| -> usize {
            self.write_faults
                .iter()
                .filter(|((k, _), _)| *k == f)
                .map(|(_, n)| n)
                .sum()
        };
        println!(
            "  crashes:                           {} at cloud calls ({} just before a call, {} just after it); {} at record writes ({} before a write, {} during one ({}), {} after one landed)",
            self.crashed_before_call + self.crashed_after_call,
            self.crashed_before_call,
            self.crashed_after_call,
            by(WriteFault::Before) + by(WriteFault::During) + by(WriteFault::After),
            by(WriteFault::Before),
            by(WriteFault::During),
            self.during,
            by(WriteFault::After),
        );
        println!(
            "  record writes:                     {}, {} of them failed with an error (the process went on)",
            self.writes,
            by(WriteFault::Fail)
        );
        for f in [
            WriteFault::Before,
            WriteFault::During,
            WriteFault::After,
            WriteFault::Fail,
        ] {
            let mut at: Vec<(&str, usize)> = self
                .write_faults
                .iter()
                .filter(|((k, _), _)| *k == f)
                .map(|((_, what), n)| (what.as_str(), *n))
                .collect();
            at.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
            let at: Vec<String> = at.iter().map(|(w, n)| format!("{w} {n}")).collect();
            println!(
                "    {:<32} {}",
                format!("{} the write of:", f.label()),
                if at.is_empty() {
                    "-".to_string()
                } else {
                    at.join(", ")
                }
            );
        }
        println!(
            "  records read back wrong:           {} (each read must be the last record that landed, or one whose write was cut)",
            self.misread
        );
        for m in &self.misread_first {
            println!("    {m}");
        }
        if self.during.starts_with("temp") {
            println!(
                "  temp files left by torn writes:    {} (removed when the record is next opened)",
                self.stale_temp
            );
        }
        println!(
            "  no stock:                          {} answers; {} machines made from a fallback offering",
            self.no_stock, self.fallback
        );
        println!(
            "  clean-ups by name:                 {} (names given up after a create that may have left pieces)",
            self.cleaned
        );
        println!("  machines leaked:                   {}", self.leaked);
        println!("  duplicates:                        {}", self.duplicates);
        println!(
            "  machines of another owner touched: {}",
            self.foreign_touched
        );
        println!(
            "  own machines deleted as unknown:   {}",
            self.deleted_as_unknown
        );
        println!(
            "  final size:                        {} of target {}",
            self.final_size, self.target
        );
    }

    fn check(&self) {
        assert!(self.ops >= OPERATIONS, "{self:?}");
        assert_eq!(self.leaked, 0, "{self:?}");
        assert_eq!(self.duplicates, 0, "{self:?}");
        assert_eq!(self.foreign_touched, 0, "{self:?}");
        assert_eq!(self.deleted_as_unknown, 0, "{self:?}");
        assert_eq!(self.final_size, self.target, "{self:?}");
        assert_eq!(self.misread, 0, "{self:?}");
        assert_eq!(self.stale_temp, 0, "{self:?}");
    }
}

fn settings(b: &Backend, size: usize) -> Settings {
    let mut s = Settings::new(
        "lab",
        size,
        b.offers.iter().map(|o| o.parse().unwrap()).collect(),
    );
    s.grace = Duration::ZERO;
    s.settle = Duration::ZERO;
    s.cooldown = Duration::from_millis(200);
    s.parallel = 3;
    s
}

/// One replica: a scaler slot that a crash empties, and its chaos-wrapped provider.
struct Replica {
    name: String,
    scaler: Option<Scaler>,
    chaos: Layered<Arc<dyn Provider>, Chaos>,
    crash: Arc<tokio::sync::Notify>,
    /// What the record must read, shared with the other replica.
    durable: Arc<Mutex<Durable>>,
}

/// A restarted process: its scaler on its store, reloaded, behind the faults of record writes.
async fn open(b: &Backend, r: &Replica, store: &StoreAt, size: usize) -> Scaler {
    let name = r.name.as_str();
    let file = match store {
        StoreAt::File(path) => Some(path.clone()),
        StoreAt::Postgres(_) => None,
    };
    let inner: Box<dyn Store> = match store {
        StoreAt::File(path) => {
            // A crashed process's lock is gone when its file is closed: retry briefly.
            let mut tries = 0;
            loop {
                match FileStore::open(path) {
                    Ok(s) => break Box::new(s),
                    Err(e) if tries < 50 => {
                        tries += 1;
                        let _ = e;
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                    Err(e) => panic!("{e}"),
                }
            }
        }
        StoreAt::Postgres(url) => {
            // A restarted process whose new session is cut while connecting starts again.
            let mut tries = 0;
            loop {
                match PgStore::connect(url, name).await {
                    Ok(s) => break Box::new(s),
                    Err(e) if tries < 20 => {
                        tries += 1;
                        let _ = e;
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                    Err(e) => panic!("{e}"),
                }
            }
        }
    };
    let store = Faulty {
        inner,
        file,
        crash: r.crash.clone(),
        armed: r.chaos.layer().armed.clone(),
        dice: r.chaos.layer().dice.clone(),
        stats: r.chaos.layer().stats.clone(),
        durable: r.durable.clone(),
    };
    Scaler::new(settings(b, size), Box::new(store))
}

enum StoreAt {
    File(std::path::PathBuf),
    Postgres(String),
}

/// A pass of one replica; `None` when it crashed (the scaler is dropped, to be reopened).
async fn pass(b: &Backend, r: &mut Replica, store: &StoreAt, size: usize) -> Option<PassReport> {
    if r.scaler.is_none() {
        r.scaler = Some(open(b, r, store, size).await);
    }
    let s = r.scaler.as_mut().unwrap();
    s.settings.size = size;
    let now = (b.now)();
    let crashed = r.crash.clone();
    let out = tokio::select! {
        rep = s.pass(&r.chaos, now) => Some(rep),
        _ = crashed.notified() => None,
    };
    if out.is_none() {
        r.scaler = None;
    }
    out
}

async fn replica(
    b: &Backend,
    name: &str,
    stats: &Arc<Stats>,
    foreign: &Arc<BTreeSet<String>>,
    armed: &Arc<AtomicBool>,
    dice: &Arc<Dice>,
    durable: &Arc<Mutex<Durable>>,
) -> Replica {
    let crash = Arc::new(tokio::sync::Notify::new());
    Replica {
        name: name.into(),
        scaler: None,
        chaos: Layered::new(
            (b.provider)().await,
            Chaos {
                stats: stats.clone(),
                inject: b.inject.clone(),
                foreign: foreign.clone(),
                crash: crash.clone(),
                armed: armed.clone(),
                dice: dice.clone(),
            },
        ),
        crash,
        durable: durable.clone(),
    }
}

/// Runs the campaign `test` on `b` with `replicas` scalers on `store`.
async fn campaign(
    test: &str,
    b: Backend,
    store: StoreAt,
    replicas: usize,
    admin: Option<tokio_postgres::Client>,
) -> Figures {
    let dice = Dice::new(test);
    let started = std::time::Instant::now();
    let (_, foreign) = (b.truth)().await;
    let foreign_ids: Arc<BTreeSet<String>> =
        Arc::new(foreign.iter().map(|m| m.id.clone()).collect());
    let foreign_before: BTreeMap<String, String> = foreign
        .iter()
        .map(|m| (m.id.clone(), m.name.clone()))
        .collect();
    let stats = Arc::new(Stats::default());
    let armed = Arc::new(AtomicBool::new(true));
    let durable = Arc::new(Mutex::new(Durable::default()));
    let mut rs = Vec::new();
    for i in 0..replicas {
        rs.push(
            replica(
                &b,
                &format!("r{i}"),
                &stats,
                &foreign_ids,
                &armed,
                &dice,
                &durable,
            )
            .await,
        );
    }
    let mut passes = 0;
    let mut deleted_as_unknown = 0;
    let mut size = TARGET;
    let mut round = 0;
    let (mut no_stock, mut fallback, mut cleaned) = (0, 0, 0);
    let first_offer = b.offers[0].clone();
    let mut tally = |rep: &PassReport| {
        for a in &rep.actions {
            match a {
                Action::Deleted { cause, .. } if cause == "unknown" => deleted_as_unknown += 1,
                Action::NoStock { .. } => no_stock += 1,
                Action::Cleaned { .. } => cleaned += 1,
                Action::Created { offering, .. } if *offering != first_offer => fallback += 1,
                _ => {}
            }
        }
    };
    while stats.ops.load(Ordering::SeqCst) < OPERATIONS {
        round += 1;
        if round % 3 == 0 {
            size = dice.upto(7);
        }
        if let Some(w) = &b.weather {
            w(&dice);
        }
        if let Some(op) = &b.operator {
            if dice.chance(0.15) {
                let (ours, _) = (b.truth)().await;
                if let Some(id) = op(&ours, &dice) {
                    stats.operator_deleted.lock().unwrap().insert(id);
                }
            }
        }
        if replicas == 1 {
            if let Some(rep) = pass(&b, &mut rs[0], &store, size).await {
                passes += 1;
                tally(&rep);
            }
        } else {
            let (first, rest) = rs.split_at_mut(1);
            let kill = async {
                // Now and then the leader's database session is cut mid-pass.
                if let Some(c) = &admin {
                    if dice.chance(0.1) {
                        let pause = dice.below(5) as u64;
                        tokio::time::sleep(Duration::from_millis(pause)).await;
                        let _ = c
                            .execute(
                                // Only this run's database: the server is shared.
                                "SELECT pg_terminate_backend(pid) FROM pg_locks \
                                 WHERE locktype = 'advisory' AND granted AND database = \
                                 (SELECT oid FROM pg_database WHERE datname = current_database())",
                                &[],
                            )
                            .await;
                    }
                }
            };
            let (a, c, _) = tokio::join!(
                pass(&b, &mut first[0], &store, size),
                pass(&b, &mut rest[0], &store, size),
                kill
            );
            for rep in [a, c].into_iter().flatten() {
                passes += 1;
                tally(&rep);
            }
        }
        assert!(
            round < 20_000,
            "the campaign does not reach {OPERATIONS} operations"
        );
    }
    let ops = stats.ops.load(Ordering::SeqCst);
    let faults = stats.faults.load(Ordering::SeqCst);
    let crashes = stats.crashes.load(Ordering::SeqCst);
    let errors = stats.errors.load(Ordering::SeqCst);

    // The weather clears: passes until the pool is quiet at its target.
    armed.store(false, Ordering::SeqCst);
    let unmet = (b.clear)();
    let mut record: Option<Record> = None;
    for _ in 0..60 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut quiet = false;
        for r in rs.iter_mut() {
            if let Some(rep) = pass(&b, r, &store, TARGET).await {
                passes += 1;
                tally(&rep);
                if rep.role == orca_scaler::Role::Leader {
                    quiet = rep
                        .actions
                        .iter()
                        .all(|a| matches!(a, Action::Retired { .. } | Action::Waiting { .. }))
                        && rep.serving == TARGET
                        && rep.stopped.is_none();
                    record = r.scaler.as_ref().and_then(|s| s.record().cloned());
                }
            }
        }
        if quiet {
            break;
        }
    }
    let record = record.expect("a leader's record");
    let (ours, foreign_after) = (b.truth)().await;
    let live: BTreeSet<(String, String)> = record
        .entries
        .values()
        .filter(|e| e.phase == Phase::Live)
        .map(|e| (e.name.clone(), e.id.clone().unwrap_or_default()))
        .collect();
    let leaked = ours
        .iter()
        .filter(|m| m.status != Status::Deleting && !live.contains(&(m.name.clone(), m.id.clone())))
        .count();
    // A name made again is a duplicate, unless the machine before was deleted by the operator (the
    // record then rightly retries its recorded create).
    let operator_deleted = stats.operator_deleted.lock().unwrap().clone();
    let duplicates = stats
        .names
        .lock()
        .unwrap()
        .iter()
        .filter(|(name, ids)| {
            let own = ids
                .iter()
                .filter(|id| !operator_deleted.contains(*id))
                .count();
            if own > 1 {
                println!("  duplicate: {name} {ids:?}");
            }
            own > 1
        })
        .count();
    let foreign_after: BTreeMap<String, String> = foreign_after
        .iter()
        .map(|m| (m.id.clone(), m.name.clone()))
        .collect();
    let foreign_touched = stats.foreign_touched.load(Ordering::SeqCst)
        + foreign_before
            .iter()
            .filter(|(id, name)| foreign_after.get(*id) != Some(name))
            .count();
    let final_size = ours
        .iter()
        .filter(|m| matches!(m.status, Status::Running | Status::Starting))
        .count();
    let write_faults = stats.write_faults.lock().unwrap().clone();
    let misread_first = stats.misread_first.lock().unwrap().clone();
    Figures {
        seed: dice.seed,
        ops,
        requests: (b.requests)(),
        faults,
        unmet,
        errors,
        no_stock,
        fallback,
        cleaned,
        crashes,
        elapsed: started.elapsed(),
        crashed_before_call: stats.crashed_before_call.load(Ordering::SeqCst),
        crashed_after_call: stats.crashed_after_call.load(Ordering::SeqCst),
        writes: stats.writes.load(Ordering::SeqCst),
        write_faults,
        during: match store {
            StoreAt::File(_) => "temp file written, not renamed",
            StoreAt::Postgres(_) => "transaction cut",
        },
        misread: stats.misread.load(Ordering::SeqCst),
        misread_first,
        stale_temp: stats.stale_temp.load(Ordering::SeqCst),
        passes,
        leaked,
        duplicates,
        foreign_touched,
        deleted_as_unknown,
        final_size,
        target: TARGET,
    }
}

fn memory_backend() -> (Backend, MemoryCloud) {
    let cloud = MemoryCloud::new();
    let c = cloud.clone();
    let inject: Injector = Arc::new(move |op, pick| {
        let operation = match op {
            Op::Arch => Operation::Catalogue,
            Op::Create => Operation::Create,
            Op::List | Op::Read => Operation::List,
            Op::Delete => Operation::Delete,
        };
        let kinds = [
            FaultKind::Error(ErrorKind::Throttled),
            FaultKind::Error(ErrorKind::Transient),
            FaultKind::Error(ErrorKind::Other),
            FaultKind::Error(ErrorKind::Quota),
            FaultKind::Error(ErrorKind::NoStock),
            FaultKind::Error(ErrorKind::PermissionDenied),
            FaultKind::Error(ErrorKind::Unauthenticated),
            FaultKind::Error(ErrorKind::NotFound),
            FaultKind::Error(ErrorKind::AlreadyExists),
            FaultKind::Latency(Duration::from_millis(3)),
            FaultKind::LoseAnswer,
            FaultKind::LoseAnswer,
        ];
        c.inject(operation, kinds[pick as usize % kinds.len()].clone(), 1);
    });
    let c = cloud.clone();
    let provider = Arc::new(move || {
        let p: Arc<dyn Provider> = Arc::new(c.provider("s1").unwrap());
        Box::pin(async move { p }) as Pin<Box<dyn Future<Output = Arc<dyn Provider>> + Send>>
    });
    let c = cloud.clone();
    let truth: Truth = Arc::new(move || {
        let all = c.all_machines();
        Box::pin(async move {
            let ours = |m: &Machine| {
                m.labels.get("orca-owner").map(String::as_str) == Some("s1") && m.pool == "lab"
            };
            (
                all.iter().filter(|m| ours(m)).cloned().collect(),
                all.iter().filter(|m| !ours(m)).cloned().collect(),
            )
        })
    });
    let (c1, c2, c3, c4) = (cloud.clone(), cloud.clone(), cloud.clone(), cloud.clone());
    (
        Backend {
            provider,
            inject,
            clear: Arc::new(move || {
                c1.clear_faults();
                c1.unlimited_stock("amd64-small", "zone-a");
                None
            }),
            weather: Some(Arc::new(move |dice: &Dice| {
                if dice.chance(0.1) {
                    if dice.bool() {
                        c4.set_stock("amd64-small", "zone-a", 0);
                    } else {
                        c4.unlimited_stock("amd64-small", "zone-a");
                    }
                }
            })),
            truth,
            requests: Arc::new(move || c2.requests()),
            offers: vec!["amd64-small@zone-a".into(), "amd64-small@zone-b".into()],
            operator: Some(Arc::new(move |ours: &[Machine], dice: &Dice| {
                if ours.is_empty() {
                    return None;
                }
                let m = &ours[dice.below(ours.len())];
                if dice.bool() {
                    c3.operator_stop(&m.id);
                    None
                } else {
                    c3.operator_delete(&m.id);
                    Some(m.id.clone())
                }
            })),
            now: {
                let c = cloud.clone();
                Arc::new(move || c.now())
            },
        },
        cloud,
    )
}

async fn others(p: &dyn Provider, other: &dyn Provider, offer: &str) {
    let (t, l) = offer.split_once('@').unwrap();
    for (who, name, pool) in [
        (other, "theirs-1", "lab"),
        (other, "theirs-2", "lab"),
        (p, "mine-elsewhere", "other"),
    ] {
        who.create(&MachineSpec::new(name, t, l, pool))
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_campaign_memory_file_store() {
    let (b, cloud) = memory_backend();
    others(
        &cloud.provider("s1").unwrap(),
        &cloud.provider("s2").unwrap(),
        "amd64-small@zone-a",
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let f = campaign(
        "fault_campaign_memory_file_store",
        b,
        StoreAt::File(dir.path().join("rec.json")),
        1,
        None,
    )
    .await;
    f.print("memory, file store");
    f.check();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_campaign_memory_two_replicas_on_postgres() {
    let Some(db) = TestDb::create("fault_campaign_memory_two_replicas_on_postgres").await else {
        return;
    };
    let (admin, conn) = tokio_postgres::connect(&db.url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let (b, cloud) = memory_backend();
    others(
        &cloud.provider("s1").unwrap(),
        &cloud.provider("s2").unwrap(),
        "amd64-small@zone-a",
    )
    .await;
    let f = campaign(
        "fault_campaign_memory_two_replicas_on_postgres",
        b,
        StoreAt::Postgres(db.url.clone()),
        2,
        Some(admin),
    )
    .await;
    f.print("memory, two replicas on PostgreSQL");
    let (c, conn) = tokio_postgres::connect(&db.url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    // Never both act: one replica per epoch, and epochs do not overlap in time.
    let rows = c
        .query(
            "SELECT epoch, count(DISTINCT replica), min(at), max(at) FROM orca_pool.events GROUP BY epoch ORDER BY epoch",
            &[],
        )
        .await
        .unwrap();
    let epochs: Vec<(i64, i64, orca::Timestamp, orca::Timestamp)> = rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect();
    let leads = epochs.len();
    println!("  leads taken:                       {leads}");
    assert!(leads >= 2, "the lead changed hands: {epochs:?}");
    assert!(epochs.iter().all(|e| e.1 == 1), "{epochs:?}");
    for w in epochs.windows(2) {
        assert!(w[0].3 < w[1].2, "epochs overlap: {w:?}");
    }
    f.check();
}

/// A cloud's error answers in its own words, (HTTP status, code), by what a request does.
struct Answers {
    /// What any request may be answered: throttled, server errors, refused.
    any: &'static [(u16, &'static str)],
    /// What a create may be answered besides: no stock, quota, conflict.
    create: &'static [(u16, &'static str)],
    /// What a delete may be answered besides: not found, conflict.
    delete: &'static [(u16, &'static str)],
}

/// A fault for an HTTP fake on a request of `op`: one of the cloud's error answers for it, a lost
/// answer (the request served, the connection dropped) or latency.
fn http_fault(
    op: Op,
    pick: u32,
    answers: &Answers,
    body: &dyn Fn(u16, &str) -> serde_json::Value,
) -> orca_fakes::Fault {
    use orca_fakes::Fault;
    let mut errors: Vec<(u16, &str)> = answers.any.to_vec();
    match op {
        Op::Create => errors.extend_from_slice(answers.create),
        Op::Delete => errors.extend_from_slice(answers.delete),
        Op::Arch | Op::List | Op::Read => {}
    }
    // The errors, one latency and three lost answers.
    let i = pick as usize % (errors.len() + 4);
    match errors.get(i) {
        Some(&(status, code)) => Fault::Status {
            status,
            body: body(status, code),
            headers: Vec::new(),
        },
        None if i == errors.len() => Fault::Latency(Duration::from_millis(5)),
        None => Fault::DropAnswer,
    }
}

#[allow(clippy::too_many_arguments)]
fn fake_backend(
    provider: Make,
    other: Make,
    control: Arc<orca_fakes::Control>,
    paths: fn(Op) -> (axum::http::Method, &'static str),
    answers: &'static Answers,
    body: fn(u16, &str) -> serde_json::Value,
    offers: Vec<String>,
    weather: Weather,
    restore: Arc<dyn Fn() + Send + Sync>,
) -> Backend {
    let c = control.clone();
    let inject: Injector = Arc::new(move |op, pick| {
        let (method, path) = paths(op);
        c.inject(orca_fakes::Rule::new(
            Some(method),
            path,
            http_fault(op, pick, answers, &body),
            1,
        ));
    });
    let (p, o) = (provider.clone(), other.clone());
    let truth: Truth = Arc::new(move || {
        let (p, o) = (p.clone(), o.clone());
        Box::pin(async move {
            let (mine, theirs) = (p().await, o().await);
            let ours = mine.machines("lab").await.expect("list ours");
            let mut foreign = theirs.machines("lab").await.expect("list theirs");
            foreign.extend(mine.machines("other").await.expect("list other pool"));
            (ours, foreign)
        })
    });
    let (c1, c2) = (control.clone(), control);
    Backend {
        provider,
        inject,
        clear: Arc::new(move || {
            // Each rule fires once: the rules left are the faults no request met.
            let unmet = AtomicUsize::new(0);
            c1.clear_faults_where(|_| {
                unmet.fetch_add(1, Ordering::SeqCst);
                true
            });
            restore();
            Some(unmet.into_inner())
        }),
        weather: Some(weather),
        truth,
        requests: Arc::new(move || c2.requests()),
        offers,
        operator: None,
        now: Arc::new(chrono::Utc::now),
    }
}

fn maker(kind: &'static str, owner: &'static str, settings: orca::Settings) -> Make {
    Arc::new(move || {
        let settings = settings.clone();
        Box::pin(async move {
            orca::of_with(kind, owner, &settings)
                .await
                .unwrap_or_else(|e| panic!("{kind} through orca::of_with: {e}"))
        })
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_campaign_hetzner_fake() {
    use orca_fakes::hetzner::{FakeHetzner, Options};
    let fake = Arc::new(
        FakeHetzner::start_with(Options {
            action_time: Duration::ZERO,
            rate_limit: 1_000_000,
            refill_per_second: 1_000_000.0,
            ..Options::default()
        })
        .await
        .unwrap(),
    );
    let settings = orca_fakes::hetzner::driver_settings(&fake)
        // The fake's actions finish at once: read them often.
        .with("ORCA_POLL_INTERVAL", "20ms");
    let (mine, theirs) = (
        maker("hetzner", "s1", settings.clone()),
        maker("hetzner", "s2", settings),
    );
    others(&*mine().await, &*theirs().await, "cx23@fsn1").await;
    static ANSWERS: Answers = Answers {
        any: &[
            (429, "rate_limit_exceeded"),
            (500, "server_error"),
            (502, "bad_gateway"),
            (503, "unavailable"),
            (403, "forbidden"),
        ],
        create: &[
            (412, "resource_unavailable"),
            (403, "resource_limit_exceeded"),
            (409, "conflict"),
        ],
        delete: &[(404, "not_found"), (409, "conflict"), (423, "locked")],
    };
    let (w, r) = (fake.clone(), fake.clone());
    let b = fake_backend(
        mine,
        theirs,
        fake.control().clone(),
        |op| match op {
            Op::Create => (axum::http::Method::POST, "/servers"),
            Op::Delete => (axum::http::Method::DELETE, "/servers/"),
            Op::Arch => (axum::http::Method::GET, "/server_types"),
            Op::List | Op::Read => (axum::http::Method::GET, "/servers"),
        },
        &ANSWERS,
        |_, code| serde_json::json!({"error": {"code": code, "message": "injected", "details": {}}}),
        vec!["cx23@fsn1".into(), "cx23@nbg1".into()],
        // fsn1 runs out of stock and back; now and then a create's action fails in placement.
        Arc::new(move |dice: &Dice| {
            if dice.chance(0.1) {
                w.set_no_stock("cx23", "fsn1", dice.bool());
            }
            if dice.chance(0.03) {
                w.fail_next_create_action_with("resource_unavailable", "error during placement");
            }
        }),
        Arc::new(move || r.set_no_stock("cx23", "fsn1", false)),
    );
    let dir = tempfile::tempdir().unwrap();
    let f = campaign(
        "fault_campaign_hetzner_fake",
        b,
        StoreAt::File(dir.path().join("rec.json")),
        1,
        None,
    )
    .await;
    f.print("fake Hetzner API, file store");
    f.check();
}

/// The Compute Engine driver from `settings`, waiting for a busy resource at a short pause: the
/// campaign answers deletes with `resourceNotReady` now and then, which the driver waits for (at
/// most `max_backoff` between tries, 5 s by default), and the fake's operations end at once.
fn gce_maker(owner: &'static str, settings: orca::Settings) -> Make {
    Arc::new(move || {
        let settings = settings.clone();
        Box::pin(async move {
            let mut config = orca::gce::Config::from_settings(&settings)
                .unwrap_or_else(|e| panic!("gce settings: {e}"));
            config.retry.max_backoff = Duration::from_millis(100);
            let p = orca::gce::GceProvider::new(config, owner)
                .await
                .unwrap_or_else(|e| panic!("gce: {e}"));
            Arc::new(p) as Arc<dyn Provider>
        })
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_campaign_gce_fake() {
    use orca_fakes::gce::{FakeGce, ZONE};
    let fake = Arc::new(FakeGce::start().await.unwrap());
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("sa.json");
    std::fs::write(&key, fake.service_account_json()).unwrap();
    let settings = orca_fakes::gce::driver_settings(&fake, &key);
    let (mine, theirs) = (gce_maker("s1", settings.clone()), gce_maker("s2", settings));
    let offer = format!("e2-small@{ZONE}");
    others(&*mine().await, &*theirs().await, &offer).await;
    static ANSWERS: Answers = Answers {
        any: &[
            (429, "rateLimitExceeded"),
            (500, "internalError"),
            (503, "backendError"),
            (403, "forbidden"),
        ],
        create: &[
            (503, "ZONE_RESOURCE_POOL_EXHAUSTED"),
            (403, "quotaExceeded"),
            (409, "alreadyExists"),
        ],
        delete: &[(404, "notFound"), (400, "resourceNotReady")],
    };
    let (w, r) = (fake.clone(), fake.clone());
    let b = fake_backend(
        mine,
        theirs,
        fake.control().clone(),
        |op| match op {
            Op::Create => (axum::http::Method::POST, "/instances"),
            Op::Delete => (axum::http::Method::DELETE, "/instances/"),
            Op::Arch => (axum::http::Method::GET, "/machineTypes"),
            Op::List | Op::Read => (axum::http::Method::GET, "/instances"),
        },
        &ANSWERS,
        |status, code| serde_json::json!({"error": {"code": status, "message": "injected", "errors": [{"reason": code, "message": "injected"}]}}),
        vec![offer, format!("e2-medium@{ZONE}")],
        // e2-small runs out of stock in the zone (inserts end in ZONE_RESOURCE_POOL_EXHAUSTED) and
        // back; now and then the next insert ends in QUOTA_EXCEEDED.
        Arc::new(move |dice: &Dice| {
            if dice.chance(0.1) {
                if dice.bool() {
                    w.exhaust("e2-small", ZONE);
                } else {
                    w.restore("e2-small", ZONE);
                }
            }
            if dice.chance(0.02) {
                w.exceed_quota(1);
            }
        }),
        Arc::new(move || {
            r.restore("e2-small", ZONE);
            r.exceed_quota(0);
        }),
    );
    let f = campaign(
        "fault_campaign_gce_fake",
        b,
        StoreAt::File(dir.path().join("rec.json")),
        1,
        None,
    )
    .await;
    f.print("fake Compute Engine API, file store");
    f.check();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_campaign_azure_fake() {
    use orca_fakes::azure::FakeAzure;
    let fake = Arc::new(FakeAzure::start().await.unwrap());
    fake.add_hosts_subnet();
    // Azure holds the interfaces of a VM whose create failed, or that its delete left, for about
    // 180 s, and the driver's delete waits that out before removing them: a run that met it spent
    // three minutes waiting. The campaign keeps the reservation and the wait, shorter, as it
    // polls every 20 ms rather than every 2 s.
    fake.set_nic_reservation(Duration::from_secs(3));
    let settings = orca_fakes::azure::driver_settings(&fake).with("ORCA_POLL_INTERVAL", "20ms");
    let (mine, theirs) = (
        maker("azure", "s1", settings.clone()),
        maker("azure", "s2", settings),
    );
    others(&*mine().await, &*theirs().await, "Standard_B2s@westeurope").await;
    static ANSWERS: Answers = Answers {
        any: &[
            (429, "TooManyRequests"),
            (500, "InternalServerError"),
            (503, "ServiceUnavailable"),
            (403, "AuthorizationFailed"),
        ],
        create: &[
            (409, "SkuNotAvailable"),
            (409, "QuotaExceeded"),
            (409, "AnotherOperationInProgress"),
        ],
        delete: &[
            (404, "ResourceNotFound"),
            (409, "AnotherOperationInProgress"),
        ],
    };
    let (w, r) = (fake.clone(), fake.clone());
    let b = fake_backend(
        mine,
        theirs,
        fake.control().clone(),
        |op| match op {
            Op::Create => (axum::http::Method::PUT, "/virtualMachines/"),
            Op::Delete => (axum::http::Method::DELETE, "/virtualMachines/"),
            Op::Arch => (axum::http::Method::GET, "/skus"),
            Op::List | Op::Read => (axum::http::Method::GET, "/virtualMachines"),
        },
        &ANSWERS,
        |_, code| serde_json::json!({"error": {"code": code, "message": "injected"}}),
        vec![
            "Standard_B2s@westeurope".into(),
            "Standard_D2s_v5@westeurope".into(),
        ],
        // Standard_B2s runs out in westeurope (a VM PUT refused with SkuNotAvailable, or an
        // operation that ends in AllocationFailed and leaves a failed VM) and back.
        Arc::new(move |dice: &Dice| {
            if dice.chance(0.1) {
                match dice.below(3) {
                    0 => w.sku_not_available("Standard_B2s", "westeurope"),
                    1 => w.fail_allocation("Standard_B2s", "westeurope", "AllocationFailed"),
                    _ => w.restore_stock("Standard_B2s", "westeurope"),
                }
            }
        }),
        Arc::new(move || r.restore_stock("Standard_B2s", "westeurope")),
    );
    let dir = tempfile::tempdir().unwrap();
    let f = campaign(
        "fault_campaign_azure_fake",
        b,
        StoreAt::File(dir.path().join("rec.json")),
        1,
        None,
    )
    .await;
    f.print("fake Azure Resource Manager API, file store");
    f.check();
}

/// moto and the proxy in front of it (ClientToken replays, instances kept pending or hidden for a
/// while, EC2's error answers injected through the fakes' shared rules), as the EC2 tests use them.
use orca_fakes::moto as ec2_proxy;

/// An EC2 provider for `owner` at `endpoint` (the proxy, or moto itself for the truth), with the EC2
/// tests' short polls and windows (20 ms polls, 20 s visibility window, 1.5 s to confirm a not found).
fn ec2_maker(seed: &ec2_proxy::Seed, endpoint: &str, owner: &str) -> Make {
    let (seed, endpoint, owner) = (seed.clone(), endpoint.to_string(), owner.to_string());
    Arc::new(move || {
        let (seed, endpoint, owner) = (seed.clone(), endpoint.clone(), owner.clone());
        Box::pin(async move {
            let p: Arc<dyn Provider> = Arc::new(
                ec2_provider(&seed, &endpoint, &owner)
                    .await
                    .unwrap_or_else(|e| panic!("EC2 provider for {owner}: {e}")),
            );
            p
        })
    })
}

async fn ec2_provider(
    seed: &ec2_proxy::Seed,
    endpoint: &str,
    owner: &str,
) -> orca::Result<orca::ec2::Ec2Provider> {
    let b = orca::ec2::ConfigBuilder::from_settings(&ec2_proxy::driver_settings(seed, endpoint))
        .retry(orca::RetryPolicy::fast())
        .poll_interval(Duration::from_millis(20))
        .operation_timeout(Duration::from_secs(20))
        .visibility_window(Duration::from_secs(20))
        .confirm_not_found(Duration::from_millis(1500))
        .connect_timeout(Duration::from_secs(5))
        .request_timeout(Duration::from_secs(30));
    orca::ec2::Ec2Provider::new(b.build()?, owner).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_campaign_ec2_moto() {
    use ec2_proxy::{ec2_error, rule, Fault, Proxy, OTHER_ZONE, ZONE};
    // A moto of its own: moto lists more slowly with every instance it holds, and the shared one
    // holds what every test binary before this one made.
    let Some(own) = ec2_proxy::own_moto("fault_campaign_ec2_moto").await else {
        return;
    };
    let moto = own.url.clone();
    let seed = ec2_proxy::seed(&moto).await;
    let proxy = Arc::new(Proxy::start(&moto).await);
    // Owners of this run only: moto may hold other tests' instances.
    let run = format!("{:06x}", fastrand::u32(..0xff_ffff));
    let (me, them) = (format!("s1-{run}"), format!("s2-{run}"));
    let (mine, theirs) = (
        ec2_maker(&seed, &proxy.url, &me),
        ec2_maker(&seed, &proxy.url, &them),
    );
    let offer = format!("t3.micro@{ZONE}");
    others(&*mine().await, &*theirs().await, &offer).await;

    // EC2's error answers, by what a request does; no stock comes from the weather.
    const ANY: &[(u16, &str)] = &[
        (503, "RequestLimitExceeded"),
        (500, "InternalError"),
        (503, "Unavailable"),
        (403, "UnauthorizedOperation"),
    ];
    const CREATE: &[(u16, &str)] = &[(400, "InstanceLimitExceeded")];
    const DELETE: &[(u16, &str)] = &[(400, "InvalidInstanceID.NotFound")];
    const NO_STOCK: &str = "InsufficientInstanceCapacity";
    let injected = Arc::new(AtomicUsize::new(0));
    let (p, n) = (proxy.clone(), injected.clone());
    let inject: Injector = Arc::new(move |op, pick| {
        let (action, extra) = match op {
            Op::Arch => ("DescribeInstanceTypes", &[][..]),
            Op::Create => ("RunInstances", CREATE),
            Op::List | Op::Read => ("DescribeInstances", &[][..]),
            Op::Delete => ("TerminateInstances", DELETE),
        };
        let errors: Vec<(u16, &str)> = ANY.iter().chain(extra).copied().collect();
        // The errors, one latency and three answers lost after EC2 (moto) served the request.
        let i = pick as usize % (errors.len() + 4);
        let fault = match errors.get(i) {
            Some(&(status, code)) => ec2_error(status, code),
            None if i == errors.len() => Fault::Latency(Duration::from_millis(5)),
            None => Fault::DropAnswer,
        };
        n.fetch_add(1, Ordering::SeqCst);
        p.inject(rule(action, fault, 1));
    });
    let subnet = seed.subnets[ZONE].clone();
    let w = proxy.clone();
    // t3.micro runs out in the first zone for the next few creates there (InsufficientInstanceCapacity;
    // the second zone is the fallback); EC2's eventual consistency changes: instances made from then
    // on are hidden from reads for a while (listings, reads by id, changes: InvalidInstanceID.NotFound),
    // stay pending, or reach tag filters late.
    let weather: Weather = Arc::new(move |dice: &Dice| {
        if dice.chance(0.1) {
            w.inject(
                rule(
                    "RunInstances",
                    ec2_error(500, NO_STOCK),
                    1 + dice.below(4) as u32,
                )
                .when_form("InstanceType", "t3.micro")
                .when_form("SubnetId", &subnet),
            );
        }
        // (Short: moto's filtered listings cost about 0.6 ms an instance, terminated ones included,
        // and a create waits, listing, until EC2 shows what it made.)
        if dice.chance(0.1) {
            w.set_visibility_delay(Duration::from_millis(100 * dice.below(3) as u64));
            w.keep_pending(Duration::from_millis(300 * dice.below(4) as u64));
            w.set_tag_filter_lag(Duration::from_millis(100 * dice.below(2) as u64));
        }
    });
    // The truth is read from moto itself, past the proxy's faults and delays.
    let (true_mine, true_theirs) = (ec2_maker(&seed, &moto, &me), ec2_maker(&seed, &moto, &them));
    let truth: Truth = Arc::new(move || {
        let (p, o) = (true_mine.clone(), true_theirs.clone());
        Box::pin(async move {
            let (mine, theirs) = (p().await, o().await);
            let ours = mine.machines("lab").await.expect("list ours");
            let mut foreign = theirs.machines("lab").await.expect("list theirs");
            foreign.extend(mine.machines("other").await.expect("list other pool"));
            (ours, foreign)
        })
    });
    let (c, r) = (proxy.clone(), proxy.clone());
    let b = Backend {
        provider: mine,
        inject,
        clear: Arc::new(move || {
            for action in [
                "RunInstances",
                "DescribeInstances",
                "TerminateInstances",
                "DescribeInstanceTypes",
            ] {
                c.clear(action);
            }
            c.set_visibility_delay(Duration::ZERO);
            c.keep_pending(Duration::ZERO);
            c.set_tag_filter_lag(Duration::ZERO);
            // Each injected fault fires once and answers a request that the proxy logs as faulted;
            // the weather's no-stock answers are not among them.
            let met = c
                .log()
                .iter()
                .filter(|s| s.faulted && s.code.as_deref() != Some(NO_STOCK))
                .count();
            Some(injected.load(Ordering::SeqCst).saturating_sub(met))
        }),
        weather: Some(weather),
        truth,
        requests: Arc::new(move || r.requests()),
        offers: vec![offer, format!("t3.micro@{OTHER_ZONE}")],
        operator: None,
        now: Arc::new(chrono::Utc::now),
    };
    let dir = tempfile::tempdir().unwrap();
    let f = campaign(
        "fault_campaign_ec2_moto",
        b,
        StoreAt::File(dir.path().join("rec.json")),
        1,
        None,
    )
    .await;
    f.print("EC2 on moto behind the EC2 tests' proxy, file store");
    let no_stock_answered = proxy
        .of("RunInstances")
        .iter()
        .filter(|s| s.code.as_deref() == Some(NO_STOCK))
        .count();
    println!("  RunInstances answered {NO_STOCK}: {no_stock_answered}");
    let mut by_action: BTreeMap<String, usize> = BTreeMap::new();
    for s in proxy.log() {
        *by_action.entry(s.action).or_default() += 1;
    }
    let by_action: Vec<String> = by_action.iter().map(|(a, n)| format!("{a} {n}")).collect();
    println!(
        "  EC2 requests by action:            {}",
        by_action.join(", ")
    );
    f.check();
}
