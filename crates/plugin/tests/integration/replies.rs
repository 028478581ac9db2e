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
