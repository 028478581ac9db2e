//! The part of Compute Engine's list `filter` grammar the fake understands, as strictly as the
//! reference states it.
//!
//! From the discovery document: one expression, or several expressions "each separate expression
//! within parentheses", joined by whitespace (an implicit `AND`) or an explicit `AND`; each
//! expression is `field op value` in AIP-160's form, the value "a string, a number, or a boolean",
//! and `field:*` tests that a key is defined (`labels.owner:*`). Nested fields are dotted
//! (`scheduling.automaticRestart`, `labels.orca-pool`). A field segment is AIP-160's text: any
//! characters but whitespace, quotes, parentheses, `.`, `,`, `:` and the operators, so a hyphen
//! inside a label key is part of the key, while a leading `-` is a negation. Values are quoted
//! (`"..."` or `'...'`) or a single word of text.
//!
//! `OR`, `NOT`/`-` negation, comparisons (`<`, `>`, `<=`, `>=`) and the regular-expression forms
//! (`eq`, `ne`) answer an error naming what the fake does not support, so a driver that relies on
//! them fails its tests instead of being matched silently; so does anything outside the grammar (an
//! `AND` that joins nothing, an empty field segment, an unterminated quote, a value of several
//! words).

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
        // Whether the last thing read was `AND` (which must be followed by an expression).
        let mut joined = false;
        loop {
            rest = rest.trim_start();
            if rest.is_empty() {
                break;
            }
            if let Some(r) = strip_word(rest, "AND") {
                if conds.is_empty() || joined {
                    return Err(format!("AND joins nothing at {rest:?}"));
                }
                joined = true;
                rest = r;
                continue;
            }
            if strip_word(rest, "OR").is_some() {
                return Err("OR is not supported by the fake".into());
            }
            let Some(r) = rest.strip_prefix('(') else {
                return Err(format!("expected '(' at {rest:?}"));
            };
            let close = find_close(r).ok_or("unbalanced parentheses")?;
            conds.push(parse_cond(&r[..close])?);
            joined = false;
            rest = &r[close + 1..];
        }
        if joined {
            return Err("AND at the end joins nothing".into());
        }
        Ok(Filter(conds))
    }

    /// Whether `item` satisfies every condition.
    pub(crate) fn matches(&self, item: &Value) -> bool {
        self.0.iter().all(|c| c.matches(item))
    }
}

/// `s` after the keyword `word` followed by whitespace or `(`.
fn strip_word<'a>(s: &'a str, word: &str) -> Option<&'a str> {
    let r = s.strip_prefix(word)?;
    (r.starts_with(char::is_whitespace) || r.starts_with('(')).then_some(r)
}

fn find_close(s: &str) -> Option<usize> {
    let mut quote: Option<char> = None;
    for (i, ch) in s.char_indices() {
        match (ch, quote) {
            ('"' | '\'', None) => quote = Some(ch),
            (c, Some(q)) if c == q => quote = None,
            (')', None) => return Some(i),
            _ => {}
        }
    }
    None
}

/// Characters that end a field segment or an unquoted value (AIP-160's text excludes them).
const NOT_TEXT: &str = "=!<>:().,\"'";

fn parse_cond(s: &str) -> Result<Cond, String> {
    let s = s.trim();
    if s.starts_with('-') || strip_word(s, "NOT").is_some() {
        return Err("negation is not supported by the fake".into());
    }
    let end = s
        .find(|c: char| c.is_whitespace() || "=!:<>".contains(c))
        .ok_or_else(|| format!("no operator in {s:?}"))?;
    let field = &s[..end];
    let path: Vec<String> = field.split('.').map(str::to_string).collect();
    let bad_segment = |p: &String| {
        p.is_empty() || p.starts_with('-') || p.contains(|c: char| NOT_TEXT.contains(c))
    };
    if path.iter().any(bad_segment) {
        return Err(format!("bad field {field:?} in {s:?}"));
    }
    let rest = s[end..].trim_start();
    if rest.starts_with("eq ") || rest.starts_with("ne ") {
        return Err("regular-expression filters are not supported by the fake".into());
    }
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
    let quoted = |q: char| {
        let inner = value.strip_prefix(q)?;
        Some(
            inner
                .strip_suffix(q)
                .filter(|v| !v.contains(q))
                .map(str::to_string)
                .ok_or_else(|| format!("unterminated quote in {s:?}")),
        )
    };
    let (op, value) = if op == Op::Has && value == "*" {
        (Op::Defined, String::new())
    } else if let Some(v) = quoted('"').or_else(|| quoted('\'')) {
        (op, v?)
    } else {
        let word = !value.is_empty()
            && !value.contains(char::is_whitespace)
            && !value.contains(|c: char| NOT_TEXT.contains(c) || c == '*');
        if !word {
            return Err(format!("bad value in {s:?}"));
        }
        (op, value.to_string())
    };
    Ok(Cond { path, op, value })
}

fn lookup<'a>(item: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(item, |v, p| v.get(p))
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

    #[test]
    fn only_the_documented_grammar_is_accepted() {
        let vm = json!({"name": "a", "labels": {"orca-pool": "lab"}});
        // A hyphen inside a label key is part of the key; either quote; a single word unquoted.
        for good in [
            r#"labels.orca-pool = "lab""#,
            "labels.orca-pool = 'lab'",
            "labels.orca-pool = lab",
            r#"(labels.orca-pool = "lab")(name = "a")"#,
            r#"(name = "a") AND (labels.orca-pool:*)"#,
        ] {
            let f = Filter::parse(good).unwrap_or_else(|e| panic!("{good}: {e}"));
            assert!(f.matches(&vm), "{good}");
        }
        for bad in [
            r#"labels.-orca = "lab""#,
            r#"labels..orca-pool = "lab""#,
            r#"(name = "a") AND"#,
            r#"AND (name = "a")"#,
            r#"(name = "a") AND AND (name = "a")"#,
            r#"(name = "a" name = "b")"#,
            r#"name = "a"#,
            r#"name = "a"b""#,
            "name = a:b",
            "name = a*",
            r#"name eq "a""#,
            r#"(name = "a") (labels.x = "b") OR (name = "c")"#,
            r#"labels.orca"pool = "lab""#,
        ] {
            assert!(Filter::parse(bad).is_err(), "{bad}");
        }
    }
}
