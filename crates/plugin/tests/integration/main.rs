//! orca-plugin's integration tests: one test binary, a module per subject (the conformance suite through soul-cloud-fake and soul-cloud-hetzner, faults).

mod common;
mod fake_conformance;
mod faults;
mod hetzner_conformance;
