//! The pool autoscaler (`orca.pool_scale`) as a library: one [`Scaler::pass`] brings a pool to its
//! target size on any [`Provider`].
//!
//! A pass lists `machines(pool)`, deletes the machines it does not know (per the small [`Record`] it
//! keeps of what it made), creates the missing ones from a list of offerings (machine type and location)
//! in order of preference, falls back to the next offering when one has no stock, and does not try an
//! offering that just reported no stock again until its cool-down has passed. Surplus machines are
//! deleted, newest first.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use orca::{Arch, Created, Error, MachineSpec, Provider, Status};
use serde::{Deserialize, Serialize};

/// A machine type in a location, as the autoscaler may buy it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Offering {
    /// The machine type.
    pub machine_type: String,
    /// The location.
    pub location: String,
}

impl std::str::FromStr for Offering {
    type Err = String;
    /// `type@location`, for example `cax31@hel1`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.split_once('@') {
            Some((t, l)) if !t.is_empty() && !l.is_empty() => Ok(Offering {
                machine_type: t.to_string(),
                location: l.to_string(),
            }),
            _ => Err(format!("offering {s:?}: expected TYPE@LOCATION")),
        }
    }
}

impl std::fmt::Display for Offering {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}@{}", self.machine_type, self.location)
    }
}

/// What the autoscaler remembers between passes (and runs): the machines it made, and the offerings
/// cooling down after no stock.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// Machines it made: id to name.
    pub known: BTreeMap<String, String>,
    /// Offerings (`type@location`) that reported no stock, with the Unix time (s) until which they rest.
    pub cooling: BTreeMap<String, u64>,
    /// The next machine number, for unique names.
    pub next: u64,
}

impl Record {
    /// Reads the record at `path`; a missing file is an empty record.
    pub fn load(path: &Path) -> Result<Self, String> {
        match std::fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map_err(|e| format!("record {}: not a pool record: {e}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Record::default()),
            Err(e) => Err(format!("record {}: {e}", path.display())),
        }
    }

    /// Writes the record to `path` (atomically: a temporary file, then a rename).
    pub fn save(&self, path: &Path) -> Result<(), String> {
        let tmp = path.with_extension("tmp");
        let bytes = serde_json::to_vec_pretty(self).map_err(|e| e.to_string())?;
        std::fs::write(&tmp, bytes).map_err(|e| format!("record {}: {e}", tmp.display()))?;
        std::fs::rename(&tmp, path).map_err(|e| format!("record {}: {e}", path.display()))
    }
}

/// The autoscaler's settings.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The pool to scale.
    pub pool: String,
    /// How many machines the pool should have.
    pub size: usize,
    /// What to buy, in order of preference.
    pub offerings: Vec<Offering>,
    /// How long an offering that reported no stock rests.
    pub cooldown: Duration,
    /// The architectures the worker image runs on; offerings of other architectures are skipped.
    /// Empty: any.
    pub archs: Vec<Arch>,
    /// Cloud-init for new machines.
    pub user_data: String,
}

/// One thing a pass did or saw.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Action {
    /// Deleted a machine of the pool it did not make.
    DeletedUnknown {
        /// The machine's id.
        id: String,
        /// Its name.
        name: String,
    },
    /// Deleted a machine it made, because the pool was larger than its size.
    DeletedSurplus {
        /// The machine's id.
        id: String,
        /// Its name.
        name: String,
    },
    /// Forgot a machine it made that is gone.
    Forgot {
        /// The machine's id.
        id: String,
    },
    /// Made a machine.
    Created {
        /// The machine's id.
        id: String,
        /// Its name.
        name: String,
        /// From which offering.
        offering: String,
    },
    /// An offering had no stock; it rests until `until` (Unix seconds).
    NoStock {
        /// The offering.
        offering: String,
        /// Until when it is not tried again.
        until: u64,
    },
    /// An offering was skipped: cooling down, or of an architecture the image does not run on.
    Skipped {
        /// The offering.
        offering: String,
        /// Why.
        reason: String,
    },
    /// A call failed; the pass goes on where it can.
    Failed {
        /// What was being done.
        doing: String,
        /// The error.
        error: String,
    },
}

/// What one pass did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PassReport {
    /// The pool.
    pub pool: String,
    /// The target size.
    pub size: usize,
    /// Machines of the pool listed at the start of the pass.
    pub listed: usize,
    /// Machines of the pool it knows after the pass (made by it and not deleting).
    pub count: usize,
    /// What it did, in order.
    pub actions: Vec<Action>,
}

/// The autoscaler: settings plus its record.
#[derive(Debug, Clone)]
pub struct Scaler {
    /// Its settings.
    pub settings: Settings,
    /// What it remembers.
    pub record: Record,
}

fn unix(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl Scaler {
    /// One pass at time `now`: bring the pool to its size on `p`.
    pub async fn pass(&mut self, p: &dyn Provider, now: SystemTime) -> Result<PassReport, Error> {
        let s = self.settings.clone();
        let mut actions = Vec::new();
        let listed = p.machines(&s.pool).await?;

        // Forget what is gone; delete what is not ours to keep.
        let present: Vec<&str> = listed.iter().map(|m| m.id.as_str()).collect();
        let gone: Vec<String> = self
            .record
            .known
            .keys()
            .filter(|id| !present.contains(&id.as_str()))
            .cloned()
            .collect();
        for id in gone {
            self.record.known.remove(&id);
            actions.push(Action::Forgot { id });
        }
        let mut mine = Vec::new();
        for m in &listed {
            if self.record.known.contains_key(&m.id) {
                if m.status != Status::Deleting {
                    mine.push(m.clone());
                }
                continue;
            }
            match p.delete(&m.id).await {
                Ok(_) => actions.push(Action::DeletedUnknown {
                    id: m.id.clone(),
                    name: m.name.clone(),
                }),
                Err(e) => actions.push(Action::Failed {
                    doing: format!("delete unknown machine {}", m.id),
                    error: e.to_string(),
                }),
            }
        }

        // Too many: delete the newest (highest-numbered) first.
        mine.sort_by(|a, b| a.name.len().cmp(&b.name.len()).then(a.name.cmp(&b.name)));
        while mine.len() > s.size {
            let Some(m) = mine.pop() else { break };
            match p.delete(&m.id).await {
                Ok(_) => {
                    self.record.known.remove(&m.id);
                    actions.push(Action::DeletedSurplus {
                        id: m.id,
                        name: m.name,
                    });
                }
                Err(e) => actions.push(Action::Failed {
                    doing: format!("delete surplus machine {}", m.id),
                    error: e.to_string(),
                }),
            }
        }

        // Too few: create from the first offering that has stock.
        let mut count = mine.len();
        let now_s = unix(now);
        self.record.cooling.retain(|_, until| *until > now_s);
        let mut usable = Vec::new();
        for o in &s.offerings {
            let key = o.to_string();
            if let Some(until) = self.record.cooling.get(&key) {
                if count < s.size {
                    actions.push(Action::Skipped {
                        offering: key,
                        reason: format!("no stock lately; cooling down until {until}"),
                    });
                }
                continue;
            }
            if !s.archs.is_empty() && count < s.size {
                match p.arch(&o.machine_type).await {
                    Ok(a) if s.archs.contains(&a) => {}
                    Ok(a) => {
                        actions.push(Action::Skipped {
                            offering: key,
                            reason: format!("{a} does not run the worker image"),
                        });
                        continue;
                    }
                    Err(e) => {
                        actions.push(Action::Failed {
                            doing: format!("arch of {}", o.machine_type),
                            error: e.to_string(),
                        });
                        continue;
                    }
                }
            }
            usable.push(o.clone());
        }
        let mut offers = usable.into_iter();
        let mut current = offers.next();
        while count < s.size {
            let Some(o) = current.clone() else { break };
            let name = format!("{}-{}", s.pool.replace('_', "-"), self.record.next);
            let spec = MachineSpec::new(&name, &o.machine_type, &o.location, &s.pool)
                .with_user_data(s.user_data.clone());
            match p.create(&spec).await {
                Ok(Created::Machine(m) | Created::Adopted(m)) => {
                    self.record.next += 1;
                    self.record.known.insert(m.id.clone(), m.name.clone());
                    count += 1;
                    actions.push(Action::Created {
                        id: m.id,
                        name: m.name,
                        offering: o.to_string(),
                    });
                }
                Ok(Created::NoStock { .. }) => {
                    let until = now_s + s.cooldown.as_secs();
                    self.record.cooling.insert(o.to_string(), until);
                    actions.push(Action::NoStock {
                        offering: o.to_string(),
                        until,
                    });
                    current = offers.next();
                }
                Err(e) => {
                    // A name taken by someone else: skip the number. Anything else ends the pass's
                    // creating; the next pass tries again.
                    let taken = matches!(e, Error::AlreadyExists { .. });
                    actions.push(Action::Failed {
                        doing: format!("create {name} from {o}"),
                        error: e.to_string(),
                    });
                    if taken {
                        self.record.next += 1;
                    } else {
                        break;
                    }
                }
            }
        }
        Ok(PassReport {
            pool: s.pool,
            size: s.size,
            listed: listed.len(),
            count,
            actions,
        })
    }
}

impl PassReport {
    /// The report as lines for a person.
    pub fn lines(&self) -> Vec<String> {
        let mut v = vec![format!(
            "pool {}: {} listed, {} of {} after this pass",
            self.pool, self.listed, self.count, self.size
        )];
        for a in &self.actions {
            v.push(match a {
                Action::DeletedUnknown { id, name } => format!("  deleted unknown {name} ({id})"),
                Action::DeletedSurplus { id, name } => format!("  deleted surplus {name} ({id})"),
                Action::Forgot { id } => format!("  forgot {id} (gone)"),
                Action::Created { id, name, offering } => {
                    format!("  created {name} ({id}) from {offering}")
                }
                Action::NoStock { offering, until } => {
                    format!("  no stock of {offering}; resting until {until}")
                }
                Action::Skipped { offering, reason } => format!("  skipped {offering}: {reason}"),
                Action::Failed { doing, error } => format!("  FAILED {doing}: {error}"),
            });
        }
        v
    }
}
