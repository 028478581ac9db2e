//! What the EC2 tests share: the emulator's address (moto, started by `scripts/with-moto`), its seeding
//! (a security group, an instance profile, the default subnets), and a proxy in front of it that makes
//! moto behave as EC2 does where moto is kinder, injects faults (the fakes' shared fault rules,
//! [`orca_fakes::control`], picked by the form body's `Action` and parameters: [`rule`]), and logs
//! every EC2 action with its parameters.
//!
//! # What the proxy reproduces of real EC2 (and where it is written down)
//! EC2's Query API posts every action to `/` with the action in the form body, so the proxy reads the
//! form's `Action` and parameters.
//! - **ClientToken idempotency** (EC2 API reference, "Ensuring idempotency": a repeated RunInstances
//!   with the same token and parameters answers the instance made the first time, "the only
//!   information that might vary is the state"; the same token with other parameters is
//!   `IdempotentParameterMismatch`; a token stays valid after the instance is terminated). moto
//!   ignores the token and makes a new instance each time. The proxy keeps every token it saw with
//!   the request's parameters and answers a repeat from moto's current view of that instance.
//!   It compares every parameter, where EC2 lets the availability zone differ.
//! - **Eventual consistency** (EC2 API reference, "Eventual consistency in the Amazon EC2 API": right
//!   after RunInstances, DescribeInstances and the calls that act on the instance may answer
//!   `InvalidInstanceID.NotFound`). With [`Proxy::set_visibility_delay`], an instance made from then
//!   on is, for that long: missing from listings, `InvalidInstanceID.NotFound` to DescribeInstances
//!   by id, and `InvalidInstanceID.NotFound` to TerminateInstances, StartInstances, StopInstances,
//!   ModifyInstanceAttribute, DescribeInstanceAttribute, CreateTags and DeleteTags. (Real EC2 is less
//!   regular: one call may show an instance another does not; the behaviour tests inject such single
//!   "not found" answers on their own.) Tag filters may lag behind reads by id (the same page: a new
//!   resource's tags reach the filters later): with [`Proxy::set_tag_filter_lag`], a listing
//!   filtered on a tag does not find an instance made from then on until that much after reads
//!   by id do.
//! - **MaxResults 5 to 1000** (DescribeInstances reference: "You cannot specify this parameter and
//!   the instance IDs parameter in the same request"; values outside 5-1000 are refused with
//!   `InvalidParameterValue`). moto accepts any size.
//! - **Paging by instance** (DescribeInstances: `MaxResults` counts instances; moto pages by
//!   reservation). The proxy asks moto for everything and pages itself, with its own `NextToken`.
//!   [`Proxy::paged`] gives a second address on the same state whose listings page by a set number of
//!   instances whatever `MaxResults` says: how the conformance suite gets pages of one instance,
//!   which EC2 itself never serves.
//! - **`LaunchTime` is the last start** (Instance reference: "The time that the instance was last
//!   launched"): moto keeps the creation time through a stop and a start; the proxy writes the time
//!   of the last StartInstances.
//! - **`StateTransitionReason`** of a stopped instance is `User initiated (YYYY-MM-DD HH:MM:SS GMT)`;
//!   moto writes `UTC`, the proxy `GMT`.
//! - **Types not offered in a zone**: RunInstances of a type EC2 does not offer in the subnet's zone
//!   is `Unsupported` ("Your requested instance type (...) is not supported in your requested
//!   Availability Zone (...)"); moto makes it anyway. The proxy reads the offerings from moto's own
//!   DescribeInstanceTypeOfferings.
//! - **`pending` lasts** (Instance lifecycle: an instance is `pending` while it boots, seconds to
//!   minutes): moto answers `running` at once after RunInstances answered `pending`. With
//!   [`Proxy::keep_pending`], an instance made from then on reads as `pending` for that long (in
//!   listings, reads by id and a repeated ClientToken's answer), unless it was stopped or
//!   terminated meanwhile. A state filter still matches moto's own state.
//!
//! # What it does not reproduce
//! - Capacity, quota and throttling: moto never answers `InsufficientInstanceCapacity`,
//!   `InstanceLimitExceeded` or `RequestLimitExceeded`; tests inject them ([`ec2_error`]).
//! - The rest of the state machine's timing (`stopping` and `shutting-down` pass at once), and
//!   EC2's refusals of a call in the wrong state (a stop of a `pending` instance).
//! - IAM (every call is allowed; `UnauthorizedOperation` is injected), signatures (moto checks none),
//!   tag-on-create permissions, KMS.
//! - DNS names: moto names every instance `ec2-<ip>.compute-1.amazonaws.com` whatever the VPC's DNS
//!   settings; real EC2 leaves the public name empty without `enableDnsHostnames`.
//! - A repeated token's answer keeps moto's reservation and order, not necessarily EC2's.

#![allow(dead_code)]

mod xml;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use orca_ec2::{Config, ConfigBuilder, Ec2Provider, StaticCredentials};
use orca_machines::chrono::{DateTime, Utc};
use orca_machines::RetryPolicy;
use secrecy::SecretString;

/// The variable `scripts/with-moto` sets.
pub const MOTO_ENV: &str = "ORCA_TEST_MOTO_ENDPOINT";
/// The emulator's region.
pub const REGION: &str = "us-east-1";
/// The availability zone the tests make machines in (and its neighbour).
pub const ZONE: &str = "us-east-1a";
pub const OTHER_ZONE: &str = "us-east-1b";
/// A zone where moto (and EC2) do not offer the Graviton types (`t4g.*`).
pub const ZONE_WITHOUT_T4G: &str = "us-east-1e";
/// A secret the tests give the driver, to show it never appears anywhere.
pub const SECRET: &str = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY";
/// EC2's XML namespace, as moto writes it.
const NS: &str = "http://ec2.amazonaws.com/doc/2016-11-15";
/// The prefix of the proxy's own `NextToken`s.
const TOKEN_PREFIX: &str = "orca-proxy-offset-";

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

/// The static test credentials (moto accepts any).
pub fn credentials() -> StaticCredentials {
    StaticCredentials::new("AKIDORCATEST", SecretString::from(SECRET))
}

/// An SDK client straight to `endpoint` (moto, or the proxy), for seeding and for looking behind the
/// driver's back.
pub async fn sdk(endpoint: &str) -> aws_sdk_ec2::Client {
    let conf = aws_sdk_ec2::config::Builder::new()
        .behavior_version(aws_sdk_ec2::config::BehaviorVersion::latest())
        .region(aws_sdk_ec2::config::Region::new(REGION))
        .endpoint_url(endpoint)
        .credentials_provider(aws_sdk_ec2::config::Credentials::new(
            "AKIDORCATEST",
            SECRET,
            None,
            None,
            "orca-ec2-tests",
        ))
        .build();
    aws_sdk_ec2::Client::from_conf(conf)
}

/// What the driver needs in moto: subnets, a security group, an instance profile.
#[derive(Debug, Clone)]
pub struct Seed {
    pub moto: String,
    pub subnets: BTreeMap<String, String>,
    pub security_group: String,
    pub instance_profile: String,
}

/// Seeds moto (idempotently, with fresh names, so that test binaries and runs never meet).
pub async fn seed(moto: &str) -> Seed {
    let ec2 = sdk(moto).await;
    let subnets: BTreeMap<String, String> = ec2
        .describe_subnets()
        .filters(
            aws_sdk_ec2::types::Filter::builder()
                .name("default-for-az")
                .values("true")
                .build(),
        )
        .send()
        .await
        .expect("DescribeSubnets")
        .subnets()
        .iter()
        .map(|s| {
            (
                s.availability_zone().unwrap().to_string(),
                s.subnet_id().unwrap().to_string(),
            )
        })
        .collect();
    assert!(
        subnets.contains_key(ZONE),
        "moto has no default subnet in {ZONE}: {subnets:?}"
    );
    let suffix = format!("{:08x}", fastrand::u32(..));
    let sg = ec2
        .create_security_group()
        .group_name(format!("orca-test-{suffix}"))
        .description("orca-ec2 tests")
        .send()
        .await
        .expect("CreateSecurityGroup")
        .group_id()
        .unwrap()
        .to_string();
    // moto checks that the instance profile exists, in its IAM: made with a plain Query call, since the
    // driver has no IAM client.
    let profile = format!("orca-test-{suffix}");
    let r = reqwest::Client::new()
        .post(format!("{moto}/"))
        .header(
            "Authorization",
            "AWS4-HMAC-SHA256 Credential=AKIDORCATEST/20250101/us-east-1/iam/aws4_request, SignedHeaders=host, Signature=0",
        )
        .form(&[
            ("Action", "CreateInstanceProfile"),
            ("Version", "2010-05-08"),
            ("InstanceProfileName", profile.as_str()),
        ])
        .send()
        .await
        .expect("CreateInstanceProfile");
    assert!(
        r.status().is_success(),
        "CreateInstanceProfile: {}",
        r.text().await.unwrap_or_default()
    );
    Seed {
        moto: moto.to_string(),
        subnets,
        security_group: sg,
        instance_profile: profile,
    }
}

impl Seed {
    /// A config builder for `endpoint` (moto or the proxy), fast to retry and to wait.
    pub fn builder(&self, endpoint: &str) -> ConfigBuilder {
        let mut b = Config::builder()
            .region(REGION)
            .endpoint(endpoint)
            .credentials(credentials())
            .security_group(&self.security_group)
            .instance_profile(&self.instance_profile)
            .retry(RetryPolicy::fast())
            .poll_interval(Duration::from_millis(20))
            .operation_timeout(Duration::from_secs(20))
            .visibility_window(Duration::from_secs(20))
            // Longer than any visibility delay the tests set, short enough for unknown ids.
            .confirm_not_found(Duration::from_millis(1500))
            .connect_timeout(Duration::from_secs(5))
            .request_timeout(Duration::from_secs(30));
        for (zone, subnet) in &self.subnets {
            b = b.subnet(zone, subnet);
        }
        b
    }

    /// A provider for `owner` from `builder`.
    pub async fn provider(
        builder: ConfigBuilder,
        owner: &str,
    ) -> orca_machines::Result<Ec2Provider> {
        Ec2Provider::new(builder.build()?, owner).await
    }
}

/// The fault rules are the fakes' shared ones ([`orca_fakes::control`]): a rule picks EC2 requests by
/// the form body's `Action` and parameters ([`Rule::when_form`]).
pub use orca_fakes::control::{Fault, Rule};

/// A rule for the next `times` requests of EC2 action `action` (narrowed with
/// [`Rule::when_form`]).
pub fn rule(action: &str, fault: Fault, times: u32) -> Rule {
    Rule::new(Some(axum::http::Method::POST), "", fault, times).when_form("Action", action)
}

/// Answer an EC2 error (`<Response><Errors><Error>...`) with this status and code; the request never
/// reaches moto.
pub fn ec2_error(status: u16, code: &str) -> Fault {
    xml_answer(
        status,
        ec2_error_body(code, &format!("injected by the test proxy: {code}")),
    )
}

/// Answer this XML body with this status; the request never reaches moto (for answers written from
/// the EC2 API reference).
pub fn xml_answer(status: u16, body: impl Into<String>) -> Fault {
    Fault::Text {
        status,
        content_type: "text/xml;charset=UTF-8".into(),
        body: body.into(),
    }
}

/// One request the proxy saw.
#[derive(Debug, Clone)]
pub struct Seen {
    pub action: String,
    pub params: BTreeMap<String, String>,
    pub at: Instant,
    pub status: u16,
    /// Answered by an injected fault (not by moto, nor by the proxy's own EC2 rules).
    pub faulted: bool,
    /// The error code of the answer, when it was an EC2 error.
    pub code: Option<String>,
}

/// A ClientToken the proxy has seen answered.
#[derive(Debug, Clone)]
struct TokenRecord {
    params: BTreeMap<String, String>,
    instances: Vec<String>,
}

/// What the proxy keeps to behave as EC2.
#[derive(Debug, Default)]
struct Ec2State {
    visibility_delay: Duration,
    hidden_until: HashMap<String, Instant>,
    pending_for: Duration,
    pending_until: HashMap<String, Instant>,
    tag_lag: Duration,
    /// When a tag filter first finds each instance made while `tag_lag` was set.
    tag_indexed_at: HashMap<String, Instant>,
    tokens: HashMap<String, TokenRecord>,
    started: HashMap<String, DateTime<Utc>>,
    subnet_zone: HashMap<String, String>,
    offered: HashMap<String, Vec<String>>,
}

#[derive(Debug)]
struct ProxyState {
    upstream: String,
    http: reqwest::Client,
    /// The injected faults (the fakes' shared matcher).
    faults: orca_fakes::Control,
    log: Mutex<Vec<Seen>>,
    ec2: Mutex<Ec2State>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One address of the proxy: its state, and the page size its listings are forced to.
#[derive(Debug, Clone)]
struct View {
    state: Arc<ProxyState>,
    per_page: Option<usize>,
}

/// The proxy, on 127.0.0.1 until dropped.
#[derive(Debug)]
pub struct Proxy {
    pub url: String,
    state: Arc<ProxyState>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn listen(view: View) -> (String, tokio::task::JoinHandle<()>) {
    let app = axum::Router::new().fallback(forward).with_state(view);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (url, task)
}

impl Proxy {
    /// A proxy in front of `upstream` (moto; or an address nothing listens on, for tests that inject
    /// every answer).
    pub async fn start(upstream: &str) -> Proxy {
        let state = Arc::new(ProxyState {
            upstream: upstream.to_string(),
            http: reqwest::Client::new(),
            faults: orca_fakes::Control::default(),
            log: Mutex::new(Vec::new()),
            ec2: Mutex::new(Ec2State::default()),
        });
        let (url, task) = listen(View {
            state: state.clone(),
            per_page: None,
        })
        .await;
        Proxy { url, state, task }
    }

    /// Another address on the same proxy (same rules, log and EC2 state) whose DescribeInstances
    /// listings page by `per_page` instances, whatever `MaxResults` says (which it still checks).
    pub async fn paged(&self, per_page: usize) -> Proxy {
        let (url, task) = listen(View {
            state: self.state.clone(),
            per_page: Some(per_page.max(1)),
        })
        .await;
        Proxy {
            url,
            state: self.state.clone(),
            task,
        }
    }

    /// Adds a fault rule (see [`rule`]); rules are tried in the order added.
    pub fn inject(&self, rule: Rule) {
        self.state.faults.inject(rule);
    }

    /// Removes every rule for `action`.
    pub fn clear(&self, action: &str) {
        let action = ("Action".to_string(), action.to_string());
        self.state
            .faults
            .clear_faults_where(|r| r.form.contains(&action));
    }

    /// Instances made from now on stay invisible for `delay` (see the module documentation);
    /// `Duration::ZERO` stops hiding new ones.
    pub fn set_visibility_delay(&self, delay: Duration) {
        lock(&self.state.ec2).visibility_delay = delay;
    }

    /// Instances made from now on show `pending` for `d` after they are made (moto answers
    /// `running` at once; EC2 takes seconds to boot one); `Duration::ZERO` stops it for new ones.
    pub fn keep_pending(&self, d: Duration) {
        lock(&self.state.ec2).pending_for = d;
    }

    /// Instances made from now on are found by tag filters (`tag:...` in a DescribeInstances
    /// listing) only `lag` after reads by id find them; `Duration::ZERO` stops it for new ones.
    pub fn set_tag_filter_lag(&self, lag: Duration) {
        lock(&self.state.ec2).tag_lag = lag;
    }

    /// Hides instance `id` for `delay` from now (as if it had just been made).
    pub fn hide(&self, id: &str, delay: Duration) {
        lock(&self.state.ec2)
            .hidden_until
            .insert(id.to_string(), Instant::now() + delay);
    }

    pub fn log(&self) -> Vec<Seen> {
        lock(&self.state.log).clone()
    }

    pub fn requests(&self) -> u64 {
        lock(&self.state.log).len() as u64
    }

    /// The requests of `action`, in order.
    pub fn of(&self, action: &str) -> Vec<Seen> {
        self.log()
            .into_iter()
            .filter(|s| s.action == action)
            .collect()
    }

    pub fn count(&self, action: &str) -> usize {
        self.of(action).len()
    }
}

/// An EC2 error answer, in EC2's shape.
pub fn ec2_error_body(code: &str, message: &str) -> String {
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response><Errors><Error><Code>{code}</Code>\
         <Message>{message}</Message></Error></Errors>\
         <RequestID>ea966190-f9aa-478e-9ede-example</RequestID></Response>"
    )
}

fn xml_response(status: u16, body: String) -> Response {
    (
        StatusCode::from_u16(status).unwrap(),
        [("content-type", "text/xml;charset=UTF-8")],
        body,
    )
        .into_response()
}

fn error_response(status: u16, code: &str, message: &str) -> Response {
    xml_response(status, ec2_error_body(code, message))
}

/// A body whose first read fails, so that hyper aborts the connection mid-answer.
fn broken_body() -> Body {
    struct Broken;
    impl http_body::Body for Broken {
        type Data = Bytes;
        type Error = std::io::Error;
        fn poll_frame(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
            std::task::Poll::Ready(Some(Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionAborted,
                "injected: connection dropped",
            ))))
        }
    }
    Body::new(Broken)
}

/// The values of `prefix.1`, `prefix.2`, ... in `params`.
fn listed(params: &BTreeMap<String, String>, prefix: &str) -> Vec<String> {
    (1..)
        .map_while(|n| params.get(&format!("{prefix}.{n}")).cloned())
        .collect()
}

/// The instance ids a request acts on.
fn instance_ids(action: &str, params: &BTreeMap<String, String>) -> Vec<String> {
    match action {
        "DescribeInstances" | "TerminateInstances" | "StartInstances" | "StopInstances" => {
            listed(params, "InstanceId")
        }
        "ModifyInstanceAttribute" | "DescribeInstanceAttribute" => {
            params.get("InstanceId").cloned().into_iter().collect()
        }
        "CreateTags" | "DeleteTags" => listed(params, "ResourceId")
            .into_iter()
            .filter(|r| r.starts_with("i-"))
            .collect(),
        _ => Vec::new(),
    }
}

/// One Query call straight to moto (for the proxy's own look-ups), answering the body.
async fn moto_call(state: &ProxyState, params: &[(&str, &str)]) -> Option<String> {
    let r = state
        .http
        .post(format!("{}/", state.upstream))
        .header(
            "Authorization",
            "AWS4-HMAC-SHA256 Credential=AKIDORCATEST/20250101/us-east-1/ec2/aws4_request, SignedHeaders=host, Signature=0",
        )
        .form(params)
        .send()
        .await
        .ok()?;
    if !r.status().is_success() {
        return None;
    }
    r.text().await.ok()
}

/// The zones EC2 (moto's catalogue) offers `machine_type` in.
async fn offered_zones(state: &ProxyState, machine_type: &str) -> Option<Vec<String>> {
    if let Some(z) = lock(&state.ec2).offered.get(machine_type) {
        return Some(z.clone());
    }
    let body = moto_call(
        state,
        &[
            ("Action", "DescribeInstanceTypeOfferings"),
            ("Version", "2016-11-15"),
            ("LocationType", "availability-zone"),
            ("Filter.1.Name", "instance-type"),
            ("Filter.1.Value.1", machine_type),
        ],
    )
    .await?;
    let all = xml::elements(&body);
    let zones: Vec<String> = all
        .iter()
        .enumerate()
        .filter(|(_, e)| e.name == "location")
        .map(|(i, _)| xml::text(&body, &all, i).to_string())
        .collect();
    lock(&state.ec2)
        .offered
        .insert(machine_type.to_string(), zones.clone());
    Some(zones)
}

/// The availability zone of `subnet`.
async fn subnet_zone(state: &ProxyState, subnet: &str) -> Option<String> {
    if let Some(z) = lock(&state.ec2).subnet_zone.get(subnet) {
        return Some(z.clone());
    }
    let body = moto_call(
        state,
        &[
            ("Action", "DescribeSubnets"),
            ("Version", "2016-11-15"),
            ("SubnetId.1", subnet),
        ],
    )
    .await?;
    let all = xml::elements(&body);
    let i = all.iter().position(|e| e.name == "availabilityZone")?;
    let zone = xml::text(&body, &all, i).to_string();
    lock(&state.ec2)
        .subnet_zone
        .insert(subnet.to_string(), zone.clone());
    Some(zone)
}

/// Each instance of a DescribeInstances-shaped answer as EC2 would write it: `launchTime` the last
/// start, `StateTransitionReason` in GMT, and `pending` for as long as [`Proxy::keep_pending`] says.
fn as_ec2_writes_it(state: &ProxyState, body: &str) -> String {
    let body = body.replace(" UTC)</reason>", " GMT)</reason>");
    let (started, pending) = {
        let ec2 = lock(&state.ec2);
        let now = Instant::now();
        let pending: Vec<String> = ec2
            .pending_until
            .iter()
            .filter(|(_, t)| **t > now)
            .map(|(id, _)| id.clone())
            .collect();
        (ec2.started.clone(), pending)
    };
    if started.is_empty() && pending.is_empty() {
        return body;
    }
    let Some((mut listed, (s, e))) = xml::instances(&body) else {
        return body;
    };
    for l in &mut listed {
        if let Some(t) = started.get(&l.id) {
            let stamp = t.format("%Y-%m-%dT%H:%M:%S.000Z").to_string();
            l.item = xml::replace_child_text(&l.item, "launchTime", &stamp);
        }
        // moto's instance is running at once; EC2's is pending until it has booted (only a running
        // one: a stop or a terminate moves on from there).
        if pending.contains(&l.id) && l.item.contains("<name>running</name>") {
            l.item = xml::replace_child_text(
                &l.item,
                "instanceState",
                "<code>0</code><name>pending</name>",
            );
        }
    }
    format!(
        "{}{}{}",
        &body[..s],
        xml::reservation_set(&listed),
        &body[e..]
    )
}

/// A listing's answer without hidden instances, cut to the page at `offset` of `per_page`.
fn page_of(
    body: &str,
    hidden: &dyn Fn(&str) -> bool,
    offset: usize,
    per_page: Option<usize>,
) -> String {
    let Some((listed, (s, e))) = xml::instances(body) else {
        return body.to_string();
    };
    let visible: Vec<xml::Listed> = listed.into_iter().filter(|l| !hidden(&l.id)).collect();
    let end = per_page.map_or(visible.len(), |n| (offset + n).min(visible.len()));
    let page = visible.get(offset.min(end)..end).unwrap_or_default();
    let rest = &body[e..];
    let next = if end < visible.len() {
        format!("<nextToken>{TOKEN_PREFIX}{end}</nextToken>")
    } else {
        String::new()
    };
    // moto wrote no nextToken of its own (the proxy asked for every instance): ours goes before the
    // root's end tag.
    let close = rest.rfind("</").unwrap_or(rest.len());
    format!(
        "{}{}{}{next}{}",
        &body[..s],
        xml::reservation_set(page),
        &rest[..close],
        &rest[close..]
    )
}

/// What the proxy answers on its own, as EC2 would, before anything reaches moto.
async fn ec2_rules(
    state: &ProxyState,
    action: &str,
    params: &BTreeMap<String, String>,
) -> Option<(Response, Option<String>)> {
    let refuse = |status: u16, code: &str, message: &str| {
        Some((
            error_response(status, code, message),
            Some(code.to_string()),
        ))
    };
    let now = Instant::now();
    let hidden: Vec<String> = {
        let ec2 = lock(&state.ec2);
        instance_ids(action, params)
            .into_iter()
            .filter(|id| ec2.hidden_until.get(id).is_some_and(|t| *t > now))
            .collect()
    };
    if !hidden.is_empty() {
        let ids = hidden.join(", ");
        let message = if hidden.len() == 1 {
            format!("The instance ID '{ids}' does not exist")
        } else {
            format!("The instance IDs '{ids}' do not exist")
        };
        return refuse(400, "InvalidInstanceID.NotFound", &message);
    }
    match action {
        "DescribeInstances" => {
            if let Some(m) = params.get("MaxResults") {
                let ok = m.parse::<i64>().is_ok_and(|n| (5..=1000).contains(&n));
                if !ok {
                    return refuse(
                        400,
                        "InvalidParameterValue",
                        &format!(
                            "Value ( {m} ) for parameter maxResults is invalid. Expecting a value \
                             between 5 and 1000."
                        ),
                    );
                }
            }
            if let Some(t) = params.get("NextToken") {
                if t.strip_prefix(TOKEN_PREFIX)
                    .and_then(|n| n.parse::<usize>().ok())
                    .is_none()
                {
                    return refuse(
                        400,
                        "InvalidParameterValue",
                        "The parameter NextToken is not valid",
                    );
                }
            }
            None
        }
        "RunInstances" => {
            if let Some(token) = params.get("ClientToken") {
                let mut compared = params.clone();
                compared.remove("ClientToken");
                let seen = lock(&state.ec2).tokens.get(token).cloned();
                if let Some(rec) = seen {
                    if rec.params != compared {
                        return refuse(
                            400,
                            "IdempotentParameterMismatch",
                            "Arguments on this idempotent request are inconsistent with arguments \
                             used in previous request(s).",
                        );
                    }
                    return Some((replay(state, &rec).await, None));
                }
            }
            if let (Some(t), Some(subnet)) = (params.get("InstanceType"), params.get("SubnetId")) {
                if let (Some(zones), Some(zone)) = (
                    offered_zones(state, t).await,
                    subnet_zone(state, subnet).await,
                ) {
                    if !zones.contains(&zone) {
                        return refuse(
                            400,
                            "Unsupported",
                            &format!(
                                "Your requested instance type ({t}) is not supported in your \
                                 requested Availability Zone ({zone}). Please retry your request by \
                                 not specifying an Availability Zone or choosing {}.",
                                zones.join(", ")
                            ),
                        );
                    }
                }
            }
            None
        }
        _ => None,
    }
}

/// A repeated ClientToken's answer: the first answer's instances as they are now.
async fn replay(state: &ProxyState, rec: &TokenRecord) -> Response {
    let mut q: Vec<(String, String)> = vec![
        ("Action".into(), "DescribeInstances".into()),
        ("Version".into(), "2016-11-15".into()),
    ];
    for (n, id) in rec.instances.iter().enumerate() {
        q.push((format!("InstanceId.{}", n + 1), id.clone()));
    }
    let q: Vec<(&str, &str)> = q.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let Some(body) = moto_call(state, &q).await else {
        return error_response(
            500,
            "InternalError",
            "the proxy could not read the instance",
        );
    };
    let body = as_ec2_writes_it(state, &body);
    let all = xml::elements(&body);
    let Some(res) = xml::find(
        &all,
        &["DescribeInstancesResponse", "reservationSet", "item"],
    ) else {
        return error_response(
            500,
            "InternalError",
            "the proxy could not read the reservation",
        );
    };
    xml_response(
        200,
        format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<RunInstancesResponse xmlns=\"{NS}\">\
             <requestId>replayed-by-client-token</requestId>{}</RunInstancesResponse>",
            xml::text(&body, &all, res)
        ),
    )
}

async fn forward(
    State(view): State<View>,
    method: axum::http::Method,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let state = &*view.state;
    let pairs = orca_fakes::control::form_pairs(&body);
    let params: BTreeMap<String, String> = pairs.iter().cloned().collect();
    let action = params.get("Action").cloned().unwrap_or_default();
    let path = uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
    let fault = state.faults.take_for(&method, path, &pairs);
    if let Some(Fault::Latency(d)) = &fault {
        tokio::time::sleep(*d).await;
    }
    let (response, faulted, code) = match fault.as_ref().and_then(Fault::response) {
        // An answer in place of EC2's: the request never reaches moto.
        Some(answer) => {
            let code = match &fault {
                Some(Fault::Text { body, .. }) => error_code(body),
                _ => None,
            };
            (answer, true, code)
        }
        None => {
            let (r, code) = match ec2_rules(state, &action, &params).await {
                Some(answered) => answered,
                None => upstream(&view, &action, &params, &method, &uri, &headers, &body).await,
            };
            match fault {
                // Served (by moto or by the proxy's EC2 rules), and the answer lost on the way.
                Some(Fault::DropAnswer) => {
                    let (parts, _) = r.into_parts();
                    (Response::from_parts(parts, broken_body()), true, code)
                }
                other => (r, other.is_some(), code),
            }
        }
    };
    lock(&state.log).push(Seen {
        action,
        params,
        at: Instant::now(),
        status: response.status().as_u16(),
        faulted,
        code,
    });
    response
}

/// Forwards a request to moto and makes its answer EC2's.
#[allow(clippy::too_many_arguments)]
async fn upstream(
    view: &View,
    action: &str,
    params: &BTreeMap<String, String>,
    method: &axum::http::Method,
    uri: &axum::http::Uri,
    headers: &HeaderMap,
    body: &Bytes,
) -> (Response, Option<String>) {
    let state = &*view.state;
    let listing = action == "DescribeInstances" && !params.contains_key("InstanceId.1");
    // A listing is asked of moto whole: the proxy pages by instance itself.
    let sent: Bytes = if listing {
        let kept: Vec<(&String, &String)> = params
            .iter()
            .filter(|(k, _)| *k != "MaxResults" && *k != "NextToken")
            .collect();
        Bytes::from(
            url::form_urlencoded::Serializer::new(String::new())
                .extend_pairs(kept)
                .finish(),
        )
    } else {
        body.clone()
    };
    let path = uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
    let mut req = state
        .http
        .request(method.clone(), format!("{}{path}", state.upstream))
        .body(sent);
    for (k, v) in headers {
        if k != "host" && k != "content-length" {
            req = req.header(k, v);
        }
    }
    let r = match req.send().await {
        Ok(r) => r,
        Err(e) => {
            return (
                (StatusCode::BAD_GATEWAY, format!("proxy: {e}")).into_response(),
                None,
            )
        }
    };
    let status = r.status();
    let ct = r
        .headers()
        .get("content-type")
        .cloned()
        .unwrap_or_else(|| "text/xml".parse().unwrap());
    let bytes = r.bytes().await.unwrap_or_default();
    let mut text = String::from_utf8_lossy(&bytes).into_owned();
    let mut code = None;
    if status.is_success() {
        match action {
            "RunInstances" => {
                let ids: Vec<String> = xml::instances(&format!(
                    "<R><reservationSet><item>{}</item></reservationSet></R>",
                    inner_of_root(&text)
                ))
                .map(|(l, _)| l.into_iter().map(|l| l.id).collect())
                .unwrap_or_default();
                let mut ec2 = lock(&state.ec2);
                if let Some(token) = params.get("ClientToken") {
                    let mut compared = params.clone();
                    compared.remove("ClientToken");
                    ec2.tokens.insert(
                        token.clone(),
                        TokenRecord {
                            params: compared,
                            instances: ids.clone(),
                        },
                    );
                }
                if !ec2.tag_lag.is_zero() {
                    let at = Instant::now() + ec2.visibility_delay + ec2.tag_lag;
                    for id in &ids {
                        ec2.tag_indexed_at.insert(id.clone(), at);
                    }
                }
                if !ec2.pending_for.is_zero() {
                    let until = Instant::now() + ec2.pending_for;
                    for id in &ids {
                        ec2.pending_until.insert(id.clone(), until);
                    }
                }
                if !ec2.visibility_delay.is_zero() {
                    let until = Instant::now() + ec2.visibility_delay;
                    for id in ids {
                        ec2.hidden_until.insert(id, until);
                    }
                }
            }
            "StartInstances" => {
                let now = Utc::now();
                let mut ec2 = lock(&state.ec2);
                for id in listed(params, "InstanceId") {
                    ec2.started.insert(id, now);
                }
            }
            "DescribeInstances" => {
                text = as_ec2_writes_it(state, &text);
                if listing {
                    let offset = params
                        .get("NextToken")
                        .and_then(|t| t.strip_prefix(TOKEN_PREFIX))
                        .and_then(|n| n.parse().ok())
                        .unwrap_or(0);
                    let per_page = view
                        .per_page
                        .or_else(|| params.get("MaxResults").and_then(|m| m.parse().ok()));
                    let now = Instant::now();
                    let (hidden_until, tag_indexed_at) = {
                        let ec2 = lock(&state.ec2);
                        (ec2.hidden_until.clone(), ec2.tag_indexed_at.clone())
                    };
                    // A listing filtered on tags does not find what the tag index has not caught
                    // up with yet.
                    let by_tag = params.iter().any(|(k, v)| {
                        k.starts_with("Filter.") && k.ends_with(".Name") && v.starts_with("tag:")
                    });
                    let hidden = |id: &str| {
                        hidden_until.get(id).is_some_and(|t| *t > now)
                            || (by_tag && tag_indexed_at.get(id).is_some_and(|t| *t > now))
                    };
                    text = page_of(&text, &hidden, offset, per_page);
                }
            }
            _ => {}
        }
    } else {
        code = error_code(&text);
    }
    let mut out = Response::new(Body::from(text));
    *out.status_mut() = status;
    out.headers_mut().insert("content-type", ct);
    (out, code)
}

/// The code of an EC2 error answer (`<Response><Errors><Error><Code>`).
fn error_code(body: &str) -> Option<String> {
    let all = xml::elements(body);
    xml::find(&all, &["Response", "Errors", "Error", "Code"])
        .map(|i| xml::text(body, &all, i).to_string())
}

/// The content of a document's root element.
fn inner_of_root(doc: &str) -> String {
    let all = xml::elements(doc);
    all.iter()
        .position(|e| e.parent.is_none())
        .map(|r| xml::text(doc, &all, r).to_string())
        .unwrap_or_default()
}

/// One test's moto seeding, proxy and pool of its own.
pub struct Env {
    pub seed: Seed,
    pub proxy: Proxy,
    pub pool: String,
}

/// The test's environment, or `None` (skipped) without moto.
pub async fn env(test: &str) -> Option<Env> {
    let moto = moto(test)?;
    let seed = seed(&moto).await;
    let proxy = Proxy::start(&moto).await;
    let pool = format!("t{:06x}", fastrand::u32(..0xff_ffff));
    Some(Env { seed, proxy, pool })
}

impl Env {
    pub fn builder(&self) -> ConfigBuilder {
        self.seed.builder(&self.proxy.url)
    }

    pub async fn provider(&self, owner: &str) -> Ec2Provider {
        Seed::provider(self.builder(), owner).await.unwrap()
    }

    pub fn spec(&self, name: &str) -> orca_machines::MachineSpec {
        orca_machines::MachineSpec::new(name, "t3.micro", ZONE, &self.pool)
    }
}

/// The machine a create made or adopted; panics on no stock.
pub fn made(c: orca_machines::Created) -> orca_machines::Machine {
    match c {
        orca_machines::Created::Machine(m) | orca_machines::Created::Adopted(m) => m,
        orca_machines::Created::NoStock { message, .. } => panic!("no stock: {message}"),
    }
}
