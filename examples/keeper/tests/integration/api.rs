//! The operator REST API over real HTTP on 127.0.0.1: permissions, 409 and 422, audit events, masking,
//! and the step.

use crate::support;

use std::sync::atomic::Ordering;
use std::sync::Arc;

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use support::{sha256_hex, World};
use tokio::io::AsyncWriteExt;

struct Api {
    base: String,
    http: reqwest::Client,
    server: tokio::task::JoinHandle<()>,
}

const ADMIN: &str = "t-admin-0123456789";
const OPS: &str = "t-ops-0123456789";
const READER: &str = "t-reader-0123456789";
const STEPPER: &str = "t-stepper-0123456789";
const LISTER: &str = "t-lister-0123456789";

fn tokens() -> keeper::tokens::ApiTokens {
    let t = |name: &str, token: &str, perms: Value| json!({"name": name, "sha256": sha256_hex(token), "permissions": perms});
    let file = json!({"tokens": [
        t("admin", ADMIN, json!(["*"])),
        t("ops", OPS, json!(["provider.*", "profile.*"])),
        t("reader", READER, json!(["provider.read", "profile.read"])),
        t("stepper", STEPPER, json!(["step.core.cloud", "profile.read"])),
        t("lister", LISTER, json!(["provider.read"])),
    ]});
    keeper::tokens::ApiTokens::from_json(&file.to_string()).unwrap()
}

impl Api {
    async fn start(w: &World) -> Api {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = keeper::api::router(w.keeper.clone(), tokens());
        let server = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Api {
            base: format!("http://{addr}"),
            http: reqwest::Client::builder().no_proxy().build().unwrap(),
            server,
        }
    }

    async fn call(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> (StatusCode, Value, String) {
        let mut req = self.http.request(method, format!("{}{path}", self.base));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status();
        let text = resp.text().await.unwrap();
        let v = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text.clone()))
        };
        (status, v, text)
    }
}

impl Drop for Api {
    fn drop(&mut self) {
        self.server.abort();
    }
}

#[tokio::test]
async fn providers_and_profiles_with_permissions_conflicts_and_audit() {
    let Some(w) = World::new("providers_and_profiles_with_permissions_conflicts_and_audit").await
    else {
        return;
    };
    let api = Api::start(&w).await;
    let provider = json!({"name": "hz", "driver": "hetzner", "credentials_ref": "hetzner/prod",
                          "region": "hel1", "fqdn_suffix": "nodes.example.net"});

    // Authentication and permissions.
    let (s, v, _) = api.call(Method::GET, "/v1/providers", None, None).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    assert_eq!(v["error"]["code"], "unauthenticated");
    let (s, _, _) = api
        .call(Method::GET, "/v1/providers", Some("t-wrong"), None)
        .await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    let (s, v, _) = api
        .call(
            Method::POST,
            "/v1/providers",
            Some(READER),
            Some(provider.clone()),
        )
        .await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("provider.create"));
    let (s, _, _) = api
        .call(Method::GET, "/v1/providers", Some(STEPPER), None)
        .await;
    assert_eq!(
        s,
        StatusCode::FORBIDDEN,
        "step.core.cloud does not read providers"
    );

    // Create, conflict, validation.
    let (s, v, _) = api
        .call(
            Method::POST,
            "/v1/providers",
            Some(OPS),
            Some(provider.clone()),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    assert_eq!(v["name"], "hz");
    assert_eq!(v["credentials_ref"], "hetzner/prod");
    assert_eq!(v["fqdn_suffix"], "nodes.example.net");
    let (s, v, _) = api
        .call(
            Method::POST,
            "/v1/providers",
            Some(OPS),
            Some(provider.clone()),
        )
        .await;
    assert_eq!(s, StatusCode::CONFLICT);
    assert_eq!(v["error"]["code"], "provider.exists");
    for (patch, field) in [
        (json!({"driver": "nimbus"}), "driver"),
        (json!({"region": null}), "region"),
        (json!({"credentials_ref": "/etc/shadow"}), "credentials_ref"),
        (json!({"name": "Has Spaces"}), "name"),
        (json!({"password": "x"}), "password"),
    ] {
        let mut body = provider.clone();
        body["name"] = json!("other");
        for (k, val) in patch.as_object().unwrap() {
            body[k] = val.clone();
        }
        let (s, v, _) = api
            .call(Method::POST, "/v1/providers", Some(OPS), Some(body))
            .await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
        assert_eq!(v["error"]["field"], field, "{v}");
    }
    let resp = api
        .http
        .post(format!("{}/v1/providers", api.base))
        .bearer_auth(OPS)
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);

    // Read.
    let (s, v, _) = api
        .call(Method::GET, "/v1/providers", Some(READER), None)
        .await;
    assert_eq!(s, StatusCode::OK);
    let names: Vec<&str> = v["providers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["hz", "lab"]);
    let (s, v, _) = api
        .call(Method::GET, "/v1/providers/hz", Some(READER), None)
        .await;
    assert_eq!((s, v["region"].clone()), (StatusCode::OK, json!("hel1")));
    let (s, _, _) = api
        .call(Method::GET, "/v1/providers/none", Some(READER), None)
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND);

    // Profiles: a missing provider is 422; a provider with profiles cannot be deleted (409).
    let (s, v, _) = api
        .call(
            Method::POST,
            "/v1/profiles",
            Some(OPS),
            Some(json!({"name": "cx", "provider": "nowhere", "machine_type": "cx22"})),
        )
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(v["error"]["field"], "provider");
    let (s, v, _) = api
        .call(
            Method::POST,
            "/v1/profiles",
            Some(OPS),
            Some(json!({"name": "cx", "provider": "hz", "machine_type": "cx22", "disk_gb": 0})),
        )
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(v["error"]["field"], "disk_gb");
    let (s, v, _) = api
        .call(
            Method::POST,
            "/v1/profiles",
            Some(OPS),
            Some(json!({"name": "cx", "provider": "hz", "machine_type": "cx22", "image": "ubuntu-24.04"})),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    assert_eq!(v["image"], "ubuntu-24.04");
    let (s, v, _) = api
        .call(Method::DELETE, "/v1/providers/hz", Some(OPS), None)
        .await;
    assert_eq!(s, StatusCode::CONFLICT, "{v}");
    assert_eq!(v["error"]["code"], "provider.in_use");
    assert!(v["error"]["message"].as_str().unwrap().contains("cx"));
    let (s, _, _) = api
        .call(Method::GET, "/v1/providers/hz", Some(READER), None)
        .await;
    assert_eq!(s, StatusCode::OK, "still there");
    let (s, v, _) = api
        .call(Method::GET, "/v1/profiles", Some(READER), None)
        .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["profiles"].as_array().unwrap().len(), 2);
    let (s, _, _) = api
        .call(Method::DELETE, "/v1/profiles/cx", Some(READER), None)
        .await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    let (s, _, _) = api
        .call(Method::DELETE, "/v1/profiles/cx", Some(OPS), None)
        .await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let (s, _, _) = api
        .call(Method::DELETE, "/v1/profiles/cx", Some(OPS), None)
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let (s, _, _) = api
        .call(Method::DELETE, "/v1/providers/hz", Some(OPS), None)
        .await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let (s, _, _) = api
        .call(Method::GET, "/v1/providers/hz", Some(ADMIN), None)
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND);

    // One event per write that happened, none for the refused ones, each with its actor.
    let events = w
        .rows("SELECT event, actor, outcome FROM keeper.audit_events WHERE actor <> 'test' ORDER BY id")
        .await;
    let got: Vec<(String, String)> = events
        .iter()
        .map(|e| {
            (
                e["event"].as_str().unwrap().to_string(),
                e["actor"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let want = [
        ("provider.created", "api:ops"),
        ("profile.created", "api:ops"),
        ("profile.deleted", "api:ops"),
        ("provider.deleted", "api:ops"),
    ];
    assert_eq!(
        got,
        want.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect::<Vec<_>>()
    );
    let e = w.audit("provider.deleted").await;
    assert_eq!(
        e[0]["payload"]["provider"]["credentials_ref"],
        "hetzner/prod"
    );
    w.finish().await;
}

#[tokio::test]
async fn rest_answers_mask_token_keys_but_a_step_delivers_its_tokens() {
    let Some(w) = World::new("rest_answers_mask_token_keys_but_a_step_delivers_its_tokens").await
    else {
        return;
    };
    let api = Api::start(&w).await;
    let (s, v, text) = api
        .call(
            Method::POST,
            "/v1/profiles",
            Some(OPS),
            Some(
                json!({"name": "joined", "provider": "lab", "machine_type": "amd64-small",
                        "labels": {"join-token": "lbl-secret-7", "team": "web"}}),
            ),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    assert_eq!(v["labels"]["join-token"], "***");
    assert_eq!(v["labels"]["team"], "web");
    assert!(!text.contains("lbl-secret-7"), "{text}");
    let (_, _, text) = api
        .call(Method::GET, "/v1/profiles/joined", Some(READER), None)
        .await;
    assert!(!text.contains("lbl-secret-7"), "{text}");
    let e = w.audit("profile.created").await;
    assert_eq!(
        e.last().unwrap()["payload"]["profile"]["labels"]["join-token"],
        "***"
    );

    // The step: its permission, its output with the plain tokens, nothing else plain.
    let params = json!({"provider": "lab", "profile": "joined", "count": 2});
    let (s, _, _) = api
        .call(
            Method::POST,
            "/v1/steps/core.cloud.created",
            Some(OPS),
            Some(params.clone()),
        )
        .await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    let (s, out, text) = api
        .call(
            Method::POST,
            "/v1/steps/core.cloud.created",
            Some(STEPPER),
            Some(params),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{out}");
    let hosts = out["hosts"].as_array().unwrap();
    assert_eq!(hosts.len(), 2);
    for h in hosts {
        let token = h["bootstrap_token"].as_str().unwrap();
        assert!(token.starts_with("kbt_"));
        assert_eq!(
            text.matches(token).count(),
            1,
            "once, at hosts[].bootstrap_token"
        );
        assert_eq!(h["attributes"]["labels"]["join-token"], "***");
        let hash = w
            .rows(&format!(
                "SELECT encode(t.token_sha256, 'hex') AS h FROM keeper.bootstrap_tokens t
                 JOIN keeper.souls s ON s.id = t.soul_id WHERE s.sid = '{}'",
                h["sid"].as_str().unwrap()
            ))
            .await;
        assert_eq!(hash[0]["h"], sha256_hex(token));
    }
    assert!(!text.contains("lbl-secret-7"));
    let e = w.audit("cloud.provisioned").await.pop().unwrap();
    assert_eq!(e["actor"], "api:stepper");
    let audit = e.to_string();
    for h in hosts {
        assert!(!audit.contains(h["bootstrap_token"].as_str().unwrap()));
    }
    assert!(!audit.contains("lbl-secret-7"));

    // A failed step answers with the error's status and a masked body.
    let (s, v, _) = api
        .call(
            Method::POST,
            "/v1/steps/core.cloud.created",
            Some(STEPPER),
            Some(json!({"provider": "lab", "profile": "joined", "count": 0})),
        )
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(v["error"]["field"], "count");
    let (s, v, _) = api
        .call(
            Method::POST,
            "/v1/steps/core.cloud.exploded",
            Some(STEPPER),
            Some(json!({})),
        )
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    assert_eq!(v["error"]["code"], "step.unknown");
    let ids: Vec<Value> = hosts.iter().map(|h| h["vm_id"].clone()).collect();
    let (s, v, _) = api
        .call(
            Method::POST,
            "/v1/steps/core.cloud.resized",
            Some(STEPPER),
            Some(json!({"provider": "lab", "vm_ids": ids, "machine_type": "amd64-large"})),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["hosts"][0]["caused_downtime"], true);
    let sids: Vec<Value> = hosts.iter().map(|h| h["sid"].clone()).collect();
    let (s, v, _) = api
        .call(
            Method::POST,
            "/v1/steps/core.cloud.destroyed",
            Some(STEPPER),
            Some(json!({"provider": "lab", "vm_ids": ids, "sids": sids})),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["counters"]["souls_destroyed"], 2);
    let (s, v, _) = api.call(Method::GET, "/healthz", None, None).await;
    assert_eq!((s, v), (StatusCode::OK, json!({"status": "ok"})));
    w.finish().await;
}

/// Sets its flag when dropped before its request was answered.
struct Unanswered(
    Arc<std::sync::atomic::AtomicBool>,
    Arc<tokio::sync::Notify>,
    bool,
);

impl Drop for Unanswered {
    fn drop(&mut self) {
        if !self.2 {
            self.0.store(true, Ordering::SeqCst);
            self.1.notify_one();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_finishes_when_the_client_hangs_up_in_the_middle() {
    let Some(w) = World::new("a_step_finishes_when_the_client_hangs_up_in_the_middle").await else {
        return;
    };
    w.knobs.hold_creates.store(true, Ordering::SeqCst);
    // The server tells when it dropped a request it had not answered (the client went away).
    let gone = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let gone_seen = Arc::new(tokio::sync::Notify::new());
    let (g, n) = (gone.clone(), gone_seen.clone());
    let app = keeper::api::router(w.keeper.clone(), tokens()).layer(axum::middleware::from_fn(
        move |req: axum::extract::Request, next: axum::middleware::Next| {
            let (g, n) = (g.clone(), n.clone());
            async move {
                // Declared before the request's future, so dropped after it.
                let mut guard = Unanswered(g, n, false);
                let r = next.run(req).await;
                guard.2 = true;
                r
            }
        },
    ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });

    let body =
        json!({"provider": "lab", "profile": "small", "count": 1, "name": "hangup"}).to_string();
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "POST /v1/steps/core.cloud.created HTTP/1.1\r\nHost: keeper\r\nAuthorization: Bearer {STEPPER}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(request.as_bytes()).await.unwrap();
    // The step is in the middle of its create: the client hangs up.
    w.knobs.create_entered.notified().await;
    drop(conn);
    gone_seen.notified().await;
    assert!(gone.load(Ordering::SeqCst));
    assert!(
        !w.knobs.create_dropped.load(Ordering::SeqCst),
        "the client's hang-up cancelled the step in the middle of its create"
    );
    assert_eq!(w.keeper.steps_running(), 1, "the step runs on");
    let k = w.keeper.clone();
    let finished = tokio::spawn(async move { k.steps_finished().await });
    w.knobs.create_release.notify_one();

    // The step goes on to its end: the soul, its token, the journal and the audit event.
    finished.await.unwrap();
    assert_eq!(w.keeper.steps_running(), 0);
    let e = w.audit("cloud.provisioned").await.pop().unwrap();
    assert_eq!(e["outcome"], "succeeded", "{e}");
    assert_eq!(e["actor"], "api:stepper");
    assert_eq!(
        w.count("SELECT 1 FROM keeper.souls WHERE status = 'pending' AND sid = 'hangup-1.zone-a.fake.internal'")
            .await,
        1
    );
    assert_eq!(
        w.count("SELECT 1 FROM keeper.bootstrap_tokens WHERE status = 'issued'")
            .await,
        1
    );
    assert_eq!(
        w.count("SELECT 1 FROM keeper.cloud_vms WHERE state = 'recorded'")
            .await,
        1
    );
    assert_eq!(w.machines().len(), 1);
    server.abort();
    w.finish().await;
}

#[tokio::test]
async fn each_permission_is_required_and_errors_are_masked() {
    let Some(w) = World::new("each_permission_is_required_and_errors_are_masked").await else {
        return;
    };
    let api = Api::start(&w).await;
    let forbidden = |v: &Value, permission: &str| {
        assert_eq!(v["error"]["code"], "permission.denied", "{v}");
        assert!(
            v["error"]["message"].as_str().unwrap().contains(permission),
            "{v} names {permission}"
        );
    };
    // provider.delete: the reader may read lab, not delete it.
    let (s, v, _) = api
        .call(Method::DELETE, "/v1/providers/lab", Some(READER), None)
        .await;
    assert_eq!(s, StatusCode::FORBIDDEN, "{v}");
    forbidden(&v, "provider.delete");
    // profile.create
    let (s, v, _) = api
        .call(
            Method::POST,
            "/v1/profiles",
            Some(READER),
            Some(json!({"name": "big", "provider": "lab", "machine_type": "amd64-large"})),
        )
        .await;
    assert_eq!(s, StatusCode::FORBIDDEN, "{v}");
    forbidden(&v, "profile.create");
    // profile.read: providers yes, profiles no.
    let (s, _, _) = api
        .call(Method::GET, "/v1/providers", Some(LISTER), None)
        .await;
    assert_eq!(s, StatusCode::OK);
    for path in ["/v1/profiles", "/v1/profiles/small"] {
        let (s, v, _) = api.call(Method::GET, path, Some(LISTER), None).await;
        assert_eq!(s, StatusCode::FORBIDDEN, "{path}: {v}");
        forbidden(&v, "profile.read");
    }
    // Nothing was changed by the refused calls.
    let (s, _, _) = api
        .call(Method::GET, "/v1/providers/lab", Some(READER), None)
        .await;
    assert_eq!(s, StatusCode::OK);
    let (s, _, _) = api
        .call(Method::GET, "/v1/profiles/big", Some(READER), None)
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    assert_eq!(
        w.count("SELECT 1 FROM keeper.audit_events WHERE actor LIKE 'api:%'")
            .await,
        0
    );

    // An error whose message would quote a token: the value is masked in the answer.
    let (s, v, text) = api
        .call(
            Method::POST,
            "/v1/providers",
            Some(OPS),
            Some(
                json!({"name": "api_token=s3cret-provider-value", "driver": "fake",
                        "credentials_ref": "fake/lab", "region": "zone-a"}),
            ),
        )
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    assert_eq!(v["error"]["field"], "name");
    assert!(!text.contains("s3cret-provider-value"), "{text}");
    assert!(text.contains("***"), "{text}");
    let (s, v, text) = api
        .call(
            Method::POST,
            "/v1/profiles",
            Some(OPS),
            Some(
                json!({"name": "leaky", "provider": "lab", "machine_type": "amd64-small",
                        "labels": {"join-token": "S3cret Label Value!"}}),
            ),
        )
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    assert!(!text.contains("S3cret Label Value!"), "{text}");
    assert!(
        text.contains(r#"got \"***\""#),
        "the value is quoted, masked: {text}"
    );
    let (s, v, text) = api
        .call(
            Method::POST,
            "/v1/steps/core.cloud.created",
            Some(STEPPER),
            Some(
                json!({"provider": "lab", "profile": {"machine_type": "amd64-small",
                        "labels": {"join-token": "S3cret Step Value!"}}}),
            ),
        )
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    assert!(!text.contains("S3cret Step Value!"), "{text}");
    assert!(
        text.contains(r#"got \"***\""#),
        "the value is quoted, masked: {text}"
    );
    let e = w.audit("cloud.provisioned").await.pop().unwrap();
    assert!(!e.to_string().contains("S3cret Step Value!"), "{e}");
    w.finish().await;
}

#[tokio::test]
async fn a_method_not_allowed_answers_the_json_error_every_error_has() {
    let Some(w) = World::new("a_method_not_allowed_answers_the_json_error_every_error_has").await
    else {
        return;
    };
    let api = Api::start(&w).await;
    for (method, path) in [
        (Method::PUT, "/v1/providers"),
        (Method::PATCH, "/v1/profiles/small"),
        (Method::GET, "/v1/steps/core.cloud.created"),
        (Method::POST, "/healthz"),
    ] {
        let (s, v, text) = api.call(method.clone(), path, Some(ADMIN), None).await;
        assert_eq!(s, StatusCode::METHOD_NOT_ALLOWED, "{method} {path}: {text}");
        assert_eq!(
            v["error"]["code"], "method.not_allowed",
            "{method} {path}: {text}"
        );
        let message = v["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(method.as_str()), "{message}");
    }
    // A path with no route stays a 404 of the same shape.
    let (s, v, _) = api
        .call(Method::GET, "/v1/nothing", Some(ADMIN), None)
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    assert_eq!(v["error"]["code"], "route.not_found");
    w.finish().await;
}

/// A caller without a known token learns nothing of the routes: an unknown path, a method a path
/// does not take and a step name that is not UTF-8 are each 401 (routing's 404 or 405 would tell
/// which routes exist); with a token they keep their 404 and 405. Only `GET /healthz` is open.
#[tokio::test]
async fn an_unauthenticated_caller_gets_401_before_routing_answers_404_or_405() {
    let Some(w) =
        World::new("an_unauthenticated_caller_gets_401_before_routing_answers_404_or_405").await
    else {
        return;
    };
    let api = Api::start(&w).await;
    let cases = [
        (Method::GET, "/v1/nothing", StatusCode::NOT_FOUND),
        (
            Method::DELETE,
            "/v1/providers/lab/more",
            StatusCode::NOT_FOUND,
        ),
        (Method::PUT, "/v1/providers", StatusCode::METHOD_NOT_ALLOWED),
        (
            Method::PATCH,
            "/v1/profiles/small",
            StatusCode::METHOD_NOT_ALLOWED,
        ),
        (
            Method::GET,
            "/v1/steps/core.cloud.created",
            StatusCode::METHOD_NOT_ALLOWED,
        ),
        (Method::POST, "/healthz", StatusCode::METHOD_NOT_ALLOWED),
    ];
    for (method, path, with_token) in cases {
        for token in [None, Some("t-unknown-0123456789")] {
            let mut req = api
                .http
                .request(method.clone(), format!("{}{path}", api.base));
            if let Some(t) = token {
                req = req.bearer_auth(t);
            }
            let resp = req.send().await.unwrap();
            let status = resp.status();
            let challenge = resp.headers().get("www-authenticate").cloned();
            let text = resp.text().await.unwrap();
            assert_eq!(status, StatusCode::UNAUTHORIZED, "{method} {path}: {text}");
            assert_eq!(
                challenge.as_ref().and_then(|v| v.to_str().ok()),
                Some("Bearer"),
                "{method} {path}"
            );
            let v: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(
                v["error"]["code"], "unauthenticated",
                "{method} {path}: {text}"
            );
        }
        let (s, _, text) = api.call(method.clone(), path, Some(ADMIN), None).await;
        assert_eq!(s, with_token, "{method} {path} with a token: {text}");
    }
    // A step name that is not UTF-8, sent unnormalised.
    let (status, v) = raw_request(&api, "POST", "/v1/steps/%FF", None, b"").await;
    assert_eq!(status, 401, "{v}");
    assert_eq!(v["error"]["code"], "unauthenticated", "{v}");
    let (status, v) = raw_request(&api, "POST", "/v1/steps/%FF", Some(ADMIN), b"").await;
    assert_eq!(status, 404, "{v}");
    // The health check stays open.
    let (s, v, _) = api.call(Method::GET, "/healthz", None, None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    w.finish().await;
}

/// Sends `method target` as written (no client normalises it) and answers the status and body.
async fn raw(api: &Api, method: &str, target: &str) -> (u16, Value) {
    raw_request(api, method, target, Some(ADMIN), b"").await
}

/// Sends `method target` as written, with `token` (none: no Authorization header) and `body`, and
/// answers the status and body.
async fn raw_request(
    api: &Api,
    method: &str,
    target: &str,
    token: Option<&str>,
    body: &[u8],
) -> (u16, Value) {
    use tokio::io::AsyncReadExt;
    let addr = api.base.trim_start_matches("http://");
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let length = if body.is_empty() {
        String::new()
    } else {
        format!("Content-Length: {}\r\n", body.len())
    };
    let request = format!(
        "{method} {target} HTTP/1.1\r\nHost: keeper\r\n{auth}{length}Connection: close\r\n\r\n"
    );
    conn.write_all(request.as_bytes()).await.unwrap();
    conn.write_all(body).await.unwrap();
    let mut answer = String::new();
    conn.read_to_string(&mut answer).await.unwrap();
    let status = answer[9..12].parse().unwrap();
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or_default();
    // The body may come chunked: its JSON object is between the first '{' and the last '}'.
    let json = match (body.find('{'), body.rfind('}')) {
        (Some(a), Some(b)) => serde_json::from_str(&body[a..=b]).unwrap_or(Value::Null),
        _ => Value::Null,
    };
    (status, json)
}

#[tokio::test]
async fn a_name_in_a_path_cannot_reach_another_resource() {
    let Some(w) = World::new("a_name_in_a_path_cannot_reach_another_resource").await else {
        return;
    };
    let api = Api::start(&w).await;
    for collection in ["providers", "profiles"] {
        for name in [
            "..",
            ".",
            "%2e%2e",
            "lab%2F..%2F..%2Fprofiles",
            "..%2Fprofiles%2Fsmall",
            "small%2F",
            "lab%00",
            "%252e%252e",
            "%ff",
        ] {
            for method in ["GET", "DELETE"] {
                let target = format!("/v1/{collection}/{name}");
                let (status, v) = raw(&api, method, &target).await;
                assert_eq!(status, 422, "{method} {target}: {v}");
                assert_eq!(v["error"]["field"], "name", "{method} {target}: {v}");
            }
        }
    }
    // A path of more segments is no route at all.
    let (status, v) = raw(&api, "DELETE", "/v1/providers/../profiles/small").await;
    assert_eq!(status, 404, "{v}");
    assert_eq!(v["error"]["code"], "route.not_found");
    // Nothing was read or deleted through them.
    assert_eq!(
        w.count("SELECT 1 FROM keeper.cloud_providers WHERE name = 'lab'")
            .await,
        1
    );
    assert_eq!(
        w.count("SELECT 1 FROM keeper.cloud_profiles WHERE name = 'small'")
            .await,
        1
    );
    assert_eq!(
        w.count("SELECT 1 FROM keeper.audit_events WHERE event LIKE '%.deleted'")
            .await,
        0
    );
    w.finish().await;
}

#[tokio::test]
async fn a_bad_step_path_or_a_body_too_large_answers_json_after_authentication() {
    let Some(w) =
        World::new("a_bad_step_path_or_a_body_too_large_answers_json_after_authentication").await
    else {
        return;
    };
    let api = Api::start(&w).await;
    // A step name that is not UTF-8: no token is 401, a token gets the JSON error.
    let (status, v) = raw_request(&api, "POST", "/v1/steps/%FF", None, b"").await;
    assert_eq!(status, 401, "{v}");
    assert_eq!(v["error"]["code"], "unauthenticated", "{v}");
    let (status, v) = raw_request(&api, "POST", "/v1/steps/%FF", Some(ADMIN), b"").await;
    assert_eq!(status, 404, "{v}");
    assert_eq!(v["error"]["code"], "step.unknown", "{v}");
    // A body one byte over the limit (sent whole, so the server reads it all).
    let big = vec![b' '; 2 * 1024 * 1024 + 1];
    for path in [
        "/v1/providers",
        "/v1/profiles",
        "/v1/steps/core.cloud.created",
    ] {
        let (status, v) = raw_request(&api, "POST", path, None, &big).await;
        assert_eq!(status, 401, "{path}: {v}");
        assert_eq!(v["error"]["code"], "unauthenticated", "{path}: {v}");
        let (status, v) = raw_request(&api, "POST", path, Some(ADMIN), &big).await;
        assert_eq!(status, 413, "{path}: {v}");
        assert_eq!(v["error"]["code"], "body.too_large", "{path}: {v}");
        assert_eq!(v["error"]["field"], "body", "{path}: {v}");
    }
    assert_eq!(
        w.count("SELECT 1 FROM keeper.audit_events WHERE event LIKE 'cloud.%'")
            .await,
        0,
        "no step ran"
    );
    w.finish().await;
}

/// A caller without a token is answered before its body is read: a request that announces a body
/// and never sends it gets its 401 at once (keeper does not hold a connection, nor read up to the
/// body limit, for a caller it does not know).
#[tokio::test]
async fn an_unauthenticated_request_is_answered_without_reading_its_body() {
    use tokio::io::AsyncReadExt;
    let Some(w) =
        World::new("an_unauthenticated_request_is_answered_without_reading_its_body").await
    else {
        return;
    };
    let api = Api::start(&w).await;
    for path in ["/v1/providers", "/v1/steps/core.cloud.created"] {
        let addr = api.base.trim_start_matches("http://");
        let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: keeper\r\nContent-Length: 1000000\r\nConnection: close\r\n\r\n"
        );
        conn.write_all(head.as_bytes()).await.unwrap();
        // The body is never sent: only an answer that does not wait for it arrives.
        let mut answer = vec![0u8; 12];
        let read = tokio::time::timeout(
            std::time::Duration::from_secs(30),
            conn.read_exact(&mut answer),
        )
        .await;
        assert!(
            read.is_ok(),
            "{path}: no answer while the body was not sent"
        );
        assert_eq!(&answer[9..12], b"401", "{path}");
    }
    w.finish().await;
}
