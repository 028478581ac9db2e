//! `core.cloud.destroyed`: destroy `vm_ids` at the provider; only after every destroy succeeded, one
//! transaction moves the given `sids` in `souls` to `destroyed`, their active `soul_seeds` to
//! `orphaned`, their bootstrap tokens to `burned`, the journal's rows of those VMs to `destroyed`, and
//! writes the audit event with the counters. A failed destroy leaves the registries untouched (the host
//! still lives at the provider); the destroys stop at the first failure.
//!
//! The caller holds the sid <-> vm_id pairing. keeper checks what it can before any cloud call: every
//! given SID must name a soul of this provider whose VM is among `vm_ids`, and the cascade moves only
//! such souls, so a wrong pairing is refused rather than cascaded onto another host.

use serde_json::{json, Value};

use super::params::DestroyParams;
use super::{Keeper, Run};
use crate::audit::{self, CLOUD_PROVISIONED};
use crate::error::{from_orca, Error, Result};
use crate::registry::CloudProvider;

impl Keeper {
    pub(crate) async fn destroyed(&self, mut run: Run, params: &Value, actor: &str) -> Run {
        let p = match DestroyParams::parse(params) {
            Ok(p) => p,
            Err(e) => return run.refuse(e),
        };
        run.fact("provider", json!(p.provider));
        run.fact("vm_ids", json!(p.vm_ids));
        run.fact("sids", json!(p.sids));
        let row = match self.provider_row(&p.provider).await {
            Ok(r) => r,
            Err(e) => return run.refuse(e),
        };
        if let Err(e) = self.check_pairing(&row, &p).await {
            return run.refuse(e);
        }
        let cloud = match self.cloud(&row).await {
            Ok(c) => c,
            Err(e) => return run.refuse(e),
        };
        let mut destroyed = Vec::new();
        for (i, id) in p.vm_ids.iter().enumerate() {
            match cloud.delete(id).await {
                Ok(_) => {
                    tracing::info!(step_id = %run.step_id, vm_id = %id, "VM destroyed");
                    destroyed.push(id.clone());
                }
                Err(e) => {
                    let mut err = from_orca(&e);
                    err.message = format!(
                        "destroying VM {id} failed: {}; the registries are untouched",
                        err.message
                    );
                    run.fact("changed", json!(!destroyed.is_empty()));
                    run.fact("destroyed", json!(destroyed));
                    run.fact("failed", json!([id]));
                    run.fact("not_attempted", json!(p.vm_ids[i + 1..]));
                    run.fact(
                        "counters",
                        json!({"vms_destroyed": destroyed.len(), "souls_destroyed": 0, "seeds_orphaned": 0, "bootstrap_burned": 0}),
                    );
                    return run.fail(err);
                }
            }
        }
        match self.cascade(&run, &row, &p, actor).await {
            Ok(counters) => {
                run.audited = true;
                run.output = Some(json!({
                    "action": "destroyed",
                    "changed": true,
                    "count": p.vm_ids.len(),
                    "vm_ids": p.vm_ids,
                    "sids": p.sids,
                    "counters": counters,
                }));
                run
            }
            Err(e) => {
                run.fact("changed", json!(true));
                run.fact("destroyed", json!(destroyed));
                run.fact(
                    "note",
                    json!("the VMs are destroyed at the provider but the registries are not updated: run the same step again (destroying a VM that is gone succeeds)"),
                );
                run.fail(e)
            }
        }
    }

    async fn check_pairing(&self, row: &CloudProvider, p: &DestroyParams) -> Result<()> {
        if p.sids.is_empty() {
            return Ok(());
        }
        let client = self.pool.get().await?;
        let rows = client
            .query(
                "SELECT sid FROM keeper.souls WHERE sid = ANY($1) AND provider = $2 AND vm_id = ANY($3)",
                &[&p.sids, &row.name, &p.vm_ids],
            )
            .await
            .map_err(|e| Error::db("read souls", &e))?;
        let known: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
        for (i, sid) in p.sids.iter().enumerate() {
            if !known.contains(sid) {
                return Err(Error::invalid(
                    format!("sids[{i}]"),
                    format!(
                        "no soul {sid} of provider {} on one of the given vm_ids: the sid <-> vm_id pairing is wrong, nothing was destroyed",
                        row.name
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The registry cascade and the audit event, in one transaction; answers the counters.
    async fn cascade(
        &self,
        run: &Run,
        row: &CloudProvider,
        p: &DestroyParams,
        actor: &str,
    ) -> Result<Value> {
        let mut client = self.pool.get().await?;
        let tx = client
            .transaction()
            .await
            .map_err(|e| Error::db("begin", &e))?;
        let db = |what: &'static str| move |e: tokio_postgres::Error| Error::db(what, &e);
        let souls: Vec<i64> = tx
            .query(
                "SELECT id FROM keeper.souls WHERE sid = ANY($1) AND provider = $2 AND vm_id = ANY($3)
                 AND status <> 'destroyed' ORDER BY id FOR UPDATE",
                &[&p.sids, &row.name, &p.vm_ids],
            )
            .await
            .map_err(db("lock souls"))?
            .iter()
            .map(|r| r.get(0))
            .collect();
        let souls_destroyed = tx
            .execute(
                "UPDATE keeper.souls SET status = 'destroyed', destroyed_at = now(), updated_at = now()
                 WHERE id = ANY($1)",
                &[&souls],
            )
            .await
            .map_err(db("destroy souls"))?;
        let seeds_orphaned = tx
            .execute(
                "UPDATE keeper.soul_seeds SET status = 'orphaned', updated_at = now()
                 WHERE soul_id = ANY($1) AND status = 'active'",
                &[&souls],
            )
            .await
            .map_err(db("orphan soul seeds"))?;
        let bootstrap_burned = tx
            .execute(
                "UPDATE keeper.bootstrap_tokens SET status = 'burned', burned_at = now()
                 WHERE soul_id = ANY($1) AND status <> 'burned'",
                &[&souls],
            )
            .await
            .map_err(db("burn bootstrap tokens"))?;
        let journal = tx
            .execute(
                "UPDATE keeper.cloud_vms SET state = 'destroyed', detail = 'destroyed by core.cloud.destroyed', updated_at = now()
                 WHERE provider = $1 AND vm_id = ANY($2) AND state IN ('made', 'recorded', 'kept')",
                &[&row.name, &p.vm_ids],
            )
            .await
            .map_err(db("journal"))?;
        let counters = json!({
            "vms_destroyed": p.vm_ids.len(),
            "souls_destroyed": souls_destroyed,
            "seeds_orphaned": seeds_orphaned,
            "bootstrap_burned": bootstrap_burned,
            "journal_destroyed": journal,
        });
        let mut payload = run.audit_payload();
        payload["counters"] = counters.clone();
        audit::record(&tx, CLOUD_PROVISIONED, actor, "succeeded", &payload).await?;
        tx.commit().await.map_err(db("commit the cascade"))?;
        Ok(counters)
    }
}
