//! Credentials: a provider row holds only `credentials_ref`, a vault path; the secret is resolved at
//! step time through a [`Vault`], into [`orca::Settings`] (the driver's environment names), and is
//! dropped when the step ends. Nothing resolved is written to the registries, the audit trail, the logs
//! or the step output.
//!
//! [`FileVault`] is the example's vault: a directory in which `<ref>.json` holds one JSON object of
//! settings, readable by its owner only. A real deployment puts another [`Vault`] behind the same
//! trait (HashiCorp Vault, a cloud secret manager).

use std::path::PathBuf;

use async_trait::async_trait;
use orca::Settings;
use serde::Deserialize as _;

use crate::error::{Error, Result};

/// Where credentials come from.
#[async_trait]
pub trait Vault: Send + Sync + std::fmt::Debug {
    /// The settings stored at `reference` (a provider's `credentials_ref`).
    async fn resolve(&self, reference: &str) -> Result<Settings>;
}

/// Checks a `credentials_ref`: 1 to 255 of letters, digits, `.`, `_`, `-` and `/`, relative, with no
/// empty, `.` or `..` segment (it can never leave the vault).
pub fn validate_ref(reference: &str) -> Result<()> {
    let rule = "a vault path: 1 to 255 of letters, digits, '.', '_', '-' and '/', relative, without empty, '.' or '..' segments";
    let ok = !reference.is_empty()
        && reference.len() <= 255
        && reference
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'/'))
        && reference
            .split('/')
            .all(|seg| !seg.is_empty() && seg != "." && seg != "..");
    ok.then_some(()).ok_or_else(|| {
        Error::invalid(
            "credentials_ref",
            format!("{rule}, got {}", orca::spec::quoted(reference)),
        )
    })
}

/// A vault in a directory: `<root>/<ref>.json` is a JSON object of string settings, e.g.
/// `{"HCLOUD_TOKEN": "..."}`. Only a regular file is read, never through a symbolic link, and (on
/// Unix) only one of keeper's user that others can neither read nor write.
#[derive(Debug, Clone)]
pub struct FileVault {
    root: PathBuf,
}

impl FileVault {
    /// A vault rooted at `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        FileVault { root: root.into() }
    }

    /// The file `reference` is kept in.
    pub fn path_of(&self, reference: &str) -> Result<PathBuf> {
        validate_ref(reference)?;
        Ok(self.root.join(format!("{reference}.json")))
    }
}

fn unavailable(reference: &str, why: impl std::fmt::Display) -> Error {
    Error::new(
        500,
        "credentials.unavailable",
        format!("credentials {reference:?}: {why}"),
    )
    .with_field("credentials_ref")
}

/// The most a vault file holds: settings are a few keys (a service account's JSON key is the
/// largest, a few KiB); anything larger is not one.
pub const MAX_ENTRY_BYTES: u64 = 256 * 1024;

/// What is wrong with a vault file, without its path: the server's folders are no business of a
/// remote API caller, who knows the entry by its reference.
fn why_unreadable(e: &orca::fs::FsError) -> String {
    use orca::fs::FsError;
    match e {
        FsError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
            format!("not in the vault ({source})")
        }
        FsError::NotPrivate { why, .. } => format!(
            "the vault file is {why}: it must be keeper's own user's, readable by its owner only (chown it to that user, chmod 600 it)"
        ),
        FsError::Io { op, source, .. } => format!("unreadable ({op}: {source})"),
        _ => "unreadable".to_string(),
    }
}

/// The bytes of the vault file at `path`: a regular file, never through a symbolic link (one planted
/// in the vault could lead anywhere), of this user's and closed to others (on Unix), within
/// [`MAX_ENTRY_BYTES`], each checked on the opened file.
fn read_entry(path: &std::path::Path) -> std::result::Result<Vec<u8>, orca::fs::FsError> {
    orca::fs::read_private(path, MAX_ENTRY_BYTES, 0o077, "a vault file")
}

/// Refuses a folder between the vault's root and the file at `path` that is a symbolic link: the
/// file itself is opened without following one, and a linked folder on the way could lead out of
/// the vault as well.
fn refuse_linked_folders(
    root: &std::path::Path,
    path: &std::path::Path,
) -> std::result::Result<(), orca::fs::FsError> {
    let Ok(inner) = path.strip_prefix(root) else {
        return Ok(());
    };
    let mut at = root.to_path_buf();
    let folders: Vec<_> = inner.components().collect();
    for c in folders.iter().take(folders.len().saturating_sub(1)) {
        at.push(c);
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(orca::fs::FsError::NotPrivate {
                    path: at,
                    why: "reached through a symbolic link".into(),
                });
            }
            // A folder that is not there leaves the file not there: the read says so.
            _ => {}
        }
    }
    Ok(())
}

#[async_trait]
impl Vault for FileVault {
    async fn resolve(&self, reference: &str) -> Result<Settings> {
        let path = self.path_of(reference)?;
        let root = self.root.clone();
        let bytes = tokio::task::spawn_blocking(move || {
            refuse_linked_folders(&root, &path)?;
            read_entry(&path)
        })
        .await
        .map_err(|e| unavailable(reference, format!("its read stopped ({e})")))?
        .map_err(|e| unavailable(reference, why_unreadable(&e)))?;
        // serde_json's errors quote the input: never let them near a message.
        let value = serde_json::from_slice(&bytes)
            .ok()
            .filter(serde_json::Value::is_object)
            .ok_or_else(|| unavailable(reference, "not a JSON object of settings"))?;
        // Keyed by the drivers' settings' names (each driver's `ConfigKey`); orca's map reading
        // names a key at fault, never its value.
        Settings::deserialize(value).map_err(|e| unavailable(reference, e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refs_cannot_leave_the_vault() {
        for ok in ["hetzner/prod", "fake", "a.b/c-d_e"] {
            assert!(validate_ref(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "/etc/passwd",
            "../x",
            "a/../b",
            "a//b",
            "a/./b",
            "a b",
            "a/",
        ] {
            let e = validate_ref(bad).unwrap_err();
            assert_eq!(e.field.as_deref(), Some("credentials_ref"), "{bad}");
        }
    }

    #[tokio::test]
    async fn resolves_a_private_file_and_never_prints_values() {
        let dir = tempfile::tempdir().unwrap();
        let vault = FileVault::new(dir.path());
        let path = dir.path().join("cloud").join("a.json");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, r#"{"HCLOUD_TOKEN": "s3cret-value"}"#).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
            let e = vault.resolve("cloud/a").await.unwrap_err();
            assert!(e.message.contains("chmod 600"), "{e}");
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
        let s = vault.resolve("cloud/a").await.unwrap();
        assert_eq!(s.get("HCLOUD_TOKEN"), Some("s3cret-value"));
        assert!(!format!("{s:?}").contains("s3cret"));
        let e = vault.resolve("cloud/missing").await.unwrap_err();
        assert_eq!(e.code, "credentials.unavailable");
        std::fs::write(&path, r#"{"HCLOUD_TOKEN": s3cret-value"#).unwrap();
        let e = vault.resolve("cloud/a").await.unwrap_err();
        assert!(!e.to_string().contains("s3cret"), "{e}");
    }

    /// A vault with `reference`'s folder made, and the path its entry goes at.
    #[cfg(unix)]
    fn vault_with_entry(reference: &str) -> (tempfile::TempDir, FileVault, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let vault = FileVault::new(dir.path().join("vault"));
        let path = vault.path_of(reference).unwrap();
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        (dir, vault, path)
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn a_symlink_entry_is_refused_naming_the_entry_not_followed() {
        use std::os::unix::fs::PermissionsExt;
        let (dir, vault, path) = vault_with_entry("cloud/a");
        // A private file outside the vault that a link planted in it points at.
        let outside = dir.path().join("elsewhere.json");
        std::fs::write(&outside, r#"{"HCLOUD_TOKEN": "s3cret-value"}"#).unwrap();
        std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::os::unix::fs::symlink(&outside, &path).unwrap();
        let e = vault.resolve("cloud/a").await.unwrap_err();
        assert_eq!(e.code, "credentials.unavailable");
        assert!(e.message.contains("\"cloud/a\""), "{e}");
        assert!(e.message.contains("symbolic link"), "{e}");
        // Remote callers see this message: no path of the server's in it.
        assert!(!e.message.contains(dir.path().to_str().unwrap()), "{e}");
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn a_symlinked_folder_in_the_vault_is_refused_not_followed() {
        use std::os::unix::fs::PermissionsExt;
        let (dir, vault, path) = vault_with_entry("cloud/a");
        // The folder `cloud` is a link to a folder outside the vault holding a private `a.json`.
        let outside = dir.path().join("elsewhere");
        std::fs::create_dir(&outside).unwrap();
        let file = outside.join("a.json");
        std::fs::write(&file, r#"{"HCLOUD_TOKEN": "s3cret-value"}"#).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        let folder = path.parent().unwrap();
        std::fs::remove_dir(folder).unwrap();
        std::os::unix::fs::symlink(&outside, folder).unwrap();
        let e = vault.resolve("cloud/a").await.unwrap_err();
        assert_eq!(e.code, "credentials.unavailable");
        assert!(e.message.contains("\"cloud/a\""), "{e}");
        assert!(e.message.contains("symbolic link"), "{e}");
        assert!(!e.message.contains(dir.path().to_str().unwrap()), "{e}");
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn a_fifo_entry_is_refused_at_once() {
        let (_dir, vault, path) = vault_with_entry("cloud/a");
        let made = std::process::Command::new("mkfifo")
            .args(["-m", "600"])
            .arg(&path)
            .status()
            .unwrap();
        assert!(made.success());
        let resolved =
            tokio::time::timeout(std::time::Duration::from_secs(5), vault.resolve("cloud/a")).await;
        if resolved.is_err() {
            // A writer lets the read left waiting end, so that the test fails rather than hangs.
            drop(std::fs::OpenOptions::new().write(true).open(&path));
            panic!("resolving a FIFO entry waited for a writer");
        }
        let e = resolved.unwrap().unwrap_err();
        assert!(e.message.contains("not a regular file"), "{e}");
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn an_entry_of_another_user_is_refused_even_when_private() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let (dir, vault, path) = vault_with_entry("cloud/a");
        std::fs::write(&path, r#"{"HCLOUD_TOKEN": "s3cret-value"}"#).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        if std::fs::metadata(&path).unwrap().uid() != 0 {
            eprintln!("SKIPPED: only root can give a file to another user");
            return;
        }
        std::os::unix::fs::chown(&path, Some(65534), Some(65534)).unwrap();
        let e = vault.resolve("cloud/a").await.unwrap_err();
        assert!(e.message.contains("another user"), "{e}");
        assert!(!e.message.contains(dir.path().to_str().unwrap()), "{e}");
    }
}
