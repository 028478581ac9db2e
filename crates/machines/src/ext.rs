//! Extensions: what only some clouds can do, reachable through `dyn Provider`.
//!
//! The core trait stays small; a caller asks a provider for an extension by its accessor
//! ([`Provider::machine_labels`](crate::Provider::machine_labels),
//! [`Provider::firewall_rules`](crate::Provider::firewall_rules),
//! [`Provider::ssh_admission`](crate::Provider::ssh_admission),
//! [`Provider::credit_balance`](crate::Provider::credit_balance)), which answers `None` when the
//! driver cannot do it. This is object_store's pattern (`MultipartStore`, `Signer`): a front-end that
//! holds an `Arc<dyn Provider>` reaches every extension without knowing the driver, and so also runs on
//! the in-memory provider, which implements every one with the same rules.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use std::sync::Arc;
//! use orca_machines::{memory::MemoryCloud, labels::Labels, MachineSpec, Provider};
//! let p: Arc<dyn Provider> = Arc::new(MemoryCloud::new().provider("stack-1")?);
//! let m = p.create(&MachineSpec::new("shed-1", "amd64-small", "zone-a", "sheds")).await?
//!     .machine().unwrap();
//! let labels = p.machine_labels().expect("the in-memory provider changes labels");
//! let set = Labels::from([("shed-state".to_string(), "ready".to_string())]);
//! let m = labels.set_labels(&m.id, &set, &[]).await?;
//! assert_eq!(m.labels["shed-state"], "ready");
//! # Ok::<(), orca_machines::Error>(()) }).unwrap();
//! ```

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::labels::Labels;
use crate::machine::{Machine, Timestamp};
use crate::spec::{validate_id, validate_source, MachineSpec};

/// Label changes on a machine that exists (shed's `creating` / `ready` / `deleting`).
#[async_trait]
pub trait MachineLabels: Send + Sync {
    /// Sets every label of `set` and removes every key of `remove` on machine `id` (this owner's),
    /// leaving every other label as it is; answers the machine as read after the change.
    ///
    /// Keys and values follow [`crate::spec::validate_labels`]; orca's own labels can be neither set
    /// nor removed. A machine of another owner is [`crate::Error::NotOwned`]; a machine that does not
    /// exist is [`crate::Error::NotFound`]. A concurrent change by another writer is not lost: the
    /// driver uses the cloud's fingerprint or per-key calls where the cloud has them (each driver's
    /// README says which).
    async fn set_labels(&self, id: &str, set: &Labels, remove: &[String]) -> Result<Machine>;
}

/// One protocol and its ports in a firewall rule's allowed or denied list (made with
/// [`FirewallPorts::new`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct FirewallPorts {
    /// `tcp`, `udp`, `icmp`, `all`, ... or a protocol number.
    pub protocol: String,
    /// Ports and ranges (`22`, `8000-8080`); empty for every port.
    pub ports: Vec<String>,
}

impl FirewallPorts {
    /// `protocol` on `ports`.
    pub fn new<I: IntoIterator<Item = S>, S: Into<String>>(protocol: &str, ports: I) -> Self {
        FirewallPorts {
            protocol: protocol.to_string(),
            ports: ports.into_iter().map(Into::into).collect(),
        }
    }
}

/// A VPC firewall rule, in Compute Engine's shape (which a network security group rule also fits).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct FirewallRule {
    /// The rule's name.
    pub name: String,
    /// The name of the network it belongs to.
    pub network: String,
    /// `INGRESS` or `EGRESS`.
    pub direction: String,
    /// Whether the rule is disabled.
    pub disabled: bool,
    /// Its priority (lower wins).
    pub priority: i64,
    /// What it allows.
    pub allowed: Vec<FirewallPorts>,
    /// What it denies.
    pub denied: Vec<FirewallPorts>,
    /// Source address ranges (ingress).
    pub source_ranges: Vec<String>,
    /// Source network tags (ingress).
    pub source_tags: Vec<String>,
    /// Source service accounts (ingress).
    pub source_service_accounts: Vec<String>,
    /// Destination address ranges (egress).
    pub destination_ranges: Vec<String>,
    /// The network tags it applies to; with neither target tags nor target accounts it applies to
    /// every machine of the network.
    pub target_tags: Vec<String>,
    /// The service accounts it applies to.
    pub target_service_accounts: Vec<String>,
}

impl FirewallRule {
    /// An enabled ingress rule `name` on `network` at priority 1000 that allows and admits nothing yet.
    pub fn new(name: impl Into<String>, network: impl Into<String>) -> Self {
        FirewallRule {
            name: name.into(),
            network: network.into(),
            direction: "INGRESS".into(),
            disabled: false,
            priority: 1000,
            allowed: Vec::new(),
            denied: Vec::new(),
            source_ranges: Vec::new(),
            source_tags: Vec::new(),
            source_service_accounts: Vec::new(),
            destination_ranges: Vec::new(),
            target_tags: Vec::new(),
            target_service_accounts: Vec::new(),
        }
    }

    /// Whether this is an ingress rule.
    pub fn is_ingress(&self) -> bool {
        self.direction.eq_ignore_ascii_case("INGRESS")
    }
}

/// A VPC network.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Network {
    /// Its name.
    pub name: String,
    /// Auto mode (subnets made for every region, like a project's `default` network) rather than
    /// custom mode.
    pub auto_create_subnetworks: bool,
    /// The names of its subnets.
    pub subnetworks: Vec<String>,
}

impl Network {
    /// A custom-mode network `name` with no subnet listed.
    pub fn new(name: impl Into<String>) -> Self {
        Network {
            name: name.into(),
            auto_create_subnetworks: false,
            subnetworks: Vec::new(),
        }
    }
}

/// The firewall rules of the network a provider puts its machines on (shed's firewall check): read
/// them, and change one rule's source ranges. Nothing else is ever changed, and no rule is made or
/// removed.
#[async_trait]
pub trait FirewallRules: Send + Sync {
    /// The name of the network the provider puts machines on.
    fn network_name(&self) -> String;

    /// That network as the cloud reports it.
    async fn network(&self) -> Result<Network>;

    /// The rule `name`, or `None` when there is none.
    async fn rule(&self, name: &str) -> Result<Option<FirewallRule>>;

    /// Every rule of that network (every page).
    async fn rules(&self) -> Result<Vec<FirewallRule>>;

    /// Sets rule `name`'s source ranges to `ranges` (IPv4 CIDRs), changing nothing else; follows the
    /// cloud's operation to its end and answers the rule as read back.
    async fn set_source_ranges(&self, name: &str, ranges: &[String]) -> Result<FirewallRule>;
}

/// The inbound rule an SSH admission wrote on the subnet's own security group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct AdmissionRule {
    /// The security group's id.
    pub security_group: String,
    /// The rule's name (the group's name).
    pub name: String,
    /// Its priority: the first from 100 that no other inbound rule holds.
    pub priority: u32,
}

impl AdmissionRule {
    /// The rule `name` at `priority` on the security group `security_group`.
    pub fn new(security_group: impl Into<String>, name: impl Into<String>, priority: u32) -> Self {
        AdmissionRule {
            security_group: security_group.into(),
            name: name.into(),
            priority,
        }
    }
}

/// What [`SshAdmission::admit_ssh`] did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Admission {
    /// The id of the location's admission group (Azure: the application security group
    /// `<group>-<location>`).
    pub group: String,
    /// The rule on the subnet's security group; `None` when the subnet has no security group of its
    /// own.
    pub rule: Option<AdmissionRule>,
    /// The machines whose own firewall now admits the same sources.
    pub readmitted: Vec<String>,
    /// Machines asked to be readmitted that do not exist (nothing was done for them).
    pub missing: Vec<String>,
}

impl Admission {
    /// An admission of group `group` with no subnet rule and no machine readmitted.
    pub fn new(group: impl Into<String>) -> Self {
        Admission {
            group: group.into(),
            rule: None,
            readmitted: Vec::new(),
            missing: Vec::new(),
        }
    }
}

/// Checks the source ranges given to [`FirewallRules::set_source_ranges`]: at least one, each an IPv4
/// address (a /32) or an IPv4 CIDR block with a prefix length of 0 to 32. IPv6 is refused (a VPC
/// firewall rule keeps it in another field). Invalid input is [`Error::InvalidSpec`] of field
/// `source_ranges`, naming the range.
///
/// ```
/// use orca_machines::ext::check_ipv4_ranges;
/// assert!(check_ipv4_ranges(&["203.0.113.7".into(), "198.51.100.0/24".into()]).is_ok());
/// for bad in [vec![], vec!["0.0.0.0/33".to_string()], vec!["2001:db8::/32".to_string()]] {
///     assert!(check_ipv4_ranges(&bad).is_err(), "{bad:?}");
/// }
/// ```
pub fn check_ipv4_ranges(ranges: &[String]) -> Result<()> {
    if ranges.is_empty() {
        return Err(Error::invalid("source_ranges", "at least one range"));
    }
    for r in ranges {
        validate_source(r).map_err(|rule| Error::invalid("source_ranges", rule))?;
        if r.contains(':') {
            return Err(Error::invalid(
                "source_ranges",
                format!(
                    "an IPv4 address or CIDR block like 203.0.113.7/32 (not IPv6), got {}",
                    crate::spec::quoted(r)
                ),
            ));
        }
    }
    Ok(())
}

/// Checks the input of [`SshAdmission::admit_ssh`] that every driver checks alike, before any call:
/// the group and location (as a spec's admission group and location), at least one source, each an IP
/// address or CIDR block ([`crate::spec::validate_source`]), and every id of `readmit`
/// ([`crate::validate_id`]). Invalid input is [`Error::InvalidSpec`] naming the field. A driver checks
/// what is its own (a location it knows) after this.
///
/// ```
/// use orca_machines::ext::check_admission_input;
/// let sources = vec!["203.0.113.7/32".to_string()];
/// assert!(check_admission_input("stado", "zone-a", &sources, &[]).is_ok());
/// assert!(check_admission_input("stado", "zone-a", &[], &[]).is_err());
/// assert!(check_admission_input("stado", "zone-a", &["host".into()], &[]).is_err());
/// assert!(check_admission_input("stado", "zone-a", &sources, &["a b".into()]).is_err());
/// ```
pub fn check_admission_input(
    group: &str,
    location: &str,
    sources: &[String],
    readmit: &[String],
) -> Result<()> {
    MachineSpec::new("check", "t", location, "check")
        .with_admission_group(group)
        .with_ssh_sources(sources.iter().cloned())
        .validate()?;
    if sources.is_empty() {
        return Err(Error::invalid("sources", "at least one address to admit"));
    }
    for s in sources {
        validate_source(s).map_err(|rule| Error::invalid("sources", rule))?;
    }
    for id in readmit {
        validate_id(id)?;
    }
    Ok(())
}

/// The first priority from `first` (100 for SSH admission) that no inbound rule holds, up to `last`.
pub fn first_free_priority(
    held: impl IntoIterator<Item = u32>,
    first: u32,
    last: u32,
) -> Option<u32> {
    let held: std::collections::BTreeSet<u32> = held.into_iter().collect();
    (first..=last).find(|p| !held.contains(p))
}

/// The lowest priority an admission rule takes.
pub const FIRST_ADMISSION_PRIORITY: u32 = 100;
/// The highest priority an admission rule may take.
pub const LAST_ADMISSION_PRIORITY: u32 = 4096;

/// SSH admission of an address set (stado): the location's admission group, a rule on the subnet's
/// own security group admitting exactly the sources to that group's members on port 22, and the own
/// firewall of every named machine set to the same sources.
#[async_trait]
pub trait SshAdmission: Send + Sync {
    /// Admits exactly `sources` (IPs or CIDR blocks) on SSH to the members of admission group `group`
    /// in `location`:
    /// - the location gets the group (made when missing);
    /// - when the subnet carries a security group of its own, that security group gets the inbound
    ///   rule `group` admitting the sources to the group only, at the first priority from 100 that no
    ///   other inbound rule holds (the rule keeps its priority when it exists already); every other
    ///   rule and interface is left as it was;
    /// - every machine of `readmit` (ids of this owner's machines) gets its own firewall set to the same
    ///   sources; a machine that does not exist is reported in [`Admission::missing`].
    ///
    /// Invalid input is refused before any call; a policy that denies a resource answers
    /// [`crate::Error::PermissionDenied`] naming it, and nothing after it is made.
    async fn admit_ssh(
        &self,
        group: &str,
        location: &str,
        sources: &[String],
        readmit: &[String],
    ) -> Result<Admission>;
}

/// An account's credit balance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Balance {
    /// What is left.
    pub amount: f64,
    /// ISO 4217 currency code.
    pub currency: String,
    /// When the cloud computed it, if it said.
    pub as_of: Option<Timestamp>,
}

impl Balance {
    /// `amount` in `currency`.
    pub fn new(amount: f64, currency: impl Into<String>) -> Self {
        Balance {
            amount,
            currency: currency.into(),
            as_of: None,
        }
    }
}

/// The account's credit balance (stado's credit gate).
#[async_trait]
pub trait CreditBalance: Send + Sync {
    /// The balance now.
    async fn balance(&self) -> Result<Balance>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_ipv4_addresses_or_cidrs() {
        assert!(check_ipv4_ranges(&["203.0.113.7".into(), "198.51.100.0/24".into()]).is_ok());
        for bad in [
            vec![],
            vec!["0.0.0.0/33".to_string()],
            vec!["1.2.3.4/+8".to_string()],
            vec!["2001:db8::/32".to_string()],
            vec!["::1".to_string()],
            vec!["host".to_string()],
            vec!["203.0.113.7/32".to_string(), "".to_string()],
        ] {
            match check_ipv4_ranges(&bad) {
                Err(crate::Error::InvalidSpec { field, .. }) => assert_eq!(field, "source_ranges"),
                other => panic!("{bad:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn admission_input_names_the_field_at_fault() {
        let ok = vec!["203.0.113.7/32".to_string()];
        assert!(check_admission_input("stado", "zone-a", &ok, &["m-1".into()]).is_ok());
        for (group, location, sources, readmit, field) in [
            ("stado", "zone-a", vec![], vec![], "sources"),
            (
                "stado",
                "zone-a",
                vec!["1.2.3.4/33".to_string()],
                vec![],
                "ssh_sources",
            ),
            (
                "stado",
                "zone-a",
                vec!["host".to_string()],
                vec![],
                "ssh_sources",
            ),
            ("stado", "zone-a", ok.clone(), vec!["a b".to_string()], "id"),
            ("stado", "", ok.clone(), vec![], "location"),
        ] {
            match check_admission_input(group, location, &sources, &readmit) {
                Err(crate::Error::InvalidSpec { field: f, .. }) => {
                    assert_eq!(f, field, "{group} {location} {sources:?} {readmit:?}")
                }
                other => panic!("{sources:?} {readmit:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn first_free_priority_skips_held() {
        assert_eq!(first_free_priority([100, 101, 102], 100, 4096), Some(103));
        assert_eq!(first_free_priority([], 100, 4096), Some(100));
        assert_eq!(first_free_priority([101], 100, 4096), Some(100));
        assert_eq!(first_free_priority(100..=4096, 100, 4096), None);
    }
}
