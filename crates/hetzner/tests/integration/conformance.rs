//! The core conformance suite against the fake Hetzner API, with every hook: two owners on one
//! project, page size 1, no stock, a lost create answer, request counting and delayed visibility.
//! Servers go on the fake's private network, so that `private_address` is claimed and checked.

use std::time::Duration;

use crate::common;

use async_trait::async_trait;
use axum::http::Method;
use orca_fakes::conformance::{HetznerHarness, Providers};
use orca_fakes::hetzner::FakeHetzner;
use orca_hetzner::HetznerProvider;
use orca_machines::conformance::{extensions, run_all, Harness};
use orca_machines::Provider;

/// The driver itself, in the test's process.
struct Driver;

/// The tests' settings, but actions are polled every 25 ms, not every 1 ms: they last a while
/// under the suite, and polls every millisecond would spend the project's rate limit.
fn suite_builder(fake: &FakeHetzner) -> orca_hetzner::ConfigBuilder {
    common::builder(fake).poll_interval(Duration::from_millis(25))
}

#[async_trait]
impl Providers<FakeHetzner> for Driver {
    async fn provider(
        &self,
        fake: &FakeHetzner,
        owner: &str,
    ) -> orca_machines::Result<Box<dyn Provider>> {
        let config = suite_builder(fake).build()?;
        Ok(Box::new(HetznerProvider::new(config, owner).await?))
    }

    async fn paged_provider(
        &self,
        fake: &FakeHetzner,
        owner: &str,
        page_size: u32,
    ) -> orca_machines::Result<Box<dyn Provider>> {
        let config = suite_builder(fake).page_size(page_size).build()?;
        Ok(Box::new(HetznerProvider::new(config, owner).await?))
    }
}

#[tokio::test]
async fn conformance_against_the_fake() {
    let h = HetznerHarness::new("hetzner-fake", FakeHetzner::start().await.unwrap(), Driver);
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
    // The lost answer was retried (inside the first create) into an adoption, the suite's second
    // create of the same spec adopted too, and so did the create retried after a 503 answered
    // unserved: three create POSTs met uniqueness_error, no other did.
    let conflicts = h
        .fake
        .control()
        .log()
        .iter()
        .filter(|l| l.method == Method::POST && l.path == "/v1/servers" && l.status == 409)
        .count();
    assert_eq!(conflicts, 3, "the retried creates adopted the lost one");
}
