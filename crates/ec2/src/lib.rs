//! # orca-ec2: orca's AWS EC2 driver
//!
//! [`Ec2Provider`] keeps the [`orca_machines::Provider`] contract on EC2 instances. The crate has the
//! same files as every orca driver: [`config`] (settings as data: [`ConfigKey`], [`Config`],
//! [`ConfigBuilder`]), `client` (the SDK calls under orca's retry policy, and the one error mapping),
//! `model` (EC2's answers as orca's machines), `listing` (DescribeInstances' answers read by the
//! driver itself), `provider` (the contract) and `ext` (the extensions).
//!
//! - `create` runs an instance in the subnet of its location (availability zone), with the configured
//!   security group and instance profile, the spec's user data and labels, and Canonical's newest
//!   Ubuntu 24.04 image for the machine type's architecture (or the spec's own AMI, checked to be of
//!   that architecture). The tags `Name`, `orca`, `orca-pool` and `orca-owner` are set in the
//!   RunInstances call itself, which carries a ClientToken derived from owner, pool and name: a
//!   create made again names the same instance, and EC2 answers it. The create answers once a
//!   listing of its pool shows the instance (EC2 is eventually consistent).
//! - `machines(pool)` filters DescribeInstances on the tags, every page; `machine(id)` reads one
//!   instance; `delete` refuses another owner's and follows the instance to `terminated`.
//! - `delete_named(pool, name)` removes every instance of this owner's pool with that name: those
//!   the create's ClientTokens name (which EC2 shows before its tag filters catch up with a new
//!   instance) and those the tag-filtered listing shows, each checked by its own tags.
//! - Capabilities: start/stop, resize, power times, private address; options: labels, disk size,
//!   image. Extension: [`MachineLabels`](orca_machines::MachineLabels) (CreateTags/DeleteTags).
//!
//! ```no_run
//! # async fn f() -> orca_machines::Result<()> {
//! use orca_machines::{MachineSpec, Provider};
//! let p = orca_ec2::from_env("stack-1").await?; // ORCA_EC2_*, region and credentials by aws-config
//! let made = p.create(&MachineSpec::new("w-1", "t4g.small", "eu-west-1a", "lab")).await?;
//! for m in p.machines("lab").await? {
//!     p.delete(&m.id).await?;
//! }
//! # let _ = made; Ok(()) }
//! ```

mod client;
pub mod config;
mod ext;
mod listing;
mod model;
mod provider;

pub use config::{Config, ConfigBuilder, ConfigKey, StaticCredentials};
#[doc(hidden)]
pub use listing::{Reading, read_listing, read_listing_by_sdk};
pub use model::{NAME_TAG, reason_time, status_of};
pub use provider::{Ec2Provider, KIND, client_token};
/// The secret type [`StaticCredentials`] takes.
pub use secrecy::SecretString;

use orca_machines::Error;

/// A provider for `owner` (empty for none) from this process's environment: the `ORCA_EC2_*`
/// variables of [`ConfigKey::ALL`], region and credentials through aws-config's standard chain. A
/// missing setting is an [`Error::InvalidSettings`] that names every missing variable, the region
/// among them. Makes no call to EC2.
pub async fn from_env(owner: &str) -> orca_machines::Result<Ec2Provider> {
    orca_machines::validate_owner(owner)?;
    match Config::from_env() {
        Ok(config) => Ec2Provider::new(config, owner).await,
        Err(Error::InvalidSettings { mut keys, message }) => {
            // The region is named with the rest when no source of aws-config's chain has one.
            let mut message = message;
            if client::chain_region().await.is_none() {
                keys.push(config::REGION_ENV.to_string());
                message = format!(
                    "{message}; missing {} (no source of aws-config's region chain gave one)",
                    config::REGION_ENV
                );
            }
            Err(Error::InvalidSettings { keys, message })
        }
        Err(e) => Err(e),
    }
}

/// A provider for `owner` from `settings`, keyed by [`ConfigKey`] names, region and static
/// credentials included: nothing is read from the process environment (keeper passes credentials
/// it resolved from its vault this way). An unknown key is refused. Makes no call to EC2.
pub async fn from_settings(
    owner: &str,
    settings: &orca_machines::Settings,
) -> orca_machines::Result<Ec2Provider> {
    orca_machines::validate_owner(owner)?;
    Ec2Provider::new(Config::from_settings(settings)?, owner).await
}
