//! Time, injectable: every duration of the server (the 15 s accept wait, the two minutes of a delete, the
//! 15 minutes of an abandoned create, the 5 minute patch spacing, the 10 minute log repeat, the 60 s
//! freshness of a firewall check, the periodic pass) is measured and waited for on a [`Clock`], so that
//! tests run them on a clock of their own and compress hours into seconds.

use std::fmt;
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

pub use orca::machine::since;

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
}
