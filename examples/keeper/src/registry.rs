//! The Cloud-Provider and Cloud-Profile registries (runtime data in PostgreSQL, managed through the
//! operator REST API).
//!
//! A provider is a cloud account: a name, a driver (an orca kind), a `credentials_ref` (a vault path,
//! never resolved here), a region and an optional `fqdn_suffix`. A profile is a VM spec on top of a
//! provider. A provider that profiles depend on cannot be deleted (the foreign key is `ON DELETE
//! RESTRICT`: 409); a profile for a provider that does not exist is refused (422). Each write records
//! its audit event in the same transaction.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use deadpool_postgres::{GenericClient, Transaction};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::audit;
use crate::db::{begin, Db};
use crate::error::{db_error, invalid_by_orca, Error, Result};
use crate::fields::Fields;
use crate::vault::validate_ref;

/// SQLSTATE of a foreign key violation.
const FOREIGN_KEY_VIOLATION: &str = "23503";

/// A registered cloud account.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CloudProvider {
    /// Its name, which steps and profiles refer to.
    pub name: String,
    /// The orca kind of its driver (`fake`, `hetzner`, `ec2`, `azure`, `gce`).
    pub driver: String,
    /// The vault path of its credentials (never the credentials).
    pub credentials_ref: String,
    /// Its region: the default location of its VMs (and `AWS_REGION` for `ec2`).
    pub region: String,
    /// The DNS suffix its VMs' FQDNs end with (needed by `self_onboard`).
    pub fqdn_suffix: Option<String>,
    /// When it was registered.
    pub created_at: DateTime<Utc>,
}

/// A VM spec: what a profile holds, or what a step gives inline as `profile`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProfileSpec {
    /// The cloud's machine type (the size).
    pub machine_type: String,
    /// Where VMs go; the provider's region when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
    /// The boot image; the driver's own when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// The boot disk's size in GB; the driver's own when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_gb: Option<u32>,
    /// Labels set on every VM.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// SSH public keys of the login user.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ssh_keys: Vec<String>,
    /// Network tags (firewall targets).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub network_tags: Vec<String>,
}

/// The fields of a [`ProfileSpec`].
pub const PROFILE_SPEC_FIELDS: [&str; 7] = [
    "machine_type",
    "location",
    "image",
    "disk_gb",
    "labels",
    "ssh_keys",
    "network_tags",
];

impl ProfileSpec {
    /// Reads a spec from the fields of `f`, validating every option as orca does before any call.
    pub fn from_fields(f: &Fields<'_>) -> Result<Self> {
        let spec = ProfileSpec {
            machine_type: f.req_str("machine_type")?,
            location: f.str("location")?,
            image: f.str("image")?,
            disk_gb: f
                .int("disk_gb", 1, 65_536)?
                .map(|n| u32::try_from(n).unwrap_or(u32::MAX)),
            labels: f.str_map("labels")?.unwrap_or_default(),
            ssh_keys: f.str_list("ssh_keys")?.unwrap_or_default(),
            network_tags: f.str_list("network_tags")?.unwrap_or_default(),
        };
        let prefix = f.name("");
        // orca's rules quote the offending value: never one whose key marks it secret.
        let secrets: Vec<&str> = spec
            .labels
            .iter()
            .filter(|(k, _)| crate::mask::is_secret_key(k))
            .map(|(_, v)| v.as_str())
            .collect();
        let checked = spec.machine_spec("check", "check", "keeper", "").validate();
        if let Err(e) = checked {
            let e = match e {
                orca::Error::InvalidSpec { field, rule } => {
                    Error::invalid(format!("{prefix}{field}"), rule)
                }
                other => invalid_by_orca(prefix.trim_end_matches('.'), other),
            };
            return Err(e.scrub(secrets));
        }
        Ok(spec)
    }

    /// An inline spec: the JSON object `v` at `prefix` (`profile.`).
    pub fn parse(v: &Value, prefix: &str) -> Result<Self> {
        let f = Fields::new(v, "a profile", prefix, &PROFILE_SPEC_FIELDS)?;
        Self::from_fields(&f)
    }

    /// The orca spec of VM `name` from this profile, in `region` when the profile names no location.
    pub fn machine_spec(
        &self,
        name: &str,
        region: &str,
        pool: &str,
        user_data: &str,
    ) -> orca::MachineSpec {
        let location = self.location.as_deref().unwrap_or(region);
        let mut spec = orca::MachineSpec::new(name, &self.machine_type, location, pool)
            .with_user_data(user_data)
            .with_labels(&self.labels)
            .with_network_tags(&self.network_tags);
        spec.disk_gb = self.disk_gb;
        spec.image = self.image.clone();
        spec.ssh_keys = self.ssh_keys.clone();
        spec
    }
}

/// A registered VM spec on a provider.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CloudProfile {
    /// Its name.
    pub name: String,
    /// The provider it is for.
    pub provider: String,
    /// The VM spec.
    #[serde(flatten)]
    pub spec: ProfileSpec,
    /// When it was registered.
    pub created_at: DateTime<Utc>,
}

/// 404: no `what` (`provider`, `profile`) is named `name`.
pub fn not_found(what: &str, name: &str) -> Error {
    Error::not_found(
        &format!("{what}.not_found"),
        format!("no {what} named {name}"),
    )
}

/// 409 naming `name`: a `what` (`provider`, `profile`) of that name exists already.
fn exists(what: &str, name: &str) -> Error {
    let message = format!("a {what} named {name} exists already");
    Error::conflict(&format!("{what}.exists"), message).with_field("name")
}

/// 422 naming the parameter `what` (`provider`, `profile`): no such one named `name` is registered.
pub fn unregistered(what: &str, name: &str) -> Error {
    let message = format!("{what}: no {what} named {name} is registered");
    Error::new(422, format!("{what}.not_found"), message).with_field(what)
}

/// Checks a registry name (provider, profile): a hostname label, 1 to 63 of a-z, 0-9 and `-`.
pub fn validate_name(field: &str, name: &str) -> Result<()> {
    orca::validate_name(name).map_err(|e| invalid_by_orca(field, e))
}

/// Checks a DNS suffix: dot-separated hostname labels, at most 200 characters in all.
pub fn validate_fqdn_suffix(s: &str) -> Result<()> {
    let ok = !s.is_empty()
        && s.len() <= 200
        && s.split('.').all(|label| orca::validate_name(label).is_ok());
    ok.then_some(()).ok_or_else(|| {
        Error::invalid(
            "fqdn_suffix",
            format!("a DNS suffix: dot-separated labels of a-z, 0-9 and '-', at most 200 characters, got {}", orca::spec::quoted(s)),
        )
    })
}

/// Reads and validates a provider from a REST body.
pub fn parse_provider(body: &Value) -> Result<(String, String, String, String, Option<String>)> {
    let f = Fields::new(
        body,
        "a provider",
        "",
        &["name", "driver", "credentials_ref", "region", "fqdn_suffix"],
    )?;
    let name = f.req_str("name")?;
    validate_name("name", &name)?;
    let driver = f.req_str("driver")?;
    if !orca::ALL_KINDS.contains(&driver.as_str()) {
        return Err(Error::invalid(
            "driver",
            format!(
                "an orca kind, one of {}, got {}",
                orca::ALL_KINDS.join(", "),
                orca::spec::quoted(&driver)
            ),
        ));
    }
    let credentials_ref = f.req_str("credentials_ref")?;
    validate_ref(&credentials_ref)?;
    let region = f.req_str("region")?;
    orca::spec::validate_token("region", &region).map_err(|e| invalid_by_orca("region", e))?;
    let fqdn_suffix = f.str("fqdn_suffix")?;
    fqdn_suffix
        .as_deref()
        .map(validate_fqdn_suffix)
        .transpose()?;
    Ok((name, driver, credentials_ref, region, fqdn_suffix))
}

fn provider_of(r: &tokio_postgres::Row) -> CloudProvider {
    CloudProvider {
        name: r.get("name"),
        driver: r.get("driver"),
        credentials_ref: r.get("credentials_ref"),
        region: r.get("region"),
        fqdn_suffix: r.get("fqdn_suffix"),
        created_at: r.get("created_at"),
    }
}

fn profile_of(r: &tokio_postgres::Row) -> Result<CloudProfile> {
    let name: String = r.get("name");
    let spec: ProfileSpec = serde_json::from_value(r.get("spec")).map_err(|e| {
        Error::new(
            500,
            "registry.corrupt",
            format!("profile {name}: its stored spec is not a profile ({e})"),
        )
    })?;
    Ok(CloudProfile {
        name,
        provider: r.get("provider"),
        spec,
        created_at: r.get("created_at"),
    })
}

/// Writes `event` about `thing` (the payload's key `what`: `provider`, `profile`) in `tx` and
/// commits both: a registry change without its event never commits. Answers `thing`.
async fn commit_with_event<T: Serialize>(
    tx: Transaction<'_>,
    actor: &str,
    event: &str,
    what: &str,
    thing: T,
) -> Result<T> {
    audit::record(&tx, event, actor, "succeeded", &json!({ what: thing })).await?;
    let commit = format!("commit {what}");
    tx.commit().await.map_err(db_error(&commit))?;
    Ok(thing)
}

const PROVIDER_COLUMNS: &str = "name, driver, credentials_ref, region, fqdn_suffix, created_at";

/// Registers a provider from a REST body; records `provider.created`.
pub async fn create_provider(pool: &Db, actor: &str, body: &Value) -> Result<CloudProvider> {
    let (name, driver, credentials_ref, region, fqdn_suffix) = parse_provider(body)?;
    let mut client = pool.get().await?;
    let tx = begin(&mut client).await?;
    let row = tx
        .query_opt(
            &format!(
                "INSERT INTO keeper.cloud_providers (name, driver, credentials_ref, region, fqdn_suffix)
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT (name) DO NOTHING RETURNING {PROVIDER_COLUMNS}"
            ),
            &[&name, &driver, &credentials_ref, &region, &fqdn_suffix],
        )
        .await
        .map_err(db_error("insert provider"))?
        .ok_or_else(|| exists("provider", &name))?;
    let p = provider_of(&row);
    commit_with_event(tx, actor, "provider.created", "provider", p).await
}

/// Every provider, by name.
pub async fn list_providers<C: GenericClient>(c: &C) -> Result<Vec<CloudProvider>> {
    let sql = format!("SELECT {PROVIDER_COLUMNS} FROM keeper.cloud_providers ORDER BY name");
    let rows = c
        .query(&sql, &[])
        .await
        .map_err(db_error("list providers"))?;
    Ok(rows.iter().map(provider_of).collect())
}

/// Provider `name`, if registered.
pub async fn get_provider<C: GenericClient>(c: &C, name: &str) -> Result<Option<CloudProvider>> {
    let sql = format!("SELECT {PROVIDER_COLUMNS} FROM keeper.cloud_providers WHERE name = $1");
    let row = c
        .query_opt(&sql, &[&name])
        .await
        .map_err(db_error("read provider"))?;
    Ok(row.as_ref().map(provider_of))
}

/// Deletes provider `name`; 409 when profiles depend on it. Records `provider.deleted`.
pub async fn delete_provider(pool: &Db, actor: &str, name: &str) -> Result<CloudProvider> {
    let mut client = pool.get().await?;
    let tx = begin(&mut client).await?;
    let sql =
        format!("DELETE FROM keeper.cloud_providers WHERE name = $1 RETURNING {PROVIDER_COLUMNS}");
    let deleted = tx.query_opt(&sql, &[&name]).await;
    let row = match deleted {
        Ok(Some(row)) => row,
        Ok(None) => return Err(not_found("provider", name)),
        Err(e) if Error::sqlstate(&e) == Some(FOREIGN_KEY_VIOLATION) => {
            drop(tx);
            let sql = "SELECT name FROM keeper.cloud_profiles WHERE provider = $1 ORDER BY name";
            let deps: Vec<String> = client
                .query(sql, &[&name])
                .await
                .map(|rows| rows.iter().map(|r| r.get(0)).collect())
                .unwrap_or_default();
            return Err(Error::conflict(
                "provider.in_use",
                format!(
                    "provider {name} has profiles that depend on it ({}); delete them first (foreign key {}, ON DELETE RESTRICT)",
                    deps.join(", "),
                    e.as_db_error().and_then(|d| d.constraint()).unwrap_or("cloud_profiles_provider_fkey")
                ),
            ));
        }
        Err(e) => return Err(Error::db("delete provider", &e)),
    };
    let p = provider_of(&row);
    commit_with_event(tx, actor, "provider.deleted", "provider", p).await
}

/// Registers a profile from a REST body (`name`, `provider` and the spec's fields); 422 when the
/// provider does not exist. Records `profile.created`.
pub async fn create_profile(pool: &Db, actor: &str, body: &Value) -> Result<CloudProfile> {
    let mut allowed = vec!["name", "provider"];
    allowed.extend(PROFILE_SPEC_FIELDS);
    let f = Fields::new(body, "a profile", "", &allowed)?;
    let name = f.req_str("name")?;
    validate_name("name", &name)?;
    let provider = f.req_str("provider")?;
    validate_name("provider", &provider)?;
    let spec = ProfileSpec::from_fields(&f)?;
    let spec_json = serde_json::to_value(&spec)
        .map_err(|e| Error::new(500, "internal", format!("profile spec: {e}")))?;
    let mut client = pool.get().await?;
    let tx = begin(&mut client).await?;
    let sql = "INSERT INTO keeper.cloud_profiles (name, provider, spec) VALUES ($1, $2, $3)
             ON CONFLICT (name) DO NOTHING RETURNING name, provider, spec, created_at";
    let inserted = tx.query_opt(sql, &[&name, &provider, &spec_json]).await;
    let row = match inserted {
        Ok(Some(row)) => row,
        Ok(None) => return Err(exists("profile", &name)),
        Err(e) if Error::sqlstate(&e) == Some(FOREIGN_KEY_VIOLATION) => {
            return Err(unregistered("provider", &provider))
        }
        Err(e) => return Err(Error::db("insert profile", &e)),
    };
    let p = profile_of(&row)?;
    commit_with_event(tx, actor, "profile.created", "profile", p).await
}

/// Every profile, by name.
pub async fn list_profiles<C: GenericClient>(c: &C) -> Result<Vec<CloudProfile>> {
    let sql = "SELECT name, provider, spec, created_at FROM keeper.cloud_profiles ORDER BY name";
    let rows = c.query(sql, &[]).await.map_err(db_error("list profiles"))?;
    rows.iter().map(profile_of).collect()
}

/// Profile `name`, if registered.
pub async fn get_profile<C: GenericClient>(c: &C, name: &str) -> Result<Option<CloudProfile>> {
    let sql = "SELECT name, provider, spec, created_at FROM keeper.cloud_profiles WHERE name = $1";
    let row = c
        .query_opt(sql, &[&name])
        .await
        .map_err(db_error("read profile"))?;
    row.as_ref().map(profile_of).transpose()
}

/// Deletes profile `name`. Records `profile.deleted`.
pub async fn delete_profile(pool: &Db, actor: &str, name: &str) -> Result<CloudProfile> {
    let mut client = pool.get().await?;
    let tx = begin(&mut client).await?;
    let sql = "DELETE FROM keeper.cloud_profiles WHERE name = $1 RETURNING name, provider, spec, created_at";
    let row = tx
        .query_opt(sql, &[&name])
        .await
        .map_err(db_error("delete profile"))?
        .ok_or_else(|| not_found("profile", name))?;
    let p = profile_of(&row)?;
    commit_with_event(tx, actor, "profile.deleted", "profile", p).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_huge_value_is_cut_in_the_refusal_that_names_it() {
        let huge = "x".repeat(1 << 20);
        let ok = json!({"name": "lab", "driver": "fake", "credentials_ref": "fake/lab", "region": "zone-a"});
        for field in ["driver", "credentials_ref", "fqdn_suffix"] {
            let mut body = ok.clone();
            body[field] = json!(huge);
            let e = parse_provider(&body).unwrap_err();
            assert_eq!(e.field.as_deref(), Some(field));
            assert!(e.message.len() < 400, "{field}: {} bytes", e.message.len());
            assert!(e.message.contains("(1048576 bytes)"), "{}", e.message);
        }
        let e = crate::cloud::Action::from_step(&huge).unwrap_err();
        assert!(e.message.len() < 400 && e.message.contains("(1048576 bytes)"));
    }

    #[test]
    fn provider_validation_names_the_field() {
        let ok = json!({"name": "lab", "driver": "fake", "credentials_ref": "fake/lab", "region": "zone-a"});
        assert!(parse_provider(&ok).is_ok());
        for (patch, field) in [
            (json!({"name": "Lab"}), "name"),
            (json!({"driver": "nimbus"}), "driver"),
            (json!({"credentials_ref": "../etc"}), "credentials_ref"),
            (json!({"region": "a b"}), "region"),
            (json!({"fqdn_suffix": "-bad.example"}), "fqdn_suffix"),
            (json!({"secret": "x"}), "secret"),
            (json!({"region": null}), "region"),
        ] {
            let mut body = ok.clone();
            for (k, v) in patch.as_object().unwrap() {
                body[k] = v.clone();
            }
            let e = parse_provider(&body).unwrap_err();
            assert_eq!(e.field.as_deref(), Some(field), "{e}");
            assert_eq!(e.status, 422);
        }
    }

    #[test]
    fn profile_specs_are_checked_as_orca_checks_them() {
        let e = ProfileSpec::parse(&json!({"machine_type": "a b"}), "profile.").unwrap_err();
        assert_eq!(e.field.as_deref(), Some("profile.machine_type"));
        let e = ProfileSpec::parse(
            &json!({"machine_type": "t", "labels": {"orca-pool": "x"}}),
            "profile.",
        )
        .unwrap_err();
        assert_eq!(e.field.as_deref(), Some("profile.labels"));
        let e = ProfileSpec::parse(&json!({"machine_type": "t", "disk_gb": 0}), "profile.")
            .unwrap_err();
        assert_eq!(e.field.as_deref(), Some("profile.disk_gb"));
        let e = ProfileSpec::parse(
            &json!({"machine_type": "t", "labels": {"api-token": "Not-A-Label-Value-S3cret"}}),
            "profile.",
        )
        .unwrap_err();
        assert_eq!(e.field.as_deref(), Some("profile.labels"));
        assert!(!e.to_string().contains("S3cret"), "{e}");
        let s = ProfileSpec::parse(
            &json!({"machine_type": "amd64-small", "labels": {"team": "web"}, "disk_gb": 20}),
            "profile.",
        )
        .unwrap();
        let m = s.machine_spec("web-1", "zone-a", "keeper", "");
        assert_eq!(m.location, "zone-a");
        assert_eq!(m.options_used(), vec!["labels", "disk_gb"]);
    }
}
