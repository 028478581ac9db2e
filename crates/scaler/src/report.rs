//! What a pass did, and why: the [`Action`]s it took or saw and the [`PassReport`] that gathers them,
//! for a person ([`PassReport::lines`]) or a program (JSON, by `serde`).

use orca::Timestamp;
use serde::Serialize;

use crate::record::Key;
use crate::store::Role;

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
    /// What the creates of a name may have left beside their machine (a boot disk, an interface, an
    /// address: pieces no listing shows) was removed by name (`Provider::delete_named`) before the
    /// name is given up.
    Cleaned {
        /// The name.
        name: String,
        /// Whether something of it was there and removed (false: nothing was left).
        removed: bool,
        /// Why it was cleaned up.
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
        /// The operation: `list`, `read`, `create`, `delete`, `delete_named`.
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
    pub(crate) fn new(key: &Key, size: usize, at: Timestamp) -> Self {
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
        let count = |f: fn(&Action) -> bool| self.actions.iter().filter(|a| f(a)).count();
        let failed = count(|a| matches!(a, Action::Failed { .. }));
        let conflicts = count(|a| matches!(a, Action::Conflict { .. }));
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
                Action::Cleaned { name, removed, why } => format!(
                    "  cleaned up after {name} ({}): {why}",
                    if *removed {
                        "removed what its create left"
                    } else {
                        "nothing was left"
                    }
                ),
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
