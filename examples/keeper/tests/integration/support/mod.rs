//! What keeper's tests share: a fresh PostgreSQL database per test (dropped at its end), a vault and a
//! simulated cloud (the `fake` kind, in a state file) per test, and a driver seam that can record what
//! keeper asked for (orca's recording layer), take a capability away, blank a fact or fail a call, on
//! top of the real in-memory provider.
//!
//! As keeper does by default, every world's provider is reached through the plugin host
//! (`soul-cloud-fake`, on the same state file) with the same knobs on top ([`World::inject`] and
//! [`World::requests`] reach the plugin's cloud); `KEEPER_TEST_DRIVERS=linked` runs the same tests
//! on linked-in drivers (see [`on_plugins`]).
//!
//! Without a reachable PostgreSQL a test prints `SKIPPED <name>: no PostgreSQL at ...` (to the real
//! standard error, past the test harness's capture) and passes, unless `CI` is set: then it fails.

#![allow(dead_code, missing_docs)]

pub mod pgproxy;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use keeper::cloud::Settings as KeeperSettings;
use keeper::drivers::Drivers;
use keeper::vault::FileVault;
use keeper::Keeper;
use orca::layer::{Answer, Call, Layer, Layered, Next, Recorder};
use orca::memory::MemoryCloud;
use orca::{Capabilities, Created, Machine, MachineSpec, Provider, Settings};
use serde_json::{json, Value};
use tokio_postgres::NoTls;

/// The server tests use unless `DATABASE_URL` says another.
pub const DEFAULT_ADMIN_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

pub fn admin_url() -> String {
    std::env::var("DATABASE_URL")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| DEFAULT_ADMIN_URL.to_string())
}

fn in_ci() -> bool {
    std::env::var_os("CI").is_some_and(|v| !v.is_empty())
}

/// A client on the server (the admin database).
pub async fn admin() -> tokio_postgres::Client {
    admin_client(&admin_url())
        .await
        .expect("connect to PostgreSQL")
}

/// A database made for one test, dropped when the test ends (also when it panics).
pub struct TestDb {
    pub url: String,
    pub name: String,
    admin: String,
    dropped: bool,
}

async fn admin_client(url: &str) -> Result<tokio_postgres::Client, String> {
    let connect = tokio_postgres::connect(url, NoTls);
    let (client, conn) = tokio::time::timeout(Duration::from_secs(5), connect)
        .await
        .map_err(|_| "no answer in 5 s".to_string())?
        .map_err(|e| {
            let mut s = e.to_string();
            if let Some(src) = std::error::Error::source(&e) {
                s.push_str(&format!(": {src}"));
            }
            s
        })?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(client)
}

impl TestDb {
    /// A fresh database for `test`, or `None` (SKIPPED) when no PostgreSQL answers outside CI.
    pub async fn create(test: &str) -> Option<TestDb> {
        let admin = admin_url();
        let client = match admin_client(&admin).await {
            Ok(c) => c,
            Err(e) => {
                let shown = orca_scaler::store::postgres::redact(&admin);
                if in_ci() {
                    panic!(
                        "no PostgreSQL at {shown} and CI is set, so {test} cannot be skipped: {e}"
                    );
                }
                let _ = writeln!(
                    std::io::stderr(),
                    "SKIPPED {test}: no PostgreSQL at {shown} ({e})"
                );
                return None;
            }
        };
        let mut b = [0u8; 6];
        getrandom::fill(&mut b).unwrap();
        let name = format!("keeper_test_{}", hex::encode(b));
        client
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .unwrap_or_else(|e| panic!("CREATE DATABASE {name}: {e}"));
        let mut url = url::Url::parse(&admin).expect("DATABASE_URL is a postgres:// URL");
        url.set_path(&format!("/{name}"));
        Some(TestDb {
            url: url.to_string(),
            name,
            admin,
            dropped: false,
        })
    }

    /// A client on this database (for assertions and for setting up faults).
    pub async fn client(&self) -> tokio_postgres::Client {
        admin_client(&self.url)
            .await
            .expect("connect to the test database")
    }

    /// Drops the database now.
    pub async fn drop_now(mut self) {
        drop_database(&self.admin, &self.name).await;
        self.dropped = true;
    }
}

async fn drop_database(admin: &str, name: &str) {
    if let Ok(c) = admin_client(admin).await {
        let _ = c
            .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .await;
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if self.dropped {
            return;
        }
        let (admin, name) = (self.admin.clone(), self.name.clone());
        let _ = std::thread::spawn(move || {
            if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                rt.block_on(drop_database(&admin, &name));
            }
        })
        .join();
    }
}

/// Knobs on the providers keeper gets in a test.
#[derive(Debug, Default)]
pub struct Knobs {
    /// Every spec keeper asked to create.
    pub specs: Mutex<Vec<MachineSpec>>,
    /// Deny the resize capability (a driver without it).
    pub no_resize: AtomicBool,
    /// Blank the FQDN of the VM made by the create call with this number (1-based; 0: none).
    pub blank_fqdn_of_create: AtomicU32,
    /// Create calls so far.
    pub creates: AtomicU32,
    /// How many providers keeper made (one per step).
    pub providers_made: AtomicU32,
    /// Hold every create call until [`Knobs::create_release`] is notified.
    pub hold_creates: AtomicBool,
    /// Notified when a held create call starts waiting.
    pub create_entered: tokio::sync::Notify,
    /// Lets one held create call go on.
    pub create_release: tokio::sync::Notify,
    /// Set when a held create call was dropped before it was let go (its step was cancelled).
    pub create_dropped: AtomicBool,
    /// Hold every delete call (before it deletes) until [`Knobs::delete_release`] is notified.
    pub hold_deletes: AtomicBool,
    /// Notified when a held delete call starts waiting.
    pub delete_entered: tokio::sync::Notify,
    /// Lets one held delete call go on.
    pub delete_release: tokio::sync::Notify,
    /// How many of the next `delete` calls remove the machine but leave a piece beside it (its
    /// security group), answering `Error::Leftovers` naming it: as a cloud whose delete removes the
    /// VM before what was attached to it, and can fail in between.
    pub delete_leaves: AtomicU32,
    /// How many of the next `delete_named` calls fail (a transient error, nothing removed).
    pub fail_delete_named: AtomicU32,
    /// Answer every no stock as one whose clean-up left a piece (a boot disk of its name), as a
    /// cloud whose create makes pieces before its VM can.
    pub no_stock_leaves: AtomicBool,
    /// Answer every resize by stopping the VM and then failing (a transient error): as a driver
    /// whose resize stopped the VM and could not start it again.
    pub resize_stops_then_fails: AtomicBool,
    /// Every call keeper made, as orca's recording layer saw it.
    pub recorder: Recorder,
}

/// Sets its flag when dropped, unless disarmed first.
pub struct DropFlag<'a>(Option<&'a AtomicBool>);

impl<'a> DropFlag<'a> {
    pub fn new(flag: &'a AtomicBool) -> Self {
        DropFlag(Some(flag))
    }
    pub fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for DropFlag<'_> {
    fn drop(&mut self) {
        if let Some(f) = self.0 {
            f.store(true, Ordering::SeqCst);
        }
    }
}

/// A layer over the in-memory provider applying the [`Knobs`].
#[derive(Debug)]
pub struct Tweaked(Arc<Knobs>);

#[async_trait]
impl Layer for Tweaked {
    fn capabilities(&self, inner: Capabilities) -> Capabilities {
        if self.0.no_resize.load(Ordering::SeqCst) {
            inner.with_resize(false)
        } else {
            inner
        }
    }

    async fn around(&self, call: Call<'_>, next: Next<'_>) -> orca::Result<Answer> {
        let knobs = &self.0;
        match call {
            Call::Create { spec } => {
                knobs.specs.lock().unwrap().push(spec.clone());
                let n = knobs.creates.fetch_add(1, Ordering::SeqCst) + 1;
                if knobs.hold_creates.load(Ordering::SeqCst) {
                    let dropped = DropFlag::new(&knobs.create_dropped);
                    knobs.create_entered.notify_one();
                    knobs.create_release.notified().await;
                    dropped.disarm();
                }
                let name = spec.name.clone();
                let mut got = next.run(call).await?;
                if n == knobs.blank_fqdn_of_create.load(Ordering::SeqCst) {
                    if let Answer::Created(Created::Machine(m)) = &mut got {
                        m.fqdn.clear();
                    }
                }
                if knobs.no_stock_leaves.load(Ordering::SeqCst) {
                    if let Answer::Created(Created::NoStock { left, .. }) = &mut got {
                        left.push(format!("disk {name}-boot"));
                    }
                }
                Ok(got)
            }
            Call::Delete { .. } => {
                if knobs.hold_deletes.load(Ordering::SeqCst) {
                    knobs.delete_entered.notify_one();
                    knobs.delete_release.notified().await;
                }
                let leaves = knobs
                    .delete_leaves
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                    .is_ok();
                if !leaves {
                    return next.run(call).await;
                }
                let Call::Delete { id } = call else {
                    unreachable!("matched above")
                };
                let piece = format!("security group {id}-nsg");
                next.run(call).await?;
                Err(orca::Error::leftovers(
                    orca::Error::transient("the security group is still in use"),
                    vec![piece],
                ))
            }
            Call::DeleteNamed { pool, name } => {
                let fail = knobs
                    .fail_delete_named
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                    .is_ok();
                if fail {
                    return Err(orca::Error::transient(format!(
                        "injected: what a create of {pool}/{name} left could not be removed"
                    )));
                }
                next.run(call).await
            }
            Call::Resize { id, .. } if knobs.resize_stops_then_fails.load(Ordering::SeqCst) => {
                next.inner().stop(id).await?;
                Err(orca::Error::transient(
                    "injected: the VM was stopped for its resize, and the resize then failed",
                ))
            }
            Call::Resize { .. } if knobs.no_resize.load(Ordering::SeqCst) => {
                Err(orca::Error::unsupported(next.inner().kind(), "resize"))
            }
            other => next.run(other).await,
        }
    }
}

/// Drivers for tests: the in-memory provider on the test's cloud (the state file the vault names),
/// with [`Knobs`]. The cloud is held in this process so that the test can inject the fake's faults.
#[derive(Debug)]
pub struct TestDrivers {
    pub cloud: MemoryCloud,
    pub state: PathBuf,
    pub knobs: Arc<Knobs>,
    /// The plugin host the provider is reached through, under `KEEPER_TEST_DRIVERS=plugins`.
    pub plugins: Option<Arc<keeper::plugins::PluginHost>>,
}

/// The setting that runs every world's steps through the plugin host.
pub const TEST_DRIVERS_ENV: &str = "KEEPER_TEST_DRIVERS";

/// keeper's `KEEPER_DRIVERS` for a keeper program a test runs: `plugins` when the step tests run on
/// plugins (see [`on_plugins`]), `linked` otherwise.
pub fn driver_mode() -> &'static str {
    if on_plugins() {
        "plugins"
    } else {
        "linked"
    }
}

/// Whether the step tests run through plugins, as keeper does by default. `KEEPER_TEST_DRIVERS=linked`
/// runs them on linked-in drivers and `=plugins` insists on plugins; without it they run on plugins
/// when `soul-cloud-fake` is built beside the tests (as `cargo test --workspace` builds it), and on
/// linked-in drivers with a note otherwise (`cargo test -p keeper`), except under CI, where a missing
/// plugin fails the test that wanted it.
pub fn on_plugins() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| match std::env::var(TEST_DRIVERS_ENV).as_deref() {
        Ok("linked") => false,
        Ok("plugins") => true,
        Ok(other) => panic!("{TEST_DRIVERS_ENV}={other:?}: expected linked or plugins"),
        Err(_) => {
            let built = plugins_built_in().join("soul-cloud-fake").is_file();
            if !built && !in_ci() {
                let _ = writeln!(
                    std::io::stderr(),
                    "NOTE keeper's step tests run on linked-in drivers: soul-cloud-fake is not built in {} \
                     (cargo build -p orca-plugin, or cargo test --workspace)",
                    plugins_built_in().display()
                );
            }
            built || in_ci()
        }
    })
}

/// The directory `cargo test --workspace` builds the workspace's programs in: the parent of this
/// test's `deps` directory.
fn plugins_built_in() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().and_then(Path::parent).unwrap().to_path_buf()
}

#[async_trait]
impl Drivers for TestDrivers {
    async fn provider(
        &self,
        driver: &str,
        owner: &str,
        settings: &Settings,
    ) -> orca::Result<Arc<dyn Provider>> {
        if driver != "fake" {
            // Another kind goes to orca as keeper's own drivers would send it.
            return orca::of_with(driver, owner, settings).await;
        }
        // The vault was read at step time: the settings name this test's state file.
        let state = settings.get(orca::FAKE_STATE_ENV).map(PathBuf::from);
        if state.as_deref() != Some(self.state.as_path()) {
            return Err(orca::Error::settings(
                [orca::FAKE_STATE_ENV],
                "not this test's state file",
            ));
        }
        self.knobs.providers_made.fetch_add(1, Ordering::SeqCst);
        let inner: Arc<dyn Provider> = match &self.plugins {
            Some(host) => host.provider(driver, owner, settings).await?,
            None => Arc::new(self.cloud.provider(owner)?),
        };
        let tweaked: Arc<dyn Provider> = Arc::new(Layered::new(inner, Tweaked(self.knobs.clone())));
        Ok(Arc::new(Layered::new(tweaked, self.knobs.recorder.clone())))
    }
}

/// The drivers a world's keeper uses.
enum Choice {
    /// [`TestDrivers`].
    Test,
    /// keeper's linked-in drivers.
    Orca,
    /// The plugins in this directory.
    Plugins(PathBuf),
}

/// The directory `cargo test --workspace` builds the workspace's programs in (`soul-cloud-fake`
/// among them): the parent of this test's `deps` directory. `None` (SKIPPED) when the plugin is not
/// built there, outside CI.
pub fn plugin_dir(test: &str) -> Option<PathBuf> {
    let dir = plugins_built_in();
    if dir.join("soul-cloud-fake").is_file() {
        return Some(dir);
    }
    let why = format!(
        "soul-cloud-fake is not built in {} (cargo build -p orca-plugin)",
        dir.display()
    );
    if in_ci() {
        panic!("{test} cannot be skipped in CI: {why}");
    }
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {why}");
    None
}

/// One test's world: its database, vault, cloud and keeper, with provider `lab` (fake, region
/// `zone-a`, fqdn_suffix `zone-a.fake.internal`: the fake's FQDNs are `<name>.<location>.fake.internal`)
/// and profile `small` (`amd64-small`) registered.
pub struct World {
    pub db: TestDb,
    pub dir: tempfile::TempDir,
    pub keeper: Keeper,
    pub cloud: MemoryCloud,
    pub knobs: Arc<Knobs>,
    pub state: PathBuf,
    pub vault: PathBuf,
    /// The plugin host, when keeper reaches providers through plugins ([`World::plugins`]).
    pub plugins: Option<Arc<keeper::plugins::PluginHost>>,
}

pub fn write_vault_file(vault: &Path, reference: &str, settings: &Value) {
    let path = vault.join(format!("{reference}.json"));
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, settings.to_string()).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
}

impl World {
    /// A world for `test` with the test drivers, or `None` when skipped.
    pub async fn new(test: &str) -> Option<World> {
        Self::with_settings(test, KeeperSettings::default()).await
    }

    pub async fn with_settings(test: &str, settings: KeeperSettings) -> Option<World> {
        Self::build(test, settings, Choice::Test).await
    }

    /// A world whose keeper makes providers with `orca::of_with` itself (keeper's own drivers): every
    /// step opens the state file the vault names, as separate keepers would.
    pub async fn orca(test: &str) -> Option<World> {
        Self::build(test, KeeperSettings::default(), Choice::Orca).await
    }

    /// A world whose keeper reaches providers through their CloudDriver plugins
    /// (`keeper::plugins::PluginHost`), found where `cargo test --workspace` builds them; `None`
    /// (SKIPPED) when they are not built, outside CI.
    pub async fn plugins(test: &str) -> Option<World> {
        let dir = plugin_dir(test)?;
        Self::build(test, KeeperSettings::default(), Choice::Plugins(dir)).await
    }

    async fn build(test: &str, settings: KeeperSettings, choice: Choice) -> Option<World> {
        let test_plugins = match choice {
            Choice::Test if on_plugins() => {
                Some(Arc::new(keeper::plugins::host([plugin_dir(test)?])))
            }
            _ => None,
        };
        let owner = settings.owner.clone();
        let db = TestDb::create(test).await?;
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("cloud.json");
        let vault = dir.path().join("vault");
        write_vault_file(
            &vault,
            "fake/lab",
            &json!({ orca::FAKE_STATE_ENV: state.to_str().unwrap() }),
        );
        let cloud = MemoryCloud::persistent(&state).unwrap();
        let knobs = Arc::new(Knobs::default());
        let plugins = match &choice {
            Choice::Plugins(dir) => Some(Arc::new(keeper::plugins::host([dir.clone()]))),
            _ => test_plugins.clone(),
        };
        if let Some(host) = &test_plugins {
            // Started now, with the settings keeper's steps will give it (the vault's), so that a
            // fault can be injected before the first step; the steps then share it.
            let vault_settings =
                Settings::new().with(orca::FAKE_STATE_ENV, state.to_str().unwrap());
            host.provider("fake", &owner, &vault_settings)
                .await
                .expect("the fake plugin starts");
        }
        let drivers: Arc<dyn Drivers> = match (choice, &plugins) {
            (Choice::Plugins(_), Some(host)) => host.clone(),
            (Choice::Orca, _) => Arc::new(keeper::drivers::OrcaDrivers),
            _ => Arc::new(TestDrivers {
                cloud: cloud.clone(),
                state: state.clone(),
                knobs: knobs.clone(),
                plugins: test_plugins,
            }),
        };
        let keeper = Keeper::connect(&db.url, Arc::new(FileVault::new(&vault)), drivers, settings)
            .await
            .expect("keeper starts");
        let w = World {
            db,
            dir,
            keeper,
            cloud,
            knobs,
            state,
            vault,
            plugins,
        };
        w.register_lab().await;
        Some(w)
    }

    pub async fn register_lab(&self) {
        keeper::registry::create_provider(
            self.keeper.pool(),
            "test",
            &json!({"name": "lab", "driver": "fake", "credentials_ref": "fake/lab",
                    "region": "zone-a", "fqdn_suffix": "zone-a.fake.internal"}),
        )
        .await
        .unwrap();
        keeper::registry::create_profile(
            self.keeper.pool(),
            "test",
            &json!({"name": "small", "provider": "lab", "machine_type": "amd64-small"}),
        )
        .await
        .unwrap();
    }

    pub async fn step(&self, step: &str, params: Value) -> Result<Value, keeper::StepFailure> {
        self.keeper.run_step(step, &params, "test").await
    }

    /// Runs `created` and expects success.
    pub async fn create(&self, params: Value) -> Value {
        match self.step("core.cloud.created", params).await {
            Ok(v) => v,
            Err(f) => panic!("created failed: {} {}", f.error, f.output),
        }
    }

    pub async fn client(&self) -> tokio_postgres::Client {
        self.db.client().await
    }

    /// `SELECT count(*)` of `sql`'s rows.
    pub async fn count(&self, sql: &str) -> i64 {
        self.client()
            .await
            .query_one(&format!("SELECT count(*) FROM ({sql}) AS q"), &[])
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .get(0)
    }

    /// Every row of `sql` as JSON (one object a row).
    pub async fn rows(&self, sql: &str) -> Vec<Value> {
        self.client()
            .await
            .query(&format!("SELECT to_jsonb(q) FROM ({sql}) AS q"), &[])
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .iter()
            .map(|r| r.get(0))
            .collect()
    }

    /// The audit events named `event`, oldest first, as JSON.
    pub async fn audit(&self, event: &str) -> Vec<Value> {
        self.rows(&format!(
            "SELECT event, actor, outcome, payload FROM keeper.audit_events WHERE event = '{event}' ORDER BY id"
        ))
        .await
    }

    /// Makes the next `times` calls of `op` of the simulated cloud fail or slow down as `kind` says:
    /// in this process's cloud, or in the plugin's when the steps run through plugins.
    pub async fn inject(
        &self,
        op: orca::memory::Operation,
        kind: orca::memory::FaultKind,
        times: u32,
    ) {
        use orca_plugin::proto::fake::fake_control_client::FakeControlClient;
        use orca_plugin::proto::fake::InjectRequest;
        let Some(host) = &self.plugins else {
            return self.cloud.inject(op, kind, times);
        };
        let operation = serde_json::to_value(op)
            .unwrap()
            .as_str()
            .unwrap()
            .to_string();
        for plugin in host.running("fake") {
            let refused = FakeControlClient::new(plugin.channel().await.unwrap())
                .inject(InjectRequest {
                    operation: operation.clone(),
                    fault_json: serde_json::to_string(&kind).unwrap(),
                    times,
                })
                .await
                .unwrap()
                .into_inner()
                .refused;
            assert!(refused.is_empty(), "{refused}");
        }
    }

    /// The requests the simulated cloud has served: this process's cloud's, and the plugin's when
    /// the steps run through plugins.
    pub async fn requests(&self) -> u64 {
        use orca_plugin::proto::fake::fake_control_client::FakeControlClient;
        use orca_plugin::proto::fake::RequestsRequest;
        let mut n = self.cloud.requests();
        if let Some(host) = &self.plugins {
            for plugin in host.running("fake") {
                n += FakeControlClient::new(plugin.channel().await.unwrap())
                    .requests(RequestsRequest {})
                    .await
                    .unwrap()
                    .into_inner()
                    .requests;
            }
        }
        n
    }

    /// Another keeper on this world's database, vault and cloud (the test drivers), with
    /// `settings`: this keeper as it runs after a restart with other settings.
    pub async fn restarted_with(&self, settings: KeeperSettings) -> Keeper {
        self.restarted_at(&self.db.url, settings).await
    }

    /// [`World::restarted_with`], reaching this world's database at `url` (through a proxy).
    pub async fn restarted_at(&self, url: &str, settings: KeeperSettings) -> Keeper {
        let drivers = Arc::new(TestDrivers {
            cloud: self.cloud.clone(),
            state: self.state.clone(),
            knobs: self.knobs.clone(),
            plugins: self.plugins.clone(),
        });
        Keeper::connect(
            url,
            Arc::new(FileVault::new(&self.vault)),
            drivers,
            settings,
        )
        .await
        .expect("keeper starts again")
    }

    /// The machines of the simulated cloud (every owner).
    pub fn machines(&self) -> Vec<Machine> {
        self.cloud.all_machines()
    }

    pub async fn finish(self) {
        let World { db, keeper, .. } = self;
        drop(keeper);
        db.drop_now().await;
    }
}

/// `tokio_postgres::Config` of a URL (to check it parses).
pub fn config(url: &str) -> tokio_postgres::Config {
    tokio_postgres::Config::from_str(url).unwrap()
}

/// The hosts of a `created` output.
pub fn hosts(out: &Value) -> &Vec<Value> {
    out["hosts"].as_array().expect("hosts")
}

/// SHA-256 of `s`, hex.
pub fn sha256_hex(s: &str) -> String {
    hex::encode(keeper::tokens::sha256(s))
}
