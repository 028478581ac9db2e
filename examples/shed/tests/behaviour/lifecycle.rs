//! Statuses, reasons and the call-by-status matrix (the README's "Statuses and reasons" and "The call
//! matrix").

use std::time::Duration;

use orca::memory::{FaultKind, Operation};
use orca::ErrorKind;
use shed::backend::{
    Effect, CLIENT_LABEL, ENV_LABEL, ID_LABEL, NAME_LABEL, SCHEMA_LABEL, STATE_LABEL,
};
use shed::model::CreateStage;
use shed::probe::ProbeOutcome;
use shed::Status;

use crate::support::{Call, Env, TAG};

#[tokio::test]
async fn a_json_create_answers_starting_once_the_cloud_accepted_and_the_shed_then_runs() {
    let env = Env::new().await;
    env.probe
        .set_default(ProbeOutcome::Unreachable("booting".into()));
    let v = env.create("dev-1").await.unwrap();
    assert_eq!(v.status, Status::Starting);
    let rec = env.record("dev-1").unwrap();
    assert_eq!(
        rec.create,
        CreateStage::Made,
        "the answer waited for the cloud"
    );
    let vm = env.vm("dev-1").expect("the VM exists");
    assert_eq!(vm.labels[ENV_LABEL], "dev");
    assert_eq!(vm.labels[ID_LABEL], v.id);
    assert_eq!(vm.labels[NAME_LABEL], "dev-1");
    assert_eq!(vm.labels[CLIENT_LABEL], "local");
    assert_eq!(vm.labels[STATE_LABEL], "creating");
    assert_eq!(vm.labels[SCHEMA_LABEL], "1");
    assert_eq!(vm.name, format!("shed-dev-{}", v.id));
    assert_eq!(vm.max_run_duration, Some(Duration::from_secs(24 * 3600)));
    let extras = env.cloud.extras(&vm.id).unwrap();
    assert_eq!(extras.network_tags, vec![TAG.to_string()]);
    assert_eq!(extras.image.as_deref(), Some("img-1"));
    assert_eq!(extras.disk_gb, Some(50));

    env.until("unreachable", |e| {
        e.view("dev-1").unwrap().status_reason == "unreachable"
    })
    .await;
    env.probe.set_default(ProbeOutcome::Answered);
    env.advance(5).await;
    env.until_status("dev-1", Status::Running).await;
    assert_eq!(env.vm("dev-1").unwrap().labels[STATE_LABEL], "ready");
    assert_eq!(env.view("dev-1").unwrap().status_reason, "");
}

#[tokio::test]
async fn the_accept_wait_ends_after_15_s_and_a_late_quota_leaves_the_shed_in_error() {
    let env = Env::new().await;
    env.wrapped.hold(Call::CreateBefore);
    let b = env.backend.clone();
    let id = b.create(&env.admin(), Env::req("late")).await.unwrap();
    env.until("the insert is held", |e| {
        e.wrapped.entered(Call::CreateBefore) == 1
    })
    .await;
    // The reply's wait is polled here, so each assertion follows what it saw: its first poll sets the
    // 15 s deadline, and a poll after an advance has looked at the advanced clock.
    let mut waiting = std::pin::pin!(b.wait_accept(&id));
    assert!(
        futures::poll!(waiting.as_mut()).is_pending(),
        "the cloud has not accepted the VM"
    );
    env.advance(14).await;
    assert!(
        futures::poll!(waiting.as_mut()).is_pending(),
        "the reply waits up to 15 s: 14 s are not enough"
    );
    env.advance(2).await;
    let v = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(v.status, Status::Starting);
    env.cloud
        .inject(Operation::Create, FaultKind::Error(ErrorKind::Quota), 1);
    env.wrapped.release(Call::CreateBefore);
    env.until_status("late", Status::Error).await;
    assert_eq!(env.view("late").unwrap().status_reason, "quota");
    assert!(env.vms().is_empty());
}

#[tokio::test]
async fn a_late_capacity_refusal_leaves_the_shed_in_error_capacity() {
    let env = Env::new().await;
    env.wrapped.hold(Call::CreateBefore);
    let id = env
        .backend
        .create(&env.admin(), Env::req("cap"))
        .await
        .unwrap();
    env.until("held", |e| e.wrapped.entered(Call::CreateBefore) == 1)
        .await;
    env.backend.forget_waiter(&id);
    env.cloud.set_stock("amd64-small", "zone-a", 0);
    env.wrapped.release(Call::CreateBefore);
    env.until_status("cap", Status::Error).await;
    assert_eq!(env.view("cap").unwrap().status_reason, "capacity");
}

#[tokio::test]
async fn a_json_create_whose_client_left_during_the_accept_wait_ends_in_error_on_a_late_quota() {
    let env = Env::new().await;
    env.wrapped.hold(Call::CreateBefore);
    let id = env
        .backend
        .create(&env.admin(), Env::req("left"))
        .await
        .unwrap();
    env.until("the insert is held", |e| {
        e.wrapped.entered(Call::CreateBefore) == 1
    })
    .await;
    {
        // The request's future is dropped mid-wait, as when its client disconnects.
        let mut waiting = std::pin::pin!(env.backend.wait_accept(&id));
        assert!(futures::poll!(waiting.as_mut()).is_pending());
    }
    env.cloud
        .inject(Operation::Create, FaultKind::Error(ErrorKind::Quota), 1);
    env.wrapped.release(Call::CreateBefore);
    env.until_status("left", Status::Error).await;
    assert_eq!(env.view("left").unwrap().status_reason, "quota");
    assert!(env.vms().is_empty());
    assert!(env.backend.markers().is_empty(), "no hidden delete");
}

#[tokio::test]
async fn an_early_quota_refusal_is_a_503_and_leaves_no_shed() {
    let env = Env::new().await;
    env.cloud
        .inject(Operation::Create, FaultKind::Error(ErrorKind::Quota), 1);
    let e = env.create("q").await.unwrap_err();
    assert_eq!((e.status, e.code.as_str()), (503, "CLOUD_QUOTA_EXCEEDED"));
    assert!(env.view("q").is_none());
    assert!(env.backend.records().is_empty());
    assert!(env.vms().is_empty());
    let files = std::fs::read_dir(env.cfg.state_dir.join("sheds"))
        .unwrap()
        .count();
    assert_eq!(files, 0, "no record is left on disk");
    // The name is free again.
    env.running("q").await;
}

#[tokio::test]
async fn an_early_capacity_refusal_is_a_503_and_leaves_no_shed() {
    let env = Env::new().await;
    env.cloud.set_stock("amd64-small", "zone-a", 0);
    let e = env.create("c").await.unwrap_err();
    assert_eq!(
        (e.status, e.code.as_str()),
        (503, "ZONE_CAPACITY_UNAVAILABLE")
    );
    assert!(env.backend.records().is_empty());
    assert!(!e.message.contains("zone-a"), "{}", e.message);
}

#[tokio::test]
async fn another_create_failure_is_error_create_failed_with_the_detail_in_the_log() {
    let env = Env::new().await;
    env.cloud.inject(
        Operation::Create,
        FaultKind::Error(ErrorKind::PermissionDenied),
        1,
    );
    // A JSON create answers 201 with status starting; only an early quota or capacity refusal is
    // answered otherwise. The failure is seen by polling.
    let v = env.create("f").await.unwrap();
    assert_eq!((v.status, v.status_reason.as_str()), (Status::Starting, ""));
    let v = env.view("f").unwrap();
    assert_eq!(
        (v.status, v.status_reason.as_str()),
        (Status::Error, "create_failed")
    );
    assert!(
        env.log_has("create failed"),
        "{:?}",
        env.backend.log().lines()
    );
    assert!(env.log_has("injected PermissionDenied"));
}

#[tokio::test]
async fn an_agent_that_never_answers_fails_the_create_after_5_minutes_and_its_vm_is_destroyed() {
    let env = Env::new().await;
    env.probe
        .set_default(ProbeOutcome::Unreachable("connection refused".into()));
    env.create("slow").await.unwrap();
    assert!(env.vm("slow").is_some());
    for _ in 0..59 {
        env.advance(5).await;
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert_eq!(env.view("slow").unwrap().status, Status::Starting);
    env.advance(10).await;
    env.until_status("slow", Status::Error).await;
    assert_eq!(env.view("slow").unwrap().status_reason, "create_failed");
    env.until("the VM is destroyed", |e| e.vms().is_empty())
        .await;
    env.idle().await;
    assert!(env.record("slow").unwrap().vm_gone);
    // Only a delete leaves this state.
    let e = env
        .backend
        .start_shed(&env.admin(), "slow")
        .await
        .unwrap_err();
    assert_eq!((e.status, e.code.as_str()), (409, "SHED_FAILED"));
    assert!(e.message.contains("create_failed"), "{}", e.message);
    let e = env
        .backend
        .stop_shed(&env.admin(), "slow")
        .await
        .unwrap_err();
    assert_eq!(e.status, 409);
    env.backend.delete_shed(&env.admin(), "slow").await.unwrap();
    assert!(env.view("slow").is_none());
}

#[tokio::test]
async fn a_host_key_mismatch_or_incompatible_layout_fails_the_create() {
    let env = Env::new().await;
    env.probe.set_default(ProbeOutcome::HostKeyMismatch);
    let v = env.create("hk").await.unwrap();
    let _ = v;
    env.until_status("hk", Status::Error).await;
    assert_eq!(env.view("hk").unwrap().status_reason, "host_key");
    env.probe.set_default(ProbeOutcome::Incompatible(
        "agent protocol 3, server 4".into(),
    ));
    env.create("lay").await.unwrap();
    env.until_status("lay", Status::Error).await;
    assert_eq!(env.view("lay").unwrap().status_reason, "layout");
    env.until("both VMs destroyed", |e| e.vms().is_empty())
        .await;
}

#[tokio::test]
async fn starting_reasons_no_pin_unreachable_and_cloud_unreadable() {
    let env = Env::new().await;
    env.probe.set_default(ProbeOutcome::NoPin);
    env.create("p").await.unwrap();
    env.until("no_pin", |e| e.view("p").unwrap().status_reason == "no_pin")
        .await;
    env.probe
        .set_default(ProbeOutcome::Unreachable("timeout".into()));
    env.advance(5).await;
    env.until("unreachable", |e| {
        e.view("p").unwrap().status_reason == "unreachable"
    })
    .await;
    // The read of the VM fails (more failures than the driver retries): nothing changes but the
    // reason, and the next pass looks again.
    env.cloud.inject(
        Operation::List,
        FaultKind::Error(ErrorKind::PermissionDenied),
        1,
    );
    env.advance(5).await;
    env.until("cloud_unreadable", |e| {
        e.view("p").unwrap().status_reason == "cloud_unreadable"
    })
    .await;
    env.idle().await;
    assert_eq!(env.view("p").unwrap().status, Status::Starting);
    assert!(env.vm("p").is_some(), "nothing was changed in the cloud");
    env.probe.set_default(ProbeOutcome::Answered);
    env.pass().await;
    env.until_status("p", Status::Running).await;
}

#[tokio::test]
async fn the_start_matrix() {
    let env = Env::new().await;
    // running: 409
    env.running("a").await;
    let e = env.backend.start_shed(&env.admin(), "a").await.unwrap_err();
    assert_eq!(e.status, 409);
    // stopped: 200 starting
    env.backend.stop_shed(&env.admin(), "a").await.unwrap();
    env.until_status("a", Status::Stopped).await;
    let (v, eff) = env.backend.start_shed(&env.admin(), "a").await.unwrap();
    assert_eq!((v.status, eff), (Status::Starting, Effect::Changed));
    env.until_status("a", Status::Running).await;
    // starting: 200, no change
    env.probe.set_default(ProbeOutcome::Unreachable("x".into()));
    env.create("b").await.unwrap();
    let (v, eff) = env.backend.start_shed(&env.admin(), "b").await.unwrap();
    assert_eq!((v.status, eff), (Status::Starting, Effect::NoChange));
    env.probe.set_default(ProbeOutcome::Answered);
    env.advance(5).await;
    env.until_status("b", Status::Running).await;
    // stopping: 200, queued; the start runs once the stop is done.
    env.wrapped.hold(Call::Stop);
    env.backend.stop_shed(&env.admin(), "a").await.unwrap();
    env.until("stop held", |e| e.wrapped.entered(Call::Stop) == 1)
        .await;
    let (v, eff) = env.backend.start_shed(&env.admin(), "a").await.unwrap();
    assert_eq!((v.status, eff), (Status::Stopping, Effect::Queued));
    env.wrapped.release(Call::Stop);
    env.until_status("a", Status::Running).await;
    let vm = env.vm("a").unwrap();
    assert!(vm.stopped_at.is_some(), "it was stopped, then started");
    // error: 409 with the reason
    env.cloud
        .inject(Operation::Create, FaultKind::Error(ErrorKind::Other), 1);
    env.backend.delete_shed(&env.admin(), "b").await.unwrap();
    env.create("c").await.unwrap();
    env.until_status("c", Status::Error).await;
    let e = env.backend.start_shed(&env.admin(), "c").await.unwrap_err();
    assert_eq!(e.status, 409);
    assert!(e.message.contains("create_failed"), "{}", e.message);
}

#[tokio::test]
async fn the_stop_matrix() {
    let env = Env::new().await;
    // starting: 200, queued; the create's cloud operation ends, then the stop acts.
    env.wrapped.hold(Call::CreateBefore);
    let id = env
        .backend
        .create(&env.admin(), Env::req("a"))
        .await
        .unwrap();
    env.until("held", |e| e.wrapped.entered(Call::CreateBefore) == 1)
        .await;
    let (v, eff) = env.backend.stop_shed(&env.admin(), "a").await.unwrap();
    assert_eq!((v.status, eff), (Status::Starting, Effect::Queued));
    env.wrapped.release(Call::CreateBefore);
    env.backend.wait_accept(&id).await.unwrap();
    env.until_status("a", Status::Stopped).await;
    assert_eq!(env.vm("a").unwrap().status, orca::Status::Stopped);
    // stopped: 409
    let e = env.backend.stop_shed(&env.admin(), "a").await.unwrap_err();
    assert_eq!((e.status, e.code.as_str()), (409, "SHED_STOPPED"));
    // running: 200 stopping
    env.running("b").await;
    env.wrapped.hold(Call::Stop);
    let (v, eff) = env.backend.stop_shed(&env.admin(), "b").await.unwrap();
    assert_eq!((v.status, eff), (Status::Stopping, Effect::Changed));
    // stopping: 200, no change
    let (v, eff) = env.backend.stop_shed(&env.admin(), "b").await.unwrap();
    assert_eq!((v.status, eff), (Status::Stopping, Effect::NoChange));
    env.wrapped.release(Call::Stop);
    env.until_status("b", Status::Stopped).await;
    assert_eq!(env.view("b").unwrap().status_reason, "");
    // error: 409
    env.cloud
        .inject(Operation::Create, FaultKind::Error(ErrorKind::Other), 1);
    env.create("c").await.unwrap();
    let e = env.backend.stop_shed(&env.admin(), "c").await.unwrap_err();
    assert_eq!(e.status, 409);
}

#[tokio::test]
async fn delete_answers_in_every_state_and_hides_the_shed_at_once() {
    let env = Env::build(|c| c.limits.max_running = 8).await;
    env.running("running").await;
    env.running("stopped").await;
    env.backend
        .stop_shed(&env.admin(), "stopped")
        .await
        .unwrap();
    env.until_status("stopped", Status::Stopped).await;
    env.running("stopping").await;
    env.wrapped.hold(Call::Stop);
    env.backend
        .stop_shed(&env.admin(), "stopping")
        .await
        .unwrap();
    env.probe
        .set_default(ProbeOutcome::Unreachable("booting".into()));
    env.create("starting").await.unwrap();
    env.cloud
        .inject(Operation::Create, FaultKind::Error(ErrorKind::Other), 1);
    env.create("error").await.unwrap();
    env.until_status("error", Status::Error).await;
    for (name, status) in [
        ("running", Status::Running),
        ("stopped", Status::Stopped),
        ("stopping", Status::Stopping),
        ("starting", Status::Starting),
        ("error", Status::Error),
    ] {
        assert_eq!(env.view(name).unwrap().status, status, "{name}");
        env.backend.delete_shed(&env.admin(), name).await.unwrap();
        assert!(env.view(name).is_none(), "{name} is hidden at once");
        assert!(env
            .backend
            .list(&env.admin())
            .iter()
            .all(|v| v.name != name));
    }
    env.wrapped.release(Call::Stop);
    env.until("every VM destroyed", |e| e.vms().is_empty())
        .await;
    env.until("every marker gone", |e| e.backend.markers().is_empty())
        .await;
    let e = env
        .backend
        .delete_shed(&env.admin(), "running")
        .await
        .unwrap_err();
    assert_eq!((e.status, e.code.as_str()), (404, "NOT_FOUND"));
}

#[tokio::test]
async fn a_delete_during_the_insert_waits_for_the_vm_then_destroys_it() {
    let env = Env::new().await;
    env.wrapped.hold(Call::CreateBefore);
    let id = env
        .backend
        .create(&env.admin(), Env::req("race"))
        .await
        .unwrap();
    env.until("held", |e| e.wrapped.entered(Call::CreateBefore) == 1)
        .await;
    env.backend.delete_shed(&env.admin(), "race").await.unwrap();
    assert!(env.view("race").is_none());
    // Polled here: the wait has looked at the delete while the insert is held (the only cloud call
    // that could end it), and waits.
    let mut gone = std::pin::pin!(env.backend.wait_gone(&id));
    assert!(
        futures::poll!(gone.as_mut()).is_pending(),
        "the VM is not made yet"
    );
    assert_eq!(env.wrapped.entered(Call::CreateAfter), 0);
    assert!(env.vms().is_empty());
    env.wrapped.release(Call::CreateBefore);
    tokio::time::timeout(Duration::from_secs(5), gone)
        .await
        .unwrap()
        .unwrap();
    assert!(env.vms().is_empty(), "the VM was made, then destroyed");
    // A create of the same name right after never meets the old VM.
    env.running("race").await;
    assert_eq!(env.vms().len(), 1);
}

#[tokio::test]
async fn a_destroy_that_keeps_failing_ends_a_streamed_delete_with_an_error_and_is_retried() {
    let env = Env::new().await;
    let v = env.running("d").await;
    env.cloud.inject(
        Operation::Delete,
        FaultKind::Error(ErrorKind::PermissionDenied),
        1_000,
    );
    env.backend.delete_shed(&env.admin(), "d").await.unwrap();
    let e = env.backend.wait_gone(&v.id).await.unwrap_err();
    assert!(
        e.contains(
            "the delete is recorded but the VM could not be destroyed yet; the server keeps trying"
        ),
        "{e}"
    );
    assert!(env.view("d").is_none());
    assert_eq!(env.vms().len(), 1, "the VM still runs");
    assert_eq!(env.vms()[0].labels[STATE_LABEL], "deleting");
    env.pass().await;
    env.idle().await;
    assert_eq!(env.vms().len(), 1, "not retried before two minutes");
    env.cloud.clear_faults();
    env.advance(121).await;
    env.pass().await;
    env.until("destroyed by the pass", |e| e.vms().is_empty())
        .await;
    env.until("marker gone", |e| e.backend.markers().is_empty())
        .await;
}

#[tokio::test]
async fn stopped_reasons_of_a_start_quota_capacity_limit_firewall_layout() {
    let env = Env::build(|c| c.limits.max_running = 1).await;
    env.running("a").await;
    env.backend.stop_shed(&env.admin(), "a").await.unwrap();
    env.until_status("a", Status::Stopped).await;

    env.cloud
        .inject(Operation::Change, FaultKind::Error(ErrorKind::Quota), 1);
    env.backend.start_shed(&env.admin(), "a").await.unwrap();
    env.until_status("a", Status::Stopped).await;
    assert_eq!(env.view("a").unwrap().status_reason, "quota");

    env.cloud
        .inject(Operation::Change, FaultKind::Error(ErrorKind::NoStock), 1);
    env.backend.start_shed(&env.admin(), "a").await.unwrap();
    env.until_status("a", Status::Stopped).await;
    assert_eq!(env.view("a").unwrap().status_reason, "capacity");

    env.probe.set(
        &env.record("a").unwrap().id,
        ProbeOutcome::Incompatible("guest layout 2".into()),
    );
    env.backend.start_shed(&env.admin(), "a").await.unwrap();
    env.until("layout", |e| e.view("a").unwrap().status_reason == "layout")
        .await;
    assert_eq!(env.view("a").unwrap().status, Status::Stopped);
    env.until("its VM is stopped", |e| {
        e.vm("a").unwrap().status == orca::Status::Stopped
    })
    .await;
    env.probe
        .set(&env.record("a").unwrap().id, ProbeOutcome::Answered);
}

#[tokio::test]
async fn a_start_queued_behind_a_stop_meets_the_limit_and_is_stopped_limit() {
    let env = Env::build(|c| c.limits.max_running = 2).await;
    env.running("x").await;
    env.running("c").await;
    env.cloud.inject(
        Operation::Delete,
        FaultKind::Error(ErrorKind::PermissionDenied),
        1_000,
    );
    env.backend.delete_shed(&env.admin(), "x").await.unwrap();
    env.idle().await;
    env.running("y").await;
    env.wrapped.hold(Call::Stop);
    env.backend.stop_shed(&env.admin(), "c").await.unwrap();
    let (_, eff) = env.backend.start_shed(&env.admin(), "c").await.unwrap();
    assert_eq!(eff, Effect::Queued);
    // Two minutes after its delete, x's VM counts against max_running.
    env.advance(121).await;
    env.wrapped.release(Call::Stop);
    env.until_status("c", Status::Stopped).await;
    assert_eq!(env.view("c").unwrap().status_reason, "limit");
    assert!(
        env.log_has("max_running"),
        "{:?}",
        env.backend.log().lines()
    );
}

#[tokio::test]
async fn a_start_whose_check_fails_just_before_the_cloud_call_is_stopped_firewall() {
    let env = Env::new().await;
    env.running("c").await;
    env.wrapped.hold(Call::Stop);
    env.backend.stop_shed(&env.admin(), "c").await.unwrap();
    let (_, eff) = env.backend.start_shed(&env.admin(), "c").await.unwrap();
    assert_eq!(eff, Effect::Queued);
    env.cloud.remove_firewall_rule(crate::support::RULE);
    env.wrapped.release(Call::Stop);
    env.until_status("c", Status::Stopped).await;
    assert_eq!(env.view("c").unwrap().status_reason, "firewall");
    assert_eq!(
        env.vm("c").unwrap().status,
        orca::Status::Stopped,
        "no start was sent"
    );
}

#[tokio::test]
async fn exec_and_connect_on_a_shed_not_running_are_409_shed_not_running() {
    let env = Env::new().await;
    env.probe.set_default(ProbeOutcome::Unreachable("x".into()));
    env.create("a").await.unwrap();
    for what in ["exec", "connect"] {
        let e = env.backend.exec_or_connect(&env.admin(), "a", what);
        assert_eq!((e.status, e.code.as_str()), (409, "SHED_NOT_RUNNING"));
    }
    env.probe.set_default(ProbeOutcome::Answered);
    env.advance(5).await;
    env.until_status("a", Status::Running).await;
    let e = env.backend.exec_or_connect(&env.admin(), "a", "exec");
    assert_eq!((e.status, e.code.as_str()), (501, "FEATURE_UNSUPPORTED"));
}

#[tokio::test]
async fn the_run_limit_is_the_larger_of_max_run_duration_and_the_clients_max_age() {
    let env = Env::new().await;
    let mut c = env.service("ci");
    c.max_age = Some(Duration::from_secs(48 * 3600));
    env.create_as(&c, Env::req("long")).await.unwrap();
    assert_eq!(
        env.vm("long").unwrap().max_run_duration,
        Some(Duration::from_secs(48 * 3600))
    );
    c.max_age = Some(Duration::from_secs(3600));
    env.create_as(&c, Env::req("short")).await.unwrap();
    assert_eq!(
        env.vm("short").unwrap().max_run_duration,
        Some(Duration::from_secs(24 * 3600))
    );
    assert_eq!(env.view("long").unwrap().max_run_secs, 48 * 3600);
}

#[tokio::test]
async fn a_quota_refusal_after_a_lost_answer_leaves_no_shed_and_no_vm() {
    // Found by the soak: the first insert made the VM but its answer was lost; the retry met the
    // quota. The 503 must not leave that VM behind.
    let env = Env::new().await;
    env.cloud
        .inject(Operation::Create, FaultKind::LoseAnswer, 1);
    env.cloud
        .inject(Operation::Create, FaultKind::Error(ErrorKind::Quota), 1);
    let e = env.create("lost").await.unwrap_err();
    assert_eq!(e.code, "CLOUD_QUOTA_EXCEEDED");
    assert!(env.view("lost").is_none());
    env.idle().await;
    assert!(
        env.vms().is_empty(),
        "the VM of the lost answer is destroyed: {:?}",
        env.vms()
    );
    assert!(env.backend.markers().is_empty());
}

#[tokio::test]
async fn a_stop_queued_while_the_probe_runs_is_acted_on_when_the_agent_answers() {
    let env = Env::new().await;
    // A create: the stop arrives while the probe that will answer is running.
    env.probe.hold();
    env.create("a").await.unwrap();
    env.until("the probe is held", |e| e.probe.entered() == 1)
        .await;
    let (v, eff) = env.backend.stop_shed(&env.admin(), "a").await.unwrap();
    assert_eq!((v.status, eff), (Status::Starting, Effect::Queued));
    env.probe.release();
    env.until_status("a", Status::Stopped).await;
    assert_eq!(env.vm("a").unwrap().status, orca::Status::Stopped);
    assert_eq!(env.record("a").unwrap().queued, None);

    // A start queued behind a stop, in the same job: the stop queued during its probe is acted on too.
    env.wrapped.hold(Call::Stop);
    env.backend.start_shed(&env.admin(), "a").await.unwrap();
    env.until_status("a", Status::Running).await;
    env.backend.stop_shed(&env.admin(), "a").await.unwrap();
    env.until("the stop is held", |e| e.wrapped.entered(Call::Stop) == 2)
        .await;
    let (_, eff) = env.backend.start_shed(&env.admin(), "a").await.unwrap();
    assert_eq!(eff, Effect::Queued);
    let probes = env.probe.entered();
    env.probe.hold();
    env.wrapped.release(Call::Stop);
    env.until("the start's probe is held", |e| e.probe.entered() > probes)
        .await;
    let (v, eff) = env.backend.stop_shed(&env.admin(), "a").await.unwrap();
    assert_eq!((v.status, eff), (Status::Starting, Effect::Queued));
    env.probe.release();
    env.until_status("a", Status::Stopped).await;
    assert_eq!(env.vm("a").unwrap().status, orca::Status::Stopped);
}

#[tokio::test]
async fn a_streamed_delete_of_a_failed_create_whose_vm_is_being_destroyed_ends_once_it_is_gone() {
    let env = Env::new().await;
    env.wrapped.hold(Call::Delete);
    env.probe.set_default(ProbeOutcome::HostKeyMismatch);
    let v = env.create("hk").await.unwrap();
    env.until_status("hk", Status::Error).await;
    env.until("the failed create's destroy is held", |e| {
        e.wrapped.entered(Call::Delete) == 1
    })
    .await;
    env.backend.delete_shed(&env.admin(), "hk").await.unwrap();
    let b = env.backend.clone();
    let id = v.id.clone();
    let gone = tokio::spawn(async move { b.wait_gone(&id).await });
    env.wrapped.release(Call::Delete);
    let r = tokio::time::timeout(Duration::from_secs(5), gone)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(r, Ok(()), "the VM is gone: the delete is complete");
    assert!(env.vms().is_empty());
    assert!(env.backend.markers().is_empty());
}

#[tokio::test]
async fn a_json_create_deleted_during_its_accept_wait_still_answers_starting() {
    let env = Env::new().await;
    env.wrapped.hold(Call::CreateBefore);
    let b = env.backend.clone();
    let id = b.create(&env.admin(), Env::req("gone")).await.unwrap();
    env.until("the insert is held", |e| {
        e.wrapped.entered(Call::CreateBefore) == 1
    })
    .await;
    let mut waiting = std::pin::pin!(b.wait_accept(&id));
    assert!(futures::poll!(waiting.as_mut()).is_pending());
    env.backend.delete_shed(&env.admin(), "gone").await.unwrap();
    let v = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .unwrap()
        .expect("201 with status starting");
    assert_eq!((v.id.as_str(), v.status), (id.as_str(), Status::Starting));
    assert!(env.view("gone").is_none(), "a poll finds it deleted");
    env.wrapped.release(Call::CreateBefore);
    env.until("the VM is destroyed", |e| {
        e.backend.markers().is_empty() && e.vms().is_empty()
    })
    .await;
}

#[tokio::test]
async fn a_stop_is_written_to_the_server_log_when_accepted_and_when_done() {
    let env = Env::new().await;
    let id = env.running("a").await.id;
    let (_, effect) = env.backend.stop_shed(&env.admin(), "a").await.unwrap();
    assert_eq!(effect, Effect::Changed);
    env.until_status("a", Status::Stopped).await;
    env.idle().await;
    assert!(
        env.log_has(&format!(
            "remote: shed a ({id}) stop accepted for client local (changed)"
        )),
        "{:#?}",
        env.backend.log().lines()
    );
    assert!(
        env.log_has(&format!("remote: shed a ({id}) stopped: its VM is off")),
        "{:#?}",
        env.backend.log().lines()
    );
}
