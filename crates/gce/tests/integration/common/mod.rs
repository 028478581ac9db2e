//! What the Compute Engine driver's tests share: providers on the fake Compute Engine API.
#![allow(dead_code)]

use std::sync::Arc;

use orca_fakes::gce::{FakeGce, NETWORK, PROJECT, SUBNET, ZONE};
use orca_gce::{Config, ConfigBuilder, Credentials, GceProvider};
use orca_machines::RetryPolicy;

/// One token provider for every provider of a test, as a process holds one set of credentials.
pub fn tokens(fake: &FakeGce) -> Credentials {
    Credentials::Provider(Arc::new(
        gcp_auth::CustomServiceAccount::from_json(&fake.service_account_json()).unwrap(),
    ))
}

/// Settings of a provider of every zone.
pub fn any_zone(fake: &FakeGce) -> ConfigBuilder {
    Config::builder()
        .project(PROJECT)
        .network(NETWORK)
        .subnet(SUBNET)
        .credentials_json(fake.service_account_json())
        .endpoint(fake.endpoint())
        .retry(RetryPolicy::fast())
}

/// Settings of a single-zone provider (shed's).
pub fn builder(fake: &FakeGce) -> ConfigBuilder {
    any_zone(fake).zone(ZONE)
}

pub async fn provider(fake: &FakeGce, owner: &str) -> GceProvider {
    GceProvider::new(builder(fake).build().unwrap(), owner)
        .await
        .unwrap()
}

pub fn id(name: &str) -> String {
    format!("{ZONE}:{name}")
}
