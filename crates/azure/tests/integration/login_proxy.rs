//! With a proxy in the environment, azure_identity's token requests to this machine (any address of
//! 127/8, as the kit's `is_loopback` says) never go to the proxy: the login transport uses the kit's
//! HTTP client, as the Resource Manager calls do. It runs in a process of its own: the variables it
//! sets (proxies, the App Service managed identity's endpoint) are process-global.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use common::*;
use orca_azure::Credential;
use orca_machines::Provider;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A managed identity token endpoint (App Service's protocol) on `ip`: answers every request with
/// the fake's token and keeps each request's head.
async fn token_endpoint(ip: &str) -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
    let url = format!("http://{}/msi/token", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let kept = seen.clone();
    let expires_on = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 3600;
    let body = serde_json::json!({
        "access_token": orca_fakes::azure::TOKEN,
        "expires_on": expires_on.to_string(),
        "token_type": "Bearer",
        "resource": "https://management.azure.com/",
    })
    .to_string();
    let answer = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    tokio::spawn(async move {
        while let Ok((mut c, _)) = listener.accept().await {
            let mut buf = vec![0u8; 8192];
            let n = c.read(&mut buf).await.unwrap_or(0);
            let head = String::from_utf8_lossy(&buf[..n]).to_string();
            kept.lock().unwrap().push(head);
            let _ = c.write_all(answer.as_bytes()).await;
        }
    });
    (url, seen)
}

#[test]
fn a_token_request_to_any_loopback_address_is_never_proxied() {
    orca_fakes::alone::run_alone(module_path!(), ALONE, &[], &[]);
}

/// The test itself, run alone in a process of its own: it sets the proxy and managed identity variables of its process.
const ALONE: &str = "a_token_request_to_any_loopback_address_is_never_proxied_alone";

#[tokio::test]
#[ignore = "it sets the proxy and managed identity variables of its process: run alone by the test above"]
async fn a_token_request_to_any_loopback_address_is_never_proxied_alone() {
    orca_fakes::alone::assert_alone(module_path!(), ALONE);
    // A "proxy" on 127.0.0.1 that counts the connections it gets and closes them.
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .unwrap();
    let proxy = format!("http://{}", listener.local_addr().unwrap());
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = hits.clone();
    tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            drop(conn);
        }
    });
    // The token endpoint on 127.0.0.2: this machine, though not 127.0.0.1 nor "localhost".
    let (endpoint, seen) = token_endpoint("127.0.0.2").await;
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
    for k in [
        "NO_PROXY",
        "no_proxy",
        "MSI_ENDPOINT",
        "MSI_SECRET",
        "IDENTITY_SERVER_THUMBPRINT",
    ] {
        std::env::remove_var(k);
    }
    std::env::set_var("IDENTITY_ENDPOINT", &endpoint);
    std::env::set_var("IDENTITY_HEADER", "header-for-the-test");

    let f = fake().await;
    let config = settings(&f)
        .credential(Credential::ManagedIdentity { client_id: None })
        .build()
        .unwrap();
    let p = orca_azure::AzureProvider::new(config, "owner-1")
        .await
        .unwrap();
    let listed = p.machines("lab").await;
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "a request went to the proxy"
    );
    assert!(listed.unwrap().is_empty());
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "one token request: {seen:?}");
    assert!(
        seen[0].starts_with("GET /msi/token?"),
        "the token request reached 127.0.0.2: {seen:?}"
    );
    let agent = seen[0]
        .lines()
        .find_map(|l| {
            l.split_once(':')
                .filter(|(k, _)| k.eq_ignore_ascii_case("user-agent"))
        })
        .map(|(_, v)| v.trim().to_string())
        .unwrap_or_default();
    assert!(
        agent.starts_with("orca-azure "),
        "the orca user agent: {agent:?}"
    );
    assert!(f.control().count(&reqwest::Method::GET, "virtualMachines") > 0);
}
