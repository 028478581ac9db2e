//! 100 creates and 100 deletes by the autoscaler on the fake Azure API, whose operations take 10 s
//! of tokio's paused clock: the time as a ratio to the floor, the requests as a ratio to the fewest,
//! the 429s; at `--parallel` 4, 8, 20 and at the default settings. The fake names a 5 s pause
//! before each poll and throttles as Resource Manager does, at its published bucket sizes and
//! refill rates. Run: `cargo bench -p orca-pool --bench azure`.
//!
//! Measured (debug runs, the same each time): floor 78.1 s (a create alone takes 40 s, 10 s of it
//! after its last change, the VM's `PUT`), fewest 3004 requests; default settings 78.1 s (ratio 1.00),
//! 3004 requests, 0 answered 429.

mod common;

use std::time::Duration;

use axum::http::Method;
use common::{Fake, Limit, ACTION_TIME};
use orca_fakes::azure::{ArmLimits, FakeAzure};

/// The `Retry-After` of a running operation.
const POLL_PAUSE: Duration = Duration::from_secs(5);

/// Resource Manager's published limits per subscription and principal: a bucket of reads, one of
/// writes and one of deletes. The driver keeps nothing for other tools.
const LIMITS: ArmLimits = ArmLimits::RESOURCE_MANAGER;

fn reads(m: &Method, _: &str) -> bool {
    *m == Method::GET || *m == Method::HEAD
}

fn deletes(m: &Method, _: &str) -> bool {
    *m == Method::DELETE
}

fn writes(m: &Method, p: &str) -> bool {
    !reads(m, p) && !deletes(m, p)
}

fn limit(
    (bucket, refill): (u32, f64),
    name: &'static str,
    counts: fn(&Method, &str) -> bool,
) -> Limit {
    Limit {
        bucket,
        refill,
        reserve: 0.0,
        name,
        counts,
        interval: None,
    }
}

fn main() {
    let limits = [
        limit(LIMITS.reads, "reads", reads),
        limit(LIMITS.writes, "writes", writes),
        limit(LIMITS.deletes, "deletes", deletes),
    ];
    common::main("Azure", &limits, |limited| async move {
        let fake = FakeAzure::start().await.expect("fake");
        if limited {
            fake.set_throttling(Some(LIMITS));
        }
        fake.add_hosts_subnet();
        fake.set_operation_time(ACTION_TIME);
        // A pause named before each poll, which the driver keeps. (Azure names none for a VM's
        // operations, the driver then polling at its interval; the bench names one so that its
        // counts stay comparable from run to run.)
        fake.set_poll_pause(POLL_PAUSE);
        Fake {
            kind: "azure",
            settings: orca_fakes::azure::driver_settings(&fake),
            offering: "Standard_B2s@westeurope".into(),
            control: fake.control().clone(),
            _keep: Box::new(fake),
            intervals_from: None,
            told: Vec::new(),
            provider: None,
        }
    });
}
