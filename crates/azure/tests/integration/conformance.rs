//! The core conformance suite against the fake Azure Resource Manager, with every hook: two owners in
//! one resource group, page size 1, no stock (AllocationFailed), a lost VM PUT answer, request counts,
//! delayed visibility of new VMs, the admission rule on the subnet's own security group as the fake
//! holds it, and a billing profile with a credit.

use crate::common;

use async_trait::async_trait;
use orca_fakes::azure::{FakeAzure, RESOURCE_GROUP};
use orca_fakes::conformance::{
    AzureHarness, Providers, BILLING_ACCOUNT, BILLING_PROFILE, SUBNET_NSG,
};
use orca_machines::conformance::{extensions, run_all, Harness};
use orca_machines::{Provider, Result};

/// The driver itself, in the test's process, with the billing profile that has the credit.
struct Driver;

#[async_trait]
impl Providers<FakeAzure> for Driver {
    async fn provider(&self, fake: &FakeAzure, owner: &str) -> Result<Box<dyn Provider>> {
        let s = common::settings(fake)
            .billing(BILLING_ACCOUNT, BILLING_PROFILE)
            .build()?;
        Ok(Box::new(orca_azure::AzureProvider::new(s, owner).await?))
    }
}

#[tokio::test]
async fn conformance_against_the_fake() {
    let h = AzureHarness::new("azure-fake", common::fake().await, Driver);
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
