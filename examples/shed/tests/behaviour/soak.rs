//! The soak: several clients create, stop, start and delete sheds while the cloud fails, slows down,
//! loses answers and runs out of stock, for ten minutes of compressed time with the periodic pass
//! running on the clock. It ends with no VM leaked, no record without its VM, and every shed in a
//! status it may have.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use orca::memory::{FaultKind, MemoryCloud, Operation};
use orca::ErrorKind;
use shed::backend::ID_LABEL;
use shed::model::CreateStage;
use shed::{Status, Timings};

use crate::support::{good_rule, Env};

const ALLOWED_CODES: [&str; 9] = [
    "SHED_EXISTS",
    "SERVER_LIMIT_REACHED",
    "CLOUD_QUOTA_EXCEEDED",
    "ZONE_CAPACITY_UNAVAILABLE",
    "NOT_FOUND",
    "SHED_RUNNING",
    "SHED_STOPPED",
    "SHED_FAILED",
    "FIREWALL_CHECK_FAILED",
];

fn chaos(cloud: &MemoryCloud) {
    let ops = [
        Operation::Create,
        Operation::List,
        Operation::Delete,
        Operation::Change,
        Operation::Labels,
    ];
    let op = ops[fastrand::usize(..ops.len())];
    let kind = match fastrand::u8(..10) {
        0..=2 => FaultKind::Error(ErrorKind::Transient),
        3 => FaultKind::Error(ErrorKind::Other),
        4 => FaultKind::Error(ErrorKind::Quota),
        5 => FaultKind::Error(ErrorKind::Throttled),
        6 => FaultKind::LoseAnswer,
        7 => FaultKind::Error(ErrorKind::PermissionDenied),
        _ => FaultKind::Latency(Duration::from_millis(2)),
    };
    cloud.inject(op, kind, 1);
    if fastrand::u8(..20) == 0 {
        cloud.set_stock("amd64-small", "zone-a", 0);
    } else if fastrand::u8(..10) == 0 {
        cloud.unlimited_stock("amd64-small", "zone-a");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soak_with_faults_ends_with_no_leak_and_every_shed_in_an_allowed_status() {
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let mut cfg = crate::support::test_config("dev", dir.path().join("remote"));
    cfg.limits.max_running = 4;
    cfg.limits.max_sheds = 8;
    cfg.max_run_duration = Duration::from_secs(600);
    let cloud = MemoryCloud::new();
    cloud.put_firewall_rule(good_rule());
    let env = Arc::new(Env::on(cloud, cfg, dir, Timings::standard(Duration::from_secs(60))).await);

    let stop = Arc::new(AtomicBool::new(false));
    // Time: ten compressed minutes, a second of them every millisecond or so.
    let clock = {
        let env = env.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            for i in 0..600u32 {
                env.advance(1).await;
                if i % 3 == 0 {
                    chaos(&env.cloud);
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            stop.store(true, Ordering::SeqCst);
        })
    };
    let mut clients = Vec::new();
    for c in 0..4 {
        let env = env.clone();
        let stop = stop.clone();
        clients.push(tokio::spawn(async move {
            let caller = env.service(&format!("client-{c}"));
            let names: Vec<String> = (0..3).map(|i| format!("c{c}-s{i}")).collect();
            let mut calls = 0u32;
            while !stop.load(Ordering::SeqCst) {
                let name = &names[fastrand::usize(..names.len())];
                let r = match fastrand::u8(..4) {
                    0 => env
                        .create_as(&caller, crate::support::Env::req(name))
                        .await
                        .map(|_| ()),
                    1 => env.backend.stop_shed(&caller, name).await.map(|_| ()),
                    2 => env.backend.start_shed(&caller, name).await.map(|_| ()),
                    _ => env.backend.delete_shed(&caller, name).await.map(|_| ()),
                };
                if let Err(e) = r {
                    assert!(
                        ALLOWED_CODES.contains(&e.code.as_str()),
                        "unexpected answer {e}"
                    );
                    if e.status == 409 {
                        assert!(
                            ["SHED_EXISTS", "SHED_RUNNING", "SHED_STOPPED", "SHED_FAILED"]
                                .contains(&e.code.as_str()),
                            "{e}"
                        );
                    }
                }
                calls += 1;
                tokio::time::sleep(Duration::from_millis(fastrand::u64(1..4))).await;
            }
            calls
        }));
    }
    clock.await.unwrap();
    let mut total = 0;
    for c in clients {
        total += c.await.unwrap();
    }
    assert!(total > 100, "the clients made {total} calls");

    // The cloud heals; the server settles within a few passes.
    env.cloud.clear_faults();
    env.cloud.unlimited_stock("amd64-small", "zone-a");
    for _ in 0..4 {
        env.advance(130).await;
        env.pass().await;
        env.until("the jobs settle", |e| e.backend.idle()).await;
    }
    check_invariants(&env);

    // Every shed deleted: nothing is left in the cloud.
    for s in env.backend.records() {
        env.backend
            .delete_shed(&env.admin(), &s.name)
            .await
            .unwrap();
    }
    env.until("the deletes are done", |e| e.backend.idle())
        .await;
    env.pass().await;
    env.until("the deletes are done", |e| e.backend.idle())
        .await;
    assert!(
        env.backend.markers().is_empty(),
        "{:?}",
        env.backend.markers()
    );
    assert!(env.vms().is_empty(), "leaked: {:?}", env.vms());
}

fn check_invariants(env: &Env) {
    let records = env.backend.records();
    let vms = env.vms();
    let vm_ids: HashSet<String> = vms
        .iter()
        .filter_map(|m| m.labels.get(ID_LABEL).cloned())
        .collect();
    let rec_ids: HashSet<String> = records.iter().map(|s| s.id.clone()).collect();
    // No VM leaked: every VM belongs to a shed the server lists.
    for m in &vms {
        let id = m.labels.get(ID_LABEL).cloned().unwrap_or_default();
        assert!(
            rec_ids.contains(&id),
            "leaked VM {m:?}; records {records:#?}; log {:#?}",
            env.backend.log().lines()
        );
    }
    assert!(
        env.backend.markers().is_empty(),
        "undone deletes {:?}",
        env.backend.markers()
    );
    for s in &records {
        // Every shed in one of the five statuses, with a reason its status may carry, and settled.
        assert!(
            s.reason
                .is_none_or(|r| s.status.allowed_reasons().contains(&r)),
            "{s:?}"
        );
        assert!(
            matches!(s.status, Status::Running | Status::Stopped | Status::Error),
            "unsettled {s:?}"
        );
        // No record without its VM.
        match s.status {
            Status::Running | Status::Stopped => {
                assert!(vm_ids.contains(&s.id), "record without its VM: {s:?}");
                assert_eq!(s.create, CreateStage::Made);
            }
            Status::Error => assert!(
                !vm_ids.contains(&s.id),
                "a failed create's VM is left: {s:?}"
            ),
            _ => {}
        }
        let vm = vms.iter().find(|m| m.labels.get(ID_LABEL) == Some(&s.id));
        if let (Some(vm), Status::Running) = (vm, s.status) {
            assert_eq!(vm.status, orca::Status::Running, "{s:?}");
        }
        if let (Some(vm), Status::Stopped) = (vm, s.status) {
            assert_eq!(vm.status, orca::Status::Stopped, "{s:?}");
        }
    }
}
