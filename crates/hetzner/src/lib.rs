//! # orca-hetzner: orca's Hetzner Cloud driver
//!
//! [`HetznerProvider`] keeps the [`orca_machines::Provider`] contract on Hetzner Cloud servers, with
//! request and answer bodies from the `hcloud` crate's models (generated from Hetzner's OpenAPI
//! document).
//!
//! - `create` makes a server of the spec's type in its location with the image of the type's
//!   architecture (the arm64 variant for `cax*`), the configured SSH keys and firewall, the user data,
//!   and the labels `orca=pool`, `orca-pool`, `orca-owner` in the same call; it follows the create
//!   action to its end and answers the machine with its public IPv4 address. `resource_unavailable`
//!   and "not available in this location" are [`Created::NoStock`](orca_machines::Created::NoStock).
//!   Hetzner has no idempotency token, but server names are unique per project: a create retried
//!   after a lost answer meets `uniqueness_error` and adopts the server when it carries this owner's
//!   labels and pool (else [`Error::AlreadyExists`](orca_machines::Error::AlreadyExists)). A create
//!   whose action fails deletes the server.
//! - `machines(pool)` lists with the label selector `orca=pool,orca-pool=<pool>,orca-owner=<owner>`
//!   (`!orca-owner` for an empty owner), every page.
//! - `delete` refuses a server without this owner's labels, treats 404 as gone and follows the delete
//!   action.
//! - Capabilities: start/stop (`poweron`; `shutdown`, then `poweroff` after a bounded wait), resize
//!   (`change_type`, stopping the server when it runs: `caused_downtime`), hourly price (net, EUR, from
//!   the server type's prices per location).
//! - Calls are paced from the `RateLimit-Limit`, `RateLimit-Remaining` and `RateLimit-Reset` headers,
//!   so that the project's shared budget (3,600 requests an hour) is not burned, and 429s are retried
//!   by the shared [`RetryPolicy`](orca_machines::RetryPolicy) after `Retry-After` or the reset time.
//!
//! Settings: see [`config`] and the crate README.
//!
//! ```no_run
//! # async fn demo() -> orca_machines::Result<()> {
//! use orca_machines::{MachineSpec, Provider};
//! let p = orca_hetzner::from_env("stack-1").await?; // HCLOUD_TOKEN, ORCA_HCLOUD_*
//! let m = p.create(&MachineSpec::new("lab-1", "cax11", "hel1", "lab")).await?;
//! # Ok(()) }
//! ```

mod client;
pub mod config;
mod provider;

pub use config::{Config, ConfigBuilder};
pub use provider::{status_of, HetznerProvider};

/// A provider for `owner` (empty for none) from this process's environment: [`config::TOKEN_ENV`]
/// (required), [`config::IMAGE_ENV`], [`config::SSH_KEYS_ENV`], [`config::FIREWALL_ENV`],
/// [`config::ENDPOINT_ENV`]. Makes no call.
pub async fn from_env(owner: &str) -> orca_machines::Result<HetznerProvider> {
    orca_machines::validate_owner(owner)?;
    HetznerProvider::new(owner, Config::from_env()?)
}

/// A provider for `owner` from `settings`, keyed by the environment variables' names.
pub async fn from_settings(
    owner: &str,
    settings: &orca_machines::Settings,
) -> orca_machines::Result<HetznerProvider> {
    orca_machines::validate_owner(owner)?;
    HetznerProvider::new(
        owner,
        Config::from_lookup(|k| settings.get(k).map(str::to_string))?,
    )
}
