//! # orca-plugin
//!
//! orca's drivers as CloudDriver plugins: the contract of [`orca_machines::Provider`] as a
//! versioned gRPC service (`proto/orca/cloud/v1/cloud_driver.proto`) that a plugin program serves
//! on its stdin and stdout, and the host's side of it.
//!
//! - A plugin is a few lines: make a provider, then [`serve`] it (the programs `soul-cloud-fake`,
//!   `soul-cloud-hetzner`, `soul-cloud-ec2`, `soul-cloud-azure` and `soul-cloud-gce` are built so,
//!   their settings and owner from their environment, the settings exactly those the host names in
//!   [`SETTINGS_ENV`] when it does; see [`run_kind`]).
//! - A host starts a plugin with [`PluginProvider::start`], which is a `Provider` like any driver:
//!   it hands the plugin its settings in the child's environment (never its command line),
//!   refuses a plugin that speaks another protocol version, and restarts a plugin that died on the
//!   next call (the call in flight fails as a passing failure that may have acted).
//! - A host that runs many providers keeps them in a [`PluginHost`]: started on first use, one per
//!   driver, owner and settings, the idle ones let go.
//!
//! See the crate's README for the wire and how to write a plugin in another language.

use std::sync::Arc;

use orca_machines::Provider;

mod client;
mod errors;
pub mod fake;
pub mod host;
mod server;
mod stdio;
mod wire;

pub use client::{
    PluginCommand, PluginProvider, StderrLines, CUT_MARK, DEFAULT_START_TIMEOUT, MAX_STDERR_LINE,
};
pub use errors::{error_from, error_to};
pub use host::PluginHost;
pub use server::Driver;
pub use stdio::{serve_on, serve_stdio};
pub use tonic::service::Routes;

/// The messages and services of the protocol, as generated from its `.proto` files.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod proto {
    /// `orca.cloud.v1`: the CloudDriver service.
    pub mod v1 {
        tonic::include_proto!("orca.cloud.v1");
    }
    /// `orca.cloud.fake.v1`: the test console of `soul-cloud-fake`.
    pub mod fake {
        // One level deeper than `v1`, so that the generated code's path to the CloudDriver
        // messages it uses (`super::super::v1`, from package `orca.cloud.fake.v1` to
        // `orca.cloud.v1`) lands on `proto::v1`.
        mod generated {
            tonic::include_proto!("orca.cloud.fake.v1");
        }
        pub use generated::*;
    }
}

/// The CloudDriver protocol version this crate speaks, host and plugin.
pub const PROTOCOL_VERSION: u32 = proto::v1::ProtocolVersion::ProtocolVersion1 as u32;

/// The environment variable that carries the owner to a plugin (empty or unset: no owner).
pub const OWNER_ENV: &str = "ORCA_PLUGIN_OWNER";

/// The environment variable by which a host marks the settings it hands a plugin as explicit: the
/// comma-separated names of the environment variables that are the settings (empty: none). Set,
/// [`run_kind`] makes its provider from exactly those, as [`orca::of_with`] does: a missing
/// credential is refused by name, never looked for in `HOME` or the machine's identity. Unset, it
/// reads its environment as [`orca::of`] does. [`PluginCommand::explicit_settings`] sets it.
pub const SETTINGS_ENV: &str = "ORCA_PLUGIN_SETTINGS";

/// The largest message either side reads: a listing of many thousands of machines fits.
pub(crate) const MAX_MESSAGE: usize = 256 * 1024 * 1024;

/// HTTP/2 flow-control windows of both sides: a large listing crosses the pipe without waiting for
/// the reader's window updates (the default 64 KiB makes a 1,000-machine listing many round trips).
pub(crate) const WINDOW: u32 = 8 * 1024 * 1024;

/// The largest HTTP/2 frame either side takes: 1 MiB, so that a listing of thousands of machines
/// crosses as a few frames (not as 16 KiB frames that each may wake the reader), yet garbage on a
/// plugin's stdout (a length read from text is megabytes) is refused as a frame too large instead
/// of read as frames of a type nobody knows, which HTTP/2 says to skip.
pub(crate) const MAX_FRAME: u32 = 1024 * 1024;

/// Serves `provider` as the CloudDriver service on this process's stdin and stdout until the host
/// closes them. It sets up no logging: a plugin that logs calls [`log_to_stderr`] first, since a
/// subscriber writing to stdout would corrupt the protocol.
pub async fn serve(provider: Arc<dyn Provider>) -> std::io::Result<()> {
    serve_stdio(Routes::new(Driver::new(Ok(provider)).into_service())).await
}

/// Logs on stderr (stdout carries the protocol), filtered by `RUST_LOG` (default `info`).
pub fn log_to_stderr() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

/// The program `soul-cloud-<kind>`: the provider of `kind` for the owner in [`OWNER_ENV`], served
/// on stdin and stdout; exits when the host closes them. The provider is made by [`orca::of_with`]
/// from exactly the variables [`SETTINGS_ENV`] names when the host set it, otherwise by [`orca::of`]
/// from this process's environment (the drivers' ambient chains included). A provider that cannot
/// be made (settings missing) is served as its error, so that the host's handshake names what is
/// wrong.
pub fn run_kind(kind: &str) -> ! {
    log_to_stderr();
    let owner = std::env::var(OWNER_ENV).unwrap_or_default();
    let code = runtime().block_on(async {
        let provider = match explicit_settings() {
            None => orca::of(kind, &owner).await,
            Some(Ok(settings)) => orca::of_with(kind, &owner, &settings).await,
            Some(Err(e)) => Err(e),
        };
        if let Err(e) = &provider {
            tracing::error!(kind, "the provider cannot be made: {e}");
        }
        serve_routes_logged(Routes::new(Driver::new(provider).into_service())).await
    });
    // The runtime's stdin reader blocks a thread until the stream ends: leave without waiting.
    std::process::exit(code)
}

/// The settings the host marked as explicit ([`SETTINGS_ENV`]), or `None` when it did not.
fn explicit_settings() -> Option<orca::Result<orca::Settings>> {
    let names = std::env::var_os(SETTINGS_ENV)?;
    let Some(names) = names.to_str() else {
        return Some(Err(orca::Error::settings(
            [SETTINGS_ENV],
            "comma-separated names of environment variables, got text that is not Unicode",
        )));
    };
    Some(Ok(orca::Settings::from_env(
        names.split(',').filter(|n| !n.is_empty()),
    )))
}

/// One thread: a plugin waits on its cloud and its host, and a call that wakes the connection's
/// task, the call's task and back on one thread spends no hand-off between threads.
pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

pub(crate) async fn serve_routes_logged(routes: Routes) -> i32 {
    match serve_stdio(routes).await {
        Ok(()) => 0,
        Err(e) => {
            tracing::error!("serving on stdio failed: {e}");
            1
        }
    }
}
