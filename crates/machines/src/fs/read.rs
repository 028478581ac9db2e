//! Opening and reading a file that another process may have placed: never through a symbolic link,
//! only a regular file, and read to a bound.

use std::fs::{File, Metadata, OpenOptions};
use std::io::Read;
use std::path::Path;

use super::FsError;

/// Opens `path` with `o`, never through a symbolic link, and only when it is a regular file, with
/// its metadata: `what` names the file in a refusal (`a lock file`). On Unix the open does not
/// wait for a writer either: a FIFO placed at the path would otherwise block it.
pub(super) fn open_regular(
    path: &Path,
    mut o: OpenOptions,
    what: &str,
) -> Result<(File, Metadata), FsError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
    }
    let refused = |why: String| {
        let e = std::io::Error::new(std::io::ErrorKind::InvalidInput, why);
        FsError::io(path, "open", e)
    };
    let file = o.open(path).map_err(|e| {
        #[cfg(unix)]
        if e.raw_os_error() == Some(libc::ELOOP) {
            return refused(format!("a symbolic link, which {what} never is; refused"));
        }
        FsError::io(path, "open", e)
    })?;
    let meta = file.metadata().map_err(|e| FsError::io(path, "stat", e))?;
    if !meta.is_file() {
        return Err(refused(format!(
            "not a regular file, which {what} always is; refused"
        )));
    }
    Ok((file, meta))
}

/// The bytes of the file at `path` (`what` names it in a refusal), read only when it is a regular
/// file of at most `max` bytes, never through a symbolic link: a link could lead to another user's
/// file, a FIFO or a device could block the read or never end, and a file larger than any this
/// program writes would only cost memory.
///
/// ```
/// let dir = tempfile::tempdir()?;
/// let record = dir.path().join("record.json");
/// std::fs::write(&record, b"{}")?;
/// assert_eq!(orca_machines::fs::read_regular(&record, 1024, "a record")?, b"{}");
/// let e = orca_machines::fs::read_regular(&record, 1, "a record").unwrap_err();
/// assert!(e.to_string().contains("larger than 1 bytes"), "{e}");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn read_regular(path: impl AsRef<Path>, max: u64, what: &str) -> Result<Vec<u8>, FsError> {
    let path = path.as_ref();
    let mut o = OpenOptions::new();
    o.read(true);
    let (file, _) = open_regular(path, o, what)?;
    read_to_bound(path, file, max, what)
}

/// The bytes of the file at `path`, read as [`read_regular`] reads, and only when it is this user's
/// and none of the permission bits `forbidden` is set (`0o077`: its owner's alone): a file that holds
/// credentials must be one that nobody else wrote or can read. Both are checked on the opened file,
/// so a file swapped in after the check is never the one read. Where files have no Unix owner and
/// mode (not Unix), it reads as [`read_regular`] does, so that a caller needs no platform switch.
///
/// ```
/// # #[cfg(unix)] {
/// use std::os::unix::fs::PermissionsExt;
/// let dir = tempfile::tempdir()?;
/// let key = dir.path().join("key.json");
/// std::fs::write(&key, b"{}")?;
/// std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644))?;
/// let e = orca_machines::fs::read_private(&key, 1024, 0o077, "a key").unwrap_err();
/// assert!(e.to_string().contains("open to other users"), "{e}");
/// std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600))?;
/// assert_eq!(orca_machines::fs::read_private(&key, 1024, 0o077, "a key")?, b"{}");
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn read_private(
    path: impl AsRef<Path>,
    max: u64,
    forbidden: u32,
    what: &str,
) -> Result<Vec<u8>, FsError> {
    let path = path.as_ref();
    let mut o = OpenOptions::new();
    o.read(true);
    let (file, _meta) = open_regular(path, o, what)?;
    #[cfg(unix)]
    super::check_private(path, &_meta, forbidden)?;
    #[cfg(not(unix))]
    let _ = forbidden;
    read_to_bound(path, file, max, what)
}

/// Reads `file` (at `path`) whole when it holds at most `max` bytes.
fn read_to_bound(path: &Path, file: File, max: u64, what: &str) -> Result<Vec<u8>, FsError> {
    let mut bytes = Vec::new();
    file.take(max.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| FsError::io(path, "read", e))?;
    if bytes.len() as u64 > max {
        let e = std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("larger than {max} bytes, which {what} never is; not read"),
        );
        return Err(FsError::io(path, "read", e));
    }
    Ok(bytes)
}

#[cfg(test)]
#[cfg(unix)]
mod tests {
    use super::*;

    #[test]
    fn a_link_a_fifo_and_an_oversized_file_are_refused_naming_why() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        std::fs::write(&real, b"12345").unwrap();
        assert_eq!(read_regular(&real, 5, "a record").unwrap(), b"12345");
        let e = read_regular(&real, 4, "a record").unwrap_err().to_string();
        assert!(e.contains("larger than 4 bytes"), "{e}");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let e = read_regular(&link, 5, "a record").unwrap_err().to_string();
        assert!(
            e.contains("a symbolic link, which a record never is"),
            "{e}"
        );
        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        // Returns at once: no writer is waited for.
        let e = read_regular(&fifo, 5, "a record").unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
    }
}
