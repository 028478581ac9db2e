//! `instances`: list, aggregatedList, get, delete, start, stop, setMachineType, setLabels (insert
//! is in `insert.rs`).

use super::*;

pub(super) async fn list_instances(
    State(state): State<Shared>,
    Path((project, zone)): Path<(String, String)>,
    Query(q): Query<ListQuery>,
) -> Answer {
    check_project(&project).and(check_zone(&zone))?;
    let filter = filter_of(&q)?;
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
) -> Answer {
    check_project(&project)?;
    let filter = filter_of(&q)?;
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
) -> Answer {
    check_project(&project).and(check_zone(&zone))?;
    let vm = lock(&state)
        .visible_instance(&key_of(&zone, &name))
        .cloned();
    let vm = vm.ok_or_else(|| instance_not_found(&project, &zone, &name))?;
    Ok(Json(vm).into_response())
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

pub(super) async fn delete_instance(
    State(state): State<Shared>,
    Path((project, zone, name)): Path<(String, String, String)>,
    Query(q): Query<MutateQuery>,
) -> Answer {
    check_project(&project)?;
    let mut s = change(&state, &q.request_id)?;
    let (key, vm) = changeable(&s, &project, &zone, &name)?;
    // "The instance is currently stopping (either being deleted or killed)" until it is gone; a
    // delete kept `PENDING` leaves the instance as it reads until the delete runs.
    let pending = s.delete_pending;
    if pending.is_zero() {
        s.instances.get_mut(&key).expect("visible")["status"] = json!("STOPPING");
    }
    let target = format!("{LINK}/projects/{PROJECT}/zones/{zone}/instances/{name}");
    let mut op = s.new_op(
        Some(&zone),
        "delete",
        target,
        Effect::Delete(key.clone()),
        Some(key),
        q.request_id.as_deref(),
    );
    s.set_target_id(&mut op, vm["id"].as_str().unwrap_or_default());
    if !pending.is_zero() {
        s.keep_pending(op["name"].as_str().unwrap_or_default(), pending);
    }
    Ok(Json(op).into_response())
}

pub(super) async fn instance_action(
    State(state): State<Shared>,
    Path((project, zone, name, action)): Path<(String, String, String, String)>,
    Query(q): Query<MutateQuery>,
    body: Bytes,
) -> Answer {
    check_project(&project)?;
    let mut s = change(&state, &q.request_id)?;
    let (key, vm) = changeable(&s, &project, &zone, &name)?;
    let target = format!("{LINK}/projects/{PROJECT}/zones/{zone}/instances/{name}");
    let status = vm["status"].as_str().unwrap_or_default().to_string();
    let machine_type = last_segment(vm["machineType"].as_str().unwrap_or_default()).to_string();
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let effect = match action.as_str() {
        "start" => {
            // A stopped instance holds no resources: its start needs room for its type in the zone.
            let no_room = match s.exhausted.get(&key_of(&zone, &machine_type)) {
                Some(code) if status == "TERMINATED" => {
                    Some((code.to_string(), no_room(&project, &zone), 503))
                }
                _ if status == "TERMINATED" && s.start_quota_exceeded > 0 => {
                    s.start_quota_exceeded -= 1;
                    let why = format!(
                        "Quota 'CPUS' exceeded.  Limit: 8.0 in region {}.",
                        super::world::region_of(&zone)
                    );
                    Some(("QUOTA_EXCEEDED".to_string(), why, 403))
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
            let (Some(new_arch), Some(old_arch)) = (arch_of_type(&mt), arch_of_type(&machine_type))
            else {
                return Err(invalid(format!(
                    "Invalid value for field 'machineType': '{mt_field}'. Machine type with name '{mt}' does not exist in zone '{zone}'."
                )));
            };
            if status != "TERMINATED" {
                return Err(gerr(
                    400,
                    "invalidResourceUsage",
                    "Invalid resource usage: 'Instance should be in the STOPPED state.'",
                ));
            }
            if new_arch != old_arch {
                return Err(invalid(format!(
                    "Invalid value for field 'machineType': '{mt}'. The architecture of the boot disk does not match the machine type"
                )));
            }
            Effect::SetMachineType(key.clone(), mt)
        }
        "setLabels" => {
            let fp = body["labelFingerprint"].as_str().unwrap_or_default();
            if fp != vm["labelFingerprint"].as_str().unwrap_or_default() {
                return Err(gerr(
                    412,
                    "conditionNotMet",
                    "Labels fingerprint either invalid or resource labels have changed",
                ));
            }
            let labels = or_empty(&body["labels"]);
            check_labels(&labels)?;
            let vm = s.instances.get_mut(&key).expect("exists");
            vm["labelFingerprint"] = json!(label_fingerprint(&labels));
            vm["labels"] = labels;
            Effect::None
        }
        other => return Err(gerr(404, "notFound", format!("Unknown method '{other}'"))),
    };
    let mut op = s.new_op(
        Some(&zone),
        &action,
        target,
        effect,
        Some(key),
        q.request_id.as_deref(),
    );
    s.set_target_id(&mut op, vm["id"].as_str().unwrap_or_default());
    Ok(Json(op).into_response())
}

/// 400 `resourceInUseByAnotherResource` when disk `name` exists and an instance uses it (a boot
/// disk of that name would be attached, and a disk in read-write use cannot be attached again).
pub(super) fn disk_in_use(s: &World, project: &str, zone: &str, name: &str) -> Option<Response> {
    let disk = s.disks.get(&key_of(zone, name))?;
    let user = disk["users"].as_array()?.iter().find_map(|u| {
        let u = u.as_str()?;
        s.instances
            .contains_key(&key_of(zone, last_segment(u)))
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
pub(super) fn check_os_login(s: &World, project: &str, vm: &Value) -> Result<(), Response> {
    let off = metadata_item(vm, "enable-oslogin").is_some_and(|v| v.eq_ignore_ascii_case("false"));
    if s.os_login_required && off {
        return Err(gerr(
            412,
            "conditionNotMet",
            format!(
                "Constraint constraints/compute.requireOsLogin violated for project {project}."
            ),
        ));
    }
    Ok(())
}

/// 404 for instance `name` of `zone`.
fn instance_not_found(project: &str, zone: &str, name: &str) -> Response {
    not_found(&format!("projects/{project}/zones/{zone}/instances/{name}"))
}

/// The visible instance `name` of `zone`, with its key, when a change of it may start: 404 while
/// it is not there (or not visible yet), `resourceNotReady` while an operation holds it.
fn changeable(s: &World, project: &str, zone: &str, name: &str) -> Result<(Key, Value), Response> {
    let key = key_of(zone, name);
    let Some(vm) = s.visible_instance(&key).cloned() else {
        return Err(instance_not_found(project, zone, name));
    };
    not_ready(s, project, &key)?;
    Ok((key, vm))
}

/// `resourceNotReady` while an operation holds instance `key`: Compute Engine refuses another
/// change of a resource until the operation changing it ends.
fn not_ready(s: &World, project: &str, key: &Key) -> Result<(), Response> {
    let Some(op) = s.holder(key) else {
        return Ok(());
    };
    Err(gerr(
        400,
        "resourceNotReady",
        format!(
            "The resource 'projects/{project}/zones/{}/instances/{}' is not ready (operation {op} is running)",
            key.0, key.1
        ),
    ))
}

/// Compute Engine's words for a zone without room for a machine type.
pub(super) fn no_room(project: &str, zone: &str) -> String {
    format!("The zone 'projects/{project}/zones/{zone}' does not have enough resources available to fulfill the request.  Try a different zone, or try again later.")
}
