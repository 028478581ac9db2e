//! The audit trail: `keeper.audit_events`, append-only. Each registry write and each step run records
//! one event, in the same transaction as the change it describes where there is one, so that a change
//! without its event never commits. Payloads are masked ([`crate::mask::mask_json`]) before they are
//! written: never a plain token.
//!
//! Events: `provider.created`, `provider.deleted`, `profile.created`, `profile.deleted`, and
//! `cloud.provisioned` for every run of a `core.cloud` step, whatever its outcome.

use deadpool_postgres::GenericClient;
use serde_json::Value;

use crate::error::{Error, Result};
use crate::mask::masked;

/// The event every `core.cloud` step writes.
pub const CLOUD_PROVISIONED: &str = "cloud.provisioned";

/// Writes event `event` with `payload` (masked first) through `client` (a transaction, usually).
pub async fn record<C: GenericClient>(
    client: &C,
    event: &str,
    actor: &str,
    outcome: &str,
    payload: &Value,
) -> Result<()> {
    let payload = masked(payload);
    let sql =
        "INSERT INTO keeper.audit_events (event, actor, outcome, payload) VALUES ($1, $2, $3, $4)";
    client
        .execute(sql, &[&event, &actor, &outcome, &payload])
        .await
        .map_err(|e| Error::audit(&Error::db(event, &e)))?;
    Ok(())
}
