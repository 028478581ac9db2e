//! Start-up of a shed-server: the configuration file, the variables read once, the provider made with
//! `orca::of_with`, the backend started (reconciliation included) and the API served.

use std::future::IntoFuture as _;
use std::path::Path;
use std::sync::Arc;

use crate::api::router;
use crate::backend::{Backend, Parts, Timings};
use crate::clock::SystemClock;
use crate::config::{Config, FileConfig, Transport};
use crate::echo::HttpsEcho;
use crate::probe::{LocalProbe, Probe, SshBannerProbe};
use crate::store::Store;
use crate::OWNER;

/// Reads the configuration file at `path` and resolves it against this process's environment (each
/// variable read once, here).
pub fn load_config(path: &Path) -> Result<Config, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("the configuration file {}: {e}", path.display()))?;
    let file = FileConfig::parse(&text).map_err(|e| e.to_string())?;
    file.resolve(&|k| std::env::var(k).ok())
        .map_err(|e| e.to_string())
}

/// The provider `cfg` names, made from the driver settings the configuration mapped.
pub async fn provider(cfg: &Config) -> Result<Arc<dyn orca::Provider>, String> {
    orca::of_with(cfg.provider.as_str(), OWNER, &cfg.provider_settings)
        .await
        .map_err(|e| format!("the {} provider: {e}", cfg.provider.as_str()))
}

/// Starts the backend of `cfg` on the system clock with the shipped probe and echo client. Its
/// `remote.state_dir` is locked first: while another server holds it, this fails naming the
/// directory, having read nothing and sent nothing to the cloud.
pub async fn start_backend(cfg: Config) -> Result<Backend, String> {
    let store = Store::open(&cfg.state_dir).map_err(|e| format!("the state directory: {e}"))?;
    let provider = provider(&cfg).await?;
    let probe: Arc<dyn Probe> = match cfg.transport {
        Transport::Ssh => Arc::new(SshBannerProbe::new()),
        Transport::Local => Arc::new(LocalProbe),
    };
    let parts = Parts {
        echo: Arc::new(HttpsEcho::new()?),
        timings: Timings::standard(cfg.pass_interval),
        config: cfg,
        provider,
        probe,
        clock: Arc::new(SystemClock),
    };
    Backend::start_on(store, parts)
        .await
        .map_err(|e| format!("the state directory: {e}"))
}

/// Runs the server until Ctrl-C (SIGINT) or SIGTERM, which stop it alike: the log says which, and
/// every VM is left as it is. At the first signal the jobs and the pass stop and every open event
/// stream ends, and the server waits for the requests in flight; a second signal stops it at once.
pub async fn serve(cfg: Config) -> Result<(), String> {
    let listen = cfg.listen;
    // Bound before the backend starts: a server whose port is taken stops having done nothing.
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| format!("listen on {listen}: {e}"))?;
    let backend = start_backend(cfg).await?;
    // The handlers are in place before the server says it listens: a signal sent from then on
    // stops it as described, never by the signal's default action.
    // SIGINT and SIGTERM (what a service manager sends) stop it alike; one whose handler cannot be
    // installed keeps its default action.
    let mut signals = orca::signals::StopSignals::install_each();
    // The address bound, which differs from the configured one for port 0.
    let bound = listener.local_addr().unwrap_or(listen);
    let log = backend.log().clone();
    log.info(format!("remote: shed-server listening on {bound}"));
    let stopping = backend.clone();
    let server = axum::serve(listener, router(backend.clone()))
        .with_graceful_shutdown(async move { stopping.stopped().await })
        .into_future();
    let mut server = std::pin::pin!(server);
    let first = tokio::select! {
        r = &mut server => {
            backend.shutdown();
            return r.map_err(|e| e.to_string());
        }
        signal = signals.next() => signal,
    };
    log.info(format!(
        "remote: shed-server stopping ({first}); every VM is left as it is"
    ));
    // The open event streams end here (a create or delete goes on when the server starts again),
    // so the graceful stop waits only for the requests in flight.
    backend.stop();
    tokio::select! {
        r = &mut server => r.map_err(|e| e.to_string())?,
        again = signals.next() => log.info(format!(
            "remote: shed-server stopping at once ({again} again); the requests in flight are cut off"
        )),
    }
    backend.shutdown();
    Ok(())
}

/// For provider `fake` with its state file ([`orca::FAKE_STATE_ENV`]): puts the firewall rule `shed-<environment>-ssh` into the
/// simulated cloud as shed's README makes it on Compute Engine (on the in-memory provider's network,
/// admitting the static sources, or `203.0.113.7/32` in the other modes).
pub fn fake_setup(cfg: &Config) -> Result<String, String> {
    let Some(path) = cfg.provider_settings.get(orca::FAKE_STATE_ENV) else {
        return Err(format!(
            "fake-setup needs provider fake and {} (the state file the server shares)",
            orca::FAKE_STATE_ENV
        ));
    };
    let cloud = orca::memory::MemoryCloud::persistent(path).map_err(|e| e.to_string())?;
    let mut rule = orca::FirewallRule::new(cfg.rule_name(), orca::memory::DEFAULT_NETWORK);
    rule.allowed = vec![orca::FirewallPorts::new("tcp", ["22"])];
    rule.target_tags = vec![cfg.network_tag()];
    let ranges = &cfg.firewall.source_ranges;
    rule.source_ranges = ranges.iter().map(|c| c.to_string()).collect();
    if ranges.is_empty() {
        rule.source_ranges = vec!["203.0.113.7/32".into()];
    }
    let sources = rule.source_ranges.join(", ");
    cloud.put_firewall_rule(rule);
    Ok(format!(
        "put firewall rule {} (network {}, tcp:22, tag {}, sources {sources}) into {path}",
        cfg.rule_name(),
        orca::memory::DEFAULT_NETWORK,
        cfg.network_tag()
    ))
}
