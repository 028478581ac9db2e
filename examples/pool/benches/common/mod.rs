//! The bench code the three clouds share: 100 creates, then 100 deletes, by the autoscaler on one
//! cloud's fake API, whose actions or operations take seconds of tokio's paused clock (so minutes of
//! cloud time cost no wall time), beside the floor that the cloud's pace sets.
//!
//! The floor of a phase (the creates, then the deletes, each starting with a full rate-limit bucket)
//! is the larger of two times, each a bound no scaler can beat:
//! - the rate limit's: the fewest requests of the phase, less the bucket's usable share (what the
//!   driver does not keep for other tools), at the refill rate;
//! - the last call's: the refill time of the requests made before the last change can start (with
//!   every call at once and no limit: the requests up to the last POST, PUT or DELETE; less the
//!   usable share), then what one create (or delete) alone still takes after its last change (all of
//!   it where the change is its first request, as Hetzner's POST; the last of four operations for an
//!   Azure VM, whose PUT of the VM comes after its address and interface).
//!
//! The fewest requests and one call's duration are measured on the same fake without a rate limit:
//! every call of the phase at once (the driver's best batching of its polls), and one call alone.
//! A cloud with a bucket per kind of request (Azure's reads, writes and deletes) has each bound for
//! each bucket, counted in the requests of its kind; the floor is the largest.

use std::future::Future;
use std::time::Duration;

use std::sync::Arc;

use axum::http::Method;
use futures::future::BoxFuture;
use orca::Settings as OrcaSettings;
use orca_fakes::Control;
use orca_scaler::{FileStore, Scaler, Settings};
use tokio::time::Instant;

/// Machines made, then deleted.
pub const MACHINES: usize = 100;
/// How long each action or operation runs.
pub const ACTION_TIME: Duration = Duration::from_secs(10);
/// `orca-pool`'s default `--interval`: the pause after a pass that left work for the next.
const INTERVAL: Duration = Duration::from_secs(30);
/// The `--parallel` values measured beside the default.
const PARALLEL: [usize; 3] = [4, 8, 20];

/// A cloud's rate limit: a bucket of `bucket` requests refilled at `refill` a second, counting the
/// requests `counts` says (by method and path; `name` names them), of which the driver keeps
/// `reserve` (a share) for other tools. With `interval`, the cloud counts `bucket` requests in fixed
/// intervals of that length instead (Compute Engine's rate quotas, a minute each): the bucket is
/// then the floor's reading that needs no knowledge of where the intervals start, and each run is
/// also measured against the floor of the intervals its phases met ([`Fake::intervals_from`]).
#[derive(Debug, Clone, Copy)]
pub struct Limit {
    pub bucket: u32,
    pub refill: f64,
    pub reserve: f64,
    pub name: &'static str,
    pub counts: fn(&Method, &str) -> bool,
    pub interval: Option<Duration>,
}

/// Every request.
#[allow(dead_code)]
pub fn every(_: &Method, _: &str) -> bool {
    true
}

impl Limit {
    /// The requests the driver may spend at once.
    fn usable(&self) -> f64 {
        (f64::from(self.bucket) * (1.0 - self.reserve)).floor()
    }

    /// The refill time of `requests` beyond the usable share.
    fn time_for(&self, requests: f64) -> f64 {
        (requests - self.usable()).max(0.0) / self.refill
    }

    /// Under fixed intervals, the wait before the last of `requests` can go, for a phase that
    /// started `into` seconds into an interval: none while the first interval holds them, else to
    /// the start of the interval that does.
    fn interval_time_for(&self, requests: f64, into: f64) -> f64 {
        let length = self.interval.map_or(0.0, |i| i.as_secs_f64());
        let later = (requests / self.usable()).ceil() - 1.0;
        if later < 1.0 {
            0.0
        } else {
            (length - into) + (later - 1.0) * length
        }
    }
}

/// One running fake and how to reach it.
pub struct Fake {
    /// The provider kind for `orca::of_with`.
    pub kind: &'static str,
    /// The driver's settings, pointing at the fake.
    pub settings: OrcaSettings,
    /// The offering the pool is made of.
    pub offering: String,
    /// The fake's request log.
    pub control: Arc<Control>,
    /// Whatever must live as long as the fake (the server, a credentials file).
    pub _keep: Box<dyn std::any::Any>,
    /// When one of the fake's fixed rate-limit intervals started, on tokio's clock: they follow
    /// each other from there, before and after (see [`Limit::interval`]).
    pub intervals_from: Option<Instant>,
    /// The settings that tell the driver the rate limit, for one more run at the default settings
    /// with them (a limit the driver otherwise learns).
    pub told: Vec<(&'static str, String)>,
    /// Makes the provider from the settings where the driver needs more than settings (the fake's
    /// wall clock, which on the paused clock no driver reads from the system); `None`:
    /// `orca::of_with`.
    pub provider: Option<MakeProvider>,
}

/// A provider made from settings (see [`Fake::provider`]).
pub type MakeProvider = Box<dyn Fn(OrcaSettings) -> BoxFuture<'static, Arc<dyn orca::Provider>>>;

/// What one phase cost.
#[derive(Debug, Default, Clone)]
struct Phase {
    secs: f64,
    /// From the answer to the phase's last change to the phase's end.
    tail: f64,
    requests: u64,
    /// The method and path of the phase's requests, in order.
    requests_made: Vec<(Method, String)>,
    throttled: u64,
    passes: usize,
    started: Option<Instant>,
}

impl Phase {
    /// The requests of `kind`: all of them, and those up to and including the phase's last POST,
    /// PUT, PATCH or DELETE.
    fn of(&self, l: &Limit) -> (f64, f64) {
        let made = &self.requests_made;
        let last = made
            .iter()
            .rposition(|(m, p)| is_change(m, p))
            .map_or(0, |i| i + 1);
        let count =
            |rs: &[(Method, String)]| rs.iter().filter(|(m, p)| (l.counts)(m, p)).count() as f64;
        (count(made), count(&made[..last]))
    }
}

/// Whether a request changes something: a POST, PUT, PATCH or DELETE, except Compute Engine's
/// `operations.wait`, a POST that only waits for an operation.
fn is_change(method: &Method, path: &str) -> bool {
    let changes = [Method::POST, Method::PUT, Method::PATCH, Method::DELETE];
    let path = path.split('?').next().unwrap_or(path);
    changes.contains(method) && !path.ends_with("/wait")
}

/// The creates and the deletes of one run.
#[derive(Debug, Default, Clone)]
struct Run {
    create: Phase,
    delete: Phase,
}

/// The floor of `r` under its limits' fixed intervals, as its phases met them (none without any),
/// the fewest requests and one call's tail from the unlimited runs `all` and `one`.
fn interval_floor(limits: &[Limit], fake: &Fake, r: &Run, all: &Run, one: &Run) -> Option<f64> {
    let from = fake.intervals_from?;
    let fixed: Vec<&Limit> = limits.iter().filter(|l| l.interval.is_some()).collect();
    if fixed.is_empty() {
        return None;
    }
    let phases: [fn(&Run) -> &Phase; 2] = [|r| &r.create, |r| &r.delete];
    let floor = phases.iter().map(|p| {
        let started = p(r).started.unwrap_or(from);
        fixed.iter().fold(p(one).secs, |floor, l| {
            let length = l.interval.unwrap_or_default().as_secs_f64();
            let into = (started - from).as_secs_f64() % length;
            let (fewest, before) = p(all).of(l);
            floor
                .max(l.interval_time_for(fewest, into))
                .max(l.interval_time_for(before, into) + p(one).tail)
        })
    });
    Some(floor.sum())
}

/// Runs the bench of one cloud: `start(limited)` starts a fresh fake, with the cloud's rate limits
/// `limits` (none: the fake has none) or without any.
pub fn main<F, S>(cloud: &str, limits: &[Limit], start: S)
where
    S: Fn(bool) -> F,
    F: Future<Output = Fake>,
{
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("runtime")
        .block_on(bench(cloud, limits, start));
}

async fn bench<F, S>(cloud: &str, limits: &[Limit], start: S)
where
    S: Fn(bool) -> F,
    F: Future<Output = Fake>,
{
    let rate = if limits.is_empty() {
        "no rate limit in the fake".to_string()
    } else {
        let each: Vec<String> = limits
            .iter()
            .map(|l| match l.interval {
                Some(i) => format!(
                    "{} {} in each {} s of the wall clock ({:.0} % kept for other tools)",
                    l.bucket,
                    l.name,
                    i.as_secs(),
                    l.reserve * 100.0
                ),
                None => format!(
                    "{} {} refilled at {}/s ({:.0} % kept for other tools)",
                    l.bucket,
                    l.name,
                    l.refill,
                    l.reserve * 100.0
                ),
            })
            .collect();
        format!("rate limit {}", each.join(", "))
    };
    println!(
        "orca-pool on the fake {cloud} API: {MACHINES} creates, then {MACHINES} deletes; actions of {} s on tokio's paused clock; {rate}",
        ACTION_TIME.as_secs()
    );
    let one = run(&start(false).await, 1, Some(1)).await;
    let all = run(&start(false).await, MACHINES, Some(MACHINES)).await;
    let floor = |p: fn(&Run) -> &Phase| {
        let alone = p(&one).secs;
        limits.iter().fold(alone, |floor, l| {
            let (fewest, before) = p(&all).of(l);
            floor
                .max(l.time_for(fewest))
                .max(l.time_for(before) + p(&one).tail)
        })
    };
    let (create_floor, delete_floor) = (floor(|r| &r.create), floor(|r| &r.delete));
    let floor_secs = create_floor + delete_floor;
    let fewest = all.create.requests + all.delete.requests;
    let what = if limits.iter().any(|l| l.interval.is_some()) {
        "the bucket's reading of the floor (each run's floor below is that of the intervals it met)"
    } else {
        "floor"
    };
    println!(
        "{what}: {floor_secs:.1} s (creates {create_floor:.1} s, one alone {:.1} s, {:.1} s of it after its last change; deletes {delete_floor:.1} s, one alone {:.1} s, {:.1} s after); fewest requests {fewest} ({} + {}: every call at once, no limit)",
        one.create.secs,
        one.create.tail,
        one.delete.secs,
        one.delete.tail,
        all.create.requests,
        all.delete.requests
    );
    let line = |label: String, fake: &Fake, r: &Run| {
        let secs = r.create.secs + r.delete.secs;
        let requests = r.create.requests + r.delete.requests;
        // Under fixed intervals the floor is that of the intervals the run's phases met: no run can
        // beat it, while the bucket's reading (a refill each second) is below what any run can do.
        let (ratio, bucket) = match interval_floor(limits, fake, r, &all, &one) {
            Some(f) => (
                secs / f,
                format!(
                    " ({f:.1} s, the intervals its phases met; {:.2} to the bucket's reading)",
                    secs / floor_secs
                ),
            ),
            None => (secs / floor_secs, String::new()),
        };
        println!(
            "{label}: creates {:.1} s in {} pass(es), deletes {:.1} s in {} pass(es): {secs:.1} s, ratio {ratio:.2} to the floor{bucket}; {requests} requests, ratio {:.2} to the fewest; {} answered 429",
            r.create.secs,
            r.create.passes,
            r.delete.secs,
            r.delete.passes,
            requests as f64 / fewest as f64,
            r.create.throttled + r.delete.throttled,
        );
    };
    for parallel in PARALLEL {
        let fake = start(true).await;
        let r = run(&fake, MACHINES, Some(parallel)).await;
        line(format!("--parallel {parallel:>2}"), &fake, &r);
    }
    let fake = start(true).await;
    let r = run(&fake, MACHINES, None).await;
    line(
        format!(
            "default settings: (--parallel {})",
            orca_scaler::DEFAULT_PARALLEL
        ),
        &fake,
        &r,
    );
    let mut fake = start(true).await;
    if !fake.told.is_empty() {
        let told: Vec<String> = fake.told.iter().map(|(k, v)| format!("{k}={v}")).collect();
        for (k, v) in std::mem::take(&mut fake.told) {
            fake.settings = fake.settings.clone().with(k, v);
        }
        let r = run(&fake, MACHINES, None).await;
        line(
            format!(
                "default settings and {}: (--parallel {})",
                told.join(" "),
                orca_scaler::DEFAULT_PARALLEL
            ),
            &fake,
            &r,
        );
    }
}

/// `machines` creates, then as many deletes, by the scaler at `parallel` (`None`: the default),
/// passes `INTERVAL` apart as `orca-pool` runs them. Between the phases the rate-limit bucket
/// refills.
async fn run(fake: &Fake, machines: usize, parallel: Option<usize>) -> Run {
    let p = match &fake.provider {
        Some(make) => make(fake.settings.clone()).await,
        None => orca::of_with(fake.kind, "bench", &fake.settings)
            .await
            .expect("provider"),
    };
    let dir = tempfile::tempdir().expect("dir");
    let mut settings = Settings::new(
        "bench",
        machines,
        vec![fake.offering.parse().expect("offering")],
    );
    if let Some(n) = parallel {
        settings.parallel = n;
    }
    orca_scaler::check_offerings(&*p, &settings)
        .await
        .expect("offerings");
    let mut scaler = Scaler::new(
        settings,
        Box::new(FileStore::open(dir.path().join("rec.json")).expect("store")),
    );
    let create = phase(fake, &mut scaler, &*p, machines).await;
    // A full bucket again (the fake's limits here refill within a minute).
    tokio::time::sleep(Duration::from_secs(60)).await;
    scaler.settings.size = 0;
    let delete = phase(fake, &mut scaler, &*p, 0).await;
    Run { create, delete }
}

/// Passes until the pool serves `target`.
async fn phase(fake: &Fake, scaler: &mut Scaler, p: &dyn orca::Provider, target: usize) -> Phase {
    let logged = fake.control.log().len();
    let started = Instant::now();
    let mut passes = 0;
    loop {
        let r = scaler.pass(p, chrono::Utc::now()).await;
        passes += 1;
        if r.serving == target && r.failures() == 0 {
            break;
        }
        assert!(
            passes < 50,
            "the pool never reached {target}: {:?}",
            r.actions
        );
        tokio::time::sleep(INTERVAL).await;
    }
    let ended = Instant::now();
    let secs = (ended - started).as_secs_f64();
    let log = fake.control.log();
    let log = &log[logged..];
    let last_change = log.iter().rev().find(|l| is_change(&l.method, &l.path));
    Phase {
        secs,
        tail: last_change.map_or(secs, |l| (ended - l.at).as_secs_f64()),
        requests: log.len() as u64,
        requests_made: log
            .iter()
            .map(|l| (l.method.clone(), l.path.clone()))
            .collect(),
        // Compute Engine refuses over its rate quotas with 403 rateLimitExceeded: no other 403 is
        // answered here.
        throttled: log
            .iter()
            .filter(|l| l.status == 429 || l.status == 403)
            .count() as u64,
        passes,
        started: Some(started),
    }
}
