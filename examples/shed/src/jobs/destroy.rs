//! Destroying a VM: the one of an acknowledged delete (unless its labels are another shed version's)
//! and the one of a failed create; when no VM of the shed stands, what its create may have left
//! beside one is removed by name.

use orca::{Error, Machine};

use super::{readable, Named};
use crate::backend::{Backend, ENV_LABEL, ID_LABEL, STATE_LABEL};

/// Why the VM of a shed to destroy is not known.
enum Unfound {
    /// No VM of its name stands, and what its create left beside one could not be removed.
    Left(Error),
    /// The cloud could not be listed.
    Unlisted(Error),
}

impl Backend {
    /// The VM of shed `id` to destroy: `vm_id`, the one its record holds, else the one of its name
    /// (`None` when another shed's labels claim that one). When no VM of its name stands, what its
    /// create may have made before the VM is removed by name first.
    async fn vm_to_destroy(
        &self,
        id: &str,
        vm_id: Option<&str>,
    ) -> Result<Option<String>, Unfound> {
        if let Some(vm) = vm_id {
            return Ok(Some(vm.to_string()));
        }
        match self.vm_by_name(id).await {
            Ok(Named::Vm(m)) => Ok(Some(m.id)),
            Ok(Named::Foreign) => Ok(None),
            Ok(Named::Nothing) => {
                self.remove_left(id).await.map_err(Unfound::Left)?;
                Ok(None)
            }
            Err(e) => Err(Unfound::Unlisted(e)),
        }
    }

    pub(super) async fn step_destroy(&self, id: &str) {
        let Some(marker) = self.state().deletes.get(id).cloned() else {
            return;
        };
        let vm_id = match self.vm_to_destroy(id, marker.vm_id.as_deref()).await {
            Ok(vm) => vm,
            // The insert may have made pieces before the VM: the marker goes with them.
            Err(u) => {
                let why = match u {
                    Unfound::Left(e) => format!("what its create left could not be removed: {e}"),
                    Unfound::Unlisted(e) => format!("the cloud could not be listed: {e}"),
                };
                return self.marker_failed(id, why);
            }
        };
        let Some(vm) = vm_id else {
            self.deleted(id, &marker.name, " (no VM was made)");
            return;
        };
        // A delete still works after a failed read; labels of another version keep the VM.
        let read = self.inner.provider.machine(&vm).await;
        if let Ok(Some(m)) = &read {
            if readable(m) && !self.is_shed_vm(m, id) {
                return self.not_its_vm(id, &marker.name, m);
            }
        }
        match read {
            Ok(None) => {
                // Gone, perhaps by an earlier delete that could not remove everything beside it:
                // an id no longer reaches those pieces, the VM's name does.
                match self.remove_left(id).await {
                    Ok(_) => self.deleted(id, &marker.name, " (its VM was gone already)"),
                    Err(e) => self.marker_failed(
                        id,
                        format!(
                            "its VM is gone, but what stood beside it could not be removed: {e}"
                        ),
                    ),
                }
                return;
            }
            Ok(Some(m)) if !readable(&m) => {
                let mut st = self.state();
                if let Some(mk) = st.deletes.get_mut(id) {
                    mk.foreign_labels = true;
                    mk.vm_id = Some(vm.clone());
                    self.save_marker(mk);
                }
                self.log().warn(format!(
                    "remote: shed {} ({id}): its VM {} carries labels of another shed version; it keeps running until they are readable",
                    marker.name, m.name
                ));
                return;
            }
            _ => {}
        }
        if let Some(labels) = self.inner.provider.machine_labels() {
            let set =
                orca::labels::Labels::from([(STATE_LABEL.to_string(), "deleting".to_string())]);
            if let Err(e) = labels.set_labels(&vm, &set, &[]).await {
                self.log().warn(format!(
                    "remote: shed {} ({id}): its VM could not be labelled deleting: {e}",
                    marker.name
                ));
            }
        }
        match self.inner.provider.delete(&vm).await {
            Ok(_) => self.deleted(id, &marker.name, ": VM destroyed"),
            Err(e) => self.marker_failed(id, e.to_string()),
        }
    }

    /// Whether `m` carries this server's environment and shed `id` as shed labels its VMs: the VM
    /// id of a marker or record is taken from a file, and the owner every shed server uses reaches
    /// the VMs of every environment, so an id alone never says that a VM is the shed's.
    pub(crate) fn is_shed_vm(&self, m: &Machine, id: &str) -> bool {
        let label = |k| m.labels.get(k).map(String::as_str);
        label(ENV_LABEL) == Some(self.inner.cfg.environment.as_str()) && label(ID_LABEL) == Some(id)
    }

    /// The delete of shed `id` named VM `m`, which is not its VM: `m` is left alone, and the marker
    /// goes as when the shed's VM is gone (a VM of the shed's own that stands under its name is
    /// then an orphan to the pass, handled as one).
    fn not_its_vm(&self, id: &str, name: &str, m: &Machine) {
        self.log().warn(format!(
            "remote: shed {name} ({id}): the VM its delete names, {}",
            super::not_its(m)
        ));
        self.deleted(id, name, " (the VM it named is not its own)");
    }

    /// Drops shed `id`'s delete marker and logs that it is deleted (`how`), under the lock, so that
    /// whoever sees the marker gone finds the line in the log.
    fn deleted(&self, id: &str, name: &str, how: &str) {
        let mut st = self.state();
        self.drop_marker(&mut st, id);
        self.log()
            .info(format!("remote: shed {name} ({id}) deleted{how}"));
    }

    fn marker_failed(&self, id: &str, why: String) {
        let mut st = self.state();
        if let Some(m) = st.deletes.get_mut(id) {
            m.last_error = Some(why.clone());
            self.save_marker(m);
            self.log().warn(format!(
                "remote: shed {} ({id}): the delete is recorded but the VM could not be destroyed yet (the periodic pass retries): {why}",
                m.name
            ));
        }
    }

    pub(super) async fn step_destroy_failed(&self, id: &str) {
        let Some(s) = self.state().sheds.get(id).cloned() else {
            return;
        };
        let vm = match self.vm_to_destroy(id, s.vm_id.as_deref()).await {
            Ok(vm) => vm,
            // The insert may have made pieces before the VM: the shed keeps its VM's name (not
            // `vm_gone`) until they are removed, so that the pass retries.
            Err(u) => {
                let why = match u {
                    Unfound::Left(e) => format!("what its failed create left could not be removed (the periodic pass retries): {e}"),
                    Unfound::Unlisted(e) => format!("the cloud could not be listed to destroy the VM of its failed create: {e}"),
                };
                self.log()
                    .warn(format!("remote: shed {} ({id}): {why}", s.name));
                return;
            }
        };
        let Some(vm) = vm else {
            self.update(id, |s, _| s.vm_gone = true);
            return;
        };
        match self.inner.provider.delete(&vm).await {
            Ok(_) => {
                self.update(id, |s, _| s.vm_gone = true);
                self.log().info(format!(
                    "remote: shed {} ({id}): the VM of its failed create is destroyed; the shed stays in error until it is deleted",
                    s.name
                ));
            }
            Err(e) => {
                if !e.left().is_empty() {
                    // The VM may be gone with pieces left beside it, which a delete by id no longer
                    // reaches: the pass looks for the VM by name and removes what is left by name.
                    self.update(id, |s, _| s.vm_id = None);
                }
                self.log().warn(format!(
                    "remote: shed {} ({id}): the VM of its failed create could not be destroyed (the periodic pass retries): {e}",
                    s.name
                ))
            }
        }
    }
}
