//! The audit trail: `cloud.provisioned` for every outcome, and an audit failure fails the step.
//!
//! The failure is a real one: a trigger makes PostgreSQL refuse every insert into
//! `keeper.audit_events`, as a full disk, a revoked grant or a broken replica would.

use crate::support;

use serde_json::{json, Value};
use support::{hosts, World};

const BREAK_AUDIT: &str = "
    CREATE FUNCTION keeper.test_refuse_audit() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN RAISE EXCEPTION 'audit storage refused the event'; END $$;
    CREATE TRIGGER test_refuse_audit BEFORE INSERT ON keeper.audit_events
        FOR EACH ROW EXECUTE FUNCTION keeper.test_refuse_audit();";

const MEND_AUDIT: &str = "
    DROP TRIGGER test_refuse_audit ON keeper.audit_events;
    DROP FUNCTION keeper.test_refuse_audit();";

async fn break_audit(w: &World) {
    w.client().await.batch_execute(BREAK_AUDIT).await.unwrap();
}

async fn mend_audit(w: &World) {
    w.client().await.batch_execute(MEND_AUDIT).await.unwrap();
}

#[tokio::test]
async fn an_audit_failure_fails_created_and_nothing_is_kept() {
    let Some(w) = World::new("an_audit_failure_fails_created_and_nothing_is_kept").await else {
        return;
    };
    break_audit(&w).await;
    let f = w
        .step(
            "core.cloud.created",
            json!({"provider": "lab", "profile": "small", "count": 2}),
        )
        .await
        .unwrap_err();
    assert_eq!(f.error.code, "audit.failed", "{}", f.error);
    assert!(
        f.error.message.contains("audit storage refused"),
        "{}",
        f.error
    );
    // The batch's transaction (souls, tokens, event) never committed, so the VMs were destroyed.
    assert_eq!(f.output["made"].as_array().unwrap().len(), 2);
    assert_eq!(f.output["destroyed"], f.output["made"]);
    assert!(w.machines().is_empty());
    assert_eq!(w.count("SELECT 1 FROM keeper.souls").await, 0);
    assert_eq!(w.count("SELECT 1 FROM keeper.bootstrap_tokens").await, 0);
    assert_eq!(
        w.count("SELECT 1 FROM keeper.cloud_vms WHERE state = 'destroyed'")
            .await,
        2
    );
    // No plain token in the failure: none was delivered.
    assert!(!f.output.to_string().contains("kbt_"));
    mend_audit(&w).await;
    w.finish().await;
}

#[tokio::test]
async fn an_audit_failure_fails_destroyed_and_resized_and_refusals() {
    let Some(w) = World::new("an_audit_failure_fails_destroyed_and_resized_and_refusals").await
    else {
        return;
    };
    let out = w
        .create(json!({"provider": "lab", "profile": "small", "count": 2, "name": "a"}))
        .await;
    let ids: Vec<Value> = hosts(&out).iter().map(|h| h["vm_id"].clone()).collect();
    let sids: Vec<Value> = hosts(&out).iter().map(|h| h["sid"].clone()).collect();
    break_audit(&w).await;

    // resized: the cloud resized the VM, but the step fails.
    let f = w
        .step(
            "core.cloud.resized",
            json!({"provider": "lab", "vm_ids": [ids[0]], "machine_type": "amd64-large"}),
        )
        .await
        .unwrap_err();
    assert_eq!(f.error.code, "audit.failed");
    assert_eq!(
        f.output["resized"][0]["caused_downtime"], true,
        "{}",
        f.output
    );

    // A refusal (bad parameters) is audited too, so it fails as an audit failure.
    let f = w
        .step("core.cloud.destroyed", json!({"provider": "lab"}))
        .await
        .unwrap_err();
    assert_eq!(f.error.code, "audit.failed");
    assert_eq!(
        f.output["cause"]["field"], "vm_ids",
        "the first error is kept"
    );

    // destroyed: the VMs go, but the cascade rolls back with its event.
    let f = w
        .step(
            "core.cloud.destroyed",
            json!({"provider": "lab", "vm_ids": ids, "sids": sids}),
        )
        .await
        .unwrap_err();
    assert_eq!(f.error.code, "audit.failed");
    assert!(w.machines().is_empty());
    assert_eq!(
        w.count("SELECT 1 FROM keeper.souls WHERE status = 'pending'")
            .await,
        2,
        "the cascade did not commit without its event"
    );
    mend_audit(&w).await;
    // The same step again completes the cascade.
    let out = w
        .step(
            "core.cloud.destroyed",
            json!({"provider": "lab", "vm_ids": ids, "sids": sids}),
        )
        .await
        .unwrap();
    assert_eq!(out["counters"]["souls_destroyed"], 2);
    let events = w.audit("cloud.provisioned").await;
    assert_eq!(events.len(), 2, "the first created and the last destroyed");
    w.finish().await;
}

#[tokio::test]
async fn a_resize_whose_audit_fails_says_whether_it_changed_a_vm() {
    let Some(w) = World::new("a_resize_whose_audit_fails_says_whether_it_changed_a_vm").await
    else {
        return;
    };
    let out = w
        .create(json!({"provider": "lab", "profile": "small", "count": 1, "name": "c"}))
        .await;
    let id = hosts(&out)[0]["vm_id"].clone();
    break_audit(&w).await;
    let resize = |machine_type: &str| json!({"provider": "lab", "vm_ids": [id], "machine_type": machine_type});
    let f = w
        .step("core.cloud.resized", resize("amd64-large"))
        .await
        .unwrap_err();
    assert_eq!(f.error.code, "audit.failed");
    assert_eq!(w.machines()[0].machine_type, "amd64-large");
    assert_eq!(f.output["changed"], true, "{}", f.output);
    // The same size again changes nothing: the failure says so too.
    let f = w
        .step("core.cloud.resized", resize("amd64-large"))
        .await
        .unwrap_err();
    assert_eq!(f.error.code, "audit.failed");
    assert_eq!(f.output["changed"], false, "{}", f.output);
    mend_audit(&w).await;
    w.finish().await;
}

#[tokio::test]
async fn registry_writes_do_not_commit_without_their_event() {
    let Some(w) = World::new("registry_writes_do_not_commit_without_their_event").await else {
        return;
    };
    break_audit(&w).await;
    let e = keeper::registry::create_provider(
        w.keeper.pool(),
        "test",
        &json!({"name": "new", "driver": "fake", "credentials_ref": "fake/lab", "region": "zone-a"}),
    )
    .await
    .unwrap_err();
    assert_eq!(e.code, "audit.failed");
    assert_eq!(
        w.count("SELECT 1 FROM keeper.cloud_providers WHERE name = 'new'")
            .await,
        0
    );
    let e = keeper::registry::delete_profile(w.keeper.pool(), "test", "small")
        .await
        .unwrap_err();
    assert_eq!(e.code, "audit.failed");
    assert_eq!(
        w.count("SELECT 1 FROM keeper.cloud_profiles WHERE name = 'small'")
            .await,
        1
    );
    mend_audit(&w).await;
    w.finish().await;
}

#[tokio::test]
async fn the_audit_trail_is_append_only() {
    let Some(w) = World::new("the_audit_trail_is_append_only").await else {
        return;
    };
    let c = w.client().await;
    let e = c
        .execute("DELETE FROM keeper.audit_events", &[])
        .await
        .unwrap_err();
    assert!(e.to_string().contains("db error") || e.as_db_error().is_some());
    assert!(e.as_db_error().unwrap().message().contains("append-only"));
    let e = c
        .execute("UPDATE keeper.audit_events SET actor = 'x'", &[])
        .await
        .unwrap_err();
    assert!(e.as_db_error().unwrap().message().contains("append-only"));
    assert_eq!(w.count("SELECT 1 FROM keeper.audit_events").await, 2);
    w.finish().await;
}
