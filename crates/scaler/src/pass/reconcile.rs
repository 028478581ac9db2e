//! Reconciling the record with the cloud's listing: which machines count toward the size, which are
//! to be deleted and why, which recorded names were found in the cloud, and which are gone.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use orca::{Machine, Status, Timestamp};

use super::act::DeleteJob;
use super::clean::CleanJob;
use super::{since, ts, unhealthy_from, PassCtx};
use crate::record::{Entry, Event, Phase, Record};
use crate::report::Action;
use crate::{Offering, Unknown};

/// What reconciling found: the events to write with the record, the machines counted toward the
/// size (with whether each serves now), the deletes to make, and the recorded creates not seen yet.
#[derive(Default)]
pub(super) struct Found {
    pub events: Vec<Event>,
    pub counted: Vec<(Machine, bool)>,
    pub deletes: Vec<DeleteJob>,
    /// Names given up whose creates may have left pieces: removed by name before they are pruned.
    pub cleans: Vec<CleanJob>,
    /// Names recorded as creating that the listing does not show, with when they were recorded.
    pub pending: Vec<(Timestamp, String)>,
}

pub(super) fn offering_of(m: &Machine) -> Offering {
    Offering {
        machine_type: m.machine_type.clone(),
        location: m.location.clone(),
    }
}

/// Machine `m` of entry `e`: counted (serving, or not serving within the grace), or deleted and
/// replaced once it has not served for longer than the grace. A machine starting serves for the
/// boot grace from its creation (when the cloud reports it); one starting after that (never done
/// booting, or started again long after it was made) has the grace, from when it was first seen so.
pub(super) fn health(e: &mut Entry, m: &Machine, cx: PassCtx<'_>, found: &mut Found) {
    let made = m.created_at.or(e.created_at);
    let booted_long_ago = made.is_some_and(|t| since(cx.now, t) >= cx.settings.boot_grace);
    match m.status {
        Status::Starting if booted_long_ago => {
            let from = e.unhealthy_since.unwrap_or(cx.now);
            not_serving(e, m, from, cx, found);
        }
        Status::Running | Status::Starting => {
            if e.unhealthy_since.take().is_some() {
                found.events.push(Event::Live {
                    name: e.name.clone(),
                    id: m.id.clone(),
                    how: format!("{} again", m.status),
                });
            }
            found.counted.push((m.clone(), true));
        }
        Status::Deleting => {}
        Status::Stopped | Status::Stopping | Status::Unknown => {
            let from = unhealthy_from(m, e, cx.now);
            not_serving(e, m, from, cx, found);
        }
    }
}

/// Machine `m` of entry `e`, not serving since `from`: counted within the grace, else deleted and
/// replaced.
fn not_serving(e: &mut Entry, m: &Machine, from: Timestamp, cx: PassCtx<'_>, found: &mut Found) {
    if e.unhealthy_since != Some(from) {
        e.unhealthy_since = Some(from);
        found.events.push(Event::Unhealthy {
            name: e.name.clone(),
            since: from,
        });
    }
    let grace = cx.settings.grace;
    if since(cx.now, from) >= grace {
        found.deletes.push(unhealthy_delete(e, m, from, grace));
    } else {
        found.counted.push((m.clone(), false));
    }
}

/// The delete of machine `m` (entry `e`), not serving since `from`, longer than `grace`.
fn unhealthy_delete(e: &Entry, m: &Machine, from: Timestamp, grace: Duration) -> DeleteJob {
    DeleteJob {
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
    }
}

/// Reconciles each listed machine with the record's entry of its name.
pub(super) fn listed(
    record: &mut Record,
    listed: &[Machine],
    policy: Unknown,
    cx: PassCtx<'_>,
    found: &mut Found,
    actions: &mut Vec<Action>,
) {
    // The id of the machine each name stands for, once one was taken as the pool's.
    let mut seen_ids: BTreeMap<String, String> = BTreeMap::new();
    for m in listed {
        if policy == Unknown::Delete
            && m.status != Status::Deleting
            && record.other_writer(m).is_some()
        {
            // Another writer's machine, on the operator's word: deleted even where it carries a
            // name this record picked. The record's entry of that name stands for this record's
            // own machine (or its create), not this one, so the delete leaves it as it is.
            let mut d = unknown_delete(m, cx);
            d.duplicate = record.entries.contains_key(&m.name);
            found.deletes.push(d);
            continue;
        }
        let ours = m
            .labels
            .get(crate::WRITER_LABEL)
            .is_some_and(|w| *w == record.writer);
        let Some(e) = record.entries.get_mut(&m.name) else {
            if m.status != Status::Deleting {
                unknown(record, m, policy, cx, found, actions);
            }
            continue;
        };
        if let Some(first) = seen_ids.get(&m.name) {
            if m.status != Status::Deleting && e.id.as_deref() != Some(m.id.as_str()) {
                found.deletes.push(duplicate(m, first));
            }
            continue;
        }
        if m.status == Status::Deleting && e.phase != Phase::Live {
            continue;
        }
        match e.phase {
            Phase::Creating | Phase::Retired => {
                found_by_name(e, m, cx, found, actions);
                seen_ids.insert(m.name.clone(), m.id.clone());
                health(e, m, cx, found);
            }
            Phase::Live if e.id.as_deref() != Some(m.id.as_str()) => {
                // Another machine carries this name: the recorded one stays the pool's.
                if m.status != Status::Deleting {
                    found
                        .deletes
                        .push(duplicate(m, e.id.as_deref().unwrap_or_default()));
                }
            }
            Phase::Live => {
                if e.created_at.is_none() {
                    e.created_at = m.created_at;
                }
                seen_ids.insert(m.name.clone(), m.id.clone());
                health(e, m, cx, found);
            }
            // Not the machine this record deleted, and not made by this record (another writer's
            // label, or none): the name was taken again since. Deleting it as this record's
            // would delete what is not its own; it is a machine the record does not name.
            Phase::Deleting | Phase::Gone if e.id.as_deref() != Some(m.id.as_str()) && !ours => {
                if m.status != Status::Deleting {
                    unknown(record, m, policy, cx, found, actions);
                }
            }
            Phase::Deleting | Phase::Gone => found.deletes.push(DeleteJob {
                name: m.name.clone(),
                id: m.id.clone(),
                offering: offering_of(m),
                cause: "recorded",
                why: if e.phase == Phase::Deleting {
                    format!("its delete was recorded and not confirmed ({})", e.note)
                } else {
                    "deleted before and still listed".into()
                },
                duplicate: false,
                counted: false,
            }),
        }
    }
}

/// A second machine named as machine `first` of the pool: deleted, the record's entry kept.
fn duplicate(m: &Machine, first: &str) -> DeleteJob {
    DeleteJob {
        name: m.name.clone(),
        id: m.id.clone(),
        offering: offering_of(m),
        cause: "duplicate",
        why: format!("a second machine named {} (the pool's is {first})", m.name),
        duplicate: true,
        counted: false,
    }
}

/// A recorded name (creating, or retired) found in the cloud: the machine is this pool's.
fn found_by_name(
    e: &mut Entry,
    m: &Machine,
    cx: PassCtx<'_>,
    found: &mut Found,
    actions: &mut Vec<Action>,
) {
    let was = e.phase;
    e.phase = Phase::Live;
    e.id = Some(m.id.clone());
    e.created_at = m.created_at;
    e.changed_at = cx.now;
    e.note = format!("found by name while {}", was.as_str());
    found.events.push(Event::Live {
        name: m.name.clone(),
        id: m.id.clone(),
        how: format!("found by name while {}", was.as_str()),
    });
    actions.push(Action::Adopted {
        name: m.name.clone(),
        id: m.id.clone(),
        why: format!(
            "its name was recorded ({}) before its create; found in the cloud",
            was.as_str()
        ),
    });
}

/// The delete of machine `m`, which is not the record's, as an unknown machine.
fn unknown_delete(m: &Machine, cx: PassCtx<'_>) -> DeleteJob {
    DeleteJob {
        name: m.name.clone(),
        id: m.id.clone(),
        offering: offering_of(m),
        cause: "unknown",
        why: if cx.settings.unknown == Unknown::Delete {
            format!(
                "not in the record of {}; deleted as --unknown delete says",
                cx.key
            )
        } else {
            format!(
                "not in the record of {}, which names every machine it ever meant to make",
                cx.key
            )
        },
        duplicate: false,
        counted: false,
    }
}

/// A listed machine the record does not name (or names only as a machine it deleted, which this
/// one is not): adopted, or deleted, as `policy` says.
fn unknown(
    record: &mut Record,
    m: &Machine,
    policy: Unknown,
    cx: PassCtx<'_>,
    found: &mut Found,
    actions: &mut Vec<Action>,
) {
    if policy != Unknown::Adopt {
        found.deletes.push(unknown_delete(m, cx));
        return;
    }
    let before = record.entries.get(&m.name);
    let why = match before {
        None => "not in the record; adopted as --unknown adopt says".to_string(),
        Some(e) => format!(
            "its name was this record's machine {}, now {}, and this is another machine; adopted as --unknown adopt says",
            e.id.as_deref().unwrap_or("-"),
            e.phase.as_str()
        ),
    };
    let mut e = Entry {
        name: m.name.clone(),
        offering: offering_of(m),
        phase: Phase::Live,
        id: Some(m.id.clone()),
        intent_at: cx.now,
        created_at: m.created_at,
        unhealthy_since: None,
        changed_at: cx.now,
        note: "adopted on the operator's word (--unknown adopt)".into(),
        // What the earlier machine of this name may have left (its delete left pieces, or its
        // outcome was never written) is removed by name once no machine of the name stands.
        leftovers: before.is_some_and(|e| e.leftovers || e.phase == Phase::Deleting),
    };
    if before.is_some() {
        // The delete planned for the earlier machine of this name must leave the entry, now this
        // machine's, as it is.
        for d in found.deletes.iter_mut().filter(|d| d.name == m.name) {
            d.duplicate = true;
        }
    }
    found.events.push(Event::Live {
        name: m.name.clone(),
        id: m.id.clone(),
        how: "adopted on the operator's word".into(),
    });
    actions.push(Action::Adopted {
        name: m.name.clone(),
        id: m.id.clone(),
        why,
    });
    health(&mut e, m, cx, found);
    record.entries.insert(m.name.clone(), e);
}

/// Entries the listing does not show: a live machine read on its own before it is believed gone, a
/// recorded delete confirmed, a recorded create waited for or retried, what a create left cleaned
/// up, old names pruned.
pub(super) async fn absent(
    record: &mut Record,
    listed: &[Machine],
    cx: PassCtx<'_>,
    found: &mut Found,
    actions: &mut Vec<Action>,
) {
    let listed_names: BTreeSet<&str> = listed.iter().map(|m| m.name.as_str()).collect();
    let absent: Vec<String> = record
        .entries
        .keys()
        .filter(|n| !listed_names.contains(n.as_str()))
        .cloned()
        .collect();
    let mut pruned = Vec::new();
    for name in absent {
        let Some(e) = record.entries.get_mut(&name) else {
            continue;
        };
        match e.phase {
            Phase::Live => unlisted_live(e, cx, found, actions).await,
            Phase::Deleting => {
                e.phase = Phase::Gone;
                e.changed_at = cx.now;
                e.note = format!("delete confirmed by the listing ({})", e.note);
                // A delete that answered done writes the entry gone at once; one still deleting
                // here had no clean outcome written (it failed, its answer or its write was lost,
                // the process stopped): it may have removed the machine and left pieces beside
                // it that no listing shows. They are removed by name, as for a create given up
                // unseen, and the mark keeps the name until that succeeds.
                e.leftovers = true;
                found.events.push(Event::Gone {
                    name: name.clone(),
                    why: "its recorded delete is done: not listed".into(),
                });
                found.cleans.push(CleanJob {
                    name: name.clone(),
                    why: "its recorded delete had no outcome written; what it may have left is not removed yet".into(),
                });
            }
            Phase::Creating => found.pending.push((e.intent_at, name.clone())),
            // Never pruned before what its creates left is removed.
            Phase::Retired | Phase::Gone if e.leftovers => found.cleans.push(CleanJob {
                name: name.clone(),
                why: format!(
                    "{}; what its create may have left is not removed yet",
                    e.phase.as_str()
                ),
            }),
            Phase::Retired | Phase::Gone => {
                if since(cx.now, e.changed_at) >= cx.settings.retention {
                    pruned.push(name.clone());
                }
            }
        }
    }
    if !pruned.is_empty() {
        for n in &pruned {
            record.entries.remove(n);
        }
        found.events.push(Event::Pruned { names: pruned });
    }
}

/// A live entry the listing does not show. A listing can lag behind: the machine is read on its own
/// before it is believed gone. Only this pool's machine of the entry's name is the entry's: where a
/// cloud's ids are names (Azure, Compute Engine), a gone machine's id may name another pool's
/// machine of the same owner, which this pool must neither count nor delete.
async fn unlisted_live(
    e: &mut Entry,
    cx: PassCtx<'_>,
    found: &mut Found,
    actions: &mut Vec<Action>,
) {
    let name = e.name.clone();
    let id = e.id.clone().unwrap_or_default();
    match cx.p.machine(&id).await {
        Ok(Some(m))
            if m.status != Status::Deleting && m.pool == cx.settings.pool && m.name == name =>
        {
            health(e, &m, cx, found)
        }
        Ok(_) => {
            e.phase = Phase::Gone;
            e.changed_at = cx.now;
            e.note = "no longer in the cloud".into();
            found.events.push(Event::Gone {
                name: name.clone(),
                why: "no longer in the cloud".into(),
            });
            actions.push(Action::Gone {
                name,
                id,
                why:
                    "no longer in the cloud (deleted outside orca-pool, or by the cloud); replaced"
                        .into(),
            });
        }
        Err(err) => {
            // Count it: better one short-lived surplus than a machine made twice.
            let mut m = Machine::new(id.clone(), name.clone());
            m.status = Status::Running;
            m.created_at = e.created_at;
            found.counted.push((m, true));
            actions.push(Action::Failed {
                operation: "read".into(),
                doing: format!("read {name} ({id}), which the listing did not show"),
                error: err.to_string(),
            });
        }
    }
}
