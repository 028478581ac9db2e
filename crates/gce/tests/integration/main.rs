//! orca-gce's integration tests: one test binary, a module per subject (conformance, behaviour, traces, live).

mod behaviour;
mod common;
mod conformance;
mod live;
mod quota;
mod traces;
