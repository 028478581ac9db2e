//! stado's network admission, as this crate's own API ([`AzureProvider::admit_ssh`]): the location's
//! application security group `stado-cloud-hosts-<location>`, and on the subnet's own network security
//! group (when it has one) the inbound rule `stado-cloud-hosts` admitting exactly the given addresses
//! to that application group only, on TCP 22, at the first priority from 100 that no other inbound rule
//! holds. Every other rule is left as it was: the rule is written as its own sub-resource
//! (`.../securityRules/stado-cloud-hosts`), never by rewriting the group.

use orca_machines::spec::validate_token;
use orca_machines::{Error, Result};
use reqwest::Method;
use serde_json::{json, Value};

use crate::client::NETWORK_API;
use crate::provider::AzureProvider;

/// The name stado gives the rule, and the prefix of its application security groups.
pub const STADO_NAME: &str = "stado-cloud-hosts";

/// The lowest priority a rule may take.
pub const FIRST_PRIORITY: u32 = 100;
/// The highest priority a rule may take.
pub const LAST_PRIORITY: u32 = 4096;

/// What [`AzureProvider::admit_ssh`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admission {
    /// The application security group's resource id.
    pub asg_id: String,
    /// The security group of the subnet and the rule's priority there; `None` when the subnet has no
    /// security group of its own.
    pub rule: Option<AdmissionRule>,
}

/// The rule written on the subnet's security group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdmissionRule {
    /// The security group's resource id.
    pub nsg_id: String,
    /// The rule's name.
    pub name: String,
    /// Its priority.
    pub priority: u32,
}

/// Checks an admitted source: an IPv4 or IPv6 address, or a CIDR block of one.
pub fn check_source(s: &str) -> Result<()> {
    let (addr, bits) = match s.split_once('/') {
        Some((a, b)) => (a, Some(b)),
        None => (s, None),
    };
    let ip: std::net::IpAddr = addr
        .parse()
        .map_err(|_| Error::invalid("sources", format!("not an IP address or CIDR: {s:?}")))?;
    if let Some(b) = bits {
        let max = if ip.is_ipv4() { 32 } else { 128 };
        match b.parse::<u8>() {
            Ok(n) if n <= max => {}
            _ => {
                return Err(Error::invalid(
                    "sources",
                    format!("bad prefix length in {s:?}"),
                ))
            }
        }
    }
    Ok(())
}

/// The first priority from [`FIRST_PRIORITY`] that no inbound rule other than `own` holds.
pub fn first_free_priority(rules: &[Value], own: &str) -> Option<u32> {
    let held: std::collections::BTreeSet<u64> = rules
        .iter()
        .filter(|r| !r["name"].as_str().unwrap_or("").eq_ignore_ascii_case(own))
        .filter(|r| {
            r["properties"]["direction"]
                .as_str()
                .unwrap_or("Inbound")
                .eq_ignore_ascii_case("Inbound")
        })
        .filter_map(|r| r["properties"]["priority"].as_u64())
        .collect();
    (FIRST_PRIORITY..=LAST_PRIORITY).find(|p| !held.contains(&u64::from(*p)))
}

impl AzureProvider {
    /// stado's admission of `sources` on SSH in `location` (see the module documentation).
    pub async fn admit_ssh(&self, location: &str, sources: &[String]) -> Result<Admission> {
        self.admit_ssh_named(STADO_NAME, location, sources).await
    }

    /// [`AzureProvider::admit_ssh`] with another name for the rule and the groups' prefix.
    pub async fn admit_ssh_named(
        &self,
        name: &str,
        location: &str,
        sources: &[String],
    ) -> Result<Admission> {
        validate_token("name", name)?;
        validate_token("location", location)?;
        if sources.is_empty() {
            return Err(Error::invalid("sources", "at least one address to admit"));
        }
        for s in sources {
            check_source(s)?;
        }
        let arm = self.arm();
        let asg_name = format!("{name}-{location}");
        let asg_id = self.id("Microsoft.Network/applicationSecurityGroups", &asg_name);
        let op = format!("put application security group {asg_name}");
        let a = arm
            .call(
                &op,
                Method::PUT,
                &arm.url(&asg_id, NETWORK_API),
                Some(
                    &json!({"location": location, "tags": {"managed-by": name}, "properties": {}}),
                ),
                false,
            )
            .await
            .map_err(|e| {
                context(
                    e,
                    &format!("the application security group {asg_name} was not made"),
                )
            })?;
        arm.wait(&op, &a).await.map_err(|e| {
            context(
                e,
                &format!("the application security group {asg_name} was not made"),
            )
        })?;

        let subnet_id = self.subnet_id(location);
        let Some(subnet) = arm
            .get("read subnet", &arm.url(&subnet_id, NETWORK_API))
            .await?
        else {
            return Err(Error::not_found(format!(
                "subnet {subnet_id} (orca creates no virtual network)"
            )));
        };
        let Some(nsg_id) = subnet["properties"]["networkSecurityGroup"]["id"]
            .as_str()
            .map(str::to_string)
        else {
            return Ok(Admission { asg_id, rule: None });
        };
        let Some(nsg) = arm
            .get("read subnet security group", &arm.url(&nsg_id, NETWORK_API))
            .await?
        else {
            return Err(Error::not_found(format!(
                "security group {nsg_id} named by the subnet"
            )));
        };
        let rules = nsg["properties"]["securityRules"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let priority = first_free_priority(&rules, name).ok_or_else(|| {
            Error::quota(format!(
                "security group {nsg_id} has no free inbound priority from {FIRST_PRIORITY}"
            ))
        })?;
        let rule_id = format!("{nsg_id}/securityRules/{name}");
        let op = format!("put security rule {name}");
        let a = arm
            .call(
                &op,
                Method::PUT,
                &arm.url(&rule_id, NETWORK_API),
                Some(&json!({"properties": {
                    "description": "SSH from the fleet hosts to the cloud hosts",
                    "protocol": "Tcp",
                    "sourcePortRange": "*",
                    "destinationPortRange": "22",
                    "sourceAddressPrefixes": sources,
                    "destinationApplicationSecurityGroups": [{"id": asg_id}],
                    "access": "Allow",
                    "priority": priority,
                    "direction": "Inbound",
                }})),
                false,
            )
            .await?;
        arm.wait(&op, &a).await?;
        Ok(Admission {
            asg_id,
            rule: Some(AdmissionRule {
                nsg_id,
                name: name.to_string(),
                priority,
            }),
        })
    }
}

fn context(e: Error, what: &str) -> Error {
    match e {
        Error::PermissionDenied { message, .. } => {
            Error::permission_denied(format!("{what}: {message}"))
        }
        Error::Other { message, .. } => Error::other(format!("{what}: {message}")),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources() {
        for ok in ["1.2.3.4", "10.0.0.0/8", "2001:db8::1", "2001:db8::/32"] {
            assert!(check_source(ok).is_ok(), "{ok}");
        }
        for bad in ["", "1.2.3", "1.2.3.4/33", "host", "1.2.3.4/x", "*"] {
            assert!(check_source(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn first_free_priority_skips_others_and_outbound_does_not_count() {
        let r = |n: &str, p: u32, d: &str| json!({"name": n, "properties": {"priority": p, "direction": d}});
        let rules = vec![
            r("a", 100, "Inbound"),
            r("b", 101, "Inbound"),
            r("c", 102, "Outbound"),
            r(STADO_NAME, 103, "Inbound"),
        ];
        assert_eq!(first_free_priority(&rules, STADO_NAME), Some(102));
        assert_eq!(first_free_priority(&[], STADO_NAME), Some(100));
    }
}
