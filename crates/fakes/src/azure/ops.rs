//! Long-running operations: started by `PUT`, `DELETE`, `PATCH` and actions, followed through
//! `Azure-AsyncOperation` or `Location`, ended when polled or after standing a while; and the 409 a
//! busy network resource answers.

#[allow(unused_imports)]
use super::*;

/// The answer when resource `key` is held by an operation in progress: Azure's network resource
/// provider refuses a second change of a network resource while one runs, and Resource Manager any
/// change of a resource another client's operation holds ([`FakeAzure::hold`]): 409
/// `AnotherOperationInProgress`.
pub(super) fn busy(st: &State, key: &str, kind: Kind) -> Option<Response> {
    let network = !matches!(kind, Kind::Vm | Kind::Disk);
    let (op_id, _) = st.ops.iter().find(|(_, o)| {
        o.key == key && o.outcome.is_none() && (network || matches!(o.action, Action::Hold))
    })?;
    Some(in_progress(op_id))
}

/// The answer to the `PUT` of an interface whose subnet's virtual network is held by an operation
/// in progress ("this or dependent resource").
pub(super) fn busy_dependency(st: &State, kind: Kind, body: &Value) -> Option<Response> {
    if kind != Kind::Nic {
        return None;
    }
    let configs = body["properties"]["ipConfigurations"].as_array()?;
    configs.iter().find_map(|c| {
        let subnet = c["properties"]["subnet"]["id"]
            .as_str()?
            .to_ascii_lowercase();
        let (vnet, _) = subnet.split_once("/subnets/")?;
        let (op_id, _) = st
            .ops
            .iter()
            .find(|(_, o)| o.key == vnet && o.outcome.is_none())?;
        Some(in_progress(op_id))
    })
}

fn in_progress(op_id: &str) -> Response {
    err(
        409,
        "AnotherOperationInProgress",
        &format!("Another operation on this or dependent resource is in progress. To retrieve status of the operation use uri: https://management.azure.com/subscriptions/{SUBSCRIPTION}/providers/Microsoft.Network/locations/westeurope/operations/{op_id}?api-version=2024-05-01."),
    )
}

/// The `n`th UUID of the fake's `space` (operations 0, VMs 1): version 4's shape, the same in every
/// run.
pub(super) fn fake_uuid(space: u32, n: u64) -> String {
    uuid::Builder::from_u128((u128::from(space) << 96) | u128::from(n))
        .with_variant(uuid::Variant::RFC4122)
        .with_version(uuid::Version::Random)
        .into_uuid()
        .to_string()
}

/// A new operation on resource `key` running for `d` of tokio's time: its id.
pub(super) fn new_op(st: &mut State, key: &str, action: Action, d: Duration) -> String {
    let id = fake_uuid(0, st.next_op);
    st.next_op += 1;
    let ends = Instant::now() + d;
    let (key, outcome) = (key.to_string(), None);
    st.ops.insert(
        id.clone(),
        Op {
            key,
            action,
            ends,
            outcome,
        },
    );
    id
}

/// Starts an operation on resource `key` for the fake's operation time: its address.
pub(super) fn start_op(
    st: &mut State,
    r: &Req,
    key: &str,
    kind: Kind,
    location: &str,
    action: Action,
) -> String {
    let id = new_op(st, key, action, st.operation_time);
    format!(
        "{}/subscriptions/{SUBSCRIPTION}/providers/{}/locations/{location}/operations/{id}?api-version={}",
        r.base,
        kind.namespace(),
        r.q("api-version").unwrap_or(COMPUTE_API)
    )
}

/// Ends the operations whose time is up, polled or not (a client that lost the answer of a `PUT`
/// never learns the operation's address, yet Azure finishes it).
pub(super) fn advance(st: &mut State) {
    let now = Instant::now();
    let due: Vec<String> = st
        .ops
        .iter()
        .filter(|(_, o)| o.outcome.is_none() && o.ends <= now)
        .map(|(k, _)| k.clone())
        .collect();
    for id in due {
        finish(st, &id);
    }
}

pub(super) fn finish(st: &mut State, op_id: &str) {
    let Some(op) = st.ops.get(op_id).cloned() else {
        return;
    };
    if op.outcome.is_some() {
        return;
    }
    let outcome = match &op.action {
        Action::Hold => Ok(()),
        Action::Put | Action::Rule => {
            if let Some(x) = st.res.get_mut(&op.key) {
                x.body["properties"]["provisioningState"] = json!("Succeeded");
                if x.kind == Kind::Vm && (x.power.is_empty() || x.power == "starting") {
                    x.power = "running".into();
                }
            }
            Ok(())
        }
        Action::Power(end) => {
            if let Some(x) = st.res.get_mut(&op.key) {
                x.power = (*end).into();
                x.body["properties"]["provisioningState"] = json!("Succeeded");
            }
            // A deallocated VM leaves its hardware cluster: it may take any size now.
            if *end == "deallocated" {
                st.clusters.remove(&op.key);
            }
            Ok(())
        }
        Action::Fail(code, msg) => {
            let mut failed_vm = None;
            if let Some(x) = st.res.get_mut(&op.key) {
                x.body["properties"]["provisioningState"] = json!("Failed");
                // A failed VM keeps a power state beside its failed provisioning state: one that
                // never got its hardware is deallocated; one that booted (an OS provisioning that
                // timed out) or ran before the failed update keeps the state it had.
                if x.power == "starting" {
                    x.power = if is_allocation_failure(code) {
                        "deallocated"
                    } else {
                        "running"
                    }
                    .into();
                }
                x.failure = Some((code.clone(), msg.clone()));
                if x.kind == Kind::Vm {
                    failed_vm = Some(x.body.clone());
                }
            }
            // Azure keeps a failed VM's interfaces reserved for it: deleting one on its own answers
            // NicReservedForAnotherVm until the reservation ends.
            if let Some(vm) = failed_vm {
                reserve_nics(st, &vm);
            }
            Err((code.clone(), msg.clone()))
        }
        Action::Delete => {
            if let Some(x) = st.res.remove(&op.key) {
                let id = x.body["id"].as_str().unwrap_or("").to_string();
                match x.kind {
                    Kind::Vm => {
                        st.clusters.remove(&op.key);
                        delete_vm_dependents(st, &x.body, &id)
                    }
                    Kind::Nic => {
                        let prefix = format!("{id}/ipConfigurations/").to_ascii_lowercase();
                        for p in st.res.values_mut().filter(|p| p.kind == Kind::Pip) {
                            if p.body["properties"]["ipConfiguration"]["id"]
                                .as_str()
                                .is_some_and(|c| c.to_ascii_lowercase().starts_with(&prefix))
                            {
                                remove_field(&mut p.body["properties"], "ipConfiguration");
                            }
                        }
                    }
                    _ => {}
                }
            }
            Ok(())
        }
    };
    if let Some(o) = st.ops.get_mut(op_id) {
        o.outcome = Some(outcome);
    }
}

pub(super) fn poll(st: &mut State, op_id: &str) -> Response {
    advance(st);
    let Some(op) = st.ops.get(op_id) else {
        return op_not_found(op_id);
    };
    let running = op.outcome.is_none();
    let body = match &op.outcome {
        None => json!({"name": op_id, "status": "InProgress", "startTime": "2026-01-01T00:00:00Z"}),
        Some(Ok(())) => {
            json!({"name": op_id, "status": "Succeeded", "startTime": "2026-01-01T00:00:00Z", "endTime": "2026-01-01T00:00:01Z"})
        }
        Some(Err((code, msg))) => {
            // An operation a later one preempted ends Canceled; any other failure Failed.
            let status = if code == PREEMPTED {
                "Canceled"
            } else {
                "Failed"
            };
            json!({"name": op_id, "status": status,
            "startTime": "2026-01-01T00:00:00Z", "endTime": "2026-01-01T00:00:01Z",
            "error": {"code": code, "message": msg, "details": []}})
        }
    };
    let wait: Vec<_> = retry_after(st).filter(|_| running).into_iter().collect();
    answer(200, body, &wait)
}

fn op_not_found(op_id: &str) -> Response {
    let message = format!("The operation '{op_id}' was not found.");
    err(404, "NotFound", &message)
}

/// The `Retry-After` of an answer about a running operation, if the fake names one
/// ([`FakeAzure::set_poll_pause`]): none by default, as Azure's answers for a VM's operations carry
/// none.
pub(super) fn retry_after(st: &State) -> Option<(&'static str, String)> {
    st.poll_pause
        .map(|d| ("Retry-After", d.as_secs().to_string()))
}

/// A `Location` poll: 202 while running, 200 when done, the failure's status and error otherwise.
pub(super) fn poll_location(st: &mut State, r: &Req, op_id: &str) -> Response {
    let _ = poll(st, op_id);
    match st.ops.get(op_id).map(|o| o.outcome.clone()) {
        None => op_not_found(op_id),
        Some(None) => {
            let location = format!(
                "{}{}?api-version={}",
                r.base,
                r.path,
                r.q("api-version").unwrap_or("")
            );
            let mut headers = vec![("Location", location)];
            headers.extend(retry_after(st));
            answer(202, Value::Null, &headers)
        }
        Some(Some(Ok(()))) => ok(Value::Null),
        Some(Some(Err((code, msg)))) => err(409, &code, &msg),
    }
}

/// The code of an operation a later one preempted (a delete of the VM a create was making).
pub(super) const PREEMPTED: &str = "OperationPreempted";

/// Whether `code` says Azure found no hardware for a VM (it never ran).
fn is_allocation_failure(code: &str) -> bool {
    code.contains("Allocation") || code == "SkuNotAvailable"
}
