//! What a machine is ([`Machine`]) and the status set every cloud maps onto ([`Status`]).

use serde::{Deserialize, Serialize};

use crate::labels::Labels;

/// A machine's state, one set for every cloud (contract 4). The cloud's own word is kept in
/// [`Machine::cloud_status`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Being made or booting.
    Starting,
    /// Running.
    Running,
    /// Shutting down.
    Stopping,
    /// Stopped (or deallocated, suspended): not running, still there.
    Stopped,
    /// Being removed.
    Deleting,
    /// A state the driver does not know; see [`Machine::cloud_status`].
    Unknown,
}

impl Status {
    /// The lower-case name (`running`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Starting => "starting",
            Status::Running => "running",
            Status::Stopping => "stopping",
            Status::Stopped => "stopped",
            Status::Deleting => "deleting",
            Status::Unknown => "unknown",
        }
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A machine as a cloud reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
    /// Its pool (from its labels).
    pub pool: String,
    /// All its labels (or tags), including orca's.
    pub labels: Labels,
}

/// What `create` made: the machine, or no stock of that type in that location (contract 3). The third
/// outcome, why not, is the `Err` of the call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Created {
    /// The machine was made (or adopted: a retried create of the same spec by the same owner).
    Machine(Machine),
    /// The cloud has no stock of `machine_type` in `location` right now: try again later or elsewhere.
    NoStock {
        /// The machine type out of stock.
        machine_type: String,
        /// Where.
        location: String,
        /// The cloud's own words.
        message: String,
    },
}

impl Created {
    /// The machine, if one was made.
    pub fn machine(self) -> Option<Machine> {
        match self {
            Created::Machine(m) => Some(m),
            Created::NoStock { .. } => None,
        }
    }

    /// The machine, or no stock as [`crate::Error::NoStock`]: for callers that treat it as an error.
    pub fn into_result(self) -> crate::Result<Machine> {
        match self {
            Created::Machine(m) => Ok(m),
            Created::NoStock {
                machine_type,
                location,
                message,
            } => Err(crate::Error::NoStock {
                machine_type,
                location,
                message,
            }),
        }
    }
}

/// What a resize did (capability `resize`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resized {
    /// The machine after the resize.
    pub machine: Machine,
    /// Whether the machine was stopped and started again for it.
    pub caused_downtime: bool,
}

/// An hourly on-demand price (capability `hourly_price`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Price {
    /// The price of one hour, in `currency`, as the cloud states it (before tax where it says).
    pub hourly: f64,
    /// ISO 4217 currency code (`EUR`, `USD`).
    pub currency: String,
}
