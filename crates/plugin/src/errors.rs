//! [`Error`] to and from its protocol message, keeping its kind, retry meaning, the cloud's code,
//! the operation, the retries, whether an attempt may have acted and the leftovers it names.

use std::time::Duration;

use orca_machines::{Error, ErrorKind};

use crate::proto::v1 as pb;

fn kind_to(k: ErrorKind) -> pb::ErrorKind {
    use pb::ErrorKind as W;
    match k {
        ErrorKind::InvalidSpec => W::InvalidSpec,
        ErrorKind::InvalidSettings => W::InvalidSettings,
        ErrorKind::NotFound => W::NotFound,
        ErrorKind::AlreadyExists => W::AlreadyExists,
        ErrorKind::NotOwned => W::NotOwned,
        ErrorKind::NoStock => W::NoStock,
        ErrorKind::Quota => W::Quota,
        ErrorKind::Throttled => W::Throttled,
        ErrorKind::Busy => W::Busy,
        ErrorKind::Unauthenticated => W::Unauthenticated,
        ErrorKind::PermissionDenied => W::PermissionDenied,
        ErrorKind::Unsupported => W::Unsupported,
        ErrorKind::Transient => W::Transient,
        ErrorKind::Leftovers => W::Leftovers,
        _ => W::Other,
    }
}

/// `e` as the wire carries it.
pub fn error_to(e: &Error) -> pb::Error {
    let mut w = pb::Error {
        kind: kind_to(e.kind()) as i32,
        retryable: e.is_retryable(),
        made_nothing: e.made_nothing(),
        may_have_acted: e.may_have_acted(),
        code: e.code().unwrap_or_default().to_string(),
        operation: e.operation().unwrap_or_default().to_string(),
        retries: e.retries(),
        retry_after_ms: e
            .retry_after()
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        display: e.to_string(),
        ..pb::Error::default()
    };
    match e {
        Error::InvalidSpec { field, rule } => {
            w.field.clone_from(field);
            w.message.clone_from(rule);
        }
        Error::InvalidSettings { keys, message } => {
            w.keys.clone_from(keys);
            w.message.clone_from(message);
        }
        Error::NotFound { what, .. } | Error::AlreadyExists { what, .. } => {
            w.message.clone_from(what)
        }
        Error::NotOwned { id, owner } => {
            w.message.clone_from(id);
            w.owner.clone_from(owner);
        }
        Error::NoStock {
            machine_type,
            location,
            message,
            ..
        } => {
            w.machine_type.clone_from(machine_type);
            w.location.clone_from(location);
            w.message.clone_from(message);
        }
        Error::Quota { message, .. }
        | Error::Throttled { message, .. }
        | Error::Busy { message, .. }
        | Error::Unauthenticated { message, .. }
        | Error::PermissionDenied { message, .. }
        | Error::Transient { message, .. }
        | Error::Other { message, .. } => w.message.clone_from(message),
        Error::Unsupported {
            provider,
            operation,
        } => {
            w.owner.clone_from(provider);
            w.message.clone_from(operation);
        }
        Error::Leftovers { error, left } => {
            w.leftovers.clone_from(left);
            w.cause = Some(Box::new(error_to(error)));
        }
        // A kind this build does not know travels as Other, in its own words.
        _ => w.message = e.to_string(),
    }
    w
}

/// The error `w` describes, with the same kind and retry meaning.
pub fn error_from(w: pb::Error) -> Error {
    use pb::ErrorKind as W;
    let kind = W::try_from(w.kind).unwrap_or(W::Other);
    let e = match kind {
        W::InvalidSpec => return Error::invalid(w.field, w.message),
        W::InvalidSettings => return Error::settings(w.keys, w.message),
        W::NotOwned => return acted(Error::not_owned(w.message, w.owner), w.may_have_acted),
        W::Unsupported => return acted(Error::unsupported(w.owner, w.message), w.may_have_acted),
        W::Leftovers => {
            let cause = w
                .cause
                .map(|c| error_from(*c))
                .unwrap_or_else(|| Error::other(w.message));
            return Error::leftovers(cause, w.leftovers);
        }
        W::NotFound => Error::not_found(w.message.clone()),
        W::AlreadyExists => Error::already_exists(w.message.clone()),
        W::NoStock => Error::no_stock(&w.machine_type, &w.location, w.message.clone()),
        W::Quota => Error::quota(w.message.clone()),
        W::Throttled => Error::throttled(
            w.retry_after_ms.map(Duration::from_millis),
            w.message.clone(),
        ),
        W::Busy => Error::busy(w.message.clone()),
        W::Unauthenticated => Error::unauthenticated(w.message.clone()),
        W::PermissionDenied => Error::permission_denied(w.message.clone()),
        W::Transient => Error::transient(w.message.clone()),
        W::Other => Error::other(w.message.clone()),
    };
    let mut e = e.with_retries(w.retries);
    if !w.code.is_empty() {
        e = e.with_code(w.code.clone());
    }
    if !w.operation.is_empty() {
        e = e.with_operation(w.operation.clone());
    }
    acted(e, w.may_have_acted)
}

fn acted(e: Error, may_have_acted: bool) -> Error {
    if may_have_acted {
        e.with_may_have_acted()
    } else {
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every_kind() -> Vec<Error> {
        vec![
            Error::invalid("name", "1 to 63 of a-z"),
            Error::settings(["HCLOUD_TOKEN", "ORCA_HCLOUD_NETWORK"], "missing"),
            Error::not_found("machine m-1").with_code("not_found"),
            Error::already_exists("server lab-1"),
            Error::not_owned("m-1", "stack-a"),
            Error::no_stock("cx23", "hel1", "resource_unavailable").with_retries(2),
            Error::quota("cores").with_code("QuotaExceeded"),
            Error::throttled(Some(Duration::from_millis(2500)), "slow down"),
            Error::busy("locked").with_operation("servers.update"),
            Error::unauthenticated("bad token"),
            Error::permission_denied("policy"),
            Error::unsupported("fake", "resize"),
            Error::transient("503")
                .with_operation("instances.insert")
                .with_code("serviceUnavailable")
                .with_retries(6),
            Error::leftovers(
                Error::quota("cores").with_code("QuotaExceeded"),
                vec!["nic n1".into(), "disk d1".into()],
            ),
            Error::other("strange"),
            Error::quota("cores").with_may_have_acted(),
            Error::not_owned("m-2", "stack-b").with_may_have_acted(),
        ]
    }

    #[test]
    fn every_kind_keeps_its_meaning_across_the_wire() {
        for e in every_kind() {
            let back = error_from(error_to(&e));
            assert_eq!(back, e, "{e}");
            assert_eq!(back.to_string(), e.to_string());
            assert_eq!(back.kind(), e.kind(), "{e}");
            assert_eq!(back.is_retryable(), e.is_retryable(), "{e}");
            assert_eq!(back.made_nothing(), e.made_nothing(), "{e}");
            assert_eq!(back.may_have_acted(), e.may_have_acted(), "{e}");
            assert_eq!(back.code(), e.code(), "{e}");
            assert_eq!(back.retry_after(), e.retry_after(), "{e}");
        }
    }

    #[test]
    fn an_unknown_kind_number_is_other() {
        let w = pb::Error {
            kind: 999,
            message: "from a newer plugin".into(),
            ..pb::Error::default()
        };
        let e = error_from(w);
        assert_eq!(e.kind(), ErrorKind::Other);
        assert!(!e.is_retryable() && !e.made_nothing());
    }
}
