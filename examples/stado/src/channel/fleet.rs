//! [`FakeFleet`]: an in-process fleet of simulated hosts for `--provider fake` and the tests. A host
//! answers the commands stado sends, checks the pinned host key and the fleet key as sshd and a strict
//! client would, and can be told to fail.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use orca::Timestamp;
use serde::{Deserialize, Serialize};

use super::{commands, HostChannel, Output};
use crate::error::Failure;
use crate::files::{read_json, write_json};
use crate::home::wait_lock;
use crate::registry::Target;

orca::words! {
    /// How a simulated host's first boot ended.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
    #[serde(rename_all = "snake_case")]
    pub enum FirstBoot {
        /// cloud-init finished cleanly.
        #[default]
        Done = "done",
        /// cloud-init finished with errors.
        Error = "error",
        /// cloud-init finished with recoverable errors.
        Degraded = "degraded",
    }
}

/// One simulated host of a [`FakeFleet`]; a field its file lacks is the default host's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SimHost {
    /// The address the product site sees it at (`None`: one made from its name).
    pub egress: Option<String>,
    /// Whether it answers SSH at all.
    pub answers: bool,
    /// The host key it presents (a cloud host's, given at boot).
    pub host_key: Option<String>,
    /// The public keys its account accepts (empty: any, for fleet hosts set up by hand).
    pub authorized_keys: Vec<String>,
    /// How its first boot ended.
    pub first_boot: FirstBoot,
    /// Whether rustc, node and npm answer.
    pub toolchain: bool,
    /// Runs standing in `~/.stado/work/runs`.
    pub runs: u32,
    /// cargo and rustc processes.
    pub procs: u32,
    /// When the run area last changed (`None`: no run ever came).
    pub run_area_changed: Option<Timestamp>,
    /// Commands it ran.
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
#[serde(default)]
pub struct FleetState {
    /// Hosts by target name.
    pub hosts: BTreeMap<String, SimHost>,
    /// How far the hosts' clocks are ahead of this machine's, in seconds.
    pub clock_offset_secs: i64,
}

/// An in-process fleet of simulated hosts, held in memory (`default()`) or in a state file shared by
/// separate runs of stado on `--provider fake` ([`FakeFleet::persistent`]).
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
        let mut mem = orca::kit::lock(&self.state);
        let Some(path) = &self.path else {
            return Ok(f(&mut mem));
        };
        let _lock = wait_lock(path)?;
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
                    ..Output::ok("\nstatus: error\n")
                },
                FirstBoot::Degraded => Output {
                    status: 2,
                    ..Output::ok("\nstatus: degraded done\n")
                },
            },
            commands::RUSTC_VERSION if h.toolchain => {
                Output::ok("rustc 1.95.0 (59807616e 2026-04-14)\n")
            }
            commands::NODE_VERSION if h.toolchain => Output::ok("v18.19.1\n"),
            commands::NPM_VERSION if h.toolchain => Output::ok("9.2.0\n"),
            commands::RUSTC_VERSION => fail(127, "sh: 1: /home/stado/.cargo/bin/rustc: not found"),
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
            // node and npm without the toolchain, too.
            other => {
                let program = other.split_whitespace().next().unwrap_or("");
                fail(127, &format!("sh: 1: {program}: not found"))
            }
        }
    }
}

#[async_trait]
impl HostChannel for FakeFleet {
    async fn run(
        &self,
        host: &Target,
        command: &str,
        _timeout: Duration,
    ) -> Result<Output, String> {
        let unreachable = || {
            format!(
                "ssh: connect to host {} port {}: Connection timed out",
                host.address,
                host.port.unwrap_or(22)
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
        // The state's own failure, else the host's answer.
        self.with_state(|s| {
            // A fleet host never described answers as a default one; a cloud machine presents
            // the host key its cloud-init installed, and none if it was never booted here.
            let is_vm = accepted.is_some();
            let h = s.hosts.entry(name.clone()).or_default();
            if !h.answers {
                return Err(unreachable());
            }
            let verified = match &h.host_key {
                Some(key) => pins(host, key),
                None => !is_vm,
            };
            if !verified {
                return Err("Host key verification failed.".into());
            }
            let authorized = accepted
                .clone()
                .unwrap_or_else(|| h.authorized_keys.clone());
            if !authorized.is_empty() && !offers_one_of(host, &authorized) {
                return Err(format!(
                    "{}@{}: Permission denied (publickey).",
                    host.user.as_deref().unwrap_or("stado"),
                    host.address
                ));
            }
            h.commands += 1;
            Ok(Self::answer(h, &name, command, now))
        })
        .map_err(|e| e.to_string())?
    }
}

/// Whether the known_hosts file `host` pins holds `key` (`ssh-ed25519 AAAA...`) under the host's
/// name, as a strict client with `HostKeyAlias=<name>` checks it.
fn pins(host: &Target, key: &str) -> bool {
    let pinned = host
        .known_hosts
        .as_ref()
        .and_then(|p| std::fs::read_to_string(p).ok())
        .unwrap_or_default();
    pinned.lines().any(|l| {
        let mut parts = l.split_whitespace();
        parts.next() == Some(host.name.as_str())
            && parts
                .next()
                .zip(parts.next())
                .map(|(a, b)| format!("{a} {b}"))
                .as_deref()
                == Some(key)
    })
}

/// Whether the identity `host` logs in with is one of the `authorized` public keys, as sshd checks it.
fn offers_one_of(host: &Target, authorized: &[String]) -> bool {
    let offered = host
        .identity
        .as_deref()
        .and_then(crate::keys::public_line_of);
    let key_of = |l: &str| l.split_whitespace().take(2).collect::<Vec<_>>().join(" ");
    offered
        .as_deref()
        .is_some_and(|o| authorized.iter().any(|a| key_of(a) == key_of(o)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_first_boots_word_is_its_serde_name() {
        for b in FirstBoot::ALL {
            assert_eq!(serde_json::to_value(b).unwrap(), b.as_str());
            assert_eq!(
                serde_json::from_value::<FirstBoot>(b.as_str().into()).unwrap(),
                b
            );
        }
    }

    #[tokio::test]
    async fn the_fake_fleet_refuses_an_unpinned_host_key_and_a_foreign_fleet_key() {
        let dir = tempfile::tempdir().unwrap();
        let fleet = FakeFleet::default();
        let home = crate::home::Home::open(dir.path()).unwrap();
        let key = crate::keys::generate_fleet_key(&home, "h1").unwrap();
        let host_key = crate::keys::KeyPair::generate("host").unwrap();
        fleet
            .boot("h1", &host_key.public_key_only(), &key.public_line)
            .unwrap();
        let mut ep = Target {
            name: "h1".into(),
            address: "198.51.100.9".into(),
            user: Some("stado".into()),
            port: Some(22),
            identity: Some(key.private.clone()),
            known_hosts: Some(home.pinned_host_key("h1")),
            ..Target::default()
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
