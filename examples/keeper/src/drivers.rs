//! Making an orca provider for a registered Cloud-Provider at step time.
//!
//! [`OrcaDrivers`] calls `orca::of_with(driver, owner, &settings)`; the settings are what the vault
//! holds at the provider's `credentials_ref` (each driver's environment names: `HCLOUD_TOKEN`;
//! `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`; `ORCA_AZURE_*`; `ORCA_GCE_*`; for
//! `fake`, `ORCA_FAKE_STATE`), plus what the registry row says ([`driver_settings`]). The trait lets a
//! test wrap the provider (to record what keeper asked for, or to take a capability away).

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

/// The settings a provider row adds to its vault's: the region as `AWS_REGION` for `ec2` (EC2's
/// locations are zones; its API is per region) unless the vault sets it.
pub fn driver_settings(provider: &CloudProvider, mut settings: Settings) -> Settings {
    if provider.driver == "ec2" && settings.get("AWS_REGION").is_none() {
        settings.insert("AWS_REGION", provider.region.clone());
    }
    settings
}
