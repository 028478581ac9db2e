//! The metrics a scaler operator expects, in Prometheus' text format, with the `prometheus` crate.
//!
//! Every series carries the constant labels `kind`, `owner` and `pool`:
//! `orca_pool_size` (machines serving after the last pass; 0 on a standby, which does not list the
//! pool: read the pool's size from the replica whose `orca_pool_leader` is 1), `orca_pool_wanted`
//! (the target), `orca_pool_listed` (0 on a standby too), `orca_pool_created_total{how="made|adopted"}`,
//! `orca_pool_deleted_total{cause}` (`cause="leftovers"`: what a create left beside its machine,
//! removed by name), `orca_pool_failures_total{operation}` (`operation="delete_named"`: such a
//! clean-up that failed),
//! `orca_pool_no_stock_total{offering}`, `orca_pool_passes_total{role}`, `orca_pool_leader` (1 when
//! this replica acted in the last pass and still holds the lead: [`Metrics::lead_lost`] drops it),
//! `orca_pool_last_pass_timestamp_seconds`. The counters are exported at 0 from the start (the
//! no-stock counter per offering given to [`Metrics::with_offerings`]).
//!
//! Serving them is the program's: [`Metrics::render`] gives the text format (0.0.4).

use prometheus::{Encoder, Gauge, IntCounterVec, IntGauge, Opts, Registry, TextEncoder};

use crate::record::Key;
use crate::report::{Action, PassReport};
use crate::store::Role;

/// The scaler's metrics, in their own registry.
#[derive(Debug, Clone)]
pub struct Metrics {
    registry: Registry,
    size: IntGauge,
    wanted: IntGauge,
    listed: IntGauge,
    created: IntCounterVec,
    deleted: IntCounterVec,
    failures: IntCounterVec,
    no_stock: IntCounterVec,
    passes: IntCounterVec,
    leader: IntGauge,
    last_pass: Gauge,
}

impl Metrics {
    /// Metrics for `key`'s pool.
    pub fn new(key: &Key) -> Self {
        let labels = [
            ("kind".to_string(), key.kind.clone()),
            ("owner".to_string(), key.owner.clone()),
            ("pool".to_string(), key.pool.clone()),
        ]
        .into_iter()
        .collect();
        let registry = Registry::new_custom(None, Some(labels)).expect("constant labels are valid");
        let gauge = |n: &str, h: &str| {
            let g = IntGauge::with_opts(Opts::new(n, h)).expect("valid metric");
            registry.register(Box::new(g.clone())).expect("unique");
            g
        };
        // Every counter's series (label `l` of each of `values`) at 0 from the start: a rate over a
        // series that appears only at its first event misses that event.
        let counter = |n: &str, h: &str, l: &str, values: &[&str]| {
            let c = IntCounterVec::new(Opts::new(n, h), &[l]).expect("valid metric");
            registry.register(Box::new(c.clone())).expect("unique");
            for v in values {
                c.with_label_values(&[*v]);
            }
            c
        };
        let size = gauge(
            "orca_pool_size",
            "Machines of the pool serving after the last pass (0 on a standby).",
        );
        let wanted = gauge("orca_pool_wanted", "The pool's target size.");
        let listed = gauge(
            "orca_pool_listed",
            "Machines of the pool the cloud listed in the last pass (0 on a standby).",
        );
        let leader = gauge(
            "orca_pool_leader",
            "1 when this replica acted in the last pass, 0 on standby.",
        );
        let created = counter(
            "orca_pool_created_total",
            "Machines created (how: made, or adopted from an earlier attempt or by name).",
            "how",
            &["made", "adopted"],
        );
        let deleted = counter(
            "orca_pool_deleted_total",
            "Machines deleted, by cause (surplus, unknown, unhealthy, duplicate, recorded; leftovers: what a create left, removed by name).",
            "cause",
            &[
                "surplus",
                "unknown",
                "unhealthy",
                "duplicate",
                "recorded",
                "leftovers",
            ],
        );
        let failures = counter(
            "orca_pool_failures_total",
            "Failed cloud calls and passes stopped early, by operation.",
            "operation",
            &[
                "list",
                "read",
                "create",
                "delete",
                "delete_named",
                "conflict",
                "pass",
            ],
        );
        let no_stock = counter(
            "orca_pool_no_stock_total",
            "Creates answered with no stock, by offering.",
            "offering",
            &[],
        );
        let passes = counter(
            "orca_pool_passes_total",
            "Passes, by role.",
            "role",
            &["leader", "standby"],
        );
        let last_pass = Gauge::with_opts(Opts::new(
            "orca_pool_last_pass_timestamp_seconds",
            "When the last pass started (Unix time).",
        ))
        .expect("valid metric");
        registry
            .register(Box::new(last_pass.clone()))
            .expect("unique");
        Metrics {
            registry,
            size,
            wanted,
            listed,
            created,
            deleted,
            failures,
            no_stock,
            passes,
            leader,
            last_pass,
        }
    }

    /// The same metrics with the no-stock counter of each of `offerings` at 0.
    pub fn with_offerings(self, offerings: &[crate::Offering]) -> Self {
        for o in offerings {
            self.no_stock.with_label_values(&[o.to_string().as_str()]);
        }
        self
    }

    /// This replica no longer holds the lead ([`crate::Scaler::lead_lost`]): the leader gauge drops
    /// to 0 at once, not at the next pass.
    pub fn lead_lost(&self) {
        self.leader.set(0);
    }

    /// Counts what pass `r` did.
    pub fn observe(&self, r: &PassReport) {
        self.last_pass.set(r.at.timestamp() as f64);
        self.wanted.set(i64::try_from(r.size).unwrap_or(i64::MAX));
        match &r.role {
            Role::Leader => {
                self.leader.set(1);
                self.passes.with_label_values(&["leader"]).inc();
                self.size.set(i64::try_from(r.serving).unwrap_or(i64::MAX));
                self.listed.set(i64::try_from(r.listed).unwrap_or(i64::MAX));
            }
            Role::Standby { .. } => {
                // A standby neither lists nor counts the pool: it reports none rather than the
                // figures of the last pass it led (the leader's series are the pool's).
                self.leader.set(0);
                self.passes.with_label_values(&["standby"]).inc();
                self.size.set(0);
                self.listed.set(0);
            }
        }
        for a in &r.actions {
            match a {
                Action::Created { adopted, .. } => self
                    .created
                    .with_label_values(&[if *adopted { "adopted" } else { "made" }])
                    .inc(),
                Action::Adopted { .. } => self.created.with_label_values(&["adopted"]).inc(),
                Action::Deleted { cause, .. } => {
                    self.deleted.with_label_values(&[cause.as_str()]).inc()
                }
                Action::Cleaned { removed: true, .. } => {
                    self.deleted.with_label_values(&["leftovers"]).inc()
                }
                Action::Failed { operation, .. } => {
                    self.failures.with_label_values(&[operation.as_str()]).inc()
                }
                Action::Conflict { .. } => self.failures.with_label_values(&["conflict"]).inc(),
                Action::NoStock { offering, .. } => {
                    self.no_stock.with_label_values(&[offering.as_str()]).inc()
                }
                _ => {}
            }
        }
        if r.stopped.is_some() {
            self.failures.with_label_values(&["pass"]).inc();
        }
    }

    /// The metrics in Prometheus' text format.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut buf);
        String::from_utf8(buf).unwrap_or_default()
    }
}
