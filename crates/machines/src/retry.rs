//! The one retry policy every driver uses ([contract](crate::contract) 12), and the one pagination loop ([contract](crate::contract) 4).
//!
//! Only errors that are [`Error::is_retryable`] are retried (throttling, 5xx, dropped connections and
//! timeouts, which drivers map to [`Error::Throttled`] and [`Error::Transient`]), with exponential
//! backoff and jitter, honouring the cloud's Retry-After, bounded in count and in total time. A
//! resource locked by another operation ([`Error::Busy`]) is waited for apart: at a steady pause, for
//! as long as [`RetryPolicy::busy_wait`] allows, because such a lock lasts as long as the operation
//! holding it, which no backoff of a few retries outlasts. A driver
//! passes a create through it only together with the cloud's idempotency token, so that a retried create
//! never makes a second machine.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::{Error, Result};

/// How often and how long to retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first attempt (0: no retry).
    pub max_retries: u32,
    /// The backoff before the first retry; doubled for each further one.
    pub initial_backoff: Duration,
    /// The longest backoff between two attempts (a longer Retry-After is still honoured, within
    /// `max_elapsed`).
    pub max_backoff: Duration,
    /// The longest time from the first attempt to the start of the last one, not counting the time
    /// spent waiting for a busy resource.
    pub max_elapsed: Duration,
    /// The longest time to wait for a resource locked by another operation ([`Error::Busy`]): such
    /// answers are retried every [`RetryPolicy::BUSY_PAUSE`] (at most `max_backoff`) without counting
    /// against `max_retries` or `max_elapsed`. A driver sets it to its operation timeout, as the lock
    /// lasts as long as the operation holding it. Zero: a busy answer is retried as any other.
    pub busy_wait: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_retries: 6,
            initial_backoff: Duration::from_millis(250),
            max_backoff: Duration::from_secs(20),
            max_elapsed: Duration::from_secs(120),
            busy_wait: Duration::from_secs(600),
        }
    }
}

impl RetryPolicy {
    /// No retries at all.
    pub const NEVER: RetryPolicy = RetryPolicy {
        max_retries: 0,
        initial_backoff: Duration::ZERO,
        max_backoff: Duration::ZERO,
        max_elapsed: Duration::ZERO,
        busy_wait: Duration::ZERO,
    };

    /// The pause between two tries of a busy resource (capped by `max_backoff`).
    pub const BUSY_PAUSE: Duration = Duration::from_secs(5);

    /// A fast policy for tests against local fakes: the same count, millisecond backoffs.
    pub fn fast() -> Self {
        RetryPolicy {
            max_retries: 6,
            initial_backoff: Duration::from_millis(2),
            max_backoff: Duration::from_millis(50),
            max_elapsed: Duration::from_secs(10),
            busy_wait: Duration::from_secs(10),
        }
    }

    /// This policy waiting up to `busy_wait` for a busy resource.
    pub fn with_busy_wait(self, busy_wait: Duration) -> Self {
        RetryPolicy { busy_wait, ..self }
    }

    /// The backoff before retry number `retry` (0-based): exponential, capped, with "equal jitter"
    /// (between half and all of the exponential value), so that many clients do not retry in step.
    pub fn backoff(&self, retry: u32) -> Duration {
        let exp = self
            .initial_backoff
            .saturating_mul(1u32.checked_shl(retry.min(20)).unwrap_or(u32::MAX))
            .min(self.max_backoff);
        let half = exp / 2;
        half + exp.mul_f64(fastrand::f64() * 0.5)
    }

    /// The wait before retry number `retry` after `error`: the cloud's Retry-After when it gave one
    /// (plus a little jitter), else [`backoff`](Self::backoff).
    pub fn delay_for(&self, retry: u32, error: &Error) -> Duration {
        match error.retry_after() {
            Some(after) => after + Duration::from_millis(fastrand::u64(0..50)),
            None => self.backoff(retry),
        }
    }

    /// Runs `call` until it succeeds, fails with an error that is not retryable, or the policy's count or
    /// time runs out (then the last error is returned). `operation` names the call in traces.
    ///
    /// The error returned says what the attempts may have done: when any attempt ended in a passing
    /// failure ([`Error::Transient`]: a dropped connection, a timeout, a 5xx, which the cloud may have
    /// acted on), it is marked [`Error::with_may_have_acted`], whatever the last attempt answered; a
    /// throttling answer or a refusal was not acted on and marks nothing. [`Error::made_nothing`]
    /// reads the mark.
    pub async fn retry<T, F, Fut>(&self, operation: &str, mut call: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let mut tries = Tries::new();
        let give_up = |e: Error, tries: &Tries| {
            let e = if tries.may_have_acted {
                e.with_may_have_acted()
            } else {
                e
            };
            e.with_operation(operation).with_retries(tries.retries())
        };
        loop {
            // Every attempt runs in a span that names the operation and how many retries came
            // before it: the driver's call span (`orca.call`) is its child.
            let attempt = tracing::info_span!("orca.attempt", operation, retry = tries.retries());
            let outcome = tracing::Instrument::instrument(call(), attempt).await;
            let e = match outcome {
                Ok(v) => {
                    if tries.retries() > 0 {
                        tracing::debug!(
                            operation,
                            retries = tries.retries(),
                            "succeeded after retries"
                        );
                    }
                    return Ok(v);
                }
                Err(e) => e,
            };
            if let Error::Transient { .. } = &e {
                tries.may_have_acted = true;
            }
            let Some(delay) = self.pause_after(&e, &tries) else {
                if e.is_retryable() {
                    tracing::warn!(operation, retries = tries.retries(), error = %e, "retry budget spent");
                }
                return Err(give_up(e, &tries));
            };
            tracing::debug!(operation, retry = tries.retries() + 1, delay_ms = delay.as_millis() as u64, error = %e, "retrying");
            tokio::time::sleep(delay).await;
            tries.count(self.waits_for(&e), delay);
        }
    }

    /// Whether `e` is waited for as a busy resource (within `busy_wait`, outside the other bounds).
    fn waits_for(&self, e: &Error) -> bool {
        matches!(e, Error::Busy { .. }) && !self.busy_wait.is_zero()
    }

    /// The pause before trying again after `e`, or `None` when the policy gives up: a busy resource
    /// is waited for within `busy_wait`, anything else retryable within `max_retries` and
    /// `max_elapsed` (the time spent on busy resources not counted).
    fn pause_after(&self, e: &Error, tries: &Tries) -> Option<Duration> {
        if !e.is_retryable() {
            return None;
        }
        if self.waits_for(e) {
            let pause = Self::BUSY_PAUSE.min(self.max_backoff);
            return (tries.busy_time + pause <= self.busy_wait).then_some(pause);
        }
        if tries.others >= self.max_retries {
            return None;
        }
        let delay = self.delay_for(tries.others, e);
        let spent = tries.start.elapsed().saturating_sub(tries.busy_time);
        (spent + delay <= self.max_elapsed).then_some(delay)
    }
}

/// What a run of [`RetryPolicy::retry`] has done so far.
struct Tries {
    start: Instant,
    /// Retries after answers other than a busy resource: what `max_retries` bounds.
    others: u32,
    /// Retries after a busy resource.
    busy: u32,
    /// The time paused for busy resources: what `busy_wait` bounds, and what `max_elapsed` leaves out.
    busy_time: Duration,
    /// Whether an attempt ended in a passing failure the cloud may have acted on.
    may_have_acted: bool,
}

impl Tries {
    fn new() -> Self {
        Tries {
            start: Instant::now(),
            others: 0,
            busy: 0,
            busy_time: Duration::ZERO,
            may_have_acted: false,
        }
    }

    fn retries(&self) -> u32 {
        self.others + self.busy
    }

    fn count(&mut self, busy: bool, paused: Duration) {
        if busy {
            self.busy += 1;
            self.busy_time += paused;
        } else {
            self.others += 1;
        }
    }
}

/// One page of a listing: its items and the token of the next page, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page<T> {
    /// The items on this page.
    pub items: Vec<T>,
    /// The next page's token (a page number, `pageToken`, `nextLink`, `NextToken`), or `None` at the end.
    pub next: Option<String>,
}

/// The most pages [`all_pages`] reads before it reports a runaway listing.
pub const MAX_PAGES: usize = 100_000;

/// Reads every page: calls `fetch(None)`, then `fetch(Some(next))` while a page names a next one.
/// An empty token ends the listing; a token that repeats the previous one is an error, not a loop.
pub async fn all_pages<T, F, Fut>(mut fetch: F) -> Result<Vec<T>>
where
    F: FnMut(Option<String>) -> Fut,
    Fut: Future<Output = Result<Page<T>>>,
{
    let mut out = Vec::new();
    let mut token: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let page = fetch(token.clone()).await?;
        out.extend(page.items);
        match page.next.filter(|t| !t.is_empty()) {
            None => return Ok(out),
            Some(next) if Some(&next) == token.as_ref() => {
                return Err(Error::other(format!(
                    "the listing named page {next:?} as its own next page"
                )))
            }
            Some(next) => token = Some(next),
        }
    }
    Err(Error::other(format!(
        "the listing had more than {MAX_PAGES} pages"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[test]
    fn backoff_grows_and_is_capped() {
        let p = RetryPolicy {
            max_retries: 10,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(1),
            max_elapsed: Duration::from_secs(60),
            ..RetryPolicy::default()
        };
        for _ in 0..50 {
            let b0 = p.backoff(0);
            assert!(
                b0 >= Duration::from_millis(50) && b0 <= Duration::from_millis(100),
                "{b0:?}"
            );
            let b3 = p.backoff(3);
            assert!(
                b3 >= Duration::from_millis(400) && b3 <= Duration::from_millis(800),
                "{b3:?}"
            );
            let b30 = p.backoff(30);
            assert!(
                b30 >= Duration::from_millis(500) && b30 <= Duration::from_secs(1),
                "{b30:?}"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn retries_transient_then_succeeds() {
        let calls = AtomicU32::new(0);
        let r = RetryPolicy::default()
            .retry("t", || async {
                if calls.fetch_add(1, Ordering::SeqCst) < 2 {
                    Err(Error::transient("503"))
                } else {
                    Ok(7)
                }
            })
            .await;
        assert_eq!(r, Ok(7));
        assert_eq!(calls.load(Ordering::SeqCst), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn never_retries_what_is_not_retryable() {
        let calls = AtomicU32::new(0);
        let r: Result<()> = RetryPolicy::default()
            .retry("t", || async {
                calls.fetch_add(1, Ordering::SeqCst);
                Err(Error::quota("cores"))
            })
            .await;
        assert!(matches!(r, Err(Error::Quota { .. })));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn bounded_in_count_and_honours_retry_after() {
        let calls = AtomicU32::new(0);
        let started = tokio::time::Instant::now();
        let p = RetryPolicy {
            max_retries: 3,
            ..RetryPolicy::default()
        };
        let r: Result<()> = p
            .retry("t", || async {
                calls.fetch_add(1, Ordering::SeqCst);
                Err(Error::throttled(Some(Duration::from_secs(5)), "429"))
            })
            .await;
        assert!(matches!(r, Err(Error::Throttled { .. })));
        assert_eq!(calls.load(Ordering::SeqCst), 4);
        let e = r.unwrap_err();
        assert_eq!((e.operation(), e.retries()), (Some("t"), 3), "{e}");
        // Three waits of Retry-After (5 s) each, plus jitter under 50 ms each.
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_secs(15) && waited < Duration::from_millis(15_200),
            "{waited:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn bounded_in_time() {
        let calls = AtomicU32::new(0);
        let p = RetryPolicy {
            max_retries: 100,
            max_elapsed: Duration::from_secs(30),
            ..RetryPolicy::default()
        };
        let r: Result<()> = p
            .retry("t", || async {
                calls.fetch_add(1, Ordering::SeqCst);
                Err(Error::throttled(Some(Duration::from_secs(10)), "429"))
            })
            .await;
        assert!(r.is_err());
        // 10 s + 10 s fit in 30 s with jitter; a third wait would end after 30 s.
        assert_eq!(calls.load(Ordering::SeqCst), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_busy_resource_is_waited_for_as_long_as_busy_wait_allows() {
        // Locked for 60 s: far longer than six doubling retries from 250 ms would wait, yet the
        // call succeeds, and its busy time counts against neither max_retries nor max_elapsed.
        let started = tokio::time::Instant::now();
        let calls = AtomicU32::new(0);
        let p = RetryPolicy {
            max_elapsed: Duration::from_secs(30),
            ..RetryPolicy::default()
        };
        let r = p
            .retry("t", || async {
                calls.fetch_add(1, Ordering::SeqCst);
                if started.elapsed() < Duration::from_secs(60) {
                    Err(Error::busy("another operation is in progress"))
                } else {
                    Ok(1)
                }
            })
            .await;
        assert_eq!(r, Ok(1));
        assert_eq!(
            calls.load(Ordering::SeqCst),
            13,
            "one try every 5 s for 60 s"
        );

        // A lock that outlasts busy_wait ends in the busy error, naming how often it was tried,
        // and still says that nothing was made.
        let r: Result<()> = p
            .with_busy_wait(Duration::from_secs(20))
            .retry("t", || async { Err(Error::busy("locked")) })
            .await;
        let e = r.unwrap_err();
        assert_eq!((e.kind(), e.retries()), (crate::ErrorKind::Busy, 4), "{e}");
        assert!(e.made_nothing(), "{e}");

        // With no busy wait, a busy answer is retried as any other, within max_retries.
        let calls = AtomicU32::new(0);
        let r: Result<()> = p
            .with_busy_wait(Duration::ZERO)
            .retry("t", || async {
                calls.fetch_add(1, Ordering::SeqCst);
                Err(Error::busy("locked"))
            })
            .await;
        assert!(r.is_err());
        assert_eq!(calls.load(Ordering::SeqCst), 7);
    }

    #[tokio::test]
    async fn all_pages_reads_every_page() {
        let data: Vec<u32> = (0..7).collect();
        let calls = AtomicU32::new(0);
        let got = all_pages(|token| {
            calls.fetch_add(1, Ordering::SeqCst);
            let start: usize = token.map(|t| t.parse().unwrap()).unwrap_or(0);
            let items = data[start..(start + 2).min(data.len())].to_vec();
            let next = (start + 2 < data.len()).then(|| (start + 2).to_string());
            async move { Ok(Page { items, next }) }
        })
        .await
        .unwrap();
        assert_eq!(got, data);
        assert_eq!(calls.load(Ordering::SeqCst), 4);
    }

    #[tokio::test]
    async fn all_pages_refuses_a_loop() {
        let r: Result<Vec<u32>> = all_pages(|_| async {
            Ok(Page {
                items: vec![1],
                next: Some("same".into()),
            })
        })
        .await;
        assert!(r.unwrap_err().to_string().contains("its own next page"));
    }
}
