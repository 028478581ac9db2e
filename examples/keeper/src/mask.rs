//! The secret filter of every output channel: a value whose key
//! contains `token` (any case) is replaced by [`MASK`].
//!
//! Two forms: [`mask_json`] for structured output (REST answers, step output, audit payloads, logged
//! parameters) and [`mask_text`] for free text (error messages, log lines), where a `key=value`,
//! `key: value` or `"key": "value"` whose key contains `token` loses its value.
//!
//! The one exemption is the step output's `hosts[].bootstrap_token` ([`mask_step_output`]): the plain
//! one-time token the cloud-init flow must hand to the VM. The exemption is by that exact path, not by
//! the key's name, so a `bootstrap_token` anywhere else (an attribute, a label, an error, an audit
//! payload, a REST answer of the registries) is masked like any other.
//!
//! ```
//! use keeper::mask::{mask_json, mask_text, MASK};
//! let mut v = serde_json::json!({"name": "web", "labels": {"join-token": "abc"}, "Token": 1});
//! mask_json(&mut v);
//! assert_eq!(v["labels"]["join-token"], MASK);
//! assert_eq!(v["Token"], MASK);
//! assert_eq!(v["name"], "web");
//! assert_eq!(mask_text("refused: api_token=s3cret, retry"), "refused: api_token=***, retry");
//! ```

use serde_json::Value;

/// What a masked value is replaced by.
pub const MASK: &str = "***";

/// The fragment of a key name that marks its value as a secret.
pub const SECRET_FRAGMENT: &str = "token";

/// Whether the value of `key` is a secret (its name contains `token`, in any case).
pub fn is_secret_key(key: &str) -> bool {
    key.to_ascii_lowercase().contains(SECRET_FRAGMENT)
}

/// Masks, in place, every value whose key contains `token`, at any depth; string values are also
/// passed through [`mask_text`].
pub fn mask_json(v: &mut Value) {
    match v {
        Value::Object(map) => map.iter_mut().for_each(|(k, val)| mask_entry(k, val)),
        Value::Array(items) => items.iter_mut().for_each(mask_json),
        Value::String(s) => *s = mask_text(s),
        _ => {}
    }
}

/// Masks the value of key `k`: whole when the key marks a secret, else as [`mask_json`] does.
fn mask_entry(k: &str, val: &mut Value) {
    if is_secret_key(k) {
        *val = Value::String(MASK.to_string());
    } else {
        mask_json(val);
    }
}

/// A masked copy of `v` ([`mask_json`]).
pub fn masked(v: &Value) -> Value {
    let mut v = v.clone();
    mask_json(&mut v);
    v
}

/// Masks a step's output: everything as [`mask_json`] does, except the plain one-time tokens at the
/// exact path `hosts[].bootstrap_token`, which the step output exists to deliver.
pub fn mask_step_output(v: &mut Value) {
    let Value::Object(map) = v else {
        mask_json(v);
        return;
    };
    for (k, val) in map.iter_mut() {
        match val {
            Value::Array(hosts) if k == "hosts" => {
                for host in hosts.iter_mut() {
                    let Value::Object(h) = host else {
                        mask_json(host);
                        continue;
                    };
                    h.iter_mut()
                        .filter(|(hk, hv)| !(*hk == "bootstrap_token" && hv.is_string()))
                        .for_each(|(hk, hv)| mask_entry(hk, hv));
                }
            }
            _ => mask_entry(k, val),
        }
    }
}

fn is_key_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')
}

fn is_quote(c: char) -> bool {
    c == '"' || c == '\''
}

/// Masks the values of `key=value`, `key: value` and `"key": "value"` pairs whose key contains
/// `token` in free text (error messages, log lines). The value may be quoted (`"..."`, `'...'`, or
/// `\"...\"` inside a quoted string) or wrapped the way Rust's `Debug` prints it (`String("...")`,
/// `Some("...")`); unquoted, it ends at white space, a quote, `,`, `;`, `&`, `}`, `]` or `)`.
///
/// A message that names a field keeps its words: in `api_token: required` or `profile.labels.x-token:
/// a string` (a bare key, `:`, and a bare word of letters only) the word is the message's, not a
/// value. Every other form is a value, masked: `=`, a quoted key or value, a `Debug` wrapper, or a
/// bare word with a digit or a sign (`HCLOUD_TOKEN: abc123`).
pub fn mask_text(s: &str) -> String {
    if !is_secret_key(s) {
        return s.to_string();
    }
    let chars: Vec<char> = s.chars().collect();
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    while i < chars.len() {
        if !is_key_char(chars[i]) {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        // A word of key characters.
        let start = i;
        i += chars[i..].iter().take_while(|c| is_key_char(**c)).count();
        out.extend(&chars[start..i]);
        let word: String = chars[start..i].iter().collect();
        if !is_secret_key(&word) {
            continue;
        }
        if let Some((from, to)) = value_after(&chars, start, i) {
            out.extend(&chars[i..from]);
            out.push_str(MASK);
            i = to;
        }
    }
    out
}

/// The value of the pair whose key spans `key..at`: its first and past-the-end positions, or `None`
/// when no `=` or `:` follows the key, the value is empty, or it is a word of the message
/// ([`mask_text`]).
fn value_after(chars: &[char], key: usize, at: usize) -> Option<(usize, usize)> {
    let at_char = |j: usize| chars.get(j).copied();
    let mut j = at;
    let mut quoted = key > 0 && is_quote(chars[key - 1]);
    // The key's closing quote, escaped or not.
    if at_char(j) == Some('\\') && at_char(j + 1).is_some_and(is_quote) {
        j += 2;
        quoted = true;
    } else if at_char(j).is_some_and(is_quote) {
        j += 1;
        quoted = true;
    }
    j += chars[j..].iter().take_while(|c| **c == ' ').count();
    let colon = match at_char(j) {
        Some(':') => true,
        Some('=') => false,
        _ => return None,
    };
    j += 1;
    j += chars[j..].iter().take_while(|c| **c == ' ').count();
    // `Debug` wrappers: `String(`, `Some(`, `Number(`, ...
    while let Some(open) = debug_wrapper(chars, j) {
        j = open;
        quoted = true;
    }
    // An opening quote, escaped (`\"`, inside a quoted string) or not.
    let quote = if at_char(j) == Some('\\') && at_char(j + 1).is_some_and(is_quote) {
        j += 2;
        Some((chars[j - 1], true))
    } else if at_char(j).is_some_and(is_quote) {
        j += 1;
        Some((chars[j - 1], false))
    } else {
        None
    };
    let from = j;
    while let Some(c) = at_char(j) {
        match quote {
            Some((q, escaped)) => {
                if c == '\\' {
                    if escaped && at_char(j + 1) == Some(q) {
                        break;
                    }
                    j += 2;
                    continue;
                }
                if c == q {
                    break;
                }
            }
            None => {
                if c.is_whitespace()
                    || is_quote(c)
                    || matches!(c, ',' | ';' | '&' | '}' | ']' | ')')
                {
                    break;
                }
            }
        }
        j += 1;
    }
    let to = j.min(chars.len());
    if to == from {
        return None;
    }
    let bare = colon && !quoted && quote.is_none();
    if bare && is_word(&chars[from..to]) {
        return None;
    }
    Some((from, to))
}

/// Whether `value` reads as a word of a message (letters only, no longer than words are) rather
/// than as a secret (which holds digits or signs, or runs long).
fn is_word(value: &[char]) -> bool {
    value.len() <= 32 && value.iter().all(char::is_ascii_alphabetic)
}

/// Past the `(` of a `Debug` wrapper (`String(`, `Some(`: a capitalised name and `(`) at `at`.
fn debug_wrapper(chars: &[char], at: usize) -> Option<usize> {
    if !chars.get(at)?.is_ascii_uppercase() {
        return None;
    }
    let j = at
        + chars[at..]
            .iter()
            .take_while(|c| c.is_ascii_alphanumeric() || **c == '_')
            .count();
    (chars.get(j) == Some(&'(')).then_some(j + 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keys_containing_token_in_any_case_are_masked_at_any_depth() {
        let mut v = json!({
            "a": {"api_TOKEN": "x1", "list": [{"refresh-token": {"deep": "x2"}}]},
            "tokens": ["x3"],
            "keep": "plain",
            "n": 3
        });
        mask_json(&mut v);
        let s = v.to_string();
        for secret in ["x1", "x2", "x3"] {
            assert!(!s.contains(secret), "{s}");
        }
        assert_eq!(v["keep"], "plain");
        assert_eq!(v["n"], 3);
        assert_eq!(v["a"]["list"][0]["refresh-token"], MASK);
    }

    #[test]
    fn step_output_keeps_only_hosts_bootstrap_token() {
        let mut v = json!({
            "action": "created",
            "bootstrap_token": "top-level",
            "hosts": [{
                "sid": "a.example",
                "bootstrap_token": "plain-1",
                "attributes": {"bootstrap_token": "nested", "labels": {"join-token": "lbl"}},
                "vault_token": "other"
            }]
        });
        mask_step_output(&mut v);
        assert_eq!(v["hosts"][0]["bootstrap_token"], "plain-1");
        assert_eq!(v["bootstrap_token"], MASK);
        assert_eq!(v["hosts"][0]["attributes"]["bootstrap_token"], MASK);
        assert_eq!(v["hosts"][0]["attributes"]["labels"]["join-token"], MASK);
        assert_eq!(v["hosts"][0]["vault_token"], MASK);
        assert_eq!(v["hosts"][0]["sid"], "a.example");
    }

    #[test]
    fn text_pairs_lose_their_values() {
        for (input, want) in [
            ("bootstrap_token=abc def", "bootstrap_token=*** def"),
            ("HCLOUD_TOKEN: abc123", "HCLOUD_TOKEN: ***"),
            (
                r#"{"bootstrap_token": "abc", "x": 1}"#,
                r#"{"bootstrap_token": "***", "x": 1}"#,
            ),
            ("url?token=abc&b=2", "url?token=***&b=2"),
            ("a token was refused", "a token was refused"),
            ("no secrets here", "no secrets here"),
            ("tokens:", "tokens:"),
        ] {
            assert_eq!(mask_text(input), want, "{input}");
        }
    }

    #[test]
    fn a_message_naming_a_field_keeps_its_words() {
        for same in [
            "api_token: required",
            "profile.labels.x-token: a string",
            "params.invalid: api_token: unknown field api_token; the fields of params are provider",
            "code=params.invalid error=steps[0].params.api_token: true or false",
            "HCLOUD_TOKEN: missing",
        ] {
            assert_eq!(mask_text(same), same);
        }
        for (input, want) in [
            ("api_token: s3cret", "api_token: ***"),
            ("X-Auth-Token: abc-def", "X-Auth-Token: ***"),
            ("token: abcdefghijklmnopqrstuvwxyzabcdefgh", "token: ***"),
            ("api_token=required", "api_token=***"),
            (r#"api_token: "required""#, r#"api_token: "***""#),
            (r#""api_token": required"#, r#""api_token": ***"#),
        ] {
            assert_eq!(mask_text(input), want, "{input}");
        }
    }

    #[test]
    fn values_in_rust_debug_forms_are_masked() {
        for (input, want) in [
            (
                r#"[Object {"orca-token": String("v1"), "a": String("b")}]"#,
                r#"[Object {"orca-token": String("***"), "a": String("b")}]"#,
            ),
            (
                r#"Config { token: Some("v2") }"#,
                r#"Config { token: Some("***") }"#,
            ),
            (r#"{"x-token": Number(42)}"#, r#"{"x-token": Number(***)}"#),
            (
                r#"String("{\"api_token\": \"v3\", \"b\": 1}")"#,
                r#"String("{\"api_token\": \"***\", \"b\": 1}")"#,
            ),
            (r#"token: "a \" b""#, r#"token: "***""#),
        ] {
            assert_eq!(mask_text(input), want, "{input}");
        }
    }

    #[test]
    fn strings_in_json_are_text_masked() {
        let mut v = json!({"error": "driver said token=abc"});
        mask_json(&mut v);
        assert_eq!(v["error"], "driver said token=***");
    }
}
