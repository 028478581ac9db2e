//! Traces of the driver carry no key, token or user data, and every call span is filled as the kit
//! defines it. Each test runs alone in a process of its own: tracing caches callsite interest
//! process-wide, so a test that installs a subscriber must not share a process with others.

use orca_fakes::gce::{FakeGce, NETWORK, PROJECT, SUBNET, TEST_ONLY_RSA_KEY_PEM, ZONE};
use orca_fakes::traces::{Captured, call_spans};
use orca_fakes::{Fault, Rule};
use orca_gce::{Config, GceProvider};
use orca_machines::{MachineSpec, Provider, RetryPolicy};
use reqwest::Method;
use serde_json::json;

async fn provider(fake: &FakeGce, owner: &str) -> GceProvider {
    let config = Config::builder()
        .project(PROJECT)
        .zone(ZONE)
        .network(NETWORK)
        .subnet(SUBNET)
        .credentials_json(fake.service_account_json())
        .endpoint(fake.endpoint())
        .retry(RetryPolicy::fast())
        .build()
        .unwrap();
    GceProvider::new(config, owner).await.unwrap()
}

#[test]
fn traces_carry_no_key_no_token_and_no_user_data() {
    orca_fakes::alone::run_alone(
        module_path!(),
        "traces_carry_no_key_no_token_and_no_user_data_alone",
        &[],
        &[],
    );
}

/// The test itself, run alone in a process of its own: its subscriber is its thread's, but tracing
/// keeps what each call site is interested in process-wide, and another test's first pass through a
/// call site can leave it uninterested while this subscriber is being set.
#[tokio::test]
#[ignore = "runs alone, started by the test of the same name without _alone"]
async fn traces_carry_no_key_no_token_and_no_user_data_alone() {
    orca_fakes::alone::assert_alone(
        module_path!(),
        "traces_carry_no_key_no_token_and_no_user_data_alone",
    );
    let fake = FakeGce::start().await.unwrap();
    let (captured, _guard) = Captured::install(false);
    let p = provider(&fake, "stack-1").await;
    let spec = MachineSpec::new("vm-t", "e2-small", ZONE, "lab").with_user_data("password=hunter2");
    p.create(&spec).await.unwrap();
    fake.control().inject(Rule::new(
        Some(Method::GET),
        "/instances?",
        Fault::Status {
            status: 503,
            body: json!({"error": {"code": 503, "message": "backend", "errors": [{"reason": "backendError", "domain": "global", "message": "backend"}]}}),
            headers: vec![],
        },
        1,
    ));
    p.machines("lab").await.unwrap();
    p.delete("vm-t").await.unwrap();
    drop(_guard);
    let text = captured.text();
    assert!(
        text.contains("orca.call") && text.contains("provider=\"gce\""),
        "spans were traced: {text}"
    );
    assert!(
        text.contains("instances.insert") && text.contains("request_id"),
        "{text}"
    );
    let key_line = TEST_ONLY_RSA_KEY_PEM.lines().nth(3).unwrap();
    for secret in [key_line, "ya29.fake-", "hunter2", "PRIVATE KEY"] {
        assert!(!text.contains(secret), "{secret} appeared in the traces");
    }
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
#[tokio::test]
#[ignore = "runs alone, started by the test of the same name without _alone"]
async fn every_call_span_has_the_kit_fields_alone() {
    orca_fakes::alone::assert_alone(module_path!(), "every_call_span_has_the_kit_fields_alone");
    let fake = FakeGce::start().await.unwrap();
    let (captured, _guard) = Captured::install(true);
    let p = provider(&fake, "stack-1").await;
    p.create(&MachineSpec::new("vm-s", "e2-small", ZONE, "lab"))
        .await
        .unwrap();
    // One passing failure: the second attempt is retry 1.
    fake.control().inject(Rule::new(
        Some(Method::GET),
        "/instances?",
        Fault::Status {
            status: 503,
            body: json!({"error": {"code": 503, "message": "backend", "errors": [{"reason": "backendError", "domain": "global", "message": "backend"}]}}),
            headers: vec![],
        },
        1,
    ));
    p.machines("lab").await.unwrap();
    drop(_guard);
    let logs = captured.text();
    let path = format!("projects/{PROJECT}/zones/{ZONE}/instances");
    let lists = call_spans(&logs, "instances.list");
    assert_eq!(lists.len(), 2, "{logs}");
    for (span, (retry, status)) in lists.iter().zip([(0, 503), (1, 200)]) {
        for field in [
            "provider=\"gce\"".to_string(),
            format!("retry={retry}"),
            "method=\"GET\"".to_string(),
            format!("path=\"{path}\""),
            format!("status={status}"),
            "duration_ms=".to_string(),
            "waited_ms=".to_string(),
        ] {
            assert!(span.contains(&field), "{field} not in {span}");
        }
    }
    let inserts = call_spans(&logs, "instances.insert");
    assert_eq!(inserts.len(), 1, "{logs}");
    for field in [
        "retry=0",
        "method=\"POST\"",
        "status=200",
        "request_id=",
        "duration_ms=",
    ] {
        assert!(inserts[0].contains(field), "{field} not in {}", inserts[0]);
    }
}
