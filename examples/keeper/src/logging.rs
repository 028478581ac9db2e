//! Logs go through the secret filter too: [`Masked`] wraps a tracing writer and passes every line
//! through [`crate::mask::mask_text`] before it is written, so that a `token=...` a driver or a
//! library puts in a message never reaches the log.
//!
//! Some lines are never logged, at any level ([`NEVER_LOGGED`]): the PostgreSQL client's statement
//! parameters hold what keeper writes (profile labels, token hashes), in a form no text filter can
//! read safely (a bare list of values, with no key to say which is a secret).

use std::io::{self, Write};

use tracing::Metadata;
use tracing_subscriber::filter::filter_fn;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer;

use crate::mask::mask_text;

/// A [`MakeWriter`] whose writers mask what they write.
#[derive(Debug, Clone)]
pub struct Masked<M>(pub M);

/// A writer that masks each buffer it is given (tracing's formatter writes one event at a time).
#[derive(Debug)]
pub struct MaskedWriter<W>(W);

impl<W: Write> Write for MaskedWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        self.0.write_all(mask_text(&text).as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

impl<'a, M: MakeWriter<'a>> MakeWriter<'a> for Masked<M> {
    type Writer = MaskedWriter<M::Writer>;

    fn make_writer(&'a self) -> Self::Writer {
        MaskedWriter(self.0.make_writer())
    }
}

/// The log targets keeper never logs, whatever `KEEPER_LOG` says: `tokio_postgres::query` logs
/// every statement's parameters at `debug`.
pub const NEVER_LOGGED: &[&str] = &["tokio_postgres::query"];

/// Whether events and spans of `meta` may be logged at all ([`NEVER_LOGGED`]).
pub fn may_log(meta: &Metadata<'_>) -> bool {
    let target = meta.target();
    !NEVER_LOGGED
        .iter()
        .any(|t| target == *t || (target.starts_with(t) && target[t.len()..].starts_with("::")))
}

/// Logs to standard error, masked, at the level `KEEPER_LOG` says (`info` when unset), never
/// what [`NEVER_LOGGED`] names.
pub fn init() {
    init_with(io::stderr)
}

/// Logs as [`init`] does, to `writer` instead of standard error (what a test reads keeper's log
/// through). Only the first call of the process takes effect.
pub fn init_with<W>(writer: W)
where
    W: for<'a> MakeWriter<'a> + Send + Sync + 'static,
{
    let filter = tracing_subscriber::EnvFilter::try_from_env("KEEPER_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let lines = tracing_subscriber::fmt::layer()
        .with_writer(Masked(writer))
        // No colours: escape codes between a key and its `=` would hide the pair from the filter.
        .with_ansi(false)
        .with_target(false)
        .with_filter(filter_fn(may_log));
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(lines)
        .try_init();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_masked() {
        let mut out = Vec::new();
        let mut w = MaskedWriter(&mut out);
        w.write_all(b"driver said api_token=abc123 and left\n")
            .unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "driver said api_token=*** and left\n"
        );
    }
}
