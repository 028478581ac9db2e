//! The [`Provider`] trait every driver implements, and the [`Capabilities`] it declares ([contract](crate::contract) 9).

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::arch::Arch;
use crate::error::{Error, Result};
use crate::ext::{CreditBalance, FirewallRules, MachineLabels, SshAdmission};
use crate::machine::{Created, Machine, Price, Resized};
use crate::spec::{validate_name, validate_pool, MachineSpec, OPTION_NAMES};

/// The per-machine options of [`MachineSpec`] a driver honours. `create` refuses a spec that sets one
/// the driver does not honour ([`Error::Unsupported`], before any call).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SpecOptions {
    /// [`MachineSpec::labels`]: labels set in the create call.
    pub labels: bool,
    /// [`MachineSpec::disk_gb`]: the boot disk's size.
    pub disk_gb: bool,
    /// [`MachineSpec::ssh_keys`]: SSH public keys for the login user.
    pub ssh_keys: bool,
    /// [`MachineSpec::network_tags`]: network tags.
    pub network_tags: bool,
    /// [`MachineSpec::max_run_duration`]: a run limit enforced by the cloud.
    pub max_run_duration: bool,
    /// [`MachineSpec::image`]: a boot image.
    pub image: bool,
    /// [`MachineSpec::ssh_sources`]: the machine's own firewall admitting addresses on SSH.
    pub ssh_sources: bool,
    /// [`MachineSpec::admission_group`]: membership of an SSH admission group.
    pub admission_group: bool,
}

impl SpecOptions {
    /// No option.
    pub const NONE: SpecOptions = SpecOptions {
        labels: false,
        disk_gb: false,
        ssh_keys: false,
        network_tags: false,
        max_run_duration: false,
        image: false,
        ssh_sources: false,
        admission_group: false,
    };
    /// Every option.
    pub const ALL: SpecOptions = SpecOptions {
        labels: true,
        disk_gb: true,
        ssh_keys: true,
        network_tags: true,
        max_run_duration: true,
        image: true,
        ssh_sources: true,
        admission_group: true,
    };

    fn flags(&self) -> [bool; 8] {
        [
            self.labels,
            self.disk_gb,
            self.ssh_keys,
            self.network_tags,
            self.max_run_duration,
            self.image,
            self.ssh_sources,
            self.admission_group,
        ]
    }

    /// These options with `name` (one of [`OPTION_NAMES`]) set to `on`; an unknown name changes nothing.
    pub fn with(mut self, name: &str, on: bool) -> Self {
        let slot = match name {
            "labels" => &mut self.labels,
            "disk_gb" => &mut self.disk_gb,
            "ssh_keys" => &mut self.ssh_keys,
            "network_tags" => &mut self.network_tags,
            "max_run_duration" => &mut self.max_run_duration,
            "image" => &mut self.image,
            "ssh_sources" => &mut self.ssh_sources,
            "admission_group" => &mut self.admission_group,
            _ => return self,
        };
        *slot = on;
        self
    }

    /// Whether the option `name` (one of [`OPTION_NAMES`]) is honoured.
    pub fn honours(&self, name: &str) -> bool {
        OPTION_NAMES
            .iter()
            .zip(self.flags())
            .any(|(n, on)| *n == name && on)
    }

    /// The names of the options honoured, in [`OPTION_NAMES`] order.
    pub fn names(&self) -> Vec<&'static str> {
        OPTION_NAMES
            .iter()
            .zip(self.flags())
            .filter_map(|(n, on)| on.then_some(*n))
            .collect()
    }
}

/// What a driver can do beyond the calls every driver has.
///
/// A call the driver cannot do answers [`Error::Unsupported`] before any network call; the conformance
/// suite checks that every capability a driver claims works and every one it denies is refused.
/// Extensions (label changes, firewall rules, SSH admission, credit balance) are not flags here: a
/// provider answers them through [`Provider::machine_labels`] and its siblings.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Capabilities {
    /// [`Provider::start`] and [`Provider::stop`].
    pub start_stop: bool,
    /// [`Provider::resize`], reporting whether it caused downtime.
    pub resize: bool,
    /// [`Provider::hourly_price`].
    pub hourly_price: bool,
    /// [`Machine::started_at`] and [`Machine::stopped_at`] are reported.
    pub power_times: bool,
    /// [`Machine::private_address`] is reported (every machine has one in a private network).
    pub private_address: bool,
    /// The per-machine options `create` honours.
    pub options: SpecOptions,
}

impl Capabilities {
    /// No capability beyond the calls every driver has.
    pub const NONE: Capabilities = Capabilities {
        start_stop: false,
        resize: false,
        hourly_price: false,
        power_times: false,
        private_address: false,
        options: SpecOptions::NONE,
    };
    /// Every capability.
    pub const ALL: Capabilities = Capabilities {
        start_stop: true,
        resize: true,
        hourly_price: true,
        power_times: true,
        private_address: true,
        options: SpecOptions::ALL,
    };

    /// These capabilities with `start_stop` set to `on`.
    pub const fn with_start_stop(mut self, on: bool) -> Self {
        self.start_stop = on;
        self
    }
    /// These capabilities with `resize` set to `on`.
    pub const fn with_resize(mut self, on: bool) -> Self {
        self.resize = on;
        self
    }
    /// These capabilities with `hourly_price` set to `on`.
    pub const fn with_hourly_price(mut self, on: bool) -> Self {
        self.hourly_price = on;
        self
    }
    /// These capabilities with `power_times` set to `on`.
    pub const fn with_power_times(mut self, on: bool) -> Self {
        self.power_times = on;
        self
    }
    /// These capabilities with `private_address` set to `on`.
    pub const fn with_private_address(mut self, on: bool) -> Self {
        self.private_address = on;
        self
    }
    /// These capabilities honouring `options`.
    pub const fn with_options(mut self, options: SpecOptions) -> Self {
        self.options = options;
        self
    }

    /// The names of the capabilities that are on (options as `option:<name>`).
    pub fn names(&self) -> Vec<String> {
        let mut v = Vec::new();
        for (on, n) in [
            (self.start_stop, "start_stop"),
            (self.resize, "resize"),
            (self.hourly_price, "hourly_price"),
            (self.power_times, "power_times"),
            (self.private_address, "private_address"),
        ] {
            if on {
                v.push(n.to_string());
            }
        }
        v.extend(self.options.names().iter().map(|n| format!("option:{n}")));
        v
    }

    /// Refuses `spec` when it sets an option these capabilities do not honour: what a driver's
    /// `create` calls after [`MachineSpec::validate`], before any network call.
    pub fn check_spec(&self, kind: &str, spec: &MachineSpec) -> Result<()> {
        match spec
            .options_used()
            .into_iter()
            .find(|o| !self.options.honours(o))
        {
            Some(o) => Err(Error::unsupported(
                kind,
                format!("the machine option {o} in create"),
            )),
            None => Ok(()),
        }
    }
}

/// Machines from one cloud account, made and seen as one owner's.
///
/// Every driver keeps the same [contract](crate::contract), numbered there and checked line by line by
/// the conformance suite.
///
/// ```
/// # tokio_test_block_on(async {
/// use orca_machines::{memory::MemoryCloud, Created, MachineSpec, Provider};
/// let cloud = MemoryCloud::new();
/// let p: Box<dyn Provider> = Box::new(cloud.provider("stack-1")?);
/// assert_eq!(p.arch("arm64-small").await?.as_str(), "arm64");
/// let Created::Machine(m) = p.create(&MachineSpec::new("lab-1", "arm64-small", "zone-a", "lab")).await?
///     else { panic!("no stock") };
/// assert_eq!(p.machines("lab").await?.len(), 1);
/// assert!(p.delete(&m.id).await?);
/// assert!(p.delete(&m.id).await?, "gone before is gone");
/// # Ok::<(), orca_machines::Error>(()) });
/// # fn tokio_test_block_on<F: std::future::Future>(f: F) -> F::Output {
/// #     tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f) }
/// ```
#[async_trait]
pub trait Provider: Send + Sync + std::fmt::Debug {
    /// The driver kind: `fake`, `hetzner`, `ec2`, `azure`, `gce`.
    fn kind(&self) -> &str;

    /// The owner whose machines these are (the stack's id); empty for none.
    fn owner(&self) -> &str;

    /// What this driver can do beyond the four calls.
    fn capabilities(&self) -> Capabilities {
        Capabilities::NONE
    }

    /// `machine_type`'s architecture by Docker's name, from the cloud's own catalogue (cached).
    async fn arch(&self, machine_type: &str) -> Result<Arch>;

    /// Makes the machine `spec` describes: the machine, no stock of its type in its location, or an
    /// error saying why not. Retrying a create after an ambiguous failure never makes a second machine.
    async fn create(&self, spec: &MachineSpec) -> Result<Created>;

    /// This owner's machines of `pool`, in every state but gone.
    async fn machines(&self, pool: &str) -> Result<Vec<Machine>>;

    /// Machine `id` as the cloud reports it now, read on its own (never through a listing): `None` when
    /// there is no such machine (or it is gone); [`Error::NotOwned`] when another owner made it.
    async fn machine(&self, id: &str) -> Result<Option<Machine>>;

    /// This owner's machine of `pool` named `name`, in every state but gone; `None` when there is none.
    /// What a caller reads to find what a lost or failed create made (see [`Error::made_nothing`]):
    /// a create's name is this owner's key for the machine in that pool.
    ///
    /// `pool` and `name` are checked as [`Provider::create`] checks them ([`Error::InvalidSpec`]
    /// naming the field, before any call). Another pool's machine, another owner's machine (or, for
    /// the empty owner, an owned one) and a machine that is gone answer `None`.
    ///
    /// The default reads the pool's listing ([`Provider::machines`]) and picks the machine of that
    /// exact name; where several carry it (a cloud whose names are not unique), the one created
    /// first (`created_at`, a machine that reports none after those that do), then the lowest id,
    /// so that every caller picks the same one. A driver overrides it with its cloud's cheapest read
    /// by name (a name filter, a GET by name), keeping the same answer.
    async fn machine_named(&self, pool: &str, name: &str) -> Result<Option<Machine>> {
        validate_pool(pool)?;
        validate_name(name)?;
        let all = self.machines(pool).await?;
        Ok(first_made(all.into_iter().filter(|m| m.name == name)))
    }

    /// Deletes machine `id`: true once it is gone, now or before. Refuses ([`Error::NotOwned`]) a machine
    /// that this owner did not create.
    async fn delete(&self, id: &str) -> Result<bool>;

    /// Removes what this owner's creates of `name` in `pool` made: the machine of that name if one
    /// stands, and every piece a create makes beside its machine (a public address, a security
    /// group, an interface, a boot disk) that carries this owner's and this pool's labels, whether
    /// a machine holds it or not. What a caller calls for a create that failed, was stopped or was
    /// given up before it answered a machine: [`Provider::delete`] needs the machine's id, and a
    /// create stopped before its machine leaves pieces that no listing shows.
    ///
    /// True when something of that name was removed; false when there was nothing of it. Another
    /// owner's or another pool's machine or piece is never touched (for the empty owner, an owned
    /// one is another owner's). A piece that cannot be removed fails the call
    /// ([`Error::Leftovers`] naming it), so that the caller keeps the name and calls again.
    /// `pool` and `name` are checked as [`Provider::create`] checks them, before any call. The
    /// caller must not call it while a create of that name is running: that create's pieces would
    /// go from under it.
    ///
    /// The default removes the machine [`Provider::machine_named`] answers, and trusts its "none".
    /// A driver overrides it when its create makes pieces beside the machine (to remove them too),
    /// when its reads by name can miss a machine a moment old (tags that reach filters late: it
    /// finds the machine by what does not lag), or when several machines of the name can stand
    /// (every one goes). A driver whose new machines can stay unseen for a while notes its creates
    /// stopped before they answered ([`crate::kit::StoppedCreates`]) and, for such a name, reads
    /// again within its visibility window before it answers false.
    async fn delete_named(&self, pool: &str, name: &str) -> Result<bool> {
        match self.machine_named(pool, name).await? {
            Some(m) => self.delete(&m.id).await,
            None => Ok(false),
        }
    }

    /// Starts a stopped machine (capability `start_stop`).
    async fn start(&self, id: &str) -> Result<Machine> {
        let _ = id;
        Err(Error::unsupported(self.kind(), "start"))
    }

    /// Stops a running machine; it stays, and may keep costing for its disk (capability `start_stop`).
    async fn stop(&self, id: &str) -> Result<Machine> {
        let _ = id;
        Err(Error::unsupported(self.kind(), "stop"))
    }

    /// Changes the machine's type, stopping and starting it when the cloud needs that
    /// (capability `resize`).
    async fn resize(&self, id: &str, machine_type: &str) -> Result<Resized> {
        let _ = (id, machine_type);
        Err(Error::unsupported(self.kind(), "resize"))
    }

    /// The hourly on-demand price of `machine_type` in `location` (capability `hourly_price`).
    async fn hourly_price(&self, machine_type: &str, location: &str) -> Result<Price> {
        let _ = (machine_type, location);
        Err(Error::unsupported(self.kind(), "hourly_price"))
    }

    /// Label changes on existing machines, when the driver can make them.
    fn machine_labels(&self) -> Option<&dyn MachineLabels> {
        None
    }

    /// Firewall rules of the network machines are put on, when the driver reads them.
    fn firewall_rules(&self) -> Option<&dyn FirewallRules> {
        None
    }

    /// SSH admission of an address set, when the driver can make it.
    fn ssh_admission(&self) -> Option<&dyn SshAdmission> {
        None
    }

    /// The account's credit balance, when the cloud has one and the driver is set up to read it.
    fn credit_balance(&self) -> Option<&dyn CreditBalance> {
        None
    }

    /// The names of the extensions this provider answers (`machine_labels`, `firewall_rules`,
    /// `ssh_admission`, `credit_balance`).
    fn extensions(&self) -> Vec<&'static str> {
        offered_extensions(self)
    }
}

/// The names of the extensions whose accessors `p` answers, in the traits' order: what
/// [`Provider::extensions`] answers by default, and what the conformance suite reads (never an
/// override of that method).
pub(crate) fn offered_extensions<P: Provider + ?Sized>(p: &P) -> Vec<&'static str> {
    let offered = [
        ("machine_labels", p.machine_labels().is_some()),
        ("firewall_rules", p.firewall_rules().is_some()),
        ("ssh_admission", p.ssh_admission().is_some()),
        ("credit_balance", p.credit_balance().is_some()),
    ];
    offered
        .into_iter()
        .filter_map(|(n, on)| on.then_some(n))
        .collect()
}

/// The machine of `machines` that was made first: the earliest `created_at` (a machine that reports
/// none after those that do), then the lowest id. The one choice [`Provider::machine_named`] makes
/// among machines that share a name, whichever driver answers.
pub fn first_made(machines: impl IntoIterator<Item = Machine>) -> Option<Machine> {
    machines.into_iter().min_by(|a, b| {
        let key = |m: &Machine| (m.created_at.is_none(), m.created_at);
        key(a).cmp(&key(b)).then_with(|| a.id.cmp(&b.id))
    })
}

macro_rules! forward_provider {
    ($($ty:ty),*) => {$(
        #[async_trait]
        impl<P: Provider + ?Sized> Provider for $ty {
            fn kind(&self) -> &str { (**self).kind() }
            fn owner(&self) -> &str { (**self).owner() }
            fn capabilities(&self) -> Capabilities { (**self).capabilities() }
            async fn arch(&self, machine_type: &str) -> Result<Arch> { (**self).arch(machine_type).await }
            async fn create(&self, spec: &MachineSpec) -> Result<Created> { (**self).create(spec).await }
            async fn machines(&self, pool: &str) -> Result<Vec<Machine>> { (**self).machines(pool).await }
            async fn machine(&self, id: &str) -> Result<Option<Machine>> { (**self).machine(id).await }
            async fn machine_named(&self, pool: &str, name: &str) -> Result<Option<Machine>> {
                (**self).machine_named(pool, name).await
            }
            async fn delete(&self, id: &str) -> Result<bool> { (**self).delete(id).await }
            async fn delete_named(&self, pool: &str, name: &str) -> Result<bool> {
                (**self).delete_named(pool, name).await
            }
            async fn start(&self, id: &str) -> Result<Machine> { (**self).start(id).await }
            async fn stop(&self, id: &str) -> Result<Machine> { (**self).stop(id).await }
            async fn resize(&self, id: &str, machine_type: &str) -> Result<Resized> {
                (**self).resize(id, machine_type).await
            }
            async fn hourly_price(&self, machine_type: &str, location: &str) -> Result<Price> {
                (**self).hourly_price(machine_type, location).await
            }
            fn machine_labels(&self) -> Option<&dyn MachineLabels> { (**self).machine_labels() }
            fn firewall_rules(&self) -> Option<&dyn FirewallRules> { (**self).firewall_rules() }
            fn ssh_admission(&self) -> Option<&dyn SshAdmission> { (**self).ssh_admission() }
            fn credit_balance(&self) -> Option<&dyn CreditBalance> { (**self).credit_balance() }
        }
    )*};
}

forward_provider!(Box<P>, std::sync::Arc<P>, &P);

#[cfg(test)]
mod tests {
    use super::*;

    /// A provider whose pool listing is fixed and which keeps every default.
    #[derive(Debug)]
    struct Listed(Vec<Machine>, std::sync::atomic::AtomicUsize);

    #[async_trait]
    impl Provider for Listed {
        fn kind(&self) -> &str {
            "listed"
        }
        fn owner(&self) -> &str {
            ""
        }
        async fn arch(&self, _: &str) -> Result<Arch> {
            Ok(Arch::Amd64)
        }
        async fn create(&self, _: &MachineSpec) -> Result<Created> {
            Err(Error::unsupported("listed", "create"))
        }
        async fn machines(&self, _: &str) -> Result<Vec<Machine>> {
            self.1.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(self.0.clone())
        }
        async fn machine(&self, _: &str) -> Result<Option<Machine>> {
            Ok(None)
        }
        async fn delete(&self, _: &str) -> Result<bool> {
            Ok(true)
        }
    }

    fn machine(id: &str, name: &str, created: Option<&str>) -> Machine {
        let mut m = Machine::new(id, name);
        m.created_at = created.map(|t| t.parse().unwrap());
        m
    }

    #[tokio::test]
    async fn the_default_read_by_name_picks_the_first_made_of_a_shared_name() {
        let p = Listed(
            vec![
                machine("i-9", "web-1", None),
                machine("i-5", "web-1", Some("2026-01-02T00:00:00Z")),
                machine("i-7", "web-1", Some("2026-01-01T00:00:00Z")),
                machine("i-3", "web-1", Some("2026-01-01T00:00:00Z")),
                machine("i-1", "web-10", Some("2025-01-01T00:00:00Z")),
            ],
            Default::default(),
        );
        // The earliest created, then the lowest id; never a name that only starts the same.
        let m = p.machine_named("lab", "web-1").await.unwrap().unwrap();
        assert_eq!(m.id, "i-3");
        assert_eq!(p.machine_named("lab", "web-2").await.unwrap(), None);
        // Without creation times: the lowest id.
        let p = Listed(
            vec![machine("i-9", "a", None), machine("i-2", "a", None)],
            Default::default(),
        );
        assert_eq!(
            p.machine_named("lab", "a").await.unwrap().unwrap().id,
            "i-2"
        );
        // Through a forwarding impl (Arc, Box, &), and bad input before any listing.
        let p = std::sync::Arc::new(p);
        let arc: std::sync::Arc<dyn Provider> = p.clone();
        assert_eq!(
            arc.machine_named("lab", "a").await.unwrap().unwrap().id,
            "i-2"
        );
        let listings = p.1.load(std::sync::atomic::Ordering::SeqCst);
        for (pool, name, field) in [("a b", "a", "pool"), ("lab", "-a", "name")] {
            match arc.machine_named(pool, name).await {
                Err(Error::InvalidSpec { field: f, .. }) => assert_eq!(f, field),
                other => panic!("{pool}/{name} gave {other:?}"),
            }
        }
        assert_eq!(p.1.load(std::sync::atomic::Ordering::SeqCst), listings);
    }
}
