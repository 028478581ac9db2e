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
//!
//! A cloud whose intervals are synchronized, each starting on the wall clock (Compute Engine's
//! minutes start at second :00 UTC), is paced on them instead ([`QuotaPacer::synchronized`]): the
//! pacer counts the requests of each interval, lets at most the quota go within it, and after a
//! refusal learns the quota from what the interval counted and holds the group until the next one
//! starts. The cloud counts a request in the interval in which it receives it, on its own clock; a
//! request let go within [`CLOCK_MARGIN`] of a boundary may be counted on either side of it, so it
//! counts on both, and a group whose interval is spent waits until the margin after the next
//! boundary. Requests in flight count as they were let go; a refused one counts nowhere.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use super::clock::{interval_of, interval_start, UtcClock};

/// How long after an interval ends a request that could still be counted in it waits, and how close
/// to a boundary a request counts on both sides of it. The cloud counts a request in the interval
/// in which it receives it, on its own clock: ours (NTP keeps both within tens of milliseconds) may
/// read a little ahead of or behind the cloud's, and a request takes a moment to get there. A
/// second covers both, and costs at most a second an interval.
pub const CLOCK_MARGIN: Duration = Duration::from_secs(1);

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

#[derive(Debug, Default)]
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
    /// On synchronized intervals: the requests that may count in each interval (by its number from
    /// the Unix epoch) from the earliest a request let go now could count in, oldest first.
    spent: VecDeque<(u64, u32)>,
}

impl Group {
    /// The requests that may count in interval `n`.
    fn spent_in(&self, n: u64) -> u32 {
        self.spent
            .iter()
            .find(|(m, _)| *m == n)
            .map_or(0, |(_, c)| *c)
    }

    /// Counts one request more (`more`) or less in each of the intervals `ns`.
    fn count(&mut self, ns: std::ops::RangeInclusive<u64>, more: bool) {
        for n in ns {
            match self.spent.iter_mut().find(|(m, _)| *m == n) {
                Some((_, c)) if more => *c += 1,
                Some((_, c)) => *c = c.saturating_sub(1),
                None if more => {
                    let at = self.spent.partition_point(|(m, _)| *m < n);
                    self.spent.insert(at, (n, 1));
                }
                None => {}
            }
        }
    }
}

/// Where a [`QuotaPacer`]'s intervals start.
#[derive(Debug, Clone, Copy)]
enum Counting {
    /// Nobody knows: at most the quota in any span of one interval.
    AnySpan,
    /// On the wall clock this clock reads, from the Unix epoch.
    Synchronized(UtcClock),
}

/// The rate quotas of some groups of requests, each counted apart in fixed intervals of one length.
#[derive(Debug)]
pub struct QuotaPacer {
    interval: Duration,
    counting: Counting,
    groups: Mutex<Vec<Group>>,
}

/// A request let go by a [`QuotaPacer`] and not settled yet. Dropped unsettled (the call was
/// cancelled, or failed without an answer), it counts: it may have reached the cloud.
#[derive(Debug)]
pub struct QuotaTicket<'a> {
    pacer: &'a QuotaPacer,
    group: usize,
    /// When it was let go.
    sent: Instant,
    open: bool,
}

impl Drop for QuotaTicket<'_> {
    fn drop(&mut self) {
        if self.open {
            self.pacer.end(self.group, self.sent, Settled::Counted);
        }
    }
}

impl QuotaTicket<'_> {
    /// Ends the request as `how` says; for a refusal, answers how long its group now holds its
    /// requests (the time to the interval after the one that refused, as far as it is known).
    pub fn settle(mut self, how: Settled) -> Option<Duration> {
        self.open = false;
        self.pacer.end(self.group, self.sent, how)
    }
}

impl QuotaPacer {
    /// `groups` groups counted apart in intervals of `interval`, each with `quota` requests an
    /// interval when known (`None`: learnt from the first refusal).
    pub fn new(groups: usize, interval: Duration, quota: Option<u32>) -> QuotaPacer {
        QuotaPacer::counting(groups, interval, quota, Counting::AnySpan)
    }

    /// `groups` groups counted apart in intervals of `interval` that follow each other from the Unix
    /// epoch on the wall clock `clock` reads (a minute's start at second :00 UTC), each with `quota`
    /// requests an interval when known (`None`: learnt from the first refusal).
    pub fn synchronized(
        groups: usize,
        interval: Duration,
        quota: Option<u32>,
        clock: UtcClock,
    ) -> QuotaPacer {
        QuotaPacer::counting(groups, interval, quota, Counting::Synchronized(clock))
    }

    fn counting(
        groups: usize,
        interval: Duration,
        quota: Option<u32>,
        counting: Counting,
    ) -> QuotaPacer {
        let quota = quota.map(|q| q.max(1));
        QuotaPacer {
            interval,
            counting,
            groups: Mutex::new(
                (0..groups)
                    .map(|_| Group {
                        quota,
                        configured: quota.is_some(),
                        ..Group::default()
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
        let sent = loop {
            let now = Instant::now();
            match self.try_take(group, now) {
                None => break now,
                Some(w) => tokio::time::sleep(w.max(Duration::from_millis(1))).await,
            }
        };
        let ticket = QuotaTicket {
            pacer: self,
            group,
            sent,
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
        if let Counting::Synchronized(clock) = self.counting {
            return self.take_in_interval(g, &clock, now);
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

    /// The intervals a request let go at `at` (since the Unix epoch, on the pacer's clock) may be
    /// counted in: those within [`CLOCK_MARGIN`] of it.
    fn may_count_in(&self, at: Duration) -> std::ops::RangeInclusive<u64> {
        interval_of(at.saturating_sub(CLOCK_MARGIN), self.interval)
            ..=interval_of(at + CLOCK_MARGIN, self.interval)
    }

    /// [`QuotaPacer::try_take`] on synchronized intervals.
    fn take_in_interval(&self, g: &mut Group, clock: &UtcClock, now: Instant) -> Option<Duration> {
        let at = clock.since_epoch(now);
        let ns = self.may_count_in(at);
        while g.spent.front().is_some_and(|(n, _)| n < ns.start()) {
            g.spent.pop_front();
        }
        if let Some(q) = g.quota {
            if let Some(full) = ns.clone().find(|n| g.spent_in(*n) >= q) {
                // It could be counted in a spent interval: it waits until it no longer can.
                let after = interval_start(full + 1, self.interval) + CLOCK_MARGIN;
                return Some(after.saturating_sub(at));
            }
        }
        g.count(ns, true);
        g.outstanding += 1;
        None
    }

    fn end(&self, group: usize, sent: Instant, how: Settled) -> Option<Duration> {
        let now = Instant::now();
        let mut all = self.lock();
        let g = &mut all[group];
        g.outstanding = g.outstanding.saturating_sub(1);
        let until = match self.counting {
            Counting::AnySpan => self.end_in_any_span(g, how, now)?,
            Counting::Synchronized(clock) => self.end_in_interval(g, &clock, sent, how, now)?,
        };
        let until = g.hold_until.filter(|h| *h > until).unwrap_or(until);
        g.hold_until = Some(until);
        Some(until.saturating_duration_since(now))
    }

    /// Settles a request in any span: until when its group holds (`None`: it does not).
    fn end_in_any_span(&self, g: &mut Group, how: Settled, now: Instant) -> Option<Instant> {
        while g.counted.front().is_some_and(|t| *t + self.interval <= now) {
            g.counted.pop_front();
        }
        match how {
            Settled::Counted => {
                g.counted.push_back(now);
                None
            }
            Settled::RefusedFor(after) => Some(now + after),
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
                Some(g.counted.front().copied().unwrap_or(now) + self.interval)
            }
        }
    }

    /// Settles a request let go at `sent` on synchronized intervals: until when its group holds
    /// (`None`: it does not).
    fn end_in_interval(
        &self,
        g: &mut Group,
        clock: &UtcClock,
        sent: Instant,
        how: Settled,
        now: Instant,
    ) -> Option<Instant> {
        // Counted when let go, it stays so; a refused request counts nowhere.
        let ns = self.may_count_in(clock.since_epoch(sent));
        match how {
            Settled::Counted => return None,
            Settled::RefusedFor(after) => {
                g.count(ns, false);
                return Some(now + after);
            }
            Settled::Refused => g.count(ns.clone(), false),
        }
        // The interval that refused counted at most what may count in it, those in flight too (the
        // last refusal of a burst to come back sees every success of it, and no refusal). Of two
        // intervals it may have been, the larger count: a quota learnt too high meets one more
        // refusal and is learnt again, one learnt too low would never be raised.
        let n = ns.clone().map(|n| g.spent_in(n)).max().unwrap_or(0);
        if !g.configured && n > 0 {
            g.quota = Some(g.quota.map_or(n, |q| q.min(n)));
        }
        // It refilled when the next interval started, on the cloud's clock: the margin after it on
        // ours, whichever of the two refused.
        let after = interval_start(ns.end() + 1, self.interval) + CLOCK_MARGIN;
        Some(now + after.saturating_sub(clock.since_epoch(now)))
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

    /// 10:00:00 UTC on some day, and `secs` after it.
    fn ten(secs: f64) -> std::time::SystemTime {
        std::time::UNIX_EPOCH
            + Duration::from_secs(20_000 * 86_400 + 10 * 3600)
            + Duration::from_secs_f64(secs)
    }

    /// A pacer of `groups` groups counted in the wall clock's minutes, the clock reading `at` now.
    fn on_the_minute(groups: usize, quota: Option<u32>, at: f64) -> QuotaPacer {
        QuotaPacer::synchronized(groups, MINUTE, quota, UtcClock::reading(ten(at)))
    }

    #[tokio::test(start_paused = true)]
    async fn on_the_minute_a_refusal_holds_to_the_next_minute_and_its_count_is_the_quota() {
        let p = on_the_minute(2, None, 15.0);
        let start = Instant::now();
        assert_eq!(spend(&p, 0, 5).await, Duration::ZERO);
        tokio::time::advance(Duration::from_secs(10)).await;
        let (_, t) = p.before(0).await;
        // Refused at 10:00:25: the quota refills at 10:01:00, not a minute after the first request.
        let hold = t.settle(Settled::Refused).unwrap();
        assert_eq!(hold, Duration::from_secs(35) + CLOCK_MARGIN);
        assert_eq!(p.quota(0), Some(5), "what 10:00 counted");
        assert_eq!(spend(&p, 1, 1).await, Duration::ZERO, "another group goes");
        let (_, t) = p.before(0).await;
        assert_eq!(
            Instant::now() - start,
            Duration::from_secs(45) + CLOCK_MARGIN
        );
        t.settle(Settled::Counted);
        // The whole quota in the minute of 10:01, the sixth at 10:02 and the margin.
        assert_eq!(spend(&p, 0, 4).await, Duration::ZERO);
        let (w, _t) = p.before(0).await;
        assert_eq!(w, MINUTE);
    }

    #[tokio::test(start_paused = true)]
    async fn on_the_minute_with_a_quota_set_each_minute_gets_all_of_it() {
        let p = on_the_minute(1, Some(3), 50.0);
        assert_eq!(spend(&p, 0, 3).await, Duration::ZERO);
        // At 10:00:50 the minute is spent: the fourth goes at 10:01:00 and the margin.
        assert_eq!(
            spend(&p, 0, 1).await,
            Duration::from_secs(10) + CLOCK_MARGIN
        );
        assert_eq!(spend(&p, 0, 2).await, Duration::ZERO);
        assert_eq!(spend(&p, 0, 1).await, MINUTE);
    }

    #[tokio::test(start_paused = true)]
    async fn on_the_minute_a_request_close_to_a_boundary_counts_on_both_sides() {
        // 10:00:59.5: the cloud may count it in 10:00 or in 10:01.
        let p = on_the_minute(1, Some(3), 59.5);
        assert_eq!(spend(&p, 0, 1).await, Duration::ZERO);
        tokio::time::advance(Duration::from_millis(500) + CLOCK_MARGIN).await;
        assert_eq!(spend(&p, 0, 2).await, Duration::ZERO);
        assert_eq!(spend(&p, 0, 1).await, MINUTE, "10:01 holds three");
        // And one let go just after a boundary may be counted in the minute before.
        let p = on_the_minute(1, Some(3), 58.0);
        assert_eq!(spend(&p, 0, 2).await, Duration::ZERO);
        tokio::time::advance(Duration::from_millis(2500)).await;
        assert_eq!(spend(&p, 0, 1).await, Duration::ZERO, "10:01:00.5");
        assert_eq!(
            spend(&p, 0, 1).await,
            Duration::from_millis(500),
            "10:00 holds three until 10:01:01"
        );
        assert_eq!(spend(&p, 0, 1).await, Duration::ZERO);
        assert_eq!(spend(&p, 0, 1).await, MINUTE);
    }

    #[tokio::test(start_paused = true)]
    async fn on_the_minute_the_quota_learnt_from_a_burst_is_what_it_got_through() {
        let p = on_the_minute(1, None, 30.0);
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
        let last = next().settle(Settled::Refused);
        assert_eq!(p.quota(0), Some(3));
        assert_eq!(last, Some(Duration::from_secs(30) + CLOCK_MARGIN));
        // The refused ones did not count: 10:01 gets three.
        tokio::time::advance(Duration::from_secs(31)).await;
        assert_eq!(spend(&p, 0, 3).await, Duration::ZERO);
        assert_eq!(spend(&p, 0, 1).await, MINUTE);
    }

    #[tokio::test(start_paused = true)]
    async fn on_the_minute_a_refusal_with_nothing_counted_learns_nothing() {
        let p = on_the_minute(1, None, 40.0);
        let (_, t) = p.before(0).await;
        assert_eq!(
            t.settle(Settled::Refused),
            Some(Duration::from_secs(20) + CLOCK_MARGIN)
        );
        assert_eq!(p.quota(0), None);
        // A Retry-After is the cloud's word, as in the other mode.
        let (_, t) = p.before(0).await;
        assert_eq!(
            t.settle(Settled::RefusedFor(Duration::from_secs(2))),
            Some(Duration::from_secs(2))
        );
        assert_eq!(p.quota(0), None);
    }
}
