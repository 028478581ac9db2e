//! # orca-azure: orca's Azure driver
//!
//! Machines on Azure behind orca's [`Provider`](orca_machines::Provider) contract, with credentials
//! from the maintained `azure_identity` 1.x (client secret, workload identity, managed identity,
//! Azure CLI) and Azure Resource Manager calls written from the REST specifications (compute
//! 2024-07-01, network 2024-05-01, resource SKUs 2021-07-01, resources 2021-04-01, consumption
//! 2023-05-01), plus the public Retail Prices API.
//!
//! The files, by role (the same in every orca driver):
//! - [`config`]: the settings ([`ConfigKey`], [`Config`], [`ConfigBuilder`]);
//! - [`credential`]: the [`TokenSource`] trait and how [`Credential::Auto`] finds one;
//! - `client` (private): the transport, long-running operations, paging and the one error mapping;
//! - `model` (private): the typed answers of Azure;
//! - `provider`: [`AzureProvider`] and the [`Provider`](orca_machines::Provider) contract;
//! - `ext`: the extensions (labels, SSH admission, credit balance);
//! - [`ArmError`]: Azure's own error, the `source()` of every error Azure answered.
//!
//! A machine is a VM plus its public address, security group and interface, all tagged
//! `orca=pool`, `orca-pool`, `orca-owner`; its orca id is the VM's name. The contract it keeps is
//! [`orca_machines::contract`]; the README says what Azure reports and what it needs.

mod client;
pub mod config;
pub mod credential;
mod error;
mod ext;
mod model;
mod pacer;
mod provider;
#[cfg(test)]
mod reference;

pub use config::{Config, ConfigBuilder, ConfigKey, Credential, ImageUrn};
pub use credential::{auto_choice, AutoChoice, StaticToken, TokenSource};
pub use error::ArmError;
pub use provider::{AzureProvider, KIND, MAX_NAME};

/// A provider for `owner` from this process's environment ([`ConfigKey`] names); every problem of
/// the settings is one [`orca_machines::Error::InvalidSettings`] naming each key at fault.
pub async fn from_env(owner: &str) -> orca_machines::Result<AzureProvider> {
    orca_machines::validate_owner(owner)?;
    AzureProvider::new(Config::from_env()?, owner).await
}

/// A provider for `owner` from `settings`, keyed by the environment variables' names
/// ([`ConfigKey`]); an unknown key is refused. Nothing is read from the process environment.
pub async fn from_settings(
    owner: &str,
    settings: &orca_machines::Settings,
) -> orca_machines::Result<AzureProvider> {
    orca_machines::validate_owner(owner)?;
    AzureProvider::new(Config::from_settings(settings)?, owner).await
}
