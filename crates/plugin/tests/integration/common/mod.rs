//! What the plugin's tests share: the programs under test.
#![allow(dead_code)]

/// `soul-cloud-fake`, as Cargo built it for these tests.
pub const FAKE: &str = env!("CARGO_BIN_EXE_soul-cloud-fake");

/// `soul-cloud-hetzner`, as Cargo built it for these tests.
pub const HETZNER: &str = env!("CARGO_BIN_EXE_soul-cloud-hetzner");
