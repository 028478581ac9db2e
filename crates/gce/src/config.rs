//! Settings as data: the typed keys ([`ConfigKey`], named as the environment variables), the
//! settings type ([`Config`]) read from a map ([`Config::from_settings`]), from the process
//! environment ([`Config::from_env`]) or built in code ([`Config::builder`]). Every problem of a set
//! of settings is named at once (unknown keys, missing ones, wrong values); credentials never appear in
//! `Debug` output or errors.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use orca_machines::kit::{ClientOptions, Timeouts, UtcClock};
use orca_machines::settings::{Problems, parse_bool, parse_duration};
use orca_machines::{Result, RetryPolicy, Settings};
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
/// The smallest boot disk Compute Engine makes from the Ubuntu images (their own size).
pub const MIN_DISK_GB: u32 = 10;
/// The default listing page size (`maxResults`); Compute Engine's own maximum.
pub const DEFAULT_PAGE_SIZE: u32 = 500;
/// The login user the SSH keys of a spec are given to (metadata `ssh-keys`, `<user>:<key>` lines)
/// unless [`ConfigKey::SshUser`] says otherwise.
pub const DEFAULT_SSH_USER: &str = "orca";
/// The timeout of one request (an operation `wait` gets two and a half minutes).
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// The driver's own timeouts: 10 s to connect, [`DEFAULT_REQUEST_TIMEOUT`] for a request.
const DEFAULT_TIMEOUTS: Timeouts =
    Timeouts::new(Duration::from_secs(10), Some(DEFAULT_REQUEST_TIMEOUT));
/// The longest the driver follows one operation, and waits for a resource another operation holds.
pub const DEFAULT_OPERATION_TIMEOUT: Duration = Duration::from_secs(600);
/// How long the driver keeps reading a machine that may be a fresh one before it believes "not found"
/// (see [`Config::visibility_window`]).
pub const DEFAULT_VISIBILITY_WINDOW: Duration = Duration::from_secs(10);

orca_machines::setting_keys! {
    /// The driver's settings by name: each is the environment variable [`Config::from_env`] reads and the
    /// key [`Config::from_settings`] takes (`orca::of_with("gce", owner, &settings)`).
    ///
    /// ```
    /// use orca_gce::ConfigKey;
    /// let k: ConfigKey = "ORCA_GCE_PROJECT".parse().unwrap();
    /// assert_eq!(k, ConfigKey::Project);
    /// assert_eq!(k.to_string(), "ORCA_GCE_PROJECT");
    /// assert!(ConfigKey::CredentialsBase64.is_secret());
    /// assert!("ORCA_GCE_PROJCT".parse::<ConfigKey>().is_err());
    /// ```
    pub enum ConfigKey for "gce" {
        /// `ORCA_GCE_PROJECT` (required): the project id.
        Project = "ORCA_GCE_PROJECT",
        /// `ORCA_GCE_ZONE` (optional): the one zone of a single-zone provider. Unset: the provider works
        /// in every zone of the project (a spec's location names the zone).
        Zone = "ORCA_GCE_ZONE",
        /// `ORCA_GCE_NETWORK` (required): the VPC network of the machines' interface.
        Network = "ORCA_GCE_NETWORK",
        /// `ORCA_GCE_SUBNET` (required): its subnet: one name, used in every region
        /// (`regions/<region of the zone>/subnetworks/<name>`), or `region=name` pairs separated by commas.
        Subnet = "ORCA_GCE_SUBNET",
        /// `ORCA_GCE_CREDENTIALS_FILE` (one credential source): a path to a service account JSON key.
        CredentialsFile = "ORCA_GCE_CREDENTIALS_FILE",
        /// `ORCA_GCE_CREDENTIALS_BASE64` (one credential source): the key itself, base64-encoded. Secret.
        CredentialsBase64 = "ORCA_GCE_CREDENTIALS_BASE64" secret,
        /// `ORCA_GCE_APPLICATION_DEFAULT_CREDENTIALS` (one credential source): `true` for application
        /// default credentials.
        ApplicationDefaultCredentials = "ORCA_GCE_APPLICATION_DEFAULT_CREDENTIALS",
        /// `ORCA_GCE_ENDPOINT` (optional): the API root (default [`DEFAULT_ENDPOINT`]).
        Endpoint = "ORCA_GCE_ENDPOINT",
        /// `ORCA_GCE_DISK_GB` (optional): the boot disk size, 10 to 65536 (default [`DEFAULT_DISK_GB`]).
        DiskGb = "ORCA_GCE_DISK_GB",
        /// `ORCA_GCE_NETWORK_TAGS` (optional): comma-separated network tags every machine gets.
        NetworkTags = "ORCA_GCE_NETWORK_TAGS",
        /// `ORCA_GCE_MAX_RUN_DURATION` (optional): `90s`, `30m`, `24h`, `2d` or seconds, 30 s to 120 days:
        /// Compute Engine stops a machine this long after each start, unless its spec says otherwise.
        MaxRunDuration = "ORCA_GCE_MAX_RUN_DURATION",
        /// `ORCA_GCE_PAGE_SIZE` (optional): `maxResults` of listings, 1 to 500 (default 500).
        PageSize = "ORCA_GCE_PAGE_SIZE",
        /// `ORCA_GCE_PUBLIC_IP` (optional): `false` for no external address (default `true`).
        PublicIp = "ORCA_GCE_PUBLIC_IP",
        /// `ORCA_GCE_SSH_USER` (optional): the login user of a spec's SSH keys (default
        /// [`DEFAULT_SSH_USER`]).
        SshUser = "ORCA_GCE_SSH_USER",
        /// `ORCA_GCE_IMAGE_PROJECT` (optional): the project of the default Ubuntu image families
        /// (default [`UBUNTU_IMAGE_PROJECT`]).
        ImageProject = "ORCA_GCE_IMAGE_PROJECT",
        /// `ORCA_GCE_RATE_QUOTA` (optional): the project's rate quota, requests a minute of each
        /// quota group (changes, reads, lists, operation reads; Compute Engine's default is 1,500).
        /// Set, the driver never spends past it; unset, it learns each group's from the group's
        /// first refusal (403 `rateLimitExceeded`).
        RateQuota = "ORCA_GCE_RATE_QUOTA",
    }
}

/// Where the driver's access tokens come from.
#[derive(Clone)]
#[non_exhaustive]
pub enum Credentials {
    /// A service account JSON key file at this path.
    ServiceAccountFile(PathBuf),
    /// A service account JSON key (the file's content).
    ServiceAccountJson(Arc<SecretString>),
    /// Application default credentials (gcp_auth's chain: `GOOGLE_APPLICATION_CREDENTIALS`, gcloud's
    /// application default credentials file, the metadata server, the `gcloud` command).
    ApplicationDefault,
    /// A token provider the caller built (one can serve several providers, sharing its tokens).
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

/// The subnet a machine's interface goes on, in the region of its zone.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Subnet {
    /// The subnet of this name in every region (`regions/<region>/subnetworks/<name>`).
    Named(String),
    /// The subnet of each region by name; a zone of a region not listed is refused before any call.
    PerRegion(BTreeMap<String, String>),
}

impl Subnet {
    /// Parses the setting: `name`, or `region=name,region=name`.
    ///
    /// ```
    /// use orca_gce::Subnet;
    /// assert_eq!(Subnet::parse("orca-subnet").unwrap().for_region("us-central1"), Some("orca-subnet"));
    /// let s = Subnet::parse("europe-west1=eu, us-central1=us").unwrap();
    /// assert_eq!(s.for_region("us-central1"), Some("us"));
    /// assert_eq!(s.for_region("asia-east1"), None);
    /// assert!(Subnet::parse("Bad_Name").is_none());
    /// ```
    pub fn parse(s: &str) -> Option<Subnet> {
        let s = s.trim();
        if !s.contains('=') {
            return valid_resource_name(s).then(|| Subnet::Named(s.to_string()));
        }
        let mut map = BTreeMap::new();
        for pair in s.split(',') {
            let (region, name) = pair.split_once('=')?;
            let (region, name) = (region.trim(), name.trim());
            if !valid_region(region) || !valid_resource_name(name) {
                return None;
            }
            if map.insert(region.to_string(), name.to_string()).is_some() {
                return None;
            }
        }
        Some(Subnet::PerRegion(map))
    }

    /// The subnet's name in `region`, if there is one.
    pub fn for_region(&self, region: &str) -> Option<&str> {
        match self {
            Subnet::Named(n) => Some(n),
            Subnet::PerRegion(m) => m.get(region).map(String::as_str),
        }
    }
}

/// The Compute Engine driver's settings. Build it with [`Config::from_settings`],
/// [`Config::from_env`] or [`Config::builder`]; fields may be changed after.
#[derive(Clone)]
#[non_exhaustive]
pub struct Config {
    /// The project id.
    pub project: String,
    /// The one zone of a single-zone provider: specs must name it, listings read it alone
    /// (`instances.list`), and a bare instance name as an id means an instance of it. `None`: every
    /// zone of the project (`instances.aggregatedList`), ids are `<zone>:<name>`.
    pub zone: Option<String>,
    /// The VPC network name.
    pub network: String,
    /// The subnet in each region.
    pub subnet: Subnet,
    /// Where tokens come from.
    pub credentials: Credentials,
    /// The API root (`https://compute.googleapis.com/compute/v1`; a fake's for tests).
    pub endpoint: String,
    /// The boot disk size in GB (10 to 65,536) unless a spec says otherwise.
    pub disk_gb: u32,
    /// Network tags every machine gets (firewall rules target them), beside a spec's own.
    pub network_tags: Vec<String>,
    /// The longest a machine runs after each start before Compute Engine stops it
    /// (`scheduling.maxRunDuration`, termination action `STOP`), unless a spec says otherwise.
    pub max_run_duration: Option<Duration>,
    /// The listing page size (`maxResults`, 1 to 500).
    pub page_size: u32,
    /// Whether machines get an external address (`ONE_TO_ONE_NAT`).
    pub public_ip: bool,
    /// The login user a spec's SSH keys are given to.
    pub ssh_user: String,
    /// The project of the default images.
    pub image_project: String,
    /// The rate quota, requests a minute of each quota group ([`ConfigKey::RateQuota`]); `None`:
    /// learnt from the first refusal.
    pub rate_quota: Option<u32>,
    /// The wall clock on which the rate quotas' minutes start (second :00 UTC); `None`: the
    /// system's, as it reads when the provider is made. A test on tokio's paused clock gives the
    /// fake's, so that both read the same minutes.
    pub clock: Option<UtcClock>,
    /// The retry policy of every call.
    pub retry: RetryPolicy,
    /// The longest the driver follows one operation.
    pub operation_timeout: Duration,
    /// The first pause after an `operations.wait` that answered at once with the operation still
    /// running (doubled after each such answer, up to 5 s); `ORCA_POLL_INTERVAL` sets it.
    pub poll_interval: Duration,
    /// The timeout of one HTTP request (an operation `wait` gets two and a half minutes).
    pub request_timeout: Duration,
    /// How long after making a machine the driver keeps reading it when the API answers "not found"
    /// (after its own insert, or for an id this provider made that long ago at most), before it
    /// believes the answer.
    pub visibility_window: Duration,
    /// The client settings every driver takes (connect timeout, poll interval, ...).
    pub client: ClientOptions,
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
            .field("ssh_user", &self.ssh_user)
            .field("rate_quota", &self.rate_quota)
            .finish_non_exhaustive()
    }
}

impl Config {
    /// A builder (the same rules as [`Config::from_settings`]; errors name the settings' keys).
    pub fn builder() -> ConfigBuilder {
        ConfigBuilder::default()
    }

    /// Settings from the `ORCA_GCE_*` environment variables ([`ConfigKey`]) and the client keys.
    pub fn from_env() -> Result<Config> {
        ConfigBuilder::from_env().build()
    }

    /// Settings from `settings`, keyed by [`ConfigKey`] names. An unknown key, a missing one and a
    /// wrong value are named all at once, in one [`InvalidSettings`](orca_machines::Error::InvalidSettings).
    pub fn from_settings(settings: &Settings) -> Result<Config> {
        ConfigBuilder::from_settings(settings).build()
    }

    /// The region of `zone` (`europe-west1-b` -> `europe-west1`).
    pub fn region_of(zone: &str) -> &str {
        zone.rsplit_once('-').map(|(r, _)| r).unwrap_or(zone)
    }
}

const CREDENTIALS: &str = "credentials";

/// Where the machines go, as the settings name it: project, zone, network and subnet.
struct Placement<'a> {
    project: Option<&'a str>,
    zone: Option<&'a str>,
    network: Option<&'a str>,
    subnet: Option<Subnet>,
}

/// Reads and checks the placement settings (the subnet against the zone's region), every problem
/// recorded in `p`.
fn read_placement<'a>(settings: &'a Settings, p: &mut Problems) -> Placement<'a> {
    use ConfigKey as K;
    let text = |k: K| settings.get(k.as_str()).map(str::trim);
    let project = p.require(settings, K::Project.as_str()).map(str::trim);
    if project.is_some_and(|v| !valid_project(v)) {
        p.invalid(
            K::Project.as_str(),
            "a project id (6 to 30 of a-z, 0-9 and '-', starting with a letter, not ending in '-')",
        );
    }
    let zone = text(K::Zone);
    if zone.is_some_and(|z| !valid_zone(z)) {
        p.invalid(K::Zone.as_str(), "a zone name like europe-west1-b");
    }
    let network = p.require(settings, K::Network.as_str()).map(str::trim);
    if network.is_some_and(|n| !valid_resource_name(n)) {
        p.invalid(
            K::Network.as_str(),
            "a network name (1 to 63 of a-z, 0-9 and '-', starting with a letter)",
        );
    }
    let subnet_rule = "a subnet name, or region=name pairs separated by commas (europe-west1=orca-eu,us-central1=orca-us)";
    let subnet = p.parse(settings, K::Subnet.as_str(), subnet_rule, Subnet::parse);
    if settings.get(K::Subnet.as_str()).is_none() {
        p.missing(K::Subnet.as_str());
    }
    if let (Some(z), Some(s)) = (zone.filter(|z| valid_zone(z)), &subnet)
        && s.for_region(Config::region_of(z)).is_none()
    {
        p.invalid(
            K::Subnet.as_str(),
            format!(
                "names no subnet for the region of ORCA_GCE_ZONE ({})",
                Config::region_of(z)
            ),
        );
    }
    Placement {
        project,
        zone,
        network,
        subnet,
    }
}

/// Reads and checks every setting, collecting every problem. `extra` holds credential sources given
/// in code (named `credentials` when at fault).
/// `client` holds client options given in code, which replace the settings' client keys.
fn read_settings(
    settings: &Settings,
    extra: Vec<Credentials>,
    client: Option<ClientOptions>,
) -> Result<Config> {
    use ConfigKey as K;
    let mut p = Problems::new();
    p.unknown_keys::<ConfigKey>(settings);
    let from_keys = ClientOptions::from_settings(settings, &mut p);
    let client = client.unwrap_or(from_keys);
    let text = |k: K| settings.get(k.as_str()).map(str::trim);
    let Placement {
        project,
        zone,
        network,
        subnet,
    } = read_placement(settings, &mut p);

    let credentials = read_credentials(settings, extra, &mut p);

    let endpoint = read_endpoint(text(K::Endpoint), &mut p);
    let disk_gb = p
        .parse(
            settings,
            K::DiskGb.as_str(),
            "a whole number of GB, 10 to 65536",
            |v| {
                v.parse::<u32>()
                    .ok()
                    .filter(|g| (MIN_DISK_GB..=65_536).contains(g))
            },
        )
        .unwrap_or(DEFAULT_DISK_GB);
    let network_tags: Vec<String> = p
        .parse(
            settings,
            K::NetworkTags.as_str(),
            "comma-separated tags, each 1 to 63 of a-z, 0-9 and '-', starting with a letter",
            parse_tags,
        )
        .unwrap_or_default();
    let max_run_duration = p.parse(
        settings,
        K::MaxRunDuration.as_str(),
        "90s, 30m, 24h, 2d or seconds, from 30 seconds to 120 days",
        parse_run_duration,
    );
    let page_size = p
        .parse(
            settings,
            K::PageSize.as_str(),
            "a number from 1 to 500",
            |v| v.parse::<u32>().ok().filter(|n| (1..=500).contains(n)),
        )
        .unwrap_or(DEFAULT_PAGE_SIZE);
    let public_ip = p
        .parse(settings, K::PublicIp.as_str(), "true or false", parse_bool)
        .unwrap_or(true);
    let ssh_user = p
        .parse(
            settings,
            K::SshUser.as_str(),
            "a login name: 1 to 32 of a-z, 0-9, '_' and '-', starting with a letter or '_'",
            |v| valid_user(v).then(|| v.to_string()),
        )
        .unwrap_or_else(|| DEFAULT_SSH_USER.to_string());
    let image_project = p
        .parse(settings, K::ImageProject.as_str(), "a project id", |v| {
            valid_project(v).then(|| v.to_string())
        })
        .unwrap_or_else(|| UBUNTU_IMAGE_PROJECT.to_string());
    let rate_quota = p.parse(
        settings,
        K::RateQuota.as_str(),
        "requests a minute, a whole number from 1 to 1000000",
        |v| {
            v.parse::<u32>()
                .ok()
                .filter(|n| (1..=1_000_000).contains(n))
        },
    );
    p.finish()?;
    Ok(Config {
        project: project.unwrap_or_default().to_string(),
        zone: zone.map(str::to_string),
        network: network.unwrap_or_default().to_string(),
        subnet: subnet.expect("checked"),
        credentials: credentials.expect("checked"),
        endpoint,
        disk_gb,
        network_tags,
        max_run_duration,
        page_size,
        public_ip,
        ssh_user,
        image_project,
        rate_quota,
        clock: None,
        // A resource another operation holds is waited for as long as an operation may last.
        retry: client
            .retry_policy(RetryPolicy::default())
            .with_busy_wait(DEFAULT_OPERATION_TIMEOUT),
        operation_timeout: DEFAULT_OPERATION_TIMEOUT,
        poll_interval: client.poll_interval_or(Duration::from_millis(250)),
        request_timeout: Timeouts::resolve(None, None, &client, DEFAULT_TIMEOUTS)
            .request
            .unwrap_or(DEFAULT_REQUEST_TIMEOUT),
        visibility_window: client.visibility_window_or(None, DEFAULT_VISIBILITY_WINDOW),
        client,
    })
}

/// The API root (else [`DEFAULT_ENDPOINT`]), without trailing slash; one unfit to carry the access
/// token (`kit::is_endpoint`) is a problem.
fn read_endpoint(text: Option<&str>, p: &mut Problems) -> String {
    let endpoint = text
        .unwrap_or(DEFAULT_ENDPOINT)
        .trim_end_matches('/')
        .to_string();
    if !orca_machines::kit::is_endpoint(&endpoint) {
        p.invalid(
            ConfigKey::Endpoint.as_str(),
            orca_machines::kit::ENDPOINT_RULE,
        );
    }
    endpoint
}

/// Comma-separated network tags, each a resource name.
fn parse_tags(v: &str) -> Option<Vec<String>> {
    let tags: Vec<String> = v
        .split(',')
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
        .collect();
    tags.iter().all(|t| valid_resource_name(t)).then_some(tags)
}

/// A maximum run duration Compute Engine takes (30 seconds to 120 days).
fn parse_run_duration(v: &str) -> Option<Duration> {
    parse_duration(v).filter(|d| {
        (orca_machines::spec::MIN_RUN_DURATION..=orca_machines::spec::MAX_RUN_DURATION).contains(d)
    })
}

/// The one credential source of `settings` and `extra` (sources given in code), every problem
/// recorded in `p`.
fn read_credentials(
    settings: &Settings,
    extra: Vec<Credentials>,
    p: &mut Problems,
) -> Option<Credentials> {
    use ConfigKey as K;
    let text = |k: K| settings.get(k.as_str()).map(str::trim);
    let file = text(K::CredentialsFile);
    let b64 = settings.get(K::CredentialsBase64.as_str());
    let adc = p.parse(
        settings,
        K::ApplicationDefaultCredentials.as_str(),
        "true or false",
        parse_bool,
    );
    let mut given: Vec<String> = [
        (file.is_some(), K::CredentialsFile),
        (b64.is_some(), K::CredentialsBase64),
        (adc == Some(true), K::ApplicationDefaultCredentials),
    ]
    .into_iter()
    .filter(|(set, _)| *set)
    .map(|(_, k)| k.as_str().to_string())
    .chain(extra.iter().map(|_| CREDENTIALS.to_string()))
    .collect();
    let mut credentials = None;
    let source_key = given.first().cloned().unwrap_or_default();
    match given.len() {
        0 if settings
            .get(K::ApplicationDefaultCredentials.as_str())
            .is_none()
            || adc.is_some() =>
        {
            p.missing(format!(
                "{} or {} (or {}=true)",
                K::CredentialsFile,
                K::CredentialsBase64,
                K::ApplicationDefaultCredentials
            ));
        }
        0 => {}
        1 => {
            credentials = if let Some(c) = extra.into_iter().next() {
                Some(c)
            } else if let Some(f) = file {
                Some(Credentials::ServiceAccountFile(PathBuf::from(f)))
            } else if let Some(b) = b64 {
                match decode_key(b) {
                    Ok(c) => Some(c),
                    Err(why) => {
                        p.invalid(K::CredentialsBase64.as_str(), why);
                        None
                    }
                }
            } else {
                Some(Credentials::ApplicationDefault)
            };
        }
        _ => {
            given.dedup();
            for k in &given {
                p.invalid(
                    k.clone(),
                    format!(
                        "exactly one credential source may be set, got {}",
                        given.join(", ")
                    ),
                );
            }
        }
    }
    if let Some(Credentials::ServiceAccountJson(j)) = &credentials
        && let Err(why) = check_service_account_json(j.expose_secret())
    {
        p.invalid(source_key, why);
    }
    credentials
}

/// A base64 service account key (standard or URL-safe alphabet), never echoed.
fn decode_key(b64: &str) -> std::result::Result<Credentials, String> {
    let b64 = b64.trim();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64.as_bytes())
        .or_else(|_| base64::engine::general_purpose::URL_SAFE.decode(b64.as_bytes()))
        .map_err(|_| "is not base64".to_string())?;
    let json = String::from_utf8(bytes).map_err(|_| "is not base64 of a JSON key".to_string())?;
    Ok(Credentials::ServiceAccountJson(Arc::new(
        SecretString::from(json),
    )))
}

/// Builds a [`Config`] in code, with the same rules as [`Config::from_settings`] (errors name the
/// [`ConfigKey`] of a value at fault, and `credentials` for the credential sources given here).
#[derive(Default)]
pub struct ConfigBuilder {
    settings: Settings,
    credentials: Vec<Credentials>,
    retry: Option<RetryPolicy>,
    operation_timeout: Option<Duration>,
    poll_interval: Option<Duration>,
    request_timeout: Option<Duration>,
    visibility_window: Option<Duration>,
    /// Client options given in code: they replace the client keys of the settings.
    client: Option<ClientOptions>,
    clock: Option<UtcClock>,
}

impl std::fmt::Debug for ConfigBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfigBuilder")
            .field("settings", &self.settings)
            .field("credentials", &self.credentials)
            .finish_non_exhaustive()
    }
}

impl ConfigBuilder {
    /// A builder holding this process's environment settings (see [`Config::from_env`]), to adjust
    /// before [`build`](Self::build).
    pub fn from_env() -> ConfigBuilder {
        Self::from_settings(&Settings::from_env_keys::<ConfigKey>())
    }

    /// A builder holding `settings` (see [`Config::from_settings`]), to adjust before
    /// [`build`](Self::build); unknown keys are refused by `build`, every problem named at once.
    pub fn from_settings(settings: &Settings) -> ConfigBuilder {
        ConfigBuilder {
            settings: settings.clone(),
            ..ConfigBuilder::default()
        }
    }

    /// The client settings every driver takes (timeouts, poll interval, retry budget), as the
    /// `ORCA_*` client keys set them. A value given to this builder's own methods (`retry`,
    /// `poll_interval`, `request_timeout`) wins over these; they win over the defaults.
    pub fn client_options(mut self, options: ClientOptions) -> Self {
        self.client = Some(options);
        self
    }

    /// Sets `key` to `value`, as a [`Settings`] entry would.
    pub fn with_config(mut self, key: ConfigKey, value: impl Into<String>) -> Self {
        self.settings.insert(key.as_str(), value);
        self
    }

    /// The project id (required).
    pub fn project(self, v: impl Into<String>) -> Self {
        self.with_config(ConfigKey::Project, v)
    }
    /// The one zone of a single-zone provider (unset: every zone of the project).
    pub fn zone(self, v: impl Into<String>) -> Self {
        self.with_config(ConfigKey::Zone, v)
    }
    /// The VPC network name (required).
    pub fn network(self, v: impl Into<String>) -> Self {
        self.with_config(ConfigKey::Network, v)
    }
    /// The subnet (required): a name in every region, or `region=name` pairs ([`Subnet::parse`]).
    pub fn subnet(self, v: impl Into<String>) -> Self {
        self.with_config(ConfigKey::Subnet, v)
    }
    /// The API root (default [`DEFAULT_ENDPOINT`]).
    pub fn endpoint(self, v: impl Into<String>) -> Self {
        self.with_config(ConfigKey::Endpoint, v)
    }
    /// The project of the default images (default [`UBUNTU_IMAGE_PROJECT`]).
    pub fn image_project(self, v: impl Into<String>) -> Self {
        self.with_config(ConfigKey::ImageProject, v)
    }
    /// The login user of a spec's SSH keys (default [`DEFAULT_SSH_USER`]).
    pub fn ssh_user(self, v: impl Into<String>) -> Self {
        self.with_config(ConfigKey::SshUser, v)
    }
    /// The boot disk size in GB (default [`DEFAULT_DISK_GB`]).
    pub fn disk_gb(self, gb: u32) -> Self {
        self.with_config(ConfigKey::DiskGb, gb.to_string())
    }
    /// The longest a machine runs after each start before Compute Engine stops it.
    pub fn max_run_duration(self, d: Duration) -> Self {
        self.with_config(ConfigKey::MaxRunDuration, d.as_secs().to_string())
    }
    /// The listing page size, 1 to 500 (default 500).
    pub fn page_size(self, n: u32) -> Self {
        self.with_config(ConfigKey::PageSize, n.to_string())
    }
    /// The project's rate quota, requests a minute of each quota group
    /// ([`ConfigKey::RateQuota`]; unset: learnt from the first refusal).
    pub fn rate_quota(self, per_minute: u32) -> Self {
        self.with_config(ConfigKey::RateQuota, per_minute.to_string())
    }
    /// The wall clock on which the rate quotas' minutes start (default: the system's); see
    /// [`Config::clock`].
    pub fn clock(mut self, clock: UtcClock) -> Self {
        self.clock = Some(clock);
        self
    }
    /// Whether machines get an external address (default true).
    pub fn public_ip(self, on: bool) -> Self {
        self.with_config(ConfigKey::PublicIp, on.to_string())
    }
    /// Network tags every machine gets.
    pub fn network_tags<I, S>(self, tags: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let joined = tags
            .into_iter()
            .map(Into::into)
            .collect::<Vec<String>>()
            .join(",");
        self.with_config(ConfigKey::NetworkTags, joined)
    }

    /// A credential source (exactly one must be given, here or as a setting).
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

    /// The retry policy (default [`RetryPolicy::default`], waiting for a resource another operation
    /// holds as long as the operation timeout).
    pub fn retry(mut self, r: RetryPolicy) -> Self {
        self.retry = Some(r);
        self
    }
    /// The longest the driver follows one operation (default 10 minutes).
    pub fn operation_timeout(mut self, d: Duration) -> Self {
        self.operation_timeout = Some(d);
        self
    }
    /// The first pause after an `operations.wait` that answered at once unfinished (default 250 ms;
    /// doubled after each such answer, up to 5 s).
    pub fn poll_interval(mut self, d: Duration) -> Self {
        self.poll_interval = Some(d);
        self
    }
    /// The timeout of one HTTP request (default 60 s).
    pub fn request_timeout(mut self, d: Duration) -> Self {
        self.request_timeout = Some(d);
        self
    }
    /// How long a fresh machine's "not found" is read again (default
    /// [`DEFAULT_VISIBILITY_WINDOW`]; wins over `ORCA_VISIBILITY_WINDOW`).
    pub fn visibility_window(mut self, d: Duration) -> Self {
        self.visibility_window = Some(d);
        self
    }

    /// The settings, or one error naming every missing or invalid one.
    pub fn build(self) -> Result<Config> {
        let mut c = read_settings(&self.settings, self.credentials, self.client)?;
        if let Some(r) = self.retry {
            c.retry = r;
        }
        if let Some(d) = self.operation_timeout {
            c.operation_timeout = d;
            if self.retry.is_none() {
                c.retry.busy_wait = d;
            }
        }
        if let Some(d) = self.poll_interval {
            if d.is_zero() {
                // A zero pause stays zero when doubled: an early answer would be asked again at once.
                let mut p = Problems::new();
                p.invalid("poll_interval", "above zero");
                p.finish()?;
            }
            c.poll_interval = d;
        }
        // The builder's value beats ORCA_REQUEST_TIMEOUT, which beats the default.
        let resolved = Timeouts::resolve(None, self.request_timeout, &c.client, DEFAULT_TIMEOUTS);
        c.request_timeout = resolved.request.unwrap_or(DEFAULT_REQUEST_TIMEOUT);
        if let Some(d) = self.visibility_window {
            c.visibility_window = d;
        }
        c.clock = self.clock;
        Ok(c)
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

/// A project id as Compute Engine takes it: 6 to 30 of a-z, 0-9 and '-', starting with a letter
/// and not ending in '-'; a domain-scoped one puts its domain first (`example.com:my-project`).
/// It goes into URL paths as it is, so it is never a dot segment.
fn valid_project(p: &str) -> bool {
    let (domain, id) = match p.split_once(':') {
        Some((d, id)) => (Some(d), id),
        None => (None, p),
    };
    let b = id.as_bytes();
    let id_ok = (6..=30).contains(&b.len())
        && b[0].is_ascii_lowercase()
        && b[b.len() - 1] != b'-'
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-');
    let domain_ok = domain.is_none_or(|d| {
        d.len() <= 63
            && d.split('.').all(|l| {
                !l.is_empty()
                    && l.bytes()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
            })
    });
    id_ok && domain_ok
}

/// A zone name: `<area>-<location><n>-<letter>` (`europe-west1-b`).
pub(crate) fn valid_zone(z: &str) -> bool {
    z.split('-').count() == 3 && valid_resource_name(z)
}

fn valid_region(r: &str) -> bool {
    r.split('-').count() == 2 && valid_resource_name(r)
}

fn valid_user(u: &str) -> bool {
    let b = u.as_bytes();
    !b.is_empty()
        && b.len() <= 32
        && (b[0].is_ascii_lowercase() || b[0] == b'_')
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'_' | b'-'))
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
    use orca_machines::Error;

    const SECRET: &str =
        "-----BEGIN PRIVATE KEY-----\\nSUPERSECRETKEYMATERIAL\\n-----END PRIVATE KEY-----\\n";

    fn sa_json() -> String {
        format!(
            r#"{{"type":"service_account","project_id":"p","private_key":"{SECRET}","client_email":"a@b.c","token_uri":"http://127.0.0.1:1/token"}}"#
        )
    }

    fn settings(pairs: &[(&str, &str)]) -> Settings {
        pairs.iter().map(|(k, v)| (*k, *v)).collect()
    }

    fn keys_of(e: &Error) -> Vec<String> {
        match e {
            Error::InvalidSettings { keys, .. } => keys.clone(),
            other => panic!("{other:?}"),
        }
    }

    const BASE: [(&str, &str); 4] = [
        ("ORCA_GCE_PROJECT", "proj-1"),
        ("ORCA_GCE_NETWORK", "net"),
        ("ORCA_GCE_SUBNET", "sub"),
        ("ORCA_GCE_CREDENTIALS_FILE", "/k.json"),
    ];

    #[test]
    fn an_endpoint_that_would_show_the_access_token_is_refused_without_echoing_it() {
        let with = |endpoint: &str| {
            let mut s = settings(&BASE);
            s.insert("ORCA_GCE_ENDPOINT", endpoint);
            Config::from_settings(&s)
        };
        for bad in [
            "http://compute.googleapis.com/compute/v1",
            "http://10.1.2.3:8080",
            "https://me:pw-in-url@compute.googleapis.com/compute/v1",
        ] {
            let e = with(bad).unwrap_err();
            assert_eq!(keys_of(&e), ["ORCA_GCE_ENDPOINT"], "{bad}");
            assert!(e.to_string().contains("https://"), "{e}");
            assert!(!e.to_string().contains("pw-in-url"), "{e}");
        }
        assert!(with("http://127.0.0.1:9000/compute/v1").is_ok());
    }

    #[test]
    fn keys_round_trip_and_only_the_key_is_secret() {
        for &k in ConfigKey::ALL {
            assert_eq!(k.as_str().parse::<ConfigKey>().unwrap(), k);
            assert_eq!(k.to_string(), k.as_str());
            assert!(k.as_str().starts_with("ORCA_GCE_"), "{k}");
            assert_eq!(k.is_secret(), k == ConfigKey::CredentialsBase64, "{k}");
        }
        let mut names = ConfigKey::names();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ConfigKey::ALL.len());
        let e = "SHED_GCE_PROJECT".parse::<ConfigKey>().unwrap_err();
        assert_eq!(keys_of(&e), ["SHED_GCE_PROJECT"]);
    }

    #[test]
    fn every_problem_is_named_at_once() {
        let e = Config::from_settings(&settings(&[
            ("ORCA_GCE_ZONE", "nowhere"),
            ("ORCA_GCE_PAGE_SIZE", "501"),
            ("ORCA_GCE_TYPO", "x"),
            ("GOOGLE_CREDENTIALS_BASE64", "e30="),
        ]))
        .unwrap_err();
        let keys = keys_of(&e);
        for k in [
            "ORCA_GCE_PROJECT",
            "ORCA_GCE_NETWORK",
            "ORCA_GCE_SUBNET",
            "ORCA_GCE_ZONE",
            "ORCA_GCE_PAGE_SIZE",
            "ORCA_GCE_TYPO",
            "GOOGLE_CREDENTIALS_BASE64",
        ] {
            assert!(keys.iter().any(|x| x == k), "{k} not in {keys:?}");
        }
        assert!(
            keys.iter().any(|x| x.contains("ORCA_GCE_CREDENTIALS_FILE")),
            "{keys:?}"
        );
    }

    #[test]
    fn a_base64_key_is_read_and_never_printed() {
        let b64 = base64::engine::general_purpose::STANDARD.encode(sa_json());
        let mut s = settings(&BASE[..3]);
        s.insert("ORCA_GCE_CREDENTIALS_BASE64", b64.clone());
        let c = Config::from_settings(&s).unwrap();
        assert!(matches!(c.credentials, Credentials::ServiceAccountJson(_)));
        assert_eq!((c.zone.as_deref(), c.ssh_user.as_str()), (None, "orca"));
        for text in [format!("{c:?}"), format!("{s:?}")] {
            assert!(
                !text.contains("SUPERSECRET") && !text.contains(&b64),
                "{text}"
            );
        }
        // Not base64, and not a key: named, not echoed.
        for bad in ["%%%", "e30="] {
            let mut s = settings(&BASE[..3]);
            s.insert("ORCA_GCE_CREDENTIALS_BASE64", bad);
            let e = Config::from_settings(&s).unwrap_err();
            assert!(!e.to_string().contains(bad), "{e}");
            assert_eq!(keys_of(&e), ["ORCA_GCE_CREDENTIALS_BASE64"], "{e}");
        }
    }

    #[test]
    fn two_credential_sources_are_both_named() {
        let mut s = settings(&BASE);
        s.insert("ORCA_GCE_APPLICATION_DEFAULT_CREDENTIALS", "true");
        let e = Config::from_settings(&s).unwrap_err();
        assert_eq!(
            keys_of(&e),
            [
                "ORCA_GCE_CREDENTIALS_FILE",
                "ORCA_GCE_APPLICATION_DEFAULT_CREDENTIALS"
            ]
        );
        let e = Config::builder()
            .project("proj-1")
            .network("n")
            .subnet("s")
            .credentials_json(sa_json())
            .credentials_file("/k.json")
            .build()
            .unwrap_err();
        assert_eq!(keys_of(&e), ["credentials"]);
        assert!(!e.to_string().contains("SUPERSECRET"));
    }

    #[test]
    fn optional_settings_parse_and_bad_values_are_named() {
        let mut with = BASE.to_vec();
        with.extend([
            ("ORCA_GCE_ZONE", "europe-west1-b"),
            ("ORCA_GCE_NETWORK_TAGS", "shed-a, ssh"),
            ("ORCA_GCE_MAX_RUN_DURATION", "24h"),
            ("ORCA_GCE_PAGE_SIZE", "1"),
            ("ORCA_GCE_DISK_GB", "50"),
            ("ORCA_GCE_ENDPOINT", "http://127.0.0.1:9/compute/v1/"),
            ("ORCA_GCE_SSH_USER", "shed"),
            ("ORCA_GCE_PUBLIC_IP", "no"),
            ("ORCA_VISIBILITY_WINDOW", "3s"),
        ]);
        let c = Config::from_settings(&settings(&with)).unwrap();
        assert_eq!(c.visibility_window, Duration::from_secs(3));
        let c2 = ConfigBuilder::from_settings(&settings(&with))
            .visibility_window(Duration::from_millis(200))
            .build()
            .unwrap();
        assert_eq!(c2.visibility_window, Duration::from_millis(200));
        let plain = Config::from_settings(&settings(&BASE)).unwrap();
        assert_eq!(plain.visibility_window, DEFAULT_VISIBILITY_WINDOW);
        assert_eq!(c.network_tags, ["shed-a", "ssh"]);
        assert_eq!(c.max_run_duration, Some(Duration::from_secs(86_400)));
        assert_eq!((c.page_size, c.disk_gb), (1, 50));
        assert_eq!(c.endpoint, "http://127.0.0.1:9/compute/v1");
        assert_eq!(c.zone.as_deref(), Some("europe-west1-b"));
        assert_eq!((c.ssh_user.as_str(), c.public_ip), ("shed", false));
        for (k, v) in [
            ("ORCA_GCE_PAGE_SIZE", "501"),
            ("ORCA_GCE_DISK_GB", "5"),
            ("ORCA_GCE_MAX_RUN_DURATION", "soon"),
            ("ORCA_GCE_MAX_RUN_DURATION", "10s"),
            ("ORCA_GCE_NETWORK_TAGS", "Bad_Tag"),
            ("ORCA_GCE_ZONE", "nowhere"),
            ("ORCA_GCE_SUBNET", "europe-west1=a,europe-west1=b"),
            ("ORCA_GCE_SSH_USER", "Root"),
            ("ORCA_GCE_ENDPOINT", "ftp://x"),
            ("ORCA_GCE_APPLICATION_DEFAULT_CREDENTIALS", "perhaps"),
            ("ORCA_VISIBILITY_WINDOW", "0s"),
        ] {
            let mut bad = BASE.to_vec();
            bad.retain(|(x, _)| *x != k);
            bad.push((k, v));
            let e = Config::from_settings(&settings(&bad)).unwrap_err();
            assert_eq!(keys_of(&e), [k], "{k}={v}: {e}");
        }
    }

    #[test]
    fn project_ids_follow_compute_engines_rule() {
        // 6 to 30 of a-z, 0-9 and '-', starting with a letter, not ending in '-'; a domain-scoped
        // id puts `domain:` before one. Anything else, dot segments first, is refused by name.
        let long = format!("p{}", "0".repeat(30));
        for bad in [
            "..",
            ".",
            "p1",
            "proj-",
            "1proj-a",
            "Proj-12",
            "proj_12",
            long.as_str(),
            "example.com:..",
            "..:proj-12",
            ":proj-12",
        ] {
            for key in ["ORCA_GCE_PROJECT", "ORCA_GCE_IMAGE_PROJECT"] {
                let mut s = settings(&BASE);
                s.insert(key, bad);
                let e = Config::from_settings(&s).unwrap_err();
                assert_eq!(keys_of(&e), [key], "{key}={bad}: {e}");
            }
        }
        for good in [
            "proj-1",
            "orca-fake-project",
            "ubuntu-os-cloud",
            "example.com:proj-12",
            &long[..30],
        ] {
            let mut s = settings(&BASE);
            s.insert("ORCA_GCE_PROJECT", good);
            s.insert("ORCA_GCE_IMAGE_PROJECT", good);
            let c = Config::from_settings(&s).unwrap();
            assert_eq!(c.project, good);
        }
    }

    #[test]
    fn subnets_per_region_must_cover_the_single_zone() {
        let mut s = settings(&BASE);
        s.insert("ORCA_GCE_SUBNET", "us-central1=us,europe-west4=eu4");
        let c = Config::from_settings(&s).unwrap();
        assert_eq!(c.subnet.for_region("europe-west4"), Some("eu4"));
        s.insert("ORCA_GCE_ZONE", "europe-west1-b");
        let e = Config::from_settings(&s).unwrap_err();
        assert_eq!(keys_of(&e), ["ORCA_GCE_SUBNET"]);
        assert!(e.to_string().contains("europe-west1"), "{e}");
    }

    #[test]
    fn application_default_credentials_are_an_explicit_choice() {
        let mut on = settings(&BASE[..3]);
        on.insert("ORCA_GCE_APPLICATION_DEFAULT_CREDENTIALS", "true");
        let c = Config::from_settings(&on).unwrap();
        assert!(matches!(c.credentials, Credentials::ApplicationDefault));
        let mut off = settings(&BASE[..3]);
        off.insert("ORCA_GCE_APPLICATION_DEFAULT_CREDENTIALS", "false");
        let e = Config::from_settings(&off).unwrap_err();
        assert!(e.to_string().contains("ORCA_GCE_CREDENTIALS_FILE"), "{e}");
    }

    #[test]
    fn a_broken_key_is_refused_without_echoing_it() {
        let e = Config::builder()
            .project("proj-1")
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
        assert_eq!(keys_of(&e), ["credentials"]);
    }

    #[test]
    fn the_builder_beats_the_request_timeout_key_which_beats_the_default() {
        let mut s = settings(&BASE);
        assert_eq!(
            Config::from_settings(&s).unwrap().request_timeout,
            DEFAULT_REQUEST_TIMEOUT
        );
        s.insert("ORCA_REQUEST_TIMEOUT", "20s");
        assert_eq!(
            Config::from_settings(&s).unwrap().request_timeout,
            Duration::from_secs(20)
        );
        let c = ConfigBuilder::from_settings(&s)
            .request_timeout(Duration::from_secs(7))
            .build()
            .unwrap();
        assert_eq!(c.request_timeout, Duration::from_secs(7));
    }

    #[test]
    fn a_zero_poll_interval_is_refused_naming_it() {
        let b = || {
            Config::builder()
                .project("proj-1")
                .network("n")
                .subnet("s")
                .credentials_json(sa_json())
        };
        let e = b().poll_interval(Duration::ZERO).build().unwrap_err();
        assert_eq!(keys_of(&e), ["poll_interval"]);
        let c = b().poll_interval(Duration::from_millis(5)).build().unwrap();
        assert_eq!(c.poll_interval, Duration::from_millis(5));
    }
}
