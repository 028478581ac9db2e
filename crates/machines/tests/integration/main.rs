//! orca-machines' integration tests: one test binary, a module per subject (conformance, fs, http, ...).

mod conformance;
mod fs;
mod http;
mod http_proxy;
mod memory_lock;
