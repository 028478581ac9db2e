//! The record is kept per kind, owner and pool: another kind, owner or a lost record file deletes
//! nothing of what it does not name until the operator's word; names carry the owner.

use crate::support;

use orca::memory::MemoryCloud;
use orca::{MachineSpec, Provider};
use orca_scaler::{machine_name, Action, Key, Phase, Unknown};
use support::{cloud, ids, scaler, Wrap};

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

fn conflicts(actions: &[Action]) -> usize {
    actions
        .iter()
        .filter(|a| matches!(a, Action::Conflict { .. }))
        .count()
}

/// The record is keyed by kind: a run on another kind in the same folder does not make the
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
    s.pass(&pb.layered(), b.now()).await;
    let r = s.pass(&pa, a.now()).await;
    assert_eq!(ids(&a), first, "{:?}", r.actions);
    assert!(r.actions.is_empty(), "{:?}", r.actions);
}

/// The record is keyed by owner (the CLI test `switching_owner_in_one_folder_deletes_nothing`
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

/// A record that went back in time (its journal lost, an older copy restored) no longer names
/// machines it made, which carry its own writer id: they are no strangers to delete but the
/// record's own, so the pass deletes and creates nothing and says why; the operator's flag decides.
#[tokio::test]
async fn a_record_that_lost_entries_deletes_none_of_its_own_machines() {
    let dir = tempfile::tempdir().unwrap();
    let (cloud, p) = cloud();
    let mut s = scaler(dir.path(), 2, &[A]);
    s.pass(&p, cloud.now()).await;
    s.pass(&p, cloud.now()).await;
    drop(s);
    let made = ids(&cloud);
    assert_eq!(made.len(), 2);
    std::fs::remove_file(dir.path().join("rec.json.journal")).unwrap();
    let mut back = scaler(dir.path(), 2, &[A]);
    let r = back.pass(&p, cloud.now()).await;
    assert_eq!(ids(&cloud), made, "{:?}", r.actions);
    assert!(r.held(), "{:?}", r.actions);
    let text = r.lines().join("\n");
    assert!(
        text.contains("writer id") && text.contains("--unknown adopt"),
        "{text}"
    );
    // The operator takes them back: counted, nothing made or deleted.
    back.settings.unknown = Unknown::Adopt;
    let r = back.pass(&p, cloud.now()).await;
    assert_eq!(ids(&cloud), made, "{:?}", r.actions);
    assert_eq!(r.serving, 2);
}

/// A lost record file is a new record: it adopts and deletes nothing, creates nothing, and
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

/// Names carry the owner: two owners on one cloud (names unique per account) never collide.
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

/// An established record deletes what it does not name (it names every machine it ever meant to make), and never another owner's.
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

#[tokio::test]
async fn an_older_record_file_is_kept_and_never_read_as_this_pools() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("rec.json"),
        r#"{"known": {"m-00000001": "lab-0"}, "cooling": {}, "next": 1}"#,
    )
    .unwrap();
    let cloud = MemoryCloud::new();
    let p = cloud.provider("s1").unwrap();
    p.create(&orca::MachineSpec::new(
        "lab-0",
        "amd64-small",
        "zone-a",
        "lab",
    ))
    .await
    .unwrap();
    let mut s = scaler(dir.path(), 1, &["amd64-small@zone-a"]);
    let r = s.pass(&p, cloud.now()).await;
    assert!(r.held(), "{:?}", r.actions);
    assert!(
        r.lines().join("\n").contains("older orca-pool"),
        "{:?}",
        r.lines()
    );
    assert_eq!(cloud.all_machines().len(), 1);
}
