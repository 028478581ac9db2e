//! The fake Azure Resource Manager's hooks: page size (the fake's, Resource Manager has no client page
//! size for VM lists), no stock (AllocationFailed), a lost VM PUT answer, request counts, delayed
//! visibility of new VMs, the admission rule on the subnet's own security group as the fake holds
//! it, and the pieces a create makes before its VM.

use std::time::Duration;

use async_trait::async_trait;
use orca_machines::conformance::{Harness, Hook, Setup, Skip};
use orca_machines::labels::ownership_labels;
use orca_machines::{MachineSpec, Provider, Result};
use serde_json::{json, Value};

use super::{paged, Providers};
use crate::azure::{FakeAzure, LOCATION, RESOURCE_GROUP, SUBNET, SUBSCRIPTION, VNET};

/// The security group of the subnet [`AzureHarness::new`] readies, where admission rules go, with an
/// operator's rule of its own.
pub const SUBNET_NSG: &str = "hosts-nsg";

/// The billing account that [`AzureHarness::new`] gives a credit.
pub const BILLING_ACCOUNT: &str = "1234:5678_2019-05-31";

/// The billing profile of [`BILLING_ACCOUNT`] holding the credit.
pub const BILLING_PROFILE: &str = "PBFV-TEST-ORC-A1";

/// A size the harness's fake offers in `eastus` only, not in [`LOCATION`] (as Azure offers many
/// sizes in some regions only).
const UNOFFERED_SIZE: &str = "Standard_D4ps_v5";

/// The conformance harness on a fake Azure Resource Manager, with every hook Azure can have.
pub struct AzureHarness<P> {
    /// The fake, for the test's own assertions after the run.
    pub fake: FakeAzure,
    name: String,
    providers: P,
}

impl<P: Providers<FakeAzure>> AzureHarness<P> {
    /// A harness named `name` in the output on `fake`, whose providers `providers` makes. Readies the
    /// fake: subnet [`SUBNET`] of [`VNET`] in [`LOCATION`] carries security group [`SUBNET_NSG`]
    /// with an operator's rule (the admission check then proves that a refused admission left the
    /// rule's sources as they were), and billing profile [`BILLING_PROFILE`] has a credit.
    pub fn new(name: impl Into<String>, fake: FakeAzure, providers: P) -> Self {
        fake.add_nsg(
            RESOURCE_GROUP,
            SUBNET_NSG,
            LOCATION,
            &[("operator-https", 100)],
        );
        let vnet = format!("{VNET}-{LOCATION}");
        fake.add_subnet(RESOURCE_GROUP, &vnet, LOCATION, SUBNET, Some(SUBNET_NSG));
        fake.set_credit(BILLING_ACCOUNT, BILLING_PROFILE, 812.5, "USD");
        fake.offer_only(UNOFFERED_SIZE, &["eastus"]);
        fake.set_operation_time(super::OPERATION_TIME);
        AzureHarness {
            fake,
            name: name.into(),
            providers,
        }
    }
}

#[async_trait]
impl<P: Providers<FakeAzure>> Harness for AzureHarness<P> {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn setup(&self) -> Setup {
        Setup {
            amd64_type: "Standard_B2s".into(),
            arm64_type: "Standard_B2pts_v2".into(),
            location: LOCATION.into(),
            resize_to: "Standard_D2s_v5".into(),
            unknown_id: "orca-no-such-vm".into(),
            image: "Canonical:ubuntu-24_04-lts:server:latest".into(),
            unoffered: Some((UNOFFERED_SIZE.into(), LOCATION.into())),
            arm64_image: Some("Canonical:ubuntu-24_04-lts:server-arm64:latest".into()),
        }
    }

    async fn provider(&self, owner: &str) -> Result<Box<dyn Provider>> {
        self.providers.provider(&self.fake, owner).await
    }

    async fn paged_provider(&self, owner: &str, page_size: u32) -> Hook<Box<dyn Provider>> {
        // Resource Manager has no client page size for VM lists (the driver follows `nextLink`):
        // the fake's server-side page is set.
        self.fake.set_page_size(page_size as usize);
        paged(&self.providers, &self.fake, owner, page_size).await
    }

    async fn exhaust_stock(&self, machine_type: &str, location: &str) -> Hook<()> {
        self.fake
            .fail_allocation(machine_type, location, "AllocationFailed");
        Ok(())
    }

    async fn restore_stock(&self, machine_type: &str, location: &str) -> Hook<()> {
        self.fake.restore_stock(machine_type, location);
        Ok(())
    }

    async fn exceed_quota(&self) -> Hook<()> {
        self.fake.exceed_quota(&self.setup().amd64_type);
        Ok(())
    }

    async fn restore_quota(&self) -> Hook<()> {
        self.fake.restore_quota(&self.setup().amd64_type);
        Ok(())
    }

    async fn lose_next_create_answer(&self) -> Hook<()> {
        self.fake.lose_next_vm_put_answer();
        Ok(())
    }

    async fn refuse_next_create_unserved(&self) -> Hook<()> {
        self.fake.refuse_next_vm_put_unserved();
        Ok(())
    }

    async fn requests(&self) -> Hook<u64> {
        Ok(self.fake.control().requests())
    }

    async fn delay_visibility(&self, delay: Duration) -> Hook<()> {
        self.fake.set_visibility_delay(delay);
        Ok(())
    }

    async fn admitted_sources(&self, group: &str, location: &str) -> Hook<Option<Vec<String>>> {
        // The rule `<group>` on the security group of the location's subnet, as the fake stores it.
        let vnet = self.fake.resource(
            RESOURCE_GROUP,
            "Microsoft.Network/virtualNetworks",
            &format!("{VNET}-{location}"),
        );
        let nsg = vnet.as_ref().and_then(|v| {
            v["properties"]["subnets"]
                .as_array()?
                .iter()
                .find(|s| s["name"].as_str() == Some(SUBNET))?["properties"]["networkSecurityGroup"]
                ["id"]
                .as_str()
                .and_then(|id| id.rsplit('/').next())
                .map(str::to_string)
        });
        let Some(nsg) = nsg else {
            return Ok(None);
        };
        Ok(self
            .fake
            .nsg_rules(RESOURCE_GROUP, &nsg)
            .iter()
            .find(|r| {
                r["name"]
                    .as_str()
                    .is_some_and(|n| n.eq_ignore_ascii_case(group))
            })
            .map(|r| {
                r["properties"]["sourceAddressPrefixes"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect()
            }))
    }

    async fn leave_pieces(&self, owner: &str, spec: &MachineSpec) -> Hook<Vec<String>> {
        // The driver's create makes its public address, security group and interface before the
        // VM's PUT; Azure makes the OS disk from the VM, so a create stopped before it has none.
        let pieces = pieces_of(owner, spec);
        for (id, body) in &pieces {
            if let Err(e) = self.fake.put_resource(id, body.clone()).await {
                // Said, not hidden: the suite reports the check unproven with this reason.
                return Err(Skip::because(format!(
                    "the fake refused the piece {id}: {e}"
                )));
            }
        }
        Ok(pieces.into_iter().map(|(id, _)| piece_name(&id)).collect())
    }

    async fn pieces_standing(&self, pieces: &[String]) -> Hook<Vec<String>> {
        Ok(pieces
            .iter()
            .filter(|p| {
                p.split_once(':').is_some_and(|(type_name, name)| {
                    self.fake
                        .resource(RESOURCE_GROUP, type_name, name)
                        .is_some()
                })
            })
            .cloned()
            .collect())
    }
}

/// A piece as the harness names it: `<type>:<name>` (`Microsoft.Network/publicIPAddresses:c1-ip`).
fn piece_name(id: &str) -> String {
    let mut parts = id.rsplit('/');
    let name = parts.next().unwrap_or_default();
    let ty = parts.next().unwrap_or_default();
    let ns = parts.next().unwrap_or_default();
    format!("{ns}/{ty}:{name}")
}

/// The ids and `PUT` bodies of what the Azure driver's create of `spec` for `owner` makes before
/// the VM, in its order, with its names (`<name>-ip`, `<name>-nsg`, `<name>-nic`) and tags (the
/// ownership labels and the spec's).
fn pieces_of(owner: &str, spec: &MachineSpec) -> Vec<(String, Value)> {
    let mut tags = ownership_labels(&spec.pool, owner);
    tags.extend(spec.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
    let loc = &spec.location;
    let rg = format!("/subscriptions/{SUBSCRIPTION}/resourceGroups/{RESOURCE_GROUP}");
    let id = |ty: &str, suffix: &str| format!("{rg}/providers/{ty}/{}-{suffix}", spec.name);
    let (pip, nsg, nic) = (
        id("Microsoft.Network/publicIPAddresses", "ip"),
        id("Microsoft.Network/networkSecurityGroups", "nsg"),
        id("Microsoft.Network/networkInterfaces", "nic"),
    );
    // The driver's DNS label: the name when it is a valid label, else `vm-<name>`.
    let label = if spec.name.len() >= 3 && spec.name.starts_with(|c: char| c.is_ascii_lowercase()) {
        spec.name.clone()
    } else {
        format!("vm-{}", spec.name)
    };
    let subnet =
        format!("{rg}/providers/Microsoft.Network/virtualNetworks/{VNET}-{loc}/subnets/{SUBNET}");
    vec![
        (
            pip.clone(),
            json!({"location": loc, "tags": tags, "sku": {"name": "Standard", "tier": "Regional"},
                "properties": {"publicIPAllocationMethod": "Static", "publicIPAddressVersion": "IPv4",
                    "deleteOption": "Delete", "dnsSettings": {"domainNameLabel": label,
                    "domainNameLabelScope": "ResourceGroupReuse"}}}),
        ),
        (
            nsg.clone(),
            json!({"location": loc, "tags": tags, "properties": {"securityRules": []}}),
        ),
        (
            nic,
            json!({"location": loc, "tags": tags, "properties": {
                "networkSecurityGroup": {"id": nsg},
                "ipConfigurations": [{"name": "ipconfig1", "properties": {"primary": true,
                    "privateIPAllocationMethod": "Dynamic", "subnet": {"id": subnet},
                    "publicIPAddress": {"id": pip}}}]}}),
        ),
    ]
}
