//! 100 creates and 100 deletes by the autoscaler on the fake Hetzner API, whose actions take 10 s of
//! tokio's paused clock, under a rate limit of 100 requests refilled at 20 a second: the time as a
//! ratio to the floor, the requests as a ratio to the fewest, the 429s; at `--parallel` 4, 8, 20
//! and at the default settings. Run: `cargo bench -p orca-pool --bench hetzner`.
//!
//! Measured (five debug runs, the same each time): floor 35.7 s, fewest 464 requests; default
//! settings 36.4 s (ratio 1.02), 464 requests, 0 answered 429.

mod common;

use common::{every, Fake, Limit, ACTION_TIME};
use orca_fakes::hetzner::{FakeHetzner, Options};

const LIMIT: Limit = Limit {
    bucket: 100,
    refill: 20.0,
    // The driver's default share of the budget left for other tools.
    reserve: 0.05,
    name: "requests",
    counts: every,
    interval: None,
};

fn main() {
    common::main("Hetzner", &[LIMIT], |limited| async move {
        let fake = FakeHetzner::start_with(Options {
            action_time: ACTION_TIME,
            rate_limit: LIMIT.bucket,
            refill_per_second: LIMIT.refill,
            ..Options::default()
        })
        .await
        .expect("fake");
        if !limited {
            fake.set_rate_limit(u32::MAX, 1e9);
        }
        Fake {
            kind: "hetzner",
            settings: orca_fakes::hetzner::driver_settings(&fake),
            offering: "cx23@fsn1".into(),
            control: fake.control().clone(),
            _keep: Box::new(fake),
            intervals_from: None,
            told: Vec::new(),
            provider: None,
        }
    });
}
