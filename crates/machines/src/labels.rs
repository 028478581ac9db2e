//! The ownership labels every machine carries ([contract](crate::contract) 2), and the helpers that build and check them.
//!
//! A machine made by orca carries `orca=pool`, `orca-pool=<pool>` and, when the provider has an owner,
//! `orca-owner=<owner>`. Drivers set them in the create call itself, filter on them server-side when
//! listing, and check them before deleting.

use std::collections::BTreeMap;

/// The label that marks a machine as orca's: `orca=pool`.
pub const ORCA_LABEL: &str = "orca";
/// The value of [`ORCA_LABEL`].
pub const ORCA_VALUE: &str = "pool";
/// The label holding the machine's pool.
pub const POOL_LABEL: &str = "orca-pool";
/// The label holding the owner (the stack's id); absent when the provider has no owner.
pub const OWNER_LABEL: &str = "orca-owner";

/// Whether `key` is one of orca's own labels, which no caller may set, change or remove.
pub fn is_reserved(key: &str) -> bool {
    [ORCA_LABEL, POOL_LABEL, OWNER_LABEL].contains(&key)
}

/// Labels (or tags) as a sorted map.
pub type Labels = BTreeMap<String, String>;

/// The labels a machine of `pool` made by `owner` carries. Both must be valid already
/// ([`crate::validate_pool`], [`crate::validate_owner`]).
///
/// ```
/// let l = orca_machines::labels::ownership_labels("lab", "stack-1");
/// assert_eq!(l.get("orca").map(String::as_str), Some("pool"));
/// assert_eq!(l.get("orca-pool").map(String::as_str), Some("lab"));
/// assert_eq!(l.get("orca-owner").map(String::as_str), Some("stack-1"));
/// assert!(!orca_machines::labels::ownership_labels("lab", "").contains_key("orca-owner"));
/// ```
pub fn ownership_labels(pool: &str, owner: &str) -> Labels {
    let mut l = Labels::new();
    l.insert(ORCA_LABEL.to_string(), ORCA_VALUE.to_string());
    l.insert(POOL_LABEL.to_string(), pool.to_string());
    if !owner.is_empty() {
        l.insert(OWNER_LABEL.to_string(), owner.to_string());
    }
    l
}

/// Whether a machine with `labels` is orca's and belongs to `owner` (any pool). With an empty owner,
/// only machines without an owner label belong to it.
pub fn is_owned_by(labels: &Labels, owner: &str) -> bool {
    labels.get(ORCA_LABEL).map(String::as_str) == Some(ORCA_VALUE)
        && labels.contains_key(POOL_LABEL)
        && match labels.get(OWNER_LABEL) {
            Some(o) => !owner.is_empty() && o == owner,
            None => owner.is_empty(),
        }
}

/// Whether a machine with `labels` belongs to `owner` and `pool`: what `machines(pool)` returns.
pub fn is_in_pool(labels: &Labels, pool: &str, owner: &str) -> bool {
    is_owned_by(labels, owner) && labels.get(POOL_LABEL).map(String::as_str) == Some(pool)
}

/// The pool of a machine with `labels`, or empty.
pub fn pool_of(labels: &Labels) -> String {
    labels.get(POOL_LABEL).cloned().unwrap_or_default()
}

/// A Kubernetes-style label selector for `pool` and `owner` (`orca=pool,orca-pool=lab,orca-owner=s1`,
/// or `...,!orca-owner` for an empty owner): what Hetzner's `label_selector` takes. Values must be valid
/// label values already, so nothing can widen the selector.
///
/// ```
/// assert_eq!(orca_machines::labels::selector("lab", "s1"), "orca=pool,orca-pool=lab,orca-owner=s1");
/// assert_eq!(orca_machines::labels::selector("lab", ""), "orca=pool,orca-pool=lab,!orca-owner");
/// ```
pub fn selector(pool: &str, owner: &str) -> String {
    let owner_part = if owner.is_empty() {
        format!("!{OWNER_LABEL}")
    } else {
        format!("{OWNER_LABEL}={owner}")
    };
    format!("{ORCA_LABEL}={ORCA_VALUE},{POOL_LABEL}={pool},{owner_part}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ownership() {
        let a = ownership_labels("p", "a");
        let none = ownership_labels("p", "");
        assert!(is_owned_by(&a, "a"));
        assert!(!is_owned_by(&a, "b"));
        assert!(!is_owned_by(&a, ""));
        assert!(is_owned_by(&none, ""));
        assert!(!is_owned_by(&none, "a"));
        assert!(is_in_pool(&a, "p", "a"));
        assert!(!is_in_pool(&a, "q", "a"));
        let mut foreign = a.clone();
        foreign.remove(ORCA_LABEL);
        assert!(
            !is_owned_by(&foreign, "a"),
            "a machine without orca=pool is not orca's"
        );
    }
}
