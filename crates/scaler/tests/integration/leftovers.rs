//! What a create leaves beside its machine: a create answered no stock (or refused) whose clean-up
//! could not remove what it made (a boot disk, an interface, an address: no listing shows them)
//! is cleaned up by name (`Provider::delete_named`) before its name is given up; a clean-up that
//! fails keeps the name marked, in the record, and a later pass tries again before the name is
//! pruned. A create that made nothing costs no such call.

use crate::support;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::metrics::sample;
use async_trait::async_trait;
use orca::layer::{Answer, Call, Layer, Layered, Next};
use orca::memory::{FaultKind, MemoryProvider, Operation};
use orca::{Created, Error, ErrorKind, MachineSpec};
use orca_scaler::metrics::Metrics;
use orca_scaler::{Action, Entry, FileStore, PgStore, Phase, Scaler, Store};
use support::{cloud, settings, TestDb};

const A: &str = "amd64-small@zone-a";
const B: &str = "amd64-small@zone-b";

/// How a create in the faulty location answers, having left a piece.
type Answering = fn(&MachineSpec, Vec<String>) -> orca::Result<Created>;

fn no_stock(spec: &MachineSpec, left: Vec<String>) -> orca::Result<Created> {
    Err(Error::no_stock(&spec.machine_type, &spec.location, "no room").with_leftovers(left))
}

/// No stock as the drivers answer it: the outcome, naming what its clean-up left.
fn no_stock_answered(spec: &MachineSpec, left: Vec<String>) -> orca::Result<Created> {
    Ok(Created::NoStock {
        machine_type: spec.machine_type.clone(),
        location: spec.location.clone(),
        message: "no room".into(),
        left,
    })
}

fn quota(_: &MachineSpec, left: Vec<String>) -> orca::Result<Created> {
    Err(Error::quota("cores").with_leftovers(left))
}

/// A cloud whose creates in one location fail after making a piece their clean-up could not
/// remove (as Compute Engine leaves a boot disk, Azure an interface), and whose `delete_named`
/// removes those pieces: it records every `delete_named` call, and fails the next `failing` ones.
#[derive(Debug, Clone)]
struct Leaves {
    location: &'static str,
    answer: Answering,
    pieces: Arc<Mutex<BTreeSet<String>>>,
    calls: Arc<Mutex<Vec<String>>>,
    failing: Arc<AtomicUsize>,
}

impl Leaves {
    fn new(location: &'static str, answer: Answering) -> Self {
        Leaves {
            location,
            answer,
            pieces: Arc::default(),
            calls: Arc::default(),
            failing: Arc::default(),
        }
    }

    fn on(&self, p: &MemoryProvider) -> Layered<MemoryProvider, Leaves> {
        Layered::new(p.clone(), self.clone())
    }

    fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }

    fn pieces(&self) -> Vec<String> {
        self.pieces.lock().unwrap().iter().cloned().collect()
    }
}

#[async_trait]
impl Layer for Leaves {
    async fn around(&self, call: Call<'_>, next: Next<'_>) -> orca::Result<Answer> {
        match call {
            Call::Create { spec } if spec.location == self.location => {
                let piece = format!("disk {}-boot", spec.name);
                self.pieces.lock().unwrap().insert(piece.clone());
                (self.answer)(spec, vec![piece]).map(Answer::Created)
            }
            Call::DeleteNamed { pool, name } => {
                self.calls.lock().unwrap().push(format!("{pool}/{name}"));
                let piece = format!("disk {name}-boot");
                let fail = self
                    .failing
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                    .is_ok();
                if fail {
                    return Err(Error::leftovers(
                        Error::transient("the disk is still attached"),
                        vec![piece],
                    ));
                }
                let removed = self.pieces.lock().unwrap().remove(&piece);
                match next.run(call).await? {
                    Answer::Deleted(machine) => Ok(Answer::Deleted(removed || machine)),
                    other => Ok(other),
                }
            }
            other => next.run(other).await,
        }
    }
}

fn store(dir: &std::path::Path) -> Box<FileStore> {
    Box::new(FileStore::open(dir.join("rec.json")).unwrap())
}

/// The record's entry of `name`, as the record file has it (read by a new store).
async fn entry_on_disk(dir: &std::path::Path, s: Scaler, name: &str) -> (Scaler, Option<Entry>) {
    let settings = s.settings.clone();
    drop(s);
    let mut st = store(dir);
    let key = orca_scaler::Key::new("fake", "s1", "lab");
    let e = st
        .load(&key)
        .await
        .unwrap()
        .and_then(|r| r.entries.get(name).cloned());
    (Scaler::new(settings, st), e)
}

fn cleaned(actions: &[Action]) -> Vec<(String, bool)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Cleaned { name, removed, .. } => Some((name.clone(), *removed)),
            _ => None,
        })
        .collect()
}

fn failed_clean_ups(actions: &[Action]) -> usize {
    actions
        .iter()
        .filter(|a| matches!(a, Action::Failed { operation, .. } if operation == "delete_named"))
        .count()
}

/// The first name the scaler picks: its record's only entry of offering `o`.
fn name_of(s: &Scaler, o: &str) -> String {
    let r = s.record().unwrap();
    let v: Vec<&Entry> = r
        .entries
        .values()
        .filter(|e| e.offering.to_string() == o)
        .collect();
    assert_eq!(v.len(), 1, "{:?}", r.entries);
    v[0].name.clone()
}

#[tokio::test]
async fn a_no_stock_that_left_a_piece_cleans_it_up_by_name_before_the_name_is_given_up() {
    no_stock_that_left_a_piece(no_stock).await;
}

/// The same, when the driver answers the no stock as its outcome with what it left in `left`.
#[tokio::test]
async fn a_no_stock_answer_that_names_what_it_left_cleans_it_up_by_name() {
    no_stock_that_left_a_piece(no_stock_answered).await;
}

async fn no_stock_that_left_a_piece(answer: Answering) {
    let dir = tempfile::tempdir().unwrap();
    let (c, p) = cloud();
    let cloud = Leaves::new("zone-a", answer);
    let p = cloud.on(&p);
    let mut s = Scaler::new(settings(1, &[A, B]), store(dir.path()));
    let r = s.pass(&p, c.now()).await;
    let n0 = name_of(&s, A);
    assert_eq!(cloud.calls(), [format!("lab/{n0}")], "{:?}", r.actions);
    assert!(cloud.pieces().is_empty(), "{:?}", cloud.pieces());
    assert_eq!(cleaned(&r.actions), [(n0.clone(), true)], "{:?}", r.actions);
    assert!(r
        .actions
        .iter()
        .any(|a| matches!(a, Action::NoStock { offering, .. } if offering == A)));
    assert_eq!((r.serving, r.failures()), (1, 0), "{:?}", r.actions);
    let (s, e) = entry_on_disk(dir.path(), s, &n0).await;
    let e = e.expect("the name stays recorded for the retention");
    assert_eq!(e.phase, Phase::Retired);
    assert!(!e.leftovers, "cleaned up: {e:?}");
    // Given up once the retention is over, with no other call.
    let mut s = s;
    let later = c.now() + chrono::Duration::from_std(s.settings.retention).unwrap();
    s.pass(&p, later + chrono::Duration::seconds(1)).await;
    assert!(!s.record().unwrap().entries.contains_key(&n0));
    assert_eq!(cloud.calls().len(), 1);
}

#[tokio::test]
async fn a_failed_clean_up_keeps_the_name_marked_and_a_later_pass_tries_again() {
    let dir = tempfile::tempdir().unwrap();
    let (c, p) = cloud();
    let cloud = Leaves::new("zone-a", no_stock);
    cloud.failing.store(1, Ordering::SeqCst);
    let p = cloud.on(&p);
    let mut s = Scaler::new(settings(1, &[A, B]), store(dir.path()));
    let t0 = c.now();
    let metrics = Metrics::new(&orca_scaler::Key::new("fake", "s1", "lab"));
    let r = s.pass(&p, t0).await;
    metrics.observe(&r);
    let failed = |m: &Metrics| sample(&m.render(), "orca_pool_failures_total", &["delete_named"]);
    let removed = |m: &Metrics| sample(&m.render(), "orca_pool_deleted_total", &["leftovers"]);
    assert_eq!(
        (failed(&metrics), removed(&metrics)),
        (Some(1.0), Some(0.0))
    );
    let n0 = name_of(&s, A);
    assert_eq!(cloud.calls(), [format!("lab/{n0}")]);
    assert_eq!(cloud.pieces(), [format!("disk {n0}-boot")]);
    assert_eq!(failed_clean_ups(&r.actions), 1, "{:?}", r.actions);
    assert!(cleaned(&r.actions).is_empty(), "{:?}", r.actions);
    assert_eq!(r.serving, 1, "the pool is served from the next offering");
    let (mut s, e) = entry_on_disk(dir.path(), s, &n0).await;
    let e = e.expect("the name is kept while its pieces stand");
    assert!(e.leftovers, "the mark is in the record file: {e:?}");
    assert_eq!(e.phase, Phase::Retired);

    // Past the retention, the name is not pruned while marked: the pass cleans up first.
    let retention = chrono::Duration::from_std(s.settings.retention).unwrap();
    let t1 = t0 + retention + chrono::Duration::seconds(1);
    let r = s.pass(&p, t1).await;
    metrics.observe(&r);
    assert_eq!(
        (failed(&metrics), removed(&metrics)),
        (Some(1.0), Some(1.0))
    );
    assert!(
        r.lines()
            .iter()
            .any(|l| l.contains(&format!("cleaned up after {n0}"))),
        "{:?}",
        r.lines()
    );
    assert_eq!(cloud.calls(), [format!("lab/{n0}"), format!("lab/{n0}")]);
    assert!(cloud.pieces().is_empty(), "{:?}", cloud.pieces());
    assert_eq!(cleaned(&r.actions), [(n0.clone(), true)], "{:?}", r.actions);
    assert_eq!(r.failures(), 0, "{:?}", r.actions);
    let (mut s, e) = entry_on_disk(dir.path(), s, &n0).await;
    assert!(!e.expect("pruned by a later pass, not this one").leftovers);

    // Cleaned up, it is pruned like any retired name, with no further call.
    let r = s
        .pass(&p, t1 + retention + chrono::Duration::seconds(1))
        .await;
    assert!(
        !s.record().unwrap().entries.contains_key(&n0),
        "{:?}",
        r.actions
    );
    assert_eq!(cloud.calls().len(), 2);
}

/// A create that made nothing (no stock before anything was made) costs no clean-up call.
#[tokio::test]
async fn a_no_stock_that_made_nothing_calls_no_delete_named() {
    let dir = tempfile::tempdir().unwrap();
    let (c, p) = cloud();
    c.set_stock("amd64-small", "zone-a", 0);
    let cloud = Leaves::new("nowhere", no_stock);
    let p = cloud.on(&p);
    let mut s = Scaler::new(settings(2, &[A, B]), store(dir.path()));
    let r = s.pass(&p, c.now()).await;
    assert!(r
        .actions
        .iter()
        .any(|a| matches!(a, Action::NoStock { offering, .. } if offering == A)));
    assert_eq!(r.serving, 2);
    assert!(cloud.calls().is_empty(), "{:?}", cloud.calls());
    let n0 = name_of(&s, A);
    assert!(!s.record().unwrap().entries[&n0].leftovers);
}

/// A quota refusal whose clean-up left a piece keeps its name (the next pass retries it); once the
/// name is no longer needed and given up, what it left is cleaned up by name.
#[tokio::test]
async fn a_refused_create_that_left_a_piece_is_cleaned_up_when_its_name_is_given_up() {
    let dir = tempfile::tempdir().unwrap();
    let (c, p) = cloud();
    let cloud = Leaves::new("zone-a", quota);
    let p = cloud.on(&p);
    let mut s = Scaler::new(settings(1, &[A]), store(dir.path()));
    let t0 = c.now();
    let r = s.pass(&p, t0).await;
    assert_eq!(r.failures(), 1, "{:?}", r.actions);
    let n0 = name_of(&s, A);
    assert_eq!(s.record().unwrap().entries[&n0].phase, Phase::Creating);
    assert!(cloud.calls().is_empty(), "the name is kept, not given up");
    s.settings.size = 0;
    let settle = chrono::Duration::from_std(s.settings.settle).unwrap();
    let r = s.pass(&p, t0 + settle + chrono::Duration::seconds(1)).await;
    assert!(
        r.actions
            .iter()
            .any(|a| matches!(a, Action::Retired { name, .. } if *name == n0)),
        "{:?}",
        r.actions
    );
    assert_eq!(cloud.calls(), [format!("lab/{n0}")]);
    assert_eq!(cleaned(&r.actions), [(n0.clone(), true)]);
    assert!(cloud.pieces().is_empty());
}

/// A create whose answer was lost may have made anything: once its name is given up (not needed,
/// never seen), what it made is removed by name, not forgotten.
#[tokio::test]
async fn a_recorded_create_given_up_unseen_is_cleaned_up_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let (c, p) = cloud();
    // The retry policy's 6 retries and the call all fail: the name stays recorded, unseen.
    c.inject(Operation::Create, FaultKind::Error(ErrorKind::Transient), 7);
    let cloud = Leaves::new("nowhere", no_stock);
    let p = cloud.on(&p);
    let mut s = Scaler::new(settings(1, &[A]), store(dir.path()));
    let t0 = c.now();
    s.pass(&p, t0).await;
    let n0 = name_of(&s, A);
    s.settings.size = 0;
    let settle = chrono::Duration::from_std(s.settings.settle).unwrap();
    let r = s.pass(&p, t0 + settle + chrono::Duration::seconds(1)).await;
    assert_eq!(cloud.calls(), [format!("lab/{n0}")], "{:?}", r.actions);
    assert_eq!(
        cleaned(&r.actions),
        [(n0.clone(), false)],
        "{:?}",
        r.actions
    );
    let e = &s.record().unwrap().entries[&n0];
    assert_eq!((e.phase, e.leftovers), (Phase::Retired, false));
}

/// A record written before the mark loads unmarked; a marked entry says so in the record.
#[test]
fn records_written_before_the_mark_load_unmarked() {
    let (c, _) = cloud();
    let mut e = Entry {
        name: "lab-1".into(),
        offering: A.parse().unwrap(),
        phase: Phase::Retired,
        id: None,
        intent_at: c.now(),
        created_at: None,
        unhealthy_since: None,
        changed_at: c.now(),
        note: "no stock".into(),
        leftovers: true,
    };
    let mut v = serde_json::to_value(&e).unwrap();
    assert_eq!(v["leftovers"], serde_json::Value::Bool(true));
    v.as_object_mut().unwrap().remove("leftovers");
    let old: Entry = serde_json::from_value(v).unwrap();
    assert!(!old.leftovers);
    e.leftovers = false;
    let v = serde_json::to_value(&e).unwrap();
    assert!(v.get("leftovers").is_none(), "written as before: {v}");
}

/// The mark is kept in PostgreSQL too: a replica that takes over cleans up what the one before
/// could not.
#[tokio::test]
async fn the_mark_is_kept_in_postgres_and_a_replica_taking_over_cleans_up() {
    let Some(db) = TestDb::create("the_mark_is_kept_in_postgres").await else {
        return;
    };
    let (c, p) = cloud();
    let cloud = Leaves::new("zone-a", no_stock);
    cloud.failing.store(1, Ordering::SeqCst);
    let p = cloud.on(&p);
    let key = orca_scaler::Key::new("fake", "s1", "lab");
    let pg = |name: &'static str| {
        let url = db.url.clone();
        async move { PgStore::connect(&url, name).await.unwrap() }
    };
    let mut s = Scaler::new(settings(1, &[A, B]), Box::new(pg("r1").await));
    let t0 = c.now();
    let r = s.pass(&p, t0).await;
    assert_eq!(failed_clean_ups(&r.actions), 1, "{:?}", r.actions);
    let n0 = name_of(&s, A);
    drop(s);
    let mut st = pg("r2").await;
    let e = st.load(&key).await.unwrap().unwrap().entries[&n0].clone();
    assert!(e.leftovers && e.phase == Phase::Retired, "{e:?}");
    let mut s = Scaler::new(settings(1, &[A, B]), Box::new(st));
    let mut r = s.pass(&p, t0).await;
    for _ in 0..50 {
        if r.role == orca_scaler::Role::Leader {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        r = s.pass(&p, t0).await;
    }
    assert_eq!(cleaned(&r.actions), [(n0.clone(), true)], "{:?}", r.actions);
    assert!(cloud.pieces().is_empty());
    let mut st = pg("r3").await;
    let e = st.load(&key).await.unwrap().unwrap().entries[&n0].clone();
    assert!(!e.leftovers, "{e:?}");
}

/// A cloud whose delete removes the machine but not a piece beside it (as Azure's delete can leave
/// a security group it could not remove), answering `Leftovers`; `delete_named` removes the piece.
#[derive(Debug, Clone, Default)]
struct DeleteLeaves {
    pieces: Arc<Mutex<BTreeSet<String>>>,
    named: Arc<Mutex<Vec<String>>>,
}

#[async_trait]
impl Layer for DeleteLeaves {
    async fn around(&self, call: Call<'_>, next: Next<'_>) -> orca::Result<Answer> {
        match call {
            Call::Delete { id } => {
                let id = id.to_string();
                next.run(call).await?;
                let piece = format!("security group {id}-nsg");
                self.pieces.lock().unwrap().insert(piece.clone());
                Err(Error::leftovers(
                    Error::transient("the security group is busy"),
                    vec![piece],
                ))
            }
            Call::DeleteNamed { pool, name } => {
                self.named.lock().unwrap().push(format!("{pool}/{name}"));
                self.pieces.lock().unwrap().clear();
                next.run(call).await
            }
            other => next.run(other).await,
        }
    }
}

/// A delete that removed the machine but left a piece (`Error::Leftovers`) marks the name: the
/// pass that finds the machine gone removes the piece by name before the name is forgotten.
#[tokio::test]
async fn a_delete_that_left_a_piece_is_cleaned_up_by_name_once_the_machine_is_gone() {
    let dir = tempfile::tempdir().unwrap();
    let (c, p) = cloud();
    let layer = DeleteLeaves::default();
    let p = Layered::new(p.clone(), layer.clone());
    let mut s = Scaler::new(settings(1, &[A]), store(dir.path()));
    s.pass(&p, c.now()).await;
    let n0 = name_of(&s, A);
    s.settings.size = 0;
    let r = s.pass(&p, c.now()).await;
    assert_eq!(layer.pieces.lock().unwrap().len(), 1, "{:?}", r.actions);
    let r = s.pass(&p, c.now()).await;
    let r2 = s.pass(&p, c.now()).await;
    assert_eq!(
        layer.named.lock().unwrap().clone(),
        [format!("lab/{n0}")],
        "{:?} {:?}",
        r.actions,
        r2.actions
    );
    assert!(layer.pieces.lock().unwrap().is_empty());
}

/// A delete whose outcome was never written (here the write of its failure, which named the piece
/// it left, fails; a crash or a lost lead before the outcome is the same): the next pass finds the
/// machine gone while its delete is recorded, and removes by name whatever the delete may have
/// left, as it does for a create given up unseen.
#[tokio::test]
async fn a_delete_whose_outcome_was_never_written_is_cleaned_up_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let (c, p) = cloud();
    let layer = DeleteLeaves::default();
    let p = Layered::new(p.clone(), layer.clone());
    let mut s = Scaler::new(
        settings(1, &[A]),
        Box::new(support::FailingStore {
            inner: FileStore::open(dir.path().join("rec.json")).unwrap(),
            kind: "failed",
            fail: 1,
        }),
    );
    s.pass(&p, c.now()).await;
    let n0 = name_of(&s, A);
    s.settings.size = 0;
    let r = s.pass(&p, c.now()).await;
    assert!(
        r.stopped.as_deref().is_some_and(|s| s.contains("injected")),
        "the delete's outcome is not written: {r:?}"
    );
    assert_eq!(layer.pieces.lock().unwrap().len(), 1, "{:?}", r.actions);
    let r = s.pass(&p, c.now()).await;
    let r2 = s.pass(&p, c.now()).await;
    assert_eq!(
        layer.named.lock().unwrap().clone(),
        [format!("lab/{n0}")],
        "{:?} {:?}",
        r.actions,
        r2.actions
    );
    assert!(layer.pieces.lock().unwrap().is_empty());
    let e = &s.record().unwrap().entries[&n0];
    assert_eq!((e.phase, e.leftovers), (Phase::Gone, false), "{e:?}");
}

/// Another writer's machine carrying a name this record deleted before, deleted on the operator's
/// word (`--unknown delete`) by a delete that left a piece: the record's entry of that name is
/// marked, and the piece is removed by name before the name is pruned.
#[tokio::test]
async fn a_delete_of_another_writers_machine_that_left_a_piece_is_cleaned_up_by_name() {
    let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (c, p) = cloud();
    let mut a = Scaler::new(settings(1, &[A]), store(a_dir.path()));
    assert_eq!(a.pass(&p, c.now()).await.serving, 1);
    let n0 = name_of(&a, A);
    a.settings.size = 0;
    assert_eq!(a.pass(&p, c.now()).await.serving, 0);
    let mut b = Scaler::new(settings(1, &[A]), store(b_dir.path()));
    assert_eq!(b.pass(&p, c.now()).await.serving, 1);
    assert_eq!(name_of(&b, A), n0, "the same name, another writer");
    drop(b);

    let layer = DeleteLeaves::default();
    let leaves = Layered::new(p.clone(), layer.clone());
    a.settings.unknown = orca_scaler::Unknown::Delete;
    let r = a.pass(&leaves, c.now()).await;
    assert_eq!(layer.pieces.lock().unwrap().len(), 1, "{:?}", r.actions);
    assert!(
        c.all_machines().iter().all(|m| m.name != n0),
        "{:?}",
        r.actions
    );
    a.settings.unknown = orca_scaler::Unknown::Ask;
    let r2 = a.pass(&leaves, c.now()).await;
    assert_eq!(
        layer.named.lock().unwrap().clone(),
        [format!("lab/{n0}")],
        "{:?} {:?}",
        r.actions,
        r2.actions
    );
    assert!(layer.pieces.lock().unwrap().is_empty());
}
