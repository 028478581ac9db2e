//! keeper's integration tests: one test binary, a module per subject (created, destroyed, resized, the API, the command line, ...).

mod api;
mod audit;
mod cli;
mod concurrency;
mod created;
mod destroyed;
mod hetzner;
mod migrations;
mod plugins;
mod pool_setting;
mod privileges;
mod readme;
mod reconcile;
mod resized;
mod support;
