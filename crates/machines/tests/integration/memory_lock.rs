//! The in-memory provider's state file is shared between processes under a file lock: while another
//! process holds it, a provider call waits for it without blocking the runtime it runs on.

use std::sync::mpsc;
use std::time::Duration;

use orca_machines::fs::FileLock;
use orca_machines::memory::MemoryCloud;
use orca_machines::{MachineSpec, Provider};

/// Runs `body` on a current-thread runtime of its own thread and answers its result, or `None` when
/// it did not end within `limit` (the runtime's only thread is stuck).
fn on_one_thread<T: Send + 'static>(
    limit: Duration,
    body: impl std::future::Future<Output = T> + Send + 'static,
) -> Option<T> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _ = tx.send(rt.block_on(body));
    });
    rx.recv_timeout(limit).ok()
}

/// Takes the state file's lock as another process would: its own open file description.
fn hold(lock: &std::path::Path) -> std::fs::File {
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(lock)
        .expect("the state file's lock file exists once the cloud is opened");
    f.try_lock().expect("nobody holds it yet");
    f
}

#[test]
fn a_held_state_lock_stalls_no_unrelated_task_and_the_call_goes_on_once_released() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.json");
    let cloud = MemoryCloud::persistent(&path).unwrap();
    let lock = FileLock::path_for(&path);
    let p = cloud.provider("stack-1").unwrap();
    let got = on_one_thread(Duration::from_secs(30), async move {
        let held = hold(&lock);
        let call = tokio::spawn(async move {
            p.create(&MachineSpec::new("w-1", "amd64-small", "zone-a", "lab"))
                .await
        });
        let unrelated = tokio::spawn(async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            "answered"
        });
        let unrelated = unrelated.await.unwrap();
        let waited = !call.is_finished();
        drop(held);
        let made = call.await.unwrap();
        (unrelated, waited, made.map(|c| c.machine().map(|m| m.name)))
    });
    let (unrelated, waited, made) = got.expect(
        "the runtime stalled: a provider call blocked its only thread while another held the state file's lock",
    );
    assert_eq!(unrelated, "answered");
    assert!(waited, "the call waits while the lock is held");
    assert_eq!(made, Ok(Some("w-1".to_string())));
    // The machine is in the file: another cloud on it sees it.
    let other = MemoryCloud::persistent(&path).unwrap();
    assert_eq!(other.all_machines().len(), 1);
}

#[test]
fn opening_a_cloud_waits_for_the_lock_without_stalling_and_the_sync_helpers_still_work() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.json");
    MemoryCloud::persistent(&path).unwrap();
    // A writer that crashed before its rename left its temporary file.
    let torn = dir.path().join(".state.json.tmp-4194305.0badcafe");
    std::fs::write(&torn, b"{half").unwrap();
    let lock = FileLock::path_for(&path);
    let opened = {
        let path = path.clone();
        on_one_thread(Duration::from_secs(30), async move {
            let held = hold(&lock);
            let open = tokio::spawn(async move { MemoryCloud::open(&path).await });
            let unrelated = tokio::spawn(async { "answered" }).await.unwrap();
            tokio::time::sleep(Duration::from_millis(20)).await;
            let waited = !open.is_finished();
            drop(held);
            (unrelated, waited, open.await.unwrap())
        })
    };
    let (unrelated, waited, cloud) = opened.expect("the runtime stalled while opening the cloud");
    assert_eq!((unrelated, waited), ("answered", true));
    let cloud = cloud.unwrap();
    assert_eq!(cloud.state_lock_path(), Some(FileLock::path_for(&path)));
    assert!(
        !torn.exists(),
        "the crashed writer's temporary file is removed"
    );
    // The synchronous helpers (a test's or an operator's) share the same lock and file.
    cloud.set_stock("amd64-small", "zone-a", 0);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let other = MemoryCloud::persistent(&path)
        .unwrap()
        .provider("s")
        .unwrap();
    let got = rt
        .block_on(other.create(&MachineSpec::new("w-1", "amd64-small", "zone-a", "lab")))
        .unwrap();
    assert!(
        matches!(got, orca_machines::Created::NoStock { .. }),
        "{got:?}"
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "the state file names machines: owner-only");
    }
}

/// A read by name (what a program reads after a lost create) waits for a held state-file lock
/// without stalling the runtime, on a cloud with a visibility window too (whose length it reads
/// from the state as well), and answers once the lock is let go.
#[test]
fn a_read_by_name_waits_for_a_held_lock_without_stalling() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.json");
    let cloud = MemoryCloud::persistent(&path).unwrap();
    cloud.set_visibility_delay(Duration::from_millis(30));
    let lock = FileLock::path_for(&path);
    let p = cloud.provider("stack-1").unwrap();
    let got = on_one_thread(Duration::from_secs(30), async move {
        let held = hold(&lock);
        let call = tokio::spawn(async move { p.machine_named("lab", "w-1").await });
        let unrelated = tokio::spawn(async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            "answered"
        });
        let unrelated = unrelated.await.unwrap();
        let waited = !call.is_finished();
        drop(held);
        (unrelated, waited, call.await.unwrap())
    });
    let (unrelated, waited, found) =
        got.expect("the runtime stalled: a read by name blocked its only thread");
    assert_eq!((unrelated, waited), ("answered", true));
    assert_eq!(found.unwrap(), None);
}

/// The state file's lock is `<file>.lock`, as every lock of the library: a state file `cloud.json`
/// and a record file `cloud` (locked at `cloud.lock`) beside it have a lock each, and a process that
/// holds the record's can still change the cloud (before, both locks were `cloud.lock`, and such a
/// process waited on its own lock for ever).
#[test]
fn the_state_file_and_a_file_named_as_it_without_extension_have_a_lock_each() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cloud.json");
    let cloud = MemoryCloud::persistent(&path).unwrap();
    let record = FileLock::try_lock(FileLock::path_for(dir.path().join("cloud"))).unwrap();
    let state = cloud.state_lock_path().unwrap();
    assert_eq!(state, dir.path().join("cloud.json.lock"));
    let held = FileLock::try_lock(&state).expect("the state's lock is not the record's");
    drop((held, record));
}
