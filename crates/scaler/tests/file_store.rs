//! The file store: one process per record file, record files that cannot be read as a record
//! (refused, never read as an empty record), and what a writer that crashed mid-write leaves (ignored,
//! then removed).

mod support;

use orca_scaler::{FileStore, Key, Record, Store, StoreError};

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
