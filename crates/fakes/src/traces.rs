//! What a tracing subscriber wrote, kept in memory for a test to read, and the kit's `orca.call`
//! spans picked out of it: the drivers' trace tests (no secret in any trace, every call span filled
//! as the kit defines it) read their traces through these.
//!
//! A subscriber installed with [`Captured::install`] is the thread's default only: tracing keeps
//! what each call site is interested in process-wide, so a test that installs one runs alone in a
//! process of its own ([`crate::alone`]).

use std::sync::{Arc, Mutex};

use tracing::subscriber::DefaultGuard;
use tracing_subscriber::fmt::format::FmtSpan;

/// A writer that keeps what is written to it; its clones share one buffer.
#[derive(Clone, Default)]
pub struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    /// Installs, as this thread's default until the guard drops, a subscriber of every span and event
    /// at every level, written here without colours; with `span_closes`, a line as each span closes
    /// (with its fields: what [`call_spans`] reads).
    pub fn install(span_closes: bool) -> (Captured, DefaultGuard) {
        let captured = Captured::default();
        let spans = if span_closes {
            FmtSpan::CLOSE
        } else {
            FmtSpan::NONE
        };
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_span_events(spans)
            .with_ansi(false)
            .with_writer(captured.clone())
            .finish();
        let guard = tracing::subscriber::set_default(subscriber);
        (captured, guard)
    }

    /// All that was written so far, as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;
    fn make_writer(&'a self) -> Captured {
        self.clone()
    }
}

/// The fields of each close line of the kit's `orca.call` spans of `operation` in `logs`, in order
/// (not the close lines of spans a client library opens inside a call).
pub fn call_spans<'a>(logs: &'a str, operation: &str) -> Vec<&'a str> {
    let op = format!("operation=\"{operation}\"");
    every_call_span(logs)
        .into_iter()
        .filter(|fields| fields.contains(&op))
        .collect()
}

/// The fields of each close line of the kit's `orca.call` spans in `logs`, whatever their
/// operation, in order.
pub fn every_call_span(logs: &str) -> Vec<&str> {
    logs.lines()
        .filter(|l| l.contains("orca.call{") && l.contains("}: orca_machines::kit: close"))
        .map(call_fields)
        .collect()
}

/// The `orca.call{...}` part of a close line: its own fields only, not those of the spans around it
/// (the retry policy's `orca.attempt{retry=N}` encloses it and would answer for a missing field).
fn call_fields(line: &str) -> &str {
    let from = line.find("orca.call{").unwrap_or(0);
    let rest = &line[from..];
    &rest[..rest.find('}').map_or(rest.len(), |end| end + 1)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_spans_are_the_kit_call_closes_of_one_operation_with_their_own_fields() {
        let logs = "\
orca.attempt{retry=1}:orca.call{operation=\"list\" retry=1 status=200}: orca_machines::kit: close time.busy=1ms
orca.call{operation=\"list\" retry=0}:hyper{x=1}: hyper::client: close time.busy=1ms
orca.call{operation=\"get\" retry=0}: orca_machines::kit: close time.busy=1ms
orca.call{operation=\"list\" retry=0}: orca_machines::kit: answered
";
        assert_eq!(
            call_spans(logs, "list"),
            ["orca.call{operation=\"list\" retry=1 status=200}"]
        );
        assert_eq!(
            every_call_span(logs),
            [
                "orca.call{operation=\"list\" retry=1 status=200}",
                "orca.call{operation=\"get\" retry=0}"
            ]
        );
    }

    #[test]
    fn an_installed_subscriber_writes_to_the_buffer_until_its_guard_drops() {
        let (captured, guard) = Captured::install(true);
        tracing::info_span!("seen", field = 7).in_scope(|| tracing::trace!("inside"));
        drop(guard);
        tracing::info!("after");
        let text = captured.text();
        assert!(text.contains("inside") && text.contains("close"), "{text}");
        assert!(text.contains("field=7"), "{text}");
        assert!(!text.contains("after"), "{text}");
    }
}
