//! What every operation of the provider shares: the resources of a machine and how they are named
//! and told in messages, the URLs of the resource group, reading a VM (waiting for a new one to show),
//! its addresses, and deleting a resource to its end.

use super::*;

/// The resources of one machine.
pub(crate) struct Names {
    pub vm: String,
    pub pip: String,
    pub nsg: String,
    pub nic: String,
    pub disk: String,
}

impl Names {
    pub fn of(name: &str) -> Names {
        Names {
            vm: name.to_string(),
            pip: format!("{name}-ip"),
            nsg: format!("{name}-nsg"),
            nic: format!("{name}-nic"),
            disk: format!("{name}-osdisk"),
        }
    }
}

/// The DNS label of a machine's address: its name when that is a valid label (a letter first, 3 to
/// 63 characters), else `vm-<name>`. With `domainNameLabelScope: ResourceGroupReuse` Azure adds a hash
/// of the tenant, subscription, resource group and label, so the name is unique across Azure
/// (`<label>-<hash>.<location>.cloudapp.azure.com`).
pub(crate) fn dns_label(name: &str) -> String {
    let ok = name.len() >= 3 && name.as_bytes()[0].is_ascii_lowercase();
    if ok {
        name.to_string()
    } else {
        format!("vm-{name}")
    }
}

/// Whether `key` is [`CREATE_TAG`] (tag names are compared without case on Azure).
pub(crate) fn is_create_tag(key: &str) -> bool {
    key.eq_ignore_ascii_case(CREATE_TAG)
}

/// Whether a VM with `tags` was made by the create whose token is `token`. A VM without the tag
/// (made by an older driver) is an earlier create's.
pub(crate) fn made_by(tags: &Labels, token: &str) -> bool {
    tags.iter().any(|(k, v)| is_create_tag(k) && v == token)
}

/// Where the addresses of a machine come from.
#[derive(Default)]
pub(crate) struct Addresses {
    pub(crate) public: String,
    pub(crate) private: String,
    pub(crate) fqdn: String,
}

/// The kinds of resource a machine is made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Part {
    Vm,
    Interface,
    SecurityGroup,
    PublicIp,
    Disk,
}

impl Part {
    /// The kind's name in messages and leftovers.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Part::Vm => "VM",
            Part::Interface => "interface",
            Part::SecurityGroup => "security group",
            Part::PublicIp => "public IP",
            Part::Disk => "OS disk",
        }
    }
}

/// One resource of a machine: its kind and name (`VM vm-a`, `interface vm-a-nic`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Res {
    pub part: Part,
    pub name: String,
}

impl Res {
    pub(crate) fn new(part: Part, name: &str) -> Res {
        Res {
            part,
            name: name.to_string(),
        }
    }
}

impl std::fmt::Display for Res {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.part.label(), self.name)
    }
}

/// A resource that remains after a delete, with why (none when it stands because another did).
pub(crate) struct Left {
    pub(crate) res: Res,
    pub(crate) why: Option<String>,
}

impl Left {
    pub(crate) fn because(res: Res, e: &Error) -> Left {
        Left {
            res,
            why: Some(e.to_string()),
        }
    }

    pub(crate) fn standing(res: Res) -> Left {
        Left { res, why: None }
    }
}

/// `vm_and_disk`, then the machine's interface, security group and address (when machines have
/// one: `public_ip`), which stand with them.
pub(crate) fn with_network(vm_and_disk: [Left; 2], names: &Names, public_ip: bool) -> Vec<Left> {
    let mut network = vec![
        Res::new(Part::Interface, &names.nic),
        Res::new(Part::SecurityGroup, &names.nsg),
    ];
    if public_ip {
        network.push(Res::new(Part::PublicIp, &names.pip));
    }
    vm_and_disk
        .into_iter()
        .chain(network.into_iter().map(Left::standing))
        .collect()
}

impl std::fmt::Display for Left {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.why {
            Some(why) => write!(f, "{} ({why})", self.res),
            None => write!(f, "{}", self.res),
        }
    }
}

/// Whether two Azure locations are the same (`westeurope`, `WestEurope`, `West Europe`).
pub(crate) fn same_location(a: &str, b: &str) -> bool {
    let norm = |s: &str| -> String {
        s.chars()
            .filter(|c| !c.is_whitespace())
            .flat_map(char::to_lowercase)
            .collect()
    };
    norm(a) == norm(b)
}

/// The properties of an inbound rule admitting `sources` on TCP 22 at `priority`, to every address
/// of the group it is on.
pub(crate) fn ssh_rule(sources: &[String], priority: u32) -> Value {
    json!({
        "protocol": "Tcp", "sourcePortRange": "*", "destinationPortRange": "22",
        "sourceAddressPrefixes": sources, "destinationAddressPrefix": "*",
        "access": "Allow", "priority": priority, "direction": "Inbound",
        "description": "orca: SSH from the admitted addresses only"
    })
}

impl AzureProvider {
    pub(crate) fn rg_path(&self) -> String {
        format!(
            "{}/resourceGroups/{}",
            self.client().sub_path(),
            self.cfg().resource_group
        )
    }

    pub(crate) fn id(&self, type_name: &str, name: &str) -> String {
        format!("{}/providers/{type_name}/{name}", self.rg_path())
    }

    pub(crate) fn subnet_id(&self, location: &str) -> String {
        format!(
            "{}/resourceGroups/{}/providers/Microsoft.Network/virtualNetworks/{}-{location}/subnets/{}",
            self.client().sub_path(),
            self.cfg().vnet_resource_group,
            self.cfg().vnet,
            self.cfg().subnet
        )
    }

    pub(crate) fn vm_id(&self, name: &str) -> String {
        self.id("Microsoft.Compute/virtualMachines", name)
    }

    pub(crate) fn vm_url(&self, name: &str, expand: bool) -> String {
        let u = self.client().url(&self.vm_id(name), COMPUTE_API);
        if expand {
            format!("{u}&$expand=instanceView")
        } else {
            u
        }
    }

    pub(crate) fn net_url(&self, type_name: &str, name: &str) -> String {
        self.client().url(&self.id(type_name, name), NETWORK_API)
    }

    /// Notes that this provider made VM `id` now: for a visibility window, or until a read shows
    /// it, a "not found" for it is confirmed by later reads before it is believed.
    pub(crate) fn remember(&self, id: &str) {
        self.inner.recent.note(id.to_ascii_lowercase());
    }

    /// Forgets that this provider made `id` (it deleted it: a "not found" now is believed).
    pub(crate) fn forget(&self, id: &str) {
        self.inner.recent.forget(&id.to_ascii_lowercase());
    }

    /// Until when a "not found" for VM `id` is not believed, or `None` when it is believed at once:
    /// the end of the window of a VM this provider made a moment ago, else a window from now when
    /// its interface names it (a create makes the interface first and Azure attaches it when the
    /// VM is made, before every read shows the VM).
    pub(crate) async fn unseen_until(&self, id: &str) -> Result<Option<Instant>> {
        if let Some(until) = self.inner.recent.unseen_until(&id.to_ascii_lowercase()) {
            return Ok(Some(until));
        }
        let names = Names::of(id);
        let nic: Option<Nic> = self
            .client()
            .get(
                "read interface",
                &self.net_url("Microsoft.Network/networkInterfaces", &names.nic),
            )
            .await?;
        let vm_suffix = format!("/virtualmachines/{}", id.to_ascii_lowercase());
        let named = nic
            .as_ref()
            .and_then(Nic::vm_id)
            .is_some_and(|v| v.to_ascii_lowercase().ends_with(&vm_suffix));
        Ok(named.then(|| Instant::now() + self.cfg().visibility_window))
    }

    /// Reads VM `id` (with its instance view when `expand`). A "not found" for a VM that may be new is
    /// confirmed by later reads, for at most the visibility window.
    pub(crate) async fn read_vm(&self, id: &str, expand: bool) -> Result<Option<Vm>> {
        let url = self.vm_url(id, expand);
        if let Some(vm) = self.get_vm(id, &url).await? {
            return Ok(Some(vm));
        }
        match self.unseen_until(id).await? {
            Some(until) => self.wait_visible(id, expand, until).await,
            None => Ok(None),
        }
    }

    /// Reads VM `id`, which a read just did not find, until it shows or `until` passes
    /// ([`kit::read_until_seen`]; the pause grows with the retry policy's backoff, from 20 ms to
    /// 5 s); `None` then: the "not found" is believed.
    pub(crate) async fn wait_visible(
        &self,
        id: &str,
        expand: bool,
        until: Instant,
    ) -> Result<Option<Vm>> {
        let url = self.vm_url(id, expand);
        let pause = |n: u32| {
            self.cfg()
                .retry
                .backoff(n)
                .max(Duration::from_millis(20))
                .min(Duration::from_secs(5))
        };
        // The read that brought the caller here is the first: the loop pauses before its next.
        let mut missed = true;
        kit::read_until_seen(until, pause, || {
            let known = std::mem::take(&mut missed);
            let url = &url;
            async move {
                if known {
                    return Ok(None);
                }
                self.get_vm(id, url).await
            }
        })
        .await
    }

    /// One read of VM `id` at `url`. A VM a read has shown is no longer new: a later "not found"
    /// means it went (a delete whose caller stopped waiting, say), not that reads lag behind its
    /// create, and is believed at once.
    pub(crate) async fn get_vm(&self, id: &str, url: &str) -> Result<Option<Vm>> {
        let vm = self.client().get::<Vm>("read VM", url).await?;
        if vm.is_some() {
            self.forget(id);
        }
        Ok(vm)
    }

    /// VM `id`, checked to be this owner's; `None` when there is none.
    pub(crate) async fn owned_vm(&self, id: &str, expand: bool) -> Result<Option<Vm>> {
        validate_id(id)?;
        let vm = self.read_vm(id, expand).await?;
        if let Some(vm) = &vm {
            kit::check_owned(id, &vm.tags, &self.inner.owner)?;
        }
        Ok(vm)
    }

    pub(crate) async fn owned_existing(&self, id: &str, expand: bool) -> Result<Vm> {
        self.owned_vm(id, expand)
            .await?
            .ok_or_else(|| Error::not_found(format!("virtual machine {id}")))
    }

    /// The machine of `vm`, with `addr`.
    pub(crate) fn machine_of(
        &self,
        vm: &Vm,
        view: Option<&InstanceView>,
        addr: Addresses,
    ) -> Machine {
        let (status, cloud_status) = vm.power(view);
        let mut m = Machine::new(&vm.name, &vm.name);
        m.status = status;
        m.cloud_status = cloud_status;
        m.machine_type = vm.properties.hardware_profile.vm_size.clone();
        m.location = vm.location.clone();
        m.address = addr.public;
        m.private_address = addr.private;
        m.fqdn = addr.fqdn;
        m.created_at = vm.created_at();
        m.pool = pool_of(&vm.tags);
        m.labels = vm
            .tags
            .iter()
            .filter(|(k, _)| !is_create_tag(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        m
    }

    /// The addresses of `vm`, read from its interface and public address.
    pub(crate) async fn addresses_of(&self, vm: &Vm) -> Result<Addresses> {
        let mut a = Addresses::default();
        let Some(nic_id) = vm.properties.network_profile.network_interfaces.first() else {
            return Ok(a);
        };
        let nic: Option<Nic> = self
            .client()
            .get(
                "read interface",
                &self.client().url(&nic_id.id, NETWORK_API),
            )
            .await?;
        let Some(nic) = nic else {
            return Ok(a);
        };
        a.private = nic.private_address();
        let pip_id = nic
            .properties
            .ip_configurations
            .iter()
            .find_map(|c| c.properties.public_ip_address.as_ref())
            .map(|p| p.id.clone());
        if let Some(pip_id) = pip_id.filter(|p| !p.is_empty()) {
            if let Some(pip) = self
                .client()
                .get::<PublicIp>("read public IP", &self.client().url(&pip_id, NETWORK_API))
                .await?
            {
                a.public = pip.properties.ip_address.clone();
                a.fqdn = pip.fqdn();
            }
        }
        Ok(a)
    }

    /// Machine `id` as read now (this owner's; not found when absent).
    pub(crate) async fn machine_now(&self, id: &str) -> Result<Machine> {
        let vm = self.owned_existing(id, true).await?;
        let addr = self.addresses_of(&vm).await?;
        Ok(self.machine_of(&vm, None, addr))
    }

    /// Reads a resource until its provisioning state is final ([`kit::poll`]).
    pub(crate) async fn settle(&self, what: &str, url: &str) -> Result<Value> {
        kit::poll(
            &format!("provisioning of {what}"),
            self.cfg().poll_interval,
            self.cfg().operation_timeout,
            || async {
                let Some(v) = self
                    .client()
                    .get::<Value>(&format!("read {what}"), url)
                    .await?
                else {
                    return Err(Error::transient(format!(
                        "{what} vanished while being adopted"
                    )));
                };
                let state: Tagged = decode(what, v.clone())?;
                match state.properties.provisioning_state.as_str() {
                    "Succeeded" | "" => Ok(Some(v)),
                    "Failed" => Err(Error::other(format!(
                        "{what} is in provisioning state Failed"
                    ))),
                    _ => Ok(None),
                }
            },
        )
        .await
    }

    /// Deletes `url` and follows it to its end, then confirms it is gone. 404 is gone.
    pub(crate) async fn remove(&self, what: &str, url: &str) -> Result<()> {
        if self.delete_request(what, url).await? {
            self.confirm_gone(what, url).await?;
        }
        Ok(())
    }

    /// Sends the `DELETE` of `url` and follows it to its end; `false` when Azure answered 404.
    pub(crate) async fn delete_request(&self, what: &str, url: &str) -> Result<bool> {
        let op = format!("delete {what}");
        match self
            .client()
            .call(&op, Method::DELETE, url, None, Condition::None)
            .await
        {
            Ok(a) => {
                self.client().wait(&op, &a).await?;
                Ok(true)
            }
            Err(Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Reads `url`, whose delete ended, to confirm it is gone.
    pub(crate) async fn confirm_gone(&self, what: &str, url: &str) -> Result<()> {
        match self
            .client()
            .get::<Tagged>(&format!("confirm {what} gone"), url)
            .await?
        {
            None => Ok(()),
            Some(v) => Err(Error::transient(format!(
                "{what} is still there after its delete ended (state {})",
                v.properties.provisioning_state
            ))),
        }
    }

    /// [`AzureProvider::remove`] of an interface, waiting out the reservation Azure puts on the
    /// interface of a VM that failed (`NicReservedForAnotherVm`, about 180 s), for at most
    /// `wait`.
    pub(crate) async fn remove_interface(
        &self,
        what: &str,
        url: &str,
        wait: Duration,
    ) -> Result<()> {
        let deadline = Instant::now() + wait;
        loop {
            match self.remove(what, url).await {
                Err(e) if e.code() == Some("NicReservedForAnotherVm") => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(e.prefixed(
                            "Azure holds it for the VM it was made for (about 180 s); deleting the machine again after that removes it",
                        ));
                    }
                    tracing::debug!(what, "interface reserved for a failed VM; waiting");
                    tokio::time::sleep(left.min(Duration::from_secs(15))).await;
                }
                other => return other,
            }
        }
    }
}
