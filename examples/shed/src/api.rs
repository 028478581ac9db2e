//! The HTTP API (axum): the shed routes of a remote server, `GET /api/info`, the routes of features a
//! remote server does not have (422 for a create field, 501 for a route), and the streamed answers of
//! create and delete for `Accept: text/event-stream`.
//!
//! Errors are JSON `{"code": "...", "message": "..."}`. No answer to a service client names the cloud
//! project, zone or any address. When the server has clients, a caller without a valid token is
//! answered 401 on every route, before anything else is looked at (`authenticate`).

use std::convert::Infallible;

use axum::body::Bytes;
use axum::extract::FromRequest;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use axum::{Extension, Json, Router};
use orca::spec::{quoted, shown};
use secrecy::ExposeSecret as _;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq as _;

use crate::backend::{ApiError, Backend, Caller, CreateRequest, Effect};
use crate::config::Role;
use crate::model::{ShedView, Status};

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        (status, Json(self)).into_response()
    }
}

/// The answer of a start or stop: the shed and what the call did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActionAnswer {
    /// The shed after the call.
    #[serde(flatten)]
    pub shed: ShedView,
    /// `changed`, `queued` or `no_change`.
    pub effect: Effect,
}

/// The router of the API over `backend`.
pub fn router(backend: Backend) -> Router {
    let unsupported = |what: &'static str| {
        move || async move {
            ApiError::unsupported_route(format!("{what}: not available on a remote server"))
        }
    };
    // Exec and the connect tunnel need a running shed (409), and are not built here (501).
    let needs_agent = |what: &'static str| {
        move |State(b): State<Backend>,
              Extension(c): Extension<Caller>,
              Path(name): Path<String>| async move {
            Err::<Response, _>(b.exec_or_connect(&c, &name, what))
        }
    };
    // Start and stop answer the shed and what the call did.
    let power = |start: bool| {
        move |State(b): State<Backend>,
              Extension(c): Extension<Caller>,
              Path(name): Path<String>| async move {
            let (shed, effect) = if start {
                b.start_shed(&c, &name).await?
            } else {
                b.stop_shed(&c, &name).await?
            };
            Ok::<_, ApiError>(Json(ActionAnswer { shed, effect }))
        }
    };
    Router::new()
        .route("/api/info", get(info))
        .route("/api/log", get(server_log))
        .route("/api/sheds", get(list).post(create))
        .route("/api/sheds/{name}", get(get_shed).delete(delete))
        .route("/api/sheds/{name}/start", post(power(true)))
        .route("/api/sheds/{name}/stop", post(power(false)))
        .route("/api/sheds/{name}/exec", post(needs_agent("exec")))
        .route(
            "/api/sheds/{name}/connect",
            any(needs_agent("the connect tunnel")),
        )
        .route("/api/sheds/{name}/reset", post(unsupported("reset")))
        .route(
            "/api/sheds/{name}/egress",
            any(unsupported("egress profiles")),
        )
        .route(
            "/api/snapshots",
            get(|| async { Json(Vec::<String>::new()) }).post(unsupported("snapshots")),
        )
        .route(
            "/api/snapshots/{name}",
            get(unsupported("snapshots")).delete(unsupported("snapshots")),
        )
        .route("/api/images", get(|| async { Json(Vec::<String>::new()) }))
        .route(
            "/api/images/pull",
            post(unsupported("the image store (pull)")),
        )
        .route(
            "/api/images/prune",
            post(unsupported("the image store (prune)")),
        )
        .route(
            "/api/images/{name}",
            get(unsupported("the image store (inspect)"))
                .delete(unsupported("the image store (delete)")),
        )
        .route(
            "/api/images/{name}/tag",
            post(unsupported("the image store (tag)")),
        )
        .route(
            "/api/images/{name}/push",
            post(unsupported("the image store (push)")),
        )
        .route("/api/egress/profiles", post(unsupported("egress profiles")))
        .route(
            "/api/egress/profiles/{name}",
            any(unsupported("egress profiles")),
        )
        .layer(axum::middleware::from_fn(json_errors))
        // Outermost: no route, method check, path or body is looked at before the caller is known.
        .layer(axum::middleware::from_fn_with_state(
            backend.clone(),
            authenticate,
        ))
        .with_state(backend)
}

/// Answers 401 to a caller without a valid token ([`caller`]) before anything else: before the
/// route is found (an unknown caller learns no route, nor sees its path repeated), the path is
/// read, or the body is. A known caller goes on with its [`Caller`] in the request's extensions,
/// where every handler takes it.
async fn authenticate(
    State(b): State<Backend>,
    mut req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    match caller(&b, req.headers()) {
        Ok(c) => {
            req.extensions_mut().insert(c);
            next.run(req).await
        }
        Err(e) => e.into_response(),
    }
}

/// Every error answer is `{code, message}` JSON. The router's own refusals (an unknown route, a
/// method a route does not take, a body over the limit, a path it cannot read) come without a body
/// or in plain text: they are rewritten here, keeping their status and what their text said.
async fn json_errors(req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    // The path as the caller wrote it, cut: it may be as long as a request line.
    let (method, path) = (req.method().clone(), shown(req.uri().path()));
    let resp = next.run(req).await;
    let status = resp.status();
    let is_json = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if is_json || !(status.is_client_error() || status.is_server_error()) {
        return resp;
    }
    let (parts, body) = resp.into_parts();
    let text = axum::body::to_bytes(body, 4096).await.unwrap_or_default();
    let said = String::from_utf8_lossy(&text).trim().to_string();
    let (code, what) = match status {
        StatusCode::NOT_FOUND => ("NOT_FOUND", format!("no route {method} {path}")),
        StatusCode::METHOD_NOT_ALLOWED => (
            "METHOD_NOT_ALLOWED",
            format!("{path} does not take {method}"),
        ),
        StatusCode::PAYLOAD_TOO_LARGE => (
            "REQUEST_TOO_LARGE",
            format!("the body of {method} {path} is larger than the server accepts"),
        ),
        s if s.is_client_error() => ("INVALID_REQUEST", format!("{method} {path}")),
        _ => ("INTERNAL", format!("{method} {path} failed")),
    };
    let message = if said.is_empty() {
        what
    } else {
        format!("{what}: {said}")
    };
    let mut out = ApiError::new(status.as_u16(), code, message).into_response();
    if let Some(allow) = parts.headers.get(header::ALLOW) {
        out.headers_mut().insert(header::ALLOW, allow.clone());
    }
    out
}

/// Who calls: the client whose token the `Authorization: Bearer` header carries (the local admin
/// when the server has no clients).
pub fn caller(b: &Backend, headers: &HeaderMap) -> Result<Caller, ApiError> {
    let clients = &b.config().clients;
    if clients.is_empty() {
        return Ok(Caller::local_admin());
    }
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .unwrap_or("");
    let unauthorized = || ApiError::new(401, "UNAUTHORIZED", "a valid bearer token is required");
    if token.is_empty() {
        return Err(unauthorized());
    }
    // Digests of equal length, every client's compared in constant time, the first match the
    // caller: how long the check takes tells nothing of a token's length or of which client it is.
    let presented = Sha256::digest(token.as_bytes());
    let found = clients.values().fold(None, |found, c| {
        let known = Sha256::digest(c.token.expose_secret().as_bytes());
        found.or(bool::from(known.ct_eq(&presented)).then_some(c))
    });
    found.map(|c| c.caller.clone()).ok_or_else(unauthorized)
}

fn wants_stream(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/event-stream"))
}

async fn info(
    State(b): State<Backend>,
    Extension(c): Extension<Caller>,
) -> Result<Response, ApiError> {
    Ok(Json(b.info(&c)).into_response())
}

async fn server_log(
    State(b): State<Backend>,
    Extension(c): Extension<Caller>,
) -> Result<Response, ApiError> {
    if c.role != Role::Admin {
        return Err(ApiError::forbidden("the server log is for admins"));
    }
    Ok(Json(b.log().lines()).into_response())
}

async fn list(
    State(b): State<Backend>,
    Extension(c): Extension<Caller>,
) -> Result<Response, ApiError> {
    Ok(Json(b.list(&c)).into_response())
}

async fn get_shed(
    State(b): State<Backend>,
    Extension(c): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    Ok(Json(b.get(&c, &name)?).into_response())
}

fn event(name: &str, data: &impl Serialize) -> Event {
    Event::default()
        .event(name)
        .data(serde_json::to_string(data).unwrap_or_default())
}

fn stream_of(rx: tokio::sync::mpsc::Receiver<Event>) -> Response {
    let s = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|e| (Ok::<_, Infallible>(e), rx))
    });
    Sse::new(s).keep_alive(KeepAlive::default()).into_response()
}

/// The error a failed create reports, by its reason.
pub fn failed_create(shed: &ShedView, detail: Option<&str>) -> ApiError {
    let reason = shed.status_reason.as_str();
    let code = match reason {
        "quota" => "CLOUD_QUOTA_EXCEEDED",
        "capacity" => "ZONE_CAPACITY_UNAVAILABLE",
        "firewall" => "FIREWALL_CHECK_FAILED",
        _ => "CREATE_FAILED",
    };
    let detail = detail.map(|d| format!(": {d}")).unwrap_or_default();
    let message = format!(
        "the create of shed {:?} failed (reason {reason}){detail}",
        shed.name
    );
    ApiError::new(503, code, message)
}

async fn create(
    State(b): State<Backend>,
    Extension(c): Extension<Caller>,
    headers: HeaderMap,
    request: axum::extract::Request,
) -> Result<Response, ApiError> {
    // The body is read only here, behind `authenticate`: a caller without a token costs no read.
    let body = match Bytes::from_request(request, &()).await {
        Ok(body) => body,
        // Answered as the router answers it (413 over the limit), made JSON as every refusal is.
        Err(rejection) => return Ok(rejection.into_response()),
    };
    let mut de = serde_json::Deserializer::from_slice(&body);
    let req: CreateRequest = serde_path_to_error::deserialize(&mut de)
        .map_err(|e| refusal_of_json(&e.path().to_string(), e.inner()))
        .and_then(|r| de.end().map(|()| r).map_err(|e| refusal_of_json(".", &e)))
        .map_err(ApiError::invalid)?;
    let id = b.create(&c, req).await?;
    if !wants_stream(&headers) {
        let v = b.wait_accept(&id).await?;
        return Ok((StatusCode::CREATED, Json(v)).into_response());
    }
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    tokio::spawn(follow_create(b, c, id, tx));
    Ok(stream_of(rx))
}

/// What a refusal of the create request's JSON says: where (line and column), the field, the kind of
/// problem and what was expected, never the caller's value. serde's own text repeats a string value
/// or an unknown field's name whole, and either may be megabytes.
pub fn refusal_of_json(path: &str, e: &serde_json::Error) -> String {
    let at = format!("line {}, column {}", e.line(), e.column());
    if !e.is_data() {
        return format!("the create request is not JSON ({at})");
    }
    let text = e.to_string();
    let position = format!(" at line {} column {}", e.line(), e.column());
    let text = text.strip_suffix(&position).unwrap_or(&text);
    let field = match path {
        "." | "" => String::new(),
        p => format!("{}: ", shown(p)),
    };
    // A missing or repeated field is named by serde with the name shed declares.
    if text.starts_with("missing field") || text.starts_with("duplicate field") {
        return format!("the create request: {field}{} ({at})", shown(text));
    }
    // serde puts what was expected last, after the value; it is shed's own words (a type, the
    // fields), unless serde gave none and the value itself says ", expected".
    let expected = match text.rfind(", expected ") {
        Some(i) if text.len() - i <= 400 => &text[i..],
        _ => "",
    };
    if let Some(rest) = text.strip_prefix("unknown field `") {
        // The path ends in the unknown field's name: it is said once, cut.
        let name = rest.strip_suffix(expected).unwrap_or(rest);
        let name = quoted(name.strip_suffix('`').unwrap_or(name));
        return format!("the create request: unknown field {name}{expected} ({at})");
    }
    let kind = shown(text.split([':', '`', '"']).next().unwrap_or("").trim());
    format!("the create request: {field}{kind}{expected} ({at})")
}

/// The error event of a stream: `{code, message}`, as an error answer's body (the status is not sent).
fn error_event(e: ApiError) -> Event {
    event("error", &e)
}

/// The `error` event of a stream that ends because the server stops: what the stream followed
/// goes on when the server starts again (`then`).
fn stopping_event(then: &str) -> Event {
    error_event(ApiError::new(
        503,
        "SERVER_STOPPING",
        format!("the server is stopping; {then}"),
    ))
}

/// The events of a streamed create: `status` for each change, then `complete` with the settled
/// shed, or `error`. A closed stream ends this, never the create; so does a stopping server
/// (`error` `SERVER_STOPPING`), whose successor resumes the create.
async fn follow_create(b: Backend, c: Caller, id: String, tx: tokio::sync::mpsc::Sender<Event>) {
    const RESUMED: &str = "the create is recorded and goes on when the server starts again";
    let accepted = tokio::select! {
        r = b.wait_accept(&id) => r,
        // The stream was closed: the create goes on without anyone waiting (dropping the wait
        // forgets its waiter).
        _ = tx.closed() => return,
    };
    let mut last = match accepted {
        Err(e) => {
            let _ = tx.send(error_event(e)).await;
            return;
        }
        Ok(v) => v,
    };
    if tx.send(event("status", &last)).await.is_err() {
        return;
    }
    let mut rx = b.subscribe();
    loop {
        let Some(v) = b.get(&c, &last.name).ok().filter(|v| v.id == id) else {
            let gone = ApiError::new(404, "NOT_FOUND", "the shed was deleted before it settled");
            let _ = tx.send(error_event(gone)).await;
            return;
        };
        if v != last && tx.send(event("status", &v)).await.is_err() {
            return;
        }
        match v.status {
            Status::Running | Status::Stopped => {
                let _ = tx.send(event("complete", &v)).await;
                return;
            }
            Status::Error => {
                // The failure's detail is for admins only: it may name the project or an address.
                let detail = c
                    .is_admin()
                    .then(|| b.records().into_iter().find(|s| s.id == id))
                    .flatten()
                    .and_then(|s| s.detail);
                let _ = tx
                    .send(error_event(failed_create(&v, detail.as_deref())))
                    .await;
                return;
            }
            _ => {}
        }
        last = v;
        tokio::select! {
            biased;
            _ = b.stopped() => {
                let _ = tx.send(stopping_event(RESUMED)).await;
                return;
            }
            r = rx.changed() => if r.is_err() { return },
            _ = tx.closed() => return,
        }
    }
}

async fn delete(
    State(b): State<Backend>,
    Extension(c): Extension<Caller>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let id = b.delete_shed(&c, &name).await?;
    if !wants_stream(&headers) {
        return Ok(StatusCode::NO_CONTENT.into_response());
    }
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tokio::spawn(async move {
        #[derive(Serialize)]
        struct Deleting<'a> {
            name: &'a str,
            id: &'a str,
            status: &'a str,
        }
        let deleting = |status| Deleting {
            name: &name,
            id: &id,
            status,
        };
        let _ = tx.send(event("status", &deleting("deleting"))).await;
        let gone = tokio::select! {
            r = b.wait_gone(&id) => r,
            _ = tx.closed() => return,
            _ = b.stopped() => {
                let then = "the delete is recorded and the server destroys the VM when it starts again";
                let _ = tx.send(stopping_event(then)).await;
                return;
            }
        };
        let ev = match gone {
            Ok(()) => event("complete", &deleting("deleted")),
            Err(message) => error_event(ApiError::new(503, "DELETE_INCOMPLETE", message)),
        };
        let _ = tx.send(ev).await;
    });
    Ok(stream_of(rx))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(body: &str) -> String {
        let mut de = serde_json::Deserializer::from_slice(body.as_bytes());
        match serde_path_to_error::deserialize::<_, CreateRequest>(&mut de) {
            Err(e) => refusal_of_json(&e.path().to_string(), e.inner()),
            Ok(_) => refusal_of_json(".", &de.end().unwrap_err()),
        }
    }

    #[test]
    fn a_json_refusal_names_the_field_and_what_was_expected_not_the_value() {
        let v = "v".repeat(10_000);
        assert_eq!(
            refused(&format!(r#"{{"name": "a", "cpus": "{v}"}}"#)),
            "the create request: cpus: invalid type, expected u32 (line 1, column 10024)"
        );
        let unknown = refused(&format!(r#"{{"name": "a", "{v}": 1}}"#));
        assert!(
            unknown.starts_with(r#"the create request: unknown field "vvvv"#),
            "{unknown}"
        );
        assert!(
            unknown.contains("…(10000 bytes), expected one of `name`"),
            "{unknown}"
        );
        assert_eq!(
            refused(r#"{"image": "a"}"#),
            "the create request: missing field `name` (line 1, column 14)"
        );
        assert_eq!(
            refused(r#"{"name": "a"} x"#),
            "the create request is not JSON (line 1, column 15)"
        );
        assert_eq!(
            refused(r#"{"name": "a"#),
            "the create request is not JSON (line 1, column 11)"
        );
    }
}
