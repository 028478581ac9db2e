//! `core.cloud.created` on the in-memory provider and a real PostgreSQL.

use crate::support;

use std::sync::atomic::Ordering;

use orca::layer::Op;
use orca::memory::{FaultKind, Operation};
use orca::{ErrorKind, MachineSpec, Provider};
use serde_json::{json, Value};
use support::pgproxy::{Cut, PgProxy};
use support::{hosts, sha256_hex, World};

/// Every row of every keeper table, as one text: what a database dump would show.
async fn dump(w: &World) -> String {
    let mut all = String::new();
    for t in [
        "cloud_providers",
        "cloud_profiles",
        "souls",
        "soul_seeds",
        "bootstrap_tokens",
        "cloud_vms",
        "name_counters",
        "audit_events",
        "schema_migrations",
    ] {
        for r in w.rows(&format!("SELECT * FROM keeper.{t}")).await {
            all.push_str(&r.to_string());
            all.push('\n');
        }
        // bytea columns as hex, as pg_dump would write them.
        if t == "bootstrap_tokens" {
            for r in w
                .rows("SELECT encode(token_sha256, 'hex') AS h FROM keeper.bootstrap_tokens")
                .await
            {
                all.push_str(&r.to_string());
            }
        }
    }
    all
}

#[tokio::test]
async fn created_records_pending_souls_and_keeps_only_token_hashes() {
    let Some(w) = World::new("created_records_pending_souls_and_keeps_only_token_hashes").await
    else {
        return;
    };
    let out = w
        .create(json!({"provider": "lab", "profile": "small", "count": 3, "name": "web"}))
        .await;
    assert_eq!(out["action"], "created");
    assert_eq!(out["changed"], true);
    assert_eq!(out["count"], 3);
    let hosts = hosts(&out);
    assert_eq!(hosts.len(), 3);
    let vm_ids: Vec<&str> = out["vm_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    let cloud = w.machines();
    assert_eq!(cloud.len(), 3);
    for (i, h) in hosts.iter().enumerate() {
        let m = cloud
            .iter()
            .find(|m| m.id == h["vm_id"])
            .expect("made at the cloud");
        assert_eq!(h["vm_id"], vm_ids[i]);
        assert_eq!(
            h["sid"],
            m.fqdn.as_str(),
            "the SID is the FQDN the provider returned"
        );
        assert_eq!(h["sid"], format!("web-{}.zone-a.fake.internal", i + 1));
        assert_eq!(h["primary_ip"], m.address.as_str());
        assert_eq!(h["attributes"]["machine_type"], "amd64-small");
        assert_eq!(
            m.labels.get("orca-owner").map(String::as_str),
            Some("keeper")
        );
        let token = h["bootstrap_token"].as_str().unwrap();
        assert!(token.starts_with("kbt_") && token.len() == 68, "{token}");
    }
    // Souls: pending, created_by NULL, one a VM.
    let souls = w
        .rows("SELECT sid, status, created_by, provider, vm_id FROM keeper.souls ORDER BY id")
        .await;
    assert_eq!(souls.len(), 3);
    for (s, h) in souls.iter().zip(hosts) {
        assert_eq!(s["status"], "pending");
        assert_eq!(s["created_by"], Value::Null);
        assert_eq!(s["provider"], "lab");
        assert_eq!((&s["sid"], &s["vm_id"]), (&h["sid"], &h["vm_id"]));
    }
    // Tokens: only the hash, one per soul, issued.
    let tokens = w
        .rows(
            "SELECT s.sid, encode(t.token_sha256, 'hex') AS hash, t.status FROM keeper.bootstrap_tokens t
             JOIN keeper.souls s ON s.id = t.soul_id ORDER BY t.id",
        )
        .await;
    assert_eq!(tokens.len(), 3);
    for (t, h) in tokens.iter().zip(hosts) {
        assert_eq!(t["sid"], h["sid"]);
        assert_eq!(t["status"], "issued");
        assert_eq!(
            t["hash"],
            sha256_hex(h["bootstrap_token"].as_str().unwrap())
        );
    }
    let all = dump(&w).await;
    for h in hosts {
        let token = h["bootstrap_token"].as_str().unwrap();
        assert!(!all.contains(token), "a plain token is in the database");
        assert!(
            !all.contains(&token[4..]),
            "a plain token is in the database"
        );
    }
    // The journal and the audit event.
    assert_eq!(
        w.count("SELECT 1 FROM keeper.cloud_vms WHERE state = 'recorded'")
            .await,
        3
    );
    let events = w.audit("cloud.provisioned").await;
    assert_eq!(events.len(), 1);
    let e = &events[0];
    assert_eq!(
        (&e["outcome"], &e["actor"]),
        (&json!("succeeded"), &json!("test"))
    );
    assert_eq!(e["payload"]["provider"], "lab");
    assert_eq!(e["payload"]["vm_ids"], out["vm_ids"]);
    assert_eq!(
        e["payload"]["sids"],
        json!(hosts.iter().map(|h| h["sid"].clone()).collect::<Vec<_>>())
    );
    assert_eq!(e["payload"]["counters"]["souls_pending"], 3);
    assert_eq!(e["payload"]["counters"]["bootstrap_issued"], 3);
    w.finish().await;
}

#[tokio::test]
async fn a_repeat_makes_new_vms_with_new_indexes() {
    let Some(w) = World::new("a_repeat_makes_new_vms_with_new_indexes").await else {
        return;
    };
    let params = json!({"provider": "lab", "profile": "small", "count": 2, "name": "app"});
    let first = w.create(params.clone()).await;
    let second = w.create(params).await;
    let sids = |o: &Value| -> Vec<String> {
        hosts(o)
            .iter()
            .map(|h| h["sid"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        sids(&first),
        ["app-1.zone-a.fake.internal", "app-2.zone-a.fake.internal"]
    );
    assert_eq!(
        sids(&second),
        ["app-3.zone-a.fake.internal", "app-4.zone-a.fake.internal"]
    );
    assert_ne!(
        hosts(&first)[0]["bootstrap_token"],
        hosts(&second)[0]["bootstrap_token"]
    );
    assert_eq!(w.machines().len(), 4);
    assert_eq!(w.count("SELECT 1 FROM keeper.souls").await, 4);
    // Without a name, the batch is keeper-<index>, counted the same way.
    let third = w
        .create(json!({"provider": "lab", "profile": "small"}))
        .await;
    assert_eq!(third["count"], 1, "count defaults to 1");
    assert_eq!(hosts(&third)[0]["attributes"]["name"], "keeper-1");
    w.finish().await;
}

#[tokio::test]
async fn bad_input_is_refused_before_any_cloud_call_naming_the_field() {
    let Some(w) = World::new("bad_input_is_refused_before_any_cloud_call_naming_the_field").await
    else {
        return;
    };
    keeper::registry::create_provider(
        w.keeper.pool(),
        "test",
        &json!({"name": "bare", "driver": "fake", "credentials_ref": "fake/lab", "region": "zone-a"}),
    )
    .await
    .unwrap();
    let requests = w.requests().await;
    for (params, code, field) in [
        (json!({"profile": "small"}), "params.invalid", "provider"),
        (
            json!({"provider": "lab", "profile": "small", "count": 0}),
            "params.invalid",
            "count",
        ),
        (
            json!({"provider": "lab", "profile": "small", "userdata": "#!", "generate_userdata": true}),
            "params.invalid",
            "userdata",
        ),
        (
            json!({"provider": "lab", "profile": "small", "self_onboard": true}),
            "params.invalid",
            "name",
        ),
        (
            json!({"provider": "nowhere", "profile": "small"}),
            "provider.not_found",
            "provider",
        ),
        (
            json!({"provider": "lab", "profile": "missing"}),
            "profile.not_found",
            "profile",
        ),
        (json!({"provider": "bare"}), "params.invalid", "profile"),
        (
            json!({"provider": "bare", "profile": "small"}),
            "params.invalid",
            "profile",
        ),
        (
            json!({"provider": "bare", "profile": {"machine_type": "amd64-small"}, "self_onboard": true, "name": "n"}),
            "params.invalid",
            "self_onboard",
        ),
        (
            json!({"provider": "lab", "profile": "small", "generate_userdata": true}),
            "params.invalid",
            "generate_userdata",
        ),
        (
            json!({"provider": "lab", "profile": {"machine_type": "amd64-small", "ssh_keys": ["nope"]}}),
            "params.invalid",
            "profile.ssh_keys",
        ),
        (
            json!({"provider": "lab", "profile": "small", "userdata": "x".repeat(17 * 1024)}),
            "params.invalid",
            "userdata",
        ),
    ] {
        let f = w
            .step("core.cloud.created", params.clone())
            .await
            .unwrap_err();
        assert_eq!(f.error.code, code, "{params}: {}", f.error);
        assert_eq!(
            f.error.field.as_deref(),
            Some(field),
            "{params}: {}",
            f.error
        );
        assert_eq!(f.output["error"]["field"], field);
        assert_eq!(f.output["changed"], false);
    }
    assert_eq!(w.requests().await, requests, "no cloud call was made");
    assert!(w.machines().is_empty());
    assert_eq!(w.count("SELECT 1 FROM keeper.cloud_vms").await, 0);
    // Each refusal is audited all the same.
    let events = w.audit("cloud.provisioned").await;
    assert_eq!(events.len(), 12);
    assert!(events.iter().all(|e| e["outcome"] == "refused"));
    assert_eq!(events[0]["payload"]["error"]["field"], "provider");
    // The payload's shape is the same for a refusal: provider, vm_ids, sids and the counters, empty.
    let zero = json!({"requested": 0, "made": 0, "souls_pending": 0, "bootstrap_issued": 0,
                      "destroyed": 0, "recorded_without_soul": 0, "unresolved": 0});
    for e in &events {
        let p = &e["payload"];
        assert!(p["provider"].is_string(), "{p}");
        assert_eq!(p["vm_ids"], json!([]), "{p}");
        assert_eq!(p["sids"], json!([]), "{p}");
        assert_eq!(p["counters"], zero, "{p}");
    }
    assert_eq!(
        events[0]["payload"]["provider"], "",
        "no provider was given"
    );
    assert_eq!(events[1]["payload"]["provider"], "lab");
    w.finish().await;
}

#[tokio::test]
async fn without_a_profile_the_providers_only_profile_is_used_else_refused() {
    let Some(w) =
        World::new("without_a_profile_the_providers_only_profile_is_used_else_refused").await
    else {
        return;
    };
    // lab has one profile, small: it is the one.
    let out = w
        .create(json!({"provider": "lab", "count": 1, "name": "only"}))
        .await;
    assert_eq!(hosts(&out)[0]["attributes"]["machine_type"], "amd64-small");
    assert_eq!(w.knobs.specs.lock().unwrap()[0].machine_type, "amd64-small");

    // Two profiles: keeper does not pick one; the refusal names the field and lists them.
    keeper::registry::create_profile(
        w.keeper.pool(),
        "test",
        &json!({"name": "large", "provider": "lab", "machine_type": "amd64-large"}),
    )
    .await
    .unwrap();
    // A profile of another provider is not one of lab's.
    keeper::registry::create_provider(
        w.keeper.pool(),
        "test",
        &json!({"name": "bare", "driver": "fake", "credentials_ref": "fake/lab", "region": "zone-a"}),
    )
    .await
    .unwrap();
    keeper::registry::create_provider(
        w.keeper.pool(),
        "test",
        &json!({"name": "other", "driver": "fake", "credentials_ref": "fake/lab", "region": "zone-a"}),
    )
    .await
    .unwrap();
    keeper::registry::create_profile(
        w.keeper.pool(),
        "test",
        &json!({"name": "elsewhere", "provider": "other", "machine_type": "amd64-small"}),
    )
    .await
    .unwrap();
    let requests = w.requests().await;
    let f = w
        .step("core.cloud.created", json!({"provider": "lab"}))
        .await
        .unwrap_err();
    assert_eq!(f.error.code, "params.invalid");
    assert_eq!(f.error.field.as_deref(), Some("profile"), "{}", f.error);
    assert!(
        f.error.message.contains("large") && f.error.message.contains("small"),
        "{}",
        f.error
    );
    assert!(!f.error.message.contains("elsewhere"), "{}", f.error);
    // No profile at all.
    let f = w
        .step("core.cloud.created", json!({"provider": "bare"}))
        .await
        .unwrap_err();
    assert_eq!(f.error.field.as_deref(), Some("profile"), "{}", f.error);
    assert!(f.error.message.contains("has no profile"), "{}", f.error);
    assert_eq!(w.requests().await, requests, "no cloud call was made");
    assert_eq!(w.machines().len(), 1);
    w.finish().await;
}

#[tokio::test]
async fn self_onboard_predicts_each_fqdn_and_bakes_each_token() {
    let Some(w) = World::new("self_onboard_predicts_each_fqdn_and_bakes_each_token").await else {
        return;
    };
    let out = w
        .create(json!({"provider": "lab", "profile": "small", "count": 2, "name": "node", "self_onboard": true}))
        .await;
    let specs = w.knobs.specs.lock().unwrap().clone();
    assert_eq!(specs.len(), 2);
    for (i, (h, spec)) in hosts(&out).iter().zip(&specs).enumerate() {
        let predicted = format!("node-{}.zone-a.fake.internal", i + 1);
        assert_eq!(h["sid"], predicted);
        assert_eq!(spec.name, format!("node-{}", i + 1));
        let token = h["bootstrap_token"].as_str().unwrap();
        assert!(
            spec.user_data.contains(token),
            "the VM's own token is baked into its user data"
        );
        assert!(spec.user_data.contains(&format!(r#""sid": "{predicted}""#)));
        assert!(spec.user_data.starts_with("#cloud-config"));
        let other = hosts(&out)[1 - i]["bootstrap_token"].as_str().unwrap();
        assert!(!spec.user_data.contains(other), "one token per VM");
    }
    w.finish().await;
}

#[tokio::test]
async fn a_baked_fqdn_the_provider_does_not_give_fails_and_destroys() {
    let Some(w) = World::new("a_baked_fqdn_the_provider_does_not_give_fails_and_destroys").await
    else {
        return;
    };
    keeper::registry::create_provider(
        w.keeper.pool(),
        "test",
        &json!({"name": "skewed", "driver": "fake", "credentials_ref": "fake/lab",
                "region": "zone-a", "fqdn_suffix": "wrong.example"}),
    )
    .await
    .unwrap();
    let f = w
        .step(
            "core.cloud.created",
            json!({"provider": "skewed", "profile": {"machine_type": "amd64-small"}, "count": 2, "name": "s", "self_onboard": true}),
        )
        .await
        .unwrap_err();
    assert_eq!(f.error.code, "vm.fqdn_mismatch");
    assert!(f.error.message.contains("s-1.wrong.example"), "{}", f.error);
    assert_eq!(
        f.output["made"].as_array().unwrap().len(),
        1,
        "stopped at the first"
    );
    assert_eq!(f.output["destroyed"], f.output["made"]);
    assert!(w.machines().is_empty());
    assert_eq!(w.count("SELECT 1 FROM keeper.souls").await, 0);
    w.finish().await;
}

#[tokio::test]
async fn a_vm_without_an_fqdn_fails_the_step() {
    let Some(w) = World::new("a_vm_without_an_fqdn_fails_the_step").await else {
        return;
    };
    w.knobs.blank_fqdn_of_create.store(2, Ordering::SeqCst);
    let f = w
        .step(
            "core.cloud.created",
            json!({"provider": "lab", "profile": "small", "count": 3}),
        )
        .await
        .unwrap_err();
    assert_eq!(f.error.code, "vm.no_fqdn");
    assert_eq!(f.output["made"].as_array().unwrap().len(), 2);
    assert_eq!(f.output["destroyed"], f.output["made"]);
    assert_eq!(f.output["recorded"], json!([]));
    assert_eq!(
        w.knobs.creates.load(Ordering::SeqCst),
        2,
        "the third was never asked for"
    );
    assert!(w.machines().is_empty(), "what was made was destroyed");
    assert_eq!(w.count("SELECT 1 FROM keeper.souls").await, 0);
    assert_eq!(w.count("SELECT 1 FROM keeper.bootstrap_tokens").await, 0);
    let e = &w.audit("cloud.provisioned").await[0];
    assert_eq!(e["outcome"], "failed");
    assert_eq!(e["payload"]["error"]["code"], "vm.no_fqdn");
    assert_eq!(e["payload"]["counters"]["destroyed"], 2);
    w.finish().await;
}

#[tokio::test]
async fn the_journal_rows_of_a_failed_batch_change_together_or_not_at_all() {
    let Some(w) =
        World::new("the_journal_rows_of_a_failed_batch_change_together_or_not_at_all").await
    else {
        return;
    };
    w.cloud.set_stock("amd64-small", "zone-a", 2);
    // PostgreSQL refuses one row of each multi-row change: tx-5 marked never asked for (with tx-4),
    // tx-2 marked destroyed (with tx-1).
    w.client()
        .await
        .batch_execute(
            "CREATE FUNCTION keeper.test_refuse_journal() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
               IF (NEW.name = 'tx-5' AND NEW.state = 'failed')
                  OR (NEW.name = 'tx-2' AND NEW.state = 'destroyed') THEN
                 RAISE EXCEPTION 'journal row % refused for this test', NEW.name;
               END IF;
               RETURN NEW;
             END $$;
             CREATE TRIGGER test_refuse_journal BEFORE UPDATE ON keeper.cloud_vms
                 FOR EACH ROW EXECUTE FUNCTION keeper.test_refuse_journal();",
        )
        .await
        .unwrap();
    let f = w
        .step(
            "core.cloud.created",
            json!({"provider": "lab", "profile": "small", "count": 5, "name": "tx"}),
        )
        .await
        .unwrap_err();
    assert_eq!(f.error.code, "cloud.no_stock");
    assert!(w.machines().is_empty(), "the two made are destroyed");
    let state = |rows: &[Value], name: &str| {
        rows.iter()
            .find(|r| r["name"] == name)
            .map(|r| r["state"].clone())
            .unwrap()
    };
    let journal = w
        .rows("SELECT name, state FROM keeper.cloud_vms ORDER BY id")
        .await;
    assert_eq!(state(&journal, "tx-3"), "failed", "{journal:?}");
    // One transaction each: neither row of a refused change moved.
    assert_eq!(state(&journal, "tx-4"), "requested", "{journal:?}");
    assert_eq!(state(&journal, "tx-5"), "requested", "{journal:?}");
    assert_eq!(state(&journal, "tx-1"), "made", "{journal:?}");
    assert_eq!(state(&journal, "tx-2"), "made", "{journal:?}");
    // The output says both: the rows never asked for, and the roll-back's.
    let said = f.output["journal_error"].as_str().unwrap_or_default();
    assert!(said.contains("stay made"), "{}", f.output);
    assert!(
        said.contains("never asked for (tx-4, tx-5) stay requested"),
        "{}",
        f.output
    );
    w.finish().await;
}

#[tokio::test]
async fn a_failed_journal_change_of_the_vms_never_asked_for_is_in_the_output() {
    let Some(w) =
        World::new("a_failed_journal_change_of_the_vms_never_asked_for_is_in_the_output").await
    else {
        return;
    };
    w.cloud.set_stock("amd64-small", "zone-a", 2);
    // PostgreSQL refuses only the change of the rows never asked for (tx-5 with tx-4); the
    // roll-back's rows move.
    w.client()
        .await
        .batch_execute(
            "CREATE FUNCTION keeper.test_refuse_journal() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
               IF NEW.name = 'tx-5' AND NEW.state = 'failed' THEN
                 RAISE EXCEPTION 'journal row % refused for this test', NEW.name;
               END IF;
               RETURN NEW;
             END $$;
             CREATE TRIGGER test_refuse_journal BEFORE UPDATE ON keeper.cloud_vms
                 FOR EACH ROW EXECUTE FUNCTION keeper.test_refuse_journal();",
        )
        .await
        .unwrap();
    let f = w
        .step(
            "core.cloud.created",
            json!({"provider": "lab", "profile": "small", "count": 5, "name": "tx"}),
        )
        .await
        .unwrap_err();
    assert_eq!(f.error.code, "cloud.no_stock");
    let journal = w
        .rows("SELECT name, state FROM keeper.cloud_vms WHERE name IN ('tx-4', 'tx-5') ORDER BY id")
        .await;
    assert_eq!(
        journal,
        vec![
            json!({"name": "tx-4", "state": "requested"}),
            json!({"name": "tx-5", "state": "requested"})
        ]
    );
    assert_eq!(
        w.count("SELECT 1 FROM keeper.cloud_vms WHERE state = 'destroyed'")
            .await,
        2,
        "the roll-back's rows moved"
    );
    let said = f.output["journal_error"].as_str().unwrap_or_default();
    assert!(
        said.contains("never asked for (tx-4, tx-5) stay requested")
            && said.contains("refused for this test"),
        "{}",
        f.output
    );
    assert!(!said.contains("stay made"), "{}", f.output);
    w.finish().await;
}

#[tokio::test]
async fn the_third_of_five_refused_destroys_the_two_made() {
    let Some(w) = World::new("the_third_of_five_refused_destroys_the_two_made").await else {
        return;
    };
    w.cloud.set_stock("amd64-small", "zone-a", 2);
    let f = w
        .step(
            "core.cloud.created",
            json!({"provider": "lab", "profile": "small", "count": 5, "name": "batch"}),
        )
        .await
        .unwrap_err();
    assert_eq!(f.error.code, "cloud.no_stock");
    assert!(f.error.message.contains("batch-3"), "{}", f.error);
    let made = f.output["made"].as_array().unwrap().clone();
    assert_eq!(made.len(), 2);
    assert_eq!(f.output["destroyed"], json!(made), "the step says which");
    assert_eq!(f.output["recorded"], json!([]));
    assert_eq!(f.output["changed"], true);
    assert!(w.machines().is_empty());
    assert_eq!(w.count("SELECT 1 FROM keeper.souls").await, 0);
    // The journal accounts for all five: two made then destroyed, one refused, two never asked for.
    let journal = w
        .rows("SELECT name, state, vm_id FROM keeper.cloud_vms ORDER BY id")
        .await;
    let states: Vec<&str> = journal
        .iter()
        .map(|r| r["state"].as_str().unwrap())
        .collect();
    assert_eq!(
        states,
        ["destroyed", "destroyed", "failed", "failed", "failed"]
    );
    assert_eq!(journal[0]["vm_id"], made[0]);
    let e = &w.audit("cloud.provisioned").await[0];
    assert_eq!(e["outcome"], "failed");
    assert_eq!(e["payload"]["made"], json!(made));
    assert_eq!(e["payload"]["destroyed"], json!(made));
    w.finish().await;
}

#[tokio::test]
async fn the_third_of_five_refused_records_what_cannot_be_destroyed() {
    let Some(w) = World::new("the_third_of_five_refused_records_what_cannot_be_destroyed").await
    else {
        return;
    };
    w.cloud.set_stock("amd64-small", "zone-a", 2);
    w.inject(
        Operation::Delete,
        FaultKind::Error(ErrorKind::PermissionDenied),
        2,
    )
    .await;
    let f = w
        .step(
            "core.cloud.created",
            json!({"provider": "lab", "profile": "small", "count": 5, "name": "stuck"}),
        )
        .await
        .unwrap_err();
    assert_eq!(f.error.code, "cloud.no_stock");
    assert_eq!(f.output["destroyed"], json!([]));
    let recorded = f.output["recorded"].as_array().unwrap();
    assert_eq!(recorded.len(), 2, "{}", f.output);
    assert_eq!(recorded[0]["in"], "keeper.cloud_vms (state kept)");
    assert_eq!(w.machines().len(), 2, "still at the provider");
    let kept = w
        .rows("SELECT vm_id, sid FROM keeper.cloud_vms WHERE state = 'kept' ORDER BY id")
        .await;
    assert_eq!(kept.len(), 2);
    assert_eq!(kept[0]["vm_id"], recorded[0]["vm_id"]);
    assert_eq!(kept[0]["sid"], "stuck-1.zone-a.fake.internal");
    assert_eq!(w.count("SELECT 1 FROM keeper.souls").await, 0);
    // What was kept is destroyed later by vm_id, and the journal follows.
    let ids: Vec<Value> = kept.iter().map(|k| k["vm_id"].clone()).collect();
    w.step(
        "core.cloud.destroyed",
        json!({"provider": "lab", "vm_ids": ids}),
    )
    .await
    .unwrap();
    assert!(w.machines().is_empty());
    assert_eq!(
        w.count("SELECT 1 FROM keeper.cloud_vms WHERE state = 'kept'")
            .await,
        0
    );
    w.finish().await;
}

#[tokio::test]
async fn a_vm_the_cloud_made_before_the_create_gave_up_is_found_and_destroyed() {
    let Some(w) =
        World::new("a_vm_the_cloud_made_before_the_create_gave_up_is_found_and_destroyed").await
    else {
        return;
    };
    // lost-1 is made but the answer is lost, and every retry of the create fails too: the driver
    // gives up (a transient error) with the VM standing.
    w.inject(Operation::Create, FaultKind::LoseAnswer, 1).await;
    w.inject(Operation::Create, FaultKind::Error(ErrorKind::Transient), 6)
        .await;
    let f = w
        .step(
            "core.cloud.created",
            json!({"provider": "lab", "profile": "small", "count": 2, "name": "lost"}),
        )
        .await
        .unwrap_err();
    assert_eq!(f.error.code, "cloud.transient", "{}", f.error);
    assert!(
        w.machines().is_empty(),
        "what the cloud made is destroyed, never made and forgotten: {:?}",
        w.machines()
    );
    let journal = w
        .rows("SELECT name, state, vm_id, detail FROM keeper.cloud_vms ORDER BY id")
        .await;
    assert_eq!(journal[0]["name"], "lost-1");
    assert_eq!(journal[0]["state"], "destroyed", "{journal:?}");
    let id = journal[0]["vm_id"].clone();
    assert!(id.is_string(), "{journal:?}");
    assert_eq!(journal[1]["state"], "failed", "never asked for");
    // The step says it: made (after all) and destroyed.
    assert_eq!(f.output["made"], json!([id]));
    assert_eq!(f.output["destroyed"], json!([id]));
    assert_eq!(f.output["made_after_error"][0]["vm_id"], id);
    assert_eq!(f.output["unresolved"], json!([]));
    assert_eq!(w.count("SELECT 1 FROM keeper.souls").await, 0);
    let e = &w.audit("cloud.provisioned").await[0];
    assert_eq!(e["payload"]["destroyed"], json!([id]));
    w.finish().await;
}

#[tokio::test]
async fn a_vm_that_may_have_been_made_and_cannot_be_looked_up_stays_requested() {
    let Some(w) =
        World::new("a_vm_that_may_have_been_made_and_cannot_be_looked_up_stays_requested").await
    else {
        return;
    };
    w.inject(Operation::Create, FaultKind::LoseAnswer, 1).await;
    w.inject(Operation::Create, FaultKind::Error(ErrorKind::Transient), 6)
        .await;
    // And the look-up by name fails too.
    w.inject(
        Operation::List,
        FaultKind::Error(ErrorKind::PermissionDenied),
        1,
    )
    .await;
    let f = w
        .step(
            "core.cloud.created",
            json!({"provider": "lab", "profile": "small", "count": 1, "name": "dim"}),
        )
        .await
        .unwrap_err();
    assert_eq!(f.error.code, "cloud.transient", "{}", f.error);
    let journal = w
        .rows("SELECT name, state, vm_id, detail FROM keeper.cloud_vms ORDER BY id")
        .await;
    assert_eq!(
        journal[0]["state"], "requested",
        "left for a later run to resolve: {journal:?}"
    );
    let detail = journal[0]["detail"].as_str().unwrap();
    assert!(detail.contains("may have been made"), "{detail}");
    let unresolved = f.output["unresolved"].as_array().unwrap();
    assert_eq!(unresolved.len(), 1, "{}", f.output);
    assert_eq!(unresolved[0]["name"], "dim-1");
    assert_eq!(unresolved[0]["in"], "keeper.cloud_vms (state requested)");
    assert_eq!(f.output["changed"], true, "the cloud may have changed");
    // The VM does stand at the provider; the journal still knows its name.
    assert_eq!(w.machines().len(), 1);
    assert_eq!(w.machines()[0].name, "dim-1");
    w.finish().await;
}

#[tokio::test]
async fn a_create_that_may_have_acted_without_a_vm_removes_what_it_left_by_name() {
    let Some(w) =
        World::new("a_create_that_may_have_acted_without_a_vm_removes_what_it_left_by_name").await
    else {
        return;
    };
    // Every attempt of the create fails as a passing failure: the cloud may have made the pieces a
    // create makes before its VM (an address, an interface, a boot disk), and no VM shows.
    w.inject(
        Operation::Create,
        FaultKind::Error(ErrorKind::Transient),
        20,
    )
    .await;
    let f = w
        .step(
            "core.cloud.created",
            json!({"provider": "lab", "profile": "small", "count": 1, "name": "bits"}),
        )
        .await
        .unwrap_err();
    assert_eq!(f.error.code, "cloud.transient", "{}", f.error);
    // The drivers' own delete_named removes those pieces; here the call itself is what is checked.
    let rec = &w.knobs.recorder;
    assert_eq!(
        rec.subjects(Op::DeleteNamed),
        ["keeper/bits-1"],
        "{:?}",
        rec.calls()
    );
    assert_eq!(rec.failed(Op::DeleteNamed), 0);
    // The VM may still show late: the row stays requested, for the reconciler to look again.
    let journal = w
        .rows("SELECT name, state, detail FROM keeper.cloud_vms ORDER BY id")
        .await;
    assert_eq!(journal[0]["state"], "requested", "{journal:?}");
    let detail = journal[0]["detail"].as_str().unwrap();
    assert!(detail.contains("may have been made"), "{detail}");
    assert!(detail.contains("removed by name"), "{detail}");
    assert_eq!(f.output["unresolved"][0]["name"], "bits-1", "{}", f.output);
    assert!(w.machines().is_empty());
    w.finish().await;
}

#[tokio::test]
async fn a_failed_removal_by_name_is_said_and_left_to_the_reconciler() {
    let Some(w) = World::new("a_failed_removal_by_name_is_said_and_left_to_the_reconciler").await
    else {
        return;
    };
    w.inject(
        Operation::Create,
        FaultKind::Error(ErrorKind::Transient),
        20,
    )
    .await;
    w.knobs.fail_delete_named.store(1, Ordering::SeqCst);
    let f = w
        .step(
            "core.cloud.created",
            json!({"provider": "lab", "profile": "small", "count": 1, "name": "stuck"}),
        )
        .await
        .unwrap_err();
    assert_eq!(f.error.code, "cloud.transient", "{}", f.error);
    assert_eq!(w.knobs.recorder.failed(Op::DeleteNamed), 1);
    let journal = w
        .rows("SELECT name, state, detail FROM keeper.cloud_vms ORDER BY id")
        .await;
    assert_eq!(journal[0]["state"], "requested", "{journal:?}");
    let detail = journal[0]["detail"].as_str().unwrap();
    assert!(detail.contains("could not be removed"), "{detail}");
    let why = f.output["unresolved"][0]["why"].as_str().unwrap();
    assert!(why.contains("could not be removed"), "{why}");
    w.finish().await;
}

#[tokio::test]
async fn a_no_stock_answer_removes_what_the_create_left_by_name() {
    let Some(w) = World::new("a_no_stock_answer_removes_what_the_create_left_by_name").await else {
        return;
    };
    // A cloud can answer no stock after its create made pieces, and its clean-up can leave some
    // (named in the answer): they are removed by name before the row is closed.
    w.cloud.set_stock("amd64-small", "zone-a", 0);
    w.knobs.no_stock_leaves.store(true, Ordering::SeqCst);
    w.knobs.fail_delete_named.store(1, Ordering::SeqCst);
    let f = w
        .step(
            "core.cloud.created",
            json!({"provider": "lab", "profile": "small", "count": 2, "name": "dry"}),
        )
        .await
        .unwrap_err();
    assert_eq!(f.error.code, "cloud.no_stock", "{}", f.error);
    assert_eq!(w.knobs.recorder.subjects(Op::DeleteNamed), ["keeper/dry-1"]);
    // The removal failed: the row stays requested, named unresolved, for the reconciler.
    let journal = w
        .rows("SELECT name, state FROM keeper.cloud_vms ORDER BY id")
        .await;
    assert_eq!(journal[0]["state"], "requested", "{journal:?}");
    assert_eq!(
        journal[1]["state"], "failed",
        "never asked for: {journal:?}"
    );
    assert_eq!(f.output["unresolved"][0]["name"], "dry-1", "{}", f.output);

    // Again, and the removal works: the row is closed as before.
    let f = w
        .step(
            "core.cloud.created",
            json!({"provider": "lab", "profile": "small", "count": 1, "name": "dry"}),
        )
        .await
        .unwrap_err();
    assert_eq!(f.error.code, "cloud.no_stock", "{}", f.error);
    assert_eq!(
        w.knobs.recorder.subjects(Op::DeleteNamed),
        ["keeper/dry-1", "keeper/dry-3"]
    );
    assert_eq!(
        w.rows("SELECT state FROM keeper.cloud_vms WHERE name = 'dry-3'")
            .await[0]["state"],
        "failed"
    );
    assert_eq!(f.output["unresolved"], json!([]));
    w.finish().await;
}

#[tokio::test]
async fn a_clean_no_stock_is_journalled_failed_without_a_removal_by_name() {
    let Some(w) =
        World::new("a_clean_no_stock_is_journalled_failed_without_a_removal_by_name").await
    else {
        return;
    };
    w.cloud.set_stock("amd64-small", "zone-a", 0);
    let f = w
        .step(
            "core.cloud.created",
            json!({"provider": "lab", "profile": "small", "count": 1, "name": "dry"}),
        )
        .await
        .unwrap_err();
    assert_eq!(f.error.code, "cloud.no_stock", "{}", f.error);
    assert_eq!(
        w.knobs.recorder.count(Op::DeleteNamed),
        0,
        "nothing was left: {:?}",
        w.knobs.recorder.calls()
    );
    assert_eq!(
        w.rows("SELECT state FROM keeper.cloud_vms").await[0]["state"],
        "failed"
    );
    assert_eq!(f.output["unresolved"], json!([]));
    w.finish().await;
}

#[tokio::test]
async fn a_clear_refusal_is_journalled_failed_without_a_look_up() {
    let Some(w) = World::new("a_clear_refusal_is_journalled_failed_without_a_look_up").await else {
        return;
    };
    w.inject(Operation::Create, FaultKind::Error(ErrorKind::Quota), 1)
        .await;
    let lists = w.requests().await;
    let f = w
        .step(
            "core.cloud.created",
            json!({"provider": "lab", "profile": "small", "count": 1, "name": "q"}),
        )
        .await
        .unwrap_err();
    assert_eq!(f.error.code, "cloud.quota");
    assert_eq!(
        w.rows("SELECT state FROM keeper.cloud_vms").await[0]["state"],
        "failed"
    );
    assert_eq!(f.output["unresolved"], json!([]));
    assert_eq!(w.requests().await - lists, 1, "one create call, no look-up");
    assert_eq!(
        w.knobs.recorder.count(Op::DeleteNamed),
        0,
        "nothing to remove"
    );
    w.finish().await;
}

#[tokio::test]
async fn a_vm_made_by_an_earlier_create_is_never_adopted_or_counted() {
    let Some(w) = World::new("a_vm_made_by_an_earlier_create_is_never_adopted_or_counted").await
    else {
        return;
    };
    // web-1 exists already, made by keeper's owner in keeper's pool (a create whose answer was lost
    // before keeper's counter was kept, say).
    let earlier = w
        .cloud
        .provider("keeper")
        .unwrap()
        .create(&MachineSpec::new(
            "web-1",
            "amd64-small",
            "zone-a",
            "keeper",
        ))
        .await
        .unwrap()
        .machine()
        .unwrap();
    let f = w
        .step(
            "core.cloud.created",
            json!({"provider": "lab", "profile": "small", "count": 2, "name": "web"}),
        )
        .await
        .unwrap_err();
    assert_eq!(f.error.code, "vm.adopted");
    assert_eq!(f.output["adopted_not_counted"], json!([earlier.id]));
    assert_eq!(f.output["made"], json!([]));
    assert_eq!(w.count("SELECT 1 FROM keeper.souls").await, 0);
    let machines = w.machines();
    assert_eq!(
        machines.len(),
        1,
        "the earlier VM is neither counted nor destroyed"
    );
    assert_eq!(machines[0].id, earlier.id);
    w.finish().await;
}

#[tokio::test]
async fn a_sid_a_live_soul_holds_fails_the_step_and_destroys_the_batch() {
    let Some(w) = World::new("a_sid_a_live_soul_holds_fails_the_step_and_destroys_the_batch").await
    else {
        return;
    };
    w.client()
        .await
        .execute(
            "INSERT INTO keeper.souls (sid, status, provider, vm_id, created_by)
             VALUES ('db-2.zone-a.fake.internal', 'active', 'elsewhere', 'x-1', 'operator')",
            &[],
        )
        .await
        .unwrap();
    let f = w
        .step(
            "core.cloud.created",
            json!({"provider": "lab", "profile": "small", "count": 2, "name": "db"}),
        )
        .await
        .unwrap_err();
    assert_eq!(f.error.code, "sid.conflict");
    assert_eq!(f.output["destroyed"].as_array().unwrap().len(), 2);
    assert!(w.machines().is_empty());
    assert_eq!(
        w.count("SELECT 1 FROM keeper.souls").await,
        1,
        "nothing of the batch was recorded: one transaction"
    );
    assert_eq!(w.count("SELECT 1 FROM keeper.bootstrap_tokens").await, 0);
    w.finish().await;
}

#[tokio::test]
async fn userdata_is_given_or_generated_from_keepers_template() {
    let template = keeper::userdata::Template::parse(
        "#cloud-config\nhostname: ${hostname}\nfqdn: ${fqdn}\nkeeper: ${keeper_url}\n",
    )
    .unwrap();
    let settings = keeper::cloud::Settings {
        cloud_init: Some(template),
        keeper_url: "https://keeper.test".into(),
        ..Default::default()
    };
    let Some(w) = World::with_settings(
        "userdata_is_given_or_generated_from_keepers_template",
        settings,
    )
    .await
    else {
        return;
    };
    w.create(json!({"provider": "lab", "profile": "small", "userdata": "#cloud-config\nruncmd: [true]\n"}))
        .await;
    w.create(
        json!({"provider": "lab", "profile": "small", "generate_userdata": true, "name": "gen"}),
    )
    .await;
    let f = w
        .step(
            "core.cloud.created",
            json!({"provider": "lab", "profile": "small", "generate_userdata": true}),
        )
        .await
        .unwrap_err();
    assert_eq!(
        f.error.field.as_deref(),
        Some("generate_userdata"),
        "{}",
        f.error
    );
    let specs = w.knobs.specs.lock().unwrap().clone();
    assert_eq!(specs.len(), 2);
    assert_eq!(specs[0].user_data, "#cloud-config\nruncmd: [true]\n");
    assert_eq!(
        specs[1].user_data,
        "#cloud-config\nhostname: gen-1\nfqdn: gen-1.zone-a.fake.internal\nkeeper: https://keeper.test\n"
    );
    w.finish().await;
}

#[tokio::test]
async fn an_inline_profile_map_is_a_vm_spec() {
    let Some(w) = World::new("an_inline_profile_map_is_a_vm_spec").await else {
        return;
    };
    let out = w
        .create(json!({"provider": "lab", "count": 1, "profile": {
            "machine_type": "arm64-small", "location": "zone-b", "disk_gb": 40,
            "labels": {"team": "web"}}}))
        .await;
    let h = &hosts(&out)[0];
    assert_eq!(h["sid"], "keeper-1.zone-b.fake.internal");
    let m = &w.machines()[0];
    assert_eq!(
        (m.machine_type.as_str(), m.location.as_str()),
        ("arm64-small", "zone-b")
    );
    assert_eq!(m.labels.get("team").map(String::as_str), Some("web"));
    assert_eq!(w.cloud.extras(&m.id).unwrap().disk_gb, Some(40));
    w.finish().await;
}

#[tokio::test]
async fn credentials_are_read_at_step_time_and_stored_nowhere() {
    let Some(w) = World::new("credentials_are_read_at_step_time_and_stored_nowhere").await else {
        return;
    };
    // A Hetzner account whose token must never leave the vault. The endpoint is a closed port on
    // this machine, in case this build has the hetzner driver.
    support::write_vault_file(
        &w.vault,
        "hetzner/prod",
        &json!({"HCLOUD_TOKEN": "hcloud-secret-value-42", "ORCA_HCLOUD_ENDPOINT": "http://127.0.0.1:9/v1"}),
    );
    keeper::registry::create_provider(
        w.keeper.pool(),
        "test",
        &json!({"name": "hz", "driver": "hetzner", "credentials_ref": "hetzner/prod", "region": "hel1"}),
    )
    .await
    .unwrap();
    let f = w
        .step(
            "core.cloud.created",
            json!({"provider": "hz", "profile": {"machine_type": "cx22"}}),
        )
        .await
        .unwrap_err();
    assert!(
        f.error.code == "provider.driver" || f.error.code.starts_with("cloud."),
        "{}",
        f.error
    );
    let everything = format!("{} {} {:?} {}", f.output, f.error, f.error, dump(&w).await);
    assert!(
        !everything.contains("hcloud-secret-value-42"),
        "{everything}"
    );
    assert_eq!(
        w.rows("SELECT credentials_ref FROM keeper.cloud_providers WHERE name = 'hz'")
            .await[0]["credentials_ref"],
        "hetzner/prod"
    );
    // A provider whose vault entry is missing fails at step time, naming the reference.
    keeper::registry::create_provider(
        w.keeper.pool(),
        "test",
        &json!({"name": "gone", "driver": "fake", "credentials_ref": "fake/missing", "region": "zone-a"}),
    )
    .await
    .unwrap();
    let f = w
        .step(
            "core.cloud.created",
            json!({"provider": "gone", "profile": {"machine_type": "amd64-small"}}),
        )
        .await
        .unwrap_err();
    assert_eq!(f.error.code, "credentials.unavailable");
    assert!(f.error.message.contains("fake/missing"));
    w.finish().await;
}

#[tokio::test]
async fn a_roll_back_whose_delete_left_a_piece_removes_it_by_name_and_keeps_the_row() {
    let Some(w) =
        World::new("a_roll_back_whose_delete_left_a_piece_removes_it_by_name_and_keeps_the_row")
            .await
    else {
        return;
    };
    w.cloud.set_stock("amd64-small", "zone-a", 1);
    // The roll-back's delete removes the VM but leaves its security group.
    w.knobs.delete_leaves.store(1, Ordering::SeqCst);
    let f = w
        .step(
            "core.cloud.created",
            json!({"provider": "lab", "profile": "small", "count": 2, "name": "ebb"}),
        )
        .await
        .unwrap_err();
    assert_eq!(f.error.code, "cloud.no_stock", "{}", f.error);
    let rec = &w.knobs.recorder;
    assert_eq!(
        rec.subjects(Op::DeleteNamed),
        ["keeper/ebb-1"],
        "removed by name at once: {:?}",
        rec.calls()
    );
    let recorded = f.output["recorded"].as_array().unwrap();
    assert_eq!(recorded.len(), 1, "{}", f.output);
    let said = recorded[0]["destroy_error"].as_str().unwrap();
    assert!(said.contains("removed by name"), "{said}");
    assert!(w.machines().is_empty());
    // The delete failed: the row is kept, and core.cloud.destroyed closes it, removing by name again
    // what may be left.
    let kept = w
        .rows("SELECT vm_id FROM keeper.cloud_vms WHERE state = 'kept'")
        .await;
    assert_eq!(kept.len(), 1);
    let out = w
        .step(
            "core.cloud.destroyed",
            json!({"provider": "lab", "vm_ids": [kept[0]["vm_id"]]}),
        )
        .await
        .unwrap();
    assert_eq!(out["already_gone"], json!([kept[0]["vm_id"]]), "{out}");
    assert_eq!(
        rec.subjects(Op::DeleteNamed),
        ["keeper/ebb-1", "keeper/ebb-1"]
    );
    assert_eq!(
        w.count("SELECT 1 FROM keeper.cloud_vms WHERE state = 'kept'")
            .await,
        0
    );
    w.finish().await;
}

/// The batch's COMMIT reaches the server, which commits, and the connection ends before its answer
/// comes back (a network cut, a proxy's restart). What was committed stands: the step reads the
/// transaction's outcome from another session, answers its hosts and tokens, and destroys nothing
/// (before, it took any failed COMMIT for "not committed" and destroyed the VMs whose souls and
/// tokens the registry then held).
#[tokio::test]
async fn a_batch_whose_commit_answer_is_lost_after_the_server_committed_stands() {
    let name = "a_batch_whose_commit_answer_is_lost_after_the_server_committed_stands";
    let Some(w) = World::new(name).await else {
        return;
    };
    let proxy = PgProxy::start(&w.db.url, "INSERT INTO keeper.souls", Cut::After).await;
    let keeper = w
        .restarted_at(&proxy.url(&w.db.url), Default::default())
        .await;
    let params = json!({"provider": "lab", "profile": "small", "count": 2, "name": "web"});
    let out = match keeper.run_step("core.cloud.created", &params, "test").await {
        Ok(out) => out,
        Err(f) => panic!("created failed: {} {}", f.error, f.output),
    };
    assert_eq!(proxy.cuts(), 1, "the COMMIT's answer was not lost");
    let hosts = hosts(&out);
    assert_eq!(hosts.len(), 2);
    let standing: Vec<String> = w.machines().into_iter().map(|m| m.id).collect();
    let souls = w
        .rows("SELECT s.sid, s.status, s.vm_id, encode(t.token_sha256, 'hex') AS hash, t.status AS token
               FROM keeper.souls s JOIN keeper.bootstrap_tokens t ON t.soul_id = s.id ORDER BY s.id")
        .await;
    assert_eq!(souls.len(), 2, "{souls:?}");
    for (s, h) in souls.iter().zip(hosts) {
        assert_eq!((&s["sid"], &s["vm_id"]), (&h["sid"], &h["vm_id"]));
        assert_eq!(
            (&s["status"], &s["token"]),
            (&json!("pending"), &json!("issued"))
        );
        assert_eq!(
            s["hash"],
            sha256_hex(h["bootstrap_token"].as_str().unwrap())
        );
        assert!(
            standing.iter().any(|id| h["vm_id"] == id.as_str()),
            "VM {} was destroyed: {standing:?}",
            h["vm_id"]
        );
    }
    assert_eq!(standing.len(), 2, "{standing:?}");
    assert_eq!(
        w.count("SELECT 1 FROM keeper.cloud_vms WHERE state = 'recorded'")
            .await,
        2
    );
    let events = w.audit("cloud.provisioned").await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["outcome"], "succeeded");
    drop(keeper);
    w.finish().await;
}

/// The connection ends in place of the batch's COMMIT: the server aborts the transaction, and the
/// step fails and destroys what it made, as any batch the registry could not record.
#[tokio::test]
async fn a_batch_whose_commit_never_reaches_the_server_is_rolled_back() {
    let name = "a_batch_whose_commit_never_reaches_the_server_is_rolled_back";
    let Some(w) = World::new(name).await else {
        return;
    };
    let proxy = PgProxy::start(&w.db.url, "INSERT INTO keeper.souls", Cut::Before).await;
    let keeper = w
        .restarted_at(&proxy.url(&w.db.url), Default::default())
        .await;
    let params = json!({"provider": "lab", "profile": "small", "count": 2, "name": "web"});
    let f = keeper
        .run_step("core.cloud.created", &params, "test")
        .await
        .expect_err("a batch the server never committed fails");
    assert_eq!(proxy.cuts(), 1);
    assert_eq!(f.error.code, "registry.failed", "{}", f.error);
    assert_eq!(w.machines().len(), 0, "{:?}", w.machines());
    assert_eq!(w.count("SELECT 1 FROM keeper.souls").await, 0);
    assert_eq!(
        w.count("SELECT 1 FROM keeper.cloud_vms WHERE state = 'destroyed'")
            .await,
        2
    );
    drop(keeper);
    w.finish().await;
}

#[tokio::test]
async fn a_vm_of_the_same_name_that_another_step_made_is_never_claimed_or_destroyed() {
    let Some(w) =
        World::new("a_vm_of_the_same_name_that_another_step_made_is_never_claimed_or_destroyed")
            .await
    else {
        return;
    };
    let first = w
        .create(json!({"provider": "lab", "profile": "small", "count": 1, "name": "web"}))
        .await;
    let theirs = hosts(&first)[0]["vm_id"].as_str().unwrap().to_string();
    // As after a restore of the database (or beside a second keeper database on the same
    // account): the counter hands out web-1 again, while web-1 stands.
    w.client()
        .await
        .execute("UPDATE keeper.name_counters SET last_index = 0", &[])
        .await
        .unwrap();
    w.inject(
        Operation::Create,
        FaultKind::Error(ErrorKind::Transient),
        20,
    )
    .await;
    let f = w
        .step(
            "core.cloud.created",
            json!({"provider": "lab", "profile": "small", "count": 1, "name": "web"}),
        )
        .await
        .unwrap_err();
    assert_eq!(f.error.code, "cloud.transient", "{}", f.error);
    assert!(
        w.machines().iter().any(|m| m.id == theirs),
        "the VM another step made, only of the same name, still stands: {}",
        f.output
    );
    assert_eq!(f.output["made"], json!([]), "{}", f.output);
    assert_eq!(f.output["destroyed"], json!([]), "{}", f.output);
    assert_eq!(
        w.knobs.recorder.subjects(Op::DeleteNamed),
        Vec::<String>::new(),
        "removing by name would remove that VM"
    );
    let unresolved = f.output["unresolved"].as_array().unwrap();
    assert_eq!(unresolved.len(), 1, "{}", f.output);
    let why = unresolved[0]["why"].as_str().unwrap();
    assert!(why.contains(&theirs), "{why}");
    // Its soul and journal row are as its step left them.
    assert_eq!(
        w.count("SELECT 1 FROM keeper.souls WHERE status = 'pending'")
            .await,
        1
    );
    assert_eq!(
        w.count(&format!(
            "SELECT 1 FROM keeper.cloud_vms WHERE vm_id = '{theirs}' AND state = 'recorded'"
        ))
        .await,
        1
    );
    w.finish().await;
}
