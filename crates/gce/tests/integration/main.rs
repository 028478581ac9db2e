//! orca-gce's integration tests: one test binary, a module per subject (conformance, behaviour, delete by name, traces, live).

mod behaviour;
mod common;
mod conformance;
mod live;
mod named;
mod quota;
mod traces;
