//! Time, injectable: every duration of the server (the 15 s accept wait, the two minutes of a delete, the
//! 15 minutes of an abandoned create, the 5 minute patch spacing, the 10 minute log repeat, the 60 s
//! freshness of a firewall check, the periodic pass) is measured and waited for on a [`Clock`], so that
//! tests run them on a [`ManualClock`] and compress hours into seconds.

use std::fmt;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use orca::Timestamp;

/// A source of the current time and of waits.
#[async_trait]
pub trait Clock: Send + Sync + fmt::Debug {
    /// Now.
    fn now(&self) -> Timestamp;

    /// Returns once `d` has passed on this clock.
    async fn sleep(&self, d: Duration);
}

/// The system's clock: UTC now and tokio's timer.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

#[async_trait]
impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        chrono::Utc::now()
    }

    async fn sleep(&self, d: Duration) {
        tokio::time::sleep(d).await;
    }
}

/// A clock that runs with the system's, plus whatever a test adds with [`ManualClock::advance`]: a wait
/// of ten minutes ends as soon as a test has advanced the clock by ten minutes.
#[derive(Clone)]
pub struct ManualClock {
    inner: Arc<ManualInner>,
}

struct ManualInner {
    offset_ms: AtomicI64,
    changed: tokio::sync::watch::Sender<i64>,
}

impl fmt::Debug for ManualClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManualClock")
            .field("offset_ms", &self.inner.offset_ms.load(Ordering::SeqCst))
            .finish()
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl ManualClock {
    /// A clock at the system's time.
    pub fn new() -> Self {
        let (changed, _) = tokio::sync::watch::channel(0);
        ManualClock {
            inner: Arc::new(ManualInner {
                offset_ms: AtomicI64::new(0),
                changed,
            }),
        }
    }

    /// Moves this clock forward by `by`, waking every wait that has now ended.
    pub fn advance(&self, by: Duration) {
        let ms = i64::try_from(by.as_millis()).unwrap_or(i64::MAX / 4);
        let now = self.inner.offset_ms.fetch_add(ms, Ordering::SeqCst) + ms;
        self.inner.changed.send_replace(now);
    }
}

#[async_trait]
impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        chrono::Utc::now()
            + chrono::Duration::milliseconds(self.inner.offset_ms.load(Ordering::SeqCst))
    }

    async fn sleep(&self, d: Duration) {
        let until = self.now() + chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX);
        let mut rx = self.inner.changed.subscribe();
        loop {
            let left = until - self.now();
            let Ok(left) = left.to_std() else { return };
            if left.is_zero() {
                return;
            }
            tokio::select! {
                _ = rx.changed() => {}
                _ = tokio::time::sleep(left) => {}
            }
        }
    }
}

/// `d` as Go prints a duration (`45s`, `1m0s`, `5m0s`, `2h3m4s`): the form shed-server's messages
/// have always used, so that what reads them keeps working.
pub fn go_duration(d: Duration) -> String {
    let s = d.as_secs();
    let (h, m, sec) = (s / 3600, s / 60 % 60, s % 60);
    if h > 0 {
        format!("{h}h{m}m{sec}s")
    } else if m > 0 {
        format!("{m}m{sec}s")
    } else {
        format!("{sec}s")
    }
}

/// How long before `now` the instant `then` was (zero when it is in the future).
pub fn since(now: Timestamp, then: Timestamp) -> Duration {
    (now - then).to_std().unwrap_or(Duration::ZERO)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_print_as_go_does() {
        assert_eq!(go_duration(Duration::from_secs(45)), "45s");
        assert_eq!(go_duration(Duration::from_secs(60)), "1m0s");
        assert_eq!(go_duration(Duration::from_secs(300)), "5m0s");
        assert_eq!(go_duration(Duration::from_secs(7384)), "2h3m4s");
    }

    #[tokio::test]
    async fn a_manual_wait_ends_when_the_clock_is_advanced() {
        let c = ManualClock::new();
        // Polled here, so that each assertion follows what the wait saw: the first poll sets its end,
        // a poll after an advance has looked at the advanced clock.
        let mut waiting = std::pin::pin!(c.sleep(Duration::from_secs(600)));
        assert!(futures::poll!(waiting.as_mut()).is_pending());
        c.advance(Duration::from_secs(599));
        assert!(
            futures::poll!(waiting.as_mut()).is_pending(),
            "one second is still left"
        );
        c.advance(Duration::from_secs(1));
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("the wait ended");
    }
}
