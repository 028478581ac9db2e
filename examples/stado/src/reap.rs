//! `stado cloud host reap [--apply]`: measures and readmits the fleet's addresses as create does,
//! reads each cloud host over SSH, judges it busy, idle, reapable or unread, and with `--apply`
//! deletes each reapable one as delete does.

use std::collections::BTreeMap;

use orca::Timestamp;
use serde::Serialize;

use crate::admission::AdmissionReport;
use crate::channel::commands;
use crate::cloud::Stado;
use crate::error::Failure;
use crate::list::power_word;
use crate::registry::{CloudDecl, CloudState, Egress, Target};

orca::words! {
    /// How a host was judged.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
    #[serde(rename_all = "snake_case")]
    pub enum Verdict {
        /// A run stands in its run area, or cargo or rustc runs.
        Busy = "busy",
        /// Idle, not yet past its minutes.
        Idle = "idle",
        /// Idle past its minutes.
        Reapable = "reapable",
        /// Could not be read: never judged idle.
        #[default]
        Unread = "unread",
    }
}

/// What apply did to a reapable host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Deleted as delete deletes.
    Reaped,
    /// The delete failed; the entry stays.
    ReapFailed,
}

/// One host's reading.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ReapRow {
    /// The host.
    pub name: String,
    /// How it was judged.
    pub verdict: Verdict,
    /// Minutes it has stood idle (idle and reapable).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idle_for_minutes: Option<u64>,
    /// Its idle minutes.
    pub idle_minutes: u32,
    /// Since when it stood idle.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idle_since: Option<Timestamp>,
    /// Runs standing in its run area.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runs: Option<u64>,
    /// cargo and rustc processes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub processes: Option<u64>,
    /// Why it is unread.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cause: Option<String>,
    /// What apply did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action: Option<Action>,
    /// Why the reap failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action_cause: Option<String>,
}

/// What one reap pass did.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ReapReport {
    /// `reap`.
    pub command: &'static str,
    /// The provider kind.
    pub provider: String,
    /// Whether reapable hosts were deleted.
    pub apply: bool,
    /// The fleet's addresses as measured.
    pub egress: BTreeMap<String, Egress>,
    /// The admission in each location.
    pub admission: Vec<AdmissionReport>,
    /// Why measuring or admitting failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admission_error: Option<String>,
    /// Each declared host.
    pub hosts: Vec<ReapRow>,
}

impl ReapReport {
    /// Whether the pass failed: a reap failed, or the addresses could not be admitted.
    pub fn failed(&self) -> bool {
        self.admission_error.is_some()
            || self
                .hosts
                .iter()
                .any(|h| h.action == Some(Action::ReapFailed))
    }

    /// The lines a person reads.
    pub fn lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        match &self.admission_error {
            Some(e) => out.push(format!("admission: {e}")),
            None => out.extend(self.admission.iter().map(AdmissionReport::line)),
        }
        if self.hosts.is_empty() {
            out.push(format!("no {} cloud host is declared", self.provider));
        }
        for h in &self.hosts {
            let mut l = format!("{}: {}", h.name, h.verdict.as_str());
            match (h.verdict, h.idle_for_minutes) {
                (Verdict::Busy, _) => l.push_str(&format!(
                    " ({} run(s) in ~/.stado/work/runs, {} cargo or rustc process(es))",
                    h.runs.unwrap_or(0),
                    h.processes.unwrap_or(0)
                )),
                (Verdict::Idle, m) | (Verdict::Reapable, m @ Some(_)) => l.push_str(&format!(
                    " for {} minute(s) of {}",
                    m.unwrap_or(0),
                    h.idle_minutes
                )),
                (Verdict::Reapable | Verdict::Unread, _) => {
                    l.push_str(&format!(": {}", h.cause.as_deref().unwrap_or("?")))
                }
            }
            match (h.action, &h.action_cause) {
                (Some(Action::Reaped), _) => l.push_str("; reaped"),
                (Some(Action::ReapFailed), c) => {
                    l.push_str(&format!("; reap_failed: {}", c.as_deref().unwrap_or("?")))
                }
                _ => {}
            }
            out.push(l);
        }
        out
    }

    /// The coordinator's log lines: each host reaped, failed to reap or not read.
    pub fn log_lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(e) = &self.admission_error {
            out.push(format!(
                "cloud-host reaper: could not admit the fleet's addresses: {e}"
            ));
        }
        for h in &self.hosts {
            match (h.verdict, h.action) {
                (_, Some(Action::Reaped)) => out.push(match (h.idle_for_minutes, &h.cause) {
                    (None, Some(c)) => format!("cloud-host reaper: reaped {} ({c})", h.name),
                    _ => format!(
                        "cloud-host reaper: reaped {} (idle {} minute(s), past its {})",
                        h.name,
                        h.idle_for_minutes.unwrap_or(0),
                        h.idle_minutes
                    ),
                }),
                (_, Some(Action::ReapFailed)) => out.push(format!(
                    "cloud-host reaper: failed to reap {}: {}",
                    h.name,
                    h.action_cause.as_deref().unwrap_or("?")
                )),
                (Verdict::Unread, _) => out.push(format!(
                    "cloud-host reaper: could not read {}: {}",
                    h.name,
                    h.cause.as_deref().unwrap_or("?")
                )),
                _ => {}
            }
        }
        out
    }
}

/// What the reap probe read on a host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reading {
    /// Runs standing in the run area.
    pub runs: u64,
    /// When the run area last changed (Unix seconds), if it exists.
    pub changed: Option<i64>,
    /// cargo and rustc processes.
    pub processes: u64,
    /// The host's clock (Unix seconds).
    pub now: i64,
}

/// Parses the reap probe's answer; `None` when it is not one.
pub fn parse_reading(text: &str) -> Option<Reading> {
    let mut runs = None;
    let mut changed = None;
    let mut processes = None;
    let mut now = None;
    for line in text.lines() {
        let (k, v) = line.trim().split_once(' ')?;
        let v = v.trim();
        match k {
            "runs" => runs = Some(v.parse().ok()?),
            "changed" if v == "none" => changed = Some(None),
            "changed" => changed = Some(Some(v.parse().ok()?)),
            "procs" => processes = Some(v.parse().ok()?),
            "now" => now = Some(v.parse().ok()?),
            _ => {}
        }
    }
    Some(Reading {
        runs: runs?,
        changed: changed?,
        processes: processes?,
        now: now?,
    })
}

/// Judges a reading of a host made at `created_at` with `idle_minutes`.
pub fn judge(
    r: &Reading,
    created_at: Timestamp,
    idle_minutes: u32,
) -> (Verdict, Option<Timestamp>, Option<u64>) {
    if r.runs > 0 || r.processes > 0 {
        return (Verdict::Busy, None, None);
    }
    let created = created_at.timestamp();
    let since_secs = r.changed.unwrap_or(created).max(created);
    let since = chrono::DateTime::from_timestamp(since_secs, 0).unwrap_or(created_at);
    let idle_secs = u64::try_from(r.now - since_secs).unwrap_or(0);
    let verdict = if idle_secs > u64::from(idle_minutes) * 60 {
        Verdict::Reapable
    } else {
        Verdict::Idle
    };
    (verdict, Some(since), Some(idle_secs / 60))
}

impl Stado {
    /// One reap pass; with `apply`, deletes each reapable host as delete does.
    pub async fn reap(&self, apply: bool) -> Result<ReapReport, Failure> {
        let profile = self.gated_profile()?;
        let mut registry = self.lock_registry()?;
        let declared: Vec<(Target, CloudDecl)> = registry
            .cloud_hosts(&self.kind)
            .into_iter()
            .map(|(t, c)| (t.clone(), c.clone()))
            .collect();
        let mut report = ReapReport {
            command: "reap",
            provider: self.kind.clone(),
            apply,
            ..ReapReport::default()
        };
        if declared.is_empty() {
            return Ok(report);
        }
        // The fleet's addresses, measured and readmitted as create does.
        let measured = self.measure_egress(&profile, &mut registry).await;
        report.egress = registry.cloud_hosts.egress.clone();
        match measured {
            Ok(sources) => match self.admit(&registry, None, &sources).await {
                Ok(a) => report.admission = a,
                Err(f) => report.admission_error = Some(f.message().to_string()),
            },
            Err(f) => report.admission_error = Some(f.message().to_string()),
        }
        let readings =
            futures::future::join_all(declared.iter().map(|(t, c)| self.read_host(t, c))).await;
        for ((t, c), mut row) in declared.iter().zip(readings) {
            if apply && row.verdict == Verdict::Reapable {
                match self.remove_host(&mut registry, &t.name, c).await {
                    Ok(_) => row.action = Some(Action::Reaped),
                    Err(f) => {
                        row.action = Some(Action::ReapFailed);
                        row.action_cause = Some(f.message().to_string());
                    }
                }
            }
            report.hosts.push(row);
        }
        Ok(report)
    }

    async fn read_host(&self, t: &Target, c: &CloudDecl) -> ReapRow {
        // Unread until the reading says otherwise.
        let mut row = ReapRow {
            name: t.name.clone(),
            idle_minutes: c.idle_minutes,
            ..ReapRow::default()
        };
        // Its create holds the registry's lock from its first step to its last, and this pass holds
        // it now: the create stopped before it enrolled and recorded the host, and nothing else will
        // ever return it.
        let stopped = match c.state {
            CloudState::Creating => {
                Some("before the cloud answered with its VM (targets[].cloud is creating)")
            }
            CloudState::Enrolling => {
                Some("before the host was enrolled (targets[].cloud is enrolling)")
            }
            CloudState::Ready | CloudState::FirstBootFailed => None,
        };
        if let Some(when) = stopped {
            row.verdict = Verdict::Reapable;
            row.cause = Some(format!(
                "its create stopped {when}; nothing else returns it"
            ));
            return row;
        }
        match self.reading(t, c).await {
            Ok(reading) => {
                let (verdict, since, idle) = judge(&reading, c.created_at, c.idle_minutes);
                row.verdict = verdict;
                row.idle_since = since;
                row.idle_for_minutes = idle;
                row.runs = Some(reading.runs);
                row.processes = Some(reading.processes);
            }
            Err(cause) => row.cause = Some(cause),
        }
        row
    }

    /// The reap probe's reading of a host whose VM runs; why there is none otherwise.
    async fn reading(&self, t: &Target, c: &CloudDecl) -> Result<Reading, String> {
        match self.provider.machine(&c.vm_id).await {
            Ok(Some(m)) if m.status == orca::Status::Running => {}
            Ok(Some(m)) => return Err(format!("its VM is {}", power_word(&m))),
            Ok(None) => return Err(format!("its VM {} is absent", c.vm_id)),
            Err(e) => return Err(format!("its VM could not be read: {e}")),
        }
        let out = self
            .channel
            .run(t, commands::REAP_PROBE, self.timing.command)
            .await?;
        if out.status != 0 {
            return Err(format!(
                "the reading exited {}: {}",
                out.status,
                out.last_words()
            ));
        }
        parse_reading(&out.stdout).ok_or_else(|| {
            format!(
                "the reading answered {:?}",
                crate::cloud::truncate(out.stdout.trim(), 80)
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_verdicts_word_is_its_serde_name() {
        for v in Verdict::ALL {
            assert_eq!(serde_json::to_value(v).unwrap(), v.as_str());
        }
    }

    #[test]
    fn readings_are_parsed_and_judged() {
        let created: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let t0 = created.timestamp();
        let r = parse_reading(&format!(
            "runs 0\nchanged none\nprocs 0\nnow {}\n",
            t0 + 31 * 60
        ))
        .unwrap();
        assert_eq!(
            judge(&r, created, 30).0,
            Verdict::Reapable,
            "idle since creation"
        );
        assert_eq!(
            judge(&r, created, 31).0,
            Verdict::Idle,
            "not past its minutes"
        );
        let r = parse_reading(&format!(
            "runs 0\nchanged {}\nprocs 0\nnow {}\n",
            t0 + 20 * 60,
            t0 + 31 * 60
        ))
        .unwrap();
        let (v, since, idle) = judge(&r, created, 30);
        assert_eq!(
            (v, idle),
            (Verdict::Idle, Some(11)),
            "idle since the run area last changed"
        );
        assert_eq!(since.unwrap().timestamp(), t0 + 20 * 60);
        let r = parse_reading(&format!(
            "runs 1\nchanged {t0}\nprocs 0\nnow {}\n",
            t0 + 999 * 60
        ))
        .unwrap();
        assert_eq!(judge(&r, created, 30).0, Verdict::Busy);
        let r = parse_reading(&format!(
            "runs 0\nchanged {t0}\nprocs 2\nnow {}\n",
            t0 + 999 * 60
        ))
        .unwrap();
        assert_eq!(judge(&r, created, 30).0, Verdict::Busy);
        assert!(parse_reading("runs x\n").is_none());
        assert!(parse_reading("Welcome!\n").is_none());
    }
}
