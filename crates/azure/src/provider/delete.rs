//! `delete`: the VM (which takes its interface, address and OS disk with it), then whatever of them
//! remains, each only when it is this owner's.

use super::*;

impl AzureProvider {
    /// [`Provider::delete`]: the machine's resources, what remains named.
    pub(crate) async fn delete_machine(&self, id: &str) -> Result<bool> {
        let vm = self.owned_vm(id, false).await?;
        let left = self.delete_resources(id, vm.as_ref()).await;
        if vm.is_some() && !left.iter().any(|l| l.res.part == Part::Vm) {
            self.forget(id);
        }
        if left.is_empty() {
            Ok(true)
        } else {
            Err(Error::leftovers(
                Error::other(format!(
                    "Azure did not release everything of machine {id}; deleting it again retries"
                )),
                left.iter().map(Left::to_string).collect(),
            ))
        }
    }

    /// Tags the OS disk `res` (read as `found`) as this owner's, of the pool of its VM's `vm_tags`,
    /// keeping its other tags; followed to its end.
    pub(crate) async fn tag_disk(
        &self,
        res: &Res,
        url: &str,
        found: &Tagged,
        vm_tags: &Labels,
    ) -> Result<()> {
        let mut tags = found.tags.clone();
        tags.extend(ownership_labels(&pool_of(vm_tags), &self.inner.owner));
        let op = format!("tag {res}");
        let a = self
            .client()
            .call(
                &op,
                Method::PATCH,
                url,
                Some(&json!({ "tags": tags })),
                Condition::None,
            )
            .await?;
        self.client().wait(&op, &a).await
    }

    /// Before the delete of a VM whose OS disk `res` stays after it (`deleteOption` not `Delete`, as
    /// an adopted VM's may say): the disk, if it exists, carries this owner's tags. Once the VM is
    /// gone they are the only proof that the disk is ours, which a retried delete needs.
    pub(crate) async fn own_disk(&self, res: &Res, url: &str, vm_tags: &Labels) -> Result<()> {
        match self
            .client()
            .get::<Tagged>(&format!("read {res}"), url)
            .await?
        {
            Some(d) if !is_owned_by(&d.tags, &self.inner.owner) => {
                self.tag_disk(res, url, &d, vm_tags).await
            }
            _ => Ok(()),
        }
    }

    /// The OS disk `res` after its VM's delete, confirmed gone. Azure deletes it with the VM when
    /// its `deleteOption` says `Delete`; one that stays was tagged as this owner's before the VM's
    /// delete ([`AzureProvider::own_disk`]), and is deleted. One the VM's delete left although it
    /// said `Delete` is tagged now and deleted. With `vm_tags` `None` (the VM was gone already: a
    /// delete retried), only a disk carrying this owner's tags is deleted: Azure tags no disk it
    /// makes, so any other is not known to be ours.
    pub(crate) async fn remove_disk(
        &self,
        res: &Res,
        url: &str,
        vm_tags: Option<&Labels>,
    ) -> Option<Left> {
        let what = res.to_string();
        let found = match self
            .client()
            .get::<Tagged>(&format!("read {what}"), url)
            .await
        {
            Ok(None) => return None,
            Ok(Some(d)) => d,
            Err(e) => return Some(Left::because(res.clone(), &e)),
        };
        let owned = is_owned_by(&found.tags, &self.inner.owner);
        match vm_tags {
            Some(vm_tags) if !owned => {
                if let Err(e) = self.tag_disk(res, url, &found, vm_tags).await {
                    tracing::warn!(resource = %what, error = %e, "tagging the OS disk its VM left failed; deleting it");
                }
            }
            None if !owned => {
                tracing::debug!(resource = %what, "not known to be this owner's: left alone");
                return None;
            }
            _ => {}
        }
        tracing::info!(resource = %what, "the VM's delete left its OS disk; deleting it");
        self.remove(&what, url)
            .await
            .err()
            .map(|e| Left::because(res.clone(), &e))
    }

    /// Deletes the machine's resources in order (the VM, which takes its interface, address and OS
    /// disk with it; then whatever of OS disk, interface, security group and address remains), each
    /// only when it is this owner's, each followed to its end and confirmed gone. Returns what
    /// remains, with why.
    pub(crate) async fn delete_resources(&self, id: &str, vm: Option<&Vm>) -> Vec<Left> {
        let names = Names::of(id);
        // The OS disk: the VM's own reference (an adopted VM's may be named otherwise), else the
        // name a create gives it.
        let disk_id = vm
            .map(|v| v.properties.storage_profile.os_disk.managed_disk.id.clone())
            .filter(|d| !d.is_empty())
            .unwrap_or_else(|| self.id("Microsoft.Compute/disks", &names.disk));
        let disk = Res::new(
            Part::Disk,
            disk_id.rsplit('/').next().unwrap_or(&names.disk),
        );
        let disk_url = self.client().url(&disk_id, DISKS_API);
        let mut left = Vec::new();
        if let Some(vm) = vm {
            let keeps_disk = !vm
                .properties
                .storage_profile
                .os_disk
                .delete_option
                .eq_ignore_ascii_case("Delete");
            if keeps_disk {
                if let Err(e) = self.own_disk(&disk, &disk_url, &vm.tags).await {
                    // Without this owner's tags the disk could not be told ours once the VM is
                    // gone: the VM stays, and a retried delete tags it again.
                    let vm_and_disk = [
                        Left::standing(Res::new(Part::Vm, id)),
                        Left::because(disk, &e),
                    ];
                    return with_network(vm_and_disk, &names, self.cfg().public_ip);
                }
            }
            if let Err(e) = self
                .remove(&format!("VM {id}"), &self.vm_url(id, false))
                .await
            {
                // The disk, interface, group and address stay in use while the VM stands.
                let vm_and_disk = [
                    Left::because(Res::new(Part::Vm, id), &e),
                    Left::standing(disk),
                ];
                return with_network(vm_and_disk, &names, self.cfg().public_ip);
            }
            left.extend(self.remove_disk(&disk, &disk_url, Some(&vm.tags)).await);
        } else {
            left.extend(self.remove_disk(&disk, &disk_url, None).await);
        }
        for (part, ty, name) in [
            (
                Part::Interface,
                "Microsoft.Network/networkInterfaces",
                &names.nic,
            ),
            (
                Part::SecurityGroup,
                "Microsoft.Network/networkSecurityGroups",
                &names.nsg,
            ),
            (
                Part::PublicIp,
                "Microsoft.Network/publicIPAddresses",
                &names.pip,
            ),
        ] {
            let res = Res::new(part, name);
            let url = self.net_url(ty, name);
            let what = res.to_string();
            match self
                .client()
                .get::<Tagged>(&format!("read {what}"), &url)
                .await
            {
                Ok(None) => {}
                Ok(Some(v)) if !is_owned_by(&v.tags, &self.inner.owner) => {
                    tracing::warn!(resource = %what, "not this owner's: left alone");
                }
                Ok(Some(_)) => {
                    let removed = if part == Part::Interface {
                        self.remove_interface(&what, &url, Duration::ZERO).await
                    } else {
                        self.remove(&what, &url).await
                    };
                    if let Err(e) = removed {
                        left.push(Left::because(res, &e));
                    }
                }
                Err(e) => left.push(Left::because(res, &e)),
            }
        }
        left
    }
}
