//! Settings: from the environment ([`Settings::from_env`]) or a builder ([`Settings::builder`]).
//!
//! | variable | meaning |
//! | --- | --- |
//! | `ORCA_AZURE_SUBSCRIPTION_ID` (or `AZURE_SUBSCRIPTION_ID`) | the subscription (required) |
//! | `ORCA_AZURE_RESOURCE_GROUP` | the resource group machines are made in (required) |
//! | `ORCA_AZURE_VNET` | the virtual network's base name: a location's network is `<vnet>-<location>` (required) |
//! | `ORCA_AZURE_SUBNET` | the subnet in it (required) |
//! | `ORCA_AZURE_IMAGE` | image URN `publisher:offer:sku:version` (required) |
//! | `ORCA_AZURE_ADMIN_USER` | the VM's admin user name (required) |
//! | `ORCA_AZURE_SSH_PUBLIC_KEY` | the SSH public key put in that user's `authorized_keys` (required) |
//! | `ORCA_AZURE_IMAGE_ARM64` | the URN for Arm64 sizes (default: derived from `ORCA_AZURE_IMAGE`) |
//! | `ORCA_AZURE_VNET_RESOURCE_GROUP` | the network's resource group (default: `ORCA_AZURE_RESOURCE_GROUP`) |
//! | `ORCA_AZURE_ASG` | application security group every interface joins; `{location}` is replaced |
//! | `ORCA_AZURE_SSH_SOURCES` | addresses (IP or CIDR, comma separated) each VM's security group admits on TCP 22 |
//! | `ORCA_AZURE_OS_DISK_GB` | OS disk size in GiB (default: the image's) |
//! | `ORCA_AZURE_CREDENTIAL` | `auto` (default), `client_secret`, `managed_identity`, `azure_cli` |
//! | `AZURE_TENANT_ID`, `AZURE_CLIENT_ID`, `AZURE_CLIENT_SECRET` | a service principal (client secret) |
//! | `ORCA_AZURE_ACCESS_TOKEN` | a bearer token used as it is (tests; a token from `az account get-access-token`) |
//! | `ORCA_AZURE_ENDPOINT` | Resource Manager endpoint (default `https://management.azure.com`) |
//! | `ORCA_AZURE_PRICES_ENDPOINT` | retail prices endpoint (default `https://prices.azure.com`) |

use std::sync::Arc;
use std::time::Duration;

use orca_machines::{Arch, Error, Result, RetryPolicy};
use secrecy::SecretString;

use crate::credential::{self, StaticToken, TokenSource};

/// The default Resource Manager endpoint.
pub const DEFAULT_ARM_ENDPOINT: &str = "https://management.azure.com";
/// The default retail prices endpoint.
pub const DEFAULT_PRICES_ENDPOINT: &str = "https://prices.azure.com";

/// The required environment variables, in the order they are reported.
pub const REQUIRED_ENV: &[&str] = &[
    "ORCA_AZURE_SUBSCRIPTION_ID",
    "ORCA_AZURE_RESOURCE_GROUP",
    "ORCA_AZURE_VNET",
    "ORCA_AZURE_SUBNET",
    "ORCA_AZURE_IMAGE",
    "ORCA_AZURE_ADMIN_USER",
    "ORCA_AZURE_SSH_PUBLIC_KEY",
];

/// A marketplace image: `publisher:offer:sku:version`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageUrn {
    /// The publisher (`Canonical`).
    pub publisher: String,
    /// The offer (`ubuntu-24_04-lts`).
    pub offer: String,
    /// The SKU (`server`, `server-arm64`).
    pub sku: String,
    /// The version (`latest`).
    pub version: String,
}

impl ImageUrn {
    /// Parses `publisher:offer:sku:version`.
    pub fn parse(urn: &str) -> Result<ImageUrn> {
        let parts: Vec<&str> = urn.trim().split(':').collect();
        let ok = parts.len() == 4
            && parts.iter().all(|p| {
                !p.is_empty()
                    && p.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
            });
        if !ok {
            return Err(Error::settings(
                ["ORCA_AZURE_IMAGE"],
                format!("an image URN is publisher:offer:sku:version, got {urn:?}"),
            ));
        }
        Ok(ImageUrn {
            publisher: parts[0].into(),
            offer: parts[1].into(),
            sku: parts[2].into(),
            version: parts[3].into(),
        })
    }

    /// The Arm64 twin of this image: Canonical names it by the SKU with `-arm64` (`server` ->
    /// `server-arm64` for ubuntu-24_04-lts; `22_04-lts-gen2` -> `22_04-lts-arm64` for jammy).
    pub fn arm64(&self) -> ImageUrn {
        let lower = self.sku.to_ascii_lowercase();
        let sku = if lower.contains("arm64") {
            self.sku.clone()
        } else {
            let base = self
                .sku
                .strip_suffix("-gen2")
                .or_else(|| self.sku.strip_suffix("-gen1"))
                .unwrap_or(&self.sku);
            format!("{base}-arm64")
        };
        ImageUrn {
            sku,
            ..self.clone()
        }
    }
}

impl std::fmt::Display for ImageUrn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}:{}:{}",
            self.publisher, self.offer, self.sku, self.version
        )
    }
}

/// How to get a token.
#[derive(Clone, Default)]
pub enum Credential {
    /// Pick from the environment: a client secret when `AZURE_CLIENT_SECRET` is set, managed identity
    /// when `IDENTITY_ENDPOINT` or `MSI_ENDPOINT` is set, else the Azure CLI.
    #[default]
    Auto,
    /// A service principal's client secret.
    ClientSecret {
        /// Tenant id.
        tenant_id: String,
        /// Client (application) id.
        client_id: String,
        /// The secret.
        secret: SecretString,
    },
    /// The managed identity of the machine this runs on (optionally a user-assigned client id).
    ManagedIdentity {
        /// A user-assigned identity's client id.
        client_id: Option<String>,
    },
    /// The signed-in Azure CLI (`az account get-access-token`).
    AzureCli,
    /// A fixed bearer token, used as it is.
    Static(SecretString),
    /// A caller's own token source.
    Custom(Arc<dyn TokenSource>),
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credential::Auto => f.write_str("Auto"),
            Credential::ClientSecret {
                tenant_id,
                client_id,
                ..
            } => f
                .debug_struct("ClientSecret")
                .field("tenant_id", tenant_id)
                .field("client_id", client_id)
                .field("secret", &"<redacted>")
                .finish(),
            Credential::ManagedIdentity { client_id } => f
                .debug_struct("ManagedIdentity")
                .field("client_id", client_id)
                .finish(),
            Credential::AzureCli => f.write_str("AzureCli"),
            Credential::Static(_) => f.write_str("Static(<redacted>)"),
            Credential::Custom(c) => f.debug_tuple("Custom").field(c).finish(),
        }
    }
}

/// Everything the driver needs. Build with [`Settings::builder`] or read with [`Settings::from_env`].
#[derive(Clone)]
pub struct Settings {
    /// Subscription id.
    pub subscription_id: String,
    /// Resource group of the machines and their resources.
    pub resource_group: String,
    /// Resource group of the virtual networks.
    pub vnet_resource_group: String,
    /// The virtual network's base name (`<vnet>-<location>`).
    pub vnet: String,
    /// The subnet.
    pub subnet: String,
    /// The image for amd64 sizes.
    pub image: ImageUrn,
    /// The image for arm64 sizes.
    pub image_arm64: ImageUrn,
    /// Admin user name.
    pub admin_user: String,
    /// SSH public key (not secret, but long: shown shortened).
    pub ssh_public_key: String,
    /// Application security group name (`{location}` replaced), if interfaces join one.
    pub asg: Option<String>,
    /// Addresses admitted on TCP 22 by each VM's security group.
    pub ssh_sources: Vec<String>,
    /// OS disk size.
    pub os_disk_gb: Option<u32>,
    /// Resource Manager endpoint, without trailing slash.
    pub arm_endpoint: String,
    /// Retail prices endpoint, without trailing slash.
    pub prices_endpoint: String,
    /// How tokens are got.
    pub credential: Credential,
    /// The retry policy for every call.
    pub retry: RetryPolicy,
    /// The wait between polls of a long-running operation when Azure names none (Retry-After).
    pub poll_interval: Duration,
    /// The longest a long-running operation is followed before the call fails as transient.
    pub operation_timeout: Duration,
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let key = &self.ssh_public_key;
        let short = if key.len() > 24 {
            let head: String = key.chars().take(16).collect();
            format!("{head}...({} chars)", key.len())
        } else {
            key.clone()
        };
        f.debug_struct("Settings")
            .field("subscription_id", &self.subscription_id)
            .field("resource_group", &self.resource_group)
            .field("vnet_resource_group", &self.vnet_resource_group)
            .field("vnet", &self.vnet)
            .field("subnet", &self.subnet)
            .field("image", &self.image.to_string())
            .field("image_arm64", &self.image_arm64.to_string())
            .field("admin_user", &self.admin_user)
            .field("ssh_public_key", &short)
            .field("asg", &self.asg)
            .field("ssh_sources", &self.ssh_sources)
            .field("os_disk_gb", &self.os_disk_gb)
            .field("arm_endpoint", &self.arm_endpoint)
            .field("prices_endpoint", &self.prices_endpoint)
            .field("credential", &self.credential)
            .finish()
    }
}

impl Settings {
    /// A builder with nothing set.
    pub fn builder() -> SettingsBuilder {
        SettingsBuilder::default()
    }

    /// Reads every setting from the environment; a missing required one is an
    /// [`Error::InvalidSettings`] naming every missing variable at once.
    pub fn from_env() -> Result<Settings> {
        Self::from_lookup(|k| std::env::var(k).ok().filter(|v| !v.trim().is_empty()))
    }

    /// [`Settings::from_env`] over any lookup (tests use a map).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Settings> {
        let mut b = Settings::builder();
        b.subscription_id =
            get("ORCA_AZURE_SUBSCRIPTION_ID").or_else(|| get("AZURE_SUBSCRIPTION_ID"));
        b.resource_group = get("ORCA_AZURE_RESOURCE_GROUP");
        b.vnet_resource_group = get("ORCA_AZURE_VNET_RESOURCE_GROUP");
        b.vnet = get("ORCA_AZURE_VNET");
        b.subnet = get("ORCA_AZURE_SUBNET");
        b.image = get("ORCA_AZURE_IMAGE");
        b.image_arm64 = get("ORCA_AZURE_IMAGE_ARM64");
        b.admin_user = get("ORCA_AZURE_ADMIN_USER");
        b.ssh_public_key = get("ORCA_AZURE_SSH_PUBLIC_KEY");
        b.asg = get("ORCA_AZURE_ASG");
        if let Some(s) = get("ORCA_AZURE_SSH_SOURCES") {
            b.ssh_sources = s
                .split(',')
                .map(|x| x.trim().to_string())
                .filter(|x| !x.is_empty())
                .collect();
        }
        let mut bad: Vec<(String, String)> = Vec::new();
        if let Some(d) = get("ORCA_AZURE_OS_DISK_GB") {
            match d.trim().parse::<u32>() {
                Ok(n) => b.os_disk_gb = Some(n),
                Err(_) => bad.push((
                    "ORCA_AZURE_OS_DISK_GB".into(),
                    format!("not a number: {d:?}"),
                )),
            }
        }
        if let Some(e) = get("ORCA_AZURE_ENDPOINT") {
            b.arm_endpoint = Some(e);
        }
        if let Some(e) = get("ORCA_AZURE_PRICES_ENDPOINT") {
            b.prices_endpoint = Some(e);
        }
        let secret = get("AZURE_CLIENT_SECRET").map(SecretString::from);
        let choice = get("ORCA_AZURE_CREDENTIAL").unwrap_or_else(|| "auto".into());
        if let Some(t) = get("ORCA_AZURE_ACCESS_TOKEN") {
            b.credential = Credential::Static(SecretString::from(t));
        } else {
            let client_secret = |bad: &mut Vec<(String, String)>| {
                let mut missing = Vec::new();
                let tenant = get("AZURE_TENANT_ID");
                let client = get("AZURE_CLIENT_ID");
                if tenant.is_none() {
                    missing.push("AZURE_TENANT_ID");
                }
                if client.is_none() {
                    missing.push("AZURE_CLIENT_ID");
                }
                if secret.is_none() {
                    missing.push("AZURE_CLIENT_SECRET");
                }
                for m in &missing {
                    bad.push((
                        m.to_string(),
                        "missing (a client secret credential needs it)".into(),
                    ));
                }
                match (tenant, client, secret.clone()) {
                    (Some(tenant_id), Some(client_id), Some(secret)) => Credential::ClientSecret {
                        tenant_id,
                        client_id,
                        secret,
                    },
                    _ => Credential::Auto,
                }
            };
            b.credential = match choice.trim().to_ascii_lowercase().as_str() {
                "auto" | "" => {
                    if secret.is_some() {
                        client_secret(&mut bad)
                    } else if get("IDENTITY_ENDPOINT").is_some() || get("MSI_ENDPOINT").is_some() {
                        Credential::ManagedIdentity {
                            client_id: get("AZURE_CLIENT_ID"),
                        }
                    } else {
                        Credential::AzureCli
                    }
                }
                "client_secret" => client_secret(&mut bad),
                "managed_identity" => Credential::ManagedIdentity {
                    client_id: get("AZURE_CLIENT_ID"),
                },
                "azure_cli" => Credential::AzureCli,
                other => {
                    bad.push((
                        "ORCA_AZURE_CREDENTIAL".into(),
                        format!("one of auto, client_secret, managed_identity, azure_cli; got {other:?}"),
                    ));
                    Credential::Auto
                }
            };
        }
        match b.build() {
            Ok(s) if bad.is_empty() => Ok(s),
            Ok(_) => Err(settings_error(bad)),
            Err(Error::InvalidSettings { keys, message }) => {
                let mut all: Vec<(String, String)> =
                    keys.into_iter().map(|k| (k, message.clone())).collect();
                all.extend(bad);
                Err(settings_error(all))
            }
            Err(e) => Err(e),
        }
    }

    /// The image for `arch`.
    pub fn image_for(&self, arch: &Arch) -> Result<&ImageUrn> {
        match arch {
            Arch::Amd64 => Ok(&self.image),
            Arch::Arm64 => Ok(&self.image_arm64),
            Arch::Other(a) => Err(Error::Unsupported {
                provider: "azure".into(),
                operation: format!("machines of architecture {a}"),
            }),
        }
    }

    /// The application security group of `location`, if interfaces join one.
    pub fn asg_for(&self, location: &str) -> Option<String> {
        self.asg.as_ref().map(|a| a.replace("{location}", location))
    }

    /// The token source these settings name.
    pub(crate) fn token_source(&self) -> Result<Arc<dyn TokenSource>> {
        credential::source(&self.credential, &self.arm_endpoint)
    }
}

fn settings_error(bad: Vec<(String, String)>) -> Error {
    let message = bad
        .iter()
        .map(|(k, m)| format!("{k}: {m}"))
        .collect::<Vec<_>>()
        .join("; ");
    Error::settings(bad.into_iter().map(|(k, _)| k), message)
}

/// Builds [`Settings`]; [`SettingsBuilder::build`] names every missing required setting at once.
#[derive(Default, Clone)]
pub struct SettingsBuilder {
    subscription_id: Option<String>,
    resource_group: Option<String>,
    vnet_resource_group: Option<String>,
    vnet: Option<String>,
    subnet: Option<String>,
    image: Option<String>,
    image_arm64: Option<String>,
    admin_user: Option<String>,
    ssh_public_key: Option<String>,
    asg: Option<String>,
    ssh_sources: Vec<String>,
    os_disk_gb: Option<u32>,
    arm_endpoint: Option<String>,
    prices_endpoint: Option<String>,
    credential: Credential,
    retry: Option<RetryPolicy>,
    poll_interval: Option<Duration>,
    operation_timeout: Option<Duration>,
}

impl std::fmt::Debug for SettingsBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SettingsBuilder")
            .field("subscription_id", &self.subscription_id)
            .field("resource_group", &self.resource_group)
            .field("credential", &self.credential)
            .finish_non_exhaustive()
    }
}

macro_rules! setter {
    ($($name:ident: $doc:literal),* $(,)?) => {$(
        #[doc = $doc]
        pub fn $name(mut self, v: impl Into<String>) -> Self {
            self.$name = Some(v.into());
            self
        }
    )*};
}

impl SettingsBuilder {
    setter!(
        subscription_id: "The subscription id.",
        resource_group: "The resource group of the machines.",
        vnet_resource_group: "The resource group of the virtual networks (default: the machines').",
        vnet: "The virtual network's base name (`<vnet>-<location>`).",
        subnet: "The subnet.",
        image: "The image URN `publisher:offer:sku:version`.",
        image_arm64: "The image URN for Arm64 sizes (default: derived).",
        admin_user: "The admin user name.",
        ssh_public_key: "The SSH public key.",
        asg: "The application security group interfaces join (`{location}` replaced).",
        arm_endpoint: "The Resource Manager endpoint (tests: the fake's URL).",
        prices_endpoint: "The retail prices endpoint (tests: the fake's URL).",
    );

    /// The addresses each VM's security group admits on TCP 22.
    pub fn ssh_sources<I: IntoIterator<Item = S>, S: Into<String>>(mut self, v: I) -> Self {
        self.ssh_sources = v.into_iter().map(Into::into).collect();
        self
    }

    /// The OS disk size in GiB.
    pub fn os_disk_gb(mut self, gb: u32) -> Self {
        self.os_disk_gb = Some(gb);
        self
    }

    /// How tokens are got.
    pub fn credential(mut self, c: Credential) -> Self {
        self.credential = c;
        self
    }

    /// A fixed bearer token (tests).
    pub fn token(self, token: impl Into<String>) -> Self {
        self.credential(Credential::Static(SecretString::from(token.into())))
    }

    /// A caller's own token source.
    pub fn token_source(self, source: Arc<dyn TokenSource>) -> Self {
        self.credential(Credential::Custom(source))
    }

    /// The retry policy.
    pub fn retry(mut self, p: RetryPolicy) -> Self {
        self.retry = Some(p);
        self
    }

    /// The wait between polls when Azure names none.
    pub fn poll_interval(mut self, d: Duration) -> Self {
        self.poll_interval = Some(d);
        self
    }

    /// The longest a long-running operation is followed.
    pub fn operation_timeout(mut self, d: Duration) -> Self {
        self.operation_timeout = Some(d);
        self
    }

    /// The settings, or an [`Error::InvalidSettings`] naming every missing or invalid one.
    pub fn build(self) -> Result<Settings> {
        let mut missing = Vec::new();
        let req = |v: &Option<String>, key: &'static str, missing: &mut Vec<&'static str>| match v
            .as_ref()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
        {
            Some(s) => s,
            None => {
                missing.push(key);
                String::new()
            }
        };
        let subscription_id = req(&self.subscription_id, REQUIRED_ENV[0], &mut missing);
        let resource_group = req(&self.resource_group, REQUIRED_ENV[1], &mut missing);
        let vnet = req(&self.vnet, REQUIRED_ENV[2], &mut missing);
        let subnet = req(&self.subnet, REQUIRED_ENV[3], &mut missing);
        let image = req(&self.image, REQUIRED_ENV[4], &mut missing);
        let admin_user = req(&self.admin_user, REQUIRED_ENV[5], &mut missing);
        let ssh_public_key = req(&self.ssh_public_key, REQUIRED_ENV[6], &mut missing);
        if !missing.is_empty() {
            return Err(Error::settings(missing, "missing"));
        }
        let mut bad: Vec<(String, String)> = Vec::new();
        let name_ok = |s: &str| {
            !s.is_empty()
                && s.len() <= 90
                && s.bytes().all(|b| {
                    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'(' | b')')
                })
        };
        for (k, v) in [
            (REQUIRED_ENV[0], &subscription_id),
            (REQUIRED_ENV[1], &resource_group),
            (REQUIRED_ENV[2], &vnet),
            (REQUIRED_ENV[3], &subnet),
        ] {
            if !name_ok(v) {
                bad.push((
                    k.into(),
                    format!("letters, digits, '.', '_', '-', got {v:?}"),
                ));
            }
        }
        if let Some(g) = &self.vnet_resource_group {
            if !name_ok(g) {
                bad.push((
                    "ORCA_AZURE_VNET_RESOURCE_GROUP".into(),
                    format!("invalid name {g:?}"),
                ));
            }
        }
        if !admin_user
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
            || admin_user.len() > 32
            || admin_user == "root"
            || admin_user == "admin"
        {
            bad.push((
                REQUIRED_ENV[5].into(),
                format!(
                    "a Linux user name (a-z, 0-9, '_', '-'; not root or admin), got {admin_user:?}"
                ),
            ));
        }
        if !(ssh_public_key.starts_with("ssh-") || ssh_public_key.starts_with("ecdsa-"))
            || ssh_public_key.split_whitespace().count() < 2
        {
            bad.push((
                REQUIRED_ENV[6].into(),
                "an OpenSSH public key line (ssh-ed25519 AAAA... or ssh-rsa AAAA...)".into(),
            ));
        }
        let image = match ImageUrn::parse(&image) {
            Ok(i) => Some(i),
            Err(e) => {
                bad.push((REQUIRED_ENV[4].into(), e.to_string()));
                None
            }
        };
        let image_arm64 = match &self.image_arm64 {
            Some(u) => match ImageUrn::parse(u) {
                Ok(i) => Some(i),
                Err(e) => {
                    bad.push(("ORCA_AZURE_IMAGE_ARM64".into(), e.to_string()));
                    None
                }
            },
            None => image.as_ref().map(ImageUrn::arm64),
        };
        if let Some(a) = &self.asg {
            if !name_ok(&a.replace("{location}", "x")) {
                bad.push(("ORCA_AZURE_ASG".into(), format!("invalid name {a:?}")));
            }
        }
        for s in &self.ssh_sources {
            if crate::admission::check_source(s).is_err() {
                bad.push((
                    "ORCA_AZURE_SSH_SOURCES".into(),
                    format!("not an IP address or CIDR: {s:?}"),
                ));
            }
        }
        let endpoint =
            |v: Option<String>, def: &str, key: &str, bad: &mut Vec<(String, String)>| {
                let e = v
                    .unwrap_or_else(|| def.to_string())
                    .trim()
                    .trim_end_matches('/')
                    .to_string();
                if !(e.starts_with("https://")
                    || e.starts_with("http://127.0.0.1")
                    || e.starts_with("http://localhost"))
                {
                    bad.push((
                        key.into(),
                        format!("https:// (or http://127.0.0.1 for tests), got {e:?}"),
                    ));
                }
                e
            };
        let arm_endpoint = endpoint(
            self.arm_endpoint,
            DEFAULT_ARM_ENDPOINT,
            "ORCA_AZURE_ENDPOINT",
            &mut bad,
        );
        let prices_endpoint = endpoint(
            self.prices_endpoint,
            DEFAULT_PRICES_ENDPOINT,
            "ORCA_AZURE_PRICES_ENDPOINT",
            &mut bad,
        );
        if !bad.is_empty() {
            return Err(settings_error(bad));
        }
        let (Some(image), Some(image_arm64)) = (image, image_arm64) else {
            return Err(Error::settings([REQUIRED_ENV[4]], "invalid image"));
        };
        Ok(Settings {
            vnet_resource_group: self
                .vnet_resource_group
                .unwrap_or_else(|| resource_group.clone()),
            subscription_id,
            resource_group,
            vnet,
            subnet,
            image,
            image_arm64,
            admin_user,
            ssh_public_key,
            asg: self.asg,
            ssh_sources: self.ssh_sources,
            os_disk_gb: self.os_disk_gb,
            arm_endpoint,
            prices_endpoint,
            credential: self.credential,
            retry: self.retry.unwrap_or_default(),
            poll_interval: self.poll_interval.unwrap_or(Duration::from_secs(2)),
            operation_timeout: self
                .operation_timeout
                .unwrap_or(Duration::from_secs(30 * 60)),
        })
    }
}

/// A static token source, for [`Credential::Static`].
pub(crate) fn static_source(t: &SecretString) -> Arc<dyn TokenSource> {
    Arc::new(StaticToken::new(t.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn full() -> HashMap<&'static str, String> {
        HashMap::from([
            ("ORCA_AZURE_SUBSCRIPTION_ID", "sub-1".to_string()),
            ("ORCA_AZURE_RESOURCE_GROUP", "rg".to_string()),
            ("ORCA_AZURE_VNET", "net".to_string()),
            ("ORCA_AZURE_SUBNET", "hosts".to_string()),
            (
                "ORCA_AZURE_IMAGE",
                "Canonical:ubuntu-24_04-lts:server:latest".to_string(),
            ),
            ("ORCA_AZURE_ADMIN_USER", "stado".to_string()),
            (
                "ORCA_AZURE_SSH_PUBLIC_KEY",
                "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIG4 me@host".to_string(),
            ),
        ])
    }

    fn read(m: &HashMap<&'static str, String>) -> Result<Settings> {
        Settings::from_lookup(|k| m.get(k).cloned())
    }

    #[test]
    fn every_missing_key_is_named_at_once() {
        let e = read(&HashMap::new()).unwrap_err();
        let Error::InvalidSettings { keys, .. } = &e else {
            panic!("{e:?}")
        };
        assert_eq!(
            keys,
            &REQUIRED_ENV
                .iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>()
        );
        let mut m = full();
        m.remove("ORCA_AZURE_VNET");
        m.remove("ORCA_AZURE_SSH_PUBLIC_KEY");
        let e = read(&m).unwrap_err().to_string();
        assert!(
            e.contains("ORCA_AZURE_VNET, ORCA_AZURE_SSH_PUBLIC_KEY"),
            "{e}"
        );
    }

    #[test]
    fn azure_subscription_id_is_read_too() {
        let mut m = full();
        let sub = m.remove("ORCA_AZURE_SUBSCRIPTION_ID").unwrap();
        m.insert("AZURE_SUBSCRIPTION_ID", sub);
        assert_eq!(read(&m).unwrap().subscription_id, "sub-1");
    }

    #[test]
    fn arm64_image_is_derived_from_canonical_names() {
        let s = read(&full()).unwrap();
        assert_eq!(
            s.image_arm64.to_string(),
            "Canonical:ubuntu-24_04-lts:server-arm64:latest"
        );
        let jammy = ImageUrn::parse("Canonical:0001-com-ubuntu-server-jammy:22_04-lts-gen2:latest")
            .unwrap();
        assert_eq!(jammy.arm64().sku, "22_04-lts-arm64");
        let mut m = full();
        m.insert("ORCA_AZURE_IMAGE_ARM64", "Canonical:x:y-arm:1".into());
        assert_eq!(read(&m).unwrap().image_arm64.sku, "y-arm");
    }

    #[test]
    fn invalid_values_are_named() {
        let mut m = full();
        m.insert("ORCA_AZURE_IMAGE", "Canonical:ubuntu".into());
        m.insert("ORCA_AZURE_SSH_SOURCES", "1.2.3.4, bogus".into());
        m.insert("ORCA_AZURE_CREDENTIAL", "client_secret".into());
        let e = read(&m).unwrap_err();
        let Error::InvalidSettings { keys, .. } = &e else {
            panic!("{e:?}")
        };
        for k in [
            "ORCA_AZURE_IMAGE",
            "ORCA_AZURE_SSH_SOURCES",
            "AZURE_TENANT_ID",
            "AZURE_CLIENT_ID",
            "AZURE_CLIENT_SECRET",
        ] {
            assert!(keys.iter().any(|x| x == k), "{k} not in {keys:?}");
        }
    }

    #[test]
    fn secrets_are_redacted() {
        let mut m = full();
        m.insert("AZURE_TENANT_ID", "tenant".into());
        m.insert("AZURE_CLIENT_ID", "client".into());
        m.insert("AZURE_CLIENT_SECRET", "hunter2-client-secret".into());
        let s = read(&m).unwrap();
        assert!(matches!(s.credential, Credential::ClientSecret { .. }));
        let d = format!("{s:?}");
        assert!(!d.contains("hunter2"), "{d}");
        assert!(d.contains("<redacted>"), "{d}");
        let mut m = full();
        m.insert("ORCA_AZURE_ACCESS_TOKEN", "eyJ-static-token-value".into());
        let s = read(&m).unwrap();
        let d = format!(
            "{s:?} {:?}",
            Settings::builder().token("eyJ-static-token-value")
        );
        assert!(!d.contains("eyJ-static"), "{d}");
    }

    #[test]
    fn plain_http_is_only_for_loopback() {
        let mut m = full();
        m.insert("ORCA_AZURE_ENDPOINT", "http://example.com".into());
        assert!(read(&m)
            .unwrap_err()
            .to_string()
            .contains("ORCA_AZURE_ENDPOINT"));
        m.insert("ORCA_AZURE_ENDPOINT", "http://127.0.0.1:8080/".into());
        assert_eq!(read(&m).unwrap().arm_endpoint, "http://127.0.0.1:8080");
    }
}
