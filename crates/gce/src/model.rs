//! Serde models of the few Compute Engine v1 resources the driver reads (fields from the discovery
//! document; everything else is ignored).

use std::collections::BTreeMap;

use serde::Deserialize;

/// `Operation`.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct Operation {
    pub name: String,
    pub status: String,
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
    pub status: String,
    pub machine_type: String,
    pub zone: String,
    pub labels: BTreeMap<String, String>,
    pub label_fingerprint: String,
    pub network_interfaces: Vec<NetworkInterface>,
    pub disks: Vec<AttachedDisk>,
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
    pub labels: BTreeMap<String, String>,
    pub users: Vec<String>,
}

/// `InstanceList` and `FirewallList`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct List<T> {
    #[serde(default = "Vec::new")]
    pub items: Vec<T>,
    #[serde(default)]
    pub next_page_token: Option<String>,
}

/// `MachineType`.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(default)]
pub(crate) struct MachineType {
    pub architecture: Option<String>,
}

/// The last segment of a resource URL (`.../zones/z/machineTypes/e2-small` -> `e2-small`).
pub(crate) fn last_segment(s: &str) -> &str {
    s.rsplit('/').next().unwrap_or(s)
}
