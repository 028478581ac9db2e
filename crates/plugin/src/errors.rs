//! [`Error`] to and from its protocol message, keeping its kind, retry meaning, the cloud's code,
//! the operation, the retries, whether an attempt may have acted and the leftovers it names.

use std::time::Duration;

use orca_machines::{Context, Error, ErrorKind};

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
        // Of every kind: a no stock's or a quota's clean-up may have left something as well as
        // a `Leftovers`, and a caller removes it by name whatever the kind.
        leftovers: e.left().to_vec(),
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
        Error::Leftovers { error, .. } => w.cause = Some(Box::new(error_to(error))),
        // A kind this build does not know travels as Other, in its own words.
        _ => w.message = e.to_string(),
    }
    w
}

/// The context `w` carries, with `left` as what a clean-up could not remove. Something left
/// stands in the cloud: the call may have acted whatever the mark says (a plugin in another
/// language may send the list alone).
fn context_from(w: &pb::Error, left: Vec<String>) -> Context {
    let mut c = Context::new();
    c.operation = (!w.operation.is_empty()).then(|| w.operation.clone());
    c.code = (!w.code.is_empty()).then(|| w.code.clone());
    c.retries = w.retries;
    c.may_have_acted = w.may_have_acted || !left.is_empty();
    c.left = left;
    c
}

/// The error `w` describes, with the same kind, retry meaning and context: the code, the
/// operation, the retries, the mark of an attempt that may have acted and what a clean-up left,
/// for every kind that carries a context. A message without `leftovers` (from a plugin built
/// before no stock and quota sent it) names nothing left, as it read then.
pub fn error_from(w: pb::Error) -> Error {
    use pb::ErrorKind as W;
    let kind = W::try_from(w.kind).unwrap_or(W::Other);
    if kind == W::Leftovers {
        let cause = match w.cause {
            Some(c) => error_from(*c),
            // Without its first failure, the message's own fields stand for it.
            None => Error::Other {
                context: Box::new(context_from(&w, Vec::new())),
                message: w.message,
            },
        };
        return Error::leftovers(cause, w.leftovers);
    }
    let context = Box::new(context_from(&w, w.leftovers.clone()));
    let message = w.message;
    match kind {
        W::InvalidSpec => without_context(Error::invalid(w.field, message), *context),
        W::InvalidSettings => without_context(Error::settings(w.keys, message), *context),
        W::NotOwned => without_context(Error::not_owned(message, w.owner), *context),
        W::Unsupported => without_context(Error::unsupported(w.owner, message), *context),
        W::NotFound => Error::NotFound {
            what: message,
            context,
        },
        W::AlreadyExists => Error::AlreadyExists {
            what: message,
            context,
        },
        W::NoStock => Error::NoStock {
            machine_type: w.machine_type,
            location: w.location,
            message,
            context,
        },
        W::Quota => Error::Quota { message, context },
        W::Throttled => Error::Throttled {
            retry_after: w.retry_after_ms.map(Duration::from_millis),
            message,
            context,
        },
        W::Busy => Error::Busy { message, context },
        W::Unauthenticated => Error::Unauthenticated { message, context },
        W::PermissionDenied => Error::PermissionDenied { message, context },
        W::Transient => Error::Transient { message, context },
        W::Other | W::Leftovers => Error::Other { message, context },
    }
}

/// `e`, of a kind that holds no context, as it is while `context` marks nothing; else, as
/// [`Error::with_may_have_acted`] makes it, an [`Error::Other`] in its words with `e` as its
/// source, holding the mark and what was left, so that neither is lost.
fn without_context(e: Error, mut context: Context) -> Error {
    if !context.may_have_acted {
        return e;
    }
    let message = e.to_string();
    context.source = Some(std::sync::Arc::new(e));
    Error::Other {
        message,
        context: Box::new(context),
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

    /// A context with every field set: an attempt that may have acted, and what a clean-up left.
    fn full_context() -> Context {
        let mut c = Context::new();
        c.operation = Some("instances.insert".into());
        c.retries = 3;
        c.code = Some("ZONE_RESOURCE_POOL_EXHAUSTED".into());
        c.may_have_acted = true;
        c.left = vec!["disk lab-1".into(), "address lab-1".into()];
        c
    }

    /// An error of `kind` with `context` where its kind carries one (of its first failure, for
    /// `Leftovers`); the kinds raised before any call carry none and come as they are, and marked.
    fn of_kind_with(kind: ErrorKind, context: Context) -> Vec<Error> {
        if kind == ErrorKind::Leftovers {
            let first = of_kind_with(ErrorKind::Quota, context).remove(0);
            return vec![Error::leftovers(first, vec!["nic n1".into()])];
        }
        let e = Error::of_kind(kind, "m");
        if e.context().is_none() {
            return vec![e.clone(), e.with_may_have_acted()];
        }
        vec![e.replace_context(context)]
    }

    fn assert_same(back: &Error, e: &Error) {
        assert_eq!(back, e, "{e:?}");
        assert_eq!(back.to_string(), e.to_string());
        assert_eq!(back.kind(), e.kind(), "{e:?}");
        assert_eq!(back.left(), e.left(), "{e:?}");
        assert_eq!(back.may_have_acted(), e.may_have_acted(), "{e:?}");
        assert_eq!(back.made_nothing(), e.made_nothing(), "{e:?}");
        assert_eq!(back.is_retryable(), e.is_retryable(), "{e:?}");
        assert_eq!(back.code(), e.code(), "{e:?}");
        assert_eq!(back.operation(), e.operation(), "{e:?}");
        assert_eq!(back.retries(), e.retries(), "{e:?}");
        assert_eq!(back.retry_after(), e.retry_after(), "{e:?}");
    }

    #[test]
    fn every_kind_keeps_its_whole_context_across_the_wire() {
        for kind in ErrorKind::ALL {
            for e in of_kind_with(kind, full_context()) {
                assert_same(&error_from(error_to(&e)), &e);
            }
        }
    }

    /// What a no stock's or a quota's clean-up left is on the wire itself, for a host in any
    /// language, and makes the error one that did not make nothing.
    #[test]
    fn a_no_stock_or_quota_names_what_its_clean_up_left_on_the_wire() {
        let left = vec!["server 7 (lab-1)".to_string()];
        for e in [
            Error::no_stock("cx23", "fsn1", "no room").with_leftovers(left.clone()),
            Error::quota("servers").with_leftovers(left.clone()),
        ] {
            let w = error_to(&e);
            assert_eq!(w.leftovers, left, "{e}");
            assert!(w.may_have_acted && !w.made_nothing, "{e}");
            let back = error_from(w);
            assert_eq!(back.kind(), e.kind());
            assert_eq!(back.left(), left.as_slice(), "{back:?}");
            assert!(!back.made_nothing(), "{back:?}");
        }
    }

    /// A plugin built before no stock and quota named what their clean-up left sends neither the
    /// list nor the mark: a clean refusal, as it read then.
    #[test]
    fn an_older_no_stock_without_the_list_reads_as_before() {
        let w = pb::Error {
            kind: pb::ErrorKind::NoStock as i32,
            message: "no room".into(),
            machine_type: "cx23".into(),
            location: "fsn1".into(),
            made_nothing: true,
            ..pb::Error::default()
        };
        let e = error_from(w);
        assert_eq!(e, Error::no_stock("cx23", "fsn1", "no room"));
        assert!(e.left().is_empty() && e.made_nothing() && !e.may_have_acted());
    }

    /// A plugin in another language may send what it likes: a list of leftovers means something
    /// stands, and the mark of an attempt that may have acted is kept on every kind, those that
    /// carry no context included.
    #[test]
    fn leftovers_and_the_mark_are_never_dropped_whatever_the_kind() {
        let e = error_from(pb::Error {
            kind: pb::ErrorKind::Quota as i32,
            message: "servers".into(),
            leftovers: vec!["server 7".into()],
            ..pb::Error::default()
        });
        assert_eq!(e.left(), ["server 7".to_string()]);
        assert!(e.may_have_acted() && !e.made_nothing(), "{e:?}");
        for kind in [pb::ErrorKind::InvalidSpec, pb::ErrorKind::InvalidSettings] {
            let e = error_from(pb::Error {
                kind: kind as i32,
                message: "m".into(),
                may_have_acted: true,
                ..pb::Error::default()
            });
            assert!(e.may_have_acted() && !e.made_nothing(), "{kind:?}: {e:?}");
        }
        // Leftovers without their first failure: the outer fields are its context.
        let e = error_from(pb::Error {
            kind: pb::ErrorKind::Leftovers as i32,
            message: "boom".into(),
            code: "InternalError".into(),
            may_have_acted: true,
            leftovers: vec!["nic n1".into()],
            ..pb::Error::default()
        });
        assert_eq!(e.kind(), ErrorKind::Leftovers);
        assert_eq!(e.left(), ["nic n1".to_string()]);
        assert_eq!(e.code(), Some("InternalError"));
        assert!(e.may_have_acted(), "{e:?}");
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
