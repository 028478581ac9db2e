//! The extensions the Hetzner driver answers: label changes on an existing server
//! ([`MachineLabels`]).

use async_trait::async_trait;
use orca_machines::spec::{validate_label_key_to_remove, validate_labels};
use orca_machines::{Machine, MachineLabels, Result};
use reqwest::Method;
use serde_json::json;

use crate::model::ServerAnswer;
use crate::provider::{server_id, HetznerProvider};

#[async_trait]
impl MachineLabels for HetznerProvider {
    /// Hetzner's update (`PUT /servers/{id}`) replaces all labels and has no fingerprint or
    /// precondition: the driver reads the server, changes its labels and writes them all back at
    /// once, with no call in between (a change another writer makes in that window is lost).
    async fn set_labels(
        &self,
        id: &str,
        set: &orca_machines::labels::Labels,
        remove: &[String],
    ) -> Result<Machine> {
        let n = server_id(id)?;
        validate_labels(set)?;
        for k in remove {
            validate_label_key_to_remove(k)?;
        }
        let s = self.owned_server(id).await?;
        let mut labels = s.labels.clone();
        for k in remove {
            labels.remove(k);
        }
        labels.extend(set.iter().map(|(k, v)| (k.clone(), v.clone())));
        if labels == s.labels {
            return Ok(self.machine_of(&s));
        }
        // The same full set again is the same change: safe to retry.
        let body = json!({ "labels": labels });
        let r: ServerAnswer = self
            .client
            .call(
                "servers.update",
                Method::PUT,
                &format!("/servers/{n}"),
                &[],
                Some(&body),
            )
            .await?;
        Ok(self.machine_of(&r.server))
    }
}
