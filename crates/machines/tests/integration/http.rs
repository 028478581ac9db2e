//! The kit's transport-error classifier against real failures on 127.0.0.1: each becomes the orca
//! error a retry needs, with its cause, and never with its URL.
#![cfg(feature = "http")]

use std::time::Duration;

use orca_machines::kit::{http_client_with, transport_error, Proxy, Timeouts, TransportKind};
use orca_machines::{Error, ErrorKind};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const TOKEN: &str = "sig=hunter2";

fn client(request: Option<Duration>) -> reqwest::Client {
    http_client_with(
        "test",
        Timeouts::new(Duration::from_secs(5), request),
        Proxy::Never,
    )
    .unwrap()
}

/// A server on 127.0.0.1 that reads each request's head and answers it with `answer` (then closes).
async fn server(answer: &'static [u8]) -> String {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf).await;
                if answer == b"never" {
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                }
                let _ = s.write_all(answer).await;
                let _ = s.shutdown().await;
            });
        }
    });
    format!("http://{addr}/v1/things?{TOKEN}")
}

/// The error's every printed form, its causes included.
fn printed(e: &Error) -> String {
    let mut all = format!("{e} {e:?}");
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        all.push_str(&format!(" | {c} {c:?}"));
        cause = c.source();
    }
    all
}

fn check(e: reqwest::Error, kind: TransportKind, orca: ErrorKind, says: &str) {
    assert_eq!(TransportKind::of(&e), kind, "{e:?}");
    let got = transport_error(e);
    assert_eq!(got.kind(), orca, "{got}");
    assert!(got.to_string().contains(says), "{got}");
    assert!(
        std::error::Error::source(&got).is_some(),
        "the cause is kept"
    );
    let all = printed(&got);
    assert!(
        !all.contains("hunter2") && !all.contains("/v1/things"),
        "{all}"
    );
}

#[tokio::test]
async fn a_refused_connection_is_passing_and_never_reached_the_cloud() {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    drop(l);
    let e = client(None)
        .get(format!("http://{addr}/v1/things?{TOKEN}"))
        .send()
        .await
        .unwrap_err();
    assert!(!TransportKind::of(&e).may_have_been_served());
    check(
        e,
        TransportKind::Connect,
        ErrorKind::Transient,
        "could not connect",
    );
}

#[tokio::test]
async fn a_request_past_its_timeout_is_passing_and_may_have_been_served() {
    let url = server(b"never").await;
    let e = client(Some(Duration::from_millis(200)))
        .get(url)
        .send()
        .await
        .unwrap_err();
    assert!(TransportKind::of(&e).may_have_been_served());
    check(e, TransportKind::Timeout, ErrorKind::Transient, "timed out");
}

#[tokio::test]
async fn a_connection_closed_without_an_answer_is_passing() {
    let url = server(b"").await;
    let e = client(None).get(url).send().await.unwrap_err();
    let kind = TransportKind::of(&e);
    assert!(
        matches!(kind, TransportKind::Request | TransportKind::Interrupted),
        "{kind:?}: {e:?}"
    );
    check(e, kind, ErrorKind::Transient, "");
}

#[tokio::test]
async fn an_answer_cut_off_is_passing() {
    let url = server(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n{\"servers\": [").await;
    let rsp = client(None).get(url).send().await.unwrap();
    let e = rsp.bytes().await.unwrap_err();
    check(
        e,
        TransportKind::Body,
        ErrorKind::Transient,
        "the answer was cut off",
    );
}

#[tokio::test]
async fn an_answer_that_is_not_the_json_expected_is_not_passing() {
    let url = server(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello").await;
    let rsp = client(None).get(url).send().await.unwrap();
    let e = rsp.json::<Vec<u32>>().await.unwrap_err();
    check(
        e,
        TransportKind::Decode,
        ErrorKind::Other,
        "the answer could not be read",
    );
}

#[tokio::test]
async fn a_request_that_cannot_be_built_is_not_passing() {
    let e = client(None)
        .get("http://[::1/v1/things?sig=hunter2")
        .send()
        .await
        .unwrap_err();
    assert!(!TransportKind::of(&e).may_have_been_served());
    check(
        e,
        TransportKind::Invalid,
        ErrorKind::Other,
        "refused by the client",
    );
}
