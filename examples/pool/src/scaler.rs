//! One pass of the autoscaler: reconcile the record with the cloud's listing, then create and delete,
//! a bounded number at a time, writing every intent before its call and every outcome after.

use std::collections::{BTreeMap, BTreeSet};

use futures::StreamExt;
use orca::{Created, Error, ErrorKind, Machine, MachineSpec, Provider, Status, Timestamp};
use serde::Serialize;
use tokio::sync::Mutex;

use crate::record::{Entry, Event, Key, Phase, Record};
use crate::store::{Role, Store, StoreError};
use crate::{machine_name, Offering, Settings, Unknown};

/// One thing a pass did or saw, and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Action {
    /// Made a machine (recorded by name before the call).
    Created {
        /// Its name.
        name: String,
        /// Its id.
        id: String,
        /// From which offering.
        offering: String,
        /// Whether the driver found it made by an earlier attempt (a create retried after a crash or
        /// a lost answer) rather than making it now.
        adopted: bool,
    },
    /// A machine of a recorded name was found in the cloud and is this pool's.
    Adopted {
        /// Its name.
        name: String,
        /// Its id.
        id: String,
        /// Why it is this pool's.
        why: String,
    },
    /// Deleted a machine.
    Deleted {
        /// Its name.
        name: String,
        /// Its id.
        id: String,
        /// The kind of reason: `surplus`, `unknown`, `unhealthy`, `duplicate`, `recorded`.
        cause: String,
        /// Why, in words.
        why: String,
    },
    /// A machine of the record is no longer in the cloud.
    Gone {
        /// Its name.
        name: String,
        /// Its id.
        id: String,
        /// Why it is taken as gone.
        why: String,
    },
    /// An offering had no stock; it rests until `until`.
    NoStock {
        /// The offering.
        offering: String,
        /// Until when it is not tried again.
        until: Timestamp,
    },
    /// An offering was not tried.
    Skipped {
        /// The offering.
        offering: String,
        /// Why.
        reason: String,
    },
    /// A recorded name was given up: its create was answered "not made", or it was not needed and
    /// never showed up.
    Retired {
        /// The name.
        name: String,
        /// Why.
        why: String,
    },
    /// A create recorded earlier that has not shown up, waited for.
    Waiting {
        /// The name.
        name: String,
        /// Why it is not retried now.
        why: String,
    },
    /// The pool stays short this pass.
    Short {
        /// How many machines are missing.
        missing: usize,
        /// Why.
        why: String,
    },
    /// Nothing was done: the pool has machines the record does not name, and the record is new.
    Held {
        /// The machines (`name (id)`).
        machines: Vec<String>,
        /// Why, and what the operator can do.
        why: String,
    },
    /// A create of a name this record had never asked for before was answered with a machine an
    /// earlier create made: another writer (a second orca-pool with its own record, or another
    /// program) owns machines in this pool under this owner. The machine is not recorded and the pass
    /// stops.
    Conflict {
        /// The name.
        name: String,
        /// The other writer's machine.
        id: String,
        /// Why, and what the operator can do.
        why: String,
    },
    /// A call failed; the pass went on where it could.
    Failed {
        /// The operation: `list`, `read`, `create`, `delete`.
        operation: String,
        /// What was being done.
        doing: String,
        /// The error.
        error: String,
    },
}

/// What one pass did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PassReport {
    /// When the pass started.
    pub at: Timestamp,
    /// The provider kind.
    pub kind: String,
    /// The owner.
    pub owner: String,
    /// The pool.
    pub pool: String,
    /// This replica's role in the pass.
    #[serde(flatten)]
    pub role: Role,
    /// The target size.
    pub size: usize,
    /// Machines of the pool listed at the start of the pass.
    pub listed: usize,
    /// Machines counted as serving after the pass (running, starting, or stopped within the grace).
    pub serving: usize,
    /// What it did, in order.
    pub actions: Vec<Action>,
    /// Why the pass stopped before its end (the lead lost, the record not writable), if it did.
    pub stopped: Option<String>,
}

impl PassReport {
    fn new(key: &Key, size: usize, at: Timestamp) -> Self {
        PassReport {
            at,
            kind: key.kind.clone(),
            owner: key.owner.clone(),
            pool: key.pool.clone(),
            role: Role::Leader,
            size,
            listed: 0,
            serving: 0,
            actions: Vec::new(),
            stopped: None,
        }
    }

    /// How many actions failed (no stock is not a failure), plus one if the pass stopped early for
    /// another reason than a conflict met in it (that stop is the conflict's, counted once).
    pub fn failures(&self) -> usize {
        let failed = self
            .actions
            .iter()
            .filter(|a| matches!(a, Action::Failed { .. }))
            .count();
        let conflicts = self
            .actions
            .iter()
            .filter(|a| matches!(a, Action::Conflict { .. }))
            .count();
        failed + conflicts + usize::from(self.stopped.is_some() && conflicts == 0)
    }

    /// Whether the pass held everything, waiting for the operator's word on unknown machines.
    pub fn held(&self) -> bool {
        self.actions
            .iter()
            .any(|a| matches!(a, Action::Held { .. }))
    }

    /// The report as lines for a person.
    pub fn lines(&self) -> Vec<String> {
        let owner = if self.owner.is_empty() {
            "-"
        } else {
            &self.owner
        };
        let head = format!(
            "{} pool {} ({}/{owner})",
            self.at.format("%Y-%m-%dT%H:%M:%SZ"),
            self.pool,
            self.kind
        );
        let mut v = match &self.role {
            Role::Standby { leader } => vec![format!(
                "{head}: standby, replica {} leads; nothing done",
                if leader.is_empty() { "?" } else { leader }
            )],
            Role::Leader => vec![format!(
                "{head}: {} listed, {} of {} serving after this pass",
                self.listed, self.serving, self.size
            )],
        };
        for a in &self.actions {
            v.push(match a {
                Action::Created {
                    name,
                    id,
                    offering,
                    adopted,
                } => format!(
                    "  created {name} ({id}) from {offering}{}",
                    if *adopted {
                        ": adopted, an earlier attempt had made it"
                    } else {
                        ""
                    }
                ),
                Action::Adopted { name, id, why } => format!("  adopted {name} ({id}): {why}"),
                Action::Deleted { name, id, why, .. } => format!("  deleted {name} ({id}): {why}"),
                Action::Gone { name, id, why } => format!("  gone {name} ({id}): {why}"),
                Action::NoStock { offering, until } => format!(
                    "  no stock of {offering}; it rests until {}",
                    until.format("%H:%M:%SZ")
                ),
                Action::Skipped { offering, reason } => format!("  skipped {offering}: {reason}"),
                Action::Retired { name, why } => format!("  retired the name {name}: {why}"),
                Action::Waiting { name, why } => format!("  waiting for {name}: {why}"),
                Action::Short { missing, why } => format!("  {missing} short: {why}"),
                Action::Held { machines, why } => {
                    format!(
                        "  HELD {} machine(s) ({}): {why}",
                        machines.len(),
                        machines.join(", ")
                    )
                }
                Action::Conflict { name, id, why } => {
                    format!("  CONFLICT on {name} ({id}): {why}")
                }
                Action::Failed { doing, error, .. } => format!("  FAILED {doing}: {error}"),
            });
        }
        if let Some(s) = &self.stopped {
            v.push(format!("  STOPPED: {s}"));
        } else if self.actions.is_empty() && self.role == Role::Leader {
            v.push(format!(
                "  nothing to do: {} of {} serving",
                self.serving, self.size
            ));
        }
        v
    }
}

/// The autoscaler: its settings and the store of its record.
#[derive(Debug)]
pub struct Scaler {
    /// Its settings.
    pub settings: Settings,
    store: Box<dyn Store>,
    record: Option<Record>,
    /// Conflicts met whose write failed (or was cut off): written on the next pass this replica
    /// leads, before anything else, so that the other writer's machine is never taken for this
    /// record's own (its name is still recorded as creating).
    unrecorded: Vec<Unrecorded>,
}

/// A conflict not yet written to the store.
#[derive(Debug, Clone)]
struct Unrecorded {
    key: Key,
    name: String,
    id: String,
    why: String,
}

/// Whether an error of a create says the cloud made nothing (the name can be given up).
fn refused(e: &Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::InvalidSpec
            | ErrorKind::InvalidSettings
            | ErrorKind::Unsupported
            | ErrorKind::PermissionDenied
            | ErrorKind::Unauthenticated
            | ErrorKind::Quota
            | ErrorKind::AlreadyExists
            | ErrorKind::NotOwned
    )
}

fn since(now: Timestamp, t: Timestamp) -> std::time::Duration {
    (now - t).to_std().unwrap_or_default()
}

fn ts(t: Timestamp) -> String {
    t.format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// A delete to make.
#[derive(Debug, Clone)]
struct DeleteJob {
    name: String,
    id: String,
    offering: Offering,
    cause: &'static str,
    why: String,
    /// A second machine of a recorded name: the record's entry (the first machine's) stays as it is.
    duplicate: bool,
    /// Counted toward the size before the pass (a surplus delete lowers the count).
    counted: bool,
}

#[derive(Debug, Clone)]
enum Job {
    Delete(DeleteJob),
    /// Retry the recorded create of this name (the driver adopts what an earlier attempt made).
    Retry(String),
    /// A new name from the first offering not resting.
    New,
}

struct Shared<'a> {
    record: Record,
    store: &'a mut dyn Store,
    actions: Vec<Action>,
    throttled: bool,
    made: usize,
    deleted_counted: usize,
    no_offering: usize,
    /// Another writer was met: nothing more is started.
    conflict: Option<String>,
    /// Conflicts met and not yet written (the scaler's).
    unrecorded: &'a mut Vec<Unrecorded>,
}

impl Shared<'_> {
    async fn commit(&mut self, events: Vec<Event>) -> Result<(), StoreError> {
        self.store.commit(&self.record, &events).await
    }
}

impl Scaler {
    /// A scaler of `settings` keeping its record in `store`.
    pub fn new(settings: Settings, store: Box<dyn Store>) -> Self {
        Scaler {
            settings,
            store,
            record: None,
            unrecorded: Vec::new(),
        }
    }

    /// The record as the last pass left it (`None` before the first pass, or after a pass that
    /// stopped early).
    pub fn record(&self) -> Option<&Record> {
        self.record.as_ref()
    }

    /// The store.
    pub fn store(&self) -> &dyn Store {
        &*self.store
    }

    /// One pass at time `now` on `p`: bring the pool to its size, if this replica leads.
    pub async fn pass(&mut self, p: &dyn Provider, now: Timestamp) -> PassReport {
        let key = Key::new(p.kind(), p.owner(), &self.settings.pool);
        let mut report = PassReport::new(&key, self.settings.size, now);
        self.record = None;
        match self.store.lead(&key).await {
            Ok(Role::Leader) => {}
            Ok(standby) => {
                report.role = standby;
                return report;
            }
            Err(e) => {
                report.stopped = Some(e.to_string());
                return report;
            }
        }
        let lost = self.store.lost();
        let settings = self.settings.clone();
        let run = run(
            &mut *self.store,
            &mut self.unrecorded,
            &settings,
            p,
            now,
            &key,
            &mut report,
        );
        let result = match lost {
            Some(mut rx) => {
                tokio::select! {
                    r = run => r,
                    _ = async move { let _ = rx.wait_for(|lost| *lost).await; } => Err(StoreError::LostLeadership(
                        "the database session that held the lead is gone: stopped at once".into(),
                    )),
                }
            }
            None => run.await,
        };
        match result {
            Ok(record) => self.record = record,
            Err(e) => report.stopped = Some(e.to_string()),
        }
        report
    }
}

/// The pass of a leader. Returns the record as it left it (or `None` when it held).
async fn run(
    store: &mut dyn Store,
    unrecorded: &mut Vec<Unrecorded>,
    settings: &Settings,
    p: &dyn Provider,
    now: Timestamp,
    key: &Key,
    report: &mut PassReport,
) -> Result<Option<Record>, StoreError> {
    let mut record = store
        .load(key)
        .await?
        .unwrap_or_else(|| Record::new(key.clone()));
    // A conflict met in an earlier pass whose write failed: written first. Its name may still be
    // recorded as creating, and the other writer's machine must not be found by it as this record's.
    if unrecorded.iter().any(|u| u.key == *key) {
        let mut events = Vec::new();
        for u in unrecorded.iter().filter(|u| u.key == *key) {
            if record
                .entries
                .get(&u.name)
                .is_some_and(|e| e.phase == Phase::Creating || e.id.as_deref() == Some(&u.id))
            {
                record.entries.remove(&u.name);
            }
            if record.conflict.is_none() {
                record.conflict = Some(u.why.clone());
            }
            events.push(Event::Conflict {
                name: u.name.clone(),
                id: u.id.clone(),
                why: u.why.clone(),
            });
        }
        store.commit(&record, &events).await?;
        unrecorded.retain(|u| u.key != *key);
    }
    let listed = match p.machines(&key.pool).await {
        Ok(v) => v,
        Err(e) => {
            report.actions.push(Action::Failed {
                operation: "list".into(),
                doing: format!("list pool {}", key.pool),
                error: e.to_string(),
            });
            return Ok(Some(record));
        }
    };
    report.listed = listed.len();
    let mut events = Vec::new();

    // The next name is past every name of this pool's form in the record or the cloud (machines
    // adopted on the operator's word, or made by an earlier record, carry such names): a create never
    // picks the name of a machine that exists.
    if let Some(n) = listed
        .iter()
        .map(|m| m.name.as_str())
        .chain(record.entries.keys().map(String::as_str))
        .filter_map(|n| number_of(key, n))
        .max()
    {
        record.next = record.next.max(n.saturating_add(1));
    }

    // Another writer met in an earlier pass: nothing is done until the operator's word.
    if let Some(conflict) = record.conflict.clone() {
        if settings.unknown == Unknown::Ask {
            report.serving = serving_of(&record, &listed, now, settings.grace);
            report.stopped = Some(format!("held, as in an earlier pass: {conflict}"));
            return Ok(Some(record));
        }
        record.conflict = None;
        events.push(Event::Settled {
            how: format!(
                "the operator's word (--unknown {}): the pool's machines this record does not name are {}",
                if settings.unknown == Unknown::Adopt { "adopt" } else { "delete" },
                if settings.unknown == Unknown::Adopt { "adopted" } else { "deleted" }
            ),
        });
    }

    // Machines the record does not name.
    let unknown: Vec<&Machine> = listed
        .iter()
        .filter(|m| m.status != Status::Deleting && !record.entries.contains_key(&m.name))
        .collect();
    let policy = match (record.established, settings.unknown) {
        (_, Unknown::Adopt) => Unknown::Adopt,
        (_, Unknown::Delete) => Unknown::Delete,
        (false, Unknown::Ask) => Unknown::Ask,
        (true, Unknown::Ask) => Unknown::Delete,
    };
    if !record.established {
        if !unknown.is_empty() && policy == Unknown::Ask {
            let mut why = format!(
                "the record of {key} ({}) is new and names none of them, so they are neither adopted nor deleted, and nothing is created until you decide: if they are this pool's, run with --unknown adopt; to delete them, --unknown delete",
                store.describe()
            );
            for n in store.notes() {
                why.push_str("; ");
                why.push_str(&n);
            }
            report.actions.push(Action::Held {
                machines: unknown
                    .iter()
                    .map(|m| format!("{} ({})", m.name, m.id))
                    .collect(),
                why,
            });
            return Ok(None);
        }
        record.established = true;
        events.push(Event::Established {
            note: format!(
                "{} machine(s) listed, {} not named by the record ({:?})",
                listed.len(),
                unknown.len(),
                policy
            ),
        });
    }

    // Reconcile the record with the listing.
    let mut counted: Vec<(Machine, bool)> = Vec::new(); // (machine, serving now)
    let mut deletes: Vec<DeleteJob> = Vec::new();
    let listed_names: BTreeSet<&str> = listed.iter().map(|m| m.name.as_str()).collect();
    let mut seen_ids: BTreeMap<String, String> = BTreeMap::new();
    let grace = settings.grace;
    let health = |e: &mut Entry,
                  m: &Machine,
                  events: &mut Vec<Event>,
                  counted: &mut Vec<(Machine, bool)>,
                  deletes: &mut Vec<DeleteJob>| {
        match m.status {
            Status::Running | Status::Starting => {
                if e.unhealthy_since.take().is_some() {
                    events.push(Event::Live {
                        name: e.name.clone(),
                        id: m.id.clone(),
                        how: format!("{} again", m.status),
                    });
                }
                counted.push((m.clone(), true));
            }
            Status::Deleting => {}
            Status::Stopped | Status::Stopping | Status::Unknown => {
                let from = unhealthy_from(m, e, now);
                if e.unhealthy_since != Some(from) {
                    e.unhealthy_since = Some(from);
                    events.push(Event::Unhealthy {
                        name: e.name.clone(),
                        since: from,
                    });
                }
                if since(now, from) >= grace {
                    deletes.push(DeleteJob {
                        name: e.name.clone(),
                        id: m.id.clone(),
                        offering: e.offering.clone(),
                        cause: "unhealthy",
                        why: format!(
                            "{} ({}) since {}, longer than the grace of {} s; replaced",
                            m.status,
                            m.cloud_status,
                            ts(from),
                            grace.as_secs()
                        ),
                        duplicate: false,
                        counted: false,
                    });
                } else {
                    counted.push((m.clone(), false));
                }
            }
        }
    };
    for m in &listed {
        let offering = Offering {
            machine_type: m.machine_type.clone(),
            location: m.location.clone(),
        };
        let Some(e) = record.entries.get_mut(&m.name) else {
            if m.status == Status::Deleting {
                continue;
            }
            match policy {
                Unknown::Adopt => {
                    record.entries.insert(
                        m.name.clone(),
                        Entry {
                            name: m.name.clone(),
                            offering,
                            phase: Phase::Live,
                            id: Some(m.id.clone()),
                            intent_at: now,
                            created_at: m.created_at,
                            unhealthy_since: None,
                            changed_at: now,
                            note: "adopted on the operator's word (--unknown adopt)".into(),
                        },
                    );
                    events.push(Event::Live {
                        name: m.name.clone(),
                        id: m.id.clone(),
                        how: "adopted on the operator's word".into(),
                    });
                    report.actions.push(Action::Adopted {
                        name: m.name.clone(),
                        id: m.id.clone(),
                        why: "not in the record; adopted as --unknown adopt says".into(),
                    });
                    if let Some(e) = record.entries.get_mut(&m.name) {
                        health(e, m, &mut events, &mut counted, &mut deletes);
                    }
                }
                _ => deletes.push(DeleteJob {
                    name: m.name.clone(),
                    id: m.id.clone(),
                    offering,
                    cause: "unknown",
                    why: if settings.unknown == Unknown::Delete {
                        format!("not in the record of {key}; deleted as --unknown delete says")
                    } else {
                        format!("not in the record of {key}, which names every machine it ever meant to make")
                    },
                    duplicate: false,
                    counted: false,
                }),
            }
            continue;
        };
        if let Some(first) = seen_ids.get(&m.name) {
            if m.status != Status::Deleting && e.id.as_deref() != Some(m.id.as_str()) {
                deletes.push(DeleteJob {
                    name: m.name.clone(),
                    id: m.id.clone(),
                    offering,
                    cause: "duplicate",
                    why: format!("a second machine named {} (the pool's is {first})", m.name),
                    duplicate: true,
                    counted: false,
                });
            }
            continue;
        }
        match e.phase {
            Phase::Creating | Phase::Retired => {
                if m.status == Status::Deleting {
                    continue;
                }
                let was = e.phase;
                e.phase = Phase::Live;
                e.id = Some(m.id.clone());
                e.created_at = m.created_at;
                e.changed_at = now;
                e.note = format!("found by name while {}", was.as_str());
                events.push(Event::Live {
                    name: m.name.clone(),
                    id: m.id.clone(),
                    how: format!("found by name while {}", was.as_str()),
                });
                report.actions.push(Action::Adopted {
                    name: m.name.clone(),
                    id: m.id.clone(),
                    why: format!(
                        "its name was recorded ({}) before its create; found in the cloud",
                        was.as_str()
                    ),
                });
                seen_ids.insert(m.name.clone(), m.id.clone());
                health(e, m, &mut events, &mut counted, &mut deletes);
            }
            Phase::Live => {
                if e.id.as_deref() != Some(m.id.as_str()) {
                    // Another machine carries this name: the recorded one stays the pool's.
                    if m.status != Status::Deleting {
                        deletes.push(DeleteJob {
                            name: m.name.clone(),
                            id: m.id.clone(),
                            offering,
                            cause: "duplicate",
                            why: format!(
                                "a second machine named {} (the pool's is {})",
                                m.name,
                                e.id.clone().unwrap_or_default()
                            ),
                            duplicate: true,
                            counted: false,
                        });
                    }
                    continue;
                }
                if e.created_at.is_none() {
                    e.created_at = m.created_at;
                }
                seen_ids.insert(m.name.clone(), m.id.clone());
                health(e, m, &mut events, &mut counted, &mut deletes);
            }
            Phase::Deleting | Phase::Gone => {
                if m.status == Status::Deleting {
                    continue;
                }
                deletes.push(DeleteJob {
                    name: m.name.clone(),
                    id: m.id.clone(),
                    offering,
                    cause: "recorded",
                    why: if e.phase == Phase::Deleting {
                        format!("its delete was recorded and not confirmed ({})", e.note)
                    } else {
                        "deleted before and still listed".into()
                    },
                    duplicate: false,
                    counted: false,
                });
            }
        }
    }

    // Entries the listing does not show.
    let mut pending: Vec<(Timestamp, String)> = Vec::new();
    let mut pruned = Vec::new();
    let absent: Vec<String> = record
        .entries
        .keys()
        .filter(|n| !listed_names.contains(n.as_str()))
        .cloned()
        .collect();
    for name in absent {
        let Some(e) = record.entries.get(&name).cloned() else {
            continue;
        };
        match e.phase {
            Phase::Live => {
                let id = e.id.clone().unwrap_or_default();
                // A listing can lag behind; read the machine on its own before believing it gone.
                match p.machine(&id).await {
                    Ok(Some(m)) if m.status != Status::Deleting => {
                        if let Some(e) = record.entries.get_mut(&name) {
                            health(e, &m, &mut events, &mut counted, &mut deletes);
                        }
                    }
                    Ok(_) => {
                        if let Some(e) = record.entries.get_mut(&name) {
                            e.phase = Phase::Gone;
                            e.changed_at = now;
                            e.note = "no longer in the cloud".into();
                        }
                        events.push(Event::Gone {
                            name: name.clone(),
                            why: "no longer in the cloud".into(),
                        });
                        report.actions.push(Action::Gone {
                            name: name.clone(),
                            id,
                            why: "no longer in the cloud (deleted outside orca-pool, or by the cloud); replaced".into(),
                        });
                    }
                    Err(err) => {
                        // Count it: better one short-lived surplus than a machine made twice.
                        counted.push((
                            {
                                let mut m = Machine::new(id.clone(), name.clone());
                                m.status = Status::Running;
                                m.created_at = e.created_at;
                                m
                            },
                            true,
                        ));
                        report.actions.push(Action::Failed {
                            operation: "read".into(),
                            doing: format!("read {name} ({id}), which the listing did not show"),
                            error: err.to_string(),
                        });
                    }
                }
            }
            Phase::Deleting => {
                if let Some(e) = record.entries.get_mut(&name) {
                    e.phase = Phase::Gone;
                    e.changed_at = now;
                    e.note = format!("delete confirmed by the listing ({})", e.note);
                }
                events.push(Event::Gone {
                    name: name.clone(),
                    why: "its recorded delete is done: not listed".into(),
                });
            }
            Phase::Creating => pending.push((e.intent_at, name.clone())),
            Phase::Retired | Phase::Gone => {
                if since(now, e.changed_at) >= settings.retention {
                    pruned.push(name.clone());
                }
            }
        }
    }
    if !pruned.is_empty() {
        for n in &pruned {
            record.entries.remove(n);
        }
        events.push(Event::Pruned { names: pruned });
    }
    record.cooling.retain(|_, until| *until > now);

    // Plan.
    let serving = counted.len();
    let size = settings.size;
    if serving > size {
        // Not serving first, then newest first by the cloud's creation time.
        let mut victims = counted.clone();
        let created = |m: &Machine| {
            m.created_at
                .or_else(|| record.entries.get(&m.name).map(|e| e.intent_at))
        };
        victims.sort_by(|(a, a_ok), (b, b_ok)| {
            a_ok.cmp(b_ok)
                .then_with(|| (b.status == Status::Starting).cmp(&(a.status == Status::Starting)))
                .then_with(|| created(b).cmp(&created(a)))
        });
        for (m, _) in victims.into_iter().take(serving - size) {
            deletes.push(DeleteJob {
                name: m.name.clone(),
                id: m.id.clone(),
                offering: Offering {
                    machine_type: m.machine_type.clone(),
                    location: m.location.clone(),
                },
                cause: "surplus",
                why: format!(
                    "surplus: {serving} serving, {size} wanted (newest first, made {})",
                    created(&m)
                        .map(ts)
                        .unwrap_or_else(|| "at an unknown time".into())
                ),
                duplicate: false,
                counted: true,
            });
        }
    }
    let missing = size.saturating_sub(serving);
    pending.sort();
    let mut retries = Vec::new();
    for (i, (at, name)) in pending.into_iter().enumerate() {
        if i < missing {
            retries.push(name);
        } else if since(now, at) >= settings.settle {
            if let Some(e) = record.entries.get_mut(&name) {
                e.phase = Phase::Retired;
                e.changed_at = now;
                e.note = "not needed, and never seen".into();
            }
            let why = format!(
                "recorded {} ago, never seen, and no longer needed",
                humantime(since(now, at))
            );
            events.push(Event::Retired {
                name: name.clone(),
                why: why.clone(),
            });
            report.actions.push(Action::Retired { name, why });
        } else {
            report.actions.push(Action::Waiting {
                name,
                why: "its create was recorded and may still show up; not needed now".into(),
            });
        }
    }
    let new = missing - retries.len();
    if new > 0 {
        for o in &settings.offerings {
            if let Some(until) = record.cooling.get(&o.to_string()) {
                report.actions.push(Action::Skipped {
                    offering: o.to_string(),
                    reason: format!("no stock lately; resting until {}", ts(*until)),
                });
            }
        }
    }
    if !events.is_empty() {
        store.commit(&record, &events).await?;
    }

    // Act: deletes first, then the creates, `parallel` at a time.
    let mut jobs: Vec<Job> = deletes.into_iter().map(Job::Delete).collect();
    jobs.extend(retries.into_iter().map(Job::Retry));
    jobs.extend(std::iter::repeat_n(Job::New, new));
    let shared = Mutex::new(Shared {
        record,
        store,
        actions: Vec::new(),
        throttled: false,
        made: 0,
        deleted_counted: 0,
        no_offering: 0,
        conflict: None,
        unrecorded,
    });
    {
        let mut results = futures::stream::iter(
            jobs.into_iter()
                .map(|j| run_job(&shared, p, settings, key, j, now)),
        )
        .buffer_unordered(settings.parallel.max(1));
        while let Some(r) = results.next().await {
            // A record that cannot be written stops everything at once: in-flight calls are dropped.
            r?;
        }
    }
    let shared = shared.into_inner();
    report.actions.extend(shared.actions);
    if let Some(c) = shared.conflict {
        report.stopped = Some(c);
    }
    if shared.no_offering > 0 {
        report.actions.push(Action::Short {
            missing: shared.no_offering,
            why: "every offering is resting after no stock".into(),
        });
    }
    report.serving = (serving + shared.made).saturating_sub(shared.deleted_counted);
    Ok(Some(shared.record))
}

/// The number `n` of `name` when it is `machine_name(key, n)`.
fn number_of(key: &Key, name: &str) -> Option<u64> {
    let prefix = machine_name(key, 0);
    let prefix = prefix.strip_suffix('0')?;
    let digits = name.strip_prefix(prefix)?;
    let n: u64 = digits.parse().ok()?;
    (machine_name(key, n) == name).then_some(n)
}

/// How many listed machines of `record` serve now (running, starting, or stopped or unknown within
/// the grace), as a pass that acts would count them; for a pass that holds.
/// Since when machine `m` (record entry `e`), stopped or unknown, has not served: the cloud's stop
/// time, else when the scaler first saw it so, else `now`. The grace runs from it.
fn unhealthy_from(m: &Machine, e: &Entry, now: Timestamp) -> Timestamp {
    match m.status {
        Status::Unknown => None,
        _ => m.stopped_at,
    }
    .or(e.unhealthy_since)
    .unwrap_or(now)
}

fn serving_of(
    record: &Record,
    listed: &[Machine],
    now: Timestamp,
    grace: std::time::Duration,
) -> usize {
    listed
        .iter()
        .filter(|m| {
            let Some(e) = record.entries.get(&m.name) else {
                return false;
            };
            if e.phase != Phase::Live || e.id.as_deref() != Some(m.id.as_str()) {
                return false;
            }
            match m.status {
                Status::Running | Status::Starting => true,
                Status::Deleting => false,
                Status::Stopped | Status::Stopping | Status::Unknown => {
                    since(now, unhealthy_from(m, e, now)) < grace
                }
            }
        })
        .count()
}

fn humantime(d: std::time::Duration) -> String {
    let s = d.as_secs();
    if s >= 3600 {
        format!("{} h {} min", s / 3600, s % 3600 / 60)
    } else if s >= 60 {
        format!("{} min", s / 60)
    } else {
        format!("{s} s")
    }
}

async fn run_job(
    sh: &Mutex<Shared<'_>>,
    p: &dyn Provider,
    settings: &Settings,
    key: &Key,
    job: Job,
    now: Timestamp,
) -> Result<(), StoreError> {
    match job {
        Job::Delete(d) => delete_job(sh, p, d, now).await,
        Job::Retry(name) => create_job(sh, p, settings, key, Some(name), now).await,
        Job::New => create_job(sh, p, settings, key, None, now).await,
    }
}

async fn delete_job(
    sh: &Mutex<Shared<'_>>,
    p: &dyn Provider,
    d: DeleteJob,
    now: Timestamp,
) -> Result<(), StoreError> {
    {
        let mut s = sh.lock().await;
        if s.conflict.is_some() {
            return Ok(());
        }
        if s.throttled {
            s.actions.push(Action::Skipped {
                offering: d.offering.to_string(),
                reason: format!(
                    "delete of {} ({}) left for the next pass: the cloud throttles",
                    d.name, d.id
                ),
            });
            return Ok(());
        }
        if !d.duplicate {
            let e = s.record.entries.entry(d.name.clone()).or_insert(Entry {
                name: d.name.clone(),
                offering: d.offering.clone(),
                phase: Phase::Deleting,
                id: Some(d.id.clone()),
                intent_at: now,
                created_at: None,
                unhealthy_since: None,
                changed_at: now,
                note: String::new(),
            });
            e.phase = Phase::Deleting;
            e.id = Some(d.id.clone());
            e.changed_at = now;
            e.note = d.why.clone();
        }
        s.commit(vec![Event::IntendDelete {
            name: d.name.clone(),
            id: d.id.clone(),
            why: d.why.clone(),
        }])
        .await?;
    }
    let r = p.delete(&d.id).await;
    let mut s = sh.lock().await;
    match r {
        Ok(_) => {
            if !d.duplicate {
                if let Some(e) = s.record.entries.get_mut(&d.name) {
                    e.phase = Phase::Gone;
                    e.changed_at = now;
                }
            }
            s.commit(vec![Event::Gone {
                name: d.name.clone(),
                why: format!("deleted: {}", d.why),
            }])
            .await?;
            if d.counted {
                s.deleted_counted += 1;
            }
            s.actions.push(Action::Deleted {
                name: d.name,
                id: d.id,
                cause: d.cause.into(),
                why: d.why,
            });
        }
        Err(err) => {
            if !d.duplicate {
                if let Some(e) = s.record.entries.get_mut(&d.name) {
                    e.note = format!("{}; last delete failed: {err}", d.why);
                }
            }
            s.commit(vec![Event::Failed {
                name: d.name.clone(),
                error: err.to_string(),
            }])
            .await?;
            if err.kind() == ErrorKind::Throttled {
                s.throttled = true;
            }
            s.actions.push(Action::Failed {
                operation: "delete".into(),
                doing: format!("delete {} ({}), {}", d.name, d.id, d.why),
                error: err.to_string(),
            });
        }
    }
    Ok(())
}

async fn create_job(
    sh: &Mutex<Shared<'_>>,
    p: &dyn Provider,
    settings: &Settings,
    key: &Key,
    mut retry: Option<String>,
    now: Timestamp,
) -> Result<(), StoreError> {
    loop {
        let (name, offering, fresh) = {
            let mut s = sh.lock().await;
            if s.conflict.is_some() {
                return Ok(());
            }
            if s.throttled {
                s.actions.push(Action::Skipped {
                    offering: "-".into(),
                    reason: "a create left for the next pass: the cloud throttles".into(),
                });
                return Ok(());
            }
            match retry.take() {
                Some(name) => match s.record.entries.get(&name) {
                    Some(e) => (name, e.offering.clone(), false),
                    None => continue,
                },
                None => {
                    let usable = settings.offerings.iter().find(|o| {
                        s.record
                            .cooling
                            .get(&o.to_string())
                            .is_none_or(|until| *until <= now)
                    });
                    let Some(o) = usable.cloned() else {
                        s.no_offering += 1;
                        return Ok(());
                    };
                    // Never a name the record holds (in any phase).
                    while s
                        .record
                        .entries
                        .contains_key(&machine_name(key, s.record.next))
                    {
                        s.record.next += 1;
                    }
                    let n = s.record.next;
                    s.record.next += 1;
                    let name = machine_name(key, n);
                    s.record.entries.insert(
                        name.clone(),
                        Entry {
                            name: name.clone(),
                            offering: o.clone(),
                            phase: Phase::Creating,
                            id: None,
                            intent_at: now,
                            created_at: None,
                            unhealthy_since: None,
                            changed_at: now,
                            note: String::new(),
                        },
                    );
                    s.commit(vec![Event::IntendCreate {
                        name: name.clone(),
                        offering: o.to_string(),
                    }])
                    .await?;
                    (name, o, true)
                }
            }
        };
        let spec = MachineSpec::new(&name, &offering.machine_type, &offering.location, &key.pool)
            .with_user_data(settings.user_data.clone());
        let r = p.create(&spec).await;
        let mut s = sh.lock().await;
        let outcome = match r {
            Ok(Created::Machine(m)) | Ok(Created::Adopted(m)) if m.name != name => {
                // A driver that answers another machine than the one asked for: never counted.
                Err(Error::other(format!(
                    "the driver answered machine {} ({}) for a create of {name}",
                    m.name, m.id
                )))
            }
            Ok(Created::Machine(m)) => Ok((m, false)),
            Ok(Created::Adopted(m)) if fresh => {
                // This record picked the name just now and had never asked for it before: the
                // machine is another writer's (a second copy with its own record, or another
                // program), not this scaler's earlier attempt.
                let why = format!(
                    "another writer owns machines in pool {pool} under owner {owner} on {kind}: the create of {name}, a name this record ({store}) had never asked for before, was answered with machine {id}, made by an earlier create that was not this scaler's. It is not recorded as this pool's, and nothing more is created or deleted for {key} until you act: run one orca-pool per kind, owner and pool (a second copy needs its own --owner; replicas share PostgreSQL with --store postgres://...), then, with the other writer stopped, run once with --unknown adopt to take its machines into this record, or --unknown delete to delete them",
                    pool = key.pool,
                    owner = if key.owner.is_empty() { "-" } else { &key.owner },
                    kind = key.kind,
                    store = s.store.describe(),
                    id = m.id,
                );
                // Kept until written: should the write fail (or be cut off), the next pass writes it
                // before it reads the record's creating name as this record's.
                s.unrecorded.push(Unrecorded {
                    key: key.clone(),
                    name: name.clone(),
                    id: m.id.clone(),
                    why: why.clone(),
                });
                s.record.entries.remove(&name);
                s.record.conflict = Some(why.clone());
                s.commit(vec![Event::Conflict {
                    name: name.clone(),
                    id: m.id.clone(),
                    why: why.clone(),
                }])
                .await?;
                s.unrecorded
                    .retain(|u| !(u.key == *key && u.name == name && u.id == m.id));
                s.actions.push(Action::Conflict {
                    name,
                    id: m.id,
                    why: why.clone(),
                });
                if s.conflict.is_none() {
                    s.conflict = Some(why);
                }
                return Ok(());
            }
            Ok(Created::Adopted(m)) => Ok((m, true)),
            Ok(Created::NoStock { message, .. }) => Err(Error::no_stock(
                &offering.machine_type,
                &offering.location,
                message,
            )),
            Err(e) => Err(e),
        };
        match outcome {
            Ok((m, adopted)) => {
                if let Some(e) = s.record.entries.get_mut(&name) {
                    e.phase = Phase::Live;
                    e.id = Some(m.id.clone());
                    e.created_at = m.created_at;
                    e.changed_at = now;
                    e.note = String::new();
                }
                s.commit(vec![Event::Live {
                    name: name.clone(),
                    id: m.id.clone(),
                    how: if adopted {
                        "created (adopted from an earlier attempt)".into()
                    } else {
                        "created".into()
                    },
                }])
                .await?;
                s.made += 1;
                s.actions.push(Action::Created {
                    name,
                    id: m.id,
                    offering: offering.to_string(),
                    adopted,
                });
                return Ok(());
            }
            Err(Error::NoStock { message, .. }) => {
                let until = now
                    + chrono::Duration::from_std(settings.cooldown)
                        .unwrap_or(chrono::Duration::zero());
                if let Some(e) = s.record.entries.get_mut(&name) {
                    e.phase = Phase::Retired;
                    e.changed_at = now;
                    e.note = format!("no stock: {message}");
                }
                s.record.cooling.insert(offering.to_string(), until);
                s.commit(vec![
                    Event::Retired {
                        name: name.clone(),
                        why: format!("no stock of {offering}: {message}"),
                    },
                    Event::Cooling {
                        offering: offering.to_string(),
                        until,
                    },
                ])
                .await?;
                s.actions.push(Action::NoStock {
                    offering: offering.to_string(),
                    until,
                });
                // The next offering, with a new name.
            }
            Err(err) => {
                let gave_up = refused(&err);
                if let Some(e) = s.record.entries.get_mut(&name) {
                    if gave_up {
                        e.phase = Phase::Retired;
                        e.changed_at = now;
                    }
                    e.note = format!("create failed: {err}");
                }
                s.commit(vec![if gave_up {
                    Event::Retired {
                        name: name.clone(),
                        why: format!("refused: {err}"),
                    }
                } else {
                    Event::Failed {
                        name: name.clone(),
                        error: err.to_string(),
                    }
                }])
                .await?;
                if err.kind() == ErrorKind::Throttled {
                    s.throttled = true;
                }
                s.actions.push(Action::Failed {
                    operation: "create".into(),
                    doing: format!(
                        "create {name} from {offering}{}",
                        if gave_up {
                            " (refused: the name is given up)"
                        } else {
                            " (the name stays recorded; the next pass adopts or retries it)"
                        }
                    ),
                    error: err.to_string(),
                });
                return Ok(());
            }
        }
    }
}
