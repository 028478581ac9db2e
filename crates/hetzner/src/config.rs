//! Settings as data: the keys ([`ConfigKey`], named as the environment variables), read from the
//! environment ([`Config::from_env`]), from a map ([`Config::from_settings`]) or set in code
//! ([`Config::builder`]).

use std::time::Duration;

use orca_machines::kit::{self, ClientOptions, ClientSettings, Timeouts};
use orca_machines::settings::Problems;
use orca_machines::{Result, RetryPolicy, Settings};
use secrecy::{ExposeSecret, SecretString};

orca_machines::setting_keys! {
    /// A setting of the Hetzner driver, by the name of its environment variable (as object_store's
    /// `AmazonS3ConfigKey`). The same names key [`Settings`] maps.
    pub enum ConfigKey for "hetzner" {
        /// `HCLOUD_TOKEN`: the project's API token (the name Hetzner's own tools use). Required; secret.
        Token = "HCLOUD_TOKEN" secret,
        /// `ORCA_HCLOUD_IMAGE`: the image name (or id) for new servers.
        Image = "ORCA_HCLOUD_IMAGE",
        /// `ORCA_HCLOUD_SSH_KEYS`: comma-separated names (or ids) of the project's SSH keys.
        SshKeys = "ORCA_HCLOUD_SSH_KEYS",
        /// `ORCA_HCLOUD_FIREWALL`: the name of a firewall of the project to apply to new servers.
        Firewall = "ORCA_HCLOUD_FIREWALL",
        /// `ORCA_HCLOUD_NETWORK`: the name (or id) of a private network to attach new servers to.
        Network = "ORCA_HCLOUD_NETWORK",
        /// `ORCA_HCLOUD_ENDPOINT`: the API's base address (tests point it at the fake).
        Endpoint = "ORCA_HCLOUD_ENDPOINT",
        /// `ORCA_HCLOUD_PAGE_SIZE`: servers per page of a listing, 1 to 50 (default 50, Hetzner's
        /// largest page).
        PageSize = "ORCA_HCLOUD_PAGE_SIZE",
    }
}

/// The pause between action polls unless set (builder or `ORCA_POLL_INTERVAL`).
const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(1000);
/// One request's time limit unless set (builder or `ORCA_REQUEST_TIMEOUT`).
const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The default of [`ConfigBuilder::visibility_window`] (and `ORCA_VISIBILITY_WINDOW`).
const DEFAULT_VISIBILITY_WINDOW: Duration = Duration::from_secs(30);

/// The API token ([`ConfigKey::Token`]).
pub const TOKEN_ENV: &str = ConfigKey::Token.as_str();
/// The image name for new servers ([`ConfigKey::Image`]).
pub const IMAGE_ENV: &str = ConfigKey::Image.as_str();
/// SSH key names ([`ConfigKey::SshKeys`]).
pub const SSH_KEYS_ENV: &str = ConfigKey::SshKeys.as_str();
/// A firewall name ([`ConfigKey::Firewall`]).
pub const FIREWALL_ENV: &str = ConfigKey::Firewall.as_str();
/// A private network's name ([`ConfigKey::Network`]).
pub const NETWORK_ENV: &str = ConfigKey::Network.as_str();
/// The API's base address ([`ConfigKey::Endpoint`]).
pub const ENDPOINT_ENV: &str = ConfigKey::Endpoint.as_str();
/// Servers per listing page ([`ConfigKey::PageSize`]).
pub const PAGE_SIZE_ENV: &str = ConfigKey::PageSize.as_str();

/// Hetzner Cloud's API.
pub const DEFAULT_ENDPOINT: &str = "https://api.hetzner.cloud/v1";
/// The image used when [`ConfigKey::Image`] is unset.
pub const DEFAULT_IMAGE: &str = "ubuntu-24.04";
/// The largest page Hetzner serves.
pub const MAX_PAGE_SIZE: u32 = 50;

/// The Hetzner driver's settings. `Debug` never shows the token.
#[derive(Clone)]
pub struct Config {
    pub(crate) token: SecretString,
    pub(crate) endpoint: String,
    pub(crate) image: String,
    pub(crate) ssh_keys: Vec<String>,
    pub(crate) firewall: Option<String>,
    pub(crate) network: Option<String>,
    pub(crate) page_size: u32,
    pub(crate) retry: RetryPolicy,
    pub(crate) pacing: bool,
    pub(crate) rate_reserve: f64,
    pub(crate) poll_interval: Duration,
    pub(crate) operation_timeout: Duration,
    pub(crate) shutdown_timeout: Duration,
    pub(crate) request_timeout: Duration,
    /// The HTTP client's timeouts, resolved (builder, then client key, then default).
    pub(crate) timeouts: Timeouts,
    pub(crate) visibility_window: Duration,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("token", &"<redacted>")
            .field("endpoint", &self.endpoint)
            .field("image", &self.image)
            .field("ssh_keys", &self.ssh_keys)
            .field("firewall", &self.firewall)
            .field("network", &self.network)
            .field("page_size", &self.page_size)
            .field("retry", &self.retry)
            .field("pacing", &self.pacing)
            .field("rate_reserve", &self.rate_reserve)
            .field("poll_interval", &self.poll_interval)
            .field("operation_timeout", &self.operation_timeout)
            .field("shutdown_timeout", &self.shutdown_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("timeouts", &self.timeouts)
            .field("visibility_window", &self.visibility_window)
            .finish()
    }
}

impl Config {
    /// A builder with every default; only the token is required.
    pub fn builder() -> ConfigBuilder {
        ConfigBuilder::default()
    }

    /// The settings from this process's environment: the variables of [`ConfigKey::ALL`].
    pub fn from_env() -> Result<Config> {
        ConfigBuilder::from_env().build()
    }

    /// The settings from `settings`, keyed by [`ConfigKey`] names. A key that is not one of them is
    /// refused (a typo would otherwise be ignored); every problem is named at once.
    pub fn from_settings(settings: &Settings) -> Result<Config> {
        ConfigBuilder::from_settings(settings).build()
    }

    /// The API's base address.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The image name (or id) for new servers.
    pub fn image(&self) -> &str {
        &self.image
    }

    /// The private network new servers are attached to, when one is set.
    pub fn network(&self) -> Option<&str> {
        self.network.as_deref()
    }

    pub(crate) fn token_value(&self) -> &str {
        self.token.expose_secret()
    }
}

/// Builds a [`Config`] in code, with the same settings as the environment.
#[derive(Clone)]
pub struct ConfigBuilder {
    token: Option<SecretString>,
    endpoint: String,
    image: String,
    ssh_keys: Vec<String>,
    firewall: Option<String>,
    network: Option<String>,
    /// `None` when [`ConfigKey::PageSize`] was given text that is not a number (refused by `build`).
    page_size: Option<u32>,
    /// Set by its builder method: wins over the client keys (`ORCA_MAX_RETRIES`, ...).
    retry: Option<RetryPolicy>,
    pacing: bool,
    rate_reserve: f64,
    /// Set by its builder method: wins over `ORCA_POLL_INTERVAL`.
    poll_interval: Option<Duration>,
    operation_timeout: Duration,
    shutdown_timeout: Duration,
    /// Set by its builder method: wins over `ORCA_REQUEST_TIMEOUT`.
    request_timeout: Option<Duration>,
    visibility_window: Option<Duration>,
    /// The client settings every driver takes ([`ClientKey`](orca_machines::kit::ClientKey)).
    client: ClientSettings,
    /// Keys given that are not settings of this driver (refused by `build`).
    unknown: Vec<String>,
}

impl std::fmt::Debug for ConfigBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfigBuilder")
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("endpoint", &self.endpoint)
            .field("image", &self.image)
            .field("network", &self.network)
            .finish_non_exhaustive()
    }
}

impl Default for ConfigBuilder {
    fn default() -> Self {
        ConfigBuilder {
            token: None,
            endpoint: DEFAULT_ENDPOINT.to_string(),
            image: DEFAULT_IMAGE.to_string(),
            ssh_keys: Vec::new(),
            firewall: None,
            network: None,
            page_size: Some(MAX_PAGE_SIZE),
            retry: None,
            pacing: true,
            rate_reserve: 0.05,
            poll_interval: None,
            operation_timeout: Duration::from_secs(600),
            shutdown_timeout: Duration::from_secs(60),
            request_timeout: None,
            visibility_window: None,
            client: ClientSettings::default(),
            unknown: Vec::new(),
        }
    }
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
            match k.parse::<ConfigKey>() {
                Ok(key) => b = b.with_config(key, v),
                Err(_) if b.client.take(k, v) => {}
                Err(_) => b.unknown.push(k.to_string()),
            }
        }
        b
    }

    /// The client settings every driver takes (timeouts, poll interval, retry budget), as the
    /// `ORCA_*` client keys set them. In every driver a value given to its own builder method
    /// (`retry`, `poll_interval`, `request_timeout`) wins over these; they win over the defaults.
    pub fn client_options(mut self, options: ClientOptions) -> Self {
        self.client.options = options;
        self
    }

    /// Sets `key` to `value` as the environment would (an empty value leaves the default).
    pub fn with_config(self, key: ConfigKey, value: impl Into<String>) -> Self {
        let value = value.into();
        if value.trim().is_empty() {
            return self;
        }
        match key {
            ConfigKey::Token => self.token(value),
            ConfigKey::Image => self.image(value.trim()),
            ConfigKey::SshKeys => {
                self.ssh_keys(value.split(',').map(str::trim).filter(|s| !s.is_empty()))
            }
            ConfigKey::Firewall => self.firewall(value.trim()),
            ConfigKey::Network => self.network(value.trim()),
            ConfigKey::Endpoint => self.endpoint(value.trim()),
            ConfigKey::PageSize => Self {
                page_size: value.trim().parse().ok(),
                ..self
            },
        }
    }

    /// The API token ([`ConfigKey::Token`]).
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(SecretString::from(token.into()));
        self
    }
    /// The API's base address ([`ConfigKey::Endpoint`]; default [`DEFAULT_ENDPOINT`]).
    pub fn endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.endpoint = endpoint.into().trim_end_matches('/').to_string();
        self
    }
    /// The image name, or an image id ([`ConfigKey::Image`]; default [`DEFAULT_IMAGE`]). A name is
    /// looked up for the server type's architecture; an id is used as it is. A spec's own image
    /// (`MachineSpec::with_image`) takes its place.
    pub fn image(mut self, image: impl Into<String>) -> Self {
        self.image = image.into();
        self
    }
    /// SSH key names or ids ([`ConfigKey::SshKeys`]).
    pub fn ssh_keys<I, S>(mut self, keys: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.ssh_keys = keys.into_iter().map(Into::into).collect();
        self
    }
    /// A firewall name ([`ConfigKey::Firewall`]).
    pub fn firewall(mut self, name: impl Into<String>) -> Self {
        self.firewall = Some(name.into());
        self
    }
    /// A private network's name or id ([`ConfigKey::Network`]): new servers are attached to it in
    /// the create call, and machines then report their address in it (`private_address`).
    pub fn network(mut self, name: impl Into<String>) -> Self {
        self.network = Some(name.into());
        self
    }
    /// Servers per page when listing ([`ConfigKey::PageSize`]; 1 to 50, default 50).
    pub fn page_size(mut self, n: u32) -> Self {
        self.page_size = Some(n);
        self
    }
    /// The retry policy (default [`RetryPolicy::default`]).
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = Some(policy);
        self
    }
    /// Whether calls are paced from the `RateLimit-*` headers (default on).
    pub fn pacing(mut self, on: bool) -> Self {
        self.pacing = on;
        self
    }
    /// The share of the project's rate limit left for other tools (0 to 0.9; default 0.05): once the
    /// remaining requests fall to it, calls are spaced at the refill rate.
    pub fn rate_reserve(mut self, share: f64) -> Self {
        self.rate_reserve = share;
        self
    }
    /// How often a running action is read (default 1 s).
    pub fn poll_interval(mut self, every: Duration) -> Self {
        self.poll_interval = Some(every);
        self
    }
    /// How long to follow an action before giving up (default 10 min).
    pub fn operation_timeout(mut self, d: Duration) -> Self {
        self.operation_timeout = d;
        self
    }
    /// How long `stop` waits for a graceful shutdown before it powers the server off (default 60 s).
    pub fn shutdown_timeout(mut self, d: Duration) -> Self {
        self.shutdown_timeout = d;
        self
    }
    /// The timeout of one HTTP request (default 60 s).
    pub fn request_timeout(mut self, d: Duration) -> Self {
        self.request_timeout = Some(d);
        self
    }
    /// How long a server this provider made may stay invisible to reads before a "not found" for it
    /// is believed (default 30 s): a create waits up to this long for its server to show, and a read,
    /// change or delete of a server made moment ago confirms a 404 within it. Wins over
    /// `ORCA_VISIBILITY_WINDOW`.
    pub fn visibility_window(mut self, d: Duration) -> Self {
        self.visibility_window = Some(d);
        self
    }

    /// The settings, or [`InvalidSettings`](orca_machines::Error::InvalidSettings) naming every setting at fault at once.
    pub fn build(self) -> Result<Config> {
        let mut p = Problems::new();
        for k in &self.unknown {
            p.unknown_key::<ConfigKey>(k.clone());
        }
        self.client.report(&mut p);
        let client = self.client.options;
        match &self.token {
            None => p.missing(TOKEN_ENV),
            Some(t) => {
                let t = t.expose_secret();
                if t.trim().is_empty() || t.bytes().any(|b| b.is_ascii_control() || b == b' ') {
                    p.invalid(
                        TOKEN_ENV,
                        "a Hetzner Cloud API token, without spaces or control characters",
                    );
                }
            }
        }
        let ep = &self.endpoint;
        if !kit::is_endpoint(ep) {
            p.invalid(ENDPOINT_ENV, kit::ENDPOINT_RULE);
        }
        if self.image.trim().is_empty() {
            p.invalid(IMAGE_ENV, "an image name or id, got an empty one");
        }
        let bad_name = |s: &str| {
            s.is_empty() || s.len() > 128 || s.chars().any(|c| c.is_control() || c == ',')
        };
        if self.ssh_keys.iter().any(|k| bad_name(k)) {
            p.invalid(
                SSH_KEYS_ENV,
                "comma-separated SSH key names, one was empty or invalid",
            );
        }
        if self.firewall.as_deref().is_some_and(bad_name) {
            p.invalid(FIREWALL_ENV, "a firewall name of 1 to 128 characters");
        }
        if self.network.as_deref().is_some_and(bad_name) {
            p.invalid(NETWORK_ENV, "a network name or id of 1 to 128 characters");
        }
        let page_size = self.page_size.filter(|n| (1..=MAX_PAGE_SIZE).contains(n));
        if page_size.is_none() {
            p.invalid(PAGE_SIZE_ENV, format!("a number from 1 to {MAX_PAGE_SIZE}"));
        }
        if !(0.0..=0.9).contains(&self.rate_reserve) {
            p.invalid("rate_reserve", "0 to 0.9");
        }
        p.finish()?;
        let timeouts = Timeouts::resolve(
            None,
            self.request_timeout,
            &client,
            Timeouts::new(DEFAULT_CONNECT_TIMEOUT, Some(DEFAULT_REQUEST_TIMEOUT)),
        );
        let request_timeout = timeouts.request.unwrap_or(DEFAULT_REQUEST_TIMEOUT);
        Ok(Config {
            token: self
                .token
                .unwrap_or_else(|| SecretString::from(String::new())),
            endpoint: self.endpoint,
            image: self.image,
            ssh_keys: self.ssh_keys,
            firewall: self.firewall,
            network: self.network,
            page_size: page_size.unwrap_or(MAX_PAGE_SIZE),
            retry: self
                .retry
                .unwrap_or_else(|| client.retry_policy(RetryPolicy::default())),
            pacing: self.pacing,
            rate_reserve: self.rate_reserve,
            poll_interval: self
                .poll_interval
                .unwrap_or_else(|| client.poll_interval_or(DEFAULT_POLL_INTERVAL)),
            operation_timeout: self.operation_timeout,
            shutdown_timeout: self.shutdown_timeout,
            request_timeout,
            timeouts,
            visibility_window: client
                .visibility_window_or(self.visibility_window, DEFAULT_VISIBILITY_WINDOW),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use orca_machines::Error;

    const SECRET: &str = "s3cr3t-t0ken-do-not-print";

    fn keys_of(e: &Error) -> Vec<String> {
        match e {
            Error::InvalidSettings { keys, .. } => keys.clone(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn keys_are_the_environment_names() {
        for &k in ConfigKey::ALL {
            assert_eq!(k.as_str().parse::<ConfigKey>().unwrap(), k);
            assert_eq!(k.to_string(), k.as_str());
            assert_eq!(k.is_secret(), k == ConfigKey::Token);
        }
        let e = "HCLOUD_TOKEM".parse::<ConfigKey>().unwrap_err();
        assert_eq!(keys_of(&e), ["HCLOUD_TOKEM"]);
        assert!(e.to_string().contains("HCLOUD_TOKEN"), "{e}");
    }

    #[test]
    fn an_endpoint_that_would_show_the_token_is_refused_without_echoing_it() {
        let with = |endpoint: &str| {
            Config::from_settings(
                &Settings::new()
                    .with(TOKEN_ENV, SECRET)
                    .with(ENDPOINT_ENV, endpoint),
            )
        };
        for bad in [
            "http://api.hetzner.cloud/v1",
            "http://10.1.2.3:8080/v1",
            "https://me:pw-in-url@api.hetzner.cloud/v1",
        ] {
            let e = with(bad).unwrap_err();
            assert_eq!(keys_of(&e), [ENDPOINT_ENV], "{bad}");
            assert!(e.to_string().contains("https://"), "{e}");
            assert!(!e.to_string().contains("pw-in-url"), "{e}");
        }
        assert!(with("http://localhost:4000/v1").is_ok());
        assert!(with("https://api.hetzner.cloud/v1").is_ok());
    }

    #[test]
    fn missing_token_is_named() {
        let e = Config::from_settings(&Settings::new()).unwrap_err();
        assert_eq!(keys_of(&e), [TOKEN_ENV]);
        assert!(e.to_string().contains("HCLOUD_TOKEN"));
    }

    #[test]
    fn every_problem_is_named_at_once_unknown_keys_included() {
        let s = Settings::new()
            .with(ENDPOINT_ENV, "ftp://x")
            .with(SSH_KEYS_ENV, ",")
            .with("ORCA_HCLOUD_FIREWAL", "typo");
        let e = Config::from_settings(&s).unwrap_err();
        assert_eq!(
            keys_of(&e),
            [TOKEN_ENV, "ORCA_HCLOUD_FIREWAL", ENDPOINT_ENV],
            "{e}"
        );
        // The value of a token is never repeated in an error.
        let e = Config::from_settings(&Settings::new().with(TOKEN_ENV, format!("{SECRET} x")))
            .unwrap_err();
        assert_eq!(keys_of(&e), [TOKEN_ENV]);
        assert!(!format!("{e} {e:?}").contains(SECRET));
    }

    #[test]
    fn reads_every_setting_and_redacts_the_token() {
        let s = Settings::new()
            .with(TOKEN_ENV, SECRET)
            .with(IMAGE_ENV, "debian-12")
            .with(SSH_KEYS_ENV, "a, b ,,c")
            .with(FIREWALL_ENV, "fw")
            .with(NETWORK_ENV, "private-1")
            .with(ENDPOINT_ENV, "http://127.0.0.1:9/v1/");
        let c = Config::from_settings(&s).unwrap();
        assert_eq!(c.image(), "debian-12");
        assert_eq!(c.ssh_keys, vec!["a", "b", "c"]);
        assert_eq!(c.firewall.as_deref(), Some("fw"));
        assert_eq!(c.network(), Some("private-1"));
        assert_eq!(c.endpoint(), "http://127.0.0.1:9/v1");
        assert_eq!(c.token_value(), SECRET);
        let dbg = format!(
            "{c:?} {:?} {s:?}",
            Config::builder().with_config(ConfigKey::Token, SECRET)
        );
        assert!(!dbg.contains(SECRET), "{dbg}");
        assert!(dbg.contains("<redacted>"));
        let d = Config::from_settings(&Settings::new().with(TOKEN_ENV, SECRET).with(IMAGE_ENV, ""))
            .unwrap();
        assert_eq!(d.image(), DEFAULT_IMAGE, "an empty value is unset");
        assert_eq!(d.endpoint(), DEFAULT_ENDPOINT);
        assert!(d.ssh_keys.is_empty() && d.firewall.is_none() && d.network.is_none());
    }

    #[test]
    fn page_size_is_a_setting_and_a_bad_one_is_named() {
        let with = |v: &str| {
            Settings::new()
                .with(TOKEN_ENV, SECRET)
                .with(PAGE_SIZE_ENV, v)
        };
        assert_eq!(Config::from_settings(&with(" 7 ")).unwrap().page_size, 7);
        assert_eq!(Config::from_settings(&with("50")).unwrap().page_size, 50);
        assert_eq!(
            Config::from_settings(&with("")).unwrap().page_size,
            MAX_PAGE_SIZE,
            "an empty value is unset"
        );
        for bad in ["0", "51", "-1", "ten", "1.5"] {
            let e = Config::from_settings(&with(bad)).unwrap_err();
            assert_eq!(keys_of(&e), [PAGE_SIZE_ENV], "{bad}: {e}");
            assert!(
                e.to_string()
                    .contains("ORCA_HCLOUD_PAGE_SIZE: a number from 1 to 50"),
                "{e}"
            );
        }
        // The builder's method is the same setting, checked the same way.
        let b = || Config::builder().token(SECRET);
        assert_eq!(b().page_size(1).build().unwrap().page_size, 1);
        let e = b().page_size(0).build().unwrap_err();
        assert_eq!(keys_of(&e), [PAGE_SIZE_ENV], "{e}");
    }

    #[test]
    fn a_builder_method_wins_over_a_client_key_and_a_key_over_the_default() {
        let keys = Settings::new()
            .with(TOKEN_ENV, SECRET)
            .with("ORCA_POLL_INTERVAL", "50ms")
            .with("ORCA_REQUEST_TIMEOUT", "9s")
            .with("ORCA_MAX_RETRIES", "2")
            .with("ORCA_VISIBILITY_WINDOW", "2s");
        let c = ConfigBuilder::from_settings(&keys).build().unwrap();
        assert_eq!(
            (c.poll_interval, c.request_timeout, c.retry.max_retries),
            (Duration::from_millis(50), Duration::from_secs(9), 2)
        );
        assert_eq!(c.visibility_window, Duration::from_secs(2));
        let c = ConfigBuilder::from_settings(&keys)
            .poll_interval(Duration::from_millis(7))
            .request_timeout(Duration::from_secs(3))
            .retry(RetryPolicy::NEVER)
            .visibility_window(Duration::from_millis(300))
            .build()
            .unwrap();
        assert_eq!(
            (c.poll_interval, c.request_timeout, c.retry.max_retries),
            (Duration::from_millis(7), Duration::from_secs(3), 0)
        );
        assert_eq!(c.visibility_window, Duration::from_millis(300));
        // The HTTP client is built from the resolved timeouts: the builder's value is there too.
        assert_eq!(c.timeouts.request, Some(Duration::from_secs(3)));
        let c = Config::from_settings(&Settings::new().with(TOKEN_ENV, SECRET)).unwrap();
        assert_eq!(
            (c.poll_interval, c.request_timeout, c.visibility_window),
            (
                DEFAULT_POLL_INTERVAL,
                DEFAULT_REQUEST_TIMEOUT,
                DEFAULT_VISIBILITY_WINDOW
            )
        );
    }
}
