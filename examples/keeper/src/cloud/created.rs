//! `core.cloud.created`: ask the provider for `count` VMs; each gets a `pending` soul (created_by NULL)
//! and a one-time bootstrap token kept as a hash.
//!
//! The order of things, so that nothing made is ever forgotten:
//! 1. everything that can be checked is checked before any cloud call (parameters, provider, profile,
//!    user data, credentials, the driver's capabilities for the spec);
//! 2. the batch's indexes are taken from `keeper.name_counters` and each VM is written to the journal
//!    `keeper.cloud_vms` as `requested` (one transaction), before the cloud is asked;
//! 3. the VMs are made one after the other; each one made is journalled `made` with its id at once;
//! 4. all made: one transaction writes the souls, the token hashes, the journal (`recorded`) and the
//!    audit event;
//! 5. a failure at any point (a VM refused, a VM without an FQDN, an adopted VM, a SID clash, the
//!    registry or the audit failing): the VMs this step made are destroyed (journal `destroyed`), and
//!    one that cannot be destroyed is kept in the journal as `kept`, to be destroyed later; these rows,
//!    and those of the VMs never asked for (`failed`), each change in one transaction. The step
//!    output names each (`destroyed`, `recorded`);
//! 6. a create that fails with an error that is not a clear refusal (a transient error, throttling,
//!    leftovers, an unknown error, or any error after a retry, when an earlier attempt's answer may
//!    have been lost) may have made the VM all the same: it is looked up by name in keeper's pool, and
//!    one found is this step's, destroyed (or kept) as in 5 (`made_after_error`). When it cannot be
//!    found, or the look-up fails, its journal row stays `requested`, saying so, for a later run (or
//!    the operator) to resolve, and the step output names it (`unresolved`).

use std::sync::Arc;

use serde_json::{json, Value};

use super::params::{CreateParams, ProfileParam, UserData};
use super::{Keeper, Run};
use crate::audit::{self, CLOUD_PROVISIONED};
use crate::error::{from_orca, Error, Result};
use crate::mask::masked;
use crate::registry::{self, CloudProvider, ProfileSpec};
use crate::tokens::PlainToken;
use crate::userdata::{Template, Vars};

/// SQLSTATE of a unique violation.
const UNIQUE_VIOLATION: &str = "23505";

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

/// A journal row's new state, for [`Keeper::journal_all`].
struct JournalUpdate {
    id: i64,
    state: &'static str,
    sid: Option<String>,
    detail: String,
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
        let p = match CreateParams::parse(params) {
            Ok(p) => p,
            Err(e) => return run.refuse(e),
        };
        run.fact("provider", json!(p.provider));
        run.fact("count", json!(p.count));
        let row = match self.provider_row(&p.provider).await {
            Ok(r) => r,
            Err(e) => return run.refuse(e),
        };
        let spec = match self.profile_of(&p, &row).await {
            Ok(s) => s,
            Err(e) => return run.refuse(e),
        };
        if let Err(e) = check_self_onboard(&p, &row) {
            return run.refuse(e);
        }
        let template = match self.template_for(&p) {
            Ok(t) => t,
            Err(e) => return run.refuse(e),
        };
        let cloud = match self.cloud(&row).await {
            Ok(c) => c,
            Err(e) => return run.refuse(e),
        };
        let base = p.name.clone().unwrap_or_else(|| DEFAULT_BASE.to_string());
        // Every check the driver makes before a call, on a VM of this batch, before anything is made.
        let probe = format!("{base}-{}", i64::MAX / 1_000_000_000);
        let probe_token = PlainToken::generate();
        let probe_token = match probe_token {
            Ok(t) => t,
            Err(e) => return run.refuse(e),
        };
        let probe_fqdn = row.fqdn_suffix.as_ref().map(|s| format!("{probe}.{s}"));
        let probe_spec = self
            .user_data(
                &p,
                template.as_ref(),
                &probe,
                probe_fqdn.as_deref(),
                &probe_token,
            )
            .map(|ud| spec.machine_spec(&probe, &row.region, &self.settings.pool, &ud));
        let probe_spec = match probe_spec {
            Ok(s) => s,
            Err(e) => return run.refuse(e),
        };
        let checked = match probe_spec.validate() {
            Ok(()) => cloud.capabilities().check_spec(cloud.kind(), &probe_spec),
            Err(e) => Err(e),
        };
        if let Err(e) = checked {
            let mut e = from_orca(&e);
            if let Some(f) = e.field.clone() {
                if crate::registry::PROFILE_SPEC_FIELDS.contains(&f.as_str()) {
                    e.field = Some(format!("profile.{f}"));
                } else if f == "user_data" {
                    e.field = Some(
                        match p.userdata {
                            UserData::Generate => "generate_userdata",
                            UserData::SelfOnboard => "self_onboard",
                            _ => "userdata",
                        }
                        .to_string(),
                    );
                }
            }
            return run.refuse(e);
        }

        let planned = match self.plan(&run.step_id, &row, &base, p.count).await {
            Ok(v) => v,
            Err(e) => return run.refuse(e),
        };
        tracing::info!(step_id = %run.step_id, provider = %row.name, count = p.count, first = %planned[0].name, "creating VMs");

        let mut made: Vec<Made> = Vec::new();
        let mut adopted: Vec<String> = Vec::new();
        let mut made_after_error: Vec<Value> = Vec::new();
        let mut unresolved: Vec<Value> = Vec::new();
        let mut failure: Option<Error> = None;
        let mut queue = planned.into_iter();
        for vm in queue.by_ref() {
            let ud = match self.user_data(
                &p,
                template.as_ref(),
                &vm.name,
                vm.predicted_fqdn.as_deref(),
                &vm.token,
            ) {
                Ok(ud) => ud,
                Err(e) => {
                    self.journal(vm.journal_id, "failed", None, None, &e.message)
                        .await
                        .ok();
                    failure = Some(e);
                    break;
                }
            };
            let ms = spec.machine_spec(&vm.name, &row.region, &self.settings.pool, &ud);
            match cloud.create(&ms).await {
                Ok(orca::Created::Machine(m)) => {
                    let journalled = self
                        .journal(vm.journal_id, "made", Some(&m.id), None, "")
                        .await;
                    tracing::info!(step_id = %run.step_id, vm_id = %m.id, name = %m.name, "VM made");
                    let check = check_made(
                        &m,
                        vm.predicted_fqdn.as_deref(),
                        p.userdata == UserData::SelfOnboard,
                    );
                    made.push(Made {
                        planned: vm,
                        machine: m,
                    });
                    if let Err(e) = journalled.and(check) {
                        failure = Some(e);
                        break;
                    }
                }
                Ok(orca::Created::Adopted(m)) => {
                    // Made by an earlier create call: not this step's, not new, never counted.
                    let why = format!(
                        "the cloud answered with VM {} ({}) made by an earlier create; core.cloud.created never adopts",
                        m.id, m.name
                    );
                    self.journal(vm.journal_id, "failed", Some(&m.id), None, &why)
                        .await
                        .ok();
                    adopted.push(m.id.clone());
                    failure = Some(Error::new(502, "vm.adopted", why));
                    break;
                }
                Ok(orca::Created::NoStock {
                    machine_type,
                    location,
                    message,
                }) => {
                    let why = format!(
                        "VM {} refused: no stock of {machine_type} in {location} ({message})",
                        vm.name
                    );
                    self.journal(vm.journal_id, "failed", None, None, &why)
                        .await
                        .ok();
                    failure = Some(Error::new(503, "cloud.no_stock", why));
                    break;
                }
                Err(e) if is_clear_refusal(&e) => {
                    let mut err = from_orca(&e);
                    err.message = format!("VM {} refused: {}", vm.name, err.message);
                    self.journal(vm.journal_id, "failed", None, None, &err.message)
                        .await
                        .ok();
                    failure = Some(err);
                    break;
                }
                Err(e) => {
                    // The VM may exist all the same (an answer lost, then the retries ran out): what
                    // the cloud made is recorded or destroyed, never made and forgotten.
                    let mut err = from_orca(&e);
                    err.message = format!("VM {} failed: {}", vm.name, err.message);
                    if let orca::Error::Leftovers { left, .. } = &e {
                        run.fact("cloud_leftovers", json!(left));
                    }
                    match self.find_made(&cloud, &vm.name).await {
                        Ok(Some(m)) => {
                            let why = format!(
                                "made after all: the cloud answered {e}, and a look-up by name found VM {}",
                                m.id
                            );
                            tracing::warn!(step_id = %run.step_id, vm_id = %m.id, name = %m.name, error = %e, "the create failed but the VM was made");
                            if let Err(j) = self
                                .journal(vm.journal_id, "made", Some(&m.id), None, &why)
                                .await
                            {
                                tracing::warn!(vm_id = %m.id, error = %j, "journal");
                            }
                            made_after_error.push(json!({
                                "vm_id": m.id, "name": m.name, "error": e.to_string(),
                            }));
                            made.push(Made {
                                planned: vm,
                                machine: m,
                            });
                        }
                        found => {
                            let why = match found {
                                Ok(_) => format!(
                                    "unresolved: the cloud answered {e}, so VM {} may have been made; a look-up by name in pool {} does not show it (yet); look for it at provider {} and destroy it with core.cloud.destroyed",
                                    vm.name, self.settings.pool, row.name
                                ),
                                Err(l) => format!(
                                    "unresolved: the cloud answered {e}, so VM {} may have been made, and the look-up by name failed too ({l}); look for it at provider {} and destroy it with core.cloud.destroyed",
                                    vm.name, row.name
                                ),
                            };
                            tracing::error!(step_id = %run.step_id, name = %vm.name, provider = %row.name, "{why}");
                            let journalled = self
                                .journal(vm.journal_id, "requested", None, None, &why)
                                .await;
                            unresolved.push(json!({
                                "name": vm.name,
                                "in": if journalled.is_ok() { "keeper.cloud_vms (state requested)" } else { "nowhere: the registry failed too; this VM is only in this output and the log" },
                                "why": why,
                            }));
                        }
                    }
                    failure = Some(err);
                    break;
                }
            }
        }
        // Never asked for: the step failed before their turn. All of them in one transaction.
        let queue: Vec<_> = queue.collect();
        let never_names: Vec<String> = queue.iter().map(|vm| vm.name.clone()).collect();
        let never: Vec<JournalUpdate> = queue
            .into_iter()
            .map(|vm| JournalUpdate {
                id: vm.journal_id,
                state: "failed",
                sid: None,
                detail: "not asked for: the step failed before this VM's turn".into(),
            })
            .collect();
        if let Err(e) = self.journal_all(&never).await {
            tracing::warn!(step_id = %run.step_id, error = %e, "journal: the VMs never asked for stay requested");
            let names: Vec<&str> = never_names.iter().map(String::as_str).collect();
            run.fact(
                "journal_error",
                json!(format!(
                    "the journal rows of the VMs never asked for ({}) stay requested: {}",
                    names.join(", "),
                    e.message
                )),
            );
        }
        if !adopted.is_empty() {
            run.fact("adopted_not_counted", json!(adopted));
        }
        if !made_after_error.is_empty() {
            run.fact("made_after_error", json!(made_after_error));
        }
        let unresolved_n = unresolved.len();
        run.fact("unresolved", json!(unresolved));

        if failure.is_none() {
            match self.record(&run, &row, &made, actor).await {
                Ok(()) => {
                    run.audited = true;
                    run.output = Some(output(&made));
                    return run;
                }
                Err(e) => failure = Some(e),
            }
        }
        let error = failure.unwrap_or_else(|| Error::new(500, "internal", "failed"));
        self.roll_back(run, &row, &cloud, made, unresolved_n, error)
            .await
    }

    /// The VM named `name` in keeper's pool, if the cloud shows one: what a create that failed may
    /// have made all the same. Names are keeper's own (`<base>-<index>`, never handed out twice), so
    /// one of keeper's owner and pool is this step's.
    async fn find_made(
        &self,
        cloud: &Arc<dyn orca::Provider>,
        name: &str,
    ) -> std::result::Result<Option<orca::Machine>, orca::Error> {
        let all = cloud.machines(&self.settings.pool).await?;
        Ok(all.into_iter().find(|m| m.name == name))
    }

    /// The VM spec of the step: the inline map, the named profile (of this provider), or, without
    /// `profile`, the provider's only profile (refused naming `profile` when it has none or several).
    async fn profile_of(&self, p: &CreateParams, row: &CloudProvider) -> Result<ProfileSpec> {
        match &p.profile {
            Some(ProfileParam::Inline(s)) => Ok(s.clone()),
            Some(ProfileParam::Named(name)) => {
                let client = self.pool.get().await?;
                let prof = registry::get_profile(&client, name).await?.ok_or_else(|| {
                    Error::new(
                        422,
                        "profile.not_found",
                        format!("profile: no profile named {name} is registered"),
                    )
                    .with_field("profile")
                })?;
                if prof.provider != row.name {
                    return Err(Error::invalid(
                        "profile",
                        format!(
                            "profile {name} is for provider {}, not {}",
                            prof.provider, row.name
                        ),
                    ));
                }
                Ok(prof.spec)
            }
            // The seed's `profile` is optional: the provider's only profile, when it has one.
            None => {
                let client = self.pool.get().await?;
                let mut of_provider: Vec<_> = registry::list_profiles(&client)
                    .await?
                    .into_iter()
                    .filter(|prof| prof.provider == row.name)
                    .collect();
                match of_provider.len() {
                    1 => Ok(of_provider.remove(0).spec),
                    0 => Err(Error::invalid(
                        "profile",
                        format!(
                            "not given, and provider {} has no profile to use instead: give a profile map with at least machine_type, or register a profile for it (keeper has no default VM size)",
                            row.name
                        ),
                    )),
                    _ => Err(Error::invalid(
                        "profile",
                        format!(
                            "not given, and provider {} has {} profiles ({}): name one",
                            row.name,
                            of_provider.len(),
                            of_provider
                                .iter()
                                .map(|prof| prof.name.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    )),
                }
            }
        }
    }

    fn template_for(&self, p: &CreateParams) -> Result<Option<Template>> {
        match p.userdata {
            UserData::Empty | UserData::Given(_) => Ok(None),
            UserData::Generate => match &self.settings.cloud_init {
                Some(t) => Ok(Some(t.clone())),
                None => Err(Error::invalid(
                    "generate_userdata",
                    "keeper has no cloud_init template to generate user data from (set KEEPER_CLOUD_INIT)",
                )),
            },
            UserData::SelfOnboard => {
                let t = self
                    .settings
                    .cloud_init
                    .clone()
                    .unwrap_or_else(Template::self_onboard);
                if !t.uses("bootstrap_token") {
                    return Err(Error::invalid(
                        "self_onboard",
                        "keeper's cloud_init template has no ${bootstrap_token}: a self-onboarding VM could not register",
                    ));
                }
                Ok(Some(t))
            }
        }
    }

    fn user_data(
        &self,
        p: &CreateParams,
        template: Option<&Template>,
        hostname: &str,
        fqdn: Option<&str>,
        token: &PlainToken,
    ) -> Result<String> {
        match (&p.userdata, template) {
            (UserData::Given(s), _) => Ok(s.clone()),
            (UserData::Generate, Some(t)) => t.render(
                "generate_userdata",
                &Vars {
                    hostname,
                    fqdn: if p.name.is_some() { fqdn } else { None },
                    keeper_url: &self.settings.keeper_url,
                    bootstrap_token: None,
                },
            ),
            (UserData::SelfOnboard, Some(t)) => t.render(
                "self_onboard",
                &Vars {
                    hostname,
                    fqdn,
                    keeper_url: &self.settings.keeper_url,
                    bootstrap_token: Some(token.expose()),
                },
            ),
            _ => Ok(String::new()),
        }
    }

    /// Takes the batch's indexes and journals every VM as `requested`, in one transaction.
    async fn plan(
        &self,
        step_id: &str,
        row: &CloudProvider,
        base: &str,
        count: u32,
    ) -> Result<Vec<Planned>> {
        let mut client = self.pool.get().await?;
        let tx = client
            .transaction()
            .await
            .map_err(|e| Error::db("begin", &e))?;
        let count = i64::from(count);
        let last: i64 = tx
            .query_one(
                "INSERT INTO keeper.name_counters (base, last_index) VALUES ($1, $2)
                 ON CONFLICT (base) DO UPDATE SET last_index = keeper.name_counters.last_index + EXCLUDED.last_index
                 RETURNING last_index",
                &[&base, &count],
            )
            .await
            .map_err(|e| Error::db("take indexes", &e))?
            .get(0);
        let mut planned = Vec::new();
        for index in (last - count + 1)..=last {
            let name = format!("{base}-{index}");
            let predicted_fqdn = row.fqdn_suffix.as_ref().map(|s| format!("{name}.{s}"));
            let journal_id: i64 = tx
                .query_one(
                    "INSERT INTO keeper.cloud_vms (step_id, provider, name, state) VALUES ($1, $2, $3, 'requested') RETURNING id",
                    &[&step_id, &row.name, &name],
                )
                .await
                .map_err(|e| Error::db("journal", &e))?
                .get(0);
            planned.push(Planned {
                index,
                name,
                predicted_fqdn,
                token: PlainToken::generate()?,
                journal_id,
            });
        }
        tx.commit()
            .await
            .map_err(|e| Error::db("commit plan", &e))?;
        Ok(planned)
    }

    /// Moves one journal row to `state`.
    async fn journal(
        &self,
        id: i64,
        state: &str,
        vm_id: Option<&str>,
        sid: Option<&str>,
        detail: &str,
    ) -> Result<()> {
        let client = self.pool.get().await?;
        client
            .execute(
                "UPDATE keeper.cloud_vms SET state = $2, vm_id = COALESCE($3, vm_id), sid = COALESCE($4, sid),
                 detail = $5, updated_at = now() WHERE id = $1",
                &[&id, &state, &vm_id, &sid, &detail],
            )
            .await
            .map_err(|e| Error::db("journal", &e))?;
        Ok(())
    }

    /// Moves several journal rows, each to its state, in one transaction: all of them or none.
    async fn journal_all(&self, updates: &[JournalUpdate]) -> Result<()> {
        if updates.is_empty() {
            return Ok(());
        }
        let mut client = self.pool.get().await?;
        let tx = client
            .transaction()
            .await
            .map_err(|e| Error::db("begin", &e))?;
        for u in updates {
            tx.execute(
                "UPDATE keeper.cloud_vms SET state = $2, sid = COALESCE($3, sid), detail = $4,
                 updated_at = now() WHERE id = $1",
                &[&u.id, &u.state, &u.sid, &u.detail],
            )
            .await
            .map_err(|e| Error::db("journal", &e))?;
        }
        tx.commit()
            .await
            .map_err(|e| Error::db("commit the journal", &e))?;
        Ok(())
    }

    /// Writes the souls, token hashes, journal and audit event of a batch made whole: one transaction.
    async fn record(
        &self,
        run: &Run,
        row: &CloudProvider,
        made: &[Made],
        actor: &str,
    ) -> Result<()> {
        let mut client = self.pool.get().await?;
        let tx = client
            .transaction()
            .await
            .map_err(|e| Error::db("begin", &e))?;
        for m in made {
            let sid = &m.machine.fqdn;
            let soul_id: i64 = match tx
                .query_one(
                    "INSERT INTO keeper.souls (sid, status, provider, vm_id, primary_ip, attributes, created_by)
                     VALUES ($1, 'pending', $2, $3, $4, $5, NULL) RETURNING id",
                    &[sid, &row.name, &m.machine.id, &m.primary_ip(), &m.attributes()],
                )
                .await
            {
                Ok(r) => r.get(0),
                Err(e) if Error::sqlstate(&e) == Some(UNIQUE_VIOLATION) => {
                    return Err(Error::conflict(
                        "sid.conflict",
                        format!(
                            "the provider gave VM {} the FQDN {sid}, which a soul that is not destroyed has already",
                            m.machine.id
                        ),
                    ))
                }
                Err(e) => return Err(Error::db("insert soul", &e)),
            };
            let hash = m.planned.token.hash().to_vec();
            tx.execute(
                "INSERT INTO keeper.bootstrap_tokens (soul_id, token_sha256, status) VALUES ($1, $2, 'issued')",
                &[&soul_id, &hash],
            )
            .await
            .map_err(|e| Error::db("insert bootstrap token", &e))?;
            tx.execute(
                "UPDATE keeper.cloud_vms SET state = 'recorded', sid = $2, updated_at = now() WHERE id = $1",
                &[&m.planned.journal_id, sid],
            )
            .await
            .map_err(|e| Error::db("journal", &e))?;
        }
        let n = made.len();
        let mut extra = serde_json::Map::new();
        extra.insert(
            "vm_ids".into(),
            json!(made.iter().map(|m| &m.machine.id).collect::<Vec<_>>()),
        );
        extra.insert(
            "sids".into(),
            json!(made.iter().map(|m| &m.machine.fqdn).collect::<Vec<_>>()),
        );
        extra.insert(
            "counters".into(),
            json!({"requested": n, "made": n, "souls_pending": n, "bootstrap_issued": n}),
        );
        let payload = run.audit_payload_with(extra);
        audit::record(&tx, CLOUD_PROVISIONED, actor, "succeeded", &payload).await?;
        tx.commit()
            .await
            .map_err(|e| Error::db("commit the batch", &e))?;
        Ok(())
    }

    /// Destroys what this step made; what cannot be destroyed is kept in the journal.
    async fn roll_back(
        &self,
        mut run: Run,
        row: &CloudProvider,
        cloud: &Arc<dyn orca::Provider>,
        made: Vec<Made>,
        unresolved: usize,
        error: Error,
    ) -> Run {
        let mut destroyed = Vec::new();
        let mut recorded = Vec::new();
        let mut updates = Vec::new();
        for m in &made {
            let id = &m.machine.id;
            match cloud.delete(id).await {
                Ok(_) => {
                    updates.push(JournalUpdate {
                        id: m.planned.journal_id,
                        state: "destroyed",
                        sid: None,
                        detail: format!("destroyed: the step failed ({})", error.code),
                    });
                    tracing::info!(step_id = %run.step_id, vm_id = %id, "VM destroyed: the step failed");
                    destroyed.push(id.clone());
                }
                Err(e) => {
                    updates.push(JournalUpdate {
                        id: m.planned.journal_id,
                        state: "kept",
                        sid: (!m.machine.fqdn.is_empty()).then(|| m.machine.fqdn.clone()),
                        detail: format!(
                            "kept: the step failed ({}) and destroying it failed too ({}); destroy it with core.cloud.destroyed",
                            error.code, e
                        ),
                    });
                    tracing::error!(step_id = %run.step_id, vm_id = %id, provider = %row.name, error = %e, "VM could not be destroyed after the step failed");
                    recorded.push(json!({
                        "vm_id": id,
                        "name": m.machine.name,
                        "sid": m.machine.fqdn,
                        "destroy_error": e.to_string(),
                    }));
                }
            }
        }
        // The journal of the roll-back: one transaction. When it fails, the rows stay `made` (with
        // their VM ids), which core.cloud.destroyed resolves.
        let journalled = self.journal_all(&updates).await;
        for r in &mut recorded {
            r["in"] = json!(if journalled.is_ok() {
                "keeper.cloud_vms (state kept)"
            } else {
                "nowhere as kept: the registry failed to mark it; this output and the log name it"
            });
        }
        if let Err(e) = journalled {
            tracing::warn!(step_id = %run.step_id, error = %e, "journal: the roll-back's rows stay made");
            let this = format!(
                "the journal rows of this roll-back stay made: {}",
                e.message
            );
            // The rows of the VMs never asked for may have failed before: both are said.
            let said = match run.facts.get("journal_error").and_then(Value::as_str) {
                Some(before) => format!("{before}; {this}"),
                None => this,
            };
            run.fact("journal_error", json!(said));
        }
        run.fact(
            "changed",
            json!(!recorded.is_empty() || !made.is_empty() || unresolved > 0),
        );
        run.fact(
            "made",
            json!(made.iter().map(|m| &m.machine.id).collect::<Vec<_>>()),
        );
        run.fact("destroyed", json!(destroyed));
        run.fact("recorded", json!(recorded));
        run.fact(
            "vm_ids",
            json!(made.iter().map(|m| &m.machine.id).collect::<Vec<_>>()),
        );
        run.fact("sids", json!(Vec::<String>::new()));
        run.fact(
            "counters",
            json!({
                "requested": run.facts.get("count").cloned().unwrap_or(json!(0)),
                "made": made.len(), "souls_pending": 0, "bootstrap_issued": 0,
                "destroyed": destroyed.len(), "recorded_without_soul": recorded.len(),
                "unresolved": unresolved,
            }),
        );
        run.fail(error)
    }
}

/// Whether `e`, the answer to a create, surely means that nothing was made: a refusal the cloud (or
/// the driver, before any call) gave on the first attempt. After a retry, an earlier attempt's answer
/// may have been lost with the VM made, whatever the last answer says.
fn is_clear_refusal(e: &orca::Error) -> bool {
    use orca::ErrorKind as K;
    let refusal = matches!(
        e.kind(),
        K::InvalidSpec
            | K::InvalidSettings
            | K::NotFound
            | K::AlreadyExists
            | K::NotOwned
            | K::NoStock
            | K::Quota
            | K::Unauthenticated
            | K::PermissionDenied
            | K::Unsupported
    );
    refusal && e.retries() == 0
}

fn check_self_onboard(p: &CreateParams, row: &CloudProvider) -> Result<()> {
    if p.userdata == UserData::SelfOnboard && row.fqdn_suffix.is_none() {
        return Err(Error::invalid(
            "self_onboard",
            format!(
                "provider {} has no fqdn_suffix: keeper cannot predict the FQDNs to bake",
                row.name
            ),
        ));
    }
    Ok(())
}

/// A VM made is usable only with an FQDN (its SID), and with `self_onboard` only with the FQDN that
/// was baked into it.
fn check_made(m: &orca::Machine, predicted: Option<&str>, self_onboard: bool) -> Result<()> {
    if m.fqdn.is_empty() {
        return Err(Error::new(
            502,
            "vm.no_fqdn",
            format!(
                "the provider returned VM {} ({}) without an FQDN: it cannot be a SID",
                m.id, m.name
            ),
        ));
    }
    if self_onboard {
        if let Some(p) = predicted {
            if !m.fqdn.eq_ignore_ascii_case(p) {
                return Err(Error::new(
                    502,
                    "vm.fqdn_mismatch",
                    format!(
                        "VM {} has the FQDN {}, not the {p} keeper predicted and baked into it: check the provider's fqdn_suffix",
                        m.id, m.fqdn
                    ),
                ));
            }
        }
    }
    Ok(())
}

fn output(made: &[Made]) -> Value {
    let hosts: Vec<Value> = made
        .iter()
        .map(|m| {
            json!({
                "sid": m.machine.fqdn,
                "vm_id": m.machine.id,
                "primary_ip": m.primary_ip(),
                "attributes": m.attributes(),
                "bootstrap_token": m.planned.token.expose(),
            })
        })
        .collect();
    json!({
        "action": "created",
        "changed": true,
        "count": made.len(),
        "vm_ids": made.iter().map(|m| &m.machine.id).collect::<Vec<_>>(),
        "hosts": hosts,
    })
}
