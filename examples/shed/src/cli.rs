//! The `shed` command for the calls of a remote server: `create`, `list [-v] [--json]`, `start`,
//! `stop`, `delete`, `info`. It waits as the seed says: `create` and `delete` follow the server's
//! event stream (`delete` returns once the VM is gone), `start` and `stop` poll until the shed settles
//! (up to 180 s). When `/api/info` says `backend: "remote"`, `create` refuses `--local-dir`,
//! `--add-dir`, `--from-snapshot`, `--egress` and named `--mounts` before sending anything.

use std::io::Write;
use std::time::Duration;

use clap::{Parser, Subcommand};
use serde_json::{json, Value};

use crate::api::ErrorBody;
use crate::backend::Info;
use crate::model::{validate_shed_name, ShedView};

/// The shed command.
#[derive(Debug, Parser)]
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

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Shows the server's information.
    Info,
    /// Makes a shed and waits until it runs (or its create fails).
    Create {
        /// The shed's name.
        name: String,
        /// An image name of the server (default: its default image).
        #[arg(long)]
        image: Option<String>,
        /// At least this many CPUs.
        #[arg(long)]
        cpus: Option<u32>,
        /// At least this much memory, in MB.
        #[arg(long)]
        memory: Option<u32>,
        /// The boot disk's size in bytes (rounded up to whole GB, 10 to 500 GB).
        #[arg(long = "upper-size")]
        upper_size: Option<u64>,
        /// The network profile (default or isolated).
        #[arg(long = "network-profile")]
        network_profile: Option<String>,
        /// A host directory (not on a remote server).
        #[arg(long = "local-dir")]
        local_dir: Option<String>,
        /// More host directories (not on a remote server).
        #[arg(long = "add-dir")]
        add_dir: Vec<String>,
        /// A snapshot to start from (not on a remote server).
        #[arg(long = "from-snapshot")]
        from_snapshot: Option<String>,
        /// Egress profiles (not on a remote server).
        #[arg(long)]
        egress: Vec<String>,
        /// Named server mounts (not on a remote server).
        #[arg(long)]
        mounts: Vec<String>,
    },
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

impl Command {
    /// The shed name the command takes, if it takes one.
    pub fn name(&self) -> Option<&str> {
        match self {
            Command::Create { name, .. }
            | Command::Start { name }
            | Command::Stop { name }
            | Command::Delete { name } => Some(name),
            Command::Info | Command::List { .. } => None,
        }
    }
}

struct Client {
    http: reqwest::Client,
    base: url::Url,
    token: Option<String>,
}

enum Answer {
    Ok(Value),
    Err(u16, ErrorBody),
}

impl Client {
    /// A request to the API route made of `segments` under the server's root, each segment
    /// percent-encoded on its own (a `/` or `..` in a segment can never reach another route).
    fn req(&self, method: reqwest::Method, segments: &[&str]) -> reqwest::RequestBuilder {
        let mut url = self.base.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(segments);
        }
        let mut r = self.http.request(method, url);
        if let Some(t) = &self.token {
            r = r.bearer_auth(t);
        }
        r
    }

    async fn send(&self, r: reqwest::RequestBuilder) -> Result<Answer, String> {
        let resp = r.send().await.map_err(|e| format!("the server: {e}"))?;
        let status = resp.status().as_u16();
        let bytes = resp.bytes().await.map_err(|e| format!("the server: {e}"))?;
        if (200..300).contains(&status) {
            let v = if bytes.is_empty() {
                Value::Null
            } else {
                serde_json::from_slice(&bytes).map_err(|e| format!("the server's answer: {e}"))?
            };
            Ok(Answer::Ok(v))
        } else {
            let e = serde_json::from_slice::<ErrorBody>(&bytes).unwrap_or(ErrorBody {
                code: format!("HTTP_{status}"),
                message: String::from_utf8_lossy(&bytes).into_owned(),
            });
            Ok(Answer::Err(status, e))
        }
    }

    /// Follows an event stream, calling `on` for each `(event, data)`; stops when `on` says so.
    async fn events(
        &self,
        r: reqwest::RequestBuilder,
        mut on: impl FnMut(&str, Value) -> Option<i32>,
    ) -> Result<Result<i32, (u16, ErrorBody)>, String> {
        let mut resp = r
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .send()
            .await
            .map_err(|e| format!("the server: {e}"))?;
        let status = resp.status().as_u16();
        if !(200..300).contains(&status) {
            let bytes = resp.bytes().await.unwrap_or_default();
            let e = serde_json::from_slice::<ErrorBody>(&bytes).unwrap_or(ErrorBody {
                code: format!("HTTP_{status}"),
                message: String::from_utf8_lossy(&bytes).into_owned(),
            });
            return Ok(Err((status, e)));
        }
        let mut buf = String::new();
        while let Some(chunk) = resp
            .chunk()
            .await
            .map_err(|e| format!("the stream broke off: {e}"))?
        {
            buf.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(end) = buf.find("\n\n") {
                let block: String = buf.drain(..end + 2).collect();
                let mut name = "message".to_string();
                let mut data = String::new();
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("event:") {
                        name = v.trim().to_string();
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push_str(v.trim_start());
                    }
                }
                if data.is_empty() {
                    continue;
                }
                let v: Value = serde_json::from_str(&data).unwrap_or(Value::String(data));
                if let Some(code) = on(&name, v) {
                    return Ok(Ok(code));
                }
            }
        }
        Err("the stream ended before the shed settled".into())
    }
}

fn status_word(v: &ShedView, verbose: bool) -> String {
    if verbose && !v.status_reason.is_empty() {
        format!("{} ({})", v.status, v.status_reason)
    } else {
        v.status.to_string()
    }
}

/// Writes `rows` under `header`, each column as wide as its widest cell (names are up to 40
/// characters, a status with its reason up to 27), two spaces apart; the columns named in `right`
/// (numbers) are aligned right.
fn write_table(out: &mut dyn Write, header: &[&str], rows: &[Vec<String>], right: &[&str]) {
    let widths: Vec<usize> = header
        .iter()
        .enumerate()
        .map(|(i, h)| {
            rows.iter()
                .map(|r| r[i].chars().count())
                .chain([h.len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let header: Vec<String> = header.iter().map(|h| h.to_string()).collect();
    for row in std::iter::once(&header).chain(rows) {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .zip(&header)
            .map(|((cell, w), h)| {
                if right.contains(&h.as_str()) {
                    format!("{cell:>w$}")
                } else {
                    format!("{cell:<w$}")
                }
            })
            .collect();
        let _ = writeln!(out, "{}", cells.join("  ").trim_end());
    }
}

fn print_error(err: &mut dyn Write, status: u16, e: &ErrorBody) {
    let _ = writeln!(err, "shed: {} ({status}): {}", e.code, e.message);
}

/// Runs the command `args` (argv without the program name), writing to `out` and `err`; answers the
/// exit code.
pub async fn run(args: Args, out: &mut (dyn Write + Send), err: &mut (dyn Write + Send)) -> i32 {
    let base = match url::Url::parse(&args.server) {
        Ok(u) if !u.cannot_be_a_base() && matches!(u.scheme(), "http" | "https") => u,
        _ => {
            let _ = writeln!(
                err,
                "shed: --server {:?} is not an http(s) URL like http://127.0.0.1:8421",
                args.server
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
    match run_inner(&args, &client, out, err).await {
        Ok(code) => code,
        Err(e) => {
            let _ = writeln!(err, "shed: {e}");
            1
        }
    }
}

async fn info(client: &Client) -> Result<Result<Info, (u16, ErrorBody)>, String> {
    match client
        .send(client.req(reqwest::Method::GET, &["api", "info"]))
        .await?
    {
        Answer::Ok(v) => Ok(Ok(
            serde_json::from_value(v).map_err(|e| format!("the server's info: {e}"))?
        )),
        Answer::Err(s, e) => Ok(Err((s, e))),
    }
}

async fn run_inner(
    args: &Args,
    client: &Client,
    out: &mut (dyn Write + Send),
    err: &mut (dyn Write + Send),
) -> Result<i32, String> {
    match &args.command {
        Command::Info => match info(client).await? {
            Ok(i) => {
                let _ = writeln!(
                    out,
                    "{}",
                    serde_json::to_string_pretty(&i).unwrap_or_default()
                );
                Ok(0)
            }
            Err((s, e)) => {
                print_error(err, s, &e);
                Ok(1)
            }
        },
        Command::Create {
            name,
            image,
            cpus,
            memory,
            upper_size,
            network_profile,
            local_dir,
            add_dir,
            from_snapshot,
            egress,
            mounts,
        } => {
            let remote = match info(client).await? {
                Ok(i) => i.backend == "remote",
                Err((s, e)) => {
                    print_error(err, s, &e);
                    return Ok(1);
                }
            };
            if remote {
                let named_mounts = mounts.iter().any(|m| !m.is_empty() && m != "none");
                let refused = [
                    (local_dir.is_some(), "--local-dir", "host directories"),
                    (!add_dir.is_empty(), "--add-dir", "host directories"),
                    (from_snapshot.is_some(), "--from-snapshot", "snapshots"),
                    (!egress.is_empty(), "--egress", "egress profiles"),
                    (named_mounts, "--mounts", "server mounts"),
                ];
                if let Some((_, flag, what)) = refused.iter().find(|(on, _, _)| *on) {
                    let _ = writeln!(
                        err,
                        "shed: {flag} is not supported by this server (backend remote has no {what}); nothing was sent"
                    );
                    return Ok(2);
                }
            }
            let body = json!({
                "name": name,
                "image": image,
                "cpus": cpus,
                "memory_mb": memory,
                "upper_size_bytes": upper_size,
                "network_profile": network_profile,
            });
            let mut last = String::new();
            let r = client
                .events(
                    client
                        .req(reqwest::Method::POST, &["api", "sheds"])
                        .json(&body),
                    |ev, v| match ev {
                        "status" => {
                            if let Ok(s) = serde_json::from_value::<ShedView>(v) {
                                let w = status_word(&s, true);
                                if w != last {
                                    let _ = writeln!(out, "{}: {w}", s.name);
                                    last = w;
                                }
                            }
                            None
                        }
                        "complete" => {
                            let s: Option<ShedView> = serde_json::from_value(v).ok();
                            let _ = writeln!(
                                out,
                                "shed {name} is {}",
                                s.map(|s| status_word(&s, true)).unwrap_or_default()
                            );
                            Some(0)
                        }
                        "error" => {
                            let e: ErrorBody = serde_json::from_value(v).unwrap_or(ErrorBody {
                                code: "ERROR".into(),
                                message: "the create failed".into(),
                            });
                            let _ = writeln!(err, "shed: {}: {}", e.code, e.message);
                            Some(1)
                        }
                        _ => None,
                    },
                )
                .await?;
            match r {
                Ok(code) => Ok(code),
                Err((s, e)) => {
                    print_error(err, s, &e);
                    Ok(1)
                }
            }
        }
        Command::List { verbose, json } => {
            let v = match client
                .send(client.req(reqwest::Method::GET, &["api", "sheds"]))
                .await?
            {
                Answer::Ok(v) => v,
                Answer::Err(s, e) => {
                    print_error(err, s, &e);
                    return Ok(1);
                }
            };
            if *json {
                let _ = writeln!(
                    out,
                    "{}",
                    serde_json::to_string_pretty(&v).unwrap_or_default()
                );
                return Ok(0);
            }
            let sheds: Vec<ShedView> =
                serde_json::from_value(v).map_err(|e| format!("the server's list: {e}"))?;
            let header: &[&str] = if *verbose {
                &[
                    "NAME", "STATUS", "SIZE", "CPUS", "MEMORY", "DISK", "IMAGE", "CLIENT",
                ]
            } else {
                &["NAME", "STATUS", "SIZE"]
            };
            let rows = sheds
                .iter()
                .map(|s| {
                    let mut row = vec![s.name.clone(), status_word(s, *verbose), s.size.clone()];
                    if *verbose {
                        row.extend([
                            s.cpus.to_string(),
                            s.memory_mb.to_string(),
                            s.disk_gb.to_string(),
                            s.image.clone(),
                            s.client.clone(),
                        ]);
                    }
                    row
                })
                .collect::<Vec<_>>();
            write_table(out, header, &rows, &["CPUS", "MEMORY", "DISK"]);
            Ok(0)
        }
        Command::Start { name } | Command::Stop { name } => {
            let starting = matches!(args.command, Command::Start { .. });
            let action = if starting { "start" } else { "stop" };
            match client
                .send(client.req(reqwest::Method::POST, &["api", "sheds", name, action]))
                .await?
            {
                Answer::Ok(..) => {}
                Answer::Err(s, e) => {
                    print_error(err, s, &e);
                    return Ok(1);
                }
            }
            let want = if starting { "running" } else { "stopped" };
            let deadline = std::time::Instant::now() + Duration::from_secs(args.wait_secs);
            loop {
                let s = match client
                    .send(client.req(reqwest::Method::GET, &["api", "sheds", name]))
                    .await?
                {
                    Answer::Ok(v) => serde_json::from_value::<ShedView>(v)
                        .map_err(|e| format!("the server's answer: {e}"))?,
                    Answer::Err(s, e) => {
                        print_error(err, s, &e);
                        return Ok(1);
                    }
                };
                let word = s.status.to_string();
                if word == want {
                    let _ = writeln!(out, "shed {name} is {}", status_word(&s, true));
                    return Ok(0);
                }
                let settled_otherwise = word == "error" || (starting && word == "stopped");
                if settled_otherwise {
                    let _ = writeln!(err, "shed: shed {name} is {}", status_word(&s, true));
                    return Ok(1);
                }
                if std::time::Instant::now() >= deadline {
                    let _ = writeln!(
                        err,
                        "shed: shed {name} is still {} after {} s",
                        status_word(&s, true),
                        args.wait_secs
                    );
                    return Ok(1);
                }
                tokio::time::sleep(Duration::from_millis(args.poll_ms)).await;
            }
        }
        Command::Delete { name } => {
            let r = client
                .events(
                    client.req(reqwest::Method::DELETE, &["api", "sheds", name]),
                    |ev, v| match ev {
                        "complete" => {
                            let _ = writeln!(out, "shed {name} deleted");
                            Some(0)
                        }
                        "error" => {
                            let e: Option<ErrorBody> = serde_json::from_value(v).ok();
                            let _ = writeln!(
                                err,
                                "shed: {}",
                                e.map(|e| e.message).unwrap_or_else(|| {
                                    "the delete is recorded but the VM could not be destroyed yet; the server keeps trying".into()
                                })
                            );
                            Some(1)
                        }
                        _ => None,
                    },
                )
                .await?;
            match r {
                Ok(code) => Ok(code),
                Err((s, e)) => {
                    print_error(err, s, &e);
                    Ok(1)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_path_segment_is_percent_encoded_on_its_own() {
        let client = Client {
            http: reqwest::Client::new(),
            base: url::Url::parse("http://127.0.0.1:8421/prefix/").unwrap(),
            token: None,
        };
        let r = client
            .req(
                reqwest::Method::POST,
                &["api", "sheds", "zz/../b?x#y", "stop"],
            )
            .build()
            .unwrap();
        assert_eq!(
            r.url().as_str(),
            "http://127.0.0.1:8421/prefix/api/sheds/zz%2F..%2Fb%3Fx%23y/stop"
        );
    }
}
