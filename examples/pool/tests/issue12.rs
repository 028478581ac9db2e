//! Issue 12's first list, one test a bullet (each failed on the scaler before the fix: the same
//! scenarios were run against the old code first), and what the fix promises beside them.

mod support;

use std::sync::atomic::Ordering;
use std::time::Duration;

use orca::memory::{FaultKind, MemoryCloud, Operation};
use orca::{ErrorKind, MachineSpec, Provider};
use orca_pool::{
    check_offerings, machine_name, Action, FileStore, Key, Phase, Scaler, StoreError, Unknown,
};
use support::{cloud, ids, scaler, settings, Wrap};

const A: &str = "amd64-small@zone-a";

fn deleted(actions: &[Action]) -> Vec<String> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Deleted { name, .. } => Some(name.clone()),
            _ => None,
        })
        .collect()
}

/// Bullet 1: a create whose answer is lost (the machine made, the call failed) is adopted on the next
/// pass, never deleted as unknown and made again.
#[tokio::test]
async fn lost_create_answer_is_adopted_not_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let (cloud, p) = cloud();
    cloud.inject(Operation::Create, FaultKind::LoseAnswer, 1);
    cloud.inject(Operation::Create, FaultKind::Error(ErrorKind::Transient), 7);
    let mut s = scaler(dir.path(), 1, &[A]);
    let r = s.pass(&p, cloud.now()).await;
    assert_eq!(r.failures(), 1, "{:?}", r.actions);
    let made = ids(&cloud);
    assert_eq!(made.len(), 1, "the lost create made its machine");
    let entry = s.record().unwrap().entries.values().next().unwrap().clone();
    assert_eq!(entry.phase, Phase::Creating, "its name stays recorded");
    let r = s.pass(&p, cloud.now()).await;
    assert_eq!(
        ids(&cloud),
        made,
        "the machine made is kept, none made again: {:?}",
        r.actions
    );
    assert!(
        matches!(&r.actions[..], [Action::Adopted { name, .. }] if *name == entry.name),
        "{:?}",
        r.actions
    );
    assert_eq!(r.serving, 1);
}

/// Bullet 1 again, with the machine invisible to the listing: the retried create of the recorded name
/// is adopted by the driver.
#[tokio::test]
async fn a_recorded_create_is_retried_by_name_and_adopted() {
    let dir = tempfile::tempdir().unwrap();
    let (cloud, p) = cloud();
    cloud.inject(Operation::Create, FaultKind::LoseAnswer, 1);
    // The retry policy's 6 retries, all failing: the call fails, the machine is made.
    cloud.inject(Operation::Create, FaultKind::Error(ErrorKind::Transient), 6);
    let mut s = scaler(dir.path(), 1, &[A]);
    let r = s.pass(&p, cloud.now()).await;
    assert_eq!(r.failures(), 1, "{:?}", r.actions);
    let made = ids(&cloud);
    assert_eq!(made.len(), 1);
    // The next listing misses it (a lagging listing), so the pass retries the recorded create.
    let hidden = HideList(Wrap::new(p.clone()));
    let r = s.pass(&hidden, cloud.now()).await;
    assert_eq!(ids(&cloud), made, "{:?}", r.actions);
    assert!(
        r.actions
            .iter()
            .any(|a| matches!(a, Action::Created { adopted: true, .. })),
        "{:?}",
        r.actions
    );
}

/// A provider whose listing shows nothing (a listing that lags).
#[derive(Debug)]
struct HideList(Wrap);

#[async_trait::async_trait]
impl Provider for HideList {
    fn kind(&self) -> &str {
        self.0.kind()
    }
    fn owner(&self) -> &str {
        self.0.owner()
    }
    async fn arch(&self, t: &str) -> orca::Result<orca::Arch> {
        self.0.arch(t).await
    }
    async fn create(&self, spec: &MachineSpec) -> orca::Result<orca::Created> {
        self.0.create(spec).await
    }
    async fn machines(&self, _pool: &str) -> orca::Result<Vec<orca::Machine>> {
        Ok(Vec::new())
    }
    async fn machine(&self, id: &str) -> orca::Result<Option<orca::Machine>> {
        self.0.machine(id).await
    }
    async fn delete(&self, id: &str) -> orca::Result<bool> {
        self.0.delete(id).await
    }
}

/// Bullet 2: a crash during a pass (the scaler dropped mid-create, its store reopened) loses nothing:
/// every name was recorded before its call.
#[tokio::test]
async fn a_crash_mid_pass_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (cloud, p) = cloud();
    let mut w = Wrap::new(p.clone());
    w.hang_at = 2;
    let mut s = scaler(dir.path(), 3, &[A]);
    s.settings.parallel = 1;
    let crashed = tokio::time::timeout(Duration::from_secs(1), s.pass(&w, cloud.now())).await;
    assert!(
        crashed.is_err(),
        "the pass hangs on its second create: the crash"
    );
    drop(s);
    let made = ids(&cloud);
    assert_eq!(made.len(), 1);
    let mut again = scaler(dir.path(), 3, &[A]);
    let r = again.pass(&p, cloud.now()).await;
    let after = ids(&cloud);
    assert!(made.iter().all(|id| after.contains(id)), "{:?}", r.actions);
    assert_eq!(after.len(), 3, "{:?}", r.actions);
    assert!(deleted(&r.actions).is_empty(), "{:?}", r.actions);
}

/// Bullet 3: the record is keyed by kind: a run on another kind in the same folder does not make the
/// first kind's machines unknown.
#[tokio::test]
async fn switching_kind_keeps_each_kinds_machines() {
    let dir = tempfile::tempdir().unwrap();
    let a = MemoryCloud::new();
    let b = MemoryCloud::new();
    b.provider("x")
        .unwrap()
        .create(&MachineSpec::new("x-1", "amd64-small", "zone-a", "x"))
        .await
        .unwrap();
    let pa = a.provider("s1").unwrap();
    let mut pb = Wrap::new(b.provider("s1").unwrap());
    pb.kind = "other";
    let mut s = scaler(dir.path(), 2, &[A]);
    s.pass(&pa, a.now()).await;
    let first = ids(&a);
    assert_eq!(first.len(), 2);
    s.pass(&pb, b.now()).await;
    let r = s.pass(&pa, a.now()).await;
    assert_eq!(ids(&a), first, "{:?}", r.actions);
    assert!(r.actions.is_empty(), "{:?}", r.actions);
}

/// Bullet 3: the record is keyed by owner (the CLI test `switching_owner_in_one_folder_deletes_nothing`
/// runs it through the binary too).
#[tokio::test]
async fn switching_owner_keeps_each_owners_machines() {
    let dir = tempfile::tempdir().unwrap();
    let cloud = MemoryCloud::new();
    let (a, b) = (cloud.provider("a").unwrap(), cloud.provider("b").unwrap());
    let mut s = scaler(dir.path(), 2, &[A]);
    s.pass(&a, cloud.now()).await;
    let first = ids(&cloud);
    s.pass(&b, cloud.now()).await;
    let r = s.pass(&a, cloud.now()).await;
    let now = ids(&cloud);
    assert!(first.iter().all(|id| now.contains(id)), "{:?}", r.actions);
    assert_eq!(now.len(), 4);
}

/// Bullet 3: a lost record file is a new record: it adopts and deletes nothing, creates nothing, and
/// says why; the operator's flag decides.
#[tokio::test]
async fn an_empty_record_deletes_nothing_until_told() {
    let dir = tempfile::tempdir().unwrap();
    let (cloud, p) = cloud();
    let mut s = scaler(dir.path(), 2, &[A]);
    s.pass(&p, cloud.now()).await;
    drop(s);
    let made = ids(&cloud);
    std::fs::remove_file(dir.path().join("rec.json")).unwrap();
    let mut lost = scaler(dir.path(), 2, &[A]);
    let r = lost.pass(&p, cloud.now()).await;
    assert_eq!(
        ids(&cloud),
        made,
        "nothing deleted or created on an empty record"
    );
    assert!(r.held(), "{:?}", r.actions);
    let text = r.lines().join("\n");
    assert!(
        text.contains("is new") && text.contains("--unknown adopt"),
        "{text}"
    );
    assert_eq!(r.failures(), 0);
    // Again: still held, the record stays new.
    assert!(lost.pass(&p, cloud.now()).await.held());
    // The operator adopts them: counted, nothing made.
    lost.settings.unknown = Unknown::Adopt;
    let r = lost.pass(&p, cloud.now()).await;
    assert_eq!(ids(&cloud), made, "{:?}", r.actions);
    assert_eq!(r.serving, 2);
    lost.settings.unknown = Unknown::Ask;
    let r = lost.pass(&p, cloud.now()).await;
    assert!(r.actions.is_empty(), "{:?}", r.actions);
}

/// `--unknown delete` on a new record deletes what it does not name and then fills the pool.
#[tokio::test]
async fn unknown_delete_is_the_operators_word() {
    let dir = tempfile::tempdir().unwrap();
    let (cloud, p) = cloud();
    let stray = p
        .create(&MachineSpec::new("stray", "amd64-small", "zone-a", "lab"))
        .await
        .unwrap()
        .machine()
        .unwrap();
    let mut s = scaler(dir.path(), 1, &[A]);
    s.settings.unknown = Unknown::Delete;
    let r = s.pass(&p, cloud.now()).await;
    assert_eq!(deleted(&r.actions), ["stray"]);
    assert!(!ids(&cloud).contains(&stray.id));
    assert_eq!(ids(&cloud).len(), 1);
}

/// Bullet 4: names carry the owner: two owners on one cloud (names unique per account) never collide.
#[tokio::test]
async fn two_owners_on_one_cloud_never_collide_on_names() {
    let d1 = tempfile::tempdir().unwrap();
    let d2 = tempfile::tempdir().unwrap();
    let cloud = MemoryCloud::new();
    let mut s1 = scaler(d1.path(), 2, &[A]);
    let mut s2 = scaler(d2.path(), 2, &[A]);
    s1.pass(&cloud.provider("s1").unwrap(), cloud.now()).await;
    let r = s2.pass(&cloud.provider("s2").unwrap(), cloud.now()).await;
    assert_eq!(r.failures(), 0, "{:?}", r.actions);
    assert_eq!(cloud.all_machines().len(), 4);
    let n1 = machine_name(&Key::new("fake", "s1", "lab"), 0);
    let n2 = machine_name(&Key::new("fake", "s2", "lab"), 0);
    assert_ne!(n1, n2);
    assert!(n1.starts_with("lab-") && n1.ends_with("-0"), "{n1}");
    // Pools that differ only by '_' and '-' differ too.
    assert_ne!(
        machine_name(&Key::new("fake", "s1", "a_b"), 0),
        machine_name(&Key::new("fake", "s1", "a-b"), 0)
    );
}

/// Bullet 5: a machine stopped for longer than the grace (by the cloud's stop time) is deleted and
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

/// Bullet 5: a machine in an unknown state is replaced once it has been seen so for the grace (first
/// seen, as recorded); a machine still starting is counted.
#[tokio::test]
async fn an_unknown_machine_is_replaced_after_the_grace_and_starting_counts() {
    let dir = tempfile::tempdir().unwrap();
    let (cloud, p) = cloud();
    let w = Wrap::new(p);
    let mut s = scaler(dir.path(), 2, &[A]);
    s.pass(&w, cloud.now()).await;
    let all = ids(&cloud);
    let (victim, booting) = (all[0].clone(), all[1].clone());
    w.unknown.lock().unwrap().push(victim.clone());
    w.starting.lock().unwrap().push(booting.clone());
    let t0 = cloud.now();
    let r = s.pass(&w, t0).await;
    assert!(r.actions.is_empty(), "{:?}", r.actions);
    assert_eq!(
        r.serving, 2,
        "unknown within the grace and starting both count"
    );
    let r = s.pass(&w, t0 + chrono::Duration::seconds(601)).await;
    assert!(!ids(&cloud).contains(&victim), "{:?}", r.actions);
    assert!(ids(&cloud).contains(&booting));
    assert_eq!(ids(&cloud).len(), 2);
}

/// Bullet 6 is the CLI's (`once_exits_non_zero_when_an_action_failed` in tests/cli.rs); the report
/// counts the failure.
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

/// Bullet 7: creates run in parallel, at most `parallel` at once.
#[tokio::test]
async fn creates_run_in_parallel_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let (cloud, p) = cloud();
    let mut w = Wrap::new(p);
    w.create_delay = Duration::from_millis(30);
    let mut s = scaler(dir.path(), 6, &[A]);
    s.settings.parallel = 4;
    let r = s.pass(&w, cloud.now()).await;
    assert_eq!(r.serving, 6, "{:?}", r.actions);
    assert_eq!(
        w.max_in_flight.load(Ordering::SeqCst),
        4,
        "four creates at once, never more"
    );
}

/// Bullet 7: a second copy on the same record file is refused with a clear message.
#[tokio::test]
async fn a_second_copy_on_one_record_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rec.json");
    let one = FileStore::open(&path).unwrap();
    let e = FileStore::open(&path).unwrap_err();
    assert!(matches!(e, StoreError::Busy(_)), "{e:?}");
    assert!(e.to_string().contains("another orca-pool"), "{e}");
    assert!(e.to_string().contains("PostgreSQL"), "{e}");
    drop(one);
    FileStore::open(&path).unwrap();
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

/// Invalid offerings are refused before any machine is made, each named.
#[tokio::test]
async fn invalid_offerings_are_refused_at_start_naming_each() {
    let (_cloud, p) = cloud();
    let mut st = settings(
        1,
        &[
            "nope-small@zone-a",
            "arm64-small@zone-a",
            "amd64-small@zone-a",
        ],
    );
    st.archs = vec![orca::Arch::Amd64];
    let e = check_offerings(&p, &st).await.unwrap_err();
    assert_eq!(e.len(), 2, "{e:?}");
    assert!(
        e[0].contains("nope-small@zone-a") && e[0].contains("unknown machine type"),
        "{e:?}"
    );
    assert!(
        e[1].contains("arm64-small@zone-a") && e[1].contains("arm64"),
        "{e:?}"
    );
    let long = settings(1, &[A]);
    let long = orca_pool::Settings {
        pool: "p".repeat(50),
        ..long
    };
    let e = check_offerings(&p, &long).await.unwrap_err();
    assert!(e[0].contains("longer than the 63"), "{e:?}");
    assert!(check_offerings(&p, &settings(1, &[A])).await.is_ok());
}

/// An established record deletes what it does not name (the seed's rule), and never another owner's.
#[tokio::test]
async fn an_established_record_deletes_strays_and_nothing_of_others() {
    let dir = tempfile::tempdir().unwrap();
    let (cloud, p) = cloud();
    let other = cloud.provider("s2").unwrap();
    let mut s = scaler(dir.path(), 1, &[A]);
    s.pass(&p, cloud.now()).await;
    let theirs = other
        .create(&MachineSpec::new("theirs", "amd64-small", "zone-a", "lab"))
        .await
        .unwrap()
        .machine()
        .unwrap();
    p.create(&MachineSpec::new("stray", "amd64-small", "zone-a", "lab"))
        .await
        .unwrap();
    let r = s.pass(&p, cloud.now()).await;
    assert_eq!(deleted(&r.actions), ["stray"]);
    assert_eq!(other.machines("lab").await.unwrap()[0].id, theirs.id);
}

/// A recorded delete survives a crash: the next pass finishes it.
#[tokio::test]
async fn a_recorded_delete_is_finished_after_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let (cloud, p) = cloud();
    let mut s = scaler(dir.path(), 2, &[A]);
    s.pass(&p, cloud.now()).await;
    s.settings.size = 1;
    cloud.inject(Operation::Delete, FaultKind::Error(ErrorKind::Transient), 7);
    let r = s.pass(&p, cloud.now()).await;
    assert_eq!(r.failures(), 1, "{:?}", r.actions);
    let rec = s.record().unwrap();
    assert_eq!(rec.in_phase(Phase::Deleting).count(), 1);
    drop(s);
    let mut again = scaler(dir.path(), 1, &[A]);
    let r = again.pass(&p, cloud.now()).await;
    assert_eq!(ids(&cloud).len(), 1, "{:?}", r.actions);
    assert!(
        r.actions
            .iter()
            .any(|a| matches!(a, Action::Deleted { cause, .. } if cause == "recorded")),
        "{:?}",
        r.actions
    );
}

/// A machine deleted outside orca-pool is noticed and replaced.
#[tokio::test]
async fn a_machine_deleted_outside_is_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let (cloud, p) = cloud();
    let mut s: Scaler = scaler(dir.path(), 2, &[A]);
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

/// Two copies with their own record files on one pool (same kind, owner and pool) pick the same names.
/// The second, whose first listing was taken before the first copy's creates, is answered `Adopted`
/// for a name it never asked for before: that is another writer's machine. It is not recorded, the
/// pass stops, and later passes delete nothing of the other writer's until the operator decides.
#[tokio::test]
async fn a_second_writer_on_one_pool_is_a_conflict_not_an_adoption() {
    let (one_dir, two_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (cloud, p) = cloud();
    let mut one = scaler(one_dir.path(), 2, &[A]);
    let r = one.pass(&p, cloud.now()).await;
    assert_eq!(r.serving, 2, "{:?}", r.actions);

    let two_p = Wrap::new(cloud.provider("s1").unwrap());
    two_p.stale_listings.store(1, Ordering::SeqCst);
    let mut two = scaler(two_dir.path(), 2, &[A]);
    let r = two.pass(&two_p, cloud.now()).await;
    let stopped = r.stopped.clone().unwrap_or_default();
    assert!(
        stopped.contains("another writer") && stopped.contains("s1"),
        "{stopped:?} {:?}",
        r.actions
    );
    assert!(r.failures() > 0);
    assert!(
        r.actions
            .iter()
            .any(|a| matches!(a, Action::Conflict { .. })),
        "{:?}",
        r.actions
    );
    assert!(
        !r.actions
            .iter()
            .any(|a| matches!(a, Action::Created { .. })),
        "{:?}",
        r.actions
    );
    drop(two);
    let mut reopened = scaler(two_dir.path(), 2, &[A]);
    let before = ids(&cloud);
    assert_eq!(before.len(), 2);

    // The first copy grows; the second, on its next passes, neither adopts nor deletes.
    one.settings.size = 3;
    let r = one.pass(&p, cloud.now()).await;
    assert_eq!(r.serving, 3, "{:?}", r.actions);
    for _ in 0..2 {
        let r = reopened.pass(&two_p, cloud.now()).await;
        assert!(
            r.stopped
                .as_deref()
                .is_some_and(|s| s.contains("another writer")),
            "{r:?}"
        );
        assert!(deleted(&r.actions).is_empty(), "{:?}", r.actions);
    }
    assert!(two_p.deleted.lock().unwrap().is_empty());
    assert_eq!(ids(&cloud).len(), 3);
    let rec = reopened.record().cloned();
    assert!(
        rec.is_none_or(|r| r.in_phase(Phase::Live).count() == 0),
        "the other writer's machines are not in this record"
    );
    let r = one.pass(&p, cloud.now()).await;
    assert!(r.actions.is_empty(), "{:?}", r.actions);

    // The operator's word settles it: the other writer stopped, its machines are adopted.
    drop(one);
    reopened.settings.unknown = Unknown::Adopt;
    let r = reopened.pass(&two_p, cloud.now()).await;
    assert!(r.stopped.is_none(), "{r:?}");
    assert_eq!(r.serving, 2, "{:?}", r.actions);
}

fn conflicts(actions: &[Action]) -> usize {
    actions
        .iter()
        .filter(|a| matches!(a, Action::Conflict { .. }))
        .count()
}

/// Machines adopted on the operator's word carry this pool's names: the record's next name moves past
/// them, so a later create never picks an adopted machine's name (whose create the driver would answer
/// `Adopted`, taken for another writer's machine, dropping the pool's own machine and holding the pool).
#[tokio::test]
async fn creates_after_unknown_adopt_pick_new_names() {
    let dir = tempfile::tempdir().unwrap();
    let (cloud, p) = cloud();
    let mut first = scaler(dir.path(), 2, &[A]);
    first.pass(&p, cloud.now()).await;
    drop(first);
    std::fs::remove_file(dir.path().join("rec.json")).unwrap();
    let made = ids(&cloud);
    assert_eq!(made.len(), 2);

    // A new record, the operator adopts; the pool must grow in the same pass.
    let mut s = scaler(dir.path(), 3, &[A]);
    s.settings.unknown = Unknown::Adopt;
    let r = s.pass(&p, cloud.now()).await;
    assert_eq!(conflicts(&r.actions), 0, "{:?}", r.actions);
    assert!(r.stopped.is_none(), "{r:?}");
    assert_eq!(r.serving, 3, "{:?}", r.actions);
    assert_eq!(ids(&cloud).len(), 3);
    let rec = s.record().unwrap();
    assert_eq!(rec.in_phase(Phase::Live).count(), 3, "{rec:?}");
    assert!(rec.conflict.is_none());

    // A later pass grows again, and one machine deleted outside is replaced.
    s.settings.unknown = Unknown::Ask;
    s.settings.size = 4;
    cloud.operator_delete(&made[0]);
    let r = s.pass(&p, cloud.now()).await;
    assert_eq!(conflicts(&r.actions), 0, "{:?}", r.actions);
    assert!(r.stopped.is_none(), "{r:?}");
    assert_eq!(r.serving, 4, "{:?}", r.actions);
    assert!(deleted(&r.actions).is_empty(), "{:?}", r.actions);
    assert_eq!(ids(&cloud).len(), 4);
    assert!(made[1..].iter().all(|id| ids(&cloud).contains(id)));
    let rec = s.record().unwrap();
    assert_eq!(rec.in_phase(Phase::Live).count(), 4, "{rec:?}");
    let r = s.pass(&p, cloud.now()).await;
    assert!(r.actions.is_empty(), "{:?}", r.actions);
}

/// After a conflict settled by `--unknown adopt`, growing the pool makes machines of new names: none
/// of the adopted machines is taken for another writer's.
#[tokio::test]
async fn a_second_writer_settled_by_adoption_then_grows_without_conflict() {
    let (one_dir, two_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (cloud, p) = cloud();
    let mut one = scaler(one_dir.path(), 3, &[A]);
    assert_eq!(one.pass(&p, cloud.now()).await.serving, 3);
    drop(one);

    let two_p = Wrap::new(cloud.provider("s1").unwrap());
    two_p.stale_listings.store(1, Ordering::SeqCst);
    let mut two = scaler(two_dir.path(), 2, &[A]);
    let r = two.pass(&two_p, cloud.now()).await;
    assert!(conflicts(&r.actions) > 0, "{:?}", r.actions);

    two.settings.unknown = Unknown::Adopt;
    two.settings.size = 3;
    let r = two.pass(&two_p, cloud.now()).await;
    assert!(r.stopped.is_none(), "{r:?}");
    assert_eq!(r.serving, 3, "{:?}", r.actions);

    two.settings.unknown = Unknown::Ask;
    two.settings.size = 4;
    let r = two.pass(&two_p, cloud.now()).await;
    assert_eq!(conflicts(&r.actions), 0, "{:?}", r.actions);
    assert!(r.stopped.is_none(), "{r:?}");
    assert_eq!(r.serving, 4, "{:?}", r.actions);
    assert_eq!(ids(&cloud).len(), 4);
    assert!(two_p.deleted.lock().unwrap().is_empty());
    let rec = two.record().unwrap();
    assert_eq!(rec.in_phase(Phase::Live).count(), 4, "{rec:?}");
    assert!(rec.conflict.is_none());
}

/// A file store whose commits carrying a given event kind fail, `fail` times.
#[derive(Debug)]
struct FailingStore {
    inner: FileStore,
    kind: &'static str,
    fail: usize,
}

#[async_trait::async_trait]
impl orca_pool::Store for FailingStore {
    fn describe(&self) -> String {
        self.inner.describe()
    }
    async fn lead(&mut self, key: &Key) -> Result<orca_pool::Role, StoreError> {
        self.inner.lead(key).await
    }
    async fn load(&mut self, key: &Key) -> Result<Option<orca_pool::Record>, StoreError> {
        self.inner.load(key).await
    }
    async fn commit(
        &mut self,
        record: &orca_pool::Record,
        events: &[orca_pool::Event],
    ) -> Result<(), StoreError> {
        if self.fail > 0 && events.iter().any(|e| e.kind() == self.kind) {
            self.fail -= 1;
            return Err(StoreError::Failed("injected: the disk is full".into()));
        }
        self.inner.commit(record, events).await
    }
}

/// A conflict whose write fails is not lost: the next pass does not take the other writer's machine
/// for its own (found by the name it had recorded before the create), and the pool stays held.
#[tokio::test]
async fn a_conflict_whose_write_failed_is_not_adopted_on_the_next_pass() {
    let (one_dir, two_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (cloud, p) = cloud();
    let mut one = scaler(one_dir.path(), 1, &[A]);
    assert_eq!(one.pass(&p, cloud.now()).await.serving, 1);
    let theirs = ids(&cloud);

    let two_p = Wrap::new(cloud.provider("s1").unwrap());
    two_p.stale_listings.store(1, Ordering::SeqCst);
    let mut two = Scaler::new(
        settings(1, &[A]),
        Box::new(FailingStore {
            inner: FileStore::open(two_dir.path().join("rec.json")).unwrap(),
            kind: "conflict",
            fail: 1,
        }),
    );
    let r = two.pass(&two_p, cloud.now()).await;
    assert!(
        r.stopped.as_deref().is_some_and(|s| s.contains("injected")),
        "{r:?}"
    );
    for _ in 0..2 {
        let r = two.pass(&two_p, cloud.now()).await;
        assert!(
            !r.actions
                .iter()
                .any(|a| matches!(a, Action::Adopted { .. } | Action::Created { .. })),
            "{:?}",
            r.actions
        );
        assert!(
            r.stopped
                .as_deref()
                .is_some_and(|s| s.contains("another writer")),
            "{r:?}"
        );
        assert_eq!(
            r.serving, 0,
            "none of this pool's machines is this record's"
        );
        assert!(two
            .record()
            .is_none_or(|rec| rec.in_phase(Phase::Live).count() == 0));
    }
    assert!(two_p.deleted.lock().unwrap().is_empty());
    assert_eq!(ids(&cloud), theirs);
    // Recorded: a new process on the same file holds too.
    drop(two);
    let mut again = scaler(two_dir.path(), 1, &[A]);
    let r = again.pass(&two_p, cloud.now()).await;
    assert!(
        r.stopped
            .as_deref()
            .is_some_and(|s| s.contains("another writer")),
        "{r:?}"
    );
}

/// A conflict counts as one failure; a pass held by a recorded conflict still reports the machines
/// of this record that serve.
#[tokio::test]
async fn a_conflict_is_one_failure_and_a_held_pass_reports_its_serving_machines() {
    let dir = tempfile::tempdir().unwrap();
    let (cloud, p) = cloud();
    let w = Wrap::new(p.clone());
    let mut s = scaler(dir.path(), 1, &[A]);
    assert_eq!(s.pass(&w, cloud.now()).await.serving, 1);
    // Another program makes a machine of the name this record picks next; the listing before the
    // create does not show it yet.
    let key = Key::new("fake", "s1", "lab");
    p.create(&MachineSpec::new(
        machine_name(&key, 1),
        "amd64-small",
        "zone-a",
        "lab",
    ))
    .await
    .unwrap();
    w.stale_listings.store(1, Ordering::SeqCst);
    s.settings.size = 2;
    let r = s.pass(&w, cloud.now()).await;
    assert_eq!(conflicts(&r.actions), 1, "{:?}", r.actions);
    assert!(r.stopped.is_some(), "{r:?}");
    assert_eq!(r.failures(), 1, "one conflict, one failure: {r:?}");
    let r = s.pass(&w, cloud.now()).await;
    assert!(
        r.stopped
            .as_deref()
            .is_some_and(|s| s.contains("another writer")),
        "{r:?}"
    );
    assert_eq!(r.failures(), 1, "{r:?}");
    assert_eq!(r.serving, 1, "its own machine serves while held: {r:?}");
    assert!(w.deleted.lock().unwrap().is_empty());
}
