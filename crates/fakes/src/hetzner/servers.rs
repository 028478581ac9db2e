//! Servers: list, create, get, update, delete, and their power and type actions.

use std::collections::BTreeMap;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Json;
use serde_json::{json, Value};

use super::actions::Effect;
use super::catalogue::{image_json, location_json, IMAGES, LOCATIONS};
use super::selector::{matches, selector, valid_key, valid_value};
use super::{
    invalid, lock, not_found, paged_with, param, params, rfc3339_now, ApiError, ApiResult, Params,
    Shared, State_,
};

/// A server as the fake keeps it.
#[derive(Debug, Clone)]
pub(super) struct Server {
    pub id: i64,
    pub name: String,
    pub server_type: String,
    pub location: String,
    pub image: i64,
    pub labels: BTreeMap<String, String>,
    pub status: String,
    pub created: String,
    /// From when reads show it (delayed visibility).
    pub visible_at: Instant,
    pub firewalls: Vec<i64>,
    /// The networks it is attached to: (network id, its address there).
    pub networks: Vec<(i64, String)>,
    pub ssh_keys: Vec<String>,
    pub user_data: Option<String>,
}

impl Server {
    /// Whether reads show it yet.
    pub(super) fn visible(&self) -> bool {
        Instant::now() >= self.visible_at
    }
}

impl State_ {
    pub(super) fn server_json(&self, s: &Server) -> Value {
        let t = self.types.iter().find(|t| t.name == s.server_type);
        let type_json = t.map(|t| self.type_json(t)).unwrap_or(Value::Null);
        let o = s.id % 250;
        json!({
            "id": s.id,
            "name": s.name,
            "status": s.status,
            "created": s.created,
            "labels": s.labels,
            "locked": self.locked(s.id),
            "backup_window": null,
            "included_traffic": 21990232555520i64,
            "ingoing_traffic": 0,
            "outgoing_traffic": 0,
            "iso": null,
            "load_balancers": [],
            "volumes": [],
            "placement_group": null,
            "primary_disk_size": t.map(|t| t.disk).unwrap_or(40),
            "private_net": s.networks.iter().map(|(n, ip)| json!({
                "network": n, "ip": ip, "alias_ips": [],
                "mac_address": format!("86:00:00:{:02x}:{:02x}:{:02x}", (s.id >> 16) & 0xff, (s.id >> 8) & 0xff, s.id & 0xff),
            })).collect::<Vec<_>>(),
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

    /// The visible server `id`, or `not_found` (also while it is not visible yet).
    fn visible_server(&mut self, id: i64) -> Result<&mut Server, ApiError> {
        match self.servers.get_mut(&id) {
            Some(v) if v.visible() => Ok(v),
            _ => Err(not_found("server")),
        }
    }
}

pub(super) fn server_id(raw: &str) -> Result<i64, ApiError> {
    raw.parse()
        .map_err(|_| invalid(format!("invalid server id {raw:?}")))
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

/// Labels of a request body: an object of strings, each key and value valid.
fn labels_of(b: &Value) -> Result<Option<BTreeMap<String, String>>, ApiError> {
    let labels: BTreeMap<String, String> = match b.get("labels") {
        None | Some(Value::Null) => return Ok(None),
        Some(v) => serde_json::from_value(v.clone())
            .map_err(|_| invalid("labels must be an object of strings"))?,
    };
    if labels.iter().any(|(k, v)| !valid_key(k) || !valid_value(v)) {
        return Err(invalid("invalid label"));
    }
    Ok(Some(labels))
}

pub(super) async fn list_servers(State(state): State<Shared>, Query(q): Params) -> ApiResult {
    let sel = selector(&q)?;
    let statuses = params(&q, "status");
    let name = param(&q, "name");
    let s = lock(&state);
    let items = s
        .servers
        .values()
        .filter(|v| v.visible())
        .filter(|v| name.is_none_or(|n| v.name == n))
        .filter(|v| statuses.is_empty() || statuses.contains(&v.status.as_str()))
        .filter(|v| sel.as_ref().is_none_or(|t| matches(t, &v.labels)))
        .collect::<Vec<_>>();
    paged_with(&q, "servers", items, |v| s.server_json(v))
}

pub(super) async fn get_server(State(state): State<Shared>, Path(id): Path<String>) -> ApiResult {
    let id = server_id(&id)?;
    let mut s = lock(&state);
    let v = s.visible_server(id)?.clone();
    Ok(Json(json!({"server": s.server_json(&v)})).into_response())
}

/// `PUT /servers/{id}`: `name` and `labels`; the labels given replace all of the server's labels.
pub(super) async fn update_server(
    State(state): State<Shared>,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult {
    let id = server_id(&id)?;
    let b = body_json(&body)?;
    let labels = labels_of(&b)?;
    let name = b.get("name").and_then(Value::as_str).map(str::to_string);
    let mut s = lock(&state);
    s.visible_server(id)?;
    if let Some(n) = &name {
        if s.servers.values().any(|v| v.id != id && &v.name == n) {
            return Err(ApiError(
                StatusCode::CONFLICT,
                "uniqueness_error",
                "server name is already used".into(),
            ));
        }
    }
    let v = s.visible_server(id)?;
    if let Some(l) = labels {
        v.labels = l;
    }
    if let Some(n) = name {
        v.name = n;
    }
    let v = v.clone();
    Ok(Json(json!({"server": s.server_json(&v)})).into_response())
}

pub(super) async fn delete_server(
    State(state): State<Shared>,
    Path(id): Path<String>,
) -> ApiResult {
    let id = server_id(&id)?;
    let mut s = lock(&state);
    s.visible_server(id)?;
    s.check_unlocked(id)?;
    s.visible_server(id)?.status = "deleting".into();
    let a = s.action("delete_server", id, Effect::Delete);
    Ok(Json(json!({"action": s.action_json(a)})).into_response())
}

pub(super) async fn create_server(State(state): State<Shared>, body: Bytes) -> ApiResult {
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
    let labels = labels_of(&b)?.unwrap_or_default();
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
            "unsupported location for server type".into(),
        ));
    }
    if t.unavailable() {
        return Err(ApiError(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_server_type",
            format!(
                "server type {} is deprecated and can no longer be ordered",
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
    let mut networks = Vec::new();
    if let Some(ns) = b.get("networks").and_then(Value::as_array) {
        for n in ns {
            let id = n
                .as_i64()
                .ok_or_else(|| invalid("networks[] must be network ids"))?;
            let index = s
                .networks
                .iter()
                .position(|(nid, _)| *nid == id)
                .ok_or_else(|| invalid(format!("network {id} not found")))?;
            networks.push((id, index));
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
            "error during placement".into(),
        ));
    }
    let id = s.next();
    // One address a server in each network: 10.<network>.0.<n>, n counting that network's members.
    let networks = networks
        .into_iter()
        .map(|(nid, index)| {
            let members = s
                .servers
                .values()
                .filter(|v| v.networks.iter().any(|(x, _)| *x == nid))
                .count();
            (nid, format!("10.{}.0.{}", index % 250, members % 250 + 2))
        })
        .collect();
    let visible_at = Instant::now() + s.visibility_delay;
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
            created: rfc3339_now(),
            visible_at,
            firewalls,
            networks,
            ssh_keys: ssh_keys.clone(),
            user_data,
        },
    );
    let a = s.action("create_server", id, Effect::Create);
    if let Some(fail) = s.fail_next_create.take() {
        if let Some(x) = s.actions.get_mut(&a) {
            x.fail = Some(fail);
        }
    }
    // `start_after_create` (default true): the start is a next action of the create, as Hetzner's.
    let mut next_actions = Vec::new();
    if b.get("start_after_create").and_then(Value::as_bool) != Some(false) {
        let n = s.next_action("start_server", id, Effect::Start);
        if let Some(msg) = s.fail_next_start.take() {
            if let Some(x) = s.actions.get_mut(&n) {
                x.fail = Some(("action_failed".into(), msg));
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

pub(super) async fn server_action(
    State(state): State<Shared>,
    Path((id, command)): Path<(String, String)>,
    body: Bytes,
) -> ApiResult {
    let id = server_id(&id)?;
    let mut s = lock(&state);
    let status = s.visible_server(id)?.status.clone();
    s.check_unlocked(id)?;
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
            if new.unavailable() {
                return Err(ApiError(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "invalid_server_type",
                    format!("server type {t} is deprecated and can no longer be ordered"),
                ));
            }
            if status != "off" {
                return Err(ApiError(
                    StatusCode::CONFLICT,
                    "server_not_stopped",
                    "server must be stopped to change its type".into(),
                ));
            }
            // The new type must be placed in the server's location, as a create's would be.
            if s.no_stock
                .contains(&(t.clone(), s.servers[&id].location.clone()))
            {
                return Err(ApiError(
                    StatusCode::PRECONDITION_FAILED,
                    "resource_unavailable",
                    "error during placement".into(),
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
