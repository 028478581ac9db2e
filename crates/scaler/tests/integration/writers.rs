//! Another writer on the pool (a second scaler with its own record, or another program): a conflict
//! that holds the pool until the operator's word, never an adoption or a delete.

use crate::support;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use orca::layer::{Answer, Call, Layer, Layered, Next};
use orca::{MachineSpec, Provider};
use orca_scaler::{machine_name, Action, FileStore, Key, Phase, Scaler, Unknown};
use support::{cloud, ids, scaler, settings, FailingStore, Wrap};

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
    let r = two.pass(&two_p.layered(), cloud.now()).await;
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
        let r = reopened.pass(&two_p.layered(), cloud.now()).await;
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
    let r = reopened.pass(&two_p.layered(), cloud.now()).await;
    assert!(r.stopped.is_none(), "{r:?}");
    assert_eq!(r.serving, 2, "{:?}", r.actions);
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
    let r = two.pass(&two_p.layered(), cloud.now()).await;
    assert!(conflicts(&r.actions) > 0, "{:?}", r.actions);

    two.settings.unknown = Unknown::Adopt;
    two.settings.size = 3;
    let r = two.pass(&two_p.layered(), cloud.now()).await;
    assert!(r.stopped.is_none(), "{r:?}");
    assert_eq!(r.serving, 3, "{:?}", r.actions);

    two.settings.unknown = Unknown::Ask;
    two.settings.size = 4;
    let r = two.pass(&two_p.layered(), cloud.now()).await;
    assert_eq!(conflicts(&r.actions), 0, "{:?}", r.actions);
    assert!(r.stopped.is_none(), "{r:?}");
    assert_eq!(r.serving, 4, "{:?}", r.actions);
    assert_eq!(ids(&cloud).len(), 4);
    assert!(two_p.deleted.lock().unwrap().is_empty());
    let rec = two.record().unwrap();
    assert_eq!(rec.in_phase(Phase::Live).count(), 4, "{rec:?}");
    assert!(rec.conflict.is_none());
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
    let r = two.pass(&two_p.layered(), cloud.now()).await;
    assert!(
        r.stopped.as_deref().is_some_and(|s| s.contains("injected")),
        "{r:?}"
    );
    for _ in 0..2 {
        let r = two.pass(&two_p.layered(), cloud.now()).await;
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
    let r = again.pass(&two_p.layered(), cloud.now()).await;
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
    assert_eq!(s.pass(&w.layered(), cloud.now()).await.serving, 1);
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
    let r = s.pass(&w.layered(), cloud.now()).await;
    assert_eq!(conflicts(&r.actions), 1, "{:?}", r.actions);
    assert!(r.stopped.is_some(), "{r:?}");
    assert_eq!(r.failures(), 1, "one conflict, one failure: {r:?}");
    let r = s.pass(&w.layered(), cloud.now()).await;
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

/// Two scalers with their own records on one pool, both established: each machine carries its
/// record's writer label, so the second sees the first's machines as another writer's (a conflict
/// that holds the pool), never as unknown machines to delete. The operator's word settles it.
#[tokio::test]
async fn a_second_scaler_with_its_own_record_never_deletes_the_others_machines() {
    let (one_dir, two_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (cloud, p) = cloud();
    // The second scaler's record is established on the empty pool first.
    let mut two = scaler(two_dir.path(), 0, &[A]);
    let r = two.pass(&p, cloud.now()).await;
    assert!(r.stopped.is_none() && r.actions.is_empty(), "{r:?}");
    let mut one = scaler(one_dir.path(), 2, &[A]);
    assert_eq!(one.pass(&p, cloud.now()).await.serving, 2);
    let theirs = ids(&cloud);

    two.settings.size = 2;
    for _ in 0..2 {
        let r = two.pass(&p, cloud.now()).await;
        assert!(deleted(&r.actions).is_empty(), "{:?}", r.actions);
        assert!(
            r.stopped
                .as_deref()
                .is_some_and(|s| s.contains("another writer") && s.contains("orca-pool-writer")),
            "{r:?}"
        );
        assert_eq!(ids(&cloud), theirs, "{:?}", r.actions);
    }
    let r = one.pass(&p, cloud.now()).await;
    assert!(r.actions.is_empty(), "{:?}", r.actions);

    // The other writer stopped, the operator adopts its machines: held no more.
    drop(one);
    two.settings.unknown = Unknown::Adopt;
    let r = two.pass(&p, cloud.now()).await;
    assert!(r.stopped.is_none(), "{r:?}");
    assert_eq!(r.serving, 2, "{:?}", r.actions);
    two.settings.unknown = Unknown::Ask;
    let r = two.pass(&p, cloud.now()).await;
    assert!(r.actions.is_empty() && r.stopped.is_none(), "{r:?}");
    assert_eq!(ids(&cloud), theirs);
}

/// A conflict met by a create (answered with another writer's machine) whose write is lost with the
/// process: the name stays recorded as creating, and the next process finds the other writer's
/// machine of that name in the listing. Its writer label tells it is not this record's: a conflict,
/// not an adoption.
#[tokio::test]
async fn a_conflict_lost_with_the_process_is_found_again_by_the_writer_label() {
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
    let r = two.pass(&two_p.layered(), cloud.now()).await;
    assert!(
        r.stopped.as_deref().is_some_and(|s| s.contains("injected")),
        "{r:?}"
    );
    drop(two);

    let mut again = scaler(two_dir.path(), 1, &[A]);
    let r = again.pass(&two_p.layered(), cloud.now()).await;
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
    assert!(two_p.deleted.lock().unwrap().is_empty());
    assert_eq!(ids(&cloud), theirs);
}

/// Another writer's machine named as this record's serving machine `name` (EC2's names are tags,
/// Compute Engine's are per zone): `--unknown delete` deletes the other writer's machine and shows
/// its twin in the listing until told otherwise; every delete it is asked answers done.
#[derive(Debug, Clone)]
struct Twin {
    name: Arc<Mutex<Option<String>>>,
    deleted: Arc<Mutex<Vec<String>>>,
}

#[async_trait::async_trait]
impl Layer for Twin {
    async fn around(&self, call: Call<'_>, next: Next<'_>) -> orca::Result<Answer> {
        match call {
            Call::Machines { .. } => {
                let Answer::Machines(mut ms) = next.run(call).await? else {
                    unreachable!("a listing answers machines")
                };
                let name = self.name.lock().unwrap().clone();
                if let Some(twin) = name.and_then(|n| ms.iter().find(|m| m.name == n).cloned()) {
                    let mut twin = twin;
                    twin.id = "m-twin".into();
                    twin.labels
                        .insert(orca_scaler::WRITER_LABEL.into(), "other".into());
                    ms.push(twin);
                }
                Ok(Answer::Machines(ms))
            }
            Call::Delete { id } => {
                self.deleted.lock().unwrap().push(id.to_string());
                if id == "m-twin" {
                    return Ok(Answer::Deleted(true));
                }
                next.run(call).await
            }
            other => next.run(other).await,
        }
    }
}

/// `--unknown delete` against another writer's machine of the same name as this record's own: the
/// other machine is deleted, and this record's entry of that name (its own serving machine) is left
/// as it was, so the next pass does not take its own machine for one it deleted before.
#[tokio::test]
async fn deleting_another_writers_twin_keeps_this_records_machine_of_that_name() {
    let dir = tempfile::tempdir().unwrap();
    let (cloud, p) = cloud();
    let mut s = scaler(dir.path(), 1, &[A]);
    let r = s.pass(&p, cloud.now()).await;
    assert_eq!(r.serving, 1, "{:?}", r.actions);
    let mine = ids(&cloud);
    let name = cloud.all_machines()[0].name.clone();

    let twin = Twin {
        name: Arc::new(Mutex::new(Some(name.clone()))),
        deleted: Arc::default(),
    };
    let w = Layered::new(p, twin.clone());
    s.settings.unknown = Unknown::Delete;
    let r = s.pass(&w, cloud.now()).await;
    assert!(r.stopped.is_none(), "{r:?}");
    assert_eq!(*twin.deleted.lock().unwrap(), ["m-twin"], "{:?}", r.actions);

    // The twin is gone; the operator goes back to the default.
    *twin.name.lock().unwrap() = None;
    s.settings.unknown = Unknown::Ask;
    let r = s.pass(&w, cloud.now()).await;
    assert!(deleted(&r.actions).is_empty(), "{:?}", r.actions);
    assert_eq!(r.serving, 1, "{:?}", r.actions);
    assert_eq!(ids(&cloud), mine);
    assert_eq!(*twin.deleted.lock().unwrap(), ["m-twin"]);
    let rec = s.record().unwrap();
    let e = &rec.entries[&name];
    assert_eq!(e.phase, Phase::Live, "{e:?}");
    assert_eq!(e.id.as_deref(), Some(mine[0].as_str()), "{e:?}");
}

/// A name this record deleted before (kept as gone for the retention), now carried by another
/// writer's machine: `--unknown adopt` adopts that machine, as it adopts the other writer's
/// machines of names it never held, and never deletes it as its own machine deleted before.
#[tokio::test]
async fn adopt_takes_another_writers_machine_of_a_name_this_record_deleted() {
    let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (cloud, p) = cloud();
    let w = Wrap::new(p.clone());
    let mut a = scaler(a_dir.path(), 1, &[A]);
    assert_eq!(a.pass(&w.layered(), cloud.now()).await.serving, 1);
    let n0 = cloud.all_machines()[0].name.clone();
    a.settings.size = 0;
    let r = a.pass(&w.layered(), cloud.now()).await;
    assert_eq!(
        deleted(&r.actions),
        std::slice::from_ref(&n0),
        "{:?}",
        r.actions
    );
    assert_eq!(a.record().unwrap().entries[&n0].phase, Phase::Gone);

    let mut b = scaler(b_dir.path(), 1, &[A]);
    let r = b.pass(&p, cloud.now()).await;
    assert_eq!(r.serving, 1, "{:?}", r.actions);
    let theirs = ids(&cloud);
    assert_eq!(
        cloud.all_machines()[0].name,
        n0,
        "the same name, another writer"
    );
    drop(b);

    let deletes_before = w.deleted.lock().unwrap().len();
    a.settings.size = 1;
    a.settings.unknown = Unknown::Adopt;
    let r = a.pass(&w.layered(), cloud.now()).await;
    assert!(deleted(&r.actions).is_empty(), "{:?}", r.actions);
    assert_eq!(w.deleted.lock().unwrap().len(), deletes_before);
    assert_eq!(ids(&cloud), theirs, "{:?}", r.actions);
    assert_eq!((r.serving, r.failures()), (1, 0), "{:?}", r.actions);
    assert!(
        r.actions
            .iter()
            .any(|a| matches!(a, Action::Adopted { name, .. } if *name == n0)),
        "{:?}",
        r.actions
    );
    let e = &a.record().unwrap().entries[&n0];
    assert_eq!(e.phase, Phase::Live, "{e:?}");
    assert_eq!(e.id.as_deref(), Some(theirs[0].as_str()), "{e:?}");

    // Adopted: the default goes on with it, no conflict, nothing more made or deleted.
    a.settings.unknown = Unknown::Ask;
    let r = a.pass(&w.layered(), cloud.now()).await;
    assert!(r.actions.is_empty() && r.stopped.is_none(), "{r:?}");
    assert_eq!(r.serving, 1);
    assert_eq!(ids(&cloud), theirs);
}
