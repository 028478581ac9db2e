//! What a project holds beside servers that a create refers to: SSH keys, firewalls, networks.

use axum::extract::{Query, State};
use serde_json::{json, Value};

use super::{lock, paged, param, ApiResult, Params, Shared};

/// When the project's resources were made.
const MADE: &str = "2025-06-01T00:00:00+00:00";

pub(super) async fn list_ssh_keys(State(state): State<Shared>, Query(q): Params) -> ApiResult {
    let name = param(&q, "name");
    let s = lock(&state);
    let items = s
        .ssh_keys
        .iter()
        .filter(|(_, n)| name.is_none_or(|x| n == x))
        .map(|(id, n)| {
            json!({"id": id, "name": n, "fingerprint": format!("b7:2f:30:a0:2f:6c:58:6c:21:04:58:61:ba:06:3b:{:02x}", id % 256),
                   "public_key": format!("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFake{id} {n}"), "labels": {}, "created": MADE})
        })
        .collect();
    paged(&q, "ssh_keys", items)
}

pub(super) async fn list_firewalls(State(state): State<Shared>, Query(q): Params) -> ApiResult {
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
            json!({"id": id, "name": n, "labels": {}, "created": MADE, "rules": [], "applied_to": applied})
        })
        .collect();
    paged(&q, "firewalls", items)
}

pub(super) async fn list_networks(State(state): State<Shared>, Query(q): Params) -> ApiResult {
    let name = param(&q, "name");
    let s = lock(&state);
    let items = s
        .networks
        .iter()
        .enumerate()
        .filter(|(_, (_, n))| name.is_none_or(|x| n == x))
        .map(|(index, (id, n))| {
            let range = format!("10.{}.0.0/16", index % 250);
            let members: Vec<i64> = s
                .servers
                .values()
                .filter(|v| v.networks.iter().any(|(x, _)| x == id))
                .map(|v| v.id)
                .collect();
            json!({"id": id, "name": n, "ip_range": range, "labels": {}, "created": MADE,
                   "subnets": [{"type": "cloud", "ip_range": format!("10.{}.0.0/24", index % 250),
                                "network_zone": "eu-central", "gateway": format!("10.{}.0.1", index % 250)}],
                   "routes": [], "servers": members, "load_balancers": [],
                   "protection": {"delete": false}, "expose_routes_to_vswitch": false})
        })
        .collect();
    paged(&q, "networks", items)
}
