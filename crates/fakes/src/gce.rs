//! The fake Compute Engine API: a stateful server on 127.0.0.1 for orca's tests and benchmarks, one
//! module a resource (`instances`, `disks` with machine types and images, `operations`, `firewalls`
//! with networks, `oauth`), sharing the state (`world`), the answers (`answers`) and the list
//! `filter` grammar.
//!
//! ## Real behaviours it reproduces, and where they come from
//! From the Compute Engine v1 discovery document (`shared/reference/gce-compute.v1.discovery.json`):
//! - paths under `/compute/v1/projects/{project}/...` for `instances` (insert, list,
//!   aggregatedList, get, delete, start, stop, setMachineType, setLabels), `disks` (get, list,
//!   aggregatedList, delete),
//!   `machineTypes` (get, aggregatedList, with `architecture`), `images.get` and
//!   `images.getFromFamily` (project `ubuntu-os-cloud`, with `architecture`), zone and global `operations` (get, wait; the zone's also list, with
//!   `filter`), `firewalls` (get, list, patch) and
//!   `networks` (get, with `subnetworks`);
//! - an instance's output-only fields: `id` (a uint64 as a string), `creationTimestamp`,
//!   `lastStartTimestamp` (set when it reaches `RUNNING`), `lastStopTimestamp` (set by a stop), RFC 3339
//!   with milliseconds in the Pacific offset the API writes; `status` moving `PROVISIONING` ->
//!   `RUNNING` at the end of the insert, `STOPPING` -> `TERMINATED`, `STAGING` -> `RUNNING`, and
//!   `STOPPING` while a delete runs ("either being deleted or killed"), gone when it ends: a second
//!   insert of the name meets 409 until then; a delete's operation may first wait `PENDING` with the
//!   instance still reading as before (`RUNNING`, say: [`FakeGce::set_delete_pending_time`]);
//!   `networkInterfaces[].networkIP` and `accessConfigs[].natIP`; `labelFingerprint`; `scheduling`
//!   (`maxRunDuration` as `{"seconds": "<int64 as a string>"}`) as given; `hostname` only when the
//!   insert set one;
//! - operations `PENDING` -> `RUNNING` -> `DONE` that last a time of tokio's clock
//!   ([`FakeGce::set_operation_time`]) whether or not anyone reads them, `wait` answering when one
//!   ends, with `targetId` (the instance's `id`) on every instance operation, and on failure `error.errors[].code` and `httpErrorStatusCode`; while an
//!   operation changes an instance, another change of it (`delete`, `start`, `stop`,
//!   `setMachineType`, `setLabels`) answers 400 `resourceNotReady`; `wait` may answer
//!   at once with the operation unfinished ([`FakeGce::answer_waits_early`]; the reference: "might
//!   return after zero seconds... Be prepared to retry if the operation is not `DONE`");
//! - `requestId`: a UUID other than the zero UUID; a mutating call repeated with the same id answers
//!   the first call's operation and changes nothing;
//! - list `filter` (`field = value`, `!=`, `:`, `field:*`, parenthesized expressions joined by
//!   whitespace or `AND`), parsed as strictly as the documented grammar (AIP-160 text fields, so
//!   `labels.orca-pool` is a label key with a hyphen; anything outside it answers 400), `maxResults` (0 to 500; 0 means 500) and `pageToken`;
//!   `instances.aggregatedList`, `disks.aggregatedList` and `machineTypes.aggregatedList` answer
//!   `items` keyed by `zones/<zone>` for every zone of the project ([`ZONES`]), a zone without
//!   results on the page carrying the warning `NO_RESULTS_ON_PAGE` with `data: [{key: scope}]`;
//! - a stopped (`TERMINATED`) instance holds no resources: its `start` needs room for its machine
//!   type in its zone, and without it the operation ends in `ZONE_RESOURCE_POOL_EXHAUSTED` ("Resource
//!   availability errors" arise "when you create a VM, start a stopped VM, or change a machine
//!   type"), while `setMachineType` itself, on a stopped instance, does not;
//! - the boot disk as its own resource, named by `initializeParams.diskName` (or the instance),
//!   with the labels of `initializeParams.labels` (checked as an instance's labels are), which are
//!   the disk's own: listed and filtered with the disk, never the instance's,
//!   deleted with the instance when `autoDelete`, refused while attached
//!   (`resourceInUseByAnotherResource`); "if a disk with the same name already exists", "the
//!   existing disk is attached to the new instance and the new disk is not created" (deleted with
//!   it when `autoDelete`), and one in use by an instance makes the insert a 400
//!   `resourceInUseByAnotherResource`;
//! - the boot disk's type: `initializeParams.diskType`, or by default the series' ("the default
//!   disk type depends on the instance's machine series": `pd-standard` for first- and
//!   second-generation series, `pd-balanced` for C3, C3D and M3, `hyperdisk-balanced` for "all
//!   fourth-generation types like C4, N4, M4"); a persistent disk (`pd-*`) on a fourth-generation
//!   series (C4, C4A, N4: Hyperdisk only), and Hyperdisk on E2, T2A or N1, answer 400;
//! - OS Login: with the project's metadata `enable-oslogin=TRUE` ([`FakeGce::set_project_os_login`])
//!   the guest ignores an instance's `ssh-keys` unless the instance's own `enable-oslogin` is
//!   `FALSE` ([`FakeGce::ssh_keys_honoured`]); with the organisation policy
//!   `constraints/compute.requireOsLogin` enforced ([`FakeGce::require_os_login`]) an insert that
//!   sets it `FALSE` answers 412 `conditionNotMet` naming the constraint;
//! - a custom-mode network needs `subnetwork`, in the instance's region, existing
//!   ([`FakeGce::put_subnet`]); an auto-mode network (`default`) picks its own subnet.
//!
//! From Google's JSON error format for Compute Engine: `{"error": {"code", "message", "errors":
//! [{"message", "domain", "reason"}]}}` with the reasons `invalid`, `notFound` (404),
//! `alreadyExists` (409), `conditionNotMet` (412, a stale label fingerprint), `required` (401, with
//! `WWW-Authenticate`), `resourceNotReady`, `resourceInUseByAnotherResource`; capacity and quota in
//! operation errors (`ZONE_RESOURCE_POOL_EXHAUSTED`, `_WITH_DETAILS`, `QUOTA_EXCEEDED`).
//!
//! OAuth: `POST /token` takes gcp_auth's JWT-bearer grant (the service account JSON's `token_uri`)
//! and every API call must carry a bearer token it issued; the JWT's issuer, audience and scope are
//! checked.
//!
//! Rate quotas ([`FakeGce::set_rate_quota`], off by default): per project, requests per group of
//! methods (changes, reads, lists, operation reads) counted in synchronized intervals of 60 s,
//! refused past the quota with 403 `rateLimitExceeded` until the next interval starts. As Compute
//! Engine's, the intervals are the minutes of the wall clock (from second :00 UTC), not counted
//! from when the quota was set: the fake's wall clock ([`FakeGce::clock`]) is the system's as read
//! at the start, moved on by tokio's clock, so that on the paused clock minutes pass as the test
//! moves it; [`FakeGce::set_utc`] sets what it reads.
//!
//! Faults on demand: no stock of a type in a zone (the boot disk left behind, as a half-made create
//! leaves it), quota, an insert whose operation fails after making the instance and its disk, slow
//! operations, early `wait` answers, new instances invisible for a while
//! ([`FakeGce::set_visibility_delay`]), plus the shared [`Control`] faults (any status and body,
//! latency, an answer dropped after the request was served).
//!
//! ## What it does not reproduce
//! - The JWT's RSA signature and token expiry are not checked.
//! - Every machine type is offered in every zone, and stock and quota are unlimited unless a test
//!   says otherwise (real catalogues differ by zone: T2A is in a few zones only).
//! - Fingerprints are opaque hex strings, not base64 (clients only echo them); the tag and metadata
//!   fingerprints never change.
//! - `orderBy`, `includeAllScopes`, `returnPartialSuccess`, `OR`, negation and regular-expression
//!   filters (those answer 400, so a driver relying on them fails its tests); aggregated lists
//!   carry zone scopes only, and `unreachables` only when a test injects it.
//! - `requestId`s never expire (Compute Engine keeps them for a limited time); operations cannot be
//!   cancelled.
//! - Compute Engine reads its own writes: the visibility delay is an opt-in simulation of eventual
//!   consistency, off by default.
//! - `scheduling.maxRunDuration` is stored, never enforced: no instance stops by itself.
//! - No suspend or resume, deletion protection, metadata or tag updates, custom machine types,
//!   guest attributes, or regional resources beyond subnets.
//! - Unknown query parameters and body fields are ignored rather than refused.
//!
//! Self links use Compute Engine's canonical `https://www.googleapis.com/compute/v1/...` form; nothing
//! ever sends traffic there (clients build request URLs from their configured endpoint).

// Handlers answer a ready error `Response` from their checks; its size does not matter here.
#![allow(clippy::result_large_err)]

mod answers;
mod disks;
mod filter;
mod firewalls;
mod insert;
mod instances;
mod oauth;
mod operations;
mod quota;
mod world;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::time::Instant;

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
use answers::*;
use disks::*;
use filter::Filter;
use firewalls::*;
use insert::*;
use instances::*;
use oauth::*;
use operations::*;
use orca_machines::kit::UtcClock;
use quota::RateQuota;
use world::*;

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

/// `t` as Compute Engine writes times: RFC 3339 with milliseconds, in the US Pacific offset its
/// answers carry (`2026-12-03T04:01:37.123-08:00`).
fn time_text(t: std::time::SystemTime) -> String {
    let pacific = chrono::FixedOffset::west_opt(8 * 3600).expect("a valid offset");
    chrono::DateTime::<chrono::Utc>::from(t)
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
    ("c4-standard-2", "X86_64", 2, 7680),
    ("n4-standard-2", "X86_64", 2, 8192),
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

type Shared = Arc<Mutex<World>>;

/// The route of `path` under the API's root for a project.
macro_rules! api {
    ($path:literal) => {
        concat!("/compute/v1/projects/{project}", $path)
    };
}

/// The world, with every operation whose time is up ended.
fn lock(s: &Shared) -> MutexGuard<'_, World> {
    let mut world = s.lock().unwrap_or_else(|p| p.into_inner());
    world.settle();
    world
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
        let state: Shared = Arc::new(Mutex::new(World::default()));
        let control = Arc::new(Control::default());
        let api = Router::new()
            .route(
                api!("/zones/{zone}/instances"),
                get(list_instances).post(insert_instance),
            )
            .route(api!("/aggregated/instances"), get(aggregated_instances))
            .route(
                api!("/aggregated/machineTypes"),
                get(aggregated_machine_types),
            )
            .route(
                api!("/zones/{zone}/instances/{name}"),
                get(get_instance).delete(delete_instance),
            )
            .route(
                api!("/zones/{zone}/instances/{name}/{action}"),
                post(instance_action),
            )
            .route(api!("/zones/{zone}/disks"), get(list_disks))
            .route(api!("/aggregated/disks"), get(aggregated_disks))
            .route(
                api!("/zones/{zone}/disks/{name}"),
                get(get_disk).delete(delete_disk),
            )
            .route(
                api!("/zones/{zone}/machineTypes/{name}"),
                get(get_machine_type),
            )
            .route(api!("/zones/{zone}/operations"), get(list_ops))
            .route(api!("/zones/{zone}/operations/{name}"), get(get_op))
            .route(api!("/zones/{zone}/operations/{name}/wait"), post(wait_op))
            .route(api!("/global/operations/{name}"), get(get_op))
            .route(api!("/global/operations/{name}/wait"), post(wait_op))
            .route(
                api!("/global/images/family/{family}"),
                get(image_from_family),
            )
            .route(api!("/global/images/{image}"), get(get_image))
            .route(api!("/global/firewalls"), get(list_firewalls))
            .route(
                api!("/global/firewalls/{name}"),
                get(get_firewall).patch(patch_firewall),
            )
            .route(api!("/global/networks/{name}"), get(get_network))
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
    /// `ZONE_RESOURCE_POOL_EXHAUSTED`, leaving the boot disk behind; so does the start of a stopped
    /// instance of that type there (the instance stays `TERMINATED`).
    pub fn exhaust(&self, machine_type: &str, zone: &str) {
        lock(&self.state)
            .exhausted
            .insert(key_of(zone, machine_type), "ZONE_RESOURCE_POOL_EXHAUSTED");
    }

    /// As [`FakeGce::exhaust`], with the error code `ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS`.
    pub fn exhaust_with_details(&self, machine_type: &str, zone: &str) {
        lock(&self.state).exhausted.insert(
            key_of(zone, machine_type),
            "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
        );
    }

    /// Undoes [`FakeGce::exhaust`].
    pub fn restore(&self, machine_type: &str, zone: &str) {
        lock(&self.state)
            .exhausted
            .remove(&key_of(zone, machine_type));
    }

    /// The next `times` inserts end in `QUOTA_EXCEEDED` (nothing is made).
    pub fn exceed_quota(&self, times: u32) {
        lock(&self.state).quota_exceeded = times;
    }

    /// `machine_type` is offered in `zones` only (as Compute Engine offers many series in some
    /// zones only): elsewhere `machineTypes.get` answers 404, the aggregated list leaves it out, and
    /// an insert of it is refused (400 `invalid`, "does not exist in zone").
    pub fn offer_only(&self, machine_type: &str, zones: &[&str]) {
        lock(&self.state).offered_in.insert(
            machine_type.to_string(),
            zones.iter().map(|z| z.to_string()).collect(),
        );
    }

    /// The next `times` starts of a stopped instance end in `QUOTA_EXCEEDED`, the instance staying
    /// `TERMINATED`: a running instance's CPUs count against the region's quota, so a start (of a
    /// larger type, say) can pass it.
    pub fn exceed_quota_on_start(&self, times: u32) {
        lock(&self.state).start_quota_exceeded = times;
    }

    /// The next insert's operation ends in error `code` after making the instance (left `TERMINATED`)
    /// and its boot disk.
    pub fn fail_next_insert(&self, code: &str, message: &str) {
        self.fail_next_insert_with_status(code, message, 400);
    }

    /// As [`FakeGce::fail_next_insert`], the operation's `httpErrorStatusCode` being `status`.
    pub fn fail_next_insert_with_status(&self, code: &str, message: &str, status: u16) {
        lock(&self.state).fail_next = Some((code.to_string(), message.to_string(), status));
    }

    /// How long operations started from now on last, on tokio's clock (default zero: an operation
    /// is `PENDING` in the answer that starts it and `DONE` at the next request). Meanwhile `get`
    /// shows it `RUNNING`, `wait` answers when it ends, and the instance it changes answers other
    /// changes with `resourceNotReady`, as Compute Engine does while an operation holds a resource.
    pub fn set_operation_time(&self, time: Duration) {
        lock(&self.state).op_time = time;
    }

    /// How long the operation of each delete of an instance accepted from now on waits `PENDING`
    /// before it runs (default zero: it runs at once). Meanwhile the instance reads as it did
    /// (`RUNNING`, say), as on Compute Engine, where a delete's operation can sit `PENDING` for
    /// seconds; then the instance reads `STOPPING` for the operation's time
    /// ([`FakeGce::set_operation_time`]) and is gone. Another change of the instance answers
    /// `resourceNotReady` all along, and `wait` answers when the delete ends.
    pub fn set_delete_pending_time(&self, time: Duration) {
        lock(&self.state).delete_pending = time;
    }

    /// The next `times` `operations.wait` calls answer at once with the operation as it is, neither
    /// waiting nor finishing it, as the reference allows ("might return after zero seconds"; "be
    /// prepared to retry if the operation is not `DONE`").
    pub fn answer_waits_early(&self, times: u32) {
        lock(&self.state).early_waits = times;
    }

    /// Sets the project's metadata `enable-oslogin` to `TRUE` (or removes it): OS Login then applies
    /// to every instance that does not turn it off in its own metadata, and the guest ignores its
    /// `ssh-keys` ([`FakeGce::ssh_keys_honoured`]).
    pub fn set_project_os_login(&self, on: bool) {
        lock(&self.state).project_os_login = on;
    }

    /// Enforces (or lifts) the organisation policy `constraints/compute.requireOsLogin` on the
    /// project: OS Login applies to every instance, and an insert that sets `enable-oslogin` to
    /// `FALSE` is refused with 412 `conditionNotMet` naming the constraint.
    pub fn require_os_login(&self, on: bool) {
        lock(&self.state).os_login_required = on;
    }

    /// Whether the guest of instance `name` takes the keys of its metadata `ssh-keys`: it has some,
    /// and OS Login is off for it (OS Login ignores `ssh-keys`; an instance's own `enable-oslogin`
    /// beats the project's, unless the organisation policy requires OS Login).
    pub fn ssh_keys_honoured(&self, zone: &str, name: &str) -> bool {
        let s = lock(&self.state);
        let Some(vm) = s.instances.get(&key_of(zone, name)) else {
            return false;
        };
        let has_keys = metadata_item(vm, "ssh-keys").is_some_and(|k| !k.is_empty());
        let own = metadata_item(vm, "enable-oslogin").map(|v| v.eq_ignore_ascii_case("true"));
        let os_login = s.os_login_required || own.unwrap_or(s.project_os_login);
        has_keys && !os_login
    }

    /// The stored instance `name` in `zone`, as the API shows it.
    pub fn instance(&self, zone: &str, name: &str) -> Option<Value> {
        lock(&self.state)
            .instances
            .get(&key_of(zone, name))
            .cloned()
    }

    /// The names of the instances in `zone`.
    pub fn instance_names(&self, zone: &str) -> Vec<String> {
        names_in(&lock(&self.state).instances, zone)
    }

    /// The names of the disks in `zone`.
    pub fn disk_names(&self, zone: &str) -> Vec<String> {
        names_in(&lock(&self.state).disks, zone)
    }

    /// The stored disk `name` in `zone`, as the API shows it.
    pub fn disk(&self, zone: &str, name: &str) -> Option<Value> {
        lock(&self.state).disks.get(&key_of(zone, name)).cloned()
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
        let mut vm = instance_json(
            &s.utc,
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
            .insert(key_of(zone, name), disk_json(zone, &disk, name, id));
        vm["status"] = json!("RUNNING");
        vm["lastStartTimestamp"] = json!(time_text(s.utc.now()));
        s.instances.insert(key_of(zone, name), vm);
    }

    /// Puts an unattached disk `name` with `labels` straight into `zone`, as if another tool, an
    /// earlier machine whose boot disk was kept, or an insert that found no room (whose disk is made
    /// before the instance) had left it (no request is logged).
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
        s.disks.insert(key_of(zone, name), d);
    }

    /// Sets `autoDelete` of every disk attached to the stored instance `name` of `zone`, as
    /// `instances.setDiskAutoDelete` by another tool would (no request is logged): a disk with it
    /// off outlives the instance, unattached.
    pub fn set_disk_auto_delete(&self, zone: &str, name: &str, auto_delete: bool) {
        let mut s = lock(&self.state);
        let disks = s
            .instances
            .get_mut(&key_of(zone, name))
            .and_then(|vm| vm["disks"].as_array_mut());
        for d in disks.into_iter().flatten() {
            d["autoDelete"] = json!(auto_delete);
        }
    }

    /// Sets the status of a stored instance (for status mapping tests).
    pub fn set_instance_status(&self, zone: &str, name: &str, status: &str) {
        if let Some(vm) = lock(&self.state).instances.get_mut(&key_of(zone, name)) {
            vm["status"] = json!(status);
        }
    }

    /// Adds or replaces a firewall rule (`name` and `network` required; a `network` without a scheme is
    /// taken as a network name of [`PROJECT`]), as an operator would make it. A rule belongs to a
    /// network that exists: a network of [`PROJECT`] the fake does not have yet is added first (custom
    /// mode, no subnet), so that a test can put a rule on another network than [`NETWORK`].
    pub fn put_firewall(&self, mut rule: Value) {
        let name = rule["name"].as_str().unwrap_or_default().to_string();
        if let Some(n) = rule["network"].as_str() {
            if !n.starts_with("https://") {
                rule["network"] = json!(format!("{LINK}/projects/{PROJECT}/global/networks/{n}"));
            }
        }
        let prefix = format!("{LINK}/projects/{PROJECT}/global/networks/");
        if let Some(net) = rule["network"]
            .as_str()
            .and_then(|n| n.strip_prefix(&prefix))
        {
            if !lock(&self.state).networks.contains_key(net) {
                self.put_network(net, false);
            }
        }
        let mut s = lock(&self.state);
        let id = s.new_id();
        rule["kind"] = json!("compute#firewall");
        rule["id"] = json!(id.to_string());
        rule["selfLink"] = json!(format!("{LINK}/projects/{PROJECT}/global/firewalls/{name}"));
        rule["creationTimestamp"] = json!(time_text(s.utc.now()));
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
                s.subnets.insert(key_of(region, name), name.to_string());
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
            .insert(key_of(region, name), network.to_string());
    }

    /// Makes instances made from now on invisible to `instances.get`, `list` and `aggregatedList` for
    /// `delay` after their insert is accepted, and answers 404 to changes of them until then (a
    /// second insert of the name still meets 409); `Duration::ZERO` turns it off. Compute Engine
    /// reads its own writes; this is the eventual consistency other clouds have (EC2's), which
    /// orca's conformance suite makes every driver survive. The delay runs on tokio's clock, as the
    /// operations' times do, so a test with a paused clock moves it.
    pub fn set_visibility_delay(&self, delay: Duration) {
        lock(&self.state).visibility_delay = delay;
    }

    /// Compute Engine's rate quotas from now on (`None`: off, as by default): at most `per_minute`
    /// requests of each group (changes, reads, lists, operation reads) in each minute of the fake's
    /// wall clock ([`FakeGce::clock`]: from second :00 UTC, whenever the quota is set); past it,
    /// 403 `rateLimitExceeded` until the next minute starts,
    /// with no header saying what is left or when it refills. Compute Engine's default is 1,500
    /// for each group.
    pub fn set_rate_quota(&self, per_minute: Option<u32>) {
        lock(&self.state).rate_quota = per_minute.map(RateQuota::new);
    }

    /// The fake's wall clock (UTC): the system's as it read when the fake started, moved on by
    /// tokio's clock since, unless [`FakeGce::set_utc`] set it. A driver made with this clock reads
    /// the same minutes as the fake.
    pub fn clock(&self) -> UtcClock {
        lock(&self.state).utc
    }

    /// Sets the fake's wall clock to read `utc` now (moved on by tokio's clock from there), so that a
    /// test on the paused clock knows where in its minute each request falls.
    pub fn set_utc(&self, utc: std::time::SystemTime) {
        lock(&self.state).utc = UtcClock::reading(utc);
    }

    /// How many requests the rate quotas refused (403 `rateLimitExceeded`) so far.
    pub fn rate_limited(&self) -> u64 {
        lock(&self.state)
            .rate_quota
            .as_ref()
            .map_or(0, |q| q.refused)
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

/// The names of the zonal resources of `zone` in `map`.
fn names_in(map: &BTreeMap<Key, Value>, zone: &str) -> Vec<String> {
    map.keys()
        .filter(|(z, _)| z == zone)
        .map(|(_, n)| n.clone())
        .collect()
}

/// What a program hands the Compute Engine driver (`orca::of_with("gce", ..)`) to reach `fake`: a
/// provider of zone [`ZONE`] on [`NETWORK`]/[`SUBNET`] of [`PROJECT`], signing in with the service
/// account key in `key_file` (where the caller wrote [`FakeGce::service_account_json`]).
pub fn driver_settings(fake: &FakeGce, key_file: &std::path::Path) -> orca_machines::Settings {
    orca_machines::Settings::new()
        .with("ORCA_GCE_PROJECT", PROJECT)
        .with("ORCA_GCE_ZONE", ZONE)
        .with("ORCA_GCE_NETWORK", NETWORK)
        .with("ORCA_GCE_SUBNET", SUBNET)
        .with("ORCA_GCE_CREDENTIALS_FILE", key_file.to_string_lossy())
        .with("ORCA_GCE_ENDPOINT", fake.endpoint())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes() {
        assert_eq!(
            crate::control::form_pairs(b"f=a%3Ab+c"),
            [("f".to_string(), "a:b c".to_string())]
        );
        assert!(valid_ipv4_cidr("203.0.113.7/32"));
        assert!(!valid_ipv4_cidr("203.0.113/32"));
        assert_eq!(region_of("europe-west1-b"), "europe-west1");
    }

    #[tokio::test(start_paused = true)]
    async fn times_are_written_from_the_fakes_own_clock() {
        let fake = FakeGce::start().await.unwrap();
        let noon = chrono::DateTime::parse_from_rfc3339("2026-12-03T12:01:37Z").unwrap();
        fake.set_utc(noon.into());
        tokio::time::advance(Duration::from_millis(1500)).await;
        fake.put_instance(ZONE, "vm-1", "e2-small", json!({}));
        fake.put_firewall(json!({"name": "fw-1", "network": NETWORK}));
        let vm = fake.instance(ZONE, "vm-1").unwrap();
        let written = "2026-12-03T04:01:38.500-08:00";
        assert_eq!(vm["creationTimestamp"], written);
        assert_eq!(vm["lastStartTimestamp"], written);
        assert_eq!(fake.firewall("fw-1").unwrap()["creationTimestamp"], written);
    }

    #[tokio::test(start_paused = true)]
    async fn late_visibility_runs_on_tokios_clock() {
        let fake = FakeGce::start().await.unwrap();
        let http = reqwest::Client::new();
        let token = token_for(&fake, &http).await;
        fake.set_visibility_delay(Duration::from_secs(3600));
        let base = format!(
            "{}/projects/{PROJECT}/zones/{ZONE}/instances",
            fake.endpoint()
        );
        let body = insert_body("late", ZONE, Some(SUBNET));
        let (status, _) = call(
            &http,
            &token,
            reqwest::Method::POST,
            base.clone(),
            Some(body),
        )
        .await;
        assert_eq!(status, 200);
        let get = || {
            call(
                &http,
                &token,
                reqwest::Method::GET,
                format!("{base}/late"),
                None,
            )
        };
        assert_eq!(get().await.0, 404);
        // An hour on the paused clock, as the fake's operations and quotas count time.
        tokio::time::advance(Duration::from_secs(3601)).await;
        assert_eq!(get().await.0, 200);
    }

    #[tokio::test(start_paused = true)]
    async fn a_delete_kept_pending_leaves_the_instance_as_it_reads_until_it_runs() {
        let fake = FakeGce::start().await.unwrap();
        let http = reqwest::Client::new();
        let token = token_for(&fake, &http).await;
        fake.put_instance(ZONE, "doomed", "e2-small", json!({}));
        fake.set_delete_pending_time(Duration::from_secs(5));
        fake.set_operation_time(Duration::from_secs(2));
        let base = format!("{}/projects/{PROJECT}/zones/{ZONE}", fake.endpoint());
        let (status, op) = call(
            &http,
            &token,
            reqwest::Method::DELETE,
            format!("{base}/instances/doomed"),
            None,
        )
        .await;
        assert_eq!(status, 200, "{op}");
        let read_op = || {
            let url = format!("{base}/operations/{}", op["name"].as_str().unwrap());
            call(&http, &token, reqwest::Method::GET, url, None)
        };
        // Queued: the operation reads PENDING, the instance as before, and the delete is listed.
        assert_eq!(read_op().await.1["status"], "PENDING");
        assert_eq!(fake.instance(ZONE, "doomed").unwrap()["status"], "RUNNING");
        let filter = format!(
            "(operationType = \"delete\") (targetId = \"{}\")",
            op["targetId"].as_str().unwrap()
        );
        let listed = http
            .get(format!("{base}/operations"))
            .query(&[("filter", filter)])
            .bearer_auth(&token)
            .send()
            .await
            .unwrap()
            .json::<Value>()
            .await
            .unwrap();
        assert_eq!(listed["items"][0]["status"], "PENDING", "{listed}");
        // Running: the instance is stopping, then gone.
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(read_op().await.1["status"], "RUNNING");
        assert_eq!(fake.instance(ZONE, "doomed").unwrap()["status"], "STOPPING");
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(read_op().await.1["status"], "DONE");
        assert!(fake.instance(ZONE, "doomed").is_none());
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

    #[tokio::test(start_paused = true)]
    async fn rate_quotas_refuse_a_group_past_its_count_until_the_next_minute() {
        let fake = FakeGce::start().await.unwrap();
        let http = reqwest::Client::new();
        let token = token_for(&fake, &http).await;
        fake.set_rate_quota(Some(2));
        let base = format!("{}/projects/{PROJECT}/zones/{ZONE}", fake.endpoint());
        let get = || format!("{base}/machineTypes/e2-small");
        for _ in 0..2 {
            let (status, _) = call(&http, &token, reqwest::Method::GET, get(), None).await;
            assert_eq!(status, 200);
        }
        let (status, body) = call(&http, &token, reqwest::Method::GET, get(), None).await;
        assert_eq!(status, 403);
        assert_eq!(body["error"]["errors"][0]["reason"], "rateLimitExceeded");
        assert_eq!(fake.rate_limited(), 1);
        // Lists are another group.
        let (status, _) = call(
            &http,
            &token,
            reqwest::Method::GET,
            format!("{base}/instances"),
            None,
        )
        .await;
        assert_eq!(status, 200);
        // The next interval starts with its own count.
        tokio::time::advance(Duration::from_secs(60)).await;
        let (status, _) = call(&http, &token, reqwest::Method::GET, get(), None).await;
        assert_eq!(status, 200);
    }

    /// Moves tokio's clock on until the fake's wall clock reads `utc` (from wherever it reads now).
    async fn advance_to(fake: &FakeGce, utc: std::time::SystemTime) {
        let left = utc.duration_since(fake.clock().now()).unwrap();
        tokio::time::advance(left).await;
    }

    #[tokio::test(start_paused = true)]
    async fn rate_quota_minutes_start_at_the_wall_clocks_minutes_not_when_the_quota_was_set() {
        let fake = FakeGce::start().await.unwrap();
        let http = reqwest::Client::new();
        let token = token_for(&fake, &http).await;
        // 10:00:15 UTC on some day.
        let ten = std::time::UNIX_EPOCH + Duration::from_secs(20_000 * 86_400 + 10 * 3600);
        let at = |secs: u64| ten + Duration::from_secs(secs);
        fake.set_utc(at(15));
        fake.set_rate_quota(Some(2));
        let get = format!(
            "{}/projects/{PROJECT}/zones/{ZONE}/machineTypes/e2-small",
            fake.endpoint()
        );
        let status = || async {
            call(&http, &token, reqwest::Method::GET, get.clone(), None)
                .await
                .0
        };
        assert_eq!((status().await, status().await), (200, 200));
        assert_eq!(status().await, 403, "the quota of 10:00 is spent");
        advance_to(&fake, at(59)).await;
        assert_eq!(
            status().await,
            403,
            "10:00:59 is still in the minute of 10:00"
        );
        advance_to(&fake, at(60)).await;
        assert_eq!(
            status().await,
            200,
            "the quota refills at 10:01:00, not a minute after the quota was set"
        );
        assert_eq!(status().await, 200);
        assert_eq!(status().await, 403, "10:01 has its own count");
        assert_eq!(fake.rate_limited(), 3);
    }

    fn b64url(data: &[u8]) -> String {
        use base64::Engine as _;
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(data)
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
    async fn a_rule_can_be_put_on_another_network_which_then_exists() {
        let fake = FakeGce::start().await.unwrap();
        let http = reqwest::Client::new();
        let token = token_for(&fake, &http).await;
        let get = |path: String| {
            let req = http.get(path).bearer_auth(&token);
            async move {
                let r = req.send().await.unwrap();
                (r.status().as_u16(), r.json::<Value>().await.unwrap())
            }
        };
        let api = |path: &str| format!("{}/projects/{PROJECT}/{path}", fake.endpoint());
        assert_eq!(get(api("global/networks/other-net")).await.0, 404);
        fake.put_firewall(json!({"name": "other-ssh", "network": "other-net",
            "allowed": [{"IPProtocol": "tcp", "ports": ["22"]}], "sourceRanges": ["198.51.100.9/32"]}));
        let (status, rule) = get(api("global/firewalls/other-ssh")).await;
        assert_eq!(status, 200);
        assert_eq!(
            rule["network"],
            format!("{LINK}/projects/{PROJECT}/global/networks/other-net")
        );
        let (status, net) = get(api("global/networks/other-net")).await;
        assert_eq!(
            (status, &net["autoCreateSubnetworks"]),
            (200, &json!(false))
        );
        // The fake's own network stays as it was.
        let (_, net) = get(api(&format!("global/networks/{NETWORK}"))).await;
        assert_eq!(net["subnetworks"].as_array().map(Vec::len), Some(2));
    }

    #[tokio::test]
    async fn a_repeated_insert_is_answered_its_first_operation_also_once_done() {
        let fake = FakeGce::start().await.unwrap();
        let http = reqwest::Client::new();
        let token = token_for(&fake, &http).await;
        let api = |path: &str| format!("{}/projects/{PROJECT}/{path}", fake.endpoint());
        let vm = json!({
            "name": "vm-1",
            "machineType": format!("zones/{ZONE}/machineTypes/e2-small"),
            "labels": {"orca": "pool"},
            "disks": [{"boot": true, "autoDelete": true, "initializeParams": {"sourceImage": "projects/ubuntu-os-cloud/global/images/family/ubuntu-2404-lts-amd64"}}],
            "networkInterfaces": [{
                "network": format!("projects/{PROJECT}/global/networks/{NETWORK}"),
                "subnetwork": format!("projects/{PROJECT}/regions/europe-west1/subnetworks/{SUBNET}"),
            }],
        });
        let url = api(&format!(
            "zones/{ZONE}/instances?requestId=0b7e1c55-2f0e-4c1b-8a52-3d9e6f7a1c20"
        ));
        let (status, op) = call(
            &http,
            &token,
            reqwest::Method::POST,
            url.clone(),
            Some(vm.clone()),
        )
        .await;
        assert_eq!(status, 200, "{op}");
        let wait = api(&format!(
            "zones/{ZONE}/operations/{}/wait",
            op["name"].as_str().unwrap()
        ));
        let (_, done) = call(&http, &token, reqwest::Method::POST, wait, None).await;
        assert_eq!(done["status"], "DONE");
        // Compute Engine answers a retry carrying the same requestId with the first operation, as
        // it stands now, never a 409 for the instance that operation made.
        let (status, again) = call(&http, &token, reqwest::Method::POST, url, Some(vm)).await;
        assert_eq!(status, 200, "{again}");
        assert_eq!(again["name"], op["name"]);
        assert_eq!(again["status"], "DONE");
        assert_eq!(fake.insert_bodies().len(), 1);
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
            "networkInterfaces": [{
                "network": format!("projects/{PROJECT}/global/networks/{NETWORK}"),
                "subnetwork": format!("projects/{PROJECT}/regions/europe-west1/subnetworks/{SUBNET}"),
            }],
        });
        let rid = "6f1c2c9e-5a51-4b1a-9b3e-0d6a8f1e2b3c";
        let insert = || {
            http.post(api(&format!("zones/{ZONE}/instances?requestId={rid}")))
                .bearer_auth(&token)
                .json(&vm)
                .send()
        };
        // Operations last a while: read meanwhile they are running, the instance is held.
        fake.set_operation_time(Duration::from_secs(3));
        let op: Value = insert().await.unwrap().json().await.unwrap();
        assert_eq!(op["status"], "PENDING");
        let again: Value = insert().await.unwrap().json().await.unwrap();
        assert_eq!(
            again["name"], op["name"],
            "the same requestId answers the same operation"
        );
        assert_eq!(fake.insert_bodies().len(), 1);
        let op_name = op["name"].as_str().unwrap();
        let op_url = api(&format!("zones/{ZONE}/operations/{op_name}"));
        let (_, s1) = call(&http, &token, reqwest::Method::GET, op_url.clone(), None).await;
        assert_eq!(s1["status"], "RUNNING");
        assert_eq!(
            fake.instance(ZONE, "vm-1").unwrap()["status"],
            "PROVISIONING"
        );
        let r = http
            .post(api(&format!("zones/{ZONE}/instances/vm-1/stop")))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400);
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["error"]["errors"][0]["reason"], "resourceNotReady");
        assert!(
            body["error"]["message"].as_str().unwrap().contains(op_name),
            "{body}"
        );
        // `wait` answers when the operation ends.
        let wait = format!("{op_url}/wait");
        let (_, s2) = call(&http, &token, reqwest::Method::POST, wait, None).await;
        assert_eq!(s2["status"], "DONE");
        assert_eq!(fake.instance(ZONE, "vm-1").unwrap()["status"], "RUNNING");
        assert_eq!(fake.disk_names(ZONE), ["vm-1"]);
        fake.set_operation_time(Duration::ZERO);

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

    async fn call(
        http: &reqwest::Client,
        token: &str,
        method: reqwest::Method,
        url: String,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut r = http.request(method, url).bearer_auth(token);
        if let Some(b) = body {
            r = r.json(&b);
        }
        let r = r.send().await.unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    fn insert_body(name: &str, zone: &str, subnet: Option<&str>) -> Value {
        let mut nic = json!({"network": format!("projects/{PROJECT}/global/networks/{NETWORK}")});
        if let Some(s) = subnet {
            nic["subnetwork"] = json!(format!(
                "projects/{PROJECT}/regions/{}/subnetworks/{s}",
                region_of(zone)
            ));
        }
        json!({
            "name": name,
            "machineType": format!("zones/{zone}/machineTypes/e2-small"),
            "disks": [{"boot": true, "autoDelete": true, "initializeParams": {"sourceImage": "projects/ubuntu-os-cloud/global/images/family/ubuntu-2404-lts-amd64"}}],
            "networkInterfaces": [nic],
        })
    }

    #[tokio::test]
    async fn aggregated_lists_times_subnets_and_late_visibility_have_the_real_shape() {
        let fake = FakeGce::start().await.unwrap();
        let http = reqwest::Client::new();
        let token = token_for(&fake, &http).await;
        let api = |path: &str| format!("{}/projects/{PROJECT}/{path}", fake.endpoint());
        let post = |path: String, body: Value| {
            let (http, token) = (&http, &token);
            async move { call(http, token, reqwest::Method::POST, path, Some(body)).await }
        };
        let get = |path: String| {
            let (http, token) = (&http, &token);
            async move { call(http, token, reqwest::Method::GET, path, None).await }
        };
        // A custom-mode network needs a subnet of the instance's region that exists.
        let (s, b) = post(
            api(&format!("zones/{ZONE}/instances")),
            insert_body("a", ZONE, None),
        )
        .await;
        assert_eq!(
            (s, b["error"]["errors"][0]["reason"].as_str()),
            (400, Some("invalid"))
        );
        let (s, _) = post(
            api("zones/europe-west4-a/instances"),
            insert_body("a", "europe-west4-a", Some(SUBNET)),
        )
        .await;
        assert_eq!(s, 404, "no orca-subnet in europe-west4");
        let (s, b) = get(api("zones/mars-north1-a/instances/a")).await;
        assert_eq!((s, b["error"]["code"].as_u64()), (400, Some(400)));
        for (name, zone) in [
            ("a", "europe-west1-b"),
            ("b", "us-central1-a"),
            ("c", "us-central1-a"),
        ] {
            let (s, _) = post(
                api(&format!("zones/{zone}/instances")),
                insert_body(name, zone, Some(SUBNET)),
            )
            .await;
            assert_eq!(s, 200, "{name}");
        }
        // Times: RFC 3339 with milliseconds and an offset; started when running, no stop yet.
        let (_, vm) = get(api("zones/us-central1-a/instances/b")).await;
        for field in ["creationTimestamp", "lastStartTimestamp"] {
            let t = vm[field].as_str().unwrap();
            assert!(
                chrono::DateTime::parse_from_rfc3339(t).is_ok(),
                "{field} {t}"
            );
            assert_eq!(t.len(), "2026-12-03T04:01:37.123-08:00".len(), "{t}");
        }
        assert!(vm.get("lastStopTimestamp").is_none() && vm.get("hostname").is_none());
        // An aggregated page holds every zone: its instances, or a warning.
        let (s, page) = get(api("aggregated/instances?maxResults=2")).await;
        assert_eq!(s, 200);
        assert_eq!(page["kind"], "compute#instanceAggregatedList");
        let items = page["items"].as_object().unwrap();
        assert_eq!(items.len(), ZONES.len());
        assert_eq!(items["zones/europe-west1-b"]["instances"][0]["name"], "a");
        assert_eq!(items["zones/us-central1-a"]["instances"][0]["name"], "b");
        let w = &items["zones/us-central1-f"]["warning"];
        assert_eq!(w["code"], "NO_RESULTS_ON_PAGE");
        assert_eq!(
            w["data"][0],
            json!({"key": "scope", "value": "zones/us-central1-f"})
        );
        let token2 = page["nextPageToken"].as_str().unwrap();
        let (_, page2) = get(api(&format!(
            "aggregated/instances?maxResults=2&pageToken={token2}"
        )))
        .await;
        assert_eq!(
            page2["items"]["zones/us-central1-a"]["instances"][0]["name"],
            "c"
        );
        assert_eq!(
            page2["items"]["zones/europe-west1-b"]["warning"]["code"],
            "NO_RESULTS_ON_PAGE"
        );
        assert!(page2.get("nextPageToken").is_none());
        let (_, types) = get(api(
            "aggregated/machineTypes?filter=name%20%3D%20%22t2a-standard-1%22&maxResults=1",
        ))
        .await;
        assert_eq!(
            types["items"]["zones/europe-west1-b"]["machineTypes"][0]["architecture"],
            "ARM64"
        );
        // Late visibility: invisible to get and lists, 404 to changes, 409 to a second insert.
        fake.set_visibility_delay(Duration::from_millis(300));
        let (s, _) = post(
            api(&format!("zones/{ZONE}/instances")),
            insert_body("late", ZONE, Some(SUBNET)),
        )
        .await;
        assert_eq!(s, 200);
        assert_eq!(
            get(api(&format!("zones/{ZONE}/instances/late"))).await.0,
            404
        );
        let (_, list) = get(api(&format!("zones/{ZONE}/instances"))).await;
        assert_eq!(list["items"].as_array().map(Vec::len), Some(1), "only a");
        let (s, _) = post(api(&format!("zones/{ZONE}/instances/late/stop")), json!({})).await;
        assert_eq!(s, 404);
        let (s, _) = post(
            api(&format!("zones/{ZONE}/instances")),
            insert_body("late", ZONE, Some(SUBNET)),
        )
        .await;
        assert_eq!(s, 409);
        tokio::time::sleep(Duration::from_millis(350)).await;
        assert_eq!(
            get(api(&format!("zones/{ZONE}/instances/late"))).await.0,
            200
        );
    }

    #[tokio::test]
    async fn disks_are_listed_by_zone_and_across_zones_with_filters_and_pages() {
        let fake = FakeGce::start().await.unwrap();
        let http = reqwest::Client::new();
        let token = token_for(&fake, &http).await;
        let api = |path: &str| format!("{}/projects/{PROJECT}/{path}", fake.endpoint());
        let get = |path: String| {
            let (http, token) = (&http, &token);
            async move { call(http, token, reqwest::Method::GET, path, None).await }
        };
        let ours = json!({"orca": "pool", "orca-pool": "lab", "orca-owner": "s1"});
        fake.put_disk(ZONE, "a-1", ours.clone());
        fake.put_disk("us-central1-a", "b-1", ours);
        fake.put_disk(ZONE, "c-1", json!({"team": "data"}));
        // An instance's boot disk is listed too, with its user.
        fake.put_instance(ZONE, "vm-1", "e2-small", json!({}));
        let (s, list) = get(api(&format!("zones/{ZONE}/disks"))).await;
        assert_eq!((s, &list["kind"]), (200, &json!("compute#diskList")));
        let names: Vec<&str> = list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["a-1", "c-1", "vm-1"]);
        assert_eq!(list["items"][2]["users"].as_array().map(Vec::len), Some(1));
        let filter =
            "filter=(labels.orca-pool%20%3D%20%22lab%22)%20(labels.orca-owner%20%3D%20%22s1%22)";
        let (_, list) = get(api(&format!("zones/{ZONE}/disks?{filter}&maxResults=1"))).await;
        assert_eq!(list["items"][0]["name"], "a-1");
        assert!(list.get("nextPageToken").is_none());
        // Across zones: every zone a scope, the disks of the page or a warning.
        let (s, page) = get(api(&format!("aggregated/disks?{filter}&maxResults=1"))).await;
        assert_eq!(
            (s, &page["kind"]),
            (200, &json!("compute#diskAggregatedList"))
        );
        let items = page["items"].as_object().unwrap();
        assert_eq!(items.len(), ZONES.len());
        assert_eq!(items[&format!("zones/{ZONE}")]["disks"][0]["name"], "a-1");
        assert_eq!(
            items["zones/us-central1-a"]["warning"]["code"],
            "NO_RESULTS_ON_PAGE"
        );
        let next = page["nextPageToken"].as_str().unwrap();
        let (_, page2) = get(api(&format!(
            "aggregated/disks?{filter}&maxResults=1&pageToken={next}"
        )))
        .await;
        assert_eq!(
            page2["items"]["zones/us-central1-a"]["disks"][0]["name"],
            "b-1"
        );
        assert!(page2.get("nextPageToken").is_none());
        let (s, _) = get(api(
            "aggregated/disks?filter=(a%20%3D%201)%20OR%20(b%20%3D%202)",
        ))
        .await;
        assert_eq!(s, 400);
        assert_eq!(get(api("zones/mars-north1-a/disks")).await.0, 400);
    }

    #[tokio::test]
    async fn a_boot_disk_keeps_its_own_labels_checked_listed_and_filtered_apart_from_the_instance()
    {
        let fake = FakeGce::start().await.unwrap();
        let http = reqwest::Client::new();
        let token = token_for(&fake, &http).await;
        let api = |path: &str| format!("{}/projects/{PROJECT}/{path}", fake.endpoint());
        let send = |method: reqwest::Method, path: String, body: Option<Value>| {
            let (http, token) = (&http, &token);
            async move { call(http, token, method, path, body).await }
        };
        let insert = |name: &str, disk_labels: Value| {
            let mut body = insert_body(name, ZONE, Some(SUBNET));
            body["labels"] = json!({"orca": "pool"});
            body["disks"][0]["initializeParams"]["diskName"] = json!(format!("{name}-disk"));
            body["disks"][0]["initializeParams"]["labels"] = disk_labels;
            send(
                reqwest::Method::POST,
                api(&format!("zones/{ZONE}/instances")),
                Some(body),
            )
        };
        assert_eq!(
            insert("a", json!({"orca": "pool", "orca-machine": "a"}))
                .await
                .0,
            200
        );
        assert_eq!(
            insert("b", json!({"orca": "pool", "orca-machine": "b"}))
                .await
                .0,
            200
        );
        // Checked as an instance's labels are, and nothing is made.
        let (status, body) = insert("c", json!({"orca-machine": "Not-A-Value"})).await;
        assert_eq!(status, 400, "{body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("initializeParams.labels"),
            "{body}"
        );
        assert!(fake.disk(ZONE, "c-disk").is_none());
        // The disk's labels are its own: the instance keeps the ones it was given.
        let (_, vm) = send(
            reqwest::Method::GET,
            api(&format!("zones/{ZONE}/instances/a")),
            None,
        )
        .await;
        assert_eq!(vm["labels"], json!({"orca": "pool"}));
        let d = fake.disk(ZONE, "a-disk").unwrap();
        assert_eq!(d["labels"], json!({"orca": "pool", "orca-machine": "a"}));
        // Filtered on a label key with a hyphen, in a zone and across zones.
        let filter =
            "filter=(labels.orca%20%3D%20%22pool%22)%20(labels.orca-machine%20%3D%20%22b%22)";
        let (_, list) = send(
            reqwest::Method::GET,
            api(&format!("zones/{ZONE}/disks?{filter}")),
            None,
        )
        .await;
        let names: Vec<&str> = list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["b-disk"]);
        let (_, all) = send(
            reqwest::Method::GET,
            api(&format!("aggregated/disks?{filter}")),
            None,
        )
        .await;
        assert_eq!(
            all["items"][&format!("zones/{ZONE}")]["disks"][0]["name"],
            "b-disk"
        );
        let (_, none) = send(
            reqwest::Method::GET,
            api(&format!("zones/{ZONE}/instances?{filter}")),
            None,
        )
        .await;
        assert!(
            none.get("items")
                .is_none_or(|i| i.as_array().is_some_and(Vec::is_empty)),
            "{none}"
        );
    }

    #[tokio::test]
    async fn boot_disk_types_follow_the_machine_series() {
        let fake = FakeGce::start().await.unwrap();
        let http = reqwest::Client::new();
        let token = token_for(&fake, &http).await;
        let api = |path: &str| format!("{}/projects/{PROJECT}/{path}", fake.endpoint());
        let insert = |name: &str, mt: &str, disk_type: Option<&str>| {
            let mut body = insert_body(name, ZONE, Some(SUBNET));
            body["machineType"] = json!(format!("zones/{ZONE}/machineTypes/{mt}"));
            if let Some(t) = disk_type {
                body["disks"][0]["initializeParams"]["diskType"] =
                    json!(format!("zones/{ZONE}/diskTypes/{t}"));
            }
            let (http, token, url) = (&http, &token, api(&format!("zones/{ZONE}/instances")));
            async move { call(http, token, reqwest::Method::POST, url, Some(body)).await }
        };
        let disk_type = |name: &str| {
            let d = fake.disk(ZONE, name).unwrap();
            d["type"]
                .as_str()
                .unwrap()
                .rsplit('/')
                .next()
                .unwrap()
                .to_string()
        };
        // Defaults by series.
        assert_eq!(insert("a", "e2-small", None).await.0, 200);
        assert_eq!(disk_type("a"), "pd-standard");
        assert_eq!(insert("b", "c4-standard-2", None).await.0, 200);
        assert_eq!(disk_type("b"), "hyperdisk-balanced");
        // Asked for, where the series takes it.
        assert_eq!(insert("c", "e2-small", Some("pd-balanced")).await.0, 200);
        assert_eq!(disk_type("c"), "pd-balanced");
        assert_eq!(
            insert("d", "n4-standard-2", Some("hyperdisk-balanced"))
                .await
                .0,
            200
        );
        // Refused where it does not.
        for (mt, t) in [
            ("c4-standard-2", "pd-balanced"),
            ("n4-standard-2", "pd-standard"),
            ("e2-small", "hyperdisk-balanced"),
        ] {
            let (status, body) = insert("e", mt, Some(t)).await;
            assert_eq!(status, 400, "{mt} {t}");
            assert!(
                body["error"]["message"].as_str().unwrap().contains(t),
                "{body}"
            );
        }
    }
}
