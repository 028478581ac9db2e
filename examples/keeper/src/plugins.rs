//! keeper's PluginHost: providers as CloudDriver plugins (`soul-cloud-<driver>`, see orca-plugin)
//! instead of drivers linked in: the default (`--drivers plugins`); `--drivers linked` links orca's
//! drivers in instead.
//!
//! A provider's plugin is started on first use and kept; a plugin that dies is started again by its
//! client on the next call (the call in flight fails as a passing failure that may have acted, so
//! the step's retry adopts what was made). The settings the vault resolves go in the child's
//! environment, never on its command line; when they change (a rotated credential), the next step
//! starts a new plugin and the old one stops once no step holds it. Plugins stop with keeper (their
//! stdin closes; dropped ones are killed). A plugin's log (its standard error) is logged by keeper,
//! line by line, through the same filter as keeper's own lines, and without the values of the
//! settings it was given ([`plugin_line`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use orca::{Provider, Settings};
use orca_plugin::{PluginCommand, PluginProvider};
use sha2::{Digest, Sha256};

use crate::drivers::Drivers;
use crate::mask::{mask_text, MASK};

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

/// The shortest setting value [`plugin_line`] hides: a shorter one is no credential, and hiding it
/// (a `1`, a region `eu`) would garble every line.
const SHORTEST_HIDDEN: usize = 4;

/// A plugin's log line as keeper logs it: each value of `settings` (what the vault holds at the
/// provider's `credentials_ref`, so its secrets, whatever their keys are called) replaced by
/// [`MASK`] wherever it appears, then masked as every line keeper logs ([`mask_text`]).
pub fn plugin_line(line: &str, settings: &Settings) -> String {
    let mut values: Vec<&str> = settings
        .keys()
        .filter_map(|k| settings.get(k))
        .filter(|v| v.len() >= SHORTEST_HIDDEN)
        .collect();
    // Longest first: a value that contains another is hidden whole.
    values.sort_by_key(|v| std::cmp::Reverse(v.len()));
    let mut line = line.to_string();
    for v in values {
        if line.contains(v) {
            line = line.replace(v, MASK);
        }
    }
    mask_text(&line)
}

/// Where a plugin's lines go: keeper's log, at `info`, naming the plugin's driver and owner.
fn log_lines(driver: &str, owner: &str, settings: &Settings) -> impl Fn(&str) + Send + Sync {
    let (driver, owner, settings) = (driver.to_string(), owner.to_string(), settings.clone());
    move |line| {
        let line = plugin_line(line, &settings);
        tracing::info!(target: "keeper::plugin", driver = %driver, owner = %owner, "{line}");
    }
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
        // The vault's settings are the plugin's whole configuration, as they are a linked driver's:
        // a row without credentials is refused, never run on the keeper host's own.
        let command = PluginCommand::new(path, owner)
            .settings(settings.clone())
            .explicit_settings()
            .stderr_lines(log_lines(driver, owner, settings));
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
    fn a_plugin_line_loses_the_values_of_its_settings_and_what_keeper_masks() {
        let s = Settings::new()
            .with("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI")
            .with("AWS_REGION", "eu");
        let line = plugin_line("key wJalrXUtnFEMI in eu, api_token=abc123 refused", &s);
        assert_eq!(line, "key *** in eu, api_token=*** refused");
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
