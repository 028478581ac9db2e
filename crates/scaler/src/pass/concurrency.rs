//! How many creates and deletes a pass runs at once. [`Settings::parallel`](crate::Settings) is the
//! upper bound; below it the cloud sets the pace. A driver that reads the cloud's rate-limit headers
//! (Hetzner's `RateLimit-*`) already spaces its own requests, so calls in flight cost no extra
//! requests, only waiting; a cloud that answers "throttled" instead halves how many run at once, and
//! each round of calls that finish unthrottled gives one back (additive increase, multiplicative
//! decrease, as TCP shares a link). A throttle that says when to try again (the error's
//! `retry_after`: a Retry-After, or the next interval of a rate quota the driver paces) is the
//! cloud's word on its pace: calls of that kind (creates, deletes) wait until then, and nothing is
//! halved. The count and the waits live in the [`Scaler`](crate::Scaler), from pass to pass.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// The longest a pass waits for the time a throttle named; a later one leaves the kind's calls to
/// the passes after it.
pub(crate) const LONGEST_WAIT: Duration = Duration::from_secs(120);

/// The kinds of call a throttle's wait holds apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Create = 0,
    Delete = 1,
}

/// The number of calls a pass may have in flight.
#[derive(Debug, Default)]
pub(crate) struct Concurrency {
    state: Mutex<State>,
}

#[derive(Debug, Default, Clone, Copy)]
struct State {
    /// Calls allowed at once since the cloud throttled; `None`: the bound, nothing said otherwise.
    limit: Option<usize>,
    /// Calls finished unthrottled since the limit last grew or shrank.
    unthrottled: usize,
    /// No call of a [`Kind`] before this, as a throttle said.
    resume: [Option<Instant>; 2],
}

impl Concurrency {
    /// At the bound: until the cloud throttles, nothing says to go slower.
    pub fn new() -> Self {
        Concurrency::default()
    }

    /// Calls allowed at once now, 1 up to `bound` (the settings may have changed it since).
    pub fn limit(&self, bound: usize) -> usize {
        Self::of(*self.lock(), bound)
    }

    fn of(s: State, bound: usize) -> usize {
        s.limit.unwrap_or(bound).clamp(1, bound.max(1))
    }

    /// A call finished and the cloud did not throttle it: after a whole round of them (as many as
    /// the limit), one more may run at once, up to `bound`.
    pub fn unthrottled(&self, bound: usize) {
        let mut s = self.lock();
        let Some(limit) = s.limit else { return };
        s.unthrottled += 1;
        if s.unthrottled >= limit {
            s.unthrottled = 0;
            s.limit = (limit + 1 < bound).then_some(limit + 1);
        }
    }

    /// The cloud throttled a call: half as many at once from now on (at least one).
    pub fn throttled(&self, bound: usize) {
        let mut s = self.lock();
        s.limit = Some((Self::of(*s, bound) / 2).max(1));
        s.unthrottled = 0;
    }

    /// The cloud throttled a call of `kind` and said to try again after `after`.
    pub fn told_to_wait(&self, kind: Kind, after: Duration) {
        let mut s = self.lock();
        let until = Instant::now() + after;
        let r = &mut s.resume[kind as usize];
        *r = Some(r.map_or(until, |r| r.max(until)));
    }

    /// Waits until calls of `kind` may go, as the last throttle of that kind said; false (at once)
    /// when that is further than [`LONGEST_WAIT`] away.
    pub async fn ready(&self, kind: Kind) -> bool {
        loop {
            let until = self.lock().resume[kind as usize];
            let now = Instant::now();
            match until {
                Some(t) if t > now + LONGEST_WAIT => return false,
                // Looked at again after the sleep: a later throttle may have moved it.
                Some(t) if t > now => tokio::time::sleep_until(t).await,
                _ => return true,
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // The state is counters and instants, each valid alone after any panic in between.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_at_the_bound_and_never_passes_it() {
        let c = Concurrency::new();
        assert_eq!(c.limit(8), 8);
        for _ in 0..100 {
            c.unthrottled(8);
        }
        assert_eq!(c.limit(8), 8);
        // Settings changed between passes: the new bound holds at once.
        assert_eq!(c.limit(3), 3);
        assert_eq!(c.limit(20), 20);
        assert_eq!(c.limit(0), 1);
        c.throttled(8);
        for _ in 0..100 {
            c.unthrottled(8);
        }
        assert_eq!(c.limit(8), 8);
        assert_eq!(
            c.limit(20),
            20,
            "grown back to the bound: the bound again, whatever it becomes"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_named_wait_holds_its_kind_only_and_a_long_one_is_not_waited_in_the_pass() {
        let c = Concurrency::new();
        c.told_to_wait(Kind::Create, Duration::from_secs(30));
        let start = Instant::now();
        assert!(c.ready(Kind::Delete).await);
        assert_eq!(Instant::now(), start, "deletes are not held");
        assert!(c.ready(Kind::Create).await);
        assert_eq!(Instant::now() - start, Duration::from_secs(30));
        c.told_to_wait(Kind::Delete, LONGEST_WAIT * 2);
        assert!(!c.ready(Kind::Delete).await);
        assert_eq!(Instant::now() - start, Duration::from_secs(30));
        assert_eq!(c.limit(8), 8, "nothing halved");
    }

    #[test]
    fn a_throttle_halves_and_each_unthrottled_round_gives_one_back() {
        let c = Concurrency::new();
        c.throttled(16);
        assert_eq!(c.limit(16), 8);
        c.throttled(16);
        assert_eq!(c.limit(16), 4);
        // A round is as many calls as the limit: 4 calls give the fifth slot, 5 more the sixth.
        for _ in 0..3 {
            c.unthrottled(16);
        }
        assert_eq!(c.limit(16), 4);
        c.unthrottled(16);
        assert_eq!(c.limit(16), 5);
        for _ in 0..5 {
            c.unthrottled(16);
        }
        assert_eq!(c.limit(16), 6);
        for _ in 0..10 {
            c.throttled(16);
        }
        assert_eq!(c.limit(16), 1, "never below one call at once");
    }
}
