//! Errors crossing from a plugin's driver to the host keep everything a caller decides on: the
//! kind, the retry meaning, the cloud's code, the operation, the retries, whether an attempt may
//! have acted, and what a failed create's clean-up could not remove (which the host removes with
//! `delete_named` of the name).

use crate::common;

use axum::http::Method;
use orca_fakes::hetzner::FakeHetzner;
use orca_fakes::{Fault, Rule};
use orca_machines::{Context, Created, Error, ErrorKind, MachineSpec, Provider};
use orca_plugin::proto::fake::fake_control_client::FakeControlClient;
use orca_plugin::proto::fake::FailRequest;
use orca_plugin::{error_to, PluginCommand, PluginProvider};

/// A context with every field set: an attempt that may have acted, and what a clean-up left.
fn full_context() -> Context {
    let mut c = Context::new();
    c.operation = Some("servers.create".into());
    c.retries = 2;
    c.code = Some("resource_limit_exceeded".into());
    c.may_have_acted = true;
    c.left = vec!["server 7 (lab-1)".into(), "disk lab-1".into()];
    c
}

/// Errors of `kind` with `context` where the kind carries one (for `Leftovers`, its first
/// failure's); a kind raised before any call carries none and comes as it is, and marked as
/// may-have-acted (which makes it `Other`, the mark kept).
fn of_kind_with(kind: ErrorKind, context: Context) -> Vec<Error> {
    if kind == ErrorKind::Leftovers {
        let first = of_kind_with(ErrorKind::Transient, context).remove(0);
        return vec![Error::leftovers(first, vec!["nic n1".into()])];
    }
    let e = Error::of_kind(kind, "the cloud's words");
    if e.context().is_none() {
        return vec![e.clone(), e.with_may_have_acted()];
    }
    vec![e.replace_context(context)]
}

fn spec(name: &str) -> MachineSpec {
    MachineSpec::new(name, "amd64-small", "zone-a", "lab")
}

#[tokio::test]
async fn every_kind_crosses_with_its_whole_context() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("cloud.json");
    let command = PluginCommand::new(common::FAKE, "stack-1")
        .setting(orca::FAKE_STATE_ENV, state.to_str().unwrap());
    let p = PluginProvider::start(command).await.unwrap();
    let mut console = FakeControlClient::new(p.channel().await.unwrap());
    let refused = console
        .fail(FailRequest {
            call: "make".into(),
            error: Some(error_to(&Error::transient("x"))),
            times: 1,
        })
        .await
        .unwrap()
        .into_inner()
        .refused;
    assert!(
        refused.contains("\"make\"") && refused.contains("delete_named"),
        "{refused}"
    );
    for kind in ErrorKind::ALL {
        for e in of_kind_with(kind, full_context()) {
            let refused = console
                .fail(FailRequest {
                    call: "create".into(),
                    error: Some(error_to(&e)),
                    times: 1,
                })
                .await
                .unwrap()
                .into_inner()
                .refused;
            assert!(refused.is_empty(), "{refused}");
            let back = p.create(&spec("lab-1")).await.unwrap_err();
            assert_eq!(back, e, "{e:?}");
            assert_eq!(back.to_string(), e.to_string());
            assert_eq!(back.kind(), e.kind(), "{e:?}");
            assert_eq!(back.left(), e.left(), "{e:?}");
            assert_eq!(back.may_have_acted(), e.may_have_acted(), "{e:?}");
            assert_eq!(back.made_nothing(), e.made_nothing(), "{e:?}");
            assert_eq!(back.is_retryable(), e.is_retryable(), "{e:?}");
            assert_eq!(back.code(), e.code(), "{e:?}");
            assert_eq!(back.operation(), e.operation(), "{e:?}");
            assert_eq!(back.retries(), e.retries(), "{e:?}");
            assert_eq!(back.retry_after(), e.retry_after(), "{e:?}");
        }
    }
    // Nothing was made: every create answered its scripted error.
    assert!(p.machines("lab").await.unwrap().is_empty());
}

/// What each child gets in its environment: the fake's address and token, its SSH key, firewall
/// and private network, fast polling, and no retry (a clean-up's delete fails once and for all).
fn hetzner_settings(fake: &FakeHetzner) -> orca_machines::Settings {
    orca_fakes::hetzner::driver_settings(fake)
        .with("ORCA_HCLOUD_SSH_KEYS", "orca-test")
        .with("ORCA_HCLOUD_FIREWALL", "orca-fw")
        .with("ORCA_HCLOUD_NETWORK", "orca-net")
        .with("ORCA_POLL_INTERVAL", "1ms")
        .with("ORCA_MAX_RETRIES", "0")
}

/// Hetzner's create action ends in `code`, and the delete of the server it made fails.
fn fail_create_and_its_clean_up(fake: &FakeHetzner, code: &str) {
    fake.fail_next_create_action_with(code, "error during placement");
    fake.control().inject(Rule::new(
        Some(Method::DELETE),
        "/v1/servers/",
        Fault::Status {
            status: 503,
            body: serde_json::json!({"error": {"code": "service_error", "message": "try later"}}),
            headers: vec![],
        },
        1,
    ));
}

/// A quota whose clean-up could not delete the server stays a quota (a caller cools down on it)
/// and names the server, through a plugin as in process: the host removes it by name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quota_whose_clean_up_failed_names_what_stands_through_soul_cloud_hetzner() {
    let fake = FakeHetzner::start().await.unwrap();
    let command = PluginCommand::new(common::HETZNER, "stack-1").settings(hetzner_settings(&fake));
    let p = PluginProvider::start(command).await.unwrap();
    fail_create_and_its_clean_up(&fake, "resource_limit_exceeded");
    let e = p.create(&spec_on_hetzner("q-1")).await.unwrap_err();
    let id = fake.servers()[0]["id"].as_i64().unwrap();
    assert_eq!(e.kind(), ErrorKind::Quota, "{e}");
    assert_eq!(e.left().len(), 1, "{e:?}");
    assert!(e.left()[0].starts_with(&format!("server {id}")), "{e:?}");
    assert!(e.may_have_acted() && !e.made_nothing(), "{e:?}");
    assert!(p.delete_named("lab", "q-1").await.unwrap());
    assert!(fake.servers().is_empty(), "{:?}", fake.servers());
}

/// A no stock whose clean-up could not delete the server crosses as the no-stock outcome with
/// the server named; as an error (`into_result`) it keeps the list.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_no_stock_whose_clean_up_failed_names_what_stands_through_soul_cloud_hetzner() {
    let fake = FakeHetzner::start().await.unwrap();
    let command = PluginCommand::new(common::HETZNER, "stack-1").settings(hetzner_settings(&fake));
    let p = PluginProvider::start(command).await.unwrap();
    fail_create_and_its_clean_up(&fake, "resource_unavailable");
    let got = p.create(&spec_on_hetzner("ns-1")).await.unwrap();
    let id = fake.servers()[0]["id"].as_i64().unwrap();
    let Created::NoStock { left, .. } = &got else {
        panic!("{got:?}")
    };
    assert_eq!(left.len(), 1, "{got:?}");
    assert!(left[0].starts_with(&format!("server {id}")), "{left:?}");
    let e = got.into_result().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NoStock, "{e}");
    assert_eq!(e.left().len(), 1, "{e:?}");
    assert!(!e.made_nothing(), "{e:?}");
    assert!(p.delete_named("lab", "ns-1").await.unwrap());
    assert!(fake.servers().is_empty(), "{:?}", fake.servers());
}

fn spec_on_hetzner(name: &str) -> MachineSpec {
    MachineSpec::new(name, "cx23", "fsn1", "lab")
}
