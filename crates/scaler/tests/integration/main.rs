//! orca-scaler's integration tests: one test binary, a module per subject (passes, recovery, records, writers, the stores, the fault campaign, ...).

mod campaign;
mod concurrency;
mod file_store;
mod formats;
mod journal;
mod leftovers;
mod metrics;
mod passes;
mod postgres;
mod records;
mod recovery;
mod reused_ids;
mod start_checks;
mod support;
mod writers;
