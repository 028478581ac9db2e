//! The core conformance suite against moto, through the EC2 driver and the proxy that makes moto
//! behave as EC2 (tests/common): two owners (and the empty one) on one account, pages of one
//! instance, no stock, a lost create answer, delayed visibility, and every request counted.

use crate::common;

use async_trait::async_trait;
use orca_fakes::conformance::{MotoHarness, Providers, Target};
use orca_machines::Provider;
use orca_machines::conformance::{Harness, extensions, run_all};

/// The driver itself, in the test's process.
struct Driver;

#[async_trait]
impl Providers<Target> for Driver {
    async fn provider(&self, on: &Target, owner: &str) -> orca_machines::Result<Box<dyn Provider>> {
        Ok(Box::new(
            common::provider(common::builder(&on.seed, &on.endpoint), owner).await?,
        ))
    }

    async fn paged_provider(
        &self,
        on: &Target,
        owner: &str,
        page_size: u32,
    ) -> orca_machines::Result<Box<dyn Provider>> {
        // The driver asks for EC2's smallest page (5), the paged proxy answers one instance a page.
        let _ = page_size;
        let b = common::builder(&on.seed, &on.endpoint).page_size(orca_ec2::config::MIN_PAGE_SIZE);
        Ok(Box::new(common::provider(b, owner).await?))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_against_moto() {
    let Some(moto) = common::moto("conformance_against_moto") else {
        return;
    };
    let h = MotoHarness::start("moto", &moto, Driver).await;
    let report = run_all(&h).await;
    report.assert_passed();
    assert!(
        report.skipped().is_empty(),
        "skipped: {:?}",
        report.skipped()
    );
    // The extension checks pass where the provider offers none: EC2 offers label changes only.
    let p = h.provider("stack-1").await.unwrap();
    assert_eq!(extensions(&*p), ["machine_labels"]);
    // The lost answer was really lost, and moto holds one instance of that name: the retried create
    // re-sent RunInstances with the same ClientToken, which answered the instance the first made.
    let dropped: Vec<_> = h
        .proxy
        .of("RunInstances")
        .into_iter()
        .filter(|s| s.faulted && s.status == 200)
        .collect();
    assert_eq!(dropped.len(), 1, "exactly one answer was dropped");
    let token = dropped[0].params["ClientToken"].clone();
    let ec2 = common::sdk(&moto).await;
    // (moto has no `client-token` filter: every instance is read, and its token compared. Every
    // page: moto answers 100 reservations a page, and in a whole run it holds more, made by the
    // test binaries before this one.)
    let (mut n, mut next) = (0, None);
    loop {
        let page = ec2
            .describe_instances()
            .set_next_token(next)
            .send()
            .await
            .unwrap();
        n += page
            .reservations()
            .iter()
            .flat_map(|r| r.instances())
            .filter(|i| i.client_token() == Some(token.as_str()))
            .count();
        next = page.next_token().map(str::to_string);
        if next.is_none() {
            break;
        }
    }
    assert_eq!(n, 1, "instances made with the lost create's token");
}
