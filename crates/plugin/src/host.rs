//! [`PluginHost`]: the plugins of a program that runs many providers, started on first use and
//! kept, one per driver, owner and settings.
//!
//! Two providers of one driver and owner with other settings (two EC2 regions, say) each keep
//! their own plugin. When a provider's settings change (a rotated credential), the next ask starts
//! a new plugin, and the old one stops once no caller holds it and none has asked for it for the
//! idle time ([`DEFAULT_KEEP_IDLE`]). A plugin's log lines reach the host's sink without the values
//! (of four characters or more) of the settings it was given ([`hide_settings`]).
//!
//! A plugin that never answers holds nothing but its own start: a start is bounded (the child is
//! killed after it), only the callers that need that same plugin wait for it, and every call is
//! bounded too ([`DEFAULT_CALL_TIMEOUT`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

// The maps are used as a panic left them (`lock` takes a poisoned mutex): every change to one is
// one insert or remove.
use orca_machines::kit::lock;
use orca_machines::{Error, Provider, Result, Settings};
use sha2::{Digest, Sha256};

use crate::{PluginCommand, PluginProvider, CUT_MARK, DEFAULT_START_TIMEOUT};

/// The program of a driver's plugin: `soul-cloud-<driver>`.
pub fn program(driver: &str) -> String {
    format!("soul-cloud-{driver}")
}

/// How long the host waits for a plugin's answer to one call. Generous, as a create or a resize
/// can take minutes at a cloud; a call past it fails as a passing failure that may have acted (the
/// plugin may have sent it to its cloud), and the plugin is started again once no other call
/// waits on it (or at the second call in a row past it with no answer between).
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// How long a plugin no caller holds is kept after it was last asked for; then the next ask of
/// any plugin stops it. What stops the plugin of a rotated credential, without stopping one that
/// is only used now and then (another region's) between two of its uses.
pub const DEFAULT_KEEP_IDLE: Duration = Duration::from_secs(60 * 60);

/// The shortest setting value [`hide_settings`] hides: a shorter one is no credential, and hiding
/// it (a `1`, a region `eu`) would garble every line.
const SHORTEST_HIDDEN: usize = 4;

/// Where a plugin's log lines go: its driver, its owner and the line, settings hidden.
type Lines = Arc<dyn Fn(&str, &str, &str) + Send + Sync>;

/// What a plugin is kept under: its driver, owner, and the fingerprint of its settings.
type Key = (String, String, String);

/// A kept plugin and when it was last asked for.
struct Kept {
    plugin: Arc<PluginProvider>,
    asked: Instant,
}

/// Drivers as plugins, found in the configured directories, then beside the host's own program.
pub struct PluginHost {
    dirs: Vec<PathBuf>,
    dir_setting: Option<String>,
    start_timeout: Duration,
    call_timeout: Duration,
    keep_idle: Duration,
    lines: Lines,
    /// Never held across an await: a lookup or an insert.
    kept: Mutex<HashMap<Key, Kept>>,
    /// A lock per key, held while that key's plugin starts, so that the callers needing the same
    /// plugin start it once, and a plugin slow to start holds up no other.
    starting: Mutex<HashMap<Key, Arc<tokio::sync::Mutex<()>>>>,
}

/// Shows the places looked in, the limits and which drivers and owners have plugins; never a
/// fingerprint (a hash of the settings, secrets among them).
impl std::fmt::Debug for PluginHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kept: Vec<String> = lock(&self.kept)
            .keys()
            .map(|(driver, owner, _)| format!("{driver}/{owner}"))
            .collect();
        f.debug_struct("PluginHost")
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

/// What [`hide_settings`] puts in place of a setting's value.
pub const MASK: &str = "***";

/// `line` with each value of `settings` (a plugin's whole configuration, so its secrets, whatever
/// their keys are called) of four characters or more replaced by [`MASK`] wherever it appears, and
/// every run of eight characters or more of a secret's value too ([`orca::is_secret_key`]; the kit's
/// `hide_secret`: a plugin may log a cloud's answer that repeats part of a token), where the parts
/// of other values (an endpoint's `https://`) stay. A line cut at its bound (ending in
/// [`CUT_MARK`]) may end in the first part of a value: that part, when it is four characters or
/// more, is replaced too.
pub fn hide_settings(line: &str, settings: &Settings) -> String {
    let mut values: Vec<(&str, bool)> = settings
        .keys()
        .filter_map(|k| Some((settings.get(k)?, orca::is_secret_key(k))))
        .filter(|(v, _)| v.len() >= SHORTEST_HIDDEN)
        .collect();
    // Longest first: a value that contains another is hidden whole.
    values.sort_by_key(|(v, _)| std::cmp::Reverse(v.len()));
    let mut line = line.to_string();
    for (v, secret) in &values {
        if *secret {
            line = orca_machines::kit::hide_secret(&line, v);
        } else if line.contains(v) {
            line = line.replace(v, MASK);
        }
    }
    let Some(kept) = line.strip_suffix(CUT_MARK) else {
        return line;
    };
    // The longest start of a value that the kept text ends with.
    let start = values
        .iter()
        .filter_map(|(v, _)| {
            (SHORTEST_HIDDEN..v.len())
                .rev()
                .filter(|&n| v.is_char_boundary(n))
                .find(|&n| kept.ends_with(&v[..n]))
        })
        .max();
    match start {
        Some(n) => format!("{}{MASK}{CUT_MARK}", &kept[..kept.len() - n]),
        None => line,
    }
}

impl PluginHost {
    /// Plugins looked for in `dirs` (in order), then in the directory of the host's own program.
    /// Their log lines go to `tracing` at `info` until [`PluginHost::lines`] says otherwise.
    pub fn new(dirs: impl IntoIterator<Item = PathBuf>) -> Self {
        let mut dirs: Vec<PathBuf> = dirs.into_iter().collect();
        if let Some(own) = std::env::current_exe()
            .ok()
            .and_then(|p| p.parent().map(Path::to_path_buf))
        {
            dirs.push(own);
        }
        PluginHost {
            dirs,
            dir_setting: None,
            start_timeout: DEFAULT_START_TIMEOUT,
            call_timeout: DEFAULT_CALL_TIMEOUT,
            keep_idle: DEFAULT_KEEP_IDLE,
            lines: Arc::new(|driver, owner, line| {
                tracing::info!(target: "orca_plugin::host", driver, owner, "{line}");
            }),
            kept: Mutex::new(HashMap::new()),
            starting: Mutex::new(HashMap::new()),
        }
    }

    /// Names the setting (an option or a variable) that adds a directory of plugins, in the error
    /// of a plugin not found.
    pub fn dir_setting(mut self, name: impl Into<String>) -> Self {
        self.dir_setting = Some(name.into());
        self
    }

    /// Hands each line a plugin logs, the values of its settings hidden, to `lines` with the
    /// plugin's driver and owner: what a host that filters its log sets.
    pub fn lines(mut self, lines: impl Fn(&str, &str, &str) + Send + Sync + 'static) -> Self {
        self.lines = Arc::new(lines);
        self
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

    /// Stops a plugin that no caller holds once none has asked for it for `idle`. Unset:
    /// [`DEFAULT_KEEP_IDLE`].
    pub fn keep_idle(mut self, idle: Duration) -> Self {
        self.keep_idle = idle;
        self
    }

    /// The plugins of `driver` kept now (one per owner and settings): what an operator's console or
    /// a test reaches a plugin's other services through.
    pub fn running(&self, driver: &str) -> Vec<Arc<PluginProvider>> {
        lock(&self.kept)
            .iter()
            .filter(|((d, _, _), _)| d == driver)
            .map(|(_, k)| k.plugin.clone())
            .collect()
    }

    /// The provider of `driver` for `owner` on `settings`: the plugin kept for them, or one
    /// started now. The settings are the plugin's whole configuration (the host's own environment
    /// never fills in what they lack).
    pub async fn provider(
        &self,
        driver: &str,
        owner: &str,
        settings: &Settings,
    ) -> Result<Arc<dyn Provider>> {
        let key = (driver.to_string(), owner.to_string(), fingerprint(settings));
        if let Some(plugin) = self.kept(&key) {
            return Ok(plugin);
        }
        // Only the callers that need this same plugin wait here; the kept map is not held meanwhile.
        let gate = lock(&self.starting).entry(key.clone()).or_default().clone();
        let _starting = gate.lock().await;
        if let Some(plugin) = self.kept(&key) {
            return Ok(plugin); // started by the caller this one waited for
        }
        let path = self.find(driver)?;
        let (lines, d, o, s) = (
            self.lines.clone(),
            driver.to_string(),
            owner.to_string(),
            settings.clone(),
        );
        let command = PluginCommand::new(&path, owner)
            .settings(settings.clone())
            .explicit_settings()
            .start_timeout(self.start_timeout)
            .call_timeout(self.call_timeout)
            .stderr_lines(move |line| lines(&d, &o, &hide_settings(line, &s)));
        let plugin = Arc::new(PluginProvider::start(command).await?);
        // A program found under a driver's name serves that driver, or it is the wrong file: a
        // fake installed as a cloud's would make nothing in any cloud, and say nothing of it.
        if plugin.kind() != driver {
            return Err(Error::settings(
                ["plugin"],
                format!(
                    "the plugin {} serves kind {:?}, not {driver:?}",
                    path.display(),
                    plugin.kind()
                ),
            ));
        }
        tracing::info!(driver, owner, "plugin started");
        let mut kept = lock(&self.kept);
        kept.insert(
            key,
            Kept {
                plugin: plugin.clone(),
                asked: Instant::now(),
            },
        );
        self.let_go_idle(&mut kept);
        Ok(plugin)
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

    /// Lets go of the plugins in `kept` no caller holds that were not asked for within the idle
    /// time (dropped, they are killed once no caller holds them), and of the start locks nobody
    /// waits on.
    fn let_go_idle(&self, kept: &mut HashMap<Key, Kept>) {
        let idle = self.keep_idle;
        kept.retain(|_, k| Arc::strong_count(&k.plugin) > 1 || k.asked.elapsed() < idle);
        lock(&self.starting)
            .retain(|key, gate| kept.contains_key(key) || Arc::strong_count(gate) > 1);
    }

    /// The program of `driver`'s plugin, or an error naming every place looked in. The first one
    /// found must be a program the host may run ([`orca_machines::fs::check_program`]): it is
    /// handed credentials, so one that another user owns or may write, or that lies in a folder
    /// another user may write, is refused naming it (not passed over for one found later).
    pub fn find(&self, driver: &str) -> Result<PathBuf> {
        let plain = !driver.is_empty()
            && driver
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !plain {
            let got = orca_machines::spec::quoted(driver);
            let message = format!("a driver name of a-z, 0-9 and '-', got {got}");
            return Err(Error::invalid("kind", message));
        }
        let name = program(driver);
        let found = self
            .dirs
            .iter()
            .map(|d| d.join(&name))
            .find(|p| p.is_file());
        if let Some(found) = found {
            return match orca_machines::fs::check_program(&found) {
                Ok(()) => Ok(found),
                Err(e) => Err(Error::invalid(
                    "kind",
                    format!("the plugin {name} for driver {driver} is refused: {e}"),
                )),
            };
        }
        let looked: Vec<String> = self.dirs.iter().map(|d| d.display().to_string()).collect();
        let hint = match &self.dir_setting {
            Some(setting) => format!(" (set {setting})"),
            None => String::new(),
        };
        let looked = looked.join(", ");
        let message = format!("no plugin {name} for driver {driver}: looked in {looked}{hint}");
        Err(Error::invalid("kind", message))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_plugin_names_where_it_was_looked_for() {
        let host = PluginHost::new([PathBuf::from("/nonexistent/plugins")]).dir_setting("X_DIR");
        let e = host.find("nimbus").unwrap_err().to_string();
        assert!(e.contains("soul-cloud-nimbus"), "{e}");
        assert!(
            e.contains("/nonexistent/plugins") && e.contains("(set X_DIR)"),
            "{e}"
        );
        let own = std::env::current_exe().unwrap();
        assert!(
            e.contains(&own.parent().unwrap().display().to_string()),
            "{e}"
        );
        let e = host.find("../bin/sh").unwrap_err().to_string();
        assert!(e.contains("a driver name"), "{e}");
    }

    #[test]
    fn a_plugin_line_loses_the_values_of_its_settings() {
        let s = Settings::new()
            .with("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI")
            .with("AWS_REGION", "eu");
        let line = hide_settings("key wJalrXUtnFEMI in eu", &s);
        assert_eq!(line, "key *** in eu");
    }

    #[test]
    fn a_cut_line_loses_the_start_of_a_value_it_ends_in() {
        let s = Settings::new()
            .with("HCLOUD_TOKEN", "tok-9f3Kq2Lm8Xz1")
            .with("REGION", "eu-central");
        let cut = |kept: &str| hide_settings(&format!("{kept}{CUT_MARK}"), &s);
        assert_eq!(cut("key tok-9f3K"), format!("key {MASK}{CUT_MARK}"));
        // Three characters are no credential, as for whole values.
        assert_eq!(cut("key tok"), format!("key tok{CUT_MARK}"));
        // A line that was not cut hides a start too, of eight characters or more (the kit's
        // rule: an answer may repeat part of a token, as Hetzner's rate limit names its first half).
        assert_eq!(hide_settings("key tok-9f3K", &s), format!("key {MASK}"));
        assert_eq!(hide_settings("key tok-9f3", &s), "key tok-9f3");
        assert_eq!(cut("in eu-central"), format!("in {MASK}{CUT_MARK}"));
    }

    #[test]
    fn parts_of_a_value_that_is_no_secret_stay() {
        let s = Settings::new()
            .with("ORCA_AZURE_ARM_ENDPOINT", "https://management.azure.com/")
            .with("HCLOUD_TOKEN", "6MWq3U8cixMhwHorZd68v8ILzIZyJb4NqR5sTt0a");
        let line = hide_settings(
            "GET https://login.example/ at https://management.azure.com/",
            &s,
        );
        assert_eq!(line, format!("GET https://login.example/ at {MASK}"));
    }

    #[test]
    fn a_plugin_line_holding_the_first_half_of_a_token_shows_none_of_it() {
        let token = "6MWq3U8cixMhwHorZd68v8ILzIZyJb4NqR5sTt0a";
        assert_eq!(token.len(), 40);
        let s = Settings::new().with("HCLOUD_TOKEN", token);
        let line = hide_settings(&format!("rate limit for token {}...", &token[..20]), &s);
        assert_eq!(line, format!("rate limit for token {MASK}..."));
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
