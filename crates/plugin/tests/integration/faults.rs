//! The plugin client's own promises: a dead plugin is a passing failure and is started again; a
//! plugin of another protocol version, one that cannot be started and one whose settings are bad
//! are refused clearly; secrets handed to a plugin never show in Debug.

use crate::common;

use orca_machines::memory::MemoryCloud;
use orca_machines::{Created, ErrorKind, MachineSpec, Provider, Settings};
use orca_plugin::fake::PROTOCOL_VERSION_ENV;
use orca_plugin::proto::fake::fake_control_client::FakeControlClient;
use orca_plugin::proto::fake::{InjectRequest, RequestsRequest};
use orca_plugin::{PluginCommand, PluginProvider, CUT_MARK, MAX_STDERR_LINE, PROTOCOL_VERSION};

fn fake_on(state: &std::path::Path, owner: &str) -> PluginCommand {
    PluginCommand::new(common::FAKE, owner).setting(orca::FAKE_STATE_ENV, state.to_str().unwrap())
}

fn spec(name: &str) -> MachineSpec {
    MachineSpec::new(name, "amd64-small", "zone-a", "lab")
}

fn kill(pid: u32) {
    let status = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_plugin_fails_the_call_in_flight_as_passing_and_is_started_again() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("cloud.json");
    let p = PluginProvider::start(fake_on(&state, "stack-1"))
        .await
        .unwrap();
    let first = p.create(&spec("lab-1")).await.unwrap().machine().unwrap();
    let pid = p.pid().await.unwrap();

    // The next create waits in the plugin far longer than this test lives: it is in flight when
    // the plugin is killed.
    let mut console = FakeControlClient::new(p.channel().await.unwrap());
    let refused = console
        .inject(InjectRequest {
            operation: "create".into(),
            fault_json: r#"{"latency": {"secs": 3600, "nanos": 0}}"#.into(),
            times: 1,
        })
        .await
        .unwrap()
        .into_inner()
        .refused;
    assert!(refused.is_empty(), "{refused}");
    let served = |mut c: FakeControlClient<tonic::transport::Channel>| async move {
        c.requests(RequestsRequest {})
            .await
            .unwrap()
            .into_inner()
            .requests
    };
    let before = served(console.clone()).await;
    let p = std::sync::Arc::new(p);
    let in_flight = tokio::spawn({
        let p = p.clone();
        async move { p.create(&spec("lab-2")).await }
    });
    // The plugin is killed once the call is being served: the cloud has seen its request.
    while served(console.clone()).await == before {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    kill(pid);
    let e = in_flight.await.unwrap().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Transient, "{e}");
    assert!(e.is_retryable(), "{e}");
    assert!(!e.made_nothing(), "a create may have happened: {e}");
    assert!(e.to_string().contains("soul-cloud-fake"), "{e}");

    // The next call starts the plugin again, on the same cloud.
    let listed = p.machines("lab").await.unwrap();
    assert_eq!(
        listed.iter().map(|m| &m.id).collect::<Vec<_>>(),
        [&first.id]
    );
    assert_eq!(p.starts(), 2);
    assert_ne!(p.pid().await.unwrap(), pid);
    assert!(p.delete(&first.id).await.unwrap());
}

#[tokio::test]
async fn a_plugin_of_another_protocol_version_is_refused_naming_both() {
    let other = PROTOCOL_VERSION + 1;
    let command = PluginCommand::new(common::FAKE, "stack-1")
        .setting(PROTOCOL_VERSION_ENV, other.to_string());
    let e = PluginProvider::start(command).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unsupported, "{e}");
    assert!(e.made_nothing() && !e.is_retryable(), "{e}");
    let words = e.to_string();
    assert!(
        words.contains(&format!("protocol version {PROTOCOL_VERSION}"))
            && words.contains(&format!("version {other}")),
        "{words}"
    );
    assert!(words.contains("soul-cloud-fake"), "{words}");
}

#[tokio::test]
async fn a_missing_plugin_is_named() {
    let e = PluginProvider::start(PluginCommand::new("/nonexistent/soul-cloud-nimbus", ""))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidSettings, "{e}");
    assert!(
        e.to_string().contains("/nonexistent/soul-cloud-nimbus"),
        "{e}"
    );
}

#[tokio::test]
async fn a_plugin_without_its_settings_names_them_in_the_handshake() {
    let e = PluginProvider::start(PluginCommand::new(common::HETZNER, "stack-1"))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidSettings, "{e}");
    assert!(e.to_string().contains("HCLOUD_TOKEN"), "{e}");
}

#[tokio::test]
async fn settings_reach_the_plugin_and_never_show_in_debug() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("cloud.json");
    let secret = "hunter2-do-not-print";
    let settings = Settings::new()
        .with(orca::FAKE_STATE_ENV, state.to_str().unwrap())
        .with("ORCA_PLUGIN_FAKE_PAGE_SIZE", "2");
    let command = PluginCommand::new(common::FAKE, "stack-1")
        .settings(settings)
        .setting("HCLOUD_TOKEN", secret);
    let p = PluginProvider::start(command.clone()).await.unwrap();
    // The state file setting reached the child: what it made is in the file.
    let Created::Machine(m) = p.create(&spec("lab-1")).await.unwrap() else {
        panic!("no stock")
    };
    let seen = MemoryCloud::persistent(&state).unwrap().all_machines();
    assert_eq!(seen.iter().map(|m| &m.id).collect::<Vec<_>>(), [&m.id]);
    for shown in [format!("{p:?}"), format!("{command:?}"), format!("{p:#?}")] {
        assert!(!shown.contains(secret), "{shown}");
        assert!(shown.contains("HCLOUD_TOKEN"), "the names show: {shown}");
    }
    assert!(p.delete(&m.id).await.unwrap());
}

#[tokio::test]
async fn the_owner_and_driver_errors_cross_as_they_are() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("cloud.json");
    let a = PluginProvider::start(fake_on(&state, "stack-a"))
        .await
        .unwrap();
    let b = PluginProvider::start(fake_on(&state, "stack-b"))
        .await
        .unwrap();
    assert_eq!((a.kind(), a.owner()), ("fake", "stack-a"));
    let m = a.create(&spec("lab-1")).await.unwrap().machine().unwrap();
    let e = b.delete(&m.id).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotOwned, "{e}");
    assert!(e.made_nothing(), "{e}");
    let e = a
        .create(&MachineSpec::new(
            "Bad_Name",
            "amd64-small",
            "zone-a",
            "lab",
        ))
        .await
        .unwrap_err();
    match e {
        orca_machines::Error::InvalidSpec { field, .. } => assert_eq!(field, "name"),
        other => panic!("{other:?}"),
    }
    assert!(a.delete(&m.id).await.unwrap());
}

#[tokio::test]
async fn a_plugin_that_writes_garbage_is_a_passing_failure() {
    // `yes` writes lines on its stdout, where a plugin speaks HTTP/2.
    let e = PluginProvider::start(PluginCommand::new("/usr/bin/yes", ""))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Transient, "{e}");
    assert!(e.to_string().contains("/usr/bin/yes"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_that_hangs_past_the_call_timeout_is_a_passing_failure_and_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("cloud.json");
    // Long enough for the replacement plugin's first answer on a loaded machine; the hang is an hour.
    let command = fake_on(&state, "stack-1").call_timeout(std::time::Duration::from_secs(3));
    let p = PluginProvider::start(command).await.unwrap();
    let mut console = FakeControlClient::new(p.channel().await.unwrap());
    console
        .inject(InjectRequest {
            operation: "list".into(),
            fault_json: r#"{"latency": {"secs": 3600, "nanos": 0}}"#.into(),
            times: 1,
        })
        .await
        .unwrap();
    let e = p.machines("lab").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Transient, "{e}");
    assert!(!e.made_nothing(), "{e}");
    assert!(e.may_have_acted(), "{e}");
    assert!(e.to_string().contains("did not answer machines"), "{e}");
    assert!(e.to_string().contains("may have acted"), "{e}");
    assert!(p.machines("lab").await.unwrap().is_empty());
    assert_eq!(p.starts(), 2, "the hung plugin was replaced");
}

/// One call past its timeout does not break the calls still waiting on the same plugin: a create
/// in flight when a listing times out is answered, and the plugin is not started again for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_past_its_timeout_leaves_the_other_calls_in_flight_answered() {
    use std::time::Duration;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("cloud.json");
    let command = fake_on(&state, "stack-1").call_timeout(Duration::from_secs(12));
    let p = PluginProvider::start(command).await.unwrap();
    let mut console = FakeControlClient::new(p.channel().await.unwrap());
    for (operation, secs) in [("list", 3600), ("create", 9)] {
        console
            .inject(InjectRequest {
                operation: operation.into(),
                fault_json: format!(r#"{{"latency": {{"secs": {secs}, "nanos": 0}}}}"#),
                times: 1,
            })
            .await
            .unwrap();
    }
    // The listing times out at 12 s; the create, sent at 6 s, is answered at 15 s, within its own
    // 12 s. Each margin is 3 s or more, for a loaded machine: the create is still in flight 3 s past
    // the listing's timeout and answered 3 s before its own.
    let listing = p.machines("lab");
    let create = async {
        tokio::time::sleep(Duration::from_secs(6)).await;
        p.create(&spec("lab-1")).await
    };
    let (listed, created) = tokio::join!(listing, create);
    let e = listed.unwrap_err();
    assert!(e.to_string().contains("did not answer machines"), "{e}");
    let m = created.unwrap().machine().unwrap();
    assert_eq!(
        p.starts(),
        1,
        "the plugin was started again under the create"
    );
    assert!(p.delete(&m.id).await.unwrap());
}

/// A plugin that answers nothing while calls keep coming is let go at the second call in a row
/// that times out with no answer between them, though other calls still wait on it: those fail
/// at once, and the next call starts the plugin again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_that_answers_nothing_while_calls_keep_coming_is_let_go() {
    use std::time::Duration;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("cloud.json");
    let command = fake_on(&state, "stack-1").call_timeout(Duration::from_secs(6));
    let p = PluginProvider::start(command).await.unwrap();
    let mut console = FakeControlClient::new(p.channel().await.unwrap());
    console
        .inject(InjectRequest {
            operation: "list".into(),
            fault_json: r#"{"latency": {"secs": 3600, "nanos": 0}}"#.into(),
            times: 3,
        })
        .await
        .unwrap();
    // Sent at 0, 2 and 5 s: the first times out at 6 s (the second waiting), the second at 8 s (the
    // third waiting, until its own timeout at 11 s), which lets the plugin go under the third. Each
    // margin is 3 s or more, for a loaded machine.
    let after = |secs: f64| {
        let p = &p;
        async move {
            tokio::time::sleep(Duration::from_secs_f64(secs)).await;
            p.machines("lab").await.unwrap_err().to_string()
        }
    };
    let (first, second, third) = tokio::join!(after(0.0), after(2.0), after(5.0));
    assert!(first.contains("did not answer machines"), "{first}");
    assert!(second.contains("did not answer machines"), "{second}");
    assert!(third.contains("failed during machines"), "{third}");
    assert!(p.machines("lab").await.unwrap().is_empty());
    assert_eq!(p.starts(), 2, "the plugin was started again");
}

/// One call's stream that fails while the plugin serves others is that call's failure only: the
/// plugin is not let go under the calls still in flight (a create killed halfway may leave what it
/// made half made). A failing call with nothing else in flight lets it go, and the next call starts
/// it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_stream_fails_its_call_and_not_the_others_in_flight() {
    use orca_plugin::fake::BREAKS_ENV;
    use std::time::Duration;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("cloud.json");
    let command = fake_on(&state, "stack-1").setting(BREAKS_ENV, "Machines");
    let p = PluginProvider::start(command).await.unwrap();
    let mut console = FakeControlClient::new(p.channel().await.unwrap());
    console
        .inject(InjectRequest {
            operation: "create".into(),
            fault_json: r#"{"latency": {"secs": 4, "nanos": 0}}"#.into(),
            times: 1,
        })
        .await
        .unwrap();
    // The listing fails while the create waits in the plugin (4 s: however slow the machine).
    let listing = async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        p.machines("lab").await
    };
    let lab_1 = spec("lab-1");
    let (listed, created) = tokio::join!(listing, p.create(&lab_1));
    let e = listed.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Transient, "{e}");
    assert!(e.to_string().contains("failed during machines"), "{e}");
    let m = created
        .expect("the create in flight is served to its end")
        .machine()
        .unwrap();
    // Still running: the connection to it was kept.
    assert!(
        p.pid().await.is_some(),
        "the plugin was let go under the create"
    );
    assert_eq!(p.starts(), 1);
    // Nothing else in flight: the plugin is let go, and started again by the next call.
    assert!(p.machines("lab").await.is_err());
    assert_eq!(p.machine(&m.id).await.unwrap().unwrap().name, "lab-1");
    assert_eq!(p.starts(), 2, "the plugin was started again");
}

/// A setting's value that straddles the cut of a long line is hidden all the same: the part of it
/// before the cut is no more shown than the whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_cut_with_its_line_is_hidden_in_what_is_left() {
    use orca_plugin::host::{PluginHost, MASK};
    use std::os::unix::fs::PermissionsExt;
    use std::sync::{Arc, Mutex};
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("cloud.json");
    let secret = "tok-9f3Kq2Lm8Xz1Vb7Np4Rt";
    // The secret begins 10 bytes before the line's bound, so the cut keeps its first bytes only.
    let before = MAX_STDERR_LINE - CUT_MARK.len() - 10;
    // The fake behind a script that writes a long line first: found as the fake, which it serves.
    let script = dir.path().join("soul-cloud-fake");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh
{{ head -c {before} /dev/zero | tr '\\0' x; echo \"$SECRET_TAIL\"; }} >&2
\
             echo 'the next line' >&2\nexec {} \"$@\"\n",
            common::FAKE
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let host = PluginHost::new([dir.path().to_path_buf()]).lines({
        let seen = seen.clone();
        move |_, _, line| seen.lock().unwrap().push(line.to_string())
    });
    let settings = Settings::new()
        .with(orca::FAKE_STATE_ENV, state.to_str().unwrap())
        .with("SECRET_TAIL", secret);
    let p = host.provider("fake", "stack-1", &settings).await.unwrap();
    assert!(p.machines("lab").await.unwrap().is_empty());
    // A guard, not a measure: the lines cross on their own task.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !seen.lock().unwrap().iter().any(|l| l == "the next line") {
        assert!(
            std::time::Instant::now() < deadline,
            "the line after the long one never arrived"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let seen = seen.lock().unwrap();
    let long = seen.iter().find(|l| l.starts_with("xxxx")).unwrap();
    assert!(
        long.ends_with(&format!("{MASK}{CUT_MARK}")),
        "{}",
        &long[long.len() - 40..]
    );
    assert!(!long.contains(&secret[..4]), "{}", &long[long.len() - 40..]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_writing_a_huge_line_on_stderr_is_cut_at_the_bound_and_still_serves() {
    use std::os::unix::fs::PermissionsExt;
    use std::sync::{Arc, Mutex};
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("cloud.json");
    // 16 MiB without a line end on stderr, the line's end, one more line, then the fake itself.
    let script = dir.path().join("soul-cloud-noisy");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nhead -c 16777216 /dev/zero | tr '\\0' x >&2\n\
             echo ' end of the long line' >&2\necho 'the next line' >&2\nexec {} \"$@\"\n",
            common::FAKE
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let command = PluginCommand::new(&script, "stack-1")
        .setting(orca::FAKE_STATE_ENV, state.to_str().unwrap())
        .stderr_lines({
            let seen = seen.clone();
            move |line| seen.lock().unwrap().push(line.to_string())
        });
    let p = PluginProvider::start(command).await.unwrap();
    let m = p.create(&spec("lab-1")).await.unwrap().machine().unwrap();
    assert_eq!(p.machines("lab").await.unwrap().len(), 1);
    assert!(p.delete(&m.id).await.unwrap());
    // A guard, not a measure: the lines cross on their own task.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !seen.lock().unwrap().iter().any(|l| l == "the next line") {
        assert!(
            std::time::Instant::now() < deadline,
            "the line after the long one never arrived"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let seen = seen.lock().unwrap();
    let longest = seen.iter().map(String::len).max().unwrap();
    assert!(
        longest <= MAX_STDERR_LINE,
        "a line of {longest} bytes was handed on"
    );
    let long = seen.iter().find(|l| l.starts_with("xxxx")).unwrap();
    assert!(long.ends_with(CUT_MARK), "the cut line says so");
    assert!(
        !seen.iter().any(|l| l.contains("end of the long line")),
        "the rest of the cut line is dropped"
    );
    assert_eq!(p.starts(), 1);
}

/// A plugin program found under a driver's name that serves another kind (a misinstalled file: the
/// fake installed as `soul-cloud-hetzner`) is refused at its start, naming both kinds (before, it
/// was handed out as that driver, and its creates made nothing in any cloud).
#[tokio::test]
async fn a_plugin_that_serves_another_kind_than_its_name_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let state = dir.path().join("cloud.json");
    let program = dir.path().join("soul-cloud-hetzner");
    std::fs::copy(common::FAKE, &program).unwrap();
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
    let host = orca_plugin::PluginHost::new([dir.path().to_path_buf()]);
    let settings = Settings::new().with(orca::FAKE_STATE_ENV, state.to_str().unwrap());
    let e = match host.provider("hetzner", "stack-1", &settings).await {
        Ok(p) => panic!("handed out as hetzner: kind {}", p.kind()),
        Err(e) => e,
    };
    assert_eq!(e.kind(), ErrorKind::InvalidSettings, "{e}");
    assert!(
        e.to_string().contains("fake") && e.to_string().contains("hetzner"),
        "{e}"
    );
}

/// A setting may not name a variable the plugin's loader or C library reads, nor one the host
/// passes on itself: it is refused by name before the program starts (before, `LD_PRELOAD` reached
/// the child's environment and ld.so acted on it before the plugin could refuse the name).
#[tokio::test]
async fn a_setting_named_like_a_loader_or_host_variable_is_refused_before_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("cloud.json");
    for name in [
        "LD_PRELOAD",
        "DYLD_INSERT_LIBRARIES",
        "GCONV_PATH",
        "PATH",
        "SSL_CERT_FILE",
    ] {
        let lines: std::sync::Arc<std::sync::Mutex<Vec<String>>> = Default::default();
        let command = fake_on(&state, "o")
            .setting(name, "/nonexistent.so")
            .stderr_lines({
                let lines = lines.clone();
                move |l| lines.lock().unwrap().push(l.to_string())
            });
        let e = match PluginProvider::start(command).await {
            Ok(_) => panic!("{name}: started, stderr {:?}", lines.lock().unwrap()),
            Err(e) => e,
        };
        assert_eq!(e.kind(), ErrorKind::InvalidSettings, "{name}: {e}");
        assert!(e.to_string().contains(name), "{name}: {e}");
    }
}
