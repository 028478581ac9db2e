//! Fleet keys and host keys: ed25519, in OpenSSH's formats.
//!
//! A fleet key is what stado logs in to one host with: its private half is written owner-only (0600)
//! in the home's `keys/` folder and never printed or logged; its public half goes into the host's
//! `authorized_keys` (for a cloud host: through the machine spec). A cloud host's *host* key is
//! minted by stado too and given to the host through cloud-init, so that the key stado pins at
//! enrolment is known before the first connection (no trust on first use).

use std::path::{Path, PathBuf};

use ssh_key::rand_core::OsRng;
use ssh_key::{Algorithm, HashAlg, LineEnding, PrivateKey};

use crate::error::Failure;
use crate::files::write_new;
use crate::home::Home;

/// A fleet key as stored: where its halves are, and the public line. Serialized as a report shows
/// it: the private half's `path` (its content is never shown), `public_key` and `fingerprint`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct FleetKey {
    /// The private half (0600).
    #[serde(rename = "path", serialize_with = "shown")]
    pub private: PathBuf,
    /// The public half.
    #[serde(skip)]
    pub public: PathBuf,
    /// The public key, one OpenSSH line.
    #[serde(rename = "public_key")]
    pub public_line: String,
    /// Its SHA-256 fingerprint.
    pub fingerprint: String,
}

/// `path` as a report shows it: as `Path::display` does, so that no path is refused.
fn shown<S: serde::Serializer>(path: &Path, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&path.display())
}

/// A freshly minted ed25519 key pair held in memory. `Debug` shows the public half only.
pub struct KeyPair {
    private: PrivateKey,
}

impl std::fmt::Debug for KeyPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyPair")
            .field("public", &self.public_line())
            .finish_non_exhaustive()
    }
}

impl KeyPair {
    /// A new ed25519 key pair with `comment`.
    pub fn generate(comment: &str) -> Result<KeyPair, Failure> {
        let mut private = PrivateKey::random(&mut OsRng, Algorithm::Ed25519)
            .map_err(|e| Failure::new(format!("could not mint an ed25519 key: {e}")))?;
        private.set_comment(comment);
        Ok(KeyPair { private })
    }

    /// The public half, one OpenSSH line (`ssh-ed25519 AAAA... comment`).
    pub fn public_line(&self) -> String {
        self.private.public_key().to_openssh().unwrap_or_default()
    }

    /// The public half without its comment (`ssh-ed25519 AAAA...`), as known_hosts holds it.
    pub fn public_key_only(&self) -> String {
        let line = self.public_line();
        line.split_whitespace()
            .take(2)
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Its SHA-256 fingerprint (`SHA256:...`).
    pub fn fingerprint(&self) -> String {
        self.private
            .public_key()
            .fingerprint(HashAlg::Sha256)
            .to_string()
    }

    /// The private half in OpenSSH's format. A secret: write it to a 0600 file or into user data,
    /// never to output.
    pub fn private_openssh(&self) -> Result<zeroize::Zeroizing<String>, Failure> {
        self.private
            .to_openssh(LineEnding::LF)
            .map_err(|e| Failure::new(format!("could not encode an ed25519 key: {e}")))
    }
}

/// Mints target `name`'s fleet key as `stado fleet key generate` does: ed25519, the private half in
/// `keys/<name>` (0600), the public half in `keys/<name>.pub`. A key of that name is never replaced:
/// when either half exists, nothing is written and the refusal names it.
pub fn generate_fleet_key(home: &Home, name: &str) -> Result<FleetKey, Failure> {
    refuse_held(home, name, false)?;
    let pair = KeyPair::generate(&format!("stado-fleet-{name}"))?;
    let private = home.fleet_key(name);
    let public = home.fleet_key_pub(name);
    if !write_new(&private, pair.private_openssh()?.as_bytes(), 0o600)? {
        return Err(key_held(name, &[private]));
    }
    let public_line = pair.public_line();
    let written = match write_new(&public, format!("{public_line}\n").as_bytes(), 0o644) {
        Ok(true) => Ok(()),
        Ok(false) => Err(key_held(name, std::slice::from_ref(&public))),
        Err(e) => Err(e),
    };
    if let Err(e) = written {
        // The private half is this call's own: it goes again, and the other public half stays.
        let _ = std::fs::remove_file(&private);
        return Err(e);
    }
    Ok(FleetKey {
        private,
        public,
        public_line,
        fingerprint: pair.fingerprint(),
    })
}

/// Refuses target `name` when a key file of it exists ([`key_held`] names them): its fleet key's
/// halves and, with `pinned`, its pinned host key.
pub fn refuse_held(home: &Home, name: &str, pinned: bool) -> Result<(), Failure> {
    let mut paths = vec![home.fleet_key(name), home.fleet_key_pub(name)];
    if pinned {
        paths.push(home.pinned_host_key(name));
    }
    paths.retain(|p| p.symlink_metadata().is_ok());
    if paths.is_empty() {
        return Ok(());
    }
    Err(key_held(name, &paths))
}

/// The refusal of a name whose key files exist (`files`): a key stado did not mint in this command
/// belongs to someone's target, and is never replaced or removed.
pub fn key_held(name: &str, files: &[PathBuf]) -> Failure {
    let files: Vec<String> = files.iter().map(|p| p.display().to_string()).collect();
    Failure::refused(format!(
        "target {name} has a key already ({}); stado mints keys only for a new target and never replaces one: choose another name, or remove them if they are left over",
        files.join(", ")
    ))
}

/// Removes target `name`'s fleet key and pinned host key; the paths that could not be removed.
pub fn remove_host_files(home: &Home, name: &str) -> Vec<String> {
    remove_files(&[
        home.fleet_key(name),
        home.fleet_key_pub(name),
        home.pinned_host_key(name),
    ])
}

/// Removes each of `paths` (one already gone is fine); the paths that could not be removed.
pub fn remove_files(paths: &[PathBuf]) -> Vec<String> {
    paths
        .iter()
        .filter_map(|p| Some((p, std::fs::remove_file(p).err()?)))
        .filter(|(_, e)| e.kind() != std::io::ErrorKind::NotFound)
        .map(|(p, e)| format!("{}: {e}", p.display()))
        .collect()
}

/// Pins `host_key` (`ssh-ed25519 AAAA...`) for target `name`: a known_hosts file of one line under
/// the target's name (stado connects with `HostKeyAlias=<name>`). A key pinned already is never
/// replaced: the refusal names it.
pub fn pin_host_key(home: &Home, name: &str, host_key: &str) -> Result<PathBuf, Failure> {
    let path = home.pinned_host_key(name);
    if !write_new(&path, format!("{name} {host_key}\n").as_bytes(), 0o600)? {
        return Err(key_held(name, &[path]));
    }
    Ok(path)
}

/// The public line of the key whose private half is at `private` (its `.pub` beside it).
pub fn public_line_of(private: &Path) -> Option<String> {
    let mut p = private.as_os_str().to_os_string();
    p.push(".pub");
    std::fs::read_to_string(PathBuf::from(p))
        .ok()
        .map(|s| s.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fleet_key_is_ed25519_with_an_owner_only_private_half() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::open(dir.path()).unwrap();
        let k = generate_fleet_key(&home, "h1").unwrap();
        assert!(
            k.public_line
                .starts_with("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5"),
            "{}",
            k.public_line
        );
        assert!(k.public_line.ends_with(" stado-fleet-h1"));
        let text = std::fs::read_to_string(&k.private).unwrap();
        assert!(text.starts_with("-----BEGIN OPENSSH PRIVATE KEY-----"));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&k.private).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600);
        }
        let parsed = PrivateKey::from_openssh(&text).unwrap();
        assert_eq!(parsed.public_key().to_openssh().unwrap(), k.public_line);
        assert_eq!(public_line_of(&k.private).unwrap(), k.public_line);
        // OpenSSH itself reads it, when it is installed here.
        if let Ok(out) = std::process::Command::new("ssh-keygen")
            .arg("-y")
            .arg("-f")
            .arg(&k.private)
            .output()
        {
            let derived = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(k.public_line.starts_with(derived.trim()), "{derived}");
        }
        let other = generate_fleet_key(&home, "h2").unwrap();
        assert_ne!(other.public_line, k.public_line);
        assert!(remove_host_files(&home, "h1").is_empty());
        assert!(!k.private.exists() && !k.public.exists());
    }

    #[test]
    fn debug_never_shows_the_private_half() {
        let pair = KeyPair::generate("x").unwrap();
        let secret = pair.private_openssh().unwrap();
        let body: String = secret.lines().nth(1).unwrap().to_string();
        let d = format!("{pair:?}");
        assert!(!d.contains(&body), "{d}");
        assert!(d.contains("ssh-ed25519"));
    }
}
