//! What the Hetzner driver's tests share: a provider on the fake Hetzner API.
#![allow(dead_code)]

use std::time::Duration;

use orca_fakes::hetzner::FakeHetzner;
use orca_hetzner::{Config, ConfigBuilder, HetznerProvider};
use orca_machines::RetryPolicy;

/// A builder pointed at `fake`, with the fake's SSH key, firewall and private network and fast
/// polling.
pub fn builder(fake: &FakeHetzner) -> ConfigBuilder {
    Config::builder()
        .token(fake.token())
        .endpoint(fake.url())
        .retry(RetryPolicy::fast())
        .ssh_keys(["orca-test"])
        .firewall("orca-fw")
        .network("orca-net")
        .poll_interval(Duration::from_millis(1))
        .shutdown_timeout(Duration::from_millis(200))
}

/// A provider for `owner` on `fake`.
pub async fn provider(fake: &FakeHetzner, owner: &str) -> HetznerProvider {
    HetznerProvider::new(builder(fake).build().unwrap(), owner)
        .await
        .unwrap()
}
