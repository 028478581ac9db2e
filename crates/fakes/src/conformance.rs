//! Each fake's hooks for the core conformance suite (feature `conformance`): one
//! [`Harness`](orca_machines::conformance::Harness) a fake, which a driver's own suite and the
//! plugin's suite both run. What differs between the two is only how a provider is made (the driver
//! in the test's process, or the plugin program in a child process): the test says it with
//! [`Providers`]; the catalogue, the stock, the lost answer, the request counts and the delayed
//! visibility are the fake's, and live here once.
//!
//! One file a fake: `hetzner` ([`HetznerHarness`]), `moto` ([`MotoHarness`]), `azure`
//! ([`AzureHarness`]) and `gce` ([`GceHarness`]).

mod azure;
mod gce;
mod hetzner;
mod moto;

pub use azure::{AzureHarness, BILLING_ACCOUNT, BILLING_PROFILE, SUBNET_NSG};
pub use gce::GceHarness;
pub use hetzner::HetznerHarness;
pub use moto::{MotoHarness, Target};

use std::time::Duration;

use async_trait::async_trait;
use orca_machines::conformance::Hook;
use orca_machines::{Provider, Result};

/// How long the fakes' operations and actions run under the suite: the clouds' last seconds, and
/// a driver that stopped following them to their end would pass a suite whose operations had
/// ended by the next request.
const OPERATION_TIME: Duration = Duration::from_millis(100);

/// How a test makes providers on a fake `F` (or on what the harness says `F` is): the driver itself,
/// or the plugin program that carries it.
#[async_trait]
pub trait Providers<F: Sync>: Send + Sync {
    /// A provider for `owner` (empty for none) on `on`.
    async fn provider(&self, on: &F, owner: &str) -> Result<Box<dyn Provider>>;

    /// A provider for `owner` on `on` that asks for `page_size` machines a page. By default the
    /// plain provider: where the page is the fake's to set (Azure's, the paged moto proxy's).
    async fn paged_provider(
        &self,
        on: &F,
        owner: &str,
        page_size: u32,
    ) -> Result<Box<dyn Provider>> {
        let _ = page_size;
        self.provider(on, owner).await
    }
}

/// `providers`' provider for `owner` on `on` asking for `page_size` machines a page, for
/// [`Harness::paged_provider`](orca_machines::conformance::Harness::paged_provider): a harness's
/// settings are valid.
async fn paged<F: Sync>(
    providers: &impl Providers<F>,
    on: &F,
    owner: &str,
    page_size: u32,
) -> Hook<Box<dyn Provider>> {
    let provider = providers.paged_provider(on, owner, page_size).await;
    Ok(provider.expect("valid settings"))
}
