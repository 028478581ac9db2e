//! The visibility window: a machine a driver made a moment ago may not show in the cloud's reads
//! for a while, so a "not found" for it is confirmed by later reads before it is believed.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::Result;

/// What a driver made lately, by id or name, each with the moment it was made, on tokio's clock (a
/// test with a paused clock moves it). An entry lasts one window; entries whose window ended are
/// dropped whenever one is noted.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap().block_on(async {
/// use std::time::Duration;
/// use orca_machines::kit::Recent;
/// let recent = Recent::new(Duration::from_secs(60));
/// recent.note("vm-1".to_string());
/// assert!(recent.contains("vm-1"));
/// let until = recent.unseen_until("vm-1").unwrap();
/// tokio::time::sleep(Duration::from_secs(61)).await;
/// assert!(!recent.contains("vm-1") && tokio::time::Instant::now() > until);
/// # });
/// ```
#[derive(Debug)]
pub struct Recent<K = String> {
    window: Duration,
    made: Mutex<HashMap<K, Instant>>,
}

impl<K: Eq + Hash> Recent<K> {
    /// Nothing made yet; each entry lasts `window` (a driver's `visibility_window`).
    pub fn new(window: Duration) -> Self {
        Recent {
            window,
            made: Mutex::new(HashMap::new()),
        }
    }

    /// How long an entry lasts.
    pub fn window(&self) -> Duration {
        self.window
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<K, Instant>> {
        self.made.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Notes `key` as made now; a key noted before starts its window again (a name deleted and made
    /// anew is new again).
    pub fn note(&self, key: K) {
        let now = Instant::now();
        let mut made = self.entries();
        made.retain(|_, at| now.duration_since(*at) < self.window);
        made.insert(key, now);
    }

    /// Forgets `key`: it was seen, or this driver deleted it, so a "not found" for it is believed
    /// from now on.
    pub fn forget<Q>(&self, key: &Q)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.entries().remove(key);
    }

    /// When `key` was made, while its window lasts.
    pub fn made_at<Q>(&self, key: &Q) -> Option<Instant>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let at = *self.entries().get(key)?;
        (at.elapsed() < self.window).then_some(at)
    }

    /// Whether `key` was made within the window.
    pub fn contains<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.made_at(key).is_some()
    }

    /// Until when a "not found" for `key` is not believed: the end of its window, while it lasts.
    pub fn unseen_until<Q>(&self, key: &Q) -> Option<Instant>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.made_at(key).map(|at| at + self.window)
    }

    /// Until when a "not found" for `key` is not believed on a cloud where any id may be new (made
    /// a moment ago by another process): the end of `key`'s window when this driver made it, and at
    /// least `at_least` from now for every key.
    pub fn confirm_until<Q>(&self, key: &Q, at_least: Duration) -> Instant
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let floor = Instant::now() + at_least;
        self.unseen_until(key).map_or(floor, |u| u.max(floor))
    }

    /// How many keys are noted (some perhaps past their window until the next [`Recent::note`]).
    pub fn len(&self) -> usize {
        self.entries().len()
    }

    /// Whether no key is noted.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Reads until the thing shows or `until` passes: calls `read`; a `Some` is the answer; a `None`
/// is read again after `pause(n)` (`n` the reads so far less one; the pause cut short at `until`),
/// until `until` has passed, when the "not found" is believed (`Ok(None)`). An error ends it at
/// once. `until` comes from [`Recent::unseen_until`] or [`Recent::confirm_until`], or is now (one
/// read).
pub async fn read_until_seen<T, F, Fut>(
    until: Instant,
    mut pause: impl FnMut(u32) -> Duration,
    mut read: F,
) -> Result<Option<T>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>>>,
{
    let mut n = 0u32;
    loop {
        if let Some(found) = read().await? {
            return Ok(Some(found));
        }
        let now = Instant::now();
        if now >= until {
            return Ok(None);
        }
        tokio::time::sleep(pause(n).min(until - now)).await;
        n = n.saturating_add(1);
    }
}

/// Creates stopped before they answered, by pool and name, each with the moment it was stopped,
/// for one window (a driver's `visibility_window`).
///
/// A create's future can be dropped (a caller's timeout, a stopped task) after the cloud accepted
/// it and before the new machine shows in reads. The caller then calls
/// [`Provider::delete_named`](crate::Provider::delete_named), whose read by name can miss a machine
/// a moment old: its "nothing there" would make the caller forget a name with a machine under it.
/// So each create holds a [`CreateGuard`] while it runs, and says when it sends the request that
/// makes the machine ([`CreateGuard::sending`]); one dropped after that and before it was answered
/// notes its pool and name, and `delete_named` of a noted name reads again until the window ends
/// ([`StoppedCreates::find`]) before it believes "nothing". A create stopped before it sent
/// anything (in its look-ups of types and images) made nothing and notes nothing. A name no create
/// of this process left that way costs one read, as before.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap().block_on(async {
/// use std::time::Duration;
/// use orca_machines::kit::StoppedCreates;
/// let stopped = StoppedCreates::new(Duration::from_secs(60));
/// stopped.start("lab", "vm-1").answered();
/// drop(stopped.start("lab", "vm-2")); // stopped before it sent anything
/// let sent = stopped.start("lab", "vm-3");
/// sent.sending();
/// drop(sent);
/// assert!(!stopped.contains("lab", "vm-1") && !stopped.contains("lab", "vm-2"));
/// assert!(stopped.contains("lab", "vm-3"));
/// # });
/// ```
#[derive(Debug)]
pub struct StoppedCreates {
    stopped: Recent<(String, String)>,
}

/// Held by a create while it runs ([`StoppedCreates::start`]): [`CreateGuard::sending`] as it
/// sends the request that makes the machine, [`CreateGuard::answered`] once the create has its
/// answer; dropped between the two (the create's future dropped mid-way), it notes the create's
/// pool and name as stopped, with the moment.
#[derive(Debug)]
#[must_use = "a guard is answered when its create answers"]
pub struct CreateGuard<'a> {
    stopped: &'a StoppedCreates,
    key: Option<(String, String)>,
    sent: std::sync::atomic::AtomicBool,
}

impl CreateGuard<'_> {
    /// The create sends the request that makes its machine (again, on a retry): from now on the
    /// cloud may hold a machine of its name.
    pub fn sending(&self) {
        self.sent.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// The create answered: its caller knows what it made (or that it may have made something, from
    /// the error), so nothing is noted.
    pub fn answered(mut self) {
        self.key = None;
    }
}

impl Drop for CreateGuard<'_> {
    fn drop(&mut self) {
        if !self.sent.load(std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        if let Some(key) = self.key.take() {
            tracing::debug!(pool = %key.0, name = %key.1, "a create was stopped before it answered");
            self.stopped.stopped.note(key);
        }
    }
}

impl StoppedCreates {
    /// None noted yet; each entry lasts `window`.
    pub fn new(window: Duration) -> Self {
        StoppedCreates {
            stopped: Recent::new(window),
        }
    }

    fn key(pool: &str, name: &str) -> (String, String) {
        (pool.to_string(), name.to_string())
    }

    /// The guard a create of `name` in `pool` holds while it runs.
    pub fn start(&self, pool: &str, name: &str) -> CreateGuard<'_> {
        CreateGuard {
            stopped: self,
            key: Some(Self::key(pool, name)),
            sent: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Whether a create of `name` in `pool` was stopped within the window.
    pub fn contains(&self, pool: &str, name: &str) -> bool {
        self.stopped.contains(&Self::key(pool, name))
    }

    /// Forgets a stopped create of `name` in `pool`: what it made was found and removed.
    pub fn forget(&self, pool: &str, name: &str) {
        self.stopped.forget(&Self::key(pool, name));
    }

    /// Until when "nothing of `name` in `pool`" is not believed: the end of the window of a create
    /// of it stopped lately, else now (one read).
    pub fn unseen_until(&self, pool: &str, name: &str) -> Instant {
        self.stopped
            .unseen_until(&Self::key(pool, name))
            .unwrap_or_else(Instant::now)
    }

    /// What `read` finds of `name` in `pool`: one read, or, while a create of that name stopped
    /// within the window, reads (after `pause(n)`, as [`read_until_seen`]) until one finds
    /// something or the window ends. An error ends it at once.
    pub async fn find<T, F, Fut>(
        &self,
        pool: &str,
        name: &str,
        pause: impl FnMut(u32) -> Duration,
        mut read: F,
    ) -> Result<Vec<T>>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<Vec<T>>>,
    {
        let until = self.unseen_until(pool, name);
        let found = read_until_seen(until, pause, || {
            let found = read();
            async move { Ok(Some(found.await?).filter(|f| !f.is_empty())) }
        })
        .await?;
        Ok(found.unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    const WINDOW: Duration = Duration::from_secs(60);

    #[tokio::test(start_paused = true)]
    async fn an_entry_lasts_one_window_from_its_last_note() {
        let r: Recent<i64> = Recent::new(WINDOW);
        let made = Instant::now();
        r.note(7);
        assert_eq!(r.made_at(&7), Some(made));
        assert_eq!(r.unseen_until(&7), Some(made + WINDOW));
        tokio::time::sleep(Duration::from_secs(40)).await;
        r.note(7);
        tokio::time::sleep(Duration::from_secs(40)).await;
        assert!(r.contains(&7), "noted again: a new window");
        tokio::time::sleep(Duration::from_secs(21)).await;
        assert!(!r.contains(&7) && r.unseen_until(&7).is_none());
        r.note(8);
        assert_eq!(r.len(), 1, "entries past their window go when one is noted");
    }

    #[tokio::test(start_paused = true)]
    async fn forgetting_makes_a_not_found_believed_and_keys_borrow() {
        let r: Recent = Recent::new(WINDOW);
        r.note("vm-a".to_string());
        r.note("vm-b".to_string());
        r.forget("vm-a");
        assert!(!r.contains("vm-a") && r.contains("vm-b"));
        assert!(!r.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn confirming_lasts_at_least_the_floor_and_the_window_of_a_made_key() {
        let r: Recent = Recent::new(WINDOW);
        let floor = Duration::from_secs(5);
        let now = Instant::now();
        assert_eq!(r.confirm_until("other", floor), now + floor);
        r.note("mine".into());
        assert_eq!(r.confirm_until("mine", floor), now + WINDOW);
        tokio::time::sleep(Duration::from_secs(58)).await;
        assert_eq!(
            r.confirm_until("mine", floor),
            Instant::now() + floor,
            "the floor once the window nearly ended"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn reads_go_on_until_seen_or_the_window_ends() {
        let start = Instant::now();
        let mut reads = Vec::new();
        let got = read_until_seen(
            start + Duration::from_secs(10),
            |n| Duration::from_secs(1 << n),
            || {
                reads.push(start.elapsed().as_secs());
                let n = reads.len();
                async move { Ok((n == 3).then_some("vm")) }
            },
        )
        .await;
        assert_eq!(got, Ok(Some("vm")));
        assert_eq!(reads, [0, 1, 3]);

        let start = Instant::now();
        let mut reads = Vec::new();
        let got: Result<Option<()>> = read_until_seen(
            start + Duration::from_secs(10),
            |_| Duration::from_secs(4),
            || {
                reads.push(start.elapsed().as_secs());
                async { Ok(None) }
            },
        )
        .await;
        assert_eq!(got, Ok(None));
        assert_eq!(
            reads,
            [0, 4, 8, 10],
            "the last pause is cut at the window's end"
        );

        let mut once = 0;
        let got: Result<Option<()>> = read_until_seen(
            Instant::now(),
            |_| WINDOW,
            || {
                once += 1;
                async { Ok(None) }
            },
        )
        .await;
        assert_eq!(
            (got, once),
            (Ok(None), 1),
            "a window already over: one read"
        );

        let got: Result<Option<()>> = read_until_seen(
            Instant::now() + WINDOW,
            |_| WINDOW,
            || async { Err(Error::quota("cores")) },
        )
        .await;
        assert!(got.is_err(), "an error ends it at once");
    }

    #[tokio::test(start_paused = true)]
    async fn a_create_dropped_unanswered_is_noted_and_found_by_reads_within_the_window() {
        let stopped = StoppedCreates::new(WINDOW);
        stopped.start("lab", "vm-a").answered();
        assert!(!stopped.contains("lab", "vm-a"), "answered: nothing noted");
        drop(stopped.start("lab", "vm-a"));
        assert!(
            !stopped.contains("lab", "vm-a"),
            "nothing sent: nothing noted"
        );
        let dropped = stopped.start("lab", "vm-b");
        dropped.sending();
        tokio::time::sleep(Duration::from_secs(5)).await;
        drop(dropped);
        let noted = Instant::now();
        assert!(stopped.contains("lab", "vm-b") && !stopped.contains("other", "vm-b"));
        assert_eq!(stopped.unseen_until("lab", "vm-b"), noted + WINDOW);

        // A name no create left: one read.
        let mut reads = 0;
        let got: Result<Vec<u8>> = stopped
            .find(
                "lab",
                "vm-a",
                |_| Duration::from_secs(1),
                || {
                    reads += 1;
                    async { Ok(vec![]) }
                },
            )
            .await;
        assert_eq!((got, reads), (Ok(vec![]), 1));

        // The stopped create's name: read again until something shows.
        let start = Instant::now();
        let mut at = Vec::new();
        let got = stopped
            .find(
                "lab",
                "vm-b",
                |_| Duration::from_secs(10),
                || {
                    at.push(start.elapsed().as_secs());
                    let n = at.len();
                    async move { Ok(if n == 3 { vec!["vm-b"] } else { vec![] }) }
                },
            )
            .await;
        assert_eq!(got, Ok(vec!["vm-b"]));
        assert_eq!(at, [0, 10, 20]);

        // Nothing shows: believed when the window ends.
        let got: Result<Vec<u8>> = stopped
            .find(
                "lab",
                "vm-b",
                |_| Duration::from_secs(10),
                || async { Ok(vec![]) },
            )
            .await;
        assert_eq!(got, Ok(vec![]));
        assert_eq!(Instant::now(), noted + WINDOW);
        assert!(!stopped.contains("lab", "vm-b"));

        let c = stopped.start("lab", "vm-c");
        c.sending();
        drop(c);
        assert!(stopped.contains("lab", "vm-c"));
        stopped.forget("lab", "vm-c");
        assert!(!stopped.contains("lab", "vm-c"));
    }
}
