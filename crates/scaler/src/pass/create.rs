//! One create job: pick a name (a recorded one to retry, or a new one from the first offering not
//! resting, recorded before the call), ask the cloud, and write what it answered: the machine, no
//! stock (the next offering is tried with a new name), another writer's machine (a conflict that
//! holds the pool), or why not. A name given up after a create that may have left pieces (its
//! answer is not `made_nothing`) is cleaned up by name ([`clean`](super::clean)) before the job
//! goes on.

use orca::{Created, Error, ErrorKind, Machine, MachineSpec};
use tokio::sync::Mutex;

use super::act::Shared;
use super::clean::{self, CleanJob};
use super::concurrency::Kind;
use super::{PassCtx, Unrecorded};
use crate::record::{Entry, Event, Phase};
use crate::report::Action;
use crate::store::StoreError;
use crate::{machine_name, Offering, WRITER_LABEL};

/// A name to create: the name, its offering, and whether this record picked it just now (it had
/// never asked the cloud for it before).
struct Picked {
    name: String,
    offering: Offering,
    fresh: bool,
    /// The record's writer id, a label of the machine.
    writer: String,
}

impl Picked {
    /// Whether machine `m`, answered as made by an earlier create, is another writer's: it carries
    /// another record's writer label, or (made before writer labels, or by another program) no
    /// label, for a name this record had never asked for before.
    fn theirs(&self, m: &Machine) -> bool {
        match m.labels.get(WRITER_LABEL) {
            Some(w) => *w != self.writer,
            None => self.fresh,
        }
    }
}

/// What a create job does after an answer.
enum Then {
    Done,
    /// No stock, or the offering refused: the next offering, with a new name.
    NextOffering,
}

/// Whether a create's error refuses the offering itself: its machine type or location unknown to
/// the cloud, or a refusal that stands for every create of it until someone acts (over quota, no
/// permission, credentials or settings refused). The offering rests for the cool-down, so that
/// passes do not spend a name and a create on it for every missing machine; the next offering may
/// do (another type's quota, another region's).
fn offering_refused(e: &Error) -> bool {
    match e {
        Error::InvalidSpec { field, .. } => field == "machine_type" || field == "location",
        _ => matches!(
            e.kind(),
            ErrorKind::Quota
                | ErrorKind::PermissionDenied
                | ErrorKind::Unauthenticated
                | ErrorKind::InvalidSettings
        ),
    }
}

pub(super) async fn create_job(
    sh: &Mutex<Shared<'_>>,
    cx: PassCtx<'_>,
    mut retry: Option<String>,
) -> Result<(), StoreError> {
    loop {
        let picked = {
            let mut s = sh.lock().await;
            if !s.may_start(Kind::Create, "-", "a create") {
                return Ok(());
            }
            pick(&mut s, cx, retry.take()).await?
        };
        let Some(picked) = picked else {
            return Ok(());
        };
        let o = &picked.offering;
        let spec = MachineSpec::new(&picked.name, &o.machine_type, &o.location, &cx.key.pool)
            .with_user_data(cx.settings.user_data.clone())
            .with_label(WRITER_LABEL, &picked.writer);
        let r = cx.p.create(&spec).await;
        let name = picked.name.clone();
        let (then, clean) = {
            let mut s = sh.lock().await;
            let then = answered(&mut s, cx, picked, r).await?;
            (then, CleanJob::due(&s, &name))
        };
        if let Some(c) = clean {
            clean::clean_job(sh, cx, c).await?;
        }
        match then {
            Then::Done => return Ok(()),
            Then::NextOffering => {}
        }
    }
}

/// The recorded name `retry` (when the record still has it and its offering does not rest), else a
/// new name from the first offering not resting and not already found without stock (or refused) in
/// this pass, recorded before its call; `None` when there is none.
async fn pick(
    s: &mut Shared<'_>,
    cx: PassCtx<'_>,
    retry: Option<String>,
) -> Result<Option<Picked>, StoreError> {
    if let Some(e) = retry.and_then(|name| s.record.entries.get(&name)) {
        // A kept name of an offering that rests (its create refused, a launch perhaps made) waits
        // for the rest to end, as a new name of it would.
        let rests = s
            .record
            .cooling
            .get(&e.offering.to_string())
            .is_some_and(|until| *until > cx.now);
        if !rests {
            return Ok(Some(Picked {
                name: e.name.clone(),
                offering: e.offering.clone(),
                fresh: false,
                writer: s.record.writer.clone(),
            }));
        }
    }
    let usable = cx.settings.offerings.iter().find(|o| {
        let o = o.to_string();
        !s.spent.contains(&o)
            && s.record
                .cooling
                .get(&o)
                .is_none_or(|until| *until <= cx.now)
    });
    let Some(o) = usable.cloned() else {
        s.no_offering += 1;
        return Ok(None);
    };
    // Never a name the record holds (in any phase).
    while s
        .record
        .entries
        .contains_key(&machine_name(cx.key, s.record.next))
    {
        s.record.next += 1;
    }
    let n = s.record.next;
    s.record.next += 1;
    let name = machine_name(cx.key, n);
    s.record.entries.insert(
        name.clone(),
        Entry {
            name: name.clone(),
            offering: o.clone(),
            phase: Phase::Creating,
            id: None,
            intent_at: cx.now,
            created_at: None,
            unhealthy_since: None,
            changed_at: cx.now,
            note: String::new(),
            leftovers: false,
        },
    );
    s.commit(vec![Event::IntendCreate {
        name: name.clone(),
        offering: o.to_string(),
    }])
    .await?;
    Ok(Some(Picked {
        name,
        offering: o,
        fresh: true,
        writer: s.record.writer.clone(),
    }))
}

/// Writes and reports the cloud's answer `r` to the create of `picked`.
async fn answered(
    s: &mut Shared<'_>,
    cx: PassCtx<'_>,
    picked: Picked,
    r: orca::Result<Created>,
) -> Result<Then, StoreError> {
    let name = &picked.name;
    let outcome = match r {
        Ok(Created::Machine(m)) | Ok(Created::Adopted(m)) if m.name != *name => {
            // A driver that answers another machine than the one asked for: never counted.
            Err(Error::other(format!(
                "the driver answered machine {} ({}) for a create of {name}",
                m.name, m.id
            )))
        }
        Ok(Created::Machine(m)) => Ok((m, false)),
        Ok(Created::Adopted(m)) if picked.theirs(&m) => {
            // Not this scaler's earlier attempt: another writer's machine (a second copy with its
            // own record, or another program).
            conflict(s, cx, &picked, m).await?;
            return Ok(Then::Done);
        }
        Ok(Created::Adopted(m)) => Ok((m, true)),
        // Always an error: the no stock, keeping what its clean-up left so that the name is
        // marked and cleaned up by name before it is given up.
        Ok(no @ Created::NoStock { .. }) => no.into_result().map(|m| (m, false)),
        Err(e) => Err(e),
    };
    match outcome {
        Ok((m, adopted)) => made(s, cx, picked, m, adopted).await.map(|()| Then::Done),
        Err(err @ Error::NoStock { .. }) => no_stock(s, cx, picked, err)
            .await
            .map(|()| Then::NextOffering),
        Err(err) if offering_refused(&err) => {
            let offering = picked.offering.clone();
            failed(s, cx, picked, err).await?;
            rest(s, cx, &offering).await?;
            Ok(Then::NextOffering)
        }
        Err(err) => failed(s, cx, picked, err).await.map(|()| Then::Done),
    }
}

/// The machine is this pool's.
async fn made(
    s: &mut Shared<'_>,
    cx: PassCtx<'_>,
    picked: Picked,
    m: Machine,
    adopted: bool,
) -> Result<(), StoreError> {
    let name = picked.name;
    if let Some(e) = s.record.entries.get_mut(&name) {
        e.phase = Phase::Live;
        e.id = Some(m.id.clone());
        e.created_at = m.created_at;
        e.changed_at = cx.now;
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
        offering: picked.offering.to_string(),
        adopted,
    });
    Ok(())
}

/// Another writer's machine answered the create of a name this record picked: not recorded as this
/// pool's, and the pool is held until the operator's word.
async fn conflict(
    s: &mut Shared<'_>,
    cx: PassCtx<'_>,
    picked: &Picked,
    m: Machine,
) -> Result<(), StoreError> {
    let (key, name) = (cx.key, &picked.name);
    let why = format!(
        "another writer owns machines in pool {pool} under owner {owner} on {kind}: the create of {name} by this record ({store}) was answered with machine {id}, made by an earlier create that was not this scaler's (it carries another record's writer label, or none for a name this record had never asked for before). It is not recorded as this pool's, and nothing more is created or deleted for {key} until you act: run one orca-pool per kind, owner and pool (a second copy needs its own --owner; replicas share PostgreSQL with --store postgres://...), then, with the other writer stopped, run once with --unknown adopt to take its machines into this record, or --unknown delete to delete them",
        pool = key.pool,
        owner = if key.owner.is_empty() { "-" } else { &key.owner },
        kind = key.kind,
        store = s.store.describe(),
        id = m.id,
    );
    // Kept until written: should the write fail (or be cut off), the next pass writes it before it
    // reads the record's creating name as this record's.
    s.unrecorded.push(Unrecorded {
        key: key.clone(),
        name: name.clone(),
        id: m.id.clone(),
        why: why.clone(),
    });
    s.record.entries.remove(name);
    s.record.conflict = Some(why.clone());
    s.commit(vec![Event::Conflict {
        name: name.clone(),
        id: m.id.clone(),
        why: why.clone(),
    }])
    .await?;
    s.unrecorded
        .retain(|u| !(u.key == *key && u.name == *name && u.id == m.id));
    s.actions.push(Action::Conflict {
        name: name.clone(),
        id: m.id,
        why: why.clone(),
    });
    if s.conflict.is_none() {
        s.conflict = Some(why);
    }
    Ok(())
}

/// No stock of the offering: the name is retired and the offering rests for the cool-down. A
/// create that may have acted (its clean-up could not remove what it made) marks the name, to be
/// cleaned up by name before it is forgotten.
async fn no_stock(
    s: &mut Shared<'_>,
    cx: PassCtx<'_>,
    picked: Picked,
    err: Error,
) -> Result<(), StoreError> {
    let (name, offering) = (picked.name, picked.offering);
    let left = !err.made_nothing();
    let message = match err {
        Error::NoStock { message, .. } => message,
        other => other.to_string(),
    };
    let until = rest_until(cx);
    if let Some(e) = s.record.entries.get_mut(&name) {
        e.phase = Phase::Retired;
        e.changed_at = cx.now;
        e.note = format!("no stock: {message}");
        e.leftovers |= left;
    }
    s.record.cooling.insert(offering.to_string(), until);
    s.spent.insert(offering.to_string());
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
    Ok(())
}

/// The longest an offering rests: a cool-down longer than this (or than the clock can count) rests
/// it this long, about a century, rather than not at all, and stays a time both stores can hold.
const LONGEST_REST: chrono::Duration = chrono::Duration::days(36_525);

/// When an offering rested now may be tried again.
fn rest_until(cx: PassCtx<'_>) -> orca::Timestamp {
    let rest = chrono::Duration::from_std(cx.settings.cooldown)
        .map_or(LONGEST_REST, |d| d.min(LONGEST_REST));
    cx.now
        .checked_add_signed(rest)
        .unwrap_or(chrono::DateTime::<chrono::Utc>::MAX_UTC)
}

/// Rests `offering` for the cool-down after it refused a create.
async fn rest(s: &mut Shared<'_>, cx: PassCtx<'_>, offering: &Offering) -> Result<(), StoreError> {
    let until = rest_until(cx);
    s.record.cooling.insert(offering.to_string(), until);
    s.spent.insert(offering.to_string());
    s.commit(vec![Event::Cooling {
        offering: offering.to_string(),
        until,
    }])
    .await?;
    s.actions.push(Action::Skipped {
        offering: offering.to_string(),
        reason: format!("refused its create; it rests until {}", super::ts(until)),
    });
    Ok(())
}

/// Whether a failed create gives its name up: only a refusal that will stand (the spec, the settings,
/// the account, the name itself) and that made nothing. A passing refusal (throttled, busy, not found
/// yet) keeps the name, whatever the driver says it made: the next pass retries the same name, which
/// adopts what any attempt made, rather than a new name beside a machine the cloud may show late.
fn gives_up(err: &Error) -> bool {
    matches!(
        err.kind(),
        ErrorKind::InvalidSpec
            | ErrorKind::InvalidSettings
            | ErrorKind::Unsupported
            | ErrorKind::PermissionDenied
            | ErrorKind::Unauthenticated
            | ErrorKind::Quota
            | ErrorKind::AlreadyExists
            | ErrorKind::NotOwned
    ) && err.made_nothing()
}

/// The create failed: the name is given up when the cloud refused it for good (made nothing), else
/// kept for the next pass to adopt or retry.
async fn failed(
    s: &mut Shared<'_>,
    cx: PassCtx<'_>,
    picked: Picked,
    err: Error,
) -> Result<(), StoreError> {
    let (name, offering) = (picked.name, picked.offering);
    let gave_up = gives_up(&err);
    if let Some(e) = s.record.entries.get_mut(&name) {
        if gave_up {
            e.phase = Phase::Retired;
            e.changed_at = cx.now;
        }
        e.note = format!("create failed: {err}");
        // What it may have made is removed by name once the name is given up.
        e.leftovers |= !err.made_nothing();
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
    s.throttle(cx, Kind::Create, &err);
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
    Ok(())
}
