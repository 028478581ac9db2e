//! # orca-machines: the contract
//!
//! orca puts cloud machines from Hetzner Cloud, AWS EC2, Azure and Compute Engine behind one async trait,
//! [`Provider`]. This crate is the contract and knows no cloud: [`MachineSpec`], [`Machine`], the
//! [`Provider`] trait, [`docker_arch`], the ownership [`labels`], one [`Error`] type with retry meaning,
//! [`Capabilities`], the shared [`retry`] policy and pagination loop, the in-memory provider
//! ([`memory`]) and, with the feature `conformance`, the conformance suite every driver passes.
//!
//! ## The contract every driver keeps
//! 1. Names are hostname labels; pool and owner are label values that cannot widen a selector. Invalid
//!    input is refused before any network call ([`Error::InvalidSpec`]).
//! 2. Every machine carries `orca=pool`, `orca-pool=<pool>` and, with an owner, `orca-owner=<owner>`, set
//!    in the create call itself. [`Provider::machines`] returns exactly this owner's machines of a pool;
//!    [`Provider::delete`] refuses machines of other owners ([`Error::NotOwned`]).
//! 3. [`Provider::create`] gives the machine, no stock ([`Created::NoStock`]), or an error; a create
//!    retried after an ambiguous failure never makes a second machine; a create that fails half-way
//!    removes what it made ([`Error::Leftovers`] names what it could not).
//! 4. Listings read every page and map states onto [`Status`], keeping the cloud's word.
//! 5. Delete is true once the machine is gone, now or before.
//! 6. [`Provider::arch`] answers Docker's name from the cloud's catalogue, cached.
//! 7. [`Capabilities`] are truthful: what is denied answers [`Error::Unsupported`] before any call.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use orca_machines::{memory::MemoryCloud, Created, MachineSpec, Provider, Status};
//! let p = MemoryCloud::new().provider("stack-1")?;
//! let spec = MachineSpec::new("orca-lab-7", "arm64-small", "zone-a", "lab");
//! match p.create(&spec).await? {
//!     Created::Machine(m) => assert_eq!(m.status, Status::Running),
//!     Created::Adopted(_) => unreachable!("nothing was made before"),
//!     Created::NoStock { .. } => unreachable!("stock is unlimited until a test sets it"),
//! }
//! for m in p.machines("lab").await? {
//!     assert!(p.delete(&m.id).await?);
//! }
//! # Ok::<(), orca_machines::Error>(()) }).unwrap();
//! ```

pub mod arch;
#[cfg(feature = "conformance")]
pub mod conformance;
pub mod error;
pub mod ext;
pub mod labels;
pub mod machine;
pub mod memory;
pub mod provider;
pub mod retry;
pub mod settings;
pub mod spec;

pub use arch::{docker_arch, Arch};
pub use error::{parse_retry_after, Context, Error, ErrorKind, Result, Source};
pub use ext::{
    Admission, AdmissionRule, Balance, CreditBalance, FirewallPorts, FirewallRule, FirewallRules,
    MachineLabels, Network, SshAdmission,
};
pub use labels::{OWNER_LABEL, POOL_LABEL};
pub use machine::{Created, Machine, Price, Resized, Status, Timestamp};
pub use provider::{Capabilities, Provider, SpecOptions};
pub use retry::{all_pages, Page, RetryPolicy};
pub use settings::Settings;
pub use spec::{validate_id, validate_name, validate_owner, validate_pool, MachineSpec};

/// The timestamp crate orca's [`Timestamp`] comes from, re-exported so that callers use the same one.
pub use chrono;
