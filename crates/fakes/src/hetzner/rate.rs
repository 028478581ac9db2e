//! The bearer token check and the per-project rate limit (a token bucket refilled continuously, as
//! Hetzner's), with the `RateLimit-*` headers on every answer. The bucket refills in tokio's time, as
//! the actions run ([`Bucket`]).

use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::{lock, ApiError, Shared};
use crate::bucket::Bucket;

/// Hetzner's rate limit on the shared bucket: its headers.
impl Bucket {
    /// `RateLimit-Reset`: the Unix time at which the bucket is full again.
    fn reset(&self) -> u64 {
        let missing = self.limit - self.tokens;
        let secs = if missing <= 0.0 || self.refill <= 0.0 {
            0.0
        } else {
            missing / self.refill
        };
        (unix_now() + secs).ceil() as u64
    }
    fn headers(&self) -> [(&'static str, String); 3] {
        [
            ("RateLimit-Limit", (self.limit as u32).to_string()),
            (
                "RateLimit-Remaining",
                (self.tokens.max(0.0).floor() as u64).to_string(),
            ),
            ("RateLimit-Reset", self.reset().to_string()),
        ]
    }
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}

/// Checks the bearer token, spends one request of the rate limit, and adds the rate-limit headers.
pub(super) async fn guard(State(state): State<Shared>, req: Request, next: Next) -> Response {
    let auth = req
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let (verdict, headers) = {
        let mut s = lock(&state);
        // Actions whose time is up end before the request sees the project.
        s.settle();
        s.bucket.refill();
        let ok_token = auth.as_deref() == Some(&format!("Bearer {}", s.token));
        let verdict = if !ok_token {
            Some(ApiError(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "unable to authenticate".into(),
            ))
        } else if s.bucket.tokens < 1.0 {
            s.rate_limited += 1;
            // Hetzner's words name the token counted, by its first half.
            let half: String = s.token.chars().take(s.token.chars().count() / 2).collect();
            Some(ApiError(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limit_exceeded",
                format!(
                    "Limit of '{}' requests per hour for token '{half}...' reached",
                    s.bucket.limit as u64
                ),
            ))
        } else {
            s.bucket.tokens -= 1.0;
            s.low_water = s.low_water.min(s.bucket.tokens);
            None
        };
        (verdict, s.bucket.headers())
    };
    let mut response = match verdict {
        Some(e) => e.into_response(),
        None => next.run(req).await,
    };
    crate::control::add_headers(&mut response, &headers);
    response
}
