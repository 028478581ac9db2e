//! What stado needs to know of orca's Azure driver: where it looks for a credential.

use orca::azure::ConfigKey;

/// Where the Azure driver looks for a credential, in the order it tries them, in words a person acts
/// on (the driver's own error names only the last source it tried).
pub fn credential_sources() -> String {
    let (tenant, client) = (ConfigKey::TenantId, ConfigKey::ClientId);
    format!(
        "stado takes the Azure credential from its environment, trying in this order: {} (a bearer token); {} with {tenant} and {client} (a service principal); {} with {tenant} and {client} (a workload identity); a managed identity ({} or {}, else the metadata service of the Azure VM stado runs on); the Azure CLI (az login); {} picks one of them",
        ConfigKey::AccessToken,
        ConfigKey::ClientSecret,
        ConfigKey::FederatedTokenFile,
        ConfigKey::IdentityEndpoint,
        ConfigKey::MsiEndpoint,
        ConfigKey::Credential,
    )
}
