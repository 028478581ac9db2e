//! Label selectors, as the reference defines them: `k=v`, `k==v`, `k!=v`, `k`, `!k`, `k in (a,b)`,
//! `k notin (a,b)`, comma-separated.

use std::collections::BTreeMap;

use super::{invalid, param, ApiError};

/// One term of a label selector.
#[derive(Debug, PartialEq)]
pub(super) enum Term {
    Eq(String, String),
    Ne(String, String),
    Has(String),
    HasNot(String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
}

pub(super) fn valid_key(k: &str) -> bool {
    // Hetzner's rule (as Kubernetes'): an optional prefix of up to 253 characters and a `/`, then a
    // name of 1 to 63; each starts and ends with a letter or digit, with `-`, `_` and `.` between.
    let part = |p: &str, max: usize| {
        let b = p.as_bytes();
        !b.is_empty()
            && b.len() <= max
            && b.first().is_some_and(u8::is_ascii_alphanumeric)
            && b.last().is_some_and(u8::is_ascii_alphanumeric)
            && b.iter()
                .all(|c| c.is_ascii_alphanumeric() || b"-_.".contains(c))
    };
    match k.rsplit_once('/') {
        Some((prefix, name)) => part(prefix, 253) && part(name, 63),
        None => part(k, 63),
    }
}

pub(super) fn valid_value(v: &str) -> bool {
    // Empty, or up to 63 that start and end with a letter or digit, with `-`, `_` and `.` between.
    let b = v.as_bytes();
    b.is_empty()
        || (b.len() <= 63
            && b.first().is_some_and(u8::is_ascii_alphanumeric)
            && b.last().is_some_and(u8::is_ascii_alphanumeric)
            && b.iter()
                .all(|c| c.is_ascii_alphanumeric() || b"-_.".contains(c)))
}

/// Parses a label selector: comma-separated terms, commas inside `( )` belonging to a set.
fn parse_selector(sel: &str) -> Result<Vec<Term>, String> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, c) in sel.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&sel[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        if depth < 0 {
            return Err("unbalanced parentheses".into());
        }
    }
    if depth != 0 {
        return Err("unbalanced parentheses".into());
    }
    parts.push(&sel[start..]);
    let bad = |p: &str| format!("invalid label selector term {p:?}");
    let mut terms = Vec::new();
    for raw in parts {
        let p = raw.trim();
        let term = if let Some(k) = p.strip_prefix('!') {
            Term::HasNot(k.trim().to_string())
        } else if let Some((k, v)) = p.split_once("!=") {
            Term::Ne(k.trim().into(), v.trim().into())
        } else if let Some((k, v)) = p.split_once("==") {
            Term::Eq(k.trim().into(), v.trim().into())
        } else if let Some((k, v)) = p.split_once('=') {
            Term::Eq(k.trim().into(), v.trim().into())
        } else if let Some((k, rest)) = p.split_once(" notin ") {
            Term::NotIn(k.trim().into(), set(rest).ok_or_else(|| bad(p))?)
        } else if let Some((k, rest)) = p.split_once(" in ") {
            Term::In(k.trim().into(), set(rest).ok_or_else(|| bad(p))?)
        } else {
            Term::Has(p.to_string())
        };
        let ok = match &term {
            Term::Eq(k, v) | Term::Ne(k, v) => valid_key(k) && valid_value(v),
            Term::Has(k) | Term::HasNot(k) => valid_key(k),
            Term::In(k, vs) | Term::NotIn(k, vs) => {
                valid_key(k) && vs.iter().all(|v| valid_value(v))
            }
        };
        if !ok {
            return Err(bad(p));
        }
        terms.push(term);
    }
    Ok(terms)
}

fn set(rest: &str) -> Option<Vec<String>> {
    let inner = rest.trim().strip_prefix('(')?.strip_suffix(')')?;
    Some(inner.split(',').map(|v| v.trim().to_string()).collect())
}

pub(super) fn matches(terms: &[Term], labels: &BTreeMap<String, String>) -> bool {
    terms.iter().all(|t| match t {
        Term::Eq(k, v) => labels.get(k) == Some(v),
        Term::Ne(k, v) => labels.get(k) != Some(v),
        Term::Has(k) => labels.contains_key(k),
        Term::HasNot(k) => !labels.contains_key(k),
        Term::In(k, vs) => labels.get(k).is_some_and(|x| vs.contains(x)),
        Term::NotIn(k, vs) => labels.get(k).is_none_or(|x| !vs.contains(x)),
    })
}

pub(super) fn selector(q: &[(String, String)]) -> Result<Option<Vec<Term>>, ApiError> {
    match param(q, "label_selector") {
        None => Ok(None),
        Some(s) => parse_selector(s).map(Some).map_err(invalid),
    }
}

/// What a label selector test needs: parse and match without a server.
pub fn selector_matches(selector: &str, labels: &[(&str, &str)]) -> Result<bool, String> {
    let terms = parse_selector(selector)?;
    let labels: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Ok(matches(&terms, &labels))
}
