//! The remote backend: the record of every shed, the calls of the API (create, start, stop, delete,
//! list), the limits, and the jobs that do the cloud work in the background ([`crate::jobs`]) and the
//! periodic pass that keeps records and cloud in step ([`crate::pass`]).
//!
//! One lock (`State`) guards the records; it is never held across a cloud call. Every change of a
//! record is written to `state_dir` before the lock is let go, and announced on a watch channel that
//! the streamed answers and the jobs' waits follow.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use orca::labels::Labels;
use orca::{MachineSpec, Provider, Timestamp};
use serde::{Deserialize, Serialize};
use tokio::task::AbortHandle;

use crate::clock::{since, Clock};
use crate::config::{Config, FirewallMode, Role, Size};
use crate::echo::Echo;
use crate::firewall::{Expectation, FirewallCheck, FirewallTimings, Outcome};
use crate::log::ServerLog;
use crate::model::{
    new_id, validate_shed_name, CreateStage, DeleteMarker, Op, Queued, Shed, ShedView, Status,
};
use crate::probe::Probe;
use crate::store::Store;

/// The label holding the environment's name.
pub const ENV_LABEL: &str = "shed-env";
/// The label holding the shed's ID.
pub const ID_LABEL: &str = "shed-id";
/// The label holding the shed's name.
pub const NAME_LABEL: &str = "shed-name";
/// The label holding the size's name.
pub const SIZE_LABEL: &str = "shed-size";
/// The label holding the client's name.
pub const CLIENT_LABEL: &str = "shed-client";
/// The lifecycle label: `creating`, `ready` or `deleting`.
pub const STATE_LABEL: &str = "shed-state";
/// The label holding the label schema's version.
pub const SCHEMA_LABEL: &str = "shed-schema";
/// The label schema this server writes and reads.
pub const SCHEMA: &str = "1";

/// The seed's durations, on the server's clock (tests shorten none of them: they advance the clock).
#[derive(Debug, Clone, Copy)]
pub struct Timings {
    /// The periodic pass (1 min; `remote.pass_interval`).
    pub pass_interval: Duration,
    /// How long a JSON create waits for the cloud to accept the VM (15 s).
    pub accept_wait: Duration,
    /// A delete older than this whose VM still exists is retried and counts against `max_running`
    /// (2 min).
    pub delete_grace: Duration,
    /// A VM still labelled `creating` this long after the cloud made it, with no record, is destroyed
    /// (15 min).
    pub orphan_age: Duration,
    /// A VM that stopped within this of its run limit stopped for it (2 min).
    pub run_limit_window: Duration,
    /// A create or start runs the firewall check when its last result is older than this (60 s).
    pub check_freshness: Duration,
    /// How long a create waits for the VM's agent (5 min).
    pub agent_wait: Duration,
    /// The pause between two probes of an agent that did not answer (5 s).
    pub probe_interval: Duration,
    /// The firewall check's own durations (5 min, 10 min, 15 min).
    pub firewall: FirewallTimings,
}

impl Timings {
    /// The seed's durations with the pass every `pass_interval`.
    pub fn seed(pass_interval: Duration) -> Self {
        Timings {
            pass_interval,
            accept_wait: Duration::from_secs(15),
            delete_grace: Duration::from_secs(120),
            orphan_age: Duration::from_secs(900),
            run_limit_window: Duration::from_secs(120),
            check_freshness: Duration::from_secs(60),
            agent_wait: Duration::from_secs(300),
            probe_interval: Duration::from_secs(5),
            firewall: FirewallTimings::default(),
        }
    }
}

/// An error answer of the API: HTTP status, the seed's code and a message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiError {
    /// The HTTP status.
    pub status: u16,
    /// The code (`SERVER_LIMIT_REACHED`, ...).
    pub code: String,
    /// What happened, for the caller.
    pub message: String,
}

impl ApiError {
    /// An error of `status` with `code`.
    pub fn new(status: u16, code: &str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code: code.into(),
            message: message.into(),
        }
    }

    /// 400 `INVALID_REQUEST`.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(400, "INVALID_REQUEST", message)
    }

    /// 404 `NOT_FOUND`.
    pub fn not_found(name: &str) -> Self {
        Self::new(404, "NOT_FOUND", format!("shed {name:?} not found"))
    }

    /// 422 `FEATURE_UNSUPPORTED` (a create field).
    pub fn unsupported_field(message: impl Into<String>) -> Self {
        Self::new(422, "FEATURE_UNSUPPORTED", message)
    }

    /// 501 `FEATURE_UNSUPPORTED` (a route).
    pub fn unsupported_route(message: impl Into<String>) -> Self {
        Self::new(501, "FEATURE_UNSUPPORTED", message)
    }

    /// 503 `CLOUD_QUOTA_EXCEEDED`.
    pub fn quota() -> Self {
        Self::new(
            503,
            "CLOUD_QUOTA_EXCEEDED",
            "the cloud project's quota is reached; nothing was created: try again later",
        )
    }

    /// 503 `ZONE_CAPACITY_UNAVAILABLE`.
    pub fn capacity() -> Self {
        Self::new(
            503,
            "ZONE_CAPACITY_UNAVAILABLE",
            "the zone has no room for the machine type right now; nothing was created: try again later",
        )
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.status, self.code, self.message)
    }
}

/// Who is calling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The client's name (`local` when the server has no clients).
    pub name: String,
    /// Its role.
    pub role: Role,
    /// Its sheds run at least this long.
    pub max_age: Option<Duration>,
    /// Caps on the size of its sheds.
    pub max_cpus: Option<u32>,
    /// Caps on the size of its sheds.
    pub max_memory_mb: Option<u32>,
    /// Image names it may use (empty: all).
    pub images: Vec<String>,
}

impl Caller {
    /// The local admin (a server without clients).
    pub fn local_admin() -> Self {
        Caller {
            name: "local".into(),
            role: Role::Admin,
            max_age: None,
            max_cpus: None,
            max_memory_mb: None,
            images: Vec::new(),
        }
    }

    /// Whether this caller is an admin.
    pub fn is_admin(&self) -> bool {
        self.role == Role::Admin
    }

    /// Whether the caller may use image `name` (an `image_aliases` name, or `default`): every image
    /// when its list is empty; the default image when one of its aliases names that same image.
    pub fn may_use(&self, name: &str, cfg: &Config) -> bool {
        self.images.is_empty()
            || self.images.iter().any(|i| i == name)
            || (name == "default"
                && self
                    .images
                    .iter()
                    .any(|a| cfg.image_aliases.get(a) == Some(&cfg.default_image)))
    }

    fn sees(&self, s: &Shed) -> bool {
        self.is_admin() || s.client == self.name
    }
}

/// A create request's body (`POST /api/sheds`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateRequest {
    /// The shed's name.
    pub name: String,
    /// An `image_aliases` name (default: `default_image`).
    #[serde(default)]
    pub image: Option<String>,
    /// At least this many CPUs.
    #[serde(default)]
    pub cpus: Option<u32>,
    /// At least this much memory.
    #[serde(default)]
    pub memory_mb: Option<u32>,
    /// The boot disk's size in bytes (rounded up to whole GB, 10 to 500 GB).
    #[serde(default)]
    pub upper_size_bytes: Option<u64>,
    /// `default` or `isolated`.
    #[serde(default)]
    pub network_profile: Option<String>,
    /// Host directory (refused: 422).
    #[serde(default)]
    pub local_dir: Option<String>,
    /// Host directories (refused: 422).
    #[serde(default)]
    pub add_dirs: Option<Vec<String>>,
    /// Server mounts (a non-empty list is refused: 422).
    #[serde(default)]
    pub mounts: Option<Vec<String>>,
    /// A snapshot to start from (refused: 422).
    #[serde(default)]
    pub from_snapshot: Option<String>,
    /// Egress profiles (absent or exactly `["off"]`; anything else, `[]` included, is refused: 422).
    #[serde(default)]
    pub egress: Option<Vec<String>>,
    /// A repository to clone (not built in this example: 501).
    #[serde(default)]
    pub repo: Option<String>,
}

/// What `GET /api/info` answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Info {
    /// `remote`.
    pub backend: String,
    /// The default image.
    pub default_image: String,
    /// Feature tokens.
    pub features: Vec<String>,
    /// `topology`.
    pub isolation: String,
    /// The sizes.
    pub sizes: Vec<SizeInfo>,
    /// The default size.
    pub default_size: String,
    /// The image names clients may ask for.
    pub images: Vec<String>,
    /// The network profiles a create may ask for.
    pub network_profiles: Vec<String>,
}

/// A size in `GET /api/info`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SizeInfo {
    /// Its name.
    pub name: String,
    /// CPUs.
    pub cpus: u32,
    /// Memory.
    pub memory_mb: u32,
}

/// What a start or stop did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Effect {
    /// The status changed (to `starting` or `stopping`).
    Changed,
    /// Queued behind the cloud operation already running.
    Queued,
    /// Nothing to do.
    NoChange,
}

impl Effect {
    /// The API's word.
    pub fn as_str(self) -> &'static str {
        match self {
            Effect::Changed => "changed",
            Effect::Queued => "queued",
            Effect::NoChange => "no_change",
        }
    }
}

#[derive(Debug, Default)]
pub(crate) struct State {
    pub(crate) sheds: BTreeMap<String, Shed>,
    pub(crate) deletes: BTreeMap<String, DeleteMarker>,
    /// Ids (of sheds or markers) with a job running.
    pub(crate) jobs: HashSet<String>,
    /// Creates whose request still waits for the cloud to accept the VM.
    pub(crate) waiters: HashSet<String>,
    /// Early refusals for those waiters.
    pub(crate) refused: HashMap<String, ApiError>,
    /// The shed as it was when the cloud accepted its VM, for those waiters.
    pub(crate) accepted: HashMap<String, ShedView>,
}

pub(crate) struct Inner {
    pub(crate) cfg: Config,
    pub(crate) provider: Arc<dyn Provider>,
    pub(crate) probe: Arc<dyn Probe>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) firewall: FirewallCheck,
    pub(crate) store: Store,
    pub(crate) log: ServerLog,
    pub(crate) timings: Timings,
    pub(crate) state: Mutex<State>,
    pub(crate) changed: tokio::sync::watch::Sender<u64>,
    pub(crate) pass_lock: tokio::sync::Mutex<()>,
    pub(crate) tasks: Mutex<Vec<AbortHandle>>,
}

/// The remote backend (cheap to clone).
#[derive(Clone)]
pub struct Backend {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backend")
            .field("environment", &self.inner.cfg.environment)
            .finish_non_exhaustive()
    }
}

/// What a backend is made of: the configuration and the parts a test replaces.
pub struct Parts {
    /// The configuration.
    pub config: Config,
    /// The cloud.
    pub provider: Arc<dyn Provider>,
    /// How agents are asked.
    pub probe: Arc<dyn Probe>,
    /// The echo services' client (mode auto).
    pub echo: Arc<dyn Echo>,
    /// The clock.
    pub clock: Arc<dyn Clock>,
    /// The durations.
    pub timings: Timings,
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Backend {
    /// Starts the backend: loads `state_dir`, runs the firewall check and the start-up reconciliation
    /// (the seed's "Server restarts" list), resumes the jobs, and starts the periodic pass.
    pub async fn start(parts: Parts) -> std::io::Result<Backend> {
        let b = Self::load(parts)?;
        b.pass(true).await;
        let weak = Arc::downgrade(&b.inner);
        let interval = b.inner.timings.pass_interval;
        let clock = b.inner.clock.clone();
        let h = tokio::spawn(async move {
            loop {
                clock.sleep(interval).await;
                let Some(inner) = weak.upgrade() else { return };
                Backend { inner }.pass(false).await;
            }
        });
        b.track(h.abort_handle());
        Ok(b)
    }

    /// Loads `state_dir` without reconciling or starting anything (tests of the start-up steps).
    pub fn load(parts: Parts) -> std::io::Result<Backend> {
        let store = Store::open(&parts.config.state_dir)?;
        let log = ServerLog::new();
        let cfg = parts.config;
        let firewall = FirewallCheck::new(
            Expectation {
                mode: cfg.firewall.mode,
                source_ranges: cfg.firewall.source_ranges.clone(),
                echo_urls: cfg.firewall.echo_urls.clone(),
                rule_name: cfg.rule_name(),
                tag: cfg.network_tag(),
            },
            parts.provider.clone(),
            parts.echo,
            parts.clock.clone(),
            log.clone(),
            parts.timings.firewall,
        );
        let loaded = store.load();
        for (path, why) in &loaded.unreadable {
            log.warn(format!(
                "remote: the record {} could not be read and is ignored: {why}",
                path.display()
            ));
        }
        let mut st = State::default();
        for m in loaded.deletes {
            st.deletes.insert(m.id.clone(), m);
        }
        for s in loaded.sheds {
            if st.deletes.contains_key(&s.id) {
                // The delete was acknowledged; the record's removal did not reach the disk.
                let _ = store.remove_shed(&s.id);
                continue;
            }
            st.sheds.insert(s.id.clone(), s);
        }
        let (changed, _) = tokio::sync::watch::channel(0);
        Ok(Backend {
            inner: Arc::new(Inner {
                cfg,
                provider: parts.provider,
                probe: parts.probe,
                clock: parts.clock,
                firewall,
                store,
                log,
                timings: parts.timings,
                state: Mutex::new(st),
                changed,
                pass_lock: tokio::sync::Mutex::new(()),
                tasks: Mutex::new(Vec::new()),
            }),
        })
    }

    /// Stops the periodic pass and every job at once, as a server that is killed: nothing is tidied.
    pub fn shutdown(&self) {
        let tasks =
            std::mem::take(&mut *self.inner.tasks.lock().unwrap_or_else(|p| p.into_inner()));
        for t in tasks {
            t.abort();
        }
    }

    pub(crate) fn track(&self, h: AbortHandle) {
        let mut t = self.inner.tasks.lock().unwrap_or_else(|p| p.into_inner());
        t.retain(|h| !h.is_finished());
        t.push(h);
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.inner.cfg
    }

    /// The server log.
    pub fn log(&self) -> &ServerLog {
        &self.inner.log
    }

    /// The clock.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.inner.clock
    }

    /// The firewall check's last result.
    pub fn firewall_last(&self) -> Option<Outcome> {
        self.inner.firewall.last()
    }

    /// Runs the firewall check now.
    pub async fn firewall_check(&self) -> Outcome {
        self.inner.firewall.check().await
    }

    /// A receiver that sees every change of a record.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.changed.subscribe()
    }

    pub(crate) fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.inner.state)
    }

    pub(crate) fn now(&self) -> Timestamp {
        self.inner.clock.now()
    }

    pub(crate) fn bump(&self) {
        self.inner.changed.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// Writes shed `s` (in `st`) to disk; logs a failure (the record stays in memory).
    pub(crate) fn save(&self, s: &Shed) {
        if let Err(e) = self.inner.store.save_shed(s) {
            self.inner.log.warn(format!(
                "remote: the record of shed {} could not be written: {e}",
                s.name
            ));
        }
    }

    pub(crate) fn save_marker(&self, m: &DeleteMarker) {
        if let Err(e) = self.inner.store.save_marker(m) {
            self.inner.log.warn(format!(
                "remote: the delete marker of shed {} could not be written: {e}",
                m.name
            ));
        }
    }

    pub(crate) fn drop_record(&self, st: &mut State, id: &str) -> Option<Shed> {
        let s = st.sheds.remove(id);
        if let Err(e) = self.inner.store.remove_shed(id) {
            self.inner
                .log
                .warn(format!("remote: the record {id} could not be removed: {e}"));
        }
        s
    }

    pub(crate) fn drop_marker(&self, st: &mut State, id: &str) -> Option<DeleteMarker> {
        let m = st.deletes.remove(id);
        if let Err(e) = self.inner.store.remove_marker(id) {
            self.inner.log.warn(format!(
                "remote: the delete marker {id} could not be removed: {e}"
            ));
        }
        m
    }

    /// Every record the server keeps (hidden deletes aside), for tests and the soak's invariants.
    pub fn records(&self) -> Vec<Shed> {
        self.state().sheds.values().cloned().collect()
    }

    /// Every delete marker.
    pub fn markers(&self) -> Vec<DeleteMarker> {
        self.state().deletes.values().cloned().collect()
    }

    /// Whether a job is running for shed (or delete) `id`.
    pub fn has_job(&self, id: &str) -> bool {
        self.state().jobs.contains(id)
    }

    /// Whether no job is running.
    pub fn idle(&self) -> bool {
        self.state().jobs.is_empty()
    }

    /// The labels a shed's VM is made with.
    pub(crate) fn vm_labels(&self, s: &Shed, state: &str) -> Labels {
        Labels::from([
            (ENV_LABEL.to_string(), self.inner.cfg.environment.clone()),
            (ID_LABEL.to_string(), s.id.clone()),
            (NAME_LABEL.to_string(), s.name.clone()),
            (SIZE_LABEL.to_string(), s.size.clone()),
            (CLIENT_LABEL.to_string(), s.client.clone()),
            (STATE_LABEL.to_string(), state.to_string()),
            (SCHEMA_LABEL.to_string(), SCHEMA.to_string()),
        ])
    }

    /// The spec a shed's VM is made from.
    pub(crate) fn vm_spec(&self, s: &Shed) -> MachineSpec {
        let cfg = &self.inner.cfg;
        let image = cfg
            .image_aliases
            .get(&s.image)
            .cloned()
            .unwrap_or_else(|| cfg.default_image.clone());
        MachineSpec::new(&s.vm_name, &s.machine_type, &cfg.location, &cfg.environment)
            .with_labels(self.vm_labels(s, "creating"))
            .with_max_run_duration(Duration::from_secs(s.max_run_secs))
            .with_network_tag(cfg.network_tag())
            .with_image(image)
            .with_disk_gb(s.disk_gb)
    }

    /// `max_running`'s count: sheds whose VM is on, and VMs of deletes older than two minutes.
    pub(crate) fn running_count(&self, st: &State, exclude: Option<&str>) -> (usize, usize) {
        let now = self.now();
        let on = st
            .sheds
            .values()
            .filter(|s| Some(s.id.as_str()) != exclude && s.status.counts_as_running())
            .count();
        let lingering = st
            .deletes
            .values()
            .filter(|m| {
                m.may_have_vm && since(now, m.acknowledged_at) > self.inner.timings.delete_grace
            })
            .count();
        (on, lingering)
    }

    /// Checks the limits for one more running shed (and, for a new one, one more shed).
    pub(crate) fn check_limits(
        &self,
        st: &State,
        exclude: Option<&str>,
        new_shed: bool,
    ) -> Result<(), ApiError> {
        let limits = self.inner.cfg.limits;
        if new_shed {
            let kept = st
                .sheds
                .values()
                .filter(|s| Some(s.id.as_str()) != exclude)
                .count();
            if kept >= limits.max_sheds as usize {
                return Err(ApiError::new(
                    503,
                    "SERVER_LIMIT_REACHED",
                    format!(
                        "the server keeps at most {} sheds (max_sheds) and keeps {kept}: delete one first",
                        limits.max_sheds
                    ),
                ));
            }
        }
        let (on, lingering) = self.running_count(st, exclude);
        if on + lingering >= limits.max_running as usize {
            let mut m = format!(
                "the server runs at most {} sheds at once (max_running) and {} are running",
                limits.max_running,
                on + lingering
            );
            if lingering > 0 {
                m.push_str(&format!(
                    ", {lingering} of them the VM of a deleted shed that could not be destroyed yet (the server keeps trying; its log has the cloud's error)"
                ));
            }
            m.push_str(": stop one, or try again later");
            return Err(ApiError::new(503, "SERVER_LIMIT_REACHED", m));
        }
        Ok(())
    }

    /// `GET /api/info`.
    pub fn info(&self, caller: &Caller) -> Info {
        let cfg = &self.inner.cfg;
        let default_image = if caller.is_admin() {
            cfg.default_image.clone()
        } else {
            // A service client is never told a path that may name the project.
            cfg.default_image
                .rsplit('/')
                .next()
                .unwrap_or_default()
                .to_string()
        };
        let mut profiles = vec!["default".to_string()];
        if cfg.isolated_available() {
            profiles.push("isolated".into());
        }
        Info {
            backend: "remote".into(),
            default_image,
            features: vec![
                "async_lifecycle".into(),
                "network_profiles".into(),
                "service_clients".into(),
                // The seed lists it "as on any server"; the exec route answers as it does (409
                // SHED_NOT_RUNNING, else 501 in this example).
                "http_exec".into(),
            ],
            isolation: "topology".into(),
            sizes: cfg
                .sizes
                .values()
                .map(|s| SizeInfo {
                    name: s.name.clone(),
                    cpus: s.cpus,
                    memory_mb: s.memory_mb,
                })
                .collect(),
            default_size: cfg.default_size.clone(),
            images: cfg.image_aliases.keys().cloned().collect(),
            network_profiles: profiles,
        }
    }

    /// `GET /api/sheds`: the caller's sheds (every shed for an admin), by name.
    pub fn list(&self, caller: &Caller) -> Vec<ShedView> {
        let st = self.state();
        let mut v: Vec<ShedView> = st
            .sheds
            .values()
            .filter(|s| caller.sees(s))
            .map(ShedView::from)
            .collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    }

    /// The caller's shed named `name`: 400 for a name no shed can have (one that arrived
    /// percent-encoded with a `/` or dot segments in it), 404 when the caller has no such shed.
    pub(crate) fn find<'a>(
        st: &'a State,
        caller: &Caller,
        name: &str,
    ) -> Result<&'a Shed, ApiError> {
        validate_shed_name(name).map_err(ApiError::invalid)?;
        st.sheds
            .values()
            .find(|s| s.name == name && caller.sees(s))
            .ok_or_else(|| ApiError::not_found(name))
    }

    /// `GET /api/sheds/{name}`.
    pub fn get(&self, caller: &Caller, name: &str) -> Result<ShedView, ApiError> {
        let st = self.state();
        Self::find(&st, caller, name).map(ShedView::from)
    }

    /// The size a create gets: `default_size` with neither cpus nor memory, else the smallest size
    /// with at least both.
    pub fn pick_size(&self, cpus: Option<u32>, memory_mb: Option<u32>) -> Result<Size, ApiError> {
        let cfg = &self.inner.cfg;
        if cpus.is_none() && memory_mb.is_none() {
            return Ok(cfg.sizes[&cfg.default_size].clone());
        }
        let (c, m) = (cpus.unwrap_or(0), memory_mb.unwrap_or(0));
        let mut fit: Vec<&Size> = cfg
            .sizes
            .values()
            .filter(|s| s.cpus >= c && s.memory_mb >= m)
            .collect();
        fit.sort_by_key(|s| (s.cpus, s.memory_mb, s.name.clone()));
        fit.first().map(|s| (*s).clone()).ok_or_else(|| {
            ApiError::invalid(format!(
                "no configured size has at least {c} cpus and {m} MB of memory; the sizes are {}",
                cfg.sizes
                    .values()
                    .map(|s| format!("{} ({} cpus, {} MB)", s.name, s.cpus, s.memory_mb))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })
    }

    /// Checks a create request and makes its record (status `starting`), then starts its job. Every
    /// refusal comes before anything is created. Answers the new shed's ID.
    pub async fn create(&self, caller: &Caller, req: CreateRequest) -> Result<String, ApiError> {
        let cfg = &self.inner.cfg;
        validate_shed_name(&req.name).map_err(ApiError::invalid)?;
        // Features a remote shed does not have.
        if req.local_dir.as_deref().is_some_and(|d| !d.is_empty()) {
            return Err(ApiError::unsupported_field(
                "local_dir: a remote shed has no host directories",
            ));
        }
        if req.add_dirs.as_ref().is_some_and(|d| !d.is_empty()) {
            return Err(ApiError::unsupported_field(
                "add_dirs: a remote shed has no host directories",
            ));
        }
        if req.mounts.as_ref().is_some_and(|m| !m.is_empty()) {
            return Err(ApiError::unsupported_field(
                "mounts: a remote shed has no server mounts",
            ));
        }
        if req.from_snapshot.as_deref().is_some_and(|s| !s.is_empty()) {
            return Err(ApiError::unsupported_field(
                "from_snapshot: a remote server has no snapshots",
            ));
        }
        if let Some(e) = &req.egress {
            if e.as_slice() != ["off"] {
                return Err(ApiError::unsupported_field(
                    "egress: a remote server has no egress profiles: only [\"off\"] is accepted, or no egress at all",
                ));
            }
        }
        if req.repo.is_some() {
            return Err(ApiError::unsupported_route(
                "repo: repository clones are not built in this example server",
            ));
        }
        let profile = req
            .network_profile
            .clone()
            .unwrap_or_else(|| cfg.default_profile.clone());
        match profile.as_str() {
            "default" => {}
            "isolated" if cfg.isolated_available() => {}
            "isolated" => {
                return Err(ApiError::unsupported_field(
                    "network_profile: the isolated profile is unavailable on this server (its firewall admits any address)",
                ))
            }
            other => {
                return Err(ApiError::invalid(format!(
                    "network_profile: default or isolated, got {other:?}"
                )))
            }
        }
        let size = self.pick_size(req.cpus, req.memory_mb)?;
        let disk_gb = match req.upper_size_bytes {
            None => cfg.disk_gb,
            Some(bytes) => {
                const GB: u64 = 1 << 30;
                let gb = bytes.div_ceil(GB);
                let (lo, hi) = crate::config::DISK_GB_RANGE;
                if gb < u64::from(lo) || gb > u64::from(hi) {
                    return Err(ApiError::invalid(format!(
                        "upper_size_bytes: the disk is {lo} to {hi} GB, got {gb} GB"
                    )));
                }
                gb as u32
            }
        };
        let image = req.image.clone().unwrap_or_else(|| "default".into());
        if image != "default" && !cfg.image_aliases.contains_key(&image) {
            return Err(ApiError::invalid(format!(
                "image: {image:?} is not an image of this server; its images are default{}",
                cfg.image_aliases
                    .keys()
                    .map(|k| format!(", {k}"))
                    .collect::<String>()
            )));
        }
        if !caller.may_use(&image, cfg) {
            return Err(ApiError::new(
                403,
                "FORBIDDEN",
                format!("image: client {} may not use {image:?}", caller.name),
            ));
        }
        if caller.max_cpus.is_some_and(|c| size.cpus > c)
            || caller.max_memory_mb.is_some_and(|m| size.memory_mb > m)
        {
            return Err(ApiError::new(
                403,
                "FORBIDDEN",
                format!(
                    "size {} ({} cpus, {} MB) is above client {}'s caps",
                    size.name, size.cpus, size.memory_mb, caller.name
                ),
            ));
        }
        {
            let st = self.state();
            if st.sheds.values().any(|s| s.name == req.name) {
                return Err(ApiError::new(
                    409,
                    "SHED_EXISTS",
                    format!("shed {:?} already exists", req.name),
                ));
            }
        }
        self.require_firewall(caller).await?;
        let max_run = cfg.max_run_duration.max(caller.max_age.unwrap_or_default());
        let now = self.now();
        let id = new_id();
        let shed = Shed {
            id: id.clone(),
            name: req.name.clone(),
            client: caller.name.clone(),
            size: size.name.clone(),
            machine_type: size.machine_type.clone(),
            cpus: size.cpus,
            memory_mb: size.memory_mb,
            disk_gb,
            image,
            network_profile: profile,
            max_run_secs: max_run.as_secs(),
            status: Status::Starting,
            reason: None,
            vm_name: format!("shed-{}-{id}", cfg.environment),
            vm_id: None,
            create: CreateStage::NotSent,
            op: Some(Op::Create),
            queued: None,
            start_sent: false,
            vm_gone: false,
            foreign_labels: false,
            created_at: now,
            updated_at: now,
            detail: None,
        };
        {
            let mut st = self.state();
            if st.sheds.values().any(|s| s.name == req.name) {
                return Err(ApiError::new(
                    409,
                    "SHED_EXISTS",
                    format!("shed {:?} already exists", req.name),
                ));
            }
            self.check_limits(&st, None, true)?;
            self.save(&shed);
            st.sheds.insert(id.clone(), shed);
            st.waiters.insert(id.clone());
        }
        self.inner.log.info(format!(
            "remote: shed {} ({id}) create accepted for client {}",
            req.name, caller.name
        ));
        self.bump();
        self.spawn_job(&id);
        Ok(id)
    }

    /// Waits (at most the accept wait, 15 s) for the cloud to accept shed `id`'s VM: the shed, or the
    /// early quota or capacity refusal (then there is no shed).
    ///
    /// However it ends (an answer, or the request dropped because its client went away), the shed
    /// stops being waited for: a refusal after that leaves the shed in `error`.
    pub fn wait_accept<'a>(
        &'a self,
        id: &'a str,
    ) -> impl std::future::Future<Output = Result<ShedView, ApiError>> + 'a {
        /// Forgets the waiter when the wait ends or is dropped (before its first poll included).
        struct Forget<'a>(&'a Backend, &'a str);
        impl Drop for Forget<'_> {
            fn drop(&mut self) {
                self.0.forget_waiter(self.1);
            }
        }
        let forget = Forget(self, id);
        async move {
            let _forget = forget;
            self.accept(id).await
        }
    }

    async fn accept(&self, id: &str) -> Result<ShedView, ApiError> {
        let deadline = self.now()
            + chrono::Duration::from_std(self.inner.timings.accept_wait).unwrap_or_default();
        let mut rx = self.subscribe();
        // The seed: a JSON create answers 201 with status starting (the shed as it was accepted);
        // only an early quota or capacity refusal is answered otherwise (503, no shed). A create
        // that fails for another reason, or a shed deleted, within the wait is seen by polling.
        let as_accepted = |s: &Shed| {
            let mut v = ShedView::from(s);
            v.status = Status::Starting;
            v.status_reason = String::new();
            v
        };
        let mut accepted_view: Option<ShedView> = None;
        loop {
            {
                let mut st = self.state();
                // The waiter is removed under the lock that decides the answer, so that a refusal
                // after this answer finds no waiter and leaves the shed in error.
                if let Some(e) = st.refused.remove(id) {
                    st.waiters.remove(id);
                    return Err(e);
                }
                if let Some(v) = st.accepted.remove(id) {
                    st.waiters.remove(id);
                    return Ok(v);
                }
                let done = self.now() >= deadline;
                match st.sheds.get(id) {
                    None => {
                        st.waiters.remove(id);
                        return accepted_view.ok_or_else(|| {
                            ApiError::new(
                                404,
                                "NOT_FOUND",
                                "the shed was deleted before its create was answered",
                            )
                        });
                    }
                    Some(s) if s.status != Status::Starting => {
                        let v = as_accepted(s);
                        st.waiters.remove(id);
                        return Ok(v);
                    }
                    Some(s) if s.create == CreateStage::Made || done => {
                        let v = ShedView::from(s);
                        st.waiters.remove(id);
                        return Ok(v);
                    }
                    Some(s) => {
                        if accepted_view.is_none() {
                            accepted_view = Some(as_accepted(s));
                        }
                    }
                }
            }
            let left = since(deadline, self.now());
            tokio::select! {
                _ = rx.changed() => {}
                _ = self.inner.clock.sleep(left) => {}
            }
        }
    }

    /// Stops waiting for shed `id`'s acceptance (what the end of [`Backend::wait_accept`] does).
    pub fn forget_waiter(&self, id: &str) {
        let mut st = self.state();
        st.waiters.remove(id);
        st.refused.remove(id);
        st.accepted.remove(id);
    }

    /// Refuses with `FIREWALL_CHECK_FAILED` while the firewall check fails (running it when its last
    /// result is older than 60 s).
    pub(crate) async fn require_firewall(&self, caller: &Caller) -> Result<(), ApiError> {
        let o = self
            .inner
            .firewall
            .fresh(self.inner.timings.check_freshness)
            .await;
        if o.passed {
            return Ok(());
        }
        Err(self.firewall_refusal(caller, &o))
    }

    fn firewall_refusal(&self, caller: &Caller, o: &Outcome) -> ApiError {
        let message = if caller.is_admin() {
            format!(
                "the firewall check is failing (mode {}, reason {}): {}",
                self.inner.cfg.firewall.mode.as_str(),
                o.reason.map(|r| r.as_str()).unwrap_or(""),
                o.message
            )
        } else {
            o.service_message()
        };
        ApiError::new(503, "FIREWALL_CHECK_FAILED", message)
    }

    /// `POST /api/sheds/{name}/start` (the seed's call matrix).
    pub async fn start_shed(
        &self,
        caller: &Caller,
        name: &str,
    ) -> Result<(ShedView, Effect), ApiError> {
        let (id, status) = {
            let st = self.state();
            let s = Self::find(&st, caller, name)?;
            (s.id.clone(), s.status)
        };
        if status == Status::Stopped {
            self.require_firewall(caller).await?;
        }
        let now = self.now();
        let mut st = self.state();
        let Some(s) = st.sheds.get(&id) else {
            return Err(ApiError::not_found(name));
        };
        let effect = match s.status {
            Status::Starting => {
                let s = st.sheds.get_mut(&id).expect("found");
                if s.queued == Some(Queued::Stop) {
                    s.queued = None;
                    let snapshot = s.clone();
                    self.save(&snapshot);
                }
                Effect::NoChange
            }
            Status::Running => {
                return Err(ApiError::new(
                    409,
                    "SHED_RUNNING",
                    format!("shed {name:?} is running"),
                ))
            }
            Status::Stopping => {
                let s = st.sheds.get_mut(&id).expect("found");
                s.queued = Some(Queued::Start);
                let snapshot = s.clone();
                self.save(&snapshot);
                Effect::Queued
            }
            Status::Stopped => {
                if status != Status::Stopped {
                    // It stopped while the call looked: judge by the last result.
                    if let Some(o) = self.inner.firewall.last().filter(|o| !o.passed) {
                        return Err(self.firewall_refusal(caller, &o));
                    }
                }
                self.check_limits(&st, Some(&id), false)?;
                let s = st.sheds.get_mut(&id).expect("found");
                s.set(Status::Starting, None, now);
                s.op = Some(Op::Start);
                s.start_sent = false;
                s.queued = None;
                let snapshot = s.clone();
                self.save(&snapshot);
                Effect::Changed
            }
            Status::Error => {
                return Err(ApiError::new(
                    409,
                    "SHED_FAILED",
                    format!(
                        "shed {name:?} is in error (reason {}): its create failed, and only a delete leaves this state",
                        s.reason.map(|r| r.as_str()).unwrap_or("")
                    ),
                ))
            }
        };
        let view = ShedView::from(&st.sheds[&id]);
        drop(st);
        self.bump();
        if effect != Effect::NoChange {
            self.spawn_job(&id);
        }
        Ok((view, effect))
    }

    /// `POST /api/sheds/{name}/stop` (the seed's call matrix).
    pub async fn stop_shed(
        &self,
        caller: &Caller,
        name: &str,
    ) -> Result<(ShedView, Effect), ApiError> {
        let now = self.now();
        let mut st = self.state();
        let s = Self::find(&st, caller, name)?;
        let id = s.id.clone();
        let s = st.sheds.get_mut(&id).expect("found");
        let effect = match s.status {
            Status::Starting => {
                s.queued = Some(Queued::Stop);
                Effect::Queued
            }
            Status::Running => {
                s.set(Status::Stopping, None, now);
                s.op = Some(Op::Stop);
                s.queued = None;
                Effect::Changed
            }
            Status::Stopping => {
                if s.queued == Some(Queued::Start) {
                    s.queued = None;
                }
                Effect::NoChange
            }
            Status::Stopped => {
                return Err(ApiError::new(
                    409,
                    "SHED_STOPPED",
                    format!("shed {name:?} is stopped"),
                ))
            }
            Status::Error => {
                return Err(ApiError::new(
                    409,
                    "SHED_FAILED",
                    format!(
                        "shed {name:?} is in error (reason {}): only a delete leaves this state",
                        s.reason.map(|r| r.as_str()).unwrap_or("")
                    ),
                ))
            }
        };
        let snapshot = s.clone();
        self.save(&snapshot);
        let view = ShedView::from(&snapshot);
        drop(st);
        self.inner.log.info(format!(
            "remote: shed {name} ({id}) stop accepted for client {} ({})",
            caller.name,
            effect.as_str()
        ));
        self.bump();
        self.spawn_job(&id);
        Ok((view, effect))
    }

    /// `DELETE /api/sheds/{name}`: hides the shed at once (a delete marker replaces its record) and
    /// destroys its VM in the background. Answers the shed's ID; an error when the VM's labels are
    /// another shed version's (the delete is recorded all the same).
    pub async fn delete_shed(&self, caller: &Caller, name: &str) -> Result<String, ApiError> {
        let (id, vm_id) = {
            let st = self.state();
            let s = Self::find(&st, caller, name)?;
            (s.id.clone(), s.vm_id.clone())
        };
        // Whose labels are on the VM? A failed read does not stop the delete.
        let mut foreign = false;
        if let Some(vm) = &vm_id {
            let read =
                tokio::time::timeout(Duration::from_secs(10), self.inner.provider.machine(vm))
                    .await;
            if let Ok(Ok(Some(m))) = read {
                foreign = m.labels.get(SCHEMA_LABEL).map(String::as_str) != Some(SCHEMA);
            }
        }
        let now = self.now();
        {
            let mut st = self.state();
            let Some(s) = st.sheds.get(&id).cloned() else {
                return Err(ApiError::not_found(name));
            };
            let marker = DeleteMarker {
                id: s.id.clone(),
                name: s.name.clone(),
                client: s.client.clone(),
                vm_name: s.vm_name.clone(),
                vm_id: s.vm_id.clone(),
                may_have_vm: !s.vm_gone && (s.vm_id.is_some() || s.create != CreateStage::NotSent),
                acknowledged_at: now,
                last_error: None,
                foreign_labels: foreign,
            };
            self.save_marker(&marker);
            st.deletes.insert(id.clone(), marker);
            self.drop_record(&mut st, &id);
            st.waiters.remove(&id);
            st.accepted.remove(&id);
        }
        self.inner.log.info(format!(
            "remote: shed {name} ({id}) delete acknowledged; its VM is destroyed in the background"
        ));
        self.bump();
        self.spawn_job(&id);
        if foreign {
            return Err(ApiError::new(
                502,
                "CLOUD_UNREADABLE",
                format!("the delete of shed {name:?} is recorded, but its VM carries labels of another shed version: it keeps running (and is billed) until a server that reads those labels, or this one once they are readable again, destroys it"),
            ));
        }
        Ok(id)
    }

    /// Waits until the VM of deleted shed `id` is gone: `Ok` then, or the error a streamed delete
    /// ends with when the destroy failed (the server keeps trying).
    pub async fn wait_gone(&self, id: &str) -> Result<(), String> {
        let mut rx = self.subscribe();
        loop {
            {
                let st = self.state();
                match st.deletes.get(id) {
                    None => return Ok(()),
                    Some(m) if !st.jobs.contains(id) => {
                        if m.foreign_labels {
                            return Err("the delete is recorded, but the VM carries labels of another shed version and keeps running until they are readable".into());
                        }
                        return Err(
                            "the delete is recorded but the VM could not be destroyed yet; the server keeps trying".into(),
                        );
                    }
                    Some(_) => {}
                }
            }
            if rx.changed().await.is_err() {
                return Err("the server is stopping".into());
            }
        }
    }

    /// `POST /api/sheds/{name}/exec` and the connect tunnel: 409 `SHED_NOT_RUNNING` on a shed that is
    /// not running; 501 otherwise (not built in this example).
    pub fn exec_or_connect(&self, caller: &Caller, name: &str, what: &str) -> ApiError {
        let st = self.state();
        match Self::find(&st, caller, name) {
            Err(e) => e,
            Ok(s) if s.status != Status::Running => ApiError::new(
                409,
                "SHED_NOT_RUNNING",
                format!("shed {name:?} is {}, not running", s.status),
            ),
            Ok(_) => ApiError::unsupported_route(format!(
                "{what} is not built in this example server (the in-VM agent is out of its scope)"
            )),
        }
    }

    /// Whether firewall mode is `auto`.
    pub fn auto_mode(&self) -> bool {
        self.inner.cfg.firewall.mode == FirewallMode::Auto
    }
}
