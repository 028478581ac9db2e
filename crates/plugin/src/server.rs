//! The plugin's side: a [`Provider`] served as the CloudDriver service.

use std::sync::Arc;

use orca_machines::ext::{Admission, Balance, FirewallRule, Network};
use orca_machines::{Arch, Created, Error, Machine, Price, Provider, Resized, Result};
use tonic::{Request, Response, Status};

use crate::errors::error_to;
use crate::proto::v1 as pb;
use crate::proto::v1::cloud_driver_server::{CloudDriver, CloudDriverServer};
use crate::wire::*;
use crate::PROTOCOL_VERSION;

/// The CloudDriver service over one provider, or over the error that kept the provider from being
/// made (every call then answers it, the handshake included, so that the host names the settings
/// at fault).
#[derive(Debug, Clone)]
pub struct Driver {
    provider: std::result::Result<Arc<dyn Provider>, Error>,
    version: u32,
}

impl Driver {
    /// The service over `provider` (or the error that kept it from being made), speaking
    /// [`PROTOCOL_VERSION`].
    pub fn new(provider: Result<Arc<dyn Provider>>) -> Self {
        Driver {
            provider,
            version: PROTOCOL_VERSION,
        }
    }

    /// The same service stating protocol version `version` in its handshake: what a test of a
    /// host's version check runs.
    pub fn with_protocol_version(mut self, version: u32) -> Self {
        self.version = version;
        self
    }

    /// The service as tonic serves it.
    pub fn into_service(self) -> CloudDriverServer<Driver> {
        CloudDriverServer::new(self)
    }

    fn p(&self) -> Result<&Arc<dyn Provider>> {
        self.provider.as_ref().map_err(Clone::clone)
    }

    /// The provider's extension `name` (that `get` reads), or the refusal of a provider without it,
    /// as the contract refuses it.
    fn ext<'a, E: ?Sized>(
        &'a self,
        name: &str,
        get: impl FnOnce(&'a dyn Provider) -> Option<&'a E>,
    ) -> Result<&'a E> {
        let p = &**self.p()?;
        get(p).ok_or_else(|| Error::unsupported(p.kind(), name))
    }

    /// The provider's firewall rules, or the refusal of a provider without them.
    fn firewall(&self) -> Result<&dyn orca_machines::ext::FirewallRules> {
        self.ext("firewall_rules", |p| p.firewall_rules())
    }
}

type Answer<T> = std::result::Result<Response<T>, Status>;

fn ok<T>(t: T) -> Answer<T> {
    Ok(Response::new(t))
}

fn hello(p: &dyn Provider) -> pb::Hello {
    pb::Hello {
        kind: p.kind().to_string(),
        owner: p.owner().to_string(),
        capabilities: Some(capabilities_to(&p.capabilities())),
        extensions: p.extensions().into_iter().map(String::from).collect(),
        network_name: p
            .firewall_rules()
            .map(|f| f.network_name())
            .unwrap_or_default(),
    }
}

/// Each reply from its call's result: the value as the reply's outcome, or the error as its
/// `Error` outcome (every reply carries one, so that the driver's errors cross as they are).
macro_rules! replies {
    ($($reply:ident in $module:ident from $ok:ty: |$v:ident| $outcome:expr;)*) => {$(
        impl From<Result<$ok>> for pb::$reply {
            fn from(r: Result<$ok>) -> Self {
                #[allow(unused_imports)]
                use pb::$module::Outcome;
                let outcome = match r {
                    Ok($v) => $outcome,
                    Err(e) => Outcome::Error(error_to(&e)),
                };
                pb::$reply {
                    outcome: Some(outcome),
                }
            }
        }
    )*};
}

replies! {
    ArchReply in arch_reply from Arch: |a| Outcome::Arch(a.as_str().to_string());
    CreateReply in create_reply from Created: |c| created_to(c);
    MachinesReply in machines_reply from Vec<Machine>: |ms| Outcome::Machines(pb::MachineList {
        machines: ms.into_iter().map(machine_to).collect(),
    });
    MachineReply in machine_reply from Option<Machine>: |m| match m {
        Some(m) => Outcome::Machine(machine_to(m)),
        None => Outcome::None(pb::Empty {}),
    };
    DeleteReply in delete_reply from bool: |gone| Outcome::Gone(gone);
    DeleteNamedReply in delete_named_reply from bool: |removed| Outcome::Removed(removed);
    ResizeReply in resize_reply from Resized: |r| Outcome::Resized(resized_to(r));
    HourlyPriceReply in hourly_price_reply from Price: |p| Outcome::Price(price_to(&p));
    NetworkReply in network_reply from Network: |n| Outcome::Network(network_to(&n));
    FirewallRuleReply in firewall_rule_reply from Option<FirewallRule>: |r| match r {
        Some(rule) => Outcome::Rule(rule_to(&rule)),
        None => Outcome::None(pb::Empty {}),
    };
    FirewallRulesReply in firewall_rules_reply from Vec<FirewallRule>: |rules| {
        Outcome::Rules(pb::FirewallRuleList {
            rules: rules.iter().map(rule_to).collect(),
        })
    };
    AdmitSshReply in admit_ssh_reply from Admission: |a| Outcome::Admission(admission_to(&a));
    BalanceReply in balance_reply from Balance: |b| Outcome::Balance(balance_to(&b));
}

/// The reply of a call's result.
fn answer<T, R: From<Result<T>>>(r: Result<T>) -> Answer<R> {
    ok(R::from(r))
}

#[tonic::async_trait]
impl CloudDriver for Driver {
    async fn handshake(&self, _: Request<pb::HandshakeRequest>) -> Answer<pb::HandshakeReply> {
        use pb::handshake_reply::Outcome;
        let outcome = match self.p() {
            Ok(p) => Outcome::Hello(hello(&**p)),
            Err(e) => Outcome::Error(error_to(&e)),
        };
        ok(pb::HandshakeReply {
            outcome: Some(outcome),
            protocol_version: self.version,
        })
    }

    async fn arch(&self, r: Request<pb::ArchRequest>) -> Answer<pb::ArchReply> {
        let t = r.into_inner().machine_type;
        answer(async { self.p()?.arch(&t).await }.await)
    }

    async fn create(&self, r: Request<pb::CreateRequest>) -> Answer<pb::CreateReply> {
        let spec = r.into_inner().spec;
        answer(
            async {
                let spec =
                    spec.ok_or_else(|| Error::invalid("spec", "a create carries its spec"))?;
                self.p()?.create(&spec_from(spec)).await
            }
            .await,
        )
    }

    async fn machines(&self, r: Request<pb::MachinesRequest>) -> Answer<pb::MachinesReply> {
        let pool = r.into_inner().pool;
        answer(async { self.p()?.machines(&pool).await }.await)
    }

    async fn machine(&self, r: Request<pb::MachineRequest>) -> Answer<pb::MachineReply> {
        let id = r.into_inner().id;
        answer(async { self.p()?.machine(&id).await }.await)
    }

    async fn machine_named(&self, r: Request<pb::MachineNamedRequest>) -> Answer<pb::MachineReply> {
        let q = r.into_inner();
        answer(async { self.p()?.machine_named(&q.pool, &q.name).await }.await)
    }

    async fn delete(&self, r: Request<pb::DeleteRequest>) -> Answer<pb::DeleteReply> {
        let id = r.into_inner().id;
        answer(async { self.p()?.delete(&id).await }.await)
    }

    async fn delete_named(
        &self,
        r: Request<pb::DeleteNamedRequest>,
    ) -> Answer<pb::DeleteNamedReply> {
        let q = r.into_inner();
        answer(async { self.p()?.delete_named(&q.pool, &q.name).await }.await)
    }

    async fn start(&self, r: Request<pb::IdRequest>) -> Answer<pb::MachineReply> {
        let id = r.into_inner().id;
        answer(async { self.p()?.start(&id).await.map(Some) }.await)
    }

    async fn stop(&self, r: Request<pb::IdRequest>) -> Answer<pb::MachineReply> {
        let id = r.into_inner().id;
        answer(async { self.p()?.stop(&id).await.map(Some) }.await)
    }

    async fn resize(&self, r: Request<pb::ResizeRequest>) -> Answer<pb::ResizeReply> {
        let q = r.into_inner();
        answer(async { self.p()?.resize(&q.id, &q.machine_type).await }.await)
    }

    async fn hourly_price(
        &self,
        r: Request<pb::HourlyPriceRequest>,
    ) -> Answer<pb::HourlyPriceReply> {
        let q = r.into_inner();
        answer(async { self.p()?.hourly_price(&q.machine_type, &q.location).await }.await)
    }

    async fn set_labels(&self, r: Request<pb::SetLabelsRequest>) -> Answer<pb::MachineReply> {
        let q = r.into_inner();
        answer(
            async {
                let ext = self.ext("machine_labels", |p| p.machine_labels())?;
                ext.set_labels(&q.id, &q.set, &q.remove).await.map(Some)
            }
            .await,
        )
    }

    async fn network(&self, _: Request<pb::Empty>) -> Answer<pb::NetworkReply> {
        answer(async { self.firewall()?.network().await }.await)
    }

    async fn firewall_rule(
        &self,
        r: Request<pb::FirewallRuleRequest>,
    ) -> Answer<pb::FirewallRuleReply> {
        let name = r.into_inner().name;
        answer(async { self.firewall()?.rule(&name).await }.await)
    }

    async fn firewall_rules(&self, _: Request<pb::Empty>) -> Answer<pb::FirewallRulesReply> {
        answer(async { self.firewall()?.rules().await }.await)
    }

    async fn set_source_ranges(
        &self,
        r: Request<pb::SetSourceRangesRequest>,
    ) -> Answer<pb::FirewallRuleReply> {
        let q = r.into_inner();
        answer(
            async {
                let f = self.firewall()?;
                f.set_source_ranges(&q.name, &q.ranges).await.map(Some)
            }
            .await,
        )
    }

    async fn admit_ssh(&self, r: Request<pb::AdmitSshRequest>) -> Answer<pb::AdmitSshReply> {
        let q = r.into_inner();
        answer(
            async {
                let ext = self.ext("ssh_admission", |p| p.ssh_admission())?;
                ext.admit_ssh(&q.group, &q.location, &q.sources, &q.readmit)
                    .await
            }
            .await,
        )
    }

    async fn balance(&self, _: Request<pb::Empty>) -> Answer<pb::BalanceReply> {
        answer(
            async {
                self.ext("credit_balance", |p| p.credit_balance())?
                    .balance()
                    .await
            }
            .await,
        )
    }
}
