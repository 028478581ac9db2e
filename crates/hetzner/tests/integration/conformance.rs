//! The core conformance suite against the fake Hetzner API, with every hook: two owners on one
//! project, page size 1, no stock, a lost create answer, request counting and delayed visibility.
//! Servers go on the fake's private network, so that `private_address` is claimed and checked.

use crate::common;

use std::time::Duration;

use async_trait::async_trait;
use axum::http::Method;
use orca_fakes::hetzner::FakeHetzner;
use orca_fakes::{Fault, Rule};
use orca_hetzner::HetznerProvider;
use orca_machines::conformance::{extensions, run_all, Harness, Hook, Setup};
use orca_machines::Provider;

struct FakeHarness {
    fake: FakeHetzner,
}

#[async_trait]
impl Harness for FakeHarness {
    fn name(&self) -> String {
        "hetzner-fake".into()
    }

    fn setup(&self) -> Setup {
        Setup {
            amd64_type: "cx23".into(),
            arm64_type: "cax11".into(),
            location: "hel1".into(),
            resize_to: "cx33".into(),
            unknown_id: "999999999".into(),
            image: "ubuntu-24.04".into(),
        }
    }

    async fn provider(&self, owner: &str) -> orca_machines::Result<Box<dyn Provider>> {
        let config = common::builder(&self.fake).build()?;
        Ok(Box::new(HetznerProvider::new(config, owner).await?))
    }

    async fn paged_provider(&self, owner: &str, page_size: u32) -> Hook<Box<dyn Provider>> {
        let config = common::builder(&self.fake)
            .page_size(page_size)
            .build()
            .expect("valid settings");
        Ok(Box::new(
            HetznerProvider::new(config, owner)
                .await
                .expect("valid owner"),
        ))
    }

    async fn exhaust_stock(&self, machine_type: &str, location: &str) -> Hook<()> {
        self.fake.set_no_stock(machine_type, location, true);
        Ok(())
    }

    async fn restore_stock(&self, machine_type: &str, location: &str) -> Hook<()> {
        self.fake.set_no_stock(machine_type, location, false);
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

    async fn requests(&self) -> Hook<u64> {
        Ok(self.fake.control().requests())
    }

    async fn delay_visibility(&self, delay: Duration) -> Hook<()> {
        self.fake.set_visibility_delay(delay);
        Ok(())
    }
}

#[tokio::test]
async fn conformance_against_the_fake() {
    let h = FakeHarness {
        fake: FakeHetzner::start().await.unwrap(),
    };
    let report = run_all(&h).await;
    report.assert_passed();
    assert!(
        report.skipped().is_empty(),
        "every hook is provided: {:?}",
        report.skipped()
    );
    // The extension checks pass where the provider offers none: Hetzner offers label changes only.
    let p = h.provider("stack-1").await.unwrap();
    assert_eq!(extensions(&*p), ["machine_labels"]);
    assert!(
        h.fake.servers().is_empty(),
        "the suite cleans up: {} server(s) left",
        h.fake.servers().len()
    );
    // The lost answer was retried (inside the first create) into an adoption, and the suite's second
    // create of the same spec adopted too: two create POSTs met uniqueness_error, no other did.
    let conflicts = h
        .fake
        .control()
        .log()
        .iter()
        .filter(|l| l.method == Method::POST && l.path == "/v1/servers" && l.status == 409)
        .count();
    assert_eq!(conflicts, 2, "the retried creates adopted the lost one");
}
