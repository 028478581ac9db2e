//! The echo services of firewall mode `auto`: each answers an HTTPS GET with the caller's public
//! address. [`Echo`] asks one service; [`HttpsEcho`] is the real one (reqwest with rustls, no
//! redirects followed, at most 64 bytes read, a timeout). What is believed from the answers is the
//! firewall check's business ([`crate::firewall`]).

use std::net::Ipv4Addr;
use std::time::Duration;

use async_trait::async_trait;

/// The most bytes an echo service's answer may have.
pub const MAX_ANSWER: usize = 64;

/// Asks an echo service for this server's public address.
#[async_trait]
pub trait Echo: Send + Sync + std::fmt::Debug {
    /// The address `url` reports, or why it reported none. Bounded in time.
    async fn ask(&self, url: &str) -> Result<Ipv4Addr, String>;
}

/// HTTPS GETs with reqwest (rustls): 200 without a redirect, at most 64 bytes that are exactly one
/// IPv4 address (surrounding white space aside).
#[derive(Debug, Clone)]
pub struct HttpsEcho {
    client: reqwest::Client,
    loopback: reqwest::Client,
}

impl HttpsEcho {
    /// A client with a 10 s timeout.
    pub fn new() -> Result<Self, String> {
        let build = |proxy: bool| {
            let b = reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .timeout(Duration::from_secs(10))
                .user_agent("shed-server");
            let b = if proxy { b } else { b.no_proxy() };
            b.build().map_err(|e| format!("the echo client: {e}"))
        };
        Ok(HttpsEcho {
            client: build(true)?,
            // A service on this machine (tests) is never reached through a proxy.
            loopback: build(false)?,
        })
    }
}

/// Reads an echo answer: exactly one IPv4 address (white space around it aside).
pub fn parse_answer(body: &[u8]) -> Result<Ipv4Addr, String> {
    if body.len() > MAX_ANSWER {
        return Err(format!("the answer is longer than {MAX_ANSWER} bytes"));
    }
    let text = std::str::from_utf8(body).map_err(|_| "the answer is not text".to_string())?;
    text.trim()
        .parse::<Ipv4Addr>()
        .map_err(|_| "the answer is not exactly one IPv4 address".to_string())
}

#[async_trait]
impl Echo for HttpsEcho {
    async fn ask(&self, url: &str) -> Result<Ipv4Addr, String> {
        let parsed = reqwest::Url::parse(url).map_err(|e| format!("not a URL: {e}"))?;
        let client = if orca::kit::is_loopback(parsed.as_str()) {
            &self.loopback
        } else {
            &self.client
        };
        let mut resp = client
            .get(parsed)
            .send()
            .await
            .map_err(|e| format!("no answer: {e}"))?;
        let status = resp.status();
        if status.is_redirection() {
            return Err(format!("answered a redirect ({status})"));
        }
        if status != reqwest::StatusCode::OK {
            return Err(format!("answered {status}"));
        }
        let mut body = Vec::new();
        while let Some(chunk) = resp
            .chunk()
            .await
            .map_err(|e| format!("the answer broke off: {e}"))?
        {
            body.extend_from_slice(&chunk);
            if body.len() > MAX_ANSWER {
                return Err(format!("the answer is longer than {MAX_ANSWER} bytes"));
            }
        }
        parse_answer(&body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::{header, StatusCode};
    use axum::response::IntoResponse;
    use axum::routing::get;

    async fn serve() -> String {
        let app = axum::Router::new()
            .route("/ok", get(|| async { "203.0.113.7\n" }))
            .route("/two", get(|| async { "203.0.113.7 203.0.113.8" }))
            .route(
                "/long",
                get(|| async { format!("203.0.113.7{}", " ".repeat(60)) }),
            )
            .route(
                "/redirect",
                get(|| async { (StatusCode::FOUND, [(header::LOCATION, "/ok")]).into_response() }),
            )
            .route(
                "/teapot",
                get(|| async { (StatusCode::IM_A_TEAPOT, "203.0.113.7").into_response() }),
            );
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
        format!("http://{addr}")
    }

    #[tokio::test]
    async fn answers_are_read_by_the_rule() {
        let base = serve().await;
        let e = HttpsEcho::new().unwrap();
        assert_eq!(
            e.ask(&format!("{base}/ok")).await.unwrap(),
            "203.0.113.7".parse::<Ipv4Addr>().unwrap()
        );
        let two = e.ask(&format!("{base}/two")).await.unwrap_err();
        assert!(two.contains("exactly one"), "{two}");
        let long = e.ask(&format!("{base}/long")).await.unwrap_err();
        assert!(long.contains("64 bytes"), "{long}");
        let redirect = e.ask(&format!("{base}/redirect")).await.unwrap_err();
        assert!(redirect.contains("redirect"), "{redirect}");
        let teapot = e.ask(&format!("{base}/teapot")).await.unwrap_err();
        assert!(teapot.contains("418"), "{teapot}");
    }
}
