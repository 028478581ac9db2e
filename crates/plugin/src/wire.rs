//! The contract's types to and from their protocol messages, both ways, so that a round trip keeps
//! every fact.

use std::time::Duration;

use orca_machines::ext::{Admission, AdmissionRule, Balance, FirewallPorts, FirewallRule, Network};
use orca_machines::machine::Timestamp;
use orca_machines::{
    Capabilities, Created, Error, Machine, MachineSpec, Price, Resized, Result, SpecOptions, Status,
};

use crate::proto::v1 as pb;

/// A time as the wire carries it: RFC 3339 in UTC, empty for none.
pub(crate) fn time_to(t: Option<Timestamp>) -> String {
    t.map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true))
        .unwrap_or_default()
}

pub(crate) fn time_from(field: &str, s: &str) -> Result<Option<Timestamp>> {
    if s.is_empty() {
        return Ok(None);
    }
    chrono::DateTime::parse_from_rfc3339(s)
        .map(|t| Some(t.with_timezone(&chrono::Utc)))
        .map_err(|e| bad_reply(format!("{field} {s:?} is not an RFC 3339 time: {e}")))
}

/// A reply the host cannot read: the plugin broke the protocol.
pub(crate) fn bad_reply(what: impl std::fmt::Display) -> Error {
    Error::other(format!(
        "the plugin answered outside the CloudDriver protocol: {what}"
    ))
}

fn status_to(s: Status) -> pb::Status {
    match s {
        Status::Starting => pb::Status::Starting,
        Status::Running => pb::Status::Running,
        Status::Stopping => pb::Status::Stopping,
        Status::Stopped => pb::Status::Stopped,
        Status::Deleting => pb::Status::Deleting,
        Status::Unknown => pb::Status::Unknown,
    }
}

fn status_from(s: i32) -> Status {
    match pb::Status::try_from(s).unwrap_or(pb::Status::Unknown) {
        pb::Status::Starting => Status::Starting,
        pb::Status::Running => Status::Running,
        pb::Status::Stopping => Status::Stopping,
        pb::Status::Stopped => Status::Stopped,
        pb::Status::Deleting => Status::Deleting,
        pb::Status::Unknown => Status::Unknown,
    }
}

/// A machine as the wire carries it, its strings moved, not copied: a listing of thousands pays
/// no second copy of each.
pub(crate) fn machine_to(m: Machine) -> pb::Machine {
    pb::Machine {
        status: status_to(m.status) as i32,
        created_at: time_to(m.created_at),
        started_at: time_to(m.started_at),
        stopped_at: time_to(m.stopped_at),
        max_run_duration_secs: m.max_run_duration.map(|d| d.as_secs()),
        id: m.id,
        name: m.name,
        cloud_status: m.cloud_status,
        machine_type: m.machine_type,
        location: m.location,
        address: m.address,
        private_address: m.private_address,
        fqdn: m.fqdn,
        pool: m.pool,
        labels: m.labels,
    }
}

pub(crate) fn machine_from(w: pb::Machine) -> Result<Machine> {
    let mut m = Machine::new(w.id, w.name);
    m.status = status_from(w.status);
    m.cloud_status = w.cloud_status;
    m.machine_type = w.machine_type;
    m.location = w.location;
    m.address = w.address;
    m.private_address = w.private_address;
    m.fqdn = w.fqdn;
    m.pool = w.pool;
    m.labels = w.labels;
    m.created_at = time_from("created_at", &w.created_at)?;
    m.started_at = time_from("started_at", &w.started_at)?;
    m.stopped_at = time_from("stopped_at", &w.stopped_at)?;
    m.max_run_duration = w.max_run_duration_secs.map(Duration::from_secs);
    Ok(m)
}

impl From<Machine> for pb::Machine {
    fn from(m: Machine) -> Self {
        machine_to(m)
    }
}

/// A machine from the wire; a time that is not one is the peer breaking the protocol.
impl TryFrom<pb::Machine> for Machine {
    type Error = Error;
    fn try_from(w: pb::Machine) -> Result<Self> {
        machine_from(w)
    }
}

/// The machine a reply must carry.
pub(crate) fn required_machine(m: Option<pb::Machine>) -> Result<Machine> {
    machine_from(m.ok_or_else(|| bad_reply("a reply without its machine"))?)
}

pub(crate) fn spec_to(s: &MachineSpec) -> pb::MachineSpec {
    pb::MachineSpec {
        name: s.name.clone(),
        machine_type: s.machine_type.clone(),
        location: s.location.clone(),
        user_data: s.user_data.clone(),
        pool: s.pool.clone(),
        labels: s.labels.clone(),
        disk_gb: s.disk_gb,
        ssh_keys: s.ssh_keys.clone(),
        network_tags: s.network_tags.clone(),
        max_run_duration_secs: s.max_run_duration.map(|d| d.as_secs()),
        image: s.image.clone(),
        ssh_sources: s.ssh_sources.clone(),
        admission_group: s.admission_group.clone(),
    }
}

pub(crate) fn spec_from(w: pb::MachineSpec) -> MachineSpec {
    let mut s = MachineSpec::new(w.name, w.machine_type, w.location, w.pool);
    s.user_data = w.user_data;
    s.labels = w.labels;
    s.disk_gb = w.disk_gb;
    s.ssh_keys = w.ssh_keys;
    s.network_tags = w.network_tags;
    s.max_run_duration = w.max_run_duration_secs.map(Duration::from_secs);
    s.image = w.image;
    s.ssh_sources = w.ssh_sources;
    s.admission_group = w.admission_group;
    s
}

impl std::fmt::Debug for pb::MachineSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MachineSpec")
            .field("name", &self.name)
            .field("machine_type", &self.machine_type)
            .field("location", &self.location)
            .field(
                "user_data",
                &format_args!("<{} bytes>", self.user_data.len()),
            )
            .field("pool", &self.pool)
            .finish_non_exhaustive()
    }
}

pub(crate) fn capabilities_to(c: &Capabilities) -> pb::Capabilities {
    pb::Capabilities {
        start_stop: c.start_stop,
        resize: c.resize,
        hourly_price: c.hourly_price,
        power_times: c.power_times,
        private_address: c.private_address,
        options: c.options.names().into_iter().map(String::from).collect(),
    }
}

pub(crate) fn capabilities_from(w: &pb::Capabilities) -> Capabilities {
    let options = w
        .options
        .iter()
        .fold(SpecOptions::NONE, |o, name| o.with(name, true));
    Capabilities::NONE
        .with_start_stop(w.start_stop)
        .with_resize(w.resize)
        .with_hourly_price(w.hourly_price)
        .with_power_times(w.power_times)
        .with_private_address(w.private_address)
        .with_options(options)
}

pub(crate) fn created_to(c: Created) -> pb::create_reply::Outcome {
    use pb::create_reply::Outcome;
    match c {
        Created::Machine(m) => Outcome::Made(machine_to(m)),
        Created::Adopted(m) => Outcome::Adopted(machine_to(m)),
        Created::NoStock {
            machine_type,
            location,
            message,
            left,
        } => Outcome::NoStock(pb::NoStock {
            machine_type,
            location,
            message,
            left,
        }),
    }
}

/// A no-stock answer from its message; one without `left` (an older plugin's) is a clean no stock.
pub(crate) fn no_stock_from(w: pb::NoStock) -> Created {
    Created::NoStock {
        machine_type: w.machine_type,
        location: w.location,
        message: w.message,
        left: w.left,
    }
}

pub(crate) fn resized_to(r: Resized) -> pb::Resized {
    pb::Resized {
        machine: Some(machine_to(r.machine)),
        caused_downtime: r.caused_downtime,
    }
}

pub(crate) fn resized_from(w: pb::Resized) -> Result<Resized> {
    Ok(Resized::new(
        required_machine(w.machine)?,
        w.caused_downtime,
    ))
}

pub(crate) fn price_to(p: &Price) -> pb::Price {
    pb::Price {
        hourly: p.hourly,
        currency: p.currency.clone(),
    }
}

pub(crate) fn price_from(w: pb::Price) -> Price {
    Price::new(w.hourly, w.currency)
}

fn ports_to(p: &[FirewallPorts]) -> Vec<pb::FirewallPorts> {
    p.iter()
        .map(|p| pb::FirewallPorts {
            protocol: p.protocol.clone(),
            ports: p.ports.clone(),
        })
        .collect()
}

fn ports_from(p: Vec<pb::FirewallPorts>) -> Vec<FirewallPorts> {
    p.into_iter()
        .map(|p| FirewallPorts::new(&p.protocol, p.ports))
        .collect()
}

pub(crate) fn rule_to(r: &FirewallRule) -> pb::FirewallRule {
    pb::FirewallRule {
        name: r.name.clone(),
        network: r.network.clone(),
        direction: r.direction.clone(),
        disabled: r.disabled,
        priority: r.priority,
        allowed: ports_to(&r.allowed),
        denied: ports_to(&r.denied),
        source_ranges: r.source_ranges.clone(),
        source_tags: r.source_tags.clone(),
        source_service_accounts: r.source_service_accounts.clone(),
        destination_ranges: r.destination_ranges.clone(),
        target_tags: r.target_tags.clone(),
        target_service_accounts: r.target_service_accounts.clone(),
    }
}

pub(crate) fn rule_from(w: pb::FirewallRule) -> FirewallRule {
    let mut r = FirewallRule::new(w.name, w.network);
    r.direction = w.direction;
    r.disabled = w.disabled;
    r.priority = w.priority;
    r.allowed = ports_from(w.allowed);
    r.denied = ports_from(w.denied);
    r.source_ranges = w.source_ranges;
    r.source_tags = w.source_tags;
    r.source_service_accounts = w.source_service_accounts;
    r.destination_ranges = w.destination_ranges;
    r.target_tags = w.target_tags;
    r.target_service_accounts = w.target_service_accounts;
    r
}

pub(crate) fn network_to(n: &Network) -> pb::Network {
    pb::Network {
        name: n.name.clone(),
        auto_create_subnetworks: n.auto_create_subnetworks,
        subnetworks: n.subnetworks.clone(),
    }
}

pub(crate) fn network_from(w: pb::Network) -> Network {
    let mut n = Network::new(w.name);
    n.auto_create_subnetworks = w.auto_create_subnetworks;
    n.subnetworks = w.subnetworks;
    n
}

pub(crate) fn admission_to(a: &Admission) -> pb::Admission {
    pb::Admission {
        group: a.group.clone(),
        rule: a.rule.as_ref().map(|r| pb::AdmissionRule {
            security_group: r.security_group.clone(),
            name: r.name.clone(),
            priority: r.priority,
        }),
        readmitted: a.readmitted.clone(),
        missing: a.missing.clone(),
    }
}

pub(crate) fn admission_from(w: pb::Admission) -> Admission {
    let mut a = Admission::new(w.group);
    a.rule = w
        .rule
        .map(|r| AdmissionRule::new(r.security_group, r.name, r.priority));
    a.readmitted = w.readmitted;
    a.missing = w.missing;
    a
}

pub(crate) fn balance_to(b: &Balance) -> pb::Balance {
    pb::Balance {
        amount: b.amount,
        currency: b.currency.clone(),
        as_of: time_to(b.as_of),
    }
}

pub(crate) fn balance_from(w: pb::Balance) -> Result<Balance> {
    let mut b = Balance::new(w.amount, w.currency);
    b.as_of = time_from("as_of", &w.as_of)?;
    Ok(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use orca_machines::labels::Labels;

    #[test]
    fn a_machine_keeps_every_fact() {
        let mut m = Machine::new("m-1", "lab-1");
        m.status = Status::Stopped;
        m.cloud_status = "off".into();
        m.machine_type = "amd64-small".into();
        m.location = "zone-a".into();
        m.address = "203.0.113.7".into();
        m.private_address = "10.0.0.2".into();
        m.fqdn = "lab-1.example.invalid".into();
        m.pool = "lab".into();
        m.labels = Labels::from([("orca-pool".into(), "lab".into())]);
        m.created_at = Some("2026-12-03T04:01:37.123456789Z".parse().unwrap());
        m.started_at = Some("2026-12-03T04:02:00Z".parse().unwrap());
        m.stopped_at = Some("2026-12-03T05:00:00Z".parse().unwrap());
        m.max_run_duration = Some(Duration::from_secs(3600));
        assert_eq!(machine_from(machine_to(m.clone())).unwrap(), m);
        let bare = Machine::new("m-2", "b");
        assert_eq!(machine_from(machine_to(bare.clone())).unwrap(), bare);
    }

    #[test]
    fn a_spec_keeps_every_option_and_its_debug_hides_user_data() {
        let s = MachineSpec::new("a", "t", "l", "p")
            .with_user_data("#cloud-config\npassword: hunter2\n")
            .with_label("k", "v")
            .with_disk_gb(40)
            .with_ssh_key("ssh-ed25519 AAAA c")
            .with_network_tag("web")
            .with_max_run_duration(Duration::from_secs(90))
            .with_image("ubuntu-24.04")
            .with_ssh_sources(["203.0.113.7/32"])
            .with_admission_group("stado");
        let w = spec_to(&s);
        assert!(!format!("{w:?}").contains("hunter2"), "{w:?}");
        assert!(spec_from(w) == s);
    }

    #[test]
    fn capabilities_keep_every_flag_and_option() {
        for c in [
            Capabilities::ALL,
            Capabilities::NONE,
            Capabilities::NONE
                .with_resize(true)
                .with_options(SpecOptions::NONE.with("image", true)),
        ] {
            assert_eq!(capabilities_from(&capabilities_to(&c)), c);
        }
    }

    #[test]
    fn a_no_stock_keeps_what_its_clean_up_left_and_an_older_answer_reads_as_clean() {
        use pb::create_reply::Outcome;
        let spec = MachineSpec::new("n", "t", "l", "p");
        let marked = Error::no_stock("", "", "no room").with_leftovers(vec!["disk l:n-1".into()]);
        for c in [
            orca_machines::kit::no_stock(&spec, "no room"),
            orca_machines::kit::no_stock_of(&spec, marked).unwrap(),
        ] {
            let Outcome::NoStock(w) = created_to(c.clone()) else {
                panic!("{c:?}");
            };
            assert_eq!(no_stock_from(w), c);
        }
        // A plugin built before the field existed sends the first three fields only (each a
        // length-delimited string: its tag, its length, its bytes).
        let mut older = Vec::new();
        for (field, text) in [(1u8, "t"), (2, "l"), (3, "no room")] {
            older.extend([field << 3 | 2, text.len() as u8]);
            older.extend(text.as_bytes());
        }
        let read: pb::NoStock = prost::Message::decode(older.as_slice()).unwrap();
        assert_eq!(
            no_stock_from(read),
            orca_machines::kit::no_stock(&spec, "no room")
        );
    }

    #[test]
    fn a_bad_time_is_a_protocol_error() {
        let mut w = machine_to(Machine::new("m", "n"));
        w.created_at = "yesterday".into();
        let e = machine_from(w).unwrap_err();
        assert!(e.to_string().contains("created_at"), "{e}");
    }
}
