//! The core conformance suite against the plugin client, through `soul-cloud-hetzner` processes
//! on the fake Hetzner API: the settings go in each child's environment, the hooks act on the fake.

use crate::common;

use async_trait::async_trait;
use orca_fakes::conformance::{HetznerHarness, Providers};
use orca_fakes::hetzner::FakeHetzner;
use orca_machines::conformance::{extensions, run_all, Harness};
use orca_machines::{Provider, Settings};
use orca_plugin::{PluginCommand, PluginProvider};

/// What each child gets in its environment: the fake's address and token, its SSH key, firewall
/// and private network, and fast polling.
fn settings(fake: &FakeHetzner) -> Settings {
    orca_fakes::hetzner::driver_settings(fake)
        .with("ORCA_HCLOUD_SSH_KEYS", "orca-test")
        .with("ORCA_HCLOUD_FIREWALL", "orca-fw")
        .with("ORCA_HCLOUD_NETWORK", "orca-net")
        // Actions last a while under the suite: polled every 25 ms, within the rate limit.
        .with("ORCA_POLL_INTERVAL", "25ms")
}

/// `soul-cloud-hetzner` processes.
struct Plugin;

impl Plugin {
    async fn start(owner: &str, settings: Settings) -> orca_machines::Result<Box<dyn Provider>> {
        let command = PluginCommand::new(common::HETZNER, owner).settings(settings);
        Ok(Box::new(PluginProvider::start(command).await?))
    }
}

#[async_trait]
impl Providers<FakeHetzner> for Plugin {
    async fn provider(
        &self,
        fake: &FakeHetzner,
        owner: &str,
    ) -> orca_machines::Result<Box<dyn Provider>> {
        Plugin::start(owner, settings(fake)).await
    }

    async fn paged_provider(
        &self,
        fake: &FakeHetzner,
        owner: &str,
        page_size: u32,
    ) -> orca_machines::Result<Box<dyn Provider>> {
        let settings = settings(fake).with("ORCA_HCLOUD_PAGE_SIZE", page_size.to_string());
        Plugin::start(owner, settings).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_through_soul_cloud_hetzner() {
    let h = HetznerHarness::new(
        "plugin soul-cloud-hetzner on hetzner-fake",
        FakeHetzner::start().await.unwrap(),
        Plugin,
    );
    let report = run_all(&h).await;
    report.assert_passed();
    assert!(
        report.skipped().is_empty(),
        "every hook is provided: {:?}",
        report.skipped()
    );
    let p = h.provider("stack-1").await.unwrap();
    assert_eq!(extensions(&*p), ["machine_labels"]);
    assert!(
        h.fake.servers().is_empty(),
        "the suite cleans up: {} server(s) left",
        h.fake.servers().len()
    );
}

#[tokio::test]
async fn a_bad_page_size_is_named_by_the_plugins_handshake() {
    let fake = FakeHetzner::start().await.unwrap();
    let settings = settings(&fake).with("ORCA_HCLOUD_PAGE_SIZE", "51");
    let command = PluginCommand::new(common::HETZNER, "stack-1").settings(settings);
    let e = PluginProvider::start(command).await.unwrap_err();
    match &e {
        orca_machines::Error::InvalidSettings { keys, .. } => {
            assert_eq!(keys, &["ORCA_HCLOUD_PAGE_SIZE"], "{e}")
        }
        other => panic!("{other:?}"),
    }
    assert!(e.to_string().contains("a number from 1 to 50"), "{e}");
    assert_eq!(fake.control().requests(), 0, "refused before any call");
}
