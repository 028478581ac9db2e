//! The fake Hetzner API's hooks: page size (the driver's), no stock, a lost create answer, request
//! counting and delayed visibility.

use std::time::Duration;

use async_trait::async_trait;
use axum::http::Method;
use orca_machines::conformance::{Harness, Hook, Setup};
use orca_machines::{MachineSpec, Provider, Result};

use super::{paged, Providers};
use crate::hetzner::FakeHetzner;
use crate::{Fault, Rule};
use serde_json::json;

/// The conformance harness on a fake Hetzner API, with every hook Hetzner can have.
pub struct HetznerHarness<P> {
    /// The fake, for the test's own assertions after the run.
    pub fake: FakeHetzner,
    name: String,
    providers: P,
}

impl<P: Providers<FakeHetzner>> HetznerHarness<P> {
    /// A harness named `name` in the output, on `fake`, whose providers `providers` makes.
    pub fn new(name: impl Into<String>, fake: FakeHetzner, providers: P) -> Self {
        fake.set_action_time(super::OPERATION_TIME);
        HetznerHarness {
            fake,
            name: name.into(),
            providers,
        }
    }
}

#[async_trait]
impl<P: Providers<FakeHetzner>> Harness for HetznerHarness<P> {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn setup(&self) -> Setup {
        Setup {
            amd64_type: "cx23".into(),
            arm64_type: "cax11".into(),
            location: "hel1".into(),
            resize_to: "cx33".into(),
            unknown_id: "999999999".into(),
            image: "ubuntu-24.04".into(),
            // Arm types are offered in the European locations only.
            unoffered: Some(("cax11".into(), "ash".into())),
            // ubuntu-24.04 for arm, by its id: a name alone is picked per architecture.
            arm64_image: Some("161547270".into()),
        }
    }

    async fn provider(&self, owner: &str) -> Result<Box<dyn Provider>> {
        self.providers.provider(&self.fake, owner).await
    }

    async fn paged_provider(&self, owner: &str, page_size: u32) -> Hook<Box<dyn Provider>> {
        paged(&self.providers, &self.fake, owner, page_size).await
    }

    async fn exhaust_stock(&self, machine_type: &str, location: &str) -> Hook<()> {
        self.fake.set_no_stock(machine_type, location, true);
        Ok(())
    }

    async fn restore_stock(&self, machine_type: &str, location: &str) -> Hook<()> {
        self.fake.set_no_stock(machine_type, location, false);
        Ok(())
    }

    async fn exceed_quota(&self) -> Hook<()> {
        // Hetzner's answer to a create past the project's server limit.
        self.fake.control().inject(Rule::new(
            Some(Method::POST),
            "/v1/servers",
            Fault::Status {
                status: 403,
                body: json!({"error": {"code": "resource_limit_exceeded",
                    "message": "server limit exceeded", "details": {}}}),
                headers: vec![],
            },
            u32::MAX,
        ));
        Ok(())
    }

    async fn restore_quota(&self) -> Hook<()> {
        self.fake
            .control()
            .clear_faults_where(|r| r.path_contains == "/v1/servers");
        Ok(())
    }

    async fn lose_next_create_answer(&self) -> Hook<()> {
        // The next POST /v1/servers is served (the server is made), then its answer is cut off.
        self.fake.control().inject(Rule::new(
            Some(Method::POST),
            "/v1/servers",
            Fault::DropAnswer,
            1,
        ));
        Ok(())
    }

    async fn refuse_next_create_unserved(&self) -> Hook<()> {
        // The next POST /v1/servers is answered 503 before the fake serves it: nothing is made.
        self.fake.control().inject(Rule::new(
            Some(Method::POST),
            "/v1/servers",
            Fault::Status {
                status: 503,
                body: serde_json::json!({"error": {"code": "unavailable", "message": "injected: try later", "details": {}}}),
                headers: vec![],
            },
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

    async fn leave_pieces(&self, _owner: &str, _spec: &MachineSpec) -> Hook<Vec<String>> {
        // Hetzner makes a server in one call, with its primary addresses; the firewall is the operator's: a create stopped before its machine leaves nothing.
        Ok(Vec::new())
    }

    async fn pieces_standing(&self, _pieces: &[String]) -> Hook<Vec<String>> {
        Ok(Vec::new())
    }
}
