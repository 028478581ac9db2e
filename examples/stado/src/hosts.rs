//! `stado cloud host list` and `stado cloud host delete`.

use std::collections::BTreeMap;

use orca::Timestamp;
use serde::Serialize;

use crate::cloud::{power_word, usd, Stado};
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
        let mut widths = [0usize; 8];
        for r in &rows {
            for (i, c) in r.iter().enumerate() {
                widths[i] = widths[i].max(c.chars().count());
            }
        }
        let mut out: Vec<String> = rows
            .iter()
            .map(|r| {
                r.iter()
                    .enumerate()
                    .map(|(i, c)| format!("{c:<w$}", w = widths[i]))
                    .collect::<Vec<_>>()
                    .join("  ")
                    .trim_end()
                    .to_string()
            })
            .collect();
        out.push(format!(
            "hourly burn: {} USD ({} running)",
            usd(self.hourly_burn_usd),
            self.running
        ));
        out
    }
}

/// What delete did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeleteReport {
    /// `delete`.
    pub command: &'static str,
    /// The host.
    pub name: String,
    /// The provider kind.
    pub provider: String,
    /// Its VM's id.
    pub vm_id: String,
    /// Whether everything is gone and the entry removed.
    pub deleted: bool,
}

impl Stado {
    /// Lists each declared host with its VM's power state, read on its own.
    pub async fn list(&self) -> Result<ListReport, Failure> {
        self.gated_profile()?;
        let registry = Registry::load(&self.home)?;
        let declared = registry.cloud_hosts(&self.kind);
        let reads = futures::future::join_all(
            declared
                .iter()
                .map(|(_, c)| self.provider.machine(&c.vm_id)),
        )
        .await;
        let mut hosts = Vec::new();
        for ((t, c), read) in declared.iter().zip(reads) {
            let (state, cause) = match read {
                Ok(Some(m)) => (power_word(&m), None),
                Ok(None) => ("absent".to_string(), None),
                Err(e) => ("unread".to_string(), Some(self.cloud_error(&e))),
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
                vm_id: c.vm_id.clone(),
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

    /// Deletes the declared cloud host `name`: its VM with the OS disk, the interface, the security
    /// group and the public address, each confirmed gone; only then the registry entry and the fleet
    /// key. What the cloud still holds keeps the entry.
    pub async fn delete(&self, name: &str) -> Result<DeleteReport, Failure> {
        self.gated_profile()?;
        let _lock = self.lock_registry()?;
        let mut registry = Registry::load(&self.home)?;
        let declared = registry.cloud_hosts(&self.kind);
        let Some(decl) = declared
            .iter()
            .find(|(t, _)| t.name == name)
            .map(|(_, c)| (*c).clone())
        else {
            if let Some(other) = registry.target(name).and_then(|t| t.cloud.as_ref()) {
                return Err(Failure::refused(format!(
                    "the registry declares no {kind} cloud host {name}: {name} is a cloud host of the provider {p} (stado cloud host delete {name} --provider {p} deletes it)",
                    kind = self.kind,
                    p = other.provider
                )));
            }
            let names: Vec<&str> = declared.iter().map(|(t, _)| t.name.as_str()).collect();
            return Err(Failure::refused(format!(
                "the registry declares no {} cloud host {name} (it declares {})",
                self.cloud_title(),
                if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join(", ")
                }
            )));
        };
        self.remove_host(&mut registry, name, &decl).await?;
        Ok(DeleteReport {
            command: "delete",
            name: name.to_string(),
            provider: self.kind.clone(),
            vm_id: decl.vm_id,
            deleted: true,
        })
    }
}
