//! The fake Compute Engine API's hooks: page size (the driver's), no stock, a lost insert answer,
//! request counts, delayed visibility, an operator's firewall rules on the network, and the boot
//! disk a failed insert leaves.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use axum::http::Method;
use orca_machines::conformance::{Harness, Hook, Setup};
use orca_machines::labels::ownership_labels;
use orca_machines::{FirewallPorts, FirewallRule, MachineSpec, Provider, Result};
use serde_json::{json, Value};

use super::{paged, Providers};
use crate::gce::{FakeGce, ZONE};
use crate::{Fault, Rule};

/// The conformance harness on a fake Compute Engine API, with every hook Compute Engine can have.
pub struct GceHarness<P> {
    /// The fake, for the test's own assertions after the run.
    pub fake: FakeGce,
    name: String,
    providers: P,
    /// Whether [`Harness::requests`] counts the token exchange's requests too.
    token_requests: bool,
}

/// A type the harness's fake offers in [`UNOFFERED_TYPE_ZONE`] only, not in [`ZONE`] (as Compute
/// Engine offers its newer series in some zones only).
const UNOFFERED_TYPE: &str = "c4a-standard-1";
const UNOFFERED_TYPE_ZONE: &str = "us-central1-a";

impl<P: Providers<FakeGce>> GceHarness<P> {
    /// A harness named `name` in the output on `fake`, whose providers `providers` makes. It counts
    /// Compute Engine's requests, not the token exchange's (Google serves it from another host, the
    /// fake from the same): a plugin process gets its own token on its first call.
    pub fn new(name: impl Into<String>, fake: FakeGce, providers: P) -> Self {
        fake.offer_only(UNOFFERED_TYPE, &[UNOFFERED_TYPE_ZONE]);
        fake.set_operation_time(super::OPERATION_TIME);
        GceHarness {
            fake,
            name: name.into(),
            providers,
            token_requests: false,
        }
    }

    /// This harness counting the token exchange's requests as well: where every provider shares one
    /// token source (in one process), so that only a request the suite should see is counted.
    pub fn counting_token_requests(mut self) -> Self {
        self.token_requests = true;
        self
    }
}

#[async_trait]
impl<P: Providers<FakeGce>> Harness for GceHarness<P> {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn setup(&self) -> Setup {
        Setup {
            amd64_type: "e2-small".into(),
            arm64_type: "t2a-standard-1".into(),
            location: ZONE.into(),
            resize_to: "e2-medium".into(),
            unknown_id: format!("{ZONE}:orca-no-such-vm-zz9"),
            image: "projects/ubuntu-os-cloud/global/images/family/ubuntu-2404-lts-amd64".into(),
            unoffered: Some((UNOFFERED_TYPE.into(), ZONE.into())),
            arm64_image: Some(
                "projects/ubuntu-os-cloud/global/images/family/ubuntu-2404-lts-arm64".into(),
            ),
        }
    }

    async fn provider(&self, owner: &str) -> Result<Box<dyn Provider>> {
        self.providers.provider(&self.fake, owner).await
    }

    async fn paged_provider(&self, owner: &str, page_size: u32) -> Hook<Box<dyn Provider>> {
        paged(&self.providers, &self.fake, owner, page_size).await
    }

    async fn exhaust_stock(&self, machine_type: &str, location: &str) -> Hook<()> {
        self.fake.exhaust(machine_type, location);
        Ok(())
    }

    async fn restore_stock(&self, machine_type: &str, location: &str) -> Hook<()> {
        self.fake.restore(machine_type, location);
        Ok(())
    }

    async fn exceed_quota(&self) -> Hook<()> {
        self.fake.exceed_quota(u32::MAX);
        Ok(())
    }

    async fn restore_quota(&self) -> Hook<()> {
        self.fake.exceed_quota(0);
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

    async fn refuse_next_create_unserved(&self) -> Hook<()> {
        // The next instances insert is answered 503 before the fake serves it: nothing is made.
        self.fake.control().inject(Rule::new(
            Some(Method::POST),
            "/instances?requestId=",
            Fault::Status {
                status: 503,
                body: json!({"error": {"code": 503, "message": "injected: backend", "errors": [{"reason": "backendError", "domain": "global", "message": "injected: backend"}]}}),
                headers: vec![],
            },
            1,
        ));
        Ok(())
    }

    async fn requests(&self) -> Hook<u64> {
        if self.token_requests {
            return Ok(self.fake.control().requests());
        }
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

    /// The boot disk: Compute Engine makes it before the instance, and an insert that finds no room
    /// leaves it unattached, with the labels the insert gave it (the ownership labels and
    /// `orca-machine` naming the instance); when the create's clean-up cannot remove it, nothing
    /// else names it. Nothing else of a create stands without its instance (the interface and the
    /// external address are the instance's own).
    async fn leave_pieces(&self, owner: &str, spec: &MachineSpec) -> Hook<Vec<String>> {
        let zone = &spec.location;
        let name = boot_disk_name(&spec.name);
        let mut labels = ownership_labels(&spec.pool, owner);
        labels.insert("orca-machine".to_string(), spec.name.clone());
        self.fake.put_disk(zone, &name, json!(labels));
        Ok(vec![format!("disk {zone}:{name}")])
    }

    async fn pieces_standing(&self, pieces: &[String]) -> Hook<Vec<String>> {
        Ok(pieces
            .iter()
            .filter(|p| {
                let disk = p.strip_prefix("disk ").and_then(|d| d.split_once(':'));
                disk.is_some_and(|(zone, name)| self.fake.disk(zone, name).is_some())
            })
            .cloned()
            .collect())
    }
}

/// A boot disk name as the driver gives one for instance `name`: the name (cut to 54 characters,
/// without a trailing `-`) and 8 hex digits of this create's own (the driver's are random; these
/// differ from one call to the next).
fn boot_disk_name(name: &str) -> String {
    static MADE: AtomicU32 = AtomicU32::new(1);
    let stem = name.get(..54).unwrap_or(name).trim_end_matches('-');
    let tail = MADE
        .fetch_add(1, Ordering::Relaxed)
        .wrapping_mul(0x9e37_79b1);
    format!("{stem}-{tail:08x}")
}

/// `rule` in the API's shape (`IPProtocol`, camelCase lists, empty lists left out), as an operator
/// would make it.
fn firewall_json(rule: &FirewallRule) -> Value {
    let ports = |p: &[FirewallPorts]| -> Vec<Value> {
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
        ("allowed", json!(ports(&rule.allowed))),
        ("denied", json!(ports(&rule.denied))),
        ("sourceRanges", json!(rule.source_ranges)),
        ("sourceTags", json!(rule.source_tags)),
        ("sourceServiceAccounts", json!(rule.source_service_accounts)),
        ("destinationRanges", json!(rule.destination_ranges)),
        ("targetTags", json!(rule.target_tags)),
        ("targetServiceAccounts", json!(rule.target_service_accounts)),
    ] {
        if list.as_array().is_some_and(|l| !l.is_empty()) {
            v[k] = list;
        }
    }
    v
}
