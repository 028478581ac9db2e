//! Paces Resource Manager requests from what every answer says is left
//! (`x-ms-ratelimit-remaining-subscription-reads` / `-writes` / `-deletes`, and the subscription's
//! `-global-` counts): Resource Manager throttles each kind of request with its own token bucket
//! (learn.microsoft.com, "Understand how Azure Resource Manager throttles requests"). The answers
//! tell what is left but not how fast it comes back, so the model refills each bucket at the
//! published rate (reads 25 a second, writes and deletes 10), halves that rate for its kind at
//! every 429, whose `Retry-After` the retry policy then waits, and brings it back by an eighth of
//! the published rate with every answer not refused. A request that would take the model
//! below one waits for its refill instead of meeting a 429; until the first answer of a kind, its
//! requests go one at a time.

use std::sync::Mutex;
use std::time::Duration;

use reqwest::header::HeaderMap;
use reqwest::Method;
use tokio::time::Instant;

/// The kinds of request Resource Manager counts apart, and their published refill a second.
const KINDS: [(&str, f64); 3] = [("reads", 25.0), ("writes", 10.0), ("deletes", 10.0)];

/// The kind of `method`: an index into [`KINDS`].
fn kind(method: &Method) -> usize {
    match *method {
        Method::GET | Method::HEAD => 0,
        Method::DELETE => 2,
        _ => 1,
    }
}

#[derive(Debug)]
struct Bucket {
    /// Whether an answer told what is left.
    known: bool,
    tokens: f64,
    /// The most an answer said was left, with the answer's own request: the model never refills
    /// beyond it.
    most: f64,
    rate: f64,
    /// Requests let go whose answers have not been seen.
    outstanding: f64,
    at: Instant,
}

/// The model of the three buckets.
#[derive(Debug)]
pub(crate) struct Pacer {
    buckets: Mutex<Vec<Bucket>>,
}

/// A request taken from the model and not answered yet; dropped unanswered (the call was
/// cancelled), it gives the request back.
pub(crate) struct Ticket<'a> {
    pacer: &'a Pacer,
    kind: usize,
    open: bool,
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        if self.open {
            self.open = false;
            let mut b = self.pacer.lock();
            b[self.kind].outstanding = (b[self.kind].outstanding - 1.0).max(0.0);
        }
    }
}

impl Default for Pacer {
    fn default() -> Self {
        Pacer {
            buckets: Mutex::new(
                KINDS
                    .iter()
                    .map(|&(_, rate)| Bucket {
                        known: false,
                        tokens: 0.0,
                        most: 0.0,
                        rate,
                        outstanding: 0.0,
                        at: Instant::now(),
                    })
                    .collect(),
            ),
        }
    }
}

impl Pacer {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Bucket>> {
        self.buckets.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes one request of `method`'s kind from the model, first waiting while none is left. A
    /// waiter looks again at least once a second (a later answer may tell more).
    pub(crate) async fn before(&self, method: &Method) -> (Duration, Ticket<'_>) {
        let k = kind(method);
        let started = Instant::now();
        loop {
            let wait = {
                let mut all = self.lock();
                let b = &mut all[k];
                let now = Instant::now();
                if b.known {
                    b.tokens = (b.tokens + b.rate * (now - b.at).as_secs_f64()).min(b.most);
                    b.at = now;
                }
                if !b.known && b.outstanding >= 1.0 {
                    // Until an answer tells what is left, one request of the kind at a time: a
                    // burst could otherwise spend a small bucket unseen.
                    Some(Duration::from_millis(10))
                } else if !b.known || b.tokens >= 1.0 {
                    b.tokens -= 1.0;
                    b.outstanding += 1.0;
                    None
                } else {
                    Some(Duration::from_secs_f64(
                        ((1.0 - b.tokens) / b.rate).min(1.0),
                    ))
                }
            };
            let Some(w) = wait else { break };
            tokio::time::sleep(w.max(Duration::from_millis(1))).await;
        }
        let ticket = Ticket {
            pacer: self,
            kind: k,
            open: true,
        };
        (started.elapsed(), ticket)
    }

    /// Learns what is left from an answer's headers (`None`: no answer came; `refused`: it was a
    /// 429), and closes the ticket.
    pub(crate) fn observe(
        &self,
        ticket: &mut Ticket<'_>,
        headers: Option<&HeaderMap>,
        refused: bool,
    ) {
        let k = ticket.kind;
        let mut all = self.lock();
        let b = &mut all[k];
        if ticket.open {
            ticket.open = false;
            b.outstanding = (b.outstanding - 1.0).max(0.0);
        }
        let Some(headers) = headers else { return };
        let name = KINDS[k].0;
        let count = |h: String| {
            headers
                .get(h.as_str())
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<f64>().ok())
                .filter(|v| v.is_finite() && *v >= 0.0)
        };
        let left = [
            count(format!("x-ms-ratelimit-remaining-subscription-{name}")),
            count(format!(
                "x-ms-ratelimit-remaining-subscription-global-{name}"
            )),
        ]
        .into_iter()
        .flatten()
        .reduce(f64::min);
        let published = KINDS[k].1;
        if refused {
            // The model ran ahead of the bucket: it refills slower than thought.
            b.rate = (b.rate / 2.0).max(0.01);
        } else {
            // The published refill does not change: a 429 may have been another client's burst, or
            // another limit's. Each answer the bucket did not refuse brings the rate back by an
            // eighth of the published one (as TCP's congestion control grows its window back), so
            // that the 429s of a long life do not leave every request waiting minutes.
            b.rate = (b.rate + published / 8.0).min(published);
        }
        let Some(left) = left else {
            if refused && b.known {
                b.tokens = b.tokens.min(0.0);
            }
            return;
        };
        // The cloud's count, less the requests let go and not answered yet (some of them may be
        // counted already: that errs on the slow side).
        b.known = true;
        // The answer's own request was in the bucket too.
        b.most = b.most.max(left + 1.0);
        b.tokens = if refused { 0.0 } else { left } - b.outstanding;
        b.at = Instant::now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    fn left(kind: &str, n: u32) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            reqwest::header::HeaderName::from_bytes(
                format!("x-ms-ratelimit-remaining-subscription-{kind}").as_bytes(),
            )
            .unwrap(),
            HeaderValue::from_str(&n.to_string()).unwrap(),
        );
        h
    }

    #[tokio::test(start_paused = true)]
    async fn each_kind_is_paced_apart_from_what_is_left_at_its_rate() {
        let p = Pacer::default();
        let (w, mut t) = p.before(&Method::PUT).await;
        assert_eq!(w, Duration::ZERO, "nothing told yet: no wait");
        p.observe(&mut t, Some(&left("writes", 1)), false);
        assert_eq!(p.before(&Method::PUT).await.0, Duration::ZERO);
        // None left: the next write waits for a tenth of a second (10 a second)...
        let (w, _t) = p.before(&Method::PUT).await;
        assert!(w >= Duration::from_millis(90), "{w:?}");
        // ...while reads, told nothing, go at once.
        assert_eq!(p.before(&Method::GET).await.0, Duration::ZERO);
        // A 429 halves the kind's rate.
        let (_, mut t) = p.before(&Method::DELETE).await;
        p.observe(&mut t, Some(&left("deletes", 0)), true);
        let (w, _t) = p.before(&Method::DELETE).await;
        assert!(w >= Duration::from_millis(190), "{w:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_kinds_rate_comes_back_after_answers_that_are_not_refused() {
        let p = Pacer::default();
        // Many 429s over a run: the model's write rate falls far below the published 10 a second.
        for _ in 0..12 {
            let (_, mut t) = p.before(&Method::PUT).await;
            p.observe(&mut t, Some(&left("writes", 0)), true);
        }
        let (slow, t) = p.before(&Method::PUT).await;
        assert!(slow > Duration::from_secs(10), "{slow:?}");
        drop(t);
        // Answers the bucket did not refuse bring it back to the published rate, no further.
        for _ in 0..20 {
            let (_, mut t) = p.before(&Method::PUT).await;
            p.observe(&mut t, Some(&left("writes", 5)), false);
        }
        let (_, mut t) = p.before(&Method::PUT).await;
        p.observe(&mut t, Some(&left("writes", 0)), false);
        let (w, _t) = p.before(&Method::PUT).await;
        assert!(
            w >= Duration::from_millis(90) && w <= Duration::from_millis(110),
            "a tenth of a second at 10 a second: {w:?}"
        );
    }
}
