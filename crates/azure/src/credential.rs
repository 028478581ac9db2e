//! Tokens for Resource Manager: the small [`TokenSource`] trait, a static token ([`StaticToken`], for tests
//! and for a token minted elsewhere) and [`IdentityToken`], backed by azure_identity 1.x (client secret,
//! workload identity, managed identity, Azure CLI).
//!
//! [`Credential::Auto`] picks, in this order: a client secret when `AZURE_CLIENT_SECRET` is given;
//! workload identity when `AZURE_FEDERATED_TOKEN_FILE` is (with `AZURE_TENANT_ID` and
//! `AZURE_CLIENT_ID`, as Kubernetes sets them); managed identity when `IDENTITY_ENDPOINT` or
//! `MSI_ENDPOINT` is (App Service, Arc, Cloud Shell); otherwise, at the first token, managed identity
//! when the instance metadata service answers ([`auto_choice`]: on an Azure VM no variable says so),
//! else the Azure CLI.
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

/// Where the instance metadata service answers on an Azure VM.
pub const IMDS_ENDPOINT: &str = "http://169.254.169.254";

/// What [`Credential::Auto`] found when nothing in the settings named a credential.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AutoChoice {
    /// The instance metadata service answered: this runs on an Azure VM (or scale set) with a
    /// managed identity's endpoint.
    ManagedIdentity,
    /// No metadata service: the signed-in Azure CLI.
    AzureCli,
}

/// Probes the instance metadata service at `imds_endpoint` (on an Azure VM: `http://169.254.169.254`)
/// the way Azure's own SDKs do: a token request without the `Metadata` header, which the service
/// refuses with 400 at once. Any HTTP answer within a second means it is there (managed identity);
/// no answer means it is not (the Azure CLI).
pub async fn auto_choice(imds_endpoint: &str) -> AutoChoice {
    let http = match reqwest::Client::builder()
        .no_proxy()
        .connect_timeout(std::time::Duration::from_millis(800))
        .timeout(std::time::Duration::from_secs(1))
        .redirect(reqwest::redirect::Policy::none())
        .build()
    {
        Ok(h) => h,
        Err(_) => return AutoChoice::AzureCli,
    };
    let url = format!(
        "{}/metadata/identity/oauth2/token?api-version=2018-02-01&resource=https%3A%2F%2Fmanagement.azure.com%2F",
        imds_endpoint.trim_end_matches('/')
    );
    match http.get(url).send().await {
        Ok(_) => AutoChoice::ManagedIdentity,
        Err(_) => AutoChoice::AzureCli,
    }
}

/// [`Credential::Auto`] after the settings named nothing: managed identity when the metadata
/// service answers, else the Azure CLI, chosen at the first token and kept.
struct AutoToken {
    imds_endpoint: String,
    scope: String,
    chosen: tokio::sync::OnceCell<(AutoChoice, Arc<dyn TokenSource>)>,
}

impl std::fmt::Debug for AutoToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AutoToken")
            .field("chosen", &self.chosen.get().map(|c| c.0))
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl TokenSource for AutoToken {
    async fn token(&self) -> Result<SecretString> {
        let (_, source) = self
            .chosen
            .get_or_try_init(|| async {
                let choice = auto_choice(&self.imds_endpoint).await;
                tracing::debug!(?choice, "azure credential chosen");
                let c = match choice {
                    AutoChoice::ManagedIdentity => Credential::ManagedIdentity { client_id: None },
                    AutoChoice::AzureCli => Credential::AzureCli,
                };
                Ok::<_, Error>((choice, identity(&c, &self.scope)?))
            })
            .await?;
        source.token().await
    }
}

/// The token source for `credential`, for Resource Manager at `arm_endpoint`; `Auto` probes the
/// metadata service at `imds_endpoint` at its first token.
pub(crate) fn source(
    credential: &Credential,
    arm_endpoint: &str,
    imds_endpoint: &str,
) -> Result<Arc<dyn TokenSource>> {
    let scope = if arm_endpoint.starts_with("https://") {
        format!("{arm_endpoint}/.default")
    } else {
        "https://management.azure.com/.default".to_string()
    };
    match credential {
        Credential::Static(t) => Ok(Arc::new(StaticToken::new(t.clone()))),
        Credential::Custom(c) => Ok(c.clone()),
        Credential::Auto => Ok(Arc::new(AutoToken {
            imds_endpoint: imds_endpoint.to_string(),
            scope,
            chosen: tokio::sync::OnceCell::new(),
        })),
        other => identity(other, &scope),
    }
}

/// An azure_identity credential for `credential`.
fn identity(credential: &Credential, scope: &str) -> Result<Arc<dyn TokenSource>> {
    let failed = |kind: &str, e: azure_core::Error| {
        Error::unauthenticated(format!("{kind} credential: {}", redact_error(&e)))
    };
    let (credential, kind): (Arc<dyn TokenCredential>, &'static str) = match credential {
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
        Credential::WorkloadIdentity {
            tenant_id,
            client_id,
            token_file,
        } => {
            let options = azure_identity::WorkloadIdentityCredentialOptions {
                credential_options: azure_identity::ClientAssertionCredentialOptions {
                    client_options: client_options(),
                },
                client_id: Some(client_id.clone()),
                tenant_id: Some(tenant_id.clone()),
                token_file_path: Some(token_file.into()),
            };
            let c = azure_identity::WorkloadIdentityCredential::new(Some(options))
                .map_err(|e| failed("workload identity", e))?;
            (c, "workload identity")
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
        Credential::AzureCli => {
            let c = azure_identity::AzureCliCredential::new(None)
                .map_err(|e| failed("Azure CLI", e))?;
            (c, "Azure CLI")
        }
        Credential::Static(t) => return Ok(Arc::new(StaticToken::new(t.clone()))),
        Credential::Custom(c) => return Ok(c.clone()),
        Credential::Auto => {
            return Err(Error::other(
                "the automatic credential is resolved by its own source",
            ))
        }
    };
    Ok(Arc::new(IdentityToken {
        credential,
        scope: scope.to_string(),
        kind,
    }))
}

/// azure_core's `HttpClient` over reqwest 0.12: how azure_identity reaches the login endpoints.
#[derive(Debug, Clone)]
pub struct ReqwestTransport {
    http: reqwest::Client,
    /// For the instance metadata service and this machine: never through a proxy.
    direct: reqwest::Client,
}

impl ReqwestTransport {
    /// A transport on a new reqwest client (no redirects, like azure_core's own).
    pub fn new() -> Self {
        let builder = || {
            reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .connect_timeout(std::time::Duration::from_secs(20))
                .timeout(std::time::Duration::from_secs(60))
        };
        let http = builder().build().unwrap_or_default();
        let direct = builder().no_proxy().build().unwrap_or_default();
        ReqwestTransport { http, direct }
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
        let direct = matches!(
            request.url().host_str(),
            Some("169.254.169.254" | "127.0.0.1" | "localhost" | "[::1]")
        );
        let client = if direct { &self.direct } else { &self.http };
        let mut req = client.request(method, request.url().as_str());
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
        let src = source(&c, "https://management.azure.com", IMDS_ENDPOINT).unwrap();
        let d = format!("{c:?} {src:?}");
        assert!(!d.contains("hunter2"), "{d}");
    }
}
