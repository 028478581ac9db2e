//! The HTTP side: one request with its token and tracing span ([`Client::send`]), the shared retry
//! policy around it ([`Client::call`]), operations followed to `DONE`, and the ONE function that maps
//! Compute Engine's answers onto orca's errors ([`map_error`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use orca_machines::{all_pages, parse_retry_after, Error, Page, Result, RetryPolicy};
use reqwest::Method;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tracing::Instrument as _;

use crate::model::{List, Operation, OperationError};

/// The OAuth scope the driver asks for.
pub(crate) const SCOPE: &str = "https://www.googleapis.com/auth/compute";

/// An authenticated Compute Engine client for one project.
#[derive(Clone)]
pub(crate) struct Client {
    http: reqwest::Client,
    base: String,
    pub project: String,
    pub zone: String,
    tokens: Arc<dyn gcp_auth::TokenProvider>,
    retry: RetryPolicy,
    operation_timeout: Duration,
    request_timeout: Duration,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("base", &self.base)
            .field("project", &self.project)
            .field("zone", &self.zone)
            .finish_non_exhaustive()
    }
}

/// Whether a body was sent with the call.
pub(crate) enum Body<'a> {
    None,
    Json(&'a Value),
}

impl Client {
    pub(crate) fn new(
        config: &crate::Config,
        tokens: Arc<dyn gcp_auth::TokenProvider>,
    ) -> Result<Client> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .user_agent(concat!("orca-gce/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| Error::other(format!("cannot build the HTTP client: {e}")))?;
        Ok(Client {
            http,
            base: config.endpoint.clone(),
            project: config.project.clone(),
            zone: config.zone.clone(),
            tokens,
            retry: config.retry,
            operation_timeout: config.operation_timeout,
            request_timeout: config.request_timeout,
        })
    }

    /// `projects/{project}/zones/{zone}/{rest}`.
    pub(crate) fn zonal(&self, rest: &str) -> String {
        format!("projects/{}/zones/{}/{rest}", self.project, self.zone)
    }

    /// `projects/{project}/global/{rest}`.
    pub(crate) fn global(&self, rest: &str) -> String {
        format!("projects/{}/global/{rest}", self.project)
    }

    async fn token(&self) -> Result<String> {
        match self.tokens.token(&[SCOPE]).await {
            Ok(t) => Ok(t.as_str().to_string()),
            // gcp_auth's messages name what failed (never the key or the token).
            Err(e @ (gcp_auth::Error::Http(..) | gcp_auth::Error::Other(..))) => Err(
                Error::transient(format!("could not reach the token endpoint: {e}")),
            ),
            Err(e) => Err(Error::unauthenticated(format!(
                "could not get an access token: {e}"
            ))),
        }
    }

    /// One request, no retry: the answer's JSON, or the mapped error.
    pub(crate) async fn send<T: DeserializeOwned>(
        &self,
        operation: &'static str,
        method: Method,
        path: &str,
        query: &[(&str, String)],
        body: Body<'_>,
    ) -> Result<T> {
        let span = tracing::info_span!(
            "gce.call",
            provider = "gce",
            operation,
            method = %method,
            path,
            status = tracing::field::Empty,
            duration_ms = tracing::field::Empty,
            request_id = tracing::field::Empty,
        );
        if let Some((_, r)) = query.iter().find(|(k, _)| *k == "requestId") {
            span.record("request_id", r.as_str());
        }
        let started = Instant::now();
        let work = async {
            let token = self.token().await?;
            let timeout = if path.ends_with("/wait") {
                Duration::from_secs(150)
            } else {
                self.request_timeout
            };
            let mut req = self
                .http
                .request(method.clone(), format!("{}/{path}", self.base))
                .bearer_auth(token)
                .timeout(timeout)
                .query(query);
            req = match body {
                Body::None if method == Method::POST => req.body(""),
                Body::None => req,
                Body::Json(v) => req.json(v),
            };
            let resp = req.send().await.map_err(transport_error)?;
            let status = resp.status().as_u16();
            tracing::Span::current().record("status", status);
            let retry_after = resp
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .and_then(parse_retry_after);
            let bytes = resp.bytes().await.map_err(transport_error)?;
            if (200..300).contains(&status) {
                serde_json::from_slice(&bytes)
                    .map_err(|e| Error::other(format!("unreadable answer to {operation}: {e}")))
            } else {
                Err(http_error(status, retry_after, &bytes))
            }
        };
        let result = work.instrument(span.clone()).await;
        span.record("duration_ms", started.elapsed().as_millis() as u64);
        if let Err(e) = &result {
            span.in_scope(|| tracing::debug!(error = %e, "gce call failed"));
        }
        result
    }

    /// [`Client::send`] under the retry policy. Only for calls that are safe to repeat: reads, and
    /// changes that carry a `requestId` (Compute Engine de-duplicates them) or a fingerprint.
    pub(crate) async fn call<T: DeserializeOwned>(
        &self,
        operation: &'static str,
        method: Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<&Value>,
    ) -> Result<T> {
        self.retry
            .retry(operation, || {
                let b = match body {
                    Some(v) => Body::Json(v),
                    None => Body::None,
                };
                self.send(operation, method.clone(), path, query, b)
            })
            .await
    }

    /// Every item of a list call: `maxResults` of `page_size`, then every `pageToken`, each page under
    /// the retry policy. `query` holds the call's own parameters (a `filter`, for example).
    pub(crate) async fn list_all<T: DeserializeOwned>(
        &self,
        operation: &'static str,
        path: &str,
        query: &[(&str, String)],
        page_size: u32,
    ) -> Result<Vec<T>> {
        all_pages(|token| {
            let mut q = query.to_vec();
            q.push(("maxResults", page_size.to_string()));
            if let Some(t) = token {
                q.push(("pageToken", t));
            }
            async move {
                let list: List<T> = self.call(operation, Method::GET, path, &q, None).await?;
                Ok(Page {
                    items: list.items,
                    next: list.next_page_token,
                })
            }
        })
        .await
    }

    /// `GET` that answers `None` on 404.
    pub(crate) async fn get_opt<T: DeserializeOwned>(
        &self,
        operation: &'static str,
        path: &str,
    ) -> Result<Option<T>> {
        match self.call(operation, Method::GET, path, &[], None).await {
            Ok(v) => Ok(Some(v)),
            Err(Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Follows `op` to `DONE` with `operations.wait` (zonal or global, as the operation says).
    pub(crate) async fn wait(&self, mut op: Operation) -> Result<Operation> {
        let started = Instant::now();
        // `operations.wait` is best effort and may answer at once with the operation still running:
        // after such an answer, pause (doubling, up to 5 s) before asking again.
        let mut pause = Duration::from_millis(250);
        while !op.is_done() {
            if started.elapsed() > self.operation_timeout {
                return Err(Error::transient(format!(
                    "operation {} ({}) still {} after {} s",
                    op.name,
                    op.operation_type,
                    op.status,
                    self.operation_timeout.as_secs()
                )));
            }
            let path = match &op.zone {
                Some(z) if !z.is_empty() => format!(
                    "projects/{}/zones/{}/operations/{}/wait",
                    self.project,
                    crate::model::last_segment(z),
                    op.name
                ),
                _ => self.global(&format!("operations/{}/wait", op.name)),
            };
            let asked = Instant::now();
            op = self
                .call("operations.wait", Method::POST, &path, &[], None)
                .await?;
            if !op.is_done() && asked.elapsed() < Duration::from_secs(1) {
                let left = self.operation_timeout.saturating_sub(started.elapsed());
                tokio::time::sleep(pause.min(left)).await;
                pause = (pause * 2).min(Duration::from_secs(5));
            }
        }
        Ok(op)
    }
}

/// A request that never got a complete answer: passing, and for a create ambiguous.
fn transport_error(e: reqwest::Error) -> Error {
    // reqwest's errors name the URL; ours carry no secrets in URLs, but keep the message short.
    let what = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "could not connect"
    } else {
        "connection failed"
    };
    Error::transient(format!("{what}: {}", e.without_url()))
}

/// Compute Engine's error body: `{"error": {"code", "message", "errors": [{"reason", "message"}]}}`.
fn http_error(status: u16, retry_after: Option<Duration>, body: &[u8]) -> Error {
    let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let err = &v["error"];
    let reason = err["errors"][0]["reason"]
        .as_str()
        .or_else(|| err["status"].as_str())
        .unwrap_or_default();
    let message = err["message"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| format!("HTTP {status}"));
    map_error(status, reason, &message, retry_after)
}

/// The error of a finished operation (its first error decides; the others are kept in the message).
pub(crate) fn operation_error(op: &Operation) -> Option<Error> {
    let errors: &[OperationError] = op.error.as_ref().map(|e| e.errors.as_slice())?;
    let first = errors.first()?;
    let message = errors
        .iter()
        .map(|e| format!("{}: {}", e.code, e.message))
        .collect::<Vec<_>>()
        .join("; ");
    Some(map_error(
        op.http_error_status_code.unwrap_or(400),
        &first.code,
        &message,
        None,
    ))
}

/// THE mapping from Compute Engine's answers to orca's errors: the HTTP status, the error's reason
/// (`errors[].reason` of an HTTP error, `error.errors[].code` of an operation) and its message.
pub(crate) fn map_error(
    status: u16,
    reason: &str,
    message: &str,
    retry_after: Option<Duration>,
) -> Error {
    let message = message.to_string();
    match reason {
        "ZONE_RESOURCE_POOL_EXHAUSTED"
        | "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS"
        | "zoneResourcePoolExhausted"
        | "zoneResourcePoolExhaustedWithDetails" => {
            Error::no_stock(String::new(), String::new(), message)
        }
        "QUOTA_EXCEEDED" | "quotaExceeded" => Error::quota(message),
        "rateLimitExceeded" | "userRateLimitExceeded" | "RATE_LIMIT_EXCEEDED" => {
            Error::throttled(retry_after, message)
        }
        "notFound" | "RESOURCE_NOT_FOUND" => Error::not_found(message),
        "alreadyExists" | "RESOURCE_ALREADY_EXISTS" => Error::already_exists(message),
        "conditionNotMet" => Error::other(format!("conditionNotMet: {message}")),
        "resourceNotReady" | "RESOURCE_NOT_READY" => Error::transient(message),
        "invalid"
        | "badRequest"
        | "invalidParameter"
        | "INVALID_FIELD_VALUE"
        | "invalidArgument"
            if status == 400 =>
        {
            Error::invalid("request", message)
        }
        "forbidden" | "insufficientPermissions" | "PERMISSION_DENIED" => {
            Error::permission_denied(message)
        }
        _ => Error::from_http_status(status, message, retry_after),
    }
}

/// A request id: a name-based UUID (version 5 layout, SHA-256) of `parts`, so that the same request
/// repeated, even from another call or process, carries the same id.
pub(crate) fn request_uuid(parts: &[&str]) -> String {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    for p in parts {
        ctx.update(&(p.len() as u64).to_be_bytes());
        ctx.update(p.as_bytes());
    }
    let d = ctx.finish();
    let mut b = [0u8; 16];
    b.copy_from_slice(&d.as_ref()[..16]);
    uuid_string(b)
}

/// A random (version 4) request id: for a call whose retries happen within one call.
pub(crate) fn random_uuid() -> String {
    let mut b = [0u8; 16];
    for x in &mut b {
        *x = fastrand::u8(..);
    }
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    uuid_hex(b)
}

fn uuid_string(mut b: [u8; 16]) -> String {
    b[6] = (b[6] & 0x0f) | 0x50;
    b[8] = (b[8] & 0x3f) | 0x80;
    uuid_hex(b)
}

fn uuid_hex(b: [u8; 16]) -> String {
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// The SHA-256 of `data` in hex (for user data in a request id, never the data itself).
pub(crate) fn sha256_hex(data: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, data)
        .as_ref()
        .iter()
        .map(|x| format!("{x:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use orca_machines::ErrorKind;

    #[test]
    fn error_mapping() {
        let k = |s, r| map_error(s, r, "m", None).kind();
        assert_eq!(k(503, "ZONE_RESOURCE_POOL_EXHAUSTED"), ErrorKind::NoStock);
        assert_eq!(
            k(503, "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS"),
            ErrorKind::NoStock
        );
        assert_eq!(k(403, "QUOTA_EXCEEDED"), ErrorKind::Quota);
        assert_eq!(k(403, "quotaExceeded"), ErrorKind::Quota);
        assert_eq!(k(403, "rateLimitExceeded"), ErrorKind::Throttled);
        assert_eq!(k(429, ""), ErrorKind::Throttled);
        assert_eq!(k(404, "notFound"), ErrorKind::NotFound);
        assert_eq!(k(409, "alreadyExists"), ErrorKind::AlreadyExists);
        assert_eq!(k(401, "required"), ErrorKind::Unauthenticated);
        assert_eq!(k(403, "forbidden"), ErrorKind::PermissionDenied);
        assert_eq!(k(500, "backendError"), ErrorKind::Transient);
        assert_eq!(k(400, "invalid"), ErrorKind::InvalidSpec);
        let e = http_error(
            429,
            Some(Duration::from_secs(2)),
            br#"{"error":{"code":429,"message":"slow down","errors":[{"reason":"rateLimitExceeded","domain":"usageLimits","message":"slow down"}]}}"#,
        );
        assert_eq!(e.retry_after(), Some(Duration::from_secs(2)));
        assert!(e.to_string().contains("slow down"));
    }

    #[test]
    fn operation_errors() {
        let op: Operation = serde_json::from_value(serde_json::json!({
            "name": "op", "status": "DONE", "httpErrorStatusCode": 503,
            "error": {"errors": [{"code": "ZONE_RESOURCE_POOL_EXHAUSTED", "message": "no room"}]}
        }))
        .unwrap();
        let e = operation_error(&op).unwrap();
        assert_eq!(e.kind(), ErrorKind::NoStock);
        assert!(e.to_string().contains("no room"));
        let ok: Operation =
            serde_json::from_value(serde_json::json!({"name": "op", "status": "DONE"})).unwrap();
        assert!(operation_error(&ok).is_none());
    }

    #[test]
    fn request_ids_are_stable_uuids() {
        let a = request_uuid(&["insert", "p", "lab", "vm-1"]);
        assert_eq!(a, request_uuid(&["insert", "p", "lab", "vm-1"]));
        assert_ne!(a, request_uuid(&["insert", "p", "lab", "vm-2"]));
        assert_ne!(
            a,
            request_uuid(&["insert", "plab", "", "vm-1"]),
            "parts are delimited"
        );
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "5");
        assert!(matches!(&a[19..20], "8" | "9" | "a" | "b"));
        let r = random_uuid();
        assert_eq!(&r[14..15], "4");
        assert_ne!(r, random_uuid());
    }
}
