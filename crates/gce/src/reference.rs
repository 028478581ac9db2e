//! Answers written from Compute Engine's published reference (the v1 discovery document's schemas,
//! and Google's documented JSON error format), which the driver must read or classify whatever our
//! fake does: full objects, objects with every optional field absent, values the enums do not list
//! yet, paged and aggregated answers, and the error bodies of each documented kind. A change of the
//! models or the error mapping that would break on a real answer fails here.

use std::time::Duration;

use orca_machines::{ErrorKind, Status};
use serde_json::{Value, json};

use crate::client::{http_error, operation_error};
use crate::model::{Firewall, Instance, InstanceAggregatedList, List, Operation};
use crate::provider::to_machine;

fn instance(v: Value) -> Instance {
    serde_json::from_value(v).expect("an instance the reference describes reads")
}

/// An instance with the fields the reference lists for a running VM made by orca (and some it
/// does not read).
fn full_instance() -> Value {
    json!({
        "kind": "compute#instance",
        "id": "7052289376245812345",
        "creationTimestamp": "2026-11-30T09:15:02.123-08:00",
        "name": "lab-1",
        "description": "",
        "tags": {"items": ["shed-lab"], "fingerprint": "6smc4R4d39I="},
        "machineType": "https://www.googleapis.com/compute/v1/projects/proj-1/zones/europe-west1-b/machineTypes/e2-small",
        "status": "RUNNING",
        "zone": "https://www.googleapis.com/compute/v1/projects/proj-1/zones/europe-west1-b",
        "canIpForward": false,
        "networkInterfaces": [{
            "kind": "compute#networkInterface",
            "network": "https://www.googleapis.com/compute/v1/projects/proj-1/global/networks/orca-net",
            "subnetwork": "https://www.googleapis.com/compute/v1/projects/proj-1/regions/europe-west1/subnetworks/orca-subnet",
            "networkIP": "10.132.0.7",
            "name": "nic0",
            "accessConfigs": [{
                "kind": "compute#accessConfig", "type": "ONE_TO_ONE_NAT", "name": "External NAT",
                "natIP": "34.76.10.20", "networkTier": "PREMIUM"
            }],
            "fingerprint": "aBcDeFgHiJk=",
            "stackType": "IPV4_ONLY"
        }],
        "disks": [{
            "kind": "compute#attachedDisk", "type": "PERSISTENT", "mode": "READ_WRITE",
            "source": "https://www.googleapis.com/compute/v1/projects/proj-1/zones/europe-west1-b/disks/lab-1",
            "deviceName": "persistent-disk-0", "index": 0, "boot": true, "autoDelete": true,
            "licenses": ["https://www.googleapis.com/compute/v1/projects/ubuntu-os-cloud/global/licenses/ubuntu-2404-lts"],
            "interface": "SCSI", "guestOsFeatures": [{"type": "VIRTIO_SCSI_MULTIQUEUE"}],
            "diskSizeGb": "20", "architecture": "X86_64"
        }],
        "metadata": {"kind": "compute#metadata", "fingerprint": "xyz=", "items": [{"key": "user-data", "value": "#cloud-config\n"}]},
        "selfLink": "https://www.googleapis.com/compute/v1/projects/proj-1/zones/europe-west1-b/instances/lab-1",
        "scheduling": {
            "onHostMaintenance": "MIGRATE", "automaticRestart": true, "preemptible": false,
            "provisioningModel": "STANDARD", "instanceTerminationAction": "STOP",
            "maxRunDuration": {"seconds": "86400"}
        },
        "cpuPlatform": "Intel Broadwell",
        "labels": {"orca": "pool", "orca-pool": "lab", "orca-owner": "stack-1", "shed-state": "ready"},
        "labelFingerprint": "42WmSpB8rSM=",
        "startRestricted": false,
        "deletionProtection": false,
        "shieldedInstanceConfig": {"enableSecureBoot": false, "enableVtpm": true, "enableIntegrityMonitoring": true},
        "fingerprint": "q8Vn0p1NSEk=",
        "lastStartTimestamp": "2026-11-30T09:15:10.456-08:00",
        "lastStopTimestamp": "2026-11-29T18:00:00.000-08:00",
        "satisfiesPzi": true,
        "resourceStatus": {"scheduling": {}}
    })
}

#[test]
fn a_full_instance_gives_every_fact() {
    let m = to_machine(&instance(full_instance()), "proj-1");
    assert_eq!(m.id, "europe-west1-b:lab-1");
    assert_eq!((m.name.as_str(), m.status), ("lab-1", Status::Running));
    assert_eq!(m.machine_type, "e2-small");
    assert_eq!(m.location, "europe-west1-b");
    assert_eq!(
        (m.address.as_str(), m.private_address.as_str()),
        ("34.76.10.20", "10.132.0.7")
    );
    assert_eq!(m.fqdn, "lab-1.europe-west1-b.c.proj-1.internal");
    assert_eq!(m.pool, "lab");
    assert_eq!(m.labels["shed-state"], "ready");
    let utc = |t: Option<orca_machines::Timestamp>| t.map(|t| t.to_rfc3339());
    assert_eq!(
        utc(m.created_at).as_deref(),
        Some("2026-11-30T17:15:02.123+00:00")
    );
    assert_eq!(
        utc(m.started_at).as_deref(),
        Some("2026-11-30T17:15:10.456+00:00")
    );
    assert_eq!(
        utc(m.stopped_at).as_deref(),
        Some("2026-11-30T02:00:00+00:00")
    );
    assert_eq!(m.max_run_duration, Some(Duration::from_secs(86_400)));
    assert_eq!(
        m.run_limit_at().map(|t| t.to_rfc3339()).as_deref(),
        Some("2026-12-01T17:15:10.456+00:00")
    );
}

#[test]
fn an_instance_with_every_optional_field_absent_reads_as_empty_facts() {
    // Right after an insert, a VM has no address, no start time and no labels yet; a custom
    // hostname replaces the internal DNS name.
    let m = to_machine(
        &instance(json!({"name": "vm-2", "zone": "zones/us-central1-a", "status": "PROVISIONING"})),
        "example.com:proj-2",
    );
    assert_eq!(m.status, Status::Starting);
    assert_eq!(m.fqdn, "vm-2.us-central1-a.c.proj-2.example.com.internal");
    assert_eq!(
        (
            m.address.as_str(),
            m.private_address.as_str(),
            m.pool.as_str()
        ),
        ("", "", "")
    );
    assert_eq!(
        (m.created_at, m.started_at, m.stopped_at),
        (None, None, None)
    );
    assert_eq!(m.max_run_duration, None);
    let m = to_machine(
        &instance(
            json!({"name": "vm-3", "zone": "zones/us-central1-a", "hostname": "vm-3.corp.example.com"}),
        ),
        "proj-2",
    );
    assert_eq!(m.fqdn, "vm-3.corp.example.com");
    assert_eq!(m.status, Status::Unknown, "no status at all");
    // Even an empty object reads (and names no DNS name it cannot know).
    let m = to_machine(&instance(json!({})), "proj-2");
    assert_eq!((m.fqdn.as_str(), m.status), ("", Status::Unknown));
}

#[test]
fn a_status_or_field_the_reference_does_not_list_yet_is_kept_not_refused() {
    let mut v = full_instance();
    v["status"] = json!("HIBERNATING");
    v["someFieldAddedIn2027"] = json!({"nested": [1, 2, 3]});
    v["scheduling"]["maxRunDuration"] = json!({"seconds": 600, "nanos": 500_000_000});
    v["lastStopTimestamp"] = json!("not a time");
    let m = to_machine(&instance(v), "proj-1");
    assert_eq!(
        (m.status, m.cloud_status.as_str()),
        (Status::Unknown, "HIBERNATING")
    );
    assert_eq!(m.max_run_duration, Some(Duration::from_millis(600_500)));
    assert_eq!(m.stopped_at, None, "an unreadable time is left out");
    for (cloud, want) in [
        ("PENDING", Status::Starting),
        ("STAGING", Status::Starting),
        ("PENDING_STOP", Status::Stopping),
        ("DEPROVISIONING", Status::Stopping),
        ("SUSPENDING", Status::Stopping),
        ("STOPPED", Status::Stopped),
        ("SUSPENDED", Status::Stopped),
        ("TERMINATED", Status::Stopped),
        ("REPAIRING", Status::Unknown),
    ] {
        let m = to_machine(&instance(json!({"name": "a", "status": cloud})), "p");
        assert_eq!(m.status, want, "{cloud}");
    }
}

#[test]
fn paged_and_aggregated_lists_read() {
    let page: List<Instance> = serde_json::from_value(json!({
        "kind": "compute#instanceList",
        "id": "projects/proj-1/zones/europe-west1-b/instances",
        "items": [{"name": "a"}, {"name": "b"}],
        "nextPageToken": "Cj0KO2V1cm9wZS13ZXN0MS1i",
        "selfLink": "https://www.googleapis.com/compute/v1/projects/proj-1/zones/europe-west1-b/instances"
    }))
    .unwrap();
    assert_eq!(page.items.len(), 2);
    assert_eq!(
        page.next_page_token.as_deref(),
        Some("Cj0KO2V1cm9wZS13ZXN0MS1i")
    );
    // The last page of an empty listing has neither items nor a token.
    let last: List<Instance> =
        serde_json::from_value(json!({"kind": "compute#instanceList"})).unwrap();
    assert!(last.items.is_empty() && last.next_page_token.is_none());

    let agg: InstanceAggregatedList = serde_json::from_value(json!({
        "kind": "compute#instanceAggregatedList",
        "id": "projects/proj-1/aggregated/instances",
        "items": {
            "zones/asia-east1-a": {"warning": {
                "code": "NO_RESULTS_ON_PAGE",
                "message": "There are no results for scope 'zones/asia-east1-a' on this page.",
                "data": [{"key": "scope", "value": "zones/asia-east1-a"}]
            }},
            "zones/europe-west1-b": {"instances": [{"name": "a", "zone": "https://www.googleapis.com/compute/v1/projects/proj-1/zones/europe-west1-b"}]},
            "zones/us-central1-a": {"instances": [{"name": "b", "zone": "https://www.googleapis.com/compute/v1/projects/proj-1/zones/us-central1-a"}]},
            "zones/me-west1-c": {"warning": {"code": "SOME_NEW_WARNING", "message": "?"}}
        },
        "nextPageToken": "token-2",
        "selfLink": "https://www.googleapis.com/compute/v1/projects/proj-1/aggregated/instances"
    }))
    .unwrap();
    let ids: Vec<String> = agg
        .items
        .values()
        .flat_map(|s| s.instances.iter())
        .map(|vm| to_machine(vm, "proj-1").id)
        .collect();
    assert_eq!(ids, ["europe-west1-b:a", "us-central1-a:b"]);
    assert_eq!(agg.next_page_token.as_deref(), Some("token-2"));
    assert!(agg.unreachables.is_empty());
    let partial: InstanceAggregatedList = serde_json::from_value(json!({
        "items": {}, "unreachables": ["zones/europe-west1-b"]
    }))
    .unwrap();
    assert_eq!(partial.unreachables, ["zones/europe-west1-b"]);
}

#[test]
fn a_firewall_rule_with_optional_fields_absent_takes_the_documented_defaults() {
    // `direction` defaults to INGRESS and `priority` to 1000 when absent (the reference says so).
    let f: Firewall = serde_json::from_value(json!({
        "kind": "compute#firewall",
        "name": "shed-lab-ssh",
        "network": "https://www.googleapis.com/compute/v1/projects/proj-1/global/networks/orca-net",
        "allowed": [{"IPProtocol": "tcp", "ports": ["22"]}, {"IPProtocol": "icmp"}],
        "sourceRanges": ["203.0.113.7/32"],
        "logConfig": {"enable": false}
    }))
    .unwrap();
    assert_eq!(
        (f.direction.as_str(), f.priority, f.disabled),
        ("INGRESS", 1000, false)
    );
    assert!(f.allowed[1].ports.is_empty());
    assert!(f.target_tags.is_empty() && f.denied.is_empty());
}

/// The error bodies of each kind Google's JSON error format documents for Compute Engine, and what
/// each must become.
#[test]
fn error_bodies_of_each_documented_kind_are_classified_by_their_code() {
    let cases: &[(u16, Value, ErrorKind, &str)] = &[
        (
            400,
            json!({"error": {"code": 400, "message": "Invalid value for field 'resource.machineType': 'zones/x/machineTypes/y'.",
            "errors": [{"message": "Invalid value for field 'resource.machineType'", "domain": "global", "reason": "invalid"}]}}),
            ErrorKind::Other,
            "invalid",
        ),
        (
            400,
            json!({"error": {"code": 400, "message": "Required field 'resource.name' not specified",
            "errors": [{"message": "Required field 'resource.name' not specified", "domain": "global", "reason": "required"}]}}),
            ErrorKind::Other,
            "required",
        ),
        (
            400,
            json!({"error": {"code": 400, "message": "The disk resource 'projects/p/zones/z/disks/d' is already being used by 'projects/p/zones/z/instances/i'",
            "errors": [{"message": "...", "domain": "global", "reason": "resourceInUseByAnotherResource"}]}}),
            ErrorKind::Other,
            "resourceInUseByAnotherResource",
        ),
        (
            401,
            json!({"error": {"code": 401, "message": "Request had invalid authentication credentials.",
            "errors": [{"message": "Invalid Credentials", "domain": "global", "reason": "authError", "location": "Authorization", "locationType": "header"}],
            "status": "UNAUTHENTICATED"}}),
            ErrorKind::Unauthenticated,
            "authError",
        ),
        (
            403,
            json!({"error": {"code": 403, "message": "Required 'compute.instances.create' permission for 'projects/p/zones/z/instances/i'",
            "errors": [{"message": "...", "domain": "global", "reason": "forbidden"}],
            "status": "PERMISSION_DENIED",
            "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "IAM_PERMISSION_DENIED", "domain": "iam.googleapis.com",
                "metadata": {"permission": "compute.instances.create"}}]}}),
            ErrorKind::PermissionDenied,
            "forbidden",
        ),
        (
            403,
            json!({"error": {"code": 403, "message": "Compute Engine API has not been used in project 1 before or it is disabled.",
            "errors": [{"message": "...", "domain": "usageLimits", "reason": "accessNotConfigured", "extendedHelp": "https://console.developers.google.com"}],
            "status": "PERMISSION_DENIED"}}),
            ErrorKind::PermissionDenied,
            "accessNotConfigured",
        ),
        (
            403,
            json!({"error": {"code": 403, "message": "Quota 'CPUS' exceeded.  Limit: 24.0 in region europe-west1.",
            "errors": [{"message": "...", "domain": "usageLimits", "reason": "quotaExceeded"}]}}),
            ErrorKind::Quota,
            "quotaExceeded",
        ),
        (
            403,
            json!({"error": {"code": 403, "message": "Rate Limit Exceeded",
            "errors": [{"message": "Rate Limit Exceeded", "domain": "usageLimits", "reason": "rateLimitExceeded"}]}}),
            ErrorKind::Throttled,
            "rateLimitExceeded",
        ),
        (
            404,
            json!({"error": {"code": 404, "message": "The resource 'projects/p/zones/z/instances/i' was not found",
            "errors": [{"message": "...", "domain": "global", "reason": "notFound"}]}}),
            ErrorKind::NotFound,
            "notFound",
        ),
        (
            409,
            json!({"error": {"code": 409, "message": "The resource 'projects/p/zones/z/instances/i' already exists",
            "errors": [{"message": "...", "domain": "global", "reason": "alreadyExists"}]}}),
            ErrorKind::AlreadyExists,
            "alreadyExists",
        ),
        (
            412,
            json!({"error": {"code": 412, "message": "Labels fingerprint either invalid or resource labels have changed",
            "errors": [{"message": "...", "domain": "global", "reason": "conditionNotMet", "location": "If-Match", "locationType": "header"}]}}),
            ErrorKind::Other,
            "conditionNotMet",
        ),
        (
            429,
            json!({"error": {"code": 429, "message": "Quota exceeded for quota metric 'Read requests' and limit 'Read requests per minute'",
            "status": "RESOURCE_EXHAUSTED",
            "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "RATE_LIMIT_EXCEEDED", "domain": "googleapis.com"}]}}),
            ErrorKind::Throttled,
            "RATE_LIMIT_EXCEEDED",
        ),
        (
            500,
            json!({"error": {"code": 500, "message": "Internal Error",
            "errors": [{"message": "Internal Error", "domain": "global", "reason": "backendError"}]}}),
            ErrorKind::Transient,
            "backendError",
        ),
        (
            503,
            json!({"error": {"code": 503, "message": "The service is currently unavailable.", "status": "UNAVAILABLE"}}),
            ErrorKind::Transient,
            "UNAVAILABLE",
        ),
    ];
    for (status, body, kind, code) in cases {
        let e = http_error(*status, None, body.to_string().as_bytes());
        assert_eq!(
            (e.kind(), e.code()),
            (*kind, Some(*code)),
            "{status} {body}"
        );
        assert!(
            std::error::Error::source(&e).is_some(),
            "the cause is kept: {e:?}"
        );
    }
    // A body that is not Google's JSON (a proxy's HTML page) still has its status's meaning.
    let e = http_error(502, None, b"<html><body>Bad Gateway</body></html>");
    assert_eq!((e.kind(), e.code()), (ErrorKind::Transient, None));
    let e = http_error(429, Some(Duration::from_secs(3)), b"");
    assert_eq!(
        (e.kind(), e.retry_after()),
        (ErrorKind::Throttled, Some(Duration::from_secs(3)))
    );
}

#[test]
fn operation_errors_of_each_documented_kind_are_classified_by_their_code() {
    let op = |code: &str, http: u16| -> Operation {
        serde_json::from_value(json!({
            "kind": "compute#operation",
            "id": "1", "name": "operation-1700000000000-abc", "operationType": "insert",
            "targetLink": "https://www.googleapis.com/compute/v1/projects/p/zones/z/instances/i",
            "targetId": "7052289376245812345",
            "status": "DONE", "progress": 100,
            "insertTime": "2026-11-30T09:15:02.123-08:00", "endTime": "2026-11-30T09:15:09.000-08:00",
            "error": {"errors": [{
                "code": code,
                "message": "The zone 'projects/p/zones/z' does not have enough resources available to fulfill the request.",
                "errorDetails": [
                    {"errorInfo": {"reason": "RESOURCE_AVAILABILITY", "domain": "compute.googleapis.com", "metadata": {"zone": "z"}}},
                    {"help": {"links": [{"description": "Troubleshooting", "url": "https://cloud.google.com/compute/docs/troubleshooting"}]}},
                    {"localizedMessage": {"locale": "en-US", "message": "..."}},
                    {"quotaInfo": {"metricName": "compute.googleapis.com/cpus", "limitName": "CPUS-per-project-region", "limit": 24}}
                ]
            }]},
            "httpErrorStatusCode": http, "httpErrorMessage": "SERVICE UNAVAILABLE",
            "zone": "https://www.googleapis.com/compute/v1/projects/p/zones/z",
            "selfLink": "https://www.googleapis.com/compute/v1/projects/p/zones/z/operations/operation-1700000000000-abc"
        }))
        .unwrap()
    };
    for (code, http, kind) in [
        ("ZONE_RESOURCE_POOL_EXHAUSTED", 503, ErrorKind::NoStock),
        (
            "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
            503,
            ErrorKind::NoStock,
        ),
        ("QUOTA_EXCEEDED", 403, ErrorKind::Quota),
        ("RESOURCE_NOT_FOUND", 404, ErrorKind::NotFound),
        ("RESOURCE_ALREADY_EXISTS", 409, ErrorKind::AlreadyExists),
        (
            "RESOURCE_OPERATION_RATE_EXCEEDED",
            403,
            ErrorKind::Throttled,
        ),
        ("INTERNAL_ERROR", 500, ErrorKind::Transient),
        ("SOME_CODE_ADDED_LATER", 400, ErrorKind::Other),
    ] {
        let o = op(code, http);
        assert!(o.is_done());
        let e = operation_error(&o).expect("a failed operation");
        assert_eq!((e.kind(), e.code()), (kind, Some(code)), "{code}");
        assert!(
            e.to_string().contains("does not have enough resources"),
            "{e}"
        );
    }
    // A global operation still running, with fields the driver does not read.
    let running: Operation = serde_json::from_value(json!({
        "kind": "compute#operation", "name": "operation-2", "operationType": "patch",
        "status": "RUNNING", "progress": 0, "warnings": [{"code": "NOT_CRITICAL_ERROR", "message": "x"}]
    }))
    .unwrap();
    assert!(!running.is_done() && running.zone.is_none() && operation_error(&running).is_none());
}
