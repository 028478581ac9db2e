//! The EC2 driver listing instances from moto: the requests it makes, and its client CPU beside
//! boto3's paginator listing the same pool with the same filters in the same run, with where the
//! driver's CPU goes (SigV4 signing, the SDK's per-request work, the driver's own XML reading into
//! machines, HTTP, the rest), and the bare SDK (with its own XML reader) beside it.
//!
//! Run: `scripts/with-moto cargo bench --bench ec2`. Without `ORCA_TEST_MOTO_ENDPOINT` it says so and
//! exits 0. boto3 runs from moto's venv (`ORCA_MOTO_PYTHON`, which scripts/with-moto sets); without it
//! that comparison is skipped and said so. The instances (a pool of 400, and one of 1,000) are made
//! with RunInstances in batches (MinCount = MaxCount = 50), so the set-up takes seconds; moto keeps
//! them until it stops.
//!
//! CPU is this process's (`CLOCK_PROCESS_CPUTIME_ID`, nanoseconds; the runtime is single-threaded,
//! and moto runs in its own process); boto3's is `time.process_time()` around its listings alone.

use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

use aws_credential_types::Credentials;
use aws_sdk_ec2::config::http::{HttpRequest, HttpResponse};
use aws_sdk_ec2::config::retry::RetryConfig;
use aws_sdk_ec2::config::{BehaviorVersion, Region, RuntimeComponents};
use aws_sdk_ec2::types::Filter;
use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpConnector,
};
use aws_smithy_runtime_api::client::identity::Identity;
use aws_smithy_types::body::SdkBody;
use orca::ec2::{Config, Ec2Provider, SecretString, StaticCredentials};
use orca::{Provider, RetryPolicy};

const MOTO_ENV: &str = "ORCA_TEST_MOTO_ENDPOINT";
const PYTHON_ENV: &str = "ORCA_MOTO_PYTHON";
const ZONE: &str = "us-east-1a";
/// The pool compared with boto3, and its listings per client.
const POOL: usize = 400;
const ROUNDS: u32 = 20;
/// The larger pool, compared with a raw HTTP request (the server's share).
const BIG: usize = 1000;
const BIG_ROUNDS: u32 = 3;
const BATCH: usize = 50;
const PAGE: i32 = 1000;
const OPS: usize = 5;
const KEY_ID: &str = "AKIDORCABENCH";
const SECRET: &str = "orca-bench-secret";
const OWNER: &str = "bench";
/// The states a listing shows (every state but gone), as the driver asks for them.
const STATES: [&str; 5] = ["pending", "running", "shutting-down", "stopping", "stopped"];

fn auth(service: &str) -> String {
    format!(
        "AWS4-HMAC-SHA256 Credential={KEY_ID}/20250101/us-east-1/{service}/aws4_request, \
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

/// This process's CPU time (user + system, every thread), to the nanosecond.
fn cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// What the instances are made in: the zone's default subnet, a security group, an instance profile.
struct Seed {
    subnet: String,
    sg: String,
    profile: String,
}

async fn seed(http: &reqwest::Client, moto: &str, run: &str) -> Seed {
    let subnets = [
        ("Action", "DescribeSubnets"),
        ("Version", "2016-11-15"),
        ("Filter.1.Name", "availability-zone"),
        ("Filter.1.Value.1", ZONE),
        ("Filter.2.Name", "default-for-az"),
        ("Filter.2.Value.1", "true"),
    ];
    let subnet = first(&query(http, moto, "ec2", &subnets).await, "subnetId");
    let sg_name = format!("orca-bench-{run}");
    let group = [
        ("Action", "CreateSecurityGroup"),
        ("Version", "2016-11-15"),
        ("GroupName", sg_name.as_str()),
        ("GroupDescription", "orca bench"),
    ];
    let sg = first(&query(http, moto, "ec2", &group).await, "groupId");
    let profile = format!("orca-bench-{run}");
    let iam = [
        ("Action", "CreateInstanceProfile"),
        ("Version", "2010-05-08"),
        ("InstanceProfileName", profile.as_str()),
    ];
    query(http, moto, "iam", &iam).await;
    Seed {
        subnet,
        sg,
        profile,
    }
}

/// `n` instances of this owner's `pool`, in batches of [`BATCH`]; answers the time it took.
async fn make_pool(
    http: &reqwest::Client,
    moto: &str,
    seed: &Seed,
    pool: &str,
    n: usize,
) -> Duration {
    let t = Instant::now();
    let count = BATCH.to_string();
    for b in 0..n / BATCH {
        let name = format!("{pool}-{b}");
        let params = [
            ("Action", "RunInstances"),
            ("Version", "2016-11-15"),
            ("ImageId", "ami-0b1e2a3d4c5f60a02"),
            ("InstanceType", "t3.micro"),
            ("MinCount", count.as_str()),
            ("MaxCount", count.as_str()),
            ("SubnetId", seed.subnet.as_str()),
            ("SecurityGroupId.1", seed.sg.as_str()),
            ("TagSpecification.1.ResourceType", "instance"),
            ("TagSpecification.1.Tag.1.Key", "orca"),
            ("TagSpecification.1.Tag.1.Value", "pool"),
            ("TagSpecification.1.Tag.2.Key", "orca-pool"),
            ("TagSpecification.1.Tag.2.Value", pool),
            ("TagSpecification.1.Tag.3.Key", "orca-owner"),
            ("TagSpecification.1.Tag.3.Value", OWNER),
            ("TagSpecification.1.Tag.4.Key", "Name"),
            ("TagSpecification.1.Tag.4.Value", name.as_str()),
        ];
        query(http, moto, "ec2", &params).await;
    }
    t.elapsed()
}

/// DescribeInstances of this owner's `pool` as the driver asks for it, as form fields.
fn list_form(pool: &str) -> Vec<(String, String)> {
    let page = PAGE.to_string();
    let mut form: Vec<(String, String)> = [
        ("Action", "DescribeInstances"),
        ("Version", "2016-11-15"),
        ("MaxResults", page.as_str()),
        ("Filter.1.Name", "tag:orca"),
        ("Filter.1.Value.1", "pool"),
        ("Filter.2.Name", "tag:orca-pool"),
        ("Filter.2.Value.1", pool),
        ("Filter.3.Name", "tag:orca-owner"),
        ("Filter.3.Value.1", OWNER),
        ("Filter.4.Name", "instance-state-name"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    for (i, s) in STATES.iter().enumerate() {
        form.push((format!("Filter.4.Value.{}", i + 1), s.to_string()));
    }
    form
}

/// The same filters for the SDK.
fn sdk_filters(pool: &str) -> Vec<Filter> {
    let filter = |name: &str, values: &[&str]| {
        Filter::builder()
            .name(name)
            .set_values(Some(values.iter().map(|v| v.to_string()).collect()))
            .build()
    };
    vec![
        filter("tag:orca", &["pool"]),
        filter("tag:orca-pool", &[pool]),
        filter("tag:orca-owner", &[OWNER]),
        filter("instance-state-name", &STATES),
    ]
}

/// One listing by raw HTTP (no signature, no parsing but a count): requests, bytes, instances, and
/// the first page's body.
async fn raw_list(
    http: &reqwest::Client,
    moto: &str,
    form: &[(String, String)],
) -> (u64, usize, usize, String) {
    let (mut requests, mut bytes, mut seen) = (0u64, 0usize, 0usize);
    let mut token: Option<String> = None;
    let mut first_page = None;
    loop {
        let mut form = form.to_vec();
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
        seen += body.matches("<instanceId>").count();
        token = body.find("<nextToken>").map(|_| first(&body, "nextToken"));
        let last = token.is_none();
        first_page.get_or_insert(body);
        if last {
            return (requests, bytes, seen, first_page.unwrap_or_default());
        }
    }
}

/// The driver's provider on moto, with the bench's page size.
async fn provider(moto: &str, seed: &Seed) -> orca::Result<Ec2Provider> {
    let config = Config::builder()
        .region("us-east-1")
        .endpoint(moto)
        .credentials(StaticCredentials::new(KEY_ID, SecretString::from(SECRET)))
        .subnet(ZONE, &seed.subnet)
        .security_group(&seed.sg)
        .instance_profile(&seed.profile)
        .page_size(PAGE)
        .retry(RetryPolicy::fast())
        .build()?;
    Ec2Provider::new(config, OWNER).await
}

/// Requests per create, list and delete of one machine through the driver, in a pool of its own (the
/// first create's catalogue look-ups, DescribeInstanceTypes and DescribeImages, are cached and counted
/// apart).
async fn request_counts(p: &Ec2Provider, run: &str) -> orca::Result<()> {
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
    println!(
        "  requests per call: create {per_create:.1} (the first {first_create}, with the cached \
         catalogue look-ups), list {per_list} ({} machines), delete {per_delete:.1}",
        OPS + 1
    );
    Ok(())
}

/// The 1,000-instance pool: the driver's client CPU beside the server's share (a raw HTTP listing's
/// wall time less its CPU).
async fn big_pool(
    p: &Ec2Provider,
    http: &reqwest::Client,
    moto: &str,
    pool: &str,
) -> orca::Result<()> {
    let form = list_form(pool);
    assert_eq!(p.machines(pool).await?.len(), BIG);
    let (_, bytes, seen, _) = raw_list(http, moto, &form).await;
    assert_eq!(seen, BIG, "the raw listing sees every instance");

    let (mut driver_wall, mut driver_cpu) = (Duration::ZERO, Duration::ZERO);
    let before = p.requests();
    for _ in 0..BIG_ROUNDS {
        let (t, c) = (Instant::now(), cpu());
        let listed = p.machines(pool).await?;
        driver_cpu += cpu() - c;
        driver_wall += t.elapsed();
        assert_eq!(listed.len(), BIG);
    }
    let driver_requests = (p.requests() - before) as f64 / f64::from(BIG_ROUNDS);
    let (mut raw_wall, mut raw_cpu, mut raw_requests) = (Duration::ZERO, Duration::ZERO, 0u64);
    for _ in 0..BIG_ROUNDS {
        let (t, c) = (Instant::now(), cpu());
        let (r, _, seen, _) = raw_list(http, moto, &form).await;
        raw_cpu += cpu() - c;
        raw_wall += t.elapsed();
        raw_requests += r;
        assert_eq!(seen, BIG);
    }
    let per = |d: Duration| ms(d) / f64::from(BIG_ROUNDS);
    let (dw, dc, rw, rc) = (
        per(driver_wall),
        per(driver_cpu),
        per(raw_wall),
        per(raw_cpu),
    );
    // The raw client does next to nothing: its wall time is the server's share (moto's work).
    let server = (rw - rc).max(0.001);
    println!("ec2 driver against moto: listing a pool of {BIG} ({BIG_ROUNDS} listings, mean)");
    println!(
        "  requests per listing: driver {driver_requests:.1}, raw {:.1} (EC2's ideal \
         ceil({BIG}/{PAGE}) = {}; moto pages by reservation: {} reservations)",
        raw_requests as f64 / f64::from(BIG_ROUNDS),
        BIG.div_ceil(PAGE as usize),
        BIG / BATCH
    );
    println!("  answer size: {:.0} KiB", bytes as f64 / 1024.0);
    println!("  driver: {dw:.1} ms wall, {dc:.2} ms client CPU");
    println!("  raw HTTP: {rw:.1} ms wall, {rc:.2} ms client CPU; server's share {server:.1} ms");
    println!(
        "  client CPU / server time: {:.3}; driver wall / raw wall: {:.2}",
        dc / server,
        dw / rw
    );
    Ok(())
}

/// boto3's listings of `pool`: CPU per listing, requests per listing, instances per listing, version.
struct Boto3 {
    cpu: Duration,
    requests: f64,
    instances: f64,
    version: String,
}

/// Runs benches/ec2_boto3.py in moto's venv; `Err` says why it did not run.
fn boto3(moto: &str, pool: &str) -> Result<Boto3, String> {
    let python = std::env::var(PYTHON_ENV)
        .ok()
        .filter(|p| !p.is_empty())
        .ok_or_else(|| format!("{PYTHON_ENV} is unset (scripts/with-moto sets it)"))?;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/ec2_boto3.py");
    let out = Command::new(&python)
        .args([script, moto, pool, OWNER])
        .arg(PAGE.to_string())
        .arg(ROUNDS.to_string())
        .output()
        .map_err(|e| format!("{python}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{python} {script}: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("{script} printed no JSON line: {e}"))?;
    let per = |k: &str| v[k].as_f64().unwrap_or(f64::NAN) / f64::from(ROUNDS);
    Ok(Boto3 {
        cpu: Duration::from_secs_f64(per("cpu_s")),
        requests: per("requests"),
        instances: per("instances"),
        version: v["boto3"].as_str().unwrap_or("?").to_string(),
    })
}

/// An HTTP client that answers every request at once with the same DescribeInstances body: the SDK's
/// own work on an answer, with no network.
#[derive(Debug, Clone)]
struct Canned(bytes::Bytes);

impl HttpConnector for Canned {
    fn call(&self, _: HttpRequest) -> HttpConnectorFuture {
        let status = 200u16.try_into().expect("a status");
        HttpConnectorFuture::ready(Ok(HttpResponse::new(status, SdkBody::from(self.0.clone()))))
    }
}

impl HttpClient for Canned {
    fn http_connector(
        &self,
        _: &HttpConnectorSettings,
        _: &RuntimeComponents,
    ) -> SharedHttpConnector {
        SharedHttpConnector::new(self.clone())
    }
}

/// A bare SDK client on `endpoint` (or on `canned` answers), configured as the driver's: static
/// credentials and region, no SDK retries.
fn sdk(endpoint: &str, canned: Option<Canned>) -> aws_sdk_ec2::Client {
    let mut b = aws_sdk_ec2::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new(KEY_ID, SECRET, None, None, "bench"))
        .endpoint_url(endpoint)
        .retry_config(RetryConfig::disabled());
    if let Some(c) = canned {
        b = b.http_client(c);
    }
    aws_sdk_ec2::Client::from_conf(b.build())
}

/// One listing through the bare SDK (every page, nothing converted): requests and instances.
async fn sdk_list(c: &aws_sdk_ec2::Client, filters: &[Filter]) -> (u64, usize) {
    let (mut requests, mut seen) = (0, 0);
    let mut token = None;
    loop {
        let out = c
            .describe_instances()
            .set_filters(Some(filters.to_vec()))
            .max_results(PAGE)
            .set_next_token(token)
            .send()
            .await
            .expect("DescribeInstances");
        requests += 1;
        seen += out
            .reservations()
            .iter()
            .map(|r| r.instances().len())
            .sum::<usize>();
        token = out.next_token().map(str::to_string);
        if token.is_none() {
            return (requests, seen);
        }
    }
}

/// CPU per DescribeInstances call of the SDK on a canned answer `body` (`n` calls).
async fn sdk_canned(body: &str, filters: &[Filter], n: u32) -> Duration {
    let c = sdk(
        "http://127.0.0.1:9",
        Some(Canned(bytes::Bytes::from(body.to_string()))),
    );
    sdk_list(&c, filters).await;
    let t = cpu();
    for _ in 0..n {
        std::hint::black_box(sdk_list(&c, filters).await);
    }
    (cpu() - t) / n
}

/// CPU per reading of the answer `body` into machines (`n` readings): by the driver's own reader,
/// as a listing reads a successful answer, or by the SDK's reader (what the driver did before).
fn read_cost(body: &str, n: u32, by_sdk: bool) -> Duration {
    let read = if by_sdk {
        orca::ec2::read_listing_by_sdk
    } else {
        orca::ec2::read_listing
    };
    let (machines, _) = read(body.as_bytes()).expect("the page reads");
    assert_eq!(machines.len(), body.matches("<instanceId>").count());
    let t = cpu();
    for _ in 0..n {
        std::hint::black_box(read(std::hint::black_box(body.as_bytes())).ok());
    }
    (cpu() - t) / n
}

/// CPU per SigV4 signature of a DescribeInstances request with `form` as its body (`n` signatures).
fn sign_cost(moto: &str, form: &[(String, String)], n: u32) -> Duration {
    use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SigningSettings};
    let body: String = form
        .iter()
        .map(|(k, v)| format!("{k}={}", v.replace(':', "%3A")))
        .collect::<Vec<_>>()
        .join("&");
    let identity: Identity = Credentials::new(KEY_ID, SECRET, None, None, "bench").into();
    let params: aws_sigv4::http_request::SigningParams<'_> =
        aws_sigv4::sign::v4::SigningParams::builder()
            .identity(&identity)
            .region("us-east-1")
            .name("ec2")
            .time(SystemTime::now())
            .settings(SigningSettings::default())
            .build()
            .expect("signing parameters")
            .into();
    let host = moto.trim_start_matches("http://");
    let headers = [
        ("content-type", "application/x-www-form-urlencoded"),
        ("host", host),
    ];
    let uri = format!("{moto}/");
    let t = cpu();
    for _ in 0..n {
        let req = SignableRequest::new(
            "POST",
            uri.as_str(),
            headers.iter().copied(),
            SignableBody::Bytes(body.as_bytes()),
        )
        .expect("a signable request");
        std::hint::black_box(sign(req, &params).expect("a signature"));
    }
    (cpu() - t) / n
}

/// The 400-instance pool: the driver, the bare SDK and boto3 each list it [`ROUNDS`] times; then the
/// driver's client CPU per listed instance, taken apart.
async fn pool_vs_boto3(
    p: &Ec2Provider,
    http: &reqwest::Client,
    moto: &str,
    pool: &str,
    empty_pool: &str,
) -> orca::Result<()> {
    let filters = sdk_filters(pool);
    let bare = sdk(moto, None);
    // Warm-up of both (connections, first-call set-up); the answer captured for the canned runs.
    assert_eq!(p.machines(pool).await?.len(), POOL);
    assert_eq!(sdk_list(&bare, &filters).await.1, POOL);
    let (_, _, seen, page) = raw_list(http, moto, &list_form(pool)).await;
    assert_eq!(seen, POOL);
    let (_, _, _, empty) = raw_list(http, moto, &list_form(empty_pool)).await;

    let before = p.requests();
    let c = cpu();
    for _ in 0..ROUNDS {
        assert_eq!(p.machines(pool).await?.len(), POOL);
    }
    let driver = (cpu() - c) / ROUNDS;
    let driver_requests = (p.requests() - before) as f64 / f64::from(ROUNDS);
    let (c, mut sdk_requests) = (cpu(), 0);
    for _ in 0..ROUNDS {
        let (r, seen) = sdk_list(&bare, &filters).await;
        assert_eq!(seen, POOL);
        sdk_requests += r;
    }
    let bare_sdk = (cpu() - c) / ROUNDS;
    let sdk_requests = sdk_requests as f64 / f64::from(ROUNDS);

    // The pieces, each timed alone: a signature; the SDK on a canned empty answer (its fixed work
    // per request) and on the captured page (the same plus its XML reader on the page's instances);
    // the driver's own reader on the same page (what the driver runs instead of the SDK's reader).
    let signing = sign_cost(moto, &list_form(pool), 5_000);
    let fixed = sdk_canned(&empty, &filters, 2_000).await;
    let parsed = sdk_canned(&page, &filters, 50).await;
    let lean = read_cost(&page, 200, false);
    let sdk_read = read_cost(&page, 50, true);
    let page_instances = page.matches("<instanceId>").count() as f64;

    let per_instance = |d: Duration| us(d) / POOL as f64;
    let sdk_parse_per = (us(parsed) - us(fixed)).max(0.0) / page_instances;
    let sdk_fixed = (us(fixed) - us(signing)).max(0.0) * sdk_requests / POOL as f64;
    let sign_per = us(signing) * sdk_requests / POOL as f64;
    let lean_per = us(lean) / page_instances;
    // HTTP: the bare SDK on moto less the bare SDK on the canned page (the same work but the wire).
    let http = (us(bare_sdk) - us(parsed) * sdk_requests).max(0.0) / POOL as f64;
    let rest = (per_instance(driver) - sign_per - sdk_fixed - lean_per - http).max(0.0);

    println!("ec2 driver against moto: listing a pool of {POOL} ({ROUNDS} listings each, release)");
    println!(
        "  requests per listing: driver {driver_requests:.1}, bare SDK {sdk_requests:.1} \
         (page size {PAGE}; moto pages by reservation: {} reservations)",
        POOL / BATCH
    );
    match boto3(moto, pool) {
        Ok(b) => {
            assert!(
                (b.instances - POOL as f64).abs() < 0.5,
                "boto3 listed {} instances",
                b.instances
            );
            println!(
                "  boto3 {}: {:.1} requests per listing, {:.2} ms client CPU per listing \
                 ({:.1} µs per instance)",
                b.version,
                b.requests,
                ms(b.cpu),
                per_instance(b.cpu)
            );
            println!(
                "  driver: {:.2} ms client CPU per listing ({:.2} µs per instance); \
                 driver / boto3 = {:.3} (goal <= 0.10)",
                ms(driver),
                per_instance(driver),
                driver.as_secs_f64() / b.cpu.as_secs_f64()
            );
        }
        Err(why) => {
            println!("  boto3: not run: {why}");
            println!(
                "  driver: {:.2} ms client CPU per listing ({:.2} µs per instance)",
                ms(driver),
                per_instance(driver)
            );
        }
    }
    println!("  where the driver's client CPU goes, µs per listed instance:");
    println!(
        "    SigV4 signing             {sign_per:6.3}  ({:.1} µs per request, aws-sigv4 alone)",
        us(signing)
    );
    println!(
        "    SDK per-request work      {sdk_fixed:6.3}  ({:.1} µs per request on a canned empty \
         answer, less the signing)",
        us(fixed) - us(signing)
    );
    println!(
        "    driver's XML reading      {lean_per:6.3}  ({:.2} ms per captured page of {page_instances} \
         instances, into machines, by orca-ec2's reader)",
        ms(lean)
    );
    println!(
        "    HTTP                      {http:6.3}  (bare SDK on moto {:.2} ms per listing, less the \
         SDK on the canned page)",
        ms(bare_sdk)
    );
    println!(
        "    the rest                  {rest:6.3}  (the driver less the above: ownership filter, \
         retry, span, the SDK's empty answer)"
    );
    println!(
        "  for comparison, the bare SDK: {:.2} µs per instance; its XML reader {sdk_parse_per:.3} µs \
         per instance in the SDK ({:.3} into machines alone), which the driver no longer runs",
        per_instance(bare_sdk),
        us(sdk_read) / page_instances
    );
    Ok(())
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
    let seed = seed(&http, &moto, &run).await;
    let pool = format!("bench-{run}");
    let big = format!("bench-big-{run}");
    let made = make_pool(&http, &moto, &seed, &pool, POOL).await
        + make_pool(&http, &moto, &seed, &big, BIG).await;
    println!(
        "set-up: {} RunInstances of {BATCH} in {:.1} s",
        (POOL + BIG) / BATCH,
        made.as_secs_f64()
    );
    let p = provider(&moto, &seed).await?;
    request_counts(&p, &run).await?;
    pool_vs_boto3(&p, &http, &moto, &pool, &format!("bench-none-{run}")).await?;
    big_pool(&p, &http, &moto, &big).await?;
    Ok(())
}
