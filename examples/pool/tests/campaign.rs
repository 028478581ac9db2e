//! The fault campaign: the scaler runs for at least 1,000 cloud operations with 20 % of them faulted
//! (errors of every kind, latency, answers lost after the machine was made) and process crashes
//! between any two steps (the scaler dropped mid-call, before or after the cloud acted, and its
//! record reloaded), on the in-memory provider (with the file store, and with two replicas on
//! PostgreSQL in one run) and on the fake Hetzner and Compute Engine APIs. At the end it prints and
//! asserts: machines leaked (in the cloud, not in the record, not deleted), duplicates (one name, two
//! machines), machines of another owner touched, and the final size against the target.
//!
//! Run: `cargo test -p orca-pool --test campaign -- --nocapture`

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use orca::memory::{FaultKind, MemoryCloud, Operation};
use orca::{Arch, Created, ErrorKind, Machine, MachineSpec, Provider, Status};
use orca_pool::{Action, FileStore, PassReport, PgStore, Phase, Record, Scaler, Settings, Store};
use support::TestDb;

/// Cloud operations the campaign runs at least.
const OPERATIONS: usize = 1000;
/// The share of operations faulted.
const FAULT_RATE: f64 = 0.2;
/// The share of operations at which the process "crashes".
const CRASH_RATE: f64 = 0.03;
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

#[derive(Debug, Default)]
struct Stats {
    ops: AtomicUsize,
    faults: AtomicUsize,
    crashes: AtomicUsize,
    /// Every machine id seen for each name.
    names: Mutex<BTreeMap<String, BTreeSet<String>>>,
    /// Machines the operator deleted behind the scaler's back (their names may be made again).
    operator_deleted: Mutex<BTreeSet<String>>,
    /// Calls that named a machine of another owner (or pool).
    foreign_touched: AtomicUsize,
}

struct Chaos {
    inner: Arc<dyn Provider>,
    stats: Arc<Stats>,
    inject: Injector,
    foreign: Arc<BTreeSet<String>>,
    crash: Arc<tokio::sync::Notify>,
    armed: Arc<AtomicBool>,
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
        if fastrand::f64() < FAULT_RATE {
            self.stats.faults.fetch_add(1, Ordering::SeqCst);
            (self.inject)(op, fastrand::u32(..));
        }
        if op != Op::Arch && fastrand::f64() < CRASH_RATE {
            self.stats.crashes.fetch_add(1, Ordering::SeqCst);
            if fastrand::bool() {
                Crash::Before
            } else {
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

    fn named(&self, id: &str) {
        if self.foreign.contains(id) {
            self.stats.foreign_touched.fetch_add(1, Ordering::SeqCst);
        }
    }
}

#[async_trait]
impl Provider for Chaos {
    fn kind(&self) -> &str {
        self.inner.kind()
    }
    fn owner(&self) -> &str {
        self.inner.owner()
    }
    async fn arch(&self, t: &str) -> orca::Result<Arch> {
        self.step(Op::Arch);
        self.inner.arch(t).await
    }
    async fn create(&self, spec: &MachineSpec) -> orca::Result<Created> {
        let crash = self.step(Op::Create);
        if crash == Crash::Before {
            return self.crash_now().await;
        }
        let r = self.inner.create(spec).await;
        if let Ok(c) = &r {
            if let Some(m) = c.as_machine() {
                self.saw(m);
            }
        }
        if crash == Crash::After {
            return self.crash_now().await;
        }
        r
    }
    async fn machines(&self, pool: &str) -> orca::Result<Vec<Machine>> {
        let crash = self.step(Op::List);
        if crash == Crash::Before {
            return self.crash_now().await;
        }
        let r = self.inner.machines(pool).await;
        if let Ok(v) = &r {
            v.iter().for_each(|m| self.saw(m));
        }
        if crash == Crash::After {
            return self.crash_now().await;
        }
        r
    }
    async fn machine(&self, id: &str) -> orca::Result<Option<Machine>> {
        self.named(id);
        let crash = self.step(Op::Read);
        if crash == Crash::Before {
            return self.crash_now().await;
        }
        let r = self.inner.machine(id).await;
        if let Ok(Some(m)) = &r {
            self.saw(m);
        }
        if crash == Crash::After {
            return self.crash_now().await;
        }
        r
    }
    async fn delete(&self, id: &str) -> orca::Result<bool> {
        self.named(id);
        let crash = self.step(Op::Delete);
        if crash == Crash::Before {
            return self.crash_now().await;
        }
        let r = self.inner.delete(id).await;
        if crash == Crash::After {
            return self.crash_now().await;
        }
        r
    }
}

type Truth = Arc<
    dyn Fn() -> Pin<Box<dyn Future<Output = (Vec<Machine>, Vec<Machine>)> + Send>> + Send + Sync,
>;

/// Makes a provider (a new one each call: a restarted process makes its own).
type Make = Arc<dyn Fn() -> Pin<Box<dyn Future<Output = Arc<dyn Provider>> + Send>> + Send + Sync>;

/// What an operator does behind the scaler's back; the id of a machine it deleted.
type Operator = Arc<dyn Fn(&[Machine]) -> Option<String> + Send + Sync>;

/// One backend under test.
struct Backend {
    /// Our owner's provider (a new one each call: a restarted process makes its own).
    provider: Make,
    inject: Injector,
    clear: Arc<dyn Fn() + Send + Sync>,
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
    ops: usize,
    requests: u64,
    faults: usize,
    crashes: usize,
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
            "fault campaign {name}: {} cloud operations ({} requests), {} faulted ({:.1} %), {} crashes, {} passes",
            self.ops,
            self.requests,
            self.faults,
            100.0 * self.faults as f64 / self.ops.max(1) as f64,
            self.crashes,
            self.passes
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
    chaos: Chaos,
    crash: Arc<tokio::sync::Notify>,
}

async fn open(b: &Backend, name: &str, store: &StoreAt, size: usize) -> Scaler {
    let store: Box<dyn Store> = match store {
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
    Scaler::new(settings(b, size), store)
}

enum StoreAt {
    File(std::path::PathBuf),
    Postgres(String),
}

/// A pass of one replica; `None` when it crashed (the scaler is dropped, to be reopened).
async fn pass(b: &Backend, r: &mut Replica, store: &StoreAt, size: usize) -> Option<PassReport> {
    if r.scaler.is_none() {
        r.scaler = Some(open(b, &r.name, store, size).await);
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
) -> Replica {
    let crash = Arc::new(tokio::sync::Notify::new());
    Replica {
        name: name.into(),
        scaler: None,
        chaos: Chaos {
            inner: (b.provider)().await,
            stats: stats.clone(),
            inject: b.inject.clone(),
            foreign: foreign.clone(),
            crash: crash.clone(),
            armed: armed.clone(),
        },
        crash,
    }
}

/// Runs the campaign on `b` with `replicas` scalers on `store`.
async fn campaign(
    b: Backend,
    store: StoreAt,
    replicas: usize,
    admin: Option<tokio_postgres::Client>,
) -> Figures {
    let (_, foreign) = (b.truth)().await;
    let foreign_ids: Arc<BTreeSet<String>> =
        Arc::new(foreign.iter().map(|m| m.id.clone()).collect());
    let foreign_before: BTreeMap<String, String> = foreign
        .iter()
        .map(|m| (m.id.clone(), m.name.clone()))
        .collect();
    let stats = Arc::new(Stats::default());
    let armed = Arc::new(AtomicBool::new(true));
    let mut rs = Vec::new();
    for i in 0..replicas {
        rs.push(replica(&b, &format!("r{i}"), &stats, &foreign_ids, &armed).await);
    }
    let mut passes = 0;
    let mut deleted_as_unknown = 0;
    let mut size = TARGET;
    let mut round = 0;
    let mut tally = |rep: &PassReport| {
        deleted_as_unknown += rep
            .actions
            .iter()
            .filter(|a| matches!(a, Action::Deleted { cause, .. } if cause == "unknown"))
            .count();
    };
    while stats.ops.load(Ordering::SeqCst) < OPERATIONS {
        round += 1;
        if round % 3 == 0 {
            size = fastrand::usize(0..=7);
        }
        if let Some(op) = &b.operator {
            if fastrand::f64() < 0.15 {
                let (ours, _) = (b.truth)().await;
                if let Some(id) = op(&ours) {
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
                    if fastrand::f64() < 0.1 {
                        tokio::time::sleep(Duration::from_millis(fastrand::u64(0..5))).await;
                        let _ = c
                            .execute(
                                "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND granted",
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

    // The weather clears: passes until the pool is quiet at its target.
    armed.store(false, Ordering::SeqCst);
    (b.clear)();
    let mut record: Option<Record> = None;
    for _ in 0..60 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut quiet = false;
        for r in rs.iter_mut() {
            if let Some(rep) = pass(&b, r, &store, TARGET).await {
                passes += 1;
                tally(&rep);
                if rep.role == orca_pool::Role::Leader {
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
    Figures {
        ops,
        requests: (b.requests)(),
        faults,
        crashes,
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
    let (c1, c2, c3) = (cloud.clone(), cloud.clone(), cloud.clone());
    (
        Backend {
            provider,
            inject,
            clear: Arc::new(move || c1.clear_faults()),
            truth,
            requests: Arc::new(move || c2.requests()),
            offers: vec!["amd64-small@zone-a".into(), "amd64-small@zone-b".into()],
            operator: Some(Arc::new(move |ours: &[Machine]| {
                if ours.is_empty() {
                    return None;
                }
                let m = &ours[fastrand::usize(..ours.len())];
                if fastrand::bool() {
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
    let f = campaign(b, StoreAt::File(dir.path().join("rec.json")), 1, None).await;
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
    let f = campaign(b, StoreAt::Postgres(db.url.clone()), 2, Some(admin)).await;
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

/// A fault for an HTTP fake: a cloud-shaped error status, a lost answer (the request served, the
/// connection dropped) or latency.
fn http_fault(pick: u32, body: &dyn Fn(u16, &str) -> serde_json::Value) -> orca_fakes::Fault {
    use orca_fakes::Fault;
    let status = |status: u16, code: &str| Fault::Status {
        status,
        body: body(status, code),
        headers: Vec::new(),
    };
    match pick % 9 {
        0 => status(429, "rate_limit_exceeded"),
        1 => status(500, "server_error"),
        2 => status(502, "bad_gateway"),
        3 => status(503, "unavailable"),
        4 => status(403, "forbidden"),
        5 => Fault::Latency(Duration::from_millis(5)),
        _ => Fault::DropAnswer,
    }
}

fn fake_backend(
    provider: Make,
    other: Make,
    control: Arc<orca_fakes::Control>,
    paths: fn(Op) -> (axum::http::Method, &'static str),
    body: fn(u16, &str) -> serde_json::Value,
    offers: Vec<String>,
) -> Backend {
    let c = control.clone();
    let inject: Injector = Arc::new(move |op, pick| {
        let (method, path) = paths(op);
        c.inject(orca_fakes::Rule::new(
            Some(method),
            path,
            http_fault(pick, &body),
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
        clear: Arc::new(move || c1.clear_faults()),
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
    let fake = FakeHetzner::start_with(Options {
        action_reads: 0,
        rate_limit: 1_000_000,
        refill_per_second: 1_000_000.0,
        ..Options::default()
    })
    .await
    .unwrap();
    let settings = orca::Settings::new()
        .with("HCLOUD_TOKEN", fake.token())
        .with("ORCA_HCLOUD_ENDPOINT", fake.url())
        // The fake's actions finish at once: read them often.
        .with("ORCA_POLL_INTERVAL", "20ms");
    let (mine, theirs) = (
        maker("hetzner", "s1", settings.clone()),
        maker("hetzner", "s2", settings),
    );
    others(&*mine().await, &*theirs().await, "cx23@fsn1").await;
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
        |_, code| serde_json::json!({"error": {"code": code, "message": "injected", "details": {}}}),
        vec!["cx23@fsn1".into(), "cx23@nbg1".into()],
    );
    let dir = tempfile::tempdir().unwrap();
    let f = campaign(b, StoreAt::File(dir.path().join("rec.json")), 1, None).await;
    f.print("fake Hetzner API, file store");
    f.check();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_campaign_gce_fake() {
    use orca_fakes::gce::{FakeGce, NETWORK, PROJECT, SUBNET, ZONE};
    let fake = FakeGce::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("sa.json");
    std::fs::write(&key, fake.service_account_json()).unwrap();
    let settings = orca::Settings::new()
        .with("ORCA_GCE_PROJECT", PROJECT)
        .with("ORCA_GCE_ZONE", ZONE)
        .with("ORCA_GCE_NETWORK", NETWORK)
        .with("ORCA_GCE_SUBNET", SUBNET)
        .with("ORCA_GCE_CREDENTIALS_FILE", key.to_string_lossy())
        .with("ORCA_GCE_ENDPOINT", fake.endpoint());
    let (mine, theirs) = (
        maker("gce", "s1", settings.clone()),
        maker("gce", "s2", settings),
    );
    let offer = format!("e2-small@{ZONE}");
    others(&*mine().await, &*theirs().await, &offer).await;
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
        |status, code| serde_json::json!({"error": {"code": status, "message": "injected", "errors": [{"reason": code, "message": "injected"}]}}),
        vec![offer],
    );
    let f = campaign(b, StoreAt::File(dir.path().join("rec.json")), 1, None).await;
    f.print("fake Compute Engine API, file store");
    f.check();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_campaign_azure_fake() {
    use orca_fakes::azure::{FakeAzure, RESOURCE_GROUP, SUBSCRIPTION, TOKEN};
    let fake = FakeAzure::start().await.unwrap();
    fake.add_subnet(
        RESOURCE_GROUP,
        "orca-net-westeurope",
        "westeurope",
        "hosts",
        None,
    );
    let settings: orca::Settings = [
        ("ORCA_AZURE_SUBSCRIPTION_ID", SUBSCRIPTION.to_string()),
        ("ORCA_AZURE_RESOURCE_GROUP", RESOURCE_GROUP.to_string()),
        ("ORCA_AZURE_VNET", "orca-net".to_string()),
        ("ORCA_AZURE_SUBNET", "hosts".to_string()),
        (
            "ORCA_AZURE_IMAGE",
            "Canonical:ubuntu-24_04-lts:server:latest".to_string(),
        ),
        ("ORCA_AZURE_ADMIN_USER", "orca".to_string()),
        (
            "ORCA_AZURE_SSH_PUBLIC_KEY",
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeKeyForTheFake orca@test".to_string(),
        ),
        ("ORCA_AZURE_ACCESS_TOKEN", TOKEN.to_string()),
        ("ORCA_AZURE_ENDPOINT", fake.url()),
        ("ORCA_AZURE_PRICES_ENDPOINT", fake.url()),
        ("ORCA_POLL_INTERVAL", "20ms".to_string()),
    ]
    .into_iter()
    .collect();
    let (mine, theirs) = (
        maker("azure", "s1", settings.clone()),
        maker("azure", "s2", settings),
    );
    others(&*mine().await, &*theirs().await, "Standard_B2s@westeurope").await;
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
        |_, code| serde_json::json!({"error": {"code": code, "message": "injected"}}),
        vec!["Standard_B2s@westeurope".into()],
    );
    let dir = tempfile::tempdir().unwrap();
    let f = campaign(b, StoreAt::File(dir.path().join("rec.json")), 1, None).await;
    f.print("fake Azure Resource Manager API, file store");
    f.check();
}
