//! orca-suite: every driver through orca::of and orca::of_with against its emulator or fake; one test binary, a module per driver, and the facade.

mod azure;
mod ec2;
mod facade;
mod gce;
mod hetzner;
