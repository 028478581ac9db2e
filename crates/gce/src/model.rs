//! Serde models of the few Compute Engine v1 resources the driver reads, with field names from the
//! discovery document (`/compute/v1`). Every field is optional on the wire: an absent one reads as
//! its default, an unknown one is ignored, and enums (an instance's `status`, a warning's `code`) are
//! kept as the cloud's own word, so that a field Compute Engine drops or a value it adds never fails
//! a read.

use std::collections::BTreeMap;

use orca_machines::Timestamp;
use serde::{Deserialize, Deserializer};

/// `Operation`.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct Operation {
    pub name: String,
    /// `PENDING`, `RUNNING` or `DONE`.
    pub status: String,
    /// The zone's URL, for a zonal operation.
    pub zone: Option<String>,
    pub operation_type: String,
    pub error: Option<OperationErrors>,
    pub http_error_status_code: Option<u16>,
    /// The incarnation of the target resource (an instance's `id`).
    pub target_id: Option<String>,
}

impl Operation {
    pub fn is_done(&self) -> bool {
        self.status == "DONE"
    }
}

/// `Operation.error`.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(default)]
pub(crate) struct OperationErrors {
    pub errors: Vec<OperationError>,
}

/// One of `Operation.error.errors`.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(default)]
pub(crate) struct OperationError {
    pub code: String,
    pub message: String,
}

/// `Instance`.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct Instance {
    pub id: String,
    pub name: String,
    /// One of the documented statuses, or a new one (kept as it is).
    pub status: String,
    pub machine_type: String,
    pub zone: String,
    pub labels: BTreeMap<String, String>,
    pub label_fingerprint: String,
    pub network_interfaces: Vec<NetworkInterface>,
    pub disks: Vec<AttachedDisk>,
    /// RFC 3339.
    pub creation_timestamp: String,
    /// RFC 3339.
    pub last_start_timestamp: String,
    /// RFC 3339.
    pub last_stop_timestamp: String,
    /// Set only when the instance was made with a custom hostname.
    pub hostname: String,
    pub scheduling: Scheduling,
}

/// `Scheduling`.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct Scheduling {
    pub max_run_duration: Option<ApiDuration>,
    pub instance_termination_action: String,
}

/// `Duration`: `seconds` is an int64 sent as a string (`"86400"`); a number is read too.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(default)]
pub(crate) struct ApiDuration {
    #[serde(deserialize_with = "int64")]
    pub seconds: i64,
    pub nanos: i32,
}

impl ApiDuration {
    pub fn to_std(&self) -> Option<std::time::Duration> {
        let secs = u64::try_from(self.seconds).ok()?;
        let nanos = u32::try_from(self.nanos).ok()?;
        Some(std::time::Duration::new(secs, nanos.min(999_999_999)))
    }
}

fn int64<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Int {
        Number(i64),
        Text(String),
    }
    match Int::deserialize(d)? {
        Int::Number(n) => Ok(n),
        Int::Text(t) => t.trim().parse().map_err(serde::de::Error::custom),
    }
}

/// `NetworkInterface`.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct NetworkInterface {
    #[serde(rename = "networkIP")]
    pub network_ip: String,
    pub access_configs: Vec<AccessConfig>,
}

/// `AccessConfig`.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(default)]
pub(crate) struct AccessConfig {
    #[serde(rename = "natIP")]
    pub nat_ip: String,
}

/// `AttachedDisk`.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct AttachedDisk {
    pub source: String,
    pub boot: bool,
    pub auto_delete: bool,
}

/// `Disk`.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(default)]
pub(crate) struct Disk {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    /// The URLs of the instances it is attached to.
    pub users: Vec<String>,
}

/// A list answer (`InstanceList`, `FirewallList`).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct List<T> {
    #[serde(default = "Vec::new")]
    pub items: Vec<T>,
    #[serde(default)]
    pub next_page_token: Option<String>,
}

/// `InstanceAggregatedList`: items by scope (`zones/<zone>`), each with its instances or a warning
/// (`NO_RESULTS_ON_PAGE` for a zone without any on this page).
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct InstanceAggregatedList {
    pub items: BTreeMap<String, InstancesScopedList>,
    pub next_page_token: Option<String>,
    /// Scopes the answer could not read: the listing is incomplete.
    pub unreachables: Vec<String>,
}

/// `InstancesScopedList`.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(default)]
pub(crate) struct InstancesScopedList {
    pub instances: Vec<Instance>,
    pub warning: Option<Warning>,
}

/// `DiskAggregatedList`: items by scope (`zones/<zone>`), each with its disks or a warning.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct DiskAggregatedList {
    pub items: BTreeMap<String, DisksScopedList>,
    pub next_page_token: Option<String>,
    /// Scopes the answer could not read: the listing is incomplete.
    pub unreachables: Vec<String>,
}

/// `DisksScopedList`.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(default)]
pub(crate) struct DisksScopedList {
    pub disks: Vec<Disk>,
    pub warning: Option<Warning>,
}

/// `MachineTypeAggregatedList`.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct MachineTypeAggregatedList {
    pub items: BTreeMap<String, MachineTypesScopedList>,
    pub next_page_token: Option<String>,
}

/// `MachineTypesScopedList`.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct MachineTypesScopedList {
    pub machine_types: Vec<MachineType>,
}

/// The `warning` of a scoped list.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(default)]
pub(crate) struct Warning {
    /// `NO_RESULTS_ON_PAGE`, `UNREACHABLE`, ... or a code added since.
    pub code: String,
    pub message: String,
}

/// `MachineType`.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(default)]
pub(crate) struct MachineType {
    pub name: String,
    pub architecture: Option<String>,
}

/// `Firewall`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Firewall {
    pub name: String,
    #[serde(default)]
    pub network: String,
    #[serde(default = "ingress")]
    pub direction: String,
    #[serde(default)]
    pub disabled: bool,
    #[serde(default = "default_priority")]
    pub priority: i64,
    #[serde(default)]
    pub allowed: Vec<FirewallPorts>,
    #[serde(default)]
    pub denied: Vec<FirewallPorts>,
    #[serde(default)]
    pub source_ranges: Vec<String>,
    #[serde(default)]
    pub source_tags: Vec<String>,
    #[serde(default)]
    pub source_service_accounts: Vec<String>,
    #[serde(default)]
    pub destination_ranges: Vec<String>,
    #[serde(default)]
    pub target_tags: Vec<String>,
    #[serde(default)]
    pub target_service_accounts: Vec<String>,
}

/// `Firewall.allowed[]` and `Firewall.denied[]`.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct FirewallPorts {
    #[serde(rename = "IPProtocol", default)]
    pub protocol: String,
    #[serde(default)]
    pub ports: Vec<String>,
}

fn ingress() -> String {
    "INGRESS".into()
}

fn default_priority() -> i64 {
    1000
}

/// `Network`.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct Network {
    pub name: String,
    pub auto_create_subnetworks: bool,
    pub subnetworks: Vec<String>,
}

/// The last segment of a resource URL (`.../zones/z/machineTypes/e2-small` -> `e2-small`).
pub(crate) fn last_segment(s: &str) -> &str {
    s.rsplit('/').next().unwrap_or(s)
}

/// An RFC 3339 timestamp as Compute Engine writes it (`2026-12-03T04:01:37.123-08:00`), in UTC;
/// `None` when absent or unreadable.
pub(crate) fn timestamp(s: &str) -> Option<Timestamp> {
    if s.is_empty() {
        return None;
    }
    match orca_machines::chrono::DateTime::parse_from_rfc3339(s) {
        Ok(t) => Some(t.with_timezone(&orca_machines::chrono::Utc)),
        Err(e) => {
            tracing::debug!(value = s, error = %e, "an unreadable timestamp is left out");
            None
        }
    }
}
