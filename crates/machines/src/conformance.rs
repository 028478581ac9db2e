//! The conformance suite (feature `conformance`): plain async functions over `&dyn Provider` that check
//! every line of the contract. The in-memory provider runs it, and every driver runs it against its
//! emulator or fake through a small [`Harness`].
//!
//! A hook that a backend cannot provide answers [`Skip`]; the check is then reported as skipped, by
//! name, in the output ([`Report`]), never passed silently. A check that could prove only a part
//! without it (say, that a refusal made no request, without a request count) still runs every other
//! assertion, then is reported as skipped with the unproven parts named.
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

use std::time::Duration;

use crate::arch::Arch;
use crate::error::{Error, ErrorKind};
use crate::ext::{FirewallPorts, FirewallRule};
use crate::labels::{Labels, ORCA_LABEL, ORCA_VALUE, OWNER_LABEL, POOL_LABEL};
use crate::machine::{Created, Machine, Status};
use crate::memory::{FaultKind, MemoryCloud, Operation};
use crate::provider::Provider;
use crate::spec::{MachineSpec, OPTION_NAMES};

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
    /// A boot image the backend accepts for `amd64_type` in its own form (for the `image` option).
    pub image: String,
    /// A machine type and a location the cloud knows, where it does not offer that type (`None`:
    /// the backend offers every type everywhere, and that part of the catalogue check stays
    /// unproven).
    pub unoffered: Option<(String, String)>,
    /// A boot image of architecture arm64 in the backend's own form, which a create of
    /// `amd64_type` must refuse (`None`: that part of the catalogue check stays unproven).
    pub arm64_image: Option<String>,
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

    /// Makes creates of the setup's `amd64_type` in its `location` (at least) be refused for an
    /// account limit (a quota, not capacity) until [`Harness::restore_quota`].
    async fn exceed_quota(&self) -> Hook<()> {
        Err(Skip::because("the backend cannot exceed a quota"))
    }

    /// Undoes [`Harness::exceed_quota`].
    async fn restore_quota(&self) -> Hook<()> {
        Err(Skip::because("the backend cannot restore a quota"))
    }

    /// Makes the next create happen in the cloud while its answer is lost (an ambiguous failure).
    async fn lose_next_create_answer(&self) -> Hook<()> {
        Err(Skip::because("the backend cannot lose an answer"))
    }

    /// Makes the next create request fail passingly without being served: the cloud answers it with
    /// a 503 (service unavailable) before doing anything, so the driver's retry policy retries it
    /// within the same create call.
    async fn refuse_next_create_unserved(&self) -> Hook<()> {
        Err(Skip::because("the backend cannot refuse a create unserved"))
    }

    /// Requests the backend has served so far, if it counts them.
    async fn requests(&self) -> Hook<u64> {
        Err(Skip::because("the backend does not count requests"))
    }

    /// Makes machines made from now on invisible to every read for `delay` after they are made, and
    /// answers "not found" to changes of them until then (EC2's eventual consistency);
    /// `Duration::ZERO` turns it off.
    async fn delay_visibility(&self, delay: Duration) -> Hook<()> {
        let _ = delay;
        Err(Skip::because("the backend cannot delay visibility"))
    }

    /// The sources the rule of admission group `group` admits on the subnet of `location`, as the
    /// backend holds them (`None` when there is no such rule): what proves that a refused admission
    /// changed nothing.
    async fn admitted_sources(&self, group: &str, location: &str) -> Hook<Option<Vec<String>>> {
        let _ = (group, location);
        Err(Skip::because("the backend cannot show an admission rule"))
    }

    /// Leaves in the backend what a create of `spec` for `owner` that was stopped before it asked
    /// for the machine leaves (its public address, security group, interface, boot disk, with the
    /// labels that create gives them), and answers what it left, one entry a piece in the
    /// harness's own words; an empty list when the backend's create makes nothing before its
    /// machine.
    async fn leave_pieces(&self, owner: &str, spec: &MachineSpec) -> Hook<Vec<String>> {
        let _ = (owner, spec);
        Err(Skip::because(
            "the backend cannot leave the pieces of a stopped create",
        ))
    }

    /// Of `pieces` (as [`Harness::leave_pieces`] answered them), those the backend still holds.
    async fn pieces_standing(&self, pieces: &[String]) -> Hook<Vec<String>> {
        let _ = pieces;
        Err(Skip::because("the backend cannot show pieces"))
    }

    /// Puts (makes or replaces) a firewall rule on the backend's network, as an operator would: what
    /// the firewall extension then reads and patches.
    async fn put_firewall_rule(&self, rule: FirewallRule) -> Hook<()> {
        let _ = rule;
        Err(Skip::because("the backend cannot put a firewall rule"))
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
        self.why(|o| match o {
            Outcome::Failed(why) => Some(why),
            _ => None,
        })
    }

    /// The checks that were skipped, with why.
    pub fn skipped(&self) -> Vec<(&'static str, String)> {
        self.why(|o| match o {
            Outcome::Skipped(why) => Some(why),
            _ => None,
        })
    }

    /// The checks whose outcome `pick` takes a reason from, with it.
    fn why(&self, pick: fn(&Outcome) -> Option<&String>) -> Vec<(&'static str, String)> {
        let picked = self
            .results
            .iter()
            .filter_map(|(n, o)| Some((*n, pick(o)?.clone())));
        picked.collect()
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

/// Fails the check, saying why.
macro_rules! fail {
    ($($fmt:tt)+) => {
        return Err(Verdict::Fail(format!($($fmt)+)))
    };
}

macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            fail!($($fmt)+);
        }
    };
}

/// The parts of a check that a missing hook left unproven. The check still runs to its end, so that
/// every assertion it can make may fail it; then it reports a skip naming those parts, not a pass.
#[derive(Debug, Default)]
struct Unproven(Vec<String>);

impl Unproven {
    /// `part` could not be shown, for the hook's reason `why`.
    fn note(&mut self, part: &str, why: Skip) {
        self.0.push(format!("{part} ({})", why.0));
    }

    /// `spent` requests were made by `what`, which must make none.
    fn no_requests(&mut self, spent: Hook<u64>, what: &str) -> Checked {
        match spent {
            Ok(n) => ensure!(n == 0, "{what} made {n} request(s)"),
            Err(why) => self.note(&format!("that {what} made no request"), why),
        }
        Ok(())
    }

    /// The check's end: passed, or skipped in part when something stayed unproven.
    fn end(self) -> Checked {
        if self.0.is_empty() {
            return Ok(());
        }
        Err(Verdict::Skip(format!(
            "the rest held, but unproven: {}",
            self.0.join("; ")
        )))
    }
}

/// Requests made between the counts `before` and `after`, when the backend counts them.
fn spent(before: Hook<u64>, after: Hook<u64>) -> Hook<u64> {
    Ok(after? - before?)
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
        Created::Adopted(m) => fail!(
            "a first create of {} answered an adopted machine {}",
            spec.name,
            m.id
        ),
        Created::NoStock { message, .. } => {
            fail!("create of {} reported no stock: {message}", spec.name)
        }
    }
}

/// Requests made by `f`, when the backend counts them.
async fn counted<T, F>(ctx: &Ctx<'_>, f: F) -> (T, Hook<u64>)
where
    F: std::future::Future<Output = T>,
{
    let before = ctx.h.requests().await;
    let out = f.await;
    let after = ctx.h.requests().await;
    (out, spent(before, after))
}

fn refused_as<T: std::fmt::Debug>(r: crate::Result<T>, field: &str, what: &str) -> Checked {
    match r {
        Err(Error::InvalidSpec { field: f, .. }) if f == field => Ok(()),
        other => fail!("{what} gave {other:?}, not an invalid {field}"),
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
    "refuses_to_change_another_owners_machine",
    "delete_twice_and_unknown_id",
    "lists_every_page",
    "arch_of_both_architectures",
    "refuses_what_the_catalogue_does_not_offer",
    "no_stock",
    "quota_is_not_capacity",
    "retried_create_makes_one_machine",
    "adopts_an_earlier_machine_after_a_passing_failure",
    "capabilities_are_truthful",
    "machine_facts",
    "reads_one_machine",
    "reads_a_machine_by_name",
    "deletes_what_a_create_made_by_name",
    "spec_options",
    "labels_on_an_existing_machine",
    "firewall_rules",
    "ssh_admission",
    "credit_balance",
    "survives_delayed_visibility",
];

/// The names of the extensions, in the order [`extensions`] lists them.
pub const EXTENSIONS: &[&str] = &[
    "machine_labels",
    "firewall_rules",
    "ssh_admission",
    "credit_balance",
];

/// The extensions `p` offers (of [`EXTENSIONS`], in that order). The extension checks pass where a
/// provider answers `None`, so a driver's conformance test asserts this set exactly: an extension the
/// driver stops offering by mistake then fails that test instead of passing silently.
///
/// ```
/// use orca_machines::conformance::{extensions, EXTENSIONS};
/// let p = orca_machines::memory::MemoryCloud::new().provider("stack-1").unwrap();
/// assert_eq!(extensions(&p), EXTENSIONS);
/// ```
pub fn extensions(p: &dyn Provider) -> Vec<&'static str> {
    crate::provider::offered_extensions(p)
}

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
            "refuses_to_change_another_owners_machine" => foreign_change(&ctx).await,
            "delete_twice_and_unknown_id" => delete_twice(&ctx).await,
            "lists_every_page" => every_page(&ctx).await,
            "arch_of_both_architectures" => arch_both(&ctx).await,
            "refuses_what_the_catalogue_does_not_offer" => catalogue_refusals(&ctx).await,
            "no_stock" => no_stock(&ctx).await,
            "quota_is_not_capacity" => quota(&ctx).await,
            "retried_create_makes_one_machine" => retried_create(&ctx).await,
            "adopts_an_earlier_machine_after_a_passing_failure" => adopts_after_passing(&ctx).await,
            "capabilities_are_truthful" => capabilities(&ctx).await,
            "machine_facts" => machine_facts(&ctx).await,
            "reads_one_machine" => reads_one(&ctx).await,
            "reads_a_machine_by_name" => reads_by_name(&ctx).await,
            "deletes_what_a_create_made_by_name" => deletes_by_name(&ctx).await,
            "spec_options" => spec_options(&ctx).await,
            "labels_on_an_existing_machine" => labels_existing(&ctx).await,
            "firewall_rules" => firewall(&ctx).await,
            "ssh_admission" => admission(&ctx).await,
            "credit_balance" => credit(&ctx).await,
            "survives_delayed_visibility" => {
                let r = delayed_visibility(&ctx).await;
                let _ = ctx.h.delay_visibility(Duration::ZERO).await;
                r
            }
            other => Err(Verdict::Fail(format!("no check named {other}"))),
        };
        let cleanup = clean_up(&ctx).await;
        let outcome = match (verdict, cleanup) {
            (Ok(()), Ok(())) => Outcome::Passed,
            (Ok(()), Err(e)) => Outcome::Failed(format!("clean-up failed: {e}")),
            (Err(Verdict::Skip(why)), _) => Outcome::Skipped(why),
            (Err(Verdict::Fail(why)), _) => Outcome::Failed(why),
        };
        let said = match &outcome {
            Outcome::Passed => "ok".to_string(),
            Outcome::Skipped(why) => format!("SKIPPED ({why})"),
            Outcome::Failed(why) => format!("FAILED: {why}"),
        };
        println!("conformance {}: {} ... {said}", h.name(), ctx.check);
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
            other => fail!("name {bad:?} gave {other:?}"),
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
            other => fail!("create in pool {bad:?} gave {other:?}"),
        }
        match p.machines(bad).await {
            Err(Error::InvalidSpec { field, .. }) if field == "pool" => {}
            other => fail!("machines({bad:?}) gave {other:?}"),
        }
    }
    for bad in ["", ".", "..", "a/b", "a b", "x?y"] {
        match p.arch(bad).await {
            Err(Error::InvalidSpec { field, .. }) if field == "machine_type" => {}
            other => fail!("arch({bad:?}) gave {other:?}"),
        }
        let spec = MachineSpec::new(ctx.name(0), bad, &ctx.setup.location, &pool);
        match p.create(&spec).await {
            Err(Error::InvalidSpec { field, .. }) if field == "machine_type" => {}
            other => fail!("create of machine type {bad:?} gave {other:?}"),
        }
        let spec = MachineSpec::new(ctx.name(0), &ctx.setup.amd64_type, bad, &pool);
        match p.create(&spec).await {
            Err(Error::InvalidSpec { field, .. }) if field == "location" => {}
            other => fail!("create in location {bad:?} gave {other:?}"),
        }
    }
    for bad in ["", "a/b", "a b", "x?y"] {
        match p.delete(bad).await {
            Err(Error::InvalidSpec { field, .. }) if field == "id" => {}
            other => fail!("delete({bad:?}) gave {other:?}"),
        }
    }
    for bad in ["a,b", "a=b", "!a", "Owner"] {
        match ctx.h.provider(bad).await {
            Err(Error::InvalidSpec { field, .. }) if field == "owner" => {}
            other => fail!(
                "a provider for owner {bad:?} gave {:?}",
                other.map(|_| "a provider")
            ),
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
            other => fail!("{who} deleting a's machine gave {other:?}"),
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

async fn foreign_change(ctx: &Ctx<'_>) -> Checked {
    let pa = ctx.provider(&ctx.owner_a).await?;
    let pb = ctx.provider(&ctx.owner_b).await?;
    let caps = pb.capabilities();
    let pool = ctx.pool(0);
    let a = made(&*pa, &ctx.spec(0, &pool)).await?;
    let not_owned = |r: crate::Result<()>, what: &str| -> Checked {
        match r {
            Err(Error::NotOwned { .. }) => Ok(()),
            other => fail!("owner b's {what} of a's machine gave {other:?}, not NotOwned"),
        }
    };
    if caps.start_stop {
        not_owned(pb.stop(&a.id).await.map(|_| ()), "stop")?;
        not_owned(pb.start(&a.id).await.map(|_| ()), "start")?;
    }
    if caps.resize {
        not_owned(
            pb.resize(&a.id, &ctx.setup.resize_to).await.map(|_| ()),
            "resize",
        )?;
    }
    let after = pa.machine(&a.id).await?;
    ensure!(
        after
            .as_ref()
            .is_some_and(|m| m.machine_type == a.machine_type
                && matches!(m.status, Status::Running | Status::Starting)),
        "a's machine changed after b's refused calls: {after:?}"
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
    let mut unproven = Unproven::default();
    match spent(before, ctx.h.requests().await) {
        Ok(n) => ensure!(n >= 3, "page size 1 listed 3 machines in {n} request(s)"),
        Err(why) => unproven.note("that each page was its own request", why),
    }
    unproven.end()
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
    let mut unproven = Unproven::default();
    unproven.no_requests(
        spent(before, ctx.h.requests().await),
        "a second arch of one type (cached)",
    )?;
    match p.arch("no-such-type-zz9").await {
        Err(Error::NotFound { .. } | Error::InvalidSpec { .. }) => {}
        other => fail!("arch of an unknown type gave {other:?}"),
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
    unproven.end()
}

/// What the cloud's catalogue refuses, each before a machine is made: a type the cloud does not know
/// and a location it does not know are bad input naming the field; a type it offers elsewhere but
/// not in the spec's location is no stock there (scoped to type and location, so that a caller
/// moves on to another offering, as with a location out of room); an image of the other
/// architecture than the type is bad input naming the image.
async fn catalogue_refusals(ctx: &Ctx<'_>) -> Checked {
    let p = ctx.provider(&ctx.owner_a).await?;
    let pool = ctx.pool(0);
    let s = &ctx.setup;
    let spec = |n, machine_type: &str, location: &str| {
        MachineSpec::new(ctx.name(n), machine_type, location, &pool)
            .with_user_data("#cloud-config\n")
    };
    for (field, got) in [
        (
            "machine_type",
            p.create(&spec(0, "zz9-nano", &s.location)).await,
        ),
        (
            "location",
            p.create(&spec(1, &s.amd64_type, "zz-nowhere9-z")).await,
        ),
    ] {
        match got {
            Err(e) if invalid_field(&e) == Some(field) => {
                ensure!(
                    e.made_nothing(),
                    "an unknown {field}'s refusal {e:?} may have made something"
                )
            }
            other => fail!("a create with an unknown {field} gave {other:?}"),
        }
    }
    let mut unproven = Unproven::default();
    match &s.unoffered {
        Some((t, l)) => match p.create(&spec(2, t, l)).await {
            Ok(Created::NoStock {
                machine_type,
                location,
                left,
                ..
            }) => ensure!(
                (&machine_type, &location) == (t, l) && left.is_empty(),
                "{t}, not offered in {l}, gave no stock of {machine_type} in {location}, left {left:?}"
            ),
            other => fail!("a create of {t}, not offered in {l}, gave {other:?}"),
        },
        None => unproven.note(
            "a type not offered in the location",
            Skip::because("the backend offers every type everywhere"),
        ),
    }
    match &s.arm64_image {
        Some(image) => {
            match p
                .create(&spec(3, &s.amd64_type, &s.location).with_image(image))
                .await
            {
                Err(e) if invalid_field(&e) == Some("image") => ensure!(
                    e.made_nothing(),
                    "the refusal of an arm64 image for an amd64 type {e:?} may have made something"
                ),
                other => fail!(
                    "a create of {} from arm64 image {image} gave {other:?}",
                    s.amd64_type
                ),
            }
        }
        None => unproven.note(
            "an image of the other architecture",
            Skip::because("the backend names no arm64 image"),
        ),
    }
    let left = p.machines(&pool).await?;
    ensure!(
        left.is_empty(),
        "refused creates left {:?}",
        left.iter().map(|m| &m.name).collect::<Vec<_>>()
    );
    unproven.end()
}

/// The field an [`Error::InvalidSpec`] names.
fn invalid_field(e: &Error) -> Option<&str> {
    match e {
        Error::InvalidSpec { field, .. } => Some(field),
        _ => None,
    }
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
        other => fail!("create without stock gave {other:?}"),
    }
    ensure!(
        p.machines(&pool).await?.is_empty(),
        "a create without stock left a machine"
    );
    restored?;
    made(&*p, &ctx.spec(1, &pool)).await?;
    Ok(())
}

/// A create refused for an account limit is `Error::Quota`, never no stock (another location will
/// not help), says it made nothing, and leaves nothing; once the limit allows, the next create
/// makes its machine.
async fn quota(ctx: &Ctx<'_>) -> Checked {
    let p = ctx.provider(&ctx.owner_a).await?;
    ctx.h.exceed_quota().await?;
    let pool = ctx.pool(0);
    let got = p.create(&ctx.spec(0, &pool)).await;
    let restored = ctx.h.restore_quota().await;
    match got {
        Err(e) if e.kind() == ErrorKind::Quota => ensure!(
            e.made_nothing(),
            "a create refused for a quota may have made something: {e:?}"
        ),
        other => fail!("a create past a quota gave {other:?}"),
    }
    ensure!(
        p.machines(&pool).await?.is_empty(),
        "a create refused for a quota left a machine"
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
        other => fail!("a create whose answer was lost gave {other:?}, neither the machine nor a retryable error"),
    }
    let second = match p.create(&spec).await? {
        Created::Adopted(m) => m,
        other => fail!(
            "a create repeated after the machine was made gave {other:?}, not the machine adopted"
        ),
    };
    let listed = p.machines(&pool).await?;
    ensure!(
        ids(&listed) == vec![second.id.as_str()],
        "a retried create left {} machine(s): {:?}",
        listed.len(),
        ids(&listed)
    );
    match first {
        Ok(Created::Machine(m)) => {
            ensure!(m.id == second.id, "the two answers name different machines")
        }
        Ok(Created::Adopted(m)) => fail!(
            "the first create answered its own machine {} as adopted",
            m.id
        ),
        _ => {}
    }
    Ok(())
}

/// A create whose attempt failed passingly (the cloud answered without acting) and whose retry then
/// meets the machine an earlier create of the same spec made: that machine is the earlier call's
/// (`Created::Adopted`), however the failure looked.
async fn adopts_after_passing(ctx: &Ctx<'_>) -> Checked {
    let p = ctx.provider(&ctx.owner_a).await?;
    let pool = ctx.pool(0);
    let spec = ctx.spec(0, &pool);
    let first = made(&*p, &spec).await?;
    ctx.h.refuse_next_create_unserved().await?;
    match p.create(&spec).await? {
        Created::Adopted(m) => ensure!(
            m.id == first.id,
            "a repeated create adopted {}, not the earlier call's {}",
            m.id,
            first.id
        ),
        other => fail!(
            "a create repeated after a passing failure answered {other:?}, not the earlier call's \
             machine {} adopted",
            first.id
        ),
    }
    let listed = p.machines(&pool).await?;
    ensure!(
        ids(&listed) == vec![first.id.as_str()],
        "a create repeated after a passing failure left {} machine(s): {:?}",
        listed.len(),
        ids(&listed)
    );
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
            other => fail!("{what} is denied but gave {other:?}"),
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
    let mut unproven = Unproven::default();
    if !(caps.start_stop && caps.resize && caps.hourly_price) {
        unproven.no_requests(
            spent(before, ctx.h.requests().await),
            "refusing the denied capabilities",
        )?;
    }
    if caps.start_stop {
        let stopped = p.stop(&m.id).await?;
        ensure!(
            stopped.status == Status::Stopped,
            "after stop: {}",
            stopped.status
        );
        if caps.power_times {
            let read = p.machine(&m.id).await?.unwrap_or(stopped.clone());
            ensure!(
                read.stopped_at.is_some() && read.started_at.is_some(),
                "power_times is claimed but a stopped machine reports start {:?} and stop {:?}",
                read.started_at,
                read.stopped_at
            );
        }
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
    unproven.end()
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
            image: "ubuntu-24.04".into(),
            unoffered: Some(("amd64-metal".into(), "zone-a".into())),
            arm64_image: Some("ubuntu-24.04-arm64".into()),
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

    async fn exceed_quota(&self) -> Hook<()> {
        self.cloud.set_machine_limit(Some(0));
        Ok(())
    }

    async fn restore_quota(&self) -> Hook<()> {
        self.cloud.set_machine_limit(None);
        Ok(())
    }

    async fn lose_next_create_answer(&self) -> Hook<()> {
        self.cloud
            .inject(Operation::Create, FaultKind::LoseAnswer, 1);
        Ok(())
    }

    async fn refuse_next_create_unserved(&self) -> Hook<()> {
        self.cloud
            .inject(Operation::Create, FaultKind::Error(ErrorKind::Transient), 1);
        Ok(())
    }

    async fn requests(&self) -> Hook<u64> {
        Ok(self.cloud.requests())
    }

    async fn put_firewall_rule(&self, rule: FirewallRule) -> Hook<()> {
        self.cloud.put_firewall_rule(rule);
        Ok(())
    }

    async fn delay_visibility(&self, delay: Duration) -> Hook<()> {
        self.cloud.set_visibility_delay(delay);
        Ok(())
    }

    async fn leave_pieces(&self, _owner: &str, _spec: &MachineSpec) -> Hook<Vec<String>> {
        // The in-memory cloud's create makes its machine and nothing beside it.
        Ok(Vec::new())
    }

    async fn pieces_standing(&self, _pieces: &[String]) -> Hook<Vec<String>> {
        Ok(Vec::new())
    }

    async fn admitted_sources(&self, group: &str, location: &str) -> Hook<Option<Vec<String>>> {
        Ok(self
            .cloud
            .subnet_group(location)
            .rules
            .into_iter()
            .find(|r| r.name == group)
            .map(|r| r.sources))
    }
}

fn plausible_time(t: Option<crate::machine::Timestamp>, what: &str) -> Checked {
    let now = chrono::Utc::now();
    match t {
        Some(t) if (t - now).num_hours().abs() <= 24 => Ok(()),
        other => fail!("{what} is {other:?}, not within a day of now ({now})"),
    }
}

async fn machine_facts(ctx: &Ctx<'_>) -> Checked {
    let p = ctx.provider(&ctx.owner_a).await?;
    let caps = p.capabilities();
    let pool = ctx.pool(0);
    let made = made(&*p, &ctx.spec(0, &pool)).await?;
    let listed = p.machines(&pool).await?;
    let read = p.machine(&made.id).await?;
    for (how, m) in [
        ("made", Some(&made)),
        ("listed", listed.first()),
        ("read", read.as_ref()),
    ] {
        let Some(m) = m else {
            fail!("the machine was not {how}");
        };
        plausible_time(m.created_at, &format!("created_at ({how})"))?;
        ensure!(
            !m.fqdn.is_empty() && m.fqdn.contains('.'),
            "fqdn ({how}) is {:?}",
            m.fqdn
        );
        if caps.private_address {
            ensure!(
                m.private_address.parse::<std::net::IpAddr>().is_ok(),
                "private_address is claimed but ({how}) is {:?}",
                m.private_address
            );
        }
        if caps.power_times && matches!(m.status, Status::Running) {
            plausible_time(
                m.started_at,
                &format!("started_at of a running machine ({how})"),
            )?;
        }
    }
    Ok(())
}

async fn reads_one(ctx: &Ctx<'_>) -> Checked {
    let pa = ctx.provider(&ctx.owner_a).await?;
    let pb = ctx.provider(&ctx.owner_b).await?;
    let pool = ctx.pool(0);
    let a = made(&*pa, &ctx.spec(0, &pool)).await?;
    let got = pa.machine(&a.id).await?;
    ensure!(
        got.as_ref()
            .map(|m| (m.id.as_str(), m.name.as_str(), m.pool.as_str()))
            == Some((a.id.as_str(), a.name.as_str(), pool.as_str())),
        "machine({}) gave {got:?}",
        a.id
    );
    match pb.machine(&a.id).await {
        Err(Error::NotOwned { .. }) => {}
        other => fail!("another owner reading a's machine gave {other:?}, not NotOwned"),
    }
    let unknown = pa.machine(&ctx.setup.unknown_id).await?;
    ensure!(unknown.is_none(), "an unknown id read as {unknown:?}");
    let mut unproven = Unproven::default();
    let (r, n) = counted(ctx, pa.machine("a/b")).await;
    refused_as(r, "id", "machine(\"a/b\")")?;
    unproven.no_requests(n, "reading an invalid id")?;
    // Never a listing: with a page size of 1, reading one machine costs the same whatever the pool
    // holds.
    let never_a_listing = "that reading one machine is never a listing";
    match ctx.h.paged_provider(&ctx.owner_a, 1).await {
        Ok(paged) => {
            let (_, one) = counted(ctx, paged.machine(&a.id)).await;
            for n in 1..4 {
                made(&*pa, &ctx.spec(n, &pool)).await?;
            }
            let (again, four) = counted(ctx, paged.machine(&a.id)).await;
            ensure!(again?.is_some(), "the machine is gone");
            match (one, four) {
                (Ok(one), Ok(four)) => ensure!(
                    one == four,
                    "reading one machine cost {one} request(s) in a pool of 1 and {four} in a pool of 4"
                ),
                (Err(why), _) | (_, Err(why)) => unproven.note(never_a_listing, why),
            }
        }
        Err(why) => unproven.note(never_a_listing, why),
    }
    ensure!(pa.delete(&a.id).await?, "delete answered false");
    let after = pa.machine(&a.id).await?;
    ensure!(
        after.is_none() || after.as_ref().is_some_and(|m| m.status == Status::Deleting),
        "a deleted machine reads as {after:?}"
    );
    unproven.end()
}

/// A spec of `ctx` that sets option `name` (one of [`OPTION_NAMES`]) to a valid value.
async fn reads_by_name(ctx: &Ctx<'_>) -> Checked {
    let pa = ctx.provider(&ctx.owner_a).await?;
    let pb = ctx.provider(&ctx.owner_b).await?;
    let none = ctx.provider("").await?;
    let (p0, p1) = (ctx.pool(0), ctx.pool(1));
    let a = made(&*pa, &ctx.spec(0, &p0)).await?;
    let b = made(&*pb, &ctx.spec(1, &p0)).await?;
    let c = made(&*pa, &ctx.spec(2, &p1)).await?;
    let got = pa.machine_named(&p0, &a.name).await?;
    ensure!(
        got.as_ref()
            .map(|m| (m.id.as_str(), m.name.as_str(), m.pool.as_str()))
            == Some((a.id.as_str(), a.name.as_str(), p0.as_str())),
        "machine_named({p0}, {}) gave {got:?}",
        a.name
    );
    for (who, p, pool, name, why) in [
        ("owner a", &pa, &p1, &a.name, "its machine of another pool"),
        ("owner a", &pa, &p0, &c.name, "its machine of another pool"),
        ("owner a", &pa, &p0, &b.name, "another owner's machine"),
        ("owner b", &pb, &p0, &a.name, "another owner's machine"),
        ("the empty owner", &none, &p0, &a.name, "an owned machine"),
        ("owner a", &pa, &p0, &ctx.name(3), "a name nothing carries"),
    ] {
        let got = p.machine_named(pool, name).await?;
        ensure!(
            got.is_none(),
            "{who} reading {why} by name ({pool}, {name}) gave {got:?}, not None"
        );
    }
    let mut unproven = Unproven::default();
    let (r, n) = counted(ctx, pa.machine_named("a,b", &a.name)).await;
    refused_as(r, "pool", "machine_named(\"a,b\", ..)")?;
    unproven.no_requests(n, "an invalid pool")?;
    let (r, n) = counted(ctx, pa.machine_named(&p0, "Not-A-Name")).await;
    refused_as(r, "name", "machine_named(.., \"Not-A-Name\")")?;
    unproven.no_requests(n, "an invalid name")?;
    ensure!(pa.delete(&a.id).await?, "delete answered false");
    let after = pa.machine_named(&p0, &a.name).await?;
    ensure!(
        after.is_none() || after.as_ref().is_some_and(|m| m.status == Status::Deleting),
        "a deleted machine reads by name as {after:?}"
    );
    unproven.end()
}

/// `delete_named`: another pool's, another owner's and (for the empty owner) an owned machine are
/// left alone; this owner's machine of that name goes, with the pieces a create stopped before its
/// machine left; bad input is refused before any request.
async fn deletes_by_name(ctx: &Ctx<'_>) -> Checked {
    let pa = ctx.provider(&ctx.owner_a).await?;
    let pb = ctx.provider(&ctx.owner_b).await?;
    let none = ctx.provider("").await?;
    let (p0, p1) = (ctx.pool(0), ctx.pool(1));
    let a = made(&*pa, &ctx.spec(0, &p0)).await?;
    for (who, p, pool, why) in [
        ("owner a", &pa, &p1, "its name in another pool"),
        ("owner b", &pb, &p0, "another owner's machine"),
        ("the empty owner", &none, &p0, "an owned machine"),
    ] {
        let got = p.delete_named(pool, &a.name).await?;
        ensure!(
            !got,
            "{who} deleting {why} by name ({pool}, {}) answered true",
            a.name
        );
        let still = pa.machine(&a.id).await?;
        ensure!(
            still.as_ref().is_some_and(|m| m.status != Status::Deleting),
            "{who} deleting {why} by name touched it: it reads {still:?}"
        );
    }
    ensure!(
        pa.delete_named(&p0, &a.name).await?,
        "delete_named({p0}, {}) of a standing machine answered false",
        a.name
    );
    let after = pa.machine_named(&p0, &a.name).await?;
    ensure!(
        after.is_none() || after.as_ref().is_some_and(|m| m.status == Status::Deleting),
        "a machine deleted by name reads by name as {after:?}"
    );
    let mut unproven = Unproven::default();
    let (r, n) = counted(ctx, pa.delete_named("a,b", &a.name)).await;
    refused_as(r, "pool", "delete_named(\"a,b\", ..)")?;
    unproven.no_requests(n, "an invalid pool")?;
    let (r, n) = counted(ctx, pa.delete_named(&p0, "Not-A-Name")).await;
    refused_as(r, "name", "delete_named(.., \"Not-A-Name\")")?;
    unproven.no_requests(n, "an invalid name")?;
    pieces_go_by_name(ctx, &*pa, &*pb, &mut unproven).await?;
    unproven.end()
}

/// The pieces a create stopped before its machine left go with `delete_named` of their name, and
/// another owner's are left alone.
async fn pieces_go_by_name(
    ctx: &Ctx<'_>,
    pa: &dyn Provider,
    pb: &dyn Provider,
    unproven: &mut Unproven,
) -> Checked {
    let p2 = ctx.pool(2);
    let spec = ctx.spec(1, &p2);
    let pieces = match ctx.h.leave_pieces(&ctx.owner_a, &spec).await {
        Ok(pieces) => pieces,
        Err(why) => {
            unproven.note("that the pieces of a stopped create go by name", why);
            return Ok(());
        }
    };
    let standing = ctx.h.pieces_standing(&pieces).await?;
    ensure!(
        standing == pieces,
        "the harness left {pieces:?}, but {standing:?} stand"
    );
    ensure!(
        !pb.delete_named(&p2, &spec.name).await?,
        "another owner deleting the pieces {pieces:?} by name answered true"
    );
    let standing = ctx.h.pieces_standing(&pieces).await?;
    ensure!(
        standing == pieces,
        "another owner's delete_named removed some of {pieces:?}: {standing:?} stand"
    );
    let removed = pa.delete_named(&p2, &spec.name).await?;
    ensure!(
        removed != pieces.is_empty(),
        "delete_named of the pieces {pieces:?} answered {removed}"
    );
    let standing = ctx.h.pieces_standing(&pieces).await?;
    ensure!(
        standing.is_empty(),
        "delete_named left pieces of a stopped create: {standing:?}"
    );
    ensure!(
        !pa.delete_named(&p2, &spec.name).await?,
        "a second delete_named of {} found something again",
        spec.name
    );
    Ok(())
}

fn spec_with_option(ctx: &Ctx<'_>, n: u32, pool: &str, name: &str) -> MachineSpec {
    let s = ctx.spec(n, pool);
    match name {
        "labels" => s
            .with_label("conf-extra", "yes")
            .with_label("conf-empty", ""),
        "disk_gb" => s.with_disk_gb(30),
        "ssh_keys" => s.with_ssh_key(
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOrcaConformanceKeyNotARealOne00000 conformance",
        ),
        "network_tags" => s.with_network_tag("conf-tag"),
        "max_run_duration" => s.with_max_run_duration(Duration::from_secs(6 * 3600)),
        "image" => s.with_image(&ctx.setup.image),
        "ssh_sources" => s.with_ssh_sources(["203.0.113.7/32"]),
        "admission_group" => s.with_admission_group(format!("conf-{}", ctx.run)),
        _ => s,
    }
}

async fn spec_options(ctx: &Ctx<'_>) -> Checked {
    let p = ctx.provider(&ctx.owner_a).await?;
    let opts = p.capabilities().options;
    let pool = ctx.pool(0);
    let mut unproven = Unproven::default();
    for (i, name) in OPTION_NAMES.iter().enumerate() {
        let n = i as u32;
        let spec = spec_with_option(ctx, n, &pool, name);
        if !opts.honours(name) {
            let (r, count) = counted(ctx, p.create(&spec)).await;
            match r {
                Err(Error::Unsupported { .. }) => {}
                other => fail!("the option {name} is not honoured but create gave {other:?}"),
            }
            unproven.no_requests(count, &format!("refusing the option {name}"))?;
            continue;
        }
        if *name == "admission_group" {
            match p.ssh_admission() {
                Some(a) => {
                    a.admit_ssh(
                        spec.admission_group.as_deref().unwrap_or_default(),
                        &ctx.setup.location,
                        &["203.0.113.7/32".to_string()],
                        &[],
                    )
                    .await?;
                }
                None => fail!("admission_group is honoured without the ssh_admission extension"),
            }
        }
        let m = made(&*p, &spec).await?;
        if *name == "labels" {
            let read = p.machine(&m.id).await?.unwrap_or(m.clone());
            for l in [&m.labels, &read.labels] {
                ensure!(
                    l.get("conf-extra").map(String::as_str) == Some("yes")
                        && l.get("conf-empty").map(String::as_str) == Some(""),
                    "extra labels missing: {l:?}"
                );
                ensure!(
                    l.get(POOL_LABEL) == Some(&pool),
                    "orca's labels lost beside extra labels: {l:?}"
                );
            }
        }
        if *name == "max_run_duration" {
            let read = p.machine(&m.id).await?.unwrap_or(m.clone());
            ensure!(
                read.max_run_duration == spec.max_run_duration,
                "max_run_duration reads back as {:?}",
                read.max_run_duration
            );
        }
        p.delete(&m.id).await?;
    }
    unproven.end()
}

async fn labels_existing(ctx: &Ctx<'_>) -> Checked {
    let p = ctx.provider(&ctx.owner_a).await?;
    let Some(ext) = p.machine_labels() else {
        return Ok(());
    };
    let pool = ctx.pool(0);
    let m = made(&*p, &ctx.spec(0, &pool)).await?;
    let set = Labels::from([
        ("conf-state".to_string(), "creating".to_string()),
        ("conf-other".to_string(), "kept".to_string()),
    ]);
    let after = ext.set_labels(&m.id, &set, &[]).await?;
    ensure!(
        after.labels.get("conf-state").map(String::as_str) == Some("creating"),
        "set_labels answered {:?}",
        after.labels
    );
    let set = Labels::from([("conf-state".to_string(), "ready".to_string())]);
    let after = ext
        .set_labels(&m.id, &set, &["conf-other".to_string()])
        .await?;
    let read = p.machine(&m.id).await?.unwrap_or(after.clone());
    for l in [&after.labels, &read.labels] {
        ensure!(
            l.get("conf-state").map(String::as_str) == Some("ready")
                && !l.contains_key("conf-other")
                && l.get(POOL_LABEL) == Some(&pool)
                && l.get(OWNER_LABEL) == Some(&ctx.owner_a),
            "after a change and a removal: {l:?}"
        );
    }
    ensure!(
        ids(&p.machines(&pool).await?) == vec![m.id.as_str()],
        "the pool no longer lists the machine"
    );
    let mut unproven = Unproven::default();
    for (bad_set, bad_remove, what) in [
        (
            Labels::from([(POOL_LABEL.to_string(), "x".to_string())]),
            vec![],
            "setting orca-pool",
        ),
        (
            Labels::new(),
            vec![OWNER_LABEL.to_string()],
            "removing orca-owner",
        ),
        (
            Labels::from([("Bad".to_string(), "x".to_string())]),
            vec![],
            "an upper-case key",
        ),
    ] {
        let (r, n) = counted(ctx, ext.set_labels(&m.id, &bad_set, &bad_remove)).await;
        refused_as(r, "labels", what)?;
        unproven.no_requests(n, what)?;
    }
    let pb = ctx.provider(&ctx.owner_b).await?;
    if let Some(b) = pb.machine_labels() {
        match b.set_labels(&m.id, &set, &[]).await {
            Err(Error::NotOwned { .. }) => {}
            other => fail!("another owner labelling a's machine gave {other:?}"),
        }
    }
    match ext.set_labels(&ctx.setup.unknown_id, &set, &[]).await {
        Err(Error::NotFound { .. }) => {}
        other => fail!("labelling an unknown machine gave {other:?}"),
    }
    unproven.end()
}

async fn firewall(ctx: &Ctx<'_>) -> Checked {
    let p = ctx.provider(&ctx.owner_a).await?;
    let Some(fw) = p.firewall_rules() else {
        return Ok(());
    };
    let network = fw.network_name();
    let name = format!("conf-{}-ssh", ctx.run);
    let mut rule = FirewallRule::new(&name, &network);
    rule.allowed = vec![FirewallPorts::new("tcp", ["22"])];
    rule.source_ranges = vec!["198.51.100.9/32".into()];
    rule.target_tags = vec![format!("conf-{}", ctx.run)];
    ctx.h.put_firewall_rule(rule.clone()).await?;
    let got = fw.rule(&name).await?;
    let Some(got) = got else {
        fail!("rule {name} was put but reads as none");
    };
    ensure!(
        got.network == network && got.is_ingress() && !got.disabled,
        "rule reads as {got:?}"
    );
    ensure!(
        got.allowed == rule.allowed
            && got.source_ranges == rule.source_ranges
            && got.target_tags == rule.target_tags,
        "rule reads as {got:?}, put {rule:?}"
    );
    let all = fw.rules().await?;
    ensure!(
        all.iter().any(|r| r.name == name) && all.iter().all(|r| r.network == network),
        "rules() gave {:?}",
        all.iter()
            .map(|r| (&r.name, &r.network))
            .collect::<Vec<_>>()
    );
    let want = vec!["203.0.113.7/32".to_string()];
    let patched = fw.set_source_ranges(&name, &want).await?;
    ensure!(
        patched.source_ranges == want,
        "patched sources read {:?}",
        patched.source_ranges
    );
    let mut expected = got.clone();
    expected.source_ranges = want.clone();
    ensure!(
        patched == expected,
        "the patch changed more than the sources: {patched:?}"
    );
    let mut unproven = Unproven::default();
    for bad in [
        vec![],
        vec!["0.0.0.0/33".to_string()],
        vec!["2001:db8::/32".to_string()],
        vec!["host".to_string()],
    ] {
        let what = format!("set_source_ranges({bad:?})");
        let (r, n) = counted(ctx, fw.set_source_ranges(&name, &bad)).await;
        refused_as(r, "source_ranges", &what)?;
        unproven.no_requests(n, &what)?;
    }
    ensure!(
        fw.rule(&format!("conf-{}-none", ctx.run)).await?.is_none(),
        "a missing rule reads as some"
    );
    match fw
        .set_source_ranges(&format!("conf-{}-none", ctx.run), &want)
        .await
    {
        Err(Error::NotFound { .. }) => {}
        other => fail!("patching a missing rule gave {other:?}"),
    }
    let mut foreign = FirewallRule::new(format!("conf-{}-other", ctx.run), "conf-other-net");
    foreign.allowed = vec![FirewallPorts::new("tcp", ["22"])];
    foreign.source_ranges = vec!["198.51.100.9/32".into()];
    ctx.h.put_firewall_rule(foreign.clone()).await?;
    match fw.set_source_ranges(&foreign.name, &want).await {
        Err(Error::InvalidSpec { .. } | Error::NotFound { .. }) => {}
        other => fail!("patching a rule of another network gave {other:?}"),
    }
    let still = fw.rule(&foreign.name).await?;
    ensure!(
        still
            .as_ref()
            .is_none_or(|r| r.source_ranges == foreign.source_ranges),
        "a rule of another network was patched: {still:?}"
    );
    let net = fw.network().await?;
    ensure!(
        net.name == network,
        "network() is {:?}, machines go on {network:?}",
        net.name
    );
    unproven.end()
}

async fn admission(ctx: &Ctx<'_>) -> Checked {
    let p = ctx.provider(&ctx.owner_a).await?;
    let Some(adm) = p.ssh_admission() else {
        return Ok(());
    };
    let group = format!("conf-{}", ctx.run);
    let loc = &ctx.setup.location;
    let first = vec!["203.0.113.7/32".to_string()];
    let a = adm.admit_ssh(&group, loc, &first, &[]).await?;
    if let Some(rule) = &a.rule {
        ensure!(
            rule.priority >= 100,
            "the rule took priority {}",
            rule.priority
        );
    }
    let pool = ctx.pool(0);
    let opts = p.capabilities().options;
    let mut spec = ctx.spec(0, &pool);
    if opts.admission_group {
        spec = spec.with_admission_group(&group);
    }
    if opts.ssh_sources {
        spec = spec.with_ssh_sources(first.iter().cloned());
    }
    let m = made(&*p, &spec).await?;
    let second = vec!["198.51.100.0/24".to_string(), "203.0.113.8".to_string()];
    let b = adm
        .admit_ssh(
            &group,
            loc,
            &second,
            &[m.id.clone(), ctx.setup.unknown_id.clone()],
        )
        .await?;
    ensure!(
        b.rule.as_ref().map(|r| r.priority) == a.rule.as_ref().map(|r| r.priority),
        "a second admission moved the rule: {:?} then {:?}",
        a.rule,
        b.rule
    );
    ensure!(
        b.group == a.group,
        "the group changed: {} then {}",
        a.group,
        b.group
    );
    ensure!(
        b.readmitted == vec![m.id.clone()],
        "readmitted {:?}",
        b.readmitted
    );
    ensure!(
        b.missing == vec![ctx.setup.unknown_id.clone()],
        "missing {:?}",
        b.missing
    );
    let mut unproven = Unproven::default();
    for (bad, what) in [
        (vec![], "no source"),
        (vec!["1.2.3.4/33".to_string()], "a bad prefix"),
        (vec!["host".to_string()], "a host name"),
    ] {
        let (r, n) = counted(ctx, adm.admit_ssh(&group, loc, &bad, &[])).await;
        match r {
            Err(Error::InvalidSpec { .. }) => {}
            other => fail!("admitting {what} gave {other:?}"),
        }
        unproven.no_requests(n, &format!("admitting {what}"))?;
    }
    let pb = ctx.provider(&ctx.owner_b).await?;
    if let Some(bb) = pb.ssh_admission() {
        let before = ctx.h.admitted_sources(&group, loc).await?;
        let third = vec!["192.0.2.55/32".to_string()];
        match bb
            .admit_ssh(&group, loc, &third, std::slice::from_ref(&m.id))
            .await
        {
            Err(Error::NotOwned { .. }) => {}
            other => fail!("another owner readmitting a's machine gave {other:?}"),
        }
        let after = ctx.h.admitted_sources(&group, loc).await?;
        ensure!(
            before == after,
            "a refused admission changed the rule's sources: {before:?} then {after:?}"
        );
    }
    unproven.end()
}

async fn credit(ctx: &Ctx<'_>) -> Checked {
    let p = ctx.provider(&ctx.owner_a).await?;
    let Some(c) = p.credit_balance() else {
        return Ok(());
    };
    let b = c.balance().await?;
    ensure!(
        b.amount.is_finite()
            && b.currency.len() == 3
            && b.currency.chars().all(|c| c.is_ascii_uppercase()),
        "implausible balance {b:?}"
    );
    Ok(())
}

/// How long the suite keeps new machines invisible in the check `survives_delayed_visibility`.
pub const VISIBILITY_DELAY: Duration = Duration::from_millis(1000);

async fn delayed_visibility(ctx: &Ctx<'_>) -> Checked {
    let pa = ctx.provider(&ctx.owner_a).await?;
    let pb = ctx.provider(&ctx.owner_b).await?;
    ctx.h.delay_visibility(VISIBILITY_DELAY).await?;
    let pool = ctx.pool(0);
    // A create must not answer before the cloud shows the machine: a listing, a read, another
    // owner's delete and a delete right after it must all find it.
    let a = made(&*pa, &ctx.spec(0, &pool)).await?;
    let b = made(&*pa, &ctx.spec(1, &pool)).await?;
    let listed = pa.machines(&pool).await?;
    ensure!(
        listed.iter().any(|m| m.id == a.id) && listed.iter().any(|m| m.id == b.id),
        "a listing right after the creates returned {:?}, made {} and {}",
        ids(&listed),
        a.id,
        b.id
    );
    let read = pa.machine(&a.id).await?;
    ensure!(
        read.is_some(),
        "machine({}) right after its create read none",
        a.id
    );
    match pb.delete(&b.id).await {
        Err(Error::NotOwned { .. }) => {}
        other => {
            fail!("another owner deleting a machine made a moment ago gave {other:?}, not NotOwned")
        }
    }
    ensure!(
        pa.delete(&a.id).await?,
        "delete right after create answered false"
    );
    // Once everything is visible, the deleted machine must really be gone and the other one there.
    tokio::time::sleep(VISIBILITY_DELAY).await;
    let after = pa.machines(&pool).await?;
    ensure!(
        after
            .iter()
            .all(|m| m.id != a.id || m.status == Status::Deleting),
        "the machine deleted right after its create is still there: {:?}",
        ids(&after)
    );
    ensure!(
        after
            .iter()
            .any(|m| m.id == b.id && m.status != Status::Deleting),
        "the machine another owner tried to delete is gone: {:?}",
        ids(&after)
    );
    Ok(())
}
