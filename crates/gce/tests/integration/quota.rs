//! Compute Engine's rate quotas (per group of methods, per minute of the wall clock, refused with
//! 403 `rateLimitExceeded` and no word on what is left): the driver learns a group's quota from its
//! first refusal and never meets a second, and with the quota set it meets none, on the fake's quotas
//! and tokio's paused clock. The driver reads the fake's wall clock, set to a known time of day.

use std::time::Duration;

use orca_fakes::gce::FakeGce;
use orca_gce::{ConfigBuilder, GceProvider};
use orca_machines::kit::CLOCK_MARGIN;
use orca_machines::{Provider, RetryPolicy};
use reqwest::Method;
use tokio::time::Instant;

use crate::common::builder;

/// The fake's quota of each group a minute.
const PER_MINUTE: u32 = 3;

/// `secs` after 10:00:00 UTC on some day: where the tests put the fake's wall clock, so that they
/// know where its minutes start.
fn ten(secs: u64) -> std::time::SystemTime {
    std::time::UNIX_EPOCH + Duration::from_secs(20_000 * 86_400 + 10 * 3600 + secs)
}

/// A fake whose wall clock reads `ten(secs)`, and a provider of `stack-1` on it that reads the same
/// clock (so both count the same minutes), its builder adjusted by `adjust`.
async fn on_the_fake_at(
    secs: u64,
    adjust: impl FnOnce(ConfigBuilder) -> ConfigBuilder,
) -> (FakeGce, GceProvider) {
    let fake = FakeGce::start().await.unwrap();
    fake.set_utc(ten(secs));
    let config = adjust(builder(&fake).clock(fake.clock())).build().unwrap();
    let p = GceProvider::new(config, "stack-1").await.unwrap();
    (fake, p)
}

/// The listings answered (status and time) since `from` in the fake's log.
fn listings(fake: &FakeGce, from: usize) -> Vec<(u16, Instant)> {
    fake.control().log()[from..]
        .iter()
        .filter(|l| l.method == Method::GET && l.path.contains("/instances?"))
        .map(|l| (l.status, l.at))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn after_one_refusal_no_request_of_that_group_until_the_next_minute() {
    let (fake, p) = on_the_fake_at(0, |b| b.retry(RetryPolicy::default())).await;
    let from = fake.control().log().len();
    let start = Instant::now();
    fake.set_rate_quota(Some(PER_MINUTE));
    for _ in 0..10 {
        p.machines("lab").await.unwrap();
    }
    let log = listings(&fake, from);
    assert_eq!(
        fake.rate_limited(),
        1,
        "one refusal teaches the quota: {log:?}"
    );
    let refused = log.iter().position(|(s, _)| *s == 403).unwrap();
    assert_eq!(refused, PER_MINUTE as usize, "{log:?}");
    let (_, next) = log[refused + 1];
    assert!(
        next - start >= Duration::from_secs(60),
        "the group waited for the next minute: {log:?}"
    );
    // Other groups are not held: a read goes at once.
    let asked = Instant::now();
    p.arch("e2-standard-2").await.unwrap();
    assert!(
        asked.elapsed() < Duration::from_secs(30),
        "{:?}",
        asked.elapsed()
    );
}

#[tokio::test(start_paused = true)]
async fn with_the_quota_set_no_request_is_refused() {
    let (fake, p) = on_the_fake_at(0, |b| b.rate_quota(PER_MINUTE)).await;
    let from = fake.control().log().len();
    fake.set_rate_quota(Some(PER_MINUTE));
    for _ in 0..10 {
        p.machines("lab").await.unwrap();
    }
    assert_eq!(fake.rate_limited(), 0);
    assert_eq!(listings(&fake, from).len(), 10);
}

#[tokio::test(start_paused = true)]
async fn a_refusal_given_up_on_says_when_the_next_minute_starts() {
    let (fake, p) = on_the_fake_at(0, |b| b.retry(RetryPolicy::NEVER)).await;
    fake.set_rate_quota(Some(PER_MINUTE));
    for _ in 0..PER_MINUTE {
        p.machines("lab").await.unwrap();
    }
    tokio::time::advance(Duration::from_secs(20)).await;
    let e = p.machines("lab").await.unwrap_err();
    assert_eq!(e.kind(), orca_machines::ErrorKind::Throttled, "{e}");
    // The group goes again when 10:01 has surely started on the cloud's clock too.
    assert_eq!(
        e.retry_after(),
        Some(Duration::from_secs(40) + CLOCK_MARGIN),
        "{e}"
    );
}

#[tokio::test(start_paused = true)]
async fn after_a_refusal_the_group_goes_again_when_the_wall_clocks_next_minute_starts() {
    let (fake, p) = on_the_fake_at(15, |b| b.retry(RetryPolicy::default())).await;
    let from = fake.control().log().len();
    fake.set_rate_quota(Some(PER_MINUTE));
    for _ in 0..10 {
        p.machines("lab").await.unwrap();
    }
    let clock = fake.clock();
    let seen: Vec<(u16, std::time::SystemTime)> = listings(&fake, from)
        .into_iter()
        .map(|(s, at)| (s, clock.at(at)))
        .collect();
    // Three at 10:00:15, one refused; then the whole quota as each minute starts (and the margin),
    // not a minute after the first of the three. The refused listing is retried after the hold
    // plus the retry policy's jitter (under 50 ms), the next two right after it; the ones after
    // them are paced to the minute.
    let next = |m: u64| (200, ten(m * 60) + CLOCK_MARGIN);
    let (status, retried) = seen[4];
    assert_eq!(status, 200, "{seen:?}");
    let late = retried.duration_since(next(1).1).unwrap();
    assert!(late < Duration::from_millis(50), "{seen:?}");
    let mut expected = vec![(200, ten(15)); 3];
    expected.push((403, ten(15)));
    expected.extend([
        seen[4],
        seen[4],
        seen[4],
        next(2),
        next(2),
        next(2),
        next(3),
    ]);
    assert_eq!(seen, expected);
    assert_eq!(fake.rate_limited(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_429_is_retried_with_backoff_and_holds_nothing_for_a_minute() {
    use orca_fakes::{Fault, Rule};
    let fake = FakeGce::start().await.unwrap();
    let p = GceProvider::new(
        builder(&fake)
            .retry(RetryPolicy::default())
            .build()
            .unwrap(),
        "stack-1",
    )
    .await
    .unwrap();
    p.machines("lab").await.unwrap();
    fake.control().inject(Rule::new(
        Some(Method::GET),
        "/instances?",
        Fault::Status {
            status: 429,
            body: serde_json::json!({"error": {"code": 429, "message": "Rate Limit Exceeded",
                "errors": [{"reason": "rateLimitExceeded", "domain": "usageLimits", "message": "Rate Limit Exceeded"}]}}),
            headers: vec![],
        },
        1,
    ));
    let asked = Instant::now();
    p.machines("lab").await.unwrap();
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "{:?}",
        asked.elapsed()
    );
}
