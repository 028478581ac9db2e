//! What a machine is ([`Machine`]) and the status set every cloud maps onto ([`Status`]).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::labels::Labels;

crate::words! {
    /// A machine's state, one set for every cloud ([contract](crate::contract) 4). The cloud's own word is kept in
    /// [`Machine::cloud_status`].
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
    #[serde(rename_all = "snake_case")]
    pub enum Status {
        /// Being made or booting.
        Starting = "starting",
        /// Running.
        Running = "running",
        /// Shutting down.
        Stopping = "stopping",
        /// Stopped (or deallocated, suspended): not running, still there.
        Stopped = "stopped",
        /// Being removed.
        Deleting = "deleting",
        /// A state the driver does not know; see [`Machine::cloud_status`].
        Unknown = "unknown",
    }
}

/// A point in time, in UTC, as RFC 3339 on the wire (`2026-12-03T04:01:37Z`).
pub type Timestamp = chrono::DateTime<chrono::Utc>;

/// How long before `now` the instant `then` was: zero when `then` is later (a time another
/// machine's clock wrote may be ahead of this one's).
pub fn since(now: Timestamp, then: Timestamp) -> Duration {
    (now - then).to_std().unwrap_or(Duration::ZERO)
}

/// A machine as a cloud reports it.
///
/// Facts a cloud does not report are empty (`""`) or `None`; each driver's README says which. Build
/// one with [`Machine::new`] and set the fields (the type grows, so it cannot be built literally outside
/// this crate).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Machine {
    /// The cloud's id for it: what `delete` takes.
    pub id: String,
    /// Its name (the spec's name).
    pub name: String,
    /// Its state in the shared set.
    pub status: Status,
    /// The cloud's own word for its state (`running`, `PROVISIONING`, `VM deallocated`, ...).
    pub cloud_status: String,
    /// Its machine type.
    pub machine_type: String,
    /// Its location.
    pub location: String,
    /// Its public address, or empty while it has none.
    pub address: String,
    /// Its address in its private network, or empty while it has none.
    #[serde(default)]
    pub private_address: String,
    /// The fully qualified DNS name the cloud gives it (EC2's DNS name, the Azure public address's DNS
    /// label, Compute Engine's internal DNS name, Hetzner's reverse DNS of its address), or empty.
    #[serde(default)]
    pub fqdn: String,
    /// Its pool (from its labels).
    pub pool: String,
    /// All its labels (or tags), including orca's.
    pub labels: Labels,
    /// When the cloud made it.
    #[serde(default)]
    pub created_at: Option<Timestamp>,
    /// When it was last started (made, or started after a stop), where the cloud reports it.
    #[serde(default)]
    pub started_at: Option<Timestamp>,
    /// When it was last stopped, where the cloud reports it.
    #[serde(default)]
    pub stopped_at: Option<Timestamp>,
    /// The longest it runs after each start before the cloud stops it, when it was made with one
    /// ([`crate::MachineSpec::with_max_run_duration`]) and the cloud reports it.
    #[serde(default, with = "opt_secs")]
    pub max_run_duration: Option<Duration>,
}

impl Machine {
    /// A machine `id` named `name`, in status [`Status::Unknown`], with every other fact empty.
    pub fn new(id: impl Into<String>, name: impl Into<String>) -> Self {
        Machine {
            id: id.into(),
            name: name.into(),
            status: Status::Unknown,
            cloud_status: String::new(),
            machine_type: String::new(),
            location: String::new(),
            address: String::new(),
            private_address: String::new(),
            fqdn: String::new(),
            pool: String::new(),
            labels: Labels::new(),
            created_at: None,
            started_at: None,
            stopped_at: None,
            max_run_duration: None,
        }
    }

    /// When the cloud will stop it for its run limit: its last start plus its maximum run duration,
    /// when both are known and it is not stopped.
    pub fn run_limit_at(&self) -> Option<Timestamp> {
        let start = self.started_at?;
        let limit = chrono::Duration::from_std(self.max_run_duration?).ok()?;
        start.checked_add_signed(limit)
    }
}

mod opt_secs {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_some(&d.as_secs()),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        Ok(Option::<u64>::deserialize(d)?.map(Duration::from_secs))
    }
}

/// What `create` made: the machine, or no stock of that type in that location ([contract](crate::contract) 3). The third
/// outcome, why not, is the `Err` of the call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Created {
    /// This call made the machine (retries within the call included).
    Machine(Machine),
    /// The machine was made by an earlier create of the same spec by the same owner (a create retried
    /// after an ambiguous failure, or repeated), and this call adopted it: it is not new.
    Adopted(Machine),
    /// The cloud has no stock of `machine_type` in `location` right now: try again later or elsewhere.
    NoStock {
        /// The machine type out of stock.
        machine_type: String,
        /// Where.
        location: String,
        /// The cloud's own words.
        message: String,
        /// What the clean-up of this create could not remove (kind and id, as
        /// [`Error::Leftovers`](crate::Error::Leftovers) names them): empty for a clean no stock.
        /// [`Provider::delete_named`](crate::Provider::delete_named) of the machine's name removes
        /// it. Absent from an answer serialized before it existed, and read as empty.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        left: Vec<String>,
    },
}

impl Created {
    /// What the clean-up of a no-stock create could not remove; empty for a clean no stock and for
    /// a machine.
    pub fn left(&self) -> &[String] {
        match self {
            Created::NoStock { left, .. } => left,
            Created::Machine(_) | Created::Adopted(_) => &[],
        }
    }

    /// Whether this is a no stock whose clean-up left something behind: its name is not free of
    /// what it made until [`Provider::delete_named`](crate::Provider::delete_named) removes it.
    pub fn may_have_left(&self) -> bool {
        !self.left().is_empty()
    }

    /// The machine, made or adopted.
    pub fn machine(self) -> Option<Machine> {
        match self {
            Created::Machine(m) | Created::Adopted(m) => Some(m),
            Created::NoStock { .. } => None,
        }
    }

    /// The machine, made or adopted, by reference.
    pub fn as_machine(&self) -> Option<&Machine> {
        match self {
            Created::Machine(m) | Created::Adopted(m) => Some(m),
            Created::NoStock { .. } => None,
        }
    }

    /// Whether the machine was adopted from an earlier create rather than made by this one.
    pub fn is_adopted(&self) -> bool {
        matches!(self, Created::Adopted(_))
    }

    /// The machine (made or adopted), or no stock as [`crate::Error::NoStock`]: for callers that treat
    /// it as an error. What the no stock left stays in the error ([`crate::Error::left`]), which is
    /// then not [`made_nothing`](crate::Error::made_nothing).
    pub fn into_result(self) -> crate::Result<Machine> {
        match self {
            Created::Machine(m) | Created::Adopted(m) => Ok(m),
            Created::NoStock {
                machine_type,
                location,
                message,
                left,
            } => Err(crate::Error::no_stock(machine_type, location, message).keeping_left(left)),
        }
    }
}

/// What a resize did (capability `resize`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Resized {
    /// The machine after the resize.
    pub machine: Machine,
    /// Whether the machine was stopped and started again for it.
    pub caused_downtime: bool,
}

impl Resized {
    /// `machine` as the resize left it; `caused_downtime` when it was stopped and started for it.
    pub fn new(machine: Machine, caused_downtime: bool) -> Self {
        Resized {
            machine,
            caused_downtime,
        }
    }
}

/// An hourly on-demand price (capability `hourly_price`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Price {
    /// The price of one hour, in `currency`, as the cloud states it (before tax where it says).
    pub hourly: f64,
    /// ISO 4217 currency code (`EUR`, `USD`).
    pub currency: String,
}

impl Price {
    /// `hourly` in `currency` (ISO 4217).
    pub fn new(hourly: f64, currency: impl Into<String>) -> Self {
        Price {
            hourly,
            currency: currency.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_limit_is_last_start_plus_duration() {
        let mut m = Machine::new("i-1", "a");
        assert_eq!(m.run_limit_at(), None);
        m.started_at = Some("2026-12-03T04:00:00Z".parse().unwrap());
        m.max_run_duration = Some(Duration::from_secs(600));
        assert_eq!(
            m.run_limit_at().unwrap().to_rfc3339(),
            "2026-12-03T04:10:00+00:00"
        );
    }

    #[test]
    fn serde_round_trip_and_old_records_load() {
        let mut m = Machine::new("i-1", "a");
        m.created_at = Some("2026-12-03T04:00:00Z".parse().unwrap());
        m.max_run_duration = Some(Duration::from_secs(90));
        let j = serde_json::to_value(&m).unwrap();
        assert_eq!(j["created_at"], "2026-12-03T04:00:00Z");
        assert_eq!(j["max_run_duration"], 90);
        assert_eq!(serde_json::from_value::<Machine>(j).unwrap(), m);
        let old = serde_json::json!({"id": "m", "name": "m", "status": "running", "cloud_status": "running",
            "machine_type": "t", "location": "l", "address": "", "pool": "p", "labels": {}});
        let m: Machine = serde_json::from_value(old).unwrap();
        assert_eq!((m.fqdn.as_str(), m.created_at), ("", None));
    }

    #[test]
    fn adopted_is_a_machine_but_not_new() {
        let c = Created::Adopted(Machine::new("i", "n"));
        assert!(c.is_adopted());
        assert_eq!(c.clone().machine().unwrap().id, "i");
        assert!(c.into_result().is_ok());
    }
}
