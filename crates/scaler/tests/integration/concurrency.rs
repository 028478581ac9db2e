//! How many calls a pass runs at once follows the cloud: `parallel` until it throttles, half as
//! many after, one more back after each round it lets through; creates and deletes alike. A cloud
//! that tells its budget in every answer (Hetzner's `RateLimit-*`) is paced by its driver, so the
//! default bound runs every call at once without a single throttled answer.

use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use orca::layer::{Answer, Call, Layer, Layered, Next};
use orca::{Error, Result};
use support::{cloud, scaler};

const A: &str = "amd64-small@zone-a";

/// A cloud that throttles creates (or, with `deletes`, deletes) while more than `allowed` are in
/// flight, each taking a while.
#[derive(Debug, Default, Clone)]
struct Crowded {
    deletes: bool,
    allowed: Arc<AtomicUsize>,
    in_flight: Arc<AtomicUsize>,
    max_in_flight: Arc<AtomicUsize>,
    throttled: Arc<AtomicUsize>,
}

impl Crowded {
    fn new(allowed: usize) -> Self {
        let c = Crowded::default();
        c.allowed.store(allowed, Ordering::SeqCst);
        c
    }

    /// The most creates in flight at once since the last call, and starts counting again.
    fn take_max(&self) -> usize {
        self.max_in_flight.swap(0, Ordering::SeqCst)
    }
}

#[async_trait::async_trait]
impl Layer for Crowded {
    async fn around(&self, call: Call<'_>, next: Next<'_>) -> Result<Answer> {
        let crowded = match call {
            Call::Create { .. } => !self.deletes,
            Call::Delete { .. } => self.deletes,
            _ => false,
        };
        if !crowded {
            return next.run(call).await;
        }
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_in_flight.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(20)).await;
        let answer = if now > self.allowed.load(Ordering::SeqCst) {
            self.throttled.fetch_add(1, Ordering::SeqCst);
            Err(Error::throttled(None, "too many requests"))
        } else {
            next.run(call).await
        };
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        answer
    }
}

// The paused clock: a call's pause ends only once every call started is waiting, on any machine.
#[tokio::test(start_paused = true)]
async fn a_throttling_cloud_halves_the_calls_at_once_and_the_pool_still_fills() {
    let dir = tempfile::tempdir().unwrap();
    let (cloud, p) = cloud();
    let crowded = Crowded::new(4);
    let w = Layered::new(p, crowded.clone());
    let mut s = scaler(dir.path(), 40, &[A]);
    s.settings.parallel = 16;
    assert_eq!(s.concurrency(), 16, "nothing said to go slower yet");

    let r = s.pass(&w, cloud.now()).await;
    assert_eq!(crowded.take_max(), 16, "{:?}", r.actions);
    assert!(crowded.throttled.load(Ordering::SeqCst) > 0);
    assert_eq!(s.concurrency(), 8, "one throttled burst halves once");

    let mut passes = 1;
    while s.pass(&w, cloud.now()).await.serving < 40 {
        passes += 1;
        assert!(passes < 30, "the pool never filled");
    }
    assert!(
        crowded.take_max() <= 8,
        "after the first pass, never more at once than the halved limit"
    );
    assert!(s.concurrency() < 8, "the cloud throttled again at eight");
}

// The paused clock: a call's pause ends only once every call started is waiting, on any machine.
#[tokio::test(start_paused = true)]
async fn calls_let_through_give_the_slots_back_up_to_parallel() {
    let dir = tempfile::tempdir().unwrap();
    let (cloud, p) = cloud();
    let crowded = Crowded::new(1);
    let w = Layered::new(p, crowded.clone());
    let mut s = scaler(dir.path(), 4, &[A]);
    s.settings.parallel = 4;
    s.pass(&w, cloud.now()).await;
    assert_eq!(crowded.take_max(), 4);
    assert_eq!(s.concurrency(), 2);

    // The cloud stops throttling: each round of calls let through gives one slot back, never more
    // than `parallel`.
    crowded.allowed.store(usize::MAX, Ordering::SeqCst);
    s.settings.size = 40;
    let r = s.pass(&w, cloud.now()).await;
    assert_eq!(r.serving, 40, "{:?}", r.actions);
    assert_eq!(s.concurrency(), 4);
    assert_eq!(crowded.take_max(), 4);
}

// On the paused clock a call's pause ends only once every call started is waiting, whatever the
// record's writes cost on a loaded machine.
#[tokio::test(start_paused = true)]
async fn deletes_are_halved_alike_and_the_pool_still_shrinks() {
    let dir = tempfile::tempdir().unwrap();
    let (cloud, p) = cloud();
    let crowded = Crowded {
        deletes: true,
        ..Crowded::new(usize::MAX)
    };
    let w = Layered::new(p, crowded.clone());
    let mut s = scaler(dir.path(), 40, &[A]);
    s.settings.parallel = 16;
    assert_eq!(s.pass(&w, cloud.now()).await.serving, 40);

    crowded.allowed.store(4, Ordering::SeqCst);
    s.settings.size = 0;
    let r = s.pass(&w, cloud.now()).await;
    assert_eq!(crowded.take_max(), 16, "{:?}", r.actions);
    assert!(crowded.throttled.load(Ordering::SeqCst) > 0);
    assert_eq!(
        s.concurrency(),
        8,
        "one throttled burst of deletes halves once"
    );
    let mut passes = 1;
    while s.pass(&w, cloud.now()).await.serving > 0 {
        passes += 1;
        assert!(passes < 30, "the pool never shrank");
    }
    assert!(
        crowded.take_max() <= 8,
        "after the first pass, never more deletes at once than the halved limit"
    );
    assert!(s.concurrency() < 8, "the cloud throttled again at eight");
}

/// The fake Hetzner API with a small budget (20 requests, 5 a second) and actions of 2 s, on
/// tokio's paused clock: 30 creates, then 30 deletes, at the default bound.
#[tokio::test(start_paused = true)]
async fn a_cloud_that_tells_its_budget_runs_every_call_at_once_without_a_throttle() {
    use orca_fakes::hetzner::{FakeHetzner, Options};
    let fake = FakeHetzner::start_with(Options {
        action_time: Duration::from_secs(2),
        rate_limit: 20,
        refill_per_second: 5.0,
        ..Options::default()
    })
    .await
    .unwrap();
    let p = orca::of_with(
        "hetzner",
        "pace",
        &orca_fakes::hetzner::driver_settings(&fake),
    )
    .await
    .unwrap();
    // Counts the calls in flight, never throttles.
    let creates = Crowded::new(usize::MAX);
    let deletes = Crowded {
        deletes: true,
        ..Crowded::new(usize::MAX)
    };
    let w = Layered::new(Layered::new(p, creates.clone()), deletes.clone());
    let dir = tempfile::tempdir().unwrap();
    let mut s = scaler(dir.path(), 30, &["cx23@fsn1"]);
    s.settings.parallel = orca_scaler::DEFAULT_PARALLEL;

    let r = s.pass(&w, chrono::Utc::now()).await;
    assert_eq!((r.serving, r.failures()), (30, 0), "{:?}", r.actions);
    s.settings.size = 0;
    let r = s.pass(&w, chrono::Utc::now()).await;
    assert_eq!((r.serving, r.failures()), (0, 0), "{:?}", r.actions);
    assert_eq!(
        fake.rate_limited(),
        0,
        "the driver spent only what the budget allowed"
    );
    assert_eq!(
        (creates.take_max(), deletes.take_max()),
        (30, 30),
        "every create, then every delete, at once: the driver paces their requests"
    );
    assert_eq!(s.concurrency(), orca_scaler::DEFAULT_PARALLEL);
}

/// A cloud that refuses the first create (or, with `deletes`, delete) as throttled with the wait
/// it names, and notes when each call of that kind came.
#[derive(Debug, Default, Clone)]
struct TellsWhen {
    deletes: bool,
    wait: Duration,
    refused: Arc<std::sync::atomic::AtomicBool>,
    calls: Arc<std::sync::Mutex<Vec<tokio::time::Instant>>>,
}

#[async_trait::async_trait]
impl Layer for TellsWhen {
    async fn around(&self, call: Call<'_>, next: Next<'_>) -> Result<Answer> {
        let counted = match call {
            Call::Create { .. } => !self.deletes,
            Call::Delete { .. } => self.deletes,
            _ => false,
        };
        if !counted {
            return next.run(call).await;
        }
        self.calls.lock().unwrap().push(tokio::time::Instant::now());
        if !self.refused.swap(true, Ordering::SeqCst) {
            return Err(Error::throttled(Some(self.wait), "slow down"));
        }
        next.run(call).await
    }
}

#[tokio::test(start_paused = true)]
async fn a_throttle_that_says_when_is_waited_for_and_halves_nothing() {
    for deletes in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let (cloud, p) = cloud();
        let told = TellsWhen {
            deletes,
            wait: Duration::from_secs(30),
            ..TellsWhen::default()
        };
        let w = Layered::new(p, told.clone());
        let mut s = scaler(dir.path(), 6, &[A]);
        s.settings.parallel = 2;
        let mut r = s.pass(&w, cloud.now()).await;
        if deletes {
            assert_eq!(r.serving, 6, "{:?}", r.actions);
            s.settings.size = 0;
            r = s.pass(&w, cloud.now()).await;
        }
        let target = if deletes { 0 } else { 6 };
        if r.serving != target {
            // The refused call is the next pass's.
            r = s.pass(&w, cloud.now()).await;
        }
        assert_eq!((r.serving, r.failures()), (target, 0), "{:?}", r.actions);
        let calls = told.calls.lock().unwrap().clone();
        let refused = calls[0];
        // The other call of the first pair was on its way already; every later one waited.
        assert!(
            calls[2..]
                .iter()
                .all(|t| *t - refused >= Duration::from_secs(30)),
            "deletes {deletes}: {:?}",
            calls.iter().map(|t| *t - refused).collect::<Vec<_>>()
        );
        assert_eq!(s.concurrency(), 2, "the cloud said when: nothing halved");
    }
}

/// A throttle that names a wait past what a pass waits holds the calls of its own kind only: while
/// deletes wait for the time the cloud named, creates go on, and nothing is halved.
#[tokio::test(start_paused = true)]
async fn a_long_named_wait_on_deletes_holds_deletes_only() {
    use orca::{MachineSpec, Provider};
    let dir = tempfile::tempdir().unwrap();
    let (cloud, p) = cloud();
    let told = TellsWhen {
        deletes: true,
        wait: Duration::from_secs(600),
        ..TellsWhen::default()
    };
    let w = Layered::new(p.clone(), told.clone());
    let mut s = scaler(dir.path(), 2, &[A]);
    s.settings.parallel = 2;
    assert_eq!(s.pass(&w, cloud.now()).await.serving, 2);

    // A machine the record does not name, to delete, and two more machines wanted.
    let stray = p
        .create(&MachineSpec::new("stray-1", "amd64-small", "zone-a", "lab"))
        .await
        .unwrap()
        .into_result()
        .unwrap();
    s.settings.size = 4;
    let r = s.pass(&w, cloud.now()).await;
    assert_eq!(r.serving, 4, "{:?}", r.actions);
    assert_eq!(r.failures(), 1, "the delete told to wait: {:?}", r.actions);
    assert_eq!(told.calls.lock().unwrap().len(), 1);

    // Within the wait: the delete is the later passes', the creates go on at the full bound.
    s.settings.size = 6;
    let r = s.pass(&w, cloud.now()).await;
    assert_eq!((r.serving, r.failures()), (6, 0), "{:?}", r.actions);
    assert_eq!(told.calls.lock().unwrap().len(), 1, "{:?}", r.actions);
    assert!(
        cloud.all_machines().iter().any(|m| m.id == stray.id),
        "{:?}",
        r.actions
    );
    assert!(
        r.actions.iter().any(|a| matches!(
            a,
            orca_scaler::Action::Skipped { reason, .. } if reason.contains("delete of stray-1")
        )),
        "{:?}",
        r.actions
    );
    assert_eq!(s.concurrency(), 2, "the cloud said when: nothing halved");

    // After the wait the delete goes.
    tokio::time::advance(Duration::from_secs(601)).await;
    let r = s.pass(&w, cloud.now()).await;
    assert_eq!((r.serving, r.failures()), (6, 0), "{:?}", r.actions);
    assert!(
        cloud.all_machines().iter().all(|m| m.id != stray.id),
        "{:?}",
        r.actions
    );
}
