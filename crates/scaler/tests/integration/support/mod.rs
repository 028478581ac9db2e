//! What the pool's tests share: a provider layer that can hang (a crash between two steps), mark
//! machines unknown, relabel its kind and count calls in flight; fresh PostgreSQL databases.
#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use orca::layer::{Answer, Call, Layer, Layered, Next};
use orca::memory::{MemoryCloud, MemoryProvider};
use orca::{Machine, Status};
use orca_scaler::{FileStore, Key, Offering, Scaler, Settings, StoreError};

/// Settings for pool `lab` of `size` from `offers`, with the scaler's defaults.
pub fn settings(size: usize, offers: &[&str]) -> Settings {
    Settings::new(
        "lab",
        size,
        offers
            .iter()
            .map(|o| o.parse::<Offering>().unwrap())
            .collect(),
    )
}

/// A scaler on a fresh record file in `dir`.
pub fn scaler(dir: &std::path::Path, size: usize, offers: &[&str]) -> Scaler {
    Scaler::new(
        settings(size, offers),
        Box::new(FileStore::open(dir.join("rec.json")).unwrap()),
    )
}

/// The ids of every machine in the cloud, sorted.
pub fn ids(cloud: &MemoryCloud) -> Vec<String> {
    let mut v: Vec<String> = cloud.all_machines().into_iter().map(|m| m.id).collect();
    v.sort();
    v
}

/// The in-memory provider, wrapped.
#[derive(Debug, Clone)]
pub struct Wrap {
    pub inner: MemoryProvider,
    pub kind: &'static str,
    pub creates: Arc<AtomicUsize>,
    /// The create (1-based) that never answers: the process "crashes" there.
    pub hang_at: usize,
    /// Notified when a create reaches the hang (`hang_at`): a test waits on this, not on a time.
    pub hung: Arc<tokio::sync::Notify>,
    /// The create (1-based) that waits for `release` before it goes on (after it is counted).
    pub hold_at: usize,
    /// Lets the create held at `hold_at` go on.
    pub release: Arc<tokio::sync::Notify>,
    /// Ids shown in status unknown.
    pub unknown: Arc<Mutex<Vec<String>>>,
    /// Ids shown as starting.
    pub starting: Arc<Mutex<Vec<String>>>,
    pub in_flight: Arc<AtomicUsize>,
    pub max_in_flight: Arc<AtomicUsize>,
    /// How long each create takes before it is made.
    pub create_delay: Duration,
    /// Ids of every delete asked for.
    pub deleted: Arc<Mutex<Vec<String>>>,
    /// How many listings, from now, answer an empty pool (a listing taken before another writer's
    /// creates, as when two copies start at once).
    pub stale_listings: Arc<AtomicUsize>,
    /// How many creates, from now, answer a quota refusal that may have acted (an EC2 launch ended
    /// for a volume limit): nothing is made, and the name is kept for a retry.
    pub quota_acted: Arc<AtomicUsize>,
}

impl Wrap {
    pub fn new(inner: MemoryProvider) -> Self {
        Wrap {
            inner,
            kind: "fake",
            creates: Arc::default(),
            hang_at: usize::MAX,
            hung: Arc::default(),
            hold_at: usize::MAX,
            release: Arc::default(),
            unknown: Arc::default(),
            starting: Arc::default(),
            in_flight: Arc::default(),
            max_in_flight: Arc::default(),
            create_delay: Duration::ZERO,
            deleted: Arc::default(),
            stale_listings: Arc::default(),
            quota_acted: Arc::default(),
        }
    }

    fn shown(&self, mut m: Machine) -> Machine {
        if self.unknown.lock().unwrap().contains(&m.id) {
            m.status = Status::Unknown;
            m.cloud_status = "mystery".into();
        }
        if self.starting.lock().unwrap().contains(&m.id) {
            m.status = Status::Starting;
            m.cloud_status = "initializing".into();
        }
        m
    }
}

impl Wrap {
    /// The in-memory provider in this layer (a copy of the knobs as they are now; the counters and
    /// lists are shared).
    pub fn layered(&self) -> Layered<MemoryProvider, Wrap> {
        Layered::new(self.inner.clone(), self.clone())
    }
}

#[async_trait]
impl Layer for Wrap {
    fn kind<'a>(&'a self, _inner: &'a str) -> &'a str {
        self.kind
    }

    async fn around(&self, call: Call<'_>, next: Next<'_>) -> orca::Result<Answer> {
        match call {
            Call::Create { .. } => {
                let n = self.creates.fetch_add(1, Ordering::SeqCst) + 1;
                let refuse = |n: usize| n.checked_sub(1);
                if self
                    .quota_acted
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, refuse)
                    .is_ok()
                {
                    let e = orca::Error::quota("volume limit exceeded at launch");
                    return Err(e.with_may_have_acted());
                }
                if n == self.hang_at {
                    // A permit kept until the test waits for it.
                    self.hung.notify_one();
                    futures::future::pending::<()>().await;
                }
                if n == self.hold_at {
                    self.release.notified().await;
                }
                let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                self.max_in_flight.fetch_max(now, Ordering::SeqCst);
                if !self.create_delay.is_zero() {
                    tokio::time::sleep(self.create_delay).await;
                }
                let r = next.run(call).await;
                self.in_flight.fetch_sub(1, Ordering::SeqCst);
                r
            }
            Call::Machines { .. }
                if self
                    .stale_listings
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                    .is_ok() =>
            {
                Ok(Answer::Machines(Vec::new()))
            }
            Call::Machines { .. } | Call::Machine { .. } => {
                let mut a = next.run(call).await?;
                for m in a.machines_mut() {
                    *m = self.shown(m.clone());
                }
                Ok(a)
            }
            Call::Delete { id } => {
                self.deleted.lock().unwrap().push(id.to_string());
                next.run(call).await
            }
            other => next.run(other).await,
        }
    }
}

/// The PostgreSQL server the tests use: `DATABASE_URL`, or the local default.
pub fn base_url() -> String {
    std::env::var("DATABASE_URL")
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

/// A fresh database for one test, dropped when this is dropped.
pub struct TestDb {
    pub url: String,
    name: String,
    admin: String,
}

impl TestDb {
    /// A fresh database `orca_pool_test_<random>`; `None` (after printing `SKIPPED <test>: ...`) when
    /// no PostgreSQL answers, unless `CI` is set, where that fails the test.
    pub async fn create(test: &str) -> Option<TestDb> {
        let admin = base_url();
        let client = match tokio_postgres::connect(&admin, tokio_postgres::NoTls).await {
            Ok((client, conn)) => {
                tokio::spawn(conn);
                client
            }
            Err(e) => {
                if std::env::var_os("CI").is_some() {
                    panic!(
                        "{test}: no PostgreSQL at {} ({e}), and CI is set",
                        orca_scaler::store::postgres::redact(&admin)
                    );
                }
                // Written to the process's stderr itself, past the test harness's capture, so that a
                // skip is always seen.
                use std::io::Write;
                let _ = writeln!(
                    std::io::stderr(),
                    "SKIPPED {test}: no PostgreSQL at {} ({e})",
                    orca_scaler::store::postgres::redact(&admin)
                );
                return None;
            }
        };
        let name = format!("orca_pool_test_{:016x}", fastrand::u64(..));
        client
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .expect("create the test database");
        let mut config: tokio_postgres::Config = admin.parse().unwrap();
        config.dbname(&name);
        Some(TestDb {
            url: conninfo(&config),
            name,
            admin,
        })
    }
}

/// `config` as a key=value connection string.
fn conninfo(c: &tokio_postgres::Config) -> String {
    let mut parts = Vec::new();
    if let Some(tokio_postgres::config::Host::Tcp(h)) = c.get_hosts().first() {
        parts.push(format!("host={h}"));
    }
    if let Some(p) = c.get_ports().first() {
        parts.push(format!("port={p}"));
    }
    if let Some(u) = c.get_user() {
        parts.push(format!("user={u}"));
    }
    if let Some(p) = c.get_password() {
        parts.push(format!("password={}", String::from_utf8_lossy(p)));
    }
    if let Some(d) = c.get_dbname() {
        parts.push(format!("dbname={d}"));
    }
    parts.join(" ")
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let (admin, name) = (self.admin.clone(), self.name.clone());
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                if let Ok((client, conn)) =
                    tokio_postgres::connect(&admin, tokio_postgres::NoTls).await
                {
                    tokio::spawn(conn);
                    let _ = client
                        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                        .await;
                }
            });
        })
        .join();
    }
}

/// A cloud and a provider of owner `s1` on it.
pub fn cloud() -> (MemoryCloud, MemoryProvider) {
    let c = MemoryCloud::new();
    let p = c.provider("s1").unwrap();
    (c, p)
}

/// A file store whose commits carrying a given event kind fail, `fail` times.
#[derive(Debug)]
pub struct FailingStore {
    pub inner: FileStore,
    pub kind: &'static str,
    pub fail: usize,
}

#[async_trait::async_trait]
impl orca_scaler::Store for FailingStore {
    fn describe(&self) -> String {
        self.inner.describe()
    }
    async fn lead(&mut self, key: &Key) -> Result<orca_scaler::Role, StoreError> {
        self.inner.lead(key).await
    }
    async fn load(&mut self, key: &Key) -> Result<Option<orca_scaler::Record>, StoreError> {
        self.inner.load(key).await
    }
    async fn commit(
        &mut self,
        record: &orca_scaler::Record,
        events: &[orca_scaler::Event],
    ) -> Result<(), StoreError> {
        if self.fail > 0 && events.iter().any(|e| e.kind() == self.kind) {
            self.fail -= 1;
            return Err(StoreError::Failed("injected: the disk is full".into()));
        }
        self.inner.commit(record, events).await
    }
}
