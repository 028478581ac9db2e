//! EC2's answers read into orca's model: an [`Instance`] as a [`Machine`] (state, tags, addresses, DNS
//! name and times), leniently (every field EC2 may leave out is optional here, and a state the driver
//! does not know is kept as EC2's word), and what a RunInstances asks for ([`RunRequest`]).

use aws_sdk_ec2::types::Instance;
use aws_smithy_types::DateTime as SdkTime;
use orca_machines::chrono::{DateTime, NaiveDateTime, Utc};
use orca_machines::labels::{Labels, pool_of};
use orca_machines::{Machine, Status, Timestamp};

/// The tag that holds the machine's name (EC2's console shows it).
pub const NAME_TAG: &str = "Name";

/// An image the driver boots machines from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Image {
    pub id: String,
    pub name: String,
    /// Docker's name of its architecture (`amd64`, `arm64`, or EC2's word).
    pub arch: orca_machines::Arch,
    pub root_device_name: String,
    pub root_volume_gb: Option<i32>,
}

/// What one RunInstances asks for. `Debug` is written by hand: it never shows the user data.
#[derive(Clone)]
pub(crate) struct RunRequest {
    pub image: Image,
    pub machine_type: String,
    pub subnet: String,
    pub security_group: String,
    pub instance_profile: String,
    /// Base64 of the spec's user data (empty: none). Never printed (user data may hold secrets):
    /// `Debug` shows its length only.
    pub user_data_b64: String,
    /// The instance's and its root volume's tags: orca's, `Name`, and the spec's own labels.
    pub tags: Labels,
    pub client_token: String,
    pub root_volume_gb: Option<i32>,
}

impl std::fmt::Debug for RunRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunRequest")
            .field("image", &self.image)
            .field("machine_type", &self.machine_type)
            .field("subnet", &self.subnet)
            .field("security_group", &self.security_group)
            .field("instance_profile", &self.instance_profile)
            .field(
                "user_data_b64",
                &format_args!("<{} bytes, redacted>", self.user_data_b64.len()),
            )
            .field("tags", &self.tags)
            .field("client_token", &self.client_token)
            .field("root_volume_gb", &self.root_volume_gb)
            .finish()
    }
}

/// EC2's state name of `i` (`pending`, `running`, ..., or a word the SDK does not know), or empty.
pub(crate) fn state_of(i: &Instance) -> &str {
    i.state()
        .and_then(|s| s.name())
        .map(|n| n.as_str())
        .unwrap_or("")
}

/// EC2's instance state in the shared set; a state orca does not know is [`Status::Unknown`] (the
/// machine keeps EC2's word in `cloud_status`).
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

/// The tags of `i` as labels (a tag without a value has the empty value).
pub(crate) fn labels_of(i: &Instance) -> Labels {
    i.tags()
        .iter()
        .filter_map(|t| Some((t.key()?.to_string(), t.value().unwrap_or("").to_string())))
        .collect()
}

/// An SDK timestamp as orca's.
pub(crate) fn timestamp(t: &SdkTime) -> Option<Timestamp> {
    DateTime::<Utc>::from_timestamp(t.secs(), t.subsec_nanos())
}

/// The time in a `StateTransitionReason` such as `User initiated (2026-01-02 03:04:05 GMT)`: the last
/// parenthesised `YYYY-MM-DD HH:MM:SS GMT` (UTC accepted as the same zone).
pub fn reason_time(reason: &str) -> Option<Timestamp> {
    let open = reason.rfind('(')?;
    let inner = reason[open + 1..].strip_suffix(')')?.trim();
    let stamp = inner
        .strip_suffix(" GMT")
        .or_else(|| inner.strip_suffix(" UTC"))?;
    let naive = NaiveDateTime::parse_from_str(stamp.trim(), "%Y-%m-%d %H:%M:%S").ok()?;
    Some(naive.and_utc())
}

/// `i` as a machine: its `Name` tag, state, type, zone, public and private IPv4 addresses, DNS name
/// (the public one, else the private one), pool and tags, and its times (see
/// [`InstanceFields::machine`]). A copy of `i` is converted: a listing converts the instances it owns
/// with [`into_machine`].
pub(crate) fn machine_of(i: &Instance) -> Machine {
    into_machine(i.clone())
}

/// `i` as a machine, as [`machine_of`] says, its strings moved into the machine rather than copied.
pub(crate) fn into_machine(i: Instance) -> Machine {
    InstanceFields::from(i).machine()
}

/// The members of an EC2 instance a [`Machine`] is made of, as EC2 wrote them (each optional, as in
/// the SDK's `Instance`). Both readers of a DescribeInstances answer fill it, the SDK's (through
/// `From<Instance>`) and the driver's own (`crate::listing`), and [`InstanceFields::machine`] is the
/// one conversion, so both give the same machine for the same answer.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct InstanceFields {
    pub id: Option<String>,
    /// `instanceState/name`.
    pub state: Option<String>,
    pub machine_type: Option<String>,
    /// `placement/availabilityZone`.
    pub zone: Option<String>,
    /// `ipAddress`.
    pub public_ip: Option<String>,
    pub private_ip: Option<String>,
    /// `dnsName`.
    pub public_dns: Option<String>,
    pub private_dns: Option<String>,
    pub launch_time: Option<SdkTime>,
    pub root_device: Option<String>,
    /// `blockDeviceMapping`: each mapping's device name and its EBS volume's attach time, in order.
    pub devices: Vec<(Option<String>, Option<SdkTime>)>,
    /// `reason` (the SDK's `StateTransitionReason`).
    pub reason: Option<String>,
    /// `tagSet`: each tag's key and value, in order.
    pub tags: Vec<(Option<String>, Option<String>)>,
}

impl From<Instance> for InstanceFields {
    fn from(i: Instance) -> Self {
        InstanceFields {
            id: i.instance_id,
            state: i.state.and_then(|s| s.name).map(|n| n.as_str().to_string()),
            machine_type: i.instance_type.map(|t| t.as_str().to_string()),
            zone: i.placement.and_then(|p| p.availability_zone),
            public_ip: i.public_ip_address,
            private_ip: i.private_ip_address,
            public_dns: i.public_dns_name,
            private_dns: i.private_dns_name,
            launch_time: i.launch_time,
            root_device: i.root_device_name,
            devices: i
                .block_device_mappings
                .unwrap_or_default()
                .into_iter()
                .map(|m| (m.device_name, m.ebs.and_then(|e| e.attach_time)))
                .collect(),
            reason: i.state_transition_reason,
            tags: i
                .tags
                .unwrap_or_default()
                .into_iter()
                .map(|t| (t.key, t.value))
                .collect(),
        }
    }
}

impl InstanceFields {
    /// The machine, as [`machine_of`] says. Its times: EC2 reports no creation time (`LaunchTime` is
    /// the last start), so `created_at` is the root volume's `Ebs.AttachTime` (attached at launch,
    /// it stays attached through stops and starts); without it (RunInstances' own answer and a
    /// `pending` instance often list no block device yet), `LaunchTime`, which is the creation time
    /// until a first stop. `started_at` is `LaunchTime`. `stopped_at` is the time EC2 writes into
    /// `StateTransitionReason` when an instance stops (`User initiated (2026-01-02 03:04:05 GMT)`),
    /// while it is stopped (or stopping); `None` while it runs, and when the reason carries no time.
    pub(crate) fn machine(self) -> Machine {
        let state = self.state.unwrap_or_default();
        // The root volume's attach time: the first mapping of the root device name, if it has one.
        let root_attached = self.root_device.as_ref().and_then(|root| {
            self.devices
                .iter()
                .find(|(name, _)| name.as_ref() == Some(root))
                .and_then(|(_, attached)| attached.as_ref())
        });
        let launched = self.launch_time.as_ref().and_then(timestamp);
        let created_at = root_attached.and_then(timestamp).or(launched);
        let stopped_at = match state.as_str() {
            "stopped" | "stopping" => self.reason.as_deref().and_then(reason_time),
            _ => None,
        };
        let labels: Labels = self
            .tags
            .into_iter()
            .filter_map(|(k, v)| Some((k?, v.unwrap_or_default())))
            .collect();
        let mut m = Machine::new(
            self.id.unwrap_or_default(),
            labels.get(NAME_TAG).cloned().unwrap_or_default(),
        );
        m.status = status_of(&state);
        m.cloud_status = state;
        m.machine_type = self.machine_type.unwrap_or_default();
        m.location = self.zone.unwrap_or_default();
        m.address = self.public_ip.unwrap_or_default();
        m.private_address = self.private_ip.unwrap_or_default();
        m.fqdn = [self.public_dns, self.private_dns]
            .into_iter()
            .flatten()
            .map(|d| match d.trim() {
                t if t.len() == d.len() => d,
                t => t.to_string(),
            })
            .find(|d| !d.is_empty())
            .unwrap_or_default();
        m.created_at = created_at;
        m.started_at = launched;
        m.stopped_at = stopped_at;
        m.pool = pool_of(&labels);
        m.labels = labels;
        m
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A RunRequest as a create sends it, for the tests of this crate.
    pub(crate) fn run_request() -> RunRequest {
        RunRequest {
            image: Image {
                id: "ami-12345678".into(),
                name: "ubuntu".into(),
                arch: orca_machines::Arch::Amd64,
                root_device_name: "/dev/sda1".into(),
                root_volume_gb: Some(8),
            },
            machine_type: "t3.micro".into(),
            subnet: "subnet-1".into(),
            security_group: "sg-1".into(),
            instance_profile: "orca-node".into(),
            user_data_b64: "I2Nsb3VkLWNvbmZpZwo=".into(),
            tags: Labels::from([("Name".to_string(), "w-1".to_string())]),
            client_token: "orca-0123".into(),
            root_volume_gb: None,
        }
    }
    use aws_sdk_ec2::types::{
        EbsInstanceBlockDevice, InstanceBlockDeviceMapping, InstanceState, InstanceStateName,
    };

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
    fn reasons() {
        let t = reason_time("User initiated (2026-01-02 03:04:05 GMT)").unwrap();
        assert_eq!(t.to_rfc3339(), "2026-01-02T03:04:05+00:00");
        assert_eq!(
            reason_time("User initiated (2026-01-02 03:04:05 UTC)"),
            Some(t)
        );
        for none in [
            "",
            "User initiated",
            "Server.ScheduledStop",
            "User initiated (yesterday)",
            "User initiated (2026-01-02 03:04:05 CET)",
        ] {
            assert_eq!(reason_time(none), None, "{none:?}");
        }
    }

    #[test]
    fn a_run_request_never_shows_its_user_data() {
        let secret = "#cloud-config\nwrite_files: [{content: db-password-hunter2}]\n";
        let b64 = aws_smithy_types::base64::encode(secret.as_bytes());
        let r = RunRequest {
            user_data_b64: b64.clone(),
            ..run_request()
        };
        for d in [format!("{r:?}"), format!("{r:#?}")] {
            // (Not printed on failure: the failure would show what it guards.)
            assert!(
                !d.contains(&b64) && !d.contains("hunter2"),
                "Debug of a RunRequest shows its user data"
            );
            assert!(
                d.contains("redacted") && d.contains("t3.micro") && d.contains("orca-0123"),
                "{d}"
            );
        }
    }

    fn at(s: i64) -> SdkTime {
        SdkTime::from_secs(s)
    }

    #[test]
    fn creation_is_the_root_volumes_attach_time_else_the_launch_time() {
        let base = Instance::builder()
            .instance_id("i-1")
            .root_device_name("/dev/sda1")
            .launch_time(at(2_000))
            .state(
                InstanceState::builder()
                    .name(InstanceStateName::Stopped)
                    .build(),
            )
            .state_transition_reason("User initiated (1970-01-01 00:50:00 GMT)");
        let bare = base.clone().build();
        assert_eq!(machine_of(&bare).created_at.unwrap().timestamp(), 2_000);
        let with_root = base
            .clone()
            .block_device_mappings(
                InstanceBlockDeviceMapping::builder()
                    .device_name("/dev/sdf")
                    .ebs(EbsInstanceBlockDevice::builder().attach_time(at(5)).build())
                    .build(),
            )
            .block_device_mappings(
                InstanceBlockDeviceMapping::builder()
                    .device_name("/dev/sda1")
                    .ebs(
                        EbsInstanceBlockDevice::builder()
                            .attach_time(at(1_000))
                            .build(),
                    )
                    .build(),
            )
            .build();
        let m = machine_of(&with_root);
        assert_eq!(m.created_at.unwrap().timestamp(), 1_000);
        assert_eq!(m.started_at.unwrap().timestamp(), 2_000);
        assert_eq!(m.stopped_at.unwrap().timestamp(), 3_000);
        assert_eq!((m.fqdn.as_str(), m.private_address.as_str()), ("", ""));
    }
}
