//! Settings as data: the keys ([`ConfigKey`], named as the environment variables), read from the
//! environment ([`Config::from_env`]), from a map ([`Config::from_settings`]) or set in code
//! ([`Config::builder`]). Every problem of a set of settings is named at once
//! ([`orca_machines::settings::Problems`]); nothing is read from the network.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use orca_machines::kit::{
    parse_positive_duration, ClientOptions, ClientSettings, Timeouts, POSITIVE_DURATION_RULE,
};
use orca_machines::settings::Problems;
use orca_machines::{Arch, Error, Result, RetryPolicy, Settings};
use secrecy::SecretString;

use crate::credential::{self, TokenSource};

orca_machines::setting_keys! {
    /// A setting of the Azure driver, by the name of its environment variable (as object_store's
    /// `AmazonS3ConfigKey`). The same names key [`Settings`] maps.
    pub enum ConfigKey for "azure" {
        /// `ORCA_AZURE_SUBSCRIPTION_ID`: the subscription. Required (or [`ConfigKey::AzureSubscriptionId`]).
        SubscriptionId = "ORCA_AZURE_SUBSCRIPTION_ID",
        /// `AZURE_SUBSCRIPTION_ID`: the subscription, Azure's own name; read when
        /// [`ConfigKey::SubscriptionId`] is unset.
        AzureSubscriptionId = "AZURE_SUBSCRIPTION_ID",
        /// `ORCA_AZURE_RESOURCE_GROUP`: the resource group machines are made in (it must exist). Required.
        ResourceGroup = "ORCA_AZURE_RESOURCE_GROUP",
        /// `ORCA_AZURE_VNET`: the virtual network's base name; a location's network is
        /// `<vnet>-<location>` (orca makes no network). Required.
        Vnet = "ORCA_AZURE_VNET",
        /// `ORCA_AZURE_SUBNET`: the subnet in it. Required.
        Subnet = "ORCA_AZURE_SUBNET",
        /// `ORCA_AZURE_IMAGE`: the image URN `publisher:offer:sku:version` for amd64 sizes. Required.
        Image = "ORCA_AZURE_IMAGE",
        /// `ORCA_AZURE_ADMIN_USER`: the VM's admin user (not `root` or `admin`). Required.
        AdminUser = "ORCA_AZURE_ADMIN_USER",
        /// `ORCA_AZURE_SSH_PUBLIC_KEY`: an OpenSSH public key every VM's admin user accepts, beside the
        /// spec's own keys (a create with no key at all is refused: passwords are off).
        SshPublicKey = "ORCA_AZURE_SSH_PUBLIC_KEY",
        /// `ORCA_AZURE_IMAGE_ARM64`: the image URN for Arm64 sizes (default: derived from the image).
        ImageArm64 = "ORCA_AZURE_IMAGE_ARM64",
        /// `ORCA_AZURE_VNET_RESOURCE_GROUP`: the networks' resource group (default: the machines').
        VnetResourceGroup = "ORCA_AZURE_VNET_RESOURCE_GROUP",
        /// `ORCA_AZURE_SSH_SOURCES`: comma-separated IPs or CIDR blocks each VM's own security group
        /// admits on TCP 22 when the spec names none.
        SshSources = "ORCA_AZURE_SSH_SOURCES",
        /// `ORCA_AZURE_OS_DISK_GB`: the OS disk's size in GiB when the spec names none (default: the
        /// image's).
        OsDiskGb = "ORCA_AZURE_OS_DISK_GB",
        /// `ORCA_AZURE_LOCATION`: the location whose size catalogue `arch()` reads before any create has
        /// named one (default `westeurope`).
        Location = "ORCA_AZURE_LOCATION",
        /// `ORCA_AZURE_CREDENTIAL`: `auto` (default), `client_secret`, `workload_identity`,
        /// `managed_identity` or `azure_cli`.
        Credential = "ORCA_AZURE_CREDENTIAL",
        /// `AZURE_TENANT_ID`: the tenant of a service principal or workload identity.
        TenantId = "AZURE_TENANT_ID",
        /// `AZURE_CLIENT_ID`: the client id of a service principal, workload identity or user-assigned
        /// managed identity.
        ClientId = "AZURE_CLIENT_ID",
        /// `AZURE_CLIENT_SECRET`: a service principal's secret. Secret.
        ClientSecret = "AZURE_CLIENT_SECRET" secret,
        /// `AZURE_FEDERATED_TOKEN_FILE`: the file holding a workload identity's federated token (set by
        /// Kubernetes); `auto` picks workload identity when it is set.
        FederatedTokenFile = "AZURE_FEDERATED_TOKEN_FILE",
        /// `IDENTITY_ENDPOINT`: set by App Service and Azure Arc; `auto` picks managed identity.
        IdentityEndpoint = "IDENTITY_ENDPOINT",
        /// `MSI_ENDPOINT`: set by Cloud Shell and Azure ML; `auto` picks managed identity.
        MsiEndpoint = "MSI_ENDPOINT",
        /// `ORCA_AZURE_ACCESS_TOKEN`: a bearer token used as it is; wins over every other credential.
        /// Secret.
        AccessToken = "ORCA_AZURE_ACCESS_TOKEN" secret,
        /// `ORCA_AZURE_ENDPOINT`: the Resource Manager endpoint (default `https://management.azure.com`;
        /// `http://` only for 127.0.0.1 and localhost).
        Endpoint = "ORCA_AZURE_ENDPOINT",
        /// `ORCA_AZURE_PRICES_ENDPOINT`: the Retail Prices endpoint (default `https://prices.azure.com`).
        PricesEndpoint = "ORCA_AZURE_PRICES_ENDPOINT",
        /// `ORCA_AZURE_BILLING_ACCOUNT`: the billing account whose credit `credit_balance()` reads
        /// (with [`ConfigKey::BillingProfile`]).
        BillingAccount = "ORCA_AZURE_BILLING_ACCOUNT",
        /// `ORCA_AZURE_BILLING_PROFILE`: the billing profile of that account.
        BillingProfile = "ORCA_AZURE_BILLING_PROFILE",
        /// `ORCA_AZURE_PUBLIC_IP`: `true` (default) gives each machine a static public address
        /// `<name>-ip`; `false` makes machines without one (where a policy denies public addresses, as
        /// the Corp policies of Azure landing zones do): their `address` is empty, their private
        /// address is theirs.
        PublicIp = "ORCA_AZURE_PUBLIC_IP",
        /// `ORCA_AZURE_RESERVATION_WAIT`: the longest a failed create's clean-up waits for an
        /// interface Azure holds for the failed VM (about 180 s) before it names it left behind
        /// (`200s`, `5m`; default 200 s; [`ConfigBuilder::reservation_wait`] wins).
        ReservationWait = "ORCA_AZURE_RESERVATION_WAIT",
    }
}

impl ConfigKey {
    /// Every key the credential is read from ([`Credential`]): what a program takes from where its
    /// credentials live (its own environment, say) while the rest of the settings come from elsewhere
    /// (a profile, a database row).
    pub const CREDENTIAL: [ConfigKey; 8] = [
        ConfigKey::Credential,
        ConfigKey::FederatedTokenFile,
        ConfigKey::AccessToken,
        ConfigKey::TenantId,
        ConfigKey::ClientId,
        ConfigKey::ClientSecret,
        ConfigKey::IdentityEndpoint,
        ConfigKey::MsiEndpoint,
    ];
}

/// The default Resource Manager endpoint.
pub const DEFAULT_ARM_ENDPOINT: &str = "https://management.azure.com";
/// The default Retail Prices endpoint.
pub const DEFAULT_PRICES_ENDPOINT: &str = "https://prices.azure.com";
/// The longest wait for a connection to Resource Manager when nothing sets one.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(20);
/// The longest wait for one Resource Manager answer when nothing sets one.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(120);
/// The location `arch()` reads the size catalogue of when [`ConfigKey::Location`] is unset.
pub const DEFAULT_LOCATION: &str = "westeurope";
/// The default of [`ConfigBuilder::visibility_window`] (and `ORCA_VISIBILITY_WINDOW`).
const VISIBILITY: Duration = Duration::from_secs(60);

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

/// The rule an image URN follows.
pub const URN_RULE: &str =
    "an image URN publisher:offer:sku:version of letters, digits, '.', '_' and '-'";

impl ImageUrn {
    /// Parses `publisher:offer:sku:version`; the error is the rule.
    pub fn parse(urn: &str) -> std::result::Result<ImageUrn, String> {
        let parts: Vec<&str> = urn.trim().split(':').collect();
        let ok = parts.len() == 4
            && parts.iter().all(|p| {
                !p.is_empty()
                    && p.len() <= 128
                    && p.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
            });
        if !ok {
            return Err(format!("{URN_RULE}, got {urn:?}"));
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
        let sku = if self.sku.to_ascii_lowercase().contains("arm64") {
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

/// How to get a Resource Manager token.
#[derive(Clone, Default)]
#[non_exhaustive]
pub enum Credential {
    /// Find one (see [`crate::credential`]): a client secret when `AZURE_CLIENT_SECRET` is given,
    /// workload identity when `AZURE_FEDERATED_TOKEN_FILE` is, managed identity when
    /// `IDENTITY_ENDPOINT` or `MSI_ENDPOINT` is or the instance metadata service answers, else the
    /// Azure CLI.
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
    /// A workload identity: a federated token in a file, exchanged for an Entra token.
    WorkloadIdentity {
        /// Tenant id.
        tenant_id: String,
        /// Client (application) id.
        client_id: String,
        /// The file holding the federated token.
        token_file: String,
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
            Credential::WorkloadIdentity {
                tenant_id,
                client_id,
                token_file,
            } => f
                .debug_struct("WorkloadIdentity")
                .field("tenant_id", tenant_id)
                .field("client_id", client_id)
                .field("token_file", token_file)
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

/// The Azure driver's settings. Build with [`Config::builder`], or read them with
/// [`Config::from_env`] / [`Config::from_settings`]. `Debug` never shows a secret.
#[derive(Clone)]
#[non_exhaustive]
pub struct Config {
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
    /// An SSH public key every VM's admin user accepts (not secret; shown shortened).
    pub ssh_public_key: Option<String>,
    /// Addresses admitted on TCP 22 by each VM's own security group when the spec names none.
    pub ssh_sources: Vec<String>,
    /// OS disk size when the spec names none.
    pub os_disk_gb: Option<u32>,
    /// The location whose size catalogue `arch()` reads first.
    pub location: String,
    /// Whether each machine gets a public address (`<name>-ip`).
    pub public_ip: bool,
    /// Resource Manager endpoint, without trailing slash.
    pub arm_endpoint: String,
    /// Retail prices endpoint, without trailing slash.
    pub prices_endpoint: String,
    /// The billing account and profile whose credit `credit_balance()` reads.
    pub billing: Option<(String, String)>,
    /// How tokens are got.
    pub credential: Credential,
    /// The retry policy for every call.
    pub retry: RetryPolicy,
    /// The wait between polls of a long-running operation when Azure names none (no Retry-After,
    /// or one of zero).
    pub poll_interval: Duration,
    /// The client settings every driver takes (timeouts, poll interval, retry budget).
    pub client: ClientOptions,
    /// The longest a long-running operation is followed before the call fails as transient.
    pub operation_timeout: Duration,
    /// The longest a machine that may be new is waited for before "not found" is believed (a create
    /// waits for its VM to show; a read of a VM whose interface names it waits for it).
    pub visibility_window: Duration,
    /// The longest wait for a connection to Resource Manager (the builder's `connect_timeout`,
    /// else the kit's `ORCA_CONNECT_TIMEOUT`, else [`DEFAULT_CONNECT_TIMEOUT`]).
    pub connect_timeout: Duration,
    /// The longest wait for one Resource Manager answer (the builder's `request_timeout`, else the
    /// kit's `ORCA_REQUEST_TIMEOUT`, else [`DEFAULT_REQUEST_TIMEOUT`]).
    pub request_timeout: Duration,
    /// The longest a failed create's clean-up waits for an interface Azure reserved for the failed
    /// VM (`NicReservedForAnotherVm`, about 180 s) before naming it as left over.
    pub reservation_wait: Duration,
    /// Where the instance metadata service is probed for, and asked for, the managed identity's
    /// token (`Credential::Auto`).
    pub(crate) imds_endpoint: String,
    /// `AZURE_CLIENT_ID`, for `Credential::Auto`: the user-assigned identity the metadata service
    /// is asked for (with several on the VM it answers none without it).
    pub(crate) imds_client_id: Option<String>,
}

fn shorten(key: &str) -> String {
    if key.len() > 24 {
        let head: String = key.chars().take(16).collect();
        format!("{head}...({} chars)", key.len())
    } else {
        key.to_string()
    }
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("subscription_id", &self.subscription_id)
            .field("resource_group", &self.resource_group)
            .field("vnet_resource_group", &self.vnet_resource_group)
            .field("vnet", &self.vnet)
            .field("subnet", &self.subnet)
            .field("image", &self.image.to_string())
            .field("image_arm64", &self.image_arm64.to_string())
            .field("admin_user", &self.admin_user)
            .field(
                "ssh_public_key",
                &self.ssh_public_key.as_deref().map(shorten),
            )
            .field("ssh_sources", &self.ssh_sources)
            .field("os_disk_gb", &self.os_disk_gb)
            .field("location", &self.location)
            .field("public_ip", &self.public_ip)
            .field("arm_endpoint", &self.arm_endpoint)
            .field("prices_endpoint", &self.prices_endpoint)
            .field("billing", &self.billing)
            .field("credential", &self.credential)
            .finish_non_exhaustive()
    }
}

impl Config {
    /// A builder with nothing set.
    pub fn builder() -> ConfigBuilder {
        ConfigBuilder::default()
    }

    /// Every setting from this process's environment ([`ConfigKey`] names).
    pub fn from_env() -> Result<Config> {
        ConfigBuilder::from_env().build()
    }

    /// Every setting from `settings`; an unknown key, a missing one and a wrong value are one
    /// [`Error::InvalidSettings`] naming every key at fault. Nothing is read from the process
    /// environment.
    pub fn from_settings(settings: &Settings) -> Result<Config> {
        ConfigBuilder::from_settings(settings).build()
    }

    /// The image for `arch`.
    pub fn image_for(&self, arch: &Arch) -> Result<&ImageUrn> {
        match arch {
            Arch::Amd64 => Ok(&self.image),
            Arch::Arm64 => Ok(&self.image_arm64),
            Arch::Other(a) => Err(Error::unsupported(
                "azure",
                format!("machines of architecture {a}"),
            )),
        }
    }

    /// The token source these settings name.
    pub(crate) fn token_source(&self) -> Result<Arc<dyn TokenSource>> {
        credential::source(
            &self.credential,
            &self.arm_endpoint,
            &self.imds_endpoint,
            self.imds_client_id.as_deref(),
            &self.client,
        )
    }
}

/// Builds a [`Config`]: by key ([`ConfigBuilder::with_config`], the same names as the environment) or by
/// the typed setters; [`ConfigBuilder::build`] names every problem at once.
#[derive(Clone, Default)]
pub struct ConfigBuilder {
    values: Settings,
    unknown: Vec<String>,
    client: ClientSettings,
    credential: Option<Credential>,
    retry: Option<RetryPolicy>,
    poll_interval: Option<Duration>,
    operation_timeout: Option<Duration>,
    visibility_window: Option<Duration>,
    connect_timeout: Option<Duration>,
    request_timeout: Option<Duration>,
    reservation_wait: Option<Duration>,
    imds_endpoint: Option<String>,
}

impl std::fmt::Debug for ConfigBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfigBuilder")
            .field("keys", &self.values)
            .field("credential", &self.credential)
            .finish_non_exhaustive()
    }
}

macro_rules! setter {
    ($($name:ident => $key:ident: $doc:literal),* $(,)?) => {$(
        #[doc = $doc]
        pub fn $name(self, v: impl Into<String>) -> Self {
            self.with_config(ConfigKey::$key, v)
        }
    )*};
}

/// A name Azure takes for a resource group (and, as loosely, for the subscription, network and
/// subnet): also, as Azure's rule says, no name ending in '.', so that no name is `.` or `..`, which
/// a URL path would read as a step to another resource.
fn name_ok(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 90
        && !s.ends_with('.')
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'(' | b')'))
}

impl ConfigBuilder {
    /// A builder holding this process's environment settings (see [`Config::from_env`]), to adjust
    /// before [`build`](Self::build).
    pub fn from_env() -> ConfigBuilder {
        Self::from_settings(&Settings::from_env_keys::<ConfigKey>())
    }

    /// A builder holding `settings` (see [`Config::from_settings`]), to adjust before
    /// [`build`](Self::build). Unknown keys are kept to be refused by `build`.
    pub fn from_settings(settings: &Settings) -> ConfigBuilder {
        let mut b = ConfigBuilder::default();
        for k in settings.keys() {
            let v = settings.get(k).unwrap_or_default();
            match ConfigKey::from_str(k) {
                Ok(key) => b = b.with_config(key, v),
                Err(_) if b.client.take(k, v) => {}
                Err(_) => b.unknown.push(k.to_string()),
            }
        }
        b
    }

    /// Sets `key` to `value` (an empty value unsets it, as an empty environment variable does).
    pub fn with_config(mut self, key: ConfigKey, value: impl Into<String>) -> Self {
        self.values.insert(key.as_str(), value);
        self
    }

    setter!(
        subscription_id => SubscriptionId: "The subscription id.",
        resource_group => ResourceGroup: "The resource group of the machines.",
        vnet_resource_group => VnetResourceGroup: "The resource group of the virtual networks (default: the machines').",
        vnet => Vnet: "The virtual network's base name (`<vnet>-<location>`).",
        subnet => Subnet: "The subnet.",
        image => Image: "The image URN `publisher:offer:sku:version`.",
        image_arm64 => ImageArm64: "The image URN for Arm64 sizes (default: derived).",
        admin_user => AdminUser: "The admin user name.",
        ssh_public_key => SshPublicKey: "An SSH public key every VM accepts.",
        location => Location: "The location whose size catalogue `arch()` reads first.",
        arm_endpoint => Endpoint: "The Resource Manager endpoint (tests: the fake's URL).",
        prices_endpoint => PricesEndpoint: "The retail prices endpoint (tests: the fake's URL).",
    );

    /// The addresses each VM's own security group admits on TCP 22 when the spec names none.
    pub fn ssh_sources<I: IntoIterator<Item = S>, S: Into<String>>(self, v: I) -> Self {
        let joined: Vec<String> = v.into_iter().map(Into::into).collect();
        self.with_config(ConfigKey::SshSources, joined.join(","))
    }

    /// Whether each machine gets a public address (default `true`); `false` where a policy denies
    /// them ([`ConfigKey::PublicIp`]).
    pub fn public_ip(self, on: bool) -> Self {
        self.with_config(ConfigKey::PublicIp, on.to_string())
    }

    /// The OS disk size in GiB when the spec names none.
    pub fn os_disk_gb(self, gb: u32) -> Self {
        self.with_config(ConfigKey::OsDiskGb, gb.to_string())
    }

    /// The billing account and profile whose credit `credit_balance()` reads.
    pub fn billing(self, account: impl Into<String>, profile: impl Into<String>) -> Self {
        self.with_config(ConfigKey::BillingAccount, account)
            .with_config(ConfigKey::BillingProfile, profile)
    }

    /// How tokens are got (wins over the credential keys).
    pub fn credential(mut self, c: Credential) -> Self {
        self.credential = Some(c);
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

    /// The wait between polls when Azure names none (no Retry-After, or one of zero).
    pub fn poll_interval(mut self, d: Duration) -> Self {
        self.poll_interval = Some(d);
        self
    }

    /// The longest a long-running operation is followed.
    pub fn operation_timeout(mut self, d: Duration) -> Self {
        self.operation_timeout = Some(d);
        self
    }

    /// The longest a machine that may be new is waited for before "not found" is believed
    /// (default 60 s; wins over `ORCA_VISIBILITY_WINDOW`).
    pub fn visibility_window(mut self, d: Duration) -> Self {
        self.visibility_window = Some(d);
        self
    }

    /// The longest wait for a connection (default 20 s; the kit's `ORCA_CONNECT_TIMEOUT` sets it
    /// too, this wins). Token requests take it as well.
    pub fn connect_timeout(mut self, d: Duration) -> Self {
        self.connect_timeout = Some(d);
        self
    }

    /// The longest wait for one request's answer (default 120 s; the kit's `ORCA_REQUEST_TIMEOUT`
    /// sets it too, this wins). Token requests take it as well.
    pub fn request_timeout(mut self, d: Duration) -> Self {
        self.request_timeout = Some(d);
        self
    }

    /// The longest a failed create's clean-up waits for an interface Azure reserved for the failed
    /// VM (default 200 s; wins over [`ConfigKey::ReservationWait`]).
    pub fn reservation_wait(mut self, d: Duration) -> Self {
        self.reservation_wait = Some(d);
        self
    }

    /// Where `Credential::Auto` probes the instance metadata service and asks it for the managed
    /// identity's token (default `http://169.254.169.254`; tests point it at 127.0.0.1).
    pub fn imds_endpoint(mut self, url: impl Into<String>) -> Self {
        self.imds_endpoint = Some(url.into());
        self
    }

    /// The client options and the timeouts that win: the typed setters over the kit's keys over the
    /// defaults. The token requests take the setters' values as they take the keys' (else their
    /// own). A setter of zero is a problem.
    fn timeouts(&self, p: &mut Problems) -> (ClientOptions, Timeouts) {
        let mut client = self.client.options;
        for (name, set) in [
            ("connect_timeout", self.connect_timeout),
            ("request_timeout", self.request_timeout),
        ] {
            if set.is_some_and(|d| d.is_zero()) {
                p.invalid(name, "a duration above zero");
            }
        }
        let timeouts = Timeouts::resolve(
            self.connect_timeout,
            self.request_timeout,
            &client,
            Timeouts::new(DEFAULT_CONNECT_TIMEOUT, Some(DEFAULT_REQUEST_TIMEOUT)),
        );
        client.connect_timeout = self.connect_timeout.or(client.connect_timeout);
        client.request_timeout = self.request_timeout.or(client.request_timeout);
        (client, timeouts)
    }

    /// The settings, or one [`Error::InvalidSettings`] naming every unknown, missing or invalid key.
    pub fn build(self) -> Result<Config> {
        let s = &self.values;
        let mut p = Problems::new();
        for k in &self.unknown {
            p.unknown_key::<ConfigKey>(k.clone());
        }
        self.client.report(&mut p);
        let (client, timeouts) = self.timeouts(&mut p);
        let get = |k: ConfigKey| value(s, k);
        let required = |k: ConfigKey, p: &mut Problems| {
            get(k).unwrap_or_else(|| {
                p.missing(k.as_str());
                String::new()
            })
        };
        let subscription_id = get(ConfigKey::SubscriptionId)
            .or_else(|| get(ConfigKey::AzureSubscriptionId))
            .unwrap_or_else(|| {
                p.missing(ConfigKey::SubscriptionId.as_str());
                String::new()
            });
        let resource_group = required(ConfigKey::ResourceGroup, &mut p);
        let vnet = required(ConfigKey::Vnet, &mut p);
        let subnet = required(ConfigKey::Subnet, &mut p);
        let image = required(ConfigKey::Image, &mut p);
        let admin_user = required(ConfigKey::AdminUser, &mut p);

        let names = [
            (ConfigKey::SubscriptionId, subscription_id.as_str()),
            (ConfigKey::ResourceGroup, resource_group.as_str()),
            (ConfigKey::Vnet, vnet.as_str()),
            (ConfigKey::Subnet, subnet.as_str()),
        ];
        let vnet_group = get(ConfigKey::VnetResourceGroup);
        let vnet_resource_group = check_names(names, &resource_group, vnet_group, &mut p);
        check_admin_user(&admin_user, &mut p);
        let ssh_public_key = ssh_public_key(s, &mut p);
        let (image, image_arm64) = images(s, image, &mut p);
        let ssh_sources = ssh_sources(s, &mut p);
        let os_disk_gb = p.parse(
            s,
            ConfigKey::OsDiskGb.as_str(),
            "a size in GiB from 1 to 4095",
            |v| v.parse::<u32>().ok().filter(|n| (1..=4095).contains(n)),
        );
        let public_ip = p
            .parse(
                s,
                ConfigKey::PublicIp.as_str(),
                "true or false",
                orca_machines::settings::parse_bool,
            )
            .unwrap_or(true);
        let location = location(s, &mut p);
        let arm_endpoint = endpoint(s, ConfigKey::Endpoint, DEFAULT_ARM_ENDPOINT, &mut p);
        let prices_endpoint = endpoint(
            s,
            ConfigKey::PricesEndpoint,
            DEFAULT_PRICES_ENDPOINT,
            &mut p,
        );
        let billing = billing(s, &mut p);
        let credential = match self.credential.clone() {
            Some(c) => c,
            None => credential_from_keys(s, &mut p),
        };
        let imds_client_id = get(ConfigKey::ClientId).filter(|c| !c.is_empty());
        let operation_timeout = self
            .operation_timeout
            .unwrap_or(Duration::from_secs(30 * 60));
        let reservation_wait = p.parse(
            s,
            ConfigKey::ReservationWait.as_str(),
            POSITIVE_DURATION_RULE,
            parse_positive_duration,
        );
        p.finish()?;
        let (Some(image), Some(image_arm64)) = (image, image_arm64) else {
            return Err(Error::settings([ConfigKey::Image.as_str()], URN_RULE));
        };
        Ok(Config {
            subscription_id,
            resource_group,
            vnet_resource_group,
            vnet,
            subnet,
            image,
            image_arm64,
            admin_user,
            ssh_public_key,
            ssh_sources,
            os_disk_gb,
            location,
            public_ip,
            arm_endpoint,
            prices_endpoint,
            billing,
            credential,
            // A resource another operation holds is waited for as long as an operation may run.
            retry: self.retry.unwrap_or_else(|| {
                client.retry_policy(RetryPolicy::default().with_busy_wait(operation_timeout))
            }),
            poll_interval: self
                .poll_interval
                .unwrap_or_else(|| client.poll_interval_or(Duration::from_secs(2))),
            client,
            operation_timeout,
            visibility_window: client.visibility_window_or(self.visibility_window, VISIBILITY),
            connect_timeout: timeouts.connect,
            request_timeout: timeouts.request.unwrap_or(DEFAULT_REQUEST_TIMEOUT),
            reservation_wait: self
                .reservation_wait
                .or(reservation_wait)
                .unwrap_or(Duration::from_secs(200)),
            imds_endpoint: self
                .imds_endpoint
                .unwrap_or_else(|| credential::IMDS_ENDPOINT.to_string()),
            imds_client_id,
        })
    }
}

/// A problem for each name of the placement Azure would refuse; the networks' resource group:
/// `vnet_group` when set, else the machines' (`resource_group`).
fn check_names(
    names: [(ConfigKey, &str); 4],
    resource_group: &str,
    vnet_group: Option<String>,
    p: &mut Problems,
) -> String {
    let name_rule = "letters, digits, '.', '_', '-', '(' and ')', at most 90, not ending in '.'";
    for (k, v) in names {
        if !v.is_empty() && !name_ok(v) {
            p.invalid(k.as_str(), name_rule);
        }
    }
    match vnet_group {
        Some(g) if !name_ok(&g) => {
            p.invalid(ConfigKey::VnetResourceGroup.as_str(), name_rule);
            String::new()
        }
        Some(g) => g,
        None => resource_group.to_string(),
    }
}

/// A problem when `admin_user` is not a Linux user name Azure takes (not `root` or `admin`).
fn check_admin_user(admin_user: &str, p: &mut Problems) {
    if !admin_user.is_empty()
        && (!admin_user
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
            || admin_user.len() > 32
            || admin_user == "root"
            || admin_user == "admin")
    {
        p.invalid(
            ConfigKey::AdminUser.as_str(),
            "a Linux user name (a-z, 0-9, '_', '-', at most 32; not root or admin)",
        );
    }
}

/// The SSH public key every VM accepts, if set; a line that is not an OpenSSH key is a problem.
fn ssh_public_key(s: &Settings, p: &mut Problems) -> Option<String> {
    let ssh_public_key = value(s, ConfigKey::SshPublicKey);
    if let Some(k) = &ssh_public_key {
        let probe = orca_machines::MachineSpec::new("k", "t", "l", "p").with_ssh_key(k.clone());
        if probe.validate().is_err() {
            p.invalid(
                ConfigKey::SshPublicKey.as_str(),
                "an OpenSSH public key line (ssh-ed25519 AAAA... or ssh-rsa AAAA...)",
            );
        }
    }
    ssh_public_key
}

/// The sources each VM's own security group admits on SSH when the spec names none.
fn ssh_sources(s: &Settings, p: &mut Problems) -> Vec<String> {
    let mut ssh_sources = Vec::new();
    if let Some(list) = value(s, ConfigKey::SshSources) {
        for src in list.split(',').map(str::trim).filter(|x| !x.is_empty()) {
            if orca_machines::spec::validate_source(src).is_err() {
                p.invalid(
                    ConfigKey::SshSources.as_str(),
                    "comma-separated IP addresses or CIDR blocks",
                );
                break;
            }
            ssh_sources.push(src.to_string());
        }
    }
    ssh_sources
}

/// The trimmed value of key `k`, if set.
fn value(s: &Settings, k: ConfigKey) -> Option<String> {
    s.get(k.as_str()).map(|v| v.trim().to_string())
}

/// The images of amd64 and arm64 sizes: `image` (the required key's value), and the arm64 key's
/// or one derived from it; a URN that does not parse is a problem named by its key.
fn images(s: &Settings, image: String, p: &mut Problems) -> (Option<ImageUrn>, Option<ImageUrn>) {
    let mut parse = |k: ConfigKey, urn: &str| {
        let parsed = ImageUrn::parse(urn).ok();
        if parsed.is_none() {
            p.invalid(k.as_str(), URN_RULE);
        }
        parsed
    };
    let image = if image.is_empty() {
        None
    } else {
        parse(ConfigKey::Image, &image)
    };
    let image_arm64 = match value(s, ConfigKey::ImageArm64) {
        Some(u) => parse(ConfigKey::ImageArm64, &u),
        None => image.as_ref().map(ImageUrn::arm64),
    };
    (image, image_arm64)
}

/// The location whose size catalogue `arch()` reads first (else [`DEFAULT_LOCATION`]).
fn location(s: &Settings, p: &mut Problems) -> String {
    let location = value(s, ConfigKey::Location).unwrap_or_else(|| DEFAULT_LOCATION.into());
    if orca_machines::spec::validate_token("location", &location).is_err() {
        p.invalid(
            ConfigKey::Location.as_str(),
            "a location name (westeurope, eastus, ...)",
        );
    }
    location
}

/// The endpoint of key `k` (else `def`), without trailing slash; one unfit to carry credentials
/// (`kit::is_endpoint`) is a problem named by its key.
fn endpoint(s: &Settings, k: ConfigKey, def: &str, p: &mut Problems) -> String {
    let e = value(s, k)
        .unwrap_or_else(|| def.to_string())
        .trim_end_matches('/')
        .to_string();
    if !orca_machines::kit::is_endpoint(&e) {
        p.invalid(k.as_str(), orca_machines::kit::ENDPOINT_RULE);
    }
    e
}

/// The billing account and profile whose credit `credit_balance()` reads: both or neither.
fn billing(s: &Settings, p: &mut Problems) -> Option<(String, String)> {
    match (
        value(s, ConfigKey::BillingAccount),
        value(s, ConfigKey::BillingProfile),
    ) {
        (Some(a), Some(b)) => {
            let ok = |v: &str| {
                !v.is_empty()
                    && v.len() <= 200
                    && v.bytes().all(|c| {
                        c.is_ascii_alphanumeric() || matches!(c, b':' | b'_' | b'-' | b'.')
                    })
            };
            for (k, v) in [
                (ConfigKey::BillingAccount, &a),
                (ConfigKey::BillingProfile, &b),
            ] {
                if !ok(v) {
                    p.invalid(
                        k.as_str(),
                        "a billing id of letters, digits, ':', '_', '-' and '.'",
                    );
                }
            }
            Some((a, b))
        }
        (None, None) => None,
        (account, _) => {
            // One of the two is set: the other is missing.
            let (missing, given) = if account.is_some() {
                (ConfigKey::BillingProfile, ConfigKey::BillingAccount)
            } else {
                (ConfigKey::BillingAccount, ConfigKey::BillingProfile)
            };
            p.invalid(missing.as_str(), format!("missing: {given} needs it"));
            None
        }
    }
}

/// The credential the keys name (see [`Credential`]).
fn credential_from_keys(s: &Settings, p: &mut Problems) -> Credential {
    let get = |k: ConfigKey| value(s, k);
    if let Some(t) = s.get(ConfigKey::AccessToken.as_str()) {
        return Credential::Static(SecretString::from(t.to_string()));
    }
    let secret = s
        .get(ConfigKey::ClientSecret.as_str())
        .map(|v| SecretString::from(v.to_string()));
    // The tenant, the client and the third key a `what` credential needs, each missing one named.
    let needs = |what: &str, third: ConfigKey, p: &mut Problems| {
        let keys = [ConfigKey::TenantId, ConfigKey::ClientId, third];
        for k in keys.iter().filter(|k| get(**k).is_none()) {
            p.invalid(
                k.as_str(),
                format!("missing (a {what} credential needs it)"),
            );
        }
        keys.map(get)
    };
    let client_secret =
        |p: &mut Problems| match (needs("client secret", ConfigKey::ClientSecret, p), &secret) {
            ([Some(tenant_id), Some(client_id), _], Some(secret)) => Credential::ClientSecret {
                tenant_id,
                client_id,
                secret: secret.clone(),
            },
            _ => Credential::Auto,
        };
    let workload =
        |p: &mut Problems| match needs("workload identity", ConfigKey::FederatedTokenFile, p) {
            [Some(tenant_id), Some(client_id), Some(token_file)] => Credential::WorkloadIdentity {
                tenant_id,
                client_id,
                token_file,
            },
            _ => Credential::Auto,
        };
    let managed = || Credential::ManagedIdentity {
        client_id: get(ConfigKey::ClientId),
    };
    let choice = get(ConfigKey::Credential)
        .unwrap_or_else(|| "auto".into())
        .to_ascii_lowercase();
    match choice.as_str() {
        "auto" => {
            if secret.is_some() {
                client_secret(p)
            } else if get(ConfigKey::FederatedTokenFile).is_some() {
                workload(p)
            } else if get(ConfigKey::IdentityEndpoint).is_some()
                || get(ConfigKey::MsiEndpoint).is_some()
            {
                managed()
            } else {
                // Managed identity from the instance metadata service (probed at the first token),
                // else the Azure CLI.
                Credential::Auto
            }
        }
        "client_secret" => client_secret(p),
        "workload_identity" => workload(p),
        "managed_identity" => managed(),
        "azure_cli" => Credential::AzureCli,
        _ => {
            p.invalid(
                ConfigKey::Credential.as_str(),
                "one of auto, client_secret, workload_identity, managed_identity, azure_cli",
            );
            Credential::Auto
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full() -> Settings {
        Settings::new()
            .with("ORCA_AZURE_SUBSCRIPTION_ID", "sub-1")
            .with("ORCA_AZURE_RESOURCE_GROUP", "rg")
            .with("ORCA_AZURE_VNET", "net")
            .with("ORCA_AZURE_SUBNET", "hosts")
            .with(
                "ORCA_AZURE_IMAGE",
                "Canonical:ubuntu-24_04-lts:server:latest",
            )
            .with("ORCA_AZURE_ADMIN_USER", "builder")
            .with(
                "ORCA_AZURE_SSH_PUBLIC_KEY",
                "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIG4 me@host",
            )
    }

    fn builder_full() -> ConfigBuilder {
        ConfigBuilder::from_settings(&full())
    }

    fn keys(e: &Error) -> Vec<String> {
        match e {
            Error::InvalidSettings { keys, .. } => keys.clone(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn keys_round_trip_and_are_listed_once() {
        let mut seen = std::collections::BTreeSet::new();
        for &k in ConfigKey::ALL {
            assert_eq!(k.as_str().parse::<ConfigKey>().unwrap(), k);
            assert_eq!(k.to_string(), k.as_str());
            assert!(seen.insert(k.as_str()), "{k} twice");
        }
        assert!(ConfigKey::ClientSecret.is_secret() && ConfigKey::AccessToken.is_secret());
        assert!(!ConfigKey::ClientId.is_secret());
        let e = "ORCA_AZURE_VENT".parse::<ConfigKey>().unwrap_err();
        assert!(e.to_string().contains("ORCA_AZURE_VNET"), "{e}");
    }

    #[test]
    fn every_problem_is_named_at_once() {
        let e = Config::from_settings(&Settings::new()).unwrap_err();
        assert_eq!(
            keys(&e),
            [
                "ORCA_AZURE_SUBSCRIPTION_ID",
                "ORCA_AZURE_RESOURCE_GROUP",
                "ORCA_AZURE_VNET",
                "ORCA_AZURE_SUBNET",
                "ORCA_AZURE_IMAGE",
                "ORCA_AZURE_ADMIN_USER"
            ]
        );
        // A missing key, an unknown key and two wrong values: one error naming all four.
        let mut s = full()
            .with("ORCA_AZURE_VNET", "")
            .with("ORCA_AZURE_VENT", "typo")
            .with("ORCA_AZURE_IMAGE", "Canonical:ubuntu")
            .with("ORCA_AZURE_OS_DISK_GB", "big");
        s.insert("ORCA_AZURE_SSH_SOURCES", "1.2.3.4, bogus");
        let e = Config::from_settings(&s).unwrap_err();
        let k = keys(&e);
        for want in [
            "ORCA_AZURE_VNET",
            "ORCA_AZURE_VENT",
            "ORCA_AZURE_IMAGE",
            "ORCA_AZURE_OS_DISK_GB",
            "ORCA_AZURE_SSH_SOURCES",
        ] {
            assert!(k.iter().any(|x| x == want), "{want} not in {k:?}");
        }
    }

    #[test]
    fn dot_segments_and_names_ending_in_a_dot_are_refused_naming_the_key() {
        // Each goes into a URL path: `..` or `.` there would make the call another one.
        for (key, v) in [
            (ConfigKey::ResourceGroup, ".."),
            (ConfigKey::ResourceGroup, "."),
            (ConfigKey::ResourceGroup, "rg."),
            (ConfigKey::SubscriptionId, ".."),
            (ConfigKey::VnetResourceGroup, ".."),
            (ConfigKey::Vnet, "."),
            (ConfigKey::Subnet, ".."),
        ] {
            let e = builder_full().with_config(key, v).build().unwrap_err();
            assert_eq!(keys(&e), [key.as_str()], "{key}={v}: {e}");
        }
        let e = builder_full().resource_group("..").build().unwrap_err();
        assert_eq!(keys(&e), ["ORCA_AZURE_RESOURCE_GROUP"], "{e}");
        // A dot inside a name is Azure's own: it stays allowed.
        let c = builder_full().resource_group("rg.lab").build().unwrap();
        assert_eq!(c.resource_group, "rg.lab");
    }

    #[test]
    fn azure_subscription_id_is_read_too_and_the_key_is_optional() {
        let s: Settings = full()
            .with("ORCA_AZURE_SUBSCRIPTION_ID", "")
            .with("AZURE_SUBSCRIPTION_ID", "sub-2")
            .with("ORCA_AZURE_SSH_PUBLIC_KEY", "");
        let c = Config::from_settings(&s).unwrap();
        assert_eq!(c.subscription_id, "sub-2");
        assert_eq!(c.ssh_public_key, None);
        assert_eq!(c.location, DEFAULT_LOCATION);
    }

    #[test]
    fn arm64_image_is_derived_from_canonical_names() {
        let c = Config::from_settings(&full()).unwrap();
        assert_eq!(
            c.image_arm64.to_string(),
            "Canonical:ubuntu-24_04-lts:server-arm64:latest"
        );
        let jammy = ImageUrn::parse("Canonical:0001-com-ubuntu-server-jammy:22_04-lts-gen2:latest")
            .unwrap();
        assert_eq!(jammy.arm64().sku, "22_04-lts-arm64");
        let c =
            Config::from_settings(&full().with("ORCA_AZURE_IMAGE_ARM64", "Canonical:x:y-arm:1"))
                .unwrap();
        assert_eq!(c.image_arm64.sku, "y-arm");
    }

    #[test]
    fn credentials_are_chosen_from_the_keys() {
        let c = Config::from_settings(&full()).unwrap();
        assert!(matches!(c.credential, Credential::Auto));
        let c = Config::from_settings(
            &full()
                .with("AZURE_TENANT_ID", "t")
                .with("AZURE_CLIENT_ID", "c")
                .with("AZURE_FEDERATED_TOKEN_FILE", "/var/run/token"),
        )
        .unwrap();
        assert!(
            matches!(&c.credential, Credential::WorkloadIdentity { token_file, .. } if token_file == "/var/run/token"),
            "{:?}",
            c.credential
        );
        let c =
            Config::from_settings(&full().with("IDENTITY_ENDPOINT", "http://localhost:1")).unwrap();
        assert!(matches!(c.credential, Credential::ManagedIdentity { .. }));
        let e = Config::from_settings(&full().with("ORCA_AZURE_CREDENTIAL", "client_secret"))
            .unwrap_err();
        assert_eq!(
            keys(&e),
            ["AZURE_TENANT_ID", "AZURE_CLIENT_ID", "AZURE_CLIENT_SECRET"]
        );
        let e =
            Config::from_settings(&full().with("ORCA_AZURE_CREDENTIAL", "kerberos")).unwrap_err();
        assert_eq!(keys(&e), ["ORCA_AZURE_CREDENTIAL"]);
    }

    #[test]
    fn the_credential_keys_are_every_key_the_credential_is_read_from() {
        let cases: [&[(&str, &str)]; 6] = [
            &[("ORCA_AZURE_ACCESS_TOKEN", "tok")],
            &[
                ("AZURE_TENANT_ID", "t"),
                ("AZURE_CLIENT_ID", "c"),
                ("AZURE_CLIENT_SECRET", "s"),
            ],
            &[
                ("AZURE_TENANT_ID", "t"),
                ("AZURE_CLIENT_ID", "c"),
                ("AZURE_FEDERATED_TOKEN_FILE", "/var/run/token"),
            ],
            &[
                ("IDENTITY_ENDPOINT", "http://localhost:1"),
                ("AZURE_CLIENT_ID", "c"),
            ],
            &[("MSI_ENDPOINT", "http://localhost:1")],
            &[("ORCA_AZURE_CREDENTIAL", "azure_cli")],
        ];
        let credential_keys: Vec<&str> = ConfigKey::CREDENTIAL.iter().map(|k| k.as_str()).collect();
        for case in cases {
            let mut all = full();
            let mut kept = full();
            for (k, v) in case {
                all.insert(*k, *v);
                if credential_keys.contains(k) {
                    kept.insert(*k, *v);
                }
            }
            let want = format!("{:?}", Config::from_settings(&all).unwrap().credential);
            let got = format!("{:?}", Config::from_settings(&kept).unwrap().credential);
            assert_eq!(got, want, "{case:?}");
            assert_ne!(want, "Auto", "{case:?}");
        }
    }

    #[test]
    fn billing_needs_both_keys() {
        let e = Config::from_settings(&full().with("ORCA_AZURE_BILLING_ACCOUNT", "1234:5678"))
            .unwrap_err();
        assert_eq!(keys(&e), ["ORCA_AZURE_BILLING_PROFILE"]);
        let c = Config::from_settings(
            &full()
                .with("ORCA_AZURE_BILLING_ACCOUNT", "1234:5678_2019-05-31")
                .with("ORCA_AZURE_BILLING_PROFILE", "PBFV-XXXX"),
        )
        .unwrap();
        assert_eq!(
            c.billing,
            Some(("1234:5678_2019-05-31".into(), "PBFV-XXXX".into()))
        );
    }

    #[test]
    fn secrets_are_redacted() {
        let s = full()
            .with("AZURE_TENANT_ID", "tenant")
            .with("AZURE_CLIENT_ID", "client")
            .with("AZURE_CLIENT_SECRET", "hunter2-client-secret");
        let c = Config::from_settings(&s).unwrap();
        assert!(matches!(c.credential, Credential::ClientSecret { .. }));
        let d = format!("{c:?} {s:?}");
        assert!(!d.contains("hunter2"), "{d}");
        assert!(d.contains("<redacted>"), "{d}");
        let s = full().with("ORCA_AZURE_ACCESS_TOKEN", "eyJ-static-token-value");
        let c = Config::from_settings(&s).unwrap();
        let d = format!(
            "{c:?} {:?}",
            Config::builder().token("eyJ-static-token-value")
        );
        assert!(!d.contains("eyJ-static"), "{d}");
        // A wrong secret is named by its key, never shown.
        let e = Config::from_settings(
            &full()
                .with("ORCA_AZURE_ENDPOINT", "ftp://hunter3")
                .with("AZURE_CLIENT_SECRET", "hunter3"),
        )
        .unwrap_err();
        assert!(!e.to_string().contains("hunter3"), "{e}");
    }

    #[test]
    fn a_builder_from_settings_takes_the_client_keys_is_adjusted_and_refuses_unknown_keys() {
        let s = full()
            .with("ORCA_REQUEST_TIMEOUT", "20s")
            .with("ORCA_VISIBILITY_WINDOW", "5s");
        let c = ConfigBuilder::from_settings(&s).build().unwrap();
        assert_eq!(c.request_timeout, Duration::from_secs(20));
        assert_eq!(c.visibility_window, Duration::from_secs(5));
        assert_eq!(
            Config::from_settings(&full()).unwrap().visibility_window,
            VISIBILITY
        );
        let c = ConfigBuilder::from_settings(&s)
            .request_timeout(Duration::from_secs(7))
            .visibility_window(Duration::from_secs(1))
            .resource_group("rg-2")
            .build()
            .unwrap();
        assert_eq!(c.request_timeout, Duration::from_secs(7));
        assert_eq!(c.visibility_window, Duration::from_secs(1));
        assert_eq!(c.resource_group, "rg-2");
        let e = ConfigBuilder::from_settings(&full().with("ORCA_AZURE_RESOURCE_GRUOP", "x"))
            .build()
            .unwrap_err();
        assert_eq!(keys(&e), ["ORCA_AZURE_RESOURCE_GRUOP"]);
    }

    #[test]
    fn the_reservation_wait_is_a_setting_below_the_builder() {
        let c = Config::from_settings(&full()).unwrap();
        assert_eq!(c.reservation_wait, Duration::from_secs(200));
        let s = full().with("ORCA_AZURE_RESERVATION_WAIT", "3m");
        let c = Config::from_settings(&s).unwrap();
        assert_eq!(c.reservation_wait, Duration::from_secs(180));
        let c = ConfigBuilder::from_settings(&s)
            .reservation_wait(Duration::from_secs(5))
            .build()
            .unwrap();
        assert_eq!(c.reservation_wait, Duration::from_secs(5));
        for bad in ["0s", "a while"] {
            let e = Config::from_settings(&full().with("ORCA_AZURE_RESERVATION_WAIT", bad))
                .unwrap_err();
            assert_eq!(keys(&e), ["ORCA_AZURE_RESERVATION_WAIT"], "{bad}");
            assert!(
                !e.to_string().contains("a while"),
                "no value is echoed: {e}"
            );
        }
    }

    #[test]
    fn polls_and_timeouts_have_the_names_every_driver_uses() {
        let c = builder_full()
            .poll_interval(Duration::from_millis(20))
            .operation_timeout(Duration::from_secs(3))
            .visibility_window(Duration::from_secs(4))
            .connect_timeout(Duration::from_secs(2))
            .request_timeout(Duration::from_secs(7))
            .build()
            .unwrap();
        assert_eq!(
            (
                c.poll_interval,
                c.operation_timeout,
                c.visibility_window,
                c.connect_timeout,
                c.request_timeout
            ),
            (
                Duration::from_millis(20),
                Duration::from_secs(3),
                Duration::from_secs(4),
                Duration::from_secs(2),
                Duration::from_secs(7)
            )
        );
        // The token requests take the same timeouts.
        assert_eq!(
            (c.client.connect_timeout, c.client.request_timeout),
            (Some(Duration::from_secs(2)), Some(Duration::from_secs(7)))
        );
        let e = builder_full()
            .request_timeout(Duration::ZERO)
            .build()
            .unwrap_err();
        assert_eq!(keys(&e), ["request_timeout"]);
        // The kit's keys set the same settings; the defaults otherwise.
        let c = Config::from_settings(
            &full()
                .with("ORCA_POLL_INTERVAL", "50ms")
                .with("ORCA_REQUEST_TIMEOUT", "9s"),
        )
        .unwrap();
        assert_eq!(
            (c.poll_interval, c.request_timeout, c.connect_timeout),
            (
                Duration::from_millis(50),
                Duration::from_secs(9),
                DEFAULT_CONNECT_TIMEOUT
            )
        );
        // A typed key by `with_config`, as the environment names it.
        let c = builder_full()
            .with_config(ConfigKey::Location, "northeurope")
            .build()
            .unwrap();
        assert_eq!(c.location, "northeurope");
    }

    #[test]
    fn plain_http_is_only_for_loopback() {
        let e = Config::from_settings(&full().with("ORCA_AZURE_ENDPOINT", "http://example.com"))
            .unwrap_err();
        assert_eq!(keys(&e), ["ORCA_AZURE_ENDPOINT"]);
        let e = Config::from_settings(
            &full().with("ORCA_AZURE_ENDPOINT", "http://127.0.0.1.example.com"),
        )
        .unwrap_err();
        assert_eq!(keys(&e), ["ORCA_AZURE_ENDPOINT"]);
        let e = Config::from_settings(&full().with(
            "ORCA_AZURE_ENDPOINT",
            "https://me:pw-in-url@management.azure.com",
        ))
        .unwrap_err();
        assert_eq!(keys(&e), ["ORCA_AZURE_ENDPOINT"]);
        assert!(!e.to_string().contains("pw-in-url"), "{e}");
        let c =
            Config::from_settings(&full().with("ORCA_AZURE_ENDPOINT", "http://127.0.0.1:8080/"))
                .unwrap();
        assert_eq!(c.arm_endpoint, "http://127.0.0.1:8080");
    }
}
