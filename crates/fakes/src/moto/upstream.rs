//! Forwarding a request to moto, and making its answer EC2's.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashSet};
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use chrono::Utc;

use super::answers::{as_ec2_writes_it, error_code, inner_of_root, page_by_scan, page_of};
use super::lookups::{listed, moto_call};
use super::proxy::{lock, ProxyState, TokenRecord, View};
use super::{xml, TOKEN_PREFIX};

/// Forwards a request to moto and makes its answer EC2's.
#[allow(clippy::too_many_arguments)]
pub(super) async fn upstream(
    view: &View,
    action: &str,
    params: &BTreeMap<String, String>,
    method: &axum::http::Method,
    uri: &axum::http::Uri,
    headers: &HeaderMap,
    body: &Bytes,
) -> (Response, Option<String>) {
    let state = &*view.state;
    let listing = action == "DescribeInstances" && !params.contains_key("InstanceId.1");
    // A listing is asked of moto whole: the proxy pages by instance itself.
    let sent: Bytes = if listing {
        let kept: Vec<(String, String)> = by_token(state, params)
            .into_iter()
            .filter(|(k, _)| *k != "MaxResults" && *k != "NextToken")
            .collect();
        Bytes::from(
            form_urlencoded::Serializer::new(String::new())
                .extend_pairs(kept)
                .finish(),
        )
    } else {
        body.clone()
    };
    let path = uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
    let mut req = state
        .http
        .request(method.clone(), format!("{}{path}", state.upstream))
        .body(sent);
    for (k, v) in headers {
        if k != "host" && k != "content-length" {
            req = req.header(k, v);
        }
    }
    let r = match req.send().await {
        Ok(r) => r,
        Err(e) => {
            return (
                (StatusCode::BAD_GATEWAY, format!("proxy: {e}")).into_response(),
                None,
            )
        }
    };
    let status = r.status();
    let ct = r
        .headers()
        .get("content-type")
        .cloned()
        .unwrap_or_else(|| "text/xml".parse().unwrap());
    let bytes = r.bytes().await.unwrap_or_default();
    let mut text = String::from_utf8_lossy(&bytes).into_owned();
    let mut code = None;
    if status.is_success() {
        match action {
            "RunInstances" => {
                let ids = after_run(state, params, &text);
                fail_launch(state, &ids).await;
            }
            "StartInstances" => {
                let now = Utc::now();
                let mut ec2 = lock(&state.ec2);
                for id in listed(params, "InstanceId") {
                    ec2.started.insert(id, now);
                }
            }
            "DescribeInstances" => {
                text = as_ec2_writes_it(state, &text);
                if listing {
                    text = listing_page(view, params, &text).await;
                }
            }
            _ => {}
        }
    } else {
        code = error_code(&text);
    }
    let mut out = Response::new(Body::from(text));
    *out.status_mut() = status;
    out.headers_mut().insert("content-type", ct);
    (out, code)
}

/// Terminates the instances `ids` just made when a launch is to fail ([`super::Proxy::fail_launches`]).
async fn fail_launch(state: &ProxyState, ids: &[String]) {
    {
        let mut ec2 = lock(&state.ec2);
        if ec2.failing_launches == 0 || ids.is_empty() {
            return;
        }
        ec2.failing_launches -= 1;
        if let Some(reason) = ec2.failing_reason.clone() {
            for id in ids {
                ec2.launch_reasons.insert(id.clone(), reason.clone());
            }
        }
    }
    let keys: Vec<String> = (1..=ids.len()).map(|n| format!("InstanceId.{n}")).collect();
    let mut q = vec![("Action", "TerminateInstances"), ("Version", "2016-11-15")];
    q.extend(
        keys.iter()
            .map(String::as_str)
            .zip(ids.iter().map(String::as_str)),
    );
    moto_call(state, &q)
        .await
        .expect("moto terminates the instance of a failed launch");
}

/// What the proxy keeps of a RunInstances moto answered: the ClientToken, and when each new instance
/// shows (to reads, to tag filters) and stops being pending. Answers the new instances' ids.
fn after_run(state: &ProxyState, params: &BTreeMap<String, String>, answer: &str) -> Vec<String> {
    let ids: Vec<String> = xml::instances(&format!(
        "<R><reservationSet><item>{}</item></reservationSet></R>",
        inner_of_root(answer)
    ))
    .map(|(l, _)| l.into_iter().map(|l| l.id).collect())
    .unwrap_or_default();
    let mut ec2 = lock(&state.ec2);
    if let Some(token) = params.get("ClientToken") {
        let mut compared = params.clone();
        compared.remove("ClientToken");
        ec2.tokens.insert(
            token.clone(),
            TokenRecord {
                params: compared,
                instances: ids.clone(),
            },
        );
    }
    if !ec2.tag_lag.is_zero() {
        let at = Instant::now() + ec2.visibility_delay + ec2.tag_lag;
        for id in &ids {
            ec2.tag_indexed_at.insert(id.clone(), at);
        }
        if ec2.miss_first_look {
            ec2.tag_unmissed.extend(ids.iter().cloned());
        }
    }
    if !ec2.pending_for.is_zero() {
        let until = Instant::now() + ec2.pending_for;
        for id in &ids {
            ec2.pending_until.insert(id.clone(), until);
        }
    }
    if !ec2.visibility_delay.is_zero() {
        let until = Instant::now() + ec2.visibility_delay;
        if ec2.miss_first_look {
            ec2.unmissed.extend(ids.iter().cloned());
        }
        for id in &ids {
            ec2.hidden_until.insert(id.clone(), until);
        }
    }
    ids
}

/// The page a listing asked for, of moto's whole answer `all`: by scan when filtered and
/// [`super::Proxy::page_by_scan`] is on, else by instance.
async fn listing_page(view: &View, params: &BTreeMap<String, String>, all: &str) -> String {
    let state = &*view.state;
    let offset = params
        .get("NextToken")
        .and_then(|t| t.strip_prefix(TOKEN_PREFIX))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    let now = Instant::now();
    let (hidden_until, tag_indexed_at, scan, unmissed, tag_unmissed) = {
        let ec2 = lock(&state.ec2);
        (
            ec2.hidden_until.clone(),
            ec2.tag_indexed_at.clone(),
            ec2.scan_per_page,
            ec2.unmissed.clone(),
            ec2.tag_unmissed.clone(),
        )
    };
    let filtered = params.keys().any(|k| k.starts_with("Filter."));
    // A listing filtered on tags does not find what the tag index has not caught up with yet.
    let by_tag = params
        .iter()
        .any(|(k, v)| k.starts_with("Filter.") && k.ends_with(".Name") && v.starts_with("tag:"));
    let order = match (scan, filtered) {
        (Some(_), true) => scan_order(state).await,
        _ => None,
    };
    let missed = RefCell::new(HashSet::new());
    let hidden = |id: &str| {
        let first = unmissed.contains(id) || (by_tag && tag_unmissed.contains(id));
        if first {
            missed.borrow_mut().insert(id.to_string());
        }
        first
            || hidden_until.get(id).is_some_and(|t| *t > now)
            || (by_tag && tag_indexed_at.get(id).is_some_and(|t| *t > now))
    };
    let per_page = view
        .per_page
        .or_else(|| params.get("MaxResults").and_then(|m| m.parse().ok()));
    let page = match (scan, order) {
        (Some(scan), Some(order)) => page_by_scan(all, &hidden, offset, scan, &order),
        _ => page_of(all, &hidden, offset, per_page),
    };
    let mut ec2 = lock(&state.ec2);
    for id in missed.into_inner() {
        ec2.unmissed.remove(&id);
        if by_tag {
            ec2.tag_unmissed.remove(&id);
        }
    }
    page
}

/// Every instance of the region (moto's), in the order EC2 scans them for a filtered listing.
async fn scan_order(state: &ProxyState) -> Option<Vec<String>> {
    let body = moto_call(
        state,
        &[("Action", "DescribeInstances"), ("Version", "2016-11-15")],
    )
    .await?;
    let (listed, _) = xml::instances(&body)?;
    Some(listed.into_iter().map(|l| l.id).collect())
}

/// `params` with a `client-token` filter (which moto does not know) made the `instance-id` filter of
/// the instances the proxy saw made for those tokens (or of none).
fn by_token(state: &ProxyState, params: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let Some(prefix) = params
        .iter()
        .find(|(k, v)| k.starts_with("Filter.") && k.ends_with(".Name") && *v == "client-token")
        .map(|(k, _)| k.trim_end_matches("Name").to_string())
    else {
        return params.clone();
    };
    let values = format!("{prefix}Value.");
    let ids: Vec<String> = {
        let ec2 = lock(&state.ec2);
        params
            .iter()
            .filter(|(k, _)| k.starts_with(&values))
            .filter_map(|(_, token)| ec2.tokens.get(token))
            .flat_map(|rec| rec.instances.clone())
            .collect()
    };
    let mut out: BTreeMap<String, String> = params
        .iter()
        .filter(|(k, _)| !k.starts_with(&values))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    out.insert(format!("{prefix}Name"), "instance-id".into());
    // An id of no instance: a token the proxy never saw made anything matches nothing.
    let ids = if ids.is_empty() {
        vec!["i-00000000000000000".to_string()]
    } else {
        ids
    };
    for (n, id) in ids.into_iter().enumerate() {
        out.insert(format!("{values}{}", n + 1), id);
    }
    out
}
