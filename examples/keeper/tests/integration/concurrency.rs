//! Several `created` and `destroyed` steps at once, through keeper's own drivers (`orca::of_with` on
//! the state file, one provider per step, as separate keepers would): nothing lost, nothing counted
//! twice.

use crate::support;

use std::collections::BTreeSet;

use serde_json::{json, Value};
use support::{hosts, World};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn created_and_destroyed_steps_at_once_lose_and_double_count_nothing() {
    let Some(w) =
        World::orca("created_and_destroyed_steps_at_once_lose_and_double_count_nothing").await
    else {
        return;
    };
    let old = w
        .create(json!({"provider": "lab", "profile": "small", "count": 6, "name": "old"}))
        .await;
    let pair = |i: usize| {
        let h = &hosts(&old)[i..i + 2];
        json!({"provider": "lab",
               "vm_ids": h.iter().map(|h| h["vm_id"].clone()).collect::<Vec<_>>(),
               "sids": h.iter().map(|h| h["sid"].clone()).collect::<Vec<_>>()})
    };
    let mut steps: Vec<(&str, Value)> = Vec::new();
    for _ in 0..5 {
        steps.push((
            "core.cloud.created",
            json!({"provider": "lab", "profile": "small", "count": 3, "name": "conc"}),
        ));
    }
    // Three destroys of the old VMs, and one that repeats the first pair at the same time.
    for i in [0, 2, 4, 0] {
        steps.push(("core.cloud.destroyed", pair(i)));
    }
    let runs = steps.into_iter().map(|(step, params)| {
        let k = w.keeper.clone();
        tokio::spawn(async move { (step, k.run_step(step, &params, "test").await) })
    });
    let results = futures::future::join_all(runs).await;
    let mut created_sids = Vec::new();
    let mut souls_destroyed = 0;
    let mut vms_destroyed = 0;
    for r in results {
        let (step, r) = r.unwrap();
        let out = r.unwrap_or_else(|f| panic!("{step} failed: {} {}", f.error, f.output));
        if step == "core.cloud.created" {
            assert_eq!(out["count"], 3);
            created_sids.extend(
                hosts(&out)
                    .iter()
                    .map(|h| h["sid"].as_str().unwrap().to_string()),
            );
        } else {
            souls_destroyed += out["counters"]["souls_destroyed"].as_i64().unwrap();
            vms_destroyed += out["counters"]["vms_destroyed"].as_i64().unwrap();
        }
    }
    // Fifteen new VMs, indexes 1 to 15, each once.
    let unique: BTreeSet<&String> = created_sids.iter().collect();
    assert_eq!(created_sids.len(), 15);
    assert_eq!(unique.len(), 15);
    let want: BTreeSet<String> = (1..=15)
        .map(|i| format!("conc-{i}.zone-a.fake.internal"))
        .collect();
    assert_eq!(unique.into_iter().cloned().collect::<BTreeSet<_>>(), want);
    // Six old souls destroyed, counted once although a pair was destroyed twice.
    assert_eq!(souls_destroyed, 6);
    assert_eq!(
        vms_destroyed, 6,
        "a VM destroyed by two steps at once is counted once"
    );
    let machines = w.machines();
    assert_eq!(machines.len(), 15, "only the new VMs are at the cloud");
    assert!(machines.iter().all(|m| m.name.starts_with("conc-")));
    assert_eq!(
        w.count("SELECT 1 FROM keeper.souls WHERE status = 'pending'")
            .await,
        15
    );
    assert_eq!(
        w.count("SELECT 1 FROM keeper.souls WHERE status = 'destroyed'")
            .await,
        6
    );
    assert_eq!(
        w.count("SELECT 1 FROM keeper.bootstrap_tokens WHERE status = 'issued'")
            .await,
        15
    );
    assert_eq!(
        w.count("SELECT 1 FROM keeper.bootstrap_tokens WHERE status = 'burned'")
            .await,
        6
    );
    assert_eq!(
        w.count("SELECT 1 FROM keeper.cloud_vms WHERE state = 'recorded'")
            .await,
        15
    );
    assert_eq!(
        w.count("SELECT 1 FROM keeper.cloud_vms WHERE state = 'destroyed'")
            .await,
        6
    );
    // Every VM at the cloud is a recorded soul of the right VM.
    for m in &machines {
        let n = w
            .count(&format!(
                "SELECT 1 FROM keeper.souls WHERE vm_id = '{}' AND sid = '{}' AND status = 'pending'",
                m.id, m.fqdn
            ))
            .await;
        assert_eq!(n, 1, "{}", m.id);
    }
    // One event a step: the first batch, five batches, four destroys.
    let events = w.audit("cloud.provisioned").await;
    assert_eq!(events.len(), 10);
    let audited: i64 = events
        .iter()
        .filter(|e| e["payload"]["action"] == "destroyed")
        .map(|e| {
            e["payload"]["counters"]["souls_destroyed"]
                .as_i64()
                .unwrap()
        })
        .sum();
    assert_eq!(audited, 6);
    let audited_vms: i64 = events
        .iter()
        .filter(|e| e["payload"]["action"] == "destroyed")
        .map(|e| e["payload"]["counters"]["vms_destroyed"].as_i64().unwrap())
        .sum();
    assert_eq!(audited_vms, 6);
    w.finish().await;
}

/// Many `created` steps held in their cloud call at once keep keeper's connections to the server
/// within its pools' bound: a step beyond it waits for a connection instead of opening another, so
/// that keeper never exhausts the server's `max_connections` (which other programs share).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_running_steps_keep_the_connections_within_the_pools_bound() {
    use std::sync::atomic::Ordering;
    use std::time::{Duration, Instant};

    let Some(w) =
        World::new("many_running_steps_keep_the_connections_within_the_pools_bound").await
    else {
        return;
    };
    const STEPS: usize = 40;
    let bound = w.keeper.pool().max_connections();
    assert!(bound < STEPS, "the test needs more steps than connections");
    w.knobs.hold_creates.store(true, Ordering::SeqCst);
    let steps: Vec<_> = (0..STEPS)
        .map(|i| {
            w.keeper.spawn_step(
                "core.cloud.created".into(),
                json!({"provider": "lab", "profile": "small", "count": 1, "name": format!("held{i}")}),
                "test".into(),
            )
        })
        .collect();
    let watch = w.client().await;
    let connections = || async {
        watch
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
                 AND pid <> pg_backend_pid()",
                &[],
            )
            .await
            .unwrap()
            .get::<_, i64>(0) as usize
    };
    // Until the steps stop getting into their create, the most connections seen.
    let mut most = 0;
    let mut entered = 0;
    let mut settled = Instant::now();
    let deadline = Instant::now() + Duration::from_secs(20);
    while settled.elapsed() < Duration::from_secs(2) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        most = most.max(connections().await);
        let now = w.knobs.creates.load(Ordering::SeqCst);
        if now != entered {
            entered = now;
            settled = Instant::now();
        }
    }
    most = most.max(connections().await);
    assert!(entered > 0, "no step got into its create");
    // Let every held create go, and the steps that waited for a connection run after them.
    w.knobs.hold_creates.store(false, Ordering::SeqCst);
    let all = futures::future::join_all(steps);
    tokio::pin!(all);
    let results = loop {
        w.knobs.create_release.notify_waiters();
        tokio::select! {
            r = &mut all => break r,
            _ = tokio::time::sleep(Duration::from_millis(20)) => {}
        }
    };
    assert!(
        most <= bound,
        "{most} connections to the test's database for {entered} running steps; keeper's pools allow {bound}"
    );
    for r in results {
        r.unwrap()
            .unwrap_or_else(|f| panic!("a step failed: {} {}", f.error, f.output));
    }
    assert_eq!(
        w.count("SELECT 1 FROM keeper.cloud_vms WHERE state = 'recorded'")
            .await,
        STEPS as i64
    );
    w.finish().await;
}

/// A step waiting for a VM's lock that is cancelled (a client gone, a keeper shutting down) leaves
/// no PostgreSQL session behind waiting for that lock: cancelled again and again, more times than
/// keeper's pools hold connections, it keeps keeper within its bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_waits_for_a_vm_lock_leave_no_session_waiting_on_the_server() {
    use std::collections::BTreeSet;
    use std::time::{Duration, Instant};

    let Some(w) =
        World::new("cancelled_waits_for_a_vm_lock_leave_no_session_waiting_on_the_server").await
    else {
        return;
    };
    let out = w
        .create(json!({"provider": "lab", "profile": "small", "count": 1, "name": "busy"}))
        .await;
    let vm_id = hosts(&out)[0]["vm_id"].as_str().unwrap().to_string();
    let bound = w.keeper.pool().max_connections();
    // Another session holds the VM's lock, as a step destroying it would.
    let holder = w.client().await;
    let key = format!("keeper.cloud_vm/lab/{vm_id}");
    holder
        .execute("SELECT pg_advisory_lock(hashtextextended($1, 0))", &[&key])
        .await
        .unwrap();
    let watch = w.client().await;
    let ours: Vec<i32> = vec![
        holder
            .query_one("SELECT pg_backend_pid()", &[])
            .await
            .unwrap()
            .get(0),
        watch
            .query_one("SELECT pg_backend_pid()", &[])
            .await
            .unwrap()
            .get(0),
    ];
    // keeper's sessions that have asked for an advisory lock (waiting, or polling for it).
    let askers = || async {
        watch
            .query(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database()
                 AND pid <> ALL($1) AND query LIKE '%advisory_lock(hashtextextended%'",
                &[&ours],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| r.get::<_, i32>(0))
            .collect::<BTreeSet<i32>>()
    };
    let mut seen = BTreeSet::new();
    for i in 0..bound + 2 {
        let step = w.step(
            "core.cloud.destroyed",
            json!({"provider": "lab", "vm_ids": [vm_id]}),
        );
        tokio::pin!(step);
        let deadline = Instant::now() + Duration::from_secs(30);
        // Until a session not seen before asks for the lock: this step's, waiting for it.
        let waiting = async {
            loop {
                let now = askers().await;
                if now.difference(&seen).next().is_some() {
                    return now;
                }
                assert!(
                    Instant::now() < deadline,
                    "step {i} never asked for the lock"
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::select! {
            r = &mut step => panic!("step {i} ended while the lock was held: {r:?}"),
            now = waiting => seen.extend(now),
        }
        // The step is cancelled in its wait.
    }
    let sessions = || async {
        watch
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
                 AND pid <> ALL($1)",
                &[&ours],
            )
            .await
            .unwrap()
            .get::<_, i64>(0) as usize
    };
    let waiters = || async {
        watch
            .query_one(
                "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
                 WHERE l.locktype = 'advisory' AND NOT l.granted AND a.datname = current_database()",
                &[],
            )
            .await
            .unwrap()
            .get::<_, i64>(0)
    };
    // A closed session's backend exits a moment after its client: allow it a few seconds.
    let deadline = Instant::now() + Duration::from_secs(5);
    let (mut left, mut open) = (waiters().await, sessions().await);
    while (left > 0 || open > bound) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        (left, open) = (waiters().await, sessions().await);
    }
    assert_eq!(
        left, 0,
        "{left} sessions still wait on the server for the VM's lock after their steps were cancelled"
    );
    assert!(
        open <= bound,
        "{open} sessions of keeper on the test's database; its pools allow {bound}"
    );
    // Once the lock comes free, the VM is destroyed as ever.
    holder
        .execute(
            "SELECT pg_advisory_unlock(hashtextextended($1, 0))",
            &[&key],
        )
        .await
        .unwrap();
    let done = w
        .step(
            "core.cloud.destroyed",
            json!({"provider": "lab", "vm_ids": [vm_id]}),
        )
        .await
        .unwrap_or_else(|f| panic!("{} {}", f.error, f.output));
    assert_eq!(done["counters"]["vms_destroyed"], 1, "{done}");
    w.finish().await;
}
