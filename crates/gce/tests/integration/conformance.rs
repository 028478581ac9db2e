//! The core conformance suite against the fake Compute Engine API, with every hook, twice: on a
//! single-zone provider (as shed runs) and on a provider of every zone of the project.

use crate::common;

use std::time::Duration;

use async_trait::async_trait;
use orca_fakes::conformance::{GceHarness, Providers};
use orca_fakes::gce::{FakeGce, NETWORK, PROJECT, SUBNET, ZONE};
use orca_gce::{Config, ConfigBuilder, Credentials, GceProvider};
use orca_machines::conformance::{Harness, extensions, run_all};
use orca_machines::{Provider, RetryPolicy};

/// The driver itself, in the test's process: of one zone or of every zone, every provider with the
/// same token source, as a process holds one set of credentials.
struct Driver {
    single_zone: bool,
    tokens: Credentials,
}

impl Driver {
    fn config(&self, fake: &FakeGce) -> ConfigBuilder {
        let b = Config::builder()
            .project(PROJECT)
            .network(NETWORK)
            .subnet(SUBNET)
            .credentials(self.tokens.clone())
            .endpoint(fake.endpoint())
            .retry(RetryPolicy::fast())
            .visibility_window(Duration::from_secs(3));
        if self.single_zone { b.zone(ZONE) } else { b }
    }
}

#[async_trait]
impl Providers<FakeGce> for Driver {
    async fn provider(
        &self,
        fake: &FakeGce,
        owner: &str,
    ) -> orca_machines::Result<Box<dyn Provider>> {
        let config = self.config(fake).build()?;
        Ok(Box::new(GceProvider::new(config, owner).await?))
    }

    async fn paged_provider(
        &self,
        fake: &FakeGce,
        owner: &str,
        page_size: u32,
    ) -> orca_machines::Result<Box<dyn Provider>> {
        let config = self.config(fake).page_size(page_size).build()?;
        Ok(Box::new(GceProvider::new(config, owner).await?))
    }
}

async fn conformance(single_zone: bool) {
    let fake = FakeGce::start().await.unwrap();
    let tokens = common::tokens(&fake);
    let name = if single_zone {
        "gce-fake (one zone)"
    } else {
        "gce-fake (every zone)"
    };
    let driver = Driver {
        single_zone,
        tokens,
    };
    // The providers share one token source: its one token request is the suite's to count.
    let h = GceHarness::new(name, fake, driver).counting_token_requests();
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
