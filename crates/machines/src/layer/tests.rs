use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::Duration;

use super::*;
use crate::error::ErrorKind;
use crate::machine::Status;
use crate::memory::MemoryCloud;
use crate::provider::SpecOptions;

/// A provider that answers every method of the trait and of the four extensions with a value of its
/// own, and notes every operation that reached it.
#[derive(Debug, Default)]
struct Probe {
    seen: Mutex<Vec<Op>>,
}

impl Probe {
    fn saw(&self, op: Op) {
        self.seen.lock().unwrap().push(op);
    }
    fn seen(&self) -> BTreeSet<Op> {
        self.seen.lock().unwrap().iter().copied().collect()
    }
}

fn probe_machine(id: &str) -> Machine {
    let mut m = Machine::new(id, format!("{id}-name"));
    m.pool = "probe-pool".into();
    m.status = Status::Stopped;
    m
}

#[async_trait]
impl Provider for Probe {
    fn kind(&self) -> &str {
        "probe"
    }
    fn owner(&self) -> &str {
        "probe-owner"
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities::NONE
            .with_power_times(true)
            .with_options(SpecOptions::NONE.with("disk_gb", true))
    }
    async fn arch(&self, machine_type: &str) -> Result<Arch> {
        self.saw(Op::Arch);
        Ok(Arch::Other(format!("arch-of-{machine_type}")))
    }
    async fn create(&self, spec: &MachineSpec) -> Result<Created> {
        self.saw(Op::Create);
        Ok(Created::Adopted(probe_machine(&spec.name)))
    }
    async fn machines(&self, pool: &str) -> Result<Vec<Machine>> {
        self.saw(Op::Machines);
        Ok(vec![probe_machine(pool), probe_machine("second")])
    }
    async fn machine_named(&self, pool: &str, name: &str) -> Result<Option<Machine>> {
        self.saw(Op::MachineNamed);
        Ok(Some(probe_machine(&format!("{pool}-{name}"))))
    }
    async fn machine(&self, id: &str) -> Result<Option<Machine>> {
        self.saw(Op::Machine);
        Err(Error::not_owned(id, "probe-owner"))
    }
    async fn delete(&self, _id: &str) -> Result<bool> {
        self.saw(Op::Delete);
        Ok(false)
    }
    async fn delete_named(&self, pool: &str, name: &str) -> Result<bool> {
        self.saw(Op::DeleteNamed);
        Ok(pool == "pool-a" && name == "m-1")
    }
    async fn start(&self, id: &str) -> Result<Machine> {
        self.saw(Op::Start);
        Ok(probe_machine(&format!("started-{id}")))
    }
    async fn stop(&self, id: &str) -> Result<Machine> {
        self.saw(Op::Stop);
        Ok(probe_machine(&format!("stopped-{id}")))
    }
    async fn resize(&self, id: &str, machine_type: &str) -> Result<Resized> {
        self.saw(Op::Resize);
        Ok(Resized::new(
            probe_machine(&format!("{id}-{machine_type}")),
            true,
        ))
    }
    async fn hourly_price(&self, _machine_type: &str, _location: &str) -> Result<Price> {
        self.saw(Op::HourlyPrice);
        Err(Error::quota("probe quota")
            .with_code("ProbeQuota")
            .with_operation("probe.price")
            .with_retries(2)
            .with_may_have_acted())
    }
    fn machine_labels(&self) -> Option<&dyn MachineLabels> {
        Some(self)
    }
    fn firewall_rules(&self) -> Option<&dyn FirewallRules> {
        Some(self)
    }
    fn ssh_admission(&self) -> Option<&dyn SshAdmission> {
        Some(self)
    }
    fn credit_balance(&self) -> Option<&dyn CreditBalance> {
        Some(self)
    }
}

#[async_trait]
impl MachineLabels for Probe {
    async fn set_labels(&self, id: &str, set: &Labels, remove: &[String]) -> Result<Machine> {
        self.saw(Op::SetLabels);
        let mut m = probe_machine(id);
        m.labels = set.clone();
        m.labels.insert("removed".into(), remove.join(","));
        Ok(m)
    }
}

#[async_trait]
impl FirewallRules for Probe {
    fn network_name(&self) -> String {
        "probe-net".into()
    }
    async fn network(&self) -> Result<Network> {
        self.saw(Op::Network);
        Ok(Network::new("probe-net"))
    }
    async fn rule(&self, name: &str) -> Result<Option<FirewallRule>> {
        self.saw(Op::Rule);
        Ok(Some(FirewallRule::new(name, "probe-net")))
    }
    async fn rules(&self) -> Result<Vec<FirewallRule>> {
        self.saw(Op::Rules);
        Ok(vec![FirewallRule::new("r1", "probe-net")])
    }
    async fn set_source_ranges(&self, name: &str, ranges: &[String]) -> Result<FirewallRule> {
        self.saw(Op::SetSourceRanges);
        let mut r = FirewallRule::new(name, "probe-net");
        r.source_ranges = ranges.to_vec();
        Ok(r)
    }
}

#[async_trait]
impl SshAdmission for Probe {
    async fn admit_ssh(
        &self,
        group: &str,
        location: &str,
        sources: &[String],
        readmit: &[String],
    ) -> Result<Admission> {
        self.saw(Op::AdmitSsh);
        let mut a = Admission::new(format!("{group}-{location}"));
        a.readmitted = readmit.to_vec();
        a.missing = sources.to_vec();
        Ok(a)
    }
}

#[async_trait]
impl CreditBalance for Probe {
    async fn balance(&self) -> Result<Balance> {
        self.saw(Op::Balance);
        Ok(Balance::new(12.5, "EUR"))
    }
}

/// Every method of the trait and of its extensions called once on `p`, each answer (or error) as
/// its Debug text, the facts first. A method added to the trait gets a line here: the test below
/// fails until every [`Op`] reached the inner provider.
async fn call_every(p: &dyn Provider) -> Vec<String> {
    let spec = MachineSpec::new("m-1", "type-a", "loc-a", "pool-a").with_disk_gb(20);
    let set = Labels::from([("k".to_string(), "v".to_string())]);
    let ranges = vec!["10.0.0.0/8".to_string()];
    let ids = vec!["m-1".to_string()];
    let mut out = vec![
        format!("{:?}", p.kind()),
        format!("{:?}", p.owner()),
        format!("{:?}", p.capabilities()),
        format!("{:?}", p.extensions()),
        format!("{:?}", p.arch("type-a").await),
        format!("{:?}", p.create(&spec).await),
        format!("{:?}", p.machines("pool-a").await),
        format!("{:?}", p.machine_named("pool-a", "m-1").await),
        format!("{:?}", p.machine("m-1").await),
        format!("{:?}", p.delete("m-1").await),
        format!("{:?}", p.delete_named("pool-a", "m-1").await),
        format!("{:?}", p.start("m-1").await),
        format!("{:?}", p.stop("m-1").await),
        format!("{:?}", p.resize("m-1", "type-b").await),
        format!("{:?}", p.hourly_price("type-a", "loc-a").await),
    ];
    let labels = p.machine_labels().expect("machine_labels");
    out.push(format!("{:?}", labels.set_labels("m-1", &set, &ids).await));
    let fw = p.firewall_rules().expect("firewall_rules");
    out.push(format!("{:?}", fw.network_name()));
    out.push(format!("{:?}", fw.network().await));
    out.push(format!("{:?}", fw.rule("r1").await));
    out.push(format!("{:?}", fw.rules().await));
    out.push(format!("{:?}", fw.set_source_ranges("r1", &ranges).await));
    let ssh = p.ssh_admission().expect("ssh_admission");
    out.push(format!(
        "{:?}",
        ssh.admit_ssh("g", "loc-a", &ranges, &ids).await
    ));
    let credit = p.credit_balance().expect("credit_balance");
    out.push(format!("{:?}", credit.balance().await));
    out
}

#[tokio::test]
async fn a_layer_that_changes_nothing_forwards_every_method_and_every_answer() {
    let direct = call_every(&Probe::default()).await;
    let layered = Layered::new(Probe::default(), Forward);
    let through = call_every(&layered).await;
    assert_eq!(through, direct);
    assert_eq!(
        layered.inner().seen(),
        Op::ALL.into_iter().collect::<BTreeSet<_>>(),
        "every operation reached the inner provider"
    );
    // The answers are the probe's own, errors with their context (the mark included).
    assert!(through
        .iter()
        .any(|a| a.contains("ProbeQuota") && a.contains("may_have_acted")));
    assert!(through.iter().any(|a| a.contains("NotOwned")));
    // Through dyn and Arc as well, and stacked.
    let stacked: std::sync::Arc<dyn Provider> = std::sync::Arc::new(Layered::new(
        Layered::new(Probe::default(), Forward),
        Forward,
    ));
    assert_eq!(call_every(&*stacked).await, direct);
}

#[tokio::test]
async fn a_provider_without_extensions_stays_without_them() {
    let p = Layered::new(MemoryCloud::new().provider("o").unwrap(), Forward);
    assert_eq!(
        p.extensions(),
        [
            "machine_labels",
            "firewall_rules",
            "ssh_admission",
            "credit_balance"
        ]
    );
    #[derive(Debug)]
    struct Bare;
    #[async_trait]
    impl Provider for Bare {
        fn kind(&self) -> &str {
            "bare"
        }
        fn owner(&self) -> &str {
            ""
        }
        async fn arch(&self, _: &str) -> Result<Arch> {
            Ok(Arch::Amd64)
        }
        async fn create(&self, _: &MachineSpec) -> Result<Created> {
            Err(Error::unsupported("bare", "create"))
        }
        async fn machines(&self, _: &str) -> Result<Vec<Machine>> {
            Ok(Vec::new())
        }
        async fn machine(&self, _: &str) -> Result<Option<Machine>> {
            Ok(None)
        }
        async fn delete(&self, _: &str) -> Result<bool> {
            Ok(true)
        }
    }
    let bare = Layered::new(Bare, Forward);
    assert!(bare.extensions().is_empty());
    assert_eq!(bare.capabilities(), Capabilities::NONE);
    // The trait's defaults are the inner's: refused before any call.
    assert!(matches!(
        bare.start("m-1").await,
        Err(Error::Unsupported { .. })
    ));
}

/// Source of `what` in `src` from its first line to the first line that is only `}`.
fn block<'a>(src: &'a str, what: &str) -> &'a str {
    let start = src
        .find(what)
        .unwrap_or_else(|| panic!("no {what:?} in the source"));
    let rest = &src[start..];
    let end = rest.find("\n}\n").expect("the block ends");
    &rest[..end]
}

/// The names of the methods declared in `block` (`fn name(` or `fn name<`).
fn methods(block: &str) -> BTreeSet<String> {
    block
        .lines()
        .filter_map(|l| {
            let l = l.trim_start();
            let l = l.strip_prefix("async ").unwrap_or(l);
            let rest = l.strip_prefix("fn ")?;
            let end = rest.find(['(', '<'])?;
            Some(rest[..end].to_string())
        })
        .collect()
}

#[test]
fn every_method_of_the_traits_has_an_op_and_is_forwarded() {
    let provider_src = include_str!("../provider.rs");
    let ext_src = include_str!("../ext.rs");
    let this = include_str!("mod.rs");
    let traits = [
        (provider_src, "pub trait Provider", "Provider for Layered"),
        (
            ext_src,
            "pub trait MachineLabels",
            "MachineLabels for Layered",
        ),
        (
            ext_src,
            "pub trait FirewallRules",
            "FirewallRules for Layered",
        ),
        (
            ext_src,
            "pub trait SshAdmission",
            "SshAdmission for Layered",
        ),
        (
            ext_src,
            "pub trait CreditBalance",
            "CreditBalance for Layered",
        ),
    ];
    let forward_macro = block(provider_src, "macro_rules! forward_provider");
    let ops: BTreeSet<String> = Op::ALL.iter().map(|o| o.as_str().to_string()).collect();
    let mut async_methods = BTreeSet::new();
    for (src, decl, layered) in traits {
        let declared = block(src, decl);
        let forwarded = methods(block(this, layered));
        for m in methods(declared) {
            // `extensions` is derived from the four accessors, which are forwarded.
            if m == "extensions" {
                continue;
            }
            assert!(
                forwarded.contains(&m),
                "Layered does not forward {decl}::{m}"
            );
            if decl == "pub trait Provider" {
                assert!(
                    forward_macro.contains(&format!("fn {m}(")),
                    "forward_provider! (Box, Arc, &) does not forward {m}"
                );
            }
            if declared.contains(&format!("async fn {m}(")) {
                async_methods.insert(m);
            }
        }
    }
    assert_eq!(
        async_methods, ops,
        "every async method of the traits is one Op, and every Op one method"
    );
}

#[derive(Debug, Default)]
struct Reshape {
    /// Answer every listing empty.
    hide_listings: bool,
    /// Answer a mismatched variant to reads.
    wrong_answer: bool,
}

#[async_trait]
impl Layer for Reshape {
    async fn around(&self, call: Call<'_>, next: Next<'_>) -> Result<Answer> {
        match call {
            Call::Machines { .. } if self.hide_listings => Ok(Answer::Machines(Vec::new())),
            Call::Machine { .. } if self.wrong_answer => Ok(Answer::Deleted(true)),
            Call::Create { spec } => {
                // A changed call: the spec with one more label.
                let spec = spec.clone().with_label("layered", "yes");
                let mut answer = next.run(Call::Create { spec: &spec }).await?;
                for m in answer.machines_mut() {
                    m.status = Status::Starting;
                }
                Ok(answer)
            }
            other => next.run(other).await,
        }
    }
    fn kind<'a>(&'a self, _inner: &'a str) -> &'a str {
        "reshaped"
    }
    fn capabilities(&self, inner: Capabilities) -> Capabilities {
        inner.with_resize(false)
    }
    fn offers(&self, extension: Extension, inner: bool) -> bool {
        inner && extension != Extension::FirewallRules
    }
}

#[tokio::test]
async fn a_layer_changes_calls_answers_and_facts_and_acts_instead() {
    let cloud = MemoryCloud::new();
    let p = Layered::new(
        cloud.provider("o").unwrap(),
        Reshape {
            hide_listings: true,
            wrong_answer: true,
        },
    );
    assert_eq!(p.kind(), "reshaped");
    assert!(!p.capabilities().resize && p.capabilities().start_stop);
    assert!(p.firewall_rules().is_none());
    assert_eq!(
        p.extensions(),
        ["machine_labels", "ssh_admission", "credit_balance"]
    );
    let made = p
        .create(&MachineSpec::new("w-1", "amd64-small", "zone-a", "lab"))
        .await
        .unwrap()
        .machine()
        .unwrap();
    assert_eq!(made.status, Status::Starting, "the answer reshaped");
    assert_eq!(made.labels["layered"], "yes", "the call changed");
    let before = cloud.requests();
    assert!(p.machines("lab").await.unwrap().is_empty());
    assert_eq!(cloud.requests(), before, "answered instead of the inner");
    let e = p.machine(&made.id).await.unwrap_err();
    assert!(
        e.to_string()
            .contains("a layer answered Deleted to a call of machine"),
        "{e}"
    );
    // The inner's own view is unchanged.
    assert_eq!(p.inner().machines("lab").await.unwrap().len(), 1);
}

#[tokio::test]
async fn an_extension_offered_by_a_layer_alone_is_refused_unless_the_layer_answers_it() {
    #[derive(Debug)]
    struct Credit;
    #[async_trait]
    impl Layer for Credit {
        async fn around(&self, call: Call<'_>, next: Next<'_>) -> Result<Answer> {
            match call {
                Call::Balance => Ok(Answer::Balance(Balance::new(3.0, "USD"))),
                other => next.run(other).await,
            }
        }
        fn offers(&self, _: Extension, _: bool) -> bool {
            true
        }
    }
    #[derive(Debug)]
    struct Plain(crate::memory::MemoryProvider);
    #[async_trait]
    impl Provider for Plain {
        fn kind(&self) -> &str {
            "plain"
        }
        fn owner(&self) -> &str {
            self.0.owner()
        }
        async fn arch(&self, t: &str) -> Result<Arch> {
            self.0.arch(t).await
        }
        async fn create(&self, s: &MachineSpec) -> Result<Created> {
            self.0.create(s).await
        }
        async fn machines(&self, pool: &str) -> Result<Vec<Machine>> {
            self.0.machines(pool).await
        }
        async fn machine(&self, id: &str) -> Result<Option<Machine>> {
            self.0.machine(id).await
        }
        async fn delete(&self, id: &str) -> Result<bool> {
            self.0.delete(id).await
        }
    }
    let p = Layered::new(Plain(MemoryCloud::new().provider("o").unwrap()), Credit);
    let b = p.credit_balance().unwrap().balance().await.unwrap();
    assert_eq!((b.amount, b.currency.as_str()), (3.0, "USD"));
    let e = p.firewall_rules().unwrap().rules().await.unwrap_err();
    assert_eq!(e.to_string(), "plain does not support firewall_rules");
    assert_eq!(p.firewall_rules().unwrap().network_name(), "");
}

fn spec(name: &str) -> MachineSpec {
    MachineSpec::new(name, "amd64-small", "zone-a", "lab")
}

#[tokio::test]
async fn the_recorder_counts_calls_subjects_outcomes_specs_and_calls_in_flight() {
    let cloud = MemoryCloud::new();
    let faults = Faults::new();
    let recorder = Recorder::new();
    let p = std::sync::Arc::new(Layered::new(
        Layered::new(cloud.provider("o").unwrap(), faults.clone()),
        recorder.clone(),
    ));
    faults.hold(Op::Create, Point::Before);
    let creates: Vec<_> = (0..3)
        .map(|n| {
            let p = p.clone();
            tokio::spawn(async move { p.create(&spec(&format!("w-{n}"))).await })
        })
        .collect();
    faults.until_entered(Op::Create, Point::Before, 3).await;
    assert_eq!(recorder.in_flight(Op::Create), 3);
    assert!(cloud.all_machines().is_empty(), "held before the cloud");
    faults.release(Op::Create, Point::Before);
    for c in creates {
        c.await.unwrap().unwrap();
    }
    assert_eq!(
        (
            recorder.in_flight(Op::Create),
            recorder.max_in_flight(Op::Create)
        ),
        (0, 3)
    );
    let mut names: Vec<String> = recorder.specs().into_iter().map(|s| s.name).collect();
    names.sort();
    assert_eq!(names, ["w-0", "w-1", "w-2"]);
    let id = cloud.all_machines()[0].id.clone();
    p.delete(&id).await.unwrap();
    assert!(p.delete("a/b").await.is_err());
    assert_eq!(recorder.subjects(Op::Delete), [id.as_str(), "a/b"]);
    assert_eq!(recorder.failed(Op::Delete), 1);
    assert_eq!(
        recorder.of(Op::Delete)[1].outcome,
        Some(Err(ErrorKind::InvalidSpec))
    );
    p.machine_named("lab", "w-1").await.unwrap();
    assert_eq!(recorder.subjects(Op::MachineNamed), ["lab/w-1"]);
    assert_eq!(recorder.count(Op::Machines), 0);
    recorder.clear();
    assert!(recorder.calls().is_empty());
}

#[tokio::test]
async fn faults_fail_before_or_after_the_call_and_lose_answers() {
    let cloud = MemoryCloud::new();
    let faults = Faults::new();
    let p = Layered::new(cloud.provider("o").unwrap(), faults.clone());
    // Before: nothing reaches the cloud, and the error says so.
    faults.inject(Op::Create, Fault::Fail(ErrorKind::PermissionDenied), 1);
    let before = cloud.requests();
    let e = p.create(&spec("a")).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::PermissionDenied);
    assert!(e.made_nothing() && e.operation() == Some("create"), "{e:?}");
    assert_eq!(cloud.requests(), before);
    // No stock on a create is the create's own outcome.
    faults.inject(Op::Create, Fault::Fail(ErrorKind::NoStock), 1);
    match p.create(&spec("a")).await.unwrap() {
        Created::NoStock {
            machine_type,
            location,
            ..
        } => assert_eq!(
            (machine_type.as_str(), location.as_str()),
            ("amd64-small", "zone-a")
        ),
        other => panic!("{other:?}"),
    }
    // After: the cloud acted; the caller cannot count on nothing having been made.
    faults.inject(Op::Create, Fault::FailAfter(ErrorKind::Quota), 1);
    let e = p.create(&spec("b")).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Quota);
    assert!(!e.made_nothing(), "{e:?}");
    assert!(p.machine_named("lab", "b").await.unwrap().is_some());
    faults.inject(Op::Create, Fault::LoseAnswer, 1);
    let e = p.create(&spec("c")).await.unwrap_err();
    assert!(e.is_retryable() && !e.made_nothing(), "{e:?}");
    // Retrying the same spec adopts what the lost call made.
    assert!(p.create(&spec("c")).await.unwrap().is_adopted());
    assert_eq!(cloud.all_machines().len(), 2);
    assert_eq!(faults.applied(), 4);
}

#[tokio::test(start_paused = true)]
async fn faults_delay_hang_skip_and_hold_after_the_call() {
    let cloud = MemoryCloud::new();
    let faults = Faults::new();
    let recorder = Recorder::new();
    let p = std::sync::Arc::new(Layered::new(
        Layered::new(cloud.provider("o").unwrap(), faults.clone()),
        recorder.clone(),
    ));
    faults.inject(Op::Machines, Fault::Latency(Duration::from_secs(30)), 1);
    let started = tokio::time::Instant::now();
    p.machines("lab").await.unwrap();
    assert!(started.elapsed() >= Duration::from_secs(30));
    // The second create from now hangs; the first and third answer.
    faults.inject_after(Op::Create, 1, Fault::Hang, 1);
    p.create(&spec("one")).await.unwrap();
    let hung = tokio::time::timeout(Duration::from_secs(600), p.create(&spec("two"))).await;
    assert!(hung.is_err(), "the second create never answers");
    assert_eq!(
        recorder.in_flight(Op::Create),
        0,
        "a dropped call is not in flight"
    );
    assert_eq!(recorder.of(Op::Create)[1].outcome, None);
    p.create(&spec("three")).await.unwrap();
    // Any operation: the next call, whatever it is.
    faults.inject_any(Fault::Fail(ErrorKind::Throttled), 1);
    assert_eq!(
        p.arch("amd64-small").await.unwrap_err().kind(),
        ErrorKind::Throttled
    );
    // Held after the call: the cloud acted, the caller has no answer yet.
    faults.hold(Op::Delete, Point::After);
    let id = p.machine_named("lab", "one").await.unwrap().unwrap().id;
    let deleting = {
        let p = p.clone();
        let id = id.clone();
        tokio::spawn(async move { p.delete(&id).await })
    };
    faults.until_entered(Op::Delete, Point::After, 1).await;
    assert!(cloud.all_machines().iter().all(|m| m.id != id), "deleted");
    assert!(!deleting.is_finished());
    faults.release(Op::Delete, Point::After);
    assert!(deleting.await.unwrap().unwrap());
    assert_eq!(faults.entered(Op::Delete, Point::Before), 1);
}
