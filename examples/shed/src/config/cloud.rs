//! What the server reads from its variables to reach the cloud and the VMs: the SSH client key
//! and the driver's settings (the Compute Engine variables mapped onto the driver's typed keys).

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use orca::gce::ConfigKey as GceKey;
use secrecy::SecretString;

use super::file::RemoteFile;
use super::resolve::Vars;
use super::{Problems, ProviderKind, Transport};

/// Transport `ssh`: the client key, from exactly one of its two variables (base64, or a path).
pub(super) fn ssh_key(
    r: &RemoteFile,
    transport: Transport,
    var: &Vars<'_>,
    p: &mut Problems,
) -> Option<SecretString> {
    if transport != Transport::Ssh {
        return None;
    }
    let ssh = r.ssh.clone().unwrap_or_default();
    let (key_env, b64) = var.named(&ssh.client_key_env, "SHED_REMOTE_SSH_KEY");
    let (file_env, path) = var.named(&ssh.client_key_file_env, "SHED_REMOTE_SSH_KEY_FILE");
    let key = |bytes: Vec<u8>| {
        looks_like_key(&bytes)
            .then(|| SecretString::from(String::from_utf8_lossy(&bytes).into_owned()))
    };
    match (b64, path) {
        (Some(_), Some(_)) => p.add(
            key_env.clone(),
            format!("set exactly one of {key_env} and {file_env}"),
        ),
        (None, None) => p.add(
            key_env.clone(),
            format!("not set: set {key_env} (base64 of the OpenSSH private key) or {file_env} (a path to it)"),
        ),
        (Some(b64), None) => match STANDARD.decode(b64.trim()).ok().and_then(key) {
            Some(k) => return Some(k),
            None => p.add(key_env, "not the base64 of an OpenSSH private key"),
        },
        (None, Some(path)) => match read_key_file(path.trim()) {
            Ok(bytes) => match key(bytes) {
                Some(k) => return Some(k),
                None => p.add(file_env, "the file is not an OpenSSH private key"),
            },
            Err(e) => p.add(file_env, format!("cannot read the file: {}", why_unread(&e))),
        },
    }
    None
}

/// The largest SSH key file read: far above any OpenSSH private key (an RSA key of 16384 bits is
/// about 12 KiB).
const MAX_KEY_FILE: u64 = 64 * 1024;

/// The bytes of the SSH key file at `path`: a regular file, never through a symbolic link, of at
/// most [`MAX_KEY_FILE`] bytes, and on Unix this user's and closed to others (as ssh itself asks
/// of a private key): a key another user may read is no longer this server's alone, and one they
/// may have written could be theirs.
fn read_key_file(path: &str) -> Result<Vec<u8>, orca::fs::FsError> {
    orca::fs::read_private(path, MAX_KEY_FILE, 0o077, "an SSH key file")
}

/// Why the key file was not read, in words that say what to do.
fn why_unread(e: &orca::fs::FsError) -> String {
    match e {
        orca::fs::FsError::NotPrivate { path, why } => format!(
            "{} is {why}: a private key's file must be this user's, readable by its owner only (chmod 600 it)",
            path.display()
        ),
        other => other.to_string(),
    }
}

fn looks_like_key(bytes: &[u8]) -> bool {
    let text = String::from_utf8_lossy(bytes);
    text.contains("-----BEGIN") && text.contains("PRIVATE KEY-----")
}

/// The driver settings the provider is made from, with the driver's own keys, and the zone VMs are
/// made in.
pub(super) fn cloud(
    r: &RemoteFile,
    provider: ProviderKind,
    var: &Vars<'_>,
    p: &mut Problems,
) -> (orca::Settings, String) {
    match provider {
        ProviderKind::Fake => {
            let mut settings = orca::Settings::new();
            if let Some(path) = var.get(orca::FAKE_STATE_ENV) {
                settings.insert(orca::FAKE_STATE_ENV, path);
            }
            (settings, "zone-a".to_string())
        }
        ProviderKind::Gce => gce_settings(r, var, p),
    }
}

/// The `gce:` block's variables mapped onto the Compute Engine driver's keys: project, zone,
/// network and subnet (each required), and exactly one credential source. A network or subnet of
/// another project is refused: the firewall check reads one project's rules.
fn gce_settings(r: &RemoteFile, var: &Vars<'_>, p: &mut Problems) -> (orca::Settings, String) {
    let g = r.gce.clone().unwrap_or_default();
    let mut settings = orca::Settings::new();
    for (configured, default, key) in [
        (&g.project_env, "SHED_GCE_PROJECT", GceKey::Project),
        (&g.zone_env, "SHED_GCE_ZONE", GceKey::Zone),
        (&g.network_env, "SHED_GCE_NETWORK", GceKey::Network),
        (&g.subnet_env, "SHED_GCE_SUBNET", GceKey::Subnet),
    ] {
        match var.named(configured, default) {
            (_, Some(v)) => settings.insert(key.as_str(), v.trim()),
            (name, None) => p.add(name, "not set (required for provider gce)"),
        }
    }
    let (cred, json) = var.named(&g.credentials_env, "GOOGLE_CREDENTIALS_BASE64");
    let (cred_file, path) = var.named(&g.credentials_file_env, "SHED_GCE_CREDENTIALS_FILE");
    match (json, path) {
        (Some(_), Some(_)) => p.add(
            cred.clone(),
            format!("set exactly one of {cred} and {cred_file}"),
        ),
        (None, None) => p.add(
            cred.clone(),
            format!("not set: set {cred} (base64 of the service account JSON key) or {cred_file} (a path to it)"),
        ),
        (Some(v), None) => settings.insert(GceKey::CredentialsBase64.as_str(), v.trim()),
        (None, Some(v)) => settings.insert(GceKey::CredentialsFile.as_str(), v.trim()),
    }
    if let Some(project) = settings.get(GceKey::Project.as_str()) {
        for (key, field) in [
            (GceKey::Network, "gce.network_env"),
            (GceKey::Subnet, "gce.subnet_env"),
        ] {
            if let Some(other) = settings
                .get(key.as_str())
                .and_then(|v| other_project(v, project))
            {
                p.add(
                    field,
                    format!("the network is in another project ({other}, a Shared VPC): the firewall check reads one project's rules, so the network and subnet must be in the sheds' project"),
                );
            }
        }
    }
    let zone = settings
        .get(GceKey::Zone.as_str())
        .unwrap_or("zone-a")
        .to_string();
    (settings, zone)
}

/// The project a network or subnet path names when it is not `project` (`projects/<p>/...`).
fn other_project(value: &str, project: &str) -> Option<String> {
    let parts: Vec<&str> = value.split('/').collect();
    parts
        .windows(2)
        .find(|w| w[0] == "projects")
        .map(|w| w[1].to_string())
        .filter(|p| p != project)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn other_projects_are_found_in_paths() {
        assert_eq!(other_project("shed-net", "p1"), None);
        assert_eq!(
            other_project("projects/p1/global/networks/shed-net", "p1"),
            None
        );
        assert_eq!(
            other_project("projects/host-proj/global/networks/shared", "p1").as_deref(),
            Some("host-proj")
        );
    }
}
