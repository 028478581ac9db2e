//! The core conformance suite against the plugin client, through `soul-cloud-gce` processes on the
//! fake Compute Engine API, on a single-zone provider and on one of every zone: the settings
//! (service account key file, page size) go in each child's environment, the hooks act on the fake.

use crate::common;

use std::time::Duration;

use async_trait::async_trait;
use axum::http::Method;
use orca_fakes::gce::{FakeGce, NETWORK, PROJECT, SUBNET, ZONE};
use orca_fakes::{Fault, Rule};
use orca_machines::conformance::{extensions, run_all, Harness, Hook, Setup};
use orca_machines::{FirewallRule, Provider, Settings};
use orca_plugin::{PluginCommand, PluginProvider};
use serde_json::{Map, Value};

struct GceHarness {
    fake: FakeGce,
    single_zone: bool,
    /// The service account key, in a file as an operator hands it over.
    _dir: tempfile::TempDir,
    key_file: std::path::PathBuf,
}

impl GceHarness {
    async fn start(single_zone: bool) -> GceHarness {
        let fake = FakeGce::start().await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let key_file = dir.path().join("service-account.json");
        std::fs::write(&key_file, fake.service_account_json()).unwrap();
        GceHarness {
            fake,
            single_zone,
            _dir: dir,
            key_file,
        }
    }

    fn settings(&self) -> Settings {
        let s = Settings::new()
            .with("ORCA_GCE_PROJECT", PROJECT)
            .with("ORCA_GCE_NETWORK", NETWORK)
            .with("ORCA_GCE_SUBNET", SUBNET)
            .with("ORCA_GCE_CREDENTIALS_FILE", self.key_file.to_str().unwrap())
            .with("ORCA_GCE_ENDPOINT", self.fake.endpoint());
        if self.single_zone {
            s.with("ORCA_GCE_ZONE", ZONE)
        } else {
            s
        }
    }

    async fn start_plugin(
        &self,
        owner: &str,
        settings: Settings,
    ) -> orca_machines::Result<Box<dyn Provider>> {
        let command = PluginCommand::new(common::GCE, owner).settings(settings);
        Ok(Box::new(PluginProvider::start(command).await?))
    }
}

/// `rule` in the API's shape (camelCase fields, `IPProtocol`, empty lists left out), as an
/// operator's rule is stored.
fn firewall_json(rule: &FirewallRule) -> Value {
    let Value::Object(fields) = serde_json::to_value(rule).unwrap() else {
        unreachable!("a rule is an object")
    };
    let camel = |k: &str| {
        let mut out = String::new();
        let mut up = false;
        for c in k.chars() {
            match (c, up) {
                ('_', _) => up = true,
                (c, true) => {
                    out.push(c.to_ascii_uppercase());
                    up = false
                }
                (c, false) => out.push(c),
            }
        }
        out
    };
    let mut api = Map::new();
    for (k, mut v) in fields {
        if v.as_array().is_some_and(Vec::is_empty) {
            continue;
        }
        if k == "allowed" || k == "denied" {
            for p in v.as_array_mut().unwrap() {
                let protocol = p.as_object_mut().unwrap().remove("protocol").unwrap();
                p["IPProtocol"] = protocol;
                if p["ports"].as_array().is_some_and(Vec::is_empty) {
                    p.as_object_mut().unwrap().remove("ports");
                }
            }
        }
        api.insert(camel(&k), v);
    }
    Value::Object(api)
}

#[async_trait]
impl Harness for GceHarness {
    fn name(&self) -> String {
        if self.single_zone {
            "plugin soul-cloud-gce on gce-fake (one zone)".into()
        } else {
            "plugin soul-cloud-gce on gce-fake (every zone)".into()
        }
    }

    fn setup(&self) -> Setup {
        Setup {
            amd64_type: "e2-small".into(),
            arm64_type: "t2a-standard-1".into(),
            location: ZONE.into(),
            resize_to: "e2-medium".into(),
            unknown_id: format!("{ZONE}:orca-no-such-vm-zz9"),
            image: "projects/ubuntu-os-cloud/global/images/family/ubuntu-2404-lts-amd64".into(),
        }
    }

    async fn provider(&self, owner: &str) -> orca_machines::Result<Box<dyn Provider>> {
        self.start_plugin(owner, self.settings()).await
    }

    async fn paged_provider(&self, owner: &str, page_size: u32) -> Hook<Box<dyn Provider>> {
        let settings = self
            .settings()
            .with("ORCA_GCE_PAGE_SIZE", page_size.to_string());
        Ok(self
            .start_plugin(owner, settings)
            .await
            .expect("valid settings"))
    }

    async fn exhaust_stock(&self, machine_type: &str, location: &str) -> Hook<()> {
        self.fake.exhaust(machine_type, location);
        Ok(())
    }

    async fn restore_stock(&self, machine_type: &str, location: &str) -> Hook<()> {
        self.fake.restore(machine_type, location);
        Ok(())
    }

    async fn lose_next_create_answer(&self) -> Hook<()> {
        self.fake.control().inject(Rule::new(
            Some(Method::POST),
            "/instances?requestId=",
            Fault::DropAnswer,
            1,
        ));
        Ok(())
    }

    async fn requests(&self) -> Hook<u64> {
        // Compute Engine's requests, not the token exchange's (Google serves it from another host,
        // the fake from the same): each plugin process gets its own token on its first call, where
        // the in-process suite's providers share one token source.
        let log = self.fake.control().log();
        Ok(log.iter().filter(|l| l.path != "/token").count() as u64)
    }

    async fn delay_visibility(&self, delay: Duration) -> Hook<()> {
        self.fake.set_visibility_delay(delay);
        Ok(())
    }

    async fn put_firewall_rule(&self, rule: FirewallRule) -> Hook<()> {
        self.fake.put_firewall(firewall_json(&rule));
        Ok(())
    }
}

async fn conformance(single_zone: bool) {
    let h = GceHarness::start(single_zone).await;
    let report = run_all(&h).await;
    report.assert_passed();
    assert!(
        report.skipped().is_empty(),
        "every hook is provided: {:?}",
        report.skipped()
    );
    // Compute Engine offers label changes and the network's firewall rules: the plugin carries both.
    let p = h.provider("stack-1").await.unwrap();
    assert_eq!(extensions(&*p), ["machine_labels", "firewall_rules"]);
    assert!(
        h.fake.instance_names(ZONE).is_empty(),
        "the suite cleans up"
    );
    assert!(h.fake.disk_names(ZONE).is_empty(), "every disk is gone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_through_soul_cloud_gce_on_one_zone() {
    conformance(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_through_soul_cloud_gce_on_every_zone() {
    conformance(false).await;
}
