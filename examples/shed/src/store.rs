//! The record cache and delete markers in `remote.state_dir`: one JSON file per shed
//! (`sheds/<id>.json`) and per acknowledged delete (`deletes/<id>.json`), each written atomically
//! ([`orca::fs::write_atomic`]: a temporary file in the same directory, synced, then renamed over
//! the old one), so that a server that dies mid-write leaves the old record or the new one, never
//! half of one.
//!
//! One server at a time uses a directory: [`Store::open`] takes its lock (`server.lock` in it) before
//! anything is read, and refuses while another server holds it. A second server on the same
//! directory would otherwise reconcile the same VMs, resume the same jobs and overwrite the records
//! of the first (and removing the temporary files of unfinished writes is only safe for the lock's
//! holder: they may be the first server's writes in flight).

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use orca::fs::{FileLock, FsError};
use orca::kit::lock;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::model::{DeleteMarker, Shed};

/// The largest record or marker read (bytes): one is a few hundred bytes; a larger file is not one
/// this server wrote, and reading it whole would only cost memory.
pub const MAX_RECORD: u64 = 1 << 20;

/// The name of the lock file in a `state_dir`.
pub const LOCK_FILE: &str = "server.lock";

/// The files under a `state_dir`, and its lock (shared by the clones).
#[derive(Debug, Clone)]
pub struct Store {
    dir: PathBuf,
    /// Held from [`Store::open`] until [`Store::release`]; `None` after it.
    lock: Arc<Mutex<Option<FileLock>>>,
}

/// What a store held when the server started.
#[derive(Debug, Default)]
pub struct Loaded {
    /// The records.
    pub sheds: Vec<Shed>,
    /// The delete markers.
    pub deletes: Vec<DeleteMarker>,
    /// Files that could not be read, with why (they are left in place).
    pub unreadable: Vec<(PathBuf, String)>,
}

impl Store {
    /// The store in `dir` (made when missing), its lock taken without waiting: an error naming the
    /// directory when another server (or another store of this process) holds it.
    pub fn open(dir: impl Into<PathBuf>) -> std::io::Result<Store> {
        let dir = dir.into();
        private_dir(&dir)?;
        let lock_path = dir.join(LOCK_FILE);
        let held = FileLock::try_lock(&lock_path).map_err(|e| match e {
            FsError::Busy { .. } => std::io::Error::new(
                std::io::ErrorKind::ResourceBusy,
                format!(
                    "{} is in use by another shed-server (it holds {}); run one server per remote.state_dir",
                    dir.display(),
                    lock_path.display()
                ),
            ),
            other => std::io::Error::from(other),
        })?;
        private_dir(&dir.join("sheds"))?;
        private_dir(&dir.join("deletes"))?;
        Ok(Store {
            dir,
            lock: Arc::new(Mutex::new(Some(held))),
        })
    }

    /// Lets the directory go, as a server that exits does: the next server may open it, and this
    /// store writes nothing more.
    pub fn release(&self) {
        lock(&self.lock).take();
    }

    /// The lock, checked to be still this store's, held while the caller writes (so that
    /// [`Store::release`] never lets go in the middle of a write).
    fn held(&self) -> std::io::Result<MutexGuard<'_, Option<FileLock>>> {
        let held = lock(&self.lock);
        let Some(l) = &*held else {
            return Err(std::io::Error::other(format!(
                "{} was let go: this server stopped",
                self.dir.display()
            )));
        };
        // Someone removed or replaced the lock file: another server may hold the directory now.
        l.still_held().map_err(std::io::Error::from)?;
        Ok(held)
    }

    /// The file of `id` in the subdirectory `kind` (`sheds` or `deletes`).
    fn path(&self, kind: &str, id: &str) -> PathBuf {
        self.dir.join(kind).join(format!("{id}.json"))
    }

    /// Writes `shed`'s record.
    pub fn save_shed(&self, shed: &Shed) -> std::io::Result<()> {
        let _held = self.held()?;
        write_atomic(&self.path("sheds", &shed.id), shed)
    }

    /// Removes shed `id`'s record.
    pub fn remove_shed(&self, id: &str) -> std::io::Result<()> {
        let _held = self.held()?;
        remove(&self.path("sheds", id))
    }

    /// Writes a delete marker.
    pub fn save_marker(&self, m: &DeleteMarker) -> std::io::Result<()> {
        let _held = self.held()?;
        write_atomic(&self.path("deletes", &m.id), m)
    }

    /// Removes shed `id`'s delete marker.
    pub fn remove_marker(&self, id: &str) -> std::io::Result<()> {
        let _held = self.held()?;
        remove(&self.path("deletes", id))
    }

    /// Reads every record and marker (and removes the temporary files of unfinished writes, which
    /// only the lock's holder may do). Refused when the lock was lost since [`Store::open`] (its
    /// file removed or replaced): another server may hold the directory, and a server that started
    /// on no records could write none of what it does.
    pub fn load(&self) -> std::io::Result<Loaded> {
        let mut out = Loaded::default();
        let _held = self.held()?;
        let dir = |kind| self.dir.join(kind);
        read_all(&dir("sheds"), &mut out.sheds, &mut out.unreadable);
        read_all(&dir("deletes"), &mut out.deletes, &mut out.unreadable);
        Ok(out)
    }
}

/// Makes `dir` owner-only when missing, and refuses an existing one that another user owns or may
/// write ([`orca::fs::create_private_dir`]): whoever may write `deletes/` could plant a marker
/// naming a VM, which the server would destroy, and whoever may write `sheds/` could hand the
/// server records of sheds it never made.
fn private_dir(dir: &Path) -> std::io::Result<()> {
    orca::fs::create_private_dir(dir).map_err(std::io::Error::from)
}

/// The bytes of the record at `path`, read only when it is a file of its own of at most
/// [`MAX_RECORD`] bytes ([`orca::fs::read_regular`]): a symbolic link is not followed (it could lead
/// to another user's file), and a FIFO or a device is not read (it could block the start-up, or
/// never end). The error says why, without the path, which the caller names.
fn read_record(path: &Path) -> Result<Vec<u8>, String> {
    orca::fs::read_regular(path, MAX_RECORD, "a record").map_err(|e| match e {
        FsError::Io { source, .. } => source.to_string(),
        other => other.to_string(),
    })
}

fn remove(path: &Path) -> std::io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

fn write_atomic<T: Serialize>(path: &Path, value: &T) -> std::io::Result<()> {
    let bytes = serde_json::to_vec_pretty(value).map_err(std::io::Error::other)?;
    orca::fs::write_atomic(path, &bytes).map_err(std::io::Error::from)
}

fn read_all<T: DeserializeOwned>(dir: &Path, into: &mut Vec<T>, bad: &mut Vec<(PathBuf, String)>) {
    // The temporary files of writes that never finished (the records they were to replace are
    // still there); the server holds the directory's lock, so none is a write in flight.
    if let Err(e) = orca::fs::remove_stale_temps_in(dir) {
        tracing::warn!(error = %e, "could not remove the temporary files of unfinished writes");
    }
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    for path in paths {
        match path.extension().and_then(|e| e.to_str()) {
            Some("json") => {}
            // A temporary file as earlier versions named it (`<id>.tmp<n>`), of a write that
            // never finished: the record it was to replace is still there.
            Some(e) if e.starts_with("tmp") => {
                let _ = fs::remove_file(&path);
                continue;
            }
            _ => continue,
        }
        match read_record(&path).and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
        {
            Ok(v) => into.push(v),
            Err(e) => bad.push((path, e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{CreateStage, Status};

    fn shed(id: &str) -> Shed {
        let now = chrono::Utc::now();
        Shed {
            id: id.into(),
            name: "a".into(),
            client: "local".into(),
            size: "standard".into(),
            machine_type: "amd64-small".into(),
            cpus: 2,
            memory_mb: 8192,
            disk_gb: 50,
            image: "default".into(),
            network_profile: "default".into(),
            max_run_secs: 3600,
            status: Status::Starting,
            reason: None,
            vm_name: format!("shed-t-{id}"),
            vm_id: None,
            create: CreateStage::NotSent,
            op: None,
            queued: None,
            start_sent: false,
            vm_gone: false,
            foreign_labels: false,
            created_at: now,
            updated_at: now,
            detail: None,
        }
    }

    #[test]
    fn a_second_store_on_one_directory_is_refused_until_the_first_lets_go() {
        let dir = tempfile::tempdir().unwrap();
        let first = Store::open(dir.path()).unwrap();
        let e = Store::open(dir.path()).unwrap_err();
        let named = format!("{} is in use", dir.path().display());
        assert!(e.to_string().contains(&named), "{e}");

        first.release();
        assert!(
            first.save_shed(&shed("aaaaaaaaaa")).is_err(),
            "a store that let go writes nothing"
        );
        let second = Store::open(dir.path()).unwrap();
        second.save_shed(&shed("aaaaaaaaaa")).unwrap();
        assert_eq!(second.load().unwrap().sheds.len(), 1);
    }

    /// Another local user who may write `deletes/` could plant a marker naming any VM, which the
    /// server would destroy at start-up: such a folder is refused at open, naming it.
    #[cfg(unix)]
    #[test]
    fn a_state_folder_open_to_other_users_is_refused_at_open() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let deletes = dir.path().join("deletes");
        fs::create_dir(&deletes).unwrap();
        fs::set_permissions(&deletes, fs::Permissions::from_mode(0o777)).unwrap();
        let e = Store::open(dir.path()).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied, "{e}");
        let named = deletes.display().to_string();
        assert!(e.to_string().contains(&named), "{e}");
        assert!(e.to_string().contains("open to other users"), "{e}");

        fs::set_permissions(&deletes, fs::Permissions::from_mode(0o700)).unwrap();
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o770)).unwrap();
        let e = Store::open(dir.path()).unwrap_err();
        assert!(e.to_string().contains("open to other users"), "{e}");
    }

    /// A record is read only as a file of its own: a symbolic link planted in its place (to another
    /// user's file, or to a device that never ends) and an oversized file are reported, not read.
    #[cfg(unix)]
    #[test]
    fn a_record_that_is_a_link_or_too_large_is_reported_and_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let real = dir.path().join("elsewhere.json");
        fs::write(&real, serde_json::to_vec(&shed("aaaaaaaaaa")).unwrap()).unwrap();
        let link = dir.path().join("sheds").join("aaaaaaaaaa.json");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let mut big = serde_json::to_vec(&shed("bbbbbbbbbb")).unwrap();
        big.resize(big.len() + MAX_RECORD as usize, b' ');
        fs::write(dir.path().join("sheds").join("bbbbbbbbbb.json"), big).unwrap();
        let loaded = store.load().unwrap();
        assert!(loaded.sheds.is_empty(), "{:?}", loaded.sheds);
        assert_eq!(loaded.unreadable.len(), 2, "{:?}", loaded.unreadable);
    }

    #[test]
    fn records_round_trip_and_leftover_temporaries_are_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        store.save_shed(&shed("aaaaaaaaaa")).unwrap();
        let mut s = shed("aaaaaaaaaa");
        s.status = Status::Running;
        store.save_shed(&s).unwrap();
        fs::write(dir.path().join("sheds").join("bbbbbbbbbb.tmp123"), b"{half").unwrap();
        fs::write(dir.path().join("sheds").join("cccccccccc.json"), b"{half").unwrap();
        let loaded = store.load().unwrap();
        assert_eq!(loaded.sheds, vec![s]);
        assert_eq!(loaded.unreadable.len(), 1, "the broken record is reported");
        assert!(!dir.path().join("sheds").join("bbbbbbbbbb.tmp123").exists());
        store.remove_shed("aaaaaaaaaa").unwrap();
        store.remove_shed("aaaaaaaaaa").unwrap();
        assert!(store.load().unwrap().sheds.is_empty());
    }
}
