//! The audit trail: `keeper.audit_events`, append-only. Each registry write and each step run records
//! one event, in the same transaction as the change it describes where there is one, so that a change
//! without its event never commits. Payloads are masked ([`crate::mask::mask_json`]) before they are
//! written: never a plain token.
//!
//! Events: `provider.created`, `provider.deleted`, `profile.created`, `profile.deleted`, and
//! `cloud.provisioned` for every run of a `core.cloud` step, whatever its outcome.

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use serde::Serialize;
use serde_json::Value;

use crate::error::{Error, Result};
use crate::mask::masked;

/// The event every `core.cloud` step writes.
pub const CLOUD_PROVISIONED: &str = "cloud.provisioned";

/// An event as read back.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Event {
    /// Its sequence number.
    pub id: i64,
    /// When it was written.
    pub at: DateTime<Utc>,
    /// What happened (`provider.created`, `cloud.provisioned`, ...).
    pub event: String,
    /// Who did it (`api:<name>` for the REST API, `cli` for the command line).
    pub actor: String,
    /// `succeeded`, `failed` or `refused`.
    pub outcome: String,
    /// The facts, masked.
    pub payload: Value,
}

/// Writes event `event` with `payload` (masked first) through `client` (a transaction, usually).
pub async fn record<C: GenericClient>(
    client: &C,
    event: &str,
    actor: &str,
    outcome: &str,
    payload: &Value,
) -> Result<()> {
    let payload = masked(payload);
    client
        .execute(
            "INSERT INTO keeper.audit_events (event, actor, outcome, payload) VALUES ($1, $2, $3, $4)",
            &[&event, &actor, &outcome, &payload],
        )
        .await
        .map_err(|e| Error::audit(&Error::db(event, &e)))?;
    Ok(())
}

/// The events named `event` (every event when `None`), oldest first.
pub async fn events<C: GenericClient>(client: &C, event: Option<&str>) -> Result<Vec<Event>> {
    let rows = client
        .query(
            "SELECT id, at, event, actor, outcome, payload FROM keeper.audit_events
             WHERE $1::text IS NULL OR event = $1 ORDER BY id",
            &[&event],
        )
        .await
        .map_err(|e| Error::db("read audit events", &e))?;
    Ok(rows
        .iter()
        .map(|r| Event {
            id: r.get(0),
            at: r.get(1),
            event: r.get(2),
            actor: r.get(3),
            outcome: r.get(4),
            payload: r.get(5),
        })
        .collect())
}
