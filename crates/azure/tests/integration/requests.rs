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

#[tokio::test(start_paused = true)]
async fn concurrent_creates_and_deletes_keep_within_the_throttling_buckets() {
    // Twenty creates at once (four writes each), then twenty deletes (two deletes each), under
    // buckets of 10 writes and 10 deletes refilled at Resource Manager's published rates: paced
    // from what each answer says is left, no request meets a 429.
    let f = common::fake().await;
    f.set_throttling(Some(orca_fakes::azure::ArmLimits {
        reads: (250, 25.0),
        writes: (10, 10.0),
        deletes: (10, 10.0),
    }));
    let p = std::sync::Arc::new(common::provider(&f, "me").await);
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..20 {
        let p = p.clone();
        tasks.spawn(async move {
            let spec = MachineSpec::new(format!("thr-{i}"), AMD, LOCATION, "lab");
            p.create(&spec)
                .await
                .map(|c| c.machine().unwrap().id.clone())
        });
    }
    let mut ids = Vec::new();
    while let Some(r) = tasks.join_next().await {
        ids.push(r.unwrap().unwrap());
    }
    for id in ids {
        let p = p.clone();
        tasks.spawn(async move { p.delete(&id).await.map(|_| String::new()) });
    }
    while let Some(r) = tasks.join_next().await {
        r.unwrap().unwrap();
    }
    assert_eq!(f.throttled(), 0, "requests met 429 TooManyRequests");
    assert!(p.machines("lab").await.unwrap().is_empty());
}
