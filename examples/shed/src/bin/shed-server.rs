//! `shed-server`: a shed-server with the remote backend (see `shed-server --help` and the README).

use std::io::IsTerminal as _;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// A shed-server with the remote backend: each shed is its own VM.
#[derive(Debug, Parser)]
#[command(name = "shed-server", version)]
struct Args {
    /// The configuration file (YAML).
    #[arg(long, short, env = "SHED_CONFIG", default_value = "shed.yaml")]
    config: PathBuf,
    /// What to do (default: serve).
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serves the API (the default).
    Serve,
    /// Checks the configuration and its variables, and prints what was read (never a secret).
    CheckConfig,
    /// Provider fake only: puts the firewall rule `shed-<environment>-ssh` into the file-backed
    /// simulated cloud the server shares (the fake's state file must be set), as shed's README makes
    /// it on Compute Engine.
    FakeSetup,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("shed=info,warn")),
        )
        .with_writer(std::io::stderr)
        // Colour only for a person at a terminal: a log file or journal gets plain text.
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let args = Args::parse();
    let cfg = match shed::server::load_config(&args.config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("shed-server: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let r = match args.command.unwrap_or(Command::Serve) {
        Command::Serve => shed::server::serve(cfg).await,
        Command::CheckConfig => {
            println!("{cfg:#?}");
            Ok(())
        }
        Command::FakeSetup => shed::server::fake_setup(&cfg).map(|m| println!("{m}")),
    };
    match r {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("shed-server: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
