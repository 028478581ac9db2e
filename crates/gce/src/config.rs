//! Settings: from the environment ([`Config::from_env`], [`Config::from_env_names`]) or a builder
//! ([`Config::builder`]). A missing setting is an error naming every missing one; a setting given twice
//! (two credential sources) is an error naming both. Credentials never appear in `Debug` output.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use orca_machines::{Error, Result, RetryPolicy};
use secrecy::{ExposeSecret, SecretString};

/// The public Compute Engine API root.
pub const DEFAULT_ENDPOINT: &str = "https://compute.googleapis.com/compute/v1";
/// The project of the public Ubuntu images.
pub const UBUNTU_IMAGE_PROJECT: &str = "ubuntu-os-cloud";
/// The Ubuntu 24.04 LTS image family for amd64 machine types.
pub const UBUNTU_AMD64_FAMILY: &str = "ubuntu-2404-lts-amd64";
/// The Ubuntu 24.04 LTS image family for arm64 machine types.
pub const UBUNTU_ARM64_FAMILY: &str = "ubuntu-2404-lts-arm64";
/// The default boot disk size in GB.
pub const DEFAULT_DISK_GB: u32 = 20;
/// The default listing page size (`maxResults`); Compute Engine's own maximum.
pub const DEFAULT_PAGE_SIZE: u32 = 500;

/// Where the driver's access tokens come from.
#[derive(Clone)]
pub enum Credentials {
    /// A service account JSON key file at this path.
    ServiceAccountFile(PathBuf),
    /// A service account JSON key (the file's content).
    ServiceAccountJson(Arc<SecretString>),
    /// Application default credentials (gcp_auth's chain: `GOOGLE_APPLICATION_CREDENTIALS`, gcloud's
    /// application default credentials file, the metadata server, the `gcloud` command).
    ApplicationDefault,
    /// A token provider the caller built.
    Provider(Arc<dyn gcp_auth::TokenProvider>),
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credentials::ServiceAccountFile(p) => {
                f.debug_tuple("ServiceAccountFile").field(p).finish()
            }
            Credentials::ServiceAccountJson(_) => f.write_str("ServiceAccountJson(<redacted>)"),
            Credentials::ApplicationDefault => f.write_str("ApplicationDefault"),
            Credentials::Provider(_) => f.write_str("Provider(<token provider>)"),
        }
    }
}

/// The names of the environment variables [`Config::from_env_names`] reads.
///
/// The defaults are orca's own (`ORCA_GCE_*`); [`EnvNames::shed`] gives the names shed's remote
/// backend documents (`SHED_GCE_*`, `GOOGLE_CREDENTIALS_BASE64`). Every field can be changed, as
/// shed's `*_env` settings allow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvNames {
    /// The project id (required).
    pub project: String,
    /// The zone machines are made and listed in (required).
    pub zone: String,
    /// The VPC network of the machines' interface (required).
    pub network: String,
    /// The subnet of that network in the zone's region (required).
    pub subnet: String,
    /// A path to a service account JSON key (one credential source is required).
    pub credentials_file: String,
    /// The service account JSON key, base64-encoded.
    pub credentials_base64: String,
    /// `true` to use application default credentials.
    pub application_default: String,
    /// The API root, for tests (optional; default [`DEFAULT_ENDPOINT`]).
    pub endpoint: String,
    /// The boot disk size in GB (optional; default [`DEFAULT_DISK_GB`]).
    pub disk_gb: String,
    /// Comma-separated network tags for every machine (optional).
    pub network_tags: String,
    /// The longest a machine runs before Compute Engine stops it, as `90s`, `30m`, `24h`, `2d` or
    /// seconds (optional; none by default).
    pub max_run_duration: String,
    /// The listing page size, `maxResults`, 1 to 500 (optional; default 500).
    pub page_size: String,
    /// `false` to give machines no external address (optional; default `true`).
    pub public_ip: String,
}

impl Default for EnvNames {
    fn default() -> Self {
        EnvNames {
            project: "ORCA_GCE_PROJECT".into(),
            zone: "ORCA_GCE_ZONE".into(),
            network: "ORCA_GCE_NETWORK".into(),
            subnet: "ORCA_GCE_SUBNET".into(),
            credentials_file: "ORCA_GCE_CREDENTIALS_FILE".into(),
            credentials_base64: "ORCA_GCE_CREDENTIALS_BASE64".into(),
            application_default: "ORCA_GCE_APPLICATION_DEFAULT_CREDENTIALS".into(),
            endpoint: "ORCA_GCE_ENDPOINT".into(),
            disk_gb: "ORCA_GCE_DISK_GB".into(),
            network_tags: "ORCA_GCE_NETWORK_TAGS".into(),
            max_run_duration: "ORCA_GCE_MAX_RUN_DURATION".into(),
            page_size: "ORCA_GCE_PAGE_SIZE".into(),
            public_ip: "ORCA_GCE_PUBLIC_IP".into(),
        }
    }
}

impl EnvNames {
    /// The names shed's remote backend documents by default: `SHED_GCE_PROJECT`, `SHED_GCE_ZONE`,
    /// `SHED_GCE_NETWORK`, `SHED_GCE_SUBNET`, `GOOGLE_CREDENTIALS_BASE64` and
    /// `SHED_GCE_CREDENTIALS_FILE` (the optional ones keep their `ORCA_GCE_*` names).
    pub fn shed() -> Self {
        EnvNames {
            project: "SHED_GCE_PROJECT".into(),
            zone: "SHED_GCE_ZONE".into(),
            network: "SHED_GCE_NETWORK".into(),
            subnet: "SHED_GCE_SUBNET".into(),
            credentials_file: "SHED_GCE_CREDENTIALS_FILE".into(),
            credentials_base64: "GOOGLE_CREDENTIALS_BASE64".into(),
            ..EnvNames::default()
        }
    }
}

/// The Compute Engine driver's settings.
#[derive(Clone)]
pub struct Config {
    /// The project id.
    pub project: String,
    /// The zone machines are made and listed in (a spec's `location` must be this zone).
    pub zone: String,
    /// The VPC network name.
    pub network: String,
    /// The subnet name (in the zone's region).
    pub subnet: String,
    /// Where tokens come from.
    pub credentials: Credentials,
    /// The API root (`https://compute.googleapis.com/compute/v1`; a fake's for tests).
    pub endpoint: String,
    /// The boot disk size in GB (10 to 65,536).
    pub disk_gb: u32,
    /// Network tags every machine gets (firewall rules target them).
    pub network_tags: Vec<String>,
    /// The longest a machine runs before Compute Engine stops it (`scheduling.maxRunDuration`,
    /// termination action `STOP`).
    pub max_run_duration: Option<Duration>,
    /// The listing page size (`maxResults`, 1 to 500).
    pub page_size: u32,
    /// Whether machines get an external address (`ONE_TO_ONE_NAT`).
    pub public_ip: bool,
    /// The project of the default images.
    pub image_project: String,
    /// The retry policy of every call.
    pub retry: RetryPolicy,
    /// The longest the driver follows one operation.
    pub operation_timeout: Duration,
    /// The timeout of one HTTP request (an operation `wait` gets two and a half minutes).
    pub request_timeout: Duration,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("project", &self.project)
            .field("zone", &self.zone)
            .field("network", &self.network)
            .field("subnet", &self.subnet)
            .field("credentials", &self.credentials)
            .field("endpoint", &self.endpoint)
            .field("disk_gb", &self.disk_gb)
            .field("network_tags", &self.network_tags)
            .field("max_run_duration", &self.max_run_duration)
            .field("page_size", &self.page_size)
            .field("public_ip", &self.public_ip)
            .finish_non_exhaustive()
    }
}

impl Config {
    /// A builder.
    pub fn builder() -> ConfigBuilder {
        ConfigBuilder::default()
    }

    /// Settings from the `ORCA_GCE_*` environment variables (see [`EnvNames`]).
    pub fn from_env() -> Result<Config> {
        Config::from_env_names(&EnvNames::default())
    }

    /// Settings from the environment variables `names` gives.
    pub fn from_env_names(names: &EnvNames) -> Result<Config> {
        Config::from_lookup(names, |k| std::env::var(k).ok())
    }

    /// Settings from `lookup` (a variable's value, or `None`): what [`Config::from_env_names`] uses,
    /// for tests that must not touch the process environment. Empty values count as unset.
    pub fn from_lookup(
        names: &EnvNames,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Config> {
        let get = |k: &str| {
            lookup(k)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        let mut missing = Vec::new();
        let mut need = |k: &String| {
            let v = get(k);
            if v.is_none() {
                missing.push(k.clone());
            }
            v.unwrap_or_default()
        };
        let project = need(&names.project);
        let zone = need(&names.zone);
        let network = need(&names.network);
        let subnet = need(&names.subnet);
        let file = get(&names.credentials_file);
        let b64 = get(&names.credentials_base64);
        let adc = get(&names.application_default);
        let adc_on = match adc.as_deref() {
            None => false,
            Some(v) => parse_bool(v).ok_or_else(|| {
                Error::settings([names.application_default.clone()], "must be true or false")
            })?,
        };
        let given: Vec<String> = [
            (file.is_some(), &names.credentials_file),
            (b64.is_some(), &names.credentials_base64),
            (adc_on, &names.application_default),
        ]
        .iter()
        .filter(|(on, _)| *on)
        .map(|(_, k)| (*k).clone())
        .collect();
        if given.is_empty() {
            missing.push(format!(
                "{} or {} (or {}=true)",
                names.credentials_file, names.credentials_base64, names.application_default
            ));
        }
        if !missing.is_empty() {
            return Err(Error::settings(missing, "missing"));
        }
        if given.len() > 1 {
            return Err(Error::settings(
                given,
                "exactly one credential source must be set",
            ));
        }
        let credentials = if let Some(path) = file {
            Credentials::ServiceAccountFile(PathBuf::from(path))
        } else if let Some(b64) = b64 {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(b64.as_bytes())
                .or_else(|_| base64::engine::general_purpose::URL_SAFE.decode(b64.as_bytes()))
                .map_err(|_| {
                    Error::settings([names.credentials_base64.clone()], "is not valid base64")
                })?;
            let json = String::from_utf8(bytes).map_err(|_| {
                Error::settings(
                    [names.credentials_base64.clone()],
                    "does not decode to UTF-8 JSON",
                )
            })?;
            Credentials::ServiceAccountJson(Arc::new(SecretString::from(json)))
        } else {
            Credentials::ApplicationDefault
        };
        let mut b = Config::builder()
            .project(project)
            .zone(zone)
            .network(network)
            .subnet(subnet)
            .credentials(credentials);
        if let Some(e) = get(&names.endpoint) {
            b = b.endpoint(e);
        }
        if let Some(d) = get(&names.disk_gb) {
            let gb: u32 = d.parse().map_err(|_| {
                Error::settings([names.disk_gb.clone()], "must be a whole number of GB")
            })?;
            b = b.disk_gb(gb);
        }
        if let Some(t) = get(&names.network_tags) {
            b = b.network_tags(
                t.split(',')
                    .map(str::trim)
                    .filter(|t| !t.is_empty())
                    .map(str::to_string),
            );
        }
        if let Some(d) = get(&names.max_run_duration) {
            let d = parse_duration(&d).ok_or_else(|| {
                Error::settings(
                    [names.max_run_duration.clone()],
                    "must be a duration such as 90s, 30m, 24h, 2d or a number of seconds",
                )
            })?;
            b = b.max_run_duration(d);
        }
        if let Some(p) = get(&names.page_size) {
            let p: u32 = p.parse().map_err(|_| {
                Error::settings([names.page_size.clone()], "must be a number from 1 to 500")
            })?;
            b = b.page_size(p);
        }
        if let Some(p) = get(&names.public_ip) {
            let on = parse_bool(&p).ok_or_else(|| {
                Error::settings([names.public_ip.clone()], "must be true or false")
            })?;
            b = b.public_ip(on);
        }
        b.build_named(names)
    }
}

fn parse_bool(v: &str) -> Option<bool> {
    match v.to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Some(true),
        "0" | "false" | "no" | "off" => Some(false),
        _ => None,
    }
}

/// Parses `90s`, `30m`, `24h`, `2d` or plain seconds.
pub fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => (&s[..i], &s[i..]),
        None => (s, "s"),
    };
    let n: u64 = num.parse().ok()?;
    let mult = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return None,
    };
    Some(Duration::from_secs(n.checked_mul(mult)?))
}

/// Builds a [`Config`]; [`ConfigBuilder::build`] names every missing setting.
#[derive(Default, Clone)]
pub struct ConfigBuilder {
    project: Option<String>,
    zone: Option<String>,
    network: Option<String>,
    subnet: Option<String>,
    credentials: Vec<Credentials>,
    endpoint: Option<String>,
    disk_gb: Option<u32>,
    network_tags: Vec<String>,
    max_run_duration: Option<Duration>,
    page_size: Option<u32>,
    public_ip: Option<bool>,
    image_project: Option<String>,
    retry: Option<RetryPolicy>,
    operation_timeout: Option<Duration>,
    request_timeout: Option<Duration>,
}

impl std::fmt::Debug for ConfigBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfigBuilder")
            .field("project", &self.project)
            .field("zone", &self.zone)
            .field("credentials", &self.credentials)
            .finish_non_exhaustive()
    }
}

macro_rules! setter {
    ($(#[$doc:meta] $name:ident: $ty:ty),* $(,)?) => {$(
        #[$doc]
        pub fn $name(mut self, v: $ty) -> Self {
            self.$name = Some(v);
            self
        }
    )*};
}

macro_rules! string_setter {
    ($(#[$doc:meta] $name:ident),* $(,)?) => {$(
        #[$doc]
        pub fn $name(mut self, v: impl Into<String>) -> Self {
            self.$name = Some(v.into());
            self
        }
    )*};
}

impl ConfigBuilder {
    string_setter! {
        /// The project id (required).
        project,
        /// The zone (required).
        zone,
        /// The VPC network name (required).
        network,
        /// The subnet name (required).
        subnet,
        /// The API root (default [`DEFAULT_ENDPOINT`]).
        endpoint,
        /// The project of the default images (default `ubuntu-os-cloud`).
        image_project,
    }

    setter! {
        /// The boot disk size in GB (default [`DEFAULT_DISK_GB`]).
        disk_gb: u32,
        /// The longest a machine runs before Compute Engine stops it.
        max_run_duration: Duration,
        /// The listing page size, 1 to 500 (default 500).
        page_size: u32,
        /// Whether machines get an external address (default true).
        public_ip: bool,
        /// The retry policy (default [`RetryPolicy::default`]).
        retry: RetryPolicy,
        /// The longest the driver follows one operation (default 10 minutes).
        operation_timeout: Duration,
        /// The timeout of one HTTP request (default 60 s).
        request_timeout: Duration,
    }

    /// The credential source (exactly one).
    pub fn credentials(mut self, c: Credentials) -> Self {
        self.credentials.push(c);
        self
    }

    /// A service account JSON key file.
    pub fn credentials_file(self, path: impl Into<PathBuf>) -> Self {
        self.credentials(Credentials::ServiceAccountFile(path.into()))
    }

    /// A service account JSON key's content.
    pub fn credentials_json(self, json: impl Into<String>) -> Self {
        self.credentials(Credentials::ServiceAccountJson(Arc::new(
            SecretString::from(json.into()),
        )))
    }

    /// Application default credentials.
    pub fn application_default_credentials(self) -> Self {
        self.credentials(Credentials::ApplicationDefault)
    }

    /// Network tags every machine gets.
    pub fn network_tags<I, S>(mut self, tags: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.network_tags = tags.into_iter().map(Into::into).collect();
        self
    }

    /// The settings, or an error naming every missing or invalid one (by builder field name).
    pub fn build(self) -> Result<Config> {
        let names = EnvNames {
            project: "project".into(),
            zone: "zone".into(),
            network: "network".into(),
            subnet: "subnet".into(),
            credentials_file: "credentials_file".into(),
            credentials_base64: "credentials_json".into(),
            application_default: "application_default_credentials".into(),
            endpoint: "endpoint".into(),
            disk_gb: "disk_gb".into(),
            network_tags: "network_tags".into(),
            max_run_duration: "max_run_duration".into(),
            page_size: "page_size".into(),
            public_ip: "public_ip".into(),
        };
        self.build_named(&names)
    }

    fn build_named(self, names: &EnvNames) -> Result<Config> {
        let mut missing = Vec::new();
        let mut take = |v: Option<String>, k: &String| match v.filter(|v| !v.trim().is_empty()) {
            Some(v) => v.trim().to_string(),
            None => {
                missing.push(k.clone());
                String::new()
            }
        };
        let project = take(self.project, &names.project);
        let zone = take(self.zone, &names.zone);
        let network = take(self.network, &names.network);
        let subnet = take(self.subnet, &names.subnet);
        if self.credentials.is_empty() {
            missing.push("credentials".into());
        }
        if !missing.is_empty() {
            return Err(Error::settings(missing, "missing"));
        }
        if self.credentials.len() > 1 {
            return Err(Error::settings(
                ["credentials"],
                format!(
                    "exactly one credential source must be set, got {}",
                    self.credentials.len()
                ),
            ));
        }
        let bad = |k: &String, rule: &str| Error::settings([k.clone()], rule.to_string());
        if !valid_project(&project) {
            return Err(bad(&names.project, "not a project id"));
        }
        if !valid_zone(&zone) {
            return Err(bad(&names.zone, "not a zone name (like europe-west1-b)"));
        }
        if !valid_resource_name(&network) {
            return Err(bad(&names.network, "not a network name"));
        }
        if !valid_resource_name(&subnet) {
            return Err(bad(&names.subnet, "not a subnet name"));
        }
        let endpoint = self
            .endpoint
            .unwrap_or_else(|| DEFAULT_ENDPOINT.to_string())
            .trim_end_matches('/')
            .to_string();
        if !(endpoint.starts_with("https://") || endpoint.starts_with("http://")) {
            return Err(bad(&names.endpoint, "must be an http(s) URL"));
        }
        let disk_gb = self.disk_gb.unwrap_or(DEFAULT_DISK_GB);
        if !(10..=65_536).contains(&disk_gb) {
            return Err(bad(&names.disk_gb, "must be 10 to 65536 GB"));
        }
        for t in &self.network_tags {
            if !valid_resource_name(t) {
                return Err(bad(
                    &names.network_tags,
                    "each tag must be 1 to 63 of a-z, 0-9 and '-', starting with a letter",
                ));
            }
        }
        if let Some(d) = self.max_run_duration {
            if d < Duration::from_secs(30) || d > Duration::from_secs(120 * 86_400) {
                return Err(bad(
                    &names.max_run_duration,
                    "must be 30 seconds to 120 days",
                ));
            }
        }
        let page_size = self.page_size.unwrap_or(DEFAULT_PAGE_SIZE);
        if !(1..=500).contains(&page_size) {
            return Err(bad(&names.page_size, "must be 1 to 500"));
        }
        let credentials = self.credentials.into_iter().next().expect("one");
        if let Credentials::ServiceAccountJson(j) = &credentials {
            check_service_account_json(j.expose_secret())
                .map_err(|m| bad(&names.credentials_base64, &m))?;
        }
        Ok(Config {
            project,
            zone,
            network,
            subnet,
            credentials,
            endpoint,
            disk_gb,
            network_tags: self.network_tags,
            max_run_duration: self.max_run_duration,
            page_size,
            public_ip: self.public_ip.unwrap_or(true),
            image_project: self
                .image_project
                .unwrap_or_else(|| UBUNTU_IMAGE_PROJECT.to_string()),
            retry: self.retry.unwrap_or_default(),
            operation_timeout: self.operation_timeout.unwrap_or(Duration::from_secs(600)),
            request_timeout: self.request_timeout.unwrap_or(Duration::from_secs(60)),
        })
    }
}

/// Checks the shape of a service account key without echoing any of it.
fn check_service_account_json(json: &str) -> std::result::Result<(), String> {
    let v: serde_json::Value = serde_json::from_str(json)
        .map_err(|_| "is not a service account JSON key (not JSON)".to_string())?;
    let mut absent: Vec<&str> = ["private_key", "client_email", "token_uri"]
        .into_iter()
        .filter(|k| v.get(*k).and_then(|x| x.as_str()).is_none_or(str::is_empty))
        .collect();
    if v.get("type").and_then(|t| t.as_str()) != Some("service_account") {
        absent.insert(0, "type=service_account");
    }
    if absent.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "is not a service account JSON key (lacks {})",
            absent.join(", ")
        ))
    }
}

fn valid_project(p: &str) -> bool {
    // Project ids are 6 to 30 of a-z, 0-9 and '-'; domain-scoped ones add "example.com:".
    let id = p.rsplit(':').next().unwrap_or(p);
    !id.is_empty()
        && p.len() <= 100
        && p.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'.' | b':')
        })
}

fn valid_zone(z: &str) -> bool {
    z.split('-').count() == 3 && valid_resource_name(z)
}

/// A Compute Engine resource name: 1 to 63 of a-z, 0-9 and `-`, starting with a letter, not ending
/// with `-`.
pub(crate) fn valid_resource_name(n: &str) -> bool {
    let b = n.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_lowercase()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && !n.ends_with('-')
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    const SECRET: &str =
        "-----BEGIN PRIVATE KEY-----\\nSUPERSECRETKEYMATERIAL\\n-----END PRIVATE KEY-----\\n";

    fn sa_json() -> String {
        format!(
            r#"{{"type":"service_account","project_id":"p","private_key":"{SECRET}","client_email":"a@b.c","token_uri":"http://127.0.0.1:1/token"}}"#
        )
    }

    fn lookup(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn missing_settings_are_named_all_at_once() {
        let e = Config::from_lookup(
            &EnvNames::default(),
            lookup(&[("ORCA_GCE_ZONE", "europe-west1-b")]),
        )
        .unwrap_err();
        let Error::InvalidSettings { keys, .. } = &e else {
            panic!("{e:?}")
        };
        assert_eq!(keys.len(), 4, "{keys:?}");
        for k in ["ORCA_GCE_PROJECT", "ORCA_GCE_NETWORK", "ORCA_GCE_SUBNET"] {
            assert!(keys.iter().any(|x| x == k), "{k} not in {keys:?}");
        }
        assert!(keys[3].contains("ORCA_GCE_CREDENTIALS_FILE"));
        assert!(keys[3].contains("ORCA_GCE_CREDENTIALS_BASE64"));
    }

    #[test]
    fn shed_names_are_read() {
        let b64 = base64::engine::general_purpose::STANDARD.encode(sa_json());
        let c = Config::from_lookup(
            &EnvNames::shed(),
            lookup(&[
                ("SHED_GCE_PROJECT", "proj-1"),
                ("SHED_GCE_ZONE", "europe-west1-b"),
                ("SHED_GCE_NETWORK", "net"),
                ("SHED_GCE_SUBNET", "sub"),
                ("GOOGLE_CREDENTIALS_BASE64", &b64),
            ]),
        )
        .unwrap();
        assert_eq!(c.project, "proj-1");
        assert!(matches!(c.credentials, Credentials::ServiceAccountJson(_)));
        let d = format!("{c:?}");
        assert!(!d.contains("SUPERSECRET"), "{d}");
        assert!(!d.contains(&b64), "{d}");
    }

    #[test]
    fn two_credential_sources_are_named() {
        let b64 = base64::engine::general_purpose::STANDARD.encode(sa_json());
        let e = Config::from_lookup(
            &EnvNames::default(),
            lookup(&[
                ("ORCA_GCE_PROJECT", "proj-1"),
                ("ORCA_GCE_ZONE", "europe-west1-b"),
                ("ORCA_GCE_NETWORK", "net"),
                ("ORCA_GCE_SUBNET", "sub"),
                ("ORCA_GCE_CREDENTIALS_BASE64", &b64),
                ("ORCA_GCE_CREDENTIALS_FILE", "/tmp/key.json"),
            ]),
        )
        .unwrap_err();
        assert_eq!(
            e,
            Error::settings(
                ["ORCA_GCE_CREDENTIALS_FILE", "ORCA_GCE_CREDENTIALS_BASE64"],
                "exactly one credential source must be set"
            )
        );
        assert!(!e.to_string().contains("SUPERSECRET"));
        let e = Config::builder()
            .project("p1")
            .zone("europe-west1-b")
            .network("n")
            .subnet("s")
            .credentials_json(sa_json())
            .credentials_file("/k.json")
            .build()
            .unwrap_err();
        assert!(matches!(e, Error::InvalidSettings { ref keys, .. } if keys == &["credentials"]));
    }

    #[test]
    fn optional_settings_parse_and_bad_values_are_named() {
        let base = [
            ("ORCA_GCE_PROJECT", "proj-1"),
            ("ORCA_GCE_ZONE", "europe-west1-b"),
            ("ORCA_GCE_NETWORK", "net"),
            ("ORCA_GCE_SUBNET", "sub"),
            ("ORCA_GCE_CREDENTIALS_FILE", "/k.json"),
        ];
        let mut with = base.to_vec();
        with.extend([
            ("ORCA_GCE_NETWORK_TAGS", "shed-a, ssh"),
            ("ORCA_GCE_MAX_RUN_DURATION", "24h"),
            ("ORCA_GCE_PAGE_SIZE", "1"),
            ("ORCA_GCE_DISK_GB", "50"),
            ("ORCA_GCE_ENDPOINT", "http://127.0.0.1:9/compute/v1/"),
        ]);
        let c = Config::from_lookup(&EnvNames::default(), lookup(&with)).unwrap();
        assert_eq!(c.network_tags, ["shed-a", "ssh"]);
        assert_eq!(c.max_run_duration, Some(Duration::from_secs(86_400)));
        assert_eq!((c.page_size, c.disk_gb), (1, 50));
        assert_eq!(c.endpoint, "http://127.0.0.1:9/compute/v1");
        for (k, v) in [
            ("ORCA_GCE_PAGE_SIZE", "501"),
            ("ORCA_GCE_DISK_GB", "5"),
            ("ORCA_GCE_MAX_RUN_DURATION", "soon"),
            ("ORCA_GCE_NETWORK_TAGS", "Bad_Tag"),
            ("ORCA_GCE_ZONE", "nowhere"),
        ] {
            let mut bad = base.to_vec();
            bad.retain(|(x, _)| *x != k);
            bad.push((k, v));
            match Config::from_lookup(&EnvNames::default(), lookup(&bad)) {
                Err(Error::InvalidSettings { keys, .. }) => assert_eq!(keys, [k]),
                other => panic!("{k}={v} gave {other:?}"),
            }
        }
    }

    #[test]
    fn application_default_credentials_are_an_explicit_choice() {
        let base = [
            ("ORCA_GCE_PROJECT", "proj-1"),
            ("ORCA_GCE_ZONE", "europe-west1-b"),
            ("ORCA_GCE_NETWORK", "net"),
            ("ORCA_GCE_SUBNET", "sub"),
        ];
        let mut on = base.to_vec();
        on.push(("ORCA_GCE_APPLICATION_DEFAULT_CREDENTIALS", "true"));
        let c = Config::from_lookup(&EnvNames::default(), lookup(&on)).unwrap();
        assert!(matches!(c.credentials, Credentials::ApplicationDefault));
        let mut off = base.to_vec();
        off.push(("ORCA_GCE_APPLICATION_DEFAULT_CREDENTIALS", "false"));
        let e = Config::from_lookup(&EnvNames::default(), lookup(&off)).unwrap_err();
        assert!(e.to_string().contains("ORCA_GCE_CREDENTIALS_FILE"), "{e}");
        let mut bad = base.to_vec();
        bad.push(("ORCA_GCE_APPLICATION_DEFAULT_CREDENTIALS", "perhaps"));
        let e = Config::from_lookup(&EnvNames::default(), lookup(&bad)).unwrap_err();
        assert_eq!(
            e,
            Error::settings(
                ["ORCA_GCE_APPLICATION_DEFAULT_CREDENTIALS"],
                "must be true or false"
            )
        );
    }

    #[test]
    fn a_broken_key_is_refused_without_echoing_it() {
        let e = Config::builder()
            .project("p1")
            .zone("europe-west1-b")
            .network("n")
            .subnet("s")
            .credentials_json(r#"{"type":"service_account","private_key":"SUPERSECRET"}"#)
            .build()
            .unwrap_err();
        let t = e.to_string();
        assert!(
            t.contains("client_email") && !t.contains("SUPERSECRET"),
            "{t}"
        );
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90"), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("30m"), Some(Duration::from_secs(1800)));
        assert_eq!(parse_duration("2d"), Some(Duration::from_secs(172_800)));
        assert_eq!(parse_duration("1w"), None);
    }
}
