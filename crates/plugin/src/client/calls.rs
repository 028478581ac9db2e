//! The contract's calls and extensions, each one RPC to the plugin.

use async_trait::async_trait;
use orca_machines::ext::{
    Admission, Balance, CreditBalance, FirewallRule, FirewallRules, MachineLabels, Network,
    SshAdmission,
};
use orca_machines::labels::Labels;
use orca_machines::spec::quoted;
use orca_machines::{
    docker_arch, Arch, Capabilities, Created, Error, Machine, MachineSpec, Price, Provider,
    Resized, Result,
};

use super::PluginProvider;
use crate::errors::error_from;
use crate::proto::v1 as pb;
use crate::wire::*;

/// A reply that carried no outcome.
fn empty(call: &str) -> orca_machines::Error {
    bad_reply(format!("a {call} reply without its outcome"))
}

/// What the arms make of reply `$reply`'s outcome (of the `Outcome` in scope); its `Error` outcome
/// is the driver's error, and no outcome a reply outside the protocol, naming `$call`.
macro_rules! outcome {
    ($reply:expr, $call:expr, $($pat:pat => $answer:expr),+ $(,)?) => {
        match $reply.outcome {
            $(Some($pat) => $answer,)+
            Some(Outcome::Error(e)) => Err(error_from(e)),
            None => Err(empty($call)),
        }
    };
}

fn optional_machine(r: pb::MachineReply, call: &str) -> Result<Option<Machine>> {
    use pb::machine_reply::Outcome;
    outcome!(r, call,
        Outcome::Machine(m) => machine_from(m).map(Some),
        Outcome::None(_) => Ok(None),
    )
}

fn machine(r: pb::MachineReply, call: &str) -> Result<Machine> {
    optional_machine(r, call)?.ok_or_else(|| bad_reply(format!("{call} answered no machine")))
}

/// What a call asked about: a machine by name in a pool, the machines of a pool, or one by id.
#[derive(Clone, Copy)]
enum Asked<'a> {
    Named { pool: &'a str, name: &'a str },
    Pool(&'a str),
    Id(&'a str),
}

/// `m`, when it is what `call` asked about; a plugin's answer about another machine is refused,
/// naming it: a host that took it would count, adopt or delete a machine of another name or pool.
fn asked(call: &str, asked: Asked<'_>, m: Machine) -> Result<Machine> {
    let (ok, what) = match asked {
        Asked::Named { pool, name } => (
            m.pool == pool && m.name == name,
            format!("{name} in {pool}"),
        ),
        Asked::Pool(pool) => (m.pool == pool, format!("pool {pool}")),
        Asked::Id(id) => (m.id == id, format!("machine {id}")),
    };
    if ok {
        return Ok(m);
    }
    let (name, pool, id) = (quoted(&m.name), quoted(&m.pool), quoted(&m.id));
    Err(bad_reply(format!(
        "{call} of {what} answered machine {name} of pool {pool} (id {id})"
    )))
}

fn optional_rule(r: pb::FirewallRuleReply, call: &str) -> Result<Option<FirewallRule>> {
    use pb::firewall_rule_reply::Outcome;
    outcome!(r, call,
        Outcome::Rule(rule) => Ok(Some(rule_from(rule))),
        Outcome::None(_) => Ok(None),
    )
}

#[async_trait]
impl Provider for PluginProvider {
    fn kind(&self) -> &str {
        self.told_kind()
    }

    fn owner(&self) -> &str {
        self.told_owner()
    }

    fn capabilities(&self) -> Capabilities {
        self.told_capabilities()
    }

    async fn arch(&self, machine_type: &str) -> Result<Arch> {
        use pb::arch_reply::Outcome;
        let q = pb::ArchRequest {
            machine_type: machine_type.to_string(),
        };
        let r = self.call("arch", |mut c| async move { c.arch(q).await });
        outcome!(r.await?, "arch", Outcome::Arch(a) => Ok(docker_arch(&a)))
    }

    async fn create(&self, spec: &MachineSpec) -> Result<Created> {
        use pb::create_reply::Outcome;
        // Checked here, before anything crosses, as a driver checks it before any call; and the
        // run limit, which the protocol carries in whole seconds, is refused rather than cut.
        spec.validate()?;
        if spec.max_run_duration.is_some_and(|d| d.subsec_nanos() != 0) {
            return Err(Error::invalid(
                "max_run_duration",
                "whole seconds (the plugin protocol carries seconds)",
            ));
        }
        let q = pb::CreateRequest {
            spec: Some(spec_to(spec)),
        };
        let r = self.call("create", |mut c| async move { c.create(q).await });
        let of = Asked::Named {
            pool: &spec.pool,
            name: &spec.name,
        };
        outcome!(r.await?, "create",
            Outcome::Made(m) => Ok(Created::Machine(asked("create", of, machine_from(m)?)?)),
            Outcome::Adopted(m) => Ok(Created::Adopted(asked("create", of, machine_from(m)?)?)),
            Outcome::NoStock(n) => Ok(no_stock_from(n)),
        )
    }

    async fn machines(&self, pool: &str) -> Result<Vec<Machine>> {
        use pb::machines_reply::Outcome;
        let q = pb::MachinesRequest {
            pool: pool.to_string(),
        };
        let r = self.call("machines", |mut c| async move { c.machines(q).await });
        let machine = |m| asked("machines", Asked::Pool(pool), machine_from(m)?);
        outcome!(r.await?, "machines",
            Outcome::Machines(l) => l.machines.into_iter().map(machine).collect(),
        )
    }

    async fn machine(&self, id: &str) -> Result<Option<Machine>> {
        let q = pb::MachineRequest { id: id.to_string() };
        let r = self.call("machine", |mut c| async move { c.machine(q).await });
        let m = optional_machine(r.await?, "machine")?;
        m.map(|m| asked("machine", Asked::Id(id), m)).transpose()
    }

    async fn machine_named(&self, pool: &str, name: &str) -> Result<Option<Machine>> {
        let q = pb::MachineNamedRequest {
            pool: pool.to_string(),
            name: name.to_string(),
        };
        let r = self.call(
            "machine_named",
            |mut c| async move { c.machine_named(q).await },
        );
        let m = optional_machine(r.await?, "machine_named")?;
        let of = Asked::Named { pool, name };
        m.map(|m| asked("machine_named", of, m)).transpose()
    }

    async fn delete(&self, id: &str) -> Result<bool> {
        use pb::delete_reply::Outcome;
        let q = pb::DeleteRequest { id: id.to_string() };
        let r = self.call("delete", |mut c| async move { c.delete(q).await });
        outcome!(r.await?, "delete", Outcome::Gone(g) => Ok(g))
    }

    /// The plugin's driver's own `delete_named`, which removes the pieces its creates make beside
    /// a machine. A plugin built before the RPC answers [`orca_machines::Error::Unsupported`]:
    /// the trait's default (a read by name, then a delete by id) would leave those pieces while
    /// answering as if it had removed all. Bad input is refused here, before the plugin is asked,
    /// so that such a plugin's answer cannot hide what is wrong with it.
    async fn delete_named(&self, pool: &str, name: &str) -> Result<bool> {
        use pb::delete_named_reply::Outcome;
        orca_machines::validate_pool(pool)?;
        orca_machines::validate_name(name)?;
        let q = pb::DeleteNamedRequest {
            pool: pool.to_string(),
            name: name.to_string(),
        };
        let r = self.call(
            "delete_named",
            |mut c| async move { c.delete_named(q).await },
        );
        outcome!(r.await?, "delete_named", Outcome::Removed(removed) => Ok(removed))
    }

    async fn start(&self, id: &str) -> Result<Machine> {
        let q = pb::IdRequest { id: id.to_string() };
        let r = self.call("start", |mut c| async move { c.start(q).await });
        asked("start", Asked::Id(id), machine(r.await?, "start")?)
    }

    async fn stop(&self, id: &str) -> Result<Machine> {
        let q = pb::IdRequest { id: id.to_string() };
        let r = self.call("stop", |mut c| async move { c.stop(q).await });
        asked("stop", Asked::Id(id), machine(r.await?, "stop")?)
    }

    async fn resize(&self, id: &str, machine_type: &str) -> Result<Resized> {
        use pb::resize_reply::Outcome;
        let q = pb::ResizeRequest {
            id: id.to_string(),
            machine_type: machine_type.to_string(),
        };
        let r = self.call("resize", |mut c| async move { c.resize(q).await });
        outcome!(r.await?, "resize", Outcome::Resized(r) => {
            let r = resized_from(r)?;
            let m = asked("resize", Asked::Id(id), r.machine)?;
            Ok(Resized::new(m, r.caused_downtime))
        })
    }

    async fn hourly_price(&self, machine_type: &str, location: &str) -> Result<Price> {
        use pb::hourly_price_reply::Outcome;
        let q = pb::HourlyPriceRequest {
            machine_type: machine_type.to_string(),
            location: location.to_string(),
        };
        let r = self.call(
            "hourly_price",
            |mut c| async move { c.hourly_price(q).await },
        );
        outcome!(r.await?, "hourly_price", Outcome::Price(p) => Ok(price_from(p)))
    }

    fn machine_labels(&self) -> Option<&dyn MachineLabels> {
        self.offers("machine_labels").then_some(self as _)
    }

    fn firewall_rules(&self) -> Option<&dyn FirewallRules> {
        self.offers("firewall_rules").then_some(self as _)
    }

    fn ssh_admission(&self) -> Option<&dyn SshAdmission> {
        self.offers("ssh_admission").then_some(self as _)
    }

    fn credit_balance(&self) -> Option<&dyn CreditBalance> {
        self.offers("credit_balance").then_some(self as _)
    }
}

#[async_trait]
impl MachineLabels for PluginProvider {
    async fn set_labels(&self, id: &str, set: &Labels, remove: &[String]) -> Result<Machine> {
        let q = pb::SetLabelsRequest {
            id: id.to_string(),
            set: set.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            remove: remove.to_vec(),
        };
        let r = self.call("set_labels", |mut c| async move { c.set_labels(q).await });
        asked(
            "set_labels",
            Asked::Id(id),
            machine(r.await?, "set_labels")?,
        )
    }
}

#[async_trait]
impl FirewallRules for PluginProvider {
    fn network_name(&self) -> String {
        PluginProvider::network_name(self).to_string()
    }

    async fn network(&self) -> Result<Network> {
        use pb::network_reply::Outcome;
        let r = self.call(
            "network",
            |mut c| async move { c.network(pb::Empty {}).await },
        );
        outcome!(r.await?, "network", Outcome::Network(n) => Ok(network_from(n)))
    }

    async fn rule(&self, name: &str) -> Result<Option<FirewallRule>> {
        let q = pb::FirewallRuleRequest {
            name: name.to_string(),
        };
        let r = self.call(
            "firewall_rule",
            |mut c| async move { c.firewall_rule(q).await },
        );
        optional_rule(r.await?, "firewall_rule")
    }

    async fn rules(&self) -> Result<Vec<FirewallRule>> {
        use pb::firewall_rules_reply::Outcome;
        let r = self.call("firewall_rules", |mut c| async move {
            c.firewall_rules(pb::Empty {}).await
        });
        outcome!(r.await?, "firewall_rules",
            Outcome::Rules(l) => Ok(l.rules.into_iter().map(rule_from).collect()),
        )
    }

    async fn set_source_ranges(&self, name: &str, ranges: &[String]) -> Result<FirewallRule> {
        let q = pb::SetSourceRangesRequest {
            name: name.to_string(),
            ranges: ranges.to_vec(),
        };
        let r = self.call("set_source_ranges", |mut c| async move {
            c.set_source_ranges(q).await
        });
        optional_rule(r.await?, "set_source_ranges")?
            .ok_or_else(|| bad_reply("set_source_ranges answered no rule"))
    }
}

#[async_trait]
impl SshAdmission for PluginProvider {
    async fn admit_ssh(
        &self,
        group: &str,
        location: &str,
        sources: &[String],
        readmit: &[String],
    ) -> Result<Admission> {
        use pb::admit_ssh_reply::Outcome;
        let q = pb::AdmitSshRequest {
            group: group.to_string(),
            location: location.to_string(),
            sources: sources.to_vec(),
            readmit: readmit.to_vec(),
        };
        let r = self.call("admit_ssh", |mut c| async move { c.admit_ssh(q).await });
        outcome!(r.await?, "admit_ssh", Outcome::Admission(a) => Ok(admission_from(a)))
    }
}

#[async_trait]
impl CreditBalance for PluginProvider {
    async fn balance(&self) -> Result<Balance> {
        use pb::balance_reply::Outcome;
        let r = self.call(
            "balance",
            |mut c| async move { c.balance(pb::Empty {}).await },
        );
        outcome!(r.await?, "balance", Outcome::Balance(b) => balance_from(b))
    }
}
