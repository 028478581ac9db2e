//! The file store's journal: a commit appends what changed to `<file>.journal`; a torn last entry is
//! dropped whole; a crash between a new snapshot and its new journal loses nothing; compaction keeps
//! every record; a journal that is not the record file's own (another file's, another version's, one
//! newer than its snapshot, a damaged one) is refused and kept.

use crate::support;

use std::path::{Path, PathBuf};

use orca::Timestamp;
use orca_scaler::{Entry, Event, FileStore, Key, Offering, Phase, Record, Store, StoreError};

pub(crate) fn key() -> Key {
    Key::new("fake", "s1", "lab")
}

pub(crate) fn at(secs: i64) -> Timestamp {
    chrono::DateTime::from_timestamp(1_800_000_000 + secs, 0).unwrap()
}

/// Records an intent to create machine `n` of `r`, as a pass does: the entry and its event.
pub(crate) fn intend(r: &mut Record, n: u64) -> Vec<Event> {
    let name = format!("lab-{n}");
    r.next = n + 1;
    r.entries.insert(
        name.clone(),
        Entry {
            name: name.clone(),
            offering: Offering {
                machine_type: "amd64-small".into(),
                location: "zone-a".into(),
            },
            phase: Phase::Creating,
            id: None,
            intent_at: at(n as i64),
            created_at: None,
            unhealthy_since: None,
            changed_at: at(n as i64),
            note: String::new(),
            leftovers: false,
        },
    );
    vec![Event::IntendCreate {
        name,
        offering: "amd64-small@zone-a".into(),
    }]
}

/// Records machine `n` of `r` as made.
pub(crate) fn made(r: &mut Record, n: u64) -> Vec<Event> {
    let name = format!("lab-{n}");
    let e = r.entries.get_mut(&name).unwrap();
    e.phase = Phase::Live;
    e.id = Some(format!("m-{n}"));
    e.created_at = Some(at(n as i64 + 1));
    vec![Event::Live {
        name,
        id: format!("m-{n}"),
        how: "created".into(),
    }]
}

/// Commits intents and outcomes of machines `from..to` to `s`, and returns the record after.
async fn commit_machines(s: &mut FileStore, r: &mut Record, from: u64, to: u64) {
    for n in from..to {
        let ev = intend(r, n);
        s.commit(r, &ev).await.unwrap();
        let ev = made(r, n);
        s.commit(r, &ev).await.unwrap();
    }
}

fn reopened(path: &Path) -> FileStore {
    FileStore::open(path).unwrap()
}

pub(crate) async fn load(path: &Path) -> Option<Record> {
    reopened(path).load(&key()).await.unwrap()
}

pub(crate) fn refused(path: &Path) -> String {
    match FileStore::open(path) {
        Ok(s) => panic!("{} was opened: {s:?}", path.display()),
        Err(StoreError::Failed(m)) => m,
        Err(e) => panic!("{e:?}"),
    }
}

pub(crate) fn journal(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap().to_os_string();
    name.push(".journal");
    path.with_file_name(name)
}

/// Many commits after the snapshot, read back by a new store: the same record, and most of the
/// commits in the journal, not the snapshot (which the first commit wrote).
#[tokio::test]
async fn reopen_after_many_commits_gives_the_same_record() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rec.json");
    let mut r = Record::new(key());
    r.established = true;
    let snapshot_len;
    {
        let mut s = FileStore::open(&path).unwrap();
        s.commit(&r, &[]).await.unwrap();
        snapshot_len = std::fs::metadata(&path).unwrap().len();
        commit_machines(&mut s, &mut r, 0, 300).await;
        r.cooling.insert("arm64-small@zone-b".into(), at(999));
        let ev = vec![Event::Cooling {
            offering: "arm64-small@zone-b".into(),
            until: at(999),
        }];
        s.commit(&r, &ev).await.unwrap();
        // A machine pruned from the record.
        r.entries.remove("lab-7");
        let ev = vec![Event::Pruned {
            names: vec!["lab-7".into()],
        }];
        s.commit(&r, &ev).await.unwrap();
    }
    assert_eq!(
        std::fs::metadata(&path).unwrap().len(),
        snapshot_len,
        "the commits went to the journal"
    );
    assert!(std::fs::metadata(journal(&path)).unwrap().len() > 300 * 2 * 100);
    assert_eq!(load(&path).await.as_ref(), Some(&r));
    // And again, after a commit on the reopened store.
    let mut s = reopened(&path);
    commit_machines(&mut s, &mut r, 300, 301).await;
    drop(s);
    assert_eq!(load(&path).await.as_ref(), Some(&r));
}

/// A commit cut off while it was appended (any number of its bytes written, or zeros where its
/// bytes did not land) is dropped whole: the record reads as before it, and the next commit lands
/// after the entries before it.
#[tokio::test]
async fn a_torn_last_entry_is_dropped_whole() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rec.json");
    let mut r = Record::new(key());
    let mut s = FileStore::open(&path).unwrap();
    commit_machines(&mut s, &mut r, 0, 5).await;
    let before = r.clone();
    let whole = std::fs::metadata(journal(&path)).unwrap().len();
    let ev = intend(&mut r, 5);
    s.commit(&r, &ev).await.unwrap();
    drop(s);
    let bytes = std::fs::read(journal(&path)).unwrap();
    let last = bytes.len() - whole as usize;
    let mut tears: Vec<Vec<u8>> = [1, 4, 7, 8, 9, last / 2, last - 1]
        .into_iter()
        .map(|cut| bytes[..whole as usize + cut].to_vec())
        .collect();
    let mut zeros = bytes[..whole as usize].to_vec();
    zeros.extend(std::iter::repeat_n(0u8, last));
    tears.push(zeros);
    let mut flipped = bytes.clone();
    *flipped.last_mut().unwrap() ^= 0x20;
    tears.push(flipped);
    for (i, torn) in tears.iter().enumerate() {
        std::fs::write(journal(&path), torn).unwrap();
        assert_eq!(load(&path).await.as_ref(), Some(&before), "tear {i}");
        assert_eq!(
            std::fs::metadata(journal(&path)).unwrap().len(),
            whole,
            "tear {i}: cut off on open"
        );
    }
    // The next commit follows the last whole entry.
    let mut r = before.clone();
    let mut s = reopened(&path);
    commit_machines(&mut s, &mut r, 5, 7).await;
    drop(s);
    assert_eq!(load(&path).await.as_ref(), Some(&r));
}

/// A damaged entry with whole entries after it is not a crash: landed commits would be lost, so the
/// store refuses the file and keeps it.
#[tokio::test]
async fn a_damaged_entry_before_whole_ones_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rec.json");
    let mut r = Record::new(key());
    let mut s = FileStore::open(&path).unwrap();
    commit_machines(&mut s, &mut r, 0, 1).await;
    let first = std::fs::metadata(journal(&path)).unwrap().len() as usize;
    commit_machines(&mut s, &mut r, 1, 3).await;
    drop(s);
    let mut bytes = std::fs::read(journal(&path)).unwrap();
    bytes[first + 12] ^= 0x01;
    std::fs::write(journal(&path), &bytes).unwrap();
    let m = refused(&path);
    assert!(
        m.contains("damaged") && m.contains("rec.json.journal"),
        "{m}"
    );
    assert_eq!(std::fs::read(journal(&path)).unwrap(), bytes, "kept");
}

/// A damaged length of an entry that whole entries follow is no torn last entry either, whether the
/// length now runs past the end of the file or into the next entry: refused, the journal kept.
#[tokio::test]
async fn a_damaged_length_before_whole_entries_is_refused() {
    for (byte, flip) in [(3, 0x10), (0, 0x01)] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rec.json");
        let mut r = Record::new(key());
        let mut s = FileStore::open(&path).unwrap();
        commit_machines(&mut s, &mut r, 0, 1).await;
        let first = std::fs::metadata(journal(&path)).unwrap().len() as usize;
        commit_machines(&mut s, &mut r, 1, 3).await;
        drop(s);
        let mut bytes = std::fs::read(journal(&path)).unwrap();
        bytes[first + byte] ^= flip;
        std::fs::write(journal(&path), &bytes).unwrap();
        let m = refused(&path);
        assert!(m.contains("damaged"), "byte {byte}: {m}");
        assert_eq!(std::fs::read(journal(&path)).unwrap(), bytes, "kept");
    }
}

/// Compaction writes every record of the file (of every key) into a new snapshot and starts an empty
/// journal; nothing is lost, and commits after it land.
#[tokio::test]
async fn compaction_keeps_everything() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rec.json");
    let mut r = Record::new(key());
    let mut other = Record::new(Key::new("fake", "s2", "lab"));
    other.next = 41;
    let mut s = FileStore::open(&path).unwrap();
    s.commit(&other, &[]).await.unwrap();
    commit_machines(&mut s, &mut r, 0, 20).await;
    let journal_before = std::fs::metadata(journal(&path)).unwrap().len();
    s.compact().unwrap();
    let journal_after = std::fs::metadata(journal(&path)).unwrap().len();
    assert!(
        journal_after < 200 && journal_after < journal_before,
        "{journal_after} bytes after, {journal_before} before"
    );
    assert_eq!(s.load(&key()).await.unwrap().as_ref(), Some(&r));
    commit_machines(&mut s, &mut r, 20, 22).await;
    drop(s);
    let mut s = reopened(&path);
    assert_eq!(s.load(&key()).await.unwrap().as_ref(), Some(&r));
    assert_eq!(s.load(&other.key).await.unwrap().as_ref(), Some(&other));
}

/// The store compacts on its own once the journal outgrows the snapshot (and a floor): the journal
/// stays bounded, and the record reads back the same.
#[tokio::test]
async fn the_journal_is_compacted_on_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rec.json");
    let mut r = Record::new(key());
    let mut s = FileStore::open(&path).unwrap();
    let first_snapshot = {
        s.commit(&r, &[]).await.unwrap();
        std::fs::metadata(&path).unwrap().len()
    };
    let mut largest = 0;
    for n in 0..3_500 {
        let ev = intend(&mut r, n);
        s.commit(&r, &ev).await.unwrap();
        largest = largest.max(std::fs::metadata(journal(&path)).unwrap().len());
    }
    assert!(
        std::fs::metadata(&path).unwrap().len() > first_snapshot,
        "a new snapshot was written"
    );
    assert!(largest < 2 << 20, "the journal stayed bounded: {largest}");
    drop(s);
    assert_eq!(load(&path).await.as_ref(), Some(&r));
}

/// A crash after a new snapshot was renamed into place and before its new journal was: the journal
/// beside it is the one before, whose entries the snapshot holds. It is not read again (nor
/// refused), and the next commit lands.
#[tokio::test]
async fn a_crash_between_the_snapshot_and_its_new_journal_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rec.json");
    let mut r = Record::new(key());
    let mut s = FileStore::open(&path).unwrap();
    commit_machines(&mut s, &mut r, 0, 10).await;
    let old_journal = std::fs::read(journal(&path)).unwrap();
    s.compact().unwrap();
    drop(s);
    std::fs::write(journal(&path), &old_journal).unwrap();
    assert_eq!(load(&path).await.as_ref(), Some(&r));
    // Entries removed since stay removed: the old journal is not replayed over the snapshot.
    let mut s = reopened(&path);
    r.entries.remove("lab-3");
    s.commit(
        &r,
        &[Event::Pruned {
            names: vec!["lab-3".into()],
        }],
    )
    .await
    .unwrap();
    commit_machines(&mut s, &mut r, 10, 12).await;
    drop(s);
    assert_eq!(load(&path).await.as_ref(), Some(&r));
}

/// A crash after commits were appended and before any compaction: the snapshot (of the first commit)
/// and the journal give every commit that was answered.
#[tokio::test]
async fn a_crash_before_compaction_loses_no_appended_entry() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rec.json");
    let mut r = Record::new(key());
    let mut s = FileStore::open(&path).unwrap();
    commit_machines(&mut s, &mut r, 0, 8).await;
    // The process dies without closing anything.
    std::mem::forget(s);
    let copy = dir.path().join("copy.json");
    std::fs::copy(&path, &copy).unwrap();
    std::fs::copy(journal(&path), journal(&copy)).unwrap();
    assert_eq!(load(&copy).await.as_ref(), Some(&r));
}

/// A journal of another record file beside this one is refused, both kept.
#[tokio::test]
async fn a_journal_of_another_record_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.json"), dir.path().join("b.json"));
    for p in [&a, &b] {
        let mut r = Record::new(key());
        let mut s = FileStore::open(p).unwrap();
        commit_machines(&mut s, &mut r, 0, 2).await;
    }
    std::fs::copy(journal(&b), journal(&a)).unwrap();
    let m = refused(&a);
    assert!(
        m.contains("a.json.journal") && m.contains("another record file"),
        "{m}"
    );
    assert_eq!(
        std::fs::read(journal(&a)).unwrap(),
        std::fs::read(journal(&b)).unwrap(),
        "kept"
    );
}

/// A journal newer than the snapshot beside it (an older copy of the record file put back) is
/// refused: its entries do not follow that snapshot.
#[tokio::test]
async fn a_journal_newer_than_its_snapshot_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rec.json");
    let mut r = Record::new(key());
    let mut s = FileStore::open(&path).unwrap();
    commit_machines(&mut s, &mut r, 0, 2).await;
    let old_snapshot = std::fs::read(&path).unwrap();
    s.compact().unwrap();
    commit_machines(&mut s, &mut r, 2, 3).await;
    drop(s);
    std::fs::write(&path, &old_snapshot).unwrap();
    let m = refused(&path);
    assert!(m.contains("older copy"), "{m}");
}

/// A journal of another format (a newer orca-pool's) is refused and kept, as is a file that is not
/// a journal at all.
#[tokio::test]
async fn a_journal_of_another_version_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rec.json");
    let mut r = Record::new(key());
    let mut s = FileStore::open(&path).unwrap();
    commit_machines(&mut s, &mut r, 0, 1).await;
    drop(s);
    let header = serde_json::json!({
        "format": "orca-pool-journal/9",
        "lineage": "0123456789abcdef",
        "generation": 1,
    });
    let framed = frame(&serde_json::to_vec(&header).unwrap());
    std::fs::write(journal(&path), &framed).unwrap();
    let m = refused(&path);
    assert!(
        m.contains("orca-pool-journal/9") && m.contains(orca_scaler::store::file::JOURNAL_FORMAT),
        "{m}"
    );
    assert_eq!(std::fs::read(journal(&path)).unwrap(), framed, "kept");

    std::fs::write(journal(&path), b"not a journal").unwrap();
    let m = refused(&path);
    assert!(m.contains("not an orca-pool journal"), "{m}");
}

/// A symbolic link at the journal's path is never followed.
#[cfg(unix)]
#[tokio::test]
async fn a_symbolic_link_at_the_journal_is_not_followed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rec.json");
    let mut r = Record::new(key());
    let mut s = FileStore::open(&path).unwrap();
    commit_machines(&mut s, &mut r, 0, 1).await;
    drop(s);
    let elsewhere = dir.path().join("elsewhere");
    std::fs::rename(journal(&path), &elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, journal(&path)).unwrap();
    let m = refused(&path);
    assert!(m.contains("rec.json.journal"), "{m}");
}

/// A record file of the format before the journal (`orca-pool/2`) is read, and written in the new
/// format at the first commit, which an older orca-pool refuses rather than read a snapshot without
/// its journal.
#[tokio::test]
async fn a_record_file_of_the_whole_file_format_is_read_and_upgraded() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rec.json");
    let mut r = Record::new(key());
    intend(&mut r, 0);
    std::fs::write(
        &path,
        serde_json::to_vec_pretty(&serde_json::json!({
            "format": orca_scaler::store::file::FORMAT_WHOLE,
            "records": [&r],
        }))
        .unwrap(),
    )
    .unwrap();
    let mut s = FileStore::open(&path).unwrap();
    assert_eq!(s.load(&key()).await.unwrap().as_ref(), Some(&r));
    let ev = made(&mut r, 0);
    s.commit(&r, &ev).await.unwrap();
    drop(s);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(
        text.contains(orca_scaler::store::file::FORMAT),
        "{}",
        &text[..80]
    );
    assert_eq!(load(&path).await.as_ref(), Some(&r));
}

/// A scaler's passes, read back from the file by a new store: the record the last pass left.
#[tokio::test]
async fn a_scalers_record_reads_back_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let (cloud, p) = support::cloud();
    let mut s = support::scaler(dir.path(), 30, &["amd64-small@zone-a"]);
    let r = s.pass(&p, cloud.now()).await;
    assert_eq!(r.serving, 30, "{:?}", r.actions);
    let ids = support::ids(&cloud);
    orca::Provider::delete(&p, &ids[3]).await.unwrap();
    s.settings.size = 25;
    let r = s.pass(&p, cloud.now()).await;
    assert_eq!(r.serving, 25, "{:?}", r.actions);
    let left = s.record().cloned().unwrap();
    drop(s);
    let key = left.key.clone();
    let mut store = FileStore::open(dir.path().join("rec.json")).unwrap();
    assert_eq!(store.load(&key).await.unwrap(), Some(left));
}

/// A frame as the journal writes one: length, CRC-32 of the length and payload, payload (written
/// here again so that the test does not trust the code it checks).
pub(crate) fn frame(payload: &[u8]) -> Vec<u8> {
    let len = (payload.len() as u32).to_le_bytes();
    let mut crc = !0u32;
    for b in len.iter().chain(payload) {
        crc ^= u32::from(*b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    let mut out = len.to_vec();
    out.extend_from_slice(&(!crc).to_le_bytes());
    out.extend_from_slice(payload);
    out
}
