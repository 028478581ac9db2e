//! The operator REST API (axum): the Cloud-Provider and Cloud-Profile registries and the step.
//!
//! | method and path | permission | answer |
//! | --- | --- | --- |
//! | `GET /v1/providers` | `provider.read` | 200 `{"providers": [...]}` |
//! | `POST /v1/providers` | `provider.create` | 201 the provider; 409 exists; 422 names the field |
//! | `GET /v1/providers/{name}` | `provider.read` | 200, 404 |
//! | `DELETE /v1/providers/{name}` | `provider.delete` | 204; 404; 409 when profiles depend on it |
//! | `GET /v1/profiles` | `profile.read` | 200 `{"profiles": [...]}` |
//! | `POST /v1/profiles` | `profile.create` | 201; 409 exists; 422 names the field (and a missing provider) |
//! | `GET /v1/profiles/{name}` | `profile.read` | 200, 404 |
//! | `DELETE /v1/profiles/{name}` | `profile.delete` | 204, 404 |
//! | `POST /v1/steps/core.cloud.<action>` | `step.core.cloud` | 200 the step output; else the failure output with the error's status |
//! | `GET /healthz` | none | 200 when PostgreSQL answers |
//!
//! Every request but `GET /healthz` needs `Authorization: Bearer <token>` (401 without a known token,
//! 403 without the permission). Every answer is masked ([`crate::mask`]); a step's answer keeps only
//! `hosts[].bootstrap_token` in plain. Errors are `{"error": {"code", "message", "field"?}}`, a path
//! with no route (404), a method a path does not take (405), a step name that is not UTF-8 (404)
//! and a body over [`BODY_LIMIT`] (413) included; all of them are answered after the caller is
//! authenticated (`authenticate`, in front of every route and both fallbacks), so that a caller
//! without a token learns nothing but 401, not even which routes exist.
//!
//! A step runs as a task of its own, so that a client hanging up does not stop it halfway: it goes on
//! to its end (registries, audit event, roll-back) and only its answer is lost.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::PathRejection;
use axum::extract::{DefaultBodyLimit, Extension, FromRequest, Path, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};

use crate::cloud::Keeper;
use crate::error::{db_error, json_position, Error};
use crate::mask::mask_json;
use crate::registry;
use crate::tokens::{ApiTokens, Caller, STEP_PERMISSION};

/// The largest request body the API reads: 2 MiB (a provider, a profile or a step's parameters are
/// a few KiB).
pub const BODY_LIMIT: usize = 2 * 1024 * 1024;

#[derive(Clone)]
struct AppState {
    keeper: Keeper,
    tokens: Arc<ApiTokens>,
}

/// The API's router.
pub fn router(keeper: Keeper, tokens: ApiTokens) -> Router {
    let state = AppState {
        keeper,
        tokens: Arc::new(tokens),
    };
    Router::new()
        .route("/healthz", get(health))
        .route("/v1/providers", get(list_providers).post(create_provider))
        .route(
            "/v1/providers/{name}",
            get(get_provider).delete(delete_provider),
        )
        .route("/v1/profiles", get(list_profiles).post(create_profile))
        .route(
            "/v1/profiles/{name}",
            get(get_profile).delete(delete_profile),
        )
        .route("/v1/steps/{step}", post(run_step))
        .fallback(|| async { Error::not_found("route.not_found", "no such route") })
        .method_not_allowed_fallback(|method: Method, uri: Uri| async move {
            Error::new(
                405,
                "method.not_allowed",
                format!("{} does not take {method}", uri.path()),
            )
        })
        // Added after the routes and both fallbacks, so that it wraps each of them: the caller is
        // authenticated before a 404 or a 405 is answered.
        .layer(middleware::from_fn_with_state(state.clone(), authenticate))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(state)
}

fn status(code: u16) -> StatusCode {
    StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

/// A masked JSON answer.
fn answer(code: StatusCode, mut body: Value) -> Response {
    mask_json(&mut body);
    (code, Json(body)).into_response()
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        if self.status >= 500 {
            tracing::error!(code = %self.code, error = %self.message, "request failed");
        }
        let mut r = answer(status(self.status), json!({"error": self.to_json()}));
        if self.status == 401 {
            r.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        r
    }
}

/// What a handler answers: an error is answered as [`Error`]'s response.
type Answer = Result<Response, Error>;

/// The caller a request's `Authorization: Bearer <token>` names, or 401.
fn bearer(tokens: &ApiTokens, headers: &HeaderMap) -> Result<Caller, Error> {
    let unauthenticated = |why: &str| Error::new(401, "unauthenticated", why);
    let value = headers
        .get(header::AUTHORIZATION)
        .ok_or_else(|| unauthenticated("Authorization: Bearer <token> is required"))?;
    let value = value
        .to_str()
        .map_err(|_| unauthenticated("the Authorization header is not text"))?;
    let presented = value
        .strip_prefix("Bearer ")
        .or_else(|| value.strip_prefix("bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| unauthenticated("the Authorization header is not Bearer <token>"))?;
    tokens.authenticate(presented)
}

/// Authenticates every request but the health check before anything else judges it, and hands the
/// [`Caller`] to the handler in the request's extensions. It runs in front of routing's 404 and 405
/// too, so that a caller without a known token cannot map the routes; and it never reads the body,
/// so that such a caller costs no read of one. `HEAD /healthz` is open as `GET` is (axum answers
/// it with the same handler, without the body).
async fn authenticate(State(s): State<AppState>, mut request: Request, next: Next) -> Response {
    let open = request.uri().path() == "/healthz"
        && matches!(*request.method(), Method::GET | Method::HEAD);
    if !open {
        match bearer(&s.tokens, request.headers()) {
            Ok(c) => {
                request.extensions_mut().insert(c);
            }
            Err(e) => return e.into_response(),
        }
    }
    next.run(request).await
}

/// The authenticated caller, as `authenticate` left it.
type Who = Extension<Caller>;

/// A path's `{name}`, or why axum could not read it.
type NamePath = Result<Path<String>, PathRejection>;

/// The registry name a path ends with (`/v1/providers/{name}`), checked before anything reads it: a
/// name is one hostname label, so that no `..`, `/` or other encoded segment can name another
/// resource (422 naming `name`).
fn path_name(path: NamePath) -> Result<String, Error> {
    let Ok(Path(name)) = path else {
        return Err(Error::invalid("name", "a name in the path is UTF-8 text"));
    };
    registry::validate_name("name", &name)?;
    Ok(name)
}

/// A request, its body not read yet: [`body_json`] reads it once the caller is authenticated, so
/// that a caller without a token costs no read of a body (up to [`BODY_LIMIT`]), nor a connection
/// held while a body is awaited.
type Body = Request;

async fn body_json(request: Body) -> Result<Value, Error> {
    let body = Bytes::from_request(request, &()).await.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            Error::new(
                413,
                "body.too_large",
                format!("the body is larger than {BODY_LIMIT} bytes"),
            )
        } else {
            Error::new(400, "body.invalid", "the body could not be read")
        }
        .with_field("body")
    })?;
    serde_json::from_slice(&body).map_err(|e| {
        Error::new(
            400,
            "body.invalid",
            format!("the body is not JSON ({})", json_position(&e)),
        )
        .with_field("body")
    })
}

async fn health(State(s): State<AppState>) -> Answer {
    let client = s.keeper.pool().get().await?;
    client
        .query_one("SELECT 1", &[])
        .await
        .map_err(db_error("health"))?;
    Ok(answer(StatusCode::OK, json!({"status": "ok"})))
}

async fn list_providers(State(s): State<AppState>, Extension(c): Who) -> Answer {
    c.require("provider.read")?;
    let client = s.keeper.pool().get().await?;
    let all = registry::list_providers(&client).await?;
    Ok(answer(StatusCode::OK, json!({"providers": all})))
}

async fn create_provider(State(s): State<AppState>, Extension(c): Who, body: Body) -> Answer {
    c.require("provider.create")?;
    let body = body_json(body).await?;
    let p = registry::create_provider(s.keeper.pool(), &c.actor(), &body).await?;
    tracing::info!(provider = %p.name, actor = %c.actor(), "provider created");
    Ok(answer(StatusCode::CREATED, json!(p)))
}

async fn get_provider(State(s): State<AppState>, Extension(c): Who, path: NamePath) -> Answer {
    c.require("provider.read")?;
    let name = path_name(path)?;
    let client = s.keeper.pool().get().await?;
    match registry::get_provider(&client, &name).await? {
        Some(p) => Ok(answer(StatusCode::OK, json!(p))),
        None => Err(registry::not_found("provider", &name)),
    }
}

async fn delete_provider(State(s): State<AppState>, Extension(c): Who, path: NamePath) -> Answer {
    c.require("provider.delete")?;
    let name = path_name(path)?;
    registry::delete_provider(s.keeper.pool(), &c.actor(), &name).await?;
    tracing::info!(provider = %name, actor = %c.actor(), "provider deleted");
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn list_profiles(State(s): State<AppState>, Extension(c): Who) -> Answer {
    c.require("profile.read")?;
    let client = s.keeper.pool().get().await?;
    let all = registry::list_profiles(&client).await?;
    Ok(answer(StatusCode::OK, json!({"profiles": all})))
}

async fn create_profile(State(s): State<AppState>, Extension(c): Who, body: Body) -> Answer {
    c.require("profile.create")?;
    let body = body_json(body).await?;
    let p = registry::create_profile(s.keeper.pool(), &c.actor(), &body).await?;
    tracing::info!(profile = %p.name, provider = %p.provider, actor = %c.actor(), "profile created");
    Ok(answer(StatusCode::CREATED, json!(p)))
}

async fn get_profile(State(s): State<AppState>, Extension(c): Who, path: NamePath) -> Answer {
    c.require("profile.read")?;
    let name = path_name(path)?;
    let client = s.keeper.pool().get().await?;
    match registry::get_profile(&client, &name).await? {
        Some(p) => Ok(answer(StatusCode::OK, json!(p))),
        None => Err(registry::not_found("profile", &name)),
    }
}

async fn delete_profile(State(s): State<AppState>, Extension(c): Who, path: NamePath) -> Answer {
    c.require("profile.delete")?;
    let name = path_name(path)?;
    registry::delete_profile(s.keeper.pool(), &c.actor(), &name).await?;
    tracing::info!(profile = %name, actor = %c.actor(), "profile deleted");
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn run_step(
    State(s): State<AppState>,
    Extension(c): Who,
    step: NamePath,
    body: Body,
) -> Answer {
    c.require(STEP_PERMISSION)?;
    let Ok(Path(step)) = step else {
        return Err(Error::not_found(
            "step.unknown",
            "no such step: the step's name in the path is not UTF-8 text",
        ));
    };
    let params = body_json(body).await?;
    // The step runs as a task of its own: hyper drops this handler when the client hangs up, and a
    // step stopped halfway would leave VMs made but unrecorded, or destroyed with the registries not
    // updated. The task goes on to its end (registry, audit event, roll-back) whoever waits for it.
    // It counts as running before it is spawned, so that a shutdown cannot miss it.
    let run = s.keeper.spawn_step(step, params, c.actor());
    match run.await {
        // Masked by the step already, but for hosts[].bootstrap_token: the one plain delivery.
        Ok(Ok(out)) => Ok((StatusCode::OK, Json(out)).into_response()),
        Ok(Err(f)) => Ok(answer(status(f.error.status), f.output)),
        Err(e) => Err(Error::new(
            500,
            "internal",
            format!("the step's task ended without an answer ({e}); the audit trail and the journal keeper.cloud_vms tell what it did"),
        )),
    }
}
