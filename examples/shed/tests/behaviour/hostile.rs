//! The CLI facing a server that is not shed's, or not well: what it answers is shown, never obeyed
//! by the terminal, and read only up to a bound.

use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{delete, get};
use axum::Router;

use crate::http::cli;

/// A server of `app` on this machine, and its address.
async fn stub(app: Router) -> String {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
    format!("http://{addr}")
}

#[tokio::test]
async fn a_servers_text_reaches_the_terminal_escaped() {
    let app = Router::new().route(
        "/api/info",
        get(|| async {
            (
                StatusCode::BAD_REQUEST,
                [(header::CONTENT_TYPE, "application/json")],
                r#"{"code": "X\u001b[31m", "message": "\u001b]0;owned\u0007 then \u009b2J"}"#,
            )
        }),
    );
    let base = stub(app).await;
    let (code, out, err) = cli(&base, &["info"]).await;
    assert_eq!(code, 1, "{err}");
    for c in ['\u{1b}', '\u{7}', '\u{9b}'] {
        assert!(!err.contains(c) && !out.contains(c), "{c:?} in {err:?}");
    }
    assert!(err.contains(r"X\x1b[31m (400)"), "{err}");
    assert!(err.contains(r"\x1b]0;owned\x07 then \u{9b}2J"), "{err}");
}

#[tokio::test]
async fn an_answer_over_the_bound_is_not_read_whole() {
    // 17 MiB of a JSON string: past the 16 MiB the CLI reads of one answer.
    let huge = format!("\"{}\"", "x".repeat(17 << 20));
    let app = Router::new().route(
        "/api/sheds",
        get(move || {
            let huge = huge.clone();
            async move { ([(header::CONTENT_TYPE, "application/json")], huge) }
        }),
    );
    let base = stub(app).await;
    let (code, out, err) = cli(&base, &["list", "--json"]).await;
    assert_eq!(code, 1, "{} bytes out", out.len());
    assert!(out.is_empty(), "{} bytes out", out.len());
    assert!(err.contains("over 16 MiB"), "{err}");
}

#[tokio::test]
async fn an_event_that_never_ends_is_not_read_whole() {
    // 8 MiB of one event that never ends (no blank line), then the stream closes.
    let app = Router::new().route(
        "/api/sheds/{name}",
        delete(|| async {
            (
                [(header::CONTENT_TYPE, "text/event-stream")],
                format!("data: {}", "x".repeat(8 << 20)),
            )
                .into_response()
        }),
    );
    let base = stub(app).await;
    let (code, _, err) = cli(&base, &["delete", "dev-1"]).await;
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("over 1 MiB"), "{err}");
}

#[tokio::test]
async fn json_output_stays_json_whatever_control_characters_it_holds() {
    // DEL and a C1 control, which JSON leaves in strings as they are.
    let app = Router::new().route(
        "/api/sheds",
        get(|| async {
            (
                [(header::CONTENT_TYPE, "application/json")],
                r#"["a\u009bb\u007fc\u001bd"]"#,
            )
        }),
    );
    let base = stub(app).await;
    let (code, out, err) = cli(&base, &["list", "--json"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(!out.contains(['\u{9b}', '\u{7f}', '\u{1b}']), "{out:?}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("the output is JSON");
    assert_eq!(v, serde_json::json!(["a\u{9b}b\u{7f}c\u{1b}d"]));
}

/// No server at the address: the CLI says that nothing answered there, why, and what to check.
#[tokio::test]
async fn no_server_at_the_address_is_said_with_its_cause_and_what_to_check() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", l.local_addr().unwrap());
    drop(l);
    let (code, _, err) = cli(&base, &["list"]).await;
    assert_eq!(code, 1, "{err}");
    assert!(err.contains(&base), "{err}");
    assert!(err.to_lowercase().contains("connection refused"), "{err}");
    assert!(
        err.contains("shed-server") && err.contains("SHED_SERVER"),
        "{err}"
    );
}
