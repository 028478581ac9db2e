//! The files of the stado home, written so that a reader never sees half of one: replaced whole by
//! orca's atomic write ([`write_json`]), or, for a file that must not exist yet, written only when
//! nothing is there ([`write_new`]).

use std::path::Path;

use crate::error::Failure;

/// The largest file of the home stado reads: far above any registry or profile it writes.
pub const MAX_FILE: u64 = 16 << 20;

/// Makes `dir` (and its parents) when missing; a new folder is owner-only (0700).
pub fn make_private_dir(dir: &Path) -> Result<(), Failure> {
    orca::fs::create_private_dir(dir).map_err(|e| Failure::new(e.to_string()))
}

/// Writes `bytes` to `path` whole, unless something is at `path` already: then nothing is written and
/// the answer is `false` ([`orca::fs::write_new`]).
pub fn write_new(path: &Path, bytes: &[u8], mode: u32) -> Result<bool, Failure> {
    make_private_dir(path.parent().unwrap_or(Path::new(".")))?;
    orca::fs::write_new(path, bytes, mode).map_err(|e| Failure::new(e.to_string()))
}

/// Reads the JSON file at `path` as `T`; a missing file is `T::default()`. Read only as a regular
/// file of at most [`MAX_FILE`] bytes, never through a symbolic link ([`orca::fs::read_regular`]):
/// a link could lead to another user's file, and a FIFO or a huge file would block or fill the read.
pub fn read_json<T: serde::de::DeserializeOwned + Default>(path: &Path) -> Result<T, Failure> {
    match orca::fs::read_regular(path, MAX_FILE, "a file of the stado home") {
        Ok(bytes) if bytes.iter().all(u8::is_ascii_whitespace) => Ok(T::default()),
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map_err(|e| Failure::new(format!("{}: not valid: {e}", path.display()))),
        Err(orca::fs::FsError::Io { source, .. })
            if source.kind() == std::io::ErrorKind::NotFound =>
        {
            Ok(T::default())
        }
        Err(e) => Err(Failure::new(e.to_string())),
    }
}

/// Writes `value` as pretty JSON to `path`, atomically and owner-only (0600).
pub fn write_json<T: serde::Serialize>(path: &Path, value: &T) -> Result<(), Failure> {
    let mut bytes = serde_json::to_vec_pretty(value)
        .map_err(|e| Failure::new(format!("{}: {e}", path.display())))?;
    bytes.push(b'\n');
    make_private_dir(path.parent().unwrap_or(Path::new(".")))?;
    orca::fs::write_atomic(path, &bytes).map_err(|e| Failure::new(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file of the home is read only as a regular file of its own, to a bound: a link could
    /// lead to another user's file, and a FIFO or a huge file would block or fill the read.
    #[cfg(unix)]
    #[test]
    fn a_link_a_fifo_and_an_oversized_file_are_refused_and_a_missing_one_is_empty() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real.json");
        std::fs::write(&real, br#"{"a": 1}"#).unwrap();
        let link = dir.path().join("profile.json");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let e = read_json::<serde_json::Value>(&link).unwrap_err();
        assert!(e.message().contains("symbolic link"), "{e}");
        assert!(e.message().contains("profile.json"), "{e}");
        let fifo = dir.path().join("registry.json");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        let e = read_json::<serde_json::Value>(&fifo).unwrap_err();
        assert!(e.message().contains("not a regular file"), "{e}");
        let big = dir.path().join("big.json");
        let mut bytes = b"[".to_vec();
        bytes.resize(MAX_FILE as usize + 1, b' ');
        bytes.push(b']');
        std::fs::write(&big, &bytes).unwrap();
        let e = read_json::<serde_json::Value>(&big).unwrap_err();
        assert!(e.message().contains("larger than"), "{e}");
        let missing: serde_json::Value = read_json(&dir.path().join("none.json")).unwrap();
        assert_eq!(missing, serde_json::Value::Null);
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
