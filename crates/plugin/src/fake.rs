//! `soul-cloud-fake`: the in-memory cloud as a plugin, for tests and trials of a host.
//!
//! The cloud lives in the plugin process, or in the state file [`orca::FAKE_STATE_ENV`] names, so
//! that a plugin started again (and a test beside it) sees the same machines. Beside CloudDriver it
//! serves `FakeControl` (`proto/orca/cloud/fake/v1/fake_control.proto`): what a test does to the
//! simulated cloud that the state file does not carry (injected faults, the request count), the
//! calls of the contract its driver served, and errors scripted for those calls.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use orca_machines::layer::{Answer, Call, Layer, Layered, Next, Op};
use orca_machines::memory::{FaultKind, MemoryCloud, Operation};
use orca_machines::{Error, Provider, Result};
use tonic::codegen::{http, BoxFuture, Context, Poll, Service};
use tonic::server::NamedService;
use tonic::{Request, Response, Status};

use crate::errors::error_from;
use crate::proto::fake as pb;
use crate::proto::fake::fake_control_server::{FakeControl, FakeControlServer};
use crate::{Driver, Routes, OWNER_ENV};

/// The environment variable that sets the page size of the fake's listings (default 50): what a
/// test of paging sets.
pub const PAGE_SIZE_ENV: &str = "ORCA_PLUGIN_FAKE_PAGE_SIZE";

/// The environment variable that makes the fake state another protocol version in its handshake:
/// what a test of a host's version check sets.
pub const PROTOCOL_VERSION_ENV: &str = "ORCA_PLUGIN_FAKE_PROTOCOL_VERSION";

/// The environment variable that makes the fake answer gRPC `UNIMPLEMENTED` to the CloudDriver
/// RPCs it names (comma-separated, as the proto names them: `DeleteNamed`), as a plugin built
/// before them does: what a test of a host facing an older plugin sets.
pub const LACKS_ENV: &str = "ORCA_PLUGIN_FAKE_LACKS";

/// The environment variable that makes the fake answer gRPC `INTERNAL` to the CloudDriver RPCs it
/// names (comma-separated, as the proto names them: `Machines`), as a plugin does whose stream of
/// one call fails while it serves the others: what a test of a host facing such a failure sets.
pub const BREAKS_ENV: &str = "ORCA_PLUGIN_FAKE_BREAKS";

/// The environment variable that makes the fake answer its contract's calls it names
/// (comma-separated, as the contract names them: `create`, `machines`, `machine`,
/// `machine_named`, `start`, `stop`, `set_labels`) with another machine than the one asked for: one of another name, pool or id.
/// What a test of a host that checks a plugin's answers sets.
pub const LIES_ENV: &str = "ORCA_PLUGIN_FAKE_LIES";

/// A layer that answers the calls it names with another machine than the one asked for.
#[derive(Debug, Clone)]
struct Lying {
    calls: Arc<[String]>,
}

impl Lying {
    /// `m` as a lie: renamed, moved to another pool and given another id.
    fn lie(mut m: orca_machines::Machine) -> orca_machines::Machine {
        m.name.push_str("-other");
        m.pool.push_str("-other");
        m.id.push_str("-other");
        m
    }
}

#[async_trait]
impl Layer for Lying {
    async fn around(&self, call: Call<'_>, next: Next<'_>) -> Result<Answer> {
        let lies = self.calls.iter().any(|c| c == call.op().as_str());
        let answer = next.run(call).await?;
        Ok(match answer {
            _ if !lies => answer,
            Answer::Created(orca_machines::Created::Machine(m)) => {
                Answer::Created(orca_machines::Created::Machine(Self::lie(m)))
            }
            Answer::Machines(ms) => Answer::Machines(ms.into_iter().map(Self::lie).collect()),
            Answer::Machine(m) => Answer::Machine(m.map(Self::lie)),
            Answer::Changed(m) => Answer::Changed(Self::lie(m)),
            Answer::Resized(mut r) => {
                r.machine = Self::lie(r.machine);
                Answer::Resized(r)
            }
            other => other,
        })
    }
}

/// How many of the driver's last calls the console keeps.
const CALLS_KEPT: usize = 1000;

/// The calls of the contract a provider served, by operation and subject: the last
/// 1,000, so that a long-lived fake does not grow without end.
#[derive(Debug, Clone, Default)]
pub struct Served {
    calls: Arc<Mutex<VecDeque<pb::Call>>>,
}

impl Served {
    /// An empty record.
    pub fn new() -> Self {
        Self::default()
    }

    /// The calls kept, oldest first.
    pub fn calls(&self) -> Vec<pb::Call> {
        let calls = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        calls.iter().cloned().collect()
    }
}

#[async_trait]
impl Layer for Served {
    async fn around(&self, call: Call<'_>, next: Next<'_>) -> Result<Answer> {
        {
            let mut calls = self.calls.lock().unwrap_or_else(|p| p.into_inner());
            if calls.len() == CALLS_KEPT {
                calls.pop_front();
            }
            calls.push_back(pb::Call {
                operation: call.op().as_str().to_string(),
                subject: call.subject(),
            });
        }
        next.run(call).await
    }
}

/// Errors scripted for the contract's calls: the next calls of an operation answer an error
/// without reaching the provider, so that a test can send the host an error of any kind with any
/// context (the code, the retries, the mark of an attempt that may have acted, what a clean-up
/// left), which the in-memory cloud's faults (a kind alone) cannot.
#[derive(Debug, Clone, Default)]
pub struct Scripted {
    errors: Arc<Mutex<VecDeque<(Op, Error, u32)>>>,
}

impl Scripted {
    /// Nothing scripted.
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes the next `times` calls of `op` answer `error`, after what was scripted before.
    pub fn fail(&self, op: Op, error: Error, times: u32) {
        if times > 0 {
            let mut errors = self.errors.lock().unwrap_or_else(|p| p.into_inner());
            errors.push_back((op, error, times));
        }
    }

    /// The error scripted for the next call of `op`, if any, counted as used.
    fn take(&self, op: Op) -> Option<Error> {
        let mut errors = self.errors.lock().unwrap_or_else(|p| p.into_inner());
        let at = errors.iter().position(|(o, ..)| *o == op)?;
        let (_, error, remaining) = &mut errors[at];
        let error = error.clone();
        *remaining -= 1;
        if *remaining == 0 {
            errors.remove(at);
        }
        Some(error)
    }
}

#[async_trait]
impl Layer for Scripted {
    async fn around(&self, call: Call<'_>, next: Next<'_>) -> Result<Answer> {
        match self.take(call.op()) {
            Some(error) => Err(error),
            None => next.run(call).await,
        }
    }
}

/// The test console over one simulated cloud.
#[derive(Debug, Clone)]
pub struct Control {
    cloud: MemoryCloud,
    served: Served,
    scripted: Scripted,
}

impl Control {
    /// The console of `cloud`.
    pub fn new(cloud: MemoryCloud) -> Self {
        Control {
            cloud,
            served: Served::new(),
            scripted: Scripted::new(),
        }
    }

    /// The same console, answering `Calls` from `served`.
    pub fn with_served(mut self, served: Served) -> Self {
        self.served = served;
        self
    }

    /// The same console, scripting `Fail`'s errors in `scripted`.
    pub fn with_scripted(mut self, scripted: Scripted) -> Self {
        self.scripted = scripted;
        self
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

    async fn fail(
        &self,
        r: Request<pb::FailRequest>,
    ) -> std::result::Result<Response<pb::InjectReply>, Status> {
        let q = r.into_inner();
        let op = Op::ALL.into_iter().find(|op| op.as_str() == q.call);
        let refused = match (op, q.error) {
            (None, _) => format!(
                "call {:?}: not a call of the contract ({})",
                q.call,
                Op::ALL.map(Op::as_str).join(", ")
            ),
            (Some(_), None) => format!("call {:?}: no error to answer", q.call),
            (Some(op), Some(error)) => {
                self.scripted.fail(op, error_from(error), q.times);
                String::new()
            }
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

    async fn calls(
        &self,
        _: Request<pb::CallsRequest>,
    ) -> std::result::Result<Response<pb::CallsReply>, Status> {
        Ok(Response::new(pb::CallsReply {
            calls: self.served.calls(),
        }))
    }
}

/// The fake's CloudDriver service: it answers `UNIMPLEMENTED` to the RPCs `lacks` names
/// ([`LACKS_ENV`]), as a plugin built before them does, and `INTERNAL` to those `breaks` names
/// ([`BREAKS_ENV`]), as a plugin whose stream of one call failed does; every other call goes to
/// `inner`.
#[derive(Debug, Clone)]
struct Lacking<S> {
    inner: S,
    lacks: Arc<[String]>,
    breaks: Arc<[String]>,
}

impl<S: NamedService> NamedService for Lacking<S> {
    const NAME: &'static str = S::NAME;
}

impl<S, B> Service<http::Request<B>> for Lacking<S>
where
    S: Service<http::Request<B>, Response = http::Response<tonic::body::Body>, Error = Infallible>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Infallible>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<std::result::Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let rpc = req.uri().path().rsplit('/').next().unwrap_or_default();
        if self.lacks.iter().any(|l| l == rpc) {
            let status = Status::unimplemented(format!("this plugin has no RPC {rpc}"));
            return Box::pin(std::future::ready(Ok(status.into_http())));
        }
        if self.breaks.iter().any(|b| b == rpc) {
            let status = Status::internal(format!("the stream of {rpc} broke"));
            return Box::pin(std::future::ready(Ok(status.into_http())));
        }
        Box::pin(self.inner.call(req))
    }
}

/// The fake's cloud and provider from this process's environment; `served` records the calls the
/// provider serves, `scripted` answers the errors scripted for them.
async fn from_env(
    owner: &str,
    served: Served,
    scripted: Scripted,
) -> Result<(MemoryCloud, Arc<dyn Provider>)> {
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
    let lies: Arc<[String]> = std::env::var(LIES_ENV)
        .unwrap_or_default()
        .split(',')
        .filter(|c| !c.is_empty())
        .map(String::from)
        .collect();
    let provider = Layered::new(provider, Lying { calls: lies });
    // Served outermost: a call answered by a scripted error is still a call the host made.
    let provider = Layered::new(Layered::new(provider, scripted), served);
    Ok((cloud, Arc::new(provider)))
}

/// The program `soul-cloud-fake`: serves the in-memory provider for the owner in [`OWNER_ENV`] on
/// stdin and stdout, with its console; exits when the host closes them.
pub fn run() -> ! {
    crate::log_to_stderr();
    let owner = std::env::var(OWNER_ENV).unwrap_or_default();
    let code = crate::runtime().block_on(async {
        let (served, scripted) = (Served::new(), Scripted::new());
        let (driver, control) = match from_env(&owner, served.clone(), scripted.clone()).await {
            Ok((cloud, p)) => (
                Driver::new(Ok(p)),
                Control::new(cloud)
                    .with_served(served)
                    .with_scripted(scripted),
            ),
            Err(e) => {
                tracing::error!("the fake provider cannot be made: {e}");
                (Driver::new(Err(e)), Control::new(MemoryCloud::new()))
            }
        };
        let driver = match std::env::var(PROTOCOL_VERSION_ENV).map(|v| v.parse::<u32>()) {
            Ok(Ok(v)) => driver.with_protocol_version(v),
            _ => driver,
        };
        let rpcs = |var: &str| -> Arc<[String]> {
            std::env::var(var)
                .unwrap_or_default()
                .split(',')
                .filter(|rpc| !rpc.is_empty())
                .map(String::from)
                .collect()
        };
        let driver = Lacking {
            inner: driver.into_service(),
            lacks: rpcs(LACKS_ENV),
            breaks: rpcs(BREAKS_ENV),
        };
        let routes = Routes::new(driver).add_service(control.into_service());
        crate::serve_routes_logged(routes).await
    });
    std::process::exit(code)
}
