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
/// `{"HCLOUD_TOKEN": "..."}`. A file that others may read is refused (on Unix).
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

#[async_trait]
impl Vault for FileVault {
    async fn resolve(&self, reference: &str) -> Result<Settings> {
        let path = self.path_of(reference)?;
        let meta = tokio::fs::metadata(&path)
            .await
            .map_err(|e| unavailable(reference, format!("not in the vault ({e})")))?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            if meta.permissions().mode() & 0o077 != 0 {
                return Err(unavailable(
                    reference,
                    "the vault file is readable by others than its owner (chmod 600 it)",
                ));
            }
        }
        let _ = meta;
        let bytes = tokio::fs::read(&path)
            .await
            .map_err(|e| unavailable(reference, format!("unreadable ({e})")))?;
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
}
