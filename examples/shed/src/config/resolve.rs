//! [`FileConfig::resolve`]: every rule of the configuration checked and every `*_env` variable read
//! once, one group of fields at a time. Each group adds what is wrong to one list, so that a single
//! error names every problem of the file and its variables.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use secrecy::{ExposeSecret, SecretString};

use super::cloud::{cloud, ssh_key};
use super::fields::{
    agent_install, default_size, disk_gb, duration_in, durations, environment, images, limits,
    provider_kind, sizes, transport, MAX_RUN,
};
use super::file::{EnabledFile, FileConfig, RemoteFile};
use super::firewall::firewall;
use super::{Client, Config, ConfigError, Problems, Role};
use crate::backend::Caller;

const DEFAULT_LISTEN: &str = "127.0.0.1:8421";

/// The process environment as the resolver sees it: a variable that is unset or blank is absent.
pub(super) struct Vars<'a>(&'a dyn Fn(&str) -> Option<String>);

impl Vars<'_> {
    pub(super) fn get(&self, name: &str) -> Option<String> {
        (self.0)(name).filter(|v| !v.trim().is_empty())
    }

    /// The variable named by the field `configured`, or `default` when the field is not set.
    pub(super) fn named(
        &self,
        configured: &Option<String>,
        default: &str,
    ) -> (String, Option<String>) {
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
        let state_dir = self.remote_state_dir(r, &var, &mut p);
        let listen = self.listen(&mut p);
        let clients = self.clients(r, &var, &mut p);
        let has_service = self.names_service_clients();
        let firewall = firewall(r, has_service, &default_profile, &var, &mut p);
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
        let on = |b: &Option<EnabledFile>| b.as_ref().is_some_and(|e| e.enabled);
        let mounts = self.mounts.as_ref().is_some_and(|m| !m.is_null());
        let net = self.network.as_ref();
        let cidrs = net.is_some_and(|n| !n.allow_cidrs.is_empty());
        for (refused, field, why) in [
            (self.firecracker.is_some(), "firecracker", ""),
            (self.vz.is_some(), "vz", ""),
            (self.env_file.is_some(), "env_file", ""),
            (mounts, "mounts", " (a remote shed has no server mounts)"),
            (
                on(&self.egress),
                "egress.enabled",
                " (egress profiles do not exist there)",
            ),
            (on(&self.extensions), "extensions.enabled", ""),
            (
                cidrs,
                "network.allow_cidrs",
                " (outbound traffic is not filtered)",
            ),
        ] {
            if refused {
                p.add(field, format!("refused with default_backend: remote{why}"));
            }
        }
    }

    fn default_profile(&self, p: &mut Problems) -> String {
        let net = self.network.as_ref();
        let written = net.and_then(|n| n.default_profile.as_deref());
        p.one_of("network.default_profile", written, &["default", "isolated"])
    }

    /// `remote.state_dir` (default `<state_dir>/remote`), where `state_dir` defaults to
    /// `$XDG_STATE_HOME/shed` or `~/.local/state/shed`. `remote.agent_dir` is not read. A written
    /// one starting `~/` is under HOME, and must be absolute then.
    fn remote_state_dir(&self, r: &RemoteFile, var: &Vars<'_>, p: &mut Problems) -> PathBuf {
        let xdg = var.get("XDG_STATE_HOME");
        let home = var.get("HOME");
        let base = match &self.state_dir {
            Some(written) => written_dir("state_dir", written, home.as_deref(), p),
            None => xdg
                .map(PathBuf::from)
                .or_else(|| home.as_ref().map(|h| PathBuf::from(h).join(".local/state")))
                .unwrap_or_else(|| PathBuf::from("."))
                .join("shed"),
        };
        match &r.state_dir {
            Some(written) => written_dir("remote.state_dir", written, home.as_deref(), p),
            None => base.join("remote"),
        }
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
            p.label_name(&field, "a client name", name);
            let role = p.word(&format!("{field}.role"), c.role.as_deref(), Role::Service);
            let token = match &c.token_env {
                None => {
                    p.add(format!("{field}.token_env"), "required");
                    None
                }
                Some(v) => var.get(v).map(|t| SecretString::from(t.trim().to_string())),
            };
            if let (Some(v), None) = (&c.token_env, &token) {
                let why = format!("the variable {field}.token_env names is not set");
                p.add(v.clone(), why);
            }
            let max_age = duration_in(
                &c.policy.max_age,
                Duration::ZERO..=MAX_RUN,
                &format!("{field}.policy.max_age"),
                "a duration up to 2880h (like 48h)",
                p,
            );
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
                        caller: Caller {
                            name: name.clone(),
                            role,
                            max_age,
                            max_cpus: c.policy.max_cpus,
                            max_memory_mb: c.policy.max_memory_mb,
                            images: c.policy.images.clone(),
                        },
                        token,
                    },
                );
            }
        }
        same_tokens(&clients, p);
        clients
    }
}

/// The directory `field` names: `~` or `~/...` under `home` (HOME), as a shell would read it, for
/// a YAML file is read by no shell; and absolute, since a relative one would be taken from wherever
/// the server is started, leaving its records behind at the next start from elsewhere.
fn written_dir(field: &str, written: &Path, home: Option<&str>, p: &mut Problems) -> PathBuf {
    // By whole components: `~op/...` (another user's home) is not under HOME, and is refused below.
    let under_home = written.strip_prefix("~").ok();
    let dir = match (under_home, home) {
        (Some(rest), Some(home)) => Path::new(home).join(rest),
        (Some(_), None) => {
            p.add(
                field,
                "starts with ~/ but HOME is not set: write the absolute path",
            );
            return written.to_path_buf();
        }
        (None, _) => written.to_path_buf(),
    };
    if !dir.is_absolute() {
        p.add(
            field,
            format!(
                "an absolute path (or one under ~/), got {:?}: a relative one would be taken from wherever the server starts",
                written.display().to_string()
            ),
        );
    }
    dir
}

/// Refuses two clients whose tokens are equal: a caller is known by its token alone, so either
/// would act as the other (with its role and policy). Names both, never the token.
fn same_tokens(clients: &BTreeMap<String, Client>, p: &mut Problems) {
    let all: Vec<(&String, &Client)> = clients.iter().collect();
    for (i, (first, a)) in all.iter().enumerate() {
        for (second, b) in &all[i + 1..] {
            if a.token.expose_secret() == b.token.expose_secret() {
                p.add(
                    format!("clients.{second}.token_env"),
                    format!(
                        "clients {first} and {second} have the same token: a caller is known by its token alone, so either would act as the other; give each client a token of its own"
                    ),
                );
            }
        }
    }
}
