//! keeper's steps on CloudDriver plugins (`--drivers plugins`): the same steps, each provider
//! reached through its `soul-cloud-<driver>` child, which keeper starts on first use and keeps.

use crate::support;

use serde_json::{json, Value};
use support::{hosts, World};

fn ids(out: &Value) -> Vec<String> {
    hosts(out)
        .iter()
        .map(|h| h["vm_id"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn created_resized_destroyed_through_the_fake_plugin() {
    let Some(w) = World::plugins("created_resized_destroyed_through_the_fake_plugin").await else {
        return;
    };
    let out = w
        .create(json!({"provider": "lab", "profile": "small", "count": 2, "name": "pl"}))
        .await;
    let made = ids(&out);
    let sids: Vec<Value> = hosts(&out).iter().map(|h| h["sid"].clone()).collect();
    let mut seen: Vec<String> = w.machines().into_iter().map(|m| m.id).collect();
    seen.sort();
    assert_eq!(
        seen, made,
        "the plugin made them in the cloud the vault names"
    );
    assert_eq!(
        w.count("SELECT 1 FROM keeper.souls WHERE provider = 'lab' AND status = 'pending'")
            .await,
        2
    );

    let out = w
        .step(
            "core.cloud.resized",
            json!({"provider": "lab", "vm_ids": [made[0]], "machine_type": "amd64-large"}),
        )
        .await
        .unwrap();
    assert_eq!(hosts(&out)[0]["caused_downtime"], true);
    assert_eq!(hosts(&out)[0]["machine_type"], "amd64-large");

    let out = w
        .step(
            "core.cloud.destroyed",
            json!({"provider": "lab", "vm_ids": made, "sids": sids}),
        )
        .await
        .unwrap_or_else(|f| panic!("{} {}", f.error, f.output));
    assert_eq!(out["action"], "destroyed");
    assert!(w.machines().is_empty(), "{:?}", w.machines());
    assert_eq!(
        w.count("SELECT 1 FROM keeper.souls WHERE status = 'destroyed'")
            .await,
        2
    );
    w.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steps_at_once_share_one_plugin_and_lose_nothing() {
    let Some(w) = World::plugins("steps_at_once_share_one_plugin_and_lose_nothing").await else {
        return;
    };
    let runs = (0..4).map(|i| {
        let k = w.keeper.clone();
        let params =
            json!({"provider": "lab", "profile": "small", "count": 3, "name": format!("c{i}")});
        tokio::spawn(async move { k.run_step("core.cloud.created", &params, "test").await })
    });
    let mut made = Vec::new();
    for r in futures::future::join_all(runs).await {
        let out = r
            .unwrap()
            .unwrap_or_else(|f| panic!("{} {}", f.error, f.output));
        made.extend(ids(&out));
    }
    made.sort();
    let mut seen: Vec<String> = w.machines().into_iter().map(|m| m.id).collect();
    seen.sort();
    assert_eq!(made.len(), 12);
    assert_eq!(seen, made, "every VM made once, each recorded");
    w.finish().await;
}

/// The requests the plugin's simulated cloud has served.
async fn served(plugin: &orca_plugin::PluginProvider) -> u64 {
    use orca_plugin::proto::fake::fake_control_client::FakeControlClient;
    use orca_plugin::proto::fake::RequestsRequest;
    FakeControlClient::new(plugin.channel().await.unwrap())
        .requests(RequestsRequest {})
        .await
        .unwrap()
        .into_inner()
        .requests
}

fn kill(pid: u32) {
    let status = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_killed_between_and_during_steps_is_started_again_and_nothing_doubles() {
    use orca_plugin::proto::fake::fake_control_client::FakeControlClient;
    use orca_plugin::proto::fake::InjectRequest;
    let test = "a_plugin_killed_between_and_during_steps_is_started_again_and_nothing_doubles";
    let Some(w) = World::plugins(test).await else {
        return;
    };
    let first = w
        .create(json!({"provider": "lab", "profile": "small", "count": 1, "name": "a"}))
        .await;
    let host = w.plugins.clone().unwrap();
    let plugin = host
        .running("fake")
        .await
        .pop()
        .expect("the plugin is kept");

    // Killed between steps: the next step's first call starts it again.
    kill(plugin.pid().await.unwrap());
    let out = w
        .create(json!({"provider": "lab", "profile": "small", "count": 1, "name": "b"}))
        .await;
    assert_eq!(plugin.starts(), 2);

    // Killed with a create in flight (held in the plugin before it reaches the cloud): the step
    // fails, keeper keeps serving, and running the step again makes the VM once.
    FakeControlClient::new(plugin.channel().await.unwrap())
        .inject(InjectRequest {
            operation: "create".into(),
            fault_json: r#"{"latency": {"secs": 3600, "nanos": 0}}"#.into(),
            times: 1,
        })
        .await
        .unwrap();
    let before = served(&plugin).await;
    let k = w.keeper.clone();
    let step = tokio::spawn(async move {
        let params = json!({"provider": "lab", "profile": "small", "count": 1, "name": "c"});
        k.run_step("core.cloud.created", &params, "test").await
    });
    // The step is in the plugin once the cloud has seen its first request; the reads before the
    // create take no time, and the create is held. Killed during a read, the step fails the same.
    while served(&plugin).await == before {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    kill(plugin.pid().await.unwrap());
    let failure = step.await.unwrap().expect_err("the create's plugin died");
    assert!(
        failure.output.to_string().contains("soul-cloud-fake"),
        "{} {}",
        failure.error,
        failure.output
    );
    assert_eq!(w.machines().len(), 2, "the held create made nothing");
    let again = w
        .create(json!({"provider": "lab", "profile": "small", "count": 1, "name": "c"}))
        .await;
    let mut names: Vec<String> = w.machines().into_iter().map(|m| m.name).collect();
    names.sort();
    assert_eq!(names.len(), 3, "{names:?}");
    for out in [&first, &out, &again] {
        assert_eq!(hosts(out).len(), 1);
    }
    w.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_logging_its_secret_is_masked_in_keepers_log() {
    use orca::Provider;
    let test = "a_plugin_logging_its_secret_is_masked_in_keepers_log";
    let Some(built) = support::plugin_dir(test) else {
        return;
    };
    // A plugin that logs the secret it was given, with its key and bare, then is soul-cloud-fake.
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("soul-cloud-fake");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\necho \"starting: api_token=$LAB_API_TOKEN, raw $LAB_SECRET, region $LAB_REGION\" >&2\nexec {} \"$@\"\n",
            built.join("soul-cloud-fake").display()
        ),
    )
    .unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    // What keeper logged, kept in memory.
    let log = orca_fakes::traces::Captured::default();
    keeper::logging::init_with(log.clone());
    let host = keeper::plugins::PluginDrivers::new([dir.path().to_path_buf()]);
    let settings = orca::Settings::new()
        .with("LAB_API_TOKEN", "tok-5f1e2d")
        .with("LAB_SECRET", "s3cr3t-value")
        .with("LAB_REGION", "eu");
    let p = keeper::drivers::Drivers::provider(&host, "fake", "o", &settings)
        .await
        .unwrap();
    assert_eq!(p.kind(), "fake");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !log.text().contains("starting:") && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let text = log.text();
    let line = text
        .lines()
        .find(|l| l.contains("starting:"))
        .unwrap_or_else(|| panic!("the plugin's line is in keeper's log: {text}"));
    assert!(line.contains("api_token=***, raw ***, region eu"), "{line}");
    assert!(line.contains("driver=fake"), "{line}");
    assert!(
        !text.contains("tok-5f1e2d") && !text.contains("s3cr3t-value"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vault_key_the_driver_does_not_know_is_refused_by_name_before_a_plugin_starts() {
    let test = "a_vault_key_the_driver_does_not_know_is_refused_by_name_before_a_plugin_starts";
    let Some(w) = World::plugins(test).await else {
        return;
    };
    // A typo of ORCA_FAKE_STATE beside the right key: silently ignored, the VMs would go elsewhere.
    support::write_vault_file(
        &w.vault,
        "fake/lab",
        &json!({orca::FAKE_STATE_ENV: w.state.to_str().unwrap(), "ORCA_FAKE_STAET": "/tmp/x.json"}),
    );
    let f = w
        .step(
            "core.cloud.created",
            json!({"provider": "lab", "profile": "small", "count": 1, "name": "typo"}),
        )
        .await
        .map(|out| panic!("the unknown key was ignored: {out}"))
        .unwrap_err();
    assert_eq!(f.error.code, "provider.settings", "{}", f.error);
    assert!(f.error.message.contains("ORCA_FAKE_STAET"), "{}", f.error);
    let host = w.plugins.clone().unwrap();
    assert!(host.running("fake").await.is_empty(), "no plugin started");
    assert!(w.machines().is_empty());
    w.finish().await;
}
