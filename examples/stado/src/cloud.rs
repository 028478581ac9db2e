//! [`Stado`]: the cloud host commands' shared state (home, provider, host channel) and what the
//! commands share: the gates, measuring the fleet's addresses, admitting them on SSH, deleting a host.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use orca::{Error, Provider, Status};
use serde::Serialize;

use crate::channel::{commands, Endpoint, FakeFleet, HostChannel, OpenSsh};
use crate::error::Failure;
use crate::home::{Home, WriteLock};
use crate::keys;
use crate::profile::{Profile, Selection};
use crate::registry::{CloudDecl, Egress, Registry};

/// The pool (orca's label) every cloud host is made in.
pub const POOL: &str = "stado-cloud-hosts";
/// The SSH admission group: the application security group `stado-cloud-hosts-<location>` and the
/// subnet security group's rule `stado-cloud-hosts`.
pub const GROUP: &str = "stado-cloud-hosts";
/// The label every VM a home makes carries: the home's id. A VM that does not carry this home's is
/// never adopted or deleted by it.
pub const HOME_LABEL: &str = "stado-home";
/// The log cloud-init writes on the host.
pub const CLOUD_INIT_LOG: &str = "/var/log/cloud-init-output.log";

/// How long stado waits for hosts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// One command on a host.
    pub command: Duration,
    /// A new host's SSH to answer at enrolment.
    pub enrol: Duration,
    /// Between two enrolment attempts.
    pub enrol_interval: Duration,
    /// cloud-init to finish.
    pub cloud_init: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            command: Duration::from_secs(60),
            enrol: Duration::from_secs(600),
            enrol_interval: Duration::from_secs(10),
            cloud_init: Duration::from_secs(45 * 60),
        }
    }
}

impl Timing {
    /// Short waits, for simulated hosts.
    pub fn quick() -> Timing {
        Timing {
            command: Duration::from_secs(10),
            enrol: Duration::from_millis(200),
            enrol_interval: Duration::from_millis(20),
            cloud_init: Duration::from_secs(10),
        }
    }
}

/// A sink for progress lines (a terminal's stderr).
pub type Progress = Arc<dyn Fn(&str) + Send + Sync>;

/// The cloud host commands on one provider.
#[derive(Clone)]
pub struct Stado {
    /// The stado home.
    pub home: Home,
    /// The provider kind (`azure`, `fake`).
    pub kind: String,
    /// The provider.
    pub provider: Arc<dyn Provider>,
    /// The host channel.
    pub channel: Arc<dyn HostChannel>,
    /// The simulated fleet, on `fake`: cloud-init "installs" the pinned host key there.
    pub sim: Option<FakeFleet>,
    /// The provider selection of this invocation.
    pub selection: Selection,
    /// Waits.
    pub timing: Timing,
    /// Where progress lines go: one as each step of create starts.
    pub progress: Option<Progress>,
    /// Where what each step of create did goes, as it ends (a person reads it as it happens).
    pub step_lines: Option<Progress>,
}

impl std::fmt::Debug for Stado {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stado")
            .field("home", &self.home)
            .field("kind", &self.kind)
            .field("provider", &self.provider)
            .finish_non_exhaustive()
    }
}

/// The Azure settings keys (orca's Azure driver) each profile binding maps onto.
pub const AZURE_SETTINGS: [(&str, &str); 10] = [
    ("azure.subscription_id", "ORCA_AZURE_SUBSCRIPTION_ID"),
    ("azure.resource_group", "ORCA_AZURE_RESOURCE_GROUP"),
    ("azure.vnet", "ORCA_AZURE_VNET"),
    ("azure.subnet", "ORCA_AZURE_SUBNET"),
    ("azure.image_urn", "ORCA_AZURE_IMAGE"),
    ("azure.vm_username", "ORCA_AZURE_ADMIN_USER"),
    ("azure.endpoint", "ORCA_AZURE_ENDPOINT"),
    ("azure.prices_endpoint", "ORCA_AZURE_PRICES_ENDPOINT"),
    ("azure.billing_account", "ORCA_AZURE_BILLING_ACCOUNT"),
    ("azure.billing_profile", "ORCA_AZURE_BILLING_PROFILE"),
];

/// The credential settings the Azure driver reads, taken from this process's environment (never
/// from the profile: they are secrets or point at them).
pub const AZURE_CREDENTIAL_ENV: [&str; 8] = [
    "ORCA_AZURE_CREDENTIAL",
    "AZURE_FEDERATED_TOKEN_FILE",
    "ORCA_AZURE_ACCESS_TOKEN",
    "AZURE_TENANT_ID",
    "AZURE_CLIENT_ID",
    "AZURE_CLIENT_SECRET",
    "IDENTITY_ENDPOINT",
    "MSI_ENDPOINT",
];

/// The Azure driver's settings for `profile`'s bindings, with the credential settings of `env`.
pub fn azure_settings(profile: &Profile, env: impl Fn(&str) -> Option<String>) -> orca::Settings {
    let mut s = orca::Settings::new();
    for (binding, key) in AZURE_SETTINGS {
        if let Some(v) = profile.get(binding) {
            s.insert(key, v);
        }
    }
    // The credentials, and the client settings every orca driver takes (timeouts, poll interval,
    // retry budget): an operator sets them in the environment.
    let client_keys = orca::kit::ClientKey::ALL.iter().map(|k| k.as_str());
    for key in AZURE_CREDENTIAL_ENV.iter().copied().chain(client_keys) {
        if let Some(v) = env(key).filter(|v| !v.is_empty()) {
            s.insert(key, v);
        }
    }
    s
}

impl Stado {
    /// stado on `kind` as the command line opens it: `fake` is the in-memory provider and a simulated
    /// fleet, both kept in the home; `azure` is orca's Azure driver from the profile's bindings and
    /// the system's OpenSSH client. The gates (provider enabled, bindings declared) are checked first.
    pub async fn open(home: Home, kind: &str, selection: Selection) -> Result<Stado, Failure> {
        crate::profile::check_known_provider(kind)?;
        let profile = Profile::load(&home)?;
        profile.check_enabled(kind, &selection)?;
        profile.check_bindings()?;
        let owner = profile.owner();
        match kind {
            "fake" => {
                let cloud = orca::memory::MemoryCloud::persistent(home.fake_cloud_path())
                    .map_err(|e| Failure::new(e.to_string()))?;
                let provider = cloud
                    .provider(&owner)
                    .map_err(|e| Failure::new(e.to_string()))?;
                let fleet = FakeFleet::persistent(home.fake_fleet_path()).with_cloud(cloud);
                Ok(Stado {
                    home,
                    kind: kind.into(),
                    provider: Arc::new(provider),
                    channel: Arc::new(fleet.clone()),
                    sim: Some(fleet),
                    selection,
                    timing: Timing::quick(),
                    progress: None,
                    step_lines: None,
                })
            }
            "azure" => {
                let settings = azure_settings(&profile, |k| std::env::var(k).ok());
                let provider = orca::of_with("azure", &owner, &settings)
                    .await
                    .map_err(|e| {
                        Failure::new(format!("the Azure provider could not be set up: {e}"))
                    })?;
                Ok(Stado {
                    home,
                    kind: kind.into(),
                    provider,
                    channel: Arc::new(OpenSsh::default()),
                    sim: None,
                    selection,
                    timing: Timing::default(),
                    progress: None,
                    step_lines: None,
                })
            }
            other => Err(crate::profile::check_known_provider(other)
                .err()
                .unwrap_or_else(|| Failure::new(format!("no provider {other:?} in this build")))),
        }
    }

    /// stado on an already made provider and channel (tests, embedders).
    pub fn with(
        home: Home,
        kind: &str,
        provider: Arc<dyn Provider>,
        channel: Arc<dyn HostChannel>,
    ) -> Stado {
        Stado {
            home,
            kind: kind.into(),
            provider,
            channel,
            sim: None,
            selection: Selection::default(),
            timing: Timing::quick(),
            progress: None,
            step_lines: None,
        }
    }

    /// The cloud's name in messages. The seed's words name Azure; `fake` is Azure simulated, and
    /// speaks the same words.
    pub fn cloud_title(&self) -> &'static str {
        "Azure"
    }

    pub(crate) fn say(&self, line: &str) {
        if let Some(p) = &self.progress {
            p(line);
        }
    }

    /// An error of the cloud in words a person acts on: on Azure, a credential it refused (or none
    /// found) names every source of credentials stado tries.
    pub(crate) fn cloud_error(&self, e: &Error) -> String {
        if self.kind == "azure" && e.kind() == orca::ErrorKind::Unauthenticated {
            return format!("{e}; {}", crate::azure::credential_sources());
        }
        e.to_string()
    }

    /// The profile, after the gates: the provider enabled, every binding declared, and the provider
    /// acting for this home's owner.
    pub(crate) fn gated_profile(&self) -> Result<Profile, Failure> {
        let profile = Profile::load(&self.home)?;
        profile.check_enabled(&self.kind, &self.selection)?;
        profile.check_bindings()?;
        let owner = profile.owner();
        if self.provider.owner() != owner {
            return Err(Failure::new(format!(
                "the {} provider acts for the owner {:?}, and this stado home (id {}) makes its machines under the owner {owner:?}; stado adopts and deletes only its own home's machines",
                self.kind,
                self.provider.owner(),
                self.home.id()
            )));
        }
        Ok(profile)
    }

    /// Whether machine `m` carries this home's label.
    pub(crate) fn is_this_homes(&self, m: &orca::Machine) -> bool {
        m.labels.get(HOME_LABEL).map(String::as_str) == Some(self.home.id())
    }

    /// Who a VM that is not this home's belongs to, in words.
    pub(crate) fn whose(m: &orca::Machine) -> String {
        match m.labels.get(HOME_LABEL) {
            Some(h) => format!("it carries the stado home {h}"),
            None => format!("it carries no {HOME_LABEL} label"),
        }
    }

    /// The registry's write lock, refused at once when another stado holds it.
    pub(crate) fn lock_registry(&self) -> Result<WriteLock, Failure> {
        self.home.lock(&self.home.registry_path())
    }

    /// Asks each `cloud_hosts.admit_from` host for its public address and records the answers in
    /// `cloud_hosts.egress` (saved); the sources to admit, or why not.
    pub(crate) async fn measure_egress(
        &self,
        profile: &Profile,
        registry: &mut Registry,
    ) -> Result<Vec<String>, Failure> {
        let hosts = match &registry.cloud_hosts.admit_from {
            None => {
                return Err(Failure::refused(
                    "the registry names no host whose address a cloud host admits (cloud_hosts.admit_from is absent); stado registry set --path cloud_hosts --value '{\"admit_from\":[\"build-host\"]}' names the fleet hosts that reach cloud hosts",
                ))
            }
            Some(h) if h.is_empty() => {
                return Err(Failure::refused(
                    "the registry names no host whose address a cloud host admits (cloud_hosts.admit_from is empty); stado registry set --path cloud_hosts --value '{\"admit_from\":[\"build-host\"]}' names the fleet hosts that reach cloud hosts",
                ))
            }
            Some(h) => h.clone(),
        };
        let api = profile.get("api.url").ok_or_else(|| {
            Failure::refused(
                "the profile declares no api.url, the product site that tells a fleet host its public address (<api.url>/api/egress); stado config set api.url declares it",
            )
        })?;
        let mut endpoints = Vec::new();
        for h in &hosts {
            match registry.target(h) {
                Some(t) if t.cloud.is_none() => endpoints.push(Endpoint::of(t)),
                Some(_) => {
                    return Err(Failure::refused(format!(
                        "cloud_hosts.admit_from names {h}, a cloud host; it names the fleet hosts that reach cloud hosts"
                    )))
                }
                None => {
                    return Err(Failure::refused(format!(
                        "cloud_hosts.admit_from names {h}, which is not a registered target; stado registry set --path targets.{h} --value '{{\"address\":\"...\",\"user\":\"...\",\"known_hosts\":\"...\"}}' registers it"
                    )))
                }
            }
        }
        let command = commands::egress(&api);
        // Each answer is stamped when it arrives: the time its address was read, not the time the
        // slowest host answered.
        let answers = futures::future::join_all(endpoints.iter().map(|ep| {
            let command = command.clone();
            async move {
                let answer = self.channel.run(ep, &command, self.timing.command).await;
                (ep.name.clone(), answer, chrono::Utc::now())
            }
        }))
        .await;
        let mut read = BTreeMap::new();
        let mut failure = None;
        for (name, answer, at) in answers {
            let parsed = match answer {
                Ok(out) if out.status == 0 => {
                    let text = out.stdout.trim().to_string();
                    text.parse::<std::net::IpAddr>()
                        .map(|ip| ip.to_string())
                        .map_err(|_| {
                            format!("it answered {:?}, not an address", truncate(&text, 60))
                        })
                }
                Ok(out) => Err(format!("curl exited {}: {}", out.status, out.last_words())),
                Err(e) => Err(e),
            };
            match parsed {
                Ok(address) => {
                    read.insert(
                        name,
                        Egress {
                            address,
                            read_at: at,
                        },
                    );
                }
                Err(cause) if failure.is_none() => {
                    failure = Some(Failure::new(format!(
                        "the admit_from host {name} did not tell its public address (curl of {api}/api/egress over its host channel): {cause}"
                    )));
                }
                Err(_) => {}
            }
        }
        registry.cloud_hosts.egress.retain(|k, _| hosts.contains(k));
        let mut sources = BTreeSet::new();
        for (k, v) in read {
            sources.insert(cidr(&v.address));
            registry.cloud_hosts.egress.insert(k, v);
        }
        registry.save(&self.home)?;
        match failure {
            Some(f) => Err(f),
            None => Ok(sources.into_iter().collect()),
        }
    }

    /// Admits `sources` on SSH in each of `locations` (the first first), readmitting the declared
    /// cloud hosts of each.
    pub(crate) async fn admit(
        &self,
        registry: &Registry,
        locations: &[String],
        sources: &[String],
    ) -> Result<Vec<AdmissionReport>, Failure> {
        let Some(adm) = self.provider.ssh_admission() else {
            return Err(Failure::new(format!(
                "the {} provider cannot admit addresses on SSH, which cloud hosts need",
                self.kind
            )));
        };
        let mut reports = Vec::new();
        for loc in locations {
            let hosts: Vec<(String, String)> = registry
                .cloud_hosts(&self.kind)
                .into_iter()
                .filter(|(_, c)| &c.location == loc)
                .map(|(t, c)| (t.name.clone(), c.vm_id.clone()))
                .collect();
            let ids: Vec<String> = hosts.iter().map(|(_, id)| id.clone()).collect();
            let a = adm
                .admit_ssh(GROUP, loc, sources, &ids)
                .await
                .map_err(|e| {
                    let f = admission_failure(&e, loc, hosts.is_empty(), self.cloud_title());
                    match e.kind() {
                        orca::ErrorKind::Unauthenticated => Failure::new(format!(
                            "{}; {}",
                            f.message(),
                            crate::azure::credential_sources()
                        ))
                        .with_code(f.code()),
                        _ => f,
                    }
                })?;
            let name_of = |id: &String| {
                hosts
                    .iter()
                    .find(|(_, i)| i == id)
                    .map(|(n, _)| n.clone())
                    .unwrap_or_else(|| id.clone())
            };
            reports.push(AdmissionReport {
                location: loc.clone(),
                group: a.group.clone(),
                security_group: a.rule.as_ref().map(|r| r.security_group.clone()),
                rule: a.rule.as_ref().map(|r| r.name.clone()),
                priority: a.rule.as_ref().map(|r| r.priority),
                sources: sources.to_vec(),
                readmitted: a.readmitted.iter().map(name_of).collect(),
                absent: a.missing.iter().map(name_of).collect(),
            });
        }
        Ok(reports)
    }

    /// Deletes the cloud host's VM (with its disk, interface, security group and address) and
    /// confirms it gone: `Ok` once the cloud holds nothing of it, else what it still holds.
    pub(crate) async fn delete_vm(&self, vm_id: &str) -> Result<(), String> {
        match self.provider.delete(vm_id).await {
            Ok(true) => {}
            Ok(false) => return Err(format!("VM {vm_id} (the delete did not finish)")),
            Err(Error::Leftovers { left, .. }) if !left.is_empty() => return Err(left.join(", ")),
            Err(e) => {
                return Err(format!(
                    "VM {vm_id} and what belongs to it ({})",
                    self.cloud_error(&e)
                ))
            }
        }
        match self.provider.machine(vm_id).await {
            Ok(None) => Ok(()),
            Ok(Some(m)) => Err(format!("VM {vm_id} (still {})", power_word(&m))),
            Err(e) => Err(format!(
                "VM {vm_id} (its absence could not be confirmed: {})",
                self.cloud_error(&e)
            )),
        }
    }

    /// Removes the declared cloud host `name` as delete does: the VM and what belongs to it, then the
    /// registry entry (saved) and the fleet key. The caller holds the registry's lock.
    pub(crate) async fn remove_host(
        &self,
        registry: &mut Registry,
        name: &str,
        decl: &CloudDecl,
    ) -> Result<(), Failure> {
        // The VM id is the registry's, but the VM it names now may not be the one this home made
        // (on Azure the id is the name: deleted outside stado and made again by another home). A VM
        // carrying another home's label, or another owner's, is left alone.
        match self.provider.machine(&decl.vm_id).await {
            Ok(Some(m)) if m.labels.contains_key(HOME_LABEL) && !self.is_this_homes(&m) => {
                return Err(Failure::new(format!(
                    "{name} is still registered: its VM {} is not this stado home's ({}; this home is {}), so it was left alone",
                    decl.vm_id,
                    Self::whose(&m),
                    self.home.id()
                ))
                .with_code("not_this_home"))
            }
            Err(e @ Error::NotOwned { .. }) => {
                return Err(Failure::new(format!(
                    "{name} is still registered: its VM {} is not this stado home's ({e}), so it was left alone",
                    decl.vm_id
                ))
                .with_code("not_this_home"))
            }
            // Absent, this home's, made before homes had ids, or unreadable: delete_vm decides.
            _ => {}
        }
        if let Err(left) = self.delete_vm(&decl.vm_id).await {
            return Err(Failure::new(format!(
                "{name} is still registered because {} did not release everything: {left}; deleting it again retries",
                self.cloud_title()
            ))
            .with_code("leftovers"));
        }
        registry.remove_target(name);
        registry.save(&self.home)?;
        if let Some(sim) = &self.sim {
            let _ = sim.forget(name);
        }
        let left = keys::remove_host_files(&self.home, name);
        if !left.is_empty() {
            tracing::warn!(host = name, files = ?left, "could not remove the host's key files");
        }
        Ok(())
    }
}

/// The failure of admitting the fleet's addresses in `loc`. When the driver says the application
/// security group was not made (its step failed: nothing of the admission was made), the message
/// leads with those words and says them once. Any other failure (the subnet, its own security group,
/// a readmission, or a driver that does not say which step) is named as the admission's, never as the
/// group's: the group may well have been made. What the driver says the failure left is named; and
/// where no host of this home stands in `loc` (`first`), the group this admission may have made is
/// named too, since stado never deletes it.
fn admission_failure(e: &Error, loc: &str, first: bool, title: &str) -> Failure {
    let code = match e {
        Error::PermissionDenied { .. } => "denied",
        Error::Leftovers { error, .. } if error.kind() == orca::ErrorKind::PermissionDenied => {
            "denied"
        }
        _ => "failed",
    };
    let group = format!("{GROUP}-{loc}");
    let group_step = format!("the application security group {group} was not made");
    let text = e.to_string();
    let message = match (e, text.find(&format!("{group_step}: "))) {
        (Error::Leftovers { error, left }, _) => format!(
            "admitting the fleet's addresses on SSH in {loc} failed: {error}; {title} still holds: {}",
            left.join(", ")
        ),
        (_, Some(at)) => format!(
            "{group_step}: {}{}",
            &text[..at],
            &text[at + group_step.len() + 2..]
        ),
        (_, None) if first => format!(
            "admitting the fleet's addresses on SSH in {loc} failed: {text}; the application security group {group} may stand: an admission makes it first, and stado keeps it (one per location, never deleted)"
        ),
        (_, None) => format!("admitting the fleet's addresses on SSH in {loc} failed: {text}"),
    };
    Failure::new(message).with_code(code)
}

/// What admitting the fleet's addresses in one location did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AdmissionReport {
    /// The location.
    pub location: String,
    /// The admission group's id (the application security group).
    pub group: String,
    /// The subnet's own security group, when it has one.
    pub security_group: Option<String>,
    /// The rule on it.
    pub rule: Option<String>,
    /// The rule's priority.
    pub priority: Option<u32>,
    /// The addresses admitted.
    pub sources: Vec<String>,
    /// The declared hosts readmitted.
    pub readmitted: Vec<String>,
    /// Declared hosts whose VM is absent.
    pub absent: Vec<String>,
}

impl AdmissionReport {
    /// One line for a person.
    pub fn line(&self) -> String {
        let mut s = format!(
            "admission in {}: {} on SSH to the application security group {}",
            self.location,
            self.sources.join(", "),
            self.group
        );
        match (&self.security_group, &self.rule, self.priority) {
            (Some(g), Some(r), Some(p)) => {
                s.push_str(&format!("; rule {r} at priority {p} on {g}"))
            }
            _ => s.push_str("; the subnet carries no security group of its own"),
        }
        if !self.readmitted.is_empty() {
            s.push_str(&format!("; readmitted {}", self.readmitted.join(", ")));
        }
        if !self.absent.is_empty() {
            s.push_str(&format!("; absent: {}", self.absent.join(", ")));
        }
        s
    }
}

/// The power state word of a VM: running, deallocated, stopped, starting, ...
pub fn power_word(m: &orca::Machine) -> String {
    match m.status {
        Status::Running => "running".into(),
        Status::Stopped if m.cloud_status.to_ascii_lowercase().contains("stopped") => {
            "stopped".into()
        }
        Status::Stopped => "deallocated".into(),
        other => other.as_str().into(),
    }
}

/// `address` as a CIDR block of one address.
pub fn cidr(address: &str) -> String {
    match address.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(a)) => format!("{a}/32"),
        Ok(std::net::IpAddr::V6(a)) => format!("{a}/128"),
        Err(_) => address.to_string(),
    }
}

/// An amount of USD as stado prints it: two decimals, or up to four when the cents do not say it all.
pub fn usd(x: f64) -> String {
    let four = format!("{x:.4}");
    let trimmed = four.trim_end_matches('0');
    let decimals = trimmed.split_once('.').map(|(_, d)| d.len()).unwrap_or(0);
    if decimals <= 2 {
        format!("{x:.2}")
    } else {
        trimmed.to_string()
    }
}

pub(crate) fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        format!("{}...", s.chars().take(n).collect::<String>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usd_shows_cents_or_the_fraction_of_a_cent() {
        assert_eq!(usd(100.0), "100.00");
        assert_eq!(usd(0.5), "0.50");
        assert_eq!(usd(0.0832), "0.0832");
        assert_eq!(usd(0.1664), "0.1664");
        assert_eq!(usd(99.8336), "99.8336");
        assert_eq!(usd(20.0), "20.00");
    }

    #[test]
    fn bindings_map_onto_the_azure_drivers_keys_and_credentials_come_from_the_environment() {
        let mut p = Profile::default();
        p.set("azure.subscription_id", "sub-1").unwrap();
        p.set("azure.vm_username", "stado").unwrap();
        p.set(
            "azure.image_urn",
            "Canonical:ubuntu-24_04-lts:server:latest",
        )
        .unwrap();
        let env = |k: &str| (k == "AZURE_CLIENT_SECRET").then(|| "hunter2".to_string());
        let s = azure_settings(&p, env);
        assert_eq!(s.get("ORCA_AZURE_SUBSCRIPTION_ID"), Some("sub-1"));
        assert_eq!(s.get("ORCA_AZURE_ADMIN_USER"), Some("stado"));
        assert_eq!(
            s.get("ORCA_AZURE_IMAGE"),
            Some("Canonical:ubuntu-24_04-lts:server:latest")
        );
        assert_eq!(s.get("AZURE_CLIENT_SECRET"), Some("hunter2"));
        assert!(!format!("{s:?}").contains("hunter2"));
    }
}
