//! One pass of a leader, a phase a function: load the record (writing first a conflict an earlier
//! pass could not write), list the pool, hold on a conflict or a new record, reconcile the record
//! with the listing ([`reconcile`]), plan what to delete and create ([`plan`]), write that, then act,
//! a bounded number at a time ([`act`], [`create`]), writing every intent before its call and every
//! outcome after.

use orca::machine::since;
use orca::{Machine, Provider, Status, Timestamp};

use crate::record::{Entry, Event, Key, Phase, Record};
use crate::report::{Action, PassReport};
use crate::store::{Store, StoreError};
use crate::{machine_name, Settings, Unknown};

mod act;
mod clean;
pub(crate) mod concurrency;
mod create;
mod plan;
mod reconcile;

use reconcile::Found;

/// What one pass works with: its settings, the provider, the time it started and the record's key.
#[derive(Clone, Copy)]
pub(crate) struct PassCtx<'a> {
    pub settings: &'a Settings,
    pub p: &'a dyn Provider,
    pub now: Timestamp,
    pub key: &'a Key,
    /// How many calls may run at once.
    pub concurrency: &'a concurrency::Concurrency,
}

/// A conflict not yet written to the store.
#[derive(Debug, Clone)]
pub(crate) struct Unrecorded {
    pub key: Key,
    pub name: String,
    pub id: String,
    pub why: String,
}

/// The pass of a leader. Returns the record as it left it (or `None` when it held).
pub(crate) async fn run(
    store: &mut dyn Store,
    unrecorded: &mut Vec<Unrecorded>,
    cx: PassCtx<'_>,
    report: &mut PassReport,
) -> Result<Option<Record>, StoreError> {
    let mut record = load(store, unrecorded, cx.key).await?;
    let listed = match cx.p.machines(&cx.key.pool).await {
        Ok(v) => v,
        Err(e) => {
            report.actions.push(Action::Failed {
                operation: "list".into(),
                doing: format!("list pool {}", cx.key.pool),
                error: e.to_string(),
            });
            return Ok(Some(record));
        }
    };
    report.listed = listed.len();
    let mut events = Vec::new();
    advance_next(&mut record, &listed, cx.key);
    if held_by_conflict(&mut record, &listed, cx, &mut events, report) {
        return Ok(Some(record));
    }
    if let Some(conflicts) = other_writers(&mut record, &listed, cx, &*store, report) {
        store.commit(&record, &conflicts).await?;
        return Ok(Some(record));
    }
    let Some(policy) = establish(&mut record, &listed, cx, &*store, &mut events, report) else {
        return Ok(None);
    };
    let mut found = Found {
        events,
        ..Found::default()
    };
    reconcile::listed(
        &mut record,
        &listed,
        policy,
        cx,
        &mut found,
        &mut report.actions,
    );
    reconcile::absent(&mut record, &listed, cx, &mut found, &mut report.actions).await;
    record.cooling.retain(|_, until| *until > cx.now);
    let serving = found.counted.len();
    // What the listing counted, reported even if a record write stops the pass from here on.
    report.serving = serving;
    plan::surplus(&record, &mut found, cx.settings.size);
    let missing = cx.settings.size.saturating_sub(serving);
    let retries = plan::pending(&mut record, &mut found, missing, cx, &mut report.actions);
    let new = missing - retries.len();
    if new > 0 {
        plan::resting(&record, cx.settings, &mut report.actions);
    }
    if !found.events.is_empty() {
        store.commit(&record, &found.events).await?;
    }
    let jobs = act::jobs(found.deletes, found.cleans, retries, new);
    act::act(store, unrecorded, record, jobs, serving, cx, report).await
}

/// The record of `key` (a new one when there is none), with the conflicts met in an earlier pass
/// whose write failed written first: their names may still be recorded as creating, and the other
/// writer's machine must not be found by them as this record's.
async fn load(
    store: &mut dyn Store,
    unrecorded: &mut Vec<Unrecorded>,
    key: &Key,
) -> Result<Record, StoreError> {
    let mut record = store
        .load(key)
        .await?
        .unwrap_or_else(|| Record::new(key.clone()));
    record.ensure_writer();
    if !unrecorded.iter().any(|u| u.key == *key) {
        return Ok(record);
    }
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
    Ok(record)
}

/// Moves the record's next name past every name of this pool's form in the record or the cloud
/// (machines adopted on the operator's word, or made by an earlier record, carry such names), so
/// that a create never picks the name of a machine that exists.
fn advance_next(record: &mut Record, listed: &[Machine], key: &Key) {
    if let Some(n) = listed
        .iter()
        .map(|m| m.name.as_str())
        .chain(record.entries.keys().map(String::as_str))
        .filter_map(|n| number_of(key, n))
        .max()
    {
        record.next = record.next.max(n.saturating_add(1));
    }
}

/// Whether the pass holds because another writer was met in an earlier pass and the operator has not
/// given their word; with the word (`--unknown adopt` or `delete`), settles the conflict.
fn held_by_conflict(
    record: &mut Record,
    listed: &[Machine],
    cx: PassCtx<'_>,
    events: &mut Vec<Event>,
    report: &mut PassReport,
) -> bool {
    let Some(conflict) = record.conflict.clone() else {
        return false;
    };
    let unknown = cx.settings.unknown;
    if unknown == Unknown::Ask {
        report.serving = serving_of(record, listed, cx.now, cx.settings.grace);
        report.stopped = Some(format!("held, as in an earlier pass: {conflict}"));
        return true;
    }
    record.conflict = None;
    let (flag, done) = if unknown == Unknown::Adopt {
        ("adopt", "adopted")
    } else {
        ("delete", "deleted")
    };
    events.push(Event::Settled {
        how: format!(
            "the operator's word (--unknown {flag}): the pool's machines this record does not name are {done}"
        ),
    });
    false
}

/// Machines of another writer in the listing (another record's writer label; see
/// [`Record::other_writer`]): on an established record, without the operator's word, a conflict
/// that holds the pool. Returns the events to write (the record then names the conflict, so later
/// passes hold too), or `None` when there is none.
fn other_writers(
    record: &mut Record,
    listed: &[Machine],
    cx: PassCtx<'_>,
    store: &dyn Store,
    report: &mut PassReport,
) -> Option<Vec<Event>> {
    if !record.established || cx.settings.unknown != Unknown::Ask {
        return None;
    }
    let theirs: Vec<(&Machine, &str)> = listed
        .iter()
        .filter(|m| m.status != Status::Deleting)
        .filter_map(|m| record.other_writer(m).map(|w| (m, w)))
        .collect();
    if theirs.is_empty() {
        return None;
    }
    let key = cx.key;
    let mut writers: Vec<&str> = theirs.iter().map(|(_, w)| *w).collect();
    writers.sort_unstable();
    writers.dedup();
    let why = format!(
        "another writer owns machines in pool {pool} under owner {owner} on {kind}: {names} carry the label {label} of another record ({writers}), not this record's ({store}, {ours}). They are neither adopted nor deleted, and nothing more is created or deleted for {key} until you act: run one orca-pool per kind, owner and pool (a second copy needs its own --owner; replicas share PostgreSQL with --store postgres://...), then, with the other writer stopped, run once with --unknown adopt to take its machines into this record, or --unknown delete to delete them",
        pool = key.pool,
        owner = if key.owner.is_empty() { "-" } else { &key.owner },
        kind = key.kind,
        names = theirs
            .iter()
            .map(|(m, _)| format!("{} ({})", m.name, m.id))
            .collect::<Vec<_>>()
            .join(", "),
        label = crate::WRITER_LABEL,
        writers = writers.join(", "),
        store = store.describe(),
        ours = record.writer,
    );
    let mut events = Vec::new();
    for (m, _) in &theirs {
        // A name this record picked and recorded as creating, made by the other writer: not this
        // record's to find by name.
        if record
            .entries
            .get(&m.name)
            .is_some_and(|e| e.phase == Phase::Creating)
        {
            record.entries.remove(&m.name);
        }
        events.push(Event::Conflict {
            name: m.name.clone(),
            id: m.id.clone(),
            why: why.clone(),
        });
        report.actions.push(Action::Conflict {
            name: m.name.clone(),
            id: m.id.clone(),
            why: why.clone(),
        });
    }
    record.conflict = Some(why.clone());
    report.serving = serving_of(record, listed, cx.now, cx.settings.grace);
    report.stopped = Some(why);
    Some(events)
}

/// What to do with machines the record does not name, or `None` when the pass holds: a new record
/// that finds such machines touches nothing until the operator's word.
fn establish(
    record: &mut Record,
    listed: &[Machine],
    cx: PassCtx<'_>,
    store: &dyn Store,
    events: &mut Vec<Event>,
    report: &mut PassReport,
) -> Option<Unknown> {
    let unknown: Vec<&Machine> = listed
        .iter()
        .filter(|m| m.status != Status::Deleting && !record.entries.contains_key(&m.name))
        .collect();
    let policy = match (record.established, cx.settings.unknown) {
        (_, Unknown::Adopt) => Unknown::Adopt,
        (_, Unknown::Delete) => Unknown::Delete,
        (false, Unknown::Ask) => Unknown::Ask,
        (true, Unknown::Ask) => Unknown::Delete,
    };
    if record.established {
        return lost_entries(record, &unknown, cx, store, report).then_some(policy);
    }
    if !unknown.is_empty() && policy == Unknown::Ask {
        let mut why = format!(
            "the record of {} ({}) is new and names none of them, so they are neither adopted nor deleted, and nothing is created until you decide: if they are this pool's, run with --unknown adopt; to delete them, --unknown delete",
            cx.key,
            store.describe()
        );
        for n in store.notes() {
            why.push_str("; ");
            why.push_str(&n);
        }
        held(report, unknown.iter().copied(), why);
        return None;
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
    Some(policy)
}

/// Whether an established record may go on with the machines it does not name (`unknown`): not
/// when some carry its own writer id while the operator gave no word (`--unknown ask`). Only this
/// record labels machines with its id, and it writes an intent before each create, so such a
/// machine shows that the record lost entries since it made it (its journal lost, an older copy
/// restored): they are its own machines, and deleting them as strangers would empty the pool it
/// keeps. The pass holds, saying so.
fn lost_entries(
    record: &Record,
    unknown: &[&Machine],
    cx: PassCtx<'_>,
    store: &dyn Store,
    report: &mut PassReport,
) -> bool {
    let own: Vec<&&Machine> = unknown
        .iter()
        .filter(|m| m.labels.get(crate::WRITER_LABEL) == Some(&record.writer))
        .collect();
    if own.is_empty() || cx.settings.unknown != Unknown::Ask {
        return true;
    }
    let why = format!(
        "these machines carry the writer id {} of the record of {} ({}), which does not name them: the record has lost entries since it made them (its journal lost, or an older copy restored), so nothing is deleted or created until you decide: to take them back, run with --unknown adopt; to delete them, --unknown delete",
        record.writer,
        cx.key,
        store.describe()
    );
    held(report, own.iter().copied().copied(), why);
    false
}

/// Reports a pass that holds, naming `machines` and why.
fn held<'m>(report: &mut PassReport, machines: impl Iterator<Item = &'m Machine>, why: String) {
    report.actions.push(Action::Held {
        machines: machines.map(|m| format!("{} ({})", m.name, m.id)).collect(),
        why,
    });
}

/// The number `n` of `name` when it is `machine_name(key, n)`.
fn number_of(key: &Key, name: &str) -> Option<u64> {
    let prefix = machine_name(key, 0);
    let prefix = prefix.strip_suffix('0')?;
    let digits = name.strip_prefix(prefix)?;
    let n: u64 = digits.parse().ok()?;
    (machine_name(key, n) == name).then_some(n)
}

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

/// How many listed machines of `record` serve now (running, starting, or stopped or unknown within
/// the grace), as a pass that acts would count them; for a pass that holds.
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

fn ts(t: Timestamp) -> String {
    t.format("%Y-%m-%dT%H:%M:%SZ").to_string()
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
