//! The [`Provider`] trait every driver implements, and the [`Capabilities`] it declares (contract 7).

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::arch::Arch;
use crate::error::{Error, Result};
use crate::machine::{Created, Machine, Price, Resized};
use crate::spec::MachineSpec;

/// What a driver can do beyond the four calls every driver has.
///
/// A call the driver cannot do answers [`Error::Unsupported`] before any network call; the conformance
/// suite checks that every capability a driver claims works and every one it denies is refused.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Capabilities {
    /// [`Provider::start`] and [`Provider::stop`].
    pub start_stop: bool,
    /// [`Provider::resize`], reporting whether it caused downtime.
    pub resize: bool,
    /// [`Provider::hourly_price`].
    pub hourly_price: bool,
}

impl Capabilities {
    /// No capability beyond the four calls.
    pub const NONE: Capabilities = Capabilities {
        start_stop: false,
        resize: false,
        hourly_price: false,
    };
    /// Every capability.
    pub const ALL: Capabilities = Capabilities {
        start_stop: true,
        resize: true,
        hourly_price: true,
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

    /// The names of the capabilities that are on.
    pub fn names(&self) -> Vec<&'static str> {
        let mut v = Vec::new();
        if self.start_stop {
            v.push("start_stop");
        }
        if self.resize {
            v.push("resize");
        }
        if self.hourly_price {
            v.push("hourly_price");
        }
        v
    }
}

/// Machines from one cloud account, made and seen as one owner's.
///
/// Every driver keeps the same contract (see the crate documentation and `DESIGN.md`): names and labels
/// are validated before any network call; machines carry the ownership labels from the create call on;
/// [`machines`](Provider::machines) returns exactly this owner's machines of a pool;
/// [`delete`](Provider::delete) refuses machines of other owners and is true once the machine is gone.
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

    /// Deletes machine `id`: true once it is gone, now or before. Refuses ([`Error::NotOwned`]) a machine
    /// that this owner did not create.
    async fn delete(&self, id: &str) -> Result<bool>;

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
            async fn delete(&self, id: &str) -> Result<bool> { (**self).delete(id).await }
            async fn start(&self, id: &str) -> Result<Machine> { (**self).start(id).await }
            async fn stop(&self, id: &str) -> Result<Machine> { (**self).stop(id).await }
            async fn resize(&self, id: &str, machine_type: &str) -> Result<Resized> {
                (**self).resize(id, machine_type).await
            }
            async fn hourly_price(&self, machine_type: &str, location: &str) -> Result<Price> {
                (**self).hourly_price(machine_type, location).await
            }
        }
    )*};
}

forward_provider!(Box<P>, std::sync::Arc<P>, &P);
