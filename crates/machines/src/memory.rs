//! The in-memory provider (kind `fake`): a simulated cloud ([`MemoryCloud`]) and a driver on top of it
//! ([`MemoryProvider`]) that keeps the whole contract and has every capability.
//!
//! The cloud behaves like a small real one: machine types of both architectures with prices, locations,
//! unique machine names, a listing API with label filters and pages, stock per type and location that a
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

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::arch::{docker_arch, Arch};
use crate::error::{Error, ErrorKind, Result};
use crate::labels::{self, Labels};
use crate::machine::{Created, Machine, Price, Resized, Status};
use crate::provider::{Capabilities, Provider};
use crate::retry::{all_pages, Page, RetryPolicy};
use crate::spec::{validate_id, validate_owner, validate_pool, validate_token, MachineSpec};

/// The provider kind of the in-memory provider.
pub const KIND: &str = "fake";

/// A machine type in the simulated cloud's catalogue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MachineType {
    /// Its name.
    pub name: String,
    /// The cloud's spelling of its architecture (`x86_64`, `aarch64`).
    pub architecture: String,
    /// Virtual CPUs.
    pub cpus: u32,
    /// Hourly price in EUR.
    pub hourly_eur: f64,
}

/// The simulated cloud's machine types: two of each architecture.
pub fn catalogue() -> Vec<MachineType> {
    let t = |name: &str, architecture: &str, cpus, hourly_eur| MachineType {
        name: name.into(),
        architecture: architecture.into(),
        cpus,
        hourly_eur,
    };
    vec![
        t("amd64-small", "x86_64", 2, 0.0066),
        t("amd64-large", "x86_64", 8, 0.0280),
        t("arm64-small", "aarch64", 2, 0.0059),
        t("arm64-large", "aarch64", 8, 0.0249),
    ]
}

/// The simulated cloud's locations.
pub const LOCATIONS: [&str; 3] = ["zone-a", "zone-b", "zone-c"];

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
    /// all the same: the ambiguous failure of contract 3).
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
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct StoredMachine {
    machine: Machine,
    user_data_len: usize,
}

#[derive(Debug, Default)]
struct Inner {
    state: Mutex<State>,
    path: Option<PathBuf>,
    faults: Mutex<Vec<Fault>>,
    requests: AtomicU64,
}

/// A simulated cloud, shared by every [`MemoryProvider`] made from it (cheap to clone).
#[derive(Debug, Clone, Default)]
pub struct MemoryCloud {
    inner: Arc<Inner>,
}

fn stock_key(machine_type: &str, location: &str) -> String {
    format!("{machine_type}@{location}")
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl MemoryCloud {
    /// An empty cloud held in memory.
    pub fn new() -> Self {
        Self::default()
    }

    /// A cloud persisted in the JSON file at `path` (made when missing): every call reads it and every
    /// change writes it back under a file lock, so separate processes see the same machines.
    pub fn persistent(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let cloud = MemoryCloud {
            inner: Arc::new(Inner {
                path: Some(path),
                ..Inner::default()
            }),
        };
        cloud.with_state(false, |_| ())?;
        Ok(cloud)
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
        })
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

    fn with_state<R>(&self, write: bool, f: impl FnOnce(&mut State) -> R) -> Result<R> {
        let mut state = lock(&self.inner.state);
        let Some(path) = &self.inner.path else {
            return Ok(f(&mut state));
        };
        let io = |what: &str, e: std::io::Error| {
            Error::other(format!("state file {}: {what}: {e}", path.display()))
        };
        let lock_path = path.with_extension("lock");
        let lock_file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| io("open lock", e))?;
        lock_file.lock().map_err(|e| io("lock", e))?;
        let mut disk: State = match std::fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                Error::other(format!(
                    "state file {}: not orca state: {e}",
                    path.display()
                ))
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => State::default(),
            Err(e) => return Err(io("read", e)),
        };
        let r = f(&mut disk);
        if write || !path.exists() {
            let tmp = path.with_extension("tmp");
            let bytes =
                serde_json::to_vec_pretty(&disk).map_err(|e| Error::other(e.to_string()))?;
            std::fs::write(&tmp, bytes).map_err(|e| io("write", e))?;
            std::fs::rename(&tmp, path).map_err(|e| io("rename", e))?;
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
                ErrorKind::Throttled => Error::Throttled {
                    retry_after: Some(Duration::from_millis(5)),
                    message: "injected: too many requests".into(),
                },
                ErrorKind::NoStock => Error::NoStock {
                    machine_type: String::new(),
                    location: String::new(),
                    message: "injected: no capacity".into(),
                },
                other => Error::of_kind(other, format!("injected {other:?}")),
            });
        }
        Ok(lose)
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
            .ok_or_else(|| Error::NotFound {
                what: format!("machine type {name:?}"),
            })
    }

    /// Cloud API: one machine by id.
    pub async fn api_get(&self, id: &str) -> Result<Option<Machine>> {
        Self::lost(self.request(Operation::List).await?)?;
        self.with_state(false, |s| s.machines.get(id).map(|m| m.machine.clone()))
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
        self.with_state(false, |s| {
            let mut matching = s
                .machines
                .values()
                .map(|m| &m.machine)
                .filter(|m| after.is_none_or(|a| m.id.as_str() > a))
                .filter(|m| name.is_none_or(|n| m.name == n))
                .filter(|m| with.iter().all(|(k, v)| m.labels.get(k) == Some(v)))
                .filter(|m| without.iter().all(|k| !m.labels.contains_key(*k)));
            let items: Vec<Machine> = matching.by_ref().take(page_size).cloned().collect();
            let more = matching.next().is_some();
            let next = if more {
                items.last().map(|m| m.id.clone())
            } else {
                None
            };
            Page { items, next }
        })
    }

    /// Cloud API: makes a machine. Names are unique in the cloud ([`Error::AlreadyExists`]); an unknown
    /// type or location is [`Error::InvalidSpec`]; no stock is [`Error::NoStock`].
    pub async fn api_insert(&self, spec: &MachineSpec, labels: Labels) -> Result<Machine> {
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
        if !LOCATIONS.contains(&spec.location.as_str()) {
            return Err(Error::invalid(
                "location",
                format!(
                    "unknown location {:?}; known: {}",
                    spec.location,
                    LOCATIONS.join(", ")
                ),
            ));
        }
        let made = self.with_state(true, |s| {
            if s.machines.values().any(|m| m.machine.name == spec.name) {
                return Err(Error::AlreadyExists {
                    what: format!("machine named {:?}", spec.name),
                });
            }
            let key = stock_key(&spec.machine_type, &spec.location);
            if let Some(left) = s.stock.get_mut(&key) {
                if *left == 0 {
                    return Err(Error::NoStock {
                        machine_type: spec.machine_type.clone(),
                        location: spec.location.clone(),
                        message: format!("no capacity for {} in {}", mt.name, spec.location),
                    });
                }
                *left -= 1;
            }
            s.next_id += 1;
            let n = s.next_id;
            let machine = Machine {
                id: format!("m-{n:08}"),
                name: spec.name.clone(),
                status: Status::Running,
                cloud_status: "running".into(),
                machine_type: spec.machine_type.clone(),
                location: spec.location.clone(),
                // TEST-NET-2 (RFC 5737): documentation addresses, never routed.
                address: format!("198.51.100.{}", n % 250 + 1),
                pool: labels::pool_of(&labels),
                labels,
            };
            s.machines.insert(
                machine.id.clone(),
                StoredMachine {
                    machine: machine.clone(),
                    user_data_len: spec.user_data.len(),
                },
            );
            Ok(machine)
        })??;
        Self::lost(lose)?;
        Ok(made)
    }

    /// Cloud API: removes a machine; false when there was none.
    pub async fn api_remove(&self, id: &str) -> Result<bool> {
        let lose = self.request(Operation::Delete).await?;
        let removed = self.with_state(true, |s| {
            let gone = s.machines.remove(id);
            if let Some(m) = &gone {
                let key = stock_key(&m.machine.machine_type, &m.machine.location);
                if let Some(left) = s.stock.get_mut(&key) {
                    *left += 1;
                }
            }
            gone.is_some()
        })?;
        Self::lost(lose)?;
        Ok(removed)
    }

    /// Cloud API: powers a machine on or off.
    pub async fn api_power(&self, id: &str, on: bool) -> Result<Machine> {
        let lose = self.request(Operation::Change).await?;
        let m = self.with_state(true, |s| {
            let m = s.machines.get_mut(id).ok_or_else(|| Error::NotFound {
                what: format!("machine {id}"),
            })?;
            let (status, word) = if on {
                (Status::Running, "running")
            } else {
                (Status::Stopped, "off")
            };
            m.machine.status = status;
            m.machine.cloud_status = word.into();
            Ok(m.machine.clone())
        })??;
        Self::lost(lose)?;
        Ok(m)
    }

    /// Cloud API: changes a stopped machine's type (the architecture must stay the same).
    pub async fn api_change_type(&self, id: &str, machine_type: &str) -> Result<Machine> {
        let lose = self.request(Operation::Change).await?;
        let cat = catalogue();
        let m = self.with_state(true, |s| {
            let new = cat.iter().find(|t| t.name == machine_type).ok_or_else(|| {
                Error::invalid(
                    "machine_type",
                    format!("unknown machine type {machine_type:?}"),
                )
            })?;
            let m = s.machines.get_mut(id).ok_or_else(|| Error::NotFound {
                what: format!("machine {id}"),
            })?;
            if m.machine.status != Status::Stopped {
                return Err(Error::other(format!(
                    "machine {id} must be stopped to change its type"
                )));
            }
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
        })??;
        Self::lost(lose)?;
        Ok(m)
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
}

impl MemoryProvider {
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

    /// Reads a machine and checks that this owner made it.
    async fn owned(&self, id: &str) -> Result<Option<Machine>> {
        validate_id(id)?;
        let m = self.retry.retry("get", || self.cloud.api_get(id)).await?;
        match m {
            Some(m) if !labels::is_owned_by(&m.labels, &self.owner) => Err(Error::NotOwned {
                id: id.to_string(),
                owner: self.owner.clone(),
            }),
            other => Ok(other),
        }
    }

    async fn owned_existing(&self, id: &str) -> Result<Machine> {
        self.owned(id).await?.ok_or_else(|| Error::NotFound {
            what: format!("machine {id}"),
        })
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
        let wanted = labels::ownership_labels(&spec.pool, &self.owner);
        let made = self
            .retry
            .retry("create", || async {
                match self.cloud.api_insert(spec, wanted.clone()).await {
                    // Names are unique: a machine of this name that is ours, of this pool, type and
                    // location, is what an earlier attempt made. Adopt it.
                    Err(Error::AlreadyExists { what }) => {
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
                                tracing::info!(name = %spec.name, id = %m.id, "adopted a machine made by an earlier attempt");
                                Ok(m)
                            }
                            _ => Err(Error::AlreadyExists { what }),
                        }
                    }
                    other => other,
                }
            })
            .await;
        match made {
            Ok(m) => Ok(Created::Machine(m)),
            Err(Error::NoStock { message, .. }) => Ok(Created::NoStock {
                machine_type: spec.machine_type.clone(),
                location: spec.location.clone(),
                message,
            }),
            Err(e) => Err(e),
        }
    }

    async fn machines(&self, pool: &str) -> Result<Vec<Machine>> {
        validate_pool(pool)?;
        let with = labels::ownership_labels(pool, &self.owner);
        let without: &[&str] = if self.owner.is_empty() {
            &[labels::OWNER_LABEL]
        } else {
            &[]
        };
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

    async fn delete(&self, id: &str) -> Result<bool> {
        if self.owned(id).await?.is_none() {
            return Ok(true);
        }
        self.retry
            .retry("delete", || self.cloud.api_remove(id))
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
            return Ok(Resized {
                machine: m,
                caused_downtime: false,
            });
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
        Ok(Resized {
            machine,
            caused_downtime: was_running,
        })
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
        Ok(Price {
            hourly: t.hourly_eur,
            currency: "EUR".into(),
        })
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
