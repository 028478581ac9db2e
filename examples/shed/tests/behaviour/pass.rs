//! The periodic pass: each thing it corrects (the README's "The periodic pass").

use std::time::Duration;

use orca::memory::{FaultKind, Operation};
use orca::{ErrorKind, MachineSpec, Provider};
use shed::backend::{
    CLIENT_LABEL, ENV_LABEL, ID_LABEL, NAME_LABEL, SCHEMA_LABEL, SIZE_LABEL, STATE_LABEL,
};
use shed::probe::ProbeOutcome;
use shed::Status;

use crate::support::{Call, Env};

/// A VM of this environment made outside the server (as another server, or one that died, made it).
pub async fn stray_vm(env: &Env, id: &str, state: &str, schema: &str) -> orca::Machine {
    let p = env.cloud.provider(shed::OWNER).unwrap();
    let spec = MachineSpec::new(format!("shed-dev-{id}"), "amd64-small", "zone-a", "dev")
        .with_labels([
            (ENV_LABEL, "dev"),
            (ID_LABEL, id),
            (NAME_LABEL, id),
            (SIZE_LABEL, "standard"),
            (CLIENT_LABEL, "local"),
            (STATE_LABEL, state),
            (SCHEMA_LABEL, schema),
        ]);
    p.create(&spec).await.unwrap().machine().unwrap()
}

#[tokio::test]
async fn a_running_shed_whose_vm_was_stopped_outside_is_stopped_external() {
    let env = Env::new().await;
    env.running("a").await;
    let vm = env.vm("a").unwrap();
    env.advance(3600).await;
    env.cloud.operator_stop(&vm.id);
    assert_eq!(
        env.view("a").unwrap().status,
        Status::Running,
        "until the next pass"
    );
    env.pass().await;
    let v = env.view("a").unwrap();
    assert_eq!(
        (v.status, v.status_reason.as_str()),
        (Status::Stopped, "external")
    );
    // It comes back with a start.
    env.backend.start_shed(&env.admin(), "a").await.unwrap();
    env.until_status("a", Status::Running).await;
}

#[tokio::test]
async fn a_running_shed_stopped_by_its_run_limit_is_stopped_run_limit() {
    let env = Env::build(|c| c.max_run_duration = Duration::from_secs(600)).await;
    env.running("a").await;
    // The cloud stops the VM at its run limit; the server notices at its next pass, up to a minute
    // later, and lists it running until then.
    env.advance(600 + 63).await;
    assert_eq!(env.vm("a").unwrap().status, orca::Status::Stopped);
    assert_eq!(env.view("a").unwrap().status, Status::Running);
    env.pass().await;
    let v = env.view("a").unwrap();
    assert_eq!(
        (v.status, v.status_reason.as_str()),
        (Status::Stopped, "run_limit")
    );
    // A start gives the VM a new limit counted from that start.
    env.backend.start_shed(&env.admin(), "a").await.unwrap();
    env.until_status("a", Status::Running).await;
    let vm = env.vm("a").unwrap();
    assert!(vm.run_limit_at().unwrap() > env.cloud.now());
}

#[tokio::test]
async fn stopped_more_than_two_minutes_from_the_run_limit_is_external() {
    let env = Env::build(|c| c.max_run_duration = Duration::from_secs(600)).await;
    env.running("a").await;
    let vm = env.vm("a").unwrap();
    env.advance(600 - 125).await;
    env.cloud.operator_stop(&vm.id);
    env.pass().await;
    assert_eq!(env.view("a").unwrap().status_reason, "external");
    env.running("b").await;
    let vm = env.vm("b").unwrap();
    env.advance(600 - 110).await;
    env.cloud.operator_stop(&vm.id);
    env.pass().await;
    assert_eq!(
        env.view("b").unwrap().status_reason,
        "run_limit",
        "stopped within two minutes of its run limit"
    );
}

#[tokio::test]
async fn a_vm_on_its_way_down_is_recorded_stopping_first() {
    let env = Env::new().await;
    env.running("a").await;
    let vm = env.vm("a").unwrap();
    env.wrapped.report_stopping(&vm.id, true);
    env.pass().await;
    assert_eq!(env.view("a").unwrap().status, Status::Stopping);
    env.wrapped.report_stopping(&vm.id, false);
    env.cloud.operator_stop(&vm.id);
    env.pass().await;
    let v = env.view("a").unwrap();
    assert_eq!(
        (v.status, v.status_reason.as_str()),
        (Status::Stopped, "external")
    );
}

#[tokio::test]
async fn a_stopped_shed_whose_vm_runs_is_recorded_starting_and_probed_never_stopped() {
    let env = Env::new().await;
    env.running("a").await;
    env.backend.stop_shed(&env.admin(), "a").await.unwrap();
    env.until_status("a", Status::Stopped).await;
    let vm = env.vm("a").unwrap();
    env.probe
        .set_default(ProbeOutcome::Unreachable("booting".into()));
    env.cloud.operator_start(&vm.id);
    env.pass().await;
    assert_eq!(env.view("a").unwrap().status, Status::Starting);
    for _ in 0..100 {
        env.advance(5).await;
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(
        env.view("a").unwrap().status,
        Status::Starting,
        "it keeps probing"
    );
    assert_eq!(
        env.vm("a").unwrap().status,
        orca::Status::Running,
        "it never stops the VM"
    );
    env.probe.set_default(ProbeOutcome::Answered);
    env.advance(5).await;
    env.until_status("a", Status::Running).await;
}

#[tokio::test]
async fn a_shed_whose_vm_no_longer_exists_is_removed_after_a_read_confirms_it() {
    let env = Env::new().await;
    env.running("a").await;
    env.running("b").await;
    env.backend.stop_shed(&env.admin(), "b").await.unwrap();
    env.until_status("b", Status::Stopped).await;
    // A listing that does not show a VM is not enough: the read of that one VM must confirm.
    let a = env.vm("a").unwrap();
    env.wrapped.hide(&a.id);
    env.pass().await;
    assert!(
        env.view("a").is_some(),
        "the VM is still there when read on its own"
    );
    env.cloud.operator_delete(&a.id);
    env.cloud.operator_delete(&env.vm("b").unwrap().id);
    env.pass().await;
    assert!(env.view("a").is_none());
    assert!(env.view("b").is_none());
    let e = env
        .backend
        .delete_shed(&env.admin(), "a")
        .await
        .unwrap_err();
    assert_eq!(e.status, 404, "delete then answers not found");
    assert!(env.log_has("its VM no longer exists"));
}

#[tokio::test]
async fn a_shed_left_stopping_by_a_failed_stop_is_stopped_again() {
    let env = Env::new().await;
    env.running("a").await;
    env.cloud
        .inject(Operation::Change, FaultKind::Error(ErrorKind::Other), 1);
    env.backend.stop_shed(&env.admin(), "a").await.unwrap();
    env.idle().await;
    assert_eq!(env.view("a").unwrap().status, Status::Stopping);
    assert_eq!(env.vm("a").unwrap().status, orca::Status::Running);
    env.pass().await;
    env.until_status("a", Status::Stopped).await;
    assert_eq!(env.vm("a").unwrap().status, orca::Status::Stopped);
}

#[tokio::test]
async fn a_failed_creates_vm_is_destroyed_retrying_until_gone_and_the_shed_stays_in_error() {
    let env = Env::new().await;
    env.probe.set_default(ProbeOutcome::HostKeyMismatch);
    env.cloud.inject(
        Operation::Delete,
        FaultKind::Error(ErrorKind::PermissionDenied),
        1_000,
    );
    env.create("a").await.unwrap();
    env.until_status("a", Status::Error).await;
    env.idle().await;
    assert_eq!(env.vms().len(), 1, "the first destroy failed");
    env.pass().await;
    env.idle().await;
    assert_eq!(env.vms().len(), 1, "and the pass's too");
    env.cloud.clear_faults();
    env.pass().await;
    env.until("destroyed", |e| e.vms().is_empty()).await;
    env.idle().await;
    let v = env.view("a").unwrap();
    assert_eq!(
        (v.status, v.status_reason.as_str()),
        (Status::Error, "host_key")
    );
    env.pass().await;
    assert!(
        env.view("a").is_some(),
        "the shed stays in error until it is deleted"
    );
}

#[tokio::test]
async fn a_vm_still_creating_15_minutes_after_it_was_made_with_no_record_is_destroyed() {
    let env = Env::new().await;
    let old = stray_vm(&env, "aaaaaaaaa1", "creating", "1").await;
    env.advance(14 * 60).await;
    let young = stray_vm(&env, "aaaaaaaaa2", "creating", "1").await;
    env.pass().await;
    assert_eq!(env.vms().len(), 2, "both are younger than 15 minutes");
    env.advance(61).await;
    env.pass().await;
    let ids: Vec<String> = env.vms().into_iter().map(|m| m.id).collect();
    assert_eq!(
        ids,
        vec![young.id.clone()],
        "the old one is destroyed, the young one left alone"
    );
    assert!(!ids.contains(&old.id));
    assert!(env.log_has("a create nobody will finish"));
    assert!(env.backend.records().is_empty(), "nothing was adopted");
}

#[tokio::test]
async fn vms_the_pass_does_not_know_are_left_alone() {
    let env = Env::new().await;
    let ready = stray_vm(&env, "bbbbbbbbb1", "ready", "1").await;
    let foreign = stray_vm(&env, "bbbbbbbbb2", "creating", "2").await;
    // Another environment's VM (another pool) and a machine with no shed labels.
    let p = env.cloud.provider(shed::OWNER).unwrap();
    let other = p
        .create(
            &MachineSpec::new("shed-prod-x", "amd64-small", "zone-a", "prod").with_labels([
                (ENV_LABEL, "prod"),
                (ID_LABEL, "ccccccccc1"),
                (STATE_LABEL, "creating"),
                (SCHEMA_LABEL, "1"),
            ]),
        )
        .await
        .unwrap()
        .machine()
        .unwrap();
    let plain = p
        .create(&MachineSpec::new("plain", "amd64-small", "zone-a", "dev"))
        .await
        .unwrap()
        .machine()
        .unwrap();
    env.advance(3600).await;
    env.pass().await;
    env.idle().await;
    let mut ids: Vec<String> = env.vms().into_iter().map(|m| m.id).collect();
    ids.sort();
    let mut want = vec![ready.id, foreign.id, other.id, plain.id];
    want.sort();
    assert_eq!(ids, want);
    assert!(
        env.backend.records().is_empty(),
        "a finished VM with no record is not adopted by a pass"
    );
}

#[tokio::test]
async fn every_pass_runs_the_firewall_check() {
    let env = Env::new().await;
    let before = env.backend.firewall_last().unwrap().at;
    env.advance(30).await;
    env.pass().await;
    let after = env.backend.firewall_last().unwrap();
    assert!(after.at > before && after.passed);
    env.cloud.remove_firewall_rule(crate::support::RULE);
    env.pass().await;
    assert!(!env.backend.firewall_last().unwrap().passed);
}

#[tokio::test]
async fn the_pass_runs_every_interval_on_the_clock() {
    let dir = std::sync::Arc::new(tempfile::tempdir().unwrap());
    let cfg = crate::support::test_config("dev", dir.path().join("remote"));
    let cloud = orca::memory::MemoryCloud::new();
    cloud.put_firewall_rule(crate::support::good_rule());
    let env = Env::on(
        cloud,
        cfg,
        dir,
        shed::Timings::standard(Duration::from_secs(60)),
    )
    .await;
    env.running("a").await;
    let vm = env.vm("a").unwrap();
    env.cloud.operator_stop(&vm.id);
    let lists = env.wrapped.lists.load(std::sync::atomic::Ordering::SeqCst);
    env.advance(30).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        env.view("a").unwrap().status,
        Status::Running,
        "no pass within the minute"
    );
    env.advance(31).await;
    env.until_status("a", Status::Stopped).await;
    assert!(env.wrapped.lists.load(std::sync::atomic::Ordering::SeqCst) > lists);
}

#[tokio::test]
async fn a_failed_listing_changes_nothing() {
    let env = Env::new().await;
    env.running("a").await;
    let vm = env.vm("a").unwrap();
    env.cloud.operator_delete(&vm.id);
    env.cloud.inject(
        Operation::List,
        FaultKind::Error(ErrorKind::PermissionDenied),
        1,
    );
    env.pass().await;
    assert!(env.view("a").is_some(), "a failed read removes nothing");
    assert!(env.log_has("could not be listed"));
    env.pass().await;
    assert!(env.view("a").is_none());
    let _ = Call::Stop;
}

#[tokio::test]
async fn labels_of_another_shed_version_make_a_shed_cloud_unreadable_and_its_delete_an_error_that_keeps_the_vm(
) {
    let env = Env::build(|c| c.limits.max_running = 4).await;
    env.running("a").await;
    let vm = env.vm("a").unwrap();
    env.cloud.operator_label(&vm.id, SCHEMA_LABEL, Some("2"));
    env.pass().await;
    assert_eq!(
        env.view("a").unwrap().status,
        Status::Running,
        "nothing is changed"
    );
    let e = env
        .backend
        .delete_shed(&env.admin(), "a")
        .await
        .unwrap_err();
    assert_eq!((e.status, e.code.as_str()), (502, "CLOUD_UNREADABLE"));
    assert!(env.view("a").is_none(), "the shed leaves the list");
    env.idle().await;
    env.advance(300).await;
    env.pass().await;
    env.idle().await;
    assert_eq!(
        env.vms().len(),
        1,
        "the VM keeps running while its labels are another version's"
    );
    // Readable again: this server destroys it.
    env.cloud.operator_label(&vm.id, SCHEMA_LABEL, Some("1"));
    env.pass().await;
    env.until("destroyed", |e| e.vms().is_empty()).await;
    env.until("marker gone", |e| e.backend.markers().is_empty())
        .await;

    // A starting shed whose VM carries another version's labels waits with cloud_unreadable.
    env.probe
        .set_default(ProbeOutcome::Unreachable("booting".into()));
    env.create("b").await.unwrap();
    let vm = env.vm("b").unwrap();
    env.cloud.operator_label(&vm.id, SCHEMA_LABEL, Some("2"));
    env.advance(5).await;
    env.until("cloud_unreadable", |e| {
        e.view("b").unwrap().status_reason == "cloud_unreadable"
    })
    .await;
    assert_eq!(env.view("b").unwrap().status, Status::Starting);
}

#[tokio::test]
async fn a_delete_still_works_after_a_failed_read() {
    let env = Env::new().await;
    env.running("a").await;
    // Every read of the VM fails (more than the driver retries); the destroy goes ahead.
    env.cloud.inject(
        Operation::List,
        FaultKind::Error(ErrorKind::PermissionDenied),
        2,
    );
    env.backend.delete_shed(&env.admin(), "a").await.unwrap();
    env.until("destroyed", |e| e.vms().is_empty()).await;
}

#[tokio::test]
async fn a_start_queued_behind_a_stop_made_outside_shed_runs_once_the_vm_is_stopped() {
    let env = Env::new().await;
    env.running("a").await;
    let vm = env.vm("a").unwrap();
    env.wrapped.report_stopping(&vm.id, true);
    env.pass().await;
    assert_eq!(env.view("a").unwrap().status, Status::Stopping);
    let (v, eff) = env.backend.start_shed(&env.admin(), "a").await.unwrap();
    assert_eq!(
        (v.status, eff),
        (Status::Stopping, shed::backend::Effect::Queued)
    );
    env.idle().await;
    env.wrapped.report_stopping(&vm.id, false);
    env.cloud.operator_stop(&vm.id);
    env.pass().await;
    env.until_status("a", Status::Running).await;
    assert_eq!(env.vm("a").unwrap().status, orca::Status::Running);
    assert_eq!(env.record("a").unwrap().queued, None);
}
