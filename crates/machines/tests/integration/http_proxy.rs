//! The kit's HTTP client goes through the environment's proxy, or never when told. The test runs in a
//! process of its own: it sets the proxy variables of its process, which no other test may see.
#![cfg(feature = "http")]

use std::time::Duration;

use orca_machines::kit::{http_client, http_client_with, ClientOptions, Proxy, Timeouts};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A server on 127.0.0.1 answering every request with `body`.
async fn answering(body: &'static str) -> std::net::SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf).await;
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = s.write_all(answer.as_bytes()).await;
                let _ = s.shutdown().await;
            });
        }
    });
    addr
}

#[test]
fn the_proxy_is_the_environments_unless_the_client_is_told_never() {
    orca_fakes::alone::run_alone(module_path!(), ALONE, &[], &[]);
}

/// The test itself, run alone in a process of its own: it sets the proxy variables.
const ALONE: &str = "the_proxy_is_the_environments_unless_the_client_is_told_never_alone";

#[tokio::test]
#[ignore = "sets the proxy variables of its process: run alone by the test above"]
async fn the_proxy_is_the_environments_unless_the_client_is_told_never_alone() {
    orca_fakes::alone::assert_alone(module_path!(), ALONE);
    let proxy = answering("through the proxy").await;
    let target = answering("direct").await;
    for k in ["NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"] {
        std::env::remove_var(k);
    }
    for k in ["HTTP_PROXY", "http_proxy"] {
        std::env::set_var(k, format!("http://{proxy}"));
    }
    let timeouts = Timeouts::new(Duration::from_secs(5), Some(Duration::from_secs(5)));
    let get = |c: reqwest::Client| async move {
        c.get(format!("http://{target}/"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    };
    let env = http_client_with("test", timeouts, Proxy::Environment).unwrap();
    assert_eq!(get(env).await, "through the proxy");
    let never = http_client_with("test", timeouts, Proxy::Never).unwrap();
    assert_eq!(get(never).await, "direct");
    // The older form leaves out the proxy for a loopback endpoint by itself.
    let old = http_client(
        "test",
        &format!("http://{target}"),
        &ClientOptions::new(),
        Duration::from_secs(5),
        None,
    )
    .unwrap();
    assert_eq!(get(old).await, "direct");
}
