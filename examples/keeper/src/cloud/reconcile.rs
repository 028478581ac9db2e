//! The reconciler: resolves the journal rows that `created` steps left half-done.
//!
//! A `created` step journals each VM before it asks the cloud for it and resolves every row before it
//! ends. A keeper stopped half-way (killed, its machine lost, a second Ctrl-C) leaves rows `requested`
//! (the VM may be made, its id unknown) or `made` (its id known, no soul); a step whose look-up by
//! name failed leaves `requested` rows it names `unresolved`; a roll-back that could not destroy a VM
//! leaves it `kept`. Each of these VMs would bill forever. [`Keeper::reconcile`] does what the step
//! would have done on failure. A batch whose step ended without recording it is never recorded (its
//! one-time tokens were never delivered), so each VM found, by its id or by its name in keeper's
//! pool, is destroyed, and a row whose VM does not exist is closed:
//!
//! | row | the VM | the row becomes |
//! | --- | --- | --- |
//! | `requested` | found by name, carrying its step's label ([`super::STEP_LABEL`]) | `destroyed`, with its id |
//! | `requested` | a VM of its name without that label (another step's) | unchanged (the run's `error`); nothing is removed by name |
//! | `requested` | not found, asked for longer ago than the grace | `failed`, once what its create left beside a VM is removed by name |
//! | `requested` | not found, and that removal fails | unchanged (the run's `error`); the next run tries again |
//! | `requested` | not found within the grace (a cloud may list a new VM late) | unchanged (`waiting`) |
//! | `made`, `kept` | exists | `destroyed` |
//! | `made`, `kept` | gone | `destroyed` (`gone`) |
//! | any | destroying it fails | `kept` (named in `kept`) |
//!
//! A running step holds its step's lock ([`super::locks`]): the reconciler takes a step's lock before
//! it reads the step's rows, and leaves the rows of a step whose lock another session holds alone
//! (`running`). So it never destroys the VMs of a step still running, and two reconcilers (two keepers
//! starting at once) never resolve one step twice. Each VM is destroyed under its VM lock, as
//! `core.cloud.destroyed` does. Each row moves only from the state the reconciler read, and a step's
//! moves and their audit event `cloud.reconciled` are one transaction: a second run finds nothing to
//! do and writes nothing.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde_json::{json, Value};

use super::destroyed::NotCounted;
use super::journal::{move_resize, move_row, JournalUpdate};
use super::locks::{step_key, LockSession};
use super::{own_named, ByName, Keeper, Named, STEP_LABEL};
use crate::audit;
use crate::db::begin;
use crate::error::{db_error, from_orca_saying, Error, Result};
use crate::registry::CloudProvider;

/// How long after a VM was asked for the reconciler still waits for it to show up before it closes
/// its row as never made: clouds may list a new VM a while after its create answered.
pub const RECONCILE_GRACE: Duration = Duration::from_secs(600);

/// The audit event of a step's rows resolved by the reconciler.
pub const CLOUD_RECONCILED: &str = "cloud.reconciled";

/// The journal states of a VM that a step left unresolved.
const HALF_DONE: [&str; 3] = ["requested", "made", "kept"];

/// What the reconciler did with one step's rows.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct StepReconciled {
    /// The step that journalled them.
    pub step_id: String,
    /// Its provider.
    pub provider: String,
    /// The VMs found and destroyed.
    pub destroyed: Vec<String>,
    /// The VMs of `made` or `kept` rows that were gone already.
    pub gone: Vec<String>,
    /// The VMs (by name) never made: their rows are now `failed`.
    pub never_made: Vec<String>,
    /// The VMs that could not be destroyed: `{vm_id, name, error}`; their rows are `kept`.
    pub kept: Vec<Value>,
    /// The VMs (by name) asked for within the grace and not found (yet): their rows stay `requested`;
    /// for a resize, the VMs (by id) found neither running nor stopped (stopping, starting).
    pub waiting: Vec<String>,
    /// The VMs a resize left stopped (its keeper stopped before the driver started them again),
    /// started again: their resize journal rows are now `started`.
    pub started: Vec<String>,
    /// Why some rows were left as they were (the provider, the cloud, a look-up, the registry).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<Value>,
    /// How many rows moved.
    pub moved: u64,
}

/// What a reconciler run did.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Reconciled {
    /// Whether a row moved.
    pub changed: bool,
    /// Each step with half-done rows whose lock the run took.
    pub steps: Vec<StepReconciled>,
    /// The steps left alone: their lock is held (the step is running, or another reconciler has it).
    pub running: Vec<String>,
    /// Why the run stopped before the end, when it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<Value>,
}

impl Reconciled {
    /// Whether something is left for the operator: a VM that could not be destroyed, or rows left
    /// by an error.
    pub fn needs_attention(&self) -> bool {
        self.error.is_some()
            || self
                .steps
                .iter()
                .any(|s| s.error.is_some() || !s.kept.is_empty())
    }
}

/// A half-done journal row, as read under its step's lock.
struct HalfDone {
    id: i64,
    name: String,
    /// The pool it was asked for in (rows older than the journal's pools: keeper's pool now).
    pool: String,
    vm_id: Option<String>,
    state: &'static str,
    /// Asked for (or last moved) longer ago than the grace.
    settled: bool,
}

/// What became of one row's VM.
enum Resolution {
    Destroyed(String),
    Gone(String),
    /// No VM showed; true when removing the name found something (pieces, or a VM no listing showed).
    NeverMade(bool),
    Waiting,
    Kept(String, Error),
    Left(Error),
}

impl Keeper {
    /// Resolves every half-done journal row whose step is not running, on behalf of `actor`; a VM
    /// asked for within `grace` and not found is looked for again next time. `Err` when the journal
    /// cannot be read at all.
    pub async fn reconcile(&self, actor: &str, grace: Duration) -> Result<Reconciled> {
        let mut out = Reconciled::default();
        let steps = self.half_done_steps().await?;
        let resizes = self.resizing_steps().await?;
        if steps.is_empty() && resizes.is_empty() {
            return Ok(out);
        }
        let session = LockSession::open(&self.pool).await?;
        let steps = steps.into_iter().map(|(s, p)| (s, p, false));
        for (step_id, provider, resize) in
            steps.chain(resizes.into_iter().map(|(s, p)| (s, p, true)))
        {
            let key = step_key(&step_id);
            match session.try_lock(&key).await {
                Ok(true) => {}
                Ok(false) => {
                    out.running.push(step_id);
                    continue;
                }
                Err(e) => {
                    out.error = Some(e.to_json());
                    break;
                }
            }
            let step = if resize {
                self.reconcile_resizes(&step_id, &provider, actor).await
            } else {
                self.reconcile_step(&session, &step_id, &provider, actor, grace)
                    .await
            };
            out.changed |= step.moved > 0;
            out.steps.push(step);
            if let Err(e) = session.unlock(&key).await {
                out.error = Some(Error::db("let a step's lock go", &e).to_json());
                break;
            }
        }
        session.close().await;
        Ok(out)
    }

    /// The steps with half-done rows, oldest first: `(step_id, provider)`.
    async fn half_done_steps(&self) -> Result<Vec<(String, String)>> {
        let client = self.pool.get().await?;
        let sql = "SELECT step_id, provider FROM keeper.cloud_vms WHERE state = ANY($1)
                 GROUP BY step_id, provider ORDER BY min(id)";
        let rows = client
            .query(sql, &[&HALF_DONE.as_slice()])
            .await
            .map_err(db_error("read the journal"))?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    /// Resolves the half-done rows of step `step_id`, whose lock `session` holds.
    async fn reconcile_step(
        &self,
        session: &LockSession,
        step_id: &str,
        provider: &str,
        actor: &str,
        grace: Duration,
    ) -> StepReconciled {
        let mut report = StepReconciled {
            step_id: step_id.to_string(),
            provider: provider.to_string(),
            ..StepReconciled::default()
        };
        let resolved = async {
            // Read again under the lock: another reconciler may have resolved them meanwhile.
            let rows = self.half_done_rows(step_id, provider, grace).await?;
            if rows.is_empty() {
                return Ok(Vec::new());
            }
            let row = self.provider_row(provider).await?;
            let cloud = self.cloud(&row).await?;
            let mut resolved = Vec::new();
            for r in rows {
                let resolution = self.resolve_row(session, &row, &cloud, &r, step_id).await;
                resolved.push((r, resolution));
            }
            Ok::<_, Error>(resolved)
        }
        .await;
        match resolved {
            Ok(resolved) => self.journal_reconciled(&mut report, resolved, actor).await,
            Err(e) => {
                tracing::warn!(step_id, provider, error = %e, "reconcile: the step's rows stay as they are");
                report.error = Some(e.to_json());
            }
        }
        report
    }

    async fn half_done_rows(
        &self,
        step_id: &str,
        provider: &str,
        grace: Duration,
    ) -> Result<Vec<HalfDone>> {
        let client = self.pool.get().await?;
        let rows = client
            .query(
                "SELECT id, name, vm_id, state, updated_at < now() - make_interval(secs => $4),
                 COALESCE(pool, $5)
                 FROM keeper.cloud_vms WHERE step_id = $1 AND provider = $2 AND state = ANY($3)
                 ORDER BY id",
                &[
                    &step_id,
                    &provider,
                    &HALF_DONE.as_slice(),
                    &grace.as_secs_f64(),
                    &self.settings.pool,
                ],
            )
            .await
            .map_err(db_error("read the journal"))?;
        Ok(rows
            .iter()
            .map(|r| {
                let state: String = r.get(3);
                HalfDone {
                    id: r.get(0),
                    name: r.get(1),
                    vm_id: r.get(2),
                    state: HALF_DONE
                        .into_iter()
                        .find(|s| *s == state)
                        .unwrap_or("requested"),
                    settled: r.get(4),
                    pool: r.get(5),
                }
            })
            .collect())
    }

    /// Finds row `r` of step `step_id`'s VM (by its id, or by its name and the step's label) and
    /// destroys it.
    async fn resolve_row(
        &self,
        session: &LockSession,
        row: &CloudProvider,
        cloud: &Arc<dyn orca::Provider>,
        r: &HalfDone,
        step_id: &str,
    ) -> Resolution {
        let vm_id = match &r.vm_id {
            Some(id) => id.clone(),
            None => match own_named(&**cloud, &r.pool, &r.name, step_id).await {
                Ok(ByName::Own(m)) => m.id,
                // A name is unique within one database only: the VM of this name that another
                // step made (a restored database's, a second database's) is left alone, and so is
                // the row, since removing by name would remove that VM.
                Ok(ByName::Other(m)) => {
                    return Resolution::Left(Error::conflict(
                        "vm.name_taken",
                        format!(
                            "VM {} may have been made by step {step_id}, but the VM of that name in pool {}, {}, does not carry this step's label ({STEP_LABEL}): another step made it; it is left alone and the row stays requested; look for this step's VM at provider {} by hand",
                            r.name, r.pool, m.id, row.name
                        ),
                    ));
                }
                // What a create makes before its VM may stand without one: the row closes once
                // it is gone, and stays for the next run when it cannot be removed.
                Ok(ByName::Nothing) if r.settled => {
                    return match cloud.delete_named(&r.pool, &r.name).await {
                        Ok(removed) => Resolution::NeverMade(removed),
                        Err(e) => Resolution::Left(from_orca_saying(&e, |m| {
                            format!("removing what a create of VM {} left, by name: {m}", r.name)
                        })),
                    };
                }
                Ok(ByName::Nothing) => return Resolution::Waiting,
                Err(e) => {
                    return Resolution::Left(from_orca_saying(&e, |m| {
                        format!("looking up VM {} by name: {m}", r.name)
                    }));
                }
            },
        };
        let named = Named {
            pool: r.pool.clone(),
            name: r.name.clone(),
        };
        match self
            .destroy_one(session, row, cloud, &vm_id, Some(&named))
            .await
        {
            Ok(true) => Resolution::Destroyed(vm_id),
            Ok(false) => Resolution::Gone(vm_id),
            // Destroyed all the same; the reconciler counts nothing.
            Err(NotCounted::LockLost(_)) => Resolution::Destroyed(vm_id),
            Err(NotCounted::Failed(e)) => Resolution::Kept(vm_id, e),
        }
    }

    /// Moves the rows as `resolved` says, with the audit event, in one transaction, and fills
    /// `report`.
    async fn journal_reconciled(
        &self,
        report: &mut StepReconciled,
        resolved: Vec<(HalfDone, Resolution)>,
        actor: &str,
    ) {
        let updates: Vec<JournalUpdate> = resolved
            .into_iter()
            .filter_map(|(r, resolution)| Some(self.account(report, &r, resolution)?.from(r.state)))
            .collect();
        if updates.is_empty() {
            return;
        }
        match self.commit_reconciled(report, &updates, actor, false).await {
            Ok(moved) => {
                report.moved = moved;
                tracing::info!(step_id = %report.step_id, provider = %report.provider, destroyed = ?report.destroyed, gone = ?report.gone, never_made = ?report.never_made, kept = report.kept.len(), "reconciled a half-done step");
            }
            Err(e) => {
                tracing::warn!(step_id = %report.step_id, error = %e, "reconcile: the journal of the step stays as it was");
                report.error = Some(e.to_json());
            }
        }
    }

    /// Says `resolution` of row `r` in `report`; answers the row's move, if it moves.
    fn account(
        &self,
        report: &mut StepReconciled,
        r: &HalfDone,
        resolution: Resolution,
    ) -> Option<JournalUpdate> {
        let was = r.state;
        match resolution {
            Resolution::Destroyed(vm) => {
                report.destroyed.push(vm.clone());
                let why = format!("destroyed by the reconciler: the row was {was}, and its step ended without recording the VM");
                Some(JournalUpdate::new(r.id, "destroyed", why).vm(Some(&vm)))
            }
            Resolution::Gone(vm) => {
                report.gone.push(vm.clone());
                let why = format!("gone when the reconciler looked (the row was {was})");
                Some(JournalUpdate::new(r.id, "destroyed", why).vm(Some(&vm)))
            }
            Resolution::NeverMade(removed) => {
                report.never_made.push(r.name.clone());
                let mut why = format!(
                    "never made: the reconciler found no VM named {} in pool {}, and it was asked for long enough ago to show",
                    r.name, r.pool
                );
                if removed {
                    why.push_str("; what its create left was removed by name");
                }
                Some(JournalUpdate::new(r.id, "failed", why))
            }
            Resolution::Waiting => {
                report.waiting.push(r.name.clone());
                None
            }
            Resolution::Kept(vm, e) => {
                tracing::warn!(step_id = %report.step_id, vm_id = %vm, error = %e, "reconcile: the VM could not be destroyed");
                report
                    .kept
                    .push(json!({"vm_id": vm, "name": r.name, "error": e.to_json()}));
                let why = format!(
                    "kept: the reconciler could not destroy it ({}); destroy it with core.cloud.destroyed",
                    e.message
                );
                (was != "kept").then(|| JournalUpdate::new(r.id, "kept", why).vm(Some(&vm)))
            }
            Resolution::Left(e) => {
                report.error = Some(e.to_json());
                None
            }
        }
    }

    /// The moves (of the resize journal's rows when `resizes`, else of the VM journal's) and their
    /// audit event, in one transaction; answers how many rows moved (none moved writes no event).
    async fn commit_reconciled(
        &self,
        report: &StepReconciled,
        updates: &[JournalUpdate],
        actor: &str,
        resizes: bool,
    ) -> Result<u64> {
        let mut client = self.pool.get().await?;
        let tx = begin(&mut client).await?;
        let mut moved = 0;
        for u in updates {
            let did = if resizes {
                move_resize(&tx, u).await?
            } else {
                move_row(&tx, u).await?
            };
            moved += u64::from(did);
        }
        if moved == 0 {
            return Ok(0);
        }
        let outcome = if report.kept.is_empty() && report.error.is_none() {
            "succeeded"
        } else {
            "failed"
        };
        let mut payload = json!(report);
        payload["moved"] = json!(moved);
        payload["counters"] = json!({
            "destroyed": report.destroyed.len(),
            "gone": report.gone.len(),
            "never_made": report.never_made.len(),
            "kept": report.kept.len(),
            "waiting": report.waiting.len(),
        });
        if resizes {
            payload["counters"]["started"] = json!(report.started.len());
        }
        audit::record(&tx, CLOUD_RECONCILED, actor, outcome, &payload).await?;
        tx.commit()
            .await
            .map_err(db_error("commit the reconciled journal"))?;
        Ok(moved)
    }

    /// The steps with resize journal rows still `resizing`, oldest first: `(step_id, provider)`.
    async fn resizing_steps(&self) -> Result<Vec<(String, String)>> {
        let client = self.pool.get().await?;
        let sql = "SELECT step_id, provider FROM keeper.vm_resizes WHERE state = 'resizing'
                 GROUP BY step_id, provider ORDER BY min(id)";
        let rows = client
            .query(sql, &[])
            .await
            .map_err(db_error("read the resize journal"))?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    /// Resolves the `resizing` rows of resize step `step_id`, whose lock the caller holds: a VM its
    /// stopped keeper left stopped is started again; one running, or gone, closes its row.
    async fn reconcile_resizes(
        &self,
        step_id: &str,
        provider: &str,
        actor: &str,
    ) -> StepReconciled {
        let mut report = StepReconciled {
            step_id: step_id.to_string(),
            provider: provider.to_string(),
            ..StepReconciled::default()
        };
        let updates = async {
            // Read again under the lock: another reconciler may have resolved them meanwhile.
            let client = self.pool.get().await?;
            let sql = "SELECT id, vm_id FROM keeper.vm_resizes
                     WHERE step_id = $1 AND provider = $2 AND state = 'resizing' ORDER BY id";
            let rows = client
                .query(sql, &[&step_id, &provider])
                .await
                .map_err(db_error("read the resize journal"))?;
            drop(client);
            if rows.is_empty() {
                return Ok(Vec::new());
            }
            let row = self.provider_row(provider).await?;
            let cloud = self.cloud(&row).await?;
            let mut updates = Vec::new();
            for r in &rows {
                let (id, vm_id): (i64, String) = (r.get(0), r.get(1));
                updates.extend(restart_resized(&mut report, &*cloud, id, &vm_id).await);
            }
            Ok::<_, Error>(updates)
        }
        .await;
        match updates {
            Ok(updates) if updates.is_empty() => {}
            Ok(updates) => match self.commit_reconciled(&report, &updates, actor, true).await {
                Ok(moved) => {
                    report.moved = moved;
                    tracing::info!(step_id, provider, started = ?report.started, gone = ?report.gone, "reconciled a half-done resize");
                }
                Err(e) => report.error = Some(e.to_json()),
            },
            Err(e) => {
                tracing::warn!(step_id, provider, error = %e, "reconcile: the resize's rows stay as they are");
                report.error = Some(e.to_json());
            }
        }
        report
    }
}

/// Resolves resize journal row `id` of VM `vm_id` (`resizing`), saying what it found in `report`;
/// answers the row's move, if it moves.
async fn restart_resized(
    report: &mut StepReconciled,
    cloud: &dyn orca::Provider,
    id: i64,
    vm_id: &str,
) -> Option<JournalUpdate> {
    let done = |why: &str| Some(JournalUpdate::new(id, "done", why).from("resizing"));
    match cloud.machine(vm_id).await {
        Ok(None) => {
            report.gone.push(vm_id.to_string());
            done("gone when the reconciler looked")
        }
        Ok(Some(m)) if m.status == orca::Status::Running => {
            done("running when the reconciler looked")
        }
        Ok(Some(m)) if m.status == orca::Status::Stopped => match cloud.start(vm_id).await {
            Ok(_) => {
                report.started.push(vm_id.to_string());
                let why =
                    "started by the reconciler: its resize's keeper stopped with the VM stopped";
                Some(JournalUpdate::new(id, "started", why).from("resizing"))
            }
            Err(e) => {
                let e = from_orca_saying(&e, |m| {
                    format!("starting VM {vm_id}, which a resize left stopped: {m}")
                });
                report.error = Some(e.to_json());
                None
            }
        },
        // Stopping or starting: the next run looks again.
        Ok(Some(_)) => {
            report.waiting.push(vm_id.to_string());
            None
        }
        Err(e) => {
            let e = from_orca_saying(&e, |m| format!("reading VM {vm_id}, resized: {m}"));
            report.error = Some(e.to_json());
            None
        }
    }
}
