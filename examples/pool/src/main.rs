//! `orca-pool`: keeps a pool of machines at its size, on any provider.
//!
//! ```text
//! orca-pool --pool lab --size 3 --offer amd64-small@zone-a --offer arm64-small@zone-b --once
//! ```

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use clap::Parser;
use orca_pool::{Offering, Record, Scaler, Settings};

/// Keeps a pool of cloud machines at its size: one pass lists the pool, deletes the machines it does
/// not know, and creates the missing ones from the first offering with stock.
#[derive(Debug, Parser)]
#[command(name = "orca-pool", version)]
struct Args {
    /// The provider kind: fake (in memory, the default), or a cloud built into this binary.
    #[arg(long, default_value = "fake", env = "ORCA_KIND")]
    kind: String,
    /// The owner (the stack's id) whose machines these are; empty for none.
    #[arg(long, default_value = "", env = "ORCA_OWNER")]
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
    /// Architectures the worker image runs on (amd64, arm64; repeat); others are skipped.
    #[arg(long = "arch")]
    archs: Vec<String>,
    /// A cloud-init file for new machines.
    #[arg(long)]
    user_data: Option<PathBuf>,
    /// Where the record of known machines is kept (default: orca-pool-<pool>.json here).
    #[arg(long)]
    record: Option<PathBuf>,
    /// For kind fake: a state file, so that separate runs share one simulated cloud.
    #[arg(long, env = "ORCA_FAKE_STATE")]
    fake_state: Option<PathBuf>,
    /// Run one pass and exit.
    #[arg(long)]
    once: bool,
    /// Seconds between passes when not --once.
    #[arg(long, default_value_t = 30)]
    interval: u64,
    /// Print each pass as one JSON object a line.
    #[arg(long)]
    json: bool,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    match run(Args::parse()).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("orca-pool: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), String> {
    let provider: std::sync::Arc<dyn orca::Provider> = match (&args.kind[..], &args.fake_state) {
        ("fake", Some(path)) => std::sync::Arc::new(
            orca::memory::MemoryCloud::persistent(path)
                .and_then(|c| c.provider(&args.owner))
                .map_err(|e| e.to_string())?,
        ),
        (kind, _) => orca::of(kind, &args.owner)
            .await
            .map_err(|e| e.to_string())?,
    };
    orca::validate_pool(&args.pool).map_err(|e| e.to_string())?;
    let user_data = match &args.user_data {
        Some(p) => std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?,
        None => String::new(),
    };
    let record_path = args
        .record
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("orca-pool-{}.json", args.pool)));
    let mut scaler = Scaler {
        settings: Settings {
            pool: args.pool.clone(),
            size: args.size,
            offerings: args.offers.clone(),
            cooldown: Duration::from_secs(args.cooldown),
            archs: args.archs.iter().map(|a| orca::docker_arch(a)).collect(),
            user_data,
        },
        record: Record::load(&record_path)?,
    };
    loop {
        let report = scaler
            .pass(&*provider, SystemTime::now())
            .await
            .map_err(|e| e.to_string());
        scaler.record.save(&record_path)?;
        match report {
            Ok(r) if args.json => {
                println!("{}", serde_json::to_string(&r).map_err(|e| e.to_string())?)
            }
            Ok(r) => r.lines().iter().for_each(|l| println!("{l}")),
            Err(e) if args.once => return Err(e),
            Err(e) => eprintln!("orca-pool: pass failed: {e}"),
        }
        if args.once {
            return Ok(());
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(args.interval)) => {}
            _ = tokio::signal::ctrl_c() => return Ok(()),
        }
    }
}
