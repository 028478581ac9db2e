//! One error type for every driver, with retry meaning (contract 8).

use std::time::Duration;

/// The result type of every orca call.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong when making, listing or removing machines.
///
/// Each driver maps its cloud's codes onto these variants in one function, so that a caller can decide
/// what to do without knowing which cloud answered: [`Error::is_retryable`] says whether the same call
/// may succeed later, [`Error::retry_after`] how long the cloud asked to wait.
///
/// Messages never carry secrets: drivers build them from the cloud's error code and message only.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The input is invalid: `field` names what is wrong, `rule` says what it must be. Raised before
    /// any network call.
    #[error("invalid {field}: {rule}")]
    InvalidSpec {
        /// The field at fault (`name`, `pool`, `owner`, `machine_type`, `id`, ...).
        field: String,
        /// The rule it breaks, with the offending value where that is safe to show.
        rule: String,
    },
    /// The settings are incomplete or wrong: `keys` names every setting at fault (for example
    /// environment variables).
    #[error("invalid settings ({}): {message}", keys.join(", "))]
    InvalidSettings {
        /// Every setting at fault, all at once.
        keys: Vec<String>,
        /// What is wrong with them.
        message: String,
    },
    /// The thing asked for does not exist (a machine type, an image, a location).
    #[error("not found: {what}")]
    NotFound {
        /// What was not found.
        what: String,
    },
    /// Something of that name exists already and is not this owner's to adopt.
    #[error("already exists: {what}")]
    AlreadyExists {
        /// What exists already.
        what: String,
    },
    /// The machine exists but this provider's owner did not create it; nothing was changed.
    #[error("machine {id} does not belong to this owner ({owner:?}) and pool labels; refused")]
    NotOwned {
        /// The machine's id.
        id: String,
        /// This provider's owner (empty for none).
        owner: String,
    },
    /// The cloud has no stock of `machine_type` in `location` right now: try again later or elsewhere.
    #[error("no stock of {machine_type} in {location}: {message}")]
    NoStock {
        /// The machine type that is out of stock.
        machine_type: String,
        /// Where it is out of stock.
        location: String,
        /// The cloud's own words.
        message: String,
    },
    /// An account limit (quota) would be exceeded. Not capacity: trying elsewhere will not help.
    #[error("quota exceeded: {message}")]
    Quota {
        /// The cloud's own words, naming the limit where it does.
        message: String,
    },
    /// The cloud throttled the call; retry after the given time.
    #[error("throttled{}: {message}", retry_after.map(|d| format!(" (retry after {} ms)", d.as_millis())).unwrap_or_default())]
    Throttled {
        /// How long the cloud asked to wait, if it said.
        retry_after: Option<Duration>,
        /// The cloud's own words.
        message: String,
    },
    /// The credentials were missing, expired or refused.
    #[error("unauthenticated: {message}")]
    Unauthenticated {
        /// Why (never the credential itself).
        message: String,
    },
    /// The credentials are valid but lack a permission, or a policy denied the call.
    #[error("permission denied: {message}")]
    PermissionDenied {
        /// The cloud's own words, naming the permission or policy where it does.
        message: String,
    },
    /// This driver cannot do `operation`. Raised before any network call.
    #[error("{provider} does not support {operation}")]
    Unsupported {
        /// The driver kind (`hetzner`, `ec2`, ...).
        provider: String,
        /// The operation asked for.
        operation: String,
    },
    /// A passing failure (5xx, dropped connection, timeout): the same call may succeed later.
    /// For a create, the machine may or may not have been made: retrying the same spec adopts it.
    #[error("transient failure: {message}")]
    Transient {
        /// What happened.
        message: String,
    },
    /// A call failed after it had made resources, and removing some of them failed too:
    /// `left` names every resource still held by the cloud.
    #[error("{error}; could not remove: {}", left.join(", "))]
    Leftovers {
        /// The failure that started the clean-up.
        error: Box<Error>,
        /// The resources that remain (kind and id), to be removed by hand or by a later delete.
        left: Vec<String>,
    },
    /// Anything else, with the cloud's words.
    #[error("{message}")]
    Other {
        /// What happened.
        message: String,
    },
}

/// The kind of an [`Error`], without its details: for matching, metrics and fault injection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorKind {
    /// [`Error::InvalidSpec`]
    InvalidSpec,
    /// [`Error::InvalidSettings`]
    InvalidSettings,
    /// [`Error::NotFound`]
    NotFound,
    /// [`Error::AlreadyExists`]
    AlreadyExists,
    /// [`Error::NotOwned`]
    NotOwned,
    /// [`Error::NoStock`]
    NoStock,
    /// [`Error::Quota`]
    Quota,
    /// [`Error::Throttled`]
    Throttled,
    /// [`Error::Unauthenticated`]
    Unauthenticated,
    /// [`Error::PermissionDenied`]
    PermissionDenied,
    /// [`Error::Unsupported`]
    Unsupported,
    /// [`Error::Transient`]
    Transient,
    /// [`Error::Leftovers`]
    Leftovers,
    /// [`Error::Other`]
    Other,
}

impl Error {
    /// The kind of this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::InvalidSpec { .. } => ErrorKind::InvalidSpec,
            Error::InvalidSettings { .. } => ErrorKind::InvalidSettings,
            Error::NotFound { .. } => ErrorKind::NotFound,
            Error::AlreadyExists { .. } => ErrorKind::AlreadyExists,
            Error::NotOwned { .. } => ErrorKind::NotOwned,
            Error::NoStock { .. } => ErrorKind::NoStock,
            Error::Quota { .. } => ErrorKind::Quota,
            Error::Throttled { .. } => ErrorKind::Throttled,
            Error::Unauthenticated { .. } => ErrorKind::Unauthenticated,
            Error::PermissionDenied { .. } => ErrorKind::PermissionDenied,
            Error::Unsupported { .. } => ErrorKind::Unsupported,
            Error::Transient { .. } => ErrorKind::Transient,
            Error::Leftovers { .. } => ErrorKind::Leftovers,
            Error::Other { .. } => ErrorKind::Other,
        }
    }

    /// Whether the same call may succeed if made again later (throttling and passing failures).
    ///
    /// No stock is not retryable in this sense: the same create will most likely fail again now;
    /// a caller should wait or try another type or location.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::Throttled { .. } | Error::Transient { .. })
    }

    /// How long the cloud asked to wait before the next call, if it said.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Error::Throttled { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// An [`Error::InvalidSpec`].
    pub fn invalid(field: impl Into<String>, rule: impl Into<String>) -> Self {
        Error::InvalidSpec {
            field: field.into(),
            rule: rule.into(),
        }
    }

    /// An [`Error::InvalidSettings`] naming one or more keys.
    pub fn settings<I, S>(keys: I, message: impl Into<String>) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Error::InvalidSettings {
            keys: keys.into_iter().map(Into::into).collect(),
            message: message.into(),
        }
    }

    /// An [`Error::Unsupported`].
    pub fn unsupported(provider: impl Into<String>, operation: impl Into<String>) -> Self {
        Error::Unsupported {
            provider: provider.into(),
            operation: operation.into(),
        }
    }

    /// An [`Error::Transient`].
    pub fn transient(message: impl Into<String>) -> Self {
        Error::Transient {
            message: message.into(),
        }
    }

    /// An [`Error::Other`].
    pub fn other(message: impl Into<String>) -> Self {
        Error::Other {
            message: message.into(),
        }
    }

    /// The meaning of a bare HTTP status, for a driver's error mapping to fall back on once it has
    /// looked at its cloud's own codes: 401 unauthenticated, 403 permission denied, 404 not found,
    /// 409 already exists, 408 and 5xx transient, 429 throttled (with `retry_after`), else other.
    pub fn from_http_status(
        status: u16,
        message: impl Into<String>,
        retry_after: Option<Duration>,
    ) -> Self {
        let message = message.into();
        match status {
            401 => Error::Unauthenticated { message },
            403 => Error::PermissionDenied { message },
            404 => Error::NotFound { what: message },
            409 => Error::AlreadyExists { what: message },
            429 => Error::Throttled {
                retry_after,
                message,
            },
            408 | 500..=599 => Error::Transient { message },
            _ => Error::Other {
                message: format!("HTTP {status}: {message}"),
            },
        }
    }

    /// An error of `kind` with a generic message: what fault injection and tests use.
    pub fn of_kind(kind: ErrorKind, message: impl Into<String>) -> Self {
        let message = message.into();
        match kind {
            ErrorKind::InvalidSpec => Error::invalid("spec", message),
            ErrorKind::InvalidSettings => Error::settings(Vec::<String>::new(), message),
            ErrorKind::NotFound => Error::NotFound { what: message },
            ErrorKind::AlreadyExists => Error::AlreadyExists { what: message },
            ErrorKind::NotOwned => Error::NotOwned {
                id: message,
                owner: String::new(),
            },
            ErrorKind::NoStock => Error::NoStock {
                machine_type: String::new(),
                location: String::new(),
                message,
            },
            ErrorKind::Quota => Error::Quota { message },
            ErrorKind::Throttled => Error::Throttled {
                retry_after: None,
                message,
            },
            ErrorKind::Unauthenticated => Error::Unauthenticated { message },
            ErrorKind::PermissionDenied => Error::PermissionDenied { message },
            ErrorKind::Unsupported => Error::unsupported("provider", message),
            ErrorKind::Transient => Error::Transient { message },
            ErrorKind::Leftovers => Error::Leftovers {
                error: Box::new(Error::other(message)),
                left: Vec::new(),
            },
            ErrorKind::Other => Error::Other { message },
        }
    }
}

/// Parses a `Retry-After` header in its delta-seconds form (`"3"`, `"1.5"`); `None` for anything else
/// (an HTTP date is rare from cloud APIs and is treated as absent: the policy's own backoff applies).
pub fn parse_retry_after(value: &str) -> Option<Duration> {
    let secs: f64 = value.trim().parse().ok()?;
    (secs.is_finite() && (0.0..86_400.0).contains(&secs)).then(|| Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_status_meaning() {
        assert_eq!(
            Error::from_http_status(503, "x", None).kind(),
            ErrorKind::Transient
        );
        assert_eq!(
            Error::from_http_status(401, "x", None).kind(),
            ErrorKind::Unauthenticated
        );
        let t = Error::from_http_status(429, "x", parse_retry_after("2"));
        assert_eq!(t.retry_after(), Some(Duration::from_secs(2)));
        assert_eq!(
            Error::from_http_status(418, "tea", None).to_string(),
            "HTTP 418: tea"
        );
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), None);
        assert_eq!(parse_retry_after("-1"), None);
    }

    #[test]
    fn retry_meaning() {
        assert!(Error::transient("x").is_retryable());
        let t = Error::Throttled {
            retry_after: Some(Duration::from_secs(3)),
            message: "slow down".into(),
        };
        assert!(t.is_retryable());
        assert_eq!(t.retry_after(), Some(Duration::from_secs(3)));
        assert!(t.to_string().contains("3000 ms"));
        for k in [
            ErrorKind::NoStock,
            ErrorKind::Quota,
            ErrorKind::InvalidSpec,
            ErrorKind::NotOwned,
        ] {
            assert!(!Error::of_kind(k, "m").is_retryable(), "{k:?}");
            assert_eq!(Error::of_kind(k, "m").kind(), k);
        }
    }

    #[test]
    fn settings_error_names_every_key() {
        let e = Error::settings(["A_TOKEN", "B_REGION"], "missing");
        assert_eq!(
            e.to_string(),
            "invalid settings (A_TOKEN, B_REGION): missing"
        );
    }

    #[test]
    fn leftovers_name_what_remains() {
        let e = Error::Leftovers {
            error: Box::new(Error::transient("vm create failed")),
            left: vec!["disk d1".into(), "address a1".into()],
        };
        assert_eq!(
            e.to_string(),
            "transient failure: vm create failed; could not remove: disk d1, address a1"
        );
    }
}
