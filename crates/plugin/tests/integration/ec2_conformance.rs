//! The core conformance suite against the plugin client, through `soul-cloud-ec2` processes on moto
//! behind the proxy that makes it behave as EC2 (`orca_fakes::moto`): region, static credentials,
//! subnets, security group, instance profile and endpoint go in each child's environment. Without
//! moto (`scripts/with-moto`) the test prints SKIPPED, unless `CI` is set, as the driver's own do.

use crate::common;

use async_trait::async_trait;
use orca_fakes::conformance::{MotoHarness, Providers, Target};
use orca_machines::conformance::{extensions, run_all, Harness};
use orca_machines::Provider;
use orca_plugin::{PluginCommand, PluginProvider};

/// `soul-cloud-ec2` processes, with the region, static credentials, subnets, security group,
/// instance profile and endpoint in their environment.
struct Plugin;

#[async_trait]
impl Providers<Target> for Plugin {
    async fn provider(&self, on: &Target, owner: &str) -> orca_machines::Result<Box<dyn Provider>> {
        // The driver's own suite on moto waits on EC2's eventual consistency this long too.
        let settings = orca_fakes::moto::driver_settings(&on.seed, &on.endpoint)
            .with("ORCA_POLL_INTERVAL", "20ms")
            .with("ORCA_VISIBILITY_WINDOW", "20s")
            .with("ORCA_EC2_CONFIRM_NOT_FOUND", "1500ms");
        let command = PluginCommand::new(common::EC2, owner).settings(settings);
        Ok(Box::new(PluginProvider::start(command).await?))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_through_soul_cloud_ec2() {
    let Some(moto) = orca_fakes::moto::moto("conformance_through_soul_cloud_ec2") else {
        return;
    };
    let h = MotoHarness::start("plugin soul-cloud-ec2 on moto", &moto, Plugin).await;
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
