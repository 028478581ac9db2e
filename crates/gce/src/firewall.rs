//! The VPC firewall rules shed's firewall check reads, and the one change it makes (a rule's source
//! ranges): this crate's own API, not part of the core trait.

use reqwest::Method;
use serde::Deserialize;
use serde_json::json;

use orca_machines::{Error, Result};

use crate::client::{operation_error, random_uuid};
use crate::model::{last_segment, Operation};
use crate::provider::GceProvider;

/// One protocol and its ports in a rule's `allowed` or `denied` list.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct FirewallPorts {
    /// `tcp`, `udp`, `icmp`, `all`, ... or a protocol number.
    #[serde(rename = "IPProtocol", default)]
    pub protocol: String,
    /// Ports and ranges (`22`, `8000-8080`); empty for every port.
    #[serde(default)]
    pub ports: Vec<String>,
}

/// A VPC firewall rule as Compute Engine reports it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FirewallRule {
    /// The rule's name.
    pub name: String,
    /// The network's URL.
    #[serde(default)]
    pub network: String,
    /// `INGRESS` or `EGRESS`.
    #[serde(default = "ingress")]
    pub direction: String,
    /// Whether the rule is disabled.
    #[serde(default)]
    pub disabled: bool,
    /// Its priority (lower wins).
    #[serde(default = "default_priority")]
    pub priority: i64,
    /// What it allows.
    #[serde(default)]
    pub allowed: Vec<FirewallPorts>,
    /// What it denies.
    #[serde(default)]
    pub denied: Vec<FirewallPorts>,
    /// Source address ranges (ingress).
    #[serde(default)]
    pub source_ranges: Vec<String>,
    /// Source network tags (ingress).
    #[serde(default)]
    pub source_tags: Vec<String>,
    /// Source service accounts (ingress).
    #[serde(default)]
    pub source_service_accounts: Vec<String>,
    /// Destination address ranges (egress).
    #[serde(default)]
    pub destination_ranges: Vec<String>,
    /// The network tags it applies to; with no target tags nor accounts it applies to every instance.
    #[serde(default)]
    pub target_tags: Vec<String>,
    /// The service accounts it applies to.
    #[serde(default)]
    pub target_service_accounts: Vec<String>,
}

fn ingress() -> String {
    "INGRESS".into()
}

fn default_priority() -> i64 {
    1000
}

impl FirewallRule {
    /// The network's name (the last segment of [`FirewallRule::network`]).
    pub fn network_name(&self) -> &str {
        last_segment(&self.network)
    }
}

/// A VPC network as Compute Engine reports it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Network {
    /// Its name.
    pub name: String,
    /// Auto mode (`true`, like a project's `default` network) or custom mode.
    #[serde(default)]
    pub auto_create_subnetworks: bool,
    /// Its subnets' URLs.
    #[serde(default)]
    pub subnetworks: Vec<String>,
    /// Its URL.
    #[serde(default)]
    pub self_link: String,
}

fn check_rule_name(name: &str) -> Result<()> {
    if crate::config::valid_resource_name(name) {
        Ok(())
    } else {
        Err(Error::invalid(
            "firewall",
            format!(
                "a rule name is 1 to 63 of a-z, 0-9 and '-', starting with a letter; got {name:?}"
            ),
        ))
    }
}

fn check_ipv4_cidr(r: &str) -> Result<()> {
    let (ip, len) = r.split_once('/').unwrap_or((r, "32"));
    let ok = ip.split('.').count() == 4
        && ip
            .split('.')
            .all(|o| o.parse::<u8>().is_ok() && !o.is_empty())
        && len.parse::<u8>().is_ok_and(|l| l <= 32);
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(
            "source_ranges",
            format!("an IPv4 CIDR like 203.0.113.7/32; got {r:?}"),
        ))
    }
}

impl GceProvider {
    /// The firewall rule `name` of the project, or `None` when there is none.
    pub async fn firewall_rule(&self, name: &str) -> Result<Option<FirewallRule>> {
        check_rule_name(name)?;
        let path = self.client().global(&format!("firewalls/{name}"));
        self.client().get_opt("firewalls.get", &path).await
    }

    /// Every VPC firewall rule of the configured network (all pages; the project's rules are read and
    /// those of other networks dropped).
    pub async fn firewall_rules(&self) -> Result<Vec<FirewallRule>> {
        self.firewall_rules_of(&self.config().network.clone()).await
    }

    /// Every VPC firewall rule of `network`.
    pub async fn firewall_rules_of(&self, network: &str) -> Result<Vec<FirewallRule>> {
        check_rule_name(network)
            .map_err(|_| Error::invalid("network", format!("not a network name: {network:?}")))?;
        let path = self.client().global("firewalls");
        let all: Vec<FirewallRule> = self
            .client()
            .list_all("firewalls.list", &path, &[], self.config().page_size)
            .await?;
        Ok(all
            .into_iter()
            .filter(|r| r.network_name() == network)
            .collect())
    }

    /// Sets rule `name`'s source ranges to `ranges` (IPv4 CIDRs), changing nothing else (a JSON merge
    /// patch), follows the global operation, and answers the rule as read back.
    pub async fn set_firewall_source_ranges(
        &self,
        name: &str,
        ranges: &[&str],
    ) -> Result<FirewallRule> {
        check_rule_name(name)?;
        if ranges.is_empty() {
            return Err(Error::invalid("source_ranges", "at least one range"));
        }
        for r in ranges {
            check_ipv4_cidr(r)?;
        }
        let path = self.client().global(&format!("firewalls/{name}"));
        let query = [("requestId", random_uuid())];
        let body = json!({"sourceRanges": ranges});
        let op: Operation = self
            .client()
            .call("firewalls.patch", Method::PATCH, &path, &query, Some(&body))
            .await?;
        let done = self.client().wait(op).await?;
        if let Some(e) = operation_error(&done) {
            return Err(e);
        }
        self.firewall_rule(name)
            .await?
            .ok_or_else(|| Error::not_found(format!("firewall rule {name}")))
    }

    /// The configured network.
    pub async fn network(&self) -> Result<Network> {
        let name = self.config().network.clone();
        let path = self.client().global(&format!("networks/{name}"));
        self.client()
            .get_opt("networks.get", &path)
            .await?
            .ok_or_else(|| Error::not_found(format!("network {name}")))
    }
}
