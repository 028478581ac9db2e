//! The core conformance suite against the plugin client, through `soul-cloud-fake` processes that
//! share one simulated cloud by its state file, with every hook: the file carries stock, visibility
//! and the network; the fake's console (FakeControl) carries lost answers and request counts.

use crate::common;

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use async_trait::async_trait;
use orca_machines::conformance::{extensions, run_all, Harness, Hook, Setup, Skip, EXTENSIONS};
use orca_machines::ext::FirewallRule;
use orca_machines::memory::MemoryCloud;
use orca_machines::{MachineSpec, Provider};
use orca_plugin::fake::PAGE_SIZE_ENV;
use orca_plugin::proto::fake::fake_control_client::FakeControlClient;
use orca_plugin::proto::fake::{InjectRequest, RequestsRequest};
use orca_plugin::{PluginCommand, PluginProvider};

struct PluginHarness {
    _dir: tempfile::TempDir,
    state: std::path::PathBuf,
    cloud: MemoryCloud,
    /// Every plugin started, with the requests it had served when last asked.
    plugins: Mutex<Vec<(Weak<PluginProvider>, u64)>>,
}

impl PluginHarness {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("cloud.json");
        let cloud = MemoryCloud::persistent(&state).unwrap();
        PluginHarness {
            _dir: dir,
            state,
            cloud,
            plugins: Mutex::new(Vec::new()),
        }
    }

    async fn start(&self, command: PluginCommand) -> orca_machines::Result<Box<dyn Provider>> {
        let command = command.setting(orca::FAKE_STATE_ENV, self.state.to_str().unwrap());
        let p = Arc::new(PluginProvider::start(command).await?);
        self.plugins.lock().unwrap().push((Arc::downgrade(&p), 0));
        Ok(Box::new(p))
    }

    /// Every plugin that runs meets `fault_json` (a fault of the in-memory cloud) on its next
    /// create: the check creates through one.
    async fn fault_next_create(&self, fault_json: &str) -> Hook<()> {
        for (_, p) in self.live() {
            let refused = console(&p)
                .await?
                .inject(InjectRequest {
                    operation: "create".into(),
                    fault_json: fault_json.into(),
                    times: 1,
                })
                .await
                .map_err(|s| Skip::because(s.to_string()))?
                .into_inner()
                .refused;
            assert!(refused.is_empty(), "{refused}");
        }
        Ok(())
    }

    fn live(&self) -> Vec<(usize, Arc<PluginProvider>)> {
        let plugins = self.plugins.lock().unwrap();
        plugins
            .iter()
            .enumerate()
            .filter_map(|(i, (w, _))| w.upgrade().map(|p| (i, p)))
            .collect()
    }
}

async fn console(p: &PluginProvider) -> Hook<FakeControlClient<tonic::transport::Channel>> {
    let channel = p
        .channel()
        .await
        .map_err(|e| Skip::because(e.to_string()))?;
    Ok(FakeControlClient::new(channel))
}

#[async_trait]
impl Harness for PluginHarness {
    fn name(&self) -> String {
        "plugin soul-cloud-fake".into()
    }

    fn setup(&self) -> Setup {
        Setup {
            amd64_type: "amd64-small".into(),
            arm64_type: "arm64-small".into(),
            location: "zone-a".into(),
            resize_to: "amd64-large".into(),
            unknown_id: "m-99999999".into(),
            image: "ubuntu-24.04".into(),
            unoffered: Some(("amd64-metal".into(), "zone-a".into())),
            arm64_image: Some("ubuntu-24.04-arm64".into()),
        }
    }

    async fn provider(&self, owner: &str) -> orca_machines::Result<Box<dyn Provider>> {
        self.start(PluginCommand::new(common::FAKE, owner)).await
    }

    async fn paged_provider(&self, owner: &str, page_size: u32) -> Hook<Box<dyn Provider>> {
        let command =
            PluginCommand::new(common::FAKE, owner).setting(PAGE_SIZE_ENV, page_size.to_string());
        self.start(command)
            .await
            .map_err(|e| Skip::because(e.to_string()))
    }

    async fn leave_pieces(&self, _owner: &str, _spec: &MachineSpec) -> Hook<Vec<String>> {
        // The in-memory cloud's create makes its machine and nothing beside it.
        Ok(Vec::new())
    }

    async fn pieces_standing(&self, _pieces: &[String]) -> Hook<Vec<String>> {
        Ok(Vec::new())
    }

    async fn exhaust_stock(&self, machine_type: &str, location: &str) -> Hook<()> {
        self.cloud.set_stock(machine_type, location, 0);
        Ok(())
    }

    async fn restore_stock(&self, machine_type: &str, location: &str) -> Hook<()> {
        self.cloud.unlimited_stock(machine_type, location);
        Ok(())
    }

    async fn exceed_quota(&self) -> Hook<()> {
        self.cloud.set_machine_limit(Some(0));
        Ok(())
    }

    async fn restore_quota(&self) -> Hook<()> {
        self.cloud.set_machine_limit(None);
        Ok(())
    }

    async fn lose_next_create_answer(&self) -> Hook<()> {
        self.fault_next_create("\"lose_answer\"").await
    }

    async fn refuse_next_create_unserved(&self) -> Hook<()> {
        // A transient error the cloud answers before acting: the plugin's provider retries it.
        self.fault_next_create(r#"{"error":"transient"}"#).await
    }

    async fn requests(&self) -> Hook<u64> {
        for (i, p) in self.live() {
            let n = console(&p)
                .await?
                .requests(RequestsRequest {})
                .await
                .map_err(|s| Skip::because(s.to_string()))?
                .into_inner()
                .requests;
            self.plugins.lock().unwrap()[i].1 = n;
        }
        Ok(self.plugins.lock().unwrap().iter().map(|(_, n)| n).sum())
    }

    async fn delay_visibility(&self, delay: Duration) -> Hook<()> {
        self.cloud.set_visibility_delay(delay);
        Ok(())
    }

    async fn admitted_sources(&self, group: &str, location: &str) -> Hook<Option<Vec<String>>> {
        Ok(self
            .cloud
            .subnet_group(location)
            .rules
            .into_iter()
            .find(|r| r.name == group)
            .map(|r| r.sources))
    }

    async fn put_firewall_rule(&self, rule: FirewallRule) -> Hook<()> {
        self.cloud.put_firewall_rule(rule);
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_through_soul_cloud_fake() {
    let h = PluginHarness::new();
    let report = run_all(&h).await;
    report.assert_passed();
    assert!(
        report.skipped().is_empty(),
        "every hook is provided: {:?}",
        report.skipped()
    );
    // The extension checks pass where a provider offers none: the plugin carries all four.
    let p = h.provider("stack-1").await.unwrap();
    assert_eq!(extensions(&*p), EXTENSIONS);
    assert!(
        h.cloud.all_machines().is_empty(),
        "the suite cleans up: {:?}",
        h.cloud.all_machines()
    );
}
