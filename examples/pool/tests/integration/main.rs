//! orca-pool's integration tests: one test binary, a module per subject (the command line, replicas on PostgreSQL).

// The scaler's test support (its PostgreSQL test databases).
#[path = "../../../../crates/scaler/tests/integration/support/mod.rs"]
mod support;

mod cli;
mod replicas;
