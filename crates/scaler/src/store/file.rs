//! The record in a local file: the default store.
//!
//! The file holds the records of every (kind, owner, pool) kept in it, as a snapshot (`<file>`, JSON)
//! and a journal beside it (`<file>.journal`: entries framed with their length and a CRC-32) of the
//! commits since. A commit appends one entry to the journal, the record's own fields and the entries
//! its events name, and
//! syncs it before it answers, so a commit costs the same at ten machines and at ten thousand; a
//! crash mid-append leaves a torn last entry, dropped whole when the store is next opened. Now and then
//! (once the journal outgrows the snapshot) a commit writes a new snapshot instead: whole, to a
//! temporary file in the same folder that is synced and then renamed over the old one
//! ([`orca::fs::write_atomic`]), then a new, empty journal the same way. The snapshot and the journal
//! carry the file's lineage and a generation: a crash between the two writes leaves a journal of the
//! generation before, whose entries the new snapshot holds, so it is not read again; a journal of
//! another record file, or of a snapshot newer than the one beside it, is refused. The temporary
//! file that a crashed writer left behind is never read, and is removed when the store is next opened.
//!
//! Snapshot and journal carry format tags ([`FORMAT`], [`JOURNAL_FORMAT`]), which change whenever an
//! older orca-pool would read the file and drop something that changes what the pool does: that
//! orca-pool then refuses the file, naming its tag. The older formats this version still reads
//! ([`FORMAT_BEFORE_LEFTOVERS`] with its journal, [`FORMAT_WHOLE`]) are never appended to: the first
//! commit writes the record again in this version's format.
//!
//! A lock file beside it (`<file>.lock`, an exclusive `flock` held as long as the store is open)
//! refuses a second process on the same file. The lock is checked before every pass
//! ([`Store::lead`]) and every write: when someone removed or replaced the lock file, a second
//! process may have locked a new file at the same path, so this store stops for good
//! ([`StoreError::LostLeadership`]) rather than write over the other's record.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use orca::fs::{FileLock, FsError};
use orca::Timestamp;
use serde::{Deserialize, Serialize};

use super::journal::{self, io, Header, Journal};
use super::{Role, Store, StoreError};
use crate::record::{Entry, Event, Key, Record};

// The format tags of the snapshot and of its journal. The rule: a field that an older orca-pool
// would drop and that changes what the pool does bumps the format. Such a reader skips a field it
// does not know (serde), and its next commit writes the record without it: the field is lost
// without a word. So a change of that kind takes a new `FORMAT` and a new `JOURNAL_FORMAT` together
// (journal entries carry entries too), which an older orca-pool refuses, naming the tag; the tags
// before join the older formats below, read and never written, each with why it is still read. A
// field whose loss changes nothing the pool does (a note for the operator) needs no new tag.

/// The format tag of the snapshot this version writes.
pub const FORMAT: &str = "orca-pool/4";

/// The format tag of the journal this version writes (its header's `format`).
pub const JOURNAL_FORMAT: &str = "orca-pool-journal/2";

/// The snapshot format before [`Entry::leftovers`] had a tag of its own. Still read, so that an
/// upgrade keeps the record: every orca-pool before this one wrote it, those that knew the mark
/// too (they wrote it under this same tag, which is why the tag changed: an orca-pool that does not
/// know the mark reads such a file and drops it). Read whole with its journal
/// ([`JOURNAL_FORMAT_BEFORE_LEFTOVERS`]), marks included; never appended to: the first commit
/// writes the record again as [`FORMAT`], with a new journal.
pub const FORMAT_BEFORE_LEFTOVERS: &str = "orca-pool/3";

/// The journal format that follows a [`FORMAT_BEFORE_LEFTOVERS`] snapshot: read, never appended to.
pub const JOURNAL_FORMAT_BEFORE_LEFTOVERS: &str = "orca-pool-journal/1";

/// The format of a record file written before the journal: still read so that an upgrade from
/// then keeps the record, and written again as [`FORMAT`] at the first commit. (An older orca-pool
/// refuses the new format rather than read a snapshot without the journal that follows it.)
pub const FORMAT_WHOLE: &str = "orca-pool/2";

/// The older snapshot formats this version reads and never writes, newest first.
const OLDER_FORMATS: [&str; 2] = [FORMAT_BEFORE_LEFTOVERS, FORMAT_WHOLE];

/// The journal formats this version reads: its own, then the older ones, never appended to.
const JOURNAL_FORMATS: [&str; 2] = [JOURNAL_FORMAT, JOURNAL_FORMAT_BEFORE_LEFTOVERS];

/// The least a journal grows to before a commit writes a new snapshot instead; beyond it, the
/// journal is compacted once it is larger than the snapshot, so the snapshot's cost is spread over
/// at least as many bytes of journal as it has.
const COMPACT_AT_LEAST: u64 = 1 << 20;

/// The snapshot as it is read.
#[derive(Debug, Default, Deserialize)]
struct Contents {
    /// The format tag: [`FORMAT`] or one of [`OLDER_FORMATS`] (empty for the first orca-pool's).
    #[serde(default)]
    format: String,
    /// The record file's lineage: a random id given at its first snapshot, carried by its journals.
    #[serde(default)]
    lineage: String,
    /// How many snapshots the lineage has had: its journal follows this one.
    #[serde(default)]
    generation: u64,
    records: Vec<Record>,
    /// A record of an older orca-pool (keyed by pool only), kept as it was found: never read as this
    /// pool's.
    #[serde(default)]
    legacy: Option<serde_json::Value>,
}

/// The snapshot as it is written.
#[derive(Serialize)]
struct Snapshot<'a> {
    format: &'a str,
    lineage: &'a str,
    generation: u64,
    records: Vec<&'a Record>,
    #[serde(skip_serializing_if = "Option::is_none")]
    legacy: &'a Option<serde_json::Value>,
}

/// One commit in the journal: a record's own fields, and the entries that its events named, as the
/// record has them (or gone from it).
#[derive(Debug, Serialize, Deserialize)]
struct Delta {
    key: Key,
    established: bool,
    next: u64,
    conflict: Option<String>,
    writer: String,
    cooling: BTreeMap<String, Timestamp>,
    /// Entries written as the record has them.
    #[serde(default)]
    put: Vec<Entry>,
    /// Names the record no longer has.
    #[serde(default)]
    removed: Vec<String>,
}

impl Delta {
    /// What a commit of `record` with `events` writes: every entry when the store has no record of
    /// its key yet, else those that the events name.
    fn of(record: &Record, events: &[Event], new: bool) -> Delta {
        let mut put = Vec::new();
        let mut removed = Vec::new();
        if new {
            put.extend(record.entries.values().cloned());
        } else {
            for name in super::named(events) {
                match record.entries.get(name) {
                    Some(e) => put.push(e.clone()),
                    None => removed.push(name.to_string()),
                }
            }
        }
        Delta {
            key: record.key.clone(),
            established: record.established,
            next: record.next,
            conflict: record.conflict.clone(),
            writer: record.writer.clone(),
            cooling: record.cooling.clone(),
            put,
            removed,
        }
    }

    /// Applies the delta to `records`.
    fn apply(self, records: &mut BTreeMap<Key, Record>) {
        let r = records
            .entry(self.key.clone())
            .or_insert_with(|| Record::new(self.key.clone()));
        self.apply_to(r);
    }

    /// Applies the delta to `r`, the record of its key.
    fn apply_to(self, r: &mut Record) {
        r.established = self.established;
        r.next = self.next;
        r.conflict = self.conflict;
        r.writer = self.writer;
        r.cooling = self.cooling;
        for e in self.put {
            r.entries.insert(e.name.clone(), e);
        }
        for n in &self.removed {
            r.entries.remove(n);
        }
    }
}

/// A record file, locked for this process.
#[derive(Debug)]
pub struct FileStore {
    path: PathBuf,
    /// Every record in the file, as the snapshot and the journal have them.
    records: BTreeMap<Key, Record>,
    legacy: Option<serde_json::Value>,
    lineage: String,
    generation: u64,
    /// The size of the last snapshot written or read.
    snapshot_len: u64,
    /// The journal that takes the next commit; `None` when the next commit writes a snapshot (a new
    /// file, one of the older format, a journal of an earlier generation, one whose append failed).
    journal: Option<Journal>,
    notes: Vec<String>,
    /// Held for as long as the store is open: the exclusive lock.
    lock: FileLock,
}

/// `path` with every symbolic link on the way resolved (to the file, or to a folder above it): the
/// lock and the journal are those of the file itself, so that two stores opened by two paths to one
/// file take one lock. A file not made yet is named in its folder's resolved path, and a link to
/// such a file is followed to where it points.
fn real_path(path: &Path) -> Result<PathBuf, StoreError> {
    let mut at = path.to_path_buf();
    // As many links as the system itself follows in one path.
    for _ in 0..40 {
        match std::fs::canonicalize(&at) {
            Ok(real) => return Ok(real),
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(io(&at, "resolve", e))
            }
            Err(_) => {}
        }
        let is_link = std::fs::symlink_metadata(&at).is_ok_and(|m| m.file_type().is_symlink());
        if is_link {
            let target = std::fs::read_link(&at).map_err(|e| io(&at, "resolve", e))?;
            at = match at.parent() {
                Some(folder) => folder.join(target),
                None => target,
            };
            continue;
        }
        let not_found = || std::io::Error::from(std::io::ErrorKind::NotFound);
        let Some(name) = at.file_name() else {
            return Err(io(path, "resolve", not_found()));
        };
        let folder = match at.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let real = std::fs::canonicalize(folder).map_err(|e| io(folder, "resolve", e))?;
        return Ok(real.join(name));
    }
    let loops = std::io::Error::other("too many levels of symbolic links");
    Err(io(path, "resolve", loops))
}

impl FileStore {
    /// Opens (or prepares) the record file at `path`, taking its lock: a second process (or a second
    /// store in this one) on the same file is refused with [`StoreError::Busy`]. The journal beside
    /// it is read after the snapshot; its torn last entry, if any, is dropped.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        let path = real_path(path.as_ref())?;
        let lock = lock(&path)?;
        let journal_path = journal::path_for(&path);
        remove_leftovers(&path);
        remove_leftovers(&journal_path);
        let (contents, snapshot_len) = match std::fs::read(&path) {
            Ok(bytes) => (Some(parse(&path, &bytes)?), bytes.len() as u64),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => (None, 0),
            Err(e) => return Err(io(&path, "read", e)),
        };
        let mut store = FileStore {
            path,
            records: BTreeMap::new(),
            legacy: None,
            lineage: String::new(),
            generation: 0,
            snapshot_len,
            journal: None,
            notes: Vec::new(),
            lock,
        };
        let Some(contents) = contents else {
            if journal_path.exists() {
                store.notes.push(format!(
                    "{} has no record file beside it ({} was removed?): it is not read, and the first write replaces it",
                    journal_path.display(),
                    store.path.display()
                ));
            }
            return Ok(store);
        };
        let current = contents.format == FORMAT;
        if OLDER_FORMATS.contains(&contents.format.as_str()) {
            store.notes.push(format!(
                "{} is of the older format {:?}: it is read, and written as {FORMAT:?} at the first commit, which an older orca-pool refuses",
                store.path.display(),
                contents.format
            ));
        }
        store.lineage = contents.lineage;
        store.generation = contents.generation;
        store.legacy = contents.legacy;
        store.records = contents
            .records
            .into_iter()
            .map(|r| (r.key.clone(), r))
            .collect();
        store.replay(&journal_path, current)?;
        Ok(store)
    }

    /// Reads the journal beside the snapshot into the records, and opens it for the next commit when
    /// it follows this snapshot and both are of this version's format (`current`: the snapshot's).
    fn replay(&mut self, journal_path: &Path, current: bool) -> Result<(), StoreError> {
        let Some(found) = journal::read(journal_path, &JOURNAL_FORMATS)? else {
            return Ok(());
        };
        let h = &found.header;
        if h.lineage != self.lineage {
            return Err(StoreError::Failed(format!(
                "{}: this journal belongs to another record file (lineage {:?}, and {} is of {:?}); both are kept as they are: put back the record file it belongs to, or move the journal away",
                journal_path.display(),
                h.lineage,
                self.path.display(),
                self.lineage
            )));
        }
        if h.generation > self.generation {
            return Err(StoreError::Failed(format!(
                "{}: this journal follows snapshot {} and {} is snapshot {} (an older copy put back?); both are kept as they are",
                journal_path.display(),
                h.generation,
                self.path.display(),
                self.generation
            )));
        }
        if h.generation < self.generation {
            // A crash between a new snapshot and its new journal: the snapshot holds every entry.
            return Ok(());
        }
        for (i, payload) in found.entries.iter().enumerate() {
            let delta: Delta = serde_json::from_slice(payload).map_err(|e| {
                StoreError::Failed(format!(
                    "{}: entry {} is whole but not an orca-pool entry: {e}",
                    journal_path.display(),
                    i + 1
                ))
            })?;
            delta.apply(&mut self.records);
        }
        if found.torn {
            tracing::warn!(
                journal = %journal_path.display(),
                "dropped the torn last entry of the journal: a write that did not finish"
            );
        }
        // An older format is never appended to: a commit of this version may write what an older
        // orca-pool would drop. The next commit writes a snapshot and a journal of this format.
        if current && found.header.format == JOURNAL_FORMAT {
            self.journal = Some(Journal::reopen(journal_path, found.whole)?);
        }
        Ok(())
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The journal's path (`<file>.journal`).
    pub fn journal_path(&self) -> PathBuf {
        journal::path_for(&self.path)
    }

    /// `Ok` while the lock file is still the one this store locked; else
    /// [`StoreError::LostLeadership`] naming it, for good: another process may hold a new lock
    /// file at its path and act on the record.
    fn check_lock(&self) -> Result<(), StoreError> {
        self.lock.still_held().map_err(|e| match e {
            FsError::Replaced { .. } => StoreError::LostLeadership(format!(
                "{e}; {} is no longer this process's record: stopped, nothing more is made or deleted",
                self.path.display()
            )),
            other => StoreError::Failed(other.to_string()),
        })
    }

    /// Writes a new snapshot of every record and an empty journal now. A commit does it on its own
    /// once the journal outgrows the snapshot.
    pub fn compact(&mut self) -> Result<(), StoreError> {
        self.check_lock()?;
        self.write_snapshot(None)
    }

    /// Writes a new snapshot of the records, with `changed` in place of its key's record, then a new
    /// journal that follows it. Once the snapshot is written the commit has landed, whatever the
    /// journal's write does: a journal that cannot be made is made again by the next commit.
    fn write_snapshot(&mut self, changed: Option<Record>) -> Result<(), StoreError> {
        let lineage = if self.lineage.is_empty() {
            format!("{:016x}", fastrand::u64(..))
        } else {
            self.lineage.clone()
        };
        let generation = self.generation + 1;
        let replaced = changed.as_ref().map(|c| &c.key);
        let records = self
            .records
            .values()
            .filter(|r| Some(&r.key) != replaced)
            .chain(changed.as_ref());
        let mut records: Vec<&Record> = records.collect();
        records.sort_by(|a, b| a.key.cmp(&b.key));
        let bytes = serde_json::to_vec_pretty(&Snapshot {
            format: FORMAT,
            lineage: &lineage,
            generation,
            records,
            legacy: &self.legacy,
        })
        .map_err(|e| StoreError::Failed(format!("{}: {e}", self.path.display())))?;
        orca::fs::write_atomic(&self.path, &bytes)
            .map_err(|e| StoreError::Failed(e.to_string()))?;
        // The old journal follows the old snapshot: it takes no more appends.
        self.journal = None;
        if let Some(changed) = changed {
            self.records.insert(changed.key.clone(), changed);
        }
        self.lineage = lineage;
        self.generation = generation;
        self.snapshot_len = bytes.len() as u64;
        let header = Header {
            format: JOURNAL_FORMAT.into(),
            lineage: self.lineage.clone(),
            generation,
        };
        match Journal::create(&self.journal_path(), &header) {
            Ok(j) => self.journal = Some(j),
            Err(e) => tracing::warn!(
                error = %e,
                "the record's snapshot is written, its new journal is not: the next commit writes a snapshot again"
            ),
        }
        Ok(())
    }
}

/// Takes the exclusive lock of the record file at `path` (`<path>.lock`, held as long as the
/// returned lock lives), without waiting.
fn lock(path: &Path) -> Result<FileLock, StoreError> {
    let lock_path = FileLock::path_for(path);
    FileLock::try_lock(&lock_path).map_err(|e| match e {
        FsError::Busy { .. } => StoreError::Busy(format!(
            "{} is used by another orca-pool (it holds {}): run one scaler per record file, or run replicas on PostgreSQL (--store postgres://...)",
            path.display(),
            lock_path.display()
        )),
        other => StoreError::Failed(other.to_string()),
    })
}

/// Removes the temporary files of `path` that writers which crashed before renaming them left
/// behind. Called with the lock held: no other process is writing one.
fn remove_leftovers(path: &Path) {
    match orca::fs::remove_stale_temps(path) {
        Ok(removed) => {
            for file in removed {
                tracing::info!(
                    file = %file.display(),
                    "removed the temporary file of a record write that did not finish"
                );
            }
        }
        Err(e) => tracing::warn!(
            error = %e,
            "could not remove the temporary files of record writes that did not finish"
        ),
    }
}

fn parse(path: &Path, bytes: &[u8]) -> Result<Contents, StoreError> {
    let value: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| {
        StoreError::Failed(format!("{}: not an orca-pool record: {e}", path.display()))
    })?;
    match value.get("format").and_then(|f| f.as_str()) {
        Some(f) if f == FORMAT || OLDER_FORMATS.contains(&f) => serde_json::from_value(value)
            .map_err(|e| {
                StoreError::Failed(format!("{}: not an orca-pool record: {e}", path.display()))
            }),
        Some(other) => Err(StoreError::Failed(format!(
            "{}: record format {other:?} is not {FORMAT:?}, nor one of the older {} (written by another version of orca-pool); it is kept as it is",
            path.display(),
            quoted(&OLDER_FORMATS)
        ))),
        // The first orca-pool's record: machines by id, no kind or owner. Kept aside, never read as
        // this pool's record.
        None if value.get("known").is_some() => Ok(Contents {
            legacy: Some(value),
            ..Contents::default()
        }),
        None => Err(StoreError::Failed(format!(
            "{}: not an orca-pool record",
            path.display()
        ))),
    }
}

/// `tags` quoted and joined: `"a", "b"`.
pub(super) fn quoted(tags: &[&str]) -> String {
    let quoted: Vec<String> = tags.iter().map(|t| format!("{t:?}")).collect();
    quoted.join(", ")
}

#[async_trait]
impl Store for FileStore {
    fn describe(&self) -> String {
        format!("file {}", self.path.display())
    }

    async fn lead(&mut self, _key: &Key) -> Result<Role, StoreError> {
        self.check_lock()?;
        Ok(Role::Leader)
    }

    async fn load(&mut self, key: &Key) -> Result<Option<Record>, StoreError> {
        Ok(self.records.get(key).cloned())
    }

    /// Appends the record's own fields and the entries `events` name (every entry, for a key the
    /// file does not have yet) to the journal, synced; or, once the journal has outgrown the
    /// snapshot (or there is none yet), writes a new snapshot and journal.
    async fn commit(&mut self, record: &Record, events: &[Event]) -> Result<(), StoreError> {
        self.check_lock()?;
        let delta = Delta::of(record, events, !self.records.contains_key(&record.key));
        let compact_at = COMPACT_AT_LEAST.max(self.snapshot_len);
        if let Some(journal) = self.journal.as_mut().filter(|j| j.len() < compact_at) {
            let payload = serde_json::to_vec(&delta)
                .map_err(|e| StoreError::Failed(format!("{}: {e}", self.path.display())))?;
            return match journal.append(&payload) {
                Ok(()) => {
                    delta.apply(&mut self.records);
                    Ok(())
                }
                Err((e, cut)) => {
                    if !cut {
                        // Its last frame may be torn: nothing may follow it. The next commit
                        // writes a snapshot and a new journal.
                        self.journal = None;
                    }
                    Err(e)
                }
            };
        }
        let mut changed = self
            .records
            .get(&record.key)
            .cloned()
            .unwrap_or_else(|| Record::new(record.key.clone()));
        delta.apply_to(&mut changed);
        self.write_snapshot(Some(changed))
    }

    fn still_held(&self) -> Result<(), StoreError> {
        self.check_lock()
    }

    fn notes(&self) -> Vec<String> {
        let mut notes = self.notes.clone();
        if let Some(v) = &self.legacy {
            let n = v
                .get("known")
                .and_then(|k| k.as_object())
                .map(|o| o.len())
                .unwrap_or(0);
            notes.push(format!(
                "{} also holds a record of an older orca-pool, keyed by pool only ({n} machine ids); it is kept but not read as any pool's record",
                self.path.display()
            ));
        }
        notes
    }
}
