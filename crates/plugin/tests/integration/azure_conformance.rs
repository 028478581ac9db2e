//! The core conformance suite against the plugin client, through `soul-cloud-azure` processes on the
//! fake Azure Resource Manager: the settings (bearer token, endpoints, billing profile) go in each
//! child's environment, the hooks act on the fake, which pages its lists itself.

use crate::common;

use async_trait::async_trait;
use orca_fakes::azure::{FakeAzure, RESOURCE_GROUP};
use orca_fakes::conformance::{
    AzureHarness, Providers, BILLING_ACCOUNT, BILLING_PROFILE, SUBNET_NSG,
};
use orca_machines::conformance::{extensions, run_all, Harness};
use orca_machines::Provider;
use orca_plugin::{PluginCommand, PluginProvider};

/// `soul-cloud-azure` processes, with the fake's settings, an SSH source and the billing profile
/// that has the credit in their environment.
struct Plugin;

#[async_trait]
impl Providers<FakeAzure> for Plugin {
    async fn provider(
        &self,
        fake: &FakeAzure,
        owner: &str,
    ) -> orca_machines::Result<Box<dyn Provider>> {
        let settings = orca_fakes::azure::driver_settings(fake)
            .with("ORCA_AZURE_SSH_SOURCES", "203.0.113.7/32")
            .with("ORCA_AZURE_BILLING_ACCOUNT", BILLING_ACCOUNT)
            .with("ORCA_AZURE_BILLING_PROFILE", BILLING_PROFILE)
            .with("ORCA_POLL_INTERVAL", "2ms");
        let command = PluginCommand::new(common::AZURE, owner).settings(settings);
        Ok(Box::new(PluginProvider::start(command).await?))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_through_soul_cloud_azure() {
    let h = AzureHarness::new(
        "plugin soul-cloud-azure on azure-fake",
        FakeAzure::start().await.unwrap(),
        Plugin,
    );
    let report = run_all(&h).await;
    report.assert_passed();
    assert!(
        report.skipped().is_empty(),
        "every hook is provided: {:?}",
        report.skipped()
    );
    // Azure offers label changes, SSH admission and, with a billing profile set, the credit
    // balance: the plugin carries all three.
    let p = h.provider("stack-1").await.unwrap();
    assert_eq!(
        extensions(&*p),
        ["machine_labels", "ssh_admission", "credit_balance"]
    );
    // Every check cleaned up its machines and their resources (the admission groups are the
    // location's, not a machine's; the subnet's security group is the operator's).
    let stray: Vec<_> = h
        .fake
        .resources(RESOURCE_GROUP)
        .into_iter()
        .filter(|(t, n)| {
            t != "Microsoft.Network/virtualNetworks"
                && t != "Microsoft.Network/applicationSecurityGroups"
                && !(t == "Microsoft.Network/networkSecurityGroups" && n == SUBNET_NSG)
        })
        .collect();
    assert!(stray.is_empty(), "left behind: {stray:?}");
}
