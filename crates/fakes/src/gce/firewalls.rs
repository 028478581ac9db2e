//! `firewalls` (get, list, patch as a JSON merge patch) and `networks.get` with its subnets.

use super::*;

// Firewalls and networks

pub(super) async fn list_firewalls(
    State(state): State<Shared>,
    Path(project): Path<String>,
    Query(q): Query<ListQuery>,
) -> Answer {
    check_project(&project)?;
    let filter = filter_of(&q)?;
    let items: Vec<Value> = lock(&state)
        .firewalls
        .values()
        .filter(|f| filter.matches(f))
        .cloned()
        .collect();
    page(
        items,
        &q,
        "compute#firewallList",
        format!("{LINK}/projects/{PROJECT}/global/firewalls"),
    )
}

pub(super) async fn get_firewall(
    State(state): State<Shared>,
    Path((project, name)): Path<(String, String)>,
) -> Answer {
    check_project(&project)?;
    let rule = lock(&state).firewalls.get(&name).cloned();
    let rule =
        rule.ok_or_else(|| not_found(&format!("projects/{project}/global/firewalls/{name}")))?;
    Ok(Json(rule).into_response())
}

pub(super) fn merge_patch(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(p) => {
            if !target.is_object() {
                *target = json!({});
            }
            let t = target.as_object_mut().expect("object");
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        other => *target = other.clone(),
    }
}

pub(super) fn valid_ipv4_cidr(s: &str) -> bool {
    let (ip, len) = s.split_once('/').unwrap_or((s, "32"));
    let octets: Vec<&str> = ip.split('.').collect();
    octets.len() == 4
        && octets.iter().all(|o| o.parse::<u8>().is_ok())
        && len.parse::<u8>().is_ok_and(|l| l <= 32)
}

pub(super) async fn patch_firewall(
    State(state): State<Shared>,
    Path((project, name)): Path<(String, String)>,
    Query(q): Query<MutateQuery>,
    body: Bytes,
) -> Answer {
    check_project(&project)?;
    let mut s = change(&state, &q.request_id)?;
    let patch = serde_json::from_slice::<Value>(&body)
        .map_err(|_| invalid("Invalid JSON payload received."))?;
    let Some(current) = s.firewalls.get(&name).cloned() else {
        return Err(not_found(&format!(
            "projects/{project}/global/firewalls/{name}"
        )));
    };
    if patch
        .get("name")
        .is_some_and(|n| n.as_str() != Some(name.as_str()))
    {
        return Err(invalid(
            "Invalid value for field 'resource.name': the name cannot be changed",
        ));
    }
    if let Some(ranges) = patch.get("sourceRanges") {
        let ok = ranges
            .as_array()
            .is_some_and(|a| a.iter().all(|r| r.as_str().is_some_and(valid_ipv4_cidr)));
        if !ok {
            return Err(invalid("Invalid value for field 'resource.sourceRanges'"));
        }
    }
    let mut updated = current;
    merge_patch(&mut updated, &patch);
    s.firewalls.insert(name.clone(), updated);
    let target = format!("{LINK}/projects/{PROJECT}/global/firewalls/{name}");
    let op = s.new_op(
        None,
        "patch",
        target,
        Effect::None,
        None,
        q.request_id.as_deref(),
    );
    Ok(Json(op).into_response())
}

pub(super) async fn get_network(
    State(state): State<Shared>,
    Path((project, name)): Path<(String, String)>,
    _headers: HeaderMap,
) -> Answer {
    check_project(&project)?;
    let s = lock(&state);
    let Some(n) = s.networks.get(&name) else {
        return Err(not_found(&format!(
            "projects/{project}/global/networks/{name}"
        )));
    };
    let mut n = n.clone();
    n["subnetworks"] = json!(s
        .subnets
        .iter()
        .filter(|(_, net)| **net == name)
        .map(|((region, sub), _)| format!(
            "{LINK}/projects/{PROJECT}/regions/{region}/subnetworks/{sub}"
        ))
        .collect::<Vec<_>>());
    Ok(Json(n).into_response())
}
