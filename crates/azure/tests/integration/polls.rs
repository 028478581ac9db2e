//! How often the driver polls a long-running operation, counted on tokio's paused clock: the fake's
//! operations run a set time of that clock, and every pause of the driver is one of it too, so the
//! counts depend on the pauses alone, not on how promptly a loaded machine runs the test.

use crate::common;

use std::time::Duration;

use common::*;
use orca_azure::AzureProvider;
use orca_fakes::azure::FakeAzure;
use orca_fakes::{Fault, Rule};
use orca_machines::{MachineSpec, Provider, Status};

/// The poll interval the provider is given: the pause when Azure names none.
const INTERVAL: Duration = Duration::from_secs(5);

/// How long each power action runs in the fake.
const ACTION: Duration = Duration::from_secs(60);

async fn lab() -> (FakeAzure, AzureProvider, String) {
    let f = fake().await;
    let settings = settings(&f).poll_interval(INTERVAL).build().unwrap();
    let p = AzureProvider::new(settings, "stack-1").await.unwrap();
    // Made while operations end at once: only the power actions below are timed.
    let m = p
        .create(&MachineSpec::new("vm-poll", AMD, LOCATION, "lab"))
        .await
        .unwrap()
        .machine()
        .unwrap();
    f.set_operation_time(ACTION);
    (f, p, m.id)
}

/// The polls of one power action (a stop, then a start, alternately) on `m`.
async fn polls_of_one_action(f: &FakeAzure, p: &AzureProvider, m: &str, stop: bool) -> usize {
    f.control().clear_log();
    let after = if stop {
        p.stop(m).await.unwrap()
    } else {
        p.start(m).await.unwrap()
    };
    let want = if stop {
        Status::Stopped
    } else {
        Status::Running
    };
    assert_eq!(after.status, want);
    f.control().count(&"GET".parse().unwrap(), "/operations/")
}

#[tokio::test(start_paused = true)]
async fn a_retry_after_of_zero_or_none_is_the_poll_interval_not_a_loop() {
    let (f, p, m) = lab().await;
    // Each poll is answered a second after it is asked (of the paused clock), so a client that
    // polls at once makes one poll a second, not an endless loop at one instant of the clock.
    f.control().inject(Rule::new(
        Some("GET".parse().unwrap()),
        "/operations/",
        Fault::Latency(Duration::from_secs(1)),
        u32::MAX,
    ));
    // A minute's action, polled 5 s after the start and 5 s after each answer: ten polls, the
    // tenth answered as the action ends. `Retry-After: 0` names no pause, as Azure's own SDKs
    // read it; polling at once would spend a read of the subscription's bucket per round trip
    // (sixty here) for the whole minute.
    f.set_poll_pause(Duration::ZERO);
    let polls = polls_of_one_action(&f, &p, &m, true).await;
    assert!((9..=11).contains(&polls), "Retry-After: 0: {polls} polls");
    // No Retry-After at all, as Azure answers a VM's operations: the same.
    f.clear_poll_pause();
    let polls = polls_of_one_action(&f, &p, &m, false).await;
    assert!((9..=11).contains(&polls), "no Retry-After: {polls} polls");
}

#[tokio::test(start_paused = true)]
async fn a_named_pause_is_kept_over_the_interval_up_to_a_minute() {
    let (f, p, m) = lab().await;
    // 10 s named: six polls of a minute's action, not the twelve of the 5 s interval.
    f.set_poll_pause(Duration::from_secs(10));
    let polls = polls_of_one_action(&f, &p, &m, true).await;
    assert!((5..=7).contains(&polls), "Retry-After: 10: {polls} polls");
    // Two minutes named for a three-minute action: a poll a minute (three), not two minutes
    // apart (two, the last a minute after the action ended).
    f.set_operation_time(Duration::from_secs(180));
    f.set_poll_pause(Duration::from_secs(120));
    let polls = polls_of_one_action(&f, &p, &m, false).await;
    assert!((3..=4).contains(&polls), "Retry-After: 120: {polls} polls");
}
