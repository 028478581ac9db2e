//! # orca-gce: orca's Compute Engine driver
//!
//! [`GceProvider`] keeps the [`orca_machines::Provider`] contract on Compute Engine with reqwest and
//! typed models of the few resources involved, and `gcp_auth` for credentials (a service account JSON
//! key by path or base64, or application default credentials):
//!
//! - `create` is one `instances.insert` carrying the machine type, the Ubuntu 24.04 LTS image family of
//!   the type's architecture, the boot disk (size, `autoDelete`), network tags, user data in the
//!   metadata key `user-data`, the labels `orca=pool`, `orca-pool`, `orca-owner`, an optional
//!   `scheduling.maxRunDuration` with termination action `STOP`, and a `requestId` derived from the
//!   request, so that a retried insert makes no second VM. It follows the zone operation to its end;
//!   `ZONE_RESOURCE_POOL_EXHAUSTED` (and `_WITH_DETAILS`) is [`orca_machines::Created::NoStock`],
//!   `QUOTA_EXCEEDED` is [`orca_machines::Error::Quota`], and a failed operation removes the instance
//!   and the boot disk it made.
//! - `machines(pool)` is `instances.list` with a label filter, every page.
//! - `delete` refuses machines without this owner's labels, and treats 404 as gone.
//! - `arch` reads `machineTypes.get`'s `architecture`, cached.
//! - Capabilities: start, stop, resize (`setMachineType`, stopping a running machine first). No hourly
//!   price: the Cloud Billing Catalog is another API with its own permissions; the driver says
//!   `Unsupported`.
//! - Beyond the trait: [`GceProvider::create_with`] (tags, run duration, disk, image, extra labels per
//!   machine), [`GceProvider::set_labels`] (shed's `creating` / `ready` / `deleting`),
//!   [`GceProvider::machine`], and the firewall API shed's check uses
//!   ([`GceProvider::firewall_rule`], [`GceProvider::firewall_rules`],
//!   [`GceProvider::set_firewall_source_ranges`], [`GceProvider::network`]).
//!
//! Settings: see [`Config`] and [`EnvNames`] (the crate README lists each variable).
//!
//! ```no_run
//! # async fn demo() -> orca_machines::Result<()> {
//! use orca_machines::{MachineSpec, Provider};
//! let p = orca_gce::GceProvider::new(
//!     orca_gce::Config::builder()
//!         .project("my-project")
//!         .zone("europe-west1-b")
//!         .network("orca-net")
//!         .subnet("orca-subnet")
//!         .credentials_file("/secrets/sa.json")
//!         .build()?,
//!     "stack-1",
//! )
//! .await?;
//! let spec = MachineSpec::new("lab-1", "t2a-standard-1", "europe-west1-b", "lab");
//! let made = p.create(&spec).await?;
//! # let _ = made; Ok(()) }
//! ```

mod client;
pub mod config;
mod firewall;
mod model;
mod provider;

pub use config::{Config, ConfigBuilder, Credentials, EnvNames};
pub use firewall::{FirewallPorts, FirewallRule, Network};
pub use provider::{CreateOptions, GceProvider};

/// A provider for `owner` from the `ORCA_GCE_*` environment variables (see [`EnvNames`]).
pub async fn from_env(owner: &str) -> orca_machines::Result<GceProvider> {
    orca_machines::validate_owner(owner)?;
    GceProvider::new(Config::from_env()?, owner).await
}

/// A provider for `owner` from `settings`, keyed by the environment variables' names.
pub async fn from_settings(
    owner: &str,
    settings: &orca_machines::Settings,
) -> orca_machines::Result<GceProvider> {
    orca_machines::validate_owner(owner)?;
    let config = Config::from_lookup(&EnvNames::default(), |k| {
        settings.get(k).map(str::to_string)
    })?;
    GceProvider::new(config, owner).await
}

/// A provider for `owner` from the environment variables `names` gives (shed: [`EnvNames::shed`]).
pub async fn from_env_names(owner: &str, names: &EnvNames) -> orca_machines::Result<GceProvider> {
    orca_machines::validate_owner(owner)?;
    GceProvider::new(Config::from_env_names(names)?, owner).await
}
