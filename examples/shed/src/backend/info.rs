//! What the API tells about the server (`GET /api/info`) and about sheds (list and get).

use serde::{Deserialize, Serialize};

use super::{ApiError, Backend, Caller, State};
use crate::config::Size;
use crate::model::{validate_shed_name, Shed, ShedView};

/// What `GET /api/info` answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Info {
    /// `remote`.
    pub backend: String,
    /// The default image.
    pub default_image: String,
    /// Feature tokens.
    pub features: Vec<String>,
    /// `topology`.
    pub isolation: String,
    /// The sizes (without their machine types).
    pub sizes: Vec<Size>,
    /// The default size.
    pub default_size: String,
    /// The image names clients may ask for.
    pub images: Vec<String>,
    /// The network profiles a create may ask for.
    pub network_profiles: Vec<String>,
}

impl Backend {
    /// `GET /api/info`.
    pub fn info(&self, caller: &Caller) -> Info {
        let cfg = &self.inner.cfg;
        let image = &cfg.default_image;
        let default_image = if caller.is_admin() {
            image.clone()
        } else {
            // A service client is never told a path that may name the project.
            image.rsplit('/').next().unwrap_or_default().to_string()
        };
        let mut profiles = vec!["default".to_string()];
        if cfg.isolated_available() {
            profiles.push("isolated".into());
        }
        Info {
            backend: "remote".into(),
            default_image,
            features: vec![
                "async_lifecycle".into(),
                "network_profiles".into(),
                "service_clients".into(),
                // Listed as on any shed-server, so that clients that look for it find it; the exec
                // route answers 409 SHED_NOT_RUNNING, else 501 (the in-VM agent is not built).
                "http_exec".into(),
            ],
            isolation: "topology".into(),
            sizes: cfg.sizes.values().cloned().collect(),
            default_size: cfg.default_size.clone(),
            images: cfg.image_aliases.keys().cloned().collect(),
            network_profiles: profiles,
        }
    }

    /// `GET /api/sheds`: the caller's sheds (every shed for an admin), by name.
    pub fn list(&self, caller: &Caller) -> Vec<ShedView> {
        let st = self.state();
        let mut v: Vec<ShedView> = st
            .sheds
            .values()
            .filter(|s| caller.sees(s))
            .map(ShedView::from)
            .collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    }

    /// The caller's shed named `name`: 400 for a name no shed can have (one that arrived
    /// percent-encoded with a `/` or dot segments in it), 404 when the caller has no such shed.
    pub(crate) fn find<'a>(
        st: &'a State,
        caller: &Caller,
        name: &str,
    ) -> Result<&'a Shed, ApiError> {
        validate_shed_name(name).map_err(ApiError::invalid)?;
        st.sheds
            .values()
            .find(|s| s.name == name && caller.sees(s))
            .ok_or_else(|| ApiError::not_found(name))
    }

    /// `GET /api/sheds/{name}`.
    pub fn get(&self, caller: &Caller, name: &str) -> Result<ShedView, ApiError> {
        let st = self.state();
        Self::find(&st, caller, name).map(ShedView::from)
    }
}
