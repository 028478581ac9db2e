//! A stateful fake of the Azure Resource Manager API on 127.0.0.1, and of the public Azure Retail
//! Prices API, written from Azure's published references: the REST specifications and their examples
//! in Azure/azure-rest-api-specs (compute `2024-07-01`, network `2024-05-01`, resource SKUs
//! `2021-07-01`, resources `2021-04-01`, consumption `2023-05-01`) and the Retail Prices, managed
//! identity and Resource Manager documentation on learn.microsoft.com.
//!
//! # Real behaviours it reproduces (and where they come from)
//! - **Addressing and auth** (ARM common types): resources by id
//!   (`/subscriptions/{s}/resourceGroups/{rg}/providers/{ns}/{type}/{name}`), names compared without
//!   case; a bearer token on every call (401 `AuthenticationFailed` / `InvalidAuthenticationToken`);
//!   `api-version` required (400 `MissingApiVersionParameter`); unknown resource groups 404
//!   `ResourceGroupNotFound`; error bodies `{"error":{"code","message","details","target",
//!   "additionalInfo"}}` with Azure's codes.
//! - **Virtual machines** (`virtualMachine.json`, `VirtualMachine_Get*.json`): `timeCreated` (the
//!   time the VM was made, RFC 3339 with seven fractional digits), `vmId`; the instance view
//!   (`$expand=instanceView`, `.../instanceView`) with `ProvisioningState/...` and `PowerState/...`
//!   statuses, the power states carrying no time (as in the published examples); power states
//!   `starting`, `running`, `stopping`, `stopped`, `deallocating`, `deallocated`; `start`,
//!   `deallocate`, `powerOff`, `restart`; resize by `PATCH`; `customData` never returned;
//!   `If-None-Match: *` on `PUT` (412 `PreconditionFailed` when the VM exists); `$expand=instanceView`
//!   on a list only with a `$filter` (the specification's words), `statusOnly=true` only on the
//!   subscription-wide list; an SSH-only Linux profile needs a key (400 `InvalidParameter`).
//! - **What a VM owns** (`NetworkInterfaceReference`, `OSDisk` and `PublicIPAddress`
//!   `deleteOption`): deleting a VM deletes its OS disk and each interface whose reference says
//!   `Delete`, and with such an interface each public address whose own `deleteOption` is `Delete`;
//!   the rest is detached.
//! - **Interface reservation** (`NicReservedForAnotherVm`, "reserved for another Virtual Machine for
//!   180 seconds", as reported against Azure by karpenter-provider-azure#92, rancher/machine#359,
//!   AzureTRE#4474): the interfaces of a VM whose create failed, or that a VM's delete left behind,
//!   are reserved for it ([`NIC_RESERVATION`], [`FakeAzure::set_nic_reservation`]): deleting one on
//!   its own, or giving it to another VM, answers 400 `NicReservedForAnotherVm`. A VM refused at its
//!   `PUT` (quota, size not available) is never made and reserves nothing.
//! - **Network resources** (`networkInterface.json`, `publicIpAddress.json`,
//!   `networkSecurityGroup.json`, `applicationSecurityGroup.json`, `virtualNetwork.json`):
//!   interfaces with private addresses, static public addresses, DNS labels (`dnsSettings`: the FQDN
//!   `<label>.<location>.cloudapp.azure.com`, or with a `domainNameLabelScope`
//!   `<label>-<hash>.<location>.cloudapp.azure.com`; a label in use is 400 `DnsRecordInUse`, an
//!   invalid one 400 `InvalidDomainNameLabel`), security groups with their default rules and rules
//!   as sub-resources (priorities 100-4096 unique per direction: 400 `SecurityRuleConflict`),
//!   application security groups, virtual networks and subnets; references must exist (400
//!   `InvalidResourceReference`); a resource in use cannot be deleted (`NicInUse`,
//!   `InUseNetworkSecurityGroupCannotBeDeleted`, `PublicIPAddressCannotBeDeleted`); a change of a
//!   network resource whose operation is still running is refused with 409
//!   `AnotherOperationInProgress`.
//! - **Long-running operations** (ARM async operations guideline): `PUT` answers 201 (200 on update),
//!   `DELETE` and actions 202, with `Azure-AsyncOperation` (and `Location` for 202) naming an
//!   operation that reports `InProgress` until polled [`FakeAzure::set_lro_polls`] times (or it has
//!   stood a little while unpolled), then `Succeeded`, or `Failed` with the error; the
//!   `Location`-only protocol on demand ([`FakeAzure::set_location_only`]).
//! - **Lists**: `nextLink` paging of every list ([`FakeAzure::set_page_size`]), the links absolute
//!   with their explicit port, as Azure's are (`https://management.azure.com:443/...`).
//! - **Resource SKUs** (`skus.json`, `ListAvailableResourceSkusForARegion.json`): one entry per size
//!   and location, `$filter=location eq '<location>'`, `CpuArchitectureType` (`x64`, `Arm64`).
//! - **Tags API** (`Tags_UpdateAtScope`): `{id}/providers/Microsoft.Resources/tags/default` with
//!   `Merge`, `Replace` and `Delete` (by name, or by name and value), at most 50 tags.
//! - **Credits** (`CreditSummaryByBillingProfile.json`): a billing profile's balance summary
//!   ([`FakeAzure::set_credit`]).
//! - **Retail prices** (`/api/retail/prices`, `$filter`, `NextPageLink`, `{"Error":{"Code",
//!   "Message"}}`): Linux, Windows, Spot, Low Priority and reservation rows, so a client must pick.
//! - **Instance metadata service** (managed identity documentation): the token endpoint answers 400
//!   at once to a request without the `Metadata: true` header, which is how clients probe for it.
//! - **Role scope** ([`FakeAzure::scope_to_resource_group`]): a principal whose role is scoped to the
//!   resource group is refused the subscription-wide VM list (403 `AuthorizationFailed`).
//! - **Eventual consistency** ([`FakeAzure::set_visibility_delay`]): new VMs invisible to reads for a
//!   while, changes of them answered 404.
//!
//! # What it does not reproduce
//! - Real capacity, quotas, zones, images and prices: the catalogue is six sizes in three locations,
//!   failures come only from the faults below.
//! - Azure Policy beyond a deny of a resource type; RBAC beyond the one role scope above; locks
//!   beyond [`FakeAzure::refuse_delete`] (`ScopeLocked`).
//! - The hash of a scoped DNS label is the fake's own (Azure's is undocumented); `TenantReuse` is
//!   treated as one tenant.
//! - How long Azure takes: operations end after a number of polls, not after real time; the real
//!   service's `Retry-After` values; eventual consistency of anything but new VMs.
//! - Whether Azure reserves an interface after a VM refused at its `PUT`: the published reports
//!   are of VMs that were made and failed or were deleted, and the fake follows them.
//! - Managed identity tokens themselves, workload identity and Entra ID (no login endpoint).
//! - Whether the network resource provider applies a public address's own `deleteOption` when the
//!   VM deletes the interface it is on: the specification's words ("what happens to the public IP
//!   address when the VM using it is deleted") are followed.
//!
//! Faults on demand, beside [`crate::Control`]'s (429 with Retry-After, 5xx, latency, dropped answers):
//! allocation failure of a size in a location ([`FakeAzure::fail_allocation`]), a size not offered
//! ([`FakeAzure::sku_not_available`]), a core quota ([`FakeAzure::exceed_quota`]), a policy deny of a
//! resource type ([`FakeAzure::deny_policy`]), a resource that refuses deletion
//! ([`FakeAzure::refuse_delete`]), and a lost answer after a VM `PUT` was accepted
//! ([`FakeAzure::lose_next_vm_put_answer`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use axum::extract::{Request, State as AxState};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use serde_json::{json, Value};

use crate::control::{serve, Control, Fault, Rule, Running};

/// The subscription the fake serves.
pub const SUBSCRIPTION: &str = "00000000-0000-4000-8000-0000000000a2";
/// The bearer token it accepts.
pub const TOKEN: &str = "fake-arm-token-0123456789";
/// The resource group that exists from the start.
pub const RESOURCE_GROUP: &str = "orca-rg";
/// Compute API version the fake answers.
pub const COMPUTE_API: &str = "2024-07-01";

/// How long an unpolled operation stands before it ends by itself (a client that lost the answer of
/// a `PUT` never learns the operation's address, yet Azure finishes it).
const SETTLE: Duration = Duration::from_millis(40);

/// How long Azure reserves the interface of a VM that failed or was deleted
/// (`NicReservedForAnotherVm`: "reserved for another Virtual Machine for 180 seconds").
pub const NIC_RESERVATION: Duration = Duration::from_secs(180);

/// `t` as Azure writes times: RFC 3339 in UTC with seven fractional digits
/// (`2021-06-27T01:02:38.3138469+00:00`).
fn rfc3339(t: std::time::SystemTime) -> String {
    let d = t.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Days since 1970-01-01 to a civil date (proleptic Gregorian calendar).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:07}+00:00",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_nanos() / 100
    )
}

fn now() -> String {
    rfc3339(std::time::SystemTime::now())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Vm,
    Disk,
    Pip,
    Nsg,
    Nic,
    Asg,
    Vnet,
}

impl Kind {
    fn of(ns: &str, ty: &str) -> Option<Kind> {
        match (
            ns.to_ascii_lowercase().as_str(),
            ty.to_ascii_lowercase().as_str(),
        ) {
            ("microsoft.compute", "virtualmachines") => Some(Kind::Vm),
            ("microsoft.compute", "disks") => Some(Kind::Disk),
            ("microsoft.network", "publicipaddresses") => Some(Kind::Pip),
            ("microsoft.network", "networksecuritygroups") => Some(Kind::Nsg),
            ("microsoft.network", "networkinterfaces") => Some(Kind::Nic),
            ("microsoft.network", "applicationsecuritygroups") => Some(Kind::Asg),
            ("microsoft.network", "virtualnetworks") => Some(Kind::Vnet),
            _ => None,
        }
    }
    fn type_name(self) -> &'static str {
        match self {
            Kind::Vm => "Microsoft.Compute/virtualMachines",
            Kind::Disk => "Microsoft.Compute/disks",
            Kind::Pip => "Microsoft.Network/publicIPAddresses",
            Kind::Nsg => "Microsoft.Network/networkSecurityGroups",
            Kind::Nic => "Microsoft.Network/networkInterfaces",
            Kind::Asg => "Microsoft.Network/applicationSecurityGroups",
            Kind::Vnet => "Microsoft.Network/virtualNetworks",
        }
    }
    fn namespace(self) -> &'static str {
        match self {
            Kind::Vm | Kind::Disk => "Microsoft.Compute",
            _ => "Microsoft.Network",
        }
    }
    fn busy_state(self) -> &'static str {
        match self {
            Kind::Vm | Kind::Disk => "Creating",
            _ => "Updating",
        }
    }
}

#[derive(Debug, Clone)]
struct Res {
    kind: Kind,
    body: Value,
    /// A VM's power state (`running`, `deallocated`, ...); empty when it has none.
    power: String,
    /// When a new VM starts to show to reads ([`FakeAzure::set_visibility_delay`]); `None`: it does.
    visible_at: Option<Instant>,
}

impl Res {
    fn new(kind: Kind, body: Value) -> Res {
        Res {
            kind,
            body,
            power: String::new(),
            visible_at: None,
        }
    }

    /// Whether reads show it yet.
    fn visible(&self) -> bool {
        self.visible_at.is_none_or(|t| Instant::now() >= t)
    }
}

#[derive(Debug, Clone)]
enum Action {
    Put,
    Delete,
    Power(&'static str),
    Fail(String, String),
    /// A security rule PUT on an NSG (the rule is in place already).
    Rule,
}

#[derive(Debug, Clone)]
struct Op {
    key: String,
    action: Action,
    polls: u32,
    started: Instant,
    outcome: Option<Result<(), (String, String)>>,
}

#[derive(Debug)]
struct State {
    groups: BTreeSet<String>,
    res: BTreeMap<String, Res>,
    ops: HashMap<String, Op>,
    page_size: usize,
    lro_polls: u32,
    skus: Vec<Value>,
    prices: Vec<Value>,
    no_stock: HashMap<(String, String), String>,
    unavailable: BTreeSet<(String, String)>,
    quota: BTreeSet<String>,
    deny: Vec<(String, String)>,
    refuse_delete: BTreeSet<String>,
    custom_data: HashMap<String, String>,
    location_only: bool,
    next_ip: u32,
    next_op: u64,
    /// How long a new VM stays invisible to reads.
    visibility_delay: Duration,
    /// How long Azure reserves the interface of a VM that failed or was deleted.
    nic_reservation: Duration,
    /// Interfaces reserved: key -> (the VM's id, until).
    reserved: HashMap<String, (String, Instant)>,
    /// Credit balances by (billing account, billing profile): (amount, currency).
    credits: HashMap<(String, String), (f64, String)>,
    /// The caller's role is scoped to the resource groups: subscription-wide lists are refused.
    rg_scoped: bool,
}

/// The fake Azure Resource Manager and Retail Prices APIs, serving on 127.0.0.1 until dropped.
#[derive(Debug)]
pub struct FakeAzure {
    server: Running,
    state: Arc<Mutex<State>>,
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Virtual machine sizes the fake offers: (name, family, architecture, vCPUs, Linux hourly USD).
const SIZES: &[(&str, &str, &str, u32, f64)] = &[
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
const LOCATIONS: &[(&str, &str, f64)] = &[
    ("westeurope", "EU West", 1.1),
    ("northeurope", "EU North", 1.0),
    ("eastus", "US East", 0.95),
];

fn seed_skus() -> Vec<Value> {
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

fn seed_prices() -> Vec<Value> {
    let mut v = Vec::new();
    for (name, family, _, _, base) in SIZES {
        let short = name.trim_start_matches("Standard_").replace('_', " ");
        let series = family
            .trim_start_matches("standard")
            .trim_end_matches("Family");
        for (loc, display, factor) in LOCATIONS {
            let p = (base * factor * 10_000.0).round() / 10_000.0;
            let row = |price: f64, sku: String, product: String, ty: &str| {
                json!({
                    "currencyCode": "USD",
                    "tierMinimumUnits": 0.0,
                    "retailPrice": price,
                    "unitPrice": price,
                    "armRegionName": loc,
                    "location": display,
                    "effectiveStartDate": "2024-01-01T00:00:00Z",
                    "meterId": format!("{name}-{loc}-{sku}"),
                    "meterName": sku,
                    "productId": "DZH318Z0BQPS",
                    "skuId": "DZH318Z0BQPS/00TG",
                    "productName": product,
                    "skuName": sku,
                    "serviceName": "Virtual Machines",
                    "serviceId": "DZH313Z7MMC8",
                    "serviceFamily": "Compute",
                    "unitOfMeasure": "1 Hour",
                    "type": ty,
                    "isPrimaryMeterRegion": true,
                    "armSkuName": name
                })
            };
            let product = format!("Virtual Machines {series} Series");
            v.push(row(
                p * 2.1,
                short.clone(),
                format!("{product} Windows"),
                "Consumption",
            ));
            v.push(row(
                (p * 0.2 * 10_000.0).round() / 10_000.0,
                format!("{short} Spot"),
                product.clone(),
                "Consumption",
            ));
            v.push(row(
                (p * 0.25 * 10_000.0).round() / 10_000.0,
                format!("{short} Low Priority"),
                product.clone(),
                "Consumption",
            ));
            let mut reservation = row(p * 5000.0, short.clone(), product.clone(), "Reservation");
            reservation["reservationTerm"] = json!("1 Year");
            reservation["unitOfMeasure"] = json!("1 Hour");
            v.push(reservation);
            v.push(row(p, short.clone(), product, "Consumption"));
        }
    }
    v
}

impl FakeAzure {
    /// Starts the fake with the resource group [`RESOURCE_GROUP`], no networks, every size in stock.
    pub async fn start() -> std::io::Result<FakeAzure> {
        let mut groups = BTreeSet::new();
        groups.insert(RESOURCE_GROUP.to_string());
        let state = Arc::new(Mutex::new(State {
            groups,
            res: BTreeMap::new(),
            ops: HashMap::new(),
            page_size: 100,
            lro_polls: 1,
            skus: seed_skus(),
            prices: seed_prices(),
            no_stock: HashMap::new(),
            unavailable: BTreeSet::new(),
            quota: BTreeSet::new(),
            deny: Vec::new(),
            refuse_delete: BTreeSet::new(),
            custom_data: HashMap::new(),
            location_only: false,
            next_ip: 10,
            next_op: 1,
            visibility_delay: Duration::ZERO,
            nic_reservation: NIC_RESERVATION,
            reserved: HashMap::new(),
            credits: HashMap::new(),
            rg_scoped: false,
        }));
        let router = Router::new().fallback(handle).with_state(state.clone());
        let server = serve(router, Arc::new(Control::default())).await?;
        Ok(FakeAzure { server, state })
    }

    /// `http://127.0.0.1:PORT`: both the Resource Manager and the retail prices endpoint.
    pub fn url(&self) -> String {
        self.server.url()
    }

    /// The request log and generic faults.
    pub fn control(&self) -> &Arc<Control> {
        &self.server.control
    }

    fn st(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Lists answer at most `n` items a page (at least 1).
    pub fn set_page_size(&self, n: usize) {
        self.st().page_size = n.max(1);
    }

    /// Operations report `InProgress` until polled `n` times (at least 1).
    pub fn set_lro_polls(&self, n: u32) {
        self.st().lro_polls = n.max(1);
    }

    /// Long-running operations answer only a `Location` header (`.../operationResults/{id}`: 202
    /// while running, 200 when done, the error's status and body when failed), no
    /// `Azure-AsyncOperation`: the other protocol a client must follow.
    pub fn set_location_only(&self, on: bool) {
        self.st().location_only = on;
    }

    /// Adds a resource group.
    pub fn add_resource_group(&self, name: &str) {
        self.st().groups.insert(name.to_ascii_lowercase());
    }

    /// Creates (or extends) virtual network `vnet` in `location` of resource group `rg` with `subnet`,
    /// which carries the security group `nsg` (in the same group) when given.
    pub fn add_subnet(
        &self,
        rg: &str,
        vnet: &str,
        location: &str,
        subnet: &str,
        nsg: Option<&str>,
    ) {
        let mut st = self.st();
        let vnet_id = rid(rg, Kind::Vnet, vnet);
        let key = vnet_id.to_ascii_lowercase();
        let entry = st.res.entry(key).or_insert_with(|| {
            Res::new(
                Kind::Vnet,
                json!({
                    "id": vnet_id, "name": vnet, "type": Kind::Vnet.type_name(), "location": location,
                    "properties": {"provisioningState": "Succeeded",
                        "addressSpace": {"addressPrefixes": ["10.0.0.0/16"]}, "subnets": []}
                }),
            )
        });
        let mut sub = json!({
            "id": format!("{vnet_id}/subnets/{subnet}"), "name": subnet,
            "type": "Microsoft.Network/virtualNetworks/subnets",
            "properties": {"provisioningState": "Succeeded", "addressPrefix": "10.0.0.0/24"}
        });
        if let Some(n) = nsg {
            sub["properties"]["networkSecurityGroup"] = json!({"id": rid(rg, Kind::Nsg, n)});
        }
        if let Some(subs) = entry.body["properties"]["subnets"].as_array_mut() {
            subs.retain(|s| !eq(s["name"].as_str().unwrap_or(""), subnet));
            subs.push(sub);
        }
    }

    /// Creates network security group `name` in `rg` with inbound rules `(name, priority)` (each
    /// allowing TCP 443 from anywhere), as an operator would have made it.
    pub fn add_nsg(&self, rg: &str, name: &str, location: &str, rules: &[(&str, u32)]) {
        let id = rid(rg, Kind::Nsg, name);
        let rules: Vec<Value> = rules
            .iter()
            .map(|(r, p)| {
                json!({"id": format!("{id}/securityRules/{r}"), "name": r,
                "type": "Microsoft.Network/networkSecurityGroups/securityRules",
                "properties": {"provisioningState": "Succeeded", "protocol": "Tcp",
                    "sourcePortRange": "*", "destinationPortRange": "443",
                    "sourceAddressPrefix": "*", "destinationAddressPrefix": "*",
                    "access": "Allow", "priority": p, "direction": "Inbound"}})
            })
            .collect();
        let body = nsg_body(&id, name, location, &json!({}), rules);
        self.st()
            .res
            .insert(id.to_ascii_lowercase(), Res::new(Kind::Nsg, body));
    }

    /// The security rules of NSG `name` in `rg`, as stored.
    pub fn nsg_rules(&self, rg: &str, name: &str) -> Vec<Value> {
        let st = self.st();
        st.res
            .get(&rid(rg, Kind::Nsg, name).to_ascii_lowercase())
            .and_then(|r| r.body["properties"]["securityRules"].as_array().cloned())
            .unwrap_or_default()
    }

    /// Every resource in `rg` as `(type, name)`, sorted: what a test compares before and after.
    pub fn resources(&self, rg: &str) -> Vec<(String, String)> {
        let prefix = format!(
            "/subscriptions/{}/resourcegroups/{}/",
            SUBSCRIPTION.to_ascii_lowercase(),
            rg.to_ascii_lowercase()
        );
        self.st()
            .res
            .iter()
            .filter(|(k, _)| k.starts_with(&prefix))
            .map(|(_, r)| {
                (
                    r.kind.type_name().to_string(),
                    r.body["name"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect()
    }

    /// The stored JSON of resource `name` of `type_name` (`Microsoft.Compute/virtualMachines`, ...).
    pub fn resource(&self, rg: &str, type_name: &str, name: &str) -> Option<Value> {
        let (ns, ty) = type_name.split_once('/')?;
        let kind = Kind::of(ns, ty)?;
        self.st()
            .res
            .get(&rid(rg, kind, name).to_ascii_lowercase())
            .map(|r| r.body.clone())
    }

    /// Creates of `size` in `location` end in a failed operation with `code` (`AllocationFailed`,
    /// `ZonalAllocationFailed`, `OverconstrainedAllocationRequest`), leaving a failed VM, until
    /// [`FakeAzure::restore_stock`].
    pub fn fail_allocation(&self, size: &str, location: &str, code: &str) {
        self.st().no_stock.insert(
            (size.to_ascii_lowercase(), location.to_ascii_lowercase()),
            code.to_string(),
        );
    }

    /// Ends [`FakeAzure::fail_allocation`] and [`FakeAzure::sku_not_available`] for `size` in `location`.
    pub fn restore_stock(&self, size: &str, location: &str) {
        let k = (size.to_ascii_lowercase(), location.to_ascii_lowercase());
        let mut st = self.st();
        st.no_stock.remove(&k);
        st.unavailable.remove(&k);
    }

    /// A VM `PUT` of `size` in `location` is refused at once with 409 `SkuNotAvailable`.
    pub fn sku_not_available(&self, size: &str, location: &str) {
        self.st()
            .unavailable
            .insert((size.to_ascii_lowercase(), location.to_ascii_lowercase()));
    }

    /// A VM `PUT` of `size` is refused with 409 `OperationNotAllowed` naming the family's core quota.
    pub fn exceed_quota(&self, size: &str) {
        self.st().quota.insert(size.to_ascii_lowercase());
    }

    /// A `PUT` of a resource of `type_name` (`Microsoft.Network/publicIPAddresses`, ...) is refused with
    /// 403 `RequestDisallowedByPolicy` naming the policy assignment `assignment`.
    pub fn deny_policy(&self, type_name: &str, assignment: &str) {
        self.st()
            .deny
            .push((type_name.to_ascii_lowercase(), assignment.to_string()));
    }

    /// Lifts every policy deny.
    pub fn clear_policies(&self) {
        self.st().deny.clear();
    }

    /// A `DELETE` of any resource named `name` is refused with 409 `ScopeLocked` (a delete lock),
    /// until [`FakeAzure::allow_delete`].
    pub fn refuse_delete(&self, name: &str) {
        self.st().refuse_delete.insert(name.to_ascii_lowercase());
    }

    /// Ends [`FakeAzure::refuse_delete`] for `name`.
    pub fn allow_delete(&self, name: &str) {
        self.st().refuse_delete.remove(&name.to_ascii_lowercase());
    }

    /// The custom data (base64, as sent) of VM `name` in `rg`: Azure never returns it, the fake keeps
    /// it for tests.
    pub fn custom_data(&self, rg: &str, name: &str) -> Option<String> {
        self.st()
            .custom_data
            .get(&rid(rg, Kind::Vm, name).to_ascii_lowercase())
            .cloned()
    }

    /// VMs made from now on are invisible to every read (`GET`, lists, instance view) for `delay`,
    /// and changes of them (`PATCH`, `DELETE`, actions, tags) answer 404 `ResourceNotFound` until
    /// then, as an eventually consistent read model would; `Duration::ZERO` turns it off.
    pub fn set_visibility_delay(&self, delay: Duration) {
        self.st().visibility_delay = delay;
    }

    /// How long an interface stays reserved for a VM that failed or was deleted without it
    /// (Azure: about 180 s, [`NIC_RESERVATION`]).
    pub fn set_nic_reservation(&self, d: Duration) {
        self.st().nic_reservation = d;
    }

    /// Billing profile `profile` of billing account `account` holds a credit of `amount` in
    /// `currency` (`Microsoft.Consumption/credits/balanceSummary`); other profiles answer 404.
    pub fn set_credit(&self, account: &str, profile: &str, amount: f64, currency: &str) {
        self.st().credits.insert(
            (account.to_string(), profile.to_string()),
            (amount, currency.to_string()),
        );
    }

    /// The caller's role is scoped to resource groups (`on`): a subscription-wide list of VMs is
    /// refused with 403 `AuthorizationFailed`, as Azure refuses it to a principal without
    /// `Microsoft.Compute/virtualMachines/read` at subscription scope.
    pub fn scope_to_resource_group(&self, on: bool) {
        self.st().rg_scoped = on;
    }

    /// The interfaces reserved now, by name.
    pub fn reserved_interfaces(&self) -> Vec<String> {
        let st = self.st();
        let now = Instant::now();
        st.reserved
            .iter()
            .filter(|(_, (_, until))| *until > now)
            .map(|(k, _)| k.rsplit('/').next().unwrap_or("").to_string())
            .collect()
    }

    /// The next VM `PUT` is served (the VM is made) but its answer is lost.
    pub fn lose_next_vm_put_answer(&self) {
        self.control().inject(Rule::new(
            Some(Method::PUT),
            "/providers/Microsoft.Compute/virtualMachines/",
            Fault::DropAnswer,
            1,
        ));
    }
}

fn eq(a: &str, b: &str) -> bool {
    a.eq_ignore_ascii_case(b)
}

/// The FQDN Azure gives a public address's DNS label in `location`: `<label>.<location>.cloudapp.azure.com`,
/// or with a label scope `<label>-<hash>.<location>.cloudapp.azure.com`, the hash standing for the
/// scope (here the subscription and resource group, for every scope but `TenantReuse`); an invalid
/// label is the error's message.
fn dns_fqdn(label: &str, scope: Option<&str>, rg: &str, location: &str) -> Result<String, String> {
    let b = label.as_bytes();
    let ok = (3..=63).contains(&b.len())
        && b[0].is_ascii_lowercase()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && !label.ends_with('-');
    if !ok {
        return Err(format!("The domain name label {label} is invalid. It must conform to the following regular expression: ^[a-z][a-z0-9-]{{1,61}}[a-z0-9]$."));
    }
    let loc = location.to_ascii_lowercase();
    Ok(match scope {
        None | Some("") => format!("{label}.{loc}.cloudapp.azure.com"),
        Some(sc) => {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            let key = if sc == "TenantReuse" {
                String::new()
            } else {
                format!("{SUBSCRIPTION}/{}", rg.to_ascii_lowercase())
            };
            (key, label, sc).hash(&mut h);
            let hash: String = format!("{:016x}", h.finish())
                .chars()
                .map(|c| {
                    if c.is_ascii_digit() {
                        (b'a' + (c as u8 - b'0')) as char
                    } else {
                        c
                    }
                })
                .collect();
            format!("{label}-{hash}.{loc}.cloudapp.azure.com")
        }
    })
}

/// The answer when interface `nic_id` is reserved for a VM other than `vm_id`.
fn reserved_for_another(st: &mut State, nic_id: &str, vm_id: &str) -> Option<Response> {
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
fn reserve_nics(st: &mut State, vm: &Value) {
    let until = Instant::now() + st.nic_reservation;
    let vm_id = vm["id"].as_str().unwrap_or("").to_string();
    for n in vm["properties"]["networkProfile"]["networkInterfaces"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if let Some(id) = n["id"].as_str() {
            st.reserved
                .insert(id.to_ascii_lowercase(), (vm_id.clone(), until));
        }
    }
}

/// The answer when a network resource `key` has an operation in progress: Azure's network resource
/// provider refuses a second change of it (409 `AnotherOperationInProgress`).
fn busy(st: &State, key: &str, kind: Kind) -> Option<Response> {
    if matches!(kind, Kind::Vm | Kind::Disk) {
        return None;
    }
    let (op_id, _) = st
        .ops
        .iter()
        .find(|(_, o)| o.key == key && o.outcome.is_none())?;
    Some(err(
        409,
        "AnotherOperationInProgress",
        &format!("Another operation on this or dependent resource is in progress. To retrieve status of the operation use uri: https://management.azure.com/subscriptions/{SUBSCRIPTION}/providers/Microsoft.Network/locations/westeurope/operations/{op_id}?api-version=2024-05-01."),
    ))
}

fn rid(rg: &str, kind: Kind, name: &str) -> String {
    format!(
        "/subscriptions/{SUBSCRIPTION}/resourceGroups/{rg}/providers/{}/{name}",
        kind.type_name()
    )
}

fn nsg_body(id: &str, name: &str, location: &str, tags: &Value, rules: Vec<Value>) -> Value {
    let default = |n: &str, p: u32, dir: &str, access: &str, src: &str| {
        json!({"id": format!("{id}/defaultSecurityRules/{n}"), "name": n,
            "properties": {"provisioningState": "Succeeded", "protocol": "*", "sourcePortRange": "*",
            "destinationPortRange": "*", "sourceAddressPrefix": src, "destinationAddressPrefix": "*",
            "access": access, "priority": p, "direction": dir}})
    };
    json!({
        "id": id, "name": name, "type": Kind::Nsg.type_name(), "location": location, "tags": tags,
        "etag": "W/\"1\"",
        "properties": {
            "provisioningState": "Succeeded",
            "securityRules": rules,
            "defaultSecurityRules": [
                default("AllowVnetInBound", 65000, "Inbound", "Allow", "VirtualNetwork"),
                default("AllowAzureLoadBalancerInBound", 65001, "Inbound", "Allow", "AzureLoadBalancer"),
                default("DenyAllInBound", 65500, "Inbound", "Deny", "*"),
                default("AllowVnetOutBound", 65000, "Outbound", "Allow", "VirtualNetwork"),
                default("AllowInternetOutBound", 65001, "Outbound", "Allow", "*"),
                default("DenyAllOutBound", 65500, "Outbound", "Deny", "*"),
            ]
        }
    })
}

/// An Azure error answer.
fn err(status: u16, code: &str, message: &str) -> Response {
    err_with(status, code, message, json!([]), Value::Null)
}

fn err_with(status: u16, code: &str, message: &str, details: Value, extra: Value) -> Response {
    let mut e = json!({"code": code, "message": message, "details": details});
    if let Value::Object(m) = extra {
        for (k, v) in m {
            e[k] = v;
        }
    }
    answer(status, json!({ "error": e }), &[])
}

fn answer(status: u16, body: Value, headers: &[(&str, String)]) -> Response {
    let mut r = (
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        axum::Json(body),
    )
        .into_response();
    let h = r.headers_mut();
    for (k, v) in headers {
        if let (Ok(k), Ok(v)) = (
            axum::http::HeaderName::from_bytes(k.as_bytes()),
            axum::http::HeaderValue::from_str(v),
        ) {
            h.insert(k, v);
        }
    }
    if let Ok(v) = format!("fake-{:016x}", fastish_id()).parse() {
        h.insert("x-ms-request-id", v);
    }
    r
}

fn fastish_id() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0x5eed);
    N.fetch_add(0x9e37_79b9, Ordering::Relaxed)
}

fn percent_encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

struct Req {
    method: Method,
    path: String,
    query: Vec<(String, String)>,
    headers: HeaderMap,
    body: Value,
    base: String,
}

impl Req {
    fn q(&self, k: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(k))
            .map(|(_, v)| v.as_str())
    }
    /// The URL of this list with `skip_key` set to `skip`.
    fn next_link(&self, skip_key: &str, skip: usize) -> String {
        let mut q: Vec<String> = self
            .query
            .iter()
            .filter(|(k, _)| !k.eq_ignore_ascii_case(skip_key))
            .map(|(k, v)| format!("{}={}", percent_encode(k), percent_encode(v)))
            .collect();
        q.push(format!("{}={skip}", percent_encode(skip_key)));
        format!("{}{}?{}", self.base, self.path, q.join("&"))
    }
}

async fn handle(AxState(state): AxState<Arc<Mutex<State>>>, req: Request) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let query = crate::control::form_pairs(req.uri().query().unwrap_or("").as_bytes());
    let headers = req.headers().clone();
    let host = headers
        .get("host")
        .and_then(|h| h.to_str().ok())
        .unwrap_or("127.0.0.1")
        .to_string();
    let bytes = axum::body::to_bytes(req.into_body(), 4 << 20)
        .await
        .unwrap_or_default();
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        match serde_json::from_slice(&bytes) {
            Ok(v) => v,
            Err(e) => {
                return err(
                    400,
                    "InvalidRequestContent",
                    &format!("The request content was invalid and could not be deserialized: {e}"),
                )
            }
        }
    };
    let r = Req {
        method,
        path,
        query,
        headers,
        body,
        base: format!("http://{host}"),
    };
    if r.path == "/api/retail/prices" {
        let st = lock(&state);
        return prices(&st, &r);
    }
    if r.path.starts_with("/metadata/") {
        return imds(&r);
    }
    if r.q("api-version").is_none() {
        return err(
            400,
            "MissingApiVersionParameter",
            "The api-version query parameter (?api-version=) is required for all requests.",
        );
    }
    match r.headers.get("authorization").and_then(|v| v.to_str().ok()) {
        None => {
            return err(
                401,
                "AuthenticationFailed",
                "Authentication failed. The 'Authorization' header is missing.",
            )
        }
        Some(v) if v.strip_prefix("Bearer ") == Some(TOKEN) => {}
        Some(_) => {
            return err(
                401,
                "InvalidAuthenticationToken",
                "The access token is invalid.",
            )
        }
    }
    let mut st = lock(&state);
    advance(&mut st);
    let mut rsp = route(&mut st, &r);
    if st.location_only {
        let h = rsp.headers_mut();
        if let Some(op) = h.remove("azure-asyncoperation") {
            let url = op
                .to_str()
                .unwrap_or("")
                .replace("/operations/", "/operationResults/");
            if let Ok(v) = axum::http::HeaderValue::from_str(&url) {
                h.insert("location", v);
            }
        }
    }
    rsp
}

fn route(st: &mut State, r: &Req) -> Response {
    let segs: Vec<&str> = r.path.trim_matches('/').split('/').collect();
    if segs.len() == 10
        && eq(segs[0], "providers")
        && eq(segs[1], "Microsoft.Billing")
        && eq(segs[2], "billingAccounts")
        && eq(segs[4], "billingProfiles")
        && eq(segs[6], "providers")
        && eq(segs[7], "Microsoft.Consumption")
        && eq(segs[8], "credits")
        && eq(segs[9], "balanceSummary")
        && r.method == Method::GET
    {
        return credits(st, segs[3], segs[5]);
    }
    if segs.len() < 2 || !eq(segs[0], "subscriptions") {
        return err(
            404,
            "InvalidResourceType",
            &format!("no route for {}", r.path),
        );
    }
    if !eq(segs[1], SUBSCRIPTION) {
        return err(
            404,
            "SubscriptionNotFound",
            &format!("The subscription '{}' could not be found.", segs[1]),
        );
    }
    let rest = &segs[2..];
    // /subscriptions/{s}/providers/Microsoft.Compute/skus
    // /subscriptions/{s}/providers/{ns}/locations/{loc}/operations/{id}
    if rest.len() >= 3 && eq(rest[0], "providers") {
        if eq(rest[2], "skus") && r.method == Method::GET {
            return skus(st, r);
        }
        if rest.len() == 3
            && eq(rest[1], "Microsoft.Compute")
            && eq(rest[2], "virtualMachines")
            && r.method == Method::GET
        {
            return list_all_vms(st, r);
        }
        if rest.len() == 6 && eq(rest[2], "locations") && eq(rest[4], "operations") {
            return poll(st, rest[5]);
        }
        if rest.len() == 6 && eq(rest[2], "locations") && eq(rest[4], "operationResults") {
            return poll_location(st, r, rest[5]);
        }
        return err(
            404,
            "InvalidResourceType",
            &format!("no route for {}", r.path),
        );
    }
    if rest.len() < 4 || !eq(rest[0], "resourceGroups") || !eq(rest[2], "providers") {
        return err(
            404,
            "InvalidResourceType",
            &format!("no route for {}", r.path),
        );
    }
    let rg = rest[1];
    if !st.groups.contains(&rg.to_ascii_lowercase()) {
        return err(
            404,
            "ResourceGroupNotFound",
            &format!("Resource group '{rg}' could not be found."),
        );
    }
    let ns = rest[3];
    let Some(ty) = rest.get(4) else {
        return err(404, "InvalidResourceType", "no resource type");
    };
    let Some(kind) = Kind::of(ns, ty) else {
        return err(
            404,
            "InvalidResourceType",
            &format!("The resource type '{ty}' could not be found in the namespace '{ns}'."),
        );
    };
    let tail = &rest[5..];
    match (tail.len(), &r.method) {
        (0, &Method::GET) => list(st, r, rg, kind),
        (1, m) => {
            let name = tail[0];
            match *m {
                Method::GET => get(st, r, rg, kind, name),
                Method::PUT => put(st, r, rg, kind, name),
                Method::PATCH => patch(st, r, rg, kind, name),
                Method::DELETE => delete(st, r, rg, kind, name),
                _ => err(405, "MethodNotAllowed", "method not allowed"),
            }
        }
        (2, &Method::POST) if kind == Kind::Vm => vm_action(st, r, rg, tail[0], tail[1]),
        (2, &Method::GET) if kind == Kind::Vm && eq(tail[1], "instanceView") => {
            match st
                .res
                .get(&rid(rg, kind, tail[0]).to_ascii_lowercase())
                .filter(|x| x.visible())
            {
                Some(res) => answer(200, instance_view(res), &[]),
                None => not_found(kind, tail[0], rg),
            }
        }
        (5, m)
            if eq(tail[1], "providers")
                && eq(tail[2], "Microsoft.Resources")
                && eq(tail[3], "tags")
                && eq(tail[4], "default") =>
        {
            tags_call(st, r, m, rg, kind, tail[0])
        }
        (3, &Method::GET) if kind == Kind::Vnet && eq(tail[1], "subnets") => {
            subnet_get(st, rg, tail[0], tail[2])
        }
        (3, m) if kind == Kind::Nsg && eq(tail[1], "securityRules") => {
            rule_call(st, r, m, rg, tail[0], tail[2])
        }
        (2, &Method::GET) if kind == Kind::Nsg && eq(tail[1], "securityRules") => {
            match st.res.get(&rid(rg, kind, tail[0]).to_ascii_lowercase()) {
                Some(res) => answer(
                    200,
                    json!({"value": res.body["properties"]["securityRules"]}),
                    &[],
                ),
                None => not_found(kind, tail[0], rg),
            }
        }
        _ => err(
            404,
            "InvalidResourceType",
            &format!("no route for {} {}", r.method, r.path),
        ),
    }
}

fn not_found(kind: Kind, name: &str, rg: &str) -> Response {
    err(
        404,
        "ResourceNotFound",
        &format!(
            "The Resource '{}/{name}' under resource group '{rg}' was not found. For more details please go to https://aka.ms/ARMResourceNotFoundFix",
            kind.type_name()
        ),
    )
}

fn page<T: Clone>(items: &[T], r: &Req, size: usize, skip_key: &str) -> (Vec<T>, Option<String>) {
    let skip: usize = r.q(skip_key).and_then(|s| s.parse().ok()).unwrap_or(0);
    let end = (skip + size).min(items.len());
    let got = items.get(skip..end).map(<[T]>::to_vec).unwrap_or_default();
    let next = (end < items.len()).then(|| r.next_link(skip_key, end));
    (got, next)
}

fn list_answer(items: Vec<Value>, next: Option<String>) -> Response {
    let mut body = json!({ "value": items });
    if let Some(n) = next {
        body["nextLink"] = json!(n);
    }
    answer(200, body, &[])
}

fn skus(st: &State, r: &Req) -> Response {
    let loc = r.q("$filter").and_then(|f| {
        let f = f.trim();
        f.strip_prefix("location eq '")
            .and_then(|x| x.strip_suffix('\''))
            .map(str::to_string)
    });
    let items: Vec<Value> = st
        .skus
        .iter()
        .filter(|s| {
            loc.as_ref().is_none_or(|l| {
                s["locations"]
                    .as_array()
                    .is_some_and(|ls| ls.iter().any(|x| eq(x.as_str().unwrap_or(""), l)))
            })
        })
        .cloned()
        .collect();
    let (got, next) = page(&items, r, st.page_size, "$skiptoken");
    list_answer(got, next)
}

fn prices(st: &State, r: &Req) -> Response {
    let mut conds: Vec<(String, String)> = Vec::new();
    if let Some(f) = r.q("$filter") {
        for part in f.split(" and ") {
            let Some((k, v)) = part.trim().split_once(" eq ") else {
                return answer(
                    400,
                    json!({"Error": {"Code": "InvalidFilter", "Message": format!("cannot parse {part:?}")}}),
                    &[],
                );
            };
            conds.push((
                k.trim().to_string(),
                v.trim().trim_matches('\'').to_string(),
            ));
        }
    }
    let items: Vec<Value> = st
        .prices
        .iter()
        .filter(|p| {
            conds.iter().all(|(k, v)| {
                // The filter's `priceType` is the row's `type`.
                let field = if k == "priceType" { "type" } else { k.as_str() };
                p[field].as_str().is_some_and(|x| eq(x, v))
            })
        })
        .cloned()
        .collect();
    let (got, next) = page(&items, r, st.page_size, "$skip");
    answer(
        200,
        json!({"BillingCurrency": "USD", "CustomerEntityId": "Default", "CustomerEntityType": "Retail",
            "Items": got, "NextPageLink": next, "Count": got.len()}),
        &[],
    )
}

/// `VirtualMachines_ListAll`: every VM of the subscription; with `statusOnly=true` only the run time
/// status (the instance view) of each.
fn list_all_vms(st: &State, r: &Req) -> Response {
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

fn list(st: &State, r: &Req, rg: &str, kind: Kind) -> Response {
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

fn view(res: &Res, expand: bool) -> Value {
    let mut b = res.body.clone();
    if expand && res.kind == Kind::Vm {
        b["properties"]["instanceView"] = instance_view(res);
    }
    b
}

fn instance_view(res: &Res) -> Value {
    let ps = res.body["properties"]["provisioningState"]
        .as_str()
        .unwrap_or("Succeeded")
        .to_string();
    let mut statuses = vec![json!({
        "code": format!("ProvisioningState/{}", ps.to_ascii_lowercase()),
        "level": if ps == "Failed" { "Error" } else { "Info" },
        "displayStatus": format!("Provisioning {}", ps.to_ascii_lowercase()),
    })];
    if !res.power.is_empty() {
        statuses.push(json!({
            "code": format!("PowerState/{}", res.power),
            "level": "Info",
            "displayStatus": format!("VM {}", res.power),
        }));
    }
    json!({"computerName": res.body["name"], "osName": "ubuntu", "statuses": statuses})
}

fn get(st: &State, r: &Req, rg: &str, kind: Kind, name: &str) -> Response {
    match st
        .res
        .get(&rid(rg, kind, name).to_ascii_lowercase())
        .filter(|x| x.visible())
    {
        Some(res) => answer(
            200,
            view(res, r.q("$expand").is_some_and(|e| eq(e, "instanceView"))),
            &[],
        ),
        None => not_found(kind, name, rg),
    }
}

fn start_op(
    st: &mut State,
    r: &Req,
    key: &str,
    kind: Kind,
    location: &str,
    action: Action,
) -> String {
    let id = format!("{:08x}-0000-4000-8000-{:012x}", st.next_op, st.next_op);
    st.next_op += 1;
    st.ops.insert(
        id.clone(),
        Op {
            key: key.to_string(),
            action,
            polls: 0,
            started: Instant::now(),
            outcome: None,
        },
    );
    format!(
        "{}/subscriptions/{SUBSCRIPTION}/providers/{}/locations/{location}/operations/{id}?api-version={}",
        r.base,
        kind.namespace(),
        r.q("api-version").unwrap_or(COMPUTE_API)
    )
}

/// A referenced resource id that must exist; the error answer when it does not.
fn must_exist(st: &State, id: &str, by: &str) -> Option<Response> {
    let key = id.to_ascii_lowercase();
    let found = if let Some(i) = key.find("/subnets/") {
        let (vnet, sub) = (&key[..i], &key[i + 9..]);
        st.res.get(vnet).is_some_and(|v| {
            v.body["properties"]["subnets"]
                .as_array()
                .is_some_and(|s| s.iter().any(|x| eq(x["name"].as_str().unwrap_or(""), sub)))
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

fn put(st: &mut State, r: &Req, rg: &str, kind: Kind, name: &str) -> Response {
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
    if let Some(e) = busy(st, &key, kind) {
        return e;
    }
    if let Some((_, assignment)) = st.deny.iter().find(|(t, _)| eq(t, kind.type_name())) {
        let assignment_id = format!(
            "/subscriptions/{SUBSCRIPTION}/providers/Microsoft.Authorization/policyAssignments/{assignment}"
        );
        let info = json!([{"type": "PolicyViolation", "info": {
            "evaluationDetails": {"evaluatedExpressions": []},
            "policyDefinitionId": "/providers/Microsoft.Authorization/policyDefinitions/6c112d4e-5bc7-47ae-a041-ea2d9dccd749",
            "policyDefinitionName": "not-allowed-resource-types",
            "policyDefinitionDisplayName": "Not allowed resource types",
            "policyDefinitionEffect": "deny",
            "policyAssignmentId": assignment_id,
            "policyAssignmentName": assignment,
            "policyAssignmentDisplayName": format!("Deny {}", kind.type_name()),
            "policyAssignmentScope": format!("/subscriptions/{SUBSCRIPTION}"),
        }}]);
        return err_with(
            403,
            "RequestDisallowedByPolicy",
            &format!("Resource '{name}' was disallowed by policy. Policy identifiers: '[{{\"policyAssignment\":{{\"name\":\"Deny {}\",\"id\":\"{assignment_id}\"}},\"policyDefinition\":{{\"name\":\"Not allowed resource types\"}}}}]'.", kind.type_name()),
            json!([]),
            json!({"target": name, "additionalInfo": info}),
        );
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
    match kind {
        Kind::Pip => {
            let ip = st.res.get(&key).and_then(|x| {
                x.body["properties"]["ipAddress"]
                    .as_str()
                    .map(str::to_string)
            });
            let ip = ip.unwrap_or_else(|| {
                st.next_ip += 1;
                format!("20.61.{}.{}", st.next_ip / 250, st.next_ip % 250 + 1)
            });
            body["properties"]["ipAddress"] = json!(ip);
            body["sku"] = r
                .body
                .get("sku")
                .cloned()
                .unwrap_or(json!({"name": "Basic"}));
            if let Some(label) = props["dnsSettings"]["domainNameLabel"].as_str() {
                let fqdn = match dns_fqdn(
                    label,
                    props["dnsSettings"]["domainNameLabelScope"].as_str(),
                    rg,
                    &location,
                ) {
                    Ok(f) => f,
                    Err(e) => return err(400, "InvalidDomainNameLabel", &e),
                };
                let taken = st.res.iter().any(|(k, x)| {
                    *k != key
                        && x.kind == Kind::Pip
                        && x.body["properties"]["dnsSettings"]["fqdn"]
                            .as_str()
                            .is_some_and(|f| eq(f, &fqdn))
                });
                if taken {
                    return err(
                        400,
                        "DnsRecordInUse",
                        &format!("DNS record {fqdn} is already used by another public IP."),
                    );
                }
                body["properties"]["dnsSettings"]["fqdn"] = json!(fqdn);
            }
            if let Some(old) = st.res.get(&key) {
                if let Some(c) = old.body["properties"].get("ipConfiguration") {
                    body["properties"]["ipConfiguration"] = c.clone();
                }
            }
        }
        Kind::Nsg => {
            let rules: Vec<Value> = props["securityRules"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .map(|mut rule| {
                    let rn = rule["name"].as_str().unwrap_or("rule").to_string();
                    rule["id"] = json!(format!("{id}/securityRules/{rn}"));
                    rule["properties"]["provisioningState"] = json!("Succeeded");
                    rule
                })
                .collect();
            body = nsg_body(&id, name, &location, &tags, rules);
        }
        Kind::Nic => {
            if let Some(n) = props["networkSecurityGroup"]["id"].as_str() {
                if let Some(e) = must_exist(st, n, &id) {
                    return e;
                }
            }
            let cfgs = props["ipConfigurations"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            if cfgs.is_empty() {
                return err(
                    400,
                    "InvalidRequestFormat",
                    "A network interface needs at least one IP configuration.",
                );
            }
            let mut out = Vec::new();
            for (i, mut c) in cfgs.into_iter().enumerate() {
                let cn = c["name"].as_str().unwrap_or("ipconfig1").to_string();
                for refd in [
                    c["properties"]["subnet"]["id"].as_str(),
                    c["properties"]["publicIPAddress"]["id"].as_str(),
                ]
                .into_iter()
                .flatten()
                {
                    if let Some(e) = must_exist(st, refd, &id) {
                        return e;
                    }
                }
                if c["properties"]["subnet"]["id"].as_str().is_none() {
                    return err(
                        400,
                        "InvalidRequestFormat",
                        "Subnet is required in an IP configuration.",
                    );
                }
                if let Some(asgs) = c["properties"]["applicationSecurityGroups"].as_array() {
                    for a in asgs {
                        if let Some(e) = must_exist(st, a["id"].as_str().unwrap_or(""), &id) {
                            return e;
                        }
                    }
                }
                c["id"] = json!(format!("{id}/ipConfigurations/{cn}"));
                c["properties"]["privateIPAddress"] =
                    json!(format!("10.0.0.{}", 4 + i + (st.next_ip as usize % 200)));
                c["properties"]["provisioningState"] = json!("Succeeded");
                out.push(c);
            }
            body["properties"]["ipConfigurations"] = json!(out);
            if let Some(old) = st.res.get(&key) {
                if let Some(vm) = old.body["properties"].get("virtualMachine") {
                    body["properties"]["virtualMachine"] = vm.clone();
                }
            }
            // The public addresses now belong to this interface's configurations.
            for c in &out {
                if let Some(pip) = c["properties"]["publicIPAddress"]["id"].as_str() {
                    if let Some(p) = st.res.get_mut(&pip.to_ascii_lowercase()) {
                        p.body["properties"]["ipConfiguration"] = json!({"id": c["id"]});
                    }
                }
            }
        }
        Kind::Vm => {
            let size = props["hardwareProfile"]["vmSize"]
                .as_str()
                .unwrap_or("")
                .to_string();
            let offered_here = |s: &&&Value| {
                s["locations"]
                    .as_array()
                    .is_some_and(|l| l.iter().any(|x| eq(x.as_str().unwrap_or(""), &location)))
            };
            let named: Vec<&Value> = st
                .skus
                .iter()
                .filter(|s| {
                    s["resourceType"] == "virtualMachines"
                        && eq(s["name"].as_str().unwrap_or(""), &size)
                })
                .collect();
            let Some(sku) = named
                .iter()
                .find(offered_here)
                .or(named.first())
                .map(|s| (*s).clone())
            else {
                return err_with(
                    400,
                    "InvalidParameter",
                    &format!("The value {size} provided for the VM size is not valid."),
                    json!([]),
                    json!({"target": "vmSize"}),
                );
            };
            let lk = (size.to_ascii_lowercase(), location.to_ascii_lowercase());
            let offered = sku["locations"]
                .as_array()
                .is_some_and(|l| l.iter().any(|x| eq(x.as_str().unwrap_or(""), &location)));
            if !offered || st.unavailable.contains(&lk) {
                return err(
                    409,
                    "SkuNotAvailable",
                    &format!("The requested VM size for resource 'Following SKUs have failed for Capacity Restrictions: {size}' is currently not available in location '{location}'. Please try another size or deploy to a different location or different zone. See https://aka.ms/azureskunotavailable for details."),
                );
            }
            if st.quota.contains(&size.to_ascii_lowercase()) {
                let family = sku["family"].as_str().unwrap_or("standard");
                return err(
                    409,
                    "OperationNotAllowed",
                    &format!("Operation could not be completed as it results in exceeding approved {family} Cores quota. Additional details - Deployment Model: Resource Manager, Location: {location}, Current Limit: 10, Current Usage: 10, Additional Required: 2, (Minimum) New Limit Required: 12."),
                );
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
                return err_with(
                    400,
                    "InvalidParameter",
                    &format!("The selected VM size '{size}' cannot boot Hypervisor Generation or architecture of image '{image_sku}': the image is {} and the size is {arch}.", if image_arm { "Arm64" } else { "x64" }),
                    json!([]),
                    json!({"target": "vmSize"}),
                );
            }
            let Some(nics) = props["networkProfile"]["networkInterfaces"]
                .as_array()
                .cloned()
            else {
                return err(
                    400,
                    "InvalidParameter",
                    "networkProfile.networkInterfaces is required.",
                );
            };
            for n in &nics {
                let nic_id = n["id"].as_str().unwrap_or("");
                if let Some(e) = must_exist(st, nic_id, &id) {
                    return e;
                }
                if let Some(e) = reserved_for_another(st, nic_id, &id) {
                    return e;
                }
            }
            let linux = &props["osProfile"]["linuxConfiguration"];
            let keys = linux["ssh"]["publicKeys"].as_array().map_or(0, |k| k.len());
            if linux["disablePasswordAuthentication"] == true && keys == 0 {
                return err_with(
                    400,
                    "InvalidParameter",
                    "Authentication using either SSH or by user name and password must be enabled in Linux profile.",
                    json!([]),
                    json!({"target": "linuxConfiguration"}),
                );
            }
            if let Some(cd) = props["osProfile"]["customData"].as_str() {
                if cd.len() > 87_380 {
                    return err(400, "InvalidParameter", "customData is too long.");
                }
            }
            let old = st.res.get(&key).cloned();
            body["properties"]["vmId"] =
                json!(format!("{:08x}-1111-4000-8000-000000000000", st.next_op));
            body["properties"]["timeCreated"] = match &old {
                Some(o) => o.body["properties"]["timeCreated"].clone(),
                None => json!(now()),
            };
            if let Some(cd) = props["osProfile"]["customData"].as_str() {
                st.custom_data.insert(key.clone(), cd.to_string());
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
            body["properties"]["storageProfile"]["osDisk"]["managedDisk"]["id"] = json!(disk_id);
            st.res.insert(
                disk_id.to_ascii_lowercase(),
                Res::new(
                    Kind::Disk,
                    json!({"id": disk_id, "name": disk, "type": Kind::Disk.type_name(), "location": location,
                        "tags": {}, "properties": {"provisioningState": "Succeeded", "diskState": "Attached",
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
            power = old.map(|o| o.power).unwrap_or_else(|| "starting".into());
            if let Some(code) = st.no_stock.get(&lk) {
                let msg = match code.as_str() {
                    "ZonalAllocationFailed" => format!("Allocation failed. We do not have sufficient capacity for the requested VM size {size} in this zone. Read more about improving likelihood of allocation success at http://aka.ms/allocation-guidance"),
                    "OverconstrainedAllocationRequest" => format!("Allocation failed. VM(s) with the following constraints cannot be allocated, because the condition is too restrictive. Please remove some constraints and try again. Constraints applied are: - VM Size {size}"),
                    _ => format!("Allocation failed. We do not have sufficient capacity for the requested VM size {size} in this region. Read more about improving likelihood of allocation success at http://aka.ms/allocation-guidance"),
                };
                action = Action::Fail(code.clone(), msg);
            }
        }
        Kind::Asg | Kind::Vnet | Kind::Disk => {}
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
        },
    );
    let op = start_op(st, r, &key, kind, &location, action);
    answer(
        if exists { 200 } else { 201 },
        body,
        &[("Azure-AsyncOperation", op), ("Retry-After", "0".into())],
    )
}

fn patch(st: &mut State, r: &Req, rg: &str, kind: Kind, name: &str) -> Response {
    let key = rid(rg, kind, name).to_ascii_lowercase();
    if let Some(e) = busy(st, &key, kind) {
        return e;
    }
    let Some(res) = st.res.get_mut(&key).filter(|x| x.visible()) else {
        return not_found(kind, name, rg);
    };
    if let Some(t) = r.body.get("tags") {
        res.body["tags"] = t.clone();
    }
    let mut restart = false;
    if kind == Kind::Vm {
        if let Some(size) = r.body["properties"]["hardwareProfile"]["vmSize"].as_str() {
            res.body["properties"]["hardwareProfile"]["vmSize"] = json!(size);
            restart = res.power == "running";
        }
    }
    res.body["properties"]["provisioningState"] = json!("Updating");
    if restart {
        res.power = "starting".into();
    }
    let body = res.body.clone();
    let location = body["location"]
        .as_str()
        .unwrap_or("westeurope")
        .to_string();
    let action = if restart {
        Action::Power("running")
    } else {
        Action::Put
    };
    let op = start_op(st, r, &key, kind, &location, action);
    answer(200, body, &[("Azure-AsyncOperation", op)])
}

fn delete(st: &mut State, r: &Req, rg: &str, kind: Kind, name: &str) -> Response {
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
    if st.refuse_delete.contains(&name.to_ascii_lowercase()) {
        return err(
            409,
            "ScopeLocked",
            &format!("The scope '{id}' cannot perform delete operation because following scope(s) are locked: '{id}'. Please remove the lock and try again."),
        );
    }
    match kind {
        Kind::Nic => {
            if let Some(e) = reserved_for_another(st, &id, "") {
                return e;
            }
            if let Some(vm) = res.body["properties"]["virtualMachine"]["id"].as_str() {
                return err(
                    400,
                    "NicInUse",
                    &format!("Network Interface {id} is used by existing resource {vm}. In order to delete the network interface, it must be dissociated from the resource."),
                );
            }
        }
        Kind::Nsg => {
            let users: Vec<String> = st
                .res
                .values()
                .filter(|x| {
                    x.kind == Kind::Nic
                        && x.body["properties"]["networkSecurityGroup"]["id"]
                            .as_str()
                            .is_some_and(|n| eq(n, &id))
                })
                .map(|x| x.body["id"].as_str().unwrap_or("").to_string())
                .collect();
            if !users.is_empty() {
                return err(
                    400,
                    "InUseNetworkSecurityGroupCannotBeDeleted",
                    &format!("Network security group {id} cannot be deleted because it is in use by the following resources: {}", users.join(", ")),
                );
            }
        }
        Kind::Pip => {
            if let Some(c) = res.body["properties"]["ipConfiguration"]["id"].as_str() {
                return err(
                    400,
                    "PublicIPAddressCannotBeDeleted",
                    &format!("Public IP address {id} can not be deleted since it is still allocated to resource {c}. In order to delete the public IP, disassociate/detach the Public IP address from the resource."),
                );
            }
        }
        _ => {}
    }
    let location = res.body["location"]
        .as_str()
        .unwrap_or("westeurope")
        .to_string();
    if let Some(x) = st.res.get_mut(&key) {
        x.body["properties"]["provisioningState"] = json!("Deleting");
        if kind == Kind::Vm && !x.power.is_empty() {
            x.power = "stopping".into();
        }
    }
    let op = start_op(st, r, &key, kind, &location, Action::Delete);
    answer(
        202,
        Value::Null,
        &[
            ("Azure-AsyncOperation", op.clone()),
            ("Location", op),
            ("Retry-After", "0".into()),
        ],
    )
}

fn vm_action(st: &mut State, r: &Req, rg: &str, name: &str, action: &str) -> Response {
    let key = rid(rg, Kind::Vm, name).to_ascii_lowercase();
    let (busy, end) = match action.to_ascii_lowercase().as_str() {
        "start" => ("starting", "running"),
        "deallocate" => ("deallocating", "deallocated"),
        "poweroff" => ("stopping", "stopped"),
        "restart" => ("starting", "running"),
        _ => return err(404, "InvalidResourceType", &format!("no action {action}")),
    };
    let Some(res) = st.res.get_mut(&key).filter(|x| x.visible()) else {
        return not_found(Kind::Vm, name, rg);
    };
    res.power = busy.into();
    let location = res.body["location"]
        .as_str()
        .unwrap_or("westeurope")
        .to_string();
    let op = start_op(st, r, &key, Kind::Vm, &location, Action::Power(end));
    answer(
        202,
        Value::Null,
        &[
            ("Azure-AsyncOperation", op.clone()),
            ("Location", op),
            ("Retry-After", "0".into()),
        ],
    )
}

/// The Tags API on a resource (`{id}/providers/Microsoft.Resources/tags/default`): `GET`, `PUT`
/// (replace) and `PATCH` with `operation` `Merge`, `Replace` or `Delete` (by name when the value
/// given is empty, else by name and value). It answers at once (200, no operation to follow).
fn tags_call(st: &mut State, r: &Req, m: &Method, rg: &str, kind: Kind, name: &str) -> Response {
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
        Method::GET => return answer(200, shown(&json!(tags)), &[]),
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
    answer(200, shown(&json!(tags)), &[])
}

/// `Microsoft.Consumption/credits/balanceSummary` of a billing profile.
fn credits(st: &State, account: &str, profile: &str) -> Response {
    let Some((amount, currency)) = st.credits.get(&(account.to_string(), profile.to_string()))
    else {
        return err(
            404,
            "NotFound",
            &format!("Billing profile {profile} of billing account {account} was not found."),
        );
    };
    let money = |v: f64| json!({"currency": currency, "value": v});
    let base = format!(
        "/providers/Microsoft.Billing/billingAccounts/{account}/billingProfiles/{profile}/providers/Microsoft.Consumption/credits/balanceSummary"
    );
    answer(
        200,
        json!({
            "id": format!("{base}/00000000-0000-4000-8000-0000000000c7"),
            "name": "00000000-0000-4000-8000-0000000000c7",
            "type": "Microsoft.Consumption/credits/balanceSummary",
            "eTag": null,
            "properties": {
                "balanceSummary": {"estimatedBalance": money(*amount), "currentBalance": money(*amount)},
                "pendingCreditAdjustments": money(0.0),
                "expiredCredit": money(0.0),
                "pendingEligibleCharges": money(0.0),
                "creditCurrency": currency,
                "billingCurrency": currency,
                "isEstimatedBalance": false,
            }
        }),
        &[],
    )
}

/// The instance metadata service's token endpoint, as a VM sees it: without the `Metadata: true`
/// header it refuses at once (what a client's probe looks for); with it, this VM has no identity.
fn imds(r: &Req) -> Response {
    if r.headers.get("metadata").and_then(|v| v.to_str().ok()) != Some("true") {
        return answer(
            400,
            json!({"error": "invalid_request", "error_description": "Required metadata header not specified"}),
            &[],
        );
    }
    answer(
        400,
        json!({"error": "invalid_request", "error_description": "Identity not found"}),
        &[],
    )
}

fn subnet_get(st: &State, rg: &str, vnet: &str, subnet: &str) -> Response {
    let Some(v) = st.res.get(&rid(rg, Kind::Vnet, vnet).to_ascii_lowercase()) else {
        return not_found(Kind::Vnet, vnet, rg);
    };
    match v.body["properties"]["subnets"].as_array().and_then(|s| {
        s.iter()
            .find(|x| eq(x["name"].as_str().unwrap_or(""), subnet))
    }) {
        Some(s) => answer(200, s.clone(), &[]),
        None => err(
            404,
            "NotFound",
            &format!(
                "Resource {}/subnets/{subnet} not found.",
                v.body["id"].as_str().unwrap_or("")
            ),
        ),
    }
}

fn rule_call(st: &mut State, r: &Req, m: &Method, rg: &str, nsg: &str, rule: &str) -> Response {
    let nsg_id = rid(rg, Kind::Nsg, nsg);
    let key = nsg_id.to_ascii_lowercase();
    let Some(res) = st.res.get(&key).cloned() else {
        return not_found(Kind::Nsg, nsg, rg);
    };
    let rules = res.body["properties"]["securityRules"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let pos = rules
        .iter()
        .position(|x| eq(x["name"].as_str().unwrap_or(""), rule));
    match *m {
        Method::GET => match pos {
            Some(i) => answer(200, rules[i].clone(), &[]),
            None => err(
                404,
                "NotFound",
                &format!("Resource {nsg_id}/securityRules/{rule} not found."),
            ),
        },
        Method::PUT => {
            if let Some(e) = busy(st, &key, Kind::Nsg) {
                return e;
            }
            let props = r.body.get("properties").cloned().unwrap_or(json!({}));
            let Some(priority) = props["priority"].as_u64() else {
                return err(400, "SecurityRuleInvalidPriority", "Security rule has invalid Priority. Value provided: null. Allowed range 100-4096.");
            };
            if !(100..=4096).contains(&priority) {
                return err(400, "SecurityRuleInvalidPriority", &format!("Security rule has invalid Priority. Value provided: {priority}. Allowed range 100-4096."));
            }
            let dir = props["direction"].as_str().unwrap_or("Inbound").to_string();
            if let Some(other) = rules.iter().find(|x| {
                !eq(x["name"].as_str().unwrap_or(""), rule)
                    && x["properties"]["priority"].as_u64() == Some(priority)
                    && eq(x["properties"]["direction"].as_str().unwrap_or(""), &dir)
            }) {
                return err(400, "SecurityRuleConflict", &format!("Security rule {rule} conflicts with rule {}. Rules cannot have the same Priority and Direction.", other["name"].as_str().unwrap_or("")));
            }
            if let Some(asgs) = props["destinationApplicationSecurityGroups"].as_array() {
                for a in asgs {
                    if let Some(e) = must_exist(st, a["id"].as_str().unwrap_or(""), &nsg_id) {
                        return e;
                    }
                }
            }
            let mut props = props;
            props["provisioningState"] = json!("Succeeded");
            let new = json!({"id": format!("{nsg_id}/securityRules/{rule}"), "name": rule,
                "type": "Microsoft.Network/networkSecurityGroups/securityRules", "properties": props});
            let mut rules = rules;
            let status = match pos {
                Some(i) => {
                    rules[i] = new.clone();
                    200
                }
                None => {
                    rules.push(new.clone());
                    201
                }
            };
            let location = res.body["location"]
                .as_str()
                .unwrap_or("westeurope")
                .to_string();
            if let Some(x) = st.res.get_mut(&key) {
                x.body["properties"]["securityRules"] = json!(rules);
            }
            let op = start_op(st, r, &key, Kind::Nsg, &location, Action::Rule);
            let mut shown = new;
            shown["properties"]["provisioningState"] = json!("Updating");
            answer(status, shown, &[("Azure-AsyncOperation", op)])
        }
        Method::DELETE => {
            let Some(i) = pos else {
                return answer(204, Value::Null, &[]);
            };
            if let Some(e) = busy(st, &key, Kind::Nsg) {
                return e;
            }
            let mut rules = rules;
            rules.remove(i);
            if let Some(x) = st.res.get_mut(&key) {
                x.body["properties"]["securityRules"] = json!(rules);
            }
            let location = res.body["location"]
                .as_str()
                .unwrap_or("westeurope")
                .to_string();
            let op = start_op(st, r, &key, Kind::Nsg, &location, Action::Rule);
            answer(
                202,
                Value::Null,
                &[("Azure-AsyncOperation", op.clone()), ("Location", op)],
            )
        }
        _ => err(405, "MethodNotAllowed", "method not allowed"),
    }
}

/// What a VM's delete does to what it holds, by each reference's `deleteOption`: an OS disk with
/// `Delete` goes, else it is detached; an interface with `Delete` goes, with each public address of
/// it whose own `deleteOption` is `Delete` (the others are detached); an interface with `Detach`
/// (the default) stays, detached and reserved for the VM (as Azure does for about 180 s).
fn delete_vm_dependents(st: &mut State, vm: &Value, vm_id: &str) {
    let os = &vm["properties"]["storageProfile"]["osDisk"];
    if let Some(d) = os["managedDisk"]["id"].as_str() {
        let dk = d.to_ascii_lowercase();
        if os["deleteOption"] == "Delete" {
            st.res.remove(&dk);
        } else if let Some(disk) = st.res.get_mut(&dk) {
            disk.body["properties"]["diskState"] = json!("Unattached");
        }
    }
    let mut detached = Vec::new();
    for n in vm["properties"]["networkProfile"]["networkInterfaces"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let Some(nic_id) = n["id"].as_str() else {
            continue;
        };
        let nk = nic_id.to_ascii_lowercase();
        if n["properties"]["deleteOption"] == "Delete" {
            let Some(nic) = st.res.remove(&nk) else {
                continue;
            };
            st.reserved.remove(&nk);
            for c in nic.body["properties"]["ipConfigurations"]
                .as_array()
                .into_iter()
                .flatten()
            {
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
                    if let Some(o) = p.body["properties"].as_object_mut() {
                        o.remove("ipConfiguration");
                    }
                }
            }
        } else if let Some(nic) = st.res.get_mut(&nk) {
            if nic.body["properties"]["virtualMachine"]["id"]
                .as_str()
                .is_some_and(|v| eq(v, vm_id))
            {
                if let Some(p) = nic.body["properties"].as_object_mut() {
                    p.remove("virtualMachine");
                }
                detached.push(nic_id.to_string());
            }
        }
    }
    if !detached.is_empty() {
        let until = Instant::now() + st.nic_reservation;
        for d in detached {
            st.reserved
                .insert(d.to_ascii_lowercase(), (vm_id.to_string(), until));
        }
    }
}

/// Ends operations that have stood long enough unpolled.
fn advance(st: &mut State) {
    let due: Vec<String> = st
        .ops
        .iter()
        .filter(|(_, o)| o.outcome.is_none() && o.started.elapsed() >= SETTLE)
        .map(|(k, _)| k.clone())
        .collect();
    for id in due {
        finish(st, &id);
    }
}

fn finish(st: &mut State, op_id: &str) {
    let Some(op) = st.ops.get(op_id).cloned() else {
        return;
    };
    if op.outcome.is_some() {
        return;
    }
    let outcome = match &op.action {
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
            Ok(())
        }
        Action::Fail(code, msg) => {
            let mut failed_vm = None;
            if let Some(x) = st.res.get_mut(&op.key) {
                x.body["properties"]["provisioningState"] = json!("Failed");
                x.power.clear();
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
                    Kind::Vm => delete_vm_dependents(st, &x.body, &id),
                    Kind::Nic => {
                        let prefix = format!("{id}/ipConfigurations/").to_ascii_lowercase();
                        for p in st.res.values_mut().filter(|p| p.kind == Kind::Pip) {
                            if p.body["properties"]["ipConfiguration"]["id"]
                                .as_str()
                                .is_some_and(|c| c.to_ascii_lowercase().starts_with(&prefix))
                            {
                                if let Some(o) = p.body["properties"].as_object_mut() {
                                    o.remove("ipConfiguration");
                                }
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

fn poll(st: &mut State, op_id: &str) -> Response {
    let lro_polls = st.lro_polls;
    let Some(op) = st.ops.get_mut(op_id) else {
        return err(
            404,
            "NotFound",
            &format!("The operation '{op_id}' was not found."),
        );
    };
    op.polls += 1;
    if op.outcome.is_none() && op.polls >= lro_polls {
        finish(st, op_id);
    }
    let op = &st.ops[op_id];
    let running = op.outcome.is_none();
    let body = match &op.outcome {
        None => json!({"name": op_id, "status": "InProgress", "startTime": "2026-01-01T00:00:00Z"}),
        Some(Ok(())) => {
            json!({"name": op_id, "status": "Succeeded", "startTime": "2026-01-01T00:00:00Z", "endTime": "2026-01-01T00:00:01Z"})
        }
        Some(Err((code, msg))) => json!({"name": op_id, "status": "Failed",
            "startTime": "2026-01-01T00:00:00Z", "endTime": "2026-01-01T00:00:01Z",
            "error": {"code": code, "message": msg, "details": []}}),
    };
    // Azure names the wait before the next poll; the fake asks for none.
    let wait = if running {
        vec![("Retry-After", "0".to_string())]
    } else {
        vec![]
    };
    answer(200, body, &wait)
}

/// A `Location` poll: 202 while running, 200 when done, the failure's status and error otherwise.
fn poll_location(st: &mut State, r: &Req, op_id: &str) -> Response {
    let _ = poll(st, op_id);
    match st.ops.get(op_id).map(|o| o.outcome.clone()) {
        None => err(
            404,
            "NotFound",
            &format!("The operation '{op_id}' was not found."),
        ),
        Some(None) => answer(
            202,
            Value::Null,
            &[
                (
                    "Location",
                    format!(
                        "{}{}?api-version={}",
                        r.base,
                        r.path,
                        r.q("api-version").unwrap_or("")
                    ),
                ),
                ("Retry-After", "0".into()),
            ],
        ),
        Some(Some(Ok(()))) => answer(200, Value::Null, &[]),
        Some(Some(Err((code, msg)))) => err(409, &code, &msg),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn answers_like_resource_manager() {
        let f = FakeAzure::start().await.unwrap();
        let http = reqwest::Client::new();
        let rg = format!(
            "{}/subscriptions/{SUBSCRIPTION}/resourceGroups/{RESOURCE_GROUP}",
            f.url()
        );
        let asg = format!("{rg}/providers/Microsoft.Network/applicationSecurityGroups");
        // No token, wrong token, no api-version: Azure's codes in Azure's error body.
        let r = http
            .get(format!("{asg}?api-version=2024-05-01"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401);
        let b: Value = r.json().await.unwrap();
        assert_eq!(b["error"]["code"], "AuthenticationFailed");
        let r = http
            .get(format!("{asg}?api-version=2024-05-01"))
            .bearer_auth("nope")
            .send()
            .await
            .unwrap();
        assert_eq!(
            r.json::<Value>().await.unwrap()["error"]["code"],
            "InvalidAuthenticationToken"
        );
        let r = http.get(&asg).bearer_auth(TOKEN).send().await.unwrap();
        assert_eq!(
            r.json::<Value>().await.unwrap()["error"]["code"],
            "MissingApiVersionParameter"
        );
        // A PUT is a long-running operation: 201, Azure-AsyncOperation, InProgress until polled.
        f.set_lro_polls(2);
        f.set_page_size(1);
        for n in ["a1", "a2", "a3"] {
            let r = http
                .put(format!("{asg}/{n}?api-version=2024-05-01"))
                .bearer_auth(TOKEN)
                .json(&json!({"location": "westeurope"}))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 201);
            let op = r.headers()["azure-asyncoperation"]
                .to_str()
                .unwrap()
                .to_string();
            let body: Value = r.json().await.unwrap();
            assert_eq!(body["properties"]["provisioningState"], "Updating");
            let poll = |u: String| {
                let http = http.clone();
                async move {
                    http.get(u)
                        .bearer_auth(TOKEN)
                        .send()
                        .await
                        .unwrap()
                        .json::<Value>()
                        .await
                        .unwrap()
                }
            };
            if n == "a1" {
                assert_eq!(poll(op.clone()).await["status"], "InProgress");
                assert_eq!(poll(op).await["status"], "Succeeded");
            }
        }
        // Paging: one item a page, every page linked by nextLink.
        let mut url = format!("{asg}?api-version=2024-05-01");
        let mut names = Vec::new();
        loop {
            let b: Value = http
                .get(&url)
                .bearer_auth(TOKEN)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            names.extend(
                b["value"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v["name"].as_str().unwrap().to_string()),
            );
            match b["nextLink"].as_str() {
                Some(n) => url = n.to_string(),
                None => break,
            }
        }
        assert_eq!(names, ["a1", "a2", "a3"]);
        // Unknown resource group and resource: Azure's 404s.
        let r = http
            .get(format!("{}/subscriptions/{SUBSCRIPTION}/resourceGroups/nope/providers/Microsoft.Network/applicationSecurityGroups/x?api-version=1", f.url()))
            .bearer_auth(TOKEN).send().await.unwrap();
        assert_eq!(
            r.json::<Value>().await.unwrap()["error"]["code"],
            "ResourceGroupNotFound"
        );
        let r = http
            .get(format!("{asg}/zz?api-version=1"))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 404);
        assert_eq!(
            r.json::<Value>().await.unwrap()["error"]["code"],
            "ResourceNotFound"
        );
    }

    #[tokio::test]
    async fn reproduces_what_a_kind_fake_hid() {
        let f = FakeAzure::start().await.unwrap();
        f.add_subnet(RESOURCE_GROUP, "net-westeurope", "westeurope", "s", None);
        let http = reqwest::Client::new();
        let rg = format!(
            "{}/subscriptions/{SUBSCRIPTION}/resourceGroups/{RESOURCE_GROUP}/providers",
            f.url()
        );
        let send = |m: reqwest::Method, url: String, body: Option<Value>| {
            let http = http.clone();
            async move {
                let mut r = http.request(m, url).bearer_auth(TOKEN);
                if let Some(b) = body {
                    r = r.json(&b);
                }
                let r = r.send().await.unwrap();
                let status = r.status().as_u16();
                (status, r.json::<Value>().await.unwrap_or(Value::Null))
            }
        };
        // A DNS label gets its FQDN; scoped, with a hash; a second address cannot take it.
        let pip = |label: &str| {
            json!({"location": "westeurope", "properties": {"publicIPAllocationMethod": "Static",
                "dnsSettings": {"domainNameLabel": label, "domainNameLabelScope": "ResourceGroupReuse"}}})
        };
        let (st, b) = send(
            Method::PUT,
            format!("{rg}/Microsoft.Network/publicIPAddresses/a?api-version=2024-05-01"),
            Some(pip("web")),
        )
        .await;
        assert_eq!(st, 201);
        let fqdn = b["properties"]["dnsSettings"]["fqdn"].as_str().unwrap();
        assert!(
            fqdn.starts_with("web-") && fqdn.ends_with(".westeurope.cloudapp.azure.com"),
            "{fqdn}"
        );
        let (st, b) = send(
            Method::PUT,
            format!("{rg}/Microsoft.Network/publicIPAddresses/b?api-version=2024-05-01"),
            Some(pip("web")),
        )
        .await;
        assert_eq!(
            (st, b["error"]["code"].as_str()),
            (400, Some("DnsRecordInUse"))
        );
        // A second change of a network resource whose operation runs is refused.
        f.set_lro_polls(5);
        let (st, b) = send(
            Method::PUT,
            format!("{rg}/Microsoft.Network/publicIPAddresses/a?api-version=2024-05-01"),
            Some(pip("web")),
        )
        .await;
        assert_eq!(
            (st, b["error"]["code"].as_str()),
            (409, Some("AnotherOperationInProgress"))
        );
        f.set_lro_polls(1);
        // A new VM has its real creation time and shows to reads only after the delay.
        f.set_visibility_delay(Duration::from_millis(300));
        let nic = json!({"location": "westeurope", "properties": {"ipConfigurations": [{"name": "c",
            "properties": {"subnet": {"id": format!("/subscriptions/{SUBSCRIPTION}/resourceGroups/{RESOURCE_GROUP}/providers/Microsoft.Network/virtualNetworks/net-westeurope/subnets/s")}}}]}});
        let (st, _) = send(
            Method::PUT,
            format!("{rg}/Microsoft.Network/networkInterfaces/n?api-version=2024-05-01"),
            Some(nic),
        )
        .await;
        assert_eq!(st, 201);
        let vm = json!({"location": "westeurope", "tags": {"a": "1", "b": "2"}, "properties": {
            "hardwareProfile": {"vmSize": "Standard_B2s"},
            "storageProfile": {"imageReference": {"publisher": "p", "offer": "o", "sku": "server", "version": "latest"}},
            "osProfile": {"computerName": "v", "adminUsername": "u", "linuxConfiguration": {"disablePasswordAuthentication": true,
                "ssh": {"publicKeys": [{"path": "/home/u/.ssh/authorized_keys", "keyData": "ssh-ed25519 AAAA k"}]}}},
            "networkProfile": {"networkInterfaces": [{"id": format!("/subscriptions/{SUBSCRIPTION}/resourceGroups/{RESOURCE_GROUP}/providers/Microsoft.Network/networkInterfaces/n")}]}}});
        let vm_url = format!("{rg}/Microsoft.Compute/virtualMachines/v?api-version=2024-07-01");
        let (st, b) = send(Method::PUT, vm_url.clone(), Some(vm)).await;
        assert_eq!(st, 201);
        let made = b["properties"]["timeCreated"].as_str().unwrap().to_string();
        assert_eq!(
            made.len(),
            "2021-06-27T01:02:38.3138469+00:00".len(),
            "{made}"
        );
        assert!(made > rfc3339(std::time::SystemTime::now() - Duration::from_secs(60)));
        assert_eq!(send(Method::GET, vm_url.clone(), None).await.0, 404);
        let tags = format!(
            "{rg}/Microsoft.Compute/virtualMachines/v/providers/Microsoft.Resources/tags/default?api-version=2021-04-01"
        );
        assert_eq!(
            send(
                Method::PATCH,
                tags.clone(),
                Some(json!({"operation": "Merge", "properties": {"tags": {"c": "3"}}}))
            )
            .await
            .0,
            404
        );
        tokio::time::sleep(Duration::from_millis(320)).await;
        assert_eq!(send(Method::GET, vm_url, None).await.0, 200);
        // The Tags API merges and deletes what it names, nothing else.
        let (_, b) = send(
            Method::PATCH,
            tags.clone(),
            Some(json!({"operation": "Merge", "properties": {"tags": {"c": "3"}}})),
        )
        .await;
        assert_eq!(
            b["properties"]["tags"],
            json!({"a": "1", "b": "2", "c": "3"})
        );
        let (_, b) = send(
            Method::PATCH,
            tags,
            Some(json!({"operation": "Delete", "properties": {"tags": {"a": "", "b": "other"}}})),
        )
        .await;
        assert_eq!(b["properties"]["tags"], json!({"b": "2", "c": "3"}));
    }

    #[test]
    fn times_are_written_as_azure_writes_them() {
        let t = std::time::UNIX_EPOCH + Duration::from_nanos(1_624_755_758_313_846_900);
        assert_eq!(rfc3339(t), "2021-06-27T01:02:38.3138469+00:00");
        assert_eq!(
            rfc3339(std::time::UNIX_EPOCH),
            "1970-01-01T00:00:00.0000000+00:00"
        );
        let leap = std::time::UNIX_EPOCH + Duration::from_secs(951_782_400);
        assert_eq!(rfc3339(leap), "2000-02-29T00:00:00.0000000+00:00");
    }

    #[test]
    fn percent_round_trip() {
        let s = "serviceName eq 'Virtual Machines' and armSkuName eq 'Standard_B2s'";
        assert_eq!(
            crate::control::form_pairs(format!("k={}", percent_encode(s)).as_bytes()),
            [("k".to_string(), s.to_string())]
        );
        assert_eq!(
            crate::control::form_pairs(b"a+b=%27c"),
            [("a b".to_string(), "'c".to_string())]
        );
    }

    #[test]
    fn prices_hold_one_linux_consumption_row_per_size_and_location() {
        let p = seed_prices();
        let linux: Vec<_> = p
            .iter()
            .filter(|x| {
                x["armSkuName"] == "Standard_B2s"
                    && x["armRegionName"] == "westeurope"
                    && x["type"] == "Consumption"
                    && !x["productName"].as_str().unwrap().contains("Windows")
                    && !x["skuName"].as_str().unwrap().contains("Spot")
                    && !x["skuName"].as_str().unwrap().contains("Low Priority")
            })
            .collect();
        assert_eq!(linux.len(), 1);
        assert!((linux[0]["retailPrice"].as_f64().unwrap() - 0.0458).abs() < 1e-9);
    }
}
