//! `machines` and `machine`: the pool's VMs with their power states and addresses.

use super::*;

impl AzureProvider {
    /// [`Provider::machines`]: the pool's VMs of this owner, each with its power state and addresses.
    pub(crate) async fn list_pool(&self, pool: &str) -> Result<Vec<Machine>> {
        validate_pool(pool)?;
        // The resource group's VMs (the model: tags, size, interfaces). Resource Manager cannot filter
        // a VM list by tag, and neither `statusOnly` nor an unfiltered `$expand=instanceView` exists
        // at resource-group scope, so each pool VM's power state is read on its own (at most eight at
        // once); the addresses come from the interface and address lists. Every call stays inside
        // the resource group: a principal scoped to it can list.
        let client = self.client();
        // The list of every resource of `kind` in the resource group.
        let list_url =
            |kind: &str, api| client.url(&format!("{}/providers/{kind}", self.rg_path()), api);
        let vms: Vec<Vm> = client
            .list::<Vm>(
                "list VMs",
                &list_url("Microsoft.Compute/virtualMachines", COMPUTE_API),
            )
            .await?
            .into_iter()
            .filter(|vm| is_in_pool(&vm.tags, pool, &self.inner.owner))
            .collect();
        if vms.is_empty() {
            return Ok(Vec::new());
        }
        let urls: Vec<String> = vms
            .iter()
            .map(|vm| {
                client.url(
                    &format!("{}/instanceView", self.vm_id(&vm.name)),
                    COMPUTE_API,
                )
            })
            .collect();
        let views: Vec<Result<Option<InstanceView>>> = futures::stream::iter(urls)
            .map(|url| async move { client.get::<InstanceView>("read VM state", &url).await })
            .buffered(8)
            .collect()
            .await;
        let nics: Vec<Nic> = client
            .list(
                "list interfaces",
                &list_url("Microsoft.Network/networkInterfaces", NETWORK_API),
            )
            .await?;
        let pips: Vec<PublicIp> = client
            .list(
                "list public IPs",
                &list_url("Microsoft.Network/publicIPAddresses", NETWORK_API),
            )
            .await?;
        let nic_by_id: HashMap<String, &Nic> = nics
            .iter()
            .map(|n| (n.id.to_ascii_lowercase(), n))
            .collect();
        let pip_by_nic: HashMap<String, &PublicIp> = pips
            .iter()
            .filter_map(|p| p.nic_id().map(|n| (n, p)))
            .collect();
        let mut out = Vec::new();
        for (vm, view) in vms.iter().zip(views) {
            // A VM gone between the list and its read is gone.
            let Some(view) = view? else { continue };
            let mut addr = Addresses::default();
            if let Some(nic_ref) = vm.properties.network_profile.network_interfaces.first() {
                let key = nic_ref.id.to_ascii_lowercase();
                if let Some(nic) = nic_by_id.get(&key) {
                    addr.private = nic.private_address();
                }
                if let Some(pip) = pip_by_nic.get(&key) {
                    addr.public = pip.properties.ip_address.clone();
                    addr.fqdn = pip.fqdn();
                }
            }
            out.push(self.machine_of(vm, Some(&view), addr));
        }
        Ok(out)
    }

    /// [`Provider::machine`]: machine `id`, this owner's, with its addresses.
    pub(crate) async fn read_machine(&self, id: &str) -> Result<Option<Machine>> {
        let Some(vm) = self.owned_vm(id, true).await? else {
            return Ok(None);
        };
        let addr = self.addresses_of(&vm).await?;
        Ok(Some(self.machine_of(&vm, None, addr)))
    }

    /// [`Provider::machine_named`]: one read of the VM by its name (the machine's id), which is this
    /// owner's machine of `pool` when its tags say so, then its addresses; not the pool's listing.
    pub(crate) async fn machine_by_name(&self, pool: &str, name: &str) -> Result<Option<Machine>> {
        validate_pool(pool)?;
        validate_name(name)?;
        let Some(vm) = self.read_vm(name, true).await? else {
            return Ok(None);
        };
        if !is_in_pool(&vm.tags, pool, &self.inner.owner) {
            return Ok(None);
        }
        let addr = self.addresses_of(&vm).await?;
        Ok(Some(self.machine_of(&vm, None, addr)))
    }
}
