//! The HTTP side of the fake: requests, routing by resource id, answers and error bodies, paging.

#[allow(unused_imports)]
use super::*;

/// An Azure error answer.
pub(super) fn err(status: u16, code: &str, message: &str) -> Response {
    err_with(status, code, message, Value::Null)
}

/// An Azure error answer with `extra`'s fields (`target`, `additionalInfo`) beside the code, the
/// message and the (empty) details.
pub(super) fn err_with(status: u16, code: &str, message: &str, extra: Value) -> Response {
    let mut e = json!({"code": code, "message": message, "details": []});
    if let Value::Object(m) = extra {
        for (k, v) in m {
            e[k] = v;
        }
    }
    answer(status, json!({ "error": e }), &[])
}

/// 400 `InvalidParameter`, naming the parameter at fault (`target`).
pub(super) fn invalid_parameter(target: &str, message: &str) -> Response {
    err_with(
        400,
        "InvalidParameter",
        message,
        json!({ "target": target }),
    )
}

/// 200 with `body`.
pub(super) fn ok(body: Value) -> Response {
    answer(200, body, &[])
}

pub(super) fn answer(status: u16, body: Value, headers: &[(&str, String)]) -> Response {
    let mut r = (
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        axum::Json(body),
    )
        .into_response();
    crate::control::add_headers(&mut r, headers);
    if let Ok(v) = format!("fake-{:016x}", fastish_id()).parse() {
        r.headers_mut().insert("x-ms-request-id", v);
    }
    r
}

pub(super) fn fastish_id() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0x5eed);
    N.fetch_add(0x9e37_79b9, Ordering::Relaxed)
}

pub(super) struct Req {
    pub(super) method: Method,
    pub(super) path: String,
    pub(super) query: Vec<(String, String)>,
    pub(super) headers: HeaderMap,
    pub(super) body: Value,
    pub(super) base: String,
    /// The origin written into paging links: `base`, or [`FakeAzure::set_link_origin`]'s.
    pub(super) link_base: String,
}

impl Req {
    pub(super) fn q(&self, k: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(k))
            .map(|(_, v)| v.as_str())
    }
    /// The URL of this list with `skip_key` set to `skip`.
    pub(super) fn next_link(&self, skip_key: &str, skip: usize) -> String {
        let q = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(
                self.query
                    .iter()
                    .filter(|(k, _)| !k.eq_ignore_ascii_case(skip_key)),
            )
            .append_pair(skip_key, &skip.to_string())
            .finish();
        format!("{}{}?{q}", self.link_base, self.path)
    }
}

pub(super) async fn handle(AxState(state): AxState<Arc<Mutex<State>>>, req: Request) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let query = crate::control::form_pairs(req.uri().query().unwrap_or("").as_bytes());
    let headers = req.headers().clone();
    let host = headers
        .get("host")
        .and_then(|h| h.to_str().ok())
        .unwrap_or("127.0.0.1")
        .to_string();
    let bytes = axum::body::to_bytes(req.into_body(), 4 << 20)
        .await
        .unwrap_or_default();
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        match serde_json::from_slice(&bytes) {
            Ok(v) => v,
            Err(e) => {
                return err(
                    400,
                    "InvalidRequestContent",
                    &format!("The request content was invalid and could not be deserialized: {e}"),
                )
            }
        }
    };
    let base = format!("http://{host}");
    let link_base = lock(&state)
        .link_origin
        .clone()
        .unwrap_or_else(|| base.clone());
    let r = Req {
        method,
        path,
        query,
        headers,
        body,
        base,
        link_base,
    };
    if r.path == "/api/retail/prices" {
        return prices(&lock(&state), &r);
    }
    if r.path.starts_with("/metadata/") {
        return imds(&lock(&state), &r);
    }
    if r.q("api-version").is_none() {
        return err(
            400,
            "MissingApiVersionParameter",
            "The api-version query parameter (?api-version=) is required for all requests.",
        );
    }
    match r.headers.get("authorization").and_then(|v| v.to_str().ok()) {
        None => {
            return err(
                401,
                "AuthenticationFailed",
                "Authentication failed. The 'Authorization' header is missing.",
            )
        }
        Some(v) if v.strip_prefix("Bearer ") == Some(TOKEN) => {}
        Some(_) => {
            return err(
                401,
                "InvalidAuthenticationToken",
                "The access token is invalid.",
            )
        }
    }
    let mut st = lock(&state);
    advance(&mut st);
    let (limit_headers, refusal) = match st.throttle.as_mut() {
        Some(t) => t.spend(&r.method),
        None => (Vec::new(), None),
    };
    let mut rsp = refusal.unwrap_or_else(|| route(&mut st, &r));
    crate::control::add_headers(&mut rsp, &limit_headers);
    if st.location_only {
        let h = rsp.headers_mut();
        if let Some(op) = h.remove("azure-asyncoperation") {
            let url = op
                .to_str()
                .unwrap_or("")
                .replace("/operations/", "/operationResults/");
            if let Ok(v) = axum::http::HeaderValue::from_str(&url) {
                h.insert("location", v);
            }
        }
    }
    rsp
}

pub(super) fn route(st: &mut State, r: &Req) -> Response {
    let segs: Vec<&str> = r.path.trim_matches('/').split('/').collect();
    let credits_path = "providers/Microsoft.Billing/billingAccounts/*/billingProfiles/*/providers/Microsoft.Consumption/credits/balanceSummary";
    if shaped(&segs, credits_path) && r.method == Method::GET {
        return credits(st, segs[3], segs[5]);
    }
    let no_route = || {
        let message = format!("no route for {}", r.path);
        err(404, "InvalidResourceType", &message)
    };
    if segs.len() < 2 || !eq(segs[0], "subscriptions") {
        return no_route();
    }
    if !eq(segs[1], SUBSCRIPTION) {
        return err(
            404,
            "SubscriptionNotFound",
            &format!("The subscription '{}' could not be found.", segs[1]),
        );
    }
    let rest = &segs[2..];
    // /subscriptions/{s}/providers/Microsoft.Compute/skus
    // /subscriptions/{s}/providers/{ns}/locations/{loc}/operations/{id}
    if rest.len() >= 3 && eq(rest[0], "providers") {
        if eq(rest[2], "skus") && r.method == Method::GET {
            return skus(st, r);
        }
        if shaped(rest, "providers/Microsoft.Compute/virtualMachines") && r.method == Method::GET {
            return list_all_vms(st, r);
        }
        let image = "providers/Microsoft.Compute/locations/*/publishers/*/artifacttypes/vmimage/offers/*/skus/*/versions";
        if shaped(rest, image) && r.method == Method::GET {
            return image_versions(r, rest);
        }
        if shaped(rest, &format!("{image}/*")) && r.method == Method::GET {
            return image_version(rest);
        }
        if shaped(rest, "providers/*/locations/*/operations/*") {
            return poll(st, rest[5]);
        }
        if shaped(rest, "providers/*/locations/*/operationResults/*") {
            return poll_location(st, r, rest[5]);
        }
        return no_route();
    }
    if rest.len() < 4 || !eq(rest[0], "resourceGroups") || !eq(rest[2], "providers") {
        return no_route();
    }
    let rg = rest[1];
    if !st.groups.contains(&rg.to_ascii_lowercase()) {
        return err(
            404,
            "ResourceGroupNotFound",
            &format!("Resource group '{rg}' could not be found."),
        );
    }
    let ns = rest[3];
    let Some(ty) = rest.get(4) else {
        return err(404, "InvalidResourceType", "no resource type");
    };
    let Some(kind) = Kind::of(ns, ty) else {
        return err(
            404,
            "InvalidResourceType",
            &format!("The resource type '{ty}' could not be found in the namespace '{ns}'."),
        );
    };
    resource_call(st, r, rg, kind, &rest[5..])
}

/// A call on resources of `kind` in resource group `rg`: `tail` is the path after the type (the
/// name, then what is asked of that resource).
fn resource_call(st: &mut State, r: &Req, rg: &str, kind: Kind, tail: &[&str]) -> Response {
    match (tail.len(), &r.method) {
        (0, &Method::GET) => list(st, r, rg, kind),
        (1, m) => {
            let name = tail[0];
            match *m {
                Method::GET => get(st, r, rg, kind, name),
                Method::PUT => put(st, r, rg, kind, name),
                Method::PATCH => patch(st, r, rg, kind, name),
                Method::DELETE => delete(st, r, rg, kind, name),
                _ => err(405, "MethodNotAllowed", "method not allowed"),
            }
        }
        (2, &Method::POST) if kind == Kind::Vm => vm_action(st, r, rg, tail[0], tail[1]),
        (2, &Method::GET) if kind == Kind::Vm && eq(tail[1], "vmSizes") => {
            vm_sizes(st, rg, tail[0])
        }
        (2, &Method::GET) if kind == Kind::Vm && eq(tail[1], "instanceView") => {
            match st.res.get(&key(rg, kind, tail[0])).filter(|x| x.visible()) {
                Some(res) => ok(instance_view(res)),
                None => not_found(kind, tail[0], rg),
            }
        }
        (_, m) if shaped(tail, "*/providers/Microsoft.Resources/tags/default") => {
            tags_call(st, r, m, rg, kind, tail[0])
        }
        (3, &Method::GET) if kind == Kind::Vnet && eq(tail[1], "subnets") => {
            subnet_get(st, rg, tail[0], tail[2])
        }
        (3, m) if kind == Kind::Nsg && eq(tail[1], "securityRules") => {
            rule_call(st, r, m, rg, tail[0], tail[2])
        }
        (2, &Method::GET) if kind == Kind::Nsg && eq(tail[1], "securityRules") => {
            match st.res.get(&key(rg, kind, tail[0])) {
                Some(res) => ok(json!({"value": res.body["properties"]["securityRules"]})),
                None => not_found(kind, tail[0], rg),
            }
        }
        _ => err(
            404,
            "InvalidResourceType",
            &format!("no route for {} {}", r.method, r.path),
        ),
    }
}

/// Whether path segments `segs` are those of `pattern`, compared without case, `*` standing for any
/// one segment.
fn shaped(segs: &[&str], pattern: &str) -> bool {
    let pattern: Vec<&str> = pattern.split('/').collect();
    segs.len() == pattern.len() && segs.iter().zip(pattern).all(|(s, p)| p == "*" || eq(s, p))
}

pub(super) fn not_found(kind: Kind, name: &str, rg: &str) -> Response {
    err(
        404,
        "ResourceNotFound",
        &format!(
            "The Resource '{}/{name}' under resource group '{rg}' was not found. For more details please go to https://aka.ms/ARMResourceNotFoundFix",
            kind.type_name()
        ),
    )
}

pub(super) fn page<T: Clone>(
    items: &[T],
    r: &Req,
    size: usize,
    skip_key: &str,
) -> (Vec<T>, Option<String>) {
    let skip: usize = r.q(skip_key).and_then(|s| s.parse().ok()).unwrap_or(0);
    let end = (skip + size).min(items.len());
    let got = items.get(skip..end).map(<[T]>::to_vec).unwrap_or_default();
    let next = (end < items.len()).then(|| r.next_link(skip_key, end));
    (got, next)
}

pub(super) fn list_answer(items: Vec<Value>, next: Option<String>) -> Response {
    let mut body = json!({ "value": items });
    if let Some(n) = next {
        body["nextLink"] = json!(n);
    }
    ok(body)
}
