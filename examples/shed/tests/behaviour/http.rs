//! The HTTP API on 127.0.0.1 (JSON and `text/event-stream`), its authentication, and the `shed` CLI
//! against it.

use std::time::Duration;

use clap::Parser as _;
use orca::memory::{FaultKind, Operation};
use orca::ErrorKind;
use secrecy::SecretString;
use serde_json::{json, Value};
use shed::config::{Client, Role};
use shed::probe::ProbeOutcome;
use shed::{Caller, Status};

use crate::support::{Call, Env};

pub(crate) async fn serve(env: &Env) -> String {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let app = shed::api::router(env.backend.clone());
    tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
    format!("http://{addr}")
}

pub(crate) fn http() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().unwrap()
}

/// Reads server-sent events until `stop` says so (or 10 s pass).
async fn events(resp: reqwest::Response, stop: impl Fn(&str) -> bool) -> Vec<(String, Value)> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    each_event(resp, stop, tx).await;
    let mut out = Vec::new();
    while let Ok(e) = rx.try_recv() {
        out.push(e);
    }
    out
}

/// Reads server-sent events until `stop` says so (or 10 s pass), handing each to `tx` as it comes.
async fn each_event(
    resp: reqwest::Response,
    stop: impl Fn(&str) -> bool,
    tx: tokio::sync::mpsc::UnboundedSender<(String, Value)>,
) {
    let mut resp = resp;
    let mut buf = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while let Ok(Ok(Some(chunk))) = tokio::time::timeout_at(deadline, resp.chunk()).await {
        buf.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buf.find("\n\n") {
            let block: String = buf.drain(..end + 2).collect();
            let mut name = String::new();
            let mut data = String::new();
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("event:") {
                    name = v.trim().into();
                } else if let Some(v) = line.strip_prefix("data:") {
                    data.push_str(v.trim_start());
                }
            }
            if data.is_empty() {
                continue;
            }
            let done = stop(&name);
            let _ = tx.send((name, serde_json::from_str(&data).unwrap()));
            if done {
                return;
            }
        }
    }
}

#[tokio::test]
async fn json_calls_over_http() {
    let env = Env::new().await;
    let base = serve(&env).await;
    let c = http();
    let r = c
        .post(format!("{base}/api/sheds"))
        .json(&json!({"name": "web"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["status"], "starting");
    assert_eq!(v["status_reason"], "");
    env.until_status("web", Status::Running).await;
    let v: Value = c
        .get(format!("{base}/api/sheds/web"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["status"], "running");
    let list: Vec<Value> = c
        .get(format!("{base}/api/sheds"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(list.len(), 1);
    let r = c
        .post(format!("{base}/api/sheds/web/start"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 409);
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["code"], "SHED_RUNNING");
    let r = c
        .post(format!("{base}/api/sheds/web/stop"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        (v["status"].as_str(), v["effect"].as_str()),
        (Some("stopping"), Some("changed"))
    );
    env.until_status("web", Status::Stopped).await;
    let r = c
        .post(format!("{base}/api/sheds/web/exec"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 409);
    assert_eq!(r.json::<Value>().await.unwrap()["code"], "SHED_NOT_RUNNING");
    let r = c
        .delete(format!("{base}/api/sheds/web"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let r = c.get(format!("{base}/api/sheds/web")).send().await.unwrap();
    assert_eq!(r.status(), 404);
    let r = c
        .post(format!("{base}/api/sheds"))
        .json(&json!({"name": "x", "colour": "blue"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert_eq!(r.json::<Value>().await.unwrap()["code"], "INVALID_REQUEST");
    let info: Value = c
        .get(format!("{base}/api/info"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        (info["backend"].as_str(), info["isolation"].as_str()),
        (Some("remote"), Some("topology"))
    );
}

#[tokio::test]
async fn routes_of_features_a_remote_server_lacks() {
    let env = Env::new().await;
    let base = serve(&env).await;
    let c = http();
    env.running("a").await;
    let routes = [
        ("POST", "/api/sheds/a/reset"),
        ("POST", "/api/snapshots"),
        ("GET", "/api/snapshots/s1"),
        ("DELETE", "/api/snapshots/s1"),
        ("GET", "/api/images/ubuntu"),
        ("POST", "/api/images/ubuntu/tag"),
        ("POST", "/api/images/pull"),
        ("POST", "/api/images/ubuntu/push"),
        ("DELETE", "/api/images/ubuntu"),
        ("POST", "/api/images/prune"),
        ("POST", "/api/sheds/a/egress"),
        ("POST", "/api/egress/profiles"),
        ("PUT", "/api/egress/profiles/github"),
        ("DELETE", "/api/egress/profiles/github"),
    ];
    for (m, path) in routes {
        let r = c
            .request(m.parse().unwrap(), format!("{base}{path}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 501, "{m} {path}");
        assert_eq!(
            r.json::<Value>().await.unwrap()["code"],
            "FEATURE_UNSUPPORTED"
        );
    }
    for path in ["/api/snapshots", "/api/images"] {
        let v: Value = c
            .get(format!("{base}{path}"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(v, json!([]), "{path} lists nothing");
    }
    let r = c
        .post(format!("{base}/api/sheds"))
        .json(&json!({"name": "b", "local_dir": "/src"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 422);
}

#[tokio::test]
async fn a_streamed_create_stays_open_until_the_shed_settles_and_closing_it_never_ends_the_create()
{
    let env = Env::build(|c| c.limits.max_running = 8).await;
    let base = serve(&env).await;
    let c = http();
    let r = c
        .post(format!("{base}/api/sheds"))
        .header("accept", "text/event-stream")
        .json(&json!({"name": "s"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let ev = events(r, |n| n == "complete" || n == "error").await;
    let (last, data) = ev.last().unwrap();
    assert_eq!(last, "complete", "{ev:?}");
    assert_eq!(data["status"], "running");

    env.probe
        .set_default(ProbeOutcome::Unreachable("booting".into()));
    let r = c
        .post(format!("{base}/api/sheds"))
        .header("accept", "text/event-stream")
        .json(&json!({"name": "t"}))
        .send()
        .await
        .unwrap();
    let first = events(r, |_| true).await;
    assert_eq!(first[0].0, "status");
    // The response is dropped here: the stream ends, the create goes on.
    env.probe.set_default(ProbeOutcome::Answered);
    env.advance(5).await;
    env.until_status("t", Status::Running).await;

    env.probe.set_default(ProbeOutcome::HostKeyMismatch);
    let r = c
        .post(format!("{base}/api/sheds"))
        .header("accept", "text/event-stream")
        .json(&json!({"name": "u"}))
        .send()
        .await
        .unwrap();
    let ev = events(r, |n| n == "complete" || n == "error").await;
    let (last, data) = ev.last().unwrap();
    assert_eq!(last, "error");
    assert_eq!(data["code"], "CREATE_FAILED");
    assert!(data["message"].as_str().unwrap().contains("host_key"));

    env.cloud
        .inject(Operation::Create, FaultKind::Error(ErrorKind::Quota), 1);
    let r = c
        .post(format!("{base}/api/sheds"))
        .header("accept", "text/event-stream")
        .json(&json!({"name": "q"}))
        .send()
        .await
        .unwrap();
    let ev = events(r, |n| n == "complete" || n == "error").await;
    assert_eq!(ev.last().unwrap().1["code"], "CLOUD_QUOTA_EXCEEDED");
    assert!(
        env.view("q").is_none(),
        "an early quota refusal leaves no shed"
    );
}

#[tokio::test]
async fn a_streamed_delete_ends_once_the_vm_is_gone_or_with_an_error_when_it_cannot_be_destroyed() {
    let env = Env::new().await;
    let base = serve(&env).await;
    let c = http();
    env.running("a").await;
    env.running("b").await;
    env.wrapped.hold(Call::Delete);
    let r = c
        .delete(format!("{base}/api/sheds/a"))
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    let (tx, mut seen) = tokio::sync::mpsc::unbounded_channel();
    let reading = tokio::spawn(each_event(r, |n| n == "complete" || n == "error", tx));
    // The events the assertion waits for: the client has the stream's first event, and the destroy
    // has reached the cloud, where it is held.
    let (name, first) = tokio::time::timeout(Duration::from_secs(10), seen.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (name.as_str(), &first["status"]),
        ("status", &json!("deleting"))
    );
    assert!(env.view("a").is_none(), "hidden at once");
    env.until("the destroy is held", |e| {
        e.wrapped.entered(Call::Delete) == 1
    })
    .await;
    let id = first["id"].as_str().unwrap().to_string();
    assert!(
        futures::poll!(std::pin::pin!(env.backend.wait_gone(&id))).is_pending(),
        "what the stream waits for has not happened"
    );
    assert_eq!(
        seen.try_recv(),
        Err(tokio::sync::mpsc::error::TryRecvError::Empty),
        "open until the VM is gone"
    );
    assert!(!reading.is_finished());
    env.wrapped.release(Call::Delete);
    reading.await.unwrap();
    assert_eq!(seen.recv().await.unwrap().0, "complete");
    assert_eq!(env.vms().len(), 1);

    env.cloud.inject(
        Operation::Delete,
        FaultKind::Error(ErrorKind::PermissionDenied),
        1_000,
    );
    let r = c
        .delete(format!("{base}/api/sheds/b"))
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    let ev = events(r, |n| n == "complete" || n == "error").await;
    let (last, data) = ev.last().unwrap();
    assert_eq!(last, "error");
    assert_eq!(
        data["message"],
        "the delete is recorded but the VM could not be destroyed yet; the server keeps trying"
    );
    assert!(env.view("b").is_none());
}

#[tokio::test]
async fn clients_need_their_token_and_see_their_own_sheds() {
    let env = Env::build(|c| {
        for (name, role, tok) in [
            ("ops", Role::Admin, "admin-token"),
            ("ci", Role::Service, "ci-token"),
        ] {
            c.clients.insert(
                name.into(),
                Client {
                    caller: Caller {
                        name: name.into(),
                        role,
                        max_age: None,
                        max_cpus: None,
                        max_memory_mb: None,
                        images: Vec::new(),
                    },
                    token: SecretString::from(tok.to_string()),
                },
            );
        }
    })
    .await;
    let base = serve(&env).await;
    let c = http();
    let r = c.get(format!("{base}/api/sheds")).send().await.unwrap();
    assert_eq!(r.status(), 401);
    // An unknown token, a known one's prefix or a known one with more after it: none is a caller.
    for token in ["nope", "ci-tok", "ci-token2", "admin-token-ci-token"] {
        let r = c
            .get(format!("{base}/api/sheds"))
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401, "{token}");
    }
    let r = c
        .post(format!("{base}/api/sheds"))
        .bearer_auth("ci-token")
        .json(&json!({"name": "job-1"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["client"], "ci");
    let r = c
        .get(format!("{base}/api/log"))
        .bearer_auth("ci-token")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let log: Vec<String> = c
        .get(format!("{base}/api/log"))
        .bearer_auth("admin-token")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(log
        .iter()
        .any(|l| l.contains("create accepted for client ci")));
}

pub(crate) async fn cli(base: &str, args: &[&str]) -> (i32, String, String) {
    let mut argv = vec![
        "shed",
        "--server",
        base,
        "--poll-ms",
        "10",
        "--wait-secs",
        "10",
    ];
    argv.extend_from_slice(args);
    let a = shed::cli::Args::try_parse_from(argv).unwrap();
    let mut out = Vec::new();
    let mut err = Vec::new();
    let code = shed::cli::run(a, &mut out, &mut err).await;
    (
        code,
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    )
}

/// The token goes in every request: over plain http only to this machine, never to another host,
/// refused before anything is sent (nothing listens at 192.0.2.1; no connection is tried).
#[tokio::test]
async fn the_cli_refuses_a_plain_http_server_that_is_not_this_machine_before_sending_anything() {
    for server in [
        "http://192.0.2.1:8421",
        "http://localhost.example.net:8421",
        "http://127.0.0.1.example.com",
    ] {
        let started = std::time::Instant::now();
        let (code, out, err) = cli(server, &["--token", "tok-secret", "info"]).await;
        assert_eq!(code, 2, "{server}: {out}{err}");
        assert!(
            err.contains("--server")
                && err.contains("https://")
                && err.contains("nothing was sent"),
            "{server}: {err}"
        );
        assert!(!err.contains("tok-secret"), "{err}");
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
    }
}

#[tokio::test]
async fn the_cli_never_shows_a_password_in_the_server_url_or_the_token() {
    // Nothing listens on port 1: had the request been sent, the client's error would name the URL.
    let (code, out, err) = cli("http://admin:pw-in-url@127.0.0.1:1", &["info"]).await;
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        !err.contains("pw-in-url") && !out.contains("pw-in-url"),
        "{err}"
    );
    assert!(
        err.contains("--token") && err.contains("nothing was sent"),
        "{err}"
    );
    // One that does not parse is not repeated either.
    for bad in [
        "http://admin:pw-in-url@shed.example:99999",
        "http://admin:pw-in-url@",
    ] {
        let (code, _, err) = cli(bad, &["info"]).await;
        assert_eq!(code, 2, "{err}");
        assert!(!err.contains("pw-in-url"), "{err}");
    }
    let a = shed::cli::Args::try_parse_from([
        "shed",
        "--server",
        "http://admin:pw-in-url@127.0.0.1:1",
        "--token",
        "tok-secret",
        "list",
    ])
    .unwrap();
    let shown = format!("{a:?}");
    assert!(
        !shown.contains("tok-secret") && !shown.contains("pw-in-url"),
        "{shown}"
    );
    assert!(
        shown.contains("***") && shown.contains("127.0.0.1:1"),
        "{shown}"
    );
}

#[tokio::test]
async fn the_cli_creates_lists_stops_starts_and_deletes_waiting_for_each_to_settle() {
    let env = Env::new().await;
    let base = serve(&env).await;
    let (code, out, err) = cli(&base, &["create", "dev-1"]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("shed dev-1 is running"), "{out}");
    let (code, out, _) = cli(&base, &["list"]).await;
    assert_eq!(code, 0);
    assert!(out.contains("dev-1") && out.contains("running"), "{out}");
    let (code, out, err) = cli(&base, &["stop", "dev-1"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("shed dev-1 is stopped"), "{out}");
    let (code, out, err) = cli(&base, &["start", "dev-1"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("is running"), "{out}");
    env.cloud.operator_stop(&env.vm("dev-1").unwrap().id);
    env.pass().await;
    let (_, out, _) = cli(&base, &["list", "-v"]).await;
    assert!(out.contains("stopped (external)"), "{out}");
    let (_, out, _) = cli(&base, &["list"]).await;
    assert!(!out.contains("(external)"), "{out}");
    let (_, out, _) = cli(&base, &["list", "--json"]).await;
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v[0]["status_reason"], "external");
    let (code, _, err) = cli(&base, &["stop", "dev-1"]).await;
    assert_eq!(code, 1);
    assert!(err.contains("SHED_STOPPED"), "{err}");
    let (code, out, err) = cli(&base, &["delete", "dev-1"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("deleted"));
    assert!(env.vms().is_empty(), "delete returns once the VM is gone");
    let (code, _, err) = cli(&base, &["delete", "dev-1"]).await;
    assert_eq!(code, 1);
    assert!(err.contains("NOT_FOUND"), "{err}");
}

#[tokio::test]
async fn the_cli_refuses_unsupported_flags_before_sending_anything() {
    let env = Env::new().await;
    let base = serve(&env).await;
    for flags in [
        &["--local-dir", "."][..],
        &["--add-dir", "/x"],
        &["--from-snapshot", "s1"],
        &["--egress", "github"],
        &["--mounts", "cache"],
    ] {
        let mut args = vec!["create", "x"];
        args.extend_from_slice(flags);
        let (code, _, err) = cli(&base, &args).await;
        assert_eq!(code, 2, "{flags:?}");
        assert!(
            err.contains(flags[0]) && err.contains("nothing was sent"),
            "{err}"
        );
    }
    assert_eq!(env.wrapped.entered(Call::CreateBefore), 0);
    assert!(env.backend.records().is_empty());
}

#[tokio::test]
async fn the_cli_reports_a_delete_whose_vm_cannot_be_destroyed_and_exits_1() {
    let env = Env::new().await;
    let base = serve(&env).await;
    env.running("a").await;
    env.cloud.inject(
        Operation::Delete,
        FaultKind::Error(ErrorKind::PermissionDenied),
        1_000,
    );
    let (code, _, err) = cli(&base, &["delete", "a"]).await;
    assert_eq!(code, 1);
    assert!(
        err.contains(
            "the delete is recorded but the VM could not be destroyed yet; the server keeps trying"
        ),
        "{err}"
    );
}

/// The `{code, message}` body of an error answer, checked to be JSON.
async fn error_body(r: reqwest::Response) -> (u16, String, String) {
    let status = r.status().as_u16();
    let ct = r
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let text = r.text().await.unwrap();
    assert!(
        ct.starts_with("application/json"),
        "{status} {ct:?}: {text:?}"
    );
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text:?}"));
    let field = |k: &str| {
        v[k].as_str()
            .unwrap_or_else(|| panic!("no {k}: {v}"))
            .to_string()
    };
    (status, field("code"), field("message"))
}

#[tokio::test]
async fn an_unknown_route_is_a_json_404() {
    let env = Env::new().await;
    let base = serve(&env).await;
    let c = http();
    for path in ["/api/nope", "/", "/api/sheds/a/b/c"] {
        let r = c.get(format!("{base}{path}")).send().await.unwrap();
        let (status, code, message) = error_body(r).await;
        assert_eq!((status, code.as_str()), (404, "NOT_FOUND"), "{path}");
        assert!(message.contains(path), "{message}");
    }
}

#[tokio::test]
async fn a_method_a_route_does_not_take_is_a_json_405() {
    let env = Env::new().await;
    let base = serve(&env).await;
    let c = http();
    for (method, path) in [
        ("DELETE", "/api/info"),
        ("PUT", "/api/sheds"),
        ("POST", "/api/log"),
    ] {
        let r = c
            .request(method.parse().unwrap(), format!("{base}{path}"))
            .send()
            .await
            .unwrap();
        let (status, code, message) = error_body(r).await;
        assert_eq!(
            (status, code.as_str()),
            (405, "METHOD_NOT_ALLOWED"),
            "{method} {path}"
        );
        assert!(
            message.contains(method) && message.contains(path),
            "{message}"
        );
    }
}

#[tokio::test]
async fn a_body_over_the_limit_is_a_json_413_and_makes_nothing() {
    let env = Env::new().await;
    let base = serve(&env).await;
    let big = format!(r#"{{"name": "big", "repo": "{}"}}"#, "x".repeat(3 << 20));
    let r = http()
        .post(format!("{base}/api/sheds"))
        .header("content-type", "application/json")
        .body(big)
        .send()
        .await
        .unwrap();
    let (status, code, _) = error_body(r).await;
    assert_eq!((status, code.as_str()), (413, "REQUEST_TOO_LARGE"));
    assert!(env.backend.records().is_empty());
}

/// Checks that every row of a `shed list` table starts each of `columns` where its header does.
fn assert_columns_aligned(table: &str, columns: &[&str]) {
    let mut lines = table.lines();
    let header = lines.next().unwrap();
    for col in columns {
        let at = header
            .find(col)
            .unwrap_or_else(|| panic!("no {col} in {header:?}"));
        for row in table.lines().skip(1) {
            let b = row.as_bytes();
            assert!(
                b.len() > at && b[at - 1] == b' ' && b[at] != b' ',
                "{col} is not at column {at} in {row:?}:\n{table}"
            );
        }
    }
}

#[tokio::test]
async fn shed_list_aligns_its_columns_whatever_the_widths_of_names_and_statuses() {
    let env = Env::build(|c| c.limits.max_running = 8).await;
    let base = serve(&env).await;
    let long = "a-name-of-forty-characters-exactly-12345";
    assert_eq!(long.len(), 40);
    env.running("a").await;
    env.running(long).await;
    let (code, _, err) = cli(&base, &["stop", "a"]).await;
    assert_eq!(code, 0, "{err}");
    env.probe
        .set_default(ProbeOutcome::Unreachable("booting".into()));
    env.create("mid-sized-name").await.unwrap();
    env.until("mid-sized-name unreachable", |e| {
        e.view("mid-sized-name").map(|v| v.status_reason) == Some("unreachable".into())
    })
    .await;
    let (code, out, err) = cli(&base, &["list"]).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), 4, "{out}");
    assert_columns_aligned(&out, &["STATUS", "SIZE"]);
    let (code, out, err) = cli(&base, &["list", "-v"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("starting (unreachable)"), "{out}");
    assert_columns_aligned(&out, &["STATUS", "SIZE", "IMAGE", "CLIENT"]);
}

/// A caller without a token is answered before its body is read: a create that announces a body
/// and never sends it gets its 401 at once (the server holds no connection, nor reads up to the
/// body limit, for a caller it does not know).
#[tokio::test]
async fn an_unauthenticated_create_is_answered_without_reading_its_body() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let env = Env::build(|c| {
        let caller = Caller {
            name: "ops".into(),
            role: Role::Admin,
            max_age: None,
            max_cpus: None,
            max_memory_mb: None,
            images: Vec::new(),
        };
        let token = SecretString::from("admin-token".to_string());
        c.clients.insert("ops".into(), Client { caller, token });
    })
    .await;
    let base = serve(&env).await;
    let mut conn = tokio::net::TcpStream::connect(base.trim_start_matches("http://"))
        .await
        .unwrap();
    let head = "POST /api/sheds HTTP/1.1\r\nHost: shed\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\nConnection: close\r\n\r\n";
    conn.write_all(head.as_bytes()).await.unwrap();
    // The body is never sent: only an answer that does not wait for it arrives.
    let mut answer = vec![0u8; 12];
    let read = tokio::time::timeout(Duration::from_secs(30), conn.read_exact(&mut answer)).await;
    assert!(read.is_ok(), "no answer while the body was not sent");
    assert_eq!(&answer[9..12], b"401");
    assert!(env.backend.records().is_empty());
}

/// A refusal names what is wrong without repeating the caller's value whole: a value of megabytes
/// (a name, an image, a profile, a value of the wrong type, a field shed does not know, a name in
/// the path) is answered in well under a kilobyte that still names the field.
#[tokio::test]
async fn a_refusal_of_a_huge_value_is_short_and_names_the_field() {
    let env = Env::new().await;
    let base = serve(&env).await;
    let c = http();
    // Just under the body limit (2 MiB), so that the value is read and refused, not the body.
    let huge = "x".repeat((2 << 20) - 1024);
    let upper = "X".repeat((2 << 20) - 1024);
    let unknown = format!(r#"{{"name": "a", "{huge}": 1}}"#);
    for (body, status, field) in [
        (json!({"name": upper}).to_string(), 400, "name"),
        (json!({"name": huge}).to_string(), 400, "name"),
        (
            json!({"name": "a", "image": huge}).to_string(),
            400,
            "image",
        ),
        (
            json!({"name": "a", "network_profile": huge}).to_string(),
            400,
            "network_profile",
        ),
        (json!({"name": "a", "cpus": huge}).to_string(), 400, "cpus"),
        (json!({"name": huge, "cpus": 1}).to_string(), 400, "name"),
        (unknown, 400, "unknown field"),
    ] {
        let r = c
            .post(format!("{base}/api/sheds"))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        let (got, _, message) = error_body(r).await;
        assert_eq!(got, status, "{field}: {message}");
        assert!(message.len() < 1024, "{field}: {} bytes", message.len());
        assert!(message.contains(field), "{message}");
    }
    // A name in the path, and an unknown route: 60 KiB (a URI is at most 64 KiB to the HTTP
    // library).
    let long = "x".repeat(60 << 10);
    for (path, status, what) in [
        (format!("/api/sheds/{long}"), 400, "name"),
        (format!("/api/nope/{long}"), 404, "/api/nope/xxxx"),
    ] {
        let r = c.get(format!("{base}{path}")).send().await.unwrap();
        let (got, _, message) = error_body(r).await;
        assert_eq!(got, status, "{message:.200}");
        assert!(message.len() < 1024, "{} bytes", message.len());
        assert!(message.contains(what), "{message}");
    }
    assert!(env.backend.records().is_empty());
}

/// A server with clients answers a caller without a valid token 401, and nothing else, on every
/// route: the routes it has, those of features it lacks (501 to a client), a path it has no route
/// for (404), a method a route does not take (405) and a path it cannot read (400). None tells an
/// unknown caller which routes exist, nor repeats its path.
#[tokio::test]
async fn every_route_answers_401_and_nothing_else_to_a_caller_without_a_valid_token() {
    let env = Env::build(|c| {
        let caller = Caller {
            name: "ops".into(),
            role: Role::Admin,
            max_age: None,
            max_cpus: None,
            max_memory_mb: None,
            images: Vec::new(),
        };
        let token = SecretString::from("admin-token".to_string());
        c.clients.insert("ops".into(), Client { caller, token });
    })
    .await;
    env.running("a").await;
    let base = serve(&env).await;
    let c = http();
    let want = json!({"code": "UNAUTHORIZED", "message": "a valid bearer token is required"});
    let routes = [
        ("GET", "/api/info"),
        ("GET", "/api/log"),
        ("GET", "/api/sheds"),
        ("POST", "/api/sheds"),
        ("GET", "/api/sheds/a"),
        ("DELETE", "/api/sheds/a"),
        ("POST", "/api/sheds/a/start"),
        ("POST", "/api/sheds/a/stop"),
        ("POST", "/api/sheds/a/exec"),
        ("GET", "/api/sheds/a/connect"),
        ("POST", "/api/sheds/a/reset"),
        ("PUT", "/api/sheds/a/egress"),
        ("GET", "/api/snapshots"),
        ("POST", "/api/snapshots"),
        ("GET", "/api/snapshots/s"),
        ("DELETE", "/api/snapshots/s"),
        ("GET", "/api/images"),
        ("POST", "/api/images/pull"),
        ("POST", "/api/images/prune"),
        ("GET", "/api/images/i"),
        ("DELETE", "/api/images/i"),
        ("POST", "/api/images/i/tag"),
        ("POST", "/api/images/i/push"),
        ("POST", "/api/egress/profiles"),
        ("GET", "/api/egress/profiles/p"),
        // No such route, a method a route does not take, a segment that is not UTF-8.
        ("GET", "/api/nope"),
        ("GET", "/"),
        ("DELETE", "/api/info"),
        ("PUT", "/api/sheds"),
        ("GET", "/api/sheds/%FF"),
        ("POST", "/api/sheds/%FF/start"),
    ];
    for token in [None, Some("nope")] {
        for (method, path) in routes {
            let mut r = c.request(method.parse().unwrap(), format!("{base}{path}"));
            if let Some(t) = token {
                r = r.bearer_auth(t);
            }
            let r = r.body("{}").send().await.unwrap();
            let status = r.status().as_u16();
            let text = r.text().await.unwrap();
            assert_eq!(status, 401, "{method} {path} ({token:?}): {text}");
            let body: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(body, want, "{method} {path} ({token:?})");
        }
    }
    assert_eq!(env.view("a").unwrap().status, Status::Running);
    assert_eq!(env.backend.records().len(), 1);
}
