//! OAuth: the token endpoint (gcp_auth's JWT-bearer grant) and the bearer check of every API call.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;

use super::*;

// OAuth

pub(super) async fn auth(State(state): State<Shared>, req: Request, next: Next) -> Response {
    let token = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_string);
    let known = token.is_some_and(|t| lock(&state).tokens.contains(&t));
    if !known {
        let message = "Request is missing required authentication credential. Expected OAuth 2 access token, login cookie or other valid authentication credential.";
        let mut r = gerr(401, "required", message);
        r.headers_mut().insert(
            "www-authenticate",
            axum::http::HeaderValue::from_static("Bearer realm=\"https://accounts.google.com/\""),
        );
        return r;
    }
    let path = req.uri().path().to_string();
    let refused = {
        let mut world = lock(&state);
        let now = world.utc.now();
        world
            .rate_quota
            .as_mut()
            .and_then(|q| q.spend(now, req.method(), &path))
    };
    if let Some(r) = refused {
        return r;
    }
    next.run(req).await
}

pub(super) fn oauth_error(error: &str, description: &str) -> Response {
    (
        StatusCode::BAD_REQUEST,
        Json(json!({"error": error, "error_description": description})),
    )
        .into_response()
}

pub(super) async fn token(State(state): State<Shared>, body: Bytes) -> Response {
    if std::str::from_utf8(&body).is_err() {
        return oauth_error("invalid_request", "a form body is required");
    }
    let form = crate::control::form_pairs(&body);
    // A field given twice counts as its last value.
    let field = |k: &str| form.iter().rev().find(|(key, _)| key == k).map(|(_, v)| v);
    if field("grant_type").map(String::as_str)
        != Some("urn:ietf:params:oauth:grant-type:jwt-bearer")
    {
        return oauth_error("unsupported_grant_type", "Invalid grant_type");
    }
    let Some(assertion) = field("assertion") else {
        return oauth_error("invalid_request", "Missing required parameter: assertion");
    };
    let parts: Vec<&str> = assertion.split('.').collect();
    let claims = (parts.len() == 3)
        .then(|| URL_SAFE_NO_PAD.decode(parts[1].trim_end_matches('=')).ok())
        .flatten()
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok());
    let Some(claims) = claims else {
        return oauth_error("invalid_grant", "Invalid JWT: malformed");
    };
    let mut s = lock(&state);
    if claims["aud"].as_str() != Some(s.token_uri.as_str()) {
        return oauth_error(
            "invalid_grant",
            "Invalid JWT: Token must be a short-lived token and in a reasonable timeframe",
        );
    }
    if claims["iss"].as_str().unwrap_or_default().is_empty() {
        return oauth_error("invalid_grant", "Invalid JWT: no issuer");
    }
    let scope = claims["scope"].as_str().unwrap_or_default();
    if !scope.contains("auth/compute") && !scope.contains("auth/cloud-platform") {
        return oauth_error("invalid_scope", "Invalid OAuth scope or ID token audience");
    }
    let id = s.new_id();
    let token = format!("ya29.fake-{id}");
    s.tokens.insert(token.clone());
    Json(json!({"access_token": token, "expires_in": 3599, "token_type": "Bearer"})).into_response()
}
