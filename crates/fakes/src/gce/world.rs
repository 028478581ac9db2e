//! The fake's state ([`World`]): instances, disks, operations and their effects, request ids,
//! firewall rules, networks and subnets, tokens, faults; and the resources' JSON as the API shows it.

use super::*;

pub(super) type Key = (String, String);

/// The key of `name` in `zone` (or region).
pub(super) fn key_of(zone: &str, name: &str) -> Key {
    (zone.to_string(), name.to_string())
}

#[derive(Debug)]
pub(super) struct Op {
    pub(super) value: Value,
    /// When the operation ends (tokio's clock, which a test with a paused clock moves).
    pub(super) done_at: tokio::time::Instant,
    pub(super) effect: Effect,
    /// The instance the operation holds until it ends: other changes of it answer
    /// `resourceNotReady` meanwhile.
    pub(super) holds: Option<Key>,
    /// Until when the operation waits `PENDING` without touching its instance (a delete queued
    /// behind Compute Engine's other work: the instance still reads as before); `None` once it runs.
    pub(super) pending_until: Option<tokio::time::Instant>,
}

#[derive(Debug, Clone)]
pub(super) enum Effect {
    None,
    Insert {
        key: Key,
        error: Option<(String, String, u16)>,
    },
    /// A start, or (with an error) one that found no room in the zone: the instance stays
    /// `TERMINATED`.
    Start(Key, Option<(String, String, u16)>),
    Stop(Key),
    Delete(Key),
    SetMachineType(Key, String),
}

#[derive(Debug, Default)]
pub(super) struct World {
    pub(super) next_id: u64,
    pub(super) instances: BTreeMap<Key, Value>,
    pub(super) disks: BTreeMap<Key, Value>,
    pub(super) ops: HashMap<String, Op>,
    pub(super) request_ids: HashMap<String, String>,
    pub(super) firewalls: BTreeMap<String, Value>,
    pub(super) networks: BTreeMap<String, Value>,
    pub(super) tokens: HashSet<String>,
    pub(super) token_uri: String,
    pub(super) exhausted: HashMap<Key, &'static str>,
    pub(super) quota_exceeded: u32,
    /// How many starts of a stopped instance end in `QUOTA_EXCEEDED` (its CPUs count again).
    pub(super) start_quota_exceeded: u32,
    /// Machine types offered in some zones only: type -> those zones (every other type: in every
    /// zone).
    pub(super) offered_in: HashMap<String, Vec<String>>,
    pub(super) fail_next: Option<(String, String, u16)>,
    /// How long an operation lasts (see [`FakeGce::set_operation_time`]).
    pub(super) op_time: Duration,
    /// How long a delete's operation waits `PENDING` before it runs (see
    /// [`FakeGce::set_delete_pending_time`]).
    pub(super) delete_pending: Duration,
    /// Whether the project's metadata sets `enable-oslogin` to `TRUE`.
    pub(super) project_os_login: bool,
    /// Whether the organisation policy `constraints/compute.requireOsLogin` is enforced.
    pub(super) os_login_required: bool,
    /// The operations not ended yet, by name.
    pub(super) running: Vec<String>,
    pub(super) inserts: Vec<Value>,
    pub(super) early_waits: u32,
    /// Subnets by (region, name), with their network's name.
    pub(super) subnets: BTreeMap<Key, String>,
    /// How long instances made from now on stay invisible (see [`FakeGce::set_visibility_delay`]).
    pub(super) visibility_delay: Duration,
    /// When each instance made under a visibility delay becomes visible.
    pub(super) hidden_until: HashMap<Key, Instant>,
    /// The rate quotas, when on ([`FakeGce::set_rate_quota`]).
    pub(super) rate_quota: Option<RateQuota>,
    /// The fake's wall clock (UTC), on which the rate quotas' minutes start ([`FakeGce::clock`]).
    pub(super) utc: UtcClock,
}

impl World {
    /// Whether `machine_type` is offered in `zone` ([`FakeGce::offer_only`]).
    pub(super) fn offers(&self, zone: &str, machine_type: &str) -> bool {
        self.offered_in
            .get(machine_type)
            .is_none_or(|zones| zones.iter().any(|z| z == zone))
    }

    /// Whether instance `key` can be seen (see [`FakeGce::set_visibility_delay`]).
    pub(super) fn visible(&self, key: &Key) -> bool {
        self.hidden_until
            .get(key)
            .is_none_or(|t| Instant::now() >= *t)
    }

    /// The visible instance `key`.
    pub(super) fn visible_instance(&self, key: &Key) -> Option<&Value> {
        self.instances.get(key).filter(|_| self.visible(key))
    }

    pub(super) fn new_id(&mut self) -> u64 {
        self.next_id += 1;
        4_000_000_000_000_000_000 + self.next_id
    }

    pub(super) fn new_op(
        &mut self,
        zone: Option<&str>,
        kind: &str,
        target: String,
        effect: Effect,
        holds: Option<Key>,
        request_id: Option<&str>,
    ) -> Value {
        let id = self.new_id();
        let name = format!("operation-{id}-{}", kind.to_lowercase());
        let scope = zone.map_or_else(|| "global".into(), |z| format!("zones/{z}"));
        let mut value = json!({
            "kind": "compute#operation",
            "id": id.to_string(),
            "name": name,
            "operationType": kind,
            "targetLink": target,
            "status": "PENDING",
            "user": TEST_CLIENT_EMAIL,
            "progress": 0,
            "insertTime": time_text(self.utc.now()),
            "startTime": time_text(self.utc.now()),
            "selfLink": format!("{LINK}/projects/{PROJECT}/{scope}/operations/{name}"),
        });
        if let Some(z) = zone {
            value["zone"] = json!(format!("{LINK}/projects/{PROJECT}/zones/{z}"));
        }
        if let Some(r) = request_id {
            self.request_ids.insert(r.to_string(), name.clone());
        }
        let done_at = tokio::time::Instant::now() + self.op_time;
        self.ops.insert(
            name.clone(),
            Op {
                value,
                done_at,
                effect,
                holds,
                pending_until: None,
            },
        );
        self.running.push(name.clone());
        self.ops[&name].value.clone()
    }

    /// Sets the `targetId` of operation `op` (as answered, and as stored): the incarnation of the
    /// instance it is about, as Compute Engine writes it on every instance operation.
    pub(super) fn set_target_id(&mut self, op: &mut Value, id: &str) {
        op["targetId"] = json!(id);
        if let Some(o) = op["name"].as_str().and_then(|n| self.ops.get_mut(n)) {
            o.value["targetId"] = json!(id);
        }
    }

    /// Keeps operation `name` `PENDING`, its instance untouched, for `time` before it runs (its
    /// end moves on as much).
    pub(super) fn keep_pending(&mut self, name: &str, time: Duration) {
        if let Some(op) = self.ops.get_mut(name) {
            let now = tokio::time::Instant::now();
            op.pending_until = Some(now + time);
            op.done_at += time;
        }
    }

    /// Ends every operation whose time is up, applying its effect; a delete whose wait in
    /// `PENDING` is over starts running first: its instance reads `STOPPING` ("either being
    /// deleted or killed") until it is gone.
    pub(super) fn settle(&mut self) {
        let now = tokio::time::Instant::now();
        let started: Vec<String> = self
            .running
            .iter()
            .filter(|n| {
                let op = self.ops.get(*n);
                op.is_some_and(|op| op.pending_until.is_some_and(|t| t <= now))
            })
            .cloned()
            .collect();
        for name in started {
            let op = self.ops.get_mut(&name).expect("a running operation exists");
            op.pending_until = None;
            if let Effect::Delete(key) = op.effect.clone() {
                if let Some(vm) = self.instances.get_mut(&key) {
                    vm["status"] = json!("STOPPING");
                }
            }
        }
        let due: Vec<String> = self
            .running
            .iter()
            .filter(|n| self.ops.get(*n).is_none_or(|op| op.done_at <= now))
            .cloned()
            .collect();
        for name in due {
            self.finish(&name);
        }
    }

    /// The operation as a read shows it: `RUNNING` once read while it lasts, unless it is kept
    /// `PENDING` still.
    pub(super) fn read_op(&mut self, name: &str) -> Option<Value> {
        let op = self.ops.get_mut(name)?;
        if op.value["status"] == "PENDING" && op.pending_until.is_none() {
            op.value["status"] = json!("RUNNING");
            op.value["progress"] = json!(50);
        }
        Some(op.value.clone())
    }

    /// The running operation that holds instance `key`, if one does.
    pub(super) fn holder(&self, key: &Key) -> Option<&str> {
        self.running
            .iter()
            .find(|n| {
                self.ops
                    .get(*n)
                    .is_some_and(|op| op.holds.as_ref() == Some(key))
            })
            .map(String::as_str)
    }

    pub(super) fn finish(&mut self, name: &str) {
        self.running.retain(|n| n != name);
        let Some(op) = self.ops.get(name) else { return };
        if op.value["status"] == "DONE" {
            return;
        }
        let effect = op.effect.clone();
        let mut error: Option<(String, String, u16)> = None;
        match effect {
            Effect::None => {}
            // A failed insert, or a start that found no room: the instance stays `TERMINATED`.
            Effect::Insert {
                key,
                error: Some(e),
            }
            | Effect::Start(key, Some(e)) => {
                if let Some(vm) = self.instances.get_mut(&key) {
                    vm["status"] = json!("TERMINATED");
                }
                error = Some(e);
            }
            Effect::Insert { key, error: None } => {
                let n = self.next_id % 250 + 1;
                if let Some(vm) = self.instances.get_mut(&key) {
                    vm["status"] = json!("RUNNING");
                    vm["lastStartTimestamp"] = json!(time_text(self.utc.now()));
                    let nat = vm
                        .pointer_mut("/networkInterfaces/0/accessConfigs/0")
                        .and_then(Value::as_object_mut);
                    if let Some(nat) = nat {
                        nat.insert("natIP".into(), json!(format!("203.0.113.{n}")));
                    }
                }
            }
            Effect::Start(key, None) => self.move_to(&key, "RUNNING", "lastStartTimestamp"),
            Effect::Stop(key) => self.move_to(&key, "TERMINATED", "lastStopTimestamp"),
            Effect::Delete(key) => {
                self.hidden_until.remove(&key);
                if let Some(vm) = self.instances.remove(&key) {
                    for d in vm["disks"].as_array().cloned().unwrap_or_default() {
                        let dname = last_segment(d["source"].as_str().unwrap_or_default());
                        let dkey = key_of(&key.0, dname);
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
        op.value["endTime"] = json!(time_text(self.utc.now()));
        if let Some((code, message, http)) = error {
            op.value["error"] = json!({"errors": [{"code": code, "message": message}]});
            op.value["httpErrorStatusCode"] = json!(http);
            op.value["httpErrorMessage"] = json!(match http {
                403 => "FORBIDDEN",
                409 => "CONFLICT",
                503 => "SERVICE UNAVAILABLE",
                _ => "BAD REQUEST",
            });
        }
    }

    /// Puts instance `key` in `status`, stamping `stamp` with the time when it was in another.
    fn move_to(&mut self, key: &Key, status: &str, stamp: &str) {
        if let Some(vm) = self.instances.get_mut(key) {
            if vm["status"] != status {
                vm[stamp] = json!(time_text(self.utc.now()));
            }
            vm["status"] = json!(status);
        }
    }

    pub(super) fn repeated(&self, request_id: Option<&str>) -> Option<Value> {
        let name = self.request_ids.get(request_id?)?;
        Some(self.ops.get(name)?.value.clone())
    }
}

/// `v`, or an empty object for null (a field the body left out).
pub(super) fn or_empty(v: &Value) -> Value {
    if v.is_null() {
        json!({})
    } else {
        v.clone()
    }
}

pub(super) fn last_segment(s: &str) -> &str {
    s.rsplit('/').next().unwrap_or(s)
}

pub(super) fn machine_type_link(zone: &str, mt: &str) -> String {
    format!("{LINK}/projects/{PROJECT}/zones/{zone}/machineTypes/{mt}")
}

pub(super) fn arch_of_type(mt: &str) -> Option<&'static str> {
    MACHINE_TYPES
        .iter()
        .find(|(n, ..)| *n == mt)
        .map(|(_, a, ..)| *a)
}

pub(super) fn label_fingerprint(labels: &Value) -> String {
    // FNV-1a over the canonical JSON: opaque to clients, changes with every label change.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in labels.to_string().bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

#[allow(clippy::too_many_arguments)]
pub(super) fn instance_json(
    utc: &UtcClock,
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
        "creationTimestamp": time_text(utc.now()),
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

pub(super) fn disk_json(zone: &str, params: &Value, user: &str, id: u64) -> Value {
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
        "type": format!("{LINK}/projects/{PROJECT}/zones/{zone}/diskTypes/{}",
            params.get("diskType").and_then(Value::as_str).map_or("pd-balanced", last_segment)),
        "labels": params.get("labels").cloned().unwrap_or(json!({})),
        "users": [format!("{LINK}/projects/{PROJECT}/zones/{zone}/instances/{user}")],
        "selfLink": format!("{LINK}/projects/{PROJECT}/zones/{zone}/disks/{name}"),
    })
}

/// The generation of machine type `mt`'s series (`c4a-standard-1`: 4), 0 when it has none.
fn generation(mt: &str) -> u32 {
    let series = mt.split('-').next().unwrap_or(mt);
    series.chars().find_map(|c| c.to_digit(10)).unwrap_or(0)
}

/// The boot disk type an insert of machine type `mt` gets: the one it asks for (`asked`, a disk
/// type's URL or path), else its series' default as the reference gives it (`pd-standard` for the
/// first and second generations, `pd-balanced` for C3, C3D and M3, `hyperdisk-balanced` for the
/// fourth generation and later). Persistent disks on a Hyperdisk-only series (the fourth
/// generation), and Hyperdisk on a series without it (E2, T2A, N1), are refused with the field's
/// error message.
pub(super) fn boot_disk_type(mt: &str, asked: Option<&str>) -> Result<String, String> {
    let gen = generation(mt);
    let series = mt.split('-').next().unwrap_or(mt);
    let Some(link) = asked else {
        return Ok(match (gen, series) {
            (4.., _) => "hyperdisk-balanced",
            (_, "c3" | "c3d" | "m3") => "pd-balanced",
            _ => "pd-standard",
        }
        .to_string());
    };
    let t = last_segment(link);
    let pd = t.starts_with("pd-");
    let refused =
        (pd && gen >= 4) || (t.starts_with("hyperdisk-") && matches!(series, "e2" | "t2a" | "n1"));
    if refused || !(pd || t.starts_with("hyperdisk-")) {
        return Err(format!(
            "Invalid value for field 'resource.disks[0].initializeParams.diskType': '{link}'. {t} disk type cannot be used by {mt} machine type."
        ));
    }
    Ok(t.to_string())
}

pub(super) fn region_of(zone: &str) -> &str {
    zone.rsplit_once('-').map(|(r, _)| r).unwrap_or(zone)
}
