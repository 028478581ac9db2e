//! The registry writes of a `created` batch: its plan (indexes and journal rows, before any cloud
//! call), its record (souls, token hashes, journal, audit event, in one transaction) once every VM
//! is made, or its roll-back when the step fails.

use std::sync::Arc;

use serde_json::{json, Value};

use super::super::journal::{move_row, JournalUpdate};
use super::super::locks::LockSession;
use super::super::{Keeper, Named, Run};
use super::{Made, Planned};
use crate::audit::{self, CLOUD_PROVISIONED};
use crate::db::begin;
use crate::error::{db_error, Error, Result};
use crate::registry::CloudProvider;
use crate::tokens::PlainToken;

/// SQLSTATE of a unique violation.
const UNIQUE_VIOLATION: &str = "23505";

impl Keeper {
    /// Takes the batch's indexes and journals every VM as `requested`, in one transaction.
    pub(super) async fn plan(
        &self,
        step_id: &str,
        row: &CloudProvider,
        base: &str,
        count: u32,
    ) -> Result<Vec<Planned>> {
        let mut client = self.pool.get().await?;
        let tx = begin(&mut client).await?;
        let count = i64::from(count);
        let sql = "INSERT INTO keeper.name_counters (base, last_index) VALUES ($1, $2)
                 ON CONFLICT (base) DO UPDATE SET last_index = keeper.name_counters.last_index + EXCLUDED.last_index
                 RETURNING last_index";
        let last: i64 = tx
            .query_one(sql, &[&base, &count])
            .await
            .map_err(db_error("take indexes"))?
            .get(0);
        let mut planned = Vec::new();
        for index in (last - count + 1)..=last {
            let name = format!("{base}-{index}");
            let predicted_fqdn = row.fqdn_suffix.as_ref().map(|s| format!("{name}.{s}"));
            let sql = "INSERT INTO keeper.cloud_vms (step_id, provider, name, pool, state) VALUES ($1, $2, $3, $4, 'requested') RETURNING id";
            let journal_id: i64 = tx
                .query_one(sql, &[&step_id, &row.name, &name, &self.settings.pool])
                .await
                .map_err(db_error("journal"))?
                .get(0);
            planned.push(Planned {
                index,
                name,
                predicted_fqdn,
                token: PlainToken::generate()?,
                journal_id,
            });
        }
        tx.commit().await.map_err(db_error("commit plan"))?;
        Ok(planned)
    }

    /// Writes the souls, token hashes, journal and audit event of a batch made whole: one
    /// transaction, in the session that holds the step's lock `lock`. A step whose lock was lost
    /// (its session ended: a server restart, a timeout, an operator) may have had its VMs destroyed
    /// by a reconciler that took it for a stopped step: it records nothing (`registry.lock_lost`),
    /// and each row moves only from `made`, so a row another writer moved fails the batch too.
    pub(super) async fn record(
        &self,
        run: &Run,
        row: &CloudProvider,
        made: &[Made],
        actor: &str,
        (session, key): (&mut LockSession, &str),
    ) -> Result<()> {
        let lost = |why: String| {
            Error::lock_lost(format!(
                "the step's lock was lost before its batch was recorded ({why}): a reconciler may have taken the step for a stopped one and destroyed its VMs, so nothing is recorded and the VMs this step made are destroyed"
            ))
        };
        let tx = session
            .transaction_holding(key)
            .await
            .map_err(|e| lost(e.message))?;
        for m in made {
            let sid = &m.machine.fqdn;
            let soul_id: i64 = match tx
                .query_one(
                    "INSERT INTO keeper.souls (sid, status, provider, vm_id, primary_ip, attributes, created_by)
                     VALUES ($1, 'pending', $2, $3, $4, $5, NULL) RETURNING id",
                    &[sid, &row.name, &m.machine.id, &m.primary_ip(), &m.attributes()],
                )
                .await
            {
                Ok(r) => r.get(0),
                Err(e) if Error::sqlstate(&e) == Some(UNIQUE_VIOLATION) => {
                    return Err(Error::conflict(
                        "sid.conflict",
                        format!(
                            "the provider gave VM {} the FQDN {sid}, which a soul that is not destroyed has already",
                            m.machine.id
                        ),
                    ))
                }
                Err(e) => return Err(Error::db("insert soul", &e)),
            };
            let hash = m.planned.token.hash().to_vec();
            let sql = "INSERT INTO keeper.bootstrap_tokens (soul_id, token_sha256, status) VALUES ($1, $2, 'issued')";
            tx.execute(sql, &[&soul_id, &hash])
                .await
                .map_err(db_error("insert bootstrap token"))?;
            let recorded = JournalUpdate {
                sid: Some(sid.clone()),
                detail: None,
                ..JournalUpdate::new(m.planned.journal_id, "recorded", "").from("made")
            };
            if !move_row(&tx, &recorded).await? {
                return Err(lost(format!(
                    "the journal row of VM {} is no longer made",
                    m.machine.id
                )));
            }
        }
        let n = made.len();
        let payload = run.audit_payload_with(json!({
            "vm_ids": vm_ids(made),
            "sids": made.iter().map(|m| &m.machine.fqdn).collect::<Vec<_>>(),
            "counters": {"requested": n, "made": n, "souls_pending": n, "bootstrap_issued": n},
        }));
        audit::record(&tx, CLOUD_PROVISIONED, actor, "succeeded", &payload).await?;
        // Its id tells, from another session, whether the server committed when the answer to the
        // COMMIT is lost.
        let xact: String = tx
            .query_one("SELECT pg_current_xact_id()::text", &[])
            .await
            .map_err(db_error("read the batch's transaction id"))?
            .get(0);
        match tx.commit().await {
            Ok(()) => Ok(()),
            // The server answered: it did not commit.
            Err(e) if e.as_db_error().is_some() => Err(Error::db("commit the batch", &e)),
            Err(e) => self.commit_outcome(&xact, &e).await,
        }
    }

    /// The outcome of a batch's COMMIT whose answer never came (`e`: the connection ended), read
    /// by its transaction's id `xact` from another session: committed, the batch is recorded;
    /// aborted, `e`, and the batch is rolled back. While the server cannot tell (the database out
    /// of reach), `registry.commit_unknown`: nothing is rolled back, and the journal's rows tell
    /// the reconciler what to do (a row still `made` is destroyed, a `recorded` one stays).
    async fn commit_outcome(&self, xact: &str, e: &tokio_postgres::Error) -> Result<()> {
        const ASKS: u32 = 50;
        let mut last = String::from("the outcome was not read");
        for _ in 0..ASKS {
            let status = match self.pool.get().await {
                Ok(client) => client
                    .query_one("SELECT pg_xact_status($1::text::xid8)", &[&xact])
                    .await
                    .map(|r| r.get::<_, Option<String>>(0))
                    .map_err(|e| crate::error::describe_db(&e)),
                Err(e) => Err(e.message),
            };
            match status {
                Ok(Some(s)) if s == "committed" => return Ok(()),
                Ok(Some(s)) if s == "aborted" => return Err(Error::db("commit the batch", e)),
                // In progress: the server has not yet ended the session's transaction.
                Ok(_) => last = "the transaction was still in progress".into(),
                Err(why) => last = why,
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        Err(Error::commit_unknown(format!(
            "commit the batch: {}; whether the server committed it is unknown ({last}): nothing is rolled back, and the reconciler resolves the batch's journal rows",
            crate::error::describe_db(e)
        )))
    }

    /// Destroys what this step made; what cannot be destroyed is kept in the journal.
    pub(super) async fn roll_back(
        &self,
        mut run: Run,
        row: &CloudProvider,
        cloud: &Arc<dyn orca::Provider>,
        made: Vec<Made>,
        unresolved: usize,
        error: Error,
    ) -> Run {
        let mut destroyed = Vec::new();
        let mut recorded = Vec::new();
        let mut updates = Vec::new();
        for m in &made {
            let id = &m.machine.id;
            match cloud.delete(id).await {
                Ok(_) => {
                    updates.push(JournalUpdate::new(
                        m.planned.journal_id,
                        "destroyed",
                        format!("destroyed: the step failed ({})", error.code),
                    ));
                    tracing::info!(step_id = %run.step_id, vm_id = %id, "VM destroyed: the step failed");
                    destroyed.push(id.clone());
                }
                Err(err) => {
                    let mut e = err.to_string();
                    if !err.left().is_empty() {
                        // The VM may be gone with pieces beside it, which its id no longer reaches.
                        let named = Some(Named::of(&m.machine));
                        let said = self.remove_left_at_once(row, cloud, id, named).await;
                        e = format!("{e}; {said}");
                    }
                    let sid = (!m.machine.fqdn.is_empty()).then(|| m.machine.fqdn.clone());
                    updates.push(
                        JournalUpdate::new(
                            m.planned.journal_id,
                            "kept",
                            format!(
                                "kept: the step failed ({}) and destroying it failed too ({}); destroy it with core.cloud.destroyed",
                                error.code, e
                            ),
                        )
                        .sid(sid),
                    );
                    tracing::error!(step_id = %run.step_id, vm_id = %id, provider = %row.name, error = %e, "VM could not be destroyed after the step failed");
                    recorded.push(json!({
                        "vm_id": id,
                        "name": m.machine.name,
                        "sid": m.machine.fqdn,
                        "destroy_error": e,
                    }));
                }
            }
        }
        // The journal of the roll-back: one transaction. When it fails, the rows stay `made` (with
        // their VM ids), which core.cloud.destroyed resolves.
        let journalled = self.journal_all(&updates).await;
        for r in &mut recorded {
            r["in"] = json!(if journalled.is_ok() {
                "keeper.cloud_vms (state kept)"
            } else {
                "nowhere as kept: the registry failed to mark it; this output and the log name it"
            });
        }
        if let Err(e) = journalled {
            tracing::warn!(step_id = %run.step_id, error = %e, "journal: the roll-back's rows stay made");
            let this = format!(
                "the journal rows of this roll-back stay made: {}",
                e.message
            );
            // The rows of the VMs never asked for may have failed before: both are said.
            let said = match run.facts.get("journal_error").and_then(Value::as_str) {
                Some(before) => format!("{before}; {this}"),
                None => this,
            };
            run.fact("journal_error", json!(said));
        }
        let requested = run.facts.get("count").cloned().unwrap_or(json!(0));
        run.add_facts(json!({
            "changed": !recorded.is_empty() || !made.is_empty() || unresolved > 0,
            "made": vm_ids(&made),
            "destroyed": destroyed,
            "recorded": recorded,
            "vm_ids": vm_ids(&made),
            "sids": [],
            "counters": {
                "requested": requested,
                "made": made.len(), "souls_pending": 0, "bootstrap_issued": 0,
                "destroyed": destroyed.len(), "recorded_without_soul": recorded.len(),
                "unresolved": unresolved,
            },
        }));
        run.fail(error)
    }
}

/// The ids of the VMs `made`.
pub(super) fn vm_ids(made: &[Made]) -> Vec<&str> {
    made.iter().map(|m| m.machine.id.as_str()).collect()
}

pub(super) fn output(made: &[Made]) -> Value {
    let hosts: Vec<Value> = made
        .iter()
        .map(|m| {
            json!({
                "sid": m.machine.fqdn,
                "vm_id": m.machine.id,
                "primary_ip": m.primary_ip(),
                "attributes": m.attributes(),
                "bootstrap_token": m.planned.token.expose(),
            })
        })
        .collect();
    json!({
        "action": "created",
        "changed": true,
        "count": made.len(),
        "vm_ids": vm_ids(made),
        "hosts": hosts,
    })
}
