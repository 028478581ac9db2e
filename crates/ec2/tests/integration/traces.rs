//! Traces and secrets: the secret key and user data in no Debug, error or trace, at every level, and
//! every call span filled as the kit defines it. Each test runs alone in a process of its own: each
//! installs its subscriber as the thread's default, and tests without one running beside it on other threads made
//! `tracing`'s callsite interest race, so that its spans were sometimes not recorded at all.

use crate::common;

use common::{Fault, ec2_error, env, made, rule};
use orca_fakes::traces::{Captured, call_spans};
use orca_machines::Provider;

#[test]
fn secrets_never_show() {
    orca_fakes::alone::run_alone(module_path!(), "secrets_never_show_alone", &[], &[]);
}

/// The test itself, run alone in a process of its own: its subscriber is its thread's, but tracing
/// keeps what each call site is interested in process-wide, and another test's first pass through a
/// call site can leave it uninterested while this subscriber is being set.
#[tokio::test]
#[ignore = "runs alone, started by the test of the same name without _alone"]
async fn secrets_never_show_alone() {
    orca_fakes::alone::assert_alone(module_path!(), "secrets_never_show_alone");
    let Some(e) = env("secrets_never_show").await else {
        return;
    };
    // Everything logged while this test runs (on this thread: a current-thread runtime), at every level.
    let (logs, _guard) = Captured::install(false);

    let p = e.provider("owner-1").await;
    let shown = format!("{p:?} {:?}", e.builder());
    assert!(!shown.contains(common::SECRET), "{shown}");
    let user_data = format!("password={}", common::SECRET);
    let spec = e.spec("sec-1").with_user_data(&user_data);
    assert!(!format!("{spec:?}").contains(common::SECRET));
    e.proxy.inject(rule(
        "RunInstances",
        ec2_error(400, "InvalidParameterValue"),
        1,
    ));
    let err = p.create(&spec).await.unwrap_err();
    assert!(
        !format!("{err} {err:?}").contains(common::SECRET),
        "{err:?}"
    );
    e.proxy.inject(rule("RunInstances", Fault::DropAnswer, 1));
    let m = made(p.create(&spec).await.unwrap());
    assert!(p.delete(&m.id).await.unwrap());

    let logs = logs.text();
    assert!(
        logs.contains("orca.call") && logs.contains("RunInstances"),
        "the calls were traced"
    );
    let encoded = aws_smithy_types::base64::encode(user_data.as_bytes());
    for secret in [common::SECRET, encoded.as_str()] {
        assert!(!logs.contains(secret), "a secret was logged");
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
    let Some(e) = env("every_call_span_has_the_kit_fields").await else {
        return;
    };
    let (logs, _guard) = Captured::install(true);
    let p = e.provider("owner-1").await;
    // One passing failure: the second attempt is retry 1.
    e.proxy
        .inject(rule("DescribeInstances", ec2_error(503, "Unavailable"), 1));
    p.machines("lab").await.unwrap();
    let logs = logs.text();
    let spans = call_spans(&logs, "DescribeInstances");
    assert_eq!(spans.len(), 2, "{logs}");
    for (span, (retry, status)) in spans.iter().zip([(0, 503), (1, 200)]) {
        for field in [
            "provider=\"ec2\"".to_string(),
            format!("retry={retry}"),
            "method=\"POST\"".to_string(),
            "path=\"/\"".to_string(),
            format!("status={status}"),
            // request_id too where EC2 names one (moto's answers carry none the SDK reads).
            "duration_ms=".to_string(),
        ] {
            assert!(span.contains(&field), "{field} not in {span}");
        }
    }
}
