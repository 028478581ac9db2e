//! The core conformance suite against the plugin client, through `soul-cloud-hetzner` processes
//! on the fake Hetzner API: the settings go in each child's environment, the hooks act on the fake.

use crate::common;

use std::time::Duration;

use async_trait::async_trait;
use axum::http::Method;
use orca_fakes::hetzner::FakeHetzner;
use orca_fakes::{Fault, Rule};
use orca_machines::conformance::{extensions, run_all, Harness, Hook, Setup};
use orca_machines::{Provider, Settings};
use orca_plugin::{PluginCommand, PluginProvider};

struct HetznerHarness {
    fake: FakeHetzner,
}

impl HetznerHarness {
    fn settings(&self) -> Settings {
        Settings::new()
            .with("HCLOUD_TOKEN", self.fake.token())
            .with("ORCA_HCLOUD_ENDPOINT", self.fake.url())
            .with("ORCA_HCLOUD_SSH_KEYS", "orca-test")
            .with("ORCA_HCLOUD_FIREWALL", "orca-fw")
            .with("ORCA_HCLOUD_NETWORK", "orca-net")
            .with("ORCA_POLL_INTERVAL", "1ms")
    }
}

#[async_trait]
impl Harness for HetznerHarness {
    fn name(&self) -> String {
        "plugin soul-cloud-hetzner on hetzner-fake".into()
    }

    fn setup(&self) -> Setup {
        Setup {
            amd64_type: "cx23".into(),
            arm64_type: "cax11".into(),
            location: "hel1".into(),
            resize_to: "cx33".into(),
            unknown_id: "999999999".into(),
            image: "ubuntu-24.04".into(),
        }
    }

    async fn provider(&self, owner: &str) -> orca_machines::Result<Box<dyn Provider>> {
        let command = PluginCommand::new(common::HETZNER, owner).settings(self.settings());
        Ok(Box::new(PluginProvider::start(command).await?))
    }

    async fn paged_provider(&self, owner: &str, page_size: u32) -> Hook<Box<dyn Provider>> {
        let settings = self
            .settings()
            .with("ORCA_HCLOUD_PAGE_SIZE", page_size.to_string());
        let command = PluginCommand::new(common::HETZNER, owner).settings(settings);
        Ok(Box::new(
            PluginProvider::start(command)
                .await
                .expect("valid settings"),
        ))
    }

    async fn exhaust_stock(&self, machine_type: &str, location: &str) -> Hook<()> {
        self.fake.set_no_stock(machine_type, location, true);
        Ok(())
    }

    async fn restore_stock(&self, machine_type: &str, location: &str) -> Hook<()> {
        self.fake.set_no_stock(machine_type, location, false);
        Ok(())
    }

    async fn lose_next_create_answer(&self) -> Hook<()> {
        self.fake.control().inject(Rule::new(
            Some(Method::POST),
            "/v1/servers",
            Fault::DropAnswer,
            1,
        ));
        Ok(())
    }

    async fn requests(&self) -> Hook<u64> {
        Ok(self.fake.control().requests())
    }

    async fn delay_visibility(&self, delay: Duration) -> Hook<()> {
        self.fake.set_visibility_delay(delay);
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_through_soul_cloud_hetzner() {
    let h = HetznerHarness {
        fake: FakeHetzner::start().await.unwrap(),
    };
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
    let h = HetznerHarness { fake };
    let settings = h.settings().with("ORCA_HCLOUD_PAGE_SIZE", "51");
    let command = PluginCommand::new(common::HETZNER, "stack-1").settings(settings);
    let e = PluginProvider::start(command).await.unwrap_err();
    match &e {
        orca_machines::Error::InvalidSettings { keys, .. } => {
            assert_eq!(keys, &["ORCA_HCLOUD_PAGE_SIZE"], "{e}")
        }
        other => panic!("{other:?}"),
    }
    assert!(e.to_string().contains("a number from 1 to 50"), "{e}");
    assert_eq!(h.fake.control().requests(), 0, "refused before any call");
}
