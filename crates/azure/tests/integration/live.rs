//! The conformance suite against a real Azure subscription. Runs only with `ORCA_TEST_LIVE=azure` and
//! the settings of the README; never in CI. It makes and deletes real VMs.

use async_trait::async_trait;
use orca_machines::conformance::{run_all, Harness, Setup};
use orca_machines::{Provider, Result};

struct Live;

#[async_trait]
impl Harness for Live {
    fn name(&self) -> String {
        "azure-live".into()
    }

    fn setup(&self) -> Setup {
        Setup {
            amd64_type: "Standard_B2s_v2".into(),
            arm64_type: "Standard_B2pts_v2".into(),
            location: std::env::var("ORCA_AZURE_LIVE_LOCATION")
                .unwrap_or_else(|_| "westeurope".into()),
            resize_to: "Standard_B2as_v2".into(),
            unknown_id: "orca-no-such-vm".into(),
            image: "Canonical:ubuntu-24_04-lts:server:latest".into(),
            unoffered: None,
            arm64_image: None,
        }
    }

    async fn provider(&self, owner: &str) -> Result<Box<dyn Provider>> {
        Ok(Box::new(orca_azure::from_env(owner).await?))
    }
}

#[tokio::test]
async fn conformance_live() {
    if std::env::var("ORCA_TEST_LIVE").as_deref() != Ok("azure") {
        println!(
            "skipped: set ORCA_TEST_LIVE=azure (and the README's settings) to run against Azure"
        );
        return;
    }
    let report = run_all(&Live).await;
    report.assert_passed();
}
