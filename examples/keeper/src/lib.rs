//! # keeper: the `core.cloud` step on orca
//!
//! keeper's `core.cloud` module on any orca driver: `core.cloud.created` asks a
//! registered provider for VMs and records each as a `pending` soul with a one-time bootstrap token
//! (kept as a hash), `core.cloud.destroyed` destroys VMs and cascades the registries in one
//! transaction, `core.cloud.resized` changes VM sizes and reports the downtime per VM. The registries
//! (providers, profiles, souls, soul seeds, bootstrap tokens, the VM journal, the audit trail) live in
//! PostgreSQL in the schema `keeper`, managed through the operator REST API ([`api`]).
//!
//! The pieces: [`db`] (pool, migrations), [`registry`] (providers and profiles), [`cloud`] (the
//! step), [`audit`], [`vault`] (credentials at step time), [`drivers`] (orca providers), [`plugins`]
//! (the same as CloudDriver plugins, opt-in), [`tokens`]
//! (bootstrap and API tokens), [`mask`] (the secret filter of every output channel), [`userdata`]
//! (cloud-init for `generate_userdata` and `self_onboard`), [`scenario`] (the `on: keeper` check).
//!
//! ```no_run
//! # async fn run() -> keeper::Result<()> {
//! use std::sync::Arc;
//! let keeper = keeper::Keeper::connect(
//!     "postgres://postgres@127.0.0.1:5432/postgres",
//!     Arc::new(keeper::vault::FileVault::new("vault")),
//!     Arc::new(keeper::drivers::OrcaDrivers),
//!     keeper::cloud::Settings::default(),
//! )
//! .await?;
//! let params = serde_json::json!({"provider": "lab", "profile": "small", "count": 2});
//! match keeper.run_step("core.cloud.created", &params, "cli").await {
//!     Ok(out) => println!("{out}"),
//!     Err(failure) => eprintln!("{}", failure.output),
//! }
//! # Ok(()) }
//! ```

pub mod api;
pub mod audit;
pub mod cloud;
pub mod db;
pub mod drivers;
pub mod error;
pub mod fields;
pub mod logging;
pub mod mask;
pub mod plugins;
pub mod registry;
pub mod scenario;
pub mod tokens;
pub mod userdata;
pub mod vault;

pub use cloud::{Keeper, StepFailure};
pub use error::{Error, Result};
