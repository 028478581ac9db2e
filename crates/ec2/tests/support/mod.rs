//! What the EC2 tests share: the emulator's address (moto, started by `scripts/with-moto`), its seeding
//! (a security group, an instance profile, the default subnets), and a fault-injecting proxy in front
//! of it that logs every EC2 action with its parameters.
//!
//! moto does not honour ClientToken and never answers a capacity, quota or throttling error: the proxy
//! does that. EC2's Query API posts every action to `/`, with the action in the form body, so the
//! proxy matches on the form's `Action` and parameters (the shared `orca_fakes::Control` matches on
//! method and path only, which cannot tell one EC2 action from another).

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use orca_ec2::{Ec2Builder, StaticCredentials, Waiting};
use orca_machines::RetryPolicy;
use secrecy::SecretString;

/// The variable `scripts/with-moto` sets.
pub const MOTO_ENV: &str = "ORCA_TEST_MOTO_ENDPOINT";
/// The emulator's region.
pub const REGION: &str = "us-east-1";
/// The availability zone the tests make machines in (and its neighbour).
pub const ZONE: &str = "us-east-1a";
pub const OTHER_ZONE: &str = "us-east-1b";
/// A secret the tests give the driver, to show it never appears anywhere.
pub const SECRET: &str = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY";

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

/// An SDK client straight to moto, for seeding and for looking behind the driver's back.
pub async fn sdk(moto: &str) -> aws_sdk_ec2::Client {
    let conf = aws_sdk_ec2::config::Builder::new()
        .behavior_version(aws_sdk_ec2::config::BehaviorVersion::latest())
        .region(aws_sdk_ec2::config::Region::new(REGION))
        .endpoint_url(moto)
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
    /// A builder for `owner` against `endpoint` (moto or the proxy), fast to retry and to wait.
    pub fn builder(&self, owner: &str, endpoint: &str) -> Ec2Builder {
        let mut b = Ec2Builder::new(owner)
            .region(REGION)
            .endpoint(endpoint)
            .credentials(credentials())
            .security_group(&self.security_group)
            .instance_profile(&self.instance_profile)
            .retry_policy(RetryPolicy::fast())
            .waiting(Waiting {
                interval: Duration::from_millis(20),
                timeout: Duration::from_secs(20),
            })
            .timeouts(Duration::from_secs(5), Duration::from_secs(30));
        for (zone, subnet) in &self.subnets {
            b = b.subnet(zone, subnet);
        }
        b
    }
}

/// What an injected fault does.
#[derive(Debug, Clone)]
pub enum Fault {
    /// Answer an EC2 error (`<Response><Errors><Error>...`) with this status and code; the request
    /// never reaches moto.
    Error { status: u16, code: String },
    /// Forward the request (moto acts on it), then break the connection before the answer's body.
    DropAnswer,
    /// Forward the request, and replace the first `from` in moto's answer with `to`.
    Rewrite { from: String, to: String },
}

impl Fault {
    pub fn error(status: u16, code: &str) -> Self {
        Fault::Error {
            status,
            code: code.to_string(),
        }
    }
}

/// A fault for the next `times` requests of `action` whose parameters include every pair of `when`.
#[derive(Debug, Clone)]
pub struct Rule {
    pub action: String,
    pub when: Vec<(String, String)>,
    pub fault: Fault,
    pub times: u32,
}

impl Rule {
    pub fn new(action: &str, fault: Fault, times: u32) -> Self {
        Rule {
            action: action.to_string(),
            when: Vec::new(),
            fault,
            times,
        }
    }

    pub fn when(mut self, key: &str, value: &str) -> Self {
        self.when.push((key.to_string(), value.to_string()));
        self
    }
}

/// One request the proxy saw.
#[derive(Debug, Clone)]
pub struct Seen {
    pub action: String,
    pub params: BTreeMap<String, String>,
    pub at: Instant,
    pub status: u16,
    pub faulted: bool,
}

#[derive(Debug)]
struct ProxyState {
    upstream: String,
    http: reqwest::Client,
    rules: Mutex<Vec<Rule>>,
    log: Mutex<Vec<Seen>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The fault-injecting proxy, on 127.0.0.1 until dropped.
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

impl Proxy {
    pub async fn start(upstream: &str) -> Proxy {
        let state = Arc::new(ProxyState {
            upstream: upstream.to_string(),
            http: reqwest::Client::new(),
            rules: Mutex::new(Vec::new()),
            log: Mutex::new(Vec::new()),
        });
        let app = axum::Router::new()
            .fallback(forward)
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Proxy { url, state, task }
    }

    pub fn inject(&self, rule: Rule) {
        lock(&self.state.rules).push(rule);
    }

    /// Removes every rule for `action`.
    pub fn clear(&self, action: &str) {
        lock(&self.state.rules).retain(|r| r.action != action);
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

fn take(state: &ProxyState, action: &str, params: &BTreeMap<String, String>) -> Option<Fault> {
    let mut rules = lock(&state.rules);
    let hit = rules.iter_mut().find(|r| {
        r.times > 0 && r.action == action && r.when.iter().all(|(k, v)| params.get(k) == Some(v))
    })?;
    hit.times -= 1;
    let fault = hit.fault.clone();
    rules.retain(|r| r.times > 0);
    Some(fault)
}

fn ec2_error(status: u16, code: &str) -> Response {
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response><Errors><Error><Code>{code}</Code>\
         <Message>injected by the test proxy: {code}</Message></Error></Errors>\
         <RequestID>injected-{code}</RequestID></Response>"
    );
    (
        StatusCode::from_u16(status).unwrap(),
        [("content-type", "text/xml;charset=UTF-8")],
        body,
    )
        .into_response()
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

async fn forward(
    State(state): State<Arc<ProxyState>>,
    method: axum::http::Method,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let params: BTreeMap<String, String> =
        url::form_urlencoded::parse(&body).into_owned().collect();
    let action = params.get("Action").cloned().unwrap_or_default();
    let fault = take(&state, &action, &params);
    let (response, faulted) = match fault {
        Some(Fault::Error { status, code }) => (ec2_error(status, &code), true),
        other => {
            let path = uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
            let mut req = state
                .http
                .request(method, format!("{}{path}", state.upstream))
                .body(body.clone());
            for (k, v) in &headers {
                if k != "host" && k != "content-length" {
                    req = req.header(k, v);
                }
            }
            let response = match req.send().await {
                Ok(r) => {
                    let status = r.status();
                    let ct = r
                        .headers()
                        .get("content-type")
                        .cloned()
                        .unwrap_or_else(|| "text/xml".parse().unwrap());
                    let mut bytes = r.bytes().await.unwrap_or_default();
                    if let Some(Fault::Rewrite { from, to }) = &other {
                        let text = String::from_utf8_lossy(&bytes).replacen(from, to, 1);
                        bytes = Bytes::from(text);
                    }
                    let mut out = Response::new(Body::from(bytes));
                    *out.status_mut() = status;
                    out.headers_mut().insert("content-type", ct);
                    out
                }
                Err(e) => (StatusCode::BAD_GATEWAY, format!("proxy: {e}")).into_response(),
            };
            match other {
                Some(Fault::DropAnswer) => {
                    let (parts, _) = response.into_parts();
                    (Response::from_parts(parts, broken_body()), true)
                }
                Some(_) => (response, true),
                None => (response, false),
            }
        }
    };
    lock(&state.log).push(Seen {
        action,
        params,
        at: Instant::now(),
        status: response.status().as_u16(),
        faulted,
    });
    response
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
    pub async fn provider(&self, owner: &str) -> orca_ec2::Ec2Provider {
        self.seed
            .builder(owner, &self.proxy.url)
            .build()
            .await
            .unwrap()
    }

    pub fn spec(&self, name: &str) -> orca_machines::MachineSpec {
        orca_machines::MachineSpec::new(name, "t3.micro", ZONE, &self.pool)
    }
}

/// The machine a create made; panics on no stock.
pub fn made(c: orca_machines::Created) -> orca_machines::Machine {
    match c {
        orca_machines::Created::Machine(m) | orca_machines::Created::Adopted(m) => m,
        orca_machines::Created::NoStock { message, .. } => panic!("no stock: {message}"),
    }
}
