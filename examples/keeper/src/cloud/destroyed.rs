//! `core.cloud.destroyed`: destroy `vm_ids` at the provider; only after every destroy succeeded, one
//! transaction moves the souls of those VMs (the given `sids`, and any other soul on them, as when
//! `sids` is omitted) to `destroyed`, their active `soul_seeds` to
//! `orphaned`, their bootstrap tokens to `burned`, the journal's rows of those VMs to `destroyed`, and
//! writes the audit event with the counters; the event and the output name in `sids` every soul
//! moved (and those given). A failed destroy leaves the registries untouched (the host
//! still lives at the provider); the destroys stop at the first failure.
//!
//! The caller holds the sid <-> vm_id pairing. keeper checks what it can before any cloud call: every
//! given SID must name a soul of this provider whose VM is among `vm_ids`, so a wrong pairing is refused
//! rather than cascaded onto another host; the cascade moves the souls of the VMs destroyed only. A
//! VM that another provider row of the same account records is refused too: the cascade, by this
//! provider's souls, would not end its soul.
//!
//! `counters.vms_destroyed` counts the VMs that existed when this step destroyed them: a VM already
//! gone (a repeat, or another step that destroyed it first) is named in `already_gone` and not counted.
//!
//! A delete can remove the VM and fail on what stood beside it (an interface, a security group, an
//! address, a disk: `orca::Error::left`). Those pieces are removed by the VM's name
//! (`Provider::delete_named` in keeper's pool) at once, and the step fails all the same, as its delete
//! did. Since a delete of an id whose VM is gone reaches nothing, the next step finding the VM gone
//! removes by name what may be left, with the name keeper's journal (`keeper.cloud_vms`) gave it, and
//! fails, the registries untouched, while that fails. A VM keeper never made has no name here: it is
//! only `already_gone`.

use std::sync::Arc;

use serde_json::{json, Value};

use super::locks::{vm_key, LockSession, LOCK_WAIT};
use super::params::DestroyParams;
use super::{delete_named_unless_taken, Keeper, Named, NamedRemoval, Run};
use crate::audit::{self, CLOUD_PROVISIONED};
use crate::db::begin;
use crate::error::{db_error, describe_db, from_orca_saying, Error, Result};
use crate::registry::CloudProvider;

/// Why one VM is not counted as destroyed.
pub(super) enum NotCounted {
    /// It was not destroyed: the lock, the look-up or the delete failed.
    Failed(Error),
    /// It was destroyed, but its lock was lost during the delete.
    LockLost(Error),
}

impl Keeper {
    pub(crate) async fn destroyed(&self, mut run: Run, params: &Value, actor: &str) -> Run {
        let p = or_refuse!(run, DestroyParams::parse(params));
        run.add_facts(json!({"provider": p.provider, "vm_ids": p.vm_ids, "sids": p.sids}));
        let row = or_refuse!(run, self.provider_row(&p.provider).await);
        or_refuse!(run, self.check_pairing(&row, &p).await);
        or_refuse!(run, self.check_other_rows(&row, &p).await);
        let cloud = or_refuse!(run, self.cloud(&row).await);
        // `destroyed`: every VM gone after its delete; `already_gone`: those of them that were gone
        // before it (a repeat, or another step destroying the same VM): not counted as destroyed.
        let mut destroyed = Vec::new();
        let mut already_gone = Vec::new();
        // One session holds each VM's lock in turn, opened for the first VM.
        let mut session = None;
        for (i, id) in p.vm_ids.iter().enumerate() {
            let destroy = match self.lock_session(&mut session).await {
                Ok(s) => self.destroy_one(s, &row, &cloud, id, None).await,
                Err(e) => Err(NotCounted::Failed(e)),
            };
            match destroy {
                Ok(existed) => {
                    if existed {
                        tracing::info!(step_id = %run.step_id, vm_id = %id, "VM destroyed");
                    } else {
                        tracing::info!(step_id = %run.step_id, vm_id = %id, "VM already gone");
                        already_gone.push(id.clone());
                    }
                    destroyed.push(id.clone());
                }
                Err(failure) => {
                    let vms_destroyed = destroyed.len() - already_gone.len();
                    let err = match failure {
                        NotCounted::Failed(err) => {
                            run.fact("failed", json!([id]));
                            err
                        }
                        NotCounted::LockLost(err) => {
                            tracing::warn!(step_id = %run.step_id, vm_id = %id, error = %err.message, "VM destroyed, but its lock was lost during the delete: not counted");
                            destroyed.push(id.clone());
                            run.fact("failed", json!([]));
                            run.fact("uncounted", json!([id]));
                            err
                        }
                    };
                    // Its connection goes back to the pool, or is closed, without the lock the
                    // failed destroy may still hold.
                    if let Some(s) = session.take() {
                        s.close().await;
                    }
                    run.add_facts(json!({
                        "changed": destroyed.len() > already_gone.len(),
                        "destroyed": destroyed,
                        "already_gone": already_gone,
                        "not_attempted": p.vm_ids[i + 1..],
                        "counters": {"vms_destroyed": vms_destroyed, "souls_destroyed": 0, "seeds_orphaned": 0, "bootstrap_burned": 0},
                    }));
                    return run.fail(err);
                }
            }
        }
        if let Some(s) = session {
            s.close().await;
        }
        let vms_destroyed = destroyed.len() - already_gone.len();
        // The success event says it too, as a failure's does.
        run.fact("already_gone", json!(already_gone));
        match self.cascade(&run, &row, &p, vms_destroyed, actor).await {
            Ok((counters, sids)) => {
                run.audited = true;
                // A repeat that finds every VM gone and moves no row changed nothing.
                let changed = counters
                    .as_object()
                    .is_some_and(|c| c.values().any(|n| n.as_u64().is_some_and(|n| n > 0)));
                run.output = Some(json!({
                    "action": "destroyed",
                    "changed": changed,
                    "count": p.vm_ids.len(),
                    "vm_ids": p.vm_ids,
                    "sids": sids,
                    "already_gone": already_gone,
                    "counters": counters,
                }));
                run
            }
            Err(e) => {
                run.add_facts(json!({
                    "changed": true,
                    "destroyed": destroyed,
                    "already_gone": already_gone,
                    "counters": {"vms_destroyed": vms_destroyed},
                    "note": "the VMs are destroyed at the provider but the registries are not updated: run the same step again (destroying a VM that is gone succeeds)",
                }));
                run.fail(e)
            }
        }
    }

    /// The lock session in `slot`, opened on first use.
    async fn lock_session<'a>(&self, slot: &'a mut Option<LockSession>) -> Result<&'a LockSession> {
        if slot.is_none() {
            *slot = Some(LockSession::open(&self.pool).await?);
        }
        Ok(slot.as_ref().expect("opened above"))
    }

    /// Destroys VM `id`; answers whether it existed before (a VM already gone is no error, and is not
    /// counted). The look-up and the delete hold the VM's lock in `session`, so that every keeper on
    /// this database waits for it: of two steps destroying the same VM at once, only the one that
    /// found it counts it. A step waits at most [`LOCK_WAIT`] for the lock, and a destroy that fails
    /// lets it go at once, as the session may go on to other VMs. A lock lost during the
    /// delete (the session ended: the server restarted, a timeout, an operator) is not hidden:
    /// another step may have found the VM meanwhile, so it is not counted here. What a delete left
    /// beside the VM is removed by name, as the module says. `journalled` is the journal row's pool
    /// and name when the caller reads one (the reconciler); else the journal is read by the id.
    pub(super) async fn destroy_one(
        &self,
        session: &LockSession,
        row: &CloudProvider,
        cloud: &Arc<dyn orca::Provider>,
        id: &str,
        journalled: Option<&Named>,
    ) -> std::result::Result<bool, NotCounted> {
        let key = vm_key(&row.name, id);
        match session.lock(&key).await {
            Ok(true) => {}
            Ok(false) => {
                return Err(NotCounted::Failed(Error::conflict(
                    "vm.busy",
                    format!(
                        "VM {id}: another step is destroying it and its lock did not come free within {} s; nothing was destroyed, the registries are untouched",
                        LOCK_WAIT.as_secs()
                    ),
                )))
            }
            Err(e) => return Err(NotCounted::Failed(Error::db(&format!("lock VM {id}"), &e))),
        }
        let existed = match self.destroy_locked(row, cloud, id, journalled).await {
            Ok(existed) => existed,
            Err(e) => {
                // The session may go on to other VMs (the reconciler's does, for its whole run): a
                // step destroying this one must not wait for it meanwhile.
                if let Err(u) = session.unlock(&key).await {
                    tracing::debug!(vm_id = %id, error = %describe_db(&u), "lock: a failed destroy's lock could not be let go; its session is lost");
                }
                return Err(NotCounted::Failed(e));
            }
        };
        let lost = match session.unlock(&key).await {
            Ok(true) => return Ok(existed),
            Ok(false) => "the lock was no longer held".to_string(),
            Err(e) => describe_db(&e),
        };
        if !existed {
            // Gone before this step came: not counted either way.
            return Ok(false);
        }
        Err(NotCounted::LockLost(Error::lock_lost(format!(
            "VM {id} is destroyed at the provider, but its lock was lost during the delete ({lost}): another step may have found and counted it meanwhile, so this step does not count it (uncounted); the registries are untouched: run the same step again"
        ))))
    }

    /// The look-up and the delete of VM `id`, whose lock the caller holds; answers whether it
    /// existed before. An error names the VM and says the registries are untouched.
    async fn destroy_locked(
        &self,
        row: &CloudProvider,
        cloud: &Arc<dyn orca::Provider>,
        id: &str,
        journalled: Option<&Named>,
    ) -> Result<bool> {
        let failed_saying = |e: &orca::Error, more: &str| {
            from_orca_saying(e, |m| {
                format!("destroying VM {id} failed: {m}{more}; the registries are untouched")
            })
        };
        let failed = |e: &orca::Error| failed_saying(e, "");
        let found = cloud.machine(id).await.map_err(|e| failed(&e))?;
        if let Some(m) = &found {
            self.check_pool(row, id, m, journalled).await?;
        }
        let existed = found.is_some();
        if let Err(e) = cloud.delete(id).await {
            if e.left().is_empty() {
                return Err(failed(&e));
            }
            // The pieces may be removable now; the step fails all the same, as the delete did.
            let named = found.as_ref().map(Named::of);
            let said = self.remove_left_at_once(row, cloud, id, named).await;
            return Err(failed_saying(&e, &format!("; {said}")));
        }
        if !existed {
            // An id alone ties nothing to a VM that is gone: what an earlier delete of it left (an
            // interface, a security group, an address, a disk) is reached by the VM's name only.
            self.remove_left_of_gone(row, cloud, id).await?;
        }
        Ok(existed)
    }

    /// Removes by name what an earlier delete left beside VM `id`, now gone; nothing for a VM keeper
    /// never made (no name ties anything to it). An error names the VM and says the registries are
    /// untouched, as a failed delete's does.
    async fn remove_left_of_gone(
        &self,
        row: &CloudProvider,
        cloud: &Arc<dyn orca::Provider>,
        id: &str,
    ) -> Result<()> {
        let untouched = |message: String| format!("{message}; the registries are untouched");
        let named = self.journalled(row, id).await.map_err(|mut e| {
            e.message = untouched(format!(
                "VM {id} is gone; reading its name, to remove what its delete may have left: {}",
                e.message
            ));
            e
        })?;
        let Some(Named { pool, name }) = named else {
            return Ok(());
        };
        match delete_named_unless_taken(&**cloud, &pool, &name, Some(id)).await {
            // VM `id` is gone: the one of its name is another step's, and what stands beside it
            // is left with it rather than guessed at.
            Ok(NamedRemoval::Taken(other)) => {
                tracing::warn!(vm_id = %id, name, other = %other, provider = %row.name, "nothing removed by name: another VM of that name stands");
                Ok(())
            }
            Ok(NamedRemoval::Done(removed)) => {
                if removed {
                    tracing::info!(vm_id = %id, name, provider = %row.name, "what the delete of a VM now gone left was removed by name");
                }
                Ok(())
            }
            Err(e) => Err(from_orca_saying(&e, |m| {
                untouched(format!(
                    "VM {id} is gone, but what its delete left beside it could not be removed by name ({name}): {m}"
                ))
            })),
        }
    }

    /// After a delete of VM `id` that left pieces beside it: removes them by name (`named`, the
    /// VM's own when it was found, else keeper's journal's), and answers what to add to the failure.
    pub(super) async fn remove_left_at_once(
        &self,
        row: &CloudProvider,
        cloud: &Arc<dyn orca::Provider>,
        id: &str,
        named: Option<Named>,
    ) -> String {
        let Named { pool, name } = match named {
            Some(n) => n,
            None => match self.journalled(row, id).await {
                Ok(Some(n)) => n,
                Ok(None) => return "keeper did not make it, so nothing is removed by name".into(),
                Err(e) => {
                    return format!(
                        "its name could not be read ({}), so nothing was removed by name",
                        e.message
                    )
                }
            },
        };
        match delete_named_unless_taken(&**cloud, &pool, &name, Some(id)).await {
            Ok(NamedRemoval::Done(_)) => format!("what it left was removed by name ({name})"),
            Ok(NamedRemoval::Taken(other)) => format!(
                "nothing was removed by name ({name}): VM {} of that name stands, another step's, and would go with it",
                other
            ),
            Err(e) => {
                tracing::warn!(vm_id = %id, name, provider = %row.name, error = %e, "what a delete left could not be removed by name");
                format!("what it left could not be removed by name ({name}) either: {e}")
            }
        }
    }

    /// Refuses a VM that another provider row's registries record (a live soul, or a journal row
    /// of a VM made and not destroyed), when that row reaches the same account (the same driver and
    /// `credentials_ref`) or is no longer registered (its account unknown): the cascade moves only
    /// the souls of `row`, so destroying it through `row` would leave that row's soul `pending`, its
    /// token usable and its journal row `recorded`.
    async fn check_other_rows(&self, row: &CloudProvider, p: &DestroyParams) -> Result<()> {
        let client = self.pool.get().await?;
        let sql = "SELECT held.vm_id, held.provider, o.name IS NOT NULL FROM (
                     SELECT vm_id, provider FROM keeper.souls
                       WHERE vm_id = ANY($1) AND provider <> $2 AND status <> 'destroyed'
                     UNION
                     SELECT vm_id, provider FROM keeper.cloud_vms
                       WHERE vm_id = ANY($1) AND provider <> $2 AND state IN ('made', 'recorded', 'kept')
                   ) AS held
                   LEFT JOIN keeper.cloud_providers o ON o.name = held.provider
                   WHERE o.name IS NULL OR (o.driver = $3 AND o.credentials_ref = $4)
                   ORDER BY held.provider";
        let rows = client
            .query(
                sql,
                &[&p.vm_ids, &row.name, &row.driver, &row.credentials_ref],
            )
            .await
            .map_err(db_error("read which provider records the VMs"))?;
        let held: Vec<(String, String, bool)> = rows
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect();
        let Some((i, (id, other, registered))) = p
            .vm_ids
            .iter()
            .enumerate()
            .find_map(|(i, id)| Some((i, held.iter().find(|h| &h.0 == id)?)))
        else {
            return Ok(());
        };
        let through = if *registered {
            format!("destroy it through provider {other}")
        } else {
            format!("provider {other} is no longer registered: register it again (same account) and destroy it through it")
        };
        Err(Error::conflict(
            "cloud.other_provider",
            format!(
                "VM {id} is recorded by provider {other}, not {}: destroying it through {} would leave {other}'s soul, token and journal row as if it stood; {through}; nothing was destroyed",
                row.name, row.name
            ),
        )
        .with_field(format!("vm_ids[{i}]")))
    }

    async fn check_pairing(&self, row: &CloudProvider, p: &DestroyParams) -> Result<()> {
        if p.sids.is_empty() {
            return Ok(());
        }
        let client = self.pool.get().await?;
        let sql = "SELECT sid FROM keeper.souls WHERE sid = ANY($1) AND provider = $2 AND vm_id = ANY($3)";
        let rows = client
            .query(sql, &[&p.sids, &row.name, &p.vm_ids])
            .await
            .map_err(db_error("read souls"))?;
        let known: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
        let Some((i, sid)) = p.sids.iter().enumerate().find(|(_, s)| !known.contains(s)) else {
            return Ok(());
        };
        Err(Error::invalid(
            format!("sids[{i}]"),
            format!(
                "no soul {sid} of provider {} on one of the given vm_ids: the sid <-> vm_id pairing is wrong, nothing was destroyed",
                row.name
            ),
        ))
    }

    /// The registry cascade and the audit event, in one transaction; answers the counters and the
    /// SIDs of the souls it names: those given, and every other soul it moved.
    async fn cascade(
        &self,
        run: &Run,
        row: &CloudProvider,
        p: &DestroyParams,
        vms_destroyed: usize,
        actor: &str,
    ) -> Result<(Value, Vec<String>)> {
        let mut client = self.pool.get().await?;
        let tx = begin(&mut client).await?;
        // Every soul on a VM now gone, whether the caller named its SID or not (`sids` may be
        // omitted): left pending, its one-time token would stay usable and its SID reserved. A given
        // SID is one of them (checked before any destroy).
        let sql = "SELECT id, sid FROM keeper.souls WHERE provider = $1 AND vm_id = ANY($2)
                 AND status <> 'destroyed' ORDER BY id FOR UPDATE";
        let rows = tx
            .query(sql, &[&row.name, &p.vm_ids])
            .await
            .map_err(db_error("lock souls"))?;
        let souls: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
        // The event and the output name every soul ended here, not only those the caller named.
        let mut sids: Vec<String> = rows.iter().map(|r| r.get(1)).collect();
        sids.extend(p.sids.iter().cloned());
        sids.sort();
        sids.dedup();
        let sql =
            "UPDATE keeper.souls SET status = 'destroyed', destroyed_at = now(), updated_at = now()
                 WHERE id = ANY($1)";
        let souls_destroyed = tx
            .execute(sql, &[&souls])
            .await
            .map_err(db_error("destroy souls"))?;
        let sql = "UPDATE keeper.soul_seeds SET status = 'orphaned', updated_at = now()
                 WHERE soul_id = ANY($1) AND status = 'active'";
        let seeds_orphaned = tx
            .execute(sql, &[&souls])
            .await
            .map_err(db_error("orphan soul seeds"))?;
        let sql = "UPDATE keeper.bootstrap_tokens SET status = 'burned', burned_at = now()
                 WHERE soul_id = ANY($1) AND status <> 'burned'";
        let bootstrap_burned = tx
            .execute(sql, &[&souls])
            .await
            .map_err(db_error("burn bootstrap tokens"))?;
        let sql = "UPDATE keeper.cloud_vms SET state = 'destroyed', detail = 'destroyed by core.cloud.destroyed', updated_at = now()
                 WHERE provider = $1 AND vm_id = ANY($2) AND state IN ('made', 'recorded', 'kept')";
        let journal = tx
            .execute(sql, &[&row.name, &p.vm_ids])
            .await
            .map_err(db_error("journal"))?;
        let counters = json!({
            "vms_destroyed": vms_destroyed,
            "souls_destroyed": souls_destroyed,
            "seeds_orphaned": seeds_orphaned,
            "bootstrap_burned": bootstrap_burned,
            "journal_destroyed": journal,
        });
        let payload = run.audit_payload_with(json!({ "counters": counters, "sids": sids }));
        audit::record(&tx, CLOUD_PROVISIONED, actor, "succeeded", &payload).await?;
        tx.commit().await.map_err(db_error("commit the cascade"))?;
        Ok((counters, sids))
    }
}
