//! Architectures, by Docker's names ([contract](crate::contract) 7).

use serde::{Deserialize, Serialize};

/// A CPU architecture by Docker's name: what an image manifest uses, so that a caller can tell whether
/// its image runs on a machine type before making one.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(into = "String", from = "String")]
pub enum Arch {
    /// `amd64` (x86-64).
    Amd64,
    /// `arm64` (AArch64).
    Arm64,
    /// Any other name, as the provider spelled it.
    Other(String),
}

impl Arch {
    /// Docker's name.
    pub fn as_str(&self) -> &str {
        match self {
            Arch::Amd64 => "amd64",
            Arch::Arm64 => "arm64",
            Arch::Other(s) => s,
        }
    }
}

impl std::fmt::Display for Arch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<String> for Arch {
    fn from(s: String) -> Self {
        docker_arch(&s)
    }
}

impl From<Arch> for String {
    fn from(a: Arch) -> Self {
        a.as_str().to_string()
    }
}

/// A provider's name for an architecture as Docker's: `x86`, `x86_64`, `x86-64`, `x64`, `amd64` (any case)
/// are [`Arch::Amd64`]; `arm`, `arm64`, `aarch64` (any case) are [`Arch::Arm64`]; others as they are.
///
/// ```
/// use orca_machines::{docker_arch, Arch};
/// assert_eq!(docker_arch("X86_64"), Arch::Amd64); // Compute Engine
/// assert_eq!(docker_arch("arm"), Arch::Arm64);    // Hetzner
/// assert_eq!(docker_arch("Arm64"), Arch::Arm64);  // Azure
/// assert_eq!(docker_arch("riscv64").to_string(), "riscv64");
/// ```
pub fn docker_arch(provider_arch: &str) -> Arch {
    match provider_arch.trim().to_ascii_lowercase().as_str() {
        "x86" | "x86_64" | "x86-64" | "x64" | "amd64" => Arch::Amd64,
        "arm" | "arm64" | "aarch64" => Arch::Arm64,
        _ => Arch::Other(provider_arch.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn spellings() {
        for s in ["x86", "x86_64", "X86_64", "amd64", "x64", "AMD64"] {
            assert_eq!(docker_arch(s), Arch::Amd64, "{s}");
        }
        for s in ["arm", "aarch64", "ARM64", "Arm64", "arm64"] {
            assert_eq!(docker_arch(s), Arch::Arm64, "{s}");
        }
        assert_eq!(docker_arch("s390x"), Arch::Other("s390x".into()));
    }

    #[test]
    fn serde_uses_docker_names() {
        assert_eq!(serde_json::to_string(&Arch::Arm64).unwrap(), "\"arm64\"");
        let a: Arch = serde_json::from_str("\"x86_64\"").unwrap();
        assert_eq!(a, Arch::Amd64);
    }

    proptest! {
        #[test]
        fn case_never_matters(s in "(x86|x86_64|amd64|arm|arm64|aarch64|x64)") {
            let upper = s.to_ascii_uppercase();
            prop_assert_eq!(docker_arch(&s), docker_arch(&upper));
        }

        #[test]
        fn known_names_are_fixed_points(s in "\\PC{0,12}") {
            // Docker's own names map to themselves, and mapping is idempotent.
            let once = docker_arch(&s);
            prop_assert_eq!(docker_arch(once.as_str()), once.clone());
            if matches!(once, Arch::Other(_)) {
                prop_assert_eq!(once.as_str(), s.as_str());
            }
        }
    }
}
