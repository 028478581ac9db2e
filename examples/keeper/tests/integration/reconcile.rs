//! The reconciler: the journal rows a `created` step left half-done (a keeper stopped between a VM's
//! create and its record) resolved on PostgreSQL with the in-memory provider, the rows of a running
//! step left alone, and two reconcilers resolving each step once.

use crate::support;

use std::sync::atomic::Ordering;
use std::time::Duration;

use keeper::cloud::{CLOUD_RECONCILED, RECONCILE_GRACE};
use orca::layer::Op;
use orca::{Created, MachineSpec, Provider};
use serde_json::{json, Value};
use support::{hosts, World};

/// Makes VM `name` in keeper's pool, as a create whose answer keeper never journalled did.
async fn make_vm(w: &World, name: &str) -> String {
    let p = w.cloud.provider("keeper").unwrap();
    match p
        .create(&MachineSpec::new(name, "amd64-small", "zone-a", "keeper"))
        .await
        .unwrap()
    {
        Created::Machine(m) => m.id,
        other => panic!("{other:?}"),
    }
}

/// Makes VM `name` in keeper's pool as step `step_id`'s create did (with the step's label), its
/// answer never journalled.
async fn make_asked(w: &World, step_id: &str, name: &str) -> String {
    let p = w.cloud.provider("keeper").unwrap();
    let spec = MachineSpec::new(name, "amd64-small", "zone-a", "keeper")
        .with_labels([(keeper::cloud::STEP_LABEL, step_id)]);
    match p.create(&spec).await.unwrap() {
        Created::Machine(m) => m.id,
        other => panic!("{other:?}"),
    }
}

/// Journals VM `name` of step `step_id` (provider `lab`) as a stopped keeper left it, `age` seconds
/// ago.
async fn journal_row(
    w: &World,
    step_id: &str,
    name: &str,
    state: &str,
    vm_id: Option<&str>,
    age: i64,
) {
    w.client()
        .await
        .execute(
            "INSERT INTO keeper.cloud_vms (step_id, provider, name, state, vm_id, updated_at)
             VALUES ($1, 'lab', $2, $3, $4, now() - make_interval(secs => $5))",
            &[&step_id, &name, &state, &vm_id, &(age as f64)],
        )
        .await
        .unwrap();
}

async fn journal(w: &World) -> Vec<Value> {
    w.rows(
        "SELECT step_id, name, state, vm_id, detail, updated_at FROM keeper.cloud_vms ORDER BY id",
    )
    .await
}

async fn state_of(w: &World, name: &str) -> (String, Option<String>) {
    let row = w
        .rows(&format!(
            "SELECT state, vm_id FROM keeper.cloud_vms WHERE name = '{name}'"
        ))
        .await
        .pop()
        .unwrap();
    (
        row["state"].as_str().unwrap().to_string(),
        row["vm_id"].as_str().map(str::to_string),
    )
}

fn ids(w: &World) -> Vec<String> {
    let mut v: Vec<String> = w.machines().into_iter().map(|m| m.id).collect();
    v.sort();
    v
}

#[tokio::test]
async fn the_reconciler_resolves_every_half_done_row_and_a_second_run_changes_nothing() {
    let Some(w) =
        World::new("the_reconciler_resolves_every_half_done_row_and_a_second_run_changes_nothing")
            .await
    else {
        return;
    };
    // A batch recorded whole: neither its rows nor its VMs are the reconciler's.
    let out = w
        .create(json!({"provider": "lab", "profile": "small", "count": 2, "name": "kept-alive"}))
        .await;
    let alive: Vec<String> = hosts(&out)
        .iter()
        .map(|h| h["vm_id"].as_str().unwrap().to_string())
        .collect();
    let old = RECONCILE_GRACE.as_secs() as i64 + 60;
    // Step one: a VM made but not journalled; a row requested with no VM; one asked for just now.
    let unjournalled = make_asked(&w, "dead-step-1", "web-7").await;
    journal_row(&w, "dead-step-1", "web-7", "requested", None, old).await;
    journal_row(&w, "dead-step-1", "web-8", "requested", None, old).await;
    journal_row(&w, "dead-step-1", "web-11", "requested", None, 0).await;
    // Step two: a row made whose VM is gone, one made whose VM lives, one kept by a roll-back.
    let made = make_vm(&w, "web-9").await;
    let kept = make_vm(&w, "web-10").await;
    journal_row(&w, "dead-step-2", "web-12", "made", Some("m-gone-1"), old).await;
    journal_row(&w, "dead-step-2", "web-9", "made", Some(&made), old).await;
    journal_row(&w, "dead-step-2", "web-10", "kept", Some(&kept), old).await;

    let r = w.keeper.reconcile("test", RECONCILE_GRACE).await.unwrap();
    assert!(r.changed, "{r:?}");
    assert!(!r.needs_attention(), "{r:?}");
    assert!(r.running.is_empty());
    assert_eq!(r.steps.len(), 2, "{r:?}");
    let (one, two) = (&r.steps[0], &r.steps[1]);
    assert_eq!(one.step_id, "dead-step-1");
    assert_eq!(one.destroyed, vec![unjournalled.clone()]);
    assert_eq!(one.never_made, vec!["web-8"]);
    assert_eq!(one.waiting, vec!["web-11"]);
    assert_eq!(two.step_id, "dead-step-2");
    assert_eq!(two.gone, vec!["m-gone-1"]);
    assert_eq!(two.destroyed, vec![made.clone(), kept.clone()]);
    assert!(two.kept.is_empty());

    assert_eq!(
        state_of(&w, "web-7").await,
        ("destroyed".into(), Some(unjournalled))
    );
    assert_eq!(state_of(&w, "web-8").await, ("failed".into(), None));
    assert_eq!(state_of(&w, "web-11").await, ("requested".into(), None));
    assert_eq!(state_of(&w, "web-12").await.0, "destroyed");
    assert_eq!(state_of(&w, "web-9").await.0, "destroyed");
    assert_eq!(state_of(&w, "web-10").await.0, "destroyed");
    assert_eq!(
        w.count("SELECT 1 FROM keeper.cloud_vms WHERE state = 'recorded'")
            .await,
        2
    );
    let mut want = alive.clone();
    want.sort();
    assert_eq!(ids(&w), want, "only the recorded batch's VMs are left");
    let events = w.audit(CLOUD_RECONCILED).await;
    assert_eq!(events.len(), 2, "one event a step");
    assert_eq!(events[0]["actor"], "test");
    assert_eq!(events[0]["outcome"], "succeeded");
    assert_eq!(
        events[0]["payload"]["counters"],
        json!({"destroyed": 1, "gone": 0, "never_made": 1, "kept": 0, "waiting": 1})
    );
    assert_eq!(events[1]["payload"]["counters"]["destroyed"], 2);

    // A second run changes nothing: no row, no VM, no event.
    let before = journal(&w).await;
    let r = w.keeper.reconcile("test", RECONCILE_GRACE).await.unwrap();
    assert!(!r.changed, "{r:?}");
    assert_eq!(r.steps.len(), 1, "only the step still waiting: {r:?}");
    assert_eq!(r.steps[0].waiting, vec!["web-11"]);
    assert_eq!(r.steps[0].moved, 0);
    assert_eq!(journal(&w).await, before);
    assert_eq!(ids(&w), want);
    assert_eq!(w.audit(CLOUD_RECONCILED).await.len(), 2);

    // Once the grace is over, the row asked for just now is closed too.
    let r = w.keeper.reconcile("test", Duration::ZERO).await.unwrap();
    assert_eq!(r.steps[0].never_made, vec!["web-11"]);
    assert_eq!(state_of(&w, "web-11").await.0, "failed");
    w.finish().await;
}

#[tokio::test]
async fn a_row_closed_as_never_made_has_what_its_create_left_removed_by_name() {
    let Some(w) =
        World::new("a_row_closed_as_never_made_has_what_its_create_left_removed_by_name").await
    else {
        return;
    };
    let old = RECONCILE_GRACE.as_secs() as i64 + 60;
    // A create that may have made the pieces before its VM, and no VM: the row stays requested.
    journal_row(&w, "dead-step", "bits-1", "requested", None, old).await;
    journal_row(&w, "dead-step", "bits-2", "requested", None, 0).await;
    w.knobs.fail_delete_named.store(1, Ordering::SeqCst);
    let r = w.keeper.reconcile("test", RECONCILE_GRACE).await.unwrap();
    // The removal failed: the row is not closed, and the run says why; nothing is asked of a row
    // still within its grace.
    assert!(r.needs_attention(), "{r:?}");
    let step = &r.steps[0];
    assert!(step.never_made.is_empty(), "{r:?}");
    assert_eq!(step.waiting, vec!["bits-2"]);
    let error = step.error.as_ref().unwrap().to_string();
    assert!(error.contains("bits-1"), "{error}");
    assert_eq!(state_of(&w, "bits-1").await.0, "requested");
    assert_eq!(
        w.knobs.recorder.subjects(Op::DeleteNamed),
        ["keeper/bits-1"]
    );

    // The next run removes them and closes the row.
    let r = w.keeper.reconcile("test", RECONCILE_GRACE).await.unwrap();
    assert!(!r.needs_attention(), "{r:?}");
    assert_eq!(r.steps[0].never_made, vec!["bits-1"]);
    assert_eq!(state_of(&w, "bits-1").await.0, "failed");
    assert_eq!(
        w.knobs.recorder.subjects(Op::DeleteNamed),
        ["keeper/bits-1", "keeper/bits-1"]
    );
    assert_eq!(w.knobs.recorder.failed(Op::DeleteNamed), 1);
    w.finish().await;
}

#[tokio::test]
async fn rows_the_reconciler_cannot_resolve_stay_and_are_named() {
    let Some(w) = World::new("rows_the_reconciler_cannot_resolve_stay_and_are_named").await else {
        return;
    };
    // A provider no longer registered: its rows stay, and the run says why.
    w.client()
        .await
        .execute(
            "INSERT INTO keeper.cloud_vms (step_id, provider, name, state, vm_id) VALUES ('s-ghost', 'ghost', 'g-1', 'made', 'm-1')",
            &[],
        )
        .await
        .unwrap();
    // Another owner's VM in a row: the cloud refuses to delete it, so it is kept.
    let theirs = match w
        .cloud
        .provider("someone-else")
        .unwrap()
        .create(&MachineSpec::new(
            "web-3",
            "amd64-small",
            "zone-a",
            "keeper",
        ))
        .await
        .unwrap()
    {
        Created::Machine(m) => m.id,
        other => panic!("{other:?}"),
    };
    journal_row(&w, "s-theirs", "web-3", "made", Some(&theirs), 0).await;
    let r = w.keeper.reconcile("test", RECONCILE_GRACE).await.unwrap();
    assert!(r.needs_attention(), "{r:?}");
    let ghost = r.steps.iter().find(|s| s.step_id == "s-ghost").unwrap();
    assert_eq!(ghost.error.as_ref().unwrap()["code"], "provider.not_found");
    assert_eq!(state_of(&w, "g-1").await.0, "made");
    let kept = r.steps.iter().find(|s| s.step_id == "s-theirs").unwrap();
    assert_eq!(kept.kept[0]["vm_id"], theirs.as_str());
    assert_eq!(kept.kept[0]["error"]["code"], "cloud.not_owned");
    assert_eq!(state_of(&w, "web-3").await.0, "kept");
    assert_eq!(w.machines().len(), 1, "not this owner's: never deleted");
    let events = w.audit(CLOUD_RECONCILED).await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["outcome"], "failed");
    // Again: the kept row stays kept, and nothing is written.
    let r = w.keeper.reconcile("test", RECONCILE_GRACE).await.unwrap();
    assert!(!r.changed);
    assert_eq!(w.audit(CLOUD_RECONCILED).await.len(), 1);
    w.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_step_is_left_alone_and_two_reconcilers_resolve_each_step_once() {
    let Some(w) =
        World::new("a_running_step_is_left_alone_and_two_reconcilers_resolve_each_step_once").await
    else {
        return;
    };
    // A step held in the middle of its first create: its rows are `requested`, its lock held.
    w.knobs.hold_creates.store(true, Ordering::SeqCst);
    let step = w.keeper.spawn_step(
        "core.cloud.created".into(),
        json!({"provider": "lab", "profile": "small", "count": 2, "name": "live"}),
        "test".into(),
    );
    tokio::time::timeout(Duration::from_secs(60), w.knobs.create_entered.notified())
        .await
        .expect("the create starts");
    let r = w.keeper.reconcile("test", Duration::ZERO).await.unwrap();
    assert_eq!(r.running.len(), 1, "{r:?}");
    assert!(!r.changed);
    assert_eq!(
        w.count("SELECT 1 FROM keeper.cloud_vms WHERE name LIKE 'live-%' AND state = 'requested'")
            .await,
        2,
        "the running step's rows are untouched"
    );
    w.knobs.hold_creates.store(false, Ordering::SeqCst);
    w.knobs.create_release.notify_one();
    let out = step.await.unwrap().expect("the step ends as it would have");
    assert_eq!(hosts(&out).len(), 2);

    // Three stopped steps, and two reconcilers at once (two keepers starting together).
    let mut vms = Vec::new();
    for i in 1..=3 {
        let name = format!("dead-{i}");
        let step_id = format!("stopped-{i}");
        vms.push(make_asked(&w, &step_id, &name).await);
        journal_row(&w, &step_id, &name, "requested", None, 0).await;
    }
    let (a, b) = tokio::join!(
        w.keeper.reconcile("a", Duration::ZERO),
        w.keeper.reconcile("b", Duration::ZERO)
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    let mut destroyed: Vec<String> = a
        .steps
        .iter()
        .chain(&b.steps)
        .flat_map(|s| s.destroyed.clone())
        .collect();
    destroyed.sort();
    vms.sort();
    assert_eq!(destroyed, vms, "each VM destroyed once: {a:?} {b:?}");
    assert_eq!(w.audit(CLOUD_RECONCILED).await.len(), 3, "one event a step");
    assert_eq!(
        w.count("SELECT 1 FROM keeper.cloud_vms WHERE name LIKE 'dead-%' AND state = 'destroyed'")
            .await,
        3
    );
    assert_eq!(w.machines().len(), 2, "the live step's VMs");
    w.finish().await;
}

/// Waits until no session of the test's database holds an advisory lock (a session ended by
/// `pg_terminate_backend` lets its locks go once its backend has exited).
async fn until_no_lock_is_held(w: &World) {
    for _ in 0..3000 {
        let held = w
            .count(
                "SELECT 1 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
                 WHERE l.locktype = 'advisory' AND l.granted AND a.datname = current_database()",
            )
            .await;
        if held == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("an advisory lock is still held");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_whose_lock_is_lost_records_no_vm_the_reconciler_destroyed() {
    let Some(w) =
        World::new("a_step_whose_lock_is_lost_records_no_vm_the_reconciler_destroyed").await
    else {
        return;
    };
    // The first create goes through, the second is held: lost-1 is `made`, lost-2 `requested`.
    w.knobs.hold_creates.store(true, Ordering::SeqCst);
    let step = w.keeper.spawn_step(
        "core.cloud.created".into(),
        json!({"provider": "lab", "profile": "small", "count": 2, "name": "lost"}),
        "test".into(),
    );
    let entered =
        || tokio::time::timeout(Duration::from_secs(60), w.knobs.create_entered.notified());
    entered().await.expect("the first create starts");
    w.knobs.create_release.notify_one();
    entered().await.expect("the second create starts");
    let first = state_of(&w, "lost-1").await;
    assert_eq!(first.0, "made", "{first:?}");
    let first_vm = first.1.unwrap();
    // The step's lock session ends (a server restart, a timeout, an operator): another keeper's
    // reconciler now takes the step for a stopped one, and destroys what it made.
    assert_eq!(crate::destroyed::end_the_lock_holders(&w).await, 1);
    until_no_lock_is_held(&w).await;
    let r = w.keeper.reconcile("test", Duration::ZERO).await.unwrap();
    assert!(r.running.is_empty(), "{r:?}");
    assert_eq!(r.steps.len(), 1, "{r:?}");
    assert_eq!(
        r.steps[0].destroyed,
        std::slice::from_ref(&first_vm),
        "{r:?}"
    );
    assert!(!ids(&w).contains(&first_vm));
    // The held create ends: the step must not record the VM the reconciler destroyed.
    w.knobs.hold_creates.store(false, Ordering::SeqCst);
    w.knobs.create_release.notify_one();
    let f = match step.await.unwrap() {
        Ok(out) => panic!(
            "the step recorded a batch whose VM {first_vm} is gone: {out} (pending souls: {:?}, machines: {:?})",
            w.rows("SELECT sid, vm_id FROM keeper.souls").await,
            ids(&w)
        ),
        Err(f) => f,
    };
    assert_eq!(f.error.code, "registry.lock_lost", "{}", f.error);
    assert!(f.error.message.contains("lock"), "{}", f.error);
    assert_eq!(w.count("SELECT 1 FROM keeper.souls").await, 0);
    assert_eq!(w.count("SELECT 1 FROM keeper.bootstrap_tokens").await, 0);
    assert_eq!(
        w.count("SELECT 1 FROM keeper.cloud_vms WHERE state = 'recorded'")
            .await,
        0
    );
    assert!(
        ids(&w).is_empty(),
        "the step destroyed what it made: {:?}",
        ids(&w)
    );
    assert_eq!(f.output["changed"], true, "{}", f.output);
    w.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grace_of_a_vm_runs_from_when_it_was_asked_for_not_from_the_plan() {
    let Some(w) =
        World::new("the_grace_of_a_vm_runs_from_when_it_was_asked_for_not_from_the_plan").await
    else {
        return;
    };
    w.knobs.hold_creates.store(true, Ordering::SeqCst);
    let step = w.keeper.spawn_step(
        "core.cloud.created".into(),
        json!({"provider": "lab", "profile": "small", "count": 2, "name": "slow"}),
        "test".into(),
    );
    let entered =
        || tokio::time::timeout(Duration::from_secs(60), w.knobs.create_entered.notified());
    entered().await.expect("the first create starts");
    // A long batch: it was planned an hour ago, and its first create has taken until now.
    w.client()
        .await
        .execute(
            "UPDATE keeper.cloud_vms SET updated_at = now() - interval '1 hour' WHERE name LIKE 'slow-%'",
            &[],
        )
        .await
        .unwrap();
    w.knobs.create_release.notify_one();
    entered().await.expect("the second create is sent");
    // keeper stops while the cloud is making slow-2.
    step.abort();
    assert!(step.await.unwrap_err().is_cancelled());
    until_no_lock_is_held(&w).await;
    let r = w.keeper.reconcile("test", RECONCILE_GRACE).await.unwrap();
    assert_eq!(r.steps.len(), 1, "{r:?}");
    let s = &r.steps[0];
    assert!(
        s.never_made.is_empty(),
        "slow-2 was asked for a moment ago, not an hour ago: {r:?}"
    );
    assert_eq!(s.waiting, ["slow-2"], "{r:?}");
    assert_eq!(state_of(&w, "slow-2").await.0, "requested");
    // The cloud shows slow-2 late: the next run finds it and destroys it.
    let slow_step = journal(&w).await[1]["step_id"]
        .as_str()
        .unwrap()
        .to_string();
    let late = make_asked(&w, &slow_step, "slow-2").await;
    let r = w.keeper.reconcile("test", RECONCILE_GRACE).await.unwrap();
    assert_eq!(r.steps.len(), 1, "{r:?}");
    assert_eq!(r.steps[0].destroyed, std::slice::from_ref(&late), "{r:?}");
    assert_eq!(
        state_of(&w, "slow-2").await,
        ("destroyed".into(), Some(late))
    );
    assert!(ids(&w).is_empty(), "{:?}", ids(&w));
    w.finish().await;
}

#[tokio::test]
async fn a_made_row_whose_vm_is_gone_has_what_its_delete_left_removed_by_name() {
    let Some(w) =
        World::new("a_made_row_whose_vm_is_gone_has_what_its_delete_left_removed_by_name").await
    else {
        return;
    };
    let old = RECONCILE_GRACE.as_secs() as i64 + 60;
    journal_row(&w, "dead-step", "web-3", "made", Some("m-gone-3"), old).await;
    w.knobs.fail_delete_named.store(1, Ordering::SeqCst);
    let r = w.keeper.reconcile("test", RECONCILE_GRACE).await.unwrap();
    // The removal by name failed: the row is kept, with the error, for the next run.
    assert!(r.needs_attention(), "{r:?}");
    assert!(r.steps[0].gone.is_empty(), "{r:?}");
    assert_eq!(r.steps[0].kept.len(), 1, "{r:?}");
    assert_eq!(state_of(&w, "web-3").await.0, "kept");
    assert_eq!(w.knobs.recorder.subjects(Op::DeleteNamed), ["keeper/web-3"]);

    let r = w.keeper.reconcile("test", RECONCILE_GRACE).await.unwrap();
    assert!(!r.needs_attention(), "{r:?}");
    assert_eq!(r.steps[0].gone, vec!["m-gone-3"]);
    assert_eq!(state_of(&w, "web-3").await.0, "destroyed");
    assert_eq!(
        w.knobs.recorder.subjects(Op::DeleteNamed),
        ["keeper/web-3", "keeper/web-3"]
    );
    w.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vm_whose_row_a_reconciler_closed_is_not_asked_for() {
    let Some(w) = World::new("a_vm_whose_row_a_reconciler_closed_is_not_asked_for").await else {
        return;
    };
    w.knobs.hold_creates.store(true, Ordering::SeqCst);
    let step = w.keeper.spawn_step(
        "core.cloud.created".into(),
        json!({"provider": "lab", "profile": "small", "count": 2, "name": "late"}),
        "test".into(),
    );
    tokio::time::timeout(Duration::from_secs(60), w.knobs.create_entered.notified())
        .await
        .expect("the first create starts");
    // Meanwhile a reconciler (whose lock this step lost) judged late-2 never made and closed its row.
    w.client()
        .await
        .execute(
            "UPDATE keeper.cloud_vms SET state = 'failed', detail = 'never made' WHERE name = 'late-2'",
            &[],
        )
        .await
        .unwrap();
    w.knobs.hold_creates.store(false, Ordering::SeqCst);
    w.knobs.create_release.notify_one();
    let f = match step.await.unwrap() {
        Ok(out) => panic!("the step asked for a VM whose row was closed: {out}"),
        Err(f) => f,
    };
    assert_eq!(
        w.knobs.creates.load(Ordering::SeqCst),
        1,
        "late-2 is not asked for: {}",
        f.error
    );
    assert_eq!(f.error.code, "registry.lock_lost", "{}", f.error);
    assert!(f.error.message.contains("late-2"), "{}", f.error);
    assert_eq!(state_of(&w, "late-2").await.0, "failed");
    assert!(
        ids(&w).is_empty(),
        "the step destroyed what it made: {:?}",
        ids(&w)
    );
    w.finish().await;
}

/// Whether a session of the test's database holds VM `vm_id`'s lock (provider `lab`).
async fn vm_lock_held(w: &World, vm_id: &str) -> bool {
    let key = format!("keeper.cloud_vm/lab/{vm_id}");
    w.client()
        .await
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
             WHERE l.locktype = 'advisory' AND l.granted AND a.datname = current_database()
               AND l.objsubid = 1
               AND ((l.classid::bigint << 32) | l.objid::bigint) = hashtextextended($1, 0))",
            &[&key],
        )
        .await
        .unwrap()
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vm_the_reconciler_could_not_destroy_is_not_kept_locked_for_the_rest_of_its_run() {
    let Some(w) = World::new(
        "a_vm_the_reconciler_could_not_destroy_is_not_kept_locked_for_the_rest_of_its_run",
    )
    .await
    else {
        return;
    };
    // First another owner's VM, whose look-up the cloud refuses; then one of keeper's own, whose
    // delete is held, so that the run is still going when the first VM has failed.
    let theirs = w
        .cloud
        .provider("someone-else")
        .unwrap()
        .create(&MachineSpec::new(
            "web-3",
            "amd64-small",
            "zone-a",
            "keeper",
        ))
        .await
        .unwrap()
        .machine()
        .unwrap()
        .id;
    journal_row(&w, "s-theirs", "web-3", "made", Some(&theirs), 0).await;
    let mine = make_vm(&w, "web-4").await;
    journal_row(&w, "s-mine", "web-4", "made", Some(&mine), 0).await;
    w.knobs.hold_deletes.store(true, Ordering::SeqCst);
    let k = w.keeper.clone();
    let run = tokio::spawn(async move { k.reconcile("test", RECONCILE_GRACE).await });
    tokio::time::timeout(Duration::from_secs(60), w.knobs.delete_entered.notified())
        .await
        .expect("the delete of keeper's own VM starts");
    // Meanwhile an operator's core.cloud.destroyed of the VM that failed would wait for its lock.
    let held_meanwhile = vm_lock_held(&w, &theirs).await;
    assert!(
        vm_lock_held(&w, &mine).await,
        "the VM being destroyed is locked"
    );
    w.knobs.hold_deletes.store(false, Ordering::SeqCst);
    w.knobs.delete_release.notify_one();
    let r = run.await.unwrap().unwrap();
    assert!(
        !held_meanwhile,
        "the lock of VM {theirs}, which the reconciler could not destroy, was still held while it destroyed another"
    );
    let failed = r.steps.iter().find(|s| s.step_id == "s-theirs").unwrap();
    assert_eq!(failed.kept[0]["error"]["code"], "cloud.not_owned", "{r:?}");
    let done = r.steps.iter().find(|s| s.step_id == "s-mine").unwrap();
    assert_eq!(done.destroyed, vec![mine], "{r:?}");
    w.finish().await;
}

#[tokio::test]
async fn a_requested_row_never_claims_a_vm_of_its_name_that_another_step_made() {
    let Some(w) =
        World::new("a_requested_row_never_claims_a_vm_of_its_name_that_another_step_made").await
    else {
        return;
    };
    let out = w
        .create(json!({"provider": "lab", "profile": "small", "count": 1, "name": "web"}))
        .await;
    let theirs = hosts(&out)[0]["vm_id"].as_str().unwrap().to_string();
    // A row of another step for the same name (a restored database handed web-1 out again, and
    // that step stopped before the cloud answered), asked for long ago.
    let old = RECONCILE_GRACE.as_secs() as i64 + 60;
    journal_row(&w, "dead-step", "web-1", "requested", None, old).await;
    let r = w.keeper.reconcile("test", RECONCILE_GRACE).await.unwrap();
    assert_eq!(ids(&w), vec![theirs.clone()], "{r:?}");
    let step = r.steps.iter().find(|s| s.step_id == "dead-step").unwrap();
    assert!(step.destroyed.is_empty(), "{r:?}");
    assert!(step.never_made.is_empty(), "{r:?}");
    assert!(r.needs_attention(), "the operator is told: {r:?}");
    let error = step.error.as_ref().unwrap().to_string();
    assert!(error.contains(&theirs), "{error}");
    assert!(
        w.knobs.recorder.subjects(Op::DeleteNamed).is_empty(),
        "removing web-1 by name would remove that VM"
    );
    let rows = w
        .rows("SELECT state FROM keeper.cloud_vms WHERE step_id = 'dead-step'")
        .await;
    assert_eq!(rows[0]["state"], "requested");
    w.finish().await;
}
