//! # orca-machines: the contract
//!
//! orca puts cloud machines from Hetzner Cloud, AWS EC2, Azure and Compute Engine behind one async trait,
//! [`Provider`]. This crate is the contract and knows no cloud: [`MachineSpec`], [`Machine`], the
//! [`Provider`] trait, [`docker_arch`], the ownership [`labels`], one [`Error`] type with retry meaning,
//! [`Capabilities`], the shared [`retry`] policy and pagination loop, settings as data
//! ([`settings`]), the driver [`kit`], the files a program shares with other processes ([`fs`]: one
//! atomic write, one lock nobody can swap from under its holder), the in-memory provider
//! ([`memory`]) and, with the feature `conformance`, the conformance suite every driver passes.
//!
//! What every program on orca needs beside the calls lives here once too:
//! [`Provider::machine_named`] reads this owner's machine of a pool by name (what a lost or failed
//! create made), and [`Provider::delete_named`] removes what such a create left, the machine and
//! the pieces beside it that no listing shows; [`Error::made_nothing`] says whether a failed call
//! surely changed nothing at the cloud (from what its attempts may have reached); and [`layer`] is
//! a provider that forwards every method to another through a [`layer::Layer`], the base for
//! metrics, fault injection and recording.
//!
//! The contract every driver keeps is written once, numbered, in [`contract`] (the file
//! `crates/machines/CONTRACT.md`); the conformance suite checks its lines 1 to 10, the core's and each
//! driver's own tests its lines 11 to 15 (the file names them).
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

#[doc = include_str!("../CONTRACT.md")]
pub mod contract {}
#[cfg(feature = "conformance")]
pub mod conformance;
pub mod error;
pub mod ext;
pub mod fs;
pub mod kit;
pub mod labels;
pub mod layer;
pub mod machine;
pub mod memory;
pub mod provider;
pub mod retry;
pub mod settings;
pub mod signals;
pub mod spec;
pub mod table;
pub mod words;

pub use arch::{docker_arch, Arch};
pub use error::{parse_retry_after, Context, Error, ErrorKind, Result, Source};
pub use ext::{
    Admission, AdmissionRule, Balance, CreditBalance, FirewallPorts, FirewallRule, FirewallRules,
    MachineLabels, Network, SshAdmission,
};
pub use labels::{OWNER_LABEL, POOL_LABEL};
pub use machine::{Created, Machine, Price, Resized, Status, Timestamp};
pub use memory::FakeKey;
pub use provider::{Capabilities, Provider, SpecOptions};
pub use retry::{all_pages, Page, RetryPolicy};
pub use settings::{SettingKey, Settings};
pub use spec::{validate_id, validate_name, validate_owner, validate_pool, MachineSpec};

/// The timestamp crate orca's [`Timestamp`] comes from, re-exported so that callers use the same one.
pub use chrono;
