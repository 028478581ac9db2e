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
//!   statuses, the power states carrying no time (as in the published examples), a failed VM's
//!   naming the error that failed it (`ProvisioningState/failed/AllocationFailed`, level `Error`,
//!   with the error's message: learn.microsoft.com "States and billing status of Azure Virtual
//!   Machines", as reported in hail-is/hail#11393 and taskcluster/taskcluster#3347); power states
//!   `starting`, `running`, `stopping`, `stopped`, `deallocating`, `deallocated`; `start`,
//!   `deallocate`, `powerOff`, `restart`; resize by `PATCH`; `customData` never returned;
//!   the sizes a VM can be resized to (`{vm}/vmSizes`, `VirtualMachines_ListAvailableSizes`,
//!   `VirtualMachine_ListAvailableVmSizes.json`): an allocated VM only to the sizes of its hardware
//!   cluster, any other refused with 409 `OperationNotAllowed` (target `vmSize`, "Unable to resize
//!   the VM ... because the requested size ... is not available in the current hardware cluster",
//!   as reported against Azure in microsoft/service-fabric-issues#472), a deallocated VM to any
//!   size of its location ([`FakeAzure::limit_cluster`]);
//!   `If-None-Match: *` on `PUT` (412 `PreconditionFailed` when the VM exists); `$expand=instanceView`
//!   on a list only with a `$filter` (the specification's words), `statusOnly=true` only on the
//!   subscription-wide list; an SSH-only Linux profile needs a key (400 `InvalidParameter`).
//! - **What a VM owns** (`NetworkInterfaceReference`, `OSDisk` and `PublicIPAddress`
//!   `deleteOption`): deleting a VM deletes its OS disk and each interface whose reference says
//!   `Delete`, and with such an interface each public address whose own `deleteOption` is `Delete`;
//!   the rest is detached (an OS disk left `Unattached`, its `managedBy` cleared). The OS disk's
//!   `deleteOption` of an existing VM changes by `PATCH` ("Update the delete option for an existing
//!   VM", learn.microsoft.com `virtual-machines/delete`); a disk attached to a VM (`managedBy`) cannot
//!   be deleted (409 `OperationNotAllowed`, "Disk ... is attached to VM ..."); a new VM's OS disk
//!   made from its image cannot take the name of a disk that exists (409 `ConflictingUserInput`,
//!   "Disk ... already exists in resource group .... Only CreateOption.Attach is supported.", as
//!   reported in hashicorp/terraform-provider-azurerm#15513). A failed VM keeps a power state beside
//!   its failed provisioning state (taskcluster/taskcluster#3347: `PowerState/running` after
//!   `OSProvisioningTimedOut`): deallocated when it never got hardware. A VM's delete preempts its
//!   operations still running (its create): they end `Canceled` with `OperationPreempted`
//!   (Azure/azure-sdk-for-java#1783).
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
//! - **Locks held by operations** ("Another operation on this or dependent resource is in
//!   progress", as reported against Azure in pulumi/pulumi-azure-native#699 and #903 and
//!   microsoft/AzureTRE#2222, where it lasts until the operation holding the resource ends): while another client's operation
//!   holds a resource ([`FakeAzure::hold`]) every change of it, and the `PUT` of an interface in a
//!   held virtual network, answers 409 `AnotherOperationInProgress` for as long as that operation
//!   runs, in tokio's time.
//! - **Landing zones' deny of public addresses** (the Corp policies of Azure landing zones: "Not
//!   allowed resource types" on public IP addresses and "Network interfaces should not have public
//!   IPs"): 403 `RequestDisallowedByPolicy` naming the assignment for a public address and for an
//!   interface that carries one ([`FakeAzure::deny_public_addresses`]).
//! - **Long-running operations** (ARM async operations guideline): `PUT` answers 201 (200 on update),
//!   `DELETE` and actions 202, with `Azure-AsyncOperation` (and `Location` for 202) naming an
//!   operation that reports `InProgress` for as long as it runs ([`FakeAzure::set_operation_time`],
//!   tokio's time: a test with a paused clock lets it run for minutes), polled or not, then
//!   `Succeeded`, or `Failed` with the error; the
//!   `Location`-only protocol on demand ([`FakeAzure::set_location_only`]).
//! - **No `Retry-After` on operations** (recorded sessions of the Azure SDKs for Python against
//!   compute `2021-07-01` and network `2021-02-01`): the answers that start a VM's `PUT` (201),
//!   `DELETE` and `deallocate` (202), and the `PUT`s of virtual networks, subnets and interfaces,
//!   carry the operation's address but name no pause, and neither do the polls of those operations
//!   while `InProgress`; a client polls at its own interval (Azure's SDKs: 30 s by default). The
//!   `Retry-After: 0` on every answer of the Java SDK's recordings, resource group `PUT`s and plain
//!   `GET`s included, is its recorder's rewrite, not Azure's. A test can name a pause
//!   ([`FakeAzure::set_poll_pause`]); `0` names none, as Azure's SDKs read it.
//! - **Lists**: `nextLink` paging of every list ([`FakeAzure::set_page_size`]), the links absolute
//!   with their explicit port, as Azure's are (`https://management.azure.com:443/...`); since the
//!   fake's own origin always carries its port, links can be written with an origin spelled
//!   otherwise ([`FakeAzure::set_link_origin`]).
//! - **Resource SKUs** (`skus.json`, `ListAvailableResourceSkusForARegion.json`): one entry per size
//!   and location, `$filter=location eq '<location>'`, `CpuArchitectureType` (`x64`, `Arm64`).
//! - **Marketplace images** (`VirtualMachineImages_List`, `VirtualMachineImages_Get`): the versions
//!   of a few Canonical Ubuntu images, each version with its `architecture`; 404 `NotFound`
//!   ("Artifact: VMImage was not found.") for any other. A VM `PUT` still takes any image
//!   reference, telling its architecture by an `arm64` in its SKU.
//! - **Tags API** (`Tags_UpdateAtScope`): `{id}/providers/Microsoft.Resources/tags/default` with
//!   `Merge`, `Replace` and `Delete` (by name, or by name and value), at most 50 tags.
//! - **Credits** (`CreditSummaryByBillingProfile.json`): a billing profile's balance summary
//!   ([`FakeAzure::set_credit`]).
//! - **Retail prices** (`/api/retail/prices`, `$filter`, `NextPageLink`, `{"Error":{"Code",
//!   "Message"}}`): Linux, Windows, Spot, Low Priority and reservation rows, so a client must pick.
//! - **Instance metadata service** (managed identity documentation): the token endpoint answers 400
//!   `{"error":"invalid_request","error_description":"Required metadata header not specified"}`
//!   at once to a request without the `Metadata: true` header, which is how clients probe for it;
//!   with it, the identity's token in the endpoint's JSON ([`FakeAzure::set_managed_identity`]) or
//!   400 "Identity not found"; user-assigned identities chosen by the `client_id` query parameter,
//!   and with several of them and no `client_id` (nor a system-assigned identity) 400 "Multiple user
//!   assigned identities exist, ..." ([`FakeAzure::set_user_assigned_identities`]).
//! - **Role scope** ([`FakeAzure::scope_to_resource_group`]): a principal whose role is scoped to the
//!   resource group is refused the subscription-wide VM list (403 `AuthorizationFailed`).
//! - **Throttling** (learn.microsoft.com, "Understand how Azure Resource Manager throttles
//!   requests": the regional token buckets of 2024), when turned on ([`FakeAzure::set_throttling`]):
//!   a bucket per kind of request (reads, writes, deletes) refilled continuously, what is left on
//!   every answer (`x-ms-ratelimit-remaining-subscription-*` and `-global-*`), 429 `TooManyRequests`
//!   with `Retry-After` over the limit. The per-hour limits of the older architecture, the tenant's
//!   limits and the resource providers' own (`x-ms-ratelimit-remaining-resource`) are not modelled.
//! - **Eventual consistency** ([`FakeAzure::set_visibility_delay`]): new VMs invisible to reads for a
//!   while, changes of them answered 404. An interface names the VM that uses it from the VM's
//!   `PUT` on, or, as Azure documents no order between the two, only once reads show that VM
//!   ([`FakeAzure::link_interfaces_when_visible`]).
//!
//! # What it does not reproduce
//! - Real capacity, quotas, zones, images and prices: the catalogue is six sizes in three locations
//!   (a size offered in some of them only by [`FakeAzure::offer_only`]), failures come only from
//!   the faults below.
//! - Tag names compared without case (Azure's rule for tags): tags are kept exactly as a `PUT`,
//!   a `PATCH` or the Tags API wrote them (values and case as sent, the whole set replaced by a
//!   `PUT`, left alone by a `PUT` refused with 412), and matched as written.
//! - Azure Policy beyond a deny of a resource type and the landing zones' deny of public addresses
//!   ([`FakeAzure::deny_public_addresses`]); RBAC beyond the one role scope above; locks
//!   beyond [`FakeAzure::refuse_delete`] (`ScopeLocked`). A lock on what a VM's delete would delete
//!   with it (disk, interface, address) refuses the VM's delete at its request, nothing deleted:
//!   Azure's deep delete fails under such a lock (as reported in Azure/azure-sdk-for-java#36243),
//!   but whether it refuses at once or fails the operation after deleting the VM is the fake's
//!   reading.
//! - The hash of a scoped DNS label is the fake's own (Azure's is undocumented); `TenantReuse` is
//!   treated as one tenant.
//! - How long Azure takes: every operation runs the same set time; the `Retry-After` other
//!   resource providers may name (the fake names one only when told); eventual consistency of
//!   anything but new VMs.
//! - Whether Azure reserves an interface after a VM refused at its `PUT`: the published reports
//!   are of VMs that were made and failed or were deleted, and the fake follows them.
//! - Managed identity tokens beyond their shape (the token is [`TOKEN`] whichever identity answers;
//!   user-assigned identities chosen by `object_id` or `msi_res_id`; no `IDENTITY_ENDPOINT`
//!   protocol), workload identity and Entra ID (no login endpoint).
//! - Whether the network resource provider applies a public address's own `deleteOption` when the
//!   VM deletes the interface it is on: the specification's words ("what happens to the public IP
//!   address when the VM using it is deleted") are followed.
//!
//! # Layout
//! One module per part of Azure: `compute` (sizes, VMs, what a VM owns and reserves), `network`
//! (addresses, security groups and rules, interfaces, subnets), `billing` (Retail Prices, credits,
//! the metadata service's probe), `resources` (the generic `GET`/`PUT`/`PATCH`/`DELETE`, lists and the
//! Tags API), `ops` (long-running operations) and `http` (routing, answers, paging); this file holds
//! the state and the test-facing [`FakeAzure`].
//!
//! Faults on demand, beside [`crate::Control`]'s (429 with Retry-After, 5xx, latency, dropped answers):
//! allocation failure of a size in a location ([`FakeAzure::fail_allocation`]), a size not offered
//! ([`FakeAzure::sku_not_available`]), a core quota ([`FakeAzure::exceed_quota`]), a policy deny of a
//! resource type ([`FakeAzure::deny_policy`]) or of public addresses
//! ([`FakeAzure::deny_public_addresses`]), a resource that refuses deletion
//! ([`FakeAzure::refuse_delete`]), and a lost answer after a VM `PUT` was accepted
//! ([`FakeAzure::lose_next_vm_put_answer`]).

// A fake answers an error as an axum `Response`: returned as the `Err` of the helpers that build a
// `PUT`, it trips clippy's `result_large_err`, as in the GCE fake.
#![allow(clippy::result_large_err)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

use axum::extract::{Request, State as AxState};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use serde_json::{json, Value};

use crate::control::{lock, serve, Control, Fault, Rule, Running};

mod billing;
mod compute;
mod http;
mod images;
mod network;
mod ops;
mod resources;
mod throttle;

use billing::*;
use compute::*;
use http::*;
use images::*;
use network::*;
use ops::*;
use resources::*;
pub use throttle::ArmLimits;
use throttle::Throttle;

/// The subscription the fake serves.
pub const SUBSCRIPTION: &str = "00000000-0000-4000-8000-0000000000a2";

/// The bearer token it accepts.
pub const TOKEN: &str = "fake-arm-token-0123456789";

/// The resource group that exists from the start.
pub const RESOURCE_GROUP: &str = "orca-rg";

/// The virtual network [`driver_settings`] names (the driver's name for it; Azure's is
/// `<VNET>-<location>`, [`FakeAzure::add_hosts_subnet`]).
pub const VNET: &str = "orca-net";

/// The subnet [`driver_settings`] names.
pub const SUBNET: &str = "hosts";

/// The location of the subnet [`FakeAzure::add_hosts_subnet`] adds.
pub const LOCATION: &str = "westeurope";

/// The SSH public key [`driver_settings`] gives the driver (not a usable key).
pub const SSH_PUBLIC_KEY: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOrcaTestKeyOnlyForTheFake orca@test";

/// What a program hands the Azure driver (`orca::of_with("azure", ..)`) to reach `fake`: the
/// subscription, resource group and bearer token the fake serves, its addresses for Resource
/// Manager and the prices, and VMs on [`VNET`]/[`SUBNET`] (which [`FakeAzure::add_hosts_subnet`]
/// adds) with an Ubuntu image and [`SSH_PUBLIC_KEY`] for user `orca`.
pub fn driver_settings(fake: &FakeAzure) -> orca_machines::Settings {
    orca_machines::Settings::new()
        .with("ORCA_AZURE_SUBSCRIPTION_ID", SUBSCRIPTION)
        .with("ORCA_AZURE_RESOURCE_GROUP", RESOURCE_GROUP)
        .with("ORCA_AZURE_VNET", VNET)
        .with("ORCA_AZURE_SUBNET", SUBNET)
        .with(
            "ORCA_AZURE_IMAGE",
            "Canonical:ubuntu-24_04-lts:server:latest",
        )
        .with("ORCA_AZURE_ADMIN_USER", "orca")
        .with("ORCA_AZURE_SSH_PUBLIC_KEY", SSH_PUBLIC_KEY)
        .with("ORCA_AZURE_ACCESS_TOKEN", TOKEN)
        .with("ORCA_AZURE_ENDPOINT", fake.url())
        .with("ORCA_AZURE_PRICES_ENDPOINT", fake.url())
}

/// Compute API version the fake answers.
pub const COMPUTE_API: &str = "2024-07-01";

/// How long an operation runs unless a test says otherwise ([`FakeAzure::set_operation_time`]):
/// none, it has ended by the next request, so each is polled once whatever the client's pause.
const OPERATION_TIME: Duration = Duration::ZERO;

/// How long Azure reserves the interface of a VM that failed or was deleted
/// (`NicReservedForAnotherVm`: "reserved for another Virtual Machine for 180 seconds").
pub const NIC_RESERVATION: Duration = Duration::from_secs(180);

/// `t` as Azure writes times: RFC 3339 in UTC with seven fractional digits
/// (`2021-06-27T01:02:38.3138469+00:00`).
fn rfc3339(t: std::time::SystemTime) -> String {
    let t = chrono::DateTime::<chrono::Utc>::from(t);
    // chrono writes 3, 6 or 9 fractional digits: the seventh is cut by hand (not rounded).
    let ticks = t.timestamp_subsec_nanos() / 100;
    format!("{}.{ticks:07}+00:00", t.format("%Y-%m-%dT%H:%M:%S"))
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
    /// The error (code, message) of the operation that failed it, which a failed VM's instance
    /// view names.
    failure: Option<(String, String)>,
}

impl Res {
    fn new(kind: Kind, body: Value) -> Res {
        Res {
            kind,
            body,
            power: String::new(),
            visible_at: None,
            failure: None,
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
    /// Another client's operation on the resource ([`FakeAzure::hold`]): it changes nothing here.
    Hold,
}

#[derive(Debug, Clone)]
struct Op {
    key: String,
    action: Action,
    /// When it ends, in tokio's time (a test with a paused clock moves it on).
    ends: Instant,
    outcome: Option<Result<(), (String, String)>>,
}

#[derive(Debug, Default)]
struct State {
    groups: BTreeSet<String>,
    res: BTreeMap<String, Res>,
    ops: HashMap<String, Op>,
    page_size: usize,
    /// How long an operation runs.
    operation_time: Duration,
    /// The pause named before the next poll of a running operation (`Retry-After`), if any.
    poll_pause: Option<Duration>,
    skus: Vec<Value>,
    prices: Vec<Value>,
    no_stock: HashMap<(String, String), String>,
    unavailable: BTreeSet<(String, String)>,
    quota: BTreeSet<String>,
    deny: Vec<(String, String)>,
    /// The landing zones' deny of public addresses: its assignment's name.
    deny_public: Option<String>,
    refuse_delete: BTreeSet<String>,
    custom_data: HashMap<String, String>,
    location_only: bool,
    next_ip: u32,
    next_op: u64,
    /// How long a new VM stays invisible to reads.
    visibility_delay: Duration,
    /// An interface's read names the VM that uses it only once reads show that VM.
    late_nic_link: bool,
    /// How long Azure reserves the interface of a VM that failed or was deleted.
    nic_reservation: Duration,
    /// Interfaces reserved: key -> (the VM's id, until).
    reserved: HashMap<String, (String, Instant)>,
    /// Credit balances by (billing account, billing profile): (amount, currency).
    credits: HashMap<(String, String), (f64, String)>,
    /// The caller's role is scoped to the resource groups: subscription-wide lists are refused.
    rg_scoped: bool,
    /// The VM the metadata service answers for has a managed identity.
    managed_identity: bool,
    /// The client ids of the VM's user-assigned identities.
    user_assigned: Vec<String>,
    /// The origin paging links are written with ([`FakeAzure::set_link_origin`]).
    link_origin: Option<String>,
    /// VMs allocated on a hardware cluster that offers only some sizes: VM key -> sizes (lower case).
    clusters: HashMap<String, BTreeSet<String>>,
    /// Resource Manager's throttling, when on ([`FakeAzure::set_throttling`]).
    throttle: Option<Throttle>,
}

/// The fake Azure Resource Manager and Retail Prices APIs, serving on 127.0.0.1 until dropped.
#[derive(Debug)]
pub struct FakeAzure {
    server: Running,
    state: Arc<Mutex<State>>,
}

impl FakeAzure {
    /// Starts the fake with the resource group [`RESOURCE_GROUP`], no networks, every size in stock.
    pub async fn start() -> std::io::Result<FakeAzure> {
        let state = Arc::new(Mutex::new(State {
            groups: BTreeSet::from([RESOURCE_GROUP.to_string()]),
            page_size: 100,
            operation_time: OPERATION_TIME,
            skus: seed_skus(),
            prices: seed_prices(),
            next_ip: 10,
            next_op: 1,
            nic_reservation: NIC_RESERVATION,
            ..State::default()
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

    /// Operations started from now on run for `d` of tokio's time (polled or not), then end:
    /// `InProgress` until then, as Azure's take the seconds the work takes whoever asks. By default
    /// they run for no time: ended by the next request.
    pub fn set_operation_time(&self, d: Duration) {
        self.st().operation_time = d;
    }

    /// The pause named before the next poll (`Retry-After`, whole seconds) in the answer that starts
    /// an operation and in each poll of it while it runs, from now on. By default none is named, as
    /// Azure names none for a VM's operations; `Duration::ZERO` sends `Retry-After: 0`, which names
    /// no pause either (Azure's SDKs poll at their own interval then), as recordings of Azure
    /// sessions made by some SDKs' test recorders show it.
    pub fn set_poll_pause(&self, d: Duration) {
        self.st().poll_pause = Some(d);
    }

    /// No `Retry-After` on operations from now on, as by default.
    pub fn clear_poll_pause(&self) {
        self.st().poll_pause = None;
    }

    /// Resource Manager's throttling from now on (`None`: off, as by default): a full token bucket
    /// per kind of request (reads, writes, deletes) refilled in tokio's time, what is left told on
    /// every answer (`x-ms-ratelimit-remaining-subscription-*`, with the `-global-` variant), and
    /// 429 `TooManyRequests` with `Retry-After` once a bucket is empty. [`ArmLimits::RESOURCE_MANAGER`]
    /// are the published limits.
    pub fn set_throttling(&self, limits: Option<ArmLimits>) {
        self.st().throttle = limits.map(Throttle::new);
    }

    /// How many requests the throttling refused (429 `TooManyRequests`) so far.
    pub fn throttled(&self) -> u64 {
        self.st().throttle.as_ref().map_or(0, |t| t.refused)
    }

    /// Another client's operation holds resource `name` of `type_name`
    /// (`Microsoft.Compute/virtualMachines`, `Microsoft.Network/virtualNetworks`, ...) in `rg` for
    /// `d` of tokio's time: every change of it (`PUT`, `PATCH`, `DELETE`, actions), and the `PUT`
    /// of an interface in a held virtual network, answers 409 `AnotherOperationInProgress` until
    /// then, as Resource Manager refuses a change while an operation on the resource or one it
    /// depends on runs. Reads are answered.
    pub fn hold(&self, rg: &str, type_name: &str, name: &str, d: Duration) {
        let Some(kind) = type_name
            .split_once('/')
            .and_then(|(ns, ty)| Kind::of(ns, ty))
        else {
            panic!("hold: no such resource type {type_name}");
        };
        let key = key(rg, kind, name);
        new_op(&mut self.st(), &key, Action::Hold, d);
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
            subs.retain(|s| !named(s, subnet));
            subs.push(sub);
        }
    }

    /// Adds subnet [`SUBNET`] of [`VNET`] in [`LOCATION`] (virtual network `orca-net-westeurope`
    /// in [`RESOURCE_GROUP`]), with no security group of its own: where [`driver_settings`] puts VMs.
    pub fn add_hosts_subnet(&self) {
        self.add_subnet(
            RESOURCE_GROUP,
            &format!("{VNET}-{LOCATION}"),
            LOCATION,
            SUBNET,
            None,
        );
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
            .get(&key(rg, Kind::Nsg, name))
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
            .get(&key(rg, kind, name))
            .map(|r| r.body.clone())
    }

    /// Creates of `size` in `location` end in a failed operation with `code` (`AllocationFailed`,
    /// `ZonalAllocationFailed`, `OverconstrainedAllocationRequest`), leaving a failed VM, until
    /// [`FakeAzure::restore_stock`].
    pub fn fail_allocation(&self, size: &str, location: &str, code: &str) {
        self.st()
            .no_stock
            .insert(size_at(size, location), code.to_string());
    }

    /// Ends [`FakeAzure::fail_allocation`] and [`FakeAzure::sku_not_available`] for `size` in `location`.
    pub fn restore_stock(&self, size: &str, location: &str) {
        let k = size_at(size, location);
        let mut st = self.st();
        st.no_stock.remove(&k);
        st.unavailable.remove(&k);
    }

    /// `size` is offered in `locations` only: the resource SKUs list it there alone, and a VM `PUT`
    /// of it elsewhere is refused with 409 `SkuNotAvailable` (as Azure offers many sizes in some
    /// regions only).
    pub fn offer_only(&self, size: &str, locations: &[&str]) {
        self.st()
            .skus
            .retain(|s| !vm_sku(s, size) || locations.iter().any(|l| offered_in(s, l)));
    }

    /// A VM `PUT` of `size` in `location` is refused at once with 409 `SkuNotAvailable`.
    pub fn sku_not_available(&self, size: &str, location: &str) {
        self.st().unavailable.insert(size_at(size, location));
    }

    /// A VM `PUT` of `size` is refused with 409 `OperationNotAllowed` naming the family's core quota.
    pub fn exceed_quota(&self, size: &str) {
        self.st().quota.insert(size.to_ascii_lowercase());
    }

    /// Ends [`FakeAzure::exceed_quota`] for `size`.
    pub fn restore_quota(&self, size: &str) {
        self.st().quota.remove(&size.to_ascii_lowercase());
    }

    /// A `PUT` of a resource of `type_name` (`Microsoft.Network/publicIPAddresses`, ...) is refused with
    /// 403 `RequestDisallowedByPolicy` naming the policy assignment `assignment`.
    pub fn deny_policy(&self, type_name: &str, assignment: &str) {
        self.st()
            .deny
            .push((type_name.to_ascii_lowercase(), assignment.to_string()));
    }

    /// Policy assignment `assignment` denies public addresses as the Corp policies of Azure
    /// landing zones do: the `PUT` of a public IP address, and of a network interface any of whose
    /// IP configurations carries one, is refused with 403 `RequestDisallowedByPolicy` naming the
    /// assignment (built-in definitions "Not allowed resource types" and "Network interfaces should
    /// not have public IPs"); an interface without one is made.
    pub fn deny_public_addresses(&self, assignment: &str) {
        self.st().deny_public = Some(assignment.to_string());
    }

    /// Lifts every policy deny.
    pub fn clear_policies(&self) {
        let mut st = self.st();
        st.deny.clear();
        st.deny_public = None;
    }

    /// A `DELETE` of any resource named `name` is refused with 409 `ScopeLocked` (a delete lock),
    /// until [`FakeAzure::allow_delete`]; so is the `DELETE` of a VM that would delete it with itself
    /// (its OS disk, an interface or a public address whose `deleteOption` is `Delete`).
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
        self.st().custom_data.get(&key(rg, Kind::Vm, name)).cloned()
    }

    /// VMs made from now on are invisible to every read (`GET`, lists, instance view) for `delay`,
    /// and changes of them (`PATCH`, `DELETE`, actions, tags) answer 404 `ResourceNotFound` until
    /// then, as an eventually consistent read model would; `Duration::ZERO` turns it off.
    pub fn set_visibility_delay(&self, delay: Duration) {
        self.st().visibility_delay = delay;
    }

    /// An interface's read names the VM that uses it (`properties.virtualMachine`) only once reads
    /// show that VM ([`FakeAzure::set_visibility_delay`]), not from the VM's `PUT` on: Azure
    /// documents no order between the two.
    pub fn link_interfaces_when_visible(&self) {
        self.st().late_nic_link = true;
    }

    /// How long an interface stays reserved for a VM that failed or was deleted without it
    /// (Azure: about 180 s, [`NIC_RESERVATION`]).
    pub fn set_nic_reservation(&self, d: Duration) {
        self.st().nic_reservation = d;
    }

    /// Billing profile `profile` of billing account `account` holds a credit of `amount` in
    /// `currency` (`Microsoft.Consumption/credits/balanceSummary`); other profiles answer 404.
    /// Called again, it replaces the balance (a test lets the credit run low or out).
    pub fn set_credit(&self, account: &str, profile: &str, amount: f64, currency: &str) {
        self.st().credits.insert(
            (account.to_string(), profile.to_string()),
            (amount, currency.to_string()),
        );
    }

    /// The VM the instance metadata service answers for has a managed identity (`on`): its token
    /// endpoint, asked with `Metadata: true`, answers [`TOKEN`] in the endpoint's JSON; without one
    /// it answers 400 "Identity not found".
    pub fn set_managed_identity(&self, on: bool) {
        self.st().managed_identity = on;
    }

    /// Paging links (`nextLink`, Retail Prices' `NextPageLink`) are written with `origin`
    /// (`http://LocalHost:<port>`, no trailing slash) instead of the origin the request was sent
    /// to; `None` goes back to that. Azure writes `https://management.azure.com:443/...` to a client
    /// that called `https://management.azure.com`: the same origin spelled otherwise, which a fake
    /// on a random port cannot reproduce by the port alone. The fake serves whatever reaches it:
    /// pointing links at another origin is how a test sees that a client refuses to follow them.
    pub fn set_link_origin(&self, origin: Option<&str>) {
        self.st().link_origin = origin.map(|o| o.trim_end_matches('/').to_string());
    }

    /// The VM the instance metadata service answers for has these user-assigned identities (their
    /// client ids; called again it replaces them). A token request naming one (`client_id`) gets
    /// its token; naming another, 400 "Identity not found"; naming none, the system-assigned
    /// identity's token ([`FakeAzure::set_managed_identity`]), else the only user-assigned one's,
    /// and with several 400 "Multiple user assigned identities exist, please specify the clientId /
    /// resourceId of the identity in the token request", as the service answers.
    pub fn set_user_assigned_identities(&self, client_ids: &[&str]) {
        self.st().user_assigned = client_ids.iter().map(|c| c.to_string()).collect();
    }

    /// VM `name` of `rg` is allocated on a hardware cluster that offers only `sizes`: while it stays
    /// allocated (running or powered off, not deallocated), `{vm}/vmSizes` lists only those, and a
    /// resize to another size is refused with 409 `OperationNotAllowed` ("not available in the
    /// current hardware cluster"), as Azure refuses it. Deallocating the VM frees it from the
    /// cluster: it may then take any size of its location.
    pub fn limit_cluster(&self, rg: &str, name: &str, sizes: &[&str]) {
        self.st().clusters.insert(
            key(rg, Kind::Vm, name),
            sizes.iter().map(|s| s.to_ascii_lowercase()).collect(),
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

    /// Makes resource `id` (`/subscriptions/{s}/resourceGroups/{rg}/providers/{ns}/{type}/{name}`)
    /// as a client's `PUT` of `body` makes it, through the same checks (references that must
    /// exist, DNS labels, policies, operations in progress), and ends its operation at once: what
    /// a client left behind, put in place without a request (the request log and counts stay as
    /// they were). Answers the resource as stored, or the refusal's status and body.
    pub async fn put_resource(&self, id: &str, body: Value) -> Result<Value, String> {
        let api = if id.to_ascii_lowercase().contains("/microsoft.network/") {
            "2024-05-01"
        } else {
            COMPUTE_API
        };
        let r = Req {
            method: Method::PUT,
            path: id.to_string(),
            query: vec![("api-version".to_string(), api.to_string())],
            headers: HeaderMap::new(),
            body,
            base: self.url(),
            link_base: self.url(),
        };
        let key = id.to_ascii_lowercase();
        let refusal = {
            let mut st = self.st();
            advance(&mut st);
            let rsp = route(&mut st, &r);
            if rsp.status().is_success() {
                let running: Vec<String> = st
                    .ops
                    .iter()
                    .filter(|(_, o)| o.key == key && o.outcome.is_none())
                    .map(|(op, _)| op.clone())
                    .collect();
                for op in running {
                    finish(&mut st, &op);
                }
                return st
                    .res
                    .get(&key)
                    .map(|x| x.body.clone())
                    .ok_or_else(|| format!("{id} was not stored"));
            }
            rsp
        };
        let status = refusal.status();
        let bytes = axum::body::to_bytes(refusal.into_body(), usize::MAX)
            .await
            .unwrap_or_default();
        Err(format!("{status}: {}", String::from_utf8_lossy(&bytes)))
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

    /// Makes the next `PUT` of a VM fail passingly without being served: a 503 (service
    /// unavailable) answered before anything is made.
    pub fn refuse_next_vm_put_unserved(&self) {
        self.control().inject(Rule::new(
            Some(Method::PUT),
            "/providers/Microsoft.Compute/virtualMachines/",
            Fault::Status {
                status: 503,
                body: serde_json::json!({"error": {"code": "ServiceUnavailable", "message": "injected: try later"}}),
                headers: vec![],
            },
            1,
        ));
    }
}

fn eq(a: &str, b: &str) -> bool {
    a.eq_ignore_ascii_case(b)
}

/// Whether `v` (a subnet, a security rule, a SKU) is named `name`, compared without case.
fn named(v: &Value, name: &str) -> bool {
    eq(v["name"].as_str().unwrap_or(""), name)
}

/// The key of a resource in the state: its id in lower case (Azure compares ids without case).
fn key(rg: &str, kind: Kind, name: &str) -> String {
    rid(rg, kind, name).to_ascii_lowercase()
}

/// The key of `size` in `location` in the faults of stock: both in lower case.
fn size_at(size: &str, location: &str) -> (String, String) {
    (size.to_ascii_lowercase(), location.to_ascii_lowercase())
}

/// The location of a resource (`body`), as stored.
fn location_of(body: &Value) -> String {
    body["location"]
        .as_str()
        .unwrap_or("westeurope")
        .to_string()
}

/// Removes `field` from `v` when it is an object.
fn remove_field(v: &mut Value, field: &str) {
    if let Some(o) = v.as_object_mut() {
        o.remove(field);
    }
}

/// The elements of `v` when it is an array; none otherwise.
fn items(v: &Value) -> impl Iterator<Item = &Value> {
    v.as_array().into_iter().flatten()
}

fn rid(rg: &str, kind: Kind, name: &str) -> String {
    format!(
        "/subscriptions/{SUBSCRIPTION}/resourceGroups/{rg}/providers/{}/{name}",
        kind.type_name()
    )
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
        // A PUT is a long-running operation: 201, Azure-AsyncOperation, InProgress while it runs.
        f.set_operation_time(Duration::from_millis(200));
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
                tokio::time::sleep(Duration::from_millis(250)).await;
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

    #[tokio::test(start_paused = true)]
    async fn throttling_tells_what_is_left_and_refuses_with_retry_after_once_a_bucket_is_empty() {
        let (f, rg, http) = lab().await;
        let nic = format!("{rg}/Microsoft.Network/networkInterfaces/n?api-version=2024-05-01");
        // Off by default: no headers, no refusal.
        let r = http.get(&nic).bearer_auth(TOKEN).send().await.unwrap();
        assert!(r
            .headers()
            .get("x-ms-ratelimit-remaining-subscription-reads")
            .is_none());
        f.set_throttling(Some(ArmLimits {
            reads: (2, 1.0),
            writes: (5, 1.0),
            deletes: (5, 1.0),
        }));
        let left = |r: &reqwest::Response, h: &str| {
            r.headers()
                .get(h)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        for expect in ["1", "0"] {
            let r = http.get(&nic).bearer_auth(TOKEN).send().await.unwrap();
            assert_eq!(r.status(), 404, "served (the interface does not exist)");
            let h = "x-ms-ratelimit-remaining-subscription-reads";
            assert_eq!(left(&r, h).as_deref(), Some(expect));
            let global = left(&r, "x-ms-ratelimit-remaining-subscription-global-reads");
            assert!(global.unwrap().parse::<u32>().unwrap() >= 28);
        }
        let r = http.get(&nic).bearer_auth(TOKEN).send().await.unwrap();
        assert_eq!(r.status(), 429);
        assert_eq!(left(&r, "retry-after").as_deref(), Some("1"));
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["error"]["code"], "TooManyRequests");
        assert_eq!(f.throttled(), 1);
        // Writes have their own bucket.
        let (status, _) = send(&http, reqwest::Method::PUT, nic.clone(), Some(nic_body())).await;
        assert_eq!(status, 201);
        // The bucket refills in tokio's time.
        tokio::time::advance(Duration::from_secs(1)).await;
        let r = http.get(&nic).bearer_auth(TOKEN).send().await.unwrap();
        assert_eq!(r.status(), 200);
    }

    /// A fake with one subnet, the resource group's provider URL and an HTTP client.
    async fn lab() -> (FakeAzure, String, reqwest::Client) {
        let f = FakeAzure::start().await.unwrap();
        f.add_subnet(RESOURCE_GROUP, "net-westeurope", "westeurope", "s", None);
        let rg = format!(
            "{}/subscriptions/{SUBSCRIPTION}/resourceGroups/{RESOURCE_GROUP}/providers",
            f.url()
        );
        (f, rg, reqwest::Client::new())
    }

    /// One authorised request: its status and JSON body (`Null` when it has none).
    async fn send(
        http: &reqwest::Client,
        m: reqwest::Method,
        url: String,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut r = http.request(m, url).bearer_auth(TOKEN);
        if let Some(b) = body {
            r = r.json(&b);
        }
        let r = r.send().await.unwrap();
        let status = r.status().as_u16();
        (status, r.json::<Value>().await.unwrap_or(Value::Null))
    }

    /// An interface `n` on the lab's subnet.
    fn nic_body() -> Value {
        json!({"location": "westeurope", "properties": {"ipConfigurations": [{"name": "c",
            "properties": {"subnet": {"id": format!("/subscriptions/{SUBSCRIPTION}/resourceGroups/{RESOURCE_GROUP}/providers/Microsoft.Network/virtualNetworks/net-westeurope/subnets/s")}}}]}})
    }

    /// A VM `v` of Standard_B2s on interface `n`.
    fn vm_body() -> Value {
        json!({"location": "westeurope", "properties": {
            "hardwareProfile": {"vmSize": "Standard_B2s"},
            "storageProfile": {"imageReference": {"publisher": "p", "offer": "o", "sku": "server", "version": "latest"}},
            "osProfile": {"computerName": "v", "adminUsername": "u", "linuxConfiguration": {"disablePasswordAuthentication": true,
                "ssh": {"publicKeys": [{"path": "/home/u/.ssh/authorized_keys", "keyData": "ssh-ed25519 AAAA k"}]}}},
            "networkProfile": {"networkInterfaces": [{"id": format!("/subscriptions/{SUBSCRIPTION}/resourceGroups/{RESOURCE_GROUP}/providers/Microsoft.Network/networkInterfaces/n")}]}}})
    }

    #[tokio::test]
    async fn reproduces_what_a_kind_fake_hid() {
        let (f, rg, http) = lab().await;
        let send = |m, url, body| send(&http, m, url, body);
        // A DNS label gets its FQDN; scoped, with a hash; a second address cannot take it.
        let pip = |label: &str| {
            json!({"location": "westeurope", "properties": {"publicIPAllocationMethod": "Static",
                "dnsSettings": {"domainNameLabel": label, "domainNameLabelScope": "ResourceGroupReuse"}}})
        };
        f.set_operation_time(Duration::from_secs(600));
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
        f.set_operation_time(Duration::ZERO);
        // A new VM has its real creation time and shows to reads only after the delay.
        f.set_visibility_delay(Duration::from_millis(300));
        let nic = nic_body();
        let (st, _) = send(
            Method::PUT,
            format!("{rg}/Microsoft.Network/networkInterfaces/n?api-version=2024-05-01"),
            Some(nic),
        )
        .await;
        assert_eq!(st, 201);
        let mut vm = vm_body();
        vm["tags"] = json!({"a": "1", "b": "2"});
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

    #[tokio::test(start_paused = true)]
    async fn operations_and_holds_last_a_time_of_tokio_not_a_number_of_reads() {
        let (f, rg, http) = lab().await;
        let send = |m, url, body| send(&http, m, url, body);
        let asg =
            format!("{rg}/Microsoft.Network/applicationSecurityGroups/a?api-version=2024-05-01");
        f.set_operation_time(Duration::from_secs(120));
        let r = http
            .put(&asg)
            .bearer_auth(TOKEN)
            .json(&json!({"location": "westeurope"}))
            .send()
            .await
            .unwrap();
        let op = r.headers()["azure-asyncoperation"]
            .to_str()
            .unwrap()
            .to_string();
        for _ in 0..5 {
            assert_eq!(
                send(Method::GET, op.clone(), None).await.1["status"],
                "InProgress"
            );
        }
        tokio::time::advance(Duration::from_secs(121)).await;
        assert_eq!(send(Method::GET, op, None).await.1["status"], "Succeeded");
        // Held by another client's operation: every change answers 409 until it ends; reads do not.
        f.hold(
            RESOURCE_GROUP,
            "Microsoft.Network/applicationSecurityGroups",
            "a",
            Duration::from_secs(60),
        );
        let body = Some(json!({"location": "westeurope"}));
        let (st, b) = send(Method::PUT, asg.clone(), body.clone()).await;
        assert_eq!(
            (st, b["error"]["code"].as_str()),
            (409, Some("AnotherOperationInProgress"))
        );
        assert_eq!(send(Method::DELETE, asg.clone(), None).await.0, 409);
        assert_eq!(send(Method::GET, asg.clone(), None).await.0, 200);
        tokio::time::advance(Duration::from_secs(61)).await;
        f.set_operation_time(Duration::ZERO);
        assert_eq!(send(Method::PUT, asg, body).await.0, 200);
        // An interface cannot be made in a virtual network another operation holds.
        f.hold(
            RESOURCE_GROUP,
            "Microsoft.Network/virtualNetworks",
            "net-westeurope",
            Duration::from_secs(30),
        );
        let nic = format!("{rg}/Microsoft.Network/networkInterfaces/n?api-version=2024-05-01");
        assert_eq!(
            send(Method::PUT, nic.clone(), Some(nic_body())).await.0,
            409
        );
        tokio::time::advance(Duration::from_secs(31)).await;
        assert_eq!(send(Method::PUT, nic, Some(nic_body())).await.0, 201);
    }

    #[tokio::test]
    async fn the_landing_zones_policy_denies_public_addresses_and_interfaces_with_one() {
        let (f, rg, http) = lab().await;
        let send = |m, url, body| send(&http, m, url, body);
        f.deny_public_addresses("deny-public");
        let pip = format!("{rg}/Microsoft.Network/publicIPAddresses/a?api-version=2024-05-01");
        let (st, b) = send(Method::PUT, pip, Some(json!({"location": "westeurope"}))).await;
        assert_eq!(
            (st, b["error"]["code"].as_str()),
            (403, Some("RequestDisallowedByPolicy"))
        );
        let mut with_ip = nic_body();
        with_ip["properties"]["ipConfigurations"][0]["properties"]["publicIPAddress"] =
            json!({"id": "/subscriptions/x/publicIPAddresses/a"});
        let nic = format!("{rg}/Microsoft.Network/networkInterfaces/n?api-version=2024-05-01");
        let (st, b) = send(Method::PUT, nic.clone(), Some(with_ip)).await;
        assert_eq!(
            (st, b["error"]["code"].as_str()),
            (403, Some("RequestDisallowedByPolicy"))
        );
        assert_eq!(
            b["error"]["additionalInfo"][0]["info"]["policyAssignmentName"],
            "deny-public"
        );
        assert_eq!(send(Method::PUT, nic, Some(nic_body())).await.0, 201);
    }

    #[tokio::test]
    async fn an_allocated_vm_resizes_only_within_its_hardware_cluster() {
        let (f, rg, http) = lab().await;
        let send = |m, url, body| send(&http, m, url, body);
        let nic = nic_body();
        let (st, _) = send(
            Method::PUT,
            format!("{rg}/Microsoft.Network/networkInterfaces/n?api-version=2024-05-01"),
            Some(nic),
        )
        .await;
        assert_eq!(st, 201);
        let vm = vm_body();
        let vm_path = format!("{rg}/Microsoft.Compute/virtualMachines/v");
        let api = "api-version=2024-07-01";
        assert_eq!(
            send(Method::PUT, format!("{vm_path}?{api}"), Some(vm))
                .await
                .0,
            201
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
        let sizes = |b: Value| -> Vec<String> {
            b["value"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s["name"].as_str().unwrap().to_string())
                .collect()
        };
        // Unlimited: every x64 and Arm64 size of the location.
        let (st, b) = send(Method::GET, format!("{vm_path}/vmSizes?{api}"), None).await;
        assert_eq!((st, sizes(b).len()), (200, SIZES.len()));
        // On a cluster of B-series only, a running VM cannot take a D size.
        f.limit_cluster(RESOURCE_GROUP, "v", &["Standard_B2s"]);
        let (_, b) = send(Method::GET, format!("{vm_path}/vmSizes?{api}"), None).await;
        assert_eq!(sizes(b), ["Standard_B2s"]);
        let resize = json!({"properties": {"hardwareProfile": {"vmSize": "Standard_D2s_v5"}}});
        let (st, b) = send(
            Method::PATCH,
            format!("{vm_path}?{api}"),
            Some(resize.clone()),
        )
        .await;
        assert_eq!(
            (
                st,
                b["error"]["code"].as_str(),
                b["error"]["target"].as_str()
            ),
            (409, Some("OperationNotAllowed"), Some("vmSize"))
        );
        assert!(b["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not available in the current hardware cluster"));
        // Deallocated, it leaves the cluster and takes any size of the location.
        let (st, _) = send(Method::POST, format!("{vm_path}/deallocate?{api}"), None).await;
        assert_eq!(st, 202);
        tokio::time::sleep(Duration::from_millis(10)).await;
        let (_, b) = send(Method::GET, format!("{vm_path}/vmSizes?{api}"), None).await;
        assert!(sizes(b).contains(&"Standard_D2s_v5".to_string()));
        let (st, b) = send(Method::PATCH, format!("{vm_path}?{api}"), Some(resize)).await;
        assert_eq!(st, 200, "{b}");
        assert_eq!(
            b["properties"]["hardwareProfile"]["vmSize"],
            "Standard_D2s_v5"
        );
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
    fn a_paging_link_keeps_the_query_and_sets_the_skip() {
        let filter = "serviceName eq 'Virtual Machines' and armSkuName eq 'Standard_B2s'";
        let r = Req {
            method: Method::GET,
            path: "/api/retail/prices".into(),
            query: vec![
                ("$filter".into(), filter.into()),
                ("$skip".into(), "100".into()),
            ],
            headers: HeaderMap::new(),
            body: Value::Null,
            base: "http://127.0.0.1:1".into(),
            link_base: "http://127.0.0.1:1".into(),
        };
        let link = r.next_link("$skip", 200);
        let (head, query) = link.split_once('?').unwrap();
        assert_eq!(head, "http://127.0.0.1:1/api/retail/prices");
        assert_eq!(
            crate::control::form_pairs(query.as_bytes()),
            [
                ("$filter".to_string(), filter.to_string()),
                ("$skip".to_string(), "200".to_string())
            ]
        );
        assert_eq!(
            crate::control::form_pairs(b"a+b=%27c"),
            [("a b".to_string(), "'c".to_string())]
        );
    }

    #[test]
    fn fake_uuids_are_version_4_shaped_and_distinct_by_space() {
        let op = fake_uuid(0, 7);
        let vm = fake_uuid(1, 7);
        assert_ne!(op, vm);
        for u in [&op, &vm] {
            let parsed = uuid::Uuid::try_parse(u).unwrap();
            assert_eq!(parsed.get_version_num(), 4, "{u}");
            assert_eq!(parsed.get_variant(), uuid::Variant::RFC4122, "{u}");
        }
        assert_eq!(fake_uuid(0, 7), op, "the same in every run");
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

    /// What a test puts in place goes through the checks a `PUT` goes through, is stored as it
    /// makes it (its operation ended), and costs no request.
    #[tokio::test]
    async fn put_resource_makes_what_a_put_makes_without_a_request() {
        let f = FakeAzure::start().await.unwrap();
        f.add_hosts_subnet();
        let rg = format!("/subscriptions/{SUBSCRIPTION}/resourceGroups/{RESOURCE_GROUP}/providers");
        let subnet =
            format!("{rg}/Microsoft.Network/virtualNetworks/{VNET}-{LOCATION}/subnets/{SUBNET}");
        let pip = format!("{rg}/Microsoft.Network/publicIPAddresses/p-ip");
        let nic_body = |pip: &str| {
            json!({"location": LOCATION, "tags": {"orca": "pool"}, "properties": {"ipConfigurations": [
                {"name": "ipconfig1", "properties": {"subnet": {"id": subnet}, "publicIPAddress": {"id": pip}}}]}})
        };
        let nic = format!("{rg}/Microsoft.Network/networkInterfaces/p-nic");
        let e = f.put_resource(&nic, nic_body(&pip)).await.unwrap_err();
        assert!(e.contains("InvalidResourceReference"), "{e}");
        assert!(f
            .resources(RESOURCE_GROUP)
            .iter()
            .all(|(_, n)| n != "p-nic"));
        let made = f
            .put_resource(
                &pip,
                json!({"location": LOCATION, "properties": {
                "dnsSettings": {"domainNameLabel": "p-label"}}}),
            )
            .await
            .unwrap();
        assert_eq!(made["properties"]["provisioningState"], "Succeeded");
        assert!(made["properties"]["ipAddress"].is_string(), "{made}");
        let made = f.put_resource(&nic, nic_body(&pip)).await.unwrap();
        assert_eq!(made["tags"]["orca"], "pool");
        assert_eq!(made["properties"]["provisioningState"], "Succeeded");
        let held = f
            .resource(
                RESOURCE_GROUP,
                "Microsoft.Network/publicIPAddresses",
                "p-ip",
            )
            .unwrap();
        assert!(
            held["properties"]["ipConfiguration"]["id"].is_string(),
            "{held}"
        );
        assert_eq!(f.control().requests(), 0);
    }
}
