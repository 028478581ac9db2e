//! Settings as data: the same keys a driver reads from the environment, given as a map
//! ([`Settings`]), and the collector that names every problem of a set of settings at once
//! ([`Problems`]).
//!
//! Every driver has a typed key enum (`orca_hetzner::ConfigKey`, ..., as object_store's
//! `AmazonS3ConfigKey`) whose names are the environment variables' names, a `from_env` that reads
//! them from the process and a `from_settings` that reads them from a [`Settings`]. A front-end that
//! keeps its settings elsewhere (keeper's registry, shed's `*_env` names) builds a [`Settings`] by
//! typed key ([`Settings::with_key`]: `orca::gce::ConfigKey::Project`, never the literal
//! `"ORCA_GCE_PROJECT"`) or deserializes it from any map serde reads (a JSON or YAML document, a
//! database row's JSON column: strings, numbers and booleans as their text, null as absent, a list
//! or a map refused naming its key), and calls `orca::of_with(kind, owner, &settings)`; or it
//! deserializes a whole provider description, `orca::ProviderConfig`. `Settings` has no `Serialize`:
//! its values may be secrets, and nothing writes them out.
//!
//! ```
//! use orca_machines::settings::{Problems, Settings};
//! let s = Settings::new().with("ORCA_X_TOKEN", "hunter2").with("ORCA_X_REGION", "");
//! assert_eq!(s.get("ORCA_X_TOKEN"), Some("hunter2"));
//! assert_eq!(s.get("ORCA_X_REGION"), None, "an empty value is unset");
//! assert!(!format!("{s:?}").contains("hunter2"), "values are never printed");
//!
//! let mut p = Problems::new();
//! p.require(&s, "ORCA_X_REGION");
//! p.invalid("ORCA_X_PAGE_SIZE", "a number from 1 to 500");
//! let e = p.finish().unwrap_err();
//! assert_eq!(
//!     e.to_string(),
//!     "invalid settings (ORCA_X_REGION, ORCA_X_PAGE_SIZE): missing ORCA_X_REGION; ORCA_X_PAGE_SIZE: a number from 1 to 500"
//! );
//! ```

use std::collections::BTreeMap;

use crate::error::{Error, Result};

mod de;

/// Key/value settings with the environment's names. Values may be secrets: `Debug` shows the keys
/// only. An empty value counts as unset, as an empty environment variable does.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Settings {
    values: BTreeMap<String, String>,
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.values.keys()).finish()
    }
}

impl Settings {
    /// No settings.
    pub fn new() -> Self {
        Self::default()
    }

    /// These settings with `key` set to `value`.
    pub fn with(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.insert(key, value);
        self
    }

    /// Sets `key` to `value`.
    pub fn insert(&mut self, key: impl Into<String>, value: impl Into<String>) {
        self.values.insert(key.into(), value.into());
    }

    /// The value of `key`, or `None` when it is absent or empty.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.values
            .get(key)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    /// These settings with typed `key` set to `value`: `with_key(orca::gce::ConfigKey::Project,
    /// "lab")` rather than the variable's name as a literal.
    ///
    /// ```
    /// use orca_machines::kit::ClientKey;
    /// use orca_machines::Settings;
    /// let s = Settings::new().with_key(ClientKey::PollInterval, "2s");
    /// assert_eq!(s.get("ORCA_POLL_INTERVAL"), Some("2s"));
    /// assert_eq!(s.get_key(ClientKey::PollInterval), Some("2s"));
    /// ```
    pub fn with_key<K: SettingKey>(mut self, key: K, value: impl Into<String>) -> Self {
        self.insert_key(key, value);
        self
    }

    /// Sets typed `key` to `value`.
    pub fn insert_key<K: SettingKey>(&mut self, key: K, value: impl Into<String>) {
        self.insert(key.as_str(), value);
    }

    /// The value of typed `key`, or `None` when it is absent or empty.
    pub fn get_key<K: SettingKey>(&self, key: K) -> Option<&str> {
        self.get(key.as_str())
    }

    /// Removes `key`, answering its value.
    pub fn remove(&mut self, key: &str) -> Option<String> {
        self.values.remove(key)
    }

    /// The typed `keys` that this process's environment has (a credential a program takes from the
    /// environment while the rest of its settings come from elsewhere).
    pub fn from_env_of<K: SettingKey>(keys: impl IntoIterator<Item = K>) -> Self {
        Self::from_env(keys.into_iter().map(SettingKey::as_str))
    }

    /// Every key given (empty values included).
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.values.keys().map(String::as_str)
    }

    /// Whether no key is given.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The environment variables named in `keys` that this process has (as text; a variable that is
    /// not valid Unicode is kept as its lossy form, which the driver then refuses as invalid).
    pub fn from_env<'a>(keys: impl IntoIterator<Item = &'a str>) -> Self {
        keys.into_iter()
            .filter_map(|k| {
                std::env::var_os(k).map(|v| (k.to_string(), v.to_string_lossy().into_owned()))
            })
            .collect()
    }

    /// Refuses every key that is not one of `known` (a typo would otherwise be silently ignored),
    /// naming each and the known ones.
    pub fn check_known(&self, kind: &str, known: &[&str]) -> Result<()> {
        let unknown: Vec<&str> = self.keys().filter(|k| !known.contains(k)).collect();
        if unknown.is_empty() {
            return Ok(());
        }
        Err(Error::settings(
            unknown.iter().copied(),
            format!(
                "not a setting of the {kind} driver; its settings are {}",
                known.join(", ")
            ),
        ))
    }
}

impl<K: Into<String>, V: Into<String>> FromIterator<(K, V)> for Settings {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        Settings {
            values: iter
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        }
    }
}

impl<K: Into<String>, V: Into<String>> Extend<(K, V)> for Settings {
    fn extend<I: IntoIterator<Item = (K, V)>>(&mut self, iter: I) {
        self.values
            .extend(iter.into_iter().map(|(k, v)| (k.into(), v.into())));
    }
}

/// A driver's typed settings key (object_store's `AmazonS3ConfigKey` pattern): an enum whose names
/// are the environment variables' names, so that the same keys come from the environment
/// ([`Settings::from_env`]) or from a map.
///
/// ```
/// use orca_machines::settings::{SettingKey, Settings};
/// #[derive(Debug, Clone, Copy, PartialEq)]
/// enum Key { Token, Region }
/// impl SettingKey for Key {
///     const KIND: &'static str = "demo";
///     const ALL: &'static [Key] = &[Key::Token, Key::Region];
///     fn as_str(self) -> &'static str {
///         match self { Key::Token => "DEMO_TOKEN", Key::Region => "DEMO_REGION" }
///     }
///     fn is_secret(self) -> bool { matches!(self, Key::Token) }
/// }
/// assert_eq!(Key::parse("DEMO_REGION").unwrap(), Key::Region);
/// let e = Key::parse("DEMO_REGOIN").unwrap_err();
/// assert!(e.to_string().contains("not a setting of the demo driver"), "{e}");
/// assert!(Settings::new().with("DEMO_TOKEN", "t").check_keys::<Key>().is_ok());
/// ```
pub trait SettingKey: Copy + Sized + 'static {
    /// The driver kind (`hetzner`, `ec2`, ...), for messages.
    const KIND: &'static str;
    /// Every key.
    const ALL: &'static [Self];

    /// The key's name: the environment variable's.
    fn as_str(self) -> &'static str;

    /// Whether the key's value is a secret (never printed, never logged).
    fn is_secret(self) -> bool {
        false
    }

    /// Every key's name.
    fn names() -> Vec<&'static str> {
        Self::ALL.iter().map(|k| k.as_str()).collect()
    }

    /// The key named `name` (exactly, as the environment variable); an unknown name is
    /// [`Error::InvalidSettings`] naming it and the known ones.
    fn parse(name: &str) -> Result<Self> {
        Self::ALL
            .iter()
            .copied()
            .find(|k| k.as_str() == name)
            .ok_or_else(|| Error::settings([name], unknown_key_rule::<Self>()))
    }
}

/// Declares a driver's typed settings key: the enum (`#[non_exhaustive]`), its `ALL`, `as_str` (the
/// environment variable's name), `is_secret`, `names`, `Display`, `FromStr` and [`SettingKey`], from
/// one list of variants with their variable names (a variant marked `secret` is never printed).
///
/// ```
/// orca_machines::setting_keys! {
///     /// The demo driver's settings.
///     pub enum DemoKey for "demo" {
///         /// The API token.
///         Token = "DEMO_TOKEN" secret,
///         /// The region.
///         Region = "DEMO_REGION",
///     }
/// }
/// use orca_machines::settings::SettingKey;
/// assert_eq!(DemoKey::Token.as_str(), "DEMO_TOKEN");
/// assert!(DemoKey::Token.is_secret() && !DemoKey::Region.is_secret());
/// assert_eq!("DEMO_REGION".parse::<DemoKey>().unwrap(), DemoKey::Region);
/// assert_eq!(DemoKey::names(), ["DEMO_TOKEN", "DEMO_REGION"]);
/// assert_eq!(<DemoKey as SettingKey>::KIND, "demo");
/// ```
#[macro_export]
macro_rules! setting_keys {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident for $kind:literal {
            $( $(#[$vmeta:meta])* $variant:ident = $env:literal $($secret:ident)? ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[non_exhaustive]
        $vis enum $name {
            $( $(#[$vmeta])* $variant ),*
        }

        impl $name {
            /// Every key, in declaration order.
            pub const ALL: &'static [$name] = &[ $( $name::$variant ),* ];

            /// The key's name: the environment variable's.
            pub const fn as_str(self) -> &'static str {
                match self { $( $name::$variant => $env ),* }
            }

            /// Whether the key's value is a secret (never printed, never logged).
            pub const fn is_secret(self) -> bool {
                match self { $( $name::$variant => $crate::setting_keys!(@secret $($secret)?) ),* }
            }

            /// Every key's name, in [`Self::ALL`] order.
            pub fn names() -> ::std::vec::Vec<&'static str> {
                Self::ALL.iter().map(|k| k.as_str()).collect()
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl ::std::str::FromStr for $name {
            type Err = $crate::Error;

            /// The key named `s` (exactly, as the environment variable); an unknown name is
            /// an invalid-settings error naming it and the known ones.
            fn from_str(s: &str) -> $crate::Result<Self> {
                <$name as $crate::settings::SettingKey>::parse(s)
            }
        }

        impl $crate::settings::SettingKey for $name {
            const KIND: &'static str = $kind;
            const ALL: &'static [$name] = $name::ALL;
            fn as_str(self) -> &'static str {
                $name::as_str(self)
            }
            fn is_secret(self) -> bool {
                $name::is_secret(self)
            }
        }
    };
    (@secret secret) => { true };
    (@secret) => { false };
}

fn unknown_key_rule<K: SettingKey>() -> String {
    format!(
        "not a setting of the {} driver; its settings are {}, and the client settings {}",
        K::KIND,
        K::names().join(", "),
        crate::kit::ClientKey::names().join(", ")
    )
}

/// Whether `key` is one of `K`'s or a client key every driver takes ([`crate::kit::ClientKey`]).
fn is_known<K: SettingKey>(key: &str) -> bool {
    K::ALL.iter().any(|k| k.as_str() == key) || crate::kit::is_client_key(key)
}

impl Settings {
    /// Refuses every key that is neither one of `K`'s nor a client key (a typo would otherwise be
    /// silently ignored).
    pub fn check_keys<K: SettingKey>(&self) -> Result<()> {
        let unknown: Vec<&str> = self.keys().filter(|k| !is_known::<K>(k)).collect();
        if unknown.is_empty() {
            return Ok(());
        }
        Err(Error::settings(unknown, unknown_key_rule::<K>()))
    }

    /// `K`'s keys and the client keys that this process's environment has.
    pub fn from_env_keys<K: SettingKey>() -> Self {
        Self::from_env(K::names().into_iter().chain(crate::kit::ClientKey::names()))
    }
}

/// Collects every problem of a set of settings, so that one error names them all
/// ([`Error::InvalidSettings`]): the missing keys first, then each invalid one with its rule.
#[derive(Debug, Default)]
pub struct Problems {
    missing: Vec<String>,
    invalid: Vec<(String, String)>,
}

impl Problems {
    /// No problem yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records `key` as missing.
    pub fn missing(&mut self, key: impl Into<String>) {
        self.missing.push(key.into());
    }

    /// Records `key` as invalid: `why` says what it must be (never its value, which may be a
    /// secret).
    pub fn invalid(&mut self, key: impl Into<String>, why: impl Into<String>) {
        self.invalid.push((key.into(), why.into()));
    }

    /// The value of `key` in `settings`, recording it as missing when it is absent or empty.
    pub fn require<'a>(&mut self, settings: &'a Settings, key: &str) -> Option<&'a str> {
        let v = settings.get(key);
        if v.is_none() {
            self.missing(key);
        }
        v
    }

    /// The value of `key` parsed by `parse`, recording `why` as its rule when it does not parse;
    /// `None` when absent (not a problem) or invalid.
    pub fn parse<T>(
        &mut self,
        settings: &Settings,
        key: &str,
        why: &str,
        parse: impl FnOnce(&str) -> Option<T>,
    ) -> Option<T> {
        let v = settings.get(key)?;
        let parsed = parse(v.trim());
        if parsed.is_none() {
            self.invalid(key, why);
        }
        parsed
    }

    /// Records every key of `settings` that is not one of `K`'s as invalid, naming the known ones:
    /// so that a typo is named together with the other problems.
    pub fn unknown_keys<K: SettingKey>(&mut self, settings: &Settings) {
        for k in settings.keys() {
            if !is_known::<K>(k) {
                self.unknown_key::<K>(k);
            }
        }
    }

    /// Records `key` as not one of `K`'s, naming the known ones.
    pub fn unknown_key<K: SettingKey>(&mut self, key: impl Into<String>) {
        self.invalid(key, unknown_key_rule::<K>());
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.missing.is_empty() && self.invalid.is_empty()
    }

    /// `Ok` when nothing was recorded, else one [`Error::InvalidSettings`] naming every key.
    pub fn finish(self) -> Result<()> {
        if self.is_empty() {
            return Ok(());
        }
        let mut parts = Vec::new();
        if !self.missing.is_empty() {
            parts.push(format!("missing {}", self.missing.join(", ")));
        }
        for (k, why) in &self.invalid {
            parts.push(format!("{k}: {why}"));
        }
        let keys = self
            .missing
            .into_iter()
            .chain(self.invalid.into_iter().map(|(k, _)| k));
        Err(Error::settings(keys, parts.join("; ")))
    }
}

/// Parses a duration of whole seconds: plain seconds (`3600`), or a number with a unit as the
/// `humantime` crate reads it: `90s`, `30m`, `24h`, `2d`, `1w`, several together (`1h 30m`, `1h30m`)
/// and fractions that come to whole seconds (`1.5h`). Units: `s`/`sec`/`second(s)`, `m`/`min`/
/// `minute(s)`, `h`/`hr`/`hour(s)`, `d`/`day(s)`, `w`/`week(s)`, `M`/`month(s)` (30.44 days),
/// `y`/`year(s)` (365.25 days). A duration with a part of a second (`90.5s`, `250ms`), a negative
/// one, a bare unit or text that is not a duration is `None`.
pub fn parse_duration(s: &str) -> Option<std::time::Duration> {
    parse_any_duration(s).filter(|d| d.subsec_nanos() == 0)
}

/// [`parse_duration`] that keeps parts of a second (`250ms`, `1.5s`; also `us` and `ns`).
pub(crate) fn parse_any_duration(s: &str) -> Option<std::time::Duration> {
    let s = s.trim();
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        return s.parse().ok().map(std::time::Duration::from_secs);
    }
    humantime::parse_duration(s).ok()
}

/// Parses a boolean setting: `true`/`false`, `1`/`0`, `yes`/`no` (any case).
pub fn parse_bool(s: &str) -> Option<bool> {
    match s.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" => Some(true),
        "false" | "0" | "no" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_keys_are_named() {
        let s = Settings::new().with("A", "1").with("TYPO", "x");
        let e = s.check_known("demo", &["A", "B"]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid settings (TYPO): not a setting of the demo driver; its settings are A, B"
        );
        assert!(Settings::new()
            .with("A", "1")
            .check_known("demo", &["A"])
            .is_ok());
    }

    #[test]
    fn durations_and_booleans() {
        assert_eq!(parse_duration("90s").unwrap().as_secs(), 90);
        assert_eq!(parse_duration("30m").unwrap().as_secs(), 1800);
        assert_eq!(parse_duration("2d").unwrap().as_secs(), 172_800);
        assert_eq!(parse_duration("3600").unwrap().as_secs(), 3600);
        assert_eq!(parse_duration(" 24h ").unwrap().as_secs(), 86_400);
        assert_eq!(parse_duration("1h 30m").unwrap().as_secs(), 5400);
        assert_eq!(parse_duration("1.5h").unwrap().as_secs(), 5400);
        for bad in [
            "",
            "s",
            "90x",
            "-90s",
            "90.5s",
            "250ms",
            "1.5",
            "ten minutes",
        ] {
            assert_eq!(parse_duration(bad), None, "{bad:?}");
        }
        assert_eq!(parse_bool("Yes"), Some(true));
        assert_eq!(parse_bool("nope"), None);
    }

    #[test]
    fn problems_collect_everything() {
        let s = Settings::new().with("N", "x");
        let mut p = Problems::new();
        assert_eq!(
            p.parse(&s, "N", "a number", |v| v.parse::<u32>().ok()),
            None
        );
        p.require(&s, "M");
        let e = p.finish().unwrap_err();
        match e {
            Error::InvalidSettings { keys, .. } => assert_eq!(keys, ["M", "N"]),
            other => panic!("{other:?}"),
        }
    }
}
