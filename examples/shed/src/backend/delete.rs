//! A delete: the shed hidden at once behind a delete marker, its VM destroyed by a job, and the wait
//! of a streamed delete until the VM is gone.

use std::time::Duration;

use super::{ApiError, Backend, Caller};
use crate::jobs::readable;
use crate::model::{DeleteMarker, Shed};

impl Backend {
    /// `DELETE /api/sheds/{name}`: hides the shed at once (a delete marker replaces its record) and
    /// destroys its VM in the background. Answers the shed's ID; an error when the VM's labels are
    /// another shed version's (the delete is recorded all the same).
    pub async fn delete_shed(&self, caller: &Caller, name: &str) -> Result<String, ApiError> {
        let Shed { id, vm_id, .. } = Self::find(&self.state(), caller, name)?.clone();
        // Whose labels are on the VM? A failed read does not stop the delete.
        let mut foreign = false;
        if let Some(vm) = &vm_id {
            let read = self.inner.provider.machine(vm);
            if let Ok(Ok(Some(m))) = tokio::time::timeout(Duration::from_secs(10), read).await {
                foreign = !readable(&m);
            }
        }
        let now = self.now();
        {
            let mut st = self.state();
            let Some(s) = st.sheds.get(&id).cloned() else {
                return Err(ApiError::not_found(name));
            };
            let marker = DeleteMarker {
                foreign_labels: foreign,
                ..DeleteMarker::of(&s, now)
            };
            self.save_marker(&marker);
            st.deletes.insert(id.clone(), marker);
            self.drop_record(&mut st, &id);
            st.waiters.remove(&id);
            st.accepted.remove(&id);
        }
        self.log().info(format!(
            "remote: shed {name} ({id}) delete acknowledged; its VM is destroyed in the background"
        ));
        self.bump();
        self.spawn_job(&id);
        if foreign {
            return Err(ApiError::new(
                502,
                "CLOUD_UNREADABLE",
                format!("the delete of shed {name:?} is recorded, but its VM carries labels of another shed version: it keeps running (and is billed) until a server that reads those labels, or this one once they are readable again, destroys it"),
            ));
        }
        Ok(id)
    }

    /// Waits until the VM of deleted shed `id` is gone: `Ok` then, or the error a streamed delete
    /// ends with when the destroy failed (the server keeps trying).
    pub async fn wait_gone(&self, id: &str) -> Result<(), String> {
        let mut rx = self.subscribe();
        loop {
            {
                let st = self.state();
                match st.deletes.get(id) {
                    None => return Ok(()),
                    Some(m) if !st.jobs.contains(id) => {
                        return Err(if m.foreign_labels {
                            "the delete is recorded, but the VM carries labels of another shed version and keeps running until they are readable"
                        } else {
                            "the delete is recorded but the VM could not be destroyed yet; the server keeps trying"
                        }.into());
                    }
                    Some(_) => {}
                }
            }
            if rx.changed().await.is_err() {
                return Err("the server is stopping".into());
            }
        }
    }
}
