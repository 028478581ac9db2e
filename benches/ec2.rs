//! The EC2 driver listing 1,000 instances from moto: the requests it makes, and the client's own CPU
//! time beside the same listing done by a raw HTTP request to moto (the server's share), as a ratio.
//!
//! Run: `scripts/with-moto cargo bench --bench ec2`. Without `ORCA_TEST_MOTO_ENDPOINT` it says so and
//! exits 0. The 1,000 instances are made with RunInstances in batches (MinCount = MaxCount = 50), so
//! the set-up takes seconds; moto keeps them until it stops.

use std::time::{Duration, Instant};

use orca::ec2::{Config, Ec2Provider, SecretString, StaticCredentials};
use orca::{Provider, RetryPolicy};

const MOTO_ENV: &str = "ORCA_TEST_MOTO_ENDPOINT";
const ZONE: &str = "us-east-1a";
const N: usize = 1000;
const BATCH: usize = 50;
const PAGE: i32 = 1000;
const ROUNDS: u32 = 3;
const OPS: usize = 5;

fn auth(service: &str) -> String {
    format!(
        "AWS4-HMAC-SHA256 Credential=AKIDORCABENCH/20250101/us-east-1/{service}/aws4_request, \
         SignedHeaders=host, Signature=0"
    )
}

/// One Query call to moto (which checks no signature), answering the XML.
async fn query(
    http: &reqwest::Client,
    moto: &str,
    service: &str,
    params: &[(&str, &str)],
) -> String {
    let r = http
        .post(format!("{moto}/"))
        .header("Authorization", auth(service))
        .form(params)
        .send()
        .await
        .expect("moto answers");
    let status = r.status();
    let body = r.text().await.expect("a body");
    assert!(status.is_success(), "{params:?}: {status} {body}");
    body
}

fn first(xml: &str, tag: &str) -> String {
    let open = format!("<{tag}>");
    let start = xml.find(&open).unwrap_or_else(|| panic!("no <{tag}>")) + open.len();
    let end = xml[start..].find(&format!("</{tag}>")).unwrap() + start;
    xml[start..end].to_string()
}

/// This process's CPU time (user + system), from /proc/self/stat (clock ticks of 10 ms).
fn cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<u64> = after
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    // Fields 14 and 15 of the line (utime, stime); `after` starts at field 3.
    let ticks = f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0);
    Duration::from_millis(ticks * 10)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> orca::Result<()> {
    let Some(moto) = std::env::var(MOTO_ENV).ok().filter(|v| !v.is_empty()) else {
        println!(
            "ec2 bench: {MOTO_ENV} is unset; run it as: scripts/with-moto cargo bench --bench ec2"
        );
        return Ok(());
    };
    assert!(
        moto.starts_with("http://127.0.0.1:"),
        "{moto}: 127.0.0.1 only"
    );
    let http = reqwest::Client::new();
    let run = format!("{:08x}", std::process::id());
    let pool = format!("bench-{run}");
    let owner = "bench";

    // Seed: the zone's default subnet, a security group, an instance profile.
    let subnet = first(
        &query(
            &http,
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
        .await,
        "subnetId",
    );
    let sg_name = format!("orca-bench-{run}");
    let sg = first(
        &query(
            &http,
            &moto,
            "ec2",
            &[
                ("Action", "CreateSecurityGroup"),
                ("Version", "2016-11-15"),
                ("GroupName", &sg_name),
                ("GroupDescription", "orca bench"),
            ],
        )
        .await,
        "groupId",
    );
    let profile = format!("orca-bench-{run}");
    query(
        &http,
        &moto,
        "iam",
        &[
            ("Action", "CreateInstanceProfile"),
            ("Version", "2010-05-08"),
            ("InstanceProfileName", &profile),
        ],
    )
    .await;

    // 1,000 instances of this owner and pool, in batches.
    let t = Instant::now();
    let count = BATCH.to_string();
    for b in 0..N / BATCH {
        let name = format!("bench-{b}");
        query(
            &http,
            &moto,
            "ec2",
            &[
                ("Action", "RunInstances"),
                ("Version", "2016-11-15"),
                ("ImageId", "ami-0b1e2a3d4c5f60a02"),
                ("InstanceType", "t3.micro"),
                ("MinCount", &count),
                ("MaxCount", &count),
                ("SubnetId", &subnet),
                ("SecurityGroupId.1", &sg),
                ("TagSpecification.1.ResourceType", "instance"),
                ("TagSpecification.1.Tag.1.Key", "orca"),
                ("TagSpecification.1.Tag.1.Value", "pool"),
                ("TagSpecification.1.Tag.2.Key", "orca-pool"),
                ("TagSpecification.1.Tag.2.Value", &pool),
                ("TagSpecification.1.Tag.3.Key", "orca-owner"),
                ("TagSpecification.1.Tag.3.Value", owner),
                ("TagSpecification.1.Tag.4.Key", "Name"),
                ("TagSpecification.1.Tag.4.Value", &name),
            ],
        )
        .await;
    }
    let made = t.elapsed();

    let config = Config::builder()
        .region("us-east-1")
        .endpoint(&moto)
        .credentials(StaticCredentials::new(
            "AKIDORCABENCH",
            SecretString::from("orca-bench-secret"),
        ))
        .subnet(ZONE, &subnet)
        .security_group(&sg)
        .instance_profile(&profile)
        .page_size(PAGE)
        .retry(RetryPolicy::fast())
        .build()?;
    let p = Ec2Provider::new(config, owner).await?;

    // Requests per create, list and delete of one machine through the driver (a pool of its own; the
    // first create's catalogue look-ups, DescribeInstanceTypes and DescribeImages, are cached and
    // counted apart).
    let ops_pool = format!("bench-ops-{run}");
    let spec = |i: usize| orca::MachineSpec::new(format!("ops-{i}"), "t3.micro", ZONE, &ops_pool);
    let before = p.requests();
    let first_made = p.create(&spec(0)).await?.machine().expect("stock");
    let first_create = p.requests() - before;
    let mut made_ids = vec![first_made.id];
    let before = p.requests();
    for i in 1..=OPS {
        made_ids.push(p.create(&spec(i)).await?.machine().expect("stock").id);
    }
    let per_create = (p.requests() - before) as f64 / OPS as f64;
    let before = p.requests();
    assert_eq!(p.machines(&ops_pool).await?.len(), OPS + 1);
    let per_list = p.requests() - before;
    let before = p.requests();
    for id in &made_ids {
        assert!(p.delete(id).await?);
    }
    let per_delete = (p.requests() - before) as f64 / made_ids.len() as f64;

    // Warm up both clients (connections, first-call set-up), then measure.
    assert_eq!(p.machines(&pool).await?.len(), N);
    let filters: Vec<(String, String)> = vec![
        ("Action".into(), "DescribeInstances".into()),
        ("Version".into(), "2016-11-15".into()),
        ("MaxResults".into(), PAGE.to_string()),
        ("Filter.1.Name".into(), "tag:orca".into()),
        ("Filter.1.Value.1".into(), "pool".into()),
        ("Filter.2.Name".into(), "tag:orca-pool".into()),
        ("Filter.2.Value.1".into(), pool.clone()),
        ("Filter.3.Name".into(), "tag:orca-owner".into()),
        ("Filter.3.Value.1".into(), owner.into()),
        ("Filter.4.Name".into(), "instance-state-name".into()),
        ("Filter.4.Value.1".into(), "pending".into()),
        ("Filter.4.Value.2".into(), "running".into()),
        ("Filter.4.Value.3".into(), "shutting-down".into()),
        ("Filter.4.Value.4".into(), "stopping".into()),
        ("Filter.4.Value.5".into(), "stopped".into()),
    ];
    let raw_list = |http: reqwest::Client, moto: String, filters: Vec<(String, String)>| async move {
        let mut requests = 0u64;
        let mut bytes = 0usize;
        let mut token: Option<String> = None;
        loop {
            let mut form = filters.clone();
            if let Some(t) = &token {
                form.push(("NextToken".into(), t.clone()));
            }
            let r = http
                .post(format!("{moto}/"))
                .header("Authorization", auth("ec2"))
                .form(&form)
                .send()
                .await
                .expect("moto answers");
            let body = r.text().await.expect("a body");
            requests += 1;
            bytes += body.len();
            match body.find("<nextToken>") {
                Some(_) => token = Some(first(&body, "nextToken")),
                None => return (requests, bytes, body.matches("<instanceId>").count()),
            }
        }
    };
    let (_, bytes, seen) = raw_list(http.clone(), moto.clone(), filters.clone()).await;
    assert_eq!(seen, N, "the raw listing sees every instance");

    let mut driver_wall = Duration::ZERO;
    let mut driver_cpu = Duration::ZERO;
    let before = p.requests();
    for _ in 0..ROUNDS {
        let (t, c) = (Instant::now(), cpu());
        let listed = p.machines(&pool).await?;
        driver_cpu += cpu() - c;
        driver_wall += t.elapsed();
        assert_eq!(listed.len(), N);
    }
    let driver_requests = (p.requests() - before) as f64 / ROUNDS as f64;

    let mut raw_wall = Duration::ZERO;
    let mut raw_cpu = Duration::ZERO;
    let mut raw_requests = 0u64;
    for _ in 0..ROUNDS {
        let (t, c) = (Instant::now(), cpu());
        let (r, _, seen) = raw_list(http.clone(), moto.clone(), filters.clone()).await;
        raw_cpu += cpu() - c;
        raw_wall += t.elapsed();
        raw_requests += r;
        assert_eq!(seen, N);
    }

    let per = |d: Duration| ms(d) / ROUNDS as f64;
    let (dw, dc, rw, rc) = (
        per(driver_wall),
        per(driver_cpu),
        per(raw_wall),
        per(raw_cpu),
    );
    // The raw client does next to nothing: its wall time is the server's share (moto's work).
    let server = (rw - rc).max(0.001);
    println!("ec2 driver against moto: listing {N} instances of one owner and pool ({ROUNDS} rounds, mean)");
    println!(
        "  set-up: {} RunInstances of {BATCH} in {:.1} s",
        N / BATCH,
        made.as_secs_f64()
    );
    println!(
        "  requests per listing: driver {driver_requests:.1}, raw {:.1} (EC2's ideal ceil({N}/{PAGE}) = {}; \
         moto pages by reservation: {} reservations)",
        raw_requests as f64 / ROUNDS as f64,
        N.div_ceil(PAGE as usize),
        N / BATCH
    );
    println!(
        "  requests per call: create {per_create:.1} (the first {first_create}, with the cached \
         catalogue look-ups), list {per_list} ({} machines), delete {per_delete:.1}",
        OPS + 1
    );
    println!("  answer size: {:.0} KiB", bytes as f64 / 1024.0);
    println!("  driver: {dw:.1} ms wall, {dc:.1} ms client CPU (parse + map + filter)");
    println!("  raw HTTP: {rw:.1} ms wall, {rc:.1} ms client CPU; server's share {server:.1} ms");
    println!(
        "  client CPU / server time: {:.3}; driver wall / raw wall: {:.2}",
        dc / server,
        dw / rw
    );
    println!(
        "  (CPU from /proc/self/stat, 10 ms ticks; a debug build costs several times a release build)"
    );
    Ok(())
}
