//! # orca-gce: orca's Compute Engine driver
//!
//! [`GceProvider`] keeps the [`orca_machines::Provider`] contract (see
//! `crates/machines/CONTRACT.md`) on Compute Engine with reqwest and typed models of the few resources
//! involved, and `gcp_auth` for credentials (a service account JSON key by path or base64, or
//! application default credentials). One provider works in one project: in one zone
//! ([`ConfigKey::Zone`] set, as shed runs) or across every zone of it.
//!
//! - `create` is one `instances.insert` in the spec's zone, on the configured network and the
//!   region's subnet, carrying the machine type, the Ubuntu 24.04 LTS image family of the type's
//!   architecture (or the spec's image), the boot disk (a name of this create's own, `hyperdisk-balanced`
//!   or `pd-balanced` by series, size, `autoDelete`), network tags, user data (metadata
//!   `user-data`), SSH keys (metadata `ssh-keys`, with OS Login off: `enable-oslogin=FALSE`), the labels `orca=pool`, `orca-pool`,
//!   `orca-owner` and the spec's own, an optional `scheduling.maxRunDuration` with termination action
//!   `STOP`, and one `requestId` for the call's retries. It follows the zone operation to its end and
//!   answers once the instance reads back. A 409 adopts this owner's instance of that name, pool and
//!   type ([`orca_machines::Created::Adopted`]); `ZONE_RESOURCE_POOL_EXHAUSTED` (and
//!   `_WITH_DETAILS`) is [`orca_machines::Created::NoStock`]; a failed operation removes the instance
//!   and the boot disk it made, and names what it could not remove or check (an instance not shown
//!   yet whose boot disk is attached among them).
//! - `machines(pool)` is one paged `instances.list` (single zone) or `instances.aggregatedList`
//!   (every zone) filtered by labels; `machine_named(pool, name)` the same filtered on the name too.
//! - `delete_named(pool, name)` removes this owner's instances of that name in the pool, then the
//!   loose boot disks of that name with this owner's and the pool's labels and `orca-machine=<name>`
//!   (what a create whose insert found no room leaves when its clean-up fails; the boot disk carries
//!   that label, the instance does not), found by one `disks.list` (or `disks.aggregatedList`)
//!   filtered on the pool's labels, and on `orca-machine` too for a name over 54 characters; for a
//!   shorter name, a disk of a version before that label, without it, goes by its whole name.
//! - A machine id is `<zone>:<name>`; a bare name means an instance of the configured zone.
//! - Facts: `created_at`, `started_at`, `stopped_at` (`creationTimestamp`, `lastStartTimestamp`,
//!   `lastStopTimestamp`), `private_address` (`networkIP`), `fqdn` (the zonal internal DNS name
//!   `<name>.<zone>.c.<project>.internal`, or the custom `hostname`), `max_run_duration`.
//! - Extensions: [`orca_machines::MachineLabels`] (`setLabels` with the label fingerprint) and
//!   [`orca_machines::FirewallRules`] (read the network's rules, patch one rule's source ranges).
//!
//! Settings: [`ConfigKey`] (the crate README lists each one).
//!
//! ```no_run
//! # async fn demo() -> orca_machines::Result<()> {
//! use orca_machines::{MachineSpec, Provider};
//! let p = orca_gce::GceProvider::new(
//!     orca_gce::Config::builder()
//!         .project("my-project")
//!         .network("orca-net")
//!         .subnet("orca-subnet")
//!         .credentials_file("/secrets/sa.json")
//!         .build()?,
//!     "stack-1",
//! )
//! .await?;
//! let spec = MachineSpec::new("lab-1", "t2a-standard-1", "europe-west4-a", "lab");
//! let made = p.create(&spec).await?;
//! # let _ = made; Ok(()) }
//! ```

mod client;
pub mod config;
mod ext;
mod model;
mod provider;
#[cfg(test)]
mod reference;

pub use client::ApiError;
pub use config::{Config, ConfigBuilder, ConfigKey, Credentials, Subnet};
pub use provider::GceProvider;

/// A provider for `owner` from the `ORCA_GCE_*` environment variables ([`ConfigKey`]).
pub async fn from_env(owner: &str) -> orca_machines::Result<GceProvider> {
    orca_machines::validate_owner(owner)?;
    GceProvider::new(Config::from_env()?, owner).await
}

/// A provider for `owner` from `settings`, keyed by [`ConfigKey`] names.
pub async fn from_settings(
    owner: &str,
    settings: &orca_machines::Settings,
) -> orca_machines::Result<GceProvider> {
    orca_machines::validate_owner(owner)?;
    GceProvider::new(Config::from_settings(settings)?, owner).await
}
