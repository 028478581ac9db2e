//! The `core.cloud` step: `created`, `destroyed` and `resized`, run by [`Keeper::run_step`].
//!
//! Each run writes exactly one `cloud.provisioned` audit event, whatever its outcome (`succeeded`,
//! `failed`, or `refused` before any cloud call), its payload always with `provider`, `vm_ids`, `sids`
//! and every counter of the action (empty or zero as far as the step did not get); where the step
//! changes the registries, the event is
//! written in the same transaction as the change, and a failure to write it fails the step. The step
//! output is masked ([`crate::mask::mask_step_output`]): the plain one-time tokens appear only at
//! `hosts[].bootstrap_token` of a successful `created`.

/// The value of a step's check, or the step ends refused with the check's error (no cloud call has
/// been made yet, so nothing is left to undo).
macro_rules! or_refuse {
    ($run:ident, $check:expr) => {
        match $check {
            Ok(v) => v,
            Err(e) => return $run.refuse(e),
        }
    };
}

mod created;
mod destroyed;
mod journal;
mod locks;
pub mod params;
mod reconcile;
mod resized;

pub use reconcile::{Reconciled, StepReconciled, CLOUD_RECONCILED, RECONCILE_GRACE};

use std::sync::Arc;

use crate::db::Db;
use serde_json::{json, Map, Value};

use crate::audit::{self, CLOUD_PROVISIONED};
use crate::drivers::{driver_settings, Drivers};
use crate::error::{db_error, from_orca_saying, Error, Result};

use crate::mask::{mask_json, mask_step_output, masked};
use crate::registry::{self, CloudProvider};
use crate::userdata::Template;
use crate::vault::Vault;

orca::words! {
    /// The three actions of `core.cloud`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Action {
        /// `core.cloud.created`.
        Created = "created",
        /// `core.cloud.destroyed`.
        Destroyed = "destroyed",
        /// `core.cloud.resized`.
        Resized = "resized",
    }
}

impl Action {
    /// The action of step `core.cloud.<action>`.
    pub fn from_step(step: &str) -> Result<Self> {
        let action = step.strip_prefix("core.cloud.").and_then(Action::from_word);
        action.ok_or_else(|| {
            let known =
                "keeper runs core.cloud.created, core.cloud.destroyed and core.cloud.resized";
            let message = format!("unknown step {}; {known}", orca::spec::quoted(step));
            Error::new(404, "step.unknown", message).with_field("module")
        })
    }
}

/// The label each VM a `created` step asks for carries, set in the create call itself: the step's
/// id (random, and kept in the VM's journal row). A VM's name is unique within one keeper database
/// only (a restored database, or a second one on the same account, hands a name out again), so a VM
/// found by name is a journal row's only when it carries the row's step id; names are unique within
/// a step.
pub const STEP_LABEL: &str = "keeper-step";

/// What a look-up by name found for a journal row of step `step_id` ([`own_named`]).
pub(crate) enum ByName {
    /// The row's VM: of its name, carrying its step's id.
    Own(orca::Machine),
    /// Only a VM of that name that another step made: never the row's, so neither claimed nor
    /// destroyed, and nothing of that name is removed by name (that would remove it).
    Other(orca::Machine),
    /// No VM of that name.
    Nothing,
}

/// The VM named `name` in `pool` that step `step_id` asked for. The cloud's VM of that name is
/// read first ([`orca::Provider::machine_named`]); when it is another step's, the pool is listed
/// for one carrying this step's id, since a cloud whose names are not unique may hold both.
pub(crate) async fn own_named(
    cloud: &dyn orca::Provider,
    pool: &str,
    name: &str,
    step_id: &str,
) -> orca::Result<ByName> {
    let carries = |m: &orca::Machine| m.labels.get(STEP_LABEL).map(String::as_str) == Some(step_id);
    let Some(found) = cloud.machine_named(pool, name).await? else {
        return Ok(ByName::Nothing);
    };
    if carries(&found) {
        return Ok(ByName::Own(found));
    }
    let all = cloud.machines(pool).await?;
    Ok(
        match all.into_iter().find(|m| m.name == name && carries(m)) {
            Some(m) => ByName::Own(m),
            None => ByName::Other(found),
        },
    )
}

/// What [`delete_named_unless_taken`] did.
pub(crate) enum NamedRemoval {
    /// [`orca::Provider::delete_named`] ran: whether it removed something.
    Done(bool),
    /// A VM of that name stands that is not the caller's (its id): nothing was removed.
    Taken(String),
}

/// Removes by name what creates of `name` in `pool` left beside a VM, unless a VM of that name
/// stands other than `own` (the caller's VM, when its id is known): `delete_named` removes the
/// machine of the name too, and a name is keeper's own only within one database (a restored one,
/// or a second one on the same account, hands it out again). A VM that stands is never the pieces'
/// only owner to guess at: what it holds is left with it.
pub(crate) async fn delete_named_unless_taken(
    cloud: &dyn orca::Provider,
    pool: &str,
    name: &str,
    own: Option<&str>,
) -> orca::Result<NamedRemoval> {
    if let Some(m) = cloud.machine_named(pool, name).await? {
        if own != Some(m.id.as_str()) {
            return Ok(NamedRemoval::Taken(m.id));
        }
    }
    cloud.delete_named(pool, name).await.map(NamedRemoval::Done)
}

/// keeper's own settings for the step.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The orca owner of keeper's VMs (the `orca-owner` label): keeper destroys and resizes only VMs
    /// it made.
    pub owner: String,
    /// The orca pool of keeper's VMs.
    pub pool: String,
    /// keeper's `cloud_init` template (`generate_userdata`; `self_onboard` when set).
    pub cloud_init: Option<Template>,
    /// keeper's URL as VMs reach it (baked by `self_onboard`).
    pub keeper_url: String,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            owner: "keeper".into(),
            pool: "keeper".into(),
            cloud_init: None,
            keeper_url: "http://127.0.0.1:8080".into(),
        }
    }
}

/// What a VM goes by when its id no longer reaches it: its pool and its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Named {
    pub(crate) pool: String,
    pub(crate) name: String,
}

impl Named {
    /// Machine `m`'s.
    pub(crate) fn of(m: &orca::Machine) -> Named {
        Named {
            pool: m.pool.clone(),
            name: m.name.clone(),
        }
    }
}

/// keeper: the registries, the vault, the drivers and its settings.
#[derive(Debug, Clone)]
pub struct Keeper {
    pool: Db,
    vault: Arc<dyn Vault>,
    drivers: Arc<dyn Drivers>,
    settings: Arc<Settings>,
    /// The steps running now (of this keeper and its clones): step id -> step.
    running: Arc<tokio::sync::watch::Sender<Steps>>,
}

/// The running steps: step id -> step (`core.cloud.created`, ...).
type Steps = std::collections::BTreeMap<String, String>;

/// Counts a running step for as long as it lives; made before the step's task is spawned, and moved
/// into it, so that the step counts from the moment it is asked for.
#[derive(Debug)]
pub(crate) struct RunningStep {
    steps: Arc<tokio::sync::watch::Sender<Steps>>,
    step_id: String,
}

impl RunningStep {
    fn start(steps: &Arc<tokio::sync::watch::Sender<Steps>>, step: &str) -> Self {
        let step_id = new_step_id();
        steps.send_modify(|s| {
            s.insert(step_id.clone(), step.to_string());
        });
        RunningStep {
            steps: steps.clone(),
            step_id,
        }
    }
}

impl Drop for RunningStep {
    fn drop(&mut self) {
        self.steps.send_modify(|s| {
            s.remove(&self.step_id);
        });
    }
}

/// A step that failed: the error, and the step's output saying what was made, destroyed or recorded
/// (masked).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{error}")]
pub struct StepFailure {
    /// Why.
    pub error: Error,
    /// `{action, step_id, error, ...}` with what the step did before it failed.
    pub output: Value,
}

/// What one run did, for its output and its audit event.
#[derive(Debug)]
pub(crate) struct Run {
    action: Action,
    step_id: String,
    /// The success output (before masking).
    output: Option<Value>,
    error: Option<Error>,
    /// Facts for the audit payload and the failure output (provider, vm_ids, sids, counters, ...).
    facts: Map<String, Value>,
    /// Whether the audit event was written already (in the transaction of the change).
    audited: bool,
    /// Whether the step stopped before any cloud call.
    refused: bool,
}

impl Run {
    fn new(action: Action, step_id: &str) -> Self {
        Run {
            action,
            step_id: step_id.to_string(),
            output: None,
            error: None,
            facts: Map::new(),
            audited: false,
            refused: false,
        }
    }

    pub(crate) fn fact(&mut self, key: &str, value: Value) {
        self.facts.insert(key.to_string(), value);
    }

    /// Each field of the JSON object `facts` as a fact ([`Run::fact`]).
    pub(crate) fn add_facts(&mut self, facts: Value) {
        if let Value::Object(m) = facts {
            self.facts.extend(m);
        }
    }

    pub(crate) fn refuse(mut self, e: Error) -> Self {
        self.error = Some(e);
        self.refused = true;
        self
    }

    pub(crate) fn fail(mut self, e: Error) -> Self {
        self.error = Some(e);
        self
    }

    fn outcome(&self) -> &'static str {
        match (&self.error, self.refused) {
            (None, _) => "succeeded",
            (Some(_), true) => "refused",
            (Some(_), false) => "failed",
        }
    }

    /// The payload of `cloud.provisioned`: the facts, always with `provider`, `vm_ids`, `sids` and
    /// every counter of the action (empty or zero where the step did not get that far).
    pub(crate) fn audit_payload(&self) -> Value {
        self.audit_payload_with(json!({}))
    }

    /// [`Run::audit_payload`] with the fields of the JSON object `extra` over the facts (`vm_ids`,
    /// `sids`, `counters` of a step that is recording its success).
    pub(crate) fn audit_payload_with(&self, extra: Value) -> Value {
        let mut p = Map::new();
        p.insert("action".into(), json!(self.action.as_str()));
        p.insert("step_id".into(), json!(self.step_id));
        p.insert("outcome".into(), json!(self.outcome()));
        let extra = extra.as_object().into_iter().flatten();
        for (k, v) in self.facts.iter().chain(extra) {
            p.insert(k.clone(), v.clone());
        }
        if let Some(e) = &self.error {
            p.insert("error".into(), e.to_json());
        }
        p.entry("provider").or_insert_with(|| json!(""));
        p.entry("vm_ids").or_insert_with(|| json!([]));
        p.entry("sids").or_insert_with(|| json!([]));
        let counters = counters(self.action, p.get("counters"));
        p.insert("counters".into(), counters);
        Value::Object(p)
    }
}

/// Every counter of `action`, zero but where `given` says otherwise.
fn counters(action: Action, given: Option<&Value>) -> Value {
    let names: &[&str] = match action {
        Action::Created => &[
            "requested",
            "made",
            "souls_pending",
            "bootstrap_issued",
            "destroyed",
            "recorded_without_soul",
            "unresolved",
        ],
        Action::Destroyed => &[
            "vms_destroyed",
            "souls_destroyed",
            "seeds_orphaned",
            "bootstrap_burned",
            "journal_destroyed",
        ],
        Action::Resized => &["resized", "caused_downtime"],
    };
    let mut all: Map<String, Value> = names.iter().map(|n| (n.to_string(), json!(0))).collect();
    if let Some(Value::Object(given)) = given {
        all.extend(given.clone());
    }
    Value::Object(all)
}

/// The parameters as the log shows them: masked, and user data by its size only (it may hold
/// passwords and keys under any name).
fn logged_params(params: &Value) -> Value {
    let mut p = masked(params);
    if let Some(Value::String(ud)) = params.get("userdata") {
        p["userdata"] = json!(format!("<{} bytes>", ud.len()));
    }
    p
}

fn new_step_id() -> String {
    let mut b = [0u8; 8];
    // A step id is not a secret; if the generator fails, the clock still tells steps apart.
    if getrandom::fill(&mut b).is_err() {
        b = chrono::Utc::now()
            .timestamp_nanos_opt()
            .unwrap_or_default()
            .to_be_bytes();
    }
    hex::encode(b)
}

impl Keeper {
    /// keeper on `pool` (migrated), resolving credentials from `vault` and making providers with
    /// `drivers`.
    pub fn new(
        pool: Db,
        vault: Arc<dyn Vault>,
        drivers: Arc<dyn Drivers>,
        settings: Settings,
    ) -> Result<Self> {
        orca::validate_owner(&settings.owner)
            .map_err(|e| Error::config(e.to_string()).with_field("owner"))?;
        orca::validate_pool(&settings.pool)
            .map_err(|e| Error::config(e.to_string()).with_field("pool"))?;
        Ok(Keeper {
            pool,
            vault,
            drivers,
            settings: Arc::new(settings),
            running: Arc::new(tokio::sync::watch::channel(Steps::new()).0),
        })
    }

    /// How many steps are running now.
    pub fn steps_running(&self) -> usize {
        self.running.borrow().len()
    }

    /// The steps running now: `(step_id, step)`.
    pub fn running_steps(&self) -> Vec<(String, String)> {
        self.running.borrow().clone().into_iter().collect()
    }

    /// Resolves once no step is running (for a shutdown that lets the steps finish).
    pub async fn steps_finished(&self) {
        let mut rx = self.running.subscribe();
        // The sender lives in `self`: the wait ends only with no step running.
        let _ = rx.wait_for(|s| s.is_empty()).await;
    }

    /// Runs step `step` as a task of its own, which goes on to its end whoever waits for it (see
    /// [`Keeper::run_step`]). The step counts as running from this call on, before its task first
    /// runs: a shutdown that waits for the running steps cannot miss it.
    pub fn spawn_step(
        &self,
        step: String,
        params: Value,
        actor: String,
    ) -> tokio::task::JoinHandle<std::result::Result<Value, StepFailure>> {
        let running = RunningStep::start(&self.running, &step);
        let keeper = self.clone();
        tokio::spawn(async move { keeper.run_counted(running, &step, &params, &actor).await })
    }

    /// The connection pool.
    pub fn pool(&self) -> &Db {
        &self.pool
    }

    /// Runs step `step` (`core.cloud.created`, `core.cloud.destroyed`, `core.cloud.resized`) with
    /// `params`, on behalf of `actor` (recorded in the audit trail). The output is masked but for
    /// `hosts[].bootstrap_token`.
    pub async fn run_step(
        &self,
        step: &str,
        params: &Value,
        actor: &str,
    ) -> std::result::Result<Value, StepFailure> {
        let running = RunningStep::start(&self.running, step);
        self.run_counted(running, step, params, actor).await
    }

    /// [`Keeper::run_step`], counted as running by `running` (dropped when the step ends).
    async fn run_counted(
        &self,
        running: RunningStep,
        step: &str,
        params: &Value,
        actor: &str,
    ) -> std::result::Result<Value, StepFailure> {
        let step_id = running.step_id.clone();
        let action = Action::from_step(step).map_err(|e| StepFailure {
            output: json!({"step_id": step_id, "error": e.to_json()}),
            error: e,
        })?;
        tracing::info!(step = step, step_id = %step_id, actor = actor, "step started");
        tracing::debug!(step_id = %step_id, params = %logged_params(params), "step parameters");
        let mut run = Run::new(action, &step_id);
        // The provider as given, for the audit payload of a step refused before it read it.
        let given = params.get("provider").and_then(Value::as_str);
        if let Some(p) = given.filter(|p| registry::validate_name("provider", p).is_ok()) {
            run.fact("provider", json!(p));
        }
        let mut run = match action {
            Action::Created => self.created(run, params, actor).await,
            Action::Destroyed => self.destroyed(run, params, actor).await,
            Action::Resized => self.resized(run, params, actor).await,
        };
        if !run.audited {
            let payload = run.audit_payload();
            match self.audit_alone(actor, run.outcome(), &payload).await {
                Ok(()) => run.audited = true,
                Err(e) => {
                    if let Some(first) = run.error.take() {
                        run.fact("cause", first.to_json());
                    }
                    run.error = Some(e);
                    run.refused = false;
                }
            }
        }
        match run.error {
            None => {
                let mut out = run.output.unwrap_or_else(|| json!({}));
                out["step_id"] = json!(step_id);
                mask_step_output(&mut out);
                tracing::info!(step = step, step_id = %step_id, "step succeeded");
                Ok(out)
            }
            Some(error) => {
                let mut out =
                    json!({"action": action.as_str(), "step_id": step_id, "changed": false});
                for (k, v) in run.facts {
                    out[k] = v;
                }
                out["error"] = error.to_json();
                mask_json(&mut out);
                tracing::warn!(step = step, step_id = %step_id, code = %error.code, error = %error.message, "step failed");
                Err(StepFailure { error, output: out })
            }
        }
    }

    /// Writes the run's event on a connection of its own; every error it answers is `audit.failed`.
    async fn audit_alone(&self, actor: &str, outcome: &str, payload: &Value) -> Result<()> {
        let client = self.pool.get().await.map_err(|e| Error::audit(&e))?;
        audit::record(&client, CLOUD_PROVISIONED, actor, outcome, payload).await
    }

    /// Refuses VM `id` (read as `m`) unless keeper made it: it is of keeper's pool, or keeper's
    /// journal records it by that name in the pool it stands in (made before the `pool` setting
    /// changed): the row `journalled` when the caller has read it, else the one of this id. The
    /// owner label alone does not say so: another program may run under the same owner in a pool of
    /// its own.
    pub(crate) async fn check_pool(
        &self,
        row: &CloudProvider,
        id: &str,
        m: &orca::Machine,
        journalled: Option<&Named>,
    ) -> Result<()> {
        if m.pool == self.settings.pool || journalled.is_some_and(|j| *j == Named::of(m)) {
            return Ok(());
        }
        let made = self.journalled(row, id).await?;
        if made.is_some_and(|j| j == Named::of(m)) {
            return Ok(());
        }
        Err(Error::new(
            409,
            "cloud.other_pool",
            format!(
                "VM {id} is of pool {:?}, not keeper's pool {:?}, and keeper's journal does not record making it there: keeper changes only the VMs it made; nothing was done to it",
                m.pool, self.settings.pool
            ),
        ))
    }

    /// Where keeper's journal says it made VM `id` of `row` (names are never reused), `None` for a
    /// VM keeper never made. A row written before the journal kept pools is taken as made in the
    /// pool keeper is set to.
    pub(crate) async fn journalled(&self, row: &CloudProvider, id: &str) -> Result<Option<Named>> {
        let client = self.pool.get().await?;
        let sql = "SELECT name, COALESCE(pool, $3) FROM keeper.cloud_vms WHERE provider = $1 AND vm_id = $2 ORDER BY id LIMIT 1";
        let found = client
            .query_opt(sql, &[&row.name, &id, &self.settings.pool])
            .await
            .map_err(db_error("read the journal"))?;
        Ok(found.map(|r| Named {
            name: r.get(0),
            pool: r.get(1),
        }))
    }

    /// The registered provider `name` (422 naming `provider` when there is none).
    pub(crate) async fn provider_row(&self, name: &str) -> Result<CloudProvider> {
        let client = self.pool.get().await?;
        registry::get_provider(&client, name)
            .await?
            .ok_or_else(|| registry::unregistered("provider", name))
    }

    /// An orca provider for `row`, with its credentials resolved from the vault now (and dropped when
    /// this returns: the provider keeps what it needs).
    pub(crate) async fn cloud(&self, row: &CloudProvider) -> Result<Arc<dyn orca::Provider>> {
        let settings = self.vault.resolve(&row.credentials_ref).await?;
        let settings = driver_settings(row, settings);
        // Checked here, whichever drivers make the provider: a plugin reads only what its
        // environment holds, and would ignore a key its driver does not know.
        orca::check_settings(&row.driver, &settings).map_err(|e| provider_error(row, &e))?;
        self.drivers
            .provider(&row.driver, &self.settings.owner, &settings)
            .await
            .map_err(|e| provider_error(row, &e))
    }

    /// keeper on the database at `database_url`: a connection pool, and the pending migrations
    /// applied.
    pub async fn connect(
        database_url: &str,
        vault: Arc<dyn Vault>,
        drivers: Arc<dyn Drivers>,
        settings: Settings,
    ) -> Result<Self> {
        let pool = crate::db::pool(database_url, 16)?;
        crate::db::migrate(&pool).await?;
        Keeper::new(pool, vault, drivers, settings)
    }
}

/// keeper's error for provider `row` that could not be made: `provider.driver` for a driver this
/// build lacks, else the driver's error naming the provider.
fn provider_error(row: &CloudProvider, e: &orca::Error) -> Error {
    if let orca::Error::InvalidSpec { field, rule } = e {
        if field == "kind" {
            return Error::new(
                422,
                "provider.driver",
                format!("provider {}: {rule}", row.name),
            )
            .with_field("provider");
        }
    }
    let mut err = from_orca_saying(e, |m| format!("provider {}: {m}", row.name));
    if err.status == 502 {
        err.status = 500;
    }
    err
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread")]
    async fn a_spawned_step_counts_as_running_before_its_task_runs() {
        // No database is needed: the step is only asked for (its task cannot run before this test
        // yields, on this one-thread runtime) and then cancelled.
        let pool = crate::db::pool("postgres://keeper@127.0.0.1:9/keeper", 1).unwrap();
        let k = Keeper::new(
            pool,
            Arc::new(crate::vault::FileVault::new("no-vault")),
            Arc::new(crate::drivers::OrcaDrivers),
            Settings::default(),
        )
        .unwrap();
        let task = k.spawn_step(
            "core.cloud.created".into(),
            json!({"provider": "lab"}),
            "test".into(),
        );
        assert_eq!(k.steps_running(), 1);
        let running = k.running_steps();
        assert_eq!(running[0].1, "core.cloud.created");
        task.abort();
        let _ = task.await;
        assert_eq!(k.steps_running(), 0, "a cancelled step no longer counts");
        k.steps_finished().await;
    }
}
