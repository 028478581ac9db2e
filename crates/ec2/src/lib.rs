//! # orca-ec2: orca's AWS EC2 driver
//!
//! Machines are EC2 instances, made with RunInstances in the subnet of their location (availability
//! zone), with the configured security group and instance profile, the spec's user data, and Canonical's
//! newest Ubuntu 24.04 image for the machine type's architecture. They carry the tags `Name`, `orca`,
//! `orca-pool` and `orca-owner`, set in the RunInstances call itself, and a ClientToken derived from
//! owner, pool and name, so that a create made again names the same instance.
//!
//! Settings (see [`Ec2Builder`] and the README): region and credentials through aws-config's standard
//! chain; `ORCA_EC2_SUBNETS` (`eu-west-1a=subnet-1,eu-west-1b=subnet-2`), `ORCA_EC2_SECURITY_GROUP`,
//! `ORCA_EC2_INSTANCE_PROFILE`; optional `ORCA_EC2_IMAGES`, `ORCA_EC2_ROOT_VOLUME_GB` and
//! `ORCA_EC2_ENDPOINT`.
//!
//! ```no_run
//! # async fn f() -> orca_machines::Result<()> {
//! use orca_machines::{MachineSpec, Provider};
//! let p = orca_ec2::from_env("stack-1").await?;
//! let made = p.create(&MachineSpec::new("w-1", "t4g.small", "eu-west-1a", "lab")).await?;
//! for m in p.machines("lab").await? {
//!     p.delete(&m.id).await?;
//! }
//! # let _ = made; Ok(()) }
//! ```
//!
//! Capabilities: start and stop; resize (ModifyInstanceAttribute on a stopped instance: a running one
//! is stopped, changed and started again, and the answer says so with `caused_downtime`). No hourly
//! price (see the README for why).

mod client;
pub mod config;
mod provider;

pub use config::{Ec2Builder, StaticCredentials, Waiting};
pub use provider::{client_token, status_of, Ec2Provider, NAME_TAG};
/// The secret type [`StaticCredentials`] takes.
pub use secrecy::SecretString;

/// A provider for `owner` (empty for none) from this process's settings ([`Ec2Builder::from_env`]).
/// A missing setting is an [`orca_machines::Error::InvalidSettings`] that names every missing variable.
pub async fn from_env(owner: &str) -> orca_machines::Result<Ec2Provider> {
    Ec2Builder::from_env(owner).build().await
}

/// A provider for `owner` from `settings`, keyed by the environment variables' names.
pub async fn from_settings(
    owner: &str,
    settings: &orca_machines::Settings,
) -> orca_machines::Result<Ec2Provider> {
    Ec2Builder::from_vars(owner, |k| settings.get(k).map(str::to_string))
        .build()
        .await
}
