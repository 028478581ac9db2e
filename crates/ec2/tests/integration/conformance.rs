//! The core conformance suite against moto, through the EC2 driver and the proxy that makes moto
//! behave as EC2 (tests/common): two owners (and the empty one) on one account, pages of one
//! instance, no stock, a lost create answer, delayed visibility, and every request counted.

use crate::common;

use std::time::Duration;

use async_trait::async_trait;
use common::{Fault, Proxy, Seed, ec2_error, rule};
use orca_machines::Provider;
use orca_machines::conformance::{Harness, Hook, Setup, Skip, extensions, run_all};

struct MotoHarness {
    seed: Seed,
    proxy: Proxy,
    /// The same proxy paging listings by one instance: EC2 itself serves no page under 5.
    paged: Proxy,
}

#[async_trait]
impl Harness for MotoHarness {
    fn name(&self) -> String {
        "moto".into()
    }

    fn setup(&self) -> Setup {
        Setup {
            amd64_type: "t3.micro".into(),
            arm64_type: "t4g.micro".into(),
            location: common::ZONE.into(),
            resize_to: "t3.small".into(),
            unknown_id: "i-0123456789abcdef0".into(),
            image: "ami-0b1e2a3d4c5f60a01".into(),
        }
    }

    async fn provider(&self, owner: &str) -> orca_machines::Result<Box<dyn Provider>> {
        Ok(Box::new(
            common::provider(common::builder(&self.seed, &self.proxy.url), owner).await?,
        ))
    }

    async fn paged_provider(&self, owner: &str, page_size: u32) -> Hook<Box<dyn Provider>> {
        if page_size != 1 {
            return Err(Skip::because(format!(
                "the harness pages by 1 instance, not {page_size}"
            )));
        }
        // The driver asks for EC2's smallest page (5); the proxy answers one instance a page.
        let p = common::provider(
            common::builder(&self.seed, &self.paged.url).page_size(orca_ec2::config::MIN_PAGE_SIZE),
            owner,
        )
        .await
        .map_err(|e| Skip::because(e.to_string()))?;
        Ok(Box::new(p))
    }

    async fn exhaust_stock(&self, machine_type: &str, location: &str) -> Hook<()> {
        let subnet = &self.seed.subnets[location];
        self.proxy.inject(
            rule(
                "RunInstances",
                ec2_error(500, "InsufficientInstanceCapacity"),
                u32::MAX,
            )
            .when_form("InstanceType", machine_type)
            .when_form("SubnetId", subnet),
        );
        Ok(())
    }

    async fn restore_stock(&self, _machine_type: &str, _location: &str) -> Hook<()> {
        self.proxy.clear("RunInstances");
        Ok(())
    }

    async fn lose_next_create_answer(&self) -> Hook<()> {
        self.proxy
            .inject(rule("RunInstances", Fault::DropAnswer, 1));
        Ok(())
    }

    async fn requests(&self) -> Hook<u64> {
        Ok(self.proxy.requests())
    }

    async fn delay_visibility(&self, delay: Duration) -> Hook<()> {
        self.proxy.set_visibility_delay(delay);
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_against_moto() {
    let Some(moto) = common::moto("conformance_against_moto") else {
        return;
    };
    let seed = common::seed(&moto).await;
    let proxy = Proxy::start(&moto).await;
    let paged = proxy.paged(1).await;
    let h = MotoHarness { seed, proxy, paged };
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
