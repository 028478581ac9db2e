//! The jobs: one task per shed (or acknowledged delete) at a time, doing its cloud work one step after
//! another. Each step is chosen from the record as it is now (`Backend::next_step`, under the lock),
//! so a call that changes the record while a cloud operation runs ("queued") is acted on as soon as that
//! operation ends, and a restart resumes a job from the record alone.

use std::time::Duration;

use orca::{Created, Error, Machine, Status as VmStatus, Timestamp};

use crate::backend::{ApiError, Backend, State, ID_LABEL, SCHEMA, SCHEMA_LABEL, STATE_LABEL};
use crate::clock::{go_duration, since};
use crate::model::{CreateStage, DeleteMarker, Op, Queued, Reason, Shed, ShedView, Status};
use crate::probe::{ProbeOutcome, ProbeTarget};

#[derive(Debug)]
pub(crate) enum Step {
    Insert,
    PowerOn(String),
    PowerOff(String),
    Probe(String),
    Wait(Timestamp),
    Destroy,
    DestroyFailed,
    Done,
}

/// What one run of a job remembers (not kept on disk: a restart starts afresh).
#[derive(Debug, Default)]
pub(crate) struct JobCtx {
    /// The delete's destroy was tried (a failure is retried by the pass).
    destroy_tried: bool,
    /// The destroy of a failed create's VM was tried (a failure is retried by the pass); apart from
    /// `destroy_tried`, so that a delete arriving during it is still acted on.
    failed_destroy_tried: bool,
    stop_tried: bool,
    probe_since: Option<Timestamp>,
    next_probe: Option<Timestamp>,
    gave_up_reading: bool,
}

/// Why the cloud refused, in the seed's words.
fn refusal(e: &Error) -> Option<Reason> {
    match e {
        Error::Quota { .. } => Some(Reason::Quota),
        Error::NoStock { .. } => Some(Reason::Capacity),
        _ => None,
    }
}

/// Whether a VM's labels are this server's schema.
pub(crate) fn readable(m: &Machine) -> bool {
    m.labels.get(SCHEMA_LABEL).map(String::as_str) == Some(SCHEMA)
}

/// run_limit when the VM stopped within the window of its run limit, external otherwise.
pub(crate) fn stop_reason(m: &Machine, now: Timestamp, window: Duration) -> Reason {
    let stopped = m.stopped_at.unwrap_or(now);
    match m.run_limit_at() {
        Some(limit) if since(stopped, limit).max(since(limit, stopped)) <= window => {
            Reason::RunLimit
        }
        _ => Reason::External,
    }
}

impl Backend {
    /// Starts shed (or delete) `id`'s job unless one runs; a running job sees every change of the
    /// record at its next step.
    pub(crate) fn spawn_job(&self, id: &str) {
        {
            let mut st = self.state();
            if !st.jobs.insert(id.to_string()) {
                return;
            }
        }
        let b = self.clone();
        let id = id.to_string();
        let h = tokio::spawn(async move {
            let mut ctx = JobCtx::default();
            loop {
                let step = {
                    let mut st = b.state();
                    let step = b.next_step(&mut st, &id, &ctx);
                    if matches!(step, Step::Done) {
                        st.jobs.remove(&id);
                    }
                    step
                };
                if matches!(step, Step::Done) {
                    b.bump();
                    return;
                }
                b.run_step(&id, step, &mut ctx).await;
                b.bump();
            }
        });
        self.track(h.abort_handle());
    }

    pub(crate) fn next_step(&self, st: &mut State, id: &str, ctx: &JobCtx) -> Step {
        let now = self.now();
        if let Some(m) = st.deletes.get(id) {
            if !m.may_have_vm {
                let name = m.name.clone();
                self.drop_marker(st, id);
                self.inner
                    .log
                    .info(format!("remote: shed {name} ({id}) deleted (it had no VM)"));
                return Step::Done;
            }
            return if ctx.destroy_tried {
                Step::Done
            } else {
                Step::Destroy
            };
        }
        let Some(s) = st.sheds.get_mut(id) else {
            return Step::Done;
        };
        match s.status {
            Status::Starting => {
                let has_vm = s.create == CreateStage::Made;
                if s.queued == Some(Queued::Stop) && has_vm {
                    s.queued = None;
                    s.set(Status::Stopping, None, now);
                    s.op = Some(Op::Stop);
                    let snap = s.clone();
                    self.save(&snap);
                    return match snap.vm_id {
                        Some(vm) => Step::PowerOff(vm),
                        None => Step::Done,
                    };
                }
                if ctx.gave_up_reading {
                    return Step::Done;
                }
                match (s.op, s.create, s.vm_id.clone()) {
                    (Some(Op::Create) | None, CreateStage::NotSent | CreateStage::Sent, _) => {
                        Step::Insert
                    }
                    (Some(Op::Start), _, Some(vm)) if !s.start_sent => Step::PowerOn(vm),
                    (_, _, Some(vm)) => match ctx.next_probe {
                        Some(at) if at > now => Step::Wait(at),
                        _ => Step::Probe(vm),
                    },
                    (_, _, None) => Step::Done,
                }
            }
            Status::Stopping => match (s.op, s.vm_id.clone()) {
                (Some(Op::ExternalStop), _) => Step::Done,
                (_, Some(vm)) if !ctx.stop_tried => Step::PowerOff(vm),
                _ => Step::Done,
            },
            Status::Error => {
                if !s.vm_gone && !ctx.failed_destroy_tried {
                    Step::DestroyFailed
                } else {
                    Step::Done
                }
            }
            Status::Running | Status::Stopped => Step::Done,
        }
    }

    async fn run_step(&self, id: &str, step: Step, ctx: &mut JobCtx) {
        match step {
            Step::Insert => self.step_insert(id).await,
            Step::PowerOn(vm) => self.step_power_on(id, &vm).await,
            Step::PowerOff(vm) => {
                ctx.stop_tried = true;
                self.step_power_off(id, &vm).await
            }
            Step::Probe(vm) => self.step_probe(id, &vm, ctx).await,
            Step::Wait(until) => {
                let mut rx = self.subscribe();
                let left = since(until, self.now());
                tokio::select! {
                    _ = rx.changed() => {}
                    _ = self.inner.clock.sleep(left) => {}
                }
                if self.now() >= until {
                    ctx.next_probe = None;
                }
            }
            Step::Destroy => {
                ctx.destroy_tried = true;
                self.step_destroy(id).await
            }
            Step::DestroyFailed => {
                ctx.failed_destroy_tried = true;
                self.step_destroy_failed(id).await
            }
            Step::Done => {}
        }
    }

    /// Updates shed `id` with `f` and writes it; false when the shed is gone (deleted meanwhile).
    pub(crate) fn update(&self, id: &str, f: impl FnOnce(&mut Shed, Timestamp)) -> bool {
        let now = self.now();
        let mut st = self.state();
        let Some(s) = st.sheds.get_mut(id) else {
            return false;
        };
        f(s, now);
        let snap = s.clone();
        self.save(&snap);
        true
    }

    /// The VM of shed `id` found by its `shed-id` label in a listing.
    pub(crate) async fn find_vm(&self, id: &str) -> Result<Option<Machine>, Error> {
        let all = self
            .inner
            .provider
            .machines(&self.inner.cfg.environment)
            .await?;
        Ok(all
            .into_iter()
            .find(|m| m.labels.get(ID_LABEL).map(String::as_str) == Some(id)))
    }

    async fn step_insert(&self, id: &str) {
        // The check again, just before the insert (it can be long after the request).
        let fw = self.inner.firewall.check().await;
        let (spec, was_sent, name) = {
            let now = self.now();
            let mut st = self.state();
            let Some(s) = st.sheds.get(id).cloned() else {
                return;
            };
            if !fw.passed {
                let s = st.sheds.get_mut(id).expect("present");
                s.set(Status::Error, Some(Reason::Firewall), now);
                s.detail = Some(fw.message.clone());
                s.vm_gone = s.create == CreateStage::NotSent;
                let snap = s.clone();
                self.save(&snap);
                self.inner.log.warn(format!(
                    "remote: shed {} ({id}) create not sent: the firewall check is failing (reason {})",
                    snap.name,
                    fw.reason.map(|r| r.as_str()).unwrap_or("")
                ));
                return;
            }
            // The limits were decided when the create was accepted, under the lock that recorded
            // it (an error status has no reason `limit`).
            let was_sent = s.create == CreateStage::Sent;
            let s = st.sheds.get_mut(id).expect("present");
            s.create = CreateStage::Sent;
            let snap = s.clone();
            self.save(&snap);
            (self.vm_spec(&snap), was_sent, snap.name)
        };
        // A create resumed after a restart may have reached the cloud before: look first.
        let mut result = None;
        if was_sent {
            match self.find_vm(id).await {
                Ok(Some(m)) => result = Some(Ok(Created::Adopted(m))),
                Ok(None) => {}
                Err(e) => {
                    self.inner.log.warn(format!(
                        "remote: shed {name} ({id}): the cloud could not be read before the insert was sent again: {e}"
                    ));
                }
            }
        }
        let result = match result {
            Some(r) => r,
            None => self.inner.provider.create(&spec).await,
        };
        let now = self.now();
        let mut st = self.state();
        let outcome: Result<Machine, (Option<Reason>, String)> = match result {
            Ok(Created::Machine(m)) | Ok(Created::Adopted(m)) => Ok(m),
            Ok(Created::NoStock { message, .. }) => Err((Some(Reason::Capacity), message)),
            Err(e) => Err((refusal(&e), e.to_string())),
        };
        if !st.sheds.contains_key(id) {
            // Deleted while the cloud was asked: the delete waits for the VM, then destroys it.
            if let Some(m) = st.deletes.get_mut(id) {
                // A refusal may follow an attempt whose answer was lost: the destroy step looks
                // for the VM by its shed-id label before it believes there is none.
                if let Ok(vm) = &outcome {
                    m.vm_id = Some(vm.id.clone());
                }
                let snap = m.clone();
                self.save_marker(&snap);
            }
            return;
        }
        match outcome {
            Ok(vm) => {
                let s = st.sheds.get_mut(id).expect("present");
                s.create = CreateStage::Made;
                s.vm_id = Some(vm.id.clone());
                let snap = s.clone();
                self.save(&snap);
                if st.waiters.contains(id) {
                    st.accepted.insert(id.to_string(), ShedView::from(&snap));
                }
                self.inner.log.info(format!(
                    "remote: shed {name} ({id}) VM {} made; waiting for its agent",
                    vm.name
                ));
            }
            Err((Some(reason), why)) => {
                let err = if reason == Reason::Quota {
                    ApiError::quota()
                } else {
                    ApiError::capacity()
                };
                self.inner.log.warn(format!(
                    "remote: shed {name} ({id}) create refused by the cloud ({reason}): {why}"
                ));
                if st.waiters.remove(id) {
                    // Early enough for the request to answer 503: no shed is left. An attempt whose
                    // answer was lost may have made the VM all the same, so a hidden delete marker
                    // takes the record's place until a listing shows there is none.
                    st.refused.insert(id.to_string(), err);
                    let s = st.sheds.get(id).cloned().expect("present");
                    let marker = DeleteMarker {
                        id: s.id.clone(),
                        name: s.name.clone(),
                        client: s.client.clone(),
                        vm_name: s.vm_name.clone(),
                        vm_id: None,
                        may_have_vm: true,
                        acknowledged_at: now,
                        last_error: None,
                        foreign_labels: false,
                    };
                    self.save_marker(&marker);
                    st.deletes.insert(id.to_string(), marker);
                    self.drop_record(&mut st, id);
                } else {
                    let s = st.sheds.get_mut(id).expect("present");
                    s.set(Status::Error, Some(reason), now);
                    s.detail = Some(why);
                    let snap = s.clone();
                    self.save(&snap);
                }
            }
            Err((None, why)) => {
                self.inner
                    .log
                    .warn(format!("remote: shed {name} ({id}) create failed: {why}"));
                let s = st.sheds.get_mut(id).expect("present");
                s.set(Status::Error, Some(Reason::CreateFailed), now);
                s.detail = Some(why);
                let snap = s.clone();
                self.save(&snap);
            }
        }
    }

    async fn step_power_on(&self, id: &str, vm: &str) {
        let fw = self.inner.firewall.check().await;
        {
            let now = self.now();
            let mut st = self.state();
            let Some(s) = st.sheds.get(id) else { return };
            let name = s.name.clone();
            let refusal = if !fw.passed {
                Some((Reason::Firewall, fw.message.clone()))
            } else {
                self.check_limits(&st, Some(id), false)
                    .err()
                    .map(|e| (Reason::Limit, e.message))
            };
            if let Some((reason, why)) = refusal {
                let s = st.sheds.get_mut(id).expect("present");
                s.set(Status::Stopped, Some(reason), now);
                s.detail = Some(why.clone());
                let snap = s.clone();
                self.save(&snap);
                self.inner.log.warn(format!(
                    "remote: shed {name} ({id}) start not sent ({reason}): {why}"
                ));
                return;
            }
        }
        let r = self.inner.provider.start(vm).await;
        match r {
            Ok(_) => {
                self.update(id, |s, _| s.start_sent = true);
            }
            Err(Error::NotFound { .. }) => self.gone_if_confirmed(id, vm).await,
            Err(e) => {
                let reason = refusal(&e);
                let name = self.update(id, |s, now| {
                    s.set(Status::Stopped, reason, now);
                    s.detail = Some(e.to_string());
                });
                if name {
                    self.inner.log.warn(format!(
                        "remote: shed {id} start failed{}: {e}",
                        reason.map(|r| format!(" ({r})")).unwrap_or_default()
                    ));
                }
            }
        }
    }

    async fn step_power_off(&self, id: &str, vm: &str) {
        match self.inner.provider.stop(vm).await {
            Ok(_) => {
                let mut name = String::new();
                let mut start = false;
                self.update(id, |s, now| {
                    let queued = s.queued.take();
                    s.set(Status::Stopped, None, now);
                    name = s.name.clone();
                    if queued == Some(Queued::Start) {
                        s.set(Status::Starting, None, now);
                        s.op = Some(Op::Start);
                        s.start_sent = false;
                        start = true;
                    }
                });
                if start {
                    self.inner.log.info(format!(
                        "remote: shed {name} ({id}) stopped; starting it for the start queued behind the stop"
                    ));
                } else if !name.is_empty() {
                    self.inner
                        .log
                        .info(format!("remote: shed {name} ({id}) stopped: its VM is off"));
                }
            }
            Err(Error::NotFound { .. }) => self.gone_if_confirmed(id, vm).await,
            Err(e) => {
                self.update(id, |s, _| s.detail = Some(e.to_string()));
                self.inner.log.warn(format!(
                    "remote: shed {id} stop failed (the periodic pass stops it again): {e}"
                ));
            }
        }
    }

    /// Removes shed `id` when a read of its one VM confirms that it is gone.
    pub(crate) async fn gone_if_confirmed(&self, id: &str, vm: &str) {
        match self.inner.provider.machine(vm).await {
            Ok(None) => {
                let mut st = self.state();
                if let Some(s) = st.sheds.get(id).cloned() {
                    if s.status == Status::Error {
                        let s = st.sheds.get_mut(id).expect("present");
                        s.vm_gone = true;
                        let snap = s.clone();
                        self.save(&snap);
                    } else {
                        self.drop_record(&mut st, id);
                        self.inner.log.info(format!(
                            "remote: shed {} ({id}) removed: its VM no longer exists",
                            s.name
                        ));
                    }
                }
            }
            Ok(Some(_)) => {}
            Err(e) => self
                .inner
                .log
                .warn(format!("remote: shed {id}: its VM could not be read: {e}")),
        }
    }

    async fn step_probe(&self, id: &str, vm: &str, ctx: &mut JobCtx) {
        let now = self.now();
        let since_start = *ctx.probe_since.get_or_insert(now);
        let read = self.inner.provider.machine(vm).await;
        let (op, name) = {
            let st = self.state();
            match st.sheds.get(id) {
                Some(s) => (s.op, s.name.clone()),
                None => return,
            }
        };
        let is_create = op == Some(Op::Create);
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
                self.inner.log.warn(format!(
                    "remote: shed {name} ({id}): the cloud could not be read (looked at again at the next pass): {e}"
                ));
                ctx.gave_up_reading = true;
                return;
            }
            Ok(None) => {
                if is_create {
                    self.update(id, |s, now| {
                        s.set(Status::Error, Some(Reason::CreateFailed), now);
                        s.detail = Some("the VM disappeared before its agent answered".into());
                        s.vm_gone = true;
                    });
                    self.inner.log.warn(format!(
                        "remote: shed {name} ({id}) create failed: the VM disappeared before its agent answered"
                    ));
                } else {
                    self.gone_if_confirmed(id, vm).await;
                }
                return;
            }
            Ok(Some(m)) => m,
        };
        if !readable(&m) {
            self.update(id, |s, now| {
                s.set(Status::Starting, Some(Reason::CloudUnreadable), now);
                s.op = op;
                s.foreign_labels = true;
            });
            self.inner.log.warn(format!(
                "remote: shed {name} ({id}): its VM carries labels of another shed version ({}={}); nothing is changed",
                SCHEMA_LABEL,
                m.labels.get(SCHEMA_LABEL).map(String::as_str).unwrap_or("none")
            ));
            ctx.gave_up_reading = true;
            return;
        }
        if matches!(m.status, VmStatus::Stopped | VmStatus::Stopping) {
            let reason = stop_reason(&m, now, self.inner.timings.run_limit_window);
            if is_create {
                self.update(id, |s, now| {
                    s.set(Status::Error, Some(Reason::CreateFailed), now);
                    s.detail = Some(format!(
                        "the VM stopped before its agent answered ({reason})"
                    ));
                });
            } else {
                self.update(id, |s, now| {
                    s.set(Status::Stopped, Some(reason), now);
                    s.foreign_labels = false;
                });
            }
            self.inner.log.warn(format!(
                "remote: shed {name} ({id}): its VM stopped before its agent answered ({reason})"
            ));
            return;
        }
        let target = ProbeTarget {
            shed_id: id.to_string(),
            vm_name: m.name.clone(),
            address: m.address.clone(),
        };
        let outcome = self.inner.probe.probe(&target).await;
        let waited = since(self.now(), since_start);
        match outcome {
            ProbeOutcome::Answered => {
                if m.labels.get(STATE_LABEL).map(String::as_str) != Some("ready") {
                    self.label_ready(id, vm).await;
                }
                let mut ran = false;
                let mut stop_queued = false;
                self.update(id, |s, now| {
                    if s.status == Status::Starting {
                        s.set(Status::Running, None, now);
                        s.foreign_labels = false;
                        s.detail = None;
                        ran = true;
                        // A stop queued while the probe ran waited for this answer: it acts now.
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
                    self.inner.log.info(format!(
                        "remote: shed {name} ({id}) running; stopping it for the stop queued during its start"
                    ));
                } else if ran {
                    self.inner
                        .log
                        .info(format!("remote: shed {name} ({id}) running"));
                }
            }
            ProbeOutcome::HostKeyMismatch if is_create => {
                self.fail_create(
                    id,
                    &name,
                    Reason::HostKey,
                    "the VM's host key did not match the pinned key",
                );
            }
            ProbeOutcome::Incompatible(why) if is_create => {
                self.fail_create(
                    id,
                    &name,
                    Reason::Layout,
                    &format!("the agent or guest layout is not compatible: {why}"),
                );
            }
            ProbeOutcome::Incompatible(why) => {
                let stopped = self.inner.provider.stop(vm).await;
                self.update(id, |s, now| {
                    s.set(Status::Stopped, Some(Reason::Layout), now);
                    s.detail = Some(why.clone());
                });
                self.inner.log.warn(format!(
                    "remote: shed {name} ({id}) start failed (layout): {why}{}",
                    stopped
                        .err()
                        .map(|e| format!("; its VM could not be stopped: {e}"))
                        .unwrap_or_default()
                ));
            }
            other => {
                let reason = match other {
                    ProbeOutcome::NoPin => Reason::NoPin,
                    _ => Reason::Unreachable,
                };
                if is_create && waited >= self.inner.timings.agent_wait {
                    self.fail_create(
                        id,
                        &name,
                        Reason::CreateFailed,
                        &format!(
                            "the agent did not answer within {} ({other:?})",
                            go_duration(self.inner.timings.agent_wait)
                        ),
                    );
                    return;
                }
                self.update(id, |s, now| {
                    if s.status == Status::Starting && s.reason != Some(reason) {
                        let op = s.op;
                        s.set(Status::Starting, Some(reason), now);
                        s.op = op;
                    }
                });
                ctx.next_probe = Some(
                    self.now()
                        + chrono::Duration::from_std(self.inner.timings.probe_interval)
                            .unwrap_or_default(),
                );
            }
        }
    }

    fn fail_create(&self, id: &str, name: &str, reason: Reason, why: &str) {
        self.update(id, |s, now| {
            s.set(Status::Error, Some(reason), now);
            s.detail = Some(why.to_string());
        });
        self.inner.log.warn(format!(
            "remote: shed {name} ({id}) create failed ({reason}): {why}; its VM is destroyed"
        ));
    }

    /// Labels shed `id`'s VM `ready` (a failure is repaired by the pass).
    pub(crate) async fn label_ready(&self, id: &str, vm: &str) {
        let Some(labels) = self.inner.provider.machine_labels() else {
            return;
        };
        let set = orca::labels::Labels::from([(STATE_LABEL.to_string(), "ready".to_string())]);
        if let Err(e) = labels.set_labels(vm, &set, &[]).await {
            self.inner.log.warn(format!(
                "remote: shed {id}: its VM could not be labelled ready (the pass tries again): {e}"
            ));
        }
    }

    async fn step_destroy(&self, id: &str) {
        let Some(marker) = self.state().deletes.get(id).cloned() else {
            return;
        };
        let vm_id = match &marker.vm_id {
            Some(v) => Some(v.clone()),
            None => match self.find_vm(id).await {
                Ok(m) => m.map(|m| m.id),
                Err(e) => {
                    self.marker_failed(id, format!("the cloud could not be listed: {e}"));
                    return;
                }
            },
        };
        let Some(vm) = vm_id else {
            let mut st = self.state();
            self.drop_marker(&mut st, id);
            self.inner.log.info(format!(
                "remote: shed {} ({id}) deleted (no VM was made)",
                marker.name
            ));
            return;
        };
        // A delete still works after a failed read; labels of another version keep the VM.
        match self.inner.provider.machine(&vm).await {
            Ok(None) => {
                let mut st = self.state();
                self.drop_marker(&mut st, id);
                self.inner.log.info(format!(
                    "remote: shed {} ({id}) deleted (its VM was gone already)",
                    marker.name
                ));
                return;
            }
            Ok(Some(m)) if !readable(&m) => {
                let mut st = self.state();
                if let Some(mk) = st.deletes.get_mut(id) {
                    mk.foreign_labels = true;
                    mk.vm_id = Some(vm.clone());
                    let snap = mk.clone();
                    self.save_marker(&snap);
                }
                self.inner.log.warn(format!(
                    "remote: shed {} ({id}): its VM {} carries labels of another shed version; it keeps running until they are readable",
                    marker.name, m.name
                ));
                return;
            }
            _ => {}
        }
        if let Some(labels) = self.inner.provider.machine_labels() {
            let set =
                orca::labels::Labels::from([(STATE_LABEL.to_string(), "deleting".to_string())]);
            if let Err(e) = labels.set_labels(&vm, &set, &[]).await {
                self.inner.log.warn(format!(
                    "remote: shed {} ({id}): its VM could not be labelled deleting: {e}",
                    marker.name
                ));
            }
        }
        match self.inner.provider.delete(&vm).await {
            Ok(_) => {
                let mut st = self.state();
                self.drop_marker(&mut st, id);
                self.inner.log.info(format!(
                    "remote: shed {} ({id}) deleted: VM destroyed",
                    marker.name
                ));
            }
            Err(e) => self.marker_failed(id, e.to_string()),
        }
    }

    fn marker_failed(&self, id: &str, why: String) {
        let mut st = self.state();
        if let Some(m) = st.deletes.get_mut(id) {
            m.last_error = Some(why.clone());
            let snap = m.clone();
            self.save_marker(&snap);
            self.inner.log.warn(format!(
                "remote: shed {} ({id}): the delete is recorded but the VM could not be destroyed yet (the periodic pass retries): {why}",
                snap.name
            ));
        }
    }

    async fn step_destroy_failed(&self, id: &str) {
        let Some(s) = self.state().sheds.get(id).cloned() else {
            return;
        };
        let vm = match &s.vm_id {
            Some(v) => Some(v.clone()),
            None => match self.find_vm(id).await {
                Ok(m) => m.map(|m| m.id),
                Err(e) => {
                    self.inner.log.warn(format!(
                        "remote: shed {} ({id}): the cloud could not be listed to destroy the VM of its failed create: {e}",
                        s.name
                    ));
                    return;
                }
            },
        };
        let Some(vm) = vm else {
            self.update(id, |s, _| s.vm_gone = true);
            return;
        };
        match self.inner.provider.delete(&vm).await {
            Ok(_) => {
                self.update(id, |s, _| {
                    s.vm_gone = true;
                });
                self.inner.log.info(format!(
                    "remote: shed {} ({id}): the VM of its failed create is destroyed; the shed stays in error until it is deleted",
                    s.name
                ));
            }
            Err(e) => self.inner.log.warn(format!(
                "remote: shed {} ({id}): the VM of its failed create could not be destroyed (the periodic pass retries): {e}",
                s.name
            )),
        }
    }
}
