//! The test bench: a shed backend on orca's in-memory cloud, a manual clock both share, an in-process
//! probe and echo services, a provider layer that can hold a cloud call, hide a VM from listings,
//! report a VM as stopping, refuse a firewall patch or fail a removal by name, and orca's recording
//! layer over it.

#![allow(dead_code)]

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use orca::layer::{Answer, Call as LayerCall, Extension, Layer, Layered, Next, Recorder};
use orca::memory::{MemoryCloud, DEFAULT_NETWORK};
use orca::{Error, FirewallPorts, FirewallRule, Machine, Provider};
use shed::backend::{Caller, Parts, Timings, ID_LABEL};
use shed::clock::Clock;
use shed::config::{Config, Role};
use shed::echo::Echo;
use shed::log::ServerLog;
use shed::probe::{Probe, ProbeOutcome, ProbeTarget};
use shed::store::Store;
use shed::{ApiError, Backend, CreateRequest, FileConfig, Shed, ShedView, Status};

/// A cloud call a test can hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Call {
    /// Held before the cloud sees it.
    CreateBefore,
    /// Held after the cloud made the VM, before the answer.
    CreateAfter,
    Start,
    Stop,
    Delete,
}

#[derive(Debug)]
struct Gate {
    held: tokio::sync::watch::Sender<bool>,
    entered: AtomicUsize,
}

impl Gate {
    /// Counts the call, then waits while the gate is held.
    async fn pass(&self) {
        self.entered.fetch_add(1, Ordering::SeqCst);
        let mut rx = self.held.subscribe();
        while *rx.borrow_and_update() {
            if rx.changed().await.is_err() {
                return;
            }
        }
    }
}

/// The test controls around orca's in-memory provider (through the public trait only): the state
/// of the layer [`Controls`].
#[derive(Debug, Default)]
pub struct Wrapped {
    gates: Mutex<HashMap<Call, Arc<Gate>>>,
    hidden: Mutex<HashSet<String>>,
    stopping: Mutex<HashSet<String>>,
    pub refuse_patch: AtomicBool,
    pub no_firewall: AtomicBool,
    pub lists: AtomicUsize,
    /// How many of the next `delete_named` calls fail (a transient error, nothing removed).
    pub fail_delete_named: AtomicUsize,
    /// How many of the next deletes remove the VM but answer `Leftovers` naming a piece beside it
    /// (as a cloud whose delete could not remove an interface or a disk answers).
    pub delete_leaves: AtomicUsize,
}

impl Wrapped {
    fn gate(&self, c: Call) -> Arc<Gate> {
        self.gates
            .lock()
            .unwrap()
            .entry(c)
            .or_insert_with(|| {
                Arc::new(Gate {
                    held: tokio::sync::watch::channel(false).0,
                    entered: AtomicUsize::new(0),
                })
            })
            .clone()
    }

    /// Holds every call `c` until [`Wrapped::release`].
    pub fn hold(&self, c: Call) {
        self.gate(c).held.send_replace(true);
    }

    pub fn release(&self, c: Call) {
        self.gate(c).held.send_replace(false);
    }

    /// How many calls `c` reached the gate.
    pub fn entered(&self, c: Call) -> usize {
        self.gate(c).entered.load(Ordering::SeqCst)
    }

    async fn pass(&self, c: Call) {
        self.gate(c).pass().await;
    }

    /// Listings stop showing VM `id` (a read of that one VM still finds it).
    pub fn hide(&self, id: &str) {
        self.hidden.lock().unwrap().insert(id.to_string());
    }

    /// VM `id` is reported on its way down.
    pub fn report_stopping(&self, id: &str, on: bool) {
        let mut s = self.stopping.lock().unwrap();
        if on {
            s.insert(id.to_string());
        } else {
            s.remove(id);
        }
    }

    fn shape(&self, mut m: Machine) -> Machine {
        if self.stopping.lock().unwrap().contains(&m.id) {
            m.status = orca::Status::Stopping;
        }
        m
    }
}

/// The layer of [`Wrapped`]'s controls: holds, hidden and stopping VMs, a refused firewall patch,
/// no firewall extension, a failed removal by name.
#[derive(Debug)]
pub struct Controls(pub Arc<Wrapped>);

#[async_trait]
impl Layer for Controls {
    fn offers(&self, extension: Extension, inner: bool) -> bool {
        match extension {
            Extension::FirewallRules => inner && !self.0.no_firewall.load(Ordering::SeqCst),
            _ => inner,
        }
    }

    async fn around(&self, call: LayerCall<'_>, next: Next<'_>) -> orca::Result<Answer> {
        let w = &self.0;
        let gate = match call {
            LayerCall::Create { .. } => Some(Call::CreateBefore),
            LayerCall::Delete { .. } => Some(Call::Delete),
            LayerCall::Start { .. } => Some(Call::Start),
            LayerCall::Stop { .. } => Some(Call::Stop),
            _ => None,
        };
        if let Some(g) = gate {
            w.pass(g).await;
        }
        match call {
            LayerCall::Create { .. } => {
                let r = next.run(call).await;
                w.pass(Call::CreateAfter).await;
                r
            }
            LayerCall::Delete { id }
                if w.delete_leaves
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                    .is_ok() =>
            {
                let piece = format!("security group {id}-nsg");
                next.run(call).await?;
                Err(orca::Error::leftovers(
                    orca::Error::transient("the security group is still in use"),
                    vec![piece],
                ))
            }
            // A read by name is a filtered listing: it hides what listings hide.
            LayerCall::Machines { .. } | LayerCall::MachineNamed { .. } => {
                if matches!(call, LayerCall::Machines { .. }) {
                    w.lists.fetch_add(1, Ordering::SeqCst);
                }
                let hidden = w.hidden.lock().unwrap().clone();
                Ok(match next.run(call).await? {
                    Answer::Machines(v) => Answer::Machines(
                        v.into_iter()
                            .filter(|m| !hidden.contains(&m.id))
                            .map(|m| w.shape(m))
                            .collect(),
                    ),
                    Answer::Machine(m) => {
                        Answer::Machine(m.filter(|m| !hidden.contains(&m.id)).map(|m| w.shape(m)))
                    }
                    other => other,
                })
            }
            LayerCall::Machine { .. } => Ok(match next.run(call).await? {
                Answer::Machine(m) => Answer::Machine(m.map(|m| w.shape(m))),
                other => other,
            }),
            LayerCall::DeleteNamed { pool, name }
                if w.fail_delete_named
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                    .is_ok() =>
            {
                Err(Error::transient(format!(
                    "injected: what a create of {pool}/{name} left could not be removed"
                )))
            }
            LayerCall::SetSourceRanges { .. } if w.refuse_patch.load(Ordering::SeqCst) => Err(
                Error::permission_denied("compute.firewalls.update denied on this rule"),
            ),
            other => next.run(other).await,
        }
    }
}

/// An in-process probe: every agent answers unless a test says otherwise. A test can hold every
/// probe (before it answers) and let it go.
#[derive(Debug)]
pub struct TestProbe {
    default: Mutex<ProbeOutcome>,
    by_shed: Mutex<HashMap<String, ProbeOutcome>>,
    pub calls: AtomicUsize,
    gate: Gate,
}

impl Default for TestProbe {
    fn default() -> Self {
        TestProbe {
            default: Mutex::new(ProbeOutcome::Answered),
            by_shed: Mutex::default(),
            calls: AtomicUsize::new(0),
            gate: Gate {
                held: tokio::sync::watch::channel(false).0,
                entered: AtomicUsize::new(0),
            },
        }
    }
}

impl TestProbe {
    pub fn set_default(&self, o: ProbeOutcome) {
        *self.default.lock().unwrap() = o;
    }
    pub fn set(&self, shed_id: &str, o: ProbeOutcome) {
        self.by_shed.lock().unwrap().insert(shed_id.to_string(), o);
    }

    /// Holds every probe (after it was asked, before it answers) until [`TestProbe::release`].
    pub fn hold(&self) {
        self.gate.held.send_replace(true);
    }

    pub fn release(&self) {
        self.gate.held.send_replace(false);
    }

    /// How many probes reached the gate.
    pub fn entered(&self) -> usize {
        self.gate.entered.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl Probe for TestProbe {
    async fn probe(&self, t: &ProbeTarget) -> ProbeOutcome {
        self.calls.fetch_add(1, Ordering::SeqCst);
        assert!(!t.address.is_empty(), "a probe has the VM's address");
        self.gate.pass().await;
        if let Some(o) = self.by_shed.lock().unwrap().get(&t.shed_id) {
            return o.clone();
        }
        self.default.lock().unwrap().clone()
    }
}

/// Echo services in process: what each URL says.
#[derive(Debug, Default)]
pub struct FakeEcho {
    said: Mutex<HashMap<String, Result<Ipv4Addr, String>>>,
    pub asked: AtomicUsize,
}

impl FakeEcho {
    pub fn say(&self, url: &str, r: Result<&str, &str>) {
        self.said.lock().unwrap().insert(
            url.to_string(),
            r.map(|a| a.parse().unwrap()).map_err(str::to_string),
        );
    }
}

#[async_trait]
impl Echo for FakeEcho {
    async fn ask(&self, url: &str) -> Result<Ipv4Addr, String> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        self.said
            .lock()
            .unwrap()
            .get(url)
            .cloned()
            .unwrap_or_else(|| Err("no answer".into()))
    }
}

/// A clock that runs with the system's, plus whatever a test adds with [`ManualClock::advance`]: a wait
/// of ten minutes ends as soon as a test has advanced the clock by ten minutes.
#[derive(Clone)]
pub struct ManualClock {
    inner: Arc<ManualInner>,
}

struct ManualInner {
    offset_ms: AtomicI64,
    changed: tokio::sync::watch::Sender<i64>,
}

impl fmt::Debug for ManualClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManualClock")
            .field("offset_ms", &self.inner.offset_ms.load(Ordering::SeqCst))
            .finish()
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl ManualClock {
    /// A clock at the system's time.
    pub fn new() -> Self {
        let (changed, _) = tokio::sync::watch::channel(0);
        ManualClock {
            inner: Arc::new(ManualInner {
                offset_ms: AtomicI64::new(0),
                changed,
            }),
        }
    }

    /// Moves this clock forward by `by`, waking every wait that has now ended.
    pub fn advance(&self, by: Duration) {
        let ms = i64::try_from(by.as_millis()).unwrap_or(i64::MAX / 4);
        let now = self.inner.offset_ms.fetch_add(ms, Ordering::SeqCst) + ms;
        self.inner.changed.send_replace(now);
    }
}

#[async_trait]
impl Clock for ManualClock {
    fn now(&self) -> orca::Timestamp {
        chrono::Utc::now()
            + chrono::Duration::milliseconds(self.inner.offset_ms.load(Ordering::SeqCst))
    }

    async fn sleep(&self, d: Duration) {
        let until = self.now() + chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX);
        let mut rx = self.inner.changed.subscribe();
        loop {
            let left = until - self.now();
            let Ok(left) = left.to_std() else { return };
            if left.is_zero() {
                return;
            }
            tokio::select! {
                _ = rx.changed() => {}
                _ = tokio::time::sleep(left) => {}
            }
        }
    }
}

#[tokio::test]
async fn a_manual_wait_ends_when_the_clock_is_advanced() {
    let c = ManualClock::new();
    // Polled here, so that each assertion follows what the wait saw: the first poll sets its end,
    // a poll after an advance has looked at the advanced clock.
    let mut waiting = std::pin::pin!(c.sleep(Duration::from_secs(600)));
    assert!(futures::poll!(waiting.as_mut()).is_pending());
    c.advance(Duration::from_secs(599));
    assert!(
        futures::poll!(waiting.as_mut()).is_pending(),
        "one second is still left"
    );
    c.advance(Duration::from_secs(1));
    tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the wait ended");
}

/// A configuration for tests and the in-memory provider: environment `env`, provider `fake`,
/// transport `local`, sizes of the in-memory catalogue, static firewall sources `203.0.113.7/32`,
/// state in `state_dir`, no clients (every call is the local admin's).
pub fn test_config(env: &str, state_dir: impl Into<PathBuf>) -> Config {
    let yaml = format!(
        "default_backend: remote\nremote:\n  provider: fake\n  transport: local\n  allow_test_drivers: true\n  environment: {env}\n  default_image: img-1\n  image_aliases: {{cloud: img-cloud}}\n  firewall:\n    source_ranges: [203.0.113.7/32]\n"
    );
    let mut c = FileConfig::parse(&yaml)
        .and_then(|f| f.resolve(&|_: &str| None))
        .expect("the test configuration is valid");
    c.state_dir = state_dir.into();
    c
}

/// Starts a backend as the server does, its `state_dir` opened (and locked) first.
pub async fn start_backend(parts: Parts) -> std::io::Result<Backend> {
    let store = Store::open(&parts.config.state_dir)?;
    Backend::start_on(store, parts).await
}

/// What tests ask of the server log.
pub trait LogCount {
    /// How many kept lines contain `needle`.
    fn count(&self, needle: &str) -> usize;
}

impl LogCount for ServerLog {
    fn count(&self, needle: &str) -> usize {
        self.lines().iter().filter(|l| l.contains(needle)).count()
    }
}

pub const ENV: &str = "dev";
pub const RULE: &str = "shed-dev-ssh";
pub const TAG: &str = "shed-dev";
pub const SOURCE: &str = "203.0.113.7/32";

/// The rule as shed's README makes it on Compute Engine.
pub fn good_rule() -> FirewallRule {
    let mut r = FirewallRule::new(RULE, DEFAULT_NETWORK);
    r.allowed = vec![FirewallPorts::new("tcp", ["22"])];
    r.target_tags = vec![TAG.into()];
    r.source_ranges = vec![SOURCE.into()];
    r
}

pub struct Env {
    pub cloud: MemoryCloud,
    pub wrapped: Arc<Wrapped>,
    /// Every call the server made, as orca's recording layer saw it (above `wrapped`'s controls).
    pub recorder: Recorder,
    /// The in-memory provider in the layer of `wrapped`'s controls, recorded by `recorder`.
    pub provider: Arc<dyn Provider>,
    pub clock: ManualClock,
    pub probe: Arc<TestProbe>,
    pub echo: Arc<FakeEcho>,
    pub dir: Arc<tempfile::TempDir>,
    pub cfg: Config,
    pub timings: Timings,
    pub backend: Backend,
}

/// The pass loop of tests runs only when a test advances the clock by ten hours; tests run passes
/// themselves.
pub fn test_timings() -> Timings {
    Timings::standard(Duration::from_secs(36_000))
}

impl Env {
    pub async fn new() -> Env {
        Self::build(|_| {}).await
    }

    pub async fn build(f: impl FnOnce(&mut Config)) -> Env {
        let dir = Arc::new(tempfile::tempdir().unwrap());
        let mut cfg = test_config(ENV, dir.path().join("remote"));
        f(&mut cfg);
        let cloud = MemoryCloud::new();
        cloud.put_firewall_rule(good_rule());
        Self::on(cloud, cfg, dir, test_timings()).await
    }

    /// A bench whose provider puts VMs on (and reads the rules of) network `network`, with the rule
    /// as shed's README makes it on that network.
    pub async fn on_network(network: &str) -> Env {
        let dir = Arc::new(tempfile::tempdir().unwrap());
        let cfg = test_config(ENV, dir.path().join("remote"));
        let cloud = MemoryCloud::new();
        let mut rule = good_rule();
        rule.network = network.into();
        cloud.put_firewall_rule(rule);
        let provider = cloud.provider(shed::OWNER).unwrap().with_network(network);
        Self::with_provider(cloud, Arc::new(provider), cfg, dir, test_timings()).await
    }

    pub async fn on(
        cloud: MemoryCloud,
        cfg: Config,
        dir: Arc<tempfile::TempDir>,
        timings: Timings,
    ) -> Env {
        let inner: Arc<dyn Provider> = Arc::new(cloud.provider(shed::OWNER).unwrap());
        Self::with_provider(cloud, inner, cfg, dir, timings).await
    }

    async fn with_provider(
        cloud: MemoryCloud,
        inner: Arc<dyn Provider>,
        cfg: Config,
        dir: Arc<tempfile::TempDir>,
        timings: Timings,
    ) -> Env {
        let wrapped = Arc::new(Wrapped::default());
        let recorder = Recorder::new();
        let controlled: Arc<dyn Provider> =
            Arc::new(Layered::new(inner, Controls(wrapped.clone())));
        let provider: Arc<dyn Provider> = Arc::new(Layered::new(controlled, recorder.clone()));
        let clock = ManualClock::new();
        let probe = Arc::new(TestProbe::default());
        let echo = Arc::new(FakeEcho::default());
        let backend = start_backend(Parts {
            config: cfg.clone(),
            provider: provider.clone(),
            probe: probe.clone(),
            echo: echo.clone(),
            clock: Arc::new(clock.clone()),
            timings,
        })
        .await
        .unwrap();
        Env {
            cloud,
            wrapped,
            recorder,
            provider,
            clock,
            probe,
            echo,
            dir,
            cfg,
            timings,
            backend,
        }
    }

    /// Stops the server as if killed and starts a new one on the same state, cloud and clock.
    pub async fn restart(&mut self) {
        self.backend.shutdown();
        self.backend = start_backend(self.parts()).await.unwrap();
    }

    /// The parts of a new backend on this bench.
    pub fn parts(&self) -> Parts {
        Parts {
            config: self.cfg.clone(),
            provider: self.provider.clone(),
            probe: self.probe.clone(),
            echo: self.echo.clone(),
            clock: Arc::new(self.clock.clone()),
            timings: self.timings,
        }
    }

    pub fn admin(&self) -> Caller {
        Caller::local_admin()
    }

    pub fn service(&self, name: &str) -> Caller {
        Caller {
            name: name.into(),
            role: Role::Service,
            max_age: None,
            max_cpus: None,
            max_memory_mb: None,
            images: Vec::new(),
        }
    }

    /// Moves the server's and the cloud's clocks forward together.
    pub async fn advance(&self, secs: u64) {
        self.cloud.advance_clock(Duration::from_secs(secs));
        self.clock.advance(Duration::from_secs(secs));
        tokio::task::yield_now().await;
    }

    /// Waits (real time, at most 10 s) until `cond` holds.
    pub async fn until(&self, what: &str, mut cond: impl FnMut(&Env) -> bool) {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !cond(self) {
            assert!(
                std::time::Instant::now() < deadline,
                "timed out waiting for {what}; sheds {:?}; markers {:?}; log {:#?}",
                self.backend.records(),
                self.backend.markers(),
                self.backend.log().lines()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Waits until no job runs.
    pub async fn idle(&self) {
        self.until("no job", |e| e.backend.idle()).await;
    }

    pub fn req(name: &str) -> CreateRequest {
        CreateRequest {
            name: name.into(),
            ..CreateRequest::default()
        }
    }

    /// A JSON create as the API does it: the create, then the accept wait.
    pub async fn create_as(&self, c: &Caller, req: CreateRequest) -> Result<ShedView, ApiError> {
        let id = self.backend.create(c, req).await?;
        self.backend.wait_accept(&id).await
    }

    pub async fn create(&self, name: &str) -> Result<ShedView, ApiError> {
        self.create_as(&self.admin(), Self::req(name)).await
    }

    /// Creates `name` and waits until it runs.
    pub async fn running(&self, name: &str) -> ShedView {
        self.create(name).await.unwrap();
        self.until_status(name, Status::Running).await;
        self.view(name).unwrap()
    }

    pub async fn until_status(&self, name: &str, s: Status) {
        self.until(&format!("{name} {s}"), |e| {
            e.view(name).map(|v| v.status) == Some(s)
        })
        .await;
    }

    pub fn view(&self, name: &str) -> Option<ShedView> {
        self.backend.get(&self.admin(), name).ok()
    }

    pub fn record(&self, name: &str) -> Option<Shed> {
        self.backend.records().into_iter().find(|s| s.name == name)
    }

    /// Every VM of this environment in the cloud, of any state.
    pub fn vms(&self) -> Vec<Machine> {
        self.cloud.all_machines()
    }

    pub fn vm_of_id(&self, id: &str) -> Option<Machine> {
        self.vms()
            .into_iter()
            .find(|m| m.labels.get(ID_LABEL).map(String::as_str) == Some(id))
    }

    pub fn vm(&self, name: &str) -> Option<Machine> {
        let id = self.record(name)?.id;
        self.vm_of_id(&id)
    }

    pub async fn pass(&self) {
        self.backend.pass(false).await;
    }

    pub fn log_has(&self, needle: &str) -> bool {
        self.backend.log().count(needle) > 0
    }
}
