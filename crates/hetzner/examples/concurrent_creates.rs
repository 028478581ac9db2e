//! Requests per create for 50 concurrent creates whose actions take 10 s (the create action, then
//! its `start_server`), against the fake Hetzner API on tokio's paused clock: the minutes of waiting
//! pass at once, the request counts are those a real project would be charged.
//!
//! Run: `cargo run -p orca-hetzner --example concurrent_creates`.

use std::sync::Arc;
use std::time::Duration;

use orca_fakes::hetzner::{FakeHetzner, Options};
use orca_hetzner::{Config, HetznerProvider};
use orca_machines::{MachineSpec, Provider};
use reqwest::Method;

const CREATES: usize = 50;
const ACTION_TIME: Duration = Duration::from_secs(10);

async fn run() {
    let fake = FakeHetzner::start_with(Options {
        action_time: ACTION_TIME,
        ..Options::default()
    })
    .await
    .expect("fake");
    // The driver's defaults (a poll every second), on the fake.
    let config = Config::builder()
        .token(fake.token())
        .endpoint(fake.url())
        .build()
        .expect("settings");
    let p = Arc::new(HetznerProvider::new(config, "bench").await.expect("owner"));
    let started = tokio::time::Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..CREATES {
        let p = p.clone();
        tasks.spawn(async move {
            p.create(&MachineSpec::new(format!("cc-{i}"), "cx23", "fsn1", "cc"))
                .await
        });
    }
    let mut made = 0;
    while let Some(r) = tasks.join_next().await {
        if r.expect("task").expect("create").machine().is_some() {
            made += 1;
        }
    }
    let took = started.elapsed();
    let c = fake.control();
    let total = c.requests();
    let actions = c.count(&Method::GET, "/v1/actions");
    let creates = c.count(&Method::POST, "/v1/servers");
    let reads = c.count(&Method::GET, "/v1/servers/");
    println!(
        "{made} of {CREATES} concurrent creates, actions of {} s, in {:.0} s of (paused) tokio time",
        ACTION_TIME.as_secs(),
        took.as_secs_f64()
    );
    println!(
        "requests: {total} in all, {:.2} per create ({creates} creates, {actions} action reads, \
         {reads} server reads, {} lookups)",
        total as f64 / CREATES as f64,
        total as usize - actions - creates - reads
    );
}

fn main() {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("runtime")
        .block_on(run());
}
