//! Tokens: one-time bootstrap tokens for new VMs, and the operator API's bearer tokens.
//!
//! Both are kept only as SHA-256 hashes. A bootstrap token is 32 random bytes from the operating
//! system's generator, written as `kbt_` and 64 hex digits; its plain form exists only in the step
//! output (and, with `self_onboard`, in the VM's user data). API tokens are configured as hashes
//! ([`ApiTokens`]), each with the permissions it carries; a request presents the plain token as
//! `Authorization: Bearer <token>`, and keeper compares hashes in constant time.

use std::fmt;

use serde::Deserialize;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::error::{json_position, Error, Result};

/// The prefix of a bootstrap token.
pub const BOOTSTRAP_PREFIX: &str = "kbt_";

/// A plain one-time bootstrap token. `Debug` and `Display` never show it; [`PlainToken::expose`]
/// does, for the step output and the VM's user data only.
#[derive(Clone, PartialEq, Eq)]
pub struct PlainToken(String);

impl PlainToken {
    /// A new random token.
    pub fn generate() -> Result<Self> {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes).map_err(|e| {
            Error::new(
                500,
                "token.random",
                format!("no random bytes from the operating system: {e}"),
            )
        })?;
        let token = hex::encode(bytes);
        Ok(PlainToken(format!("{BOOTSTRAP_PREFIX}{token}")))
    }

    /// The plain token.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Its SHA-256, as stored.
    pub fn hash(&self) -> [u8; 32] {
        sha256(&self.0)
    }
}

impl fmt::Debug for PlainToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PlainToken(***)")
    }
}

impl fmt::Display for PlainToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// SHA-256 of `s`.
pub fn sha256(s: &str) -> [u8; 32] {
    Sha256::digest(s.as_bytes()).into()
}

/// The operator permissions.
pub const PERMISSIONS: [&str; 7] = [
    "provider.read",
    "provider.create",
    "provider.delete",
    "profile.read",
    "profile.create",
    "profile.delete",
    STEP_PERMISSION,
];

/// The permission to run `core.cloud` steps through the REST API.
pub const STEP_PERMISSION: &str = "step.core.cloud";

/// Whether holding `held` grants `permission`: exactly, by `<group>.*`, or by `*`.
fn grants(held: &str, permission: &str) -> bool {
    held == "*"
        || held == permission
        || held.strip_suffix(".*").is_some_and(|group| {
            permission
                .strip_prefix(group)
                .is_some_and(|rest| rest.starts_with('.'))
        })
}

/// One configured API token: a name (the audit's actor), the SHA-256 of the token, and its
/// permissions (`provider.read`, ..., `profile.*`, `*`).
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiToken {
    /// The name the audit trail records as the actor (`api:<name>`).
    pub name: String,
    /// The SHA-256 of the token, 64 hex digits.
    pub sha256: String,
    /// What it may do.
    pub permissions: Vec<String>,
}

impl fmt::Debug for ApiToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApiToken")
            .field("name", &self.name)
            .field("permissions", &self.permissions)
            .finish_non_exhaustive()
    }
}

/// The configured API tokens.
#[derive(Debug, Clone, Default)]
pub struct ApiTokens {
    tokens: Vec<(ApiToken, [u8; 32])>,
}

/// Who called, after authentication.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The token's name.
    pub name: String,
    permissions: Vec<String>,
}

impl Caller {
    /// Whether the caller holds `permission` (exactly, by `<group>.*`, or by `*`).
    pub fn may(&self, permission: &str) -> bool {
        self.permissions.iter().any(|held| grants(held, permission))
    }

    /// The caller holds `permission`, or 403 naming it.
    pub fn require(&self, permission: &str) -> Result<()> {
        self.may(permission).then_some(()).ok_or_else(|| {
            Error::new(
                403,
                "permission.denied",
                format!("this call needs the permission {permission}"),
            )
        })
    }

    /// The actor the audit trail records.
    pub fn actor(&self) -> String {
        format!("api:{}", self.name)
    }
}

impl ApiTokens {
    /// Tokens from their JSON form: `{"tokens": [{"name", "sha256", "permissions"}]}`. Every problem
    /// names the token by its name or position, never by its hash.
    pub fn from_json(text: &str) -> Result<Self> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct File {
            tokens: Vec<ApiToken>,
        }
        let file: File = serde_json::from_str(text).map_err(|e| {
            Error::config(format!(
                "the API token list is not a JSON object holding a list of {{name, sha256, permissions}} ({})",
                json_position(&e)
            ))
        })?;
        let mut tokens = Vec::new();
        for (i, t) in file.tokens.into_iter().enumerate() {
            let bad =
                |why: String| Error::config(format!("API token {} ({:?}): {why}", i + 1, t.name));
            if t.name.is_empty() || t.name.len() > 63 {
                return Err(bad("a name of 1 to 63 characters".into()));
            }
            let mut hash = [0u8; 32];
            hex::decode_to_slice(&t.sha256, &mut hash)
                .map_err(|_| bad("sha256: 64 hex digits, the SHA-256 of the token".into()))?;
            for p in &t.permissions {
                // Known: it grants at least one permission.
                if !PERMISSIONS.iter().any(|k| grants(p, k)) {
                    return Err(bad(format!(
                        "unknown permission {p:?}; known: {}, <group>.* and *",
                        PERMISSIONS.join(", ")
                    )));
                }
            }
            tokens.push((t, hash));
        }
        Ok(ApiTokens { tokens })
    }

    /// How many tokens are configured.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// The caller presenting `token`, or 401.
    pub fn authenticate(&self, token: &str) -> Result<Caller> {
        let presented = sha256(token);
        // Every hash is compared (in constant time); the first match is the caller.
        let found = self.tokens.iter().fold(None, |found, (t, hash)| {
            found.or(bool::from(hash.ct_eq(&presented)).then_some(t))
        });
        found
            .map(|t| Caller {
                name: t.name.clone(),
                permissions: t.permissions.clone(),
            })
            .ok_or_else(|| Error::new(401, "unauthenticated", "unknown bearer token"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bootstrap_tokens_are_random_and_never_printed() {
        let a = PlainToken::generate().unwrap();
        let b = PlainToken::generate().unwrap();
        assert_ne!(a, b);
        assert!(a.expose().starts_with(BOOTSTRAP_PREFIX));
        assert_eq!(a.expose().len(), BOOTSTRAP_PREFIX.len() + 64);
        assert!(!format!("{a:?} {a}").contains(a.expose()));
        assert_eq!(a.hash(), sha256(a.expose()));
    }

    #[test]
    fn permissions_match_exactly_by_group_or_all() {
        let json = format!(
            r#"{{"tokens": [{{"name": "ops", "sha256": "{}", "permissions": ["profile.*", "provider.read"]}}]}}"#,
            hex::encode(sha256("t-ops"))
        );
        let tokens = ApiTokens::from_json(&json).unwrap();
        let c = tokens.authenticate("t-ops").unwrap();
        assert!(c.may("profile.delete") && c.may("provider.read"));
        assert!(!c.may("provider.create") && !c.may("profiles.read") && !c.may("profile"));
        assert_eq!(c.require("provider.delete").unwrap_err().status, 403);
        assert_eq!(tokens.authenticate("t-other").unwrap_err().status, 401);
        assert!(!format!("{tokens:?}").contains(&hex::encode(sha256("t-ops"))));
    }

    #[test]
    fn bad_configuration_is_named() {
        let e = ApiTokens::from_json(
            r#"{"tokens": [{"name": "a", "sha256": "xyz", "permissions": []}]}"#,
        )
        .unwrap_err();
        assert!(e.message.contains("sha256"), "{e}");
        let json = format!(
            r#"{{"tokens": [{{"name": "a", "sha256": "{}", "permissions": ["provider.nuke"]}}]}}"#,
            "0".repeat(64)
        );
        let e = ApiTokens::from_json(&json).unwrap_err();
        assert!(e.message.contains("provider.nuke"), "{e}");
    }
}
