//! What create reports: each step as it went, and what the steps found and made.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::admission::AdmissionReport;
use crate::error::Failure;
use crate::keys::FleetKey;
use crate::registry::{Egress, Target};

/// One step of create as it went.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepReport {
    /// Its number, 1 to 9.
    pub step: u8,
    /// Its name.
    pub name: &'static str,
    /// Whether it succeeded.
    pub ok: bool,
    /// What it said.
    pub lines: Vec<String>,
}

/// The price step's findings.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PriceReport {
    /// The size's priced hour, USD.
    pub hourly_usd: f64,
    /// The location that quoted it (the highest).
    pub priced_in: String,
    /// Every location's quote.
    pub quotes: BTreeMap<String, f64>,
    /// The cloud hosts already declared.
    pub running: usize,
    /// Their recorded hours, USD.
    pub running_usd: f64,
    /// The projected hourly burn, USD.
    pub projected_burn_usd: f64,
}

/// The credit gate's findings.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CreditReport {
    /// The balance.
    pub balance: f64,
    /// Its currency.
    pub currency: String,
    /// What remains after one hour of all of them.
    pub after: f64,
    /// The floor.
    pub floor: f64,
    /// The floor's currency.
    pub floor_currency: String,
    /// The operator's ruling id.
    pub ruling: String,
}

/// The versions the first boot answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Versions {
    /// `$HOME/.cargo/bin/rustc --version`.
    pub rustc: String,
    /// `node --version`.
    pub node: String,
    /// `npm --version`.
    pub npm: String,
}

/// What create did.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CreateReport {
    /// `create`.
    pub command: &'static str,
    /// Whether every step succeeded.
    pub ok: bool,
    /// The host's name.
    pub name: String,
    /// The provider kind.
    pub provider: String,
    /// The location.
    pub location: String,
    /// The size.
    pub size: String,
    /// The OS disk, GiB.
    pub disk_gb: u32,
    /// Its idle minutes.
    pub idle_minutes: u32,
    /// Each step that ran.
    pub steps: Vec<StepReport>,
    /// The price step.
    pub price: Option<PriceReport>,
    /// The credit gate.
    pub credit: Option<CreditReport>,
    /// The fleet's addresses as measured.
    pub egress: BTreeMap<String, Egress>,
    /// The admission in each location.
    pub admission: Vec<AdmissionReport>,
    /// The fleet key's public half and fingerprint.
    pub fleet_key: Option<FleetKey>,
    /// The registry's target for the host, once recorded.
    pub host: Option<Target>,
    /// The first boot's versions.
    pub versions: Option<Versions>,
    /// Why it stopped.
    pub error: Option<Failure>,
}
