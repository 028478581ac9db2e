//! The jobs: one task per shed (or acknowledged delete) at a time, doing its cloud work one step after
//! another. Each step is chosen from the record as it is now (`Backend::next_step`, under the lock),
//! so a call that changes the record while a cloud operation runs ("queued") is acted on as soon as that
//! operation ends, and a restart resumes a job from the record alone.

use std::time::Duration;

use orca::{Error, Machine, Timestamp};

use crate::backend::{vm_name, Backend, State, ENV_LABEL, ID_LABEL, SCHEMA, SCHEMA_LABEL};
use crate::clock::since;
use crate::model::{CreateStage, Op, Queued, Reason, Shed, Status};
use orca::spec::quoted;

mod destroy;
mod insert;
mod power;
mod probe;

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

/// The reason a cloud's refusal gives a shed: quota or capacity (`None` for any other failure).
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

/// What the log says of VM `m`, named by a record or marker, that is not the shed's
/// (`Backend::is_shed_vm`): which VM, the labels that say whose it is, and that it is left alone.
pub(crate) fn not_its(m: &Machine) -> String {
    let label = |k| m.labels.get(k).map(String::as_str).unwrap_or("none");
    format!(
        "{} ({}), is not its VM ({ENV_LABEL} {}, {ID_LABEL} {}); that VM is left alone",
        m.name,
        m.id,
        quoted(label(ENV_LABEL)),
        quoted(label(ID_LABEL)),
    )
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
        if !self.state().jobs.insert(id.to_string()) {
            return;
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
                self.log()
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
                    self.save(s);
                    return s.vm_id.clone().map_or(Step::Done, Step::PowerOff);
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
            Status::Error if !s.vm_gone && !ctx.failed_destroy_tried => Step::DestroyFailed,
            Status::Error | Status::Running | Status::Stopped => Step::Done,
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
        self.update_if(id, |_, _| true, f)
    }

    /// Updates shed `id` with `f` and writes it if `ok` holds of it (and of the state) under the
    /// same lock; false otherwise.
    pub(crate) fn update_if(
        &self,
        id: &str,
        ok: impl FnOnce(&State, &Shed) -> bool,
        f: impl FnOnce(&mut Shed, Timestamp),
    ) -> bool {
        let now = self.now();
        let mut st = self.state();
        if !st.sheds.get(id).is_some_and(|s| ok(&st, s)) {
            return false;
        }
        let s = st.sheds.get_mut(id).expect("present");
        f(s, now);
        self.save(s);
        true
    }

    /// What stands of the name of shed `id`'s VM in the environment's pool.
    pub(crate) async fn vm_by_name(&self, id: &str) -> Result<Named, Error> {
        let env = &self.inner.cfg.environment;
        let name = vm_name(env, id);
        let vm = self.inner.provider.machine_named(env, &name).await?;
        Ok(match vm {
            Some(m) if m.labels.get(ID_LABEL).map(String::as_str) == Some(id) => {
                Named::Vm(Box::new(m))
            }
            Some(_) => Named::Foreign,
            None => Named::Nothing,
        })
    }

    /// Removes what shed `id`'s creates may have left beside a VM that no look-up shows (on
    /// Compute Engine the boot disk a create makes before its instance), by the VM's name in the
    /// environment's pool. Only when no VM of that name stands: a name another shed's VM carries is
    /// that shed's, and so is what stands beside it.
    pub(crate) async fn remove_left(&self, id: &str) -> Result<bool, Error> {
        let env = &self.inner.cfg.environment;
        let name = vm_name(env, id);
        self.inner.provider.delete_named(env, &name).await
    }
}

/// What a look-up by name found of a shed's VM.
pub(crate) enum Named {
    /// The shed's VM (it carries the shed's `shed-id`).
    Vm(Box<Machine>),
    /// A VM of that name that another shed's labels claim: never this shed's to destroy.
    Foreign,
    /// No VM of that name.
    Nothing,
}
