//! `POST /servers`: the request read and checked, the type, image and project resources it names
//! looked up, then the server made with its create action (and `start_server` as its next action).

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Json;
use serde_json::{json, Value};

use super::actions::Effect;
use super::catalogue::{ServerType, IMAGES, LOCATIONS};
use super::servers::{body_json, labels_of, Server};
use super::{
    deprecated_type, invalid, lock, name_taken, rfc3339_now, ApiError, ApiResult, Shared, State_,
};

/// A create's body, read and checked before the project is looked at.
struct CreateBody {
    name: String,
    server_type: String,
    image: String,
    location: String,
    labels: std::collections::BTreeMap<String, String>,
    user_data: Option<String>,
    start: bool,
}

fn create_body(b: &Value) -> Result<CreateBody, ApiError> {
    let str_field = |k: &str| b.get(k).and_then(Value::as_str).map(str::to_string);
    let name = str_field("name").ok_or_else(|| invalid("name is required"))?;
    let server_type = str_field("server_type").ok_or_else(|| invalid("server_type is required"))?;
    let image = str_field("image").ok_or_else(|| invalid("image is required"))?;
    let location = str_field("location").unwrap_or_else(|| "fsn1".into());
    let ok_name = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'.');
    if !ok_name {
        return Err(invalid("name must be a valid hostname"));
    }
    let labels = labels_of(b)?.unwrap_or_default();
    let user_data = str_field("user_data");
    if user_data.as_ref().is_some_and(|u| u.len() > 32 * 1024) {
        return Err(invalid("user_data is longer than 32 KiB"));
    }
    Ok(CreateBody {
        name,
        server_type,
        image,
        location,
        labels,
        user_data,
        // `start_after_create` (default true).
        start: b.get("start_after_create").and_then(Value::as_bool) != Some(false),
    })
}

/// The project's SSH keys, firewalls and networks a create names (networks with their index).
type Refs = (Vec<String>, Vec<i64>, Vec<(i64, usize)>);

impl State_ {
    /// The type a create names, when it can be ordered in `location`.
    fn orderable(&self, type_name: &str, location: &str) -> Result<ServerType, ApiError> {
        let t = self
            .types
            .iter()
            .find(|t| t.name == type_name || t.id.to_string() == type_name)
            .cloned()
            .ok_or_else(|| invalid(format!("server type {type_name} not found")))?;
        if !LOCATIONS.iter().any(|l| l.1 == location) {
            return Err(invalid(format!("location {location} not found")));
        }
        if !t.locations.contains(&location) {
            return Err(ApiError(
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid_input",
                "unsupported location for server type".into(),
            ));
        }
        if t.unavailable() {
            return Err(deprecated_type(t.name));
        }
        Ok(t)
    }

    /// `resource_unavailable` ("error during placement", as Hetzner words it) while `type_name` is
    /// out of stock in `location`.
    pub(super) fn placeable(&self, type_name: &str, location: &str) -> Result<(), ApiError> {
        if self
            .no_stock
            .contains(&(type_name.to_string(), location.to_string()))
        {
            return Err(ApiError(
                StatusCode::PRECONDITION_FAILED,
                "resource_unavailable",
                "error during placement".into(),
            ));
        }
        Ok(())
    }

    /// The SSH keys, firewalls and networks body `b` names, each of which must exist.
    fn project_refs(&self, b: &Value) -> Result<Refs, ApiError> {
        let listed = |k: &str| b.get(k).and_then(Value::as_array).into_iter().flatten();
        let mut ssh_keys = Vec::new();
        for k in listed("ssh_keys") {
            let k = match k {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            if !self
                .ssh_keys
                .iter()
                .any(|(id, n)| *n == k || id.to_string() == k)
            {
                return Err(invalid(format!("ssh key {k} not found")));
            }
            ssh_keys.push(k);
        }
        let mut firewalls = Vec::new();
        for f in listed("firewalls") {
            let id = f
                .get("firewall")
                .and_then(Value::as_i64)
                .ok_or_else(|| invalid("firewalls[].firewall must be an id"))?;
            if !self.firewalls.iter().any(|(fid, _)| *fid == id) {
                return Err(invalid(format!("firewall {id} not found")));
            }
            firewalls.push(id);
        }
        let mut networks = Vec::new();
        for n in listed("networks") {
            let id = n
                .as_i64()
                .ok_or_else(|| invalid("networks[] must be network ids"))?;
            let index = self
                .networks
                .iter()
                .position(|(nid, _)| *nid == id)
                .ok_or_else(|| invalid(format!("network {id} not found")))?;
            networks.push((id, index));
        }
        Ok((ssh_keys, firewalls, networks))
    }

    /// One address a server in each network: 10.<network>.0.<n>, n counting that network's members.
    fn addresses(&self, networks: Vec<(i64, usize)>) -> Vec<(i64, String)> {
        networks
            .into_iter()
            .map(|(nid, index)| {
                let members = self
                    .servers
                    .values()
                    .filter(|v| v.networks.iter().any(|(x, _)| *x == nid))
                    .count();
                (nid, format!("10.{}.0.{}", index % 250, members % 250 + 2))
            })
            .collect()
    }
}

/// The image a create names for type `t`: by id it must match the type's architecture; by name it
/// resolves to that architecture.
fn image_for(image_ref: &str, t: &ServerType) -> Result<i64, ApiError> {
    match image_ref.parse::<i64>() {
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
            Ok(id)
        }
        Err(_) => Ok(IMAGES
            .iter()
            .find(|i| i.1 == image_ref && i.2 == t.arch)
            .ok_or_else(|| invalid(format!("image {image_ref} not found")))?
            .0),
    }
}

pub(super) async fn create_server(State(state): State<Shared>, body: Bytes) -> ApiResult {
    let b = body_json(&body)?;
    let c = create_body(&b)?;
    let mut s = lock(&state);
    let t = s.orderable(&c.server_type, &c.location)?;
    let image = image_for(&c.image, &t)?;
    let (ssh_keys, firewalls, networks) = s.project_refs(&b)?;
    if s.servers.values().any(|v| v.name == c.name) {
        return Err(name_taken());
    }
    s.placeable(t.name, &c.location)?;
    let id = s.next();
    let networks = s.addresses(networks);
    let visible_at = tokio::time::Instant::now() + s.visibility_delay;
    s.servers.insert(
        id,
        Server {
            id,
            name: c.name,
            server_type: t.name.to_string(),
            location: c.location,
            image,
            labels: c.labels,
            status: "initializing".into(),
            created: rfc3339_now(),
            visible_at,
            firewalls,
            networks,
            ssh_keys: ssh_keys.clone(),
            user_data: c.user_data,
        },
    );
    let a = s.action("create_server", id, Effect::Create);
    let fail = s.fail_next_create.take();
    if let Some(x) = s.actions.get_mut(&a) {
        x.fail = fail;
    }
    // The start is a next action of the create, as Hetzner's: it starts when the create ends.
    let mut next_actions = Vec::new();
    if c.start {
        let n = s.next_action("start_server", id, Effect::Start);
        let fail = s
            .fail_next_start
            .take()
            .map(|m| ("action_failed".into(), m));
        if let Some(x) = s.actions.get_mut(&n) {
            x.fail = fail;
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
