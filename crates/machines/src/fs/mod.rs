//! Files that a program shares with its next run and with other processes: one atomic write
//! ([`write_atomic`]) and one lock that nobody can swap from under its holder ([`FileLock`]).
//!
//! A program on orca keeps state in files (a scaler's record, a server's cache, a CLI's home, the
//! in-memory provider's simulated cloud), and the state matters: what a scaler's record forgets, it
//! deletes. So every such file is written whole or not at all, and a process that acts on it holds
//! its lock, checked before every write.
//!
//! - [`write_atomic`] (and [`write_atomic_mode`], [`write_atomic_with`]): a temporary file in the
//!   same folder, created exclusively (a symbolic link someone placed at its name is never
//!   followed), written, synced, given its mode, renamed over the target, and the folder synced. A
//!   reader sees the old file or the new one, never half of one; a write that fails leaves the old
//!   file and removes its temporary file. The mode is owner-only ([`PRIVATE_MODE`]) unless the
//!   caller says otherwise: a record or a state file names machines, addresses and ids.
//! - [`write_new`]: the same temporary file, linked to the target only when nothing is there yet
//!   (a key or a pin that must never be replaced); it answers whether it wrote.
//! - [`remove_stale_temps`] and [`remove_stale_temps_in`]: the temporary files that a writer which
//!   crashed before its rename left behind (never read as the file), removed by the next holder of
//!   the file's lock.
//! - [`read_regular`]: a file read only when it is a regular file within a bound, never through a
//!   symbolic link (a record another process may have placed); [`read_private`] the same, and only
//!   when the file is this user's and closed to others (one that holds credentials).
//! - [`FileLock`]: an exclusive `flock` on a lock file (`<file>.lock`, [`FileLock::path_for`])
//!   that is verified to be the file at the lock's path after it is taken, and whose holder can
//!   check cheaply ([`FileLock::still_held`]) that nobody removed or replaced the lock file since:
//!   an operator who deletes a lock file would otherwise let a second process lock a new file at
//!   the same path while the first still runs, and both would act. [`FileLock::try_lock`] refuses
//!   at once when another holds it, [`FileLock::lock`] waits without blocking the async runtime,
//!   [`FileLock::lock_blocking`] waits in synchronous code.
//!
//! ```
//! use orca_machines::fs::{write_atomic, FileLock};
//! let dir = tempfile::tempdir()?;
//! let record = dir.path().join("record.json");
//! let lock = FileLock::try_lock(FileLock::path_for(&record))?;
//! let second = FileLock::try_lock(FileLock::path_for(&record)).unwrap_err();
//! assert!(second.is_busy() && second.to_string().contains("record.json.lock"), "{second}");
//!
//! lock.still_held()?; // before every write: stop when another process may hold the lock now
//! write_atomic(&record, b"{\"machines\": []}")?;
//! assert_eq!(std::fs::read(&record)?, b"{\"machines\": []}");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod lock;
#[cfg(unix)]
mod program;
mod read;
mod write;

use std::path::{Path, PathBuf};

pub use lock::FileLock;
#[cfg(unix)]
pub use program::check_program;
pub use read::read_private;
pub use read::read_regular;
pub use write::{
    create_private_dir, remove_stale_temps, remove_stale_temps_in, write_atomic, write_atomic_mode,
    write_atomic_with, write_new,
};

/// The mode of the files [`write_atomic`] writes and of lock files: read and write for the owner
/// only.
pub const PRIVATE_MODE: u32 = 0o600;

/// What went wrong with a shared file. Every variant names the path.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FsError {
    /// Another holder has the lock at `path` ([`FileLock::try_lock`]).
    #[error("{} is locked by another process", .path.display())]
    Busy {
        /// The lock file.
        path: PathBuf,
    },
    /// The lock file at `path` is no longer the file this holder locked: it was removed, or
    /// replaced by another file, so that another process may hold the lock now
    /// ([`FileLock::still_held`]).
    #[error("the lock file {} was {what} while this process held it: another process may hold the lock now, so this one stops", .path.display())]
    Replaced {
        /// The lock file.
        path: PathBuf,
        /// What happened to it (`removed`, `replaced by another file`).
        what: &'static str,
    },
    /// The folder or lock file at `path` is another user's, or open to other users
    /// ([`create_private_dir`], [`FileLock`]): whoever else owns it, or may write it, could replace
    /// the files in it or hold the lock forever, so it is not used.
    #[error("{} is {why}; refused: another user could replace what is in it or hold it (use one of this user's own, writable by no one else)", .path.display())]
    NotPrivate {
        /// The folder or file.
        path: PathBuf,
        /// Whose it is, or its mode.
        why: String,
    },
    /// The program at `path`, or the folder it is in, is another user's (neither this user nor
    /// root), or writable by others than its owner ([`check_program`]): whoever else owns it or may
    /// write it could swap the program for their own, which would then run with what this process
    /// hands it.
    #[error("{} is {why}; refused as a program to run: another user could swap it for their own (use a program and folder of this user or root, writable by no one else)", .path.display())]
    NotTrusted {
        /// The program or its folder.
        path: PathBuf,
        /// Whose it is, or its mode.
        why: String,
    },
    /// An operation on `path` failed.
    #[error("{} ({op}): {source}", .path.display())]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The operation (`open`, `write`, `sync`, `rename`, `lock`, ...).
        op: &'static str,
        /// The system's error.
        source: std::io::Error,
    },
}

impl FsError {
    /// The file the error is about.
    pub fn path(&self) -> &Path {
        match self {
            FsError::Busy { path }
            | FsError::Replaced { path, .. }
            | FsError::NotPrivate { path, .. }
            | FsError::NotTrusted { path, .. }
            | FsError::Io { path, .. } => path,
        }
    }

    /// Whether another holder has the lock.
    pub fn is_busy(&self) -> bool {
        matches!(self, FsError::Busy { .. })
    }

    /// Whether the lock file was removed or replaced while held.
    pub fn is_replaced(&self) -> bool {
        matches!(self, FsError::Replaced { .. })
    }

    /// This error as orca's [`crate::Error`] (`Other`, this error kept as its source). A method,
    /// not a `From`: a second conversion into orca's error would leave `?` in existing closures
    /// without a type to infer.
    pub fn into_error(self) -> crate::Error {
        crate::Error::other(self.to_string()).with_source(self)
    }

    pub(crate) fn io(path: &Path, op: &'static str, source: std::io::Error) -> Self {
        FsError::Io {
            path: path.to_path_buf(),
            op,
            source,
        }
    }
}

impl From<FsError> for std::io::Error {
    fn from(e: FsError) -> Self {
        let kind = match &e {
            FsError::Busy { .. } => std::io::ErrorKind::WouldBlock,
            FsError::Replaced { .. } => std::io::ErrorKind::Other,
            FsError::NotPrivate { .. } | FsError::NotTrusted { .. } => {
                std::io::ErrorKind::PermissionDenied
            }
            FsError::Io { source, .. } => source.kind(),
        };
        std::io::Error::new(kind, e)
    }
}

/// Refuses what `meta` describes (at `path`) unless it is this user's and none of the permission
/// bits `forbidden` is set.
#[cfg(unix)]
pub(crate) fn check_private(
    path: &Path,
    meta: &std::fs::Metadata,
    forbidden: u32,
) -> Result<(), FsError> {
    use std::os::unix::fs::MetadataExt;
    let me = rustix::process::geteuid().as_raw();
    let mode = meta.mode() & 0o7777;
    let why = if meta.uid() != me {
        format!(
            "owned by another user (uid {}, this one is uid {me})",
            meta.uid()
        )
    } else if mode & forbidden != 0 {
        format!("open to other users (mode {mode:o})")
    } else {
        return Ok(());
    };
    Err(FsError::NotPrivate {
        path: path.to_path_buf(),
        why,
    })
}

/// The folder of `path` (`.` for a bare file name).
pub(crate) fn folder(path: &Path) -> PathBuf {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    }
}
