//! How many creates and deletes a pass runs at once. [`Settings::parallel`](crate::Settings) is the
//! upper bound; below it the cloud sets the pace. A driver that reads the cloud's rate-limit headers
//! (Hetzner's `RateLimit-*`) already spaces its own requests, so calls in flight cost no extra
//! requests, only waiting; a cloud that answers "throttled" instead halves how many run at once, and
//! each round of calls that finish unthrottled gives one back (additive increase, multiplicative
//! decrease, as TCP shares a link). The count lives in the [`Scaler`](crate::Scaler), from pass to pass.

use std::sync::Mutex;

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

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // The state is two counters, valid after any panic in between.
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
