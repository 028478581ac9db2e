//! The core's shared files: the atomic write leaves the old content or the new, never a part and
//! never its temporary file; the lock refuses a second holder, and its holder learns when the lock
//! file was removed or replaced (a newcomer may hold the lock then).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use orca_machines::fs::{
    create_private_dir, remove_stale_temps, remove_stale_temps_in, write_atomic, write_atomic_mode,
    write_atomic_with, FileLock, FsError,
};

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

#[cfg(unix)]
fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn an_atomic_write_replaces_the_file_owner_only_and_leaves_no_temporary_file() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("rec.json");
    write_atomic(&p, b"old").unwrap();
    write_atomic(&p, b"new").unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), b"new");
    assert_eq!(names(dir.path()), ["rec.json"]);
    #[cfg(unix)]
    {
        assert_eq!(mode(&p), 0o600, "a record names machines: owner-only");
        let public = dir.path().join("key.pub");
        write_atomic_mode(&public, b"ssh-ed25519 AAAA", 0o644).unwrap();
        assert_eq!(mode(&public), 0o644, "the mode the caller chose, exactly");
        write_atomic(&public, b"ssh-ed25519 BBBB").unwrap();
        assert_eq!(mode(&public), 0o600, "each write sets its mode again");
    }
}

#[test]
fn a_write_that_fails_leaves_the_old_content_and_no_temporary_file() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("rec.json");
    write_atomic(&p, b"old").unwrap();
    let e = write_atomic_with(&p, 0o600, |f| {
        f.write_all(b"half of the new")?;
        Err(std::io::Error::other("the serializer failed"))
    })
    .unwrap_err();
    assert!(
        matches!(&e, FsError::Io { op: "write", .. }),
        "the step is named: {e}"
    );
    assert!(e.to_string().contains(".rec.json.tmp-"), "{e}");
    assert!(e.to_string().contains("the serializer failed"), "{e}");
    assert_eq!(std::fs::read(&p).unwrap(), b"old");
    assert_eq!(
        names(dir.path()),
        ["rec.json"],
        "the temporary file is gone"
    );
}

#[test]
fn a_rename_that_fails_leaves_the_target_and_no_temporary_file() {
    let dir = tempfile::tempdir().unwrap();
    // A folder with a file in it: no file can be renamed over it.
    let p = dir.path().join("rec.json");
    std::fs::create_dir(&p).unwrap();
    std::fs::write(p.join("inside"), b"x").unwrap();
    let e = write_atomic(&p, b"new").unwrap_err();
    assert!(matches!(&e, FsError::Io { op: "rename", .. }), "{e}");
    assert_eq!(e.path(), p, "the error names the target");
    assert_eq!(names(dir.path()), ["rec.json"]);
    assert_eq!(std::fs::read(p.join("inside")).unwrap(), b"x");
}

#[test]
fn a_write_into_a_missing_folder_names_the_temporary_file() {
    let dir = tempfile::tempdir().unwrap();
    let e = write_atomic(dir.path().join("no/such/rec.json"), b"x").unwrap_err();
    assert!(matches!(&e, FsError::Io { op: "create", .. }), "{e}");
    assert!(e.to_string().contains("no/such/.rec.json.tmp-"), "{e}");
}

#[cfg(unix)]
#[test]
fn a_symbolic_link_at_the_target_is_replaced_never_followed() {
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, b"precious").unwrap();
    let p = dir.path().join("rec.json");
    std::os::unix::fs::symlink(&victim, &p).unwrap();
    write_atomic(&p, b"record").unwrap();
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    assert!(std::fs::symlink_metadata(&p).unwrap().is_file());
    assert_eq!(std::fs::read(&p).unwrap(), b"record");
}

#[test]
fn stale_temporary_files_of_a_crashed_writer_are_removed_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("rec.json");
    write_atomic(&p, b"kept").unwrap();
    // Above Linux's largest process id: a crashed writer's, never this process's.
    let stale = [".rec.json.tmp-4194305", ".rec.json.tmp-4194305.0badcafe"];
    let kept = [
        ".rec.json.tmp-notes",
        ".rec.json.tmp-12.zz",
        "rec.json.bak",
        ".other.json.tmp-4194305",
    ];
    for n in stale.iter().chain(&kept) {
        std::fs::write(dir.path().join(n), b"{half").unwrap();
    }
    let mut removed = remove_stale_temps(&p).unwrap();
    removed.sort();
    let want: Vec<PathBuf> = stale.iter().map(|n| dir.path().join(n)).collect();
    assert_eq!(removed, want);
    let mut left = kept.map(String::from).to_vec();
    left.push("rec.json".into());
    left.sort();
    assert_eq!(names(dir.path()), left);
    assert_eq!(std::fs::read(&p).unwrap(), b"kept");

    // The folder-wide form takes every file's leftovers, and still nothing else.
    let removed = remove_stale_temps_in(dir.path()).unwrap();
    assert_eq!(removed, [dir.path().join(".other.json.tmp-4194305")]);
    assert_eq!(
        names(dir.path()),
        [
            ".rec.json.tmp-12.zz",
            ".rec.json.tmp-notes",
            "rec.json",
            "rec.json.bak"
        ]
    );
}

#[cfg(unix)]
#[test]
fn a_private_folder_is_owner_only() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("a/b");
    create_private_dir(&home).unwrap();
    assert_eq!(mode(&home), 0o700);
    create_private_dir(&home).unwrap();
}

/// A folder or lock file open to other users, or of another user, is refused: whoever else may
/// write into the folder could replace the files kept there, and whoever may open the lock file
/// could hold its lock forever.
#[cfg(unix)]
#[test]
fn a_folder_or_lock_file_another_user_may_write_or_owns_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let set = |p: &Path, m: u32| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
    };
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    set(&shared, 0o777);
    let e = create_private_dir(&shared).unwrap_err();
    assert!(matches!(e, FsError::NotPrivate { .. }), "{e:?}");
    assert!(
        e.to_string().contains("shared") && e.to_string().contains("777"),
        "{e}"
    );
    assert_eq!(mode(&shared), 0o777, "left as it was");
    set(&shared, 0o755);
    create_private_dir(&shared).unwrap();

    let lock = dir.path().join("rec.json.lock");
    std::fs::write(&lock, b"").unwrap();
    set(&lock, 0o644);
    let e = FileLock::try_lock(&lock).unwrap_err();
    assert!(matches!(e, FsError::NotPrivate { .. }), "{e:?}");
    assert!(
        e.to_string().contains("rec.json.lock") && e.to_string().contains("644"),
        "{e}"
    );
    // The group's bits are left to the administrator (a volume a group shares).
    set(&lock, 0o660);
    drop(FileLock::try_lock(&lock).unwrap());
    set(&lock, 0o600);
    drop(FileLock::try_lock(&lock).unwrap());

    // Ownership can only be given away by root.
    if runs_as_root() {
        std::os::unix::fs::chown(&lock, Some(65534), Some(65534)).unwrap();
        let e = FileLock::try_lock(&lock).unwrap_err();
        assert!(e.to_string().contains("another user (uid 65534"), "{e}");
        let theirs = dir.path().join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
        let e = create_private_dir(&theirs).unwrap_err();
        assert!(e.to_string().contains("another user (uid 65534"), "{e}");
    }
}

/// Whether this process runs as root, read from a file it makes (it owns what it makes).
#[cfg(unix)]
fn runs_as_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("mine");
    std::fs::write(&f, b"").unwrap();
    std::fs::metadata(&f).unwrap().uid() == 0
}

#[test]
fn a_held_lock_is_refused_to_a_second_opener_naming_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = FileLock::path_for(dir.path().join("rec.json"));
    let first = FileLock::try_lock(&path).unwrap();
    let e = FileLock::try_lock(&path).unwrap_err();
    assert!(e.is_busy(), "{e}");
    assert_eq!(e.path(), path);
    assert!(e.to_string().contains("rec.json.lock"), "{e}");
    let io: std::io::Error = FileLock::try_lock(&path).unwrap_err().into();
    assert_eq!(io.kind(), std::io::ErrorKind::WouldBlock);
    let orca = FileLock::try_lock(&path).unwrap_err().into_error();
    assert!(orca.to_string().contains("rec.json.lock"), "{orca}");
    first.still_held().unwrap();
    drop(first);
    let again = FileLock::try_lock(&path).unwrap();
    again.still_held().unwrap();
}

/// Another thread of the holder's process starts a child (fork, then exec) while the lock is held:
/// until its exec, the child holds a copy of every descriptor, the lock file's too. The holder lets
/// go in that window and takes the lock again: it must be free, not kept by the child's copy.
///
/// The child is caught between its fork and its exec by reading its executable in /proc (still this
/// test's binary); only a retake during which the child stayed unexec'd counts, and three must.
#[cfg(target_os = "linux")]
#[test]
fn a_lock_let_go_is_free_while_a_child_forked_meanwhile_has_not_exec_d_yet() {
    use std::sync::mpsc;

    let dir = tempfile::tempdir().unwrap();
    let path = FileLock::path_for(dir.path().join("rec.json"));
    let me = std::fs::read_link("/proc/self/exe").unwrap();
    let (go, go_rx) = mpsc::channel::<()>();
    let (done_tx, done) = mpsc::channel::<bool>();
    let (tid_tx, tid) = mpsc::channel();
    let spawner = std::thread::spawn(move || {
        // "<pid>/task/<tid>": the folder whose `children` lists the children this thread starts.
        tid_tx
            .send(std::fs::read_link("/proc/thread-self").unwrap())
            .unwrap();
        // About 1 MB of arguments: the exec copies them before it drops the child's descriptors,
        // which keeps the child between its fork and its exec long enough to be seen there.
        let args = vec!["x".repeat(4096); 256];
        for () in go_rx {
            let ran = std::process::Command::new("true").args(&args).status();
            done_tx.send(ran.is_ok_and(|s| s.success())).unwrap();
        }
    });
    let children = Path::new("/proc")
        .join(tid.recv().unwrap())
        .join("children");
    let unexecd =
        |pid: &str| std::fs::read_link(format!("/proc/{pid}/exe")).ok() == Some(me.clone());

    let mut counted = 0;
    for _ in 0..1000 {
        let held = FileLock::try_lock(&path).unwrap();
        go.send(()).unwrap();
        let caught = loop {
            let pids = std::fs::read_to_string(&children).unwrap_or_default();
            if let Some(pid) = pids.split_whitespace().find(|p| unexecd(p)) {
                break Some(pid.to_string());
            }
            if let Ok(ran) = done.try_recv() {
                assert!(ran);
                break None;
            }
        };
        drop(held);
        let again = FileLock::try_lock(&path);
        if let Some(pid) = caught {
            if unexecd(&pid) {
                counted += 1;
                let again = again.expect("the lock was let go while a child had a copy of it");
                again.still_held().unwrap();
            }
            assert!(done.recv().unwrap());
        }
        if counted == 3 {
            break;
        }
    }
    drop(go);
    spawner.join().unwrap();
    assert_eq!(
        counted, 3,
        "no child was seen between its fork and its exec"
    );
}

#[test]
fn a_removed_lock_file_is_seen_by_its_holder_and_a_newcomer_cannot_make_it_pass() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rec.json.lock");
    let holder = FileLock::try_lock(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    let e = holder.still_held().unwrap_err();
    assert!(e.is_replaced(), "{e}");
    assert!(
        e.to_string().contains("rec.json.lock") && e.to_string().contains("removed"),
        "{e}"
    );
    // A newcomer now locks a new file at the same path: the old holder must stop, not act beside it.
    let newcomer = FileLock::try_lock(&path).unwrap();
    newcomer.still_held().unwrap();
    let e = holder.still_held().unwrap_err();
    assert!(
        e.is_replaced() && e.to_string().contains("replaced by another file"),
        "{e}"
    );
    // And the newcomer's lock is a real one: a third opener is refused.
    assert!(FileLock::try_lock(&path).unwrap_err().is_busy());
}

#[test]
fn a_lock_file_renamed_over_is_seen_by_its_holder() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rec.json.lock");
    let holder = FileLock::try_lock(&path).unwrap();
    let other = dir.path().join("other");
    std::fs::write(&other, b"").unwrap();
    std::fs::rename(&other, &path).unwrap();
    assert!(holder.still_held().unwrap_err().is_replaced());
}

#[cfg(unix)]
#[test]
fn a_symbolic_link_at_the_lock_path_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("elsewhere");
    let path = dir.path().join("rec.json.lock");
    std::os::unix::fs::symlink(&target, &path).unwrap();
    let e = FileLock::try_lock(&path).unwrap_err();
    assert!(e.to_string().contains("symbolic link"), "{e}");
    assert!(!target.exists(), "nothing was made through the link");
    let folder = dir.path().join("a-folder.lock");
    std::fs::create_dir(&folder).unwrap();
    assert!(FileLock::try_lock(&folder).is_err());
}

#[tokio::test(flavor = "current_thread")]
async fn the_async_wait_takes_the_lock_once_released_and_lets_other_tasks_run() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rec.json.lock");
    let held = FileLock::try_lock(&path).unwrap();
    let waiter = tokio::spawn({
        let path = path.clone();
        async move { FileLock::lock(&path).await }
    });
    // This task runs while the waiter waits, on the runtime's one thread.
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert!(!waiter.is_finished(), "the lock is held: the waiter waits");
    drop(held);
    let taken = waiter.await.unwrap().unwrap();
    taken.still_held().unwrap();
    assert!(FileLock::try_lock(&path).unwrap_err().is_busy());
}

#[test]
fn the_blocking_wait_waits_for_the_holder_to_let_go() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rec.json.lock");
    let held = FileLock::try_lock(&path).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = {
        let path = path.clone();
        std::thread::spawn(move || {
            let taken = FileLock::lock_blocking(&path);
            let _ = tx.send(());
            taken
        })
    };
    assert!(
        rx.recv_timeout(Duration::from_millis(50)).is_err(),
        "the lock is held: the waiter waits"
    );
    drop(held);
    let taken = waiter.join().unwrap().unwrap();
    taken.still_held().unwrap();
}

#[test]
fn the_blocking_wait_takes_a_free_lock_and_a_removed_one_anew() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rec.json.lock");
    let first = FileLock::lock_blocking(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    let second = FileLock::lock_blocking(&path).unwrap();
    second.still_held().unwrap();
    assert!(first.still_held().is_err());
}

/// The variable that makes this test binary the other process of
/// [`a_lock_held_by_another_process_is_refused`].
const CHILD_ENV: &str = "ORCA_FS_TEST_LOCK";

#[test]
fn a_lock_held_by_another_process_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rec.json.lock");
    let other = |path: &Path| {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                &orca_fakes::alone::test_name(module_path!(), "other_process_takes_the_lock"),
                "--ignored",
                "--nocapture",
            ])
            .env(CHILD_ENV, path)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let held = FileLock::try_lock(&path).unwrap();
    let said = other(&path);
    assert!(
        said.contains("BUSY") && said.contains("rec.json.lock"),
        "{said}"
    );
    drop(held);
    let said = other(&path);
    assert!(said.contains("TOOK"), "{said}");
}

/// Run by [`a_lock_held_by_another_process_is_refused`] as the other process.
#[test]
#[ignore = "the other process of a_lock_held_by_another_process_is_refused"]
fn other_process_takes_the_lock() {
    let path =
        std::env::var_os(CHILD_ENV).expect("run by a_lock_held_by_another_process_is_refused");
    match FileLock::try_lock(&path) {
        Ok(_) => println!("TOOK"),
        Err(e) if e.is_busy() => println!("BUSY: {e}"),
        Err(e) => println!("FAILED: {e}"),
    }
}

/// A folder inside one that other users may write is refused, whether it exists or is to be made:
/// they could move it away and put their own in its place. The sticky bit (as /tmp has it) keeps
/// others from moving what they do not own, so such a folder above is accepted.
#[cfg(unix)]
#[test]
fn a_private_folder_inside_one_others_may_write_is_refused_unless_sticky() {
    use std::os::unix::fs::PermissionsExt;
    let set = |p: &Path, m: u32| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
    };
    let dir = tempfile::tempdir().unwrap();
    let open = dir.path().join("open");
    std::fs::create_dir(&open).unwrap();
    set(&open, 0o777);
    let home = open.join("home");
    let e = create_private_dir(home.join("deeper")).unwrap_err();
    assert!(matches!(e, FsError::NotPrivate { .. }), "{e:?}");
    assert!(
        e.to_string().contains(&open.display().to_string()) && e.to_string().contains("777"),
        "{e}"
    );
    assert!(!home.exists(), "nothing is made inside it");
    std::fs::create_dir(&home).unwrap();
    set(&home, 0o700);
    let e = create_private_dir(&home).unwrap_err();
    assert!(matches!(e, FsError::NotPrivate { .. }), "{e:?}");
    // A link to it from a private folder leads there all the same.
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&home, &link).unwrap();
    let e = create_private_dir(&link).unwrap_err();
    assert!(matches!(e, FsError::NotPrivate { .. }), "{e:?}");
    set(&open, 0o1777);
    create_private_dir(&home).unwrap();
    create_private_dir(&link).unwrap();
    create_private_dir(home.join("deeper")).unwrap();
    assert_eq!(mode(&home.join("deeper")), 0o700);
    // A `..` is read as the folder it leads to, not as a folder it passes through.
    set(&open, 0o777);
    let up = dir.path().join("open/../mine");
    create_private_dir(&up).unwrap();
    assert_eq!(mode(&dir.path().join("mine")), 0o700);
}
