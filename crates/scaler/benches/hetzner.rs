//! 100 creates by the autoscaler against the fake Hetzner API under its rate limit: the time as a
//! ratio to the floor the limit sets, the requests as a ratio to the fewest the creates need, and the
//! count of 429s, for several `--parallel` values: the default (4) and two wider ones.
//! Run: `cargo bench -p orca-scaler --bench hetzner` (about two minutes).
//!
//! The budget is the root bench's (`benches/hetzner.rs`): a bucket of 100 requests refilled at 20 a
//! second; the driver keeps 5 % of it for other tools. The provider is made as the binary makes it,
//! through `orca::of_with("hetzner", owner, &settings)`.

use std::time::{Duration, Instant};

use orca::Settings as OrcaSettings;
use orca_fakes::hetzner::{FakeHetzner, Options};
use orca_scaler::{FileStore, Scaler, Settings};

const CREATES: usize = 100;
const LIMIT: u32 = 100;
const REFILL: f64 = 20.0;
/// The driver's default share of the budget left for other tools.
const RESERVE: f64 = 0.05;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    println!(
        "orca-pool: {CREATES} creates on the fake Hetzner API, rate limit {LIMIT} requests refilled at {REFILL}/s ({:.0} % kept for other tools)",
        RESERVE * 100.0
    );
    for parallel in [Settings::new("d", 1, Vec::new()).parallel, 8, 20] {
        let fake = FakeHetzner::start_with(Options {
            action_time: Duration::ZERO,
            rate_limit: LIMIT,
            refill_per_second: REFILL,
            ..Options::default()
        })
        .await
        .expect("fake");
        let p = orca::of_with(
            "hetzner",
            "bench",
            &OrcaSettings::new()
                .with("HCLOUD_TOKEN", fake.token())
                .with("ORCA_HCLOUD_ENDPOINT", fake.url()),
        )
        .await
        .expect("provider");
        let dir = tempfile::tempdir().expect("dir");
        let mut settings = Settings::new("bench", CREATES, vec!["cx23@fsn1".parse().unwrap()]);
        settings.parallel = parallel;
        orca_scaler::check_offerings(&*p, &settings)
            .await
            .expect("offerings");
        let mut scaler = Scaler::new(
            settings,
            Box::new(FileStore::open(dir.path().join("rec.json")).expect("store")),
        );
        let t = Instant::now();
        let mut passes = 0;
        let mut failed = 0;
        let mut made = 0;
        while made < CREATES && passes < 10 {
            let r = scaler.pass(&*p, chrono::Utc::now()).await;
            passes += 1;
            failed += r.failures();
            made = r.serving;
            if made < CREATES {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        let took = t.elapsed().as_secs_f64();
        let served = fake.control().requests();
        let refused = fake.rate_limited();
        // The fewest requests: the start's type lookup, the image lookup, the pass's listing, and 4 per
        // create (POST, action, start action, server read). The floor: the bucket less the reserve at
        // once, the rest at the refill rate.
        let ideal = 3 + 4 * CREATES as u64;
        let usable = (f64::from(LIMIT) * (1.0 - RESERVE)).floor() as u64;
        let floor = ideal.saturating_sub(usable) as f64 / REFILL;
        println!(
            "--parallel {parallel:>2}: {made} made in {passes} pass(es), {failed} failures; {took:.1} s, ratio {:.2} to the floor {floor:.1} s; {served} requests, ratio {:.2} to the fewest {ideal}; {refused} answered 429",
            took / floor,
            served as f64 / ideal as f64,
        );
    }
}
