//! The in-memory provider (kind `fake`): a simulated cloud ([`MemoryCloud`]) and a driver on top of it
//! ([`MemoryProvider`]) that keeps the whole contract and has every capability.
//!
//! The cloud behaves like a small real one: machine types of both architectures with prices, locations
//! (one type offered in one location only), boot images of each architecture, unique machine names, a listing API with label filters and pages, stock per type and location that a
//! test can exhaust, injectable faults (an error for the next N calls, latency, an answer lost after the
//! machine was made), a count of the requests made to it, and optional persistence to a state file so
//! that separate runs of a CLI see the same machines. Many providers with different owners can share
//! one cloud, which is how owner isolation is tested.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use orca_machines::{memory::MemoryCloud, Created, MachineSpec, Provider};
//! let cloud = MemoryCloud::new();
//! let a = cloud.provider("stack-a")?;
//! let b = cloud.provider("stack-b")?;
//! a.create(&MachineSpec::new("w-1", "amd64-small", "zone-a", "lab")).await?;
//! assert_eq!(a.machines("lab").await?.len(), 1);
//! assert!(b.machines("lab").await?.is_empty(), "owners never see each other's machines");
//! cloud.set_stock("amd64-small", "zone-a", 0);
//! let got = a.create(&MachineSpec::new("w-2", "amd64-small", "zone-a", "lab")).await?;
//! assert!(matches!(got, Created::NoStock { .. }));
//! # Ok::<(), orca_machines::Error>(()) }).unwrap();
//! ```

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::arch::{docker_arch, Arch};
use crate::error::{Error, ErrorKind, Result};
use crate::ext::{
    check_admission_input, check_ipv4_ranges, first_free_priority, Admission, AdmissionRule,
    Balance, CreditBalance, FirewallRule, FirewallRules, MachineLabels, Network, SshAdmission,
    FIRST_ADMISSION_PRIORITY, LAST_ADMISSION_PRIORITY,
};
use crate::kit::lock;
use crate::labels::{self, Labels};
use crate::machine::{Created, Machine, Price, Resized, Status, Timestamp};
use crate::provider::{Capabilities, Provider};
use crate::retry::{all_pages, Page, RetryPolicy};
use crate::spec::{
    validate_id, validate_label_key_to_remove, validate_labels, validate_name, validate_owner,
    validate_pool, validate_token, MachineSpec,
};

/// The provider kind of the in-memory provider.
pub const KIND: &str = "fake";

crate::setting_keys! {
    /// The settings of the in-memory provider (kind `fake`), by the names of their environment
    /// variables, as every driver's `ConfigKey`.
    pub enum FakeKey for "fake" {
        /// `ORCA_FAKE_STATE`: the state file that separate runs of a program share one simulated
        /// cloud through ([`MemoryCloud::open`]). Unset: the cloud lives in memory for this process
        /// only.
        State = "ORCA_FAKE_STATE",
    }
}

/// A machine type in the simulated cloud's catalogue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MachineType {
    /// Its name.
    pub name: String,
    /// The cloud's spelling of its architecture (`x86_64`, `aarch64`).
    pub architecture: String,
    /// Virtual CPUs.
    pub cpus: u32,
    /// Memory in MiB.
    pub memory_mb: u32,
    /// Hourly price in USD.
    pub hourly_usd: f64,
    /// The locations it is offered in.
    pub locations: Vec<String>,
}

impl MachineType {
    /// Whether it is offered in `location`.
    pub fn offered_in(&self, location: &str) -> bool {
        self.locations.iter().any(|l| l == location)
    }
}

/// The simulated cloud's machine types: two of each architecture offered everywhere, and a large
/// amd64 type offered in `zone-c` only (as clouds offer their largest types in some places only).
pub fn catalogue() -> Vec<MachineType> {
    let t =
        |name: &str, architecture: &str, cpus, memory_mb, hourly_usd, at: &[&str]| MachineType {
            name: name.into(),
            architecture: architecture.into(),
            cpus,
            memory_mb,
            hourly_usd,
            locations: at.iter().map(|l| l.to_string()).collect(),
        };
    vec![
        t("amd64-small", "x86_64", 2, 8192, 0.0832, &LOCATIONS),
        t("amd64-large", "x86_64", 8, 32768, 0.3328, &LOCATIONS),
        t("arm64-small", "aarch64", 2, 8192, 0.0680, &LOCATIONS),
        t("arm64-large", "aarch64", 8, 32768, 0.2720, &LOCATIONS),
        t("amd64-metal", "x86_64", 64, 262_144, 2.6624, &["zone-c"]),
    ]
}

/// The simulated cloud's locations.
pub const LOCATIONS: [&str; 3] = ["zone-a", "zone-b", "zone-c"];

/// The simulated cloud's boot images of one architecture: name, the cloud's spelling of the
/// architecture. A create of a type of the other architecture from one is refused. Any other image
/// name stands for an image the cloud picks by the type's architecture (as Hetzner's
/// `ubuntu-24.04` names one image per architecture).
pub const IMAGES: &[(&str, &str)] = &[
    ("ubuntu-24.04-amd64", "x86_64"),
    ("ubuntu-24.04-arm64", "aarch64"),
];

/// Refuses `image` for a machine of type `t` when the image is of the other architecture.
fn check_image(t: &MachineType, image: Option<&str>) -> Result<()> {
    let Some((name, arch)) = image.and_then(|i| IMAGES.iter().find(|(n, _)| *n == i)) else {
        return Ok(());
    };
    let (image_arch, type_arch) = (docker_arch(arch), docker_arch(&t.architecture));
    if image_arch == type_arch {
        return Ok(());
    }
    Err(Error::invalid(
        "image",
        format!(
            "image {name} is {image_arch}, machine type {} is {type_arch}: choose an image of {type_arch}",
            t.name
        ),
    ))
}

/// Refuses `t` in `location` when it is not offered there: no stock there, for ever, so that a
/// caller moves on to another offering.
fn check_offered(t: &MachineType, location: &str) -> Result<()> {
    if t.offered_in(location) {
        return Ok(());
    }
    Err(Error::no_stock(
        t.name.clone(),
        location,
        format!(
            "machine type {} is not offered in {location} (it is in {})",
            t.name,
            t.locations.join(", ")
        ),
    ))
}

/// The cloud call a fault applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Operation {
    /// Making a machine.
    Create,
    /// Reading one page of a listing, or one machine.
    List,
    /// Removing a machine.
    Delete,
    /// Reading the catalogue (machine types, prices).
    Catalogue,
    /// Power and type changes.
    Change,
    /// Label changes on an existing machine.
    Labels,
    /// Network reads and changes: firewall rules, admission groups, subnet rules.
    Network,
    /// Account reads (the credit balance).
    Account,
    /// Any call.
    Any,
}

/// What an injected fault does.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    /// The call fails with an error of this kind and does nothing.
    Error(ErrorKind),
    /// The call waits this long first, then works.
    Latency(Duration),
    /// The call works but its answer is lost: the caller sees a transient failure (a create happened
    /// all the same: the ambiguous failure of [contract](crate::contract) 3).
    LoseAnswer,
}

#[derive(Debug, Clone)]
struct Fault {
    op: Operation,
    kind: FaultKind,
    remaining: u32,
}

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct State {
    next_id: u64,
    machines: BTreeMap<String, StoredMachine>,
    /// Remaining stock per `type@location`; absent means unlimited.
    stock: BTreeMap<String, u32>,
    /// The account's limit on machines (absent: none): a create past it is refused as a quota.
    #[serde(default)]
    machine_limit: Option<usize>,
    /// VPC firewall rules by name.
    #[serde(default)]
    firewall: BTreeMap<String, FirewallRule>,
    /// VPC networks by name (absent: a custom-mode network of that name).
    #[serde(default)]
    networks: BTreeMap<String, Network>,
    /// Admission groups, as `<group>-<location>`.
    #[serde(default)]
    groups: BTreeSet<String>,
    /// The subnet security group of each location (absent: one with no rule).
    #[serde(default)]
    subnets: BTreeMap<String, SubnetGroup>,
    /// The account's credit (absent: 100 USD).
    #[serde(default)]
    credit: Option<Balance>,
    /// How far the simulated cloud's clock is ahead of this machine's, in seconds.
    #[serde(default)]
    clock_offset_secs: i64,
    /// How long a new machine stays invisible to reads and answers "not found" to changes, in
    /// milliseconds (eventual consistency, as EC2's).
    #[serde(default)]
    visibility_delay_ms: u64,
    /// Whether every change is refused ([`MemoryCloud::set_read_only`]).
    #[serde(default)]
    read_only: bool,
    /// Lookups kept beside `machines`, so that a call costs the same at ten machines and at ten
    /// thousand (a create checks its name, every call enforces run limits). Derived from
    /// `machines`, so never written to the state file: rebuilt when missing ([`State::index`]).
    #[serde(skip)]
    index: Option<Index>,
}

/// What [`State::index`] keeps: every machine by name, and the machines with a run limit.
#[derive(Debug, Default, Clone)]
struct Index {
    /// (name, id) of every machine: a name can be carried by several (an operator's copy).
    names: BTreeSet<(String, String)>,
    /// Ids of the machines with a run limit (kept until they are removed).
    limited: BTreeSet<String>,
}

impl State {
    /// The lookups of `machines`, built from them on first use (a state read from its file).
    fn index(&mut self) -> &mut Index {
        let machines = &self.machines;
        self.index.get_or_insert_with(|| {
            let mut index = Index::default();
            for (id, m) in machines {
                index.names.insert((m.machine.name.clone(), id.clone()));
                if m.machine.max_run_duration.is_some() {
                    index.limited.insert(id.clone());
                }
            }
            index
        })
    }

    /// Adds (or replaces) machine `m`; the only way a machine is added.
    fn insert_machine(&mut self, m: StoredMachine) {
        let id = m.machine.id.clone();
        self.remove_machine(&id);
        let index = self.index();
        index.names.insert((m.machine.name.clone(), id.clone()));
        if m.machine.max_run_duration.is_some() {
            index.limited.insert(id.clone());
        }
        self.machines.insert(id, m);
    }

    /// Removes machine `id`; the only way a machine is removed.
    fn remove_machine(&mut self, id: &str) -> Option<StoredMachine> {
        let gone = self.machines.remove(id)?;
        let index = self.index();
        index
            .names
            .remove(&(gone.machine.name.clone(), id.to_string()));
        index.limited.remove(id);
        Some(gone)
    }

    /// The ids of the machines named `name`, in id order.
    fn ids_named(&mut self, name: &str) -> Vec<String> {
        let from = (name.to_string(), String::new());
        self.index()
            .names
            .range(from..)
            .take_while(|(n, _)| n == name)
            .map(|(_, id)| id.clone())
            .collect()
    }

    /// Whether machine `m` can be seen yet (see [`MemoryCloud::set_visibility_delay`]).
    fn visible(&self, m: &StoredMachine) -> bool {
        if self.visibility_delay_ms == 0 {
            return true;
        }
        let delay = chrono::Duration::milliseconds(
            i64::try_from(self.visibility_delay_ms).unwrap_or(i64::MAX / 4),
        );
        m.machine
            .created_at
            .is_none_or(|c| c + delay <= clock(self))
    }

    /// The visible machine `id`, or not found.
    fn visible_mut(&mut self, id: &str) -> Result<&mut StoredMachine> {
        let seen = self.machines.get(id).is_some_and(|m| self.visible(m));
        match self.machines.get_mut(id) {
            Some(m) if seen => Ok(m),
            _ => {
                Err(Error::not_found(format!("machine {id}"))
                    .with_code("InvalidInstanceID.NotFound"))
            }
        }
    }
}

/// A location's subnet security group in the simulated cloud.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubnetGroup {
    /// Whether the subnet carries a security group of its own.
    pub present: bool,
    /// Its rules.
    pub rules: Vec<SubnetRule>,
}

impl Default for SubnetGroup {
    fn default() -> Self {
        SubnetGroup {
            present: true,
            rules: Vec::new(),
        }
    }
}

/// A rule of a subnet security group in the simulated cloud.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubnetRule {
    /// Its name.
    pub name: String,
    /// Its priority.
    pub priority: u32,
    /// Inbound (true) or outbound.
    pub inbound: bool,
    /// The sources it admits.
    pub sources: Vec<String>,
    /// The admission group it admits to, if any (`<group>-<location>`).
    pub to_group: Option<String>,
}

/// What a machine was made with beyond what [`Machine`] reports.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineExtras {
    /// The boot disk's size, when the spec set one.
    pub disk_gb: Option<u32>,
    /// The boot image, when the spec set one.
    pub image: Option<String>,
    /// The login user's SSH keys.
    pub ssh_keys: Vec<String>,
    /// Network tags.
    pub network_tags: Vec<String>,
    /// The sources its own firewall admits on SSH.
    pub ssh_sources: Vec<String>,
    /// The admission group it is a member of (`<group>-<location>`).
    pub admission_group: Option<String>,
    /// The length of its user data.
    pub user_data_len: usize,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct StoredMachine {
    machine: Machine,
    #[serde(default)]
    extras: MachineExtras,
    /// The request id of the insert that made it: a retry carrying the same id is answered this
    /// machine, as Compute Engine answers a retried insert's first operation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    request: Option<String>,
}

#[derive(Debug, Default)]
struct Inner {
    state: Mutex<State>,
    path: Option<PathBuf>,
    /// Whether the temporary files that crashed writers left beside the state file were removed
    /// (once, by the first call that held the lock).
    swept: std::sync::atomic::AtomicBool,
    faults: Mutex<Vec<Fault>>,
    requests: AtomicU64,
}

/// A simulated cloud, shared by every [`MemoryProvider`] made from it (cheap to clone).
#[derive(Debug, Clone, Default)]
pub struct MemoryCloud {
    inner: Arc<Inner>,
}

/// The network the in-memory provider puts machines on, unless [`MemoryProvider::with_network`] says
/// otherwise.
pub const DEFAULT_NETWORK: &str = "fake-net";

/// The simulated cloud's clock for a state.
fn clock(s: &State) -> Timestamp {
    chrono::Utc::now() + chrono::Duration::seconds(s.clock_offset_secs)
}

/// Powers `m` on or off at `now`, as the cloud records it.
fn power(m: &mut Machine, on: bool, now: Timestamp) {
    if on {
        if m.status != Status::Running {
            m.started_at = Some(now);
        }
        m.status = Status::Running;
        m.cloud_status = "running".into();
    } else {
        if m.status != Status::Stopped {
            m.stopped_at = Some(now);
        }
        m.status = Status::Stopped;
        m.cloud_status = "off".into();
    }
}

/// Stops every running machine whose run limit has passed, at the moment it passed: what the cloud
/// does on its own.
fn enforce_run_limits(s: &mut State) {
    let now = clock(s);
    let limited: Vec<String> = s.index().limited.iter().cloned().collect();
    for id in limited {
        let Some(m) = s.machines.get_mut(&id) else {
            continue;
        };
        if m.machine.status == Status::Running {
            if let Some(at) = m.machine.run_limit_at() {
                if at <= now {
                    power(&mut m.machine, false, at);
                }
            }
        }
    }
}

/// Refuses a location the simulated cloud does not have, naming those it has.
fn known_location(location: &str) -> Result<()> {
    if LOCATIONS.contains(&location) {
        return Ok(());
    }
    let known = LOCATIONS.join(", ");
    Err(Error::invalid(
        "location",
        format!("unknown location {location:?}; known: {known}"),
    ))
}

fn stock_key(machine_type: &str, location: &str) -> String {
    format!("{machine_type}@{location}")
}

/// The lock file of state file `path`: `<path>.lock`, as every lock file of the library is named
/// ([`crate::fs::FileLock::path_for`]), so that no other file's lock is this one.
fn state_lock_path(path: &Path) -> PathBuf {
    crate::fs::FileLock::path_for(path)
}

/// Refuses a change of a read-only cloud ([`MemoryCloud::set_read_only`]); `changed` is the state
/// after the change, so that the change that ends read-only goes through.
fn refuse_if_read_only(changed: &State, path: Option<&Path>) -> Result<()> {
    if !changed.read_only {
        return Ok(());
    }
    let on = path.map_or(String::new(), |p| format!(" (state file {})", p.display()));
    Err(Error::other(format!(
        "the simulated cloud refuses every change: it is read-only{on}"
    )))
}

fn state_error(path: &Path, e: crate::fs::FsError) -> Error {
    Error::other(format!("state file {}: {e}", path.display())).with_source(e)
}

impl MemoryCloud {
    /// An empty cloud held in memory.
    pub fn new() -> Self {
        Self::default()
    }

    /// A cloud persisted in the JSON file at `path` (made when missing): every call reads it and every
    /// change writes it back atomically ([`crate::fs::write_atomic`], owner-only) under the file's
    /// lock ([`MemoryCloud::state_lock_path`]), so separate processes see the same machines.
    ///
    /// Blocks this thread while another process holds the lock; in async code use
    /// [`MemoryCloud::open`]. The cloud API's calls (and so every [`MemoryProvider`] call) wait for
    /// the lock without blocking the runtime; the synchronous helpers ([`MemoryCloud::set_stock`],
    /// the operator's console, ...) block their thread.
    pub fn persistent(path: impl AsRef<Path>) -> Result<Self> {
        let cloud = Self::on_file(path.as_ref());
        cloud.with_state(false, |_| ())?;
        Ok(cloud)
    }

    /// [`MemoryCloud::persistent`] that waits for the state file's lock without blocking the
    /// runtime.
    pub async fn open(path: impl AsRef<Path>) -> Result<Self> {
        let cloud = Self::on_file(path.as_ref());
        cloud.state(false, |_| ()).await?;
        Ok(cloud)
    }

    fn on_file(path: &Path) -> Self {
        MemoryCloud {
            inner: Arc::new(Inner {
                path: Some(path.to_path_buf()),
                ..Inner::default()
            }),
        }
    }

    /// A provider on this cloud for `owner` (empty for none).
    pub fn provider(&self, owner: &str) -> Result<MemoryProvider> {
        validate_owner(owner)?;
        Ok(MemoryProvider {
            cloud: self.clone(),
            owner: owner.to_string(),
            page_size: 50,
            retry: RetryPolicy::fast(),
            arch_cache: Arc::default(),
            network: DEFAULT_NETWORK.to_string(),
            recent: Arc::default(),
        })
    }

    /// The simulated cloud's clock: this machine's clock plus what [`MemoryCloud::advance_clock`] added.
    pub fn now(&self) -> Timestamp {
        let offset = self.with_state(false, |s| s.clock_offset_secs).unwrap_or(0);
        chrono::Utc::now() + chrono::Duration::seconds(offset)
    }

    /// Moves the simulated cloud's clock forward by `by`: machines' run limits expire and their ages
    /// grow as if that time had passed.
    pub fn advance_clock(&self, by: Duration) {
        let _ = self.with_state(true, |s| {
            s.clock_offset_secs += i64::try_from(by.as_secs()).unwrap_or(i64::MAX / 4);
        });
    }

    /// Puts (makes or replaces) the firewall rule `rule.name`: what an operator's console does.
    pub fn put_firewall_rule(&self, rule: FirewallRule) {
        let _ = self.with_state(true, |s| {
            s.firewall.insert(rule.name.clone(), rule);
        });
    }

    /// Removes the firewall rule `name`.
    pub fn remove_firewall_rule(&self, name: &str) {
        let _ = self.with_state(true, |s| {
            s.firewall.remove(name);
        });
    }

    /// The firewall rule `name` as the cloud holds it (no request counted).
    pub fn firewall_rule(&self, name: &str) -> Option<FirewallRule> {
        self.with_state(false, |s| s.firewall.get(name).cloned())
            .ok()
            .flatten()
    }

    /// Puts (makes or replaces) the network `network.name`.
    pub fn put_network(&self, network: Network) {
        let _ = self.with_state(true, |s| {
            s.networks.insert(network.name.clone(), network);
        });
    }

    /// Gives `location`'s subnet a security group of its own (`present`), or none.
    pub fn set_subnet_security_group(&self, location: &str, present: bool) {
        let _ = self.with_state(true, |s| {
            s.subnets.entry(location.to_string()).or_default().present = present;
        });
    }

    /// Puts a rule on `location`'s subnet security group (another team's rule, say): what holds a
    /// priority that an admission must not take.
    pub fn put_subnet_rule(&self, location: &str, name: &str, priority: u32, inbound: bool) {
        let _ = self.with_state(true, |s| {
            let g = s.subnets.entry(location.to_string()).or_default();
            g.rules.retain(|r| r.name != name);
            g.rules.push(SubnetRule {
                name: name.to_string(),
                priority,
                inbound,
                sources: vec!["10.0.0.0/8".into()],
                to_group: None,
            });
        });
    }

    /// `location`'s subnet security group as the cloud holds it.
    pub fn subnet_group(&self, location: &str) -> SubnetGroup {
        self.with_state(false, |s| {
            s.subnets.get(location).cloned().unwrap_or_default()
        })
        .unwrap_or_default()
    }

    /// The admission groups that exist, as `<group>-<location>`.
    pub fn admission_groups(&self) -> Vec<String> {
        self.with_state(false, |s| s.groups.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// What machine `id` was made with beyond what [`Machine`] reports.
    pub fn extras(&self, id: &str) -> Option<MachineExtras> {
        self.with_state(false, |s| s.machines.get(id).map(|m| m.extras.clone()))
            .ok()
            .flatten()
    }

    /// Makes new machines invisible to reads for `delay` after they are made, and answers "not found"
    /// to changes of them until then: the eventual consistency of EC2's API, which every driver must
    /// survive. `Duration::ZERO` turns it off.
    pub fn set_visibility_delay(&self, delay: Duration) {
        let _ = self.with_state(true, |s| {
            s.visibility_delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        });
    }

    /// Makes the cloud refuse every change (a create, a delete, a label or power change, an
    /// operator's action) with an error, while reads go on; `false` lets changes through again. It
    /// lives in the state, so a persisted cloud refuses changes to every process on its file: how a
    /// test makes a program in another process meet failed calls, which injected faults
    /// ([`MemoryCloud::inject`], this process only) cannot reach.
    pub fn set_read_only(&self, read_only: bool) {
        let _ = self.with_state(true, |s| s.read_only = read_only);
    }

    /// How long new machines stay invisible (see [`MemoryCloud::set_visibility_delay`]).
    pub fn visibility_delay(&self) -> Duration {
        self.with_state(false, |s| Duration::from_millis(s.visibility_delay_ms))
            .unwrap_or_default()
    }

    /// Sets the account's credit balance.
    pub fn set_credit(&self, amount: f64, currency: &str) {
        let _ = self.with_state(true, |s| {
            s.credit = Some(Balance::new(amount, currency));
        });
    }

    /// Stops machine `id` from outside orca (an operator's console), at the cloud's current time.
    pub fn operator_stop(&self, id: &str) -> bool {
        self.operator_power(id, false)
    }

    /// Starts machine `id` from outside orca.
    pub fn operator_start(&self, id: &str) -> bool {
        self.operator_power(id, true)
    }

    fn operator_power(&self, id: &str, on: bool) -> bool {
        self.with_state(true, |s| {
            let now = clock(s);
            let Some(m) = s.machines.get_mut(id) else {
                return false;
            };
            power(&mut m.machine, on, now);
            true
        })
        .unwrap_or(false)
    }

    /// Deletes machine `id` from outside orca.
    pub fn operator_delete(&self, id: &str) -> bool {
        self.with_state(true, |s| s.remove_machine(id).is_some())
            .unwrap_or(false)
    }

    /// Sets or removes (`None`) the label `key` of machine `id` from outside orca.
    pub fn operator_label(&self, id: &str, key: &str, value: Option<&str>) -> bool {
        self.with_state(true, |s| match s.machines.get_mut(id) {
            Some(m) => {
                match value {
                    Some(v) => m.machine.labels.insert(key.to_string(), v.to_string()),
                    None => m.machine.labels.remove(key),
                };
                true
            }
            None => false,
        })
        .unwrap_or(false)
    }

    /// Requests made to this cloud so far (each page of a listing is one).
    pub fn requests(&self) -> u64 {
        self.inner.requests.load(Ordering::SeqCst)
    }

    /// Sets the stock of `machine_type` in `location` (`0`: out of stock). Stock is unlimited until set.
    pub fn set_stock(&self, machine_type: &str, location: &str, count: u32) {
        let _ = self.with_state(true, |s| {
            s.stock.insert(stock_key(machine_type, location), count);
        });
    }

    /// Sets the account's limit on machines (`None`: no limit): a create that would make more
    /// machines than `limit` is refused as [`Error::Quota`], whatever the type or location.
    pub fn set_machine_limit(&self, limit: Option<usize>) {
        let _ = self.with_state(true, |s| {
            s.machine_limit = limit;
        });
    }

    /// Makes the stock of `machine_type` in `location` unlimited again.
    pub fn unlimited_stock(&self, machine_type: &str, location: &str) {
        let _ = self.with_state(true, |s| {
            s.stock.remove(&stock_key(machine_type, location));
        });
    }

    /// Makes the next `times` calls of `op` fail or slow down as `kind` says.
    pub fn inject(&self, op: Operation, kind: FaultKind, times: u32) {
        lock(&self.inner.faults).push(Fault {
            op,
            kind,
            remaining: times,
        });
    }

    /// Removes every injected fault.
    pub fn clear_faults(&self) {
        lock(&self.inner.faults).clear();
    }

    /// Every machine in the cloud, of every owner: what an operator's console shows.
    pub fn all_machines(&self) -> Vec<Machine> {
        self.with_state(false, |s| {
            s.machines.values().map(|m| m.machine.clone()).collect()
        })
        .unwrap_or_default()
    }

    /// The state file's lock file, when the cloud is persisted: held by a process for the length of
    /// one call on the state (never remove it while a process may run on the file).
    pub fn state_lock_path(&self) -> Option<PathBuf> {
        self.inner.path.as_deref().map(state_lock_path)
    }

    /// Runs `f` on the state, blocking this thread while another process holds the state file's
    /// lock: for the synchronous helpers (a test's or an operator's console). The cloud API's
    /// calls wait for the lock without blocking the runtime ([`MemoryCloud::state`]).
    fn with_state<R>(&self, write: bool, f: impl FnOnce(&mut State) -> R) -> Result<R> {
        let held = match &self.inner.path {
            Some(path) => Some(
                crate::fs::FileLock::lock_blocking(state_lock_path(path))
                    .map_err(|e| state_error(path, e))?,
            ),
            None => None,
        };
        self.locked(held.as_ref(), write, f)
    }

    /// Runs `f` on the state, waiting for the state file's lock without blocking the runtime while
    /// another process holds it.
    async fn state<R>(&self, write: bool, f: impl FnOnce(&mut State) -> R) -> Result<R> {
        let held = match &self.inner.path {
            Some(path) => Some(
                crate::fs::FileLock::lock(state_lock_path(path))
                    .await
                    .map_err(|e| state_error(path, e))?,
            ),
            None => None,
        };
        self.locked(held.as_ref(), write, f)
    }

    /// Runs `f` on the state, the state file's lock `held` (when persisted): reads the file, applies
    /// `f`, and writes the file back atomically when `f` may have changed it (or it is missing).
    /// The file lock is taken before the in-process mutex, by every path, so that the two never
    /// wait for each other in opposite orders.
    fn locked<R>(
        &self,
        held: Option<&crate::fs::FileLock>,
        write: bool,
        f: impl FnOnce(&mut State) -> R,
    ) -> Result<R> {
        let mut state = lock(&self.inner.state);
        let f = |s: &mut State| {
            enforce_run_limits(s);
            f(s)
        };
        let (Some(path), Some(held)) = (&self.inner.path, held) else {
            if write && state.read_only {
                let mut changed = state.clone();
                let r = f(&mut changed);
                refuse_if_read_only(&changed, None)?;
                *state = changed;
                return Ok(r);
            }
            return Ok(f(&mut state));
        };
        if !self.inner.swept.swap(true, Ordering::SeqCst) {
            // Best effort: a leftover that stays is never read as the state.
            let _ = crate::fs::remove_stale_temps(path);
        }
        let mut disk: State = match std::fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                Error::other(format!(
                    "state file {}: not orca state: {e}",
                    path.display()
                ))
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => State::default(),
            Err(e) => return Err(state_error(path, crate::fs::FsError::io(path, "read", e))),
        };
        let was_read_only = disk.read_only;
        let r = f(&mut disk);
        if write && was_read_only {
            refuse_if_read_only(&disk, Some(path))?;
        }
        if write || std::fs::symlink_metadata(path).is_err() {
            // Another process may have taken a new lock file since this one was taken: write
            // nothing beside it.
            held.still_held().map_err(|e| state_error(path, e))?;
            let bytes =
                serde_json::to_vec_pretty(&disk).map_err(|e| Error::other(e.to_string()))?;
            crate::fs::write_atomic(path, &bytes).map_err(|e| state_error(path, e))?;
        }
        *state = disk;
        Ok(r)
    }

    /// Counts a request and applies the first matching fault. Returns whether the answer is to be lost.
    async fn request(&self, op: Operation) -> Result<bool> {
        let n = self.inner.requests.fetch_add(1, Ordering::SeqCst) + 1;
        tracing::debug!(provider = KIND, operation = ?op, request_id = n, "cloud call");
        let mut lose = false;
        let mut wait = Duration::ZERO;
        let mut fail = None;
        {
            let mut faults = lock(&self.inner.faults);
            if let Some(f) = faults
                .iter_mut()
                .find(|f| f.remaining > 0 && (f.op == op || f.op == Operation::Any))
            {
                f.remaining -= 1;
                match &f.kind {
                    FaultKind::Error(kind) => fail = Some(*kind),
                    FaultKind::Latency(d) => wait = *d,
                    FaultKind::LoseAnswer => lose = true,
                }
            }
            faults.retain(|f| f.remaining > 0);
        }
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        if let Some(kind) = fail {
            return Err(match kind {
                ErrorKind::Throttled => Error::throttled(
                    Some(Duration::from_millis(5)),
                    "injected: too many requests",
                ),
                ErrorKind::NoStock => {
                    Error::no_stock(String::new(), String::new(), "injected: no capacity")
                }
                other => Error::of_kind(other, format!("injected {other:?}")),
            });
        }
        Ok(lose)
    }

    /// Makes change `f` on the state as a request of `op`: counted and faults applied first, its
    /// answer lost after the change when a fault says so.
    async fn change<R>(&self, op: Operation, f: impl FnOnce(&mut State) -> Result<R>) -> Result<R> {
        let lose = self.request(op).await?;
        let r = self.state(true, f).await??;
        Self::lost(lose)?;
        Ok(r)
    }

    fn lost(lose: bool) -> Result<()> {
        if lose {
            Err(Error::transient(
                "injected: the connection dropped before the answer",
            ))
        } else {
            Ok(())
        }
    }

    /// Cloud API: the catalogue entry of `name`.
    pub async fn api_machine_type(&self, name: &str) -> Result<MachineType> {
        Self::lost(self.request(Operation::Catalogue).await?)?;
        catalogue()
            .into_iter()
            .find(|t| t.name == name)
            .ok_or_else(|| Error::not_found(format!("machine type {name:?}")))
    }

    /// Cloud API: one machine by id.
    pub async fn api_get(&self, id: &str) -> Result<Option<Machine>> {
        Self::lost(self.request(Operation::List).await?)?;
        self.state(false, |s| {
            s.machines
                .get(id)
                .filter(|m| s.visible(m))
                .map(|m| m.machine.clone())
        })
        .await
    }

    /// Cloud API: one page of machines whose labels hold every pair of `with` and none of the keys in
    /// `without` (server-side filtering), in id order, `page_size` a page, after the machine `after`.
    pub async fn api_list(
        &self,
        with: &Labels,
        without: &[&str],
        name: Option<&str>,
        page_size: usize,
        after: Option<&str>,
    ) -> Result<Page<Machine>> {
        Self::lost(self.request(Operation::List).await?)?;
        let page_size = page_size.max(1);
        self.state(false, |s| {
            // A page starts after the last one, and a name is looked up: never a walk over every
            // machine for each page or name.
            let named = name.map(|n| s.ids_named(n));
            let s = &*s;
            let candidates: Box<dyn Iterator<Item = &StoredMachine>> = match (&named, after) {
                (Some(ids), _) => Box::new(
                    ids.iter()
                        .filter(move |id| after.is_none_or(|a| id.as_str() > a))
                        .filter_map(|id| s.machines.get(id)),
                ),
                (None, Some(a)) => Box::new(
                    s.machines
                        .range::<str, _>((Bound::Excluded(a), Bound::Unbounded))
                        .map(|(_, m)| m),
                ),
                (None, None) => Box::new(s.machines.values()),
            };
            let mut matching = candidates
                .filter(|m| s.visible(m))
                .map(|m| &m.machine)
                .filter(|m| with.iter().all(|(k, v)| m.labels.get(k) == Some(v)))
                .filter(|m| without.iter().all(|k| !m.labels.contains_key(*k)));
            let items: Vec<Machine> = matching.by_ref().take(page_size).cloned().collect();
            let next = matching.next().and(items.last()).map(|m| m.id.clone());
            Page { items, next }
        })
        .await
    }

    /// Cloud API: makes a machine. Names are unique in the cloud ([`Error::AlreadyExists`]); an unknown
    /// type or location is [`Error::InvalidSpec`]; no stock is [`Error::NoStock`].
    pub async fn api_insert(&self, spec: &MachineSpec, labels: Labels) -> Result<Machine> {
        self.api_insert_request(spec, labels, None).await
    }

    /// Cloud API: [`MemoryCloud::api_insert`] with a request id. An insert whose id made a machine
    /// that still stands is answered that machine, and nothing more is made: the retries of one
    /// call carry one id, so a retry after a lost answer gets its own machine, never
    /// [`Error::AlreadyExists`].
    pub async fn api_insert_request(
        &self,
        spec: &MachineSpec,
        labels: Labels,
        request: Option<&str>,
    ) -> Result<Machine> {
        let lose = self.request(Operation::Create).await?;
        let mt = catalogue()
            .into_iter()
            .find(|t| t.name == spec.machine_type)
            .ok_or_else(|| {
                Error::invalid(
                    "machine_type",
                    format!(
                        "unknown machine type {:?}; known: {}",
                        spec.machine_type,
                        catalogue()
                            .iter()
                            .map(|t| t.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                )
            })?;
        known_location(&spec.location)?;
        check_image(&mt, spec.image.as_deref())?;
        check_offered(&mt, &spec.location)?;
        let made = self
            .state(true, |s| {
                if let Some(done) = request.and_then(|r| {
                    s.machines
                        .values()
                        .find(|m| m.request.as_deref() == Some(r))
                }) {
                    return Ok(done.machine.clone());
                }
                if !s.ids_named(&spec.name).is_empty() {
                    return Err(Error::already_exists(format!(
                        "machine named {:?}",
                        spec.name
                    )));
                }
                if let Some(limit) = s.machine_limit.filter(|l| s.machines.len() >= *l) {
                    return Err(Error::quota(format!(
                        "the account's limit of {limit} machines is reached"
                    )));
                }
                let key = stock_key(&spec.machine_type, &spec.location);
                if let Some(left) = s.stock.get_mut(&key) {
                    if *left == 0 {
                        return Err(Error::no_stock(
                            spec.machine_type.clone(),
                            spec.location.clone(),
                            format!("no capacity for {} in {}", mt.name, spec.location),
                        ));
                    }
                    *left -= 1;
                }
                let group = spec
                    .admission_group
                    .as_ref()
                    .map(|g| format!("{g}-{}", spec.location));
                if let Some(g) = &group {
                    if !s.groups.contains(g) {
                        return Err(Error::not_found(format!(
                            "admission group {g} (admit SSH to it first)"
                        )));
                    }
                }
                s.next_id += 1;
                let n = s.next_id;
                let now = clock(s);
                let mut machine = Machine::new(format!("m-{n:08}"), &spec.name);
                machine.status = Status::Running;
                machine.cloud_status = "running".into();
                machine.machine_type = spec.machine_type.clone();
                machine.location = spec.location.clone();
                // TEST-NET-2 (RFC 5737): documentation addresses, never routed.
                machine.address = format!("198.51.100.{}", n % 250 + 1);
                machine.private_address =
                    format!("10.{}.{}.{}", n / 65_536 % 256, n / 256 % 256, n % 256);
                machine.fqdn = format!("{}.{}.fake.internal", spec.name, spec.location);
                machine.pool = labels::pool_of(&labels);
                machine.labels = labels;
                machine.created_at = Some(now);
                machine.started_at = Some(now);
                machine.max_run_duration = spec.max_run_duration;
                let extras = MachineExtras {
                    disk_gb: spec.disk_gb,
                    image: spec.image.clone(),
                    ssh_keys: spec.ssh_keys.clone(),
                    network_tags: spec.network_tags.clone(),
                    ssh_sources: spec.ssh_sources.clone(),
                    admission_group: group,
                    user_data_len: spec.user_data.len(),
                };
                s.insert_machine(StoredMachine {
                    machine: machine.clone(),
                    extras,
                    request: request.map(str::to_string),
                });
                Ok(machine)
            })
            .await??;
        Self::lost(lose)?;
        Ok(made)
    }

    /// Cloud API: sets and removes labels of a machine, keeping the others.
    pub async fn api_set_labels(
        &self,
        id: &str,
        set: &Labels,
        remove: &[String],
    ) -> Result<Machine> {
        self.change(Operation::Labels, |s| {
            let m = s.visible_mut(id)?;
            for k in remove {
                m.machine.labels.remove(k);
            }
            m.machine
                .labels
                .extend(set.iter().map(|(k, v)| (k.clone(), v.clone())));
            Ok(m.machine.clone())
        })
        .await
    }

    /// Cloud API: a network (one that was never put is a custom-mode network of that name).
    pub async fn api_network(&self, name: &str) -> Result<Network> {
        Self::lost(self.request(Operation::Network).await?)?;
        self.state(false, |s| {
            s.networks
                .get(name)
                .cloned()
                .unwrap_or_else(|| Network::new(name))
        })
        .await
    }

    /// Cloud API: one firewall rule.
    pub async fn api_firewall_rule(&self, name: &str) -> Result<Option<FirewallRule>> {
        Self::lost(self.request(Operation::Network).await?)?;
        self.state(false, |s| s.firewall.get(name).cloned()).await
    }

    /// Cloud API: one page of the firewall rules, in name order, after the rule `after`.
    pub async fn api_firewall_rules(
        &self,
        page_size: usize,
        after: Option<&str>,
    ) -> Result<Page<FirewallRule>> {
        Self::lost(self.request(Operation::Network).await?)?;
        self.state(false, |s| {
            let mut rest = s
                .firewall
                .values()
                .filter(|r| after.is_none_or(|a| r.name.as_str() > a));
            let items: Vec<FirewallRule> = rest.by_ref().take(page_size.max(1)).cloned().collect();
            let next = rest.next().and(items.last()).map(|r| r.name.clone());
            Page { items, next }
        })
        .await
    }

    /// Cloud API: patches a firewall rule's source ranges.
    pub async fn api_firewall_sources(
        &self,
        name: &str,
        ranges: &[String],
    ) -> Result<FirewallRule> {
        self.change(Operation::Network, |s| {
            let r = s
                .firewall
                .get_mut(name)
                .ok_or_else(|| Error::not_found(format!("firewall rule {name}")))?;
            r.source_ranges = ranges.to_vec();
            Ok(r.clone())
        })
        .await
    }

    /// Cloud API: makes admission group `<group>-<location>` when missing and sets the subnet rule
    /// `group` admitting `sources` to it, at the first free inbound priority from 100 (kept when the
    /// rule exists).
    pub async fn api_admit(
        &self,
        group: &str,
        location: &str,
        sources: &[String],
    ) -> Result<Admission> {
        self.change(Operation::Network, |s| {
            let group_id = format!("{group}-{location}");
            s.groups.insert(group_id.clone());
            let mut admission = Admission::new(&group_id);
            let subnet = s.subnets.entry(location.to_string()).or_default();
            if !subnet.present {
                return Ok(admission);
            }
            let priority = match subnet.rules.iter().find(|r| r.name == group) {
                Some(r) => r.priority,
                None => first_free_priority(
                    subnet
                        .rules
                        .iter()
                        .filter(|r| r.inbound && r.name != group)
                        .map(|r| r.priority),
                    FIRST_ADMISSION_PRIORITY,
                    LAST_ADMISSION_PRIORITY,
                )
                .ok_or_else(|| {
                    Error::quota(format!(
                        "the subnet security group of {location} has no free inbound priority from {FIRST_ADMISSION_PRIORITY}"
                    ))
                })?,
            };
            subnet.rules.retain(|r| r.name != group);
            subnet.rules.push(SubnetRule {
                name: group.to_string(),
                priority,
                inbound: true,
                sources: sources.to_vec(),
                to_group: Some(group_id),
            });
            admission.rule = Some(AdmissionRule {
                security_group: format!("subnet-{location}"),
                name: group.to_string(),
                priority,
            });
            Ok(admission)
        })
        .await
    }

    /// Cloud API: sets the sources machine `id`'s own firewall admits on SSH; false when there is no
    /// such machine.
    pub async fn api_ssh_sources(&self, id: &str, sources: &[String]) -> Result<bool> {
        self.change(Operation::Network, |s| {
            let Ok(m) = s.visible_mut(id) else {
                return Ok(false);
            };
            m.extras.ssh_sources = sources.to_vec();
            Ok(true)
        })
        .await
    }

    /// Cloud API: the account's credit balance (100 USD until [`MemoryCloud::set_credit`]).
    pub async fn api_balance(&self) -> Result<Balance> {
        Self::lost(self.request(Operation::Account).await?)?;
        self.state(false, |s| {
            let mut b = s
                .credit
                .clone()
                .unwrap_or_else(|| Balance::new(100.0, "USD"));
            b.as_of = Some(clock(s));
            b
        })
        .await
    }

    /// Cloud API: removes a machine; false when there was none.
    pub async fn api_remove(&self, id: &str) -> Result<bool> {
        self.change(Operation::Delete, |s| {
            if s.machines.get(id).is_some_and(|m| !s.visible(m)) {
                return Err(Error::not_found(format!("machine {id}"))
                    .with_code("InvalidInstanceID.NotFound"));
            }
            let gone = s.remove_machine(id);
            if let Some(m) = &gone {
                let key = stock_key(&m.machine.machine_type, &m.machine.location);
                if let Some(left) = s.stock.get_mut(&key) {
                    *left += 1;
                }
            }
            Ok(gone.is_some())
        })
        .await
    }

    /// Cloud API: powers a machine on or off.
    pub async fn api_power(&self, id: &str, on: bool) -> Result<Machine> {
        self.change(Operation::Change, |s| {
            let now = clock(s);
            let m = s.visible_mut(id)?;
            power(&mut m.machine, on, now);
            Ok(m.machine.clone())
        })
        .await
    }

    /// Cloud API: changes a stopped machine's type (the architecture must stay the same).
    pub async fn api_change_type(&self, id: &str, machine_type: &str) -> Result<Machine> {
        let cat = catalogue();
        self.change(Operation::Change, |s| {
            let new = cat.iter().find(|t| t.name == machine_type).ok_or_else(|| {
                Error::invalid(
                    "machine_type",
                    format!("unknown machine type {machine_type:?}"),
                )
            })?;
            let m = s.visible_mut(id)?;
            if m.machine.status != Status::Stopped {
                return Err(Error::other(format!(
                    "machine {id} must be stopped to change its type"
                )));
            }
            check_offered(new, &m.machine.location)?;
            let old = cat.iter().find(|t| t.name == m.machine.machine_type);
            if old.map(|o| docker_arch(&o.architecture)) != Some(docker_arch(&new.architecture)) {
                return Err(Error::invalid(
                    "machine_type",
                    format!(
                        "{machine_type} has another architecture than {}",
                        m.machine.machine_type
                    ),
                ));
            }
            m.machine.machine_type = machine_type.to_string();
            Ok(m.machine.clone())
        })
        .await
    }
}

/// The in-memory driver: one owner's view of a [`MemoryCloud`]. It has every capability.
#[derive(Debug, Clone)]
pub struct MemoryProvider {
    cloud: MemoryCloud,
    owner: String,
    page_size: usize,
    retry: RetryPolicy,
    arch_cache: Arc<Mutex<HashMap<String, Arch>>>,
    network: String,
    /// Ids this provider made lately, which the cloud may not show yet: a "not found" for one of
    /// them is read again before it is believed.
    recent: Arc<Mutex<Recent>>,
}

/// How long after making a machine a "not found" for it is not believed at once.
pub const RECENT: Duration = Duration::from_secs(120);

/// The ids a provider made, with when.
#[derive(Debug, Default)]
struct Recent {
    made: HashMap<String, std::time::Instant>,
    /// How many were left after the last sweep of the expired ones: the next sweep waits until
    /// there are twice as many, so that a create or delete costs the same however many were made.
    swept: usize,
}

impl Recent {
    fn note(&mut self, id: &str) {
        self.made.insert(id.to_string(), std::time::Instant::now());
        if self.made.len() >= 2 * self.swept.max(32) {
            self.made.retain(|_, at| at.elapsed() < RECENT);
            self.swept = self.made.len();
        }
    }

    fn has(&self, id: &str) -> bool {
        self.made.get(id).is_some_and(|at| at.elapsed() < RECENT)
    }
}

impl MemoryProvider {
    /// The same provider, putting machines on (and reading the firewall rules of) `network`.
    pub fn with_network(mut self, network: impl Into<String>) -> Self {
        self.network = network.into();
        self
    }

    /// The same provider, reading `page_size` machines a page when listing.
    pub fn with_page_size(mut self, page_size: usize) -> Self {
        self.page_size = page_size.max(1);
        self
    }

    /// The same provider with another retry policy.
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// The cloud it runs on.
    pub fn cloud(&self) -> &MemoryCloud {
        &self.cloud
    }

    /// Whether this provider made machine `id` lately (the cloud may not show it yet).
    fn is_recent(&self, id: &str) -> bool {
        lock(&self.recent).has(id)
    }

    /// Reads machine `id`. When the cloud is eventually consistent, "not found" is believed only
    /// once it has lasted longer than a new machine can stay invisible: the machine may be one made
    /// a moment ago (by this provider or another).
    async fn read(&self, id: &str) -> Result<Option<Machine>> {
        self.believed(|| self.retry.retry("get", || self.cloud.api_get(id)))
            .await
    }

    /// What `read` answers, where "none" is believed only once it has lasted longer than a new
    /// machine can stay invisible (read again until then).
    async fn believed<F, Fut>(&self, read: F) -> Result<Option<Machine>>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<Option<Machine>>>,
    {
        let first = read().await?;
        // Through the state's lock wait, never the blocking one: this runs on the caller's runtime.
        let window = self
            .cloud
            .state(false, |s| Duration::from_millis(s.visibility_delay_ms))
            .await?;
        if first.is_some() || window.is_zero() {
            return Ok(first);
        }
        let deadline = std::time::Instant::now() + window + window / 2;
        let mut retry = 0;
        while std::time::Instant::now() < deadline {
            tokio::time::sleep(self.retry.backoff(retry).max(Duration::from_millis(10))).await;
            retry += 1;
            if let Some(m) = read().await? {
                return Ok(Some(m));
            }
        }
        Ok(None)
    }

    /// The labels a listing of this provider's machines must not carry: none of an owner's, for
    /// the provider of no owner.
    fn without(&self) -> &'static [&'static str] {
        if self.owner.is_empty() {
            &[labels::OWNER_LABEL]
        } else {
            &[]
        }
    }

    /// One read of this owner's machine of `pool` named `name` (one request, retried as every read).
    async fn named(&self, pool: &str, name: &str) -> Result<Option<Machine>> {
        let with = labels::ownership_labels(pool, &self.owner);
        let without = self.without();
        let page = self
            .retry
            .retry("get_by_name", || {
                self.cloud
                    .api_list(&with, without, Some(name), self.page_size, None)
            })
            .await?;
        Ok(crate::provider::first_made(page.items))
    }

    async fn owned(&self, id: &str) -> Result<Option<Machine>> {
        validate_id(id)?;
        let m = self.read(id).await?;
        match m {
            Some(m) if !labels::is_owned_by(&m.labels, &self.owner) => {
                Err(Error::not_owned(id, &self.owner))
            }
            other => Ok(other),
        }
    }

    async fn owned_existing(&self, id: &str) -> Result<Machine> {
        self.owned(id)
            .await?
            .ok_or_else(|| Error::not_found(format!("machine {id}")))
    }
}

#[async_trait]
impl Provider for MemoryProvider {
    fn kind(&self) -> &str {
        KIND
    }

    fn owner(&self) -> &str {
        &self.owner
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::ALL
    }

    async fn arch(&self, machine_type: &str) -> Result<Arch> {
        validate_token("machine_type", machine_type)?;
        if let Some(a) = lock(&self.arch_cache).get(machine_type) {
            return Ok(a.clone());
        }
        let t = self
            .retry
            .retry("machine_type", || self.cloud.api_machine_type(machine_type))
            .await?;
        let a = docker_arch(&t.architecture);
        lock(&self.arch_cache).insert(machine_type.to_string(), a.clone());
        Ok(a)
    }

    async fn create(&self, spec: &MachineSpec) -> Result<Created> {
        spec.validate()?;
        self.capabilities().check_spec(KIND, spec)?;
        let wanted = labels::ownership_labels(&spec.pool, &self.owner);
        let mut all_labels = spec.labels.clone();
        all_labels.extend(wanted.clone());
        // One request id for every attempt of this call: a retry after a lost answer is answered
        // the machine its attempt made. A machine met by name is then never this call's, whatever
        // the earlier attempts' failures looked like: it is an earlier call's, adopted.
        let request = format!("{:016x}", fastrand::u64(..));
        let made = self
            .retry
            .retry("create", || async {
                match self
                    .cloud
                    .api_insert_request(spec, all_labels.clone(), Some(&request))
                    .await
                {
                    // Names are unique: a machine of this name that is ours, of this pool, type
                    // and location, is what an earlier create made. Adopt it.
                    Err(Error::AlreadyExists { what, .. }) => {
                        let page = self
                            .cloud
                            .api_list(&wanted, &[], Some(&spec.name), 1, None)
                            .await?;
                        match page.items.into_iter().next() {
                            Some(m)
                                if labels::is_in_pool(&m.labels, &spec.pool, &self.owner)
                                    && m.machine_type == spec.machine_type
                                    && m.location == spec.location =>
                            {
                                tracing::info!(name = %spec.name, id = %m.id, "adopted a machine made by an earlier create");
                                Ok((m, true))
                            }
                            _ => Err(Error::already_exists(what)),
                        }
                    }
                    other => other.map(|m| (m, false)),
                }
            })
            .await;
        let (m, adopted) = match made {
            Ok(made) => made,
            Err(Error::NoStock { message, .. }) => return Ok(crate::kit::no_stock(spec, message)),
            Err(e) => return Err(e),
        };
        lock(&self.recent).note(&m.id);
        // Do not answer before the cloud shows the machine: a listing or a delete right after the
        // create must find it.
        let Some(seen) = self.read(&m.id).await? else {
            return Err(Error::transient(format!(
                "machine {} was made but the cloud does not show it",
                m.id
            )));
        };
        Ok(if adopted {
            Created::Adopted(seen)
        } else {
            Created::Machine(seen)
        })
    }

    async fn machines(&self, pool: &str) -> Result<Vec<Machine>> {
        validate_pool(pool)?;
        let with = labels::ownership_labels(pool, &self.owner);
        let without = self.without();
        all_pages(|token| {
            let with = &with;
            async move {
                self.retry
                    .retry("list", || {
                        self.cloud
                            .api_list(with, without, None, self.page_size, token.as_deref())
                    })
                    .await
            }
        })
        .await
    }

    async fn machine(&self, id: &str) -> Result<Option<Machine>> {
        self.owned(id).await
    }

    /// One request: the listing API filtered on the name and this owner's pool labels, on the
    /// cloud's side (names are unique in this cloud). Like [`Provider::machine`], "none" is believed
    /// only once it has lasted longer than a new machine can stay invisible.
    async fn machine_named(&self, pool: &str, name: &str) -> Result<Option<Machine>> {
        validate_pool(pool)?;
        validate_name(name)?;
        self.believed(|| self.named(pool, name)).await
    }

    async fn delete(&self, id: &str) -> Result<bool> {
        if self.owned(id).await?.is_none() {
            return Ok(true);
        }
        let recent = self.is_recent(id);
        self.retry
            .retry("delete", || async {
                match self.cloud.api_remove(id).await {
                    // A delete that the cloud answers "not found" for a machine it showed a moment
                    // ago is not believed: read again and delete again.
                    Err(Error::NotFound { .. }) if recent => Err(Error::transient(format!(
                        "machine {id} is not visible to delete yet"
                    ))),
                    other => other,
                }
            })
            .await?;
        Ok(true)
    }

    async fn start(&self, id: &str) -> Result<Machine> {
        self.owned_existing(id).await?;
        self.retry
            .retry("start", || self.cloud.api_power(id, true))
            .await
    }

    async fn stop(&self, id: &str) -> Result<Machine> {
        self.owned_existing(id).await?;
        self.retry
            .retry("stop", || self.cloud.api_power(id, false))
            .await
    }

    async fn resize(&self, id: &str, machine_type: &str) -> Result<Resized> {
        validate_token("machine_type", machine_type)?;
        let m = self.owned_existing(id).await?;
        if m.machine_type == machine_type {
            return Ok(Resized::new(m, false));
        }
        let was_running = m.status != Status::Stopped;
        if was_running {
            self.stop(id).await?;
        }
        let changed = self
            .retry
            .retry("change_type", || {
                self.cloud.api_change_type(id, machine_type)
            })
            .await;
        let machine = match (changed, was_running) {
            (Ok(_), true) => self.start(id).await?,
            (Ok(m), false) => m,
            (Err(e), true) => {
                // Leave the machine as it was found: running.
                self.start(id).await?;
                return Err(e);
            }
            (Err(e), false) => return Err(e),
        };
        Ok(Resized::new(machine, was_running))
    }

    async fn hourly_price(&self, machine_type: &str, location: &str) -> Result<Price> {
        validate_token("machine_type", machine_type)?;
        validate_token("location", location)?;
        if !LOCATIONS.contains(&location) {
            return Err(Error::invalid(
                "location",
                format!("unknown location {location:?}"),
            ));
        }
        let t = self
            .retry
            .retry("price", || self.cloud.api_machine_type(machine_type))
            .await?;
        if !t.offered_in(location) {
            return Err(Error::not_found(format!(
                "a price of {machine_type} in {location} (not offered there; it is in {})",
                t.locations.join(", ")
            )));
        }
        Ok(Price::new(t.hourly_usd, "USD"))
    }

    fn machine_labels(&self) -> Option<&dyn MachineLabels> {
        Some(self)
    }

    fn firewall_rules(&self) -> Option<&dyn FirewallRules> {
        Some(self)
    }

    fn ssh_admission(&self) -> Option<&dyn SshAdmission> {
        Some(self)
    }

    fn credit_balance(&self) -> Option<&dyn CreditBalance> {
        Some(self)
    }
}

#[async_trait]
impl MachineLabels for MemoryProvider {
    async fn set_labels(&self, id: &str, set: &Labels, remove: &[String]) -> Result<Machine> {
        validate_id(id)?;
        validate_labels(set)?;
        for k in remove {
            validate_label_key_to_remove(k)?;
        }
        self.owned_existing(id).await?;
        self.retry
            .retry("set_labels", || self.cloud.api_set_labels(id, set, remove))
            .await
    }
}

#[async_trait]
impl FirewallRules for MemoryProvider {
    fn network_name(&self) -> String {
        self.network.clone()
    }

    async fn network(&self) -> Result<Network> {
        self.retry
            .retry("network", || self.cloud.api_network(&self.network))
            .await
    }

    async fn rule(&self, name: &str) -> Result<Option<FirewallRule>> {
        validate_token("firewall rule", name)?;
        self.retry
            .retry("firewall_rule", || self.cloud.api_firewall_rule(name))
            .await
    }

    async fn rules(&self) -> Result<Vec<FirewallRule>> {
        let all = all_pages(|token| async move {
            self.retry
                .retry("firewall_rules", || {
                    self.cloud
                        .api_firewall_rules(self.page_size, token.as_deref())
                })
                .await
        })
        .await?;
        Ok(all
            .into_iter()
            .filter(|r| r.network == self.network)
            .collect())
    }

    async fn set_source_ranges(&self, name: &str, ranges: &[String]) -> Result<FirewallRule> {
        validate_token("firewall rule", name)?;
        check_ipv4_ranges(ranges)?;
        match self.rule(name).await? {
            None => return Err(Error::not_found(format!("firewall rule {name}"))),
            Some(r) if r.network != self.network => {
                return Err(Error::invalid(
                    "firewall rule",
                    format!(
                    "rule {name} is on network {}, not on this provider's network {}; not changed",
                    r.network, self.network
                ),
                ))
            }
            Some(_) => {}
        }
        self.retry
            .retry("set_source_ranges", || {
                self.cloud.api_firewall_sources(name, ranges)
            })
            .await
    }
}

#[async_trait]
impl SshAdmission for MemoryProvider {
    async fn admit_ssh(
        &self,
        group: &str,
        location: &str,
        sources: &[String],
        readmit: &[String],
    ) -> Result<Admission> {
        check_admission_input(group, location, sources, readmit)?;
        known_location(location)?;
        // Another owner's machine refuses the whole call before anything is changed.
        let mut present = Vec::new();
        for id in readmit {
            present.push(self.owned(id).await?.is_some());
        }
        let mut admission = self
            .retry
            .retry("admit_ssh", || {
                self.cloud.api_admit(group, location, sources)
            })
            .await?;
        for (id, present) in readmit.iter().zip(present) {
            if !present {
                admission.missing.push(id.clone());
                continue;
            }
            let found = self
                .retry
                .retry("readmit_ssh", || self.cloud.api_ssh_sources(id, sources))
                .await?;
            if found {
                admission.readmitted.push(id.clone());
            } else {
                admission.missing.push(id.clone());
            }
        }
        Ok(admission)
    }
}

#[async_trait]
impl CreditBalance for MemoryProvider {
    async fn balance(&self) -> Result<Balance> {
        self.retry
            .retry("balance", || self.cloud.api_balance())
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str) -> MachineSpec {
        MachineSpec::new(name, "amd64-small", "zone-a", "p")
    }

    #[tokio::test]
    async fn persistence_is_shared_between_clouds_on_one_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let one = MemoryCloud::persistent(&path)
            .unwrap()
            .provider("o")
            .unwrap();
        one.create(&spec("a")).await.unwrap();
        let two = MemoryCloud::persistent(&path)
            .unwrap()
            .provider("o")
            .unwrap();
        let seen = two.machines("p").await.unwrap();
        assert_eq!(seen.len(), 1);
        assert!(two.delete(&seen[0].id).await.unwrap());
        assert!(one.machines("p").await.unwrap().is_empty());
    }

    /// The lookups by name and of run limits stay true to the machines: a name is taken until its
    /// machine is removed (in this process or another on the same file), and a run limit is enforced
    /// on a state read back from its file.
    #[tokio::test]
    async fn names_and_run_limits_follow_the_machines_across_processes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let one = MemoryCloud::persistent(&path).unwrap();
        let p = one.provider("o").unwrap();
        let limited = spec("a").with_max_run_duration(Duration::from_secs(60));
        let a = p.create(&limited).await.unwrap().machine().unwrap();
        let two = MemoryCloud::persistent(&path).unwrap();
        let q = two.provider("o").unwrap();
        assert!(
            matches!(q.create(&spec("a")).await.unwrap(), Created::Adopted(m) if m.id == a.id),
            "the name is taken in the other process too"
        );
        two.advance_clock(Duration::from_secs(120));
        let seen = p.machine(&a.id).await.unwrap().unwrap();
        assert_eq!(seen.status, Status::Stopped, "the run limit is enforced");
        assert!(two.operator_delete(&a.id));
        let again = p.create(&spec("a")).await.unwrap();
        assert!(
            matches!(&again, Created::Machine(m) if m.id != a.id),
            "{again:?}"
        );

        let mem = MemoryCloud::new();
        let p = mem.provider("o").unwrap();
        for i in 0..120 {
            p.create(&spec(&format!("w-{i}"))).await.unwrap();
        }
        let all = p.clone().with_page_size(7).machines("p").await.unwrap();
        assert_eq!(all.len(), 120);
        assert!(all.windows(2).all(|w| w[0].id < w[1].id), "in id order");
        let b = p.create(&limited).await.unwrap().machine().unwrap();
        mem.advance_clock(Duration::from_secs(120));
        assert_eq!(
            p.machine(&b.id).await.unwrap().unwrap().status,
            Status::Stopped
        );
        assert!(p.delete(&all[5].id).await.unwrap());
        assert!(matches!(
            p.create(&spec("w-5")).await.unwrap(),
            Created::Machine(_)
        ));
    }

    #[tokio::test]
    async fn a_read_only_cloud_refuses_changes_to_every_process_on_its_file_and_reads_go_on() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let a = MemoryCloud::persistent(&path)
            .unwrap()
            .provider("s")
            .unwrap();
        let made = a.create(&spec("w-1")).await.unwrap().machine().unwrap();
        // Another process on the same file.
        let other = MemoryCloud::persistent(&path).unwrap();
        other.set_read_only(true);
        let e = a.create(&spec("w-2")).await.unwrap_err();
        assert!(e.to_string().contains("read-only"), "{e}");
        assert!(e.to_string().contains("state.json"), "{e}");
        assert!(a.delete(&made.id).await.is_err());
        assert!(
            !other.operator_stop(&made.id),
            "the operator's console is refused too"
        );
        assert_eq!(a.machines("p").await.unwrap().len(), 1, "reads go on");
        other.set_read_only(false);
        assert!(a.create(&spec("w-2")).await.unwrap().machine().is_some());

        let mem = MemoryCloud::new();
        let p = mem.provider("s").unwrap();
        mem.set_read_only(true);
        assert!(p.create(&spec("w-1")).await.is_err());
        assert!(mem.all_machines().is_empty(), "nothing was made");
        mem.set_read_only(false);
        assert!(p.create(&spec("w-1")).await.is_ok());
    }

    #[tokio::test]
    async fn corrupt_state_file_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        std::fs::write(&path, "not json").unwrap();
        let e = MemoryCloud::persistent(&path).unwrap_err();
        assert!(e.to_string().contains("not orca state"), "{e}");
    }

    #[tokio::test]
    async fn injected_errors_are_retried_or_surfaced_by_kind() {
        let cloud = MemoryCloud::new();
        let p = cloud.provider("o").unwrap();
        cloud.inject(Operation::List, FaultKind::Error(ErrorKind::Throttled), 2);
        assert!(p.machines("p").await.unwrap().is_empty());
        assert_eq!(cloud.requests(), 3, "two throttled pages, then the answer");
        cloud.inject(Operation::Create, FaultKind::Error(ErrorKind::Quota), 1);
        let e = p.create(&spec("q")).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Quota);
        assert!(cloud.all_machines().is_empty());
    }

    #[tokio::test]
    async fn injected_faults_say_whether_a_failed_create_made_nothing() {
        let cloud = MemoryCloud::new();
        let p = cloud.provider("o").unwrap();
        cloud.inject(
            Operation::Create,
            FaultKind::Error(ErrorKind::PermissionDenied),
            1,
        );
        let e = p.create(&spec("refused")).await.unwrap_err();
        assert!(e.made_nothing(), "{e:?}");
        // Throttled on every attempt until the budget ran out: no attempt was acted on.
        cloud.inject(Operation::Create, FaultKind::Error(ErrorKind::Throttled), 7);
        let e = p.create(&spec("throttled")).await.unwrap_err();
        assert_eq!((e.kind(), e.retries()), (ErrorKind::Throttled, 6));
        assert!(e.made_nothing(), "{e:?}");
        assert!(cloud.all_machines().is_empty());
        // The answer lost after the machine was made, then a refusal: the machine stands.
        cloud.inject(Operation::Create, FaultKind::LoseAnswer, 1);
        cloud.inject(Operation::Create, FaultKind::Error(ErrorKind::Quota), 1);
        let e = p.create(&spec("lost-then-quota")).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Quota);
        assert!(!e.made_nothing(), "{e:?}");
        assert_eq!(cloud.all_machines().len(), 1);
        // The answer lost with no retry: a passing failure, and the machine was made.
        let once = p.clone().with_retry(RetryPolicy::NEVER);
        cloud.inject(Operation::Create, FaultKind::LoseAnswer, 1);
        let e = once.create(&spec("lost")).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Transient);
        assert!(!e.made_nothing(), "{e:?}");
        assert_eq!(cloud.all_machines().len(), 2);
    }

    #[tokio::test]
    async fn a_machine_is_read_by_name_in_one_request() {
        let cloud = MemoryCloud::new();
        let p = cloud.provider("o").unwrap().with_page_size(1);
        let other = cloud.provider("other").unwrap();
        for n in 0..4 {
            p.create(&spec(&format!("m{n}"))).await.unwrap();
        }
        other
            .create(&MachineSpec::new("theirs", "amd64-small", "zone-a", "p"))
            .await
            .unwrap();
        let before = cloud.requests();
        let m = p.machine_named("p", "m2").await.unwrap().unwrap();
        assert_eq!(cloud.requests() - before, 1, "one request, not a listing");
        assert_eq!((m.name.as_str(), m.pool.as_str()), ("m2", "p"));
        // A stopped machine is found too: every state but gone.
        p.stop(&m.id).await.unwrap();
        let stopped = p.machine_named("p", "m2").await.unwrap().unwrap();
        assert_eq!(
            (stopped.id, stopped.status),
            (m.id.clone(), Status::Stopped)
        );
        for (pool, name) in [("q", "m2"), ("p", "theirs"), ("p", "m9")] {
            assert_eq!(
                p.machine_named(pool, name).await.unwrap(),
                None,
                "{pool}/{name}"
            );
        }
        assert_eq!(other.machine_named("p", "m2").await.unwrap(), None);
        let before = cloud.requests();
        for (pool, name, field) in [
            ("a,b", "m2", "pool"),
            ("p", "M2", "name"),
            ("p", "", "name"),
        ] {
            match p.machine_named(pool, name).await {
                Err(Error::InvalidSpec { field: f, .. }) => assert_eq!(f, field),
                other => panic!("{pool}/{name} gave {other:?}"),
            }
        }
        assert_eq!(cloud.requests(), before, "bad input sends nothing");
        p.delete(&m.id).await.unwrap();
        assert_eq!(p.machine_named("p", "m2").await.unwrap(), None, "gone");
    }

    #[tokio::test]
    async fn what_a_lost_create_made_is_found_by_name_through_faults_and_late_visibility() {
        let cloud = MemoryCloud::new();
        let p = cloud.provider("o").unwrap().with_retry(RetryPolicy::NEVER);
        cloud.set_visibility_delay(Duration::from_millis(300));
        cloud.inject(Operation::Create, FaultKind::LoseAnswer, 1);
        let e = p.create(&spec("lost")).await.unwrap_err();
        assert!(!e.made_nothing(), "{e:?}");
        // The cloud does not show the machine yet; the read waits that out as every read does.
        let m = p.machine_named("p", "lost").await.unwrap();
        assert_eq!(m.map(|m| m.name).as_deref(), Some("lost"));
        // Its faults are the listing's: a refusal is surfaced, and counted as a request.
        cloud.inject(
            Operation::List,
            FaultKind::Error(ErrorKind::PermissionDenied),
            1,
        );
        let e = p.machine_named("p", "lost").await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::PermissionDenied);
    }

    #[tokio::test]
    async fn lost_answer_is_adopted_not_repeated() {
        let cloud = MemoryCloud::new();
        let p = cloud.provider("o").unwrap();
        cloud.inject(Operation::Create, FaultKind::LoseAnswer, 1);
        let m = p.create(&spec("lost")).await.unwrap().machine().unwrap();
        assert_eq!(cloud.all_machines().len(), 1);
        assert_eq!(cloud.all_machines()[0].id, m.id);
    }

    #[tokio::test]
    async fn foreign_name_is_not_adopted() {
        let cloud = MemoryCloud::new();
        cloud
            .provider("a")
            .unwrap()
            .create(&spec("same"))
            .await
            .unwrap();
        let e = cloud
            .provider("b")
            .unwrap()
            .create(&spec("same"))
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::AlreadyExists);
    }

    #[tokio::test]
    async fn resize_across_architectures_is_refused_and_machine_keeps_running() {
        let cloud = MemoryCloud::new();
        let p = cloud.provider("o").unwrap();
        let m = p.create(&spec("r")).await.unwrap().machine().unwrap();
        let e = p.resize(&m.id, "arm64-large").await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidSpec);
        assert_eq!(p.machines("p").await.unwrap()[0].status, Status::Running);
    }
}
