//! What the autoscaler remembers: one [`Record`] per [`Key`] (kind, owner, pool), holding every machine
//! name it ever meant to make, with the phase it is in.
//!
//! A name is written down ([`Phase::Creating`]) before the cloud is asked to make it, and a delete
//! ([`Phase::Deleting`]) before the cloud is asked to remove it; the outcome is written after. So a
//! record read after a crash at any point names every machine the scaler may have made.

use std::collections::BTreeMap;

use orca::Timestamp;
use serde::{Deserialize, Serialize};

use crate::Offering;

/// Whose record it is: the provider kind, the owner (the stack's id, empty for none) and the pool.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Key {
    /// The provider kind (`fake`, `hetzner`, ...).
    pub kind: String,
    /// The owner; empty for none.
    pub owner: String,
    /// The pool.
    pub pool: String,
}

impl Key {
    /// The key of `pool` for `kind` and `owner`.
    pub fn new(kind: impl Into<String>, owner: impl Into<String>, pool: impl Into<String>) -> Self {
        Key {
            kind: kind.into(),
            owner: owner.into(),
            pool: pool.into(),
        }
    }
}

impl std::fmt::Display for Key {
    /// `kind/owner/pool` (an empty owner shows as `-`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let owner = if self.owner.is_empty() {
            "-"
        } else {
            &self.owner
        };
        write!(f, "{}/{owner}/{}", self.kind, self.pool)
    }
}

orca::words! {
    /// Where a recorded machine name stands.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
    #[serde(rename_all = "snake_case")]
    pub enum Phase {
        /// The name and spec are recorded and the cloud is (or was) asked to make it; no machine confirmed.
        Creating = "creating",
        /// A machine of this name is this pool's (its id is known).
        Live = "live",
        /// The machine is to be deleted (recorded before the delete call).
        Deleting = "deleting",
        /// The create was answered "not made" (no stock, or refused), or the name was given up unseen;
        /// the name is kept so that a machine of this name showing up later is known, and for as long
        /// as what its creates may have left stands ([`Entry::leftovers`]).
        Retired = "retired",
        /// Deleted; the name is kept for a while so that a late listing that still shows it is understood.
        Gone = "gone",
    }
}

/// One machine name the scaler recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// The machine's name.
    pub name: String,
    /// What it is (or was to be) made of.
    pub offering: Offering,
    /// Where it stands.
    pub phase: Phase,
    /// The cloud's id, once known.
    pub id: Option<String>,
    /// When the name was recorded.
    pub intent_at: Timestamp,
    /// When the cloud made it, as the cloud says.
    pub created_at: Option<Timestamp>,
    /// Since when it has been seen stopped or in an unknown state (first seen, or the cloud's stop
    /// time).
    pub unhealthy_since: Option<Timestamp>,
    /// When the phase last changed.
    pub changed_at: Timestamp,
    /// Why it is in this phase (for deletes and retirements), or the last error met.
    pub note: String,
    /// Whether a create of this name may have left pieces beside its machine (a boot disk, an
    /// interface, an address) that no listing shows: its answer said so (an error that is not
    /// [`made_nothing`](orca::Error::made_nothing)), or the name was given up unseen. Once no
    /// machine of the name is to stand (retired or gone), each pass removes them by name
    /// ([`Provider::delete_named`](orca::Provider::delete_named)) until that succeeds, and the name
    /// is not pruned before. False in a record written before the mark existed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub leftovers: bool,
}

/// What the scaler remembers of one pool of one owner on one kind of provider.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// Whose record.
    pub key: Key,
    /// Whether a pass has reconciled this record with the cloud's listing (until then, machines of the
    /// pool that the record does not name are neither adopted nor deleted without the operator's word).
    pub established: bool,
    /// The number of the next machine name.
    pub next: u64,
    /// Every recorded machine, by name.
    pub entries: BTreeMap<String, Entry>,
    /// Offerings (`type@location`) that reported no stock, with the time until which they rest.
    pub cooling: BTreeMap<String, Timestamp>,
    /// Another writer owns machines in this pool under this owner (a create of a name this record had
    /// never asked for was answered with a machine an earlier create made): why, as told to the
    /// operator. While it is set, passes neither create nor delete until the operator's word
    /// (`--unknown adopt` or `--unknown delete`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conflict: Option<String>,
    /// This record's writer id: every machine it creates carries it as the label
    /// [`WRITER_LABEL`](crate::WRITER_LABEL), so that a machine of another record (a second scaler on
    /// the pool) is told from one this record lost track of. Empty in a record written before writer
    /// ids existed; a pass gives it one ([`Record::ensure_writer`]).
    #[serde(default)]
    pub writer: String,
}

impl Record {
    /// An empty, new record for `key`.
    pub fn new(key: Key) -> Self {
        Record {
            key,
            established: false,
            next: 0,
            entries: BTreeMap::new(),
            cooling: BTreeMap::new(),
            conflict: None,
            writer: new_writer(),
        }
    }

    /// Gives a record written before writer ids existed one of its own. Its older machines carry no
    /// writer label and are handled as before.
    pub fn ensure_writer(&mut self) {
        if self.writer.is_empty() {
            self.writer = new_writer();
        }
    }

    /// Whether machine `m` is another writer's: it carries a writer label that is not this record's,
    /// and this record does not name it by its id (a machine adopted on the operator's word keeps
    /// the label of the record that made it). A machine without the label is not (it was made
    /// before writer labels, or by another program).
    pub fn other_writer<'m>(&self, m: &'m orca::Machine) -> Option<&'m str> {
        let w = m.labels.get(crate::WRITER_LABEL)?;
        if *w == self.writer
            || self
                .entries
                .get(&m.name)
                .is_some_and(|e| e.id.as_deref() == Some(m.id.as_str()))
        {
            return None;
        }
        Some(w)
    }

    /// The entries in `phase`.
    pub fn in_phase(&self, phase: Phase) -> impl Iterator<Item = &Entry> {
        self.entries.values().filter(move |e| e.phase == phase)
    }
}

/// A new writer id: 16 hex digits, a valid label value.
fn new_writer() -> String {
    format!("{:016x}", fastrand::u64(..))
}

/// One intent or outcome, as written to the store (and to PostgreSQL's event log) in one transaction
/// with the record it produced.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// The record was reconciled with the cloud for the first time.
    Established {
        /// Why (what was seen).
        note: String,
    },
    /// A machine name recorded before its create call.
    IntendCreate {
        /// The name.
        name: String,
        /// The offering.
        offering: String,
    },
    /// A create's outcome, or a recorded name found in the cloud: the machine is this pool's.
    Live {
        /// The name.
        name: String,
        /// The machine's id.
        id: String,
        /// How it became known (`created`, `adopted by the driver`, `found by name`, ...).
        how: String,
    },
    /// A create answered "not made".
    Retired {
        /// The name.
        name: String,
        /// Why.
        why: String,
    },
    /// A delete recorded before its call.
    IntendDelete {
        /// The name.
        name: String,
        /// The machine's id.
        id: String,
        /// Why.
        why: String,
    },
    /// The machine is gone (deleted, or vanished).
    Gone {
        /// The name.
        name: String,
        /// Why.
        why: String,
    },
    /// A call failed; the entry stays as it was, with the error noted.
    Failed {
        /// The name.
        name: String,
        /// The error.
        error: String,
    },
    /// A machine seen stopped or unknown for the first time.
    Unhealthy {
        /// The name.
        name: String,
        /// Since when.
        since: Timestamp,
    },
    /// An offering rests after no stock.
    Cooling {
        /// The offering.
        offering: String,
        /// Until when.
        until: Timestamp,
    },
    /// Another writer owns a machine of a name this record picked: the name is dropped from the
    /// record and the pool is held.
    Conflict {
        /// The name.
        name: String,
        /// The other writer's machine.
        id: String,
        /// Why.
        why: String,
    },
    /// The operator settled a conflict.
    Settled {
        /// How.
        how: String,
    },
    /// What the creates of a name may have left was removed by name (`delete_named`) before the name
    /// is given up.
    Cleaned {
        /// The name.
        name: String,
        /// Whether something of it was there and removed.
        removed: bool,
    },
    /// Old names pruned from the record.
    Pruned {
        /// The names.
        names: Vec<String>,
    },
}

impl Event {
    /// The machine name the event is about, if any.
    pub fn name(&self) -> Option<&str> {
        match self {
            Event::IntendCreate { name, .. }
            | Event::Live { name, .. }
            | Event::Retired { name, .. }
            | Event::IntendDelete { name, .. }
            | Event::Gone { name, .. }
            | Event::Failed { name, .. }
            | Event::Unhealthy { name, .. }
            | Event::Conflict { name, .. }
            | Event::Cleaned { name, .. } => Some(name),
            Event::Established { .. }
            | Event::Cooling { .. }
            | Event::Settled { .. }
            | Event::Pruned { .. } => None,
        }
    }

    /// The event's kind, as stored (`intend_create`, ...).
    pub fn kind(&self) -> &'static str {
        match self {
            Event::Established { .. } => "established",
            Event::IntendCreate { .. } => "intend_create",
            Event::Live { .. } => "live",
            Event::Retired { .. } => "retired",
            Event::IntendDelete { .. } => "intend_delete",
            Event::Gone { .. } => "gone",
            Event::Failed { .. } => "failed",
            Event::Unhealthy { .. } => "unhealthy",
            Event::Cooling { .. } => "cooling",
            Event::Conflict { .. } => "conflict",
            Event::Settled { .. } => "settled",
            Event::Cleaned { .. } => "cleaned",
            Event::Pruned { .. } => "pruned",
        }
    }
}
