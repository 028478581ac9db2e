//! Tokens for Resource Manager: the small [`TokenSource`] trait, a static token ([`StaticToken`], for tests
//! and for a token minted elsewhere) and [`IdentityToken`], backed by azure_identity 1.x (client secret,
//! workload identity, managed identity, Azure CLI).
//!
//! [`Credential::Auto`] picks, in this order: a client secret when `AZURE_CLIENT_SECRET` is given;
//! workload identity when `AZURE_FEDERATED_TOKEN_FILE` is (with `AZURE_TENANT_ID` and
//! `AZURE_CLIENT_ID`, as Kubernetes sets them); managed identity when `IDENTITY_ENDPOINT` or
//! `MSI_ENDPOINT` is (App Service, Arc, Cloud Shell); otherwise, at the first token, managed identity
//! when Azure's instance metadata service answers as itself ([`auto_choice`]: on an Azure VM no
//! variable says so) and gives a token, else the Azure CLI (also on a VM without an identity).
//!
//! The automatic choice reads the managed identity's token from the metadata service itself
//! (`ImdsToken`, at the endpoint it probed), so that the probe and the token come from the same place,
//! asking for the user-assigned identity `AZURE_CLIENT_ID` names when it is set (`client_id`).
//!
//! azure_identity's token requests go through this crate's own `azure_core::http::HttpClient`, a
//! private transport over the kit's HTTP client ([`orca_machines::kit::http_client`]: the settings'
//! `ORCA_CONNECT_TIMEOUT` and `ORCA_REQUEST_TIMEOUT`, the orca user agent, no redirects), so the
//! crate builds one HTTP stack (azure_core's default would add reqwest 0.13 with its own TLS). A
//! request to this machine ([`orca_machines::kit::is_loopback`]) or to the instance metadata service
//! never goes through the environment's proxy. Tokens are [`SecretString`]s: never printed, never in
//! an error.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use azure_core::credentials::TokenCredential;
use azure_core::http::headers::{HeaderName, HeaderValue, Headers};
use azure_core::http::{
    AsyncRawResponse, Body, ClientOptions, HttpClient, Method, Request, Transport,
};
use orca_machines::kit::{self, ClientOptions as KitOptions};
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

/// azure_identity's options: its requests through `login`, and `orca-azure` first in their user
/// agent (azure_core sets the header of each request itself, as `<application id>
/// azsdk-rust-identity/<version> (...)`, over the kit client's own).
fn client_options(login: &LoginTransport) -> ClientOptions {
    ClientOptions {
        transport: Some(Transport::new(Arc::new(login.clone()))),
        user_agent: azure_core::http::UserAgentOptions {
            application_id: Some(format!("orca-{}", crate::KIND)),
        },
        ..ClientOptions::default()
    }
}

/// Where the instance metadata service answers on an Azure VM.
pub const IMDS_ENDPOINT: &str = "http://169.254.169.254";
/// The instance metadata service's link-local address.
const IMDS_ADDRESS: &str = "169.254.169.254";

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

/// Whether an answer of the token endpoint to a request without the `Metadata` header is the
/// Azure instance metadata service's own: 400 with its OAuth-style error body (`{"error":
/// "invalid_request", "error_description": "Required metadata header not specified"}`), or the token
/// endpoint's JSON (`access_token`, `token_type`). Other metadata services (Compute Engine's, EC2's)
/// and any other server at that address answer otherwise.
fn is_azure_imds_answer(status: u16, body: &[u8]) -> bool {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) else {
        return false;
    };
    let text = |k: &str| {
        v.get(k)
            .and_then(|x| x.as_str())
            .is_some_and(|s| !s.is_empty())
    };
    match status {
        400 => text("error") && text("error_description"),
        200 => text("access_token") && text("token_type"),
        _ => false,
    }
}

/// Probes the instance metadata service at `imds_endpoint` (on an Azure VM: `http://169.254.169.254`)
/// the way Azure's own SDKs do: a token request without the `Metadata` header, which the service
/// refuses with 400 at once. Only the Azure service's own answer (400 with its OAuth-style error
/// body `{"error", "error_description"}`, or the token JSON) within a second means it is there (managed identity); no answer, or anyone else's, means it is not (the
/// Azure CLI).
///
/// The probe has its own short timeouts (800 ms to connect, a second in all), whatever the settings
/// say: off Azure nothing answers at that address, and the choice must not wait for a request
/// timeout.
pub async fn auto_choice(imds_endpoint: &str) -> AutoChoice {
    let Ok(http) = kit::http_client(
        "azure",
        kit_endpoint(imds_endpoint),
        &KitOptions::default(),
        std::time::Duration::from_millis(800),
        Some(std::time::Duration::from_secs(1)),
    ) else {
        return AutoChoice::AzureCli;
    };
    let url = format!(
        "{}/metadata/identity/oauth2/token?api-version=2018-02-01&resource=https%3A%2F%2Fmanagement.azure.com%2F",
        imds_endpoint.trim_end_matches('/')
    );
    let Ok(rsp) = http.get(url).send().await else {
        return AutoChoice::AzureCli;
    };
    let status = rsp.status().as_u16();
    match rsp.bytes().await {
        Ok(body) if is_azure_imds_answer(status, &body) => AutoChoice::ManagedIdentity,
        _ => AutoChoice::AzureCli,
    }
}

/// A managed identity's token from the instance metadata service at an endpoint (on an Azure VM
/// `http://169.254.169.254`): `GET /metadata/identity/oauth2/token` with `Metadata: true`, cached
/// until five minutes before it expires.
struct ImdsToken {
    http: reqwest::Client,
    url: String,
    cached: tokio::sync::Mutex<Option<(SecretString, std::time::Instant)>>,
}

impl std::fmt::Debug for ImdsToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ImdsToken")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl ImdsToken {
    /// A source for `scope` (`https://management.azure.com/.default`) at `imds_endpoint`, for the
    /// user-assigned identity `client_id` when given (the service's `client_id` parameter: with
    /// several user-assigned identities and no system-assigned one it refuses to choose).
    fn new(
        imds_endpoint: &str,
        scope: &str,
        client_id: Option<&str>,
        login: &LoginTransport,
    ) -> ImdsToken {
        let resource = format!(
            "{}/",
            scope.trim_end_matches("/.default").trim_end_matches('/')
        );
        let resource: String = url::form_urlencoded::byte_serialize(resource.as_bytes()).collect();
        let http = login.client_for(imds_endpoint).clone();
        let mut url = format!(
            "{}/metadata/identity/oauth2/token?api-version=2018-02-01&resource={resource}",
            imds_endpoint.trim_end_matches('/')
        );
        if let Some(c) = client_id.map(str::trim).filter(|c| !c.is_empty()) {
            let c: String = url::form_urlencoded::byte_serialize(c.as_bytes()).collect();
            url.push_str(&format!("&client_id={c}"));
        }
        ImdsToken {
            http,
            url,
            cached: tokio::sync::Mutex::new(None),
        }
    }

    /// One token request; the error names the service's own words (never a token).
    async fn fetch(&self) -> Result<(SecretString, std::time::Instant)> {
        let failed = |why: String| {
            Error::unauthenticated(format!(
                "managed identity (instance metadata service): {why}"
            ))
        };
        let rsp = self
            .http
            .get(&self.url)
            .header("Metadata", "true")
            .send()
            .await
            .map_err(|e| failed(format!("no answer ({})", e.without_url())))?;
        let status = rsp.status().as_u16();
        let body: serde_json::Value = rsp.json().await.map_err(|e| {
            failed(format!(
                "HTTP {status}, an unreadable answer ({})",
                e.without_url()
            ))
        })?;
        let text = |k: &str| match body.get(k) {
            Some(serde_json::Value::String(s)) => Some(s.clone()),
            Some(serde_json::Value::Number(n)) => Some(n.to_string()),
            _ => None,
        };
        if status != 200 {
            return Err(failed(format!(
                "HTTP {status}: {}: {}",
                text("error").unwrap_or_default(),
                text("error_description").unwrap_or_default()
            )));
        }
        let Some(token) = text("access_token").filter(|t| !t.is_empty()) else {
            return Err(failed("the answer holds no access token".into()));
        };
        let now_epoch = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let lifetime = text("expires_on")
            .and_then(|e| e.parse::<u64>().ok())
            .map(|on| on.saturating_sub(now_epoch))
            .or_else(|| text("expires_in").and_then(|e| e.parse::<u64>().ok()))
            .unwrap_or(300);
        let fresh_for = std::time::Duration::from_secs(lifetime.saturating_sub(300));
        Ok((
            SecretString::from(token),
            std::time::Instant::now() + fresh_for,
        ))
    }
}

#[async_trait]
impl TokenSource for ImdsToken {
    async fn token(&self) -> Result<SecretString> {
        let mut cached = self.cached.lock().await;
        if let Some((t, until)) = cached.as_ref() {
            if std::time::Instant::now() < *until {
                return Ok(t.clone());
            }
        }
        let (t, until) = self.fetch().await?;
        *cached = Some((t.clone(), until));
        Ok(t)
    }
}

/// [`Credential::Auto`] after the settings named nothing: managed identity when Azure's instance
/// metadata service answers and gives this machine's identity a token; otherwise (no service,
/// another service, or no identity) the Azure CLI. Chosen at the first token that works, and kept.
struct AutoToken {
    imds_endpoint: String,
    scope: String,
    /// `AZURE_CLIENT_ID`: the user-assigned identity to ask the metadata service for.
    client_id: Option<String>,
    login: LoginTransport,
    cli: Arc<dyn TokenSource>,
    chosen: tokio::sync::OnceCell<(AutoChoice, Arc<dyn TokenSource>)>,
}

impl std::fmt::Debug for AutoToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AutoToken")
            .field("chosen", &self.chosen.get().map(|c| c.0))
            .finish_non_exhaustive()
    }
}

impl AutoToken {
    /// The automatic choice for `scope`, probing `imds_endpoint` (asking it for the user-assigned
    /// identity `client_id` when given, through `login`), with `cli` as the fallback.
    fn new(
        imds_endpoint: &str,
        scope: &str,
        client_id: Option<&str>,
        login: LoginTransport,
        cli: Arc<dyn TokenSource>,
    ) -> AutoToken {
        AutoToken {
            imds_endpoint: imds_endpoint.to_string(),
            scope: scope.to_string(),
            client_id: client_id.map(str::to_string),
            login,
            cli,
            chosen: tokio::sync::OnceCell::new(),
        }
    }

    /// The source that gives a token now, its kind, and that first token.
    async fn choose(&self) -> Result<(AutoChoice, Arc<dyn TokenSource>, SecretString)> {
        let mut managed_failed = None;
        if auto_choice(&self.imds_endpoint).await == AutoChoice::ManagedIdentity {
            let mi: Arc<dyn TokenSource> = Arc::new(ImdsToken::new(
                &self.imds_endpoint,
                &self.scope,
                self.client_id.as_deref(),
                &self.login,
            ));
            match mi.token().await {
                Ok(t) => {
                    tracing::debug!("azure credential chosen: managed identity");
                    return Ok((AutoChoice::ManagedIdentity, mi, t));
                }
                Err(e) => {
                    tracing::info!(error = %e, "managed identity gave no token; trying the Azure CLI");
                    managed_failed = Some(e);
                }
            }
        }
        match self.cli.token().await {
            Ok(t) => {
                tracing::debug!("azure credential chosen: Azure CLI");
                Ok((AutoChoice::AzureCli, self.cli.clone(), t))
            }
            Err(e) => Err(match managed_failed {
                Some(mi) => e.prefixed(&format!("{mi}; then the Azure CLI")),
                None => e,
            }),
        }
    }
}

#[async_trait]
impl TokenSource for AutoToken {
    async fn token(&self) -> Result<SecretString> {
        if let Some((_, source)) = self.chosen.get() {
            return source.token().await;
        }
        // Not chosen yet (or nothing worked last time): probe again. Two first calls at once may
        // both probe; the first choice made is kept.
        let (choice, source, token) = self.choose().await?;
        let _ = self.chosen.set((choice, source));
        Ok(token)
    }
}

/// The token source for `credential`, for Resource Manager at `arm_endpoint`; `Auto` probes the
/// metadata service at `imds_endpoint` at its first token, and asks it for the user-assigned
/// identity `imds_client_id` (`AZURE_CLIENT_ID`) when given. Token requests use the kit's HTTP
/// client with `client`'s timeouts.
pub(crate) fn source(
    credential: &Credential,
    arm_endpoint: &str,
    imds_endpoint: &str,
    imds_client_id: Option<&str>,
    client: &KitOptions,
) -> Result<Arc<dyn TokenSource>> {
    let scope = if arm_endpoint.starts_with("https://") {
        format!("{arm_endpoint}/.default")
    } else {
        "https://management.azure.com/.default".to_string()
    };
    match credential {
        Credential::Static(t) => Ok(Arc::new(StaticToken::new(t.clone()))),
        Credential::Custom(c) => Ok(c.clone()),
        Credential::Auto => {
            let login = LoginTransport::new(client)?;
            Ok(Arc::new(AutoToken::new(
                imds_endpoint,
                &scope,
                imds_client_id,
                login.clone(),
                identity(&Credential::AzureCli, &scope, &login)?,
            )))
        }
        other => identity(other, &scope, &LoginTransport::new(client)?),
    }
}

/// An azure_identity credential for `credential`, its token requests through `login`.
fn identity(
    credential: &Credential,
    scope: &str,
    login: &LoginTransport,
) -> Result<Arc<dyn TokenSource>> {
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
                client_options: client_options(login),
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
                    client_options: client_options(login),
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
                client_options: client_options(login),
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

/// Whether `url` is never reached through the environment's proxy: this machine
/// ([`kit::is_loopback`]) or the instance metadata service's link-local address, which only this VM
/// reaches.
fn never_proxied(url: &str) -> bool {
    kit::is_loopback(url) || url::Url::parse(url).is_ok_and(|u| u.host_str() == Some(IMDS_ADDRESS))
}

/// The endpoint the kit builds a client for to reach `url`: the kit leaves out the proxy for a
/// loopback endpoint only, so a URL never to be proxied ([`never_proxied`]) is built for as this
/// machine.
fn kit_endpoint(url: &str) -> &str {
    if never_proxied(url) {
        "http://127.0.0.1"
    } else {
        url
    }
}

/// azure_core's `HttpClient` over the kit's HTTP client (reqwest 0.12): how azure_identity reaches
/// the login endpoints and the managed identity's token endpoint. Private: a caller sets its
/// timeouts through the driver's client settings.
#[derive(Debug, Clone)]
pub(crate) struct LoginTransport {
    /// Through the environment's proxy, if any (the login endpoints).
    http: reqwest::Client,
    /// Never through a proxy ([`never_proxied`]).
    direct: reqwest::Client,
}

impl LoginTransport {
    /// The kit's clients with `options`' timeouts (else 20 s to connect, 60 s in all).
    pub(crate) fn new(options: &KitOptions) -> Result<Self> {
        let build = |endpoint: &str| {
            kit::http_client(
                "azure",
                endpoint,
                options,
                std::time::Duration::from_secs(20),
                Some(std::time::Duration::from_secs(60)),
            )
        };
        Ok(LoginTransport {
            http: build("https://login.microsoftonline.com")?,
            direct: build(kit_endpoint(IMDS_ENDPOINT))?,
        })
    }

    /// The client that reaches `url`.
    fn client_for(&self, url: &str) -> &reqwest::Client {
        if never_proxied(url) {
            &self.direct
        } else {
            &self.http
        }
    }
}

#[async_trait]
impl HttpClient for LoginTransport {
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
        let client = self.client_for(request.url().as_str());
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

    /// A server on 127.0.0.1 that answers every request with `status`, `content_type` and `body`:
    /// a metadata service that is not Azure's, or any other server at that address.
    async fn answering(status: u16, content_type: &str, body: &str) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let answer = format!(
            "HTTP/1.1 {status} X\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        tokio::spawn(async move {
            while let Ok((mut c, _)) = listener.accept().await {
                let mut buf = [0u8; 4096];
                let _ = c.read(&mut buf).await;
                let _ = c.write_all(answer.as_bytes()).await;
            }
        });
        format!("http://{addr}")
    }

    #[tokio::test]
    async fn only_azures_own_metadata_answer_means_managed_identity() {
        // Azure's instance metadata service refuses a token request without `Metadata: true` with
        // its own OAuth-style error body.
        let azure = answering(
            400,
            "application/json; charset=utf-8",
            r#"{"error":"invalid_request","error_description":"Required metadata header not specified"}"#,
        )
        .await;
        assert_eq!(auto_choice(&azure).await, AutoChoice::ManagedIdentity);
        // Other metadata services and servers at that address answer too, but not as Azure's.
        for (status, ty, body) in [
            // Compute Engine's metadata server without its flavour header.
            (
                403,
                "text/html; charset=UTF-8",
                "Missing Metadata-Flavor:Google header.",
            ),
            // EC2's instance metadata service (IMDSv2 without a token).
            (401, "text/plain", ""),
            (
                404,
                "text/html",
                "<html><body>404 - Not Found</body></html>",
            ),
            (200, "text/html", "<html><body>Welcome</body></html>"),
            (400, "application/json", r#"{"message":"Bad Request"}"#),
        ] {
            let other = answering(status, ty, body).await;
            assert_eq!(
                auto_choice(&other).await,
                AutoChoice::AzureCli,
                "{status} {body}"
            );
        }
    }

    /// A token source that counts its calls and answers `token`.
    #[derive(Debug)]
    struct Counting(std::sync::atomic::AtomicU32, &'static str);

    #[async_trait]
    impl TokenSource for Counting {
        async fn token(&self) -> Result<SecretString> {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(SecretString::from(self.1.to_string()))
        }
    }

    #[tokio::test]
    async fn a_managed_identity_that_gives_no_token_falls_back_to_the_cli() {
        // An Azure VM without an identity: the metadata service answers the probe as Azure's, and
        // refuses the token ("Identity not found").
        let f = orca_fakes::azure::FakeAzure::start().await.unwrap();
        let cli = Arc::new(Counting(Default::default(), "cli-token"));
        let auto = AutoToken::new(
            &f.url(),
            "https://management.azure.com/.default",
            None,
            LoginTransport::new(&KitOptions::default()).unwrap(),
            cli.clone(),
        );
        assert_eq!(auto.token().await.unwrap().expose_secret(), "cli-token");
        assert_eq!(auto.token().await.unwrap().expose_secret(), "cli-token");
        assert_eq!(cli.0.load(std::sync::atomic::Ordering::SeqCst), 2);
        assert!(format!("{auto:?}").contains("AzureCli"), "{auto:?}");
        // A VM with an identity: its token, and the CLI is never asked.
        f.set_managed_identity(true);
        let cli = Arc::new(Counting(Default::default(), "cli-token"));
        let auto = AutoToken::new(
            &f.url(),
            "https://management.azure.com/.default",
            None,
            LoginTransport::new(&KitOptions::default()).unwrap(),
            cli.clone(),
        );
        assert_eq!(
            auto.token().await.unwrap().expose_secret(),
            orca_fakes::azure::TOKEN
        );
        assert_eq!(cli.0.load(std::sync::atomic::Ordering::SeqCst), 0);
        assert!(!format!("{auto:?}").contains(orca_fakes::azure::TOKEN));
    }

    #[test]
    fn client_secret_credential_debug_hides_the_secret() {
        let c = Credential::ClientSecret {
            tenant_id: "72f988bf-86f1-41af-91ab-2d7cd011db47".into(),
            client_id: "c".into(),
            secret: SecretString::from("hunter2-xyz".to_string()),
        };
        let src = source(
            &c,
            "https://management.azure.com",
            IMDS_ENDPOINT,
            None,
            &KitOptions::default(),
        )
        .unwrap();
        let d = format!("{c:?} {src:?}");
        assert!(!d.contains("hunter2"), "{d}");
    }
}
