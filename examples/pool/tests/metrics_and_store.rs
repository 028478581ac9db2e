//! The metrics a pass leaves (counters after deletes, failures and no stock; a standby's gauges),
//! record files that cannot be read as a record (refused, never read as an empty record), and what a
//! writer that crashed mid-write leaves (ignored, then removed).

mod support;

use orca::memory::{FaultKind, Operation};
use orca::ErrorKind;
use orca_pool::metrics::Metrics;
use orca_pool::{FileStore, Key, PassReport, Record, Role, Store, StoreError};
use support::{cloud, scaler};

const A: &str = "amd64-small@zone-a";
const B: &str = "amd64-small@zone-b";

/// The value of the sample `name{labels}` (labels in any order), if there is one.
fn sample(body: &str, name: &str, labels: &[&str]) -> Option<f64> {
    body.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .filter(|l| labels.iter().all(|p| l.contains(p)))
        .find_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse().ok()))
}

#[tokio::test]
async fn counters_follow_deletes_failures_and_no_stock() {
    let dir = tempfile::tempdir().unwrap();
    let (cloud, p) = cloud();
    let metrics = Metrics::new(&Key::new("fake", "s1", "lab"));
    let mut s = scaler(dir.path(), 2, &[A, B]);
    s.settings.parallel = 1;

    // zone-a has no stock: one no-stock answer, both machines from zone-b.
    cloud.set_stock("amd64-small", "zone-a", 0);
    let r = s.pass(&p, cloud.now()).await;
    metrics.observe(&r);
    assert_eq!(r.serving, 2, "{:?}", r.actions);
    let body = metrics.render();
    assert_eq!(
        sample(
            &body,
            "orca_pool_no_stock_total",
            &["offering=\"amd64-small@zone-a\""]
        ),
        Some(1.0),
        "{body}"
    );
    assert_eq!(sample(&body, "orca_pool_size", &[]), Some(2.0), "{body}");
    assert_eq!(
        sample(&body, "orca_pool_deleted_total", &["cause=\"surplus\""]),
        None,
        "{body}"
    );

    // Down to one: a surplus delete.
    s.settings.size = 1;
    let r = s.pass(&p, cloud.now()).await;
    metrics.observe(&r);
    let body = metrics.render();
    assert_eq!(
        sample(&body, "orca_pool_deleted_total", &["cause=\"surplus\""]),
        Some(1.0),
        "{body}"
    );

    // Up to two with a create that fails: one create failure.
    s.settings.size = 2;
    cloud.inject(Operation::Create, FaultKind::Error(ErrorKind::Other), 1);
    let r = s.pass(&p, cloud.now()).await;
    metrics.observe(&r);
    assert_eq!(r.failures(), 1, "{:?}", r.actions);
    let body = metrics.render();
    assert_eq!(
        sample(&body, "orca_pool_failures_total", &["operation=\"create\""]),
        Some(1.0),
        "{body}"
    );
    assert_eq!(
        sample(
            &body,
            "orca_pool_no_stock_total",
            &["offering=\"amd64-small@zone-a\""]
        ),
        Some(1.0),
        "no stock counted once: {body}"
    );
}

/// A standby does not list the pool: its size and listing gauges do not keep the figures of the
/// last pass it led.
#[tokio::test]
async fn a_standby_reports_no_stale_size() {
    let dir = tempfile::tempdir().unwrap();
    let (cloud, p) = cloud();
    let metrics = Metrics::new(&Key::new("fake", "s1", "lab"));
    let mut s = scaler(dir.path(), 3, &[A]);
    metrics.observe(&s.pass(&p, cloud.now()).await);
    let led = s.pass(&p, cloud.now()).await;
    metrics.observe(&led);
    let body = metrics.render();
    assert_eq!(sample(&body, "orca_pool_size", &[]), Some(3.0), "{body}");
    assert_eq!(sample(&body, "orca_pool_listed", &[]), Some(3.0), "{body}");

    let standby = PassReport {
        role: Role::Standby {
            leader: "r2".into(),
        },
        listed: 0,
        serving: 0,
        actions: Vec::new(),
        stopped: None,
        ..led
    };
    metrics.observe(&standby);
    let body = metrics.render();
    assert_eq!(sample(&body, "orca_pool_leader", &[]), Some(0.0), "{body}");
    assert_eq!(sample(&body, "orca_pool_size", &[]), Some(0.0), "{body}");
    assert_eq!(sample(&body, "orca_pool_listed", &[]), Some(0.0), "{body}");
}

fn refused(path: &std::path::Path) -> String {
    match FileStore::open(path) {
        Ok(s) => panic!("{} was opened: {s:?}", path.display()),
        Err(StoreError::Failed(m)) => m,
        Err(e) => panic!("{e:?}"),
    }
}

#[test]
fn a_record_file_of_another_format_is_refused_and_kept() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rec.json");
    let other = r#"{"format": "orca-pool/9", "records": []}"#;
    std::fs::write(&path, other).unwrap();
    let m = refused(&path);
    assert!(
        m.contains("orca-pool/9") && m.contains("orca-pool/2"),
        "{m}"
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), other);
}

#[test]
fn a_record_file_that_is_not_a_record_is_refused_and_kept() {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in [
        ("garbage.json", "this is not json {"),
        ("other.json", r#"{"servers": [1, 2, 3]}"#),
        (
            "torn.json",
            r#"{"format": "orca-pool/2", "records": [{"key": "#,
        ),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        let m = refused(&path);
        assert!(m.contains("not an orca-pool record"), "{name}: {m}");
        assert!(m.contains(name), "{name}: the message names the file: {m}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text, "{name}");
    }
}

#[test]
fn an_unreadable_record_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    // A path that exists but cannot be read as a file (also for root, whom modes do not stop).
    let path = dir.path().join("rec.json");
    std::fs::create_dir(&path).unwrap();
    let m = refused(&path);
    assert!(m.contains("rec.json") && m.contains("read"), "{m}");
    assert!(path.is_dir(), "left as it was");
}

/// A process that crashed while writing leaves its temporary file (named after its process id, which
/// the next process does not have) beside the record, whole or torn. The next process reads the old
/// record, and removes the leftover when it opens the file; other files in the folder are kept.
#[tokio::test]
async fn a_crashed_writers_temp_file_is_ignored_and_removed_on_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rec.json");
    let key = Key::new("fake", "s1", "lab");
    {
        let mut s = FileStore::open(&path).unwrap();
        let mut r = Record::new(key.clone());
        r.next = 3;
        s.commit(&r, &[]).await.unwrap();
    }
    // Above Linux's largest process id: never this process's.
    let torn = dir.path().join(".rec.json.tmp-4194305");
    std::fs::write(&torn, r#"{"format": "orca-pool/2", "records": [{"key": "#).unwrap();
    let kept = [
        dir.path().join(".other.json.tmp-4194305"),
        dir.path().join(".rec.json.tmp-notes"),
        dir.path().join("rec.json.bak"),
    ];
    for k in &kept {
        std::fs::write(k, "x").unwrap();
    }
    let mut s = FileStore::open(&path).unwrap();
    assert_eq!(s.load(&key).await.unwrap().map(|r| r.next), Some(3));
    assert!(!torn.exists(), "the crashed writer's temp file is removed");
    for k in &kept {
        assert!(k.exists(), "{} is kept", k.display());
    }
}
