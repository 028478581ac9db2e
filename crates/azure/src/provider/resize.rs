//! `resize`, `start` and `stop`: the power actions and the size change.

use super::*;

impl AzureProvider {
    /// [`Provider::resize`]: in place on the VM's hardware cluster, else deallocated, resized and started again.
    pub(crate) async fn resize_machine(&self, id: &str, machine_type: &str) -> Result<Resized> {
        validate_token("machine_type", machine_type)?;
        let vm = self.owned_existing(id, true).await?;
        let location = vm.location.clone();
        let want = self.arch_in(machine_type, &location).await?;
        let have_type = vm.properties.hardware_profile.vm_size.clone();
        if !have_type.is_empty() {
            let have = self.arch_in(&have_type, &location).await?;
            if have != want {
                return Err(Error::invalid(
                    "machine_type",
                    format!("{machine_type} is {want}, the machine's disk holds an {have} image"),
                ));
            }
        }
        let (status, cloud_status) = vm.power(None);
        let running = matches!(status, Status::Running | Status::Starting);
        // An allocated VM (running, or powered off without deallocation) can take in place only a
        // size of its hardware cluster; Azure refuses any other (409 OperationNotAllowed). Such a
        // size is taken by deallocating the VM, resizing it, and starting it again.
        let deallocated = cloud_status.eq_ignore_ascii_case("PowerState/deallocated");
        let in_place = deallocated
            || self
                .resizable_to(id)
                .await?
                .iter()
                .any(|s| s.eq_ignore_ascii_case(machine_type));
        if in_place {
            self.patch_size(id, machine_type, &location).await?;
        } else {
            self.power_action(id, "deallocate").await.map_err(|e| {
                e.prefixed(&format!(
                    "{machine_type} is not offered on the hardware cluster of {id}, which was to be deallocated first"
                ))
            })?;
            if let Err(e) = self.patch_size(id, machine_type, &location).await {
                // Back to where it was: the old size, running again if it ran.
                if running {
                    if let Err(again) = self.power_action(id, "start").await {
                        tracing::warn!(id, error = %again, "restarting after a failed resize failed");
                        return Err(e.prefixed(&format!(
                            "{id} was deallocated to be resized and could not be started again ({again})"
                        )));
                    }
                }
                return Err(e.prefixed(&format!("{id} was deallocated to be resized")));
            }
            if running {
                self.power_action(id, "start").await.map_err(|e| {
                    e.with_placement(machine_type, &location).prefixed(&format!(
                        "{id} was resized to {machine_type} while deallocated and did not start again"
                    ))
                })?;
            }
        }
        Ok(Resized::new(self.machine_now(id).await?, running))
    }

    pub(crate) async fn power(&self, id: &str, action: &str) -> Result<Machine> {
        self.owned_existing(id, false).await?;
        self.power_action(id, action).await?;
        self.machine_now(id).await
    }

    /// `POST {vm}/{action}` (`start`, `deallocate`), followed to its end.
    pub(crate) async fn power_action(&self, id: &str, action: &str) -> Result<()> {
        let url = self
            .client()
            .url(&format!("{}/{action}", self.vm_id(id)), COMPUTE_API);
        let op = format!("{action} VM");
        let a = self
            .client()
            .call(&op, Method::POST, &url, None, Condition::None)
            .await?;
        self.client().wait(&op, &a).await
    }

    /// The sizes VM `id` can be resized to where it stands (`{vm}/vmSizes`): for an allocated VM,
    /// those of its hardware cluster.
    pub(crate) async fn resizable_to(&self, id: &str) -> Result<Vec<String>> {
        let url = self
            .client()
            .url(&format!("{}/vmSizes", self.vm_id(id)), COMPUTE_API);
        let sizes: Vec<VmSize> = self.client().list("list VM sizes", &url).await?;
        Ok(sizes.into_iter().map(|s| s.name).collect())
    }

    /// `PATCH` of VM `id`'s size, followed to its end; no stock is named with the size and location.
    pub(crate) async fn patch_size(
        &self,
        id: &str,
        machine_type: &str,
        location: &str,
    ) -> Result<()> {
        let op = "resize VM";
        let a = self
            .client()
            .call(
                op,
                Method::PATCH,
                &self.vm_url(id, false),
                Some(&json!({"properties": {"hardwareProfile": {"vmSize": machine_type}}})),
                Condition::None,
            )
            .await?;
        self.client()
            .wait(op, &a)
            .await
            .map_err(|e| e.with_placement(machine_type, location))
    }
}
