//! `delete_named` through a plugin: one RPC that reaches the plugin's driver's own `delete_named`
//! (which removes the pieces its creates make beside a machine), not a read by name and a delete
//! by id on the host's side; bad input refused before the cloud; a plugin built before the RPC
//! refused as unsupported, its machines left alone.

use crate::common;

use orca_machines::{Error, ErrorKind, MachineSpec, Provider};
use orca_plugin::fake::LACKS_ENV;
use orca_plugin::proto::fake::fake_control_client::FakeControlClient;
use orca_plugin::proto::fake::{CallsRequest, RequestsRequest};
use orca_plugin::{PluginCommand, PluginProvider};
use tonic::transport::Channel;

fn fake_on(state: &std::path::Path, owner: &str) -> PluginCommand {
    PluginCommand::new(common::FAKE, owner).setting(orca::FAKE_STATE_ENV, state.to_str().unwrap())
}

fn spec(name: &str) -> MachineSpec {
    MachineSpec::new(name, "amd64-small", "zone-a", "lab")
}

async fn console(p: &PluginProvider) -> FakeControlClient<Channel> {
    FakeControlClient::new(p.channel().await.unwrap())
}

/// The calls of the contract the plugin's driver served, as `operation subject`.
async fn served(p: &PluginProvider) -> Vec<String> {
    let calls = console(p)
        .await
        .calls(CallsRequest {})
        .await
        .unwrap()
        .into_inner()
        .calls;
    calls
        .into_iter()
        .map(|c| format!("{} {}", c.operation, c.subject))
        .collect()
}

async fn requests(p: &PluginProvider) -> u64 {
    let reply = console(p).await.requests(RequestsRequest {}).await.unwrap();
    reply.into_inner().requests
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_named_reaches_the_plugins_own_delete_named_in_one_call() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("cloud.json");
    let p = PluginProvider::start(fake_on(&state, "stack-1"))
        .await
        .unwrap();
    let m = p.create(&spec("lab-1")).await.unwrap().machine().unwrap();
    let before = served(&p).await.len();

    assert!(p.delete_named("lab", "lab-1").await.unwrap());
    assert_eq!(
        served(&p).await[before..],
        ["delete_named lab/lab-1"],
        "the driver's own delete_named, not a read by name and a delete by id"
    );
    assert_eq!(p.machine(&m.id).await.unwrap(), None);
    assert!(
        !p.delete_named("lab", "lab-1").await.unwrap(),
        "nothing left"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_named_through_a_plugin_refuses_bad_input_before_the_cloud() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("cloud.json");
    let p = PluginProvider::start(fake_on(&state, "stack-1"))
        .await
        .unwrap();
    let m = p.create(&spec("lab-1")).await.unwrap().machine().unwrap();
    let before = requests(&p).await;
    for (pool, name, field) in [
        ("a,b", "lab-1", "pool"),
        ("lab orca-owner=x", "lab-1", "pool"),
        ("lab", "Lab_1", "name"),
        ("lab", "", "name"),
    ] {
        match p.delete_named(pool, name).await {
            Err(Error::InvalidSpec { field: f, .. }) if f == field => {}
            other => panic!("delete_named({pool:?}, {name:?}) gave {other:?}, not {field}"),
        }
    }
    assert_eq!(requests(&p).await, before, "no request reached the cloud");
    assert!(p.machine(&m.id).await.unwrap().is_some(), "nothing removed");
    assert!(p.delete(&m.id).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_built_before_delete_named_is_unsupported_and_its_machine_stays() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("cloud.json");
    let command = fake_on(&state, "stack-1").setting(LACKS_ENV, "DeleteNamed");
    let p = PluginProvider::start(command).await.unwrap();
    let m = p.create(&spec("lab-1")).await.unwrap().machine().unwrap();

    let e = p.delete_named("lab", "lab-1").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unsupported, "{e}");
    assert!(e.made_nothing() && !e.is_retryable(), "{e}");
    let words = e.to_string();
    assert!(
        words.contains("soul-cloud-fake") && words.contains("delete_named"),
        "{words}"
    );
    // No fallback on a read by name and a delete by id, which would leave a driver's pieces while
    // answering as if it had removed all: the machine stands, and the plugin is kept.
    assert!(p.machine(&m.id).await.unwrap().is_some());
    assert_eq!(p.starts(), 1);
    assert!(p.delete(&m.id).await.unwrap());
}

/// Bad input is refused as bad input by the host's side, before the plugin is asked: a plugin built
/// before the RPC would answer it as unsupported, hiding what is wrong with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_to_a_plugin_built_before_delete_named_is_refused_as_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("cloud.json");
    let command = fake_on(&state, "stack-1").setting(LACKS_ENV, "DeleteNamed");
    let p = PluginProvider::start(command).await.unwrap();
    for (pool, name, field) in [("a,b", "lab-1", "pool"), ("lab", "Lab_1", "name")] {
        match p.delete_named(pool, name).await {
            Err(Error::InvalidSpec { field: f, .. }) if f == field => {}
            other => panic!("delete_named({pool:?}, {name:?}) gave {other:?}, not {field}"),
        }
    }
}
