//! What every handler shares: Compute Engine's error body and its codes, the checks of project,
//! zone, names and labels, the `requestId` check, and one page of a list or an aggregated list.

use super::*;

/// A handler's answer: a check's error answer leaves early with `?`.
pub(super) type Answer = Result<Response, Response>;

/// Compute Engine's error body.
pub(super) fn gerr(code: u16, reason: &str, message: impl Into<String>) -> Response {
    let message = message.into();
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (
        status,
        Json(json!({"error": {
            "code": code,
            "message": message,
            "errors": [{"message": message, "domain": "global", "reason": reason}],
        }})),
    )
        .into_response()
}

pub(super) fn not_found(what: &str) -> Response {
    gerr(
        404,
        "notFound",
        format!("The resource '{what}' was not found"),
    )
}

pub(super) fn invalid(message: impl Into<String>) -> Response {
    gerr(400, "invalid", message)
}

pub(super) fn check_project(project: &str) -> Result<(), Response> {
    if project == PROJECT {
        Ok(())
    } else {
        Err(not_found(&format!("projects/{project}")))
    }
}

pub(super) fn check_zone(zone: &str) -> Result<(), Response> {
    if ZONES.contains(&zone) {
        Ok(())
    } else {
        Err(invalid(format!(
            "Invalid value for field 'zone': '{zone}'. Unknown zone."
        )))
    }
}

/// A resource name (RFC 1035): a label key without `_` that does not end in `-`.
pub(super) fn valid_name(name: &str) -> bool {
    valid_label_key(name) && !name.contains('_') && !name.ends_with('-')
}

/// A label key: a label value that starts with a lowercase letter.
pub(super) fn valid_label_key(k: &str) -> bool {
    k.starts_with(|c: char| c.is_ascii_lowercase()) && valid_label_value(k)
}

pub(super) fn valid_label_value(v: &str) -> bool {
    v.len() <= 63
        && v.bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-' || c == b'_')
}

pub(super) fn check_labels(labels: &Value) -> Result<(), Response> {
    check_labels_of("labels", labels)
}

/// Labels given in `field` of a request (an instance's or a disk's): the same rules for both.
pub(super) fn check_labels_of(field: &str, labels: &Value) -> Result<(), Response> {
    let Some(map) = labels.as_object() else {
        return if labels.is_null() {
            Ok(())
        } else {
            Err(invalid(format!("Invalid value for field '{field}'")))
        };
    };
    if map.len() > 64 {
        return Err(invalid("Too many labels (at most 64)"));
    }
    for (k, v) in map {
        let v = v.as_str().unwrap_or("\u{0}");
        if !valid_label_key(k) || !valid_label_value(v) {
            return Err(invalid(format!(
                "Invalid value for field '{field}': '{k}'. Label keys and values must be lowercase letters, digits, '-' and '_'"
            )));
        }
    }
    Ok(())
}

#[derive(Deserialize)]
pub(super) struct ListQuery {
    pub(super) filter: Option<String>,
    #[serde(rename = "maxResults")]
    pub(super) max_results: Option<String>,
    #[serde(rename = "pageToken")]
    pub(super) page_token: Option<String>,
}

/// The list's `filter`, parsed.
pub(super) fn filter_of(q: &ListQuery) -> Result<Filter, Response> {
    Filter::parse(q.filter.as_deref().unwrap_or(""))
        .map_err(|e| invalid(format!("Invalid value for field 'filter': {e}")))
}

#[derive(Deserialize)]
pub(super) struct MutateQuery {
    #[serde(rename = "requestId")]
    pub(super) request_id: Option<String>,
}

pub(super) fn check_request_id(r: &Option<String>) -> Result<(), Response> {
    let Some(r) = r else { return Ok(()) };
    // The hyphenated form only (what the reference's example shows), never the zero UUID.
    let shape = r.len() == 36 && uuid::Uuid::try_parse(r).is_ok_and(|u| !u.is_nil());
    if !shape {
        return Err(invalid(format!(
            "Invalid value for field 'requestId': '{r}'. The request ID must be a valid UUID with the exception that zero UUID is not supported (00000000-0000-0000-0000-000000000000)."
        )));
    }
    Ok(())
}

/// The world for a change asked with `request_id` (checked); `Err` is the answer to give at once: a
/// bad id, or the operation of an earlier call with the same id (the repeat changes nothing).
pub(super) fn change<'a>(
    state: &'a Shared,
    request_id: &Option<String>,
) -> Result<MutexGuard<'a, World>, Response> {
    check_request_id(request_id)?;
    let s = lock(state);
    match s.repeated(request_id.as_deref()) {
        Some(op) => Err(Json(op).into_response()),
        None => Ok(s),
    }
}

/// The window `start..end` of `len` items (already filtered and ordered) that `maxResults` and
/// `pageToken` ask for.
pub(super) fn window(len: usize, q: &ListQuery) -> Result<(usize, usize), Response> {
    let max = match q.max_results.as_deref().map(str::parse::<u32>) {
        // 0 means the most, as no `maxResults` does.
        None | Some(Ok(0)) => 500,
        Some(Ok(n)) if n <= 500 => n as usize,
        Some(_) => {
            return Err(invalid(
                "Invalid value for field 'maxResults': must be between 0 and 500, inclusive",
            ))
        }
    };
    let start = match q.page_token.as_deref().filter(|t| !t.is_empty()) {
        None => 0,
        Some(t) => match t.strip_prefix("pt1.").and_then(|n| n.parse::<usize>().ok()) {
            Some(n) if n <= len => n,
            _ => return Err(invalid("Invalid value for field 'pageToken'")),
        },
    };
    Ok((start, (start + max).min(len)))
}

/// One page of `items` (already filtered and ordered) for `maxResults` and `pageToken`.
pub(super) fn page(items: Vec<Value>, q: &ListQuery, kind: &str, self_link: String) -> Answer {
    let (start, end) = window(items.len(), q)?;
    let mut body = json!({
        "kind": kind,
        "id": self_link.clone(),
        "selfLink": self_link,
    });
    if end > start {
        body["items"] = json!(items[start..end].to_vec());
    }
    if end < items.len() {
        body["nextPageToken"] = json!(format!("pt1.{end}"));
    }
    Ok(Json(body).into_response())
}

/// One page of an aggregated list: `items` are (zone, resource) pairs in zone order; the page holds
/// every zone of the project as the scope `zones/<zone>`, with its resources of this page under
/// `field`, or a `NO_RESULTS_ON_PAGE` warning.
pub(super) fn aggregated_page(
    items: Vec<(String, Value)>,
    q: &ListQuery,
    kind: &str,
    field: &str,
    self_link: String,
) -> Answer {
    let (start, end) = window(items.len(), q)?;
    let on_page = &items[start..end];
    let mut scopes = serde_json::Map::new();
    for zone in ZONES {
        let scope = format!("zones/{zone}");
        let here: Vec<Value> = on_page
            .iter()
            .filter(|(z, _)| z == zone)
            .map(|(_, v)| v.clone())
            .collect();
        let entry = if here.is_empty() {
            json!({"warning": {
                "code": "NO_RESULTS_ON_PAGE",
                "message": format!("There are no results for scope '{scope}' on this page."),
                "data": [{"key": "scope", "value": scope}],
            }})
        } else {
            json!({ field: here })
        };
        scopes.insert(scope, entry);
    }
    let mut body = json!({
        "kind": kind,
        "id": self_link.trim_start_matches(&format!("{LINK}/")),
        "items": scopes,
        "selfLink": self_link,
    });
    if end < items.len() {
        body["nextPageToken"] = json!(format!("pt1.{end}"));
    }
    Ok(Json(body).into_response())
}
