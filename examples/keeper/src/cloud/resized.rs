//! `core.cloud.resized`: change the machine type of `vm_ids`. The driver decides whether a stop and
//! start is needed and reports `caused_downtime` per VM; `souls` is not touched. A driver without the
//! resize capability answers `resize.unsupported` before any call. The resizes stop at the first
//! failure; the output says which VMs were resized before it.

use serde_json::{json, Value};

use super::params::ResizeParams;
use super::{Keeper, Run};
use crate::error::{from_orca, Error};

impl Keeper {
    pub(crate) async fn resized(&self, mut run: Run, params: &Value, _actor: &str) -> Run {
        let p = match ResizeParams::parse(params) {
            Ok(p) => p,
            Err(e) => return run.refuse(e),
        };
        run.add_facts(json!({
            "provider": p.provider,
            "vm_ids": p.vm_ids,
            "sids": [],
            "machine_type": p.machine_type,
        }));
        let row = match self.provider_row(&p.provider).await {
            Ok(r) => r,
            Err(e) => return run.refuse(e),
        };
        let cloud = match self.cloud(&row).await {
            Ok(c) => c,
            Err(e) => return run.refuse(e),
        };
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
        let mut downtime = 0;
        for id in &p.vm_ids {
            let before = match cloud.machine(id).await {
                Ok(Some(m)) => m.machine_type,
                Ok(None) => {
                    return self.resize_failed(
                        run,
                        hosts,
                        downtime,
                        Error::new(
                            404,
                            "cloud.not_found",
                            format!("VM {id} does not exist at provider {}", row.name),
                        ),
                    )
                }
                Err(e) => {
                    return self.resize_failed(run, hosts, downtime, from_orca(&e));
                }
            };
            match cloud.resize(id, &p.machine_type).await {
                Ok(r) => {
                    tracing::info!(step_id = %run.step_id, vm_id = %id, caused_downtime = r.caused_downtime, "VM resized");
                    downtime += usize::from(r.caused_downtime);
                    hosts.push(json!({
                        "vm_id": id,
                        "previous_machine_type": before,
                        "machine_type": r.machine.machine_type,
                        "caused_downtime": r.caused_downtime,
                    }));
                }
                Err(e) => {
                    let mut err = from_orca(&e);
                    err.message = format!("resizing VM {id} failed: {}", err.message);
                    return self.resize_failed(run, hosts, downtime, err);
                }
            }
        }
        // The failure output, should the audit event fail, says the same.
        let changed = resize_facts(&mut run, &hosts, downtime);
        run.output = Some(json!({
            "action": "resized",
            "changed": changed,
            "count": hosts.len(),
            "vm_ids": p.vm_ids,
            "hosts": hosts,
        }));
        run
    }

    fn resize_failed(&self, mut run: Run, hosts: Vec<Value>, downtime: usize, e: Error) -> Run {
        resize_facts(&mut run, &hosts, downtime);
        run.fail(e)
    }
}

/// Says the resizes done (`hosts`) in `run`'s facts; answers whether a VM of them changed type.
fn resize_facts(run: &mut Run, hosts: &[Value], downtime: usize) -> bool {
    let changed = hosts
        .iter()
        .any(|h| h["previous_machine_type"] != h["machine_type"]);
    run.add_facts(json!({
        "changed": changed,
        "counters": {"resized": hosts.len(), "caused_downtime": downtime},
        "resized": hosts,
    }));
    changed
}
