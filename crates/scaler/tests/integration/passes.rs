//! The autoscaler's everyday passes on the in-memory provider: scaling up and down, falling back on
//! no stock, replacing machines that will not serve, bounded parallel calls.

use crate::support;

use std::sync::atomic::Ordering;
use std::time::Duration;

use orca::memory::{FaultKind, MemoryCloud, Operation};
use orca::{ErrorKind, MachineSpec, Provider};
use orca_scaler::{Action, FileStore, Offering, Scaler, Unknown};
use support::{cloud, ids, scaler, FailingStore, Wrap};

const A: &str = "amd64-small@zone-a";

fn created(actions: &[Action]) -> Vec<String> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Created { offering, .. } => Some(offering.clone()),
            _ => None,
        })
        .collect()
}

fn deleted(actions: &[Action]) -> Vec<String> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Deleted { name, .. } => Some(name.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn scales_up_then_holds() {
    let dir = tempfile::tempdir().unwrap();
    let cloud = MemoryCloud::new();
    let p = cloud.provider("s1").unwrap();
    let mut s = scaler(dir.path(), 3, &["amd64-small@zone-a"]);
    let r = s.pass(&p, cloud.now()).await;
    assert_eq!(created(&r.actions).len(), 3);
    assert_eq!(r.serving, 3);
    assert_eq!(p.machines("lab").await.unwrap().len(), 3);
    let r = s.pass(&p, cloud.now()).await;
    assert!(r.actions.is_empty(), "{:?}", r.actions);
    assert_eq!(r.listed, 3);
}

#[tokio::test]
async fn falls_back_on_no_stock_and_rests_the_offering() {
    let dir = tempfile::tempdir().unwrap();
    let cloud = MemoryCloud::new();
    let p = cloud.provider("s1").unwrap();
    cloud.set_stock("amd64-small", "zone-a", 1);
    let mut s = scaler(dir.path(), 3, &["amd64-small@zone-a", "amd64-small@zone-b"]);
    s.settings.parallel = 1;
    let t0 = cloud.now();
    let r = s.pass(&p, t0).await;
    assert_eq!(
        created(&r.actions),
        [
            "amd64-small@zone-a",
            "amd64-small@zone-b",
            "amd64-small@zone-b"
        ]
    );
    assert!(r.actions.iter().any(
        |a| matches!(a, Action::NoStock { offering, .. } if offering == "amd64-small@zone-a")
    ));

    // Stock comes back, a machine goes away: within the cool-down zone-a is not tried.
    cloud.unlimited_stock("amd64-small", "zone-a");
    let victim = p.machines("lab").await.unwrap()[0].id.clone();
    p.delete(&victim).await.unwrap();
    let r = s.pass(&p, t0 + chrono::Duration::seconds(60)).await;
    assert_eq!(created(&r.actions), ["amd64-small@zone-b"]);
    assert!(r.actions.iter().any(
        |a| matches!(a, Action::Skipped { offering, .. } if offering == "amd64-small@zone-a")
    ));

    // After the cool-down it is first choice again.
    let victim = p.machines("lab").await.unwrap()[0].id.clone();
    p.delete(&victim).await.unwrap();
    let r = s.pass(&p, t0 + chrono::Duration::seconds(301)).await;
    assert_eq!(created(&r.actions), ["amd64-small@zone-a"]);
}

#[tokio::test]
async fn scales_down_and_forgets_the_gone() {
    let dir = tempfile::tempdir().unwrap();
    let cloud = MemoryCloud::new();
    let p = cloud.provider("").unwrap();
    let mut s = scaler(dir.path(), 3, &["arm64-small@zone-c"]);
    s.settings.parallel = 1;
    s.pass(&p, cloud.now()).await;
    s.settings.size = 1;
    cloud.advance_clock(Duration::from_secs(1));
    let r = s.pass(&p, cloud.now()).await;
    let surplus = r
        .actions
        .iter()
        .filter(|a| matches!(a, Action::Deleted { cause, .. } if cause == "surplus"))
        .count();
    assert_eq!(surplus, 2);
    let left = p.machines("lab").await.unwrap();
    assert_eq!(left.len(), 1);
    p.delete(&left[0].id).await.unwrap();
    let r = s.pass(&p, cloud.now()).await;
    assert!(r.actions.contains(&Action::Gone {
        name: left[0].name.clone(),
        id: left[0].id.clone(),
        why: "no longer in the cloud (deleted outside orca-pool, or by the cloud); replaced".into()
    }));
    assert_eq!(created(&r.actions).len(), 1);
}

#[tokio::test]
async fn record_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let cloud = MemoryCloud::new();
    let p = cloud.provider("s1").unwrap();
    let mut s = scaler(dir.path(), 2, &["amd64-small@zone-a"]);
    s.pass(&p, cloud.now()).await;
    drop(s);
    let mut again = scaler(dir.path(), 2, &["amd64-small@zone-a"]);
    let r = again.pass(&p, cloud.now()).await;
    assert!(
        r.actions.is_empty(),
        "a restarted scaler keeps its machines: {:?}",
        r.actions
    );
    let bad: Result<Offering, _> = "no-at-sign".parse();
    assert!(bad.unwrap_err().contains("TYPE@LOCATION"));
}

/// A machine stopped for longer than the grace (by the cloud's stop time) is deleted and
/// replaced; within the grace it is counted.
#[tokio::test]
async fn a_stopped_machine_is_replaced_after_the_grace() {
    let dir = tempfile::tempdir().unwrap();
    let (cloud, p) = cloud();
    let mut s = scaler(dir.path(), 2, &[A]);
    s.pass(&p, cloud.now()).await;
    let victim = ids(&cloud)[0].clone();
    cloud.operator_stop(&victim);
    cloud.advance_clock(Duration::from_secs(300));
    let r = s.pass(&p, cloud.now()).await;
    assert!(r.actions.is_empty(), "within the grace: {:?}", r.actions);
    assert_eq!(r.serving, 2);
    cloud.advance_clock(Duration::from_secs(301));
    let r = s.pass(&p, cloud.now()).await;
    assert!(!ids(&cloud).contains(&victim), "{:?}", r.actions);
    assert_eq!(ids(&cloud).len(), 2, "and replaced");
    assert!(
        r.actions.iter().any(|a| matches!(a, Action::Deleted { cause, why, .. } if cause == "unhealthy" && why.contains("stopped"))),
        "{:?}",
        r.actions
    );
}

/// A machine in an unknown state is replaced once it has been seen so for the grace (first
/// seen, as recorded); a machine still starting is counted.
#[tokio::test]
async fn an_unknown_machine_is_replaced_after_the_grace_and_starting_counts() {
    let dir = tempfile::tempdir().unwrap();
    let (cloud, p) = cloud();
    let w = Wrap::new(p);
    let mut s = scaler(dir.path(), 2, &[A]);
    s.pass(&w.layered(), cloud.now()).await;
    let all = ids(&cloud);
    let (victim, booting) = (all[0].clone(), all[1].clone());
    w.unknown.lock().unwrap().push(victim.clone());
    w.starting.lock().unwrap().push(booting.clone());
    let t0 = cloud.now();
    let r = s.pass(&w.layered(), t0).await;
    assert!(r.actions.is_empty(), "{:?}", r.actions);
    assert_eq!(
        r.serving, 2,
        "unknown within the grace and starting both count"
    );
    let r = s
        .pass(&w.layered(), t0 + chrono::Duration::seconds(601))
        .await;
    assert!(!ids(&cloud).contains(&victim), "{:?}", r.actions);
    assert!(ids(&cloud).contains(&booting));
    assert_eq!(ids(&cloud).len(), 2);
}

/// A machine that stays starting (a VM the cloud never finishes provisioning) serves for the boot
/// grace from its creation; starting after it, it has the grace, as a stopped one has, and is then
/// replaced. A machine started again long after it was made (a restart) has that grace too: it is
/// not replaced on sight.
#[tokio::test]
async fn a_machine_stuck_starting_is_replaced_after_the_boot_grace() {
    let dir = tempfile::tempdir().unwrap();
    let (cloud, p) = cloud();
    let w = Wrap::new(p);
    let mut s = scaler(dir.path(), 1, &[A]);
    assert_eq!(s.settings.boot_grace, Duration::from_secs(1800));
    let t0 = cloud.now();
    s.pass(&w.layered(), t0).await;
    let stuck = ids(&cloud)[0].clone();
    w.starting.lock().unwrap().push(stuck.clone());
    let at = |secs| t0 + chrono::Duration::seconds(secs);
    for secs in [1799, 1801, 1801 + 599] {
        let r = s.pass(&w.layered(), at(secs)).await;
        assert!(ids(&cloud).contains(&stuck), "at {secs} s: {:?}", r.actions);
        assert_eq!(r.serving, 1, "at {secs} s");
    }
    let r = s.pass(&w.layered(), at(1801 + 601)).await;
    assert!(!ids(&cloud).contains(&stuck), "{:?}", r.actions);
    assert_eq!(ids(&cloud).len(), 1, "and replaced");
    assert!(
        r.actions.iter().any(|a| matches!(a, Action::Deleted { cause, why, .. } if cause == "unhealthy" && why.contains("starting"))),
        "{:?}",
        r.actions
    );
    // A machine made long ago and starting again now: the grace, not a delete on sight.
    let old = ids(&cloud)[0].clone();
    w.starting.lock().unwrap().push(old.clone());
    let later = at(1801 + 601 + 7200);
    let r = s.pass(&w.layered(), later).await;
    assert!(ids(&cloud).contains(&old), "{:?}", r.actions);
    assert_eq!(r.serving, 1);
}

/// A refusal for the account (over quota, no permission) stands for every create of the offering:
/// the offering rests for the cool-down, as after no stock, so that passes do not spend a new name
/// and a create on it for every missing machine, pass after pass.
#[tokio::test]
async fn an_offering_refused_for_quota_rests_instead_of_spending_names() {
    let dir = tempfile::tempdir().unwrap();
    let (cloud, p) = cloud();
    cloud.inject(Operation::Create, FaultKind::Error(ErrorKind::Quota), 1000);
    let mut s = scaler(dir.path(), 3, &[A]);
    let mut failed = 0;
    for _ in 0..10 {
        let r = s.pass(&p, cloud.now()).await;
        failed += r
            .actions
            .iter()
            .filter(|a| matches!(a, Action::Failed { .. }))
            .count();
    }
    assert_eq!(failed, 1, "one create refused, then the offering rests");
    assert!(ids(&cloud).is_empty());
    // Past the cool-down it is asked again.
    cloud.clear_faults();
    let later = cloud.now() + chrono::Duration::seconds(301);
    let r = s.pass(&p, later).await;
    assert_eq!(ids(&cloud).len(), 3, "{:?}", r.actions);
}

/// A quota refusal that may have acted keeps its name for a retry (a lost launch may show up), and
/// the offering rests all the same: the kept name waits for the rest to end rather than being
/// created again every pass.
#[tokio::test]
async fn a_kept_name_waits_while_its_offering_rests() {
    let dir = tempfile::tempdir().unwrap();
    let (cloud, p) = cloud();
    let w = Wrap::new(p);
    w.quota_acted.store(1000, Ordering::SeqCst);
    let mut s = scaler(dir.path(), 1, &[A]);
    for _ in 0..10 {
        s.pass(&w.layered(), cloud.now()).await;
    }
    assert_eq!(
        w.creates.load(Ordering::SeqCst),
        1,
        "one create, then the rest"
    );
    w.quota_acted.store(0, Ordering::SeqCst);
    let later = cloud.now() + chrono::Duration::seconds(301);
    let r = s.pass(&w.layered(), later).await;
    assert_eq!(ids(&cloud).len(), 1, "{:?}", r.actions);
}

/// A failed create counts as a failure of the pass, no stock does not (the CLI's exit status follows:
/// `once_exits_non_zero_when_an_action_failed` in examples/pool/tests/cli.rs).
#[tokio::test]
async fn a_failed_create_is_a_failure_and_no_stock_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let (cloud, p) = cloud();
    cloud.set_stock("amd64-small", "zone-a", 0);
    let mut s = scaler(dir.path(), 1, &[A]);
    let r = s.pass(&p, cloud.now()).await;
    assert_eq!(r.failures(), 0, "{:?}", r.actions);
    assert!(
        matches!(
            r.actions[..],
            [Action::NoStock { .. }, Action::Short { .. }]
        ),
        "{:?}",
        r.actions
    );
    cloud.unlimited_stock("amd64-small", "zone-a");
    cloud.inject(
        Operation::Create,
        FaultKind::Error(ErrorKind::PermissionDenied),
        1,
    );
    let mut s = scaler(
        tempfile::tempdir().unwrap().path(),
        1,
        &["amd64-small@zone-b"],
    );
    let r = s.pass(&p, cloud.now()).await;
    assert_eq!(r.failures(), 1, "{:?}", r.actions);
}

/// Creates run in parallel, at most `parallel` at once.
#[tokio::test]
async fn creates_run_in_parallel_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let (cloud, p) = cloud();
    let mut w = Wrap::new(p);
    w.create_delay = Duration::from_millis(30);
    let mut s = scaler(dir.path(), 6, &[A]);
    s.settings.parallel = 4;
    let r = s.pass(&w.layered(), cloud.now()).await;
    assert_eq!(r.serving, 6, "{:?}", r.actions);
    assert_eq!(
        w.max_in_flight.load(Ordering::SeqCst),
        4,
        "four creates at once, never more"
    );
}

/// Surplus machines go newest first by the cloud's creation time, never by their names.
#[tokio::test]
async fn surplus_goes_newest_first_by_creation_time() {
    let dir = tempfile::tempdir().unwrap();
    let (cloud, p) = cloud();
    let mut s = scaler(dir.path(), 1, &[A]);
    s.settings.unknown = Unknown::Adopt;
    // Names whose order says the opposite of their age.
    for (name, after) in [("lab-z-old", 0u64), ("lab-m-mid", 60), ("lab-a-new", 60)] {
        cloud.advance_clock(Duration::from_secs(after));
        p.create(&MachineSpec::new(name, "amd64-small", "zone-a", "lab"))
            .await
            .unwrap();
    }
    let r = s.pass(&p, cloud.now()).await;
    assert_eq!(deleted(&r.actions), ["lab-a-new", "lab-m-mid"]);
    let left = p.machines("lab").await.unwrap();
    assert_eq!(left[0].name, "lab-z-old");
}

/// A machine deleted outside orca-pool is noticed and replaced.
#[tokio::test]
async fn a_machine_deleted_outside_is_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let (cloud, p) = cloud();
    let mut s = scaler(dir.path(), 2, &[A]);
    s.pass(&p, cloud.now()).await;
    let victim = ids(&cloud)[0].clone();
    cloud.operator_delete(&victim);
    let r = s.pass(&p, cloud.now()).await;
    assert!(
        r.actions
            .iter()
            .any(|a| matches!(a, Action::Gone { id, .. } if *id == victim)),
        "{:?}",
        r.actions
    );
    assert_eq!(ids(&cloud).len(), 2);
}

/// A create refused for its offering (a location the cloud does not know) falls back to the next
/// offering in the same pass, and the refused one rests, as after no stock.
#[tokio::test]
async fn a_create_refused_for_its_offering_falls_back_to_the_next() {
    let dir = tempfile::tempdir().unwrap();
    let (cloud, p) = cloud();
    let mut s = scaler(dir.path(), 2, &["amd64-small@nowhere", A]);
    s.settings.parallel = 1;
    let r = s.pass(&p, cloud.now()).await;
    assert_eq!(created(&r.actions), [A, A], "{:?}", r.actions);
    assert_eq!(r.serving, 2, "{:?}", r.actions);
    assert_eq!(r.failures(), 1, "the refusal is said: {:?}", r.actions);
    assert!(
        s.record()
            .unwrap()
            .cooling
            .contains_key("amd64-small@nowhere"),
        "{:?}",
        s.record()
    );
    assert_eq!(ids(&cloud).len(), 2);
}

/// A pass stopped by a record-store error reports the machines it listed and counted, not 0.
#[tokio::test]
async fn a_pass_stopped_by_the_record_store_reports_what_it_listed() {
    let dir = tempfile::tempdir().unwrap();
    let (cloud, p) = cloud();
    let mut s = scaler(dir.path(), 2, &[A]);
    assert_eq!(s.pass(&p, cloud.now()).await.serving, 2);
    drop(s);
    let mut s = Scaler::new(
        support::settings(3, &[A]),
        Box::new(FailingStore {
            inner: FileStore::open(dir.path().join("rec.json")).unwrap(),
            kind: "intend_create",
            fail: 1,
        }),
    );
    let r = s.pass(&p, cloud.now()).await;
    assert!(
        r.stopped.as_deref().is_some_and(|m| m.contains("injected")),
        "{r:?}"
    );
    assert_eq!((r.listed, r.serving), (2, 2), "{r:?}");
    assert!(r.lines()[0].contains("2 of 3 serving"), "{:?}", r.lines());
}

/// With no cool-down (`--cooldown 0`) an offering without stock is usable again at once: a pass
/// still tries it once, not again and again under new names.
#[tokio::test]
async fn no_stock_with_a_zero_cooldown_tries_each_offering_once_a_pass() {
    let dir = tempfile::tempdir().unwrap();
    let (cloud, p) = cloud();
    cloud.set_stock("amd64-small", "zone-a", 0);
    let mut w = Wrap::new(p);
    // Guards only, that fail the test rather than let it spin: the pass used to create for ever
    // (the 50th create never answers, and the timeout then ends the test).
    w.hang_at = 50;
    let mut s = scaler(dir.path(), 1, &[A]);
    s.settings.cooldown = Duration::ZERO;
    let r = tokio::time::timeout(Duration::from_secs(60), s.pass(&w.layered(), cloud.now()))
        .await
        .expect("the pass ends");
    assert_eq!(w.creates.load(Ordering::SeqCst), 1, "{:?}", r.actions);
    assert_eq!((r.serving, r.failures()), (0, 0), "{:?}", r.actions);
    assert!(
        r.actions.iter().any(|a| matches!(a, Action::Short { .. })),
        "{:?}",
        r.actions
    );
    // Each pass tries it again, once.
    let r = tokio::time::timeout(Duration::from_secs(60), s.pass(&w.layered(), cloud.now()))
        .await
        .expect("the pass ends");
    assert_eq!(w.creates.load(Ordering::SeqCst), 2, "{:?}", r.actions);

    // Several machines missing, two offerings without stock: one create of each in the pass.
    let dir = tempfile::tempdir().unwrap();
    let (cloud, p) = support::cloud();
    cloud.set_stock("amd64-small", "zone-a", 0);
    cloud.set_stock("amd64-small", "zone-b", 0);
    let mut w = Wrap::new(p);
    w.hang_at = 50;
    let mut s = scaler(dir.path(), 3, &[A, "amd64-small@zone-b"]);
    s.settings.cooldown = Duration::ZERO;
    s.settings.parallel = 1;
    let r = tokio::time::timeout(Duration::from_secs(60), s.pass(&w.layered(), cloud.now()))
        .await
        .expect("the pass ends");
    assert_eq!(w.creates.load(Ordering::SeqCst), 2, "{:?}", r.actions);
    assert_eq!(r.serving, 0, "{:?}", r.actions);
}

/// A cool-down too long for the clock rests the offering (as long as the clock can tell), rather
/// than not at all.
#[tokio::test]
async fn no_stock_with_a_cooldown_past_the_clock_rests_the_offering() {
    let dir = tempfile::tempdir().unwrap();
    let (cloud, p) = cloud();
    cloud.set_stock("amd64-small", "zone-a", 0);
    let mut w = Wrap::new(p);
    w.hang_at = 50;
    let mut s = scaler(dir.path(), 1, &[A]);
    s.settings.cooldown = Duration::from_secs(u64::MAX);
    let r = tokio::time::timeout(Duration::from_secs(60), s.pass(&w.layered(), cloud.now()))
        .await
        .expect("the pass ends");
    assert_eq!(w.creates.load(Ordering::SeqCst), 1, "{:?}", r.actions);
    let t1 = cloud.now() + chrono::Duration::days(365);
    let r = tokio::time::timeout(Duration::from_secs(60), s.pass(&w.layered(), t1))
        .await
        .expect("the pass ends");
    assert_eq!(
        w.creates.load(Ordering::SeqCst),
        1,
        "still resting: {:?}",
        r.actions
    );
    assert!(
        r.actions
            .iter()
            .any(|a| matches!(a, Action::Skipped { offering, .. } if offering == A)),
        "{:?}",
        r.actions
    );
}
