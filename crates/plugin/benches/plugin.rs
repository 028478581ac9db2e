//! What the plugin costs: listing 1,000 machines and making 100 through `soul-cloud-fake` against
//! the same in-memory provider in process, as ratios (plugin time / in-process time), with the
//! simulated cloud's request counts to show both did the same work.
//! Run: `cargo bench -p orca-plugin --bench plugin`.

use std::time::{Duration, Instant};

use orca_machines::memory::MemoryCloud;
use orca_machines::{MachineSpec, Provider};
use orca_plugin::proto::fake::fake_control_client::FakeControlClient;
use orca_plugin::proto::fake::RequestsRequest;
use orca_plugin::{PluginCommand, PluginProvider};

const FAKE: &str = env!("CARGO_BIN_EXE_soul-cloud-fake");
const MACHINES: usize = 1000;
const CREATES: usize = 100;
const LISTINGS: usize = 61;

fn spec(i: usize) -> MachineSpec {
    MachineSpec::new(format!("b-{i}"), "amd64-small", "zone-a", "bench")
}

/// Makes `MACHINES` machines; the time of the last `CREATES` of them.
async fn fill(p: &dyn Provider) -> orca_machines::Result<Duration> {
    for i in CREATES..MACHINES {
        p.create(&spec(i)).await?;
    }
    let t = Instant::now();
    for i in 0..CREATES {
        p.create(&spec(i)).await?;
    }
    Ok(t.elapsed())
}

async fn list(p: &dyn Provider) -> orca_machines::Result<Duration> {
    let t = Instant::now();
    let listed = p.machines("bench").await?;
    let took = t.elapsed();
    assert_eq!(listed.len(), MACHINES);
    Ok(took)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> orca_machines::Result<()> {
    let cloud = MemoryCloud::new();
    let local = cloud.provider("bench")?;
    let plugin = PluginProvider::start(PluginCommand::new(FAKE, "bench")).await?;
    let local_creates = fill(&local).await?;
    let plugin_creates = fill(&plugin).await?;
    // In turns, so that a machine busy with other work slows both alike.
    let (mut local_lists, mut plugin_lists) = (Vec::new(), Vec::new());
    for _ in 0..LISTINGS {
        local_lists.push(list(&local).await?);
        plugin_lists.push(list(&plugin).await?);
    }
    let (local_list, plugin_list) = (median(local_lists), median(plugin_lists));
    let local_requests = cloud.requests();
    let mut console = FakeControlClient::new(plugin.channel().await?);
    let plugin_requests = console
        .requests(RequestsRequest {})
        .await
        .map(|r| r.into_inner().requests)
        .unwrap_or(0);

    println!(
        "in-memory provider, {MACHINES} machines, page size 50: in process vs through soul-cloud-fake"
    );
    println!(
        "list {MACHINES} (median of {LISTINGS}): in process {:.2} ms, plugin {:.2} ms, ratio {:.2} \
         (the plugin adds {:.2} ms, {:.1} us a machine)",
        local_list.as_secs_f64() * 1e3,
        plugin_list.as_secs_f64() * 1e3,
        plugin_list.as_secs_f64() / local_list.as_secs_f64(),
        (plugin_list.as_secs_f64() - local_list.as_secs_f64()) * 1e3,
        (plugin_list.as_secs_f64() - local_list.as_secs_f64()) * 1e6 / MACHINES as f64,
    );
    println!(
        "create x{CREATES}: in process {:.1} us each, plugin {:.1} us each, ratio {:.2}",
        local_creates.as_secs_f64() * 1e6 / CREATES as f64,
        plugin_creates.as_secs_f64() * 1e6 / CREATES as f64,
        plugin_creates.as_secs_f64() / local_creates.as_secs_f64()
    );
    println!(
        "cloud requests: in process {local_requests}, plugin {plugin_requests} (the same work)"
    );
    Ok(())
}
