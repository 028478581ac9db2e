//! Layers: a provider that forwards every call of the trait to an inner provider through a [`Layer`]
//! that sees each call and its answer, and may change either: the one base for metrics, fault
//! injection, recording, holding calls in tests and reshaping answers, instead of wrappers that
//! each forward part of the trait (and silently lose what they forget: capabilities, an extension,
//! a method added later).
//!
//! [`Layered`] implements [`Provider`] and the four extensions. Every async method, of the trait and
//! of the extensions, becomes a typed [`Call`] handed to [`Layer::around`] with the [`Next`] step
//! (the inner provider); the layer returns the typed [`Answer`], so it can act before the call, after
//! it, instead of it, or hold it. The synchronous facts have hooks of their own:
//! [`Layer::kind`], [`Layer::capabilities`] and [`Layer::offers`] (which extensions the layered
//! provider answers), each the inner's by default. A layer that implements nothing ([`Forward`]) is
//! a transparent forwarder.
//!
//! Layers stack: `Layered::new(Layered::new(p, faults), recorder)` records what the faults let
//! through. Two stock layers: [`Recorder`] (calls by operation, their subjects and outcomes, the
//! specs created, calls in flight) and [`Faults`] (errors, latency, lost answers, hangs and holds by
//! operation).
//!
//! The rule for a new method of [`Provider`] or of an extension: it gets an [`Op`] and a [`Call`]
//! variant, [`Next::run`] dispatches it, [`Layered`] forwards it, and `forward_provider!` (the
//! `Box`, `Arc` and `&` impls) forwards it. A test reads the traits' source and fails while any
//! async method has no [`Op`] or any method is not forwarded here.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use orca_machines::layer::{Answer, Call, Layer, Layered, Next, Op, Recorder};
//! use orca_machines::{memory::MemoryCloud, MachineSpec, Provider, Result};
//!
//! /// Shows every listing empty: a listing that lags behind the cloud.
//! #[derive(Debug)]
//! struct Lagging;
//! #[async_trait::async_trait]
//! impl Layer for Lagging {
//!     async fn around(&self, call: Call<'_>, next: Next<'_>) -> Result<Answer> {
//!         match call {
//!             Call::Machines { .. } => Ok(Answer::Machines(Vec::new())),
//!             other => next.run(other).await,
//!         }
//!     }
//! }
//!
//! let cloud = MemoryCloud::new();
//! let recorder = Recorder::new();
//! let p = Layered::new(Layered::new(cloud.provider("stack-1")?, Lagging), recorder.clone());
//! p.create(&MachineSpec::new("w-1", "amd64-small", "zone-a", "lab")).await?;
//! assert!(p.machines("lab").await?.is_empty(), "the listing lags");
//! assert!(p.machine_named("lab", "w-1").await?.is_some(), "a read by name does not");
//! assert_eq!(recorder.count(Op::Create), 1);
//! assert_eq!(p.capabilities(), cloud.provider("stack-1")?.capabilities(), "nothing lost");
//! # Ok::<(), orca_machines::Error>(()) }).unwrap();
//! ```

use async_trait::async_trait;

use crate::arch::Arch;
use crate::error::{Error, Result};
use crate::ext::{
    Admission, Balance, CreditBalance, FirewallRule, FirewallRules, MachineLabels, Network,
    SshAdmission,
};
use crate::labels::Labels;
use crate::machine::{Created, Machine, Price, Resized};
use crate::provider::{Capabilities, Provider};
use crate::spec::MachineSpec;

mod faults;
mod recorder;

pub use faults::{Fault, Faults, Point};
pub use recorder::{Recorded, Recorder};

crate::words! {
    /// An operation of the trait or of an extension: every async method, by its name.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
    #[non_exhaustive]
    pub enum Op {
        /// [`Provider::arch`]
        Arch = "arch",
        /// [`Provider::create`]
        Create = "create",
        /// [`Provider::machines`]
        Machines = "machines",
        /// [`Provider::machine_named`]
        MachineNamed = "machine_named",
        /// [`Provider::machine`]
        Machine = "machine",
        /// [`Provider::delete`]
        Delete = "delete",
        /// [`Provider::delete_named`]
        DeleteNamed = "delete_named",
        /// [`Provider::start`]
        Start = "start",
        /// [`Provider::stop`]
        Stop = "stop",
        /// [`Provider::resize`]
        Resize = "resize",
        /// [`Provider::hourly_price`]
        HourlyPrice = "hourly_price",
        /// [`MachineLabels::set_labels`]
        SetLabels = "set_labels",
        /// [`FirewallRules::network`]
        Network = "network",
        /// [`FirewallRules::rule`]
        Rule = "rule",
        /// [`FirewallRules::rules`]
        Rules = "rules",
        /// [`FirewallRules::set_source_ranges`]
        SetSourceRanges = "set_source_ranges",
        /// [`SshAdmission::admit_ssh`]
        AdmitSsh = "admit_ssh",
        /// [`CreditBalance::balance`]
        Balance = "balance",
    }
}

impl Op {
    /// The extension this operation belongs to, if any.
    pub fn extension(self) -> Option<Extension> {
        match self {
            Op::SetLabels => Some(Extension::MachineLabels),
            Op::Network | Op::Rule | Op::Rules | Op::SetSourceRanges => {
                Some(Extension::FirewallRules)
            }
            Op::AdmitSsh => Some(Extension::SshAdmission),
            Op::Balance => Some(Extension::CreditBalance),
            _ => None,
        }
    }
}

crate::words! {
    /// An extension of [`Provider`], by its accessor's name. `Extension::ALL` lists them in the order
    /// of `conformance::EXTENSIONS`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    #[non_exhaustive]
    pub enum Extension {
        /// [`Provider::machine_labels`]
        MachineLabels = "machine_labels",
        /// [`Provider::firewall_rules`]
        FirewallRules = "firewall_rules",
        /// [`Provider::ssh_admission`]
        SshAdmission = "ssh_admission",
        /// [`Provider::credit_balance`]
        CreditBalance = "credit_balance",
    }
}

/// One call of the trait or of an extension, with its arguments: what [`Layer::around`] sees.
///
/// A layer may pass another call to [`Next::run`] (a changed spec, another id), built from values
/// it owns.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum Call<'a> {
    /// [`Provider::arch`]
    Arch {
        /// The machine type.
        machine_type: &'a str,
    },
    /// [`Provider::create`]
    Create {
        /// What to make.
        spec: &'a MachineSpec,
    },
    /// [`Provider::machines`]
    Machines {
        /// The pool.
        pool: &'a str,
    },
    /// [`Provider::machine_named`]
    MachineNamed {
        /// The pool.
        pool: &'a str,
        /// The machine's name.
        name: &'a str,
    },
    /// [`Provider::machine`]
    Machine {
        /// The machine's id.
        id: &'a str,
    },
    /// [`Provider::delete`]
    Delete {
        /// The machine's id.
        id: &'a str,
    },
    /// [`Provider::delete_named`]
    DeleteNamed {
        /// The pool.
        pool: &'a str,
        /// The name a create was given.
        name: &'a str,
    },
    /// [`Provider::start`]
    Start {
        /// The machine's id.
        id: &'a str,
    },
    /// [`Provider::stop`]
    Stop {
        /// The machine's id.
        id: &'a str,
    },
    /// [`Provider::resize`]
    Resize {
        /// The machine's id.
        id: &'a str,
        /// The new machine type.
        machine_type: &'a str,
    },
    /// [`Provider::hourly_price`]
    HourlyPrice {
        /// The machine type.
        machine_type: &'a str,
        /// The location.
        location: &'a str,
    },
    /// [`MachineLabels::set_labels`]
    SetLabels {
        /// The machine's id.
        id: &'a str,
        /// Labels to set.
        set: &'a Labels,
        /// Label keys to remove.
        remove: &'a [String],
    },
    /// [`FirewallRules::network`]
    Network,
    /// [`FirewallRules::rule`]
    Rule {
        /// The rule's name.
        name: &'a str,
    },
    /// [`FirewallRules::rules`]
    Rules,
    /// [`FirewallRules::set_source_ranges`]
    SetSourceRanges {
        /// The rule's name.
        name: &'a str,
        /// Its new source ranges.
        ranges: &'a [String],
    },
    /// [`SshAdmission::admit_ssh`]
    AdmitSsh {
        /// The admission group.
        group: &'a str,
        /// The location.
        location: &'a str,
        /// The sources to admit.
        sources: &'a [String],
        /// Machines to admit again.
        readmit: &'a [String],
    },
    /// [`CreditBalance::balance`]
    Balance,
}

impl Call<'_> {
    /// The operation.
    pub fn op(&self) -> Op {
        match self {
            Call::Arch { .. } => Op::Arch,
            Call::Create { .. } => Op::Create,
            Call::Machines { .. } => Op::Machines,
            Call::MachineNamed { .. } => Op::MachineNamed,
            Call::Machine { .. } => Op::Machine,
            Call::Delete { .. } => Op::Delete,
            Call::DeleteNamed { .. } => Op::DeleteNamed,
            Call::Start { .. } => Op::Start,
            Call::Stop { .. } => Op::Stop,
            Call::Resize { .. } => Op::Resize,
            Call::HourlyPrice { .. } => Op::HourlyPrice,
            Call::SetLabels { .. } => Op::SetLabels,
            Call::Network => Op::Network,
            Call::Rule { .. } => Op::Rule,
            Call::Rules => Op::Rules,
            Call::SetSourceRanges { .. } => Op::SetSourceRanges,
            Call::AdmitSsh { .. } => Op::AdmitSsh,
            Call::Balance => Op::Balance,
        }
    }

    /// The id of the machine the call names, if it names one.
    pub fn id(&self) -> Option<&str> {
        match self {
            Call::Machine { id }
            | Call::Delete { id }
            | Call::Start { id }
            | Call::Stop { id }
            | Call::Resize { id, .. }
            | Call::SetLabels { id, .. } => Some(id),
            _ => None,
        }
    }

    /// What the call is about, in a few words for a record or a log: the spec's name, the pool, the
    /// machine's id, `pool/name`, `type@location`, the rule's name, `group@location`; empty for a
    /// call without argument.
    pub fn subject(&self) -> String {
        match self {
            Call::Arch { machine_type } => machine_type.to_string(),
            Call::Create { spec } => spec.name.clone(),
            Call::Machines { pool } => pool.to_string(),
            Call::MachineNamed { pool, name } | Call::DeleteNamed { pool, name } => {
                format!("{pool}/{name}")
            }
            Call::HourlyPrice {
                machine_type,
                location,
            } => format!("{machine_type}@{location}"),
            Call::Rule { name } | Call::SetSourceRanges { name, .. } => name.to_string(),
            Call::AdmitSsh {
                group, location, ..
            } => format!("{group}@{location}"),
            Call::Network | Call::Rules | Call::Balance => String::new(),
            other => other.id().unwrap_or_default().to_string(),
        }
    }
}

/// The answer to a [`Call`], of the type its method returns.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Answer {
    /// Of [`Call::Arch`].
    Arch(Arch),
    /// Of [`Call::Create`].
    Created(Created),
    /// Of [`Call::Machines`].
    Machines(Vec<Machine>),
    /// Of [`Call::Machine`] and [`Call::MachineNamed`].
    Machine(Option<Machine>),
    /// Of [`Call::Delete`] and [`Call::DeleteNamed`].
    Deleted(bool),
    /// Of [`Call::Start`], [`Call::Stop`] and [`Call::SetLabels`]: the machine after the change.
    Changed(Machine),
    /// Of [`Call::Resize`].
    Resized(Resized),
    /// Of [`Call::HourlyPrice`].
    Price(Price),
    /// Of [`Call::Network`].
    Network(Network),
    /// Of [`Call::Rule`].
    Rule(Option<FirewallRule>),
    /// Of [`Call::Rules`].
    Rules(Vec<FirewallRule>),
    /// Of [`Call::SetSourceRanges`]: the rule after the change.
    Patched(FirewallRule),
    /// Of [`Call::AdmitSsh`].
    Admission(Admission),
    /// Of [`Call::Balance`].
    Balance(Balance),
}

impl Answer {
    /// The variant's name, for an error that names a mismatched answer.
    pub fn name(&self) -> &'static str {
        match self {
            Answer::Arch(_) => "Arch",
            Answer::Created(_) => "Created",
            Answer::Machines(_) => "Machines",
            Answer::Machine(_) => "Machine",
            Answer::Deleted(_) => "Deleted",
            Answer::Changed(_) => "Changed",
            Answer::Resized(_) => "Resized",
            Answer::Price(_) => "Price",
            Answer::Network(_) => "Network",
            Answer::Rule(_) => "Rule",
            Answer::Rules(_) => "Rules",
            Answer::Patched(_) => "Patched",
            Answer::Admission(_) => "Admission",
            Answer::Balance(_) => "Balance",
        }
    }

    /// Every machine the answer carries (made, adopted, listed, read, changed, resized).
    pub fn machines(&self) -> Vec<&Machine> {
        match self {
            Answer::Created(c) => c.as_machine().into_iter().collect(),
            Answer::Machines(v) => v.iter().collect(),
            Answer::Machine(m) => m.iter().collect(),
            Answer::Changed(m) => vec![m],
            Answer::Resized(r) => vec![&r.machine],
            _ => Vec::new(),
        }
    }

    /// Every machine the answer carries, to reshape in place (a status shown otherwise, say).
    pub fn machines_mut(&mut self) -> Vec<&mut Machine> {
        match self {
            Answer::Created(Created::Machine(m) | Created::Adopted(m)) => vec![m],
            Answer::Machines(v) => v.iter_mut().collect(),
            Answer::Machine(m) => m.iter_mut().collect(),
            Answer::Changed(m) => vec![m],
            Answer::Resized(r) => vec![&mut r.machine],
            _ => Vec::new(),
        }
    }
}

/// The next step of a layered call: the inner provider. [`Next::run`] makes the call there; a layer
/// may run it once, not at all (answering instead), or more than once (it is `Copy`).
#[derive(Clone, Copy)]
pub struct Next<'a> {
    inner: &'a dyn Provider,
}

impl std::fmt::Debug for Next<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Next")
            .field("kind", &self.inner.kind())
            .finish()
    }
}

impl<'a> Next<'a> {
    /// The step to `inner`.
    pub fn new(inner: &'a dyn Provider) -> Self {
        Next { inner }
    }

    /// The inner provider.
    pub fn inner(&self) -> &'a dyn Provider {
        self.inner
    }

    /// Makes `call` on the inner provider. An extension call on a provider that does not offer the
    /// extension answers [`Error::Unsupported`].
    pub async fn run(self, call: Call<'_>) -> Result<Answer> {
        let p = self.inner;
        let firewall = || offered(p, p.firewall_rules(), Extension::FirewallRules);
        Ok(match call {
            Call::Arch { machine_type } => Answer::Arch(p.arch(machine_type).await?),
            Call::Create { spec } => Answer::Created(p.create(spec).await?),
            Call::Machines { pool } => Answer::Machines(p.machines(pool).await?),
            Call::MachineNamed { pool, name } => {
                Answer::Machine(p.machine_named(pool, name).await?)
            }
            Call::Machine { id } => Answer::Machine(p.machine(id).await?),
            Call::Delete { id } => Answer::Deleted(p.delete(id).await?),
            Call::DeleteNamed { pool, name } => Answer::Deleted(p.delete_named(pool, name).await?),
            Call::Start { id } => Answer::Changed(p.start(id).await?),
            Call::Stop { id } => Answer::Changed(p.stop(id).await?),
            Call::Resize { id, machine_type } => Answer::Resized(p.resize(id, machine_type).await?),
            Call::HourlyPrice {
                machine_type,
                location,
            } => Answer::Price(p.hourly_price(machine_type, location).await?),
            Call::SetLabels { id, set, remove } => Answer::Changed(
                offered(p, p.machine_labels(), Extension::MachineLabels)?
                    .set_labels(id, set, remove)
                    .await?,
            ),
            Call::Network => Answer::Network(firewall()?.network().await?),
            Call::Rule { name } => Answer::Rule(firewall()?.rule(name).await?),
            Call::Rules => Answer::Rules(firewall()?.rules().await?),
            Call::SetSourceRanges { name, ranges } => {
                Answer::Patched(firewall()?.set_source_ranges(name, ranges).await?)
            }
            Call::AdmitSsh {
                group,
                location,
                sources,
                readmit,
            } => Answer::Admission(
                offered(p, p.ssh_admission(), Extension::SshAdmission)?
                    .admit_ssh(group, location, sources, readmit)
                    .await?,
            ),
            Call::Balance => Answer::Balance(
                offered(p, p.credit_balance(), Extension::CreditBalance)?
                    .balance()
                    .await?,
            ),
        })
    }
}

fn offered<'a, T: ?Sized>(p: &dyn Provider, ext: Option<&'a T>, which: Extension) -> Result<&'a T> {
    ext.ok_or_else(|| Error::unsupported(p.kind(), which.as_str()))
}

/// What a [`Layered`] provider passes every call through. Every method has a default that forwards
/// unchanged, so a layer implements only what it changes.
#[async_trait]
pub trait Layer: Send + Sync + std::fmt::Debug {
    /// Makes `call`: by default `next.run(call)`. A layer may act before it, after it (on the
    /// answer or the error), instead of it (answering without `next`), or hold it; the answer must
    /// be of the call's type ([`Answer`]), else the caller gets [`Error::Other`] naming both.
    async fn around(&self, call: Call<'_>, next: Next<'_>) -> Result<Answer> {
        next.run(call).await
    }

    /// The provider kind to report, given the inner's.
    fn kind<'a>(&'a self, inner: &'a str) -> &'a str {
        inner
    }

    /// The capabilities to report, given the inner's (a test takes one away, say).
    fn capabilities(&self, inner: Capabilities) -> Capabilities {
        inner
    }

    /// Whether the layered provider answers `extension`, given whether the inner offers it. An
    /// extension offered here that the inner lacks answers [`Error::Unsupported`] unless the layer
    /// answers its calls itself.
    fn offers(&self, extension: Extension, inner: bool) -> bool {
        let _ = extension;
        inner
    }
}

/// The transparent layer: every call and every fact as the inner provider gives it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Forward;

impl Layer for Forward {}

/// A provider that forwards every method of [`Provider`] and of its extensions to `inner` through
/// `layer` (see the [module](self)).
#[derive(Debug, Clone)]
pub struct Layered<P, L> {
    inner: P,
    layer: L,
}

impl<P: Provider, L: Layer> Layered<P, L> {
    /// `inner` seen through `layer`.
    pub fn new(inner: P, layer: L) -> Self {
        Layered { inner, layer }
    }

    /// The inner provider.
    pub fn inner(&self) -> &P {
        &self.inner
    }

    /// The layer.
    pub fn layer(&self) -> &L {
        &self.layer
    }

    /// The inner provider and the layer.
    pub fn into_parts(self) -> (P, L) {
        (self.inner, self.layer)
    }

    async fn pass(&self, call: Call<'_>) -> Result<Answer> {
        self.layer.around(call, Next::new(&self.inner)).await
    }

    fn offers(&self, which: Extension, inner: bool) -> bool {
        self.layer.offers(which, inner)
    }
}

/// The error for a layer that answered `got` to a call of `op`.
fn mismatch(op: Op, got: &Answer) -> Error {
    Error::other(format!("a layer answered {} to a call of {op}", got.name()))
}

/// The answer of `$call` on `$self` as `$variant`, or the mismatch error.
macro_rules! answer {
    ($self:ident, $call:expr, $variant:path) => {{
        let call = $call;
        let op = call.op();
        match $self.pass(call).await? {
            $variant(v) => Ok(v),
            other => Err(mismatch(op, &other)),
        }
    }};
}

#[async_trait]
impl<P: Provider, L: Layer> Provider for Layered<P, L> {
    fn kind(&self) -> &str {
        self.layer.kind(self.inner.kind())
    }

    fn owner(&self) -> &str {
        self.inner.owner()
    }

    fn capabilities(&self) -> Capabilities {
        self.layer.capabilities(self.inner.capabilities())
    }

    async fn arch(&self, machine_type: &str) -> Result<Arch> {
        answer!(self, Call::Arch { machine_type }, Answer::Arch)
    }

    async fn create(&self, spec: &MachineSpec) -> Result<Created> {
        answer!(self, Call::Create { spec }, Answer::Created)
    }

    async fn machines(&self, pool: &str) -> Result<Vec<Machine>> {
        answer!(self, Call::Machines { pool }, Answer::Machines)
    }

    async fn machine_named(&self, pool: &str, name: &str) -> Result<Option<Machine>> {
        answer!(self, Call::MachineNamed { pool, name }, Answer::Machine)
    }

    async fn machine(&self, id: &str) -> Result<Option<Machine>> {
        answer!(self, Call::Machine { id }, Answer::Machine)
    }

    async fn delete(&self, id: &str) -> Result<bool> {
        answer!(self, Call::Delete { id }, Answer::Deleted)
    }

    async fn delete_named(&self, pool: &str, name: &str) -> Result<bool> {
        answer!(self, Call::DeleteNamed { pool, name }, Answer::Deleted)
    }

    async fn start(&self, id: &str) -> Result<Machine> {
        answer!(self, Call::Start { id }, Answer::Changed)
    }

    async fn stop(&self, id: &str) -> Result<Machine> {
        answer!(self, Call::Stop { id }, Answer::Changed)
    }

    async fn resize(&self, id: &str, machine_type: &str) -> Result<Resized> {
        answer!(self, Call::Resize { id, machine_type }, Answer::Resized)
    }

    async fn hourly_price(&self, machine_type: &str, location: &str) -> Result<Price> {
        answer!(
            self,
            Call::HourlyPrice {
                machine_type,
                location
            },
            Answer::Price
        )
    }

    fn machine_labels(&self) -> Option<&dyn MachineLabels> {
        let inner = self.inner.machine_labels().is_some();
        self.offers(Extension::MachineLabels, inner)
            .then_some(self as &dyn MachineLabels)
    }

    fn firewall_rules(&self) -> Option<&dyn FirewallRules> {
        let inner = self.inner.firewall_rules().is_some();
        self.offers(Extension::FirewallRules, inner)
            .then_some(self as &dyn FirewallRules)
    }

    fn ssh_admission(&self) -> Option<&dyn SshAdmission> {
        let inner = self.inner.ssh_admission().is_some();
        self.offers(Extension::SshAdmission, inner)
            .then_some(self as &dyn SshAdmission)
    }

    fn credit_balance(&self) -> Option<&dyn CreditBalance> {
        let inner = self.inner.credit_balance().is_some();
        self.offers(Extension::CreditBalance, inner)
            .then_some(self as &dyn CreditBalance)
    }
}

#[async_trait]
impl<P: Provider, L: Layer> MachineLabels for Layered<P, L> {
    async fn set_labels(&self, id: &str, set: &Labels, remove: &[String]) -> Result<Machine> {
        answer!(self, Call::SetLabels { id, set, remove }, Answer::Changed)
    }
}

#[async_trait]
impl<P: Provider, L: Layer> FirewallRules for Layered<P, L> {
    /// The inner's network name (a fact, not a call: no layer sees it); empty when the inner has no
    /// firewall rules.
    fn network_name(&self) -> String {
        self.inner
            .firewall_rules()
            .map(|f| f.network_name())
            .unwrap_or_default()
    }

    async fn network(&self) -> Result<Network> {
        answer!(self, Call::Network, Answer::Network)
    }

    async fn rule(&self, name: &str) -> Result<Option<FirewallRule>> {
        answer!(self, Call::Rule { name }, Answer::Rule)
    }

    async fn rules(&self) -> Result<Vec<FirewallRule>> {
        answer!(self, Call::Rules, Answer::Rules)
    }

    async fn set_source_ranges(&self, name: &str, ranges: &[String]) -> Result<FirewallRule> {
        answer!(
            self,
            Call::SetSourceRanges { name, ranges },
            Answer::Patched
        )
    }
}

#[async_trait]
impl<P: Provider, L: Layer> SshAdmission for Layered<P, L> {
    async fn admit_ssh(
        &self,
        group: &str,
        location: &str,
        sources: &[String],
        readmit: &[String],
    ) -> Result<Admission> {
        answer!(
            self,
            Call::AdmitSsh {
                group,
                location,
                sources,
                readmit
            },
            Answer::Admission
        )
    }
}

#[async_trait]
impl<P: Provider, L: Layer> CreditBalance for Layered<P, L> {
    async fn balance(&self) -> Result<Balance> {
        answer!(self, Call::Balance, Answer::Balance)
    }
}

#[cfg(test)]
mod tests;
