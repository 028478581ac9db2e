//! The conformance suite against a real AWS account: only with `ORCA_TEST_LIVE=ec2`, never under CI.
//! It makes a few of the smallest instances and deletes them (cents). Settings come from the
//! environment as for `orca_ec2::from_env` (see the README for the recipe).

use async_trait::async_trait;
use orca_machines::Provider;
use orca_machines::conformance::{Harness, Hook, Setup, Skip, run_all};

struct Live {
    location: String,
}

fn var(k: &str, default: &str) -> String {
    std::env::var(k)
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| default.to_string())
}

#[async_trait]
impl Harness for Live {
    fn name(&self) -> String {
        "aws".into()
    }

    fn setup(&self) -> Setup {
        Setup {
            amd64_type: var("ORCA_TEST_EC2_AMD64_TYPE", "t3.micro"),
            arm64_type: var("ORCA_TEST_EC2_ARM64_TYPE", "t4g.micro"),
            location: self.location.clone(),
            resize_to: var("ORCA_TEST_EC2_RESIZE_TO", "t3.small"),
            unknown_id: "i-0123456789abcdef0".into(),
            // An AMI of the region for the amd64 type (Canonical's Ubuntu 24.04 of the region, say).
            image: var("ORCA_TEST_EC2_IMAGE", ""),
            unoffered: None,
            arm64_image: None,
        }
    }

    async fn provider(&self, owner: &str) -> orca_machines::Result<Box<dyn Provider>> {
        Ok(Box::new(orca_ec2::from_env(owner).await?))
    }

    async fn paged_provider(&self, owner: &str, page_size: u32) -> Hook<Box<dyn Provider>> {
        if page_size < orca_ec2::config::MIN_PAGE_SIZE as u32 {
            return Err(Skip::because(
                "EC2 serves no page under 5 instances; paging by one instance is proven against \
                 moto behind the proxy",
            ));
        }
        let config = orca_ec2::ConfigBuilder::from_env()
            .page_size(page_size as i32)
            .build()
            .map_err(|e| Skip::because(e.to_string()))?;
        let p = orca_ec2::Ec2Provider::new(config, owner)
            .await
            .map_err(|e| Skip::because(e.to_string()))?;
        Ok(Box::new(p))
    }
}

#[tokio::test]
async fn conformance_against_aws() {
    let live = std::env::var("ORCA_TEST_LIVE").unwrap_or_default();
    if !live.split(',').any(|k| k.trim() == "ec2") {
        return;
    }
    if std::env::var_os("CI").is_some() {
        panic!(
            "ORCA_TEST_LIVE=ec2 is set under CI: live runs against a real account are never made in CI"
        );
    }
    let subnets = std::env::var(orca_ec2::config::SUBNETS_ENV).unwrap_or_default();
    let location = var(
        "ORCA_TEST_EC2_LOCATION",
        subnets
            .split(',')
            .next()
            .and_then(|p| p.split_once('='))
            .map(|(l, _)| l.trim())
            .unwrap_or(""),
    );
    let report = run_all(&Live { location }).await;
    report.assert_passed();
}
