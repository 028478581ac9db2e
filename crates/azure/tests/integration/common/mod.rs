//! The fake Azure and providers on it, shared by the tests.
#![allow(dead_code)]

use std::time::Duration;

use orca_azure::{AzureProvider, Config, ConfigBuilder};
use orca_fakes::azure::{FakeAzure, RESOURCE_GROUP, SUBSCRIPTION, TOKEN};
use orca_machines::RetryPolicy;

pub use orca_fakes::azure::{LOCATION, SSH_PUBLIC_KEY as SSH_KEY, SUBNET, VNET};
pub use orca_fakes::conformance::{BILLING_ACCOUNT, BILLING_PROFILE};

pub const AMD: &str = "Standard_B2s";
pub const ARM: &str = "Standard_B2pts_v2";

/// A fake with the location's network (`orca-net-westeurope/hosts`, no security group of its own).
pub async fn fake() -> FakeAzure {
    let f = FakeAzure::start().await.expect("fake azure");
    f.add_hosts_subnet();
    f
}

pub fn settings(f: &FakeAzure) -> ConfigBuilder {
    Config::builder()
        .subscription_id(SUBSCRIPTION)
        .resource_group(RESOURCE_GROUP)
        .vnet(VNET)
        .subnet(SUBNET)
        .image("Canonical:ubuntu-24_04-lts:server:latest")
        .admin_user("orca")
        .ssh_public_key(SSH_KEY)
        .ssh_sources(["203.0.113.7/32"])
        .arm_endpoint(f.url())
        .prices_endpoint(f.url())
        .token(TOKEN)
        .retry(RetryPolicy::fast())
        .poll_interval(Duration::from_millis(2))
        .visibility_window(Duration::from_secs(5))
        .reservation_wait(Duration::from_secs(2))
        .imds_endpoint(f.url())
}

pub async fn provider(f: &FakeAzure, owner: &str) -> AzureProvider {
    AzureProvider::new(settings(f).build().expect("settings"), owner)
        .await
        .expect("provider")
}

/// A port on 127.0.0.1 that refuses every connection for as long as the socket lives: bound, never
/// listening. A port bound and let go could be taken meanwhile by another test's fake.
pub fn refusing_port() -> tokio::net::TcpSocket {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(([127, 0, 0, 1], 0).into()).unwrap();
    socket
}
