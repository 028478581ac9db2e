//! Settings as data: the keys ([`ConfigKey`], named as the environment variables), read from the
//! environment ([`Config::from_env`]), from a map ([`Config::from_settings`]) or set in code
//! ([`Config::builder`]), checked all at once.
//!
//! Region and credentials: [`Config::from_settings`] takes them from the map (`AWS_REGION`,
//! `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, optional `AWS_SESSION_TOKEN`: static credentials) and
//! never from the process environment; [`Config::from_env`] leaves them to aws-config's standard chain
//! (environment, profile, SSO, `credential_process`, web identity, ECS, IMDS). A builder asks that
//! chain only for what it was not given.

use std::collections::BTreeMap;
use std::time::Duration;

use orca_machines::kit::{self, ClientKey, ClientSettings, Timeouts};
use orca_machines::settings::Problems;
use orca_machines::spec::validate_token;
use orca_machines::{Arch, Result, RetryPolicy, Settings};
use secrecy::{ExposeSecret, SecretString};

orca_machines::setting_keys! {
    /// A setting of the EC2 driver, by the name of its environment variable (as object_store's
    /// `AmazonS3ConfigKey`). The same names key [`Settings`] maps.
    pub enum ConfigKey for "ec2" {
        /// `AWS_REGION`: the region; one provider works in one region.
        Region = "AWS_REGION",
        /// `AWS_ACCESS_KEY_ID`: the access key of static credentials.
        AccessKeyId = "AWS_ACCESS_KEY_ID",
        /// `AWS_SECRET_ACCESS_KEY`: the secret of static credentials. Secret.
        SecretAccessKey = "AWS_SECRET_ACCESS_KEY" secret,
        /// `AWS_SESSION_TOKEN`: the session token of temporary static credentials. Secret.
        SessionToken = "AWS_SESSION_TOKEN" secret,
        /// `ORCA_EC2_SUBNETS`: `zone=subnet` pairs: the availability zones machines can be made in, and
        /// the subnet of each. Required.
        Subnets = "ORCA_EC2_SUBNETS",
        /// `ORCA_EC2_SECURITY_GROUP`: the security group every machine gets (`sg-...`). Required.
        SecurityGroup = "ORCA_EC2_SECURITY_GROUP",
        /// `ORCA_EC2_INSTANCE_PROFILE`: the instance profile every machine gets, by name or ARN. Required.
        InstanceProfile = "ORCA_EC2_INSTANCE_PROFILE",
        /// `ORCA_EC2_IMAGES`: `arch=ami` pairs used instead of Canonical's Ubuntu 24.04.
        Images = "ORCA_EC2_IMAGES",
        /// `ORCA_EC2_ROOT_VOLUME_GB`: the root volume's size in GiB (default: the image's own).
        RootVolumeGb = "ORCA_EC2_ROOT_VOLUME_GB",
        /// `ORCA_EC2_ENDPOINT`: the EC2 endpoint URL (tests point it at the emulator on 127.0.0.1).
        Endpoint = "ORCA_EC2_ENDPOINT",
        /// `ORCA_EC2_CONFIRM_NOT_FOUND`: how long a "not found" for an instance this provider did not
        /// make lately is confirmed before it is believed (`10s`, `1500ms`; default
        /// [`DEFAULT_CONFIRM_NOT_FOUND`]; [`ConfigBuilder::confirm_not_found`]).
        ConfirmNotFound = "ORCA_EC2_CONFIRM_NOT_FOUND",
    }
}

impl ConfigKey {
    /// Whether aws-config's standard chain supplies this key when the settings come from the
    /// environment (region and credentials).
    pub const fn is_aws_chain(self) -> bool {
        matches!(
            self,
            ConfigKey::Region
                | ConfigKey::AccessKeyId
                | ConfigKey::SecretAccessKey
                | ConfigKey::SessionToken
        )
    }
}

/// The region ([`ConfigKey::Region`]).
pub const REGION_ENV: &str = ConfigKey::Region.as_str();
/// Static credentials' access key ([`ConfigKey::AccessKeyId`]).
pub const ACCESS_KEY_ID_ENV: &str = ConfigKey::AccessKeyId.as_str();
/// Static credentials' secret ([`ConfigKey::SecretAccessKey`]).
pub const SECRET_ACCESS_KEY_ENV: &str = ConfigKey::SecretAccessKey.as_str();
/// Static credentials' session token ([`ConfigKey::SessionToken`]).
pub const SESSION_TOKEN_ENV: &str = ConfigKey::SessionToken.as_str();
/// `zone=subnet` pairs ([`ConfigKey::Subnets`]).
pub const SUBNETS_ENV: &str = ConfigKey::Subnets.as_str();
/// The security group every machine gets ([`ConfigKey::SecurityGroup`]).
pub const SECURITY_GROUP_ENV: &str = ConfigKey::SecurityGroup.as_str();
/// The instance profile every machine gets ([`ConfigKey::InstanceProfile`]).
pub const INSTANCE_PROFILE_ENV: &str = ConfigKey::InstanceProfile.as_str();
/// `arch=ami` pairs ([`ConfigKey::Images`]).
pub const IMAGES_ENV: &str = ConfigKey::Images.as_str();
/// The root volume's size in GiB ([`ConfigKey::RootVolumeGb`]).
pub const ROOT_VOLUME_ENV: &str = ConfigKey::RootVolumeGb.as_str();
/// The EC2 endpoint URL ([`ConfigKey::Endpoint`]).
pub const ENDPOINT_ENV: &str = ConfigKey::Endpoint.as_str();

/// Canonical's AWS account: the owner of the official Ubuntu images in the default partition (`aws`).
pub const CANONICAL_OWNER: &str = "099720109477";
/// Canonical's account in AWS GovCloud (US) (`aws-us-gov`, regions `us-gov-*`).
pub const CANONICAL_OWNER_GOVCLOUD: &str = "513442679011";
/// Canonical's account in the China regions (`aws-cn`, regions `cn-*`).
pub const CANONICAL_OWNER_CHINA: &str = "837727238323";

/// The account of Canonical's Ubuntu images in `region`'s partition: each partition has its own
/// accounts, so the default partition's owner finds no image in GovCloud or China.
///
/// ```
/// use orca_ec2::config::canonical_owner;
/// assert_eq!(canonical_owner("eu-west-1"), "099720109477");
/// assert_eq!(canonical_owner("us-gov-west-1"), "513442679011");
/// assert_eq!(canonical_owner("cn-north-1"), "837727238323");
/// ```
pub fn canonical_owner(region: &str) -> &'static str {
    if region.starts_with("us-gov-") {
        CANONICAL_OWNER_GOVCLOUD
    } else if region.starts_with("cn-") {
        CANONICAL_OWNER_CHINA
    } else {
        CANONICAL_OWNER
    }
}
/// The name pattern of Ubuntu 24.04 server images, `{arch}` being `amd64` or `arm64`.
pub const UBUNTU_NAME_PATTERN: &str =
    "ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-{arch}-server-*";

/// The smallest `MaxResults` EC2 accepts for DescribeInstances.
pub const MIN_PAGE_SIZE: i32 = 5;
/// The largest `MaxResults` EC2 accepts for DescribeInstances (and the default).
pub const MAX_PAGE_SIZE: i32 = 1000;
/// The largest root volume, in GiB, EC2 makes (gp3).
pub const MAX_ROOT_VOLUME_GB: i32 = 16_384;

/// Static credentials (tests, or a caller that holds its own keys, such as keeper from its vault).
/// The secret and the session token are never printed.
#[derive(Clone)]
pub struct StaticCredentials {
    pub(crate) access_key_id: String,
    pub(crate) secret_access_key: SecretString,
    pub(crate) session_token: Option<SecretString>,
}

impl StaticCredentials {
    /// Credentials from an access key id and its secret.
    pub fn new(access_key_id: impl Into<String>, secret_access_key: SecretString) -> Self {
        StaticCredentials {
            access_key_id: access_key_id.into(),
            secret_access_key,
            session_token: None,
        }
    }

    /// The same credentials with a session token (temporary credentials).
    pub fn with_session_token(mut self, token: SecretString) -> Self {
        self.session_token = Some(token);
        self
    }

    /// The access key id (not a secret: AWS prints it in CloudTrail and error messages).
    pub fn access_key_id(&self) -> &str {
        &self.access_key_id
    }

    pub(crate) fn sdk(&self) -> aws_credential_types::Credentials {
        aws_credential_types::Credentials::new(
            self.access_key_id.clone(),
            self.secret_access_key.expose_secret().to_string(),
            self.session_token
                .as_ref()
                .map(|t| t.expose_secret().to_string()),
            None,
            "orca-ec2-static",
        )
    }
}

impl std::fmt::Debug for StaticCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StaticCredentials")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"<redacted>")
            .field(
                "session_token",
                &self.session_token.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

/// The default of [`ConfigBuilder::poll_interval`].
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(5);
/// The default of [`ConfigBuilder::operation_timeout`].
pub const DEFAULT_OPERATION_TIMEOUT: Duration = Duration::from_secs(600);
/// The default of [`ConfigBuilder::visibility_window`].
pub const DEFAULT_VISIBILITY_WINDOW: Duration = Duration::from_secs(120);
/// The default of [`ConfigBuilder::confirm_not_found`].
pub const DEFAULT_CONFIRM_NOT_FOUND: Duration = Duration::from_secs(10);
/// The defaults of [`ConfigBuilder::connect_timeout`] and [`ConfigBuilder::request_timeout`].
pub const DEFAULT_TIMEOUTS: Timeouts =
    Timeouts::new(Duration::from_secs(10), Some(DEFAULT_TIMEOUTS_REQUEST));
const DEFAULT_TIMEOUTS_REQUEST: Duration = Duration::from_secs(60);
/// The default of [`ConfigBuilder::new_profile_wait`].
pub const DEFAULT_NEW_PROFILE_WAIT: Duration = Duration::from_secs(60);

/// The EC2 driver's settings. `Debug` never shows a secret (the credentials' own redacts it).
#[derive(Clone, Debug)]
pub struct Config {
    pub(crate) region: Option<String>,
    pub(crate) credentials: Option<StaticCredentials>,
    pub(crate) endpoint: Option<String>,
    pub(crate) subnets: BTreeMap<String, String>,
    pub(crate) security_group: String,
    pub(crate) instance_profile: String,
    pub(crate) images: BTreeMap<Arch, String>,
    pub(crate) root_volume_gb: Option<i32>,
    pub(crate) page_size: i32,
    pub(crate) retry: RetryPolicy,
    pub(crate) poll_interval: Duration,
    pub(crate) operation_timeout: Duration,
    pub(crate) visibility_window: Duration,
    pub(crate) confirm_not_found: Duration,
    pub(crate) new_profile_wait: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) request_timeout: Duration,
}

impl Config {
    /// A builder with every default; subnets, security group and instance profile are required.
    pub fn builder() -> ConfigBuilder {
        ConfigBuilder::default()
    }

    /// The settings from this process's environment: the `ORCA_EC2_*` variables of
    /// [`ConfigKey::ALL`]; region and credentials through aws-config's standard chain.
    pub fn from_env() -> Result<Config> {
        ConfigBuilder::from_env().build()
    }

    /// The settings from `settings`, keyed by [`ConfigKey`] names, region and static credentials
    /// included (never from the process environment). A key that is not one of them is refused (a
    /// typo would otherwise be ignored); every problem is named at once.
    pub fn from_settings(settings: &Settings) -> Result<Config> {
        ConfigBuilder::from_settings(settings).build()
    }

    /// The region, when the settings name it (else aws-config's chain finds it).
    pub fn region(&self) -> Option<&str> {
        self.region.as_deref()
    }

    /// The endpoint URL, when one is set.
    pub fn endpoint(&self) -> Option<&str> {
        self.endpoint.as_deref()
    }

    /// The availability zones machines can be made in, and the subnet of each.
    pub fn subnets(&self) -> &BTreeMap<String, String> {
        &self.subnets
    }

    /// `MaxResults` of DescribeInstances listings.
    pub fn page_size(&self) -> i32 {
        self.page_size
    }
}

/// Builds a [`Config`] in code, with the same settings as the environment; [`build`](Self::build)
/// names every missing or wrong one at once.
///
/// ```
/// let config = orca_ec2::Config::builder()
///     .region("eu-west-1")
///     .subnet("eu-west-1a", "subnet-0123456789abcdef0")
///     .security_group("sg-0123456789abcdef0")
///     .instance_profile("orca-node")
///     .build()
///     .unwrap();
/// assert_eq!(config.region(), Some("eu-west-1"));
/// let e = orca_ec2::Config::builder().page_size(1).build().unwrap_err();
/// assert!(e.to_string().contains("ORCA_EC2_SUBNETS"), "{e}");
/// assert!(e.to_string().contains("page_size: 5 to 1000"), "{e}");
/// ```
#[derive(Clone, Default)]
pub struct ConfigBuilder {
    region: Option<String>,
    credentials: Option<StaticCredentials>,
    access_key_id: Option<String>,
    secret_access_key: Option<SecretString>,
    session_token: Option<SecretString>,
    /// Region and credentials must come from the settings themselves (`from_settings`).
    explicit: bool,
    endpoint: Option<String>,
    subnets: BTreeMap<String, String>,
    security_group: Option<String>,
    instance_profile: Option<String>,
    images: BTreeMap<Arch, String>,
    root_volume_gb: Option<i32>,
    /// `None`: [`MAX_PAGE_SIZE`].
    page_size: Option<i32>,
    /// The builder methods' values (`Some`) win over the client keys (`ORCA_MAX_RETRIES`,
    /// `ORCA_POLL_INTERVAL`, `ORCA_CONNECT_TIMEOUT`, `ORCA_REQUEST_TIMEOUT`).
    retry: Option<RetryPolicy>,
    poll_interval: Option<Duration>,
    /// This and the next ones, `None`: their `DEFAULT_`.
    operation_timeout: Option<Duration>,
    visibility_window: Option<Duration>,
    confirm_not_found: Option<Duration>,
    new_profile_wait: Option<Duration>,
    connect_timeout: Option<Duration>,
    request_timeout: Option<Duration>,
    /// Settings that did not parse, by key, with the rule they break (never their value).
    problems: Vec<(String, String)>,
    /// Keys given that are not settings of this driver (refused by `build`).
    unknown: Vec<String>,
    /// The client settings every driver takes ([`ClientKey`](orca_machines::kit::ClientKey)).
    client: ClientSettings,
}

impl std::fmt::Debug for ConfigBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfigBuilder")
            .field("region", &self.region)
            .field("credentials", &self.credentials)
            .field("access_key_id", &self.access_key_id)
            .field(
                "secret_access_key",
                &self.secret_access_key.as_ref().map(|_| "<redacted>"),
            )
            .field(
                "session_token",
                &self.session_token.as_ref().map(|_| "<redacted>"),
            )
            .field("explicit", &self.explicit)
            .field("endpoint", &self.endpoint)
            .field("subnets", &self.subnets)
            .field("security_group", &self.security_group)
            .field("instance_profile", &self.instance_profile)
            .field("images", &self.images)
            .field("root_volume_gb", &self.root_volume_gb)
            .field("page_size", &self.page_size.unwrap_or(MAX_PAGE_SIZE))
            .finish_non_exhaustive()
    }
}

impl ConfigBuilder {
    /// A builder holding this process's environment settings (see [`Config::from_env`]), to adjust
    /// before [`build`](Self::build). Region and credentials are left to aws-config's chain.
    pub fn from_env() -> ConfigBuilder {
        let keys = ConfigKey::ALL
            .iter()
            .filter(|k| !k.is_aws_chain())
            .map(|k| k.as_str())
            .chain(ClientKey::ALL.iter().map(|k| k.as_str()));
        ConfigBuilder::default().taking(&Settings::from_env(keys))
    }

    /// A builder holding `settings` (see [`Config::from_settings`]), to adjust before
    /// [`build`](Self::build): region and static credentials are required from them. Unknown keys are
    /// kept to be refused by `build`.
    pub fn from_settings(settings: &Settings) -> ConfigBuilder {
        ConfigBuilder {
            explicit: true,
            ..ConfigBuilder::default()
        }
        .taking(settings)
    }

    /// This builder with every entry of `settings`: a key of this driver's ([`with_config`](Self::with_config)),
    /// a client key, or an unknown one, kept to be refused by `build`.
    fn taking(mut self, settings: &Settings) -> ConfigBuilder {
        for k in settings.keys() {
            let v = settings.get(k).unwrap_or_default();
            match k.parse::<ConfigKey>() {
                Ok(key) => self = self.with_config(key, v),
                Err(_) if self.client.take(k, v) => {}
                Err(_) => self.unknown.push(k.to_string()),
            }
        }
        self
    }

    /// Sets `key` to `value` as the environment would (an empty value leaves the default). A value
    /// that does not parse is named by `build`.
    pub fn with_config(mut self, key: ConfigKey, value: impl Into<String>) -> Self {
        let value = value.into();
        let v = value.trim();
        if v.is_empty() {
            return self;
        }
        match key {
            ConfigKey::Region => self.region = Some(v.to_string()),
            ConfigKey::AccessKeyId => self.access_key_id = Some(v.to_string()),
            ConfigKey::SecretAccessKey => {
                self.secret_access_key = Some(SecretString::from(v.to_string()))
            }
            ConfigKey::SessionToken => self.session_token = Some(SecretString::from(v.to_string())),
            ConfigKey::Subnets => match parse_pairs(v) {
                Ok(pairs) => self.subnets = pairs,
                Err(why) => self.problems.push((SUBNETS_ENV.into(), why)),
            },
            ConfigKey::SecurityGroup => self.security_group = Some(v.to_string()),
            ConfigKey::InstanceProfile => self.instance_profile = Some(v.to_string()),
            ConfigKey::Images => match parse_pairs(v) {
                Ok(pairs) => {
                    for (arch, ami) in pairs {
                        match orca_machines::docker_arch(&arch) {
                            a @ (Arch::Amd64 | Arch::Arm64) => {
                                self.images.insert(a, ami);
                            }
                            Arch::Other(o) => self.problems.push((
                                IMAGES_ENV.into(),
                                format!("unknown architecture {o:?} (amd64 or arm64)"),
                            )),
                        }
                    }
                }
                Err(why) => self.problems.push((IMAGES_ENV.into(), why)),
            },
            ConfigKey::RootVolumeGb => match v.parse::<i32>() {
                Ok(n) => self.root_volume_gb = Some(n),
                Err(_) => self.problems.push((
                    ROOT_VOLUME_ENV.into(),
                    format!("a size in GiB from 1 to {MAX_ROOT_VOLUME_GB}"),
                )),
            },
            ConfigKey::Endpoint => self.endpoint = Some(v.trim_end_matches('/').to_string()),
            ConfigKey::ConfirmNotFound => match kit::parse_positive_duration(v) {
                Some(d) => self.confirm_not_found = Some(d),
                None => self.problems.push((
                    ConfigKey::ConfirmNotFound.as_str().into(),
                    kit::POSITIVE_DURATION_RULE.into(),
                )),
            },
        }
        self
    }

    /// The region ([`ConfigKey::Region`]; otherwise aws-config's chain: `AWS_REGION`, the profile,
    /// IMDS).
    pub fn region(mut self, region: impl Into<String>) -> Self {
        self.region = Some(region.into());
        self
    }

    /// Static credentials instead of aws-config's credential chain.
    pub fn credentials(mut self, credentials: StaticCredentials) -> Self {
        self.credentials = Some(credentials);
        self
    }

    /// The EC2 endpoint URL ([`ConfigKey::Endpoint`]), for example an emulator on 127.0.0.1.
    pub fn endpoint(mut self, url: impl Into<String>) -> Self {
        self.endpoint = Some(url.into().trim_end_matches('/').to_string());
        self
    }

    /// Machines in `location` (an availability zone) go into `subnet` ([`ConfigKey::Subnets`]).
    pub fn subnet(mut self, location: impl Into<String>, subnet: impl Into<String>) -> Self {
        self.subnets.insert(location.into(), subnet.into());
        self
    }

    /// The security group every machine gets ([`ConfigKey::SecurityGroup`]).
    pub fn security_group(mut self, id: impl Into<String>) -> Self {
        self.security_group = Some(id.into());
        self
    }

    /// The instance profile every machine gets, by name or ARN ([`ConfigKey::InstanceProfile`]).
    pub fn instance_profile(mut self, name_or_arn: impl Into<String>) -> Self {
        self.instance_profile = Some(name_or_arn.into());
        self
    }

    /// The image for machines of `arch` instead of Canonical's Ubuntu 24.04 ([`ConfigKey::Images`]).
    /// The driver checks that the image is of that architecture before it uses it.
    pub fn image(mut self, arch: Arch, ami: impl Into<String>) -> Self {
        self.images.insert(arch, ami.into());
        self
    }

    /// The root volume's size in GiB ([`ConfigKey::RootVolumeGb`]; default: the image's own). A
    /// spec's `disk_gb` takes its place.
    pub fn root_volume_gb(mut self, gib: i32) -> Self {
        self.root_volume_gb = Some(gib);
        self
    }

    /// Instances asked for per DescribeInstances page (`MaxResults`): 5 to 1000 as EC2 accepts,
    /// default 1000.
    pub fn page_size(mut self, n: i32) -> Self {
        self.page_size = Some(n);
        self
    }

    /// The retry policy of every call (default [`RetryPolicy::default`]). The SDK's own retries are off:
    /// this policy is the only one.
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = Some(policy);
        self
    }

    /// How often the driver reads an instance it follows to the state a call waits for: stopped
    /// before a resize or after a stop, terminated after a delete (default
    /// [`DEFAULT_POLL_INTERVAL`]; the kit's `ORCA_POLL_INTERVAL` sets it).
    pub fn poll_interval(mut self, every: Duration) -> Self {
        self.poll_interval = Some(every);
        self
    }

    /// The longest the driver follows an instance to that state before the call answers
    /// [`Transient`](orca_machines::Error::Transient) (the operation goes on in EC2; default
    /// [`DEFAULT_OPERATION_TIMEOUT`]).
    pub fn operation_timeout(mut self, d: Duration) -> Self {
        self.operation_timeout = Some(d);
        self
    }

    /// EC2's eventual consistency (default [`DEFAULT_VISIBILITY_WINDOW`]): the longest a create waits
    /// for its new instance to show, and how long after making an instance this provider reads again
    /// (with backoff) rather than believe a "not found" for it. Wins over `ORCA_VISIBILITY_WINDOW`.
    pub fn visibility_window(mut self, window: Duration) -> Self {
        self.visibility_window = Some(window);
        self
    }

    /// How long a "not found" for an instance this provider did not make lately is confirmed before
    /// it is believed (default [`DEFAULT_CONFIRM_NOT_FOUND`]): the driver reads again, with backoff,
    /// within this window. The instance may be one another process (another owner, or this owner
    /// before a restart) made a moment ago, which EC2 does not show to every call yet.
    pub fn confirm_not_found(mut self, window: Duration) -> Self {
        self.confirm_not_found = Some(window);
        self
    }

    /// How long a create sends RunInstances again while EC2 refuses the instance profile as unknown
    /// (default [`DEFAULT_NEW_PROFILE_WAIT`]): for a while after IAM makes an instance profile, EC2
    /// answers `InvalidParameterValue` naming `iamInstanceProfile`; a set-up that made it a moment
    /// before (Terraform, the CLI) would otherwise fail its first create. Zero: refused at once.
    pub fn new_profile_wait(mut self, d: Duration) -> Self {
        self.new_profile_wait = Some(d);
        self
    }

    /// The longest wait for a connection (default 10 s; the kit's `ORCA_CONNECT_TIMEOUT` sets it).
    pub fn connect_timeout(mut self, d: Duration) -> Self {
        self.connect_timeout = Some(d);
        self
    }

    /// The timeout of one HTTP attempt, its answer included (default 60 s; the kit's
    /// `ORCA_REQUEST_TIMEOUT` sets it).
    pub fn request_timeout(mut self, d: Duration) -> Self {
        self.request_timeout = Some(d);
        self
    }

    /// Static credentials: from the builder, or assembled from the keys (each problem noted in `p`).
    fn static_credentials(&self, p: &mut Problems) -> Option<StaticCredentials> {
        let mut credentials = self.credentials.clone();
        match (&self.access_key_id, &self.secret_access_key) {
            (Some(id), Some(secret)) => {
                let mut c = StaticCredentials::new(id.clone(), secret.clone());
                if let Some(t) = &self.session_token {
                    c = c.with_session_token(t.clone());
                }
                credentials = Some(c);
            }
            (None, None) if credentials.is_none() => {
                if self.explicit {
                    p.missing(ACCESS_KEY_ID_ENV);
                    p.missing(SECRET_ACCESS_KEY_ENV);
                } else if self.session_token.is_some() {
                    p.invalid(
                        SESSION_TOKEN_ENV,
                        format!("given without {ACCESS_KEY_ID_ENV} and {SECRET_ACCESS_KEY_ENV}"),
                    );
                }
            }
            (None, None) => {}
            (Some(_), None) => p.missing(SECRET_ACCESS_KEY_ENV),
            (None, Some(_)) => p.missing(ACCESS_KEY_ID_ENV),
        }
        credentials
    }

    /// Notes in `p` each subnet, security group, instance profile, image, page size and root volume
    /// size that cannot be what it claims.
    fn check_resources(&self, p: &mut Problems) {
        for (location, subnet) in &self.subnets {
            if validate_token("location", location).is_err()
                || validate_token("subnet", subnet).is_err()
            {
                p.invalid(
                    SUBNETS_ENV,
                    format!("{location:?}={subnet:?} is not an availability zone and a subnet id"),
                );
            }
        }
        for (key, value) in [
            (SECURITY_GROUP_ENV, &self.security_group),
            (INSTANCE_PROFILE_ENV, &self.instance_profile),
        ] {
            if let Some(v) = value {
                let ok = !v.is_empty()
                    && v.len() <= 2048
                    && v.bytes().all(|b| b.is_ascii_graphic() && b != b',');
                if !ok {
                    p.invalid(key, format!("{v:?} is not an id, name or ARN"));
                }
            }
        }
        for (arch, ami) in &self.images {
            if !is_ami_id(ami) {
                p.invalid(
                    IMAGES_ENV,
                    format!("{arch}={ami:?}: an AMI id is ami- and 8 or 17 hex digits"),
                );
            }
        }
        let page_size = self.page_size.unwrap_or(MAX_PAGE_SIZE);
        if !(MIN_PAGE_SIZE..=MAX_PAGE_SIZE).contains(&page_size) {
            p.invalid(
                "page_size",
                format!("{MIN_PAGE_SIZE} to {MAX_PAGE_SIZE} (EC2's MaxResults), got {page_size}"),
            );
        }
        if let Some(n) = self.root_volume_gb
            && !(1..=MAX_ROOT_VOLUME_GB).contains(&n)
        {
            p.invalid(
                ROOT_VOLUME_ENV,
                format!("a size in GiB from 1 to {MAX_ROOT_VOLUME_GB}"),
            );
        }
    }

    /// Checks every setting and names every missing or wrong one at once, by its environment
    /// variable (or builder method).
    pub fn build(self) -> Result<Config> {
        let mut p = Problems::new();
        if self.subnets.is_empty() && !self.problems.iter().any(|(k, _)| k == SUBNETS_ENV) {
            p.missing(SUBNETS_ENV);
        }
        if self.security_group.is_none() {
            p.missing(SECURITY_GROUP_ENV);
        }
        if self.instance_profile.is_none() {
            p.missing(INSTANCE_PROFILE_ENV);
        }
        let credentials = self.static_credentials(&mut p);
        if self.explicit && self.region.is_none() {
            p.missing(REGION_ENV);
        }
        if let Some(r) = &self.region {
            let ok = !r.is_empty()
                && r.len() <= 32
                && r.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
            if !ok {
                p.invalid(REGION_ENV, "a region name such as eu-west-1");
            }
        }
        if let Some(c) = &credentials {
            let ok = !c.access_key_id.is_empty()
                && c.access_key_id.len() <= 128
                && c.access_key_id.bytes().all(|b| b.is_ascii_alphanumeric());
            if !ok {
                p.invalid(ACCESS_KEY_ID_ENV, "an access key id (letters and digits)");
            }
        }
        for (k, why) in &self.problems {
            p.invalid(k.clone(), why.clone());
        }
        self.check_resources(&mut p);
        if let Some(e) = &self.endpoint
            && !kit::is_endpoint(e)
        {
            p.invalid(ENDPOINT_ENV, kit::ENDPOINT_RULE);
        }
        let client = self.client.options;
        let poll_interval = self
            .poll_interval
            .unwrap_or_else(|| client.poll_interval_or(DEFAULT_POLL_INTERVAL));
        if poll_interval.is_zero() {
            p.invalid("poll_interval", "above zero");
        }
        let operation_timeout = self.operation_timeout.unwrap_or(DEFAULT_OPERATION_TIMEOUT);
        let confirm_not_found = self.confirm_not_found.unwrap_or(DEFAULT_CONFIRM_NOT_FOUND);
        if operation_timeout < poll_interval {
            p.invalid("operation_timeout", "at least one poll_interval");
        }
        let visibility_window =
            client.visibility_window_or(self.visibility_window, DEFAULT_VISIBILITY_WINDOW);
        if visibility_window.is_zero() || confirm_not_found.is_zero() {
            p.invalid(
                "visibility_window",
                "windows above zero (EC2's \"not found\" is confirmed before it is believed)",
            );
        }
        for k in &self.unknown {
            p.unknown_key::<ConfigKey>(k.clone());
        }
        self.client.report(&mut p);
        p.finish()?;
        let timeouts = Timeouts::resolve(
            self.connect_timeout,
            self.request_timeout,
            &client,
            DEFAULT_TIMEOUTS,
        );
        Ok(Config {
            region: self.region,
            credentials,
            endpoint: self.endpoint,
            subnets: self.subnets,
            security_group: self.security_group.unwrap_or_default(),
            instance_profile: self.instance_profile.unwrap_or_default(),
            images: self.images,
            root_volume_gb: self.root_volume_gb,
            page_size: self.page_size.unwrap_or(MAX_PAGE_SIZE),
            retry: self
                .retry
                .unwrap_or_else(|| client.retry_policy(RetryPolicy::default())),
            poll_interval,
            operation_timeout,
            visibility_window,
            confirm_not_found,
            new_profile_wait: self.new_profile_wait.unwrap_or(DEFAULT_NEW_PROFILE_WAIT),
            connect_timeout: timeouts.connect,
            request_timeout: timeouts.request.unwrap_or(DEFAULT_TIMEOUTS_REQUEST),
        })
    }
}

/// Whether `s` has the form of an AMI id: `ami-` and 8 or 17 lower-case hex digits.
pub fn is_ami_id(s: &str) -> bool {
    s.strip_prefix("ami-").is_some_and(|h| {
        (h.len() == 8 || h.len() == 17)
            && h.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// Parses `key=value,key=value` (spaces around items allowed).
pub(crate) fn parse_pairs(s: &str) -> std::result::Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let Some((k, v)) = item.split_once('=') else {
            return Err(format!("{item:?} is not key=value"));
        };
        let (k, v) = (k.trim(), v.trim());
        if k.is_empty() || v.is_empty() {
            return Err(format!("{item:?} has an empty side"));
        }
        if out.insert(k.to_string(), v.to_string()).is_some() {
            return Err(format!("{k:?} is given twice"));
        }
    }
    if out.is_empty() {
        return Err("no key=value pairs".into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use orca_machines::Error;

    fn full() -> Settings {
        Settings::new()
            .with(REGION_ENV, "us-east-1")
            .with(ACCESS_KEY_ID_ENV, "AKIDTEST")
            .with(SECRET_ACCESS_KEY_ENV, "wJalrXUtnFEMI-SECRET")
            .with(SUBNETS_ENV, "us-east-1a=subnet-1,us-east-1b=subnet-2")
            .with(SECURITY_GROUP_ENV, "sg-1")
            .with(INSTANCE_PROFILE_ENV, "orca-node")
    }

    #[test]
    fn keys_round_trip_and_secrets_are_marked() {
        for &k in ConfigKey::ALL {
            assert_eq!(k.as_str().parse::<ConfigKey>().unwrap(), k);
            assert_eq!(k.to_string(), k.as_str());
        }
        let secret: Vec<_> = ConfigKey::ALL
            .iter()
            .filter(|k| k.is_secret())
            .map(|k| k.as_str())
            .collect();
        assert_eq!(secret, [SECRET_ACCESS_KEY_ENV, SESSION_TOKEN_ENV]);
        let e = "AWS_REGON".parse::<ConfigKey>().unwrap_err();
        assert!(e.to_string().contains("AWS_REGON") && e.to_string().contains("AWS_REGION"));
    }

    #[test]
    fn an_endpoint_that_would_show_the_credentials_is_refused_without_echoing_it() {
        for bad in [
            "http://ec2.eu-west-1.amazonaws.com",
            "http://10.1.2.3:5000",
            "https://me:pw-in-url@ec2.eu-west-1.amazonaws.com",
        ] {
            let e = Config::from_settings(&full().with(ENDPOINT_ENV, bad)).unwrap_err();
            assert!(
                matches!(&e, Error::InvalidSettings { keys, .. } if keys == &[ENDPOINT_ENV]),
                "{bad}: {e:?}"
            );
            assert!(e.to_string().contains("https://"), "{e}");
            assert!(!e.to_string().contains("pw-in-url"), "{e}");
        }
        let c = Config::from_settings(
            &full().with(ENDPOINT_ENV, "https://ec2.eu-west-1.amazonaws.com"),
        );
        assert!(c.is_ok(), "{c:?}");
    }

    #[test]
    fn an_endpoint_that_is_not_a_url_is_refused_at_build() {
        for bad in [
            "http://127.0.0.1:99999",
            "http://exa mple",
            "https://",
            "ftp://127.0.0.1:5000",
        ] {
            let e = Config::from_settings(&full().with(ENDPOINT_ENV, bad)).unwrap_err();
            assert!(
                matches!(&e, Error::InvalidSettings { keys, .. } if keys == &[ENDPOINT_ENV]),
                "{bad}: {e:?}"
            );
        }
        let c = Config::from_settings(&full().with(ENDPOINT_ENV, "http://127.0.0.1:5000")).unwrap();
        assert_eq!(c.endpoint(), Some("http://127.0.0.1:5000"));
    }

    #[test]
    fn pairs() {
        let p = parse_pairs(" eu-west-1a=subnet-1, eu-west-1b = subnet-2 ,").unwrap();
        assert_eq!(p.len(), 2);
        assert_eq!(p["eu-west-1b"], "subnet-2");
        assert!(parse_pairs("a").unwrap_err().contains("not key=value"));
        assert!(parse_pairs("a=1,a=2").unwrap_err().contains("twice"));
        assert!(parse_pairs("=x").unwrap_err().contains("empty side"));
        assert!(parse_pairs(" , ").is_err());
    }

    #[test]
    fn a_complete_map_builds_with_its_own_region_and_credentials() {
        let c = Config::from_settings(&full()).unwrap();
        assert_eq!(c.region(), Some("us-east-1"));
        let creds = c.credentials.as_ref().unwrap();
        assert_eq!(creds.access_key_id(), "AKIDTEST");
        assert_eq!(c.subnets().len(), 2);
        assert_eq!(c.page_size(), 1000);
        let d = format!("{c:?}");
        assert!(
            !d.contains("wJalrXUtnFEMI-SECRET") && d.contains("<redacted>"),
            "{d}"
        );
    }

    #[test]
    fn from_settings_names_every_problem_at_once() {
        let s = Settings::new()
            .with(SUBNETS_ENV, "eu-west-1a")
            .with(IMAGES_ENV, "riscv=ami-1")
            .with(ROOT_VOLUME_ENV, "huge")
            .with(INSTANCE_PROFILE_ENV, "orca-node")
            .with(SECRET_ACCESS_KEY_ENV, "wJalrXUtnFEMI-SECRET")
            .with("ORCA_EC2_SUBNET", "typo");
        let e = Config::from_settings(&s).unwrap_err();
        let Error::InvalidSettings { keys, message } = &e else {
            panic!("{e:?}")
        };
        for k in [
            SECURITY_GROUP_ENV,
            ACCESS_KEY_ID_ENV,
            REGION_ENV,
            SUBNETS_ENV,
            IMAGES_ENV,
            ROOT_VOLUME_ENV,
            "ORCA_EC2_SUBNET",
        ] {
            assert!(keys.iter().any(|x| x == k), "{k} not in {keys:?}");
        }
        assert!(!keys.iter().any(|x| x == INSTANCE_PROFILE_ENV), "{keys:?}");
        assert!(message.contains("riscv"), "{message}");
        assert!(!message.contains("wJalrXUtnFEMI-SECRET"), "{message}");
        assert!(!format!("{e:?}").contains("wJalrXUtnFEMI-SECRET"));
    }

    #[test]
    fn from_settings_needs_region_and_both_halves_of_the_credentials() {
        let mut s = full();
        s.insert(REGION_ENV, "");
        s.insert(SECRET_ACCESS_KEY_ENV, "");
        let e = Config::from_settings(&s).unwrap_err();
        let Error::InvalidSettings { keys, .. } = &e else {
            panic!("{e:?}")
        };
        assert_eq!(keys, &[SECRET_ACCESS_KEY_ENV, REGION_ENV]);
    }

    #[test]
    fn page_sizes_are_ec2s_own_bounds() {
        let b = || {
            Config::builder()
                .subnet("a", "subnet-1")
                .security_group("sg-1")
                .instance_profile("p")
        };
        for bad in [0, 1, 4, 1001] {
            let e = b().page_size(bad).build().unwrap_err();
            assert!(e.to_string().contains("page_size: 5 to 1000"), "{e}");
        }
        for good in [5, 1000] {
            assert_eq!(b().page_size(good).build().unwrap().page_size(), good);
        }
    }

    #[test]
    fn consistency_windows_are_above_zero() {
        let b = || {
            Config::builder()
                .subnet("a", "subnet-1")
                .security_group("sg-1")
                .instance_profile("p")
        };
        let e = b().confirm_not_found(Duration::ZERO).build().unwrap_err();
        assert!(e.to_string().contains("visibility_window"), "{e}");
        assert!(b().visibility_window(Duration::ZERO).build().is_err());
        let c = b().build().unwrap();
        assert_eq!(c.confirm_not_found, DEFAULT_CONFIRM_NOT_FOUND);
        assert_eq!(c.visibility_window, DEFAULT_VISIBILITY_WINDOW);
    }

    #[test]
    fn consistency_windows_are_settings_and_the_builder_wins() {
        let s = full()
            .with("ORCA_VISIBILITY_WINDOW", "20s")
            .with("ORCA_EC2_CONFIRM_NOT_FOUND", "1500ms");
        let c = ConfigBuilder::from_settings(&s).build().unwrap();
        assert_eq!(c.visibility_window, Duration::from_secs(20));
        assert_eq!(c.confirm_not_found, Duration::from_millis(1500));
        let c = ConfigBuilder::from_settings(&s)
            .visibility_window(Duration::from_secs(3))
            .confirm_not_found(Duration::from_secs(4))
            .build()
            .unwrap();
        assert_eq!(c.visibility_window, Duration::from_secs(3));
        assert_eq!(c.confirm_not_found, Duration::from_secs(4));
        for bad in ["0s", "soon", "-1s"] {
            let s = full()
                .with("ORCA_VISIBILITY_WINDOW", bad)
                .with("ORCA_EC2_CONFIRM_NOT_FOUND", bad);
            let e = ConfigBuilder::from_settings(&s)
                .build()
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("ORCA_VISIBILITY_WINDOW") && e.contains("ORCA_EC2_CONFIRM_NOT_FOUND"),
                "{bad}: {e}"
            );
            assert!(!e.contains("soon"), "a value is never echoed: {e}");
        }
    }

    #[test]
    fn polls_and_timeouts_have_the_names_every_driver_uses() {
        let b = || {
            Config::builder()
                .subnet("a", "subnet-1")
                .security_group("sg-1")
                .instance_profile("p")
        };
        let c = b()
            .poll_interval(Duration::from_millis(20))
            .operation_timeout(Duration::from_secs(3))
            .request_timeout(Duration::from_secs(7))
            .connect_timeout(Duration::from_secs(2))
            .build()
            .unwrap();
        assert_eq!(
            (
                c.poll_interval,
                c.operation_timeout,
                c.request_timeout,
                c.connect_timeout
            ),
            (
                Duration::from_millis(20),
                Duration::from_secs(3),
                Duration::from_secs(7),
                Duration::from_secs(2)
            )
        );
        let e = b().poll_interval(Duration::ZERO).build().unwrap_err();
        assert!(e.to_string().contains("poll_interval"), "{e}");
        let e = b()
            .operation_timeout(Duration::from_secs(1))
            .build()
            .unwrap_err();
        assert!(e.to_string().contains("operation_timeout"), "{e}");
        // The kit's keys set the same settings.
        let c = ConfigBuilder::from_settings(
            &full()
                .with("ORCA_POLL_INTERVAL", "50ms")
                .with("ORCA_REQUEST_TIMEOUT", "9s"),
        )
        .build()
        .unwrap();
        assert_eq!(
            (c.poll_interval, c.request_timeout),
            (Duration::from_millis(50), Duration::from_secs(9))
        );
        // A builder method wins over the key, as in every driver.
        let c = ConfigBuilder::from_settings(
            &full()
                .with("ORCA_POLL_INTERVAL", "50ms")
                .with("ORCA_REQUEST_TIMEOUT", "9s")
                .with("ORCA_CONNECT_TIMEOUT", "4s")
                .with("ORCA_MAX_RETRIES", "2"),
        )
        .poll_interval(Duration::from_millis(7))
        .request_timeout(Duration::from_secs(3))
        .connect_timeout(Duration::from_secs(1))
        .retry(RetryPolicy::NEVER)
        .build()
        .unwrap();
        assert_eq!(
            (
                c.poll_interval,
                c.request_timeout,
                c.connect_timeout,
                c.retry.max_retries
            ),
            (
                Duration::from_millis(7),
                Duration::from_secs(3),
                Duration::from_secs(1),
                0
            )
        );
        // A key of zero is refused like the builder's zero.
        let e = ConfigBuilder::from_settings(&full().with("ORCA_POLL_INTERVAL", "0s"))
            .build()
            .unwrap_err();
        assert!(
            e.to_string().contains("POLL_INTERVAL") || e.to_string().contains("poll_interval"),
            "{e}"
        );
    }

    #[test]
    fn ami_ids() {
        assert!(is_ami_id("ami-0b1e2a3d4c5f60a01"));
        assert!(is_ami_id("ami-12345678"));
        assert!(!is_ami_id("ami-XYZ"));
        assert!(!is_ami_id("ubuntu-24.04"));
        let e = Config::builder()
            .image(Arch::Amd64, "ubuntu")
            .build()
            .unwrap_err();
        assert!(e.to_string().contains("ORCA_EC2_IMAGES"), "{e}");
    }

    #[test]
    fn debug_never_shows_the_secret() {
        let b = Config::builder()
            .credentials(
                StaticCredentials::new("AKIDVISIBLE", SecretString::from("wJalrXUtnFEMI-SECRET"))
                    .with_session_token(SecretString::from("TOKEN-SECRET")),
            )
            .with_config(ConfigKey::SecretAccessKey, "OTHER-SECRET");
        let d = format!("{b:?}");
        for s in ["wJalrXUtnFEMI-SECRET", "TOKEN-SECRET", "OTHER-SECRET"] {
            assert!(!d.contains(s), "{d}");
        }
        assert!(d.contains("AKIDVISIBLE") && d.contains("<redacted>"), "{d}");
    }
}
