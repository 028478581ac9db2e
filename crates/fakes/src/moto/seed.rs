//! moto's address and the seeding every EC2 test needs, made with plain Query calls (no SDK).

use std::collections::BTreeMap;

use super::{xml, REGION, ZONE};

/// The variable `scripts/with-moto` sets.
pub const MOTO_ENV: &str = "ORCA_TEST_MOTO_ENDPOINT";

/// moto's address, or `None` (with a SKIPPED line) when the tests run without it. Under CI (the
/// variable `CI` set) a missing emulator is a failure, never a silent skip.
pub fn moto(test: &str) -> Option<String> {
    match std::env::var(MOTO_ENV).ok().filter(|v| !v.is_empty()) {
        Some(url) => {
            let host_ok =
                url.starts_with("http://127.0.0.1:") || url.starts_with("http://localhost:");
            assert!(
                host_ok,
                "{MOTO_ENV}={url}: the tests talk to 127.0.0.1 only"
            );
            Some(url.trim_end_matches('/').to_string())
        }
        None if std::env::var_os("CI").is_some() => {
            panic!("{test}: {MOTO_ENV} is unset under CI; run the tests through scripts/with-moto")
        }
        None => {
            // Straight to stderr, past the test harness's capture, so that the skip is seen.
            use std::io::Write as _;
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED {test}: {MOTO_ENV} is unset (run: scripts/with-moto cargo test -p orca-ec2)"
            );
            None
        }
    }
}

/// What the driver needs in moto: subnets, a security group, an instance profile.
#[derive(Debug, Clone)]
pub struct Seed {
    /// moto's address.
    pub moto: String,
    /// The default subnet of each availability zone.
    pub subnets: BTreeMap<String, String>,
    /// A security group of the default VPC.
    pub security_group: String,
    /// An instance profile (a name).
    pub instance_profile: String,
}

/// One Query call to moto for `service` (`ec2` or `iam`) in `region`, answering the body; panics
/// naming the action when moto refuses it.
pub(crate) async fn query(
    moto: &str,
    region: &str,
    service: &str,
    params: &[(&str, &str)],
) -> String {
    let action = params
        .iter()
        .find(|(k, _)| *k == "Action")
        .map_or("?", |(_, v)| *v);
    let r = reqwest::Client::new()
        .post(format!("{moto}/"))
        .header(
            "Authorization",
            format!(
                "AWS4-HMAC-SHA256 Credential=AKIDORCATEST/20250101/{region}/{service}/aws4_request, \
                 SignedHeaders=host, Signature=0"
            ),
        )
        .form(params)
        .send()
        .await
        .unwrap_or_else(|e| panic!("{action}: {e}"));
    let ok = r.status().is_success();
    let body = r.text().await.unwrap_or_default();
    assert!(ok, "{action}: {body}");
    body
}

/// Seeds moto in [`REGION`] (idempotently, with fresh names, so that test binaries and runs never
/// meet).
pub async fn seed(moto: &str) -> Seed {
    let seed = seed_in(moto, REGION).await;
    assert!(
        seed.subnets.contains_key(ZONE),
        "moto has no default subnet in {ZONE}: {:?}",
        seed.subnets
    );
    seed
}

/// Seeds moto in `region` (another partition's, such as `us-gov-west-1`, has its own IAM).
pub async fn seed_in(moto: &str, region: &str) -> Seed {
    let body = query(
        moto,
        region,
        "ec2",
        &[
            ("Action", "DescribeSubnets"),
            ("Version", "2016-11-15"),
            ("Filter.1.Name", "default-for-az"),
            ("Filter.1.Value.1", "true"),
        ],
    )
    .await;
    let all = xml::elements(&body);
    let set = xml::find(&all, &["DescribeSubnetsResponse", "subnetSet"]);
    let subnets: BTreeMap<String, String> = set
        .into_iter()
        .flat_map(|set| xml::children(&all, Some(set), "item"))
        .filter_map(|item| {
            let field =
                |name| xml::child(&all, Some(item), name).map(|i| xml::text(&body, &all, i));
            Some((
                field("availabilityZone")?.to_string(),
                field("subnetId")?.to_string(),
            ))
        })
        .collect();
    assert!(
        !subnets.is_empty(),
        "moto has no default subnet in {region}"
    );
    let suffix = format!("{:08x}", fastrand::u32(..));
    let name = format!("orca-test-{suffix}");
    let body = query(
        moto,
        region,
        "ec2",
        &[
            ("Action", "CreateSecurityGroup"),
            ("Version", "2016-11-15"),
            ("GroupName", &name),
            ("GroupDescription", "orca-ec2 tests"),
        ],
    )
    .await;
    let security_group = xml::texts(&body, "groupId")
        .pop()
        .unwrap_or_else(|| panic!("CreateSecurityGroup answered no groupId: {body}"));
    // moto checks that the instance profile exists, in its IAM.
    query(
        moto,
        region,
        "iam",
        &[
            ("Action", "CreateInstanceProfile"),
            ("Version", "2010-05-08"),
            ("InstanceProfileName", &name),
        ],
    )
    .await;
    Seed {
        moto: moto.to_string(),
        subnets,
        security_group,
        instance_profile: name,
    }
}
