//! The `keeper` binary: `step` through orca's own `fake` driver and a state file (separate processes
//! share one simulated cloud), every output channel masked but the delivered tokens, `serve`,
//! `migrate`, `scenario validate`, `token hash`.

use crate::support;

use std::io::{Read, Write};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{sha256_hex, write_vault_file, TestDb};

const BIN: &str = env!("CARGO_BIN_EXE_keeper");

struct Cli {
    db: TestDb,
    dir: tempfile::TempDir,
}

impl Cli {
    async fn new(test: &str) -> Option<Cli> {
        let db = TestDb::create(test).await?;
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("cloud.json");
        write_vault_file(
            &dir.path().join("vault"),
            "fake/lab",
            &json!({ orca::FAKE_STATE_ENV: state.to_str().unwrap() }),
        );
        let k = keeper::Keeper::connect(
            &db.url,
            Arc::new(keeper::vault::FileVault::new(dir.path().join("vault"))),
            Arc::new(keeper::drivers::OrcaDrivers),
            keeper::cloud::Settings::default(),
        )
        .await
        .unwrap();
        keeper::registry::create_provider(
            k.pool(),
            "test",
            &json!({"name": "lab", "driver": "fake", "credentials_ref": "fake/lab",
                    "region": "zone-a", "fqdn_suffix": "zone-a.fake.internal"}),
        )
        .await
        .unwrap();
        Some(Cli { db, dir })
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(BIN);
        c.args(args)
            .env("DATABASE_URL", &self.db.url)
            .env("KEEPER_VAULT_DIR", self.dir.path().join("vault"))
            .env("KEEPER_LOG", "trace")
            .env("KEEPER_DRIVERS", support::driver_mode())
            .env_remove("KEEPER_API_TOKENS")
            .env_remove("KEEPER_API_TOKENS_FILE")
            .env_remove("ORCA_FAKE_STATE")
            .current_dir(self.dir.path());
        c
    }

    fn run(&self, args: &[&str]) -> (Output, String, String) {
        let out = self.command(args).output().unwrap();
        let stdout = String::from_utf8(out.stdout.clone()).unwrap();
        let stderr = String::from_utf8(out.stderr.clone()).unwrap();
        (out, stdout, stderr)
    }

    fn cloud(&self) -> orca::memory::MemoryCloud {
        orca::memory::MemoryCloud::persistent(self.dir.path().join("cloud.json")).unwrap()
    }
}

#[tokio::test]
async fn a_cli_step_prints_the_plain_tokens_once_and_no_channel_leaks_a_secret() {
    let Some(cli) =
        Cli::new("a_cli_step_prints_the_plain_tokens_once_and_no_channel_leaks_a_secret").await
    else {
        return;
    };
    let params = json!({"provider": "lab", "count": 2, "name": "cli",
        "profile": {"machine_type": "amd64-small", "labels": {"join-token": "lbl-secret-9"}}});
    let (out, stdout, stderr) = cli.run(&[
        "step",
        "core.cloud.created",
        "--params",
        &params.to_string(),
    ]);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "one JSON object: {stdout}");
    let v: Value = serde_json::from_str(lines[0]).unwrap();
    let hosts = v["hosts"].as_array().unwrap();
    assert_eq!(hosts.len(), 2);
    assert!(stderr.contains("step started"), "the log is on: {stderr}");
    for h in hosts {
        let token = h["bootstrap_token"].as_str().unwrap();
        assert_eq!(stdout.matches(token).count(), 1);
        assert!(!stderr.contains(token), "a token in the log");
        assert!(!stderr.contains(&token[4..]), "a token in the log");
        assert_eq!(h["attributes"]["labels"]["join-token"], "***");
    }
    assert!(!stdout.contains("lbl-secret-9") && !stderr.contains("lbl-secret-9"));
    assert_eq!(cli.cloud().all_machines().len(), 2);

    // Another process destroys them: the state file is the one cloud.
    let ids = v["vm_ids"].clone();
    let sids: Vec<Value> = hosts.iter().map(|h| h["sid"].clone()).collect();
    let params_file = cli.dir.path().join("destroy.json");
    std::fs::write(
        &params_file,
        json!({"provider": "lab", "vm_ids": ids, "sids": sids}).to_string(),
    )
    .unwrap();
    let at = format!("@{}", params_file.display());
    let (out, stdout, stderr) = cli.run(&["step", "core.cloud.destroyed", "--params", &at]);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let v: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(v["counters"]["souls_destroyed"], 2);
    assert!(cli.cloud().all_machines().is_empty());

    // A failure: the output says why, no channel repeats a secret the caller sent.
    let (out, stdout, stderr) = cli.run(&[
        "step",
        "core.cloud.created",
        "--params",
        r#"{"provider": "lab", "profile": {"machine_type": "amd64-small"}, "api_token": "zzz-secret"}"#,
    ]);
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(v["error"]["field"], "api_token");
    assert!(stderr.contains("params.invalid"), "{stderr}");
    assert!(!stdout.contains("zzz-secret") && !stderr.contains("zzz-secret"));

    // User data may hold passwords under any name: the log shows its size only.
    let params = json!({"provider": "lab", "profile": {"machine_type": "amd64-small"},
        "userdata": "#cloud-config\nchpasswd: {list: 'root:pw-secret-5'}\n"});
    let (out, stdout, stderr) = cli.run(&[
        "step",
        "core.cloud.created",
        "--params",
        &params.to_string(),
    ]);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("step parameters"),
        "logged at trace: {stderr}"
    );
    assert!(!stderr.contains("pw-secret-5") && !stdout.contains("pw-secret-5"));

    let (out, _, stderr) = cli.run(&["step", "core.cloud.created", "--params", "{nope"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr.contains("--params is not JSON"), "{stderr}");
    cli.db.drop_now().await;
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn wait_healthy(port: u16) -> bool {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            let _ = s.write_all(b"GET /healthz HTTP/1.0\r\n\r\n");
            let mut answer = String::new();
            let _ = s.read_to_string(&mut answer);
            if answer.starts_with("HTTP/1.0 200") || answer.starts_with("HTTP/1.1 200") {
                return true;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

#[tokio::test]
async fn serve_needs_api_tokens_and_never_prints_them() {
    let Some(cli) = Cli::new("serve_needs_api_tokens_and_never_prints_them").await else {
        return;
    };
    let (out, _, stderr) = cli.run(&["serve", "--listen", "127.0.0.1:0"]);
    assert!(!out.status.success());
    assert!(stderr.contains("KEEPER_API_TOKENS_FILE"), "{stderr}");

    let token = "t-serve-secret-4242";
    let tokens = cli.dir.path().join("tokens.json");
    std::fs::write(
        &tokens,
        json!({"tokens": [{"name": "ops", "sha256": sha256_hex(token), "permissions": ["provider.read"]}]})
            .to_string(),
    )
    .unwrap();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut child = cli
        .command(&["serve", "--listen", &listen])
        .env("KEEPER_API_TOKENS_FILE", &tokens)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let up = wait_healthy(port);
    let answer = if up {
        let http = reqwest::Client::builder().no_proxy().build().unwrap();
        let r = http
            .get(format!("http://{listen}/v1/providers"))
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        Some((r.status().as_u16(), r.text().await.unwrap()))
    } else {
        None
    };
    child.kill().unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(up, "keeper serve did not answer: {stderr}");
    let (status, body) = answer.unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"lab\""), "{body}");
    assert!(stderr.contains("keeper serving"), "{stderr}");
    assert!(!stderr.contains(token) && !stderr.contains(&sha256_hex(token)));
    cli.db.drop_now().await;
}

/// A `--params @FILE` that cannot be read is named, file and flag.
#[tokio::test]
async fn an_unreadable_params_file_is_named_with_its_flag() {
    let Some(cli) = Cli::new("an_unreadable_params_file_is_named_with_its_flag").await else {
        return;
    };
    let (out, _, stderr) = cli.run(&["step", "core.cloud.created", "--params", "@no-such.json"]);
    assert!(!out.status.success());
    assert!(stderr.contains("--params @no-such.json"), "{stderr}");
    cli.db.drop_now().await;
}

/// Without API tokens, serve says what to give in words that keeper's own secret filter leaves
/// whole (before, it showed the file's shape, whose list the filter took for a secret: `{"tokens":
/// ***]}`).
#[tokio::test]
async fn serve_without_api_tokens_says_what_to_give_unmasked() {
    let Some(cli) = Cli::new("serve_without_api_tokens_says_what_to_give_unmasked").await else {
        return;
    };
    let (out, _, stderr) = cli.run(&["serve", "--listen", "127.0.0.1:0"]);
    assert!(!out.status.success());
    assert!(!stderr.contains("***"), "{stderr}");
    assert!(
        stderr.contains("KEEPER_API_TOKENS_FILE") && stderr.contains("tokens"),
        "{stderr}"
    );
    cli.db.drop_now().await;
}

/// Waits (at most 60 s, a guard against a wait without end) until `rx` gives a line with `what`,
/// keeping the lines in `seen`; answers whether it came.
fn wait_for_line(
    rx: &std::sync::mpsc::Receiver<String>,
    seen: &mut Vec<String>,
    what: &str,
) -> bool {
    let deadline = Instant::now() + Duration::from_secs(60);
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        match rx.recv_timeout(left) {
            Ok(line) => {
                let hit = line.contains(what);
                seen.push(line);
                if hit {
                    return true;
                }
            }
            Err(_) => return false,
        }
    }
    false
}

fn signal(pid: u32) {
    let ok = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -TERM {pid}");
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_signal_stops_serve_with_a_step_running_and_names_it() {
    let Some(cli) = Cli::new("a_second_signal_stops_serve_with_a_step_running_and_names_it").await
    else {
        return;
    };
    let token = "t-signal-4243";
    let tokens = cli.dir.path().join("tokens.json");
    std::fs::write(
        &tokens,
        json!({"tokens": [{"name": "ops", "sha256": sha256_hex(token), "permissions": ["step.core.cloud"]}]})
            .to_string(),
    )
    .unwrap();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut child = cli
        .command(&["serve", "--listen", &listen])
        .env("KEEPER_API_TOKENS_FILE", &tokens)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    assert!(wait_healthy(port), "keeper serve did not answer");
    // The step waits for the providers' table, which this test holds locked.
    let mut holder = cli.db.client().await;
    let lock = holder.transaction().await.unwrap();
    lock.batch_execute("LOCK TABLE keeper.cloud_providers IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let url = format!("http://{listen}/v1/steps/core.cloud.destroyed");
    let request = tokio::spawn(async move {
        let _ = http
            .post(url)
            .bearer_auth(token)
            .json(&json!({"provider": "lab", "vm_ids": ["fake-1"]}))
            .send()
            .await;
    });
    let watch = cli.db.client().await;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let waiting: i64 = watch
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
                 AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if waiting > 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the step never waited for the lock"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let pid = child.id();
    let mut seen = Vec::new();
    signal(pid);
    if !wait_for_line(&rx, &mut seen, "signal again") {
        child.kill().unwrap();
        panic!("the first signal is not acknowledged: {seen:?}");
    }
    signal(pid);
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break Some(st);
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    wait_for_line(&rx, &mut seen, "cutting");
    lock.rollback().await.unwrap();
    request.abort();
    let status = status.unwrap_or_else(|| panic!("a second signal did not stop keeper: {seen:?}"));
    assert_eq!(status.code(), Some(130), "{seen:?}");
    let said = seen.join("\n");
    assert!(
        said.contains("cutting 1 running step(s) halfway: core.cloud.destroyed (step_id "),
        "{said}"
    );
    drop((watch, holder));
    cli.db.drop_now().await;
}

#[tokio::test]
async fn migrate_applies_the_schema_once() {
    let Some(cli) = Cli::new("migrate_applies_the_schema_once").await else {
        return;
    };
    let (out, stdout, stderr) = cli.run(&["migrate"]);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stdout.trim(), r#"{"migrated":true}"#);
    let c = cli.db.client().await;
    let n: i64 = c
        .query_one("SELECT count(*) FROM keeper.schema_migrations", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, keeper::db::MIGRATIONS.len() as i64);
    cli.db.drop_now().await;
}

#[test]
fn scenario_validate_requires_on_keeper() {
    let dir = tempfile::tempdir().unwrap();
    let run = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        let out = Command::new(BIN)
            .args(["scenario", "validate"])
            .arg(&path)
            .output()
            .unwrap();
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        (out.status.success(), v)
    };
    let (ok, v) = run(
        "good.yml",
        "- name: provision\n  on: keeper\n  when: has(input.spawn)\n  module: core.cloud.created\n  params:\n    provider: \"${ input.spawn.provider }\"\n",
    );
    assert!(ok, "{v}");
    assert_eq!(v["core_cloud_steps"], 1);
    let (ok, v) = run(
        "bad.yml",
        "- name: provision\n  on: web-1\n  module: core.cloud.created\n  params: {provider: lab}\n",
    );
    assert!(!ok);
    assert_eq!(v["error"]["field"], "steps[0].on");
}

#[test]
fn a_keeper_url_that_could_break_user_data_is_refused_before_connecting() {
    for bad in [
        "https://k.example/\"\nruncmd: [x]",
        "http://keeper.example.net",
        "https://u:pw-s3cret@keeper.example.net",
    ] {
        let out = Command::new(BIN)
            // Nothing listens on port 9: a keeper that went on would fail connecting instead.
            .args(["--database-url", "postgres://postgres@127.0.0.1:9/postgres"])
            .args(["--keeper-url", bad, "migrate"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {stderr}");
        assert!(stderr.contains("--keeper-url"), "{stderr}");
        assert!(stderr.contains("KEEPER_URL"), "{stderr}");
        assert!(!stderr.contains("PostgreSQL"), "{stderr}");
        assert!(!stderr.contains("s3cret"), "{stderr}");
    }
}

#[test]
fn token_hash_prints_the_sha256_only() {
    let mut child = Command::new(BIN)
        .args(["token", "hash"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"t-some-token\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8(out.stdout).unwrap().trim(),
        sha256_hex("t-some-token")
    );
}

/// Every line `keeper serve` and `keeper step` print at `trace`, to standard output and standard
/// error (written to files here, as a deployment's log files are), with a label whose key holds
/// `token` registered through the API and used by steps through the API and the command line: its
/// value is in none of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_named_label_reaches_no_log_line_at_trace() {
    let Some(cli) = Cli::new("a_token_named_label_reaches_no_log_line_at_trace").await else {
        return;
    };
    let secret = "lbl-trace-secret-77";
    let token = "t-trace-4244";
    let tokens = cli.dir.path().join("tokens.json");
    std::fs::write(
        &tokens,
        json!({"tokens": [{"name": "ops", "sha256": sha256_hex(token), "permissions": ["*"]}]})
            .to_string(),
    )
    .unwrap();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let out_log = cli.dir.path().join("serve.out.log");
    let err_log = cli.dir.path().join("serve.err.log");
    let mut child = cli
        .command(&["serve", "--listen", &listen])
        .env("KEEPER_API_TOKENS_FILE", &tokens)
        .stdout(std::fs::File::create(&out_log).unwrap())
        .stderr(std::fs::File::create(&err_log).unwrap())
        .spawn()
        .unwrap();
    let up = wait_healthy(port);
    let mut answers = Vec::new();
    if up {
        let http = reqwest::Client::builder().no_proxy().build().unwrap();
        let base = format!("http://{listen}");
        for (path, body) in [
            (
                "/v1/profiles",
                json!({"name": "tagged", "provider": "lab", "machine_type": "amd64-small",
                       "labels": {"orca-token": secret}}),
            ),
            (
                "/v1/steps/core.cloud.created",
                json!({"provider": "lab", "profile": "tagged", "name": "api"}),
            ),
        ] {
            let r = http
                .post(format!("{base}{path}"))
                .bearer_auth(token)
                .json(&body)
                .send()
                .await
                .unwrap();
            answers.push((r.status().as_u16(), r.text().await.unwrap()));
        }
    }
    let (out, stdout, stderr) = cli.run(&[
        "step",
        "core.cloud.created",
        "--params",
        r#"{"provider": "lab", "profile": "tagged", "name": "cli"}"#,
    ]);
    child.kill().unwrap();
    child.wait().unwrap();
    let serve_out = std::fs::read_to_string(&out_log).unwrap();
    let serve_err = std::fs::read_to_string(&err_log).unwrap();
    assert!(up, "keeper serve did not answer: {serve_err}");
    for (status, body) in &answers {
        assert!(*status < 300, "{status} {body}");
        assert!(!body.contains(secret), "{body}");
    }
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        serve_err.contains("TRACE") && stderr.contains("TRACE"),
        "the log is at trace"
    );
    for (channel, text) in [
        ("serve stdout", &serve_out),
        ("serve stderr", &serve_err),
        ("step stdout", &stdout),
        ("step stderr", &stderr),
    ] {
        let hit = text.lines().find(|l| l.contains(secret));
        assert!(hit.is_none(), "{channel}: {}", hit.unwrap_or_default());
    }
    cli.db.drop_now().await;
}

/// Makes VM `name` in keeper's pool of the state file, and journals it `made` by step `step_id`, as a
/// keeper stopped before recording it left it.
async fn stopped_half_way(cli: &Cli, step_id: &str, name: &str) -> String {
    use orca::Provider;
    let p = cli.cloud().provider("keeper").unwrap();
    let id = match p
        .create(&orca::MachineSpec::new(
            name,
            "amd64-small",
            "zone-a",
            "keeper",
        ))
        .await
        .unwrap()
    {
        orca::Created::Machine(m) => m.id,
        other => panic!("{other:?}"),
    };
    cli.db
        .client()
        .await
        .execute(
            "INSERT INTO keeper.cloud_vms (step_id, provider, name, state, vm_id) VALUES ($1, 'lab', $2, 'made', $3)",
            &[&step_id, &name, &id],
        )
        .await
        .unwrap();
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconcile_and_serve_destroy_the_vms_a_stopped_keeper_left() {
    let Some(cli) = Cli::new("reconcile_and_serve_destroy_the_vms_a_stopped_keeper_left").await
    else {
        return;
    };
    let id = stopped_half_way(&cli, "stopped-1", "web-1").await;
    let (out, stdout, stderr) = cli.run(&["reconcile"]);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let v: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(v["changed"], true, "{v}");
    assert_eq!(v["steps"][0]["destroyed"], json!([id]));
    assert!(cli.cloud().all_machines().is_empty());
    let (out, stdout, _) = cli.run(&["reconcile"]);
    assert!(out.status.success());
    let v: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(v["changed"], false, "a second run changes nothing: {v}");

    // `serve` does the same when it starts.
    let id = stopped_half_way(&cli, "stopped-2", "web-2").await;
    let token = "t-reconcile-4245";
    let tokens = cli.dir.path().join("tokens.json");
    std::fs::write(
        &tokens,
        json!({"tokens": [{"name": "ops", "sha256": sha256_hex(token), "permissions": ["*"]}]})
            .to_string(),
    )
    .unwrap();
    let listen = format!("127.0.0.1:{}", free_port());
    let mut child = cli
        .command(&["serve", "--listen", &listen])
        .env("KEEPER_API_TOKENS_FILE", &tokens)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let c = cli.db.client().await;
    let deadline = Instant::now() + Duration::from_secs(60);
    let state = loop {
        let state: String = c
            .query_one(
                "SELECT state FROM keeper.cloud_vms WHERE step_id = 'stopped-2'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if state != "made" || Instant::now() > deadline {
            break state;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(state, "destroyed", "serve reconciled VM {id} at start-up");
    assert!(cli.cloud().all_machines().is_empty());
    let events: i64 = c
        .query_one(
            "SELECT count(*) FROM keeper.audit_events WHERE event = 'cloud.reconciled'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(events, 2);
    drop(c);
    cli.db.drop_now().await;
}

#[tokio::test]
async fn a_message_naming_a_token_field_keeps_its_words_in_every_channel() {
    let Some(cli) =
        Cli::new("a_message_naming_a_token_field_keeps_its_words_in_every_channel").await
    else {
        return;
    };
    let (out, stdout, stderr) = cli.run(&[
        "step",
        "core.cloud.created",
        "--params",
        r#"{"provider": "lab", "profile": {"machine_type": "amd64-small", "labels": {"x-token": 3}}, "api_token": "zzz-secret-1"}"#,
    ]);
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_str(stdout.trim()).unwrap();
    let said = "api_token: unknown field api_token; the fields of params are";
    assert!(
        v["error"]["message"].as_str().unwrap().starts_with(said),
        "{v}"
    );
    assert!(
        stderr.contains(&format!("error={said}")),
        "the log line: {stderr}"
    );
    assert!(
        stderr.contains(&format!("keeper: params.invalid: {said}")),
        "{stderr}"
    );
    assert!(!stdout.contains("zzz-secret-1") && !stderr.contains("zzz-secret-1"));
    let (out, stdout, stderr) = cli.run(&[
        "step",
        "core.cloud.created",
        "--params",
        r#"{"provider": "lab", "profile": {"machine_type": "amd64-small", "labels": {"x-token": 3}}}"#,
    ]);
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(
        v["error"]["message"], "profile.labels.x-token: a string",
        "{v}"
    );
    assert!(
        stderr.contains("profile.labels.x-token: a string"),
        "{stderr}"
    );
    cli.db.drop_now().await;
}
