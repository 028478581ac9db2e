//! The private transport: one Resource Manager client ([`Client`]) with the shared retry policy, the
//! long-running-operation follower ([`Client::wait`]), `nextLink` paging ([`Client::list`]), the Retail
//! Prices reader, and the ONE function that maps Azure's answers onto orca's errors
//! ([`map_error`]). Answers are decoded into the typed models of [`crate::model`].

use std::sync::Arc;
use std::time::Duration;

use orca_machines::kit::{self, Polled};
use orca_machines::{all_pages, parse_retry_after, Error, Page, Result, RetryPolicy};
use reqwest::Method;
use secrecy::ExposeSecret;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::config::ConfigKey;
use crate::credential::TokenSource;
use crate::model::{CloudError, ErrorDetail, ListPage, OperationStatus, PricePage, PriceRow};
use crate::pacer::Pacer;
use crate::provider::KIND;

/// Compute (virtual machines, resource SKUs' consumers) API version.
pub(crate) const COMPUTE_API: &str = "2024-07-01";
/// Managed disks API version (`Microsoft.Compute/disks` has its own).
pub(crate) const DISKS_API: &str = "2024-03-02";
/// Network API version.
pub(crate) const NETWORK_API: &str = "2024-05-01";
/// Resource SKUs API version.
pub(crate) const SKUS_API: &str = "2021-07-01";
/// Resources (Tags API) version.
pub(crate) const TAGS_API: &str = "2021-04-01";
/// Consumption (credits) API version.
pub(crate) const CONSUMPTION_API: &str = "2023-05-01";
/// Retail prices API version.
pub(crate) const PRICES_API: &str = "2023-01-01-preview";

/// One answer of Azure.
#[derive(Debug, Clone)]
pub(crate) struct Answer {
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

/// A request header the driver may send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Condition {
    /// No condition.
    None,
    /// `If-None-Match: *`: create only (compute's `PUT`).
    IfNoneMatch,
}

/// The Resource Manager client.
pub(crate) struct Client {
    http: reqwest::Client,
    endpoint: String,
    prices_endpoint: String,
    subscription: String,
    /// The resource groups the settings name, each with its key, the machines' first.
    groups: Vec<(String, &'static str)>,
    token: Arc<dyn TokenSource>,
    retry: RetryPolicy,
    poll_interval: Duration,
    operation_timeout: Duration,
    /// Resource Manager's throttling, as its answers tell it.
    pacer: Pacer,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("endpoint", &self.endpoint)
            .field("subscription", &self.subscription)
            .field("token", &self.token)
            .finish_non_exhaustive()
    }
}

/// Azure's codes of no capacity for a size in a location.
const CAPACITY_CODES: &[&str] = &[
    "SkuNotAvailable",
    "AllocationFailed",
    "ZonalAllocationFailed",
    "OverconstrainedAllocationRequest",
    "OverconstrainedZonalAllocationRequest",
];

/// Azure's codes of a quota or count limit.
const QUOTA_CODES: &[&str] = &[
    "QuotaExceeded",
    "PublicIPCountLimitReached",
    "NetworkSecurityGroupCountLimitReached",
    "NetworkInterfaceCountLimitReached",
];

/// Every code of `error`'s details, nested ones included, depth first.
fn detail_codes(error: &ErrorDetail) -> Vec<&str> {
    let mut out = Vec::new();
    for d in &error.details {
        if !d.code.is_empty() {
            out.push(d.code.as_str());
        }
        out.extend(detail_codes(d));
    }
    out
}

/// The one refusal this driver tells by its words, not by a code: Compute's direct answer to a VM
/// `PUT` beyond a core quota is 409 `OperationNotAllowed` with no details ("Operation could not be
/// completed as it results in exceeding approved ... Cores quota", or the older "Operation results
/// in exceeding quota limits of Core", as reported against Azure in hashicorp/terraform#10056,
/// microsoft/onefuzz#614 and cloud-barista/cb-spider#1558), and `OperationNotAllowed` is also the
/// code of an operation refused in the resource's state (a VM being deleted, a size not on the
/// hardware cluster). Azure's published error bodies leave no code to tell the two apart, so an
/// `OperationNotAllowed` without details whose message names a quota is a quota. An answer with
/// details is told by their codes ([`map_error`]).
pub(crate) fn is_core_quota_refusal(error: &ErrorDetail) -> bool {
    error.code == "OperationNotAllowed"
        && error.details.is_empty()
        && error.message.to_ascii_lowercase().contains("quota")
}

/// Maps an Azure error onto an [`Error`] keeping Azure's code: `status` is the HTTP status
/// (`None` for a failed long-running operation), `error` the error detail. The error's own code
/// decides first, then the codes of its details (Resource Manager's deployment and validation
/// errors carry the cause there: `InvalidTemplateDeployment` with a `QuotaExceeded` detail):
///
/// - [`CAPACITY_CODES`] (`SkuNotAvailable`, `AllocationFailed`, `ZonalAllocationFailed`,
///   `OverconstrainedAllocationRequest`, `OverconstrainedZonalAllocationRequest`): no stock (the
///   caller fills in type and location);
/// - [`QUOTA_CODES`] (`QuotaExceeded` and the network count limits): quota; and the one case told
///   by its words, Compute's core-quota refusal ([`is_core_quota_refusal`]);
/// - `RequestDisallowedByPolicy`: permission denied naming the policy assignment;
/// - `AuthorizationFailed`, `LinkedAuthorizationFailed`: permission denied;
///   `AuthenticationFailed`, `InvalidAuthenticationToken*`, `ExpiredAuthenticationToken`:
///   unauthenticated;
/// - `ResourceNotFound`, `NotFound`, `ResourceGroupNotFound`, `InvalidResourceReference` (a
///   referenced resource does not exist): not found (an answer to a call, rather than an
///   operation's end, saying that the subscription or a resource group of the settings does not
///   exist is the setting named, before this: `Client::missing_setting`);
/// - `InvalidParameter`: other, naming the target (an invalid spec is refused before any call);
/// - `PreconditionFailed`: already exists;
/// - `AnotherOperationInProgress` (another operation holds the resource, or one it depends on):
///   busy, waited for as long as that operation may run ([`Error::Busy`]);
/// - `RetryableError`, `InternalServerError`, `OperationPreempted`, `TooManyRequests`: passing
///   (retried);
/// - otherwise by HTTP status ([`Error::from_http_status`]), 409 as other (a conflict is not "exists").
pub(crate) fn map_error(
    status: Option<u16>,
    error: &ErrorDetail,
    retry_after: Option<Duration>,
) -> Error {
    let code = error.code.as_str();
    let message = &error.message;
    let mut words = if code.is_empty() {
        message.clone()
    } else {
        format!("{code}: {message}")
    };
    let nested = detail_codes(error);
    if let Some(d) = error.details.first() {
        if !d.code.is_empty() || !d.message.is_empty() {
            words = format!("{words} ({}: {})", d.code, d.message);
        }
    }
    let capacity = |c: &str| CAPACITY_CODES.contains(&c);
    let quota = |c: &str| QUOTA_CODES.contains(&c);
    let decided = if capacity(code) {
        Some(Error::no_stock(String::new(), String::new(), words.clone()))
    } else if quota(code) || nested.iter().any(|c| quota(c)) || is_core_quota_refusal(error) {
        Some(Error::quota(words.clone()))
    } else if nested.iter().any(|c| capacity(c)) {
        Some(Error::no_stock(String::new(), String::new(), words.clone()))
    } else {
        None
    };
    let e = match decided {
        Some(e) => e,
        None => match code {
            "RequestDisallowedByPolicy" => policy_denial(status, error, &words),
            "AuthorizationFailed" | "LinkedAuthorizationFailed" => Error::permission_denied(words),
            "AuthenticationFailed"
            | "InvalidAuthenticationToken"
            | "InvalidAuthenticationTokenTenant"
            | "ExpiredAuthenticationToken" => Error::unauthenticated(words),
            "ResourceNotFound"
            | "NotFound"
            | "ResourceGroupNotFound"
            | "InvalidResourceReference" => Error::not_found(words),
            // Azure refused a value the driver sent: not `InvalidSpec` (which is refused before any
            // call, and keeps no code), but the cloud's answer naming its target.
            "InvalidParameter" if !error.target.is_empty() => Error::other(format!(
                "HTTP {}: {words} (target {})",
                status.unwrap_or(400),
                error.target
            )),
            "PreconditionFailed" => Error::already_exists(words),
            "TooManyRequests" => Error::throttled(retry_after, words),
            "AnotherOperationInProgress" => Error::busy(words),
            "RetryableError" | "InternalServerError" | "OperationPreempted" => {
                Error::transient(words)
            }
            _ => match status {
                Some(409) => Error::other(format!("HTTP 409: {words}")),
                Some(s) => Error::from_http_status(s, words, retry_after),
                None => Error::other(words),
            },
        },
    };
    // Azure's own error stays reachable as the source, whatever orca made of it.
    let e = e.with_source(crate::error::ArmError::of(status, error));
    if code.is_empty() {
        e
    } else {
        e.with_code(code)
    }
}

/// A request a policy denied (`RequestDisallowedByPolicy`), naming the policy assignments `error`
/// names, with `words`.
fn policy_denial(status: Option<u16>, error: &ErrorDetail, words: &str) -> Error {
    let names: Vec<String> = error
        .additional_info
        .iter()
        .map(|a| &a.info)
        .filter(|i| !i.policy_assignment_name.is_empty())
        .map(|i| {
            format!(
                "{} ({}; {})",
                i.policy_assignment_name, i.policy_assignment_display_name, i.policy_assignment_id
            )
        })
        .collect();
    let named = if names.is_empty() {
        "a policy assignment named in the message".to_string()
    } else {
        format!("policy assignment {}", names.join(", "))
    };
    Error::permission_denied(format!(
        "{named} denied the request: HTTP {}: {words}",
        status.unwrap_or(403)
    ))
}

/// Whether `a` and `b` name the same origin: scheme, host and effective port (an explicit default
/// port, as in Azure's `https://management.azure.com:443/...` links, is the same origin as none).
pub(crate) fn same_origin(a: &str, b: &str) -> bool {
    match (url::Url::parse(a), url::Url::parse(b)) {
        (Ok(a), Ok(b)) => {
            a.scheme() == b.scheme()
                && a.host_str().map(str::to_ascii_lowercase)
                    == b.host_str().map(str::to_ascii_lowercase)
                && a.port_or_known_default() == b.port_or_known_default()
        }
        _ => false,
    }
}

/// The origin of `url` (for messages).
fn origin_of(url: &str) -> String {
    url::Url::parse(url)
        .map(|u| u.origin().ascii_serialization())
        .unwrap_or_else(|_| "an unreadable address".into())
}

/// Decodes `body` into `T`; a body that does not fit is an error naming the call.
pub(crate) fn decode<T: DeserializeOwned>(op: &str, body: Value) -> Result<T> {
    serde_json::from_value(body).map_err(|e| {
        Error::other(format!("{op}: Azure's answer could not be read: {e}")).with_source(e)
    })
}

impl Client {
    /// A client for `config`'s subscription and endpoints, its tokens from `token`.
    pub(crate) fn new(config: &crate::Config, token: Arc<dyn TokenSource>) -> Result<Client> {
        // The timeouts are resolved already (the builder's, else the kit's keys, else the defaults).
        let http = kit::http_client_with(
            KIND,
            kit::Timeouts::new(config.connect_timeout, Some(config.request_timeout)),
            kit::Proxy::for_endpoint(&config.arm_endpoint),
        )?;
        Ok(Client {
            http,
            endpoint: config.arm_endpoint.trim_end_matches('/').to_string(),
            prices_endpoint: config.prices_endpoint.trim_end_matches('/').to_string(),
            subscription: config.subscription_id.clone(),
            groups: vec![
                (
                    config.resource_group.clone(),
                    ConfigKey::ResourceGroup.as_str(),
                ),
                (
                    config.vnet_resource_group.clone(),
                    ConfigKey::VnetResourceGroup.as_str(),
                ),
            ],
            token,
            retry: config.retry,
            poll_interval: config.poll_interval,
            operation_timeout: config.operation_timeout,
            pacer: Pacer::default(),
        })
    }

    /// The settings error of an answer saying that the subscription or the resource group of `url`
    /// does not exist (Resource Manager answers so whatever the call): never that a machine is
    /// gone, which a delete would take for done and a read for none. It names the key whose value
    /// is the group in `url` (both group keys when neither matches).
    fn missing_setting(&self, url: &str, detail: &ErrorDetail) -> Option<Error> {
        let words = format!("{}: {}", detail.code, detail.message);
        match detail.code.as_str() {
            "SubscriptionNotFound" | "InvalidSubscriptionId" => Some(Error::settings(
                [
                    ConfigKey::SubscriptionId.as_str(),
                    ConfigKey::AzureSubscriptionId.as_str(),
                ],
                format!("subscription {}: {words}", self.subscription),
            )),
            "ResourceGroupNotFound" => {
                let segments: Vec<&str> = url.split(['/', '?']).collect();
                let group = segments
                    .windows(2)
                    .find(|w| w[0].eq_ignore_ascii_case("resourceGroups"))
                    .map(|w| w[1]);
                let named = self
                    .groups
                    .iter()
                    .find(|(g, _)| group.is_some_and(|x| x.eq_ignore_ascii_case(g)));
                let keys: Vec<&str> = match named {
                    Some((_, key)) => vec![key],
                    None => self.groups.iter().map(|(_, k)| *k).collect(),
                };
                Some(Error::settings(keys, words))
            }
            _ => None,
        }
    }

    /// `/subscriptions/{subscription}`.
    pub(crate) fn sub_path(&self) -> String {
        format!("/subscriptions/{}", self.subscription)
    }

    /// The URL of `path` (a resource id) with `api-version`.
    pub(crate) fn url(&self, path: &str, api: &str) -> String {
        format!("{}{path}?api-version={api}", self.endpoint)
    }

    /// The retail prices URL with `filter`.
    fn prices_url(&self, filter: &str) -> Result<String> {
        let mut u = url::Url::parse(&format!("{}/api/retail/prices", self.prices_endpoint))
            .map_err(|e| Error::other(format!("the prices endpoint: {e}")))?;
        u.query_pairs_mut()
            .append_pair("api-version", PRICES_API)
            .append_pair("$filter", filter);
        Ok(u.to_string())
    }

    /// One attempt, inside its call span ([`kit::attempt`]): the request's method and path, the
    /// time spent getting the token, the status and Azure's `x-ms-request-id` recorded; the answer,
    /// or the mapped error.
    async fn send(
        &self,
        op: &str,
        method: &Method,
        url: &str,
        body: Option<&Value>,
        condition: Condition,
    ) -> Result<Answer> {
        let path = url::Url::parse(url)
            .map(|u| u.path().to_string())
            .unwrap_or_default();
        kit::record_request(method.as_str(), &path);
        let to_arm = same_origin(url, &self.endpoint);
        let to_prices = same_origin(url, &self.prices_endpoint);
        if !to_arm && !to_prices {
            return Err(Error::other(format!(
                "{op}: Azure named an address outside its endpoints ({}); not followed",
                origin_of(url)
            )));
        }
        let mut req = self.http.request(method.clone(), url);
        let asked = tokio::time::Instant::now();
        if to_arm {
            let token = self.token.token().await?;
            req = req.bearer_auth(token.expose_secret());
        }
        kit::record_waited(asked.elapsed());
        if condition == Condition::IfNoneMatch {
            req = req.header("If-None-Match", "*");
        }
        if let Some(b) = body {
            req = req.json(b);
        }
        // Only Resource Manager throttles so; the prices API is another service.
        let mut ticket = None;
        if to_arm {
            let (paced, t) = self.pacer.before(method).await;
            kit::record_waited(paced);
            ticket = Some(t);
        }
        let rsp = match req.send().await {
            Ok(r) => r,
            Err(e) => {
                if let Some(t) = ticket.as_mut() {
                    self.pacer.observe(t, None, false);
                }
                return Err(kit::transport_error(e).prefixed(op));
            }
        };
        let status = rsp.status().as_u16();
        if let Some(t) = ticket.as_mut() {
            self.pacer.observe(t, Some(rsp.headers()), status == 429);
        }
        kit::record_status(status);
        let header = |n: &str| {
            rsp.headers()
                .get(n)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        if let Some(id) = header("x-ms-request-id") {
            kit::record_request_id(&id);
        }
        let async_op = header("azure-asyncoperation");
        let location = header("location");
        let retry_after = header("retry-after").and_then(|v| parse_retry_after(&v));
        let bytes = rsp
            .bytes()
            .await
            .map_err(|e| kit::transport_error(e).prefixed(op))?;
        let body: Value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap_or_else(|_| {
                Value::String(String::from_utf8_lossy(&bytes).chars().take(500).collect())
            })
        };
        if status >= 400 {
            let detail = match &body {
                Value::String(s) => ErrorDetail {
                    message: s.clone(),
                    ..ErrorDetail::default()
                },
                other => serde_json::from_value::<CloudError>(other.clone())
                    .unwrap_or_default()
                    .detail(),
            };
            let e = self
                .missing_setting(url, &detail)
                .unwrap_or_else(|| map_error(Some(status), &detail, retry_after));
            return Err(e.prefixed(op));
        }
        Ok(Answer {
            status,
            body,
            async_op,
            location,
            retry_after,
        })
    }

    /// One call through the kit ([`kit::call`]): [`Client::send`] under the shared retry policy,
    /// every attempt in the one call span (every call made here is idempotent: `GET`, `PUT` and
    /// `PATCH` by name, `DELETE`, and the power actions).
    pub(crate) async fn call(
        &self,
        op: &str,
        method: Method,
        url: &str,
        body: Option<&Value>,
        condition: Condition,
    ) -> Result<Answer> {
        kit::call(KIND, op, &self.retry, || {
            self.send(op, &method, url, body, condition)
        })
        .await
    }

    /// `GET` into `T`: `None` on 404.
    pub(crate) async fn get<T: DeserializeOwned>(&self, op: &str, url: &str) -> Result<Option<T>> {
        match self.call(op, Method::GET, url, None, Condition::None).await {
            Ok(a) => decode(op, a.body).map(Some),
            Err(Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Follows a long-running operation to its end: the `Azure-AsyncOperation` status (preferred),
    /// else the `Location` answers (202 while running), by the kit's [`kit::poll_with`]. A failed
    /// operation is mapped by [`map_error`]; one still running past the operation timeout is a
    /// passing failure naming it (it goes on in Azure).
    ///
    /// The pause before each poll is [`poll_pause`]'s, from the `Retry-After` of the first answer
    /// and of every poll, and the first poll waits that pause too (the operation was just
    /// started): the first step only names it.
    pub(crate) async fn wait(&self, op: &str, started: &Answer) -> Result<()> {
        let (url, by_status) = match (&started.async_op, &started.location) {
            (Some(u), _) => (u.as_str(), true),
            (None, Some(l)) if started.status == 201 || started.status == 202 => {
                (l.as_str(), false)
            }
            _ => return Ok(()),
        };
        let pause = |retry_after| poll_pause(retry_after, self.poll_interval);
        let poll_op = &format!("{op} (poll)");
        let mut first = Some(pause(started.retry_after));
        kit::poll_with(op, self.operation_timeout, || {
            let first = first.take();
            async move {
                if let Some(p) = first {
                    return Ok(Polled::Again(p));
                }
                let a = self
                    .call(poll_op, Method::GET, url, None, Condition::None)
                    .await?;
                if by_status {
                    let s: OperationStatus = decode(poll_op, a.body)?;
                    if s.status.eq_ignore_ascii_case("Succeeded") {
                        return Ok(Polled::Done(()));
                    }
                    if s.status.eq_ignore_ascii_case("Failed")
                        || s.status.eq_ignore_ascii_case("Canceled")
                    {
                        return Err(match s.error {
                            Some(e) => map_error(None, &e, None).prefixed(op),
                            None => Error::other(format!("{op}: the operation ended {}", s.status)),
                        });
                    }
                } else if a.status != 202 {
                    return Ok(Polled::Done(()));
                }
                Ok(Polled::Again(pause(a.retry_after)))
            }
        })
        .await
    }

    /// Every item of a Resource Manager list, following `nextLink`.
    pub(crate) async fn list<T: DeserializeOwned>(&self, op: &str, first: &str) -> Result<Vec<T>> {
        all_pages(|next| {
            let url = next.unwrap_or_else(|| first.to_string());
            async move {
                let a = self
                    .call(op, Method::GET, &url, None, Condition::None)
                    .await?;
                let page: ListPage<T> = decode(op, a.body)?;
                Ok(Page {
                    items: page.value,
                    next: page.next_link,
                })
            }
        })
        .await
    }

    /// Every row of a retail prices query, following `NextPageLink` (no token is sent there).
    pub(crate) async fn prices(&self, filter: &str) -> Result<Vec<PriceRow>> {
        let first = self.prices_url(filter)?;
        all_pages(|next| {
            let url = next.unwrap_or_else(|| first.clone());
            async move {
                let op = "retail prices";
                let a = self
                    .call(op, Method::GET, &url, None, Condition::None)
                    .await?;
                let page: PricePage = decode(op, a.body)?;
                Ok(Page {
                    items: page.items,
                    next: page.next_page_link,
                })
            }
        })
        .await
    }
}

/// The longest pause between polls of an operation, whatever Azure names.
const MAX_POLL_PAUSE: Duration = Duration::from_secs(60);

/// The pause before the next poll of an operation: the `Retry-After` Azure named, if above zero,
/// else `interval`; at most [`MAX_POLL_PAUSE`]. A `Retry-After` of zero names no pause, as Azure's
/// own SDKs read it (they poll at their own frequency then): taken as "at once" it would poll an
/// operation of minutes in a loop, a read of the subscription's bucket per round trip.
fn poll_pause(retry_after: Option<Duration>, interval: Duration) -> Duration {
    retry_after
        .filter(|d| !d.is_zero())
        .unwrap_or(interval)
        .min(MAX_POLL_PAUSE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use orca_machines::ErrorKind;
    use serde_json::json;

    fn detail(v: Value) -> ErrorDetail {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_pause_named_above_zero_is_kept_up_to_a_minute_and_otherwise_the_interval() {
        let s = Duration::from_secs;
        let interval = s(2);
        assert_eq!(poll_pause(None, interval), interval);
        assert_eq!(poll_pause(Some(Duration::ZERO), interval), interval);
        assert_eq!(poll_pause(Some(s(10)), interval), s(10));
        assert_eq!(
            poll_pause(Some(Duration::from_millis(500)), interval),
            Duration::from_millis(500)
        );
        assert_eq!(poll_pause(Some(s(120)), interval), s(60));
        assert_eq!(poll_pause(None, s(300)), s(60));
    }

    #[test]
    fn capacity_codes_are_no_stock_and_keep_the_code() {
        for c in [
            "SkuNotAvailable",
            "AllocationFailed",
            "ZonalAllocationFailed",
            "OverconstrainedAllocationRequest",
        ] {
            let e = map_error(Some(409), &detail(json!({"code": c, "message": "m"})), None);
            assert_eq!(e.kind(), ErrorKind::NoStock, "{c}");
            assert_eq!(e.code(), Some(c));
        }
    }

    #[test]
    fn quota_conflict_and_operations_in_progress() {
        let q = detail(
            json!({"code": "OperationNotAllowed", "message": "Operation could not be completed as it results in exceeding approved standardDSv5Family Cores quota."}),
        );
        assert_eq!(map_error(Some(409), &q, None).kind(), ErrorKind::Quota);
        let other =
            detail(json!({"code": "OperationNotAllowed", "message": "The VM is being deleted."}));
        assert_eq!(map_error(Some(409), &other, None).kind(), ErrorKind::Other);
        let busy = map_error(
            Some(409),
            &detail(
                json!({"code": "AnotherOperationInProgress", "message": "Another operation on this or dependent resource is in progress."}),
            ),
            None,
        );
        assert_eq!(busy.kind(), ErrorKind::Busy, "{busy}");
        assert!(busy.is_retryable() && busy.made_nothing(), "{busy}");
        assert_eq!(busy.code(), Some("AnotherOperationInProgress"));
    }

    #[test]
    fn quota_is_told_by_the_codes_of_the_error_and_its_details() {
        // Resource Manager's validation of a deployment: the quota is a detail's code.
        let deployment = detail(json!({"code": "InvalidTemplateDeployment",
            "message": "The template deployment 'vm' is not valid according to the validation procedure. See inner errors for details.",
            "details": [{"code": "QuotaExceeded", "message": "Operation could not be completed as it results in exceeding approved Total Regional Cores quota. Additional details - Deployment Model: Resource Manager, Location: eastus, Current Limit: 4, Current Usage: 0, Additional Required: 6, (Minimum) New Limit Required: 6."}]}));
        let e = map_error(Some(400), &deployment, None);
        assert_eq!(e.kind(), ErrorKind::Quota, "{e}");
        assert_eq!(e.code(), Some("InvalidTemplateDeployment"));
        assert!(e.to_string().contains("QuotaExceeded"), "{e}");
        // A detail's code decides, whatever the words say.
        let coded = detail(json!({"code": "OperationNotAllowed",
            "message": "Operation could not be completed.",
            "details": [{"code": "QuotaExceeded", "message": "Total Regional Cores: limit 10, usage 10, required 2."}]}));
        assert_eq!(map_error(Some(409), &coded, None).kind(), ErrorKind::Quota);
        let nested_capacity = detail(
            json!({"code": "DeploymentFailed", "message": "At least one resource deployment operation failed.",
            "details": [{"code": "Conflict", "message": "m", "details": [{"code": "SkuNotAvailable", "message": "not available"}]}]}),
        );
        assert_eq!(
            map_error(Some(400), &nested_capacity, None).kind(),
            ErrorKind::NoStock
        );
        // A detail that names no quota leaves an operation refused in the VM's state as it is.
        let state = detail(json!({"code": "OperationNotAllowed",
            "message": "Operation 'start' is not allowed on VM 'x' since the VM is marked for deletion. You can only retry the Delete operation (or wait for an ongoing one to complete).",
            "details": []}));
        assert_eq!(map_error(Some(409), &state, None).kind(), ErrorKind::Other);
    }

    #[test]
    fn the_compute_core_quota_refusal_is_the_one_case_told_by_its_words() {
        // Compute's direct answer to a VM PUT beyond a core quota: 409 OperationNotAllowed with no
        // details (hashicorp/terraform#10056, microsoft/onefuzz#614, cloud-barista/cb-spider#1558).
        for message in [
            "Operation could not be completed as it results in exceeding approved Total Regional Cores quota. Additional details - Deployment Model: Resource Manager, Location: KoreaSouth, Current Limit: 50, Current Usage: 50, Additional Required: 2, (Minimum) New Limit Required: 52.",
            "Operation results in exceeding quota limits of Core. Maximum allowed: 20, Current in use: 20, Additional requested: 2.",
        ] {
            let d = detail(json!({"code": "OperationNotAllowed", "message": message}));
            assert!(is_core_quota_refusal(&d), "{message}");
            assert_eq!(map_error(Some(409), &d, None).kind(), ErrorKind::Quota);
        }
        // With details, the details speak: the words are not read.
        let d = detail(
            json!({"code": "OperationNotAllowed", "message": "exceeding approved quota",
            "details": [{"code": "VMMarkedForDeletion", "message": "m"}]}),
        );
        assert!(!is_core_quota_refusal(&d));
        let d = detail(json!({"code": "Conflict", "message": "exceeding approved quota"}));
        assert!(!is_core_quota_refusal(&d));
    }

    #[test]
    fn policy_deny_names_the_assignment() {
        let e = map_error(
            Some(403),
            &detail(
                json!({"code": "RequestDisallowedByPolicy", "message": "Resource 'x' was disallowed by policy.",
                "additionalInfo": [{"type": "PolicyViolation", "info": {"policyAssignmentName": "deny-pip",
                "policyAssignmentId": "/subscriptions/s/providers/Microsoft.Authorization/policyAssignments/deny-pip",
                "policyAssignmentDisplayName": "No public IPs"}}]}),
            ),
            None,
        );
        assert_eq!(e.kind(), ErrorKind::PermissionDenied);
        let s = e.to_string();
        assert!(s.contains("deny-pip") && s.contains("No public IPs"), "{s}");
        assert!(s.contains("HTTP 403: RequestDisallowedByPolicy"), "{s}");
    }

    #[test]
    fn azure_s_error_is_the_source() {
        let e = map_error(
            Some(409),
            &detail(
                json!({"code": "Conflict", "message": "m", "target": "vmSize",
                "details": [{"code": "SkuNotAvailable", "message": "not here"}]}),
            ),
            None,
        );
        let arm = std::error::Error::source(&e)
            .and_then(|s| s.downcast_ref::<crate::ArmError>())
            .expect("ArmError source");
        assert_eq!(
            (arm.status, arm.code.as_str(), arm.target.as_str()),
            (Some(409), "Conflict", "vmSize")
        );
        assert_eq!(arm.details[0].code, "SkuNotAvailable");
        assert_eq!(arm.to_string(), "HTTP 409: Conflict: m");
    }

    #[test]
    fn status_fallbacks() {
        let t = map_error(
            Some(429),
            &detail(json!({"code": "TooManyRequests", "message": "m"})),
            Some(Duration::from_secs(3)),
        );
        assert_eq!(t.retry_after(), Some(Duration::from_secs(3)));
        assert_eq!(
            map_error(Some(503), &ErrorDetail::default(), None).kind(),
            ErrorKind::Transient
        );
        assert_eq!(
            map_error(
                Some(401),
                &detail(json!({"code": "InvalidAuthenticationToken"})),
                None
            )
            .kind(),
            ErrorKind::Unauthenticated
        );
        assert_eq!(
            map_error(
                Some(404),
                &detail(json!({"code": "ResourceNotFound"})),
                None
            )
            .kind(),
            ErrorKind::NotFound
        );
        assert_eq!(
            map_error(
                None,
                &detail(json!({"code": "Weird", "message": "m"})),
                None
            )
            .kind(),
            ErrorKind::Other
        );
    }

    #[test]
    fn an_explicit_default_port_is_the_same_origin() {
        // Azure's real nextLinks carry the port: https://management.azure.com:443/subscriptions/...
        assert!(same_origin(
            "https://management.azure.com:443/subscriptions/s/providers/Microsoft.Compute/virtualMachines?api-version=2024-07-01&$skiptoken=x",
            "https://management.azure.com"
        ));
        assert!(same_origin(
            "https://prices.azure.com:443/api/retail/prices?$skip=100",
            "https://PRICES.azure.com/"
        ));
        assert!(same_origin(
            "http://127.0.0.1:8080/x",
            "http://127.0.0.1:8080"
        ));
        for other in [
            "https://management.azure.com:8443/x",
            "http://management.azure.com/x",
            "https://management.azure.com.evil.example/x",
            "https://evil.example/?https://management.azure.com",
            "not a url",
        ] {
            assert!(
                !same_origin(other, "https://management.azure.com"),
                "{other}"
            );
        }
    }
}
