//! `stado`: cloud build hosts (`stado cloud host create | list | delete | reap`), the profile
//! (`stado config`), the registry (`stado registry`), fleet keys (`stado fleet key generate`) and, for
//! `--provider fake`, the simulation's controls (`stado fake`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use serde_json::{json, Value};
use stado::channel::{FakeFleet, FirstBoot};
use stado::cloud::list_or_none;
use stado::profile::{Profile, Selection, KEYS};
use stado::registry::Registry;
use stado::{CreateRequest, Failure, Home, Stado};

/// stado: cloud build hosts rented from a cloud, reached over SSH with their own fleet key, and
/// returned once they stand idle.
#[derive(Debug, Parser)]
#[command(name = "stado", version)]
struct Cli {
    /// The stado home (profile, registry, keys); default $STADO_HOME, else ~/.stado.
    #[arg(long, global = true)]
    home: Option<PathBuf>,
    /// Print one JSON object (stable field names) instead of lines for a person.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Top,
}

#[derive(Debug, Subcommand)]
enum Top {
    /// Cloud hosts.
    Cloud {
        #[command(subcommand)]
        what: CloudCmd,
    },
    /// The profile: providers, bindings, the operator's credit floor ruling.
    Config {
        #[command(subcommand)]
        what: ConfigCmd,
    },
    /// The registry: targets and cloud_hosts.
    Registry {
        #[command(subcommand)]
        what: RegistryCmd,
    },
    /// The fleet.
    Fleet {
        #[command(subcommand)]
        what: FleetCmd,
    },
    /// Controls of the simulation behind --provider fake (the in-memory cloud and fleet).
    Fake {
        #[command(subcommand)]
        what: FakeCmd,
    },
}

#[derive(Debug, Subcommand)]
enum CloudCmd {
    /// Cloud hosts.
    Host {
        #[command(subcommand)]
        what: HostCmd,
    },
}

#[derive(Debug, Args)]
struct ProviderArg {
    /// The provider: azure, or fake (Azure simulated in memory, kept in the stado home).
    #[arg(long)]
    provider: String,
}

#[derive(Debug, Subcommand)]
enum HostCmd {
    /// Creates a cloud host (nine steps, stopping at the first that fails).
    Create {
        /// The target identifier.
        name: String,
        #[command(flatten)]
        provider: ProviderArg,
        /// The location (westeurope; on fake: zone-a, zone-b, zone-c).
        #[arg(long)]
        location: String,
        /// The size (Standard_D4s_v5; on fake: amd64-small, amd64-large, arm64-small, arm64-large, and
        /// amd64-metal in zone-c only).
        #[arg(long)]
        size: String,
        /// The OS disk, GiB.
        #[arg(long = "disk-gb")]
        disk_gb: u32,
        /// Idle minutes after which reap returns it.
        #[arg(long = "idle-minutes")]
        idle_minutes: u32,
    },
    /// Lists each declared host with its VM's power state.
    List {
        #[command(flatten)]
        provider: ProviderArg,
    },
    /// Deletes a declared host and everything it is made of.
    Delete {
        /// The host.
        name: String,
        #[command(flatten)]
        provider: ProviderArg,
    },
    /// Judges each host busy, idle, reapable or unread; --apply deletes the reapable ones.
    Reap {
        #[command(flatten)]
        provider: ProviderArg,
        /// Delete each reapable host.
        #[arg(long)]
        apply: bool,
        /// Run the applied pass every SECONDS (the coordinator's tick) until interrupted.
        #[arg(long, value_name = "SECONDS", requires = "apply")]
        every: Option<u64>,
    },
}

#[derive(Debug, Subcommand)]
enum ConfigCmd {
    /// Declares KEY (stado config keys lists them).
    Set {
        /// The key.
        key: String,
        /// Its value.
        value: String,
    },
    /// Removes KEY.
    Unset {
        /// The key.
        key: String,
    },
    /// Prints the profile.
    Show,
    /// Lists the keys and what each holds.
    Keys,
}

#[derive(Debug, Subcommand)]
enum RegistryCmd {
    /// Sets the value at a path (cloud_hosts, cloud_hosts.admit_from, targets.NAME, targets.NAME.address).
    Set {
        /// The path.
        #[arg(long)]
        path: String,
        /// The value, as JSON (a bare word is taken as text).
        #[arg(long)]
        value: String,
    },
    /// Prints the registry.
    Show,
}

#[derive(Debug, Subcommand)]
enum FleetCmd {
    /// Fleet keys.
    Key {
        #[command(subcommand)]
        what: KeyCmd,
    },
}

#[derive(Debug, Subcommand)]
enum KeyCmd {
    /// Mints target NAME's fleet key: ed25519, the private half owner-only in <home>/keys/NAME.
    Generate {
        /// The target.
        name: String,
    },
}

#[derive(Debug, Subcommand)]
enum FakeCmd {
    /// Shows or changes how a simulated host behaves (a fleet host, or a cloud host before or after
    /// its create).
    Host {
        /// The target's name.
        name: String,
        #[command(flatten)]
        changes: SimHostChanges,
    },
    /// Moves the simulated hosts' clock forward.
    Advance {
        /// Minutes.
        #[arg(long)]
        minutes: u64,
    },
    /// Shows or changes the simulated cloud.
    Cloud(SimCloudChanges),
}

/// How a simulated host is to behave from now on (what is not given stays).
#[derive(Debug, Args)]
struct SimHostChanges {
    /// The address the product site sees it at.
    #[arg(long)]
    egress: Option<String>,
    /// Whether it answers SSH.
    #[arg(long)]
    answers: Option<bool>,
    /// How its first boot ends: done, error, degraded.
    #[arg(long = "first-boot")]
    first_boot: Option<String>,
    /// Whether rustc, node and npm answer.
    #[arg(long)]
    toolchain: Option<bool>,
    /// Runs standing in ~/.stado/work/runs (the run area changes now; 0: the last run ended now).
    #[arg(long)]
    runs: Option<u32>,
    /// cargo and rustc processes.
    #[arg(long)]
    procs: Option<u32>,
}

/// What changes in the simulated cloud.
#[derive(Debug, Args)]
struct SimCloudChanges {
    /// Sets the account's credit balance (USD).
    #[arg(long)]
    credit: Option<f64>,
    /// Puts another team's inbound rule NAME at PRIORITY on LOCATION's subnet security group
    /// (LOCATION:NAME:PRIORITY).
    #[arg(long = "subnet-rule")]
    subnet_rule: Vec<String>,
    /// Deletes a VM by id from outside stado (an operator's console).
    #[arg(long = "operator-delete")]
    operator_delete: Option<String>,
    /// Stops (deallocates) a VM by id from outside stado.
    #[arg(long = "operator-stop")]
    operator_stop: Option<String>,
}

/// What a command answered.
struct Answer {
    json: Value,
    lines: Vec<String>,
    ok: bool,
}

impl Answer {
    fn ok(json: Value, lines: Vec<String>) -> Answer {
        Answer {
            json,
            lines,
            ok: true,
        }
    }
}

fn failure_answer(command: &str, f: &Failure) -> Answer {
    Answer {
        json: json!({"command": command, "ok": false, "error": f}),
        lines: Vec::new(),
        ok: false,
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("STADO_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let json_out = cli.json;
    let command = command_name(&cli.command);
    let answer = run(cli)
        .await
        .unwrap_or_else(|f| failure_answer(command, &f));
    if json_out {
        // `reap --every` printed one object per tick already, and adds none when it stops.
        if !answer.json.is_null() {
            println!("{}", answer.json);
        }
    } else {
        for l in &answer.lines {
            println!("{l}");
        }
        let error = answer.json["error"]["message"].as_str();
        if let Some(m) = error.filter(|m| !answer.ok && !answer.lines.iter().any(|l| l == m)) {
            eprintln!("stado: {m}");
        }
    }
    // ExitCode::SUCCESS or ExitCode::FAILURE (1).
    ExitCode::from(u8::from(!answer.ok))
}

fn command_name(c: &Top) -> &'static str {
    match c {
        Top::Cloud {
            what: CloudCmd::Host { what },
        } => match what {
            HostCmd::Create { .. } => "create",
            HostCmd::List { .. } => "list",
            HostCmd::Delete { .. } => "delete",
            HostCmd::Reap { .. } => "reap",
        },
        Top::Config { .. } => "config",
        Top::Registry { .. } => "registry",
        Top::Fleet { .. } => "fleet",
        Top::Fake { .. } => "fake",
    }
}

fn to_json<T: serde::Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

/// The answer of a command whose report is `r`, with `ok` in its object.
fn report<T: serde::Serialize>(r: &T, lines: Vec<String>, ok: bool) -> Answer {
    let mut json = to_json(r);
    if let Value::Object(m) = &mut json {
        m.insert("ok".into(), Value::Bool(ok));
    }
    Answer { json, lines, ok }
}

/// stado on `provider` for one command: progress goes to stderr as it happens, terminal or not (a
/// create stopped half-way leaves the step it reached), and, for a person, what each step of create
/// did goes to stdout as the step ends.
async fn open(home: Home, provider: &str, json: bool) -> Result<Stado, Failure> {
    let mut s = Stado::open(home, provider, Selection::from_env()).await?;
    s.progress = Some(Arc::new(|l: &str| eprintln!("stado: {l}")));
    if !json {
        s.step_lines = Some(Arc::new(|l: &str| println!("{l}")));
    }
    Ok(s)
}

async fn run(cli: Cli) -> Result<Answer, Failure> {
    let home = Home::resolve(cli.home.clone())?;
    match cli.command {
        Top::Cloud {
            what: CloudCmd::Host { what },
        } => host(home, what, cli.json).await,
        Top::Config { what } => config(home, what),
        Top::Registry { what } => registry(home, what),
        Top::Fleet {
            what: FleetCmd::Key {
                what: KeyCmd::Generate { name },
            },
        } => fleet_key_generate(&home, &name),
        Top::Fake { what } => fake(home, what),
    }
}

/// `stado cloud host create | list | delete | reap`.
async fn host(home: Home, what: HostCmd, json: bool) -> Result<Answer, Failure> {
    match what {
        HostCmd::Create {
            name,
            provider,
            location,
            size,
            disk_gb,
            idle_minutes,
        } => {
            let s = open(home, &provider.provider, json).await?;
            let req = CreateRequest {
                name,
                location,
                size,
                disk_gb,
                idle_minutes,
            };
            let r = s.create(&req).await;
            // Each step's lines were printed as it ended; the error goes to stderr.
            Ok(report(&r, Vec::new(), r.ok))
        }
        HostCmd::List { provider } => {
            let r = open(home, &provider.provider, json).await?.list().await?;
            Ok(report(&r, r.lines(), true))
        }
        HostCmd::Delete { name, provider } => {
            let r = open(home, &provider.provider, json)
                .await?
                .delete(&name)
                .await?;
            let line = match r.vm_id.as_str() {
                "" => format!("deleted {} (its create had made no VM); its registry entry and fleet key are gone", r.name),
                id => format!("deleted {} (VM {id} and what belonged to it); its registry entry and fleet key are gone", r.name),
            };
            Ok(report(&r, vec![line], true))
        }
        HostCmd::Reap {
            provider,
            apply,
            every: None,
        } => {
            let r = open(home, &provider.provider, json)
                .await?
                .reap(apply)
                .await?;
            Ok(report(&r, r.lines(), !r.failed()))
        }
        HostCmd::Reap {
            provider,
            every: Some(secs),
            ..
        } => reap_every(home, &provider.provider, secs, json).await,
    }
}

/// `stado fleet key generate NAME`: never replaces a key.
fn fleet_key_generate(home: &Home, name: &str) -> Result<Answer, Failure> {
    orca::validate_name(name)
        .map_err(|_| Failure::refused(format!("'{name}' is not a target identifier")))?;
    let k = stado::keys::generate_fleet_key(home, name)?;
    Ok(Answer::ok(
        json!({"command": "fleet key generate", "ok": true, "name": name, "path": k.private, "public_key": k.public_line, "fingerprint": k.fingerprint}),
        vec![
            format!(
                "fleet key of {name}: {} (owner-only), {}",
                k.private.display(),
                k.public.display()
            ),
            k.public_line.clone(),
        ],
    ))
}

/// `stado cloud host reap --apply --every SECONDS` (at least one second).
async fn reap_every(home: Home, provider: &str, secs: u64, json: bool) -> Result<Answer, Failure> {
    // Watched from the start, so that a signal that comes during a tick ends the loop once that
    // tick has ended, rather than being lost or ending the process in the middle of a pass.
    let mut stop = orca::signals::StopSignals::install()
        .map_err(|e| Failure::new(format!("could not watch SIGINT and SIGTERM: {e}")))?;
    stado::profile::check_known_provider(provider)?;
    loop {
        let tick = async {
            // The applied pass runs when the provider is enabled and a cloud host is declared.
            let profile = Profile::load(&home)?;
            if let Err(f) = profile.check_enabled(provider, &Selection::from_env()) {
                return Ok(Err(f.message().to_string()));
            }
            if Registry::load(&home)?.cloud_hosts(provider).is_empty() {
                return Ok(Err(format!(
                    "the registry declares no {provider} cloud host"
                )));
            }
            let s = Stado::open(home.clone(), provider, Selection::from_env()).await?;
            s.reap(true).await.map(Ok)
        };
        // With --json, each tick prints exactly one object on a line of its own: the applied pass's
        // report, a tick that ran no pass (`skipped`, why), or a tick that failed (`error`).
        let object = match tick.await {
            Ok(Ok(r)) => {
                for l in r.log_lines() {
                    eprintln!("{l}");
                }
                report(&r, Vec::new(), !r.failed()).json
            }
            Ok(Err(why)) => json!({"command": "reap", "ok": true, "skipped": why}),
            // Another stado holds the registry's lock (a create holds it from its first step to
            // its last): nothing is wrong, so the tick is skipped, not failed; the next one reaps.
            Err(f) if f.code() == "busy" => {
                eprintln!("cloud-host reaper: skipped this tick: {f}");
                json!({"command": "reap", "ok": true, "skipped": f.message()})
            }
            Err(f) => {
                eprintln!("cloud-host reaper: this tick did nothing: {f}");
                failure_answer("reap", &f).json
            }
        };
        if json {
            println!("{object}");
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(secs.max(1))) => {}
            _ = stop.next() => break,
        }
    }
    // Stopped: no object of its own, so that every line of --json is one tick's.
    Ok(Answer::ok(Value::Null, Vec::new()))
}

fn config(home: Home, what: ConfigCmd) -> Result<Answer, Failure> {
    match what {
        ConfigCmd::Set { key, value } => {
            let stored = stado::profile::config_set(&home, &key, &value)?;
            Ok(Answer::ok(
                json!({"command": "config set", "ok": true, "key": key, "value": stored}),
                vec![format!("{key} = {stored}")],
            ))
        }
        ConfigCmd::Unset { key } => {
            let was = stado::profile::config_unset(&home, &key)?;
            Ok(Answer::ok(
                json!({"command": "config unset", "ok": true, "key": key, "was_set": was}),
                vec![format!(
                    "{key} {}",
                    if was { "removed" } else { "was not set" }
                )],
            ))
        }
        ConfigCmd::Show => {
            let p = Profile::load(&home)?;
            let lines = p.values.iter().map(|(k, v)| format!("{k} = {v}")).collect();
            Ok(Answer::ok(
                json!({"command": "config show", "ok": true, "profile": p}),
                lines,
            ))
        }
        ConfigCmd::Keys => Ok(Answer::ok(
            json!({"command": "config keys", "ok": true, "keys": KEYS.iter().map(|(k, w)| json!({"key": k, "holds": w})).collect::<Vec<_>>()}),
            KEYS.iter().map(|(k, w)| format!("{k}: {w}")).collect(),
        )),
    }
}

fn registry(home: Home, what: RegistryCmd) -> Result<Answer, Failure> {
    match what {
        RegistryCmd::Set { path, value } => {
            let v: Value = serde_json::from_str(&value).unwrap_or(Value::String(value.clone()));
            let mut r = stado::registry::Held::take(&home)?;
            *r = r.with_set(&path, v.clone())?;
            r.save()?;
            Ok(Answer::ok(
                json!({"command": "registry set", "ok": true, "path": path, "value": v}),
                vec![format!("{path} = {v}")],
            ))
        }
        RegistryCmd::Show => {
            let r = Registry::load(&home)?;
            let text = serde_json::to_string_pretty(&r).unwrap_or_default();
            Ok(Answer::ok(
                json!({"command": "registry show", "ok": true, "registry": r}),
                text.lines().map(str::to_string).collect(),
            ))
        }
    }
}

/// `stado fake ...`: the simulation behind `--provider fake`.
fn fake(home: Home, what: FakeCmd) -> Result<Answer, Failure> {
    match what {
        FakeCmd::Host { name, changes } => fake_host(&home, &name, changes),
        FakeCmd::Advance { minutes } => {
            let fleet = FakeFleet::persistent(home.fake_fleet_path());
            fleet.advance(Duration::from_secs(minutes * 60))?;
            Ok(Answer::ok(
                json!({"command": "fake advance", "ok": true, "now": fleet.now()}),
                vec![format!(
                    "the simulated hosts' clock reads {}",
                    fleet.now().to_rfc3339()
                )],
            ))
        }
        FakeCmd::Cloud(changes) => fake_cloud(&home, changes),
    }
}

/// `stado fake host NAME ...`: changes how a simulated host behaves, and shows it.
fn fake_host(home: &Home, name: &str, c: SimHostChanges) -> Result<Answer, Failure> {
    let first_boot = (c.first_boot.as_deref())
        .map(|w| {
            FirstBoot::from_word(w).ok_or_else(|| {
                Failure::invalid(format!("--first-boot {w:?}: done, error or degraded"))
            })
        })
        .transpose()?;
    if let Some(e) = c
        .egress
        .as_ref()
        .filter(|e| e.parse::<std::net::IpAddr>().is_err())
    {
        return Err(Failure::invalid(format!("--egress {e:?}: an IP address")));
    }
    let fleet = FakeFleet::persistent(home.fake_fleet_path());
    let now = fleet.now();
    // What is not given stays.
    fleet.update(name, |h| {
        h.egress = c.egress.or(h.egress.take());
        h.answers = c.answers.unwrap_or(h.answers);
        h.first_boot = first_boot.unwrap_or(h.first_boot);
        h.toolchain = c.toolchain.unwrap_or(h.toolchain);
        h.procs = c.procs.unwrap_or(h.procs);
        if let Some(r) = c.runs {
            h.runs = r;
            h.run_area_changed = Some(now);
        }
    })?;
    let h = fleet.host(name);
    let line = format!(
        "{name}: answers {}, egress {}, first boot {:?}, toolchain {}, {} run(s), {} process(es), run area changed {}",
        h.answers,
        h.egress.clone().unwrap_or_else(|| FakeFleet::default_egress(name)),
        h.first_boot,
        h.toolchain,
        h.runs,
        h.procs,
        h.run_area_changed.map(|t| t.to_rfc3339()).unwrap_or_else(|| "never".into())
    );
    Ok(Answer::ok(
        json!({"command": "fake host", "ok": true, "name": name, "host": h}),
        vec![line],
    ))
}

/// `stado fake cloud ...`: changes the simulated cloud as an operator or another team would, and
/// shows its VMs, admission groups and subnet rules.
fn fake_cloud(home: &Home, c: SimCloudChanges) -> Result<Answer, Failure> {
    let cloud = orca::memory::MemoryCloud::persistent(home.fake_cloud_path())
        .map_err(|e| Failure::new(e.to_string()))?;
    if let Some(credit) = c.credit {
        cloud.set_credit(credit, "USD");
    }
    for r in &c.subnet_rule {
        let (loc, name, prio) = subnet_rule(r)?;
        cloud.put_subnet_rule(loc, name, prio, true);
    }
    let absent = |id| Failure::new(format!("no VM {id} in the simulated cloud"));
    if let Some(id) = c.operator_delete.filter(|id| !cloud.operator_delete(id)) {
        return Err(absent(id));
    }
    if let Some(id) = c.operator_stop.filter(|id| !cloud.operator_stop(id)) {
        return Err(absent(id));
    }
    Ok(describe_cloud(&cloud))
}

/// `LOCATION:NAME:PRIORITY` of `--subnet-rule`.
fn subnet_rule(r: &str) -> Result<(&str, &str, u32), Failure> {
    let parts: Vec<&str> = r.split(':').collect();
    let [loc, name, prio] = parts[..] else {
        return Err(Failure::invalid(format!(
            "--subnet-rule {r:?}: LOCATION:NAME:PRIORITY"
        )));
    };
    let prio = prio
        .parse()
        .map_err(|_| Failure::invalid(format!("--subnet-rule {r:?}: the priority is a number")))?;
    Ok((loc, name, prio))
}

/// The simulated cloud's VMs, admission groups and inbound subnet rules.
fn describe_cloud(cloud: &orca::memory::MemoryCloud) -> Answer {
    let machines = cloud.all_machines();
    let groups = cloud.admission_groups();
    let subnets: Value = orca::memory::LOCATIONS
        .iter()
        .map(|l| (l.to_string(), to_json(&cloud.subnet_group(l))))
        .collect::<serde_json::Map<_, _>>()
        .into();
    let mut lines: Vec<String> = machines
        .iter()
        .map(|m| {
            format!(
                "VM {} {} {} {} {} {}",
                m.id, m.name, m.status, m.location, m.machine_type, m.address
            )
        })
        .collect();
    lines.push(format!("admission groups: {}", list_or_none(&groups)));
    for l in orca::memory::LOCATIONS {
        for r in cloud.subnet_group(l).rules.iter().filter(|r| r.inbound) {
            lines.push(format!(
                "subnet {l}: rule {} at priority {} admitting {}",
                r.name,
                r.priority,
                r.sources.join(", ")
            ));
        }
    }
    Answer::ok(
        json!({"command": "fake cloud", "ok": true, "machines": machines, "admission_groups": groups, "subnets": subnets}),
        lines,
    )
}
