//! The Compute Engine driver against the fake Compute Engine API: requests per operation beside the
//! ideal, and the cost of listing 1,000 instances (requests against ceil(N / maxResults), client time)
//! in one zone (`instances.list`) and across every zone (`instances.aggregatedList`).
//! Run: `cargo bench --bench gce`. Short-running: everything is on 127.0.0.1.

use std::time::{Duration, Instant};

use orca::gce::{Config, GceProvider};
use orca::labels::Labels;
use orca::{FirewallRules as _, MachineLabels as _};
use orca::{MachineSpec, Provider, RetryPolicy};
use orca_fakes::gce::{FakeGce, NETWORK, PROJECT, SUBNET, ZONE};
use serde_json::json;

async fn provider(fake: &FakeGce, owner: &str, page_size: u32) -> orca::Result<GceProvider> {
    provider_in(fake, owner, page_size, Some(ZONE)).await
}

async fn provider_in(
    fake: &FakeGce,
    owner: &str,
    page_size: u32,
    zone: Option<&str>,
) -> orca::Result<GceProvider> {
    let mut config = Config::builder()
        .project(PROJECT)
        .network(NETWORK)
        .subnet(SUBNET)
        .credentials_json(fake.service_account_json())
        .endpoint(fake.endpoint())
        .page_size(page_size)
        .retry(RetryPolicy::fast());
    if let Some(z) = zone {
        config = config.zone(z);
    }
    GceProvider::new(config.build()?, owner).await
}

struct Meter<'a> {
    fake: &'a FakeGce,
    before: u64,
    started: Instant,
}

impl<'a> Meter<'a> {
    fn start(fake: &'a FakeGce) -> Self {
        Meter {
            fake,
            before: fake.control().requests(),
            started: Instant::now(),
        }
    }
    fn stop(self) -> (u64, Duration) {
        (
            self.fake.control().requests() - self.before,
            self.started.elapsed(),
        )
    }
}

fn line(what: &str, n: u64, requests: u64, ideal: f64, why: &str, time: Duration) {
    let per = requests as f64 / n as f64;
    println!(
        "{what:<22} {per:>5.2} requests each (ideal {ideal:.0}: {why}), {:>8.2} ms each",
        time.as_secs_f64() * 1e3 / n as f64
    );
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> orca::Result<()> {
    let fake = FakeGce::start().await.expect("the fake starts");
    fake.set_operation_time(std::time::Duration::ZERO);
    let p = provider(&fake, "bench", 500).await?;
    // The first call fetches a token and the machine type's architecture; both are cached after.
    let m = Meter::start(&fake);
    p.arch("e2-small").await?;
    let (r, t) = m.stop();
    println!("Compute Engine driver against the fake ({})", fake.url());
    line(
        "first call (token+arch)",
        1,
        r,
        2.0,
        "token, machineTypes.get",
        t,
    );

    let n = 20u64;
    let m = Meter::start(&fake);
    let mut ids = Vec::new();
    for i in 0..n {
        let made = p
            .create(&MachineSpec::new(
                format!("ops-{i}"),
                "e2-small",
                ZONE,
                "ops",
            ))
            .await?;
        ids.push(made.machine().expect("stock").id);
    }
    let (r, t) = m.stop();
    line(
        "create",
        n,
        r,
        3.0,
        "insert, operations.wait, instances.get",
        t,
    );

    let m = Meter::start(&fake);
    for id in &ids {
        p.stop(id).await?;
    }
    let (r, t) = m.stop();
    line("stop", n, r, 4.0, "get (owner), stop, wait, get", t);

    let m = Meter::start(&fake);
    for id in &ids {
        p.start(id).await?;
    }
    let (r, t) = m.stop();
    line("start", n, r, 4.0, "get (owner), start, wait, get", t);

    let mut ready = Labels::new();
    ready.insert("state".into(), "ready".into());
    let m = Meter::start(&fake);
    for id in &ids {
        p.set_labels(id, &ready, &[]).await?;
    }
    let (r, t) = m.stop();
    line("set_labels", n, r, 4.0, "get, setLabels, wait, get", t);

    let m = Meter::start(&fake);
    for id in &ids {
        p.resize(id, "e2-medium").await?;
    }
    let (r, t) = m.stop();
    line(
        "resize (running)",
        n,
        r,
        8.0,
        "get, stop+wait, setMachineType+wait, start+wait, get",
        t,
    );

    let m = Meter::start(&fake);
    for id in &ids {
        p.delete(id).await?;
    }
    let (r, t) = m.stop();
    line("delete", n, r, 3.0, "get (owner), delete, wait", t);

    let m = Meter::start(&fake);
    for _ in 0..n {
        p.rule(orca_fakes::gce::SSH_RULE).await?;
    }
    let (r, t) = m.stop();
    line("firewall rule", n, r, 1.0, "firewalls.get", t);

    let m = Meter::start(&fake);
    for _ in 0..n {
        p.set_source_ranges(orca_fakes::gce::SSH_RULE, &["198.51.100.9/32".to_string()])
            .await?;
    }
    let (r, t) = m.stop();
    line(
        "set_source_ranges",
        n,
        r,
        4.0,
        "get (its network), patch, wait, get",
        t,
    );

    // Listing 1,000 instances of one owner and pool, with 1,000 more of another owner in the zone.
    let count = 1000usize;
    fake.seed_instances(
        ZONE,
        "mine",
        count,
        "e2-small",
        json!({"orca": "pool", "orca-pool": "bulk", "orca-owner": "bench"}),
    );
    fake.seed_instances(
        ZONE,
        "theirs",
        count,
        "e2-small",
        json!({"orca": "pool", "orca-pool": "bulk", "orca-owner": "other"}),
    );
    println!("listing {count} instances (and {count} of another owner in the same zone):");
    for (how, zone) in [
        ("one zone, instances.list", Some(ZONE)),
        ("every zone, aggregatedList", None),
    ] {
        println!(" {how}:");
        for page in [500u32, 100, 50] {
            let lp = provider_in(&fake, "bench", page, zone).await?;
            lp.arch("e2-small").await?; // token
            let m = Meter::start(&fake);
            let listed = lp.machines("bulk").await?;
            let (r, t) = m.stop();
            assert_eq!(listed.len(), count);
            let ideal = count.div_ceil(page as usize) as u64;
            println!(
                "  maxResults {page:>3}: {r:>3} requests (ideal ceil({count}/{page}) = {ideal}, ratio {:.2}), {:>7.1} ms",
                r as f64 / ideal as f64,
                t.as_secs_f64() * 1e3
            );
        }
    }
    Ok(())
}
