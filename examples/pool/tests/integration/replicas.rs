//! Replicas of the `orca-pool` binary on one PostgreSQL record: one acts, the other stands by. Each
//! test makes a fresh database (and drops it); without a PostgreSQL it prints SKIPPED and passes,
//! unless `CI` is set.

use crate::support;

use std::io::BufRead;
use std::time::{Duration, Instant};

use orca::memory::MemoryCloud;
use support::TestDb;

const A: &str = "amd64-small@zone-a";

async fn admin(db: &TestDb) -> tokio_postgres::Client {
    let (c, conn) = tokio_postgres::connect(&db.url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    c
}

/// Two `orca-pool` processes on one PostgreSQL pool: one acts, the other stands by; killed, the
/// leader is replaced by the other. Across the whole run no two replicas ever act in one epoch, and
/// the epochs' events never overlap in time.
#[tokio::test]
async fn two_processes_on_one_pool_never_both_act() {
    let Some(db) = TestDb::create("two_processes_on_one_pool_never_both_act").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("cloud.json");
    MemoryCloud::persistent(&state).unwrap();
    let spawn = |name: &str| {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_orca-pool"))
            .env_remove(orca_scaler::KIND_ENV)
            .env_remove(orca_scaler::OWNER_ENV)
            .current_dir(dir.path())
            .args(["--kind", "fake", "--fake-state"])
            .arg(&state)
            .args([
                "--owner", "s1", "--pool", "lab", "--size", "3", "--offer", A,
            ])
            .args([
                "--store",
                &db.url,
                "--replica",
                name,
                "--interval",
                "0.1",
                "--json",
            ])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel::<serde_json::Value>();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str(&line) {
                    if tx.send(v).is_err() {
                        break;
                    }
                }
            }
        });
        (child, rx)
    };
    let (mut pa, ra) = spawn("pa");
    let (mut pb, rb) = spawn("pb");
    let mut led = std::collections::BTreeMap::<&str, usize>::new();
    let mut ran = std::collections::BTreeMap::<&str, usize>::new();
    let mut passes = 0;
    // Watched until one replica has led and each has run 3 passes, however slowly a loaded machine
    // starts the two processes (30 s: a guard only), then for a second more while both run.
    let guard = Instant::now() + Duration::from_secs(30);
    let mut end = None;
    while end.is_none_or(|end| Instant::now() < end) && Instant::now() < guard {
        for (name, rx) in [("pa", &ra), ("pb", &rb)] {
            while let Ok(v) = rx.try_recv() {
                passes += 1;
                *ran.entry(name).or_default() += 1;
                if v["role"] == "leader" {
                    *led.entry(name).or_default() += 1;
                }
            }
        }
        if end.is_none() && !led.is_empty() && ran.len() == 2 && ran.values().all(|n| *n >= 3) {
            end = Some(Instant::now() + Duration::from_secs(1));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(passes >= 6, "both replicas ran passes: {passes}");
    assert_eq!(led.len(), 1, "exactly one process acted: {led:?}");
    let leader = *led.keys().next().unwrap();
    let (killed, survivor_rx) = if leader == "pa" {
        (&mut pa, &rb)
    } else {
        (&mut pb, &ra)
    };
    killed.kill().unwrap();
    killed.wait().unwrap();
    let mut took = false;
    // A guard only: the survivor leads once the killed leader's session is gone.
    let end = Instant::now() + Duration::from_secs(30);
    while Instant::now() < end && !took {
        if let Ok(v) = survivor_rx.recv_timeout(Duration::from_millis(200)) {
            took = v["role"] == "leader";
        }
    }
    assert!(
        took,
        "the other process took the lead after the leader was killed"
    );
    std::thread::sleep(Duration::from_millis(500));
    let _ = pa.kill();
    let _ = pb.kill();
    let _ = pa.wait();
    let _ = pb.wait();

    let c = admin(&db).await;
    let rows = c
        .query(
            "SELECT epoch, replica, min(at), max(at), count(*) FROM orca_pool.events GROUP BY epoch, replica ORDER BY min(at)",
            &[],
        )
        .await
        .unwrap();
    let epochs: Vec<(i64, String, orca::Timestamp, orca::Timestamp)> = rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect();
    assert!(epochs.len() >= 2, "{epochs:?}");
    let mut seen = std::collections::BTreeSet::new();
    for w in epochs.windows(2) {
        assert!(w[0].0 < w[1].0, "epochs rise: {epochs:?}");
        assert!(
            w[0].3 < w[1].2,
            "one epoch's events end before the next begins: {epochs:?}"
        );
    }
    for e in &epochs {
        assert!(seen.insert(e.0), "one replica per epoch: {epochs:?}");
    }
    let cloud = MemoryCloud::persistent(&state).unwrap();
    let names: std::collections::BTreeSet<String> =
        cloud.all_machines().into_iter().map(|m| m.name).collect();
    assert_eq!(names.len(), 3, "{names:?}");
    assert_eq!(cloud.all_machines().len(), 3);
}

/// The value of the sample `name{...}` in a metrics body, if there is one.
fn sample(body: &str, name: &str) -> Option<f64> {
    body.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .find_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse().ok()))
}

/// A replica whose database session is cut no longer shows itself as the leader: its
/// `orca_pool_leader` drops to 0 at once, not at its next pass (here a minute away), so that two
/// replicas never both show 1 for long.
#[tokio::test]
async fn the_leader_gauge_drops_as_soon_as_the_session_is_lost() {
    let Some(db) = TestDb::create("the_leader_gauge_drops_as_soon_as_the_session_is_lost").await
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("cloud.json");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_orca-pool"))
        .env_remove(orca_scaler::KIND_ENV)
        .env_remove(orca_scaler::OWNER_ENV)
        .current_dir(dir.path())
        .args(["--kind", "fake", "--fake-state"])
        .arg(&state)
        .args([
            "--owner", "s1", "--pool", "lab", "--size", "1", "--offer", A,
        ])
        .args(["--store", &db.url, "--replica", "r1"])
        .args(["--metrics", "127.0.0.1:0", "--interval", "60"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let err = child.stderr.take().unwrap();
    let mut lines = std::io::BufReader::new(err).lines();
    let url = loop {
        let l = lines.next().expect("the metrics address").unwrap();
        if let Some(u) = l.strip_prefix("orca-pool: metrics on ") {
            break u.to_string();
        }
    };
    let leader = || async {
        let body = reqwest::get(&url).await.unwrap().text().await.unwrap();
        sample(&body, "orca_pool_leader")
    };
    let end = Instant::now() + Duration::from_secs(10);
    while leader().await != Some(1.0) {
        assert!(Instant::now() < end, "the replica never led");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    admin(&db)
        .await
        .execute(
            // Only this test's database: the server is shared with other tests.
            "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND granted \
             AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            &[],
        )
        .await
        .unwrap();
    let end = Instant::now() + Duration::from_secs(10);
    let mut now = leader().await;
    while now != Some(0.0) && Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(100)).await;
        now = leader().await;
    }
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(now, Some(0.0), "the leader gauge after the session was cut");
}
