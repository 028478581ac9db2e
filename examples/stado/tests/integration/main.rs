//! stado's integration tests: one test binary, a module per subject (the in-memory provider, Azure, the command line).

mod azure;
mod cli;
mod common;
mod memory;
