//! orca's Azure driver. **Not built yet**: [`from_env`] answers [`Error::Unsupported`].

use orca_machines::{Error, Result};

/// A provider for `owner` from this process's settings. Not built yet: always
/// [`Error::Unsupported`].
pub async fn from_env(owner: &str) -> Result<orca_machines::memory::MemoryProvider> {
    let _ = owner;
    Err(Error::unsupported(
        "azure",
        "the azure driver (not built yet)",
    ))
}
