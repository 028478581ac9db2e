//! `orca::of("gce", owner)` (from environment variables) and `orca::of_with("gce", owner, &settings)`
//! against the fake Compute Engine API, used as a front-end would: through `Arc<dyn Provider>`, with
//! its extensions. One test function for the environment, run alone: the variables are process-global.

use orca::gce::ConfigKey;
use orca::labels::Labels;
use orca::{Created, Error, MachineSpec, Settings};
use orca_fakes::gce::{FakeGce, NETWORK, PROJECT, SSH_RULE, SUBNET, ZONE};

/// Environment variables are process-global, and the other modules' tests of this binary run
/// beside it in threads under `cargo test`: the test that sets them runs alone, in a child process.
#[test]
fn gce_through_the_facade_from_the_environment() {
    orca_fakes::alone::run_alone(
        module_path!(),
        "gce_through_the_facade_from_the_environment_alone",
        &[],
        &[],
    );
}

/// The test itself, run alone in a process of its own: it clears and sets the ORCA_GCE_* variables the Compute Engine driver reads.
#[tokio::test]
#[ignore = "runs alone, started by the test of the same name without _alone"]
async fn gce_through_the_facade_from_the_environment_alone() {
    orca_fakes::alone::assert_alone(
        module_path!(),
        "gce_through_the_facade_from_the_environment_alone",
    );
    for k in ConfigKey::ALL {
        std::env::remove_var(k.as_str());
    }
    // Nothing set: every missing variable is named at once.
    let e = orca::of("gce", "stack-1").await.unwrap_err();
    let Error::InvalidSettings { keys, .. } = &e else {
        panic!("{e:?}")
    };
    for k in [
        "ORCA_GCE_PROJECT",
        "ORCA_GCE_NETWORK",
        "ORCA_GCE_SUBNET",
        "ORCA_GCE_CREDENTIALS_FILE",
    ] {
        assert!(keys.iter().any(|x| x.contains(k)), "{k} not named in {e}");
    }

    let fake = FakeGce::start().await.unwrap();
    let key = std::env::temp_dir().join(format!("orca-gce-test-{}.json", std::process::id()));
    std::fs::write(&key, fake.service_account_json()).unwrap();
    for (k, v) in [
        (ConfigKey::Project, PROJECT.to_string()),
        (ConfigKey::Zone, ZONE.to_string()),
        (ConfigKey::Network, NETWORK.to_string()),
        (ConfigKey::Subnet, SUBNET.to_string()),
        (ConfigKey::CredentialsFile, key.display().to_string()),
        (ConfigKey::Endpoint, fake.endpoint()),
        (ConfigKey::PageSize, "1".to_string()),
        (ConfigKey::NetworkTags, "shed-test".to_string()),
        (ConfigKey::MaxRunDuration, "2h".to_string()),
    ] {
        std::env::set_var(k.as_str(), v);
    }

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
    assert_eq!(p.extensions(), ["machine_labels", "firewall_rules"]);
    let spec = MachineSpec::new("facade-1", "t2a-standard-1", ZONE, "lab");
    let Created::Machine(m) = p.create(&spec).await.unwrap() else {
        panic!("no stock")
    };
    assert_eq!(m.id, format!("{ZONE}:facade-1"));
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
    for k in ConfigKey::ALL {
        std::env::remove_var(k.as_str());
    }
}

fn settings(fake: &FakeGce, key: &std::path::Path) -> Settings {
    Settings::new()
        .with(ConfigKey::Project.as_str(), PROJECT)
        .with(ConfigKey::Network.as_str(), NETWORK)
        .with(ConfigKey::Subnet.as_str(), SUBNET)
        .with(
            ConfigKey::CredentialsFile.as_str(),
            key.display().to_string(),
        )
        .with(ConfigKey::Endpoint.as_str(), fake.endpoint())
}

#[tokio::test]
async fn gce_from_settings_as_a_front_end_uses_it() {
    let fake = FakeGce::start().await.unwrap();
    let key = std::env::temp_dir().join(format!("orca-gce-settings-{}.json", std::process::id()));
    std::fs::write(&key, fake.service_account_json()).unwrap();
    // A missing key, a wrong value and an unknown key: all named in one error, before any call.
    let bad = settings(&fake, &key)
        .with(ConfigKey::Project.as_str(), "")
        .with(ConfigKey::PageSize.as_str(), "1000")
        .with("SHED_GCE_PROJECT", PROJECT);
    let e = orca::of_with("gce", "stack-1", &bad).await.unwrap_err();
    match &e {
        Error::InvalidSettings { keys, .. } => {
            assert_eq!(
                keys,
                &["ORCA_GCE_PROJECT", "SHED_GCE_PROJECT", "ORCA_GCE_PAGE_SIZE"]
            )
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(fake.control().requests(), 0);

    // A provider of every zone, reached only through `Arc<dyn Provider>` and its extensions.
    let p = orca::of_with("gce", "stack-1", &settings(&fake, &key))
        .await
        .unwrap();
    let m = p
        .create(
            &MachineSpec::new("shed-1", "e2-small", "us-central1-a", "sheds")
                .with_label("shed-state", "creating"),
        )
        .await
        .unwrap()
        .machine()
        .unwrap();
    assert_eq!(m.id, "us-central1-a:shed-1");
    assert_eq!(m.fqdn, format!("shed-1.us-central1-a.c.{PROJECT}.internal"));
    let ready = Labels::from([("shed-state".to_string(), "ready".to_string())]);
    let m = p
        .machine_labels()
        .unwrap()
        .set_labels(&m.id, &ready, &[])
        .await
        .unwrap();
    assert_eq!(m.labels["shed-state"], "ready");
    let fw = p.firewall_rules().unwrap();
    let rule = fw.rule(SSH_RULE).await.unwrap().unwrap();
    assert_eq!(rule.network, fw.network_name());
    let rule = fw
        .set_source_ranges(SSH_RULE, &["198.51.100.9/32".to_string()])
        .await
        .unwrap();
    assert_eq!(rule.source_ranges, ["198.51.100.9/32"]);
    assert_eq!(p.machines("sheds").await.unwrap().len(), 1);
    assert!(p.delete(&m.id).await.unwrap());
    let _ = std::fs::remove_file(&key);
}
