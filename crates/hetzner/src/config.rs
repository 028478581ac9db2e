//! Settings: from the environment ([`Config::from_env`]) or in code ([`Config::builder`]).

use std::time::Duration;

use orca_machines::{Error, Result, RetryPolicy};
use secrecy::{ExposeSecret, SecretString};

/// The API token (the name the `hcloud` CLI and Hetzner's own tools use). Required. Never printed.
pub const TOKEN_ENV: &str = "HCLOUD_TOKEN";
/// The image name for new servers; the variant of the server type's architecture is used.
pub const IMAGE_ENV: &str = "ORCA_HCLOUD_IMAGE";
/// Comma-separated SSH key names (or ids) to put on new servers.
pub const SSH_KEYS_ENV: &str = "ORCA_HCLOUD_SSH_KEYS";
/// The name of a firewall to apply to new servers.
pub const FIREWALL_ENV: &str = "ORCA_HCLOUD_FIREWALL";
/// The API's base address, for tests against a fake (`http://127.0.0.1:PORT/v1`).
pub const ENDPOINT_ENV: &str = "ORCA_HCLOUD_ENDPOINT";

/// Hetzner Cloud's API.
pub const DEFAULT_ENDPOINT: &str = "https://api.hetzner.cloud/v1";
/// The image used when [`IMAGE_ENV`] is unset.
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
    pub(crate) page_size: u32,
    pub(crate) retry: RetryPolicy,
    pub(crate) pacing: bool,
    pub(crate) rate_reserve: f64,
    pub(crate) action_poll: Duration,
    pub(crate) action_timeout: Duration,
    pub(crate) shutdown_timeout: Duration,
    pub(crate) request_timeout: Duration,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("token", &"<redacted>")
            .field("endpoint", &self.endpoint)
            .field("image", &self.image)
            .field("ssh_keys", &self.ssh_keys)
            .field("firewall", &self.firewall)
            .field("page_size", &self.page_size)
            .field("retry", &self.retry)
            .field("pacing", &self.pacing)
            .field("rate_reserve", &self.rate_reserve)
            .field("action_poll", &self.action_poll)
            .field("action_timeout", &self.action_timeout)
            .field("shutdown_timeout", &self.shutdown_timeout)
            .field("request_timeout", &self.request_timeout)
            .finish()
    }
}

impl Config {
    /// A builder with every default; only the token is required.
    pub fn builder() -> ConfigBuilder {
        ConfigBuilder::default()
    }

    /// The settings from this process's environment: [`TOKEN_ENV`] (required), [`IMAGE_ENV`],
    /// [`SSH_KEYS_ENV`], [`FIREWALL_ENV`], [`ENDPOINT_ENV`].
    pub fn from_env() -> Result<Config> {
        ConfigBuilder::from_env().build()
    }

    /// The settings from `lookup` (what [`Config::from_env`] uses with the environment).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Config> {
        ConfigBuilder::from_lookup(lookup).build()
    }

    /// The API's base address.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The image name (or id) for new servers.
    pub fn image(&self) -> &str {
        &self.image
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
    page_size: u32,
    retry: RetryPolicy,
    pacing: bool,
    rate_reserve: f64,
    action_poll: Duration,
    action_timeout: Duration,
    shutdown_timeout: Duration,
    request_timeout: Duration,
    /// Whether the settings came from the environment (errors then name the variables).
    env: bool,
}

impl std::fmt::Debug for ConfigBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfigBuilder")
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("endpoint", &self.endpoint)
            .field("image", &self.image)
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
            page_size: MAX_PAGE_SIZE,
            retry: RetryPolicy::default(),
            pacing: true,
            rate_reserve: 0.05,
            action_poll: Duration::from_millis(1000),
            action_timeout: Duration::from_secs(600),
            shutdown_timeout: Duration::from_secs(60),
            request_timeout: Duration::from_secs(60),
            env: false,
        }
    }
}

impl ConfigBuilder {
    /// A builder holding this process's environment settings (see [`Config::from_env`]), to adjust
    /// before [`build`](Self::build).
    pub fn from_env() -> ConfigBuilder {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// A builder holding the settings `lookup` answers for the environment variables.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> ConfigBuilder {
        let get = |k: &str| lookup(k).filter(|v| !v.trim().is_empty());
        let mut b = ConfigBuilder {
            env: true,
            ..ConfigBuilder::default()
        };
        if let Some(t) = get(TOKEN_ENV) {
            b = b.token(t);
        }
        if let Some(i) = get(IMAGE_ENV) {
            b = b.image(i.trim());
        }
        if let Some(k) = get(SSH_KEYS_ENV) {
            b = b.ssh_keys(k.split(',').map(str::trim).filter(|s| !s.is_empty()));
        }
        if let Some(f) = get(FIREWALL_ENV) {
            b = b.firewall(f.trim());
        }
        if let Some(e) = get(ENDPOINT_ENV) {
            b = b.endpoint(e.trim());
        }
        b
    }

    /// The API token ([`TOKEN_ENV`]).
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(SecretString::from(token.into()));
        self
    }
    /// The API's base address ([`ENDPOINT_ENV`]; default [`DEFAULT_ENDPOINT`]).
    pub fn endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.endpoint = endpoint.into().trim_end_matches('/').to_string();
        self
    }
    /// The image name, or an image id ([`IMAGE_ENV`]; default [`DEFAULT_IMAGE`]). A name is looked up
    /// for the server type's architecture; an id is used as it is.
    pub fn image(mut self, image: impl Into<String>) -> Self {
        self.image = image.into();
        self
    }
    /// SSH key names or ids ([`SSH_KEYS_ENV`]).
    pub fn ssh_keys<I, S>(mut self, keys: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.ssh_keys = keys.into_iter().map(Into::into).collect();
        self
    }
    /// A firewall name ([`FIREWALL_ENV`]).
    pub fn firewall(mut self, name: impl Into<String>) -> Self {
        self.firewall = Some(name.into());
        self
    }
    /// Servers per page when listing (1 to 50; default 50).
    pub fn page_size(mut self, n: u32) -> Self {
        self.page_size = n;
        self
    }
    /// The retry policy (default [`RetryPolicy::default`]).
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
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
    pub fn action_poll(mut self, every: Duration) -> Self {
        self.action_poll = every;
        self
    }
    /// How long to follow an action before giving up (default 10 min).
    pub fn action_timeout(mut self, d: Duration) -> Self {
        self.action_timeout = d;
        self
    }
    /// How long `stop` waits for a graceful shutdown before it powers the server off (default 60 s).
    pub fn shutdown_timeout(mut self, d: Duration) -> Self {
        self.shutdown_timeout = d;
        self
    }
    /// The timeout of one HTTP request (default 60 s).
    pub fn request_timeout(mut self, d: Duration) -> Self {
        self.request_timeout = d;
        self
    }

    /// The settings, or [`Error::InvalidSettings`] naming every setting at fault.
    pub fn build(self) -> Result<Config> {
        let endpoint_key = if self.env { ENDPOINT_ENV } else { "endpoint" };
        let mut keys = Vec::new();
        let mut why = Vec::new();
        if self.token.is_none() {
            keys.push(TOKEN_ENV.to_string());
            why.push(format!(
                "{TOKEN_ENV} is not set (a Hetzner Cloud API token)"
            ));
        }
        if let Some(t) = &self.token {
            let t = t.expose_secret();
            if t.trim().is_empty() || t.bytes().any(|b| b.is_ascii_control() || b == b' ') {
                keys.push(TOKEN_ENV.to_string());
                why.push(format!(
                    "{TOKEN_ENV} is empty or holds spaces or control characters"
                ));
            }
        }
        let ep = &self.endpoint;
        if !(ep.starts_with("https://") || ep.starts_with("http://"))
            || reqwest::Url::parse(ep).is_err()
        {
            keys.push(endpoint_key.to_string());
            why.push(format!("{endpoint_key} must be an http(s) URL, got {ep:?}"));
        }
        if self.image.trim().is_empty() {
            keys.push(IMAGE_ENV.to_string());
            why.push(format!("{IMAGE_ENV} is empty"));
        }
        let bad_name = |s: &str| {
            s.is_empty() || s.len() > 128 || s.chars().any(|c| c.is_control() || c == ',')
        };
        if self.ssh_keys.iter().any(|k| bad_name(k)) {
            keys.push(SSH_KEYS_ENV.to_string());
            why.push(format!("{SSH_KEYS_ENV} holds an empty or invalid key name"));
        }
        if self.firewall.as_deref().is_some_and(bad_name) {
            keys.push(FIREWALL_ENV.to_string());
            why.push(format!("{FIREWALL_ENV} is not a valid firewall name"));
        }
        if !(1..=MAX_PAGE_SIZE).contains(&self.page_size) {
            keys.push("page_size".into());
            why.push(format!("page_size must be 1 to {MAX_PAGE_SIZE}"));
        }
        if !(0.0..=0.9).contains(&self.rate_reserve) {
            keys.push("rate_reserve".into());
            why.push("rate_reserve must be 0 to 0.9".into());
        }
        if !keys.is_empty() {
            return Err(Error::settings(keys, why.join("; ")));
        }
        Ok(Config {
            token: self
                .token
                .unwrap_or_else(|| SecretString::from(String::new())),
            endpoint: self.endpoint,
            image: self.image,
            ssh_keys: self.ssh_keys,
            firewall: self.firewall,
            page_size: self.page_size,
            retry: self.retry,
            pacing: self.pacing,
            rate_reserve: self.rate_reserve,
            action_poll: self.action_poll,
            action_timeout: self.action_timeout,
            shutdown_timeout: self.shutdown_timeout,
            request_timeout: self.request_timeout,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "s3cr3t-t0ken-do-not-print";

    #[test]
    fn missing_token_is_named() {
        let e = Config::from_lookup(|_| None).unwrap_err();
        match &e {
            Error::InvalidSettings { keys, .. } => assert_eq!(keys, &vec![TOKEN_ENV.to_string()]),
            other => panic!("{other:?}"),
        }
        assert!(e.to_string().contains("HCLOUD_TOKEN"));
    }

    #[test]
    fn every_bad_setting_is_named_at_once() {
        let e = Config::from_lookup(|k| match k {
            ENDPOINT_ENV => Some("ftp://x".into()),
            SSH_KEYS_ENV => Some(",".into()),
            _ => None,
        })
        .unwrap_err();
        let Error::InvalidSettings { keys, .. } = e else {
            panic!()
        };
        assert_eq!(keys, vec![TOKEN_ENV.to_string(), ENDPOINT_ENV.to_string()]);
    }

    #[test]
    fn reads_every_setting_and_redacts_the_token() {
        let c = Config::from_lookup(|k| {
            Some(
                match k {
                    TOKEN_ENV => SECRET,
                    IMAGE_ENV => "debian-12",
                    SSH_KEYS_ENV => "a, b ,,c",
                    FIREWALL_ENV => "fw",
                    ENDPOINT_ENV => "http://127.0.0.1:9/v1/",
                    _ => return None,
                }
                .to_string(),
            )
        })
        .unwrap();
        assert_eq!(c.image(), "debian-12");
        assert_eq!(c.ssh_keys, vec!["a", "b", "c"]);
        assert_eq!(c.firewall.as_deref(), Some("fw"));
        assert_eq!(c.endpoint(), "http://127.0.0.1:9/v1");
        assert_eq!(c.token_value(), SECRET);
        let dbg = format!("{c:?} {:?}", Config::builder().token(SECRET));
        assert!(!dbg.contains(SECRET), "{dbg}");
        assert!(dbg.contains("<redacted>"));
        let d = Config::from_lookup(|k| (k == TOKEN_ENV).then(|| SECRET.to_string())).unwrap();
        assert_eq!(d.image(), DEFAULT_IMAGE);
        assert_eq!(d.endpoint(), DEFAULT_ENDPOINT);
        assert!(d.ssh_keys.is_empty() && d.firewall.is_none());
    }
}
