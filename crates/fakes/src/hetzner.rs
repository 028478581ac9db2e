//! The fake Hetzner Cloud API: a stateful server on 127.0.0.1 that keeps the shapes of the public API
//! reference (`https://docs.hetzner.cloud`), so that a client generated from Hetzner's OpenAPI document
//! (the `hcloud` crate) reads every answer.
//!
//! What it serves, under `/v1`:
//! - `servers`: list (`name`, `label_selector`, `status`, `sort`, `page`, `per_page`), create (its
//!   `start_server` in `next_actions` unless `start_after_create` is false), get,
//!   delete, and the actions `poweron`, `poweroff`, `shutdown`, `change_type`;
//! - `servers/{id}/actions` (filter `status`) and `actions/{id}`: every change answers an action that is `running` for a configurable number of
//!   reads, then `success` or `error` (the change takes effect when the action ends);
//! - `server_types` (x86 and arm, prices per location), `images` (one per architecture, filterable by
//!   `name` and `architecture`), `locations`, `ssh_keys`, `firewalls`;
//! - label selectors (`k=v`, `k==v`, `k!=v`, `k`, `!k`, `k in (a,b)`, `k notin (a,b)`), `meta.pagination`
//!   (`page`, `per_page` up to 50, `previous_page`, `next_page`, `last_page`, `total_entries`);
//! - error bodies `{"error": {"code", "message", "details"}}` with the real codes (`unauthorized`,
//!   `not_found`, `invalid_input`, `json_error`, `uniqueness_error`, `resource_unavailable`,
//!   `server_not_stopped`, `rate_limit_exceeded`);
//! - the bearer token check, and the per-project rate limit with `RateLimit-Limit`,
//!   `RateLimit-Remaining` and `RateLimit-Reset` on every answer (a token bucket that refills
//!   continuously, as Hetzner's does: 3,600 an hour by default, configurable).
//!
//! Faults on demand: a server type out of stock in a location ([`FakeHetzner::set_no_stock`]), the next
//! create action failing ([`FakeHetzner::fail_next_create_action`]), the next create's `start_server`
//! next action failing ([`FakeHetzner::fail_next_start_after_create`]), shutdowns that are ignored
//! ([`FakeHetzner::ignore_shutdown`]), and through [`Control`] 429s, 5xx, latency and lost answers.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};

use crate::control::{serve, Control, Running};

/// The token the fake accepts unless [`Options::token`] says otherwise.
pub const DEFAULT_TOKEN: &str = "fake-hcloud-token";

/// How the fake starts.
#[derive(Debug, Clone)]
pub struct Options {
    /// The bearer token it accepts.
    pub token: String,
    /// The rate limit: requests in a full bucket (`RateLimit-Limit`).
    pub rate_limit: u32,
    /// How many requests the bucket regains per second (Hetzner: limit / 3600).
    pub refill_per_second: f64,
    /// How many reads of an action show it `running` before it ends.
    pub action_reads: u32,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            token: DEFAULT_TOKEN.to_string(),
            rate_limit: 3600,
            refill_per_second: 1.0,
            action_reads: 1,
        }
    }
}

#[derive(Debug, Clone)]
struct ServerType {
    id: i64,
    name: &'static str,
    arch: &'static str,
    cores: i64,
    memory: f64,
    disk: i64,
    cpu_type: &'static str,
    hourly_net: f64,
    locations: &'static [&'static str],
}

/// Locations: (id, name, description, country, city, latitude, longitude, network zone).
type LocationRow = (
    i64,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    f64,
    f64,
    &'static str,
);

const LOCATIONS: &[LocationRow] = &[
    (
        1,
        "fsn1",
        "Falkenstein DC Park 1",
        "DE",
        "Falkenstein",
        50.47612,
        12.370071,
        "eu-central",
    ),
    (
        2,
        "nbg1",
        "Nuremberg DC Park 1",
        "DE",
        "Nuremberg",
        49.452102,
        11.076665,
        "eu-central",
    ),
    (
        3,
        "hel1",
        "Helsinki DC Park 1",
        "FI",
        "Helsinki",
        60.169855,
        24.938379,
        "eu-central",
    ),
    (
        4,
        "ash",
        "Ashburn, VA",
        "US",
        "Ashburn, VA",
        39.045821,
        -77.487073,
        "us-east",
    ),
];

const EU: &[&str] = &["fsn1", "nbg1", "hel1"];
const ALL: &[&str] = &["fsn1", "nbg1", "hel1", "ash"];

fn catalogue() -> Vec<ServerType> {
    vec![
        ServerType {
            id: 22,
            name: "cx22",
            arch: "x86",
            cores: 2,
            memory: 4.0,
            disk: 40,
            cpu_type: "shared",
            hourly_net: 0.006,
            locations: EU,
        },
        ServerType {
            id: 23,
            name: "cx32",
            arch: "x86",
            cores: 4,
            memory: 8.0,
            disk: 80,
            cpu_type: "shared",
            hourly_net: 0.0113,
            locations: EU,
        },
        ServerType {
            id: 1,
            name: "cpx11",
            arch: "x86",
            cores: 2,
            memory: 2.0,
            disk: 40,
            cpu_type: "shared",
            hourly_net: 0.0072,
            locations: ALL,
        },
        ServerType {
            id: 45,
            name: "cax11",
            arch: "arm",
            cores: 2,
            memory: 4.0,
            disk: 40,
            cpu_type: "shared",
            hourly_net: 0.0063,
            locations: EU,
        },
        ServerType {
            id: 93,
            name: "cax21",
            arch: "arm",
            cores: 4,
            memory: 8.0,
            disk: 80,
            cpu_type: "shared",
            hourly_net: 0.0103,
            locations: EU,
        },
        ServerType {
            id: 96,
            name: "ccx13",
            arch: "x86",
            cores: 2,
            memory: 8.0,
            disk: 80,
            cpu_type: "dedicated",
            hourly_net: 0.0200,
            locations: ALL,
        },
    ]
}

/// Images: (id, name, architecture).
const IMAGES: &[(i64, &str, &str)] = &[
    (161547269, "ubuntu-24.04", "x86"),
    (161547270, "ubuntu-24.04", "arm"),
    (114690387, "debian-12", "x86"),
    (114690389, "debian-12", "arm"),
];

const CREATED: &str = "2026-01-01T00:00:00+00:00";

#[derive(Debug, Clone)]
struct Server {
    id: i64,
    name: String,
    server_type: String,
    location: String,
    image: i64,
    labels: BTreeMap<String, String>,
    status: String,
    firewalls: Vec<i64>,
    ssh_keys: Vec<String>,
    user_data: Option<String>,
}

#[derive(Debug, Clone)]
enum Effect {
    Create,
    Start,
    Stop,
    ChangeType(String),
    Delete,
}

#[derive(Debug, Clone)]
struct Action {
    id: i64,
    command: &'static str,
    server: i64,
    status: &'static str,
    reads_left: u32,
    effect: Effect,
    fail: Option<String>,
    error: Option<(String, String)>,
}

#[derive(Debug)]
struct Bucket {
    limit: u32,
    refill: f64,
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn refill(&mut self) {
        let now = Instant::now();
        self.tokens =
            (self.tokens + self.refill * (now - self.at).as_secs_f64()).min(self.limit as f64);
        self.at = now;
    }
    /// `RateLimit-Reset`: the Unix time at which the bucket is full again.
    fn reset(&self) -> u64 {
        let missing = self.limit as f64 - self.tokens;
        let secs = if missing <= 0.0 || self.refill <= 0.0 {
            0.0
        } else {
            missing / self.refill
        };
        (unix_now() + secs).ceil() as u64
    }
    fn headers(&self) -> [(&'static str, String); 3] {
        [
            ("RateLimit-Limit", self.limit.to_string()),
            (
                "RateLimit-Remaining",
                (self.tokens.max(0.0).floor() as u64).to_string(),
            ),
            ("RateLimit-Reset", self.reset().to_string()),
        ]
    }
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}

#[derive(Debug)]
struct State_ {
    token: String,
    types: Vec<ServerType>,
    servers: BTreeMap<i64, Server>,
    actions: BTreeMap<i64, Action>,
    ssh_keys: Vec<(i64, String)>,
    firewalls: Vec<(i64, String)>,
    next_id: i64,
    no_stock: HashSet<(String, String)>,
    fail_next_create: Option<String>,
    fail_next_start: Option<String>,
    ignore_shutdown: bool,
    action_reads: u32,
    bucket: Bucket,
    rate_limited: u64,
    low_water: f64,
}

type Shared = Arc<Mutex<State_>>;

fn lock(s: &Shared) -> std::sync::MutexGuard<'_, State_> {
    s.lock().unwrap_or_else(|p| p.into_inner())
}

/// A running fake Hetzner Cloud API.
#[derive(Debug)]
pub struct FakeHetzner {
    running: Running,
    state: Shared,
}

/// An error answer: status, code, message.
struct ApiError(StatusCode, &'static str, String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (
            self.0,
            Json(json!({"error": {"code": self.1, "message": self.2, "details": {}}})),
        )
            .into_response()
    }
}

fn not_found(what: &str) -> ApiError {
    ApiError(
        StatusCode::NOT_FOUND,
        "not_found",
        format!("{what} not found"),
    )
}

fn invalid(message: impl Into<String>) -> ApiError {
    ApiError(StatusCode::BAD_REQUEST, "invalid_input", message.into())
}

type ApiResult = Result<Response, ApiError>;

impl FakeHetzner {
    /// Starts a fake with the default options.
    pub async fn start() -> std::io::Result<FakeHetzner> {
        Self::start_with(Options::default()).await
    }

    /// Starts a fake with `options`.
    pub async fn start_with(options: Options) -> std::io::Result<FakeHetzner> {
        let state: Shared = Arc::new(Mutex::new(State_ {
            token: options.token.clone(),
            types: catalogue(),
            servers: BTreeMap::new(),
            actions: BTreeMap::new(),
            ssh_keys: vec![(4711, "orca-test".into())],
            firewalls: vec![(38, "orca-fw".into())],
            next_id: 1_000_000,
            no_stock: HashSet::new(),
            fail_next_create: None,
            fail_next_start: None,
            ignore_shutdown: false,
            action_reads: options.action_reads,
            bucket: Bucket {
                limit: options.rate_limit,
                refill: options.refill_per_second,
                tokens: options.rate_limit as f64,
                at: Instant::now(),
            },
            rate_limited: 0,
            low_water: options.rate_limit as f64,
        }));
        let router = Router::new()
            .route("/v1/servers", get(list_servers).post(create_server))
            .route("/v1/servers/{id}", get(get_server).delete(delete_server))
            .route("/v1/servers/{id}/actions", get(list_server_actions))
            .route("/v1/servers/{id}/actions/{command}", post(server_action))
            .route("/v1/actions/{id}", get(get_action))
            .route("/v1/server_types", get(list_server_types))
            .route("/v1/server_types/{id}", get(get_server_type))
            .route("/v1/images", get(list_images))
            .route("/v1/locations", get(list_locations))
            .route("/v1/ssh_keys", get(list_ssh_keys))
            .route("/v1/firewalls", get(list_firewalls))
            .fallback(|| async { not_found("route") })
            .layer(axum::middleware::from_fn_with_state(state.clone(), guard))
            .with_state(state.clone());
        let control = Arc::new(Control::default());
        let running = serve(router, control).await?;
        Ok(FakeHetzner { running, state })
    }

    /// The API's base address, `http://127.0.0.1:PORT/v1` (what replaces `https://api.hetzner.cloud/v1`).
    pub fn url(&self) -> String {
        format!("{}/v1", self.running.url())
    }

    /// The request log and fault rules.
    pub fn control(&self) -> &Arc<Control> {
        &self.running.control
    }

    /// The token it accepts.
    pub fn token(&self) -> String {
        lock(&self.state).token.clone()
    }

    /// Makes `server_type` out of stock in `location` (`on`), or back in stock.
    pub fn set_no_stock(&self, server_type: &str, location: &str, on: bool) {
        let key = (server_type.to_string(), location.to_string());
        let mut s = lock(&self.state);
        if on {
            s.no_stock.insert(key);
        } else {
            s.no_stock.remove(&key);
        }
    }

    /// Makes the next create's action end in `error` with `message` (the server stays, `off`).
    pub fn fail_next_create_action(&self, message: &str) {
        lock(&self.state).fail_next_create = Some(message.to_string());
    }

    /// Makes the next create's `start_server` action (its `next_actions`) end in `error` with
    /// `message` while the create action succeeds (the server stays, `off`).
    pub fn fail_next_start_after_create(&self, message: &str) {
        lock(&self.state).fail_next_start = Some(message.to_string());
    }

    /// Whether graceful shutdowns are ignored (the action succeeds, the server keeps running), as an OS
    /// without ACPI support would.
    pub fn ignore_shutdown(&self, on: bool) {
        lock(&self.state).ignore_shutdown = on;
    }

    /// Sets the rate limit: a full bucket of `limit` requests regaining `per_second` a second.
    pub fn set_rate_limit(&self, limit: u32, per_second: f64) {
        let mut s = lock(&self.state);
        s.bucket = Bucket {
            limit,
            refill: per_second,
            tokens: limit as f64,
            at: Instant::now(),
        };
        s.low_water = limit as f64;
    }

    /// The fewest requests left in the rate-limit bucket after any served request so far.
    pub fn low_water(&self) -> f64 {
        lock(&self.state).low_water
    }

    /// How many requests the rate limit refused (429 `rate_limit_exceeded`) so far.
    pub fn rate_limited(&self) -> u64 {
        lock(&self.state).rate_limited
    }

    /// Adds an SSH key named `name`; answers its id.
    pub fn add_ssh_key(&self, name: &str) -> i64 {
        let mut s = lock(&self.state);
        let id = s.next();
        s.ssh_keys.push((id, name.to_string()));
        id
    }

    /// Adds a firewall named `name`; answers its id.
    pub fn add_firewall(&self, name: &str) -> i64 {
        let mut s = lock(&self.state);
        let id = s.next();
        s.firewalls.push((id, name.to_string()));
        id
    }

    /// Every server as the API shows it, in id order.
    pub fn servers(&self) -> Vec<Value> {
        let s = lock(&self.state);
        s.servers.values().map(|v| s.server_json(v)).collect()
    }

    /// The user data a server was created with.
    pub fn user_data(&self, id: i64) -> Option<String> {
        lock(&self.state)
            .servers
            .get(&id)
            .and_then(|v| v.user_data.clone())
    }

    /// The SSH key names a server was created with.
    pub fn ssh_keys_of(&self, id: i64) -> Vec<String> {
        lock(&self.state)
            .servers
            .get(&id)
            .map(|v| v.ssh_keys.clone())
            .unwrap_or_default()
    }

    /// Makes a server directly (no request counted), as another tool in the same project would.
    pub fn insert_server(
        &self,
        name: &str,
        server_type: &str,
        location: &str,
        labels: &[(&str, &str)],
    ) -> i64 {
        let mut s = lock(&self.state);
        let id = s.next();
        let arch = s
            .types
            .iter()
            .find(|t| t.name == server_type)
            .map(|t| t.arch)
            .unwrap_or("x86");
        let image = IMAGES
            .iter()
            .find(|i| i.1 == "ubuntu-24.04" && i.2 == arch)
            .map(|i| i.0)
            .unwrap_or(IMAGES[0].0);
        s.servers.insert(
            id,
            Server {
                id,
                name: name.to_string(),
                server_type: server_type.to_string(),
                location: location.to_string(),
                image,
                labels: labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                status: "running".into(),
                firewalls: vec![],
                ssh_keys: vec![],
                user_data: None,
            },
        );
        id
    }
}

impl State_ {
    fn next(&mut self) -> i64 {
        self.next_id += 1;
        self.next_id
    }

    fn action(&mut self, command: &'static str, server: i64, effect: Effect) -> i64 {
        let id = self.next();
        self.actions.insert(
            id,
            Action {
                id,
                command,
                server,
                status: "running",
                reads_left: self.action_reads,
                effect,
                fail: None,
                error: None,
            },
        );
        id
    }

    /// Ends an action: its effect happens (or its error is recorded).
    fn finish(&mut self, id: i64) {
        let Some(a) = self.actions.get(&id).cloned() else {
            return;
        };
        if a.status != "running" {
            return;
        }
        let (status, error) = match &a.fail {
            Some(msg) => ("error", Some(("action_failed".to_string(), msg.clone()))),
            None => ("success", None),
        };
        // A create's `start_server` (its next action), still to run.
        let start_next: Vec<i64> = match a.effect {
            Effect::Create => self
                .actions
                .values()
                .filter(|x| {
                    x.server == a.server && x.command == "start_server" && x.status == "running"
                })
                .map(|x| x.id)
                .collect(),
            _ => Vec::new(),
        };
        if a.fail.is_some() {
            if let Some(srv) = self.servers.get_mut(&a.server) {
                srv.status = "off".into();
            }
            // Its next actions cannot run: they end in error too.
            for n in start_next {
                if let Some(x) = self.actions.get_mut(&n) {
                    x.status = "error";
                    x.error = Some(("action_failed".into(), "the server was not created".into()));
                }
            }
        } else {
            let ignore_shutdown = self.ignore_shutdown;
            match &a.effect {
                Effect::Create => {
                    if let Some(srv) = self.servers.get_mut(&a.server) {
                        // Made, and off until its start_server action (if any) runs.
                        srv.status = if start_next.is_empty() {
                            "off"
                        } else {
                            "starting"
                        }
                        .into();
                    }
                }
                Effect::Start => {
                    if let Some(srv) = self.servers.get_mut(&a.server) {
                        srv.status = "running".into();
                    }
                }
                Effect::Stop => {
                    if let Some(srv) = self.servers.get_mut(&a.server) {
                        if !(a.command == "shutdown_server" && ignore_shutdown) {
                            srv.status = "off".into();
                        }
                    }
                }
                Effect::ChangeType(t) => {
                    if let Some(srv) = self.servers.get_mut(&a.server) {
                        srv.server_type = t.clone();
                        srv.status = "off".into();
                    }
                }
                Effect::Delete => {
                    self.servers.remove(&a.server);
                }
            }
        }
        if let Some(x) = self.actions.get_mut(&id) {
            x.status = status;
            x.error = error;
        }
    }

    fn action_json(&self, id: i64) -> Value {
        let a = &self.actions[&id];
        let done = a.status != "running";
        json!({
            "id": a.id,
            "command": a.command,
            "status": a.status,
            "progress": if done { 100 } else { 0 },
            "started": CREATED,
            "finished": if done { Value::from(CREATED) } else { Value::Null },
            "resources": [{"id": a.server, "type": "server"}],
            "error": a.error.as_ref().map(|(c, m)| json!({"code": c, "message": m})),
        })
    }

    fn type_json(&self, t: &ServerType) -> Value {
        let prices: Vec<Value> = t
            .locations
            .iter()
            .map(|l| {
                // A little dearer outside Germany, as on Hetzner's price list.
                let factor = if l.ends_with('1') && *l != "hel1" {
                    1.0
                } else {
                    1.1
                };
                let net = t.hourly_net * factor;
                json!({
                    "location": l,
                    "included_traffic": 21990232555520i64,
                    "price_hourly": price(net),
                    "price_monthly": price(net * 730.0),
                    "price_per_tb_traffic": price(1.0),
                })
            })
            .collect();
        json!({
            "id": t.id,
            "name": t.name,
            "description": t.name.to_uppercase(),
            "category": if t.cpu_type == "dedicated" { "dedicated_general_purpose" } else { "shared_general_purpose" },
            "cores": t.cores,
            "memory": t.memory,
            "disk": t.disk,
            "cpu_type": t.cpu_type,
            "storage_type": "local",
            "architecture": t.arch,
            "deprecated": false,
            "deprecation": null,
            "locations": t.locations.iter().map(|l| {
                let id = LOCATIONS.iter().find(|x| x.1 == *l).map(|x| x.0).unwrap_or(0);
                json!({"id": id, "name": l, "deprecation": null})
            }).collect::<Vec<_>>(),
            "prices": prices,
        })
    }

    fn server_json(&self, s: &Server) -> Value {
        let t = self.types.iter().find(|t| t.name == s.server_type);
        let type_json = t.map(|t| self.type_json(t)).unwrap_or(Value::Null);
        let o = s.id % 250;
        json!({
            "id": s.id,
            "name": s.name,
            "status": s.status,
            "created": CREATED,
            "labels": s.labels,
            "locked": false,
            "backup_window": null,
            "included_traffic": 21990232555520i64,
            "ingoing_traffic": 0,
            "outgoing_traffic": 0,
            "iso": null,
            "load_balancers": [],
            "volumes": [],
            "placement_group": null,
            "primary_disk_size": t.map(|t| t.disk).unwrap_or(40),
            "private_net": [],
            "protection": {"delete": false, "rebuild": false},
            "rescue_enabled": false,
            "image": image_json(s.image),
            "location": location_json(&s.location),
            "server_type": type_json,
            "public_net": {
                "firewalls": s.firewalls.iter().map(|f| json!({"id": f, "status": "applied"})).collect::<Vec<_>>(),
                "floating_ips": [],
                "ipv4": {"id": s.id + 7, "ip": format!("203.0.113.{}", o + 1), "blocked": false,
                         "dns_ptr": format!("static.{}.113.0.203.clients.your-server.de", o + 1)},
                "ipv6": {"id": s.id + 8, "ip": format!("2001:db8:{:x}::/64", s.id % 0xffff), "blocked": false,
                         "dns_ptr": []},
            },
        })
    }
}

fn price(net: f64) -> Value {
    json!({"net": format!("{net:.10}"), "gross": format!("{:.10}", net * 1.19)})
}

fn image_json(id: i64) -> Value {
    let (id, name, arch) = IMAGES
        .iter()
        .find(|i| i.0 == id)
        .copied()
        .unwrap_or(IMAGES[0]);
    let (flavor, version) = name.split_once('-').unwrap_or((name, ""));
    json!({
        "id": id,
        "type": "system",
        "status": "available",
        "name": name,
        "description": format!("{} {}", flavor, version),
        "architecture": arch,
        "os_flavor": flavor,
        "os_version": version,
        "rapid_deploy": true,
        "disk_size": 5.0,
        "image_size": null,
        "created": CREATED,
        "created_from": null,
        "bound_to": null,
        "deleted": null,
        "deprecated": null,
        "labels": {},
        "protection": {"delete": false},
    })
}

fn location_json(name: &str) -> Value {
    let l = LOCATIONS
        .iter()
        .find(|l| l.1 == name)
        .copied()
        .unwrap_or(LOCATIONS[0]);
    json!({"id": l.0, "name": l.1, "description": l.2, "country": l.3, "city": l.4,
           "latitude": l.5, "longitude": l.6, "network_zone": l.7})
}

/// Checks the bearer token, spends one request of the rate limit, and adds the rate-limit headers.
async fn guard(State(state): State<Shared>, req: Request, next: Next) -> Response {
    let auth = req
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let (verdict, headers) = {
        let mut s = lock(&state);
        s.bucket.refill();
        let ok_token = auth.as_deref() == Some(&format!("Bearer {}", s.token));
        let verdict = if !ok_token {
            Some(ApiError(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "unable to authenticate".into(),
            ))
        } else if s.bucket.tokens < 1.0 {
            s.rate_limited += 1;
            Some(ApiError(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limit_exceeded",
                "limit of requests per hour reached".into(),
            ))
        } else {
            s.bucket.tokens -= 1.0;
            s.low_water = s.low_water.min(s.bucket.tokens);
            None
        };
        (verdict, s.bucket.headers())
    };
    let mut response = match verdict {
        Some(e) => e.into_response(),
        None => next.run(req).await,
    };
    for (k, v) in headers {
        if let Ok(v) = HeaderValue::from_str(&v) {
            response.headers_mut().insert(k, v);
        }
    }
    response
}

type Params = Query<Vec<(String, String)>>;

fn param<'a>(q: &'a [(String, String)], key: &str) -> Option<&'a str> {
    q.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

fn params<'a>(q: &'a [(String, String)], key: &str) -> Vec<&'a str> {
    q.iter()
        .filter(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
        .collect()
}

/// One page of `items` as `{key: [...], "meta": {"pagination": ...}}`.
fn paged(q: &[(String, String)], key: &str, items: Vec<Value>) -> ApiResult {
    paged_with(q, key, items, Value::clone)
}

/// One page of `items`, only that page's items shown with `show`.
fn paged_with<T>(
    q: &[(String, String)],
    key: &str,
    items: Vec<T>,
    show: impl Fn(&T) -> Value,
) -> ApiResult {
    let page: i64 = match param(q, "page") {
        None => 1,
        Some(p) => p
            .parse()
            .ok()
            .filter(|p| *p >= 1)
            .ok_or_else(|| invalid("page must be a positive integer"))?,
    };
    let per_page: i64 = match param(q, "per_page") {
        None => 25,
        Some(p) => p
            .parse::<i64>()
            .ok()
            .filter(|p| *p >= 1)
            .ok_or_else(|| invalid("per_page must be a positive integer"))?
            .min(50),
    };
    let total = items.len() as i64;
    let last = ((total + per_page - 1) / per_page).max(1);
    let start = ((page - 1) * per_page).min(total) as usize;
    let end = (page * per_page).min(total) as usize;
    let body = json!({
        key: items[start..end].iter().map(show).collect::<Vec<_>>(),
        "meta": {"pagination": {
            "page": page,
            "per_page": per_page,
            "previous_page": if page > 1 { Value::from(page - 1) } else { Value::Null },
            "next_page": if page < last { Value::from(page + 1) } else { Value::Null },
            "last_page": last,
            "total_entries": total,
        }}
    });
    Ok(Json(body).into_response())
}

/// One term of a label selector.
#[derive(Debug, PartialEq)]
enum Term {
    Eq(String, String),
    Ne(String, String),
    Has(String),
    HasNot(String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
}

fn valid_key(k: &str) -> bool {
    !k.is_empty()
        && k.len() <= 253
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./".contains(&b))
}

fn valid_value(v: &str) -> bool {
    v.len() <= 63
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

/// Parses a label selector: comma-separated terms, commas inside `( )` belonging to a set.
fn parse_selector(sel: &str) -> Result<Vec<Term>, String> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, c) in sel.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&sel[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        if depth < 0 {
            return Err("unbalanced parentheses".into());
        }
    }
    if depth != 0 {
        return Err("unbalanced parentheses".into());
    }
    parts.push(&sel[start..]);
    let bad = |p: &str| format!("invalid label selector term {p:?}");
    let mut terms = Vec::new();
    for raw in parts {
        let p = raw.trim();
        let term = if let Some(k) = p.strip_prefix('!') {
            Term::HasNot(k.trim().to_string())
        } else if let Some((k, v)) = p.split_once("!=") {
            Term::Ne(k.trim().into(), v.trim().into())
        } else if let Some((k, v)) = p.split_once("==") {
            Term::Eq(k.trim().into(), v.trim().into())
        } else if let Some((k, v)) = p.split_once('=') {
            Term::Eq(k.trim().into(), v.trim().into())
        } else if let Some((k, rest)) = p.split_once(" notin ") {
            Term::NotIn(k.trim().into(), set(rest).ok_or_else(|| bad(p))?)
        } else if let Some((k, rest)) = p.split_once(" in ") {
            Term::In(k.trim().into(), set(rest).ok_or_else(|| bad(p))?)
        } else {
            Term::Has(p.to_string())
        };
        let ok = match &term {
            Term::Eq(k, v) | Term::Ne(k, v) => valid_key(k) && valid_value(v),
            Term::Has(k) | Term::HasNot(k) => valid_key(k),
            Term::In(k, vs) | Term::NotIn(k, vs) => {
                valid_key(k) && vs.iter().all(|v| valid_value(v))
            }
        };
        if !ok {
            return Err(bad(p));
        }
        terms.push(term);
    }
    Ok(terms)
}

fn set(rest: &str) -> Option<Vec<String>> {
    let inner = rest.trim().strip_prefix('(')?.strip_suffix(')')?;
    Some(inner.split(',').map(|v| v.trim().to_string()).collect())
}

fn matches(terms: &[Term], labels: &BTreeMap<String, String>) -> bool {
    terms.iter().all(|t| match t {
        Term::Eq(k, v) => labels.get(k) == Some(v),
        Term::Ne(k, v) => labels.get(k) != Some(v),
        Term::Has(k) => labels.contains_key(k),
        Term::HasNot(k) => !labels.contains_key(k),
        Term::In(k, vs) => labels.get(k).is_some_and(|x| vs.contains(x)),
        Term::NotIn(k, vs) => labels.get(k).is_none_or(|x| !vs.contains(x)),
    })
}

fn selector(q: &[(String, String)]) -> Result<Option<Vec<Term>>, ApiError> {
    match param(q, "label_selector") {
        None => Ok(None),
        Some(s) => parse_selector(s).map(Some).map_err(invalid),
    }
}

async fn list_servers(State(state): State<Shared>, Query(q): Params) -> ApiResult {
    let sel = selector(&q)?;
    let statuses = params(&q, "status");
    let name = param(&q, "name");
    let s = lock(&state);
    let items = s
        .servers
        .values()
        .filter(|v| name.is_none_or(|n| v.name == n))
        .filter(|v| statuses.is_empty() || statuses.contains(&v.status.as_str()))
        .filter(|v| sel.as_ref().is_none_or(|t| matches(t, &v.labels)))
        .collect::<Vec<_>>();
    paged_with(&q, "servers", items, |v| s.server_json(v))
}

fn server_id(raw: &str) -> Result<i64, ApiError> {
    raw.parse()
        .map_err(|_| invalid(format!("invalid server id {raw:?}")))
}

async fn get_server(State(state): State<Shared>, Path(id): Path<String>) -> ApiResult {
    let id = server_id(&id)?;
    let s = lock(&state);
    let v = s.servers.get(&id).ok_or_else(|| not_found("server"))?;
    Ok(Json(json!({"server": s.server_json(v)})).into_response())
}

async fn delete_server(State(state): State<Shared>, Path(id): Path<String>) -> ApiResult {
    let id = server_id(&id)?;
    let mut s = lock(&state);
    let v = s.servers.get_mut(&id).ok_or_else(|| not_found("server"))?;
    v.status = "deleting".into();
    let a = s.action("delete_server", id, Effect::Delete);
    Ok(Json(json!({"action": s.action_json(a)})).into_response())
}

async fn get_action(State(state): State<Shared>, Path(id): Path<String>) -> ApiResult {
    let id: i64 = id.parse().map_err(|_| invalid("invalid action id"))?;
    let mut s = lock(&state);
    // A create's next action (start_server) runs once the create action has ended.
    let waits_for_create = s.actions.get(&id).is_some_and(|a| {
        a.command == "start_server"
            && s.actions.values().any(|x| {
                x.server == a.server && x.command == "create_server" && x.status == "running"
            })
    });
    let a = s.actions.get_mut(&id).ok_or_else(|| not_found("action"))?;
    if a.status == "running" && !waits_for_create {
        if a.reads_left == 0 {
            s.finish(id);
        } else {
            a.reads_left -= 1;
        }
    }
    Ok(Json(json!({"action": s.action_json(id)})).into_response())
}

fn body_json(body: &Bytes) -> Result<Value, ApiError> {
    serde_json::from_slice(body).map_err(|e| {
        ApiError(
            StatusCode::BAD_REQUEST,
            "json_error",
            format!("invalid JSON: {e}"),
        )
    })
}

async fn create_server(State(state): State<Shared>, body: Bytes) -> ApiResult {
    let b = body_json(&body)?;
    let str_field = |k: &str| b.get(k).and_then(Value::as_str).map(str::to_string);
    let name = str_field("name").ok_or_else(|| invalid("name is required"))?;
    let type_name = str_field("server_type").ok_or_else(|| invalid("server_type is required"))?;
    let image_ref = str_field("image").ok_or_else(|| invalid("image is required"))?;
    let location = str_field("location").unwrap_or_else(|| "fsn1".into());
    let ok_name = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'.');
    if !ok_name {
        return Err(invalid("name must be a valid hostname"));
    }
    let labels: BTreeMap<String, String> = match b.get("labels") {
        None | Some(Value::Null) => BTreeMap::new(),
        Some(v) => serde_json::from_value(v.clone())
            .map_err(|_| invalid("labels must be an object of strings"))?,
    };
    if labels.iter().any(|(k, v)| !valid_key(k) || !valid_value(v)) {
        return Err(invalid("invalid label"));
    }
    let user_data = str_field("user_data");
    if user_data.as_ref().is_some_and(|u| u.len() > 32 * 1024) {
        return Err(invalid("user_data is longer than 32 KiB"));
    }
    let mut s = lock(&state);
    let t = s
        .types
        .iter()
        .find(|t| t.name == type_name || t.id.to_string() == type_name)
        .cloned()
        .ok_or_else(|| invalid(format!("server type {type_name} not found")))?;
    if !LOCATIONS.iter().any(|l| l.1 == location) {
        return Err(invalid(format!("location {location} not found")));
    }
    if !t.locations.contains(&location.as_str()) {
        return Err(ApiError(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_input",
            format!(
                "unsupported location for server type: {} is not offered in {location}",
                t.name
            ),
        ));
    }
    // By id the image must match the type's architecture; by name it resolves to that architecture.
    let image = match image_ref.parse::<i64>() {
        Ok(id) => {
            let i = IMAGES
                .iter()
                .find(|i| i.0 == id)
                .ok_or_else(|| invalid(format!("image {id} not found")))?;
            if i.2 != t.arch {
                return Err(invalid(format!(
                    "image {id} has architecture {}, server type {} needs {}",
                    i.2, t.name, t.arch
                )));
            }
            id
        }
        Err(_) => {
            IMAGES
                .iter()
                .find(|i| i.1 == image_ref && i.2 == t.arch)
                .ok_or_else(|| invalid(format!("image {image_ref} not found")))?
                .0
        }
    };
    let mut ssh_keys = Vec::new();
    if let Some(keys) = b.get("ssh_keys").and_then(Value::as_array) {
        for k in keys {
            let k = match k {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            if !s
                .ssh_keys
                .iter()
                .any(|(id, n)| *n == k || id.to_string() == k)
            {
                return Err(invalid(format!("ssh key {k} not found")));
            }
            ssh_keys.push(k);
        }
    }
    let mut firewalls = Vec::new();
    if let Some(fws) = b.get("firewalls").and_then(Value::as_array) {
        for f in fws {
            let id = f
                .get("firewall")
                .and_then(Value::as_i64)
                .ok_or_else(|| invalid("firewalls[].firewall must be an id"))?;
            if !s.firewalls.iter().any(|(fid, _)| *fid == id) {
                return Err(invalid(format!("firewall {id} not found")));
            }
            firewalls.push(id);
        }
    }
    if s.servers.values().any(|v| v.name == name) {
        return Err(ApiError(
            StatusCode::CONFLICT,
            "uniqueness_error",
            "server name is already used".into(),
        ));
    }
    if s.no_stock.contains(&(t.name.to_string(), location.clone())) {
        return Err(ApiError(
            StatusCode::PRECONDITION_FAILED,
            "resource_unavailable",
            format!("server type {} is not available in this location", t.name),
        ));
    }
    let id = s.next();
    s.servers.insert(
        id,
        Server {
            id,
            name,
            server_type: t.name.to_string(),
            location,
            image,
            labels,
            status: "initializing".into(),
            firewalls,
            ssh_keys: ssh_keys.clone(),
            user_data,
        },
    );
    let a = s.action("create_server", id, Effect::Create);
    if let Some(msg) = s.fail_next_create.take() {
        if let Some(x) = s.actions.get_mut(&a) {
            x.fail = Some(msg);
        }
    }
    // `start_after_create` (default true): the start is a next action of the create, as Hetzner's.
    let mut next_actions = Vec::new();
    if b.get("start_after_create").and_then(Value::as_bool) != Some(false) {
        let n = s.action("start_server", id, Effect::Start);
        if let Some(msg) = s.fail_next_start.take() {
            if let Some(x) = s.actions.get_mut(&n) {
                x.fail = Some(msg);
            }
        }
        next_actions.push(s.action_json(n));
    }
    let body = json!({
        "server": s.server_json(&s.servers[&id]),
        "action": s.action_json(a),
        "next_actions": next_actions,
        "root_password": if ssh_keys.is_empty() { Value::from("fake-root-password") } else { Value::Null },
    });
    Ok((StatusCode::CREATED, Json(body)).into_response())
}

async fn server_action(
    State(state): State<Shared>,
    Path((id, command)): Path<(String, String)>,
    body: Bytes,
) -> ApiResult {
    let id = server_id(&id)?;
    let mut s = lock(&state);
    let status = s
        .servers
        .get(&id)
        .ok_or_else(|| not_found("server"))?
        .status
        .clone();
    let (name, effect) = match command.as_str() {
        "poweron" => ("start_server", Effect::Start),
        "poweroff" => ("stop_server", Effect::Stop),
        "shutdown" => ("shutdown_server", Effect::Stop),
        "change_type" => {
            let b = body_json(&body)?;
            let t = b
                .get("server_type")
                .and_then(Value::as_str)
                .ok_or_else(|| invalid("server_type is required"))?
                .to_string();
            if b.get("upgrade_disk").and_then(Value::as_bool).is_none() {
                return Err(invalid("upgrade_disk is required"));
            }
            let srv = &s.servers[&id];
            let cur_arch = s
                .types
                .iter()
                .find(|x| x.name == srv.server_type)
                .map(|x| x.arch);
            let new = s
                .types
                .iter()
                .find(|x| x.name == t)
                .ok_or_else(|| invalid(format!("server type {t} not found")))?;
            if Some(new.arch) != cur_arch {
                return Err(invalid(
                    "cannot change to a server type of another architecture",
                ));
            }
            if status != "off" {
                return Err(ApiError(
                    StatusCode::CONFLICT,
                    "server_not_stopped",
                    "server must be stopped to change its type".into(),
                ));
            }
            ("change_server_type", Effect::ChangeType(t))
        }
        _ => return Err(not_found("action")),
    };
    if let Some(srv) = s.servers.get_mut(&id) {
        srv.status = match &effect {
            Effect::Start => "starting",
            Effect::Stop => "stopping",
            _ => srv.status.as_str(),
        }
        .to_string();
    }
    let a = s.action(name, id, effect);
    Ok((
        StatusCode::CREATED,
        Json(json!({"action": s.action_json(a)})),
    )
        .into_response())
}

async fn list_server_actions(
    State(state): State<Shared>,
    Path(id): Path<String>,
    Query(q): Params,
) -> ApiResult {
    let id = server_id(&id)?;
    let statuses = params(&q, "status");
    let s = lock(&state);
    if !s.servers.contains_key(&id) {
        return Err(not_found("server"));
    }
    let items = s
        .actions
        .values()
        .filter(|a| a.server == id)
        .filter(|a| statuses.is_empty() || statuses.contains(&a.status))
        .map(|a| s.action_json(a.id))
        .collect();
    paged(&q, "actions", items)
}

async fn list_server_types(State(state): State<Shared>, Query(q): Params) -> ApiResult {
    let name = param(&q, "name");
    let s = lock(&state);
    let items = s
        .types
        .iter()
        .filter(|t| name.is_none_or(|n| t.name == n))
        .map(|t| s.type_json(t))
        .collect();
    paged(&q, "server_types", items)
}

async fn get_server_type(State(state): State<Shared>, Path(id): Path<String>) -> ApiResult {
    let s = lock(&state);
    let t = s
        .types
        .iter()
        .find(|t| t.id.to_string() == id)
        .ok_or_else(|| not_found("server type"))?;
    Ok(Json(json!({"server_type": s.type_json(t)})).into_response())
}

async fn list_images(Query(q): Params) -> ApiResult {
    let name = param(&q, "name");
    let arch = param(&q, "architecture");
    let types = params(&q, "type");
    let items = IMAGES
        .iter()
        .filter(|i| name.is_none_or(|n| i.1 == n))
        .filter(|i| arch.is_none_or(|a| i.2 == a))
        .filter(|_| types.is_empty() || types.contains(&"system"))
        .map(|i| image_json(i.0))
        .collect();
    paged(&q, "images", items)
}

async fn list_locations(Query(q): Params) -> ApiResult {
    let name = param(&q, "name");
    let items = LOCATIONS
        .iter()
        .filter(|l| name.is_none_or(|n| l.1 == n))
        .map(|l| location_json(l.1))
        .collect();
    paged(&q, "locations", items)
}

async fn list_ssh_keys(State(state): State<Shared>, Query(q): Params) -> ApiResult {
    let name = param(&q, "name");
    let s = lock(&state);
    let items = s
        .ssh_keys
        .iter()
        .filter(|(_, n)| name.is_none_or(|x| n == x))
        .map(|(id, n)| {
            json!({"id": id, "name": n, "fingerprint": format!("b7:2f:30:a0:2f:6c:58:6c:21:04:58:61:ba:06:3b:{:02x}", id % 256),
                   "public_key": format!("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFake{id} {n}"), "labels": {}, "created": CREATED})
        })
        .collect();
    paged(&q, "ssh_keys", items)
}

async fn list_firewalls(State(state): State<Shared>, Query(q): Params) -> ApiResult {
    let name = param(&q, "name");
    let s = lock(&state);
    let items = s
        .firewalls
        .iter()
        .filter(|(_, n)| name.is_none_or(|x| n == x))
        .map(|(id, n)| {
            let applied: Vec<Value> = s
                .servers
                .values()
                .filter(|v| v.firewalls.contains(id))
                .map(|v| json!({"type": "server", "server": {"id": v.id}}))
                .collect();
            json!({"id": id, "name": n, "labels": {}, "created": CREATED, "rules": [], "applied_to": applied})
        })
        .collect();
    paged(&q, "firewalls", items)
}

/// What a label selector test needs: parse and match without a server.
pub fn selector_matches(selector: &str, labels: &[(&str, &str)]) -> Result<bool, String> {
    let terms = parse_selector(selector)?;
    let labels: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Ok(matches(&terms, &labels))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors() {
        let l = [("orca", "pool"), ("orca-pool", "lab"), ("orca-owner", "a")];
        let ok = |s: &str| selector_matches(s, &l).unwrap();
        assert!(ok("orca=pool,orca-pool=lab,orca-owner=a"));
        assert!(ok("orca==pool"));
        assert!(!ok("orca=pool,orca-pool=lab,orca-owner=b"));
        assert!(!ok("orca=pool,!orca-owner"));
        assert!(ok("orca-owner"));
        assert!(ok("orca-owner!=b"));
        assert!(!ok("orca-owner!=a"));
        assert!(ok("orca-owner in (a,b),orca=pool"));
        assert!(!ok("orca-owner notin (a, b)"));
        assert!(ok("nothere notin (a)"));
        assert!(!ok("nothere in (a)"));
        assert!(selector_matches("a=b c", &l).is_err());
        assert!(selector_matches("a in (b", &l).is_err());
        assert!(selector_matches("", &l).is_err());
    }

    #[tokio::test]
    async fn pages_auth_and_rate_limit() {
        let fake = FakeHetzner::start_with(Options {
            rate_limit: 5,
            refill_per_second: 0.0,
            ..Options::default()
        })
        .await
        .unwrap();
        for i in 0..3 {
            fake.insert_server(&format!("s{i}"), "cx22", "fsn1", &[("orca", "pool")]);
        }
        let http = reqwest::Client::new();
        let r = http
            .get(format!("{}/servers?per_page=2&page=2", fake.url()))
            .bearer_auth(fake.token())
            .send()
            .await
            .unwrap();
        assert_eq!(r.headers()["ratelimit-limit"], "5");
        assert_eq!(r.headers()["ratelimit-remaining"], "4");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["servers"].as_array().unwrap().len(), 1);
        let p = &v["meta"]["pagination"];
        assert_eq!(
            (
                p["page"].as_i64(),
                p["previous_page"].as_i64(),
                p["next_page"].as_i64()
            ),
            (Some(2), Some(1), None)
        );
        assert_eq!(
            (p["last_page"].as_i64(), p["total_entries"].as_i64()),
            (Some(2), Some(3))
        );

        let r = http
            .get(format!("{}/servers", fake.url()))
            .bearer_auth("wrong")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401);
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"]["code"], "unauthorized");

        for _ in 0..4 {
            let r = http
                .get(format!("{}/locations", fake.url()))
                .bearer_auth(fake.token())
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
        }
        let r = http
            .get(format!("{}/locations", fake.url()))
            .bearer_auth(fake.token())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 429);
        assert_eq!(r.headers()["ratelimit-remaining"], "0");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"]["code"], "rate_limit_exceeded");
        assert_eq!(fake.rate_limited(), 1);
    }

    #[tokio::test]
    async fn create_action_lifecycle_and_errors() {
        let fake = FakeHetzner::start().await.unwrap();
        let http = reqwest::Client::new();
        let post = |body: Value| {
            http.post(format!("{}/servers", fake.url()))
                .bearer_auth(fake.token())
                .json(&body)
                .send()
        };
        let r = post(json!({"name": "a1", "server_type": "cax11", "image": "ubuntu-24.04", "location": "hel1",
                            "labels": {"orca": "pool"}, "ssh_keys": ["orca-test"], "firewalls": [{"firewall": 38}]}))
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["server"]["image"]["architecture"], "arm");
        assert_eq!(v["server"]["status"], "initializing");
        assert_eq!(v["action"]["status"], "running");
        let aid = v["action"]["id"].as_i64().unwrap();
        let get_action = || {
            http.get(format!("{}/actions/{aid}", fake.url()))
                .bearer_auth(fake.token())
                .send()
        };
        let a: Value = get_action().await.unwrap().json().await.unwrap();
        assert_eq!(
            a["action"]["status"], "running",
            "one read shows it running"
        );
        // The start follows as a next action: it waits for the create.
        assert_eq!(v["next_actions"][0]["command"], "start_server");
        let sid = v["next_actions"][0]["id"].as_i64().unwrap();
        let get_start = || {
            http.get(format!("{}/actions/{sid}", fake.url()))
                .bearer_auth(fake.token())
                .send()
        };
        for _ in 0..3 {
            let s: Value = get_start().await.unwrap().json().await.unwrap();
            assert_eq!(s["action"]["status"], "running", "not before the create");
        }
        let a: Value = get_action().await.unwrap().json().await.unwrap();
        assert_eq!(a["action"]["status"], "success");
        assert_eq!(fake.servers()[0]["status"], "starting");
        let s: Value = get_start().await.unwrap().json().await.unwrap();
        assert_eq!(s["action"]["status"], "running");
        let s: Value = get_start().await.unwrap().json().await.unwrap();
        assert_eq!(s["action"]["status"], "success");
        assert_eq!(fake.servers()[0]["status"], "running");

        let r = post(json!({"name": "a1", "server_type": "cx22", "image": "ubuntu-24.04"}))
            .await
            .unwrap();
        assert_eq!(r.status(), 409);
        assert_eq!(
            r.json::<Value>().await.unwrap()["error"]["code"],
            "uniqueness_error"
        );
        fake.set_no_stock("cx22", "nbg1", true);
        let r = post(json!({"name": "a2", "server_type": "cx22", "image": "ubuntu-24.04", "location": "nbg1"}))
            .await
            .unwrap();
        assert_eq!(
            r.json::<Value>().await.unwrap()["error"]["code"],
            "resource_unavailable"
        );
        let r = post(
            json!({"name": "a2", "server_type": "cx22", "image": "161547270", "location": "fsn1"}),
        )
        .await
        .unwrap();
        assert_eq!(r.status(), 400, "an arm image on an x86 type is refused");
        assert_eq!(fake.servers().len(), 1);
    }
}
