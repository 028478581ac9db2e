//! What a project can order: server types (with prices and per-location deprecations), images and
//! locations.

use axum::extract::{Path, Query, State};
use axum::response::IntoResponse;
use axum::Json;
use serde_json::{json, Value};

use super::{lock, not_found, paged, param, params, ApiResult, Params, Shared, State_};

/// A server type of the catalogue.
#[derive(Debug, Clone)]
pub(super) struct ServerType {
    pub id: i64,
    pub name: &'static str,
    pub arch: &'static str,
    pub cores: i64,
    pub memory: f64,
    pub disk: i64,
    pub cpu_type: &'static str,
    pub hourly_net: f64,
    pub locations: &'static [&'static str],
    /// Deprecated in every location it is offered in: (announced, unavailable after), RFC 3339.
    pub deprecated: Option<(String, String)>,
}

impl ServerType {
    /// Whether the type can no longer be ordered: its deprecation's `unavailable_after` is past.
    /// Until then a deprecated type is still sold, as Hetzner announces a deprecation months ahead.
    pub fn unavailable(&self) -> bool {
        self.deprecated.as_ref().is_some_and(|(_, until)| {
            chrono::DateTime::parse_from_rfc3339(until).map_or(true, |t| t <= chrono::Utc::now())
        })
    }
}

/// Locations: (id, name, description, country, city, latitude, longitude, network zone).
pub(super) type LocationRow = (
    i64,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    f64,
    f64,
    &'static str,
);

pub(super) const LOCATIONS: &[LocationRow] = &[
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
    (
        6,
        "hil",
        "Hillsboro, OR",
        "US",
        "Hillsboro, OR",
        45.54222,
        -122.951924,
        "us-west",
    ),
];

const EU: &[&str] = &["fsn1", "nbg1", "hel1"];
const ALL: &[&str] = &["fsn1", "nbg1", "hel1", "ash", "hil"];

/// When the no-longer-sold types were deprecated (illustrative dates in the reference's form).
const OLD_CX: (&str, &str) = ("2025-10-16T06:00:00+00:00", "2026-01-01T00:00:00+00:00");

fn t(
    id: i64,
    name: &'static str,
    arch: &'static str,
    (cores, memory, disk): (i64, f64, i64),
    cpu_type: &'static str,
    hourly_net: f64,
    locations: &'static [&'static str],
) -> ServerType {
    ServerType {
        id,
        name,
        arch,
        cores,
        memory,
        disk,
        cpu_type,
        hourly_net,
        locations,
        deprecated: None,
    }
}

/// The catalogue: types on sale today, and two that are no longer sold.
pub(super) fn catalogue() -> Vec<ServerType> {
    let mut old22 = t(22, "cx22", "x86", (2, 4.0, 40), "shared", 0.006, EU);
    old22.deprecated = Some((OLD_CX.0.into(), OLD_CX.1.into()));
    let mut old32 = t(23, "cx32", "x86", (4, 8.0, 80), "shared", 0.0113, EU);
    old32.deprecated = Some((OLD_CX.0.into(), OLD_CX.1.into()));
    vec![
        t(114, "cx23", "x86", (2, 4.0, 40), "shared", 0.006, EU),
        t(115, "cx33", "x86", (4, 8.0, 80), "shared", 0.0113, EU),
        t(109, "cpx22", "x86", (3, 4.0, 80), "shared", 0.0088, ALL),
        t(45, "cax11", "arm", (2, 4.0, 40), "shared", 0.0063, EU),
        t(93, "cax21", "arm", (4, 8.0, 80), "shared", 0.0103, EU),
        t(96, "ccx13", "x86", (2, 8.0, 80), "dedicated", 0.02, ALL),
        old22,
        old32,
    ]
}

/// Images: (id, name, architecture).
pub(super) const IMAGES: &[(i64, &str, &str)] = &[
    (161547269, "ubuntu-24.04", "x86"),
    (161547270, "ubuntu-24.04", "arm"),
    (114690387, "debian-12", "x86"),
    (114690389, "debian-12", "arm"),
];

/// When the catalogue's images were made.
const IMAGES_CREATED: &str = "2024-04-25T00:00:00+00:00";

pub(super) fn price(net: f64) -> Value {
    json!({"net": format!("{net:.10}"), "gross": format!("{:.10}", net * 1.19)})
}

impl State_ {
    /// The catalogue's type named `name`.
    pub(super) fn server_type(&self, name: &str) -> Option<&ServerType> {
        self.types.iter().find(|t| t.name == name)
    }

    pub(super) fn type_json(&self, t: &ServerType) -> Value {
        let prices: Vec<Value> = t
            .locations
            .iter()
            .map(|l| {
                // A little dearer outside Germany, as on Hetzner's price list.
                let factor = if matches!(*l, "fsn1" | "nbg1") {
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
        let deprecation = t
            .deprecated
            .as_ref()
            .map(|(a, u)| json!({"announced": a, "unavailable_after": u}));
        // No `deprecated` flag and a null type-wide `deprecation`: both are being phased out for the
        // per-location notices.
        json!({
            "id": t.id,
            "name": t.name,
            "description": t.name.to_uppercase(),
            "category": if t.cpu_type == "dedicated" { "dedicated_general_purpose" } else { "cost_optimized" },
            "cores": t.cores,
            "memory": t.memory,
            "disk": t.disk,
            "cpu_type": t.cpu_type,
            "storage_type": "local",
            "architecture": t.arch,
            "deprecation": null,
            "locations": t.locations.iter().map(|l| {
                let id = LOCATIONS.iter().find(|x| x.1 == *l).map(|x| x.0).unwrap_or(0);
                let in_stock = !self.no_stock.contains(&(t.name.to_string(), l.to_string()));
                json!({"id": id, "name": l, "deprecation": deprecation,
                       "available": in_stock && !t.unavailable(), "recommended": t.deprecated.is_none()})
            }).collect::<Vec<_>>(),
            "prices": prices,
        })
    }
}

pub(super) fn image_json(id: i64) -> Value {
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
        "created": IMAGES_CREATED,
        "created_from": null,
        "bound_to": null,
        "deleted": null,
        "deprecated": null,
        "labels": {},
        "protection": {"delete": false},
    })
}

pub(super) fn location_json(name: &str) -> Value {
    let l = LOCATIONS
        .iter()
        .find(|l| l.1 == name)
        .copied()
        .unwrap_or(LOCATIONS[0]);
    json!({"id": l.0, "name": l.1, "description": l.2, "country": l.3, "city": l.4,
           "latitude": l.5, "longitude": l.6, "network_zone": l.7})
}

pub(super) async fn list_server_types(State(state): State<Shared>, Query(q): Params) -> ApiResult {
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

pub(super) async fn get_server_type(
    State(state): State<Shared>,
    Path(id): Path<String>,
) -> ApiResult {
    let s = lock(&state);
    let t = s
        .types
        .iter()
        .find(|t| t.id.to_string() == id)
        .ok_or_else(|| not_found("server type"))?;
    Ok(Json(json!({"server_type": s.type_json(t)})).into_response())
}

pub(super) async fn get_image(Path(id): Path<String>) -> ApiResult {
    let image = IMAGES
        .iter()
        .find(|i| i.0.to_string() == id)
        .ok_or_else(|| not_found("image"))?;
    Ok(Json(json!({"image": image_json(image.0)})).into_response())
}

pub(super) async fn list_images(Query(q): Params) -> ApiResult {
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

pub(super) async fn list_locations(Query(q): Params) -> ApiResult {
    let name = param(&q, "name");
    let items = LOCATIONS
        .iter()
        .filter(|l| name.is_none_or(|n| l.1 == n))
        .map(|l| location_json(l.1))
        .collect();
    paged(&q, "locations", items)
}
