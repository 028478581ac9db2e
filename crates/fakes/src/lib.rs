//! Stateful fake cloud APIs on 127.0.0.1 for orca's tests and benchmarks: one module a cloud, each
//! faithful to that cloud's public API reference (shapes, pagination, asynchronous actions or
//! operations, label filters, error bodies and codes) and with fault injection on demand.
//!
//! `moto` is not a fake of its own but a proxy in front of moto, the EC2 emulator, making it behave as
//! EC2 does where moto is kinder.
//!
//! Nothing here talks to any other address: every server binds 127.0.0.1 on a port the OS picks.

pub mod alone;
pub mod azure;
mod bucket;
#[cfg(feature = "conformance")]
pub mod conformance;
pub mod control;
pub mod gce;
pub mod hetzner;
pub mod moto;
pub mod traces;

pub use control::{serve, Control, Fault, Logged, Rule, Running};

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::Method;
    use axum::routing::post;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    #[tokio::test]
    async fn faults_fire_in_order_and_are_logged() {
        let made = Arc::new(AtomicU32::new(0));
        let m = made.clone();
        let router = axum::Router::new().route(
            "/things",
            post(move || {
                let m = m.clone();
                async move {
                    m.fetch_add(1, Ordering::SeqCst);
                    axum::Json(serde_json::json!({"ok": true}))
                }
            }),
        );
        let control = Arc::new(Control::default());
        let server = serve(router, control.clone()).await.unwrap();
        let http = reqwest::Client::new();
        let url = format!("{}/things", server.url());
        control.inject(Rule::new(
            Some(Method::POST),
            "/things",
            Fault::Status {
                status: 429,
                body: serde_json::json!({"error": "slow"}),
                headers: vec![("Retry-After".into(), "1".into())],
            },
            1,
        ));
        control.inject(Rule::new(None, "things", Fault::DropAnswer, 1));
        control.inject(Rule::new(
            None,
            "things",
            Fault::Latency(Duration::from_millis(1)),
            1,
        ));

        let r = http.post(&url).send().await.unwrap();
        assert_eq!(r.status(), 429);
        assert_eq!(r.headers()["retry-after"], "1");
        assert_eq!(
            made.load(Ordering::SeqCst),
            0,
            "a status fault serves nothing"
        );

        let dropped = match http.post(&url).send().await {
            Ok(r) => r.bytes().await.is_err(),
            Err(_) => true,
        };
        assert!(dropped, "the answer must be lost");
        assert_eq!(made.load(Ordering::SeqCst), 1, "but the request was served");

        assert_eq!(http.post(&url).send().await.unwrap().status(), 200);
        assert_eq!(http.post(&url).send().await.unwrap().status(), 200);
        assert_eq!(made.load(Ordering::SeqCst), 3);
        assert_eq!(control.count(&Method::POST, "/things"), 4);
        assert_eq!(control.requests(), 4);
    }
}
