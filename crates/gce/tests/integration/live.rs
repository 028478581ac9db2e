//! The conformance suite against a real Compute Engine project. Runs only with `ORCA_TEST_LIVE=gce`
//! and the `ORCA_GCE_*` settings (see the README); never in CI. Makes and deletes a few small VMs.
//!
//! ```sh
//! ORCA_TEST_LIVE=gce ORCA_GCE_PROJECT=... ORCA_GCE_ZONE=europe-west4-a ORCA_GCE_NETWORK=... \
//!   ORCA_GCE_SUBNET=... ORCA_GCE_CREDENTIALS_FILE=/path/sa.json \
//!   cargo test -p orca-gce --test live -- --nocapture
//! ```

use async_trait::async_trait;
use orca_gce::{Config, GceProvider};
use orca_machines::Provider;
use orca_machines::conformance::{Harness, Hook, Setup, run_all};

struct Live {
    config: Config,
}

impl Live {
    /// The zone the suite makes machines in: `ORCA_GCE_ZONE`, or `ORCA_GCE_LIVE_ZONE` for a provider
    /// of every zone.
    fn zone(&self) -> String {
        self.config
            .zone
            .clone()
            .or_else(|| std::env::var("ORCA_GCE_LIVE_ZONE").ok())
            .unwrap_or_else(|| "europe-west4-a".into())
    }
}

#[async_trait]
impl Harness for Live {
    fn name(&self) -> String {
        format!("gce-live ({})", self.zone())
    }

    fn setup(&self) -> Setup {
        let var = |k: &str, d: &str| std::env::var(k).unwrap_or_else(|_| d.to_string());
        Setup {
            amd64_type: var("ORCA_GCE_LIVE_AMD64_TYPE", "e2-small"),
            arm64_type: var("ORCA_GCE_LIVE_ARM64_TYPE", "t2a-standard-1"),
            location: self.zone(),
            resize_to: var("ORCA_GCE_LIVE_RESIZE_TO", "e2-medium"),
            unknown_id: format!("{}:orca-no-such-vm-zz9", self.zone()),
            image: "projects/ubuntu-os-cloud/global/images/family/ubuntu-2404-lts-amd64".into(),
            unoffered: None,
            arm64_image: Some(
                "projects/ubuntu-os-cloud/global/images/family/ubuntu-2404-lts-arm64".into(),
            ),
        }
    }

    async fn provider(&self, owner: &str) -> orca_machines::Result<Box<dyn Provider>> {
        Ok(Box::new(
            GceProvider::new(self.config.clone(), owner).await?,
        ))
    }

    async fn paged_provider(&self, owner: &str, page_size: u32) -> Hook<Box<dyn Provider>> {
        let mut config = self.config.clone();
        config.page_size = page_size;
        GceProvider::new(config, owner)
            .await
            .map(|p| Box::new(p) as Box<dyn Provider>)
            .map_err(|e| orca_machines::conformance::Skip::because(e.to_string()))
    }
}

#[tokio::test]
async fn conformance_live() {
    if std::env::var("ORCA_TEST_LIVE").ok().as_deref() != Some("gce") {
        println!(
            "skipped: set ORCA_TEST_LIVE=gce and the ORCA_GCE_* settings to run against a real project"
        );
        return;
    }
    let config = Config::from_env().expect("ORCA_GCE_* settings");
    let report = run_all(&Live { config }).await;
    report.assert_passed();
}
