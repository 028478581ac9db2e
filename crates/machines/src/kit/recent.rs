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
}
