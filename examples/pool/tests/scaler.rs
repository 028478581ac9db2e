//! The autoscaler's everyday passes on the in-memory provider.

mod support;

use std::time::Duration;

use orca::memory::MemoryCloud;
use orca::Provider;
use orca_pool::{Action, Offering};
use support::scaler;

fn created(actions: &[Action]) -> Vec<String> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Created { offering, .. } => Some(offering.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn scales_up_then_holds() {
    let dir = tempfile::tempdir().unwrap();
    let cloud = MemoryCloud::new();
    let p = cloud.provider("s1").unwrap();
    let mut s = scaler(dir.path(), 3, &["amd64-small@zone-a"]);
    let r = s.pass(&p, cloud.now()).await;
    assert_eq!(created(&r.actions).len(), 3);
    assert_eq!(r.serving, 3);
    assert_eq!(p.machines("lab").await.unwrap().len(), 3);
    let r = s.pass(&p, cloud.now()).await;
    assert!(r.actions.is_empty(), "{:?}", r.actions);
    assert_eq!(r.listed, 3);
}

#[tokio::test]
async fn falls_back_on_no_stock_and_rests_the_offering() {
    let dir = tempfile::tempdir().unwrap();
    let cloud = MemoryCloud::new();
    let p = cloud.provider("s1").unwrap();
    cloud.set_stock("amd64-small", "zone-a", 1);
    let mut s = scaler(dir.path(), 3, &["amd64-small@zone-a", "amd64-small@zone-b"]);
    s.settings.parallel = 1;
    let t0 = cloud.now();
    let r = s.pass(&p, t0).await;
    assert_eq!(
        created(&r.actions),
        [
            "amd64-small@zone-a",
            "amd64-small@zone-b",
            "amd64-small@zone-b"
        ]
    );
    assert!(r.actions.iter().any(
        |a| matches!(a, Action::NoStock { offering, .. } if offering == "amd64-small@zone-a")
    ));

    // Stock comes back, a machine goes away: within the cool-down zone-a is not tried.
    cloud.unlimited_stock("amd64-small", "zone-a");
    let victim = p.machines("lab").await.unwrap()[0].id.clone();
    p.delete(&victim).await.unwrap();
    let r = s.pass(&p, t0 + chrono::Duration::seconds(60)).await;
    assert_eq!(created(&r.actions), ["amd64-small@zone-b"]);
    assert!(r.actions.iter().any(
        |a| matches!(a, Action::Skipped { offering, .. } if offering == "amd64-small@zone-a")
    ));

    // After the cool-down it is first choice again.
    let victim = p.machines("lab").await.unwrap()[0].id.clone();
    p.delete(&victim).await.unwrap();
    let r = s.pass(&p, t0 + chrono::Duration::seconds(301)).await;
    assert_eq!(created(&r.actions), ["amd64-small@zone-a"]);
}

#[tokio::test]
async fn scales_down_and_forgets_the_gone() {
    let dir = tempfile::tempdir().unwrap();
    let cloud = MemoryCloud::new();
    let p = cloud.provider("").unwrap();
    let mut s = scaler(dir.path(), 3, &["arm64-small@zone-c"]);
    s.settings.parallel = 1;
    s.pass(&p, cloud.now()).await;
    s.settings.size = 1;
    cloud.advance_clock(Duration::from_secs(1));
    let r = s.pass(&p, cloud.now()).await;
    let surplus = r
        .actions
        .iter()
        .filter(|a| matches!(a, Action::Deleted { cause, .. } if cause == "surplus"))
        .count();
    assert_eq!(surplus, 2);
    let left = p.machines("lab").await.unwrap();
    assert_eq!(left.len(), 1);
    p.delete(&left[0].id).await.unwrap();
    let r = s.pass(&p, cloud.now()).await;
    assert!(r.actions.contains(&Action::Gone {
        name: left[0].name.clone(),
        id: left[0].id.clone(),
        why: "no longer in the cloud (deleted outside orca-pool, or by the cloud); replaced".into()
    }));
    assert_eq!(created(&r.actions).len(), 1);
}

#[tokio::test]
async fn record_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let cloud = MemoryCloud::new();
    let p = cloud.provider("s1").unwrap();
    let mut s = scaler(dir.path(), 2, &["amd64-small@zone-a"]);
    s.pass(&p, cloud.now()).await;
    drop(s);
    let mut again = scaler(dir.path(), 2, &["amd64-small@zone-a"]);
    let r = again.pass(&p, cloud.now()).await;
    assert!(
        r.actions.is_empty(),
        "a restarted scaler keeps its machines: {:?}",
        r.actions
    );
    let bad: Result<Offering, _> = "no-at-sign".parse();
    assert!(bad.unwrap_err().contains("TYPE@LOCATION"));
}

#[tokio::test]
async fn an_older_record_file_is_kept_and_never_read_as_this_pools() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("rec.json"),
        r#"{"known": {"m-00000001": "lab-0"}, "cooling": {}, "next": 1}"#,
    )
    .unwrap();
    let cloud = MemoryCloud::new();
    let p = cloud.provider("s1").unwrap();
    p.create(&orca::MachineSpec::new(
        "lab-0",
        "amd64-small",
        "zone-a",
        "lab",
    ))
    .await
    .unwrap();
    let mut s = scaler(dir.path(), 1, &["amd64-small@zone-a"]);
    let r = s.pass(&p, cloud.now()).await;
    assert!(r.held(), "{:?}", r.actions);
    assert!(
        r.lines().join("\n").contains("older orca-pool"),
        "{:?}",
        r.lines()
    );
    assert_eq!(cloud.all_machines().len(), 1);
}
