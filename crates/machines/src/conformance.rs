//! The conformance suite (feature `conformance`): plain async functions over `&dyn Provider` that check
//! every line of the contract. The in-memory provider runs it, and every driver runs it against its
//! emulator or fake through a small [`Harness`].
//!
//! A hook that a backend cannot provide answers [`Skip`]; the check is then reported as skipped, by
//! name, in the output ([`Report`]), never passed silently.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use orca_machines::conformance::{run_all, MemoryHarness};
//! let report = run_all(&MemoryHarness::new()).await;
//! report.assert_passed();
//! assert!(report.skipped().is_empty());
//! # });
//! ```

use std::fmt::Write as _;

use async_trait::async_trait;

use crate::arch::Arch;
use crate::error::Error;
use crate::labels::{ORCA_LABEL, ORCA_VALUE, OWNER_LABEL, POOL_LABEL};
use crate::machine::{Created, Machine, Status};
use crate::memory::{FaultKind, MemoryCloud, Operation};
use crate::provider::Provider;
use crate::spec::MachineSpec;

/// A hook the backend cannot provide, with the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skip(pub String);

impl Skip {
    /// A skip with `reason`.
    pub fn because(reason: impl Into<String>) -> Self {
        Skip(reason.into())
    }
}

/// The result of a hook.
pub type Hook<T> = std::result::Result<T, Skip>;

/// What the suite needs to know about a backend's catalogue.
#[derive(Debug, Clone)]
pub struct Setup {
    /// A cheap machine type of architecture amd64.
    pub amd64_type: String,
    /// A cheap machine type of architecture arm64.
    pub arm64_type: String,
    /// A location where both are offered.
    pub location: String,
    /// Another amd64 type to resize `amd64_type` to (for the resize capability).
    pub resize_to: String,
    /// A machine id in the cloud's own form that names no machine.
    pub unknown_id: String,
}

/// What a driver supplies to run the suite: providers for two owners on one backend, and hooks to force
/// the page size, exhaust stock, lose an answer and count requests.
#[async_trait]
pub trait Harness: Send + Sync {
    /// The backend's name in the output (`memory`, `hetzner-fake`, `moto`, ...).
    fn name(&self) -> String;

    /// The backend's catalogue and ids.
    fn setup(&self) -> Setup;

    /// A provider for `owner` (empty for none) on the shared backend.
    async fn provider(&self, owner: &str) -> crate::Result<Box<dyn Provider>>;

    /// A provider for `owner` whose listings read `page_size` machines a page.
    async fn paged_provider(&self, owner: &str, page_size: u32) -> Hook<Box<dyn Provider>> {
        let _ = (owner, page_size);
        Err(Skip::because("the backend cannot force the page size"))
    }

    /// Makes `machine_type` out of stock in `location` until [`Harness::restore_stock`].
    async fn exhaust_stock(&self, machine_type: &str, location: &str) -> Hook<()> {
        let _ = (machine_type, location);
        Err(Skip::because("the backend cannot exhaust stock"))
    }

    /// Undoes [`Harness::exhaust_stock`].
    async fn restore_stock(&self, machine_type: &str, location: &str) -> Hook<()> {
        let _ = (machine_type, location);
        Err(Skip::because("the backend cannot restore stock"))
    }

    /// Makes the next create happen in the cloud while its answer is lost (an ambiguous failure).
    async fn lose_next_create_answer(&self) -> Hook<()> {
        Err(Skip::because("the backend cannot lose an answer"))
    }

    /// Requests the backend has served so far, if it counts them.
    async fn requests(&self) -> Hook<u64> {
        Err(Skip::because("the backend does not count requests"))
    }
}

/// How one check ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Every assertion held.
    Passed,
    /// A hook was missing: the check did not run (or ran only in part), with the reason.
    Skipped(String),
    /// An assertion failed, with what was seen.
    Failed(String),
}

/// The outcome of every check of one run.
#[derive(Debug, Clone)]
pub struct Report {
    /// The backend's name.
    pub backend: String,
    /// Each check by name, in order.
    pub results: Vec<(&'static str, Outcome)>,
}

impl Report {
    /// The checks that failed, with why.
    pub fn failed(&self) -> Vec<(&'static str, String)> {
        self.results
            .iter()
            .filter_map(|(n, o)| match o {
                Outcome::Failed(why) => Some((*n, why.clone())),
                _ => None,
            })
            .collect()
    }

    /// The checks that were skipped, with why.
    pub fn skipped(&self) -> Vec<(&'static str, String)> {
        self.results
            .iter()
            .filter_map(|(n, o)| match o {
                Outcome::Skipped(why) => Some((*n, why.clone())),
                _ => None,
            })
            .collect()
    }

    /// Panics, listing every failed check, when any failed. Skips are printed, not hidden.
    pub fn assert_passed(&self) {
        let failed = self.failed();
        if !failed.is_empty() {
            let mut msg = format!(
                "conformance on {}: {} check(s) failed",
                self.backend,
                failed.len()
            );
            for (n, why) in failed {
                let _ = write!(msg, "\n  {n}: {why}");
            }
            panic!("{msg}");
        }
    }
}

/// A check's own failure: a skip or a failed assertion.
#[derive(Debug)]
enum Verdict {
    Skip(String),
    Fail(String),
}

impl From<Skip> for Verdict {
    fn from(s: Skip) -> Self {
        Verdict::Skip(s.0)
    }
}

impl From<Error> for Verdict {
    fn from(e: Error) -> Self {
        Verdict::Fail(format!("unexpected error: {e}"))
    }
}

type Checked = std::result::Result<(), Verdict>;

macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(Verdict::Fail(format!($($fmt)+)));
        }
    };
}

/// What the runner gives each check: unique owners and pools, so that runs never meet.
struct Ctx<'a> {
    h: &'a dyn Harness,
    setup: Setup,
    run: String,
    owner_a: String,
    owner_b: String,
    check: &'static str,
    tag: String,
}

impl Ctx<'_> {
    fn pool(&self, n: u32) -> String {
        format!("conf-{}-{}{n}", self.run, self.tag)
    }
    fn name(&self, n: u32) -> String {
        format!("c{}-{}{n}", self.run, self.tag)
    }
    fn spec(&self, n: u32, pool: &str) -> MachineSpec {
        MachineSpec::new(
            self.name(n),
            &self.setup.amd64_type,
            &self.setup.location,
            pool,
        )
        .with_user_data("#cloud-config\n")
    }
    async fn provider(&self, owner: &str) -> std::result::Result<Box<dyn Provider>, Verdict> {
        Ok(self.h.provider(owner).await?)
    }
}

async fn made(p: &dyn Provider, spec: &MachineSpec) -> std::result::Result<Machine, Verdict> {
    match p.create(spec).await? {
        Created::Machine(m) => Ok(m),
        Created::NoStock { message, .. } => Err(Verdict::Fail(format!(
            "create of {} reported no stock: {message}",
            spec.name
        ))),
    }
}

fn ids(ms: &[Machine]) -> Vec<&str> {
    let mut v: Vec<&str> = ms.iter().map(|m| m.id.as_str()).collect();
    v.sort_unstable();
    v
}

/// The names of every check, in the order [`run_all`] runs them.
pub const CHECKS: &[&str] = &[
    "invalid_input_is_refused_before_any_call",
    "lifecycle",
    "labels_are_set_on_create",
    "pool_isolation",
    "owner_isolation",
    "refuses_to_delete_another_owners_machine",
    "delete_twice_and_unknown_id",
    "lists_every_page",
    "arch_of_both_architectures",
    "no_stock",
    "retried_create_makes_one_machine",
    "capabilities_are_truthful",
];

/// Runs every check against the backend, prints one line per check, and returns the report.
pub async fn run_all(h: &dyn Harness) -> Report {
    run(h, CHECKS).await
}

/// Runs the named checks (see [`CHECKS`]).
pub async fn run(h: &dyn Harness, checks: &[&'static str]) -> Report {
    let run = format!("{:06x}", fastrand::u32(..0xff_ffff));
    let mut results = Vec::new();
    for (i, check) in checks.iter().enumerate() {
        let ctx = Ctx {
            h,
            setup: h.setup(),
            owner_a: format!("conf-{run}-a"),
            owner_b: format!("conf-{run}-b"),
            run: run.clone(),
            check,
            tag: format!("k{i}"),
        };
        let verdict = match *check {
            "invalid_input_is_refused_before_any_call" => invalid_input(&ctx).await,
            "lifecycle" => lifecycle(&ctx).await,
            "labels_are_set_on_create" => labels_on_create(&ctx).await,
            "pool_isolation" => pool_isolation(&ctx).await,
            "owner_isolation" => owner_isolation(&ctx).await,
            "refuses_to_delete_another_owners_machine" => foreign_delete(&ctx).await,
            "delete_twice_and_unknown_id" => delete_twice(&ctx).await,
            "lists_every_page" => every_page(&ctx).await,
            "arch_of_both_architectures" => arch_both(&ctx).await,
            "no_stock" => no_stock(&ctx).await,
            "retried_create_makes_one_machine" => retried_create(&ctx).await,
            "capabilities_are_truthful" => capabilities(&ctx).await,
            other => Err(Verdict::Fail(format!("no check named {other}"))),
        };
        let cleanup = clean_up(&ctx).await;
        let outcome = match (verdict, cleanup) {
            (Ok(()), Ok(())) => Outcome::Passed,
            (Ok(()), Err(e)) => Outcome::Failed(format!("clean-up failed: {e}")),
            (Err(Verdict::Skip(why)), _) => Outcome::Skipped(why),
            (Err(Verdict::Fail(why)), _) => Outcome::Failed(why),
        };
        match &outcome {
            Outcome::Passed => println!("conformance {}: {} ... ok", h.name(), ctx.check),
            Outcome::Skipped(why) => {
                println!(
                    "conformance {}: {} ... SKIPPED ({why})",
                    h.name(),
                    ctx.check
                )
            }
            Outcome::Failed(why) => {
                println!("conformance {}: {} ... FAILED: {why}", h.name(), ctx.check)
            }
        }
        results.push((*check, outcome));
    }
    Report {
        backend: h.name(),
        results,
    }
}

/// Deletes whatever a check left in its pools, for every owner it used.
async fn clean_up(ctx: &Ctx<'_>) -> crate::Result<()> {
    for owner in [ctx.owner_a.as_str(), ctx.owner_b.as_str(), ""] {
        let p = ctx.h.provider(owner).await?;
        for n in 0..4 {
            for m in p.machines(&ctx.pool(n)).await? {
                p.delete(&m.id).await?;
            }
        }
    }
    Ok(())
}

async fn invalid_input(ctx: &Ctx<'_>) -> Checked {
    let p = ctx.provider(&ctx.owner_a).await?;
    let before = ctx.h.requests().await;
    let pool = ctx.pool(0);
    let long = "a".repeat(64);
    for bad in [
        "",
        "-lead",
        "trail-",
        "Upper",
        "under_score",
        "dot.ted",
        "sp ace",
        &long,
    ] {
        let spec = MachineSpec::new(bad, &ctx.setup.amd64_type, &ctx.setup.location, &pool);
        match p.create(&spec).await {
            Err(Error::InvalidSpec { field, .. }) if field == "name" => {}
            other => return Err(Verdict::Fail(format!("name {bad:?} gave {other:?}"))),
        }
    }
    for bad in [
        "",
        "a,b",
        "a=b",
        "!a",
        "a b",
        "in (x)",
        "A",
        "a.b",
        "x,orca-owner!=y",
    ] {
        let spec = MachineSpec::new(ctx.name(0), &ctx.setup.amd64_type, &ctx.setup.location, bad);
        match p.create(&spec).await {
            Err(Error::InvalidSpec { field, .. }) if field == "pool" => {}
            other => {
                return Err(Verdict::Fail(format!(
                    "create in pool {bad:?} gave {other:?}"
                )))
            }
        }
        match p.machines(bad).await {
            Err(Error::InvalidSpec { field, .. }) if field == "pool" => {}
            other => return Err(Verdict::Fail(format!("machines({bad:?}) gave {other:?}"))),
        }
    }
    for bad in ["", "a/b", "a b", "x?y"] {
        match p.delete(bad).await {
            Err(Error::InvalidSpec { field, .. }) if field == "id" => {}
            other => return Err(Verdict::Fail(format!("delete({bad:?}) gave {other:?}"))),
        }
    }
    for bad in ["a,b", "a=b", "!a", "Owner"] {
        match ctx.h.provider(bad).await {
            Err(Error::InvalidSpec { field, .. }) if field == "owner" => {}
            other => {
                return Err(Verdict::Fail(format!(
                    "a provider for owner {bad:?} gave {:?}",
                    other.map(|_| "a provider")
                )))
            }
        }
    }
    let after = ctx.h.requests().await;
    match (before, after) {
        (Ok(b), Ok(a)) => ensure!(a == b, "invalid input made {} request(s)", a - b),
        (Err(s), _) | (_, Err(s)) => {
            return Err(Verdict::Skip(format!(
                "errors were right, but 'before any call' is unproven: {}",
                s.0
            )))
        }
    }
    Ok(())
}

async fn lifecycle(ctx: &Ctx<'_>) -> Checked {
    let p = ctx.provider(&ctx.owner_a).await?;
    let pool = ctx.pool(0);
    let spec = ctx.spec(0, &pool);
    let m = made(&*p, &spec).await?;
    ensure!(
        m.name == spec.name,
        "made {:?}, wanted {:?}",
        m.name,
        spec.name
    );
    ensure!(m.pool == pool, "pool {:?}, wanted {pool:?}", m.pool);
    ensure!(
        m.machine_type == spec.machine_type,
        "type {:?}",
        m.machine_type
    );
    ensure!(m.location == spec.location, "location {:?}", m.location);
    ensure!(!m.id.is_empty(), "empty id");
    let listed = p.machines(&pool).await?;
    ensure!(
        ids(&listed) == vec![m.id.as_str()],
        "listed {:?}, made {}",
        ids(&listed),
        m.id
    );
    let seen = &listed[0];
    ensure!(
        seen.status != Status::Deleting && !seen.cloud_status.is_empty(),
        "listed status {} ({:?})",
        seen.status,
        seen.cloud_status
    );
    ensure!(p.delete(&m.id).await?, "delete answered false");
    let after = p.machines(&pool).await?;
    ensure!(
        after
            .iter()
            .all(|x| x.id != m.id || x.status == Status::Deleting),
        "still listed after delete: {:?}",
        ids(&after)
    );
    Ok(())
}

async fn labels_on_create(ctx: &Ctx<'_>) -> Checked {
    for owner in [ctx.owner_a.as_str(), ""] {
        let p = ctx.provider(owner).await?;
        let pool = ctx.pool(if owner.is_empty() { 1 } else { 0 });
        let m = made(&*p, &ctx.spec(if owner.is_empty() { 1 } else { 0 }, &pool)).await?;
        let listed = p.machines(&pool).await?;
        for l in [
            &m.labels,
            &listed.first().map(|x| x.labels.clone()).unwrap_or_default(),
        ] {
            ensure!(
                l.get(ORCA_LABEL).map(String::as_str) == Some(ORCA_VALUE),
                "no {ORCA_LABEL}={ORCA_VALUE} in {l:?}"
            );
            ensure!(
                l.get(POOL_LABEL) == Some(&pool),
                "no {POOL_LABEL}={pool} in {l:?}"
            );
            if owner.is_empty() {
                ensure!(
                    !l.contains_key(OWNER_LABEL),
                    "ownerless machine has {OWNER_LABEL}: {l:?}"
                );
            } else {
                ensure!(
                    l.get(OWNER_LABEL).map(String::as_str) == Some(owner),
                    "no {OWNER_LABEL}={owner} in {l:?}"
                );
            }
        }
    }
    Ok(())
}

async fn pool_isolation(ctx: &Ctx<'_>) -> Checked {
    let p = ctx.provider(&ctx.owner_a).await?;
    let (p0, p1) = (ctx.pool(0), ctx.pool(1));
    let a = made(&*p, &ctx.spec(0, &p0)).await?;
    let b = made(&*p, &ctx.spec(1, &p1)).await?;
    ensure!(
        ids(&p.machines(&p0).await?) == vec![a.id.as_str()],
        "pool {p0} is not just {}",
        a.id
    );
    ensure!(
        ids(&p.machines(&p1).await?) == vec![b.id.as_str()],
        "pool {p1} is not just {}",
        b.id
    );
    ensure!(
        p.machines(&ctx.pool(2)).await?.is_empty(),
        "an unused pool lists machines"
    );
    Ok(())
}

async fn owner_isolation(ctx: &Ctx<'_>) -> Checked {
    let pa = ctx.provider(&ctx.owner_a).await?;
    let pb = ctx.provider(&ctx.owner_b).await?;
    let none = ctx.provider("").await?;
    let pool = ctx.pool(0);
    let a = made(&*pa, &ctx.spec(0, &pool)).await?;
    let b = made(&*pb, &ctx.spec(1, &pool)).await?;
    let n = made(&*none, &ctx.spec(2, &pool)).await?;
    ensure!(
        ids(&pa.machines(&pool).await?) == vec![a.id.as_str()],
        "owner a sees more than its own"
    );
    ensure!(
        ids(&pb.machines(&pool).await?) == vec![b.id.as_str()],
        "owner b sees more than its own"
    );
    ensure!(
        ids(&none.machines(&pool).await?) == vec![n.id.as_str()],
        "the empty owner sees owned machines"
    );
    Ok(())
}

async fn foreign_delete(ctx: &Ctx<'_>) -> Checked {
    let pa = ctx.provider(&ctx.owner_a).await?;
    let pb = ctx.provider(&ctx.owner_b).await?;
    let none = ctx.provider("").await?;
    let pool = ctx.pool(0);
    let a = made(&*pa, &ctx.spec(0, &pool)).await?;
    for (who, p) in [("owner b", &pb), ("the empty owner", &none)] {
        match p.delete(&a.id).await {
            Err(Error::NotOwned { .. }) => {}
            other => {
                return Err(Verdict::Fail(format!(
                    "{who} deleting a's machine gave {other:?}"
                )))
            }
        }
    }
    let still = pa.machines(&pool).await?;
    ensure!(
        ids(&still) == vec![a.id.as_str()],
        "a's machine is gone after a refused delete"
    );
    ensure!(
        still[0].status != Status::Deleting,
        "a's machine is deleting after a refused delete"
    );
    Ok(())
}

async fn delete_twice(ctx: &Ctx<'_>) -> Checked {
    let p = ctx.provider(&ctx.owner_a).await?;
    let pool = ctx.pool(0);
    let m = made(&*p, &ctx.spec(0, &pool)).await?;
    ensure!(p.delete(&m.id).await?, "first delete answered false");
    ensure!(p.delete(&m.id).await?, "second delete answered false");
    ensure!(
        p.delete(&ctx.setup.unknown_id).await?,
        "delete of an unknown id answered false"
    );
    Ok(())
}

async fn every_page(ctx: &Ctx<'_>) -> Checked {
    let p = ctx.provider(&ctx.owner_a).await?;
    let pool = ctx.pool(0);
    let mut want = Vec::new();
    for n in 0..3 {
        want.push(made(&*p, &ctx.spec(n, &pool)).await?.id);
    }
    // Another owner's machine in the same pool must not fill a page either.
    let pb = ctx.provider(&ctx.owner_b).await?;
    made(&*pb, &ctx.spec(3, &pool)).await?;
    want.sort();
    let paged = ctx.h.paged_provider(&ctx.owner_a, 1).await?;
    let before = ctx.h.requests().await;
    let got = paged.machines(&pool).await?;
    let mut got_ids: Vec<String> = got.iter().map(|m| m.id.clone()).collect();
    got_ids.sort();
    ensure!(
        got_ids == want,
        "page size 1 listed {got_ids:?}, made {want:?}"
    );
    if let (Ok(b), Ok(a)) = (before, ctx.h.requests().await) {
        ensure!(
            a - b >= 3,
            "page size 1 listed 3 machines in {} request(s)",
            a - b
        );
    }
    Ok(())
}

async fn arch_both(ctx: &Ctx<'_>) -> Checked {
    let p = ctx.provider(&ctx.owner_a).await?;
    let amd = p.arch(&ctx.setup.amd64_type).await?;
    let arm = p.arch(&ctx.setup.arm64_type).await?;
    ensure!(
        amd == Arch::Amd64,
        "{} is {amd}, not amd64",
        ctx.setup.amd64_type
    );
    ensure!(
        arm == Arch::Arm64,
        "{} is {arm}, not arm64",
        ctx.setup.arm64_type
    );
    let before = ctx.h.requests().await;
    ensure!(
        p.arch(&ctx.setup.arm64_type).await? == Arch::Arm64,
        "second answer differs"
    );
    if let (Ok(b), Ok(a)) = (before, ctx.h.requests().await) {
        ensure!(
            a == b,
            "arch is not cached: a second call made {} request(s)",
            a - b
        );
    }
    match p.arch("no-such-type-zz9").await {
        Err(Error::NotFound { .. } | Error::InvalidSpec { .. }) => {}
        other => {
            return Err(Verdict::Fail(format!(
                "arch of an unknown type gave {other:?}"
            )))
        }
    }
    let pool = ctx.pool(0);
    let spec = MachineSpec::new(
        ctx.name(0),
        &ctx.setup.arm64_type,
        &ctx.setup.location,
        &pool,
    );
    let m = made(&*p, &spec).await?;
    ensure!(
        m.machine_type == ctx.setup.arm64_type,
        "arm64 machine has type {}",
        m.machine_type
    );
    Ok(())
}

async fn no_stock(ctx: &Ctx<'_>) -> Checked {
    let p = ctx.provider(&ctx.owner_a).await?;
    let (t, l) = (&ctx.setup.amd64_type, &ctx.setup.location);
    ctx.h.exhaust_stock(t, l).await?;
    let pool = ctx.pool(0);
    let got = p.create(&ctx.spec(0, &pool)).await;
    let restored = ctx.h.restore_stock(t, l).await;
    match got {
        Ok(Created::NoStock {
            machine_type,
            location,
            ..
        }) => {
            ensure!(
                &machine_type == t && &location == l,
                "no stock named {machine_type} in {location}"
            )
        }
        other => {
            return Err(Verdict::Fail(format!(
                "create without stock gave {other:?}"
            )))
        }
    }
    ensure!(
        p.machines(&pool).await?.is_empty(),
        "a create without stock left a machine"
    );
    restored?;
    made(&*p, &ctx.spec(1, &pool)).await?;
    Ok(())
}

async fn retried_create(ctx: &Ctx<'_>) -> Checked {
    let p = ctx.provider(&ctx.owner_a).await?;
    let pool = ctx.pool(0);
    let spec = ctx.spec(0, &pool);
    ctx.h.lose_next_create_answer().await?;
    let first = p.create(&spec).await;
    match &first {
        Ok(Created::Machine(_)) => {}
        Err(e) if e.is_retryable() => {}
        other => {
            return Err(Verdict::Fail(format!(
                "a create whose answer was lost gave {other:?}, neither the machine nor a retryable error"
            )))
        }
    }
    let second = made(&*p, &spec).await?;
    let listed = p.machines(&pool).await?;
    ensure!(
        ids(&listed) == vec![second.id.as_str()],
        "a retried create left {} machine(s): {:?}",
        listed.len(),
        ids(&listed)
    );
    if let Ok(Created::Machine(m)) = first {
        ensure!(m.id == second.id, "the two answers name different machines");
    }
    Ok(())
}

async fn capabilities(ctx: &Ctx<'_>) -> Checked {
    let p = ctx.provider(&ctx.owner_a).await?;
    let caps = p.capabilities();
    let pool = ctx.pool(0);
    let m = made(&*p, &ctx.spec(0, &pool)).await?;
    let refused = |r: crate::Result<()>, what: &str| -> Checked {
        match r {
            Err(Error::Unsupported { .. }) => Ok(()),
            other => Err(Verdict::Fail(format!(
                "{what} is denied but gave {other:?}"
            ))),
        }
    };
    let before = ctx.h.requests().await;
    if !caps.start_stop {
        refused(p.stop(&m.id).await.map(|_| ()), "stop")?;
        refused(p.start(&m.id).await.map(|_| ()), "start")?;
    }
    if !caps.resize {
        refused(
            p.resize(&m.id, &ctx.setup.resize_to).await.map(|_| ()),
            "resize",
        )?;
    }
    if !caps.hourly_price {
        let r = p
            .hourly_price(&ctx.setup.amd64_type, &ctx.setup.location)
            .await;
        refused(r.map(|_| ()), "hourly_price")?;
    }
    if let (Ok(b), Ok(a)) = (before, ctx.h.requests().await) {
        ensure!(a == b, "denied capabilities made {} request(s)", a - b);
    }
    if caps.start_stop {
        let stopped = p.stop(&m.id).await?;
        ensure!(
            stopped.status == Status::Stopped,
            "after stop: {}",
            stopped.status
        );
        let listed = p.machines(&pool).await?;
        ensure!(
            listed.len() == 1 && listed[0].status == Status::Stopped,
            "a stopped machine is listed as {:?}",
            listed.iter().map(|m| m.status).collect::<Vec<_>>()
        );
        let started = p.start(&m.id).await?;
        ensure!(
            matches!(started.status, Status::Running | Status::Starting),
            "after start: {}",
            started.status
        );
    }
    if caps.resize {
        let r = p.resize(&m.id, &ctx.setup.resize_to).await?;
        ensure!(
            r.machine.machine_type == ctx.setup.resize_to,
            "resized to {}",
            r.machine.machine_type
        );
        ensure!(
            r.caused_downtime,
            "resizing a running machine reported no downtime"
        );
        if caps.start_stop {
            p.stop(&m.id).await?;
            let r = p.resize(&m.id, &ctx.setup.amd64_type).await?;
            ensure!(
                !r.caused_downtime,
                "resizing a stopped machine reported downtime"
            );
        }
    }
    if caps.hourly_price {
        let price = p
            .hourly_price(&ctx.setup.amd64_type, &ctx.setup.location)
            .await?;
        ensure!(
            price.hourly > 0.0 && price.hourly < 100.0 && price.currency.len() == 3,
            "implausible price {price:?}"
        );
    }
    Ok(())
}

/// The harness of the in-memory provider: every hook is available.
#[derive(Debug, Clone, Default)]
pub struct MemoryHarness {
    cloud: MemoryCloud,
}

impl MemoryHarness {
    /// A harness on a fresh in-memory cloud.
    pub fn new() -> Self {
        Self::default()
    }

    /// The cloud under test.
    pub fn cloud(&self) -> &MemoryCloud {
        &self.cloud
    }
}

#[async_trait]
impl Harness for MemoryHarness {
    fn name(&self) -> String {
        "memory".into()
    }

    fn setup(&self) -> Setup {
        Setup {
            amd64_type: "amd64-small".into(),
            arm64_type: "arm64-small".into(),
            location: "zone-a".into(),
            resize_to: "amd64-large".into(),
            unknown_id: "m-99999999".into(),
        }
    }

    async fn provider(&self, owner: &str) -> crate::Result<Box<dyn Provider>> {
        Ok(Box::new(self.cloud.provider(owner)?))
    }

    async fn paged_provider(&self, owner: &str, page_size: u32) -> Hook<Box<dyn Provider>> {
        let p = self
            .cloud
            .provider(owner)
            .map_err(|e| Skip::because(e.to_string()))?;
        Ok(Box::new(p.with_page_size(page_size as usize)))
    }

    async fn exhaust_stock(&self, machine_type: &str, location: &str) -> Hook<()> {
        self.cloud.set_stock(machine_type, location, 0);
        Ok(())
    }

    async fn restore_stock(&self, machine_type: &str, location: &str) -> Hook<()> {
        self.cloud.unlimited_stock(machine_type, location);
        Ok(())
    }

    async fn lose_next_create_answer(&self) -> Hook<()> {
        self.cloud
            .inject(Operation::Create, FaultKind::LoseAnswer, 1);
        Ok(())
    }

    async fn requests(&self) -> Hook<u64> {
        Ok(self.cloud.requests())
    }
}
