//! Tokens for Resource Manager: the small [`TokenSource`] trait, a static token ([`StaticToken`], for tests
//! and for a token minted elsewhere) and [`IdentityToken`], backed by azure_identity 1.x (client secret,
//! managed identity, Azure CLI).
//!
//! azure_identity's token requests go through [`ReqwestTransport`], our `azure_core::http::HttpClient`
//! over the workspace's reqwest 0.12, so the crate builds one HTTP stack (azure_core's default would
//! add reqwest 0.13 with its own TLS). Tokens are [`SecretString`]s: never printed, never in an error.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use azure_core::credentials::TokenCredential;
use azure_core::http::headers::{HeaderName, HeaderValue, Headers};
use azure_core::http::{
    AsyncRawResponse, Body, ClientOptions, HttpClient, Method, Request, Transport,
};
use orca_machines::{Error, Result};
use secrecy::SecretString;

use crate::config::Credential;

/// Where Resource Manager bearer tokens come from.
#[async_trait]
pub trait TokenSource: Send + Sync + std::fmt::Debug {
    /// A valid bearer token (cached by the source as it sees fit).
    async fn token(&self) -> Result<SecretString>;
}

/// A fixed token.
pub struct StaticToken(SecretString);

impl StaticToken {
    /// A source that always answers `token`.
    pub fn new(token: SecretString) -> Self {
        StaticToken(token)
    }
}

impl std::fmt::Debug for StaticToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StaticToken(<redacted>)")
    }
}

#[async_trait]
impl TokenSource for StaticToken {
    async fn token(&self) -> Result<SecretString> {
        Ok(self.0.clone())
    }
}

/// A token from an azure_identity credential, for the Resource Manager scope.
pub struct IdentityToken {
    credential: Arc<dyn TokenCredential>,
    scope: String,
    kind: &'static str,
}

impl std::fmt::Debug for IdentityToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdentityToken")
            .field("kind", &self.kind)
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl TokenSource for IdentityToken {
    async fn token(&self) -> Result<SecretString> {
        let t = self
            .credential
            .get_token(&[self.scope.as_str()], None)
            .await
            .map_err(|e| {
                Error::unauthenticated(format!("{} credential: {}", self.kind, redact_error(&e)))
            })?;
        Ok(SecretString::from(t.token.secret().to_string()))
    }
}

/// azure_core errors carry no secret, but may be long: keep their first line.
fn redact_error(e: &azure_core::Error) -> String {
    let s = e.to_string();
    s.lines().next().unwrap_or("").chars().take(400).collect()
}

fn client_options() -> ClientOptions {
    ClientOptions {
        transport: Some(Transport::new(Arc::new(ReqwestTransport::new()))),
        ..ClientOptions::default()
    }
}

/// The token source for `credential`, for Resource Manager at `arm_endpoint`.
pub(crate) fn source(credential: &Credential, arm_endpoint: &str) -> Result<Arc<dyn TokenSource>> {
    let scope = if arm_endpoint.starts_with("https://") {
        format!("{arm_endpoint}/.default")
    } else {
        "https://management.azure.com/.default".to_string()
    };
    let failed = |kind: &str, e: azure_core::Error| {
        Error::unauthenticated(format!("{kind} credential: {}", redact_error(&e)))
    };
    let (credential, kind): (Arc<dyn TokenCredential>, &'static str) = match credential {
        Credential::Static(t) => return Ok(crate::config::static_source(t)),
        Credential::Custom(c) => return Ok(c.clone()),
        Credential::ClientSecret {
            tenant_id,
            client_id,
            secret,
        } => {
            use secrecy::ExposeSecret;
            let options = azure_identity::ClientSecretCredentialOptions {
                client_options: client_options(),
            };
            let c = azure_identity::ClientSecretCredential::new(
                tenant_id,
                client_id.clone(),
                secret.expose_secret().to_string().into(),
                Some(options),
            )
            .map_err(|e| failed("client secret", e))?;
            (c, "client secret")
        }
        Credential::ManagedIdentity { client_id } => {
            let options = azure_identity::ManagedIdentityCredentialOptions {
                user_assigned_id: client_id
                    .clone()
                    .map(azure_identity::UserAssignedId::ClientId),
                client_options: client_options(),
            };
            let c = azure_identity::ManagedIdentityCredential::new(Some(options))
                .map_err(|e| failed("managed identity", e))?;
            (c, "managed identity")
        }
        Credential::Auto => {
            let get = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
            let chosen = match (
                get("AZURE_TENANT_ID"),
                get("AZURE_CLIENT_ID"),
                get("AZURE_CLIENT_SECRET"),
            ) {
                (Some(tenant_id), Some(client_id), Some(secret)) => Credential::ClientSecret {
                    tenant_id,
                    client_id,
                    secret: SecretString::from(secret),
                },
                (_, client_id, _)
                    if get("IDENTITY_ENDPOINT").is_some() || get("MSI_ENDPOINT").is_some() =>
                {
                    Credential::ManagedIdentity { client_id }
                }
                _ => Credential::AzureCli,
            };
            return source(&chosen, arm_endpoint);
        }
        Credential::AzureCli => {
            let c = azure_identity::AzureCliCredential::new(None)
                .map_err(|e| failed("Azure CLI", e))?;
            (c, "Azure CLI")
        }
    };
    Ok(Arc::new(IdentityToken {
        credential,
        scope,
        kind,
    }))
}

/// azure_core's `HttpClient` over reqwest 0.12: how azure_identity reaches the login endpoints.
#[derive(Debug, Clone)]
pub struct ReqwestTransport {
    http: reqwest::Client,
}

impl ReqwestTransport {
    /// A transport on a new reqwest client (no redirects, like azure_core's own).
    pub fn new() -> Self {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(std::time::Duration::from_secs(20))
            .timeout(std::time::Duration::from_secs(60))
            .build()
            .unwrap_or_default();
        ReqwestTransport { http }
    }
}

impl Default for ReqwestTransport {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl HttpClient for ReqwestTransport {
    async fn execute_request(&self, request: &Request) -> azure_core::Result<AsyncRawResponse> {
        use azure_core::error::ErrorKind;
        let method = match request.method() {
            Method::Delete => reqwest::Method::DELETE,
            Method::Get => reqwest::Method::GET,
            Method::Head => reqwest::Method::HEAD,
            Method::Patch => reqwest::Method::PATCH,
            Method::Post => reqwest::Method::POST,
            Method::Put => reqwest::Method::PUT,
            other => {
                return Err(azure_core::Error::with_message(
                    ErrorKind::Other,
                    format!("HTTP method {other:?} is not supported by this transport"),
                ))
            }
        };
        let mut req = self.http.request(method, request.url().as_str());
        for (name, value) in request.headers().iter() {
            req = req.header(name.as_str(), value.as_str());
        }
        req = match request.body() {
            Body::Bytes(b) => req.body(b.to_vec()),
            _ => {
                return Err(azure_core::Error::with_message(
                    ErrorKind::Other,
                    "streaming bodies are not supported by this transport",
                ))
            }
        };
        let rsp = req.send().await.map_err(|e| {
            let kind = if e.is_connect() {
                ErrorKind::Connection
            } else {
                ErrorKind::Io
            };
            azure_core::Error::with_message(kind, format!("request failed: {}", e.without_url()))
        })?;
        let status = rsp.status().as_u16();
        let headers: HashMap<HeaderName, HeaderValue> = rsp
            .headers()
            .iter()
            .filter_map(|(k, v)| {
                v.to_str().ok().map(|v| {
                    (
                        HeaderName::from(k.as_str().to_string()),
                        HeaderValue::from(v.to_string()),
                    )
                })
            })
            .collect();
        let bytes = rsp.bytes().await.map_err(|e| {
            azure_core::Error::with_message(
                ErrorKind::Io,
                format!("reading the answer: {}", e.without_url()),
            )
        })?;
        let stream = futures_once(bytes);
        Ok(AsyncRawResponse::new(
            status.into(),
            Headers::from(headers),
            stream,
        ))
    }
}

fn futures_once(bytes: impl AsRef<[u8]>) -> azure_core::http::response::PinnedStream {
    let b = azure_core::Bytes::from(bytes.as_ref().to_vec());
    Box::pin(futures::stream::once(async move { Ok(b) }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use secrecy::ExposeSecret;

    #[tokio::test]
    async fn static_token_is_redacted_in_debug() {
        let s = StaticToken::new(SecretString::from("eyJ-very-secret".to_string()));
        assert!(!format!("{s:?}").contains("very-secret"));
        assert_eq!(s.token().await.unwrap().expose_secret(), "eyJ-very-secret");
    }

    #[test]
    fn client_secret_credential_debug_hides_the_secret() {
        let c = Credential::ClientSecret {
            tenant_id: "72f988bf-86f1-41af-91ab-2d7cd011db47".into(),
            client_id: "c".into(),
            secret: SecretString::from("hunter2-xyz".to_string()),
        };
        let src = source(&c, "https://management.azure.com").unwrap();
        let d = format!("{c:?} {src:?}");
        assert!(!d.contains("hunter2"), "{d}");
    }
}
