//! `core.cloud.created`: ask the provider for `count` VMs; each gets a `pending` soul (created_by NULL)
//! and a one-time bootstrap token kept as a hash.
//!
//! The order of things, so that nothing made is ever forgotten:
//! 1. everything that can be checked is checked before any cloud call (parameters, provider, profile,
//!    user data, credentials, the driver's capabilities for the spec): [`Keeper::prepare`];
//! 2. the step takes its lock ([`super::locks`]), held until it ends, so that the reconciler
//!    leaves its journal rows alone while it runs; the batch's indexes are taken from `keeper.name_counters` and each VM is written to the journal
//!    `keeper.cloud_vms` as `requested` (one transaction), before the cloud is asked
//!    ([`Keeper::plan`]);
//! 3. the VMs are made one after the other; each one made is journalled `made` with its id at once
//!    ([`Keeper::make_all`]);
//! 4. all made: one transaction writes the souls, the token hashes, the journal (`recorded`) and the
//!    audit event, in the lock's session and only while it still holds the lock: a step whose lock
//!    was lost may have had its VMs destroyed by a reconciler, and records nothing
//!    ([`Keeper::record`]);
//! 5. a failure at any point (a VM refused, a VM without an FQDN, an adopted VM, a SID clash, the
//!    registry or the audit failing): the VMs this step made are destroyed (journal `destroyed`), and
//!    one that cannot be destroyed is kept in the journal as `kept`, to be destroyed later (what its
//!    delete left beside it, when it names pieces, is removed by the VM's name at once); these rows,
//!    and those of the VMs never asked for (`failed`), each change in one transaction. The step
//!    output names each (`destroyed`, `recorded`) ([`Keeper::roll_back`]);
//! 6. a create that fails with an error that is not a clear refusal (a transient error, throttling,
//!    leftovers, an unknown error, or any error after a retry, when an earlier attempt's answer may
//!    have been lost) may have made the VM all the same: it is looked up by name in keeper's pool, and
//!    one found carrying the step's id ([`super::STEP_LABEL`]) is this step's, destroyed (or kept)
//!    as in 5 (`made_after_error`); one without it is another step's, left alone (the row stays
//!    `requested`, nothing removed by name). When it cannot be
//!    found, what the create may have made beside a VM (an address, an interface, a boot disk) is
//!    removed by name ([`orca::Provider::delete_named`]) and, as when the look-up fails, its
//!    journal row stays `requested`, saying so, for a later run (or the operator) to resolve (a
//!    cloud may show the VM late), and the step output names it (`unresolved`);
//! 7. a no-stock answer can follow a create that made pieces and could not remove them all (it
//!    names them, `Created::left`): they are removed by name before the row is journalled `failed`;
//!    when that fails the row stays `requested` (`unresolved`) for the reconciler. A clean no stock
//!    is journalled `failed` without that call.

mod batch;
mod checks;

use std::sync::Arc;

use serde_json::{json, Value};

use super::journal::JournalUpdate;
use super::locks::{step_key, LockSession};
use super::params::{CreateParams, UserData};
use super::{delete_named_unless_taken, own_named, ByName, Keeper, NamedRemoval, Run, STEP_LABEL};
use crate::error::{from_orca_saying, Error, Result, COMMIT_UNKNOWN};
use crate::mask::masked;
use crate::registry::{CloudProvider, ProfileSpec};
use crate::tokens::PlainToken;
use crate::userdata::Template;

/// The base name of VMs of a batch without `name`.
pub const DEFAULT_BASE: &str = "keeper";

/// One VM of the batch.
struct Planned {
    index: i64,
    name: String,
    predicted_fqdn: Option<String>,
    token: PlainToken,
    journal_id: i64,
}

/// What a step makes its VMs from, all checked before any cloud call.
struct Batch {
    params: CreateParams,
    row: CloudProvider,
    spec: ProfileSpec,
    template: Option<Template>,
    cloud: Arc<dyn orca::Provider>,
    /// The VMs' base name: they are `<base>-<index>`.
    base: String,
    /// The step's id, which each VM carries ([`STEP_LABEL`]).
    step_id: String,
}

impl Batch {
    /// The spec of VM `name` in `pool` with user data `ud`, carrying the step's id, so that a
    /// look-up by name can tell this step's VM from one of the same name another step made.
    fn machine_spec(&self, name: &str, pool: &str, ud: &str) -> orca::MachineSpec {
        let mut spec = self.spec.machine_spec(name, &self.row.region, pool, ud);
        spec.labels
            .insert(STEP_LABEL.to_string(), self.step_id.clone());
        spec
    }
}

/// What the creates of a batch came to.
#[derive(Default)]
struct Outcome {
    made: Vec<Made>,
    /// VMs the cloud answered with that an earlier create made: never this step's.
    adopted: Vec<String>,
    /// VMs a failed create made all the same, found by name.
    made_after_error: Vec<Value>,
    /// VMs a failed create may have made, which the look-up by name did not find.
    unresolved: Vec<Value>,
    /// Why the step stops (`None`: every VM was made).
    failure: Option<Error>,
}

/// One VM the cloud made for this step.
struct Made {
    planned: Planned,
    machine: orca::Machine,
}

impl Made {
    fn attributes(&self) -> Value {
        let m = &self.machine;
        let mut a = json!({
            "name": m.name,
            "index": self.planned.index,
            "machine_type": m.machine_type,
            "location": m.location,
            "status": m.status.as_str(),
            "cloud_status": m.cloud_status,
            "labels": m.labels,
        });
        if !m.private_address.is_empty() {
            a["private_ip"] = json!(m.private_address);
        }
        if !m.address.is_empty() {
            a["public_ip"] = json!(m.address);
        }
        if let Some(t) = m.created_at {
            a["created_at"] = json!(t);
        }
        masked(&a)
    }

    fn primary_ip(&self) -> &str {
        if self.machine.address.is_empty() {
            &self.machine.private_address
        } else {
            &self.machine.address
        }
    }
}

impl Keeper {
    pub(crate) async fn created(&self, mut run: Run, params: &Value, actor: &str) -> Run {
        let batch = or_refuse!(run, self.prepare(&mut run, params).await);
        // Held while this step runs: the reconciler leaves the journal rows of a running step alone.
        let key = step_key(&run.step_id);
        let mut running = or_refuse!(run, LockSession::holding(&self.pool, &key).await);
        let run = self
            .create_batch(run, &batch, actor, (&mut running, &key))
            .await;
        running.close().await;
        run
    }

    /// Makes the batch, then records it (in `lock`'s session, while it holds the step's lock), or
    /// rolls it back when the step fails.
    async fn create_batch(
        &self,
        mut run: Run,
        batch: &Batch,
        actor: &str,
        lock: (&mut LockSession, &str),
    ) -> Run {
        let planned = or_refuse!(
            run,
            self.plan(&run.step_id, &batch.row, &batch.base, batch.params.count)
                .await
        );
        tracing::info!(step_id = %run.step_id, provider = %batch.row.name, count = batch.params.count, first = %planned[0].name, "creating VMs");
        let out = self.make_all(&mut run, batch, planned).await;
        if !out.adopted.is_empty() {
            run.fact("adopted_not_counted", json!(out.adopted));
        }
        if !out.made_after_error.is_empty() {
            run.fact("made_after_error", json!(out.made_after_error));
        }
        let unresolved = out.unresolved.len();
        run.fact("unresolved", json!(out.unresolved));
        let failure = match out.failure {
            Some(e) => e,
            None => match self.record(&run, &batch.row, &out.made, actor, lock).await {
                Ok(()) => {
                    run.audited = true;
                    run.output = Some(batch::output(&out.made));
                    return run;
                }
                Err(e) if e.code == COMMIT_UNKNOWN => {
                    // The registry may hold the batch: its VMs stay, for the reconciler to judge
                    // by the journal.
                    run.fact("vm_ids", json!(batch::vm_ids(&out.made)));
                    return run.fail(e);
                }
                Err(e) => e,
            },
        };
        self.roll_back(run, &batch.row, &batch.cloud, out.made, unresolved, failure)
            .await
    }

    /// Reads and checks everything the batch needs, before any cloud call.
    async fn prepare(&self, run: &mut Run, params: &Value) -> Result<Batch> {
        let params = CreateParams::parse(params)?;
        run.add_facts(json!({"provider": params.provider, "count": params.count}));
        let row = self.provider_row(&params.provider).await?;
        let spec = self.profile_of(&params, &row).await?;
        checks::check_self_onboard(&params, &row)?;
        let template = self.template_for(&params)?;
        let cloud = self.cloud(&row).await?;
        let batch = Batch {
            base: params.name.clone().unwrap_or_else(|| DEFAULT_BASE.into()),
            params,
            row,
            spec,
            template,
            cloud,
            step_id: run.step_id.clone(),
        };
        self.check_probe(&batch)?;
        Ok(batch)
    }

    /// Makes the planned VMs one after the other, stopping at the first failure; the rows of the VMs
    /// never asked for are moved to `failed`.
    async fn make_all(&self, run: &mut Run, b: &Batch, planned: Vec<Planned>) -> Outcome {
        let mut out = Outcome::default();
        let mut queue = planned.into_iter();
        for vm in queue.by_ref() {
            if let Err(e) = self.make_one(run, b, vm, &mut out).await {
                out.failure = Some(e);
                break;
            }
        }
        self.journal_never_asked(run, queue.collect()).await;
        out
    }

    /// Asks the cloud for `vm`; an error stops the batch.
    async fn make_one(
        &self,
        run: &mut Run,
        b: &Batch,
        vm: Planned,
        out: &mut Outcome,
    ) -> Result<()> {
        let ud = self.user_data(
            &b.params,
            b.template.as_ref(),
            &vm.name,
            vm.predicted_fqdn.as_deref(),
            &vm.token,
        );
        let ud = match ud {
            Ok(ud) => ud,
            Err(e) => {
                self.journal(JournalUpdate::new(vm.journal_id, "failed", &e.message))
                    .await
                    .ok();
                return Err(e);
            }
        };
        let ms = b.machine_spec(&vm.name, &self.settings.pool, &ud);
        // The reconciler's grace runs from the row's last move: move it now, as the VM is asked
        // for, so that a VM asked for late in a long batch is not judged never made at once. The
        // cloud is not asked when the journal cannot say so, nor when the row has left `requested`:
        // a reconciler that took this step for a stopped one (its lock lost) closed it, and would
        // never look for a VM asked for now.
        let asked = JournalUpdate {
            detail: None,
            ..JournalUpdate::new(vm.journal_id, "requested", "").from("requested")
        };
        if !self.journal(asked).await? {
            return Err(Error::lock_lost(format!(
                "VM {} was not asked for: its journal row is no longer requested (a reconciler resolved it, so this step's lock was lost); nothing was sent to the cloud for it",
                vm.name
            )));
        }
        match b.cloud.create(&ms).await {
            Ok(orca::Created::Machine(m)) => self.made(run, b, vm, m, out).await,
            Ok(orca::Created::Adopted(m)) => {
                // Made by an earlier create call: not this step's, not new, never counted.
                let why = format!(
                    "the cloud answered with VM {} ({}) made by an earlier create; core.cloud.created never adopts",
                    m.id, m.name
                );
                self.journal(JournalUpdate::new(vm.journal_id, "failed", &why).vm(Some(&m.id)))
                    .await
                    .ok();
                out.adopted.push(m.id.clone());
                Err(Error::new(502, "vm.adopted", why))
            }
            Ok(orca::Created::NoStock {
                machine_type,
                location,
                message,
                left,
            }) => {
                let why = format!(
                    "VM {} refused: no stock of {machine_type} in {location} ({message})",
                    vm.name
                );
                // A cloud can answer no stock once its create made the pieces before the VM, and
                // its clean-up can leave some (it names them): the row closes only once they are
                // gone. A clean no stock left nothing, and costs no call.
                let removed = if left.is_empty() {
                    Ok("nothing was left".into())
                } else {
                    self.remove_left(b, &vm.name).await
                };
                match removed {
                    Ok(removed) => {
                        let why = format!("{why}; {removed}");
                        self.journal(JournalUpdate::new(vm.journal_id, "failed", &why))
                            .await
                            .ok();
                    }
                    Err(left) => {
                        let unresolved = format!("unresolved: {why}; {left}");
                        self.unresolved(run, b, &vm, unresolved, out).await;
                    }
                }
                Err(Error::new(503, "cloud.no_stock", why))
            }
            Err(e) if e.made_nothing() => {
                let err = from_orca_saying(&e, |m| format!("VM {} refused: {m}", vm.name));
                self.journal(JournalUpdate::new(vm.journal_id, "failed", &err.message))
                    .await
                    .ok();
                Err(err)
            }
            Err(e) => Err(self.failed_create(run, b, vm, &e, out).await),
        }
    }

    /// Journals VM `m`, made for `vm`, and checks it is usable.
    async fn made(
        &self,
        run: &Run,
        b: &Batch,
        vm: Planned,
        m: orca::Machine,
        out: &mut Outcome,
    ) -> Result<()> {
        let journalled = self
            .journal(JournalUpdate::new(vm.journal_id, "made", "").vm(Some(&m.id)))
            .await;
        tracing::info!(step_id = %run.step_id, vm_id = %m.id, name = %m.name, "VM made");
        let check = checks::check_made(
            &m,
            vm.predicted_fqdn.as_deref(),
            b.params.userdata == UserData::SelfOnboard,
        );
        out.made.push(Made {
            planned: vm,
            machine: m,
        });
        journalled.and(check)
    }

    /// A create of `vm` failed with `e`, which is not a clear refusal: the VM may exist all the same
    /// (an answer lost, then the retries ran out). What the cloud made is recorded or destroyed like
    /// the rest, never made and forgotten. Answers the step's error.
    async fn failed_create(
        &self,
        run: &mut Run,
        b: &Batch,
        vm: Planned,
        e: &orca::Error,
        out: &mut Outcome,
    ) -> Error {
        let err = from_orca_saying(e, |m| format!("VM {} failed: {m}", vm.name));
        if let orca::Error::Leftovers { left, .. } = e {
            run.fact("cloud_leftovers", json!(left));
        }
        // A name alone is no proof: a restored database (or a second one on the same account)
        // hands a name out again, so the VM of that name is this step's only when it carries the
        // step's id.
        let pool = &self.settings.pool;
        match own_named(&*b.cloud, pool, &vm.name, &b.step_id).await {
            Ok(ByName::Own(m)) => {
                let why = format!(
                    "made after all: the cloud answered {e}, and a look-up by name found VM {}",
                    m.id
                );
                tracing::warn!(step_id = %run.step_id, vm_id = %m.id, name = %m.name, error = %e, "the create failed but the VM was made");
                let journalled = self
                    .journal(JournalUpdate::new(vm.journal_id, "made", why).vm(Some(&m.id)))
                    .await;
                if let Err(j) = journalled {
                    tracing::warn!(vm_id = %m.id, error = %j, "journal");
                }
                out.made_after_error.push(json!({
                    "vm_id": m.id, "name": m.name, "error": e.to_string(),
                }));
                out.made.push(Made {
                    planned: vm,
                    machine: m,
                });
            }
            Ok(ByName::Other(m)) => {
                let why = format!(
                    "unresolved: the cloud answered {e}, so VM {} may have been made; the VM of that name in pool {pool}, {}, is not this step's (its label {STEP_LABEL} is not {}): it is left alone, and nothing is removed by name, which would remove it; look for this step's VM at provider {} and destroy it with core.cloud.destroyed",
                    vm.name, m.id, b.step_id, b.row.name
                );
                self.unresolved(run, b, &vm, why, out).await;
            }
            Ok(ByName::Nothing) => {
                // What a create makes before its VM may stand without it: it goes now, and the row
                // stays for a later run to look for the VM again (a cloud may show it late).
                let removed = match self.remove_left(b, &vm.name).await {
                    Ok(removed) | Err(removed) => removed,
                };
                let why = format!(
                    "unresolved: the cloud answered {e}, so VM {} may have been made; a look-up by name in pool {} does not show it (yet); {removed}; look for it at provider {} and destroy it with core.cloud.destroyed",
                    vm.name, self.settings.pool, b.row.name
                );
                self.unresolved(run, b, &vm, why, out).await;
            }
            Err(l) => {
                let why = format!(
                    "unresolved: the cloud answered {e}, so VM {} may have been made, and the look-up by name failed too ({l}); look for it at provider {} and destroy it with core.cloud.destroyed",
                    vm.name, b.row.name
                );
                self.unresolved(run, b, &vm, why, out).await;
            }
        }
        err
    }

    /// Removes what creates of `name` may have left beside a VM (an address, an interface, a boot
    /// disk), by name in keeper's pool, unless a VM of that name stands: it is not this step's (this
    /// step made no VM), and removing by name would remove it. Answers the words the journal adds,
    /// `Err` when something could not be removed.
    async fn remove_left(&self, b: &Batch, name: &str) -> std::result::Result<String, String> {
        let pool = &self.settings.pool;
        match delete_named_unless_taken(&*b.cloud, pool, name, None).await {
            Ok(NamedRemoval::Done(true)) => Ok("what its create left was removed by name".into()),
            Ok(NamedRemoval::Done(false)) => {
                Ok("nothing of it was left to be removed by name".into())
            }
            Ok(NamedRemoval::Taken(other)) => Err(format!(
                "nothing was removed by name: VM {} of that name stands in pool {pool}, another step's, and would go with it",
                other
            )),
            Err(e) => {
                tracing::warn!(name, provider = %b.row.name, error = %e, "what a failed create left could not be removed");
                Err(format!(
                    "what its create left could not be removed by name ({e}): the reconciler removes it"
                ))
            }
        }
    }

    /// Leaves `vm`'s row `requested`, saying `why`, for a later run (or the operator) to resolve,
    /// and names it in the output's `unresolved`.
    async fn unresolved(&self, run: &Run, b: &Batch, vm: &Planned, why: String, out: &mut Outcome) {
        tracing::error!(step_id = %run.step_id, name = %vm.name, provider = %b.row.name, "{why}");
        let journalled = self
            .journal(JournalUpdate::new(vm.journal_id, "requested", &why))
            .await;
        out.unresolved.push(json!({
            "name": vm.name,
            "in": if journalled.is_ok() { "keeper.cloud_vms (state requested)" } else { "nowhere: the registry failed too; this VM is only in this output and the log" },
            "why": why,
        }));
    }

    /// Moves the rows of the VMs never asked for (the step failed before their turn) to `failed`,
    /// all of them in one transaction; a failure is said in the output's `journal_error`.
    async fn journal_never_asked(&self, run: &mut Run, never: Vec<Planned>) {
        let why = "not asked for: the step failed before this VM's turn";
        let updates: Vec<JournalUpdate> = never
            .iter()
            .map(|vm| JournalUpdate::new(vm.journal_id, "failed", why))
            .collect();
        if let Err(e) = self.journal_all(&updates).await {
            tracing::warn!(step_id = %run.step_id, error = %e, "journal: the VMs never asked for stay requested");
            let names: Vec<&str> = never.iter().map(|vm| vm.name.as_str()).collect();
            run.fact(
                "journal_error",
                json!(format!(
                    "the journal rows of the VMs never asked for ({}) stay requested: {}",
                    names.join(", "),
                    e.message
                )),
            );
        }
    }
}
