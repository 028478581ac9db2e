//! # orca-hetzner: orca's Hetzner Cloud driver
//!
//! [`HetznerProvider`] keeps the [`orca_machines::Provider`] contract on Hetzner Cloud servers. The
//! crate has the same files as every orca driver: [`config`] (settings as data: [`ConfigKey`],
//! [`Config`]), `client` (the paced HTTP calls and the one error mapping), `model` (the answers,
//! read leniently), `provider` (the contract) and `ext` (the extensions); and `actions`, the one
//! poller that reads every action the provider waits for together.
//!
//! - `create` makes a server of the spec's type in its location with the image of the type's
//!   architecture (the arm64 variant for `cax*`), the configured SSH keys, firewall and private
//!   network, the user data, and the labels `orca=pool`, `orca-pool`, `orca-owner` (and the spec's
//!   own) in the same call; it follows the create action to its end and answers the machine once a
//!   read shows it. A type deprecated in the location is refused before the call. The codes
//!   `resource_unavailable` and `placement_error`, of the answer or of the failed create action, are
//!   [`Created::NoStock`](orca_machines::Created::NoStock). Hetzner has no idempotency token, but
//!   server names are unique per project: a create retried after a lost answer meets
//!   `uniqueness_error` and takes over the server when it carries this owner's labels and pool
//!   (`Created::Machine` when it carries this call's token in [`CREATE_LABEL`], `Created::Adopted`
//!   from an earlier call; else [`Error::AlreadyExists`](orca_machines::Error::AlreadyExists)).
//! - `machines(pool)` lists with the label selector `orca=pool,orca-pool=<pool>,orca-owner=<owner>`
//!   (`!orca-owner` for an empty owner), every page; `machine(id)` reads one server.
//! - `delete` refuses a server without this owner's labels, treats 404 as gone and follows the delete
//!   action.
//! - Capabilities: start/stop, resize, hourly price, private address (with a network); options:
//!   labels, image. Extension: [`MachineLabels`](orca_machines::MachineLabels).
//! - Calls are paced from the `RateLimit-*` headers, so that the project's shared budget (3,600
//!   requests an hour) is not burned, and 429s are retried by the shared
//!   [`RetryPolicy`](orca_machines::RetryPolicy).
//!
//! ```no_run
//! # async fn demo() -> orca_machines::Result<()> {
//! use orca_machines::{MachineSpec, Provider};
//! let p = orca_hetzner::from_env("stack-1").await?; // HCLOUD_TOKEN, ORCA_HCLOUD_*
//! let m = p.create(&MachineSpec::new("lab-1", "cax11", "hel1", "lab")).await?;
//! # Ok(()) }
//! ```

mod actions;
mod client;
pub mod config;
mod ext;
mod model;
mod provider;

pub use client::ApiError;
pub use config::{Config, ConfigBuilder, ConfigKey};
pub use provider::{status_of, HetznerProvider, CREATE_LABEL};

/// A provider for `owner` (empty for none) from this process's environment: the variables of
/// [`ConfigKey::ALL`] ([`ConfigKey::Token`] required). Makes no call.
pub async fn from_env(owner: &str) -> orca_machines::Result<HetznerProvider> {
    orca_machines::validate_owner(owner)?;
    HetznerProvider::new(Config::from_env()?, owner).await
}

/// A provider for `owner` from `settings`, keyed by [`ConfigKey`] names; an unknown key is refused.
/// Makes no call.
pub async fn from_settings(
    owner: &str,
    settings: &orca_machines::Settings,
) -> orca_machines::Result<HetznerProvider> {
    orca_machines::validate_owner(owner)?;
    HetznerProvider::new(Config::from_settings(settings)?, owner).await
}
