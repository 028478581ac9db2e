//! A token bucket refilled continuously in tokio's time (a test on a paused clock sees the refill its
//! waits allow): the fake Hetzner API's rate limit and the fake Resource Manager's throttling.

use tokio::time::Instant;

#[derive(Debug)]
pub(crate) struct Bucket {
    /// Requests in a full bucket.
    pub(crate) limit: f64,
    /// Requests regained a second.
    pub(crate) refill: f64,
    /// Requests left.
    pub(crate) tokens: f64,
    at: Instant,
}

impl Bucket {
    /// A full bucket of `limit` requests regaining `refill` a second.
    pub(crate) fn new(limit: u32, refill: f64) -> Bucket {
        Bucket {
            limit: f64::from(limit),
            refill,
            tokens: f64::from(limit),
            at: Instant::now(),
        }
    }

    /// Adds what the time since the last refill regained, up to a full bucket.
    pub(crate) fn refill(&mut self) {
        let now = Instant::now();
        self.tokens = (self.tokens + self.refill * (now - self.at).as_secs_f64()).min(self.limit);
        self.at = now;
    }
}
