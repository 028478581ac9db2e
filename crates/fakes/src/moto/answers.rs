//! EC2's answers as the proxy writes them: errors, and moto's instances reshaped as EC2 shows them.

use std::collections::HashSet;
use std::time::Instant;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::proxy::{lock, ProxyState};
use super::{xml, TOKEN_PREFIX};

/// An EC2 error answer, in EC2's shape.
pub fn ec2_error_body(code: &str, message: &str) -> String {
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response><Errors><Error><Code>{code}</Code>\
         <Message>{message}</Message></Error></Errors>\
         <RequestID>ea966190-f9aa-478e-9ede-example</RequestID></Response>"
    )
}

pub(super) fn xml_response(status: u16, body: String) -> Response {
    (
        StatusCode::from_u16(status).unwrap(),
        [("content-type", "text/xml;charset=UTF-8")],
        body,
    )
        .into_response()
}

pub(super) fn error_response(status: u16, code: &str, message: &str) -> Response {
    xml_response(status, ec2_error_body(code, message))
}

/// The code of an EC2 error answer (`<Response><Errors><Error><Code>`).
pub(super) fn error_code(body: &str) -> Option<String> {
    let all = xml::elements(body);
    xml::find(&all, &["Response", "Errors", "Error", "Code"])
        .map(|i| xml::text(body, &all, i).to_string())
}

/// The content of a document's root element.
pub(super) fn inner_of_root(doc: &str) -> String {
    let all = xml::elements(doc);
    all.iter()
        .position(|e| e.parent.is_none())
        .map(|r| xml::text(doc, &all, r).to_string())
        .unwrap_or_default()
}

/// Each instance of a DescribeInstances-shaped answer as EC2 would write it: `launchTime` the last
/// start, `StateTransitionReason` in GMT, and `pending` for as long as [`Proxy::keep_pending`] says.
pub(super) fn as_ec2_writes_it(state: &ProxyState, body: &str) -> String {
    let body = body.replace(" UTC)</reason>", " GMT)</reason>");
    let (started, pending, reasons) = {
        let ec2 = lock(&state.ec2);
        let now = Instant::now();
        let pending: Vec<String> = ec2
            .pending_until
            .iter()
            .filter(|(_, t)| **t > now)
            .map(|(id, _)| id.clone())
            .collect();
        (ec2.started.clone(), pending, ec2.launch_reasons.clone())
    };
    if started.is_empty() && pending.is_empty() && reasons.is_empty() {
        return body;
    }
    let Some((mut listed, (s, e))) = xml::instances(&body) else {
        return body;
    };
    for l in &mut listed {
        if let Some(t) = started.get(&l.id) {
            let stamp = t.format("%Y-%m-%dT%H:%M:%S.000Z").to_string();
            l.item = xml::replace_child_text(&l.item, "launchTime", &stamp);
        }
        // moto's instance is running at once; EC2's is pending until it has booted (only a running
        // one: a stop or a terminate moves on from there).
        if pending.contains(&l.id) && l.item.contains("<name>running</name>") {
            l.item = xml::replace_child_text(
                &l.item,
                "instanceState",
                "<code>0</code><name>pending</name>",
            );
        }
        // A launch that failed ends with EC2's reason, where moto names a user's terminate.
        if let Some((code, message)) = reasons.get(&l.id) {
            let reason = format!("<code>{code}</code><message>{code}: {message}</message>");
            l.item = xml::replace_child_text(&l.item, "stateReason", &reason);
        }
    }
    format!(
        "{}{}{}",
        &body[..s],
        xml::reservation_set(&listed),
        &body[e..]
    )
}

/// A listing's answer without hidden instances, cut to the page at `offset` of `per_page`.
pub(super) fn page_of(
    body: &str,
    hidden: &dyn Fn(&str) -> bool,
    offset: usize,
    per_page: Option<usize>,
) -> String {
    let Some((listed, (s, e))) = xml::instances(body) else {
        return body.to_string();
    };
    let visible: Vec<xml::Listed> = listed.into_iter().filter(|l| !hidden(&l.id)).collect();
    let end = per_page.map_or(visible.len(), |n| (offset + n).min(visible.len()));
    let page = visible.get(offset.min(end)..end).unwrap_or_default();
    let next = (end < visible.len()).then_some(end);
    with_page(body, (s, e), page, next)
}

/// A filtered listing's answer as EC2 pages it: the page at `offset` looks at the next `scan`
/// instances of the region (`order`, matching or not) and holds those of them that match, so that
/// it may be short or empty while a `NextToken` says more is to come.
pub(super) fn page_by_scan(
    body: &str,
    hidden: &dyn Fn(&str) -> bool,
    offset: usize,
    scan: usize,
    order: &[String],
) -> String {
    let Some((listed, range)) = xml::instances(body) else {
        return body.to_string();
    };
    let end = (offset + scan).min(order.len());
    let window: HashSet<&str> = order
        .get(offset.min(end)..end)
        .unwrap_or_default()
        .iter()
        .map(String::as_str)
        .collect();
    let page: Vec<xml::Listed> = listed
        .into_iter()
        .filter(|l| window.contains(l.id.as_str()) && !hidden(&l.id))
        .collect();
    let next = (end < order.len()).then_some(end);
    with_page(body, range, &page, next)
}

/// `body` with its `reservationSet` (at `range`) replaced by `page`'s, and a `NextToken` for the
/// page at offset `next`.
fn with_page(
    body: &str,
    (s, e): (usize, usize),
    page: &[xml::Listed],
    next: Option<usize>,
) -> String {
    let rest = &body[e..];
    let next = next
        .map(|n| format!("<nextToken>{TOKEN_PREFIX}{n}</nextToken>"))
        .unwrap_or_default();
    // moto wrote no nextToken of its own (the proxy asked for every instance): ours goes before the
    // root's end tag.
    let close = rest.rfind("</").unwrap_or(rest.len());
    format!(
        "{}{}{}{next}{}",
        &body[..s],
        xml::reservation_set(page),
        &rest[..close],
        &rest[close..]
    )
}

/// `body` with every `<launchTime>` moved by `offset`.
pub(super) fn shift_launch_times(body: &str, offset: chrono::TimeDelta) -> String {
    const OPEN: &str = "<launchTime>";
    let mut out = String::with_capacity(body.len());
    let mut rest = body;
    while let Some(i) = rest.find(OPEN) {
        let (head, tail) = rest.split_at(i + OPEN.len());
        out.push_str(head);
        let end = tail.find('<').unwrap_or(tail.len());
        let (stamp, after) = tail.split_at(end);
        match chrono::DateTime::parse_from_rfc3339(stamp) {
            Ok(t) => {
                let moved = t.with_timezone(&chrono::Utc) + offset;
                out.push_str(&moved.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string());
            }
            Err(_) => out.push_str(stamp),
        }
        rest = after;
    }
    out.push_str(rest);
    out
}
