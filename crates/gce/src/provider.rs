//! [`GceProvider`]: the [`Provider`] contract on Compute Engine, in one project, in one zone or
//! across all of them. The extensions (labels on an existing machine, firewall rules) are in
//! `ext.rs`.
//!
//! A machine's id is `<zone>:<name>` (`europe-west1-b:lab-1`): it names the zone, so that `machine`,
//! `delete`, `start`, `stop`, `resize` and label changes go straight to the instance and never need a
//! listing. A bare name is read as an instance of the configured zone ([`Config::zone`]), so ids kept
//! from a single-zone setup keep working.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use orca_machines::kit::{self, lock};
use orca_machines::labels::{ORCA_LABEL, OWNER_LABEL, POOL_LABEL};
use orca_machines::labels::{is_in_pool, is_owned_by, ownership_labels, pool_of};
use orca_machines::{
    Arch, Capabilities, Created, Error, ErrorKind, FirewallRules, Machine, MachineLabels,
    MachineSpec, Page, Provider, Resized, Result, SpecOptions, Status, docker_arch, validate_id,
    validate_owner, validate_pool,
};
use reqwest::Method;
use secrecy::ExposeSecret;
use serde_json::{Value, json};
use tokio::time::Instant;

mod named;

use crate::client::{Client, operation_error, request_id};
use crate::config::{Config, Credentials, MIN_DISK_GB, valid_resource_name, valid_zone};
use crate::config::{UBUNTU_AMD64_FAMILY, UBUNTU_ARM64_FAMILY};
use crate::model::{
    Disk, Instance, InstanceAggregatedList, MachineType, MachineTypeAggregatedList, Operation,
    Warning, last_segment, timestamp,
};

/// The driver kind.
pub(crate) const KIND: &str = "gce";

/// The label a boot disk carries beside the ownership labels: its instance's name. The disk's name
/// is cut for long instance names (see [`boot_disk_stem`]), so this label is what ties a loose disk
/// to the one machine it was made for. An instance name (RFC 1035, at most 63 characters) is a
/// valid label value as it is. It is on the disk only: the instance's labels are its spec's and
/// the ownership labels.
const MACHINE_LABEL: &str = "orca-machine";

/// The organisation policy that requires OS Login, under which an instance's `ssh-keys` cannot work.
const OS_LOGIN_POLICY: &str = "constraints/compute.requireOsLogin";

/// Machines on Compute Engine, in one project, as one owner's. Cheap to clone.
#[derive(Clone)]
pub struct GceProvider {
    inner: Arc<Inner>,
}

struct Inner {
    config: Config,
    client: Client,
    owner: String,
    arch_cache: Mutex<HashMap<String, Arch>>,
    /// The architecture of each image a spec named, as Compute Engine reads it (`None`: it names
    /// none).
    image_archs: Mutex<HashMap<String, Option<Arch>>>,
    /// Ids this provider made lately, which Compute Engine may not show yet: a "not found" for one
    /// of them is read again, within [`Config::visibility_window`] of its making.
    recent: kit::Recent,
    /// Creates stopped before they answered: `delete_named` of such a name reads again within
    /// [`Config::visibility_window`] before it believes "nothing there".
    stopped: kit::StoppedCreates,
}

impl std::fmt::Debug for GceProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GceProvider")
            .field("owner", &self.inner.owner)
            .field("config", &self.inner.config)
            .finish()
    }
}

/// An instance named by a machine id: its zone and its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct InstanceRef {
    pub zone: String,
    pub name: String,
}

impl InstanceRef {
    /// The machine id: `<zone>:<name>`.
    pub fn id(&self) -> String {
        format!("{}:{}", self.zone, self.name)
    }
}

fn status_of(cloud: &str) -> Status {
    match cloud {
        "PROVISIONING" | "STAGING" | "PENDING" => Status::Starting,
        "RUNNING" => Status::Running,
        "STOPPING" | "SUSPENDING" | "PENDING_STOP" | "DEPROVISIONING" => Status::Stopping,
        "TERMINATED" | "SUSPENDED" | "STOPPED" => Status::Stopped,
        _ => Status::Unknown,
    }
}

/// The project id as it appears in internal DNS names: a domain-scoped project
/// (`example.com:my-project`) is written `my-project.example.com`.
fn project_dns(project: &str) -> String {
    match project.split_once(':') {
        Some((domain, id)) => format!("{id}.{domain}"),
        None => project.to_string(),
    }
}

/// A machine as the instance `vm` of `project` reports it.
pub(crate) fn to_machine(vm: &Instance, project: &str) -> Machine {
    let zone = last_segment(&vm.zone);
    let nic = vm.network_interfaces.first();
    let mut m = Machine::new(format!("{zone}:{}", vm.name), &vm.name);
    m.status = status_of(&vm.status);
    m.cloud_status = vm.status.clone();
    m.machine_type = last_segment(&vm.machine_type).to_string();
    m.location = zone.to_string();
    m.address = nic
        .and_then(|n| n.access_configs.first())
        .map(|a| a.nat_ip.clone())
        .unwrap_or_default();
    m.private_address = nic.map(|n| n.network_ip.clone()).unwrap_or_default();
    // A custom hostname is the instance's DNS name; otherwise Compute Engine's zonal internal DNS
    // name (the default of every project made since 2018).
    m.fqdn = if !vm.hostname.is_empty() {
        vm.hostname.clone()
    } else if !zone.is_empty() && !vm.name.is_empty() {
        format!("{}.{zone}.c.{}.internal", vm.name, project_dns(project))
    } else {
        String::new()
    };
    m.pool = pool_of(&vm.labels);
    m.labels = vm.labels.clone();
    m.created_at = timestamp(&vm.creation_timestamp);
    m.started_at = timestamp(&vm.last_start_timestamp);
    m.stopped_at = timestamp(&vm.last_stop_timestamp);
    m.max_run_duration = vm
        .scheduling
        .max_run_duration
        .as_ref()
        .and_then(|d| d.to_std());
    m
}

fn check_instance_name(field: &str, name: &str) -> Result<()> {
    if valid_resource_name(name) {
        Ok(())
    } else {
        Err(Error::invalid(
            field,
            format!(
                "a Compute Engine instance name starts with a letter (a-z), then 0 to 62 of a-z, 0-9 and '-', not ending with '-'; got {name:?}"
            ),
        ))
    }
}

/// The boot disk's name for one create of instance `name`: the name (cut to leave room) and 8
/// random hex digits. Compute Engine attaches an existing disk of the boot disk's name instead of
/// making one, so the name must be this create's alone: a disk left by another tool, or kept from an
/// earlier machine of that name, is never attached. The call's own retries send the same body.
fn boot_disk_name(name: &str) -> String {
    let tail = uuid::Uuid::new_v4().simple().to_string();
    format!("{}-{}", boot_disk_stem(name), &tail[..8])
}

/// The labels of `spec`'s boot disk: the ownership labels of `owner`, and [`MACHINE_LABEL`]
/// naming the instance.
fn boot_disk_labels(spec: &MachineSpec, owner: &str) -> orca_machines::labels::Labels {
    let mut labels = ownership_labels(&spec.pool, owner);
    labels.insert(MACHINE_LABEL.to_string(), spec.name.clone());
    labels
}

/// The longest instance name a boot disk name holds whole (the rest of 63 is `-` and 8 hex digits).
const BOOT_DISK_STEM_MAX: usize = 54;

/// What every boot disk name of instance `name` starts with: the name, cut to
/// [`BOOT_DISK_STEM_MAX`] characters so that the disk name stays within 63, without a trailing `-`.
fn boot_disk_stem(name: &str) -> &str {
    name.get(..BOOT_DISK_STEM_MAX)
        .unwrap_or(name)
        .trim_end_matches('-')
}

/// Whether `disk` is a name [`boot_disk_name`] gives instance `name`'s boot disks. Names over 54
/// characters are cut, so two names that the cut makes equal share these disk names: the disk's
/// [`MACHINE_LABEL`] tells them apart.
fn is_boot_disk_of(disk: &str, name: &str) -> bool {
    disk.strip_prefix(boot_disk_stem(name))
        .and_then(|t| t.strip_prefix('-'))
        .is_some_and(|t| t.len() == 8 && t.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
}

/// An aggregated listing's page, whole only when it read every scope: the scopes it names as
/// unreachable (`unreachables`, or a scope's `UNREACHABLE` warning) make it a retryable error with
/// code `UNREACHABLE`, never a short list.
fn check_reachable<'a>(
    operation: &'static str,
    unreachables: &[String],
    warnings: impl Iterator<Item = (&'a String, Option<&'a Warning>)>,
) -> Result<()> {
    let mut unreachable = unreachables.to_vec();
    unreachable.extend(
        warnings
            .filter(|(_, w)| w.is_some_and(|w| w.code == "UNREACHABLE"))
            .map(|(scope, _)| scope.clone()),
    );
    if unreachable.is_empty() {
        return Ok(());
    }
    Err(Error::transient(format!(
        "the listing could not read {}",
        unreachable.join(", ")
    ))
    .with_code("UNREACHABLE")
    .with_operation(operation))
}

/// The boot disk type for `machine_type`: `hyperdisk-balanced` on the series whose default it is
/// (the reference: "other third-generation machine series like A3, H3, Z3, all fourth-generation
/// types like C4, N4, M4, and newer machine series"), which include the series that take no
/// persistent disk at all (C4, C4A, C4D, N4, M4, ...); `pd-balanced` elsewhere, which every earlier
/// series takes (their own default, `pd-standard`, is the slowest disk).
fn boot_disk_type(machine_type: &str) -> &'static str {
    let series = machine_type.split('-').next().unwrap_or(machine_type);
    let generation = series.chars().find_map(|c| c.to_digit(10)).unwrap_or(0);
    if generation >= 4 || matches!(series, "a3" | "h3" | "z3") {
        "hyperdisk-balanced"
    } else {
        "pd-balanced"
    }
}

/// A create's answer when the instance of its name is being deleted (`waiting`: why the wait for
/// that delete's end failed): [`Error::Busy`], retryable, and the refused insert made nothing.
fn being_deleted(r: &InstanceRef, waiting: Option<Error>) -> Error {
    let why = waiting.map_or_else(String::new, |e| format!(" (waiting for its end: {e})"));
    Error::busy(format!(
        "instance {} is being deleted{why}; nothing was made: create it again once it is gone",
        r.id()
    ))
}

/// Whether `vm` is the incarnation an operation with `target_id` is about (unknown ids: assumed so).
fn same_incarnation(target_id: Option<&str>, vm: &Instance) -> bool {
    target_id.is_none_or(|t| t.is_empty() || vm.id.is_empty() || t == vm.id)
}

impl GceProvider {
    /// A provider for `owner` (empty for none) with `config`. Reads the credentials (a service
    /// account key is parsed here; application default credentials are looked up here), but makes no
    /// Compute Engine call.
    pub async fn new(config: Config, owner: &str) -> Result<GceProvider> {
        validate_owner(owner)?;
        let bad_key = |e: gcp_auth::Error| {
            Error::settings(
                ["credentials"],
                format!("the service account key cannot be used: {e}"),
            )
        };
        let tokens: Arc<dyn gcp_auth::TokenProvider> = match &config.credentials {
            Credentials::ServiceAccountFile(p) => {
                Arc::new(gcp_auth::CustomServiceAccount::from_file(p).map_err(bad_key)?)
            }
            Credentials::ServiceAccountJson(j) => Arc::new(
                gcp_auth::CustomServiceAccount::from_json(j.expose_secret()).map_err(bad_key)?,
            ),
            Credentials::ApplicationDefault => gcp_auth::provider().await.map_err(|e| {
                Error::unauthenticated(format!("no application default credentials: {e}"))
            })?,
            Credentials::Provider(p) => p.clone(),
        };
        let client = Client::new(&config, tokens)?;
        let recent = kit::Recent::new(config.visibility_window);
        let stopped = kit::StoppedCreates::new(config.visibility_window);
        Ok(GceProvider {
            inner: Arc::new(Inner {
                config,
                client,
                owner: owner.to_string(),
                arch_cache: Mutex::new(HashMap::new()),
                image_archs: Mutex::new(HashMap::new()),
                recent,
                stopped,
            }),
        })
    }

    /// The settings.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    pub(crate) fn client(&self) -> &Client {
        &self.inner.client
    }

    pub(crate) fn project(&self) -> &str {
        &self.inner.config.project
    }

    /// The instance a machine id names (`<zone>:<name>`, or a bare name in the configured zone).
    pub(crate) fn parse_id(&self, id: &str) -> Result<InstanceRef> {
        validate_id(id)?;
        let (zone, name) = match (id.split_once(':'), &self.inner.config.zone) {
            (Some((zone, name)), _) if valid_zone(zone) => (zone.to_string(), name),
            (Some(_), _) => {
                return Err(Error::invalid(
                    "id",
                    format!("<zone>:<name> with a zone like europe-west1-b, got {id:?}"),
                ));
            }
            (None, Some(z)) => (z.clone(), id),
            (None, None) => {
                return Err(Error::invalid(
                    "id",
                    format!(
                        "<zone>:<name> (a bare name needs ORCA_GCE_ZONE, which is not set), got {id:?}"
                    ),
                ));
            }
        };
        check_instance_name("id", name)?;
        Ok(InstanceRef {
            zone,
            name: name.to_string(),
        })
    }

    async fn get_instance(&self, r: &InstanceRef) -> Result<Option<Instance>> {
        let path = self
            .client()
            .zonal(&r.zone, &format!("instances/{}", r.name));
        self.client().get_opt("instances.get", &path).await
    }

    /// Reads `r`; a "not found" is read again until [`Config::visibility_window`] after `since` has
    /// passed (the instance may be a fresh one that Compute Engine does not show yet).
    async fn read_fresh(&self, r: &InstanceRef, since: Instant) -> Result<Option<Instance>> {
        let until = since + self.inner.config.visibility_window;
        let retry = &self.client().retry;
        let pause = |n| retry.backoff(n).max(Duration::from_millis(20));
        kit::read_until_seen(until, pause, || async {
            let vm = self.get_instance(r).await?;
            if vm.is_none() {
                tracing::debug!(id = %r.id(), "not found yet");
            }
            Ok(vm)
        })
        .await
    }

    /// Reads `r`, believing "not found" at once unless this provider made it lately.
    async fn read(&self, r: &InstanceRef) -> Result<Option<Instance>> {
        match self.inner.recent.made_at(r.id().as_str()) {
            Some(since) => self.read_fresh(r, since).await,
            None => self.get_instance(r).await,
        }
    }

    /// The instance `id` if this owner made it (any pool): `None` when it is gone,
    /// [`Error::NotOwned`] when it is not this owner's.
    pub(crate) async fn owned(&self, id: &str) -> Result<Option<(InstanceRef, Instance)>> {
        let r = self.parse_id(id)?;
        match self.read(&r).await? {
            None => Ok(None),
            Some(vm) => {
                kit::check_owned(id, &vm.labels, &self.inner.owner)?;
                Ok(Some((r, vm)))
            }
        }
    }

    pub(crate) async fn owned_existing(&self, id: &str) -> Result<(InstanceRef, Instance)> {
        self.owned(id)
            .await?
            .ok_or_else(|| Error::not_found(format!("instance {id}")))
    }

    pub(crate) async fn read_back(&self, r: &InstanceRef) -> Result<Machine> {
        let vm = self
            .read_fresh(r, Instant::now())
            .await?
            .ok_or_else(|| Error::not_found(format!("instance {}", r.id())))?;
        Ok(to_machine(&vm, self.project()))
    }

    /// A change of instance `r` (`start`, `stop`, `setLabels`, ...) under a request id, followed to
    /// its end.
    pub(crate) async fn instance_op(
        &self,
        op_name: &'static str,
        r: &InstanceRef,
        action: &str,
        body: Option<&Value>,
    ) -> Result<Operation> {
        let path = self
            .client()
            .zonal(&r.zone, &format!("instances/{}/{action}", r.name));
        let query = [("requestId", request_id())];
        let op: Operation = self
            .client()
            .call(op_name, Method::POST, &path, &query, body)
            .await?;
        self.client().finish(op, op_name).await
    }

    /// The zone `spec` is made in: its location, which a single-zone provider checks is its zone.
    fn zone_of<'a>(&self, spec: &'a MachineSpec) -> Result<&'a str> {
        let z = spec.location.as_str();
        match &self.inner.config.zone {
            Some(only) if only != z => Err(Error::invalid(
                "location",
                format!("this provider makes machines in zone {only} (ORCA_GCE_ZONE), got {z:?}"),
            )),
            _ if !valid_zone(z) => Err(Error::invalid(
                "location",
                format!("a Compute Engine zone like europe-west1-b, got {z:?}"),
            )),
            _ => Ok(z),
        }
    }

    /// `machine_type`'s architecture, from `machineTypes.get` in `zone`, or in any zone through
    /// `machineTypes.aggregatedList` when no zone is known; cached (a type has one architecture),
    /// by zone too: many series are offered in some zones only, and a zone's answer is known for
    /// that zone alone.
    async fn arch_in(&self, zone: Option<&str>, machine_type: &str) -> Result<Arch> {
        orca_machines::spec::validate_token("machine_type", machine_type)?;
        let key = match zone {
            Some(z) => format!("{z}/{machine_type}"),
            None => machine_type.to_string(),
        };
        if let Some(a) = lock(&self.inner.arch_cache).get(&key) {
            return Ok(a.clone());
        }
        let mt: Option<MachineType> = match zone {
            Some(z) => {
                let path = self
                    .client()
                    .zonal(z, &format!("machineTypes/{machine_type}"));
                self.client().get_opt("machineTypes.get", &path).await?
            }
            None => {
                let filter = format!("name = \"{machine_type}\"");
                let path = self.client().aggregated("machineTypes");
                let found = self
                    .client()
                    .pages(
                        "machineTypes.aggregatedList",
                        &path,
                        &[("filter", filter)],
                        1,
                        |a: MachineTypeAggregatedList| {
                            let items: Vec<MachineType> = a
                                .items
                                .into_values()
                                .flat_map(|s| s.machine_types)
                                .filter(|t| t.name == machine_type)
                                .collect();
                            // One is enough: stop at the first page that has it.
                            let next = if items.is_empty() {
                                a.next_page_token
                            } else {
                                None
                            };
                            Ok(Page { items, next })
                        },
                    )
                    .await?;
                found.into_iter().next()
            }
        };
        let mt = mt.ok_or_else(|| {
            Error::not_found(format!(
                "machine type {machine_type} in {}",
                zone.unwrap_or("any zone of the project")
            ))
        })?;
        // Compute Engine leaves `architecture` unset on some older x86 series; every Arm series sets
        // ARM64.
        let arch = match mt.architecture.as_deref() {
            None | Some("") | Some("ARCHITECTURE_UNSPECIFIED") => Arch::Amd64,
            Some(a) => docker_arch(a),
        };
        // A zone's answer also says that the type exists somewhere (the key without a zone).
        let mut cache = lock(&self.inner.arch_cache);
        if zone.is_some() {
            cache.insert(machine_type.to_string(), arch.clone());
        }
        cache.insert(key, arch.clone());
        Ok(arch)
    }

    /// [`GceProvider::arch_in`] `zone` for a create: a type the zone does not offer while another
    /// zone does is no stock there (as a zone without room), so that a caller moves on to another
    /// offering; a type no zone offers is bad input naming the machine type, and a zone Compute
    /// Engine does not know bad input naming the location.
    async fn arch_to_make(&self, zone: &str, machine_type: &str) -> Result<Arch> {
        match self.arch_in(Some(zone), machine_type).await {
            Err(Error::NotFound { .. }) => match self.arch_in(None, machine_type).await {
                Ok(_) => Err(Error::no_stock(
                    machine_type,
                    zone,
                    format!("machine type {machine_type} is not offered in zone {zone}"),
                )),
                Err(Error::NotFound { .. }) => Err(Error::invalid(
                    "machine_type",
                    format!(
                        "Compute Engine has no machine type {machine_type} in any zone of the project"
                    ),
                )),
                Err(e) => Err(e),
            },
            // A zone Compute Engine does not know is refused as the request's invalid field
            // ("Invalid value for field 'zone': ... Unknown zone."); an unknown type in a known
            // zone is a 404. Another 400 stays what it is.
            Err(e) if e.code() == Some("invalid") && e.to_string().contains("field 'zone'") => {
                Err(Error::invalid(
                    "location",
                    format!("Compute Engine does not take zone {zone}: {e}"),
                ))
            }
            other => other,
        }
    }

    /// The body of the `instances.insert` that makes `spec` in `zone`.
    fn insert_body(
        &self,
        spec: &MachineSpec,
        zone: &str,
        arch: &Arch,
        boot_disk: &str,
    ) -> Result<Value> {
        let cfg = &self.inner.config;
        let region = Config::region_of(zone);
        let subnet = cfg.subnet.for_region(region).ok_or_else(|| {
            Error::invalid(
                "location",
                format!("ORCA_GCE_SUBNET names no subnet for region {region} (of zone {zone})"),
            )
        })?;
        let disk_gb = spec.disk_gb.unwrap_or(cfg.disk_gb);
        if disk_gb < MIN_DISK_GB {
            return Err(Error::invalid(
                "disk_gb",
                format!(
                    "at least {MIN_DISK_GB} GB on Compute Engine (the size of its Ubuntu images), got {disk_gb}"
                ),
            ));
        }
        let image = source_image(spec, arch, &cfg.image_project)?;
        let mut tags = cfg.network_tags.clone();
        for t in &spec.network_tags {
            if !tags.contains(t) {
                tags.push(t.clone());
            }
        }
        let mut labels = spec.labels.clone();
        labels.extend(ownership_labels(&spec.pool, &self.inner.owner));
        let mut nic = json!({
            "network": format!("projects/{}/global/networks/{}", cfg.project, cfg.network),
            "subnetwork": format!("projects/{}/regions/{region}/subnetworks/{subnet}", cfg.project),
        });
        if cfg.public_ip {
            nic["accessConfigs"] = json!([{"type": "ONE_TO_ONE_NAT", "name": "External NAT"}]);
        }
        let mut body = json!({
            "name": spec.name,
            "machineType": format!("zones/{zone}/machineTypes/{}", spec.machine_type),
            "labels": labels,
            "disks": [{
                "boot": true,
                "autoDelete": true,
                "type": "PERSISTENT",
                "initializeParams": {
                    "diskName": boot_disk,
                    "diskType": format!("zones/{zone}/diskTypes/{}", boot_disk_type(&spec.machine_type)),
                    "diskSizeGb": disk_gb.to_string(),
                    "sourceImage": image,
                    "labels": boot_disk_labels(spec, &self.inner.owner),
                },
            }],
            "networkInterfaces": [nic],
        });
        if !tags.is_empty() {
            body["tags"] = json!({ "items": tags });
        }
        let metadata = metadata(spec, &cfg.ssh_user);
        if !metadata.is_empty() {
            body["metadata"] = json!({ "items": metadata });
        }
        if let Some(d) = spec.max_run_duration.or(cfg.max_run_duration) {
            body["scheduling"] = json!({
                "maxRunDuration": {"seconds": d.as_secs().to_string()},
                "instanceTerminationAction": "STOP",
            });
        }
        Ok(body)
    }

    /// After an accepted insert: follows the operation; on failure removes what it made, otherwise
    /// reads the instance (once Compute Engine shows it).
    async fn after_insert(
        &self,
        spec: &MachineSpec,
        r: &InstanceRef,
        boot_disk: &str,
        op: Operation,
    ) -> Result<Created> {
        // The insert was accepted: a wait or read that fails from here on (throttled, say) leaves an
        // instance that is or will be, so its error never says "made nothing".
        let done = self
            .client()
            .wait(op)
            .await
            .map_err(Error::with_may_have_acted)?;
        if let Some(e) = operation_error(&done) {
            let mut e = e.with_operation("instances.insert");
            // The operation ran after the insert was accepted and may have made the instance (and
            // its boot disk) before it failed, whatever the code's kind (a conflict maps to "already
            // exists"): the error never says "made nothing". No room and quota stay as they are,
            // as Compute Engine reaches them before it makes the instance, and a boot disk made
            // before is named in what is left.
            if !matches!(e.kind(), ErrorKind::NoStock | ErrorKind::Quota) {
                e = e.with_may_have_acted();
            }
            let left = self.clean_up(r, boot_disk, done.target_id.as_deref()).await;
            // No stock and quota stay what they are when something is left (callers fall back on
            // them), with what remains named in their message and, for no stock, in its answer.
            return kit::no_stock_of(spec, e.with_leftovers(left));
        }
        match self
            .read_fresh(r, Instant::now())
            .await
            .map_err(Error::with_may_have_acted)?
        {
            Some(vm) if !same_incarnation(done.target_id.as_deref(), &vm) => Err(Error::transient(
                format!("instance {} was made and replaced by another since", r.id()),
            )),
            Some(vm) if is_in_pool(&vm.labels, &spec.pool, &self.inner.owner) => {
                self.inner.recent.note(r.id());
                Ok(Created::Machine(to_machine(&vm, self.project())))
            }
            Some(_) => Err(Error::already_exists(format!(
                "instance {} (not this owner's machine of pool {})",
                r.id(),
                spec.pool
            ))),
            None => Err(Error::transient(format!(
                "instance {} was inserted but is gone again",
                r.id()
            ))),
        }
    }

    /// Refuses the spec's own image, before the insert, when Compute Engine has no image of that
    /// path or when it is of another architecture than the machine type (`arch`): an arm64 type never
    /// boots an amd64 image. The image is read once (`images.get`, or `images.getFromFamily` for a
    /// family); one that names no architecture is taken as it is.
    async fn check_image(&self, image: &str, arch: &Arch, machine_type: &str) -> Result<()> {
        let cached = lock(&self.inner.image_archs).get(image).cloned();
        let image_arch = match cached {
            Some(a) => a,
            None => {
                let path = image_path(image, &self.inner.config.project)?;
                let Some(found) = self.client().get_opt::<Value>("images.get", &path).await? else {
                    return Err(Error::invalid(
                        "image",
                        format!("Compute Engine has no image {image}"),
                    ));
                };
                let a = match found["architecture"].as_str() {
                    None | Some("") | Some("ARCHITECTURE_UNSPECIFIED") => None,
                    Some(a) => Some(docker_arch(a)),
                };
                lock(&self.inner.image_archs).insert(image.to_string(), a.clone());
                a
            }
        };
        match image_arch {
            Some(a) if &a != arch => Err(Error::invalid(
                "image",
                format!("image {image} is for {a}, and machine type {machine_type} is {arch}"),
            )),
            _ => Ok(()),
        }
    }

    /// [`Provider::create`], under the guard that notes it when it is stopped before it answers.
    async fn make(&self, spec: &MachineSpec, unanswered: &kit::CreateGuard<'_>) -> Result<Created> {
        spec.validate()?;
        self.capabilities().check_spec(KIND, spec)?;
        check_instance_name("name", &spec.name)?;
        let zone = self.zone_of(spec)?;
        // Every input check before the first call: the body's own checks need the architecture only
        // for the default image, so they run on a placeholder first.
        let boot_disk = boot_disk_name(&spec.name);
        self.insert_body(spec, zone, &Arch::Amd64, &boot_disk)?;
        let arch = match self.arch_to_make(zone, &spec.machine_type).await {
            Ok(arch) => arch,
            Err(e) => return kit::no_stock_of(spec, e),
        };
        let body = self.insert_body(spec, zone, &arch, &boot_disk)?;
        if let Some(image) = &spec.image {
            self.check_image(image, &arch, &spec.machine_type).await?;
        }
        let r = InstanceRef {
            zone: zone.to_string(),
            name: spec.name.clone(),
        };
        let path = self.client().zonal(zone, "instances");
        // Whether a 409 met an instance being deleted, whose delete was waited out: the insert is
        // sent again, once.
        let mut waited_out_delete = false;
        loop {
            // One request id for this insert: Compute Engine answers a retry carrying it (after a
            // lost answer, say) with the first attempt's operation, never a 409. So a 409 is always
            // another call's instance of that name, whatever this call's earlier attempts met:
            // adopted. An insert sent again after a 409 (which made nothing) takes a new one.
            let rid = [("requestId", request_id())];
            unanswered.sending();
            let answer: Result<Operation> = self
                .client()
                .call("instances.insert", Method::POST, &path, &rid, Some(&body))
                .await;
            return match answer {
                Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                    match self.adopt(spec, &r, e, !waited_out_delete).await? {
                        Some(created) => Ok(created),
                        None => {
                            waited_out_delete = true;
                            continue;
                        }
                    }
                }
                other => self.answer_insert(spec, &r, &boot_disk, other).await,
            };
        }
    }

    /// What an insert's answer other than a 409 comes to.
    async fn answer_insert(
        &self,
        spec: &MachineSpec,
        r: &InstanceRef,
        boot_disk: &str,
        answer: Result<Operation>,
    ) -> Result<Created> {
        match answer {
            Ok(op) => self.after_insert(spec, r, boot_disk, op).await,
            Err(e @ Error::NoStock { .. }) => kit::no_stock_of(spec, e),
            Err(e @ Error::PermissionDenied { .. })
                if !spec.ssh_keys.is_empty() && e.to_string().contains(OS_LOGIN_POLICY) =>
            {
                Err(e.prefixed(&format!(
                    "ssh_keys need OS Login off for the machine (metadata enable-oslogin=FALSE), which the organisation policy {OS_LOGIN_POLICY} forbids; with OS Login, grant the users roles/compute.osLogin and leave ssh_keys empty"
                )))
            }
            Err(e) => Err(e),
        }
    }

    /// A 409 on insert: an instance of that name exists, made by an earlier create (this call's own
    /// attempts are de-duplicated by their request id and never meet a 409). It is adopted
    /// ([`Created::Adopted`]) when it is this owner's, of this pool and type, unless it is being
    /// deleted (a delete stopped mid-way, or another caller's, whatever status the instance still
    /// reads): that instance is gone in a moment,
    /// so its delete is waited out (when `may_wait`) and `None` answered, for the insert to go
    /// again; else [`Error::Busy`], which made nothing.
    async fn adopt(
        &self,
        spec: &MachineSpec,
        r: &InstanceRef,
        conflict: Error,
        may_wait: bool,
    ) -> Result<Option<Created>> {
        // The boot disk's name is this create's own, so the conflict is the instance: one that does
        // not read back yet may be a fresh one.
        let vm = match self.get_instance(r).await? {
            Some(vm) => Some(vm),
            None => self.read_fresh(r, Instant::now()).await?,
        };
        match vm {
            Some(vm)
                if is_in_pool(&vm.labels, &spec.pool, &self.inner.owner)
                    && last_segment(&vm.machine_type) == spec.machine_type =>
            {
                let ops = self.operations_of(r, &vm).await?;
                let delete = ops
                    .iter()
                    .find(|op| op.operation_type == "delete" && !op.is_done());
                if let Some(delete) = delete.cloned() {
                    if !may_wait {
                        return Err(being_deleted(r, None));
                    }
                    tracing::debug!(id = %r.id(), "waiting out the delete of the instance of that name");
                    self.client()
                        .wait(delete)
                        .await
                        .map_err(|e| being_deleted(r, Some(e)))?;
                    return Ok(None);
                }
                // The insert that makes the instance, under way or failed: followed to its end as
                // its own create would, so that an instance whose insert fails goes with its boot
                // disk and is never handed back as a machine.
                let insert = ops.iter().find(|op| {
                    op.operation_type == "insert"
                        && (!op.is_done() || operation_error(op).is_some())
                });
                if let Some(insert) = insert.cloned() {
                    return self.adopt_insert(spec, r, &vm, insert).await.map(Some);
                }
                tracing::debug!(id = %r.id(), "adopted the instance an earlier create made");
                self.inner.recent.note(r.id());
                Ok(Some(Created::Adopted(to_machine(&vm, self.project()))))
            }
            Some(_) => Err(conflict),
            None => Err(Error::transient(format!(
                "instance {} existed and is gone",
                r.id()
            ))),
        }
    }

    /// The operations of instance `vm` (named by `r`) in its zone's list: those of this incarnation
    /// (`targetId`). Its status cannot tell what is under way: a delete's operation may wait
    /// `PENDING` for seconds while the instance still reads `RUNNING`, one of an instance still
    /// `PROVISIONING` may be accepted, and once running it shows `STOPPING`, as a stop does; an
    /// insert that will fail shows `PROVISIONING` as one that will not. So every instance a 409
    /// would adopt costs this one listing (a 409 is rare: another create's instance of the name).
    async fn operations_of(&self, r: &InstanceRef, vm: &Instance) -> Result<Vec<Operation>> {
        // The id goes into a filter: an id that is not Compute Engine's digits is never sent.
        if vm.id.is_empty() || !vm.id.bytes().all(|b| b.is_ascii_digit()) {
            return Ok(Vec::new());
        }
        let filter = format!("(targetId = \"{}\")", vm.id);
        let path = self.client().zonal(&r.zone, "operations");
        self.client()
            .list_all(
                "zoneOperations.list",
                &path,
                &[("filter", filter)],
                self.inner.config.page_size,
            )
            .await
    }

    /// The answer to a create that met instance `vm` (named by `r`) of an earlier create whose
    /// insert `op` is under way or failed: the insert's end, as [`GceProvider::after_insert`] reads
    /// it for its own create (no stock or the error, with the instance and its boot disk removed;
    /// or the machine), the machine answered as adopted.
    async fn adopt_insert(
        &self,
        spec: &MachineSpec,
        r: &InstanceRef,
        vm: &Instance,
        op: Operation,
    ) -> Result<Created> {
        tracing::debug!(id = %r.id(), "following the insert of the instance an earlier create made");
        let boot_disk = vm
            .disks
            .iter()
            .find(|d| d.boot)
            .map(|d| last_segment(&d.source).to_string());
        let Some(boot_disk) = boot_disk else {
            return Err(Error::transient(format!(
                "instance {} is being made by an earlier create and shows no boot disk yet",
                r.id()
            ))
            .with_may_have_acted());
        };
        match self.after_insert(spec, r, &boot_disk, op).await? {
            Created::Machine(m) => Ok(Created::Adopted(m)),
            other => Ok(other),
        }
    }

    /// Removes what a failed insert left (the instance and its boot disk, when they carry this owner's
    /// labels); answers what could not be removed. `target_id` is the incarnation the failed insert
    /// was about: an instance of that name with another id is not touched.
    async fn clean_up(
        &self,
        r: &InstanceRef,
        boot_disk: &str,
        target_id: Option<&str>,
    ) -> Vec<String> {
        let mut left = Vec::new();
        let mut read = self.get_instance(r).await;
        let mut disk = None;
        // Whether the instance was looked for again because it may stand though no read shows it:
        // Compute Engine shows a new instance late, and only its boot disk tells that it exists.
        let mut looked_again = false;
        if let Ok(None) = read {
            match self.disk(&r.zone, boot_disk).await {
                Ok(Some(d)) if d.users.is_empty() => disk = Some(d),
                Ok(None) => {}
                // Attached (the instance exists and is not shown yet), or unreadable (the disk
                // cannot tell): read the instance again rather than leave it behind.
                attached_or_unknown => {
                    if let Err(e) = attached_or_unknown {
                        tracing::warn!(id = %r.id(), error = %e, "could not read a failed create's disk");
                    }
                    read = self.read_fresh(r, Instant::now()).await;
                    looked_again = true;
                }
            }
        }
        let mut unseen = None;
        match read {
            Ok(Some(vm))
                if is_owned_by(&vm.labels, &self.inner.owner)
                    && same_incarnation(target_id, &vm) =>
            {
                if let Err(e) = self.delete_instance(r).await {
                    tracing::warn!(id = %r.id(), error = %e, "could not remove a failed create's instance");
                    left.push(format!("instance {}", r.id()));
                }
            }
            // Another owner's instance, or another incarnation of the name: not this create's.
            Ok(Some(_)) => {}
            // Still not shown: whether it stands is for the boot disk to tell (below).
            Ok(None) if looked_again => unseen = Some(r),
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(id = %r.id(), error = %e, "could not read a failed create's instance");
                left.push(format!("instance {} (unknown)", r.id()));
            }
        }
        left.extend(self.clean_up_disk(&r.zone, boot_disk, disk, unseen).await);
        left
    }

    /// Removes a failed create's boot disk `name` of `zone` when it carries this owner's labels and
    /// no instance holds it; `known` is the disk as read a moment ago (else it is read here). Answers
    /// what stands: the disk when it is held or could not be read or removed, and `unseen` (the
    /// create's instance, which no read showed) when the disk says it may stand.
    async fn clean_up_disk(
        &self,
        zone: &str,
        name: &str,
        known: Option<Disk>,
        unseen: Option<&InstanceRef>,
    ) -> Vec<String> {
        let read = match known {
            Some(d) => Ok(Some(d)),
            None => self.disk(zone, name).await,
        };
        let mut left = Vec::new();
        match read {
            // Gone, or free: no instance holds it, so none of this create's stands unseen.
            Ok(None) => {}
            Ok(Some(d)) if d.users.is_empty() => {
                if let Err(e) = self.delete_disk_if_ours(zone, name, Some(d)).await {
                    tracing::warn!(zone, disk = name, error = %e, "could not remove a failed create's disk");
                    left.push(format!("disk {zone}:{name}"));
                }
            }
            // Held: by the instance no read showed, or by the one that could not be removed.
            Ok(Some(d)) => {
                if let Some(r) = unseen {
                    left.push(format!("instance {} (not shown yet)", r.id()));
                }
                if is_owned_by(&d.labels, &self.inner.owner) {
                    left.push(format!("disk {zone}:{name} (in use)"));
                }
            }
            Err(e) => {
                tracing::warn!(zone, disk = name, error = %e, "could not read a failed create's disk");
                if let Some(r) = unseen {
                    left.push(format!("instance {} (unknown)", r.id()));
                }
                left.push(format!("disk {zone}:{name} (unknown)"));
            }
        }
        left
    }

    async fn disk(&self, zone: &str, name: &str) -> Result<Option<Disk>> {
        let path = self.client().zonal(zone, &format!("disks/{name}"));
        self.client().get_opt("disks.get", &path).await
    }

    /// Deletes disk `disk` of `zone` when it carries this owner's labels and no instance uses it;
    /// `known` is the disk as read a moment ago (else it is read here).
    async fn delete_disk_if_ours(&self, zone: &str, disk: &str, known: Option<Disk>) -> Result<()> {
        let d = match known {
            Some(d) => Some(d),
            None => self.disk(zone, disk).await?,
        };
        if d.is_some_and(|d| is_owned_by(&d.labels, &self.inner.owner) && d.users.is_empty()) {
            let path = self.client().zonal(zone, &format!("disks/{disk}"));
            self.delete_path("disks.delete", &path).await?;
        }
        Ok(())
    }

    /// Removes the disks of instance `r` (deleted now; `vm` as read before) that outlived it
    /// because their `autoDelete` was turned off, when they are this owner's. The instance is gone,
    /// so a later `delete(id)` finds nothing to go by: a disk that could not be removed is named
    /// in [`Error::Leftovers`] (as a failed create's clean-up names it), for the caller to know that
    /// `delete_named` of the name has it to remove.
    async fn remove_kept_disks(&self, r: &InstanceRef, vm: &Instance) -> Result<()> {
        let mut failed = None;
        let mut left = Vec::new();
        let kept = vm
            .disks
            .iter()
            .filter(|d| !d.auto_delete && !d.source.is_empty());
        for name in kept.map(|d| last_segment(&d.source)) {
            let zone = &r.zone;
            let removed = match self.disk(zone, name).await {
                Ok(Some(d)) => self.delete_disk_if_ours(zone, name, Some(d)).await,
                Ok(None) => Ok(()),
                Err(e) => {
                    // Whether it stands, and whose it is, could not be checked.
                    left.push(format!("disk {zone}:{name} (unknown)"));
                    failed.get_or_insert(e);
                    continue;
                }
            };
            if let Err(e) = removed {
                tracing::warn!(zone = %zone, disk = name, error = %e, "could not remove a deleted machine's kept disk");
                left.push(format!("disk {zone}:{name}"));
                failed.get_or_insert(e);
            }
        }
        match failed {
            Some(e) => Err(Error::leftovers(e, left)),
            None => Ok(()),
        }
    }

    /// Deletes instance `r` and follows the operation; gone is success.
    async fn delete_instance(&self, r: &InstanceRef) -> Result<()> {
        let path = self
            .client()
            .zonal(&r.zone, &format!("instances/{}", r.name));
        self.delete_path("instances.delete", &path).await
    }

    /// `DELETE` of `path` under a request id, the operation followed to its end; gone (before or
    /// after) is success.
    async fn delete_path(&self, op_name: &'static str, path: &str) -> Result<()> {
        let query = [("requestId", request_id())];
        let op: Operation = match self
            .client()
            .call(op_name, Method::DELETE, path, &query, None)
            .await
        {
            Ok(op) => op,
            Err(Error::NotFound { .. }) => return Ok(()),
            Err(e) => return Err(e),
        };
        let done = match self.client().wait(op).await {
            Ok(done) => done,
            // The operation itself could not be read (a 404 of `operations.wait`): that says
            // nothing of the resource, which is followed until it is gone.
            Err(Error::NotFound { .. }) => return self.until_gone(op_name, path).await,
            Err(e) => return Err(e),
        };
        match operation_error(&done) {
            // The delete found the resource gone already.
            None | Some(Error::NotFound { .. }) => Ok(()),
            Some(e) => Err(e.with_operation(op_name)),
        }
    }

    /// Reads the resource at `path`, whose delete (`op_name`) was accepted, until it is gone,
    /// within `operation_timeout`.
    async fn until_gone(&self, op_name: &'static str, path: &str) -> Result<()> {
        let cfg = &self.inner.config;
        let what = format!("{op_name} of {path}");
        kit::poll_with(&what, cfg.operation_timeout, || async {
            let read: Option<Value> = self.client().get_opt(op_name, path).await?;
            Ok(match read {
                None => kit::Polled::Done(()),
                Some(_) => kit::Polled::Again(cfg.poll_interval),
            })
        })
        .await
    }

    /// The listing filter of `pool`'s machines of this owner. The filter grammar has no documented
    /// negation, so for the empty owner it holds the two pool labels, and the caller drops owned
    /// machines.
    fn pool_filter(&self, pool: &str) -> String {
        let owner = &self.inner.owner;
        let mut filter =
            format!("(labels.{ORCA_LABEL} = \"pool\") (labels.{POOL_LABEL} = \"{pool}\")");
        if !owner.is_empty() {
            filter.push_str(&format!(" (labels.{OWNER_LABEL} = \"{owner}\")"));
        }
        filter
    }

    /// Every instance of the project matching `filter`: one zone's `instances.list`, or every zone's
    /// in one paged `instances.aggregatedList`. A listing that could not read every zone is an error,
    /// never a short answer.
    async fn list_instances(&self, filter: String) -> Result<Vec<Instance>> {
        let page_size = self.inner.config.page_size;
        let query = [("filter", filter)];
        match &self.inner.config.zone {
            Some(z) => {
                let path = self.client().zonal(z, "instances");
                self.client()
                    .list_all("instances.list", &path, &query, page_size)
                    .await
            }
            None => {
                let path = self.client().aggregated("instances");
                self.client()
                    .pages(
                        "instances.aggregatedList",
                        &path,
                        &query,
                        page_size,
                        |a: InstanceAggregatedList| {
                            let scopes = a.items.iter().map(|(k, s)| (k, s.warning.as_ref()));
                            check_reachable("instances.aggregatedList", &a.unreachables, scopes)?;
                            Ok(Page {
                                items: a.items.into_values().flat_map(|s| s.instances).collect(),
                                next: a.next_page_token,
                            })
                        },
                    )
                    .await
            }
        }
    }
}

/// The API path of a spec's image (`projects/P/global/images/NAME`, `.../images/family/F`, either
/// as a full URL, or `global/images/...` of the machines' own project), each segment a resource
/// name: it goes into the request's URL.
fn image_path(image: &str, project: &str) -> Result<String> {
    let full_url = image.starts_with("https://") || image.starts_with("http://");
    let path = match image.find("projects/") {
        Some(0) => image.to_string(),
        Some(at) if full_url => image[at..].to_string(),
        _ => format!("projects/{project}/{image}"),
    };
    let segments: Vec<&str> = path.split('/').collect();
    let shaped = match segments.as_slice() {
        ["projects", p, "global", "images", name] => vec![*p, *name],
        ["projects", p, "global", "images", "family", f] => vec![*p, *f],
        _ => Vec::new(),
    };
    let names_ok = !shaped.is_empty()
        && shaped.iter().all(|s| {
            s.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'))
        });
    if !names_ok {
        return Err(Error::invalid(
            "image",
            format!(
                "an image path (projects/P/global/images/NAME or .../images/family/F), got {image:?}"
            ),
        ));
    }
    Ok(path)
}

/// The boot disk's source image of `spec` for machines of `arch`: the spec's own, else the Ubuntu
/// family of `arch` in `image_project`.
fn source_image(spec: &MachineSpec, arch: &Arch, image_project: &str) -> Result<String> {
    match (&spec.image, arch) {
        (Some(i), _) => {
            if i.contains(['?', '#']) {
                return Err(Error::invalid(
                    "image",
                    format!(
                        "an image path (projects/P/global/images/NAME or .../images/family/F), got {i:?}"
                    ),
                ));
            }
            Ok(i.clone())
        }
        (None, Arch::Amd64) => Ok(format!(
            "projects/{image_project}/global/images/family/{UBUNTU_AMD64_FAMILY}"
        )),
        (None, Arch::Arm64) => Ok(format!(
            "projects/{image_project}/global/images/family/{UBUNTU_ARM64_FAMILY}"
        )),
        (None, Arch::Other(a)) => Err(Error::invalid(
            "machine_type",
            format!(
                "{} has architecture {a}, for which there is no Ubuntu image",
                spec.machine_type
            ),
        )),
    }
}

/// The metadata items of `spec`: its user data, and its SSH keys given to `ssh_user`.
fn metadata(spec: &MachineSpec, ssh_user: &str) -> Vec<Value> {
    let mut metadata = Vec::new();
    if !spec.user_data.is_empty() {
        metadata.push(json!({"key": "user-data", "value": spec.user_data}));
    }
    if !spec.ssh_keys.is_empty() {
        let lines: Vec<String> = spec
            .ssh_keys
            .iter()
            .map(|k| format!("{ssh_user}:{}", k.trim()))
            .collect();
        metadata.push(json!({"key": "ssh-keys", "value": lines.join("\n")}));
        // OS Login (turned on for the project or by an organisation policy) ignores `ssh-keys`:
        // the keys work only with it off for this instance.
        metadata.push(json!({"key": "enable-oslogin", "value": "FALSE"}));
    }
    metadata
}

#[async_trait]
impl Provider for GceProvider {
    fn kind(&self) -> &str {
        KIND
    }

    fn owner(&self) -> &str {
        &self.inner.owner
    }

    fn capabilities(&self) -> Capabilities {
        let options = [
            "labels",
            "disk_gb",
            "ssh_keys",
            "network_tags",
            "max_run_duration",
            "image",
        ]
        .into_iter()
        .fold(SpecOptions::NONE, |o, n| o.with(n, true));
        Capabilities::NONE
            .with_start_stop(true)
            .with_resize(true)
            .with_power_times(true)
            .with_private_address(true)
            .with_options(options)
    }

    async fn arch(&self, machine_type: &str) -> Result<Arch> {
        let zone = self.inner.config.zone.clone();
        self.arch_in(zone.as_deref(), machine_type).await
    }

    async fn create(&self, spec: &MachineSpec) -> Result<Created> {
        // A create dropped once Compute Engine accepted its insert leaves an instance that reads may
        // not show yet: its name is noted, so that `delete_named` of it looks again.
        let unanswered = self.inner.stopped.start(&spec.pool, &spec.name);
        let answer = self.make(spec, &unanswered).await;
        unanswered.answered();
        answer
    }

    async fn machines(&self, pool: &str) -> Result<Vec<Machine>> {
        validate_pool(pool)?;
        let owner = &self.inner.owner;
        Ok(self
            .list_instances(self.pool_filter(pool))
            .await?
            .iter()
            .filter(|vm| is_in_pool(&vm.labels, pool, owner))
            .map(|vm| to_machine(vm, self.project()))
            .collect())
    }

    /// One listing filtered on the pool's labels and the name: one request (in every zone, the
    /// aggregated listing; a name is unique in its zone only, so the first made wins).
    async fn machine_named(&self, pool: &str, name: &str) -> Result<Option<Machine>> {
        validate_pool(pool)?;
        orca_machines::validate_name(name)?;
        if !valid_resource_name(name) {
            // No instance can carry it.
            return Ok(None);
        }
        let found = self
            .instances_named(pool, name)
            .await?
            .iter()
            .map(|vm| to_machine(vm, self.project()))
            .collect::<Vec<_>>();
        Ok(orca_machines::provider::first_made(found))
    }

    async fn machine(&self, id: &str) -> Result<Option<Machine>> {
        Ok(self
            .owned(id)
            .await?
            .map(|(_, vm)| to_machine(&vm, self.project())))
    }

    async fn delete(&self, id: &str) -> Result<bool> {
        let Some((r, vm)) = self.owned(id).await? else {
            return Ok(true);
        };
        self.delete_instance(&r).await?;
        self.inner.recent.forget(r.id().as_str());
        self.remove_kept_disks(&r, &vm).await?;
        Ok(true)
    }

    /// This owner's instances of `name` in `pool` (one listing, as `machine_named`), then the boot
    /// disks of that name with this owner's and this pool's labels and `orca-machine` naming
    /// `name` that no instance holds (one listing of disks filtered on the labels, across every
    /// zone in one aggregated read).
    async fn delete_named(&self, pool: &str, name: &str) -> Result<bool> {
        self.remove_named(pool, name).await
    }

    async fn start(&self, id: &str) -> Result<Machine> {
        let (r, vm) = self.owned_existing(id).await?;
        self.instance_op("instances.start", &r, "start", None)
            .await
            .map_err(|e| e.with_placement(last_segment(&vm.machine_type), &r.zone))?;
        self.read_back(&r).await
    }

    async fn stop(&self, id: &str) -> Result<Machine> {
        let (r, _) = self.owned_existing(id).await?;
        self.instance_op("instances.stop", &r, "stop", None).await?;
        self.read_back(&r).await
    }

    async fn resize(&self, id: &str, machine_type: &str) -> Result<Resized> {
        orca_machines::spec::validate_token("machine_type", machine_type)?;
        let (r, vm) = self.owned_existing(id).await?;
        let current = last_segment(&vm.machine_type).to_string();
        if current == machine_type {
            return Ok(Resized::new(to_machine(&vm, self.project()), false));
        }
        let (from, to) = (
            self.arch_in(Some(&r.zone), &current).await?,
            self.arch_in(Some(&r.zone), machine_type).await?,
        );
        if from != to {
            return Err(Error::invalid(
                "machine_type",
                format!("{machine_type} is {to} but {id} runs an image for {from}"),
            ));
        }
        // setMachineType needs a stopped instance: stop it first, and start it again after.
        let was_up = !matches!(status_of(&vm.status), Status::Stopped);
        if was_up {
            self.instance_op("instances.stop", &r, "stop", None).await?;
        }
        let set_type = |t: &str| {
            let body = json!({"machineType": format!("zones/{}/machineTypes/{t}", r.zone)});
            let r = &r;
            async move {
                self.instance_op("instances.setMachineType", r, "setMachineType", Some(&body))
                    .await
            }
        };
        let changed = set_type(machine_type)
            .await
            .map_err(|e| e.with_placement(machine_type, &r.zone));
        if was_up {
            // Start again even when the change failed, so a failed resize leaves the machine as it was.
            let started = self.instance_op("instances.start", &r, "start", None).await;
            match (changed, started) {
                (Ok(_), Err(e @ (Error::NoStock { .. } | Error::Quota { .. }))) => {
                    // No room for the new type, or its CPUs past the region's quota (a start counts
                    // them again): back to the type it had, running again, rather than stopped on
                    // a type it cannot start.
                    let e = e.with_placement(machine_type, &r.zone);
                    let back = match set_type(&current).await {
                        Ok(_) => self.instance_op("instances.start", &r, "start", None).await,
                        Err(again) => Err(again),
                    };
                    if let Err(again) = back {
                        return Err(Error::other(format!(
                            "resize of {id} to {machine_type}: refused ({e}); going back to \
                             {current} failed, the machine is stopped: {again}"
                        )));
                    }
                    return Err(e);
                }
                (changed, started) => {
                    changed?;
                    started.map_err(|e| e.with_placement(&current, &r.zone))?;
                }
            }
        } else {
            changed?;
        }
        Ok(Resized::new(self.read_back(&r).await?, was_up))
    }

    fn machine_labels(&self) -> Option<&dyn MachineLabels> {
        Some(self)
    }

    fn firewall_rules(&self) -> Option<&dyn FirewallRules> {
        Some(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses() {
        for (c, s) in [
            ("PROVISIONING", Status::Starting),
            ("STAGING", Status::Starting),
            ("RUNNING", Status::Running),
            ("STOPPING", Status::Stopping),
            ("SUSPENDING", Status::Stopping),
            ("TERMINATED", Status::Stopped),
            ("SUSPENDED", Status::Stopped),
            ("REPAIRING", Status::Unknown),
            ("HIBERNATING", Status::Unknown),
        ] {
            assert_eq!(status_of(c), s, "{c}");
        }
    }

    #[test]
    fn boot_disks_have_names_of_their_own_that_compute_engine_takes() {
        let a = boot_disk_name("lab-1");
        assert!(a.starts_with("lab-1-") && a.len() == 14, "{a}");
        assert!(a[6..].bytes().all(|b| b.is_ascii_hexdigit()), "{a}");
        assert_ne!(a, boot_disk_name("lab-1"));
        // A name cut where it had a hyphen does not end in two.
        let long = format!("{}-{}", "a".repeat(53), "b".repeat(9));
        let d = boot_disk_name(&long);
        assert!(valid_resource_name(&d) && d.len() == 62, "{d}");
        assert!(valid_resource_name(&boot_disk_name(&"c".repeat(63))));
    }

    #[test]
    fn boot_disk_types_by_series() {
        for (t, want) in [
            ("c4-standard-8", "hyperdisk-balanced"),
            ("c4a-standard-1", "hyperdisk-balanced"),
            ("c4d-highmem-2", "hyperdisk-balanced"),
            ("n4-custom-4-8192", "hyperdisk-balanced"),
            ("m4-megamem-56", "hyperdisk-balanced"),
            ("h3-standard-88", "hyperdisk-balanced"),
            ("c3-standard-4", "pd-balanced"),
            ("c3d-standard-4", "pd-balanced"),
            ("e2-small", "pd-balanced"),
            ("n2d-standard-2", "pd-balanced"),
            ("t2a-standard-1", "pd-balanced"),
            ("n1-standard-1", "pd-balanced"),
        ] {
            assert_eq!(boot_disk_type(t), want, "{t}");
        }
    }

    #[test]
    fn internal_dns_names() {
        assert_eq!(project_dns("my-proj"), "my-proj");
        assert_eq!(project_dns("example.com:my-proj"), "my-proj.example.com");
    }
}
