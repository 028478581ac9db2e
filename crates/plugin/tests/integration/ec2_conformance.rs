//! The core conformance suite against the plugin client, through `soul-cloud-ec2` processes on moto
//! behind the proxy that makes it behave as EC2 (`orca_fakes::moto`): region, static credentials,
//! subnets, security group, instance profile and endpoint go in each child's environment. Without
//! moto (`scripts/with-moto`) the test prints SKIPPED, unless `CI` is set, as the driver's own do.

use crate::common;

use std::time::Duration;

use async_trait::async_trait;
use orca_fakes::moto::{ec2_error, rule, Fault, Proxy, Seed, REGION, ZONE};
use orca_machines::conformance::{extensions, run_all, Harness, Hook, Setup, Skip};
use orca_machines::{Provider, Settings};
use orca_plugin::{PluginCommand, PluginProvider};

/// A secret handed to the plugin, which must never show.
const SECRET: &str = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY";

struct MotoHarness {
    seed: Seed,
    proxy: Proxy,
    /// The same proxy paging listings by one instance, whatever page the driver asks for (EC2
    /// itself serves no page under 5).
    paged: Proxy,
}

impl MotoHarness {
    fn settings(&self, endpoint: &str) -> Settings {
        let subnets: Vec<String> = self
            .seed
            .subnets
            .iter()
            .map(|(zone, subnet)| format!("{zone}={subnet}"))
            .collect();
        Settings::new()
            .with("AWS_REGION", REGION)
            .with("AWS_ACCESS_KEY_ID", "AKIDORCATEST")
            .with("AWS_SECRET_ACCESS_KEY", SECRET)
            .with("ORCA_EC2_SUBNETS", subnets.join(","))
            .with("ORCA_EC2_SECURITY_GROUP", &self.seed.security_group)
            .with("ORCA_EC2_INSTANCE_PROFILE", &self.seed.instance_profile)
            .with("ORCA_EC2_ENDPOINT", endpoint)
            .with("ORCA_POLL_INTERVAL", "20ms")
    }

    async fn start(&self, owner: &str, endpoint: &str) -> orca_machines::Result<Box<dyn Provider>> {
        let command = PluginCommand::new(common::EC2, owner).settings(self.settings(endpoint));
        Ok(Box::new(PluginProvider::start(command).await?))
    }
}

#[async_trait]
impl Harness for MotoHarness {
    fn name(&self) -> String {
        "plugin soul-cloud-ec2 on moto".into()
    }

    fn setup(&self) -> Setup {
        Setup {
            amd64_type: "t3.micro".into(),
            arm64_type: "t4g.micro".into(),
            location: ZONE.into(),
            resize_to: "t3.small".into(),
            unknown_id: "i-0123456789abcdef0".into(),
            image: "ami-0b1e2a3d4c5f60a01".into(),
        }
    }

    async fn provider(&self, owner: &str) -> orca_machines::Result<Box<dyn Provider>> {
        self.start(owner, &self.proxy.url).await
    }

    async fn paged_provider(&self, owner: &str, page_size: u32) -> Hook<Box<dyn Provider>> {
        if page_size != 1 {
            return Err(Skip::because(format!(
                "the harness pages by 1 instance, not {page_size}"
            )));
        }
        Ok(self
            .start(owner, &self.paged.url)
            .await
            .expect("valid settings"))
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
async fn conformance_through_soul_cloud_ec2() {
    let Some(moto) = orca_fakes::moto::moto("conformance_through_soul_cloud_ec2") else {
        return;
    };
    let seed = orca_fakes::moto::seed(&moto).await;
    let proxy = Proxy::start(&moto).await;
    let paged = proxy.paged(1).await;
    let h = MotoHarness { seed, proxy, paged };
    let report = run_all(&h).await;
    report.assert_passed();
    assert!(
        report.skipped().is_empty(),
        "every hook is provided: {:?}",
        report.skipped()
    );
    // EC2 offers label changes only: the plugin carries it.
    let p = h.provider("stack-1").await.unwrap();
    assert_eq!(extensions(&*p), ["machine_labels"]);
    // The lost answer was really lost, and the retried create (the same ClientToken) adopted it:
    // exactly one RunInstances answer was dropped.
    let dropped = h
        .proxy
        .of("RunInstances")
        .into_iter()
        .filter(|s| s.faulted && s.status == 200)
        .count();
    assert_eq!(dropped, 1, "exactly one answer was dropped");
}
