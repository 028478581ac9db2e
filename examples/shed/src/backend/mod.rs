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

pub(crate) use orca::kit::lock;
use orca::labels::Labels;
use orca::{MachineSpec, Provider, Timestamp};
use tokio::task::AbortHandle;

use crate::clock::Clock;
use crate::config::Config;
use crate::echo::Echo;
use crate::firewall::{Expectation, FirewallCheck, FirewallTimings, Outcome};
use crate::log::ServerLog;
use crate::model::{DeleteMarker, Shed, ShedView};
use crate::probe::Probe;
use crate::store::Store;

mod admit;
mod caller;
mod create;
mod delete;
mod error;
mod info;
mod start_stop;

pub(crate) use create::vm_name;

pub use caller::Caller;
pub use create::CreateRequest;
pub use error::ApiError;
pub use info::Info;
pub use start_stop::Effect;

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

/// The server's durations, on its clock (tests shorten none of them: they advance the clock).
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
    /// The durations the README documents, with the pass every `pass_interval`.
    pub fn standard(pass_interval: Duration) -> Self {
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
    /// Set once when the server stops ([`Backend::stop`]): the open event streams end and no job
    /// runs from then on.
    pub(crate) stopping: tokio::sync::watch::Sender<bool>,
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

impl Backend {
    /// Starts the backend on `store`, already open (its lock taken before anything else was read):
    /// loads `state_dir`, runs the firewall check and the start-up reconciliation (what the README's
    /// "Restarts" lists), resumes the jobs, and starts the periodic pass.
    pub async fn start_on(store: Store, parts: Parts) -> std::io::Result<Backend> {
        let b = Self::load_on(store, parts)?;
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

    /// Loads `state_dir` from `store`, already open, without reconciling or starting anything
    /// (what [`Backend::start_on`] does first; tests of the start-up steps call it alone).
    pub fn load_on(store: Store, parts: Parts) -> std::io::Result<Backend> {
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
        let loaded = store.load()?;
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
                stopping: tokio::sync::watch::channel(false).0,
            }),
        })
    }

    /// Stops the periodic pass and every job at once, as a server that is killed: nothing is tidied,
    /// and `state_dir` is let go (nothing more is written to it), so that the next server may open it.
    pub fn shutdown(&self) {
        self.stop();
        self.inner.store.release();
    }

    /// Announces that the server stops: the periodic pass and every job stop at once (a job started
    /// later is stopped as it starts), and every open event stream ends, so that a graceful stop
    /// waits for no create or delete to settle. The records stay as they are: the next server
    /// resumes what was under way.
    pub fn stop(&self) {
        let tasks = {
            let mut t = lock(&self.inner.tasks);
            // Set under the tasks' lock, so that `track` either sees it or has pushed its task.
            self.inner.stopping.send_replace(true);
            std::mem::take(&mut *t)
        };
        for t in tasks {
            t.abort();
        }
    }

    /// Whether [`Backend::stop`] was called.
    pub fn is_stopping(&self) -> bool {
        *self.inner.stopping.borrow()
    }

    /// Resolves once [`Backend::stop`] is called.
    pub async fn stopped(&self) {
        let mut rx = self.inner.stopping.subscribe();
        // The sender lives as long as the backend, which `self` keeps alive.
        let _ = rx.wait_for(|stopping| *stopping).await;
    }

    pub(crate) fn track(&self, h: AbortHandle) {
        let mut t = lock(&self.inner.tasks);
        if *self.inner.stopping.borrow() {
            h.abort();
            return;
        }
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

    /// Logs a failed write or removal of the store as `remote: <what>: <error>`.
    fn log_failed(&self, written: std::io::Result<()>, what: impl FnOnce() -> String) {
        if let Err(e) = written {
            self.log().warn(format!("remote: {}: {e}", what()));
        }
    }

    /// Writes shed `s` (in `st`) to disk; logs a failure (the record stays in memory).
    pub(crate) fn save(&self, s: &Shed) {
        self.log_failed(self.inner.store.save_shed(s), || {
            format!("the record of shed {} could not be written", s.name)
        });
    }

    pub(crate) fn save_marker(&self, m: &DeleteMarker) {
        self.log_failed(self.inner.store.save_marker(m), || {
            format!("the delete marker of shed {} could not be written", m.name)
        });
    }

    pub(crate) fn drop_record(&self, st: &mut State, id: &str) -> Option<Shed> {
        let s = st.sheds.remove(id);
        self.log_failed(self.inner.store.remove_shed(id), || {
            format!("the record {id} could not be removed")
        });
        s
    }

    pub(crate) fn drop_marker(&self, st: &mut State, id: &str) -> Option<DeleteMarker> {
        let m = st.deletes.remove(id);
        self.log_failed(self.inner.store.remove_marker(id), || {
            format!("the delete marker {id} could not be removed")
        });
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
        let image = cfg.image_aliases.get(&s.image);
        MachineSpec::new(&s.vm_name, &s.machine_type, &cfg.location, &cfg.environment)
            .with_labels(self.vm_labels(s, "creating"))
            .with_max_run_duration(Duration::from_secs(s.max_run_secs))
            .with_network_tag(cfg.network_tag())
            .with_image(image.unwrap_or(&cfg.default_image))
            .with_disk_gb(s.disk_gb)
    }
}
