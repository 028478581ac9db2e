//! The server log: each line goes to `tracing` (target `shed`) and is kept, the last ones, for tests
//! and for `GET /api/log` of an admin.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use crate::backend::lock;

const KEEP: usize = 2000;

/// Lines the server wrote.
#[derive(Debug, Clone, Default)]
pub struct ServerLog {
    lines: Arc<Mutex<VecDeque<String>>>,
}

impl ServerLog {
    /// An empty log.
    pub fn new() -> Self {
        Self::default()
    }

    fn keep(&self, line: &str) {
        let mut l = lock(&self.lines);
        if l.len() == KEEP {
            l.pop_front();
        }
        l.push_back(line.to_string());
    }

    /// Writes an information line.
    pub fn info(&self, line: impl AsRef<str>) {
        let line = line.as_ref();
        tracing::info!(target: "shed", "{line}");
        self.keep(line);
    }

    /// Writes a warning line.
    pub fn warn(&self, line: impl AsRef<str>) {
        let line = line.as_ref();
        tracing::warn!(target: "shed", "{line}");
        self.keep(line);
    }

    /// The lines kept, oldest first.
    pub fn lines(&self) -> Vec<String> {
        lock(&self.lines).iter().cloned().collect()
    }
}
