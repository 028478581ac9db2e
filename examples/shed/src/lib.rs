//! # shed: the remote backend of a shed-server, on orca
//!
//! A shed-server keeps a record of every shed and, with the remote backend, runs each as its own VM in
//! a cloud project. This crate is that server's remote backend and HTTP API, and a `shed`
//! CLI, on orca's public API: the cloud is an `Arc<dyn orca::Provider>` made by
//! `orca::of_with(kind, owner, &settings)`, so the same server runs on Compute Engine (`gce`) and on
//! orca's in-memory cloud (`fake`).
//!
//! - [`config`]: the YAML file, every field and refusal; `*_env` variables read once at start-up.
//! - [`backend`]: records, the call-by-status matrix, limits, sizes; [`jobs`] do the cloud work in the
//!   background; [`pass`] keeps records and cloud in step every minute and reconciles at start-up.
//! - [`firewall`]: the firewall check, its three modes and the echo services of mode `auto`
//!   ([`echo`]).
//! - [`probe`]: "the agent answered a probe".
//! - [`store`]: the record cache and delete markers in `remote.state_dir`, written atomically.
//! - [`api`]: the axum routes, JSON and `text/event-stream`; [`cli`]: the `shed` command.
//! - [`clock`]: every duration of the server on an injectable clock.
//!
//! Left out (see the README): the in-VM agent, exec and the connect tunnel, SSH login proxying,
//! repository clones, and the other backends.

pub mod api;
pub mod backend;
pub mod cli;
pub mod clock;
pub mod config;
pub mod echo;
pub mod firewall;
pub mod jobs;
pub mod log;
pub mod model;
pub mod netaddr;
pub mod pass;
pub mod probe;
pub mod server;
pub mod store;

pub use backend::{ApiError, Backend, Caller, CreateRequest, Effect, Info, Parts, Timings};
pub use config::{Config, FileConfig};
pub use model::{Reason, Shed, ShedView, Status};

/// The orca owner of every VM a shed-server makes.
pub const OWNER: &str = "shed";
