//! The core conformance suite against the fake Compute Engine API, with every hook, twice: on a
//! single-zone provider (as shed runs) and on a provider of every zone of the project.

use crate::common;

use std::time::Duration;

use async_trait::async_trait;
use orca_fakes::gce::{FakeGce, NETWORK, PROJECT, SUBNET, ZONE};
use orca_fakes::{Fault, Rule};
use orca_gce::{Config, ConfigBuilder, Credentials, GceProvider};
use orca_machines::conformance::{Harness, Hook, Setup, extensions, run_all};
use orca_machines::{FirewallRule, Provider, RetryPolicy};
use reqwest::Method;
use serde_json::{Value, json};

use common::id;

struct GceHarness {
    fake: FakeGce,
    single_zone: bool,
    tokens: Credentials,
}

impl GceHarness {
    async fn start(single_zone: bool) -> GceHarness {
        let fake = FakeGce::start().await.unwrap();
        let tokens = common::tokens(&fake);
        GceHarness {
            fake,
            single_zone,
            tokens,
        }
    }

    fn config(&self) -> ConfigBuilder {
        let b = Config::builder()
            .project(PROJECT)
            .network(NETWORK)
            .subnet(SUBNET)
            .credentials(self.tokens.clone())
            .endpoint(self.fake.endpoint())
            .retry(RetryPolicy::fast())
            .visibility_window(Duration::from_secs(3));
        if self.single_zone { b.zone(ZONE) } else { b }
    }
}

#[async_trait]
impl Harness for GceHarness {
    fn name(&self) -> String {
        if self.single_zone {
            "gce-fake (one zone)".into()
        } else {
            "gce-fake (every zone)".into()
        }
    }

    fn setup(&self) -> Setup {
        Setup {
            amd64_type: "e2-small".into(),
            arm64_type: "t2a-standard-1".into(),
            location: ZONE.into(),
            resize_to: "e2-medium".into(),
            unknown_id: id("orca-no-such-vm-zz9"),
            image: "projects/ubuntu-os-cloud/global/images/family/ubuntu-2404-lts-amd64".into(),
        }
    }

    async fn provider(&self, owner: &str) -> orca_machines::Result<Box<dyn Provider>> {
        Ok(Box::new(
            GceProvider::new(self.config().build()?, owner).await?,
        ))
    }

    async fn paged_provider(&self, owner: &str, page_size: u32) -> Hook<Box<dyn Provider>> {
        let config = self.config().page_size(page_size).build().unwrap();
        Ok(Box::new(GceProvider::new(config, owner).await.unwrap()))
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
        Ok(self.fake.control().requests())
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

/// A rule in the API's shape, as an operator would make it.
fn firewall_json(rule: &FirewallRule) -> Value {
    let ports = |p: &[orca_machines::FirewallPorts]| -> Vec<Value> {
        p.iter()
            .map(|x| {
                let mut v = json!({"IPProtocol": x.protocol});
                if !x.ports.is_empty() {
                    v["ports"] = json!(x.ports);
                }
                v
            })
            .collect()
    };
    let mut v = json!({
        "name": rule.name,
        "network": rule.network,
        "direction": rule.direction,
        "priority": rule.priority,
        "disabled": rule.disabled,
    });
    for (k, list) in [
        ("allowed", ports(&rule.allowed)),
        ("denied", ports(&rule.denied)),
    ] {
        if !list.is_empty() {
            v[k] = json!(list);
        }
    }
    for (k, list) in [
        ("sourceRanges", &rule.source_ranges),
        ("sourceTags", &rule.source_tags),
        ("sourceServiceAccounts", &rule.source_service_accounts),
        ("destinationRanges", &rule.destination_ranges),
        ("targetTags", &rule.target_tags),
        ("targetServiceAccounts", &rule.target_service_accounts),
    ] {
        if !list.is_empty() {
            v[k] = json!(list);
        }
    }
    v
}

async fn conformance(single_zone: bool) {
    let h = GceHarness::start(single_zone).await;
    let report = run_all(&h).await;
    report.assert_passed();
    assert!(
        report.skipped().is_empty(),
        "skipped: {:?}",
        report.skipped()
    );
    // The extension checks pass where the provider offers none: Compute Engine offers label changes
    // and the network's firewall rules.
    let p = h.provider("stack-1").await.unwrap();
    assert_eq!(extensions(&*p), ["machine_labels", "firewall_rules"]);
    // Every machine the suite made is gone, and so is every disk.
    assert!(h.fake.instance_names(ZONE).is_empty());
    assert!(h.fake.disk_names(ZONE).is_empty());
}

#[tokio::test]
async fn conformance_on_one_zone() {
    conformance(true).await;
}

#[tokio::test]
async fn conformance_on_every_zone() {
    conformance(false).await;
}
