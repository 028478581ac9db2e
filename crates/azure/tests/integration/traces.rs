//! A traced run (every level, every crate) shows a span per Resource Manager call with its request id,
//! and never the token, the client secret or the user data. Each test runs alone in a process of its own:
//! tracing caches callsite interest process-wide, so a test that installs a subscriber must not
//! share a process with others.

use crate::common;

use common::*;
use orca_fakes::azure::{RESOURCE_GROUP, SUBSCRIPTION, TOKEN};
use orca_fakes::traces::{call_spans, every_call_span, Captured};
use orca_fakes::{Fault, Rule};
use orca_machines::{MachineSpec, Provider};

#[test]
fn traces_name_calls_and_hide_secrets() {
    orca_fakes::alone::run_alone(
        module_path!(),
        "traces_name_calls_and_hide_secrets_alone",
        &[],
        &[],
    );
}

/// The test itself, run alone in a process of its own: its subscriber is its thread's, but tracing
/// keeps what each call site is interested in process-wide, and another test's first pass through a
/// call site can leave it uninterested while this subscriber is being set.
#[tokio::test]
#[ignore = "runs alone, started by the test of the same name without _alone"]
async fn traces_name_calls_and_hide_secrets_alone() {
    orca_fakes::alone::assert_alone(module_path!(), "traces_name_calls_and_hide_secrets_alone");
    let (buf, _guard) = Captured::install(true);

    let f = fake().await;
    let p = provider(&f, "stack-1").await;
    let user_data = "#cloud-config\nwrite_files: [{path: /etc/k, content: user-data-secret-42}]\n";
    let m = p
        .create(&MachineSpec::new("vm-t", AMD, LOCATION, "lab").with_user_data(user_data))
        .await
        .unwrap()
        .machine()
        .unwrap();
    p.machines("lab").await.unwrap();
    p.delete(&m.id).await.unwrap();
    let e = orca_azure::AzureProvider::new(
        settings(&f)
            .credential(orca_azure::Credential::ClientSecret {
                tenant_id: "72f988bf-86f1-41af-91ab-2d7cd011db47".into(),
                client_id: "app".into(),
                secret: "client-secret-hunter2".to_string().into(),
            })
            .build()
            .unwrap(),
        "stack-1",
    )
    .await
    .unwrap();
    tracing::info!(provider = ?e, "built");

    let text = buf.text();
    assert!(
        text.contains("orca.call") && text.contains("provider=\"azure\""),
        "no span per call:\n{text}"
    );
    assert!(
        text.contains("request_id=\"fake-"),
        "no request id:\n{text}"
    );
    assert!(text.contains("operation=\"create VM vm-t\""), "{text}");
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD.encode(user_data);
    for secret in [
        TOKEN,
        "client-secret-hunter2",
        "user-data-secret-42",
        b64.as_str(),
    ] {
        assert!(!text.contains(secret), "{secret} in the trace");
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
    let (buf, _guard) = Captured::install(true);

    let f = fake().await;
    let p = provider(&f, "stack-1").await;
    p.create(&MachineSpec::new("vm-s", AMD, LOCATION, "lab"))
        .await
        .unwrap();
    // One passing failure: the second attempt is retry 1.
    f.control().inject(Rule::new(
        Some("GET".parse().unwrap()),
        "Microsoft.Compute/virtualMachines?",
        Fault::Status {
            status: 503,
            body: serde_json::json!({"error": {"code": "ServiceUnavailable", "message": "try later"}}),
            headers: vec![],
        },
        1,
    ));
    p.machines("lab").await.unwrap();
    p.hourly_price(AMD, LOCATION).await.ok();
    drop(_guard);
    let logs = buf.text();

    let rg = format!("/subscriptions/{SUBSCRIPTION}/resourceGroups/{RESOURCE_GROUP}");
    let lists = call_spans(&logs, "list VMs");
    assert_eq!(lists.len(), 2, "{logs}");
    for (span, (retry, status)) in lists.iter().zip([(0, 503), (1, 200)]) {
        for field in [
            "provider=\"azure\"".to_string(),
            format!("retry={retry}"),
            "method=\"GET\"".to_string(),
            format!("path=\"{rg}/providers/Microsoft.Compute/virtualMachines\""),
            format!("status={status}"),
            "duration_ms=".to_string(),
            "waited_ms=".to_string(),
        ] {
            assert!(span.contains(&field), "{field} not in {span}");
        }
    }
    assert!(lists[1].contains("request_id=\"fake-"), "{}", lists[1]);
    let puts = call_spans(&logs, "create VM vm-s");
    assert_eq!(puts.len(), 1, "{logs}");
    for field in [
        "retry=0".to_string(),
        "method=\"PUT\"".to_string(),
        format!("path=\"{rg}/providers/Microsoft.Compute/virtualMachines/vm-s\""),
        "status=20".to_string(),
        "request_id=\"fake-".to_string(),
        "duration_ms=".to_string(),
        "waited_ms=".to_string(),
    ] {
        assert!(puts[0].contains(&field), "{field} not in {}", puts[0]);
    }
    // Every call span, the operation polls and the price reads included, has the kit's fields.
    let all = every_call_span(&logs);
    assert!(all.iter().any(|l| l.contains("(poll)")), "{logs}");
    assert!(all.iter().any(|l| l.contains("retail prices")), "{logs}");
    for span in all {
        for field in [
            "retry=",
            "method=",
            "path=\"/",
            "status=",
            "duration_ms=",
            "waited_ms=",
        ] {
            assert!(span.contains(field), "{field} not in {span}");
        }
    }
}
