//! Who calls: a client of the configuration (or the local admin of a server without clients), with
//! what its policy allows.

use std::time::Duration;

use crate::config::{Config, Role};
use crate::model::Shed;

/// Who is calling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The client's name (`local` when the server has no clients).
    pub name: String,
    /// Its role.
    pub role: Role,
    /// Its sheds run at least this long.
    pub max_age: Option<Duration>,
    /// Caps on the size of its sheds.
    pub max_cpus: Option<u32>,
    /// Caps on the size of its sheds.
    pub max_memory_mb: Option<u32>,
    /// Image names it may use (empty: all).
    pub images: Vec<String>,
}

impl Caller {
    /// The local admin (a server without clients).
    pub fn local_admin() -> Self {
        Caller {
            name: "local".into(),
            role: Role::Admin,
            max_age: None,
            max_cpus: None,
            max_memory_mb: None,
            images: Vec::new(),
        }
    }

    /// Whether this caller is an admin.
    pub fn is_admin(&self) -> bool {
        self.role == Role::Admin
    }

    /// Whether the caller may use image `name` (an `image_aliases` name, or `default`): every image
    /// when its list is empty; the default image when one of its aliases names that same image.
    pub fn may_use(&self, name: &str, cfg: &Config) -> bool {
        self.images.is_empty()
            || self.images.iter().any(|i| i == name)
            || (name == "default"
                && self
                    .images
                    .iter()
                    .any(|a| cfg.image_aliases.get(a) == Some(&cfg.default_image)))
    }

    pub(super) fn sees(&self, s: &Shed) -> bool {
        self.is_admin() || s.client == self.name
    }
}
