//! `delete_named`: what this owner's creates of a name made in a pool (the VM if it stands, and the
//! address, security group, interface and OS disk of that name carrying this owner's and this
//! pool's tags), removed without the machine's id; another owner's or pool's left alone.

use std::time::Duration;

use crate::common;

use common::*;
use orca_fakes::azure::{FakeAzure, RESOURCE_GROUP, SUBSCRIPTION};
use orca_machines::{Error, ErrorKind, MachineSpec, Provider};
use serde_json::json;

const VNET_TYPE: &str = "Microsoft.Network/virtualNetworks";
const PIP: &str = "Microsoft.Network/publicIPAddresses";
const NSG: &str = "Microsoft.Network/networkSecurityGroups";
const NIC: &str = "Microsoft.Network/networkInterfaces";
const DISK: &str = "Microsoft.Compute/disks";

fn spec(name: &str, pool: &str) -> MachineSpec {
    MachineSpec::new(name, AMD, LOCATION, pool)
}

/// Everything in the resource group but the virtual network.
fn stray(f: &FakeAzure) -> Vec<(String, String)> {
    f.resources(RESOURCE_GROUP)
        .into_iter()
        .filter(|(t, _)| t != VNET_TYPE)
        .collect()
}

/// The address, security group and interface of machine `name`, as [`stray`] lists them.
fn pieces(name: &str) -> Vec<(String, String)> {
    let mut p = vec![
        (NIC.to_string(), format!("{name}-nic")),
        (NSG.to_string(), format!("{name}-nsg")),
        (PIP.to_string(), format!("{name}-ip")),
    ];
    p.sort();
    p
}

/// What a create of `name` in `pool` by `p` leaves when the VM's `PUT` is refused (a policy deny)
/// and its clean-up cannot delete what it made (delete locks): the address, security group and
/// interface, tagged as `p`'s of `pool`. The faults are lifted before it answers.
async fn leave_pieces(f: &FakeAzure, p: &dyn Provider, name: &str, pool: &str) {
    f.deny_policy("Microsoft.Compute/virtualMachines", "deny-vms");
    let locked = [
        format!("{name}-nic"),
        format!("{name}-nsg"),
        format!("{name}-ip"),
    ];
    for l in &locked {
        f.refuse_delete(l);
    }
    let e = p.create(&spec(name, pool)).await.unwrap_err();
    let Error::Leftovers { error, left } = &e else {
        panic!("{e:?}")
    };
    assert_eq!(error.kind(), ErrorKind::PermissionDenied, "{e}");
    assert_eq!(left.len(), 3, "{left:?}");
    f.clear_policies();
    for l in &locked {
        f.allow_delete(l);
    }
}

#[tokio::test]
async fn the_pieces_a_failed_create_left_go_by_name() {
    let f = fake().await;
    let p = provider(&f, "stack-1").await;
    leave_pieces(&f, &p, "vm-n", "lab").await;
    assert_eq!(stray(&f), pieces("vm-n"));
    assert!(p.machine_named("lab", "vm-n").await.unwrap().is_none());
    assert!(p.delete_named("lab", "vm-n").await.unwrap());
    assert_eq!(stray(&f), vec![]);
    assert!(!p.delete_named("lab", "vm-n").await.unwrap());
}

#[tokio::test]
async fn another_owners_or_pools_things_of_the_name_are_left_alone() {
    let f = fake().await;
    let a = provider(&f, "stack-a").await;
    let b = provider(&f, "stack-b").await;
    let none = provider(&f, "").await;
    // Pieces without a VM: only their owner's delete of their pool removes them.
    leave_pieces(&f, &b, "vm-o", "lab").await;
    for (who, p, pool) in [
        ("another owner", &a, "lab"),
        ("the empty owner", &none, "lab"),
        ("their owner in another pool", &b, "other"),
    ] {
        assert!(!p.delete_named(pool, "vm-o").await.unwrap(), "{who}");
        assert_eq!(stray(&f), pieces("vm-o"), "{who}");
    }
    assert!(b.delete_named("lab", "vm-o").await.unwrap());
    assert_eq!(stray(&f), vec![]);

    // A machine: another owner's, or the same owner's in another pool, touches nothing of it.
    a.create(&spec("vm-q", "lab"))
        .await
        .unwrap()
        .machine()
        .unwrap();
    let whole = stray(&f);
    assert_eq!(whole.len(), 5, "{whole:?}");
    for (who, p, pool) in [
        ("another owner", &b, "lab"),
        ("the empty owner", &none, "lab"),
        ("its owner in another pool", &a, "other"),
    ] {
        assert!(!p.delete_named(pool, "vm-q").await.unwrap(), "{who}");
        assert_eq!(stray(&f), whole, "{who}");
    }
    assert!(a.machine_named("lab", "vm-q").await.unwrap().is_some());
}

/// An OS disk is removed by name only when it carries this owner's tags of that pool: Azure tags
/// no disk it makes, so an untagged one is not known to be ours.
#[tokio::test]
async fn an_os_disk_goes_by_name_only_with_this_owners_tags_of_the_pool() {
    let f = fake().await;
    let p = provider(&f, "stack-1").await;
    let disk = |name: &str| {
        format!(
            "/subscriptions/{SUBSCRIPTION}/resourceGroups/{RESOURCE_GROUP}/providers/{DISK}/{name}"
        )
    };
    let tags = json!({"orca": "pool", "orca-pool": "other", "orca-owner": "stack-1"});
    f.put_resource(
        &disk("vm-t-osdisk"),
        json!({"location": LOCATION, "tags": tags}),
    )
    .await
    .unwrap();
    f.put_resource(&disk("vm-u-osdisk"), json!({"location": LOCATION}))
        .await
        .unwrap();
    assert!(!p.delete_named("lab", "vm-t").await.unwrap());
    assert!(!p.delete_named("lab", "vm-u").await.unwrap());
    assert!(!p.delete_named("other", "vm-u").await.unwrap());
    assert_eq!(stray(&f).len(), 2);
    assert!(p.delete_named("other", "vm-t").await.unwrap());
    assert_eq!(
        stray(&f),
        vec![(DISK.to_string(), "vm-u-osdisk".to_string())]
    );
}

#[tokio::test]
async fn a_piece_that_refuses_deletion_is_named_and_a_second_call_removes_it() {
    let f = fake().await;
    let p = provider(&f, "stack-1").await;
    leave_pieces(&f, &p, "vm-r", "lab").await;
    f.refuse_delete("vm-r-nsg");
    let e = p.delete_named("lab", "vm-r").await.unwrap_err();
    let Error::Leftovers { left, .. } = &e else {
        panic!("{e:?}")
    };
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(left[0].starts_with("security group vm-r-nsg"), "{left:?}");
    assert!(e.to_string().contains("again"), "{e}");
    assert_eq!(stray(&f), vec![(NSG.to_string(), "vm-r-nsg".to_string())]);
    f.allow_delete("vm-r-nsg");
    assert!(p.delete_named("lab", "vm-r").await.unwrap());
    assert_eq!(stray(&f), vec![]);
}

#[tokio::test]
async fn a_standing_vm_and_its_pieces_all_go() {
    let f = fake().await;
    let p = provider(&f, "stack-1").await;
    p.create(&spec("vm-s", "lab"))
        .await
        .unwrap()
        .machine()
        .unwrap();
    assert_eq!(stray(&f).len(), 5);
    assert!(p.delete_named("lab", "vm-s").await.unwrap());
    assert_eq!(stray(&f), vec![]);
    assert!(p.machine_named("lab", "vm-s").await.unwrap().is_none());

    // A VM whose create failed and whose clean-up could not delete it (its interface was locked)
    // stands, Failed, with its disk and pieces: all go by name once the lock is gone.
    f.fail_allocation(AMD, LOCATION, "AllocationFailed");
    f.refuse_delete("vm-e-nic");
    assert!(p
        .create(&spec("vm-e", "lab"))
        .await
        .unwrap()
        .machine()
        .is_none());
    assert_eq!(stray(&f).len(), 5, "{:?}", stray(&f));
    f.allow_delete("vm-e-nic");
    assert!(p.delete_named("lab", "vm-e").await.unwrap());
    assert_eq!(stray(&f), vec![]);
}

#[tokio::test]
async fn bad_input_is_refused_before_any_request() {
    let f = fake().await;
    let p = provider(&f, "stack-1").await;
    let long = "a".repeat(59);
    for (pool, name, field) in [
        ("a,b", "vm-a", "pool"),
        ("lab", "Not-A-Name", "name"),
        ("lab", long.as_str(), "name"),
    ] {
        match p.delete_named(pool, name).await {
            Err(Error::InvalidSpec { field: got, .. }) => assert_eq!(got, field),
            other => panic!("({pool}, {name}): {other:?}"),
        }
    }
    assert_eq!(f.control().requests(), 0);
}

/// What a delete by name costs: a standing machine the requests of a delete (11), nothing there
/// the reads of the VM, of its interface (a VM that does not show yet names it) and of each piece.
#[tokio::test]
async fn a_delete_by_name_makes_a_known_number_of_requests() {
    let f = fake().await;
    let p = provider(&f, "stack-1").await;
    p.create(&spec("vm-c", "lab"))
        .await
        .unwrap()
        .machine()
        .unwrap();
    f.control().clear_log();
    assert!(p.delete_named("lab", "vm-c").await.unwrap());
    assert_eq!(f.control().requests(), 11, "{:?}", f.control().log());
    f.control().clear_log();
    assert!(!p.delete_named("lab", "vm-c").await.unwrap());
    assert_eq!(f.control().requests(), 6, "{:?}", f.control().log());
}

/// A delete by id of a name whose VM is gone cannot tell which pool the pieces of that name are
/// of: another pool of the same owner may be making (or have failed to make) a machine of that
/// name. It removes none of them; `delete_named` of their pool does.
#[tokio::test]
async fn a_delete_by_id_without_a_vm_leaves_another_pools_pieces_of_the_name() {
    let f = fake().await;
    let p = provider(&f, "stack-1").await;
    // Pool b's create of vm-r2 failed at its VM and could not remove its pieces.
    leave_pieces(&f, &p, "vm-r2", "b").await;
    assert_eq!(stray(&f), pieces("vm-r2"));
    // Pool a's machine vm-r2 is gone: deleting it, by name or by id, leaves pool b's pieces.
    assert!(!p.delete_named("a", "vm-r2").await.unwrap());
    assert_eq!(stray(&f), pieces("vm-r2"));
    assert!(p.delete("vm-r2").await.unwrap());
    assert_eq!(
        stray(&f),
        pieces("vm-r2"),
        "a delete by id removed pool b's pieces"
    );
    // Their own pool's delete by name removes them.
    assert!(p.delete_named("b", "vm-r2").await.unwrap());
    assert_eq!(stray(&f), vec![]);
}

/// A standing VM's delete removes the pieces of its name that carry this owner's tags of the VM's
/// own pool, and no other pool's.
#[tokio::test]
async fn a_delete_by_id_removes_only_pieces_of_the_vms_own_pool() {
    let f = fake().await;
    let p = provider(&f, "stack-1").await;
    p.create(&spec("vm-p", "a"))
        .await
        .unwrap()
        .machine()
        .unwrap();
    // Its security group (the one piece a VM's delete does not take) says pool b of the same owner.
    let nsg = format!(
        "/subscriptions/{SUBSCRIPTION}/resourceGroups/{RESOURCE_GROUP}/providers/{NSG}/vm-p-nsg/providers/Microsoft.Resources/tags/default"
    );
    let c = reqwest::Client::new();
    let r = c
        .patch(format!("{}{nsg}?api-version=2021-04-01", f.url()))
        .bearer_auth(orca_fakes::azure::TOKEN)
        .json(&json!({"operation": "Merge", "properties": {"tags": {"orca-pool": "b"}}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(p.delete("vm-p").await.unwrap());
    assert_eq!(stray(&f), vec![(NSG.to_string(), "vm-p-nsg".to_string())]);
    assert!(p.delete_named("b", "vm-p").await.unwrap());
    assert_eq!(stray(&f), vec![]);
}

/// A VM this provider made and whose delete was dropped (a caller's timeout) after it was sent:
/// reads showed the VM before its delete, so a "not found" for it now means the delete went
/// through. A delete by name believes it at once rather than reading the VM again through the
/// visibility window (5 s here, a minute by default), as it does for a VM no read has shown yet.
#[tokio::test]
async fn a_delete_by_name_after_a_dropped_delete_reads_the_vm_once() {
    let f = fake().await;
    let p = provider(&f, "stack-1").await;
    p.create(&spec("vm-l", "lab"))
        .await
        .unwrap()
        .machine()
        .unwrap();
    f.set_operation_time(Duration::from_millis(300));
    // The caller drops the delete once the fake has answered its DELETE of the VM (whenever a loaded
    // machine gets there), while the delete still follows the operation.
    {
        let delete = p.delete("vm-l");
        let sent = async {
            let method = "DELETE".parse().unwrap();
            while f.control().count(&method, "/virtualMachines/vm-l") == 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        tokio::select! {
            biased;
            () = sent => {}
            r = delete => panic!("the delete ended before its timeout: {r:?}"),
        }
    }
    // The delete operation runs on without its caller (past its 300 ms, which began before the
    // DELETE was answered).
    tokio::time::sleep(Duration::from_millis(400)).await;
    f.set_operation_time(Duration::ZERO);
    f.control().clear_log();
    p.delete_named("lab", "vm-l").await.unwrap();
    let vm_reads = f
        .control()
        .count(&"GET".parse().unwrap(), "/virtualMachines/vm-l");
    assert_eq!(vm_reads, 1, "{:?}", f.control().log());
    assert_eq!(stray(&f), vec![]);
}

/// A create dropped (a caller's timeout) once Azure was sent its VM's `PUT` and before the answer
/// came leaves a VM that reads may not show yet, while its interface may not name it yet either
/// (Azure documents no order between the two). A delete by name of it reads the VM again until it
/// shows, within the visibility window, and removes it with everything of its name, rather than
/// take it for gone and leave it standing.
#[tokio::test]
async fn a_create_dropped_after_its_vm_put_is_removed_by_name_once_reads_show_it() {
    let f = fake().await;
    let p = provider(&f, "stack-1").await;
    f.set_visibility_delay(Duration::from_secs(2));
    f.link_interfaces_when_visible();
    // The VM's PUT is served and its answer lost: the create waits to send it again.
    f.lose_next_vm_put_answer();
    let s = spec("vm-s", "lab");
    {
        let create = p.create(&s);
        let sent = async {
            let method = "PUT".parse().unwrap();
            while f.control().count(&method, "/virtualMachines/vm-s") == 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        tokio::select! {
            biased;
            () = sent => {}
            r = create => panic!("the create ended before it was dropped: {r:?}"),
        }
    }
    let vm = (
        "Microsoft.Compute/virtualMachines".to_string(),
        "vm-s".to_string(),
    );
    assert!(f.resources(RESOURCE_GROUP).contains(&vm), "{:?}", stray(&f));
    assert!(p.delete_named("lab", "vm-s").await.unwrap());
    // Past the fake's visibility delay, nothing of the name stands.
    tokio::time::sleep(Duration::from_millis(2100)).await;
    assert_eq!(stray(&f), vec![]);
}
