//! A shed name is one path segment: a name that would reach another shed through dot segments or a
//! slash is refused by the CLI before it sends anything, and by the server if it arrives encoded.

use serde_json::Value;
use shed::Status;

use crate::http::{cli, http, serve};
use crate::support::{Call, Env};

/// Names that resolve to the shed `victim` when pasted into a URL path.
const ESCAPES: [&str; 4] = ["zz/../victim", "nope/../victim", "../victim", "victim/."];

fn refused_before_sending(name: &str, code: i32, err: &str) {
    assert_eq!(code, 2, "{name}: {err}");
    assert!(
        err.contains("INVALID_REQUEST") || err.contains("name:"),
        "{name}: {err}"
    );
    assert!(err.contains("nothing was sent"), "{name}: {err}");
}

#[tokio::test]
async fn stop_refuses_a_name_that_would_reach_another_shed() {
    let env = Env::new().await;
    let base = serve(&env).await;
    env.running("victim").await;
    for name in ESCAPES {
        let (code, _, err) = cli(&base, &["stop", name]).await;
        refused_before_sending(name, code, &err);
    }
    assert_eq!(env.wrapped.entered(Call::Stop), 0);
    assert_eq!(env.view("victim").unwrap().status, Status::Running);
}

#[tokio::test]
async fn start_refuses_a_name_that_would_reach_another_shed() {
    let env = Env::new().await;
    let base = serve(&env).await;
    env.running("victim").await;
    let (code, _, err) = cli(&base, &["stop", "victim"]).await;
    assert_eq!(code, 0, "{err}");
    for name in ESCAPES {
        let (code, _, err) = cli(&base, &["start", name]).await;
        refused_before_sending(name, code, &err);
    }
    assert_eq!(env.wrapped.entered(Call::Start), 0);
    assert_eq!(env.view("victim").unwrap().status, Status::Stopped);
}

#[tokio::test]
async fn delete_refuses_a_name_that_would_reach_another_shed() {
    let env = Env::new().await;
    let base = serve(&env).await;
    env.running("victim").await;
    for name in ESCAPES {
        let (code, _, err) = cli(&base, &["delete", name]).await;
        refused_before_sending(name, code, &err);
    }
    assert_eq!(env.wrapped.entered(Call::Delete), 0);
    assert!(env.view("victim").is_some());
    assert!(env.backend.markers().is_empty());
}

#[tokio::test]
async fn create_refuses_an_invalid_name_before_sending_anything() {
    let env = Env::new().await;
    let base = serve(&env).await;
    for name in ESCAPES.into_iter().chain(["Dev", "a b", ""]) {
        let (code, _, err) = cli(&base, &["create", name]).await;
        refused_before_sending(name, code, &err);
    }
    assert!(env.backend.records().is_empty());
    assert!(!env.log_has("create accepted"));
}

#[tokio::test]
async fn the_server_refuses_an_encoded_name_on_every_route_that_takes_one() {
    let env = Env::new().await;
    let base = serve(&env).await;
    env.running("victim").await;
    let c = http();
    for (method, tail) in [
        ("GET", ""),
        ("DELETE", ""),
        ("POST", "/stop"),
        ("POST", "/start"),
        ("POST", "/exec"),
        ("GET", "/connect"),
    ] {
        for encoded in ["zz%2F..%2Fvictim", "%2E%2E%2Fvictim", "victim%2F"] {
            let url = format!("{base}/api/sheds/{encoded}{tail}");
            let r = c
                .request(method.parse().unwrap(), &url)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 400, "{method} {url}");
            let e: Value = r.json().await.unwrap();
            assert_eq!(e["code"], "INVALID_REQUEST", "{method} {url}");
            assert!(e["message"].as_str().unwrap().starts_with("name:"), "{e}");
        }
    }
    assert_eq!(env.view("victim").unwrap().status, Status::Running);
    assert_eq!(env.wrapped.entered(Call::Stop), 0);
    assert!(env.backend.markers().is_empty());
}
