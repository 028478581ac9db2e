//! Answers written from Hetzner Cloud's published API reference (`https://docs.hetzner.cloud`: the
//! server, server type and error sections, and the changelog's removals), served in place of the
//! fake's own through its fault rules, that the driver must read or classify: full objects and
//! objects with every optional field absent or `null`, values the reference does not list yet, paged
//! answers, and an error body of each documented code.

use crate::common;

use axum::http::Method;
use orca_fakes::hetzner::FakeHetzner;
use orca_fakes::{Fault, Rule};
use orca_hetzner::HetznerProvider;
use orca_machines::{Error, ErrorKind, MachineSpec, Provider, RetryPolicy, Status};
use serde_json::{json, Value};

fn answer(fake: &FakeHetzner, method: Method, path: &str, status: u16, body: Value) {
    fake.control().inject(Rule::new(
        Some(method),
        path,
        Fault::Status {
            status,
            body,
            headers: vec![],
        },
        1,
    ));
}

fn owned() -> Value {
    json!({"orca": "pool", "orca-pool": "lab", "orca-owner": "me"})
}

/// A server as the reference's example shows it, today (no `datacenter`).
fn full_server() -> Value {
    json!({
        "id": 42,
        "name": "my-resource",
        "status": "running",
        "created": "2016-01-30T23:55:00+00:00",
        "public_net": {
            "ipv4": {"id": 42, "ip": "1.2.3.4", "blocked": false, "dns_ptr": "server01.example.com"},
            "ipv6": {"id": 42, "ip": "2001:db8::/64", "blocked": false,
                     "dns_ptr": [{"ip": "2001:db8::1", "dns_ptr": "server.example.com"}]},
            "floating_ips": [478],
            "firewalls": [{"id": 42, "status": "applied"}]
        },
        "private_net": [{"network": 4711, "ip": "10.0.0.2", "alias_ips": ["10.0.0.3"],
                         "mac_address": "86:00:ff:2a:7d:e1"}],
        "server_type": {"id": 1, "name": "cpx22", "description": "CPX22", "category": "regular_purpose",
                        "cores": 2, "memory": 4, "disk": 80, "prices": [], "storage_type": "local",
                        "cpu_type": "shared", "architecture": "x86", "locations": []},
        "location": {"id": 1, "name": "fsn1", "description": "Falkenstein DC Park 1", "country": "DE",
                     "city": "Falkenstein", "latitude": 50.47612, "longitude": 12.370071,
                     "network_zone": "eu-central"},
        "image": {"id": 42, "type": "system", "status": "available", "name": "ubuntu-24.04",
                  "description": "Ubuntu 24.04", "architecture": "x86"},
        "iso": null,
        "rescue_enabled": false,
        "locked": false,
        "backup_window": "22-02",
        "outgoing_traffic": 123456,
        "ingoing_traffic": 123456,
        "included_traffic": 654321,
        "protection": {"delete": false, "rebuild": false},
        "labels": owned(),
        "volumes": [],
        "load_balancers": [],
        "primary_disk_size": 50,
        "placement_group": null
    })
}

fn list(servers: Vec<Value>, page: i64, next: Option<i64>) -> Value {
    json!({"servers": servers, "meta": {"pagination": {"page": page, "per_page": 50,
        "previous_page": if page > 1 { json!(page - 1) } else { Value::Null },
        "next_page": next, "last_page": 2, "total_entries": 3}}})
}

#[tokio::test]
async fn full_sparse_and_newer_servers_over_two_pages() {
    let fake = FakeHetzner::start().await.unwrap();
    let p = common::provider(&fake, "me").await;
    // Every optional field absent or null: no image, no public IPv4, no private network.
    let sparse = json!({
        "id": 43, "name": "sparse", "status": "initializing", "created": "2026-07-01T10:00:00Z",
        "public_net": {"ipv4": null, "ipv6": null, "floating_ips": [], "firewalls": []},
        "private_net": [], "server_type": {"name": "cx23"}, "location": {"name": "nbg1"},
        "image": null, "labels": owned()
    });
    // A status and fields the reference does not list yet, and a `datacenter` as older answers had.
    let mut newer = full_server();
    newer["id"] = json!(44);
    newer["name"] = json!("newer");
    newer["status"] = json!("suspended_for_maintenance");
    newer["datacenter"] = json!({"id": 1, "name": "fsn1-dc8"});
    newer["some_new_field"] = json!({"nested": [1, 2, 3]});
    newer["public_net"]["ipv4"]["dns_ptr"] = Value::Null;
    answer(
        &fake,
        Method::GET,
        "page=1&",
        200,
        list(vec![full_server(), sparse], 1, Some(2)),
    );
    answer(
        &fake,
        Method::GET,
        "page=2&",
        200,
        list(vec![newer], 2, None),
    );
    let got = p.machines("lab").await.unwrap();
    assert_eq!(
        fake.control().count(&Method::GET, "/v1/servers?"),
        2,
        "both pages"
    );
    let ids: Vec<&str> = got.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(ids, ["42", "43", "44"]);
    let full = &got[0];
    assert_eq!(
        (
            full.status,
            full.machine_type.as_str(),
            full.location.as_str()
        ),
        (Status::Running, "cpx22", "fsn1")
    );
    assert_eq!(
        (
            full.address.as_str(),
            full.fqdn.as_str(),
            full.private_address.as_str()
        ),
        ("1.2.3.4", "server01.example.com", "10.0.0.2")
    );
    assert_eq!(
        full.created_at.unwrap().to_rfc3339(),
        "2016-01-30T23:55:00+00:00"
    );
    assert_eq!(full.pool, "lab");
    let sparse = &got[1];
    assert_eq!(
        (sparse.status, sparse.address.as_str(), sparse.fqdn.as_str()),
        (Status::Starting, "", "")
    );
    assert_eq!(sparse.private_address, "");
    assert_eq!(
        sparse.created_at.unwrap().to_rfc3339(),
        "2026-07-01T10:00:00+00:00"
    );
    let newer = &got[2];
    assert_eq!(
        (
            newer.status,
            newer.cloud_status.as_str(),
            newer.fqdn.as_str()
        ),
        (Status::Unknown, "suspended_for_maintenance", "")
    );
}

/// A server type in the reference's shape, before or after the phase-out of `deprecated`.
fn server_type(name: &str, arch: &str, extra: Value) -> Value {
    let mut t = json!({
        "id": 104, "name": name, "description": name.to_uppercase(), "category": "cost_optimized",
        "cores": 2, "memory": 4, "disk": 40, "storage_type": "local", "cpu_type": "shared",
        "architecture": arch,
        "prices": [{"location": "fsn1", "price_hourly": {"net": "1.0000", "gross": "1.1900"},
                    "price_monthly": {"net": "1.0000", "gross": "1.1900"},
                    "included_traffic": 654321, "price_per_tb_traffic": {"net": "1.0000", "gross": "1.1900"}}],
        "locations": [{"id": 1, "name": "fsn1", "deprecation": null}]
    });
    for (k, v) in extra.as_object().unwrap() {
        t[k] = v.clone();
    }
    json!({"server_types": [t], "meta": {"pagination": {"page": 1, "per_page": 25,
        "previous_page": null, "next_page": null, "last_page": 1, "total_entries": 1}}})
}

#[tokio::test]
async fn server_types_before_during_and_after_the_phase_out() {
    let fake = FakeHetzner::start().await.unwrap();
    let p = common::provider(&fake, "me").await;
    // Before: the flag and the type-wide notice, both null or false.
    answer(
        &fake,
        Method::GET,
        "name=old-shape",
        200,
        server_type(
            "old-shape",
            "x86",
            json!({"deprecated": false, "deprecation": null}),
        ),
    );
    assert_eq!(p.arch("old-shape").await.unwrap().as_str(), "amd64");
    // After: neither, a new CPU type, and an architecture the reference does not list yet.
    answer(
        &fake,
        Method::GET,
        "name=next-gen",
        200,
        server_type("next-gen", "riscv64", json!({"cpu_type": "hybrid"})),
    );
    assert_eq!(p.arch("next-gen").await.unwrap().as_str(), "riscv64");
    assert!(
        (p.hourly_price("next-gen", "fsn1").await.unwrap().hourly - 1.0).abs() < 1e-9,
        "cached type read"
    );
    // During: deprecated by the type-wide notice only, or by the flag only: refused before a create.
    for (name, extra) in [
        (
            "wide-notice",
            json!({"deprecation": {"announced": "2025-09-24T00:00:00+00:00",
                                   "unavailable_after": "2025-12-24T00:00:00+00:00"}}),
        ),
        ("flag-only", json!({"deprecated": true})),
    ] {
        answer(
            &fake,
            Method::GET,
            &format!("name={name}"),
            200,
            server_type(name, "x86", extra),
        );
        let e = p
            .create(&MachineSpec::new("dep-1", name, "fsn1", "lab"))
            .await
            .unwrap_err();
        assert!(
            matches!(e, Error::InvalidSpec { ref field, ref rule } if field == "machine_type" && rule.contains("deprecated")),
            "{name}: {e:?}"
        );
    }
    assert_eq!(fake.control().count(&Method::POST, "/v1/servers"), 0);
}

#[tokio::test]
async fn error_bodies_of_each_documented_code() {
    let fake = FakeHetzner::start().await.unwrap();
    let p = HetznerProvider::new(
        common::builder(&fake)
            .retry(RetryPolicy::NEVER)
            .build()
            .unwrap(),
        "me",
    )
    .await
    .unwrap();
    for (status, code, kind) in [
        (403, "forbidden", ErrorKind::PermissionDenied),
        (401, "unauthorized", ErrorKind::Unauthenticated),
        (400, "invalid_input", ErrorKind::InvalidSpec),
        (400, "json_error", ErrorKind::InvalidSpec),
        (423, "locked", ErrorKind::Busy),
        (404, "not_found", ErrorKind::NotFound),
        (429, "rate_limit_exceeded", ErrorKind::Throttled),
        (403, "resource_limit_exceeded", ErrorKind::Quota),
        (412, "resource_unavailable", ErrorKind::NoStock),
        (500, "server_error", ErrorKind::Transient),
        (503, "service_error", ErrorKind::Transient),
        (409, "uniqueness_error", ErrorKind::AlreadyExists),
        (423, "protected", ErrorKind::PermissionDenied),
        (503, "maintenance", ErrorKind::Transient),
        (409, "conflict", ErrorKind::Transient),
        (400, "unsupported_error", ErrorKind::Other),
        (403, "token_readonly", ErrorKind::PermissionDenied),
        (503, "unavailable", ErrorKind::Transient),
        (504, "timeout", ErrorKind::Transient),
        (410, "deprecated_api_endpoint", ErrorKind::Other),
        (422, "placement_error", ErrorKind::NoStock),
        (422, "invalid_server_type", ErrorKind::InvalidSpec),
        (409, "server_not_stopped", ErrorKind::Other),
        (418, "a_code_added_later", ErrorKind::Other),
    ] {
        answer(
            &fake,
            Method::GET,
            "/v1/servers?",
            status,
            json!({"error": {"code": code, "message": "words that are never matched", "details": {}}}),
        );
        let e = p.machines("lab").await.unwrap_err();
        // The core's InvalidSpec has no context (it is meant for errors raised before any call), so
        // the cloud's code of bad input is not kept; every other kind keeps code and operation.
        let (want_code, want_op) = if kind == ErrorKind::InvalidSpec {
            (None, None)
        } else {
            (Some(code), Some("servers.list"))
        };
        assert_eq!((e.kind(), e.code()), (kind, want_code), "{code}: {e:?}");
        assert_eq!(e.operation(), want_op, "{code}");
    }
    // `invalid_input` names its field in `details.fields`.
    answer(
        &fake,
        Method::GET,
        "/v1/servers?",
        400,
        json!({"error": {"code": "invalid_input", "message": "invalid input in field 'label_selector'",
               "details": {"fields": [{"name": "label_selector", "messages": ["is invalid"]}]}}}),
    );
    match p.machines("lab").await.unwrap_err() {
        Error::InvalidSpec { field, .. } => assert_eq!(field, "label_selector"),
        other => panic!("{other:?}"),
    }
    // A body that is not Hetzner's (a proxy's page): the status decides.
    answer(
        &fake,
        Method::GET,
        "/v1/servers?",
        502,
        json!("<html>bad gateway</html>"),
    );
    let e = p.machines("lab").await.unwrap_err();
    assert_eq!((e.kind(), e.code()), (ErrorKind::Transient, None));
}

#[tokio::test]
async fn the_clouds_error_is_kept_as_the_source() {
    let fake = FakeHetzner::start().await.unwrap();
    let p = HetznerProvider::new(
        common::builder(&fake)
            .retry(RetryPolicy::NEVER)
            .build()
            .unwrap(),
        "me",
    )
    .await
    .unwrap();
    answer(
        &fake,
        Method::GET,
        "/v1/servers?",
        403,
        json!({"error": {"code": "forbidden", "message": "insufficient permissions", "details": {}}}),
    );
    let e = p.machines("lab").await.unwrap_err();
    let source = std::error::Error::source(&e).expect("a source");
    let api = source
        .downcast_ref::<orca_hetzner::ApiError>()
        .expect("the cloud's error");
    assert_eq!(
        (api.status(), api.code(), api.message()),
        (Some(403), "forbidden", "insufficient permissions")
    );
}
