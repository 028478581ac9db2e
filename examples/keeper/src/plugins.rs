//! keeper's PluginHost: providers as CloudDriver plugins (`soul-cloud-<driver>`, see orca-plugin)
//! instead of drivers linked in. Opt-in (`--drivers plugins`); linked-in drivers stay the default.
//!
//! A provider's plugin is started on first use and kept; a plugin that dies is started again by its
//! client on the next call (the call in flight fails as a passing failure that may have acted, so
//! the step's retry adopts what was made). The settings the vault resolves go in the child's
//! environment, never on its command line; when they change (a rotated credential), the next step
//! starts a new plugin and the old one stops once no step holds it. Plugins stop with keeper (their
//! stdin closes; dropped ones are killed).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use orca::{Provider, Settings};
use orca_plugin::{PluginCommand, PluginProvider};
use sha2::{Digest, Sha256};

use crate::drivers::Drivers;

/// The setting that names a directory of plugins (keeper's `--plugin-dir`).
pub const PLUGIN_DIR_ENV: &str = "KEEPER_PLUGIN_DIR";

/// The program of a driver's plugin: `soul-cloud-<driver>`.
pub fn program(driver: &str) -> String {
    format!("soul-cloud-{driver}")
}

/// A plugin kept for a driver and owner, with the fingerprint of the settings it was started with.
#[derive(Debug)]
struct Kept {
    fingerprint: String,
    plugin: Arc<PluginProvider>,
}

/// Drivers as plugins, found in the configured directories, then beside keeper's own program.
#[derive(Debug)]
pub struct PluginDrivers {
    dirs: Vec<PathBuf>,
    kept: tokio::sync::Mutex<HashMap<(String, String), Kept>>,
}

/// What identifies settings without holding them: a SHA-256 over every key and value.
fn fingerprint(settings: &Settings) -> String {
    let mut keys: Vec<&str> = settings.keys().collect();
    keys.sort_unstable();
    let mut h = Sha256::new();
    for k in keys {
        h.update(k.as_bytes());
        h.update([0]);
        h.update(settings.get(k).unwrap_or_default().as_bytes());
        h.update([0]);
    }
    hex::encode(h.finalize())
}

impl PluginDrivers {
    /// Plugins looked for in `dirs` (in order), then in the directory of keeper's own program.
    pub fn new(dirs: impl IntoIterator<Item = PathBuf>) -> Self {
        let mut dirs: Vec<PathBuf> = dirs.into_iter().collect();
        if let Some(own) = std::env::current_exe()
            .ok()
            .and_then(|p| p.parent().map(Path::to_path_buf))
        {
            dirs.push(own);
        }
        PluginDrivers {
            dirs,
            kept: tokio::sync::Mutex::new(HashMap::new()),
        }
    }

    /// Where plugins are looked for, in order.
    pub fn dirs(&self) -> &[PathBuf] {
        &self.dirs
    }

    /// The plugins of `driver` kept now (one per owner): what an operator's console or a test
    /// reaches a plugin's other services through.
    pub async fn running(&self, driver: &str) -> Vec<Arc<PluginProvider>> {
        let kept = self.kept.lock().await;
        kept.iter()
            .filter(|((d, _), _)| d == driver)
            .map(|(_, k)| k.plugin.clone())
            .collect()
    }

    /// The program of `driver`'s plugin, or an error naming every place looked in.
    pub fn find(&self, driver: &str) -> orca::Result<PathBuf> {
        let plain = !driver.is_empty()
            && driver
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !plain {
            return Err(orca::Error::invalid(
                "kind",
                format!("a driver name of a-z, 0-9 and '-', got {driver:?}"),
            ));
        }
        let name = program(driver);
        if let Some(found) = self
            .dirs
            .iter()
            .map(|d| d.join(&name))
            .find(|p| p.is_file())
        {
            return Ok(found);
        }
        let looked: Vec<String> = self.dirs.iter().map(|d| d.display().to_string()).collect();
        Err(orca::Error::invalid(
            "kind",
            format!(
                "no plugin {name} for driver {driver}: looked in {} (set {PLUGIN_DIR_ENV})",
                looked.join(", ")
            ),
        ))
    }
}

#[async_trait]
impl Drivers for PluginDrivers {
    async fn provider(
        &self,
        driver: &str,
        owner: &str,
        settings: &Settings,
    ) -> orca::Result<Arc<dyn Provider>> {
        let print = fingerprint(settings);
        let key = (driver.to_string(), owner.to_string());
        let mut kept = self.kept.lock().await;
        if let Some(k) = kept.get(&key) {
            if k.fingerprint == print {
                return Ok(k.plugin.clone());
            }
        }
        let path = self.find(driver)?;
        let command = PluginCommand::new(path, owner).settings(settings.clone());
        let plugin = Arc::new(PluginProvider::start(command).await?);
        tracing::info!(driver, owner, "plugin started");
        kept.insert(
            key,
            Kept {
                fingerprint: print,
                plugin: plugin.clone(),
            },
        );
        Ok(plugin)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_plugin_names_where_it_was_looked_for() {
        let d = PluginDrivers::new([PathBuf::from("/nonexistent/plugins")]);
        let e = d.find("nimbus").unwrap_err().to_string();
        assert!(e.contains("soul-cloud-nimbus"), "{e}");
        assert!(e.contains("/nonexistent/plugins"), "{e}");
        let own = std::env::current_exe().unwrap();
        assert!(
            e.contains(&own.parent().unwrap().display().to_string()),
            "{e}"
        );
        let e = d.find("../bin/sh").unwrap_err().to_string();
        assert!(e.contains("a driver name"), "{e}");
    }

    #[test]
    fn fingerprints_tell_settings_apart_without_showing_them() {
        let a = Settings::new().with("HCLOUD_TOKEN", "secret-a");
        let b = Settings::new().with("HCLOUD_TOKEN", "secret-b");
        assert_eq!(fingerprint(&a), fingerprint(&a.clone()));
        assert_ne!(fingerprint(&a), fingerprint(&b));
        assert!(!fingerprint(&a).contains("secret"));
    }
}
