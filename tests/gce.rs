//! `orca::of("gce", owner)` against the fake Compute Engine API, from environment variables. One test
//! function: the variables are process-global.

use orca::{Created, Error, MachineSpec};
use orca_fakes::gce::{FakeGce, NETWORK, PROJECT, SUBNET, ZONE};

const VARS: &[&str] = &[
    "ORCA_GCE_PROJECT",
    "ORCA_GCE_ZONE",
    "ORCA_GCE_NETWORK",
    "ORCA_GCE_SUBNET",
    "ORCA_GCE_CREDENTIALS_FILE",
    "ORCA_GCE_CREDENTIALS_BASE64",
    "ORCA_GCE_APPLICATION_DEFAULT_CREDENTIALS",
    "ORCA_GCE_ENDPOINT",
    "ORCA_GCE_PAGE_SIZE",
    "ORCA_GCE_NETWORK_TAGS",
    "ORCA_GCE_MAX_RUN_DURATION",
];

#[tokio::test]
async fn gce_through_the_facade_from_the_environment() {
    for v in VARS {
        std::env::remove_var(v);
    }
    // Nothing set: every missing variable is named at once.
    let e = orca::of("gce", "stack-1").await.unwrap_err();
    let Error::InvalidSettings { keys, .. } = &e else {
        panic!("{e:?}")
    };
    for k in [
        "ORCA_GCE_PROJECT",
        "ORCA_GCE_ZONE",
        "ORCA_GCE_NETWORK",
        "ORCA_GCE_SUBNET",
        "ORCA_GCE_CREDENTIALS_FILE",
    ] {
        assert!(keys.iter().any(|x| x.contains(k)), "{k} not named in {e}");
    }

    let fake = FakeGce::start().await.unwrap();
    let key = std::env::temp_dir().join(format!("orca-gce-test-{}.json", std::process::id()));
    std::fs::write(&key, fake.service_account_json()).unwrap();
    std::env::set_var("ORCA_GCE_PROJECT", PROJECT);
    std::env::set_var("ORCA_GCE_ZONE", ZONE);
    std::env::set_var("ORCA_GCE_NETWORK", NETWORK);
    std::env::set_var("ORCA_GCE_SUBNET", SUBNET);
    std::env::set_var("ORCA_GCE_CREDENTIALS_FILE", &key);
    std::env::set_var("ORCA_GCE_ENDPOINT", fake.endpoint());
    std::env::set_var("ORCA_GCE_PAGE_SIZE", "1");
    std::env::set_var("ORCA_GCE_NETWORK_TAGS", "shed-test");
    std::env::set_var("ORCA_GCE_MAX_RUN_DURATION", "2h");

    // Two credential sources: both named.
    std::env::set_var("ORCA_GCE_CREDENTIALS_BASE64", "e30=");
    let e = orca::of("gce", "stack-1").await.unwrap_err();
    assert!(
        matches!(&e, Error::InvalidSettings { keys, .. } if keys.len() == 2),
        "{e:?}"
    );
    std::env::remove_var("ORCA_GCE_CREDENTIALS_BASE64");

    let p = orca::of("gce", "stack-1").await.unwrap();
    assert_eq!(p.kind(), "gce");
    let spec = MachineSpec::new("facade-1", "t2a-standard-1", ZONE, "lab");
    let Created::Machine(m) = p.create(&spec).await.unwrap() else {
        panic!("no stock")
    };
    let vm = fake.instance(ZONE, "facade-1").unwrap();
    assert_eq!(vm["tags"]["items"][0], "shed-test");
    assert_eq!(vm["scheduling"]["maxRunDuration"]["seconds"], "7200");
    assert_eq!(p.arch("t2a-standard-1").await.unwrap().as_str(), "arm64");
    let listed = p.machines("lab").await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].id, m.id);
    assert!(p.delete(&m.id).await.unwrap());
    assert!(fake.instance_names(ZONE).is_empty());
    let _ = std::fs::remove_file(&key);
    for v in VARS {
        std::env::remove_var(v);
    }
}
