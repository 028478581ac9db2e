//! Traces and secrets: the token in no Debug, error or trace, at every level, and every call's span
//! filled as the kit defines it. Each test runs alone in a process of its own: each installs a
//! subscriber, and tracing caches callsite interest process-wide, so tests without one must not share
//! the process.

use crate::common;

use orca_fakes::hetzner::FakeHetzner;
use orca_fakes::traces::{call_spans, Captured};
use orca_hetzner::{Config, HetznerProvider};
use orca_machines::{Error, MachineSpec, Provider, RetryPolicy};

const SECRET: &str = "hz-SECRET-token-0123456789abcdef";

fn spec(name: &str, t: &str, loc: &str, pool: &str) -> MachineSpec {
    MachineSpec::new(name, t, loc, pool).with_user_data("#cloud-config\nruncmd: [echo hi]\n")
}

#[test]
fn the_token_is_redacted_everywhere() {
    orca_fakes::alone::run_alone(
        module_path!(),
        "the_token_is_redacted_everywhere_alone",
        &[],
        &[],
    );
}

/// The test itself, run alone in a process of its own: its subscriber is its thread's, but tracing
/// keeps what each call site is interested in process-wide, and another test's first pass through a
/// call site can leave it uninterested while this subscriber is being set.
#[tokio::test(flavor = "current_thread")]
#[ignore = "runs alone, started by the test of the same name without _alone"]
async fn the_token_is_redacted_everywhere_alone() {
    orca_fakes::alone::assert_alone(module_path!(), "the_token_is_redacted_everywhere_alone");
    // Every span and event at every level, into a buffer (this test runs on one thread).
    let (captured, _guard) = Captured::install(true);
    let fake = FakeHetzner::start().await.unwrap();
    let config = Config::builder()
        .token(SECRET)
        .endpoint(fake.url())
        .retry(RetryPolicy::fast())
        .build()
        .unwrap();
    let p = HetznerProvider::new(config.clone(), "me").await.unwrap();
    let mut shown = vec![
        format!("{config:?}"),
        format!("{p:?}"),
        format!("{:?}", Config::builder().token(SECRET)),
    ];
    // The fake accepts another token: a 401, with Hetzner's words and not the token.
    let e = p.machines("lab").await.unwrap_err();
    assert!(matches!(e, Error::Unauthenticated { .. }), "{e:?}");
    assert!(e.to_string().contains("unauthorized"), "{e}");
    shown.push(format!("{e} {e:?}"));
    let e = p
        .create(&spec("t1", "cx23", "fsn1", "lab"))
        .await
        .unwrap_err();
    shown.push(format!("{e} {e:?}"));
    // A transport failure (nothing listens there).
    let closed = Config::builder()
        .token(SECRET)
        .endpoint("http://127.0.0.1:9/v1")
        .retry(RetryPolicy::NEVER)
        .build()
        .unwrap();
    let e = HetznerProvider::new(closed, "me")
        .await
        .unwrap()
        .machines("lab")
        .await
        .unwrap_err();
    assert!(e.is_retryable(), "{e:?}");
    shown.push(format!("{e} {e:?}"));
    // A settings error about a bad token value.
    let e = Config::builder()
        .token(format!("{SECRET} with space"))
        .build()
        .unwrap_err();
    shown.push(format!("{e} {e:?}"));
    let logs = captured.text();
    assert!(
        logs.contains("orca.call") && logs.contains("provider=\"hetzner\""),
        "the calls were traced: {logs}"
    );
    assert!(logs.contains("operation=\"servers.list\""), "{logs}");
    shown.push(logs);
    for s in &shown {
        assert!(!s.contains(SECRET), "the token leaked: {s}");
        assert!(!s.contains("SECRET-token"), "part of the token leaked: {s}");
    }
    // The token did travel, as a bearer header, to the fake.
    assert!(fake.control().requests() >= 2);
}

#[test]
fn every_call_span_has_the_kit_fields() {
    orca_fakes::alone::run_alone(
        module_path!(),
        "every_call_span_has_the_kit_fields_alone",
        &[],
        &[],
    );
}

/// The test itself, run alone in a process of its own: its subscriber is its thread's, but tracing
/// keeps what each call site is interested in process-wide, and another test's first pass through a
/// call site can leave it uninterested while this subscriber is being set.
#[tokio::test(flavor = "current_thread")]
#[ignore = "runs alone, started by the test of the same name without _alone"]
async fn every_call_span_has_the_kit_fields_alone() {
    orca_fakes::alone::assert_alone(module_path!(), "every_call_span_has_the_kit_fields_alone");
    let (captured, _guard) = Captured::install(true);
    let fake = FakeHetzner::start().await.unwrap();
    let p = common::provider(&fake, "me").await;
    p.machines("lab").await.unwrap();
    // One passing failure: the second attempt is retry 1.
    fake.control().inject(orca_fakes::Rule::new(
        Some(axum::http::Method::GET),
        "/v1/servers",
        orca_fakes::Fault::Status {
            status: 503,
            body: serde_json::json!({"error": {"code": "unavailable", "message": "busy", "details": {}}}),
            headers: vec![],
        },
        1,
    ));
    p.machines("lab").await.unwrap();
    let logs = captured.text();
    let spans = call_spans(&logs, "servers.list");
    assert_eq!(spans.len(), 3, "{logs}");
    for (span, (retry, status)) in spans.iter().zip([(0, 200), (0, 503), (1, 200)]) {
        for field in [
            "provider=\"hetzner\"".to_string(),
            format!("retry={retry}"),
            "method=\"GET\"".to_string(),
            "path=\"/servers\"".to_string(),
            format!("status={status}"),
            "duration_ms=".to_string(),
            "waited_ms=".to_string(),
        ] {
            assert!(span.contains(&field), "{field} not in {span}");
        }
    }
}

/// Hetzner's rate-limit answer names the token it counts by its first half: the error says no
/// more of it than that it was there, in its words, its Debug and the cloud's error kept as its
/// source.
#[tokio::test]
async fn a_rate_limit_answer_naming_half_the_token_shows_none_of_it() {
    // A token of a real one's length (64 characters).
    let token = "Hz7qLm2Vx9Rt4Kp8Wn3Bc6Yd1Fg5Js0Ae7Ui2Oo9Pl4Mk8Nj3Hb6Gv1Cx5Zs0Qw".to_string();
    let fake = FakeHetzner::start_with(orca_fakes::hetzner::Options {
        token: token.clone(),
        ..Default::default()
    })
    .await
    .unwrap();
    let config = Config::builder()
        .token(token.clone())
        .endpoint(fake.url())
        .retry(RetryPolicy::NEVER)
        .build()
        .unwrap();
    fake.set_rate_limit(1, 0.0);
    let p = HetznerProvider::new(config.clone(), "me").await.unwrap();
    p.machines("lab").await.unwrap();
    // A provider of its own, which has not learnt the bucket is empty, asks at once.
    let fresh = HetznerProvider::new(config, "me").await.unwrap();
    let e = fresh.machines("lab").await.unwrap_err();
    assert!(matches!(e, Error::Throttled { .. }), "{e:?}");
    let source = std::error::Error::source(&e).map(|s| format!("{s} {s:?}"));
    let shown = format!("{e} {e:?} {source:?}");
    assert!(
        shown.contains("for token '"),
        "Hetzner's words are kept: {shown}"
    );
    for run in token
        .as_bytes()
        .windows(orca_machines::kit::SHORTEST_SECRET_RUN)
    {
        let run = std::str::from_utf8(run).unwrap();
        assert!(
            !shown.contains(run),
            "part of the token ({run}) shows: {shown}"
        );
    }
}
