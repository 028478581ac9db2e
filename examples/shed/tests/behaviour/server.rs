//! The `shed-server` binary itself, run as a child process: how it stops, and what its log looks
//! like when it is written to a file.

use std::io::{BufRead as _, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// A running `shed-server` on the in-memory cloud, listening on a port of its own choosing, with
/// every line of its stderr handed to `lines`.
struct Server {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
    _dir: tempfile::TempDir,
}

impl Server {
    fn start() -> Server {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("shed.yaml");
        std::fs::write(
            &config,
            format!(
                "default_backend: remote\nstate_dir: {}\nlisten: 127.0.0.1:0\nremote:\n  provider: fake\n  transport: local\n  allow_test_drivers: true\n  environment: dev\n  default_image: img-1\n  firewall:\n    source_ranges: [203.0.113.7/32]\n",
                dir.path().join("state").display()
            ),
        )
        .unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_shed-server"))
            .arg("--config")
            .arg(&config)
            .env_remove("RUST_LOG")
            .env_remove("NO_COLOR")
            .env_remove(orca::FAKE_STATE_ENV)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let mut s = Server {
            child,
            lines,
            seen: Vec::new(),
            _dir: dir,
        };
        s.wait_for("listening on");
        s
    }

    /// Waits (at most 20 s) for a line of stderr that contains `needle`.
    fn wait_for(&mut self, needle: &str) -> String {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if line.contains(needle) {
                        return line;
                    }
                }
                Err(_) => {
                    let _ = self.child.kill();
                    panic!("no line with {needle:?}; stderr so far: {:#?}", self.seen);
                }
            }
        }
    }

    fn signal(&self, name: &str) {
        let ok = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.child.id().to_string())
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -{name}");
    }

    /// Waits (at most 20 s) for the server to exit; every line it wrote.
    fn exit(mut self) -> (std::process::ExitStatus, Vec<String>) {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                self.seen.extend(self.lines.iter());
                return (status, self.seen);
            }
            if std::time::Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("the server did not exit; stderr: {:#?}", self.seen);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn stops_on(signal: &str) {
    let server = Server::start();
    server.signal(signal);
    let (status, lines) = server.exit();
    assert!(status.success(), "{signal}: {status:?}; {lines:#?}");
    assert!(
        lines.iter().any(|l| l.contains(&format!(
            "remote: shed-server stopping (SIG{signal}); every VM is left as it is"
        ))),
        "{signal}: {lines:#?}"
    );
}

#[test]
fn sigterm_stops_the_server_as_ctrl_c_does_with_its_shutdown_line() {
    stops_on("TERM");
}

#[test]
fn ctrl_c_stops_the_server_with_its_shutdown_line() {
    stops_on("INT");
}

#[test]
fn the_log_has_no_colour_escapes_when_stderr_is_not_a_terminal() {
    let server = Server::start();
    server.signal("INT");
    let (_, lines) = server.exit();
    assert!(lines.iter().any(|l| l.contains("listening on")));
    let coloured: Vec<&String> = lines.iter().filter(|l| l.contains('\u{1b}')).collect();
    assert!(coloured.is_empty(), "{coloured:#?}");
}
