//! The part of Compute Engine's list `filter` grammar the fake understands.
//!
//! From the discovery document: one expression, or several parenthesized expressions joined by
//! whitespace (an implicit `AND`) or an explicit `AND`; each expression is `field op value` with
//! `op` one of `=`, `!=` and `:`, and `field:*` tests that a key is defined (`labels.owner:*`).
//! Nested fields are dotted (`labels.orca-pool`, `scheduling.automaticRestart`). Values may be
//! quoted. `OR`, `NOT`/`-` negation, comparisons (`<`, `>`) and the regular-expression forms (`eq`,
//! `ne`) answer an error naming what the fake does not support, so a driver that relies on them
//! fails its tests instead of being matched silently.

use serde_json::Value;

/// One comparison.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cond {
    path: Vec<String>,
    op: Op,
    value: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Eq,
    Ne,
    Has,
    Defined,
}

/// A parsed filter: every condition must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Filter(Vec<Cond>);

impl Filter {
    /// Parses `s`; an empty filter matches everything.
    pub(crate) fn parse(s: &str) -> Result<Filter, String> {
        let s = s.trim();
        if s.is_empty() {
            return Ok(Filter::default());
        }
        if !s.starts_with('(') {
            return Ok(Filter(vec![parse_cond(s)?]));
        }
        let mut conds = Vec::new();
        let mut rest = s;
        loop {
            rest = rest.trim_start();
            if rest.is_empty() {
                break;
            }
            if let Some(r) = rest.strip_prefix("AND ") {
                rest = r;
                continue;
            }
            if rest.starts_with("OR ") {
                return Err("OR is not supported by the fake".into());
            }
            let Some(r) = rest.strip_prefix('(') else {
                return Err(format!("expected '(' at {rest:?}"));
            };
            let close = find_close(r).ok_or("unbalanced parentheses")?;
            conds.push(parse_cond(&r[..close])?);
            rest = &r[close + 1..];
        }
        Ok(Filter(conds))
    }

    /// Whether `item` satisfies every condition.
    pub(crate) fn matches(&self, item: &Value) -> bool {
        self.0.iter().all(|c| c.matches(item))
    }
}

fn find_close(s: &str) -> Option<usize> {
    let mut quoted = false;
    for (i, ch) in s.char_indices() {
        match ch {
            '"' => quoted = !quoted,
            ')' if !quoted => return Some(i),
            _ => {}
        }
    }
    None
}

fn parse_cond(s: &str) -> Result<Cond, String> {
    let s = s.trim();
    if s.starts_with('-') || s.starts_with("NOT ") {
        return Err("negation is not supported by the fake".into());
    }
    let end = s
        .find(|c: char| c.is_whitespace() || "=!:<>".contains(c))
        .ok_or_else(|| format!("no operator in {s:?}"))?;
    let field = &s[..end];
    if field.is_empty() {
        return Err(format!("no field in {s:?}"));
    }
    let rest = s[end..].trim_start();
    let (op, value) = if let Some(v) = rest.strip_prefix("!=") {
        (Op::Ne, v)
    } else if let Some(v) = rest.strip_prefix('=') {
        (Op::Eq, v)
    } else if let Some(v) = rest.strip_prefix(':') {
        (Op::Has, v)
    } else {
        return Err(format!("unsupported operator in {s:?}"));
    };
    let value = value.trim();
    let (op, value) = if op == Op::Has && value == "*" {
        (Op::Defined, String::new())
    } else if let Some(q) = value.strip_prefix('"') {
        let q = q
            .strip_suffix('"')
            .ok_or_else(|| format!("unterminated quote in {s:?}"))?;
        (op, q.to_string())
    } else {
        if value.is_empty() || value.contains(char::is_whitespace) {
            return Err(format!("bad value in {s:?}"));
        }
        (op, value.to_string())
    };
    Ok(Cond {
        path: field.split('.').map(str::to_string).collect(),
        op,
        value,
    })
}

fn lookup<'a>(item: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut v = item;
    for p in path {
        v = v.get(p)?;
    }
    Some(v)
}

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

impl Cond {
    fn matches(&self, item: &Value) -> bool {
        let found = lookup(item, &self.path);
        match self.op {
            Op::Defined => found.is_some_and(|v| !v.is_null()),
            Op::Eq => found.is_some_and(|v| text(v) == self.value),
            Op::Ne => found.is_none_or(|v| text(v) != self.value),
            Op::Has => match found {
                Some(Value::Array(a)) => a.iter().any(|v| text(v) == self.value),
                Some(v) => text(v) == self.value,
                None => false,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_filters() {
        let vm = json!({"name": "a", "labels": {"orca": "pool", "orca-pool": "lab"}, "tags": {"items": ["x"]}});
        let f = Filter::parse(r#"(labels.orca = "pool") (labels.orca-pool = "lab")"#).unwrap();
        assert!(f.matches(&vm));
        let f = Filter::parse(r#"(labels.orca = "pool") AND (labels.orca-owner = "s1")"#).unwrap();
        assert!(!f.matches(&vm));
        assert!(Filter::parse("labels.orca:*").unwrap().matches(&vm));
        assert!(!Filter::parse("labels.orca-owner:*").unwrap().matches(&vm));
        assert!(Filter::parse("name != b").unwrap().matches(&vm));
        assert!(Filter::parse("tags.items:x").unwrap().matches(&vm));
        assert!(Filter::parse("").unwrap().matches(&vm));
    }

    #[test]
    fn unsupported_forms_are_errors() {
        for bad in [
            "(a = 1) OR (b = 2)",
            "-labels.orca-owner:*",
            "NOT labels.x:*",
            "name eq .*x",
            "(a = 1",
            "a < 3",
        ] {
            assert!(Filter::parse(bad).is_err(), "{bad}");
        }
    }
}
