//! The fleet's addresses and their admission on SSH, which create and reap share: each
//! `cloud_hosts.admit_from` host is asked for its public address over its host channel, and exactly
//! those addresses are admitted on port 22 in each location, every declared cloud host readmitted.

use std::collections::BTreeSet;

use orca::Error;
use serde::Serialize;

use crate::channel::commands;
use crate::cloud::{truncate, Stado, GROUP, TITLE};
use crate::error::Failure;
use crate::profile::Profile;
use crate::registry::{CloudState, Egress, Held, Registry, Target};

/// The hint that names the fleet hosts cloud hosts admit.
const ADMIT_FROM_HINT: &str = "stado registry set --path cloud_hosts --value '{\"admit_from\":[\"build-host\"]}' names the fleet hosts that reach cloud hosts";

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

/// One admit_from host's answer: its address, or why it gave none; and when it came.
type Answer = (String, Result<String, String>, orca::Timestamp);

impl Stado {
    /// Asks each `cloud_hosts.admit_from` host for its public address and records the answers in
    /// `cloud_hosts.egress` (saved); the sources to admit, or why not.
    pub(crate) async fn measure_egress(
        &self,
        profile: &Profile,
        registry: &mut Held,
    ) -> Result<Vec<String>, Failure> {
        let hosts = admit_from(registry)?;
        let api = profile.get("api.url").ok_or_else(|| {
            Failure::refused(
                "the profile declares no api.url, the product site that tells a fleet host its public address (<api.url>/api/egress); stado config set api.url declares it",
            )
        })?;
        let endpoints = hosts
            .iter()
            .map(|h| fleet_endpoint(registry, h))
            .collect::<Result<Vec<_>, _>>()?;
        let answers = self.ask_egress(&endpoints, &api).await;
        // What was read is kept even when another host did not answer; hosts no longer named go.
        let egress = &mut registry.cloud_hosts.egress;
        egress.retain(|k, _| hosts.contains(k));
        let mut failure = None;
        let mut sources = BTreeSet::new();
        for (name, answer, read_at) in answers {
            match answer {
                Ok(address) => {
                    sources.insert(cidr(&address));
                    egress.insert(name, Egress { address, read_at });
                }
                Err(cause) if failure.is_none() => {
                    failure = Some(Failure::new(format!(
                        "the admit_from host {name} did not tell its public address (curl of {api}/api/egress over its host channel): {cause}"
                    )));
                }
                Err(_) => {}
            }
        }
        registry.save()?;
        failure.map_or_else(|| Ok(sources.into_iter().collect()), Err)
    }

    /// Asks every host of `endpoints` at once for the address `<api>/api/egress` sees it at. Each
    /// answer is stamped when it arrives: the time its address was read, not the time the slowest
    /// host answered.
    async fn ask_egress(&self, endpoints: &[&Target], api: &str) -> Vec<Answer> {
        let command = commands::egress(api);
        futures::future::join_all(endpoints.iter().map(|ep| {
            let command = command.clone();
            async move {
                let answer = match self.channel.run(ep, &command, self.timing.command).await {
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
                (ep.name.clone(), answer, chrono::Utc::now())
            }
        }))
        .await
    }

    /// The provider's SSH admission, which cloud hosts need.
    pub(crate) fn ssh_admission(&self) -> Result<&dyn orca::SshAdmission, Failure> {
        self.provider.ssh_admission().ok_or_else(|| {
            Failure::new(format!(
                "the {} provider cannot admit addresses on SSH, which cloud hosts need",
                self.kind
            ))
        })
    }

    /// Admits `sources` on SSH in `first` (when given), then wherever a declared cloud host stands,
    /// readmitting the declared cloud hosts of each location.
    pub(crate) async fn admit(
        &self,
        registry: &Registry,
        first: Option<&str>,
        sources: &[String],
    ) -> Result<Vec<AdmissionReport>, Failure> {
        let adm = self.ssh_admission()?;
        let mut locations: Vec<String> = first.into_iter().map(str::to_string).collect();
        for (_, c) in registry.cloud_hosts(&self.kind) {
            if !locations.contains(&c.location) {
                locations.push(c.location.clone());
            }
        }
        let mut reports = Vec::new();
        for loc in &locations {
            let hosts: Vec<(String, String)> = registry
                .cloud_hosts(&self.kind)
                .into_iter()
                // A host still `creating` has no VM id yet; its spec admits the group already.
                .filter(|(_, c)| &c.location == loc && c.state != CloudState::Creating)
                .map(|(t, c)| (t.name.clone(), c.vm_id.clone()))
                .collect();
            let mut ids: Vec<String> = hosts.iter().map(|(_, id)| id.clone()).collect();
            // A declared host's VM that is another owner's now (deleted outside stado, its name
            // taken since by another home) is no longer this home's to readmit: it is left out and
            // reported absent, so that it does not stop the admission of the others.
            let mut not_ours = Vec::new();
            let a = loop {
                match adm.admit_ssh(GROUP, loc, sources, &ids).await {
                    Err(orca::Error::NotOwned { id, .. }) if ids.contains(&id) => {
                        ids.retain(|i| i != &id);
                        not_ours.push(id);
                    }
                    r => break r.map_err(|e| self.admission_failure(&e, loc, hosts.is_empty()))?,
                }
            };
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
                absent: a.missing.iter().chain(&not_ours).map(name_of).collect(),
            });
        }
        Ok(reports)
    }

    /// The failure of admitting the fleet's addresses in `loc`. When the driver says the application
    /// security group was not made (its step failed: nothing of the admission was made), the message
    /// leads with those words and says them once. Any other failure (the subnet, its own security
    /// group, a readmission, or a driver that does not say which step) is named as the admission's,
    /// never as the group's: the group may well have been made. What the driver says the failure left
    /// is named; and where no host of this home stands in `loc` (`first`), the group this admission
    /// may have made is named too, since stado never deletes it.
    fn admission_failure(&self, e: &Error, loc: &str, first: bool) -> Failure {
        let code = match e {
            Error::PermissionDenied { .. } => "denied",
            Error::Leftovers { error, .. } if error.kind() == orca::ErrorKind::PermissionDenied => {
                "denied"
            }
            _ => "failed",
        };
        let group = format!("{GROUP}-{loc}");
        let group_step = format!("the application security group {group} was not made");
        let failed = format!("admitting the fleet's addresses on SSH in {loc} failed");
        let text = e.to_string();
        let mut message = match (e, text.find(&format!("{group_step}: "))) {
            (Error::Leftovers { error, left }, _) => format!(
                "{failed}: {error}; {TITLE} still holds: {}",
                left.join(", ")
            ),
            (_, Some(at)) => format!(
                "{group_step}: {}{}",
                &text[..at],
                &text[at + group_step.len() + 2..]
            ),
            (_, None) if first => format!(
                "{failed}: {text}; the application security group {group} may stand: an admission makes it first, and stado keeps it (one per location, never deleted)"
            ),
            (_, None) => format!("{failed}: {text}"),
        };
        if let Some(hint) = self.credential_hint(e) {
            message = format!("{message}; {hint}");
        }
        Failure::new(message).with_code(code)
    }
}

/// The hosts `cloud_hosts.admit_from` names, or the refusal when it names none.
fn admit_from(registry: &Registry) -> Result<Vec<String>, Failure> {
    let why = match &registry.cloud_hosts.admit_from {
        Some(h) if !h.is_empty() => return Ok(h.clone()),
        Some(_) => "empty",
        None => "absent",
    };
    Err(Failure::refused(format!(
        "the registry names no host whose address a cloud host admits (cloud_hosts.admit_from is {why}); {ADMIT_FROM_HINT}"
    )))
}

/// How to reach the admit_from host `h`: a registered target that is no cloud host.
fn fleet_endpoint<'a>(registry: &'a Registry, h: &str) -> Result<&'a Target, Failure> {
    match registry.target(h) {
        Some(t) if t.cloud.is_none() => Ok(t),
        Some(_) => Err(Failure::refused(format!(
            "cloud_hosts.admit_from names {h}, a cloud host; it names the fleet hosts that reach cloud hosts"
        ))),
        None => Err(Failure::refused(format!(
            "cloud_hosts.admit_from names {h}, which is not a registered target; stado registry set --path targets.{h} --value '{{\"address\":\"...\",\"user\":\"...\",\"known_hosts\":\"...\"}}' registers it"
        ))),
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
