//! stado on orca's Azure driver: the driver's settings from the profile's bindings and the
//! environment's credential, and where the driver looks for a credential.
//!
//! Every setting is named by the driver's typed key ([`ConfigKey`]), never by a copy of its name.

use orca::azure::ConfigKey;
use orca::kit::ClientKey;

use crate::profile::Profile;

/// Each profile binding and the driver's setting it gives; the first [`REQUIRED`] are the compute
/// bindings a cloud host on Azure is addressed with, in the order they are reported.
pub const BINDINGS: [(&str, ConfigKey); 10] = [
    ("azure.subscription_id", ConfigKey::SubscriptionId),
    ("azure.resource_group", ConfigKey::ResourceGroup),
    ("azure.vnet", ConfigKey::Vnet),
    ("azure.subnet", ConfigKey::Subnet),
    ("azure.image_urn", ConfigKey::Image),
    ("azure.vm_username", ConfigKey::AdminUser),
    ("azure.endpoint", ConfigKey::Endpoint),
    ("azure.prices_endpoint", ConfigKey::PricesEndpoint),
    ("azure.billing_account", ConfigKey::BillingAccount),
    ("azure.billing_profile", ConfigKey::BillingProfile),
];

/// How many of [`BINDINGS`], from the first, a profile must declare.
pub const REQUIRED: usize = 6;

/// The Azure driver's settings for `profile`'s bindings, with the credential settings
/// ([`ConfigKey::CREDENTIAL`], taken from the environment only, never from the profile: they are
/// secrets, or point at them) and the client settings every orca driver takes (timeouts, poll
/// interval, retry budget) that `env` holds.
pub fn settings(profile: &Profile, env: impl Fn(&str) -> Option<String>) -> orca::Settings {
    let mut s = orca::Settings::new();
    for (binding, key) in BINDINGS {
        if let Some(v) = profile.get(binding) {
            s.insert(key.as_str(), v);
        }
    }
    let from_env = ConfigKey::CREDENTIAL
        .iter()
        .map(|k| k.as_str())
        .chain(ClientKey::ALL.iter().map(|k| k.as_str()));
    for key in from_env {
        if let Some(v) = env(key).filter(|v| !v.is_empty()) {
            s.insert(key, v);
        }
    }
    s
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bindings_map_onto_the_azure_drivers_keys_and_credentials_come_from_the_environment() {
        let mut p = Profile::default();
        p.set("azure.subscription_id", "sub-1").unwrap();
        p.set("azure.vm_username", "stado").unwrap();
        p.set(
            "azure.image_urn",
            "Canonical:ubuntu-24_04-lts:server:latest",
        )
        .unwrap();
        let env = |k: &str| (k == "AZURE_CLIENT_SECRET").then(|| "hunter2".to_string());
        let s = settings(&p, env);
        assert_eq!(s.get(ConfigKey::SubscriptionId.as_str()), Some("sub-1"));
        assert_eq!(s.get(ConfigKey::AdminUser.as_str()), Some("stado"));
        assert_eq!(
            s.get(ConfigKey::Image.as_str()),
            Some("Canonical:ubuntu-24_04-lts:server:latest")
        );
        assert_eq!(s.get(ConfigKey::ClientSecret.as_str()), Some("hunter2"));
        assert!(!format!("{s:?}").contains("hunter2"));
    }
}
