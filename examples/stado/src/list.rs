//! `stado cloud host list`: each declared host with its VM's power state, read on its own.

use std::collections::BTreeMap;

use orca::{Status, Timestamp};
use serde::Serialize;

use crate::cloud::{usd, Stado};
use crate::error::Failure;
use crate::registry::{CloudState, Egress, Registry};

/// One declared host as list shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HostRow {
    /// Its name.
    pub name: String,
    /// The power state of its VM: running, deallocated, stopped, starting, ..., absent, or unread.
    pub state: String,
    /// Why it is unread.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cause: Option<String>,
    /// Its location.
    pub location: String,
    /// Its size.
    pub size: String,
    /// Its address.
    pub address: String,
    /// The priced hour, USD.
    pub hourly_usd: f64,
    /// Where it was priced.
    pub priced_in: String,
    /// Its idle minutes.
    pub idle_minutes: u32,
    /// When it was made.
    pub created_at: Timestamp,
    /// Its VM's id.
    pub vm_id: String,
    /// Whether its create stopped (or is still) before the cloud answered with its VM: its VM, if
    /// any, was found by its name.
    pub creating: bool,
    /// Whether its create stopped (or is still) before the host was enrolled and recorded.
    pub enrolling: bool,
    /// Whether its first boot did not finish cleanly.
    pub first_boot_failed: bool,
}

/// What list found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ListReport {
    /// `list`.
    pub command: &'static str,
    /// The provider kind.
    pub provider: String,
    /// Each declared host.
    pub hosts: Vec<HostRow>,
    /// How many run.
    pub running: usize,
    /// The hourly burn of the running ones, USD.
    pub hourly_burn_usd: f64,
    /// `cloud_hosts.egress`.
    pub egress: BTreeMap<String, Egress>,
}

impl ListReport {
    /// The table a person reads.
    pub fn lines(&self) -> Vec<String> {
        if self.hosts.is_empty() {
            return vec![format!("no {} cloud host is declared", self.provider)];
        }
        let mut rows = vec![[
            "NAME".to_string(),
            "STATE".into(),
            "LOCATION".into(),
            "SIZE".into(),
            "ADDRESS".into(),
            "HOUR (USD)".into(),
            "IDLE MIN".into(),
            "CREATED".into(),
        ]];
        for h in &self.hosts {
            let mut state = match &h.cause {
                Some(c) => format!("{}: {c}", h.state),
                None => h.state.clone(),
            };
            if h.creating {
                state.push_str(" (creating)");
            }
            if h.enrolling {
                state.push_str(" (enrolling)");
            }
            if h.first_boot_failed {
                state.push_str(" (first boot failed)");
            }
            rows.push([
                h.name.clone(),
                state,
                h.location.clone(),
                h.size.clone(),
                h.address.clone(),
                usd(h.hourly_usd),
                h.idle_minutes.to_string(),
                h.created_at.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
            ]);
        }
        let mut out = orca::table::aligned(&rows, |_| false);
        out.push(format!(
            "hourly burn: {} USD ({} running)",
            usd(self.hourly_burn_usd),
            self.running
        ));
        out
    }
}

impl Stado {
    /// Lists each declared host with its VM's power state, read on its own.
    pub async fn list(&self) -> Result<ListReport, Failure> {
        self.gated_profile()?;
        let registry = Registry::load(&self.home)?;
        let declared = registry.cloud_hosts(&self.kind);
        let reads =
            futures::future::join_all(declared.iter().map(|(t, c)| self.declared_vm(&t.name, c)))
                .await;
        let mut hosts = Vec::new();
        for ((t, c), read) in declared.iter().zip(reads) {
            let (state, cause) = match &read {
                Ok(Some(m)) => (power_word(m), None),
                Ok(None) => ("absent".to_string(), None),
                Err(e) => ("unread".to_string(), Some(self.cloud_error(e))),
            };
            hosts.push(HostRow {
                name: t.name.clone(),
                state,
                cause,
                location: c.location.clone(),
                size: c.size.clone(),
                address: c.address.clone(),
                hourly_usd: c.hourly_usd,
                priced_in: c.priced_in.clone(),
                idle_minutes: c.idle_minutes,
                created_at: c.created_at,
                vm_id: read
                    .ok()
                    .flatten()
                    .map_or_else(|| c.vm_id.clone(), |m| m.id),
                creating: c.state == CloudState::Creating,
                enrolling: c.state == CloudState::Enrolling,
                first_boot_failed: c.state == CloudState::FirstBootFailed,
            });
        }
        let running: Vec<&HostRow> = hosts.iter().filter(|h| h.state == "running").collect();
        Ok(ListReport {
            command: "list",
            provider: self.kind.clone(),
            running: running.len(),
            hourly_burn_usd: running.iter().fold(0.0, |a, h| a + h.hourly_usd),
            hosts,
            egress: registry.cloud_hosts.egress.clone(),
        })
    }
}

/// The power state word of a VM: running, deallocated, stopped, starting, ...
pub fn power_word(m: &orca::Machine) -> String {
    match m.status {
        Status::Running => "running".into(),
        Status::Stopped if m.cloud_status.to_ascii_lowercase().contains("stopped") => {
            "stopped".into()
        }
        Status::Stopped => "deallocated".into(),
        other => other.as_str().into(),
    }
}
