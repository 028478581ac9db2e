//! The Compute Engine driver's own behaviour against the fake Compute Engine API, beyond the
//! conformance suite (tests/conformance.rs): spec options in the insert, facts, zones, adoption,
//! delayed visibility, credentials redacted, failed operations leave nothing, retries, labels,
//! firewall rules.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use orca_fakes::gce::{FakeGce, NETWORK, PROJECT, SSH_RULE, SUBNET, TEST_ONLY_RSA_KEY_PEM, ZONE};
use orca_fakes::{Fault, Rule};
use orca_gce::{Config, GceProvider};
use orca_machines::labels::Labels;
use orca_machines::{
    Created, Error, FirewallRules, MachineLabels, MachineSpec, Provider, RetryPolicy, Status,
};
use reqwest::Method;
use serde_json::json;

use common::{any_zone, builder, id, provider};

fn spec(name: &str, machine_type: &str) -> MachineSpec {
    MachineSpec::new(name, machine_type, ZONE, "lab")
        .with_user_data("#cloud-config\nruncmd: [true]\n")
}

const KEY_A: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOrcaTestKeyANotARealOne0000000 a@lab";
const KEY_B: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOrcaTestKeyBNotARealOne0000000 b@lab";

#[tokio::test]
async fn spec_options_and_settings_reach_the_insert() {
    let fake = FakeGce::start().await.unwrap();
    let p = GceProvider::new(
        builder(&fake)
            .network_tags(["shed-test"])
            .max_run_duration(Duration::from_secs(24 * 3600))
            .disk_gb(50)
            .ssh_user("shed")
            .build()
            .unwrap(),
        "stack-1",
    )
    .await
    .unwrap();
    // The settings' defaults.
    let m = p
        .create(&spec("vm-arm", "t2a-standard-1"))
        .await
        .unwrap()
        .machine()
        .unwrap();
    assert_eq!(
        (m.id.as_str(), m.status),
        (id("vm-arm").as_str(), Status::Running)
    );
    assert!(m.address.starts_with("203.0.113."), "{}", m.address);
    let vm = fake.instance(ZONE, "vm-arm").unwrap();
    assert_eq!(vm["scheduling"]["maxRunDuration"]["seconds"], "86400");
    assert_eq!(vm["scheduling"]["instanceTerminationAction"], "STOP");
    assert_eq!(vm["tags"]["items"], json!(["shed-test"]));
    assert_eq!(vm["metadata"]["items"][0]["key"], "user-data");
    assert_eq!(
        vm["metadata"]["items"][0]["value"],
        "#cloud-config\nruncmd: [true]\n"
    );
    assert_eq!(vm["metadata"]["items"].as_array().unwrap().len(), 1);
    assert_eq!(
        vm["labels"],
        json!({"orca": "pool", "orca-pool": "lab", "orca-owner": "stack-1"})
    );
    assert_eq!(vm["disks"][0]["autoDelete"], true);
    assert_eq!(vm["disks"][0]["diskSizeGb"], "50");
    assert_eq!(
        fake.insert_bodies()[0]["disks"][0]["initializeParams"]["sourceImage"],
        "projects/ubuntu-os-cloud/global/images/family/ubuntu-2404-lts-arm64"
    );
    assert!(
        vm["networkInterfaces"][0]["subnetwork"]
            .as_str()
            .unwrap()
            .ends_with("/regions/europe-west1/subnetworks/orca-subnet"),
        "{}",
        vm["networkInterfaces"][0]
    );

    // Every option of the spec: it overrides the settings (tags add to them).
    let image = "projects/ubuntu-os-cloud/global/images/ubuntu-2404-noble-amd64-v20251001";
    let s = spec("vm-amd", "e2-small")
        .with_label("shed-state", "creating")
        .with_disk_gb(30)
        .with_ssh_key(KEY_A)
        .with_ssh_key(KEY_B)
        .with_network_tags(["a-tag", "shed-test"])
        .with_max_run_duration(Duration::from_secs(600))
        .with_image(image);
    let m = p.create(&s).await.unwrap().machine().unwrap();
    assert_eq!(m.max_run_duration, Some(Duration::from_secs(600)));
    assert_eq!(m.labels["shed-state"], "creating");
    let vm = fake.instance(ZONE, "vm-amd").unwrap();
    assert_eq!(vm["scheduling"]["maxRunDuration"]["seconds"], "600");
    assert_eq!(vm["tags"]["items"], json!(["shed-test", "a-tag"]));
    assert_eq!(vm["labels"]["shed-state"], "creating");
    assert_eq!(vm["disks"][0]["diskSizeGb"], "30");
    assert_eq!(vm["metadata"]["items"][1]["key"], "ssh-keys");
    assert_eq!(
        vm["metadata"]["items"][1]["value"],
        format!("shed:{KEY_A}\nshed:{KEY_B}")
    );
    assert_eq!(
        vm["metadata"]["items"][2],
        json!({"key": "enable-oslogin", "value": "FALSE"})
    );
    assert_eq!(
        fake.insert_bodies()[1]["disks"][0]["initializeParams"]["sourceImage"],
        image
    );

    // What Compute Engine cannot do, or refuses, is refused before any call.
    let before = fake.control().requests();
    for (s, kind) in [
        (
            spec("vm-x", "e2-small").with_ssh_sources(["203.0.113.7/32"]),
            "unsupported",
        ),
        (
            spec("vm-x", "e2-small").with_admission_group("lab"),
            "unsupported",
        ),
        (spec("vm-x", "e2-small").with_disk_gb(5), "disk_gb"),
        (
            spec("vm-x", "e2-small").with_label("orca-owner", "x"),
            "labels",
        ),
        (
            spec("vm-x", "e2-small").with_network_tag("Bad_Tag"),
            "network_tags",
        ),
        (
            spec("vm-x", "e2-small").with_max_run_duration(Duration::from_secs(5)),
            "max_run_duration",
        ),
        (spec("vm-x", "e2-small").with_image("a?b"), "image"),
        (
            MachineSpec::new("vm-x", "e2-small", "us-central1-a", "lab"),
            "location",
        ),
        (MachineSpec::new("9vm", "e2-small", ZONE, "lab"), "name"),
    ] {
        match (p.create(&s).await, kind) {
            (Err(Error::Unsupported { .. }), "unsupported") => {}
            (Err(Error::InvalidSpec { field, .. }), k) if field == k => {}
            (other, k) => panic!("{s:?}: wanted {k}, got {other:?}"),
        }
    }
    assert_eq!(
        fake.control().requests(),
        before,
        "refused input made calls"
    );
}

#[tokio::test]
async fn facts_come_from_the_instance() {
    let fake = FakeGce::start().await.unwrap();
    let p = provider(&fake, "stack-1").await;
    let made = p
        .create(&spec("vm-f", "e2-small"))
        .await
        .unwrap()
        .machine()
        .unwrap();
    let vm = fake.instance(ZONE, "vm-f").unwrap();
    assert_eq!(
        made.fqdn,
        format!("vm-f.{ZONE}.c.{PROJECT}.internal"),
        "the zonal internal DNS name"
    );
    assert_eq!(
        made.private_address,
        vm["networkInterfaces"][0]["networkIP"]
    );
    let created: orca_machines::Timestamp = vm["creationTimestamp"]
        .as_str()
        .unwrap()
        .parse::<orca_machines::chrono::DateTime<orca_machines::chrono::FixedOffset>>()
        .unwrap()
        .into();
    assert_eq!(made.created_at, Some(created));
    assert!(
        made.started_at.is_some() && made.stopped_at.is_none(),
        "{made:?}"
    );
    assert_eq!(made.max_run_duration, None);
    let stopped = p.stop(&made.id).await.unwrap();
    let stop_time = stopped.stopped_at.expect("a stop time");
    assert!(stop_time >= made.started_at.unwrap());
    assert_eq!(stopped.status, Status::Stopped);
    tokio::time::sleep(Duration::from_millis(5)).await;
    let started = p.start(&made.id).await.unwrap();
    assert!(started.started_at.unwrap() > stop_time, "{started:?}");
    assert_eq!(started.stopped_at, Some(stop_time), "the last stop is kept");
    let read = p.machine(&made.id).await.unwrap().unwrap();
    assert_eq!(read.started_at, started.started_at);
    assert_eq!(read.created_at, made.created_at);
}

#[tokio::test]
async fn a_provider_of_every_zone_makes_and_lists_machines_in_each() {
    let fake = FakeGce::start().await.unwrap();
    // One subnet name per region; europe-west4 has none.
    fake.put_subnet("us-central1", "orca-us", NETWORK);
    let p = GceProvider::new(
        any_zone(&fake)
            .subnet("europe-west1=orca-subnet,us-central1=orca-us")
            .page_size(1)
            .build()
            .unwrap(),
        "stack-1",
    )
    .await
    .unwrap();
    assert_eq!(p.arch("t2a-standard-1").await.unwrap().as_str(), "arm64");
    assert_eq!(
        fake.control()
            .count(&Method::GET, "/aggregated/machineTypes?"),
        1,
        "one page of an aggregated listing of the type, without a zone"
    );
    let mut ids = Vec::new();
    for (name, zone) in [
        ("vm-b", "europe-west1-b"),
        ("vm-c", "europe-west1-c"),
        ("vm-u", "us-central1-a"),
    ] {
        let m = p
            .create(&MachineSpec::new(name, "e2-small", zone, "lab"))
            .await
            .unwrap()
            .machine()
            .unwrap();
        assert_eq!(
            (m.id.clone(), m.location.as_str()),
            (format!("{zone}:{name}"), zone)
        );
        ids.push(m.id);
    }
    let vm = fake.instance("us-central1-a", "vm-u").unwrap();
    assert!(
        vm["networkInterfaces"][0]["subnetwork"]
            .as_str()
            .unwrap()
            .ends_with("/regions/us-central1/subnetworks/orca-us"),
        "{vm}"
    );
    // Another owner's machine in a fourth zone never shows.
    fake.put_instance(
        "us-central1-f",
        "theirs",
        "e2-small",
        json!({"orca": "pool", "orca-pool": "lab", "orca-owner": "stack-2"}),
    );
    fake.control().clear_log();
    let mut listed: Vec<String> = p
        .machines("lab")
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.id)
        .collect();
    listed.sort();
    assert_eq!(listed, ids);
    let log = fake.control().log();
    assert_eq!(log.len(), 3, "one aggregated page a machine: {log:?}");
    assert!(
        log.iter()
            .all(|l| l.path.contains("/aggregated/instances?") && l.path.contains("maxResults=1"))
    );
    // Ids name the zone: reading, stopping and deleting go straight to the instance.
    fake.control().clear_log();
    let m = p.machine(&ids[2]).await.unwrap().unwrap();
    assert_eq!(m.location, "us-central1-a");
    p.stop(&ids[2]).await.unwrap();
    assert!(p.delete(&ids[2]).await.unwrap());
    assert!(
        fake.control()
            .log()
            .iter()
            .all(|l| !l.path.contains("aggregated") && !l.path.contains("/instances?"))
    );
    // A bare name names no zone here; a zone without a subnet is refused; both before any call.
    let before = fake.control().requests();
    let e = p.machine("vm-b").await.unwrap_err();
    assert!(
        matches!(e, Error::InvalidSpec { ref field, .. } if field == "id"),
        "{e:?}"
    );
    let e = p
        .create(&MachineSpec::new(
            "vm-w",
            "e2-small",
            "europe-west4-a",
            "lab",
        ))
        .await
        .unwrap_err();
    assert!(
        matches!(e, Error::InvalidSpec { ref field, .. } if field == "location"),
        "{e:?}"
    );
    assert_eq!(fake.control().requests(), before);
    // One subnet name in every region: a region without it is the cloud's 404, and nothing stays.
    let q = GceProvider::new(any_zone(&fake).build().unwrap(), "stack-1")
        .await
        .unwrap();
    let e = q
        .create(&MachineSpec::new(
            "vm-w",
            "e2-small",
            "europe-west4-a",
            "lab",
        ))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::NotFound { .. }), "{e:?}");
    assert!(e.to_string().contains("subnetworks/orca-subnet"), "{e}");
    assert!(fake.instance_names("europe-west4-a").is_empty());
}

#[tokio::test]
async fn an_unreachable_zone_fails_the_listing_instead_of_shortening_it() {
    let fake = FakeGce::start().await.unwrap();
    let p = GceProvider::new(any_zone(&fake).build().unwrap(), "stack-1")
        .await
        .unwrap();
    p.create(&spec("vm-1", "e2-small")).await.unwrap();
    fake.control().inject(Rule::new(
        Some(Method::GET),
        "/aggregated/instances?",
        Fault::Status {
            status: 200,
            body: json!({
                "kind": "compute#instanceAggregatedList",
                "items": {
                    "zones/europe-west1-b": {"warning": {"code": "NO_RESULTS_ON_PAGE", "message": "There are no results for scope 'zones/europe-west1-b' on this page."}},
                },
                "unreachables": ["zones/europe-west1-b"],
            }),
            headers: vec![],
        },
        1,
    ));
    let e = p.machines("lab").await.unwrap_err();
    assert!(e.is_retryable(), "{e:?}");
    assert_eq!(e.code(), Some("UNREACHABLE"));
    assert!(e.to_string().contains("zones/europe-west1-b"), "{e}");
    assert_eq!(p.machines("lab").await.unwrap().len(), 1);
}

#[tokio::test]
async fn a_failed_operation_leaves_no_instance_or_disk() {
    let fake = FakeGce::start().await.unwrap();
    let p = provider(&fake, "stack-1").await;
    fake.fail_next_insert("INTERNAL_ERROR", "the insert failed half-way");
    let e = p.create(&spec("vm-fail", "e2-small")).await.unwrap_err();
    assert_eq!(e.code(), Some("INTERNAL_ERROR"), "{e}");
    assert_eq!(e.operation(), Some("instances.insert"), "{e}");
    assert!(!matches!(e, Error::Leftovers { .. }), "{e}");
    assert!(
        fake.instance_names(ZONE).is_empty(),
        "{:?}",
        fake.instance_names(ZONE)
    );
    assert!(
        fake.disk_names(ZONE).is_empty(),
        "{:?}",
        fake.disk_names(ZONE)
    );
    // The clean-up deleted the instance (its boot disk went with it: autoDelete) and checked the disk.
    assert_eq!(
        fake.control().count(&Method::DELETE, "/instances/vm-fail"),
        1
    );
    assert_eq!(fake.control().count(&Method::GET, "/disks/vm-fail"), 1);

    // No stock: the operation fails and leaves the boot disk; the create answers NoStock, scoped to
    // the type and zone, and removes the disk.
    fake.exhaust("e2-small", ZONE);
    let got = p.create(&spec("vm-nostock", "e2-small")).await.unwrap();
    assert!(
        matches!(&got, Created::NoStock { machine_type, location, message, left }
            if machine_type == "e2-small" && location == ZONE && message.contains("ZONE_RESOURCE_POOL_EXHAUSTED") && left.is_empty()),
        "{got:?}"
    );
    assert!(
        fake.disk_names(ZONE).is_empty(),
        "{:?}",
        fake.disk_names(ZONE)
    );
    assert_eq!(
        fake.control().count(&Method::DELETE, "/disks/vm-nostock"),
        1
    );
    // Another type in the same zone still has stock.
    p.create(&spec("vm-other", "e2-medium"))
        .await
        .unwrap()
        .machine()
        .unwrap();
    fake.restore("e2-small", ZONE);
    // The same create once stock is back makes the machine: this call's own.
    let got = p.create(&spec("vm-nostock", "e2-small")).await.unwrap();
    assert!(matches!(got, Created::Machine(_)), "{got:?}");
    p.delete(&id("vm-nostock")).await.unwrap();

    // The _WITH_DETAILS form is no stock too.
    fake.exhaust_with_details("e2-standard-8", ZONE);
    let got = p
        .create(&spec("vm-details", "e2-standard-8"))
        .await
        .unwrap();
    assert!(
        matches!(&got, Created::NoStock { message, .. } if message.contains("_WITH_DETAILS")),
        "{got:?}"
    );
    fake.restore("e2-standard-8", ZONE);

    // Quota is not capacity: in the operation, and as a synchronous 403.
    fake.exceed_quota(1);
    let e = p.create(&spec("vm-quota", "e2-small")).await.unwrap_err();
    assert!(matches!(e, Error::Quota { .. }), "{e:?}");
    assert_eq!(e.code(), Some("QUOTA_EXCEEDED"));
    fake.control().inject(Rule::new(
        Some(Method::POST),
        "/instances?requestId=",
        Fault::Status {
            status: 403,
            body: json!({"error": {"code": 403, "message": "Quota 'CPUS' exceeded.  Limit: 8.0 in region europe-west1.", "errors": [{"reason": "quotaExceeded", "domain": "usageLimits", "message": "Quota 'CPUS' exceeded.  Limit: 8.0 in region europe-west1."}]}}),
            headers: vec![],
        },
        1,
    ));
    let e = p.create(&spec("vm-quota", "e2-small")).await.unwrap_err();
    assert!(
        matches!(e, Error::Quota { ref message, .. } if message.contains("CPUS")),
        "{e:?}"
    );
    assert_eq!(e.code(), Some("quotaExceeded"));
    assert_eq!(fake.instance_names(ZONE), vec!["vm-other".to_string()]);

    // A clean-up that cannot finish names what is left.
    fake.fail_next_insert("INTERNAL_ERROR", "half-way");
    fake.control().inject(Rule::new(
        Some(Method::DELETE),
        "/instances/vm-left",
        Fault::Status {
            status: 403,
            body: json!({"error": {"code": 403, "message": "no", "errors": [{"reason": "forbidden", "domain": "global", "message": "no"}]}}),
            headers: vec![],
        },
        1,
    ));
    let e = p.create(&spec("vm-left", "e2-small")).await.unwrap_err();
    assert_eq!(e.code(), Some("INTERNAL_ERROR"), "the first failure's code");
    match e {
        Error::Leftovers { left, .. } => {
            assert!(
                left.contains(&format!("instance {}", id("vm-left"))),
                "{left:?}"
            )
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn no_stock_or_quota_whose_clean_up_fails_stays_the_outcome_naming_what_is_left() {
    let fake = FakeGce::start().await.unwrap();
    let p = provider(&fake, "stack-1").await;
    let refuse_once = |path: &str| {
        Rule::new(
            Some(Method::DELETE),
            path,
            Fault::Status {
                status: 403,
                body: json!({"error": {"code": 403, "message": "no", "errors": [{"reason": "forbidden", "domain": "global", "message": "no"}]}}),
                headers: vec![],
            },
            1,
        )
    };
    // No stock leaves the boot disk; its delete is refused: still no stock, the disk named.
    fake.exhaust("e2-small", ZONE);
    fake.control().inject(refuse_once("/disks/vm-nostock"));
    let got = p.create(&spec("vm-nostock", "e2-small")).await;
    match got {
        Ok(Created::NoStock {
            machine_type,
            location,
            message,
            ..
        }) => {
            assert_eq!(
                (machine_type.as_str(), location),
                ("e2-small", ZONE.to_string())
            );
            assert!(
                message.contains("ZONE_RESOURCE_POOL_EXHAUSTED"),
                "{message}"
            );
            assert!(
                message.contains("disk") && message.contains("vm-nostock"),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
    let disks = fake.disk_names(ZONE);
    assert!(
        disks.len() == 1 && disks[0].starts_with("vm-nostock"),
        "the disk stays: {disks:?}"
    );
    fake.restore("e2-small", ZONE);

    // Quota in the operation, after the instance was made; its delete is refused: still quota.
    fake.fail_next_insert("QUOTA_EXCEEDED", "Quota 'CPUS' exceeded.");
    fake.control().inject(refuse_once("/instances/vm-quota"));
    let e = p.create(&spec("vm-quota", "e2-small")).await.unwrap_err();
    match &e {
        Error::Quota { message, .. } => {
            assert!(message.contains("CPUS"), "{message}");
            assert!(
                message.contains(&format!("instance {}", id("vm-quota"))),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(e.code(), Some("QUOTA_EXCEEDED"));
}

#[tokio::test]
async fn a_lost_insert_answer_makes_one_vm_and_a_later_create_adopts_it() {
    let fake = FakeGce::start().await.unwrap();
    let p = provider(&fake, "stack-1").await;
    fake.control().inject(Rule::new(
        Some(Method::POST),
        "/instances?requestId=",
        Fault::DropAnswer,
        1,
    ));
    let first = p.create(&spec("vm-1", "e2-small")).await.unwrap();
    let Created::Machine(m) = first else {
        panic!("this call's own machine, made by its first attempt: {first:?}")
    };
    assert_eq!(m.name, "vm-1");
    let posts: Vec<String> = fake
        .control()
        .log()
        .into_iter()
        .filter(|l| l.method == Method::POST && l.path.contains("/instances?requestId="))
        .map(|l| l.path)
        .collect();
    assert_eq!(posts.len(), 2);
    assert_eq!(posts[0], posts[1], "the retry carries the same request id");
    assert_eq!(
        fake.insert_bodies().len(),
        1,
        "the repeated insert was de-duplicated"
    );
    assert_eq!(fake.instance_names(ZONE), vec!["vm-1".to_string()]);
    // The same create again, from a new call, adopts the machine (409, then a read).
    let again = p.create(&spec("vm-1", "e2-small")).await.unwrap();
    assert!(again.is_adopted(), "{again:?}");
    assert_eq!(again.machine().unwrap().id, m.id);
    // A first attempt refused unserved (429) does not make a 409 after it this call's own.
    fake.control().inject(Rule::new(
        Some(Method::POST),
        "/instances?requestId=",
        Fault::Status {
            status: 429,
            body: json!({"error": {"code": 429, "message": "Rate Limit Exceeded", "errors": [{"reason": "rateLimitExceeded", "domain": "usageLimits", "message": "Rate Limit Exceeded"}]}}),
            headers: vec![("Retry-After".into(), "0".into())],
        },
        1,
    ));
    let again = p.create(&spec("vm-1", "e2-small")).await.unwrap();
    assert!(again.is_adopted(), "{again:?}");
    // Nor does a first attempt answered 503 before Compute Engine acted: the 409 after it is the
    // earlier call's instance, adopted.
    fake.control().inject(Rule::new(
        Some(Method::POST),
        "/instances?requestId=",
        Fault::Status {
            status: 503,
            body: json!({"error": {"code": 503, "message": "backend", "errors": [{"reason": "backendError", "domain": "global", "message": "backend"}]}}),
            headers: vec![],
        },
        1,
    ));
    let again = p.create(&spec("vm-1", "e2-small")).await.unwrap();
    assert!(again.is_adopted(), "{again:?}");
    assert_eq!(again.machine().unwrap().id, m.id);
    assert_eq!(fake.insert_bodies().len(), 1);
    // ...but another owner's create of that name is refused, not adopted, with the cloud's code.
    let other = provider(&fake, "stack-2").await;
    let e = other.create(&spec("vm-1", "e2-small")).await.unwrap_err();
    assert!(matches!(e, Error::AlreadyExists { .. }), "{e:?}");
    assert_eq!(e.code(), Some("alreadyExists"));
    // ...and so is one of another type.
    let e = p.create(&spec("vm-1", "e2-medium")).await.unwrap_err();
    assert!(matches!(e, Error::AlreadyExists { .. }), "{e:?}");

    // 429 with Retry-After and a 503 are retried by the shared policy.
    fake.control().inject(Rule::new(
        Some(Method::GET),
        "/instances?",
        Fault::Status {
            status: 429,
            body: json!({"error": {"code": 429, "message": "Rate Limit Exceeded", "errors": [{"reason": "rateLimitExceeded", "domain": "usageLimits", "message": "Rate Limit Exceeded"}]}}),
            headers: vec![("Retry-After".into(), "0".into())],
        },
        1,
    ));
    fake.control().inject(Rule::new(
        Some(Method::GET),
        "/instances?",
        Fault::Status {
            status: 503,
            body: json!({"error": {"code": 503, "message": "backend", "errors": [{"reason": "backendError", "domain": "global", "message": "backend"}]}}),
            headers: vec![],
        },
        1,
    ));
    let before = fake.control().count(&Method::GET, "/instances?");
    assert_eq!(p.machines("lab").await.unwrap().len(), 1);
    assert_eq!(
        fake.control().count(&Method::GET, "/instances?") - before,
        3
    );

    // Latency on the operation and slow operations: still followed to the end.
    fake.set_operation_time(Duration::from_millis(100));
    fake.control().inject(Rule::new(
        None,
        "/operations/",
        Fault::Latency(Duration::from_millis(20)),
        2,
    ));
    let m2 = p
        .create(&spec("vm-2", "e2-small"))
        .await
        .unwrap()
        .machine()
        .unwrap();
    assert_eq!(m2.status, Status::Running);
    fake.set_operation_time(Duration::ZERO);

    // A machine made, deleted, and made again under the same spec is made anew.
    assert!(p.delete(&m2.id).await.unwrap());
    let m3 = p.create(&spec("vm-2", "e2-small")).await.unwrap();
    assert!(matches!(m3, Created::Machine(_)), "{m3:?}");
    assert!(fake.instance(ZONE, "vm-2").is_some());
}

#[tokio::test]
async fn listing_maps_statuses_reads_labels_and_skips_foreign_machines() {
    let fake = FakeGce::start().await.unwrap();
    let p = GceProvider::new(builder(&fake).page_size(1).build().unwrap(), "stack-1")
        .await
        .unwrap();
    for n in ["vm-a", "vm-b", "vm-c"] {
        p.create(&spec(n, "e2-small")).await.unwrap();
    }
    // A machine nobody labelled, and one with orca's labels but no owner.
    fake.put_instance(ZONE, "stranger", "e2-small", json!({"env": "prod"}));
    fake.put_instance(
        ZONE,
        "ownerless",
        "e2-small",
        json!({"orca": "pool", "orca-pool": "lab"}),
    );
    fake.set_instance_status(ZONE, "vm-a", "SUSPENDED");
    fake.set_instance_status(ZONE, "vm-b", "STAGING");
    let before = fake.control().count(&Method::GET, "/instances?");
    let mut ms = p.machines("lab").await.unwrap();
    assert_eq!(
        fake.control().count(&Method::GET, "/instances?") - before,
        3,
        "one page per machine"
    );
    ms.sort_by(|a, b| a.name.cmp(&b.name));
    let got: Vec<(&str, Status, &str)> = ms
        .iter()
        .map(|m| (m.name.as_str(), m.status, m.cloud_status.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("vm-a", Status::Stopped, "SUSPENDED"),
            ("vm-b", Status::Starting, "STAGING"),
            ("vm-c", Status::Running, "RUNNING")
        ]
    );
    let log = fake.control().log();
    let list = log
        .iter()
        .find(|l| l.method == Method::GET && l.path.contains("/instances?"))
        .unwrap();
    assert!(
        list.path.contains(&format!("/zones/{ZONE}/instances?")),
        "{}",
        list.path
    );
    assert!(list.path.contains("maxResults=1"), "{}", list.path);
    assert!(list.path.contains("labels.orca-owner"), "{}", list.path);

    // The empty owner sees only the ownerless machine.
    let none = provider(&fake, "").await;
    let ms = none.machines("lab").await.unwrap();
    assert_eq!(
        ms.iter().map(|m| m.name.as_str()).collect::<Vec<_>>(),
        ["ownerless"]
    );
    // Bare names are instances of the configured zone.
    for id in ["stranger", "vm-a"] {
        assert!(
            matches!(none.delete(id).await, Err(Error::NotOwned { .. })),
            "{id}"
        );
    }
    assert!(matches!(
        p.delete("stranger").await,
        Err(Error::NotOwned { .. })
    ));
    assert!(matches!(
        p.stop(&id("stranger")).await,
        Err(Error::NotOwned { .. })
    ));
    assert!(fake.instance(ZONE, "stranger").is_some());
    for bad in ["Not_A_Name", "nowhere:vm-a", "europe-west1-b:9vm"] {
        assert!(
            matches!(p.delete(bad).await, Err(Error::InvalidSpec { .. })),
            "{bad}"
        );
    }
}

#[tokio::test]
async fn labels_are_changed_by_fingerprint_and_a_concurrent_change_is_read_again() {
    let fake = FakeGce::start().await.unwrap();
    let p = provider(&fake, "stack-1").await;
    let m = p
        .create(&spec("vm-l", "e2-small").with_label("shed-state", "creating"))
        .await
        .unwrap()
        .machine()
        .unwrap();
    let labels: &dyn MachineLabels = p.machine_labels().expect("labels");
    let ready = Labels::from([
        ("shed-state".to_string(), "ready".to_string()),
        ("shed-id".to_string(), "s-42".to_string()),
    ]);
    // Someone else changed the labels first: the fingerprint is stale once (412 conditionNotMet,
    // recognised by its code), and the driver reads again.
    fake.control().inject(Rule::new(
        Some(Method::POST),
        "/setLabels",
        Fault::Status {
            status: 412,
            body: json!({"error": {"code": 412, "message": "Labels fingerprint either invalid or resource labels have changed", "errors": [{"reason": "conditionNotMet", "domain": "global", "message": "Labels fingerprint either invalid or resource labels have changed", "location": "If-Match", "locationType": "header"}]}}),
            headers: vec![],
        },
        1,
    ));
    let after = labels.set_labels(&m.id, &ready, &[]).await.unwrap();
    assert_eq!(after.labels["shed-state"], "ready");
    assert_eq!(after.labels["orca-owner"], "stack-1");
    assert_eq!(fake.control().count(&Method::POST, "/setLabels"), 2);
    // Reads: the create's, then one before each attempt and one after the change.
    assert_eq!(fake.control().count(&Method::GET, "/instances/vm-l"), 4);
    let listed = p.machines("lab").await.unwrap();
    assert_eq!(listed[0].labels["shed-id"], "s-42");
    let after = labels
        .set_labels(&m.id, &Labels::new(), &["shed-id".to_string()])
        .await
        .unwrap();
    assert!(!after.labels.contains_key("shed-id"));
    assert_eq!(after.pool, "lab");
    // Five stale fingerprints in a row: the error keeps the cloud's code.
    fake.control().inject(Rule::new(
        Some(Method::POST),
        "/setLabels",
        Fault::Status {
            status: 412,
            body: json!({"error": {"code": 412, "message": "stale", "errors": [{"reason": "conditionNotMet", "domain": "global", "message": "stale"}]}}),
            headers: vec![],
        },
        5,
    ));
    let e = labels.set_labels(&m.id, &ready, &[]).await.unwrap_err();
    assert_eq!(e.code(), Some("conditionNotMet"), "{e:?}");
    // orca's labels are not for changing, and another owner may not label the machine.
    let before = fake.control().requests();
    let e = labels
        .set_labels(&m.id, &Labels::new(), &["orca-pool".to_string()])
        .await;
    assert!(matches!(e, Err(Error::InvalidSpec { .. })), "{e:?}");
    assert_eq!(fake.control().requests(), before);
    let other = provider(&fake, "stack-2").await;
    assert!(matches!(
        other
            .machine_labels()
            .unwrap()
            .set_labels(&m.id, &Labels::new(), &["shed-state".to_string()])
            .await,
        Err(Error::NotOwned { .. })
    ));
    assert!(matches!(
        other.machine(&m.id).await,
        Err(Error::NotOwned { .. })
    ));
    assert!(p.machine(&id("vm-gone")).await.unwrap().is_none());
}

#[tokio::test]
async fn firewall_rules_are_read_and_patched_through_the_extension() {
    let fake = FakeGce::start().await.unwrap();
    fake.put_firewall(json!({
        "name": "stray-allow-all", "network": NETWORK, "direction": "INGRESS", "priority": 900,
        "allowed": [{"IPProtocol": "all"}], "sourceRanges": ["10.0.0.0/8"],
    }));
    let p: Arc<dyn Provider> = Arc::new(
        GceProvider::new(builder(&fake).page_size(1).build().unwrap(), "stack-1")
            .await
            .unwrap(),
    );
    let fw: &dyn FirewallRules = p.firewall_rules().expect("firewall rules");
    assert_eq!(fw.network_name(), NETWORK);
    let rules = fw.rules().await.unwrap();
    let mut names: Vec<&str> = rules.iter().map(|r| r.name.as_str()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [SSH_RULE, "stray-allow-all"],
        "the default network's rule is not listed"
    );
    assert_eq!(
        fake.control().count(&Method::GET, "/global/firewalls?"),
        3,
        "three rules, page size 1"
    );
    let rule = fw.rule(SSH_RULE).await.unwrap().unwrap();
    assert_eq!((rule.direction.as_str(), rule.disabled), ("INGRESS", false));
    assert_eq!(rule.allowed[0].protocol, "tcp");
    assert_eq!(rule.allowed[0].ports, ["22"]);
    assert_eq!(rule.target_tags, ["shed-test"]);
    assert_eq!(rule.source_ranges, ["203.0.113.7/32"]);
    assert_eq!(rule.network, NETWORK);
    assert!(fw.rule("no-such-rule").await.unwrap().is_none());

    fake.control().clear_log();
    let patched = fw
        .set_source_ranges(SSH_RULE, &["198.51.100.9/32".to_string()])
        .await
        .unwrap();
    let mut expected = rule.clone();
    expected.source_ranges = vec!["198.51.100.9/32".into()];
    assert_eq!(patched, expected, "nothing else changed");
    let stored = fake.firewall(SSH_RULE).unwrap();
    assert_eq!(stored["sourceRanges"], json!(["198.51.100.9/32"]));
    assert_eq!(stored["targetTags"], json!(["shed-test"]));
    // The rule read (its network checked), a merge patch of the sources alone, the global operation
    // followed, the rule read back.
    let log: Vec<(Method, String)> = fake
        .control()
        .log()
        .into_iter()
        .map(|l| (l.method, l.path))
        .collect();
    assert_eq!(log.len(), 4, "{log:?}");
    assert_eq!(log[0].0, Method::GET);
    assert!(log[0].1.ends_with(&format!("/global/firewalls/{SSH_RULE}")));
    assert_eq!(log[1].0, Method::PATCH);
    assert!(log[2].1.contains("/global/operations/") && log[2].1.ends_with("/wait"));
    assert!(log[3].1.ends_with(&format!("/global/firewalls/{SSH_RULE}")));
    let e = fw
        .set_source_ranges("no-such-rule", &["198.51.100.9/32".to_string()])
        .await
        .unwrap_err();
    assert!(matches!(e, Error::NotFound { .. }), "{e:?}");
    assert_eq!(e.code(), Some("notFound"));

    let net = fw.network().await.unwrap();
    assert_eq!(net.name, NETWORK);
    assert!(!net.auto_create_subnetworks);
    assert_eq!(
        net.subnetworks,
        [SUBNET, SUBNET],
        "one in each of two regions"
    );
}

#[tokio::test]
async fn a_rule_of_another_network_is_read_but_never_patched() {
    let fake = FakeGce::start().await.unwrap();
    fake.put_firewall(json!({
        "name": "other-ssh", "network": "other-net", "direction": "INGRESS", "priority": 1000,
        "allowed": [{"IPProtocol": "tcp", "ports": ["22"]}], "sourceRanges": ["198.51.100.9/32"],
    }));
    let p: Arc<dyn Provider> = Arc::new(provider(&fake, "stack-1").await);
    let fw = p.firewall_rules().expect("firewall rules");
    // Read, with its own network named (what lets a caller say the rule is on the wrong network).
    let rule = fw.rule("other-ssh").await.unwrap().expect("the rule reads");
    assert_eq!(rule.network, "other-net");
    assert!(
        fw.rules()
            .await
            .unwrap()
            .iter()
            .all(|r| r.name != "other-ssh")
    );
    // Never patched: refused after reading it, before any change is sent.
    fake.control().clear_log();
    let e = fw
        .set_source_ranges("other-ssh", &["203.0.113.7/32".to_string()])
        .await
        .unwrap_err();
    assert!(matches!(e, Error::InvalidSpec { .. }), "{e:?}");
    assert!(
        e.to_string().contains("other-net") && e.to_string().contains(NETWORK),
        "{e}"
    );
    assert_eq!(
        fake.control().count(&Method::PATCH, "/global/firewalls/"),
        0
    );
    assert_eq!(
        fake.firewall("other-ssh").unwrap()["sourceRanges"],
        json!(["198.51.100.9/32"]),
        "unchanged"
    );
    // The same name on the provider's network would be patched: the network decides, not the name.
    fake.put_firewall(json!({
        "name": "other-ssh", "network": NETWORK, "direction": "INGRESS",
        "allowed": [{"IPProtocol": "tcp", "ports": ["22"]}], "sourceRanges": ["198.51.100.9/32"],
    }));
    let patched = fw
        .set_source_ranges("other-ssh", &["203.0.113.7/32".to_string()])
        .await
        .unwrap();
    assert_eq!(patched.source_ranges, ["203.0.113.7/32"]);
}

#[tokio::test]
async fn a_machine_compute_engine_shows_late_is_waited_for_and_never_believed_gone() {
    let fake = FakeGce::start().await.unwrap();
    let p = GceProvider::new(
        builder(&fake)
            .visibility_window(Duration::from_secs(5))
            .build()
            .unwrap(),
        "stack-1",
    )
    .await
    .unwrap();
    fake.set_visibility_delay(Duration::from_millis(600));
    let started = std::time::Instant::now();
    let m = p
        .create(&spec("vm-late", "e2-small"))
        .await
        .unwrap()
        .machine()
        .unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(500),
        "the create answered before the instance could be read"
    );
    assert_eq!(p.machines("lab").await.unwrap().len(), 1);
    // A 409 for an instance not shown yet is read again, not taken for a disk or a passing failure:
    // a first create whose answer is lost (no retry), then the same create from a new call.
    fake.set_visibility_delay(Duration::from_millis(400));
    let once = GceProvider::new(
        builder(&fake)
            .retry(RetryPolicy::NEVER)
            .visibility_window(Duration::from_secs(5))
            .build()
            .unwrap(),
        "stack-1",
    )
    .await
    .unwrap();
    fake.control().inject(Rule::new(
        Some(Method::POST),
        "/instances?requestId=",
        Fault::DropAnswer,
        1,
    ));
    let e = once
        .create(&spec("vm-late2", "e2-small"))
        .await
        .unwrap_err();
    assert!(e.is_retryable(), "{e:?}");
    let got = once.create(&spec("vm-late2", "e2-small")).await.unwrap();
    assert!(got.is_adopted(), "{got:?}");
    // A delete right after the create deletes (the instance is read, not believed gone).
    fake.set_visibility_delay(Duration::from_millis(300));
    let q = provider(&fake, "stack-1").await;
    let fresh = q
        .create(&spec("vm-late3", "e2-small"))
        .await
        .unwrap()
        .machine()
        .unwrap();
    assert!(q.delete(&fresh.id).await.unwrap());
    assert!(
        fake.instance(ZONE, "vm-late3").is_none(),
        "deleted for real"
    );
    // A failed insert whose instance is not shown yet: the clean-up reads it again and removes it.
    fake.fail_next_insert("INTERNAL_ERROR", "half-way");
    let e = q.create(&spec("vm-late4", "e2-small")).await.unwrap_err();
    assert!(!matches!(e, Error::Leftovers { .. }), "{e:?}");
    assert!(fake.instance(ZONE, "vm-late4").is_none(), "left behind");
    assert!(!fake.disk_names(ZONE).contains(&"vm-late4".to_string()));
    fake.set_visibility_delay(Duration::ZERO);
    assert!(p.delete(&m.id).await.unwrap());
}

/// The boot disk a create of `name` made in `ZONE` (`<name>-<8 hex digits>`).
fn boot_disk_of(fake: &FakeGce, name: &str) -> String {
    let prefix = format!("{name}-");
    let disks: Vec<String> = fake
        .disk_names(ZONE)
        .into_iter()
        .filter(|d| d.starts_with(&prefix))
        .collect();
    assert_eq!(disks.len(), 1, "one boot disk of {name}: {disks:?}");
    disks[0].clone()
}

#[tokio::test]
async fn a_failed_insert_whose_instance_is_not_shown_in_time_names_the_instance_and_its_disk() {
    let fake = FakeGce::start().await.unwrap();
    let window = Duration::from_millis(200);
    let p = GceProvider::new(
        builder(&fake).visibility_window(window).build().unwrap(),
        "stack-1",
    )
    .await
    .unwrap();
    // Compute Engine shows the new instance later than the provider waits for it (long beside the
    // window, so that a slow run still sees it hidden); the insert's operation fails after making
    // the instance and its boot disk.
    let delay = Duration::from_secs(3);
    fake.set_visibility_delay(delay);
    fake.fail_next_insert("ZONE_RESOURCE_POOL_EXHAUSTED", "no room after all");
    let got = p.create(&spec("vm-unseen", "e2-small")).await.unwrap();
    assert!(fake.instance(ZONE, "vm-unseen").is_some(), "it stands");
    let disk = boot_disk_of(&fake, "vm-unseen");
    let instance = format!("instance {} (not shown yet)", id("vm-unseen"));
    let in_use = format!("disk {ZONE}:{disk} (in use)");
    match &got {
        Created::NoStock { left, message, .. } => {
            assert_eq!(left, &vec![instance.clone(), in_use.clone()], "{got:?}");
            assert!(
                message.contains(&instance) && message.contains(&in_use),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
    // Any other failure: Leftovers naming both, keeping the first failure's code.
    fake.fail_next_insert("INTERNAL_ERROR", "half-way");
    let e = p.create(&spec("vm-unseen2", "e2-small")).await.unwrap_err();
    assert_eq!(e.code(), Some("INTERNAL_ERROR"), "{e:?}");
    let disk2 = boot_disk_of(&fake, "vm-unseen2");
    match &e {
        Error::Leftovers { left, .. } => assert_eq!(
            left,
            &vec![
                format!("instance {} (not shown yet)", id("vm-unseen2")),
                format!("disk {ZONE}:{disk2} (in use)"),
            ]
        ),
        other => panic!("{other:?}"),
    }
    // Named, they are removed by name once Compute Engine shows them.
    tokio::time::sleep(delay).await;
    fake.set_visibility_delay(Duration::ZERO);
    for name in ["vm-unseen", "vm-unseen2"] {
        assert!(p.delete_named("lab", name).await.unwrap(), "{name}");
    }
    assert!(
        fake.instance_names(ZONE).is_empty(),
        "{:?}",
        fake.instance_names(ZONE)
    );
    assert!(
        fake.disk_names(ZONE).is_empty(),
        "{:?}",
        fake.disk_names(ZONE)
    );
}

#[tokio::test]
async fn an_insert_whose_operation_fails_never_reads_as_made_nothing() {
    // The operation of an accepted insert that fails (a conflict with a code the driver does not
    // know, here) ran after the insert was accepted and may have made the instance: the caller must
    // read the name again before giving it up, whatever the error's kind.
    let fake = FakeGce::start().await.unwrap();
    let p = provider(&fake, "stack-1").await;
    fake.fail_next_insert_with_status("SOME_CONFLICT", "conflict half-way", 409);
    let e = p
        .create(&spec("vm-conflict", "e2-small"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some("SOME_CONFLICT"), "{e:?}");
    assert!(!e.made_nothing(), "{e:?}");
    // The clean-up removed what the operation made.
    assert!(fake.instance(ZONE, "vm-conflict").is_none());
    assert!(
        fake.disk_names(ZONE).is_empty(),
        "{:?}",
        fake.disk_names(ZONE)
    );
}

#[tokio::test]
async fn a_failed_insert_whose_disk_cannot_be_read_names_what_it_could_not_check() {
    let fake = FakeGce::start().await.unwrap();
    // No retries: one 5xx is a failed read.
    let p = GceProvider::new(
        builder(&fake)
            .retry(RetryPolicy::NEVER)
            .visibility_window(Duration::from_millis(200))
            .build()
            .unwrap(),
        "stack-1",
    )
    .await
    .unwrap();
    fake.set_visibility_delay(Duration::from_secs(3600));
    let unavailable = |times| {
        Rule::new(
            Some(Method::GET),
            "/disks/vm-blind",
            Fault::Status {
                status: 503,
                body: json!({"error": {"code": 503, "message": "backend", "errors": [{"reason": "backendError", "domain": "global", "message": "backend"}]}}),
                headers: vec![],
            },
            times,
        )
    };
    // The first disk read fails; the instance is looked for again, and a later read of the disk
    // shows it in use: both are named.
    fake.fail_next_insert("INTERNAL_ERROR", "half-way");
    fake.control().inject(unavailable(1));
    let e = p.create(&spec("vm-blind", "e2-small")).await.unwrap_err();
    assert_eq!(e.code(), Some("INTERNAL_ERROR"), "{e:?}");
    let disk = boot_disk_of(&fake, "vm-blind");
    match &e {
        Error::Leftovers { left, .. } => assert_eq!(
            left,
            &vec![
                format!("instance {} (not shown yet)", id("vm-blind")),
                format!("disk {ZONE}:{disk} (in use)"),
            ]
        ),
        other => panic!("{other:?}"),
    }
    // Every read of the disk fails: neither could be checked, and both are named as unknown.
    fake.fail_next_insert("INTERNAL_ERROR", "half-way");
    fake.control().inject(unavailable(100));
    let e = p.create(&spec("vm-blind2", "e2-small")).await.unwrap_err();
    fake.control().clear_faults();
    let disk2 = boot_disk_of(&fake, "vm-blind2");
    match &e {
        Error::Leftovers { left, .. } => assert_eq!(
            left,
            &vec![
                format!("instance {} (unknown)", id("vm-blind2")),
                format!("disk {ZONE}:{disk2} (unknown)"),
            ]
        ),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_kept_boot_disk_a_delete_cannot_remove_is_named_and_delete_named_removes_it() {
    // A boot disk whose autoDelete was turned off outside orca outlives its instance. When the
    // delete removes the instance but not that disk, a second delete(id) finds no instance and
    // answers true: only the failure's leftovers tell the caller that delete_named has work left.
    let fake = FakeGce::start().await.unwrap();
    let p = provider(&fake, "stack-1").await;
    let m = p
        .create(&spec("vm-kept", "e2-small"))
        .await
        .unwrap()
        .machine()
        .unwrap();
    let disk = boot_disk_of(&fake, "vm-kept");
    fake.set_disk_auto_delete(ZONE, "vm-kept", false);
    // Every disk delete fails, past the retry budget.
    fake.control().inject(Rule::new(
        Some(Method::DELETE),
        "/disks/",
        Fault::Status {
            status: 503,
            body: json!({"error": {"code": 503, "message": "backend", "errors": [{"reason": "backendError", "domain": "global", "message": "backend"}]}}),
            headers: vec![],
        },
        1_000,
    ));
    let e = p.delete(&m.id).await.unwrap_err();
    fake.control().clear_faults();
    assert!(fake.instance(ZONE, "vm-kept").is_none());
    assert_eq!(e.left(), [format!("disk {ZONE}:{disk}")], "{e:?}");
    assert!(fake.disk_names(ZONE).contains(&disk));
    assert!(p.delete_named("lab", "vm-kept").await.unwrap());
    assert!(
        !fake.disk_names(ZONE).contains(&disk),
        "{:?}",
        fake.disk_names(ZONE)
    );
}

#[tokio::test]
async fn credentials_never_appear_in_any_output() {
    let fake = FakeGce::start().await.unwrap();
    // A key marker that must never be printed: a line of the test key's material.
    let secret_line = TEST_ONLY_RSA_KEY_PEM.lines().nth(3).unwrap();
    assert!(secret_line.len() > 40);
    let config = builder(&fake).build().unwrap();
    let p = GceProvider::new(config.clone(), "stack-1").await.unwrap();
    for text in [
        format!("{config:?}"),
        format!("{p:?}"),
        format!("{:?}", config.credentials),
    ] {
        assert!(!text.contains(secret_line), "{text}");
        assert!(!text.contains("PRIVATE KEY"), "{text}");
        assert!(
            text.contains("redacted") || text.contains("GceProvider"),
            "{text}"
        );
    }
    // Two credential sources: named, not echoed.
    let e = builder(&fake)
        .credentials_json(fake.service_account_json())
        .build()
        .unwrap_err();
    assert!(
        matches!(e, Error::InvalidSettings { ref keys, .. } if keys == &["credentials"]),
        "{e:?}"
    );
    assert!(!format!("{e} {e:?}").contains(secret_line));
    // A refused token answers an error without the key.
    let broken = fake
        .service_account_json()
        .replace(&fake.token_uri(), &format!("{}/elsewhere", fake.url()));
    let q = GceProvider::new(
        Config::builder()
            .project(PROJECT)
            .zone(ZONE)
            .network(NETWORK)
            .subnet(SUBNET)
            .credentials_json(broken)
            .endpoint(fake.endpoint())
            .retry(RetryPolicy::NEVER)
            .build()
            .unwrap(),
        "stack-1",
    )
    .await
    .unwrap();
    let e = q.machines("lab").await.unwrap_err();
    let t = format!("{e} {e:?}");
    assert!(!t.contains(secret_line), "{t}");
    assert!(
        matches!(e, Error::Unauthenticated { .. } | Error::Transient { .. }),
        "{e:?}"
    );
    // A bad key is named, not printed.
    let bad = Config::builder()
        .project(PROJECT)
        .zone(ZONE)
        .network(NETWORK)
        .subnet(SUBNET)
        .credentials_json(
            json!({"type": "service_account", "private_key": "-----BEGIN PRIVATE KEY-----\nTOPSECRETMATERIAL\n-----END PRIVATE KEY-----\n", "client_email": "a@b", "token_uri": "http://127.0.0.1:9/t"})
                .to_string(),
        )
        .build()
        .unwrap();
    let e = GceProvider::new(bad, "x").await.unwrap_err();
    assert!(!format!("{e} {e:?}").contains("TOPSECRETMATERIAL"), "{e:?}");
    assert!(matches!(e, Error::InvalidSettings { .. }), "{e:?}");
}

#[tokio::test]
async fn arch_is_read_and_cached_and_resize_keeps_the_architecture() {
    let fake = FakeGce::start().await.unwrap();
    let p = provider(&fake, "stack-1").await;
    assert_eq!(p.arch("c4a-standard-1").await.unwrap().as_str(), "arm64");
    assert_eq!(p.arch("e2-standard-8").await.unwrap().as_str(), "amd64");
    let n = fake.control().count(&Method::GET, "/machineTypes/");
    p.arch("c4a-standard-1").await.unwrap();
    assert_eq!(fake.control().count(&Method::GET, "/machineTypes/"), n);
    assert!(matches!(
        p.arch("zz-none").await,
        Err(Error::NotFound { .. })
    ));

    let m = p
        .create(&spec("vm-r", "e2-small"))
        .await
        .unwrap()
        .machine()
        .unwrap();
    let e = p.resize(&m.id, "t2a-standard-2").await;
    assert!(matches!(e, Err(Error::InvalidSpec { .. })), "{e:?}");
    let r = p.resize(&m.id, "e2-standard-2").await.unwrap();
    assert!(r.caused_downtime);
    assert_eq!(r.machine.machine_type, "e2-standard-2");
    assert_eq!(r.machine.status, Status::Running);
    let stopped = p.stop(&m.id).await.unwrap();
    assert_eq!(stopped.status, Status::Stopped);
    let r = p.resize(&m.id, "e2-small").await.unwrap();
    assert!(!r.caused_downtime);
    assert_eq!(r.machine.status, Status::Stopped);
    assert!(matches!(
        p.hourly_price("e2-small", ZONE).await,
        Err(Error::Unsupported { .. })
    ));
}

#[tokio::test]
async fn no_room_to_start_or_resize_names_the_type_and_zone_and_a_resize_goes_back() {
    // Compute Engine frees a stopped instance's resources: starting it again, or starting it on a new
    // machine type, can meet ZONE_RESOURCE_POOL_EXHAUSTED in the operation.
    let fake = FakeGce::start().await.unwrap();
    let p = provider(&fake, "stack-1").await;
    let m = p
        .create(&spec("vm-room", "e2-small"))
        .await
        .unwrap()
        .machine()
        .unwrap();
    let no_stock = |r: Result<(), Error>, want: &str| match r {
        Err(e @ Error::NoStock { .. }) => {
            let Error::NoStock {
                machine_type,
                location,
                ..
            } = &e
            else {
                unreachable!()
            };
            assert_eq!((machine_type.as_str(), location.as_str()), (want, ZONE));
            assert_eq!(e.code(), Some("ZONE_RESOURCE_POOL_EXHAUSTED"));
        }
        other => panic!("{other:?}"),
    };
    // A resize of a running machine to a type without room: no stock of the NEW type; the machine
    // goes back to its type and runs again rather than staying stopped on a type it cannot start.
    fake.exhaust("e2-standard-2", ZONE);
    no_stock(
        p.resize(&m.id, "e2-standard-2").await.map(|_| ()),
        "e2-standard-2",
    );
    let vm = fake.instance(ZONE, "vm-room").unwrap();
    assert_eq!(vm["status"], "RUNNING", "{vm}");
    assert!(
        vm["machineType"].as_str().unwrap().ends_with("/e2-small"),
        "{vm}"
    );
    // A start without room for the machine's own type.
    p.stop(&m.id).await.unwrap();
    fake.exhaust("e2-small", ZONE);
    no_stock(p.start(&m.id).await.map(|_| ()), "e2-small");
    assert_eq!(
        fake.instance(ZONE, "vm-room").unwrap()["status"],
        "TERMINATED"
    );
    fake.restore("e2-small", ZONE);
    assert_eq!(p.start(&m.id).await.unwrap().status, Status::Running);
}

/// A machine type offered in some zones only (as many series are): a create in a zone that does
/// not offer it is no stock there, with nothing made, even once the type was read in another zone;
/// a type no zone offers stays not found.
#[tokio::test]
async fn a_type_the_zone_does_not_offer_is_no_stock_there() {
    let fake = FakeGce::start().await.unwrap();
    let p = GceProvider::new(any_zone(&fake).build().unwrap(), "stack-1")
        .await
        .unwrap();
    let other = "us-central1-a";
    fake.offer_only("t2a-standard-1", &[other]);
    let made = p
        .create(&MachineSpec::new("arm-1", "t2a-standard-1", other, "lab"))
        .await
        .unwrap();
    assert!(matches!(made, Created::Machine(_)), "{made:?}");
    match p.create(&spec("arm-2", "t2a-standard-1")).await {
        Ok(Created::NoStock {
            machine_type,
            location,
            message,
            left,
        }) => {
            assert_eq!(
                (machine_type.as_str(), location.as_str()),
                ("t2a-standard-1", ZONE)
            );
            assert!(message.contains("not offered in zone"), "{message}");
            assert!(left.is_empty(), "{left:?}");
        }
        other => panic!("{other:?}"),
    }
    assert!(fake.instance(ZONE, "arm-2").is_none());
    let e = p.create(&spec("typo-1", "e2-smal")).await.unwrap_err();
    assert!(
        matches!(&e, Error::InvalidSpec { field, .. } if field == "machine_type"),
        "{e:?}"
    );
}

/// A resize whose start on the new type passes the region's CPU quota (a running instance's CPUs
/// count again when it starts): the machine goes back to its type and runs again, and the answer
/// is the quota refusal, as it goes back when the zone has no room.
#[tokio::test]
async fn a_resize_whose_start_passes_the_quota_goes_back_and_runs() {
    let fake = FakeGce::start().await.unwrap();
    let p = provider(&fake, "stack-1").await;
    let m = p
        .create(&spec("vm-quota", "e2-small"))
        .await
        .unwrap()
        .machine()
        .unwrap();
    fake.exceed_quota_on_start(1);
    let e = p
        .resize(&m.id, "e2-standard-2")
        .await
        .map(|_| ())
        .unwrap_err();
    assert_eq!(e.kind(), orca_machines::ErrorKind::Quota, "{e}");
    let vm = fake.instance(ZONE, "vm-quota").unwrap();
    assert_eq!(vm["status"], "RUNNING", "{vm}");
    assert!(
        vm["machineType"].as_str().unwrap().ends_with("/e2-small"),
        "{vm}"
    );
}

#[tokio::test]
async fn a_disk_of_the_machine_name_is_never_attached_or_touched() {
    // Compute Engine attaches an existing disk named as the boot disk instead of making one (and
    // deletes it with the instance, autoDelete). A disk named after the machine, left by another tool
    // or kept from an earlier machine, must never become the new machine's boot disk: the driver
    // names the boot disk for this create alone, and the disk stays as it was.
    let fake = FakeGce::start().await.unwrap();
    let p = provider(&fake, "stack-1").await;
    fake.put_disk(ZONE, "vm-disk", json!({"team": "data"}));
    let m = p
        .create(&spec("vm-disk", "e2-small"))
        .await
        .unwrap()
        .machine()
        .unwrap();
    let vm = fake.instance(ZONE, "vm-disk").unwrap();
    let source = vm["disks"][0]["source"].as_str().unwrap();
    let boot = source.rsplit('/').next().unwrap();
    assert_ne!(boot, "vm-disk", "the foreign disk was attached");
    assert!(
        boot.starts_with("vm-disk-") && boot.len() == "vm-disk-".len() + 8,
        "{boot}"
    );
    assert!(fake.disk_names(ZONE).contains(&"vm-disk".to_string()));
    p.delete(&m.id).await.unwrap();
    assert_eq!(fake.disk_names(ZONE), vec!["vm-disk".to_string()]);

    // Two creates of the same name never share a boot disk name; the longest name still makes a
    // valid one.
    let long = format!("v{}", "x".repeat(62));
    p.create(&spec(&long, "e2-small"))
        .await
        .unwrap()
        .machine()
        .unwrap();
    let vm = fake.instance(ZONE, &long).unwrap();
    let boot = vm["disks"][0]["source"]
        .as_str()
        .unwrap()
        .rsplit('/')
        .next()
        .unwrap()
        .to_string();
    assert!(boot.len() <= 63 && !boot.ends_with('-'), "{boot}");
    assert!(boot.starts_with(&long[..54]), "{boot}");
}

#[tokio::test]
async fn an_operations_wait_that_answers_at_once_is_not_called_in_a_tight_loop() {
    // operations.wait is best effort: it may answer at once with the operation still running. The
    // driver then pauses before it asks again, rather than spending the project's API quota in a loop.
    let fake = FakeGce::start().await.unwrap();
    let p = GceProvider::new(
        builder(&fake)
            .operation_timeout(Duration::from_secs(2))
            .build()
            .unwrap(),
        "stack-1",
    )
    .await
    .unwrap();
    let m = p
        .create(&spec("vm-wait", "e2-small"))
        .await
        .unwrap()
        .machine()
        .unwrap();
    // The stop's operation runs far longer than the driver follows it.
    fake.set_operation_time(Duration::from_secs(3600));
    fake.answer_waits_early(u32::MAX);
    fake.control().clear_log();
    let e = p.stop(&m.id).await.unwrap_err();
    assert!(e.is_retryable(), "{e:?}");
    let waits = fake.control().count(&Method::POST, "/wait");
    assert!(
        (2..=12).contains(&waits),
        "{waits} operations.wait calls in 2 s"
    );
    fake.answer_waits_early(0);
}

#[tokio::test]
async fn a_create_of_a_name_taken_since_never_deletes_or_adopts_that_machine() {
    // An earlier create of this spec failed (no stock); since then another create made a machine of
    // that name (another type). Creating the first spec again must neither delete nor adopt it.
    let fake = FakeGce::start().await.unwrap();
    let p = provider(&fake, "stack-1").await;
    fake.exhaust("e2-small", ZONE);
    let got = p.create(&spec("vm-same", "e2-small")).await.unwrap();
    assert!(matches!(got, Created::NoStock { .. }), "{got:?}");
    fake.restore("e2-small", ZONE);
    let other = p
        .create(&spec("vm-same", "e2-medium"))
        .await
        .unwrap()
        .machine()
        .unwrap();
    assert_eq!(other.machine_type, "e2-medium");
    fake.control().clear_log();
    let e = p.create(&spec("vm-same", "e2-small")).await.unwrap_err();
    assert!(matches!(e, Error::AlreadyExists { .. }), "{e:?}");
    assert_eq!(
        fake.control().count(&Method::DELETE, "/instances/vm-same"),
        0
    );
    let vm = fake
        .instance(ZONE, "vm-same")
        .expect("the machine made since is kept");
    assert!(vm["machineType"].as_str().unwrap().ends_with("/e2-medium"));
    assert_eq!(vm["status"], "RUNNING");
}

/// Runs a delete of `id` on `p` and stops it (drops it, as a caller's timeout does) once Compute
/// Engine has accepted it: the instance `name` is being deleted.
async fn stop_delete_once_accepted(fake: &FakeGce, p: &GceProvider, id: &str, name: &str) {
    let accepted = async {
        while fake.instance(ZONE, name).unwrap()["status"] != "STOPPING" {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::select! {
        got = p.delete(id) => panic!("the delete answered before it was stopped: {got:?}"),
        () = accepted => {}
    }
}

#[tokio::test]
async fn a_create_of_a_name_whose_instance_is_being_deleted_never_adopts_that_instance() {
    // A delete stopped mid-way leaves the instance in deletion: a create of its name meets 409 for
    // it until it is gone. Adopting it would answer a machine that vanishes a moment later.
    let fake = FakeGce::start().await.unwrap();
    let p = provider(&fake, "stack-1").await;
    let m = p
        .create(&spec("vm-going", "e2-small"))
        .await
        .unwrap()
        .machine()
        .unwrap();
    let first = fake.instance(ZONE, "vm-going").unwrap()["id"].clone();
    fake.set_operation_time(Duration::from_secs(2));
    stop_delete_once_accepted(&fake, &p, &m.id, "vm-going").await;
    fake.control().clear_log();
    let got = p.create(&spec("vm-going", "e2-small")).await.unwrap();
    assert!(matches!(got, Created::Machine(_)), "{got:?}");
    // The delete was waited out and the name made anew: the instance standing is a new one.
    let vm = fake
        .instance(ZONE, "vm-going")
        .expect("the new machine stands");
    assert_ne!(vm["id"], first, "{vm}");
    assert_eq!(vm["status"], "RUNNING");
    assert_eq!(
        fake.control().count(&Method::POST, "/instances?requestId="),
        2
    );

    // A provider that cannot wait for the delete's end: Busy, retryable, and nothing made.
    let m = got.machine().unwrap();
    fake.set_operation_time(Duration::from_secs(3600));
    stop_delete_once_accepted(&fake, &p, &m.id, "vm-going").await;
    let q = GceProvider::new(
        builder(&fake)
            .operation_timeout(Duration::from_millis(300))
            .build()
            .unwrap(),
        "stack-1",
    )
    .await
    .unwrap();
    // (Waits answer at once, unfinished, so that the driver's timeout ends its wait.)
    fake.answer_waits_early(u32::MAX);
    let e = q.create(&spec("vm-going", "e2-small")).await.unwrap_err();
    fake.answer_waits_early(0);
    assert!(matches!(e, Error::Busy { .. }), "{e:?}");
    assert!(e.is_retryable() && e.made_nothing(), "{e:?}");
    assert!(e.to_string().contains("being deleted"), "{e}");
    assert_eq!(
        fake.instance(ZONE, "vm-going").unwrap()["status"],
        "STOPPING"
    );
}

#[tokio::test]
async fn a_create_of_a_name_whose_delete_is_still_pending_never_adopts_that_instance() {
    // A delete's operation can wait PENDING for seconds while its instance still reads RUNNING:
    // adopting that instance would answer a machine that is gone a moment later.
    let fake = FakeGce::start().await.unwrap();
    let p = provider(&fake, "stack-1").await;
    let m = p
        .create(&spec("vm-doomed", "e2-small"))
        .await
        .unwrap()
        .machine()
        .unwrap();
    let first = fake.instance(ZONE, "vm-doomed").unwrap()["id"].clone();
    fake.set_delete_pending_time(Duration::from_secs(1));
    fake.control().clear_log();
    // The delete is stopped (a caller's timeout) once Compute Engine answered its DELETE (the
    // fake logs a request once answered).
    let accepted = async {
        while fake
            .control()
            .count(&Method::DELETE, "/instances/vm-doomed")
            == 0
        {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::select! {
        got = p.delete(&m.id) => panic!("the delete answered before it was stopped: {got:?}"),
        () = accepted => {}
    }
    assert_eq!(
        fake.instance(ZONE, "vm-doomed").unwrap()["status"],
        "RUNNING"
    );
    let got = p.create(&spec("vm-doomed", "e2-small")).await.unwrap();
    assert!(matches!(got, Created::Machine(_)), "{got:?}");
    // The delete was waited out and the name made anew: the instance standing is a new one.
    let vm = fake
        .instance(ZONE, "vm-doomed")
        .expect("the new machine stands");
    assert_ne!(vm["id"], first, "{vm}");
    assert_eq!(vm["status"], "RUNNING");
}

#[tokio::test]
async fn a_change_of_a_machine_another_operation_holds_waits_for_that_operation() {
    // While an operation changes an instance, Compute Engine answers other changes of it with
    // 400 resourceNotReady for as long as that operation lasts: longer than the retries of a passing
    // failure give it, so the driver waits for it (busy, within the policy's busy_wait).
    let fake = FakeGce::start().await.unwrap();
    let p = provider(&fake, "stack-1").await;
    let m = p
        .create(&spec("vm-busy", "e2-small"))
        .await
        .unwrap()
        .machine()
        .unwrap();
    fake.set_operation_time(Duration::from_secs(4));
    let labels: &dyn MachineLabels = p.machine_labels().expect("labels");
    let set = Labels::from([("shed-state".to_string(), "stopping".to_string())]);
    let (stopped, labelled) = tokio::join!(p.stop(&m.id), async {
        // Once the stop's operation holds the instance.
        while fake.instance(ZONE, "vm-busy").unwrap()["status"] != "STOPPING" {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        labels.set_labels(&m.id, &set, &[]).await
    });
    assert_eq!(stopped.unwrap().status, Status::Stopped);
    let labelled = labelled.unwrap();
    assert_eq!(labelled.labels["shed-state"], "stopping");
    assert!(
        fake.control().count(&Method::POST, "/setLabels") >= 2,
        "the first setLabels met the running stop"
    );
    // The answer itself is Busy, with the cloud's code, when the policy does not wait. (The
    // operations last long enough for the second call to meet them on a loaded machine.)
    fake.set_operation_time(Duration::from_secs(4));
    let q = GceProvider::new(
        builder(&fake).retry(RetryPolicy::NEVER).build().unwrap(),
        "stack-1",
    )
    .await
    .unwrap();
    let (started, refused) = tokio::join!(p.start(&m.id), async {
        while fake.instance(ZONE, "vm-busy").unwrap()["status"] != "STAGING" {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        q.stop(&m.id).await
    });
    started.unwrap();
    let e = refused.unwrap_err();
    assert!(matches!(e, Error::Busy { .. }), "{e:?}");
    assert_eq!(e.code(), Some("resourceNotReady"));
}

#[tokio::test]
async fn ssh_keys_turn_os_login_off_and_a_policy_requiring_it_refuses_the_create() {
    // OS Login ignores an instance's ssh-keys. A project may turn it on in its metadata: a machine
    // with keys turns it off for itself. An organisation policy may require it: then such a machine
    // cannot be made, and the create says why, naming the policy; nothing is made.
    let fake = FakeGce::start().await.unwrap();
    let p = provider(&fake, "stack-1").await;
    fake.set_project_os_login(true);
    p.create(&spec("vm-keys", "e2-small").with_ssh_key(KEY_A))
        .await
        .unwrap()
        .machine()
        .unwrap();
    assert!(fake.ssh_keys_honoured(ZONE, "vm-keys"));
    // Without keys the project's choice stands.
    p.create(&spec("vm-plain", "e2-small"))
        .await
        .unwrap()
        .machine()
        .unwrap();
    let vm = fake.instance(ZONE, "vm-plain").unwrap();
    assert_eq!(vm["metadata"]["items"].as_array().unwrap().len(), 1, "{vm}");

    fake.require_os_login(true);
    let e = p
        .create(&spec("vm-policy", "e2-small").with_ssh_key(KEY_A))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::PermissionDenied { .. }), "{e:?}");
    assert!(
        e.to_string().contains("constraints/compute.requireOsLogin"),
        "{e}"
    );
    assert_eq!(e.code(), Some("conditionNotMet"));
    assert!(e.made_nothing(), "{e:?}");
    assert!(fake.instance(ZONE, "vm-policy").is_none());
    assert!(
        !fake
            .disk_names(ZONE)
            .iter()
            .any(|d| d.starts_with("vm-policy"))
    );
    // Without keys the policy is no obstacle.
    p.create(&spec("vm-policy", "e2-small"))
        .await
        .unwrap()
        .machine()
        .unwrap();
}

#[tokio::test]
async fn boot_disks_are_hyperdisk_where_the_series_needs_it_and_balanced_elsewhere() {
    // Fourth-generation series (C4, C4A, N4) boot from Hyperdisk only; a persistent disk is refused
    // there. Elsewhere the default would be pd-standard on older series: the driver asks for
    // pd-balanced.
    let fake = FakeGce::start().await.unwrap();
    let p = provider(&fake, "stack-1").await;
    for (name, mt, want) in [
        ("vm-c4a", "c4a-standard-1", "hyperdisk-balanced"),
        ("vm-c4", "c4-standard-2", "hyperdisk-balanced"),
        ("vm-n4", "n4-standard-2", "hyperdisk-balanced"),
        ("vm-e2", "e2-small", "pd-balanced"),
        ("vm-t2a", "t2a-standard-1", "pd-balanced"),
    ] {
        let m = p.create(&spec(name, mt)).await.unwrap().machine().unwrap();
        assert_eq!(m.machine_type, mt);
        let vm = fake.instance(ZONE, name).unwrap();
        let boot = vm["disks"][0]["source"]
            .as_str()
            .unwrap()
            .rsplit('/')
            .next()
            .unwrap()
            .to_string();
        let disk = fake.disk(ZONE, &boot).unwrap();
        assert!(
            disk["type"]
                .as_str()
                .unwrap()
                .ends_with(&format!("/diskTypes/{want}")),
            "{mt}: {}",
            disk["type"]
        );
    }
}

#[tokio::test]
async fn a_machine_is_found_by_name_with_one_request() {
    // The cheapest read by name: one listing filtered on the pool's labels and the name, in one
    // zone or across every zone; another pool's or owner's machine of that name is not it.
    let fake = FakeGce::start().await.unwrap();
    let p = provider(&fake, "stack-1").await;
    let m = p
        .create(&spec("vm-named", "e2-small"))
        .await
        .unwrap()
        .machine()
        .unwrap();
    fake.put_instance(
        ZONE,
        "vm-other",
        "e2-small",
        json!({"orca": "pool", "orca-pool": "lab", "orca-owner": "stack-2"}),
    );
    fake.seed_instances(
        ZONE,
        "filler",
        5,
        "e2-small",
        json!({"orca": "pool", "orca-pool": "lab", "orca-owner": "stack-1"}),
    );
    let every_zone = GceProvider::new(any_zone(&fake).page_size(2).build().unwrap(), "stack-1")
        .await
        .unwrap();
    for q in [&p, &every_zone] {
        // The access token is fetched once, by a first call.
        q.machine_named("lab", "vm-gone").await.unwrap();
        fake.control().clear_log();
        let found = q.machine_named("lab", "vm-named").await.unwrap().unwrap();
        assert_eq!(found.id, m.id);
        assert_eq!(fake.control().requests(), 1, "one listing");
        assert!(
            q.machine_named("other", "vm-named")
                .await
                .unwrap()
                .is_none()
        );
        assert!(q.machine_named("lab", "vm-other").await.unwrap().is_none());
        assert!(q.machine_named("lab", "vm-gone").await.unwrap().is_none());
    }
    let e = p.machine_named("lab", "").await.unwrap_err();
    assert!(matches!(e, Error::InvalidSpec { .. }), "{e:?}");
}

/// A create whose insert Compute Engine accepted, and whose waits on it are then throttled, fails as
/// throttled but never as "made nothing": a caller that gave the name up would leave the instance
/// unknown.
#[tokio::test]
async fn a_create_throttled_after_the_insert_was_accepted_did_not_make_nothing() {
    let fake = FakeGce::start().await.unwrap();
    let p = GceProvider::new(
        builder(&fake).retry(RetryPolicy::NEVER).build().unwrap(),
        "stack-1",
    )
    .await
    .unwrap();
    p.arch("e2-small").await.unwrap();
    let throttled = || Fault::Status {
        status: 429,
        body: json!({"error": {"code": 429, "message": "slow down",
            "errors": [{"reason": "rateLimitExceeded", "domain": "usageLimits", "message": "slow down"}]}}),
        headers: vec![],
    };
    fake.control()
        .inject(Rule::new(None, "/operations/", throttled(), 1_000));
    fake.control().inject(Rule::new(
        Some(Method::GET),
        "/instances/",
        throttled(),
        1_000,
    ));
    let err = p.create(&spec("thr-1", "e2-small")).await.unwrap_err();
    assert_eq!(err.kind(), orca_machines::ErrorKind::Throttled, "{err}");
    assert!(
        !err.made_nothing(),
        "the insert was accepted before the throttled reads: {err}"
    );
    fake.control().clear_faults();
    assert!(p.machine_named("lab", "thr-1").await.unwrap().is_some());
}

/// Compute Engine answers every call into a project that does not exist with 404 `notFound` "The
/// resource 'projects/<id>' was not found". That says nothing of a machine: read as "not found", a
/// delete of a live machine answered done and a read answered none under a mistyped project, and
/// an autoscaler would drop from its record machines that run on. It is the setting named.
#[tokio::test]
async fn a_project_that_does_not_exist_is_the_setting_named() {
    let fake = FakeGce::start().await.unwrap();
    let made = provider(&fake, "owner-1").await;
    let m = match made.create(&spec("web-1", "e2-small")).await.unwrap() {
        Created::Machine(m) => m,
        other => panic!("{other:?}"),
    };
    let typo = GceProvider::new(
        builder(&fake).project("proj-typo").build().unwrap(),
        "owner-1",
    )
    .await
    .expect("provider");
    let settings_error = |e: Error| match e {
        Error::InvalidSettings { keys, message } => {
            assert_eq!(keys, ["ORCA_GCE_PROJECT"], "{message}");
            assert!(message.contains("proj-typo"), "{message}");
        }
        other => panic!("a settings error naming ORCA_GCE_PROJECT expected, got {other:?}"),
    };
    settings_error(typo.delete(&m.id).await.unwrap_err());
    settings_error(typo.machine(&m.id).await.unwrap_err());
    settings_error(typo.machines("lab").await.unwrap_err());
    settings_error(typo.delete_named("lab", "web-1").await.unwrap_err());
    let listed = made.machines("lab").await.unwrap();
    assert_eq!(
        listed.iter().map(|m| m.name.as_str()).collect::<Vec<_>>(),
        ["web-1"]
    );
}

/// An image the spec names is read before the insert: one of another architecture than the machine
/// type (an arm64 type never boots an amd64 image), or one Compute Engine does not have, is refused
/// naming the image, and nothing is inserted. One of the type's architecture boots.
#[tokio::test]
async fn a_spec_image_of_another_architecture_or_none_is_refused_before_the_insert() {
    let fake = FakeGce::start().await.unwrap();
    let p = provider(&fake, "owner-1").await;
    let amd_image = "projects/ubuntu-os-cloud/global/images/family/ubuntu-2404-lts-amd64";
    let amd_named = "projects/ubuntu-os-cloud/global/images/ubuntu-2404-noble-amd64-v20251001";
    for (image, why) in [
        (amd_image, "arm64"),
        (amd_named, "arm64"),
        (
            "https://compute.googleapis.com/compute/v1/projects/ubuntu-os-cloud/global/images/family/ubuntu-2404-lts-amd64",
            "arm64",
        ),
        (
            "projects/ubuntu-os-cloud/global/images/no-such-image",
            "no image",
        ),
        ("projects/../global/images/x", "image path"),
    ] {
        let s = spec("vm-arm", "t2a-standard-1").with_image(image);
        match p.create(&s).await {
            Err(Error::InvalidSpec { field, rule }) => {
                assert_eq!(field, "image", "{rule}");
                assert!(rule.contains(why), "{image}: {rule}");
            }
            other => panic!("{image}: {other:?}"),
        }
    }
    let inserts = fake
        .control()
        .log()
        .into_iter()
        .filter(|r| r.method == Method::POST && r.path.ends_with("/instances"))
        .count();
    assert_eq!(inserts, 0, "nothing inserted");
    let m = match p
        .create(&spec("vm-amd", "e2-small").with_image(amd_named))
        .await
    {
        Ok(Created::Machine(m)) => m,
        other => panic!("{other:?}"),
    };
    assert_eq!(m.name, "vm-amd");
}

/// A create that meets the instance of an earlier create whose insert is still under way follows
/// that insert to its end before answering: when it fails (no room in the zone), the instance and
/// its boot disk go and the answer is no stock, never the instance as a machine (before, the
/// instance was adopted while `PROVISIONING`, and its insert's failure was nobody's).
#[tokio::test]
async fn a_create_meeting_an_insert_under_way_follows_it_to_its_end() {
    let fake = FakeGce::start().await.unwrap();
    let p = provider(&fake, "stack-1").await;
    fake.set_operation_time(Duration::from_millis(800));
    fake.fail_next_insert(
        "ZONE_RESOURCE_POOL_EXHAUSTED",
        "The zone does not have enough resources available to fulfill the request.",
    );
    // The first create is dropped once its instance stands, its insert still running.
    let first = spec("vm-under-way", "e2-small");
    tokio::select! {
        got = p.create(&first) => panic!("{got:?}"),
        () = async {
            while fake.instance(ZONE, "vm-under-way").is_none() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        } => {}
    }
    match p.create(&spec("vm-under-way", "e2-small")).await {
        Ok(Created::NoStock { left, .. }) => assert!(left.is_empty(), "{left:?}"),
        other => panic!("{other:?}"),
    }
    assert!(fake.instance(ZONE, "vm-under-way").is_none());
    assert_eq!(fake.disk_names(ZONE), Vec::<String>::new());
}

/// A delete whose operation cannot be read (`operations.wait` answers 404: the operation, not the
/// instance) is not taken as the instance gone: the delete follows the instance itself until it is
/// (before, `delete` answered true at once while the instance still stood).
#[tokio::test]
async fn a_delete_whose_operation_reads_not_found_waits_for_the_instance_to_go() {
    let fake = FakeGce::start().await.unwrap();
    let p = provider(&fake, "stack-1").await;
    let m = p
        .create(&spec("vm-op-404", "e2-small"))
        .await
        .unwrap()
        .machine()
        .unwrap();
    fake.set_operation_time(Duration::from_millis(700));
    let gone = "The resource 'projects/orca-fake-project/zones/europe-west1-b/operations/operation-x' was not found";
    fake.control().inject(Rule::new(
        Some(Method::POST),
        "/wait",
        Fault::Status {
            status: 404,
            body: json!({"error": {"code": 404, "message": gone,
                "errors": [{"reason": "notFound", "domain": "global", "message": gone}]}}),
            headers: vec![],
        },
        1,
    ));
    assert!(p.delete(&m.id).await.unwrap());
    assert!(
        fake.instance(ZONE, "vm-op-404").is_none(),
        "the instance still stands"
    );
}
