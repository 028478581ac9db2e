//! The core conformance suite against the plugin client, through `soul-cloud-azure` processes on the
//! fake Azure Resource Manager: the settings (bearer token, endpoints, billing profile) go in each
//! child's environment, the hooks act on the fake, which pages its lists itself.

use crate::common;

use std::time::Duration;

use async_trait::async_trait;
use orca_fakes::azure::{FakeAzure, RESOURCE_GROUP, SUBSCRIPTION, TOKEN};
use orca_machines::conformance::{extensions, run_all, Harness, Hook, Setup};
use orca_machines::{Provider, Settings};
use orca_plugin::{PluginCommand, PluginProvider};

const VNET: &str = "orca-net";
const SUBNET: &str = "hosts";
/// The security group of the location's subnet, where admission rules go, with an operator's rule.
const SUBNET_NSG: &str = "hosts-nsg";
const LOCATION: &str = "westeurope";
const BILLING_ACCOUNT: &str = "1234:5678_2019-05-31";
const BILLING_PROFILE: &str = "PBFV-TEST-ORC-A1";

struct AzureHarness {
    fake: FakeAzure,
}

impl AzureHarness {
    async fn start() -> AzureHarness {
        let fake = FakeAzure::start().await.unwrap();
        fake.add_nsg(
            RESOURCE_GROUP,
            SUBNET_NSG,
            LOCATION,
            &[("operator-https", 100)],
        );
        let vnet = format!("{VNET}-{LOCATION}");
        fake.add_subnet(RESOURCE_GROUP, &vnet, LOCATION, SUBNET, Some(SUBNET_NSG));
        fake.set_credit(BILLING_ACCOUNT, BILLING_PROFILE, 812.5, "USD");
        AzureHarness { fake }
    }

    fn settings(&self) -> Settings {
        Settings::new()
            .with("ORCA_AZURE_SUBSCRIPTION_ID", SUBSCRIPTION)
            .with("ORCA_AZURE_RESOURCE_GROUP", RESOURCE_GROUP)
            .with("ORCA_AZURE_VNET", VNET)
            .with("ORCA_AZURE_SUBNET", SUBNET)
            .with(
                "ORCA_AZURE_IMAGE",
                "Canonical:ubuntu-24_04-lts:server:latest",
            )
            .with("ORCA_AZURE_ADMIN_USER", "orca")
            .with(
                "ORCA_AZURE_SSH_PUBLIC_KEY",
                "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOrcaTestKeyOnlyForTheFake orca@test",
            )
            .with("ORCA_AZURE_SSH_SOURCES", "203.0.113.7/32")
            .with("ORCA_AZURE_ENDPOINT", self.fake.url())
            .with("ORCA_AZURE_PRICES_ENDPOINT", self.fake.url())
            .with("ORCA_AZURE_ACCESS_TOKEN", TOKEN)
            .with("ORCA_AZURE_BILLING_ACCOUNT", BILLING_ACCOUNT)
            .with("ORCA_AZURE_BILLING_PROFILE", BILLING_PROFILE)
            .with("ORCA_POLL_INTERVAL", "2ms")
    }
}

#[async_trait]
impl Harness for AzureHarness {
    fn name(&self) -> String {
        "plugin soul-cloud-azure on azure-fake".into()
    }

    fn setup(&self) -> Setup {
        Setup {
            amd64_type: "Standard_B2s".into(),
            arm64_type: "Standard_B2pts_v2".into(),
            location: LOCATION.into(),
            resize_to: "Standard_D2s_v5".into(),
            unknown_id: "orca-no-such-vm".into(),
            image: "Canonical:ubuntu-24_04-lts:server:latest".into(),
        }
    }

    async fn provider(&self, owner: &str) -> orca_machines::Result<Box<dyn Provider>> {
        let command = PluginCommand::new(common::AZURE, owner).settings(self.settings());
        Ok(Box::new(PluginProvider::start(command).await?))
    }

    async fn paged_provider(&self, owner: &str, page_size: u32) -> Hook<Box<dyn Provider>> {
        // Resource Manager has no client page size for VM lists (the driver follows `nextLink`):
        // the fake's server-side page is set, as in the driver's own suite.
        self.fake.set_page_size(page_size as usize);
        Ok(self.provider(owner).await.expect("valid settings"))
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
        if location != LOCATION {
            return Ok(None);
        }
        let rules = self.fake.nsg_rules(RESOURCE_GROUP, SUBNET_NSG);
        let rule = rules.iter().find(|r| {
            r["name"]
                .as_str()
                .is_some_and(|n| n.eq_ignore_ascii_case(group))
        });
        Ok(rule.map(|r| {
            r["properties"]["sourceAddressPrefixes"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        }))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_through_soul_cloud_azure() {
    let h = AzureHarness::start().await;
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
