//! The profile: which providers are enabled, the compute bindings, the operator's credit floor
//! ruling, the product site's address and the owner name, as `key: value` pairs that
//! `stado config set KEY VALUE` declares.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::azure::{BINDINGS, REQUIRED};
use crate::cloud::list_or_none;
use crate::error::Failure;
use crate::files::{read_json, write_json};
use crate::home::Home;

/// The providers stado knows: Azure, and Azure simulated in memory (`fake`).
pub const PROVIDERS: [&str; 2] = ["azure", "fake"];

/// Refuses a provider stado does not know, naming the ones it knows.
pub fn check_known_provider(kind: &str) -> Result<(), Failure> {
    if PROVIDERS.contains(&kind) {
        return Ok(());
    }
    Err(Failure::invalid(format!(
        "unknown provider {kind:?}; stado knows {}",
        PROVIDERS.join(" and ")
    )))
}

/// The environment variable that names the enabled providers for one invocation.
pub const PROVIDERS_ENV: &str = "WC_PROVIDERS";
/// The environment variable that names the disabled providers for one invocation.
pub const DISABLED_ENV: &str = "WC_DISABLED_PROVIDERS";

/// Every key `stado config set` knows, with what it holds.
pub const KEYS: &[(&str, &str)] = &[
    (
        "providers",
        "the enabled providers, comma separated (azure, fake)",
    ),
    (
        "providers_disabled",
        "providers disabled even when listed in providers",
    ),
    ("azure.subscription_id", "the Azure subscription id"),
    (
        "azure.resource_group",
        "the resource group cloud hosts are made in",
    ),
    (
        "azure.vnet",
        "the virtual network's base name: a location's network is <vnet>-<location>",
    ),
    ("azure.subnet", "the subnet of that network"),
    (
        "azure.image_urn",
        "the image, publisher:offer:sku:version (Canonical:ubuntu-24_04-lts:server:latest)",
    ),
    ("azure.vm_username", "the account stado logs in as"),
    (
        "azure.locations",
        "every location the deployment uses, comma separated: a size is priced at the highest hour of any",
    ),
    (
        "azure.credit_floor.amount",
        "the operator's credit floor: the balance left after one hour of every host must stay above it",
    ),
    (
        "azure.credit_floor.currency",
        "its currency (ISO 4217, USD)",
    ),
    ("azure.credit_floor.ruling", "the id of the operator's ruling"),
    ("azure.credit_floor.words", "the operator's words in that ruling"),
    (
        "azure.billing_account",
        "the billing account whose credit the Azure credit gate reads",
    ),
    (
        "azure.billing_profile",
        "the billing profile of that account",
    ),
    (
        "azure.endpoint",
        "the Resource Manager endpoint (default https://management.azure.com)",
    ),
    (
        "azure.prices_endpoint",
        "the Retail Prices endpoint (default https://prices.azure.com)",
    ),
    (
        "api.url",
        "the product site: <api.url>/api/egress answers the address a request came from",
    ),
    (
        "owner",
        "the orca owner of this home's machines (default stado-<home_id>); homes given the same owner see each other's machines",
    ),
];

/// The profile key holding the home's id (minted by stado, never set by hand).
pub const HOME_ID: &str = "home_id";

/// Mints the home's id when the profile at `profile_path` has none yet, and keeps it there; the id.
///
/// A home made before homes had ids whose registry (`registry_path`) already declares cloud hosts
/// made them under the owner `stado`: its profile is given `owner = stado` too, so that they stay
/// reachable.
pub(crate) fn ensure_home_id(
    profile_path: &std::path::Path,
    registry_path: &std::path::Path,
) -> Result<String, Failure> {
    let current: Profile = read_json(profile_path)?;
    if let Some(id) = current.get(HOME_ID) {
        return Ok(id);
    }
    let _lock = crate::home::wait_lock(profile_path)?;
    let mut p: Profile = read_json(profile_path)?;
    if let Some(id) = p.get(HOME_ID) {
        return Ok(id);
    }
    let mut bytes = [0u8; 6];
    ssh_key::rand_core::RngCore::try_fill_bytes(&mut ssh_key::rand_core::OsRng, &mut bytes)
        .map_err(|e| Failure::new(format!("could not mint this home's id: {e}")))?;
    let id: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let registry: crate::registry::Registry = read_json(registry_path)?;
    if p.get("owner").is_none() && registry.targets.iter().any(|t| t.cloud.is_some()) {
        tracing::warn!(
            "this stado home declares cloud hosts made before homes had ids: it keeps the owner stado"
        );
        p.values
            .insert("owner".into(), Value::String("stado".into()));
    }
    p.values.insert(HOME_ID.into(), Value::String(id.clone()));
    write_json(profile_path, &p)?;
    Ok(id)
}

/// `stado config set KEY VALUE`: sets `key` in the profile of `home` under its lock; the value
/// stored.
pub fn config_set(home: &Home, key: &str, value: &str) -> Result<Value, Failure> {
    let _lock = home.lock(&home.profile_path())?;
    let before = Profile::load_as_written(home)?;
    let mut p = before.clone();
    p.set(key, value)?;
    let _registry = check_owner_kept(home, &before, &p)?;
    p.save(home)?;
    Ok(p.values.get(key).cloned().unwrap_or(Value::Null))
}

/// `stado config unset KEY`: removes `key` from the profile of `home` under its lock; whether it
/// was set.
pub fn config_unset(home: &Home, key: &str) -> Result<bool, Failure> {
    if key == HOME_ID {
        return Err(home_id_is_kept());
    }
    let _lock = home.lock(&home.profile_path())?;
    let before = Profile::load_as_written(home)?;
    let mut p = before.clone();
    let was = p.unset(key);
    let _registry = check_owner_kept(home, &before, &p)?;
    p.save(home)?;
    Ok(was)
}

/// Refuses a profile change (`before` to `after`) that changes the owner while the registry
/// declares cloud hosts: they were made under the owner, and every read, adoption and deletion of
/// them asks for it, so under another one they answer as not this home's, and a host whose create
/// stopped before its VM was known would be taken for gone while its VM runs. When the owner
/// changes, the registry's lock is taken and given back to hold until the profile is saved, so that
/// no create declares a host under the old owner meanwhile.
fn check_owner_kept(
    home: &Home,
    before: &Profile,
    after: &Profile,
) -> Result<Option<crate::registry::Held>, Failure> {
    if before.owner() == after.owner() {
        return Ok(None);
    }
    let registry = crate::registry::Held::take(home)?;
    let hosts: Vec<&str> = registry
        .targets
        .iter()
        .filter(|t| t.cloud.is_some())
        .map(|t| t.name.as_str())
        .collect();
    if !hosts.is_empty() {
        return Err(Failure::refused(format!(
            "the owner of this stado home's machines cannot change while the registry declares cloud hosts made under it ({}): they would be left unreachable; stado cloud host delete each first",
            hosts.join(", ")
        )));
    }
    Ok(Some(registry))
}

/// The refusal of a change to `home_id`.
pub fn home_id_is_kept() -> Failure {
    Failure::invalid(format!(
        "{HOME_ID} is this stado home's identity: its cloud hosts are made under it and only its own are adopted or deleted, so stado keeps it and it cannot be set or unset"
    ))
}

/// The operator's ruling on the Azure credit floor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FloorRuling {
    /// The floor.
    pub amount: f64,
    /// Its currency.
    pub currency: String,
    /// The ruling's id.
    pub ruling: String,
    /// The operator's words.
    pub words: String,
}

/// The profile, as its file holds it: one flat object of keys.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    /// Every key set.
    #[serde(flatten)]
    pub values: BTreeMap<String, Value>,
}

/// The provider selection of one invocation: the profile's lists, or the environment's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    /// `WC_PROVIDERS`, when set.
    pub providers: Option<String>,
    /// `WC_DISABLED_PROVIDERS`, when set.
    pub disabled: Option<String>,
}

impl Selection {
    /// The selection this process's environment makes.
    pub fn from_env() -> Selection {
        Selection {
            providers: std::env::var(PROVIDERS_ENV).ok(),
            disabled: std::env::var(DISABLED_ENV).ok(),
        }
    }
}

fn split_list(s: &str) -> Vec<String> {
    s.split([',', ' '])
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

impl Profile {
    /// The profile in `home` (empty when there is none yet), refused when a value in it is one
    /// `config set` would not have stored: the file may have been edited by hand, and its values
    /// go into shell commands run on fleet hosts and into a host's first boot.
    pub fn load(home: &Home) -> Result<Profile, Failure> {
        let path = home.profile_path();
        let p: Profile = read_json(&path)?;
        p.check_values().map_err(|(key, rule)| {
            Failure::invalid(format!(
                "{}: the value of {key} breaks its rule ({rule}); stado config set {key} sets it again",
                path.display()
            ))
        })?;
        Ok(p)
    }

    /// The profile in `home` as its file holds it, values unchecked: what `config set` and
    /// `config unset` change, so that they can mend a value [`Profile::load`] refuses.
    fn load_as_written(home: &Home) -> Result<Profile, Failure> {
        read_json(&home.profile_path())
    }

    /// The first value that breaks its key's rule, as (key, rule). The value itself is not named:
    /// one that breaks a rule may hold a password (`https://user:password@host`).
    fn check_values(&self) -> Result<(), (String, String)> {
        for (key, value) in &self.values {
            let text = match value {
                Value::Null => continue,
                Value::String(s) => s.trim().to_string(),
                other => other.to_string(),
            };
            let checked = if key == HOME_ID {
                let minted = text.len() == 12
                    && text
                        .bytes()
                        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
                minted
                    .then_some(())
                    .ok_or_else(|| String::from("12 of 0-9 and a-f, as stado mints it"))
            } else if KEYS.iter().any(|(k, _)| k == key) {
                stored_value(key, &text).map(drop)
            } else {
                // No command reads a key it does not know; a key of another version is harmless.
                Ok(())
            };
            checked.map_err(|rule| (key.clone(), rule))?;
        }
        Ok(())
    }

    /// Writes the profile back, atomically.
    pub fn save(&self, home: &Home) -> Result<(), Failure> {
        write_json(&home.profile_path(), self)
    }

    /// The text value of `key`, `None` when absent or empty.
    pub fn get(&self, key: &str) -> Option<String> {
        match self.values.get(key)? {
            Value::String(s) if s.trim().is_empty() => None,
            Value::String(s) => Some(s.trim().to_string()),
            Value::Null => None,
            Value::Array(a) => Some(
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect::<Vec<_>>()
                    .join(","),
            ),
            other => Some(other.to_string()),
        }
    }

    /// The list value of `key` (a JSON array, or a comma separated text).
    pub fn list(&self, key: &str) -> Vec<String> {
        match self.values.get(key) {
            Some(Value::Array(a)) => a
                .iter()
                .filter_map(|v| v.as_str())
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect(),
            Some(Value::String(s)) => split_list(s),
            _ => Vec::new(),
        }
    }

    /// Sets `key` from the text `value`, checking both: an unknown key names the known ones.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), Failure> {
        if key == HOME_ID {
            return Err(home_id_is_kept());
        }
        if !KEYS.iter().any(|(k, _)| *k == key) {
            return Err(Failure::invalid(format!(
                "{key:?} is not a profile key; the keys are {}",
                KEYS.iter().map(|(k, _)| *k).collect::<Vec<_>>().join(", ")
            )));
        }
        let stored = stored_value(key, value.trim()).map_err(|rule| {
            // An address refused may be one with a password in it: it is not repeated.
            let got = if URL_KEYS.contains(&key) {
                String::new()
            } else {
                format!(", got {value:?}")
            };
            Failure::invalid(format!("{key}: {rule}{got}"))
        })?;
        self.values.insert(key.to_string(), stored);
        Ok(())
    }

    /// Removes `key`; false when it was not set.
    pub fn unset(&mut self, key: &str) -> bool {
        self.values.remove(key).is_some()
    }

    /// The enabled providers of this invocation and the disabled ones.
    pub fn providers(&self, sel: &Selection) -> (Vec<String>, Vec<String>) {
        let list =
            |env: &Option<String>, key| env.as_deref().map_or_else(|| self.list(key), split_list);
        (
            list(&sel.providers, "providers"),
            list(&sel.disabled, "providers_disabled"),
        )
    }

    /// Refuses `kind` unless it is enabled (in providers, not in providers_disabled), saying what
    /// enables it: a change of the profile, or of the environment's selection for this invocation.
    pub fn check_enabled(&self, kind: &str, sel: &Selection) -> Result<(), Failure> {
        let (enabled, disabled) = self.providers(sel);
        let listed = enabled.iter().any(|p| p == kind);
        let off = disabled.iter().any(|p| p == kind);
        if listed && !off {
            return Ok(());
        }
        // Each list comes from the environment when it sets it, else from the profile: the change
        // that enables `kind` is made where the list that stops it comes from.
        let mut commands = Vec::new();
        let mut conditions = Vec::new();
        if !listed {
            if sel.providers.is_some() {
                conditions.push(format!("{PROVIDERS_ENV} names {kind}"));
            } else {
                let with: Vec<&str> = enabled.iter().map(String::as_str).chain([kind]).collect();
                commands.push(format!("stado config set providers {}", with.join(",")));
            }
        }
        if off {
            if sel.disabled.is_some() {
                conditions.push(format!("{DISABLED_ENV} does not name {kind}"));
            } else {
                let rest: Vec<&str> = disabled
                    .iter()
                    .map(String::as_str)
                    .filter(|p| *p != kind)
                    .collect();
                commands.push(if rest.is_empty() {
                    "stado config unset providers_disabled".to_string()
                } else {
                    format!("stado config set providers_disabled {}", rest.join(","))
                });
            }
        }
        let mut hints = Vec::new();
        if !commands.is_empty() {
            let verb = if commands.len() == 1 {
                "enables"
            } else {
                "enable"
            };
            hints.push(format!("{} {verb} it", commands.join(" and ")));
        }
        if !conditions.is_empty() {
            hints.push(format!(
                "this invocation enables it when {}",
                conditions.join(" and ")
            ));
        }
        let whence = if sel.providers.is_some() || sel.disabled.is_some() {
            format!(" as {PROVIDERS_ENV} / {DISABLED_ENV} select them for this invocation")
        } else {
            String::new()
        };
        Err(Failure::refused(format!(
            "the provider {kind} is not enabled in this profile (providers: {}; providers_disabled: {}){whence}; {}",
            list_or_none(&enabled),
            list_or_none(&disabled),
            hints.join("; ")
        )))
    }

    /// The keys of `keys` this profile does not declare.
    fn missing<'k>(&self, keys: &[&'k str]) -> Vec<&'k str> {
        keys.iter()
            .copied()
            .filter(|k| self.get(k).is_none())
            .collect()
    }

    /// Refuses when a compute binding is missing, naming every missing key.
    pub fn check_bindings(&self) -> Result<(), Failure> {
        let required: Vec<&str> = BINDINGS[..REQUIRED].iter().map(|(k, _)| *k).collect();
        let missing = self.missing(&required);
        if missing.is_empty() {
            return Ok(());
        }
        Err(Failure::refused(format!(
            "a cloud host on Azure is addressed with bindings this deployment does not declare: {}; stado config set declares each.",
            missing.join(", ")
        )))
    }

    /// The operator's floor ruling, or a refusal naming what is missing.
    pub fn floor(&self) -> Result<FloorRuling, Failure> {
        let keys = [
            "azure.credit_floor.amount",
            "azure.credit_floor.currency",
            "azure.credit_floor.ruling",
            "azure.credit_floor.words",
        ];
        let missing = self.missing(&keys);
        if !missing.is_empty() {
            return Err(Failure::refused(format!(
                "the Azure credit gate has no floor ruling from the operator: the profile does not declare {}; stado config set declares each",
                missing.join(", ")
            )));
        }
        let amount = self
            .values
            .get(keys[0])
            .and_then(Value::as_f64)
            .ok_or_else(|| {
                Failure::refused(
                    "azure.credit_floor.amount is not a number; stado config set declares it",
                )
            })?;
        Ok(FloorRuling {
            amount,
            currency: self.get(keys[1]).unwrap_or_default(),
            ruling: self.get(keys[2]).unwrap_or_default(),
            words: self.get(keys[3]).unwrap_or_default(),
        })
    }

    /// The locations a size is priced in: `azure.locations` and `location`.
    pub fn price_locations(&self, location: &str) -> Vec<String> {
        let mut v = self.list("azure.locations");
        if !v.iter().any(|l| l == location) {
            v.push(location.to_string());
        }
        v
    }

    /// The orca owner of this home's machines: `owner` when set, else `stado-<home_id>`.
    pub fn owner(&self) -> String {
        self.get("owner")
            .or_else(|| self.get(HOME_ID).map(|id| format!("stado-{id}")))
            .unwrap_or_else(|| "stado".to_string())
    }
}

/// The keys that hold an address.
const URL_KEYS: [&str; 3] = ["api.url", "azure.endpoint", "azure.prices_endpoint"];

/// The value `key` stores for the text `v`, or the rule `v` breaks.
fn stored_value(key: &str, v: &str) -> Result<Value, String> {
    // `v` kept as text when `ok`, else the rule it breaks.
    let text = |ok: bool, rule: &str| {
        ok.then(|| Value::String(v.to_string()))
            .ok_or_else(|| rule.to_string())
    };
    Ok(match key {
        "providers" | "providers_disabled" | "azure.locations" => {
            let items: Vec<String> = if v.starts_with('[') {
                serde_json::from_str::<Vec<String>>(v).map_err(|_| {
                    String::from("a list: comma separated, or a JSON array of texts")
                })?
            } else {
                split_list(v)
            };
            for i in &items {
                if !i
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                {
                    return Err(String::from("names of a-z, 0-9 and '-'"));
                }
                if key != "azure.locations" && !PROVIDERS.contains(&i.as_str()) {
                    return Err(format!("providers stado knows ({})", PROVIDERS.join(", ")));
                }
            }
            Value::Array(items.into_iter().map(Value::String).collect())
        }
        "azure.credit_floor.amount" => {
            let n: f64 = v.parse().map_err(|_| String::from("a number"))?;
            if !n.is_finite() || n < 0.0 {
                return Err(String::from("a number not below 0"));
            }
            serde_json::json!(n)
        }
        "azure.credit_floor.currency" => text(
            v.len() == 3 && v.bytes().all(|b| b.is_ascii_uppercase()),
            "an ISO 4217 code like USD",
        )?,
        "azure.vm_username" => text(
            !v.is_empty()
                && v.len() <= 32
                && v.as_bytes()[0].is_ascii_lowercase()
                && v.bytes().all(|b| {
                    b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-'
                })
                && v != "root"
                && v != "admin",
            "a Linux account name (a-z first, then a-z, 0-9, '_', '-'; not root or admin)",
        )?,
        "azure.image_urn" => text(
            v.split(':').count() == 4 && !v.split(':').any(str::is_empty),
            "publisher:offer:sku:version",
        )?,
        k if URL_KEYS.contains(&k) => {
            // orca's endpoint rule (plain http only to this machine; no user or password, which
            // every message naming the address would show); and nothing a shell reads, since
            // api.url goes into the curl line run on fleet hosts as it is written here.
            let ok = orca::kit::is_endpoint(v)
                && !v.contains(char::is_whitespace)
                && !v.contains(['\'', '"', '`', '$', ';', '\\']);
            if !ok {
                return Err(String::from(orca::kit::ENDPOINT_RULE));
            }
            Value::String(v.trim_end_matches('/').to_string())
        }
        "owner" => {
            orca::validate_owner(v).map_err(|e| e.to_string())?;
            Value::String(v.to_string())
        }
        _ => text(
            !v.is_empty() && !v.contains(char::is_control),
            "a value on one line",
        )?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_missing_binding_is_named_in_one_refusal() {
        let mut p = Profile::default();
        p.set("azure.subscription_id", "sub").unwrap();
        p.set("azure.vnet", "net").unwrap();
        let e = p.check_bindings().unwrap_err();
        assert_eq!(
            e.message(),
            "a cloud host on Azure is addressed with bindings this deployment does not declare: azure.resource_group, azure.subnet, azure.image_urn, azure.vm_username; stado config set declares each."
        );
    }

    #[test]
    fn the_environment_selects_providers_for_one_invocation() {
        let mut p = Profile::default();
        p.set("providers", "azure,fake").unwrap();
        assert!(p.check_enabled("azure", &Selection::default()).is_ok());
        let off = Selection {
            providers: None,
            disabled: Some("azure".into()),
        };
        let e = p.check_enabled("azure", &off).unwrap_err();
        assert!(e.message().contains("providers_disabled: azure"), "{e}");
        let only_fake = Selection {
            providers: Some("fake".into()),
            disabled: None,
        };
        assert!(p.check_enabled("azure", &only_fake).is_err());
        assert!(p.check_enabled("fake", &only_fake).is_ok());
        p.set("providers_disabled", "azure").unwrap();
        assert!(p.check_enabled("azure", &Selection::default()).is_err());
    }

    #[test]
    fn values_are_checked() {
        let mut p = Profile::default();
        assert!(p
            .set("azure.vnett", "x")
            .unwrap_err()
            .message()
            .contains("not a profile key"));
        assert!(p.set("azure.credit_floor.amount", "lots").is_err());
        assert!(p.set("azure.credit_floor.currency", "usd").is_err());
        assert!(p.set("azure.vm_username", "root").is_err());
        assert!(p.set("azure.image_urn", "Canonical:ubuntu").is_err());
        assert!(p.set("api.url", "http://example.com").is_err());
        assert!(p
            .set("home_id", "0123456789ab")
            .unwrap_err()
            .message()
            .starts_with("home_id is this stado home's identity"));
        p.set("api.url", "https://stado.example/").unwrap();
        assert_eq!(p.get("api.url").unwrap(), "https://stado.example");
    }

    #[test]
    fn plain_http_is_accepted_only_for_a_loopback_host() {
        let mut p = Profile::default();
        for key in ["api.url", "azure.endpoint", "azure.prices_endpoint"] {
            for no in [
                "http://localhost.example.net",
                "http://127.0.0.1.example.com",
                "http://localhost@evil.example",
                "http://127.0.0.1:80@evil.example/",
                "http://10.0.0.1",
                "https://ci:hunter22@stado.example",
            ] {
                let e = p
                    .set(key, no)
                    .expect_err(&format!("{key} = {no} must be refused"));
                assert!(!e.message().contains("hunter22"), "{e}");
            }
            for yes in [
                "http://127.0.0.1:8080",
                "http://localhost:9/api",
                "http://[::1]:5",
                "https://stado.example",
            ] {
                p.set(key, yes)
                    .unwrap_or_else(|e| panic!("{key} = {yes}: {e}"));
            }
        }
    }
}
