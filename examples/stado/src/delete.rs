//! `stado cloud host delete`: a declared host's VM and what belongs to it, each confirmed gone, and
//! only then its registry entry and keys. reap deletes the same way.

use orca::Error;
use serde::Serialize;

use crate::cloud::{list_or_none, Stado, HOME_LABEL, POOL, TITLE};
use crate::create::MAX_NAME;
use crate::error::Failure;
use crate::keys;
use crate::list::power_word;
use crate::registry::{CloudDecl, CloudState, Held};

/// What delete did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeleteReport {
    /// `delete`.
    pub command: &'static str,
    /// The host.
    pub name: String,
    /// The provider kind.
    pub provider: String,
    /// Its VM's id (empty when its create stopped before the cloud made one).
    pub vm_id: String,
    /// Whether everything is gone and the entry removed.
    pub deleted: bool,
}

impl Stado {
    /// Deletes the declared cloud host `name`: its VM with the OS disk, the interface, the security
    /// group and the public address, each confirmed gone; only then the registry entry and the fleet
    /// key. What the cloud still holds keeps the entry.
    pub async fn delete(&self, name: &str) -> Result<DeleteReport, Failure> {
        self.gated_profile()?;
        let mut registry = self.lock_registry()?;
        let declared = registry.cloud_hosts(&self.kind);
        let Some(decl) = declared
            .iter()
            .find(|(t, _)| t.name == name)
            .map(|(_, c)| (*c).clone())
        else {
            if let Some(other) = registry.target(name).and_then(|t| t.cloud.as_ref()) {
                return Err(Failure::refused(format!(
                    "the registry declares no {kind} cloud host {name}: {name} is a cloud host of the provider {p} (stado cloud host delete {name} --provider {p} deletes it)",
                    kind = self.kind,
                    p = other.provider
                )));
            }
            let names: Vec<&str> = declared.iter().map(|(t, _)| t.name.as_str()).collect();
            return Err(Failure::refused(format!(
                "the registry declares no {TITLE} cloud host {name} (it declares {})",
                list_or_none(&names)
            )));
        };
        let vm_id = self.remove_host(&mut registry, name, &decl).await?;
        Ok(DeleteReport {
            command: "delete",
            name: name.to_string(),
            provider: self.kind.clone(),
            vm_id,
            deleted: true,
        })
    }

    /// Deletes the cloud host's VM (with its disk, interface, security group and address) and
    /// confirms it gone: `Ok` once the cloud holds nothing of it, else what it still holds.
    pub(crate) async fn delete_vm(&self, vm_id: &str) -> Result<(), String> {
        match self.provider.delete(vm_id).await {
            Ok(true) => self.confirm_gone(vm_id).await,
            Ok(false) => Err(format!("VM {vm_id} (the delete did not finish)")),
            Err(Error::Leftovers { left, .. }) if !left.is_empty() => Err(left.join(", ")),
            Err(e) => Err(format!(
                "VM {vm_id} and what belongs to it ({})",
                self.cloud_error(&e)
            )),
        }
    }

    /// Removes what this home's creates of `name` made in stado's pool: its VM `vm` when one
    /// stands, and the pieces a create makes beside it (public address, security group,
    /// interface), which a create stopped before its VM leaves with no VM to delete them with.
    /// Whether something was removed; else what the cloud still holds. The caller has checked that
    /// no VM of that name is another home's: that VM's pieces would be its own.
    pub(crate) async fn remove_named(&self, name: &str, vm: Option<&str>) -> Result<bool, String> {
        match self.provider.delete_named(POOL, name).await {
            Ok(removed) => match vm {
                Some(id) => self.confirm_gone(id).await.map(|()| true),
                None => Ok(removed),
            },
            Err(Error::Leftovers { left, .. }) if !left.is_empty() => Err(left.join(", ")),
            Err(e) => Err(format!(
                "what a create of {name} made ({})",
                self.cloud_error(&e)
            )),
        }
    }

    /// `Ok` once VM `vm_id` is read as absent, else what the cloud still holds of it.
    async fn confirm_gone(&self, vm_id: &str) -> Result<(), String> {
        match self.provider.machine(vm_id).await {
            Ok(None) => Ok(()),
            Ok(Some(m)) => Err(format!("VM {vm_id} (still {})", power_word(&m))),
            Err(e) => Err(format!(
                "VM {vm_id} (its absence could not be confirmed: {})",
                self.cloud_error(&e)
            )),
        }
    }

    /// Removes the declared cloud host `name` as delete does: the VM and what belongs to it (for a
    /// host whose create stopped before the cloud answered, whatever that create made, found by
    /// the host's name), then the registry entry (saved) and the fleet key; the id of the VM
    /// removed (empty when that create had made none). The caller holds the registry's lock.
    pub(crate) async fn remove_host(
        &self,
        registry: &mut Held,
        name: &str,
        decl: &CloudDecl,
    ) -> Result<String, Failure> {
        let (vm_id, removed) = match decl.state {
            // A name longer than the cloud takes was refused by its create before anything was
            // made (an older stado declared it first), and the cloud refuses to look it up by name.
            CloudState::Creating if name.len() > MAX_NAME => (String::new(), Ok(())),
            CloudState::Creating => {
                let (vm, removed) = self.remove_made_by_stopped_create(name).await?;
                (vm.unwrap_or_default(), removed)
            }
            _ => {
                let removed = if self.check_this_homes(name, decl).await? {
                    self.delete_vm(&decl.vm_id).await
                } else {
                    // The VM is gone: an earlier delete removed it and could not remove all that
                    // stood beside it (or it went outside stado). A delete of its id no longer
                    // finds those pieces; they are removed by the host's name, as for a create
                    // that stopped, unless a VM of that name is another home's.
                    self.remove_made_by_stopped_create(name).await?.1
                };
                (decl.vm_id.clone(), removed)
            }
        };
        if let Err(left) = removed {
            return Err(Failure::new(format!(
                "{name} is still registered because {TITLE} did not release everything: {left}; deleting it again retries"
            ))
            .with_code("leftovers"));
        }
        self.forget_host(registry, name)?;
        Ok(vm_id)
    }

    /// The VM the declared host `name` names: by its id, or, for a host whose create stopped before
    /// the cloud answered (`creating`, no id known), by its name in stado's pool.
    pub(crate) async fn declared_vm(
        &self,
        name: &str,
        decl: &CloudDecl,
    ) -> orca::Result<Option<orca::Machine>> {
        match decl.state {
            CloudState::Creating => self.provider.machine_named(POOL, name).await,
            _ => self.provider.machine(&decl.vm_id).await,
        }
    }

    /// Removes by its name what a create of `name` that stopped before the cloud answered made:
    /// this home's VM of that name (when one stands) and the pieces a create makes beside it. A VM
    /// of another home's is no VM that create made (the cloud refused or adopted it, and the create
    /// would have refused it too): it and what stands beside it are that home's, and left alone.
    /// The id of the VM removed, and whether the cloud still holds something (what).
    async fn remove_made_by_stopped_create(
        &self,
        name: &str,
    ) -> Result<(Option<String>, Result<(), String>), Failure> {
        let vm = match self.provider.machine_named(POOL, name).await {
            Ok(Some(m)) if self.is_this_homes(&m) => Some(m.id),
            Ok(Some(m)) => {
                tracing::info!(host = name, vm = %m.id, "the VM of this name is not this home's: its create made none");
                return Ok((None, Ok(())));
            }
            Ok(None) => None,
            Err(e) => {
                return Err(Failure::new(format!(
                    "{name} is still registered: the VM named {name} could not be looked up to tell what of it stands ({}); deleting it again retries",
                    self.cloud_error(&e)
                ))
                .with_code("unread"))
            }
        };
        let removed = self.remove_named(name, vm.as_deref()).await.map(|_| ());
        Ok((vm, removed))
    }

    /// Refuses to delete the VM a declared host names when it is not this home's; answers whether
    /// that VM stands.
    async fn check_this_homes(&self, name: &str, decl: &CloudDecl) -> Result<bool, Failure> {
        // The VM id is the registry's, but the VM it names now may not be the one this home made
        // (on Azure the id is the name: deleted outside stado and made again by another home). A VM
        // carrying another home's label, or another owner's, is left alone.
        let whose = match self.provider.machine(&decl.vm_id).await {
            Ok(Some(m)) if m.labels.contains_key(HOME_LABEL) && !self.is_this_homes(&m) => Some(
                format!("{}; this home is {}", Self::whose(&m), self.home.id()),
            ),
            Err(e @ Error::NotOwned { .. }) => Some(e.to_string()),
            // A read that failed says nothing of whose the VM is: never delete on a guess.
            Err(e) => {
                return Err(Failure::new(format!(
                    "{name} is still registered: its VM {} could not be read to check that it is this stado home's ({}); deleting it again retries",
                    decl.vm_id,
                    self.cloud_error(&e)
                ))
                .with_code("unread"))
            }
            Ok(None) => return Ok(false),
            // This home's, or made before homes had ids: delete_vm decides.
            Ok(Some(_)) => None,
        };
        if let Some(whose) = whose {
            return Err(Failure::new(format!(
                "{name} is still registered: its VM {} is not this stado home's ({whose}), so it was left alone",
                decl.vm_id
            ))
            .with_code("not_this_home"));
        }
        Ok(true)
    }

    /// Removes the host's registry entry (saved), then its key files.
    fn forget_host(&self, registry: &mut Held, name: &str) -> Result<(), Failure> {
        registry.remove_target(name);
        registry.save()?;
        if let Some(sim) = &self.sim {
            let _ = sim.forget(name);
        }
        let left = keys::remove_host_files(&self.home, name);
        if !left.is_empty() {
            tracing::warn!(host = name, files = ?left, "could not remove the host's key files");
        }
        Ok(())
    }
}
