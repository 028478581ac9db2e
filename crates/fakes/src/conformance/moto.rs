//! moto's hooks, through the proxy that makes it behave as EC2 ([`crate::moto`]): pages of one
//! instance (a second proxy on the same state), no stock, a lost create answer, delayed visibility,
//! and every request counted.

use std::time::Duration;

use async_trait::async_trait;
use orca_machines::conformance::{Harness, Hook, Setup, Skip};
use orca_machines::{MachineSpec, Provider, Result};

use super::{paged, Providers};
use crate::moto::{ec2_error, rule, seed, Fault, Proxy, Seed, ZONE, ZONE_WITHOUT_T4G};

/// Where an EC2 provider goes: moto's seeding (subnets, security group, instance profile) and the
/// address to call, the proxy's or its paged twin's.
#[derive(Debug, Clone)]
pub struct Target {
    /// What the driver needs in moto.
    pub seed: Seed,
    /// The proxy to call.
    pub endpoint: String,
}

/// The conformance harness on moto behind the proxy, with every hook EC2 can have.
pub struct MotoHarness<P> {
    /// moto's seeding.
    pub seed: Seed,
    /// The proxy every provider calls, for the test's own assertions after the run.
    pub proxy: Proxy,
    /// The same proxy paging listings by one instance, whatever page the driver asks for: EC2
    /// itself serves no page under 5.
    paged: Proxy,
    name: String,
    providers: P,
}

impl<P: Providers<Target>> MotoHarness<P> {
    /// A harness named `name` in the output on `moto` (its address), seeded, behind a proxy of its
    /// own; `providers` makes its providers.
    pub async fn start(name: impl Into<String>, moto: &str, providers: P) -> Self {
        let seed = seed(moto).await;
        let proxy = Proxy::start(moto).await;
        let paged = proxy.paged(1).await;
        MotoHarness {
            seed,
            proxy,
            paged,
            name: name.into(),
            providers,
        }
    }

    fn target(&self, proxy: &Proxy) -> Target {
        Target {
            seed: self.seed.clone(),
            endpoint: proxy.url.clone(),
        }
    }
}

#[async_trait]
impl<P: Providers<Target>> Harness for MotoHarness<P> {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn setup(&self) -> Setup {
        Setup {
            amd64_type: "t3.micro".into(),
            arm64_type: "t4g.micro".into(),
            location: ZONE.into(),
            resize_to: "t3.small".into(),
            unknown_id: "i-0123456789abcdef0".into(),
            image: "ami-0b1e2a3d4c5f60a01".into(),
            unoffered: Some(("t4g.micro".into(), ZONE_WITHOUT_T4G.into())),
            arm64_image: Some("ami-0b1e2a3d4c5f60b02".into()),
        }
    }

    async fn provider(&self, owner: &str) -> Result<Box<dyn Provider>> {
        self.providers
            .provider(&self.target(&self.proxy), owner)
            .await
    }

    async fn paged_provider(&self, owner: &str, page_size: u32) -> Hook<Box<dyn Provider>> {
        if page_size != 1 {
            return Err(Skip::because(format!(
                "the harness pages by 1 instance, not {page_size}"
            )));
        }
        paged(&self.providers, &self.target(&self.paged), owner, page_size).await
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

    async fn exceed_quota(&self) -> Hook<()> {
        // EC2's answer to a launch past the account's instance (vCPU) limit.
        self.proxy.inject(rule(
            "RunInstances",
            ec2_error(400, "InstanceLimitExceeded"),
            u32::MAX,
        ));
        Ok(())
    }

    async fn restore_quota(&self) -> Hook<()> {
        self.proxy.clear("RunInstances");
        Ok(())
    }

    async fn lose_next_create_answer(&self) -> Hook<()> {
        self.proxy
            .inject(rule("RunInstances", Fault::DropAnswer, 1));
        Ok(())
    }

    async fn refuse_next_create_unserved(&self) -> Hook<()> {
        // The next RunInstances is answered 503 by the proxy: it never reaches moto.
        self.proxy
            .inject(rule("RunInstances", ec2_error(503, "Unavailable"), 1));
        Ok(())
    }

    async fn requests(&self) -> Hook<u64> {
        Ok(self.proxy.requests())
    }

    async fn delay_visibility(&self, delay: Duration) -> Hook<()> {
        self.proxy.set_visibility_delay(delay);
        Ok(())
    }

    async fn leave_pieces(&self, _owner: &str, _spec: &MachineSpec) -> Hook<Vec<String>> {
        // EC2 makes an instance in one call (RunInstances), with its interface and volume: a create stopped before its machine leaves nothing.
        Ok(Vec::new())
    }

    async fn pieces_standing(&self, _pieces: &[String]) -> Hook<Vec<String>> {
        Ok(Vec::new())
    }
}
