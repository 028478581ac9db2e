//! `orca::of("azure", owner)` from environment variables and `orca::of_with("azure", owner, &settings)`
//! from a map, against the fake Azure Resource Manager. Environment variables are process-global,
//! and the other modules' tests of this binary run beside it in threads (reading
//! `ORCA_POLL_INTERVAL`, say): the test that sets them runs alone, in a child process of its own.

use orca::{Created, ErrorKind, MachineSpec, Settings};
use orca_fakes::azure::{FakeAzure, RESOURCE_GROUP, SUBSCRIPTION, TOKEN};

const REQUIRED: &[&str] = &[
    "ORCA_AZURE_SUBSCRIPTION_ID",
    "ORCA_AZURE_RESOURCE_GROUP",
    "ORCA_AZURE_VNET",
    "ORCA_AZURE_SUBNET",
    "ORCA_AZURE_IMAGE",
    "ORCA_AZURE_ADMIN_USER",
];

fn keys(e: &orca::Error) -> Vec<String> {
    match e {
        orca::Error::InvalidSettings { keys, .. } => keys.clone(),
        other => panic!("not a settings error: {other:?}"),
    }
}

#[test]
fn of_azure_from_the_environment_and_from_settings() {
    orca_fakes::alone::run_alone(
        module_path!(),
        "of_azure_from_the_environment_and_from_settings_alone",
        &[],
        &[],
    );
}

/// The test itself, run alone in a process of its own: it clears and sets environment variables
/// that every driver's `orca::of` reads.
#[tokio::test]
#[ignore = "runs alone, started by the test of the same name without _alone"]
async fn of_azure_from_the_environment_and_from_settings_alone() {
    orca_fakes::alone::assert_alone(
        module_path!(),
        "of_azure_from_the_environment_and_from_settings_alone",
    );
    // No IMDS, no CLI, no real endpoint can be reached: every Azure variable is cleared first, and
    // the token is a static one for the fake.
    for (k, _) in std::env::vars() {
        if k.starts_with("ORCA_AZURE_")
            || k.starts_with("AZURE_")
            || k == "IDENTITY_ENDPOINT"
            || k == "MSI_ENDPOINT"
        {
            std::env::remove_var(k);
        }
    }
    let e = orca::of("azure", "stack-1").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidSettings);
    assert_eq!(keys(&e), REQUIRED, "{e}");

    let fake = FakeAzure::start().await.unwrap();
    fake.add_subnet(
        RESOURCE_GROUP,
        "orca-net-westeurope",
        "westeurope",
        "hosts",
        None,
    );
    let values = [
        ("ORCA_AZURE_SUBSCRIPTION_ID", SUBSCRIPTION.to_string()),
        ("ORCA_AZURE_RESOURCE_GROUP", RESOURCE_GROUP.to_string()),
        ("ORCA_AZURE_VNET", "orca-net".to_string()),
        ("ORCA_AZURE_SUBNET", "hosts".to_string()),
        (
            "ORCA_AZURE_IMAGE",
            "Canonical:ubuntu-24_04-lts:server:latest".to_string(),
        ),
        ("ORCA_AZURE_ADMIN_USER", "orca".to_string()),
        (
            "ORCA_AZURE_SSH_PUBLIC_KEY",
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeKeyForTheFake orca@test".to_string(),
        ),
        ("ORCA_AZURE_SSH_SOURCES", "203.0.113.7/32".to_string()),
        ("ORCA_AZURE_ACCESS_TOKEN", TOKEN.to_string()),
        ("ORCA_AZURE_ENDPOINT", fake.url()),
        ("ORCA_AZURE_PRICES_ENDPOINT", fake.url()),
        // The fake's operations end at once and name no pause: poll them often, not every 2 s.
        ("ORCA_POLL_INTERVAL", "20ms".to_string()),
    ];

    // As data: a missing key and a wrong value are named together; an unknown key is refused.
    let mut settings: Settings = values.iter().cloned().collect();
    settings.insert("ORCA_AZURE_VNET", "");
    settings.insert("ORCA_AZURE_OS_DISK_GB", "lots");
    let e = orca::of_with("azure", "stack-1", &settings)
        .await
        .unwrap_err();
    assert_eq!(
        keys(&e),
        ["ORCA_AZURE_VNET", "ORCA_AZURE_OS_DISK_GB"],
        "{e}"
    );
    let mut typo: Settings = values.iter().cloned().collect();
    typo.insert("ORCA_AZURE_SUBNETS", "x");
    let e = orca::of_with("azure", "stack-1", &typo).await.unwrap_err();
    assert_eq!(keys(&e), ["ORCA_AZURE_SUBNETS"], "{e}");
    assert!(!e.to_string().contains(TOKEN), "no value is shown: {e}");
    let p = orca::of_with("azure", "stack-1", &values.iter().cloned().collect())
        .await
        .unwrap();
    assert!(p.machines("lab").await.unwrap().is_empty());

    // From the environment.
    for (k, v) in &values {
        std::env::set_var(k, v);
    }
    let p = orca::of("azure", "stack-1").await.unwrap();
    assert_eq!(p.kind(), "azure");
    assert!(
        !format!("{p:?}").contains(TOKEN),
        "the token is never printed"
    );
    assert_eq!(p.arch("Standard_B2pts_v2").await.unwrap().as_str(), "arm64");
    let Created::Machine(m) = p
        .create(&MachineSpec::new(
            "w-1",
            "Standard_B2s",
            "westeurope",
            "lab",
        ))
        .await
        .unwrap()
    else {
        panic!("no stock")
    };
    assert!(!m.fqdn.is_empty() && !m.private_address.is_empty() && m.created_at.is_some());
    assert_eq!(p.machines("lab").await.unwrap().len(), 1);
    assert!(
        p.hourly_price("Standard_B2s", "westeurope")
            .await
            .unwrap()
            .hourly
            > 0.0
    );
    assert!(p.delete(&m.id).await.unwrap());
    assert!(p.machines("lab").await.unwrap().is_empty());
    assert!(p.ssh_admission().is_some() && p.machine_labels().is_some());
    assert!(
        p.credit_balance().is_none(),
        "no billing profile is set: no credit balance"
    );
}
