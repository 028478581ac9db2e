//! The REST drivers' HTTP client and the one classification of a request that got no complete
//! answer.

use std::time::Duration;

use super::{ClientOptions, Proxy, Timeouts};
use crate::error::{Error, Result};

/// The HTTP client of a REST driver of `kind`: user agent `orca-<kind>/<version>`, `timeouts` as
/// given (resolve them first: [`Timeouts::resolve`]), no redirects, and the environment's proxy or
/// none as `proxy` says ([`Proxy::for_endpoint`] for the usual choice).
pub fn http_client_with(kind: &str, timeouts: Timeouts, proxy: Proxy) -> Result<reqwest::Client> {
    let mut b = reqwest::Client::builder()
        .user_agent(format!("orca-{kind}/{}", env!("CARGO_PKG_VERSION")))
        .connect_timeout(timeouts.connect)
        .redirect(reqwest::redirect::Policy::none());
    if let Some(t) = timeouts.request {
        b = b.timeout(t);
    }
    if proxy == Proxy::Never {
        b = b.no_proxy();
    }
    b.build().map_err(|e| {
        Error::other(format!("{kind}: cannot build the HTTP client")).with_source(e.without_url())
    })
}

/// The HTTP client of a REST driver of `kind` calling `endpoint`: [`http_client_with`] with the
/// options' timeouts beating `connect` and `request`, and no proxy for a loopback endpoint.
///
/// The older form: here a client key (`ORCA_REQUEST_TIMEOUT`) beats even a timeout the driver's
/// builder was given. A driver that resolves its timeouts ([`Timeouts::resolve`]: builder, then
/// key, then default) calls [`http_client_with`].
pub fn http_client(
    kind: &str,
    endpoint: &str,
    options: &ClientOptions,
    connect: Duration,
    request: Option<Duration>,
) -> Result<reqwest::Client> {
    http_client_with(
        kind,
        Timeouts::resolve(None, None, options, Timeouts::new(connect, request)),
        Proxy::for_endpoint(endpoint),
    )
}

/// What went wrong with a request that got no complete answer ([`TransportKind::of`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TransportKind {
    /// No connection was made: the request never left this machine.
    Connect,
    /// The connection, the request or the answer took longer than its timeout.
    Timeout,
    /// The connection was reset, aborted or closed midway.
    Interrupted,
    /// Sending the request failed otherwise (the server closed the connection without an answer).
    Request,
    /// The answer's body was cut off while it was read.
    Body,
    /// The answer came whole but could not be decoded (not the JSON expected).
    Decode,
    /// The request could not be built (a bad URL), or the client refused the answer (a redirect,
    /// an error status asked to be an error): no passing failure.
    Invalid,
    /// Anything else.
    Other,
}

impl TransportKind {
    /// The kind of `e`, from reqwest's own classification refined by the I/O error in its causes (a
    /// reset, an abort, a broken pipe or an early end of the stream is [`TransportKind::Interrupted`];
    /// a timed-out read is [`TransportKind::Timeout`]).
    pub fn of(e: &reqwest::Error) -> TransportKind {
        if e.is_builder() || e.is_redirect() || e.is_status() {
            return TransportKind::Invalid;
        }
        let kind = if e.is_timeout() {
            TransportKind::Timeout
        } else if e.is_connect() {
            TransportKind::Connect
        } else if e.is_body() {
            TransportKind::Body
        } else if e.is_decode() {
            TransportKind::Decode
        } else if e.is_request() {
            TransportKind::Request
        } else {
            TransportKind::Other
        };
        if kind == TransportKind::Decode {
            // reqwest also calls a body cut off while it was read a decoding error; only an answer
            // that came whole and is not the JSON expected is one.
            return if causes(e).any(|c| c.is::<serde_json::Error>()) {
                TransportKind::Decode
            } else {
                TransportKind::Body
            };
        }
        if !matches!(kind, TransportKind::Request | TransportKind::Other) {
            return kind;
        }
        for c in causes(e) {
            if let Some(io) = c.downcast_ref::<std::io::Error>() {
                use std::io::ErrorKind as K;
                return match io.kind() {
                    K::TimedOut => TransportKind::Timeout,
                    K::ConnectionReset
                    | K::ConnectionAborted
                    | K::BrokenPipe
                    | K::UnexpectedEof => TransportKind::Interrupted,
                    _ => kind,
                };
            }
        }
        kind
    }

    /// Whether the cloud may have served the request: false only when it never left this machine
    /// (no connection, or a request that could not be built). A create that failed so made
    /// nothing.
    pub fn may_have_been_served(self) -> bool {
        !matches!(self, TransportKind::Connect | TransportKind::Invalid)
    }

    fn what(self) -> &'static str {
        match self {
            TransportKind::Connect => "could not connect",
            TransportKind::Timeout => "timed out",
            TransportKind::Interrupted => "the connection was cut",
            TransportKind::Request => "the request failed",
            TransportKind::Body => "the answer was cut off",
            TransportKind::Decode => "the answer could not be read",
            TransportKind::Invalid => "the request was refused by the client",
            TransportKind::Other => "the request failed",
        }
    }
}

/// orca's error for a request that got no complete answer: a passing failure
/// ([`Error::Transient`]: retried by the shared policy, and for a create "may have been made") for
/// a connection that failed, timed out or was cut, or an answer cut off; [`Error::Other`] for an
/// answer that cannot be decoded or a request the client refused ([`TransportKind::Invalid`]).
/// The message says which, with the causes; the cause is kept as the error's source. Neither holds
/// the URL: a URL can carry a token (a signed link, an API key in the query).
pub fn transport_error(e: reqwest::Error) -> Error {
    let kind = TransportKind::of(&e);
    let e = e.without_url();
    let mut message = format!("{}: {e}", kind.what());
    for c in causes(&e) {
        message.push_str(&format!(": {c}"));
    }
    let error = match kind {
        TransportKind::Decode | TransportKind::Invalid => Error::other(message),
        _ => Error::transient(message),
    };
    error.with_source(e)
}

/// The causes of `e`, nearest first.
fn causes<'a>(
    e: &'a (dyn std::error::Error + 'static),
) -> impl Iterator<Item = &'a (dyn std::error::Error + 'static)> {
    std::iter::successors(e.source(), |c| c.source())
}
