//! The wall clock (UTC) as tokio's clock moves it: a reading of the system clock taken once, plus the
//! time tokio's clock has moved since.
//!
//! A cloud that counts its rate quotas in synchronized intervals (Compute Engine's minutes start at
//! second :00 UTC) is paced on the wall clock, but tests and benches run on tokio's paused clock,
//! where minutes of cloud time pass in no time at all. Reading `SystemTime::now()` there would not
//! move with the paused clock; a [`UtcClock`] does, so a paused-clock run is deterministic, and a
//! test may set what the clock reads (10:00:15 UTC, say). A pacer and a fake made with the same
//! [`UtcClock`] (a `Copy` value: nothing global) read the same time.
//!
//! Off the paused clock the reading keeps step with the system's: Linux's monotonic clock, which
//! tokio's follows, is slewed by NTP as the wall clock is; only a step of the wall clock (an
//! operator setting the date) leaves it behind.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

/// The wall clock (UTC) read from tokio's clock: what it read at one instant, plus the time elapsed
/// since on tokio's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UtcClock {
    /// What the wall clock read at `at`.
    utc: SystemTime,
    at: Instant,
}

impl Default for UtcClock {
    /// [`UtcClock::system`].
    fn default() -> Self {
        UtcClock::system()
    }
}

impl UtcClock {
    /// The system's wall clock, as it reads now.
    pub fn system() -> UtcClock {
        UtcClock::reading(SystemTime::now())
    }

    /// A clock that reads `utc` now (a test's chosen time of day).
    pub fn reading(utc: SystemTime) -> UtcClock {
        UtcClock {
            utc,
            at: Instant::now(),
        }
    }

    /// What the clock reads at `t` of tokio's clock.
    pub fn at(&self, t: Instant) -> SystemTime {
        if t >= self.at {
            self.utc + (t - self.at)
        } else {
            self.utc - (self.at - t)
        }
    }

    /// What the clock reads now.
    pub fn now(&self) -> SystemTime {
        self.at(Instant::now())
    }

    /// The time since the Unix epoch at `t` of tokio's clock (zero for a reading before it).
    pub fn since_epoch(&self, t: Instant) -> Duration {
        self.at(t).duration_since(UNIX_EPOCH).unwrap_or_default()
    }
}

/// The number of the interval of `length` (counted from the Unix epoch) that holds `since_epoch`.
pub(crate) fn interval_of(since_epoch: Duration, length: Duration) -> u64 {
    (since_epoch.as_nanos() / length.as_nanos().max(1)) as u64
}

/// When interval `n` of `length` starts, as time since the Unix epoch.
pub(crate) fn interval_start(n: u64, length: Duration) -> Duration {
    Duration::from_nanos((u128::from(n) * length.as_nanos()) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn reads_what_it_was_set_to_plus_tokios_time_since() {
        let ten_fifteen = UNIX_EPOCH + Duration::from_secs(20_000 * 86_400 + 10 * 3600 + 15);
        let clock = UtcClock::reading(ten_fifteen);
        assert_eq!(clock.now(), ten_fifteen);
        let before = Instant::now();
        tokio::time::advance(Duration::from_secs(45)).await;
        assert_eq!(clock.now(), ten_fifteen + Duration::from_secs(45));
        assert_eq!(clock.at(before), ten_fifteen, "an earlier instant too");
        let minute = Duration::from_secs(60);
        let n = interval_of(clock.since_epoch(Instant::now()), minute);
        assert_eq!(
            UNIX_EPOCH + interval_start(n, minute),
            ten_fifteen + Duration::from_secs(45),
            "10:01:00 starts a minute"
        );
        assert_eq!(
            interval_of(clock.since_epoch(before), minute),
            n - 1,
            "10:00:15 is in the minute before"
        );
    }
}
