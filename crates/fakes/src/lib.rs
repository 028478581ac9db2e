//! Stateful fake cloud APIs on 127.0.0.1 for orca's tests and benchmarks: one module a cloud, each
//! faithful to that cloud's public API reference (shapes, pagination, asynchronous actions or
//! operations, label filters, error bodies and codes) and with fault injection on demand.
//!
//! Nothing here talks to any other address: every server binds 127.0.0.1 on a port the OS picks.
