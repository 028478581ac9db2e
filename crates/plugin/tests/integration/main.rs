//! orca-plugin's integration tests: one test binary, a module per subject (the conformance suite through soul-cloud-fake, -hetzner, -azure, -gce and -ec2, faults, errors crossing, delete_named).

mod azure_conformance;
mod common;
mod ec2_conformance;
mod errors;
mod explicit;
mod fake_conformance;
mod faults;
mod gce_conformance;
mod hetzner_conformance;
mod named;
mod replies;
