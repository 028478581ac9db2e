//! `orca-pool`: keeps a pool of machines at its size, on any provider.
//!
//! ```text
//! orca-pool --pool lab --size 3 --offer amd64-small@zone-a --offer arm64-small@zone-b \
//!   --fake-state cloud.json --once
//! ```
//!
//! Exit status of `--once` (and of a run that stops): 0 when every action worked (no stock is not a
//! failure), 1 when an action failed, the pass stopped early or the start was refused, 2 when the pass
//! held everything because the pool has machines a new record does not name (see `--unknown`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use futures::FutureExt;
use orca_scaler::metrics::Metrics;
use orca_scaler::store::Address;
use orca_scaler::{check_offerings, Key, Offering, Scaler, Settings, Store};

/// Keeps a pool of cloud machines at its size. A pass lists the pool, reconciles it with the record
/// (kept per kind, owner and pool; every name written before its create), deletes what is surplus,
/// unknown to an established record, or stopped for longer than the grace, and creates the missing
/// machines from the first offering with stock, a few at a time.
// No `Debug`: `--store` may be a connection string with its password.
#[derive(Parser)]
#[command(
    name = "orca-pool",
    version,
    after_help = "Example, on the simulated cloud kept in cloud.json between runs (run it twice: the second run finds its 3 machines):\n  orca-pool --pool lab --size 3 --offer amd64-small@zone-a --offer arm64-small@zone-b --fake-state cloud.json --once"
)]
struct Args {
    /// The provider kind: fake (in memory, the default: without --fake-state its simulated cloud lives
    /// for this run only, while the record file stays, so a second run finds its machines gone), or a
    /// cloud built into this binary.
    #[arg(long, default_value = "fake", env = orca_scaler::KIND_ENV)]
    kind: String,
    /// The owner (the stack's id) whose machines these are; empty for none.
    #[arg(long, default_value = "", env = orca_scaler::OWNER_ENV)]
    owner: String,
    /// The pool to scale.
    #[arg(long)]
    pool: String,
    /// The target size.
    #[arg(long)]
    size: usize,
    /// An offering TYPE@LOCATION, in order of preference (repeat the flag).
    #[arg(long = "offer", required = true)]
    offers: Vec<Offering>,
    /// Seconds an offering rests after it reported no stock.
    #[arg(long, default_value_t = 300)]
    cooldown: u64,
    /// Architectures the worker image runs on (amd64, arm64; repeat); an offering of another is
    /// refused at start.
    #[arg(long = "arch")]
    archs: Vec<String>,
    /// A cloud-init file for new machines.
    #[arg(long)]
    user_data: Option<PathBuf>,
    /// Where the record is kept: a file path (default: `orca-pool-<pool>.json` here; one process per
    /// file), or a PostgreSQL connection string (postgres://... or host=... dbname=...) for replicas, of which one acts at a
    /// time per kind, owner and pool.
    // The help never shows the value from the environment: a connection string holds the password.
    #[arg(long, alias = "record", env = orca_scaler::STORE_ENV, hide_env_values = true)]
    store: Option<String>,
    /// This replica's name in the PostgreSQL record (default: host name and process id).
    #[arg(long)]
    replica: Option<String>,
    /// Seconds a machine may be stopped (or in an unknown state) before it is deleted and replaced.
    #[arg(long, default_value_t = 600)]
    grace: u64,
    /// Seconds a machine may stay starting from its creation before it is deleted and replaced.
    #[arg(long, default_value_t = 1800)]
    boot_grace: u64,
    /// Seconds a recorded create that never showed up is waited for, once no longer needed, before its
    /// name is retired.
    #[arg(long, default_value_t = 600)]
    settle: u64,
    /// How many creates and deletes run at once at most; below it the cloud's throttling sets the pace.
    #[arg(long, default_value_t = orca_scaler::DEFAULT_PARALLEL)]
    parallel: usize,
    /// Machines of the pool that the record does not name: ask (on a new record, touch nothing and
    /// say so; on an established one, delete them), adopt, or delete. Adopt or delete also settles
    /// a conflict with another writer on the pool, which holds every pass until then.
    #[arg(long, default_value = "ask")]
    unknown: orca_scaler::Unknown,
    /// Serve Prometheus metrics on this address (for example 127.0.0.1:9464), at /metrics.
    #[arg(long)]
    metrics: Option<SocketAddr>,
    /// For kind fake: a state file, so that separate runs share one simulated cloud (without it, the
    /// next run's cloud is empty and the record's machines are gone).
    #[arg(long, env = orca::FAKE_STATE_ENV)]
    fake_state: Option<PathBuf>,
    /// Run one pass and exit (status 1 when an action failed, 2 when it held).
    #[arg(long)]
    once: bool,
    /// Seconds between passes when not --once: above 0, at most a year.
    #[arg(long, default_value_t = 30.0)]
    interval: f64,
    /// Print each pass as one JSON object a line.
    #[arg(long)]
    json: bool,
}

fn main() -> ExitCode {
    // Before anything else: a stop signal from here on is seen, whenever it comes.
    let flag = match Stop::install() {
        Ok(flag) => flag,
        Err(e) => return failed(format_args!("cannot handle stop signals: {e}")),
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => return failed(e),
    };
    runtime.block_on(async {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
        let stop = match Stop::listen(flag) {
            Ok(s) => s,
            Err(e) => return failed(format_args!("cannot handle stop signals: {e}")),
        };
        run(Args::parse(), stop).await.unwrap_or_else(failed)
    })
}

/// Says why orca-pool fails, on standard error; exit status 1.
fn failed(why: impl std::fmt::Display) -> ExitCode {
    eprintln!("orca-pool: {why}");
    ExitCode::FAILURE
}

/// SIGINT and SIGTERM: a flag set by the signal handler itself, registered first thing, so that a
/// signal is seen whenever it comes (also while a pass runs without yielding, as on the in-memory
/// provider: it is seen when the pass ends), and the runtime's streams of them to wait on.
struct Stop {
    flag: Arc<AtomicBool>,
    signals: orca::signals::StopSignals,
}

impl Stop {
    /// The flag, set by the signal handlers registered now (before the runtime).
    fn install() -> std::io::Result<Arc<AtomicBool>> {
        let flag = Arc::new(AtomicBool::new(false));
        for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            signal_hook::flag::register(signal, flag.clone())?;
        }
        Ok(flag)
    }

    /// The flag, and the runtime's streams of the signals to wait on (made within the runtime).
    fn listen(flag: Arc<AtomicBool>) -> std::io::Result<Stop> {
        let signals = orca::signals::StopSignals::install()?;
        Ok(Stop { flag, signals })
    }

    /// Whether a stop signal has come.
    fn requested(&self) -> bool {
        self.flag.load(Ordering::SeqCst)
    }

    /// Until a stop signal comes.
    async fn wait(&mut self) {
        if !self.requested() {
            self.signals.next().await;
        }
    }
}

/// The interval between passes, or why `--interval` is refused.
fn interval(seconds: f64) -> Result<Duration, String> {
    const YEAR: f64 = 365.0 * 86_400.0;
    if seconds.is_finite() && seconds > 0.0 && seconds <= YEAR {
        Ok(Duration::from_secs_f64(seconds))
    } else {
        Err(format!(
            "--interval {seconds}: a number of seconds above 0 and at most a year ({YEAR})"
        ))
    }
}

/// What `--store` names, or why it is refused.
fn store_arg(store: &str) -> Result<Address<'_>, String> {
    Address::parse(store).map_err(|e| format!("refused at start, nothing done:\n  - --store: {e}"))
}

async fn run(args: Args, mut stop: Stop) -> Result<ExitCode, String> {
    if let Some(store) = &args.store {
        store_arg(store)?;
    }
    let every =
        interval(args.interval).map_err(|e| format!("refused at start, nothing done:\n  - {e}"))?;
    let provider = provider(&args).await?;
    let settings = settings(&args)?;
    if let Err(problems) = check_offerings(&*provider, &settings).await {
        return Err(format!(
            "refused at start, nothing done:\n  - {}",
            problems.join("\n  - ")
        ));
    }
    if args.kind == "fake" && args.fake_state.is_none() {
        eprintln!("orca-pool: note: the simulated cloud (--kind fake) lives for this run only; give --fake-state FILE to keep it between runs");
    }
    let store = open_store(&args).await?;
    for note in store.notes() {
        eprintln!("orca-pool: note: {note}");
    }
    let key = Key::new(provider.kind(), provider.owner(), &args.pool);
    let metrics = Arc::new(Metrics::new(&key).with_offerings(&settings.offerings));
    if let Some(addr) = args.metrics {
        let bound = serve_metrics(metrics.clone(), addr)
            .await
            .map_err(|e| format!("--metrics {addr}: {e}"))?;
        eprintln!("orca-pool: metrics on http://{bound}/metrics");
    }
    let mut scaler = Scaler::new(settings, store);
    loop {
        if stop.requested() {
            eprintln!("orca-pool: stopped before a pass");
            return Ok(ExitCode::FAILURE);
        }
        // A record file whose lock file was removed may be another process's now: no pass of this
        // one can act again, so it ends rather than report stopped passes.
        scaler.store().still_held().map_err(|e| e.to_string())?;
        let report = tokio::select! {
            biased;
            _ = stop.wait() => None,
            r = scaler.pass(&*provider, chrono::Utc::now()) => Some(r),
        };
        let Some(report) = report else {
            // Every create and delete begun was recorded before its call: the next run converges
            // from the record.
            eprintln!("orca-pool: stopped during a pass; the record names every machine it began");
            return Ok(ExitCode::FAILURE);
        };
        metrics.observe(&report);
        if scaler.lead_lost().now_or_never().is_some() {
            metrics.lead_lost();
        }
        print(&report, args.json)?;
        if stop.requested() {
            eprintln!("orca-pool: stopped by a signal during the pass; the record names every machine it began");
            return Ok(ExitCode::FAILURE);
        }
        if args.once {
            return Ok(exit_code(&report));
        }
        if !wait(&scaler, &metrics, every, &mut stop).await {
            return Ok(ExitCode::SUCCESS);
        }
    }
}

/// Waits `every` before the next pass, dropping the leader gauge as soon as the lead is lost. False
/// when a stop signal came.
async fn wait(scaler: &Scaler, metrics: &Metrics, every: Duration, stop: &mut Stop) -> bool {
    let sleep = tokio::time::sleep(every);
    tokio::pin!(sleep);
    let mut watching = true;
    loop {
        tokio::select! {
            _ = &mut sleep => return true,
            _ = stop.wait() => return false,
            _ = scaler.lead_lost(), if watching => {
                metrics.lead_lost();
                watching = false;
            }
        }
    }
}

/// The provider `args` name.
async fn provider(args: &Args) -> Result<Arc<dyn orca::Provider>, String> {
    match (&args.kind[..], &args.fake_state) {
        ("fake", Some(path)) => Ok(Arc::new(
            orca::memory::MemoryCloud::persistent(path)
                .and_then(|c| c.provider(&args.owner))
                .map_err(|e| e.to_string())?,
        )),
        (kind, _) => orca::of(kind, &args.owner).await.map_err(|e| e.to_string()),
    }
}

/// The scaler's settings from `args`.
fn settings(args: &Args) -> Result<Settings, String> {
    let user_data = match &args.user_data {
        Some(p) => {
            std::fs::read_to_string(p).map_err(|e| format!("--user-data {}: {e}", p.display()))?
        }
        None => String::new(),
    };
    let mut settings = Settings::new(args.pool.clone(), args.size, args.offers.clone());
    settings.cooldown = Duration::from_secs(args.cooldown);
    settings.archs = args.archs.iter().map(|a| orca::docker_arch(a)).collect();
    settings.user_data = user_data;
    settings.grace = Duration::from_secs(args.grace);
    settings.boot_grace = Duration::from_secs(args.boot_grace);
    settings.settle = Duration::from_secs(args.settle);
    settings.parallel = args.parallel;
    settings.unknown = args.unknown;
    Ok(settings)
}

/// The record's store `--store` names: PostgreSQL, or a file (by default `orca-pool-<pool>.json`).
async fn open_store(args: &Args) -> Result<Box<dyn Store>, String> {
    let default = format!("orca-pool-{}.json", args.pool);
    let named = match args.store.as_deref() {
        Some(store) => store_arg(store)?,
        None => Address::File(&default),
    };
    named
        .open(args.replica.as_deref())
        .await
        .map_err(|e| e.to_string())
}

/// Prints `report`: lines for a person, or one JSON object.
fn print(report: &orca_scaler::PassReport, json: bool) -> Result<(), String> {
    if json {
        println!(
            "{}",
            serde_json::to_string(report).map_err(|e| e.to_string())?
        );
    } else {
        for l in report.lines() {
            println!("{l}");
        }
    }
    Ok(())
}

/// The exit status of a `--once` pass: 1 when it failed, 2 when it held, else 0.
fn exit_code(report: &orca_scaler::PassReport) -> ExitCode {
    if report.failures() > 0 {
        ExitCode::FAILURE
    } else if report.held() {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    }
}

/// Serves `GET /metrics` on `addr` (only there: nothing else is bound) until the runtime stops.
/// Returns the address bound (the port, when `addr` asked for 0).
async fn serve_metrics(metrics: Arc<Metrics>, addr: SocketAddr) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let m = metrics.clone();
            async move {
                (
                    [(
                        axum::http::header::CONTENT_TYPE,
                        "text/plain; version=0.0.4; charset=utf-8",
                    )],
                    m.render(),
                )
            }
        }),
    );
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            eprintln!("orca-pool: the metrics endpoint stopped: {e}");
        }
    });
    Ok(bound)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_names_a_database_a_file_or_nothing_it_can_use() {
        for db in [
            "postgres://orca@db.example/orca",
            "POSTGRESQL://orca@db.example/orca",
            "host=db dbname=orca",
            "hostaddr=10.0.0.5 password=s3cret",
            "sslmode=require",
        ] {
            assert_eq!(store_arg(db), Ok(Address::Postgres(db)), "{db}");
        }
        for file in [
            "orca-pool-lab.json",
            "./a=b.json",
            "/var/lib/orca/lab.json",
            "lab",
        ] {
            assert_eq!(store_arg(file), Ok(Address::File(file)), "{file}");
        }
        for bad in [
            "mysql://u:s3cret@db/orca",
            "file:///tmp/x",
            "https://db.example",
        ] {
            let e = store_arg(bad).unwrap_err();
            assert!(e.contains("--store") && !e.contains("s3cret"), "{bad}: {e}");
        }
    }
}
