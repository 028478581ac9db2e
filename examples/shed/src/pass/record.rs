//! What a pass does with one record that has no job in flight, by the shed's status and what the
//! listing shows of its VM.

use orca::{Machine, Status as VmStatus};

use super::is_on;
use crate::backend::{Backend, STATE_LABEL};
use crate::jobs::{readable, stop_reason};
use crate::model::{CreateStage, Op, Queued, Reason, Shed, Status};

impl Backend {
    pub(super) async fn pass_record(&self, s: &Shed, vm: Option<&Machine>) {
        let id = s.id.as_str();
        if vm.is_some_and(|m| !readable(m)) {
            // Another version's labels: nothing is changed; a starting shed says why it waits.
            self.apply(id, s.status, |r, now| {
                r.foreign_labels = true;
                if r.status == Status::Starting {
                    r.set(Status::Starting, Some(Reason::CloudUnreadable), now);
                }
            });
            return;
        }
        match (s.status, vm) {
            (Status::Starting, _) if s.op == Some(Op::Create) && s.create != CreateStage::Made => {
                self.spawn_job(id);
            }
            (Status::Running | Status::Stopped | Status::Stopping | Status::Starting, None) => {
                if let Some(vm) = &s.vm_id {
                    self.gone_if_confirmed(id, vm).await;
                }
            }
            (Status::Running, Some(m)) => self.pass_running(s, m).await,
            (Status::Stopped, Some(m)) => self.pass_stopped(s, m),
            (Status::Stopping, Some(m)) => self.pass_stopping(s, m),
            (Status::Starting, Some(_)) => {
                self.apply(id, Status::Starting, |r, now| {
                    r.foreign_labels = false;
                    if r.reason == Some(Reason::CloudUnreadable) {
                        r.set(Status::Starting, None, now);
                    }
                });
                self.spawn_job(id);
            }
            (Status::Error, Some(m)) => {
                self.apply(id, Status::Error, |r, _| {
                    r.vm_id = Some(m.id.clone());
                    r.vm_gone = false;
                });
                self.spawn_job(id);
            }
            (Status::Error, None) => {
                if s.vm_gone {
                    return;
                }
                match &s.vm_id {
                    Some(vm) => self.gone_if_confirmed(id, vm).await,
                    // The create may have left pieces beside a VM: the job looks by name and
                    // removes them before the shed says its VM is gone.
                    None => self.spawn_job(id),
                }
            }
        }
    }

    /// A running shed: its VM stopped (by the run limit or outside shed), on its way down (recorded
    /// `stopping` first), or still on (labelled `ready` if it is not yet).
    async fn pass_running(&self, s: &Shed, m: &Machine) {
        let id = s.id.as_str();
        let window = self.inner.timings.run_limit_window;
        let now = self.now();
        match m.status {
            VmStatus::Stopped => {
                let reason = stop_reason(m, now, window);
                if self.apply(id, Status::Running, |r, now| {
                    r.set(Status::Stopped, Some(reason), now);
                    r.foreign_labels = false;
                }) {
                    self.log().info(format!(
                        "remote: shed {} ({id}) stopped ({reason}): its VM was stopped by the cloud or outside shed",
                        s.name
                    ));
                }
            }
            VmStatus::Stopping => {
                self.apply(id, Status::Running, |r, now| {
                    r.set(Status::Stopping, None, now);
                    r.op = Some(Op::ExternalStop);
                });
            }
            _ => {
                self.apply(id, Status::Running, |r, _| {
                    r.foreign_labels = false;
                    if r.vm_id.is_none() {
                        r.vm_id = Some(m.id.clone());
                    }
                });
                if is_on(m) && m.labels.get(STATE_LABEL).map(String::as_str) != Some("ready") {
                    self.label_ready(id, &m.id).await;
                }
            }
        }
    }

    /// A stopped shed whose VM was started outside shed: `starting`, and its agent is probed (the
    /// VM is never stopped).
    fn pass_stopped(&self, s: &Shed, m: &Machine) {
        let id = s.id.as_str();
        if is_on(m)
            && self.apply(id, Status::Stopped, |r, now| {
                r.set(Status::Starting, None, now);
                r.op = Some(Op::Probe);
                r.foreign_labels = false;
            })
        {
            self.log().info(format!(
                "remote: shed {} ({id}): its VM was started outside shed; probing its agent",
                s.name
            ));
            self.spawn_job(id);
        }
    }

    /// A stopping shed: its VM stopped (a start queued behind the stop acts now), still on its way
    /// down, on again after a stop made outside shed (probed), or on after a stop of ours that failed
    /// (stopped again).
    fn pass_stopping(&self, s: &Shed, m: &Machine) {
        let id = s.id.as_str();
        let external = s.op == Some(Op::ExternalStop);
        match m.status {
            VmStatus::Stopped => {
                let window = self.inner.timings.run_limit_window;
                let reason = external.then(|| stop_reason(m, self.now(), window));
                let mut start = false;
                self.apply(id, Status::Stopping, |r, now| {
                    r.set(Status::Stopped, reason, now);
                    if r.queued.take() == Some(Queued::Start) {
                        r.set(Status::Starting, None, now);
                        r.op = Some(Op::Start);
                        r.start_sent = false;
                        start = true;
                    }
                });
                if start {
                    self.log().info(format!(
                        "remote: shed {} ({id}) stopped; starting it for the start queued behind the stop",
                        s.name
                    ));
                    self.spawn_job(id);
                }
            }
            VmStatus::Stopping => {}
            _ if external => {
                if self.apply(id, Status::Stopping, |r, now| {
                    r.set(Status::Starting, None, now);
                    r.op = Some(Op::Probe);
                    // The VM is on again: a queued start has nothing left to do.
                    r.queued = None;
                }) {
                    self.spawn_job(id);
                }
            }
            _ => self.spawn_job(id),
        }
    }
}
