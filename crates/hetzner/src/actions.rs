//! Following actions to their end. Every action the provider waits for is read together, one
//! `GET /actions?id=..&id=..` (25 ids a read) every poll interval, however many calls wait: the
//! project's hourly budget of requests, shared with the user's other tools, is spent per poll
//! interval instead of per action (Hetzner's own Go client waits for several actions the same
//! way, 25 ids a read: the API may leave the ids beyond them out of its answer without a word). An
//! action a read leaves out all the same is read alone before it is taken for gone.
//!
//! One waiting call at a time reads (the reader); the others wait for its news. When the reader's
//! own action has ended, it steps down and another waiting call reads next.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use orca_machines::{Error, Result};
use reqwest::Method;
use tokio::time::Instant;

use crate::client::{classify, Client};
use crate::model::{Action, ActionAnswer, ActionError, Actions};
use orca_machines::kit::lock;

/// The most actions one read names: the API may leave the ids beyond 25 out of its answer.
const PER_READ: usize = 25;

/// How many poll intervals a read lets the calls queued for the rate limit go first.
const YIELD_INTERVALS: u32 = 10;

/// The actions the provider's calls wait for, read together.
#[derive(Debug)]
pub(crate) struct Poller {
    watch: Mutex<Watch>,
    /// Bumped after every read, and when a reader steps down: the waiting calls look again.
    news: tokio::sync::watch::Sender<u64>,
}

#[derive(Debug, Default)]
struct Watch {
    /// The actions waited for, with how many calls wait for each.
    waiting: HashMap<i64, usize>,
    /// Actions a read found ended, kept while a call waits for them.
    ended: HashMap<i64, Action>,
    /// Whether a call is reading (or waiting for its turn to read).
    reading: bool,
    /// When the last read was made.
    last: Option<Instant>,
}

impl Default for Poller {
    fn default() -> Self {
        Poller {
            watch: Mutex::new(Watch::default()),
            news: tokio::sync::watch::channel(0).0,
        }
    }
}

/// A call's wait for one action; dropped (the call ended or was cancelled), the action is no
/// longer read for it.
struct Interest<'a> {
    poller: &'a Poller,
    id: i64,
}

impl Drop for Interest<'_> {
    fn drop(&mut self) {
        let mut w = lock(&self.poller.watch);
        if let Some(n) = w.waiting.get_mut(&self.id) {
            *n -= 1;
            if *n == 0 {
                w.waiting.remove(&self.id);
                w.ended.remove(&self.id);
            }
        }
    }
}

/// The reader's turn; dropped, it steps down and tells the waiting calls.
struct Turn<'a>(&'a Poller);

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        lock(&self.0.watch).reading = false;
        self.0.news.send_modify(|n| *n += 1);
    }
}

/// How an ended action ended: `Ok` on success, its error (classified by its code) otherwise;
/// `None` while it runs (`running`, or a word added later).
pub(crate) fn outcome(a: &Action) -> Option<Result<()>> {
    match a.status.as_str() {
        "success" => Some(Ok(())),
        "error" => {
            let (code, msg) = a
                .error
                .as_ref()
                .map(|e| (e.code.clone(), e.message.clone()))
                .unwrap_or_else(|| (String::new(), "no message".into()));
            let words = format!("action {} ({}) failed: {msg}", a.id, a.command);
            Some(Err(
                classify(&code, &words, None, None, None).with_operation(a.command.clone())
            ))
        }
        _ => None,
    }
}

impl Poller {
    /// Waits for `action` (as the call that started it answered) to end, reading it with every
    /// other action waited for, every `interval`, for at most `timeout`. An action that ended is the
    /// inner result: `Ok` on success, the action's error otherwise (over, whatever its code says of
    /// a later try). One whose end is not known is the outer error: a failed read, or a passing
    /// failure naming it when it outlasts `timeout` (it goes on in the cloud).
    pub(crate) async fn wait_end(
        &self,
        client: &Client,
        action: &Action,
        interval: Duration,
        timeout: Duration,
    ) -> Result<Result<()>> {
        if let Some(done) = outcome(action) {
            return Ok(done);
        }
        let started = Instant::now();
        let deadline = started + timeout;
        let _interest = self.interest(action.id);
        let mut news = self.news.subscribe();
        let timed_out = || {
            Error::transient(format!(
                "{} did not finish within {} ms; it goes on in the cloud",
                action.command,
                timeout.as_millis()
            ))
            .with_operation(action.command.clone())
        };
        loop {
            news.borrow_and_update();
            if let Some(done) = self.ended(action.id) {
                return Ok(done);
            }
            let Some((turn, last)) = self.take_turn() else {
                // Another call reads: wait for its news.
                match tokio::time::timeout_at(deadline, news.changed()).await {
                    Ok(_) => continue,
                    Err(_) => return Err(timed_out()),
                }
            };
            let next = last.map_or(started, |t| t.max(started)) + interval;
            if next > deadline {
                return Err(timed_out());
            }
            tokio::time::sleep_until(next).await;
            let read = self.read(client, interval * YIELD_INTERVALS).await;
            drop(turn);
            read?;
        }
    }

    fn interest(&self, id: i64) -> Interest<'_> {
        *lock(&self.watch).waiting.entry(id).or_insert(0) += 1;
        Interest { poller: self, id }
    }

    fn ended(&self, id: i64) -> Option<Result<()>> {
        lock(&self.watch).ended.get(&id).and_then(outcome)
    }

    /// The turn to read, with the time of the last read, unless another call has it.
    fn take_turn(&self) -> Option<(Turn<'_>, Option<Instant>)> {
        let mut w = lock(&self.watch);
        if w.reading {
            return None;
        }
        w.reading = true;
        Some((Turn(self), w.last))
    }

    /// One read of every action waited for that has not ended (in reads of 25).
    async fn read(&self, client: &Client, yield_for: Duration) -> Result<()> {
        let ids: Vec<i64> = {
            let w = lock(&self.watch);
            let mut ids: Vec<i64> = w
                .waiting
                .keys()
                .filter(|id| !w.ended.contains_key(id))
                .copied()
                .collect();
            ids.sort_unstable();
            ids
        };
        for chunk in ids.chunks(PER_READ) {
            let mut query: Vec<(&str, String)> =
                chunk.iter().map(|id| ("id", id.to_string())).collect();
            query.push(("per_page", PER_READ.to_string()));
            // While the calls that start actions wait for the rate limit, the read waits behind
            // them (at most a few intervals): the actions it would read are younger than
            // that wait, and every request it spends delays the calls behind it.
            let r = client
                .call_yielding::<Actions>("actions.list", "/actions", &query, yield_for)
                .await;
            // A failed read counts as a read too: the next one waits its interval.
            lock(&self.watch).last = Some(Instant::now());
            let r = r?;
            let mut left_out = Vec::new();
            {
                let mut w = lock(&self.watch);
                for id in chunk {
                    match r.actions.iter().find(|a| a.id == *id) {
                        Some(a) if outcome(a).is_some() => {
                            w.ended.insert(*id, a.clone());
                        }
                        Some(_) => {}
                        None => left_out.push(*id),
                    }
                }
            }
            for id in left_out {
                self.read_alone(client, id).await?;
            }
        }
        Ok(())
    }

    /// Reads action `id`, which a read of several left out: a listing's silence is no proof that
    /// an action is gone, `GET /actions/{id}` answering 404 is (an action the API no longer knows
    /// cannot be followed: it ends the wait, as failed).
    async fn read_alone(&self, client: &Client, id: i64) -> Result<()> {
        let path = format!("/actions/{id}");
        let ended = match client
            .call::<ActionAnswer>("actions.get", Method::GET, &path, &[], None)
            .await
        {
            Ok(a) => outcome(&a.action).is_some().then_some(a.action),
            Err(Error::NotFound { .. }) => Some(vanished(id)),
            Err(e) => return Err(e),
        };
        if let Some(a) = ended {
            lock(&self.watch).ended.insert(id, a);
        }
        Ok(())
    }
}

/// An action the API does not show any more, as an action that ended in error.
fn vanished(id: i64) -> Action {
    Action {
        id,
        command: "action".into(),
        status: "error".into(),
        error: Some(ActionError {
            code: "not_found".into(),
            message: format!("action {id} is not found"),
        }),
    }
}
