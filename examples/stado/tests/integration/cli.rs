//! The `stado` binary on `--provider fake`, as a newcomer runs it: every command, its exit status,
//! its one JSON object, and its refusals.

use std::io::BufRead;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

fn stado(home: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_stado"))
        .args(args)
        .env("STADO_HOME", home)
        .env_remove("WC_PROVIDERS")
        .env_remove("WC_DISABLED_PROVIDERS")
        .output()
        .expect("stado runs")
}

fn ok(home: &Path, args: &[&str]) -> String {
    let out = stado(home, args);
    assert!(
        out.status.success(),
        "{args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn json(home: &Path, args: &[&str]) -> (bool, Value) {
    let mut a = args.to_vec();
    a.push("--json");
    let out = stado(home, &a);
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().count(), 1, "one JSON object: {text}");
    (out.status.success(), serde_json::from_str(&text).unwrap())
}

fn set_up(home: &Path) {
    for (k, v) in [
        ("providers", "fake"),
        (
            "azure.subscription_id",
            "00000000-0000-4000-8000-000000000001",
        ),
        ("azure.resource_group", "stado-rg"),
        ("azure.vnet", "stado-net"),
        ("azure.subnet", "hosts"),
        (
            "azure.image_urn",
            "Canonical:ubuntu-24_04-lts:server:latest",
        ),
        ("azure.vm_username", "stado"),
        ("azure.credit_floor.amount", "20"),
        ("azure.credit_floor.currency", "USD"),
        ("azure.credit_floor.ruling", "R-7"),
        ("azure.credit_floor.words", "Not below twenty."),
        ("api.url", "https://stado.example"),
    ] {
        ok(home, &["config", "set", k, v]);
    }
    ok(
        home,
        &[
            "registry",
            "set",
            "--path",
            "targets.build-host",
            "--value",
            r#"{"address":"192.0.2.10","user":"ci"}"#,
        ],
    );
    ok(
        home,
        &[
            "registry",
            "set",
            "--path",
            "cloud_hosts",
            "--value",
            r#"{"admit_from":["build-host"]}"#,
        ],
    );
}

/// A time stado printed, in whole seconds.
fn timestamp(v: &Value) -> i64 {
    chrono::DateTime::parse_from_rfc3339(v.as_str().unwrap())
        .unwrap()
        .timestamp()
}

/// The simulated hosts' clock now, in whole seconds.
fn hosts_clock(home: &Path) -> i64 {
    let (_, now) = json(home, &["fake", "advance", "--minutes", "0"]);
    timestamp(&now["now"])
}

/// `set_up`, and host `h1` created with 30 idle minutes before it may be reaped.
fn set_up_with_a_host(home: &Path) {
    set_up(home);
    let mut create = CREATE.to_vec();
    create.push("30");
    ok(home, &create);
}

const CREATE: [&str; 13] = [
    "cloud",
    "host",
    "create",
    "h1",
    "--provider",
    "fake",
    "--location",
    "zone-a",
    "--size",
    "amd64-small",
    "--disk-gb",
    "64",
    "--idle-minutes",
];

#[test]
fn every_command_on_fake_from_create_to_reap() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path();
    let mut create = CREATE.to_vec();
    create.push("30");
    let out = stado(home, &create);
    assert!(!out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        "stado: the provider fake is not enabled in this profile (providers: none; providers_disabled: none); stado config set providers fake enables it"
    );
    set_up(home);

    let text = ok(home, &create);
    assert!(text.contains("projected hourly burn: 0.0832 USD (h1 amd64-small at 0.0832 USD, priced in zone-a; 0 cloud host(s) already running at 0.00 USD)"), "{text}");
    assert!(text.contains("credit: balance 100.00 USD, 99.9168 USD after one hour of all of them, above the floor 20.00 USD (the operator's ruling R-7: \"Not below twenty.\")"), "{text}");
    assert!(text.contains("first boot: cloud-init done"), "{text}");
    assert!(!text.contains("PRIVATE KEY"));

    let (good, list) = json(home, &["cloud", "host", "list", "--provider", "fake"]);
    assert!(good);
    assert_eq!(list["hosts"][0]["name"], "h1");
    assert_eq!(list["hosts"][0]["state"], "running");
    assert_eq!(list["running"], 1);
    assert!(list["egress"]["build-host"]["address"].is_string());
    assert!(list["egress"]["build-host"]["read_at"].is_string());

    let (good, again) = json(home, &create);
    assert!(!good);
    assert_eq!(
        again["error"]["message"],
        "target 'h1' is already registered"
    );
    assert_eq!(again["ok"], false);

    let (good, reap) = json(home, &["cloud", "host", "reap", "--provider", "fake"]);
    assert!(good);
    assert_eq!(reap["hosts"][0]["verdict"], "idle");
    ok(home, &["fake", "advance", "--minutes", "31"]);
    let (good, reap) = json(
        home,
        &["cloud", "host", "reap", "--provider", "fake", "--apply"],
    );
    assert!(good, "{reap}");
    assert_eq!(reap["hosts"][0]["verdict"], "reapable");
    assert_eq!(reap["hosts"][0]["action"], "reaped");

    let out = stado(
        home,
        &["cloud", "host", "delete", "h1", "--provider", "fake"],
    );
    assert!(!out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        "stado: the registry declares no Azure cloud host h1 (it declares none)"
    );
    let (_, cloud) = json(home, &["fake", "cloud"]);
    assert_eq!(
        cloud["machines"],
        Value::Array(vec![]),
        "reaped means gone from the cloud"
    );

    ok(home, &["config", "unset", "azure.vnet"]);
    let out = stado(home, &["cloud", "host", "list", "--provider", "fake"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains(
        "a cloud host on Azure is addressed with bindings this deployment does not declare: azure.vnet; stado config set declares each."
    ));
}

#[test]
fn a_home_named_relatively_keeps_its_hosts_reachable_from_any_directory() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    set_up(&home);
    // The create names the home relative to where it runs, as `STADO_HOME=home` and `--home home`.
    let mut create = CREATE.to_vec();
    create.push("30");
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_stado"))
            .args(args)
            .env("STADO_HOME", "home")
            .env_remove("WC_PROVIDERS")
            .env_remove("WC_DISABLED_PROVIDERS")
            .current_dir(dir.path())
            .output()
            .expect("stado runs");
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(&create);
    create[3] = "h2";
    create.splice(0..0, ["--home", "home"]);
    run(&create);
    // Run from elsewhere, stado reaches both with the keys their creates wrote down.
    let (good, reap) = json(&home, &["cloud", "host", "reap", "--provider", "fake"]);
    assert!(good, "{reap}");
    for h in 0..2 {
        assert_eq!(reap["hosts"][h]["verdict"], "idle", "{reap}");
    }
}

#[test]
fn a_second_stado_writing_the_registry_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path();
    set_up(home);
    let h = stado::Home::open(home).unwrap();
    let held = h.lock(&h.registry_path()).unwrap();
    let mut create = CREATE.to_vec();
    create.push("30");
    let (good, r) = json(home, &create);
    assert!(!good);
    assert_eq!(r["error"]["code"], "busy", "{r}");
    let (good, r) = json(
        home,
        &[
            "registry",
            "set",
            "--path",
            "cloud_hosts.admit_from",
            "--value",
            r#"["build-host"]"#,
        ],
    );
    assert!(!good);
    assert_eq!(r["error"]["code"], "busy");
    drop(held);
    let (_, cloud) = json(home, &["fake", "cloud"]);
    assert_eq!(cloud["machines"], Value::Array(vec![]));
}

#[test]
fn fleet_key_generate_writes_an_owner_only_private_half_and_prints_only_the_public() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path();
    let out = ok(home, &["fleet", "key", "generate", "build-host"]);
    assert!(out.contains("ssh-ed25519 AAAA"), "{out}");
    assert!(!out.contains("PRIVATE"));
    let private = home.join("keys/build-host");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&private).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }
    let out = stado(home, &["fleet", "key", "generate", "build-host"]);
    assert!(!out.status.success(), "an existing key is never replaced");
}

#[cfg(unix)]
#[test]
fn reap_every_runs_the_applied_pass_on_each_tick_and_logs_what_it_reaped() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path();
    set_up_with_a_host(home);
    ok(home, &["fake", "advance", "--minutes", "45"]);
    // A slow machine: another minute passes before the reaper starts. Real time passes on the hosts'
    // clock as well, so the minutes logged are checked against the clock read around the reaper.
    ok(home, &["fake", "advance", "--minutes", "1"]);
    let (_, list) = json(home, &["cloud", "host", "list", "--provider", "fake"]);
    let made = timestamp(&list["hosts"][0]["created_at"]);
    let before = hosts_clock(home);
    let reaper = Reaper::start(home, false);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen = Vec::new();
    while Instant::now() < deadline {
        if let Ok(l) = reaper.lines.recv_timeout(Duration::from_millis(200)) {
            seen.push(l);
            if seen
                .iter()
                .any(|l| l.starts_with("cloud-host reaper: reaped h1"))
            {
                break;
            }
        }
    }
    reaper.kill();
    let after = hosts_clock(home);
    let minutes = |t: i64| u64::try_from(t - made).unwrap() / 60;
    let reaped = seen
        .iter()
        .find_map(|l| {
            l.strip_prefix("cloud-host reaper: reaped h1 (idle ")?
                .strip_suffix(" minute(s), past its 30)")?
                .parse::<u64>()
                .ok()
        })
        .unwrap_or_else(|| panic!("no reaped line in {seen:?}"));
    assert!(
        (minutes(before)..=minutes(after)).contains(&reaped) && reaped >= 46,
        "idle {reaped} minute(s): not between the clock's readings around the reaper"
    );
    let (_, list) = json(home, &["cloud", "host", "list", "--provider", "fake"]);
    assert_eq!(list["hosts"], Value::Array(vec![]));
}

/// A reapable host whose delete fails (its VM now carries another stado home's label, so it is left
/// alone) is `reap_failed`, and `reap --apply` exits non-zero, with --json and without.
#[test]
fn a_reap_that_fails_to_delete_a_host_exits_non_zero() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path();
    set_up_with_a_host(home);
    ok(home, &["fake", "advance", "--minutes", "31"]);
    let (_, list) = json(home, &["cloud", "host", "list", "--provider", "fake"]);
    let vm = list["hosts"][0]["vm_id"].as_str().unwrap().to_string();
    let cloud = orca::memory::MemoryCloud::persistent(home.join("fake-cloud.json")).unwrap();
    assert!(cloud.operator_label(&vm, "stado-home", Some("another-home")));
    let apply = ["cloud", "host", "reap", "--provider", "fake", "--apply"];
    let (good, reap) = json(home, &apply);
    assert!(!good, "{reap}");
    assert_eq!(reap["ok"], false);
    assert_eq!(reap["hosts"][0]["verdict"], "reapable");
    assert_eq!(reap["hosts"][0]["action"], "reap_failed");
    let out = stado(home, &apply);
    assert!(!out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!("; reap_failed: h1 is still registered: its VM {vm} is not this stado home's (it carries the stado home another-home; this home is ")),
        "{text}"
    );
    let (_, list) = json(home, &["cloud", "host", "list", "--provider", "fake"]);
    assert_eq!(list["hosts"][0]["name"], "h1", "it stays declared");
}

/// `--home DIR` chooses the home over `STADO_HOME`.
#[test]
fn home_chooses_the_home_over_stado_home() {
    let dir = tempfile::tempdir().unwrap();
    let enabled = dir.path().join("enabled");
    let empty = dir.path().join("empty");
    set_up(&enabled);
    let list = ["cloud", "host", "list", "--provider", "fake"];
    // STADO_HOME names the empty home; --home the set-up one.
    let mut args = list.to_vec();
    args.extend(["--home", enabled.to_str().unwrap()]);
    let out = stado(&empty, &args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // And the other way round.
    let mut args = list.to_vec();
    args.extend(["--home", empty.to_str().unwrap()]);
    let out = stado(&enabled, &args);
    assert!(!out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        "stado: the provider fake is not enabled in this profile (providers: none; providers_disabled: none); stado config set providers fake enables it"
    );
    ok(
        &enabled,
        &[
            "config",
            "set",
            "owner",
            "team-z",
            "--home",
            empty.to_str().unwrap(),
        ],
    );
    let (_, shown) = json(
        &enabled,
        &["config", "show", "--home", empty.to_str().unwrap()],
    );
    let (_, other) = json(&enabled, &["config", "show"]);
    assert_ne!(shown, other);
    assert!(shown.to_string().contains("team-z"), "{shown}");
    assert!(!other.to_string().contains("team-z"), "{other}");
}

/// A `reap --apply --every 1` of `home`'s fake cloud, and the lines it writes as they come: with
/// `--json`, its stdout's (one report a tick); without, its stderr's (its log).
#[cfg(unix)]
struct Reaper {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
    reader: std::thread::JoinHandle<()>,
}

#[cfg(unix)]
impl Reaper {
    fn start(home: &Path, json: bool) -> Reaper {
        let args = [
            "cloud",
            "host",
            "reap",
            "--provider",
            "fake",
            "--apply",
            "--every",
            "1",
        ];
        let (out, log) = if json {
            (Stdio::piped(), Stdio::null())
        } else {
            (Stdio::null(), Stdio::piped())
        };
        let mut child = Command::new(env!("CARGO_BIN_EXE_stado"))
            .args(args)
            .args(json.then_some("--json"))
            .env("STADO_HOME", home)
            .env_remove("WC_PROVIDERS")
            .env_remove("WC_DISABLED_PROVIDERS")
            .stdout(out)
            .stderr(log)
            .spawn()
            .unwrap();
        let written: Box<dyn std::io::Read + Send> =
            match (child.stdout.take(), child.stderr.take()) {
                (Some(out), _) => Box::new(out),
                (None, log) => Box::new(log.unwrap()),
            };
        let (tx, lines) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            for line in std::io::BufReader::new(written)
                .lines()
                .map_while(Result::ok)
            {
                let _ = tx.send(line);
            }
        });
        Reaper {
            child,
            lines,
            reader,
        }
    }

    /// The next `n` lines, or as many as come within 30 s.
    fn next_lines(&self, n: usize) -> Vec<String> {
        let mut lines = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while lines.len() < n && Instant::now() < deadline {
            if let Ok(l) = self.lines.recv_timeout(Duration::from_millis(200)) {
                lines.push(l);
            }
        }
        lines
    }

    fn signal(&self, name: &str) {
        let sent = Command::new("kill")
            .args([&format!("-{name}"), &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
    }

    /// A SIGINT while this process waits on `held`, the fake cloud's state lock, then `held` let go:
    /// the lines it wrote since the last read, once it has exited 0.
    fn interrupt_while(self, held: orca::fs::FileLock) -> Vec<String> {
        self.signal("INT");
        std::thread::sleep(Duration::from_millis(300));
        drop(held);
        let (status, lines) = self.end();
        assert!(status.success(), "stopped on SIGINT: {status:?}");
        lines
    }

    fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.reader.join().unwrap();
    }

    /// How it ended, within 30 s (killed after that), and the lines it wrote since the last read.
    fn end(mut self) -> (std::process::ExitStatus, Vec<String>) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.child.try_wait().unwrap().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let status = self.child.wait().unwrap();
        self.reader.join().unwrap();
        (status, self.lines.try_iter().collect())
    }
}

/// `reap --apply --every SECONDS --json` prints one JSON object per tick, each on a line of its own,
/// and none more when it stops (SIGTERM).
#[cfg(unix)]
#[test]
fn reap_every_json_prints_one_object_per_tick_and_none_when_it_stops() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path();
    set_up_with_a_host(home);
    let reaper = Reaper::start(home, true);
    let mut lines = reaper.next_lines(2);
    assert_eq!(lines.len(), 2, "two ticks: {lines:?}");
    reaper.signal("TERM");
    let (status, more) = reaper.end();
    assert!(status.success(), "stopped on SIGTERM: {status:?}");
    lines.extend(more);
    for l in &lines {
        let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}"));
        assert_eq!(v["command"], "reap", "{l}");
        assert_eq!(v["ok"], true, "{l}");
        assert_eq!(
            v["hosts"][0]["name"], "h1",
            "every line is a tick's report: {l}"
        );
    }
}

/// A tick that meets a create holding the registry's lock (a create holds it from its first step
/// to its last) skips that tick and says so; the next tick, once the lock is let go, runs its pass.
#[cfg(unix)]
#[test]
fn reap_every_skips_a_tick_that_meets_a_running_create_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path();
    set_up_with_a_host(home);
    let held =
        orca::fs::FileLock::lock_blocking(orca::fs::FileLock::path_for(home.join("registry.json")))
            .unwrap();
    let reaper = Reaper::start(home, true);
    let first = reaper.next_lines(1);
    drop(held);
    let second = reaper.next_lines(1);
    reaper.signal("TERM");
    let (status, _) = reaper.end();
    assert!(status.success(), "stopped on SIGTERM: {status:?}");
    assert_eq!(first.len(), 1, "the first tick: {first:?}");
    let v: Value = serde_json::from_str(&first[0]).unwrap();
    assert_eq!(v["command"], "reap", "{v}");
    assert_eq!(v["ok"], true, "{v}");
    let why = v["skipped"].as_str().unwrap_or_default();
    assert!(
        why.contains("is being written by another stado right now"),
        "{v}"
    );
    assert_eq!(second.len(), 1, "the second tick: {second:?}");
    let v: Value = serde_json::from_str(&second[0]).unwrap();
    assert_eq!(v["hosts"][0]["name"], "h1", "the pass ran: {v}");
}

/// A SIGINT that comes while a tick runs stops the reaper once that tick has ended, as a SIGTERM
/// does: it is neither lost nor the end of the process in the middle of a pass.
#[cfg(unix)]
#[test]
fn reap_every_stops_after_the_tick_a_sigint_came_in() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path();
    set_up_with_a_host(home);
    let reaper = Reaper::start(home, true);
    assert_eq!(reaper.next_lines(1).len(), 1, "the first tick");
    // The fake cloud's state lock, held here, keeps the second tick (due 1 s after the first)
    // waiting in its pass.
    let held = orca::fs::FileLock::lock_blocking(orca::fs::FileLock::path_for(
        home.join("fake-cloud.json"),
    ))
    .unwrap();
    std::thread::sleep(Duration::from_secs(3));
    let lines = reaper.interrupt_while(held);
    // The second tick's report, unless a machine too loaded to start that tick within the 3 s let
    // the signal come between ticks; never a third.
    assert!(lines.len() <= 1, "ticks after the signal: {lines:?}");
}

/// A SIGINT during the first tick also waits for that tick to end: the reaper watches for it from
/// its start, rather than leaving the signal its default action (the end of the process) until
/// the first wait.
#[cfg(target_os = "linux")]
#[test]
fn reap_every_catches_a_sigint_during_its_first_tick() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path();
    set_up_with_a_host(home);
    // Held before the reaper starts: its first tick waits in its pass.
    let held = orca::fs::FileLock::lock_blocking(orca::fs::FileLock::path_for(
        home.join("fake-cloud.json"),
    ))
    .unwrap();
    let reaper = Reaper::start(home, true);
    // Whether the process has a handler of its own for SIGINT (bit 1 of SigCgt in its status).
    let catches_sigint = || {
        let status = std::fs::read_to_string(format!("/proc/{}/status", reaper.child.id()));
        status.ok().is_some_and(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("SigCgt:"))
                .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
                .is_some_and(|m| m & 0b10 != 0)
        })
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !catches_sigint() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let lines = reaper.interrupt_while(held);
    assert_eq!(
        lines.len(),
        1,
        "the first tick's report, and none more: {lines:?}"
    );
}

/// create says what it did on stdout, and its progress (a line per step, as each starts) and its error
/// on stderr as `stado: ...`, as every command does, on a terminal or not.
#[test]
fn create_writes_progress_and_errors_on_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path();
    set_up(home);
    let mut create = CREATE.to_vec();
    create.push("30");
    let out = stado(home, &create);
    assert!(out.status.success());
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        stderr.contains("stado: [1/9] checking the name\n"),
        "{stderr}"
    );
    assert!(
        stderr.contains("stado: [9/9] waiting for cloud-init and asking for rustc, node and npm\n"),
        "{stderr}"
    );
    assert!(!stdout.contains("[1/9]"), "{stdout}");
    assert!(stdout.contains("first boot: cloud-init done"), "{stdout}");

    let out = stado(home, &create);
    assert!(!out.status.success());
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("already registered"),
        "the error is not on stdout"
    );
    assert!(String::from_utf8_lossy(&out.stderr)
        .ends_with("stado: target 'h1' is already registered\n"));

    ok(home, &["fake", "cloud", "--credit", "20.05"]);
    create[3] = "h2";
    let out = stado(home, &create);
    assert!(!out.status.success());
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(stdout.contains("projected hourly burn: "), "{stdout}");
    assert!(!stdout.contains("is refused"), "{stdout}");
    assert!(
        stderr.contains("\nstado: creating cloud host h2 (amd64-small) in zone-a is refused: "),
        "{stderr}"
    );
}

/// A provider stado does not know is refused naming the ones it knows, in the profile and on the
/// command line.
#[test]
fn an_unknown_provider_is_refused_naming_the_known_ones() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path();
    let out = stado(home, &["config", "set", "providers", "aws"]);
    assert!(!out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        "stado: providers: providers stado knows (azure, fake), got \"aws\""
    );
    let out = stado(home, &["config", "set", "providers_disabled", "azure,aws"]);
    assert!(!out.status.success());
    let out = stado(home, &["cloud", "host", "list", "--provider", "aws"]);
    assert!(!out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        "stado: unknown provider \"aws\"; stado knows azure and fake"
    );
}
