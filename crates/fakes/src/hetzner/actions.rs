//! Actions: every change answers one, `running` for the fake's action time (on tokio's clock, so a
//! test with paused time runs them at once), then `success` or `error` (`{"code", "message"}`); the
//! change takes effect when it ends, and the server is `locked` while one of its actions runs.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Json;
use serde_json::{json, Value};
use tokio::time::Instant;

use super::servers::server_id;
use super::{
    invalid, lock, not_found, paged, params, rfc3339_now, ApiError, ApiResult, Params, Shared,
    State_,
};

/// What an action does when it ends well.
#[derive(Debug, Clone)]
pub(super) enum Effect {
    Create,
    Start,
    Stop,
    ChangeType(String),
    Delete,
}

#[derive(Debug, Clone)]
pub(super) struct Action {
    pub id: i64,
    pub command: &'static str,
    pub server: i64,
    pub status: &'static str,
    /// When it ends; `None` while it waits for the action it follows (a create's `start_server`).
    ends_at: Option<Instant>,
    effect: Effect,
    started: String,
    finished: Option<String>,
    /// The error it ends with, when it is to fail: (code, message).
    pub fail: Option<(String, String)>,
    error: Option<(String, String)>,
}

impl State_ {
    /// A new action on `server`, running from now for the action time.
    pub(super) fn action(&mut self, command: &'static str, server: i64, effect: Effect) -> i64 {
        let ends_at = Some(Instant::now() + self.action_time);
        self.add_action(command, server, effect, ends_at)
    }

    /// A new action on `server` that starts when the running action of its server ends (a create's
    /// next action).
    pub(super) fn next_action(
        &mut self,
        command: &'static str,
        server: i64,
        effect: Effect,
    ) -> i64 {
        self.add_action(command, server, effect, None)
    }

    fn add_action(
        &mut self,
        command: &'static str,
        server: i64,
        effect: Effect,
        ends_at: Option<Instant>,
    ) -> i64 {
        let id = self.next();
        self.actions.insert(
            id,
            Action {
                id,
                command,
                server,
                status: "running",
                ends_at,
                effect,
                started: rfc3339_now(),
                finished: None,
                fail: None,
                error: None,
            },
        );
        id
    }

    /// Whether an action of server `id` runs (or waits to run): the server is locked.
    pub(super) fn locked(&self, id: i64) -> bool {
        self.actions
            .values()
            .any(|a| a.server == id && a.status == "running")
    }

    /// `423 locked` while an action of server `id` runs, as Hetzner answers a change then.
    pub(super) fn check_unlocked(&self, id: i64) -> Result<(), ApiError> {
        if self.locked(id) {
            return Err(ApiError(
                StatusCode::LOCKED,
                "locked",
                "The item you are trying to access is locked (there is already an action running)"
                    .into(),
            ));
        }
        Ok(())
    }

    /// Ends every action whose time is up, in the order they end (an ending create starts its next
    /// action, which may end within the same call).
    pub(super) fn settle(&mut self) {
        let now = Instant::now();
        loop {
            let due = self
                .actions
                .values()
                .filter(|a| a.status == "running")
                .filter_map(|a| a.ends_at.filter(|t| *t <= now).map(|t| (t, a.id)))
                .min();
            match due {
                Some((at, id)) => self.finish(id, at),
                None => return,
            }
        }
    }

    /// Ends action `id` at `at`: its effect happens (or its error is recorded).
    fn finish(&mut self, id: i64, at: Instant) {
        let Some(a) = self.actions.get(&id).cloned() else {
            return;
        };
        let (status, error) = match &a.fail {
            Some(e) => ("error", Some(e.clone())),
            None => ("success", None),
        };
        // A create's next actions (its `start_server`), waiting for it.
        let next: Vec<i64> = self
            .actions
            .values()
            .filter(|x| x.server == a.server && x.status == "running" && x.ends_at.is_none())
            .map(|x| x.id)
            .collect();
        if a.fail.is_some() {
            if let Some(srv) = self.servers.get_mut(&a.server) {
                srv.status = "off".into();
            }
            // Its next actions cannot run: they end in error too.
            for n in next {
                if let Some(x) = self.actions.get_mut(&n) {
                    x.status = "error";
                    x.finished = Some(rfc3339_now());
                    x.error = Some(("action_failed".into(), "the server was not created".into()));
                }
            }
        } else {
            self.take_effect(&a, !next.is_empty());
            for n in next {
                if let Some(x) = self.actions.get_mut(&n) {
                    x.ends_at = Some(at + self.action_time);
                }
            }
        }
        if let Some(x) = self.actions.get_mut(&id) {
            x.status = status;
            x.finished = Some(rfc3339_now());
            x.error = error;
        }
    }

    /// What action `a` changes when it succeeds (`next`: a next action follows it).
    fn take_effect(&mut self, a: &Action, next: bool) {
        if let Effect::Delete = a.effect {
            self.servers.remove(&a.server);
            return;
        }
        let ignore_shutdown = self.ignore_shutdown;
        let Some(srv) = self.servers.get_mut(&a.server) else {
            return;
        };
        match &a.effect {
            // Made, and off until its start_server action (if any) runs.
            Effect::Create => srv.status = if next { "starting" } else { "off" }.into(),
            Effect::Start => srv.status = "running".into(),
            Effect::Stop => {
                if !(a.command == "shutdown_server" && ignore_shutdown) {
                    srv.status = "off".into();
                }
            }
            Effect::ChangeType(t) => {
                srv.server_type = t.clone();
                srv.status = "off".into();
            }
            Effect::Delete => {}
        }
    }

    pub(super) fn action_json(&self, id: i64) -> Value {
        let a = &self.actions[&id];
        let done = a.status != "running";
        json!({
            "id": a.id,
            "command": a.command,
            "status": a.status,
            "progress": if done { 100 } else { 0 },
            "started": a.started,
            "finished": a.finished,
            "resources": [{"id": a.server, "type": "server"}],
            "error": a.error.as_ref().map(|(c, m)| json!({"code": c, "message": m})),
        })
    }

    /// How many actions of `command` were made on server `id`.
    pub(super) fn count_actions(&self, id: i64, command: &str) -> usize {
        self.actions
            .values()
            .filter(|a| a.server == id && a.command == command)
            .count()
    }
}

pub(super) async fn get_action(State(state): State<Shared>, Path(id): Path<String>) -> ApiResult {
    let id: i64 = id.parse().map_err(|_| invalid("invalid action id"))?;
    let s = lock(&state);
    if !s.actions.contains_key(&id) {
        return Err(not_found("action"));
    }
    Ok(Json(json!({"action": s.action_json(id)})).into_response())
}

/// The most ids one `GET /actions?id=..` answers for: Hetzner's own Go client reads at most 25 at
/// once, as the API may leave the ids beyond them out of its answer without a word.
pub const ACTIONS_PER_READ: usize = 25;

/// `GET /actions?id=..&id=..`: the actions named, of the first [`ACTIONS_PER_READ`] ids named
/// (the others are left out, as the API may leave them out); listing every action of the project
/// without `id` was removed from the API in January 2025.
pub(super) async fn list_actions(State(state): State<Shared>, Query(q): Params) -> ApiResult {
    let mut ids = params(&q, "id")
        .into_iter()
        .map(|i| {
            i.parse::<i64>()
                .map_err(|_| invalid("id must be an action id"))
        })
        .collect::<Result<Vec<i64>, ApiError>>()?;
    if ids.is_empty() {
        return Err(invalid("id is required"));
    }
    ids.dedup();
    ids.truncate(ACTIONS_PER_READ);
    actions_page(&lock(&state), &q, |a| ids.contains(&a.id))
}

pub(super) async fn list_server_actions(
    State(state): State<Shared>,
    Path(id): Path<String>,
    Query(q): Params,
) -> ApiResult {
    let id = server_id(&id)?;
    let s = lock(&state);
    if !s.servers.get(&id).is_some_and(|v| v.visible()) {
        return Err(not_found("server"));
    }
    actions_page(&s, &q, |a| a.server == id)
}

/// One page of the actions `pick` picks, of the statuses the query's `status` names (any without).
fn actions_page(s: &State_, q: &[(String, String)], pick: impl Fn(&Action) -> bool) -> ApiResult {
    let statuses = params(q, "status");
    let items = s
        .actions
        .values()
        .filter(|a| pick(a) && (statuses.is_empty() || statuses.contains(&a.status)))
        .map(|a| s.action_json(a.id))
        .collect();
    paged(q, "actions", items)
}
