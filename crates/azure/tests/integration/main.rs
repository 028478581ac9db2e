//! orca-azure's integration tests: one test binary, a module per subject (conformance, behaviour, requests, traces, ...).

mod behaviour;
mod common;
mod conformance;
mod extensions;
mod live;
mod locks;
mod login_proxy;
mod named;
mod polls;
mod proxy;
mod public_ip;
mod real_cloud;
mod requests;
mod traces;
