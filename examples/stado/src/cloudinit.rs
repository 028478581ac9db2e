//! The cloud-init user data of a cloud host: the build toolchain, rustup in the account's home, the
//! run area, the host key stado pinned, and an sshd drop-in refusing passwords.
//!
//! The user data holds the host key's private half: it is a secret, never printed (orca's
//! `MachineSpec` hides it in `Debug`).

/// The packages cloud-init installs from the image's archive.
pub const PACKAGES: [&str; 12] = [
    "build-essential",
    "pkg-config",
    "libssl-dev",
    "clang",
    "cmake",
    "protobuf-compiler",
    "git",
    "rsync",
    "nodejs",
    "npm",
    "curl",
    "ca-certificates",
];

/// The sshd drop-in cloud-init writes.
///
/// Named `00-` on purpose: sshd includes `sshd_config.d/*.conf` in name order and keeps the *first*
/// value it reads for a keyword, so a later file cannot undo an earlier one. Ubuntu's cloud images
/// carry `50-cloud-init.conf` (which says `PasswordAuthentication yes` when the image allows
/// passwords); a drop-in sorting after it would lose to it. `00-stado.conf` is read first and wins.
pub const SSHD_DROP_IN: &str = "/etc/ssh/sshd_config.d/00-stado.conf";

/// The user data for a host whose account is `user`, presenting the host key `host_private` /
/// `host_public` (OpenSSH formats).
pub fn user_data(user: &str, host_private: &str, host_public: &str) -> String {
    let packages: String = PACKAGES.iter().map(|p| format!("  - {p}\n")).collect();
    let private: String = host_private.lines().map(|l| format!("    {l}\n")).collect();
    format!(
        "#cloud-config
package_update: true
packages:
{packages}ssh_pwauth: false
ssh_deletekeys: true
ssh_genkeytypes: []
ssh_keys:
  ed25519_private: |
{private}  ed25519_public: {host_public}
write_files:
  - path: {SSHD_DROP_IN}
    owner: root:root
    permissions: '0644'
    content: |
      # stado: keys only
      PasswordAuthentication no
      KbdInteractiveAuthentication no
      PermitRootLogin no
runcmd:
  - [sh, -c, 'systemctl reload ssh || systemctl reload sshd || true']
  - [sudo, -u, {user}, -H, sh, -c, 'curl --proto =https --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal --default-toolchain stable']
  - [sudo, -u, {user}, -H, sh, -c, 'mkdir -p \"$HOME/.stado/work/runs\"']
"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_toolchain_and_the_password_refusing_drop_in_are_there() {
        let u = user_data(
            "stado",
            "-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n-----END OPENSSH PRIVATE KEY-----",
            "ssh-ed25519 AAAAhost",
        );
        assert!(u.starts_with("#cloud-config\n"));
        for p in PACKAGES {
            assert!(u.contains(&format!("  - {p}\n")), "{p}");
        }
        assert!(u.contains("PasswordAuthentication no"));
        assert!(u.contains(SSHD_DROP_IN));
        assert!(u.contains("sudo, -u, stado, -H"));
        assert!(u.contains("rustup.rs"));
        assert!(
            u.contains("    abc\n"),
            "the host key's lines are indented under ed25519_private"
        );
        assert!(u.contains("ed25519_public: ssh-ed25519 AAAAhost"));
        assert!(u.len() < 16 * 1024);
    }

    #[test]
    fn the_drop_in_is_read_before_the_images_own_so_that_its_values_win() {
        // sshd keeps the first value it reads for a keyword and includes sshd_config.d/*.conf in
        // name order: a drop-in sorting after Ubuntu's 50-cloud-init.conf (which may say
        // `PasswordAuthentication yes`) would lose to it.
        let name = SSHD_DROP_IN.rsplit('/').next().unwrap();
        assert!(SSHD_DROP_IN.starts_with("/etc/ssh/sshd_config.d/"));
        assert!(name.ends_with(".conf"));
        for image_own in ["50-cloud-init.conf", "10-cloud-init.conf", "01-x.conf"] {
            assert!(name < image_own, "{name} sorts after {image_own}");
        }
    }
}
