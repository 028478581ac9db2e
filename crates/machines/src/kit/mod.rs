//! The driver kit: what every driver would otherwise build again, written once so that a fix lands in
//! all four.
//!
//! - [`ClientKey`] and [`ClientOptions`]: the client settings every driver takes beside its own keys
//!   (object_store's `ClientConfigKey`): timeouts, the pause between polls of a long-running operation,
//!   and the retry budget.
//! - [`Timeouts`]: the timeouts that win, resolved in one place (a builder's value, else the
//!   client key's, else the driver's default).
//! - `http_client_with` (feature `http`): the HTTP client of the REST drivers, with one user
//!   agent, resolved [`Timeouts`], no redirects, and the environment's proxy or none ([`Proxy`]);
//!   `http_client` is its older form, which lets a client key beat the driver's values.
//! - `transport_error` (feature `http`): one classification of a request that got no complete
//!   answer (`TransportKind`: connect, timeout, cut connection, cut answer, unreadable answer),
//!   the cause kept without its URL (a URL can carry a token).
//! - [`Recent`] and [`read_until_seen`]: what a driver made lately, for the window in which the
//!   cloud may not show it yet, and the reads that confirm a "not found" within that window.
//! - [`StoppedCreates`]: the creates stopped before they answered (a dropped future), by pool and
//!   name, so that `delete_named` of such a name reads again within the window before it believes
//!   "nothing there".
//! - [`call`] (and [`call_recorded`]): one cloud call, its attempts under the shared
//!   [`RetryPolicy`], each in the one span shape of a cloud call ([`call_span`]), filled the same way
//!   by every driver ([`record_request`], [`record_status`], [`record_request_id`],
//!   [`record_waited`]).
//! - [`poll`] and [`poll_with`]: the one loop that follows a long-running operation to its end (at
//!   one interval, or at a pause each step names: a Retry-After, a backoff).
//! - [`QuotaPacer`]: a cloud's rate quotas counted in fixed intervals, which the cloud does not
//!   tell: learnt from the first refusal (or set by the operator), then never spent past; in any
//!   span of one interval, or within each interval where the intervals start on the wall clock
//!   ([`QuotaPacer::synchronized`], with a [`CLOCK_MARGIN`] at the boundaries).
//! - [`UtcClock`]: the wall clock as tokio's clock moves it (a reading taken once plus tokio's time
//!   since), for intervals that start on the wall clock's minutes, on a paused clock too.
//! - [`check_owned`] and [`no_stock`]: the ownership refusal and the no-stock outcome.
//! - [`hide_secret`]: a cloud's answer with every run of a secret it repeats (a token, or part of
//!   one) hidden.

use std::future::Future;
use std::time::Duration;

mod clock;
#[cfg(feature = "http")]
mod http;
mod quota;
mod recent;
mod secret;
mod timeouts;

pub use clock::UtcClock;
#[cfg(feature = "http")]
pub use http::{http_client, http_client_with, transport_error, TransportKind};
pub use quota::{QuotaPacer, QuotaTicket, Settled, CLOCK_MARGIN};
pub use recent::{read_until_seen, CreateGuard, Recent, StoppedCreates};
pub use secret::{hide_secret, HIDDEN, SHORTEST_SECRET_RUN};
pub use timeouts::{Proxy, Timeouts};

use crate::error::{Error, Result};
use crate::labels::{self, Labels};
use crate::machine::Created;
use crate::retry::RetryPolicy;
use crate::settings::{parse_any_duration, Problems, Settings};
use crate::spec::MachineSpec;

crate::setting_keys! {
    /// The client settings every driver takes beside its own keys, by the names of their environment
    /// variables.
    pub enum ClientKey for "client" {
        /// `ORCA_CONNECT_TIMEOUT`: the longest wait for a connection (`10s`, `500ms`).
        ConnectTimeout = "ORCA_CONNECT_TIMEOUT",
        /// `ORCA_REQUEST_TIMEOUT`: the longest wait for one request's answer.
        RequestTimeout = "ORCA_REQUEST_TIMEOUT",
        /// `ORCA_POLL_INTERVAL`: the pause between two reads of a long-running operation.
        PollInterval = "ORCA_POLL_INTERVAL",
        /// `ORCA_MAX_RETRIES`: how many times a passing failure is retried (0: never).
        MaxRetries = "ORCA_MAX_RETRIES",
        /// `ORCA_RETRY_TIMEOUT`: the longest time spent retrying one call.
        RetryTimeout = "ORCA_RETRY_TIMEOUT",
        /// `ORCA_VISIBILITY_WINDOW`: the cloud's eventual consistency, as the driver allows for it:
        /// how long after making a machine the provider reads again (with backoff) rather than
        /// believe a "not found" for it, and the longest a create waits for the new machine to
        /// show. Each driver has its own default.
        VisibilityWindow = "ORCA_VISIBILITY_WINDOW",
    }
}

/// Client settings ([`ClientKey`]); `None` leaves the driver's default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientOptions {
    /// [`ClientKey::ConnectTimeout`].
    pub connect_timeout: Option<Duration>,
    /// [`ClientKey::RequestTimeout`].
    pub request_timeout: Option<Duration>,
    /// [`ClientKey::PollInterval`].
    pub poll_interval: Option<Duration>,
    /// [`ClientKey::MaxRetries`].
    pub max_retries: Option<u32>,
    /// [`ClientKey::RetryTimeout`].
    pub retry_timeout: Option<Duration>,
    /// [`ClientKey::VisibilityWindow`].
    pub visibility_window: Option<Duration>,
}

/// Parses a duration as [`crate::settings::parse_duration`] does, parts of a second included
/// (`250ms`, `1.5s`, `90s`, `30m`, `24h`, `2d`, `1h 30m`) or plain seconds (`3600`).
pub fn parse_short_duration(s: &str) -> Option<Duration> {
    parse_any_duration(s)
}

/// The rule a duration setting that must be above zero states in its error.
pub const POSITIVE_DURATION_RULE: &str = "a duration above zero such as 250ms, 10s or 2m";

/// A duration above zero, as [`parse_short_duration`] reads it; zero or unreadable: `None`
/// ([`POSITIVE_DURATION_RULE`] says why).
pub fn parse_positive_duration(s: &str) -> Option<Duration> {
    parse_short_duration(s).filter(|d| !d.is_zero())
}

impl ClientOptions {
    /// No option set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `key` from its text; the error is the rule it breaks.
    pub fn set(&mut self, key: ClientKey, value: &str) -> std::result::Result<(), String> {
        let duration =
            || parse_positive_duration(value).ok_or_else(|| POSITIVE_DURATION_RULE.to_string());
        match key {
            ClientKey::ConnectTimeout => self.connect_timeout = Some(duration()?),
            ClientKey::RequestTimeout => self.request_timeout = Some(duration()?),
            ClientKey::PollInterval => self.poll_interval = Some(duration()?),
            ClientKey::RetryTimeout => self.retry_timeout = Some(duration()?),
            ClientKey::VisibilityWindow => self.visibility_window = Some(duration()?),
            ClientKey::MaxRetries => {
                let n = value.trim().parse::<u32>().ok().filter(|n| *n <= 100);
                self.max_retries = Some(n.ok_or("a number from 0 to 100")?);
            }
        }
        Ok(())
    }

    /// The client keys of `settings`, every invalid one recorded in `problems`.
    pub fn from_settings(settings: &Settings, problems: &mut Problems) -> Self {
        let mut o = ClientOptions::new();
        for key in ClientKey::ALL {
            if let Some(v) = settings.get(key.as_str()) {
                if let Err(why) = o.set(*key, v) {
                    problems.invalid(key.as_str(), why);
                }
            }
        }
        o
    }

    /// `base` with the retry budget these options set.
    pub fn retry_policy(&self, base: RetryPolicy) -> RetryPolicy {
        RetryPolicy {
            max_retries: self.max_retries.unwrap_or(base.max_retries),
            max_elapsed: self.retry_timeout.unwrap_or(base.max_elapsed),
            ..base
        }
    }

    /// The pause between polls, or `default`.
    pub fn poll_interval_or(&self, default: Duration) -> Duration {
        self.poll_interval.unwrap_or(default)
    }

    /// The window a driver's builder set (`explicit`), else this setting, else `default`.
    pub fn visibility_window_or(&self, explicit: Option<Duration>, default: Duration) -> Duration {
        explicit.or(self.visibility_window).unwrap_or(default)
    }
}

/// The client keys a driver's settings builder has met, with the problems of their values kept to be
/// reported by its `build` beside its own ([`ClientSettings::report`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientSettings {
    /// The options read so far.
    pub options: ClientOptions,
    problems: Vec<(String, String)>,
}

impl ClientSettings {
    /// Takes `key` = `value` when `key` is a client key (answering true), recording a bad value.
    pub fn take(&mut self, key: &str, value: &str) -> bool {
        let Ok(k) = key.parse::<ClientKey>() else {
            return false;
        };
        if !value.trim().is_empty() {
            if let Err(why) = self.options.set(k, value) {
                self.problems.push((key.to_string(), why));
            }
        }
        true
    }

    /// Records every bad value met in `problems`.
    pub fn report(&self, problems: &mut Problems) {
        for (k, why) in &self.problems {
            problems.invalid(k.clone(), why.clone());
        }
    }
}

/// Whether `key` is one of the client keys every driver takes ([`ClientKey`]).
pub fn is_client_key(key: &str) -> bool {
    ClientKey::ALL.iter().any(|k| k.as_str() == key)
}

/// What every driver's endpoint setting must be ([`is_endpoint`]), in the words its error uses.
pub const ENDPOINT_RULE: &str =
    "an https:// URL with a host and no user or password in it (http:// only to this machine: 127.0.0.1, ::1 or localhost)";

/// Whether `endpoint` is fit to carry a driver's credentials: an https URL with a host that parses
/// whole (a port in range, no spaces), or an http one to this machine (a test's fake). Every request
/// carries a bearer token, a signature or a session token, which plain http would show to any host
/// on the way; and a user or password written into the URL would be shown wherever the endpoint
/// is. Checked when a driver's settings are built, before any call.
pub fn is_endpoint(endpoint: &str) -> bool {
    let Ok(u) = url::Url::parse(endpoint) else {
        return false;
    };
    let this_machine = match u.host() {
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => return false,
    };
    let scheme_ok = match u.scheme() {
        "https" => true,
        "http" => this_machine,
        _ => false,
    };
    scheme_ok && u.username().is_empty() && u.password().is_none()
}

/// Whether `endpoint` (a URL) names this machine: `127.0.0.1` (any of 127/8), `::1` or `localhost`.
/// Such an endpoint (a test's fake) is never reached through the environment's proxy, so that its
/// calls and their credentials stay on this machine.
pub fn is_loopback(endpoint: &str) -> bool {
    let rest = endpoint.split_once("://").map_or(endpoint, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = if let Some(v6) = host_port.strip_prefix('[') {
        v6.split(']').next().unwrap_or("")
    } else {
        host_port.split(':').next().unwrap_or("")
    };
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The span of one cloud call, the same shape for every driver: `orca.call` with the provider, the
/// operation, and the fields filled when known: `retry` (the retries before this attempt, 0 for the
/// first), `method`, `path`, `status`, `request_id` (the cloud's id of the request, or the driver's
/// own when it sends one), `duration_ms` (the whole attempt, `waited_ms` included) and `waited_ms`
/// (the time spent before sending: pacing, tokens). [`attempt`] opens it and fills `retry` and
/// `duration_ms`; the driver fills the others from inside the attempt ([`record_request`],
/// [`record_status`], [`record_request_id`], [`record_waited`]).
pub fn call_span(kind: &str, operation: &str) -> tracing::Span {
    tracing::info_span!(
        "orca.call",
        provider = kind,
        operation,
        retry = tracing::field::Empty,
        method = tracing::field::Empty,
        path = tracing::field::Empty,
        status = tracing::field::Empty,
        request_id = tracing::field::Empty,
        duration_ms = tracing::field::Empty,
        waited_ms = tracing::field::Empty,
    )
}

/// Records the request's `method` and `path` on the current call span ([`call_span`]).
pub fn record_request(method: &str, path: &str) {
    let span = tracing::Span::current();
    span.record("method", method);
    span.record("path", path);
}

/// Records the answer's HTTP `status` on the current call span ([`call_span`]).
pub fn record_status(status: u16) {
    tracing::Span::current().record("status", status);
}

/// Records the request's id on the current call span ([`call_span`]).
pub fn record_request_id(id: &str) {
    tracing::Span::current().record("request_id", id);
}

/// Records the time spent before sending (pacing, a token) on the current call span ([`call_span`]).
pub fn record_waited(waited: Duration) {
    tracing::Span::current().record("waited_ms", waited.as_millis() as u64);
}

/// One attempt of cloud call `operation` of driver `kind`, after `retry` retries: `attempt` runs in
/// the call's span ([`call_span`]), whose `retry` and `duration_ms` are filled here, and a failure is
/// logged (debug) in it with its code. The driver fills the request's fields from inside `attempt`.
pub async fn attempt<T, Fut>(kind: &str, operation: &str, retry: u32, attempt: Fut) -> Result<T>
where
    Fut: Future<Output = Result<T>>,
{
    let span = call_span(kind, operation);
    span.record("retry", retry);
    let started = tokio::time::Instant::now();
    let result = tracing::Instrument::instrument(attempt, span.clone()).await;
    span.record("duration_ms", started.elapsed().as_millis() as u64);
    match &result {
        Ok(_) => tracing::debug!(parent: &span, "answered"),
        Err(e) => {
            tracing::debug!(parent: &span, error = %e, code = e.code().unwrap_or(""), "call failed")
        }
    }
    result
}

/// One cloud call: `attempt()` under `policy` (only for calls that are safe to repeat, or that
/// carry the cloud's idempotency token), every attempt in its call span ([`attempt`]). The error is
/// the last attempt's, with the operation and the retries made ([`RetryPolicy::retry`]), and marked
/// when any attempt ended in a passing failure that the cloud may have acted on
/// ([`Error::may_have_acted`]): so [`Error::made_nothing`] tells a caller whether the call surely
/// changed nothing.
pub async fn call<T, F, Fut>(
    kind: &str,
    operation: &str,
    policy: &RetryPolicy,
    mut attempt: F,
) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let mut retries = 0u32;
    policy
        .retry(operation, || {
            let retry = retries;
            retries += 1;
            self::attempt(kind, operation, retry, attempt())
        })
        .await
}

/// [`call`] that records each attempt's outcome in `attempts`: a create retried after a passing
/// failure may meet what its own earlier attempt made ([`Attempts`]).
pub async fn call_recorded<T, F, Fut>(
    kind: &str,
    operation: &str,
    policy: &RetryPolicy,
    attempts: &Attempts,
    mut attempt: F,
) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    call(kind, operation, policy, || {
        let sent = attempt();
        async move {
            let r = sent.await;
            attempts.record(&r);
            r
        }
    })
    .await
}

/// What one step of [`poll_with`] found: the operation's end, or the pause before the next step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Polled<T> {
    /// The operation ended with this.
    Done(T),
    /// Not ended: step again after this pause (zero: at once).
    Again(Duration),
}

/// Follows a long-running operation to its end: calls `step` until it answers `Some`, pausing
/// `interval` between calls, and gives up after `timeout` with a passing failure naming `what` (the
/// operation goes on in the cloud; a retried call adopts it).
pub async fn poll<T, F, Fut>(
    what: &str,
    interval: Duration,
    timeout: Duration,
    mut step: F,
) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>>>,
{
    poll_with(what, timeout, || {
        let next = step();
        async move {
            Ok(match next.await? {
                Some(done) => Polled::Done(done),
                None => Polled::Again(interval),
            })
        }
    })
    .await
}

/// [`poll`] whose every step names the pause before the next one ([`Polled::Again`]): the cloud's
/// Retry-After, a pause that grows, or none after a long poll that the cloud held. Gives up, without
/// the pause, when the pause would end past `timeout` (counted on tokio's clock from the call),
/// with a passing failure naming `what`.
pub async fn poll_with<T, F, Fut>(what: &str, timeout: Duration, mut step: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Polled<T>>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let pause = match step().await? {
            Polled::Done(done) => return Ok(done),
            Polled::Again(pause) => pause,
        };
        if tokio::time::Instant::now() + pause > deadline {
            return Err(Error::transient(format!(
                "{what} did not finish within {} ms; it goes on in the cloud",
                timeout.as_millis()
            ))
            .with_operation(what));
        }
        if !pause.is_zero() {
            tokio::time::sleep(pause).await;
        }
    }
}

/// Whether an earlier attempt of one call may have acted: one that ended in a passing failure (a
/// dropped connection, a timeout, a 5xx: the cloud may have served it); a throttling answer or a
/// refusal was not served. "May": a 5xx can as well come before the cloud acted, so a machine a
/// create meets after such an attempt is not thereby this call's own: first rule out an earlier
/// call's by what the cloud shows (a token of this call's own on the machine, a request id the cloud
/// de-duplicates, a launch time before the call began).
#[derive(Debug, Default)]
pub struct Attempts {
    may_have_made: std::sync::atomic::AtomicBool,
}

impl Attempts {
    /// A call with no attempt yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records the outcome of one attempt.
    pub fn record<T>(&self, outcome: &Result<T>) {
        if let Err(Error::Transient { .. }) = outcome {
            self.may_have_made
                .store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// Whether an earlier attempt of this call may have made the machine.
    pub fn may_have_made(&self) -> bool {
        self.may_have_made.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// Locks `m`, also when a thread panicked while holding it (the value is taken as it was left).
pub fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Refuses machine `id` with `labels` unless `owner` made it ([`Error::NotOwned`]).
pub fn check_owned(id: &str, labels: &Labels, owner: &str) -> Result<()> {
    if labels::is_owned_by(labels, owner) {
        Ok(())
    } else {
        Err(Error::not_owned(id, owner))
    }
}

/// The no-stock outcome of `spec`'s create, with the cloud's words: a clean one, nothing left.
pub fn no_stock(spec: &MachineSpec, message: impl Into<String>) -> Created {
    Created::NoStock {
        machine_type: spec.machine_type.clone(),
        location: spec.location.clone(),
        message: message.into(),
        left: Vec::new(),
    }
}

/// The answer of `spec`'s create that failed with `e`: a no-stock error becomes the no-stock
/// outcome, keeping the cloud's words and what its clean-up could not remove
/// ([`Error::with_leftovers`], [`Error::left`]); any other error is answered as it is.
pub fn no_stock_of(spec: &MachineSpec, e: Error) -> Result<Created> {
    match e {
        Error::NoStock {
            message, context, ..
        } => Ok(Created::NoStock {
            machine_type: spec.machine_type.clone(),
            location: spec.location.clone(),
            message,
            left: context.left,
        }),
        other => Err(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_https_or_http_to_this_machine_without_credentials() {
        for yes in [
            "http://127.0.0.1:5000",
            "http://127.0.0.2:5000/v1",
            "http://localhost:8080",
            "http://[::1]:9000",
            "https://api.hetzner.cloud/v1",
            "https://compute.googleapis.com/compute/v1",
        ] {
            assert!(is_endpoint(yes), "{yes}");
        }
        for no in [
            "http://127.0.0.1:99999",
            "http://exa mple",
            "https://",
            "ftp://127.0.0.1",
            "127.0.0.1:5000",
            "",
            "http://api.hetzner.cloud/v1",
            "http://127.0.0.1.example.com",
            "http://10.0.0.1:8080",
            "https://user:secret@api.hetzner.cloud/v1",
            "https://user@api.hetzner.cloud/v1",
            "http://user:secret@127.0.0.1:5000",
        ] {
            assert!(!is_endpoint(no), "{no}");
        }
    }

    #[test]
    fn loopback_endpoints() {
        for yes in [
            "http://127.0.0.1:8080/v1",
            "http://localhost:1",
            "http://[::1]:9/x",
            "https://127.3.2.1",
            "http://user@127.0.0.1:5/",
        ] {
            assert!(is_loopback(yes), "{yes}");
        }
        for no in [
            "https://api.hetzner.cloud/v1",
            "https://management.azure.com:443/",
            "http://10.0.0.1",
            "http://127.0.0.1.example.com/",
            "http://localhost.example.com/",
        ] {
            assert!(!is_loopback(no), "{no}");
        }
    }

    #[test]
    fn client_options_from_settings() {
        let s = Settings::new()
            .with("ORCA_POLL_INTERVAL", "50ms")
            .with("ORCA_MAX_RETRIES", "2")
            .with("ORCA_REQUEST_TIMEOUT", "soon");
        let mut p = Problems::new();
        let o = ClientOptions::from_settings(&s, &mut p);
        assert_eq!(o.poll_interval, Some(Duration::from_millis(50)));
        let r = o.retry_policy(RetryPolicy::default());
        assert_eq!(
            (r.max_retries, r.max_elapsed),
            (2, RetryPolicy::default().max_elapsed)
        );
        let e = p.finish().unwrap_err();
        assert!(e.to_string().contains("ORCA_REQUEST_TIMEOUT"), "{e}");
    }

    #[test]
    fn the_visibility_window_is_a_client_key_below_the_builder_and_above_the_default() {
        let (default, builder) = (Duration::from_secs(30), Some(Duration::from_secs(3)));
        let mut p = Problems::new();
        let none = ClientOptions::from_settings(&Settings::new(), &mut p);
        assert_eq!(none.visibility_window_or(None, default), default);
        let s = Settings::new().with("ORCA_VISIBILITY_WINDOW", "1500ms");
        let o = ClientOptions::from_settings(&s, &mut p);
        assert!(p.finish().is_ok());
        assert_eq!(
            o.visibility_window_or(None, default),
            Duration::from_millis(1500)
        );
        assert_eq!(
            o.visibility_window_or(builder, default),
            Duration::from_secs(3)
        );
        for bad in ["0s", "later"] {
            let mut p = Problems::new();
            let s = Settings::new().with("ORCA_VISIBILITY_WINDOW", bad);
            let o = ClientOptions::from_settings(&s, &mut p);
            assert_eq!(o.visibility_window, None);
            let e = p.finish().unwrap_err();
            assert!(e.to_string().contains("ORCA_VISIBILITY_WINDOW"), "{e}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn poll_follows_to_the_end_and_gives_up_in_time() {
        let mut n = 0;
        let got = poll(
            "op",
            Duration::from_secs(1),
            Duration::from_secs(10),
            || {
                n += 1;
                let done = n == 3;
                async move { Ok(done.then_some(n)) }
            },
        )
        .await;
        assert_eq!(got, Ok(3));
        let e = poll::<(), _, _>(
            "op",
            Duration::from_secs(1),
            Duration::from_secs(3),
            || async { Ok(None) },
        )
        .await
        .unwrap_err();
        assert!(
            e.is_retryable() && e.to_string().contains("did not finish"),
            "{e}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn poll_with_pauses_as_each_step_says_and_gives_up_before_a_pause_past_the_deadline() {
        let started = tokio::time::Instant::now();
        let mut seen = Vec::new();
        let got = poll_with("op", Duration::from_secs(10), || {
            seen.push(started.elapsed().as_secs());
            let n = seen.len();
            async move {
                Ok(match n {
                    1 => Polled::Again(Duration::from_secs(2)),
                    2 => Polled::Again(Duration::ZERO),
                    3 => Polled::Again(Duration::from_secs(5)),
                    _ => Polled::Done(n),
                })
            }
        })
        .await;
        assert_eq!((got, seen), (Ok(4), vec![0, 2, 2, 7]));
        let mut steps = 0;
        let e = poll_with::<(), _, _>("op", Duration::from_secs(10), || {
            steps += 1;
            async { Ok(Polled::Again(Duration::from_secs(4))) }
        })
        .await
        .unwrap_err();
        // Steps at 0, 4 and 8 s; a pause to 12 s would end past the deadline.
        assert_eq!(steps, 3);
        assert!(e.is_retryable() && e.operation() == Some("op"), "{e}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_retries_its_attempts_and_records_their_outcomes() {
        let mut sent = 0;
        let attempts = Attempts::new();
        let got = call_recorded(
            "test",
            "things.create",
            &RetryPolicy::fast(),
            &attempts,
            || {
                sent += 1;
                let n = sent;
                async move {
                    match n {
                        1 => Err(Error::throttled(None, "429")),
                        2 => Err(Error::transient("connection reset")),
                        _ => Ok(n),
                    }
                }
            },
        )
        .await;
        assert_eq!(got, Ok(3));
        assert!(attempts.may_have_made());
        let e = call("test", "things.get", &RetryPolicy::fast(), || async {
            Err::<(), _>(Error::quota("cores"))
        })
        .await
        .unwrap_err();
        assert_eq!((e.operation(), e.retries()), (Some("things.get"), 0));
    }

    /// The outcome of [`call`] over attempts answering `answers` in turn (HTTP statuses).
    async fn call_answering(answers: &[u16]) -> Error {
        let mut sent = 0;
        call("test", "things.create", &RetryPolicy::fast(), || {
            let status = answers[sent.min(answers.len() - 1)];
            sent += 1;
            async move { Err::<(), _>(Error::from_http_status(status, "answer", None)) }
        })
        .await
        .unwrap_err()
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_says_whether_it_made_nothing() {
        // A 503 may have been acted on: the 403 that followed does not undo what the first did.
        let e = call_answering(&[503, 403]).await;
        assert_eq!(e.kind(), crate::ErrorKind::PermissionDenied);
        assert!(e.may_have_acted() && !e.made_nothing(), "{e:?}");
        // A 429 was not acted on: the 403 after it is a clean refusal.
        let e = call_answering(&[429, 403]).await;
        assert_eq!(
            (e.kind(), e.retries()),
            (crate::ErrorKind::PermissionDenied, 1)
        );
        assert!(!e.may_have_acted() && e.made_nothing(), "{e:?}");
        let e = call_answering(&[403]).await;
        assert!(e.made_nothing(), "{e:?}");
        // Passing failures until the budget ran out.
        let e = call_answering(&[503]).await;
        assert_eq!(e.kind(), crate::ErrorKind::Transient);
        assert!(e.may_have_acted() && !e.made_nothing(), "{e:?}");
        // Throttled until the budget ran out: never acted on.
        let e = call_answering(&[429]).await;
        assert!(e.made_nothing(), "{e:?}");
        // A refusal raised without a context after a passing failure keeps the mark (and its words).
        let mut sent = 0;
        let e = call("test", "things.create", &RetryPolicy::fast(), || {
            sent += 1;
            let n = sent;
            async move {
                Err::<(), _>(match n {
                    1 => Error::transient("connection reset"),
                    _ => Error::invalid("name", "taken by the cloud's own rule"),
                })
            }
        })
        .await
        .unwrap_err();
        assert!(!e.made_nothing(), "{e:?}");
        assert_eq!(e.operation(), Some("things.create"));
        assert!(e.to_string().contains("invalid name: taken"), "{e}");
    }

    #[test]
    fn only_a_passing_failure_may_have_made_the_machine() {
        let a = Attempts::new();
        a.record::<()>(&Err(Error::throttled(None, "429")));
        a.record::<()>(&Err(Error::quota("cores")));
        assert!(!a.may_have_made());
        a.record::<()>(&Err(Error::transient("connection reset")));
        assert!(a.may_have_made());
    }

    #[test]
    fn ownership_and_no_stock() {
        let l = labels::ownership_labels("p", "a");
        assert!(check_owned("m", &l, "a").is_ok());
        assert!(matches!(
            check_owned("m", &l, "b"),
            Err(Error::NotOwned { .. })
        ));
        let c = no_stock(&MachineSpec::new("n", "t", "l", "p"), "none");
        assert!(matches!(c, Created::NoStock { ref machine_type, .. } if machine_type == "t"));
        assert!(!c.may_have_left());
    }

    #[test]
    fn a_no_stock_error_with_leftovers_answers_them() {
        let spec = MachineSpec::new("n", "t", "l", "p");
        let clean = no_stock_of(&spec, Error::no_stock("", "", "none")).unwrap();
        assert_eq!(clean, no_stock(&spec, "none"));
        let e = Error::no_stock("", "", "none").with_leftovers(vec!["disk l:n-1".into()]);
        let got = no_stock_of(&spec, e).unwrap();
        let Created::NoStock {
            ref machine_type,
            ref location,
            ref message,
            ref left,
        } = got
        else {
            panic!("{got:?}");
        };
        assert_eq!((machine_type.as_str(), location.as_str()), ("t", "l"));
        assert!(
            message.contains("none; the clean-up could not remove: disk l:n-1"),
            "{message}"
        );
        assert_eq!(left, &["disk l:n-1".to_string()]);
        assert!(got.may_have_left());
        // Back into an error, the list stays and the create is no longer "made nothing".
        let e = got.clone().into_result().unwrap_err();
        assert_eq!(e.left(), got.left());
        assert!(!e.made_nothing());
        assert!(no_stock(&spec, "none")
            .into_result()
            .unwrap_err()
            .made_nothing());
        assert!(matches!(
            no_stock_of(&spec, Error::quota("cores")),
            Err(Error::Quota { .. })
        ));
    }

    /// An answer serialized before `left` existed loads as a clean no stock; a clean one is written
    /// without it.
    #[test]
    fn a_no_stock_without_left_reads_as_clean() {
        let old = r#"{"outcome":"no_stock","machine_type":"t","location":"l","message":"m"}"#;
        let c: Created = serde_json::from_str(old).unwrap();
        assert_eq!(c, no_stock(&MachineSpec::new("n", "t", "l", "p"), "m"));
        assert_eq!(serde_json::to_string(&c).unwrap(), old);
        let e = Error::no_stock("", "", "m").with_leftovers(vec!["disk d".into()]);
        let c = no_stock_of(&MachineSpec::new("n", "t", "l", "p"), e).unwrap();
        let back: Created = serde_json::from_str(&serde_json::to_string(&c).unwrap()).unwrap();
        assert_eq!(back, c);
    }
}
