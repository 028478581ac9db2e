//! The calls to Hetzner Cloud's API, its rate-limit pacing, and the ONE function that maps its errors.
//!
//! Answers are read into the driver's own lenient models ([`crate::model`]); every call goes through
//! [`Client::call`] (retry) and [`Client::once`] (one paced, traced attempt), which also read the
//! `RateLimit-*`, `Retry-After` and correlation-id headers of every answer.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use orca_machines::kit::{self, transport_error, Proxy};
use orca_machines::{parse_retry_after, Error, Result, RetryPolicy};
use reqwest::header::HeaderMap;
use reqwest::Method;
use serde::de::DeserializeOwned;
use tokio::time::Instant;

use crate::config::Config;
use crate::model::ErrorBody;
use crate::provider::KIND;

/// One HTTP client for one project, with its pacer.
pub(crate) struct Client {
    http: reqwest::Client,
    base: String,
    config: Config,
    pub(crate) pacer: Pacer,
    pub(crate) retry: RetryPolicy,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("base", &self.base)
            .field("pacer", &self.pacer)
            .finish_non_exhaustive()
    }
}

impl Client {
    pub(crate) fn new(config: &Config) -> Result<Client> {
        let http =
            kit::http_client_with(KIND, config.timeouts, Proxy::for_endpoint(&config.endpoint))?;
        Ok(Client {
            http,
            base: config.endpoint.clone(),
            config: config.clone(),
            pacer: Pacer::new(config.pacing, config.rate_reserve),
            retry: config.retry,
        })
    }

    /// One call through the kit ([`kit::call`]): retried by the shared policy when it fails with a
    /// retryable error, every attempt in the one call span. Only for calls that are safe to repeat
    /// (reads, deletes, power actions; creates guard themselves by name).
    pub(crate) async fn call<T: DeserializeOwned>(
        &self,
        op: &'static str,
        method: Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<&serde_json::Value>,
    ) -> Result<T> {
        kit::call(KIND, op, &self.retry, || {
            self.once(op, method.clone(), path, query, body)
        })
        .await
    }

    /// [`Client::call`] of a `GET` (a read: safe to repeat).
    pub(crate) async fn get<T: DeserializeOwned>(
        &self,
        op: &'static str,
        path: &str,
        query: &[(&str, String)],
    ) -> Result<T> {
        self.call(op, Method::GET, path, query, None).await
    }

    /// [`Client::call`] for a read that can wait: while other calls wait for the rate limit, it lets
    /// them go first, for at most `yield_for` (the poller's reads of running actions, which learn
    /// nothing while the calls that start actions are still queued).
    pub(crate) async fn call_yielding<T: DeserializeOwned>(
        &self,
        op: &'static str,
        path: &str,
        query: &[(&str, String)],
        yield_for: Duration,
    ) -> Result<T> {
        kit::call(KIND, op, &self.retry, || {
            self.attempt(op, Method::GET, path, query, None, yield_for)
        })
        .await
    }

    /// One attempt, inside its call span: paced, its request, status and correlation id recorded,
    /// its headers observed, its error mapped.
    pub(crate) async fn once<T: DeserializeOwned>(
        &self,
        op: &'static str,
        method: Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<&serde_json::Value>,
    ) -> Result<T> {
        self.attempt(op, method, path, query, body, Duration::ZERO)
            .await
    }

    /// [`Client::once`], letting calls that wait for the rate limit go first for at most `yield_for`.
    async fn attempt<T: DeserializeOwned>(
        &self,
        op: &'static str,
        method: Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<&serde_json::Value>,
        yield_for: Duration,
    ) -> Result<T> {
        kit::record_request(method.as_str(), path);
        let (paced, mut ticket) = self.pacer.before(yield_for).await;
        kit::record_waited(paced);
        let mut req = self
            .http
            .request(method, format!("{}{}", self.base, path))
            .bearer_auth(self.config.token_value());
        if !query.is_empty() {
            req = req.query(query);
        }
        if let Some(b) = body {
            req = req.json(b);
        }
        let resp = match req.send().await {
            Ok(r) => r,
            Err(e) => {
                self.pacer.observe(&mut ticket, None, false);
                return Err(transport_error(e));
            }
        };
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        self.pacer
            .observe(&mut ticket, Some(&headers), status == 429);
        kit::record_status(status);
        if let Some(id) = headers
            .get("x-correlation-id")
            .or_else(|| headers.get("x-request-id"))
            .and_then(|v| v.to_str().ok())
        {
            kit::record_request_id(id);
        }
        let bytes = resp.bytes().await.map_err(transport_error)?;
        if (200..300).contains(&status) {
            serde_json::from_slice::<T>(&bytes).map_err(|e| {
                Error::other(format!("unexpected answer to {op} (HTTP {status}): {e}"))
                    .with_source(e)
            })
        } else {
            // Hetzner's words may repeat part of the token (its rate limit names the token it
            // counts): they say no more of it than that it was there.
            let said =
                kit::hide_secret(&String::from_utf8_lossy(&bytes), self.config.token_value());
            Err(map_error(status, said.as_bytes(), &headers))
        }
    }
}

/// An error Hetzner Cloud answered: the HTTP status (none for an action that failed), the error
/// code and the cloud's words. Kept as the source of the driver's [`Error`], so that a caller can
/// read what the cloud said (`std::error::Error::source`, then `downcast_ref::<ApiError>()`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    status: Option<u16>,
    code: String,
    message: String,
}

impl ApiError {
    /// The HTTP status of the answer; `None` for the error of an action that failed.
    pub fn status(&self) -> Option<u16> {
        self.status
    }

    /// Hetzner's error code (`resource_unavailable`, `locked`, ...); empty when the answer had none.
    pub fn code(&self) -> &str {
        &self.code
    }

    /// The cloud's words.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.status {
            Some(s) => write!(
                f,
                "Hetzner Cloud answered {s} {}: {}",
                self.code, self.message
            ),
            None => write!(
                f,
                "Hetzner Cloud action failed, {}: {}",
                self.code, self.message
            ),
        }
    }
}

impl std::error::Error for ApiError {}

fn header_f64(headers: &HeaderMap, name: &str) -> Option<f64> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|v| v.is_finite())
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}

/// How long until the project may make one more request, from `RateLimit-*` headers: the time the
/// bucket needs per request (reset time over missing requests).
fn wait_from_rate_headers(headers: &HeaderMap) -> Option<Duration> {
    let limit = header_f64(headers, "ratelimit-limit")?;
    let remaining = header_f64(headers, "ratelimit-remaining")?;
    let reset = header_f64(headers, "ratelimit-reset")?;
    if remaining >= 1.0 {
        return Some(Duration::ZERO);
    }
    let until_full = (reset - unix_now()).max(0.0);
    let per_request = until_full / (limit - remaining).max(1.0);
    Some(Duration::from_secs_f64(per_request.clamp(0.01, 3600.0)))
}

/// The slowest refill rate an answer allows: `RateLimit-Remaining` is whole requests (rounded down)
/// and `RateLimit-Reset` whole seconds (rounded up), and the answer was made no earlier than the
/// request was sent, `until_full` before the reset. So the bucket missed more than
/// `limit - remaining - 1` requests and filled them in at most `until_full`: a rate never above the
/// true one, whatever the rounding, close to it when the deficit is large. `None` when the answer
/// bounds nothing (a nearly full bucket).
fn refill_at_least(limit: f64, remaining: f64, until_full: f64) -> Option<f64> {
    let missing = limit - remaining - 1.0;
    (missing >= 1.0 && until_full > 0.0).then(|| (missing / until_full).min(limit))
}

/// THE error mapping: Hetzner's status, error code and headers onto [`Error`], keeping the code
/// ([`Error::code`]) so that the driver recognises its errors by code, never by their words. Messages
/// are the cloud's code and words only (never a header; the caller hides the token in the body).
pub(crate) fn map_error(status: u16, body: &[u8], headers: &HeaderMap) -> Error {
    let retry_after = headers
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(parse_retry_after)
        .or_else(|| wait_from_rate_headers(headers));
    match serde_json::from_slice::<ErrorBody>(body) {
        Ok(b) => {
            let field = b.error.field();
            classify(
                &b.error.code,
                &b.error.message,
                field,
                Some(status),
                retry_after,
            )
        }
        Err(_) => {
            let text: String = String::from_utf8_lossy(body).chars().take(200).collect();
            Error::from_http_status(status, text, retry_after)
        }
    }
}

/// What Hetzner's error `code` means (the codes of the API reference's error table and of the
/// server calls: `placement_error`, `invalid_server_type`, ...), for an error answer (`status`) or
/// a failed action (`None`). The code is kept in the error's context.
pub(crate) fn classify(
    code: &str,
    message: &str,
    field: Option<String>,
    status: Option<u16>,
    retry_after: Option<Duration>,
) -> Error {
    let words = if code.is_empty() {
        message.to_string()
    } else {
        format!("{code}: {message}")
    };
    let e = match code {
        "unauthorized" => Error::unauthenticated(words),
        "forbidden" | "protected" | "token_readonly" => Error::permission_denied(words),
        "not_found" => Error::not_found(message),
        "uniqueness_error" => Error::already_exists(message),
        // Capacity: the type cannot be placed in the location now ("error during placement"). The
        // error names neither: the provider fills in the type and location of the call it made.
        "resource_unavailable" | "placement_error" => {
            Error::no_stock(String::new(), String::new(), words)
        }
        "resource_limit_exceeded" => Error::quota(words),
        "rate_limit_exceeded" => Error::throttled(retry_after, words),
        "invalid_server_type" => Error::invalid("machine_type", words),
        "invalid_input" | "json_error" => {
            Error::invalid(field.unwrap_or_else(|| "request".into()), words)
        }
        // An action of the resource runs: the lock lasts as long as that action, so the answer is
        // waited for as long as the policy's busy_wait allows, not within its few quick retries.
        "locked" => Error::busy(words),
        "conflict" | "service_error" | "maintenance" | "timeout" | "server_error"
        | "unavailable" | "bad_gateway" | "robot_unavailable" => Error::transient(words),
        _ => match status {
            Some(status) if status != 409 => Error::from_http_status(status, words, retry_after),
            _ => Error::other(words),
        },
    };
    let e = e.with_source(ApiError {
        status,
        code: code.to_string(),
        message: message.to_string(),
    });
    if code.is_empty() {
        e
    } else {
        e.with_code(code)
    }
}

/// A request taken from the pacer's model bucket by a call whose answer is not observed yet. Dropped
/// unobserved (the call was cancelled), it gives the request back, so that cancelled calls cannot
/// shrink the model's budget for good.
pub(crate) struct Ticket<'a> {
    pacer: &'a Pacer,
    open: bool,
    /// The Unix time at which the request was let go: its answer was made no earlier.
    sent: f64,
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        if self.open {
            self.open = false;
            self.pacer.settle();
        }
    }
}

/// A call counted among those waiting for the refill; dropped (its turn came, or the call was
/// cancelled), it no longer counts.
struct Queued<'a> {
    pacer: &'a Pacer,
    counted: bool,
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        if self.counted {
            self.counted = false;
            let mut b = self.pacer.lock();
            b.queued = b.queued.saturating_sub(1);
        }
    }
}

/// Paces calls from the `RateLimit-*` headers: a model of the project's token bucket (Hetzner's
/// 3,600 requests an hour, refilled continuously), kept from the last answer and the requests made
/// since. A call that would take the bucket under the reserve waits for the refill instead.
pub(crate) struct Pacer {
    enabled: bool,
    reserve_share: f64,
    state: Mutex<Bucket>,
    waits: AtomicU64,
    waited_us: AtomicU64,
}

#[derive(Debug)]
struct Bucket {
    known: bool,
    /// Calls that took a request from the model and whose answer has not been seen yet.
    outstanding: f64,
    /// Calls waiting for the refill that do not yield (see [`Pacer::before`]).
    queued: usize,
    limit: f64,
    tokens: f64,
    rate: f64,
    at: Instant,
}

impl std::fmt::Debug for Pacer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pacer")
            .field("enabled", &self.enabled)
            .field("reserve_share", &self.reserve_share)
            .finish_non_exhaustive()
    }
}

impl Pacer {
    fn new(enabled: bool, reserve_share: f64) -> Pacer {
        Pacer {
            enabled,
            reserve_share,
            state: Mutex::new(Bucket {
                known: false,
                outstanding: 0.0,
                queued: 0,
                limit: 3600.0,
                tokens: 3600.0,
                rate: 1.0,
                at: Instant::now(),
            }),
            waits: AtomicU64::new(0),
            waited_us: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Bucket> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes one request from the model bucket, first waiting while that would take it under the
    /// reserve, and, for at most `yield_for`, while other calls wait so. A waiter looks again at
    /// least once a second, so that a better estimate of the refill rate (from later answers)
    /// shortens its wait. Answers how long it waited, and the ticket that holds the request until
    /// its answer is observed (or the call is dropped).
    async fn before(&self, yield_for: Duration) -> (Duration, Ticket<'_>) {
        let ticket = |open| Ticket {
            pacer: self,
            open,
            sent: unix_now(),
        };
        if !self.enabled {
            return (Duration::ZERO, ticket(false));
        }
        let started = Instant::now();
        let mut queue = Queued {
            pacer: self,
            counted: false,
        };
        let mut waited = false;
        loop {
            let wait = {
                let mut b = self.lock();
                let now = Instant::now();
                if b.known {
                    b.tokens = (b.tokens + b.rate * (now - b.at).as_secs_f64()).min(b.limit);
                    b.at = now;
                }
                let reserve = (b.limit * self.reserve_share).ceil().max(0.0);
                let yielding = b.queued > 0 && now - started < yield_for;
                if !yielding && (!b.known || b.tokens - 1.0 >= reserve || b.rate <= 0.0) {
                    b.tokens -= 1.0;
                    b.outstanding += 1.0;
                    None
                } else {
                    if yield_for.is_zero() && !queue.counted {
                        queue.counted = true;
                        b.queued += 1;
                    }
                    // A yielding call looks again once a request has refilled.
                    let short = if yielding {
                        1.0
                    } else {
                        reserve + 1.0 - b.tokens
                    };
                    Some(Duration::from_secs_f64((short / b.rate).min(1.0)))
                }
            };
            let Some(w) = wait else { break };
            if !waited {
                waited = true;
                self.waits.fetch_add(1, Ordering::Relaxed);
            }
            tokio::time::sleep(w.max(Duration::from_millis(1))).await;
        }
        drop(queue);
        if !waited {
            return (Duration::ZERO, ticket(true));
        }
        let wait = started.elapsed();
        self.waited_us
            .fetch_add(wait.as_micros() as u64, Ordering::Relaxed);
        tracing::debug!(
            wait_ms = wait.as_millis() as u64,
            "paced for the project's rate limit"
        );
        (wait, ticket(true))
    }

    /// A call that took a request is over: it no longer counts as outstanding.
    fn settle(&self) {
        let mut b = self.lock();
        b.outstanding = (b.outstanding - 1.0).max(0.0);
    }

    /// Learns the bucket from an answer's `RateLimit-*` headers (`None`: the call got no answer;
    /// `refused`: the cloud answered 429), and closes the call's ticket.
    fn observe(&self, ticket: &mut Ticket<'_>, headers: Option<&HeaderMap>, refused: bool) {
        if ticket.open {
            ticket.open = false;
            self.settle();
        }
        let Some(headers) = headers else { return };
        let (Some(limit), Some(remaining)) = (
            header_f64(headers, "ratelimit-limit"),
            header_f64(headers, "ratelimit-remaining"),
        ) else {
            return;
        };
        if limit <= 0.0 {
            return;
        }
        let bound = header_f64(headers, "ratelimit-reset")
            .and_then(|reset| refill_at_least(limit, remaining, reset - ticket.sent));
        let mut b = self.lock();
        if !b.known || b.limit != limit {
            b.rate = limit / 3600.0;
        }
        if let Some(bound) = bound {
            // Each answer bounds the refill rate from below; the largest bound seen is the closest.
            // A refusal means the model ran ahead of the cloud (the cloud's rate changed, or the
            // clocks disagree): only that answer's bound is kept.
            b.rate = if refused { bound } else { b.rate.max(bound) };
        }
        // The cloud's count, less the calls that took a request and are not answered yet (some of
        // them may be counted already: that errs on the slow side).
        let now = Instant::now();
        b.tokens = remaining - b.outstanding;
        b.limit = limit;
        b.at = now;
        b.known = true;
    }

    /// How many calls waited for the rate limit, and how long in all.
    pub(crate) fn stats(&self) -> (u64, Duration) {
        (
            self.waits.load(Ordering::Relaxed),
            Duration::from_micros(self.waited_us.load(Ordering::Relaxed)),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use orca_machines::ErrorKind;
    use reqwest::header::HeaderValue;

    fn body(code: &str, message: &str) -> Vec<u8> {
        serde_json::to_vec(
            &serde_json::json!({"error": {"code": code, "message": message, "details": {}}}),
        )
        .unwrap()
    }

    #[test]
    fn maps_hetzner_codes_by_code_alone_and_keeps_the_code() {
        let h = HeaderMap::new();
        let e = |s: u16, c: &str, m: &str| map_error(s, &body(c, m), &h);
        let k = |s: u16, c: &str, m: &str| e(s, c, m).kind();
        assert_eq!(
            k(401, "unauthorized", "unable to authenticate"),
            ErrorKind::Unauthenticated
        );
        assert_eq!(k(403, "forbidden", "no"), ErrorKind::PermissionDenied);
        assert_eq!(k(403, "token_readonly", "no"), ErrorKind::PermissionDenied);
        assert_eq!(k(404, "not_found", "server not found"), ErrorKind::NotFound);
        assert_eq!(
            k(409, "uniqueness_error", "name used"),
            ErrorKind::AlreadyExists
        );
        assert_eq!(
            k(412, "resource_unavailable", "error during placement"),
            ErrorKind::NoStock
        );
        assert_eq!(
            k(422, "placement_error", "error during placement"),
            ErrorKind::NoStock
        );
        // A type that is never offered in a location is bad input, whatever its words say: the
        // words are never matched.
        let unsupported = e(
            422,
            "invalid_input",
            "server type cax11 is not available in this location",
        );
        assert_eq!(unsupported.kind(), ErrorKind::InvalidSpec);
        assert_eq!(
            k(422, "invalid_server_type", "server type cx22 is deprecated"),
            ErrorKind::InvalidSpec
        );
        assert_eq!(
            k(403, "resource_limit_exceeded", "server limit"),
            ErrorKind::Quota
        );
        assert_eq!(k(400, "invalid_input", "bad"), ErrorKind::InvalidSpec);
        assert_eq!(k(423, "locked", "busy"), ErrorKind::Busy);
        assert_eq!(k(409, "conflict", "changed"), ErrorKind::Transient);
        assert_eq!(k(503, "unavailable", "x"), ErrorKind::Transient);
        assert_eq!(k(409, "server_not_stopped", "x"), ErrorKind::Other);
        assert_eq!(k(503, "", "x"), ErrorKind::Transient);
        assert_eq!(
            map_error(502, b"<html>bad gateway</html>", &h).kind(),
            ErrorKind::Transient
        );
        // A code the driver does not know falls back on the status, and is kept.
        let new = e(418, "teapot_overheated", "new code");
        assert_eq!(
            (new.kind(), new.code()),
            (ErrorKind::Other, Some("teapot_overheated"))
        );
        let stock = e(412, "resource_unavailable", "error during placement");
        assert_eq!(stock.code(), Some("resource_unavailable"));
    }

    #[test]
    fn throttled_waits_from_headers() {
        let mut h = HeaderMap::new();
        h.insert("retry-after", HeaderValue::from_static("3"));
        let e = map_error(429, &body("rate_limit_exceeded", "slow"), &h);
        assert_eq!(e.retry_after(), Some(Duration::from_secs(3)));
        let mut h = HeaderMap::new();
        h.insert("ratelimit-limit", HeaderValue::from_static("3600"));
        h.insert("ratelimit-remaining", HeaderValue::from_static("0"));
        let reset = (unix_now() + 3600.0).ceil() as u64;
        h.insert(
            "ratelimit-reset",
            HeaderValue::from_str(&reset.to_string()).unwrap(),
        );
        let e = map_error(429, &body("rate_limit_exceeded", "slow"), &h);
        let after = e.retry_after().unwrap();
        assert!(
            after > Duration::from_millis(900) && after < Duration::from_millis(1100),
            "{after:?}"
        );
    }

    #[tokio::test]
    async fn a_cancelled_call_gives_its_request_back_to_the_pacer() {
        use orca_fakes::{Fault, Rule};
        let fake = orca_fakes::hetzner::FakeHetzner::start().await.unwrap();
        let config = Config::builder()
            .token(fake.token())
            .endpoint(fake.url())
            .retry(RetryPolicy::NEVER)
            .build()
            .unwrap();
        let c = Client::new(&config).unwrap();
        let list =
            || c.once::<serde_json::Value>("locations.list", Method::GET, "/locations", &[], None);
        list().await.unwrap();
        // Callers that give up on a slow call (a timeout around it, an aborted task) drop it before
        // its answer: the request it took from the model bucket must not stay taken for ever.
        fake.control().inject(Rule::new(
            Some(Method::GET),
            "/locations",
            Fault::Latency(Duration::from_secs(5)),
            3,
        ));
        for _ in 0..3 {
            let r = tokio::time::timeout(Duration::from_millis(100), list()).await;
            assert!(r.is_err(), "the call was cut short");
        }
        assert_eq!(c.pacer.lock().outstanding, 0.0);
        fake.control().clear_faults();
        list().await.unwrap();
        assert_eq!(c.pacer.lock().outstanding, 0.0);
    }

    /// The headers of an answer from a bucket of `limit` holding `tokens` (a fraction: the cloud
    /// counts finer than it tells), refilled at `rate` a second: Remaining rounded down, Reset the
    /// Unix second at which it is full, rounded up.
    fn answer(limit: u32, tokens: f64, rate: f64) -> HeaderMap {
        let mut h = HeaderMap::new();
        let reset = (unix_now() + (f64::from(limit) - tokens) / rate).ceil() as u64;
        for (k, v) in [
            ("ratelimit-limit", limit.to_string()),
            ("ratelimit-remaining", (tokens.floor() as u64).to_string()),
            ("ratelimit-reset", reset.to_string()),
        ] {
            h.insert(k, HeaderValue::from_str(&v).unwrap());
        }
        h
    }

    #[tokio::test]
    async fn the_refill_rate_learnt_from_rounded_headers_is_close_and_never_above_the_true_one() {
        let p = Pacer::new(true, 0.0);
        // Answers over a draining bucket of 100 refilled at 20 a second, whose whole-second resets
        // are rounded up by anything from nothing to a second; then one from a nearly full bucket,
        // whose few missing requests (2.5, told as 3) over a reset rounded up say little.
        let mut tokens: Vec<f64> = (0..40).map(|i| 95.0 - 2.3 * f64::from(i)).collect();
        tokens.push(97.5);
        for t in tokens {
            let (_, mut ticket) = p.before(Duration::ZERO).await;
            p.observe(&mut ticket, Some(&answer(100, t, 20.0)), false);
            let rate = p.lock().rate;
            assert!(
                rate <= 20.0,
                "the learnt rate {rate} runs ahead of the bucket's 20/s"
            );
        }
        let rate = p.lock().rate;
        assert!(
            rate >= 19.4,
            "the learnt rate {rate} is far below the bucket's 20/s"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn pacer_spaces_calls_at_the_refill_rate_under_the_reserve() {
        let p = Pacer::new(true, 0.0);
        let (first, mut ticket) = p.before(Duration::ZERO).await;
        assert_eq!(first, Duration::ZERO, "unknown bucket: no wait");
        // The answer to that call says: 2 of 100 left, full in 98 s (1 a second).
        let mut h = HeaderMap::new();
        h.insert("ratelimit-limit", HeaderValue::from_static("100"));
        h.insert("ratelimit-remaining", HeaderValue::from_static("2"));
        let reset = (unix_now() + 98.0).ceil() as u64;
        h.insert(
            "ratelimit-reset",
            HeaderValue::from_str(&reset.to_string()).unwrap(),
        );
        p.observe(&mut ticket, Some(&h), false);
        assert_eq!(p.before(Duration::ZERO).await.0, Duration::ZERO);
        assert_eq!(p.before(Duration::ZERO).await.0, Duration::ZERO);
        let w = p.before(Duration::ZERO).await.0;
        assert!(
            w > Duration::from_millis(700) && w <= Duration::from_millis(1200),
            "{w:?}"
        );
        assert_eq!(p.stats().0, 1);
    }
}
