//! keeper's VMs stay its own when its `pool` setting changes: the journal records the pool each VM
//! was asked for in, and destroy, resize and the reconciler reach it there; a VM of the old pool that
//! keeper's journal does not record is still refused.

use crate::support;

use std::time::Duration;

use keeper::cloud::Settings;
use orca::{Created, MachineSpec, Provider};
use serde_json::json;
use support::{hosts, World};

/// Makes VM `name` in pool `pool` for keeper's owner, as a create no keeper journalled.
async fn make_vm(w: &World, pool: &str, name: &str) -> String {
    let p = w.cloud.provider("keeper").unwrap();
    match p
        .create(&MachineSpec::new(name, "amd64-small", "zone-a", pool))
        .await
        .unwrap()
    {
        Created::Machine(m) => m.id,
        other => panic!("{other:?}"),
    }
}

fn pool_b() -> Settings {
    Settings {
        pool: "keeper-b".into(),
        ..Settings::default()
    }
}

#[tokio::test]
async fn vms_made_before_the_pool_setting_changed_are_resized_and_destroyed() {
    let Some(w) =
        World::new("vms_made_before_the_pool_setting_changed_are_resized_and_destroyed").await
    else {
        return;
    };
    let out = w
        .create(json!({"provider": "lab", "profile": "small", "count": 2, "name": "early"}))
        .await;
    let ids: Vec<String> = hosts(&out)
        .iter()
        .map(|h| h["vm_id"].as_str().unwrap().to_string())
        .collect();
    let sids: Vec<String> = hosts(&out)
        .iter()
        .map(|h| h["sid"].as_str().unwrap().to_string())
        .collect();
    let stray = make_vm(&w, "keeper", "stray-1").await;
    let k = w.restarted_with(pool_b()).await;

    let out = k
        .run_step(
            "core.cloud.resized",
            &json!({"provider": "lab", "vm_ids": [ids[0]], "machine_type": "amd64-large"}),
            "test",
        )
        .await
        .unwrap_or_else(|f| panic!("{} {}", f.error, f.output));
    assert_eq!(hosts(&out)[0]["machine_type"], "amd64-large");

    // A VM of the old pool that keeper never made is not taken for one of its own.
    let refused = [
        (
            "core.cloud.destroyed",
            json!({"provider": "lab", "vm_ids": [stray]}),
        ),
        (
            "core.cloud.resized",
            json!({"provider": "lab", "vm_ids": [stray], "machine_type": "amd64-large"}),
        ),
    ];
    for (step, params) in refused {
        let f = k.run_step(step, &params, "test").await.unwrap_err();
        assert_eq!(f.error.code, "cloud.other_pool", "{step}: {}", f.error);
        assert!(f.error.message.contains("keeper-b"), "{}", f.error);
    }

    let out = k
        .run_step(
            "core.cloud.destroyed",
            &json!({"provider": "lab", "vm_ids": ids, "sids": sids}),
            "test",
        )
        .await
        .unwrap_or_else(|f| panic!("{} {}", f.error, f.output));
    assert_eq!(out["counters"]["vms_destroyed"], 2);
    assert_eq!(out["counters"]["souls_destroyed"], 2);
    let left: Vec<String> = w.machines().into_iter().map(|m| m.id).collect();
    assert_eq!(left, [stray], "only the VM keeper never made stands");
    drop(k);
    w.finish().await;
}

#[tokio::test]
async fn the_reconciler_finds_a_half_done_vm_in_the_pool_it_was_asked_for_in() {
    let Some(w) =
        World::new("the_reconciler_finds_a_half_done_vm_in_the_pool_it_was_asked_for_in").await
    else {
        return;
    };
    // A keeper set to pool `keeper` stopped between a VM's create and its answer.
    let p = w.cloud.provider("keeper").unwrap();
    let spec = MachineSpec::new("half-1", "amd64-small", "zone-a", "keeper")
        .with_labels([(keeper::cloud::STEP_LABEL, "dead-step")]);
    p.create(&spec).await.unwrap();
    w.client()
        .await
        .execute(
            "INSERT INTO keeper.cloud_vms (step_id, provider, name, pool, state, updated_at)
             VALUES ('dead-step', 'lab', 'half-1', 'keeper', 'requested', now() - interval '1 hour')",
            &[],
        )
        .await
        .unwrap();
    let k = w.restarted_with(pool_b()).await;
    let r = k.reconcile("test", Duration::ZERO).await.unwrap();
    assert!(!r.needs_attention(), "{r:?}");
    assert_eq!(r.steps[0].destroyed.len(), 1, "{r:?}");
    assert!(w.machines().is_empty(), "{:?}", w.machines());
    drop(k);
    w.finish().await;
}
