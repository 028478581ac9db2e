//! Reading a JSON object field by field, so that every validation error names its field (and never
//! quotes a value that might be a secret). `null` counts as absent.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use orca::spec::shown;

use crate::error::{Error, Result};

/// How many unknown keys an error names; the rest are counted.
const MAX_NAMED: usize = 5;

/// The fields of one JSON object, `prefix` naming where it sits (`""`, `"profile."`).
#[derive(Debug)]
pub struct Fields<'a> {
    map: &'a Map<String, Value>,
    prefix: String,
}

impl<'a> Fields<'a> {
    /// The fields of `v`, which must be an object (named `what`) whose keys are all in `allowed`.
    pub fn new(v: &'a Value, what: &str, prefix: &str, allowed: &[&str]) -> Result<Self> {
        let Value::Object(map) = v else {
            let field = prefix.trim_end_matches('.');
            return Err(Error::invalid(
                if field.is_empty() { what } else { field },
                "a JSON object",
            ));
        };
        let mut unknown: Vec<&str> = map
            .keys()
            .map(String::as_str)
            .filter(|k| !allowed.contains(k))
            .collect();
        if let Some(first) = unknown.first().copied() {
            unknown.sort_unstable();
            let named: Vec<String> = unknown.iter().take(MAX_NAMED).map(|k| shown(k)).collect();
            let more = match unknown.len().saturating_sub(MAX_NAMED) {
                0 => String::new(),
                n => format!(" and {n} more"),
            };
            return Err(Error::invalid(
                format!("{prefix}{}", shown(first)),
                format!(
                    "unknown field{} {}{more}; the fields of {what} are {}",
                    if unknown.len() > 1 { "s" } else { "" },
                    named.join(", "),
                    allowed.join(", ")
                ),
            ));
        }
        Ok(Fields {
            map,
            prefix: prefix.to_string(),
        })
    }

    /// The full name of `key`.
    pub fn name(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }

    /// An optional string.
    pub fn str(&self, key: &str) -> Result<Option<String>> {
        match self.raw(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(Error::invalid(self.name(key), "a string")),
        }
    }

    /// A required string.
    pub fn req_str(&self, key: &str) -> Result<String> {
        self.str(key)?
            .ok_or_else(|| Error::invalid(self.name(key), "required"))
    }

    /// An optional boolean.
    pub fn bool(&self, key: &str) -> Result<Option<bool>> {
        match self.raw(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(_) => Err(Error::invalid(self.name(key), "true or false")),
        }
    }

    /// An optional whole number from `min` to `max`.
    pub fn int(&self, key: &str, min: u64, max: u64) -> Result<Option<u64>> {
        match self.raw(key).map(Value::as_u64) {
            None => Ok(None),
            Some(Some(n)) if (min..=max).contains(&n) => Ok(Some(n)),
            Some(_) => Err(Error::invalid(
                self.name(key),
                format!("a whole number from {min} to {max}"),
            )),
        }
    }

    /// An optional list of strings.
    pub fn str_list(&self, key: &str) -> Result<Option<Vec<String>>> {
        match self.raw(key) {
            None => Ok(None),
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(i, v)| match v {
                    Value::String(s) => Ok(s.clone()),
                    _ => Err(Error::invalid(
                        format!("{}[{i}]", self.name(key)),
                        "a string",
                    )),
                })
                .collect::<Result<Vec<_>>>()
                .map(Some),
            Some(_) => Err(Error::invalid(self.name(key), "a list of strings")),
        }
    }

    /// An optional map of strings to strings.
    pub fn str_map(&self, key: &str) -> Result<Option<BTreeMap<String, String>>> {
        match self.raw(key) {
            None => Ok(None),
            Some(Value::Object(m)) => m
                .iter()
                .map(|(k, v)| match v {
                    Value::String(s) => Ok((k.clone(), s.clone())),
                    _ => Err(Error::invalid(
                        format!("{}.{k}", self.name(key)),
                        "a string",
                    )),
                })
                .collect::<Result<BTreeMap<_, _>>>()
                .map(Some),
            Some(_) => Err(Error::invalid(self.name(key), "an object of string values")),
        }
    }

    /// The raw value of `key` (`None` for `null`).
    pub fn raw(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unknown_and_mistyped_fields_are_named() {
        let v = json!({"name": "a", "cuont": 2});
        let e = Fields::new(&v, "params", "", &["name", "count"]).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("cuont"));
        let v = json!({"count": "2", "labels": {"a": 1}});
        let f = Fields::new(&v, "profile", "profile.", &["count", "labels"]).unwrap();
        assert_eq!(
            f.int("count", 1, 5).unwrap_err().field.as_deref(),
            Some("profile.count")
        );
        assert_eq!(
            f.str_map("labels").unwrap_err().field.as_deref(),
            Some("profile.labels.a")
        );
        let e = Fields::new(&json!([1]), "params", "", &[]).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("params"));
    }

    /// A request's own words come back in its error, the log and the audit trail: a huge or
    /// unprintable key is cut and escaped there, never repeated whole.
    #[test]
    fn a_huge_or_unprintable_unknown_key_is_named_cut_and_escaped() {
        let huge = "k".repeat(1 << 20);
        let v = json!({ huge.clone(): 1, "b\u{1b}[2Jad": 2 });
        let e = Fields::new(&v, "params", "", &["name"]).unwrap_err();
        let field = e.field.clone().unwrap();
        assert!(field.len() <= 100, "{}", field.len());
        assert!(e.message.len() <= 400, "{}", e.message.len());
        assert!(e.message.contains("1048576 bytes"), "{}", e.message);
        assert!(!e.message.contains('\u{1b}'), "{}", e.message);
        assert!(
            e.message.contains("the fields of params are name"),
            "{}",
            e.message
        );
    }
}
