//! The fake Hetzner Cloud API: a stateful server on 127.0.0.1 that keeps the shapes and the behaviour
//! of the public API reference (`https://docs.hetzner.cloud`, with the changelog
//! `https://docs.hetzner.cloud/changelog` and the shapes of Hetzner's own Go client, hcloud-go
//! `hcloud/schema/*.go`), for orca's tests and benchmarks. One module a resource: `servers`
//! (servers and their actions), `create` (a server's create), `actions`, `catalogue` (server types, images, locations),
//! `project` (SSH keys, firewalls, networks), `rate` (token and rate limit) and `selector` (label
//! selectors).
//!
//! ## Real behaviours it reproduces
//! - Paths under `/v1`: `servers` list (`name`, `label_selector`, `status`, `page`, `per_page`),
//!   create (its `start_server` in `next_actions` unless `start_after_create` is false), get, update
//!   (`PUT`: `name`, and `labels`, which **replace all labels**; no fingerprint or precondition),
//!   delete, the actions `poweron`, `poweroff`, `shutdown`, `change_type`; `servers/{id}/actions`
//!   (filter `status`); `actions/{id}`; `actions?id=..&id=..` (several actions in one read, `id`
//!   required: listing every action of a project was removed in January 2025; only the first 25 ids
//!   named are answered for, as the API may leave the others out); `server_types`,
//!   `images`, `locations`, `ssh_keys`, `firewalls`, `networks`.
//! - Every change answers an action that is `running` for a while ([`Options::action_time`], on
//!   tokio's clock, so that a test with paused time lets minutes pass at once), then `success` or
//!   `error` with `{"code", "message"}`; the change takes effect when the action ends; a create's
//!   `start_server` (its next action) starts when the create action ends.
//! - While an action of a server runs, the server is `locked: true` and a new action on it or its
//!   delete answers `423 locked` (as Hetzner does: actions are not queued, and a repeated action is
//!   not recognised as the same one).
//! - Servers as the reference shows them today: `created` (the time it was made, RFC 3339), `location`
//!   at top level and **no `datacenter`** (removed from servers in July 2026), `public_net.ipv4` with
//!   its reverse DNS `dns_ptr` (`static.<reversed address>.clients.your-server.de`), `private_net`
//!   (`network`, `ip`, `alias_ips`, `mac_address`) for the networks a create names.
//! - Server types as the reference shows them after the 2025-09 change: `locations[]` with `available`,
//!   `recommended` and a per-location `deprecation` (`announced`, `unavailable_after`), **without the
//!   phased-out `deprecated` flag**; the catalogue is of types on sale today (`cx23`, `cx33`, `cpx22`,
//!   `cax11`, `cax21`, `ccx13`) beside two no longer sold (`cx22`, `cx32`, deprecated in every
//!   location, the dates illustrative), which a create refuses (`invalid_server_type`).
//! - A type out of stock in a location: `locations[].available` is false, and a create or a
//!   `change_type` to it there answers `resource_unavailable` "error during placement" (as Hetzner
//!   words it); a powered-off server keeps its place (Hetzner bills it because its resources stay
//!   reserved), so `poweron` is never refused for stock; a type never offered in a location:
//!   `invalid_input` "unsupported location for server type".
//! - Label selectors (`k=v`, `k==v`, `k!=v`, `k`, `!k`, `k in (a,b)`, `k notin (a,b)`),
//!   `meta.pagination` (`page`, `per_page` up to 50, `previous_page`, `next_page`, `last_page`,
//!   `total_entries`; the last two null for servers after [`FakeHetzner::hide_totals`]).
//! - Error bodies `{"error": {"code", "message", "details"}}` with the reference's codes
//!   (`unauthorized`, `not_found`, `invalid_input`, `json_error`, `uniqueness_error`, `locked`,
//!   `resource_unavailable`, `invalid_server_type`, `server_not_stopped`, `rate_limit_exceeded`).
//! - The bearer token check, and the per-project rate limit with `RateLimit-Limit`,
//!   `RateLimit-Remaining` and `RateLimit-Reset` on every answer (a token bucket refilled
//!   continuously, as Hetzner's: 3,600 an hour by default, configurable).
//!
//! ## What it does not reproduce
//! - Resources orca does not use (volumes, primary and floating IPs, load balancers, placement groups,
//!   certificates, ...), `sort`, and the ISO, rescue, rebuild and backup actions.
//! - The exact HTTP status of every error code (the reference documents codes, not a status for each);
//!   drivers must classify by code.
//! - Actions of varying length: every action runs for the same [`Options::action_time`].
//! - Eventual consistency is not something Hetzner documents; [`FakeHetzner::set_visibility_delay`]
//!   is the harness's hook for it (servers made from then on are invisible to reads and answer
//!   `not_found` to changes for a while), off by default.
//!
//! Faults on demand: a server type out of stock ([`FakeHetzner::set_no_stock`]), the next create action
//! failing ([`FakeHetzner::fail_next_create_action`], [`FakeHetzner::fail_next_create_action_with`]),
//! the next create's `start_server` failing ([`FakeHetzner::fail_next_start_after_create`]), ignored
//! shutdowns ([`FakeHetzner::ignore_shutdown`]), any status word on a server
//! ([`FakeHetzner::set_status`]), delayed visibility, and through [`Control`] 429s, 5xx, latency and
//! lost answers.

mod actions;
mod catalogue;
mod create;
mod project;
mod rate;
mod selector;
mod servers;

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

use axum::extract::Query;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};

use crate::bucket::Bucket;
use crate::control::{lock, serve, Control, Running};

pub use actions::ACTIONS_PER_READ;
pub use selector::selector_matches;

use actions::Action;
use catalogue::{ServerType, IMAGES};
use servers::Server;

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
    /// How long every action runs, on tokio's clock (a test with paused time skips it at once).
    pub action_time: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            token: DEFAULT_TOKEN.to_string(),
            rate_limit: 3600,
            refill_per_second: 1.0,
            action_time: Duration::ZERO,
        }
    }
}

#[derive(Debug)]
struct State_ {
    token: String,
    types: Vec<ServerType>,
    servers: BTreeMap<i64, Server>,
    actions: BTreeMap<i64, Action>,
    ssh_keys: Vec<(i64, String)>,
    firewalls: Vec<(i64, String)>,
    networks: Vec<(i64, String)>,
    next_id: i64,
    no_stock: HashSet<(String, String)>,
    fail_next_create: Option<(String, String)>,
    fail_next_start: Option<String>,
    ignore_shutdown: bool,
    action_time: Duration,
    visibility_delay: Duration,
    bucket: Bucket,
    rate_limited: u64,
    low_water: f64,
    /// After a listing of servers answers this page, its first server is deleted (once).
    delete_after_page: Option<i64>,
    /// Listings of servers give no `total_entries` or `last_page` ([`FakeHetzner::hide_totals`]).
    hide_totals: bool,
}

impl State_ {
    fn next(&mut self) -> i64 {
        self.next_id += 1;
        self.next_id
    }
}

type Shared = Arc<Mutex<State_>>;

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

/// A create or a rename to a name another server has.
fn name_taken() -> ApiError {
    let message = "server name is already used".into();
    ApiError(StatusCode::CONFLICT, "uniqueness_error", message)
}

/// A create of, or a change to, a type that can no longer be ordered.
fn deprecated_type(name: &str) -> ApiError {
    let message = format!("server type {name} is deprecated and can no longer be ordered");
    ApiError(
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_server_type",
        message,
    )
}

type ApiResult = Result<Response, ApiError>;

/// The time now as the API writes it (RFC 3339, whole seconds, `+00:00`).
fn rfc3339_now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, false)
}

impl FakeHetzner {
    /// Starts a fake with the default options.
    pub async fn start() -> std::io::Result<FakeHetzner> {
        Self::start_with(Options::default()).await
    }

    /// Starts a fake with `options`.
    pub async fn start_with(options: Options) -> std::io::Result<FakeHetzner> {
        let state: Shared = Arc::new(Mutex::new(State_ {
            token: options.token.clone(),
            types: catalogue::catalogue(),
            servers: BTreeMap::new(),
            actions: BTreeMap::new(),
            ssh_keys: vec![(4711, "orca-test".into())],
            firewalls: vec![(38, "orca-fw".into())],
            networks: vec![(77, "orca-net".into())],
            next_id: 1_000_000,
            no_stock: HashSet::new(),
            fail_next_create: None,
            fail_next_start: None,
            ignore_shutdown: false,
            action_time: options.action_time,
            visibility_delay: Duration::ZERO,
            bucket: Bucket::new(options.rate_limit, options.refill_per_second),
            rate_limited: 0,
            low_water: options.rate_limit as f64,
            delete_after_page: None,
            hide_totals: false,
        }));
        let router = Router::new()
            .route(
                "/v1/servers",
                get(servers::list_servers).post(create::create_server),
            )
            .route(
                "/v1/servers/{id}",
                get(servers::get_server)
                    .put(servers::update_server)
                    .delete(servers::delete_server),
            )
            .route(
                "/v1/servers/{id}/actions",
                get(actions::list_server_actions),
            )
            .route(
                "/v1/servers/{id}/actions/{command}",
                post(servers::server_action),
            )
            .route("/v1/actions", get(actions::list_actions))
            .route("/v1/actions/{id}", get(actions::get_action))
            .route("/v1/server_types", get(catalogue::list_server_types))
            .route("/v1/server_types/{id}", get(catalogue::get_server_type))
            .route("/v1/images", get(catalogue::list_images))
            .route("/v1/images/{id}", get(catalogue::get_image))
            .route("/v1/locations", get(catalogue::list_locations))
            .route("/v1/ssh_keys", get(project::list_ssh_keys))
            .route("/v1/firewalls", get(project::list_firewalls))
            .route("/v1/networks", get(project::list_networks))
            .fallback(|| async { not_found("route") })
            .layer(axum::middleware::from_fn_with_state(
                state.clone(),
                rate::guard,
            ))
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

    /// Announces the deprecation of `server_type` in every location it is offered in, from
    /// `announced` on, orderable until `unavailable_after` (both RFC 3339).
    pub fn deprecate(&self, server_type: &str, announced: &str, unavailable_after: &str) {
        let mut s = lock(&self.state);
        for t in s.types.iter_mut().filter(|t| t.name == server_type) {
            t.deprecated = Some((announced.to_string(), unavailable_after.to_string()));
        }
    }

    /// Makes every action from now on run for `time` (as [`Options::action_time`]).
    pub fn set_action_time(&self, time: Duration) {
        lock(&self.state).action_time = time;
    }

    /// Makes `server_type` out of stock in `location` (`on`), or back in stock: its
    /// `locations[].available` turns false, and creates and type changes to it there answer
    /// `resource_unavailable`.
    pub fn set_no_stock(&self, server_type: &str, location: &str, on: bool) {
        let key = (server_type.to_string(), location.to_string());
        let mut s = lock(&self.state);
        if on {
            s.no_stock.insert(key);
        } else {
            s.no_stock.remove(&key);
        }
    }

    /// Makes the next create's action end in `error` with code `action_failed` and `message` (the
    /// server stays, `off`).
    pub fn fail_next_create_action(&self, message: &str) {
        self.fail_next_create_action_with("action_failed", message);
    }

    /// Makes the next create's action end in `error` with `code` and `message` (the server stays,
    /// `off`): for example `placement_error` or `resource_unavailable`, a placement that failed after
    /// the create was accepted.
    pub fn fail_next_create_action_with(&self, code: &str, message: &str) {
        lock(&self.state).fail_next_create = Some((code.to_string(), message.to_string()));
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

    /// Sets server `id`'s `status` to any word, also one the reference does not list yet (what a
    /// status Hetzner adds later looks like to a client). False when there is no such server.
    pub fn set_status(&self, id: i64, word: &str) -> bool {
        let mut s = lock(&self.state);
        s.servers
            .get_mut(&id)
            .map(|v| v.status = word.to_string())
            .is_some()
    }

    /// Makes servers made from now on invisible to every read (`GET`, listings) for `delay` after
    /// they are made, and answers `not_found` to changes of them (update, delete, actions) until
    /// then; names stay taken. `Duration::ZERO` turns it off for new servers. The delay runs on
    /// tokio's clock, as the actions' times do, so a test with a paused clock moves it.
    pub fn set_visibility_delay(&self, delay: Duration) {
        lock(&self.state).visibility_delay = delay;
    }

    /// The next listing of servers that answers page `page` deletes the first server it lists
    /// right after, as another process's delete between two page reads would: the servers after
    /// it move a place back, onto pages already read.
    pub fn delete_after_page(&self, page: i64) {
        lock(&self.state).delete_after_page = Some(page);
    }

    /// Listings of servers answer `total_entries` and `last_page` as null, as the API may when it
    /// does not know them (its pagination schema: "can be null if unknown").
    pub fn hide_totals(&self) {
        lock(&self.state).hide_totals = true;
    }

    /// Sets the rate limit: a full bucket of `limit` requests regaining `per_second` a second.
    pub fn set_rate_limit(&self, limit: u32, per_second: f64) {
        let mut s = lock(&self.state);
        s.bucket = Bucket::new(limit, per_second);
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

    /// Adds a private network named `name` (10.x.0.0/16); answers its id.
    pub fn add_network(&self, name: &str) -> i64 {
        let mut s = lock(&self.state);
        let id = s.next();
        s.networks.push((id, name.to_string()));
        id
    }

    /// Every server as the API shows it (visible or not yet), in id order.
    pub fn servers(&self) -> Vec<Value> {
        let mut s = lock(&self.state);
        s.settle();
        s.servers.values().map(|v| s.server_json(v)).collect()
    }

    /// How many actions of `command` (`start_server`, `shutdown_server`, `stop_server`,
    /// `change_server_type`, ...) were made on server `id`, in all.
    pub fn action_count(&self, id: i64, command: &str) -> usize {
        lock(&self.state).count_actions(id, command)
    }

    /// Whether an action of server `id` runs now (the server is `locked`).
    pub fn locked(&self, id: i64) -> bool {
        let mut s = lock(&self.state);
        s.settle();
        s.locked(id)
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
        let arch = s.server_type(server_type).map_or("x86", |t| t.arch);
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
                created: rfc3339_now(),
                visible_at: Instant::now(),
                firewalls: vec![],
                networks: vec![],
                ssh_keys: vec![],
                user_data: None,
            },
        );
        id
    }
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
    paged_with(q, key, items, true, Value::clone)
}

/// One page of `items`, only that page's items shown with `show`.
fn paged_with<T>(
    q: &[(String, String)],
    key: &str,
    items: Vec<T>,
    totals: bool,
    show: impl Fn(&T) -> Value,
) -> ApiResult {
    // `key`'s value, a positive integer, or `default` without one.
    let positive = |key: &str, default: i64| match param(q, key) {
        None => Ok(default),
        Some(p) => p
            .parse::<i64>()
            .ok()
            .filter(|p| *p >= 1)
            .ok_or_else(|| invalid(format!("{key} must be a positive integer"))),
    };
    let page = positive("page", 1)?;
    let per_page = positive("per_page", 25)?.min(50);
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
            // The API may give neither when it does not know them.
            "last_page": if totals { Value::from(last) } else { Value::Null },
            "total_entries": if totals { Value::from(total) } else { Value::Null },
        }}
    });
    Ok(Json(body).into_response())
}

/// What a program hands the Hetzner driver (`orca::of_with("hetzner", ..)`) to reach `fake`: its
/// token and address, nothing else (the driver's defaults for the rest).
pub fn driver_settings(fake: &FakeHetzner) -> orca_machines::Settings {
    orca_machines::Settings::new()
        .with("HCLOUD_TOKEN", fake.token())
        .with("ORCA_HCLOUD_ENDPOINT", fake.url())
}

#[cfg(test)]
mod tests;
