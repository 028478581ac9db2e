//! Zone and global `operations`: get and wait, and the zone's list.

use super::*;

// Operations

/// The path of a zone operation (`project`, `zone`, `name`) or a global one (no `zone`).
type OpPath = Path<HashMap<String, String>>;

pub(super) async fn get_op(State(state): State<Shared>, Path(p): OpPath) -> Response {
    op_answer(&state, &p, false).await
}

pub(super) async fn wait_op(State(state): State<Shared>, Path(p): OpPath) -> Response {
    op_answer(&state, &p, true).await
}

/// An operation as `get` shows it, or as `wait` does: `wait` answers when the operation ends, or
/// after two minutes (the reference's "might return after zero seconds" is
/// [`FakeGce::answer_waits_early`]).
pub(super) async fn op_answer(state: &Shared, p: &HashMap<String, String>, wait: bool) -> Response {
    let (project, name) = (&p["project"], p["name"].as_str());
    let scope = p
        .get("zone")
        .map_or_else(|| "global".to_string(), |z| format!("zones/{z}"));
    let scope = scope.as_str();
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

/// `zoneOperations.list`: the zone's operations, running and done, that match the `filter`
/// (`(operationType = "delete") (targetId = "...")`, say), in the order they started.
pub(super) async fn list_ops(
    State(state): State<Shared>,
    Path((project, zone)): Path<(String, String)>,
    Query(q): Query<ListQuery>,
) -> Answer {
    check_project(&project).and(check_zone(&zone))?;
    let filter = filter_of(&q)?;
    let s = lock(&state);
    let scope = format!("/zones/{zone}/operations/");
    let mut items: Vec<(u64, Value)> = s
        .ops
        .values()
        .filter(|op| {
            let link = op.value["selfLink"].as_str().unwrap_or_default();
            link.contains(&scope) && filter.matches(&op.value)
        })
        .map(|op| {
            let id = op.value["id"].as_str().and_then(|i| i.parse().ok());
            (id.unwrap_or(0), op.value.clone())
        })
        .collect();
    items.sort_by_key(|(id, _)| *id);
    page(
        items.into_iter().map(|(_, op)| op).collect(),
        &q,
        "compute#operationList",
        format!("{LINK}/projects/{PROJECT}/zones/{zone}/operations"),
    )
}
