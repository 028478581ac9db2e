//! Nothing is lost or made twice when an answer is lost or the process crashes mid-pass: every name
//! and every delete is recorded before its call, and the next pass adopts or finishes it.

use crate::support;

use std::time::Duration;

use orca::layer::{Answer, Call, Layer, Layered, Next};
use orca::memory::{FaultKind, Operation};
use orca::ErrorKind;
use orca_scaler::{Action, Phase};
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

/// A create whose answer is lost (the machine made, the call failed) is adopted on the next
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

/// A create whose answer is lost, with the machine invisible to the listing: the retried create of the recorded name
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
    let hidden = Layered::new(Wrap::new(p.clone()).layered(), HideList);
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

/// Shows every listing empty: a listing that lags behind the cloud.
#[derive(Debug)]
struct HideList;

#[async_trait::async_trait]
impl Layer for HideList {
    async fn around(&self, call: Call<'_>, next: Next<'_>) -> orca::Result<Answer> {
        match call {
            Call::Machines { .. } => Ok(Answer::Machines(Vec::new())),
            other => next.run(other).await,
        }
    }
}

/// A crash during a pass (the scaler dropped mid-create, its store reopened) loses nothing:
/// every name was recorded before its call.
#[tokio::test]
async fn a_crash_mid_pass_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (cloud, p) = cloud();
    let mut w = Wrap::new(p.clone());
    w.hang_at = 2;
    let mut s = scaler(dir.path(), 3, &[A]);
    s.settings.parallel = 1;
    // The pass runs until its second create hangs (however long a loaded machine takes to open the
    // store, record the names and make the first), and is dropped there: the crash. The 30 s are a
    // guard only, against a pass that never reaches it.
    {
        let layered = w.layered();
        let hung = w.hung.clone();
        tokio::select! {
            r = s.pass(&layered, cloud.now()) => {
                panic!("the pass hangs on its second create: the crash; it ended: {:?}", r.actions)
            }
            _ = hung.notified() => {}
            _ = tokio::time::sleep(Duration::from_secs(30)) => {
                panic!("the pass never reached its second create")
            }
        }
    }
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
