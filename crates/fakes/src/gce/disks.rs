//! `disks` (get, delete), `machineTypes` (get, aggregatedList) and `images.getFromFamily`.

use super::*;

// Disks, machine types, images

pub(super) async fn get_disk(
    State(state): State<Shared>,
    Path((project, zone, name)): Path<(String, String, String)>,
) -> Response {
    if let Err(r) = check_project(&project) {
        return r;
    }
    match lock(&state).disks.get(&(zone.clone(), name.clone())) {
        Some(d) => Json(d.clone()).into_response(),
        None => not_found(&format!("projects/{project}/zones/{zone}/disks/{name}")),
    }
}

pub(super) async fn delete_disk(
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
    if !s.disks.contains_key(&key) {
        return not_found(&format!("projects/{project}/zones/{zone}/disks/{name}"));
    }
    if let Some(r) = disk_in_use(&s, &project, &zone, &name) {
        return r;
    }
    s.disks.remove(&key);
    let target = format!("{LINK}/projects/{PROJECT}/zones/{zone}/disks/{name}");
    let op = s.new_op(
        Some(&zone),
        "delete",
        target,
        Effect::None,
        None,
        q.request_id.as_deref(),
    );
    Json(op).into_response()
}

pub(super) async fn get_machine_type(
    Path((project, zone, name)): Path<(String, String, String)>,
) -> Response {
    if let Err(r) = check_project(&project).and(check_zone(&zone)) {
        return r;
    }
    match MACHINE_TYPES.iter().find(|(n, ..)| *n == name) {
        Some(t) => Json(machine_type_json(&zone, t)).into_response(),
        None => not_found(&format!(
            "projects/{project}/zones/{zone}/machineTypes/{name}"
        )),
    }
}

pub(super) fn machine_type_json(
    zone: &str,
    (n, arch, cpus, mem): &(&str, &str, u32, u32),
) -> Value {
    json!({
        "kind": "compute#machineType",
        "id": "1000",
        "creationTimestamp": "1969-12-31T16:00:00.000-08:00",
        "name": n,
        "description": format!("{cpus} vCPUs, {} GB RAM", mem / 1024),
        "guestCpus": cpus,
        "memoryMb": mem,
        "imageSpaceGb": 0,
        "maximumPersistentDisks": 128,
        "maximumPersistentDisksSizeGb": "263168",
        "zone": zone,
        "isSharedCpu": n.starts_with("e2-small") || n.starts_with("e2-medium"),
        "architecture": arch,
        "selfLink": machine_type_link(zone, n),
    })
}

pub(super) async fn image_from_family(Path((project, family)): Path<(String, String)>) -> Response {
    let found = IMAGES
        .iter()
        .find(|(f, ..)| project == IMAGE_PROJECT && *f == family);
    match found {
        Some((f, image, arch)) => Json(json!({
            "kind": "compute#image",
            "id": "2000",
            "name": image,
            "family": f,
            "architecture": arch,
            "status": "READY",
            "diskSizeGb": "10",
            "sourceType": "RAW",
            "selfLink": format!("{LINK}/projects/{IMAGE_PROJECT}/global/images/{image}"),
        }))
        .into_response(),
        None => not_found(&format!("projects/{project}/global/images/family/{family}")),
    }
}

pub(super) async fn aggregated_machine_types(
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
    let items: Vec<(String, Value)> = ZONES
        .iter()
        .flat_map(|z| {
            MACHINE_TYPES
                .iter()
                .map(move |t| (z.to_string(), machine_type_json(z, t)))
        })
        .filter(|(_, t)| filter.matches(t))
        .collect();
    aggregated_page(
        items,
        &q,
        "compute#machineTypeAggregatedList",
        "machineTypes",
        format!("{LINK}/projects/{PROJECT}/aggregated/machineTypes"),
    )
}
