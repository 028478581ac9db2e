//! Settings: from the environment ([`Ec2Builder::from_env`]) or a builder, checked all at once.

use std::collections::BTreeMap;
use std::time::Duration;

use aws_config::BehaviorVersion;
use aws_sdk_ec2::config::retry::RetryConfig;
use aws_sdk_ec2::config::timeout::TimeoutConfig;
use aws_sdk_ec2::config::{Credentials, Region};
use orca_machines::spec::validate_token;
use orca_machines::{validate_owner, Arch, Error, Result, RetryPolicy};
use secrecy::{ExposeSecret, SecretString};

use crate::client::Ec2Client;
use crate::provider::Ec2Provider;

/// `location=subnet` pairs: the availability zones machines can be made in, and the subnet of each.
pub const SUBNETS_ENV: &str = "ORCA_EC2_SUBNETS";
/// The security group every machine gets (an id, `sg-...`).
pub const SECURITY_GROUP_ENV: &str = "ORCA_EC2_SECURITY_GROUP";
/// The instance profile every machine gets (a name, or an ARN).
pub const INSTANCE_PROFILE_ENV: &str = "ORCA_EC2_INSTANCE_PROFILE";
/// Optional: `arch=ami` pairs (`amd64=ami-1,arm64=ami-2`) used instead of Canonical's Ubuntu 24.04.
pub const IMAGES_ENV: &str = "ORCA_EC2_IMAGES";
/// Optional: the EC2 endpoint URL (tests point it at the emulator on 127.0.0.1).
pub const ENDPOINT_ENV: &str = "ORCA_EC2_ENDPOINT";
/// Optional: the root volume's size in GiB (default: the image's own size).
pub const ROOT_VOLUME_ENV: &str = "ORCA_EC2_ROOT_VOLUME_GB";
/// The region, when no other source of aws-config's chain gives one.
pub const REGION_ENV: &str = "AWS_REGION";

/// Canonical's AWS account: the owner of the official Ubuntu images.
pub const CANONICAL_OWNER: &str = "099720109477";
/// The name pattern of Ubuntu 24.04 server images, `{arch}` being `amd64` or `arm64`.
pub const UBUNTU_NAME_PATTERN: &str =
    "ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-{arch}-server-*";

/// Static credentials for the builder (tests, or a caller that holds its own keys). The secret is never
/// printed.
#[derive(Clone)]
pub struct StaticCredentials {
    access_key_id: String,
    secret_access_key: SecretString,
    session_token: Option<SecretString>,
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

    /// The same credentials with a session token.
    pub fn with_session_token(mut self, token: SecretString) -> Self {
        self.session_token = Some(token);
        self
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

/// How long and how often the driver follows an instance to the state a call waits for (stopped
/// before a resize or after a stop, terminated after a delete).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Waiting {
    /// The time between two looks.
    pub interval: Duration,
    /// The longest wait before the call answers [`Error::Transient`] (the operation goes on in EC2).
    pub timeout: Duration,
}

impl Default for Waiting {
    fn default() -> Self {
        Waiting {
            interval: Duration::from_secs(5),
            timeout: Duration::from_secs(600),
        }
    }
}

/// Builds an [`Ec2Provider`]. Every setting of the environment has a method here; [`build`] names every
/// missing one at once, by its environment variable.
///
/// [`build`]: Ec2Builder::build
///
/// ```no_run
/// # async fn f() -> orca_machines::Result<()> {
/// let p = orca_ec2::Ec2Builder::new("stack-1")
///     .region("eu-west-1")
///     .subnet("eu-west-1a", "subnet-0123456789abcdef0")
///     .security_group("sg-0123456789abcdef0")
///     .instance_profile("orca-node")
///     .build()
///     .await?;
/// # let _ = p; Ok(()) }
/// ```
#[derive(Clone)]
pub struct Ec2Builder {
    pub(crate) owner: String,
    pub(crate) region: Option<String>,
    pub(crate) endpoint: Option<String>,
    pub(crate) credentials: Option<StaticCredentials>,
    pub(crate) subnets: BTreeMap<String, String>,
    pub(crate) security_group: Option<String>,
    pub(crate) instance_profile: Option<String>,
    pub(crate) images: BTreeMap<Arch, String>,
    pub(crate) root_volume_gb: Option<i32>,
    pub(crate) page_size: i32,
    pub(crate) retry: RetryPolicy,
    pub(crate) waiting: Waiting,
    pub(crate) connect_timeout: Duration,
    pub(crate) attempt_timeout: Duration,
    /// Problems found while reading settings, reported by `build` with the missing ones.
    pub(crate) problems: Vec<(String, String)>,
}

impl std::fmt::Debug for Ec2Builder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ec2Builder")
            .field("owner", &self.owner)
            .field("region", &self.region)
            .field("endpoint", &self.endpoint)
            .field("credentials", &self.credentials)
            .field("subnets", &self.subnets)
            .field("security_group", &self.security_group)
            .field("instance_profile", &self.instance_profile)
            .field("images", &self.images)
            .field("root_volume_gb", &self.root_volume_gb)
            .field("page_size", &self.page_size)
            .field("retry", &self.retry)
            .field("waiting", &self.waiting)
            .finish_non_exhaustive()
    }
}

impl Ec2Builder {
    /// A builder for `owner`'s machines (empty for none), with nothing set.
    pub fn new(owner: impl Into<String>) -> Self {
        Ec2Builder {
            owner: owner.into(),
            region: None,
            endpoint: None,
            credentials: None,
            subnets: BTreeMap::new(),
            security_group: None,
            instance_profile: None,
            images: BTreeMap::new(),
            root_volume_gb: None,
            page_size: 1000,
            retry: RetryPolicy::default(),
            waiting: Waiting::default(),
            connect_timeout: Duration::from_secs(10),
            attempt_timeout: Duration::from_secs(60),
            problems: Vec::new(),
        }
    }

    /// A builder from this process's environment (see the crate documentation for every variable).
    /// Region and credentials are left to aws-config's standard chain.
    pub fn from_env(owner: impl Into<String>) -> Self {
        Self::from_vars(owner, |k| std::env::var(k).ok())
    }

    /// A builder from the variables `var` answers (what [`from_env`](Self::from_env) does with the
    /// environment).
    pub fn from_vars(owner: impl Into<String>, var: impl Fn(&str) -> Option<String>) -> Self {
        let get = |k: &str| {
            var(k)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        let mut b = Ec2Builder::new(owner);
        if let Some(s) = get(SUBNETS_ENV) {
            match parse_pairs(&s) {
                Ok(pairs) => b.subnets = pairs,
                Err(why) => b.problems.push((SUBNETS_ENV.into(), why)),
            }
        }
        b.security_group = get(SECURITY_GROUP_ENV);
        b.instance_profile = get(INSTANCE_PROFILE_ENV);
        if let Some(s) = get(IMAGES_ENV) {
            match parse_pairs(&s) {
                Ok(pairs) => {
                    for (arch, ami) in pairs {
                        match orca_machines::docker_arch(&arch) {
                            a @ (Arch::Amd64 | Arch::Arm64) => {
                                b.images.insert(a, ami);
                            }
                            Arch::Other(o) => b.problems.push((
                                IMAGES_ENV.into(),
                                format!("unknown architecture {o:?} (amd64 or arm64)"),
                            )),
                        }
                    }
                }
                Err(why) => b.problems.push((IMAGES_ENV.into(), why)),
            }
        }
        b.endpoint = get(ENDPOINT_ENV);
        if let Some(s) = get(ROOT_VOLUME_ENV) {
            match s.parse::<i32>() {
                Ok(n) if (1..=16384).contains(&n) => b.root_volume_gb = Some(n),
                _ => b.problems.push((
                    ROOT_VOLUME_ENV.into(),
                    format!("a size in GiB from 1 to 16384, got {s:?}"),
                )),
            }
        }
        b
    }

    /// The region (otherwise aws-config's chain: `AWS_REGION`, the profile, IMDS).
    pub fn region(mut self, region: impl Into<String>) -> Self {
        self.region = Some(region.into());
        self
    }

    /// The EC2 endpoint URL (`ORCA_EC2_ENDPOINT`), for example an emulator on 127.0.0.1.
    pub fn endpoint(mut self, url: impl Into<String>) -> Self {
        self.endpoint = Some(url.into());
        self
    }

    /// Static credentials instead of aws-config's credential chain.
    pub fn credentials(mut self, credentials: StaticCredentials) -> Self {
        self.credentials = Some(credentials);
        self
    }

    /// Machines in `location` (an availability zone) go into `subnet` (`ORCA_EC2_SUBNETS`).
    pub fn subnet(mut self, location: impl Into<String>, subnet: impl Into<String>) -> Self {
        self.subnets.insert(location.into(), subnet.into());
        self
    }

    /// The security group every machine gets (`ORCA_EC2_SECURITY_GROUP`).
    pub fn security_group(mut self, id: impl Into<String>) -> Self {
        self.security_group = Some(id.into());
        self
    }

    /// The instance profile every machine gets, by name or ARN (`ORCA_EC2_INSTANCE_PROFILE`).
    pub fn instance_profile(mut self, name_or_arn: impl Into<String>) -> Self {
        self.instance_profile = Some(name_or_arn.into());
        self
    }

    /// The image for machines of `arch` instead of Canonical's Ubuntu 24.04 (`ORCA_EC2_IMAGES`). The
    /// driver checks that the image is of that architecture before it uses it.
    pub fn image(mut self, arch: Arch, ami: impl Into<String>) -> Self {
        self.images.insert(arch, ami.into());
        self
    }

    /// The root volume's size in GiB (`ORCA_EC2_ROOT_VOLUME_GB`; default: the image's own).
    pub fn root_volume_gb(mut self, gib: i32) -> Self {
        self.root_volume_gb = Some(gib);
        self
    }

    /// Instances asked for per DescribeInstances page (`MaxResults`): 1 to 1000, default 1000. EC2
    /// itself accepts 5 to 1000; smaller values are for emulators and tests.
    pub fn page_size(mut self, n: i32) -> Self {
        self.page_size = n;
        self
    }

    /// The retry policy of every call (default [`RetryPolicy::default`]). The SDK's own retries are off:
    /// this policy is the only one.
    pub fn retry_policy(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// How the driver follows instances to the state a call waits for.
    pub fn waiting(mut self, waiting: Waiting) -> Self {
        self.waiting = waiting;
        self
    }

    /// Timeouts of one HTTP attempt: to connect, and for the whole attempt (defaults 10 s and 60 s).
    pub fn timeouts(mut self, connect: Duration, attempt: Duration) -> Self {
        self.connect_timeout = connect;
        self.attempt_timeout = attempt;
        self
    }

    /// Checks every setting, names every missing or wrong one at once, loads the region and credential
    /// chain (credentials are resolved at the first call), and makes the provider.
    pub async fn build(self) -> Result<Ec2Provider> {
        validate_owner(&self.owner)?;
        let mut problems = self.problems.clone();
        let mut missing = Vec::new();
        if self.subnets.is_empty() && !problems.iter().any(|(k, _)| k == SUBNETS_ENV) {
            missing.push(SUBNETS_ENV.to_string());
        }
        if self.security_group.is_none() {
            missing.push(SECURITY_GROUP_ENV.to_string());
        }
        if self.instance_profile.is_none() {
            missing.push(INSTANCE_PROFILE_ENV.to_string());
        }
        for (location, subnet) in &self.subnets {
            if validate_token("location", location).is_err()
                || validate_token("subnet", subnet).is_err()
            {
                problems.push((
                    SUBNETS_ENV.into(),
                    format!("{location:?}={subnet:?} is not an availability zone and a subnet id"),
                ));
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
                    problems.push((key.into(), format!("{v:?} is not an id, name or ARN")));
                }
            }
        }
        if !(1..=1000).contains(&self.page_size) {
            problems.push((
                "page_size".into(),
                format!("1 to 1000, got {}", self.page_size),
            ));
        }
        if let Some(n) = self.root_volume_gb {
            if !(1..=16384).contains(&n) {
                problems.push((ROOT_VOLUME_ENV.into(), format!("1 to 16384 GiB, got {n}")));
            }
        }
        if let Some(e) = &self.endpoint {
            if !(e.starts_with("http://") || e.starts_with("https://")) {
                problems.push((ENDPOINT_ENV.into(), format!("an http(s) URL, got {e:?}")));
            }
        }

        // The region (and, lazily, the credentials) through aws-config's standard chain.
        let mut loader = aws_config::defaults(BehaviorVersion::latest());
        if let Some(r) = &self.region {
            loader = loader.region(Region::new(r.clone()));
        }
        if let Some(c) = &self.credentials {
            loader = loader.credentials_provider(Credentials::new(
                c.access_key_id.clone(),
                c.secret_access_key.expose_secret().to_string(),
                c.session_token
                    .as_ref()
                    .map(|t| t.expose_secret().to_string()),
                None,
                "orca-ec2-static",
            ));
        }
        let sdk = loader.load().await;
        let region = sdk.region().map(|r| r.to_string());
        if region.is_none() {
            missing.push(REGION_ENV.to_string());
        }

        if !missing.is_empty() || !problems.is_empty() {
            let mut keys = missing.clone();
            let mut parts = Vec::new();
            if !missing.is_empty() {
                parts.push(format!("missing {}", missing.join(", ")));
            }
            for (k, why) in &problems {
                if !keys.contains(k) {
                    keys.push(k.clone());
                }
                parts.push(format!("{k}: {why}"));
            }
            return Err(Error::settings(keys, parts.join("; ")));
        }
        let region = region.unwrap_or_default();

        let mut conf = aws_sdk_ec2::config::Builder::from(&sdk)
            // One retry policy, orca's: the SDK never retries on its own, so that no create is ever
            // re-sent blindly (every RunInstances carries its ClientToken anyway).
            .retry_config(RetryConfig::disabled())
            .timeout_config(
                TimeoutConfig::builder()
                    .connect_timeout(self.connect_timeout)
                    .operation_attempt_timeout(self.attempt_timeout)
                    .build(),
            );
        if let Some(e) = &self.endpoint {
            conf = conf.endpoint_url(e.trim_end_matches('/'));
        }
        let client = Ec2Client::new(aws_sdk_ec2::Client::from_conf(conf.build()), self.retry);
        Ok(Ec2Provider::new(self, client, region))
    }
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

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    fn offline(b: Ec2Builder) -> Ec2Builder {
        // Region and credentials given, so that aws-config's chain looks at nothing else.
        b.region("us-east-1").credentials(StaticCredentials::new(
            "AKIDTEST",
            SecretString::from("not-a-secret"),
        ))
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

    #[tokio::test]
    async fn missing_settings_are_named_all_at_once() {
        let e = offline(Ec2Builder::from_vars("s1", vars(&[])))
            .build()
            .await
            .unwrap_err();
        let Error::InvalidSettings { keys, message } = &e else {
            panic!("{e:?}")
        };
        assert_eq!(
            keys,
            &vec![
                SUBNETS_ENV.to_string(),
                SECURITY_GROUP_ENV.into(),
                INSTANCE_PROFILE_ENV.into()
            ]
        );
        assert!(message.contains("missing"), "{message}");
    }

    #[tokio::test]
    async fn wrong_settings_are_named_with_the_missing_ones() {
        let e = offline(Ec2Builder::from_vars(
            "s1",
            vars(&[
                (SUBNETS_ENV, "eu-west-1a"),
                (IMAGES_ENV, "riscv=ami-1"),
                (ROOT_VOLUME_ENV, "huge"),
                (INSTANCE_PROFILE_ENV, "orca-node"),
            ]),
        ))
        .build()
        .await
        .unwrap_err();
        let Error::InvalidSettings { keys, message } = &e else {
            panic!("{e:?}")
        };
        for k in [SECURITY_GROUP_ENV, SUBNETS_ENV, IMAGES_ENV, ROOT_VOLUME_ENV] {
            assert!(keys.iter().any(|x| x == k), "{k} not in {keys:?}");
        }
        assert!(!keys.iter().any(|x| x == INSTANCE_PROFILE_ENV), "{keys:?}");
        assert!(message.contains("riscv"), "{message}");
    }

    #[tokio::test]
    async fn a_complete_set_builds() {
        let p = offline(Ec2Builder::from_vars(
            "s1",
            vars(&[
                (SUBNETS_ENV, "us-east-1a=subnet-1,us-east-1b=subnet-2"),
                (SECURITY_GROUP_ENV, "sg-1"),
                (INSTANCE_PROFILE_ENV, "orca-node"),
                (IMAGES_ENV, "arm64=ami-2"),
                (ENDPOINT_ENV, "http://127.0.0.1:9"),
            ]),
        ))
        .build()
        .await
        .unwrap();
        assert_eq!(orca_machines::Provider::owner(&p), "s1");
        assert_eq!(p.region(), "us-east-1");
    }

    #[tokio::test]
    async fn an_invalid_owner_is_refused() {
        let e = offline(Ec2Builder::new("a,b")).build().await.unwrap_err();
        assert!(
            matches!(e, Error::InvalidSpec { ref field, .. } if field == "owner"),
            "{e:?}"
        );
    }

    #[test]
    fn debug_never_shows_the_secret() {
        let b = Ec2Builder::new("s1").credentials(
            StaticCredentials::new("AKIDVISIBLE", SecretString::from("wJalrXUtnFEMI-SECRET"))
                .with_session_token(SecretString::from("TOKEN-SECRET")),
        );
        let d = format!("{b:?}");
        assert!(
            !d.contains("wJalrXUtnFEMI-SECRET") && !d.contains("TOKEN-SECRET"),
            "{d}"
        );
        assert!(d.contains("AKIDVISIBLE") && d.contains("<redacted>"), "{d}");
    }
}
