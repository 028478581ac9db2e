//! Compute: the size catalogue (resource SKUs), VMs (their `PUT`, instance view, power actions and
//! subscription-wide list) and what a VM owns and reserves (disk, interfaces).

#[allow(unused_imports)]
use super::*;

/// Virtual machine sizes the fake offers: (name, family, architecture, vCPUs, Linux hourly USD).
pub(super) const SIZES: &[(&str, &str, &str, u32, f64)] = &[
    ("Standard_B2s", "standardBSFamily", "x64", 2, 0.0416),
    ("Standard_D2s_v5", "standardDSv5Family", "x64", 2, 0.096),
    ("Standard_D4s_v5", "standardDSv5Family", "x64", 4, 0.192),
    (
        "Standard_B2pts_v2",
        "standardBpsv2Family",
        "Arm64",
        2,
        0.0084,
    ),
    ("Standard_D2ps_v5", "standardDPSv5Family", "Arm64", 2, 0.077),
    ("Standard_D4ps_v5", "standardDPSv5Family", "Arm64", 4, 0.154),
];

/// The locations the fake offers, with a price factor each.
pub(super) const LOCATIONS: &[(&str, &str, f64)] = &[
    ("westeurope", "EU West", 1.1),
    ("northeurope", "EU North", 1.0),
    ("eastus", "US East", 0.95),
];

pub(super) fn seed_skus() -> Vec<Value> {
    let mut v = Vec::new();
    // Like Azure's, the list holds one entry per size and location.
    for (loc, _, _) in LOCATIONS {
        for (name, family, arch, cpus, _) in SIZES {
            v.push(json!({
                "resourceType": "virtualMachines",
                "name": name,
                "tier": "Standard",
                "size": name.trim_start_matches("Standard_"),
                "family": family,
                "locations": [loc],
                "locationInfo": [{"location": loc, "zones": ["1","2","3"], "zoneDetails": []}],
                "capabilities": [
                    {"name": "vCPUs", "value": cpus.to_string()},
                    {"name": "MemoryGB", "value": (cpus * 4).to_string()},
                    {"name": "HyperVGenerations", "value": if *arch == "Arm64" { "V2" } else { "V1,V2" }},
                    {"name": "CpuArchitectureType", "value": arch},
                ],
                "restrictions": []
            }));
        }
        v.push(json!({
            "resourceType": "disks",
            "name": "StandardSSD_LRS",
            "tier": "Standard",
            "kind": "Disks",
            "locations": [loc],
            "capabilities": [],
            "restrictions": []
        }));
    }
    v
}

/// Whether `sku` is the virtual machine size `size`.
pub(super) fn vm_sku(sku: &Value, size: &str) -> bool {
    sku["resourceType"] == "virtualMachines" && named(sku, size)
}

/// Whether `sku` is offered in `location`.
pub(super) fn offered_in(sku: &Value, location: &str) -> bool {
    items(&sku["locations"]).any(|x| eq(x.as_str().unwrap_or(""), location))
}

/// The answer when interface `nic_id` is reserved for a VM other than `vm_id`.
pub(super) fn reserved_for_another(st: &mut State, nic_id: &str, vm_id: &str) -> Option<Response> {
    let key = nic_id.to_ascii_lowercase();
    let (holder, until) = st.reserved.get(&key)?.clone();
    if Instant::now() >= until {
        st.reserved.remove(&key);
        return None;
    }
    if eq(&holder, vm_id) {
        return None;
    }
    Some(err(
        400,
        "NicReservedForAnotherVm",
        &format!("Nic(s) in request is reserved for another Virtual Machine for 180 seconds. Please provide another nic(s) or retry after 180 seconds. Reserved VM: {holder}"),
    ))
}

/// Reserves the interfaces of VM `vm` for it (Azure does when the VM failed or is deleted without
/// them).
pub(super) fn reserve_nics(st: &mut State, vm: &Value) {
    let until = Instant::now() + st.nic_reservation;
    let vm_id = vm["id"].as_str().unwrap_or("").to_string();
    for n in items(&vm["properties"]["networkProfile"]["networkInterfaces"]) {
        if let Some(id) = n["id"].as_str() {
            st.reserved
                .insert(id.to_ascii_lowercase(), (vm_id.clone(), until));
        }
    }
}

pub(super) fn skus(st: &State, r: &Req) -> Response {
    let loc = r.q("$filter").and_then(|f| {
        let f = f.trim();
        f.strip_prefix("location eq '")
            .and_then(|x| x.strip_suffix('\''))
            .map(str::to_string)
    });
    let items: Vec<Value> = st
        .skus
        .iter()
        .filter(|s| loc.as_ref().is_none_or(|l| offered_in(s, l)))
        .cloned()
        .collect();
    let (got, next) = page(&items, r, st.page_size, "$skiptoken");
    list_answer(got, next)
}

/// `VirtualMachines_ListAll`: every VM of the subscription; with `statusOnly=true` only the run time
/// status (the instance view) of each.
pub(super) fn list_all_vms(st: &State, r: &Req) -> Response {
    if st.rg_scoped {
        return err(
            403,
            "AuthorizationFailed",
            &format!("The client 'orca-test' with object id '00000000-0000-4000-8000-00000000c11e' does not have authorization to perform action 'Microsoft.Compute/virtualMachines/read' over scope '/subscriptions/{SUBSCRIPTION}' or the scope is invalid. If access was recently granted, please refresh your credentials."),
        );
    }
    let status_only = r.q("statusOnly").is_some_and(|v| eq(v, "true"));
    let items: Vec<Value> = st
        .res
        .values()
        .filter(|res| res.kind == Kind::Vm && res.visible())
        .map(|res| {
            if status_only {
                json!({"id": res.body["id"], "name": res.body["name"], "type": res.body["type"],
                    "location": res.body["location"],
                    "properties": {"instanceView": instance_view(res)}})
            } else {
                res.body.clone()
            }
        })
        .collect();
    let (got, next) = page(&items, r, st.page_size, "$skiptoken");
    list_answer(got, next)
}

/// Whether a VM holds its hardware (running, starting, stopping or powered off: not deallocated).
pub(super) fn allocated(res: &Res) -> bool {
    !matches!(res.power.as_str(), "" | "deallocated" | "deallocating")
}

/// `VirtualMachines_ListAvailableSizes` (`{vm}/vmSizes`): the sizes VM `name` can be resized to;
/// for an allocated VM on a limited hardware cluster ([`FakeAzure::limit_cluster`]), only those.
pub(super) fn vm_sizes(st: &State, rg: &str, name: &str) -> Response {
    let key = key(rg, Kind::Vm, name);
    let Some(res) = st.res.get(&key).filter(|x| x.visible()) else {
        return not_found(Kind::Vm, name, rg);
    };
    let location = res.body["location"].as_str().unwrap_or("");
    let cluster = st.clusters.get(&key).filter(|_| allocated(res));
    let value: Vec<Value> = SIZES
        .iter()
        .filter(|(size, ..)| {
            st.skus
                .iter()
                .any(|s| vm_sku(s, size) && offered_in(s, location))
        })
        .filter(|(size, ..)| cluster.is_none_or(|c| c.contains(&size.to_ascii_lowercase())))
        .map(|(size, _, _, cpus, _)| {
            json!({"name": size, "numberOfCores": cpus, "osDiskSizeInMB": 1_047_552,
                "resourceDiskSizeInMB": 0, "memoryInMB": cpus * 4096, "maxDataDiskCount": cpus * 2})
        })
        .collect();
    // Not pageable in the specification: one answer holds every size.
    ok(json!({ "value": value }))
}

/// The refusal of resizing an allocated VM to a size its hardware cluster does not offer.
pub(super) fn cluster_refusal(st: &State, key: &str, res: &Res, size: &str) -> Option<Response> {
    let cluster = st.clusters.get(key).filter(|_| allocated(res))?;
    if cluster.contains(&size.to_ascii_lowercase()) {
        return None;
    }
    let name = res.body["name"].as_str().unwrap_or("");
    let mut available: Vec<&str> = SIZES
        .iter()
        .map(|(s, ..)| *s)
        .filter(|s| cluster.contains(&s.to_ascii_lowercase()))
        .collect();
    available.sort_unstable();
    Some(err_with(
        409,
        "OperationNotAllowed",
        &format!("Unable to resize the VM '{name}' because the requested size {size} is not available in the current hardware cluster. The available sizes in this cluster are: {}. Read more on VM resizing strategy at https://aka.ms/azure-resizevm.", available.join(",")),
        json!({"target": "vmSize"}),
    ))
}

pub(super) fn instance_view(res: &Res) -> Value {
    let ps = res.body["properties"]["provisioningState"]
        .as_str()
        .unwrap_or("Succeeded")
        .to_string();
    let mut provisioning = json!({
        "code": format!("ProvisioningState/{}", ps.to_ascii_lowercase()),
        "level": if ps == "Failed" { "Error" } else { "Info" },
        "displayStatus": format!("Provisioning {}", ps.to_ascii_lowercase()),
    });
    // A failed VM's status names the error that failed it, as Azure's does:
    // `ProvisioningState/failed/AllocationFailed` with the error's message.
    if let (true, Some((code, message))) = (ps == "Failed", &res.failure) {
        provisioning["code"] = json!(format!("ProvisioningState/failed/{code}"));
        provisioning["message"] = json!(message);
    }
    let mut statuses = vec![provisioning];
    if !res.power.is_empty() {
        statuses.push(json!({
            "code": format!("PowerState/{}", res.power),
            "level": "Info",
            "displayStatus": format!("VM {}", res.power),
        }));
    }
    json!({"computerName": res.body["name"], "osName": "ubuntu", "statuses": statuses})
}

pub(super) fn vm_action(st: &mut State, r: &Req, rg: &str, name: &str, action: &str) -> Response {
    let key = key(rg, Kind::Vm, name);
    let (busy, end) = match action.to_ascii_lowercase().as_str() {
        "start" => ("starting", "running"),
        "deallocate" => ("deallocating", "deallocated"),
        "poweroff" => ("stopping", "stopped"),
        "restart" => ("starting", "running"),
        _ => return err(404, "InvalidResourceType", &format!("no action {action}")),
    };
    if let Some(e) = super::ops::busy(st, &key, Kind::Vm) {
        return e;
    }
    let Some(res) = st.res.get_mut(&key).filter(|x| x.visible()) else {
        return not_found(Kind::Vm, name, rg);
    };
    res.power = busy.into();
    let location = location_of(&res.body);
    let op = start_op(st, r, &key, Kind::Vm, &location, Action::Power(end));
    let mut headers = vec![("Azure-AsyncOperation", op.clone()), ("Location", op)];
    headers.extend(retry_after(st));
    answer(202, Value::Null, &headers)
}

/// The resources VM `vm`'s delete would delete with it, by their `deleteOption`s: its OS disk, each
/// interface with `Delete`, and each public address of such an interface whose own `deleteOption`
/// is `Delete` (as [`delete_vm_dependents`] deletes them).
pub(super) fn cascade_of(st: &State, vm: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let os = &vm["properties"]["storageProfile"]["osDisk"];
    if os["deleteOption"] == "Delete" {
        if let Some(d) = os["managedDisk"]["id"].as_str() {
            out.push(d.to_string());
        }
    }
    for n in items(&vm["properties"]["networkProfile"]["networkInterfaces"])
        .filter(|n| n["properties"]["deleteOption"] == "Delete")
    {
        let Some(nic_id) = n["id"].as_str() else {
            continue;
        };
        out.push(nic_id.to_string());
        let Some(nic) = st.res.get(&nic_id.to_ascii_lowercase()) else {
            continue;
        };
        for c in items(&nic.body["properties"]["ipConfigurations"]) {
            if let Some(pip) = c["properties"]["publicIPAddress"]["id"].as_str() {
                let deletes = st
                    .res
                    .get(&pip.to_ascii_lowercase())
                    .is_some_and(|p| p.body["properties"]["deleteOption"] == "Delete");
                if deletes {
                    out.push(pip.to_string());
                }
            }
        }
    }
    out
}

/// What a VM's delete does to what it holds, by each reference's `deleteOption`: an OS disk with
/// `Delete` goes, else it is detached; an interface with `Delete` goes, with each public address of
/// it whose own `deleteOption` is `Delete` (the others are detached); an interface with `Detach`
/// (the default) stays, detached and reserved for the VM (as Azure does for about 180 s).
pub(super) fn delete_vm_dependents(st: &mut State, vm: &Value, vm_id: &str) {
    let os = &vm["properties"]["storageProfile"]["osDisk"];
    if let Some(d) = os["managedDisk"]["id"].as_str() {
        let dk = d.to_ascii_lowercase();
        if os["deleteOption"] == "Delete" {
            st.res.remove(&dk);
        } else if let Some(disk) = st.res.get_mut(&dk) {
            disk.body["properties"]["diskState"] = json!("Unattached");
            remove_field(&mut disk.body, "managedBy");
        }
    }
    let mut detached = Vec::new();
    for n in items(&vm["properties"]["networkProfile"]["networkInterfaces"]) {
        let Some(nic_id) = n["id"].as_str() else {
            continue;
        };
        let nk = nic_id.to_ascii_lowercase();
        if n["properties"]["deleteOption"] == "Delete" {
            let Some(nic) = st.res.remove(&nk) else {
                continue;
            };
            st.reserved.remove(&nk);
            for c in items(&nic.body["properties"]["ipConfigurations"]) {
                let Some(pip) = c["properties"]["publicIPAddress"]["id"].as_str() else {
                    continue;
                };
                let pk = pip.to_ascii_lowercase();
                let delete = st
                    .res
                    .get(&pk)
                    .is_some_and(|p| p.body["properties"]["deleteOption"] == "Delete");
                if delete {
                    st.res.remove(&pk);
                } else if let Some(p) = st.res.get_mut(&pk) {
                    remove_field(&mut p.body["properties"], "ipConfiguration");
                }
            }
        } else if let Some(nic) = st.res.get_mut(&nk) {
            if nic.body["properties"]["virtualMachine"]["id"]
                .as_str()
                .is_some_and(|v| eq(v, vm_id))
            {
                remove_field(&mut nic.body["properties"], "virtualMachine");
                detached.push(nic_id.to_string());
            }
        }
    }
    let until = Instant::now() + st.nic_reservation;
    for d in detached {
        st.reserved
            .insert(d.to_ascii_lowercase(), (vm_id.to_string(), until));
    }
}

/// The VM of a `PUT`: size, stock, quota, image, interfaces and their reservations, keys, custom
/// data, OS disk, and the operation that makes (or fails to make) it.
pub(super) fn prepare_vm(
    st: &mut State,
    p: &Put<'_>,
    body: &mut Value,
    action: &mut Action,
    power: &mut String,
) -> Result<(), Response> {
    let Put {
        rg,
        name,
        id,
        key,
        location,
        props,
        ..
    } = *p;
    let (size, lk) = checked_size(st, props, location)?;
    let nics = checked_profile(st, props, id)?;
    let old = st.res.get(key).cloned();
    body["properties"]["vmId"] = json!(super::ops::fake_uuid(1, st.next_op));
    body["properties"]["timeCreated"] = match &old {
        Some(o) => o.body["properties"]["timeCreated"].clone(),
        None => json!(now()),
    };
    if let Some(cd) = props["osProfile"]["customData"].as_str() {
        st.custom_data.insert(key.to_string(), cd.to_string());
    }
    if let Some(c) = body["properties"]["osProfile"].get_mut("customData") {
        // Azure never returns custom data.
        *c = Value::Null;
    }
    let disk = props["storageProfile"]["osDisk"]["name"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| format!("{name}_OsDisk_1"));
    let disk_id = rid(rg, Kind::Disk, &disk);
    // A new VM's OS disk made from its image cannot take the name of a disk that exists (only an
    // attach of that disk could).
    let taken = st.res.get(&disk_id.to_ascii_lowercase()).is_some_and(|d| {
        !d.body["managedBy"]
            .as_str()
            .is_some_and(|m| m.eq_ignore_ascii_case(id))
    });
    if taken {
        return Err(err(
            409,
            "ConflictingUserInput",
            &format!("Disk {disk} already exists in resource group {}. Only CreateOption.Attach is supported.", rg.to_ascii_uppercase()),
        ));
    }
    body["properties"]["storageProfile"]["osDisk"]["managedDisk"]["id"] = json!(disk_id);
    st.res.insert(
        disk_id.to_ascii_lowercase(),
        Res::new(
            Kind::Disk,
            json!({"id": disk_id, "name": disk, "type": Kind::Disk.type_name(), "location": location,
                "tags": {}, "managedBy": id, "properties": {"provisioningState": "Succeeded", "diskState": "Attached",
                "timeCreated": now(),
                "diskSizeGB": props["storageProfile"]["osDisk"]["diskSizeGB"].as_u64().unwrap_or(30)}}),
        ),
    );
    for n in &nics {
        if let Some(nic) = st
            .res
            .get_mut(&n["id"].as_str().unwrap_or("").to_ascii_lowercase())
        {
            nic.body["properties"]["virtualMachine"] = json!({"id": id});
        }
    }
    *power = old.map(|o| o.power).unwrap_or_else(|| "starting".into());
    if let Some(code) = st.no_stock.get(&lk) {
        let msg = match code.as_str() {
            "ZonalAllocationFailed" => format!("Allocation failed. We do not have sufficient capacity for the requested VM size {size} in this zone. Read more about improving likelihood of allocation success at http://aka.ms/allocation-guidance"),
            "OverconstrainedAllocationRequest" => format!("Allocation failed. VM(s) with the following constraints cannot be allocated, because the condition is too restrictive. Please remove some constraints and try again. Constraints applied are: - VM Size {size}"),
            _ => format!("Allocation failed. We do not have sufficient capacity for the requested VM size {size} in this region. Read more about improving likelihood of allocation success at http://aka.ms/allocation-guidance"),
        };
        *action = Action::Fail(code.clone(), msg);
    }
    Ok(())
}

/// The VM size: known, offered in `location`, within quota, and of the image's architecture.
fn checked_size(
    st: &State,
    props: &Value,
    location: &str,
) -> Result<(String, (String, String)), Response> {
    let size = props["hardwareProfile"]["vmSize"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let named: Vec<&Value> = st.skus.iter().filter(|s| vm_sku(s, &size)).collect();
    let Some(sku) = named
        .iter()
        .find(|s| offered_in(s, location))
        .or(named.first())
        .map(|s| (*s).clone())
    else {
        return Err(invalid_parameter(
            "vmSize",
            &format!("The value {size} provided for the VM size is not valid."),
        ));
    };
    let lk = size_at(&size, location);
    if !offered_in(&sku, location) || st.unavailable.contains(&lk) {
        return Err(err(
            409,
            "SkuNotAvailable",
            &format!("The requested VM size for resource 'Following SKUs have failed for Capacity Restrictions: {size}' is currently not available in location '{location}'. Please try another size or deploy to a different location or different zone. See https://aka.ms/azureskunotavailable for details."),
        ));
    }
    if st.quota.contains(&size.to_ascii_lowercase()) {
        let family = sku["family"].as_str().unwrap_or("standard");
        return Err(err(
            409,
            "OperationNotAllowed",
            &format!("Operation could not be completed as it results in exceeding approved {family} Cores quota. Additional details - Deployment Model: Resource Manager, Location: {location}, Current Limit: 10, Current Usage: 10, Additional Required: 2, (Minimum) New Limit Required: 12."),
        ));
    }
    let arch = sku["capabilities"]
        .as_array()
        .and_then(|c| c.iter().find(|x| x["name"] == "CpuArchitectureType"))
        .and_then(|x| x["value"].as_str())
        .unwrap_or("x64")
        .to_string();
    let image_sku = props["storageProfile"]["imageReference"]["sku"]
        .as_str()
        .unwrap_or("")
        .to_ascii_lowercase();
    let image_arm = image_sku.contains("arm64");
    if image_arm != (arch == "Arm64") {
        return Err(invalid_parameter("vmSize", &format!("The selected VM size '{size}' cannot boot Hypervisor Generation or architecture of image '{image_sku}': the image is {} and the size is {arch}.", if image_arm { "Arm64" } else { "x64" })));
    }
    Ok((size, lk))
}

/// The network interfaces (each existing and not another VM's) and the OS profile's login and custom data.
fn checked_profile(st: &mut State, props: &Value, id: &str) -> Result<Vec<Value>, Response> {
    let Some(nics) = props["networkProfile"]["networkInterfaces"]
        .as_array()
        .cloned()
    else {
        return Err(err(
            400,
            "InvalidParameter",
            "networkProfile.networkInterfaces is required.",
        ));
    };
    for n in &nics {
        let nic_id = n["id"].as_str().unwrap_or("");
        if let Some(e) = must_exist(st, nic_id, id) {
            return Err(e);
        }
        if let Some(e) = reserved_for_another(st, nic_id, id) {
            return Err(e);
        }
    }
    let linux = &props["osProfile"]["linuxConfiguration"];
    let keys = linux["ssh"]["publicKeys"].as_array().map_or(0, |k| k.len());
    if linux["disablePasswordAuthentication"] == true && keys == 0 {
        return Err(invalid_parameter("linuxConfiguration", "Authentication using either SSH or by user name and password must be enabled in Linux profile."));
    }
    if let Some(cd) = props["osProfile"]["customData"].as_str() {
        if cd.len() > 87_380 {
            return Err(err(400, "InvalidParameter", "customData is too long."));
        }
    }
    Ok(nics)
}
