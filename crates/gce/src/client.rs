//! The HTTP side: one request with its token and tracing span ([`Client::send`]), the shared retry
//! policy around it ([`Client::call`]), every page of a listing ([`Client::list_all`]), operations
//! followed to `DONE` ([`Client::wait`]), and the ONE function that maps Compute Engine's answers onto
//! orca's errors ([`map_error`]), keeping the cloud's code and the cause in the error's context.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use orca_machines::kit::{
    self, Polled, Proxy, QuotaPacer, Settled, Timeouts, UtcClock, transport_error,
};
use orca_machines::{Error, Page, Result, RetryPolicy, all_pages, parse_retry_after};
use reqwest::Method;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::config::ConfigKey;
use crate::model::{List, Operation, OperationError, last_segment};
use crate::provider::KIND;

/// The longest wait for a connection, unless `ORCA_CONNECT_TIMEOUT` says otherwise.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The OAuth scope the driver asks for.
pub(crate) const SCOPE: &str = "https://www.googleapis.com/auth/compute";

/// An authenticated Compute Engine client for one project.
#[derive(Clone)]
pub(crate) struct Client {
    http: reqwest::Client,
    base: String,
    pub project: String,
    tokens: Arc<dyn gcp_auth::TokenProvider>,
    pub retry: RetryPolicy,
    operation_timeout: Duration,
    request_timeout: Duration,
    /// The first pause after an operation `wait` answered at once unfinished.
    first_pause: Duration,
    /// The project's rate quotas, one a group ([`group`]), shared by the clones.
    quotas: Arc<QuotaPacer>,
}

/// Compute Engine's quota groups of the calls the driver makes: changes (`default`, "Queries"), reads,
/// lists and operation reads (cloud.google.com, "Compute Engine rate quotas"), each counted apart.
const GROUPS: usize = 4;

/// The interval in which Compute Engine counts a rate quota: the wall clock's minutes.
const QUOTA_INTERVAL: Duration = Duration::from_secs(60);

/// The quota group of `operation` (named `<resource>.<method>`), sent as `method`.
fn group(operation: &str, method: &Method) -> usize {
    if operation.starts_with("operations.") {
        3
    } else if operation.ends_with(".list") || operation.ends_with(".aggregatedList") {
        2
    } else if *method == Method::GET {
        1
    } else {
        0
    }
}

/// The codes of a refusal over a rate quota (a 403; not `RESOURCE_OPERATION_RATE_EXCEEDED`, which is
/// one resource's own rate).
const RATE_LIMITED: &[&str] = &[
    "rateLimitExceeded",
    "userRateLimitExceeded",
    "RATE_LIMIT_EXCEEDED",
];

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("base", &self.base)
            .field("project", &self.project)
            .finish_non_exhaustive()
    }
}

/// Whether a body was sent with the call.
#[derive(Clone, Copy)]
pub(crate) enum Body<'a> {
    None,
    Json(&'a Value),
}

impl<'a> Body<'a> {
    fn of(body: Option<&'a Value>) -> Self {
        body.map_or(Body::None, Body::Json)
    }
}

/// An error answer of the Compute Engine API (or a failed operation), kept as the cause of the orca
/// error it maps to: the HTTP status, the cloud's code (`errors[].reason` of an answer, `errors[].code`
/// of an operation) and its message. Never holds a credential.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// The HTTP status (of the answer, or the operation's `httpErrorStatusCode`).
    pub status: u16,
    /// The cloud's code.
    pub code: String,
    /// The cloud's message.
    pub message: String,
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HTTP {} {}: {}", self.status, self.code, self.message)
    }
}

impl std::error::Error for ApiError {}

impl Client {
    pub(crate) fn new(
        config: &crate::Config,
        tokens: Arc<dyn gcp_auth::TokenProvider>,
    ) -> Result<Client> {
        // Timeouts are set per request (an operation `wait` answers after up to two minutes), so the
        // client has none of its own, whatever ORCA_REQUEST_TIMEOUT says (that is `request_timeout`).
        let timeouts = Timeouts::resolve(
            None,
            None,
            &config.client,
            Timeouts::new(CONNECT_TIMEOUT, None),
        );
        let timeouts = Timeouts::new(timeouts.connect, None);
        let http = kit::http_client_with(KIND, timeouts, Proxy::for_endpoint(&config.endpoint))?;
        Ok(Client {
            http,
            base: config.endpoint.clone(),
            project: config.project.clone(),
            tokens,
            retry: config.retry,
            operation_timeout: config.operation_timeout,
            request_timeout: config.request_timeout,
            first_pause: config.poll_interval,
            // Compute Engine's minutes start at second :00 UTC, the same for every client.
            quotas: Arc::new(QuotaPacer::synchronized(
                GROUPS,
                QUOTA_INTERVAL,
                config.rate_quota,
                config.clock.unwrap_or_else(UtcClock::system),
            )),
        })
    }

    /// `projects/{project}/zones/{zone}/{rest}`.
    pub(crate) fn zonal(&self, zone: &str, rest: &str) -> String {
        format!("projects/{}/zones/{zone}/{rest}", self.project)
    }

    /// `projects/{project}/global/{rest}`.
    pub(crate) fn global(&self, rest: &str) -> String {
        format!("projects/{}/global/{rest}", self.project)
    }

    /// `projects/{project}/aggregated/{rest}`.
    pub(crate) fn aggregated(&self, rest: &str) -> String {
        format!("projects/{}/aggregated/{rest}", self.project)
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

    /// One attempt, inside its call span ([`kit::attempt`]): the request, its status and its
    /// `requestId` recorded; the answer's JSON, or the mapped error.
    async fn send<T: DeserializeOwned>(
        &self,
        operation: &'static str,
        method: Method,
        path: &str,
        query: &[(&str, String)],
        body: Body<'_>,
    ) -> Result<T> {
        kit::record_request(method.as_str(), path);
        if let Some((_, r)) = query.iter().find(|(k, _)| *k == "requestId") {
            kit::record_request_id(r);
        }
        let asked = tokio::time::Instant::now();
        let (_, ticket) = self.quotas.before(group(operation, &method)).await;
        let token = self.token().await?;
        kit::record_waited(asked.elapsed());
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
        kit::record_status(status);
        let retry_after = resp
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(parse_retry_after);
        let bytes = resp.bytes().await.map_err(transport_error)?;
        if (200..300).contains(&status) {
            ticket.settle(Settled::Counted);
            return serde_json::from_slice(&bytes).map_err(|e| {
                Error::other(format!("unreadable answer to {operation}")).with_source(e)
            });
        }
        let e = http_error(status, retry_after, &bytes);
        if let Some(e) = missing_project(status, path, &e, &self.project) {
            ticket.settle(Settled::Counted);
            return Err(e);
        }
        // Compute Engine refuses over a rate quota with 403 `rateLimitExceeded`; a 429 is a
        // passing "too many requests", retried as any other.
        if status != 403 || !has_code(&e, RATE_LIMITED) {
            ticket.settle(Settled::Counted);
            return Err(e);
        }
        // Over a rate quota: the group holds its calls until its interval is over, and the error
        // says how long that is.
        let how = retry_after.map_or(Settled::Refused, Settled::RefusedFor);
        let hold = ticket.settle(how);
        Err(http_error(status, hold.or(retry_after), &bytes))
    }

    /// One call through the kit ([`kit::call`]): [`Client::send`] under the retry policy, every
    /// attempt in the one call span. Only for calls that are safe to repeat: reads, and changes
    /// that carry a `requestId` (Compute Engine de-duplicates them) or a fingerprint.
    pub(crate) async fn call<T: DeserializeOwned>(
        &self,
        operation: &'static str,
        method: Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<&Value>,
    ) -> Result<T> {
        kit::call(KIND, operation, &self.retry, || {
            self.send(operation, method.clone(), path, query, Body::of(body))
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
        self.pages(operation, path, query, page_size, |list: List<T>| {
            Ok(Page {
                items: list.items,
                next: list.next_page_token,
            })
        })
        .await
    }

    /// Every page of a list call, each answer turned into its items by `page`.
    pub(crate) async fn pages<A: DeserializeOwned, T>(
        &self,
        operation: &'static str,
        path: &str,
        query: &[(&str, String)],
        page_size: u32,
        page: impl Fn(A) -> Result<Page<T>>,
    ) -> Result<Vec<T>> {
        let page = &page;
        all_pages(|token| {
            let mut q = query.to_vec();
            q.push(("maxResults", page_size.to_string()));
            if let Some(t) = token {
                q.push(("pageToken", t));
            }
            async move {
                let answer: A = self.call(operation, Method::GET, path, &q, None).await?;
                page(answer)
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

    /// Follows `op` to `DONE` with `operations.wait` (zonal or global, as the operation says), by
    /// the kit's [`kit::poll_with`].
    ///
    /// `operations.wait` is a long poll: Compute Engine holds it until the operation ends or about
    /// two minutes pass, so it is asked again at once after a long answer. It is best effort and may
    /// answer at once with the operation still running: only such an answer (back within a second,
    /// unfinished) is followed by a pause, the poll interval doubling up to 5 s. A fixed pause before
    /// each call would add its length to every long-running operation for nothing.
    pub(crate) async fn wait(&self, op: Operation) -> Result<Operation> {
        if op.is_done() {
            return Ok(op);
        }
        let what = format!("operation {} ({})", op.name, op.operation_type);
        let path = match &op.zone {
            Some(z) if !z.is_empty() => {
                self.zonal(last_segment(z), &format!("operations/{}/wait", op.name))
            }
            _ => self.global(&format!("operations/{}/wait", op.name)),
        };
        let path = &path;
        // The pause after the next early answer (in microseconds, shared with the steps).
        let pause = &AtomicU64::new(self.first_pause.as_micros() as u64);
        kit::poll_with(&what, self.operation_timeout, || async move {
            let asked = tokio::time::Instant::now();
            let op: Operation = self
                .call("operations.wait", Method::POST, path, &[], None)
                .await?;
            Ok(if op.is_done() {
                Polled::Done(op)
            } else if asked.elapsed() < Duration::from_secs(1) {
                let early = Duration::from_micros(pause.load(Ordering::Relaxed));
                let next = (early * 2).min(Duration::from_secs(5));
                pause.store(next.as_micros() as u64, Ordering::Relaxed);
                Polled::Again(early)
            } else {
                Polled::Again(Duration::ZERO)
            })
        })
        .await
    }

    /// Follows `op` to its end and answers its error, if it failed.
    pub(crate) async fn finish(&self, op: Operation, what: &'static str) -> Result<Operation> {
        let done = self.wait(op).await?;
        match operation_error(&done) {
            Some(e) => Err(e.with_operation(what)),
            None => Ok(done),
        }
    }
}

/// The settings error of a 404 saying that the project of `path` does not exist ("The resource
/// 'projects/<id>' was not found", answered to any call into it): never that a machine is gone,
/// which a delete would take for done and a read for none. The machines' project is
/// `ORCA_GCE_PROJECT`; the only other project the driver reads is the images'.
fn missing_project(status: u16, path: &str, e: &Error, project: &str) -> Option<Error> {
    let asked = path.strip_prefix("projects/")?.split('/').next()?;
    let whole = format!("The resource 'projects/{asked}' was not found");
    if status != 404 || !e.to_string().contains(&whole) {
        return None;
    }
    let key = if asked == project {
        ConfigKey::Project
    } else {
        ConfigKey::ImageProject
    };
    Some(Error::settings(
        [key.as_str()],
        format!("project {asked}: {whole} (Compute Engine)"),
    ))
}

/// Compute Engine's error body: `{"error": {"code", "message", "status", "errors": [{"reason",
/// "domain", "message"}], "details": [...]}}`. The code is the first `errors[].reason`, else the
/// `reason` of an `ErrorInfo` detail, else the `status`.
pub(crate) fn http_error(status: u16, retry_after: Option<Duration>, body: &[u8]) -> Error {
    let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let err = &v["error"];
    let info = err["details"].as_array().and_then(|d| {
        d.iter()
            .find(|x| {
                x["@type"]
                    .as_str()
                    .is_some_and(|t| t.ends_with("google.rpc.ErrorInfo"))
            })
            .and_then(|x| x["reason"].as_str())
    });
    let reason = err["errors"][0]["reason"]
        .as_str()
        .or(info)
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

/// Whether `e` carries one of Compute Engine's `codes` (as [`map_error`] kept it).
pub(crate) fn has_code(e: &Error, codes: &[&str]) -> bool {
    e.code().is_some_and(|c| codes.contains(&c))
}

/// The code of a stale fingerprint (412).
pub(crate) const CONDITION_NOT_MET: &[&str] = &["conditionNotMet", "CONDITION_NOT_MET"];

/// THE mapping from Compute Engine's answers to orca's errors: the HTTP status, the cloud's code
/// (`errors[].reason` of an HTTP error, `error.errors[].code` of an operation) and its message. The
/// code and an [`ApiError`] as the cause are kept in the error's context.
pub(crate) fn map_error(
    status: u16,
    code: &str,
    message: &str,
    retry_after: Option<Duration>,
) -> Error {
    let m = message.to_string();
    let e = match code {
        "ZONE_RESOURCE_POOL_EXHAUSTED"
        | "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS"
        | "zoneResourcePoolExhausted"
        | "zoneResourcePoolExhaustedWithDetails" => {
            Error::no_stock(String::new(), String::new(), m)
        }
        "QUOTA_EXCEEDED" | "quotaExceeded" => Error::quota(m),
        "rateLimitExceeded"
        | "userRateLimitExceeded"
        | "RATE_LIMIT_EXCEEDED"
        | "RESOURCE_OPERATION_RATE_EXCEEDED"
        | "RESOURCE_EXHAUSTED" => Error::throttled(retry_after, m),
        "notFound" | "RESOURCE_NOT_FOUND" | "NOT_FOUND" => Error::not_found(m),
        "alreadyExists" | "RESOURCE_ALREADY_EXISTS" | "ALREADY_EXISTS" => Error::already_exists(m),
        // Another operation holds the resource: it is free again when that operation ends.
        "resourceNotReady" | "RESOURCE_NOT_READY" => Error::busy(m),
        "INTERNAL_ERROR" | "internalError" | "backendError" | "UNAVAILABLE" => Error::transient(m),
        "forbidden" | "insufficientPermissions" | "PERMISSION_DENIED" | "accessNotConfigured" => {
            Error::permission_denied(m)
        }
        // An organisation policy's constraint ("Constraint constraints/... violated"): refused
        // for as long as the policy stands, which only an administrator changes.
        "conditionNotMet" | "CONDITION_NOT_MET" if message.contains("constraints/") => {
            Error::permission_denied(m)
        }
        "required" | "authError" | "UNAUTHENTICATED" if status == 401 => Error::unauthenticated(m),
        _ => match status {
            // The request was refused as it was (a bad field, a stale fingerprint, a resource in use):
            // the same call will fail again. The cloud's code says which.
            400 | 412 => Error::other(m),
            _ => Error::from_http_status(status, m, retry_after),
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

/// A random (version 4) request id: one per create or change, so that the retries of that call are
/// de-duplicated by Compute Engine and no other call meets its operation.
pub(crate) fn request_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use orca_machines::ErrorKind;
    use std::error::Error as _;

    #[test]
    fn error_mapping_keeps_the_code_and_the_cause() {
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
        assert_eq!(k(400, "resourceNotReady"), ErrorKind::Busy);
        assert_eq!(k(400, "invalid"), ErrorKind::Other);
        assert_eq!(k(412, "conditionNotMet"), ErrorKind::Other);
        let policy = map_error(
            412,
            "conditionNotMet",
            "Constraint constraints/compute.requireOsLogin violated for project p.",
            None,
        );
        assert_eq!(policy.kind(), ErrorKind::PermissionDenied);
        assert_eq!(policy.code(), Some("conditionNotMet"));
        let e = map_error(
            412,
            "conditionNotMet",
            "Labels fingerprint either invalid",
            None,
        );
        assert!(has_code(&e, CONDITION_NOT_MET));
        assert_eq!(
            e.source().map(|s| s.to_string()).as_deref(),
            Some("HTTP 412 conditionNotMet: Labels fingerprint either invalid")
        );
        let e = http_error(
            429,
            Some(Duration::from_secs(2)),
            br#"{"error":{"code":429,"message":"slow down","errors":[{"reason":"rateLimitExceeded","domain":"usageLimits","message":"slow down"}]}}"#,
        );
        assert_eq!(e.retry_after(), Some(Duration::from_secs(2)));
        assert_eq!(e.code(), Some("rateLimitExceeded"));
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
        assert_eq!(e.code(), Some("ZONE_RESOURCE_POOL_EXHAUSTED"));
        assert!(e.to_string().contains("no room"));
        let ok: Operation =
            serde_json::from_value(serde_json::json!({"name": "op", "status": "DONE"})).unwrap();
        assert!(operation_error(&ok).is_none());
    }

    #[test]
    fn request_ids_are_random_uuids() {
        let r = request_id();
        assert_eq!(r.len(), 36);
        assert_eq!(&r[14..15], "4");
        assert_ne!(r, request_id());
    }
}
