//! The host channel: running one command on a fleet host or a cloud host over SSH.
//!
//! [`HostChannel`] is the one small trait; [`OpenSsh`] implements it with the system's OpenSSH client
//! and strict host-key checking against the key pinned for the target
//! (`ssh -o StrictHostKeyChecking=yes -o UserKnownHostsFile=<pinned> -o HostKeyAlias=<name> -i <key>`),
//! and [`FakeFleet`] is an in-process fleet for `--provider fake` and the tests: simulated hosts that
//! answer the commands stado sends (the egress question, enrolment, cloud-init, the version probes, the
//! reap probe), check the pinned host key and the fleet key as sshd would, and can be told to fail.

mod fleet;
mod openssh;

use std::time::Duration;

use async_trait::async_trait;
use orca::spec::printable;

use crate::registry::Target;

pub use fleet::{FakeFleet, FirstBoot, FleetState, SimHost};
pub use openssh::{OpenSsh, OUTPUT_CUT, OUTPUT_LIMIT};

/// What a command answered.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Output {
    /// Its exit status.
    pub status: i32,
    /// What it printed ([`OpenSsh`] keeps at most [`OUTPUT_LIMIT`] of it, ending with [`OUTPUT_CUT`]
    /// when cut).
    pub stdout: String,
    /// What it printed on stderr (bounded and marked alike).
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
        let last = |text: &str| {
            text.lines()
                .rev()
                .map(str::trim)
                .find(|l| !l.is_empty())
                .map(printable)
        };
        last(&self.stderr)
            .or_else(|| last(&self.stdout))
            .unwrap_or_default()
    }
}

/// Runs one command on a host, reached as its registry target says (port 22 when it names none).
/// `Err` when the host could not be reached or refused stado (the cause in ssh's words); `Ok` with
/// the command's status otherwise.
#[async_trait]
pub trait HostChannel: Send + Sync + std::fmt::Debug {
    /// Runs `command` (a POSIX shell line) on `host`, giving up after `timeout`.
    async fn run(&self, host: &Target, command: &str, timeout: Duration) -> Result<Output, String>;

    /// Whether this channel can reach any host at all with the files at `paths` (a key, a pinned
    /// host key; they need not exist yet), without connecting: what fails here fails every attempt
    /// alike, and no retry mends it.
    fn can_run(&self, _paths: &[&std::path::Path]) -> Result<(), String> {
        Ok(())
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_host_said_is_shown_with_its_control_characters_escaped() {
        let out = Output {
            status: 1,
            stdout: String::new(),
            stderr: "boom \x1b[2J\n".into(),
        };
        assert_eq!(out.last_words(), "boom \\x1b[2J");
    }

    #[test]
    fn a_failure_says_stderrs_last_line_before_stdouts() {
        let out = Output {
            status: 255,
            stdout: "some output\nits last line\n\n".into(),
            stderr: "ssh: connect to host h1 port 22: Connection refused\n\n".into(),
        };
        assert_eq!(
            out.last_words(),
            "ssh: connect to host h1 port 22: Connection refused"
        );
        let quiet = Output {
            stderr: " \n".into(),
            ..out
        };
        assert_eq!(quiet.last_words(), "its last line");
    }
}
