//! The parameters of the three `core.cloud` steps, checked before anything is read or made. Every
//! error names its parameter.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::error::{Error, Result};
use crate::fields::Fields;
use crate::registry::ProfileSpec;

/// The most VMs one `created` step makes, and the most VMs one `destroyed` or `resized` step takes.
pub const MAX_COUNT: u64 = 100;

/// The longest batch `name`: `<name>-<index>` must stay a hostname label of at most 63 characters.
pub const MAX_NAME: usize = 52;

/// The profile of a `created` step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProfileParam {
    /// A registered profile, by name.
    Named(String),
    /// A VM spec given in the step (a `profile` map).
    Inline(ProfileSpec),
}

/// Where a `created` step's user data comes from.
#[derive(Clone, PartialEq, Eq)]
pub enum UserData {
    /// None.
    Empty,
    /// The `userdata` parameter, for every VM.
    Given(String),
    /// keeper's `cloud_init` template (`generate_userdata`).
    Generate,
    /// keeper's template or the built-in one, with each VM's SID and token baked in (`self_onboard`).
    SelfOnboard,
}

impl std::fmt::Debug for UserData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UserData::Empty => f.write_str("Empty"),
            UserData::Given(s) => write!(f, "Given(<{} bytes>)", s.len()),
            UserData::Generate => f.write_str("Generate"),
            UserData::SelfOnboard => f.write_str("SelfOnboard"),
        }
    }
}

/// `core.cloud.created`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateParams {
    /// The registered provider.
    pub provider: String,
    /// The VM spec; `None`: the provider's only profile (the step refuses when it has none or several).
    pub profile: Option<ProfileParam>,
    /// How many VMs (1 by default).
    pub count: u32,
    /// The user data.
    pub userdata: UserData,
    /// The batch name: VMs are `<name>-<index>`.
    pub name: Option<String>,
}

/// `core.cloud.destroyed`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DestroyParams {
    /// The registered provider.
    pub provider: String,
    /// The VMs to destroy.
    pub vm_ids: Vec<String>,
    /// Their SIDs, whose registry rows the cascade moves (may be empty).
    pub sids: Vec<String>,
}

/// `core.cloud.resized`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResizeParams {
    /// The registered provider.
    pub provider: String,
    /// The VMs to resize.
    pub vm_ids: Vec<String>,
    /// The new machine type.
    pub machine_type: String,
}

fn provider(f: &Fields<'_>) -> Result<String> {
    let p = f.req_str("provider")?;
    crate::registry::validate_name("provider", &p)?;
    Ok(p)
}

fn list(
    f: &Fields<'_>,
    key: &str,
    required: bool,
    check: impl Fn(&str) -> bool,
    rule: &str,
) -> Result<Vec<String>> {
    let items = match f.str_list(key)? {
        Some(items) => items,
        None if required => return Err(Error::invalid(key, "required: a list")),
        None => Vec::new(),
    };
    if required && items.is_empty() {
        return Err(Error::invalid(key, "at least one"));
    }
    if items.len() as u64 > MAX_COUNT {
        return Err(Error::invalid(key, format!("at most {MAX_COUNT}")));
    }
    let mut seen = BTreeSet::new();
    for (i, item) in items.iter().enumerate() {
        if !check(item) {
            return Err(Error::invalid(
                format!("{key}[{i}]"),
                format!("{rule}, got {}", orca::spec::quoted(item)),
            ));
        }
        if !seen.insert(item.as_str()) {
            return Err(Error::invalid(
                format!("{key}[{i}]"),
                format!("{} is given twice", orca::spec::shown(item)),
            ));
        }
    }
    Ok(items)
}

/// The required `vm_ids` of `destroyed` and `resized`.
fn vm_ids(f: &Fields<'_>) -> Result<Vec<String>> {
    list(
        f,
        "vm_ids",
        true,
        |id| orca::validate_id(id).is_ok(),
        "a VM id: 1 to 255 of letters, digits, '.', '_', '-' and ':'",
    )
}

/// Whether `sid` looks like an FQDN: 1 to 253 of letters, digits, `.`, `-` and `_`.
pub fn is_sid(sid: &str) -> bool {
    !sid.is_empty()
        && sid.len() <= 253
        && sid
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
}

impl CreateParams {
    /// Reads `created`'s parameters.
    pub fn parse(params: &Value) -> Result<Self> {
        let f = Fields::new(
            params,
            "params",
            "",
            &[
                "provider",
                "profile",
                "count",
                "userdata",
                "generate_userdata",
                "self_onboard",
                "name",
            ],
        )?;
        let provider = provider(&f)?;
        let profile = match f.raw("profile") {
            None => None,
            Some(Value::String(name)) => {
                crate::registry::validate_name("profile", name)?;
                Some(ProfileParam::Named(name.clone()))
            }
            Some(v @ Value::Object(_)) => Some(ProfileParam::Inline(ProfileSpec::parse(v, "profile.")?)),
            Some(_) => {
                return Err(Error::invalid(
                    "profile",
                    "a registered profile's name, or a profile map (machine_type, location, image, disk_gb, labels, ssh_keys, network_tags)",
                ))
            }
        };
        let count = f.int("count", 1, MAX_COUNT)?.unwrap_or(1);
        let given = f.str("userdata")?;
        let generate = f.bool("generate_userdata")?.unwrap_or(false);
        let self_onboard = f.bool("self_onboard")?.unwrap_or(false);
        if given.is_some() && (generate || self_onboard) {
            return Err(Error::invalid(
                "userdata",
                "exclusive with generate_userdata and self_onboard: give user data, or let keeper generate it",
            ));
        }
        let name = f.str("name")?;
        if let Some(n) = &name {
            if orca::validate_name(n).is_err() || n.len() > MAX_NAME {
                return Err(Error::invalid(
                    "name",
                    format!("1 to {MAX_NAME} of a-z, 0-9 and '-', not starting or ending with '-' (VMs are <name>-<index>), got {}", orca::spec::quoted(n)),
                ));
            }
        }
        if self_onboard && name.is_none() {
            return Err(Error::invalid(
                "name",
                "required with self_onboard: keeper predicts each FQDN as <name>-<index>.<fqdn_suffix>",
            ));
        }
        let userdata = match (given, generate, self_onboard) {
            (Some(s), _, _) => UserData::Given(s),
            (None, _, true) => UserData::SelfOnboard,
            (None, true, false) => UserData::Generate,
            (None, false, false) => UserData::Empty,
        };
        Ok(CreateParams {
            provider,
            profile,
            count: u32::try_from(count).unwrap_or(1),
            userdata,
            name,
        })
    }
}

impl DestroyParams {
    /// Reads `destroyed`'s parameters.
    pub fn parse(params: &Value) -> Result<Self> {
        let f = Fields::new(params, "params", "", &["provider", "vm_ids", "sids"])?;
        Ok(DestroyParams {
            provider: provider(&f)?,
            vm_ids: vm_ids(&f)?,
            sids: list(
                &f,
                "sids",
                false,
                is_sid,
                "a SID (an FQDN): 1 to 253 of letters, digits, '.', '-' and '_'",
            )?,
        })
    }
}

impl ResizeParams {
    /// Reads `resized`'s parameters.
    pub fn parse(params: &Value) -> Result<Self> {
        let f = Fields::new(
            params,
            "params",
            "",
            &["provider", "vm_ids", "machine_type"],
        )?;
        let provider = provider(&f)?;
        let vm_ids = vm_ids(&f)?;
        let machine_type = f.req_str("machine_type")?;
        orca::spec::validate_token("machine_type", &machine_type)
            .map_err(|e| Error::invalid("machine_type", e.to_string()))?;
        Ok(ResizeParams {
            provider,
            vm_ids,
            machine_type,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn field(e: Error) -> String {
        e.field.unwrap_or_default()
    }

    #[test]
    fn created_rules_name_their_parameter() {
        let p = CreateParams::parse(&json!({"provider": "lab"})).unwrap();
        assert_eq!((p.count, p.userdata.clone()), (1, UserData::Empty));
        for (params, want) in [
            (json!({}), "provider"),
            (json!({"provider": "lab", "count": 0}), "count"),
            (json!({"provider": "lab", "count": -1}), "count"),
            (json!({"provider": "lab", "count": 1.5}), "count"),
            (json!({"provider": "lab", "count": 101}), "count"),
            (
                json!({"provider": "lab", "userdata": "x", "generate_userdata": true}),
                "userdata",
            ),
            (
                json!({"provider": "lab", "userdata": "x", "self_onboard": true, "name": "a"}),
                "userdata",
            ),
            (json!({"provider": "lab", "self_onboard": true}), "name"),
            (json!({"provider": "lab", "name": "Web"}), "name"),
            (json!({"provider": "lab", "name": "a".repeat(53)}), "name"),
            (json!({"provider": "lab", "profile": 3}), "profile"),
            (
                json!({"provider": "lab", "profile": {"machine_type": "t", "size": 2}}),
                "profile.size",
            ),
            (json!({"provider": "lab", "on": "keeper"}), "on"),
        ] {
            assert_eq!(
                field(CreateParams::parse(&params).unwrap_err()),
                want,
                "{params}"
            );
        }
        let p = CreateParams::parse(
            &json!({"provider": "lab", "self_onboard": true, "generate_userdata": true, "name": "web"}),
        )
        .unwrap();
        assert_eq!(p.userdata, UserData::SelfOnboard);
        assert!(!format!("{:?}", UserData::Given("secret".into())).contains("secret"));
    }

    #[test]
    fn destroyed_and_resized_lists_are_checked() {
        for (params, want) in [
            (json!({"provider": "lab"}), "vm_ids"),
            (json!({"provider": "lab", "vm_ids": []}), "vm_ids"),
            (
                json!({"provider": "lab", "vm_ids": ["a", "a"]}),
                "vm_ids[1]",
            ),
            (json!({"provider": "lab", "vm_ids": ["a/b"]}), "vm_ids[0]"),
            (
                json!({"provider": "lab", "vm_ids": ["a"], "sids": ["x y"]}),
                "sids[0]",
            ),
        ] {
            assert_eq!(
                field(DestroyParams::parse(&params).unwrap_err()),
                want,
                "{params}"
            );
        }
        assert_eq!(
            field(ResizeParams::parse(&json!({"provider": "lab", "vm_ids": ["a"]})).unwrap_err()),
            "machine_type"
        );
    }
}
