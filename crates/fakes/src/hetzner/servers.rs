//! Servers: list, create, get, update, delete, and their power and type actions.

use std::collections::BTreeMap;
use tokio::time::Instant;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Json;
use serde_json::{json, Value};

use super::actions::Effect;
use super::catalogue::{image_json, location_json};
use super::selector::{matches, selector, valid_key, valid_value};
use super::{
    deprecated_type, invalid, lock, name_taken, not_found, paged_with, param, params, ApiError,
    ApiResult, Params, Shared, State_,
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
        let t = self.server_type(&s.server_type);
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

pub(super) fn body_json(body: &Bytes) -> Result<Value, ApiError> {
    serde_json::from_slice(body).map_err(|e| {
        ApiError(
            StatusCode::BAD_REQUEST,
            "json_error",
            format!("invalid JSON: {e}"),
        )
    })
}

/// Labels of a request body: an object of strings, each key and value valid.
pub(super) fn labels_of(b: &Value) -> Result<Option<BTreeMap<String, String>>, ApiError> {
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
    let mut s = lock(&state);
    let items = s
        .servers
        .values()
        .filter(|v| v.visible())
        .filter(|v| name.is_none_or(|n| v.name == n))
        .filter(|v| statuses.is_empty() || statuses.contains(&v.status.as_str()))
        .filter(|v| sel.as_ref().is_none_or(|t| matches(t, &v.labels)))
        .collect::<Vec<_>>();
    let first = items.first().map(|v| v.id);
    let totals = !s.hide_totals;
    let answer = paged_with(&q, "servers", items, totals, |v| s.server_json(v));
    let page = param(&q, "page")
        .and_then(|p| p.parse::<i64>().ok())
        .unwrap_or(1);
    if s.delete_after_page == Some(page) {
        s.delete_after_page = None;
        if let Some(id) = first {
            s.servers.remove(&id);
        }
    }
    answer
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
            return Err(name_taken());
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
            let cur_arch = s.server_type(&s.servers[&id].server_type).map(|x| x.arch);
            let new = s
                .server_type(&t)
                .ok_or_else(|| invalid(format!("server type {t} not found")))?;
            if Some(new.arch) != cur_arch {
                return Err(invalid(
                    "cannot change to a server type of another architecture",
                ));
            }
            if new.unavailable() {
                return Err(deprecated_type(&t));
            }
            let here = s.servers[&id].location.clone();
            if !new.locations.contains(&here.as_str()) {
                return Err(ApiError(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "invalid_server_type",
                    format!("server type {t} is not available in location {here}"),
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
            s.placeable(&t, &s.servers[&id].location)?;
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
