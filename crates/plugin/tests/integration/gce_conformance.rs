//! The core conformance suite against the plugin client, through `soul-cloud-gce` processes on the
//! fake Compute Engine API, on a single-zone provider and on one of every zone: the settings
//! (service account key file, page size) go in each child's environment, the hooks act on the fake.

use crate::common;

use async_trait::async_trait;
use orca_fakes::conformance::{GceHarness, Providers};
use orca_fakes::gce::{FakeGce, ZONE};
use orca_machines::conformance::{extensions, run_all, Harness};
use orca_machines::{Provider, Settings};
use orca_plugin::{PluginCommand, PluginProvider};

/// `soul-cloud-gce` processes, of one zone or of every zone.
struct Plugin {
    single_zone: bool,
    /// The service account key, in a file as an operator hands it over.
    _dir: tempfile::TempDir,
    key_file: std::path::PathBuf,
}

impl Plugin {
    fn settings(&self, fake: &FakeGce) -> Settings {
        let mut s = orca_fakes::gce::driver_settings(fake, &self.key_file);
        if !self.single_zone {
            s.remove("ORCA_GCE_ZONE");
        }
        s
    }

    async fn start(
        &self,
        owner: &str,
        settings: Settings,
    ) -> orca_machines::Result<Box<dyn Provider>> {
        let command = PluginCommand::new(common::GCE, owner).settings(settings);
        Ok(Box::new(PluginProvider::start(command).await?))
    }
}

#[async_trait]
impl Providers<FakeGce> for Plugin {
    async fn provider(
        &self,
        fake: &FakeGce,
        owner: &str,
    ) -> orca_machines::Result<Box<dyn Provider>> {
        self.start(owner, self.settings(fake)).await
    }

    async fn paged_provider(
        &self,
        fake: &FakeGce,
        owner: &str,
        page_size: u32,
    ) -> orca_machines::Result<Box<dyn Provider>> {
        let settings = self
            .settings(fake)
            .with("ORCA_GCE_PAGE_SIZE", page_size.to_string());
        self.start(owner, settings).await
    }
}

async fn conformance(single_zone: bool) {
    let fake = FakeGce::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("service-account.json");
    std::fs::write(&key_file, fake.service_account_json()).unwrap();
    let name = if single_zone {
        "plugin soul-cloud-gce on gce-fake (one zone)"
    } else {
        "plugin soul-cloud-gce on gce-fake (every zone)"
    };
    let plugin = Plugin {
        single_zone,
        _dir: dir,
        key_file,
    };
    let h = GceHarness::new(name, fake, plugin);
    let report = run_all(&h).await;
    report.assert_passed();
    assert!(
        report.skipped().is_empty(),
        "every hook is provided: {:?}",
        report.skipped()
    );
    // Compute Engine offers label changes and the network's firewall rules: the plugin carries both.
    let p = h.provider("stack-1").await.unwrap();
    assert_eq!(extensions(&*p), ["machine_labels", "firewall_rules"]);
    assert!(
        h.fake.instance_names(ZONE).is_empty(),
        "the suite cleans up"
    );
    assert!(h.fake.disk_names(ZONE).is_empty(), "every disk is gone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_through_soul_cloud_gce_on_one_zone() {
    conformance(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_through_soul_cloud_gce_on_every_zone() {
    conformance(false).await;
}
