//! What the proxy reads of a request, and what it asks moto on its own.

use std::collections::BTreeMap;

use super::proxy::{lock, ProxyState};
use super::xml;

/// The values of `prefix.1`, `prefix.2`, ... in `params`.
pub(super) fn listed(params: &BTreeMap<String, String>, prefix: &str) -> Vec<String> {
    (1..)
        .map_while(|n| params.get(&format!("{prefix}.{n}")).cloned())
        .collect()
}

/// The instance ids a request acts on.
pub(super) fn instance_ids(action: &str, params: &BTreeMap<String, String>) -> Vec<String> {
    match action {
        "DescribeInstances" | "TerminateInstances" | "StartInstances" | "StopInstances" => {
            listed(params, "InstanceId")
        }
        "ModifyInstanceAttribute" | "DescribeInstanceAttribute" => {
            params.get("InstanceId").cloned().into_iter().collect()
        }
        "CreateTags" | "DeleteTags" => listed(params, "ResourceId")
            .into_iter()
            .filter(|r| r.starts_with("i-"))
            .collect(),
        _ => Vec::new(),
    }
}

/// One Query call straight to moto (for the proxy's own look-ups), answering the body.
pub(super) async fn moto_call(state: &ProxyState, params: &[(&str, &str)]) -> Option<String> {
    let r = state
        .http
        .post(format!("{}/", state.upstream))
        .header(
            "Authorization",
            "AWS4-HMAC-SHA256 Credential=AKIDORCATEST/20250101/us-east-1/ec2/aws4_request, SignedHeaders=host, Signature=0",
        )
        .form(params)
        .send()
        .await
        .ok()?;
    if !r.status().is_success() {
        return None;
    }
    r.text().await.ok()
}

/// The zones EC2 (moto's catalogue) offers `machine_type` in.
pub(super) async fn offered_zones(state: &ProxyState, machine_type: &str) -> Option<Vec<String>> {
    if let Some(z) = lock(&state.ec2).offered.get(machine_type) {
        return Some(z.clone());
    }
    let body = moto_call(
        state,
        &[
            ("Action", "DescribeInstanceTypeOfferings"),
            ("Version", "2016-11-15"),
            ("LocationType", "availability-zone"),
            ("Filter.1.Name", "instance-type"),
            ("Filter.1.Value.1", machine_type),
        ],
    )
    .await?;
    let zones = xml::texts(&body, "location");
    lock(&state.ec2)
        .offered
        .insert(machine_type.to_string(), zones.clone());
    Some(zones)
}

/// The availability zone of `subnet`.
pub(super) async fn subnet_zone(state: &ProxyState, subnet: &str) -> Option<String> {
    if let Some(z) = lock(&state.ec2).subnet_zone.get(subnet) {
        return Some(z.clone());
    }
    let body = moto_call(
        state,
        &[
            ("Action", "DescribeSubnets"),
            ("Version", "2016-11-15"),
            ("SubnetId.1", subnet),
        ],
    )
    .await?;
    let zone = xml::texts(&body, "availabilityZone").into_iter().next()?;
    lock(&state.ec2)
        .subnet_zone
        .insert(subnet.to_string(), zone.clone());
    Some(zone)
}
