//! Which timeouts win, decided in one place, and whether a client goes through the environment's
//! proxy.

use std::time::Duration;

use super::{is_loopback, ClientOptions};

/// A client's timeouts, resolved ([`Timeouts::resolve`]): what the HTTP client (or an SDK's
/// timeout settings) is built with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// The longest wait for a connection.
    pub connect: Duration,
    /// The longest wait for one request's whole answer; `None` for none on the client (a driver
    /// that sets one per request: a long poll answers after minutes).
    pub request: Option<Duration>,
}

impl Timeouts {
    /// `connect` and `request` as they are (a driver's defaults).
    pub const fn new(connect: Duration, request: Option<Duration>) -> Self {
        Timeouts { connect, request }
    }

    /// The timeouts that win, each on its own: the value a driver's builder was given
    /// (`connect_timeout(..)`, `request_timeout(..)`), else the client key's from the settings
    /// (`ORCA_CONNECT_TIMEOUT`, `ORCA_REQUEST_TIMEOUT`, in `options`), else `defaults`' (the
    /// driver's own).
    ///
    /// ```
    /// use std::time::Duration;
    /// use orca_machines::kit::{ClientKey, ClientOptions, Timeouts};
    /// let mut keys = ClientOptions::new();
    /// keys.set(ClientKey::ConnectTimeout, "3s").unwrap();
    /// keys.set(ClientKey::RequestTimeout, "20s").unwrap();
    /// let defaults = Timeouts::new(Duration::from_secs(10), Some(Duration::from_secs(60)));
    /// let t = Timeouts::resolve(None, Some(Duration::from_secs(5)), &keys, defaults);
    /// assert_eq!(t.connect, Duration::from_secs(3), "the key beats the default");
    /// assert_eq!(t.request, Some(Duration::from_secs(5)), "the builder beats the key");
    /// ```
    pub fn resolve(
        builder_connect: Option<Duration>,
        builder_request: Option<Duration>,
        options: &ClientOptions,
        defaults: Timeouts,
    ) -> Timeouts {
        Timeouts {
            connect: builder_connect
                .or(options.connect_timeout)
                .unwrap_or(defaults.connect),
            request: builder_request
                .or(options.request_timeout)
                .or(defaults.request),
        }
    }
}

/// Whether a client goes through the proxy the environment names (`HTTPS_PROXY`, `HTTP_PROXY`,
/// `NO_PROXY`, as reqwest reads them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proxy {
    /// Through the environment's proxy, if it names one.
    Environment,
    /// Never through a proxy: an endpoint on this machine (a test's fake), or one that must be
    /// reached directly (a cloud's instance metadata service at a link-local address).
    Never,
}

impl Proxy {
    /// [`Proxy::Never`] for an endpoint on the loopback interface ([`is_loopback`]), so that a
    /// test's calls and their credentials stay on this machine; else [`Proxy::Environment`].
    pub fn for_endpoint(endpoint: &str) -> Proxy {
        if is_loopback(endpoint) {
            Proxy::Never
        } else {
            Proxy::Environment
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kit::ClientKey;

    #[test]
    fn the_builder_beats_the_key_which_beats_the_default_each_on_its_own() {
        let s = |x| Duration::from_secs(x);
        let defaults = Timeouts::new(s(10), Some(s(60)));
        let none = ClientOptions::new();
        assert_eq!(Timeouts::resolve(None, None, &none, defaults), defaults);
        let mut keys = ClientOptions::new();
        keys.set(ClientKey::ConnectTimeout, "2s").unwrap();
        keys.set(ClientKey::RequestTimeout, "30s").unwrap();
        assert_eq!(
            Timeouts::resolve(None, None, &keys, defaults),
            Timeouts::new(s(2), Some(s(30)))
        );
        assert_eq!(
            Timeouts::resolve(Some(s(1)), Some(s(7)), &keys, defaults),
            Timeouts::new(s(1), Some(s(7)))
        );
        assert_eq!(
            Timeouts::resolve(Some(s(1)), None, &keys, defaults),
            Timeouts::new(s(1), Some(s(30)))
        );
        // A driver with no client-wide request timeout keeps none unless told.
        let per_request = Timeouts::new(s(10), None);
        assert_eq!(
            Timeouts::resolve(None, None, &none, per_request).request,
            None
        );
    }

    #[test]
    fn only_a_loopback_endpoint_skips_the_proxy_by_itself() {
        assert_eq!(Proxy::for_endpoint("http://127.0.0.1:9/v1"), Proxy::Never);
        assert_eq!(
            Proxy::for_endpoint("https://api.hetzner.cloud/v1"),
            Proxy::Environment
        );
    }
}
