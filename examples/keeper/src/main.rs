//! `keeper`: the `core.cloud` step and the operator REST API.
//!
//! ```text
//! keeper serve                                         # the REST API on 127.0.0.1:8080
//! keeper step core.cloud.created --params '{"provider": "lab", "profile": "small", "count": 2}'
//! keeper migrate                                       # apply the pending migrations and exit
//! keeper reconcile                                     # resolve the VMs that steps left half-done
//! keeper scenario validate scenario.yml                # the `on: keeper` check of core.cloud steps
//! keeper token hash < token.txt                        # the SHA-256 to configure an API token with
//! ```

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::{CommandFactory, Parser, Subcommand};
use keeper::cloud::{Settings, RECONCILE_GRACE};
use keeper::db::DEFAULT_DATABASE_URL;
use keeper::error::json_position;
use keeper::tokens::ApiTokens;
use keeper::userdata::Template;
use keeper::vault::FileVault;
use keeper::{Error, Keeper};
use orca_scaler::store::postgres::redact;
use serde_json::{json, Value};

/// keeper's core.cloud step (created / destroyed / resized) on any orca driver, with PostgreSQL
/// registries, the operator REST API and the audit trail.
#[derive(Parser)]
#[command(name = "keeper", version)]
struct Args {
    /// The PostgreSQL database (its password is never printed).
    #[arg(long, env = "DATABASE_URL", hide_env_values = true, default_value = DEFAULT_DATABASE_URL)]
    database_url: String,
    /// The file vault: `<dir>/<credentials_ref>.json` holds a provider's settings.
    #[arg(
        long,
        env = "KEEPER_VAULT_DIR",
        hide_env_values = true,
        default_value = "vault"
    )]
    vault_dir: PathBuf,
    /// The orca owner of keeper's VMs: keeper destroys and resizes only VMs of this owner.
    #[arg(long, env = "KEEPER_OWNER", default_value = "keeper")]
    owner: String,
    /// The orca pool of keeper's VMs.
    #[arg(long, env = "KEEPER_POOL", default_value = "keeper")]
    pool: String,
    /// keeper's cloud_init template (generate_userdata; self_onboard when set).
    #[arg(long, env = "KEEPER_CLOUD_INIT", hide_env_values = true)]
    cloud_init: Option<PathBuf>,
    /// keeper's URL as new VMs reach it (baked by self_onboard): https, or http to a loopback host.
    #[arg(long, env = "KEEPER_URL", default_value = "http://127.0.0.1:8080")]
    keeper_url: String,
    /// How providers are reached: `plugins` (each driver's CloudDriver plugin
    /// `soul-cloud-<driver>`, started on first use and kept) or `linked` (orca's drivers in this
    /// program).
    #[arg(long, env = "KEEPER_DRIVERS", default_value = "plugins")]
    drivers: DriverMode,
    /// Where `plugins` are looked for first (then beside keeper's own program).
    #[arg(long, env = keeper::plugins::PLUGIN_DIR_ENV)]
    plugin_dir: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

// By hand: the database URL may hold its password, shown here as redact shows it in the logs.
impl std::fmt::Debug for Args {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Args")
            .field("database_url", &redact(&self.database_url))
            .field("vault_dir", &self.vault_dir)
            .field("owner", &self.owner)
            .field("pool", &self.pool)
            .field("cloud_init", &self.cloud_init)
            .field("keeper_url", &self.keeper_url)
            .field("drivers", &self.drivers)
            .field("plugin_dir", &self.plugin_dir)
            .field("command", &self.command)
            .finish()
    }
}

/// How keeper reaches its providers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum DriverMode {
    /// orca's drivers, linked into keeper.
    Linked,
    /// Each driver's CloudDriver plugin.
    Plugins,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the REST API.
    Serve {
        /// Where to listen.
        #[arg(long, env = "KEEPER_LISTEN", default_value = "127.0.0.1:8080")]
        listen: String,
        /// A file of API tokens: {"tokens": [{"name", "sha256", "permissions"}]}.
        #[arg(long, env = "KEEPER_API_TOKENS_FILE", hide_env_values = true)]
        tokens_file: Option<PathBuf>,
    },
    /// Run one step: core.cloud.created, core.cloud.destroyed or core.cloud.resized.
    Step {
        /// The step (module), e.g. core.cloud.created.
        step: String,
        /// Its parameters as JSON; `@FILE` reads a file, `-` standard input.
        #[arg(long)]
        params: String,
    },
    /// Apply the pending migrations and exit.
    Migrate,
    /// Resolve the journal rows that steps left half-done (a keeper stopped between a VM's create and
    /// its record): destroy each VM found, close each row whose VM does not exist. `serve` does the
    /// same when it starts.
    Reconcile {
        /// Seconds after a VM was asked for during which one not found is looked for again next time
        /// (a cloud may list a new VM late), rather than closed as never made.
        #[arg(long, default_value_t = RECONCILE_GRACE.as_secs())]
        grace: u64,
    },
    /// Scenario checks.
    Scenario {
        #[command(subcommand)]
        command: ScenarioCommand,
    },
    /// API token helpers.
    Token {
        #[command(subcommand)]
        command: TokenCommand,
    },
}

#[derive(Debug, Subcommand)]
enum ScenarioCommand {
    /// Check a scenario's core.cloud steps (on: keeper, module, literal parameters).
    Validate {
        /// The scenario (YAML or JSON).
        file: PathBuf,
    },
}

#[derive(Debug, Subcommand)]
enum TokenCommand {
    /// Read a token from standard input and print its SHA-256 (what the token file holds).
    Hash,
}

/// keeper's configuration is wrong (exit 2, `config.invalid`).
fn config_invalid(message: impl AsRef<str>) -> Error {
    Error::new(2, "config.invalid", message)
}

fn read_text(arg: &str, what: &str) -> Result<String, Error> {
    let read_err = |from: &str, e: std::io::Error| {
        Error::new(2, "input.unreadable", format!("{what} {from}: {e}"))
    };
    if arg == "-" {
        std::io::read_to_string(std::io::stdin()).map_err(|e| read_err("- (standard input)", e))
    } else if let Some(path) = arg.strip_prefix('@') {
        std::fs::read_to_string(path).map_err(|e| read_err(arg, e))
    } else {
        Ok(arg.to_string())
    }
}

fn tokens(file: Option<&PathBuf>) -> Result<ApiTokens, Error> {
    let text = match (file, std::env::var("KEEPER_API_TOKENS").ok()) {
        (Some(path), _) => std::fs::read_to_string(path)
            .map_err(|e| config_invalid(format!("the API token file {}: {e}", path.display())))?,
        (None, Some(text)) if !text.trim().is_empty() => text,
        _ => {
            // The file's shape is told in words: keeper's secret filter hides what follows a
            // `"tokens":` key, a shape included.
            return Err(config_invalid("no API tokens: set KEEPER_API_TOKENS_FILE to a JSON file (or KEEPER_API_TOKENS to its text) whose `tokens` list names each client by the SHA-256 of its token; see the README"));
        }
    };
    let t = ApiTokens::from_json(&text)?;
    if t.is_empty() {
        return Err(config_invalid("the API token list is empty"));
    }
    Ok(t)
}

async fn keeper(args: &Args) -> Result<Keeper, Error> {
    let cloud_init = match &args.cloud_init {
        Some(path) => Some(Template::parse(&std::fs::read_to_string(path).map_err(
            |e| config_invalid(format!("KEEPER_CLOUD_INIT {}: {e}", path.display())),
        )?)?),
        None => None,
    };
    let settings = Settings {
        owner: args.owner.clone(),
        pool: args.pool.clone(),
        cloud_init,
        keeper_url: args.keeper_url.clone(),
    };
    tracing::debug!(database = %redact(&args.database_url), "connecting");
    Keeper::connect(
        &args.database_url,
        Arc::new(FileVault::new(&args.vault_dir)),
        drivers(args),
        settings,
    )
    .await
}

/// The drivers `--drivers` chose.
fn drivers(args: &Args) -> Arc<dyn keeper::drivers::Drivers> {
    match args.drivers {
        DriverMode::Linked => Arc::new(keeper::drivers::OrcaDrivers),
        DriverMode::Plugins => Arc::new(keeper::plugins::host(args.plugin_dir.iter().cloned())),
    }
}

/// The signals of `serve`: the first resolves the answer (a graceful shutdown: no new request, the
/// running steps finish); a second stops keeper at once (exit 130), naming the steps it cuts.
fn watch_signals(k: Keeper) -> tokio::sync::oneshot::Receiver<()> {
    let (first, first_rx) = tokio::sync::oneshot::channel();
    // A signal whose handler cannot be installed is left to its default.
    let mut signals = orca::signals::StopSignals::install_each();
    tokio::spawn(async move {
        signals.next().await;
        tracing::info!("shutting down");
        let running = k.steps_running();
        if running > 0 {
            eprintln!("keeper: shutting down: {running} step(s) running are finishing (registries, audit event, roll-back); signal again to stop them halfway");
        }
        let _ = first.send(());
        signals.next().await;
        let cut = k.running_steps();
        if cut.is_empty() {
            eprintln!("keeper: signalled again: stopping now; no step was running");
        } else {
            let named: Vec<String> = cut
                .iter()
                .map(|(id, step)| format!("{step} (step_id {id})"))
                .collect();
            eprintln!(
                "keeper: signalled again: stopping now, cutting {} running step(s) halfway: {}; the journal keeper.cloud_vms and the audit trail tell what they did",
                cut.len(),
                named.join(", ")
            );
        }
        std::process::exit(130);
    });
    first_rx
}

/// Resolves the half-done journal rows when `serve` starts (a keeper stopped half-way left them), and
/// logs what it did.
async fn reconcile_at_start(k: &Keeper) {
    match k.reconcile("serve", RECONCILE_GRACE).await {
        Ok(r) if r.changed || r.needs_attention() || !r.running.is_empty() => {
            let summary = keeper::mask::masked(&json!(r));
            if r.needs_attention() {
                tracing::warn!(summary = %summary, "reconciled the journal at start-up; some VMs need the operator");
            } else {
                tracing::info!(summary = %summary, "reconciled the journal at start-up");
            }
        }
        Ok(_) => tracing::debug!("reconcile: no half-done journal row"),
        Err(e) => {
            tracing::warn!(error = %e, "reconcile at start-up failed; `keeper reconcile` runs it again")
        }
    }
}

/// Runs `step` to its end: the first Ctrl-C does not stop it halfway (VMs made but unrecorded, or
/// destroyed with the registries not updated); it says the step is finishing. A second Ctrl-C stops
/// keeper at once.
async fn step_to_its_end<T>(step: impl std::future::Future<Output = T>) -> T {
    tokio::pin!(step);
    let mut interrupted = false;
    loop {
        tokio::select! {
            out = &mut step => return out,
            got = tokio::signal::ctrl_c() => {
                if got.is_err() {
                    // No signal handling here: the step runs on as it would without it.
                    return step.await;
                }
                if interrupted {
                    eprintln!("keeper: interrupted again: stopping in the middle of the step; the journal keeper.cloud_vms and the audit trail tell what it did");
                    std::process::exit(130);
                }
                interrupted = true;
                eprintln!("keeper: interrupted: the step is finishing (registries, audit event, roll-back); interrupt again to stop it halfway");
            }
        }
    }
}

/// `keeper token hash`: the SHA-256 of the token on standard input.
fn token_hash() -> Result<ExitCode, Error> {
    let s = std::io::read_to_string(std::io::stdin())
        .map_err(|e| Error::new(2, "input.unreadable", e.to_string()))?;
    let token = s.trim();
    if token.is_empty() {
        return Err(Error::new(2, "input.invalid", "no token on standard input"));
    }
    println!("{}", hex::encode(keeper::tokens::sha256(token)));
    Ok(ExitCode::SUCCESS)
}

/// `keeper scenario validate FILE`.
fn scenario_validate(file: &Path) -> Result<ExitCode, Error> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| Error::new(2, "input.unreadable", format!("{}: {e}", file.display())))?;
    let checked = keeper::scenario::parse(&text).and_then(|s| keeper::scenario::validate(&s));
    let out = match &checked {
        Ok(n) => json!({"valid": true, "core_cloud_steps": n}),
        Err(e) => json!({"valid": false, "error": e.to_json()}),
    };
    println!("{out}");
    Ok(ExitCode::from(u8::from(checked.is_err())))
}

/// `keeper migrate`: connecting applies the pending migrations.
async fn migrate(args: &Args) -> Result<ExitCode, Error> {
    keeper(args).await?;
    println!("{}", json!({"migrated": true}));
    Ok(ExitCode::SUCCESS)
}

/// `keeper reconcile`: the output on standard output; 1 when something needs the operator.
async fn reconcile(args: &Args, grace: u64) -> Result<ExitCode, Error> {
    let k = keeper(args).await?;
    let grace = std::time::Duration::from_secs(grace);
    let r = step_to_its_end(k.reconcile("cli", grace)).await?;
    println!("{}", keeper::mask::masked(&json!(r)));
    Ok(ExitCode::from(u8::from(r.needs_attention())))
}

/// `keeper step STEP --params JSON`: the output (or the failure output) on standard output.
async fn step(args: &Args, step: &str, params: &str) -> Result<ExitCode, Error> {
    let params: Value = serde_json::from_str(&read_text(params, "--params")?).map_err(|e| {
        Error::new(
            2,
            "params.invalid",
            format!("--params is not JSON ({})", json_position(&e)),
        )
    })?;
    let k = keeper(args).await?;
    let done = step_to_its_end(k.run_step(step, &params, "cli")).await;
    println!("{}", done.as_ref().unwrap_or_else(|f| &f.output));
    done.map(|_| ExitCode::SUCCESS).map_err(|f| f.error)
}

/// `keeper serve`: the API until a signal, then the running steps to their end.
async fn serve(
    args: &Args,
    listen: &str,
    tokens_file: Option<&PathBuf>,
) -> Result<ExitCode, Error> {
    let tokens = tokens(tokens_file)?;
    let k = keeper(args).await?;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| config_invalid(format!("cannot listen on {listen}: {e}")))?;
    let addr = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    tracing::info!(listen = %addr, callers = tokens.len(), "keeper serving");
    let reconciling = k.clone();
    tokio::spawn(async move { reconcile_at_start(&reconciling).await });
    let app = keeper::api::router(k.clone(), tokens);
    let first_signal = watch_signals(k.clone());
    let served = axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = first_signal.await;
        })
        .await;
    // A step whose client went away runs on as a task of its own: let it finish (a second signal
    // stops keeper all the same).
    let running = k.steps_running();
    if running > 0 {
        tracing::info!(steps = running, "waiting for the running steps to finish");
        k.steps_finished().await;
    }
    served.map_err(|e| Error::new(1, "serve.failed", e.to_string()))?;
    Ok(ExitCode::SUCCESS)
}

#[tokio::main]
async fn main() -> ExitCode {
    keeper::logging::init();
    let args = Args::parse();
    // Refused as clap refuses a bad argument (exit 2), before anything connects: the URL goes into
    // every VM's user data, and VMs send it their bootstrap token.
    if let Err(why) = keeper::userdata::check_keeper_url(&args.keeper_url) {
        Args::command()
            .error(
                clap::error::ErrorKind::ValueValidation,
                format!("invalid value for '--keeper-url <KEEPER_URL>' (or KEEPER_URL): {why}"),
            )
            .exit();
    }
    let done = match &args.command {
        Command::Token {
            command: TokenCommand::Hash,
        } => token_hash(),
        Command::Scenario {
            command: ScenarioCommand::Validate { file },
        } => scenario_validate(file),
        Command::Migrate => migrate(&args).await,
        Command::Reconcile { grace } => reconcile(&args, *grace).await,
        Command::Step { step: name, params } => step(&args, name, params).await,
        Command::Serve {
            listen,
            tokens_file,
        } => serve(&args, listen, tokens_file.as_ref()).await,
    };
    done.unwrap_or_else(|e| {
        eprintln!("keeper: {e}");
        ExitCode::FAILURE
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_of_args_hides_the_database_password() {
        let args = Args::try_parse_from([
            "keeper",
            "--database-url",
            "postgres://u:s3cret@h/db",
            "migrate",
        ])
        .unwrap();
        let shown = format!("{args:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("database_url"), "{shown}");
    }
}
