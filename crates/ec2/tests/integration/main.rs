//! orca-ec2's integration tests: one test binary, a module per subject (conformance, behaviour, traces, ...).

mod behaviour;
mod common;
mod conformance;
mod consistency;
mod listing;
mod live;
mod named;
mod reference;
mod traces;
