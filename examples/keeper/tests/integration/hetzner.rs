//! keeper on another driver: the Hetzner driver against orca's fake Hetzner Cloud API on 127.0.0.1
//! (with `--features clouds`). The SID is the server's reverse DNS, which keeper cannot predict; a
//! resize stops the server, so it reports downtime; the API token stays in the vault.

#![cfg(feature = "clouds")]

use crate::support;

use orca_fakes::hetzner::FakeHetzner;
use serde_json::{json, Value};
use support::{hosts, write_vault_file, World};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn created_resized_destroyed_on_the_hetzner_driver() {
    let Some(w) = World::orca("created_resized_destroyed_on_the_hetzner_driver").await else {
        return;
    };
    let fake = FakeHetzner::start().await.unwrap();
    write_vault_file(
        &w.vault,
        "hetzner/fake",
        &json!({"HCLOUD_TOKEN": fake.token(), "ORCA_HCLOUD_ENDPOINT": fake.url()}),
    );
    keeper::registry::create_provider(
        w.keeper.pool(),
        "test",
        &json!({"name": "hz", "driver": "hetzner", "credentials_ref": "hetzner/fake", "region": "hel1"}),
    )
    .await
    .unwrap();
    let out = w
        .create(json!({"provider": "hz", "profile": {"machine_type": "cx23"}, "count": 2, "name": "hz"}))
        .await;
    let hs = hosts(&out);
    assert_eq!(hs.len(), 2);
    for h in hs {
        let sid = h["sid"].as_str().unwrap();
        assert!(
            sid.ends_with(".your-server.de"),
            "the server's reverse DNS: {sid}"
        );
        assert_eq!(h["attributes"]["location"], "hel1");
    }
    assert_eq!(
        w.count("SELECT 1 FROM keeper.souls WHERE provider = 'hz' AND status = 'pending'")
            .await,
        2
    );
    let ids: Vec<Value> = hs.iter().map(|h| h["vm_id"].clone()).collect();
    let sids: Vec<Value> = hs.iter().map(|h| h["sid"].clone()).collect();
    let resized = w
        .step(
            "core.cloud.resized",
            json!({"provider": "hz", "vm_ids": [ids[0]], "machine_type": "cx33"}),
        )
        .await
        .unwrap();
    assert_eq!(resized["hosts"][0]["caused_downtime"], true, "{resized}");
    assert_eq!(resized["hosts"][0]["machine_type"], "cx33");
    let destroyed = w
        .step(
            "core.cloud.destroyed",
            json!({"provider": "hz", "vm_ids": ids, "sids": sids}),
        )
        .await
        .unwrap();
    assert_eq!(destroyed["counters"]["souls_destroyed"], 2);
    let dump = w
        .rows("SELECT payload FROM keeper.audit_events")
        .await
        .iter()
        .map(Value::to_string)
        .collect::<String>();
    assert!(!dump.contains(&fake.token()));
    assert!(!out.to_string().contains(&fake.token()));
    w.finish().await;
}
