//! shed's behaviour against orca's in-memory cloud: one test binary, a module per part of the README's
//! "Behaviour".

mod config;
mod firewall;
mod gce;
mod hostile;
mod http;
mod leftovers;
mod lifecycle;
mod names;
mod pass;
mod requests;
mod restart;
mod server;
mod soak;
mod support;
