//! The insert of a create: the firewall check asked again just before it, a look for the VM of an
//! earlier attempt (a create resumed after a restart), the cloud's answer recorded.

use orca::{Created, Machine, MachineSpec, Timestamp};

use super::{refusal, Named};
use crate::backend::{ApiError, Backend, State};
use crate::model::{CreateStage, DeleteMarker, Reason, ShedView, Status};

/// What the cloud made of an insert: the VM, or the reason of a refusal (quota or capacity; `None`
/// for another failure) with the cloud's words.
type Inserted = Result<Machine, (Option<Reason>, String)>;

impl Backend {
    pub(super) async fn step_insert(&self, id: &str) {
        // The check again, just before the insert (it can be long after the request).
        let fw = self.inner.firewall.check().await;
        let Some((spec, was_sent, name)) = self.mark_sent(id, &fw) else {
            return;
        };
        // A create resumed after a restart may have reached the cloud before: look first (for a VM
        // of its name that carries its `shed-id`).
        let mut result = None;
        if was_sent {
            match self.vm_by_name(id).await {
                Ok(Named::Vm(m)) => result = Some(Ok(Created::Adopted(*m))),
                Ok(Named::Foreign | Named::Nothing) => {}
                Err(e) => self.log().warn(format!(
                    "remote: shed {name} ({id}): the cloud could not be read before the insert was sent again: {e}"
                )),
            }
        }
        let result = match result {
            Some(r) => r,
            None => self.inner.provider.create(&spec).await,
        };
        let outcome: Inserted = match result {
            Ok(Created::Machine(m)) | Ok(Created::Adopted(m)) => Ok(m),
            Ok(Created::NoStock { message, .. }) => Err((Some(Reason::Capacity), message)),
            Err(e) => Err((refusal(&e), e.to_string())),
        };
        self.record_insert(id, &name, outcome);
    }

    /// Marks shed `id`'s create as sent, or, when the firewall check `fw` fails, leaves it in
    /// `error (firewall)` without sending anything. Answers the VM's spec, whether an earlier attempt
    /// was sent, and the shed's name; `None` when nothing is to be sent.
    fn mark_sent(
        &self,
        id: &str,
        fw: &crate::firewall::Outcome,
    ) -> Option<(MachineSpec, bool, String)> {
        let now = self.now();
        let mut st = self.state();
        let s = st.sheds.get_mut(id)?;
        if !fw.passed {
            s.fail(Status::Error, Reason::Firewall, fw.message.clone(), now);
            s.vm_gone = s.create == CreateStage::NotSent;
            self.save(s);
            self.log().warn(format!(
                "remote: shed {} ({id}) create not sent: the firewall check is failing (reason {})",
                s.name,
                fw.reason.map(|r| r.as_str()).unwrap_or("")
            ));
            return None;
        }
        // The limits were decided when the create was accepted, under the lock that recorded it
        // (an error status has no reason `limit`).
        let was_sent = s.create == CreateStage::Sent;
        s.create = CreateStage::Sent;
        self.save(s);
        Some((self.vm_spec(s), was_sent, s.name.clone()))
    }

    /// Records the cloud's answer to shed `id`'s insert.
    fn record_insert(&self, id: &str, name: &str, outcome: Inserted) {
        let now = self.now();
        let mut st = self.state();
        if !st.sheds.contains_key(id) {
            // Deleted while the cloud was asked: the delete waits for the VM, then destroys it.
            if let Some(m) = st.deletes.get_mut(id) {
                // A refusal may follow an attempt whose answer was lost: the destroy step looks
                // for the VM by its shed-id label before it believes there is none.
                if let Ok(vm) = &outcome {
                    m.vm_id = Some(vm.id.clone());
                }
                self.save_marker(m);
            }
            return;
        }
        match outcome {
            Ok(vm) => {
                let s = st.sheds.get_mut(id).expect("present");
                s.create = CreateStage::Made;
                s.vm_id = Some(vm.id.clone());
                let snap = s.clone();
                self.save(&snap);
                if st.waiters.contains(id) {
                    st.accepted.insert(id.to_string(), ShedView::from(&snap));
                }
                self.log().info(format!(
                    "remote: shed {name} ({id}) VM {} made; waiting for its agent",
                    vm.name
                ));
            }
            Err((Some(reason), why)) => {
                self.log().warn(format!(
                    "remote: shed {name} ({id}) create refused by the cloud ({reason}): {why}"
                ));
                if st.waiters.remove(id) {
                    self.refuse_early(&mut st, id, reason, now);
                } else {
                    let s = st.sheds.get_mut(id).expect("present");
                    s.fail(Status::Error, reason, why, now);
                    self.save(s);
                }
            }
            Err((None, why)) => {
                self.log()
                    .warn(format!("remote: shed {name} ({id}) create failed: {why}"));
                let s = st.sheds.get_mut(id).expect("present");
                s.fail(Status::Error, Reason::CreateFailed, why, now);
                self.save(s);
            }
        }
    }

    /// A quota or capacity refusal early enough for the waiting request to answer 503: no shed is
    /// left. An attempt whose answer was lost may have made the VM all the same, so a hidden delete
    /// marker takes the record's place until a listing shows there is none.
    fn refuse_early(&self, st: &mut State, id: &str, reason: Reason, now: Timestamp) {
        let err = match reason {
            Reason::Quota => ApiError::quota(),
            _ => ApiError::capacity(),
        };
        st.refused.insert(id.to_string(), err);
        let marker = DeleteMarker {
            vm_id: None,
            may_have_vm: true,
            ..DeleteMarker::of(st.sheds.get(id).expect("present"), now)
        };
        self.save_marker(&marker);
        st.deletes.insert(id.to_string(), marker);
        self.drop_record(st, id);
    }
}
