//! [`Ec2Provider`]: orca's contract on EC2 instances, and how it lives with EC2's eventual
//! consistency.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_ec2::types::{Filter, Instance};
use orca_machines::chrono::{self, Utc};
use orca_machines::kit::{self, Attempts, Recent, StoppedCreates, lock};
use orca_machines::labels::{ORCA_LABEL, ORCA_VALUE, OWNER_LABEL, POOL_LABEL};
use orca_machines::labels::{is_in_pool, ownership_labels};
use orca_machines::spec::validate_token;
use orca_machines::{
    Arch, Capabilities, Created, Error, Machine, MachineLabels, MachineSpec, Provider, Resized,
    Result, SpecOptions, Timestamp, all_pages, provider::first_made, validate_id, validate_name,
    validate_owner, validate_pool,
};
use sha2::{Digest, Sha256};
use tokio::time::Instant;

use crate::client::{
    Client, IDEMPOTENT_MISMATCH, INVALID_PARAMETER_VALUE, UNSUPPORTED, connect, filter,
    is_instance_not_found,
};
use crate::config::{
    Config, IMAGES_ENV, MAX_ROOT_VOLUME_GB, ROOT_VOLUME_ENV, SECURITY_GROUP_ENV, SUBNETS_ENV,
    canonical_owner, is_ami_id,
};
use crate::model::{
    Image, NAME_TAG, RunRequest, into_machine, labels_of, machine_of, state_of, timestamp,
};

mod named;

/// The driver's kind.
pub const KIND: &str = "ec2";

/// How many times a create moves to a fresh ClientToken because the one before named a machine that
/// was since terminated (a name made, deleted and made again). EC2 answers a token with its
/// terminated instance for at least a day, so a program that reuses its names (a host recreated, a
/// numbered VM made again) walks one generation per earlier use of the name in that time: one
/// RunInstances each, answered at once. The bound only stops a walk that would not end.
const MAX_TOKEN_GENERATIONS: usize = 64;

/// Instance states `machines` lists: every one but terminated.
const LISTED_STATES: [&str; 5] = ["pending", "running", "shutting-down", "stopping", "stopped"];
/// Every instance state: a create waits for its instance to show in any.
const ALL_STATES: [&str; 6] = [
    "pending",
    "running",
    "shutting-down",
    "stopping",
    "stopped",
    "terminated",
];
/// Instance states a create adopts: alive ones.
const ADOPTED_STATES: [&str; 4] = ["pending", "running", "stopping", "stopped"];

/// The longest pause between two reads while the driver waits out EC2's eventual consistency.
const MAX_CONSISTENCY_PAUSE: Duration = Duration::from_secs(2);

/// Machines as EC2 instances in one region, made and seen as one owner's. Made by
/// [`Ec2Provider::new`], [`crate::from_env`] or [`crate::from_settings`].
pub struct Ec2Provider {
    owner: String,
    region: String,
    pub(crate) client: Client,
    subnets: BTreeMap<String, String>,
    security_group: String,
    instance_profile: String,
    images: BTreeMap<Arch, String>,
    root_volume_gb: Option<i32>,
    page_size: i32,
    poll_interval: Duration,
    operation_timeout: Duration,
    visibility_window: Duration,
    confirm_not_found: Duration,
    new_profile_wait: Duration,
    arch_cache: Mutex<HashMap<String, Arch>>,
    image_cache: Mutex<HashMap<Arch, Image>>,
    spec_image_cache: Mutex<HashMap<String, Image>>,
    /// Instances this provider made (answered as made by a create), within the visibility window:
    /// EC2 may not show them yet, so a "not found" for one is read again before it is believed; and
    /// a later create that EC2 answers with one of them adopts it.
    made: Recent,
    /// Creates stopped before they answered: `delete_named` of such a name reads again within the
    /// visibility window before it believes "nothing there".
    stopped: StoppedCreates,
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
            .field("visibility_window", &self.visibility_window)
            .field("confirm_not_found", &self.confirm_not_found)
            .finish_non_exhaustive()
    }
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
    format!("orca-{}", hex::encode(&h.finalize()[..20]))
}

/// A digest of what a RunInstances asks for (all but its ClientToken): two requests with the same
/// digest are the same request.
fn request_digest(r: &RunRequest) -> String {
    let mut h = Sha256::new();
    let root = r.root_volume_gb.or(r.image.root_volume_gb).unwrap_or(0);
    let tags: Vec<String> = r.tags.iter().map(|(k, v)| format!("{k}={v}")).collect();
    for part in [
        r.image.id.as_str(),
        r.machine_type.as_str(),
        r.subnet.as_str(),
        r.security_group.as_str(),
        r.instance_profile.as_str(),
        r.user_data_b64.as_str(),
        &root.to_string(),
        &tags.join("\u{1}"),
    ] {
        h.update(part.as_bytes());
        h.update([0u8]);
    }
    hex::encode(&h.finalize()[..10])
}

/// Whether `inst`, which EC2 answered to this call's RunInstances, was made by this call (else an
/// earlier create made it: adopted). EC2 answers a ClientToken it has seen exactly as a new one, with
/// the instance in its state of now, so the driver tells them apart by what it knows:
/// - an instance launched before this call first sent the token (`began`, by the earliest EC2's
///   clock may read then: [`crate::client::Ec2Clock`]; EC2's times have whole seconds, so an
///   instance launched within the same second counts as launched since), or already
///   answered as made by this provider (`known`), is an earlier call's, whatever this call's
///   attempts met (a 503 may come before EC2 acted);
/// - otherwise, after an attempt of this call that may have reached EC2 and lost its answer
///   (`attempts`: a 5xx, a timeout, a dropped connection; not a throttling answer), it is this
///   call's in any state;
/// - otherwise it is this call's only when it is `pending` (a new instance is).
fn made_by_this_call(
    inst: &Instance,
    began: Timestamp,
    attempts: &Attempts,
    known: impl FnOnce() -> bool,
) -> bool {
    let launched_before = inst
        .launch_time()
        .and_then(timestamp)
        .is_some_and(|l| l + chrono::Duration::seconds(1) <= began);
    if launched_before || known() {
        return false;
    }
    attempts.may_have_made() || state_of(inst) == "pending"
}

/// Whether an instance in `state` is gone or going (terminated, or shutting down).
fn going(state: &str) -> bool {
    matches!(state, "terminated" | "shutting-down")
}

impl Ec2Provider {
    /// A provider for `owner` (empty for none) with `config`: the SDK client is set up (aws-config's
    /// chain supplies the region and credentials the config does not give; credentials are resolved
    /// at the first call). Makes no call to EC2.
    pub async fn new(config: Config, owner: &str) -> Result<Ec2Provider> {
        validate_owner(owner)?;
        let (sdk, region, clock) = connect(&config).await?;
        Ok(Ec2Provider {
            owner: owner.to_string(),
            region,
            client: Client::new(sdk, config.retry, clock),
            subnets: config.subnets,
            security_group: config.security_group,
            instance_profile: config.instance_profile,
            images: config.images,
            root_volume_gb: config.root_volume_gb,
            page_size: config.page_size,
            poll_interval: config.poll_interval,
            operation_timeout: config.operation_timeout,
            visibility_window: config.visibility_window,
            confirm_not_found: config.confirm_not_found,
            new_profile_wait: config.new_profile_wait,
            arch_cache: Mutex::new(HashMap::new()),
            image_cache: Mutex::new(HashMap::new()),
            spec_image_cache: Mutex::new(HashMap::new()),
            made: Recent::new(config.visibility_window),
            stopped: StoppedCreates::new(config.visibility_window),
        })
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

    /// The pause before read number `retry` while waiting out eventual consistency.
    fn pause(&self, retry: u32) -> Duration {
        self.client
            .retry
            .backoff(retry)
            .clamp(Duration::from_millis(5), MAX_CONSISTENCY_PAUSE)
    }

    /// Instance `id` as EC2 shows it now (`None`: EC2 does not know it). A "not found" is never
    /// believed at once (EC2 may not show a new instance to every call yet): the driver reads again,
    /// with backoff, until EC2 shows it or the window ends: the consistency window since this
    /// provider made it, else the confirmation window from now.
    pub(crate) async fn read(&self, id: &str) -> Result<Option<Instance>> {
        let until = self.made.confirm_until(id, self.confirm_not_found);
        kit::read_until_seen(
            until,
            |n| self.pause(n),
            || self.client.describe_instance(id),
        )
        .await
    }

    /// Makes `change` on instance `id`, which a read has just shown. A "not found" from the change is
    /// never believed as it stands (EC2 is eventually consistent: one call may not see what another
    /// just showed): a confirming read follows, and while it shows the instance alive, or not at all,
    /// the change is made again with backoff, within the consistency window. False when the
    /// confirming read shows the instance terminated or shutting down.
    async fn change<F, Fut>(&self, id: &str, operation: &str, mut change: F) -> Result<bool>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<()>>,
    {
        let started = Instant::now();
        let mut retry = 0;
        loop {
            let e = match change().await {
                Ok(()) => return Ok(true),
                Err(e) if is_instance_not_found(&e) => e,
                Err(e) => return Err(e),
            };
            let seen = self.client.describe_instance(id).await?;
            if seen.as_ref().is_some_and(|i| going(state_of(i))) {
                return Ok(false);
            }
            let pause = self.pause(retry);
            if started.elapsed() + pause > self.visibility_window {
                let shown = if seen.is_some() {
                    "EC2 shows it"
                } else {
                    "EC2 showed it a moment before"
                };
                return Err(Error::transient(format!(
                    "{operation} of machine {id} was answered \"not found\" for {:?}, but {shown}: \
                     it may still be there; try again later",
                    self.visibility_window
                ))
                .with_operation(operation)
                .with_code(e.code().unwrap_or_default().to_string())
                .with_source(e)
                .with_retries(retry));
            }
            tracing::debug!(
                id,
                operation,
                retry,
                "EC2 answered not found for an instance it shows; again"
            );
            tokio::time::sleep(pause).await;
            retry += 1;
        }
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

    /// Instance `id` once a listing of `pool` shows it (`None`: not within the consistency window).
    /// Each look is a DescribeInstances listing (every page) with the listing's own tag filters and
    /// `instance-id`: EC2 may show a new instance to a read by id before its tags reach the filters a
    /// listing uses.
    async fn listed(&self, pool: &str, id: &str) -> Result<Option<Instance>> {
        let mut filters = self.pool_filters(pool, &ALL_STATES);
        filters.push(filter("instance-id", [id]));
        let until = Instant::now() + self.visibility_window;
        kit::read_until_seen(
            until,
            |n| self.pause(n),
            || async {
                // Every page: when it filters, EC2 may answer a short or empty page with a NextToken.
                let listed = self.list(&filters).await?;
                Ok(listed.into_iter().find(|i| i.instance_id() == Some(id)))
            },
        )
        .await
    }

    /// RunInstances, waiting out a new instance profile: for a while after IAM makes one, EC2
    /// refuses it as unknown ([`is_new_profile_refusal`]). That refusal made nothing, so the request
    /// (with its ClientToken) is sent again, with backoff, until `new_profile_wait` has passed; any
    /// other refusal is answered at once.
    async fn run_instance(&self, req: &RunRequest, attempts: &Attempts) -> Result<Instance> {
        let started = Instant::now();
        let mut retry = 0;
        loop {
            let e = match self.client.run_instance(req, attempts).await {
                Err(e) if is_new_profile_refusal(&e) => e,
                other => return other,
            };
            let pause = self.pause(retry);
            if started.elapsed() + pause > self.new_profile_wait {
                return Err(e.prefixed(&format!(
                    "EC2 refused instance profile {} for {:?} (IAM may not have made it known to \
                     EC2 yet, or it does not exist)",
                    req.instance_profile, self.new_profile_wait
                )));
            }
            tracing::debug!(retry, "EC2 does not know the instance profile yet; again");
            tokio::time::sleep(pause).await;
            retry += 1;
        }
    }

    async fn list(&self, filters: &[Filter]) -> Result<Vec<Instance>> {
        all_pages(|token| self.client.describe_page(filters, self.page_size, token)).await
    }

    /// Every page of a listing, as machines ([`crate::client::Client::describe_machines`]).
    async fn list_machines(&self, filters: &[Filter]) -> Result<Vec<Machine>> {
        all_pages(|token| {
            self.client
                .describe_machines(filters, self.page_size, token)
        })
        .await
    }

    /// The live machine EC2 made for ClientToken `token`, which it answered
    /// `IdempotentParameterMismatch`: an earlier create of this name made it, perhaps with its answer
    /// lost. EC2 holds an instance for the token, so it is read by the token itself (the
    /// `client-token` filter), within the visibility window: tag filters may not show it yet, and a
    /// create of the name must not make a second one meanwhile. Answered once a listing of the pool
    /// shows it, as a create's own machine is. When it is gone, a later generation of the name's
    /// tokens may hold a live one ([`Ec2Provider::made_for_later_generation`]). `None` when none
    /// lives (the name is free) or the token's instance never shows.
    async fn made_for_token(&self, spec: &MachineSpec, token: &str) -> Result<Option<Machine>> {
        let filters = [filter("client-token", [token])];
        let until = Instant::now() + self.visibility_window;
        let inst = kit::read_until_seen(
            until,
            |n| self.pause(n),
            || async { Ok(self.list(&filters).await?.into_iter().next()) },
        )
        .await?;
        match inst {
            Some(inst) if !going(state_of(&inst)) => self.adopt_shown(spec, &inst).await.map(Some),
            // The token's instance was deleted: a later create of the name went on under the
            // generations derived from it, whose instance tag filters may not show yet.
            Some(_) => self.made_for_later_generation(spec).await,
            None => Ok(None),
        }
    }

    /// The live instance of this owner's `spec.name` in `spec.pool` that a later generation of the
    /// name's ClientTokens holds, adopted as [`Ec2Provider::adopt_shown`] adopts it.
    async fn made_for_later_generation(&self, spec: &MachineSpec) -> Result<Option<Machine>> {
        let held = self.made_for_tokens(&spec.pool, &spec.name).await?;
        let live = held.into_iter().find(|i| {
            let labels = labels_of(i);
            !going(state_of(i))
                && labels.get(NAME_TAG).map(String::as_str) == Some(spec.name.as_str())
                && is_in_pool(&labels, &spec.pool, &self.owner)
        });
        match live {
            Some(inst) => self.adopt_shown(spec, &inst).await.map(Some),
            None => Ok(None),
        }
    }

    /// Live instance `inst` that EC2 holds for one of this name's ClientTokens, checked to be in the
    /// spec's place and this owner's, answered once a listing of the pool shows it, as a create's
    /// own machine is.
    async fn adopt_shown(&self, spec: &MachineSpec, inst: &Instance) -> Result<Machine> {
        let found = machine_of(inst);
        same_place(&found, spec)?;
        kit::check_owned(&found.id, &found.labels, &self.owner)?;
        let Some(seen) = self.listed(&spec.pool, &found.id).await? else {
            return Err(Error::transient(format!(
                "create of {}: EC2 holds {} for this create's ClientToken but a listing of pool {} \
                 did not show it within {:?}; a create of the same spec adopts it",
                spec.name, found.id, spec.pool, self.visibility_window
            ))
            .with_operation("create"));
        };
        Ok(machine_of(&seen))
    }

    /// The live machine of `spec`'s name under any of the name's ClientTokens: a later generation's
    /// ([`Ec2Provider::made_for_later_generation`], which tag filters may not show yet), else one the
    /// tag listing shows ([`Ec2Provider::find_made`], which finds salted tokens' too). Either is
    /// refused when of another type or zone.
    async fn live_named(&self, spec: &MachineSpec) -> Result<Option<Machine>> {
        match self.made_for_later_generation(spec).await? {
            Some(m) => Ok(Some(m)),
            None => self.find_made(spec).await,
        }
    }

    /// The live machine this owner made for `spec` earlier under another ClientToken, if any.
    async fn find_made(&self, spec: &MachineSpec) -> Result<Option<Machine>> {
        let mut filters = self.pool_filters(&spec.pool, &ADOPTED_STATES);
        filters.push(filter(&format!("tag:{NAME_TAG}"), [spec.name.as_str()]));
        let mut found: Vec<Machine> = self
            .list_machines(&filters)
            .await?
            .into_iter()
            .filter(|m| m.name == spec.name && is_in_pool(&m.labels, &spec.pool, &self.owner))
            .collect();
        found.sort_by(|a, b| a.id.cmp(&b.id));
        let Some(m) = found.into_iter().next() else {
            return Ok(None);
        };
        same_place(&m, spec)?;
        Ok(Some(m))
    }

    /// Canonical's image for `arch`, or the configured one (checked to be of that architecture).
    async fn image(&self, arch: &Arch) -> Result<Image> {
        if let Some(i) = lock(&self.image_cache).get(arch) {
            return Ok(i.clone());
        }
        let image = match self.images.get(arch) {
            Some(ami) => {
                let image = self.client.image_by_id(ami).await?.ok_or_else(|| {
                    Error::settings(
                        [IMAGES_ENV],
                        format!("image {ami} for {arch} does not exist in {}", self.region),
                    )
                })?;
                if &image.arch != arch {
                    return Err(Error::settings(
                        [IMAGES_ENV],
                        format!("image {ami} is for {}, not {arch}", image.arch),
                    ));
                }
                image
            }
            None => {
                let owner = canonical_owner(&self.region);
                self.client.ubuntu_image(arch, owner).await?
            }
        };
        tracing::debug!(region = %self.region, %arch, image = %image.id, name = %image.name, "image chosen");
        lock(&self.image_cache).insert(arch.clone(), image.clone());
        Ok(image)
    }

    /// The spec's own image `ami`, checked to exist and to be of `arch` (the machine type's).
    async fn spec_image(&self, ami: &str, arch: &Arch, machine_type: &str) -> Result<Image> {
        let cached = lock(&self.spec_image_cache).get(ami).cloned();
        let image = match cached {
            Some(i) => i,
            None => {
                let i = self.client.image_by_id(ami).await?.ok_or_else(|| {
                    Error::invalid("image", format!("no image {ami} in {}", self.region))
                })?;
                lock(&self.spec_image_cache).insert(ami.to_string(), i.clone());
                i
            }
        };
        if &image.arch != arch {
            return Err(Error::invalid(
                "image",
                format!(
                    "{ami} is an {} image, but {machine_type} is {arch}",
                    image.arch
                ),
            ));
        }
        Ok(image)
    }

    /// Instance `id` if this owner made it: NotFound when EC2 does not know it (or it is terminated),
    /// NotOwned when it is not this owner's.
    pub(crate) async fn owned(&self, id: &str) -> Result<Instance> {
        validate_id(id)?;
        let inst = self
            .read(id)
            .await?
            .filter(|i| state_of(i) != "terminated")
            .ok_or_else(|| Error::not_found(format!("machine {id}")))?;
        kit::check_owned(id, &labels_of(&inst), &self.owner)?;
        Ok(inst)
    }

    /// Follows instance `id` until its state is one of `want` (`None`: EC2 no longer knows it), read
    /// every `poll_interval` within `operation_timeout` (`kit::poll`; after it, `Transient`: EC2 goes
    /// on with the change). NotFound once the instance is gone.
    async fn wait_for(&self, id: &str, want: &[&str]) -> Result<Option<Instance>> {
        let wanted = want.join(" or ");
        let what = format!("the wait for machine {id} to be {wanted}");
        kit::poll(
            &what,
            self.poll_interval,
            self.operation_timeout,
            || async {
                let inst = self.read(id).await?;
                let state = inst.as_ref().map(state_of).unwrap_or("terminated");
                if want.contains(&state) {
                    return Ok(Some(inst));
                }
                if inst.is_none() || state == "terminated" {
                    return Err(Error::not_found(format!(
                        "machine {id} (terminated while waiting for {wanted})"
                    )));
                }
                Ok(None)
            },
        )
        .await
    }

    /// Terminates instance `id`, which a read has just shown in `state` (not terminated) and this
    /// owner's, and follows it to `terminated`: true once it is.
    async fn terminate(&self, id: &str, state: &str) -> Result<bool> {
        // A "not found" from TerminateInstances for an instance just read is not "gone": `change`
        // confirms it by reading, and terminates again while EC2 shows it alive.
        if state != "shutting-down"
            && !self
                .change(id, "TerminateInstances", || self.client.terminate(id))
                .await?
        {
            return Ok(true);
        }
        // The root volume is DeleteOnTermination: it goes with the instance.
        match self.wait_for(id, &["terminated"]).await {
            Ok(_) | Err(Error::NotFound { .. }) => Ok(true),
            Err(e) => Err(e),
        }
    }

    /// `change`, where an instance gone meanwhile (being deleted) is NotFound.
    pub(crate) async fn change_live<F, Fut>(
        &self,
        id: &str,
        operation: &str,
        change: F,
    ) -> Result<()>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<()>>,
    {
        if self.change(id, operation, change).await? {
            Ok(())
        } else {
            Err(Error::not_found(format!("machine {id} (being deleted)")))
        }
    }

    async fn stop_call(&self, id: &str) -> Result<()> {
        self.change_live(id, "StopInstances", || self.client.stop(id))
            .await
    }

    async fn start_call(&self, id: &str) -> Result<()> {
        self.change_live(id, "StartInstances", || self.client.start(id))
            .await
    }

    async fn set_type_call(&self, id: &str, machine_type: &str) -> Result<()> {
        self.change_live(id, "ModifyInstanceAttribute", || {
            self.client.set_instance_type(id, machine_type)
        })
        .await
    }

    /// Stops `inst` (running or pending) and waits until it is stopped.
    async fn stop_and_wait(&self, inst: &Instance) -> Result<Instance> {
        let id = inst.instance_id().unwrap_or_default();
        match state_of(inst) {
            "stopped" => return Ok(inst.clone()),
            "pending" => {
                self.wait_for(id, &["running", "stopped"]).await?;
                self.stop_call(id).await?
            }
            "stopping" => {}
            _ => self.stop_call(id).await?,
        }
        self.wait_for(id, &["stopped"])
            .await?
            .ok_or_else(|| Error::not_found(format!("machine {id}")))
    }

    async fn described(&self, id: &str) -> Result<Machine> {
        self.read(id)
            .await?
            .map(into_machine)
            .ok_or_else(|| Error::not_found(format!("machine {id}")))
    }

    /// The root volume's size for `spec` with `image`: the spec's `disk_gb`, else the configured size,
    /// else the image's own; never less than the image's snapshot (EC2 refuses that), checked before
    /// the create call.
    fn root_volume(&self, spec: &MachineSpec, image: &Image) -> Result<Option<i32>> {
        let floor = image.root_volume_gb.unwrap_or(1);
        match spec.disk_gb {
            Some(gb) => {
                let gb = i32::try_from(gb).unwrap_or(i32::MAX);
                if gb > MAX_ROOT_VOLUME_GB || gb < floor {
                    return Err(Error::invalid(
                        "disk_gb",
                        format!(
                            "{floor} to {MAX_ROOT_VOLUME_GB} GiB on EC2 (image {} needs at least \
                             {floor}), got {gb}",
                            image.id
                        ),
                    ));
                }
                Ok(Some(gb))
            }
            None => match self.root_volume_gb {
                Some(gb) if gb < floor => Err(Error::settings(
                    [ROOT_VOLUME_ENV],
                    format!(
                        "{gb} GiB is less than the {floor} GiB of image {}",
                        image.id
                    ),
                )),
                other => Ok(other),
            },
        }
    }

    /// The RunInstances request of `spec`, its image, root volume and tags settled and checked
    /// before any change is sent.
    async fn run_request(&self, spec: &MachineSpec) -> Result<RunRequest> {
        let subnet = self.subnet_for(&spec.location)?.to_string();
        if let Some(ami) = &spec.image
            && !is_ami_id(ami)
        {
            return Err(Error::invalid(
                "image",
                format!("an AMI id (ami- and 8 or 17 hex digits), got {ami:?}"),
            ));
        }
        // A type EC2 does not have in the region is bad input, not a machine gone.
        let arch = match self.arch(&spec.machine_type).await {
            Err(Error::NotFound { what, .. }) => {
                return Err(Error::invalid("machine_type", format!("EC2 has no {what}")));
            }
            other => other?,
        };
        let image = match &spec.image {
            Some(ami) => self.spec_image(ami, &arch, &spec.machine_type).await?,
            None => self.image(&arch).await?,
        };
        let root_volume_gb = self.root_volume(spec, &image)?;
        let mut tags = ownership_labels(&spec.pool, &self.owner);
        tags.insert(NAME_TAG.to_string(), spec.name.clone());
        for (k, v) in &spec.labels {
            tags.insert(k.clone(), v.clone());
        }
        Ok(RunRequest {
            image,
            machine_type: spec.machine_type.clone(),
            subnet,
            security_group: self.security_group.clone(),
            instance_profile: self.instance_profile.clone(),
            user_data_b64: aws_smithy_types::base64::encode(spec.user_data.as_bytes()),
            tags,
            client_token: client_token(&self.owner, &spec.pool, &spec.name, None),
            root_volume_gb,
        })
    }

    /// The machine `id` that EC2 made or named for `req`, answered once a listing of its pool shows
    /// it: a listing, a read or a delete right after must find it. `made_now`: made by this call.
    async fn shown(
        &self,
        spec: &MachineSpec,
        req: &RunRequest,
        id: &str,
        made_now: bool,
    ) -> Result<Created> {
        // The instance exists from here on: a read that fails (throttled, say) must not tell the
        // caller that the create made nothing, or it would give up a name that has a machine.
        let Some(seen) = self
            .listed(&spec.pool, id)
            .await
            .map_err(Error::with_may_have_acted)?
        else {
            return Err(Error::transient(format!(
                "create of {}: EC2 made {id} but did not show it within {:?}; a create of the \
                 same spec adopts it",
                spec.name, self.visibility_window
            ))
            .with_operation("create"));
        };
        // EC2 ends an instance that fails at launch within seconds of RunInstances: no machine.
        if going(state_of(&seen)) {
            return launch_ended(spec, &seen);
        }
        let mut m = machine_of(&seen);
        // A read may lag behind the tags set in the create call itself.
        for (k, v) in &req.tags {
            m.labels.entry(k.clone()).or_insert_with(|| v.clone());
        }
        m.name = spec.name.clone();
        m.pool = spec.pool.clone();
        if m.location.is_empty() {
            m.location = spec.location.clone();
        }
        Ok(if made_now {
            Created::Machine(m)
        } else {
            Created::Adopted(m)
        })
    }

    /// [`Provider::create`], under the guard that notes it when it is stopped before it answers.
    async fn make(&self, spec: &MachineSpec, unanswered: &kit::CreateGuard<'_>) -> Result<Created> {
        spec.validate()?;
        self.capabilities().check_spec(KIND, spec)?;
        let mut req = self.run_request(spec).await?;
        // Whether this call has looked for a live machine of the name under the name's other tokens.
        let mut looked = false;
        for _ in 0..MAX_TOKEN_GENERATIONS {
            // Whether an attempt with this token failed in a way that may have reached EC2 (a 5xx, a
            // timeout, a lost answer; not a throttling answer): the instance EC2 then answers for the
            // token may be this call's.
            let attempts = Attempts::new();
            // When this call first sent this token, by this machine's clock: an instance launched
            // before is an earlier call's (read by EC2's clock once it has answered).
            let began = Utc::now();
            // One policy for every retry; RunInstances is only ever re-sent with its ClientToken, which
            // EC2 answers with the instance it made for it.
            unanswered.sending();
            let outcome = self.run_instance(&req, &attempts).await;
            let inst = match outcome {
                Ok(inst) => inst,
                Err(e) if e.code() == Some(IDEMPOTENT_MISMATCH) => {
                    // The token was used with other parameters (user data, labels, a newer image) by
                    // a machine of this name: a live one is adopted (or refused when of another type
                    // or zone); a gone one leaves the name free, and a token salted with this
                    // request's digest is this request's own (the same on every retry of it).
                    // EC2 made an instance for this token once: a read that fails here leaves it
                    // unknown whether that instance lives, so the failure never says "made nothing".
                    let found = match self.made_for_token(spec, &req.client_token).await {
                        Ok(Some(m)) => Some(m),
                        Ok(None) => self
                            .find_made(spec)
                            .await
                            .map_err(Error::with_may_have_acted)?,
                        Err(e) => return Err(e.with_may_have_acted()),
                    };
                    if let Some(m) = found {
                        return Ok(Created::Adopted(m));
                    }
                    looked = true;
                    tracing::debug!("ClientToken was used with other parameters; next generation");
                    let salt = format!("{}+{}", req.client_token, request_digest(&req));
                    req.client_token =
                        client_token(&self.owner, &spec.pool, &spec.name, Some(&salt));
                    continue;
                }
                Err(Error::NoStock { message, .. }) => return Ok(kit::no_stock(spec, message)),
                Err(e) if e.code() == Some(UNSUPPORTED) => return self.unsupported(spec, e).await,
                Err(e) => return Err(setting_refused(e, &req)),
            };
            let state = state_of(&inst).to_string();
            let id = inst.instance_id().unwrap_or_default().to_string();
            if going(&state) {
                // This call's own instance, ended at once: EC2 ends one that fails at launch. It is
                // no earlier generation, and the next token would only launch another.
                let began = self.client.clock.earliest(began);
                if made_by_this_call(&inst, began, &attempts, || self.made.contains(&id)) {
                    return launch_ended(spec, &inst);
                }
                // The token named an instance of this name that was since deleted: a new generation.
                // A create with other parameters may have made the name's machine under a token of
                // its own meanwhile (salted, or of a later generation): the next token, never sent,
                // would launch a second one beside it. Looked for once a call: the look walks every
                // generation, and the plain create never comes here.
                if !looked {
                    looked = true;
                    if let Some(m) = self.live_named(spec).await? {
                        return Ok(Created::Adopted(m));
                    }
                }
                tracing::debug!(
                    old = id,
                    "ClientToken names a terminated instance; next generation"
                );
                req.client_token = client_token(&self.owner, &spec.pool, &spec.name, Some(&id));
                continue;
            }
            same_place(&machine_of(&inst), spec)?;
            let began = self.client.clock.earliest(began);
            let made_now = made_by_this_call(&inst, began, &attempts, || self.made.contains(&id));
            self.made.note(id.clone());
            return self.shown(spec, &req, &id, made_now).await;
        }
        Err(Error::other(format!(
            "create of {}: {MAX_TOKEN_GENERATIONS} ClientTokens in a row named terminated instances \
             (the name was made and deleted that many times while EC2 remembers its tokens, at least \
             a day); nothing was made: use another name",
            spec.name
        )))
    }

    /// What a create answers when EC2 says `Unsupported`: no stock when EC2 does not offer the type in
    /// the spec's zone (DescribeInstanceTypeOfferings); otherwise the configuration is what EC2
    /// refuses, and the error says so, keeping EC2's code and words.
    async fn unsupported(&self, spec: &MachineSpec, e: Error) -> Result<Created> {
        let (t, z) = (&spec.machine_type, &spec.location);
        match self.client.offered_in(t, z).await {
            Ok(false) => Ok(kit::no_stock(
                spec,
                format!("EC2 does not offer {t} in {z}: {e}"),
            )),
            Ok(true) => Err(e.prefixed(&format!(
                "create of {}: EC2 offers {t} in {z}, so this is no lack of capacity but a \
                 configuration it does not support (image, volume or type)",
                spec.name
            ))),
            Err(lookup) => Err(e.prefixed(&format!(
                "create of {}: could not tell whether EC2 offers {t} in {z} ({lookup})",
                spec.name
            ))),
        }
    }
}

/// The settings error of a RunInstances refused for a subnet or security group of the settings that
/// EC2 does not know (`InvalidSubnetID.NotFound`, `InvalidGroup.NotFound`: nothing is made); any
/// other error as it is.
fn setting_refused(e: Error, req: &RunRequest) -> Error {
    let (key, what) = match e.code() {
        Some("InvalidSubnetID.NotFound") => (SUBNETS_ENV, format!("subnet {}", req.subnet)),
        Some("InvalidGroup.NotFound") => (
            SECURITY_GROUP_ENV,
            format!("security group {}", req.security_group),
        ),
        _ => return e,
    };
    Error::settings([key], format!("EC2 does not know {what}: {e}"))
}

/// Whether `e` is EC2 refusing the instance profile as unknown: `InvalidParameterValue` naming the
/// parameter `iamInstanceProfile` ("Value (...) for parameter iamInstanceProfile.name is invalid.
/// Invalid IAM Instance Profile name"), as it answers for a while after IAM made the profile.
fn is_new_profile_refusal(e: &Error) -> bool {
    e.code() == Some(INVALID_PARAMETER_VALUE)
        && e.to_string().contains("parameter iamInstanceProfile")
}

/// What a create answers when its instance `inst` EC2 shows shutting down or terminated right after
/// RunInstances: EC2 ends an instance that fails at launch and says why in its state reason. No
/// capacity for the type in the zone is no stock there (an ended instance leaves nothing to remove);
/// a volume limit is a quota; EC2's internal error is worth another try (a retry meets this
/// instance ended under its ClientToken and launches a new one under the next); any other reason
/// (a KMS key it may not use, a snapshot gone) is an error keeping EC2's code and words. The
/// instance was made (may have acted): `delete_named` of the name clears what is left of it.
fn launch_ended(spec: &MachineSpec, inst: &Instance) -> Result<Created> {
    let id = inst.instance_id().unwrap_or_default();
    let reason = inst.state_reason();
    let code = reason.and_then(|r| r.code()).unwrap_or_default();
    let why = reason
        .and_then(|r| r.message())
        .unwrap_or("EC2 gave no reason");
    let message = format!(
        "create of {}: EC2 made {id}, but it is {} at once ({why}): no machine was made",
        spec.name,
        state_of(inst)
    );
    let e = match code {
        "Server.InsufficientInstanceCapacity" => return Ok(kit::no_stock(spec, message)),
        "Client.VolumeLimitExceeded" => Error::quota(message),
        "Server.InternalError" | "Client.InternalError" => Error::transient(message),
        _ => Error::other(message),
    };
    let e = e.with_operation("create").with_may_have_acted();
    Err(if code.is_empty() {
        e
    } else {
        e.with_code(code)
    })
}

/// Refuses a machine found for `spec` that has another type or zone.
fn same_place(m: &Machine, spec: &MachineSpec) -> Result<()> {
    if m.machine_type != spec.machine_type
        || (!m.location.is_empty() && m.location != spec.location)
    {
        return Err(Error::already_exists(format!(
            "machine {} ({}) of pool {} is a {} in {}, not a {} in {}: delete it or use another name",
            m.name, m.id, spec.pool, m.machine_type, m.location, spec.machine_type, spec.location
        )));
    }
    Ok(())
}

#[async_trait]
impl Provider for Ec2Provider {
    fn kind(&self) -> &str {
        KIND
    }

    fn owner(&self) -> &str {
        &self.owner
    }

    fn capabilities(&self) -> Capabilities {
        // No hourly price: EC2 has no price call; the Price List API is another service (its own
        // endpoint, IAM action and a catalogue of many megabytes) whose on-demand figure ignores
        // savings plans and reservations. See the README, which also says why the other options are
        // refused.
        Capabilities::NONE
            .with_start_stop(true)
            .with_resize(true)
            .with_power_times(true)
            .with_private_address(true)
            .with_options(
                SpecOptions::NONE
                    .with("labels", true)
                    .with("disk_gb", true)
                    .with("image", true),
            )
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
        // A create dropped once EC2 accepted its RunInstances leaves an instance that reads may not
        // show yet: its name is noted, so that `delete_named` of it looks again.
        let unanswered = self.stopped.start(&spec.pool, &spec.name);
        let answer = self.make(spec, &unanswered).await;
        unanswered.answered();
        answer
    }

    async fn machines(&self, pool: &str) -> Result<Vec<Machine>> {
        validate_pool(pool)?;
        let filters = self.pool_filters(pool, &LISTED_STATES);
        Ok(self
            .list_machines(&filters)
            .await?
            .into_iter()
            .filter(|m| is_in_pool(&m.labels, pool, &self.owner))
            .collect())
    }

    /// One filtered listing: the pool's ownership tags and the `Name` tag (every page).
    async fn machine_named(&self, pool: &str, name: &str) -> Result<Option<Machine>> {
        validate_pool(pool)?;
        validate_name(name)?;
        let mut filters = self.pool_filters(pool, &LISTED_STATES);
        filters.push(filter(&format!("tag:{NAME_TAG}"), [name]));
        let found = self.list_machines(&filters).await?;
        Ok(first_made(found.into_iter().filter(|m| {
            m.name == name && is_in_pool(&m.labels, pool, &self.owner)
        })))
    }

    async fn machine(&self, id: &str) -> Result<Option<Machine>> {
        match self.owned(id).await {
            Ok(i) => Ok(Some(into_machine(i))),
            Err(Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn delete(&self, id: &str) -> Result<bool> {
        validate_id(id)?;
        let Some(inst) = self.read(id).await? else {
            return Ok(true);
        };
        let state = state_of(&inst);
        if state == "terminated" {
            return Ok(true);
        }
        kit::check_owned(id, &labels_of(&inst), &self.owner)?;
        self.terminate(id, state).await
    }

    /// Every instance of this owner's `pool` named `name` that is not terminated, each followed to
    /// its end: those tag filters show (the listing of [`Provider::machine_named`]), and those the
    /// create's ClientTokens name ([`client_token`] and its later generations), which EC2 shows
    /// before its tag filters catch up with a new instance. An instance is removed only when its
    /// own tags say it is this owner's, of `pool` and named `name`. True when one was removed; one
    /// that could not be is named in [`Error::Leftovers`].
    async fn delete_named(&self, pool: &str, name: &str) -> Result<bool> {
        self.remove_named(pool, name).await
    }

    async fn start(&self, id: &str) -> Result<Machine> {
        let inst = self.owned(id).await?;
        match state_of(&inst) {
            "running" | "pending" => return Ok(machine_of(&inst)),
            "stopping" => {
                self.wait_for(id, &["stopped"]).await?;
            }
            "shutting-down" => {
                return Err(Error::not_found(format!("machine {id} (being deleted)")));
            }
            _ => {}
        }
        let m = machine_of(&inst);
        self.start_call(id)
            .await
            .map_err(|e| e.with_placement(&m.machine_type, &m.location))?;
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
            return Ok(Resized::new(current, false));
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
        if let Err(e) = self.set_type_call(id, machine_type).await {
            if was_running && let Err(again) = self.start_call(id).await {
                tracing::warn!(id, error = %again, "could not start the machine again after a failed resize");
            }
            return Err(e);
        }
        if was_running && let Err(e) = self.start_call(id).await {
            let Error::NoStock { message, .. } = e else {
                return Err(e);
            };
            // No stock of the new type: the machine goes back to the type it had and runs again,
            // rather than staying stopped on a type it cannot start.
            let old = current.machine_type.as_str();
            let back = match self.set_type_call(id, old).await {
                Ok(()) => self.start_call(id).await,
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
        Ok(Resized::new(self.described(id).await?, was_running))
    }

    fn machine_labels(&self) -> Option<&dyn MachineLabels> {
        Some(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> RunRequest {
        crate::model::tests::run_request()
    }

    /// A ClientToken names the instance across versions of the driver (a process restarted on a
    /// newer version retries a create with it): its value never changes.
    #[test]
    fn tokens_and_digests_keep_their_values() {
        assert_eq!(
            client_token("stack-1", "lab", "w-1", None),
            "orca-2601bc6cea053854258c3f32af501d61bf724a33"
        );
        assert_eq!(
            client_token("stack-1", "lab", "w-1", Some("i-0abc")),
            "orca-1e82fd259734a36e1587dcc29108f8ba82c2a214"
        );
        assert_eq!(request_digest(&request()), "0aa8ce7e101a7fa0bc70");
    }

    #[test]
    fn made_now_or_adopted_by_launch_time_state_and_attempts() {
        use aws_sdk_ec2::types::{InstanceState, InstanceStateName};
        let began = Timestamp::from_timestamp(1_000, 500_000_000).unwrap();
        let inst = |launched: i64, state: InstanceStateName| {
            Instance::builder()
                .instance_id("i-1")
                .launch_time(aws_smithy_types::DateTime::from_secs(launched))
                .state(InstanceState::builder().name(state).build())
                .build()
        };
        let fresh = Attempts::new();
        let pending = InstanceStateName::Pending;
        // Launched in the second this call began, or later: this call's.
        assert!(made_by_this_call(
            &inst(1_000, pending.clone()),
            began,
            &fresh,
            || false
        ));
        assert!(made_by_this_call(
            &inst(1_002, pending.clone()),
            began,
            &fresh,
            || false
        ));
        // Launched a second before, still pending: an earlier call's.
        assert!(!made_by_this_call(
            &inst(999, pending.clone()),
            began,
            &fresh,
            || false
        ));
        // Running, or already answered as made by this provider: an earlier call's.
        assert!(!made_by_this_call(
            &inst(1_000, InstanceStateName::Running),
            began,
            &fresh,
            || false
        ));
        assert!(!made_by_this_call(
            &inst(1_000, pending.clone()),
            began,
            &fresh,
            || true
        ));
        // A throttling answer served nothing; a lost answer may have made it.
        fresh.record::<()>(&Err(Error::throttled(None, "RequestLimitExceeded")));
        assert!(!made_by_this_call(
            &inst(999, pending.clone()),
            began,
            &fresh,
            || false
        ));
        fresh.record::<()>(&Err(Error::transient("connection reset")));
        assert!(made_by_this_call(
            &inst(1_000, InstanceStateName::Running),
            began,
            &fresh,
            || false
        ));
        // A passing failure may as well have made nothing (a 503 before EC2 acted): an instance
        // launched before this call first sent the token, or already answered as made by this
        // provider, stays an earlier call's.
        for (launched, state, known) in [
            (999, InstanceStateName::Running, true),
            (999, InstanceStateName::Running, false),
            (999, pending.clone(), false),
            (1_000, pending.clone(), true),
            (1_000, InstanceStateName::Running, true),
        ] {
            assert!(
                !made_by_this_call(&inst(launched, state.clone()), began, &fresh, || known),
                "launched {launched}, {state:?}, known {known}"
            );
        }
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
