//! Keeping records and the cloud in step: the periodic pass and, with `startup`, the reconciliation
//! of a server that starts (the README's "The periodic pass" and "Restarts").
//!
//! A pass runs the firewall check, lists the environment's VMs once, and corrects what differs for
//! sheds with no job in flight. It destroys a VM only for an acknowledged delete, a failed create, or a
//! create abandoned (labelled `creating` 15 minutes after the cloud made it, with no record); any other
//! VM it does not know is left alone. For a failed create or a delete whose VM does not stand, it lets
//! the shed's job remove by name what the create may have left beside one.

use std::collections::{BTreeMap, HashMap};

use orca::{Machine, Status as VmStatus};

use crate::backend::{Backend, State, ID_LABEL};
use crate::clock::{go_duration, since};
use crate::jobs::readable;
use crate::model::{CreateStage, DeleteMarker, Reason, Shed, Status};

mod orphan;
mod record;

fn is_on(m: &Machine) -> bool {
    matches!(m.status, VmStatus::Running | VmStatus::Starting)
}

/// The records or markers of `map` with no job in flight: what a pass may correct.
fn idle<T: Clone>(st: &State, map: &BTreeMap<String, T>) -> Vec<T> {
    map.iter()
        .filter(|(id, _)| !st.jobs.contains(*id))
        .map(|(_, v)| v.clone())
        .collect()
}

impl Backend {
    /// One pass over the cloud (with `startup`: the start-up reconciliation).
    pub async fn pass(&self, startup: bool) {
        let _serial = self.inner.pass_lock.lock().await;
        self.inner.firewall.check().await;
        let vms = match self
            .inner
            .provider
            .machines(&self.inner.cfg.environment)
            .await
        {
            Ok(v) => v,
            Err(e) => {
                self.log().warn(format!(
                    "remote: the environment's VMs could not be listed (nothing is changed; the next pass looks again): {e}"
                ));
                self.unreadable_pass(startup);
                self.bump();
                return;
            }
        };
        let labelled = |m: Machine| Some((m.labels.get(ID_LABEL)?.clone(), m));
        let by_id: HashMap<String, Machine> = vms.into_iter().filter_map(labelled).collect();
        let (records, markers) = {
            let st = self.state();
            (idle(&st, &st.sheds), idle(&st, &st.deletes))
        };
        for m in &markers {
            self.pass_marker(m, by_id.get(&m.id), startup).await;
        }
        for s in &records {
            self.pass_record(s, by_id.get(&s.id)).await;
        }
        let known: Vec<String> = {
            let st = self.state();
            st.sheds.keys().chain(st.deletes.keys()).cloned().collect()
        };
        for (id, m) in &by_id {
            if !known.contains(id) {
                self.pass_orphan(id, m, startup).await;
            }
        }
        self.bump();
    }

    /// A pass whose listing failed: starting sheds say `cloud_unreadable`; at start-up the jobs of
    /// `starting` and `stopping` records resume (they read the cloud themselves).
    fn unreadable_pass(&self, startup: bool) {
        let records = {
            let now = self.now();
            let mut st = self.state();
            let records = idle(&st, &st.sheds);
            let made = |s: &&Shed| s.status == Status::Starting && s.create == CreateStage::Made;
            for s in records.iter().filter(made) {
                let s = st.sheds.get_mut(&s.id).expect("listed");
                s.set(Status::Starting, Some(Reason::CloudUnreadable), now);
                self.save(s);
            }
            records
        };
        let busy = |s: &&Shed| startup && matches!(s.status, Status::Starting | Status::Stopping);
        for s in records.iter().filter(busy) {
            self.spawn_job(&s.id);
        }
    }

    /// Applies `f` to shed `id` if it still has status `seen` and no job; writes it.
    fn apply(&self, id: &str, seen: Status, f: impl FnOnce(&mut Shed, orca::Timestamp)) -> bool {
        self.update_if(id, |st, s| !st.jobs.contains(id) && s.status == seen, f)
    }

    async fn pass_marker(&self, m: &DeleteMarker, vm: Option<&Machine>, startup: bool) {
        match vm {
            Some(vm) if !readable(vm) => {
                let mut st = self.state();
                if let Some(mk) = st.deletes.get_mut(&m.id) {
                    if !mk.foreign_labels || mk.vm_id.is_none() {
                        mk.foreign_labels = true;
                        mk.vm_id = Some(vm.id.clone());
                        self.save_marker(mk);
                    }
                }
            }
            Some(vm) => {
                let age = since(self.now(), m.acknowledged_at);
                if startup || age > self.inner.timings.delete_grace {
                    {
                        let mut st = self.state();
                        if let Some(mk) = st.deletes.get_mut(&m.id) {
                            mk.vm_id = Some(vm.id.clone());
                            mk.foreign_labels = false;
                            self.save_marker(mk);
                        }
                    }
                    if !startup {
                        self.log().info(format!(
                            "remote: shed {} ({}): retrying the destroy of its VM, deleted {} ago",
                            m.name,
                            m.id,
                            go_duration(age)
                        ));
                    }
                    self.spawn_job(&m.id);
                }
            }
            None => {
                // Gone, perhaps by a delete that could not remove everything beside it, which an id
                // no longer reaches: its job removes what is left by name before the marker goes.
                if let Some(vm) = &m.vm_id {
                    // Its job also drops a marker naming a VM that is not the shed's, leaving
                    // that VM alone.
                    match self.inner.provider.machine(vm).await {
                        Ok(None) => self.spawn_job(&m.id),
                        Ok(Some(found)) if readable(&found) && !self.is_shed_vm(&found, &m.id) => {
                            self.spawn_job(&m.id)
                        }
                        _ => {}
                    }
                    return;
                }
                // The insert was sent: its job looks by name and removes what it left beside a VM
                // before the marker goes.
                if m.may_have_vm {
                    self.spawn_job(&m.id);
                    return;
                }
                let mut st = self.state();
                if st.jobs.contains(&m.id) {
                    return;
                }
                if self.drop_marker(&mut st, &m.id).is_some() {
                    self.log().info(format!(
                        "remote: shed {} ({}) deleted: its VM is gone",
                        m.name, m.id
                    ));
                }
            }
        }
    }
}
