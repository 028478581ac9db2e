//! [`Stado`]: the cloud host commands' shared state (home, provider, host channel) and what the
//! commands share: the gates, measuring the fleet's addresses, admitting them on SSH, deleting a host.

use std::sync::Arc;
use std::time::Duration;

use orca::{Error, Provider};

use crate::channel::{FakeFleet, HostChannel, OpenSsh};
use crate::error::Failure;
use crate::home::Home;
use crate::profile::{Profile, Selection};

/// The pool (orca's label) every cloud host is made in.
pub const POOL: &str = "stado-cloud-hosts";
/// The SSH admission group: the application security group `stado-cloud-hosts-<location>` and the
/// subnet security group's rule `stado-cloud-hosts`.
pub const GROUP: &str = "stado-cloud-hosts";
/// The label every VM a home makes carries: the home's id. A VM that does not carry this home's is
/// never adopted or deleted by it.
pub const HOME_LABEL: &str = "stado-home";
/// The cloud's name in messages. stado's messages name Azure; `fake` is Azure simulated, and speaks
/// the same words.
pub const TITLE: &str = "Azure";
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
                let channel = Arc::new(fleet.clone());
                Ok(Stado {
                    sim: Some(fleet),
                    selection,
                    ..Stado::with(home, kind, Arc::new(provider), channel)
                })
            }
            "azure" => {
                let settings = crate::azure::settings(&profile, |k| std::env::var(k).ok());
                let provider = orca::of_with("azure", &owner, &settings)
                    .await
                    .map_err(|e| {
                        Failure::new(format!("the Azure provider could not be set up: {e}"))
                    })?;
                Ok(Stado {
                    selection,
                    timing: Timing::default(),
                    ..Stado::with(home, kind, provider, Arc::new(OpenSsh::default()))
                })
            }
            other => Err(Failure::new(format!("no provider {other:?} in this build"))),
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

    pub(crate) fn say(&self, line: &str) {
        if let Some(p) = &self.progress {
            p(line);
        }
    }

    /// An error of the cloud in words a person acts on: on Azure, a credential it refused (or none
    /// found) names every source of credentials stado tries.
    pub(crate) fn cloud_error(&self, e: &Error) -> String {
        match self.credential_hint(e) {
            Some(hint) => format!("{e}; {hint}"),
            None => e.to_string(),
        }
    }

    /// Where credentials come from, when `e` says the cloud refused (or found none of) them.
    pub(crate) fn credential_hint(&self, e: &Error) -> Option<String> {
        (self.kind == "azure" && e.kind() == orca::ErrorKind::Unauthenticated)
            .then(crate::azure::credential_sources)
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

    /// The registry under its write lock, refused at once when another stado holds it.
    pub(crate) fn lock_registry(&self) -> Result<crate::registry::Held, Failure> {
        crate::registry::Held::take(&self.home)
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

/// `items` joined by ", ", or `none` when there are none.
pub fn list_or_none<S: std::borrow::Borrow<str>>(items: &[S]) -> String {
    if items.is_empty() {
        "none".into()
    } else {
        items.join(", ")
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
}
