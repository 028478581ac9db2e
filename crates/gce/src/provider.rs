//! [`GceProvider`]: the [`Provider`] contract on Compute Engine, plus what shed needs beyond it
//! ([`GceProvider::create_with`], [`GceProvider::set_labels`], [`GceProvider::machine`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use orca_machines::labels::{is_in_pool, is_owned_by, ownership_labels, pool_of, Labels};
use orca_machines::labels::{ORCA_LABEL, OWNER_LABEL, POOL_LABEL};
use orca_machines::{
    docker_arch, validate_id, validate_owner, validate_pool, Arch, Capabilities, Created, Error,
    Machine, MachineSpec, Provider, Resized, Result, Status,
};
use reqwest::Method;
use secrecy::ExposeSecret;
use serde_json::{json, Value};

use crate::client::{operation_error, random_uuid, request_uuid, sha256_hex, Client};
use crate::config::{valid_resource_name, Config, Credentials};
use crate::config::{UBUNTU_AMD64_FAMILY, UBUNTU_ARM64_FAMILY};
use crate::model::{last_segment, Disk, Instance, MachineType, Operation};

/// What a create may set beyond the [`MachineSpec`]; `None` fields take the provider's settings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CreateOptions {
    /// Network tags (firewall targets); `None`: [`Config::network_tags`].
    pub network_tags: Option<Vec<String>>,
    /// The longest the machine runs before Compute Engine stops it; `None`:
    /// [`Config::max_run_duration`].
    pub max_run_duration: Option<Duration>,
    /// The boot disk size in GB; `None`: [`Config::disk_gb`].
    pub disk_gb: Option<u32>,
    /// The boot image (`projects/P/global/images/NAME`, `.../images/family/F` or a full URL); `None`:
    /// Ubuntu 24.04 LTS of the machine type's architecture.
    pub image: Option<String>,
    /// More labels, set in the insert itself (shed's `creating`); orca's own keys are refused.
    pub labels: Labels,
}

/// Machines on Compute Engine, in one project and zone, as one owner's. Cheap to clone.
#[derive(Clone)]
pub struct GceProvider {
    inner: Arc<Inner>,
}

struct Inner {
    config: Config,
    client: Client,
    owner: String,
    arch_cache: Mutex<HashMap<String, Arch>>,
}

impl std::fmt::Debug for GceProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GceProvider")
            .field("owner", &self.inner.owner)
            .field("config", &self.inner.config)
            .finish()
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

fn to_machine(vm: &Instance) -> Machine {
    let address = vm
        .network_interfaces
        .first()
        .and_then(|n| n.access_configs.first())
        .map(|a| a.nat_ip.clone())
        .unwrap_or_default();
    let mut m = Machine::new(&vm.name, &vm.name);
    m.status = status_of(&vm.status);
    m.cloud_status = vm.status.clone();
    m.machine_type = last_segment(&vm.machine_type).to_string();
    m.location = last_segment(&vm.zone).to_string();
    m.address = address;
    m.pool = pool_of(&vm.labels);
    m.labels = vm.labels.clone();
    m
}

fn check_instance_name(field: &str, name: &str) -> Result<()> {
    if valid_resource_name(name) {
        Ok(())
    } else {
        Err(Error::invalid(
            field,
            format!("a Compute Engine instance name starts with a letter (a-z), then 0 to 62 of a-z, 0-9 and '-', not ending with '-'; got {name:?}"),
        ))
    }
}

fn check_label(k: &str, v: &str) -> Result<()> {
    let key_ok = !k.is_empty()
        && k.len() <= 63
        && k.as_bytes()[0].is_ascii_lowercase()
        && k.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
    let value_ok = v.len() <= 63
        && v.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
    if !key_ok || !value_ok {
        return Err(Error::invalid(
            "labels",
            format!("keys are 1 to 63 of a-z, 0-9, '-', '_' starting with a letter, values up to 63 of the same; got {k:?}={v:?}"),
        ));
    }
    if [ORCA_LABEL, POOL_LABEL, OWNER_LABEL].contains(&k) {
        return Err(Error::invalid(
            "labels",
            format!("{k} is orca's own label and cannot be set or removed"),
        ));
    }
    Ok(())
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
        Ok(GceProvider {
            inner: Arc::new(Inner {
                config,
                client,
                owner: owner.to_string(),
                arch_cache: Mutex::new(HashMap::new()),
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

    fn zone(&self) -> &str {
        &self.inner.config.zone
    }

    async fn get_instance(&self, name: &str) -> Result<Option<Instance>> {
        let path = self.client().zonal(&format!("instances/{name}"));
        self.client().get_opt("instances.get", &path).await
    }

    /// The instance `id` if this owner made it (any pool): `None` when it is gone,
    /// [`Error::NotOwned`] when it is not this owner's.
    async fn owned(&self, id: &str) -> Result<Option<Instance>> {
        validate_id(id)?;
        check_instance_name("id", id)?;
        match self.get_instance(id).await? {
            None => Ok(None),
            Some(vm) if is_owned_by(&vm.labels, &self.inner.owner) => Ok(Some(vm)),
            Some(_) => Err(Error::NotOwned {
                id: id.to_string(),
                owner: self.inner.owner.clone(),
            }),
        }
    }

    async fn owned_or_gone(&self, id: &str) -> Result<Instance> {
        self.owned(id)
            .await?
            .ok_or_else(|| Error::not_found(format!("instance {id} in {}", self.zone())))
    }

    async fn instance_op(
        &self,
        op_name: &'static str,
        name: &str,
        action: &str,
        body: Option<&Value>,
    ) -> Result<Operation> {
        let path = self.client().zonal(&format!("instances/{name}/{action}"));
        let query = [("requestId", random_uuid())];
        let op: Operation = self
            .client()
            .call(op_name, Method::POST, &path, &query, body)
            .await?;
        let done = self.client().wait(op).await?;
        match operation_error(&done) {
            Some(e) => Err(e),
            None => Ok(done),
        }
    }

    /// Sets labels on machine `id` (this owner's) and removes the labels named in `remove`, keeping
    /// every other label: shed marks its machines `creating`, `ready`, `deleting` this way. orca's own
    /// labels cannot be changed. Uses the instance's `labelFingerprint` and reads again when another
    /// writer got there first.
    pub async fn set_labels(&self, id: &str, set: &Labels, remove: &[&str]) -> Result<Machine> {
        for (k, v) in set {
            check_label(k, v)?;
        }
        for k in remove {
            check_label(k, "")?;
        }
        validate_id(id)?;
        check_instance_name("id", id)?;
        for attempt in 0..5 {
            let vm = self.owned_or_gone(id).await?;
            let mut labels: BTreeMap<String, String> = vm.labels.clone();
            for k in remove {
                labels.remove(*k);
            }
            labels.extend(set.iter().map(|(k, v)| (k.clone(), v.clone())));
            let body = json!({"labels": labels, "labelFingerprint": vm.label_fingerprint});
            match self
                .instance_op("instances.setLabels", id, "setLabels", Some(&body))
                .await
            {
                Ok(_) => break,
                Err(Error::Other { message, .. })
                    if message.starts_with("conditionNotMet") && attempt < 4 =>
                {
                    tracing::debug!(id, "labels changed underneath; reading again");
                    continue;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(to_machine(&self.owned_or_gone(id).await?))
    }

    /// Makes the machine `spec` describes with `options` (see [`CreateOptions`]); otherwise as
    /// [`Provider::create`].
    pub async fn create_with(
        &self,
        spec: &MachineSpec,
        options: &CreateOptions,
    ) -> Result<Created> {
        spec.validate()?;
        check_instance_name("name", &spec.name)?;
        if spec.location != self.zone() {
            return Err(Error::invalid(
                "location",
                format!(
                    "this provider makes machines in zone {}, got {:?}",
                    self.zone(),
                    spec.location
                ),
            ));
        }
        let cfg = &self.inner.config;
        let tags = options
            .network_tags
            .clone()
            .unwrap_or_else(|| cfg.network_tags.clone());
        for t in &tags {
            if !valid_resource_name(t) {
                return Err(Error::invalid(
                    "network_tags",
                    format!(
                        "a tag is 1 to 63 of a-z, 0-9 and '-', starting with a letter; got {t:?}"
                    ),
                ));
            }
        }
        let run = options.max_run_duration.or(cfg.max_run_duration);
        if let Some(d) = run {
            if d < Duration::from_secs(30) || d > Duration::from_secs(120 * 86_400) {
                return Err(Error::invalid("max_run_duration", "30 seconds to 120 days"));
            }
        }
        let disk_gb = options.disk_gb.unwrap_or(cfg.disk_gb);
        if !(10..=65_536).contains(&disk_gb) {
            return Err(Error::invalid("disk_gb", "10 to 65536 GB"));
        }
        for (k, v) in &options.labels {
            check_label(k, v)?;
        }
        if let Some(i) = &options.image {
            if i.is_empty() || i.contains(|c: char| c.is_whitespace() || c == '?' || c == '#') {
                return Err(Error::invalid("image", format!("not an image path: {i:?}")));
            }
        }

        let arch = self.arch(&spec.machine_type).await?;
        let image = match (&options.image, &arch) {
            (Some(i), _) => i.clone(),
            (None, Arch::Amd64) => format!(
                "projects/{}/global/images/family/{UBUNTU_AMD64_FAMILY}",
                cfg.image_project
            ),
            (None, Arch::Arm64) => format!(
                "projects/{}/global/images/family/{UBUNTU_ARM64_FAMILY}",
                cfg.image_project
            ),
            (None, Arch::Other(a)) => {
                return Err(Error::invalid(
                    "machine_type",
                    format!(
                        "{} has architecture {a}, for which there is no Ubuntu image",
                        spec.machine_type
                    ),
                ))
            }
        };
        let mut labels = options.labels.clone();
        labels.extend(ownership_labels(&spec.pool, &self.inner.owner));
        let region = cfg
            .zone
            .rsplit_once('-')
            .map(|(r, _)| r)
            .unwrap_or(&cfg.zone);
        let mut nic = json!({
            "network": format!("projects/{}/global/networks/{}", cfg.project, cfg.network),
            "subnetwork": format!("projects/{}/regions/{region}/subnetworks/{}", cfg.project, cfg.subnet),
        });
        if cfg.public_ip {
            nic["accessConfigs"] = json!([{"type": "ONE_TO_ONE_NAT", "name": "External NAT"}]);
        }
        let mut body = json!({
            "name": spec.name,
            "machineType": format!("zones/{}/machineTypes/{}", cfg.zone, spec.machine_type),
            "labels": labels,
            "disks": [{
                "boot": true,
                "autoDelete": true,
                "type": "PERSISTENT",
                "initializeParams": {
                    "diskName": spec.name,
                    "diskSizeGb": disk_gb.to_string(),
                    "sourceImage": image,
                    "labels": ownership_labels(&spec.pool, &self.inner.owner),
                },
            }],
            "networkInterfaces": [nic],
        });
        if !tags.is_empty() {
            body["tags"] = json!({"items": tags});
        }
        if !spec.user_data.is_empty() {
            body["metadata"] = json!({"items": [{"key": "user-data", "value": spec.user_data}]});
        }
        if let Some(d) = run {
            body["scheduling"] = json!({
                "maxRunDuration": {"seconds": d.as_secs().to_string()},
                "instanceTerminationAction": "STOP",
            });
        }
        let labels_text = serde_json::to_string(&options.labels).unwrap_or_default();
        let run_text = run.map(|d| d.as_secs().to_string()).unwrap_or_default();
        let rid = request_uuid(&[
            "instances.insert",
            &cfg.project,
            &cfg.zone,
            &self.inner.owner,
            &spec.pool,
            &spec.name,
            &spec.machine_type,
            &image,
            &disk_gb.to_string(),
            &tags.join(","),
            &run_text,
            &labels_text,
            &sha256_hex(spec.user_data.as_bytes()),
        ]);

        // A repeated requestId answers the first insert's operation. If that operation had already
        // failed (an earlier create of this spec without stock, say), or its instance was made and
        // deleted since, the id is stale: insert once more under an id salted with that operation.
        let mut rid = rid;
        for round in 0..2 {
            match self.insert_once(spec, &body, &rid, round == 0).await? {
                Inserted::Made(m) => return Ok(Created::Machine(m)),
                Inserted::NoStock(message) => {
                    return Ok(Created::NoStock {
                        machine_type: spec.machine_type.clone(),
                        location: spec.location.clone(),
                        message,
                    })
                }
                Inserted::Stale(op_name) if round == 0 => {
                    tracing::debug!(name = %spec.name, "request id answered a stale insert; salting it");
                    rid = request_uuid(&[&rid, &op_name]);
                }
                Inserted::Stale(_) => break,
            }
        }
        Err(Error::transient(format!(
            "instance {} was inserted but is gone again",
            spec.name
        )))
    }

    async fn insert_once(
        &self,
        spec: &MachineSpec,
        body: &Value,
        rid: &str,
        first_round: bool,
    ) -> Result<Inserted> {
        let path = self.client().zonal("instances");
        let query = [("requestId", rid.to_string())];
        let op: Operation = match self
            .client()
            .call("instances.insert", Method::POST, &path, &query, Some(body))
            .await
        {
            Ok(op) => op,
            Err(Error::AlreadyExists { what, .. }) => return self.adopt(spec, what).await,
            Err(Error::NoStock { message, .. }) => return Ok(Inserted::NoStock(message)),
            Err(e) => return Err(e),
        };
        let op_name = op.name.clone();
        let answered_done = op.is_done();
        let done = self.client().wait(op).await?;
        if let Some(e) = operation_error(&done) {
            let left = self.clean_up(&spec.name, done.target_id.as_deref()).await;
            if answered_done && first_round && left.is_empty() {
                // The insert answered an operation that had already failed: most likely a repeated
                // request id naming an earlier attempt. Try once more under a fresh id.
                tracing::debug!(name = %spec.name, error = %e, "insert answered a finished, failed operation");
                return Ok(Inserted::Stale(op_name));
            }
            return match (e, left.is_empty()) {
                (Error::NoStock { message, .. }, true) => Ok(Inserted::NoStock(message)),
                (Error::NoStock { message, .. }, false) => Err(Error::Leftovers {
                    error: Box::new(Error::no_stock(
                        spec.machine_type.clone(),
                        spec.location.clone(),
                        message,
                    )),
                    left,
                }),
                (e, true) => Err(e),
                (e, false) => Err(Error::Leftovers {
                    error: Box::new(e),
                    left,
                }),
            };
        }
        match self.get_instance(&spec.name).await? {
            // Another incarnation than the operation's: made since under this name (the operation
            // was an old one, answered again for a repeated request id). Not this create's.
            Some(vm) if !same_incarnation(done.target_id.as_deref(), &vm) => {
                Ok(Inserted::Stale(op_name))
            }
            Some(vm) if is_in_pool(&vm.labels, &spec.pool, &self.inner.owner) => {
                Ok(Inserted::Made(to_machine(&vm)))
            }
            Some(_) => Err(Error::already_exists(format!(
                "instance {} (not this owner's machine of pool {})",
                spec.name, spec.pool
            ))),
            None => Ok(Inserted::Stale(op_name)),
        }
    }

    /// A 409 on insert: the instance exists. It is adopted when it is this owner's, of this pool and
    /// type (a create retried after an ambiguous failure).
    async fn adopt(&self, spec: &MachineSpec, what: String) -> Result<Inserted> {
        match self.get_instance(&spec.name).await? {
            Some(vm)
                if is_in_pool(&vm.labels, &spec.pool, &self.inner.owner)
                    && last_segment(&vm.machine_type) == spec.machine_type =>
            {
                tracing::debug!(name = %spec.name, "adopted the instance an earlier create made");
                Ok(Inserted::Made(to_machine(&vm)))
            }
            Some(_) => Err(Error::already_exists(what)),
            // No instance: the conflict is the boot disk (named after the instance), which lasts.
            None if what.contains("/disks/") => Err(Error::already_exists(what)),
            // Gone between the 409 and the read: let the caller retry.
            None => Err(Error::transient(format!(
                "instance {} existed and is gone",
                spec.name
            ))),
        }
    }

    /// Removes what a failed insert left (the instance and its boot disk, when they carry this owner's
    /// labels); answers what could not be removed. `target_id` is the incarnation the failed insert
    /// was about: an instance of that name with another id was made since (the operation was an old
    /// one, answered again for a repeated request id) and is not touched.
    async fn clean_up(&self, name: &str, target_id: Option<&str>) -> Vec<String> {
        let mut left = Vec::new();
        match self.get_instance(name).await {
            Ok(Some(vm))
                if is_owned_by(&vm.labels, &self.inner.owner)
                    && same_incarnation(target_id, &vm) =>
            {
                if let Err(e) = self.delete_instance(name).await {
                    tracing::warn!(name, error = %e, "could not remove a failed create's instance");
                    left.push(format!("instance {name}"));
                }
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(name, error = %e, "could not read a failed create's instance");
                left.push(format!("instance {name} (unknown)"));
            }
        }
        if let Err(e) = self.delete_disk_if_ours(name).await {
            tracing::warn!(name, error = %e, "could not remove a failed create's disk");
            left.push(format!("disk {name}"));
        }
        left
    }

    async fn delete_disk_if_ours(&self, disk: &str) -> Result<()> {
        let path = self.client().zonal(&format!("disks/{disk}"));
        let Some(d) = self.client().get_opt::<Disk>("disks.get", &path).await? else {
            return Ok(());
        };
        if !is_owned_by(&d.labels, &self.inner.owner) || !d.users.is_empty() {
            return Ok(());
        }
        let query = [("requestId", random_uuid())];
        let op: Operation = match self
            .client()
            .call("disks.delete", Method::DELETE, &path, &query, None)
            .await
        {
            Ok(op) => op,
            Err(Error::NotFound { .. }) => return Ok(()),
            Err(e) => return Err(e),
        };
        let done = self.client().wait(op).await?;
        match operation_error(&done) {
            None | Some(Error::NotFound { .. }) => Ok(()),
            Some(e) => Err(e),
        }
    }

    /// Deletes instance `name` and follows the operation; gone is success.
    async fn delete_instance(&self, name: &str) -> Result<()> {
        let path = self.client().zonal(&format!("instances/{name}"));
        let query = [("requestId", random_uuid())];
        let op: Operation = match self
            .client()
            .call("instances.delete", Method::DELETE, &path, &query, None)
            .await
        {
            Ok(op) => op,
            Err(Error::NotFound { .. }) => return Ok(()),
            Err(e) => return Err(e),
        };
        let done = self.client().wait(op).await?;
        match operation_error(&done) {
            None | Some(Error::NotFound { .. }) => Ok(()),
            Some(e) => Err(e),
        }
    }
}

/// Whether `vm` is the incarnation an operation with `target_id` is about (unknown ids: assumed so).
fn same_incarnation(target_id: Option<&str>, vm: &Instance) -> bool {
    target_id.is_none_or(|t| t.is_empty() || vm.id.is_empty() || t == vm.id)
}

enum Inserted {
    Made(Machine),
    NoStock(String),
    Stale(String),
}

#[async_trait]
impl Provider for GceProvider {
    fn kind(&self) -> &str {
        "gce"
    }

    fn owner(&self) -> &str {
        &self.inner.owner
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::NONE.with_start_stop(true).with_resize(true)
    }

    async fn arch(&self, machine_type: &str) -> Result<Arch> {
        orca_machines::spec::validate_token("machine_type", machine_type)?;
        if let Some(a) = self
            .inner
            .arch_cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(machine_type)
        {
            return Ok(a.clone());
        }
        let path = self.client().zonal(&format!("machineTypes/{machine_type}"));
        let mt: MachineType = self
            .client()
            .get_opt("machineTypes.get", &path)
            .await?
            .ok_or_else(|| {
                Error::not_found(format!(
                    "machine type {machine_type} in zone {}",
                    self.zone()
                ))
            })?;
        // Compute Engine leaves `architecture` unset on some older x86 series; every Arm series sets
        // ARM64.
        let arch = match mt.architecture.as_deref() {
            None | Some("") | Some("ARCHITECTURE_UNSPECIFIED") => Arch::Amd64,
            Some(a) => docker_arch(a),
        };
        self.inner
            .arch_cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(machine_type.to_string(), arch.clone());
        Ok(arch)
    }

    async fn create(&self, spec: &MachineSpec) -> Result<Created> {
        self.create_with(spec, &CreateOptions::default()).await
    }

    async fn machines(&self, pool: &str) -> Result<Vec<Machine>> {
        validate_pool(pool)?;
        let owner = &self.inner.owner;
        // The filter grammar has no documented negation, so the empty owner filters on the two labels
        // here and drops owned machines below.
        let mut filter =
            format!("(labels.{ORCA_LABEL} = \"pool\") (labels.{POOL_LABEL} = \"{pool}\")");
        if !owner.is_empty() {
            filter.push_str(&format!(" (labels.{OWNER_LABEL} = \"{owner}\")"));
        }
        let path = self.client().zonal("instances");
        let all: Vec<Instance> = self
            .client()
            .list_all(
                "instances.list",
                &path,
                &[("filter", filter)],
                self.inner.config.page_size,
            )
            .await?;
        Ok(all
            .iter()
            .filter(|vm| is_in_pool(&vm.labels, pool, owner))
            .map(to_machine)
            .collect())
    }

    async fn machine(&self, id: &str) -> Result<Option<Machine>> {
        Ok(self.owned(id).await?.as_ref().map(to_machine))
    }

    async fn delete(&self, id: &str) -> Result<bool> {
        let Some(vm) = self.owned(id).await? else {
            return Ok(true);
        };
        self.delete_instance(id).await?;
        // A boot disk whose autoDelete was turned off stays; remove it when it is this owner's.
        for d in vm
            .disks
            .iter()
            .filter(|d| !d.auto_delete && !d.source.is_empty())
        {
            self.delete_disk_if_ours(last_segment(&d.source)).await?;
        }
        Ok(true)
    }

    async fn start(&self, id: &str) -> Result<Machine> {
        self.owned_or_gone(id).await?;
        self.instance_op("instances.start", id, "start", None)
            .await?;
        Ok(to_machine(&self.owned_or_gone(id).await?))
    }

    async fn stop(&self, id: &str) -> Result<Machine> {
        self.owned_or_gone(id).await?;
        self.instance_op("instances.stop", id, "stop", None).await?;
        Ok(to_machine(&self.owned_or_gone(id).await?))
    }

    async fn resize(&self, id: &str, machine_type: &str) -> Result<Resized> {
        orca_machines::spec::validate_token("machine_type", machine_type)?;
        let vm = self.owned_or_gone(id).await?;
        let current = last_segment(&vm.machine_type).to_string();
        if current == machine_type {
            return Ok(Resized {
                machine: to_machine(&vm),
                caused_downtime: false,
            });
        }
        let (from, to) = (self.arch(&current).await?, self.arch(machine_type).await?);
        if from != to {
            return Err(Error::invalid(
                "machine_type",
                format!("{machine_type} is {to} but {id} runs an image for {from}"),
            ));
        }
        // setMachineType needs a stopped instance: stop it first, and start it again after.
        let was_up = !matches!(status_of(&vm.status), Status::Stopped);
        if was_up {
            self.instance_op("instances.stop", id, "stop", None).await?;
        }
        let body =
            json!({"machineType": format!("zones/{}/machineTypes/{machine_type}", self.zone())});
        let changed = self
            .instance_op(
                "instances.setMachineType",
                id,
                "setMachineType",
                Some(&body),
            )
            .await;
        if was_up {
            // Start again even when the change failed, so a failed resize leaves the machine as it was.
            let started = self.instance_op("instances.start", id, "start", None).await;
            changed?;
            started?;
        } else {
            changed?;
        }
        Ok(Resized {
            machine: to_machine(&self.owned_or_gone(id).await?),
            caused_downtime: was_up,
        })
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
        ] {
            assert_eq!(status_of(c), s, "{c}");
        }
    }

    #[test]
    fn labels_of_orca_are_protected() {
        assert!(check_label("ready", "").is_ok());
        assert!(check_label("state", "creating").is_ok());
        for k in ["orca", "orca-pool", "orca-owner", "Bad", "", "a b"] {
            assert!(check_label(k, "x").is_err(), "{k}");
        }
        assert!(check_label("k", "UPPER").is_err());
    }
}
