//! What the driver reads from Hetzner's answers, and nothing more, read leniently.
//!
//! Hetzner removes fields and adds values over time (the `datacenter` of servers went away in 2026,
//! the `deprecated` flag of server types is being phased out for per-location deprecations, and new
//! statuses and enum values appear). The strict models generated from the OpenAPI document fail a
//! whole listing on one such change; these models read only the fields the driver uses, take a
//! default for any that is absent or `null`, and keep every enum value as the cloud's own word (a
//! string), so that a new status reads as [`Status::Unknown`](orca_machines::Status::Unknown) with
//! the cloud's word kept, never as an error. Only the ids, without which an answer means nothing,
//! are required (and a server type's name, by which it is looked up).

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer};

/// A field's value, or its default when the field is `null` (absent fields take `#[serde(default)]`).
fn nullable<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// Something referred to by name (a server's `server_type`, `location`, `image`).
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct Named {
    #[serde(default, deserialize_with = "nullable")]
    pub name: String,
}

/// A server (`GET /servers/{id}`, `GET /servers`, the create and update answers).
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Server {
    pub id: i64,
    #[serde(default, deserialize_with = "nullable")]
    pub name: String,
    /// `initializing`, `starting`, `running`, `stopping`, `off`, `deleting`, `migrating`,
    /// `rebuilding`, `unknown`, or any later word.
    #[serde(default, deserialize_with = "nullable")]
    pub status: String,
    /// When the server was made (RFC 3339).
    #[serde(default, deserialize_with = "nullable")]
    pub created: String,
    #[serde(default, deserialize_with = "nullable")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, deserialize_with = "nullable")]
    pub server_type: Named,
    #[serde(default, deserialize_with = "nullable")]
    pub location: Named,
    #[serde(default, deserialize_with = "nullable")]
    pub public_net: PublicNet,
    #[serde(default, deserialize_with = "nullable")]
    pub private_net: Vec<PrivateNet>,
}

/// A server's public addresses.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct PublicNet {
    /// `null` for a server made without a public IPv4 address.
    #[serde(default)]
    pub ipv4: Option<Ipv4>,
}

/// A server's public IPv4 address and its reverse DNS entry.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct Ipv4 {
    #[serde(default, deserialize_with = "nullable")]
    pub ip: String,
    #[serde(default, deserialize_with = "nullable")]
    pub dns_ptr: String,
}

/// A server's address in one private network.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct PrivateNet {
    #[serde(default, deserialize_with = "nullable")]
    pub network: i64,
    #[serde(default, deserialize_with = "nullable")]
    pub ip: String,
}

/// A deprecation notice: when it was announced, and after when the thing can no longer be ordered.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct Deprecation {
    #[serde(default, deserialize_with = "nullable")]
    pub announced: String,
    #[serde(default, deserialize_with = "nullable")]
    pub unavailable_after: String,
}

/// A server type's details in one location.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct TypeLocation {
    #[serde(default, deserialize_with = "nullable")]
    pub name: String,
    #[serde(default)]
    pub deprecation: Option<Deprecation>,
}

/// An amount of money, as decimal strings.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct Amount {
    #[serde(default, deserialize_with = "nullable")]
    pub net: String,
}

/// A server type's price in one location.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct TypePrice {
    #[serde(default, deserialize_with = "nullable")]
    pub location: String,
    #[serde(default, deserialize_with = "nullable")]
    pub price_hourly: Amount,
}

/// A server type (`GET /server_types`).
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct ServerType {
    pub name: String,
    /// `x86`, `arm`, or any later word.
    #[serde(default, deserialize_with = "nullable")]
    pub architecture: String,
    #[serde(default, deserialize_with = "nullable")]
    pub prices: Vec<TypePrice>,
    /// The type-wide flag being phased out (absent on newer answers).
    #[serde(default)]
    pub deprecated: Option<bool>,
    /// The type-wide notice being phased out for the per-location ones.
    #[serde(default)]
    pub deprecation: Option<Deprecation>,
    /// Where the type is offered, each with its own deprecation notice.
    #[serde(default, deserialize_with = "nullable")]
    pub locations: Vec<TypeLocation>,
}

impl ServerType {
    /// The deprecation that applies to ordering this type in `location`: the location's own notice,
    /// else the type-wide one (or the type-wide flag alone, with no dates).
    pub fn deprecation_in(&self, location: &str) -> Option<Deprecation> {
        self.locations
            .iter()
            .find(|l| l.name == location)
            .and_then(|l| l.deprecation.clone())
            .or_else(|| self.deprecation.clone())
            .or_else(|| (self.deprecated == Some(true)).then(Deprecation::default))
    }

    /// Whether the type lists `location` among those it is offered in (an answer without the list
    /// says nothing, and is not held against the location).
    pub fn offered_in(&self, location: &str) -> bool {
        self.locations.is_empty() || self.locations.iter().any(|l| l.name == location)
    }
}

/// An action's error.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct ActionError {
    #[serde(default, deserialize_with = "nullable")]
    pub code: String,
    #[serde(default, deserialize_with = "nullable")]
    pub message: String,
}

/// An action (`GET /actions?id=..`, and every change's answer).
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Action {
    pub id: i64,
    #[serde(default, deserialize_with = "nullable")]
    pub command: String,
    /// `running`, `success`, `error`, or any later word (read as still running).
    #[serde(default, deserialize_with = "nullable")]
    pub status: String,
    #[serde(default)]
    pub error: Option<ActionError>,
}

/// An image (`GET /images`).
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Image {
    pub id: i64,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    pub architecture: String,
}

/// `{"image": {...}}`.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct ImageAnswer {
    pub image: Image,
}

/// A resource known by id and name (firewalls, networks).
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct IdName {
    pub id: i64,
    #[serde(default, deserialize_with = "nullable")]
    pub name: String,
}

/// `meta.pagination` of a listing.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct Pagination {
    #[serde(default)]
    pub next_page: Option<i64>,
    #[serde(default)]
    pub total_entries: Option<i64>,
}

/// `meta` of a listing.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct Meta {
    #[serde(default, deserialize_with = "nullable")]
    pub pagination: Pagination,
}

/// `{"server": ...}`.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct ServerAnswer {
    pub server: Server,
}

/// `{"servers": [...], "meta": ...}`.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Servers {
    #[serde(default, deserialize_with = "nullable")]
    pub servers: Vec<Server>,
    #[serde(default, deserialize_with = "nullable")]
    pub meta: Meta,
}

/// The answer to `POST /servers`.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct CreatedServer {
    pub server: Server,
    pub action: Action,
    #[serde(default, deserialize_with = "nullable")]
    pub next_actions: Vec<Action>,
}

/// `{"action": ...}`.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct ActionAnswer {
    pub action: Action,
}

/// The answer to `DELETE /servers/{id}` (an action; older answers had none).
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Deleted {
    #[serde(default)]
    pub action: Option<Action>,
}

/// `{"actions": [...]}`.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Actions {
    #[serde(default, deserialize_with = "nullable")]
    pub actions: Vec<Action>,
}

/// `{"server_types": [...]}`.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct ServerTypes {
    #[serde(default, deserialize_with = "nullable")]
    pub server_types: Vec<ServerType>,
}

/// `{"images": [...]}`.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Images {
    #[serde(default, deserialize_with = "nullable")]
    pub images: Vec<Image>,
}

/// `{"firewalls": [...]}`.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Firewalls {
    #[serde(default, deserialize_with = "nullable")]
    pub firewalls: Vec<IdName>,
}

/// `{"networks": [...]}`.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Networks {
    #[serde(default, deserialize_with = "nullable")]
    pub networks: Vec<IdName>,
}

/// Hetzner's error body: `{"error": {"code", "message", "details"}}`.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct ErrorBody {
    pub error: ErrorDetail,
}

/// The error of an error body.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct ErrorDetail {
    #[serde(default, deserialize_with = "nullable")]
    pub code: String,
    #[serde(default, deserialize_with = "nullable")]
    pub message: String,
    #[serde(default)]
    pub details: Option<serde_json::Value>,
}

impl ErrorDetail {
    /// The first field an `invalid_input` error names (`details.fields[0].name`).
    pub fn field(&self) -> Option<String> {
        self.details
            .as_ref()?
            .get("fields")?
            .get(0)?
            .get("name")?
            .as_str()
            .map(str::to_string)
    }
}
