//! # orca-azure: orca's Azure driver
//!
//! Machines on Azure behind orca's [`Provider`](orca_machines::Provider) contract, with credentials
//! from the maintained `azure_identity` 1.x (client secret, managed identity, Azure CLI) and typed
//! Azure Resource Manager calls written from the REST specifications (compute 2024-07-01, network
//! 2024-05-01, resource SKUs 2021-07-01), plus the public Retail Prices API.
//!
//! - [`config`]: every setting ([`Settings::from_env`], [`Settings::builder`]);
//! - [`credential`]: the [`TokenSource`] trait (static token, azure_identity);
//! - [`client`]: the Resource Manager client, long-running operations, paging and the one error
//!   mapping ([`client::map_error`]);
//! - [`provider`]: the provider, [`AzureProvider`];
//! - [`admission`]: stado's SSH admission (application security group + subnet rule);
//! - [`price`]: hourly prices.
//!
//! A machine is a VM plus its public address, security group and interface, all tagged
//! `orca=pool`, `orca-pool`, `orca-owner`; its orca id is the VM's name.

pub mod admission;
pub mod client;
pub mod config;
pub mod credential;
pub mod price;
pub mod provider;

pub use admission::{Admission, AdmissionRule};
pub use config::{Credential, ImageUrn, Settings, SettingsBuilder};
pub use credential::{StaticToken, TokenSource};
pub use provider::AzureProvider;

/// A provider for `owner` from this process's environment (see [`config`] for the variables); a
/// missing setting is an [`orca_machines::Error::InvalidSettings`] naming every missing variable.
pub async fn from_env(owner: &str) -> orca_machines::Result<AzureProvider> {
    orca_machines::validate_owner(owner)?;
    AzureProvider::new(Settings::from_env()?, owner)
}

/// A provider for `owner` from `settings`, keyed by the environment variables' names.
pub async fn from_settings(
    owner: &str,
    settings: &orca_machines::Settings,
) -> orca_machines::Result<AzureProvider> {
    orca_machines::validate_owner(owner)?;
    AzureProvider::new(
        Settings::from_lookup(|k| settings.get(k).map(str::to_string))?,
        owner,
    )
}
