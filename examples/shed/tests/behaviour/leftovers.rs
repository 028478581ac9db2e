//! What a create that failed or was refused may have left beside its VM (the pieces a create makes
//! before it: on Compute Engine the boot disk), removed by name when no VM of the shed shows, and
//! the removal retried by the pass when it fails.
//!
//! The in-memory cloud's create leaves no such pieces, and the Compute Engine driver's own removal
//! is not what these tests check: they check that shed asks for it (`delete_named`, as orca's
//! recording layer saw it), when, and what it does when it fails.

use std::sync::atomic::Ordering;

use orca::layer::Op;
use orca::memory::{FaultKind, Operation};
use orca::{ErrorKind, MachineSpec, Provider};
use shed::backend::ID_LABEL;
use shed::Status;

use crate::support::{Call, Env, ENV};

/// The recorder's subject of a removal by name of shed `name`'s VM.
fn named(env: &Env, name: &str) -> String {
    format!("{ENV}/{}", env.record(name).unwrap().vm_name)
}

#[tokio::test]
async fn a_failed_create_without_a_vm_has_what_it_left_removed_by_name() {
    let env = Env::new().await;
    // Not a clear refusal: the cloud may have made the pieces before the VM.
    env.cloud
        .inject(Operation::Create, FaultKind::Error(ErrorKind::Other), 1);
    env.create("bits").await.unwrap();
    env.until_status("bits", Status::Error).await;
    env.until("the removal by name", |e| e.record("bits").unwrap().vm_gone)
        .await;
    env.idle().await;
    assert_eq!(
        env.recorder.subjects(Op::DeleteNamed),
        [named(&env, "bits")],
        "{:?}",
        env.recorder.calls()
    );
    assert!(env.vms().is_empty());
}

#[tokio::test]
async fn a_failed_removal_by_name_keeps_the_shed_to_be_retried_by_the_pass() {
    let env = Env::new().await;
    env.wrapped.fail_delete_named.store(1, Ordering::SeqCst);
    env.cloud
        .inject(Operation::Create, FaultKind::Error(ErrorKind::Other), 1);
    env.create("stuck").await.unwrap();
    env.until_status("stuck", Status::Error).await;
    env.until("a removal by name", |e| {
        e.recorder.failed(Op::DeleteNamed) == 1
    })
    .await;
    env.idle().await;
    assert!(
        !env.record("stuck").unwrap().vm_gone,
        "what the create left may still stand"
    );
    assert!(
        env.log_has("could not be removed"),
        "{:?}",
        env.backend.log().lines()
    );
    // The pass tries again, and then the shed has nothing left in the cloud.
    env.pass().await;
    env.until("the removal retried", |e| {
        e.record("stuck").unwrap().vm_gone
    })
    .await;
    assert_eq!(
        env.recorder.subjects(Op::DeleteNamed),
        [named(&env, "stuck"), named(&env, "stuck")]
    );
    // Then nothing more is asked.
    env.idle().await;
    env.pass().await;
    env.idle().await;
    assert_eq!(env.recorder.count(Op::DeleteNamed), 2);
}

#[tokio::test]
async fn an_early_refusal_removes_what_its_create_left_before_the_marker_goes() {
    let env = Env::new().await;
    env.cloud.set_stock("amd64-small", "zone-a", 0);
    env.wrapped.fail_delete_named.store(1, Ordering::SeqCst);
    let e = env.create("dry").await.unwrap_err();
    assert_eq!(e.code, "ZONE_CAPACITY_UNAVAILABLE");
    env.until("a removal by name", |e| {
        e.recorder.failed(Op::DeleteNamed) == 1
    })
    .await;
    env.idle().await;
    let markers = env.backend.markers();
    assert_eq!(markers.len(), 1, "the delete is kept: {markers:?}");
    let subject = format!("{ENV}/{}", markers[0].vm_name);
    assert!(markers[0].last_error.is_some(), "{markers:?}");
    // The pass tries again; once it is removed the marker goes.
    env.pass().await;
    env.until("marker gone", |e| e.backend.markers().is_empty())
        .await;
    assert_eq!(
        env.recorder.subjects(Op::DeleteNamed),
        [subject.clone(), subject]
    );
    assert!(env.vms().is_empty());
}

#[tokio::test]
async fn a_vm_of_that_name_another_shed_labelled_is_never_removed_by_name() {
    let env = Env::new().await;
    env.wrapped.hold(Call::CreateBefore);
    let id = env
        .backend
        .create(&env.admin(), Env::req("theirs"))
        .await
        .unwrap();
    env.until("held", |e| e.wrapped.entered(Call::CreateBefore) == 1)
        .await;
    // A VM of the shed's VM name in the environment, labelled as another shed's.
    let vm_name = env.record("theirs").unwrap().vm_name;
    let other = env
        .cloud
        .provider(shed::OWNER)
        .unwrap()
        .create(
            &MachineSpec::new(&vm_name, "amd64-small", "zone-a", ENV)
                .with_label(ID_LABEL, "someone-else"),
        )
        .await
        .unwrap()
        .machine()
        .unwrap();
    env.cloud
        .inject(Operation::Create, FaultKind::Error(ErrorKind::Other), 1);
    env.wrapped.release(Call::CreateBefore);
    let _ = env.backend.wait_accept(&id).await;
    env.until_status("theirs", Status::Error).await;
    env.idle().await;
    assert_eq!(env.recorder.count(Op::DeleteNamed), 0);
    assert_eq!(env.recorder.count(Op::Delete), 0);
    assert!(
        env.vms().iter().any(|m| m.id == other.id),
        "{:?}",
        env.vms()
    );
}

/// An acknowledged delete whose delete removed the VM but left a piece beside it: the pass that
/// finds the VM gone removes what is left by name before the marker goes (a second delete by id
/// cannot reach it once the VM is gone).
#[tokio::test]
async fn a_delete_that_left_a_piece_removes_it_by_name_before_the_marker_goes() {
    let env = Env::new().await;
    env.running("gone").await;
    let subject = named(&env, "gone");
    env.wrapped.delete_leaves.store(1, Ordering::SeqCst);
    env.backend.delete_shed(&env.admin(), "gone").await.unwrap();
    env.until("the VM destroyed", |e| e.vms().is_empty()).await;
    env.idle().await;
    env.pass().await;
    env.until("marker gone", |e| e.backend.markers().is_empty())
        .await;
    assert_eq!(
        env.recorder.subjects(Op::DeleteNamed),
        [subject],
        "{:?}",
        env.recorder.calls()
    );
}

/// The same for the VM of a failed create: it is not taken for gone until what its delete left
/// is removed by name.
#[tokio::test]
async fn a_failed_creates_delete_that_left_a_piece_removes_it_by_name() {
    let env = Env::new().await;
    env.probe
        .set_default(shed::probe::ProbeOutcome::HostKeyMismatch);
    env.wrapped.delete_leaves.store(1, Ordering::SeqCst);
    env.create("hk").await.unwrap();
    env.until_status("hk", Status::Error).await;
    let subject = named(&env, "hk");
    env.until("the VM destroyed", |e| e.vms().is_empty()).await;
    env.idle().await;
    env.pass().await;
    env.until("vm_gone", |e| e.record("hk").unwrap().vm_gone)
        .await;
    assert_eq!(
        env.recorder.subjects(Op::DeleteNamed),
        [subject],
        "{:?}",
        env.recorder.calls()
    );
}
