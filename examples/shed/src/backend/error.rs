//! The API's error answers: an HTTP status, a code a client acts on, and a message.

use serde::{Deserialize, Serialize};

/// An error answer of the API: HTTP status, a code a client acts on, and a message. Its JSON is the
/// answer's body, `{code, message}`: the status is the answer's own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{status} {code}: {message}")]
pub struct ApiError {
    /// The HTTP status (not in the body; a client reads it from the answer).
    #[serde(skip)]
    pub status: u16,
    /// The code (`SERVER_LIMIT_REACHED`, ...).
    pub code: String,
    /// What happened, for the caller.
    pub message: String,
}

impl ApiError {
    /// An error of `status` with `code`.
    pub fn new(status: u16, code: &str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code: code.into(),
            message: message.into(),
        }
    }

    /// 400 `INVALID_REQUEST`.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(400, "INVALID_REQUEST", message)
    }

    /// 403 `FORBIDDEN`.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(403, "FORBIDDEN", message)
    }

    /// 404 `NOT_FOUND`.
    pub fn not_found(name: &str) -> Self {
        // The name comes from the path as the caller wrote it: a megabyte is not repeated whole.
        let name = orca::spec::quoted(name);
        Self::new(404, "NOT_FOUND", format!("shed {name} not found"))
    }

    /// 409 with `code`: the shed's status does not allow the call.
    pub fn conflict(code: &str, message: impl Into<String>) -> Self {
        Self::new(409, code, message)
    }

    /// 422 `FEATURE_UNSUPPORTED` (a create field).
    pub fn unsupported_field(message: impl Into<String>) -> Self {
        Self::new(422, "FEATURE_UNSUPPORTED", message)
    }

    /// 501 `FEATURE_UNSUPPORTED` (a route).
    pub fn unsupported_route(message: impl Into<String>) -> Self {
        Self::new(501, "FEATURE_UNSUPPORTED", message)
    }

    /// 503 `CLOUD_QUOTA_EXCEEDED`.
    pub fn quota() -> Self {
        Self::new(
            503,
            "CLOUD_QUOTA_EXCEEDED",
            "the cloud project's quota is reached; nothing was created: try again later",
        )
    }

    /// 503 `ZONE_CAPACITY_UNAVAILABLE`.
    pub fn capacity() -> Self {
        Self::new(
            503,
            "ZONE_CAPACITY_UNAVAILABLE",
            "the zone has no room for the machine type right now; nothing was created: try again later",
        )
    }
}
