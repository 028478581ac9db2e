//! [`Ec2Provider`]: orca's contract on EC2 instances.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use async_trait::async_trait;
use aws_sdk_ec2::types::{Filter, Instance, InstanceStateName};
use orca_machines::labels::{is_in_pool, is_owned_by, ownership_labels, pool_of, Labels};
use orca_machines::labels::{ORCA_LABEL, ORCA_VALUE, OWNER_LABEL, POOL_LABEL};
use orca_machines::spec::validate_token;
use orca_machines::{
    all_pages, validate_id, validate_pool, Arch, Capabilities, Created, Error, Machine,
    MachineSpec, Provider, Resized, Result, Status,
};
use sha2::{Digest, Sha256};
use tokio::time::Instant;

use crate::client::{filter, Ec2Client, Image, RunRequest};
use crate::config::{Ec2Builder, Waiting, SUBNETS_ENV};

/// The tag that holds the machine's name (EC2's console shows it).
pub const NAME_TAG: &str = "Name";

/// How many times a create moves to a fresh ClientToken because the one before named a machine that
/// was since terminated (a name made, deleted and made again).
const MAX_TOKEN_GENERATIONS: usize = 4;

/// Instance states `machines` lists: every one but terminated.
const LISTED_STATES: [&str; 5] = ["pending", "running", "shutting-down", "stopping", "stopped"];
/// Instance states a create adopts: alive ones.
const ADOPTED_STATES: [&str; 4] = ["pending", "running", "stopping", "stopped"];

/// Machines as EC2 instances in one region, made and seen as one owner's. Made by
/// [`Ec2Builder::build`] or [`crate::from_env`].
pub struct Ec2Provider {
    owner: String,
    region: String,
    client: Ec2Client,
    subnets: BTreeMap<String, String>,
    security_group: String,
    instance_profile: String,
    images: BTreeMap<Arch, String>,
    root_volume_gb: Option<i32>,
    page_size: i32,
    waiting: Waiting,
    arch_cache: Mutex<HashMap<String, Arch>>,
    image_cache: Mutex<HashMap<(String, Arch), Image>>,
}

impl std::fmt::Debug for Ec2Provider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ec2Provider")
            .field("owner", &self.owner)
            .field("region", &self.region)
            .field("subnets", &self.subnets)
            .field("security_group", &self.security_group)
            .field("instance_profile", &self.instance_profile)
            .field("images", &self.images)
            .field("page_size", &self.page_size)
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The ClientToken of a create: derived from owner, pool and name, so that the same create made again
/// (after a timeout, a dropped connection, a crash) names the same instance; `after` is the instance an
/// earlier generation of the token named, once that instance was terminated.
///
/// ```
/// let a = orca_ec2::client_token("stack-1", "lab", "w-1", None);
/// assert_eq!(a, orca_ec2::client_token("stack-1", "lab", "w-1", None));
/// assert_ne!(a, orca_ec2::client_token("stack-2", "lab", "w-1", None));
/// assert_ne!(a, orca_ec2::client_token("stack-1", "lab", "w-1", Some("i-0abc")));
/// assert!(a.len() <= 64 && a.is_ascii());
/// ```
pub fn client_token(owner: &str, pool: &str, name: &str, after: Option<&str>) -> String {
    let mut h = Sha256::new();
    for part in ["orca-ec2", owner, pool, name, after.unwrap_or("")] {
        h.update(part.as_bytes());
        h.update([0u8]);
    }
    let digest = h.finalize();
    let hex: String = digest.iter().take(20).map(|b| format!("{b:02x}")).collect();
    format!("orca-{hex}")
}

fn state_of(i: &Instance) -> &str {
    i.state()
        .and_then(|s| s.name())
        .map(|n| n.as_str())
        .unwrap_or("")
}

/// EC2's instance state in the shared set.
pub fn status_of(state: &str) -> Status {
    match state {
        "pending" => Status::Starting,
        "running" => Status::Running,
        "stopping" => Status::Stopping,
        "stopped" => Status::Stopped,
        "shutting-down" | "terminated" => Status::Deleting,
        _ => Status::Unknown,
    }
}

fn labels_of(i: &Instance) -> Labels {
    i.tags()
        .iter()
        .filter_map(|t| Some((t.key()?.to_string(), t.value().unwrap_or("").to_string())))
        .collect()
}

fn machine_of(i: &Instance) -> Machine {
    let labels = labels_of(i);
    let state = state_of(i);
    let mut m = Machine::new(
        i.instance_id().unwrap_or_default(),
        labels.get(NAME_TAG).cloned().unwrap_or_default(),
    );
    m.status = status_of(state);
    m.cloud_status = state.to_string();
    m.machine_type = i
        .instance_type()
        .map(|t| t.as_str().to_string())
        .unwrap_or_default();
    m.location = i
        .placement()
        .and_then(|p| p.availability_zone())
        .unwrap_or_default()
        .to_string();
    m.address = i.public_ip_address().unwrap_or_default().to_string();
    m.pool = pool_of(&labels);
    m.labels = labels;
    m
}

enum Attempt {
    Adopted(Machine),
    Made(Box<Instance>),
    /// EC2 answered IdempotentParameterMismatch: the token was used before with other parameters.
    Mismatch,
}

/// A digest of what a RunInstances asks for (all but its ClientToken): two requests with the same
/// digest are the same request.
fn request_digest(r: &RunRequest) -> String {
    let mut h = Sha256::new();
    let root = r.root_volume_gb.or(r.image.root_volume_gb).unwrap_or(0);
    for part in [
        r.image.id.as_str(),
        r.machine_type.as_str(),
        r.subnet.as_str(),
        r.security_group.as_str(),
        r.instance_profile.as_str(),
        r.user_data_b64.as_str(),
        &root.to_string(),
    ] {
        h.update(part.as_bytes());
        h.update([0u8]);
    }
    h.finalize()
        .iter()
        .take(10)
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl Ec2Provider {
    pub(crate) fn new(b: Ec2Builder, client: Ec2Client, region: String) -> Self {
        Ec2Provider {
            owner: b.owner,
            region,
            client,
            subnets: b.subnets,
            security_group: b.security_group.unwrap_or_default(),
            instance_profile: b.instance_profile.unwrap_or_default(),
            images: b.images,
            root_volume_gb: b.root_volume_gb,
            page_size: b.page_size,
            waiting: b.waiting,
            arch_cache: Mutex::new(HashMap::new()),
            image_cache: Mutex::new(HashMap::new()),
        }
    }

    /// The region this provider works in.
    pub fn region(&self) -> &str {
        &self.region
    }

    /// EC2 requests this provider has sent so far (each attempt counts): for benchmarks and tests.
    pub fn requests(&self) -> u64 {
        self.client.requests()
    }

    fn subnet_for(&self, location: &str) -> Result<&str> {
        self.subnets
            .get(location)
            .map(String::as_str)
            .ok_or_else(|| {
                Error::invalid(
                    "location",
                    format!(
                        "one of the availability zones in {SUBNETS_ENV} ({}), got {location:?}",
                        self.subnets.keys().cloned().collect::<Vec<_>>().join(", ")
                    ),
                )
            })
    }

    /// The server-side filters for this owner's machines of `pool` (EC2 has no "tag absent" filter: for
    /// the empty owner, machines with an owner tag are dropped client-side).
    fn pool_filters(&self, pool: &str, states: &[&str]) -> Vec<Filter> {
        let mut f = vec![
            filter(&format!("tag:{ORCA_LABEL}"), [ORCA_VALUE]),
            filter(&format!("tag:{POOL_LABEL}"), [pool]),
        ];
        if !self.owner.is_empty() {
            f.push(filter(&format!("tag:{OWNER_LABEL}"), [self.owner.as_str()]));
        }
        f.push(filter("instance-state-name", states.iter().copied()));
        f
    }

    async fn list(&self, filters: &[Filter]) -> Result<Vec<Instance>> {
        all_pages(|token| self.client.describe_page(filters, self.page_size, token)).await
    }

    /// The live machine this owner made for `spec` earlier, if any (what a retried create adopts).
    async fn find_made(&self, spec: &MachineSpec) -> Result<Option<Machine>> {
        let mut filters = self.pool_filters(&spec.pool, &ADOPTED_STATES);
        filters.push(filter(&format!("tag:{NAME_TAG}"), [spec.name.as_str()]));
        let mut found: Vec<Machine> = self
            .list(&filters)
            .await?
            .iter()
            .map(machine_of)
            .filter(|m| m.name == spec.name && is_in_pool(&m.labels, &spec.pool, &self.owner))
            .collect();
        found.sort_by(|a, b| a.id.cmp(&b.id));
        let Some(m) = found.into_iter().next() else {
            return Ok(None);
        };
        if m.machine_type != spec.machine_type || m.location != spec.location {
            return Err(Error::already_exists(format!(
                    "machine {} ({}) of pool {} is a {} in {}, not a {} in {}: delete it or use another name",
                    m.name, m.id, spec.pool, m.machine_type, m.location, spec.machine_type, spec.location
                )));
        }
        Ok(Some(m))
    }

    async fn image(&self, arch: &Arch) -> Result<Image> {
        let key = (self.region.clone(), arch.clone());
        if let Some(i) = lock(&self.image_cache).get(&key) {
            return Ok(i.clone());
        }
        let image = self
            .client
            .find_image(arch, self.images.get(arch).map(String::as_str))
            .await?;
        tracing::debug!(region = %self.region, %arch, image = %image.id, name = %image.name, "image chosen");
        lock(&self.image_cache).insert(key, image.clone());
        Ok(image)
    }

    /// Instance `id` if this owner made it: NotFound when EC2 does not know it (or it is terminated),
    /// NotOwned when it is not this owner's.
    async fn owned(&self, id: &str) -> Result<Instance> {
        validate_id(id)?;
        let inst = self
            .client
            .describe_instance(id)
            .await?
            .filter(|i| state_of(i) != "terminated")
            .ok_or_else(|| Error::not_found(format!("machine {id}")))?;
        if !is_owned_by(&labels_of(&inst), &self.owner) {
            return Err(Error::NotOwned {
                id: id.to_string(),
                owner: self.owner.clone(),
            });
        }
        Ok(inst)
    }

    /// Follows instance `id` until its state is one of `want` (`None`: EC2 no longer knows it), within
    /// the waiting time.
    async fn wait_for(&self, id: &str, want: &[&str]) -> Result<Option<Instance>> {
        let started = Instant::now();
        loop {
            let inst = self.client.describe_instance(id).await?;
            let state = inst
                .as_ref()
                .map(state_of)
                .unwrap_or("terminated")
                .to_string();
            if want.contains(&state.as_str()) {
                return Ok(inst);
            }
            if inst.is_none() || state == "terminated" {
                return Err(Error::not_found(format!(
                    "machine {id} (terminated while waiting for {})",
                    want.join(" or ")
                )));
            }
            if started.elapsed() + self.waiting.interval > self.waiting.timeout {
                return Err(Error::transient(format!(
                    "machine {id} is still {state} after {:?} (waiting for {}); EC2 goes on with it",
                    self.waiting.timeout,
                    want.join(" or ")
                )));
            }
            tokio::time::sleep(self.waiting.interval).await;
        }
    }

    /// Stops `inst` (running or pending) and waits until it is stopped.
    async fn stop_and_wait(&self, inst: &Instance) -> Result<Instance> {
        let id = inst.instance_id().unwrap_or_default();
        match state_of(inst) {
            "stopped" => return Ok(inst.clone()),
            "pending" => {
                self.wait_for(id, &["running", "stopped"]).await?;
                self.client.stop(id).await?
            }
            "stopping" => {}
            _ => self.client.stop(id).await?,
        }
        self.wait_for(id, &["stopped"])
            .await?
            .ok_or_else(|| Error::not_found(format!("machine {id}")))
    }

    async fn described(&self, id: &str) -> Result<Machine> {
        self.client
            .describe_instance(id)
            .await?
            .map(|i| machine_of(&i))
            .ok_or_else(|| Error::not_found(format!("machine {id}")))
    }
}

#[async_trait]
impl Provider for Ec2Provider {
    fn kind(&self) -> &str {
        "ec2"
    }

    fn owner(&self) -> &str {
        &self.owner
    }

    fn capabilities(&self) -> Capabilities {
        // No hourly price: EC2 has no price call; the Price List API is another service (its own
        // endpoint, IAM action and a catalogue of many megabytes) whose on-demand figure ignores
        // savings plans and reservations. See the README.
        Capabilities::NONE.with_start_stop(true).with_resize(true)
    }

    async fn arch(&self, machine_type: &str) -> Result<Arch> {
        validate_token("machine_type", machine_type)?;
        if let Some(a) = lock(&self.arch_cache).get(machine_type) {
            return Ok(a.clone());
        }
        let arch = self
            .client
            .instance_type_arch(machine_type)
            .await?
            .ok_or_else(|| {
                Error::not_found(format!("machine type {machine_type} in {}", self.region))
            })?;
        lock(&self.arch_cache).insert(machine_type.to_string(), arch.clone());
        Ok(arch)
    }

    async fn create(&self, spec: &MachineSpec) -> Result<Created> {
        spec.validate()?;
        let subnet = self.subnet_for(&spec.location)?.to_string();
        // A create made again adopts what the first one made. EC2's ClientToken does this too, but not
        // every EC2 (moto ignores it), and a token outlives its instance.
        if let Some(m) = self.find_made(spec).await? {
            return Ok(Created::Machine(m));
        }
        let arch = self.arch(&spec.machine_type).await?;
        let image = self.image(&arch).await?;
        let mut tags = ownership_labels(&spec.pool, &self.owner);
        tags.insert(NAME_TAG.to_string(), spec.name.clone());
        let mut req = RunRequest {
            image,
            machine_type: spec.machine_type.clone(),
            subnet,
            security_group: self.security_group.clone(),
            instance_profile: self.instance_profile.clone(),
            user_data_b64: aws_smithy_types::base64::encode(spec.user_data.as_bytes()),
            tags: tags.clone(),
            client_token: client_token(&self.owner, &spec.pool, &spec.name, None),
            root_volume_gb: self.root_volume_gb,
        };
        for _ in 0..MAX_TOKEN_GENERATIONS {
            let mut attempts = 0u32;
            let req_ref = &req;
            // One policy for every retry; RunInstances is only ever re-sent with its ClientToken, and
            // after an ambiguous failure the driver first looks for what the lost attempt made.
            let outcome = self
                .client
                .retry_policy()
                .retry("create", || {
                    attempts += 1;
                    let again = attempts > 1;
                    async move {
                        if again {
                            if let Some(m) = self.find_made(spec).await? {
                                return Ok(Attempt::Adopted(m));
                            }
                        }
                        match self.client.run_instance(req_ref).await {
                            Ok(inst) => Ok(Attempt::Made(Box::new(inst))),
                            Err(Error::AlreadyExists { what, .. })
                                if what
                                    .starts_with("RunInstances: IdempotentParameterMismatch") =>
                            {
                                Ok(Attempt::Mismatch)
                            }
                            Err(e) => Err(e),
                        }
                    }
                })
                .await;
            let inst = match outcome {
                Ok(Attempt::Adopted(m)) => return Ok(Created::Machine(m)),
                Ok(Attempt::Made(inst)) => inst,
                Ok(Attempt::Mismatch) => {
                    // The token was used with other parameters (user data, a newer image) by a
                    // machine of this name that is gone: no live one was found before the call, and
                    // none is now. A token salted with this request's digest is this request's own
                    // (the same on every retry); a live one is adopted or refused as any other.
                    if let Some(m) = self.find_made(spec).await? {
                        return Ok(Created::Machine(m));
                    }
                    tracing::debug!("ClientToken was used with other parameters; next generation");
                    let salt = format!("{}+{}", req.client_token, request_digest(&req));
                    req.client_token =
                        client_token(&self.owner, &spec.pool, &spec.name, Some(&salt));
                    continue;
                }
                Err(Error::NoStock { message, .. }) => {
                    return Ok(Created::NoStock {
                        machine_type: spec.machine_type.clone(),
                        location: spec.location.clone(),
                        message,
                    })
                }
                Err(e) => return Err(e),
            };
            if matches!(
                inst.state().and_then(|s| s.name()),
                Some(InstanceStateName::Terminated | InstanceStateName::ShuttingDown)
            ) {
                // The token named an instance of this name that was since deleted: a new generation.
                let old = inst.instance_id().unwrap_or_default();
                tracing::debug!(
                    old,
                    "ClientToken names a terminated instance; next generation"
                );
                req.client_token = client_token(&self.owner, &spec.pool, &spec.name, Some(old));
                continue;
            }
            let mut m = machine_of(&inst);
            // The answer may leave out tags: they were set in this same call.
            for (k, v) in &tags {
                m.labels.entry(k.clone()).or_insert_with(|| v.clone());
            }
            m.name = spec.name.clone();
            m.pool = spec.pool.clone();
            if m.location.is_empty() {
                m.location = spec.location.clone();
            }
            return Ok(Created::Machine(m));
        }
        Err(Error::other(format!(
            "create of {}: {MAX_TOKEN_GENERATIONS} ClientTokens in a row named terminated instances",
            spec.name
        )))
    }

    async fn machines(&self, pool: &str) -> Result<Vec<Machine>> {
        validate_pool(pool)?;
        let filters = self.pool_filters(pool, &LISTED_STATES);
        Ok(self
            .list(&filters)
            .await?
            .iter()
            .map(machine_of)
            .filter(|m| is_in_pool(&m.labels, pool, &self.owner))
            .collect())
    }

    async fn machine(&self, id: &str) -> Result<Option<Machine>> {
        match self.owned(id).await {
            Ok(i) => Ok(Some(machine_of(&i))),
            Err(Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn delete(&self, id: &str) -> Result<bool> {
        validate_id(id)?;
        let Some(inst) = self.client.describe_instance(id).await? else {
            return Ok(true);
        };
        let state = state_of(&inst);
        if state == "terminated" {
            return Ok(true);
        }
        if !is_owned_by(&labels_of(&inst), &self.owner) {
            return Err(Error::NotOwned {
                id: id.to_string(),
                owner: self.owner.clone(),
            });
        }
        if state != "shutting-down" && !self.client.terminate(id).await? {
            return Ok(true);
        }
        // The root volume is DeleteOnTermination: it goes with the instance.
        match self.wait_for(id, &["terminated"]).await {
            Ok(_) | Err(Error::NotFound { .. }) => Ok(true),
            Err(e) => Err(e),
        }
    }

    async fn start(&self, id: &str) -> Result<Machine> {
        let inst = self.owned(id).await?;
        match state_of(&inst) {
            "running" | "pending" => return Ok(machine_of(&inst)),
            "stopping" => {
                self.wait_for(id, &["stopped"]).await?;
            }
            "shutting-down" => {
                return Err(Error::not_found(format!("machine {id} (being deleted)")))
            }
            _ => {}
        }
        let m = machine_of(&inst);
        self.client.start(id).await.map_err(|e| match e {
            Error::NoStock { message, .. } => Error::no_stock(m.machine_type, m.location, message),
            e => e,
        })?;
        self.described(id).await
    }

    async fn stop(&self, id: &str) -> Result<Machine> {
        let inst = self.owned(id).await?;
        if state_of(&inst) == "shutting-down" {
            return Err(Error::not_found(format!("machine {id} (being deleted)")));
        }
        Ok(machine_of(&self.stop_and_wait(&inst).await?))
    }

    async fn resize(&self, id: &str, machine_type: &str) -> Result<Resized> {
        validate_token("machine_type", machine_type)?;
        let inst = self.owned(id).await?;
        let current = machine_of(&inst);
        if current.machine_type == machine_type {
            return Ok(Resized {
                machine: current,
                caused_downtime: false,
            });
        }
        let new_arch = self.arch(machine_type).await?;
        if let Some(a) = inst.architecture() {
            let boots = orca_machines::docker_arch(a.as_str());
            if boots != new_arch {
                return Err(Error::invalid(
                    "machine_type",
                    format!(
                        "{machine_type} is {new_arch}, but machine {id} boots an {boots} image"
                    ),
                ));
            }
        }
        let state = state_of(&inst).to_string();
        if state == "shutting-down" {
            return Err(Error::not_found(format!("machine {id} (being deleted)")));
        }
        // EC2 changes the type of a stopped instance only.
        let was_running = matches!(state.as_str(), "running" | "pending");
        self.stop_and_wait(&inst).await?;
        if let Err(e) = self.client.set_instance_type(id, machine_type).await {
            if was_running {
                if let Err(again) = self.client.start(id).await {
                    tracing::warn!(id, error = %again, "could not start the machine again after a failed resize");
                }
            }
            return Err(e);
        }
        if was_running {
            if let Err(e) = self.client.start(id).await {
                let Error::NoStock { message, .. } = e else {
                    return Err(e);
                };
                // No stock of the new type: the machine goes back to the type it had and runs again,
                // rather than staying stopped on a type it cannot start.
                let old = current.machine_type.as_str();
                let back = match self.client.set_instance_type(id, old).await {
                    Ok(()) => self.client.start(id).await,
                    Err(e) => Err(e),
                };
                if let Err(again) = back {
                    return Err(Error::other(format!(
                        "resize of {id} to {machine_type}: no stock ({message}); going back to \
                         {old} failed, the machine is stopped: {again}"
                    )));
                }
                return Err(Error::no_stock(
                    machine_type.to_string(),
                    current.location.clone(),
                    message,
                ));
            }
        }
        Ok(Resized {
            machine: self.described(id).await?,
            caused_downtime: was_running,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states() {
        assert_eq!(status_of("pending"), Status::Starting);
        assert_eq!(status_of("running"), Status::Running);
        assert_eq!(status_of("stopping"), Status::Stopping);
        assert_eq!(status_of("stopped"), Status::Stopped);
        assert_eq!(status_of("shutting-down"), Status::Deleting);
        assert_eq!(status_of("hibernating"), Status::Unknown);
    }

    #[test]
    fn tokens_fit_ec2() {
        let t = client_token(
            &"o".repeat(63),
            &"p".repeat(63),
            &"n".repeat(63),
            Some("i-0123"),
        );
        assert!(t.len() <= 64, "{t}");
        assert!(t.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'));
        // No two parts can be shifted into each other.
        assert_ne!(
            client_token("ab", "c", "d", None),
            client_token("a", "bc", "d", None)
        );
    }
}
