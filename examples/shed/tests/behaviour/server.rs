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
        Server::start_with(tempfile::tempdir().unwrap(), |_| {})
    }

    /// A server on the file-backed simulated cloud `<dir>/cloud.json`, its firewall rule put there
    /// by `shed-server fake-setup`, with one runtime thread (a thread blocked stalls it all).
    fn on_state_file() -> Server {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("cloud.json");
        let setup = |c: &mut Command| {
            c.env(orca::FAKE_STATE_ENV, &state)
                .env("TOKIO_WORKER_THREADS", "1");
        };
        let mut fake_setup = Server::command(&dir);
        setup(&mut fake_setup);
        let out = fake_setup
            .arg("fake-setup")
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        Server::start_with(dir, setup)
    }

    fn command(dir: &tempfile::TempDir) -> Command {
        let config = dir.path().join("shed.yaml");
        std::fs::write(
            &config,
            format!(
                "default_backend: remote\nstate_dir: {}\nlisten: 127.0.0.1:0\nremote:\n  provider: fake\n  transport: local\n  allow_test_drivers: true\n  environment: dev\n  default_image: img-1\n  firewall:\n    source_ranges: [203.0.113.7/32]\n",
                dir.path().join("state").display()
            ),
        )
        .unwrap();
        let mut c = Command::new(env!("CARGO_BIN_EXE_shed-server"));
        c.arg("--config")
            .arg(&config)
            .env_remove("RUST_LOG")
            .env_remove("NO_COLOR")
            .env_remove(orca::FAKE_STATE_ENV)
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        c
    }

    fn start_with(dir: tempfile::TempDir, setup: impl FnOnce(&mut Command)) -> Server {
        let mut c = Server::command(&dir);
        setup(&mut c);
        let mut child = c.stderr(Stdio::piped()).spawn().unwrap();
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

    /// The address the server said it listens on.
    fn addr(&self) -> String {
        let line = self
            .seen
            .iter()
            .find(|l| l.contains("listening on"))
            .expect("the server said where it listens");
        line.rsplit("listening on ")
            .next()
            .unwrap()
            .trim()
            .to_string()
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

/// While another process holds the simulated cloud's state-file lock, the requests that need the
/// cloud wait for it, and the server goes on answering every other request: the wait never blocks
/// a runtime thread (the server has one here). Once the lock is let go, the waiting creates finish.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_state_file_lock_stalls_no_unrelated_request() {
    let mut server = Server::on_state_file();
    let line = server
        .seen
        .iter()
        .find(|l| l.contains("listening on"))
        .unwrap()
        .clone();
    let addr = line
        .rsplit("listening on ")
        .next()
        .unwrap()
        .trim()
        .to_string();
    let url = format!("http://{addr}");
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let state = server._dir.path().join("cloud.json");
    let held = orca::fs::FileLock::try_lock(orca::fs::FileLock::path_for(&state)).unwrap();

    let creates: Vec<_> = (1..=2)
        .map(|i| {
            let (http, url) = (http.clone(), url.clone());
            tokio::spawn(async move {
                http.post(format!("{url}/api/sheds"))
                    .json(&serde_json::json!({ "name": format!("held-{i}") }))
                    .send()
                    .await
                    .map(|r| r.status())
            })
        })
        .collect();
    // A create accepted starts its job at once, whose first step reads the cloud (the firewall
    // check just before the insert): let it reach the lock.
    server.wait_for("create accepted");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let info = http
        .get(format!("{url}/api/info"))
        .timeout(Duration::from_secs(20))
        .send()
        .await
        .expect("/api/info answers while the cloud's lock is held");
    assert_eq!(info.status(), 200);
    let info: serde_json::Value = info.json().await.unwrap();
    assert_eq!(info["backend"], "remote");
    assert!(
        creates.iter().all(|c| !c.is_finished()),
        "the creates wait for the cloud's lock"
    );

    drop(held);
    for c in creates {
        assert_eq!(c.await.unwrap().unwrap(), 201);
    }
    server.signal("INT");
    let (status, lines) = server.exit();
    assert!(status.success(), "{status:?}; {lines:#?}");
}

/// SIGTERM stops the server while a streamed create is open that cannot settle (another process
/// holds the simulated cloud's lock, so the create's job waits for it): the stream ends with an
/// `error` event saying the server stops, and the server exits while the lock is still held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_ends_an_open_create_stream_and_stops_the_server() {
    let mut server = Server::on_state_file();
    let url = format!("http://{}", server.addr());
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let state = server._dir.path().join("cloud.json");
    let held = orca::fs::FileLock::try_lock(orca::fs::FileLock::path_for(&state)).unwrap();

    let mut stream = http
        .post(format!("{url}/api/sheds"))
        .header("accept", "text/event-stream")
        .json(&serde_json::json!({ "name": "held-1" }))
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    let reader = tokio::spawn(async move {
        let mut body = String::new();
        while let Ok(Some(chunk)) = stream.chunk().await {
            body.push_str(&String::from_utf8_lossy(&chunk));
        }
        body
    });
    server.wait_for("create accepted");

    server.signal("TERM");
    let (status, lines) = tokio::task::spawn_blocking(move || server.exit())
        .await
        .unwrap();
    assert!(status.success(), "{status:?}; {lines:#?}");
    // Let go only now: the server exited while the create could not settle.
    drop(held);
    let body = reader.await.unwrap();
    assert!(
        body.contains("event: error") && body.contains("SERVER_STOPPING"),
        "{body}"
    );
    assert!(!body.contains("event: complete"), "{body}");
}

/// A second signal stops the server at once while a request still keeps the graceful stop
/// waiting (here one whose body never arrives: the server asked for it with `100 Continue`).
#[test]
fn a_second_signal_stops_the_server_at_once() {
    use std::io::{Read as _, Write as _};
    let mut server = Server::start();
    let mut conn = std::net::TcpStream::connect(server.addr()).unwrap();
    conn.write_all(
        b"POST /api/sheds HTTP/1.1\r\nHost: shed\r\nContent-Type: application/json\r\nContent-Length: 100\r\nExpect: 100-continue\r\n\r\n",
    )
    .unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 256];
    while !String::from_utf8_lossy(&seen).contains("100 Continue") {
        let n = conn.read(&mut buf).unwrap();
        assert!(n > 0, "the server closed the connection: {seen:?}");
        seen.extend_from_slice(&buf[..n]);
    }

    server.signal("TERM");
    server.wait_for("shed-server stopping (SIGTERM)");
    server.signal("TERM");
    let (status, lines) = server.exit();
    assert!(status.success(), "{status:?}; {lines:#?}");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("stopping at once (SIGTERM again)")),
        "{lines:#?}"
    );
}

/// Runs `c` (its stderr read line by line) until it exits, at most 20 s: its status and every line it
/// wrote to stderr.
fn run_to_exit(mut c: Command) -> (std::process::ExitStatus, Vec<String>) {
    let mut child = c.stderr(Stdio::piped()).spawn().unwrap();
    let stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
            .collect::<Vec<_>>()
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return (status, reader.join().unwrap());
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the process did not exit; stderr: {:#?}", reader.join());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A second server on the same configuration (the same `remote.state_dir`) refuses to start,
/// naming the directory in use, before it reads a record or the cloud: the first server's records,
/// jobs and VMs stay its own, and it goes on serving.
#[test]
fn a_second_server_on_the_same_state_dir_refuses_before_reading_anything() {
    let first = Server::on_state_file();
    let mut second = Server::command(&first._dir);
    second
        .env(orca::FAKE_STATE_ENV, first._dir.path().join("cloud.json"))
        .env("TOKIO_WORKER_THREADS", "1");
    let (status, lines) = run_to_exit(second);
    assert!(!status.success(), "{status:?}; {lines:#?}");
    let state_dir = first._dir.path().join("state").join("remote");
    assert!(
        lines
            .iter()
            .any(|l| l.contains(&format!("{} is in use", state_dir.display()))),
        "{lines:#?}"
    );
    let reconciled: Vec<&String> = lines.iter().filter(|l| l.contains("remote:")).collect();
    assert!(reconciled.is_empty(), "{reconciled:#?}");

    first.signal("INT");
    let (status, lines) = first.exit();
    assert!(status.success(), "{status:?}; {lines:#?}");
}
