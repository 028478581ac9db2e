//! The extensions EC2 answers through `dyn Provider`: [`MachineLabels`] (tags on an existing
//! instance). EC2 has no firewall-rule, SSH-admission or credit-balance extension here (see the
//! README).

use async_trait::async_trait;
use orca_machines::labels::Labels;
use orca_machines::spec::{validate_label_key_to_remove, validate_labels};
use orca_machines::{Error, Machine, MachineLabels, Result, validate_id};

use crate::model::{NAME_TAG, machine_of};
use crate::provider::Ec2Provider;

#[async_trait]
impl MachineLabels for Ec2Provider {
    /// CreateTags for `set` and DeleteTags for `remove` on the instance alone (its root volume keeps
    /// the tags of its create call). EC2's tag calls are per key: a tag another writer changes at the
    /// same time is never lost, only the keys named here change. orca's own tags and `Name` (the
    /// machine's name) can be neither set nor removed. The answer is the instance as read after the
    /// change, with this change applied where the read lags behind it (eventual consistency).
    async fn set_labels(&self, id: &str, set: &Labels, remove: &[String]) -> Result<Machine> {
        validate_id(id)?;
        validate_labels(set)?;
        for k in remove {
            validate_label_key_to_remove(k)?;
        }
        if set.contains_key(NAME_TAG) || remove.iter().any(|k| k == NAME_TAG) {
            return Err(Error::invalid(
                "labels",
                format!("{NAME_TAG} holds the machine's name; it can be neither set nor removed"),
            ));
        }
        if let Some(k) = remove.iter().find(|k| set.contains_key(*k)) {
            return Err(Error::invalid(
                "labels",
                format!("{k:?} is both set and removed"),
            ));
        }
        let before = self.owned(id).await?;
        // A "not found" from a tag call is confirmed as every change's.
        if !set.is_empty() {
            self.change_live(id, "CreateTags", || self.client.create_tags(id, set))
                .await?;
        }
        if !remove.is_empty() {
            self.change_live(id, "DeleteTags", || self.client.delete_tags(id, remove))
                .await?;
        }
        let after = self.read(id).await?.unwrap_or(before);
        let mut m = machine_of(&after);
        for (k, v) in set {
            m.labels.insert(k.clone(), v.clone());
        }
        for k in remove {
            m.labels.remove(k);
        }
        Ok(m)
    }
}
