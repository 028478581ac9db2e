//! What the plugin's tests share: the programs under test.
#![allow(dead_code)]

/// `soul-cloud-fake`, as Cargo built it for these tests.
pub const FAKE: &str = env!("CARGO_BIN_EXE_soul-cloud-fake");

/// `soul-cloud-hetzner`, as Cargo built it for these tests.
pub const HETZNER: &str = env!("CARGO_BIN_EXE_soul-cloud-hetzner");

/// `soul-cloud-azure`, as Cargo built it for these tests.
pub const AZURE: &str = env!("CARGO_BIN_EXE_soul-cloud-azure");

/// `soul-cloud-gce`, as Cargo built it for these tests.
pub const GCE: &str = env!("CARGO_BIN_EXE_soul-cloud-gce");

/// `soul-cloud-ec2`, as Cargo built it for these tests.
pub const EC2: &str = env!("CARGO_BIN_EXE_soul-cloud-ec2");
