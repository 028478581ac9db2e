//! Zone and global `operations`: get and wait.

use super::*;

// Operations

pub(super) async fn get_zone_op(
    State(state): State<Shared>,
    Path((project, zone, name)): Path<(String, String, String)>,
) -> Response {
    op_answer(&state, &project, &format!("zones/{zone}"), &name, false).await
}

pub(super) async fn wait_zone_op(
    State(state): State<Shared>,
    Path((project, zone, name)): Path<(String, String, String)>,
) -> Response {
    op_answer(&state, &project, &format!("zones/{zone}"), &name, true).await
}

pub(super) async fn get_global_op(
    State(state): State<Shared>,
    Path((project, name)): Path<(String, String)>,
) -> Response {
    op_answer(&state, &project, "global", &name, false).await
}

pub(super) async fn wait_global_op(
    State(state): State<Shared>,
    Path((project, name)): Path<(String, String)>,
) -> Response {
    op_answer(&state, &project, "global", &name, true).await
}

/// An operation as `get` shows it, or as `wait` does: `wait` answers when the operation ends, or
/// after two minutes (the reference's "might return after zero seconds" is
/// [`FakeGce::answer_waits_early`]).
pub(super) async fn op_answer(
    state: &Shared,
    project: &str,
    scope: &str,
    name: &str,
    wait: bool,
) -> Response {
    if let Err(r) = check_project(project) {
        return r;
    }
    let missing = || not_found(&format!("projects/{project}/{scope}/operations/{name}"));
    let done_at = {
        let mut s = lock(state);
        let in_scope = s.ops.get(name).is_some_and(|op| {
            let link = op.value["selfLink"].as_str().unwrap_or_default();
            link.contains(&format!("/{scope}/operations/"))
        });
        if !in_scope {
            return missing();
        }
        if wait && s.early_waits > 0 {
            s.early_waits -= 1;
            return Json(s.ops[name].value.clone()).into_response();
        }
        if !wait || s.ops[name].value["status"] == "DONE" {
            return s
                .read_op(name)
                .map_or_else(missing, |op| Json(op).into_response());
        }
        s.ops[name].done_at
    };
    let longest = tokio::time::Instant::now() + Duration::from_secs(120);
    tokio::time::sleep_until(done_at.min(longest)).await;
    let mut s = lock(state);
    s.read_op(name)
        .map_or_else(missing, |op| Json(op).into_response())
}
