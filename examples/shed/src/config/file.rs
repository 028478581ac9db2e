//! The configuration file as written: every block and field, each of which may be left out (a
//! block's `#[serde(default)]`), unknown fields refused (naming them).
//! Nothing here is checked beyond its type; [`FileConfig::resolve`] checks the rest.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

use super::ConfigError;

/// The configuration file as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FileConfig {
    /// Must be `remote` for this server (`detect` never picks it).
    pub default_backend: Option<String>,
    /// Where the server keeps its state (default `$XDG_STATE_HOME/shed` or `~/.local/state/shed`).
    pub state_dir: Option<PathBuf>,
    /// The API's listen address (default `127.0.0.1:8421`).
    pub listen: Option<String>,
    /// The remote backend.
    pub remote: Option<RemoteFile>,
    /// The clients that may call the API, by name (none: every call is the local admin's).
    pub clients: BTreeMap<String, ClientFile>,
    /// Network settings of the server (only `default_profile` is accepted beside `remote`).
    pub network: Option<NetworkFile>,
    /// Egress filtering (refused beside `remote` when enabled).
    pub egress: Option<EnabledFile>,
    /// Extensions (refused beside `remote` when enabled).
    pub extensions: Option<EnabledFile>,
    /// Server mounts (refused beside `remote`).
    pub mounts: Option<serde_yaml_ng::Value>,
    /// An environment file for sheds (refused beside `remote`).
    pub env_file: Option<serde_yaml_ng::Value>,
    /// The Firecracker backend (refused beside `remote`).
    pub firecracker: Option<serde_yaml_ng::Value>,
    /// The VZ backend (refused beside `remote`).
    pub vz: Option<serde_yaml_ng::Value>,
}

/// The top-level `network:` block.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NetworkFile {
    /// The network profile a create without one gets (`default` or `isolated`).
    pub default_profile: Option<String>,
    /// Extra CIDRs sheds may reach (refused beside `remote`).
    pub allow_cidrs: Vec<String>,
}

/// A block with an `enabled` flag.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct EnabledFile {
    /// Whether it is on.
    #[serde(default)]
    pub enabled: bool,
    /// Anything else it holds (not read).
    #[serde(flatten)]
    pub rest: BTreeMap<String, serde_yaml_ng::Value>,
}

/// A client of the API.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClientFile {
    /// `admin` or `service` (default `service`).
    pub role: Option<String>,
    /// The variable holding the client's bearer token (required).
    pub token_env: Option<String>,
    /// What the client may do.
    pub policy: PolicyFile,
}

/// A client's policy.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PolicyFile {
    /// The client's sheds run at least this long before the cloud stops them (`48h`).
    pub max_age: Option<serde_yaml_ng::Value>,
    /// The most CPUs a shed of this client may have.
    pub max_cpus: Option<u32>,
    /// The most memory a shed of this client may have.
    pub max_memory_mb: Option<u32>,
    /// The `image_aliases` names the client may use (empty: all).
    pub images: Vec<String>,
    /// Server mounts (refused beside `remote`).
    pub server_mounts: Vec<String>,
}

/// The `remote:` block as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RemoteFile {
    /// `gce` or `fake`.
    pub provider: Option<String>,
    /// `ssh` or `local`.
    pub transport: Option<String>,
    /// Allows `provider: fake` and `transport: local`.
    pub allow_test_drivers: bool,
    /// The environment's name (required).
    pub environment: Option<String>,
    /// Record cache and delete markers (default `<state dir>/remote`).
    pub state_dir: Option<PathBuf>,
    /// The image a create without one gets (required).
    pub default_image: Option<String>,
    /// Image names clients may ask for.
    pub image_aliases: BTreeMap<String, String>,
    /// The size a create with neither cpus nor memory gets.
    pub default_size: Option<String>,
    /// The sizes.
    pub sizes: Option<BTreeMap<String, SizeFile>>,
    /// The boot disk's default size in GB.
    pub disk_gb: Option<u32>,
    /// The server's limits.
    pub limits: Option<LimitsFile>,
    /// The run limit (10m to 2880h).
    pub max_run_duration: Option<serde_yaml_ng::Value>,
    /// The periodic pass's interval (default 1m; shed's own field, so that tests can run the pass fast).
    pub pass_interval: Option<serde_yaml_ng::Value>,
    /// Holds `shed-agent-linux-<arch>` (default `<state dir>/agent`).
    pub agent_dir: Option<PathBuf>,
    /// `incompatible`, `always` or `never`; every value behaves as `never`.
    pub agent_install: Option<String>,
    /// SSH to the VMs.
    pub ssh: Option<SshFile>,
    /// The firewall check.
    pub firewall: Option<FirewallFile>,
    /// The Compute Engine variables.
    pub gce: Option<GceFile>,
}

/// A size as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SizeFile {
    /// The machine type.
    pub machine_type: String,
    /// Its CPUs.
    pub cpus: u32,
    /// Its memory.
    pub memory_mb: u32,
    /// Its architecture (`amd64` only).
    #[serde(default)]
    pub arch: Option<String>,
}

/// The limits as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsFile {
    /// Sheds whose VMs may run at once.
    pub max_running: Option<u32>,
    /// Sheds the server keeps.
    pub max_sheds: Option<u32>,
}

/// The `ssh:` block.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SshFile {
    /// The variable holding the base64 of the OpenSSH private key.
    pub client_key_env: Option<String>,
    /// The variable holding a path to it.
    pub client_key_file_env: Option<String>,
}

/// The `firewall:` block.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FirewallFile {
    /// `static`, `auto` or `any`.
    pub mode: Option<String>,
    /// Static: the rule's sources.
    pub source_ranges: Vec<String>,
    /// Static: a variable holding them, comma-separated.
    pub source_ranges_env: Option<String>,
    /// Must be true for mode `any`, and for a static range wider than a /24.
    pub acknowledge_any: bool,
    /// Auto: at least two https services on different hosts.
    pub echo_urls: Vec<String>,
}

/// The `gce:` block: names of variables.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GceFile {
    /// Default `SHED_GCE_PROJECT`.
    pub project_env: Option<String>,
    /// Default `SHED_GCE_ZONE`.
    pub zone_env: Option<String>,
    /// Default `SHED_GCE_NETWORK`.
    pub network_env: Option<String>,
    /// Default `SHED_GCE_SUBNET`.
    pub subnet_env: Option<String>,
    /// Default `GOOGLE_CREDENTIALS_BASE64`.
    pub credentials_env: Option<String>,
    /// Default `SHED_GCE_CREDENTIALS_FILE`.
    pub credentials_file_env: Option<String>,
}

impl FileConfig {
    /// Reads the YAML text of a configuration file; unknown fields are refused, naming them.
    pub fn parse(yaml: &str) -> Result<FileConfig, ConfigError> {
        serde_yaml_ng::from_str(yaml).map_err(|e| ConfigError::one("config", e.to_string()))
    }
}
