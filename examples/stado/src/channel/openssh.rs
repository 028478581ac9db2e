//! [`OpenSsh`]: the host channel over the system's OpenSSH client, with strict host-key checking
//! against the key pinned for the target and only the target's fleet key.

use std::path::PathBuf;
use std::time::Duration;

use async_trait::async_trait;

use super::{Endpoint, HostChannel, Output};

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
        o("UserKnownHostsFile", &pinned.to_string_lossy());
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
            a.push(key.to_string_lossy().into_owned());
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
}
