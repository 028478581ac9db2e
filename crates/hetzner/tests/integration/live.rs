//! The conformance suite against a real Hetzner Cloud project. Never in CI: it runs only when
//! `ORCA_TEST_LIVE=hetzner` and `HCLOUD_TOKEN` are set, and is `#[ignore]`d besides, so it needs
//! `--ignored` too:
//!
//! ```text
//! ORCA_TEST_LIVE=hetzner HCLOUD_TOKEN=... cargo test -p orca-hetzner --test live -- --ignored --nocapture
//! ```
//!
//! It makes and deletes a few of the cheapest servers (`cx23`, `cax11`; location
//! `ORCA_HCLOUD_LIVE_LOCATION`, default `hel1`), each for well under an hour.

use async_trait::async_trait;
use orca_hetzner::{Config, ConfigBuilder, HetznerProvider};
use orca_machines::conformance::{run_all, Harness, Hook, Setup};
use orca_machines::Provider;

struct Live {
    location: String,
}

#[async_trait]
impl Harness for Live {
    fn name(&self) -> String {
        "hetzner-live".into()
    }

    fn setup(&self) -> Setup {
        Setup {
            amd64_type: "cx23".into(),
            arm64_type: "cax11".into(),
            location: self.location.clone(),
            resize_to: "cx33".into(),
            unknown_id: "999999999".into(),
            image: "ubuntu-24.04".into(),
            unoffered: None,
            arm64_image: None,
        }
    }

    async fn provider(&self, owner: &str) -> orca_machines::Result<Box<dyn Provider>> {
        Ok(Box::new(
            HetznerProvider::new(Config::from_env()?, owner).await?,
        ))
    }

    async fn paged_provider(&self, owner: &str, page_size: u32) -> Hook<Box<dyn Provider>> {
        let config = ConfigBuilder::from_env()
            .page_size(page_size)
            .build()
            .expect("settings");
        Ok(Box::new(
            HetznerProvider::new(config, owner).await.expect("owner"),
        ))
    }
}

#[tokio::test]
#[ignore = "live: needs ORCA_TEST_LIVE=hetzner and HCLOUD_TOKEN; never in CI"]
async fn conformance_against_a_real_project() {
    if std::env::var("ORCA_TEST_LIVE").as_deref() != Ok("hetzner") {
        println!("skipped: ORCA_TEST_LIVE is not 'hetzner'");
        return;
    }
    assert!(
        std::env::var_os("HCLOUD_TOKEN").is_some(),
        "ORCA_TEST_LIVE=hetzner needs HCLOUD_TOKEN"
    );
    let h = Live {
        location: std::env::var("ORCA_HCLOUD_LIVE_LOCATION").unwrap_or_else(|_| "hel1".into()),
    };
    let report = run_all(&h).await;
    for (check, why) in report.skipped() {
        println!("skipped on a real project: {check}: {why}");
    }
    report.assert_passed();
}
