//! [`check_program`]: a program this process may run with what it holds.

use std::path::Path;

use super::{folder, FsError};

/// Refuses the program at `path` unless it is a regular file, and it and the folder it is in are
/// owned by this user or by root and writable by no one else (no group or other write bit). When
/// `path` leads through a symbolic link, the file it leads to and that file's folder are checked
/// too: the link's folder says who may swap the link, the target's who may swap the file.
///
/// What it guards: a host that runs a program by path alone (a plugin, handed the host's
/// credentials in its environment) runs whatever is at that path, so whoever may write the file or
/// its folder decides what runs with those credentials. Root is trusted as this user is: root can
/// swap anything anyway, and system folders (`/usr/bin`) are root's.
///
/// ```
/// use std::os::unix::fs::PermissionsExt;
/// let dir = tempfile::tempdir()?;
/// let program = dir.path().join("soul-cloud-x");
/// std::fs::write(&program, "#!/bin/sh\n")?;
/// std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755))?;
/// orca_machines::fs::check_program(&program)?;
/// std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o777))?;
/// let e = orca_machines::fs::check_program(&program).unwrap_err();
/// assert!(e.to_string().contains("soul-cloud-x"), "{e}");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn check_program(path: impl AsRef<Path>) -> Result<(), FsError> {
    let path = path.as_ref();
    // A bare name is looked up on PATH when run: what would be checked here is another file.
    if path.parent().is_none_or(|p| p.as_os_str().is_empty()) {
        return Err(FsError::NotTrusted {
            path: path.to_path_buf(),
            why: "a bare name, which would be looked up on PATH: name the program by its path"
                .into(),
        });
    }
    let meta = std::fs::metadata(path).map_err(|e| FsError::io(path, "stat", e))?;
    if !meta.is_file() {
        return Err(FsError::NotTrusted {
            path: path.to_path_buf(),
            why: "not a regular file".into(),
        });
    }
    check_trusted(path, &meta)?;
    check_folder(&folder(path))?;
    let linked = std::fs::symlink_metadata(path)
        .map_err(|e| FsError::io(path, "stat", e))?
        .file_type()
        .is_symlink();
    if linked {
        let real = std::fs::canonicalize(path).map_err(|e| FsError::io(path, "resolve", e))?;
        check_folder(&folder(&real))?;
    }
    Ok(())
}

fn check_folder(dir: &Path) -> Result<(), FsError> {
    let meta = std::fs::metadata(dir).map_err(|e| FsError::io(dir, "stat", e))?;
    check_trusted(dir, &meta)
}

/// Refuses what `meta` describes (at `path`) unless this user or root owns it and neither its
/// group nor others may write it.
fn check_trusted(path: &Path, meta: &std::fs::Metadata) -> Result<(), FsError> {
    use std::os::unix::fs::MetadataExt;
    let me = rustix::process::geteuid().as_raw();
    let mode = meta.mode() & 0o7777;
    let why = if meta.uid() != me && meta.uid() != 0 {
        format!(
            "owned by another user (uid {}; this one is uid {me}, and only it or root is trusted)",
            meta.uid()
        )
    } else if mode & 0o022 != 0 {
        format!("writable by others than its owner (mode {mode:o})")
    } else {
        return Ok(());
    };
    Err(FsError::NotTrusted {
        path: path.to_path_buf(),
        why,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(path: &Path, mode: u32) {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn a_program_or_folder_others_may_write_is_refused_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join("plugins");
        std::fs::create_dir(&folder).unwrap();
        let program = folder.join("soul-cloud-x");
        std::fs::write(&program, "#!/bin/sh\n").unwrap();
        mode(&folder, 0o755);
        mode(&program, 0o755);
        check_program(&program).unwrap();

        mode(&program, 0o775);
        let e = check_program(&program).unwrap_err();
        assert!(matches!(e, FsError::NotTrusted { .. }), "{e:?}");
        assert_eq!(e.path(), program);
        assert!(e.to_string().contains("mode 775"), "{e}");
        mode(&program, 0o755);

        mode(&folder, 0o777);
        let e = check_program(&program).unwrap_err();
        assert_eq!(e.path(), folder, "{e}");

        // A link from a trusted folder to a program in an open one: the open one is refused.
        let trusted = dir.path().join("trusted");
        std::fs::create_dir(&trusted).unwrap();
        mode(&trusted, 0o755);
        let link = trusted.join("soul-cloud-x");
        std::os::unix::fs::symlink(&program, &link).unwrap();
        let e = check_program(&link).unwrap_err();
        assert_eq!(e.path(), std::fs::canonicalize(&folder).unwrap(), "{e}");
        mode(&folder, 0o755);
        check_program(&link).unwrap();

        let e = check_program(&folder).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
        let e = check_program(folder.join("missing")).unwrap_err();
        assert!(e.to_string().contains("missing"), "{e}");
        let e = check_program("soul-cloud-x").unwrap_err();
        assert!(e.to_string().contains("bare name"), "{e}");
    }
}
