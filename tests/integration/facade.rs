//! `orca::of` as users call it.

use orca::{Created, ErrorKind, MachineSpec};

#[tokio::test]
async fn of_fake_keeps_the_contract() {
    let p = orca::of("fake", "stack-1").await.unwrap();
    assert_eq!(p.kind(), "fake");
    assert_eq!(p.owner(), "stack-1");
    let got = p
        .create(&MachineSpec::new("w-1", "arm64-small", "zone-a", "lab"))
        .await
        .unwrap();
    let Created::Machine(m) = got else {
        panic!("no stock")
    };
    assert_eq!(p.machines("lab").await.unwrap().len(), 1);
    assert!(p.delete(&m.id).await.unwrap());
}

#[tokio::test]
async fn unknown_kind_names_the_known_ones() {
    let e = orca::of("nimbus", "").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidSpec);
    let msg = e.to_string();
    for k in ["fake", "hetzner", "ec2", "azure", "gce"] {
        assert!(msg.contains(k), "{msg}");
    }
}

#[tokio::test]
async fn invalid_owner_is_refused() {
    let e = orca::of("fake", "a,b").await.unwrap_err();
    assert!(e.to_string().starts_with("invalid owner"), "{e}");
}
