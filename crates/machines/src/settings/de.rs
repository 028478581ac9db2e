//! [`Settings`] from any map that serde reads: a JSON or YAML document, a database row's JSON column,
//! a `HashMap`.
//!
//! A value is a string, a number or a boolean, kept as its text (`30`, `true`, `1.5`); null is an
//! absent setting; a list or a map is refused naming its key. No error quotes a value (a value may
//! be a secret): errors name keys and kinds only.

use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Unexpected};

use super::Settings;

/// One setting's value as read.
enum Value {
    Text(String),
    Absent,
    /// A list, a map or bytes: what no setting is. Holds the kind, for the message.
    Nested(&'static str),
}

struct ValueVisitor;

/// Visitor methods for values of the given types, each answering `$answer` of the value `v`.
macro_rules! visit {
    ($out:ty: $($visit:ident($t:ty))* => |$self:ident, $v:ident| $answer:expr) => {$(
        fn $visit<E: de::Error>($self, $v: $t) -> Result<$out, E> {
            $answer
        }
    )*};
}

impl<'de> de::Visitor<'de> for ValueVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a string, a number, a boolean or null")
    }

    // Kept as its text.
    visit! { Value:
        visit_str(&str) visit_string(String) visit_bool(bool) visit_i64(i64) visit_u64(u64)
        visit_i128(i128) visit_u128(u128) visit_f64(f64)
        => |self, v| Ok(Value::Text(v.to_string()))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Absent)
    }

    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Absent)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }

    fn visit_bytes<E: de::Error>(self, _: &[u8]) -> Result<Value, E> {
        Ok(Value::Nested("bytes"))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Value::Nested("a list"))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Value::Nested("a map"))
    }
}

impl<'de> Deserialize<'de> for Value {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ValueVisitor)
    }
}

struct SettingsVisitor;

const EXPECTING: &str = "a map of settings, each a string, a number, a boolean or null";

impl SettingsVisitor {
    /// The refusal of a whole input that is not a map, naming its kind, never its value.
    fn not_a_map<E: de::Error>(&self, kind: &'static str) -> E {
        E::invalid_type(Unexpected::Other(kind), self)
    }
}

impl<'de> de::Visitor<'de> for SettingsVisitor {
    type Value = Settings;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(EXPECTING)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Settings, A::Error> {
        let mut s = Settings::new();
        let mut seen = std::collections::BTreeSet::new();
        while let Some(key) = map.next_key::<String>()? {
            let value = map.next_value::<Value>()?;
            if !seen.insert(key.clone()) {
                return Err(de::Error::custom(format!(
                    "the setting {key} is given twice"
                )));
            }
            match value {
                Value::Text(v) => s.insert(key, v),
                Value::Absent => {}
                Value::Nested(kind) => {
                    return Err(de::Error::custom(format!(
                        "the setting {key} is {kind}; a setting is a string, a number, a boolean or null"
                    )))
                }
            }
        }
        Ok(s)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Settings, E> {
        Ok(Settings::new())
    }

    fn visit_none<E: de::Error>(self) -> Result<Settings, E> {
        Ok(Settings::new())
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Settings, D::Error> {
        d.deserialize_any(self)
    }

    visit! { Settings: visit_str(&str) => |self, _v| Err(self.not_a_map("a string")) }
    visit! { Settings: visit_bool(bool) => |self, _v| Err(self.not_a_map("a boolean")) }
    visit! { Settings:
        visit_i64(i64) visit_u64(u64) visit_f64(f64) => |self, _v| Err(self.not_a_map("a number"))
    }
    visit! { Settings: visit_bytes(&[u8]) => |self, _v| Err(self.not_a_map("bytes")) }

    fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<Settings, A::Error> {
        Err(self.not_a_map("a list"))
    }
}

/// Settings from a map: each value a string, a number or a boolean (kept as its text), null for an
/// absent setting; a list or a map is refused naming its key, a key given twice too. A whole input
/// of null is no settings. Errors never quote a value.
///
/// ```
/// use orca_machines::Settings;
/// let s: Settings = serde_json::from_str(
///     r#"{"ORCA_GCE_PROJECT": "lab", "ORCA_GCE_DISK_GB": 30, "ORCA_GCE_PUBLIC_IP": false, "ORCA_GCE_ZONE": null}"#,
/// )?;
/// assert_eq!(s.get("ORCA_GCE_DISK_GB"), Some("30"));
/// assert_eq!(s.get("ORCA_GCE_PUBLIC_IP"), Some("false"));
/// assert_eq!(s.keys().count(), 3, "null is an absent setting");
///
/// let e = serde_json::from_str::<Settings>(r#"{"HCLOUD_TOKEN": {"value": "hunter2"}}"#).unwrap_err();
/// assert!(e.to_string().contains("the setting HCLOUD_TOKEN is a map"), "{e}");
/// assert!(!e.to_string().contains("hunter2"));
/// # Ok::<(), serde_json::Error>(())
/// ```
impl<'de> Deserialize<'de> for Settings {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(SettingsVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kit::ClientKey;
    use serde_json::json;

    fn from(v: serde_json::Value) -> Result<Settings, String> {
        Settings::deserialize(v).map_err(|e| e.to_string())
    }

    #[test]
    fn strings_numbers_and_booleans_are_their_text_and_null_is_absent() {
        let s: Settings = serde_json::from_str(
            r#"{"A": "x", "B": 30, "C": -2, "D": 1.5, "E": true, "F": null, "G": ""}"#,
        )
        .unwrap();
        assert_eq!(
            [s.get("A"), s.get("B"), s.get("C"), s.get("D"), s.get("E")],
            [Some("x"), Some("30"), Some("-2"), Some("1.5"), Some("true")]
        );
        assert_eq!(s.get("F"), None);
        assert_eq!(s.keys().collect::<Vec<_>>(), ["A", "B", "C", "D", "E", "G"]);
        assert_eq!(
            s.get("G"),
            None,
            "an empty value is unset, as in the environment"
        );
        assert_eq!(from(json!(null)).unwrap(), Settings::new());
    }

    /// What a YAML document gives serde (a map of scalars, and a nested value a user wrote by
    /// mistake), through serde_json's value: the same shapes.
    #[test]
    fn a_nested_value_is_refused_naming_its_key_and_never_its_value() {
        for (nested, kind) in [
            (json!({"secret": "hunter2"}), "a map"),
            (json!(["hunter2"]), "a list"),
        ] {
            let e = from(json!({"ORCA_HCLOUD_IMAGE": "ubuntu-24.04", "HCLOUD_TOKEN": nested}))
                .unwrap_err();
            assert!(
                e.contains(&format!("the setting HCLOUD_TOKEN is {kind}")),
                "{e}"
            );
            assert!(!e.contains("hunter2"), "{e}");
        }
    }

    #[test]
    fn an_input_that_is_no_map_is_refused_without_its_value() {
        for v in [
            json!("hunter2"),
            json!(4242),
            json!(true),
            json!(["hunter2"]),
        ] {
            let e = from(v.clone()).unwrap_err();
            assert!(e.contains("expected a map of settings"), "{e}");
            assert!(!e.contains("hunter2") && !e.contains("4242"), "{e}");
        }
    }

    #[test]
    fn a_key_given_twice_is_refused() {
        let e = serde_json::from_str::<Settings>(r#"{"A": "1", "A": "2"}"#).unwrap_err();
        assert!(
            e.to_string().contains("the setting A is given twice"),
            "{e}"
        );
    }

    #[test]
    fn any_map_serde_reads_will_do() {
        let row = std::collections::BTreeMap::from([
            ("ORCA_GCE_PROJECT".to_string(), "lab".to_string()),
            ("ORCA_MAX_RETRIES".to_string(), "2".to_string()),
        ]);
        let d =
            serde::de::value::MapDeserializer::<_, serde::de::value::Error>::new(row.into_iter());
        let s = Settings::deserialize(d).unwrap();
        assert_eq!(s.get("ORCA_GCE_PROJECT"), Some("lab"));
        assert_eq!(s.get_key(ClientKey::MaxRetries), Some("2"));
    }

    #[test]
    fn debug_shows_keys_never_values() {
        let s = from(json!({"HCLOUD_TOKEN": "hunter2", "ORCA_MAX_RETRIES": 7})).unwrap();
        let d = format!("{s:?} {s:#?}");
        assert!(
            d.contains("HCLOUD_TOKEN") && d.contains("ORCA_MAX_RETRIES"),
            "{d}"
        );
        assert!(!d.contains("hunter2") && !d.contains('7'), "{d}");
    }

    #[test]
    fn typed_keys_set_get_and_read_the_environment() {
        let mut s = Settings::new().with_key(ClientKey::RequestTimeout, "30s");
        s.insert_key(ClientKey::MaxRetries, "3");
        assert_eq!(s.get("ORCA_REQUEST_TIMEOUT"), Some("30s"));
        assert_eq!(s.get_key(ClientKey::MaxRetries), Some("3"));
        assert_eq!(s.remove("ORCA_MAX_RETRIES").as_deref(), Some("3"));
        assert_eq!(s.get_key(ClientKey::MaxRetries), None);
        // A key this process surely does not have is left out.
        let e = Settings::from_env_of([ClientKey::RetryTimeout]);
        assert_eq!(
            e.get_key(ClientKey::RetryTimeout).map(str::to_string),
            std::env::var("ORCA_RETRY_TIMEOUT")
                .ok()
                .filter(|v| !v.is_empty())
        );
    }
}
