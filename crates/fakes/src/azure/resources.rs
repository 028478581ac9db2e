//! Generic resource calls: `GET`, lists, `PUT` (with its checks: If-None-Match, operations in
//! progress, policy denies), `PATCH`, `DELETE` (with what Azure refuses to delete) and the Tags API.

#[allow(unused_imports)]
use super::*;

/// What the kind-specific part of a `PUT` reads.
#[derive(Clone, Copy)]
pub(super) struct Put<'a> {
    pub(super) r: &'a Req,
    pub(super) rg: &'a str,
    pub(super) name: &'a str,
    pub(super) id: &'a str,
    pub(super) key: &'a str,
    pub(super) location: &'a str,
    pub(super) tags: &'a Value,
    pub(super) props: &'a Value,
}

pub(super) fn list(st: &State, r: &Req, rg: &str, kind: Kind) -> Response {
    let prefix = format!(
        "/subscriptions/{}/resourcegroups/{}/providers/{}/",
        SUBSCRIPTION,
        rg,
        kind.type_name()
    )
    .to_ascii_lowercase();
    // The specification: `$expand=instanceView` on a list "can only be specified if a valid $filter
    // option is specified"; without one the fake leaves the instance view out.
    let expand = r.q("$expand").is_some_and(|e| eq(e, "instanceView")) && r.q("$filter").is_some();
    let items: Vec<Value> = st
        .res
        .iter()
        .filter(|(k, res)| k.starts_with(&prefix) && res.kind == kind && res.visible())
        .map(|(_, res)| view(res, expand))
        .collect();
    let (got, next) = page(&items, r, st.page_size, "$skiptoken");
    list_answer(got, next)
}

pub(super) fn view(res: &Res, expand: bool) -> Value {
    let mut b = res.body.clone();
    if expand && res.kind == Kind::Vm {
        b["properties"]["instanceView"] = instance_view(res);
    }
    b
}

pub(super) fn get(st: &State, r: &Req, rg: &str, kind: Kind, name: &str) -> Response {
    match st.res.get(&key(rg, kind, name)).filter(|x| x.visible()) {
        Some(res) => {
            let mut b = view(res, r.q("$expand").is_some_and(|e| eq(e, "instanceView")));
            if kind == Kind::Nic && st.late_nic_link {
                let vm = b["properties"]["virtualMachine"]["id"]
                    .as_str()
                    .unwrap_or("");
                let unseen = st
                    .res
                    .get(&vm.to_ascii_lowercase())
                    .is_some_and(|v| !v.visible());
                if unseen {
                    if let Some(p) = b["properties"].as_object_mut() {
                        p.remove("virtualMachine");
                    }
                }
            }
            // A security group names the interfaces that use it (read-only, as Azure shows it).
            if kind == Kind::Nsg {
                let users = nsg_users(st, b["id"].as_str().unwrap_or(""));
                if !users.is_empty() {
                    b["properties"]["networkInterfaces"] =
                        users.iter().map(|u| json!({ "id": u })).collect();
                }
            }
            ok(b)
        }
        None => not_found(kind, name, rg),
    }
}

/// The ids of the interfaces that use security group `id`.
fn nsg_users<'a>(st: &'a State, id: &str) -> Vec<&'a str> {
    st.res
        .values()
        .filter(|x| {
            x.kind == Kind::Nic
                && x.body["properties"]["networkSecurityGroup"]["id"]
                    .as_str()
                    .is_some_and(|n| eq(n, id))
        })
        .map(|x| x.body["id"].as_str().unwrap_or(""))
        .collect()
}

/// A referenced resource id that must exist; the error answer when it does not.
pub(super) fn must_exist(st: &State, id: &str, by: &str) -> Option<Response> {
    let key = id.to_ascii_lowercase();
    let found = if let Some(i) = key.find("/subnets/") {
        let (vnet, sub) = (&key[..i], &key[i + 9..]);
        st.res.get(vnet).is_some_and(|v| {
            v.body["properties"]["subnets"]
                .as_array()
                .is_some_and(|s| s.iter().any(|x| named(x, sub)))
        })
    } else {
        st.res.contains_key(&key)
    };
    if found {
        None
    } else {
        Some(err(
            400,
            "InvalidResourceReference",
            &format!("Resource {id} referenced by resource {by} was not found. Please make sure that the referenced resource exists, and that both resources are in the same region."),
        ))
    }
}

/// The error answer for the first reference of `refs` (`[{"id": ...}]`, by `by`) whose resource does
/// not exist.
pub(super) fn first_missing(st: &State, refs: &Value, by: &str) -> Option<Response> {
    items(refs).find_map(|a| must_exist(st, a["id"].as_str().unwrap_or(""), by))
}

/// The 403 `RequestDisallowedByPolicy` of a `PUT` a policy assignment denies: a deny of the
/// resource's type ([`FakeAzure::deny_policy`]), or the landing zones' deny of public addresses
/// ([`FakeAzure::deny_public_addresses`]): a public address, or an interface that carries one.
fn policy_refusal(st: &State, kind: Kind, name: &str, body: &Value) -> Option<Response> {
    // The built-in definitions denying: (name, display name).
    let types = (
        "6c112d4e-5bc7-47ae-a041-ea2d9dccd749",
        "Not allowed resource types",
    );
    let nic_ips = "Network interfaces should not have public IPs";
    // (assignment, definition, assignment display name)
    let (assignment, (def, def_display), display) =
        if let Some((_, a)) = st.deny.iter().find(|(t, _)| eq(t, kind.type_name())) {
            (a.clone(), types, format!("Deny {}", kind.type_name()))
        } else {
            let a = st.deny_public.clone()?;
            let carries_public = items(&body["properties"]["ipConfigurations"])
                .any(|c| !c["properties"]["publicIPAddress"].is_null());
            match kind {
                Kind::Pip => (a, types, "Public IP addresses should be denied".to_string()),
                Kind::Nic if carries_public => {
                    let def = ("83a86a26-fd1f-447c-b59d-e51f44264114", nic_ips);
                    (a, def, nic_ips.to_string())
                }
                _ => return None,
            }
        };
    let assignment_id = format!(
        "/subscriptions/{SUBSCRIPTION}/providers/Microsoft.Authorization/policyAssignments/{assignment}"
    );
    let info = json!([{"type": "PolicyViolation", "info": {
        "evaluationDetails": {"evaluatedExpressions": []},
        "policyDefinitionId": format!("/providers/Microsoft.Authorization/policyDefinitions/{def}"),
        "policyDefinitionName": def,
        "policyDefinitionDisplayName": def_display,
        "policyDefinitionEffect": "deny",
        "policyAssignmentId": assignment_id,
        "policyAssignmentName": assignment,
        "policyAssignmentDisplayName": display,
        "policyAssignmentScope": format!("/subscriptions/{SUBSCRIPTION}"),
    }}]);
    Some(err_with(
        403,
        "RequestDisallowedByPolicy",
        &format!("Resource '{name}' was disallowed by policy. Policy identifiers: '[{{\"policyAssignment\":{{\"name\":\"{display}\",\"id\":\"{assignment_id}\"}},\"policyDefinition\":{{\"name\":\"{def_display}\"}}}}]'."),
        json!({"target": name, "additionalInfo": info}),
    ))
}

pub(super) fn put(st: &mut State, r: &Req, rg: &str, kind: Kind, name: &str) -> Response {
    let id = rid(rg, kind, name);
    let key = id.to_ascii_lowercase();
    let exists = st.res.contains_key(&key);
    if exists && r.headers.get("if-none-match").and_then(|v| v.to_str().ok()) == Some("*") {
        return err(
            412,
            "PreconditionFailed",
            &format!(
                "The resource '{name}' already exists and the request carries If-None-Match: *."
            ),
        );
    }
    if let Some(e) = busy(st, &key, kind).or_else(|| busy_dependency(st, kind, &r.body)) {
        return e;
    }
    if let Some(e) = policy_refusal(st, kind, name, &r.body) {
        return e;
    }
    let Some(location) = r.body["location"].as_str().map(str::to_string) else {
        return err(
            400,
            "LocationRequired",
            "The location property is required for this definition.",
        );
    };
    let tags = r.body.get("tags").cloned().unwrap_or(json!({}));
    let props = r.body.get("properties").cloned().unwrap_or(json!({}));
    let mut body = json!({
        "id": id, "name": name, "type": kind.type_name(), "location": location, "tags": tags,
        "properties": props,
    });
    let mut action = Action::Put;
    let mut power = String::new();
    let p = Put {
        r,
        rg,
        name,
        id: &id,
        key: &key,
        location: &location,
        tags: &tags,
        props: &props,
    };
    let prepared = match kind {
        Kind::Pip => prepare_pip(st, &p, &mut body),
        Kind::Nsg => prepare_nsg(&p, &mut body),
        Kind::Nic => prepare_nic(st, &p, &mut body),
        Kind::Vm => prepare_vm(st, &p, &mut body, &mut action, &mut power),
        Kind::Asg | Kind::Vnet | Kind::Disk => Ok(()),
    };
    if let Err(e) = prepared {
        return e;
    }
    body["properties"]["provisioningState"] = json!(kind.busy_state());
    // A new VM shows to reads only after the visibility delay (kept when the PUT updates one).
    let visible_at = match st.res.get(&key) {
        Some(old) => old.visible_at,
        None if kind == Kind::Vm && !st.visibility_delay.is_zero() => {
            Some(Instant::now() + st.visibility_delay)
        }
        None => None,
    };
    st.res.insert(
        key.clone(),
        Res {
            kind,
            body: body.clone(),
            power,
            visible_at,
            failure: None,
        },
    );
    let op = start_op(st, r, &key, kind, &location, action);
    let mut headers = vec![("Azure-AsyncOperation", op)];
    headers.extend(retry_after(st));
    answer(if exists { 200 } else { 201 }, body, &headers)
}

pub(super) fn patch(st: &mut State, r: &Req, rg: &str, kind: Kind, name: &str) -> Response {
    let key = key(rg, kind, name);
    if let Some(e) = busy(st, &key, kind) {
        return e;
    }
    // A VM's size and its OS disk's delete option change by `PATCH`.
    let is_vm = kind == Kind::Vm;
    let size = r.body["properties"]["hardwareProfile"]["vmSize"]
        .as_str()
        .filter(|_| is_vm);
    if let (Some(size), Some(res)) = (size, st.res.get(&key).filter(|x| x.visible())) {
        if let Some(e) = cluster_refusal(st, &key, res, size) {
            return e;
        }
    }
    let delete_option = Some(&r.body["properties"]["storageProfile"]["osDisk"]["deleteOption"])
        .filter(|d| is_vm && !d.is_null());
    if let Some(delete_option) =
        delete_option.filter(|d| !matches!(d.as_str(), Some("Delete" | "Detach")))
    {
        return invalid_parameter("deleteOption", &format!("The value '{delete_option}' of parameter 'deleteOption' is not allowed. Allowed values are 'Delete', 'Detach'."));
    }
    let Some(res) = st.res.get_mut(&key).filter(|x| x.visible()) else {
        return not_found(kind, name, rg);
    };
    if let Some(t) = r.body.get("tags") {
        res.body["tags"] = t.clone();
    }
    if let Some(d) = delete_option {
        // What the VM's delete does to its OS disk can change on an existing VM.
        res.body["properties"]["storageProfile"]["osDisk"]["deleteOption"] = d.clone();
    }
    let restart = size.is_some() && res.power == "running";
    if let Some(size) = size {
        res.body["properties"]["hardwareProfile"]["vmSize"] = json!(size);
    }
    res.body["properties"]["provisioningState"] = json!("Updating");
    if restart {
        res.power = "starting".into();
    }
    let body = res.body.clone();
    let location = location_of(&body);
    let action = if restart {
        Action::Power("running")
    } else {
        Action::Put
    };
    let op = start_op(st, r, &key, kind, &location, action);
    answer(200, body, &[("Azure-AsyncOperation", op)])
}

pub(super) fn delete(st: &mut State, r: &Req, rg: &str, kind: Kind, name: &str) -> Response {
    let id = rid(rg, kind, name);
    let key = id.to_ascii_lowercase();
    let Some(res) = st.res.get(&key).cloned() else {
        // Azure answers 204 No Content to a DELETE of a resource that does not exist.
        return answer(204, Value::Null, &[]);
    };
    if !res.visible() {
        // Not yet shown to reads: changes of it answer "not found" for now.
        return not_found(kind, name, rg);
    }
    if let Some(e) = busy(st, &key, kind) {
        return e;
    }
    // A delete lock on the resource, or on one the VM's delete would delete with it (its disk,
    // interface or address by their `deleteOption`), refuses the delete: nothing goes.
    let mut scopes = vec![id.clone()];
    if kind == Kind::Vm {
        scopes.extend(cascade_of(st, &res.body));
    }
    let locked: Vec<&str> = scopes
        .iter()
        .map(String::as_str)
        .filter(|s| {
            let n = s.rsplit('/').next().unwrap_or("");
            st.refuse_delete.contains(&n.to_ascii_lowercase())
        })
        .collect();
    if !locked.is_empty() {
        return err(
            409,
            "ScopeLocked",
            &format!("The scope '{id}' cannot perform delete operation because following scope(s) are locked: '{}'. Please remove the lock and try again.", locked.join("', '")),
        );
    }
    if let Some(e) = in_use(st, kind, &res.body, &id, name) {
        return e;
    }
    let location = location_of(&res.body);
    if kind == Kind::Vm {
        preempt(st, &key);
    }
    if let Some(x) = st.res.get_mut(&key) {
        x.body["properties"]["provisioningState"] = json!("Deleting");
        if kind == Kind::Vm && !x.power.is_empty() {
            x.power = "stopping".into();
        }
    }
    let op = start_op(st, r, &key, kind, &location, Action::Delete);
    let mut headers = vec![("Azure-AsyncOperation", op.clone()), ("Location", op)];
    headers.extend(retry_after(st));
    answer(202, Value::Null, &headers)
}

/// Ends the operations still running on VM `key` (its create, an update, a power action) as
/// Azure does when a delete preempts them: `Canceled`, with `OperationPreempted`.
fn preempt(st: &mut State, key: &str) {
    let running = st.ops.values_mut().filter(|o| {
        o.key == key
            && o.outcome.is_none()
            && matches!(o.action, Action::Put | Action::Fail(..) | Action::Power(_))
    });
    for o in running {
        o.outcome = Some(Err((
            PREEMPTED.to_string(),
            "Operation execution has been preempted by a more recent operation.".to_string(),
        )));
    }
}

/// Azure's refusal to delete resource `id` (`name`) of `kind` whose body is `body` while something
/// holds it: an interface reserved for a VM or attached to one, a security group interfaces use, a
/// disk attached to a VM, a public address an interface holds.
fn in_use(st: &mut State, kind: Kind, body: &Value, id: &str, name: &str) -> Option<Response> {
    match kind {
        Kind::Nic => reserved_for_another(st, id, "").or_else(|| {
            let vm = body["properties"]["virtualMachine"]["id"].as_str()?;
            Some(err(
                400,
                "NicInUse",
                &format!("Network Interface {id} is used by existing resource {vm}. In order to delete the network interface, it must be dissociated from the resource."),
            ))
        }),
        Kind::Nsg => {
            let users = nsg_users(st, id);
            (!users.is_empty()).then(|| err(
                400,
                "InUseNetworkSecurityGroupCannotBeDeleted",
                &format!("Network security group {id} cannot be deleted because it is in use by the following resources: {}", users.join(", ")),
            ))
        }
        Kind::Disk => {
            let vm = body["managedBy"].as_str()?;
            Some(err(
                409,
                "OperationNotAllowed",
                &format!("Disk {name} is attached to VM {vm}."),
            ))
        }
        Kind::Pip => {
            let c = body["properties"]["ipConfiguration"]["id"].as_str()?;
            Some(err(
                400,
                "PublicIPAddressCannotBeDeleted",
                &format!("Public IP address {id} can not be deleted since it is still allocated to resource {c}. In order to delete the public IP, disassociate/detach the Public IP address from the resource."),
            ))
        }
        _ => None,
    }
}

/// The Tags API on a resource (`{id}/providers/Microsoft.Resources/tags/default`): `GET`, `PUT`
/// (replace) and `PATCH` with `operation` `Merge`, `Replace` or `Delete` (by name when the value
/// given is empty, else by name and value). It answers at once (200, no operation to follow).
pub(super) fn tags_call(
    st: &mut State,
    r: &Req,
    m: &Method,
    rg: &str,
    kind: Kind,
    name: &str,
) -> Response {
    let id = rid(rg, kind, name);
    let key = id.to_ascii_lowercase();
    let Some(res) = st.res.get_mut(&key).filter(|x| x.visible()) else {
        return not_found(kind, name, rg);
    };
    let shown = |tags: &Value| {
        json!({"id": format!("{id}/providers/Microsoft.Resources/tags/default"), "name": "default",
            "type": "Microsoft.Resources/tags", "properties": {"tags": tags}})
    };
    let mut tags = res.body["tags"].as_object().cloned().unwrap_or_default();
    match *m {
        Method::GET => return ok(shown(&json!(tags))),
        Method::PUT | Method::PATCH => {}
        _ => return err(405, "MethodNotAllowed", "method not allowed"),
    }
    let Some(given) = r.body["properties"]["tags"].as_object() else {
        return err(
            400,
            "InvalidRequestContent",
            "The request content was invalid: properties.tags is required.",
        );
    };
    let operation = if *m == Method::PUT {
        "Replace"
    } else {
        r.body["operation"].as_str().unwrap_or("")
    };
    match operation {
        "Merge" => tags.extend(given.clone()),
        "Replace" => tags = given.clone(),
        "Delete" => {
            for (k, v) in given {
                let matches = v.as_str() == Some("") || tags.get(k) == Some(v);
                if matches {
                    tags.remove(k);
                }
            }
        }
        other => {
            return err(
                400,
                "InvalidRequestContent",
                &format!(
                    "The tags patch operation '{other}' is not one of Replace, Merge, Delete."
                ),
            )
        }
    }
    if tags.len() > 50 {
        return err(
            400,
            "InvalidTagCount",
            "The resource has more than 50 tags: a resource can have at most 50 tags.",
        );
    }
    res.body["tags"] = json!(tags);
    ok(shown(&json!(tags)))
}
