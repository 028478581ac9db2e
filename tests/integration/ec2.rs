//! `orca::of("ec2", owner)` against the EC2 emulator (moto, started by `scripts/with-moto`), from
//! environment variables, and `orca::of_with("ec2", owner, settings)` from a map with the environment
//! empty. One test function: the variables are process-global.
//!
//! Without `ORCA_TEST_MOTO_ENDPOINT` the test says SKIPPED and passes, except under CI (`CI` set), where
//! it fails: CI never skips silently.

use std::io::Write as _;

use orca::{Created, Error, MachineSpec, Settings};

const MOTO_ENV: &str = "ORCA_TEST_MOTO_ENDPOINT";
const ZONE: &str = "us-east-1a";
const VARS: &[&str] = &[
    "ORCA_EC2_SUBNETS",
    "ORCA_EC2_SECURITY_GROUP",
    "ORCA_EC2_INSTANCE_PROFILE",
    "ORCA_EC2_IMAGES",
    "ORCA_EC2_ENDPOINT",
    "ORCA_EC2_ROOT_VOLUME_GB",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_PROFILE",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_EC2",
];

/// One EC2 or IAM Query call to moto (which checks no signature), answering the XML.
async fn query(moto: &str, service: &str, params: &[(&str, &str)]) -> String {
    let auth = format!(
        "AWS4-HMAC-SHA256 Credential=AKIDORCATEST/20250101/us-east-1/{service}/aws4_request, \
         SignedHeaders=host, Signature=0"
    );
    let r = reqwest::Client::new()
        .post(format!("{moto}/"))
        .header("Authorization", auth)
        .form(params)
        .send()
        .await
        .unwrap();
    let status = r.status();
    let body = r.text().await.unwrap();
    assert!(status.is_success(), "{params:?}: {status} {body}");
    body
}

/// The text of the first `<tag>` in `xml`.
fn first(xml: &str, tag: &str) -> String {
    let open = format!("<{tag}>");
    let start = xml
        .find(&open)
        .unwrap_or_else(|| panic!("no <{tag}> in {xml}"))
        + open.len();
    let end = xml[start..].find(&format!("</{tag}>")).unwrap() + start;
    xml[start..end].to_string()
}

/// Environment variables are process-global, and the other modules' tests of this binary run
/// beside it in threads under `cargo test`: the test that sets them runs alone, in a child process.
#[test]
fn ec2_through_the_facade_from_the_environment() {
    orca_fakes::alone::run_alone(
        module_path!(),
        "ec2_through_the_facade_from_the_environment_alone",
        &[],
        &[],
    );
}

/// The test itself, run alone in a process of its own: it clears and sets AWS_* and ORCA_EC2_* variables that aws-config and the EC2 driver read.
#[tokio::test]
#[ignore = "runs alone, started by the test of the same name without _alone"]
async fn ec2_through_the_facade_from_the_environment_alone() {
    orca_fakes::alone::assert_alone(
        module_path!(),
        "ec2_through_the_facade_from_the_environment_alone",
    );
    let Some(moto) = std::env::var(MOTO_ENV).ok().filter(|v| !v.is_empty()) else {
        assert!(
            std::env::var_os("CI").is_none(),
            "{MOTO_ENV} is unset under CI: run the tests through scripts/with-moto"
        );
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED ec2_through_the_facade_from_the_environment: {MOTO_ENV} is unset \
             (run: scripts/with-moto cargo test --test ec2)"
        );
        return;
    };
    assert!(
        moto.starts_with("http://127.0.0.1:"),
        "{moto}: 127.0.0.1 only"
    );

    // Nothing of aws-config's chain may be found outside this test: no profile files, no IMDS.
    for v in VARS {
        std::env::remove_var(v);
    }
    let nowhere = std::env::temp_dir().join(format!("orca-ec2-test-{}-none", std::process::id()));
    std::env::set_var("AWS_CONFIG_FILE", &nowhere);
    std::env::set_var("AWS_SHARED_CREDENTIALS_FILE", &nowhere);
    std::env::set_var("AWS_EC2_METADATA_DISABLED", "true");

    // Nothing set: every missing setting is named at once, the region among them.
    let e = orca::of("ec2", "stack-1").await.unwrap_err();
    let Error::InvalidSettings { keys, .. } = &e else {
        panic!("{e:?}")
    };
    for k in [
        "ORCA_EC2_SUBNETS",
        "ORCA_EC2_SECURITY_GROUP",
        "ORCA_EC2_INSTANCE_PROFILE",
        "AWS_REGION",
    ] {
        assert!(keys.iter().any(|x| x == k), "{k} not named in {e}");
    }

    // Seed moto: the default subnet of the zone, a security group, an instance profile.
    let suffix = format!("{:08x}", std::process::id());
    let subnets = query(
        &moto,
        "ec2",
        &[
            ("Action", "DescribeSubnets"),
            ("Version", "2016-11-15"),
            ("Filter.1.Name", "availability-zone"),
            ("Filter.1.Value.1", ZONE),
            ("Filter.2.Name", "default-for-az"),
            ("Filter.2.Value.1", "true"),
        ],
    )
    .await;
    let subnet = first(&subnets, "subnetId");
    let sg_name = format!("orca-facade-{suffix}");
    let sg = query(
        &moto,
        "ec2",
        &[
            ("Action", "CreateSecurityGroup"),
            ("Version", "2016-11-15"),
            ("GroupName", &sg_name),
            ("GroupDescription", "orca facade test"),
        ],
    )
    .await;
    let sg = first(&sg, "groupId");
    let profile = format!("orca-facade-{suffix}");
    query(
        &moto,
        "iam",
        &[
            ("Action", "CreateInstanceProfile"),
            ("Version", "2010-05-08"),
            ("InstanceProfileName", &profile),
        ],
    )
    .await;

    // Settings as data (keeper's way, with credentials from its vault): region and credentials come
    // from the map, and the process environment, which has none, is never asked.
    let settings = Settings::new()
        .with("AWS_REGION", "us-east-1")
        .with("AWS_ACCESS_KEY_ID", "AKIDORCATEST")
        .with("AWS_SECRET_ACCESS_KEY", "orca-test-secret-from-a-vault")
        .with("ORCA_EC2_ENDPOINT", &moto)
        .with("ORCA_EC2_SUBNETS", format!("{ZONE}={subnet}"))
        .with("ORCA_EC2_SECURITY_GROUP", &sg)
        .with("ORCA_EC2_INSTANCE_PROFILE", &profile);
    let p = orca::of_with("ec2", "stack-1", &settings).await.unwrap();
    assert_eq!((p.kind(), p.owner()), ("ec2", "stack-1"));
    let pool = format!("facade-map-{suffix}");
    let spec = MachineSpec::new("facade-map-1", "t3.micro", ZONE, &pool);
    let m = p.create(&spec).await.unwrap().machine().expect("stock");
    assert_eq!(p.machines(&pool).await.unwrap().len(), 1);
    assert!(p.delete(&m.id).await.unwrap());
    // A missing key and a wrong value are named, with a typo, all at once; the secret never shows.
    let mut bad = settings.clone();
    bad.insert("AWS_REGION", "");
    bad.insert("ORCA_EC2_ROOT_VOLUME_GB", "lots");
    bad.insert("ORCA_EC2_SUBNET", "typo");
    let e = orca::of_with("ec2", "stack-1", &bad).await.unwrap_err();
    let Error::InvalidSettings { keys, .. } = &e else {
        panic!("{e:?}")
    };
    for k in ["AWS_REGION", "ORCA_EC2_ROOT_VOLUME_GB", "ORCA_EC2_SUBNET"] {
        assert!(keys.iter().any(|x| x == k), "{k} not named in {e}");
    }
    assert!(!format!("{e} {e:?} {bad:?}").contains("orca-test-secret-from-a-vault"));

    std::env::set_var("AWS_REGION", "us-east-1");
    std::env::set_var("AWS_ACCESS_KEY_ID", "AKIDORCATEST");
    std::env::set_var("AWS_SECRET_ACCESS_KEY", "orca-test-secret");
    std::env::set_var("ORCA_EC2_ENDPOINT", &moto);
    std::env::set_var("ORCA_EC2_SUBNETS", format!("{ZONE}={subnet}"));
    std::env::set_var("ORCA_EC2_SECURITY_GROUP", &sg);
    std::env::set_var("ORCA_EC2_INSTANCE_PROFILE", &profile);

    let p = orca::of("ec2", "stack-1").await.unwrap();
    assert_eq!((p.kind(), p.owner()), ("ec2", "stack-1"));
    assert!(p.capabilities().start_stop && p.capabilities().resize);
    assert_eq!(p.arch("t4g.small").await.unwrap().as_str(), "arm64");
    let pool = format!("facade-{suffix}");
    let spec =
        MachineSpec::new("facade-1", "t4g.small", ZONE, &pool).with_user_data("#cloud-config\n");
    let Created::Machine(m) = p.create(&spec).await.unwrap() else {
        panic!("no stock")
    };
    assert_eq!(
        (m.name.as_str(), m.pool.as_str()),
        ("facade-1", pool.as_str())
    );
    let listed = p.machines(&pool).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].id, m.id);
    // Another owner on the same account sees none of it and may not delete it.
    let other = orca::of("ec2", "stack-2").await.unwrap();
    assert!(other.machines(&pool).await.unwrap().is_empty());
    assert!(matches!(
        other.delete(&m.id).await,
        Err(Error::NotOwned { .. })
    ));
    assert!(p.delete(&m.id).await.unwrap());
    assert!(p.machines(&pool).await.unwrap().is_empty());
}
