//! The Hetzner driver against the fake Hetzner API: requests per operation beside the ideal, and 100
//! creates under a small rate limit, paced and unpaced, as ratios to what the budget allows.
//! Run: `cargo bench --bench hetzner` (about 30 s).

use std::sync::Arc;
use std::time::{Duration, Instant};

use orca::hetzner::{Config, HetznerProvider};
use orca::{MachineSpec, Provider, RetryPolicy};
use orca_fakes::hetzner::{FakeHetzner, Options};

/// The driver's default share of the rate limit left for other tools.
const RESERVE: f64 = 0.05;

async fn provider(fake: &FakeHetzner, pacing: bool) -> HetznerProvider {
    let config = Config::builder()
        .token(fake.token())
        .endpoint(fake.url())
        .retry(RetryPolicy {
            max_retries: 10,
            initial_backoff: Duration::from_millis(20),
            max_backoff: Duration::from_secs(2),
            max_elapsed: Duration::from_secs(60),
            ..RetryPolicy::default()
        })
        .poll_interval(Duration::from_millis(1))
        .pacing(pacing)
        .rate_reserve(RESERVE)
        .build()
        .expect("settings");
    HetznerProvider::new(config, "bench").await.expect("owner")
}

fn spec(i: usize, pool: &str) -> MachineSpec {
    MachineSpec::new(format!("{pool}-{i}"), "cx23", "fsn1", pool)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> orca::Result<()> {
    // Requests per operation, without a rate limit. Actions end at once (on their first read).
    let fake = FakeHetzner::start_with(Options {
        action_time: Duration::ZERO,
        ..Options::default()
    })
    .await
    .expect("fake");
    let c = fake.control().clone();
    let p = provider(&fake, true).await;
    let n = 20;
    let before = c.requests();
    p.create(&spec(0, "ops")).await?;
    let first = c.requests() - before;
    let before = c.requests();
    for i in 1..=n {
        p.create(&spec(i, "ops")).await?;
    }
    let per_create = (c.requests() - before) as f64 / n as f64;
    println!("hetzner fake: requests per operation (ideal in brackets)");
    println!(
        "create, first:  {first} (type + image + POST + action + start action + server read [6])"
    );
    println!("create, next:   {per_create:.2} (POST + action read + start action read + server read [4])");
    let before = c.requests();
    p.arch("cx23").await?;
    println!("arch, cached:   {} [0]", c.requests() - before);
    let listed = p.machines("ops").await?;
    let before = c.requests();
    for m in &listed {
        p.delete(&m.id).await?;
    }
    println!(
        "delete:         {:.2} (owner read + DELETE + action read [3])",
        (c.requests() - before) as f64 / listed.len() as f64
    );
    for total in [1usize, 50, 51, 120, 1000] {
        let pool = format!("l{total}");
        for i in 0..total {
            fake.insert_server(
                &format!("{pool}-{i}"),
                "cx23",
                "fsn1",
                &[
                    ("orca", "pool"),
                    ("orca-pool", &pool),
                    ("orca-owner", "bench"),
                ],
            );
        }
        let before = c.requests();
        let t = Instant::now();
        let got = p.machines(&pool).await?;
        let took = t.elapsed();
        assert_eq!(got.len(), total);
        let reqs = c.requests() - before;
        let ideal = total.div_ceil(50) as u64;
        println!(
            "list of {total:>4}:   {reqs} requests (ideal ceil({total}/50) = {ideal}, ratio {:.2}), {:.1} ms",
            reqs as f64 / ideal as f64,
            took.as_secs_f64() * 1e3
        );
    }

    // 100 creates, 20 at a time, under a budget of 100 requests refilled at 20 a second.
    let (limit, refill, creates) = (100u32, 20.0f64, 100usize);
    println!(
        "\n{creates} creates, 20 concurrent, rate limit {limit} requests refilled at {refill}/s, {:.0} % kept for other tools",
        RESERVE * 100.0
    );
    for pacing in [true, false] {
        let fake = FakeHetzner::start_with(Options {
            action_time: Duration::ZERO,
            rate_limit: limit,
            refill_per_second: refill,
            ..Options::default()
        })
        .await
        .expect("fake");
        let p = Arc::new(provider(&fake, pacing).await);
        p.arch("cx23").await?; // the type lookup, once
        let t = Instant::now();
        let sem = Arc::new(tokio::sync::Semaphore::new(20));
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..creates {
            let (p, sem) = (p.clone(), sem.clone());
            tasks.spawn(async move {
                let _permit = sem.acquire().await;
                p.create(&spec(i, "rl")).await
            });
        }
        let mut failed = 0;
        while let Some(r) = tasks.join_next().await {
            if !matches!(r, Ok(Ok(orca::Created::Machine(_)))) {
                failed += 1;
            }
        }
        let took = t.elapsed().as_secs_f64();
        let served = fake.control().requests();
        let refused = fake.rate_limited();
        // The ideal: every request a create needs, none refused; the bucket less the reserve at once,
        // the rest at the refill rate.
        let ideal_requests = 1 + 1 + 4 * creates as u64; // type, image, 4 per create
        let usable = (f64::from(limit) * (1.0 - RESERVE)).floor() as u64;
        let ideal_time = (ideal_requests.saturating_sub(usable) as f64 / refill).max(0.01);
        println!(
            "{}: {} made, {failed} failed; {served} requests ({refused} refused with 429), ratio {:.2} to the ideal {ideal_requests}; {took:.1} s, ratio {:.2} to the ideal {ideal_time:.1} s; {} paced waits",
            if pacing { "paced  " } else { "unpaced" },
            creates - failed,
            served as f64 / ideal_requests as f64,
            took / ideal_time,
            p.pacing_stats().0,
        );
        // Where the requests went: method and path, ids folded.
        let mut by: std::collections::BTreeMap<String, usize> = Default::default();
        for l in fake.control().log() {
            let path = l.path.split('?').next().unwrap_or_default();
            let path: Vec<&str> = path
                .split('/')
                .map(|p| {
                    if p.bytes().all(|b| b.is_ascii_digit()) && !p.is_empty() {
                        "{id}"
                    } else {
                        p
                    }
                })
                .collect();
            *by.entry(format!("{} {}", l.method, path.join("/")))
                .or_default() += 1;
        }
        println!("         requests by call: {by:?}");
        if failed > 0 {
            println!(
                "         ({failed} creates gave up throttled after the retry policy's 10 retries: the short time is theirs)"
            );
        }
    }
    Ok(())
}
