//! The file store: one process per record file, record files that cannot be read as a record
//! (refused, never read as an empty record), and what a writer that crashed mid-write leaves (ignored,
//! then removed).

use crate::support;

use orca_scaler::{FileStore, Key, Record, Role, Store, StoreError};

/// A second copy on the same record file is refused with a clear message.
#[tokio::test]
async fn a_second_copy_on_one_record_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rec.json");
    let one = FileStore::open(&path).unwrap();
    let e = FileStore::open(&path).unwrap_err();
    assert!(matches!(e, StoreError::Busy(_)), "{e:?}");
    assert!(e.to_string().contains("another orca-pool"), "{e}");
    assert!(e.to_string().contains("PostgreSQL"), "{e}");
    drop(one);
    FileStore::open(&path).unwrap();
}

/// A second copy that names the record file by another path (a link to the file, or to its
/// folder) is refused as well: the lock and the journal are those of the file itself, so the two
/// never keep one record apart with two locks and two journals.
#[tokio::test]
async fn a_second_copy_through_a_link_to_the_record_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().join("real");
    std::fs::create_dir(&real).unwrap();
    let path = real.join("rec.json");
    let one = FileStore::open(&path).unwrap();
    let linked_file = dir.path().join("linked.json");
    std::os::unix::fs::symlink(&path, &linked_file).unwrap();
    let linked_dir = dir.path().join("linked-dir");
    std::os::unix::fs::symlink(&real, &linked_dir).unwrap();
    for other in [linked_file.clone(), linked_dir.join("rec.json")] {
        let e = FileStore::open(&other).unwrap_err();
        assert!(
            matches!(e, StoreError::Busy(_)),
            "{}: {e:?}",
            other.display()
        );
    }
    drop(one);
    // Through the link, once free: the file itself is written, and the link stays a link.
    let mut s = FileStore::open(&linked_file).unwrap();
    let key = Key::new("memory", "o", "p");
    s.commit(&Record::new(key.clone()), &[]).await.unwrap();
    assert!(std::fs::symlink_metadata(&linked_file)
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(path.exists());
}

fn refused(path: &std::path::Path) -> String {
    match FileStore::open(path) {
        Ok(s) => panic!("{} was opened: {s:?}", path.display()),
        Err(StoreError::Failed(m)) => m,
        Err(e) => panic!("{e:?}"),
    }
}

#[test]
fn a_record_file_of_another_format_is_refused_and_kept() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rec.json");
    let other = r#"{"format": "orca-pool/9", "records": []}"#;
    std::fs::write(&path, other).unwrap();
    let m = refused(&path);
    assert!(
        m.contains("orca-pool/9") && m.contains("orca-pool/2"),
        "{m}"
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), other);
}

#[test]
fn a_record_file_that_is_not_a_record_is_refused_and_kept() {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in [
        ("garbage.json", "this is not json {"),
        ("other.json", r#"{"servers": [1, 2, 3]}"#),
        (
            "torn.json",
            r#"{"format": "orca-pool/2", "records": [{"key": "#,
        ),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        let m = refused(&path);
        assert!(m.contains("not an orca-pool record"), "{name}: {m}");
        assert!(m.contains(name), "{name}: the message names the file: {m}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text, "{name}");
    }
}

#[test]
fn an_unreadable_record_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    // A path that exists but cannot be read as a file (also for root, whom modes do not stop).
    let path = dir.path().join("rec.json");
    std::fs::create_dir(&path).unwrap();
    let m = refused(&path);
    assert!(m.contains("rec.json") && m.contains("read"), "{m}");
    assert!(path.is_dir(), "left as it was");
}

/// A process that crashed while writing leaves its temporary file (named after its process id, which
/// the next process does not have) beside the record, whole or torn. The next process reads the old
/// record, and removes the leftover when it opens the file; other files in the folder are kept.
#[tokio::test]
async fn a_crashed_writers_temp_file_is_ignored_and_removed_on_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rec.json");
    let key = Key::new("fake", "s1", "lab");
    {
        let mut s = FileStore::open(&path).unwrap();
        let mut r = Record::new(key.clone());
        r.next = 3;
        s.commit(&r, &[]).await.unwrap();
    }
    // Above Linux's largest process id: never this process's.
    let torn = dir.path().join(".rec.json.tmp-4194305");
    std::fs::write(&torn, r#"{"format": "orca-pool/2", "records": [{"key": "#).unwrap();
    let kept = [
        dir.path().join(".other.json.tmp-4194305"),
        dir.path().join(".rec.json.tmp-notes"),
        dir.path().join("rec.json.bak"),
    ];
    for k in &kept {
        std::fs::write(k, "x").unwrap();
    }
    let mut s = FileStore::open(&path).unwrap();
    assert_eq!(s.load(&key).await.unwrap().map(|r| r.next), Some(3));
    assert!(!torn.exists(), "the crashed writer's temp file is removed");
    for k in &kept {
        assert!(k.exists(), "{} is kept", k.display());
    }
}

/// Removing the lock file while a store is open lets a newcomer lock a new file at the same path
/// and open the same record. The first store sees it before its next pass and before its next
/// write: it stops for good naming the lock file, and writes nothing over the newcomer's record.
#[tokio::test]
async fn a_removed_lock_file_stops_the_store_before_its_next_pass_and_write() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rec.json");
    let lock = dir.path().join("rec.json.lock");
    let key = Key::new("fake", "s1", "lab");
    let mut first = FileStore::open(&path).unwrap();
    let mut r = Record::new(key.clone());
    r.next = 3;
    first.commit(&r, &[]).await.unwrap();
    assert_eq!(first.lead(&key).await.unwrap(), Role::Leader);
    first.still_held().unwrap();

    std::fs::remove_file(&lock).unwrap();
    let lost = |e: StoreError, what: &str| {
        assert!(matches!(e, StoreError::LostLeadership(_)), "{e:?}");
        let m = e.to_string();
        assert!(m.contains("rec.json.lock") && m.contains(what), "{m}");
    };
    lost(first.lead(&key).await.unwrap_err(), "removed");
    lost(first.still_held().unwrap_err(), "removed");

    // The newcomer gets in (a new lock file at the same path) and writes the record.
    let mut second = FileStore::open(&path).unwrap();
    r.next = 7;
    second.commit(&r, &[]).await.unwrap();
    let written = std::fs::read(&path).unwrap();

    lost(
        first.lead(&key).await.unwrap_err(),
        "replaced by another file",
    );
    r.next = 4;
    lost(
        first.commit(&r, &[]).await.unwrap_err(),
        "replaced by another file",
    );
    assert_eq!(
        std::fs::read(&path).unwrap(),
        written,
        "nothing written over"
    );
    assert_eq!(second.lead(&key).await.unwrap(), Role::Leader);
    second.still_held().unwrap();
}

/// A scaler whose lock file was removed makes nothing: its pass stops before any call.
#[tokio::test]
async fn a_scaler_whose_lock_file_was_removed_makes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (cloud, p) = support::cloud();
    let mut s = support::scaler(dir.path(), 2, &["amd64-small@zone-a"]);
    let r = s.pass(&p, cloud.now()).await;
    assert_eq!(r.serving, 2, "{:?}", r.actions);
    let before = support::ids(&cloud);

    std::fs::remove_file(dir.path().join("rec.json.lock")).unwrap();
    orca::Provider::delete(&p, &before[0]).await.unwrap();
    let r = s.pass(&p, cloud.now()).await;
    let stopped = r.stopped.clone().expect("the pass stopped");
    assert!(
        stopped.contains("lost the lead") && stopped.contains("rec.json.lock"),
        "{stopped}"
    );
    assert!(r.actions.is_empty(), "{:?}", r.actions);
    assert_eq!(support::ids(&cloud), before[1..].to_vec(), "nothing made");
    assert!(s.store().still_held().is_err());
}
