//! 100 creates and 100 deletes by the autoscaler on the fake Compute Engine API, whose operations
//! take 10 s of tokio's paused clock: the time as a ratio to the floor, the requests as a ratio to
//! the fewest, the refusals (403 `rateLimitExceeded`, counted with the 429s); at `--parallel` 4, 8,
//! 20 and at the default settings, under rate quotas of 60 requests a minute per group (Compute
//! Engine's default is 1,500: the bench's is small enough to bind at 100 machines).
//! Run: `cargo bench -p orca-pool --bench gce`.
//!
//! Measured (five debug runs, all alike): floor 101.0 s, fewest 602 requests; default settings
//! 140.0 s, 1.39 of that floor and 1.08 of the floor of the intervals its phases met (130.0 s), 643
//! requests (1.07 of the fewest), 41 refused; with `ORCA_GCE_RATE_QUOTA=60` the same time, 602
//! requests and none refused. The fake counts in fixed minutes from the start of the creates, so 100
//! inserts cannot all go before the second minute: no driver beats 70 s for the creates, where the
//! bucket floor reads 50 s. Unset, the driver learns each group's quota from its first refusal (40
//! inserts of the first burst of 100, one read); it never knows where the cloud's minutes start, so
//! it lets at most the quota go in any span of a minute, which costs the deletes 10 s here.

mod common;

use axum::http::Method;
use common::{Fake, Limit, ACTION_TIME};
use orca_fakes::gce::{FakeGce, ZONE};

/// Requests of each quota group a minute (Compute Engine's default is 1,500; here fewer than a
/// phase's 100 inserts or deletes, so that the quota binds).
const PER_MINUTE: u32 = 60;

fn operation_reads(_: &Method, p: &str) -> bool {
    p.contains("/operations/")
}

fn lists(m: &Method, p: &str) -> bool {
    let last = p.rsplit('/').next().unwrap_or("");
    *m == Method::GET
        && !operation_reads(m, p)
        && (p.contains("/aggregated/")
            || ["instances", "firewalls", "disks", "machineTypes"].contains(&last))
}

fn reads(m: &Method, p: &str) -> bool {
    *m == Method::GET && !operation_reads(m, p) && !lists(m, p)
}

fn changes(m: &Method, p: &str) -> bool {
    *m != Method::GET && !operation_reads(m, p)
}

/// A quota of `PER_MINUTE` as a bucket: a minute's requests at once, refilled over the minute (the
/// intervals are synchronized: a bucket is the bound's reading that never lets more through).
fn quota(name: &'static str, counts: fn(&Method, &str) -> bool) -> Limit {
    Limit {
        bucket: PER_MINUTE,
        refill: f64::from(PER_MINUTE) / 60.0,
        reserve: 0.0,
        name,
        counts,
        interval: Some(std::time::Duration::from_secs(60)),
    }
}

fn main() {
    let limits = [
        quota("changes", changes),
        quota("reads", reads),
        quota("lists", lists),
        quota("operation reads", operation_reads),
    ];
    common::main("Compute Engine", &limits, |limited| async move {
        let fake = FakeGce::start().await.expect("fake");
        if limited {
            fake.set_rate_quota(Some(PER_MINUTE));
        }
        let intervals_from = limited.then(tokio::time::Instant::now);
        fake.set_operation_time(ACTION_TIME);
        let dir = tempfile::tempdir().expect("dir");
        let key = dir.path().join("sa.json");
        std::fs::write(&key, fake.service_account_json()).expect("key");
        Fake {
            kind: "gce",
            settings: orca_fakes::gce::driver_settings(&fake, &key),
            offering: format!("e2-small@{ZONE}"),
            control: fake.control().clone(),
            _keep: Box::new((fake, dir)),
            intervals_from,
            told: vec![("ORCA_GCE_RATE_QUOTA", PER_MINUTE.to_string())],
        }
    });
}
