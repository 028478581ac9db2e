//! [`FileConfig::resolve`]: every rule of the configuration checked and every `*_env` variable read
//! once, one group of fields at a time. Each group adds what is wrong to one list, so that a single
//! error names every problem of the file and its variables.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use base64::Engine as _;
use orca::gce::ConfigKey as GceKey;
use secrecy::SecretString;

use super::file::{FileConfig, FirewallFile, RemoteFile};
use super::{
    Client, Config, ConfigError, FirewallConfig, FirewallMode, Limits, Problems, ProviderKind,
    Role, Size, Transport,
};
use crate::model::{is_label_name, is_name};
use crate::netaddr::{check_static_range, Cidr};

const DEFAULT_LISTEN: &str = "127.0.0.1:8421";
const MIN_RUN: Duration = Duration::from_secs(600);
const MAX_RUN: Duration = Duration::from_secs(2880 * 3600);
const DEFAULT_RUN: Duration = Duration::from_secs(24 * 3600);
const DEFAULT_PASS: Duration = Duration::from_secs(60);

/// The shortest and longest disk a shed may have, in GB.
pub const DISK_GB_RANGE: (u32, u32) = (10, 500);

/// The process environment as the resolver sees it: a variable that is unset or blank is absent.
struct Vars<'a>(&'a dyn Fn(&str) -> Option<String>);

impl Vars<'_> {
    fn get(&self, name: &str) -> Option<String> {
        (self.0)(name).filter(|v| !v.trim().is_empty())
    }

    /// The variable named by the field `configured`, or `default` when the field is not set.
    fn named(&self, configured: &Option<String>, default: &str) -> (String, Option<String>) {
        let name = configured.clone().unwrap_or_else(|| default.to_string());
        let value = self.get(&name);
        (name, value)
    }
}

impl FileConfig {
    /// Checks every rule and reads every `*_env` variable through `env` (once each): the server's
    /// configuration, or every problem found.
    pub fn resolve(&self, env: &dyn Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let var = Vars(env);
        let r = self.remote_block()?;
        let mut p = Problems::default();
        self.refuse_beside_remote(&mut p);
        let default_profile = self.default_profile(&mut p);
        let provider = provider_kind(r, &mut p);
        let transport = transport(r, &mut p);
        let environment = environment(r, &mut p);
        let default_image = images(r, &mut p);
        let sizes = sizes(r, provider, &mut p);
        let default_size = default_size(r, &sizes, &mut p);
        let disk_gb = disk_gb(r, &mut p);
        let limits = limits(r, &mut p);
        let (max_run_duration, pass_interval) = durations(r, &mut p);
        let agent_install = agent_install(r, &mut p);
        let (state_dir, agent_dir) = self.dirs(r, &var);
        let listen = self.listen(&mut p);
        let clients = self.clients(r, &var, &mut p);
        let firewall = firewall(
            r,
            self.names_service_clients(),
            &default_profile,
            &var,
            &mut p,
        );
        let ssh_key = ssh_key(r, transport, &var, &mut p);
        let (provider_settings, location) = cloud(r, provider, &var, &mut p);
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
            firewall,
            clients,
            default_profile,
            location,
            ssh_key,
            provider_settings,
        })
    }

    /// The `remote:` block, when the file asks for the remote backend (this server runs no other).
    fn remote_block(&self) -> Result<&RemoteFile, ConfigError> {
        let backend = self.default_backend.as_deref().unwrap_or("");
        if backend != "remote" {
            return Err(if self.remote.is_some() {
                ConfigError::one(
                    "remote",
                    format!(
                        "a remote: block is refused under default_backend {backend:?}; this server runs the remote backend only with default_backend: remote"
                    ),
                )
            } else {
                ConfigError::one(
                    "default_backend",
                    "this server runs the remote backend only: set default_backend: remote and a remote: block",
                )
            });
        }
        self.remote.as_ref().ok_or_else(|| {
            ConfigError::one(
                "remote",
                "default_backend: remote needs a remote: block (with environment and default_image)",
            )
        })
    }

    /// The blocks of the other backends and the features a remote shed does not have.
    fn refuse_beside_remote(&self, p: &mut Problems) {
        let refused = "refused with default_backend: remote";
        if self.firecracker.is_some() {
            p.add("firecracker", refused);
        }
        if self.vz.is_some() {
            p.add("vz", refused);
        }
        if self.env_file.is_some() {
            p.add("env_file", refused);
        }
        if self.mounts.as_ref().is_some_and(|m| !m.is_null()) {
            p.add(
                "mounts",
                format!("{refused} (a remote shed has no server mounts)"),
            );
        }
        if self.egress.as_ref().is_some_and(|e| e.enabled) {
            p.add(
                "egress.enabled",
                format!("{refused} (egress profiles do not exist there)"),
            );
        }
        if self.extensions.as_ref().is_some_and(|e| e.enabled) {
            p.add("extensions.enabled", refused);
        }
        let allow_cidrs = self.network.as_ref().map(|n| n.allow_cidrs.len());
        if allow_cidrs.unwrap_or(0) > 0 {
            p.add(
                "network.allow_cidrs",
                format!("{refused} (outbound traffic is not filtered)"),
            );
        }
    }

    fn default_profile(&self, p: &mut Problems) -> String {
        let profile = self
            .network
            .as_ref()
            .and_then(|n| n.default_profile.clone())
            .unwrap_or_else(|| "default".into());
        if !["default", "isolated"].contains(&profile.as_str()) {
            p.add(
                "network.default_profile",
                format!("default or isolated, got {profile:?}"),
            );
        }
        profile
    }

    /// `remote.state_dir` (default `<state_dir>/remote`) and `remote.agent_dir` (default
    /// `<state_dir>/agent`), where `state_dir` defaults to `$XDG_STATE_HOME/shed` or
    /// `~/.local/state/shed`.
    fn dirs(&self, r: &RemoteFile, var: &Vars<'_>) -> (PathBuf, PathBuf) {
        let base = self.state_dir.clone().unwrap_or_else(|| {
            var.get("XDG_STATE_HOME")
                .map(PathBuf::from)
                .or_else(|| {
                    var.get("HOME")
                        .map(|h| PathBuf::from(h).join(".local/state"))
                })
                .unwrap_or_else(|| PathBuf::from("."))
                .join("shed")
        });
        let state_dir = r.state_dir.clone().unwrap_or_else(|| base.join("remote"));
        let agent_dir = r.agent_dir.clone().unwrap_or_else(|| base.join("agent"));
        (state_dir, agent_dir)
    }

    fn listen(&self, p: &mut Problems) -> SocketAddr {
        let text = self.listen.clone().unwrap_or_else(|| DEFAULT_LISTEN.into());
        let listen: SocketAddr = text.parse().unwrap_or_else(|_| {
            p.add(
                "listen",
                format!("an address and port like 127.0.0.1:8421, got {text:?}"),
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
        listen
    }

    /// Whether the file names a service client (a client's role defaults to service).
    fn names_service_clients(&self) -> bool {
        self.clients
            .values()
            .any(|c| c.role.as_deref().unwrap_or("service") == "service")
    }

    /// The clients, each with the token its variable holds; a client whose token is missing is
    /// left out (and named among the problems).
    fn clients(
        &self,
        r: &RemoteFile,
        var: &Vars<'_>,
        p: &mut Problems,
    ) -> BTreeMap<String, Client> {
        let mut clients = BTreeMap::new();
        for (name, c) in &self.clients {
            let field = format!("clients.{name}");
            if !is_label_name(name, 40) {
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
                Some(v) => match var.get(v) {
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
            let max_age = c
                .policy
                .max_age
                .as_ref()
                .and_then(|v| match yaml_duration(v) {
                    Some(d) if d <= MAX_RUN => Some(d),
                    _ => {
                        p.add(
                            format!("{field}.policy.max_age"),
                            "a duration up to 2880h (like 48h)",
                        );
                        None
                    }
                });
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
        clients
    }
}

fn provider_kind(r: &RemoteFile, p: &mut Problems) -> ProviderKind {
    match r.provider.as_deref().unwrap_or("gce") {
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
    }
}

fn transport(r: &RemoteFile, p: &mut Problems) -> Transport {
    match r.transport.as_deref().unwrap_or("ssh") {
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
    }
}

/// The environment's name, which is part of every VM name, label and the network tag
/// `shed-<environment>`.
fn environment(r: &RemoteFile, p: &mut Problems) -> String {
    let environment = r.environment.clone().unwrap_or_default();
    if r.environment.is_none() {
        p.add("remote.environment", "required");
    } else if !is_name(&environment, 20) {
        p.add(
            "remote.environment",
            format!("1-20 of a-z, 0-9 and -, starting with a letter (and not ending with -, as it is part of a network tag), got {environment:?}"),
        );
    }
    environment
}

fn is_image(s: &str) -> bool {
    !s.is_empty() && s.len() <= 1024 && !s.chars().any(|c| c.is_whitespace() || c.is_control())
}

/// `default_image` (answered) and the `image_aliases`.
fn images(r: &RemoteFile, p: &mut Problems) -> String {
    let default_image = r.default_image.clone().unwrap_or_default();
    if r.default_image.is_none() {
        p.add("remote.default_image", "required");
    } else if !is_image(&default_image) {
        p.add(
            "remote.default_image",
            "an image name or path without spaces",
        );
    }
    for (alias, image) in &r.image_aliases {
        if !is_label_name(alias, 40) {
            p.add(
                format!("remote.image_aliases.{alias}"),
                "an alias is 1 to 40 of a-z, 0-9, '-' and '_', starting with a letter",
            );
        }
        if !is_image(image) {
            p.add(
                format!("remote.image_aliases.{alias}"),
                "an image name or path without spaces",
            );
        }
    }
    default_image
}

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

fn sizes(r: &RemoteFile, provider: ProviderKind, p: &mut Problems) -> BTreeMap<String, Size> {
    let Some(written) = &r.sizes else {
        return default_sizes(provider);
    };
    if written.is_empty() {
        p.add("remote.sizes", "at least one size");
    }
    let mut out = BTreeMap::new();
    for (name, sz) in written {
        let field = format!("remote.sizes.{name}");
        if !is_label_name(name, 40) {
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
        if let Some(a) = sz.arch.as_deref().filter(|a| *a != "amd64") {
            p.add(
                format!("{field}.arch"),
                format!("only amd64 images are supported, got {a:?}"),
            );
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

fn default_size(r: &RemoteFile, sizes: &BTreeMap<String, Size>, p: &mut Problems) -> String {
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
    default_size
}

fn disk_gb(r: &RemoteFile, p: &mut Problems) -> u32 {
    let disk_gb = r.disk_gb.unwrap_or(50);
    if !(DISK_GB_RANGE.0..=DISK_GB_RANGE.1).contains(&disk_gb) {
        p.add("remote.disk_gb", "10 to 500");
    }
    disk_gb
}

fn limits(r: &RemoteFile, p: &mut Problems) -> Limits {
    let written = r.limits.clone().unwrap_or_default();
    let limits = Limits {
        max_running: written.max_running.unwrap_or(2),
        max_sheds: written.max_sheds.unwrap_or(8),
    };
    if limits.max_running == 0 {
        p.add("remote.limits.max_running", "at least 1");
    }
    if limits.max_sheds == 0 {
        p.add("remote.limits.max_sheds", "at least 1");
    }
    limits
}

/// A duration written as text (`24h`, `10m`) or as a number of seconds.
fn yaml_duration(v: &serde_yaml_ng::Value) -> Option<Duration> {
    match v {
        serde_yaml_ng::Value::String(s) => orca::settings::parse_duration(s),
        serde_yaml_ng::Value::Number(n) => n.as_u64().map(Duration::from_secs),
        _ => None,
    }
}

/// The duration of `field` when it is set and within `range`, else `default` (a problem when set).
fn duration_in(
    value: &Option<serde_yaml_ng::Value>,
    range: std::ops::RangeInclusive<Duration>,
    default: Duration,
    field: &str,
    rule: &str,
    p: &mut Problems,
) -> Duration {
    let Some(v) = value else { return default };
    match yaml_duration(v) {
        Some(d) if range.contains(&d) => d,
        _ => {
            p.add(field, rule);
            default
        }
    }
}

/// `max_run_duration` (10m to 2880h) and `pass_interval` (1s to 1h).
fn durations(r: &RemoteFile, p: &mut Problems) -> (Duration, Duration) {
    let max_run = duration_in(
        &r.max_run_duration,
        MIN_RUN..=MAX_RUN,
        DEFAULT_RUN,
        "remote.max_run_duration",
        "a duration from 10m to 2880h (like 24h)",
        p,
    );
    let pass = duration_in(
        &r.pass_interval,
        Duration::from_secs(1)..=Duration::from_secs(3600),
        DEFAULT_PASS,
        "remote.pass_interval",
        "a duration from 1s to 1h",
        p,
    );
    (max_run, pass)
}

fn agent_install(r: &RemoteFile, p: &mut Problems) -> String {
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
    agent_install
}

/// The firewall block: its mode, the sources or echo services that mode uses, and the refusals of
/// an `any`-like firewall beside service clients or an isolated default profile (neither would be
/// isolated from the other sheds).
fn firewall(
    r: &RemoteFile,
    has_service: bool,
    default_profile: &str,
    var: &Vars<'_>,
    p: &mut Problems,
) -> FirewallConfig {
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
    let source_ranges = if mode == FirewallMode::Static {
        static_sources(&fw, var, p)
    } else {
        if !fw.source_ranges.is_empty() || fw.source_ranges_env.is_some() {
            p.add(
                "remote.firewall.source_ranges",
                format!(
                    "only static mode uses source ranges (mode {})",
                    mode.as_str()
                ),
            );
        }
        Vec::new()
    };
    echo_urls(&fw, mode, p);
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
    FirewallConfig {
        mode,
        source_ranges,
        acknowledge_any: fw.acknowledge_any,
        echo_urls: fw.echo_urls.clone(),
    }
}

/// Static mode's sources: exactly one of the list and the variable (`SHED_REMOTE_SOURCE_RANGES`
/// when neither is set), not empty, each an IPv4 CIDR a rule may name; sorted, without repeats.
fn static_sources(fw: &FirewallFile, var: &Vars<'_>, p: &mut Problems) -> Vec<Cidr> {
    let (field, list): (String, Vec<String>) = match (&fw.source_ranges[..], &fw.source_ranges_env)
    {
        ([_, ..], Some(_)) => {
            p.add(
                "remote.firewall.source_ranges",
                "set exactly one of source_ranges and source_ranges_env",
            );
            return Vec::new();
        }
        ([_, ..], None) => (
            "remote.firewall.source_ranges".into(),
            fw.source_ranges.clone(),
        ),
        ([], configured) => match var.named(configured, "SHED_REMOTE_SOURCE_RANGES") {
            (name, Some(v)) => (
                name,
                v.split(',')
                    .map(|s| s.trim().to_string())
                    .filter(|s| !s.is_empty())
                    .collect(),
            ),
            (name, None) => {
                p.add(
                    name,
                    "not set: static mode needs remote.firewall.source_ranges or this variable (comma-separated IPv4 CIDRs)",
                );
                return Vec::new();
            }
        },
    };
    if list.is_empty() {
        p.add(&field, "the list is empty");
    }
    let mut ranges = Vec::new();
    for s in &list {
        match check_static_range(s, fw.acknowledge_any) {
            Ok(c) => ranges.push(c),
            Err(e) => p.add(&field, e),
        }
    }
    ranges.sort();
    ranges.dedup();
    ranges
}

/// Auto mode's echo services: at least two, each https on a host of its own (one service alone
/// must never move the rule); no other mode takes any.
fn echo_urls(fw: &FirewallFile, mode: FirewallMode, p: &mut Problems) {
    if mode != FirewallMode::Auto {
        if !fw.echo_urls.is_empty() {
            p.add(
                "remote.firewall.echo_urls",
                format!("only auto mode uses echo services (mode {})", mode.as_str()),
            );
        }
        return;
    }
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
}

/// Transport `ssh`: the client key, from exactly one of its two variables (base64, or a path).
fn ssh_key(
    r: &RemoteFile,
    transport: Transport,
    var: &Vars<'_>,
    p: &mut Problems,
) -> Option<SecretString> {
    if transport != Transport::Ssh {
        return None;
    }
    let ssh = r.ssh.clone().unwrap_or_default();
    let (key_env, b64) = var.named(&ssh.client_key_env, "SHED_REMOTE_SSH_KEY");
    let (file_env, path) = var.named(&ssh.client_key_file_env, "SHED_REMOTE_SSH_KEY_FILE");
    let key = |bytes: Vec<u8>| {
        looks_like_key(&bytes)
            .then(|| SecretString::from(String::from_utf8_lossy(&bytes).into_owned()))
    };
    match (b64, path) {
        (Some(_), Some(_)) => p.add(
            key_env.clone(),
            format!("set exactly one of {key_env} and {file_env}"),
        ),
        (None, None) => p.add(
            key_env.clone(),
            format!("not set: set {key_env} (base64 of the OpenSSH private key) or {file_env} (a path to it)"),
        ),
        (Some(b64), None) => {
            match base64::engine::general_purpose::STANDARD.decode(b64.trim()).ok().and_then(key) {
                Some(k) => return Some(k),
                None => p.add(key_env, "not the base64 of an OpenSSH private key"),
            }
        }
        (None, Some(path)) => match std::fs::read(path.trim()) {
            Ok(bytes) => match key(bytes) {
                Some(k) => return Some(k),
                None => p.add(file_env, "the file is not an OpenSSH private key"),
            },
            Err(e) => p.add(file_env, format!("cannot read the file: {e}")),
        },
    }
    None
}

fn looks_like_key(bytes: &[u8]) -> bool {
    let text = String::from_utf8_lossy(bytes);
    text.contains("-----BEGIN") && text.contains("PRIVATE KEY-----")
}

/// The driver settings the provider is made from, with the driver's own keys, and the zone VMs are
/// made in.
fn cloud(
    r: &RemoteFile,
    provider: ProviderKind,
    var: &Vars<'_>,
    p: &mut Problems,
) -> (orca::Settings, String) {
    match provider {
        ProviderKind::Fake => {
            let mut settings = orca::Settings::new();
            if let Some(path) = var.get(orca::FAKE_STATE_ENV) {
                settings.insert(orca::FAKE_STATE_ENV, path);
            }
            (settings, "zone-a".to_string())
        }
        ProviderKind::Gce => gce_settings(r, var, p),
    }
}

/// The `gce:` block's variables mapped onto the Compute Engine driver's keys: project, zone,
/// network and subnet (each required), and exactly one credential source. A network or subnet of
/// another project is refused: the firewall check reads one project's rules.
fn gce_settings(r: &RemoteFile, var: &Vars<'_>, p: &mut Problems) -> (orca::Settings, String) {
    let g = r.gce.clone().unwrap_or_default();
    let mut settings = orca::Settings::new();
    for (configured, default, key) in [
        (&g.project_env, "SHED_GCE_PROJECT", GceKey::Project),
        (&g.zone_env, "SHED_GCE_ZONE", GceKey::Zone),
        (&g.network_env, "SHED_GCE_NETWORK", GceKey::Network),
        (&g.subnet_env, "SHED_GCE_SUBNET", GceKey::Subnet),
    ] {
        match var.named(configured, default) {
            (_, Some(v)) => settings.insert(key.as_str(), v.trim()),
            (name, None) => p.add(name, "not set (required for provider gce)"),
        }
    }
    let (cred, json) = var.named(&g.credentials_env, "GOOGLE_CREDENTIALS_BASE64");
    let (cred_file, path) = var.named(&g.credentials_file_env, "SHED_GCE_CREDENTIALS_FILE");
    match (json, path) {
        (Some(_), Some(_)) => p.add(
            cred.clone(),
            format!("set exactly one of {cred} and {cred_file}"),
        ),
        (None, None) => p.add(
            cred.clone(),
            format!("not set: set {cred} (base64 of the service account JSON key) or {cred_file} (a path to it)"),
        ),
        (Some(v), None) => settings.insert(GceKey::CredentialsBase64.as_str(), v.trim()),
        (None, Some(v)) => settings.insert(GceKey::CredentialsFile.as_str(), v.trim()),
    }
    if let Some(project) = settings.get(GceKey::Project.as_str()) {
        for (key, field) in [
            (GceKey::Network, "gce.network_env"),
            (GceKey::Subnet, "gce.subnet_env"),
        ] {
            if let Some(other) = settings
                .get(key.as_str())
                .and_then(|v| other_project(v, project))
            {
                p.add(
                    field,
                    format!("the network is in another project ({other}, a Shared VPC): the firewall check reads one project's rules, so the network and subnet must be in the sheds' project"),
                );
            }
        }
    }
    let zone = settings
        .get(GceKey::Zone.as_str())
        .unwrap_or("zone-a")
        .to_string();
    (settings, zone)
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
