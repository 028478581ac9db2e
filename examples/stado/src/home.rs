//! The stado home: the folder that holds the profile, the registry, the fleet keys, the pinned host
//! keys and (for `--provider fake`) the simulated cloud and fleet.
//!
//! Each home has an id, minted when the home is first opened and kept in its profile (`home_id`):
//! the machines a home makes are made under the orca owner `stado-<home id>` and carry the label
//! `stado-home=<home id>`, so that two operators with homes of their own in one resource group never
//! adopt or delete each other's hosts.
//!
//! Every file is written atomically ([`crate::files`]), so a reader sees the old file or the new one,
//! never half of one. A command that writes a file first takes that file's exclusive lock
//! ([`Home::lock`]) with a *try*: a second stado writing the same file at once is refused, never
//! merged.

use std::path::{Path, PathBuf};

use orca::fs::FileLock;

use crate::error::Failure;
use crate::files::make_private_dir;

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
        // The registry writes down paths in the home (fleet keys, pinned host keys), which a later
        // run from another directory reads: they are absolute, so the root is made so first.
        let root = std::path::absolute(root.into())
            .map_err(|e| Failure::new(format!("the stado home's path: {e}")))?;
        // A new home is made in a folder that exists: a mistyped --home or STADO_HOME makes no
        // folders on the way, and says so, rather than start an empty home somewhere.
        if !root.exists() {
            if let Some(parent) = root.parent().filter(|p| !p.is_dir()) {
                return Err(Failure::new(format!(
                    "no stado home at {}, and no folder {} to make it in: give --home or STADO_HOME a home, or a new one in a folder that exists",
                    root.display(),
                    parent.display()
                )));
            }
        }
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
        let var = |k: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        let root = flag
            .or_else(|| var(HOME_ENV))
            .or_else(|| var("HOME").map(|h| h.join(".stado")))
            .ok_or_else(|| {
                Failure::new(
                    "no stado home: give --home or set STADO_HOME (HOME is not set either)",
                )
            })?;
        Home::open(root)
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

    /// Takes the exclusive write lock of `file` (`<file>.lock`, an [`orca::fs::FileLock`] held until
    /// dropped), or refuses at once when another process holds it.
    pub fn lock(&self, file: &Path) -> Result<FileLock, Failure> {
        match FileLock::try_lock(FileLock::path_for(file)) {
            Err(e) if e.is_busy() => Err(Failure::new(format!(
                "{} is being written by another stado right now; nothing was changed (run again once it has finished)",
                file.display()
            ))
            .with_code("busy")),
            taken => taken.map_err(|e| Failure::new(e.to_string())),
        }
    }
}

/// Takes the write lock of `file` as [`Home::lock`] does, but waits for another holder to let go.
pub fn wait_lock(file: &Path) -> Result<FileLock, Failure> {
    FileLock::lock_blocking(FileLock::path_for(file)).map_err(|e| Failure::new(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::files::write_json;

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

    /// A home other users may write into is refused: they could swap a pinned host key.
    #[cfg(unix)]
    #[test]
    fn a_home_other_users_may_write_into_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("shared");
        std::fs::create_dir(&root).unwrap();
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = Home::open(&root).unwrap_err();
        assert!(e.to_string().contains("open to other users"), "{e}");
        assert!(!root.join("profile.json").exists(), "nothing was written");
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(Home::open(&root).is_ok());
    }

    #[test]
    fn a_new_home_is_made_only_in_a_folder_that_exists() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("typo").join("home");
        let e = Home::open(&root).unwrap_err().to_string();
        assert!(e.contains("no stado home at") && e.contains("typo"), "{e}");
        assert!(
            !dir.path().join("typo").exists(),
            "a folder was made on the way"
        );
        assert!(Home::open(dir.path().join("home")).is_ok());
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
}
