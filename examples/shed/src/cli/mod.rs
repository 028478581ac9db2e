//! The `shed` command for the calls of a remote server: `create`, `list [-v] [--json]`, `start`,
//! `stop`, `delete`, `info`. It waits for the cloud work: `create` and `delete` follow the server's
//! event stream (`delete` returns once the VM is gone), `start` and `stop` poll until the shed
//! settles (up to 180 s). A shed name is checked as the server checks it and refused before
//! anything is sent; every name goes into the URL as one percent-encoded path segment. When
//! `/api/info` says `backend: "remote"`, `create` refuses `--local-dir`, `--add-dir`,
//! `--from-snapshot`, `--egress` and named `--mounts` before sending anything.

use std::io::Write;
use std::time::Duration;

use clap::{Parser, Subcommand};
use reqwest::Method;
use serde_json::json;

use crate::backend::{ApiError, Info};
use crate::model::{validate_shed_name, ShedView, Status};

mod client;

use client::{Client, Failure};

/// The shed command. Its `Debug` never shows the token.
#[derive(Parser)]
#[command(
    name = "shed",
    version,
    about = "Sheds on a shed-server (remote backend)"
)]
pub struct Args {
    /// The server's API root.
    #[arg(long, env = "SHED_SERVER", default_value = "http://127.0.0.1:8421")]
    pub server: String,
    /// The client's bearer token.
    #[arg(long, env = "SHED_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Milliseconds between two polls of start and stop.
    #[arg(long, default_value_t = 2000, hide = true)]
    pub poll_ms: u64,
    /// How long start and stop wait for the shed to settle, in seconds.
    #[arg(long, default_value_t = 180, hide = true)]
    pub wait_secs: u64,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

impl std::fmt::Debug for Args {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Args")
            .field("server", &shown_server(&self.server))
            .field("token", &self.token.as_ref().map(|_| "***"))
            .field("poll_ms", &self.poll_ms)
            .field("wait_secs", &self.wait_secs)
            .field("command", &self.command)
            .finish()
    }
}

/// `server` as it may be shown: without a user or password, and nothing of one that does not parse.
fn shown_server(server: &str) -> String {
    match url::Url::parse(server) {
        Ok(mut u) => {
            let _ = u.set_username("");
            let _ = u.set_password(None);
            u.to_string()
        }
        Err(_) => "(not a URL)".into(),
    }
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Shows the server's information.
    Info,
    /// Makes a shed and waits until it runs (or its create fails).
    Create(CreateArgs),
    /// Lists the sheds.
    List {
        /// Shows the reason beside the status, and more columns.
        #[arg(short, long)]
        verbose: bool,
        /// Prints the API's JSON.
        #[arg(long)]
        json: bool,
    },
    /// Starts a stopped shed and waits until it runs.
    Start {
        /// The shed's name.
        name: String,
    },
    /// Stops a shed and waits until it is stopped.
    Stop {
        /// The shed's name.
        name: String,
    },
    /// Deletes a shed and returns once its VM is gone.
    Delete {
        /// The shed's name.
        name: String,
    },
}

/// What `shed create` takes.
#[derive(Debug, clap::Args)]
pub struct CreateArgs {
    /// The shed's name.
    pub name: String,
    /// An image name of the server (default: its default image).
    #[arg(long)]
    pub image: Option<String>,
    /// At least this many CPUs.
    #[arg(long)]
    pub cpus: Option<u32>,
    /// At least this much memory, in MB.
    #[arg(long)]
    pub memory: Option<u32>,
    /// The boot disk's size in bytes (rounded up to whole GB, 10 to 500 GB).
    #[arg(long = "upper-size")]
    pub upper_size: Option<u64>,
    /// The network profile (default or isolated).
    #[arg(long = "network-profile")]
    pub network_profile: Option<String>,
    /// A host directory (not on a remote server).
    #[arg(long = "local-dir")]
    pub local_dir: Option<String>,
    /// More host directories (not on a remote server).
    #[arg(long = "add-dir")]
    pub add_dir: Vec<String>,
    /// A snapshot to start from (not on a remote server).
    #[arg(long = "from-snapshot")]
    pub from_snapshot: Option<String>,
    /// Egress profiles (not on a remote server).
    #[arg(long)]
    pub egress: Vec<String>,
    /// Named server mounts (not on a remote server).
    #[arg(long)]
    pub mounts: Vec<String>,
}

impl CreateArgs {
    /// The first flag a remote server has no feature for, with what it lacks.
    fn unsupported_on_remote(&self) -> Option<(&'static str, &'static str)> {
        let named_mounts = self.mounts.iter().any(|m| !m.is_empty() && m != "none");
        [
            (self.local_dir.is_some(), "--local-dir", "host directories"),
            (!self.add_dir.is_empty(), "--add-dir", "host directories"),
            (self.from_snapshot.is_some(), "--from-snapshot", "snapshots"),
            (!self.egress.is_empty(), "--egress", "egress profiles"),
            (named_mounts, "--mounts", "server mounts"),
        ]
        .into_iter()
        .find(|(on, _, _)| *on)
        .map(|(_, flag, what)| (flag, what))
    }
}

impl Command {
    /// The shed name the command takes, if it takes one.
    pub fn name(&self) -> Option<&str> {
        match self {
            Command::Create(CreateArgs { name, .. })
            | Command::Start { name }
            | Command::Stop { name }
            | Command::Delete { name } => Some(name),
            Command::Info | Command::List { .. } => None,
        }
    }
}

/// Where a command writes.
struct Io<'a> {
    out: &'a mut (dyn Write + Send),
    err: &'a mut (dyn Write + Send),
}

/// A terminal's writer that shows what the server sent (names, statuses, messages), never obeys
/// it: every control character but the line end is written escaped ([`orca::spec::printable`]).
/// Every write here is whole text (`writeln!` of strings), so no character is split between two.
struct Printable<'a>(&'a mut (dyn Write + Send));

impl Write for Printable<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        self.0.write_all(orca::spec::printable(&text).as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

/// Runs the command `args` (argv without the program name), writing to `out` and `err`; answers the
/// exit code: 0 done, 1 refused or failed, 2 refused before anything was sent.
pub async fn run(args: Args, out: &mut (dyn Write + Send), err: &mut (dyn Write + Send)) -> i32 {
    let base = match url::Url::parse(&args.server) {
        // A user or password in the URL would be shown in every message that names the server;
        // the token goes in its own setting.
        Ok(u) if !u.username().is_empty() || u.password().is_some() => {
            let _ = writeln!(
                err,
                "shed: --server carries a user or password; give the server's address alone (like http://127.0.0.1:8421) and the token with --token or SHED_TOKEN; nothing was sent"
            );
            return 2;
        }
        // Every request carries the bearer token, which plain http would show to any host on the
        // way: only a server on this machine (a test's, a tunnel's end) is reached without TLS.
        Ok(u) if u.scheme() == "http" && !orca::kit::is_endpoint(&args.server) => {
            let _ = writeln!(
                err,
                "shed: --server is plain http:// to another machine, which would show the token to any host on the way; give its https:// address (http:// only to 127.0.0.1, ::1 or localhost); nothing was sent"
            );
            return 2;
        }
        Ok(u) if !u.cannot_be_a_base() && matches!(u.scheme(), "http" | "https") => u,
        _ => {
            // Not repeated: a value that does not parse may still hold a password.
            let _ = writeln!(
                err,
                "shed: --server is not an http(s) URL like http://127.0.0.1:8421; nothing was sent"
            );
            return 2;
        }
    };
    if let Some(name) = args.command.name() {
        if let Err(why) = validate_shed_name(name) {
            let _ = writeln!(err, "shed: INVALID_REQUEST: {why}; nothing was sent");
            return 2;
        }
    }
    let client = Client {
        http: reqwest::Client::builder()
            .no_proxy()
            .build()
            .unwrap_or_default(),
        base,
        token: args.token.clone(),
    };
    let (mut out, mut err) = (Printable(out), Printable(err));
    let mut io = Io {
        out: &mut out,
        err: &mut err,
    };
    let done = match &args.command {
        Command::Info => info(&client, &mut io).await,
        Command::Create(c) => create(&client, c, &mut io).await,
        Command::List { verbose, json } => list(&client, *verbose, *json, &mut io).await,
        Command::Start { name } => settle(&client, &args, name, true, &mut io).await,
        Command::Stop { name } => settle(&client, &args, name, false, &mut io).await,
        Command::Delete { name } => delete(&client, name, &mut io).await,
    };
    match done {
        Ok(code) => code,
        Err(Failure::Refused(e)) => {
            let _ = writeln!(io.err, "shed: {} ({}): {}", e.code, e.status, e.message);
            1
        }
        Err(Failure::Other(e)) => {
            let _ = writeln!(io.err, "shed: {e}");
            1
        }
    }
}

fn status_word(v: &ShedView, verbose: bool) -> String {
    if verbose && !v.status_reason.is_empty() {
        format!("{} ({})", v.status, v.status_reason)
    } else {
        v.status.to_string()
    }
}

async fn server_info(client: &Client) -> Result<Info, Failure> {
    let v = client.call(Method::GET, &["api", "info"]).await?;
    Ok(serde_json::from_value(v).map_err(|e| format!("the server's info: {e}"))?)
}

/// `v` as pretty JSON. serde_json leaves DEL and the C1 controls (U+0080 to U+009F) in strings as
/// they are, which the terminal's writer would escape in a way JSON does not read: they are written
/// as JSON's own `\u00XX` first, so the text stays JSON for whoever reads it.
fn print_json(out: &mut dyn Write, v: &impl serde::Serialize) {
    let text: String = serde_json::to_string_pretty(v)
        .unwrap_or_default()
        .chars()
        .map(|c| match c {
            '\n' => c.to_string(),
            c if c.is_control() => format!("\\u{:04x}", u32::from(c)),
            c => c.to_string(),
        })
        .collect();
    let _ = writeln!(out, "{text}");
}

async fn info(client: &Client, io: &mut Io<'_>) -> Result<i32, Failure> {
    print_json(io.out, &server_info(client).await?);
    Ok(0)
}

/// `shed create`: follows the create's event stream, printing each new status, until the shed
/// runs (0) or its create fails (1).
async fn create(client: &Client, c: &CreateArgs, io: &mut Io<'_>) -> Result<i32, Failure> {
    if server_info(client).await?.backend == "remote" {
        if let Some((flag, what)) = c.unsupported_on_remote() {
            let _ = writeln!(
                io.err,
                "shed: {flag} is not supported by this server (backend remote has no {what}); nothing was sent"
            );
            return Ok(2);
        }
    }
    let body = json!({
        "name": c.name,
        "image": c.image,
        "cpus": c.cpus,
        "memory_mb": c.memory,
        "upper_size_bytes": c.upper_size,
        "network_profile": c.network_profile,
    });
    let mut last = String::new();
    let request = client.req(Method::POST, &["api", "sheds"]).json(&body);
    client
        .events(request, |ev, v| match ev {
            "status" => {
                if let Ok(s) = serde_json::from_value::<ShedView>(v) {
                    let w = status_word(&s, true);
                    if w != last {
                        let _ = writeln!(io.out, "{}: {w}", s.name);
                        last = w;
                    }
                }
                None
            }
            "complete" => {
                let s: Option<ShedView> = serde_json::from_value(v).ok();
                let _ = writeln!(
                    io.out,
                    "shed {} is {}",
                    c.name,
                    s.map(|s| status_word(&s, true)).unwrap_or_default()
                );
                Some(0)
            }
            "error" => {
                let e: ApiError = serde_json::from_value(v)
                    .unwrap_or_else(|_| ApiError::new(0, "ERROR", "the create failed"));
                let _ = writeln!(io.err, "shed: {}: {}", e.code, e.message);
                Some(1)
            }
            _ => None,
        })
        .await
}

/// `shed list`: a table (with the reason beside the status, and more columns, for `-v`), or the
/// API's JSON.
async fn list(client: &Client, verbose: bool, json: bool, io: &mut Io<'_>) -> Result<i32, Failure> {
    let v = client.call(Method::GET, &["api", "sheds"]).await?;
    if json {
        print_json(io.out, &v);
        return Ok(0);
    }
    let sheds: Vec<ShedView> =
        serde_json::from_value(v).map_err(|e| format!("the server's list: {e}"))?;
    let header: &[&str] = if verbose {
        &[
            "NAME", "STATUS", "SIZE", "CPUS", "MEMORY", "DISK", "IMAGE", "CLIENT",
        ]
    } else {
        &["NAME", "STATUS", "SIZE"]
    };
    let header = header.iter().map(|h| h.to_string()).collect();
    let rows = std::iter::once(header)
        .chain(sheds.iter().map(|s| {
            let mut row = vec![s.name.clone(), status_word(s, verbose), s.size.clone()];
            if verbose {
                row.extend([
                    s.cpus.to_string(),
                    s.memory_mb.to_string(),
                    s.disk_gb.to_string(),
                    s.image.clone(),
                    s.client.clone(),
                ]);
            }
            row
        }))
        .collect::<Vec<Vec<String>>>();
    // Each column is as wide as its widest cell (names are up to 40 characters, a status with its
    // reason up to 27); the numbers (CPUS, MEMORY, DISK) are aligned right.
    for line in orca::table::aligned(&rows, |column| (3..6).contains(&column)) {
        let _ = writeln!(io.out, "{line}");
    }
    Ok(0)
}

/// `shed start` (`starting`) or `shed stop`: the call, then a poll until the shed is running
/// (stopped), has settled otherwise, or `--wait-secs` have passed.
async fn settle(
    client: &Client,
    args: &Args,
    name: &str,
    starting: bool,
    io: &mut Io<'_>,
) -> Result<i32, Failure> {
    let (action, want) = if starting {
        ("start", Status::Running)
    } else {
        ("stop", Status::Stopped)
    };
    client
        .call(Method::POST, &["api", "sheds", name, action])
        .await?;
    let deadline = std::time::Instant::now() + Duration::from_secs(args.wait_secs);
    loop {
        let v = client.call(Method::GET, &["api", "sheds", name]).await?;
        let s = serde_json::from_value::<ShedView>(v)
            .map_err(|e| format!("the server's answer: {e}"))?;
        if s.status == want {
            let _ = writeln!(io.out, "shed {name} is {}", status_word(&s, true));
            return Ok(0);
        }
        let settled_otherwise =
            s.status == Status::Error || (starting && s.status == Status::Stopped);
        if settled_otherwise {
            let _ = writeln!(io.err, "shed: shed {name} is {}", status_word(&s, true));
            return Ok(1);
        }
        if std::time::Instant::now() >= deadline {
            let _ = writeln!(
                io.err,
                "shed: shed {name} is still {} after {} s",
                status_word(&s, true),
                args.wait_secs
            );
            return Ok(1);
        }
        tokio::time::sleep(Duration::from_millis(args.poll_ms)).await;
    }
}

/// `shed delete`: follows the delete's event stream until the VM is gone (0), or the server says
/// it could not be destroyed yet (1).
async fn delete(client: &Client, name: &str, io: &mut Io<'_>) -> Result<i32, Failure> {
    let request = client.req(Method::DELETE, &["api", "sheds", name]);
    client
        .events(request, |ev, v| match ev {
            "complete" => {
                let _ = writeln!(io.out, "shed {name} deleted");
                Some(0)
            }
            "error" => {
                let e: Option<ApiError> = serde_json::from_value(v).ok();
                let _ = writeln!(
                    io.err,
                    "shed: {}",
                    e.map(|e| e.message).unwrap_or_else(|| {
                        "the delete is recorded but the VM could not be destroyed yet; the server keeps trying".into()
                    })
                );
                Some(1)
            }
            _ => None,
        })
        .await
}
