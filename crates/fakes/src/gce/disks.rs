//! `disks` (get, list, aggregatedList, delete), `machineTypes` (get, aggregatedList) and
//! `images.getFromFamily`.

use super::*;

// Disks, machine types, images

pub(super) async fn get_disk(
    State(state): State<Shared>,
    Path((project, zone, name)): Path<(String, String, String)>,
) -> Answer {
    check_project(&project)?;
    let disk = lock(&state).disks.get(&key_of(&zone, &name)).cloned();
    let disk =
        disk.ok_or_else(|| not_found(&format!("projects/{project}/zones/{zone}/disks/{name}")))?;
    Ok(Json(disk).into_response())
}

pub(super) async fn list_disks(
    State(state): State<Shared>,
    Path((project, zone)): Path<(String, String)>,
    Query(q): Query<ListQuery>,
) -> Answer {
    check_project(&project).and(check_zone(&zone))?;
    let filter = filter_of(&q)?;
    let s = lock(&state);
    let items: Vec<Value> = s
        .disks
        .iter()
        .filter(|(k, d)| k.0 == zone && filter.matches(d))
        .map(|(_, d)| d.clone())
        .collect();
    page(
        items,
        &q,
        "compute#diskList",
        format!("{LINK}/projects/{PROJECT}/zones/{zone}/disks"),
    )
}

pub(super) async fn aggregated_disks(
    State(state): State<Shared>,
    Path(project): Path<String>,
    Query(q): Query<ListQuery>,
) -> Answer {
    check_project(&project)?;
    let filter = filter_of(&q)?;
    let s = lock(&state);
    let items: Vec<(String, Value)> = s
        .disks
        .iter()
        .filter(|(_, d)| filter.matches(d))
        .map(|(k, d)| (k.0.clone(), d.clone()))
        .collect();
    aggregated_page(
        items,
        &q,
        "compute#diskAggregatedList",
        "disks",
        format!("{LINK}/projects/{PROJECT}/aggregated/disks"),
    )
}

pub(super) async fn delete_disk(
    State(state): State<Shared>,
    Path((project, zone, name)): Path<(String, String, String)>,
    Query(q): Query<MutateQuery>,
) -> Answer {
    check_project(&project)?;
    let mut s = change(&state, &q.request_id)?;
    let key = key_of(&zone, &name);
    if !s.disks.contains_key(&key) {
        return Err(not_found(&format!(
            "projects/{project}/zones/{zone}/disks/{name}"
        )));
    }
    if let Some(r) = disk_in_use(&s, &project, &zone, &name) {
        return Err(r);
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
    Ok(Json(op).into_response())
}

pub(super) async fn get_machine_type(
    State(state): State<Shared>,
    Path((project, zone, name)): Path<(String, String, String)>,
) -> Answer {
    check_project(&project).and(check_zone(&zone))?;
    let offered = lock(&state).offers(&zone, &name);
    let t = MACHINE_TYPES
        .iter()
        .find(|(n, ..)| *n == name)
        .filter(|_| offered);
    let t = t.ok_or_else(|| {
        not_found(&format!(
            "projects/{project}/zones/{zone}/machineTypes/{name}"
        ))
    })?;
    Ok(Json(machine_type_json(&zone, t)).into_response())
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
        Some(i) => Json(image_body(i)).into_response(),
        None => not_found(&format!("projects/{project}/global/images/family/{family}")),
    }
}

/// `images.get`: an image of the public Ubuntu project by its name.
pub(super) async fn get_image(Path((project, name)): Path<(String, String)>) -> Response {
    let found = IMAGES
        .iter()
        .find(|(_, image, _)| project == IMAGE_PROJECT && *image == name);
    match found {
        Some(i) => Json(image_body(i)).into_response(),
        None => not_found(&format!("projects/{project}/global/images/{name}")),
    }
}

/// An image as Compute Engine answers it: its family and architecture.
fn image_body(&(f, image, arch): &(&str, &str, &str)) -> Value {
    json!({
        "kind": "compute#image",
        "id": "2000",
        "name": image,
        "family": f,
        "architecture": arch,
        "status": "READY",
        "diskSizeGb": "10",
        "sourceType": "RAW",
        "selfLink": format!("{LINK}/projects/{IMAGE_PROJECT}/global/images/{image}"),
    })
}

pub(super) async fn aggregated_machine_types(
    State(state): State<Shared>,
    Path(project): Path<String>,
    Query(q): Query<ListQuery>,
) -> Answer {
    check_project(&project)?;
    let filter = filter_of(&q)?;
    let s = lock(&state);
    let items: Vec<(String, Value)> = ZONES
        .iter()
        .flat_map(|z| {
            MACHINE_TYPES
                .iter()
                .filter(|t| s.offers(z, t.0))
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
