//! keeper's steps on CloudDriver plugins (`--drivers plugins`): the same steps, each provider
//! reached through its `soul-cloud-<driver>` child, which keeper starts on first use and keeps.

use crate::support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

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
    let plugin = host.running("fake").pop().expect("the plugin is kept");

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
    let host = keeper::plugins::host([dir.path().to_path_buf()]);
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
    assert!(host.running("fake").is_empty(), "no plugin started");
    assert!(w.machines().is_empty());
    w.finish().await;
}

/// Writes the shell script `name` in `dir`, executable by all and writable by its owner only.
fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn chmod(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// The fake's settings on the state file `state`.
fn fake_settings(state: &Path) -> orca::Settings {
    orca::Settings::new().with(orca::FAKE_STATE_ENV, state.to_str().unwrap())
}

/// Waits (a guard of 20 s, failing the test) until `path` exists.
async fn wait_for(path: &Path) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !path.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_that_never_answers_fails_its_start_in_time_and_another_driver_still_starts() {
    let test =
        "a_plugin_that_never_answers_fails_its_start_in_time_and_another_driver_still_starts";
    let Some(built) = support::plugin_dir(test) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let began = dir.path().join("hang-began");
    script(
        dir.path(),
        "soul-cloud-hang",
        &format!("touch {}\nexec sleep 3600\n", began.display()),
    );
    let host = Arc::new(
        keeper::plugins::host([dir.path().to_path_buf(), built])
            .start_timeout(Duration::from_secs(2)),
    );
    let hang = tokio::spawn({
        let host = host.clone();
        async move { host.provider("hang", "o", &orca::Settings::new()).await }
    });
    // The hanging plugin is being started before the fake is asked for.
    wait_for(&began).await;
    let state = dir.path().join("cloud.json");
    let fake = tokio::time::timeout(
        Duration::from_secs(30),
        host.provider("fake", "o", &fake_settings(&state)),
    )
    .await
    .expect("the fake starts while another driver's plugin hangs")
    .unwrap();
    assert_eq!(fake.kind(), "fake");
    assert!(fake.machines("lab").await.unwrap().is_empty());
    let e = tokio::time::timeout(Duration::from_secs(30), hang)
        .await
        .expect("the hanging plugin's start ends")
        .unwrap()
        .map(|_| panic!("a plugin that never answers was taken"))
        .unwrap_err();
    let words = e.to_string();
    assert!(words.contains("soul-cloud-hang"), "{words}");
    assert!(words.contains("did not start within"), "{words}");
    assert!(e.is_retryable(), "{e}");
    assert!(host.running("hang").is_empty());
    // The fake is kept, and the hanging driver fails again the same way.
    host.provider("fake", "o", &fake_settings(&state))
        .await
        .unwrap();
    assert_eq!(host.running("fake")[0].starts(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_start_of_one_plugin_holds_no_other_providers_start() {
    let test = "a_slow_start_of_one_plugin_holds_no_other_providers_start";
    let Some(built) = support::plugin_dir(test) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (began, go) = (dir.path().join("began"), dir.path().join("go"));
    // The fake, whose start for owner "slow" waits for the test's word: one plugin program, two
    // providers (by owner), each started on its own.
    script(
        dir.path(),
        "soul-cloud-fake",
        &format!(
            "if [ \"$ORCA_PLUGIN_OWNER\" = slow ]; then\n  touch {}\n  while [ ! -e {} ]; do sleep 0.05; done\nfi\nexec {} \"$@\"\n",
            began.display(),
            go.display(),
            built.join("soul-cloud-fake").display()
        ),
    );
    let host = Arc::new(keeper::plugins::host([dir.path().to_path_buf(), built]));
    let slow = tokio::spawn({
        let host = host.clone();
        let settings = fake_settings(&dir.path().join("slow.json"));
        async move { host.provider("fake", "slow", &settings).await.map(|_| ()) }
    });
    wait_for(&began).await;
    let fake = tokio::time::timeout(
        Duration::from_secs(30),
        host.provider("fake", "o", &fake_settings(&dir.path().join("fake.json"))),
    )
    .await
    .expect("the fake starts while another plugin's start waits")
    .unwrap();
    assert_eq!(fake.kind(), "fake");
    std::fs::write(&go, "").unwrap();
    tokio::time::timeout(Duration::from_secs(30), slow)
        .await
        .expect("the slow plugin starts once let go")
        .unwrap()
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_or_plugin_folder_others_may_write_is_refused_naming_it() {
    let test = "a_plugin_or_plugin_folder_others_may_write_is_refused_naming_it";
    let Some(built) = support::plugin_dir(test) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join("plugins");
    std::fs::create_dir(&plugins).unwrap();
    chmod(&plugins, 0o755);
    let program = script(
        &plugins,
        "soul-cloud-fake",
        &format!("exec {} \"$@\"\n", built.join("soul-cloud-fake").display()),
    );
    let settings = fake_settings(&dir.path().join("cloud.json"));
    let start = || async {
        let host = keeper::plugins::host([plugins.clone()]);
        host.provider("fake", "o", &settings).await.map(|_| host)
    };
    let host = start().await.unwrap();
    let running = host.running("fake");
    assert_eq!(running[0].command().path(), program, "the copy ran");

    chmod(&program, 0o777);
    let e = start().await.map(|_| ()).unwrap_err().to_string();
    assert!(e.contains(&program.display().to_string()), "{e}");
    assert!(e.contains("mode 777"), "{e}");

    chmod(&program, 0o755);
    chmod(&plugins, 0o777);
    let e = start().await.map(|_| ()).unwrap_err().to_string();
    assert!(
        e.contains(&format!("{} is", plugins.display())),
        "the folder is named: {e}"
    );
    chmod(&plugins, 0o755);
    start().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn providers_of_one_driver_and_owner_with_other_settings_keep_a_plugin_each() {
    let test = "providers_of_one_driver_and_owner_with_other_settings_keep_a_plugin_each";
    let Some(built) = support::plugin_dir(test) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let starts = dir.path().join("starts");
    // The fake, counting its starts.
    script(
        dir.path(),
        "soul-cloud-fake",
        &format!(
            "echo started >> {}\nexec {} \"$@\"\n",
            starts.display(),
            built.join("soul-cloud-fake").display()
        ),
    );
    let host = keeper::plugins::host([dir.path().to_path_buf()]);
    // Two regions of one cloud, as two EC2 regions or two Hetzner projects are.
    let a = fake_settings(&dir.path().join("a.json"));
    let b = fake_settings(&dir.path().join("b.json"));
    for settings in [&a, &b, &a, &b] {
        let p = host.provider("fake", "o", settings).await.unwrap();
        assert!(p.machines("lab").await.unwrap().is_empty());
    }
    let started = std::fs::read_to_string(&starts).unwrap();
    assert_eq!(started.lines().count(), 2, "one plugin each: {started}");
    assert_eq!(host.running("fake").len(), 2);
}

/// A plugin no step holds is let go when its idle time is over at the next ask of any plugin,
/// not only at the next start: a plugin of replaced settings does not live as long as keeper.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_plugin_is_let_go_at_the_next_ask_without_another_start() {
    let test = "an_idle_plugin_is_let_go_at_the_next_ask_without_another_start";
    let Some(built) = support::plugin_dir(test) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let host = keeper::plugins::host([built]).keep_idle(Duration::ZERO);
    let a = fake_settings(&dir.path().join("a.json"));
    let b = fake_settings(&dir.path().join("b.json"));
    let held = host.provider("fake", "o", &a).await.unwrap();
    host.provider("fake", "o", &b).await.unwrap();
    assert_eq!(host.running("fake").len(), 2);
    // a's plugin again, kept: no start, and b's, idle, is let go.
    let again = host.provider("fake", "o", &a).await.unwrap();
    assert!(std::ptr::addr_eq(Arc::as_ptr(&held), Arc::as_ptr(&again)));
    assert_eq!(host.running("fake").len(), 1, "b's plugin is let go");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_of_replaced_settings_is_let_go_once_no_step_holds_it_and_calls_are_bounded() {
    let test =
        "a_plugin_of_replaced_settings_is_let_go_once_no_step_holds_it_and_calls_are_bounded";
    let Some(built) = support::plugin_dir(test) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // Kept for no time once unused: what an hour of not being asked for does by default.
    let host = keeper::plugins::host([built]).keep_idle(Duration::ZERO);
    let (a, b, c) = (
        fake_settings(&dir.path().join("a.json")),
        fake_settings(&dir.path().join("b.json")),
        fake_settings(&dir.path().join("c.json")),
    );
    let held = host.provider("fake", "o", &a).await.unwrap();
    host.provider("fake", "o", &b).await.unwrap();
    assert_eq!(host.running("fake").len(), 2, "a step holds a's plugin");
    drop(held);
    // A credential rotated from b to c: b's plugin, and a's now unheld, are let go.
    let now = host.provider("fake", "o", &c).await.unwrap();
    let running = host.running("fake");
    assert_eq!(running.len(), 1);
    assert!(
        std::ptr::addr_eq(Arc::as_ptr(&now), Arc::as_ptr(&running[0])),
        "the plugin kept is c's"
    );
    let shown = format!("{:?}", running[0].command());
    // keeper bounds every call of its plugins, not only their start.
    assert!(
        shown.contains(&format!(
            "call_timeout: Some({:?})",
            keeper::plugins::DEFAULT_CALL_TIMEOUT
        )),
        "{shown}"
    );
    let shown = format!("{host:?}");
    assert!(
        shown.contains("fake/o") && !shown.contains("json"),
        "{shown}"
    );
}
