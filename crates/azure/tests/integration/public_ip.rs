//! Machines without a public address (`ORCA_AZURE_PUBLIC_IP=false`), for subscriptions whose policy
//! denies public addresses, as the Corp policies of Azure landing zones do.

use crate::common;

use common::*;
use orca_azure::{AzureProvider, ConfigKey};
use orca_fakes::azure::{FakeAzure, RESOURCE_GROUP};
use orca_machines::{ErrorKind, MachineSpec, Provider, SshAdmission};

const POLICY: &str = "Deny-Public-IP-On-NIC";

fn spec(name: &str) -> MachineSpec {
    MachineSpec::new(name, AMD, LOCATION, "lab")
}

/// Everything in the resource group but the virtual network.
fn stray(f: &FakeAzure) -> Vec<(String, String)> {
    f.resources(RESOURCE_GROUP)
        .into_iter()
        .filter(|(t, _)| t != "Microsoft.Network/virtualNetworks")
        .collect()
}

async fn private_provider(f: &FakeAzure) -> AzureProvider {
    let settings = settings(f)
        .with_config(ConfigKey::PublicIp, "false")
        .build()
        .unwrap();
    assert!(!settings.public_ip);
    AzureProvider::new(settings, "stack-1").await.unwrap()
}

#[tokio::test]
async fn without_a_public_address_machines_are_made_where_a_policy_denies_them() {
    let f = fake().await;
    f.deny_public_addresses(POLICY);
    let p = private_provider(&f).await;
    let m = p.create(&spec("vm-priv")).await.unwrap().machine().unwrap();
    assert_eq!(m.address, "", "no public address");
    assert_eq!(m.fqdn, "");
    assert!(!m.private_address.is_empty(), "{m:?}");
    let mut made: Vec<String> = stray(&f).into_iter().map(|(_, n)| n).collect();
    made.sort();
    assert_eq!(
        made,
        ["vm-priv", "vm-priv-nic", "vm-priv-nsg", "vm-priv-osdisk"]
    );
    let nic = f
        .resource(
            RESOURCE_GROUP,
            "Microsoft.Network/networkInterfaces",
            "vm-priv-nic",
        )
        .unwrap();
    assert!(
        nic["properties"]["ipConfigurations"][0]["properties"]["publicIPAddress"].is_null(),
        "{nic}"
    );
    // Every read answers the same machine; the extensions work on it.
    let read = p.machine("vm-priv").await.unwrap().unwrap();
    assert_eq!(
        (read.address.as_str(), read.private_address.as_str()),
        ("", m.private_address.as_str())
    );
    let listed = p.machines("lab").await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].address, "");
    assert_eq!(listed[0].private_address, m.private_address);
    let a = p
        .admit_ssh(
            "fleet",
            LOCATION,
            &["198.51.100.4".to_string()],
            &["vm-priv".to_string()],
        )
        .await
        .unwrap();
    assert_eq!(a.readmitted, ["vm-priv"]);
    let labelled = p
        .machine_labels()
        .unwrap()
        .set_labels(
            "vm-priv",
            &[("team".to_string(), "a".to_string())].into(),
            &[],
        )
        .await
        .unwrap();
    assert_eq!(labelled.labels.get("team").map(String::as_str), Some("a"));
    assert_eq!(labelled.address, "");
    assert!(p.delete("vm-priv").await.unwrap());
    assert_eq!(
        stray(&f)
            .into_iter()
            .filter(|(t, _)| t != "Microsoft.Network/applicationSecurityGroups")
            .collect::<Vec<_>>(),
        vec![]
    );
}

#[tokio::test]
async fn with_a_public_address_the_policy_refuses_the_create_by_name_and_nothing_is_left() {
    let f = fake().await;
    f.deny_public_addresses(POLICY);
    let p = provider(&f, "stack-1").await;
    let e = p.create(&spec("vm-pub")).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::PermissionDenied, "{e}");
    assert_eq!(e.code(), Some("RequestDisallowedByPolicy"));
    let s = e.to_string();
    assert!(s.contains(POLICY), "the policy is named: {s}");
    assert!(
        s.contains("ORCA_AZURE_PUBLIC_IP=false"),
        "the way out is named: {s}"
    );
    assert_eq!(stray(&f), vec![], "nothing is left behind");
}

#[test]
fn the_setting_is_a_boolean_named_when_wrong() {
    let f = settings_without_fake();
    let c = f.clone().build().unwrap();
    assert!(c.public_ip, "machines have a public address by default");
    assert!(!f.clone().public_ip(false).build().unwrap().public_ip);
    let e = f
        .with_config(ConfigKey::PublicIp, "perhaps")
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("ORCA_AZURE_PUBLIC_IP"), "{e}");
}

fn settings_without_fake() -> orca_azure::ConfigBuilder {
    orca_azure::Config::builder()
        .subscription_id("sub-1")
        .resource_group("rg")
        .vnet(VNET)
        .subnet(SUBNET)
        .image("Canonical:ubuntu-24_04-lts:server:latest")
        .admin_user("orca")
        .ssh_public_key(SSH_KEY)
        .token("t")
}
