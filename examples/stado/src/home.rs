//! The stado home: the folder that holds the profile, the registry, the fleet keys, the pinned host
//! keys and (for `--provider fake`) the simulated cloud and fleet.
//!
//! Each home has an id, minted when the home is first opened and kept in its profile (`home_id`):
//! the machines a home makes are made under the orca owner `stado-<home id>` and carry the label
//! `stado-home=<home id>`, so that two operators with homes of their own in one resource group never
//! adopt or delete each other's hosts.
//!
//! Every file is written atomically (a temporary file in the same folder, synced, then renamed over
//! the old one), so a reader sees the old file or the new one, never half of one. A command that
//! writes a file first takes that file's exclusive lock ([`Home::lock`]) with a *try*: a second stado
//! writing the same file at once is refused, never merged.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::Failure;

/// The environment variable that chooses the stado home (the `--home` flag wins).
pub const HOME_ENV: &str = "STADO_HOME";

const PROFILE_FILE: &str = "profile.json";
const REGISTRY_FILE: &str = "registry.json";

/// The stado home folder and the paths of what it holds.
#[derive(Debug, Clone)]
pub struct Home {
    root: PathBuf,
    id: String,
}

impl Home {
    /// The home at `root` (made when missing, owner-only), with its id (minted and kept in the
    /// profile when it has none yet).
    pub fn open(root: impl Into<PathBuf>) -> Result<Home, Failure> {
        let root = root.into();
        make_private_dir(&root)?;
        let id =
            crate::profile::ensure_home_id(&root.join(PROFILE_FILE), &root.join(REGISTRY_FILE))?;
        Ok(Home { root, id })
    }

    /// The home's id: 12 of 0-9 and a-f, minted once and kept in the profile (`home_id`).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The home the flag, else `STADO_HOME`, else `~/.stado` names.
    pub fn resolve(flag: Option<PathBuf>) -> Result<Home, Failure> {
        let root =
            match flag {
                Some(p) => p,
                None => match std::env::var_os(HOME_ENV).filter(|v| !v.is_empty()) {
                    Some(p) => PathBuf::from(p),
                    None => match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
                        Some(h) => PathBuf::from(h).join(".stado"),
                        None => return Err(Failure::new(
                            "no stado home: give --home or set STADO_HOME (HOME is not set either)",
                        )),
                    },
                },
            };
        Home::open(root)
    }

    /// The folder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The profile: providers and bindings.
    pub fn profile_path(&self) -> PathBuf {
        self.root.join(PROFILE_FILE)
    }

    /// The registry: targets and `cloud_hosts`.
    pub fn registry_path(&self) -> PathBuf {
        self.root.join(REGISTRY_FILE)
    }

    /// The folder of fleet keys (`<name>` private, `<name>.pub` public).
    pub fn keys_dir(&self) -> PathBuf {
        self.root.join("keys")
    }

    /// The private half of target `name`'s fleet key.
    pub fn fleet_key(&self, name: &str) -> PathBuf {
        self.keys_dir().join(name)
    }

    /// The public half of target `name`'s fleet key.
    pub fn fleet_key_pub(&self, name: &str) -> PathBuf {
        self.keys_dir().join(format!("{name}.pub"))
    }

    /// The file pinning target `name`'s host key (an OpenSSH known_hosts file of one line).
    pub fn pinned_host_key(&self, name: &str) -> PathBuf {
        self.root.join("known_hosts").join(name)
    }

    /// The simulated cloud of `--provider fake`.
    pub fn fake_cloud_path(&self) -> PathBuf {
        self.root.join("fake-cloud.json")
    }

    /// The simulated fleet (host channel) of `--provider fake`.
    pub fn fake_fleet_path(&self) -> PathBuf {
        self.root.join("fake-fleet.json")
    }

    /// Takes the exclusive write lock of `file` (`<file>.lock`), or refuses at once when another
    /// process holds it.
    pub fn lock(&self, file: &Path) -> Result<WriteLock, Failure> {
        WriteLock::try_take(file)
    }
}

/// An exclusive write lock on one file of the home, held until dropped.
#[derive(Debug)]
pub struct WriteLock {
    _file: File,
    path: PathBuf,
}

impl WriteLock {
    /// Takes the lock of `file` without waiting.
    pub fn try_take(file: &Path) -> Result<WriteLock, Failure> {
        let path = lock_path(file);
        let f = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| Failure::new(format!("{}: {e}", path.display())))?;
        match f.try_lock() {
            Ok(()) => Ok(WriteLock { _file: f, path }),
            Err(std::fs::TryLockError::WouldBlock) => Err(Failure::new(format!(
                "{} is being written by another stado right now; nothing was changed (run again once it has finished)",
                file.display()
            ))
            .with_code("busy")),
            Err(std::fs::TryLockError::Error(e)) => {
                Err(Failure::new(format!("{}: {e}", path.display())))
            }
        }
    }

    /// Takes the lock of `file`, waiting for another holder to let go.
    pub fn wait(file: &Path) -> Result<WriteLock, Failure> {
        let path = lock_path(file);
        let f = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| Failure::new(format!("{}: {e}", path.display())))?;
        f.lock()
            .map_err(|e| Failure::new(format!("{}: {e}", path.display())))?;
        Ok(WriteLock { _file: f, path })
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

fn lock_path(file: &Path) -> PathBuf {
    let mut name = file.file_name().unwrap_or_default().to_os_string();
    name.push(".lock");
    file.with_file_name(name)
}

/// Makes `dir` (and its parents) when missing; a new folder is owner-only (0700).
pub fn make_private_dir(dir: &Path) -> Result<(), Failure> {
    if dir.is_dir() {
        return Ok(());
    }
    let mut b = std::fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        b.mode(0o700);
    }
    b.create(dir)
        .map_err(|e| Failure::new(format!("{}: {e}", dir.display())))
}

/// Writes `bytes` to `path` atomically: a temporary file beside it (mode `mode`), synced, renamed over
/// `path`, and the folder synced.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> Result<(), Failure> {
    let tmp = write_temp(path, bytes, mode)?;
    let renamed = std::fs::rename(&tmp, path)
        .map_err(|e| Failure::new(format!("{}: rename: {e}", path.display())));
    if renamed.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    renamed?;
    sync_parent(path);
    Ok(())
}

/// Writes `bytes` to `path` whole, unless something is at `path` already: then nothing is written and
/// the answer is `false`. A reader sees no file or the whole one (a temporary file beside it, synced,
/// linked to `path`, which fails when `path` exists, then removed).
pub fn write_new(path: &Path, bytes: &[u8], mode: u32) -> Result<bool, Failure> {
    let tmp = write_temp(path, bytes, mode)?;
    let linked = std::fs::hard_link(&tmp, path);
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => {
            sync_parent(path);
            Ok(true)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(Failure::new(format!("{}: link: {e}", path.display()))),
    }
}

/// A new temporary file beside `path` holding `bytes` (mode `mode`), synced. It is created
/// exclusively, so that no file or link placed there beforehand is written through.
fn write_temp(path: &Path, bytes: &[u8], mode: u32) -> Result<PathBuf, Failure> {
    static COUNTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let dir = path.parent().unwrap_or(Path::new("."));
    make_private_dir(dir)?;
    let io =
        |what: &str, e: std::io::Error| Failure::new(format!("{}: {what}: {e}", path.display()));
    let mut o = OpenOptions::new();
    o.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.mode(mode);
    }
    #[cfg(not(unix))]
    let _ = mode;
    let (tmp, mut f) = loop {
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut name = path.file_name().unwrap_or_default().to_os_string();
        name.push(format!(".tmp-{}-{n}", std::process::id()));
        let tmp = path.with_file_name(name);
        match o.open(&tmp) {
            Ok(f) => break (tmp, f),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(io("write", e)),
        }
    };
    let written = (|| {
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            // The process umask may have narrowed the mode asked for at creation.
            f.set_permissions(std::fs::Permissions::from_mode(mode))
                .map_err(|e| io("chmod", e))?;
        }
        f.write_all(bytes).map_err(|e| io("write", e))?;
        f.sync_all().map_err(|e| io("sync", e))
    })();
    match written {
        Ok(()) => Ok(tmp),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// Syncs the folder holding `path`, so that a rename or link in it survives a crash.
fn sync_parent(path: &Path) {
    if let Ok(d) = File::open(path.parent().unwrap_or(Path::new("."))) {
        let _ = d.sync_all();
    }
}

/// Reads the JSON file at `path` as `T`; a missing file is `T::default()`.
pub fn read_json<T: serde::de::DeserializeOwned + Default>(path: &Path) -> Result<T, Failure> {
    match std::fs::read(path) {
        Ok(bytes) if bytes.iter().all(u8::is_ascii_whitespace) => Ok(T::default()),
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map_err(|e| Failure::new(format!("{}: not valid: {e}", path.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(T::default()),
        Err(e) => Err(Failure::new(format!("{}: {e}", path.display()))),
    }
}

/// Writes `value` as pretty JSON to `path`, atomically.
pub fn write_json<T: serde::Serialize>(path: &Path, value: &T) -> Result<(), Failure> {
    let mut bytes = serde_json::to_vec_pretty(value)
        .map_err(|e| Failure::new(format!("{}: {e}", path.display())))?;
    bytes.push(b'\n');
    write_atomic(path, &bytes, 0o600)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_writer_is_refused_while_the_first_holds_the_lock() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::open(dir.path().join("h")).unwrap();
        let first = home.lock(&home.registry_path()).unwrap();
        let e = home.lock(&home.registry_path()).unwrap_err();
        assert_eq!(e.code(), "busy");
        assert!(
            e.to_string().contains("being written by another stado"),
            "{e}"
        );
        drop(first);
        assert!(home.lock(&home.registry_path()).is_ok());
    }

    #[test]
    fn a_home_keeps_the_id_it_was_given_and_another_home_gets_another() {
        let dir = tempfile::tempdir().unwrap();
        let first = Home::open(dir.path().join("a")).unwrap();
        assert_eq!(first.id().len(), 12);
        assert!(first
            .id()
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
        assert_eq!(Home::open(dir.path().join("a")).unwrap().id(), first.id());
        let other = Home::open(dir.path().join("b")).unwrap();
        assert_ne!(other.id(), first.id());
        let p = crate::profile::Profile::load(&first).unwrap();
        assert_eq!(p.get("home_id").as_deref(), Some(first.id()));
        assert_eq!(p.owner(), format!("stado-{}", first.id()));
    }

    #[test]
    fn a_home_made_before_ids_keeps_the_owner_its_hosts_were_made_under() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("old");
        make_private_dir(&root).unwrap();
        write_json(
            &root.join("profile.json"),
            &serde_json::json!({"providers": ["fake"]}),
        )
        .unwrap();
        write_json(
            &root.join("registry.json"),
            &serde_json::json!({"targets": [{"name": "h1", "address": "198.51.100.2", "cloud": {
                "provider": "fake", "location": "zone-a", "size": "amd64-small", "disk_gb": 64,
                "hourly_usd": 0.0832, "priced_in": "zone-a", "idle_minutes": 30,
                "address": "198.51.100.2", "vm_id": "m-00000001", "created_at": "2026-01-01T00:00:00Z"}}]}),
        )
        .unwrap();
        let home = Home::open(&root).unwrap();
        let p = crate::profile::Profile::load(&home).unwrap();
        assert_eq!(p.owner(), "stado", "its hosts stay reachable");
        assert_eq!(p.get("home_id").as_deref(), Some(home.id()));
    }

    #[test]
    fn a_new_file_is_written_whole_and_never_replaces_one() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("key");
        assert!(write_new(&p, b"first", 0o600).unwrap());
        assert!(!write_new(&p, b"second", 0o600).unwrap());
        assert_eq!(std::fs::read(&p).unwrap(), b"first");
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names, vec!["key".to_string()], "no temporary file is left");
    }

    #[test]
    fn atomic_writes_leave_no_temporary_file_and_set_the_mode() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f.json");
        write_json(&p, &serde_json::json!({"a": 1})).unwrap();
        write_json(&p, &serde_json::json!({"a": 2})).unwrap();
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names, vec!["f.json".to_string()]);
        let v: serde_json::Value = read_json(&p).unwrap();
        assert_eq!(v["a"], 2);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600);
        }
    }
}
