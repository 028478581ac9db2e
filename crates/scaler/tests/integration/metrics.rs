//! The metrics a pass leaves: counters after deletes, failures and no stock; a standby's gauges.

use crate::support;

use orca::memory::{FaultKind, Operation};
use orca::ErrorKind;
use orca_scaler::metrics::Metrics;
use orca_scaler::{Key, PassReport, Role};
use support::{cloud, scaler};

const A: &str = "amd64-small@zone-a";
const B: &str = "amd64-small@zone-b";

/// The value of the sample `name{labels}` (labels in any order), if there is one.
pub fn sample(body: &str, name: &str, labels: &[&str]) -> Option<f64> {
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
        Some(0.0),
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

/// Every counter is exported at 0 from the start (a rate over a series that appears only at its first
/// event misses that event), the no-stock counter for each offering given.
#[test]
fn counters_are_exported_at_zero_from_the_start() {
    let m = Metrics::new(&Key::new("fake", "s1", "lab")).with_offerings(&[A.parse().unwrap()]);
    let body = m.render();
    for (name, label) in [
        ("orca_pool_created_total", "how=\"made\""),
        ("orca_pool_created_total", "how=\"adopted\""),
        ("orca_pool_deleted_total", "cause=\"surplus\""),
        ("orca_pool_deleted_total", "cause=\"unknown\""),
        ("orca_pool_deleted_total", "cause=\"unhealthy\""),
        ("orca_pool_deleted_total", "cause=\"leftovers\""),
        ("orca_pool_failures_total", "operation=\"create\""),
        ("orca_pool_failures_total", "operation=\"delete_named\""),
        ("orca_pool_failures_total", "operation=\"pass\""),
        ("orca_pool_passes_total", "role=\"leader\""),
        ("orca_pool_passes_total", "role=\"standby\""),
        (
            "orca_pool_no_stock_total",
            "offering=\"amd64-small@zone-a\"",
        ),
    ] {
        assert_eq!(
            sample(&body, name, &[label]),
            Some(0.0),
            "{name}{{{label}}} in\n{body}"
        );
    }
}
