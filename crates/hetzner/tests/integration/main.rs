//! orca-hetzner's integration tests: one test binary, a module per subject (conformance, behaviour, traces, ...).

mod actions;
mod behaviour;
mod common;
mod conformance;
mod live;
mod real_cloud;
mod reference;
mod traces;
