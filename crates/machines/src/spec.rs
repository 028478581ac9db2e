//! What a machine should be ([`MachineSpec`]) and the validation rules every driver applies before any
//! network call (contract 1).

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// What to make: a machine `name` of `machine_type` in `location`, booted with `user_data`, in `pool`.
///
/// ```
/// use orca_machines::MachineSpec;
/// let spec = MachineSpec::new("orca-lab-7", "cax31", "hel1", "lab").with_user_data("#cloud-config\n");
/// assert!(spec.validate().is_ok());
/// assert!(MachineSpec::new("Bad_Name", "cax31", "hel1", "lab").validate().is_err());
/// ```
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineSpec {
    /// A host name: 1 to 63 of a-z, 0-9 and `-`, not starting or ending with `-`.
    pub name: String,
    /// The cloud's name for the machine type (`cax31`, `t4g.small`, `e2-small`, `Standard_B2s`).
    pub machine_type: String,
    /// The cloud's name for the location (`hel1`, `eu-west-1a`, `europe-west1-b`, `westeurope`).
    pub location: String,
    /// Data the machine boots with (cloud-init). May be empty. May hold secrets: never printed.
    pub user_data: String,
    /// The pool the machine belongs to: a label value.
    pub pool: String,
}

impl std::fmt::Debug for MachineSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MachineSpec")
            .field("name", &self.name)
            .field("machine_type", &self.machine_type)
            .field("location", &self.location)
            .field(
                "user_data",
                &format_args!("<{} bytes>", self.user_data.len()),
            )
            .field("pool", &self.pool)
            .finish()
    }
}

impl MachineSpec {
    /// A spec with empty user data.
    pub fn new(
        name: impl Into<String>,
        machine_type: impl Into<String>,
        location: impl Into<String>,
        pool: impl Into<String>,
    ) -> Self {
        MachineSpec {
            name: name.into(),
            machine_type: machine_type.into(),
            location: location.into(),
            user_data: String::new(),
            pool: pool.into(),
        }
    }

    /// The same spec with `user_data`.
    pub fn with_user_data(mut self, user_data: impl Into<String>) -> Self {
        self.user_data = user_data.into();
        self
    }

    /// Checks every field; the error names the first field at fault and the rule it breaks.
    pub fn validate(&self) -> Result<()> {
        validate_name(&self.name)?;
        validate_token("machine_type", &self.machine_type)?;
        validate_token("location", &self.location)?;
        validate_pool(&self.pool)?;
        if self.user_data.len() > MAX_USER_DATA {
            return Err(Error::invalid(
                "user_data",
                format!(
                    "at most {MAX_USER_DATA} bytes, got {}",
                    self.user_data.len()
                ),
            ));
        }
        Ok(())
    }
}

/// The largest user data every cloud accepts: the smallest of their limits (EC2 16 KiB, Hetzner 32 KiB,
/// Azure 64 KiB, Compute Engine 256 KiB), so that a spec valid for one cloud is valid for all.
pub const MAX_USER_DATA: usize = 16 * 1024;

/// Checks a machine name: 1 to 63 of a-z, 0-9 and `-`, not starting or ending with `-` (a hostname label).
pub fn validate_name(name: &str) -> Result<()> {
    let rule = "1 to 63 of a-z, 0-9 and '-', not starting or ending with '-'";
    let ok = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(Error::invalid("name", format!("{rule}, got {name:?}")))
    }
}

/// The rule for label values (pool and owner), the intersection of what every cloud accepts so that a
/// value can never widen a label selector or filter.
pub const LABEL_VALUE_RULE: &str =
    "1 to 63 of a-z, 0-9, '-' and '_', starting and ending with a letter or digit";

fn is_label_value(value: &str) -> bool {
    let b = value.as_bytes();
    let inner = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-' || *c == b'_';
    let edge = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty()
        && b.len() <= 63
        && b.iter().all(inner)
        && b.first().is_some_and(edge)
        && b.last().is_some_and(edge)
}

/// Checks a pool name: a label value ([`LABEL_VALUE_RULE`]).
pub fn validate_pool(pool: &str) -> Result<()> {
    if is_label_value(pool) {
        Ok(())
    } else {
        Err(Error::invalid(
            "pool",
            format!("{LABEL_VALUE_RULE}, got {pool:?}"),
        ))
    }
}

/// Checks an owner: empty (no owner) or a label value ([`LABEL_VALUE_RULE`]).
pub fn validate_owner(owner: &str) -> Result<()> {
    if owner.is_empty() || is_label_value(owner) {
        Ok(())
    } else {
        Err(Error::invalid(
            "owner",
            format!("empty, or {LABEL_VALUE_RULE}, got {owner:?}"),
        ))
    }
}

/// Checks a machine id as given to `delete` and friends: 1 to 255 of ASCII letters, digits, `.`, `_`,
/// `-` and `:`, so that it can go into a URL path or a filter as it is.
pub fn validate_id(id: &str) -> Result<()> {
    let ok = !id.is_empty()
        && id.len() <= 255
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b':'));
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(
            "id",
            format!("1 to 255 of letters, digits, '.', '_', '-' and ':', got {id:?}"),
        ))
    }
}

/// Checks a cloud token such as a machine type or a location: 1 to 80 of ASCII letters, digits, `.`,
/// `_` and `-`.
pub fn validate_token(field: &str, value: &str) -> Result<()> {
    let ok = !value.is_empty()
        && value.len() <= 80
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(
            field,
            format!("1 to 80 of letters, digits, '.', '_' and '-', got {value:?}"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn names() {
        for ok in ["a", "orca-lab-7", "0", &"a".repeat(63)] {
            assert!(validate_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "-a",
            "a-",
            "A",
            "a_b",
            "a.b",
            "a b",
            &"a".repeat(64),
            "é",
        ] {
            let e = validate_name(bad).unwrap_err();
            assert!(e.to_string().starts_with("invalid name:"), "{e}");
        }
    }

    #[test]
    fn label_values_cannot_widen_a_selector() {
        for bad in [
            "", "a,b", "a=b", "!a", "a b", "a)", "in (a", "A", "a.b", "_a", "a_", "-a", "a\n", "*",
            "a|b", "a&b", "\"a\"",
        ] {
            assert!(validate_pool(bad).is_err(), "{bad:?}");
            if !bad.is_empty() {
                assert!(validate_owner(bad).is_err(), "{bad:?}");
            }
        }
        assert!(validate_owner("").is_ok());
        assert!(validate_pool("lab_2-x").is_ok());
    }

    #[test]
    fn spec_validation_names_the_field() {
        let s = MachineSpec::new("ok", "cx22", "hel1", "a,b");
        assert!(s
            .validate()
            .unwrap_err()
            .to_string()
            .starts_with("invalid pool"));
        let s = MachineSpec::new("ok", "cx 22", "hel1", "p");
        assert!(s
            .validate()
            .unwrap_err()
            .to_string()
            .starts_with("invalid machine_type"));
        let s = MachineSpec::new("ok", "cx22", "", "p");
        assert!(s
            .validate()
            .unwrap_err()
            .to_string()
            .starts_with("invalid location"));
        let s = MachineSpec::new("ok", "cx22", "hel1", "p")
            .with_user_data("x".repeat(MAX_USER_DATA + 1));
        assert!(s
            .validate()
            .unwrap_err()
            .to_string()
            .starts_with("invalid user_data"));
    }

    #[test]
    fn debug_hides_user_data() {
        let s = MachineSpec::new("n", "t", "l", "p").with_user_data("password=hunter2");
        let d = format!("{s:?}");
        assert!(!d.contains("hunter2"), "{d}");
        assert!(d.contains("16 bytes"));
    }

    fn reference_name(s: &str) -> bool {
        // The rule restated as a regular language, independently of the implementation.
        let chars: Vec<char> = s.chars().collect();
        (1..=63).contains(&chars.len())
            && chars
                .iter()
                .all(|c| matches!(c, 'a'..='z' | '0'..='9' | '-'))
            && chars[0] != '-'
            && chars[chars.len() - 1] != '-'
    }

    fn reference_label(s: &str) -> bool {
        let chars: Vec<char> = s.chars().collect();
        let edge = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
        (1..=63).contains(&chars.len())
            && chars
                .iter()
                .all(|c| matches!(c, 'a'..='z' | '0'..='9' | '-' | '_'))
            && edge(chars[0])
            && edge(chars[chars.len() - 1])
    }

    proptest! {
        #[test]
        fn name_matches_reference(s in "\\PC{0,70}") {
            prop_assert_eq!(validate_name(&s).is_ok(), reference_name(&s));
        }

        #[test]
        fn name_accepts_every_hostname_label(s in "[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?") {
            prop_assert!(validate_name(&s).is_ok());
        }

        #[test]
        fn pool_and_owner_match_reference(s in "[a-z0-9_=,! ()A-Z.-]{0,66}") {
            prop_assert_eq!(validate_pool(&s).is_ok(), reference_label(&s));
            prop_assert_eq!(validate_owner(&s).is_ok(), s.is_empty() || reference_label(&s));
        }

        #[test]
        fn valid_label_values_hold_no_selector_syntax(s in "\\PC{0,70}") {
            if validate_pool(&s).is_ok() {
                for c in [',', '=', '!', ' ', '(', ')', '"', '\'', '.', '*', '&', '|', ':', '/'] {
                    prop_assert!(!s.contains(c));
                }
            }
        }
    }
}
