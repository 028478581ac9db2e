//! With a proxy in the environment (`HTTP_PROXY` and friends, as on many CI machines), a driver
//! pointed at 127.0.0.1 still talks to 127.0.0.1: its bearer token and its calls never go to a proxy.
//! It runs in a process of its own: the variables are process-global.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::*;
use orca_machines::Provider;

#[test]
fn a_loopback_endpoint_is_never_proxied() {
    orca_fakes::alone::run_alone(module_path!(), ALONE, &[], &[]);
}

/// The test itself, run alone in a process of its own: it sets the proxy variables of its process.
const ALONE: &str = "a_loopback_endpoint_is_never_proxied_alone";

#[tokio::test]
#[ignore = "it sets the proxy variables of its process: run alone by the test above"]
async fn a_loopback_endpoint_is_never_proxied_alone() {
    orca_fakes::alone::assert_alone(module_path!(), ALONE);
    // A "proxy" on 127.0.0.1 that counts the connections it gets and closes them.
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .unwrap();
    let proxy = format!("http://{}", listener.local_addr().unwrap());
    let hits = Arc::new(AtomicUsize::new(0));
    let seen = hits.clone();
    tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            seen.fetch_add(1, Ordering::SeqCst);
            drop(conn);
        }
    });
    for k in [
        "HTTP_PROXY",
        "http_proxy",
        "HTTPS_PROXY",
        "https_proxy",
        "ALL_PROXY",
        "all_proxy",
    ] {
        std::env::set_var(k, &proxy);
    }
    for k in ["NO_PROXY", "no_proxy"] {
        std::env::remove_var(k);
    }

    let f = fake().await;
    let p = provider(&f, "owner-1").await;
    let listed = p.machines("lab").await;
    assert_eq!(hits.load(Ordering::SeqCst), 0, "a call went to the proxy");
    assert!(listed.unwrap().is_empty());
    assert!(f.control().count(&reqwest::Method::GET, "virtualMachines") > 0);
}
