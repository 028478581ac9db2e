//! The file store's format tags across versions: what this version writes is refused by the version
//! before it (which would drop the `leftovers` mark it does not know and rewrite the record without
//! it); what the version before wrote (`orca-pool/3` with its `orca-pool-journal/1` journal) and the
//! format before the journal (`orca-pool/2`) are read whole and written again in the new format at
//! the first commit, never appended to; a newer format is refused, naming its tag.
//!
//! The files of older versions are written here by hand, as those versions wrote them.

use crate::journal::{at, frame, intend, journal, key, load, refused};

use std::path::Path;

use orca_scaler::store::file::{FORMAT, JOURNAL_FORMAT};
use orca_scaler::{Entry, Event, FileStore, Offering, Phase, Record, Store};
use serde_json::{json, Value};

/// Whether the orca-pool before this format reads a snapshot of tag `tag`: it took `orca-pool/3`
/// and the older `orca-pool/2`, and refused any other.
fn previous_version_reads_snapshot(tag: &str) -> bool {
    matches!(tag, "orca-pool/3" | "orca-pool/2")
}

/// Whether the orca-pool before this format reads a journal of tag `tag`: only its own.
fn previous_version_reads_journal(tag: &str) -> bool {
    tag == "orca-pool-journal/1"
}

/// The snapshot at `path`, as JSON.
fn snapshot(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// The header of the journal beside `path` (its first frame), and how many bytes follow it.
fn journal_header(path: &Path) -> (Value, usize) {
    let bytes = std::fs::read(journal(path)).unwrap();
    let len = u32::from_le_bytes(bytes[..4].try_into().unwrap()) as usize;
    let header = serde_json::from_slice(&bytes[8..8 + len]).unwrap();
    (header, bytes.len() - 8 - len)
}

/// The format tags of the snapshot at `path` and of its journal.
fn tags(path: &Path) -> (String, String) {
    let s = snapshot(path)["format"].as_str().unwrap().to_string();
    let j = journal_header(path).0["format"]
        .as_str()
        .unwrap()
        .to_string();
    (s, j)
}

/// Asserts that the files at `path` carry the tags this version writes, which the version before
/// refuses.
fn assert_new_tags(path: &Path, when: &str) {
    let (s, j) = tags(path);
    assert_eq!((s.as_str(), j.as_str()), (FORMAT, JOURNAL_FORMAT), "{when}");
    assert!(
        !previous_version_reads_snapshot(&s),
        "{when}: the version before would read snapshot {s:?}"
    );
    assert!(
        !previous_version_reads_journal(&j),
        "{when}: the version before would read journal {j:?}"
    );
}

/// An entry as the tests below expect to read it.
fn entry(name: &str, phase: Phase, id: Option<&str>, secs: i64, leftovers: bool) -> Entry {
    Entry {
        name: name.into(),
        offering: Offering {
            machine_type: "amd64-small".into(),
            location: "zone-a".into(),
        },
        phase,
        id: id.map(Into::into),
        intent_at: at(secs),
        created_at: None,
        unhealthy_since: None,
        changed_at: at(secs),
        note: String::new(),
        leftovers,
    }
}

/// An entry as the version before wrote it: without `leftovers` when it is false (that version
/// skipped a false mark; the one before it did not know the mark at all).
fn entry_json(name: &str, phase: &str, id: Option<&str>, secs: i64, leftovers: bool) -> Value {
    let time = at(secs).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let mut e = json!({
        "name": name,
        "offering": {"machine_type": "amd64-small", "location": "zone-a"},
        "phase": phase,
        "id": id,
        "intent_at": time,
        "created_at": null,
        "unhealthy_since": null,
        "changed_at": time,
        "note": "",
    });
    if leftovers {
        e["leftovers"] = json!(true);
    }
    e
}

const LINEAGE: &str = "5eed00000000beef";

/// A record file of the version before: snapshot `orca-pool/3` of `generation` (three entries,
/// `lab-1` marked), and its journal `orca-pool-journal/1` following generation `journal_generation`
/// of lineage `journal_lineage`, with two commits (`lab-3` intended, `lab-0` pruned).
fn write_previous_version(
    path: &Path,
    generation: u64,
    journal_lineage: &str,
    journal_generation: u64,
) {
    let k = json!({"kind": "fake", "owner": "s1", "pool": "lab"});
    let snap = json!({
        "format": "orca-pool/3",
        "lineage": LINEAGE,
        "generation": generation,
        "records": [{
            "key": k,
            "established": true,
            "next": 3,
            "entries": {
                "lab-0": entry_json("lab-0", "gone", Some("m-0"), 0, false),
                "lab-1": entry_json("lab-1", "retired", None, 1, true),
                "lab-2": entry_json("lab-2", "live", Some("m-2"), 2, false),
            },
            "cooling": {},
            "writer": "00000000000000w1",
        }],
    });
    std::fs::write(path, serde_json::to_vec_pretty(&snap).unwrap()).unwrap();
    let delta = |next: u64, put: Vec<Value>, removed: Vec<&str>| {
        json!({
            "key": k, "established": true, "next": next, "conflict": null,
            "writer": "00000000000000w1", "cooling": {}, "put": put, "removed": removed,
        })
    };
    let mut bytes = Vec::new();
    for v in [
        json!({"format": "orca-pool-journal/1", "lineage": journal_lineage, "generation": journal_generation}),
        delta(
            4,
            vec![entry_json("lab-3", "creating", None, 3, false)],
            vec![],
        ),
        delta(4, vec![], vec!["lab-0"]),
    ] {
        bytes.extend(frame(&serde_json::to_vec(&v).unwrap()));
    }
    std::fs::write(journal(path), bytes).unwrap();
}

/// The record of the snapshot `write_previous_version` writes, with its journal read or not.
fn previous_record(with_journal: bool) -> Record {
    let mut r = Record::new(key());
    r.established = true;
    r.next = 3;
    r.writer = "00000000000000w1".into();
    for e in [
        entry("lab-0", Phase::Gone, Some("m-0"), 0, false),
        entry("lab-1", Phase::Retired, None, 1, true),
        entry("lab-2", Phase::Live, Some("m-2"), 2, false),
    ] {
        r.entries.insert(e.name.clone(), e);
    }
    if with_journal {
        r.next = 4;
        r.entries.remove("lab-0");
        let e = entry("lab-3", Phase::Creating, None, 3, false);
        r.entries.insert(e.name.clone(), e);
    }
    r
}

/// What this version writes, a marked entry included, carries tags that the version before refuses:
/// the first commit's snapshot and journal, the journal after commits appended to it, and a
/// compaction's.
#[tokio::test]
async fn what_this_version_writes_the_version_before_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rec.json");
    let mut r = Record::new(key());
    let ev = intend(&mut r, 0);
    r.entries.get_mut("lab-0").unwrap().leftovers = true;
    let mut s = FileStore::open(&path).unwrap();
    s.commit(&r, &ev).await.unwrap();
    assert_eq!(
        journal_header(&path).1,
        0,
        "the first commit is the snapshot"
    );
    assert_new_tags(&path, "the first snapshot");

    let ev = intend(&mut r, 1);
    r.entries.get_mut("lab-1").unwrap().leftovers = true;
    s.commit(&r, &ev).await.unwrap();
    assert!(journal_header(&path).1 > 0, "the commit was appended");
    assert_new_tags(&path, "after a commit appended to the journal");

    s.compact().unwrap();
    assert_new_tags(&path, "after a compaction");
    drop(s);
    let mut s = FileStore::open(&path).unwrap();
    assert_eq!(
        s.load(&key()).await.unwrap().as_ref(),
        Some(&r),
        "read back whole"
    );
    assert_eq!(s.notes(), Vec::<String>::new());
}

/// A record file of the version before (snapshot `orca-pool/3`, journal `orca-pool-journal/1`,
/// commits in it) is read whole, the journal's commits applied, without a write. The first commit
/// after does not append to that journal: it writes a new snapshot and a new journal of the new
/// format (the next generation, the same lineage), so that no file holds the mark under an old tag;
/// the commits after are appended to the new journal.
#[tokio::test]
async fn a_record_of_the_version_before_is_read_whole_and_rewritten_at_the_first_commit() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rec.json");
    write_previous_version(&path, 4, LINEAGE, 4);
    let old_snapshot = std::fs::read(&path).unwrap();
    let old_journal = std::fs::read(journal(&path)).unwrap();

    let mut s = FileStore::open(&path).unwrap();
    let mut r = s.load(&key()).await.unwrap().expect("the record");
    assert_eq!(r, previous_record(true));
    let notes = s.notes().join("\n");
    assert!(
        notes.contains("older format \"orca-pool/3\"") && notes.contains(FORMAT),
        "the operator is told: {notes}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), old_snapshot, "not written");
    assert_eq!(
        std::fs::read(journal(&path)).unwrap(),
        old_journal,
        "not written"
    );

    let lab3 = r.entries.get_mut("lab-3").unwrap();
    lab3.phase = Phase::Retired;
    lab3.leftovers = true;
    let ev = vec![Event::Retired {
        name: "lab-3".into(),
        why: "refused".into(),
    }];
    s.commit(&r, &ev).await.unwrap();
    assert_new_tags(&path, "after the first commit");
    let snap = snapshot(&path);
    assert_eq!(
        (snap["lineage"].as_str(), snap["generation"].as_u64()),
        (Some(LINEAGE), Some(5))
    );
    let (header, after) = journal_header(&path);
    assert_eq!(
        (header["lineage"].as_str(), header["generation"].as_u64()),
        (Some(LINEAGE), Some(5))
    );
    assert_eq!(after, 0, "the commit is in the snapshot, not appended");
    assert_eq!(
        snap["records"][0]["entries"]["lab-3"]["leftovers"],
        json!(true),
        "the mark is in the new snapshot"
    );

    let ev = intend(&mut r, 4);
    s.commit(&r, &ev).await.unwrap();
    assert!(journal_header(&path).1 > 0, "appended to the new journal");
    assert_eq!(snapshot(&path), snap, "the snapshot stays");
    drop(s);
    assert_eq!(load(&path).await.as_ref(), Some(&r));
}

/// The lineage and generation of the version before still hold: its journal of the generation
/// before its snapshot (a crash between the two writes) is not read, one of another record file or
/// newer than its snapshot is refused and kept. And this version's crash between its first new
/// snapshot and its new journal leaves the old journal, which is not read either.
#[tokio::test]
async fn the_version_befores_lineage_and_generation_hold() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rec.json");

    write_previous_version(&path, 5, LINEAGE, 4);
    assert_eq!(load(&path).await, Some(previous_record(false)));

    write_previous_version(&path, 5, "00000000000000aa", 5);
    let kept = std::fs::read(journal(&path)).unwrap();
    let m = refused(&path);
    assert!(m.contains("another record file"), "{m}");
    assert_eq!(std::fs::read(journal(&path)).unwrap(), kept, "kept");

    write_previous_version(&path, 5, LINEAGE, 6);
    let m = refused(&path);
    assert!(m.contains("older copy"), "{m}");

    // This version's first commit on the files of the version before wrote its new snapshot; the
    // crash came before its new journal, so the old one is still beside it. Read again, it would
    // undo the commit (lab-3 back to creating, unmarked).
    write_previous_version(&path, 4, LINEAGE, 4);
    let old_journal = std::fs::read(journal(&path)).unwrap();
    let mut s = FileStore::open(&path).unwrap();
    let mut r = s.load(&key()).await.unwrap().unwrap();
    let lab3 = r.entries.get_mut("lab-3").unwrap();
    lab3.phase = Phase::Retired;
    lab3.leftovers = true;
    let ev = vec![Event::Retired {
        name: "lab-3".into(),
        why: "refused".into(),
    }];
    s.commit(&r, &ev).await.unwrap();
    drop(s);
    std::fs::write(journal(&path), &old_journal).unwrap();
    assert_eq!(snapshot(&path)["format"], json!(FORMAT));
    assert_eq!(
        load(&path).await.as_ref(),
        Some(&r),
        "the old journal is not read again"
    );
    let mut s = FileStore::open(&path).unwrap();
    let ev = intend(&mut r, 4);
    s.commit(&r, &ev).await.unwrap();
    drop(s);
    assert_new_tags(&path, "after the commit that followed");
    assert_eq!(load(&path).await.as_ref(), Some(&r));
}

/// A record file of the format before the journal (`orca-pool/2`: no lineage, no generation) is read
/// as before, and written in the new format at its first commit.
#[tokio::test]
async fn a_record_file_before_the_journal_still_reads() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rec.json");
    let whole = json!({
        "format": "orca-pool/2",
        "records": [{
            "key": {"kind": "fake", "owner": "s1", "pool": "lab"},
            "established": true,
            "next": 3,
            "entries": {
                "lab-0": entry_json("lab-0", "gone", Some("m-0"), 0, false),
                "lab-1": entry_json("lab-1", "retired", None, 1, false),
                "lab-2": entry_json("lab-2", "live", Some("m-2"), 2, false),
            },
            "cooling": {},
            "writer": "00000000000000w1",
        }],
    });
    std::fs::write(&path, serde_json::to_vec_pretty(&whole).unwrap()).unwrap();
    let mut expected = previous_record(false);
    expected.entries.get_mut("lab-1").unwrap().leftovers = false;
    let mut s = FileStore::open(&path).unwrap();
    let mut r = s.load(&key()).await.unwrap().expect("the record");
    assert_eq!(r, expected);
    let ev = intend(&mut r, 3);
    s.commit(&r, &ev).await.unwrap();
    drop(s);
    assert_new_tags(&path, "after the first commit");
    assert_eq!(load(&path).await.as_ref(), Some(&r));
}

/// A newer format than this version's, of the snapshot or of the journal, is refused with a message
/// naming its tag and the one this version writes; the file is kept as it is.
#[tokio::test]
async fn a_newer_format_is_refused_naming_its_tag() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rec.json");
    let newer = r#"{"format": "orca-pool/5", "lineage": "5eed00000000beef", "generation": 1, "records": []}"#;
    std::fs::write(&path, newer).unwrap();
    let m = refused(&path);
    assert!(
        m.contains("\"orca-pool/5\"") && m.contains(FORMAT) && m.contains("rec.json"),
        "{m}"
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), newer, "kept");

    std::fs::remove_file(&path).unwrap();
    let mut r = Record::new(key());
    let mut s = FileStore::open(&path).unwrap();
    let ev = intend(&mut r, 0);
    s.commit(&r, &ev).await.unwrap();
    drop(s);
    let (mut header, _) = journal_header(&path);
    header["format"] = json!("orca-pool-journal/3");
    let newer = frame(&serde_json::to_vec(&header).unwrap());
    std::fs::write(journal(&path), &newer).unwrap();
    let m = refused(&path);
    assert!(
        m.contains("\"orca-pool-journal/3\"")
            && m.contains(JOURNAL_FORMAT)
            && m.contains("rec.json.journal"),
        "{m}"
    );
    assert_eq!(std::fs::read(journal(&path)).unwrap(), newer, "kept");
}

/// The PostgreSQL store writes a phase's word and the file store its serde name: they are one word.
#[test]
fn a_phases_word_is_its_serde_name() {
    for phase in orca_scaler::Phase::ALL {
        let word = phase.as_str();
        assert_eq!(serde_json::to_value(phase).unwrap(), word);
        let back: orca_scaler::Phase = serde_json::from_value(word.into()).unwrap();
        assert_eq!(back, phase);
        assert_eq!(orca_scaler::Phase::from_word(word), Some(phase));
    }
}
