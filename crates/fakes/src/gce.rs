//! The fake Compute Engine API (see the crate documentation). Not built yet.
