//! The fake Compute Engine API: a stateful server on 127.0.0.1, written from the Compute Engine v1
//! discovery document, for orca's tests and benchmarks.
//!
//! What it keeps faithful:
//! - paths under `/compute/v1/projects/{project}/...` for instances (insert, list, get, delete, start,
//!   stop, setMachineType, setLabels), disks (get, delete), machine types (get, with `architecture`),
//!   images by family (`images.getFromFamily`, project `ubuntu-os-cloud`), zone and global operations
//!   (get and wait; `PENDING` -> `RUNNING` -> `DONE`, `DONE` with `error.errors[].code`), firewall
//!   rules (get, list, patch as a JSON merge patch) and networks (get);
//! - the error shape `{"error": {"code", "message", "errors": [{"message", "domain", "reason"}]}}`
//!   and its codes (400 `invalid`, 404 `notFound`, 409 `alreadyExists`, 412 `conditionNotMet`, 401);
//! - list `filter` (expressions `field = value`, `!=`, `:`, `field:*`, several in parentheses joined
//!   by whitespace or `AND`; `OR`, negation and the regular-expression forms answer 400),
//!   `maxResults` (0 to 500, default 500) and `pageToken`;
//! - `requestId` de-duplication: a mutating call repeated with the same id answers the first call's
//!   operation and changes nothing;
//! - the boot disk as its own resource (named as `initializeParams.diskName`, or the instance), deleted
//!   with the instance when `autoDelete` is set, refused while attached;
//! - OAuth: `POST /token` takes gcp_auth's JWT-bearer grant (the service account JSON's `token_uri`)
//!   and every API call must carry a bearer token it issued. The JWT's claims are checked (issuer,
//!   audience, scope), not its RSA signature.
//!
//! Faults on demand: a machine type without stock in a zone (`ZONE_RESOURCE_POOL_EXHAUSTED`, with the
//! boot disk left behind as a half-made create), quota (`QUOTA_EXCEEDED`), an insert whose operation
//! ends in an error after making the instance and its disk, slow operations, plus the shared
//! [`Control`] faults (429, 5xx, latency, a dropped answer after the insert was accepted).
//!
//! Self links use Compute Engine's canonical `https://www.googleapis.com/compute/v1/...` form; nothing
//! ever sends traffic there (clients build request URLs from their configured endpoint).

// Handlers answer a ready error `Response` from their checks; its size does not matter here.
#![allow(clippy::result_large_err)]

mod filter;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::control::{serve, Control, Running};
use filter::Filter;

/// The project the fake serves.
pub const PROJECT: &str = "orca-fake-project";
/// The zone the fake's catalogue is offered in (any zone name of the form `region-x` works too).
pub const ZONE: &str = "europe-west1-b";
/// The zones of the fake's project, by name (the order of aggregated listings). Every machine type
/// of [`MACHINE_TYPES`] is offered in each.
pub const ZONES: &[&str] = &[
    "europe-west1-b",
    "europe-west1-c",
    "europe-west1-d",
    "europe-west4-a",
    "us-central1-a",
    "us-central1-f",
];

fn regions() -> Vec<&'static str> {
    let mut r: Vec<&str> = ZONES.iter().map(|z| region_of(z)).collect();
    r.dedup();
    r
}

/// Now, as Compute Engine writes times: RFC 3339 with milliseconds, in the US Pacific offset its
/// answers carry (`2026-12-03T04:01:37.123-08:00`).
fn now_text() -> String {
    let pacific = chrono::FixedOffset::west_opt(8 * 3600).expect("a valid offset");
    chrono::Utc::now()
        .with_timezone(&pacific)
        .format("%Y-%m-%dT%H:%M:%S%.3f%:z")
        .to_string()
}

/// The project holding the public Ubuntu images.
pub const IMAGE_PROJECT: &str = "ubuntu-os-cloud";
/// A custom-mode network the fake has from the start, with subnet [`SUBNET`].
pub const NETWORK: &str = "orca-net";
/// The subnet of [`NETWORK`].
pub const SUBNET: &str = "orca-subnet";
/// The firewall rule the fake has from the start on [`NETWORK`] (shed's `shed-<env>-ssh` shape).
pub const SSH_RULE: &str = "shed-test-ssh";
/// A 2048-bit RSA private key (PKCS#8 PEM) generated for these tests only and published with them:
/// not a secret of anything, it signs the JWTs that gcp_auth sends to the fake's token endpoint.
pub const TEST_ONLY_RSA_KEY_PEM: &str = include_str!("gce/TEST_ONLY_NOT_A_SECRET_rsa_key.pem");
/// The service account e-mail of [`FakeGce::service_account_json`].
pub const TEST_CLIENT_EMAIL: &str = "orca-test@orca-fake-project.iam.gserviceaccount.com";

const LINK: &str = "https://www.googleapis.com/compute/v1";

/// The machine types of the fake's catalogue: name, architecture, vCPUs, memory in MB.
pub const MACHINE_TYPES: &[(&str, &str, u32, u32)] = &[
    ("e2-small", "X86_64", 2, 2048),
    ("e2-medium", "X86_64", 2, 4096),
    ("e2-standard-2", "X86_64", 2, 8192),
    ("e2-standard-8", "X86_64", 8, 32768),
    ("t2a-standard-1", "ARM64", 1, 4096),
    ("t2a-standard-2", "ARM64", 2, 8192),
    ("c4a-standard-1", "ARM64", 1, 4096),
];

/// The image families in [`IMAGE_PROJECT`]: family, image name, architecture.
pub const IMAGES: &[(&str, &str, &str)] = &[
    (
        "ubuntu-2404-lts-amd64",
        "ubuntu-2404-noble-amd64-v20251001",
        "X86_64",
    ),
    (
        "ubuntu-2404-lts-arm64",
        "ubuntu-2404-noble-arm64-v20251001",
        "ARM64",
    ),
];

type Key = (String, String);

#[derive(Debug)]
struct Op {
    value: Value,
    steps_left: u32,
    effect: Effect,
}

#[derive(Debug, Clone)]
enum Effect {
    None,
    Insert {
        key: Key,
        error: Option<(String, String, u16)>,
    },
    Start(Key),
    Stop(Key),
    Delete(Key),
    SetMachineType(Key, String),
}

#[derive(Debug, Default)]
struct World {
    next_id: u64,
    instances: BTreeMap<Key, Value>,
    disks: BTreeMap<Key, Value>,
    ops: HashMap<String, Op>,
    request_ids: HashMap<String, String>,
    firewalls: BTreeMap<String, Value>,
    networks: BTreeMap<String, Value>,
    tokens: HashSet<String>,
    token_uri: String,
    exhausted: HashMap<Key, &'static str>,
    quota_exceeded: u32,
    fail_next: Option<(String, String)>,
    op_steps: u32,
    inserts: Vec<Value>,
    early_waits: u32,
    /// Subnets by (region, name), with their network's name.
    subnets: BTreeMap<Key, String>,
    /// How long instances made from now on stay invisible (see [`FakeGce::set_visibility_delay`]).
    visibility_delay: Duration,
    /// When each instance made under a visibility delay becomes visible.
    hidden_until: HashMap<Key, Instant>,
}

type Shared = Arc<Mutex<World>>;

fn lock(s: &Shared) -> MutexGuard<'_, World> {
    s.lock().unwrap_or_else(|p| p.into_inner())
}

/// A running fake Compute Engine API; stops when dropped.
#[derive(Debug)]
pub struct FakeGce {
    running: Running,
    state: Shared,
}

impl FakeGce {
    /// Starts the fake on 127.0.0.1 with its catalogue, the networks `default` (auto mode) and
    /// [`NETWORK`] (custom mode, subnet [`SUBNET`]), and the firewall rules [`SSH_RULE`] and
    /// `default-allow-ssh`.
    pub async fn start() -> std::io::Result<FakeGce> {
        let state: Shared = Arc::new(Mutex::new(World {
            op_steps: 2,
            ..World::default()
        }));
        let control = Arc::new(Control::default());
        let api = Router::new()
            .route(
                "/compute/v1/projects/{project}/zones/{zone}/instances",
                get(list_instances).post(insert_instance),
            )
            .route(
                "/compute/v1/projects/{project}/aggregated/instances",
                get(aggregated_instances),
            )
            .route(
                "/compute/v1/projects/{project}/aggregated/machineTypes",
                get(aggregated_machine_types),
            )
            .route(
                "/compute/v1/projects/{project}/zones/{zone}/instances/{name}",
                get(get_instance).delete(delete_instance),
            )
            .route(
                "/compute/v1/projects/{project}/zones/{zone}/instances/{name}/{action}",
                post(instance_action),
            )
            .route(
                "/compute/v1/projects/{project}/zones/{zone}/disks/{name}",
                get(get_disk).delete(delete_disk),
            )
            .route(
                "/compute/v1/projects/{project}/zones/{zone}/machineTypes/{name}",
                get(get_machine_type),
            )
            .route(
                "/compute/v1/projects/{project}/zones/{zone}/operations/{name}",
                get(get_zone_op),
            )
            .route(
                "/compute/v1/projects/{project}/zones/{zone}/operations/{name}/wait",
                post(wait_zone_op),
            )
            .route(
                "/compute/v1/projects/{project}/global/operations/{name}",
                get(get_global_op),
            )
            .route(
                "/compute/v1/projects/{project}/global/operations/{name}/wait",
                post(wait_global_op),
            )
            .route(
                "/compute/v1/projects/{project}/global/images/family/{family}",
                get(image_from_family),
            )
            .route(
                "/compute/v1/projects/{project}/global/firewalls",
                get(list_firewalls),
            )
            .route(
                "/compute/v1/projects/{project}/global/firewalls/{name}",
                get(get_firewall).patch(patch_firewall),
            )
            .route(
                "/compute/v1/projects/{project}/global/networks/{name}",
                get(get_network),
            )
            .fallback(|| async { gerr(404, "notFound", "The requested URL was not found") })
            .layer(axum::middleware::from_fn_with_state(state.clone(), auth))
            .with_state(state.clone());
        let router = Router::new()
            .route("/token", post(token))
            .with_state(state.clone())
            .merge(api);
        let running = serve(router, control).await?;
        let fake = FakeGce { running, state };
        {
            let mut s = lock(&fake.state);
            s.token_uri = fake.token_uri();
        }
        fake.put_network("default", true);
        fake.put_network(NETWORK, false);
        for region in ["europe-west1", "us-central1"] {
            fake.put_subnet(region, SUBNET, NETWORK);
        }
        fake.put_firewall(json!({
            "name": SSH_RULE,
            "network": format!("{LINK}/projects/{PROJECT}/global/networks/{NETWORK}"),
            "direction": "INGRESS",
            "priority": 1000,
            "disabled": false,
            "allowed": [{"IPProtocol": "tcp", "ports": ["22"]}],
            "sourceRanges": ["203.0.113.7/32"],
            "targetTags": ["shed-test"],
        }));
        fake.put_firewall(json!({
            "name": "default-allow-ssh",
            "network": format!("{LINK}/projects/{PROJECT}/global/networks/default"),
            "direction": "INGRESS",
            "priority": 65534,
            "disabled": false,
            "allowed": [{"IPProtocol": "tcp", "ports": ["22"]}],
            "sourceRanges": ["0.0.0.0/0"],
        }));
        Ok(fake)
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        self.running.url()
    }

    /// The API root a client is pointed at: `http://127.0.0.1:PORT/compute/v1`.
    pub fn endpoint(&self) -> String {
        format!("{}/compute/v1", self.url())
    }

    /// The OAuth token endpoint (a service account JSON's `token_uri`).
    pub fn token_uri(&self) -> String {
        format!("{}/token", self.url())
    }

    /// The request log and fault rules.
    pub fn control(&self) -> &Arc<Control> {
        &self.running.control
    }

    /// A service account JSON key for project [`PROJECT`] whose `token_uri` is this fake and whose key is
    /// [`TEST_ONLY_RSA_KEY_PEM`].
    pub fn service_account_json(&self) -> String {
        json!({
            "type": "service_account",
            "project_id": PROJECT,
            "private_key_id": "0000000000000000000000000000000000000000",
            "private_key": TEST_ONLY_RSA_KEY_PEM,
            "client_email": TEST_CLIENT_EMAIL,
            "client_id": "100000000000000000000",
            "auth_uri": format!("{}/auth", self.url()),
            "token_uri": self.token_uri(),
        })
        .to_string()
    }

    /// How many access tokens the token endpoint issued.
    pub fn tokens_issued(&self) -> usize {
        lock(&self.state).tokens.len()
    }

    /// Makes `machine_type` out of stock in `zone`: inserts are accepted and their operation ends in
    /// `ZONE_RESOURCE_POOL_EXHAUSTED`, leaving the boot disk behind.
    pub fn exhaust(&self, machine_type: &str, zone: &str) {
        lock(&self.state).exhausted.insert(
            (zone.to_string(), machine_type.to_string()),
            "ZONE_RESOURCE_POOL_EXHAUSTED",
        );
    }

    /// As [`FakeGce::exhaust`], with the error code `ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS`.
    pub fn exhaust_with_details(&self, machine_type: &str, zone: &str) {
        lock(&self.state).exhausted.insert(
            (zone.to_string(), machine_type.to_string()),
            "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
        );
    }

    /// Undoes [`FakeGce::exhaust`].
    pub fn restore(&self, machine_type: &str, zone: &str) {
        lock(&self.state)
            .exhausted
            .remove(&(zone.to_string(), machine_type.to_string()));
    }

    /// The next `times` inserts end in `QUOTA_EXCEEDED` (nothing is made).
    pub fn exceed_quota(&self, times: u32) {
        lock(&self.state).quota_exceeded = times;
    }

    /// The next insert's operation ends in error `code` after making the instance (left `TERMINATED`)
    /// and its boot disk.
    pub fn fail_next_insert(&self, code: &str, message: &str) {
        lock(&self.state).fail_next = Some((code.to_string(), message.to_string()));
    }

    /// How many `operations.get` calls an operation takes to be `DONE` (default 2: `PENDING`, then
    /// `RUNNING`, then `DONE`; 0: done at once). `wait` always finishes it.
    pub fn set_operation_steps(&self, steps: u32) {
        lock(&self.state).op_steps = steps;
    }

    /// The next `times` `operations.wait` calls answer at once with the operation as it is, neither
    /// waiting nor finishing it, as the reference allows ("might return after zero seconds"; "be
    /// prepared to retry if the operation is not `DONE`").
    pub fn answer_waits_early(&self, times: u32) {
        lock(&self.state).early_waits = times;
    }

    /// The stored instance `name` in `zone`, as the API shows it.
    pub fn instance(&self, zone: &str, name: &str) -> Option<Value> {
        lock(&self.state)
            .instances
            .get(&(zone.to_string(), name.to_string()))
            .cloned()
    }

    /// The names of the instances in `zone`.
    pub fn instance_names(&self, zone: &str) -> Vec<String> {
        lock(&self.state)
            .instances
            .keys()
            .filter(|(z, _)| z == zone)
            .map(|(_, n)| n.clone())
            .collect()
    }

    /// The names of the disks in `zone`.
    pub fn disk_names(&self, zone: &str) -> Vec<String> {
        lock(&self.state)
            .disks
            .keys()
            .filter(|(z, _)| z == zone)
            .map(|(_, n)| n.clone())
            .collect()
    }

    /// The body of every accepted `instances.insert` (de-duplicated repeats excluded), in order.
    pub fn insert_bodies(&self) -> Vec<Value> {
        lock(&self.state).inserts.clone()
    }

    /// Puts a `RUNNING` instance of `machine_type` with `labels` straight into `zone`, as if someone
    /// else had made it (no request is logged).
    pub fn put_instance(&self, zone: &str, name: &str, machine_type: &str, labels: Value) {
        let mut s = lock(&self.state);
        let id = s.new_id();
        let disk = json!({"name": name, "sizeGb": "10"});
        let vm = instance_json(
            zone,
            name,
            machine_type,
            id,
            labels,
            json!({"items": []}),
            json!({}),
            json!({"items": []}),
            json!({}),
            NETWORK,
            "",
            true,
            true,
        );
        s.disks
            .insert((zone.into(), name.into()), disk_json(zone, &disk, name, id));
        let mut vm = vm;
        vm["status"] = json!("RUNNING");
        vm["lastStartTimestamp"] = json!(now_text());
        s.instances.insert((zone.into(), name.into()), vm);
    }

    /// Puts an unattached disk `name` with `labels` straight into `zone`, as if another tool (or an
    /// earlier machine whose boot disk was kept) had left it (no request is logged).
    pub fn put_disk(&self, zone: &str, name: &str, labels: Value) {
        let mut s = lock(&self.state);
        let id = s.new_id();
        let mut d = disk_json(
            zone,
            &json!({"name": name, "sizeGb": "10", "labels": labels}),
            name,
            id,
        );
        d["users"] = json!([]);
        s.disks.insert((zone.into(), name.into()), d);
    }

    /// Sets the status of a stored instance (for status mapping tests).
    pub fn set_instance_status(&self, zone: &str, name: &str, status: &str) {
        if let Some(vm) = lock(&self.state)
            .instances
            .get_mut(&(zone.to_string(), name.to_string()))
        {
            vm["status"] = json!(status);
        }
    }

    /// Adds or replaces a firewall rule (`name` and `network` required; a `network` without a scheme is
    /// taken as a network name of [`PROJECT`]).
    pub fn put_firewall(&self, mut rule: Value) {
        let name = rule["name"].as_str().unwrap_or_default().to_string();
        if let Some(n) = rule["network"].as_str() {
            if !n.starts_with("https://") {
                rule["network"] = json!(format!("{LINK}/projects/{PROJECT}/global/networks/{n}"));
            }
        }
        let mut s = lock(&self.state);
        let id = s.new_id();
        rule["kind"] = json!("compute#firewall");
        rule["id"] = json!(id.to_string());
        rule["selfLink"] = json!(format!("{LINK}/projects/{PROJECT}/global/firewalls/{name}"));
        rule["creationTimestamp"] = json!(now_text());
        s.firewalls.insert(name, rule);
    }

    /// The stored firewall rule `name`.
    pub fn firewall(&self, name: &str) -> Option<Value> {
        lock(&self.state).firewalls.get(name).cloned()
    }

    /// Adds a network (`auto_subnets`: auto mode, like a project's `default` network).
    pub fn put_network(&self, name: &str, auto_subnets: bool) {
        let mut s = lock(&self.state);
        let id = s.new_id();
        if auto_subnets {
            // Auto mode: a subnet named after the network in every region.
            for region in regions() {
                s.subnets
                    .insert((region.to_string(), name.to_string()), name.to_string());
            }
        }
        s.networks.insert(
            name.to_string(),
            json!({
                "kind": "compute#network",
                "id": id.to_string(),
                "name": name,
                "selfLink": format!("{LINK}/projects/{PROJECT}/global/networks/{name}"),
                "autoCreateSubnetworks": auto_subnets,
                "routingConfig": {"routingMode": "REGIONAL"},
                "networkFirewallPolicyEnforcementOrder": "AFTER_CLASSIC_FIREWALL",
            }),
        );
    }

    /// Adds the subnet `name` of `network` in `region` (the fake starts with [`SUBNET`] of [`NETWORK`] in
    /// `europe-west1` and `us-central1` only).
    pub fn put_subnet(&self, region: &str, name: &str, network: &str) {
        lock(&self.state)
            .subnets
            .insert((region.to_string(), name.to_string()), network.to_string());
    }

    /// Makes instances made from now on invisible to `instances.get`, `list` and `aggregatedList` for
    /// `delay` after their insert is accepted, and answers 404 to changes of them until then (a
    /// second insert of the name still meets 409); `Duration::ZERO` turns it off. Compute Engine
    /// reads its own writes; this is the eventual consistency other clouds have (EC2's), which
    /// orca's conformance suite makes every driver survive.
    pub fn set_visibility_delay(&self, delay: Duration) {
        lock(&self.state).visibility_delay = delay;
    }

    /// Puts `count` `RUNNING` instances named `{prefix}-{i}` with `labels` into `zone` at once (for
    /// benchmarks; no request is logged).
    pub fn seed_instances(
        &self,
        zone: &str,
        prefix: &str,
        count: usize,
        machine_type: &str,
        labels: Value,
    ) {
        for i in 0..count {
            self.put_instance(zone, &format!("{prefix}-{i}"), machine_type, labels.clone());
        }
    }
}

impl World {
    /// Whether instance `key` can be seen (see [`FakeGce::set_visibility_delay`]).
    fn visible(&self, key: &Key) -> bool {
        self.hidden_until
            .get(key)
            .is_none_or(|t| Instant::now() >= *t)
    }

    /// The visible instance `key`.
    fn visible_instance(&self, key: &Key) -> Option<&Value> {
        self.instances.get(key).filter(|_| self.visible(key))
    }

    fn new_id(&mut self) -> u64 {
        self.next_id += 1;
        4_000_000_000_000_000_000 + self.next_id
    }

    fn new_op(
        &mut self,
        zone: Option<&str>,
        kind: &str,
        target: String,
        effect: Effect,
        request_id: Option<&str>,
    ) -> Value {
        let id = self.new_id();
        let name = format!("operation-{id}-{}", kind.to_lowercase());
        let scope = match zone {
            Some(z) => format!("zones/{z}"),
            None => "global".into(),
        };
        let mut value = json!({
            "kind": "compute#operation",
            "id": id.to_string(),
            "name": name,
            "operationType": kind,
            "targetLink": target,
            "status": "PENDING",
            "user": TEST_CLIENT_EMAIL,
            "progress": 0,
            "insertTime": now_text(),
            "startTime": now_text(),
            "selfLink": format!("{LINK}/projects/{PROJECT}/{scope}/operations/{name}"),
        });
        if let Some(z) = zone {
            value["zone"] = json!(format!("{LINK}/projects/{PROJECT}/zones/{z}"));
        }
        if let Some(r) = request_id {
            self.request_ids.insert(r.to_string(), name.clone());
        }
        let steps = self.op_steps;
        self.ops.insert(
            name.clone(),
            Op {
                value,
                steps_left: steps,
                effect,
            },
        );
        if steps == 0 {
            self.finish(&name);
        }
        self.ops[&name].value.clone()
    }

    /// Advances an operation one step (`finish_now`: to `DONE`), applying its effect at the end.
    fn advance(&mut self, name: &str, finish_now: bool) -> Option<Value> {
        let op = self.ops.get_mut(name)?;
        if op.value["status"] != "DONE" {
            op.steps_left = op.steps_left.saturating_sub(1);
            if finish_now || op.steps_left == 0 {
                self.finish(name);
            } else {
                op.value["status"] = json!("RUNNING");
                op.value["progress"] = json!(50);
            }
        }
        Some(self.ops[name].value.clone())
    }

    fn finish(&mut self, name: &str) {
        let Some(op) = self.ops.get(name) else { return };
        let effect = op.effect.clone();
        let mut error: Option<(String, String, u16)> = None;
        match effect {
            Effect::None => {}
            Effect::Insert { key, error: e } => match e {
                Some(e) => {
                    if let Some(vm) = self.instances.get_mut(&key) {
                        vm["status"] = json!("TERMINATED");
                    }
                    error = Some(e);
                }
                None => {
                    let n = self.next_id % 250 + 1;
                    if let Some(vm) = self.instances.get_mut(&key) {
                        vm["status"] = json!("RUNNING");
                        vm["lastStartTimestamp"] = json!(now_text());
                        let nat = vm
                            .pointer_mut("/networkInterfaces/0/accessConfigs/0")
                            .and_then(Value::as_object_mut);
                        if let Some(nat) = nat {
                            nat.insert("natIP".into(), json!(format!("203.0.113.{n}")));
                        }
                    }
                }
            },
            Effect::Start(key) => {
                if let Some(vm) = self.instances.get_mut(&key) {
                    if vm["status"] != "RUNNING" {
                        vm["lastStartTimestamp"] = json!(now_text());
                    }
                    vm["status"] = json!("RUNNING");
                }
            }
            Effect::Stop(key) => {
                if let Some(vm) = self.instances.get_mut(&key) {
                    if vm["status"] != "TERMINATED" {
                        vm["lastStopTimestamp"] = json!(now_text());
                    }
                    vm["status"] = json!("TERMINATED");
                }
            }
            Effect::Delete(key) => {
                self.hidden_until.remove(&key);
                if let Some(vm) = self.instances.remove(&key) {
                    for d in vm["disks"].as_array().cloned().unwrap_or_default() {
                        let dname = last_segment(d["source"].as_str().unwrap_or_default());
                        let dkey = (key.0.clone(), dname.to_string());
                        if d["autoDelete"] == json!(true) {
                            self.disks.remove(&dkey);
                        } else if let Some(disk) = self.disks.get_mut(&dkey) {
                            disk["users"] = json!([]);
                        }
                    }
                }
            }
            Effect::SetMachineType(key, mt) => {
                if let Some(vm) = self.instances.get_mut(&key) {
                    vm["machineType"] = json!(machine_type_link(&key.0, &mt));
                }
            }
        }
        let op = self.ops.get_mut(name).expect("operation exists");
        op.value["status"] = json!("DONE");
        op.value["progress"] = json!(100);
        op.value["endTime"] = json!(now_text());
        if let Some((code, message, http)) = error {
            op.value["error"] = json!({"errors": [{"code": code, "message": message}]});
            op.value["httpErrorStatusCode"] = json!(http);
            op.value["httpErrorMessage"] = json!(match http {
                403 => "FORBIDDEN",
                503 => "SERVICE UNAVAILABLE",
                _ => "BAD REQUEST",
            });
        }
    }

    fn repeated(&self, request_id: Option<&str>) -> Option<Value> {
        let name = self.request_ids.get(request_id?)?;
        Some(self.ops.get(name)?.value.clone())
    }
}

fn last_segment(s: &str) -> &str {
    s.rsplit('/').next().unwrap_or(s)
}

fn machine_type_link(zone: &str, mt: &str) -> String {
    format!("{LINK}/projects/{PROJECT}/zones/{zone}/machineTypes/{mt}")
}

fn arch_of_type(mt: &str) -> Option<&'static str> {
    MACHINE_TYPES
        .iter()
        .find(|(n, ..)| *n == mt)
        .map(|(_, a, ..)| *a)
}

fn label_fingerprint(labels: &Value) -> String {
    // FNV-1a over the canonical JSON: opaque to clients, changes with every label change.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in labels.to_string().bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

#[allow(clippy::too_many_arguments)]
fn instance_json(
    zone: &str,
    name: &str,
    mt: &str,
    id: u64,
    labels: Value,
    tags: Value,
    scheduling: Value,
    metadata: Value,
    boot: Value,
    network: &str,
    subnet: &str,
    auto_delete: bool,
    external: bool,
) -> Value {
    let fp = label_fingerprint(&labels);
    let mut nic = json!({
        "kind": "compute#networkInterface",
        "name": "nic0",
        "network": format!("{LINK}/projects/{PROJECT}/global/networks/{network}"),
        "networkIP": format!("10.132.0.{}", id % 250 + 2),
        "stackType": "IPV4_ONLY",
    });
    if !subnet.is_empty() {
        nic["subnetwork"] = json!(format!(
            "{LINK}/projects/{PROJECT}/regions/{}/subnetworks/{subnet}",
            region_of(zone)
        ));
    }
    if external {
        nic["accessConfigs"] = json!([{"kind": "compute#accessConfig", "type": "ONE_TO_ONE_NAT", "name": "External NAT", "networkTier": "PREMIUM"}]);
    }
    let mut scheduling = scheduling;
    if scheduling.get("provisioningModel").is_none() {
        scheduling["provisioningModel"] = json!("STANDARD");
    }
    json!({
        "kind": "compute#instance",
        "id": id.to_string(),
        "creationTimestamp": now_text(),
        "name": name,
        "zone": format!("{LINK}/projects/{PROJECT}/zones/{zone}"),
        "machineType": machine_type_link(zone, mt),
        "status": "PROVISIONING",
        "labels": labels,
        "labelFingerprint": fp,
        "tags": tags,
        "metadata": metadata,
        "scheduling": scheduling,
        "disks": [{
            "kind": "compute#attachedDisk",
            "type": "PERSISTENT",
            "mode": "READ_WRITE",
            "boot": true,
            "autoDelete": auto_delete,
            "deviceName": boot.get("deviceName").cloned().unwrap_or(json!("persistent-disk-0")),
            "index": 0,
            "source": format!("{LINK}/projects/{PROJECT}/zones/{zone}/disks/{}",
                boot.get("diskName").and_then(Value::as_str).unwrap_or(name)),
            "diskSizeGb": boot.get("diskSizeGb").cloned().unwrap_or(json!("10")),
        }],
        "networkInterfaces": [nic],
        "selfLink": format!("{LINK}/projects/{PROJECT}/zones/{zone}/instances/{name}"),
        "cpuPlatform": "Unknown CPU Platform",
        "deletionProtection": false,
    })
}

fn disk_json(zone: &str, params: &Value, user: &str, id: u64) -> Value {
    let name = params
        .get("diskName")
        .and_then(Value::as_str)
        .unwrap_or(user);
    json!({
        "kind": "compute#disk",
        "id": id.to_string(),
        "name": name,
        "sizeGb": params.get("diskSizeGb").cloned().unwrap_or(json!("10")),
        "zone": format!("{LINK}/projects/{PROJECT}/zones/{zone}"),
        "status": "READY",
        "sourceImage": params.get("sourceImage").cloned().unwrap_or(Value::Null),
        "type": format!("{LINK}/projects/{PROJECT}/zones/{zone}/diskTypes/pd-balanced"),
        "labels": params.get("labels").cloned().unwrap_or(json!({})),
        "users": [format!("{LINK}/projects/{PROJECT}/zones/{zone}/instances/{user}")],
        "selfLink": format!("{LINK}/projects/{PROJECT}/zones/{zone}/disks/{name}"),
    })
}

fn region_of(zone: &str) -> &str {
    zone.rsplit_once('-').map(|(r, _)| r).unwrap_or(zone)
}

/// Compute Engine's error body.
fn gerr(code: u16, reason: &str, message: impl Into<String>) -> Response {
    let message = message.into();
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (
        status,
        Json(json!({"error": {
            "code": code,
            "message": message,
            "errors": [{"message": message, "domain": "global", "reason": reason}],
        }})),
    )
        .into_response()
}

fn not_found(what: &str) -> Response {
    gerr(
        404,
        "notFound",
        format!("The resource '{what}' was not found"),
    )
}

fn invalid(message: impl Into<String>) -> Response {
    gerr(400, "invalid", message)
}

fn check_project(project: &str) -> Result<(), Response> {
    if project == PROJECT {
        Ok(())
    } else {
        Err(not_found(&format!("projects/{project}")))
    }
}

fn check_zone(zone: &str) -> Result<(), Response> {
    if ZONES.contains(&zone) {
        Ok(())
    } else {
        Err(invalid(format!(
            "Invalid value for field 'zone': '{zone}'. Unknown zone."
        )))
    }
}

fn valid_name(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_lowercase()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && !name.ends_with('-')
}

fn valid_label_key(k: &str) -> bool {
    let b = k.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_lowercase()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-' || *c == b'_')
}

fn valid_label_value(v: &str) -> bool {
    v.len() <= 63
        && v.bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-' || c == b'_')
}

fn check_labels(labels: &Value) -> Result<(), Response> {
    let Some(map) = labels.as_object() else {
        return if labels.is_null() {
            Ok(())
        } else {
            Err(invalid("Invalid value for field 'labels'"))
        };
    };
    if map.len() > 64 {
        return Err(invalid("Too many labels (at most 64)"));
    }
    for (k, v) in map {
        let v = v.as_str().unwrap_or("\u{0}");
        if !valid_label_key(k) || !valid_label_value(v) {
            return Err(invalid(format!(
                "Invalid value for field 'labels': '{k}'. Label keys and values must be lowercase letters, digits, '-' and '_'"
            )));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// OAuth

async fn auth(State(state): State<Shared>, req: Request, next: Next) -> Response {
    let token = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_string);
    let known = token.is_some_and(|t| lock(&state).tokens.contains(&t));
    if !known {
        let message = "Request is missing required authentication credential. Expected OAuth 2 access token, login cookie or other valid authentication credential.";
        let mut r = gerr(401, "required", message);
        r.headers_mut().insert(
            "www-authenticate",
            axum::http::HeaderValue::from_static("Bearer realm=\"https://accounts.google.com/\""),
        );
        return r;
    }
    next.run(req).await
}

#[derive(Deserialize)]
struct TokenForm {
    grant_type: Option<String>,
    assertion: Option<String>,
}

fn oauth_error(error: &str, description: &str) -> Response {
    (
        StatusCode::BAD_REQUEST,
        Json(json!({"error": error, "error_description": description})),
    )
        .into_response()
}

async fn token(State(state): State<Shared>, body: Bytes) -> Response {
    let Ok(form) = serde_urlencoded_form(&body) else {
        return oauth_error("invalid_request", "a form body is required");
    };
    if form.grant_type.as_deref() != Some("urn:ietf:params:oauth:grant-type:jwt-bearer") {
        return oauth_error("unsupported_grant_type", "Invalid grant_type");
    }
    let Some(assertion) = form.assertion else {
        return oauth_error("invalid_request", "Missing required parameter: assertion");
    };
    let parts: Vec<&str> = assertion.split('.').collect();
    let claims = (parts.len() == 3)
        .then(|| base64url_decode(parts[1]))
        .flatten()
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok());
    let Some(claims) = claims else {
        return oauth_error("invalid_grant", "Invalid JWT: malformed");
    };
    let mut s = lock(&state);
    if claims["aud"].as_str() != Some(s.token_uri.as_str()) {
        return oauth_error(
            "invalid_grant",
            "Invalid JWT: Token must be a short-lived token and in a reasonable timeframe",
        );
    }
    if claims["iss"].as_str().unwrap_or_default().is_empty() {
        return oauth_error("invalid_grant", "Invalid JWT: no issuer");
    }
    let scope = claims["scope"].as_str().unwrap_or_default();
    if !scope.contains("auth/compute") && !scope.contains("auth/cloud-platform") {
        return oauth_error("invalid_scope", "Invalid OAuth scope or ID token audience");
    }
    let id = s.new_id();
    let token = format!("ya29.fake-{id}");
    s.tokens.insert(token.clone());
    Json(json!({"access_token": token, "expires_in": 3599, "token_type": "Bearer"})).into_response()
}

fn serde_urlencoded_form(body: &[u8]) -> Result<TokenForm, ()> {
    let text = std::str::from_utf8(body).map_err(|_| ())?;
    let mut form = TokenForm {
        grant_type: None,
        assertion: None,
    };
    for (k, v) in crate::control::form_pairs(text.as_bytes()) {
        match k.as_str() {
            "grant_type" => form.grant_type = Some(v),
            "assertion" => form.assertion = Some(v),
            _ => {}
        }
    }
    Ok(form)
}

fn base64url_decode(s: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in s.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'-' | b'+' => 62,
            b'_' | b'/' => 63,
            b'=' => break,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

// ---------------------------------------------------------------------------------------------
// Instances

#[derive(Deserialize)]
struct ListQuery {
    filter: Option<String>,
    #[serde(rename = "maxResults")]
    max_results: Option<String>,
    #[serde(rename = "pageToken")]
    page_token: Option<String>,
}

#[derive(Deserialize)]
struct MutateQuery {
    #[serde(rename = "requestId")]
    request_id: Option<String>,
}

fn check_request_id(r: &Option<String>) -> Result<(), Response> {
    let Some(r) = r else { return Ok(()) };
    let b = r.as_bytes();
    let shape = b.len() == 36
        && b.iter().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => *c == b'-',
            _ => c.is_ascii_hexdigit(),
        });
    if !shape || r == "00000000-0000-0000-0000-000000000000" {
        return Err(invalid(format!(
            "Invalid value for field 'requestId': '{r}'. The request ID must be a valid UUID with the exception that zero UUID is not supported (00000000-0000-0000-0000-000000000000)."
        )));
    }
    Ok(())
}

/// The window `start..end` of `len` items (already filtered and ordered) that `maxResults` and
/// `pageToken` ask for.
fn window(len: usize, q: &ListQuery) -> Result<(usize, usize), Response> {
    let max = match q.max_results.as_deref().map(str::parse::<u32>) {
        None => 500,
        Some(Ok(n)) if n <= 500 => {
            if n == 0 {
                500
            } else {
                n as usize
            }
        }
        Some(_) => {
            return Err(invalid(
                "Invalid value for field 'maxResults': must be between 0 and 500, inclusive",
            ))
        }
    } as usize;
    let start = match q.page_token.as_deref().filter(|t| !t.is_empty()) {
        None => 0,
        Some(t) => match t.strip_prefix("pt1.").and_then(|n| n.parse::<usize>().ok()) {
            Some(n) if n <= len => n,
            _ => return Err(invalid("Invalid value for field 'pageToken'")),
        },
    };
    Ok((start, (start + max).min(len)))
}

/// One page of `items` (already filtered and ordered) for `maxResults` and `pageToken`.
fn page(items: Vec<Value>, q: &ListQuery, kind: &str, self_link: String) -> Response {
    let (start, end) = match window(items.len(), q) {
        Ok(w) => w,
        Err(r) => return r,
    };
    let mut body = json!({
        "kind": kind,
        "id": self_link.clone(),
        "selfLink": self_link,
    });
    if end > start {
        body["items"] = json!(items[start..end].to_vec());
    }
    if end < items.len() {
        body["nextPageToken"] = json!(format!("pt1.{end}"));
    }
    Json(body).into_response()
}

async fn list_instances(
    State(state): State<Shared>,
    Path((project, zone)): Path<(String, String)>,
    Query(q): Query<ListQuery>,
) -> Response {
    if let Err(r) = check_project(&project).and(check_zone(&zone)) {
        return r;
    }
    let filter = match Filter::parse(q.filter.as_deref().unwrap_or("")) {
        Ok(f) => f,
        Err(e) => return invalid(format!("Invalid value for field 'filter': {e}")),
    };
    let s = lock(&state);
    let items: Vec<Value> = s
        .instances
        .iter()
        .filter(|(k, vm)| k.0 == zone && s.visible(k) && filter.matches(vm))
        .map(|(_, vm)| vm.clone())
        .collect();
    page(
        items,
        &q,
        "compute#instanceList",
        format!("{LINK}/projects/{PROJECT}/zones/{zone}/instances"),
    )
}

/// One page of an aggregated list: `items` are (zone, resource) pairs in zone order; the page holds
/// every zone of the project as the scope `zones/<zone>`, with its resources of this page under
/// `field`, or a `NO_RESULTS_ON_PAGE` warning.
fn aggregated_page(
    items: Vec<(String, Value)>,
    q: &ListQuery,
    kind: &str,
    field: &str,
    self_link: String,
) -> Response {
    let (start, end) = match window(items.len(), q) {
        Ok(w) => w,
        Err(r) => return r,
    };
    let on_page = &items[start..end];
    let mut scopes = serde_json::Map::new();
    for zone in ZONES {
        let scope = format!("zones/{zone}");
        let here: Vec<Value> = on_page
            .iter()
            .filter(|(z, _)| z == zone)
            .map(|(_, v)| v.clone())
            .collect();
        let entry = if here.is_empty() {
            json!({"warning": {
                "code": "NO_RESULTS_ON_PAGE",
                "message": format!("There are no results for scope '{scope}' on this page."),
                "data": [{"key": "scope", "value": scope}],
            }})
        } else {
            json!({ field: here })
        };
        scopes.insert(scope, entry);
    }
    let mut body = json!({
        "kind": kind,
        "id": self_link.trim_start_matches(&format!("{LINK}/")),
        "items": scopes,
        "selfLink": self_link,
    });
    if end < items.len() {
        body["nextPageToken"] = json!(format!("pt1.{end}"));
    }
    Json(body).into_response()
}

async fn aggregated_instances(
    State(state): State<Shared>,
    Path(project): Path<String>,
    Query(q): Query<ListQuery>,
) -> Response {
    if let Err(r) = check_project(&project) {
        return r;
    }
    let filter = match Filter::parse(q.filter.as_deref().unwrap_or("")) {
        Ok(f) => f,
        Err(e) => return invalid(format!("Invalid value for field 'filter': {e}")),
    };
    let s = lock(&state);
    let items: Vec<(String, Value)> = s
        .instances
        .iter()
        .filter(|(k, vm)| s.visible(k) && filter.matches(vm))
        .map(|(k, vm)| (k.0.clone(), vm.clone()))
        .collect();
    aggregated_page(
        items,
        &q,
        "compute#instanceAggregatedList",
        "instances",
        format!("{LINK}/projects/{PROJECT}/aggregated/instances"),
    )
}

async fn aggregated_machine_types(
    Path(project): Path<String>,
    Query(q): Query<ListQuery>,
) -> Response {
    if let Err(r) = check_project(&project) {
        return r;
    }
    let filter = match Filter::parse(q.filter.as_deref().unwrap_or("")) {
        Ok(f) => f,
        Err(e) => return invalid(format!("Invalid value for field 'filter': {e}")),
    };
    let items: Vec<(String, Value)> = ZONES
        .iter()
        .flat_map(|z| {
            MACHINE_TYPES
                .iter()
                .map(move |t| (z.to_string(), machine_type_json(z, t)))
        })
        .filter(|(_, t)| filter.matches(t))
        .collect();
    aggregated_page(
        items,
        &q,
        "compute#machineTypeAggregatedList",
        "machineTypes",
        format!("{LINK}/projects/{PROJECT}/aggregated/machineTypes"),
    )
}

async fn get_instance(
    State(state): State<Shared>,
    Path((project, zone, name)): Path<(String, String, String)>,
) -> Response {
    if let Err(r) = check_project(&project).and(check_zone(&zone)) {
        return r;
    }
    match lock(&state).visible_instance(&(zone.clone(), name.clone())) {
        Some(vm) => Json(vm.clone()).into_response(),
        None => not_found(&format!("projects/{project}/zones/{zone}/instances/{name}")),
    }
}

fn resolve_image(source: &str) -> Option<(&'static str, &'static str)> {
    // projects/ubuntu-os-cloud/global/images/family/<family> or .../images/<name>, full URL or partial.
    let path = source
        .strip_prefix(LINK)
        .or_else(|| source.strip_prefix("https://compute.googleapis.com/compute/v1"))
        .unwrap_or(source)
        .trim_start_matches('/');
    let rest = path.strip_prefix(&format!("projects/{IMAGE_PROJECT}/global/images/"))?;
    IMAGES.iter().find_map(|(family, image, arch)| {
        (rest == format!("family/{family}") || rest == *image).then_some((*image, *arch))
    })
}

async fn insert_instance(
    State(state): State<Shared>,
    Path((project, zone)): Path<(String, String)>,
    Query(q): Query<MutateQuery>,
    body: Bytes,
) -> Response {
    if let Err(r) = check_project(&project)
        .and(check_zone(&zone))
        .and(check_request_id(&q.request_id))
    {
        return r;
    }
    let mut s = lock(&state);
    if let Some(op) = s.repeated(q.request_id.as_deref()) {
        return Json(op).into_response();
    }
    let Ok(vm) = serde_json::from_slice::<Value>(&body) else {
        return invalid("Invalid JSON payload received.");
    };
    let name = vm["name"].as_str().unwrap_or_default().to_string();
    if !valid_name(&name) {
        return invalid(format!(
            "Invalid value for field 'resource.name': '{name}'. Must be a match of regex '(?:[a-z](?:[-a-z0-9]{{0,61}}[a-z0-9])?)'"
        ));
    }
    let key = (zone.clone(), name.clone());
    if s.instances.contains_key(&key) {
        return gerr(
            409,
            "alreadyExists",
            format!(
                "The resource 'projects/{project}/zones/{zone}/instances/{name}' already exists"
            ),
        );
    }
    let mt_field = vm["machineType"].as_str().unwrap_or_default();
    let mt = last_segment(mt_field).to_string();
    if !mt_field.contains(&format!("zones/{zone}/machineTypes/")) {
        return invalid(format!(
            "Invalid value for field 'resource.machineType': '{mt_field}'. Machine type must be in zone {zone}"
        ));
    }
    let Some(type_arch) = arch_of_type(&mt) else {
        return invalid(format!(
            "Invalid value for field 'resource.machineType': '{mt_field}'. Machine type with name '{mt}' does not exist in zone '{zone}'."
        ));
    };
    if let Err(r) = check_labels(&vm["labels"]) {
        return r;
    }
    for field in ["metadata", "tags", "scheduling", "labels"] {
        if !(vm[field].is_null() || vm[field].is_object()) {
            return invalid(format!("Invalid value for field 'resource.{field}'"));
        }
    }
    let disks = vm["disks"].as_array().cloned().unwrap_or_default();
    let boots: Vec<&Value> = disks.iter().filter(|d| d["boot"] == json!(true)).collect();
    if boots.len() != 1 || disks.len() != 1 {
        return invalid("Invalid value for field 'resource.disks': exactly one boot disk is supported by the fake");
    }
    let boot = boots[0];
    let params = boot["initializeParams"].clone();
    let source = params["sourceImage"].as_str().unwrap_or_default();
    let Some((_, image_arch)) = resolve_image(source) else {
        return not_found(source);
    };
    if image_arch != type_arch {
        return invalid(format!(
            "Invalid value for field 'resource.disks[0].initializeParams.sourceImage': '{source}'. The architecture of the image ({image_arch}) does not match the machine type {mt} ({type_arch})."
        ));
    }
    let size: u64 = match &params["diskSizeGb"] {
        Value::Null => 10,
        Value::String(t) => t.parse().unwrap_or(0),
        Value::Number(n) => n.as_u64().unwrap_or(0),
        _ => 0,
    };
    if !(10..=65536).contains(&size) {
        return invalid(format!(
            "Invalid value for field 'resource.disks[0].initializeParams.diskSizeGb': '{size}'. Disk size must be at least 10 GB"
        ));
    }
    let disk_name = params["diskName"].as_str().unwrap_or(&name).to_string();
    if s.disks.contains_key(&(zone.clone(), disk_name.clone())) {
        return gerr(
            409,
            "alreadyExists",
            format!(
                "The resource 'projects/{project}/zones/{zone}/disks/{disk_name}' already exists"
            ),
        );
    }
    let scheduling = vm["scheduling"].clone();
    if scheduling.get("maxRunDuration").is_some() {
        let secs: i64 = scheduling["maxRunDuration"]["seconds"]
            .as_str()
            .and_then(|t| t.parse().ok())
            .or_else(|| scheduling["maxRunDuration"]["seconds"].as_i64())
            .unwrap_or(-1);
        if secs < 30 {
            return invalid(
                "Invalid value for field 'resource.scheduling.maxRunDuration': at least 30 seconds",
            );
        }
        if scheduling["instanceTerminationAction"].as_str().is_none() {
            return invalid("Invalid value for field 'resource.scheduling.instanceTerminationAction': required with maxRunDuration");
        }
    }
    let nic = &vm["networkInterfaces"][0];
    let network = last_segment(nic["network"].as_str().unwrap_or("default")).to_string();
    if !s.networks.contains_key(&network) {
        return not_found(&format!("projects/{project}/global/networks/{network}"));
    }
    let auto_mode = s.networks[&network]["autoCreateSubnetworks"] == json!(true);
    let region = region_of(&zone).to_string();
    let subnet = match nic["subnetwork"].as_str() {
        Some(link) => {
            let name = last_segment(link).to_string();
            let in_region = link
                .split("/regions/")
                .nth(1)
                .and_then(|r| r.split('/').next())
                .unwrap_or_default();
            if in_region != region {
                return invalid(format!(
                    "Invalid value for field 'resource.networkInterfaces[0].subnetwork': '{link}'. Subnetwork must be in the same region as the instance ({region})."
                ));
            }
            if s.subnets.get(&(region.clone(), name.clone())) != Some(&network) {
                return not_found(&format!(
                    "projects/{project}/regions/{region}/subnetworks/{name}"
                ));
            }
            name
        }
        None if auto_mode => network.clone(),
        None => {
            return invalid(format!(
                "Invalid value for field 'resource.networkInterfaces[0]': ''. Subnetwork should be specified for custom subnetmode network '{network}'."
            ))
        }
    };
    let hostname = vm["hostname"].as_str().map(str::to_string);
    let external = nic["accessConfigs"]
        .as_array()
        .is_some_and(|a| !a.is_empty());
    if let Some(items) = vm["tags"]["items"].as_array() {
        if items.iter().any(|t| !valid_name(t.as_str().unwrap_or(""))) {
            return invalid(
                "Invalid value for field 'resource.tags.items': tags must comply with RFC1035",
            );
        }
    }
    s.inserts.push(vm.clone());

    // The outcome, decided now: quota refuses everything, no stock leaves the boot disk, a failing
    // operation leaves the instance and the disk.
    let target = format!("{LINK}/projects/{PROJECT}/zones/{zone}/instances/{name}");
    let mut metadata = vm["metadata"].clone();
    if metadata.is_null() {
        metadata = json!({});
    }
    metadata["kind"] = json!("compute#metadata");
    metadata["fingerprint"] = json!("fp-meta-1");
    let mut tags = vm["tags"].clone();
    if tags.is_null() {
        tags = json!({});
    }
    tags["fingerprint"] = json!("fp-tags-1");
    let labels = if vm["labels"].is_null() {
        json!({})
    } else {
        vm["labels"].clone()
    };
    let auto_delete = boot["autoDelete"] != json!(false);
    let mut boot_info = params.clone();
    boot_info["diskName"] = json!(disk_name);
    if let Some(d) = boot.get("deviceName") {
        boot_info["deviceName"] = d.clone();
    }
    let id = s.new_id();
    let make_vm = |s: &mut World| {
        let mut vm = instance_json(
            &zone,
            &name,
            &mt,
            id,
            labels.clone(),
            tags.clone(),
            scheduling.clone(),
            metadata.clone(),
            boot_info.clone(),
            &network,
            &subnet,
            auto_delete,
            external,
        );
        if let Some(h) = &hostname {
            vm["hostname"] = json!(h);
        }
        s.instances.insert(key.clone(), vm);
        if !s.visibility_delay.is_zero() {
            let until = Instant::now() + s.visibility_delay;
            s.hidden_until.insert(key.clone(), until);
        }
    };
    let make_disk = |s: &mut World| {
        let d = disk_json(&zone, &boot_info, &name, id);
        s.disks.insert((zone.clone(), disk_name.clone()), d);
    };
    let error = if s.quota_exceeded > 0 {
        s.quota_exceeded -= 1;
        Some((
            "QUOTA_EXCEEDED".to_string(),
            format!(
                "Quota 'CPUS' exceeded.  Limit: 8.0 in region {}.",
                region_of(&zone)
            ),
            403,
        ))
    } else if let Some(code) = s.exhausted.get(&(zone.clone(), mt.clone())).copied() {
        // The boot disk was made before the zone found no room for the instance: it has no user.
        make_disk(&mut s);
        if let Some(d) = s.disks.get_mut(&(zone.clone(), disk_name.clone())) {
            d["users"] = json!([]);
        }
        Some((
            code.to_string(),
            format!("The zone 'projects/{project}/zones/{zone}' does not have enough resources available to fulfill the request.  Try a different zone, or try again later."),
            503,
        ))
    } else if let Some((code, message)) = s.fail_next.take() {
        make_disk(&mut s);
        make_vm(&mut s);
        Some((code, message, 400))
    } else {
        make_disk(&mut s);
        make_vm(&mut s);
        None
    };
    let mut op = s.new_op(
        Some(&zone),
        "insert",
        target,
        Effect::Insert {
            key: key.clone(),
            error,
        },
        q.request_id.as_deref(),
    );
    // `targetId`: the incarnation of the instance this insert is about.
    op["targetId"] = json!(id.to_string());
    if let Some(o) = op["name"].as_str().and_then(|n| s.ops.get_mut(n)) {
        o.value["targetId"] = json!(id.to_string());
    }
    Json(op).into_response()
}

async fn delete_instance(
    State(state): State<Shared>,
    Path((project, zone, name)): Path<(String, String, String)>,
    Query(q): Query<MutateQuery>,
) -> Response {
    if let Err(r) = check_project(&project).and(check_request_id(&q.request_id)) {
        return r;
    }
    let mut s = lock(&state);
    if let Some(op) = s.repeated(q.request_id.as_deref()) {
        return Json(op).into_response();
    }
    let key = (zone.clone(), name.clone());
    if s.visible_instance(&key).is_none() {
        return not_found(&format!("projects/{project}/zones/{zone}/instances/{name}"));
    }
    let vm = s.instances.get_mut(&key).expect("visible");
    vm["status"] = json!("STOPPING");
    let target = format!("{LINK}/projects/{PROJECT}/zones/{zone}/instances/{name}");
    let op = s.new_op(
        Some(&zone),
        "delete",
        target,
        Effect::Delete(key),
        q.request_id.as_deref(),
    );
    Json(op).into_response()
}

async fn instance_action(
    State(state): State<Shared>,
    Path((project, zone, name, action)): Path<(String, String, String, String)>,
    Query(q): Query<MutateQuery>,
    body: Bytes,
) -> Response {
    if let Err(r) = check_project(&project).and(check_request_id(&q.request_id)) {
        return r;
    }
    let mut s = lock(&state);
    if let Some(op) = s.repeated(q.request_id.as_deref()) {
        return Json(op).into_response();
    }
    let key = (zone.clone(), name.clone());
    let target = format!("{LINK}/projects/{PROJECT}/zones/{zone}/instances/{name}");
    let Some(vm) = s.visible_instance(&key).cloned() else {
        return not_found(&format!("projects/{project}/zones/{zone}/instances/{name}"));
    };
    let status = vm["status"].as_str().unwrap_or_default().to_string();
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let effect = match action.as_str() {
        "start" => {
            if status == "TERMINATED" {
                s.instances.get_mut(&key).expect("exists")["status"] = json!("STAGING");
            }
            Effect::Start(key)
        }
        "stop" => {
            if status != "TERMINATED" {
                s.instances.get_mut(&key).expect("exists")["status"] = json!("STOPPING");
            }
            Effect::Stop(key)
        }
        "setMachineType" => {
            let mt_field = body["machineType"].as_str().unwrap_or_default();
            let mt = last_segment(mt_field).to_string();
            let (Some(new_arch), Some(old_arch)) = (
                arch_of_type(&mt),
                arch_of_type(last_segment(vm["machineType"].as_str().unwrap_or_default())),
            ) else {
                return invalid(format!(
                    "Invalid value for field 'machineType': '{mt_field}'. Machine type with name '{mt}' does not exist in zone '{zone}'."
                ));
            };
            if status != "TERMINATED" {
                return gerr(
                    400,
                    "resourceNotReady",
                    format!("The resource 'projects/{project}/zones/{zone}/instances/{name}' is not ready: Instance must be stopped to change its machine type"),
                );
            }
            if new_arch != old_arch {
                return invalid(format!(
                    "Invalid value for field 'machineType': '{mt}'. The architecture of the boot disk does not match the machine type"
                ));
            }
            Effect::SetMachineType(key, mt)
        }
        "setLabels" => {
            let fp = body["labelFingerprint"].as_str().unwrap_or_default();
            if fp != vm["labelFingerprint"].as_str().unwrap_or_default() {
                return gerr(
                    412,
                    "conditionNotMet",
                    "Labels fingerprint either invalid or resource labels have changed",
                );
            }
            let labels = if body["labels"].is_null() {
                json!({})
            } else {
                body["labels"].clone()
            };
            if let Err(r) = check_labels(&labels) {
                return r;
            }
            let vm = s.instances.get_mut(&key).expect("exists");
            vm["labelFingerprint"] = json!(label_fingerprint(&labels));
            vm["labels"] = labels;
            Effect::None
        }
        other => return gerr(404, "notFound", format!("Unknown method '{other}'")),
    };
    let op = s.new_op(
        Some(&zone),
        &action,
        target,
        effect,
        q.request_id.as_deref(),
    );
    Json(op).into_response()
}

// ---------------------------------------------------------------------------------------------
// Disks, machine types, images

async fn get_disk(
    State(state): State<Shared>,
    Path((project, zone, name)): Path<(String, String, String)>,
) -> Response {
    if let Err(r) = check_project(&project) {
        return r;
    }
    match lock(&state).disks.get(&(zone.clone(), name.clone())) {
        Some(d) => Json(d.clone()).into_response(),
        None => not_found(&format!("projects/{project}/zones/{zone}/disks/{name}")),
    }
}

async fn delete_disk(
    State(state): State<Shared>,
    Path((project, zone, name)): Path<(String, String, String)>,
    Query(q): Query<MutateQuery>,
) -> Response {
    if let Err(r) = check_project(&project).and(check_request_id(&q.request_id)) {
        return r;
    }
    let mut s = lock(&state);
    if let Some(op) = s.repeated(q.request_id.as_deref()) {
        return Json(op).into_response();
    }
    let key = (zone.clone(), name.clone());
    let Some(disk) = s.disks.get(&key) else {
        return not_found(&format!("projects/{project}/zones/{zone}/disks/{name}"));
    };
    let users: Vec<String> = disk["users"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .filter_map(|u| u.as_str().map(str::to_string))
        .filter(|u| {
            s.instances
                .contains_key(&(zone.clone(), last_segment(u).to_string()))
        })
        .collect();
    if let Some(user) = users.first() {
        return gerr(
            400,
            "resourceInUseByAnotherResource",
            format!("The disk resource 'projects/{project}/zones/{zone}/disks/{name}' is already being used by '{}'", user.trim_start_matches(&format!("{LINK}/"))),
        );
    }
    s.disks.remove(&key);
    let target = format!("{LINK}/projects/{PROJECT}/zones/{zone}/disks/{name}");
    let op = s.new_op(
        Some(&zone),
        "delete",
        target,
        Effect::None,
        q.request_id.as_deref(),
    );
    Json(op).into_response()
}

async fn get_machine_type(Path((project, zone, name)): Path<(String, String, String)>) -> Response {
    if let Err(r) = check_project(&project).and(check_zone(&zone)) {
        return r;
    }
    match MACHINE_TYPES.iter().find(|(n, ..)| *n == name) {
        Some(t) => Json(machine_type_json(&zone, t)).into_response(),
        None => not_found(&format!(
            "projects/{project}/zones/{zone}/machineTypes/{name}"
        )),
    }
}

fn machine_type_json(zone: &str, (n, arch, cpus, mem): &(&str, &str, u32, u32)) -> Value {
    json!({
        "kind": "compute#machineType",
        "id": "1000",
        "creationTimestamp": "1969-12-31T16:00:00.000-08:00",
        "name": n,
        "description": format!("{cpus} vCPUs, {} GB RAM", mem / 1024),
        "guestCpus": cpus,
        "memoryMb": mem,
        "imageSpaceGb": 0,
        "maximumPersistentDisks": 128,
        "maximumPersistentDisksSizeGb": "263168",
        "zone": zone,
        "isSharedCpu": n.starts_with("e2-small") || n.starts_with("e2-medium"),
        "architecture": arch,
        "selfLink": machine_type_link(zone, n),
    })
}

async fn image_from_family(Path((project, family)): Path<(String, String)>) -> Response {
    let found = IMAGES
        .iter()
        .find(|(f, ..)| project == IMAGE_PROJECT && *f == family);
    match found {
        Some((f, image, arch)) => Json(json!({
            "kind": "compute#image",
            "id": "2000",
            "name": image,
            "family": f,
            "architecture": arch,
            "status": "READY",
            "diskSizeGb": "10",
            "sourceType": "RAW",
            "selfLink": format!("{LINK}/projects/{IMAGE_PROJECT}/global/images/{image}"),
        }))
        .into_response(),
        None => not_found(&format!("projects/{project}/global/images/family/{family}")),
    }
}

// ---------------------------------------------------------------------------------------------
// Operations

async fn get_zone_op(
    State(state): State<Shared>,
    Path((project, zone, name)): Path<(String, String, String)>,
) -> Response {
    op_answer(&state, &project, &format!("zones/{zone}"), &name, false)
}

async fn wait_zone_op(
    State(state): State<Shared>,
    Path((project, zone, name)): Path<(String, String, String)>,
) -> Response {
    op_answer(&state, &project, &format!("zones/{zone}"), &name, true)
}

async fn get_global_op(
    State(state): State<Shared>,
    Path((project, name)): Path<(String, String)>,
) -> Response {
    op_answer(&state, &project, "global", &name, false)
}

async fn wait_global_op(
    State(state): State<Shared>,
    Path((project, name)): Path<(String, String)>,
) -> Response {
    op_answer(&state, &project, "global", &name, true)
}

fn op_answer(state: &Shared, project: &str, scope: &str, name: &str, wait: bool) -> Response {
    if let Err(r) = check_project(project) {
        return r;
    }
    let mut s = lock(state);
    let in_scope = s.ops.get(name).is_some_and(|op| {
        let link = op.value["selfLink"].as_str().unwrap_or_default();
        link.contains(&format!("/{scope}/operations/"))
    });
    if !in_scope {
        return not_found(&format!("projects/{project}/{scope}/operations/{name}"));
    }
    if wait && s.early_waits > 0 {
        s.early_waits -= 1;
        return Json(s.ops[name].value.clone()).into_response();
    }
    match s.advance(name, wait) {
        Some(op) => Json(op).into_response(),
        None => not_found(&format!("projects/{project}/{scope}/operations/{name}")),
    }
}

// ---------------------------------------------------------------------------------------------
// Firewalls and networks

async fn list_firewalls(
    State(state): State<Shared>,
    Path(project): Path<String>,
    Query(q): Query<ListQuery>,
) -> Response {
    if let Err(r) = check_project(&project) {
        return r;
    }
    let filter = match Filter::parse(q.filter.as_deref().unwrap_or("")) {
        Ok(f) => f,
        Err(e) => return invalid(format!("Invalid value for field 'filter': {e}")),
    };
    let items: Vec<Value> = lock(&state)
        .firewalls
        .values()
        .filter(|f| filter.matches(f))
        .cloned()
        .collect();
    page(
        items,
        &q,
        "compute#firewallList",
        format!("{LINK}/projects/{PROJECT}/global/firewalls"),
    )
}

async fn get_firewall(
    State(state): State<Shared>,
    Path((project, name)): Path<(String, String)>,
) -> Response {
    if let Err(r) = check_project(&project) {
        return r;
    }
    match lock(&state).firewalls.get(&name) {
        Some(f) => Json(f.clone()).into_response(),
        None => not_found(&format!("projects/{project}/global/firewalls/{name}")),
    }
}

fn merge_patch(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(p) => {
            if !target.is_object() {
                *target = json!({});
            }
            let t = target.as_object_mut().expect("object");
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        other => *target = other.clone(),
    }
}

fn valid_ipv4_cidr(s: &str) -> bool {
    let (ip, len) = s.split_once('/').unwrap_or((s, "32"));
    let octets: Vec<&str> = ip.split('.').collect();
    octets.len() == 4
        && octets.iter().all(|o| o.parse::<u8>().is_ok())
        && len.parse::<u8>().is_ok_and(|l| l <= 32)
}

async fn patch_firewall(
    State(state): State<Shared>,
    Path((project, name)): Path<(String, String)>,
    Query(q): Query<MutateQuery>,
    body: Bytes,
) -> Response {
    if let Err(r) = check_project(&project).and(check_request_id(&q.request_id)) {
        return r;
    }
    let mut s = lock(&state);
    if let Some(op) = s.repeated(q.request_id.as_deref()) {
        return Json(op).into_response();
    }
    let Ok(patch) = serde_json::from_slice::<Value>(&body) else {
        return invalid("Invalid JSON payload received.");
    };
    let Some(current) = s.firewalls.get(&name).cloned() else {
        return not_found(&format!("projects/{project}/global/firewalls/{name}"));
    };
    if patch
        .get("name")
        .is_some_and(|n| n.as_str() != Some(name.as_str()))
    {
        return invalid("Invalid value for field 'resource.name': the name cannot be changed");
    }
    if let Some(ranges) = patch.get("sourceRanges") {
        let ok = ranges
            .as_array()
            .is_some_and(|a| a.iter().all(|r| r.as_str().is_some_and(valid_ipv4_cidr)));
        if !ok {
            return invalid("Invalid value for field 'resource.sourceRanges'");
        }
    }
    let mut updated = current;
    merge_patch(&mut updated, &patch);
    s.firewalls.insert(name.clone(), updated);
    let target = format!("{LINK}/projects/{PROJECT}/global/firewalls/{name}");
    let op = s.new_op(None, "patch", target, Effect::None, q.request_id.as_deref());
    Json(op).into_response()
}

async fn get_network(
    State(state): State<Shared>,
    Path((project, name)): Path<(String, String)>,
    _headers: HeaderMap,
) -> Response {
    if let Err(r) = check_project(&project) {
        return r;
    }
    let s = lock(&state);
    let Some(n) = s.networks.get(&name) else {
        return not_found(&format!("projects/{project}/global/networks/{name}"));
    };
    let mut n = n.clone();
    n["subnetworks"] = json!(s
        .subnets
        .iter()
        .filter(|(_, net)| **net == name)
        .map(|((region, sub), _)| format!(
            "{LINK}/projects/{PROJECT}/regions/{region}/subnetworks/{sub}"
        ))
        .collect::<Vec<_>>());
    Json(n).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes() {
        assert_eq!(base64url_decode("eyJhIjoxfQ").unwrap(), br#"{"a":1}"#);
        assert_eq!(
            crate::control::form_pairs(b"f=a%3Ab+c"),
            [("f".to_string(), "a:b c".to_string())]
        );
        assert!(valid_ipv4_cidr("203.0.113.7/32"));
        assert!(!valid_ipv4_cidr("203.0.113/32"));
        assert_eq!(region_of("europe-west1-b"), "europe-west1");
    }

    #[tokio::test]
    async fn api_calls_need_a_token_and_errors_have_the_real_shape() {
        let fake = FakeGce::start().await.unwrap();
        let http = reqwest::Client::new();
        let r = http
            .get(format!(
                "{}/projects/{PROJECT}/zones/{ZONE}/instances",
                fake.endpoint()
            ))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401);
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["error"]["code"], 401);
        assert_eq!(body["error"]["errors"][0]["reason"], "required");
        assert_eq!(body["error"]["errors"][0]["domain"], "global");
    }

    fn b64url(data: &[u8]) -> String {
        const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let mut out = String::new();
        for chunk in data.chunks(3) {
            let n = chunk.iter().fold(0u32, |acc, b| (acc << 8) | u32::from(*b))
                << (8 * (3 - chunk.len()));
            for i in 0..=chunk.len() {
                out.push(A[((n >> (18 - 6 * i)) & 63) as usize] as char);
            }
        }
        out
    }

    async fn token_for(fake: &FakeGce, http: &reqwest::Client) -> String {
        let claims = json!({"iss": TEST_CLIENT_EMAIL, "aud": fake.token_uri(), "scope": "https://www.googleapis.com/auth/compute"});
        let jwt = format!(
            "{}.{}.c2ln",
            b64url(br#"{"alg":"RS256"}"#),
            b64url(claims.to_string().as_bytes())
        );
        let r: Value = http
            .post(fake.token_uri())
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!(
                "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion={jwt}"
            ))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        r["access_token"].as_str().unwrap().to_string()
    }

    #[tokio::test]
    async fn operations_request_ids_images_and_conflicts() {
        let fake = FakeGce::start().await.unwrap();
        let http = reqwest::Client::new();
        let token = token_for(&fake, &http).await;
        assert_eq!(fake.tokens_issued(), 1);
        let api = |path: &str| format!("{}/projects/{PROJECT}/{path}", fake.endpoint());

        let image: Value = http
            .get(format!(
                "{}/projects/{IMAGE_PROJECT}/global/images/family/ubuntu-2404-lts-arm64",
                fake.endpoint()
            ))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(image["architecture"], "ARM64");

        let vm = json!({
            "name": "vm-1",
            "machineType": format!("zones/{ZONE}/machineTypes/e2-small"),
            "labels": {"orca": "pool"},
            "disks": [{"boot": true, "autoDelete": true, "initializeParams": {"sourceImage": "projects/ubuntu-os-cloud/global/images/family/ubuntu-2404-lts-amd64"}}],
            "networkInterfaces": [{"network": format!("projects/{PROJECT}/global/networks/{NETWORK}")}],
        });
        let rid = "6f1c2c9e-5a51-4b1a-9b3e-0d6a8f1e2b3c";
        let insert = || {
            http.post(api(&format!("zones/{ZONE}/instances?requestId={rid}")))
                .bearer_auth(&token)
                .json(&vm)
                .send()
        };
        let op: Value = insert().await.unwrap().json().await.unwrap();
        assert_eq!(op["status"], "PENDING");
        let again: Value = insert().await.unwrap().json().await.unwrap();
        assert_eq!(
            again["name"], op["name"],
            "the same requestId answers the same operation"
        );
        assert_eq!(fake.insert_bodies().len(), 1);
        let op_url = api(&format!(
            "zones/{ZONE}/operations/{}",
            op["name"].as_str().unwrap()
        ));
        let get = || http.get(&op_url).bearer_auth(&token).send();
        let s1: Value = get().await.unwrap().json().await.unwrap();
        assert_eq!(s1["status"], "RUNNING");
        assert_eq!(
            fake.instance(ZONE, "vm-1").unwrap()["status"],
            "PROVISIONING"
        );
        let s2: Value = get().await.unwrap().json().await.unwrap();
        assert_eq!(s2["status"], "DONE");
        assert_eq!(fake.instance(ZONE, "vm-1").unwrap()["status"], "RUNNING");
        assert_eq!(fake.disk_names(ZONE), ["vm-1"]);

        // A new request id for the same name: 409 in the real shape.
        let r = http
            .post(api(&format!(
                "zones/{ZONE}/instances?requestId=7f1c2c9e-5a51-4b1a-9b3e-0d6a8f1e2b3c"
            )))
            .bearer_auth(&token)
            .json(&vm)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 409);
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["error"]["errors"][0]["reason"], "alreadyExists");

        // The disk cannot go while the instance uses it; with the instance, it goes (autoDelete).
        let r = http
            .delete(api(&format!("zones/{ZONE}/disks/vm-1")))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400);
        let del: Value = http
            .delete(api(&format!("zones/{ZONE}/instances/vm-1")))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let waited: Value = http
            .post(api(&format!(
                "zones/{ZONE}/operations/{}/wait",
                del["name"].as_str().unwrap()
            )))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(waited["status"], "DONE");
        assert!(fake.instance_names(ZONE).is_empty());
        assert!(fake.disk_names(ZONE).is_empty());

        // A bad filter and a bad page size answer 400.
        for q in [
            "filter=(a%20%3D%201)%20OR%20(b%20%3D%202)",
            "maxResults=501",
            "pageToken=bogus",
        ] {
            let r = http
                .get(api(&format!("zones/{ZONE}/instances?{q}")))
                .bearer_auth(&token)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 400, "{q}");
        }
    }
}
