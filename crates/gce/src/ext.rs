//! The extensions Compute Engine answers through `dyn Provider`: label changes on an existing machine
//! ([`MachineLabels`]: `instances.setLabels` with the label fingerprint) and the VPC firewall rules of
//! the machines' network ([`FirewallRules`]: read, and patch one rule's source ranges).

use async_trait::async_trait;
use orca_machines::ext::check_ipv4_ranges;
use orca_machines::labels::Labels;
use orca_machines::spec::{validate_label_key_to_remove, validate_labels};
use orca_machines::{
    Error, FirewallPorts, FirewallRule, FirewallRules, Machine, MachineLabels, Network, Result,
};
use reqwest::Method;
use serde_json::json;

use crate::client::{CONDITION_NOT_MET, has_code, request_id};
use crate::config::valid_resource_name;
use crate::model::{self, Operation, last_segment};
use crate::provider::{GceProvider, to_machine};

/// How often a label change is tried when another writer changes the labels in between.
const LABEL_ATTEMPTS: u32 = 5;

#[async_trait]
impl MachineLabels for GceProvider {
    /// `instances.setLabels` with the instance's `labelFingerprint`: a change by another writer in
    /// between answers 412 `conditionNotMet`, and the driver reads the labels again and retries (up
    /// to five times), so that no change is lost.
    async fn set_labels(&self, id: &str, set: &Labels, remove: &[String]) -> Result<Machine> {
        validate_labels(set)?;
        for k in remove {
            validate_label_key_to_remove(k)?;
        }
        self.parse_id(id)?;
        for attempt in 1..=LABEL_ATTEMPTS {
            let (r, vm) = self.owned_existing(id).await?;
            let mut labels = vm.labels.clone();
            for k in remove {
                labels.remove(k);
            }
            labels.extend(set.iter().map(|(k, v)| (k.clone(), v.clone())));
            let body = json!({"labels": labels, "labelFingerprint": vm.label_fingerprint});
            match self
                .instance_op("instances.setLabels", &r, "setLabels", Some(&body))
                .await
            {
                Ok(_) => {
                    let (_, vm) = self.owned_existing(id).await?;
                    return Ok(to_machine(&vm, self.project()));
                }
                Err(e) if has_code(&e, CONDITION_NOT_MET) && attempt < LABEL_ATTEMPTS => {
                    tracing::debug!(id, attempt, "labels changed underneath; reading again");
                }
                Err(e) => return Err(e),
            }
        }
        unreachable!("the last attempt returns")
    }
}

fn check_rule_name(name: &str) -> Result<()> {
    if valid_resource_name(name) {
        Ok(())
    } else {
        Err(Error::invalid(
            "name",
            format!(
                "a firewall rule name is 1 to 63 of a-z, 0-9 and '-', starting with a letter; got {name:?}"
            ),
        ))
    }
}

/// A rule's `network` (a URL, or a path or name) as `project/name` when it names a project, else
/// the name.
fn network_of(network: &str) -> String {
    let rest = network.find("projects/").map_or(network, |i| &network[i..]);
    match rest.split('/').collect::<Vec<_>>().as_slice() {
        ["projects", project, "global", "networks", name] => format!("{project}/{name}"),
        _ => last_segment(network).to_string(),
    }
}

impl GceProvider {
    /// Whether a rule's `network` is the provider's network: its name, in the provider's project
    /// when the rule names a project.
    fn is_own_network(&self, network: &str) -> bool {
        let name = self.network_name();
        let own = format!("{}/{name}", self.project());
        let of = network_of(network);
        of == own || (of == name && !network.contains("projects/"))
    }
}

fn ports(p: &[model::FirewallPorts]) -> Vec<FirewallPorts> {
    p.iter()
        .map(|x| FirewallPorts::new(&x.protocol, x.ports.iter().cloned()))
        .collect()
}

fn to_rule(f: model::Firewall) -> FirewallRule {
    let mut r = FirewallRule::new(f.name, last_segment(&f.network));
    r.direction = f.direction;
    r.disabled = f.disabled;
    r.priority = f.priority;
    r.allowed = ports(&f.allowed);
    r.denied = ports(&f.denied);
    r.source_ranges = f.source_ranges;
    r.source_tags = f.source_tags;
    r.source_service_accounts = f.source_service_accounts;
    r.destination_ranges = f.destination_ranges;
    r.target_tags = f.target_tags;
    r.target_service_accounts = f.target_service_accounts;
    r
}

#[async_trait]
impl FirewallRules for GceProvider {
    fn network_name(&self) -> String {
        self.config().network.clone()
    }

    /// `networks.get`.
    async fn network(&self) -> Result<Network> {
        let name = self.network_name();
        let path = self.client().global(&format!("networks/{name}"));
        let n: model::Network = self
            .client()
            .get_opt("networks.get", &path)
            .await?
            .ok_or_else(|| Error::not_found(format!("network {name}")))?;
        let mut net = Network::new(n.name);
        net.auto_create_subnetworks = n.auto_create_subnetworks;
        net.subnetworks = n
            .subnetworks
            .iter()
            .map(|s| last_segment(s).to_string())
            .collect();
        Ok(net)
    }

    /// `firewalls.get`: `None` when there is no rule of that name.
    async fn rule(&self, name: &str) -> Result<Option<FirewallRule>> {
        check_rule_name(name)?;
        let path = self.client().global(&format!("firewalls/{name}"));
        let f: Option<model::Firewall> = self.client().get_opt("firewalls.get", &path).await?;
        Ok(f.map(to_rule))
    }

    /// Every page of `firewalls.list`, keeping the rules of the provider's network.
    async fn rules(&self) -> Result<Vec<FirewallRule>> {
        let path = self.client().global("firewalls");
        let all: Vec<model::Firewall> = self
            .client()
            .list_all("firewalls.list", &path, &[], self.config().page_size)
            .await?;
        Ok(all
            .into_iter()
            .filter(|f| self.is_own_network(&f.network))
            .map(to_rule)
            .collect())
    }

    /// `firewalls.get`, then, for a rule of the provider's network only, `firewalls.patch` with the
    /// JSON merge patch `{"sourceRanges": [...]}` (nothing else), the global operation followed to
    /// its end, and the rule read back. A rule of another network is refused (`InvalidSpec`) and left
    /// as it is; a missing one is `NotFound`.
    async fn set_source_ranges(&self, name: &str, ranges: &[String]) -> Result<FirewallRule> {
        check_rule_name(name)?;
        check_ipv4_ranges(ranges)?;
        let path = self.client().global(&format!("firewalls/{name}"));
        let current: model::Firewall = self
            .client()
            .call("firewalls.get", Method::GET, &path, &[], None)
            .await?;
        if !self.is_own_network(&current.network) {
            return Err(Error::invalid(
                "name",
                format!(
                    "firewall rule {name} is on network {}, not on this provider's network {}; \
                     not changed",
                    network_of(&current.network),
                    self.network_name()
                ),
            ));
        }
        let query = [("requestId", request_id())];
        let body = json!({ "sourceRanges": ranges });
        let op: Operation = self
            .client()
            .call("firewalls.patch", Method::PATCH, &path, &query, Some(&body))
            .await?;
        self.client().finish(op, "firewalls.patch").await?;
        self.rule(name)
            .await?
            .ok_or_else(|| Error::not_found(format!("firewall rule {name}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rules_network_names_its_project() {
        let url = "https://www.googleapis.com/compute/v1/projects/p-1/global/networks/orca-net";
        assert_eq!(network_of(url), "p-1/orca-net");
        assert_eq!(network_of("projects/p-2/global/networks/x"), "p-2/x");
        assert_eq!(network_of("orca-net"), "orca-net");
    }
}
