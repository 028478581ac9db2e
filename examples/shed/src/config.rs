//! The server's configuration: the seed's YAML (`default_backend: remote` and the `remote:` block,
//! every field and default), read in two steps. [`FileConfig::parse`] reads the file (unknown fields
//! are refused, naming them); [`FileConfig::resolve`] checks every rule and reads every `*_env`
//! variable ONCE, through a lookup function (the process environment in the server, a map in tests).
//! Every refusal names its field; all of them are reported at once ([`ConfigError`]).
//!
//! The file holds no project, zone, address or key: those come from the variables its `*_env` fields
//! name, and are mapped onto the Compute Engine driver's settings ([`Config::provider_settings`]).

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use base64::Engine as _;
use secrecy::SecretString;
use serde::Deserialize;

use crate::netaddr::{check_static_range, Cidr};

/// The configuration's problems, each naming its field (or variable).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// `(field, what is wrong)`, in the order found.
    pub problems: Vec<(String, String)>,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("invalid shed-server configuration: ")?;
        for (i, (field, why)) in self.problems.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{field}: {why}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {}

impl ConfigError {
    fn one(field: &str, why: impl Into<String>) -> Self {
        ConfigError {
            problems: vec![(field.to_string(), why.into())],
        }
    }

    /// Whether a problem names `field`.
    pub fn names(&self, field: &str) -> bool {
        self.problems.iter().any(|(f, _)| f == field)
    }
}

#[derive(Default)]
struct Problems(Vec<(String, String)>);

impl Problems {
    fn add(&mut self, field: impl Into<String>, why: impl Into<String>) {
        self.0.push((field.into(), why.into()));
    }
}

/// The configuration file as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// Must be `remote` for this server (`detect` never picks it).
    #[serde(default)]
    pub default_backend: Option<String>,
    /// Where the server keeps its state (default `$XDG_STATE_HOME/shed` or `~/.local/state/shed`).
    #[serde(default)]
    pub state_dir: Option<PathBuf>,
    /// The API's listen address (default `127.0.0.1:8421`).
    #[serde(default)]
    pub listen: Option<String>,
    /// The remote backend.
    #[serde(default)]
    pub remote: Option<RemoteFile>,
    /// The clients that may call the API, by name (none: every call is the local admin's).
    #[serde(default)]
    pub clients: BTreeMap<String, ClientFile>,
    /// Network settings of the server (only `default_profile` is accepted beside `remote`).
    #[serde(default)]
    pub network: Option<NetworkFile>,
    /// Egress filtering (refused beside `remote` when enabled).
    #[serde(default)]
    pub egress: Option<EnabledFile>,
    /// Extensions (refused beside `remote` when enabled).
    #[serde(default)]
    pub extensions: Option<EnabledFile>,
    /// Server mounts (refused beside `remote`).
    #[serde(default)]
    pub mounts: Option<serde_yaml_ng::Value>,
    /// An environment file for sheds (refused beside `remote`).
    #[serde(default)]
    pub env_file: Option<serde_yaml_ng::Value>,
    /// The Firecracker backend (refused beside `remote`).
    #[serde(default)]
    pub firecracker: Option<serde_yaml_ng::Value>,
    /// The VZ backend (refused beside `remote`).
    #[serde(default)]
    pub vz: Option<serde_yaml_ng::Value>,
}

/// The top-level `network:` block.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkFile {
    /// The network profile a create without one gets (`default` or `isolated`).
    #[serde(default)]
    pub default_profile: Option<String>,
    /// Extra CIDRs sheds may reach (refused beside `remote`).
    #[serde(default)]
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
#[serde(deny_unknown_fields)]
pub struct ClientFile {
    /// `admin` or `service` (default `service`).
    #[serde(default)]
    pub role: Option<String>,
    /// The variable holding the client's bearer token (required).
    #[serde(default)]
    pub token_env: Option<String>,
    /// What the client may do.
    #[serde(default)]
    pub policy: PolicyFile,
}

/// A client's policy.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyFile {
    /// The client's sheds run at least this long before the cloud stops them (`48h`).
    #[serde(default)]
    pub max_age: Option<serde_yaml_ng::Value>,
    /// The most CPUs a shed of this client may have.
    #[serde(default)]
    pub max_cpus: Option<u32>,
    /// The most memory a shed of this client may have.
    #[serde(default)]
    pub max_memory_mb: Option<u32>,
    /// The `image_aliases` names the client may use (empty: all).
    #[serde(default)]
    pub images: Vec<String>,
    /// Server mounts (refused beside `remote`).
    #[serde(default)]
    pub server_mounts: Vec<String>,
}

/// The `remote:` block as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemoteFile {
    /// `gce` or `fake`.
    #[serde(default)]
    pub provider: Option<String>,
    /// `ssh` or `local`.
    #[serde(default)]
    pub transport: Option<String>,
    /// Allows `provider: fake` and `transport: local`.
    #[serde(default)]
    pub allow_test_drivers: bool,
    /// The environment's name (required).
    #[serde(default)]
    pub environment: Option<String>,
    /// Record cache and delete markers (default `<state dir>/remote`).
    #[serde(default)]
    pub state_dir: Option<PathBuf>,
    /// The image a create without one gets (required).
    #[serde(default)]
    pub default_image: Option<String>,
    /// Image names clients may ask for.
    #[serde(default)]
    pub image_aliases: BTreeMap<String, String>,
    /// The size a create with neither cpus nor memory gets.
    #[serde(default)]
    pub default_size: Option<String>,
    /// The sizes.
    #[serde(default)]
    pub sizes: Option<BTreeMap<String, SizeFile>>,
    /// The boot disk's default size in GB.
    #[serde(default)]
    pub disk_gb: Option<u32>,
    /// The server's limits.
    #[serde(default)]
    pub limits: Option<LimitsFile>,
    /// The run limit (10m to 2880h).
    #[serde(default)]
    pub max_run_duration: Option<serde_yaml_ng::Value>,
    /// The periodic pass's interval (default 1m; not in the seed: it lets tests run the pass fast).
    #[serde(default)]
    pub pass_interval: Option<serde_yaml_ng::Value>,
    /// Holds `shed-agent-linux-<arch>` (default `<state dir>/agent`).
    #[serde(default)]
    pub agent_dir: Option<PathBuf>,
    /// `incompatible`, `always` or `never`; every value behaves as `never`.
    #[serde(default)]
    pub agent_install: Option<String>,
    /// SSH to the VMs.
    #[serde(default)]
    pub ssh: Option<SshFile>,
    /// The firewall check.
    #[serde(default)]
    pub firewall: Option<FirewallFile>,
    /// The Compute Engine variables.
    #[serde(default)]
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
#[serde(deny_unknown_fields)]
pub struct LimitsFile {
    /// Sheds whose VMs may run at once.
    #[serde(default)]
    pub max_running: Option<u32>,
    /// Sheds the server keeps.
    #[serde(default)]
    pub max_sheds: Option<u32>,
}

/// The `ssh:` block.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SshFile {
    /// The variable holding the base64 of the OpenSSH private key.
    #[serde(default)]
    pub client_key_env: Option<String>,
    /// The variable holding a path to it.
    #[serde(default)]
    pub client_key_file_env: Option<String>,
}

/// The `firewall:` block.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FirewallFile {
    /// `static`, `auto` or `any`.
    #[serde(default)]
    pub mode: Option<String>,
    /// Static: the rule's sources.
    #[serde(default)]
    pub source_ranges: Vec<String>,
    /// Static: a variable holding them, comma-separated.
    #[serde(default)]
    pub source_ranges_env: Option<String>,
    /// Must be true for mode `any`, and for a static range wider than a /24.
    #[serde(default)]
    pub acknowledge_any: bool,
    /// Auto: at least two https services on different hosts.
    #[serde(default)]
    pub echo_urls: Vec<String>,
}

/// The `gce:` block: names of variables.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GceFile {
    /// Default `SHED_GCE_PROJECT`.
    #[serde(default)]
    pub project_env: Option<String>,
    /// Default `SHED_GCE_ZONE`.
    #[serde(default)]
    pub zone_env: Option<String>,
    /// Default `SHED_GCE_NETWORK`.
    #[serde(default)]
    pub network_env: Option<String>,
    /// Default `SHED_GCE_SUBNET`.
    #[serde(default)]
    pub subnet_env: Option<String>,
    /// Default `GOOGLE_CREDENTIALS_BASE64`.
    #[serde(default)]
    pub credentials_env: Option<String>,
    /// Default `SHED_GCE_CREDENTIALS_FILE`.
    #[serde(default)]
    pub credentials_file_env: Option<String>,
}

/// Which cloud the server runs its VMs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderKind {
    /// Compute Engine (orca's `gce` driver).
    Gce,
    /// orca's in-memory cloud (`fake`), optionally persisted with `ORCA_FAKE_STATE`.
    Fake,
}

impl ProviderKind {
    /// orca's kind name.
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::Gce => "gce",
            ProviderKind::Fake => "fake",
        }
    }
}

/// How the server reaches a VM's agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// Over SSH: the shipped probe reads the VM's SSH banner.
    Ssh,
    /// In-process: every VM's agent answers at once (a test driver).
    Local,
}

/// The firewall check's mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FirewallMode {
    /// The rule's sources must equal the configured list; the server never changes the rule.
    Static,
    /// The rule's sources must be the server's own public address; the server patches them.
    Auto,
    /// Sources are not compared.
    Any,
}

impl FirewallMode {
    /// The configuration's word.
    pub fn as_str(self) -> &'static str {
        match self {
            FirewallMode::Static => "static",
            FirewallMode::Auto => "auto",
            FirewallMode::Any => "any",
        }
    }
}

/// The firewall settings, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FirewallConfig {
    /// The mode.
    pub mode: FirewallMode,
    /// Static mode: the expected sources, normalised.
    pub source_ranges: Vec<Cidr>,
    /// Whether `acknowledge_any` is set.
    pub acknowledge_any: bool,
    /// Auto mode: the echo services.
    pub echo_urls: Vec<String>,
}

/// A named size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Size {
    /// Its name.
    pub name: String,
    /// The machine type.
    pub machine_type: String,
    /// CPUs.
    pub cpus: u32,
    /// Memory.
    pub memory_mb: u32,
}

/// A client's role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// May see every shed and is told the firewall's details.
    Admin,
    /// Sees its own sheds; is never told the project, zone or any address.
    Service,
}

/// A client, resolved.
#[derive(Clone)]
pub struct Client {
    /// Its name.
    pub name: String,
    /// Its role.
    pub role: Role,
    /// Its bearer token.
    pub token: SecretString,
    /// Its sheds run at least this long.
    pub max_age: Option<Duration>,
    /// The most CPUs of its sheds.
    pub max_cpus: Option<u32>,
    /// The most memory of its sheds.
    pub max_memory_mb: Option<u32>,
    /// The image names it may use (empty: all).
    pub images: Vec<String>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("name", &self.name)
            .field("role", &self.role)
            .field("token", &"<redacted>")
            .field("max_age", &self.max_age)
            .field("max_cpus", &self.max_cpus)
            .field("max_memory_mb", &self.max_memory_mb)
            .field("images", &self.images)
            .finish()
    }
}

/// The server's limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Sheds whose VMs may run at once.
    pub max_running: u32,
    /// Sheds the server keeps.
    pub max_sheds: u32,
}

/// The resolved configuration: every rule checked and every variable read.
#[derive(Clone)]
pub struct Config {
    /// The API's listen address.
    pub listen: SocketAddr,
    /// The cloud.
    pub provider: ProviderKind,
    /// How agents are reached.
    pub transport: Transport,
    /// The environment's name.
    pub environment: String,
    /// Record cache and delete markers.
    pub state_dir: PathBuf,
    /// The default image, as the cloud names it.
    pub default_image: String,
    /// Image names clients may ask for.
    pub image_aliases: BTreeMap<String, String>,
    /// The default size's name.
    pub default_size: String,
    /// The sizes, by name.
    pub sizes: BTreeMap<String, Size>,
    /// The default boot disk size.
    pub disk_gb: u32,
    /// The limits.
    pub limits: Limits,
    /// The run limit.
    pub max_run_duration: Duration,
    /// The periodic pass's interval.
    pub pass_interval: Duration,
    /// Where the agent binaries would be.
    pub agent_dir: PathBuf,
    /// The `agent_install` value (every value behaves as `never`).
    pub agent_install: String,
    /// The firewall check.
    pub firewall: FirewallConfig,
    /// The clients by name (empty: every call is the local admin's).
    pub clients: BTreeMap<String, Client>,
    /// The network profile a create without one gets.
    pub default_profile: String,
    /// The zone VMs are made in.
    pub location: String,
    /// The SSH client key (transport `ssh`), read at start-up.
    pub ssh_key: Option<SecretString>,
    /// The settings the provider is made from (`orca::of_with`): the driver's own keys.
    pub provider_settings: orca::Settings,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("listen", &self.listen)
            .field("provider", &self.provider)
            .field("transport", &self.transport)
            .field("environment", &self.environment)
            .field("state_dir", &self.state_dir)
            .field("default_size", &self.default_size)
            .field("limits", &self.limits)
            .field("firewall_mode", &self.firewall.mode)
            .field("clients", &self.clients.keys().collect::<Vec<_>>())
            .field("ssh_key", &self.ssh_key.as_ref().map(|_| "<redacted>"))
            .field("provider_settings", &self.provider_settings)
            .finish_non_exhaustive()
    }
}

impl Config {
    /// The network tag every VM carries and the rule targets: `shed-<environment>`.
    pub fn network_tag(&self) -> String {
        format!("shed-{}", self.environment)
    }

    /// The firewall rule's name: `shed-<environment>-ssh`.
    pub fn rule_name(&self) -> String {
        format!("shed-{}-ssh", self.environment)
    }

    /// Whether the isolated profile is available (not with `firewall.mode: any` or `acknowledge_any`).
    pub fn isolated_available(&self) -> bool {
        self.firewall.mode != FirewallMode::Any && !self.firewall.acknowledge_any
    }

    /// Whether any client is a service client.
    pub fn has_service_clients(&self) -> bool {
        self.clients.values().any(|c| c.role == Role::Service)
    }

    /// A configuration for tests and the in-memory provider: environment `env`, provider `fake`,
    /// transport `local`, sizes of the in-memory catalogue, static firewall sources `203.0.113.7/32`,
    /// state in `state_dir`, no clients (every call is the local admin's).
    pub fn for_tests(env: &str, state_dir: impl Into<PathBuf>) -> Config {
        let yaml = format!(
            "default_backend: remote\nremote:\n  provider: fake\n  transport: local\n  allow_test_drivers: true\n  environment: {env}\n  default_image: img-1\n  image_aliases: {{cloud: img-cloud}}\n  firewall:\n    source_ranges: [203.0.113.7/32]\n"
        );
        let mut c = FileConfig::parse(&yaml)
            .and_then(|f| f.resolve(&|_: &str| None))
            .expect("the test configuration is valid");
        c.state_dir = state_dir.into();
        c
    }
}

const DEFAULT_LISTEN: &str = "127.0.0.1:8421";

fn default_sizes(kind: ProviderKind) -> BTreeMap<String, Size> {
    let (small, large) = match kind {
        ProviderKind::Gce => ("e2-standard-2", "e2-standard-8"),
        ProviderKind::Fake => ("amd64-small", "amd64-large"),
    };
    [("standard", small, 2, 8192), ("large", large, 8, 32768)]
        .into_iter()
        .map(|(n, t, c, m)| {
            (
                n.to_string(),
                Size {
                    name: n.into(),
                    machine_type: t.into(),
                    cpus: c,
                    memory_mb: m,
                },
            )
        })
        .collect()
}

fn is_label_safe(s: &str, max: usize) -> bool {
    !s.is_empty()
        && s.len() <= max
        && s.as_bytes()[0].is_ascii_lowercase()
        && !s.ends_with(['-', '_'])
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

fn yaml_duration(v: &serde_yaml_ng::Value) -> Option<Duration> {
    match v {
        serde_yaml_ng::Value::String(s) => orca::settings::parse_duration(s),
        serde_yaml_ng::Value::Number(n) => n.as_u64().map(Duration::from_secs),
        _ => None,
    }
}

const MIN_RUN: Duration = Duration::from_secs(600);
const MAX_RUN: Duration = Duration::from_secs(2880 * 3600);

/// The shortest and longest disk a shed may have, in GB.
pub const DISK_GB_RANGE: (u32, u32) = (10, 500);

impl FileConfig {
    /// Reads the YAML text of a configuration file; unknown fields are refused, naming them.
    pub fn parse(yaml: &str) -> Result<FileConfig, ConfigError> {
        serde_yaml_ng::from_str(yaml).map_err(|e| ConfigError::one("config", e.to_string()))
    }

    /// Checks every rule and reads every `*_env` variable through `env` (once each): the server's
    /// configuration, or every problem found.
    pub fn resolve(&self, env: &dyn Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let mut p = Problems::default();
        let var = |name: &str| env(name).filter(|v| !v.trim().is_empty());

        // The backend and the blocks that cannot stand beside it.
        let backend = self.default_backend.as_deref().unwrap_or("");
        if backend != "remote" {
            if self.remote.is_some() {
                p.add(
                    "remote",
                    format!(
                        "a remote: block is refused under default_backend {:?}; this server runs the remote backend only with default_backend: remote",
                        backend
                    ),
                );
            } else {
                p.add(
                    "default_backend",
                    "this server runs the remote backend only: set default_backend: remote and a remote: block",
                );
            }
            return Err(ConfigError { problems: p.0 });
        }
        let Some(r) = &self.remote else {
            return Err(ConfigError::one(
                "remote",
                "default_backend: remote needs a remote: block (with environment and default_image)",
            ));
        };
        if self.firecracker.is_some() {
            p.add("firecracker", "refused with default_backend: remote");
        }
        if self.vz.is_some() {
            p.add("vz", "refused with default_backend: remote");
        }
        if self.env_file.is_some() {
            p.add("env_file", "refused with default_backend: remote");
        }
        if self.mounts.as_ref().is_some_and(|m| !m.is_null()) {
            p.add(
                "mounts",
                "refused with default_backend: remote (a remote shed has no server mounts)",
            );
        }
        if self.egress.as_ref().is_some_and(|e| e.enabled) {
            p.add(
                "egress.enabled",
                "refused with default_backend: remote (egress profiles do not exist there)",
            );
        }
        if self.extensions.as_ref().is_some_and(|e| e.enabled) {
            p.add("extensions.enabled", "refused with default_backend: remote");
        }
        let network = self.network.clone().unwrap_or_default();
        if !network.allow_cidrs.is_empty() {
            p.add(
                "network.allow_cidrs",
                "refused with default_backend: remote (outbound traffic is not filtered)",
            );
        }
        let default_profile = network
            .default_profile
            .clone()
            .unwrap_or_else(|| "default".into());
        if !["default", "isolated"].contains(&default_profile.as_str()) {
            p.add(
                "network.default_profile",
                format!("default or isolated, got {default_profile:?}"),
            );
        }

        // Provider and transport.
        let provider = match r.provider.as_deref().unwrap_or("gce") {
            "gce" => ProviderKind::Gce,
            "fake" => {
                if !r.allow_test_drivers {
                    p.add(
                        "remote.provider",
                        "fake needs remote.allow_test_drivers: true",
                    );
                }
                ProviderKind::Fake
            }
            other => {
                p.add("remote.provider", format!("gce or fake, got {other:?}"));
                ProviderKind::Gce
            }
        };
        let transport = match r.transport.as_deref().unwrap_or("ssh") {
            "ssh" => Transport::Ssh,
            "local" => {
                if !r.allow_test_drivers {
                    p.add(
                        "remote.transport",
                        "local needs remote.allow_test_drivers: true",
                    );
                }
                Transport::Local
            }
            other => {
                p.add("remote.transport", format!("ssh or local, got {other:?}"));
                Transport::Ssh
            }
        };

        // The environment.
        let environment = r.environment.clone().unwrap_or_default();
        let env_ok = !environment.is_empty()
            && environment.len() <= 20
            && environment.as_bytes()[0].is_ascii_lowercase()
            && !environment.ends_with('-')
            && environment
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if r.environment.is_none() {
            p.add("remote.environment", "required");
        } else if !env_ok {
            p.add(
                "remote.environment",
                format!("1-20 of a-z, 0-9 and -, starting with a letter (and not ending with -, as it is part of a network tag), got {environment:?}"),
            );
        }

        // Images.
        let default_image = r.default_image.clone().unwrap_or_default();
        let image_ok = |s: &str| {
            !s.is_empty()
                && s.len() <= 1024
                && !s.chars().any(|c| c.is_whitespace() || c.is_control())
        };
        if r.default_image.is_none() {
            p.add("remote.default_image", "required");
        } else if !image_ok(&default_image) {
            p.add(
                "remote.default_image",
                "an image name or path without spaces",
            );
        }
        for (alias, image) in &r.image_aliases {
            if !is_label_safe(alias, 40) {
                p.add(
                    format!("remote.image_aliases.{alias}"),
                    "an alias is 1 to 40 of a-z, 0-9, '-' and '_', starting with a letter",
                );
            }
            if !image_ok(image) {
                p.add(
                    format!("remote.image_aliases.{alias}"),
                    "an image name or path without spaces",
                );
            }
        }

        // Sizes.
        let sizes = match &r.sizes {
            None => default_sizes(provider),
            Some(s) if s.is_empty() => {
                p.add("remote.sizes", "at least one size");
                BTreeMap::new()
            }
            Some(s) => {
                let mut out = BTreeMap::new();
                for (name, sz) in s {
                    let field = format!("remote.sizes.{name}");
                    if !is_label_safe(name, 40) {
                        p.add(
                            &field,
                            "a size name is 1 to 40 of a-z, 0-9, '-' and '_', starting with a letter",
                        );
                    }
                    if orca::spec::validate_token("machine_type", &sz.machine_type).is_err() {
                        p.add(
                            format!("{field}.machine_type"),
                            "1 to 80 of letters, digits, '.', '_' and '-'",
                        );
                    }
                    if sz.cpus == 0 {
                        p.add(format!("{field}.cpus"), "at least 1");
                    }
                    if sz.memory_mb == 0 {
                        p.add(format!("{field}.memory_mb"), "at least 1");
                    }
                    match sz.arch.as_deref() {
                        None | Some("amd64") => {}
                        Some(a) => p.add(
                            format!("{field}.arch"),
                            format!("only amd64 images are supported, got {a:?}"),
                        ),
                    }
                    out.insert(
                        name.clone(),
                        Size {
                            name: name.clone(),
                            machine_type: sz.machine_type.clone(),
                            cpus: sz.cpus,
                            memory_mb: sz.memory_mb,
                        },
                    );
                }
                out
            }
        };
        let default_size = r.default_size.clone().unwrap_or_else(|| "standard".into());
        if !sizes.is_empty() && !sizes.contains_key(&default_size) {
            p.add(
                "remote.default_size",
                format!(
                    "{default_size:?} is not one of the sizes ({})",
                    sizes.keys().cloned().collect::<Vec<_>>().join(", ")
                ),
            );
        }
        let disk_gb = r.disk_gb.unwrap_or(50);
        if !(DISK_GB_RANGE.0..=DISK_GB_RANGE.1).contains(&disk_gb) {
            p.add("remote.disk_gb", "10 to 500");
        }
        let limits_file = r.limits.clone().unwrap_or_default();
        let limits = Limits {
            max_running: limits_file.max_running.unwrap_or(2),
            max_sheds: limits_file.max_sheds.unwrap_or(8),
        };
        if limits.max_running == 0 {
            p.add("remote.limits.max_running", "at least 1");
        }
        if limits.max_sheds == 0 {
            p.add("remote.limits.max_sheds", "at least 1");
        }
        let max_run_duration = match &r.max_run_duration {
            None => Duration::from_secs(24 * 3600),
            Some(v) => match yaml_duration(v) {
                Some(d) if (MIN_RUN..=MAX_RUN).contains(&d) => d,
                _ => {
                    p.add(
                        "remote.max_run_duration",
                        "a duration from 10m to 2880h (like 24h)",
                    );
                    Duration::from_secs(24 * 3600)
                }
            },
        };
        let pass_interval = match &r.pass_interval {
            None => Duration::from_secs(60),
            Some(v) => match yaml_duration(v) {
                Some(d) if d >= Duration::from_secs(1) && d <= Duration::from_secs(3600) => d,
                _ => {
                    p.add("remote.pass_interval", "a duration from 1s to 1h");
                    Duration::from_secs(60)
                }
            },
        };
        let agent_install = r
            .agent_install
            .clone()
            .unwrap_or_else(|| "incompatible".into());
        if !["incompatible", "always", "never"].contains(&agent_install.as_str()) {
            p.add(
                "remote.agent_install",
                format!("incompatible, always or never, got {agent_install:?}"),
            );
        }

        // State.
        let base_state = self.state_dir.clone().unwrap_or_else(|| {
            var("XDG_STATE_HOME")
                .map(PathBuf::from)
                .or_else(|| var("HOME").map(|h| PathBuf::from(h).join(".local/state")))
                .unwrap_or_else(|| PathBuf::from("."))
                .join("shed")
        });
        let state_dir = r
            .state_dir
            .clone()
            .unwrap_or_else(|| base_state.join("remote"));
        let agent_dir = r
            .agent_dir
            .clone()
            .unwrap_or_else(|| base_state.join("agent"));
        let listen_text = self.listen.clone().unwrap_or_else(|| DEFAULT_LISTEN.into());
        let listen: SocketAddr = listen_text.parse().unwrap_or_else(|_| {
            p.add(
                "listen",
                format!("an address and port like 127.0.0.1:8421, got {listen_text:?}"),
            );
            DEFAULT_LISTEN.parse().expect("valid")
        });
        // Without clients every caller is the local admin (no token is asked for): such a server
        // must not be reachable from another host.
        if self.clients.is_empty() && !listen.ip().to_canonical().is_loopback() {
            p.add(
                "listen",
                format!(
                    "{listen} is not a loopback address, and without clients every caller is the local admin (it could create VMs and read the server log): listen on 127.0.0.1 or [::1], or configure clients with tokens"
                ),
            );
        }

        // Clients.
        let mut clients = BTreeMap::new();
        for (name, c) in &self.clients {
            let field = format!("clients.{name}");
            if !is_label_safe(name, 40) {
                p.add(
                    &field,
                    "a client name is 1 to 40 of a-z, 0-9, '-' and '_', starting with a letter",
                );
            }
            let role = match c.role.as_deref().unwrap_or("service") {
                "admin" => Role::Admin,
                "service" => Role::Service,
                other => {
                    p.add(
                        format!("{field}.role"),
                        format!("admin or service, got {other:?}"),
                    );
                    Role::Service
                }
            };
            let token = match &c.token_env {
                None => {
                    p.add(format!("{field}.token_env"), "required");
                    None
                }
                Some(v) => match var(v) {
                    Some(t) => Some(SecretString::from(t.trim().to_string())),
                    None => {
                        p.add(
                            v.clone(),
                            format!("the variable {field}.token_env names is not set"),
                        );
                        None
                    }
                },
            };
            let max_age = match &c.policy.max_age {
                None => None,
                Some(v) => match yaml_duration(v) {
                    Some(d) if d <= MAX_RUN => Some(d),
                    _ => {
                        p.add(
                            format!("{field}.policy.max_age"),
                            "a duration up to 2880h (like 48h)",
                        );
                        None
                    }
                },
            };
            if !c.policy.server_mounts.is_empty() {
                p.add(
                    format!("{field}.policy.server_mounts"),
                    "refused with default_backend: remote (a remote shed has no server mounts)",
                );
            }
            for img in &c.policy.images {
                if !r.image_aliases.contains_key(img) {
                    p.add(
                        format!("{field}.policy.images"),
                        format!("{img:?} is not an image_aliases name"),
                    );
                }
            }
            if let Some(token) = token {
                clients.insert(
                    name.clone(),
                    Client {
                        name: name.clone(),
                        role,
                        token,
                        max_age,
                        max_cpus: c.policy.max_cpus,
                        max_memory_mb: c.policy.max_memory_mb,
                        images: c.policy.images.clone(),
                    },
                );
            }
        }
        let has_service = self
            .clients
            .values()
            .any(|c| c.role.as_deref().unwrap_or("service") == "service");

        // The firewall.
        let fw = r.firewall.clone().unwrap_or_default();
        let mode = match fw.mode.as_deref().unwrap_or("static") {
            "static" => FirewallMode::Static,
            "auto" => FirewallMode::Auto,
            "any" => FirewallMode::Any,
            other => {
                p.add(
                    "remote.firewall.mode",
                    format!("static, auto or any, got {other:?}"),
                );
                FirewallMode::Static
            }
        };
        let mut source_ranges = Vec::new();
        match mode {
            FirewallMode::Static => {
                let (field, list): (String, Vec<String>) = match (
                    &fw.source_ranges[..],
                    &fw.source_ranges_env,
                ) {
                    ([_, ..], Some(_)) => {
                        p.add(
                            "remote.firewall.source_ranges",
                            "set exactly one of source_ranges and source_ranges_env",
                        );
                        (String::new(), Vec::new())
                    }
                    ([_, ..], None) => (
                        "remote.firewall.source_ranges".into(),
                        fw.source_ranges.clone(),
                    ),
                    ([], name) => {
                        let name = name
                            .clone()
                            .unwrap_or_else(|| "SHED_REMOTE_SOURCE_RANGES".into());
                        match var(&name) {
                            Some(v) => (
                                name.clone(),
                                v.split(',')
                                    .map(|s| s.trim().to_string())
                                    .filter(|s| !s.is_empty())
                                    .collect(),
                            ),
                            None => {
                                p.add(
                                        name.clone(),
                                        "not set: static mode needs remote.firewall.source_ranges or this variable (comma-separated IPv4 CIDRs)",
                                    );
                                (String::new(), Vec::new())
                            }
                        }
                    }
                };
                if !field.is_empty() {
                    if list.is_empty() {
                        p.add(&field, "the list is empty");
                    }
                    for s in &list {
                        match check_static_range(s, fw.acknowledge_any) {
                            Ok(c) => source_ranges.push(c),
                            Err(e) => p.add(&field, e),
                        }
                    }
                }
                source_ranges.sort();
                source_ranges.dedup();
            }
            FirewallMode::Auto | FirewallMode::Any => {
                if !fw.source_ranges.is_empty() || fw.source_ranges_env.is_some() {
                    p.add(
                        "remote.firewall.source_ranges",
                        format!(
                            "only static mode uses source ranges (mode {})",
                            mode.as_str()
                        ),
                    );
                }
            }
        }
        if mode == FirewallMode::Auto {
            if fw.echo_urls.len() < 2 {
                p.add(
                    "remote.firewall.echo_urls",
                    "auto mode needs at least two https services on different hosts",
                );
            }
            let mut hosts: Vec<String> = Vec::new();
            for u in &fw.echo_urls {
                match check_echo_url(u) {
                    Ok(host) => {
                        if hosts.contains(&host) {
                            p.add(
                                "remote.firewall.echo_urls",
                                format!("two entries on the host {host}: each service must be on a different host"),
                            );
                        }
                        hosts.push(host);
                    }
                    Err(e) => p.add("remote.firewall.echo_urls", e),
                }
            }
        } else if !fw.echo_urls.is_empty() {
            p.add(
                "remote.firewall.echo_urls",
                format!("only auto mode uses echo services (mode {})", mode.as_str()),
            );
        }
        if mode == FirewallMode::Any && !fw.acknowledge_any {
            p.add(
                "remote.firewall.acknowledge_any",
                "must be true for mode: any",
            );
        }
        let any_like = mode == FirewallMode::Any || fw.acknowledge_any;
        if any_like && has_service {
            p.add(
                "remote.firewall.mode",
                "firewall.mode: any (or acknowledge_any: true) is refused beside service clients",
            );
        }
        if any_like && default_profile == "isolated" {
            p.add(
                "remote.firewall.mode",
                "firewall.mode: any (or acknowledge_any: true) is refused beside an isolated default profile",
            );
        }

        // SSH.
        let mut ssh_key = None;
        if transport == Transport::Ssh {
            let ssh = r.ssh.clone().unwrap_or_default();
            let key_env = ssh
                .client_key_env
                .unwrap_or_else(|| "SHED_REMOTE_SSH_KEY".into());
            let file_env = ssh
                .client_key_file_env
                .unwrap_or_else(|| "SHED_REMOTE_SSH_KEY_FILE".into());
            match (var(&key_env), var(&file_env)) {
                (Some(_), Some(_)) => p.add(
                    key_env.clone(),
                    format!("set exactly one of {key_env} and {file_env}"),
                ),
                (None, None) => p.add(
                    key_env.clone(),
                    format!("not set: set {key_env} (base64 of the OpenSSH private key) or {file_env} (a path to it)"),
                ),
                (Some(b64), None) => {
                    match base64::engine::general_purpose::STANDARD.decode(b64.trim()) {
                        Ok(bytes) if looks_like_key(&bytes) => {
                            ssh_key = Some(SecretString::from(
                                String::from_utf8_lossy(&bytes).into_owned(),
                            ));
                        }
                        _ => p.add(
                            key_env.clone(),
                            "not the base64 of an OpenSSH private key",
                        ),
                    }
                }
                (None, Some(path)) => match std::fs::read(path.trim()) {
                    Ok(bytes) if looks_like_key(&bytes) => {
                        ssh_key = Some(SecretString::from(
                            String::from_utf8_lossy(&bytes).into_owned(),
                        ));
                    }
                    Ok(_) => p.add(
                        file_env.clone(),
                        "the file is not an OpenSSH private key",
                    ),
                    Err(e) => p.add(file_env.clone(), format!("cannot read the file: {e}")),
                },
            }
        }

        // The cloud.
        let mut provider_settings = orca::Settings::new();
        let mut location = "zone-a".to_string();
        match provider {
            ProviderKind::Fake => {
                if let Some(path) = var(orca::FAKE_STATE_ENV) {
                    provider_settings.insert(orca::FAKE_STATE_ENV, path);
                }
            }
            ProviderKind::Gce => {
                let g = r.gce.clone().unwrap_or_default();
                let names = [
                    (g.project_env, "SHED_GCE_PROJECT", "ORCA_GCE_PROJECT"),
                    (g.zone_env, "SHED_GCE_ZONE", "ORCA_GCE_ZONE"),
                    (g.network_env, "SHED_GCE_NETWORK", "ORCA_GCE_NETWORK"),
                    (g.subnet_env, "SHED_GCE_SUBNET", "ORCA_GCE_SUBNET"),
                ];
                let mut read = BTreeMap::new();
                for (configured, default, key) in names {
                    let name = configured.unwrap_or_else(|| default.to_string());
                    match var(&name) {
                        Some(v) => {
                            read.insert(key, v.trim().to_string());
                        }
                        None => p.add(name.clone(), "not set (required for provider gce)"),
                    }
                }
                let cred = g
                    .credentials_env
                    .unwrap_or_else(|| "GOOGLE_CREDENTIALS_BASE64".into());
                let cred_file = g
                    .credentials_file_env
                    .unwrap_or_else(|| "SHED_GCE_CREDENTIALS_FILE".into());
                match (var(&cred), var(&cred_file)) {
                    (Some(_), Some(_)) => p.add(
                        cred.clone(),
                        format!("set exactly one of {cred} and {cred_file}"),
                    ),
                    (None, None) => p.add(
                        cred.clone(),
                        format!("not set: set {cred} (base64 of the service account JSON key) or {cred_file} (a path to it)"),
                    ),
                    (Some(v), None) => {
                        read.insert("ORCA_GCE_CREDENTIALS_BASE64", v.trim().to_string());
                    }
                    (None, Some(v)) => {
                        read.insert("ORCA_GCE_CREDENTIALS_FILE", v.trim().to_string());
                    }
                }
                if let Some(project) = read.get("ORCA_GCE_PROJECT").cloned() {
                    for key in ["ORCA_GCE_NETWORK", "ORCA_GCE_SUBNET"] {
                        if let Some(v) = read.get(key) {
                            if let Some(other) = other_project(v, &project) {
                                p.add(
                                    if key == "ORCA_GCE_NETWORK" {
                                        "gce.network_env"
                                    } else {
                                        "gce.subnet_env"
                                    },
                                    format!("the network is in another project ({other}, a Shared VPC): the firewall check reads one project's rules, so the network and subnet must be in the sheds' project"),
                                );
                            }
                        }
                    }
                }
                if let Some(z) = read.get("ORCA_GCE_ZONE") {
                    location = z.clone();
                }
                provider_settings.extend(read);
            }
        }

        if !p.0.is_empty() {
            return Err(ConfigError { problems: p.0 });
        }
        Ok(Config {
            listen,
            provider,
            transport,
            environment,
            state_dir,
            default_image,
            image_aliases: r.image_aliases.clone(),
            default_size,
            sizes,
            disk_gb,
            limits,
            max_run_duration,
            pass_interval,
            agent_dir,
            agent_install,
            firewall: FirewallConfig {
                mode,
                source_ranges,
                acknowledge_any: fw.acknowledge_any,
                echo_urls: fw.echo_urls.clone(),
            },
            clients,
            default_profile,
            location,
            ssh_key,
            provider_settings,
        })
    }
}

fn looks_like_key(bytes: &[u8]) -> bool {
    let text = String::from_utf8_lossy(bytes);
    text.contains("-----BEGIN") && text.contains("PRIVATE KEY-----")
}

/// The project a network or subnet path names when it is not `project` (`projects/<p>/...`).
fn other_project(value: &str, project: &str) -> Option<String> {
    let parts: Vec<&str> = value.split('/').collect();
    parts
        .windows(2)
        .find(|w| w[0] == "projects")
        .map(|w| w[1].to_string())
        .filter(|p| p != project)
}

/// Checks an echo service URL: https, a host name in ASCII (punycode for others), no user or
/// password. Answers its host name, lower-case.
pub fn check_echo_url(u: &str) -> Result<String, String> {
    if !u.is_ascii() {
        return Err(format!(
            "{u:?}: write a host name outside ASCII in its punycode form, so that it has one spelling"
        ));
    }
    let url = url::Url::parse(u).map_err(|e| format!("{u:?} is not a URL: {e}"))?;
    if url.scheme() != "https" {
        return Err(format!("{u:?} is not https"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(format!("{u:?} holds a user or password"));
    }
    let host = url
        .host_str()
        .filter(|h| !h.is_empty())
        .ok_or_else(|| format!("{u:?} has no host"))?;
    Ok(host.trim_end_matches('.').to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn other_projects_are_found_in_paths() {
        assert_eq!(other_project("shed-net", "p1"), None);
        assert_eq!(
            other_project("projects/p1/global/networks/shed-net", "p1"),
            None
        );
        assert_eq!(
            other_project("projects/host-proj/global/networks/shared", "p1").as_deref(),
            Some("host-proj")
        );
    }

    #[test]
    fn echo_urls() {
        assert_eq!(
            check_echo_url("https://Echo.Example/").unwrap(),
            "echo.example"
        );
        assert!(check_echo_url("http://echo.example/").is_err());
        assert!(check_echo_url("https://bücher.example/").is_err());
        assert_eq!(
            check_echo_url("https://xn--bcher-kva.example/").unwrap(),
            "xn--bcher-kva.example"
        );
        assert!(check_echo_url("https://u:p@echo.example/").is_err());
    }
}
