//! `delete_named`: what this owner's creates of a name made in a pool, without the machine's id:
//! the VM if it stands, and the interface, security group, public address and OS disk of that
//! name that carry this owner's and this pool's tags (a create stopped or failed before its VM
//! leaves them, and no listing shows them).

use super::*;

impl AzureProvider {
    /// [`Provider::delete_named`]: the VM of `name` when it is this owner's of `pool` (deleted as
    /// [`Provider::delete`] deletes it), then the pieces of that name tagged as this owner's of
    /// `pool`. A VM of that name of another owner or pool holds the pieces of that name: nothing
    /// is touched.
    pub(crate) async fn delete_by_name(&self, pool: &str, name: &str) -> Result<bool> {
        validate_pool(pool)?;
        validate_name(name)?;
        // No create makes a longer name here: refused as a create refuses it.
        super::create::check_name_length(name)?;
        // Read as a delete reads it: a VM a create made a moment ago that reads do not show yet
        // is waited for, lest its pieces be taken for a stopped create's.
        let vm = match self.read_vm(name, false).await? {
            // A create of the name stopped before it answered, once Azure may have held its VM:
            // the VM may not show yet, nor its interface name it.
            None if self.inner.stopped.contains(pool, name) => {
                let until = self.inner.stopped.unseen_until(pool, name);
                self.wait_visible(name, false, until).await?
            }
            vm => vm,
        };
        if vm
            .as_ref()
            .is_some_and(|vm| !is_in_pool(&vm.tags, pool, &self.inner.owner))
        {
            tracing::debug!(vm = name, pool, "another owner's or pool's VM: left alone");
            return Ok(false);
        }
        let swept = self.delete_resources(name, vm.as_ref(), pool).await;
        if vm.is_some() && !swept.left.iter().any(|l| l.res.part == Part::Vm) {
            self.forget(name);
        }
        if swept.left.is_empty() {
            self.inner.stopped.forget(pool, name);
            return Ok(swept.removed);
        }
        Err(Error::leftovers(
            Error::other(format!(
                "Azure did not release everything of {name} in pool {pool}; deleting it by name again retries"
            )),
            swept.left.iter().map(Left::to_string).collect(),
        ))
    }
}
