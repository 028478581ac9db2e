//! [`FileLock`]: an exclusive lock on a lock file that nobody can swap from under its holder.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::FsError;

/// How many times a lock whose file was replaced between its opening and its locking is taken
/// again before giving up (each time is a race lost to a process that removes the file).
const TAKES: usize = 16;

/// The first and the longest pause of [`FileLock::lock`] between two tries.
const FIRST_PAUSE: Duration = Duration::from_millis(1);
const LONGEST_PAUSE: Duration = Duration::from_millis(25);

/// An exclusive lock on a lock file, held until dropped (closing the file releases it).
///
/// The lock is an `flock` on the file's open file description, so a second opener conflicts with
/// it whether it is another process or this one. After locking, the holder checks that the path
/// still names the very file it locked (same device and inode), else it takes the lock again on the
/// file now there. [`FileLock::still_held`] repeats that check at any time: a holder calls it
/// before every write and stops on an error, so that an operator who removes the lock file (which
/// lets a newcomer lock a new file at the same path) never leaves two processes acting.
///
/// The lock file is opened without following a symbolic link and must be a regular file; a new one
/// is made owner-only ([`super::PRIVATE_MODE`]). It is never removed: removing it is exactly what would let
/// a newcomer lock another file while this holder still runs.
///
/// Dropping it unlocks the file, then closes it. Closing alone would not always release the lock:
/// a child process that another thread of this process starts (fork, then exec) holds a copy of
/// every descriptor until its exec, and an `flock` stays held while any copy of the descriptor
/// that took it is open, so the holder's next take would be refused by its own lock.
pub struct FileLock {
    /// Held, never read: dropping it releases the lock.
    _file: Locked,
    path: PathBuf,
    id: FileId,
}

/// A lock file that this process has locked; dropping it unlocks the file before closing it (see
/// [`FileLock`]: a forked child's copy of the descriptor would keep the lock held otherwise).
struct Locked(File);

impl Drop for Locked {
    fn drop(&mut self) {
        // An unlock that fails leaves the release to the close that follows.
        let _ = self.0.unlock();
    }
}

impl std::fmt::Debug for FileLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileLock")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl FileLock {
    /// The lock file of `target`: `<target>.lock` beside it.
    pub fn path_for(target: impl AsRef<Path>) -> PathBuf {
        let mut s = target.as_ref().as_os_str().to_os_string();
        s.push(".lock");
        PathBuf::from(s)
    }

    /// Takes the lock at `path` (made when missing) without waiting: [`FsError::Busy`] naming the
    /// path when another holder has it.
    pub fn try_lock(path: impl AsRef<Path>) -> Result<FileLock, FsError> {
        take(path.as_ref(), Wait::No)
    }

    /// Takes the lock at `path`, waiting for another holder to let go without blocking the async
    /// runtime: it tries again after a short sleep (1 ms, growing to 25 ms) on tokio's clock. To give
    /// up after a while, wrap it in `tokio::time::timeout`; dropping the future takes nothing.
    pub async fn lock(path: impl AsRef<Path>) -> Result<FileLock, FsError> {
        let path = path.as_ref();
        let mut pause = FIRST_PAUSE;
        loop {
            match take(path, Wait::No) {
                Err(FsError::Busy { .. }) => {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(LONGEST_PAUSE);
                }
                taken => return taken,
            }
        }
    }

    /// Takes the lock at `path`, blocking this thread until another holder lets go. For synchronous
    /// code only: in async code use [`FileLock::lock`].
    pub fn lock_blocking(path: impl AsRef<Path>) -> Result<FileLock, FsError> {
        take(path.as_ref(), Wait::Block)
    }

    /// The lock file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `Ok` while the path still names the file this holder locked; [`FsError::Replaced`] naming
    /// the path when the file was removed or another file put in its place (another process may
    /// hold the lock now). One `lstat`: cheap enough to call before every write.
    pub fn still_held(&self) -> Result<(), FsError> {
        let what = match FileId::at(&self.path)? {
            Some(id) if id == self.id => return Ok(()),
            Some(_) => "replaced by another file",
            None => "removed",
        };
        Err(FsError::Replaced {
            path: self.path.clone(),
            what,
        })
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Wait {
    No,
    Block,
}

fn take(path: &Path, wait: Wait) -> Result<FileLock, FsError> {
    for _ in 0..TAKES {
        let file = open(path)?;
        match wait {
            Wait::Block => file.lock().map_err(|e| FsError::io(path, "lock", e))?,
            Wait::No => match file.try_lock() {
                Ok(()) => {}
                Err(std::fs::TryLockError::WouldBlock) => {
                    return Err(FsError::Busy {
                        path: path.to_path_buf(),
                    })
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(FsError::io(path, "lock", e)),
            },
        }
        let file = Locked(file);
        let id = FileId::of(&file.0).map_err(|e| FsError::io(path, "stat", e))?;
        // Between the open and the lock, another process may have removed the file (and made a new
        // one): the lock is then on a file nobody else will ever open. Take the one now there.
        if FileId::at(path)? == Some(id) {
            return Ok(FileLock {
                _file: file,
                path: path.to_path_buf(),
                id,
            });
        }
    }
    Err(FsError::Replaced {
        path: path.to_path_buf(),
        what: "removed or replaced again and again while being locked",
    })
}

/// Opens (or makes, owner-only) the lock file at `path`: never through a symbolic link, and
/// never anything but a regular file (a FIFO someone placed there would block the open).
fn open(path: &Path) -> Result<File, FsError> {
    let mut o = OpenOptions::new();
    o.write(true).create(true).truncate(false);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.mode(super::PRIVATE_MODE);
    }
    let (file, meta) = super::read::open_regular(path, o, "a lock file")?;
    #[cfg(not(unix))]
    let _ = meta;
    // Lock files are made owner-only: one that another user owns, or that any user may open, is
    // not one of this user's, and whoever can open it can hold its lock forever. The group's bits
    // are the administrator's (a volume shared by a group, as Kubernetes' fsGroup makes one).
    #[cfg(unix)]
    super::check_private(path, &meta, 0o006)?;
    Ok(file)
}

/// A file's identity: its device and inode (on other systems than Unix, only that it exists).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileId {
    dev: u64,
    ino: u64,
}

impl FileId {
    #[cfg(unix)]
    fn from_meta(m: &std::fs::Metadata) -> Self {
        use std::os::unix::fs::MetadataExt;
        FileId {
            dev: m.dev(),
            ino: m.ino(),
        }
    }

    #[cfg(not(unix))]
    fn from_meta(_: &std::fs::Metadata) -> Self {
        FileId { dev: 0, ino: 0 }
    }

    fn of(file: &File) -> std::io::Result<Self> {
        file.metadata().map(|m| Self::from_meta(&m))
    }

    /// The identity of what `path` names now (a symbolic link is not followed); `None` when
    /// nothing is there.
    fn at(path: &Path) -> Result<Option<Self>, FsError> {
        match std::fs::symlink_metadata(path) {
            Ok(m) => Ok(Some(Self::from_meta(&m))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(FsError::io(path, "stat", e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lock_path_is_beside_the_file() {
        assert_eq!(
            FileLock::path_for("/var/lib/x/rec.json"),
            PathBuf::from("/var/lib/x/rec.json.lock")
        );
        assert_eq!(FileLock::path_for("rec"), PathBuf::from("rec.lock"));
    }

    #[test]
    fn debug_names_the_path_only() {
        let dir = tempfile::tempdir().unwrap();
        let l = FileLock::try_lock(dir.path().join("a.lock")).unwrap();
        let d = format!("{l:?}");
        assert!(d.contains("a.lock") && d.starts_with("FileLock"), "{d}");
    }
}
