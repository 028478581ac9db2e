//! The core conformance suite against the fake Azure Resource Manager, with every hook: two owners in
//! one resource group, page size 1, no stock (AllocationFailed), a lost VM PUT answer, request counts,
//! delayed visibility of new VMs, the admission rule on the subnet's own security group as the fake
//! holds it, and a billing profile with a credit.

use crate::common;

use std::time::Duration;

use async_trait::async_trait;
use orca_fakes::azure::{FakeAzure, RESOURCE_GROUP};
use orca_machines::conformance::{extensions, run_all, Harness, Hook, Setup};
use orca_machines::{Provider, Result};

struct AzureHarness {
    fake: FakeAzure,
}

impl AzureHarness {
    fn config(&self) -> orca_azure::ConfigBuilder {
        common::settings(&self.fake).billing(common::BILLING_ACCOUNT, common::BILLING_PROFILE)
    }
}

#[async_trait]
impl Harness for AzureHarness {
    fn name(&self) -> String {
        "azure-fake".into()
    }

    fn setup(&self) -> Setup {
        Setup {
            amd64_type: common::AMD.into(),
            arm64_type: common::ARM.into(),
            location: common::LOCATION.into(),
            resize_to: "Standard_D2s_v5".into(),
            unknown_id: "orca-no-such-vm".into(),
            image: "Canonical:ubuntu-24_04-lts:server:latest".into(),
        }
    }

    async fn provider(&self, owner: &str) -> Result<Box<dyn Provider>> {
        let s = self.config().build()?;
        Ok(Box::new(orca_azure::AzureProvider::new(s, owner).await?))
    }

    async fn paged_provider(&self, owner: &str, page_size: u32) -> Hook<Box<dyn Provider>> {
        // Resource Manager has no client page size for VM lists: the fake's server-side page is set.
        self.fake.set_page_size(page_size as usize);
        Ok(Box::new(common::provider(&self.fake, owner).await))
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

    async fn lose_next_create_answer(&self) -> Hook<()> {
        self.fake.lose_next_vm_put_answer();
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
            &format!("{}-{location}", common::VNET),
        );
        let nsg = vnet.as_ref().and_then(|v| {
            v["properties"]["subnets"]
                .as_array()?
                .iter()
                .find(|s| s["name"].as_str() == Some(common::SUBNET))?["properties"]
                ["networkSecurityGroup"]["id"]
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
}

/// The security group of the location's subnet, where admission rules go.
const SUBNET_NSG: &str = "hosts-nsg";

#[tokio::test]
async fn conformance_against_the_fake() {
    let fake = common::fake().await;
    // The subnet carries a security group of its own, with an operator's rule: the admission check
    // then proves that a refused admission left the rule's sources as they were.
    fake.add_nsg(
        RESOURCE_GROUP,
        SUBNET_NSG,
        common::LOCATION,
        &[("operator-https", 100)],
    );
    fake.add_subnet(
        RESOURCE_GROUP,
        &format!("{}-{}", common::VNET, common::LOCATION),
        common::LOCATION,
        common::SUBNET,
        Some(SUBNET_NSG),
    );
    fake.set_credit(
        common::BILLING_ACCOUNT,
        common::BILLING_PROFILE,
        812.5,
        "USD",
    );
    let h = AzureHarness { fake };
    let report = run_all(&h).await;
    report.assert_passed();
    assert!(
        report.skipped().is_empty(),
        "skipped: {:?}",
        report.skipped()
    );
    // The extension checks pass where the provider offers none: Azure offers label changes and SSH
    // admission, and the credit balance when the settings name a billing profile (as here).
    let p = h.provider("stack-1").await.unwrap();
    assert_eq!(
        extensions(&*p),
        ["machine_labels", "ssh_admission", "credit_balance"]
    );
    let without_billing = common::provider(&h.fake, "stack-1").await;
    assert_eq!(
        extensions(&without_billing),
        ["machine_labels", "ssh_admission"]
    );
    // Nothing is left behind: every check cleaned up its machines and their resources (the
    // admission groups the SSH admission check made are the location's, not a machine's, and the
    // subnet's security group is the operator's).
    let left = h.fake.resources(RESOURCE_GROUP);
    let stray: Vec<_> = left
        .iter()
        .filter(|(t, n)| {
            t != "Microsoft.Network/virtualNetworks"
                && t != "Microsoft.Network/applicationSecurityGroups"
                && !(t == "Microsoft.Network/networkSecurityGroups" && n == SUBNET_NSG)
        })
        .collect();
    assert!(stray.is_empty(), "left behind: {stray:?}");
}
