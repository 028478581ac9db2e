//! # orca
//!
//! Cloud machines from Hetzner Cloud, AWS EC2, Azure and Compute Engine behind one async trait. This is
//! the crate to depend on: it re-exports the contract ([`orca_machines`]) and, with a Cargo feature per
//! cloud, the drivers, and it makes a provider of any kind from this process's settings with [`of`],
//! from settings as data with [`of_with`], or from a whole description as data ([`ProviderConfig`]).
//!
//! Rust cannot give a trait object an associated constructor from outside the trait's crate, so a
//! provider of a kind is made by the free function `orca::of(kind, owner)`, not `Provider::of`.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let p = orca::of("fake", "stack-1").await?;
//! assert_eq!(p.arch("arm64-small").await?.as_str(), "arm64");
//! let e = orca::of("nimbus", "").await.unwrap_err();
//! assert!(e.to_string().contains("unknown provider kind"), "{e}");
//! assert!(e.to_string().contains("known kinds: fake"), "{e}");
//! # Ok::<(), orca::Error>(()) }).unwrap();
//! ```
//!
//! What a failed create made: [`Error::made_nothing`] says whether the cloud surely made nothing,
//! and [`Provider::machine_named`] finds what it made otherwise. [`layer`] wraps any provider for
//! metrics, fault injection and recording without losing a method:
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use orca::layer::{Fault, Faults, Layered, Op};
//! use orca::{MachineSpec, Provider};
//! let faults = Faults::new();
//! let p = Layered::new(orca::of("fake", "stack-1").await?, faults.clone());
//! let spec = MachineSpec::new("lab-1", "amd64-small", "zone-a", "lab");
//! faults.inject(Op::Create, Fault::LoseAnswer, 1);
//! let e = p.create(&spec).await.unwrap_err();
//! assert!(!e.made_nothing(), "the answer was lost after the call: look before giving the name up");
//! let made = p.machine_named(&spec.pool, &spec.name).await?;
//! assert_eq!(made.map(|m| m.name).as_deref(), Some("lab-1"));
//! # Ok::<(), orca::Error>(()) }).unwrap();
//! ```

use std::sync::Arc;

pub use orca_machines::*;

mod config;

pub use config::ProviderConfig;

#[cfg(feature = "azure")]
pub use orca_azure as azure;
#[cfg(feature = "ec2")]
pub use orca_ec2 as ec2;
#[cfg(feature = "gce")]
pub use orca_gce as gce;
#[cfg(feature = "hetzner")]
pub use orca_hetzner as hetzner;

/// The environment variable that points the `fake` kind at a state file, so that separate runs of a
/// program share one simulated cloud. Unset: the cloud lives in memory for this process only. The
/// typed key is [`FakeKey::State`].
pub const FAKE_STATE_ENV: &str = FakeKey::State.as_str();

/// Every provider kind orca has, whether or not this build enabled it.
pub const ALL_KINDS: [&str; 5] = ["fake", "hetzner", "ec2", "azure", "gce"];

/// The provider kinds this build knows (one per enabled Cargo feature, plus `fake`).
pub fn kinds() -> Vec<&'static str> {
    #[allow(unused_mut)]
    let mut v = vec!["fake"];
    #[cfg(feature = "hetzner")]
    v.push("hetzner");
    #[cfg(feature = "ec2")]
    v.push("ec2");
    #[cfg(feature = "azure")]
    v.push("azure");
    #[cfg(feature = "gce")]
    v.push("gce");
    v
}

/// Whether setting `key` holds a secret: one a driver of this build declares so (its `ConfigKey`'s
/// `is_secret`), or one whose name says so (`TOKEN`, `SECRET`, `PASSWORD`, `CREDENTIAL`,
/// `PRIVATE`), for drivers this build does not have. Such a value is never shown, not even in part.
///
/// ```
/// assert!(orca::is_secret_key("HCLOUD_TOKEN"));
/// assert!(orca::is_secret_key("AWS_SECRET_ACCESS_KEY"));
/// assert!(!orca::is_secret_key("ORCA_AZURE_RESOURCE_GROUP"));
/// ```
pub fn is_secret_key(key: &str) -> bool {
    #[allow(unused_imports)]
    use orca_machines::settings::SettingKey;
    #[cfg(feature = "hetzner")]
    if orca_hetzner::ConfigKey::parse(key).is_ok_and(|k| k.is_secret()) {
        return true;
    }
    #[cfg(feature = "ec2")]
    if orca_ec2::ConfigKey::parse(key).is_ok_and(|k| k.is_secret()) {
        return true;
    }
    #[cfg(feature = "azure")]
    if orca_azure::ConfigKey::parse(key).is_ok_and(|k| k.is_secret()) {
        return true;
    }
    #[cfg(feature = "gce")]
    if orca_gce::ConfigKey::parse(key).is_ok_and(|k| k.is_secret()) {
        return true;
    }
    let upper = key.to_ascii_uppercase();
    ["TOKEN", "SECRET", "PASSWORD", "CREDENTIAL", "PRIVATE"]
        .iter()
        .any(|w| upper.contains(w))
}

/// A provider of `kind` (`fake`, `hetzner`, `ec2`, `azure`, `gce`) from this process's settings, its
/// machines labelled `owner` (the stack's id; empty for none).
///
/// An unknown kind names the known ones; a kind whose settings are missing names every missing
/// variable ([`Error::InvalidSettings`]).
pub async fn of(kind: &str, owner: &str) -> Result<Arc<dyn Provider>> {
    validate_owner(owner)?;
    match kind {
        "fake" => fake(owner, std::env::var(FAKE_STATE_ENV).ok().as_deref()).await,
        #[cfg(feature = "hetzner")]
        "hetzner" => Ok(Arc::new(orca_hetzner::from_env(owner).await?)),
        #[cfg(feature = "ec2")]
        "ec2" => Ok(Arc::new(orca_ec2::from_env(owner).await?)),
        #[cfg(feature = "azure")]
        "azure" => Ok(Arc::new(orca_azure::from_env(owner).await?)),
        #[cfg(feature = "gce")]
        "gce" => Ok(Arc::new(orca_gce::from_env(owner).await?)),
        other => Err(unknown_kind(other)),
    }
}

/// A provider of `kind` for `owner` from `settings`: key/value settings with the same names as the
/// environment variables [`of`] reads (each driver's `ConfigKey` lists them). Nothing is read from
/// the process environment: what a program keeps in its own registry or vault is given here.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use orca::Settings;
/// let p = orca::of_with("fake", "stack-1", &Settings::new()).await?;
/// assert_eq!(p.kind(), "fake");
/// let e = orca::of_with("fake", "", &Settings::new().with("ORCA_FAKE_STAET", "x")).await.unwrap_err();
/// assert!(e.to_string().contains("ORCA_FAKE_STAET"), "{e}");
/// # Ok::<(), orca::Error>(()) }).unwrap();
/// ```
pub async fn of_with(kind: &str, owner: &str, settings: &Settings) -> Result<Arc<dyn Provider>> {
    validate_owner(owner)?;
    match kind {
        "fake" => {
            check_settings(kind, settings)?;
            fake(owner, settings.get_key(FakeKey::State)).await
        }
        #[cfg(feature = "hetzner")]
        "hetzner" => Ok(Arc::new(
            orca_hetzner::from_settings(owner, settings).await?,
        )),
        #[cfg(feature = "ec2")]
        "ec2" => Ok(Arc::new(orca_ec2::from_settings(owner, settings).await?)),
        #[cfg(feature = "azure")]
        "azure" => Ok(Arc::new(orca_azure::from_settings(owner, settings).await?)),
        #[cfg(feature = "gce")]
        "gce" => Ok(Arc::new(orca_gce::from_settings(owner, settings).await?)),
        other => Err(unknown_kind(other)),
    }
}

/// Refuses every key of `settings` that the driver of `kind` does not know, naming each, as
/// [`of_with`] does, without making a provider: for a program that hands the settings to a driver
/// it does not link (a plugin reads what its environment holds, and would ignore a key its driver
/// does not know). A kind this build lacks is not checked here.
pub fn check_settings(kind: &str, settings: &Settings) -> Result<()> {
    match kind {
        "fake" => settings.check_known(kind, &FakeKey::names()),
        #[cfg(feature = "hetzner")]
        "hetzner" => settings.check_keys::<orca_hetzner::ConfigKey>(),
        #[cfg(feature = "ec2")]
        "ec2" => settings.check_keys::<orca_ec2::ConfigKey>(),
        #[cfg(feature = "azure")]
        "azure" => settings.check_keys::<orca_azure::ConfigKey>(),
        #[cfg(feature = "gce")]
        "gce" => settings.check_keys::<orca_gce::ConfigKey>(),
        _ => Ok(()),
    }
}

/// The in-memory provider, on the state file `state` when given: opened waiting for the file's lock
/// without blocking the runtime.
async fn fake(owner: &str, state: Option<&str>) -> Result<Arc<dyn Provider>> {
    let cloud = match state {
        Some(path) if !path.is_empty() => memory::MemoryCloud::open(path).await?,
        _ => memory::MemoryCloud::new(),
    };
    Ok(Arc::new(cloud.provider(owner)?))
}

/// `Ok` when this build knows `kind`, else why not ([`unknown_kind`]).
fn check_kind(kind: &str) -> Result<()> {
    if kinds().contains(&kind) {
        Ok(())
    } else {
        Err(unknown_kind(kind))
    }
}

fn unknown_kind(kind: &str) -> Error {
    let known = kinds().join(", ");
    let rule = if ALL_KINDS.contains(&kind) {
        format!(
            "the provider kind {kind:?} is not in this build; enable the Cargo feature {kind:?} of orca (built with: {known})"
        )
    } else {
        format!("unknown provider kind {kind:?}; known kinds: {known}")
    };
    Error::invalid("kind", rule)
}
