//! The autoscaler's passes on the in-memory provider.

use std::time::{Duration, SystemTime};

use orca::memory::MemoryCloud;
use orca::{Arch, MachineSpec, Provider};
use orca_pool::{Action, Offering, Record, Scaler, Settings};

fn scaler(size: usize, offers: &[&str]) -> Scaler {
    Scaler {
        settings: Settings {
            pool: "lab".into(),
            size,
            offerings: offers.iter().map(|o| o.parse().unwrap()).collect(),
            cooldown: Duration::from_secs(300),
            archs: Vec::new(),
            user_data: String::new(),
        },
        record: Record::default(),
    }
}

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
    let cloud = MemoryCloud::new();
    let p = cloud.provider("s1").unwrap();
    let mut s = scaler(3, &["amd64-small@zone-a"]);
    let r = s.pass(&p, SystemTime::now()).await.unwrap();
    assert_eq!(created(&r.actions).len(), 3);
    assert_eq!(r.count, 3);
    assert_eq!(p.machines("lab").await.unwrap().len(), 3);
    let r = s.pass(&p, SystemTime::now()).await.unwrap();
    assert!(r.actions.is_empty(), "{:?}", r.actions);
    assert_eq!(r.listed, 3);
}

#[tokio::test]
async fn falls_back_on_no_stock_and_rests_the_offering() {
    let cloud = MemoryCloud::new();
    let p = cloud.provider("s1").unwrap();
    cloud.set_stock("amd64-small", "zone-a", 1);
    let mut s = scaler(3, &["amd64-small@zone-a", "amd64-small@zone-b"]);
    let t0 = SystemTime::now();
    let r = s.pass(&p, t0).await.unwrap();
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
    let before = cloud.requests();
    let r = s.pass(&p, t0 + Duration::from_secs(60)).await.unwrap();
    assert_eq!(created(&r.actions), ["amd64-small@zone-b"]);
    assert!(r.actions.iter().any(
        |a| matches!(a, Action::Skipped { offering, .. } if offering == "amd64-small@zone-a")
    ));
    assert!(cloud.requests() > before);

    // After the cool-down it is first choice again.
    let victim = p.machines("lab").await.unwrap()[0].id.clone();
    p.delete(&victim).await.unwrap();
    let r = s.pass(&p, t0 + Duration::from_secs(301)).await.unwrap();
    assert_eq!(created(&r.actions), ["amd64-small@zone-a"]);
}

#[tokio::test]
async fn deletes_what_it_does_not_know_and_nothing_of_others() {
    let cloud = MemoryCloud::new();
    let p = cloud.provider("s1").unwrap();
    let other = cloud.provider("s2").unwrap();
    let stray = p
        .create(&MachineSpec::new("stray", "amd64-small", "zone-a", "lab"))
        .await
        .unwrap()
        .machine()
        .unwrap();
    let theirs = other
        .create(&MachineSpec::new("theirs", "amd64-small", "zone-a", "lab"))
        .await
        .unwrap()
        .machine()
        .unwrap();
    let mut s = scaler(1, &["amd64-small@zone-a"]);
    let r = s.pass(&p, SystemTime::now()).await.unwrap();
    assert!(r.actions.contains(&Action::DeletedUnknown {
        id: stray.id.clone(),
        name: "stray".into()
    }));
    assert_eq!(created(&r.actions).len(), 1);
    assert_eq!(
        other.machines("lab").await.unwrap()[0].id,
        theirs.id,
        "another owner's machine stays"
    );
}

#[tokio::test]
async fn scales_down_newest_first_and_forgets_the_gone() {
    let cloud = MemoryCloud::new();
    let p = cloud.provider("").unwrap();
    let mut s = scaler(3, &["arm64-small@zone-c"]);
    s.pass(&p, SystemTime::now()).await.unwrap();
    s.settings.size = 1;
    let r = s.pass(&p, SystemTime::now()).await.unwrap();
    let surplus: Vec<&str> = r
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::DeletedSurplus { name, .. } => Some(name.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(surplus, ["lab-2", "lab-1"]);
    let left = p.machines("lab").await.unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].name, "lab-0");
    p.delete(&left[0].id).await.unwrap();
    let r = s.pass(&p, SystemTime::now()).await.unwrap();
    assert!(r.actions.contains(&Action::Forgot {
        id: left[0].id.clone()
    }));
    assert_eq!(created(&r.actions).len(), 1);
}

#[tokio::test]
async fn skips_offerings_the_image_cannot_run_on() {
    let cloud = MemoryCloud::new();
    let p = cloud.provider("s1").unwrap();
    let mut s = scaler(1, &["arm64-small@zone-a", "amd64-small@zone-a"]);
    s.settings.archs = vec![Arch::Amd64];
    let r = s.pass(&p, SystemTime::now()).await.unwrap();
    assert_eq!(created(&r.actions), ["amd64-small@zone-a"]);
}

#[tokio::test]
async fn record_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rec.json");
    let cloud = MemoryCloud::new();
    let p = cloud.provider("s1").unwrap();
    let mut s = scaler(2, &["amd64-small@zone-a"]);
    s.pass(&p, SystemTime::now()).await.unwrap();
    s.record.save(&path).unwrap();
    let mut again = scaler(2, &["amd64-small@zone-a"]);
    again.record = Record::load(&path).unwrap();
    let r = again.pass(&p, SystemTime::now()).await.unwrap();
    assert!(
        r.actions.is_empty(),
        "a restarted scaler keeps its machines: {:?}",
        r.actions
    );
    let bad: Result<Offering, _> = "no-at-sign".parse();
    assert!(bad.unwrap_err().contains("TYPE@LOCATION"));
}
