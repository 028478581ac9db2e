//! `instances.insert`: the body's checks, each part on its own (name and type, boot disk,
//! scheduling, network), then what the insert makes, decided at once (quota, no stock, a failing
//! operation, or the instance and its boot disk).

use super::*;

/// A checked insert: what it makes.
struct Plan {
    key: Key,
    machine_type: String,
    /// The boot disk's `initializeParams` with its name, type and device name filled in.
    boot: Value,
    disk_name: String,
    /// Whether an existing disk of the boot disk's name is attached instead of a new one.
    attach: bool,
    auto_delete: bool,
    network: String,
    subnet: String,
    external: bool,
}

pub(super) async fn insert_instance(
    State(state): State<Shared>,
    Path((project, zone)): Path<(String, String)>,
    Query(q): Query<MutateQuery>,
    body: Bytes,
) -> Answer {
    check_project(&project).and(check_zone(&zone))?;
    let mut s = change(&state, &q.request_id)?;
    let vm = serde_json::from_slice::<Value>(&body)
        .map_err(|_| invalid("Invalid JSON payload received."))?;
    let plan = check_insert(&s, &project, &zone, &vm)?;
    s.inserts.push(vm.clone());
    Ok(Json(make(&mut s, &project, &vm, plan, q.request_id.as_deref())).into_response())
}

fn check_insert(s: &World, project: &str, zone: &str, vm: &Value) -> Result<Plan, Response> {
    let (name, machine_type, arch) = check_name_and_type(s, project, zone, vm)?;
    check_labels(&vm["labels"]).and(check_os_login(s, project, vm))?;
    for field in ["metadata", "tags", "scheduling", "labels"] {
        if !(vm[field].is_null() || vm[field].is_object()) {
            return Err(invalid(format!(
                "Invalid value for field 'resource.{field}'"
            )));
        }
    }
    let (boot, auto_delete) = check_boot_disk(&name, &machine_type, arch, vm)?;
    let disk_name = boot["diskName"].as_str().unwrap_or_default().to_string();
    // An existing disk of that name is attached instead of a new one, unless it is in use.
    let attach = s.disks.contains_key(&key_of(zone, &disk_name));
    if let Some(r) = disk_in_use(s, project, zone, &disk_name) {
        return Err(r);
    }
    check_scheduling(&vm["scheduling"])?;
    let (network, subnet) = check_network(s, project, zone, &vm["networkInterfaces"][0])?;
    if let Some(items) = vm["tags"]["items"].as_array() {
        if items.iter().any(|t| !valid_name(t.as_str().unwrap_or(""))) {
            return Err(invalid(
                "Invalid value for field 'resource.tags.items': tags must comply with RFC1035",
            ));
        }
    }
    let external = vm["networkInterfaces"][0]["accessConfigs"]
        .as_array()
        .is_some_and(|a| !a.is_empty());
    Ok(Plan {
        key: (zone.to_string(), name),
        machine_type,
        boot,
        disk_name,
        attach,
        auto_delete,
        network,
        subnet,
        external,
    })
}

/// The instance's name (not taken), its machine type (in its zone) and the type's architecture.
fn check_name_and_type(
    s: &World,
    project: &str,
    zone: &str,
    vm: &Value,
) -> Result<(String, String, &'static str), Response> {
    let name = vm["name"].as_str().unwrap_or_default().to_string();
    if !valid_name(&name) {
        return Err(invalid(format!(
            "Invalid value for field 'resource.name': '{name}'. Must be a match of regex '(?:[a-z](?:[-a-z0-9]{{0,61}}[a-z0-9])?)'"
        )));
    }
    if s.instances.contains_key(&key_of(zone, &name)) {
        return Err(gerr(
            409,
            "alreadyExists",
            format!(
                "The resource 'projects/{project}/zones/{zone}/instances/{name}' already exists"
            ),
        ));
    }
    let mt_field = vm["machineType"].as_str().unwrap_or_default();
    let mt = last_segment(mt_field).to_string();
    if !mt_field.contains(&format!("zones/{zone}/machineTypes/")) {
        return Err(invalid(format!(
            "Invalid value for field 'resource.machineType': '{mt_field}'. Machine type must be in zone {zone}"
        )));
    }
    let Some(arch) = arch_of_type(&mt).filter(|_| s.offers(zone, &mt)) else {
        return Err(invalid(format!(
            "Invalid value for field 'resource.machineType': '{mt_field}'. Machine type with name '{mt}' does not exist in zone '{zone}'."
        )));
    };
    Ok((name, mt, arch))
}

/// The one boot disk: its image (of the type's architecture), type and size; answers its
/// `initializeParams` with the name (the instance's by default), type and device name filled in,
/// and its `autoDelete`.
fn check_boot_disk(
    name: &str,
    mt: &str,
    type_arch: &str,
    vm: &Value,
) -> Result<(Value, bool), Response> {
    let disks = vm["disks"].as_array().cloned().unwrap_or_default();
    let boots: Vec<&Value> = disks.iter().filter(|d| d["boot"] == json!(true)).collect();
    if boots.len() != 1 || disks.len() != 1 {
        return Err(invalid("Invalid value for field 'resource.disks': exactly one boot disk is supported by the fake"));
    }
    let boot = boots[0];
    let mut params = boot["initializeParams"].clone();
    let source = params["sourceImage"].as_str().unwrap_or_default();
    let Some((_, image_arch)) = resolve_image(source) else {
        return Err(not_found(source));
    };
    if image_arch != type_arch {
        return Err(invalid(format!(
            "Invalid value for field 'resource.disks[0].initializeParams.sourceImage': '{source}'. The architecture of the image ({image_arch}) does not match the machine type {mt} ({type_arch})."
        )));
    }
    // The boot disk's labels are the disk's own (listed and filtered with it), checked as an
    // instance's are.
    check_labels_of(
        "resource.disks[0].initializeParams.labels",
        &params["labels"],
    )?;
    let disk_type = boot_disk_type(mt, params["diskType"].as_str()).map_err(invalid)?;
    let size: u64 = match &params["diskSizeGb"] {
        Value::Null => 10,
        Value::String(t) => t.parse().unwrap_or(0),
        Value::Number(n) => n.as_u64().unwrap_or(0),
        _ => 0,
    };
    if !(10..=65536).contains(&size) {
        return Err(invalid(format!(
            "Invalid value for field 'resource.disks[0].initializeParams.diskSizeGb': '{size}'. Disk size must be at least 10 GB"
        )));
    }
    let disk_name = params["diskName"].as_str().unwrap_or(name).to_string();
    params["diskName"] = json!(disk_name);
    params["diskType"] = json!(disk_type);
    if let Some(d) = boot.get("deviceName") {
        params["deviceName"] = d.clone();
    }
    Ok((params, boot["autoDelete"] != json!(false)))
}

/// `maxRunDuration`: at least 30 s, with a termination action.
fn check_scheduling(scheduling: &Value) -> Result<(), Response> {
    if scheduling.get("maxRunDuration").is_none() {
        return Ok(());
    }
    let secs: i64 = scheduling["maxRunDuration"]["seconds"]
        .as_str()
        .and_then(|t| t.parse().ok())
        .or_else(|| scheduling["maxRunDuration"]["seconds"].as_i64())
        .unwrap_or(-1);
    if secs < 30 {
        return Err(invalid(
            "Invalid value for field 'resource.scheduling.maxRunDuration': at least 30 seconds",
        ));
    }
    if scheduling["instanceTerminationAction"].as_str().is_none() {
        return Err(invalid("Invalid value for field 'resource.scheduling.instanceTerminationAction': required with maxRunDuration"));
    }
    Ok(())
}

/// The interface's network (existing) and subnet (named for a custom-mode network, in the
/// instance's region, of that network).
fn check_network(
    s: &World,
    project: &str,
    zone: &str,
    nic: &Value,
) -> Result<(String, String), Response> {
    let network = last_segment(nic["network"].as_str().unwrap_or("default")).to_string();
    if !s.networks.contains_key(&network) {
        return Err(not_found(&format!(
            "projects/{project}/global/networks/{network}"
        )));
    }
    let auto_mode = s.networks[&network]["autoCreateSubnetworks"] == json!(true);
    let region = region_of(zone).to_string();
    let Some(link) = nic["subnetwork"].as_str() else {
        return if auto_mode {
            Ok((network.clone(), network))
        } else {
            Err(invalid(format!(
                "Invalid value for field 'resource.networkInterfaces[0]': ''. Subnetwork should be specified for custom subnetmode network '{network}'."
            )))
        };
    };
    let name = last_segment(link).to_string();
    let in_region = link
        .split("/regions/")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .unwrap_or_default();
    if in_region != region {
        return Err(invalid(format!(
            "Invalid value for field 'resource.networkInterfaces[0].subnetwork': '{link}'. Subnetwork must be in the same region as the instance ({region})."
        )));
    }
    if s.subnets.get(&key_of(&region, &name)) != Some(&network) {
        return Err(not_found(&format!(
            "projects/{project}/regions/{region}/subnetworks/{name}"
        )));
    }
    Ok((network, name))
}

/// What the insert makes, decided now: quota refuses everything, no stock leaves the boot disk, a
/// failing operation leaves the instance and the disk. Answers the insert's operation.
fn make(s: &mut World, project: &str, vm: &Value, plan: Plan, request_id: Option<&str>) -> Value {
    let (zone, name) = plan.key.clone();
    let target = format!("{LINK}/projects/{PROJECT}/zones/{zone}/instances/{name}");
    let id = s.new_id();
    let error = if s.quota_exceeded > 0 {
        s.quota_exceeded -= 1;
        Some((
            "QUOTA_EXCEEDED".to_string(),
            format!(
                "Quota 'CPUS' exceeded.  Limit: 8.0 in region {}.",
                region_of(&zone)
            ),
            403,
        ))
    } else if let Some(code) = s.exhausted.get(&key_of(&zone, &plan.machine_type)).copied() {
        // The boot disk was made before the zone found no room for the instance: it has no user.
        make_disk(s, &plan, &target, id);
        if let Some(d) = s.disks.get_mut(&key_of(&zone, &plan.disk_name)) {
            d["users"] = json!([]);
        }
        Some((code.to_string(), no_room(project, &zone), 503))
    } else if let Some((code, message, status)) = s.fail_next.take() {
        make_disk(s, &plan, &target, id);
        make_vm(s, &plan, vm, id);
        Some((code, message, status))
    } else {
        make_disk(s, &plan, &target, id);
        make_vm(s, &plan, vm, id);
        None
    };
    let key = plan.key;
    let mut op = s.new_op(
        Some(&zone),
        "insert",
        target,
        Effect::Insert {
            key: key.clone(),
            error,
        },
        Some(key),
        request_id,
    );
    // `targetId`: the incarnation of the instance this insert is about.
    s.set_target_id(&mut op, &id.to_string());
    op
}

/// The boot disk: a new one, or the existing disk of its name attached to instance `target`.
fn make_disk(s: &mut World, plan: &Plan, target: &str, id: u64) {
    let (zone, name) = &plan.key;
    let dkey = key_of(zone, &plan.disk_name);
    match s.disks.get_mut(&dkey) {
        Some(d) if plan.attach => d["users"] = json!([target]),
        _ => {
            let d = disk_json(zone, &plan.boot, name, id);
            s.disks.insert(dkey, d);
        }
    }
}

/// The instance as the body `vm` asks for it (`PROVISIONING` until its insert ends).
fn make_vm(s: &mut World, plan: &Plan, vm: &Value, id: u64) {
    let (zone, name) = &plan.key;
    let mut metadata = or_empty(&vm["metadata"]);
    metadata["kind"] = json!("compute#metadata");
    metadata["fingerprint"] = json!("fp-meta-1");
    let mut tags = or_empty(&vm["tags"]);
    tags["fingerprint"] = json!("fp-tags-1");
    let labels = or_empty(&vm["labels"]);
    let mut made = instance_json(
        &s.utc,
        zone,
        name,
        &plan.machine_type,
        id,
        labels,
        tags,
        vm["scheduling"].clone(),
        metadata,
        plan.boot.clone(),
        &plan.network,
        &plan.subnet,
        plan.auto_delete,
        plan.external,
    );
    if let Some(h) = vm["hostname"].as_str() {
        made["hostname"] = json!(h);
    }
    s.instances.insert(plan.key.clone(), made);
    if !s.visibility_delay.is_zero() {
        let until = Instant::now() + s.visibility_delay;
        s.hidden_until.insert(plan.key.clone(), until);
    }
}
