//! `core.cloud.destroyed`: the cloud first, then one transaction for the registries.

use crate::support;

use orca::layer::Op;
use orca::memory::{FaultKind, Operation};
use orca::{ErrorKind, MachineSpec, Provider};
use serde_json::{json, Value};
use std::sync::atomic::Ordering;
use support::{hosts, World};

/// Makes `count` VMs named `name-*` and gives each soul two active seeds and one retired seed.
async fn souls_with_seeds(w: &World, name: &str, count: u32) -> (Vec<Value>, Vec<Value>) {
    let out = w
        .create(json!({"provider": "lab", "profile": "small", "count": count, "name": name}))
        .await;
    let c = w.client().await;
    for h in hosts(&out) {
        let sid = h["sid"].as_str().unwrap();
        c.execute(
            "INSERT INTO keeper.soul_seeds (soul_id, name, status)
             SELECT id, s.name, s.status FROM keeper.souls,
                    (VALUES ('ssh', 'active'), ('tls', 'active'), ('old', 'retired')) AS s(name, status)
             WHERE sid = $1 AND keeper.souls.status <> 'destroyed'",
            &[&sid],
        )
        .await
        .unwrap();
    }
    let sids = hosts(&out).iter().map(|h| h["sid"].clone()).collect();
    let ids = hosts(&out).iter().map(|h| h["vm_id"].clone()).collect();
    (sids, ids)
}

/// The registry rows of souls, seeds and tokens, to compare before and after.
async fn registries(w: &World) -> Vec<Value> {
    let mut all = w
        .rows("SELECT id, sid, status, updated_at, destroyed_at FROM keeper.souls ORDER BY id")
        .await;
    all.extend(
        w.rows("SELECT id, soul_id, status, updated_at FROM keeper.soul_seeds ORDER BY id")
            .await,
    );
    all.extend(
        w.rows("SELECT id, soul_id, status, burned_at FROM keeper.bootstrap_tokens ORDER BY id")
            .await,
    );
    all
}

#[tokio::test]
async fn destroyed_cascades_souls_seeds_and_tokens_in_one_step() {
    let Some(w) = World::new("destroyed_cascades_souls_seeds_and_tokens_in_one_step").await else {
        return;
    };
    let (sids, ids) = souls_with_seeds(&w, "gone", 2).await;
    let (keep_sids, _) = souls_with_seeds(&w, "stay", 1).await;
    let out = w
        .step(
            "core.cloud.destroyed",
            json!({"provider": "lab", "vm_ids": ids, "sids": sids}),
        )
        .await
        .unwrap();
    assert_eq!(out["action"], "destroyed");
    assert_eq!(out["changed"], true);
    assert_eq!(out["vm_ids"], json!(ids));
    let c = &out["counters"];
    assert_eq!(
        (
            &c["vms_destroyed"],
            &c["souls_destroyed"],
            &c["seeds_orphaned"],
            &c["bootstrap_burned"]
        ),
        (&json!(2), &json!(2), &json!(4), &json!(2))
    );
    assert_eq!(w.machines().len(), 1, "only the other batch is left");
    let souls = w
        .rows("SELECT sid, status, destroyed_at IS NOT NULL AS at FROM keeper.souls ORDER BY id")
        .await;
    assert_eq!(souls[0]["status"], "destroyed");
    assert_eq!(souls[1]["status"], "destroyed");
    assert_eq!(souls[0]["at"], true);
    assert_eq!(souls[2]["sid"], keep_sids[0]);
    assert_eq!(souls[2]["status"], "pending", "another soul is untouched");
    let seeds = w
        .rows(
            "SELECT s.sid, d.name, d.status FROM keeper.soul_seeds d JOIN keeper.souls s ON s.id = d.soul_id
             ORDER BY d.id",
        )
        .await;
    for d in &seeds {
        let gone = sids.contains(&d["sid"]);
        let want = match (gone, d["name"].as_str().unwrap()) {
            (_, "old") => "retired",
            (true, _) => "orphaned",
            (false, _) => "active",
        };
        assert_eq!(d["status"], want, "{d}");
    }
    let tokens = w
        .rows(
            "SELECT s.sid, t.status, t.burned_at IS NOT NULL AS at FROM keeper.bootstrap_tokens t
             JOIN keeper.souls s ON s.id = t.soul_id ORDER BY t.id",
        )
        .await;
    assert_eq!(tokens[0]["status"], "burned");
    assert_eq!(tokens[0]["at"], true);
    assert_eq!(tokens[2]["status"], "issued");
    assert_eq!(
        w.count("SELECT 1 FROM keeper.cloud_vms WHERE state = 'destroyed'")
            .await,
        2
    );
    let events = w.audit("cloud.provisioned").await;
    let e = events.last().unwrap();
    assert_eq!(e["outcome"], "succeeded");
    assert_eq!(e["payload"]["action"], "destroyed");
    assert_eq!(e["payload"]["vm_ids"], json!(ids));
    assert_eq!(e["payload"]["sids"], json!(sids));
    assert_eq!(e["payload"]["counters"]["seeds_orphaned"], 4);
    // The same step again (a retry): the VMs are gone, nothing is counted twice.
    let again = w
        .step(
            "core.cloud.destroyed",
            json!({"provider": "lab", "vm_ids": ids, "sids": sids}),
        )
        .await
        .unwrap();
    assert_eq!(again["counters"]["vms_destroyed"], 0, "{again}");
    assert_eq!(again["counters"]["souls_destroyed"], 0);
    assert_eq!(again["counters"]["bootstrap_burned"], 0);
    assert_eq!(again["already_gone"], json!(ids));
    let e = w.audit("cloud.provisioned").await.pop().unwrap();
    assert_eq!(e["payload"]["counters"]["vms_destroyed"], 0);
    w.finish().await;
}

#[tokio::test]
async fn a_failed_destroy_leaves_the_registries_untouched() {
    let Some(w) = World::new("a_failed_destroy_leaves_the_registries_untouched").await else {
        return;
    };
    let (sids, ids) = souls_with_seeds(&w, "live", 2).await;
    // A VM of another owner in the middle: the provider refuses to destroy it.
    let foreign = w
        .cloud
        .provider("someone-else")
        .unwrap()
        .create(&MachineSpec::new(
            "theirs",
            "amd64-small",
            "zone-a",
            "keeper",
        ))
        .await
        .unwrap()
        .machine()
        .unwrap();
    let before = registries(&w).await;
    let vm_ids = json!([ids[0], foreign.id, ids[1]]);
    let f = w
        .step(
            "core.cloud.destroyed",
            json!({"provider": "lab", "vm_ids": vm_ids, "sids": sids}),
        )
        .await
        .unwrap_err();
    assert_eq!(f.error.code, "cloud.not_owned");
    assert!(
        f.error.message.contains("registries are untouched"),
        "{}",
        f.error
    );
    assert_eq!(f.output["destroyed"], json!([ids[0]]));
    assert_eq!(f.output["failed"], json!([foreign.id]));
    assert_eq!(f.output["not_attempted"], json!([ids[1]]));
    assert_eq!(
        registries(&w).await,
        before,
        "souls, seeds and tokens as they were"
    );
    assert_eq!(
        w.machines().len(),
        2,
        "the foreign VM and the one not attempted"
    );
    let e = w.audit("cloud.provisioned").await.pop().unwrap();
    assert_eq!(e["outcome"], "failed");
    assert_eq!(e["payload"]["counters"]["souls_destroyed"], 0);

    // The cloud refusing the first destroy: nothing at all changes.
    w.inject(
        Operation::Delete,
        FaultKind::Error(ErrorKind::PermissionDenied),
        1,
    )
    .await;
    let f = w
        .step(
            "core.cloud.destroyed",
            json!({"provider": "lab", "vm_ids": [ids[1]], "sids": [sids[1]]}),
        )
        .await
        .unwrap_err();
    assert_eq!(f.error.code, "cloud.permission_denied");
    assert_eq!(registries(&w).await, before);

    // Once the cloud lets it, the same step cascades.
    let out = w
        .step(
            "core.cloud.destroyed",
            json!({"provider": "lab", "vm_ids": ids, "sids": sids}),
        )
        .await
        .unwrap();
    assert_eq!(out["counters"]["souls_destroyed"], 2);
    assert_eq!(w.machines().len(), 1, "only the foreign VM");
    w.finish().await;
}

#[tokio::test]
async fn a_wrong_sid_vm_pairing_is_refused_before_any_destroy() {
    let Some(w) = World::new("a_wrong_sid_vm_pairing_is_refused_before_any_destroy").await else {
        return;
    };
    let (sids, ids) = souls_with_seeds(&w, "pair", 2).await;
    let requests = w.requests().await;
    for params in [
        json!({"provider": "lab", "vm_ids": [ids[1]], "sids": [sids[0]]}),
        json!({"provider": "lab", "vm_ids": [ids[0]], "sids": ["unknown.example"]}),
    ] {
        let f = w.step("core.cloud.destroyed", params).await.unwrap_err();
        assert_eq!(f.error.field.as_deref(), Some("sids[0]"), "{}", f.error);
    }
    keeper::registry::create_provider(
        w.keeper.pool(),
        "test",
        &json!({"name": "other", "driver": "fake", "credentials_ref": "fake/lab", "region": "zone-a"}),
    )
    .await
    .unwrap();
    let f = w
        .step(
            "core.cloud.destroyed",
            json!({"provider": "other", "vm_ids": [ids[0]], "sids": [sids[0]]}),
        )
        .await
        .unwrap_err();
    assert_eq!(
        f.error.field.as_deref(),
        Some("sids[0]"),
        "the soul is another provider's"
    );
    assert_eq!(w.requests().await, requests, "no cloud call");
    assert_eq!(w.machines().len(), 2);
    assert_eq!(
        w.count("SELECT 1 FROM keeper.souls WHERE status = 'pending'")
            .await,
        2
    );
    let events = w.audit("cloud.provisioned").await;
    assert!(events[events.len() - 3..]
        .iter()
        .all(|e| e["outcome"] == "refused"));
    // Refused before any destroy: the payload names what was asked, and counts nothing.
    let zero = json!({"vms_destroyed": 0, "souls_destroyed": 0, "seeds_orphaned": 0,
                      "bootstrap_burned": 0, "journal_destroyed": 0});
    let p = &events[events.len() - 1]["payload"];
    assert_eq!(p["provider"], "other", "{p}");
    assert_eq!(p["vm_ids"], json!([ids[0]]), "{p}");
    assert_eq!(p["sids"], json!([sids[0]]), "{p}");
    assert_eq!(p["counters"], zero, "{p}");
    let f = w
        .step("core.cloud.destroyed", json!({"provider": "lab"}))
        .await
        .unwrap_err();
    assert_eq!(f.error.field.as_deref(), Some("vm_ids"));
    let p = &w.audit("cloud.provisioned").await.pop().unwrap()["payload"];
    assert_eq!(p["provider"], "lab", "{p}");
    assert_eq!((&p["vm_ids"], &p["sids"]), (&json!([]), &json!([])), "{p}");
    assert_eq!(p["counters"], zero, "{p}");
    w.finish().await;
}

#[tokio::test]
async fn a_registry_failure_after_the_destroys_is_audited_with_the_counters() {
    let Some(w) =
        World::new("a_registry_failure_after_the_destroys_is_audited_with_the_counters").await
    else {
        return;
    };
    let (sids, ids) = souls_with_seeds(&w, "reg", 2).await;
    // PostgreSQL refuses the cascade's update of the souls (the audit trail still works).
    w.client()
        .await
        .batch_execute(
            "CREATE FUNCTION keeper.test_refuse_souls() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN RAISE EXCEPTION 'souls are read-only for this test'; END $$;
             CREATE TRIGGER test_refuse_souls BEFORE UPDATE ON keeper.souls
                 FOR EACH ROW EXECUTE FUNCTION keeper.test_refuse_souls();",
        )
        .await
        .unwrap();
    let f = w
        .step(
            "core.cloud.destroyed",
            json!({"provider": "lab", "vm_ids": ids, "sids": sids}),
        )
        .await
        .unwrap_err();
    assert_eq!(f.error.code, "registry.failed", "{}", f.error);
    assert!(w.machines().is_empty(), "the VMs are destroyed");
    let e = w.audit("cloud.provisioned").await.pop().unwrap();
    assert_eq!(e["outcome"], "failed");
    let p = &e["payload"];
    assert_eq!(p["provider"], "lab", "{p}");
    assert_eq!(p["vm_ids"], json!(ids), "{p}");
    assert_eq!(p["sids"], json!(sids), "{p}");
    assert_eq!(
        p["counters"],
        json!({"vms_destroyed": 2, "souls_destroyed": 0, "seeds_orphaned": 0,
               "bootstrap_burned": 0, "journal_destroyed": 0}),
        "{p}"
    );
    w.finish().await;
}

/// Ends the sessions of the test's own database that hold an advisory lock (the destroy's lock on
/// its VM); answers how many.
pub(crate) async fn end_the_lock_holders(w: &World) -> usize {
    let rows = w
        .client()
        .await
        .query(
            "SELECT pg_terminate_backend(l.pid) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
             WHERE l.locktype = 'advisory' AND l.granted AND a.datname = current_database()
               AND l.pid <> pg_backend_pid()",
            &[],
        )
        .await
        .unwrap();
    rows.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_destroy_whose_lock_is_lost_mid_delete_does_not_count_the_vm_and_says_so() {
    let Some(w) =
        World::new("a_destroy_whose_lock_is_lost_mid_delete_does_not_count_the_vm_and_says_so")
            .await
    else {
        return;
    };
    let (sids, ids) = souls_with_seeds(&w, "lost", 1).await;
    w.knobs
        .hold_deletes
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let k = w.keeper.clone();
    let params = json!({"provider": "lab", "vm_ids": ids, "sids": sids});
    let step =
        tokio::spawn(async move { k.run_step("core.cloud.destroyed", &params, "test").await });
    w.knobs.delete_entered.notified().await;
    // While the delete runs, the VM's lock holds no connection of keeper's pool.
    let st = w.keeper.pool().status();
    assert_eq!(st.size, st.available, "{st:?}");
    // The lock's session ends in the middle of the delete (this test's database only).
    assert_eq!(end_the_lock_holders(&w).await, 1);
    w.knobs.delete_release.notify_one();
    let f = step.await.unwrap().unwrap_err();
    assert_eq!(f.error.code, "registry.lock_lost", "{}", f.error);
    assert!(
        f.error.message.contains(ids[0].as_str().unwrap()),
        "{}",
        f.error
    );
    assert!(w.machines().is_empty(), "the VM is destroyed all the same");
    assert_eq!(f.output["uncounted"], json!(ids), "{}", f.output);
    assert_eq!(f.output["destroyed"], json!(ids), "{}", f.output);
    assert_eq!(f.output["counters"]["vms_destroyed"], 0, "{}", f.output);
    assert_eq!(
        w.count("SELECT 1 FROM keeper.souls WHERE status = 'destroyed'")
            .await,
        0,
        "the registries are untouched"
    );
    let e = w.audit("cloud.provisioned").await.pop().unwrap();
    assert_eq!(e["outcome"], "failed");
    assert_eq!(e["payload"]["counters"]["vms_destroyed"], 0, "{e}");
    // The same step again: the VM is gone (not counted), the registries follow.
    w.knobs
        .hold_deletes
        .store(false, std::sync::atomic::Ordering::SeqCst);
    let again = w
        .step(
            "core.cloud.destroyed",
            json!({"provider": "lab", "vm_ids": ids, "sids": sids}),
        )
        .await
        .unwrap();
    assert_eq!(again["already_gone"], json!(ids), "{again}");
    assert_eq!(again["counters"]["vms_destroyed"], 0, "{again}");
    assert_eq!(again["counters"]["souls_destroyed"], 1, "{again}");
    w.finish().await;
}

/// A VM of keeper's owner but of another pool (another program sharing the owner, or a VM id of
/// the wrong provider row) is not keeper's: the step refuses it, destroys nothing after it and
/// leaves it standing.
#[tokio::test]
async fn a_vm_of_another_pool_is_refused_and_left_standing() {
    let Some(w) = World::new("a_vm_of_another_pool_is_refused_and_left_standing").await else {
        return;
    };
    let (_, ids) = souls_with_seeds(&w, "live", 1).await;
    let other = w
        .cloud
        .provider("keeper")
        .unwrap()
        .create(&MachineSpec::new(
            "elsewhere",
            "amd64-small",
            "zone-a",
            "other",
        ))
        .await
        .unwrap()
        .machine()
        .unwrap();
    let before = registries(&w).await;
    let f = w
        .step(
            "core.cloud.destroyed",
            json!({"provider": "lab", "vm_ids": [other.id, ids[0]]}),
        )
        .await
        .unwrap_err();
    assert_eq!(f.error.code, "cloud.other_pool", "{}", f.error);
    assert!(f.error.message.contains("other"), "{}", f.error);
    assert_eq!(f.output["failed"], json!([other.id]));
    assert_eq!(f.output["not_attempted"], json!([ids[0]]));
    assert_eq!(w.machines().len(), 2, "both VMs stand");
    assert_eq!(registries(&w).await, before);
    w.finish().await;
}

#[tokio::test]
async fn what_a_delete_left_beside_a_vm_now_gone_is_removed_by_name_on_the_next_destroy() {
    let Some(w) = World::new(
        "what_a_delete_left_beside_a_vm_now_gone_is_removed_by_name_on_the_next_destroy",
    )
    .await
    else {
        return;
    };
    let (sids, ids) = souls_with_seeds(&w, "leaky", 1).await;
    let params = json!({"provider": "lab", "vm_ids": ids, "sids": sids});
    let before = registries(&w).await;
    // The delete removes the VM but leaves its security group; removing it by name at once fails,
    // and so does the next step's removal.
    w.knobs.delete_leaves.store(1, Ordering::SeqCst);
    w.knobs.fail_delete_named.store(2, Ordering::SeqCst);
    let f = w
        .step("core.cloud.destroyed", params.clone())
        .await
        .unwrap_err();
    assert_eq!(f.error.code, "cloud.leftovers", "{}", f.error);
    assert!(f.error.message.contains("-nsg"), "{}", f.error);
    assert!(
        f.error.message.contains("registries are untouched"),
        "{}",
        f.error
    );
    assert_eq!(f.output["failed"], json!(ids));
    assert!(w.machines().is_empty(), "the VM itself went");
    assert_eq!(registries(&w).await, before);
    let rec = &w.knobs.recorder;
    assert_eq!(
        rec.subjects(Op::DeleteNamed),
        ["keeper/leaky-1"],
        "tried at once: {:?}",
        rec.calls()
    );

    // The VM is gone now, but what it left is not: the step removes it by name, and fails while
    // that fails.
    let f = w
        .step("core.cloud.destroyed", params.clone())
        .await
        .unwrap_err();
    assert_eq!(f.error.code, "cloud.transient", "{}", f.error);
    assert!(f.error.message.contains("leaky-1"), "{}", f.error);
    assert!(
        f.error.message.contains("registries are untouched"),
        "{}",
        f.error
    );
    assert_eq!(f.output["failed"], json!(ids));
    assert_eq!(registries(&w).await, before);
    assert_eq!(
        rec.subjects(Op::DeleteNamed),
        ["keeper/leaky-1", "keeper/leaky-1"]
    );
    assert_eq!(rec.failed(Op::DeleteNamed), 2);

    // Once the removal by name works, the step cascades; the VM was gone before it: not counted.
    let out = w.step("core.cloud.destroyed", params).await.unwrap();
    assert_eq!(out["already_gone"], json!(ids), "{out}");
    assert_eq!(out["counters"]["vms_destroyed"], 0);
    assert_eq!(out["counters"]["souls_destroyed"], 1);
    assert_eq!(out["counters"]["seeds_orphaned"], 2);
    assert_eq!(
        rec.subjects(Op::DeleteNamed),
        ["keeper/leaky-1", "keeper/leaky-1", "keeper/leaky-1"]
    );
    assert_eq!(rec.failed(Op::DeleteNamed), 2);
    w.finish().await;
}

#[tokio::test]
async fn a_delete_that_left_pieces_has_them_removed_by_name_at_once_and_still_fails() {
    let Some(w) =
        World::new("a_delete_that_left_pieces_has_them_removed_by_name_at_once_and_still_fails")
            .await
    else {
        return;
    };
    let (sids, ids) = souls_with_seeds(&w, "drip", 1).await;
    let params = json!({"provider": "lab", "vm_ids": ids, "sids": sids});
    let before = registries(&w).await;
    w.knobs.delete_leaves.store(1, Ordering::SeqCst);
    let f = w
        .step("core.cloud.destroyed", params.clone())
        .await
        .unwrap_err();
    // The delete failed, so the step does, even though the removal by name worked.
    assert_eq!(f.error.code, "cloud.leftovers", "{}", f.error);
    assert!(f.error.message.contains("removed by name"), "{}", f.error);
    assert_eq!(registries(&w).await, before);
    let rec = &w.knobs.recorder;
    assert_eq!(rec.subjects(Op::DeleteNamed), ["keeper/drip-1"]);
    assert_eq!(rec.failed(Op::DeleteNamed), 0);

    let out = w.step("core.cloud.destroyed", params).await.unwrap();
    assert_eq!(out["already_gone"], json!(ids), "{out}");
    assert_eq!(out["counters"]["vms_destroyed"], 0);
    assert_eq!(out["counters"]["souls_destroyed"], 1);
    w.finish().await;
}

#[tokio::test]
async fn a_vm_id_keeper_never_made_is_already_gone_and_nothing_is_removed_by_name() {
    let Some(w) =
        World::new("a_vm_id_keeper_never_made_is_already_gone_and_nothing_is_removed_by_name")
            .await
    else {
        return;
    };
    let out = w
        .step(
            "core.cloud.destroyed",
            json!({"provider": "lab", "vm_ids": ["m-99999999"]}),
        )
        .await
        .unwrap();
    assert_eq!(out["already_gone"], json!(["m-99999999"]), "{out}");
    assert_eq!(out["counters"]["vms_destroyed"], 0);
    let rec = &w.knobs.recorder;
    assert_eq!(rec.count(Op::DeleteNamed), 0, "{:?}", rec.calls());
    w.finish().await;
}

/// A destroy naming only the VMs (the caller gave no `sids`) still ends their souls: a soul on a VM
/// that is gone is no longer pending, its seeds orphaned and its one-time token burned, as a destroy
/// naming the sids leaves them.
#[tokio::test]
async fn destroyed_by_vm_ids_alone_ends_their_souls_and_burns_their_tokens() {
    let Some(w) =
        World::new("destroyed_by_vm_ids_alone_ends_their_souls_and_burns_their_tokens").await
    else {
        return;
    };
    let (sids, ids) = souls_with_seeds(&w, "bare", 2).await;
    let (keep_sids, _) = souls_with_seeds(&w, "stay", 1).await;
    let out = w
        .step(
            "core.cloud.destroyed",
            json!({"provider": "lab", "vm_ids": ids}),
        )
        .await
        .unwrap();
    let c = &out["counters"];
    assert_eq!(
        (
            &c["vms_destroyed"],
            &c["souls_destroyed"],
            &c["seeds_orphaned"],
            &c["bootstrap_burned"]
        ),
        (&json!(2), &json!(2), &json!(4), &json!(2)),
        "{out}"
    );
    for sid in &sids {
        let sid = sid.as_str().unwrap();
        assert_eq!(
            w.count(&format!(
                "SELECT 1 FROM keeper.souls WHERE sid = '{sid}' AND status = 'destroyed'
                 AND destroyed_at IS NOT NULL"
            ))
            .await,
            1,
            "{sid}"
        );
        assert_eq!(
            w.count(&format!(
                "SELECT 1 FROM keeper.bootstrap_tokens t JOIN keeper.souls s ON s.id = t.soul_id
                 WHERE s.sid = '{sid}' AND t.status <> 'burned'"
            ))
            .await,
            0,
            "{sid}: its token is no longer usable"
        );
    }
    let keep = keep_sids[0].as_str().unwrap();
    assert_eq!(
        w.count(&format!(
            "SELECT 1 FROM keeper.souls s JOIN keeper.bootstrap_tokens t ON t.soul_id = s.id
             WHERE s.sid = '{keep}' AND s.status = 'pending' AND t.status = 'issued'"
        ))
        .await,
        1,
        "another VM's soul is untouched"
    );
    w.finish().await;
}

/// The output and the audit event of a destroy name the souls it ended, given in `sids` or not, as
/// its counters count them; and the event says which VMs were gone already, as a failure's does.
#[tokio::test]
async fn destroyed_names_every_soul_it_ended_in_its_output_and_audit_event() {
    let Some(w) =
        World::new("destroyed_names_every_soul_it_ended_in_its_output_and_audit_event").await
    else {
        return;
    };
    let (sids, ids) = souls_with_seeds(&w, "bare", 2).await;
    let (keep_sids, _) = souls_with_seeds(&w, "stay", 1).await;
    let out = w
        .step(
            "core.cloud.destroyed",
            json!({"provider": "lab", "vm_ids": ids}),
        )
        .await
        .unwrap();
    assert_eq!(out["counters"]["souls_destroyed"], 2, "{out}");
    assert_eq!(out["sids"], json!(sids), "{out}");
    let e = w.audit("cloud.provisioned").await.pop().unwrap();
    assert_eq!(e["outcome"], "succeeded");
    assert_eq!(e["payload"]["sids"], json!(sids), "{e}");
    assert_eq!(e["payload"]["already_gone"], json!([]), "{e}");

    // One SID given of two: both souls ended, both named, once each.
    let (half_sids, half_ids) = souls_with_seeds(&w, "half", 2).await;
    let out = w
        .step(
            "core.cloud.destroyed",
            json!({"provider": "lab", "vm_ids": half_ids, "sids": [half_sids[1]]}),
        )
        .await
        .unwrap();
    assert_eq!(out["counters"]["souls_destroyed"], 2, "{out}");
    assert_eq!(out["sids"], json!(half_sids), "{out}");
    let e = w.audit("cloud.provisioned").await.pop().unwrap();
    assert_eq!(e["payload"]["sids"], json!(half_sids), "{e}");

    // A repeat ends no soul and names none; its event says the VMs were gone.
    let out = w
        .step(
            "core.cloud.destroyed",
            json!({"provider": "lab", "vm_ids": ids}),
        )
        .await
        .unwrap();
    assert_eq!(out["counters"]["souls_destroyed"], 0, "{out}");
    assert_eq!(out["sids"], json!([]), "{out}");
    let e = w.audit("cloud.provisioned").await.pop().unwrap();
    assert_eq!(e["payload"]["sids"], json!([]), "{e}");
    assert_eq!(e["payload"]["already_gone"], json!(ids), "{e}");
    assert_eq!(
        w.count(&format!(
            "SELECT 1 FROM keeper.souls WHERE sid = '{}' AND status = 'pending'",
            keep_sids[0].as_str().unwrap()
        ))
        .await,
        1,
        "another VM's soul is neither ended nor named"
    );
    w.finish().await;
}

/// A repeat that finds every VM gone and ends no soul changed nothing, and says so (`changed`
/// false); the first destroy changed something.
#[tokio::test]
async fn a_repeat_that_changes_nothing_says_changed_false() {
    let Some(w) = World::new("a_repeat_that_changes_nothing_says_changed_false").await else {
        return;
    };
    let (_, ids) = souls_with_seeds(&w, "twice", 2).await;
    let params = json!({"provider": "lab", "vm_ids": ids});
    let first = w
        .step("core.cloud.destroyed", params.clone())
        .await
        .unwrap();
    assert_eq!(first["changed"], true, "{first}");
    let again = w.step("core.cloud.destroyed", params).await.unwrap();
    assert_eq!(again["already_gone"], json!(ids), "{again}");
    assert_eq!(again["changed"], false, "{again}");
    w.finish().await;
}

#[tokio::test]
async fn a_vm_found_gone_never_has_another_vm_of_its_name_removed_by_name() {
    let Some(w) =
        World::new("a_vm_found_gone_never_has_another_vm_of_its_name_removed_by_name").await
    else {
        return;
    };
    let out = w
        .create(json!({"provider": "lab", "profile": "small", "count": 1, "name": "web"}))
        .await;
    let theirs = hosts(&out)[0]["vm_id"].as_str().unwrap().to_string();
    // A row of another step that gave the same name to a VM now gone (a restored database
    // handed web-1 out again).
    w.client()
        .await
        .execute(
            "INSERT INTO keeper.cloud_vms (step_id, provider, name, pool, state, vm_id)
             VALUES ('old-step', 'lab', 'web-1', 'keeper', 'made', 'm-gone-1')",
            &[],
        )
        .await
        .unwrap();
    let out = w
        .step(
            "core.cloud.destroyed",
            json!({"provider": "lab", "vm_ids": ["m-gone-1"]}),
        )
        .await
        .unwrap();
    assert_eq!(out["already_gone"], json!(["m-gone-1"]));
    assert!(
        w.machines().iter().any(|m| m.id == theirs),
        "web-1, which another step made, still stands"
    );
    assert!(w.knobs.recorder.subjects(Op::DeleteNamed).is_empty());
    w.finish().await;
}

#[tokio::test]
async fn a_vm_another_provider_row_records_is_refused_before_any_cloud_call() {
    let Some(w) =
        World::new("a_vm_another_provider_row_records_is_refused_before_any_cloud_call").await
    else {
        return;
    };
    // A second provider row on the same account (the same credentials).
    keeper::registry::create_provider(
        w.keeper.pool(),
        "test",
        &json!({"name": "lab2", "driver": "fake", "credentials_ref": "fake/lab",
                "region": "zone-a", "fqdn_suffix": "zone-a.fake.internal"}),
    )
    .await
    .unwrap();
    let (_, ids) = souls_with_seeds(&w, "web", 1).await;
    let id = ids[0].as_str().unwrap().to_string();
    let before = registries(&w).await;
    let calls = w.knobs.recorder.calls().len();
    let f = w
        .step(
            "core.cloud.destroyed",
            json!({"provider": "lab2", "vm_ids": ["m-nothing", id]}),
        )
        .await
        .unwrap_err();
    assert_eq!(f.error.code, "cloud.other_provider", "{}", f.error);
    assert_eq!(f.error.field.as_deref(), Some("vm_ids[1]"), "{}", f.error);
    assert!(f.error.message.contains("lab"), "{}", f.error);
    assert!(
        w.machines().iter().any(|m| m.id == id),
        "the VM stands: {}",
        f.output
    );
    assert_eq!(w.knobs.recorder.calls().len(), calls, "no cloud call");
    assert_eq!(registries(&w).await, before);
    assert_eq!(
        w.count(&format!(
            "SELECT 1 FROM keeper.cloud_vms WHERE vm_id = '{id}' AND state = 'recorded'"
        ))
        .await,
        1
    );
    // Through the provider row that records it, the same destroy goes through.
    w.step(
        "core.cloud.destroyed",
        json!({"provider": "lab", "vm_ids": [id]}),
    )
    .await
    .unwrap();
    w.finish().await;
}
