//! How the autoscaler's cost grows with the pool: one pass, as `orca-pool --once` runs it (the store
//! opened, the record loaded, the pool listed, every create recorded before its call and after),
//! on the in-memory provider, creating 100, 1,000 and 10,000 machines with each store (the record
//! file; PostgreSQL, a fresh database per run, skipped with a line saying so when none answers),
//! then a steady pass (nothing to do) on the pool it made. The in-memory provider's own cost
//! (the same creates, one listing and the deletes of them all, without a scaler) is measured beside them, so that a ratio
//! that grows is known to be the scaler's or the provider's.
//!
//! Each size runs up to three times while the runs take less than 20 s, and the quickest counts (the
//! machine may be shared; a run of milliseconds is mostly noise). It prints each time and the ratios 1,000/100 and 10,000/1,000: a cost that grows with the work
//! keeps them near 10; one that grows with its square, near 100.
//!
//! Run: `cargo bench -p orca-scaler --bench scale` (optimized), or in a debug build
//! `cargo bench -p orca-scaler --bench scale --profile dev`. `ORCA_SCALE_SIZES=100,1000` runs fewer
//! sizes, `ORCA_SCALE_RUN=provider,file,postgres` fewer parts; `DATABASE_URL` names the PostgreSQL server (default `postgres://postgres@127.0.0.1:5432/postgres`).

use std::time::{Duration, Instant};

use orca::memory::MemoryCloud;
use orca::{MachineSpec, Provider};
use orca_scaler::{FileStore, PgStore, Scaler, Settings, Store};

const OFFER: &str = "amd64-small@zone-a";

fn sizes() -> Vec<usize> {
    match std::env::var("ORCA_SCALE_SIZES") {
        Ok(s) if !s.trim().is_empty() => s
            .split(',')
            .map(|n| {
                n.trim()
                    .parse()
                    .expect("ORCA_SCALE_SIZES: numbers, comma-separated")
            })
            .collect(),
        _ => vec![100, 1_000, 10_000],
    }
}

/// Whether `what` (`provider`, `file` or `postgres`) is to run: `ORCA_SCALE_RUN=file,postgres`
/// runs those only (all by default).
fn runs(what: &str) -> bool {
    match std::env::var("ORCA_SCALE_RUN") {
        Ok(s) if !s.trim().is_empty() => s.split(',').any(|w| w.trim() == what),
        _ => true,
    }
}

fn settings(size: usize) -> Settings {
    let mut s = Settings::new("bench", size, vec![OFFER.parse().unwrap()]);
    // The pool is new and empty: nothing to adopt or delete.
    s.unknown = orca_scaler::Unknown::Ask;
    s
}

/// Where a run keeps its record.
enum Backend {
    File(tempfile::TempDir),
    Pg(Db),
}

impl Backend {
    async fn open(&self) -> Box<dyn Store> {
        match self {
            Backend::File(dir) => {
                Box::new(FileStore::open(dir.path().join("rec.json")).expect("record file"))
            }
            Backend::Pg(db) => Box::new(PgStore::connect(&db.url, "bench").await.expect("db")),
        }
    }
}

/// One `--once` pass: the store opened and the pass run; the time it took, and the pool's size after.
async fn once(
    backend: &Backend,
    p: &dyn Provider,
    cloud: &MemoryCloud,
    size: usize,
) -> (Duration, usize) {
    // A replica that just let go of PostgreSQL's lock holds it until the server sees its session
    // end: the next one waits for it rather than stand by.
    let mut tries = 0;
    let (took, r) = loop {
        let t = Instant::now();
        let mut scaler = Scaler::new(settings(size), backend.open().await);
        let r = scaler.pass(p, cloud.now()).await;
        let took = t.elapsed();
        if r.role == orca_scaler::Role::Leader || tries > 100 {
            break (took, r);
        }
        tries += 1;
        drop(scaler);
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(r.stopped.is_none(), "the pass stopped: {:?}", r.stopped);
    assert_eq!(r.failures(), 0, "{:?}", r.actions);
    (took, r.serving)
}

/// How many times a size runs at most: the quickest run counts (the machine is shared, and a run
/// of a few milliseconds is mostly noise), as long as the runs so far took less than `BUDGET`.
const RUNS: usize = 3;
const BUDGET: Duration = Duration::from_secs(20);

/// Runs `run` up to [`RUNS`] times within [`BUDGET`]; the least of each of its times.
async fn quickest<const K: usize, F, Fut>(mut run: F) -> [Duration; K]
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = [Duration; K]>,
{
    let started = Instant::now();
    let mut best = [Duration::MAX; K];
    for _ in 0..RUNS {
        let times = run().await;
        for (b, t) in best.iter_mut().zip(times) {
            *b = (*b).min(t);
        }
        if started.elapsed() >= BUDGET {
            break;
        }
    }
    best
}

/// Creates of `n` machines, then a steady pass, with the store of `backend`.
async fn store_run(backend: &Backend, n: usize) -> (Duration, Duration) {
    let cloud = MemoryCloud::new();
    let p = cloud.provider("bench").unwrap();
    let (create, serving) = once(backend, &p, &cloud, n).await;
    assert_eq!(serving, n);
    let (steady, serving) = once(backend, &p, &cloud, n).await;
    assert_eq!(serving, n);
    assert_eq!(
        cloud.all_machines().len(),
        n,
        "the steady pass made nothing"
    );
    (create, steady)
}

/// The provider alone: `n` creates, one at a time, one listing, then `n` deletes.
async fn provider_run(n: usize) -> (Duration, Duration, Duration) {
    let cloud = MemoryCloud::new();
    let p = cloud.provider("bench").unwrap();
    let t = Instant::now();
    for i in 0..n {
        p.create(&MachineSpec::new(
            format!("bench-{i}"),
            "amd64-small",
            "zone-a",
            "bench",
        ))
        .await
        .expect("create");
    }
    let create = t.elapsed();
    let t = Instant::now();
    let all = p.machines("bench").await.expect("list");
    assert_eq!(all.len(), n);
    let list = t.elapsed();
    let t = Instant::now();
    for m in &all {
        p.delete(&m.id).await.expect("delete");
    }
    (create, list, t.elapsed())
}

/// A fresh database on the server, dropped at the end of its run.
struct Db {
    url: String,
    admin: tokio_postgres::Client,
    name: String,
}

async fn fresh_db() -> Result<Db, String> {
    let admin_url = std::env::var("DATABASE_URL")
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/postgres".into());
    let (admin, conn) = tokio_postgres::connect(&admin_url, tokio_postgres::NoTls)
        .await
        .map_err(|e| {
            format!(
                "no PostgreSQL at {}: {e}",
                orca_scaler::store::postgres::redact(&admin_url)
            )
        })?;
    tokio::spawn(conn);
    let name = format!("orca_pool_bench_{:016x}", fastrand::u64(..));
    admin
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .map_err(|e| format!("cannot create a database: {e}"))?;
    let mut config: tokio_postgres::Config = admin_url.parse().unwrap();
    config.dbname(&name);
    let mut parts = Vec::new();
    if let Some(tokio_postgres::config::Host::Tcp(h)) = config.get_hosts().first() {
        parts.push(format!("host={h}"));
    }
    if let Some(p) = config.get_ports().first() {
        parts.push(format!("port={p}"));
    }
    if let Some(u) = config.get_user() {
        parts.push(format!("user={u}"));
    }
    if let Some(p) = config.get_password() {
        parts.push(format!("password={}", String::from_utf8_lossy(p)));
    }
    parts.push(format!("dbname={name}"));
    Ok(Db {
        url: parts.join(" "),
        admin,
        name,
    })
}

impl Db {
    async fn drop_it(self) {
        let _ = self
            .admin
            .batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ))
            .await;
    }
}

fn secs(d: Duration) -> String {
    format!("{:.3} s", d.as_secs_f64())
}

/// Prints `what` at each size and the ratio of each time to the one before.
fn print(what: &str, sizes: &[usize], times: &[Duration]) {
    let mut line = format!("{what:<40}");
    for (i, (n, t)) in sizes.iter().zip(times).enumerate() {
        line.push_str(&format!("  {n:>6}: {:>9}", secs(*t)));
        if i > 0 {
            let ratio = t.as_secs_f64() / times[i - 1].as_secs_f64().max(1e-9);
            line.push_str(&format!(" (x{ratio:.1} for x{})", n / sizes[i - 1].max(1)));
        }
    }
    println!("{line}");
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let sizes = sizes();
    println!(
        "orca-pool scale: one --once pass on the in-memory provider ({} build), sizes {sizes:?}",
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "optimized"
        }
    );
    if runs("provider") {
        let mut provider = (Vec::new(), Vec::new(), Vec::new());
        for &n in &sizes {
            let [c, l, d] = quickest(|| async {
                let (c, l, d) = provider_run(n).await;
                [c, l, d]
            })
            .await;
            provider.0.push(c);
            provider.1.push(l);
            provider.2.push(d);
        }
        print("provider alone: creates", &sizes, &provider.0);
        print("provider alone: one listing", &sizes, &provider.1);
        print("provider alone: deletes", &sizes, &provider.2);
    }
    if runs("file") {
        let mut file = (Vec::new(), Vec::new());
        for &n in &sizes {
            let [c, s] = quickest(|| async {
                let (c, s) = store_run(&Backend::File(tempfile::tempdir().unwrap()), n).await;
                [c, s]
            })
            .await;
            file.0.push(c);
            file.1.push(s);
        }
        print("file store: creates", &sizes, &file.0);
        print("file store: steady pass", &sizes, &file.1);
    }
    if !runs("postgres") {
        return;
    }
    match fresh_db().await {
        Ok(db) => db.drop_it().await,
        Err(e) => {
            println!("postgres store: SKIPPED ({e})");
            return;
        }
    }
    let mut pg = (Vec::new(), Vec::new());
    for &n in &sizes {
        let [c, s] = quickest(|| async {
            let backend = Backend::Pg(fresh_db().await.expect("a fresh database"));
            let (c, s) = store_run(&backend, n).await;
            if let Backend::Pg(db) = backend {
                db.drop_it().await;
            }
            [c, s]
        })
        .await;
        pg.0.push(c);
        pg.1.push(s);
    }
    print("postgres store: creates", &sizes, &pg.0);
    print("postgres store: steady pass", &sizes, &pg.1);
}
