//! `core.cloud.resized`: change the machine type of `vm_ids`. The driver decides whether a stop and
//! start is needed and reports `caused_downtime` per VM; `souls` is not touched (the audit event
//! names the souls on the VMs in `sids`). A driver without the resize capability answers
//! `resize.unsupported` before any call. The resizes stop at the first failure; the output says
//! which VMs were resized before it, and the state the failed one is in, read again (a driver may
//! have stopped it before it failed).

use serde_json::{json, Value};

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
        let mut hosts = Vec::new();
        for (i, id) in p.vm_ids.iter().enumerate() {
            match self
                .resize_one(&*cloud, &run.step_id, &row, id, &p.machine_type)
                .await
            {
                Ok(host) => hosts.push(host),
                Err((mut e, before)) => {
                    // The driver may have stopped the VM before it failed: what it left is read
                    // again and said, rather than only the VMs resized before it.
                    let failed = left_by_failure(&*cloud, id, before.as_ref()).await;
                    if let Some(status) = failed["status"].as_str() {
                        e.message = format!("{}; VM {id} is now {status}", e.message);
                    }
                    resize_facts(&mut run, &hosts, Some(&failed));
                    run.add_facts(json!({
                        "failed": [failed],
                        "not_attempted": p.vm_ids[i + 1..],
                    }));
                    return run.fail(e);
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

    /// Resizes VM `id` of `row` to `machine_type`; answers its entry of the output's `hosts`, or
    /// the error with the VM as it was before, when it was read.
    async fn resize_one(
        &self,
        cloud: &dyn orca::Provider,
        step_id: &str,
        row: &CloudProvider,
        id: &str,
        machine_type: &str,
    ) -> std::result::Result<Value, (Error, Option<orca::Machine>)> {
        let before = cloud.machine(id).await.map_err(|e| (from_orca(&e), None))?;
        let before = before.ok_or_else(|| {
            let message = format!("VM {id} does not exist at provider {}", row.name);
            (Error::new(404, "cloud.not_found", message), None)
        })?;
        if let Err(e) = self.check_pool(row, id, &before, None).await {
            return Err((e, Some(before)));
        }
        let r = match cloud.resize(id, machine_type).await {
            Ok(r) => r,
            Err(e) => {
                let e = from_orca_saying(&e, |m| format!("resizing VM {id} failed: {m}"));
                return Err((e, Some(before)));
            }
        };
        tracing::info!(step_id = %step_id, vm_id = %id, caused_downtime = r.caused_downtime, "VM resized");
        Ok(json!({
            "vm_id": id,
            "previous_machine_type": before.machine_type,
            "machine_type": r.machine.machine_type,
            "caused_downtime": r.caused_downtime,
        }))
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
