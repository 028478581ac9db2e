//! Actions: every change answers one, `running` for a number of reads, then `success` or `error`
//! (`{"code", "message"}`); the change takes effect when it ends.

use axum::extract::{Path, Query, State};
use axum::response::IntoResponse;
use axum::Json;
use serde_json::{json, Value};

use super::servers::server_id;
use super::{
    invalid, lock, not_found, paged, params, rfc3339_now, ApiResult, Params, Shared, State_,
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
    reads_left: u32,
    effect: Effect,
    started: String,
    finished: Option<String>,
    /// The error it ends with, when it is to fail: (code, message).
    pub fail: Option<(String, String)>,
    error: Option<(String, String)>,
}

impl State_ {
    pub(super) fn action(&mut self, command: &'static str, server: i64, effect: Effect) -> i64 {
        let id = self.next();
        self.actions.insert(
            id,
            Action {
                id,
                command,
                server,
                status: "running",
                reads_left: self.action_reads,
                effect,
                started: rfc3339_now(),
                finished: None,
                fail: None,
                error: None,
            },
        );
        id
    }

    /// Ends an action: its effect happens (or its error is recorded).
    fn finish(&mut self, id: i64) {
        let Some(a) = self.actions.get(&id).cloned() else {
            return;
        };
        if a.status != "running" {
            return;
        }
        let (status, error) = match &a.fail {
            Some(e) => ("error", Some(e.clone())),
            None => ("success", None),
        };
        // A create's `start_server` (its next action), still to run.
        let start_next: Vec<i64> = match a.effect {
            Effect::Create => self
                .actions
                .values()
                .filter(|x| {
                    x.server == a.server && x.command == "start_server" && x.status == "running"
                })
                .map(|x| x.id)
                .collect(),
            _ => Vec::new(),
        };
        if a.fail.is_some() {
            if let Some(srv) = self.servers.get_mut(&a.server) {
                srv.status = "off".into();
            }
            // Its next actions cannot run: they end in error too.
            for n in start_next {
                if let Some(x) = self.actions.get_mut(&n) {
                    x.status = "error";
                    x.finished = Some(rfc3339_now());
                    x.error = Some(("action_failed".into(), "the server was not created".into()));
                }
            }
        } else {
            let ignore_shutdown = self.ignore_shutdown;
            match &a.effect {
                Effect::Create => {
                    if let Some(srv) = self.servers.get_mut(&a.server) {
                        // Made, and off until its start_server action (if any) runs.
                        srv.status = if start_next.is_empty() {
                            "off"
                        } else {
                            "starting"
                        }
                        .into();
                    }
                }
                Effect::Start => {
                    if let Some(srv) = self.servers.get_mut(&a.server) {
                        srv.status = "running".into();
                    }
                }
                Effect::Stop => {
                    if let Some(srv) = self.servers.get_mut(&a.server) {
                        if !(a.command == "shutdown_server" && ignore_shutdown) {
                            srv.status = "off".into();
                        }
                    }
                }
                Effect::ChangeType(t) => {
                    if let Some(srv) = self.servers.get_mut(&a.server) {
                        srv.server_type = t.clone();
                        srv.status = "off".into();
                    }
                }
                Effect::Delete => {
                    self.servers.remove(&a.server);
                }
            }
        }
        if let Some(x) = self.actions.get_mut(&id) {
            x.status = status;
            x.finished = Some(rfc3339_now());
            x.error = error;
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
}

pub(super) async fn get_action(State(state): State<Shared>, Path(id): Path<String>) -> ApiResult {
    let id: i64 = id.parse().map_err(|_| invalid("invalid action id"))?;
    let mut s = lock(&state);
    // A create's next action (start_server) runs once the create action has ended.
    let waits_for_create = s.actions.get(&id).is_some_and(|a| {
        a.command == "start_server"
            && s.actions.values().any(|x| {
                x.server == a.server && x.command == "create_server" && x.status == "running"
            })
    });
    let a = s.actions.get_mut(&id).ok_or_else(|| not_found("action"))?;
    if a.status == "running" && !waits_for_create {
        if a.reads_left == 0 {
            s.finish(id);
        } else {
            a.reads_left -= 1;
        }
    }
    Ok(Json(json!({"action": s.action_json(id)})).into_response())
}

pub(super) async fn list_server_actions(
    State(state): State<Shared>,
    Path(id): Path<String>,
    Query(q): Params,
) -> ApiResult {
    let id = server_id(&id)?;
    let statuses = params(&q, "status");
    let s = lock(&state);
    if !s.servers.get(&id).is_some_and(|v| v.visible()) {
        return Err(not_found("server"));
    }
    let items = s
        .actions
        .values()
        .filter(|a| a.server == id)
        .filter(|a| statuses.is_empty() || statuses.contains(&a.status))
        .map(|a| s.action_json(a.id))
        .collect();
    paged(&q, "actions", items)
}
