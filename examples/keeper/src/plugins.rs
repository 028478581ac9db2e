//! keeper's plugins: providers as CloudDriver plugins (`soul-cloud-<driver>`), kept by
//! [`orca_plugin::PluginHost`],
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
//! line by line, without the values of the settings it was given and through the same filter as
//! keeper's own lines.
//!
//! A plugin that never answers holds nothing but its own start: a start is bounded
//! ([`DEFAULT_START_TIMEOUT`]; the child is killed after it), only the steps that need that same
//! plugin wait for it, and every call is bounded too ([`DEFAULT_CALL_TIMEOUT`]).

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use orca::{Provider, Settings};
pub use orca_plugin::host::{program, DEFAULT_CALL_TIMEOUT, DEFAULT_KEEP_IDLE};
pub use orca_plugin::{PluginHost, DEFAULT_START_TIMEOUT};

use crate::drivers::Drivers;
use crate::mask::mask_text;

/// The setting that names a directory of plugins (keeper's `--plugin-dir`).
pub const PLUGIN_DIR_ENV: &str = "KEEPER_PLUGIN_DIR";

/// keeper's plugins, looked for in `dirs` (in order), then beside keeper's own program; their log
/// lines, the values of their settings hidden, are masked as every line keeper logs and logged at
/// `info`, naming the plugin's driver and owner.
pub fn host(dirs: impl IntoIterator<Item = PathBuf>) -> PluginHost {
    PluginHost::new(dirs)
        .dir_setting(PLUGIN_DIR_ENV)
        .lines(|driver, owner, line| {
            let line = mask_text(line);
            tracing::info!(target: "keeper::plugin", driver = %driver, owner = %owner, "{line}");
        })
}

#[async_trait]
impl Drivers for PluginHost {
    async fn provider(
        &self,
        driver: &str,
        owner: &str,
        settings: &Settings,
    ) -> orca::Result<Arc<dyn Provider>> {
        // The vault's settings are the plugin's whole configuration, as they are a linked driver's:
        // a row without credentials is refused, never run on the keeper host's own.
        PluginHost::provider(self, driver, owner, settings).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_plugin_names_where_it_was_looked_for() {
        let d = host([PathBuf::from("/nonexistent/plugins")]);
        let e = d.find("nimbus").unwrap_err().to_string();
        assert!(e.contains("soul-cloud-nimbus"), "{e}");
        assert!(e.contains("/nonexistent/plugins"), "{e}");
        assert!(e.contains(PLUGIN_DIR_ENV), "{e}");
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
        let hidden = orca_plugin::host::hide_settings(
            "key wJalrXUtnFEMI in eu, api_token=abc123 refused",
            &s,
        );
        let line = mask_text(&hidden);
        assert_eq!(line, "key *** in eu, api_token=*** refused");
    }
}
