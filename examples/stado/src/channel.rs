//! The host channel: running one command on a fleet host or a cloud host over SSH.
//!
//! [`HostChannel`] is the one small trait; [`OpenSsh`] implements it with the system's OpenSSH client
//! and strict host-key checking against the key pinned for the target
//! (`ssh -o StrictHostKeyChecking=yes -o UserKnownHostsFile=<pinned> -o HostKeyAlias=<name> -i <key>`),
//! and [`FakeFleet`] is an in-process fleet for `--provider fake` and the tests: simulated hosts that
//! answer the commands stado sends (the egress question, enrolment, cloud-init, the version probes, the
//! reap probe), check the pinned host key and the fleet key as sshd would, and can be told to fail.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use orca::Timestamp;
use serde::{Deserialize, Serialize};

use crate::error::Failure;
use crate::home::{read_json, write_json, WriteLock};
use crate::registry::Target;

/// How to reach one host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The target's name (also the alias its host key is pinned under).
    pub name: String,
    /// Its address.
    pub address: String,
    /// The account to log in as (`None`: ssh's default).
    pub user: Option<String>,
    /// The SSH port.
    pub port: u16,
    /// The private key to log in with (`None`: ssh's own choice, for fleet hosts).
    pub identity: Option<PathBuf>,
    /// The known_hosts file pinning its host key.
    pub known_hosts: Option<PathBuf>,
}

impl Endpoint {
    /// The endpoint of a registry target.
    pub fn of(t: &Target) -> Endpoint {
        Endpoint {
            name: t.name.clone(),
            address: t.address.clone(),
            user: t.user.clone(),
            port: t.port.unwrap_or(22),
            identity: t.identity.clone(),
            known_hosts: t.known_hosts.clone(),
        }
    }
}

/// What a command answered.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Output {
    /// Its exit status.
    pub status: i32,
    /// What it printed.
    pub stdout: String,
    /// What it printed on stderr.
    pub stderr: String,
}

impl Output {
    /// An answer of status 0 printing `stdout`.
    pub fn ok(stdout: impl Into<String>) -> Output {
        Output {
            status: 0,
            stdout: stdout.into(),
            stderr: String::new(),
        }
    }

    /// The last non-empty line of stderr, else of stdout: what a failure says.
    pub fn last_words(&self) -> String {
        self.stderr
            .lines()
            .chain(self.stdout.lines())
            .rev()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .unwrap_or("")
            .to_string()
    }
}

/// Runs one command on a host. `Err` when the host could not be reached or refused stado (the cause
/// in ssh's words); `Ok` with the command's status otherwise.
#[async_trait]
pub trait HostChannel: Send + Sync + std::fmt::Debug {
    /// Runs `command` (a POSIX shell line) on `host`, giving up after `timeout`.
    async fn run(
        &self,
        host: &Endpoint,
        command: &str,
        timeout: Duration,
    ) -> Result<Output, String>;
}

/// The commands stado sends.
pub mod commands {
    /// Asks the product site which address the request came from.
    pub fn egress(api_url: &str) -> String {
        format!("curl -fsS --max-time 20 '{api_url}/api/egress'")
    }
    /// Enrolment's probe: the host answers its name.
    pub const ENROL: &str = "uname -n";
    /// Waits for cloud-init to finish.
    pub const CLOUD_INIT_WAIT: &str = "cloud-init status --wait";
    /// The Rust compiler rustup installed in the account's home.
    pub const RUSTC_VERSION: &str = "\"$HOME/.cargo/bin/rustc\" --version";
    /// Node.js.
    pub const NODE_VERSION: &str = "node --version";
    /// npm.
    pub const NPM_VERSION: &str = "npm --version";
    /// Reap's reading: runs standing in the run area, when it last changed, cargo and rustc
    /// processes, and the host's clock.
    pub const REAP_PROBE: &str = "r=\"$HOME/.stado/work/runs\"; if [ -d \"$r\" ]; then echo \"runs $(find \"$r\" -mindepth 1 -maxdepth 1 | wc -l)\"; echo \"changed $(stat -c %Y \"$r\")\"; else echo 'runs 0'; echo 'changed none'; fi; echo \"procs $(pgrep -c -x 'cargo|rustc' || true)\"; echo \"now $(date +%s)\"";
}

/// The system's OpenSSH client, with strict host-key checking against the pinned key.
#[derive(Debug, Clone)]
pub struct OpenSsh {
    program: PathBuf,
    connect_timeout: Duration,
}

impl Default for OpenSsh {
    fn default() -> Self {
        OpenSsh {
            program: std::env::var_os("STADO_SSH")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from("ssh")),
            connect_timeout: Duration::from_secs(15),
        }
    }
}

impl OpenSsh {
    /// The client `program` (tests give a stand-in).
    pub fn with_program(program: impl Into<PathBuf>) -> OpenSsh {
        OpenSsh {
            program: program.into(),
            ..OpenSsh::default()
        }
    }

    /// The arguments for `command` on `host`; refuses a host with no pinned key.
    pub fn args(&self, host: &Endpoint, command: &str) -> Result<Vec<String>, String> {
        let pinned = host.known_hosts.as_ref().ok_or_else(|| {
            format!(
                "no host key is pinned for {}; stado connects only to pinned hosts",
                host.name
            )
        })?;
        if !pinned.is_file() {
            return Err(format!(
                "the pinned host key of {} ({}) is missing; stado connects only to pinned hosts",
                host.name,
                pinned.display()
            ));
        }
        let mut a: Vec<String> = Vec::new();
        let mut o = |k: &str, v: &str| {
            a.push("-o".into());
            a.push(format!("{k}={v}"));
        };
        o("BatchMode", "yes");
        o("StrictHostKeyChecking", "yes");
        o("UserKnownHostsFile", &path_text(pinned));
        o("GlobalKnownHostsFile", "/dev/null");
        o("HostKeyAlias", &host.name);
        o("CheckHostIP", "no");
        o("UpdateHostKeys", "no");
        o("PasswordAuthentication", "no");
        o("KbdInteractiveAuthentication", "no");
        o(
            "ConnectTimeout",
            &self.connect_timeout.as_secs().max(1).to_string(),
        );
        o("LogLevel", "ERROR");
        if let Some(key) = &host.identity {
            o("IdentitiesOnly", "yes");
            a.push("-i".into());
            a.push(path_text(key));
        }
        a.push("-p".into());
        a.push(host.port.to_string());
        if let Some(u) = &host.user {
            a.push("-l".into());
            a.push(u.clone());
        }
        a.push("--".into());
        a.push(host.address.clone());
        a.push(command.to_string());
        Ok(a)
    }
}

fn path_text(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

#[async_trait]
impl HostChannel for OpenSsh {
    async fn run(
        &self,
        host: &Endpoint,
        command: &str,
        timeout: Duration,
    ) -> Result<Output, String> {
        let args = self.args(host, command)?;
        let mut cmd = tokio::process::Command::new(&self.program);
        cmd.args(&args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        let child = cmd
            .spawn()
            .map_err(|e| format!("could not run {}: {e}", self.program.display()))?;
        let out = match tokio::time::timeout(timeout, child.wait_with_output()).await {
            Ok(Ok(out)) => out,
            Ok(Err(e)) => return Err(format!("ssh: {e}")),
            Err(_) => return Err(format!("no answer within {} s", timeout.as_secs())),
        };
        let out = Output {
            status: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        };
        // ssh's own failures (unreachable, refused key, changed host key) exit 255.
        if out.status == 255 {
            let words = out.last_words();
            return Err(if words.is_empty() {
                "ssh failed (status 255)".to_string()
            } else {
                words
            });
        }
        Ok(out)
    }
}

/// How a simulated host's first boot ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FirstBoot {
    /// cloud-init finished cleanly.
    #[default]
    Done,
    /// cloud-init finished with errors.
    Error,
    /// cloud-init finished with recoverable errors.
    Degraded,
}

fn yes() -> bool {
    true
}

/// One simulated host of a [`FakeFleet`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SimHost {
    /// The address the product site sees it at (`None`: one made from its name).
    #[serde(default)]
    pub egress: Option<String>,
    /// Whether it answers SSH at all.
    #[serde(default = "yes")]
    pub answers: bool,
    /// The host key it presents (a cloud host's, given at boot).
    #[serde(default)]
    pub host_key: Option<String>,
    /// The public keys its account accepts (empty: any, for fleet hosts set up by hand).
    #[serde(default)]
    pub authorized_keys: Vec<String>,
    /// How its first boot ended.
    #[serde(default)]
    pub first_boot: FirstBoot,
    /// Whether rustc, node and npm answer.
    #[serde(default = "yes")]
    pub toolchain: bool,
    /// Runs standing in `~/.stado/work/runs`.
    #[serde(default)]
    pub runs: u32,
    /// cargo and rustc processes.
    #[serde(default)]
    pub procs: u32,
    /// When the run area last changed (`None`: no run ever came).
    #[serde(default)]
    pub run_area_changed: Option<Timestamp>,
    /// Commands it ran.
    #[serde(default)]
    pub commands: u32,
}

impl Default for SimHost {
    fn default() -> Self {
        SimHost {
            egress: None,
            answers: true,
            host_key: None,
            authorized_keys: Vec::new(),
            first_boot: FirstBoot::Done,
            toolchain: true,
            runs: 0,
            procs: 0,
            run_area_changed: None,
            commands: 0,
        }
    }
}

/// The simulated fleet's state.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FleetState {
    /// Hosts by target name.
    #[serde(default)]
    pub hosts: BTreeMap<String, SimHost>,
    /// How far the hosts' clocks are ahead of this machine's, in seconds.
    #[serde(default)]
    pub clock_offset_secs: i64,
}

/// An in-process fleet of simulated hosts (held in memory, or in a state file shared by separate
/// runs of stado on `--provider fake`).
///
/// A host is reached by its target name. It refuses a connection whose pinned known_hosts file does
/// not hold the host key it presents (`Host key verification failed.`), and one whose identity is not
/// among its authorized keys (`Permission denied (publickey).`), as sshd and a strict client do. With
/// [`FakeFleet::with_cloud`], a host whose address belongs to a machine of the in-memory cloud answers
/// only while that machine runs, and accepts the SSH keys that machine was made with.
#[derive(Debug, Clone, Default)]
pub struct FakeFleet {
    state: Arc<Mutex<FleetState>>,
    path: Option<PathBuf>,
    cloud: Option<orca::memory::MemoryCloud>,
}

impl FakeFleet {
    /// A fleet held in memory.
    pub fn new() -> FakeFleet {
        FakeFleet::default()
    }

    /// A fleet kept in the file at `path`.
    pub fn persistent(path: impl Into<PathBuf>) -> FakeFleet {
        FakeFleet {
            path: Some(path.into()),
            ..FakeFleet::default()
        }
    }

    /// The same fleet, its cloud hosts being the machines of `cloud`.
    pub fn with_cloud(mut self, cloud: orca::memory::MemoryCloud) -> FakeFleet {
        self.cloud = Some(cloud);
        self
    }

    /// Runs `f` on the state (read from and written back to the file when persistent).
    pub fn with_state<R>(&self, f: impl FnOnce(&mut FleetState) -> R) -> Result<R, Failure> {
        let mut mem = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let Some(path) = &self.path else {
            return Ok(f(&mut mem));
        };
        let _lock = WriteLock::wait(path)?;
        let mut s: FleetState = read_json(path)?;
        let before = s.clone();
        let r = f(&mut s);
        if s != before || !path.exists() {
            write_json(path, &s)?;
        }
        *mem = s;
        Ok(r)
    }

    /// Host `name` as the fleet holds it (a default host when never set).
    pub fn host(&self, name: &str) -> SimHost {
        self.with_state(|s| s.hosts.get(name).cloned().unwrap_or_default())
            .unwrap_or_default()
    }

    /// Changes host `name` (made when missing).
    pub fn update(&self, name: &str, f: impl FnOnce(&mut SimHost)) -> Result<(), Failure> {
        self.with_state(|s| f(s.hosts.entry(name.to_string()).or_default()))
    }

    /// A cloud host `name` boots: cloud-init installs `host_key` (the public half stado pinned) and the
    /// fleet key `authorized`. What was planned for it (answers, first boot, toolchain) is kept.
    pub fn boot(&self, name: &str, host_key: &str, authorized: &str) -> Result<(), Failure> {
        self.update(name, |h| {
            h.host_key = Some(host_key.to_string());
            h.authorized_keys = vec![authorized.to_string()];
            h.runs = 0;
            h.procs = 0;
            h.run_area_changed = None;
        })
    }

    /// Forgets host `name`.
    pub fn forget(&self, name: &str) -> Result<(), Failure> {
        self.with_state(|s| {
            s.hosts.remove(name);
        })
    }

    /// Moves every host's clock forward by `by`.
    pub fn advance(&self, by: Duration) -> Result<(), Failure> {
        self.with_state(|s| s.clock_offset_secs += i64::try_from(by.as_secs()).unwrap_or(0))
    }

    /// The hosts' clock.
    pub fn now(&self) -> Timestamp {
        let off = self.with_state(|s| s.clock_offset_secs).unwrap_or(0);
        chrono::Utc::now() + chrono::Duration::seconds(off)
    }

    /// The address the product site sees host `name` at when none was set: one of TEST-NET-3
    /// (203.0.113.0/24, RFC 5737), from the name.
    pub fn default_egress(name: &str) -> String {
        let h = name
            .bytes()
            .fold(17u32, |a, b| a.wrapping_mul(31).wrapping_add(u32::from(b)));
        format!("203.0.113.{}", h % 250 + 1)
    }

    fn answer(h: &SimHost, name: &str, command: &str, now: Timestamp) -> Output {
        let fail = |status: i32, err: &str| Output {
            status,
            stdout: String::new(),
            stderr: format!("{err}\n"),
        };
        if command.starts_with("curl ") && command.ends_with("/api/egress'") {
            let addr = h
                .egress
                .clone()
                .unwrap_or_else(|| Self::default_egress(name));
            return Output::ok(format!("{addr}\n"));
        }
        match command {
            commands::ENROL => Output::ok(format!("{name}\n")),
            commands::CLOUD_INIT_WAIT => match h.first_boot {
                FirstBoot::Done => Output::ok("\nstatus: done\n"),
                FirstBoot::Error => Output {
                    status: 1,
                    stdout: "\nstatus: error\n".into(),
                    stderr: String::new(),
                },
                FirstBoot::Degraded => Output {
                    status: 2,
                    stdout: "\nstatus: degraded done\n".into(),
                    stderr: String::new(),
                },
            },
            commands::RUSTC_VERSION if h.toolchain => {
                Output::ok("rustc 1.95.0 (59807616e 2026-04-14)\n")
            }
            commands::NODE_VERSION if h.toolchain => Output::ok("v18.19.1\n"),
            commands::NPM_VERSION if h.toolchain => Output::ok("9.2.0\n"),
            commands::RUSTC_VERSION => fail(127, "sh: 1: /home/stado/.cargo/bin/rustc: not found"),
            commands::NODE_VERSION => fail(127, "sh: 1: node: not found"),
            commands::NPM_VERSION => fail(127, "sh: 1: npm: not found"),
            commands::REAP_PROBE => {
                let changed = h
                    .run_area_changed
                    .map(|t| t.timestamp().to_string())
                    .unwrap_or_else(|| "none".into());
                Output::ok(format!(
                    "runs {}\nchanged {changed}\nprocs {}\nnow {}\n",
                    h.runs,
                    h.procs,
                    now.timestamp()
                ))
            }
            other => fail(
                127,
                &format!(
                    "sh: 1: {}: not found",
                    other.split_whitespace().next().unwrap_or("")
                ),
            ),
        }
    }
}

#[async_trait]
impl HostChannel for FakeFleet {
    async fn run(
        &self,
        host: &Endpoint,
        command: &str,
        _timeout: Duration,
    ) -> Result<Output, String> {
        let unreachable = || {
            format!(
                "ssh: connect to host {} port {}: Connection timed out",
                host.address, host.port
            )
        };
        // A cloud host lives while its machine runs, and accepts the keys it was made with.
        let mut accepted: Option<Vec<String>> = None;
        if let Some(cloud) = &self.cloud {
            if let Some(m) = cloud
                .all_machines()
                .into_iter()
                .find(|m| m.address == host.address)
            {
                if m.status != orca::Status::Running {
                    return Err(unreachable());
                }
                accepted = Some(cloud.extras(&m.id).map(|x| x.ssh_keys).unwrap_or_default());
            }
        }
        let now = self.now();
        let name = host.name.clone();
        let result = self
            .with_state(|s| {
                // A fleet host never described answers as a default one; a cloud machine presents
                // the host key its cloud-init installed, and none if it was never booted here.
                let is_vm = accepted.is_some();
                let h = s.hosts.entry(name.clone()).or_default();
                if !h.answers {
                    return Err(unreachable());
                }
                if is_vm && h.host_key.is_none() {
                    return Err("Host key verification failed.".into());
                }
                if let Some(key) = &h.host_key {
                    let pinned = host
                        .known_hosts
                        .as_ref()
                        .and_then(|p| std::fs::read_to_string(p).ok())
                        .unwrap_or_default();
                    let matches = pinned.lines().any(|l| {
                        let mut parts = l.split_whitespace();
                        parts.next() == Some(host.name.as_str())
                            && parts
                                .next()
                                .zip(parts.next())
                                .map(|(a, b)| format!("{a} {b}"))
                                .as_deref()
                                == Some(key.as_str())
                    });
                    if !matches {
                        return Err("Host key verification failed.".into());
                    }
                }
                let authorized = accepted
                    .clone()
                    .unwrap_or_else(|| h.authorized_keys.clone());
                if !authorized.is_empty() {
                    let offered = host
                        .identity
                        .as_deref()
                        .and_then(crate::keys::public_line_of);
                    let key_of =
                        |l: &str| l.split_whitespace().take(2).collect::<Vec<_>>().join(" ");
                    let ok = offered
                        .as_deref()
                        .is_some_and(|o| authorized.iter().any(|a| key_of(a) == key_of(o)));
                    if !ok {
                        return Err(format!(
                            "{}@{}: Permission denied (publickey).",
                            host.user.as_deref().unwrap_or("stado"),
                            host.address
                        ));
                    }
                }
                h.commands += 1;
                Ok(Self::answer(h, &name, command, now))
            })
            .map_err(|e| e.to_string())?;
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openssh_checks_the_pinned_key_strictly_and_uses_only_the_fleet_key() {
        let dir = tempfile::tempdir().unwrap();
        let pinned = dir.path().join("pinned");
        let host = Endpoint {
            name: "h1".into(),
            address: "198.51.100.7".into(),
            user: Some("stado".into()),
            port: 22,
            identity: Some(dir.path().join("key")),
            known_hosts: Some(pinned.clone()),
        };
        let ssh = OpenSsh::with_program("ssh");
        let e = ssh.args(&host, "true").unwrap_err();
        assert!(e.contains("pinned host key of h1"), "{e}");
        std::fs::write(&pinned, "h1 ssh-ed25519 AAAA\n").unwrap();
        let a = ssh.args(&host, "uname -n").unwrap().join(" ");
        for want in [
            "-o StrictHostKeyChecking=yes",
            &format!("-o UserKnownHostsFile={}", pinned.display()),
            "-o GlobalKnownHostsFile=/dev/null",
            "-o HostKeyAlias=h1",
            "-o BatchMode=yes",
            "-o PasswordAuthentication=no",
            "-o IdentitiesOnly=yes",
            &format!("-i {}", dir.path().join("key").display()),
            "-l stado -- 198.51.100.7 uname -n",
        ] {
            assert!(a.contains(want), "{want} not in {a}");
        }
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn openssh_runs_the_client_and_reads_its_failures() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let pinned = dir.path().join("pinned");
        std::fs::write(&pinned, "h1 ssh-ed25519 AAAA\n").unwrap();
        // A stand-in for ssh: prints its arguments, or fails as ssh does on a changed host key.
        let fake = dir.path().join("ssh");
        std::fs::write(
            &fake,
            "#!/bin/sh\nfor a in \"$@\"; do last=\"$a\"; done\nif [ \"$last\" = fail ]; then echo 'Host key verification failed.' >&2; exit 255; fi\necho \"$@\"\n",
        )
        .unwrap();
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        let host = Endpoint {
            name: "h1".into(),
            address: "198.51.100.7".into(),
            user: None,
            port: 2222,
            identity: None,
            known_hosts: Some(pinned),
        };
        let ssh = OpenSsh::with_program(&fake);
        let out = ssh
            .run(&host, "echo hi", Duration::from_secs(10))
            .await
            .unwrap();
        assert_eq!(out.status, 0);
        assert!(
            out.stdout.contains("StrictHostKeyChecking=yes"),
            "{}",
            out.stdout
        );
        assert!(
            out.stdout.contains("-p 2222 -- 198.51.100.7 echo hi"),
            "{}",
            out.stdout
        );
        assert!(
            !out.stdout.contains("IdentitiesOnly"),
            "no fleet key: ssh's own"
        );
        let e = ssh
            .run(&host, "fail", Duration::from_secs(10))
            .await
            .unwrap_err();
        assert_eq!(e, "Host key verification failed.");
    }

    #[tokio::test]
    async fn the_fake_fleet_refuses_an_unpinned_host_key_and_a_foreign_fleet_key() {
        let dir = tempfile::tempdir().unwrap();
        let fleet = FakeFleet::new();
        let home = crate::home::Home::open(dir.path()).unwrap();
        let key = crate::keys::generate_fleet_key(&home, "h1").unwrap();
        let host_key = crate::keys::KeyPair::generate("host").unwrap();
        fleet
            .boot("h1", &host_key.public_key_only(), &key.public_line)
            .unwrap();
        let mut ep = Endpoint {
            name: "h1".into(),
            address: "198.51.100.9".into(),
            user: Some("stado".into()),
            port: 22,
            identity: Some(key.private.clone()),
            known_hosts: Some(home.pinned_host_key("h1")),
        };
        let t = Duration::from_secs(5);
        assert_eq!(
            fleet.run(&ep, commands::ENROL, t).await.unwrap_err(),
            "Host key verification failed."
        );
        crate::keys::pin_host_key(&home, "h1", &host_key.public_key_only()).unwrap();
        assert_eq!(
            fleet.run(&ep, commands::ENROL, t).await.unwrap().stdout,
            "h1\n"
        );
        let other = crate::keys::generate_fleet_key(&home, "h2").unwrap();
        ep.identity = Some(other.private);
        assert!(fleet
            .run(&ep, commands::ENROL, t)
            .await
            .unwrap_err()
            .contains("Permission denied (publickey)"));
    }
}
