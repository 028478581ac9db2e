//! `instances`: list, aggregatedList, get, insert, delete, start, stop, setMachineType, setLabels.

use super::*;

pub(super) async fn list_instances(
    State(state): State<Shared>,
    Path((project, zone)): Path<(String, String)>,
    Query(q): Query<ListQuery>,
) -> Response {
    if let Err(r) = check_project(&project).and(check_zone(&zone)) {
        return r;
    }
    let filter = match Filter::parse(q.filter.as_deref().unwrap_or("")) {
        Ok(f) => f,
        Err(e) => return invalid(format!("Invalid value for field 'filter': {e}")),
    };
    let s = lock(&state);
    let items: Vec<Value> = s
        .instances
        .iter()
        .filter(|(k, vm)| k.0 == zone && s.visible(k) && filter.matches(vm))
        .map(|(_, vm)| vm.clone())
        .collect();
    page(
        items,
        &q,
        "compute#instanceList",
        format!("{LINK}/projects/{PROJECT}/zones/{zone}/instances"),
    )
}

pub(super) async fn aggregated_instances(
    State(state): State<Shared>,
    Path(project): Path<String>,
    Query(q): Query<ListQuery>,
) -> Response {
    if let Err(r) = check_project(&project) {
        return r;
    }
    let filter = match Filter::parse(q.filter.as_deref().unwrap_or("")) {
        Ok(f) => f,
        Err(e) => return invalid(format!("Invalid value for field 'filter': {e}")),
    };
    let s = lock(&state);
    let items: Vec<(String, Value)> = s
        .instances
        .iter()
        .filter(|(k, vm)| s.visible(k) && filter.matches(vm))
        .map(|(k, vm)| (k.0.clone(), vm.clone()))
        .collect();
    aggregated_page(
        items,
        &q,
        "compute#instanceAggregatedList",
        "instances",
        format!("{LINK}/projects/{PROJECT}/aggregated/instances"),
    )
}

pub(super) async fn get_instance(
    State(state): State<Shared>,
    Path((project, zone, name)): Path<(String, String, String)>,
) -> Response {
    if let Err(r) = check_project(&project).and(check_zone(&zone)) {
        return r;
    }
    match lock(&state).visible_instance(&(zone.clone(), name.clone())) {
        Some(vm) => Json(vm.clone()).into_response(),
        None => not_found(&format!("projects/{project}/zones/{zone}/instances/{name}")),
    }
}

pub(super) fn resolve_image(source: &str) -> Option<(&'static str, &'static str)> {
    // projects/ubuntu-os-cloud/global/images/family/<family> or .../images/<name>, full URL or partial.
    let path = source
        .strip_prefix(LINK)
        .or_else(|| source.strip_prefix("https://compute.googleapis.com/compute/v1"))
        .unwrap_or(source)
        .trim_start_matches('/');
    let rest = path.strip_prefix(&format!("projects/{IMAGE_PROJECT}/global/images/"))?;
    IMAGES.iter().find_map(|(family, image, arch)| {
        (rest == format!("family/{family}") || rest == *image).then_some((*image, *arch))
    })
}

pub(super) async fn insert_instance(
    State(state): State<Shared>,
    Path((project, zone)): Path<(String, String)>,
    Query(q): Query<MutateQuery>,
    body: Bytes,
) -> Response {
    if let Err(r) = check_project(&project)
        .and(check_zone(&zone))
        .and(check_request_id(&q.request_id))
    {
        return r;
    }
    let mut s = lock(&state);
    if let Some(op) = s.repeated(q.request_id.as_deref()) {
        return Json(op).into_response();
    }
    let Ok(vm) = serde_json::from_slice::<Value>(&body) else {
        return invalid("Invalid JSON payload received.");
    };
    let name = vm["name"].as_str().unwrap_or_default().to_string();
    if !valid_name(&name) {
        return invalid(format!(
            "Invalid value for field 'resource.name': '{name}'. Must be a match of regex '(?:[a-z](?:[-a-z0-9]{{0,61}}[a-z0-9])?)'"
        ));
    }
    let key = (zone.clone(), name.clone());
    if s.instances.contains_key(&key) {
        return gerr(
            409,
            "alreadyExists",
            format!(
                "The resource 'projects/{project}/zones/{zone}/instances/{name}' already exists"
            ),
        );
    }
    let mt_field = vm["machineType"].as_str().unwrap_or_default();
    let mt = last_segment(mt_field).to_string();
    if !mt_field.contains(&format!("zones/{zone}/machineTypes/")) {
        return invalid(format!(
            "Invalid value for field 'resource.machineType': '{mt_field}'. Machine type must be in zone {zone}"
        ));
    }
    let Some(type_arch) = arch_of_type(&mt) else {
        return invalid(format!(
            "Invalid value for field 'resource.machineType': '{mt_field}'. Machine type with name '{mt}' does not exist in zone '{zone}'."
        ));
    };
    if let Err(r) = check_labels(&vm["labels"]).and(check_os_login(&s, &project, &vm)) {
        return r;
    }
    for field in ["metadata", "tags", "scheduling", "labels"] {
        if !(vm[field].is_null() || vm[field].is_object()) {
            return invalid(format!("Invalid value for field 'resource.{field}'"));
        }
    }
    let disks = vm["disks"].as_array().cloned().unwrap_or_default();
    let boots: Vec<&Value> = disks.iter().filter(|d| d["boot"] == json!(true)).collect();
    if boots.len() != 1 || disks.len() != 1 {
        return invalid("Invalid value for field 'resource.disks': exactly one boot disk is supported by the fake");
    }
    let boot = boots[0];
    let params = boot["initializeParams"].clone();
    let source = params["sourceImage"].as_str().unwrap_or_default();
    let Some((_, image_arch)) = resolve_image(source) else {
        return not_found(source);
    };
    if image_arch != type_arch {
        return invalid(format!(
            "Invalid value for field 'resource.disks[0].initializeParams.sourceImage': '{source}'. The architecture of the image ({image_arch}) does not match the machine type {mt} ({type_arch})."
        ));
    }
    let disk_type = match boot_disk_type(&mt, params["diskType"].as_str()) {
        Ok(t) => t,
        Err(why) => return invalid(why),
    };
    let size: u64 = match &params["diskSizeGb"] {
        Value::Null => 10,
        Value::String(t) => t.parse().unwrap_or(0),
        Value::Number(n) => n.as_u64().unwrap_or(0),
        _ => 0,
    };
    if !(10..=65536).contains(&size) {
        return invalid(format!(
            "Invalid value for field 'resource.disks[0].initializeParams.diskSizeGb': '{size}'. Disk size must be at least 10 GB"
        ));
    }
    let disk_name = params["diskName"].as_str().unwrap_or(&name).to_string();
    // An existing disk of that name is attached instead of a new one, unless it is in use.
    let attach = s.disks.contains_key(&(zone.clone(), disk_name.clone()));
    if let Some(r) = disk_in_use(&s, &project, &zone, &disk_name) {
        return r;
    }
    let scheduling = vm["scheduling"].clone();
    if scheduling.get("maxRunDuration").is_some() {
        let secs: i64 = scheduling["maxRunDuration"]["seconds"]
            .as_str()
            .and_then(|t| t.parse().ok())
            .or_else(|| scheduling["maxRunDuration"]["seconds"].as_i64())
            .unwrap_or(-1);
        if secs < 30 {
            return invalid(
                "Invalid value for field 'resource.scheduling.maxRunDuration': at least 30 seconds",
            );
        }
        if scheduling["instanceTerminationAction"].as_str().is_none() {
            return invalid("Invalid value for field 'resource.scheduling.instanceTerminationAction': required with maxRunDuration");
        }
    }
    let nic = &vm["networkInterfaces"][0];
    let network = last_segment(nic["network"].as_str().unwrap_or("default")).to_string();
    if !s.networks.contains_key(&network) {
        return not_found(&format!("projects/{project}/global/networks/{network}"));
    }
    let auto_mode = s.networks[&network]["autoCreateSubnetworks"] == json!(true);
    let region = region_of(&zone).to_string();
    let subnet = match nic["subnetwork"].as_str() {
        Some(link) => {
            let name = last_segment(link).to_string();
            let in_region = link
                .split("/regions/")
                .nth(1)
                .and_then(|r| r.split('/').next())
                .unwrap_or_default();
            if in_region != region {
                return invalid(format!(
                    "Invalid value for field 'resource.networkInterfaces[0].subnetwork': '{link}'. Subnetwork must be in the same region as the instance ({region})."
                ));
            }
            if s.subnets.get(&(region.clone(), name.clone())) != Some(&network) {
                return not_found(&format!(
                    "projects/{project}/regions/{region}/subnetworks/{name}"
                ));
            }
            name
        }
        None if auto_mode => network.clone(),
        None => {
            return invalid(format!(
                "Invalid value for field 'resource.networkInterfaces[0]': ''. Subnetwork should be specified for custom subnetmode network '{network}'."
            ))
        }
    };
    let hostname = vm["hostname"].as_str().map(str::to_string);
    let external = nic["accessConfigs"]
        .as_array()
        .is_some_and(|a| !a.is_empty());
    if let Some(items) = vm["tags"]["items"].as_array() {
        if items.iter().any(|t| !valid_name(t.as_str().unwrap_or(""))) {
            return invalid(
                "Invalid value for field 'resource.tags.items': tags must comply with RFC1035",
            );
        }
    }
    s.inserts.push(vm.clone());

    // The outcome, decided now: quota refuses everything, no stock leaves the boot disk, a failing
    // operation leaves the instance and the disk.
    let target = format!("{LINK}/projects/{PROJECT}/zones/{zone}/instances/{name}");
    let mut metadata = vm["metadata"].clone();
    if metadata.is_null() {
        metadata = json!({});
    }
    metadata["kind"] = json!("compute#metadata");
    metadata["fingerprint"] = json!("fp-meta-1");
    let mut tags = vm["tags"].clone();
    if tags.is_null() {
        tags = json!({});
    }
    tags["fingerprint"] = json!("fp-tags-1");
    let labels = if vm["labels"].is_null() {
        json!({})
    } else {
        vm["labels"].clone()
    };
    let auto_delete = boot["autoDelete"] != json!(false);
    let mut boot_info = params.clone();
    boot_info["diskName"] = json!(disk_name);
    boot_info["diskType"] = json!(disk_type);
    if let Some(d) = boot.get("deviceName") {
        boot_info["deviceName"] = d.clone();
    }
    let id = s.new_id();
    let make_vm = |s: &mut World| {
        let mut vm = instance_json(
            &zone,
            &name,
            &mt,
            id,
            labels.clone(),
            tags.clone(),
            scheduling.clone(),
            metadata.clone(),
            boot_info.clone(),
            &network,
            &subnet,
            auto_delete,
            external,
        );
        if let Some(h) = &hostname {
            vm["hostname"] = json!(h);
        }
        s.instances.insert(key.clone(), vm);
        if !s.visibility_delay.is_zero() {
            let until = Instant::now() + s.visibility_delay;
            s.hidden_until.insert(key.clone(), until);
        }
    };
    let make_disk = |s: &mut World| {
        let dkey = (zone.clone(), disk_name.clone());
        match s.disks.get_mut(&dkey) {
            Some(d) if attach => d["users"] = json!([target.clone()]),
            _ => {
                let d = disk_json(&zone, &boot_info, &name, id);
                s.disks.insert(dkey, d);
            }
        }
    };
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
    } else if let Some(code) = s.exhausted.get(&(zone.clone(), mt.clone())).copied() {
        // The boot disk was made before the zone found no room for the instance: it has no user.
        make_disk(&mut s);
        if let Some(d) = s.disks.get_mut(&(zone.clone(), disk_name.clone())) {
            d["users"] = json!([]);
        }
        Some((code.to_string(), no_room(&project, &zone), 503))
    } else if let Some((code, message)) = s.fail_next.take() {
        make_disk(&mut s);
        make_vm(&mut s);
        Some((code, message, 400))
    } else {
        make_disk(&mut s);
        make_vm(&mut s);
        None
    };
    let mut op = s.new_op(
        Some(&zone),
        "insert",
        target,
        Effect::Insert {
            key: key.clone(),
            error,
        },
        Some(key.clone()),
        q.request_id.as_deref(),
    );
    // `targetId`: the incarnation of the instance this insert is about.
    op["targetId"] = json!(id.to_string());
    if let Some(o) = op["name"].as_str().and_then(|n| s.ops.get_mut(n)) {
        o.value["targetId"] = json!(id.to_string());
    }
    Json(op).into_response()
}

pub(super) async fn delete_instance(
    State(state): State<Shared>,
    Path((project, zone, name)): Path<(String, String, String)>,
    Query(q): Query<MutateQuery>,
) -> Response {
    if let Err(r) = check_project(&project).and(check_request_id(&q.request_id)) {
        return r;
    }
    let mut s = lock(&state);
    if let Some(op) = s.repeated(q.request_id.as_deref()) {
        return Json(op).into_response();
    }
    let key = (zone.clone(), name.clone());
    if s.visible_instance(&key).is_none() {
        return not_found(&format!("projects/{project}/zones/{zone}/instances/{name}"));
    }
    if let Some(r) = not_ready(&s, &project, &key) {
        return r;
    }
    let vm = s.instances.get_mut(&key).expect("visible");
    vm["status"] = json!("STOPPING");
    let target = format!("{LINK}/projects/{PROJECT}/zones/{zone}/instances/{name}");
    let op = s.new_op(
        Some(&zone),
        "delete",
        target,
        Effect::Delete(key.clone()),
        Some(key),
        q.request_id.as_deref(),
    );
    Json(op).into_response()
}

pub(super) async fn instance_action(
    State(state): State<Shared>,
    Path((project, zone, name, action)): Path<(String, String, String, String)>,
    Query(q): Query<MutateQuery>,
    body: Bytes,
) -> Response {
    if let Err(r) = check_project(&project).and(check_request_id(&q.request_id)) {
        return r;
    }
    let mut s = lock(&state);
    if let Some(op) = s.repeated(q.request_id.as_deref()) {
        return Json(op).into_response();
    }
    let key = (zone.clone(), name.clone());
    let target = format!("{LINK}/projects/{PROJECT}/zones/{zone}/instances/{name}");
    let Some(vm) = s.visible_instance(&key).cloned() else {
        return not_found(&format!("projects/{project}/zones/{zone}/instances/{name}"));
    };
    if let Some(r) = not_ready(&s, &project, &key) {
        return r;
    }
    let status = vm["status"].as_str().unwrap_or_default().to_string();
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let effect = match action.as_str() {
        "start" => {
            // A stopped instance holds no resources: its start needs room for its type in the zone.
            let mt = last_segment(vm["machineType"].as_str().unwrap_or_default()).to_string();
            let no_room = match s.exhausted.get(&(zone.clone(), mt)) {
                Some(code) if status == "TERMINATED" => {
                    Some((code.to_string(), no_room(&project, &zone), 503))
                }
                _ => None,
            };
            if status == "TERMINATED" {
                s.instances.get_mut(&key).expect("exists")["status"] = json!("STAGING");
            }
            Effect::Start(key.clone(), no_room)
        }
        "stop" => {
            if status != "TERMINATED" {
                s.instances.get_mut(&key).expect("exists")["status"] = json!("STOPPING");
            }
            Effect::Stop(key.clone())
        }
        "setMachineType" => {
            let mt_field = body["machineType"].as_str().unwrap_or_default();
            let mt = last_segment(mt_field).to_string();
            let (Some(new_arch), Some(old_arch)) = (
                arch_of_type(&mt),
                arch_of_type(last_segment(vm["machineType"].as_str().unwrap_or_default())),
            ) else {
                return invalid(format!(
                    "Invalid value for field 'machineType': '{mt_field}'. Machine type with name '{mt}' does not exist in zone '{zone}'."
                ));
            };
            if status != "TERMINATED" {
                return gerr(
                    400,
                    "invalidResourceUsage",
                    "Invalid resource usage: 'Instance should be in the STOPPED state.'",
                );
            }
            if new_arch != old_arch {
                return invalid(format!(
                    "Invalid value for field 'machineType': '{mt}'. The architecture of the boot disk does not match the machine type"
                ));
            }
            Effect::SetMachineType(key.clone(), mt)
        }
        "setLabels" => {
            let fp = body["labelFingerprint"].as_str().unwrap_or_default();
            if fp != vm["labelFingerprint"].as_str().unwrap_or_default() {
                return gerr(
                    412,
                    "conditionNotMet",
                    "Labels fingerprint either invalid or resource labels have changed",
                );
            }
            let labels = if body["labels"].is_null() {
                json!({})
            } else {
                body["labels"].clone()
            };
            if let Err(r) = check_labels(&labels) {
                return r;
            }
            let vm = s.instances.get_mut(&key).expect("exists");
            vm["labelFingerprint"] = json!(label_fingerprint(&labels));
            vm["labels"] = labels;
            Effect::None
        }
        other => return gerr(404, "notFound", format!("Unknown method '{other}'")),
    };
    let op = s.new_op(
        Some(&zone),
        &action,
        target,
        effect,
        Some(key),
        q.request_id.as_deref(),
    );
    Json(op).into_response()
}

/// 400 `resourceInUseByAnotherResource` when disk `name` exists and an instance uses it (a boot
/// disk of that name would be attached, and a disk in read-write use cannot be attached again).
pub(super) fn disk_in_use(s: &World, project: &str, zone: &str, name: &str) -> Option<Response> {
    let disk = s.disks.get(&(zone.to_string(), name.to_string()))?;
    let user = disk["users"].as_array()?.iter().find_map(|u| {
        let u = u.as_str()?;
        s.instances
            .contains_key(&(zone.to_string(), last_segment(u).to_string()))
            .then(|| u.trim_start_matches(&format!("{LINK}/")).to_string())
    })?;
    Some(gerr(
        400,
        "resourceInUseByAnotherResource",
        format!("The disk resource 'projects/{project}/zones/{zone}/disks/{name}' is already being used by '{user}'"),
    ))
}

/// The value of metadata item `key` of instance body `vm`.
pub(super) fn metadata_item<'a>(vm: &'a Value, key: &str) -> Option<&'a str> {
    vm["metadata"]["items"]
        .as_array()?
        .iter()
        .find(|i| i["key"] == key)
        .and_then(|i| i["value"].as_str())
}

/// Where the organisation policy `constraints/compute.requireOsLogin` is enforced, an instance
/// that turns OS Login off (metadata `enable-oslogin` false) is refused with 412 `conditionNotMet`.
fn check_os_login(s: &World, project: &str, vm: &Value) -> Result<(), Response> {
    let off = metadata_item(vm, "enable-oslogin").is_some_and(|v| v.eq_ignore_ascii_case("false"));
    if s.os_login_required && off {
        return Err(gerr(
            412,
            "conditionNotMet",
            format!("Constraint constraints/compute.requireOsLogin violated for project {project}."),
        ));
    }
    Ok(())
}

/// `resourceNotReady` while an operation holds instance `key`: Compute Engine refuses another
/// change of a resource until the operation changing it ends.
fn not_ready(s: &World, project: &str, key: &Key) -> Option<Response> {
    let op = s.holder(key)?;
    Some(gerr(
        400,
        "resourceNotReady",
        format!(
            "The resource 'projects/{project}/zones/{}/instances/{}' is not ready (operation {op} is running)",
            key.0, key.1
        ),
    ))
}

/// Compute Engine's words for a zone without room for a machine type.
fn no_room(project: &str, zone: &str) -> String {
    format!("The zone 'projects/{project}/zones/{zone}' does not have enough resources available to fulfill the request.  Try a different zone, or try again later.")
}
