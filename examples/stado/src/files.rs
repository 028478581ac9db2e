//! The files of the stado home, written so that a reader never sees half of one: replaced whole by
//! orca's atomic write ([`write_atomic`]), or, for a file that must not exist yet ([`write_new`]), a
//! temporary file beside the target, created exclusively (never writing through a file or link
//! placed there), synced, then linked to the target; the folder is synced after.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::Failure;

/// Makes `dir` (and its parents) when missing; a new folder is owner-only (0700).
pub fn make_private_dir(dir: &Path) -> Result<(), Failure> {
    orca::fs::create_private_dir(dir).map_err(|e| Failure::new(e.to_string()))
}

/// Writes `bytes` to `path` atomically, giving it `mode` ([`orca::fs::write_atomic_mode`]).
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> Result<(), Failure> {
    make_private_dir(path.parent().unwrap_or(Path::new(".")))?;
    orca::fs::write_atomic_mode(path, bytes, mode).map_err(|e| Failure::new(e.to_string()))
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
