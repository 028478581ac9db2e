//! keeper's PluginHost: providers as CloudDriver plugins (`soul-cloud-<driver>`, see orca-plugin)
//! instead of drivers linked in: the default (`--drivers plugins`); `--drivers linked` links orca's
//! drivers in instead.
//!
//! A provider's plugin is started on first use and kept, one per driver, owner and settings (two
//! providers of one driver and owner with other settings, two EC2 regions say, each keep their
//! own). A plugin that dies is started again by its client on the next call (the call in flight
//! fails as a passing failure that may have acted, so the step's retry adopts what was made). The
//! settings the vault resolves go in the child's environment, never on its command line; when they
//! change (a rotated credential), the next step starts a new plugin, and the old one stops once no
//! step holds it and none has asked for it for [`DEFAULT_KEEP_IDLE`]. Plugins stop with keeper (their
//! stdin closes; dropped ones are killed). A plugin's log (its standard error) is logged by keeper,
//! line by line, through the same filter as keeper's own lines, and without the values of the
//! settings it was given ([`plugin_line`]).
//!
//! A plugin that never answers holds nothing but its own start: a start is bounded
//! ([`DEFAULT_START_TIMEOUT`]; the child is killed after it), only the steps that need that same
//! plugin wait for it, and every call is bounded too ([`DEFAULT_CALL_TIMEOUT`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
// The maps are used as a panic left them (`lock` takes a poisoned mutex): every change to one is
// one insert or remove.
use orca::kit::lock;
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

/// How long keeper waits for a plugin to start and answer its handshake before it kills it and
/// fails the step naming the plugin: the plugin library's default, far more than a plugin needs.
pub const DEFAULT_START_TIMEOUT: Duration = orca_plugin::DEFAULT_START_TIMEOUT;

/// How long keeper waits for a plugin's answer to one call. Generous, as a create or a resize can
/// take minutes at a cloud; a call past it fails as a passing failure that may have acted (the
/// plugin may have sent it to its cloud), so a create's VM is looked for by name as after any
/// ambiguous failure, and the plugin is started again once no other call waits on it (or at the
/// second call in a row past it with no answer between).
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// How long a plugin no step holds is kept after it was last asked for; then the next step of any
/// provider stops it. What stops the plugin of a rotated credential, without stopping a provider's
/// that is only used now and then (another region's) between two of its steps.
pub const DEFAULT_KEEP_IDLE: Duration = Duration::from_secs(60 * 60);

/// What a plugin is kept under: its driver, owner, and the fingerprint of its settings.
type Key = (String, String, String);

/// A kept plugin and when a step last asked for it.
struct Kept {
    plugin: Arc<PluginProvider>,
    asked: Instant,
}

/// Drivers as plugins, found in the configured directories, then beside keeper's own program.
pub struct PluginDrivers {
    dirs: Vec<PathBuf>,
    start_timeout: Duration,
    call_timeout: Duration,
    keep_idle: Duration,
    /// Never held across an await: a lookup or an insert.
    kept: Mutex<HashMap<Key, Kept>>,
    /// A lock per key, held while that key's plugin starts, so that the steps needing the same
    /// plugin start it once, and a plugin slow to start holds up no other.
    starting: Mutex<HashMap<Key, Arc<tokio::sync::Mutex<()>>>>,
}

/// Shows the places looked in, the limits and which drivers and owners have plugins; never a
/// fingerprint (a hash of the settings, secrets among them).
impl std::fmt::Debug for PluginDrivers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kept: Vec<String> = lock(&self.kept)
            .keys()
            .map(|(driver, owner, _)| format!("{driver}/{owner}"))
            .collect();
        f.debug_struct("PluginDrivers")
            .field("dirs", &self.dirs)
            .field("start_timeout", &self.start_timeout)
            .field("call_timeout", &self.call_timeout)
            .field("keep_idle", &self.keep_idle)
            .field("kept", &kept)
            .finish()
    }
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
            start_timeout: DEFAULT_START_TIMEOUT,
            call_timeout: DEFAULT_CALL_TIMEOUT,
            keep_idle: DEFAULT_KEEP_IDLE,
            kept: Mutex::new(HashMap::new()),
            starting: Mutex::new(HashMap::new()),
        }
    }

    /// Fails a plugin's start that takes longer than `limit` (its child is killed). Unset:
    /// [`DEFAULT_START_TIMEOUT`].
    pub fn start_timeout(mut self, limit: Duration) -> Self {
        self.start_timeout = limit;
        self
    }

    /// Fails a plugin's call that takes longer than `limit` as a passing failure that may have
    /// acted. Unset: [`DEFAULT_CALL_TIMEOUT`].
    pub fn call_timeout(mut self, limit: Duration) -> Self {
        self.call_timeout = limit;
        self
    }

    /// Stops a plugin that no step holds once no step has asked for it for `idle`. Unset:
    /// [`DEFAULT_KEEP_IDLE`].
    pub fn keep_idle(mut self, idle: Duration) -> Self {
        self.keep_idle = idle;
        self
    }

    /// The plugins of `driver` kept now (one per owner and settings): what an operator's console or
    /// a test reaches a plugin's other services through.
    pub async fn running(&self, driver: &str) -> Vec<Arc<PluginProvider>> {
        lock(&self.kept)
            .iter()
            .filter(|((d, _, _), _)| d == driver)
            .map(|(_, k)| k.plugin.clone())
            .collect()
    }

    /// The plugin kept under `key`, marked as asked for now.
    fn kept(&self, key: &Key) -> Option<Arc<PluginProvider>> {
        let mut kept = lock(&self.kept);
        let found = kept.get_mut(key).map(|k| {
            k.asked = Instant::now();
            k.plugin.clone()
        });
        // Every ask lets go of what is idle, so that a plugin of replaced settings ends even when
        // no other plugin starts after it.
        self.let_go_idle(&mut kept);
        found
    }

    /// Keeps `plugin` under `key`, letting go of what is idle.
    fn keep(&self, key: Key, plugin: Arc<PluginProvider>) {
        let mut kept = lock(&self.kept);
        kept.insert(
            key,
            Kept {
                plugin,
                asked: Instant::now(),
            },
        );
        self.let_go_idle(&mut kept);
    }

    /// Lets go of the plugins in `kept` no step holds that were not asked for within the idle time
    /// (dropped, they are killed once no step holds them), and of the start locks nobody waits on.
    fn let_go_idle(&self, kept: &mut HashMap<Key, Kept>) {
        let idle = self.keep_idle;
        kept.retain(|_, k| Arc::strong_count(&k.plugin) > 1 || k.asked.elapsed() < idle);
        lock(&self.starting)
            .retain(|key, gate| kept.contains_key(key) || Arc::strong_count(gate) > 1);
    }

    /// The lock held while `key`'s plugin starts.
    fn gate(&self, key: &Key) -> Arc<tokio::sync::Mutex<()>> {
        lock(&self.starting).entry(key.clone()).or_default().clone()
    }

    /// The program of `driver`'s plugin, or an error naming every place looked in. The first one
    /// found must be a program keeper may run ([`orca::fs::check_program`]): it is handed the
    /// vault's credentials, so one that another user owns or may write, or that lies in a folder
    /// another user may write, is refused naming it (not passed over for one found later).
    pub fn find(&self, driver: &str) -> orca::Result<PathBuf> {
        let plain = !driver.is_empty()
            && driver
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !plain {
            return Err(orca::Error::invalid(
                "kind",
                format!(
                    "a driver name of a-z, 0-9 and '-', got {}",
                    orca::spec::quoted(driver)
                ),
            ));
        }
        let name = program(driver);
        if let Some(found) = self
            .dirs
            .iter()
            .map(|d| d.join(&name))
            .find(|p| p.is_file())
        {
            return match orca::fs::check_program(&found) {
                Ok(()) => Ok(found),
                Err(e) => Err(orca::Error::invalid(
                    "kind",
                    format!("the plugin {name} for driver {driver} is refused: {e}"),
                )),
            };
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
        let key = (driver.to_string(), owner.to_string(), fingerprint(settings));
        if let Some(plugin) = self.kept(&key) {
            return Ok(plugin);
        }
        // Only the steps that need this same plugin wait here; the kept map is not held meanwhile.
        let gate = self.gate(&key);
        let _starting = gate.lock().await;
        if let Some(plugin) = self.kept(&key) {
            return Ok(plugin); // started by the step this one waited for
        }
        let path = self.find(driver)?;
        // The vault's settings are the plugin's whole configuration, as they are a linked driver's:
        // a row without credentials is refused, never run on the keeper host's own.
        let command = PluginCommand::new(path, owner)
            .settings(settings.clone())
            .explicit_settings()
            .start_timeout(self.start_timeout)
            .call_timeout(self.call_timeout)
            .stderr_lines(log_lines(driver, owner, settings));
        let plugin = Arc::new(PluginProvider::start(command).await?);
        tracing::info!(driver, owner, "plugin started");
        self.keep(key, plugin.clone());
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
