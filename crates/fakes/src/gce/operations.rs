//! Zone and global `operations`: get and wait.

use super::*;

// Operations

pub(super) async fn get_zone_op(
    State(state): State<Shared>,
    Path((project, zone, name)): Path<(String, String, String)>,
) -> Response {
    op_answer(&state, &project, &format!("zones/{zone}"), &name, false)
}

pub(super) async fn wait_zone_op(
    State(state): State<Shared>,
    Path((project, zone, name)): Path<(String, String, String)>,
) -> Response {
    op_answer(&state, &project, &format!("zones/{zone}"), &name, true)
}

pub(super) async fn get_global_op(
    State(state): State<Shared>,
    Path((project, name)): Path<(String, String)>,
) -> Response {
    op_answer(&state, &project, "global", &name, false)
}

pub(super) async fn wait_global_op(
    State(state): State<Shared>,
    Path((project, name)): Path<(String, String)>,
) -> Response {
    op_answer(&state, &project, "global", &name, true)
}

pub(super) fn op_answer(
    state: &Shared,
    project: &str,
    scope: &str,
    name: &str,
    wait: bool,
) -> Response {
    if let Err(r) = check_project(project) {
        return r;
    }
    let mut s = lock(state);
    let in_scope = s.ops.get(name).is_some_and(|op| {
        let link = op.value["selfLink"].as_str().unwrap_or_default();
        link.contains(&format!("/{scope}/operations/"))
    });
    if !in_scope {
        return not_found(&format!("projects/{project}/{scope}/operations/{name}"));
    }
    if wait && s.early_waits > 0 {
        s.early_waits -= 1;
        return Json(s.ops[name].value.clone()).into_response();
    }
    match s.advance(name, wait) {
        Some(op) => Json(op).into_response(),
        None => not_found(&format!("projects/{project}/{scope}/operations/{name}")),
    }
}
