//! The server's configuration: its YAML file (`default_backend: remote` and the `remote:` block,
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

use secrecy::SecretString;

use crate::backend::Caller;
use crate::model::is_label_name;
use crate::netaddr::Cidr;
use orca::words;
use orca::words::{either, listed, Word};

mod cloud;
mod fields;
mod file;
mod firewall;
mod resolve;

pub use fields::DISK_GB_RANGE;
pub use file::{
    ClientFile, EnabledFile, FileConfig, FirewallFile, GceFile, LimitsFile, NetworkFile,
    PolicyFile, RemoteFile, SizeFile, SshFile,
};
pub use firewall::check_echo_url;

/// The configuration's problems, each naming its field (or variable).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid shed-server configuration: {}", joined(.problems))]
pub struct ConfigError {
    /// `(field, what is wrong)`, in the order found.
    pub problems: Vec<(String, String)>,
}

/// The problems as one line: `field: what is wrong; ...`.
fn joined(problems: &[(String, String)]) -> String {
    let each: Vec<String> = problems.iter().map(|(f, w)| format!("{f}: {w}")).collect();
    each.join("; ")
}

impl ConfigError {
    fn one(field: &str, why: impl Into<String>) -> Self {
        ConfigError {
            problems: vec![(field.to_string(), why.into())],
        }
    }
}

#[derive(Default)]
struct Problems(Vec<(String, String)>);

impl Problems {
    fn add(&mut self, field: impl Into<String>, why: impl Into<String>) {
        self.0.push((field.into(), why.into()));
    }

    /// The variant whose word `field` holds (`default` when it is not written); another word is a
    /// problem, naming the words, and gives `default`.
    fn word<T: Word>(&mut self, field: &str, written: Option<&str>, default: T) -> T {
        let written = written.unwrap_or(default.word());
        T::from_word(written).unwrap_or_else(|| {
            self.add(field, format!("{}, got {written:?}", either::<T>()));
            default
        })
    }

    /// Checks `name` (`what`: a size, alias or client name, which goes into labels) as a label value.
    fn label_name(&mut self, field: &str, what: &str, name: &str) {
        if !is_label_name(name, 40) {
            let rule = "is 1 to 40 of a-z, 0-9, '-' and '_', starting with a letter";
            self.add(field, format!("{what} {rule}"));
        }
    }

    /// The word `field` holds, one of `words` (the first when it is not written); another word is
    /// a problem, naming the words.
    fn one_of(&mut self, field: &str, written: Option<&str>, words: &[&str]) -> String {
        let written = written.unwrap_or(words[0]);
        if !words.contains(&written) {
            self.add(field, format!("{}, got {written:?}", listed(words)));
        }
        written.to_string()
    }
}

words! {
    /// Which cloud the server runs its VMs on; its word is orca's kind name.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum ProviderKind {
        /// Compute Engine (orca's `gce` driver).
        Gce = "gce",
        /// orca's in-memory cloud (`fake`), kept in a file when [`orca::FAKE_STATE_ENV`] names one.
        Fake = "fake",
    }
}

words! {
    /// How the server reaches a VM's agent.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Transport {
        /// Over SSH: the shipped probe reads the VM's SSH banner.
        Ssh = "ssh",
        /// In-process: every VM's agent answers at once (a test driver).
        Local = "local",
    }
}

words! {
    /// The firewall check's mode, by the configuration's word.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum FirewallMode {
        /// The rule's sources must equal the configured list; the server never changes the rule.
        Static = "static",
        /// The rule's sources must be the server's own public address; the server patches them.
        Auto = "auto",
        /// Sources are not compared.
        Any = "any",
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

/// A named size; its JSON (in `GET /api/info`) leaves out the machine type.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Size {
    /// Its name.
    pub name: String,
    /// The machine type (the cloud's word: never told to a client).
    #[serde(skip)]
    pub machine_type: String,
    /// CPUs.
    pub cpus: u32,
    /// Memory.
    pub memory_mb: u32,
}

words! {
    /// A client's role.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Role {
        /// May see every shed and is told the firewall's details.
        Admin = "admin",
        /// Sees its own sheds; is never told the project, zone or any address.
        Service = "service",
    }
}

/// A client, resolved: the caller its token makes (name, role, policy) and the token (redacted in
/// `Debug`, as a secret is).
#[derive(Clone, Debug)]
pub struct Client {
    /// Who calls with its token.
    pub caller: Caller,
    /// Its bearer token.
    pub token: SecretString,
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clients_debug_never_shows_its_token() {
        let c = Client {
            caller: Caller {
                name: "ci".into(),
                role: Role::Service,
                max_age: None,
                max_cpus: None,
                max_memory_mb: None,
                images: Vec::new(),
            },
            token: SecretString::from("tok-3f9a"),
        };
        let shown = format!("{c:?}");
        assert!(!shown.contains("tok-3f9a"), "{shown}");
        assert!(shown.contains("ci"), "{shown}");
    }
}
