//! A resource held by another operation: Azure answers 409 `AnotherOperationInProgress` for as long
//! as that operation runs (seconds to minutes), and a create, delete or resize waits it out instead
//! of giving up after the few quick retries of a passing failure.

use crate::common;

use std::time::Duration;

use common::*;
use orca_fakes::azure::{FakeAzure, RESOURCE_GROUP};
use orca_machines::{ErrorKind, MachineSpec, Provider, RetryPolicy};

/// Longer than every retry of a passing failure under the tests' policy (six retries of at most
/// 50 ms), far shorter than its busy wait (10 s).
const HELD: Duration = Duration::from_secs(2);

fn spec(name: &str) -> MachineSpec {
    MachineSpec::new(name, AMD, LOCATION, "lab")
}

/// The 409 answers the fake gave.
fn refused(f: &FakeAzure) -> usize {
    f.control().log().iter().filter(|l| l.status == 409).count()
}

#[tokio::test]
async fn a_create_waits_for_the_network_another_operation_holds() {
    let f = fake().await;
    let p = provider(&f, "stack-1").await;
    // Someone changes the location's network: its interfaces cannot be made meanwhile.
    f.hold(
        RESOURCE_GROUP,
        "Microsoft.Network/virtualNetworks",
        &format!("{VNET}-{LOCATION}"),
        HELD,
    );
    let m = p.create(&spec("vm-held")).await.unwrap().machine().unwrap();
    assert_eq!(m.id, "vm-held");
    assert!(refused(&f) > 0, "the interface's PUT met the lock");
    assert!(p.machine("vm-held").await.unwrap().is_some());
}

#[tokio::test]
async fn a_delete_waits_for_the_vm_another_operation_holds() {
    let f = fake().await;
    let p = provider(&f, "stack-1").await;
    p.create(&spec("vm-del")).await.unwrap().machine().unwrap();
    f.hold(
        RESOURCE_GROUP,
        "Microsoft.Compute/virtualMachines",
        "vm-del",
        HELD,
    );
    f.control().clear_log();
    assert!(p.delete("vm-del").await.unwrap());
    assert!(refused(&f) > 0, "the VM's DELETE met the lock");
    assert!(f
        .resource(
            RESOURCE_GROUP,
            "Microsoft.Compute/virtualMachines",
            "vm-del"
        )
        .is_none());
}

#[tokio::test]
async fn a_resize_waits_for_the_vm_another_operation_holds() {
    let f = fake().await;
    let p = provider(&f, "stack-1").await;
    p.create(&spec("vm-big")).await.unwrap().machine().unwrap();
    f.hold(
        RESOURCE_GROUP,
        "Microsoft.Compute/virtualMachines",
        "vm-big",
        HELD,
    );
    f.control().clear_log();
    let r = p.resize("vm-big", "Standard_D2s_v5").await.unwrap();
    assert_eq!(r.machine.machine_type, "Standard_D2s_v5");
    assert!(refused(&f) > 0, "the VM's PATCH met the lock");
}

#[tokio::test]
async fn a_lock_outlasting_the_busy_wait_is_a_busy_error_that_made_nothing() {
    let f = fake().await;
    let settings = settings(&f)
        .retry(RetryPolicy::fast().with_busy_wait(Duration::from_millis(300)))
        .build()
        .unwrap();
    let p = orca_azure::AzureProvider::new(settings, "stack-1")
        .await
        .unwrap();
    f.hold(
        RESOURCE_GROUP,
        "Microsoft.Network/virtualNetworks",
        &format!("{VNET}-{LOCATION}"),
        Duration::from_secs(600),
    );
    let e = p.create(&spec("vm-late")).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Busy, "{e}");
    assert_eq!(e.code(), Some("AnotherOperationInProgress"), "{e}");
    // What the create made before the interface is removed again.
    let left: Vec<_> = f
        .resources(RESOURCE_GROUP)
        .into_iter()
        .filter(|(t, _)| t != "Microsoft.Network/virtualNetworks")
        .collect();
    assert!(left.is_empty(), "{left:?}");
}
