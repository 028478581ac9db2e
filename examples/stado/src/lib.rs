//! # stado: cloud build hosts
//!
//! The cloud-facing part of stado: `stado cloud host create | list | delete | reap`, with
//! the profile and registry they read and write, the credit gate, admission of the fleet's addresses on
//! SSH, the fleet key, the host's resources, its first boot, enrolment, idle reaping and deletion. It
//! runs on orca's public API only, holding the provider as `Arc<dyn orca::Provider>`: `--provider azure`
//! is orca's Azure driver, `--provider fake` the in-memory provider (kept in a state file in the stado
//! home) with a simulated fleet, so that every command runs on a laptop.
//!
//! - [`home`]: the stado home and the write lock that refuses a second writer; [`files`]: its
//!   atomic writes;
//! - [`profile`]: providers, bindings, the operator's credit floor ruling (`stado config set`);
//! - [`registry`]: targets, `targets[].cloud`, `cloud_hosts` (`stado registry set --path --value`);
//! - [`keys`]: fleet keys and host keys (ed25519, OpenSSH formats, private halves 0600, never
//!   replaced);
//! - [`channel`]: the host channel trait, OpenSSH with strict host-key checking, the simulated fleet;
//! - [`cloudinit`]: the first boot's cloud-init;
//! - [`azure`]: the Azure driver's settings from the profile and the environment;
//! - [`cloud`]: [`Stado`] and what the commands share; [`admission`]: the fleet's addresses and
//!   their admission on SSH (create and reap);
//! - the commands: [`create`], [`list`], [`delete`], [`reap`].
//!
//! Not here: the builds themselves (`stado host kompilator`), and the coordinator beyond
//! `stado cloud host reap --apply --every SECONDS`.

pub mod admission;
pub mod azure;
pub mod channel;
pub mod cloud;
pub mod cloudinit;
pub mod create;
pub mod delete;
pub mod error;
pub mod files;
pub mod home;
pub mod keys;
pub mod list;
pub mod profile;
pub mod reap;
pub mod registry;

pub use cloud::{Stado, Timing};
pub use create::{CreateReport, CreateRequest};
pub use delete::DeleteReport;
pub use error::Failure;
pub use home::Home;
pub use list::ListReport;
pub use reap::{ReapReport, Verdict};
