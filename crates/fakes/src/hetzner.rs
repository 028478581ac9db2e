//! The fake Hetzner Cloud API (see the crate documentation). Not built yet.
