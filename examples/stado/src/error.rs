//! stado's one error: a message for a person and a short code for scripts.

/// Why a command did not do what it was asked, in words a person acts on. Never carries a secret:
/// messages are built from names, addresses, the cloud's error codes and words, never from keys,
/// tokens or user data. Serialized as a report carries it: `{"code": ..., "message": ...}`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, serde::Serialize)]
#[error("{message}")]
pub struct Failure {
    code: &'static str,
    message: String,
}

impl Failure {
    /// A failure with the code `failed`.
    pub fn new(message: impl Into<String>) -> Failure {
        Failure {
            message: message.into(),
            code: "failed",
        }
    }

    /// The same failure with the code `code` (`refused`, `busy`, `invalid`, ...).
    pub fn with_code(mut self, code: &'static str) -> Failure {
        self.code = code;
        self
    }

    /// Input that is not what was asked for: the code `invalid`.
    pub fn invalid(message: impl Into<String>) -> Failure {
        Failure::new(message).with_code("invalid")
    }

    /// A refusal (input or policy said no before anything was made).
    pub fn refused(message: impl Into<String>) -> Failure {
        Failure::new(message).with_code("refused")
    }

    /// The same failure (its code kept), `more` said after its message.
    pub fn adding(mut self, more: &str) -> Failure {
        self.message = format!("{}; {more}", self.message);
        self
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The code.
    pub fn code(&self) -> &'static str {
        self.code
    }
}
