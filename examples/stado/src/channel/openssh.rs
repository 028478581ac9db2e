//! [`OpenSsh`]: the host channel over the system's OpenSSH client, with strict host-key checking
//! against the key pinned for the target and only the target's fleet key.

use std::path::PathBuf;
use std::time::Duration;

use async_trait::async_trait;
use tokio::io::{AsyncRead, AsyncReadExt};

use super::{HostChannel, Output};
use crate::registry::Target;

/// The most stado keeps of what one command prints, on stdout and on stderr each: 1 MiB. A host
/// answers stado's probes in a few lines and cloud-init's wait in a few KiB; without a bound a host
/// that prints without end (a compromised one) would make stado hold all of it, for as long as the
/// command's timeout (45 minutes for cloud-init).
pub const OUTPUT_LIMIT: usize = 1024 * 1024;

/// What ends a stream cut at [`OUTPUT_LIMIT`], on a line of its own, so that whoever reads the
/// output (and a failure's last words) sees that it is not all of it.
pub const OUTPUT_CUT: &str = "\n[stado cut this output: it kept only its first 1 MiB]";

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
    pub fn args(&self, host: &Target, command: &str) -> Result<Vec<String>, String> {
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
        let pinned = config_path(pinned)?;
        let identity = host
            .identity
            .as_deref()
            .map(|k| config_path(k).map(|v| (k, v)))
            .transpose()?;
        // No config file: a user's or the system's would reach the build hosts (an agent
        // forwarded, forwardings, a local command, host keys beside the pinned file, and `Match
        // exec` commands run while it is read), and a host stado reaches is wholly described by
        // the registry. `-F` is older than any option that could say the same one by one.
        let mut a: Vec<String> = vec!["-F".into(), "/dev/null".into()];
        let mut o = |k: &str, v: &str| {
            a.push("-o".into());
            a.push(format!("{k}={v}"));
        };
        // Said again one by one, should the client read a config all the same (a wrapper named by
        // STADO_SSH that adds one): options on the command line win over any file's. Each is known
        // to every OpenSSH still in use, which refuses an option it does not know (so no
        // `KnownHostsCommand=none`, 8.5 and later: `-F` and the pinned files below cover it).
        for (k, v) in [
            ("ForwardAgent", "no"),
            ("ForwardX11", "no"),
            ("ForwardX11Trusted", "no"),
            ("ClearAllForwardings", "yes"),
            ("PermitLocalCommand", "no"),
            ("ControlMaster", "no"),
            ("ControlPath", "none"),
            ("ProxyCommand", "none"),
            ("Tunnel", "no"),
            ("RequestTTY", "no"),
        ] {
            o(k, v);
        }
        o("BatchMode", "yes");
        o("StrictHostKeyChecking", "yes");
        o("UserKnownHostsFile", &pinned);
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
        if let Some((key, value)) = identity {
            o("IdentitiesOnly", "yes");
            if value == key.as_os_str().to_string_lossy() {
                a.extend(["-i".into(), value]);
            } else {
                // `-i` is looked up as written before ssh expands its % tokens, so an escaped path
                // would not be found there; the option takes it as the config file would.
                o("IdentityFile", &value);
            }
        }
        a.extend(["-p".into(), host.port.unwrap_or(22).to_string()]);
        if let Some(u) = &host.user {
            a.extend(["-l".into(), u.clone()]);
        }
        a.extend(["--".into(), host.address.clone(), command.to_string()]);
        Ok(a)
    }
}

/// `path` as ssh's option parser reads it back whole: as it is when nothing in it is special, else
/// in double quotes with `\\` and `"` escaped (ssh splits an option's value on whitespace and reads
/// quotes) and `%` doubled (ssh expands `%` tokens in known_hosts and identity files). A path ssh
/// cannot be given whole (one holding `${`, which ssh expands and cannot escape, a control character,
/// or bytes that are not UTF-8) is refused.
fn config_path(path: &std::path::Path) -> Result<String, String> {
    let refused = |why: &str| {
        format!(
            "{} cannot be given to ssh: {why}; use a stado home whose path has none",
            path.display()
        )
    };
    let text = path.to_str().ok_or_else(|| refused("it is not UTF-8"))?;
    if text.contains("${") {
        return Err(refused("ssh expands ${...} in it"));
    }
    if text.contains(char::is_control) {
        return Err(refused("it holds a control character"));
    }
    if !text.contains(|c: char| c.is_whitespace() || "\"'\\%#".contains(c)) {
        return Ok(text.to_string());
    }
    let escaped = text.replace('\\', "\\\\").replace('"', "\\\"");
    Ok(format!("\"{}\"", escaped.replace('%', "%%")))
}

/// A stream read to its end, as text, keeping at most [`OUTPUT_LIMIT`] bytes of it and ending with
/// [`OUTPUT_CUT`] when it was cut. The rest is read and dropped rather than left in the pipe, so that
/// the command goes on to its end and its status still counts.
async fn read_bounded(mut from: impl AsyncRead + Unpin) -> std::io::Result<String> {
    let mut kept = Vec::new();
    (&mut from)
        .take(OUTPUT_LIMIT as u64)
        .read_to_end(&mut kept)
        .await?;
    let dropped = tokio::io::copy(&mut from, &mut tokio::io::sink()).await?;
    let mut text = String::from_utf8_lossy(&kept).into_owned();
    let mut cut = dropped > 0;
    // Bytes that are not UTF-8 widen to U+FFFD (three bytes each): the bound holds for the text.
    if text.len() > OUTPUT_LIMIT {
        let mut end = OUTPUT_LIMIT;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        cut = true;
    }
    if cut {
        text.push_str(OUTPUT_CUT);
    }
    Ok(text)
}

#[async_trait]
impl HostChannel for OpenSsh {
    /// The client starts (`-V` asks only its version), and each path can be given to it whole.
    fn can_run(&self, paths: &[&std::path::Path]) -> Result<(), String> {
        std::process::Command::new(&self.program)
            .arg("-V")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .map_err(|e| format!("could not run {}: {e}", self.program.display()))?;
        paths.iter().try_for_each(|p| config_path(p).map(|_| ()))
    }

    async fn run(&self, host: &Target, command: &str, timeout: Duration) -> Result<Output, String> {
        let args = self.args(host, command)?;
        let mut cmd = tokio::process::Command::new(&self.program);
        cmd.args(&args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("could not run {}: {e}", self.program.display()))?;
        let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
            return Err("ssh: its output could not be read".to_string());
        };
        // Both streams are read at once, each to its end, while the child is awaited: neither pipe
        // fills up and blocks it. On a timeout `child` is dropped, and with it killed.
        let all =
            async { tokio::try_join!(read_bounded(stdout), read_bounded(stderr), child.wait()) };
        let out = match tokio::time::timeout(timeout, all).await {
            Ok(Ok((stdout, stderr, status))) => Output {
                status: status.code().unwrap_or(-1),
                stdout,
                stderr,
            },
            Ok(Err(e)) => return Err(format!("ssh: {e}")),
            Err(_) => return Err(format!("no answer within {} s", timeout.as_secs())),
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
        let host = Target {
            name: "h1".into(),
            address: "198.51.100.7".into(),
            user: Some("stado".into()),
            port: Some(22),
            identity: Some(dir.path().join("key")),
            known_hosts: Some(pinned.clone()),
            ..Target::default()
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

    /// A pinned host in a fresh directory, with its arguments for `ssh -G` (which connects nowhere
    /// and takes no command).
    fn pinned_host_args(dir: &std::path::Path) -> Vec<String> {
        let pinned = dir.join("pinned");
        std::fs::write(&pinned, "h1 ssh-ed25519 AAAA\n").unwrap();
        let host = Target {
            name: "h1".into(),
            address: "198.51.100.7".into(),
            user: Some("stado".into()),
            port: Some(22),
            identity: Some(dir.join("key")),
            known_hosts: Some(pinned),
            ..Target::default()
        };
        let mut args = OpenSsh::with_program("ssh").args(&host, "true").unwrap();
        args.pop();
        args
    }

    #[test]
    fn openssh_reads_no_config_file_and_overrides_what_one_could_turn_on() {
        let dir = tempfile::tempdir().unwrap();
        let args = pinned_host_args(dir.path());
        assert_eq!(args[..2], ["-F", "/dev/null"], "{args:?}");
        let a = args.join(" ");
        for want in [
            "-o ForwardAgent=no",
            "-o ForwardX11=no",
            "-o ClearAllForwardings=yes",
            "-o PermitLocalCommand=no",
            "-o ControlMaster=no",
            "-o ControlPath=none",
            "-o ProxyCommand=none",
            "-o Tunnel=no",
            "-o RequestTTY=no",
            "-o StrictHostKeyChecking=yes",
            "-o GlobalKnownHostsFile=/dev/null",
        ] {
            assert!(a.contains(want), "{want} not in {a}");
        }
    }

    /// A user's ssh config that turns on the agent's forwarding, forwardings, a local command and
    /// more host keys: neither `-F` (which stado passes after the user's would be read) nor, with
    /// it left out, the overrides let any of it through.
    #[test]
    fn a_users_ssh_config_forwards_nothing_and_adds_no_host_keys() {
        let dir = tempfile::tempdir().unwrap();
        let args = pinned_host_args(dir.path());
        let config = dir.path().join("config");
        std::fs::write(
            &config,
            "Host *\n  ForwardAgent yes\n  ForwardX11 yes\n  PermitLocalCommand yes\n  LocalCommand touch /tmp/x\n  LocalForward 7000 127.0.0.1:7000\n  DynamicForward 7001\n  KnownHostsCommand /bin/echo %H\n  GlobalKnownHostsFile /etc/ssh/other\n  StrictHostKeyChecking no\n",
        )
        .unwrap();
        let ssh_g = |args: &[String]| -> Option<String> {
            let out = std::process::Command::new("ssh")
                .arg("-G")
                .arg("-F")
                .arg(&config)
                .args(args)
                .output()
                .ok()?;
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            Some(String::from_utf8_lossy(&out.stdout).to_lowercase())
        };
        let without_f: Vec<String> = args[2..].to_vec();
        for (what, args) in [("with -F", &args), ("overrides alone", &without_f)] {
            let Some(text) = ssh_g(args) else {
                println!("SKIPPED a_users_ssh_config_forwards_nothing_and_adds_no_host_keys: no ssh here");
                return;
            };
            let lines: Vec<&str> = text.lines().collect();
            for want in [
                "forwardagent no",
                "forwardx11 no",
                "permitlocalcommand no",
                "clearallforwardings yes",
                "stricthostkeychecking true",
                "globalknownhostsfile /dev/null",
            ] {
                assert!(lines.contains(&want), "{what}: {want} not in {text}");
            }
            // A KnownHostsCommand is overridden only by `-F` (its `none` is too new to pass).
            let absent: &[&str] = if what == "with -F" {
                &["localforward ", "dynamicforward ", "knownhostscommand "]
            } else {
                &["localforward ", "dynamicforward "]
            };
            for absent in absent {
                assert!(
                    !lines.iter().any(|l| l.starts_with(absent)),
                    "{what}: {absent} in {text}"
                );
            }
        }
    }

    #[test]
    fn ssh_reads_back_the_pinned_file_and_the_key_of_a_home_with_spaces_and_percents() {
        let dir = tempfile::tempdir().unwrap();
        let odd = dir.path().join("a b%d \"q\"\\z");
        std::fs::create_dir_all(&odd).unwrap();
        let pinned = odd.join("h1");
        std::fs::write(&pinned, "h1 ssh-ed25519 AAAA\n").unwrap();
        let key = odd.join("key");
        std::fs::write(&key, "").unwrap();
        let host = Target {
            name: "h1".into(),
            address: "198.51.100.7".into(),
            user: Some("stado".into()),
            port: Some(22),
            identity: Some(key.clone()),
            known_hosts: Some(pinned.clone()),
            ..Target::default()
        };
        let mut args = OpenSsh::with_program("ssh").args(&host, "true").unwrap();
        // -G prints the configuration ssh would use and connects nowhere; it takes no command.
        args.pop();
        let Ok(out) = std::process::Command::new("ssh")
            .arg("-G")
            .args(&args)
            .output()
        else {
            println!("SKIPPED ssh_reads_back_the_pinned_file_and_the_key_of_a_home_with_spaces_and_percents: no ssh here");
            return;
        };
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let value = |k: &str| -> Vec<String> {
            text.lines()
                .filter_map(|l| l.strip_prefix(k).and_then(|v| v.strip_prefix(' ')))
                .map(str::to_string)
                .collect()
        };
        assert_eq!(
            value("userknownhostsfile"),
            vec![pinned.display().to_string()]
        );
        // ssh expands an identity file's % tokens when it loads it, after -G prints it: %% is %.
        let identities: Vec<String> = value("identityfile")
            .iter()
            .map(|i| i.replace("%%", "%"))
            .collect();
        assert_eq!(identities, vec![key.display().to_string()], "{text}");
    }

    #[test]
    fn a_path_ssh_cannot_be_given_whole_is_refused() {
        let host = Target {
            name: "h1".into(),
            address: "198.51.100.7".into(),
            user: None,
            port: Some(22),
            identity: None,
            known_hosts: None,
            ..Target::default()
        };
        for bad in ["/tmp/a${HOME}/h1", "/tmp/a\nb/h1"] {
            let dir = tempfile::tempdir().unwrap();
            let pinned = dir.path().join(bad.trim_start_matches('/'));
            std::fs::create_dir_all(pinned.parent().unwrap()).unwrap();
            std::fs::write(&pinned, "h1 ssh-ed25519 AAAA\n").unwrap();
            let h = Target {
                known_hosts: Some(pinned),
                ..host.clone()
            };
            let e = OpenSsh::with_program("ssh").args(&h, "true").unwrap_err();
            assert!(e.contains("cannot be given to ssh"), "{e}");
        }
    }

    /// A host that prints without end (a compromised one, for as long as cloud-init's wait) makes
    /// stado keep at most 1 MiB of each stream, marked as cut; the command still ends and its
    /// status counts, the rest read and dropped.
    #[cfg(unix)]
    #[tokio::test]
    async fn a_host_printing_without_end_is_kept_to_the_output_bound_and_marked_cut() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let pinned = dir.path().join("pinned");
        std::fs::write(&pinned, "h1 ssh-ed25519 AAAA\n").unwrap();
        // A stand-in for ssh: 50 MB on stdout, 5 MB on stderr, then a clean exit.
        let fake = dir.path().join("ssh");
        std::fs::write(
            &fake,
            "#!/bin/sh\nyes | head -c 52428800\nyes e | head -c 5242880 >&2\nexit 3\n",
        )
        .unwrap();
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        let host = Target {
            name: "h1".into(),
            address: "198.51.100.7".into(),
            known_hosts: Some(pinned),
            ..Target::default()
        };
        let out = OpenSsh::with_program(&fake)
            .run(&host, "cloud-init status --wait", Duration::from_secs(600))
            .await
            .unwrap();
        assert_eq!(out.status, 3);
        for (name, text, line) in [
            ("stdout", &out.stdout, "y\n"),
            ("stderr", &out.stderr, "e\n"),
        ] {
            let (kept, mark) = text.rsplit_once('\n').unwrap();
            assert!(
                mark.contains("cut"),
                "{name} not marked as cut: ends {mark:?}"
            );
            assert!(mark.len() < 200, "{name}: the mark is one short line");
            assert!(
                kept.len() <= OUTPUT_LIMIT,
                "{name}: {} bytes kept",
                kept.len()
            );
            assert!(
                kept.len() >= OUTPUT_LIMIT - 2,
                "{name}: {} bytes kept",
                kept.len()
            );
            assert!(kept.starts_with(line), "{name}");
        }
        assert!(out.last_words().contains("cut"), "{}", out.last_words());
    }

    /// Bytes that are not UTF-8 widen as they become text: the bound holds for the text.
    #[tokio::test]
    async fn output_that_is_not_utf8_is_kept_to_the_bound_as_text() {
        let bytes = vec![0xffu8; OUTPUT_LIMIT];
        let text = read_bounded(&bytes[..]).await.unwrap();
        let kept = text.strip_suffix(OUTPUT_CUT).expect("marked as cut");
        assert!(kept.len() <= OUTPUT_LIMIT, "{} bytes kept", kept.len());
        assert!(kept.chars().all(|c| c == '\u{fffd}'));
        let whole = read_bounded(&b"uname\n"[..]).await.unwrap();
        assert_eq!(whole, "uname\n", "a short output is kept whole, unmarked");
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
        let host = Target {
            name: "h1".into(),
            address: "198.51.100.7".into(),
            user: None,
            port: Some(2222),
            identity: None,
            known_hosts: Some(pinned),
            ..Target::default()
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
