//! The wait for a VM's agent: the VM read first (its labels and whether it still runs), then one
//! probe, and what its answer makes of the shed (running, a failed create, a stopped start, or a
//! reason to wait and probe again).

use std::time::Duration;

use orca::{Error, Machine, Status as VmStatus, Timestamp};

use super::{readable, stop_reason, JobCtx};
use crate::backend::{Backend, SCHEMA_LABEL, STATE_LABEL};
use crate::clock::{go_duration, since};
use crate::model::{Op, Queued, Reason, Status};
use crate::probe::{ProbeOutcome, ProbeTarget};

/// The shed whose agent is probed.
struct Probing<'a> {
    id: &'a str,
    vm: &'a str,
    name: String,
    /// The job's op: a create fails where a start is stopped.
    op: Option<Op>,
}

impl Probing<'_> {
    fn is_create(&self) -> bool {
        self.op == Some(Op::Create)
    }
}

impl Backend {
    pub(super) async fn step_probe(&self, id: &str, vm: &str, ctx: &mut JobCtx) {
        let now = self.now();
        let since_start = *ctx.probe_since.get_or_insert(now);
        let read = self.inner.provider.machine(vm).await;
        let Some((op, name)) = self.state().sheds.get(id).map(|s| (s.op, s.name.clone())) else {
            return;
        };
        let p = Probing { id, vm, name, op };
        let Some(m) = self.vm_to_probe(&p, read, now, ctx).await else {
            return;
        };
        let target = ProbeTarget {
            shed_id: id.to_string(),
            vm_name: m.name.clone(),
            address: m.address.clone(),
        };
        let outcome = self.inner.probe.probe(&target).await;
        let waited = since(self.now(), since_start);
        match outcome {
            ProbeOutcome::Answered => self.agent_answered(&p, &m, ctx).await,
            ProbeOutcome::HostKeyMismatch if p.is_create() => self.fail_create(
                &p,
                Reason::HostKey,
                "the VM's host key did not match the pinned key",
            ),
            ProbeOutcome::Incompatible(why) if p.is_create() => self.fail_create(
                &p,
                Reason::Layout,
                &format!("the agent or guest layout is not compatible: {why}"),
            ),
            ProbeOutcome::Incompatible(why) => self.incompatible_start(&p, &why).await,
            other => self.agent_silent(&p, other, waited, ctx),
        }
    }

    /// The VM as read, when it is there to be probed: readable labels, and on. Otherwise records
    /// why not (the cloud unreadable, the VM gone, another version's labels, the VM stopped).
    async fn vm_to_probe(
        &self,
        p: &Probing<'_>,
        read: Result<Option<Machine>, Error>,
        now: Timestamp,
        ctx: &mut JobCtx,
    ) -> Option<Machine> {
        let (id, name, op) = (p.id, &p.name, p.op);
        let m = match read {
            Err(e) => {
                // It changed nothing, keeps the create or start, and looks again at every pass.
                self.update(id, |s, now| {
                    if s.status == Status::Starting {
                        s.set(Status::Starting, Some(Reason::CloudUnreadable), now);
                        s.op = op;
                        s.detail = Some(e.to_string());
                    }
                });
                self.log().warn(format!(
                    "remote: shed {name} ({id}): the cloud could not be read (looked at again at the next pass): {e}"
                ));
                ctx.gave_up_reading = true;
                return None;
            }
            Ok(None) => {
                self.vm_vanished(p).await;
                return None;
            }
            Ok(Some(m)) => m,
        };
        if !readable(&m) {
            self.update(id, |s, now| {
                s.set(Status::Starting, Some(Reason::CloudUnreadable), now);
                s.op = op;
                s.foreign_labels = true;
            });
            self.log().warn(format!(
                "remote: shed {name} ({id}): its VM carries labels of another shed version ({}={}); nothing is changed",
                SCHEMA_LABEL,
                m.labels.get(SCHEMA_LABEL).map(String::as_str).unwrap_or("none")
            ));
            ctx.gave_up_reading = true;
            return None;
        }
        if !self.is_shed_vm(&m, id) {
            // The id is the record's, taken from a file: a VM that is not the shed's is neither
            // probed nor labelled ready, and a create that fails here never destroys it (the
            // destroy of a failed create takes the record's id). The record forgets it.
            self.log().warn(format!(
                "remote: shed {name} ({id}): the VM its record names, {}",
                super::not_its(&m)
            ));
            self.update(id, |s, now| {
                s.vm_id = None;
                if p.is_create() {
                    s.fail(
                        Status::Error,
                        Reason::CreateFailed,
                        "its record named a VM that is not its own",
                        now,
                    );
                }
            });
            ctx.gave_up_reading = true;
            return None;
        }
        if matches!(m.status, VmStatus::Stopped | VmStatus::Stopping) {
            self.stopped_before_answer(p, &m, now);
            return None;
        }
        Some(m)
    }

    /// The VM is gone: a create failed; a start's shed is removed once a read confirms it.
    async fn vm_vanished(&self, p: &Probing<'_>) {
        if !p.is_create() {
            self.gone_if_confirmed(p.id, p.vm).await;
            return;
        }
        self.update(p.id, |s, now| {
            let why = "the VM disappeared before its agent answered";
            s.fail(Status::Error, Reason::CreateFailed, why, now);
            s.vm_gone = true;
        });
        self.log().warn(format!(
            "remote: shed {} ({}) create failed: the VM disappeared before its agent answered",
            p.name, p.id
        ));
    }

    /// The VM stopped before its agent answered: a create failed; a start is stopped with the
    /// reason (run limit or outside shed).
    fn stopped_before_answer(&self, p: &Probing<'_>, m: &Machine, now: Timestamp) {
        let reason = stop_reason(m, now, self.inner.timings.run_limit_window);
        self.update(p.id, |s, now| {
            if p.is_create() {
                let why = format!("the VM stopped before its agent answered ({reason})");
                s.fail(Status::Error, Reason::CreateFailed, why, now);
            } else {
                s.set(Status::Stopped, Some(reason), now);
                s.foreign_labels = false;
            }
        });
        self.log().warn(format!(
            "remote: shed {} ({}): its VM stopped before its agent answered ({reason})",
            p.name, p.id
        ));
    }

    /// The agent answered: the VM is labelled `ready` and the shed runs, unless a stop was queued
    /// while the probe ran, which acts now.
    async fn agent_answered(&self, p: &Probing<'_>, m: &Machine, ctx: &mut JobCtx) {
        let (id, name) = (p.id, &p.name);
        if m.labels.get(STATE_LABEL).map(String::as_str) != Some("ready") {
            self.label_ready(id, p.vm).await;
        }
        let mut ran = false;
        let mut stop_queued = false;
        self.update(id, |s, now| {
            if s.status == Status::Starting {
                s.set(Status::Running, None, now);
                s.foreign_labels = false;
                s.detail = None;
                ran = true;
                if s.queued == Some(Queued::Stop) {
                    s.queued = None;
                    s.set(Status::Stopping, None, now);
                    s.op = Some(Op::Stop);
                    stop_queued = true;
                }
            }
        });
        if stop_queued {
            // This job may have stopped the VM before (a start queued behind a stop).
            ctx.stop_tried = false;
            self.log().info(format!(
                "remote: shed {name} ({id}) running; stopping it for the stop queued during its start"
            ));
        } else if ran {
            self.log()
                .info(format!("remote: shed {name} ({id}) running"));
        }
    }

    /// A started VM whose agent is not compatible is stopped again: `stopped (layout)`.
    async fn incompatible_start(&self, p: &Probing<'_>, why: &str) {
        let stopped = self.inner.provider.stop(p.vm).await;
        self.update(p.id, |s, now| {
            s.fail(Status::Stopped, Reason::Layout, why, now)
        });
        self.log().warn(format!(
            "remote: shed {} ({}) start failed (layout): {why}{}",
            p.name,
            p.id,
            stopped
                .err()
                .map(|e| format!("; its VM could not be stopped: {e}"))
                .unwrap_or_default()
        ));
    }

    /// The agent did not answer (yet): the shed says why it waits, and is probed again after the
    /// probe interval; a create fails once the agent wait (5 minutes) is over.
    fn agent_silent(
        &self,
        p: &Probing<'_>,
        outcome: ProbeOutcome,
        waited: Duration,
        ctx: &mut JobCtx,
    ) {
        let reason = match outcome {
            ProbeOutcome::NoPin => Reason::NoPin,
            _ => Reason::Unreachable,
        };
        if p.is_create() && waited >= self.inner.timings.agent_wait {
            self.fail_create(
                p,
                Reason::CreateFailed,
                &format!(
                    "the agent did not answer within {} ({outcome:?})",
                    go_duration(self.inner.timings.agent_wait)
                ),
            );
            return;
        }
        self.update(p.id, |s, now| {
            if s.status == Status::Starting && s.reason != Some(reason) {
                s.set(Status::Starting, Some(reason), now);
            }
        });
        ctx.next_probe = Some(
            self.now()
                + chrono::Duration::from_std(self.inner.timings.probe_interval).unwrap_or_default(),
        );
    }

    fn fail_create(&self, p: &Probing<'_>, reason: Reason, why: &str) {
        self.update(p.id, |s, now| s.fail(Status::Error, reason, why, now));
        self.log().warn(format!(
            "remote: shed {} ({}) create failed ({reason}): {why}; its VM is destroyed",
            p.name, p.id
        ));
    }

    /// Labels shed `id`'s VM `ready` (a failure is repaired by the pass).
    pub(crate) async fn label_ready(&self, id: &str, vm: &str) {
        let Some(labels) = self.inner.provider.machine_labels() else {
            return;
        };
        let set = orca::labels::Labels::from([(STATE_LABEL.to_string(), "ready".to_string())]);
        if let Err(e) = labels.set_labels(vm, &set, &[]).await {
            self.log().warn(format!(
                "remote: shed {id}: its VM could not be labelled ready (the pass tries again): {e}"
            ));
        }
    }
}
