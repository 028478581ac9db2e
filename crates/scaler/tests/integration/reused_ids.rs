//! Ids a cloud gives again: Azure's and Compute Engine's ids are machines' names, so once a recorded
//! machine is gone, its id may name another pool's machine of the same owner. The scaler never takes
//! that machine for its own: it neither counts nor deletes it.

use crate::support;

use orca::{MachineSpec, Provider};
use orca_scaler::{Action, FileStore, Scaler};

const OFFER: &str = "Standard_B2s@westeurope";

/// A provider for owner `s1` on a fake Azure that polls quickly.
async fn azure(fake: &orca_fakes::azure::FakeAzure) -> std::sync::Arc<dyn Provider> {
    fake.add_hosts_subnet();
    let settings = orca_fakes::azure::driver_settings(fake).with("ORCA_POLL_INTERVAL", "20ms");
    orca::of_with("azure", "s1", &settings).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recorded_id_that_now_names_another_pools_machine_is_left_to_that_pool() {
    let fake = orca_fakes::azure::FakeAzure::start().await.unwrap();
    let p = azure(&fake).await;
    let dir = tempfile::tempdir().unwrap();
    let mut s = Scaler::new(
        support::settings(1, &[OFFER]),
        Box::new(FileStore::open(dir.path().join("rec.json")).unwrap()),
    );
    s.pass(&*p, chrono::Utc::now()).await;
    let [made] = &p.machines("lab").await.unwrap()[..] else {
        panic!("one machine made");
    };
    // Deleted outside the scaler; the same owner then makes a machine of that name in another pool.
    assert!(p.delete(&made.id).await.unwrap());
    let theirs = p
        .create(&MachineSpec::new(
            &made.name,
            "Standard_B2s",
            "westeurope",
            "other",
        ))
        .await
        .unwrap()
        .machine()
        .unwrap();
    assert_eq!(theirs.id, made.id, "Azure gives the id again");
    // The pool is no longer wanted: the machine the record names is gone, and nothing else is its.
    s.settings.size = 0;
    let r = s.pass(&*p, chrono::Utc::now()).await;
    assert!(
        !r.actions
            .iter()
            .any(|a| matches!(a, Action::Deleted { .. })),
        "{:?}",
        r.actions
    );
    let other = p.machines("other").await.unwrap();
    assert_eq!(other.len(), 1, "the other pool's machine stands");
    assert_eq!(r.serving, 0, "another pool's machine is not this pool's");
}
