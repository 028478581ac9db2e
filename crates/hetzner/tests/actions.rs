//! How the Hetzner driver follows actions against the fake Hetzner API, whose actions take seconds
//! of tokio's (paused) clock: a server locked by a running action is waited for, a power or type
//! action whose answer was lost is not made twice, and every running action is read together.

mod common;

use std::time::Duration;

use axum::http::Method;
use orca_fakes::hetzner::{FakeHetzner, Options};
use orca_machines::labels::ownership_labels;
use orca_machines::{Provider, Status};

async fn fake_with(action_time: Duration) -> FakeHetzner {
    FakeHetzner::start_with(Options {
        action_time,
        ..Options::default()
    })
    .await
    .unwrap()
}

/// A running server of pool `lab` owned by `me`, made by another tool.
fn owned_server(fake: &FakeHetzner, name: &str) -> i64 {
    let labels = ownership_labels("lab", "me");
    let pairs: Vec<(&str, &str)> = labels
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    fake.insert_server(name, "cx23", "fsn1", &pairs)
}

/// Another tool starts action `command` on server `id`.
async fn other_tool(fake: &FakeHetzner, id: i64, command: &str) {
    let r = reqwest::Client::new()
        .post(format!("{}/servers/{id}/actions/{command}", fake.url()))
        .bearer_auth(fake.token())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
}

#[tokio::test(start_paused = true)]
async fn a_locked_server_is_waited_for_while_the_action_holding_it_runs() {
    // Another tool's poweroff holds the server for 8 s; the start waits for it (within the policy's
    // busy_wait, 10 s here) instead of giving up after its few quick retries.
    let fake = fake_with(Duration::from_secs(8)).await;
    let p = common::provider(&fake, "me").await;
    let id = owned_server(&fake, "busy-1");
    other_tool(&fake, id, "poweroff").await;
    let m = p.start(&id.to_string()).await.unwrap();
    assert_eq!(m.status, Status::Running);
    assert!(
        fake.control().count(&Method::POST, "/actions/poweron") >= 2,
        "refused while locked, then made"
    );
    assert_eq!(fake.action_count(id, "start_server"), 1);
}
