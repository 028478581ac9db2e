//! `delete`: the VM (which takes its interface, address and OS disk with it), then whatever of them
//! remains, each only when it is this owner's of the VM's pool.

use super::*;

/// What a delete of a machine's resources did: whether it removed anything, and what remains.
#[derive(Default)]
pub(crate) struct Swept {
    pub(crate) removed: bool,
    pub(crate) left: Vec<Left>,
}

impl Swept {
    fn leaving(left: Vec<Left>) -> Swept {
        Swept {
            removed: false,
            left,
        }
    }

    /// Notes the outcome of one resource's removal: `Ok(true)` removed, `Ok(false)` nothing of it
    /// there (or not this caller's), `Err` what remains.
    fn note(&mut self, outcome: std::result::Result<bool, Left>) {
        match outcome {
            Ok(removed) => self.removed |= removed,
            Err(l) => self.left.push(l),
        }
    }
}

impl AzureProvider {
    /// [`Provider::delete`]: the VM and the pieces of its name that carry this owner's tags of its
    /// pool, what remains named. Without a VM the machine is gone and nothing is removed: the
    /// pieces of that name cannot be told this machine's from those of a machine of that name that
    /// another pool of this owner is making, or failed to make; `delete_named` of their pool
    /// removes them.
    pub(crate) async fn delete_machine(&self, id: &str) -> Result<bool> {
        let Some(vm) = self.owned_vm(id, false).await? else {
            return Ok(true);
        };
        let pool = pool_of(&vm.tags);
        let left = self.delete_resources(id, Some(&vm), &pool).await.left;
        let vm_stands = left.iter().any(|l| l.res.part == Part::Vm);
        if !vm_stands {
            self.forget(id);
        }
        if left.is_empty() {
            return Ok(true);
        }
        // Once the VM is gone, a delete of its id finds nothing to tie what remains to its pool.
        let retry = if vm_stands {
            "deleting it again retries".to_string()
        } else {
            format!("its VM is gone: delete_named(\"{pool}\", \"{id}\") removes the rest")
        };
        Err(Error::leftovers(
            Error::other(format!(
                "Azure did not release everything of machine {id}; {retry}"
            )),
            left.iter().map(Left::to_string).collect(),
        ))
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
    /// gone they are the only proof that the disk is ours, which `delete_named` needs.
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
    /// said `Delete` is tagged now and deleted. With `vm_tags` `None` (no VM: a delete by name),
    /// only a disk whose tags say it is this owner's of `pool` is deleted: Azure tags no disk it
    /// makes, so any other is not known to be ours. `Ok(true)` when it deleted the disk.
    pub(crate) async fn remove_disk(
        &self,
        res: &Res,
        url: &str,
        vm_tags: Option<&Labels>,
        pool: &str,
    ) -> std::result::Result<bool, Left> {
        let what = res.to_string();
        let found = match self
            .client()
            .get::<Tagged>(&format!("read {what}"), url)
            .await
        {
            Ok(None) => return Ok(false),
            Ok(Some(d)) => d,
            Err(e) => return Err(Left::because(res.clone(), &e)),
        };
        match vm_tags {
            Some(vm_tags) if !is_owned_by(&found.tags, &self.inner.owner) => {
                if let Err(e) = self.tag_disk(res, url, &found, vm_tags).await {
                    tracing::warn!(resource = %what, error = %e, "tagging the OS disk its VM left failed; deleting it");
                }
            }
            None if !is_in_pool(&found.tags, pool, &self.inner.owner) => {
                tracing::debug!(resource = %what, "not known to be this caller's: left alone");
                return Ok(false);
            }
            _ => {}
        }
        tracing::info!(resource = %what, "the VM's delete left its OS disk; deleting it");
        match self.remove(&what, url).await {
            Ok(()) => Ok(true),
            Err(e) => Err(Left::because(res.clone(), &e)),
        }
    }

    /// Deletes the machine's resources in order (the VM, which takes its interface, address and OS
    /// disk with it; then whatever of OS disk, interface, security group and address remains), the
    /// VM only when given (read and checked by the caller to be this owner's of `pool`), the rest
    /// only when they carry this owner's tags of `pool` (a piece of that name of another pool is
    /// another pool's machine's), each followed to its end and confirmed gone. Answers whether it
    /// removed anything, and what remains, with why.
    pub(crate) async fn delete_resources(&self, id: &str, vm: Option<&Vm>, pool: &str) -> Swept {
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
        let mut swept = Swept::default();
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
                    return Swept::leaving(with_network(vm_and_disk, &names, self.cfg().public_ip));
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
                return Swept::leaving(with_network(vm_and_disk, &names, self.cfg().public_ip));
            }
            swept.removed = true;
            swept.note(
                self.remove_disk(&disk, &disk_url, Some(&vm.tags), pool)
                    .await,
            );
        } else {
            swept.note(self.remove_disk(&disk, &disk_url, None, pool).await);
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
            swept.note(self.remove_piece(Res::new(part, name), ty, pool).await);
        }
        swept
    }

    /// Network resource `res` of type `ty`, deleted when it stands and carries this owner's tags
    /// of `pool` (confirmed gone); `Ok(true)` when it was deleted.
    async fn remove_piece(
        &self,
        res: Res,
        ty: &str,
        pool: &str,
    ) -> std::result::Result<bool, Left> {
        let url = self.net_url(ty, &res.name);
        let what = res.to_string();
        match self
            .client()
            .get::<Tagged>(&format!("read {what}"), &url)
            .await
        {
            Ok(None) => Ok(false),
            Ok(Some(v)) if !is_in_pool(&v.tags, pool, &self.inner.owner) => {
                tracing::warn!(resource = %what, "not this caller's: left alone");
                Ok(false)
            }
            Ok(Some(_)) => {
                let removed = if res.part == Part::Interface {
                    self.remove_interface(&what, &url, Duration::ZERO).await
                } else {
                    self.remove(&what, &url).await
                };
                match removed {
                    Ok(()) => Ok(true),
                    Err(e) => Err(Left::because(res, &e)),
                }
            }
            Err(e) => Err(Left::because(res, &e)),
        }
    }
}
