//! keeper's one error type: a stable code (`params.invalid`, `resize.unsupported`, ...), a message
//! that never carries a secret (it is passed through [`crate::mask::mask_text`] when made), the field
//! at fault when there is one, and the HTTP status the REST API answers with.

use serde_json::{json, Value};

use crate::mask::mask_text;

/// A keeper error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct Error {
    /// A stable code (`params.invalid`, `provider.not_found`, `resize.unsupported`, `audit.failed`, ...).
    pub code: String,
    /// What is wrong, for a person. Masked: never a secret.
    pub message: String,
    /// The field (parameter, body field) at fault, when there is one.
    pub field: Option<String>,
    /// The HTTP status of the REST answer.
    pub status: u16,
}

/// keeper's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The code of [`Error::commit_unknown`].
pub const COMMIT_UNKNOWN: &str = "registry.commit_unknown";

impl Error {
    /// An error of `code` with HTTP `status`.
    pub fn new(status: u16, code: impl Into<String>, message: impl AsRef<str>) -> Self {
        Error {
            code: code.into(),
            message: mask_text(message.as_ref()),
            field: None,
            status,
        }
    }

    /// The same error with every occurrence of each of `secrets` (values of secret keys the input
    /// held) replaced by `***`: for messages that quote input.
    pub fn scrub<'a>(mut self, secrets: impl IntoIterator<Item = &'a str>) -> Self {
        for s in secrets {
            if !s.is_empty() {
                self.message = self.message.replace(s, crate::mask::MASK);
            }
        }
        self
    }

    /// The same error about `field`.
    pub fn with_field(mut self, field: impl Into<String>) -> Self {
        self.field = Some(field.into());
        self
    }

    /// A lock this step held was lost (500, `registry.lock_lost`).
    pub fn lock_lost(message: impl AsRef<str>) -> Self {
        Error::new(500, "registry.lock_lost", message)
    }

    /// Whether the registry committed a change is unknown: its COMMIT's answer was lost and the
    /// server could not be asked (500, `registry.commit_unknown`).
    pub fn commit_unknown(message: impl AsRef<str>) -> Self {
        Error::new(500, COMMIT_UNKNOWN, message)
    }

    /// keeper's own configuration is wrong (500, `config.invalid`).
    pub fn config(message: impl AsRef<str>) -> Self {
        Error::new(500, "config.invalid", message)
    }

    /// The database's schema is not the one keeper knows (500, `registry.schema`).
    pub fn schema(message: impl AsRef<str>) -> Self {
        Error::new(500, "registry.schema", message)
    }

    /// Invalid input: `field` says what, `message` the rule (422, `params.invalid`).
    pub fn invalid(field: impl Into<String>, message: impl AsRef<str>) -> Self {
        let field = field.into();
        let message = format!("{field}: {}", message.as_ref());
        Error::new(422, "params.invalid", message).with_field(field)
    }

    /// A named thing is missing (404).
    pub fn not_found(code: &str, message: impl AsRef<str>) -> Self {
        Error::new(404, code, message)
    }

    /// A conflict with what exists (409).
    pub fn conflict(code: &str, message: impl AsRef<str>) -> Self {
        Error::new(409, code, message)
    }

    /// The registry (PostgreSQL) failed (500, `registry.failed`).
    pub fn db(what: &str, e: &tokio_postgres::Error) -> Self {
        Error::new(
            500,
            "registry.failed",
            format!("{what}: {}", describe_db(e)),
        )
    }

    /// The audit trail could not be written (500, `audit.failed`).
    pub fn audit(e: &Error) -> Self {
        Error::new(
            500,
            "audit.failed",
            format!(
                "the audit event could not be written, so the step fails: {}",
                e.message
            ),
        )
    }

    /// The error as the JSON object every channel shows: `{code, message, field?}`.
    pub fn to_json(&self) -> Value {
        let mut v = json!({"code": self.code, "message": self.message});
        if let Some(f) = &self.field {
            v["field"] = json!(f);
        }
        v
    }

    /// The SQLSTATE of a PostgreSQL error, when it is one.
    pub fn sqlstate(e: &tokio_postgres::Error) -> Option<&str> {
        e.code().map(|c| c.code())
    }
}

/// [`Error::db`] for `map_err`: `.map_err(db_error("read souls"))`.
pub fn db_error(what: &str) -> impl Fn(tokio_postgres::Error) -> Error + '_ {
    move |e| Error::db(what, &e)
}

/// Where serde_json's error `e` is in its input: `line 3, column 7` (never the input, which may hold
/// a secret).
pub fn json_position(e: &serde_json::Error) -> String {
    format!("line {}, column {}", e.line(), e.column())
}

/// A PostgreSQL error in one line: the server's message (with its SQLSTATE) or the client's.
pub fn describe_db(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} (SQLSTATE {})", db.message(), db.code().code()),
        None => std::iter::successors(Some(e as &dyn std::error::Error), |c| c.source())
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(": "),
    }
}

/// keeper's invalid `field` for orca's check of it refused with `e`: the rule orca gives (422).
pub fn invalid_by_orca(field: &str, e: orca::Error) -> Error {
    match e {
        orca::Error::InvalidSpec { rule, .. } => Error::invalid(field, rule),
        other => Error::invalid(field, other.to_string()),
    }
}

/// [`from_orca`] whose message `say` words around the masked message of `e`: what keeper was doing
/// when the provider call failed. The words added are keeper's own and are not masked again.
pub fn from_orca_saying(e: &orca::Error, say: impl FnOnce(&str) -> String) -> Error {
    let mut err = from_orca(e);
    err.message = say(&err.message);
    err
}

/// keeper's error for an orca error from a provider call: the code says the kind.
pub fn from_orca(e: &orca::Error) -> Error {
    use orca::ErrorKind as K;
    let msg = e.to_string();
    match e {
        orca::Error::InvalidSpec { field, .. } => {
            return Error::new(422, "params.invalid", msg).with_field(field.clone())
        }
        orca::Error::Unsupported { operation, .. } => {
            let op = operation.split_whitespace().next().unwrap_or("operation");
            return Error::new(422, format!("{op}.unsupported"), msg);
        }
        _ => {}
    }
    let (status, code) = match e.kind() {
        K::InvalidSettings => (422, "provider.settings"),
        K::NotFound => (502, "cloud.not_found"),
        K::AlreadyExists => (409, "cloud.already_exists"),
        K::NotOwned => (409, "cloud.not_owned"),
        K::NoStock => (503, "cloud.no_stock"),
        K::Quota => (503, "cloud.quota"),
        K::Throttled => (503, "cloud.throttled"),
        K::Unauthenticated => (502, "cloud.unauthenticated"),
        K::PermissionDenied => (502, "cloud.permission_denied"),
        K::Transient => (502, "cloud.transient"),
        K::Leftovers => (502, "cloud.leftovers"),
        _ => (502, "cloud.failed"),
    };
    Error::new(status, code, msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_masked_when_made() {
        let e = Error::new(500, "x", "the driver answered token=abc");
        assert!(!e.to_string().contains("abc"), "{e}");
        assert!(!format!("{e:?}").contains("abc"));
    }

    #[test]
    fn orca_errors_keep_their_kind_in_the_code() {
        let e = from_orca(&orca::Error::unsupported("fake", "resize"));
        assert_eq!(e.code, "resize.unsupported");
        let e = from_orca(&orca::Error::invalid("machine_type", "bad"));
        assert_eq!(
            (e.code.as_str(), e.field.as_deref()),
            ("params.invalid", Some("machine_type"))
        );
        let e = from_orca(&orca::Error::no_stock("t", "l", "none"));
        assert_eq!(e.code, "cloud.no_stock");
    }
}
