//! Server restarts: the record cache and delete markers in `state_dir`, and each item of the README's
//! reconciliation list at start-up.

use std::time::Duration;

use orca::memory::{FaultKind, Operation};
use orca::MachineSpec;
use orca::{ErrorKind, Provider};
use shed::backend::{
    CLIENT_LABEL, ENV_LABEL, ID_LABEL, NAME_LABEL, SCHEMA, SCHEMA_LABEL, SIZE_LABEL, STATE_LABEL,
};
use shed::model::{CreateStage, Op};
use shed::probe::ProbeOutcome;
use shed::{Backend, Status};

use crate::pass::stray_vm;
use crate::support::{Call, Env, LogCount, ENV};

#[tokio::test]
async fn records_survive_a_restart_and_running_sheds_keep_running() {
    let mut env = Env::new().await;
    env.running("a").await;
    env.running("b").await;
    env.backend.stop_shed(&env.admin(), "b").await.unwrap();
    env.until_status("b", Status::Stopped).await;
    let before = env.backend.list(&env.admin());
    env.restart().await;
    env.idle().await;
    assert_eq!(env.backend.list(&env.admin()), before);
    assert_eq!(
        env.vm("a").unwrap().status,
        orca::Status::Running,
        "a server stop leaves VMs as they are"
    );
}

#[tokio::test]
async fn a_ready_vm_with_no_record_is_adopted_under_its_own_shed_id() {
    let mut env = Env::new().await;
    let on = stray_vm(&env, "ddddddddd1", "ready", "1").await;
    let off = stray_vm(&env, "ddddddddd2", "ready", "1").await;
    env.cloud.operator_stop(&off.id);
    env.restart().await;
    env.until_status("ddddddddd1", Status::Running).await;
    let a = env.view("ddddddddd1").unwrap();
    assert_eq!(a.id, "ddddddddd1");
    assert_eq!((a.size.as_str(), a.cpus), ("standard", 2));
    let b = env.view("ddddddddd2").unwrap();
    assert_eq!((b.id.as_str(), b.status), ("ddddddddd2", Status::Stopped));
    assert_eq!(env.vms().len(), 2);
    let _ = on;
    assert!(env.log_has("adopted VM"));
}

#[tokio::test]
async fn a_server_killed_in_the_middle_of_a_create_resumes_it_without_a_second_vm() {
    let mut env = Env::new().await;
    // The cloud made the VM, and the server died before it wrote that down.
    env.wrapped.hold(Call::CreateAfter);
    let id = env
        .backend
        .create(&env.admin(), Env::req("mid"))
        .await
        .unwrap();
    env.until("the VM is made", |e| {
        e.wrapped.entered(Call::CreateAfter) == 1
    })
    .await;
    assert_eq!(env.record("mid").unwrap().create, CreateStage::Sent);
    env.restart().await;
    env.wrapped.release(Call::CreateAfter);
    env.until_status("mid", Status::Running).await;
    assert_eq!(env.vms().len(), 1, "the resumed create adopted the VM");
    assert_eq!(env.record("mid").unwrap().id, id);
    assert_eq!(env.vm("mid").unwrap().labels[STATE_LABEL], "ready");
}

#[tokio::test]
async fn a_create_that_had_not_reached_the_cloud_is_resumed() {
    let mut env = Env::new().await;
    env.wrapped.hold(Call::CreateBefore);
    env.backend
        .create(&env.admin(), Env::req("early"))
        .await
        .unwrap();
    env.until("held", |e| e.wrapped.entered(Call::CreateBefore) == 1)
        .await;
    env.backend.shutdown();
    env.wrapped.release(Call::CreateBefore);
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(
        env.vms().is_empty(),
        "the killed server's insert never reached the cloud"
    );
    env.restart().await;
    env.until_status("early", Status::Running).await;
    assert_eq!(env.vms().len(), 1);
}

#[tokio::test]
async fn a_record_left_stopping_resumes_its_stop() {
    let mut env = Env::new().await;
    env.running("a").await;
    env.wrapped.hold(Call::Stop);
    env.backend.stop_shed(&env.admin(), "a").await.unwrap();
    env.until("stop held", |e| e.wrapped.entered(Call::Stop) == 1)
        .await;
    env.backend.shutdown();
    env.wrapped.release(Call::Stop);
    let rec = env.record("a").unwrap();
    assert_eq!((rec.status, rec.op), (Status::Stopping, Some(Op::Stop)));
    env.restart().await;
    env.until_status("a", Status::Stopped).await;
    assert_eq!(env.vm("a").unwrap().status, orca::Status::Stopped);
}

#[tokio::test]
async fn a_record_left_starting_resumes_its_probe() {
    let mut env = Env::new().await;
    env.probe
        .set_default(ProbeOutcome::Unreachable("booting".into()));
    env.create("a").await.unwrap();
    env.backend.shutdown();
    env.probe.set_default(ProbeOutcome::Answered);
    env.restart().await;
    env.until_status("a", Status::Running).await;
}

#[tokio::test]
async fn a_record_whose_vm_stopped_while_the_server_was_down_is_stopped_with_its_reason() {
    let mut env = Env::build(|c| c.max_run_duration = Duration::from_secs(600)).await;
    env.running("limit").await;
    env.running("ext").await;
    env.backend.shutdown();
    env.cloud.operator_stop(&env.vm("ext").unwrap().id);
    env.advance(700).await;
    env.restart().await;
    let l = env.view("limit").unwrap();
    assert_eq!(
        (l.status, l.status_reason.as_str()),
        (Status::Stopped, "run_limit")
    );
    let e = env.view("ext").unwrap();
    assert_eq!(
        (e.status, e.status_reason.as_str()),
        (Status::Stopped, "external")
    );
}

#[tokio::test]
async fn a_record_whose_vm_is_gone_is_dropped_unless_in_error_or_not_yet_created() {
    let mut env = Env::build(|c| c.limits.max_running = 8).await;
    env.running("gone").await;
    env.cloud
        .inject(Operation::Create, FaultKind::Error(ErrorKind::Other), 1);
    env.create("failed").await.unwrap();
    env.idle().await;
    let before = env.wrapped.entered(Call::CreateBefore);
    env.wrapped.hold(Call::CreateBefore);
    env.backend
        .create(&env.admin(), Env::req("unsent"))
        .await
        .unwrap();
    env.until("held", |e| {
        e.wrapped.entered(Call::CreateBefore) == before + 1
    })
    .await;
    env.backend.shutdown();
    env.wrapped.release(Call::CreateBefore);
    env.cloud.operator_delete(&env.vm("gone").unwrap().id);
    env.restart().await;
    assert!(env.view("gone").is_none(), "dropped");
    assert_eq!(
        env.view("failed").unwrap().status,
        Status::Error,
        "kept in error"
    );
    env.until_status("unsent", Status::Running).await;
}

#[tokio::test]
async fn vms_labelled_deleting_or_with_a_delete_marker_are_deleted_and_nothing_else() {
    let mut env = Env::new().await;
    env.running("marked").await;
    env.cloud.inject(
        Operation::Delete,
        FaultKind::Error(ErrorKind::PermissionDenied),
        1_000,
    );
    env.backend
        .delete_shed(&env.admin(), "marked")
        .await
        .unwrap();
    env.idle().await;
    env.backend.shutdown();
    env.cloud.clear_faults();
    assert_eq!(env.backend.markers().len(), 1);
    let deleting = stray_vm(&env, "eeeeeeeee1", "deleting", "1").await;
    let abandoned = stray_vm(&env, "eeeeeeeee2", "creating", "1").await;
    env.advance(16 * 60).await;
    let young = stray_vm(&env, "eeeeeeeee3", "creating", "1").await;
    let foreign = stray_vm(&env, "eeeeeeeee4", "deleting", "0").await;
    env.restart().await;
    env.until("deleted", |e| e.vms().len() == 2).await;
    env.idle().await;
    let mut left: Vec<String> = env.vms().into_iter().map(|m| m.id).collect();
    left.sort();
    let mut want = vec![young.id, foreign.id];
    want.sort();
    assert_eq!(left, want);
    let _ = (deleting, abandoned);
    assert!(env.backend.markers().is_empty());
}

#[tokio::test]
async fn an_acknowledged_delete_is_never_listed_again_even_when_the_records_removal_was_lost() {
    let env = Env::new().await;
    let v = env.running("a").await;
    let rec = env.record("a").unwrap();
    env.cloud.inject(
        Operation::Delete,
        FaultKind::Error(ErrorKind::PermissionDenied),
        1_000,
    );
    env.backend.delete_shed(&env.admin(), "a").await.unwrap();
    env.idle().await;
    env.backend.shutdown();
    // The server died between writing the marker and removing the record.
    let path = env
        .cfg
        .state_dir
        .join("sheds")
        .join(format!("{}.json", v.id));
    std::fs::write(&path, serde_json::to_vec(&rec).unwrap()).unwrap();
    let store = shed::store::Store::open(&env.cfg.state_dir).unwrap();
    let b = Backend::load_on(store, env.parts()).unwrap();
    assert!(b.get(&env.admin(), "a").is_err(), "the marker wins");
    assert!(!path.exists());
    assert_eq!(b.markers().len(), 1);
}

#[tokio::test]
async fn a_server_whose_firewall_check_fails_still_starts_and_lists_and_deletes() {
    let mut env = Env::new().await;
    env.running("a").await;
    env.cloud.remove_firewall_rule(crate::support::RULE);
    env.restart().await;
    assert!(!env.backend.firewall_last().unwrap().passed);
    assert_eq!(env.backend.list(&env.admin()).len(), 1);
    env.backend.stop_shed(&env.admin(), "a").await.unwrap();
    env.until_status("a", Status::Stopped).await;
    env.backend.delete_shed(&env.admin(), "a").await.unwrap();
    env.until("destroyed", |e| e.vms().is_empty()).await;
}

#[tokio::test]
async fn a_start_queued_behind_a_stop_whose_vm_stopped_while_the_server_was_down_runs() {
    let mut env = Env::new().await;
    env.running("a").await;
    env.wrapped.hold(Call::Stop);
    env.backend.stop_shed(&env.admin(), "a").await.unwrap();
    env.until("stop held", |e| e.wrapped.entered(Call::Stop) == 1)
        .await;
    let (_, eff) = env.backend.start_shed(&env.admin(), "a").await.unwrap();
    assert_eq!(eff, shed::backend::Effect::Queued);
    env.backend.shutdown();
    env.wrapped.release(Call::Stop);
    env.cloud.operator_stop(&env.vm("a").unwrap().id);
    env.restart().await;
    env.until_status("a", Status::Running).await;
    assert_eq!(env.vm("a").unwrap().status, orca::Status::Running);
}

/// The lock of `state_dir` taken, then lost before the records are read (the lock file removed or
/// replaced: another server may hold the directory now): the server refuses to start, naming the
/// lock, rather than start with no records and write nothing it does.
#[tokio::test]
async fn a_server_whose_state_dir_lock_is_lost_before_it_reads_refuses_to_start() {
    let env = Env::new().await;
    env.running("a").await;
    env.backend.shutdown();
    let store = shed::store::Store::open(&env.cfg.state_dir).unwrap();
    let lock = env.cfg.state_dir.join(shed::store::LOCK_FILE);
    std::fs::remove_file(&lock).unwrap();
    let Err(e) = Backend::start_on(store, env.parts()).await else {
        panic!("a server whose lock was lost started");
    };
    assert!(e.to_string().contains(&lock.display().to_string()), "{e}");
}

/// A VM in the cloud under shed's owner that is not this server's shed `shed_id`: made in
/// environment `env` with `shed_id` as its shed-id label, readable by this server's schema.
async fn vm_of(env: &Env, in_env: &str, shed_id: &str) -> orca::Machine {
    let p = env.cloud.provider(shed::OWNER).unwrap();
    let spec = MachineSpec::new(
        format!("shed-{in_env}-{shed_id}"),
        "amd64-small",
        "zone-a",
        in_env,
    )
    .with_labels([
        (ENV_LABEL, in_env),
        (ID_LABEL, shed_id),
        (NAME_LABEL, shed_id),
        (SIZE_LABEL, "standard"),
        (CLIENT_LABEL, "local"),
        (STATE_LABEL, "ready"),
        (SCHEMA_LABEL, SCHEMA),
    ]);
    p.create(&spec).await.unwrap().machine().unwrap()
}

/// Writes a delete marker for shed `id` naming VM `vm_id` into `state_dir`, as whoever could write
/// there would.
fn plant_marker(env: &Env, id: &str, vm_id: &str) {
    let marker = serde_json::json!({
        "id": id,
        "name": id,
        "client": "local",
        "vm_name": format!("shed-{ENV}-{id}"),
        "vm_id": vm_id,
        "may_have_vm": true,
        "acknowledged_at": "2026-01-01T00:00:00Z",
    });
    let path = env.cfg.state_dir.join("deletes").join(format!("{id}.json"));
    std::fs::write(path, serde_json::to_vec(&marker).unwrap()).unwrap();
}

/// A delete whose marker or record names a VM by id that is not its shed's (another environment's
/// VM, or one of this environment that another shed's labels claim), as whoever could write into
/// `state_dir` would plant it, never destroys that VM: the marker goes, and the log names the VM
/// as left alone.
#[tokio::test]
async fn a_delete_naming_a_vm_that_is_not_its_sheds_leaves_that_vm_standing() {
    let mut env = Env::new().await;
    let theirs = env.running("theirs").await;
    env.backend.shutdown();
    let prod = vm_of(&env, "prod", "pppppppppp").await;
    let other = env.vm("theirs").unwrap();
    plant_marker(&env, "xxxxxxxxx1", &prod.id);
    plant_marker(&env, "xxxxxxxxx2", &other.id);
    // A record whose VM id is another environment's VM, deleted through the API.
    let mut rec = env.record("theirs").unwrap();
    rec.id = "xxxxxxxxx3".into();
    rec.name = "planted".into();
    rec.vm_name = format!("shed-{ENV}-xxxxxxxxx3");
    rec.vm_id = Some(prod.id.clone());
    let path = env.cfg.state_dir.join("sheds").join("xxxxxxxxx3.json");
    std::fs::write(path, serde_json::to_vec(&rec).unwrap()).unwrap();
    env.restart().await;
    env.idle().await;
    env.backend
        .delete_shed(&env.admin(), "planted")
        .await
        .unwrap();
    env.idle().await;
    env.pass().await;
    env.idle().await;
    let standing: Vec<String> = env.vms().into_iter().map(|m| m.id).collect();
    assert!(standing.contains(&prod.id), "{standing:?}");
    assert!(standing.contains(&other.id), "{standing:?}");
    assert_eq!(env.view("theirs").unwrap().id, theirs.id);
    assert_eq!(env.view("theirs").unwrap().status, Status::Running);
    assert!(
        env.backend.markers().is_empty(),
        "{:?}",
        env.backend.markers()
    );
    assert_eq!(
        env.backend.log().count("left alone"),
        3,
        "{:#?}",
        env.backend.log().lines()
    );
}

/// A record left in the middle of its create whose VM id is another environment's VM, as whoever
/// could write into `state_dir` would plant it, met by a start-up whose listing failed: its probe fails (the host key is not the pinned
/// one), so its create fails, and the VM of that failed create is destroyed only when it is the
/// shed's. That one is not: it stands, unlabelled by this server.
#[tokio::test]
async fn a_failed_create_naming_a_vm_that_is_not_its_sheds_leaves_that_vm_standing() {
    let mut env = Env::new().await;
    env.running("theirs").await;
    env.backend.shutdown();
    let prod = vm_of(&env, "prod", "pppppppppp").await;
    let mut rec = env.record("theirs").unwrap();
    rec.id = "xxxxxxxxx4".into();
    rec.name = "planted".into();
    rec.vm_name = format!("shed-{ENV}-xxxxxxxxx4");
    rec.vm_id = Some(prod.id.clone());
    rec.status = Status::Starting;
    rec.create = CreateStage::Made;
    rec.op = Some(Op::Create);
    let path = env.cfg.state_dir.join("sheds").join("xxxxxxxxx4.json");
    std::fs::write(path, serde_json::to_vec(&rec).unwrap()).unwrap();
    env.probe.set_default(ProbeOutcome::HostKeyMismatch);
    // The listing at start-up fails: the jobs of starting records then read the cloud themselves,
    // by the VM id their record holds.
    env.cloud.inject(
        Operation::List,
        FaultKind::Error(ErrorKind::PermissionDenied),
        1,
    );
    env.restart().await;
    env.until("the planted create failed", |e| {
        e.view("planted").is_some_and(|v| v.status == Status::Error)
    })
    .await;
    env.idle().await;
    env.pass().await;
    env.idle().await;
    let standing = env
        .vms()
        .into_iter()
        .find(|m| m.id == prod.id)
        .unwrap_or_else(|| {
            panic!(
                "the other environment's VM is gone: {:#?}",
                env.backend.log().lines()
            )
        });
    assert_eq!(standing.labels, prod.labels);
    assert!(
        env.backend.log().count("left alone") >= 1,
        "{:#?}",
        env.backend.log().lines()
    );
}

/// A record whose stop is due or whose start is not yet sent, naming by id a VM that is not its
/// shed's (another environment's), as whoever could write into `state_dir` would plant it, met by a
/// start-up whose listing failed: neither VM is stopped or started; each stands as it was, and the
/// log names it as left alone.
#[tokio::test]
async fn a_stop_or_start_naming_a_vm_that_is_not_its_sheds_leaves_that_vm_as_it_was() {
    let mut env = Env::new().await;
    env.running("theirs").await;
    env.backend.shutdown();
    let on = vm_of(&env, "prod", "pppppppppp").await;
    let off = vm_of(&env, "prod", "ppppppppp2").await;
    assert!(env.cloud.operator_stop(&off.id));
    let plant = |id: &str, vm: &str, status: Status, op: Op| {
        let mut rec = env.record("theirs").unwrap();
        rec.id = id.into();
        rec.name = format!("planted-{id}");
        rec.vm_name = format!("shed-{ENV}-{id}");
        rec.vm_id = Some(vm.into());
        rec.status = status;
        rec.create = CreateStage::Made;
        rec.op = Some(op);
        rec.start_sent = false;
        let path = env.cfg.state_dir.join("sheds").join(format!("{id}.json"));
        std::fs::write(path, serde_json::to_vec(&rec).unwrap()).unwrap();
    };
    plant("xxxxxxxxx5", &on.id, Status::Stopping, Op::Stop);
    plant("xxxxxxxxx6", &off.id, Status::Starting, Op::Start);
    env.cloud.inject(
        Operation::List,
        FaultKind::Error(ErrorKind::PermissionDenied),
        1,
    );
    env.restart().await;
    env.idle().await;
    env.pass().await;
    env.idle().await;
    let status = |id: &str| {
        env.vms()
            .into_iter()
            .find(|m| m.id == id)
            .map(|m| m.status)
            .unwrap_or_else(|| panic!("VM {id} is gone: {:#?}", env.backend.log().lines()))
    };
    let lines = env.backend.log().lines();
    assert_eq!(status(&on.id), orca::Status::Running, "{lines:#?}");
    assert_eq!(status(&off.id), orca::Status::Stopped, "{lines:#?}");
    assert!(env.backend.log().count("left alone") >= 2, "{lines:#?}");
}
