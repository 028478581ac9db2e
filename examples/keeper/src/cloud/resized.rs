//! `core.cloud.resized`: change the machine type of `vm_ids`. The driver decides whether a stop and
//! start is needed and reports `caused_downtime` per VM; `souls` is not touched (the audit event
//! names the souls on the VMs in `sids`). A driver without the resize capability answers
//! `resize.unsupported` before any call. The resizes stop at the first failure; the output says
//! which VMs were resized before it, and the state the failed one is in, read again (a driver may
//! have stopped it before it failed).

use serde_json::{json, Value};

use super::journal::{move_resize, JournalUpdate};
use super::locks::{step_key, LockSession};
use super::params::ResizeParams;
use super::{Keeper, Run};
use crate::error::{db_error, from_orca, from_orca_saying, Error, Result};
use crate::registry::CloudProvider;

impl Keeper {
    pub(crate) async fn resized(&self, mut run: Run, params: &Value, _actor: &str) -> Run {
        let p = or_refuse!(run, ResizeParams::parse(params));
        run.add_facts(json!({
            "provider": p.provider,
            "vm_ids": p.vm_ids,
            "sids": [],
            "machine_type": p.machine_type,
        }));
        let row = or_refuse!(run, self.provider_row(&p.provider).await);
        // The audit event names the souls on these VMs, as a destroy's does; they stay as they are.
        let sids = or_refuse!(run, self.souls_on(&row, &p.vm_ids).await);
        run.fact("sids", json!(sids));
        let cloud = or_refuse!(run, self.cloud(&row).await);
        if !cloud.capabilities().resize {
            return run.refuse(Error::new(
                422,
                "resize.unsupported",
                format!(
                    "the {} driver of provider {} cannot resize VMs",
                    cloud.kind(),
                    row.name
                ),
            ));
        }
        // Held while this step runs: the reconciler leaves its resize journal's rows alone.
        let key = step_key(&run.step_id);
        let running = or_refuse!(run, LockSession::holding(&self.pool, &key).await);
        let run = self.resize_all(run, &p, &row, &*cloud).await;
        running.close().await;
        run
    }

    /// Resizes `p.vm_ids` one after the other, stopping at the first failure.
    async fn resize_all(
        &self,
        mut run: Run,
        p: &ResizeParams,
        row: &CloudProvider,
        cloud: &dyn orca::Provider,
    ) -> Run {
        let mut hosts = Vec::new();
        for (i, id) in p.vm_ids.iter().enumerate() {
            match self
                .resize_one(cloud, &run.step_id, row, id, &p.machine_type)
                .await
            {
                Ok(host) => hosts.push(host),
                Err(ResizeFailed {
                    mut error,
                    before,
                    journal_id,
                }) => {
                    // The driver may have stopped the VM before it failed: what it left is read
                    // again and said, rather than only the VMs resized before it.
                    let mut failed = left_by_failure(cloud, id, before.as_ref()).await;
                    if let Some(status) = failed["status"].as_str() {
                        error.message = format!("{}; VM {id} is now {status}", error.message);
                    }
                    if let Some(jid) = journal_id {
                        failed["journal"] = json!(self.journal_failed_resize(jid, &failed).await);
                    }
                    resize_facts(&mut run, &hosts, Some(&failed));
                    run.add_facts(json!({
                        "failed": [failed],
                        "not_attempted": p.vm_ids[i + 1..],
                    }));
                    return run.fail(error);
                }
            }
        }
        // The failure output, should the audit event fail, says the same.
        let changed = resize_facts(&mut run, &hosts, None);
        run.output = Some(json!({
            "action": "resized",
            "changed": changed,
            "count": hosts.len(),
            "vm_ids": p.vm_ids,
            "hosts": hosts,
        }));
        run
    }

    /// The SIDs of the souls of `row` on `vm_ids` that are not destroyed, sorted.
    async fn souls_on(&self, row: &CloudProvider, vm_ids: &[String]) -> Result<Vec<String>> {
        let client = self.pool.get().await?;
        let sql = "SELECT sid FROM keeper.souls WHERE provider = $1 AND vm_id = ANY($2)
                 AND status <> 'destroyed' ORDER BY sid";
        let rows = client
            .query(sql, &[&row.name, &vm_ids])
            .await
            .map_err(db_error("read souls"))?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    /// Resizes VM `id` of `row` to `machine_type`; answers its entry of the output's `hosts`. A
    /// running VM is journalled (`keeper.vm_resizes`, `resizing`) before the driver is asked, since
    /// the driver may stop it: a keeper stopped before the driver started it again leaves the row
    /// for the reconciler, which starts the VM. No row, no resize.
    async fn resize_one(
        &self,
        cloud: &dyn orca::Provider,
        step_id: &str,
        row: &CloudProvider,
        id: &str,
        machine_type: &str,
    ) -> std::result::Result<Value, ResizeFailed> {
        let failed = |error, before, journal_id| ResizeFailed {
            error,
            before,
            journal_id,
        };
        let before = cloud
            .machine(id)
            .await
            .map_err(|e| failed(from_orca(&e), None, None))?;
        let before = before.ok_or_else(|| {
            let message = format!("VM {id} does not exist at provider {}", row.name);
            failed(Error::new(404, "cloud.not_found", message), None, None)
        })?;
        if let Err(e) = self.check_pool(row, id, &before, None).await {
            return Err(failed(e, Some(before), None));
        }
        let journal_id = if before.status == orca::Status::Running {
            match self.journal_resize(step_id, row, id, machine_type).await {
                Ok(jid) => Some(jid),
                Err(e) => return Err(failed(e, Some(before), None)),
            }
        } else {
            None
        };
        let r = match cloud.resize(id, machine_type).await {
            Ok(r) => r,
            Err(e) => {
                let e = from_orca_saying(&e, |m| format!("resizing VM {id} failed: {m}"));
                return Err(failed(e, Some(before), journal_id));
            }
        };
        if let Some(jid) = journal_id {
            let done = JournalUpdate::new(jid, "done", "resized").from("resizing");
            if let Err(e) = self.journal_resize_move(done).await {
                // The VM is resized and running; the reconciler finds it so and closes the row.
                tracing::warn!(step_id, vm_id = %id, error = %e, "resize journal: the row stays resizing");
            }
        }
        tracing::info!(step_id = %step_id, vm_id = %id, caused_downtime = r.caused_downtime, "VM resized");
        Ok(json!({
            "vm_id": id,
            "previous_machine_type": before.machine_type,
            "machine_type": r.machine.machine_type,
            "caused_downtime": r.caused_downtime,
        }))
    }
}

/// A resize that failed: why, the VM as the step read it first (when it did), and its resize
/// journal row (when it wrote one).
struct ResizeFailed {
    error: Error,
    before: Option<orca::Machine>,
    journal_id: Option<i64>,
}

impl Keeper {
    /// Journals the resize of running VM `id` of `row` to `machine_type` by step `step_id` as
    /// `resizing`; answers the row's id.
    async fn journal_resize(
        &self,
        step_id: &str,
        row: &CloudProvider,
        id: &str,
        machine_type: &str,
    ) -> Result<i64> {
        let client = self.pool.get().await?;
        let sql = "INSERT INTO keeper.vm_resizes (step_id, provider, vm_id, machine_type, state)
                   VALUES ($1, $2, $3, $4, 'resizing') RETURNING id";
        let r = client
            .query_one(sql, &[&step_id, &row.name, &id, &machine_type])
            .await
            .map_err(db_error("journal the resize"))?;
        Ok(r.get(0))
    }

    async fn journal_resize_move(&self, u: JournalUpdate) -> Result<bool> {
        let client = self.pool.get().await?;
        move_resize(&client, &u).await
    }

    /// Closes the resize journal row `jid` of a failed resize that left the VM running (or gone);
    /// one left in any other state stays `resizing`, for the reconciler to start it. Answers where
    /// the output says the row is.
    async fn journal_failed_resize(&self, jid: i64, failed: &Value) -> String {
        let status = failed["status"].as_str().unwrap_or("unknown");
        let (state, said) = match status {
            "running" | "gone" => ("done", "keeper.vm_resizes (state done)".to_string()),
            _ => (
                "resizing",
                format!("keeper.vm_resizes (state resizing): the VM is {status}; keeper reconcile starts it"),
            ),
        };
        let u = JournalUpdate::new(jid, state, format!("the resize failed; the VM is {status}"))
            .from("resizing");
        match self.journal_resize_move(u).await {
            Ok(_) => said,
            Err(e) => format!(
                "keeper.vm_resizes (state resizing; its detail not written: {})",
                e.message
            ),
        }
    }
}

/// VM `id` as a failed resize left it, read again (`before`: as the step read it first): its
/// status and type, and whether the resize took it down (running before, not now).
async fn left_by_failure(
    cloud: &dyn orca::Provider,
    id: &str,
    before: Option<&orca::Machine>,
) -> Value {
    let mut v = json!({"vm_id": id});
    if let Some(b) = before {
        v["previous_status"] = json!(b.status.as_str());
        v["previous_machine_type"] = json!(b.machine_type);
    }
    match cloud.machine(id).await {
        Ok(Some(m)) => {
            let was_running = before.is_some_and(|b| b.status == orca::Status::Running);
            v["status"] = json!(m.status.as_str());
            v["machine_type"] = json!(m.machine_type);
            v["caused_downtime"] = json!(was_running && m.status != orca::Status::Running);
        }
        Ok(None) => v["status"] = json!("gone"),
        Err(e) => v["read_error"] = json!(from_orca(&e).message),
    }
    v
}

/// Says the resizes done (`hosts`), and the VM a failed one left (`failed`), in `run`'s facts;
/// answers whether a VM of them changed (its type, or the failed one's status or type).
fn resize_facts(run: &mut Run, hosts: &[Value], failed: Option<&Value>) -> bool {
    let failed_changed = failed.is_some_and(|f| {
        f.get("status").is_some()
            && (f["previous_status"] != f["status"]
                || f["previous_machine_type"] != f["machine_type"])
    });
    let changed = failed_changed
        || hosts
            .iter()
            .any(|h| h["previous_machine_type"] != h["machine_type"]);
    let downtime = hosts
        .iter()
        .chain(failed)
        .filter(|h| h["caused_downtime"] == true)
        .count();
    run.add_facts(json!({
        "changed": changed,
        "counters": {"resized": hosts.len(), "caused_downtime": downtime},
        "resized": hosts,
    }));
    changed
}
