//! Making an orca provider for a registered Cloud-Provider at step time.
//!
//! [`OrcaDrivers`] calls `orca::of_with(driver, owner, &settings)`; the settings are what the vault
//! holds at the provider's `credentials_ref` (the keys each driver documents as its `ConfigKey`:
//! Hetzner's token; EC2's access key, secret and region; Azure's and GCE's account and placement
//! keys; the fake's state file), plus what the registry row says ([`driver_settings`]), checked
//! against the driver's keys first ([`orca::check_settings`]), whichever [`Drivers`] make the provider:
//! a plugin reads its settings from its environment, where a key it does not know would be
//! silently ignored. The trait lets a test wrap the provider (to record what keeper asked for, or
//! to take a capability away).

use std::sync::Arc;

use async_trait::async_trait;
use orca::{Provider, Settings};

use crate::registry::CloudProvider;

/// Makes providers.
#[async_trait]
pub trait Drivers: Send + Sync + std::fmt::Debug {
    /// A provider of kind `driver` for `owner` from `settings`.
    async fn provider(
        &self,
        driver: &str,
        owner: &str,
        settings: &Settings,
    ) -> orca::Result<Arc<dyn Provider>>;
}

/// The drivers this build of orca has (`fake` always; the clouds with the feature `clouds`).
#[derive(Debug, Default, Clone, Copy)]
pub struct OrcaDrivers;

#[async_trait]
impl Drivers for OrcaDrivers {
    async fn provider(
        &self,
        driver: &str,
        owner: &str,
        settings: &Settings,
    ) -> orca::Result<Arc<dyn Provider>> {
        orca::of_with(driver, owner, settings).await
    }
}

/// EC2's region setting (`orca::ec2::ConfigKey::Region`, a test checks it), named here because a
/// build without the `clouds` feature does not link the EC2 driver, yet its `ec2` plugin needs it.
const EC2_REGION: &str = "AWS_REGION";

/// The settings a provider row adds to its vault's: the region as EC2's region setting for `ec2`
/// (EC2's locations are zones; its API is per region) unless the vault sets it, whatever the
/// build: a build without the `clouds` feature reaches EC2 through its plugin.
pub fn driver_settings(provider: &CloudProvider, mut settings: Settings) -> Settings {
    if provider.driver == "ec2" && settings.get(EC2_REGION).is_none() {
        settings.insert(EC2_REGION, provider.region.clone());
    }
    settings
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(driver: &str) -> CloudProvider {
        CloudProvider {
            name: "p".into(),
            driver: driver.into(),
            credentials_ref: "r".into(),
            region: "eu-west-1".into(),
            fqdn_suffix: None,
            created_at: chrono::Utc::now(),
        }
    }

    #[cfg(feature = "clouds")]
    #[test]
    fn the_region_setting_is_ec2s() {
        assert_eq!(orca::ec2::ConfigKey::Region.as_str(), EC2_REGION);
    }

    #[test]
    fn an_ec2_row_gives_its_region_unless_the_vault_does() {
        // Whatever the build: plugins read it as EC2 reads its region, from the environment's name.
        let s = driver_settings(&row("ec2"), Settings::new());
        assert_eq!(s.get("AWS_REGION"), Some("eu-west-1"));
        let s = driver_settings(&row("ec2"), Settings::new().with(EC2_REGION, "us-east-2"));
        assert_eq!(s.get(EC2_REGION), Some("us-east-2"));
        let s = driver_settings(&row("hetzner"), Settings::new());
        assert!(s.is_empty());
    }
}
