//! What the plugin costs: listing 1,000 machines and making 100 through `soul-cloud-fake` against
//! the same in-memory provider in process, as ratios (plugin / in process), with the simulated
//! cloud's request counts to show both did the same work; then listing 1,000 servers on the fake
//! Hetzner API through `soul-cloud-hetzner` against the Hetzner driver in process.
//!
//! Wall time is what a caller waits; on a machine shared with other work it is mostly the
//! scheduler's, so each call's CPU time (both processes, every thread) and the times its threads
//! were put on a CPU are reported beside it: those do not depend on what else runs. The breakdown
//! shows where the plugin's time goes: what the host cannot avoid (building the same 1,000
//! machines again from the reply, as costly as a copy of them), the wire's steps and one empty
//! round trip.
//! Run: `cargo bench -p orca-plugin --bench plugin --no-default-features --features hetzner` (the
//! listing on the fake Hetzner API is left out without `hetzner`).

use std::time::{Duration, Instant};

use orca_machines::memory::MemoryCloud;
use orca_machines::{Machine, MachineSpec, Provider};
use orca_plugin::proto::fake::fake_control_client::FakeControlClient;
use orca_plugin::proto::fake::RequestsRequest;
use orca_plugin::proto::v1 as pb;
use orca_plugin::{PluginCommand, PluginProvider, PROTOCOL_VERSION};
use prost::Message;

const FAKE: &str = env!("CARGO_BIN_EXE_soul-cloud-fake");
#[cfg(feature = "hetzner")]
const HETZNER: &str = env!("CARGO_BIN_EXE_soul-cloud-hetzner");
const MACHINES: usize = 1000;
const CREATES: usize = 100;
const LISTINGS: usize = 61;

/// CPU time and times on a CPU of some processes' threads, from the kernel's scheduler statistics
/// (`/proc/<pid>/task/<tid>/schedstat`: nanoseconds on a CPU, nanoseconds waiting, timeslices),
/// except this process's CPU time, which the kernel's clock gives exactly (the statistics of a
/// thread that runs now lag).
#[derive(Debug, Default, Clone, Copy)]
struct Cost {
    cpu_ns: u64,
    slices: u64,
}

impl Cost {
    fn of(pids: &[u32]) -> Cost {
        let mut c = Cost::default();
        for pid in pids {
            let me = *pid == std::process::id();
            let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
                continue;
            };
            for t in tasks.flatten() {
                let s = std::fs::read_to_string(t.path().join("schedstat")).unwrap_or_default();
                let f: Vec<u64> = s
                    .split_whitespace()
                    .filter_map(|x| x.parse().ok())
                    .collect();
                if let [cpu, _, slices] = f[..] {
                    c.cpu_ns += if me { 0 } else { cpu };
                    c.slices += slices;
                }
            }
            if me {
                c.cpu_ns += own_cpu_ns();
            }
        }
        c
    }

    fn minus(self, before: Cost) -> Cost {
        Cost {
            cpu_ns: self.cpu_ns - before.cpu_ns,
            slices: self.slices - before.slices,
        }
    }

    fn add(&mut self, other: Cost) {
        self.cpu_ns += other.cpu_ns;
        self.slices += other.slices;
    }
}

fn own_cpu_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// One measured run of `f`: its wall time and what it cost the processes `pids`.
async fn measured<T, F: std::future::Future<Output = T>>(
    pids: &[u32],
    f: F,
) -> (T, Duration, Cost) {
    let before = Cost::of(pids);
    let t = Instant::now();
    let out = f.await;
    let took = t.elapsed();
    (out, took, Cost::of(pids).minus(before))
}

fn spec(i: usize) -> MachineSpec {
    MachineSpec::new(format!("b-{i}"), "amd64-small", "zone-a", "bench")
}

/// Makes `MACHINES` machines; the time and cost of the last `CREATES` of them.
async fn fill(p: &dyn Provider, pids: &[u32]) -> orca_machines::Result<(Duration, Cost)> {
    for i in CREATES..MACHINES {
        p.create(&spec(i)).await?;
    }
    let (made, took, cost) = measured(pids, async {
        for i in 0..CREATES {
            p.create(&spec(i)).await?;
        }
        Ok::<_, orca_machines::Error>(())
    })
    .await;
    made?;
    Ok((took, cost))
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// `a - b` in microseconds (a step's time is a difference of two medians: noise can make it
/// negative).
fn us_minus(a: Duration, b: Duration) -> f64 {
    us(a) - us(b)
}

/// Listings in turns, so that a machine busy with other work slows both alike: the median wall
/// times and the mean costs of each side.
async fn listings(
    local: &dyn Provider,
    plugin: &PluginProvider,
    me: u32,
) -> orca_machines::Result<[(Duration, Cost); 2]> {
    let child = plugin.pid().await.expect("the plugin runs");
    let (mut walls, mut costs) = ([Vec::new(), Vec::new()], [Cost::default(); 2]);
    for _ in 0..LISTINGS {
        for (side, p, pids) in [
            (0, local, &[me][..]),
            (1, plugin as &dyn Provider, &[me, child][..]),
        ] {
            let (listed, took, cost) = measured(pids, p.machines("bench")).await;
            assert_eq!(listed?.len(), MACHINES);
            walls[side].push(took);
            costs[side].add(cost);
        }
    }
    let [local_walls, plugin_walls] = walls;
    let mean = |c: Cost| Cost {
        cpu_ns: c.cpu_ns / LISTINGS as u64,
        slices: c.slices / LISTINGS as u64,
    };
    Ok([
        (median(local_walls), mean(costs[0])),
        (median(plugin_walls), mean(costs[1])),
    ])
}

fn thread_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// The median CPU time of `f` over `LISTINGS` runs (CPU time, not wall: other work on the
/// machine does not count).
fn timed<T>(mut f: impl FnMut() -> T) -> Duration {
    median(
        (0..LISTINGS)
            .map(|_| {
                let t = thread_cpu();
                std::hint::black_box(f());
                thread_cpu() - t
            })
            .collect(),
    )
}

/// Where a listing's time goes, step by step, each timed alone in this process.
async fn breakdown(listed: Vec<Machine>, plugin: &PluginProvider) -> orca_machines::Result<()> {
    let copy = timed(|| listed.clone());
    let to_wire = us_minus(
        timed(|| {
            listed
                .clone()
                .into_iter()
                .map(pb::Machine::from)
                .collect::<Vec<_>>()
        }),
        copy,
    );
    let reply = pb::MachinesReply {
        outcome: Some(pb::machines_reply::Outcome::Machines(pb::MachineList {
            machines: listed.iter().cloned().map(pb::Machine::from).collect(),
        })),
    };
    // Decoded from `Bytes`, as the host decodes a reply: strings are copied out once.
    let bytes = prost::bytes::Bytes::from(reply.encode_to_vec());
    let encode = timed(|| reply.encode_to_vec());
    let decode = timed(|| pb::MachinesReply::decode(bytes.clone()).expect("a reply"));
    let Some(pb::machines_reply::Outcome::Machines(list)) = reply.outcome else {
        unreachable!("made above")
    };
    let from_wire = us_minus(
        timed(|| {
            list.machines
                .clone()
                .into_iter()
                .map(Machine::try_from)
                .collect::<orca_machines::Result<Vec<_>>>()
        }),
        timed(|| list.machines.clone()),
    );
    let mut driver = pb::cloud_driver_client::CloudDriverClient::new(plugin.channel().await?);
    let mut trips = Vec::new();
    for _ in 0..LISTINGS {
        let hello = pb::HandshakeRequest {
            protocol_version: PROTOCOL_VERSION,
        };
        let t = Instant::now();
        driver
            .handshake(hello)
            .await
            .map_err(|s| orca_machines::Error::other(s.to_string()))?;
        trips.push(t.elapsed());
    }
    println!(
        "breakdown of a listing's {} bytes (medians): copy of the 1,000 machines {:.0} us \
         (the least the host adds: it builds them again from the reply); plugin: to the wire \
         {:.0} us, encode {:.0} us; host: decode {:.0} us, from the wire {:.0} us; an empty call's \
         round trip {:.0} us",
        bytes.len(),
        us(copy),
        to_wire,
        us(encode),
        us(decode),
        from_wire,
        us(median(trips))
    );
    Ok(())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> orca_machines::Result<()> {
    let cloud = MemoryCloud::new();
    let local = cloud.provider("bench")?;
    let plugin = PluginProvider::start(PluginCommand::new(FAKE, "bench")).await?;
    let me = std::process::id();
    let child = plugin.pid().await.expect("the plugin runs");
    let (local_creates, local_create_cost) = fill(&local, &[me]).await?;
    let (plugin_creates, plugin_create_cost) = fill(&plugin, &[me, child]).await?;
    let [(local_list, local_cost), (plugin_list, plugin_cost)] =
        listings(&local, &plugin, me).await?;
    let local_requests = cloud.requests();
    let mut console = FakeControlClient::new(plugin.channel().await?);
    let plugin_requests = console
        .requests(RequestsRequest {})
        .await
        .map(|r| r.into_inner().requests)
        .unwrap_or(0);
    assert_eq!(plugin.starts(), 1, "the plugin never restarted");

    println!(
        "in-memory provider, {MACHINES} machines, page size 50: in process vs through soul-cloud-fake"
    );
    print_listing((local_list, local_cost), (plugin_list, plugin_cost));
    let per = |d: Duration| us(d) / CREATES as f64;
    println!(
        "create x{CREATES}: in process {:.1} us each, plugin {:.1} us each, ratio {:.2}; CPU {:.1} us \
         vs {:.1} us each, ratio {:.2}; times on a CPU {:.1} vs {:.1} each",
        per(local_creates),
        per(plugin_creates),
        plugin_creates.as_secs_f64() / local_creates.as_secs_f64(),
        local_create_cost.cpu_ns as f64 / 1e3 / CREATES as f64,
        plugin_create_cost.cpu_ns as f64 / 1e3 / CREATES as f64,
        plugin_create_cost.cpu_ns as f64 / local_create_cost.cpu_ns as f64,
        local_create_cost.slices as f64 / CREATES as f64,
        plugin_create_cost.slices as f64 / CREATES as f64,
    );
    println!(
        "cloud requests: in process {local_requests}, plugin {plugin_requests} (the same work)"
    );
    breakdown(local.machines("bench").await?, &plugin).await?;
    #[cfg(feature = "hetzner")]
    on_hetzner().await?;
    Ok(())
}

/// One listing line: the median wall times, the mean CPU of both processes and their times on a CPU.
fn print_listing(local: (Duration, Cost), plugin: (Duration, Cost)) {
    let ((local_list, local_cost), (plugin_list, plugin_cost)) = (local, plugin);
    println!(
        "list {MACHINES} (median of {LISTINGS}): in process {:.2} ms, plugin {:.2} ms, ratio {:.2}; \
         CPU (both processes) {:.2} ms vs {:.2} ms, ratio {:.2}; times on a CPU {} vs {}",
        ms(local_list),
        ms(plugin_list),
        plugin_list.as_secs_f64() / local_list.as_secs_f64(),
        local_cost.cpu_ns as f64 / 1e6,
        plugin_cost.cpu_ns as f64 / 1e6,
        plugin_cost.cpu_ns as f64 / local_cost.cpu_ns as f64,
        local_cost.slices,
        plugin_cost.slices,
    );
}

/// The same listing where a cloud's API answers it: 1,000 servers of the pool on the fake Hetzner
/// API (in this process, answering at once, 50 servers a page), listed by the Hetzner driver in
/// process and through `soul-cloud-hetzner`. The in-memory provider's listing is a copy of the
/// machines, so there the plugin's encoding and decoding weigh as much as the listing itself; here
/// both sides also parse 20 pages of JSON, as every listing of a real cloud does (without the
/// network's time, which would make the plugin's share smaller still). The fake's own work runs in
/// this process and counts on both sides alike.
#[cfg(feature = "hetzner")]
async fn on_hetzner() -> orca_machines::Result<()> {
    use orca_fakes::hetzner::{FakeHetzner, Options};
    // No rate limit: both sides make the same requests, and waiting is not what is measured here.
    let fake = FakeHetzner::start_with(Options {
        rate_limit: u32::MAX,
        refill_per_second: f64::from(u32::MAX),
        ..Options::default()
    })
    .await
    .map_err(|e| orca_machines::Error::other(format!("the fake Hetzner API: {e}")))?;
    let labels = orca_machines::labels::ownership_labels("bench", "bench");
    let pairs: Vec<(&str, &str)> = labels
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    for i in 0..MACHINES {
        fake.insert_server(&format!("b-{i}"), "cx23", "fsn1", &pairs);
    }
    let settings = orca_fakes::hetzner::driver_settings(&fake);
    let local = orca::of_with("hetzner", "bench", &settings).await?;
    let plugin =
        PluginProvider::start(PluginCommand::new(HETZNER, "bench").settings(settings)).await?;
    let before = fake.control().requests();
    let [local_side, plugin_side] = listings(&*local, &plugin, std::process::id()).await?;
    let requests = fake.control().requests() - before;
    println!(
        "fake Hetzner API, {MACHINES} servers, 50 a page: the Hetzner driver in process vs through \
         soul-cloud-hetzner ({requests} requests for both sides' {} listings)",
        2 * LISTINGS
    );
    print_listing(local_side, plugin_side);
    Ok(())
}
