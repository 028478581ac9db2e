//! The EC2 calls the driver makes, through aws-sdk-ec2, each in a `tracing` span, under orca's one retry
//! policy, and the one function that maps EC2's errors onto orca's ([`map_error`]), keeping EC2's code
//! and the SDK error as the cause.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use aws_config::BehaviorVersion;
use aws_sdk_ec2::config::Region;
use aws_sdk_ec2::config::http::HttpResponse;
use aws_sdk_ec2::config::interceptors::{
    BeforeDeserializationInterceptorContextRef, BeforeTransmitInterceptorContextRef,
};
use aws_sdk_ec2::config::retry::RetryConfig;
use aws_sdk_ec2::config::timeout::TimeoutConfig;
use aws_sdk_ec2::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_ec2::error::{BoxError, DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_ec2::operation::RequestId;
use aws_sdk_ec2::types::{
    ArchitectureValues, AttributeValue, BlockDeviceMapping, EbsBlockDevice, Filter,
    IamInstanceProfileSpecification, Instance, InstanceType, LocationType, ResourceType, Tag,
    TagSpecification,
};
use orca_machines::chrono;
use orca_machines::kit::{self, Attempts};
use orca_machines::labels::Labels;
use orca_machines::{
    Arch, Error, Machine, Page, Result, RetryPolicy, Timestamp, docker_arch, parse_retry_after,
};

use crate::config::{Config, REGION_ENV, UBUNTU_NAME_PATTERN};
use crate::listing::{LeanListing, Listing, Slot};
use crate::model::{Image, RunRequest};
use crate::provider::KIND;

/// EC2's code for an instance id it does not know (or does not show yet: eventual consistency).
pub(crate) const INSTANCE_NOT_FOUND: &str = "InvalidInstanceID.NotFound";
/// EC2's code for an instance id that cannot name any instance.
pub(crate) const INSTANCE_MALFORMED: &str = "InvalidInstanceID.Malformed";
/// EC2's code for a ClientToken used before with other parameters.
pub(crate) const IDEMPOTENT_MISMATCH: &str = "IdempotentParameterMismatch";
/// EC2's code for a parameter value it refuses (among them, for a while, an instance profile IAM
/// made a moment ago).
pub(crate) const INVALID_PARAMETER_VALUE: &str = "InvalidParameterValue";
/// EC2's code for a request it does not support: a type not offered in the zone, or a configuration
/// (see the provider's create).
pub(crate) const UNSUPPORTED: &str = "Unsupported";

/// EC2 error codes that mean no capacity of the type in that zone.
pub(crate) const NO_STOCK_CODES: &[&str] =
    &["InsufficientInstanceCapacity", "InsufficientHostCapacity"];

/// EC2 error codes that mean an account limit.
pub(crate) const QUOTA_CODES: &[&str] = &[
    "InstanceLimitExceeded",
    "VcpuLimitExceeded",
    "MaxSpotInstanceCountExceeded",
    "VolumeLimitExceeded",
    "InsufficientFreeAddressesInSubnet",
];

/// The region aws-config's chain finds (environment, profile, IMDS), if any.
pub(crate) async fn chain_region() -> Option<String> {
    aws_config::meta::region::RegionProviderChain::default_provider()
        .region()
        .await
        .map(|r| r.to_string())
}

/// The SDK client for `config`, and its region. With region and credentials given, nothing is read
/// from the process environment or the profile files; otherwise aws-config's standard chain supplies
/// what is missing (credentials are then resolved at the first call).
pub(crate) async fn connect(
    config: &Config,
) -> Result<(aws_sdk_ec2::Client, String, Arc<Ec2Clock>)> {
    let (builder, region) = match (&config.region, &config.credentials) {
        (Some(region), Some(credentials)) => (
            aws_sdk_ec2::config::Builder::new()
                .behavior_version(BehaviorVersion::latest())
                .region(Region::new(region.clone()))
                .credentials_provider(credentials.sdk()),
            region.clone(),
        ),
        _ => {
            let mut loader = aws_config::defaults(BehaviorVersion::latest());
            if let Some(r) = &config.region {
                loader = loader.region(Region::new(r.clone()));
            }
            if let Some(c) = &config.credentials {
                loader = loader.credentials_provider(c.sdk());
            }
            let sdk = loader.load().await;
            let region = sdk.region().map(|r| r.to_string()).ok_or_else(|| {
                Error::settings(
                    [REGION_ENV],
                    format!(
                        "missing {REGION_ENV} (no source of aws-config's region chain gave one)"
                    ),
                )
            })?;
            (aws_sdk_ec2::config::Builder::from(&sdk), region)
        }
    };
    let clock = Arc::new(Ec2Clock::default());
    let mut builder = builder
        // One retry policy, orca's: the SDK never retries on its own, so that no create is ever
        // re-sent blindly (every RunInstances carries its ClientToken anyway).
        .retry_config(RetryConfig::disabled())
        .interceptor(RecordCall {
            clock: clock.clone(),
        })
        .timeout_config(
            TimeoutConfig::builder()
                .connect_timeout(config.connect_timeout)
                .operation_attempt_timeout(config.request_timeout)
                .build(),
        );
    if let Some(e) = &config.endpoint {
        builder = builder.endpoint_url(e.trim_end_matches('/'));
    }
    Ok((
        aws_sdk_ec2::Client::from_conf(builder.build()),
        region,
        clock,
    ))
}

tokio::task_local! {
    /// The call span of the attempt being sent: [`RecordCall`] fills in the request and its answer.
    static CALL: tracing::Span;
}

/// Records each attempt's HTTP method, path and status on its call span (the SDK sends the request
/// out of the driver's sight; its own spans are the current ones while it does).
#[derive(Debug)]
struct RecordCall {
    clock: Arc<Ec2Clock>,
}

/// How far EC2's clock is at least ahead of this machine's, as its answers' `Date` headers show:
/// EC2 writes a launch time by its own clock, and this machine's may be seconds off (AWS
/// signatures allow minutes). An answer dated `D` (whole seconds, cut down) that arrives at local
/// time `R` was written at or before EC2's own `R`, so EC2's clock is at least `D - R` ahead: a
/// bound that holds whatever the answer's delay. The tightest bound of the last minute is kept (an
/// answer held up on the way gives a loose one), and none older, should this machine's clock be set.
#[derive(Debug)]
pub(crate) struct Ec2Clock {
    /// The tightest bound of the last minute, in milliseconds; `i64::MIN` before any dated answer.
    ahead_ms: AtomicI64,
    /// When (this machine's milliseconds since the epoch) that bound was noted.
    noted_ms: AtomicI64,
}

impl Default for Ec2Clock {
    fn default() -> Self {
        Ec2Clock {
            ahead_ms: AtomicI64::new(i64::MIN),
            noted_ms: AtomicI64::new(0),
        }
    }
}

/// How long a bound of EC2's clock is kept while looser ones come.
const CLOCK_BOUND_KEPT_MS: i64 = 60_000;

impl Ec2Clock {
    /// Notes an answer dated `date` (an HTTP date) that arrived now.
    fn note(&self, date: &str) {
        let Ok(d) = chrono::DateTime::parse_from_rfc2822(date) else {
            return;
        };
        let now = chrono::Utc::now();
        let ahead = (d.with_timezone(&chrono::Utc) - now).num_milliseconds();
        let now_ms = now.timestamp_millis();
        let kept = self.ahead_ms.load(Ordering::Relaxed);
        let fresh = now_ms - self.noted_ms.load(Ordering::Relaxed) < CLOCK_BOUND_KEPT_MS;
        if ahead >= kept || !fresh {
            self.ahead_ms.store(ahead, Ordering::Relaxed);
            self.noted_ms.store(now_ms, Ordering::Relaxed);
        }
    }

    /// The earliest time EC2's clock may read when this machine's reads `local`: `local` itself
    /// before any dated answer.
    pub(crate) fn earliest(&self, local: Timestamp) -> Timestamp {
        match self.ahead_ms.load(Ordering::Relaxed) {
            i64::MIN => local,
            ms => local + chrono::TimeDelta::milliseconds(ms),
        }
    }
}

impl Intercept for RecordCall {
    fn name(&self) -> &'static str {
        "orca.call"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> std::result::Result<(), BoxError> {
        let request = context.request();
        let _ = CALL.try_with(|span| {
            span.record("method", request.method());
            span.record("path", path_of(request.uri()));
        });
        Ok(())
    }

    fn read_before_deserialization(
        &self,
        context: &BeforeDeserializationInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> std::result::Result<(), BoxError> {
        let response = context.response();
        if let Some(date) = response.headers().get("date") {
            self.clock.note(date);
        }
        let status = response.status().as_u16();
        let _ = CALL.try_with(|span| {
            span.record("status", status);
        });
        Ok(())
    }
}

/// The path of `uri` (an absolute URI or a path), without its query.
fn path_of(uri: &str) -> &str {
    let rest = match uri.split_once("://") {
        Some((_, rest)) => rest.find('/').map_or("/", |i| &rest[i..]),
        None => uri,
    };
    rest.split(['?', '#'])
        .next()
        .filter(|p| !p.is_empty())
        .unwrap_or("/")
}

/// The SDK client with the driver's retry policy and a count of the requests it sent.
#[derive(Debug)]
pub(crate) struct Client {
    sdk: aws_sdk_ec2::Client,
    pub(crate) retry: RetryPolicy,
    requests: AtomicU64,
    /// EC2's clock, as its answers show it.
    pub(crate) clock: Arc<Ec2Clock>,
}

impl Client {
    pub(crate) fn new(sdk: aws_sdk_ec2::Client, retry: RetryPolicy, clock: Arc<Ec2Clock>) -> Self {
        Client {
            sdk,
            retry,
            requests: AtomicU64::new(0),
            clock,
        }
    }

    /// Requests sent so far (every attempt counts).
    pub(crate) fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// One attempt, inside its call span ([`kit::attempt`]): its request, status and request id
    /// recorded, its error mapped by [`map_error`].
    async fn send<T, E, Fut>(&self, operation: &'static str, call: Fut) -> Result<T>
    where
        Fut: Future<Output = std::result::Result<T, SdkError<E, HttpResponse>>>,
        T: RequestId,
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    {
        self.requests.fetch_add(1, Ordering::Relaxed);
        match CALL.scope(tracing::Span::current(), call).await {
            Ok(out) => {
                if let Some(id) = out.request_id() {
                    kit::record_request_id(id);
                }
                Ok(out)
            }
            Err(e) => {
                if let Some(id) = e.request_id() {
                    kit::record_request_id(id);
                }
                Err(map_error(operation, e))
            }
        }
    }

    /// One call through the kit ([`kit::call`]): under the retry policy (for calls that are safe to
    /// repeat), every attempt in the one call span.
    async fn call<T, E, F, Fut>(&self, operation: &'static str, mut call: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = std::result::Result<T, SdkError<E, HttpResponse>>>,
        T: RequestId,
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    {
        // Boxed: the SDK's futures are large, and a provider call holds several of them.
        Box::pin(kit::call(KIND, operation, &self.retry, || {
            self.send(operation, call())
        }))
        .await
    }

    /// The architecture of `machine_type` from DescribeInstanceTypes (`None`: no such type).
    pub(crate) async fn instance_type_arch(&self, machine_type: &str) -> Result<Option<Arch>> {
        let out = self
            .call("DescribeInstanceTypes", || {
                self.sdk
                    .describe_instance_types()
                    .instance_types(InstanceType::from(machine_type))
                    .send()
            })
            .await;
        let out = match out {
            Ok(o) => o,
            Err(Error::NotFound { .. }) => return Ok(None),
            Err(e) if e.code() == Some("InvalidInstanceType") => return Ok(None),
            Err(e) => return Err(e),
        };
        let Some(t) = out
            .instance_types()
            .iter()
            .find(|t| t.instance_type().map(|x| x.as_str()) == Some(machine_type))
        else {
            return Ok(None);
        };
        let archs: Vec<&str> = t
            .processor_info()
            .map(|p| {
                p.supported_architectures()
                    .iter()
                    .map(|a| a.as_str())
                    .collect()
            })
            .unwrap_or_default();
        // A type may list several (`i386` and `x86_64`): the 64-bit ones are what a machine boots.
        let arch = archs
            .iter()
            .map(|a| docker_arch(a))
            .find(|a| matches!(a, Arch::Amd64 | Arch::Arm64))
            .or_else(|| archs.first().map(|a| docker_arch(a)));
        Ok(Some(arch.ok_or_else(|| {
            Error::other(format!("EC2 names no architecture for {machine_type}"))
        })?))
    }

    /// Whether EC2 offers `machine_type` in availability zone `zone` (DescribeInstanceTypeOfferings).
    pub(crate) async fn offered_in(&self, machine_type: &str, zone: &str) -> Result<bool> {
        let out = self
            .call("DescribeInstanceTypeOfferings", || {
                self.sdk
                    .describe_instance_type_offerings()
                    .location_type(LocationType::AvailabilityZone)
                    .filters(filter("instance-type", [machine_type]))
                    .filters(filter("location", [zone]))
                    .send()
            })
            .await?;
        Ok(out.instance_type_offerings().iter().any(|o| {
            o.instance_type().map(|t| t.as_str()) == Some(machine_type)
                && o.location() == Some(zone)
        }))
    }

    /// Image `ami` (`None`: EC2 does not know it, or the id cannot name one).
    pub(crate) async fn image_by_id(&self, ami: &str) -> Result<Option<Image>> {
        let out = self
            .call("DescribeImages", || {
                self.sdk.describe_images().image_ids(ami).send()
            })
            .await;
        let out = match out {
            Ok(o) => o,
            Err(e)
                if matches!(
                    e.code(),
                    Some("InvalidAMIID.NotFound" | "InvalidAMIID.Malformed")
                ) =>
            {
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        Ok(out
            .images()
            .iter()
            .find(|i| i.image_id() == Some(ami))
            .map(image_of))
    }

    /// The newest of Canonical's Ubuntu 24.04 server images for `arch`, owned by `owner` (Canonical's
    /// account in the region's partition).
    pub(crate) async fn ubuntu_image(&self, arch: &Arch, owner: &str) -> Result<Image> {
        let ec2_arch = match arch {
            Arch::Amd64 => ArchitectureValues::X8664,
            Arch::Arm64 => ArchitectureValues::Arm64,
            Arch::Other(o) => {
                return Err(Error::not_found(format!(
                    "an Ubuntu 24.04 image for architecture {o}"
                )));
            }
        };
        let pattern = UBUNTU_NAME_PATTERN.replace("{arch}", arch.as_str());
        let out = self
            .call("DescribeImages", || {
                self.sdk
                    .describe_images()
                    .owners(owner)
                    .filters(filter("name", [pattern.as_str()]))
                    .filters(filter("architecture", [ec2_arch.as_str()]))
                    .filters(filter("state", ["available"]))
                    .send()
            })
            .await?;
        // Newest first: by creation date (ISO 8601, so text order is time order), then by name, whose
        // suffix is the build date.
        out.images()
            .iter()
            .filter(|i| i.image_id().is_some())
            // The owner filter is EC2's; checked again so that no lookalike can slip in.
            .filter(|i| i.owner_id() == Some(owner))
            .max_by(|a, b| (a.creation_date(), a.name()).cmp(&(b.creation_date(), b.name())))
            .map(image_of)
            .ok_or_else(|| {
                Error::not_found(format!(
                    "an Ubuntu 24.04 image for {arch} owned by {owner} ({pattern})"
                ))
            })
    }

    /// RunInstances with `r`'s ClientToken under the retry policy ([`kit::call_recorded`]): every
    /// attempt carries the same token, which EC2 answers with the instance it made for it; each
    /// attempt's outcome is recorded in `attempts`.
    pub(crate) async fn run_instance(
        &self,
        r: &RunRequest,
        attempts: &Attempts,
    ) -> Result<Instance> {
        Box::pin(kit::call_recorded(
            KIND,
            "RunInstances",
            &self.retry,
            attempts,
            || self.run_instance_once(r),
        ))
        .await
    }

    /// One RunInstances attempt.
    async fn run_instance_once(&self, r: &RunRequest) -> Result<Instance> {
        let tags = tags_of(&r.tags);
        let profile = if r.instance_profile.starts_with("arn:") {
            IamInstanceProfileSpecification::builder()
                .arn(&r.instance_profile)
                .build()
        } else {
            IamInstanceProfileSpecification::builder()
                .name(&r.instance_profile)
                .build()
        };
        // The root volume goes with the machine. EC2 wants a size or snapshot with any mapping: the
        // image's own size unless another one is asked for.
        let mut ebs = EbsBlockDevice::builder().delete_on_termination(true);
        if let Some(gb) = r.root_volume_gb.or(r.image.root_volume_gb) {
            ebs = ebs.volume_size(gb);
        }
        let root = BlockDeviceMapping::builder()
            .device_name(&r.image.root_device_name)
            .ebs(ebs.build())
            .build();
        let mut req = self
            .sdk
            .run_instances()
            .image_id(&r.image.id)
            .instance_type(InstanceType::from(r.machine_type.as_str()))
            .min_count(1)
            .max_count(1)
            .subnet_id(&r.subnet)
            .security_group_ids(&r.security_group)
            .iam_instance_profile(profile)
            .block_device_mappings(root)
            .client_token(&r.client_token)
            .tag_specifications(
                TagSpecification::builder()
                    .resource_type(ResourceType::Instance)
                    .set_tags(Some(tags.clone()))
                    .build(),
            )
            .tag_specifications(
                TagSpecification::builder()
                    .resource_type(ResourceType::Volume)
                    .set_tags(Some(tags))
                    .build(),
            );
        if !r.user_data_b64.is_empty() {
            req = req.user_data(&r.user_data_b64);
        }
        let out = self.send("RunInstances", req.send()).await?;
        out.instances()
            .first()
            .cloned()
            .ok_or_else(|| Error::transient("RunInstances answered no instance"))
    }

    /// One page of DescribeInstances with `filters`.
    pub(crate) async fn describe_page(
        &self,
        filters: &[Filter],
        max_results: i32,
        token: Option<String>,
    ) -> Result<Page<Instance>> {
        let out = self
            .call("DescribeInstances", || {
                self.sdk
                    .describe_instances()
                    .set_filters(Some(filters.to_vec()))
                    .max_results(max_results)
                    .set_next_token(token.clone())
                    .send()
            })
            .await?;
        // The instances are moved out of the answer, not copied: they are most of a listing's work.
        Ok(Page {
            items: out
                .reservations
                .unwrap_or_default()
                .into_iter()
                .flat_map(|r| r.instances.unwrap_or_default())
                .collect(),
            next: out.next_token,
        })
    }

    /// One page of DescribeInstances with `filters`, as machines. The SDK makes the call; a successful
    /// answer is read by the driver's own reader ([`crate::listing`]), which reads only what a machine
    /// is made of; an answer it leaves (an error, an odd shape) is read by the SDK, as before.
    pub(crate) async fn describe_machines(
        &self,
        filters: &[Filter],
        max_results: i32,
        token: Option<String>,
    ) -> Result<Page<Machine>> {
        let slot = Slot::default();
        let out = self
            .call("DescribeInstances", || {
                self.sdk
                    .describe_instances()
                    .set_filters(Some(filters.to_vec()))
                    .max_results(max_results)
                    .set_next_token(token.clone())
                    .customize()
                    .interceptor(LeanListing { slot: slot.clone() })
                    .send()
            })
            .await?;
        let read = kit::lock(&slot).take();
        // An answer the driver's reader left was read by the SDK: the same fields from its output.
        let (items, next) = read.unwrap_or_else(|| Listing::from(out)).machines();
        Ok(Page { items, next })
    }

    /// Instance `id`, in any state (`None`: EC2 does not know it, or does not show it yet).
    pub(crate) async fn describe_instance(&self, id: &str) -> Result<Option<Instance>> {
        let out = self
            .call("DescribeInstances", || {
                self.sdk.describe_instances().instance_ids(id).send()
            })
            .await;
        match out {
            Ok(o) => Ok(o
                .reservations()
                .iter()
                .flat_map(|r| r.instances())
                .find(|i| i.instance_id() == Some(id))
                .cloned()),
            Err(e) if is_instance_not_found(&e) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// TerminateInstances. A "not found" is the caller's to confirm (EC2 may not show a new instance
    /// to it yet).
    pub(crate) async fn terminate(&self, id: &str) -> Result<()> {
        self.call("TerminateInstances", || {
            self.sdk.terminate_instances().instance_ids(id).send()
        })
        .await
        .map(|_| ())
    }

    /// StopInstances.
    pub(crate) async fn stop(&self, id: &str) -> Result<()> {
        self.call("StopInstances", || {
            self.sdk.stop_instances().instance_ids(id).send()
        })
        .await
        .map(|_| ())
    }

    /// StartInstances.
    pub(crate) async fn start(&self, id: &str) -> Result<()> {
        self.call("StartInstances", || {
            self.sdk.start_instances().instance_ids(id).send()
        })
        .await
        .map(|_| ())
    }

    /// ModifyInstanceAttribute InstanceType (EC2 wants the instance stopped).
    pub(crate) async fn set_instance_type(&self, id: &str, machine_type: &str) -> Result<()> {
        self.call("ModifyInstanceAttribute", || {
            self.sdk
                .modify_instance_attribute()
                .instance_id(id)
                .instance_type(AttributeValue::builder().value(machine_type).build())
                .send()
        })
        .await
        .map(|_| ())
    }

    /// CreateTags on instance `id`: sets each tag of `tags`, leaving every other one as it is.
    pub(crate) async fn create_tags(&self, id: &str, tags: &Labels) -> Result<()> {
        let tags = tags_of(tags);
        self.call("CreateTags", || {
            self.sdk
                .create_tags()
                .resources(id)
                .set_tags(Some(tags.clone()))
                .send()
        })
        .await
        .map(|_| ())
    }

    /// DeleteTags on instance `id`: removes the tags `keys`, whatever their values.
    pub(crate) async fn delete_tags(&self, id: &str, keys: &[String]) -> Result<()> {
        let tags: Vec<Tag> = keys.iter().map(|k| Tag::builder().key(k).build()).collect();
        self.call("DeleteTags", || {
            self.sdk
                .delete_tags()
                .resources(id)
                .set_tags(Some(tags.clone()))
                .send()
        })
        .await
        .map(|_| ())
    }
}

/// `labels` as EC2 tags.
fn tags_of(labels: &Labels) -> Vec<Tag> {
    labels
        .iter()
        .map(|(k, v)| Tag::builder().key(k).value(v).build())
        .collect()
}

fn image_of(i: &aws_sdk_ec2::types::Image) -> Image {
    let root = i.root_device_name().unwrap_or("/dev/sda1").to_string();
    let root_volume_gb = i
        .block_device_mappings()
        .iter()
        .find(|m| m.device_name() == Some(root.as_str()))
        .and_then(|m| m.ebs())
        .and_then(|e| e.volume_size());
    Image {
        id: i.image_id().unwrap_or_default().to_string(),
        name: i.name().unwrap_or_default().to_string(),
        arch: docker_arch(i.architecture().map(|a| a.as_str()).unwrap_or("")),
        root_device_name: root,
        root_volume_gb,
    }
}

/// Whether `e` says EC2 does not know an instance id (`InvalidInstanceID.NotFound`, or `.Malformed`).
pub(crate) fn is_instance_not_found(e: &Error) -> bool {
    matches!(e.code(), Some(INSTANCE_NOT_FOUND | INSTANCE_MALFORMED))
}

/// A DescribeInstances/DescribeImages filter.
pub(crate) fn filter<'a>(name: &str, values: impl IntoIterator<Item = &'a str>) -> Filter {
    Filter::builder()
        .name(name)
        .set_values(Some(values.into_iter().map(str::to_string).collect()))
        .build()
}

/// Maps one failed EC2 call onto orca's errors: EC2's error code first, then the HTTP status, then
/// what happened on the way (timeouts and dropped connections are transient: for a create, the machine
/// may or may not have been made). The error keeps EC2's code ([`Error::code`]), the operation and the
/// SDK error as its cause; messages carry EC2's code and words, never credentials.
pub(crate) fn map_error<E>(operation: &str, err: SdkError<E, HttpResponse>) -> Error
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let (mapped, code) = match &err {
        SdkError::ServiceError(se) => {
            let status = se.raw().status().as_u16();
            let retry_after = se
                .raw()
                .headers()
                .get("retry-after")
                .and_then(parse_retry_after);
            let code = se.err().code().unwrap_or("").to_string();
            let words = se.err().message().unwrap_or("");
            let message = if code.is_empty() {
                format!("{operation}: HTTP {status}: {words}")
            } else {
                format!("{operation}: {code}: {words}")
            };
            let e = by_code(&code, status, retry_after, message);
            (e, (!code.is_empty()).then_some(code))
        }
        SdkError::TimeoutError(_) => (
            Error::transient(format!(
                "{operation}: timed out (it may or may not have taken effect)"
            )),
            None,
        ),
        SdkError::DispatchFailure(d) => {
            // Credentials are resolved when a request is sent: their failure arrives here.
            let e = credentials_failure(operation, &err).unwrap_or_else(|| {
                let what = if d.is_timeout() {
                    "timed out"
                } else if d.is_io() {
                    "connection failed"
                } else {
                    "could not be sent"
                };
                Error::transient(format!(
                    "{operation}: {what}: {}",
                    DisplayErrorContext(&err)
                ))
            });
            (e, None)
        }
        SdkError::ResponseError(_) => (
            Error::transient(format!(
                "{operation}: the answer was lost or unreadable (the call may have taken effect): {}",
                DisplayErrorContext(&err)
            )),
            None,
        ),
        _ => (
            Error::other(format!("{operation}: {}", DisplayErrorContext(&err))),
            None,
        ),
    };
    let mut mapped = mapped.with_operation(operation);
    if let Some(code) = code {
        mapped = mapped.with_code(code);
    }
    mapped.with_source(err)
}

/// The error EC2's `code` (empty: none) and the HTTP `status` mean, saying `message`.
fn by_code(
    code: &str,
    status: u16,
    retry_after: Option<std::time::Duration>,
    message: String,
) -> Error {
    match code {
        c if NO_STOCK_CODES.contains(&c) => Error::no_stock(String::new(), String::new(), message),
        c if QUOTA_CODES.contains(&c) => Error::quota(message),
        "RequestLimitExceeded" | "Throttling" | "ThrottlingException" => {
            Error::throttled(retry_after, message)
        }
        "AuthFailure"
        | "InvalidClientTokenId"
        | "UnrecognizedClientException"
        | "SignatureDoesNotMatch"
        | "ExpiredToken"
        | "RequestExpired"
        | "MissingAuthenticationToken"
        | "IncompleteSignature" => Error::unauthenticated(message),
        "UnauthorizedOperation"
        | "AccessDenied"
        | "AccessDeniedException"
        | "Blocked"
        | "OptInRequired"
        | "PendingVerification" => Error::permission_denied(message),
        IDEMPOTENT_MISMATCH => Error::already_exists(format!(
            "{message} (the ClientToken was used before with other parameters)"
        )),
        // The instance's state does not allow the call yet (a stop of a pending instance, a type
        // change of one still stopping): it passes as the state changes, as a lock does.
        "IncorrectInstanceState" | "IncorrectState" => Error::busy(message),
        "InvalidInstanceType" => Error::not_found(message),
        c if c.ends_with(".NotFound") || c.ends_with(".Malformed") => Error::not_found(message),
        "InternalError" | "InternalFailure" | "ServiceUnavailable" | "Unavailable" => {
            Error::transient(message)
        }
        "" => Error::from_http_status(status, message, retry_after),
        _ if status >= 500 => Error::transient(message),
        // `Unsupported` among them: what it means depends on the call (the provider's create
        // tells a type not offered in the zone from a configuration EC2 refuses).
        _ => Error::other(message),
    }
}

/// The failure to resolve credentials among the causes of `err`, if it is one.
fn credentials_failure(operation: &str, err: &(dyn std::error::Error + 'static)) -> Option<Error> {
    let mut source = Some(err);
    while let Some(s) = source {
        if let Some(c) = s.downcast_ref::<aws_credential_types::provider::error::CredentialsError>()
        {
            return Some(Error::unauthenticated(format!(
                "{operation}: no usable AWS credentials: {c}"
            )));
        }
        source = s.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_ec2::operation::run_instances::RunInstancesError;
    use aws_smithy_types::body::SdkBody;
    use aws_smithy_types::error::ErrorMetadata;
    use std::error::Error as _;

    #[test]
    fn ec2s_clock_is_read_as_the_least_its_dates_show_it_ahead() {
        let clock = Ec2Clock::default();
        let now = chrono::Utc::now();
        assert_eq!(clock.earliest(now), now, "before any dated answer");
        let http_date = |t: Timestamp| t.format("%a, %d %b %Y %H:%M:%S GMT").to_string();
        // EC2's clock 10 s ahead: its dates have whole seconds, cut down, so at least 9 s.
        clock.note(&http_date(
            chrono::Utc::now() + chrono::TimeDelta::seconds(10),
        ));
        let ahead = clock.earliest(now) - now;
        assert!(
            (9_000..=10_000).contains(&ahead.num_milliseconds()),
            "{ahead}"
        );
        // An answer held up on the way (dated 5 s before it came) gives a looser bound: the
        // tighter one stays; a date that is no HTTP date changes nothing.
        clock.note(&http_date(
            chrono::Utc::now() + chrono::TimeDelta::seconds(5),
        ));
        clock.note("yesterday");
        assert_eq!(clock.earliest(now) - now, ahead);
        // A clock behind EC2's; a looser bound replaces a tighter one once its minute is over.
        let behind = Ec2Clock::default();
        behind.note(&http_date(
            chrono::Utc::now() - chrono::TimeDelta::seconds(5),
        ));
        let b = behind.earliest(now) - now;
        assert!((-6_000..=-5_000).contains(&b.num_milliseconds()), "{b}");
        behind.noted_ms.store(0, Ordering::Relaxed);
        behind.note(&http_date(
            chrono::Utc::now() - chrono::TimeDelta::seconds(8),
        ));
        let later = behind.earliest(now) - now;
        assert!(
            (-9_000..=-8_000).contains(&later.num_milliseconds()),
            "{later}"
        );
    }

    fn service_error(status: u16, code: &str) -> SdkError<RunInstancesError, HttpResponse> {
        let meta = ErrorMetadata::builder()
            .code(code)
            .message("the cloud's words")
            .build();
        let raw = HttpResponse::new(status.try_into().unwrap(), SdkBody::from("<Response/>"));
        SdkError::service_error(RunInstancesError::generic(meta), raw)
    }

    #[test]
    fn the_span_path_is_the_uris_path_without_its_query() {
        assert_eq!(path_of("https://ec2.us-east-1.amazonaws.com/"), "/");
        assert_eq!(path_of("http://127.0.0.1:9"), "/");
        assert_eq!(path_of("http://127.0.0.1:9/x/y?Action=Run"), "/x/y");
        assert_eq!(path_of("/?a=b"), "/");
    }

    #[test]
    fn codes_have_their_meaning_and_are_kept() {
        use orca_machines::ErrorKind as K;
        let cases = [
            (500, "InsufficientInstanceCapacity", K::NoStock),
            (400, "Unsupported", K::Other),
            (400, "InstanceLimitExceeded", K::Quota),
            (400, "VcpuLimitExceeded", K::Quota),
            (503, "RequestLimitExceeded", K::Throttled),
            (401, "AuthFailure", K::Unauthenticated),
            (403, "UnauthorizedOperation", K::PermissionDenied),
            (400, "IdempotentParameterMismatch", K::AlreadyExists),
            (400, "InvalidInstanceID.NotFound", K::NotFound),
            (400, "InvalidAMIID.Malformed", K::NotFound),
            (500, "InternalError", K::Transient),
            (503, "SomethingNew", K::Transient),
            (400, "InvalidParameterValue", K::Other),
        ];
        for (status, code, kind) in cases {
            let e = map_error("RunInstances", service_error(status, code));
            assert_eq!(e.kind(), kind, "{code}: {e}");
            assert_eq!(e.code(), Some(code));
            assert_eq!(e.operation(), Some("RunInstances"));
            assert!(e.to_string().contains(code), "{e}");
            assert!(e.source().is_some(), "{code}: the SDK error is the cause");
        }
        assert!(
            !map_error("RunInstances", service_error(400, "InstanceLimitExceeded")).is_retryable()
        );
        assert!(
            map_error("RunInstances", service_error(503, "RequestLimitExceeded")).is_retryable()
        );
    }
}
