//! How the Hetzner driver follows actions against the fake Hetzner API, whose actions take a while
//! (fractions of a second here, on the real clock): a server locked by a running action is waited for, a power or type
//! action whose answer was lost is not made twice, and every running action is read together.

use crate::common;

use std::time::Duration;

use axum::http::Method;
use orca_fakes::hetzner::{FakeHetzner, Options};
use orca_fakes::{Fault, Rule};
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

#[tokio::test]
async fn a_locked_server_is_waited_for_while_the_action_holding_it_runs() {
    // Another tool's poweroff holds the server for 0.5 s; the start waits for it (within the policy's
    // busy_wait, 10 s here) instead of giving up after its few quick retries (about 0.1 s here).
    let fake = fake_with(Duration::from_millis(500)).await;
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

#[tokio::test]
async fn a_power_or_type_action_whose_answer_was_lost_is_made_once() {
    // Each POST is served (its action runs for 0.3 s) and its answer lost: the retry must find that
    // action (the server's running actions) instead of posting a second one.
    let fake = fake_with(Duration::from_millis(300)).await;
    let p = common::provider(&fake, "me").await;
    let id = owned_server(&fake, "lost-act-1");
    let sid = id.to_string();
    let lose = |command: &str| {
        fake.control().inject(Rule::new(
            Some(Method::POST),
            &format!("/actions/{command}"),
            Fault::DropAnswer,
            1,
        ))
    };
    lose("shutdown");
    let m = p.stop(&sid).await.unwrap();
    assert_eq!(m.status, Status::Stopped);
    assert_eq!(fake.action_count(id, "shutdown_server"), 1);

    lose("change_type");
    let r = p.resize(&sid, "cx33").await.unwrap();
    assert_eq!(r.machine.machine_type, "cx33");
    assert_eq!(fake.action_count(id, "change_server_type"), 1);

    lose("poweron");
    let m = p.start(&sid).await.unwrap();
    assert_eq!(m.status, Status::Running);
    assert_eq!(fake.action_count(id, "start_server"), 1);

    // An OS that ignores the graceful shutdown: the poweroff that follows is lost too.
    fake.ignore_shutdown(true);
    lose("poweroff");
    let m = p.stop(&sid).await.unwrap();
    assert_eq!(m.status, Status::Stopped);
    assert_eq!(fake.action_count(id, "stop_server"), 1);
    assert_eq!(fake.control().count(&Method::POST, "/actions/"), 5);
}

#[tokio::test]
async fn a_lost_answer_whose_action_already_ended_is_found_in_the_servers_state() {
    // The action ended before the retry looked (no time to run): the server's state shows it done.
    let fake = fake_with(Duration::ZERO).await;
    let p = common::provider(&fake, "me").await;
    let id = owned_server(&fake, "lost-act-2");
    assert!(fake.set_status(id, "off"));
    fake.control().inject(Rule::new(
        Some(Method::POST),
        "/actions/poweron",
        Fault::DropAnswer,
        1,
    ));
    let m = p.start(&id.to_string()).await.unwrap();
    assert_eq!(m.status, Status::Running);
    assert_eq!(fake.action_count(id, "start_server"), 1);
}

#[tokio::test]
async fn the_running_actions_of_concurrent_creates_are_read_together() {
    // Twenty creates at once, each with two actions of 0.3 s (the create, then its start_server):
    // one read a poll interval names every running action, however many creates wait.
    let fake = fake_with(Duration::from_millis(300)).await;
    let interval = Duration::from_millis(50);
    let config = common::builder(&fake)
        .poll_interval(interval)
        .build()
        .unwrap();
    let p = std::sync::Arc::new(
        orca_hetzner::HetznerProvider::new(config, "me")
            .await
            .unwrap(),
    );
    p.arch("cx23").await.unwrap();
    let started = tokio::time::Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..20 {
        let p = p.clone();
        tasks.spawn(async move {
            let spec = orca_machines::MachineSpec::new(format!("tog-{i}"), "cx23", "fsn1", "lab");
            p.create(&spec).await
        });
    }
    while let Some(r) = tasks.join_next().await {
        assert!(r.unwrap().unwrap().machine().is_some());
    }
    let intervals = (started.elapsed().as_millis() / interval.as_millis()) as usize;
    let log = fake.control().log();
    let reads: Vec<&str> = log
        .iter()
        .filter(|l| l.method == Method::GET && l.path.starts_with("/v1/actions"))
        .map(|l| l.path.as_str())
        .collect();
    assert!(
        reads.len() <= intervals + 1,
        "at most one read of actions a poll interval: {} reads in {intervals} intervals",
        reads.len()
    );
    assert!(
        reads.iter().any(|r| r.matches("id=").count() >= 2),
        "a read names several actions: {reads:?}"
    );
}

/// More actions running at once than one read of `/actions?id=..` answers for (the API may leave
/// the ids beyond 25 out of its answer, and the fake does): an action a read left out is still
/// running, not failed, so every create makes its machine and none is removed as failed.
#[tokio::test]
async fn more_running_actions_than_one_read_answers_for_all_end_well() {
    let fake = fake_with(Duration::from_millis(300)).await;
    let config = common::builder(&fake)
        .poll_interval(Duration::from_millis(50))
        .build()
        .unwrap();
    let p = std::sync::Arc::new(
        orca_hetzner::HetznerProvider::new(config, "me")
            .await
            .unwrap(),
    );
    p.arch("cx23").await.unwrap();
    let n = orca_fakes::hetzner::ACTIONS_PER_READ + 10;
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..n {
        let p = p.clone();
        tasks.spawn(async move {
            let spec = orca_machines::MachineSpec::new(format!("many-{i}"), "cx23", "fsn1", "lab");
            p.create(&spec).await
        });
    }
    let mut failed = Vec::new();
    while let Some(r) = tasks.join_next().await {
        if let Err(e) = r.unwrap() {
            failed.push(e.to_string());
        }
    }
    assert!(
        failed.is_empty(),
        "{} creates failed: {failed:#?}",
        failed.len()
    );
    assert_eq!(p.machines("lab").await.unwrap().len(), n);
}

#[tokio::test]
async fn a_machine_is_found_by_name_in_one_read() {
    let fake = fake_with(Duration::ZERO).await;
    let p = common::provider(&fake, "me").await;
    let id = owned_server(&fake, "named-1");
    fake.insert_server(
        "named-2",
        "cx23",
        "fsn1",
        &[
            ("orca", "pool"),
            ("orca-pool", "lab"),
            ("orca-owner", "you"),
        ],
    );
    fake.control().clear_log();
    let m = p.machine_named("lab", "named-1").await.unwrap().unwrap();
    assert_eq!(m.id, id.to_string());
    let log = fake.control().log();
    assert_eq!(log.len(), 1, "{log:?}");
    assert!(
        log[0].path.starts_with("/v1/servers?") && log[0].path.contains("name=named-1"),
        "{log:?}"
    );
    assert!(
        p.machine_named("other", "named-1").await.unwrap().is_none(),
        "another pool's"
    );
    assert!(
        p.machine_named("lab", "named-2").await.unwrap().is_none(),
        "another owner's"
    );
    assert!(
        p.machine_named("lab", "named-3").await.unwrap().is_none(),
        "none"
    );
}

#[tokio::test(start_paused = true)]
async fn reads_of_running_actions_wait_behind_the_calls_queued_for_the_rate_limit() {
    // Twenty deletes at once under a bucket of 10 requests refilled at 10 a second: each delete
    // reads its server, then deletes it (40 requests), so most of them wait for the refill. A
    // read of the running delete actions then learns little (they have just started) and every
    // request it spends delays the deletes behind it: it waits until the last delete is let go.
    let fake = FakeHetzner::start_with(Options {
        action_time: Duration::from_secs(1),
        rate_limit: 10,
        refill_per_second: 10.0,
        ..Options::default()
    })
    .await
    .unwrap();
    let ids: Vec<i64> = (0..20)
        .map(|i| owned_server(&fake, &format!("q-{i}")))
        .collect();
    let config = common::builder(&fake)
        .poll_interval(Duration::from_millis(500))
        .rate_reserve(0.0)
        .build()
        .unwrap();
    let p = std::sync::Arc::new(
        orca_hetzner::HetznerProvider::new(config, "me")
            .await
            .unwrap(),
    );
    // A first call learns the bucket (until an answer tells it, the pacer lets calls go).
    p.machines("lab").await.unwrap();
    let mut tasks = tokio::task::JoinSet::new();
    for id in ids {
        let p = p.clone();
        tasks.spawn(async move { p.delete(&id.to_string()).await });
    }
    while let Some(r) = tasks.join_next().await {
        assert!(r.unwrap().unwrap());
    }
    assert_eq!(fake.rate_limited(), 0);
    let log = fake.control().log();
    let last_delete = log
        .iter()
        .rposition(|l| l.method == Method::DELETE)
        .unwrap();
    let first_read = log
        .iter()
        .position(|l| l.path.starts_with("/v1/actions"))
        .unwrap();
    assert!(
        first_read > last_delete,
        "the actions were read (request {first_read}) while deletes waited (the last was request {last_delete})"
    );
}
