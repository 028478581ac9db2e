//! The one atomic file write, and the removal of what a crashed write left behind.

use std::ffi::{OsStr, OsString};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use super::{folder, FsError, PRIVATE_MODE};

/// How many names a temporary file tries before giving up (a name is taken only when a file of
/// that name exists already: a leftover, or a writer of the same file at the same moment).
const NAMES: usize = 8;

/// Writes `bytes` to `path` atomically, owner-only ([`PRIVATE_MODE`]): a reader sees the old file or
/// the new one, never a part of it, and a write that fails leaves the old file and no temporary
/// file. See [`write_atomic_with`].
pub fn write_atomic(path: impl AsRef<Path>, bytes: &[u8]) -> Result<(), FsError> {
    write_atomic_with(path, PRIVATE_MODE, |f| f.write_all(bytes))
}

/// [`write_atomic`] giving the new file `mode` (exactly: the process's umask does not narrow it;
/// ignored on systems other than Unix), for a file others must read (a public key: `0o644`).
pub fn write_atomic_mode(path: impl AsRef<Path>, bytes: &[u8], mode: u32) -> Result<(), FsError> {
    write_atomic_with(path, mode, |f| f.write_all(bytes))
}

/// Writes `path` atomically with what `write` puts into a new file (streaming a serializer into it,
/// for example), given `mode`:
///
/// 1. a temporary file in the same folder, `.<file>.tmp-<pid>.<random>`, created exclusively, so
///    that a symbolic link or a file someone placed at its name is never followed nor reused;
/// 2. `write` fills it; it is synced to the disk and given `mode` (exactly, whatever the umask);
/// 3. it is renamed over `path` (a symbolic link at `path` is replaced, not followed), and the folder
///    is synced so that the rename outlives a crash.
///
/// When a step fails, the error names the file and the step, `path` keeps its old content and the
/// temporary file is removed. A crash between 1 and 3 leaves the temporary file, never read as
/// `path`: the next holder of the file's lock removes it ([`remove_stale_temps`]).
pub fn write_atomic_with(
    path: impl AsRef<Path>,
    mode: u32,
    write: impl FnOnce(&mut File) -> std::io::Result<()>,
) -> Result<(), FsError> {
    let path = path.as_ref();
    let tmp = write_temp(path, mode, write)?;
    if let Err(e) = std::fs::rename(&tmp, path) {
        let _ = std::fs::remove_file(&tmp);
        return Err(FsError::io(path, "rename", e));
    }
    sync_folder(path);
    Ok(())
}

/// Writes `bytes` to `path`, given `mode`, unless something is at `path` already (a file, a
/// folder, a symbolic link, even a broken one): then nothing is written and the answer is `false`.
/// For a file that must never be replaced once made (a key, a pin): two writers racing for the same
/// path get one `true` between them.
///
/// A reader sees no file or the whole one: the bytes go to a temporary file as in
/// [`write_atomic_with`], which is then hard-linked to `path` (a link fails on any existing name)
/// and removed, and the folder is synced.
pub fn write_new(path: impl AsRef<Path>, bytes: &[u8], mode: u32) -> Result<bool, FsError> {
    let path = path.as_ref();
    let tmp = write_temp(path, mode, |f| f.write_all(bytes))?;
    let linked = std::fs::hard_link(&tmp, path);
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => {
            sync_folder(path);
            Ok(true)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(FsError::io(path, "link", e)),
    }
}

/// A new temporary file beside `path`, filled by `write`, given `mode` and synced; removed again
/// when a step fails.
fn write_temp(
    path: &Path,
    mode: u32,
    write: impl FnOnce(&mut File) -> std::io::Result<()>,
) -> Result<PathBuf, FsError> {
    let name = path.file_name().ok_or_else(|| {
        FsError::io(
            path,
            "write",
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a file's path"),
        )
    })?;
    let (tmp, mut file) = create_temp(&folder(path), name)?;
    let written = (|| {
        write(&mut file).map_err(|e| FsError::io(&tmp, "write", e))?;
        set_mode(&file, mode).map_err(|e| FsError::io(&tmp, "chmod", e))?;
        file.sync_all().map_err(|e| FsError::io(&tmp, "sync", e))
    })();
    match written {
        Ok(()) => Ok(tmp),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// Syncs the folder of `path` after a rename or link in it. The rename or link is done and
/// visible: a folder that cannot be synced (some file systems refuse) makes it less durable, not
/// undone, so the write is not reported as failed.
fn sync_folder(path: &Path) {
    let dir = folder(path);
    if let Err(e) = File::open(&dir).and_then(|d| d.sync_all()) {
        tracing::debug!(folder = %dir.display(), error = %e, "could not sync the folder after a rename");
    }
}

/// Creates a new temporary file for `name` in `dir`, owner-only until its write is done.
fn create_temp(dir: &Path, name: &OsStr) -> Result<(PathBuf, File), FsError> {
    let mut last = None;
    for _ in 0..NAMES {
        let mut tmp_name = temp_prefix(name);
        tmp_name.push(format!("{}.{:08x}", std::process::id(), fastrand::u32(..)));
        let tmp = dir.join(tmp_name);
        let mut o = OpenOptions::new();
        // create_new is O_CREAT | O_EXCL: it fails on any existing name, a symbolic link included.
        o.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            o.mode(PRIVATE_MODE);
        }
        match o.open(&tmp) {
            Ok(f) => return Ok((tmp, f)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some((tmp, e)),
            Err(e) => return Err(FsError::io(&tmp, "create", e)),
        }
    }
    let (tmp, e) = last.expect("at least one name was tried");
    Err(FsError::io(&tmp, "create", e))
}

#[cfg(unix)]
fn set_mode(file: &File, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    file.set_permissions(std::fs::Permissions::from_mode(mode))
}

#[cfg(not(unix))]
fn set_mode(_: &File, _: u32) -> std::io::Result<()> {
    Ok(())
}

/// `.<name>.tmp-`: how every temporary file of `name` begins.
fn temp_prefix(name: &OsStr) -> OsString {
    let mut s = OsString::from(".");
    s.push(name);
    s.push(".tmp-");
    s
}

/// Whether `rest` (what follows `.tmp-`) is a writer's process id, with or without the random part
/// (`4242`, `4242.00c0ffee`): how [`write_atomic_with`] names its temporary files, and how writers
/// before it named theirs.
fn is_temp_suffix(rest: &[u8]) -> bool {
    let (pid, random) = match rest.iter().position(|b| *b == b'.') {
        Some(i) => (&rest[..i], Some(&rest[i + 1..])),
        None => (rest, None),
    };
    !pid.is_empty()
        && pid.iter().all(u8::is_ascii_digit)
        && random.is_none_or(|r| !r.is_empty() && r.iter().all(u8::is_ascii_hexdigit))
}

/// Removes the temporary files of `path` ([`write_atomic_with`]) that writers which crashed before
/// their rename left behind, answering the files removed. Call it holding the file's lock: a
/// temporary file is otherwise perhaps another process's write in progress. Other files are kept,
/// and a file that cannot be removed is logged and kept.
pub fn remove_stale_temps(path: impl AsRef<Path>) -> Result<Vec<PathBuf>, FsError> {
    let path = path.as_ref();
    let Some(name) = path.file_name() else {
        return Ok(Vec::new());
    };
    let prefix = temp_prefix(name);
    remove_matching(&folder(path), |file| {
        file.strip_prefix(prefix.as_encoded_bytes())
            .is_some_and(is_temp_suffix)
    })
}

/// [`remove_stale_temps`] for every file of folder `dir` (a store of one file per record).
pub fn remove_stale_temps_in(dir: impl AsRef<Path>) -> Result<Vec<PathBuf>, FsError> {
    remove_matching(dir.as_ref(), |file| {
        let Some(rest) = file.strip_prefix(b".") else {
            return false;
        };
        let marker = b".tmp-";
        (1..rest.len().saturating_sub(marker.len()))
            .rev()
            .find(|&i| rest[i..].starts_with(marker))
            .is_some_and(|i| is_temp_suffix(&rest[i + marker.len()..]))
    })
}

fn remove_matching(dir: &Path, is_stale: impl Fn(&[u8]) -> bool) -> Result<Vec<PathBuf>, FsError> {
    let entries = std::fs::read_dir(dir).map_err(|e| FsError::io(dir, "read folder", e))?;
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        if !is_stale(entry.file_name().as_encoded_bytes()) {
            continue;
        }
        let file = entry.path();
        match std::fs::remove_file(&file) {
            Ok(()) => {
                tracing::info!(file = %file.display(), "removed the temporary file of a write that did not finish");
                removed.push(file);
            }
            Err(e) => tracing::warn!(
                file = %file.display(),
                error = %e,
                "could not remove the temporary file of a write that did not finish"
            ),
        }
    }
    Ok(removed)
}

/// Makes `dir` and its missing parents; the folders it makes are owner-only (0700 on Unix). An
/// existing folder is left as it is, if it is this user's and writable by no one else (on Unix):
/// another user who owns it, or may write into it, could replace the files kept in it (a pinned
/// host key, a profile), so it is refused ([`FsError::NotPrivate`]). So is a folder inside one
/// that another user owns or may write without the sticky bit (checked before anything is made):
/// they could move it away and put their own in its place.
pub fn create_private_dir(dir: impl AsRef<Path>) -> Result<(), FsError> {
    let dir = dir.as_ref();
    #[cfg(unix)]
    check_above(dir)?;
    if dir.is_dir() {
        #[cfg(unix)]
        {
            let meta = std::fs::metadata(dir).map_err(|e| FsError::io(dir, "stat", e))?;
            super::check_private(dir, &meta, 0o022)?;
        }
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
        .map_err(|e| FsError::io(dir, "create folder", e))
}

/// Refuses `dir` when an existing folder above it is another user's (neither this user nor root)
/// or may be written by others without the sticky bit, which keeps them from moving what they do
/// not own (as in /tmp). The folders above are read as written and as the links in them lead.
#[cfg(unix)]
fn check_above(dir: &Path) -> Result<(), FsError> {
    use std::os::unix::fs::MetadataExt;
    let me = rustix::process::geteuid().as_raw();
    let written = lexical(&std::path::absolute(dir).map_err(|e| FsError::io(dir, "resolve", e))?);
    // As the links lead: the folders above the folder itself when it exists (it may be a link),
    // else the nearest folder above that exists and those above it, which hold what is made below.
    let real: Vec<PathBuf> = match std::fs::canonicalize(&written) {
        Ok(real) => real.ancestors().skip(1).map(Path::to_path_buf).collect(),
        Err(_) => {
            let existing = written
                .ancestors()
                .skip(1)
                .find(|a| a.is_dir())
                .unwrap_or(Path::new("/"));
            let real =
                std::fs::canonicalize(existing).map_err(|e| FsError::io(existing, "resolve", e))?;
            real.ancestors().map(Path::to_path_buf).collect()
        }
    };
    let mut seen = std::collections::BTreeSet::new();
    // As written too: whoever may write a folder that holds a link could swap the link.
    let above = written
        .ancestors()
        .skip(1)
        .chain(real.iter().map(PathBuf::as_path));
    for folder in above.filter(|a| a.is_dir()) {
        if !seen.insert(folder.to_path_buf()) {
            continue;
        }
        let meta = std::fs::metadata(folder).map_err(|e| FsError::io(folder, "stat", e))?;
        let mode = meta.mode() & 0o7777;
        let why = if meta.uid() != me && meta.uid() != 0 {
            format!(
                "inside {}, owned by another user (uid {}, this one is uid {me})",
                folder.display(),
                meta.uid()
            )
        } else if mode & 0o022 != 0 && mode & 0o1000 == 0 {
            format!(
                "inside {}, which other users may write (mode {mode:o}, no sticky bit)",
                folder.display()
            )
        } else {
            continue;
        };
        return Err(FsError::NotPrivate {
            path: dir.to_path_buf(),
            why,
        });
    }
    Ok(())
}

/// `path` (absolute) without `.`, each `..` taking the folder before it away, as the folder it
/// names is reached from the root (the links are followed apart, by `canonicalize`).
#[cfg(unix)]
fn lexical(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temp_names_are_recognised_and_nothing_else() {
        for yes in ["4242", "4242.00c0ffee", "1.a"] {
            assert!(is_temp_suffix(yes.as_bytes()), "{yes}");
        }
        for no in ["", "notes", "42x", "4242.", "4242.zz", ".1", "4242.0.0"] {
            assert!(!is_temp_suffix(no.as_bytes()), "{no}");
        }
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
}
