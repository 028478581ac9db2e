//! `core.cloud.resized`: downtime per VM as the driver reports it; souls untouched; no capability, no
//! call.

use crate::support;

use std::sync::atomic::Ordering;

use orca::Provider as _;
use serde_json::json;
use support::{hosts, World};

#[tokio::test]
async fn resize_reports_downtime_per_vm_and_leaves_souls_alone() {
    let Some(w) = World::new("resize_reports_downtime_per_vm_and_leaves_souls_alone").await else {
        return;
    };
    let out = w
        .create(json!({"provider": "lab", "profile": "small", "count": 2, "name": "r"}))
        .await;
    let ids: Vec<String> = hosts(&out)
        .iter()
        .map(|h| h["vm_id"].as_str().unwrap().to_string())
        .collect();
    // The second VM is stopped: resizing it needs no stop, so no downtime.
    assert!(w.cloud.operator_stop(&ids[1]));
    let souls = "SELECT * FROM keeper.souls ORDER BY id";
    let before = w.rows(souls).await;
    let out = w
        .step(
            "core.cloud.resized",
            json!({"provider": "lab", "vm_ids": ids, "machine_type": "amd64-large"}),
        )
        .await
        .unwrap();
    assert_eq!(out["action"], "resized");
    assert_eq!(out["changed"], true);
    assert_eq!(out["count"], 2);
    let h = hosts(&out);
    assert_eq!(h[0]["vm_id"], ids[0].as_str());
    assert_eq!(h[0]["caused_downtime"], true);
    assert_eq!(h[1]["caused_downtime"], false);
    assert_eq!(h[0]["previous_machine_type"], "amd64-small");
    assert_eq!(h[0]["machine_type"], "amd64-large");
    assert!(w.machines().iter().all(|m| m.machine_type == "amd64-large"));
    assert_eq!(w.rows(souls).await, before, "souls are not touched");
    let e = w.audit("cloud.provisioned").await.pop().unwrap();
    assert_eq!(e["outcome"], "succeeded");
    assert_eq!(e["payload"]["action"], "resized");
    assert_eq!(
        e["payload"]["counters"],
        json!({"resized": 2, "caused_downtime": 1})
    );

    // The same size again changes nothing and stops nothing.
    let out = w
        .step(
            "core.cloud.resized",
            json!({"provider": "lab", "vm_ids": [ids[0]], "machine_type": "amd64-large"}),
        )
        .await
        .unwrap();
    assert_eq!(out["changed"], false);
    assert_eq!(hosts(&out)[0]["caused_downtime"], false);

    // A size the cloud refuses (another architecture) fails, saying what was resized before it.
    let f = w
        .step(
            "core.cloud.resized",
            json!({"provider": "lab", "vm_ids": ids, "machine_type": "arm64-large"}),
        )
        .await
        .unwrap_err();
    assert_eq!(f.error.code, "params.invalid");
    assert_eq!(f.error.field.as_deref(), Some("machine_type"));
    assert_eq!(f.output["resized"], json!([]));
    assert_eq!(w.rows(souls).await, before);
    w.finish().await;
}

#[tokio::test]
async fn a_driver_without_resize_answers_resize_unsupported() {
    let Some(w) = World::new("a_driver_without_resize_answers_resize_unsupported").await else {
        return;
    };
    let out = w
        .create(json!({"provider": "lab", "profile": "small"}))
        .await;
    let id = hosts(&out)[0]["vm_id"].clone();
    w.knobs.no_resize.store(true, Ordering::SeqCst);
    let requests = w.requests().await;
    let f = w
        .step(
            "core.cloud.resized",
            json!({"provider": "lab", "vm_ids": [id], "machine_type": "amd64-large"}),
        )
        .await
        .unwrap_err();
    assert_eq!(f.error.code, "resize.unsupported");
    assert_eq!(f.error.status, 422);
    assert_eq!(w.requests().await, requests, "refused before any call");
    assert_eq!(w.machines()[0].machine_type, "amd64-small");
    let e = w.audit("cloud.provisioned").await.pop().unwrap();
    assert_eq!(e["outcome"], "refused");
    assert_eq!(e["payload"]["error"]["code"], "resize.unsupported");
    w.finish().await;
}

/// A VM of keeper's owner but of another pool is not keeper's: the resize refuses it and leaves
/// its type as it was.
#[tokio::test]
async fn a_vm_of_another_pool_is_not_resized() {
    let Some(w) = World::new("a_vm_of_another_pool_is_not_resized").await else {
        return;
    };
    let other = w
        .cloud
        .provider("keeper")
        .unwrap()
        .create(&orca::MachineSpec::new(
            "elsewhere",
            "amd64-small",
            "zone-a",
            "other",
        ))
        .await
        .unwrap()
        .machine()
        .unwrap();
    let f = w
        .step(
            "core.cloud.resized",
            json!({"provider": "lab", "vm_ids": [other.id], "machine_type": "amd64-large"}),
        )
        .await
        .unwrap_err();
    assert_eq!(f.error.code, "cloud.other_pool", "{}", f.error);
    let m = w.machines().into_iter().find(|m| m.id == other.id).unwrap();
    assert_eq!(m.machine_type, "amd64-small");
    w.finish().await;
}

/// A resize's audit event names the souls on the VMs it resized (souls it leaves as they are),
/// not none.
#[tokio::test]
async fn resized_names_the_souls_of_its_vms_in_its_audit_event() {
    let Some(w) = World::new("resized_names_the_souls_of_its_vms_in_its_audit_event").await else {
        return;
    };
    let out = w
        .create(json!({"provider": "lab", "profile": "small", "count": 2, "name": "rs"}))
        .await;
    let other = w
        .create(json!({"provider": "lab", "profile": "small", "count": 1, "name": "other"}))
        .await;
    let ids: Vec<&str> = hosts(&out)
        .iter()
        .map(|h| h["vm_id"].as_str().unwrap())
        .collect();
    let sids: Vec<&str> = hosts(&out)
        .iter()
        .map(|h| h["sid"].as_str().unwrap())
        .collect();
    assert_ne!(hosts(&other)[0]["sid"], sids[0]);
    w.step(
        "core.cloud.resized",
        json!({"provider": "lab", "vm_ids": ids, "machine_type": "amd64-large"}),
    )
    .await
    .unwrap();
    let e = w.audit("cloud.provisioned").await.pop().unwrap();
    assert_eq!(e["outcome"], "succeeded");
    assert_eq!(e["payload"]["sids"], json!(sids), "{e}");
    w.finish().await;
}

#[tokio::test]
async fn a_failed_resize_reports_the_state_it_left_the_vm_in() {
    let Some(w) = World::new("a_failed_resize_reports_the_state_it_left_the_vm_in").await else {
        return;
    };
    let out = w
        .create(json!({"provider": "lab", "profile": "small", "count": 2, "name": "rf"}))
        .await;
    let ids: Vec<String> = hosts(&out)
        .iter()
        .map(|h| h["vm_id"].as_str().unwrap().to_string())
        .collect();
    w.knobs
        .resize_stops_then_fails
        .store(true, Ordering::SeqCst);
    let f = w
        .step(
            "core.cloud.resized",
            json!({"provider": "lab", "vm_ids": ids, "machine_type": "amd64-large"}),
        )
        .await
        .unwrap_err();
    assert_eq!(f.error.code, "cloud.transient", "{}", f.error);
    assert!(f.error.message.contains("is now stopped"), "{}", f.error);
    let failed = &f.output["failed"][0];
    assert_eq!(failed["vm_id"], ids[0].as_str(), "{}", f.output);
    assert_eq!(failed["status"], "stopped", "{}", f.output);
    assert_eq!(failed["previous_status"], "running", "{}", f.output);
    assert_eq!(failed["machine_type"], "amd64-small", "{}", f.output);
    assert_eq!(failed["caused_downtime"], true, "{}", f.output);
    assert_eq!(f.output["changed"], true, "the VM is stopped: {}", f.output);
    assert_eq!(f.output["counters"]["caused_downtime"], 1, "{}", f.output);
    assert_eq!(f.output["not_attempted"], json!([ids[1]]), "{}", f.output);
    let e = w.audit("cloud.provisioned").await.pop().unwrap();
    assert_eq!(e["payload"]["failed"][0]["status"], "stopped", "{e}");
    w.finish().await;
}

#[tokio::test]
async fn a_vm_a_resize_left_stopped_is_started_again_by_the_reconciler() {
    let Some(w) = World::new("a_vm_a_resize_left_stopped_is_started_again_by_the_reconciler").await
    else {
        return;
    };
    let out = w
        .create(json!({"provider": "lab", "profile": "small", "count": 3, "name": "rj"}))
        .await;
    let ids: Vec<String> = hosts(&out)
        .iter()
        .map(|h| h["vm_id"].as_str().unwrap().to_string())
        .collect();
    let status = |w: &World, id: &str| {
        w.machines()
            .into_iter()
            .find(|m| m.id == id)
            .unwrap()
            .status
            .as_str()
            .to_string()
    };
    // A resize that went through closes its row; a VM stopped before needs none.
    assert!(w.cloud.operator_stop(&ids[1]));
    w.step(
        "core.cloud.resized",
        json!({"provider": "lab", "vm_ids": [ids[0], ids[1]], "machine_type": "amd64-large"}),
    )
    .await
    .unwrap();
    let rows = w
        .rows("SELECT vm_id, state FROM keeper.vm_resizes ORDER BY id")
        .await;
    assert_eq!(rows, vec![json!({"vm_id": ids[0], "state": "done"})]);

    // The driver stops the VM, then fails: the row journalled before the call stays resizing.
    w.knobs
        .resize_stops_then_fails
        .store(true, Ordering::SeqCst);
    let f = w
        .step(
            "core.cloud.resized",
            json!({"provider": "lab", "vm_ids": [ids[2]], "machine_type": "amd64-large"}),
        )
        .await
        .unwrap_err();
    let journal = f.output["failed"][0]["journal"].as_str().unwrap();
    assert!(journal.contains("state resizing"), "{journal}");
    assert_eq!(status(&w, &ids[2]), "stopped");
    // As a keeper killed between the driver's stop and its start would leave it: a row resizing
    // and the VM stopped.
    w.client()
        .await
        .execute(
            "INSERT INTO keeper.vm_resizes (step_id, provider, vm_id, machine_type, state)
             VALUES ('killed-resize', 'lab', $1, 'amd64-large', 'resizing')",
            &[&ids[0]],
        )
        .await
        .unwrap();
    assert!(w.cloud.operator_stop(&ids[0]));

    let r = w
        .keeper
        .reconcile("test", keeper::cloud::RECONCILE_GRACE)
        .await
        .unwrap();
    assert!(r.changed, "{r:?}");
    assert!(!r.needs_attention(), "{r:?}");
    let started: Vec<&String> = r.steps.iter().flat_map(|s| &s.started).collect();
    assert_eq!(started, vec![&ids[2], &ids[0]], "{r:?}");
    assert_eq!(status(&w, &ids[0]), "running");
    assert_eq!(status(&w, &ids[2]), "running");
    assert_eq!(status(&w, &ids[1]), "stopped", "stopped before: left so");
    assert_eq!(
        w.count("SELECT 1 FROM keeper.vm_resizes WHERE state = 'started'")
            .await,
        2
    );
    let events = w.audit(keeper::cloud::CLOUD_RECONCILED).await;
    assert_eq!(events.len(), 2, "one event a step");
    // A second run finds nothing to do.
    let r = w
        .keeper
        .reconcile("test", keeper::cloud::RECONCILE_GRACE)
        .await
        .unwrap();
    assert!(!r.changed, "{r:?}");
    assert!(r.steps.is_empty(), "{r:?}");
    w.finish().await;
}
