//! `orca::of("hetzner", owner)` from environment variables, against the fake Hetzner API.
//!
//! Environment variables are process-global: this binary is the only one that sets them, in one test.

use std::time::Duration;

use orca::{Created, ErrorKind, MachineSpec, Status};
use orca_fakes::hetzner::{FakeHetzner, Options};

#[tokio::test]
async fn of_hetzner_from_the_environment() {
    // Every key the driver reads, so a variable set outside the test cannot leak into it.
    for v in orca::hetzner::ConfigKey::names() {
        std::env::remove_var(v);
    }
    // Unset: the error names the token variable.
    let e = orca::of("hetzner", "stack-1").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidSettings);
    assert!(e.to_string().contains("HCLOUD_TOKEN"), "{e}");

    // A wrong endpoint is named too.
    std::env::set_var("HCLOUD_TOKEN", "x");
    std::env::set_var("ORCA_HCLOUD_ENDPOINT", "not a url");
    let e = orca::of("hetzner", "stack-1").await.unwrap_err();
    assert!(e.to_string().contains("ORCA_HCLOUD_ENDPOINT"), "{e}");

    // Set: a provider on the fake, with the key and firewall by name.
    let fake = FakeHetzner::start_with(Options {
        action_time: Duration::ZERO,
        ..Options::default()
    })
    .await
    .unwrap();
    std::env::set_var("HCLOUD_TOKEN", fake.token());
    std::env::set_var("ORCA_HCLOUD_ENDPOINT", fake.url());
    std::env::set_var("ORCA_HCLOUD_SSH_KEYS", "orca-test");
    std::env::set_var("ORCA_HCLOUD_FIREWALL", "orca-fw");
    let p = orca::of("hetzner", "stack-1").await.unwrap();
    assert_eq!(p.kind(), "hetzner");
    assert_eq!(p.owner(), "stack-1");
    assert_eq!(p.arch("cax11").await.unwrap().as_str(), "arm64");
    let Created::Machine(m) = p
        .create(&MachineSpec::new("facade-1", "cax11", "hel1", "lab"))
        .await
        .unwrap()
    else {
        panic!("no stock")
    };
    assert_eq!(m.status, Status::Running);
    assert!(!m.address.is_empty());
    let s = &fake.servers()[0];
    assert_eq!(s["image"]["architecture"], "arm");
    assert_eq!(s["public_net"]["firewalls"][0]["id"], 38);
    let listed = p.machines("lab").await.unwrap();
    assert_eq!(listed.len(), 1);
    assert!(p.delete(&m.id).await.unwrap());
    assert!(fake.servers().is_empty());
    // Leave none of them set for the tests after this one.
    for v in orca::hetzner::ConfigKey::names() {
        std::env::remove_var(v);
    }
}

#[tokio::test]
async fn of_with_hetzner_from_a_map_names_every_problem_and_reaches_the_labels_extension() {
    use orca::hetzner::ConfigKey;
    use orca::Settings;
    // A missing token, a wrong endpoint and a key that is no setting: all named in one error.
    let bad = Settings::new()
        .with(ConfigKey::Endpoint.as_str(), "not a url")
        .with("ORCA_HCLOUD_FIREWAL", "typo");
    let e = orca::of_with("hetzner", "stack-1", &bad).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidSettings);
    for key in [
        "HCLOUD_TOKEN",
        "ORCA_HCLOUD_ENDPOINT",
        "ORCA_HCLOUD_FIREWAL",
    ] {
        assert!(e.to_string().contains(key), "{key}: {e}");
    }
    let fake = FakeHetzner::start_with(Options {
        action_time: Duration::ZERO,
        ..Options::default()
    })
    .await
    .unwrap();
    let settings: Settings = [
        (ConfigKey::Token, fake.token()),
        (ConfigKey::Endpoint, fake.url()),
        (ConfigKey::Network, "orca-net".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.as_str(), v))
    .collect();
    assert!(!format!("{settings:?}").contains(&fake.token()));
    let p = orca::of_with("hetzner", "stack-1", &settings)
        .await
        .unwrap();
    assert!(p.capabilities().private_address);
    let m = p
        .create(&MachineSpec::new("map-1", "cx23", "fsn1", "lab"))
        .await
        .unwrap()
        .machine()
        .unwrap();
    assert!(!m.private_address.is_empty() && !m.fqdn.is_empty());
    let labels = p
        .machine_labels()
        .expect("the labels extension through dyn Provider");
    let set = orca::labels::Labels::from([("shed-state".to_string(), "ready".to_string())]);
    let m = labels.set_labels(&m.id, &set, &[]).await.unwrap();
    assert_eq!(m.labels["shed-state"], "ready");
    assert!(p.delete(&m.id).await.unwrap());
}
