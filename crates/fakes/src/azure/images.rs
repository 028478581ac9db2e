//! Marketplace images (`VirtualMachineImages_List`, `VirtualMachineImages_Get`): the versions of a
//! publisher's offer and SKU, and one version with its architecture.

use super::*;

/// A marketplace image: publisher, offer, SKU, architecture (`x64`, `Arm64`), versions (oldest
/// first).
type Image = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static [&'static str],
);

/// The fake's marketplace. Names match without case, as Azure's do.
const IMAGES: &[Image] = &[
    (
        "Canonical",
        "ubuntu-24_04-lts",
        "server",
        "x64",
        &["24.04.202501140", "24.04.202506100"],
    ),
    (
        "Canonical",
        "ubuntu-24_04-lts",
        "server-arm64",
        "Arm64",
        &["24.04.202501140", "24.04.202506100"],
    ),
    (
        "Canonical",
        "0001-com-ubuntu-server-jammy",
        "22_04-lts-gen2",
        "x64",
        &["22.04.202412100"],
    ),
    (
        "Canonical",
        "0001-com-ubuntu-server-jammy",
        "22_04-lts-arm64",
        "Arm64",
        &["22.04.202412100"],
    ),
];

/// The path segments after `providers/Microsoft.Compute/locations/{location}/publishers/{p}/
/// artifacttypes/vmimage/offers/{o}/skus/{s}/versions`: the location, publisher, offer and SKU.
fn image_of(rest: &[&str]) -> Option<(&'static Image, String)> {
    let (location, publisher, offer, sku) = (rest[3], rest[5], rest[9], rest[11]);
    IMAGES
        .iter()
        .find(|i| eq(i.0, publisher) && eq(i.1, offer) && eq(i.2, sku))
        .map(|i| (i, location.to_string()))
}

/// Azure's answer to an image that its marketplace does not hold.
fn no_image() -> Response {
    err(404, "NotFound", "Artifact: VMImage was not found.")
}

fn version_id(location: &str, i: &Image, v: &str) -> String {
    format!(
        "/Subscriptions/{SUBSCRIPTION}/Providers/Microsoft.Compute/Locations/{location}/Publishers/{}/ArtifactTypes/VMImage/Offers/{}/Skus/{}/Versions/{v}",
        i.0, i.1, i.2
    )
}

/// `VirtualMachineImages_List`: a bare array of the versions, newest first when `$orderby=name
/// desc` asks, cut to `$top`.
pub(super) fn image_versions(r: &Req, rest: &[&str]) -> Response {
    let Some((i, location)) = image_of(rest) else {
        return no_image();
    };
    let mut versions: Vec<&str> = i.4.to_vec();
    if r.q("$orderby").is_some_and(|o| eq(o.trim(), "name desc")) {
        versions.reverse();
    }
    if let Some(top) = r.q("$top").and_then(|t| t.parse::<usize>().ok()) {
        versions.truncate(top);
    }
    let items: Vec<Value> = versions
        .iter()
        .map(|v| json!({"location": location, "name": v, "id": version_id(&location, i, v)}))
        .collect();
    ok(Value::Array(items))
}

/// `VirtualMachineImages_Get`: one version, with its architecture.
pub(super) fn image_version(rest: &[&str]) -> Response {
    let Some((i, location)) = image_of(rest) else {
        return no_image();
    };
    let Some(v) = i.4.iter().find(|v| eq(v, rest[13])) else {
        return no_image();
    };
    ok(json!({
        "location": location,
        "name": v,
        "id": version_id(&location, i, v),
        "properties": {
            "hyperVGeneration": "V2",
            "architecture": i.3,
            "replicaType": "Unmanaged",
            "osDiskImage": {"operatingSystem": "Linux", "sizeInGb": 30},
            "dataDiskImages": [],
            "imageDeprecationStatus": {"imageState": "Active"}
        }
    }))
}
