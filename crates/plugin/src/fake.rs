//! `soul-cloud-fake`: the in-memory cloud as a plugin, for tests and trials of a host.
//!
//! The cloud lives in the plugin process, or in the state file [`orca::FAKE_STATE_ENV`] names, so
//! that a plugin started again (and a test beside it) sees the same machines. Beside CloudDriver it
//! serves `FakeControl` (`proto/orca/cloud/fake/v1/fake_control.proto`): what a test does to the
//! simulated cloud that the state file does not carry (injected faults, the request count).

use std::sync::Arc;

use orca_machines::memory::{FaultKind, MemoryCloud, Operation};
use orca_machines::{Error, Provider, Result};
use tonic::{Request, Response, Status};

use crate::proto::fake as pb;
use crate::proto::fake::fake_control_server::{FakeControl, FakeControlServer};
use crate::{Driver, Routes, OWNER_ENV};

/// The environment variable that sets the page size of the fake's listings (default 50): what a
/// test of paging sets.
pub const PAGE_SIZE_ENV: &str = "ORCA_PLUGIN_FAKE_PAGE_SIZE";

/// The environment variable that makes the fake state another protocol version in its handshake:
/// what a test of a host's version check sets.
pub const PROTOCOL_VERSION_ENV: &str = "ORCA_PLUGIN_FAKE_PROTOCOL_VERSION";

/// The test console over one simulated cloud.
#[derive(Debug, Clone)]
pub struct Control {
    cloud: MemoryCloud,
}

impl Control {
    /// The console of `cloud`.
    pub fn new(cloud: MemoryCloud) -> Self {
        Control { cloud }
    }

    /// The console as tonic serves it.
    pub fn into_service(self) -> FakeControlServer<Control> {
        FakeControlServer::new(self)
    }
}

fn parse<T: serde::de::DeserializeOwned>(what: &str, s: &str) -> std::result::Result<T, String> {
    serde_json::from_str(s).map_err(|e| format!("{what} {s:?}: {e}"))
}

#[tonic::async_trait]
impl FakeControl for Control {
    async fn inject(
        &self,
        r: Request<pb::InjectRequest>,
    ) -> std::result::Result<Response<pb::InjectReply>, Status> {
        let q = r.into_inner();
        let op = serde_json::Value::String(q.operation.clone());
        let got = serde_json::from_value::<Operation>(op)
            .map_err(|e| format!("operation {:?}: {e}", q.operation))
            .and_then(|op| Ok((op, parse::<FaultKind>("fault", &q.fault_json)?)));
        let refused = match got {
            Ok((op, fault)) => {
                self.cloud.inject(op, fault, q.times);
                String::new()
            }
            Err(why) => why,
        };
        Ok(Response::new(pb::InjectReply { refused }))
    }

    async fn requests(
        &self,
        _: Request<pb::RequestsRequest>,
    ) -> std::result::Result<Response<pb::RequestsReply>, Status> {
        Ok(Response::new(pb::RequestsReply {
            requests: self.cloud.requests(),
        }))
    }
}

/// The fake's cloud and provider from this process's environment.
async fn from_env(owner: &str) -> Result<(MemoryCloud, Arc<dyn Provider>)> {
    let cloud = match std::env::var(orca::FAKE_STATE_ENV) {
        Ok(path) if !path.is_empty() => MemoryCloud::open(path).await?,
        _ => MemoryCloud::new(),
    };
    let mut provider = cloud.provider(owner)?;
    if let Ok(size) = std::env::var(PAGE_SIZE_ENV) {
        let n = size
            .parse::<usize>()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| {
                Error::settings(
                    [PAGE_SIZE_ENV],
                    format!("a page size of 1 or more, got {size:?}"),
                )
            })?;
        provider = provider.with_page_size(n);
    }
    Ok((cloud, Arc::new(provider)))
}

/// The program `soul-cloud-fake`: serves the in-memory provider for the owner in [`OWNER_ENV`] on
/// stdin and stdout, with its console; exits when the host closes them.
pub fn run() -> ! {
    crate::log_to_stderr();
    let owner = std::env::var(OWNER_ENV).unwrap_or_default();
    let code = crate::runtime().block_on(async {
        let (driver, control) = match from_env(&owner).await {
            Ok((cloud, p)) => (Driver::new(Ok(p)), Control::new(cloud)),
            Err(e) => {
                tracing::error!("the fake provider cannot be made: {e}");
                (Driver::new(Err(e)), Control::new(MemoryCloud::new()))
            }
        };
        let driver = match std::env::var(PROTOCOL_VERSION_ENV).map(|v| v.parse::<u32>()) {
            Ok(Ok(v)) => driver.with_protocol_version(v),
            _ => driver,
        };
        let routes = Routes::new(driver.into_service()).add_service(control.into_service());
        crate::serve_routes_logged(routes).await
    });
    std::process::exit(code)
}
