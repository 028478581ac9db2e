//! [`ProviderConfig`]: a whole provider described as data.

use std::sync::Arc;

use serde::Deserialize;

use crate::{Error, Provider, Result, Settings};

/// A provider as data: its kind, its owner and its settings (the environment variables' names as
/// keys, each driver's `ConfigKey`), deserialized from any document serde reads (a JSON or YAML
/// file, a database row), then built with [`ProviderConfig::build`] through [`crate::of_with`].
///
/// An unknown field is refused naming it; a setting that is a list or a map is refused naming its
/// key ([`Settings`]); an unknown kind, a kind not in this build and an invalid owner are named
/// together ([`ProviderConfig::check`]); then the driver names every problem of its settings. It
/// has no `Serialize` and its `Debug` shows the settings' keys only: the values may be secrets.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let c: orca::ProviderConfig = serde_json::from_str(
///     r#"{"kind": "fake", "owner": "stack-1", "settings": {"ORCA_FAKE_STATE": null}}"#,
/// ).unwrap();
/// let p = c.build().await?;
/// assert_eq!((p.kind(), p.owner()), ("fake", "stack-1"));
///
/// let e = serde_json::from_str::<orca::ProviderConfig>(r#"{"kind": "fake", "onwer": "x"}"#).unwrap_err();
/// assert!(e.to_string().contains("unknown field `onwer`"), "{e}");
/// # Ok::<(), orca::Error>(()) }).unwrap();
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct ProviderConfig {
    /// The provider kind: `fake`, `hetzner`, `ec2`, `azure` or `gce` ([`crate::kinds`]).
    pub kind: String,
    /// The owner its machines are labelled with (the stack's id; empty or absent for none).
    #[serde(default)]
    pub owner: String,
    /// The driver's settings (absent: none; nothing is read from the process environment).
    #[serde(default)]
    pub settings: Settings,
}

impl ProviderConfig {
    /// A provider of `kind` for `owner`, with no settings yet.
    pub fn new(kind: impl Into<String>, owner: impl Into<String>) -> Self {
        ProviderConfig {
            kind: kind.into(),
            owner: owner.into(),
            settings: Settings::new(),
        }
    }

    /// This description with `settings`.
    pub fn with_settings(mut self, settings: Settings) -> Self {
        self.settings = settings;
        self
    }

    /// Checks what can be checked before a driver reads its settings: that the kind is known and in
    /// this build, and that the owner is a valid label value. One error names both when both are
    /// wrong.
    pub fn check(&self) -> Result<()> {
        let problems: Vec<Error> = [
            crate::check_kind(&self.kind).err(),
            crate::validate_owner(&self.owner).err(),
        ]
        .into_iter()
        .flatten()
        .collect();
        match <[Error; 2]>::try_from(problems) {
            Ok([kind, owner]) => Err(Error::invalid(
                "kind, owner",
                format!("{}; {}", rule(&kind), rule(&owner)),
            )),
            Err(mut one) => one.pop().map_or(Ok(()), Err),
        }
    }

    /// The provider this describes ([`ProviderConfig::check`], then [`crate::of_with`]).
    pub async fn build(&self) -> Result<Arc<dyn Provider>> {
        self.check()?;
        crate::of_with(&self.kind, &self.owner, &self.settings).await
    }
}

/// `field: rule` of an input error, else the error's text.
fn rule(e: &Error) -> String {
    match e {
        Error::InvalidSpec { field, rule } => format!("{field}: {rule}"),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn config(v: serde_json::Value) -> std::result::Result<ProviderConfig, String> {
        ProviderConfig::deserialize(v).map_err(|e| e.to_string())
    }

    #[tokio::test]
    async fn a_description_builds_its_provider() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("cloud.json");
        let c = config(json!({
            "kind": "fake",
            "owner": "stack-1",
            "settings": {"ORCA_FAKE_STATE": state.to_str().unwrap()},
        }))
        .unwrap();
        let p = c.build().await.unwrap();
        assert_eq!((p.kind(), p.owner()), ("fake", "stack-1"));
        p.create(&crate::MachineSpec::new(
            "w-1",
            "amd64-small",
            "zone-a",
            "lab",
        ))
        .await
        .unwrap();
        assert!(state.exists(), "the settings reached the provider");
        // Owner and settings may be left out.
        let bare = config(json!({"kind": "fake"})).unwrap();
        assert_eq!(bare, ProviderConfig::new("fake", ""));
        assert_eq!(bare.build().await.unwrap().owner(), "");
    }

    #[test]
    fn every_field_problem_is_named() {
        let e = config(json!({"kind": "fake", "owner": "a", "setings": {}})).unwrap_err();
        assert!(e.contains("unknown field `setings`"), "{e}");
        let e = config(json!({"owner": "a"})).unwrap_err();
        assert!(e.contains("missing field `kind`"), "{e}");
        let e =
            config(json!({"kind": "fake", "settings": {"ORCA_FAKE_STATE": ["a"]}})).unwrap_err();
        assert!(e.contains("the setting ORCA_FAKE_STATE is a list"), "{e}");
    }

    #[tokio::test]
    async fn a_bad_kind_and_a_bad_owner_are_named_together_and_settings_by_the_driver() {
        let e = ProviderConfig::new("nimbus", "a,b").check().unwrap_err();
        let m = e.to_string();
        assert!(
            m.starts_with("invalid kind, owner: kind: unknown provider kind \"nimbus\""),
            "{m}"
        );
        assert!(m.contains("; owner: "), "{m}");
        let e = ProviderConfig::new("fake", "a,b")
            .build()
            .await
            .unwrap_err();
        assert!(
            matches!(&e, Error::InvalidSpec { field, .. } if field == "owner"),
            "{e}"
        );
        let e = ProviderConfig::new("fake", "")
            .with_settings(Settings::new().with("ORCA_FAKE_STAET", "x"))
            .build()
            .await
            .unwrap_err();
        assert!(e.to_string().contains("ORCA_FAKE_STAET"), "{e}");
    }

    #[test]
    fn debug_never_shows_a_setting_value() {
        let c = config(json!({
            "kind": "hetzner",
            "owner": "s",
            "settings": {"HCLOUD_TOKEN": "hunter2"},
        }))
        .unwrap();
        let d = format!("{c:?} {c:#?}");
        assert!(d.contains("HCLOUD_TOKEN") && d.contains("hetzner"), "{d}");
        assert!(!d.contains("hunter2"), "{d}");
    }

    /// Each driver's keys are typed keys reachable through the facade: a program writes
    /// `orca::gce::ConfigKey::Project`, never `"ORCA_GCE_PROJECT"`.
    #[cfg(all(
        feature = "hetzner",
        feature = "ec2",
        feature = "azure",
        feature = "gce"
    ))]
    #[tokio::test]
    async fn driver_keys_are_typed_keys_of_the_facade() {
        use crate::settings::SettingKey;
        assert_eq!(crate::gce::ConfigKey::Project.as_str(), "ORCA_GCE_PROJECT");
        assert!(crate::hetzner::ConfigKey::Token.is_secret());
        assert!(crate::azure::ConfigKey::ClientSecret.is_secret());
        assert_eq!(<crate::ec2::ConfigKey as SettingKey>::KIND, "ec2");
        assert_eq!(crate::FakeKey::State.as_str(), crate::FAKE_STATE_ENV);
        let c = ProviderConfig::new("gce", "stack-1").with_settings(
            Settings::new()
                .with_key(crate::gce::ConfigKey::Project, "lab")
                .with_key(crate::kit::ClientKey::MaxRetries, "many"),
        );
        let e = c.build().await.unwrap_err();
        assert!(e.to_string().contains("ORCA_MAX_RETRIES"), "{e}");
        assert!(
            e.to_string().contains("ORCA_GCE_NETWORK"),
            "every problem named: {e}"
        );
    }
}
