//! shed on the Compute Engine driver against the fake Compute Engine API (crates/fakes): the provider
//! made as the server makes it (`orca::of_with("gce", ...)` from the variables the configuration
//! names, pointed at the fake), the firewall check over the real driver, and a create and a delete.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use orca_fakes::gce::{FakeGce, NETWORK, PROJECT, SSH_RULE, SUBNET, ZONE};
use serde_json::json;
use shed::backend::{Parts, ID_LABEL, SCHEMA_LABEL, STATE_LABEL};
use shed::firewall::FwReason;
use shed::{Backend, FileConfig, Status};

use crate::support::{
    start_backend, test_timings, FakeEcho, LogCount as _, ManualClock, TestProbe,
};

const KEY: &str = "-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n-----END OPENSSH PRIVATE KEY-----\n";

struct Gce {
    fake: FakeGce,
    backend: Backend,
    echo: Arc<FakeEcho>,
    _dir: tempfile::TempDir,
}

async fn start(firewall: &str) -> Gce {
    let fake = FakeGce::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let env: HashMap<String, String> = [
        ("SHED_GCE_PROJECT", PROJECT.to_string()),
        ("SHED_GCE_ZONE", ZONE.to_string()),
        ("SHED_GCE_NETWORK", NETWORK.to_string()),
        ("SHED_GCE_SUBNET", SUBNET.to_string()),
        (
            "GOOGLE_CREDENTIALS_BASE64",
            b64(&fake.service_account_json()),
        ),
        ("SHED_REMOTE_SSH_KEY", b64(KEY)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let yaml = format!(
        "default_backend: remote\nremote:\n  environment: test\n  state_dir: {}\n  default_image: projects/ubuntu-os-cloud/global/images/family/ubuntu-2404-lts-amd64\n  disk_gb: 20\n  firewall:\n{firewall}",
        dir.path().join("remote").display()
    );
    let mut cfg = FileConfig::parse(&yaml)
        .unwrap()
        .resolve(&|k| env.get(k).cloned())
        .unwrap();
    // The one setting shed's configuration has no field for: the API root, here the fake's.
    cfg.provider_settings
        .insert("ORCA_GCE_ENDPOINT", fake.endpoint());
    let provider = shed::server::provider(&cfg).await.unwrap();
    assert_eq!(provider.kind(), "gce");
    let echo = Arc::new(FakeEcho::default());
    let backend = start_backend(Parts {
        config: cfg,
        provider,
        probe: Arc::new(TestProbe::default()),
        echo: echo.clone(),
        clock: Arc::new(ManualClock::new()),
        timings: test_timings(),
    })
    .await
    .unwrap();
    Gce {
        fake,
        backend,
        echo,
        _dir: dir,
    }
}

const STATIC: &str = "    source_ranges: [203.0.113.7/32]\n";

async fn until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !cond() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn the_firewall_check_reads_the_rules_through_the_compute_engine_driver() {
    let g = start(STATIC).await;
    let o = g.backend.firewall_last().unwrap();
    assert!(o.passed, "{o:?}");
    assert!(g.backend.log().count(
        "remote: firewall check passed (mode static, rule shed-test-ssh, sources 203.0.113.7/32)"
    ) == 1);
    // The default network's allow-all SSH rule is another network's: not a stray.
    let mut rule = g.fake.firewall(SSH_RULE).unwrap();
    rule["sourceRanges"] = json!(["198.51.100.9/32"]);
    g.fake.put_firewall(rule.clone());
    let o = g.backend.firewall_check().await;
    assert_eq!(o.reason, Some(FwReason::RuleSources));
    assert!(
        o.message.contains("found source ranges [198.51.100.9/32]"),
        "{}",
        o.message
    );
    rule["sourceRanges"] = json!(["203.0.113.7/32"]);
    rule["allowed"] = json!([{"IPProtocol": "tcp", "ports": ["22", "3389"]}]);
    g.fake.put_firewall(rule.clone());
    assert_eq!(
        g.backend.firewall_check().await.reason,
        Some(FwReason::RuleAllow)
    );
    rule["allowed"] = json!([{"IPProtocol": "tcp", "ports": ["22"]}]);
    g.fake.put_firewall(rule);
    g.fake.put_firewall(json!({
        "name": "stray-allow-all", "network": NETWORK, "direction": "INGRESS", "priority": 900,
        "allowed": [{"IPProtocol": "all"}], "sourceRanges": ["10.0.0.0/8"],
    }));
    let o = g.backend.firewall_check().await;
    assert_eq!(o.reason, Some(FwReason::StrayRule));
    assert!(o.message.contains("stray-allow-all"), "{}", o.message);
}

#[tokio::test]
async fn auto_mode_patches_the_rules_sources_through_the_compute_engine_driver() {
    let g = start("    mode: auto\n    echo_urls: [https://one.example/, https://two.example/]\n")
        .await;
    assert_eq!(
        g.backend.firewall_last().unwrap().reason,
        Some(FwReason::AddressUnknown)
    );
    g.echo.say("https://one.example/", Ok("198.51.100.44"));
    g.echo.say("https://two.example/", Ok("198.51.100.44"));
    let o = g.backend.firewall_check().await;
    assert!(o.passed, "{o:?}");
    let stored = g.fake.firewall(SSH_RULE).unwrap();
    assert_eq!(stored["sourceRanges"], json!(["198.51.100.44/32"]));
    assert_eq!(
        stored["targetTags"],
        json!(["shed-test"]),
        "nothing else changed"
    );
}

#[tokio::test]
async fn a_create_and_a_delete_on_the_compute_engine_driver() {
    let g = start(STATIC).await;
    let admin = shed::Caller::local_admin();
    let id = g
        .backend
        .create(&admin, crate::support::Env::req("gce-1"))
        .await
        .unwrap();
    let v = g.backend.wait_accept(&id).await.unwrap();
    assert_eq!(v.status, Status::Starting);
    until("running", || {
        g.backend.get(&admin, "gce-1").map(|v| v.status) == Ok(Status::Running)
    })
    .await;
    let name = format!("shed-test-{id}");
    let inst = g.fake.instance(ZONE, &name).expect("the instance exists");
    assert_eq!(inst["labels"][ID_LABEL], json!(id));
    assert_eq!(inst["labels"][SCHEMA_LABEL], json!("1"));
    assert_eq!(inst["labels"][STATE_LABEL], json!("ready"));
    assert_eq!(inst["tags"]["items"], json!(["shed-test"]));
    assert!(
        inst["machineType"]
            .as_str()
            .unwrap()
            .ends_with("/e2-standard-2"),
        "{}",
        inst["machineType"]
    );
    assert_eq!(
        inst["scheduling"]["maxRunDuration"]["seconds"],
        json!("86400")
    );
    g.backend.delete_shed(&admin, "gce-1").await.unwrap();
    g.backend.wait_gone(&id).await.unwrap();
    assert!(
        g.fake.instance(ZONE, &name).is_none(),
        "the instance is gone"
    );
    assert!(g.fake.disk_names(ZONE).is_empty(), "and its disk");
}
