//! A plugin's answers are checked against what was asked: an answer about another machine (of
//! another name, pool or id) is refused, naming it, never handed on to the host.

use crate::common;

use orca_machines::{ErrorKind, MachineSpec, Provider};
use orca_plugin::fake::LIES_ENV;
use orca_plugin::{PluginCommand, PluginProvider};

async fn fake(state: &std::path::Path, lies: &str) -> PluginProvider {
    let command = PluginCommand::new(common::FAKE, "o")
        .setting(orca::FAKE_STATE_ENV, state.to_str().unwrap())
        .setting(LIES_ENV, lies);
    PluginProvider::start(command).await.unwrap()
}

#[tokio::test]
async fn an_answer_about_another_machine_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("cloud.json");
    let spec = MachineSpec::new("web-1", "amd64-small", "zone-a", "lab");
    // A plugin that answers truly makes the machine the others are asked about.
    let honest = fake(&state, "").await;
    let made = honest.create(&spec).await.unwrap().machine().unwrap();
    let liar = fake(&state, "create,machines,machine,machine_named,start,stop").await;
    let second = MachineSpec::new("web-2", "amd64-small", "zone-a", "lab");
    let e = liar.create(&second).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Other, "{e}");
    assert!(
        !e.made_nothing(),
        "a create answered with another machine made something: {e}"
    );
    assert!(e.to_string().contains("web-2-other"), "{e}");
    for e in [
        liar.machines("lab").await.unwrap_err(),
        liar.machine(&made.id).await.unwrap_err(),
        liar.machine_named("lab", "web-1").await.unwrap_err(),
        liar.stop(&made.id).await.unwrap_err(),
    ] {
        assert_eq!(e.kind(), ErrorKind::Other, "{e}");
        assert!(e.to_string().contains("-other"), "{e}");
    }
    // The honest plugin's answers pass.
    assert_eq!(honest.machines("lab").await.unwrap().len(), 2);
    assert!(honest
        .machine_named("lab", "web-1")
        .await
        .unwrap()
        .is_some());
}

/// A resize answered with another machine is refused naming it, as a start's or a stop's is
/// (before, the host handed the other machine's type and downtime on as this one's).
#[tokio::test]
async fn a_resize_answered_about_another_machine_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("cloud.json");
    let honest = fake(&state, "").await;
    let spec = MachineSpec::new("web-1", "amd64-small", "zone-a", "lab");
    let made = honest.create(&spec).await.unwrap().machine().unwrap();
    let liar = fake(&state, "resize").await;
    let e = liar.resize(&made.id, "amd64-large").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Other, "{e}");
    assert!(e.to_string().contains("-other"), "{e}");
}

/// The spec is checked by the host before it crosses to the plugin, as every driver checks it
/// before any call: a run limit over the maximum by half a second, which the protocol's whole
/// seconds would round down to the maximum, is refused, and so is one the protocol cannot carry
/// (a part of a second), rather than made shorter (before, the plugin made the machine).
#[tokio::test]
async fn a_spec_the_protocol_would_change_is_refused_before_it_crosses() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("cloud.json");
    let p = fake(&state, "").await;
    let max = orca_machines::spec::MAX_RUN_DURATION;
    for (n, d) in [
        (1, max + std::time::Duration::from_millis(500)),
        (2, std::time::Duration::from_millis(3_600_500)),
    ] {
        let spec = MachineSpec::new(format!("lim-{n}"), "amd64-small", "zone-a", "lab")
            .with_max_run_duration(d);
        let e = p.create(&spec).await.unwrap_err();
        assert!(
            matches!(&e, orca_machines::Error::InvalidSpec { field, .. } if field == "max_run_duration"),
            "{d:?}: {e:?}"
        );
    }
    assert!(p.machines("lab").await.unwrap().is_empty());
}
