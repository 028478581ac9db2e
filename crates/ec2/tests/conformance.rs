//! The core conformance suite against moto, through the EC2 driver and a fault-injecting proxy: two
//! owners (and the empty one) on one account, page size 1, no stock, a lost create answer, and every
//! request counted.

mod support;

use async_trait::async_trait;
use orca_machines::conformance::{run_all, Harness, Hook, Setup, Skip};
use orca_machines::Provider;
use support::{Fault, Proxy, Rule, Seed};

struct MotoHarness {
    seed: Seed,
    proxy: Proxy,
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
            location: support::ZONE.into(),
            resize_to: "t3.small".into(),
            unknown_id: "i-0123456789abcdef0".into(),
            image: "ami-0b1e2a3d4c5f60a01".into(),
        }
    }

    async fn provider(&self, owner: &str) -> orca_machines::Result<Box<dyn Provider>> {
        Ok(Box::new(
            self.seed.builder(owner, &self.proxy.url).build().await?,
        ))
    }

    async fn paged_provider(&self, owner: &str, page_size: u32) -> Hook<Box<dyn Provider>> {
        let p = self
            .seed
            .builder(owner, &self.proxy.url)
            .page_size(page_size as i32)
            .build()
            .await
            .map_err(|e| Skip::because(e.to_string()))?;
        Ok(Box::new(p))
    }

    async fn exhaust_stock(&self, machine_type: &str, location: &str) -> Hook<()> {
        let subnet = &self.seed.subnets[location];
        self.proxy.inject(
            Rule::new(
                "RunInstances",
                Fault::error(500, "InsufficientInstanceCapacity"),
                u32::MAX,
            )
            .when("InstanceType", machine_type)
            .when("SubnetId", subnet),
        );
        Ok(())
    }

    async fn restore_stock(&self, _machine_type: &str, _location: &str) -> Hook<()> {
        self.proxy.clear("RunInstances");
        Ok(())
    }

    async fn lose_next_create_answer(&self) -> Hook<()> {
        self.proxy
            .inject(Rule::new("RunInstances", Fault::DropAnswer, 1));
        Ok(())
    }

    async fn requests(&self) -> Hook<u64> {
        Ok(self.proxy.requests())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_against_moto() {
    let Some(moto) = support::moto("conformance_against_moto") else {
        return;
    };
    let seed = support::seed(&moto).await;
    let proxy = Proxy::start(&moto).await;
    let h = MotoHarness { seed, proxy };
    let report = run_all(&h).await;
    report.assert_passed();
    assert!(
        report.skipped().is_empty(),
        "skipped: {:?}",
        report.skipped()
    );
    // The lost answer was really lost, and the retried create did not send a second RunInstances for
    // the same name: the driver found what the first one made.
    let dropped: Vec<_> = h
        .proxy
        .of("RunInstances")
        .into_iter()
        .filter(|s| s.faulted && s.status == 200)
        .collect();
    assert_eq!(dropped.len(), 1, "exactly one answer was dropped");
    let name_tag = |s: &support::Seen| {
        s.params
            .iter()
            .find(|(k, v)| {
                k.starts_with("TagSpecification.1.Tag.") && k.ends_with(".Key") && *v == "Name"
            })
            .and_then(|(k, _)| s.params.get(&k.replace(".Key", ".Value")).cloned())
    };
    let lost_name = name_tag(&dropped[0]);
    let sent_for_it = h
        .proxy
        .of("RunInstances")
        .iter()
        .filter(|s| name_tag(s) == lost_name)
        .count();
    assert_eq!(
        sent_for_it, 1,
        "RunInstances for {lost_name:?} was sent {sent_for_it} times"
    );
}
