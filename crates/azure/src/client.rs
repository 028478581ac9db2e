//! Resource Manager calls: one typed-enough HTTP client ([`Arm`]) with the shared retry policy, the
//! long-running-operation follower ([`Arm::wait`]), `nextLink` paging ([`Arm::list`]) and the ONE
//! function that maps Azure's answers onto orca's errors ([`map_error`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use orca_machines::{all_pages, parse_retry_after, Error, Page, Result, RetryPolicy};
use reqwest::Method;
use secrecy::ExposeSecret;
use serde_json::Value;
use tracing::Instrument;

use crate::credential::TokenSource;

/// Compute (virtual machines) API version.
pub const COMPUTE_API: &str = "2024-07-01";
/// Network API version.
pub const NETWORK_API: &str = "2024-05-01";
/// Resource SKUs API version.
pub const SKUS_API: &str = "2021-07-01";
/// Retail prices API version.
pub const PRICES_API: &str = "2023-01-01-preview";

/// One answer of Azure.
#[derive(Debug, Clone)]
pub struct Answer {
    /// HTTP status.
    pub status: u16,
    /// The JSON body (`Null` when empty).
    pub body: Value,
    /// `Azure-AsyncOperation`, if any.
    pub async_op: Option<String>,
    /// `Location`, if any.
    pub location: Option<String>,
    /// `Retry-After`, if any.
    pub retry_after: Option<Duration>,
}

/// The Resource Manager client.
pub struct Arm {
    http: reqwest::Client,
    endpoint: String,
    prices_endpoint: String,
    subscription: String,
    token: Arc<dyn TokenSource>,
    retry: RetryPolicy,
    poll_interval: Duration,
    operation_timeout: Duration,
}

impl std::fmt::Debug for Arm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Arm")
            .field("endpoint", &self.endpoint)
            .field("subscription", &self.subscription)
            .field("token", &self.token)
            .finish_non_exhaustive()
    }
}

/// Maps an Azure answer onto an [`Error`]: `status` is the HTTP status (`None` for a failed
/// long-running operation), `error` the `error` object (`{"code","message","details",...}`).
///
/// - `SkuNotAvailable`, `AllocationFailed`, `ZonalAllocationFailed`, `OverconstrainedAllocationRequest`,
///   `OverconstrainedZonalAllocationRequest`: no stock (the caller fills in type and location);
/// - `QuotaExceeded`, `OperationNotAllowed` naming a quota, and the network limits: quota;
/// - `RequestDisallowedByPolicy`: permission denied naming the policy assignment;
/// - `AuthorizationFailed`: permission denied; `AuthenticationFailed`, `InvalidAuthenticationToken*`,
///   `ExpiredAuthenticationToken`: unauthenticated;
/// - `ResourceNotFound`, `NotFound`, `ResourceGroupNotFound`: not found;
/// - `InvalidParameter`: invalid spec naming the target;
/// - `PreconditionFailed`: already exists;
/// - otherwise by HTTP status ([`Error::from_http_status`]), 409 as other (a conflict is not "exists").
pub fn map_error(status: Option<u16>, error: &Value, retry_after: Option<Duration>) -> Error {
    let code = error["code"].as_str().unwrap_or("").to_string();
    let message = error["message"].as_str().unwrap_or("").to_string();
    let words = if code.is_empty() {
        message.clone()
    } else {
        format!("{code}: {message}")
    };
    match code.as_str() {
        "SkuNotAvailable"
        | "AllocationFailed"
        | "ZonalAllocationFailed"
        | "OverconstrainedAllocationRequest"
        | "OverconstrainedZonalAllocationRequest" => {
            Error::no_stock(String::new(), String::new(), words)
        }
        "QuotaExceeded"
        | "PublicIPCountLimitReached"
        | "NetworkSecurityGroupCountLimitReached"
        | "NetworkInterfaceCountLimitReached" => Error::quota(words),
        "OperationNotAllowed" if message.to_ascii_lowercase().contains("quota") => {
            Error::quota(words)
        }
        "RequestDisallowedByPolicy" => {
            let mut names = Vec::new();
            for info in error["additionalInfo"].as_array().into_iter().flatten() {
                let i = &info["info"];
                if let Some(n) = i["policyAssignmentName"].as_str() {
                    let id = i["policyAssignmentId"].as_str().unwrap_or("");
                    let shown = i["policyAssignmentDisplayName"].as_str().unwrap_or("");
                    names.push(format!("{n} ({shown}; {id})"));
                }
            }
            let named = if names.is_empty() {
                "a policy assignment named in the message".to_string()
            } else {
                format!("policy assignment {}", names.join(", "))
            };
            Error::permission_denied(format!("{named} denied the request: {words}"))
        }
        "AuthorizationFailed" | "LinkedAuthorizationFailed" => Error::permission_denied(words),
        "AuthenticationFailed"
        | "InvalidAuthenticationToken"
        | "InvalidAuthenticationTokenTenant"
        | "ExpiredAuthenticationToken" => Error::unauthenticated(words),
        "ResourceNotFound" | "NotFound" | "ResourceGroupNotFound" => Error::not_found(words),
        "InvalidParameter" => Error::invalid(
            error["target"].as_str().unwrap_or("request").to_string(),
            words,
        ),
        "PreconditionFailed" => Error::already_exists(words),
        "TooManyRequests" | "RetryableError" | "InternalServerError" | "OperationPreempted" => {
            match status {
                Some(429) | None if code == "TooManyRequests" => {
                    Error::throttled(retry_after, words)
                }
                _ => Error::transient(words),
            }
        }
        _ => match status {
            Some(409) => Error::other(format!("HTTP 409: {words}")),
            Some(s) => Error::from_http_status(s, words, retry_after),
            None => Error::other(words),
        },
    }
}

fn origin(url: &str) -> &str {
    let after = url.find("://").map(|i| i + 3).unwrap_or(0);
    match url[after..].find('/') {
        Some(i) => &url[..after + i],
        None => url,
    }
}

/// Whether `url` names this machine (`127.0.0.1`, `localhost`, `[::1]`).
fn is_loopback(url: &str) -> bool {
    let host = url::Url::parse(url)
        .ok()
        .and_then(|u| u.host_str().map(str::to_ascii_lowercase));
    matches!(host.as_deref(), Some("127.0.0.1" | "localhost" | "[::1]"))
}

impl Arm {
    /// A client for `subscription` at `endpoint`.
    pub fn new(
        endpoint: &str,
        prices_endpoint: &str,
        subscription: &str,
        token: Arc<dyn TokenSource>,
        retry: RetryPolicy,
        poll_interval: Duration,
        operation_timeout: Duration,
    ) -> Result<Arm> {
        let mut http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(20))
            .timeout(Duration::from_secs(120))
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("orca-azure/", env!("CARGO_PKG_VERSION")));
        if is_loopback(endpoint) {
            // An endpoint on this machine (a test's fake) is never reached through a proxy of the
            // environment (`HTTP_PROXY`): its calls and the bearer token stay on 127.0.0.1.
            http = http.no_proxy();
        }
        let http = http
            .build()
            .map_err(|e| Error::other(format!("cannot build the HTTP client: {e}")))?;
        Ok(Arm {
            http,
            endpoint: endpoint.trim_end_matches('/').to_string(),
            prices_endpoint: prices_endpoint.trim_end_matches('/').to_string(),
            subscription: subscription.to_string(),
            token,
            retry,
            poll_interval,
            operation_timeout,
        })
    }

    /// `/subscriptions/{subscription}`.
    pub fn sub_path(&self) -> String {
        format!("/subscriptions/{}", self.subscription)
    }

    /// The URL of `path` (a resource id) with `api-version`.
    pub fn url(&self, path: &str, api: &str) -> String {
        format!("{}{path}?api-version={api}", self.endpoint)
    }

    /// The retail prices URL with `filter`.
    pub fn prices_url(&self, filter: &str) -> String {
        let mut u = url::Url::parse(&format!("{}/api/retail/prices", self.prices_endpoint))
            .unwrap_or_else(|_| {
                url::Url::parse("https://prices.azure.com/api/retail/prices").expect("static url")
            });
        u.query_pairs_mut()
            .append_pair("api-version", PRICES_API)
            .append_pair("$filter", filter);
        u.to_string()
    }

    async fn send_once(
        &self,
        op: &str,
        method: &Method,
        url: &str,
        body: Option<&Value>,
        if_none_match: bool,
    ) -> Result<Answer> {
        let to_arm = origin(url) == origin(&self.endpoint);
        let to_prices = origin(url) == origin(&self.prices_endpoint);
        if !to_arm && !to_prices {
            return Err(Error::other(format!(
                "Azure named an address outside its endpoint ({}); not followed",
                origin(url)
            )));
        }
        let mut req = self.http.request(method.clone(), url);
        if to_arm {
            let token = self.token.token().await?;
            req = req.bearer_auth(token.expose_secret());
        }
        if if_none_match {
            req = req.header("If-None-Match", "*");
        }
        if let Some(b) = body {
            req = req.json(b);
        }
        let span = tracing::info_span!(
            "azure.call",
            provider = "azure",
            operation = op,
            method = %method,
            status = tracing::field::Empty,
            request_id = tracing::field::Empty,
            duration_ms = tracing::field::Empty,
        );
        let started = Instant::now();
        let sent = req.send().instrument(span.clone()).await;
        span.record("duration_ms", started.elapsed().as_millis() as u64);
        let rsp = match sent {
            Ok(r) => r,
            Err(e) => {
                return Err(Error::transient(format!(
                    "{op}: {} ({})",
                    if e.is_timeout() {
                        "timed out"
                    } else {
                        "connection failed"
                    },
                    e.without_url()
                )))
            }
        };
        let status = rsp.status().as_u16();
        let header = |n: &str| {
            rsp.headers()
                .get(n)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let request_id = header("x-ms-request-id").unwrap_or_default();
        span.record("status", status);
        span.record("request_id", request_id.as_str());
        let async_op = header("azure-asyncoperation");
        let location = header("location");
        let retry_after = header("retry-after").and_then(|v| parse_retry_after(&v));
        let bytes = rsp.bytes().await.map_err(|e| {
            Error::transient(format!("{op}: the answer was lost ({})", e.without_url()))
        })?;
        let body: Value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap_or_else(|_| {
                Value::String(String::from_utf8_lossy(&bytes).chars().take(500).collect())
            })
        };
        tracing::debug!(parent: &span, "answered");
        if status >= 400 {
            let error = if body["error"].is_object() {
                body["error"].clone()
            } else if body["Error"].is_object() {
                serde_json::json!({"code": body["Error"]["Code"], "message": body["Error"]["Message"]})
            } else {
                serde_json::json!({"message": body.as_str().unwrap_or("")})
            };
            let e = map_error(Some(status), &error, retry_after);
            let e = match e {
                Error::NotFound { what, .. } => Error::not_found(format!("{op}: {what}")),
                other => other,
            };
            return Err(e);
        }
        Ok(Answer {
            status,
            body,
            async_op,
            location,
            retry_after,
        })
    }

    /// One call with the shared retry policy (every call made here is idempotent: `GET`, `PUT` and
    /// `PATCH` by name, `DELETE`, and the power actions).
    pub async fn call(
        &self,
        op: &str,
        method: Method,
        url: &str,
        body: Option<&Value>,
        if_none_match: bool,
    ) -> Result<Answer> {
        self.retry
            .retry(op, || self.send_once(op, &method, url, body, if_none_match))
            .await
    }

    /// `GET`: the body, or `None` on 404.
    pub async fn get(&self, op: &str, url: &str) -> Result<Option<Value>> {
        match self.call(op, Method::GET, url, None, false).await {
            Ok(a) => Ok(Some(a.body)),
            Err(Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Follows a long-running operation to its end: the `Azure-AsyncOperation` status (preferred), else
    /// the `Location` answers (202 while running). A failed operation is mapped by [`map_error`].
    pub async fn wait(&self, op: &str, started: &Answer) -> Result<()> {
        let (url, by_status) = match (&started.async_op, &started.location) {
            (Some(u), _) => (u.clone(), true),
            (None, Some(l)) if started.status == 201 || started.status == 202 => (l.clone(), false),
            _ => return Ok(()),
        };
        if by_status {
            if let Some(state) = started.body["properties"]["provisioningState"].as_str() {
                if state.eq_ignore_ascii_case("Succeeded") {
                    return Ok(());
                }
            }
        }
        let deadline = Instant::now() + self.operation_timeout;
        let mut delay = started.retry_after.unwrap_or(self.poll_interval);
        let poll_op = format!("{op} (poll)");
        loop {
            tokio::time::sleep(delay.min(Duration::from_secs(60))).await;
            let a = self.call(&poll_op, Method::GET, &url, None, false).await?;
            if by_status {
                match a.body["status"].as_str().unwrap_or("") {
                    s if s.eq_ignore_ascii_case("Succeeded") => return Ok(()),
                    s if s.eq_ignore_ascii_case("Failed") || s.eq_ignore_ascii_case("Canceled") => {
                        let e = &a.body["error"];
                        return Err(if e.is_object() {
                            map_error(None, e, None)
                        } else {
                            Error::other(format!("{op}: the operation ended {s}"))
                        });
                    }
                    _ => {}
                }
            } else if a.status != 202 {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(Error::transient(format!(
                    "{op}: the operation was still running after {} s",
                    self.operation_timeout.as_secs()
                )));
            }
            delay = a.retry_after.unwrap_or(self.poll_interval);
        }
    }

    /// Every item of a Resource Manager list, following `nextLink`.
    pub async fn list(&self, op: &str, first: &str) -> Result<Vec<Value>> {
        all_pages(|next| {
            let url = next.unwrap_or_else(|| first.to_string());
            async move {
                let a = self.call(op, Method::GET, &url, None, false).await?;
                Ok(Page {
                    items: a.body["value"].as_array().cloned().unwrap_or_default(),
                    next: a.body["nextLink"].as_str().map(str::to_string),
                })
            }
        })
        .await
    }

    /// Every item of a retail prices query, following `NextPageLink` (no token is sent there).
    pub async fn prices(&self, filter: &str) -> Result<Vec<Value>> {
        let first = self.prices_url(filter);
        all_pages(|next| {
            let url = next.unwrap_or_else(|| first.clone());
            async move {
                let a = self
                    .call("retail prices", Method::GET, &url, None, false)
                    .await?;
                Ok(Page {
                    items: a.body["Items"].as_array().cloned().unwrap_or_default(),
                    next: a.body["NextPageLink"].as_str().map(str::to_string),
                })
            }
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use orca_machines::ErrorKind;
    use serde_json::json;

    #[test]
    fn capacity_codes_are_no_stock() {
        for c in [
            "SkuNotAvailable",
            "AllocationFailed",
            "ZonalAllocationFailed",
            "OverconstrainedAllocationRequest",
        ] {
            let e = map_error(Some(409), &json!({"code": c, "message": "m"}), None);
            assert_eq!(e.kind(), ErrorKind::NoStock, "{c}");
        }
    }

    #[test]
    fn quota_and_conflict() {
        let q = json!({"code": "OperationNotAllowed", "message": "Operation could not be completed as it results in exceeding approved standardDSv5Family Cores quota."});
        assert_eq!(map_error(Some(409), &q, None).kind(), ErrorKind::Quota);
        let other = json!({"code": "OperationNotAllowed", "message": "The VM is being deleted."});
        assert_eq!(map_error(Some(409), &other, None).kind(), ErrorKind::Other);
        assert_eq!(
            map_error(
                Some(409),
                &json!({"code": "QuotaExceeded", "message": "m"}),
                None
            )
            .kind(),
            ErrorKind::Quota
        );
    }

    #[test]
    fn policy_deny_names_the_assignment() {
        let e = map_error(
            Some(403),
            &json!({"code": "RequestDisallowedByPolicy", "message": "Resource 'x' was disallowed by policy.",
                "additionalInfo": [{"type": "PolicyViolation", "info": {"policyAssignmentName": "deny-pip",
                "policyAssignmentId": "/subscriptions/s/providers/Microsoft.Authorization/policyAssignments/deny-pip",
                "policyAssignmentDisplayName": "No public IPs"}}]}),
            None,
        );
        assert_eq!(e.kind(), ErrorKind::PermissionDenied);
        let s = e.to_string();
        assert!(s.contains("deny-pip") && s.contains("No public IPs"), "{s}");
    }

    #[test]
    fn status_fallbacks() {
        let t = map_error(
            Some(429),
            &json!({"code": "TooManyRequests", "message": "m"}),
            Some(Duration::from_secs(3)),
        );
        assert_eq!(t.retry_after(), Some(Duration::from_secs(3)));
        assert_eq!(
            map_error(Some(503), &json!({}), None).kind(),
            ErrorKind::Transient
        );
        assert_eq!(
            map_error(
                Some(401),
                &json!({"code": "InvalidAuthenticationToken"}),
                None
            )
            .kind(),
            ErrorKind::Unauthenticated
        );
        assert_eq!(
            map_error(Some(404), &json!({"code": "ResourceNotFound"}), None).kind(),
            ErrorKind::NotFound
        );
        assert_eq!(
            map_error(None, &json!({"code": "Weird", "message": "m"}), None).kind(),
            ErrorKind::Other
        );
    }

    #[test]
    fn loopback() {
        assert!(is_loopback("http://127.0.0.1:8080"));
        assert!(is_loopback("http://localhost:1/x"));
        assert!(!is_loopback("https://management.azure.com"));
        assert!(!is_loopback("http://127.0.0.1.example.com"));
    }

    #[test]
    fn origins() {
        assert_eq!(
            origin("http://127.0.0.1:8080/subscriptions/x?y"),
            "http://127.0.0.1:8080"
        );
        assert_eq!(
            origin("https://management.azure.com"),
            "https://management.azure.com"
        );
    }
}
