//! What the real Azure does that a kind fake hid, each taught to the fake first: the interface a failed VM holds, resource-group scoped
//! principals, the size catalogue per location, operations in progress, credentials found without
//! variables, and VMs that reads show only a moment after their create.

use crate::common;

use std::time::Duration;

use common::*;
use orca_fakes::azure::{RESOURCE_GROUP, SUBSCRIPTION, TOKEN};
use orca_machines::{Created, ErrorKind, MachineSpec, Provider};

fn spec(name: &str) -> MachineSpec {
    MachineSpec::new(name, AMD, LOCATION, "lab").with_user_data("#cloud-config\n")
}

fn stray(f: &orca_fakes::azure::FakeAzure) -> Vec<(String, String)> {
    f.resources(RESOURCE_GROUP)
        .into_iter()
        .filter(|(t, _)| t != "Microsoft.Network/virtualNetworks")
        .collect()
}

#[tokio::test]
async fn a_failed_vm_takes_its_reserved_interface_with_it_and_the_outcome_is_no_stock() {
    let f = fake().await;
    let p = provider(&f, "stack-1").await;
    // The fake, like Azure, reserves a failed VM's interface: deleting it on its own is refused.
    f.fail_allocation(AMD, LOCATION, "AllocationFailed");
    let raw = reqwest::Client::new();
    let base = format!(
        "{}/subscriptions/{SUBSCRIPTION}/resourceGroups/{RESOURCE_GROUP}/providers",
        f.url()
    );
    let mut outcomes = Vec::new();
    for (i, code) in ["AllocationFailed", "ZonalAllocationFailed"]
        .iter()
        .enumerate()
    {
        f.fail_allocation(AMD, LOCATION, code);
        let name = format!("vm-r{i}");
        match p.create(&spec(&name)).await {
            Ok(Created::NoStock {
                machine_type,
                location,
                message,
                ..
            }) => {
                assert_eq!((machine_type.as_str(), location.as_str()), (AMD, LOCATION));
                assert!(message.contains(code), "{message}");
            }
            other => panic!("{code}: {other:?}, not no stock"),
        }
        outcomes.push(stray(&f));
    }
    assert!(
        outcomes.iter().all(|s| s.is_empty()),
        "left behind: {outcomes:?}"
    );
    assert!(
        f.reserved_interfaces().is_empty(),
        "{:?}",
        f.reserved_interfaces()
    );

    // What the driver avoided: an interface deleted on its own after its VM failed.
    f.control().clear_log();
    let nic = serde_json::json!({"location": LOCATION, "properties": {"ipConfigurations": [{"name": "c",
        "properties": {"subnet": {"id": format!("/subscriptions/{SUBSCRIPTION}/resourceGroups/{RESOURCE_GROUP}/providers/Microsoft.Network/virtualNetworks/{VNET}-{LOCATION}/subnets/{SUBNET}")}}}]}});
    let r = raw
        .put(format!(
            "{base}/Microsoft.Network/networkInterfaces/bare-nic?api-version=2024-05-01"
        ))
        .bearer_auth(TOKEN)
        .json(&nic)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{:?}", r.text().await);
    let vm = serde_json::json!({"location": LOCATION, "properties": {
        "hardwareProfile": {"vmSize": AMD},
        "storageProfile": {"imageReference": {"publisher": "Canonical", "offer": "o", "sku": "server", "version": "latest"}},
        "osProfile": {"computerName": "bare", "adminUsername": "orca", "linuxConfiguration": {
            "disablePasswordAuthentication": true, "ssh": {"publicKeys": [{"path": "/home/orca/.ssh/authorized_keys", "keyData": SSH_KEY}]}}},
        "networkProfile": {"networkInterfaces": [{"id": format!("/subscriptions/{SUBSCRIPTION}/resourceGroups/{RESOURCE_GROUP}/providers/Microsoft.Network/networkInterfaces/bare-nic")}]}}});
    let r = raw
        .put(format!(
            "{base}/Microsoft.Compute/virtualMachines/bare?api-version=2024-07-01"
        ))
        .bearer_auth(TOKEN)
        .json(&vm)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());
    tokio::time::sleep(Duration::from_millis(60)).await; // the operation ends (and fails)
    let _ = raw
        .get(format!(
            "{base}/Microsoft.Compute/virtualMachines/bare?api-version=2024-07-01"
        ))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    let r = raw
        .delete(format!(
            "{base}/Microsoft.Network/networkInterfaces/bare-nic?api-version=2024-05-01"
        ))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "NicReservedForAnotherVm", "{body}");
    f.restore_stock(AMD, LOCATION);

    // A quota refusal makes no VM and reserves nothing: Quota, with nothing left.
    f.exceed_quota(AMD);
    let e = p.create(&spec("vm-q")).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Quota, "{e}");
    assert!(
        stray(&f).iter().all(|(_, n)| n.starts_with("bare")),
        "{:?}",
        stray(&f)
    );
}

#[tokio::test]
async fn listing_works_for_a_principal_scoped_to_the_resource_group() {
    let f = fake().await;
    let p = provider(&f, "stack-1").await;
    p.create(&spec("vm-s1")).await.unwrap();
    p.create(&spec("vm-s2")).await.unwrap();
    p.stop("vm-s2").await.unwrap();
    // The documented role is scoped to the resource group: no subscription-wide VM list.
    f.scope_to_resource_group(true);
    f.control().clear_log();
    let mut got = p.machines("lab").await.unwrap();
    got.sort_by(|a, b| a.id.cmp(&b.id));
    assert_eq!(
        got.iter()
            .map(|m| (m.id.as_str(), m.status.as_str()))
            .collect::<Vec<_>>(),
        [("vm-s1", "running"), ("vm-s2", "stopped")]
    );
    let sub_wide =
        format!("/subscriptions/{SUBSCRIPTION}/providers/Microsoft.Compute/virtualMachines");
    assert!(
        f.control()
            .log()
            .iter()
            .all(|l| !l.path.starts_with(&sub_wide)),
        "{:?}",
        f.control().log()
    );
}

#[tokio::test]
async fn the_size_catalogue_is_read_per_location_and_cached() {
    let f = fake().await;
    f.add_subnet(
        RESOURCE_GROUP,
        &format!("{VNET}-northeurope"),
        "northeurope",
        SUBNET,
        None,
    );
    let p = provider(&f, "stack-1").await;
    let skus = |f: &orca_fakes::azure::FakeAzure| -> Vec<String> {
        f.control()
            .log()
            .into_iter()
            .filter(|l| l.path.contains("/providers/Microsoft.Compute/skus"))
            .map(|l| l.path)
            .collect()
    };
    assert_eq!(p.arch(AMD).await.unwrap().as_str(), "amd64");
    assert_eq!(p.arch(ARM).await.unwrap().as_str(), "arm64");
    p.create(&spec("vm-w")).await.unwrap();
    assert_eq!(skus(&f).len(), 1, "{:?}", skus(&f));
    assert!(
        skus(&f)[0].contains("$filter=location+eq+%27westeurope%27")
            || skus(&f)[0].contains("$filter=location%20eq%20%27westeurope%27"),
        "{:?}",
        skus(&f)
    );
    // Another location reads its own catalogue, once.
    p.create(&MachineSpec::new("vm-n1", ARM, "northeurope", "lab"))
        .await
        .unwrap();
    p.create(&MachineSpec::new("vm-n2", AMD, "northeurope", "lab"))
        .await
        .unwrap();
    let all = skus(&f);
    assert_eq!(all.len(), 2, "{all:?}");
    assert!(all[1].contains("northeurope"), "{all:?}");
    assert!(all
        .iter()
        .all(|s| s.contains("%24filter=") || s.contains("$filter=")));
}

#[tokio::test]
async fn on_a_vm_with_an_identity_the_automatic_credential_is_its_managed_identity() {
    let f = fake().await;
    f.set_managed_identity(true);
    let s = settings(&f)
        .credential(orca_azure::Credential::Auto)
        .build()
        .unwrap();
    let p = orca_azure::AzureProvider::new(s, "stack-1").await.unwrap();
    // The token comes from the metadata service (asked with `Metadata: true`) and Resource
    // Manager accepts it.
    assert!(p.machines("lab").await.unwrap().is_empty());
    let log = f.control().log();
    let token_calls = log
        .iter()
        .filter(|l| l.path.starts_with("/metadata/identity/oauth2/token"))
        .count();
    assert_eq!(token_calls, 2, "the probe and the token: {log:?}");
    assert!(log
        .iter()
        .any(|l| l.path.contains("/virtualMachines?") && l.status == 200));
}

#[tokio::test]
async fn auto_credentials_find_the_metadata_service_and_workload_identity_before_the_cli() {
    let f = fake().await;
    // On an Azure VM no variable says so: the instance metadata service answers.
    assert_eq!(
        orca_azure::auto_choice(&f.url()).await,
        orca_azure::AutoChoice::ManagedIdentity
    );
    assert!(
        f.control()
            .log()
            .iter()
            .any(|l| l.path.starts_with("/metadata/identity/oauth2/token")),
        "{:?}",
        f.control().log()
    );
    // Elsewhere nothing answers there: the Azure CLI.
    let closed = common::refusing_port();
    let addr = closed.local_addr().unwrap();
    assert_eq!(
        orca_azure::auto_choice(&format!("http://{addr}")).await,
        orca_azure::AutoChoice::AzureCli
    );
    // With a federated token file (Kubernetes' workload identity), workload identity.
    let s = orca_machines::Settings::new()
        .with("ORCA_AZURE_SUBSCRIPTION_ID", SUBSCRIPTION)
        .with("ORCA_AZURE_RESOURCE_GROUP", RESOURCE_GROUP)
        .with("ORCA_AZURE_VNET", VNET)
        .with("ORCA_AZURE_SUBNET", SUBNET)
        .with(
            "ORCA_AZURE_IMAGE",
            "Canonical:ubuntu-24_04-lts:server:latest",
        )
        .with("ORCA_AZURE_ADMIN_USER", "orca")
        .with("AZURE_TENANT_ID", "72f988bf-86f1-41af-91ab-2d7cd011db47")
        .with("AZURE_CLIENT_ID", "00000000-0000-4000-8000-00000000c1d0")
        .with(
            "AZURE_FEDERATED_TOKEN_FILE",
            "/var/run/secrets/azure/tokens/azure-identity-token",
        );
    let c = orca_azure::Config::from_settings(&s).unwrap();
    assert!(
        matches!(
            c.credential,
            orca_azure::Credential::WorkloadIdentity { .. }
        ),
        "{:?}",
        c.credential
    );
}

#[tokio::test]
async fn a_create_answers_once_reads_show_the_vm_and_a_fresh_vm_is_not_believed_gone() {
    let f = fake().await;
    f.set_visibility_delay(Duration::from_millis(800));
    let a = provider(&f, "stack-1").await;
    let m = a.create(&spec("vm-v1")).await.unwrap().machine().unwrap();
    // Answered only once reads show it.
    let r = reqwest::Client::new()
        .get(format!(
            "{}/subscriptions/{SUBSCRIPTION}/resourceGroups/{RESOURCE_GROUP}/providers/Microsoft.Compute/virtualMachines/{}?api-version=2024-07-01",
            f.url(),
            m.id
        ))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);

    // A VM another process is making, by name, while reads do not show it yet: another provider
    // of the same owner finds it, and another owner is refused rather than told it is gone.
    let maker = provider(&f, "stack-1").await;
    let making = tokio::spawn(async move { maker.create(&spec("vm-v2")).await });
    while f
        .resource(RESOURCE_GROUP, "Microsoft.Compute/virtualMachines", "vm-v2")
        .is_none()
    {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let b = provider(&f, "stack-1").await;
    let other = provider(&f, "stack-2").await;
    let (seen, refused) = tokio::join!(b.machine("vm-v2"), other.delete("vm-v2"));
    assert!(seen.unwrap().is_some(), "a fresh VM read as none");
    assert_eq!(refused.unwrap_err().kind(), ErrorKind::NotOwned);
    making.await.unwrap().unwrap();
    // And deleting right after a create really deletes.
    assert!(b.delete("vm-v2").await.unwrap());
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert!(b.machine("vm-v2").await.unwrap().is_none());
    assert!(
        stray(&f).iter().all(|(_, n)| n.starts_with("vm-v1")),
        "{:?}",
        stray(&f)
    );
}
