//! The `orca-pool` binary: exit status, output, start checks, records per kind/owner/pool, metrics.

use std::io::BufRead;
use std::path::Path;
use std::process::{Command, Output};

use orca::memory::MemoryCloud;

const A: &str = "amd64-small@zone-a";

fn bin(dir: &Path, state: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_orca-pool"));
    c.env_remove(orca_scaler::KIND_ENV)
        .env_remove(orca_scaler::OWNER_ENV)
        .env_remove(orca::FAKE_STATE_ENV)
        .env_remove(orca_scaler::STORE_ENV)
        .current_dir(dir)
        .args(["--kind", "fake", "--fake-state"])
        .arg(state);
    c
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn once(dir: &Path, state: &Path, owner: &str, extra: &[&str]) -> Output {
    bin(dir, state)
        .args([
            "--owner", owner, "--pool", "lab", "--size", "2", "--offer", A, "--once",
        ])
        .args(extra)
        .output()
        .unwrap()
}

/// `--once` exits non-zero when an action failed (here every create: the simulated cloud
/// cannot write its state).
#[test]
fn once_exits_non_zero_when_an_action_failed() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("cloud.json");
    // Every write of the cloud fails: the state file refuses changes.
    MemoryCloud::persistent(&state).unwrap().set_read_only(true);
    let out = once(dir.path(), &state, "a", &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("FAILED create"), "{}", text(&out));
}

/// A `--store` that is a connection string is never taken for a file name: one of key=value
/// settings goes to PostgreSQL (here nothing listens), another URL is refused; neither leaves a file
/// nor shows the password.
#[test]
fn a_connection_string_store_is_never_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("cloud.json");
    for store in [
        "hostaddr=127.0.0.1 port=9 password=s3cret",
        // No key the old reading knew: it became a file of that name.
        "hostaddr=127.0.0.1 password=s3cret no_such_setting=1",
        "mysql://orca:s3cret@127.0.0.1:9/orca",
    ] {
        let out = once(dir.path(), &state, "a", &["--store", store]);
        assert_ne!(out.status.code(), Some(0), "{store}: {}", text(&out));
        assert!(
            text(&out).contains("--store") || text(&out).contains("record store"),
            "{store}: {}",
            text(&out)
        );
        assert!(!text(&out).contains("s3cret"), "{}", text(&out));
        let files: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| !n.starts_with("cloud."))
            .collect();
        assert!(files.is_empty(), "{store}: {files:?}");
    }
}

/// ... and exits 0 when the only trouble is no stock.
#[test]
fn once_exits_zero_on_no_stock() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("cloud.json");
    std::fs::write(
        &state,
        r#"{"next_id": 0, "machines": {}, "stock": {"amd64-small@zone-a": 0}}"#,
    )
    .unwrap();
    let out = once(dir.path(), &state, "a", &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        text(&out).contains("no stock of amd64-small@zone-a"),
        "{}",
        text(&out)
    );
}

/// The record is keyed by owner, through the binary: switching `--owner` in one folder deletes nothing; losing the record
/// file holds (status 2) and says why.
#[test]
fn switching_owner_in_one_folder_deletes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("cloud.json");
    let all = || -> Vec<String> {
        let mut v: Vec<String> = MemoryCloud::persistent(&state)
            .unwrap()
            .all_machines()
            .into_iter()
            .map(|m| m.id)
            .collect();
        v.sort();
        v
    };
    assert!(once(dir.path(), &state, "a", &[]).status.success());
    let a_first = all();
    assert_eq!(a_first.len(), 2);
    assert!(once(dir.path(), &state, "b", &[]).status.success());
    let out = once(dir.path(), &state, "a", &[]);
    assert!(out.status.success(), "{}", text(&out));
    let now = all();
    assert!(a_first.iter().all(|id| now.contains(id)), "{}", text(&out));
    assert_eq!(now.len(), 4);
    std::fs::remove_file(dir.path().join("orca-pool-lab.json")).unwrap();
    let out = once(dir.path(), &state, "a", &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("HELD 2 machine(s)"), "{}", text(&out));
    assert_eq!(all(), now, "nothing deleted or made");
    let out = once(dir.path(), &state, "a", &["--unknown", "adopt"]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(all(), now);
}

/// Invalid offerings are refused at start, each named, before anything is made.
#[test]
fn invalid_offerings_are_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("cloud.json");
    let out = bin(dir.path(), &state)
        .args(["--pool", "lab", "--size", "1", "--once", "--arch", "amd64"])
        .args([
            "--offer",
            "huge-box@zone-a",
            "--offer",
            "arm64-small@zone-b",
            "--offer",
            A,
        ])
        .output()
        .unwrap();
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(t.contains("refused at start"), "{t}");
    assert!(
        t.contains("offering huge-box@zone-a: unknown machine type"),
        "{t}"
    );
    assert!(
        t.contains("offering arm64-small@zone-b: arm64-small is arm64"),
        "{t}"
    );
    assert!(!t.contains("offering amd64-small@zone-a"), "{t}");
    assert!(MemoryCloud::persistent(&state)
        .unwrap()
        .all_machines()
        .is_empty());
}

/// `--json` prints one object per pass, with what it did and why.
#[test]
fn json_is_one_object_per_pass() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("cloud.json");
    let out = once(dir.path(), &state, "a", &["--json"]);
    assert!(out.status.success(), "{}", text(&out));
    let lines: Vec<&str> = std::str::from_utf8(&out.stdout).unwrap().lines().collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    let v: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(v["role"], "leader");
    assert_eq!(v["serving"], 2);
    assert_eq!(v["actions"][0]["action"], "created");
    assert_eq!(v["kind"], "fake");
    assert_eq!(v["owner"], "a");
    // A pass with nothing to do says so.
    let out = once(dir.path(), &state, "a", &[]);
    assert!(
        text(&out).contains("nothing to do: 2 of 2 serving"),
        "{}",
        text(&out)
    );
}

/// A second process on the same record file is refused with a clear message.
#[test]
fn a_second_process_on_one_record_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("cloud.json");
    let _held = orca_scaler::FileStore::open(dir.path().join("orca-pool-lab.json")).unwrap();
    let out = once(dir.path(), &state, "a", &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out).contains("used by another orca-pool"),
        "{}",
        text(&out)
    );
}

/// `--metrics ADDR` serves the scaler's metrics there.
#[tokio::test]
async fn metrics_are_served_where_asked() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("cloud.json");
    let mut child = bin(dir.path(), &state)
        .args(["--owner", "a", "--pool", "lab", "--size", "2", "--offer", A])
        .args(["--metrics", "127.0.0.1:0", "--interval", "0.2"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let err = child.stderr.take().unwrap();
    let mut lines = std::io::BufReader::new(err).lines();
    let url = loop {
        let l = lines.next().expect("the metrics address").unwrap();
        if let Some(u) = l.strip_prefix("orca-pool: metrics on ") {
            break u.to_string();
        }
    };
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    // A sample `name{labels} value`, whatever the labels' order.
    let has = |body: &str, name: &str, labels: &[&str], value: &str| {
        body.lines().any(|l| {
            l.starts_with(&format!("{name}{{"))
                && labels.iter().all(|p| l.contains(p))
                && ["kind=\"fake\"", "owner=\"a\"", "pool=\"lab\""]
                    .iter()
                    .all(|p| l.contains(p))
                && (value.is_empty() || l.ends_with(&format!(" {value}")))
        })
    };
    let mut body = String::new();
    for _ in 0..50 {
        body = reqwest::get(&url).await.unwrap().text().await.unwrap();
        if has(&body, "orca_pool_size", &[], "2") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let _ = child.kill();
    let _ = child.wait();
    for (name, labels, value) in [
        ("orca_pool_size", &[][..], "2"),
        ("orca_pool_wanted", &[], "2"),
        ("orca_pool_created_total", &["how=\"made\""], "2"),
        ("orca_pool_leader", &[], "1"),
        ("orca_pool_passes_total", &["role=\"leader\""], ""),
        ("orca_pool_last_pass_timestamp_seconds", &[], ""),
    ] {
        assert!(
            has(&body, name, labels, value),
            "{name} {labels:?} {value} not in\n{body}"
        );
    }
}

/// Waits for `child` at most `secs` seconds; kills it past that.
fn output_within(child: std::process::Child, secs: u64) -> Option<Output> {
    let mut child = child;
    let end = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while std::time::Instant::now() < end {
        if child.try_wait().unwrap().is_some() {
            return Some(child.wait_with_output().unwrap());
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

/// An interval that is not a number of seconds a sleep can take (infinite, too large, not a number,
/// zero or negative) is refused at start naming the flag, before any machine is made: it panicked
/// after the first pass, or (NaN) ran passes without pause.
#[test]
fn an_interval_that_is_not_a_number_of_seconds_is_refused_at_start() {
    for bad in ["inf", "1e20", "NaN", "0", "-1"] {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("cloud.json");
        let child = bin(dir.path(), &state)
            .args(["--owner", "a", "--pool", "lab", "--size", "1", "--offer", A])
            .arg(format!("--interval={bad}"))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let out =
            output_within(child, 20).unwrap_or_else(|| panic!("--interval {bad}: still running"));
        let t = text(&out);
        assert_eq!(out.status.code(), Some(1), "--interval {bad}: {t}");
        assert!(
            t.contains("refused at start") && t.contains("--interval"),
            "{bad}: {t}"
        );
        assert!(
            MemoryCloud::persistent(&state)
                .unwrap()
                .all_machines()
                .is_empty(),
            "--interval {bad}: {t}"
        );
    }
}

/// SIGTERM during `--once` is always seen, also while the in-memory provider works without yielding
/// (here: waiting on its state file's lock, held by the test): the run stops naming it, with status 1,
/// rather than being killed by the signal or ending as if nothing came.
#[cfg(unix)]
#[test]
fn a_stop_signal_during_once_is_always_seen() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("cloud.json");
    MemoryCloud::persistent(&state).unwrap();
    let lock_path = orca::fs::FileLock::path_for(&state);
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .unwrap();
    lock.lock().unwrap();
    let child = bin(dir.path(), &state)
        .args([
            "--owner", "a", "--pool", "lab", "--size", "2", "--offer", A, "--once",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    // Until the process holds the lock file open: it waits on it, long after its start.
    let fds = format!("/proc/{pid}/fd");
    let end = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let opened = || {
        std::fs::read_dir(&fds)
            .map(|d| {
                d.flatten()
                    .any(|f| std::fs::read_link(f.path()).is_ok_and(|l| l == lock_path))
            })
            .unwrap_or(false)
    };
    while !opened() {
        assert!(
            std::time::Instant::now() < end,
            "the process never opened the lock"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::thread::sleep(std::time::Duration::from_millis(100));
    let sent = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    std::thread::sleep(std::time::Duration::from_millis(100));
    drop(lock);
    let out = output_within(child, 30).expect("the run ends");
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{:?}: {t}", out.status);
    assert!(t.contains("stopped"), "{t}");
    assert!(
        MemoryCloud::persistent(&state)
            .unwrap()
            .all_machines()
            .is_empty(),
        "{t}"
    );
}

/// The root README's example commands of the pool, run twice in one folder as written: the second
/// run finds the first's machines (the simulated cloud is kept with --fake-state), none "gone".
#[test]
fn the_readmes_example_run_twice_finds_its_machines() {
    let readme = include_str!("../../../../README.md");
    let commands: Vec<Vec<String>> = readme
        .lines()
        .filter(|l| l.contains("--pool lab --size 3 --offer amd64-small@zone-a"))
        .map(|l| {
            let args = l
                .split_once("orca-pool -- ")
                .or_else(|| l.split_once("orca-pool "))
                .unwrap()
                .1;
            args.split_whitespace().map(String::from).collect()
        })
        .collect();
    assert!(!commands.is_empty(), "the README shows the example");
    for args in commands {
        let dir = tempfile::tempdir().unwrap();
        let run = || {
            let out = Command::new(env!("CARGO_BIN_EXE_orca-pool"))
                .env_remove(orca_scaler::KIND_ENV)
                .env_remove(orca_scaler::OWNER_ENV)
                .env_remove(orca::FAKE_STATE_ENV)
                .env_remove(orca_scaler::STORE_ENV)
                .current_dir(dir.path())
                .args(&args)
                .output()
                .unwrap();
            assert!(out.status.success(), "{args:?}: {}", text(&out));
            text(&out)
        };
        run();
        let second = run();
        assert!(!second.contains("gone"), "{args:?}: {second}");
        assert!(
            second.contains("nothing to do: 3 of 3 serving"),
            "{args:?}: {second}"
        );
    }
}

/// Without --fake-state the simulated cloud lives for this run only: the run says so.
#[test]
fn a_simulated_cloud_without_a_state_file_is_said_to_last_one_run() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_orca-pool"))
        .env_remove(orca_scaler::KIND_ENV)
        .env_remove(orca::FAKE_STATE_ENV)
        .env_remove(orca_scaler::STORE_ENV)
        .current_dir(dir.path())
        .args(["--pool", "lab", "--size", "1", "--offer", A, "--once"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("--fake-state"), "{}", text(&out));
}

/// The lines `child` prints on stdout, as they come (read by a thread until the pipe closes).
fn stdout_lines(child: &mut std::process::Child) -> std::sync::mpsc::Receiver<String> {
    let out = child.stdout.take().expect("stdout piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in std::io::BufReader::new(out).lines() {
            let Ok(l) = l else { return };
            if tx.send(l).is_err() {
                return;
            }
        }
    });
    rx
}

/// Waits for a line of `lines` containing `what` (at most 30 seconds), panicking past that.
fn wait_for_line(lines: &std::sync::mpsc::Receiver<String>, what: &str) {
    let end = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let left = end.saturating_duration_since(std::time::Instant::now());
        match lines.recv_timeout(left) {
            Ok(l) if l.contains(what) => return,
            Ok(_) => {}
            Err(e) => panic!("no line with {what:?}: {e}"),
        }
    }
}

/// Removing the record's lock file while orca-pool runs lets a second orca-pool lock a new file at
/// the same path and act on the same record: the two used to churn machines. The running one sees
/// it before its next pass and ends naming the lock file; the second runs alone, and the pool keeps
/// its machines: none made, none deleted.
#[test]
fn a_removed_lock_file_stops_the_running_process_and_the_pool_never_churns() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("cloud.json");
    let start = || {
        let mut c = bin(dir.path(), &state)
            .args(["--owner", "a", "--pool", "lab", "--size", "2", "--offer", A])
            .args(["--interval", "0.1"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let lines = stdout_lines(&mut c);
        (c, lines)
    };
    let all = || -> Vec<String> {
        let mut v: Vec<String> = MemoryCloud::persistent(&state)
            .unwrap()
            .all_machines()
            .into_iter()
            .map(|m| m.id)
            .collect();
        v.sort();
        v
    };
    let (first, first_lines) = start();
    wait_for_line(&first_lines, "nothing to do: 2 of 2 serving");
    let machines = all();
    assert_eq!(machines.len(), 2);

    std::fs::remove_file(dir.path().join("orca-pool-lab.json.lock")).unwrap();
    let (mut second, second_lines) = start();
    let out = output_within(first, 30).expect("the first process ends");
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(
        t.contains("lost the lead") && t.contains("orca-pool-lab.json.lock"),
        "{t}"
    );
    // Three passes of the second alone: each finds the pool as it was.
    for _ in 0..3 {
        wait_for_line(&second_lines, "nothing to do: 2 of 2 serving");
    }
    let _ = second.kill();
    let _ = second.wait();
    assert_eq!(all(), machines, "no machine made or deleted");
}

/// `--help` never shows the record's connection string taken from the environment: it holds the
/// PostgreSQL password.
#[test]
fn help_hides_the_store_password_from_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_orca-pool"))
        .env(orca_scaler::STORE_ENV, "postgres://u:s3cret@db/x")
        .current_dir(dir.path())
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains(orca_scaler::STORE_ENV),
        "{}",
        text(&out)
    );
    assert!(!text(&out).contains("s3cret"), "{}", text(&out));
}

/// A user-data file that cannot be read is named with its flag, and nothing is done.
#[test]
fn an_unreadable_user_data_file_is_named_with_its_flag() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("cloud.json");
    let missing = dir.path().join("no-such-init.yaml");
    let out = once(
        dir.path(),
        &state,
        "me",
        &["--user-data", missing.to_str().unwrap()],
    );
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(
        t.contains(&format!("--user-data {}", missing.display())),
        "{t}"
    );
    assert!(MemoryCloud::persistent(&state)
        .unwrap()
        .all_machines()
        .is_empty());
}
