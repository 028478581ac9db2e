//! What the server records: a shed ([`Shed`]) with its status and reason, and the marker of an
//! acknowledged delete ([`DeleteMarker`]). Both are kept in `remote.state_dir` (see [`crate::store`]).

use orca::{words, Timestamp};
use serde::{Deserialize, Serialize};

words! {
    /// A shed's status: one of five, by the API's word (a new record's, `starting`, by default).
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
    #[serde(rename_all = "snake_case")]
    pub enum Status {
        /// A create or start is in progress, or the server adopted the VM and has not yet reached its agent.
        #[default]
        Starting = "starting",
        /// The agent answered a probe.
        Running = "running",
        /// A stop is in progress.
        Stopping = "stopping",
        /// The VM is off and its disk is kept.
        Stopped = "stopped",
        /// The create failed. Only a delete leaves this state.
        Error = "error",
    }
}

impl Status {
    /// The reasons this status may carry (besides none).
    pub fn allowed_reasons(self) -> &'static [Reason] {
        use Reason::*;
        match self {
            Status::Starting => &[NoPin, Unreachable, CloudUnreadable],
            Status::Running | Status::Stopping => &[],
            Status::Stopped => &[
                Capacity,
                Quota,
                Limit,
                RunLimit,
                External,
                IsolationLost,
                Layout,
                Firewall,
            ],
            Status::Error => &[Capacity, Quota, CreateFailed, HostKey, Layout, Firewall],
        }
    }

    /// Whether the shed's VM is (or may be) on, for `max_running`.
    pub fn counts_as_running(self) -> bool {
        matches!(self, Status::Starting | Status::Running | Status::Stopping)
    }
}

words! {
    /// Why a shed is in its status, by the API's word. `status_reason` is empty when there is none.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
    #[serde(rename_all = "snake_case")]
    pub enum Reason {
        /// The VM has no pinned host key yet.
        NoPin = "no_pin",
        /// The server cannot reach the VM's SSH port.
        Unreachable = "unreachable",
        /// The server could not learn from the cloud what the VM is doing.
        CloudUnreadable = "cloud_unreadable",
        /// The zone had no room for the machine type.
        Capacity = "capacity",
        /// The cloud project's quota was reached.
        Quota = "quota",
        /// The server's limits (`max_running` or `max_sheds`) were reached.
        Limit = "limit",
        /// The shed ran for as long as its run limit and the cloud stopped it.
        RunLimit = "run_limit",
        /// The VM was stopped outside shed.
        External = "external",
        /// The network no longer isolates the shed (defined; no code path sets it yet).
        IsolationLost = "isolation_lost",
        /// The VM's agent or guest layout is not compatible with this server.
        Layout = "layout",
        /// The create failed for another reason; the server log has the detail.
        CreateFailed = "create_failed",
        /// The host key the VM presented did not match the pinned key.
        HostKey = "host_key",
        /// The firewall check was failing when the server was about to ask the cloud for the VM.
        Firewall = "firewall",
    }
}

/// How far a shed's create got with the cloud (a new record's, `not_sent`, by default).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CreateStage {
    /// Recorded; the cloud was not asked yet.
    #[default]
    NotSent,
    /// The insert was sent (it may or may not have reached the cloud).
    Sent,
    /// The cloud made the VM.
    Made,
}

/// What the job of a `starting` or `stopping` shed is doing, so that a restart resumes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    /// A create: the insert, then the wait for the agent.
    Create,
    /// A start asked by a client: the start call, then the wait for the agent.
    Start,
    /// The VM was found on without a start of ours (adopted, or started outside shed): probe only.
    Probe,
    /// A stop asked by a client (or a queued one).
    Stop,
    /// The VM was found on its way down outside shed: wait for it to stop.
    ExternalStop,
}

/// What a client asked for while the shed's job was busy ("queued" in the call matrix).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Queued {
    /// Start once the running cloud operation (a stop) is done.
    Start,
    /// Stop once the running cloud operation (a create or start) is done.
    Stop,
}

/// The record of one shed. Its `Default` (no VM, no reason, nothing queued, no failure) is what the
/// record literals leave unwritten; it is no shed on its own.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shed {
    /// The shed's ID (10 of a-z and 0-9, starting with a letter), also on its VM as `shed-id`.
    pub id: String,
    /// Its name, unique among the sheds the server lists.
    pub name: String,
    /// The client that made it.
    pub client: String,
    /// The size's name.
    pub size: String,
    /// The size's machine type.
    pub machine_type: String,
    /// The size's CPUs.
    pub cpus: u32,
    /// The size's memory.
    pub memory_mb: u32,
    /// The boot disk's size.
    pub disk_gb: u32,
    /// The image's name as the client gave it (an `image_aliases` name, or `default`).
    pub image: String,
    /// The network profile (`default` or `isolated`).
    pub network_profile: String,
    /// The run limit the VM is made with, in seconds.
    pub max_run_secs: u64,
    /// Its status.
    pub status: Status,
    /// Why, where the status has a reason.
    pub reason: Option<Reason>,
    /// The VM's name (`shed-<environment>-<id>`).
    pub vm_name: String,
    /// The cloud's id of the VM, once known.
    pub vm_id: Option<String>,
    /// How far the create got.
    pub create: CreateStage,
    /// The job a `starting` or `stopping` shed has (what a restart resumes).
    pub op: Option<Op>,
    /// What waits for the job's cloud operation.
    pub queued: Option<Queued>,
    /// Whether the start call of a [`Op::Start`] was answered (then only the agent is awaited).
    #[serde(default)]
    pub start_sent: bool,
    /// An `error` shed whose VM is destroyed (or never existed).
    #[serde(default)]
    pub vm_gone: bool,
    /// The last cloud read found the VM's labels to be another shed version's.
    #[serde(default)]
    pub foreign_labels: bool,
    /// When the record was made.
    pub created_at: Timestamp,
    /// When the status last changed.
    pub updated_at: Timestamp,
    /// The detail of the last failure, for the server log and admins (never shown to service clients).
    #[serde(default)]
    pub detail: Option<String>,
}

impl Shed {
    /// Sets the status and reason (and clears the op when the status is settled).
    pub fn set(&mut self, status: Status, reason: Option<Reason>, now: Timestamp) {
        debug_assert!(
            reason.is_none_or(|r| status.allowed_reasons().contains(&r)),
            "{status} cannot carry {reason:?}"
        );
        self.status = status;
        self.reason = reason;
        self.updated_at = now;
        if !matches!(status, Status::Starting | Status::Stopping) {
            self.op = None;
            self.start_sent = false;
        }
    }

    /// Sets the status and reason of a failure, with its detail.
    pub fn fail(&mut self, status: Status, reason: Reason, why: impl Into<String>, now: Timestamp) {
        self.set(status, Some(reason), now);
        self.detail = Some(why.into());
    }
}

/// An acknowledged delete whose VM may still exist: the shed is hidden, and the VM is destroyed by a
/// job and, when that fails, by the periodic pass.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeleteMarker {
    /// The shed's ID.
    pub id: String,
    /// The shed's name.
    pub name: String,
    /// The client that made it.
    pub client: String,
    /// The VM's name.
    pub vm_name: String,
    /// The VM's cloud id, when known.
    pub vm_id: Option<String>,
    /// Whether a VM may exist (the insert was sent).
    pub may_have_vm: bool,
    /// When the delete was acknowledged.
    pub acknowledged_at: Timestamp,
    /// The last destroy's failure, if it failed.
    #[serde(default)]
    pub last_error: Option<String>,
    /// The VM's labels were another shed version's at the last read: it is kept until readable.
    #[serde(default)]
    pub foreign_labels: bool,
}

impl DeleteMarker {
    /// The marker of a delete of `shed` acknowledged at `acknowledged_at`: a VM may exist unless it is
    /// destroyed or the insert was never sent.
    pub(crate) fn of(shed: &Shed, acknowledged_at: Timestamp) -> Self {
        DeleteMarker {
            id: shed.id.clone(),
            name: shed.name.clone(),
            client: shed.client.clone(),
            vm_name: shed.vm_name.clone(),
            vm_id: shed.vm_id.clone(),
            may_have_vm: !shed.vm_gone
                && (shed.vm_id.is_some() || shed.create != CreateStage::NotSent),
            acknowledged_at,
            last_error: None,
            foreign_labels: false,
        }
    }
}

/// A shed as the API shows it: nothing here names the cloud project, zone or any address.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShedView {
    /// The shed's ID.
    pub id: String,
    /// Its name.
    pub name: String,
    /// Its status.
    pub status: Status,
    /// Why (empty when there is no reason).
    pub status_reason: String,
    /// The size's name.
    pub size: String,
    /// The size's CPUs.
    pub cpus: u32,
    /// The size's memory.
    pub memory_mb: u32,
    /// The boot disk's size.
    pub disk_gb: u32,
    /// The image (alias) name.
    pub image: String,
    /// The network profile.
    pub network_profile: String,
    /// The client that made it.
    pub client: String,
    /// The run limit after each start, in seconds.
    pub max_run_secs: u64,
    /// When the record was made.
    pub created_at: Timestamp,
}

impl From<&Shed> for ShedView {
    fn from(s: &Shed) -> Self {
        ShedView {
            id: s.id.clone(),
            name: s.name.clone(),
            status: s.status,
            status_reason: s.reason.map(|r| r.as_str().to_string()).unwrap_or_default(),
            size: s.size.clone(),
            cpus: s.cpus,
            memory_mb: s.memory_mb,
            disk_gb: s.disk_gb,
            image: s.image.clone(),
            network_profile: s.network_profile.clone(),
            client: s.client.clone(),
            max_run_secs: s.max_run_secs,
            created_at: s.created_at,
        }
    }
}

/// A new shed ID: 10 of a-z and 0-9, starting with a letter (a label value and part of a VM name).
pub fn new_id() -> String {
    // A digit of base 36 is one of 0-9 and a-z.
    let rest = (0..9).map(|_| char::from_digit(fastrand::u32(..36), 36).expect("below 36"));
    std::iter::once(fastrand::lowercase()).chain(rest).collect()
}

/// Whether `s` is a machine name as orca checks it (a hostname label) of at most `max` characters
/// that starts with a letter: a shed name or an environment, which become parts of VM names and of
/// the network tag.
pub(crate) fn is_name(s: &str, max: usize) -> bool {
    orca::validate_name(s).is_ok()
        && s.len() <= max
        && s.starts_with(|c: char| c.is_ascii_lowercase())
}

/// Whether `s` is a label value as orca checks it, of at most `max` characters, that starts with a
/// letter: the names of sizes, image aliases and clients, which go into labels.
pub(crate) fn is_label_name(s: &str, max: usize) -> bool {
    orca::validate_pool(s).is_ok()
        && s.len() <= max
        && s.starts_with(|c: char| c.is_ascii_lowercase())
}

/// Checks a shed name: 1 to 40 of a-z, 0-9 and `-`, starting with a letter and not ending with `-`.
/// The server and the CLI both check with it, so a name the CLI sends is one the server accepts.
pub fn validate_shed_name(name: &str) -> Result<(), String> {
    is_name(name, 40).then_some(()).ok_or_else(|| {
        format!(
        "name: 1 to 40 of a-z, 0-9 and '-', starting with a letter and not ending with '-', got {}",
        orca::spec::quoted(name)
    )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_listed_and_serialized_as_declared() {
        use crate::backend::Effect;
        use crate::config::{FirewallMode, Role};
        use orca::words::{either, Word};
        assert_eq!(either::<FirewallMode>(), "static, auto or any");
        assert_eq!(either::<Role>(), "admin or service");
        assert_eq!(format!("[{:>8}]", Role::Admin), "[   admin]");
        fn serialized<T: Word + serde::Serialize>() {
            for v in T::WORDS {
                assert_eq!(serde_json::to_value(v).unwrap(), v.word());
            }
        }
        serialized::<Status>();
        serialized::<Reason>();
        serialized::<Effect>();
    }

    #[test]
    fn ids_are_label_values_and_names_are_checked() {
        for _ in 0..200 {
            let id = new_id();
            assert_eq!(id.len(), 10);
            assert!(orca::validate_pool(&id).is_ok(), "{id}");
            assert!(id.as_bytes()[0].is_ascii_lowercase());
        }
        assert!(validate_shed_name("dev-1").is_ok());
        for bad in ["", "1dev", "dev-", "Dev", "a_b", &"a".repeat(41)] {
            assert!(validate_shed_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn each_status_carries_exactly_its_documented_reasons() {
        use Reason::*;
        let table: &[(Status, &[&str])] = &[
            (
                Status::Starting,
                &["no_pin", "unreachable", "cloud_unreadable"],
            ),
            (Status::Running, &[]),
            (Status::Stopping, &[]),
            (
                Status::Stopped,
                &[
                    "capacity",
                    "quota",
                    "limit",
                    "run_limit",
                    "external",
                    "isolation_lost",
                    "layout",
                    "firewall",
                ],
            ),
            (
                Status::Error,
                &[
                    "capacity",
                    "quota",
                    "create_failed",
                    "host_key",
                    "layout",
                    "firewall",
                ],
            ),
        ];
        for (status, words) in table {
            let got: Vec<&str> = status
                .allowed_reasons()
                .iter()
                .map(|r| r.as_str())
                .collect();
            assert_eq!(&got, words, "{status}");
        }
        assert_eq!(
            format!("{:<9}|{:>9}", Status::Running, Reason::Quota),
            "running  |    quota"
        );
        for r in [NoPin, RunLimit, CreateFailed, HostKey] {
            let j = serde_json::to_value(r).unwrap();
            assert_eq!(j, r.as_str());
        }
    }
}
