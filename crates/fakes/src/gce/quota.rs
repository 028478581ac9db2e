//! Compute Engine's rate quotas (cloud.google.com, "Compute Engine rate quotas"): per project, a count
//! of requests per group of methods in synchronized intervals of 60 seconds; once a group's count
//! reaches its limit, its requests are refused with 403 `rateLimitExceeded` until the next interval
//! starts. No header tells what is left, nor when it refills.
//!
//! The intervals are the wall clock's minutes: each starts at second :00 UTC, whenever the quota
//! was turned on, so a group that spends its quota at 10:00:15 gets it back at 10:01:00, not at
//! 10:01:15. The wall clock is the fake's [`UtcClock`] ([`FakeGce::clock`]), which tokio's clock
//! moves: a test on the paused clock sets it ([`FakeGce::set_utc`]) to know where in its minute
//! each request falls.

use std::time::SystemTime;

use super::*;

/// One interval of the rate quotas.
const INTERVAL: Duration = Duration::from_secs(60);

/// The groups counted apart, with the quota metric each is named by.
const GROUPS: [(&str, &str); 4] = [
    ("default", "Queries"),
    ("read_requests", "Read requests"),
    ("list_requests", "List requests"),
    ("operation_read_requests", "Operation read requests"),
];

/// The project's counts in the current interval.
#[derive(Debug)]
pub(super) struct RateQuota {
    per_minute: u32,
    /// The interval counted in `counts`: minutes since the Unix epoch.
    interval: u64,
    counts: [u32; 4],
    pub(super) refused: u64,
}

impl RateQuota {
    pub(super) fn new(per_minute: u32) -> RateQuota {
        RateQuota {
            per_minute,
            interval: 0,
            counts: [0; 4],
            refused: 0,
        }
    }

    /// The group of a request: operation reads, lists (a collection or an aggregated list), other
    /// reads, and everything that changes something (`default`, Compute Engine's "Queries").
    fn group(method: &axum::http::Method, path: &str) -> usize {
        if path.contains("/operations/") {
            return 3;
        }
        if *method != axum::http::Method::GET {
            return 0;
        }
        let last = path.rsplit('/').next().unwrap_or("");
        let lists = ["instances", "firewalls", "disks", "machineTypes"];
        if path.contains("/aggregated/") || lists.contains(&last) {
            2
        } else {
            1
        }
    }

    /// Counts one request received at `utc`; the refusal when its group's quota of that interval is
    /// spent.
    pub(super) fn spend(
        &mut self,
        utc: SystemTime,
        method: &axum::http::Method,
        path: &str,
    ) -> Option<Response> {
        let since_epoch = utc
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let interval = since_epoch.as_secs() / INTERVAL.as_secs();
        if interval != self.interval {
            self.interval = interval;
            self.counts = [0; 4];
        }
        let g = Self::group(method, path);
        if self.counts[g] >= self.per_minute {
            self.refused += 1;
            let (metric, name) = GROUPS[g];
            return Some(gerr(
                403,
                "rateLimitExceeded",
                format!(
                    "Quota exceeded for quota metric '{name}' and limit '{name} per minute' of service 'compute.googleapis.com' (compute.googleapis.com/{metric})."
                ),
            ));
        }
        self.counts[g] += 1;
        None
    }
}
