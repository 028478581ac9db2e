//! [`AzureProvider`]: the [`Provider`] contract on Azure Resource Manager.
//!
//! A machine is a VM named by the spec's name (its orca id is that name: unique in the resource group),
//! with `<name>-ip` (static Standard public address), `<name>-nsg` (security group admitting the
//! configured addresses on TCP 22 only), `<name>-nic` (interface in `<vnet>-<location>/<subnet>`,
//! optionally in the application security group) and the OS disk `<name>-osdisk` (deleted with the VM).
//! The VM, address, security group and interface carry the ownership tags; the OS disk, made by Azure
//! from the VM, carries none (Azure copies no tags to it).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use base64::Engine as _;
use orca_machines::labels::{is_in_pool, is_owned_by, ownership_labels, pool_of, Labels};
use orca_machines::spec::validate_token;
use orca_machines::{
    docker_arch, validate_id, validate_owner, validate_pool, Arch, Capabilities, Created, Error,
    Machine, MachineSpec, Price, Provider, Resized, Result, Status,
};
use reqwest::Method;
use serde_json::{json, Value};

use crate::client::{Answer, Arm, COMPUTE_API, NETWORK_API, SKUS_API};
use crate::config::Settings;

/// Machines on Azure, as one owner's.
#[derive(Clone)]
pub struct AzureProvider {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) settings: Settings,
    pub(crate) arm: Arm,
    owner: String,
    arch_cache: Mutex<Option<Arc<HashMap<String, Arch>>>>,
}

impl std::fmt::Debug for AzureProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AzureProvider")
            .field("owner", &self.inner.owner)
            .field("settings", &self.inner.settings)
            .finish()
    }
}

/// The resources of one machine.
struct Names {
    vm: String,
    pip: String,
    nsg: String,
    nic: String,
    disk: String,
}

impl Names {
    fn of(name: &str) -> Names {
        Names {
            vm: name.to_string(),
            pip: format!("{name}-ip"),
            nsg: format!("{name}-nsg"),
            nic: format!("{name}-nic"),
            disk: format!("{name}-osdisk"),
        }
    }
}

fn tags_of(v: &Value) -> Labels {
    v["tags"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

fn is_not_found(e: &Error) -> bool {
    matches!(e, Error::NotFound { .. })
}

impl AzureProvider {
    /// A provider for `owner` (empty for none) with `settings`. No network call.
    pub fn new(settings: Settings, owner: &str) -> Result<AzureProvider> {
        validate_owner(owner)?;
        let token = settings.token_source()?;
        let arm = Arm::new(
            &settings.arm_endpoint,
            &settings.prices_endpoint,
            &settings.subscription_id,
            token,
            settings.retry,
            settings.poll_interval,
            settings.operation_timeout,
        )?;
        Ok(AzureProvider {
            inner: Arc::new(Inner {
                settings,
                arm,
                owner: owner.to_string(),
                arch_cache: Mutex::new(None),
            }),
        })
    }

    /// The settings in use.
    pub fn settings(&self) -> &Settings {
        &self.inner.settings
    }

    pub(crate) fn arm(&self) -> &Arm {
        &self.inner.arm
    }

    fn s(&self) -> &Settings {
        &self.inner.settings
    }

    pub(crate) fn rg_path(&self) -> String {
        format!(
            "{}/resourceGroups/{}",
            self.arm().sub_path(),
            self.s().resource_group
        )
    }

    pub(crate) fn id(&self, type_name: &str, name: &str) -> String {
        format!("{}/providers/{type_name}/{name}", self.rg_path())
    }

    pub(crate) fn subnet_id(&self, location: &str) -> String {
        format!(
            "{}/resourceGroups/{}/providers/Microsoft.Network/virtualNetworks/{}-{location}/subnets/{}",
            self.arm().sub_path(),
            self.s().vnet_resource_group,
            self.s().vnet,
            self.s().subnet
        )
    }

    fn vm_id(&self, name: &str) -> String {
        self.id("Microsoft.Compute/virtualMachines", name)
    }

    fn vm_url(&self, name: &str, expand: bool) -> String {
        let u = self.arm().url(&self.vm_id(name), COMPUTE_API);
        if expand {
            format!("{u}&$expand=instanceView")
        } else {
            u
        }
    }

    fn net_url(&self, type_name: &str, name: &str) -> String {
        self.arm().url(&self.id(type_name, name), NETWORK_API)
    }

    /// `PUT` of a new resource, followed to its end. A resource that exists already is adopted if it
    /// carries this owner's tags of `pool` (a retried create, or a `PUT` whose first answer was lost),
    /// and refused as [`Error::AlreadyExists`] otherwise, untouched. Compute's `PUT` takes
    /// `If-None-Match: *` (412 when the VM exists), so a VM is created in one call; the network
    /// resource provider's `PUT` has no such header in its specification, so a network resource is read
    /// first. `made` learns the URL as soon as Azure may hold the resource.
    async fn put_new(
        &self,
        what: &str,
        url: &str,
        body: &Value,
        pool: &str,
        conditional: bool,
        made: &mut Vec<(String, String)>,
    ) -> Result<Value> {
        let op = format!("create {what}");
        if !conditional {
            if let Some(found) = self.arm().get(&format!("read {what}"), url).await? {
                return self.adopt(what, url, &found, pool, made).await;
            }
        }
        match self
            .arm()
            .call(&op, Method::PUT, url, Some(body), conditional)
            .await
        {
            Ok(a) => {
                made.push((what.to_string(), url.to_string()));
                self.arm().wait(&op, &a).await?;
                Ok(a.body)
            }
            Err(Error::AlreadyExists { .. }) if conditional => {
                let Some(found) = self.arm().get(&format!("read {what}"), url).await? else {
                    return Err(Error::transient(format!(
                        "{what} vanished while being adopted"
                    )));
                };
                self.adopt(what, url, &found, pool, made).await
            }
            Err(e) => {
                if e.is_retryable() {
                    // The PUT may have been served: clean-up must look.
                    made.push((what.to_string(), url.to_string()));
                }
                Err(e)
            }
        }
    }

    async fn adopt(
        &self,
        what: &str,
        url: &str,
        found: &Value,
        pool: &str,
        made: &mut Vec<(String, String)>,
    ) -> Result<Value> {
        if !is_in_pool(&tags_of(found), pool, &self.inner.owner) {
            return Err(Error::already_exists(format!(
                "{what} exists and is not this owner's ({:?}) of pool {pool}",
                self.inner.owner
            )));
        }
        made.push((what.to_string(), url.to_string()));
        self.settle(what, url).await
    }

    /// Reads a resource until its provisioning state is final.
    async fn settle(&self, what: &str, url: &str) -> Result<Value> {
        let deadline = std::time::Instant::now() + self.s().operation_timeout;
        loop {
            let Some(v) = self.arm().get(&format!("read {what}"), url).await? else {
                return Err(Error::transient(format!(
                    "{what} vanished while being adopted"
                )));
            };
            match v["properties"]["provisioningState"]
                .as_str()
                .unwrap_or("Succeeded")
            {
                "Succeeded" => return Ok(v),
                "Failed" => {
                    return Err(vm_failure(&v).unwrap_or_else(|| {
                        Error::other(format!("{what} is in provisioning state Failed"))
                    }))
                }
                _ if std::time::Instant::now() > deadline => {
                    return Err(Error::transient(format!(
                        "{what} is still being provisioned"
                    )))
                }
                _ => tokio::time::sleep(self.s().poll_interval).await,
            }
        }
    }

    /// Deletes `url` and follows it to its end, then confirms it is gone. 404 is gone.
    async fn remove(&self, what: &str, url: &str) -> Result<()> {
        let op = format!("delete {what}");
        match self.arm().call(&op, Method::DELETE, url, None, false).await {
            Ok(a) => self.arm().wait(&op, &a).await?,
            Err(e) if is_not_found(&e) => return Ok(()),
            Err(e) => return Err(e),
        }
        match self.arm().get(&format!("confirm {what} gone"), url).await? {
            None => Ok(()),
            Some(v) => Err(Error::transient(format!(
                "{what} is still there after its delete ended (state {})",
                v["properties"]["provisioningState"].as_str().unwrap_or("?")
            ))),
        }
    }

    /// Removes what a failed create made, newest first; names what could not be removed.
    async fn undo(&self, made: &[(String, String)], error: Error) -> Error {
        let mut left = Vec::new();
        for (what, url) in made.iter().rev() {
            if let Err(e) = self.remove(what, url).await {
                tracing::warn!(what = %what, error = %e, "clean-up after a failed create failed");
                left.push(format!("{what} ({e})"));
            }
        }
        if left.is_empty() {
            error
        } else {
            Error::Leftovers {
                error: Box::new(error),
                left,
            }
        }
    }

    /// The VM's public address, read from its public IP resource.
    async fn address_of(&self, names: &Names) -> Result<String> {
        let url = self.net_url("Microsoft.Network/publicIPAddresses", &names.pip);
        Ok(self
            .arm()
            .get("read public IP", &url)
            .await?
            .and_then(|v| v["properties"]["ipAddress"].as_str().map(str::to_string))
            .unwrap_or_default())
    }

    fn machine_of(&self, vm: &Value, address: String) -> Machine {
        let labels = tags_of(vm);
        let (status, cloud_status) = power_of(vm);
        let name = vm["name"].as_str().unwrap_or("");
        let mut m = Machine::new(name, name);
        m.status = status;
        m.cloud_status = cloud_status;
        m.machine_type = vm["properties"]["hardwareProfile"]["vmSize"]
            .as_str()
            .unwrap_or("")
            .to_string();
        m.location = vm["location"].as_str().unwrap_or("").to_string();
        m.address = address;
        m.pool = pool_of(&labels);
        m.labels = labels;
        m
    }

    /// The VM `id` with its instance view, checked to be this owner's.
    async fn owned_vm(&self, id: &str) -> Result<Value> {
        validate_id(id)?;
        let Some(vm) = self.arm().get("read VM", &self.vm_url(id, true)).await? else {
            return Err(Error::not_found(format!("virtual machine {id}")));
        };
        if !is_owned_by(&tags_of(&vm), &self.inner.owner) {
            return Err(Error::NotOwned {
                id: id.to_string(),
                owner: self.inner.owner.clone(),
            });
        }
        Ok(vm)
    }

    async fn machine_now(&self, id: &str) -> Result<Machine> {
        let vm = self.owned_vm(id).await?;
        let address = self.address_of(&Names::of(id)).await?;
        Ok(self.machine_of(&vm, address))
    }

    async fn power(&self, id: &str, action: &str) -> Result<Machine> {
        self.owned_vm(id).await?;
        let url = self
            .arm()
            .url(&format!("{}/{action}", self.vm_id(id)), COMPUTE_API);
        let op = format!("{action} VM");
        let a = self
            .arm()
            .call(&op, Method::POST, &url, None, false)
            .await?;
        self.arm().wait(&op, &a).await?;
        self.machine_now(id).await
    }

    async fn sku_arches(&self) -> Result<Arc<HashMap<String, Arch>>> {
        if let Some(c) = self
            .inner
            .arch_cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
        {
            return Ok(c);
        }
        // Every location: a size's architecture does not vary by location.
        let url = self.arm().url(
            &format!("{}/providers/Microsoft.Compute/skus", self.arm().sub_path()),
            SKUS_API,
        );
        let skus = self.arm().list("list resource SKUs", &url).await?;
        let mut map = HashMap::new();
        for s in skus {
            if s["resourceType"].as_str() != Some("virtualMachines") {
                continue;
            }
            let Some(name) = s["name"].as_str() else {
                continue;
            };
            let arch = s["capabilities"]
                .as_array()
                .and_then(|c| c.iter().find(|x| x["name"] == "CpuArchitectureType"))
                .and_then(|x| x["value"].as_str())
                .map(docker_arch)
                .unwrap_or(Arch::Amd64);
            map.insert(name.to_ascii_lowercase(), arch);
        }
        let map = Arc::new(map);
        *self
            .inner
            .arch_cache
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(map.clone());
        Ok(map)
    }

    fn vm_body(
        &self,
        spec: &MachineSpec,
        names: &Names,
        arch: &Arch,
        tags: &Value,
        nic_id: &str,
    ) -> Result<Value> {
        let s = self.s();
        let image = s.image_for(arch)?;
        let mut os_disk = json!({
            "name": names.disk,
            "createOption": "FromImage",
            "deleteOption": "Delete",
            "caching": "ReadWrite",
            "managedDisk": {"storageAccountType": "StandardSSD_LRS"}
        });
        if let Some(gb) = s.os_disk_gb {
            os_disk["diskSizeGB"] = json!(gb);
        }
        let mut os_profile = json!({
            "computerName": spec.name,
            "adminUsername": s.admin_user,
            "linuxConfiguration": {
                "disablePasswordAuthentication": true,
                "ssh": {"publicKeys": [{
                    "path": format!("/home/{}/.ssh/authorized_keys", s.admin_user),
                    "keyData": s.ssh_public_key,
                }]}
            }
        });
        if !spec.user_data.is_empty() {
            os_profile["customData"] =
                json!(base64::engine::general_purpose::STANDARD.encode(spec.user_data.as_bytes()));
        }
        Ok(json!({
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
                    {"id": nic_id, "properties": {"primary": true, "deleteOption": "Detach"}}
                ]},
            }
        }))
    }

    async fn create_inner(
        &self,
        spec: &MachineSpec,
        made: &mut Vec<(String, String)>,
    ) -> Result<Machine> {
        let arch = self.arch(&spec.machine_type).await?;
        let names = Names::of(&spec.name);
        let labels = ownership_labels(&spec.pool, &self.inner.owner);
        let tags = json!(labels);
        let loc = &spec.location;
        let pip_id = self.id("Microsoft.Network/publicIPAddresses", &names.pip);
        let nsg_id = self.id("Microsoft.Network/networkSecurityGroups", &names.nsg);
        let nic_id = self.id("Microsoft.Network/networkInterfaces", &names.nic);
        let vm_body = self.vm_body(spec, &names, &arch, &tags, &nic_id)?;

        let pip = self
            .put_new(
                &format!("public IP {}", names.pip),
                &self.arm().url(&pip_id, NETWORK_API),
                &json!({
                    "location": loc, "tags": tags,
                    "sku": {"name": "Standard", "tier": "Regional"},
                    "properties": {"publicIPAllocationMethod": "Static", "publicIPAddressVersion": "IPv4"}
                }),
                &spec.pool,
                false,
                made,
            )
            .await?;

        let mut rules = Vec::new();
        if !self.s().ssh_sources.is_empty() {
            rules.push(json!({
                "name": "orca-ssh",
                "properties": {
                    "protocol": "Tcp", "sourcePortRange": "*", "destinationPortRange": "22",
                    "sourceAddressPrefixes": self.s().ssh_sources, "destinationAddressPrefix": "*",
                    "access": "Allow", "priority": 100, "direction": "Inbound",
                    "description": "orca: SSH from the admitted addresses only"
                }
            }));
        }
        self.put_new(
            &format!("security group {}", names.nsg),
            &self.arm().url(&nsg_id, NETWORK_API),
            &json!({"location": loc, "tags": tags, "properties": {"securityRules": rules}}),
            &spec.pool,
            false,
            made,
        )
        .await?;

        let mut ipcfg = json!({
            "name": "ipconfig1",
            "properties": {
                "primary": true,
                "privateIPAllocationMethod": "Dynamic",
                "subnet": {"id": self.subnet_id(loc)},
                "publicIPAddress": {"id": pip_id},
            }
        });
        if let Some(asg) = self.s().asg_for(loc) {
            ipcfg["properties"]["applicationSecurityGroups"] =
                json!([{"id": self.id("Microsoft.Network/applicationSecurityGroups", &asg)}]);
        }
        self.put_new(
            &format!("interface {}", names.nic),
            &self.arm().url(&nic_id, NETWORK_API),
            &json!({"location": loc, "tags": tags, "properties": {
                "networkSecurityGroup": {"id": nsg_id},
                "ipConfigurations": [ipcfg],
            }}),
            &spec.pool,
            false,
            made,
        )
        .await?;

        let vm_url = self.vm_url(&names.vm, false);
        self.put_new(
            &format!("VM {}", names.vm),
            &vm_url,
            &vm_body,
            &spec.pool,
            true,
            made,
        )
        .await?;
        let vm = self
            .arm()
            .get("read VM", &self.vm_url(&names.vm, true))
            .await?
            .ok_or_else(|| {
                Error::transient(format!("VM {} vanished after its create", names.vm))
            })?;
        let mut address = pip["properties"]["ipAddress"]
            .as_str()
            .unwrap_or("")
            .to_string();
        if address.is_empty() {
            address = self.address_of(&names).await?;
        }
        Ok(self.machine_of(&vm, address))
    }

    /// Deletes the machine's resources in order (VM with its OS disk, interface, security group,
    /// public address), each only when it carries this owner's tags, each followed to its end and
    /// confirmed gone. Returns what remains.
    async fn delete_resources(&self, id: &str, vm: Option<Value>) -> Vec<String> {
        let names = Names::of(id);
        let mut left = Vec::new();
        if vm.is_some() {
            if let Err(e) = self
                .remove(&format!("VM {id}"), &self.vm_url(id, false))
                .await
            {
                // The interface, group and address stay in use while the VM stands.
                return vec![
                    format!("VM {id} ({e})"),
                    format!("interface {}", names.nic),
                    format!("security group {}", names.nsg),
                    format!("public IP {}", names.pip),
                ];
            }
        }
        for (what, ty, name) in [
            (
                "interface",
                "Microsoft.Network/networkInterfaces",
                &names.nic,
            ),
            (
                "security group",
                "Microsoft.Network/networkSecurityGroups",
                &names.nsg,
            ),
            (
                "public IP",
                "Microsoft.Network/publicIPAddresses",
                &names.pip,
            ),
        ] {
            let url = self.net_url(ty, name);
            let what = format!("{what} {name}");
            match self.arm().get(&format!("read {what}"), &url).await {
                Ok(None) => {}
                Ok(Some(v)) if !is_owned_by(&tags_of(&v), &self.inner.owner) => {
                    tracing::warn!(resource = %what, "not this owner's: left alone");
                }
                Ok(Some(_)) => {
                    if let Err(e) = self.remove(&what, &url).await {
                        left.push(format!("{what} ({e})"));
                    }
                }
                Err(e) => left.push(format!("{what} ({e})")),
            }
        }
        left
    }
}

/// The failure a failed VM carries in its instance view, as an error.
fn vm_failure(vm: &Value) -> Option<Error> {
    let statuses = vm["properties"]["instanceView"]["statuses"].as_array()?;
    let s = statuses.iter().find(|s| {
        s["level"] == "Error"
            || s["code"]
                .as_str()
                .is_some_and(|c| c.starts_with("ProvisioningState/failed"))
    })?;
    let code = s["code"].as_str()?.rsplit('/').next().unwrap_or("");
    Some(crate::client::map_error(
        None,
        &json!({"code": code, "message": s["message"].as_str().or(s["displayStatus"].as_str()).unwrap_or("")}),
        None,
    ))
}

/// The VM's state in orca's set, and Azure's own word, from its instance view.
pub(crate) fn power_of(vm: &Value) -> (Status, String) {
    let ps = vm["properties"]["provisioningState"].as_str().unwrap_or("");
    if ps.eq_ignore_ascii_case("Deleting") {
        return (Status::Deleting, "Deleting".into());
    }
    let power = vm["properties"]["instanceView"]["statuses"]
        .as_array()
        .and_then(|s| {
            s.iter()
                .filter_map(|x| x["code"].as_str())
                .find_map(|c| c.strip_prefix("PowerState/"))
        })
        .map(str::to_string);
    match power {
        Some(p) => {
            let status = match p.as_str() {
                "running" => Status::Running,
                "starting" => Status::Starting,
                "stopping" | "deallocating" => Status::Stopping,
                "stopped" | "deallocated" => Status::Stopped,
                _ => Status::Unknown,
            };
            (status, format!("PowerState/{p}"))
        }
        None => match ps {
            "Creating" | "Updating" | "" => (
                Status::Starting,
                format!(
                    "ProvisioningState/{}",
                    if ps.is_empty() { "unknown" } else { ps }
                ),
            ),
            "Failed" => (Status::Unknown, "ProvisioningState/Failed".into()),
            other => (Status::Unknown, format!("ProvisioningState/{other}")),
        },
    }
}

#[async_trait]
impl Provider for AzureProvider {
    fn kind(&self) -> &str {
        "azure"
    }

    fn owner(&self) -> &str {
        &self.inner.owner
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::ALL
    }

    async fn arch(&self, machine_type: &str) -> Result<Arch> {
        validate_token("machine_type", machine_type)?;
        let map = self.sku_arches().await?;
        map.get(&machine_type.to_ascii_lowercase())
            .cloned()
            .ok_or_else(|| Error::not_found(format!("virtual machine size {machine_type} (not among the subscription's resource SKUs)")))
    }

    async fn create(&self, spec: &MachineSpec) -> Result<Created> {
        spec.validate()?;
        if spec.name.len() > 58 {
            return Err(Error::invalid(
                "name",
                "at most 58 characters on Azure (resource names add a suffix)",
            ));
        }
        let mut made = Vec::new();
        match self.create_inner(spec, &mut made).await {
            Ok(m) => Ok(Created::Machine(m)),
            Err(e) => {
                // A passing failure: when Azure may hold the VM (it answers it, or cannot be asked),
                // everything stays for the retried create to adopt; when it surely holds none, what
                // was made is removed, and the error stays retryable.
                if e.is_retryable() {
                    match self
                        .arm()
                        .get("read VM", &self.vm_url(&spec.name, false))
                        .await
                    {
                        Ok(None) => return Err(self.undo(&made, e).await),
                        Ok(Some(_)) | Err(_) => return Err(e),
                    }
                }
                let e = match e {
                    Error::NoStock { message, .. } => {
                        Error::no_stock(spec.machine_type.clone(), spec.location.clone(), message)
                    }
                    other => other,
                };
                match self.undo(&made, e).await {
                    Error::NoStock {
                        machine_type,
                        location,
                        message,
                        ..
                    } => Ok(Created::NoStock {
                        machine_type,
                        location,
                        message,
                    }),
                    other => Err(other),
                }
            }
        }
    }

    async fn machines(&self, pool: &str) -> Result<Vec<Machine>> {
        validate_pool(pool)?;
        // The resource group's VMs (the model: tags, size, interfaces). Resource Manager cannot filter
        // a VM list by tag, and its `$expand=instanceView` needs a `$filter`, so the power states come
        // from the subscription's `statusOnly=true` list, and the addresses from the address list:
        // three listings, each paged; never a call per VM.
        let list_url = self.arm().url(
            &format!(
                "{}/providers/Microsoft.Compute/virtualMachines",
                self.rg_path()
            ),
            COMPUTE_API,
        );
        let mut vms: Vec<Value> = self
            .arm()
            .list("list VMs", &list_url)
            .await?
            .into_iter()
            .filter(|vm| is_in_pool(&tags_of(vm), pool, &self.inner.owner))
            .collect();
        if vms.is_empty() {
            return Ok(Vec::new());
        }
        let status_url = format!(
            "{}&statusOnly=true",
            self.arm().url(
                &format!(
                    "{}/providers/Microsoft.Compute/virtualMachines",
                    self.arm().sub_path()
                ),
                COMPUTE_API
            )
        );
        let mut views: HashMap<String, Value> = HashMap::new();
        for v in self.arm().list("list VM states", &status_url).await? {
            if let Some(id) = v["id"].as_str() {
                views.insert(
                    id.to_ascii_lowercase(),
                    v["properties"]["instanceView"].clone(),
                );
            }
        }
        for vm in &mut vms {
            let id = vm["id"].as_str().unwrap_or("").to_ascii_lowercase();
            if let Some(view) = views.remove(&id) {
                vm["properties"]["instanceView"] = view;
            }
        }
        let pips = self
            .arm()
            .list(
                "list public IPs",
                &self.arm().url(
                    &format!(
                        "{}/providers/Microsoft.Network/publicIPAddresses",
                        self.rg_path()
                    ),
                    NETWORK_API,
                ),
            )
            .await?;
        let mut by_nic: HashMap<String, String> = HashMap::new();
        for p in &pips {
            if let (Some(cfg), Some(ip)) = (
                p["properties"]["ipConfiguration"]["id"].as_str(),
                p["properties"]["ipAddress"].as_str(),
            ) {
                let nic = cfg.to_ascii_lowercase();
                let nic = nic
                    .split("/ipconfigurations/")
                    .next()
                    .unwrap_or("")
                    .to_string();
                by_nic.insert(nic, ip.to_string());
            }
        }
        Ok(vms
            .iter()
            .map(|vm| {
                let address = vm["properties"]["networkProfile"]["networkInterfaces"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|n| n["id"].as_str())
                    .find_map(|id| by_nic.get(&id.to_ascii_lowercase()).cloned())
                    .unwrap_or_default();
                self.machine_of(vm, address)
            })
            .collect())
    }

    async fn machine(&self, id: &str) -> Result<Option<Machine>> {
        match self.machine_now(id).await {
            Ok(m) => Ok(Some(m)),
            Err(Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn delete(&self, id: &str) -> Result<bool> {
        validate_id(id)?;
        let vm = self.arm().get("read VM", &self.vm_url(id, false)).await?;
        if let Some(v) = &vm {
            if !is_owned_by(&tags_of(v), &self.inner.owner) {
                return Err(Error::NotOwned {
                    id: id.to_string(),
                    owner: self.inner.owner.clone(),
                });
            }
        }
        let left = self.delete_resources(id, vm).await;
        if left.is_empty() {
            Ok(true)
        } else {
            Err(Error::Leftovers {
                error: Box::new(Error::other(format!(
                    "Azure did not release everything of machine {id}; deleting it again retries"
                ))),
                left,
            })
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
        let vm = self.owned_vm(id).await?;
        let want = self.arch(machine_type).await?;
        let have_type = vm["properties"]["hardwareProfile"]["vmSize"]
            .as_str()
            .unwrap_or("");
        if !have_type.is_empty() {
            let have = self.arch(have_type).await?;
            if have != want {
                return Err(Error::invalid(
                    "machine_type",
                    format!("{machine_type} is {want}, the machine's disk holds an {have} image"),
                ));
            }
        }
        let (status, _) = power_of(&vm);
        let running = matches!(status, Status::Running | Status::Starting);
        let url = self.vm_url(id, false);
        let op = "resize VM";
        let a: Answer = self
            .arm()
            .call(
                op,
                Method::PATCH,
                &url,
                Some(&json!({"properties": {"hardwareProfile": {"vmSize": machine_type}}})),
                false,
            )
            .await?;
        self.arm().wait(op, &a).await.map_err(|e| match e {
            Error::NoStock { message, .. } => Error::no_stock(
                machine_type.to_string(),
                vm["location"].as_str().unwrap_or("").to_string(),
                message,
            ),
            other => other,
        })?;
        Ok(Resized {
            machine: self.machine_now(id).await?,
            caused_downtime: running,
        })
    }

    async fn hourly_price(&self, machine_type: &str, location: &str) -> Result<Price> {
        validate_token("machine_type", machine_type)?;
        validate_token("location", location)?;
        crate::price::hourly(self.arm(), machine_type, location).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn power_states_map() {
        for (code, want) in [
            ("running", Status::Running),
            ("deallocated", Status::Stopped),
            ("stopped", Status::Stopped),
            ("starting", Status::Starting),
            ("stopping", Status::Stopping),
            ("deallocating", Status::Stopping),
        ] {
            let vm = json!({"properties": {"provisioningState": "Succeeded", "instanceView": {"statuses": [
                {"code": "ProvisioningState/succeeded"}, {"code": format!("PowerState/{code}")}]}}});
            let (s, word) = power_of(&vm);
            assert_eq!(s, want, "{code}");
            assert_eq!(word, format!("PowerState/{code}"));
        }
        let deleting = json!({"properties": {"provisioningState": "Deleting"}});
        assert_eq!(power_of(&deleting).0, Status::Deleting);
    }
}
