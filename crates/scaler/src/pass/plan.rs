//! Planning a pass: which serving machines are surplus, which recorded creates are retried, waited
//! for or given up, and which offerings rest.

use orca::{Machine, Status};

use super::act::DeleteJob;
use super::clean::CleanJob;
use super::reconcile::{offering_of, Found};
use super::{humantime, since, ts, PassCtx};
use crate::record::{Event, Phase, Record};
use crate::report::Action;
use crate::Settings;

/// Deletes the machines counted beyond `size`: not serving first, then still starting, then newest
/// first by the cloud's creation time (never by their names).
pub(super) fn surplus(record: &Record, found: &mut Found, size: usize) {
    let serving = found.counted.len();
    if serving <= size {
        return;
    }
    let mut victims = found.counted.clone();
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
        found.deletes.push(DeleteJob {
            name: m.name.clone(),
            id: m.id.clone(),
            offering: offering_of(&m),
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

/// The recorded creates not seen yet, oldest first: the first `missing` are retried by name (the
/// driver adopts what an earlier attempt made); the others are waited for, and given up once they
/// have not shown up for the settle time, with what their creates may have left (a create whose
/// answer was lost or failed may have made pieces no listing shows) removed by name. Returns the
/// names to retry.
pub(super) fn pending(
    record: &mut Record,
    found: &mut Found,
    missing: usize,
    cx: PassCtx<'_>,
    actions: &mut Vec<Action>,
) -> Vec<String> {
    let mut pending = std::mem::take(&mut found.pending);
    pending.sort();
    let mut retries = Vec::new();
    for (i, (at, name)) in pending.into_iter().enumerate() {
        if i < missing {
            retries.push(name);
        } else if since(cx.now, at) >= cx.settings.settle {
            if let Some(e) = record.entries.get_mut(&name) {
                e.phase = Phase::Retired;
                e.changed_at = cx.now;
                e.note = "not needed, and never seen".into();
                e.leftovers = true;
            }
            let why = format!(
                "recorded {} ago, never seen, and no longer needed",
                humantime(since(cx.now, at))
            );
            found.cleans.push(CleanJob {
                name: name.clone(),
                why: format!("given up: {why}; its create may have left pieces"),
            });
            found.events.push(Event::Retired {
                name: name.clone(),
                why: why.clone(),
            });
            actions.push(Action::Retired { name, why });
        } else {
            actions.push(Action::Waiting {
                name,
                why: "its create was recorded and may still show up; not needed now".into(),
            });
        }
    }
    retries
}

/// Says which offerings rest after no stock or a refusal, for a pass that creates.
pub(super) fn resting(record: &Record, settings: &Settings, actions: &mut Vec<Action>) {
    for o in &settings.offerings {
        if let Some(until) = record.cooling.get(&o.to_string()) {
            actions.push(Action::Skipped {
                offering: o.to_string(),
                reason: format!(
                    "no stock or a refusal of its create lately; resting until {}",
                    ts(*until)
                ),
            });
        }
    }
}
