//! [`AzureProvider`]: the [`Provider`] contract on Azure Resource Manager.
//!
//! A machine is a VM named by the spec's name (its orca id is that name: unique in the resource
//! group), with `<name>-ip` (static Standard public address with a DNS name), `<name>-nsg` (its own
//! security group admitting the SSH sources on TCP 22 only), `<name>-nic` (interface in
//! `<vnet>-<location>/<subnet>`, in the admission group's application security group when the spec
//! names one) and the OS disk `<name>-osdisk`. The VM owns its interface, address and disk
//! (`deleteOption: Delete`): deleting the VM deletes them, so a VM that failed is removed with what it
//! holds (Azure reserves a failed VM's interface for about 180 s and refuses to delete it on its
//! own). The VM, address, security group and interface carry the ownership tags; the OS disk, made by
//! Azure from the VM, carries none.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine as _;
use futures::StreamExt;
use orca_machines::kit::{self, Attempts};
use orca_machines::labels::{is_in_pool, is_owned_by, ownership_labels, pool_of, Labels};
use orca_machines::spec::validate_token;
use orca_machines::{
    docker_arch, validate_id, validate_owner, validate_pool, Arch, Capabilities, Created,
    CreditBalance, Error, Machine, MachineLabels, MachineSpec, Price, Provider, Resized, Result,
    SpecOptions, SshAdmission, Status,
};
use reqwest::Method;
use serde_json::{json, Value};
use tokio::time::Instant;

use crate::client::{decode, Client, Condition, COMPUTE_API, DISKS_API, NETWORK_API, SKUS_API};
use crate::config::{Config, ImageUrn, URN_RULE};
use crate::model::{InstanceView, Nic, PublicIp, Sku, Tagged, Vm, VmSize};

/// The driver's kind.
pub const KIND: &str = "azure";

/// The longest machine name: the resources add `-osdisk` to it.
pub const MAX_NAME: usize = 58;

/// The largest OS disk Azure makes (GiB).
pub const MAX_OS_DISK_GB: u32 = 4095;

/// The name of the inbound SSH rule on a machine's own security group.
pub const SSH_RULE: &str = "orca-ssh";

/// Machines on Azure, as one owner's.
#[derive(Clone)]
pub struct AzureProvider {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) config: Config,
    pub(crate) client: Client,
    pub(crate) owner: String,
    /// The size catalogue of each location read so far: size (lower case) -> architecture.
    skus: Mutex<HashMap<String, Arc<HashMap<String, Arch>>>>,
    /// Machines this provider made, and when: a "not found" for one of them is not believed at once.
    recent: Mutex<HashMap<String, Instant>>,
}

impl std::fmt::Debug for AzureProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AzureProvider")
            .field("owner", &self.inner.owner)
            .field("config", &self.inner.config)
            .finish()
    }
}

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

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Where the addresses of a machine come from.
#[derive(Default)]
struct Addresses {
    public: String,
    private: String,
    fqdn: String,
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
    res: Res,
    why: Option<String>,
}

impl Left {
    fn because(res: Res, e: &Error) -> Left {
        Left {
            res,
            why: Some(e.to_string()),
        }
    }

    fn standing(res: Res) -> Left {
        Left { res, why: None }
    }
}

/// `vm_and_disk`, then the machine's interface, security group and address (when machines have
/// one: `public_ip`), which stand with them.
fn with_network(vm_and_disk: [Left; 2], names: &Names, public_ip: bool) -> Vec<Left> {
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

/// A resource a create made or adopted, with its URL.
struct MadeRes {
    res: Res,
    url: String,
    /// Found, not made, by this call (a retried create's, or an existing machine's).
    adopted: bool,
}

/// What a create had made or adopted, newest last.
type Made = Vec<MadeRes>;

fn made_res(res: &Res, url: &str, adopted: bool) -> MadeRes {
    MadeRes {
        res: res.clone(),
        url: url.to_string(),
        adopted,
    }
}

impl AzureProvider {
    /// A provider for `owner` (empty for none) with `config`. No network call.
    pub async fn new(config: Config, owner: &str) -> Result<AzureProvider> {
        validate_owner(owner)?;
        let token = config.token_source()?;
        let client = Client::new(&config, token)?;
        Ok(AzureProvider {
            inner: Arc::new(Inner {
                config,
                client,
                owner: owner.to_string(),
                skus: Mutex::new(HashMap::new()),
                recent: Mutex::new(HashMap::new()),
            }),
        })
    }

    /// The settings in use.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    pub(crate) fn client(&self) -> &Client {
        &self.inner.client
    }

    pub(crate) fn cfg(&self) -> &Config {
        &self.inner.config
    }

    pub(crate) fn owner_name(&self) -> &str {
        &self.inner.owner
    }

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

    fn vm_url(&self, name: &str, expand: bool) -> String {
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

    fn remember(&self, id: &str) {
        let mut r = lock(&self.inner.recent);
        let window = self.cfg().visibility_window;
        r.retain(|_, at| at.elapsed() < window);
        r.insert(id.to_ascii_lowercase(), Instant::now());
    }

    /// Forgets that this provider made `id` (it deleted it: a "not found" now is believed).
    fn forget(&self, id: &str) {
        lock(&self.inner.recent).remove(&id.to_ascii_lowercase());
    }

    fn is_recent(&self, id: &str) -> bool {
        let mut r = lock(&self.inner.recent);
        let window = self.cfg().visibility_window;
        r.retain(|_, at| at.elapsed() < window);
        r.contains_key(&id.to_ascii_lowercase())
    }

    /// Whether VM `id` may exist although a read found none: this provider made it a moment ago,
    /// or its interface names it (a create makes the interface first and Azure attaches it when the
    /// VM is made, before every read shows the VM).
    async fn may_be_new(&self, id: &str) -> Result<bool> {
        if self.is_recent(id) {
            return Ok(true);
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
        Ok(nic
            .as_ref()
            .and_then(Nic::vm_id)
            .is_some_and(|v| v.to_ascii_lowercase().ends_with(&vm_suffix)))
    }

    /// Reads VM `id` (with its instance view when `expand`). A "not found" for a VM that may be new is
    /// confirmed by later reads, for at most the visibility timeout.
    pub(crate) async fn read_vm(&self, id: &str, expand: bool) -> Result<Option<Vm>> {
        let url = self.vm_url(id, expand);
        if let Some(vm) = self.client().get::<Vm>("read VM", &url).await? {
            return Ok(Some(vm));
        }
        if !self.may_be_new(id).await? {
            return Ok(None);
        }
        self.wait_visible(id, expand).await
    }

    /// Reads VM `id` until it shows, for at most the visibility timeout.
    ///
    /// Its own loop, not `kit::poll`: the pause grows with the retry policy's backoff, and the end
    /// of the window is an answer (`None`: the "not found" is believed), not a passing failure.
    async fn wait_visible(&self, id: &str, expand: bool) -> Result<Option<Vm>> {
        let url = self.vm_url(id, expand);
        let deadline = Instant::now() + self.cfg().visibility_window;
        let mut retry = 0;
        while Instant::now() < deadline {
            let pause = self
                .cfg()
                .retry
                .backoff(retry)
                .max(Duration::from_millis(20))
                .min(Duration::from_secs(5));
            tokio::time::sleep(pause).await;
            retry += 1;
            if let Some(vm) = self.client().get::<Vm>("read VM", &url).await? {
                return Ok(Some(vm));
            }
        }
        Ok(None)
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

    async fn owned_existing(&self, id: &str, expand: bool) -> Result<Vm> {
        self.owned_vm(id, expand)
            .await?
            .ok_or_else(|| Error::not_found(format!("virtual machine {id}")))
    }

    /// The machine of `vm`, with `addr`.
    fn machine_of(&self, vm: &Vm, view: Option<&InstanceView>, addr: Addresses) -> Machine {
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
        m.labels = vm.tags.clone();
        m
    }

    /// The addresses of `vm`, read from its interface and public address.
    async fn addresses_of(&self, vm: &Vm) -> Result<Addresses> {
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

    async fn power(&self, id: &str, action: &str) -> Result<Machine> {
        self.owned_existing(id, false).await?;
        self.power_action(id, action).await?;
        self.machine_now(id).await
    }

    /// `POST {vm}/{action}` (`start`, `deallocate`), followed to its end.
    async fn power_action(&self, id: &str, action: &str) -> Result<()> {
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
    async fn resizable_to(&self, id: &str) -> Result<Vec<String>> {
        let url = self
            .client()
            .url(&format!("{}/vmSizes", self.vm_id(id)), COMPUTE_API);
        let sizes: Vec<VmSize> = self.client().list("list VM sizes", &url).await?;
        Ok(sizes.into_iter().map(|s| s.name).collect())
    }

    /// `PATCH` of VM `id`'s size, followed to its end; no stock is named with the size and location.
    async fn patch_size(&self, id: &str, machine_type: &str, location: &str) -> Result<()> {
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

    /// The size catalogue of `location` (`$filter=location eq '<location>'`), read once and cached.
    async fn catalogue(&self, location: &str) -> Result<Arc<HashMap<String, Arch>>> {
        let key = location.to_ascii_lowercase();
        if let Some(c) = lock(&self.inner.skus).get(&key).cloned() {
            return Ok(c);
        }
        let filter: String =
            url::form_urlencoded::byte_serialize(format!("location eq '{location}'").as_bytes())
                .collect();
        let url = format!(
            "{}&$filter={filter}",
            self.client().url(
                &format!(
                    "{}/providers/Microsoft.Compute/skus",
                    self.client().sub_path()
                ),
                SKUS_API,
            )
        );
        let skus: Vec<Sku> = self.client().list("list resource SKUs", &url).await?;
        let map: HashMap<String, Arch> = skus
            .into_iter()
            .filter(|s| s.resource_type == "virtualMachines" && !s.name.is_empty())
            .map(|s| {
                let arch = s.architecture().map(docker_arch).unwrap_or(Arch::Amd64);
                (s.name.to_ascii_lowercase(), arch)
            })
            .collect();
        let map = Arc::new(map);
        lock(&self.inner.skus).insert(key, map.clone());
        Ok(map)
    }

    /// `machine_type`'s architecture from `location`'s catalogue.
    async fn arch_in(&self, machine_type: &str, location: &str) -> Result<Arch> {
        let map = self.catalogue(location).await?;
        map.get(&machine_type.to_ascii_lowercase())
            .cloned()
            .ok_or_else(|| {
                Error::not_found(format!(
                    "virtual machine size {machine_type} (not offered in {location}: not among its resource SKUs)"
                ))
            })
    }

    /// `PUT` of a new network resource in `location`, followed to its end. The network resource
    /// provider's `PUT` has no `If-None-Match` in its specification, so the resource is read first:
    /// one that exists is adopted if it carries this owner's tags of `pool` and is in `location` (a
    /// retried create), and refused as [`Error::AlreadyExists`] otherwise, untouched. `made` learns
    /// the URL as soon as Azure may hold the resource.
    async fn put_network(
        &self,
        res: &Res,
        url: &str,
        body: &Value,
        pool: &str,
        made: &mut Made,
    ) -> Result<Value> {
        let what = res.to_string();
        let location = body["location"].as_str().unwrap_or_default();
        if let Some(found) = self
            .client()
            .get::<Value>(&format!("read {what}"), url)
            .await?
        {
            let tags: Tagged = decode(&what, found)?;
            if !is_in_pool(&tags.tags, pool, &self.inner.owner) {
                return Err(Error::already_exists(format!(
                    "{what} exists and is not this owner's ({:?}) of pool {pool}",
                    self.inner.owner
                )));
            }
            if !same_location(&tags.location, location) {
                return Err(Error::already_exists(format!(
                    "{what} exists in {}, not in {location}: a machine of that name is elsewhere",
                    tags.location
                )));
            }
            made.push(made_res(res, url, true));
            return self.settle(&what, url).await;
        }
        let op = format!("create {what}");
        match self
            .client()
            .call(&op, Method::PUT, url, Some(body), Condition::None)
            .await
        {
            Ok(a) => {
                made.push(made_res(res, url, false));
                self.client().wait(&op, &a).await?;
                Ok(a.body)
            }
            Err(e) => {
                if e.is_retryable() {
                    // The PUT may have been served: clean-up must look.
                    made.push(made_res(res, url, false));
                }
                Err(e)
            }
        }
    }

    /// Reads a resource until its provisioning state is final ([`kit::poll`]).
    async fn settle(&self, what: &str, url: &str) -> Result<Value> {
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
        let op = format!("delete {what}");
        match self
            .client()
            .call(&op, Method::DELETE, url, None, Condition::None)
            .await
        {
            Ok(a) => self.client().wait(&op, &a).await?,
            Err(Error::NotFound { .. }) => return Ok(()),
            Err(e) => return Err(e),
        }
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
    async fn remove_interface(&self, what: &str, url: &str, wait: Duration) -> Result<()> {
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

    /// Removes what a failed create made, newest first (the VM first: it takes its interface,
    /// address and disk with it); names what could not be removed. A capacity or quota outcome
    /// stays what it is, with what remains named in its message ([`keep_outcome`]): callers fall
    /// back on it (issue 11 item 2); any other failure becomes [`Error::Leftovers`].
    async fn undo(&self, made: &Made, error: Error) -> Error {
        let mut left = Vec::new();
        for m in made.iter().rev() {
            let what = m.res.to_string();
            let removed = if m.res.part == Part::Interface {
                self.remove_interface(&what, &m.url, self.cfg().reservation_wait)
                    .await
            } else {
                self.remove(&what, &m.url).await
            };
            if let Err(e) = removed {
                tracing::warn!(what = %what, error = %e, "clean-up after a failed create failed");
                left.push(Left::because(m.res.clone(), &e));
                if m.res.part == Part::Vm {
                    // A VM that stands keeps the OS disk its create made (its delete would take it).
                    left.push(Left::standing(Res::new(
                        Part::Disk,
                        &Names::of(&m.res.name).disk,
                    )));
                }
            }
        }
        if left.is_empty() {
            error
        } else {
            keep_outcome(error, left.iter().map(Left::to_string).collect())
        }
    }

    fn vm_body(
        &self,
        spec: &MachineSpec,
        names: &Names,
        image: &ImageUrn,
        tags: &Labels,
        nic_id: &str,
        keys: &[String],
    ) -> Value {
        let s = self.cfg();
        let mut os_disk = json!({
            "name": names.disk,
            "createOption": "FromImage",
            "deleteOption": "Delete",
            "caching": "ReadWrite",
            "managedDisk": {"storageAccountType": "StandardSSD_LRS"}
        });
        if let Some(gb) = spec.disk_gb.or(s.os_disk_gb) {
            os_disk["diskSizeGB"] = json!(gb);
        }
        let public_keys: Vec<Value> = keys
            .iter()
            .map(|k| {
                json!({
                    "path": format!("/home/{}/.ssh/authorized_keys", s.admin_user),
                    "keyData": k,
                })
            })
            .collect();
        let mut os_profile = json!({
            "computerName": spec.name,
            "adminUsername": s.admin_user,
            "linuxConfiguration": {
                "disablePasswordAuthentication": true,
                "ssh": {"publicKeys": public_keys}
            }
        });
        if !spec.user_data.is_empty() {
            os_profile["customData"] =
                json!(base64::engine::general_purpose::STANDARD.encode(spec.user_data.as_bytes()));
        }
        json!({
            "location": spec.location,
            "tags": tags,
            "properties": {
                "hardwareProfile": {"vmSize": spec.machine_type},
                "storageProfile": {
                    "imageReference": {
                        "publisher": image.publisher, "offer": image.offer,
                        "sku": image.sku, "version": image.version,
                    },
                    "osDisk": os_disk,
                },
                "osProfile": os_profile,
                "networkProfile": {"networkInterfaces": [
                    {"id": nic_id, "properties": {"primary": true, "deleteOption": "Delete"}}
                ]},
            }
        })
    }

    /// Makes the machine's four resources; answers the machine, made by this call or adopted from
    /// an earlier one.
    async fn create_inner(&self, spec: &MachineSpec, made: &mut Made) -> Result<Created> {
        let image = match &spec.image {
            Some(i) => ImageUrn::parse(i).map_err(|rule| Error::invalid("image", rule))?,
            None => {
                let arch = self.arch_in(&spec.machine_type, &spec.location).await?;
                self.cfg().image_for(&arch)?.clone()
            }
        };
        let names = Names::of(&spec.name);
        let mut tags = ownership_labels(&spec.pool, &self.inner.owner);
        tags.extend(spec.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
        let loc = &spec.location;
        let pip_id = self.id("Microsoft.Network/publicIPAddresses", &names.pip);
        let nsg_id = self.id("Microsoft.Network/networkSecurityGroups", &names.nsg);
        let nic_id = self.id("Microsoft.Network/networkInterfaces", &names.nic);
        let mut keys: Vec<String> = self.cfg().ssh_public_key.iter().cloned().collect();
        keys.extend(spec.ssh_keys.iter().cloned());
        let vm_body = self.vm_body(spec, &names, &image, &tags, &nic_id, &keys);

        // Without a public address (ORCA_AZURE_PUBLIC_IP=false) the machine has its private one.
        let pip = if self.cfg().public_ip {
            Some(
                self.put_network(
                    &Res::new(Part::PublicIp, &names.pip),
                    &self.client().url(&pip_id, NETWORK_API),
                    &json!({
                        "location": loc, "tags": tags,
                        "sku": {"name": "Standard", "tier": "Regional"},
                        "properties": {
                            "publicIPAllocationMethod": "Static",
                            "publicIPAddressVersion": "IPv4",
                            "deleteOption": "Delete",
                            "dnsSettings": {
                                "domainNameLabel": dns_label(&spec.name),
                                "domainNameLabelScope": "ResourceGroupReuse",
                            },
                        }
                    }),
                    &spec.pool,
                    made,
                )
                .await
                .map_err(public_ip_denied)?,
            )
        } else {
            None
        };

        let sources = if spec.ssh_sources.is_empty() {
            &self.cfg().ssh_sources
        } else {
            &spec.ssh_sources
        };
        let mut rules = Vec::new();
        if !sources.is_empty() {
            rules.push(json!({"name": SSH_RULE, "properties": ssh_rule(sources, 100)}));
        }
        self.put_network(
            &Res::new(Part::SecurityGroup, &names.nsg),
            &self.client().url(&nsg_id, NETWORK_API),
            &json!({"location": loc, "tags": tags, "properties": {"securityRules": rules}}),
            &spec.pool,
            made,
        )
        .await?;

        let mut ipcfg = json!({
            "name": "ipconfig1",
            "properties": {
                "primary": true,
                "privateIPAllocationMethod": "Dynamic",
                "subnet": {"id": self.subnet_id(loc)},
            }
        });
        if pip.is_some() {
            ipcfg["properties"]["publicIPAddress"] = json!({ "id": pip_id });
        }
        if let Some(group) = &spec.admission_group {
            ipcfg["properties"]["applicationSecurityGroups"] = json!([{"id": self.id(
                "Microsoft.Network/applicationSecurityGroups",
                &format!("{group}-{loc}")
            )}]);
        }
        let nic = self
            .put_network(
                &Res::new(Part::Interface, &names.nic),
                &self.client().url(&nic_id, NETWORK_API),
                &json!({"location": loc, "tags": tags, "properties": {
                    "networkSecurityGroup": {"id": nsg_id},
                    "ipConfigurations": [ipcfg],
                }}),
                &spec.pool,
                made,
            )
            .await
            .map_err(|e| match (&e, &spec.admission_group) {
                (Error::PermissionDenied { .. }, _) if pip.is_some() => public_ip_denied(e),
                (Error::NotFound { .. }, Some(g)) => e.prefixed(&format!(
                    "the admission group {g} of {loc} (application security group {g}-{loc}) must exist: admit_ssh makes it"
                )),
                _ => e,
            })?;

        // The VM: `If-None-Match: *` makes the PUT a create only (412 when the VM exists).
        let vm_res = Res::new(Part::Vm, &names.vm);
        let what = vm_res.to_string();
        let vm_url = self.vm_url(&names.vm, false);
        let op = format!("create {what}");
        let attempts = Attempts::new();
        let put = self
            .client()
            .call_recorded(
                &op,
                Method::PUT,
                &vm_url,
                Some(&vm_body),
                Condition::IfNoneMatch,
                &attempts,
            )
            .await;
        let met_existing = matches!(put, Err(Error::AlreadyExists { .. }));
        match put {
            Ok(a) => {
                made.push(made_res(&vm_res, &vm_url, false));
                self.client().wait(&op, &a).await?;
            }
            Err(Error::AlreadyExists { .. }) => {
                // Made by this call's own earlier attempt (whose answer was lost), or by an earlier
                // create: adopt it if it is this owner's of this pool.
                let Some(found) = self.read_vm(&names.vm, false).await? else {
                    return Err(Error::transient(format!(
                        "{what} vanished while being adopted"
                    )));
                };
                let size = &found.properties.hardware_profile.vm_size;
                let refused = if !is_in_pool(&found.tags, &spec.pool, &self.inner.owner) {
                    Some(format!(
                        "{what} exists and is not this owner's ({:?}) of pool {}",
                        self.inner.owner, spec.pool
                    ))
                } else if !size.eq_ignore_ascii_case(&spec.machine_type)
                    || !same_location(&found.location, &spec.location)
                {
                    Some(format!(
                        "{what} exists as {size} in {}, not as {} in {}: not the machine asked for",
                        found.location, spec.machine_type, spec.location
                    ))
                } else {
                    None
                };
                if let Some(why) = refused {
                    // What was adopted on the way belongs to the VM that exists: it stays.
                    made.retain(|m| !m.adopted);
                    return Err(Error::already_exists(why));
                }
                made.push(made_res(&vm_res, &vm_url, true));
                self.settle_vm(&names.vm).await?;
            }
            Err(e) => {
                if e.is_retryable() {
                    made.push(made_res(&vm_res, &vm_url, false));
                }
                return Err(e);
            }
        }
        self.remember(&names.vm);
        // A create answers only once reads show the VM.
        let vm = match self.client().get::<Vm>("read VM", &self.vm_url(&names.vm, true)).await? {
            Some(vm) => vm,
            None => self.wait_visible(&names.vm, true).await?.ok_or_else(|| {
                Error::transient(format!(
                    "{what} was made but reads do not show it after {} s; a retried create adopts it",
                    self.cfg().visibility_window.as_secs()
                ))
            })?,
        };
        let mut addr = Addresses::default();
        if let Some(Ok(p)) = pip.map(serde_json::from_value::<PublicIp>) {
            addr.public = p.properties.ip_address.clone();
            addr.fqdn = p.fqdn();
        }
        if let Ok(n) = serde_json::from_value::<Nic>(nic) {
            addr.private = n.private_address();
        }
        let public_missing =
            self.cfg().public_ip && (addr.public.is_empty() || addr.fqdn.is_empty());
        if addr.private.is_empty() || public_missing {
            addr = self.addresses_of(&vm).await?;
        }
        let m = self.machine_of(&vm, None, addr);
        // Only an attempt that ended in a passing failure may have made the VM a 412 met; after
        // throttling or refusals alone, the VM is an earlier call's.
        Ok(if met_existing {
            attempts.found(m)
        } else {
            Created::Machine(m)
        })
    }

    /// Reads a VM being adopted until its provisioning state is final; a failed one answers its
    /// failure.
    async fn settle_vm(&self, name: &str) -> Result<()> {
        kit::poll(
            &format!("provisioning of VM {name}"),
            self.cfg().poll_interval,
            self.cfg().operation_timeout,
            || async {
                let Some(vm) = self.read_vm(name, true).await? else {
                    return Err(Error::transient(format!(
                        "VM {name} vanished while being adopted"
                    )));
                };
                match vm.properties.provisioning_state.as_str() {
                    "Succeeded" | "" => Ok(Some(())),
                    "Failed" => Err(match vm.failure() {
                        Some((code, message)) => crate::client::map_error(
                            None,
                            &crate::model::ErrorDetail {
                                code,
                                message,
                                ..Default::default()
                            },
                            None,
                        ),
                        None => Error::other(format!("VM {name} is in provisioning state Failed")),
                    }),
                    _ => Ok(None),
                }
            },
        )
        .await
    }

    /// Tags the OS disk `res` (read as `found`) as this owner's, of the pool of its VM's `vm_tags`,
    /// keeping its other tags; followed to its end.
    async fn tag_disk(&self, res: &Res, url: &str, found: &Tagged, vm_tags: &Labels) -> Result<()> {
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
    async fn own_disk(&self, res: &Res, url: &str, vm_tags: &Labels) -> Result<()> {
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
    async fn remove_disk(&self, res: &Res, url: &str, vm_tags: Option<&Labels>) -> Option<Left> {
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
    async fn delete_resources(&self, id: &str, vm: Option<&Vm>) -> Vec<Left> {
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

    /// The hourly Linux on-demand price of `machine_type` in `location` (both validated tokens:
    /// they go into an OData filter).
    async fn price(&self, machine_type: &str, location: &str) -> Result<Price> {
        let filter = format!(
            "serviceName eq 'Virtual Machines' and armRegionName eq '{location}' and armSkuName eq '{machine_type}' and priceType eq 'Consumption'"
        );
        let rows = self.client().prices(&filter).await?;
        rows.iter()
            .filter(|r| r.is_linux_on_demand())
            .filter(|r| r.arm_sku_name.eq_ignore_ascii_case(machine_type))
            .min_by(|a, b| {
                a.retail_price
                    .partial_cmp(&b.retail_price)
                    .unwrap_or(std::cmp::Ordering::Equal)
            })
            .map(|r| {
                Price::new(
                    r.retail_price.unwrap_or(0.0),
                    if r.currency_code.is_empty() {
                        "USD"
                    } else {
                        r.currency_code.as_str()
                    },
                )
            })
            .ok_or_else(|| {
                Error::not_found(format!(
                    "an on-demand Linux price of {machine_type} in {location}"
                ))
            })
    }
}

/// The outcome of a failed create whose clean-up left `left` behind: no stock and quota stay what
/// they are (a caller falls back on another offering on them, and the core error has no place for
/// both), with what remains named in their message and logged; anything else is
/// [`Error::Leftovers`]. Deleting the machine's name later removes what remains.
fn keep_outcome(error: Error, left: Vec<String>) -> Error {
    let named = |message: String| {
        format!(
            "{message}; the clean-up could not remove: {} (deleting the machine removes them)",
            left.join(", ")
        )
    };
    match error {
        Error::NoStock {
            machine_type,
            location,
            message,
            context,
        } => {
            tracing::warn!(%machine_type, %location, left = %left.join(", "), "no stock; the clean-up left resources behind");
            Error::NoStock {
                machine_type,
                location,
                message: named(message),
                context,
            }
        }
        Error::Quota { message, context } => {
            tracing::warn!(left = %left.join(", "), "quota exceeded; the clean-up left resources behind");
            Error::Quota {
                message: named(message),
                context,
            }
        }
        other => Error::leftovers(other, left),
    }
}

/// A policy's refusal of the machine's public address (or of an interface carrying one), as the
/// Corp policies of Azure landing zones refuse it: the way out named.
fn public_ip_denied(e: Error) -> Error {
    match e {
        Error::PermissionDenied { .. } if e.code() == Some("RequestDisallowedByPolicy") => e.prefixed(
            "a policy denies the machine's public address (ORCA_AZURE_PUBLIC_IP=false makes machines without one)",
        ),
        e => e,
    }
}

/// Whether two Azure locations are the same (`westeurope`, `WestEurope`, `West Europe`).
fn same_location(a: &str, b: &str) -> bool {
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

fn capabilities() -> Capabilities {
    Capabilities::NONE
        .with_start_stop(true)
        .with_resize(true)
        .with_hourly_price(true)
        // Azure reports no start or stop time: the instance view's power state has none, and the
        // provisioning state's time is that of any last change (a tag included).
        .with_power_times(false)
        .with_private_address(true)
        .with_options(
            SpecOptions::ALL
                .with("network_tags", false)
                .with("max_run_duration", false),
        )
}

#[async_trait]
impl Provider for AzureProvider {
    fn kind(&self) -> &str {
        KIND
    }

    fn owner(&self) -> &str {
        &self.inner.owner
    }

    fn capabilities(&self) -> Capabilities {
        capabilities()
    }

    async fn arch(&self, machine_type: &str) -> Result<Arch> {
        validate_token("machine_type", machine_type)?;
        let key = machine_type.to_ascii_lowercase();
        let read: Vec<Arc<HashMap<String, Arch>>> =
            lock(&self.inner.skus).values().cloned().collect();
        if let Some(a) = read.iter().find_map(|m| m.get(&key)) {
            return Ok(a.clone());
        }
        let location = self.cfg().location.clone();
        self.arch_in(machine_type, &location).await
    }

    async fn create(&self, spec: &MachineSpec) -> Result<Created> {
        spec.validate()?;
        capabilities().check_spec(KIND, spec)?;
        if spec.name.len() > MAX_NAME {
            return Err(Error::invalid(
                "name",
                format!("at most {MAX_NAME} characters on Azure (resource names add a suffix)"),
            ));
        }
        if let Some(i) = &spec.image {
            ImageUrn::parse(i).map_err(|_| Error::invalid("image", URN_RULE))?;
        }
        if spec.disk_gb.is_some_and(|g| g > MAX_OS_DISK_GB) {
            return Err(Error::invalid(
                "disk_gb",
                format!("at most {MAX_OS_DISK_GB} GiB for an Azure OS disk"),
            ));
        }
        if spec.ssh_keys.is_empty() && self.cfg().ssh_public_key.is_none() {
            return Err(Error::invalid(
                "ssh_keys",
                "at least one SSH key: Azure VMs made here refuse passwords; give the spec a key or set ORCA_AZURE_SSH_PUBLIC_KEY",
            ));
        }
        let mut made = Made::new();
        match self.create_inner(spec, &mut made).await {
            Ok(created) => Ok(created),
            Err(e) => {
                // A passing failure: when Azure may hold the VM (it answers it, or cannot be asked),
                // everything stays for the retried create to adopt; when it surely holds none, what
                // was made is removed, and the error stays retryable.
                if e.is_retryable() {
                    match self
                        .client()
                        .get::<Tagged>("read VM", &self.vm_url(&spec.name, false))
                        .await
                    {
                        Ok(None) => return Err(self.undo(&made, e).await),
                        Ok(Some(_)) | Err(_) => return Err(e),
                    }
                }
                let e = e.with_placement(&spec.machine_type, &spec.location);
                match self.undo(&made, e).await {
                    Error::NoStock { message, .. } => Ok(kit::no_stock(spec, message)),
                    other => Err(other),
                }
            }
        }
    }

    async fn machines(&self, pool: &str) -> Result<Vec<Machine>> {
        validate_pool(pool)?;
        // The resource group's VMs (the model: tags, size, interfaces). Resource Manager cannot filter
        // a VM list by tag, and neither `statusOnly` nor an unfiltered `$expand=instanceView` exists
        // at resource-group scope, so each pool VM's power state is read on its own (at most eight at
        // once); the addresses come from the interface and address lists. Every call stays inside
        // the resource group: a principal scoped to it can list.
        let list_url = self.client().url(
            &format!(
                "{}/providers/Microsoft.Compute/virtualMachines",
                self.rg_path()
            ),
            COMPUTE_API,
        );
        let vms: Vec<Vm> = self
            .client()
            .list::<Vm>("list VMs", &list_url)
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
                self.client().url(
                    &format!("{}/instanceView", self.vm_id(&vm.name)),
                    COMPUTE_API,
                )
            })
            .collect();
        let client = self.client();
        let views: Vec<Result<Option<InstanceView>>> = futures::stream::iter(urls)
            .map(|url| async move { client.get::<InstanceView>("read VM state", &url).await })
            .buffered(8)
            .collect()
            .await;
        let nics: Vec<Nic> = self
            .client()
            .list(
                "list interfaces",
                &self.client().url(
                    &format!(
                        "{}/providers/Microsoft.Network/networkInterfaces",
                        self.rg_path()
                    ),
                    NETWORK_API,
                ),
            )
            .await?;
        let pips: Vec<PublicIp> = self
            .client()
            .list(
                "list public IPs",
                &self.client().url(
                    &format!(
                        "{}/providers/Microsoft.Network/publicIPAddresses",
                        self.rg_path()
                    ),
                    NETWORK_API,
                ),
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

    async fn machine(&self, id: &str) -> Result<Option<Machine>> {
        let Some(vm) = self.owned_vm(id, true).await? else {
            return Ok(None);
        };
        let addr = self.addresses_of(&vm).await?;
        Ok(Some(self.machine_of(&vm, None, addr)))
    }

    async fn delete(&self, id: &str) -> Result<bool> {
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

    async fn start(&self, id: &str) -> Result<Machine> {
        self.power(id, "start").await
    }

    async fn stop(&self, id: &str) -> Result<Machine> {
        self.power(id, "deallocate").await
    }

    async fn resize(&self, id: &str, machine_type: &str) -> Result<Resized> {
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

    async fn hourly_price(&self, machine_type: &str, location: &str) -> Result<Price> {
        validate_token("machine_type", machine_type)?;
        validate_token("location", location)?;
        self.price(machine_type, location).await
    }

    fn machine_labels(&self) -> Option<&dyn MachineLabels> {
        Some(self)
    }

    fn ssh_admission(&self) -> Option<&dyn SshAdmission> {
        Some(self)
    }

    fn credit_balance(&self) -> Option<&dyn CreditBalance> {
        self.cfg()
            .billing
            .as_ref()
            .map(|_| self as &dyn CreditBalance)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_labels_start_with_a_letter_and_are_long_enough() {
        assert_eq!(dns_label("orca-lab-7"), "orca-lab-7");
        assert_eq!(dns_label("a"), "vm-a");
        assert_eq!(dns_label("7x"), "vm-7x");
        assert_eq!(dns_label("0ab"), "vm-0ab");
        assert!(dns_label(&"a".repeat(MAX_NAME)).len() <= 63);
        assert!(dns_label(&format!("0{}", "a".repeat(MAX_NAME - 1))).len() <= 63);
    }

    #[test]
    fn leftovers_are_named_by_kind_and_name() {
        let gone = Left::because(Res::new(Part::Vm, "vm-a"), &Error::other("locked"));
        let standing = Left::standing(Res::new(Part::Interface, "vm-a-nic"));
        assert_eq!(gone.to_string(), "VM vm-a (locked)");
        assert_eq!(standing.to_string(), "interface vm-a-nic");
        // A machine whose name reads like a kind is still told by its kind.
        let odd = Left::standing(Res::new(Part::PublicIp, "vm-x"));
        assert_ne!(odd.res.part, Part::Vm);
        assert_eq!(odd.to_string(), "public IP vm-x");
    }

    #[test]
    fn capabilities_deny_what_azure_cannot_do() {
        let c = capabilities();
        assert!(!c.power_times && c.private_address);
        assert!(!c.options.network_tags && !c.options.max_run_duration);
        assert!(c.options.labels && c.options.admission_group && c.options.ssh_sources);
    }
}
