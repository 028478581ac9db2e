#![doc = include_str!("../README.md")]

use std::time::Duration;

use orca::{Arch, Provider};
use serde::{Deserialize, Serialize};

#[cfg(feature = "metrics")]
pub mod metrics;
mod pass;
pub mod record;
pub mod report;
mod scaler;
pub mod store;

pub use record::{Entry, Event, Key, Phase, Record};
pub use report::{Action, PassReport};
pub use scaler::Scaler;
#[cfg(feature = "postgres")]
pub use store::postgres::PgStore;
pub use store::{file::FileStore, Role, Store, StoreError};

/// A machine type in a location, as the autoscaler may buy it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
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

/// What to do with machines of the pool that the record does not name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Unknown {
    /// On a new record (first pass, lost file, another kind or owner): touch nothing, create nothing,
    /// and say why; on an established record (which names every machine it ever meant to make):
    /// delete them.
    #[default]
    Ask,
    /// Keep them as this pool's machines (counted toward its size).
    Adopt,
    /// Delete them.
    Delete,
}

impl std::str::FromStr for Unknown {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "ask" => Ok(Unknown::Ask),
            "adopt" => Ok(Unknown::Adopt),
            "delete" => Ok(Unknown::Delete),
            other => Err(format!("{other:?}: expected ask, adopt or delete")),
        }
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
    /// The architectures the worker image runs on; offerings of other architectures are refused at
    /// start ([`check_offerings`]). Empty: any.
    pub archs: Vec<Arch>,
    /// Cloud-init for new machines.
    pub user_data: String,
    /// How long a machine may be stopped (or in a state the driver does not know) before it is deleted
    /// and replaced.
    pub grace: Duration,
    /// How long a machine may stay starting from its creation (a VM the cloud never finishes
    /// provisioning) before it is deleted and replaced.
    pub boot_grace: Duration,
    /// How long a create whose machine never showed up is waited for, when it is no longer needed,
    /// before its name is retired.
    pub settle: Duration,
    /// How many creates and deletes run at once.
    pub parallel: usize,
    /// What to do with machines the record does not name.
    pub unknown: Unknown,
    /// How long names of deleted or never-made machines are kept in the record.
    pub retention: Duration,
}

impl Settings {
    /// Settings for `pool` of `size` from `offerings`, with the defaults: cool-down 5 min, grace
    /// 10 min, boot grace 30 min, settle 10 min, at most [`DEFAULT_PARALLEL`] at once, [`Unknown::Ask`], names kept 24 h.
    pub fn new(pool: impl Into<String>, size: usize, offerings: Vec<Offering>) -> Self {
        Settings {
            pool: pool.into(),
            size,
            offerings,
            cooldown: Duration::from_secs(300),
            archs: Vec::new(),
            user_data: String::new(),
            grace: Duration::from_secs(600),
            boot_grace: Duration::from_secs(1800),
            settle: Duration::from_secs(600),
            parallel: DEFAULT_PARALLEL,
            unknown: Unknown::Ask,
            retention: Duration::from_secs(86_400),
        }
    }
}

/// How many creates and deletes a pass runs at once at most unless set (`Settings::parallel`,
/// `orca-pool --parallel`). Below it the cloud sets the pace (see [`Scaler::concurrency`]).
pub const DEFAULT_PARALLEL: usize = 100;

/// The environment variable a program on the scaler reads the provider kind from (`orca-pool`'s
/// `--kind`).
pub const KIND_ENV: &str = "ORCA_KIND";

/// The environment variable a program on the scaler reads the owner from (`orca-pool`'s `--owner`).
pub const OWNER_ENV: &str = "ORCA_OWNER";

/// The environment variable a program on the scaler reads where the record is kept from: a file
/// path or a PostgreSQL connection string (`orca-pool`'s `--store`).
pub const STORE_ENV: &str = "ORCA_POOL_STORE";

/// The width of the owner-and-pool tag in machine names.
pub const TAG_LEN: usize = 6;

/// The label every machine a scaler creates carries, holding its record's writer id
/// ([`Record::writer`]): a machine with another writer's id is a conflict that holds the pool, never a
/// machine to adopt or delete as unknown.
pub const WRITER_LABEL: &str = "orca-pool-writer";

/// The most digits of a machine number that [`check_offerings`] makes room for.
pub const NUMBER_DIGITS: usize = 6;

/// A short, stable tag of (owner, pool): 6 hex digits of the 64-bit FNV-1a hash of
/// `owner`, a zero byte and `pool`. Two owners (or two pools whose names differ only by `_` and `-`)
/// get different names on a cloud whose names are unique per account.
pub fn owner_tag(owner: &str, pool: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in owner.bytes().chain([0u8]).chain(pool.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{:06x}", h & 0xff_ffff)
}

/// The name of machine number `n` of `key`'s pool: `<pool>-<tag>-<n>` (`_` in the pool as `-`).
pub fn machine_name(key: &Key, n: u64) -> String {
    format!(
        "{}-{}-{n}",
        key.pool.replace('_', "-"),
        owner_tag(&key.owner, &key.pool)
    )
}

/// The longest machine name a cloud of `kind` takes, and whether it must start with a letter.
pub fn name_rule(kind: &str) -> (usize, bool) {
    match kind {
        // Azure's driver adds suffixes to the VM name for its disk, interface and address.
        "azure" => (58, false),
        // Compute Engine resource names start with a letter.
        "gce" => (63, true),
        _ => (63, false),
    }
}

/// Whether `o`'s location is known to the cloud, where the provider can tell: one that reads prices
/// per location ([`orca::Capabilities::hourly_price`]) answers an unknown location, or a type not
/// offered there. A provider that cannot tell, or a check that fails for another reason, lets the
/// first create find out (its refusal falls back to the next offering).
async fn check_location(p: &dyn Provider, o: &Offering) -> Option<String> {
    if !p.capabilities().hourly_price {
        return None;
    }
    match p.hourly_price(&o.machine_type, &o.location).await {
        Err(e @ orca::Error::InvalidSpec { .. }) => Some(format!(
            "offering {o}: unknown location {} on {}: {e}",
            o.location,
            p.kind()
        )),
        Err(e) if e.kind() == orca::ErrorKind::NotFound => Some(format!(
            "offering {o}: {} is not offered in {} on {}: {e}",
            o.machine_type,
            o.location,
            p.kind()
        )),
        _ => None,
    }
}

/// What `settings` alone show wrong for `p`, without asking the cloud: the pool's name, the
/// offerings and parallel calls given, the machine names' fit, labels, and each offering's spec.
fn settings_problems(p: &dyn Provider, settings: &Settings) -> Vec<String> {
    let mut problems = Vec::new();
    let key = Key::new(p.kind(), p.owner(), &settings.pool);
    if let Err(e) = orca::validate_pool(&settings.pool) {
        problems.push(e.to_string());
    }
    if settings.offerings.is_empty() {
        problems.push("no offering: give at least one --offer TYPE@LOCATION".into());
    }
    if settings.parallel == 0 {
        problems.push("--parallel must be at least 1".into());
    }
    // The name of the highest number of NUMBER_DIGITS digits.
    let longest = machine_name(&key, 10u64.pow(NUMBER_DIGITS as u32) - 1);
    problems.extend(check_names(p.kind(), &settings.pool, &longest));
    if !p.capabilities().options.labels {
        problems.push(format!(
            "{} does not set labels on a create, and every machine carries its record's writer id as the label {WRITER_LABEL}",
            p.kind()
        ));
    }
    for o in &settings.offerings {
        if let Err(e) = orca::MachineSpec::new(&longest, &o.machine_type, &o.location, "p")
            .with_user_data(settings.user_data.clone())
            .with_label(WRITER_LABEL, "0123456789abcdef")
            .validate()
        {
            problems.push(format!("offering {o}: {e}"));
        }
    }
    problems
}

/// Checks, before any machine is made, that the pool can be scaled as `settings` say on `p`: each
/// offering's type is known to the cloud and of an architecture the image runs on, its location is
/// known where the provider can tell (one that reads prices per location), the provider sets labels,
/// and the pool's machine names fit the cloud's rule. What the settings alone show wrong is refused
/// before the cloud is asked anything; then every problem the cloud's catalogue shows is named at
/// once. On success, the architecture of each offering.
pub async fn check_offerings(
    p: &dyn Provider,
    settings: &Settings,
) -> Result<Vec<Arch>, Vec<String>> {
    let problems = settings_problems(p, settings);
    if !problems.is_empty() {
        return Err(problems);
    }
    let mut problems = Vec::new();
    let mut archs = Vec::new();
    for o in &settings.offerings {
        match type_arch(p, o).await {
            Ok(a) if settings.archs.is_empty() || settings.archs.contains(&a) => archs.push(a),
            Ok(a) => problems.push(format!(
                "offering {o}: {} is {a}, and the worker image runs on {}",
                o.machine_type,
                settings
                    .archs
                    .iter()
                    .map(Arch::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
            Err(problem) => {
                problems.push(problem);
                // A type the cloud does not know has no price: its location is not checked.
                continue;
            }
        }
        if let Some(problem) = check_location(p, o).await {
            problems.push(problem);
        }
    }
    if problems.is_empty() {
        Ok(archs)
    } else {
        Err(problems)
    }
}

/// Why the pool's longest machine name `longest` does not fit the name rule of a cloud of `kind`,
/// if it does not.
fn check_names(kind: &str, pool: &str, longest: &str) -> Option<String> {
    let (max, letter_first) = name_rule(kind);
    if longest.len() > max {
        Some(format!(
            "pool {pool:?}: its machine names ({longest}) are {} characters, longer than the {max} that {kind} takes; use a pool name of at most {} characters",
            longest.len(),
            pool.len().saturating_sub(longest.len() - max)
        ))
    } else if letter_first && !longest.starts_with(|c: char| c.is_ascii_lowercase()) {
        Some(format!(
            "pool {pool:?}: machine names on {kind} must start with a letter"
        ))
    } else {
        orca::validate_name(longest)
            .err()
            .map(|e| format!("pool {pool:?}: {e}"))
    }
}

/// The architecture of `o`'s machine type, or why the cloud could not tell it (an unknown type, or
/// a failed check).
async fn type_arch(p: &dyn Provider, o: &Offering) -> Result<Arch, String> {
    p.arch(&o.machine_type).await.map_err(|e| {
        let what = match e.kind() {
            orca::ErrorKind::NotFound | orca::ErrorKind::InvalidSpec => "unknown machine type",
            _ => "could not check machine type",
        };
        format!(
            "offering {o}: {what} {} on {}: {e}",
            o.machine_type,
            p.kind()
        )
    })
}
