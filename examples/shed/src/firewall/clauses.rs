//! The clauses of the check, in the order of its table: the rule itself (exists, network,
//! direction, enabled, tcp:22 only, target tag, sources by address only, the expected sources),
//! then no stray rule, not the default network, and (mode auto) a known public address. Every
//! clause that fails is kept; the first one is the reason.

use orca::{FirewallRule, Network, Timestamp};

use super::auto::Answers;
use super::{list, CheckState, FirewallCheck, FwReason, Outcome};
use crate::clock::go_duration;
use crate::config::FirewallMode;
use crate::netaddr::normalise;

/// What one check read from the cloud.
pub(super) struct Read {
    /// The rule `shed-<environment>-ssh`, if it exists.
    pub(super) rule: Option<FirewallRule>,
    /// Every rule of the project.
    pub(super) rules: Vec<FirewallRule>,
    /// The network the server puts VMs on.
    pub(super) network: Network,
    /// Its name as the provider knows it.
    pub(super) net_name: String,
}

/// Clauses that failed, each with its message.
type Failed = Vec<(FwReason, String)>;

fn ports(v: &[orca::FirewallPorts]) -> Vec<String> {
    v.iter()
        .flat_map(|p| {
            if p.ports.is_empty() {
                vec![p.protocol.to_ascii_lowercase()]
            } else {
                p.ports
                    .iter()
                    .map(|port| format!("{}:{port}", p.protocol.to_ascii_lowercase()))
                    .collect()
            }
        })
        .collect()
}

/// A network's short name, whether it is given as a name or as a path (`.../networks/<name>`).
fn last_segment(s: &str) -> &str {
    s.trim_end_matches('/').rsplit('/').next().unwrap_or(s)
}

impl FirewallCheck {
    /// Every clause of the check against what was read; `expected` is what the sources must be
    /// (`None`: not compared, mode any; empty: unknown, mode auto without an address).
    pub(super) fn clauses(
        &self,
        read: &Read,
        expected: &Option<Vec<String>>,
        st: &CheckState,
        now: Timestamp,
        answers: Option<&Answers>,
    ) -> Outcome {
        let mut failed = Failed::new();
        let rule = read.rule.as_ref();
        match rule {
            None => failed.push((
                FwReason::RuleMissing,
                format!(
                    "firewall rule {} does not exist: expected an ingress rule on network {} allowing tcp:22 to the tag {}, found no rule of that name",
                    self.want.rule_name, read.net_name, self.want.tag
                ),
            )),
            Some(r) => {
                self.rule_clauses(r, &read.net_name, &mut failed);
                self.sources_clause(r, expected, &mut failed);
            }
        }
        self.stray_clause(read, &mut failed);
        default_network_clause(&read.network, &mut failed);
        if let Some(m) = self.address_unknown(expected, st, answers) {
            failed.push((FwReason::AddressUnknown, m));
        }
        Outcome {
            at: now,
            passed: failed.is_empty(),
            reason: failed.first().map(|(r, _)| *r),
            failed: failed.iter().map(|(r, _)| *r).collect(),
            message: failed.first().map(|(_, m)| m.clone()).unwrap_or_default(),
            sources: rule.map(|r| r.source_ranges.clone()).unwrap_or_default(),
        }
    }

    /// The rule's own shape: network, direction, enabled, exactly tcp:22, exactly the tag, and
    /// sources by address only.
    fn rule_clauses(&self, r: &FirewallRule, net_name: &str, failed: &mut Failed) {
        let name = &self.want.rule_name;
        let tag = &self.want.tag;
        if last_segment(&r.network) != last_segment(net_name) {
            failed.push((
                FwReason::RuleNetwork,
                format!("firewall rule {name} is on the wrong network: expected network {net_name}, found network {}", last_segment(&r.network)),
            ));
        }
        if !r.is_ingress() {
            failed.push((
                FwReason::RuleDirection,
                format!("firewall rule {name} is not an ingress rule: expected direction INGRESS, found direction {}", r.direction),
            ));
        }
        if r.disabled {
            failed.push((
                FwReason::RuleDisabled,
                format!("firewall rule {name} is disabled: expected it enabled, found it disabled"),
            ));
        }
        let allowed = ports(&r.allowed);
        if allowed != ["tcp:22"] || !r.denied.is_empty() {
            failed.push((
                FwReason::RuleAllow,
                format!(
                    "firewall rule {name} allows the wrong traffic: expected allowed [tcp:22] and nothing else, found allowed {} denied {}",
                    list(&allowed),
                    list(&ports(&r.denied))
                ),
            ));
        }
        if r.target_tags != [tag.clone()] || !r.target_service_accounts.is_empty() {
            failed.push((
                FwReason::RuleTarget,
                format!(
                    "firewall rule {name} targets the wrong instances: expected target tags [{tag}], found target tags {} target service accounts {}",
                    list(&r.target_tags),
                    list(&r.target_service_accounts)
                ),
            ));
        }
        if !r.source_tags.is_empty() || !r.source_service_accounts.is_empty() {
            failed.push((
                FwReason::RuleSourceKind,
                format!(
                    "firewall rule {name} admits by more than address: expected source ranges only, found source tags {} source service accounts {}",
                    list(&r.source_tags),
                    list(&r.source_service_accounts)
                ),
            ));
        }
    }

    /// The rule's sources against the expected set. Mode any compares none; mode auto cannot while
    /// its address is unknown (that is the last clause, address_unknown).
    fn sources_clause(
        &self,
        r: &FirewallRule,
        expected: &Option<Vec<String>>,
        failed: &mut Failed,
    ) {
        let Some(want) = expected.as_ref().filter(|w| !w.is_empty()) else {
            return;
        };
        let mut found: Vec<String> = r.source_ranges.iter().map(|s| normalise(s)).collect();
        found.sort();
        found.dedup();
        let mut want = want.clone();
        want.sort();
        if found == want {
            return;
        }
        let mut m = format!(
            "firewall rule {} admits the wrong sources: expected source ranges {}, found source ranges {}",
            self.want.rule_name,
            list(&want),
            list(&r.source_ranges)
        );
        if self.want.mode == FirewallMode::Auto {
            m = format!("{m} (the server's public address is {})", want.join(" "));
        }
        failed.push((FwReason::RuleSources, m));
    }

    /// Another enabled ingress allow rule on the network that applies to the sheds' tag or to every
    /// instance (disabled, deny, egress and service-account-only rules do not count).
    fn stray_clause(&self, read: &Read, failed: &mut Failed) {
        let (name, tag, net_name) = (&self.want.rule_name, &self.want.tag, &read.net_name);
        let strays: Vec<&FirewallRule> = read
            .rules
            .iter()
            .filter(|r| r.name != *name)
            .filter(|r| last_segment(&r.network) == last_segment(net_name))
            .filter(|r| !r.disabled && r.is_ingress() && !r.allowed.is_empty())
            .filter(|r| {
                r.target_tags.contains(tag)
                    || (r.target_tags.is_empty() && r.target_service_accounts.is_empty())
            })
            .collect();
        let Some(s) = strays.first() else { return };
        let names: Vec<String> = strays.iter().map(|r| r.name.clone()).collect();
        failed.push((
            FwReason::StrayRule,
            format!(
                "firewall rule {} also admits traffic to the sheds: expected no other enabled ingress allow rule on network {net_name} applying to the tag {tag} or to every instance, found {} (the first allows {} from {} to {})",
                s.name,
                list(&names),
                list(&ports(&s.allowed)),
                list(&s.source_ranges),
                if s.target_tags.is_empty() { "every instance".to_string() } else { list(&s.target_tags) }
            ),
        ));
    }

    /// Mode auto without an address the echo services agreed on (the clause `address_unknown`): why.
    pub(super) fn address_unknown(
        &self,
        expected: &Option<Vec<String>>,
        st: &CheckState,
        answers: Option<&Answers>,
    ) -> Option<String> {
        if self.want.mode != FirewallMode::Auto || !expected.as_ref().is_some_and(Vec::is_empty) {
            return None;
        }
        let never = answers.is_some() && st.agreement.is_none();
        Some(format!(
            "the server does not know its public address: the echo services have not agreed on it {}: expected at least two services reporting the same public IPv4 address, found: {}",
            if never { "since the server started".to_string() } else { format!("for {}", go_duration(self.timings.address_trust)) },
            answers.map(Answers::describe).unwrap_or_default()
        ))
    }
}

/// The project's default network (or any auto-mode network) gives every VM routes and rules the
/// check does not cover.
fn default_network_clause(network: &Network, failed: &mut Failed) {
    if network.name == "default" || network.auto_create_subnetworks {
        failed.push((
            FwReason::DefaultNetwork,
            format!(
                "network {} is the project's default network: expected a custom-mode network of the environment's own, found {} ({} mode)",
                network.name,
                network.name,
                if network.auto_create_subnetworks { "auto" } else { "custom" }
            ),
        ));
    }
}
