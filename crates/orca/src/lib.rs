//! # orca
//!
//! Cloud machines from Hetzner Cloud, AWS EC2, Azure and Compute Engine behind one async trait. This is
//! the crate to depend on: it re-exports the contract ([`orca_machines`]) and, with a Cargo feature per
//! cloud, the drivers, and it makes a provider of any kind from this process's settings with [`of`].
//!
//! Rust cannot give a trait object an associated constructor from outside the trait's crate, so the
//! seed's `Provider.of(kind, owner)` is spelled `orca::of(kind, owner)`.
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

use std::sync::Arc;

pub use orca_machines::*;

#[cfg(feature = "azure")]
pub use orca_azure as azure;
#[cfg(feature = "ec2")]
pub use orca_ec2 as ec2;
#[cfg(feature = "gce")]
pub use orca_gce as gce;
#[cfg(feature = "hetzner")]
pub use orca_hetzner as hetzner;

/// The environment variable that points the `fake` kind at a state file, so that separate runs of a
/// program share one simulated cloud. Unset: the cloud lives in memory for this process only.
pub const FAKE_STATE_ENV: &str = "ORCA_FAKE_STATE";

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

/// A provider of `kind` (`fake`, `hetzner`, `ec2`, `azure`, `gce`) from this process's settings, its
/// machines labelled `owner` (the stack's id; empty for none).
///
/// An unknown kind names the known ones; a kind whose settings are missing names every missing
/// variable ([`Error::InvalidSettings`]).
pub async fn of(kind: &str, owner: &str) -> Result<Arc<dyn Provider>> {
    validate_owner(owner)?;
    match kind {
        "fake" => {
            let cloud = match std::env::var_os(FAKE_STATE_ENV) {
                Some(path) if !path.is_empty() => memory::MemoryCloud::persistent(path)?,
                _ => memory::MemoryCloud::new(),
            };
            Ok(Arc::new(cloud.provider(owner)?))
        }
        #[cfg(feature = "hetzner")]
        "hetzner" => Ok(Arc::new(orca_hetzner::from_env(owner).await?)),
        #[cfg(feature = "ec2")]
        "ec2" => Ok(Arc::new(orca_ec2::from_env(owner).await?)),
        #[cfg(feature = "azure")]
        "azure" => Ok(Arc::new(orca_azure::from_env(owner).await?)),
        #[cfg(feature = "gce")]
        "gce" => Ok(Arc::new(orca_gce::from_env(owner).await?)),
        other => Err(Error::invalid(
            "kind",
            format!(
                "unknown provider kind {other:?}; known kinds: {}",
                kinds().join(", ")
            ),
        )),
    }
}
