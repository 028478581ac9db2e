//! [`ArmError`]: Azure's own error, kept as the `source()` of the orca error a call returns, so a
//! caller can read what Azure said beyond the code orca keeps ([`orca_machines::Error::code`]).

use crate::model::ErrorDetail;

/// An error Azure Resource Manager answered (its `ErrorDetail`): the HTTP status (none for a
/// long-running operation that failed), the code, the message, the target and the details, nested
/// as Azure nests them.
///
/// ```
/// # use orca_azure::ArmError;
/// fn arm_error(e: &orca_machines::Error) -> Option<&ArmError> {
///     std::error::Error::source(e)?.downcast_ref::<ArmError>()
/// }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ArmError {
    /// The HTTP status of the answer; `None` for an operation that ended `Failed`.
    pub status: Option<u16>,
    /// Azure's code (`AnotherOperationInProgress`, `RequestDisallowedByPolicy`, ...).
    pub code: String,
    /// Azure's message.
    pub message: String,
    /// What the error is about (a parameter's name), when Azure says.
    pub target: String,
    /// The errors it is made of.
    pub details: Vec<ArmError>,
}

impl ArmError {
    pub(crate) fn of(status: Option<u16>, e: &ErrorDetail) -> ArmError {
        ArmError {
            status,
            code: e.code.clone(),
            message: e.message.clone(),
            target: e.target.clone(),
            details: e.details.iter().map(|d| ArmError::of(None, d)).collect(),
        }
    }
}

impl std::fmt::Display for ArmError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(s) = self.status {
            write!(f, "HTTP {s}: ")?;
        }
        match (self.code.is_empty(), self.message.is_empty()) {
            (false, false) => write!(f, "{}: {}", self.code, self.message),
            (false, true) => write!(f, "{}", self.code),
            _ => write!(f, "{}", self.message),
        }
    }
}

impl std::error::Error for ArmError {}
