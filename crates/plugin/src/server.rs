//! The plugin's side: a [`Provider`] served as the CloudDriver service.

use std::sync::Arc;

use orca_machines::{Error, Provider, Result};
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

fn machine_reply(r: Result<Option<orca_machines::Machine>>) -> Answer<pb::MachineReply> {
    use pb::machine_reply::Outcome;
    let outcome = match r {
        Ok(Some(m)) => Outcome::Machine(machine_to(m)),
        Ok(None) => Outcome::None(pb::Empty {}),
        Err(e) => Outcome::Error(error_to(&e)),
    };
    ok(pb::MachineReply {
        outcome: Some(outcome),
    })
}

fn rule_reply(
    r: Result<Option<orca_machines::ext::FirewallRule>>,
) -> Answer<pb::FirewallRuleReply> {
    use pb::firewall_rule_reply::Outcome;
    let outcome = match r {
        Ok(Some(rule)) => Outcome::Rule(rule_to(&rule)),
        Ok(None) => Outcome::None(pb::Empty {}),
        Err(e) => Outcome::Error(error_to(&e)),
    };
    ok(pb::FirewallRuleReply {
        outcome: Some(outcome),
    })
}

/// An extension the provider does not offer, refused as the contract refuses it.
fn not_offered(p: &dyn Provider, extension: &str) -> Error {
    Error::unsupported(p.kind(), extension)
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
        use pb::arch_reply::Outcome;
        let t = r.into_inner().machine_type;
        let outcome = match async { self.p()?.arch(&t).await }.await {
            Ok(a) => Outcome::Arch(a.as_str().to_string()),
            Err(e) => Outcome::Error(error_to(&e)),
        };
        ok(pb::ArchReply {
            outcome: Some(outcome),
        })
    }

    async fn create(&self, r: Request<pb::CreateRequest>) -> Answer<pb::CreateReply> {
        use pb::create_reply::Outcome;
        let made = async {
            let spec = r
                .into_inner()
                .spec
                .ok_or_else(|| Error::invalid("spec", "a create carries its spec"))?;
            self.p()?.create(&spec_from(spec)).await
        };
        let outcome = match made.await {
            Ok(c) => created_to(c),
            Err(e) => Outcome::Error(error_to(&e)),
        };
        ok(pb::CreateReply {
            outcome: Some(outcome),
        })
    }

    async fn machines(&self, r: Request<pb::MachinesRequest>) -> Answer<pb::MachinesReply> {
        use pb::machines_reply::Outcome;
        let pool = r.into_inner().pool;
        let outcome = match async { self.p()?.machines(&pool).await }.await {
            Ok(ms) => Outcome::Machines(pb::MachineList {
                machines: ms.into_iter().map(machine_to).collect(),
            }),
            Err(e) => Outcome::Error(error_to(&e)),
        };
        ok(pb::MachinesReply {
            outcome: Some(outcome),
        })
    }

    async fn machine(&self, r: Request<pb::MachineRequest>) -> Answer<pb::MachineReply> {
        let id = r.into_inner().id;
        machine_reply(async { self.p()?.machine(&id).await }.await)
    }

    async fn machine_named(&self, r: Request<pb::MachineNamedRequest>) -> Answer<pb::MachineReply> {
        let q = r.into_inner();
        machine_reply(async { self.p()?.machine_named(&q.pool, &q.name).await }.await)
    }

    async fn delete(&self, r: Request<pb::DeleteRequest>) -> Answer<pb::DeleteReply> {
        use pb::delete_reply::Outcome;
        let id = r.into_inner().id;
        let outcome = match async { self.p()?.delete(&id).await }.await {
            Ok(gone) => Outcome::Gone(gone),
            Err(e) => Outcome::Error(error_to(&e)),
        };
        ok(pb::DeleteReply {
            outcome: Some(outcome),
        })
    }

    async fn start(&self, r: Request<pb::IdRequest>) -> Answer<pb::MachineReply> {
        let id = r.into_inner().id;
        machine_reply(async { self.p()?.start(&id).await.map(Some) }.await)
    }

    async fn stop(&self, r: Request<pb::IdRequest>) -> Answer<pb::MachineReply> {
        let id = r.into_inner().id;
        machine_reply(async { self.p()?.stop(&id).await.map(Some) }.await)
    }

    async fn resize(&self, r: Request<pb::ResizeRequest>) -> Answer<pb::ResizeReply> {
        use pb::resize_reply::Outcome;
        let q = r.into_inner();
        let outcome = match async { self.p()?.resize(&q.id, &q.machine_type).await }.await {
            Ok(r) => Outcome::Resized(resized_to(r)),
            Err(e) => Outcome::Error(error_to(&e)),
        };
        ok(pb::ResizeReply {
            outcome: Some(outcome),
        })
    }

    async fn hourly_price(
        &self,
        r: Request<pb::HourlyPriceRequest>,
    ) -> Answer<pb::HourlyPriceReply> {
        use pb::hourly_price_reply::Outcome;
        let q = r.into_inner();
        let got = async { self.p()?.hourly_price(&q.machine_type, &q.location).await };
        let outcome = match got.await {
            Ok(p) => Outcome::Price(price_to(&p)),
            Err(e) => Outcome::Error(error_to(&e)),
        };
        ok(pb::HourlyPriceReply {
            outcome: Some(outcome),
        })
    }

    async fn set_labels(&self, r: Request<pb::SetLabelsRequest>) -> Answer<pb::MachineReply> {
        let q = r.into_inner();
        let set = q.set.into_iter().collect();
        machine_reply(
            async {
                let p = self.p()?;
                let ext = p
                    .machine_labels()
                    .ok_or_else(|| not_offered(&**p, "machine_labels"))?;
                ext.set_labels(&q.id, &set, &q.remove).await.map(Some)
            }
            .await,
        )
    }

    async fn network(&self, _: Request<pb::Empty>) -> Answer<pb::NetworkReply> {
        use pb::network_reply::Outcome;
        let got = async {
            let p = self.p()?;
            let ext = p
                .firewall_rules()
                .ok_or_else(|| not_offered(&**p, "firewall_rules"))?;
            ext.network().await
        };
        let outcome = match got.await {
            Ok(n) => Outcome::Network(network_to(&n)),
            Err(e) => Outcome::Error(error_to(&e)),
        };
        ok(pb::NetworkReply {
            outcome: Some(outcome),
        })
    }

    async fn firewall_rule(
        &self,
        r: Request<pb::FirewallRuleRequest>,
    ) -> Answer<pb::FirewallRuleReply> {
        let name = r.into_inner().name;
        rule_reply(
            async {
                let p = self.p()?;
                let ext = p
                    .firewall_rules()
                    .ok_or_else(|| not_offered(&**p, "firewall_rules"))?;
                ext.rule(&name).await
            }
            .await,
        )
    }

    async fn firewall_rules(&self, _: Request<pb::Empty>) -> Answer<pb::FirewallRulesReply> {
        use pb::firewall_rules_reply::Outcome;
        let got = async {
            let p = self.p()?;
            let ext = p
                .firewall_rules()
                .ok_or_else(|| not_offered(&**p, "firewall_rules"))?;
            ext.rules().await
        };
        let outcome = match got.await {
            Ok(rules) => Outcome::Rules(pb::FirewallRuleList {
                rules: rules.iter().map(rule_to).collect(),
            }),
            Err(e) => Outcome::Error(error_to(&e)),
        };
        ok(pb::FirewallRulesReply {
            outcome: Some(outcome),
        })
    }

    async fn set_source_ranges(
        &self,
        r: Request<pb::SetSourceRangesRequest>,
    ) -> Answer<pb::FirewallRuleReply> {
        let q = r.into_inner();
        rule_reply(
            async {
                let p = self.p()?;
                let ext = p
                    .firewall_rules()
                    .ok_or_else(|| not_offered(&**p, "firewall_rules"))?;
                ext.set_source_ranges(&q.name, &q.ranges).await.map(Some)
            }
            .await,
        )
    }

    async fn admit_ssh(&self, r: Request<pb::AdmitSshRequest>) -> Answer<pb::AdmitSshReply> {
        use pb::admit_ssh_reply::Outcome;
        let q = r.into_inner();
        let got = async {
            let p = self.p()?;
            let ext = p
                .ssh_admission()
                .ok_or_else(|| not_offered(&**p, "ssh_admission"))?;
            ext.admit_ssh(&q.group, &q.location, &q.sources, &q.readmit)
                .await
        };
        let outcome = match got.await {
            Ok(a) => Outcome::Admission(admission_to(&a)),
            Err(e) => Outcome::Error(error_to(&e)),
        };
        ok(pb::AdmitSshReply {
            outcome: Some(outcome),
        })
    }

    async fn balance(&self, _: Request<pb::Empty>) -> Answer<pb::BalanceReply> {
        use pb::balance_reply::Outcome;
        let got = async {
            let p = self.p()?;
            let ext = p
                .credit_balance()
                .ok_or_else(|| not_offered(&**p, "credit_balance"))?;
            ext.balance().await
        };
        let outcome = match got.await {
            Ok(b) => Outcome::Balance(balance_to(&b)),
            Err(e) => Outcome::Error(error_to(&e)),
        };
        ok(pb::BalanceReply {
            outcome: Some(outcome),
        })
    }
}
