//! Paces a cloud's rate quotas counted in fixed intervals (so many requests of a group a minute),
//! for a cloud that tells neither what is left nor when it refills: it only refuses a request over
//! the quota, until the next interval starts.
//!
//! The pacer learns each group's quota from its first refusal: the requests of the group that may
//! have counted within one interval before it (the quota is that many, unless some other client
//! spent part of it). After a refusal the group holds its requests until the interval that refused
//! has ended, as far as the requests tell: one interval after the oldest of those requests. From
//! then on it lets at most the quota go in any span of one interval, whatever the phase of the
//! cloud's intervals: a span that never holds more than the quota makes no interval hold more. A
//! quota set by the operator is used from the first request, so that not even the first refusal
//! happens.
//!
//! A refusal that says when to try again (a Retry-After) is the cloud's word: the group waits that
//! long, and nothing is learnt from it.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// The longest a request blocked only by its group's requests in flight waits before looking again.
const LOOK_AGAIN: Duration = Duration::from_millis(50);

/// How a request paced by a [`QuotaPacer`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    /// Answered, or it may have reached the cloud (no answer came): it counts.
    Counted,
    /// Refused over the quota, with no word on when to try again.
    Refused,
    /// Refused, with the cloud's word to try again after this long.
    RefusedFor(Duration),
}

#[derive(Debug)]
struct Group {
    /// The requests of a span of one interval, configured or learnt.
    quota: Option<u32>,
    /// Whether the operator set the quota (then it is never learnt lower).
    configured: bool,
    /// When each request that may have counted ended, oldest first, within the last interval.
    counted: VecDeque<Instant>,
    /// Requests let go and not settled yet.
    outstanding: u32,
    /// No request of the group before this.
    hold_until: Option<Instant>,
}

/// The rate quotas of some groups of requests, each counted apart in fixed intervals of one length.
#[derive(Debug)]
pub struct QuotaPacer {
    interval: Duration,
    groups: Mutex<Vec<Group>>,
}

/// A request let go by a [`QuotaPacer`] and not settled yet. Dropped unsettled (the call was
/// cancelled, or failed without an answer), it counts: it may have reached the cloud.
#[derive(Debug)]
pub struct QuotaTicket<'a> {
    pacer: &'a QuotaPacer,
    group: usize,
    open: bool,
}

impl Drop for QuotaTicket<'_> {
    fn drop(&mut self) {
        if self.open {
            self.pacer.end(self.group, Settled::Counted);
        }
    }
}

impl QuotaTicket<'_> {
    /// Ends the request as `how` says; for a refusal, answers how long its group now holds its
    /// requests (the time to the interval after the one that refused, as far as it is known).
    pub fn settle(mut self, how: Settled) -> Option<Duration> {
        self.open = false;
        self.pacer.end(self.group, how)
    }
}

impl QuotaPacer {
    /// `groups` groups counted apart in intervals of `interval`, each with `quota` requests an
    /// interval when known (`None`: learnt from the first refusal).
    pub fn new(groups: usize, interval: Duration, quota: Option<u32>) -> QuotaPacer {
        let quota = quota.map(|q| q.max(1));
        QuotaPacer {
            interval,
            groups: Mutex::new(
                (0..groups)
                    .map(|_| Group {
                        quota,
                        configured: quota.is_some(),
                        counted: VecDeque::new(),
                        outstanding: 0,
                        hold_until: None,
                    })
                    .collect(),
            ),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Group>> {
        // Counters and times, valid after any panic in between.
        self.groups.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The quota of `group` as known now (configured or learnt).
    pub fn quota(&self, group: usize) -> Option<u32> {
        self.lock()[group].quota
    }

    /// Lets one request of `group` go, first waiting while its quota is spent or the group is held;
    /// answers the time waited.
    pub async fn before(&self, group: usize) -> (Duration, QuotaTicket<'_>) {
        let started = Instant::now();
        loop {
            let wait = self.try_take(group, Instant::now());
            match wait {
                None => break,
                Some(w) => tokio::time::sleep(w.max(Duration::from_millis(1))).await,
            }
        }
        let ticket = QuotaTicket {
            pacer: self,
            group,
            open: true,
        };
        (started.elapsed(), ticket)
    }

    /// Takes one request of `group` at `now`, or answers how long to wait before looking again.
    fn try_take(&self, group: usize, now: Instant) -> Option<Duration> {
        let mut all = self.lock();
        let g = &mut all[group];
        if let Some(h) = g.hold_until.filter(|h| *h > now) {
            return Some(h - now);
        }
        while g.counted.front().is_some_and(|t| *t + self.interval <= now) {
            g.counted.pop_front();
        }
        if let Some(q) = g.quota {
            let used = g.counted.len() as u32 + g.outstanding;
            if used >= q {
                // The span of one interval ending now holds the quota: the request waits until
                // enough of the counted ones leave it (those in flight count until they end).
                let leave = (used - q) as usize;
                return Some(match g.counted.get(leave) {
                    Some(t) if g.outstanding < q => *t + self.interval - now,
                    _ => LOOK_AGAIN,
                });
            }
        }
        g.outstanding += 1;
        None
    }

    fn end(&self, group: usize, how: Settled) -> Option<Duration> {
        let now = Instant::now();
        let mut all = self.lock();
        let g = &mut all[group];
        g.outstanding = g.outstanding.saturating_sub(1);
        while g.counted.front().is_some_and(|t| *t + self.interval <= now) {
            g.counted.pop_front();
        }
        let until = match how {
            Settled::Counted => {
                g.counted.push_back(now);
                return None;
            }
            Settled::RefusedFor(after) => now + after,
            Settled::Refused => {
                // The interval that refused holds at most what counted within one interval
                // before and what is still in flight (answers of a burst come in any order: the
                // last refusal of a burst to come back sees every success of it, and no refusal).
                let n = g.counted.len() as u32 + g.outstanding;
                if !g.configured && n > 0 {
                    g.quota = Some(g.quota.map_or(n, |q| q.min(n)));
                }
                // That interval began no later than now and, if these requests are all of it, no
                // earlier than the oldest of them: it surely ends one interval after that.
                g.counted.front().copied().unwrap_or(now) + self.interval
            }
        };
        let until = g.hold_until.filter(|h| *h > until).unwrap_or(until);
        g.hold_until = Some(until);
        Some(until.saturating_duration_since(now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE: Duration = Duration::from_secs(60);

    /// Takes `n` requests of `group` at once, settling each as counted.
    async fn spend(p: &QuotaPacer, group: usize, n: u32) -> Duration {
        let mut waited = Duration::ZERO;
        for _ in 0..n {
            let (w, t) = p.before(group).await;
            waited += w;
            t.settle(Settled::Counted);
        }
        waited
    }

    #[tokio::test(start_paused = true)]
    async fn after_one_refusal_no_request_of_that_group_until_the_next_interval() {
        let p = QuotaPacer::new(2, MINUTE, None);
        let start = Instant::now();
        assert_eq!(
            spend(&p, 0, 5).await,
            Duration::ZERO,
            "nothing known: no wait"
        );
        tokio::time::advance(Duration::from_secs(10)).await;
        let (_, t) = p.before(0).await;
        let hold = t.settle(Settled::Refused).unwrap();
        // The oldest counted request ended at the start: its interval is over a minute after it.
        assert_eq!(hold, Duration::from_secs(50));
        assert_eq!(
            p.quota(0),
            Some(5),
            "learnt: what counted before the refusal"
        );
        // Another group is not held.
        assert_eq!(spend(&p, 1, 1).await, Duration::ZERO);
        let (w, t) = p.before(0).await;
        assert_eq!(Instant::now() - start, MINUTE, "{w:?}");
        t.settle(Settled::Counted);
        // From then on at most the quota in any minute: four more now, the sixth a minute after the
        // first of them.
        assert_eq!(spend(&p, 0, 4).await, Duration::ZERO);
        let (w, _t) = p.before(0).await;
        assert_eq!(w, MINUTE);
    }

    #[tokio::test(start_paused = true)]
    async fn the_quota_learnt_from_a_burst_is_what_it_got_through_whatever_the_order_of_answers() {
        let p = QuotaPacer::new(1, MINUTE, None);
        let mut burst = Vec::new();
        for _ in 0..5 {
            burst.push(p.before(0).await.1);
        }
        let mut answers = burst.into_iter();
        let mut next = || answers.next().unwrap();
        next().settle(Settled::Counted);
        next().settle(Settled::Counted);
        next().settle(Settled::Refused);
        next().settle(Settled::Counted);
        next().settle(Settled::Refused);
        assert_eq!(p.quota(0), Some(3));
    }

    #[tokio::test(start_paused = true)]
    async fn with_a_quota_set_the_first_interval_is_paced_too() {
        let p = QuotaPacer::new(1, MINUTE, Some(3));
        assert_eq!(spend(&p, 0, 3).await, Duration::ZERO);
        tokio::time::advance(Duration::from_secs(20)).await;
        assert_eq!(spend(&p, 0, 1).await, Duration::from_secs(40));
        // A refusal all the same (another client spends the quota too) holds, and learns nothing
        // lower than what the operator said.
        let (_, t) = p.before(0).await;
        assert!(t.settle(Settled::Refused).is_some());
        assert_eq!(p.quota(0), Some(3));
    }

    #[tokio::test(start_paused = true)]
    async fn requests_in_flight_count_and_a_dropped_one_counts_too() {
        let p = QuotaPacer::new(1, MINUTE, Some(2));
        let (_, a) = p.before(0).await;
        let (_, b) = p.before(0).await;
        // Both in flight: a third waits for one of them to end, then a minute after it.
        let third = async {
            let (w, _t) = p.before(0).await;
            w
        };
        let ends = async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            drop(a);
            b.settle(Settled::Counted);
        };
        let (w, ()) = tokio::join!(third, ends);
        assert!(w >= Duration::from_secs(61), "{w:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_retry_after_is_waited_and_teaches_nothing() {
        let p = QuotaPacer::new(1, MINUTE, None);
        spend(&p, 0, 3).await;
        let (_, t) = p.before(0).await;
        assert_eq!(
            t.settle(Settled::RefusedFor(Duration::from_secs(2))),
            Some(Duration::from_secs(2))
        );
        assert_eq!(p.quota(0), None);
        let (w, _t) = p.before(0).await;
        assert_eq!(w, Duration::from_secs(2));
    }

    #[tokio::test(start_paused = true)]
    async fn a_refusal_with_nothing_counted_holds_an_interval_and_learns_nothing() {
        let p = QuotaPacer::new(1, MINUTE, None);
        let (_, t) = p.before(0).await;
        assert_eq!(t.settle(Settled::Refused), Some(MINUTE));
        assert_eq!(
            p.quota(0),
            None,
            "another client spent it: no quota of zero"
        );
    }
}
