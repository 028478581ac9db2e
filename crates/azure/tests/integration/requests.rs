//! The requests a create, a delete and a read by name make, counted: what each costs of the
//! subscription's request budget is pinned here, so a change that spends more shows.

use crate::common;

use std::time::Duration;

use common::*;
use orca_fakes::azure::FakeAzure;
use orca_machines::{MachineSpec, Provider};

/// The requests since the log was cleared, as `METHOD kind` (the path's resource type, or
/// `operation` for a poll), sorted, with their counts.
fn tally(f: &FakeAzure) -> Vec<(String, usize)> {
    let mut counts = std::collections::BTreeMap::new();
    for l in f.control().log() {
        let path = l.path.split('?').next().unwrap_or("").to_ascii_lowercase();
        let segs: Vec<&str> = path.split('/').collect();
        let kind = if path.contains("/operations/") {
            "operation".to_string()
        } else if let Some(i) = segs.iter().position(|s| *s == "providers") {
            segs.get(i + 2)
                .map(|t| {
                    let rest = &segs[(i + 4).min(segs.len())..];
                    if rest.is_empty() {
                        t.to_string()
                    } else {
                        format!("{t}/{}", rest.join("/"))
                    }
                })
                .unwrap_or_default()
        } else {
            path.clone()
        };
        *counts.entry(format!("{} {kind}", l.method)).or_insert(0) += 1;
    }
    counts.into_iter().collect()
}

fn total(t: &[(String, usize)]) -> usize {
    t.iter().map(|(_, n)| n).sum()
}

async fn lab() -> (FakeAzure, orca_azure::AzureProvider) {
    let f = fake().await;
    // Operations end at once: each is polled once, so the counts do not depend on timing.
    f.set_operation_time(Duration::ZERO);
    let p = provider(&f, "stack-1").await;
    (f, p)
}

#[tokio::test]
async fn a_create_and_a_delete_make_a_known_number_of_requests() {
    let (f, p) = lab().await;
    let spec = MachineSpec::new("vm-count", AMD, LOCATION, "lab");
    f.control().clear_log();
    p.create(&spec).await.unwrap().machine().unwrap();
    let create = tally(&f);
    println!("create: {} requests: {create:?}", total(&create));
    assert_eq!(total(&create), CREATE, "{create:?}");

    f.control().clear_log();
    assert!(p.delete("vm-count").await.unwrap());
    let delete = tally(&f);
    println!("delete: {} requests: {delete:?}", total(&delete));
    assert_eq!(total(&delete), DELETE, "{delete:?}");
}

#[tokio::test]
async fn a_read_by_name_reads_the_vm_once_not_the_pool() {
    let (f, p) = lab().await;
    p.create(&MachineSpec::new("vm-named", AMD, LOCATION, "lab"))
        .await
        .unwrap()
        .machine()
        .unwrap();
    f.control().clear_log();
    let m = p.machine_named("lab", "vm-named").await.unwrap().unwrap();
    let read = tally(&f);
    println!("machine_named: {} requests: {read:?}", total(&read));
    assert_eq!(m.id, "vm-named");
    assert!(
        !m.address.is_empty() && !m.private_address.is_empty(),
        "{m:?}"
    );
    assert_eq!(total(&read), NAMED, "{read:?}");
}

/// A create: the size catalogue (1); for each of the address, security group and interface a read
/// (is it there already?), its PUT and one poll (9); the VM's PUT and its poll (2), and the read of
/// it (1).
const CREATE: usize = 13;
/// A delete: the VM read (1), deleted, polled and confirmed gone (3); the OS disk and the interface
/// read, gone with the VM (2); the security group read, deleted, polled and confirmed gone (4); the
/// address read, gone with the VM (1).
const DELETE: usize = 11;
/// A read by name: the VM with its instance view, its interface and its address.
const NAMED: usize = 3;
