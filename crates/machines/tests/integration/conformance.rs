//! The conformance suite on the in-memory provider, and proof that it catches broken providers.

use std::sync::Arc;

use async_trait::async_trait;
use orca_machines::conformance::{
    extensions, run, run_all, Harness, Hook, MemoryHarness, Outcome, Setup, EXTENSIONS,
};
use orca_machines::labels::Labels;
use orca_machines::memory::{MemoryCloud, MemoryProvider};
use orca_machines::{
    labels, Arch, Capabilities, Created, CreditBalance, Error, FirewallRule, FirewallRules,
    Machine, MachineLabels, MachineSpec, Network, Provider, Result, SpecOptions, SshAdmission,
};

#[tokio::test]
async fn memory_provider_passes_everything() {
    let h = MemoryHarness::new();
    let report = run_all(&h).await;
    report.assert_passed();
    assert!(report.skipped().is_empty(), "{:?}", report.skipped());
    assert!(h.cloud().all_machines().is_empty(), "the suite cleans up");
    // The extension checks pass where a provider offers none: the in-memory one offers every one.
    let p = h.provider("stack-1").await.unwrap();
    assert_eq!(
        extensions(&*p),
        [
            "machine_labels",
            "firewall_rules",
            "ssh_admission",
            "credit_balance"
        ]
    );
}

/// Runs the suite through `Box<dyn Provider>` (the harness's own form) and through `Arc<dyn Provider>`.
struct ArcHarness(MemoryHarness);

#[async_trait]
impl Harness for ArcHarness {
    fn name(&self) -> String {
        "memory-arc".into()
    }
    fn setup(&self) -> Setup {
        self.0.setup()
    }
    async fn provider(&self, owner: &str) -> Result<Box<dyn Provider>> {
        let arc: Arc<dyn Provider> = Arc::new(self.0.cloud().provider(owner)?);
        Ok(Box::new(arc))
    }
    async fn paged_provider(&self, owner: &str, n: u32) -> Hook<Box<dyn Provider>> {
        let inner = self.0.paged_provider(owner, n).await?;
        let arc: Arc<dyn Provider> = Arc::from(inner);
        Ok(Box::new(arc))
    }
    async fn exhaust_stock(&self, t: &str, l: &str) -> Hook<()> {
        self.0.exhaust_stock(t, l).await
    }
    async fn restore_stock(&self, t: &str, l: &str) -> Hook<()> {
        self.0.restore_stock(t, l).await
    }
    async fn exceed_quota(&self) -> Hook<()> {
        self.0.exceed_quota().await
    }
    async fn restore_quota(&self) -> Hook<()> {
        self.0.restore_quota().await
    }
    async fn lose_next_create_answer(&self) -> Hook<()> {
        self.0.lose_next_create_answer().await
    }
    async fn refuse_next_create_unserved(&self) -> Hook<()> {
        self.0.refuse_next_create_unserved().await
    }
    async fn requests(&self) -> Hook<u64> {
        self.0.requests().await
    }
    async fn delay_visibility(&self, d: std::time::Duration) -> Hook<()> {
        self.0.delay_visibility(d).await
    }
    async fn admitted_sources(&self, g: &str, l: &str) -> Hook<Option<Vec<String>>> {
        self.0.admitted_sources(g, l).await
    }
    async fn put_firewall_rule(&self, rule: FirewallRule) -> Hook<()> {
        self.0.put_firewall_rule(rule).await
    }
    async fn leave_pieces(&self, owner: &str, spec: &MachineSpec) -> Hook<Vec<String>> {
        self.0.leave_pieces(owner, spec).await
    }
    async fn pieces_standing(&self, pieces: &[String]) -> Hook<Vec<String>> {
        self.0.pieces_standing(pieces).await
    }
}

#[tokio::test]
async fn passes_through_arc_dyn_provider() {
    let h = ArcHarness(MemoryHarness::new());
    let report = run_all(&h).await;
    report.assert_passed();
    assert!(report.skipped().is_empty(), "{:?}", report.skipped());
    // Every extension is reached through the Arc too, so no extension check passed for want of one.
    let p = h.provider("stack-1").await.unwrap();
    assert_eq!(extensions(&*p), EXTENSIONS);
}

#[tokio::test]
async fn missing_hooks_are_reported_as_skipped_by_name() {
    struct Minimal(MemoryCloud);
    #[async_trait]
    impl Harness for Minimal {
        fn name(&self) -> String {
            "minimal".into()
        }
        fn setup(&self) -> Setup {
            MemoryHarness::new().setup()
        }
        async fn provider(&self, owner: &str) -> Result<Box<dyn Provider>> {
            Ok(Box::new(self.0.provider(owner)?))
        }
    }
    let report = run_all(&Minimal(MemoryCloud::new())).await;
    report.assert_passed();
    let skipped: Vec<&str> = report.skipped().iter().map(|(n, _)| *n).collect();
    assert_eq!(
        skipped,
        [
            "invalid_input_is_refused_before_any_call",
            "lists_every_page",
            "arch_of_both_architectures",
            "no_stock",
            "quota_is_not_capacity",
            "retried_create_makes_one_machine",
            "adopts_an_earlier_machine_after_a_passing_failure",
            "reads_one_machine",
            "reads_a_machine_by_name",
            "deletes_what_a_create_made_by_name",
            "labels_on_an_existing_machine",
            "firewall_rules",
            "ssh_admission",
            "survives_delayed_visibility"
        ]
    );
}

/// A check that ran but could not prove a part of it for want of a hook says which part, and still
/// fails on what it could check.
#[tokio::test]
async fn a_check_run_in_part_names_what_stayed_unproven() {
    /// Every hook but the request count.
    struct Uncounted(MemoryHarness);
    #[async_trait]
    impl Harness for Uncounted {
        fn name(&self) -> String {
            "uncounted".into()
        }
        fn setup(&self) -> Setup {
            self.0.setup()
        }
        async fn provider(&self, owner: &str) -> Result<Box<dyn Provider>> {
            self.0.provider(owner).await
        }
        async fn paged_provider(&self, owner: &str, n: u32) -> Hook<Box<dyn Provider>> {
            self.0.paged_provider(owner, n).await
        }
    }
    let report = run(
        &Uncounted(MemoryHarness::new()),
        &["arch_of_both_architectures", "reads_one_machine"],
    )
    .await;
    report.assert_passed();
    let skipped = report.skipped();
    assert_eq!(skipped.len(), 2, "{skipped:?}");
    assert!(skipped[0].1.contains("cached"), "{skipped:?}");
    assert!(
        skipped[1].1.contains("never a listing") && skipped[1].1.contains("invalid id"),
        "{skipped:?}"
    );
}

/// A provider broken in one chosen way, on top of the in-memory one.
#[derive(Debug)]
struct Broken {
    inner: MemoryProvider,
    flaw: Flaw,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Flaw {
    /// Lists every owner's machines of the pool (filters on the pool only).
    ListsOtherOwners,
    /// Reads only the first page of a listing.
    FirstPageOnly,
    /// Deletes without checking the owner.
    DeletesForeign,
    /// Validates nothing.
    NoValidation,
    /// Makes a second machine when a create is retried.
    NotIdempotent,
    /// Claims every capability but implements none.
    ClaimsTooMuch,
    /// Reports an error for an already-deleted machine.
    DeleteNotIdempotent,
    /// Turns no stock into a plain error.
    NoStockAsError,
    /// Calls everything amd64.
    WrongArch,
    /// Reads one machine by listing its pool.
    ReadsOneByListing,
    /// Reads another owner's machine as if it were its own.
    ReadsForeign,
    /// Claims to honour no option but makes machines with them all the same.
    IgnoresOptions,
    /// Changes the labels of another owner's machine.
    LabelsForeign,
    /// Answers a machine adopted from an earlier create as newly made.
    AdoptedAsNew,
    /// Takes the machine a retried create meets for its own after any passing failure, also one
    /// the cloud answered without acting.
    PassingFailureClaims,
    /// Patches more of a firewall rule than its sources.
    FirewallPatchesTooMuch,
    /// Answers a create before an eventually consistent cloud shows the machine.
    CreateBeforeVisible,
    /// Stops and starts machines without checking their owner.
    ChangesForeign,
    /// Reads a machine by name in its pool whoever owns it.
    NamedIgnoresOwner,
    /// Deletes this owner's machine of a name in whichever pool it stands.
    DeleteNamedIgnoresPool,
}

#[async_trait]
impl Provider for Broken {
    fn kind(&self) -> &str {
        "broken"
    }
    fn owner(&self) -> &str {
        self.inner.owner()
    }
    fn capabilities(&self) -> Capabilities {
        match self.flaw {
            Flaw::ClaimsTooMuch => Capabilities::ALL,
            Flaw::IgnoresOptions => Capabilities::NONE,
            Flaw::ChangesForeign => Capabilities::NONE
                .with_start_stop(true)
                .with_options(SpecOptions::ALL),
            // Creates go to the in-memory provider, which honours every option.
            _ => Capabilities::NONE.with_options(SpecOptions::ALL),
        }
    }
    async fn machine(&self, id: &str) -> Result<Option<Machine>> {
        match self.flaw {
            Flaw::ReadsOneByListing => {
                let Some(m) = self.inner.cloud().api_get(id).await? else {
                    return Ok(None);
                };
                let paged = self.inner.clone().with_page_size(1);
                Ok(paged
                    .machines(&m.pool)
                    .await?
                    .into_iter()
                    .find(|x| x.id == id))
            }
            Flaw::ReadsForeign => self.inner.cloud().api_get(id).await,
            _ => self.inner.machine(id).await,
        }
    }
    async fn delete_named(&self, pool: &str, name: &str) -> Result<bool> {
        match self.flaw {
            Flaw::DeleteNamedIgnoresPool => {
                orca_machines::validate_pool(pool)?;
                orca_machines::validate_name(name)?;
                let mut with = labels::Labels::new();
                with.insert(labels::OWNER_LABEL.into(), self.inner.owner().into());
                let page = self
                    .inner
                    .cloud()
                    .api_list(&with, &[], Some(name), 1000, None)
                    .await?;
                for m in &page.items {
                    self.inner.delete(&m.id).await?;
                }
                Ok(!page.items.is_empty())
            }
            _ => self.inner.delete_named(pool, name).await,
        }
    }
    async fn machine_named(&self, pool: &str, name: &str) -> Result<Option<Machine>> {
        match self.flaw {
            Flaw::NamedIgnoresOwner => {
                orca_machines::validate_pool(pool)?;
                orca_machines::validate_name(name)?;
                let mut with = labels::Labels::new();
                with.insert(labels::POOL_LABEL.into(), pool.into());
                let page = self
                    .inner
                    .cloud()
                    .api_list(&with, &[], Some(name), 1000, None)
                    .await?;
                Ok(page.items.into_iter().next())
            }
            _ => self.inner.machine_named(pool, name).await,
        }
    }
    fn machine_labels(&self) -> Option<&dyn MachineLabels> {
        Some(self)
    }
    fn firewall_rules(&self) -> Option<&dyn FirewallRules> {
        Some(self)
    }
    fn ssh_admission(&self) -> Option<&dyn SshAdmission> {
        self.inner.ssh_admission()
    }
    fn credit_balance(&self) -> Option<&dyn CreditBalance> {
        self.inner.credit_balance()
    }
    async fn arch(&self, t: &str) -> Result<Arch> {
        if self.flaw == Flaw::WrongArch {
            // Refuses what is not a machine type, as every provider does; only the answer is wrong.
            orca_machines::spec::validate_token("machine_type", t)?;
            return Ok(Arch::Amd64);
        }
        self.inner.arch(t).await
    }
    async fn create(&self, spec: &MachineSpec) -> Result<Created> {
        let cloud = self.inner.cloud();
        match self.flaw {
            Flaw::NoValidation => {
                let l = labels::ownership_labels(&spec.pool, self.owner());
                Ok(Created::Machine(cloud.api_insert(spec, l).await?))
            }
            Flaw::NotIdempotent => {
                let l = labels::ownership_labels(&spec.pool, self.owner());
                let mut s = spec.clone();
                s.name = format!("{}-{}", spec.name, fastrand::u32(..));
                loop {
                    match cloud.api_insert(&s, l.clone()).await {
                        Err(e) if e.is_retryable() => continue,
                        other => return other.map(Created::Machine),
                    }
                }
            }
            Flaw::NoStockAsError => match self.inner.create(spec).await? {
                no @ Created::NoStock { .. } => no.into_result().map(Created::Machine),
                other => Ok(other),
            },
            Flaw::CreateBeforeVisible => {
                spec.validate()?;
                let mut l = spec.labels.clone();
                l.extend(labels::ownership_labels(&spec.pool, self.owner()));
                // Retries as the real provider does them: one request id for every attempt, so
                // that a retry after a lost answer is answered this call's own machine.
                let request = format!("{:016x}", fastrand::u64(..));
                loop {
                    match cloud
                        .api_insert_request(spec, l.clone(), Some(&request))
                        .await
                    {
                        Ok(m) => return Ok(Created::Machine(m)),
                        Err(Error::NoStock { message, .. }) => {
                            return Ok(Created::NoStock {
                                machine_type: spec.machine_type.clone(),
                                location: spec.location.clone(),
                                message,
                                left: Vec::new(),
                            })
                        }
                        Err(e) if e.is_retryable() => continue,
                        // Adoption as the real provider does it.
                        Err(_) => return self.inner.create(spec).await,
                    }
                }
            }
            Flaw::PassingFailureClaims => {
                spec.validate()?;
                let mut l = spec.labels.clone();
                l.extend(labels::ownership_labels(&spec.pool, self.owner()));
                match cloud.api_insert(spec, l).await {
                    // Whatever the retry meets is taken for this call's own, as if the failed
                    // attempt had surely been served.
                    Err(e) if e.is_retryable() => match self.inner.create(spec).await? {
                        Created::Adopted(m) => Ok(Created::Machine(m)),
                        other => Ok(other),
                    },
                    // Answered once reads show it, as the real provider does.
                    Ok(m) => {
                        for _ in 0..200 {
                            if let Some(seen) = self.inner.machine(&m.id).await? {
                                return Ok(Created::Machine(seen));
                            }
                            tokio::time::sleep(std::time::Duration::from_millis(25)).await;
                        }
                        Err(Error::transient(format!("{} is not shown", m.id)))
                    }
                    Err(_) => self.inner.create(spec).await,
                }
            }
            Flaw::AdoptedAsNew => match self.inner.create(spec).await? {
                Created::Adopted(m) => Ok(Created::Machine(m)),
                other => Ok(other),
            },
            _ => self.inner.create(spec).await,
        }
    }
    async fn machines(&self, pool: &str) -> Result<Vec<Machine>> {
        let cloud = self.inner.cloud();
        match self.flaw {
            Flaw::ListsOtherOwners => {
                let mut with = labels::Labels::new();
                with.insert(labels::POOL_LABEL.into(), pool.into());
                Ok(cloud.api_list(&with, &[], None, 1000, None).await?.items)
            }
            Flaw::FirstPageOnly => {
                orca_machines::validate_pool(pool)?;
                let with = labels::ownership_labels(pool, self.owner());
                let without: &[&str] = if self.owner().is_empty() {
                    &[labels::OWNER_LABEL]
                } else {
                    &[]
                };
                Ok(cloud.api_list(&with, without, None, 1, None).await?.items)
            }
            Flaw::NoValidation => {
                let with = labels::ownership_labels(pool, self.owner());
                Ok(cloud.api_list(&with, &[], None, 1000, None).await?.items)
            }
            _ => self.inner.machines(pool).await,
        }
    }
    async fn stop(&self, id: &str) -> Result<Machine> {
        match self.flaw {
            Flaw::ChangesForeign => self.inner.cloud().api_power(id, false).await,
            _ => Err(Error::unsupported("broken", "stop")),
        }
    }
    async fn start(&self, id: &str) -> Result<Machine> {
        match self.flaw {
            Flaw::ChangesForeign => self.inner.cloud().api_power(id, true).await,
            _ => Err(Error::unsupported("broken", "start")),
        }
    }
    async fn delete(&self, id: &str) -> Result<bool> {
        if self.flaw != Flaw::NoValidation {
            orca_machines::validate_id(id)?;
        }
        match self.flaw {
            Flaw::DeletesForeign | Flaw::NoValidation => {
                self.inner.cloud().api_remove(id).await.map(|_| true)
            }
            Flaw::DeleteNotIdempotent => {
                if self.inner.cloud().api_get(id).await?.is_none() {
                    return Err(Error::not_found(id));
                }
                self.inner.delete(id).await
            }
            _ => self.inner.delete(id).await,
        }
    }
}

#[async_trait]
impl MachineLabels for Broken {
    async fn set_labels(&self, id: &str, set: &Labels, remove: &[String]) -> Result<Machine> {
        if self.flaw == Flaw::LabelsForeign {
            return self.inner.cloud().api_set_labels(id, set, remove).await;
        }
        self.inner
            .machine_labels()
            .unwrap()
            .set_labels(id, set, remove)
            .await
    }
}

#[async_trait]
impl FirewallRules for Broken {
    fn network_name(&self) -> String {
        self.inner.firewall_rules().unwrap().network_name()
    }
    async fn network(&self) -> Result<Network> {
        self.inner.firewall_rules().unwrap().network().await
    }
    async fn rule(&self, name: &str) -> Result<Option<FirewallRule>> {
        self.inner.firewall_rules().unwrap().rule(name).await
    }
    async fn rules(&self) -> Result<Vec<FirewallRule>> {
        self.inner.firewall_rules().unwrap().rules().await
    }
    async fn set_source_ranges(&self, name: &str, ranges: &[String]) -> Result<FirewallRule> {
        let fw = self.inner.firewall_rules().unwrap();
        if self.flaw == Flaw::FirewallPatchesTooMuch {
            if let Some(mut r) = fw.rule(name).await? {
                r.target_tags.clear();
                r.source_ranges = ranges.to_vec();
                self.inner.cloud().put_firewall_rule(r);
            }
        }
        fw.set_source_ranges(name, ranges).await
    }
}

struct BrokenHarness {
    base: MemoryHarness,
    flaw: Flaw,
}

#[async_trait]
impl Harness for BrokenHarness {
    fn name(&self) -> String {
        format!("broken-{:?}", self.flaw)
    }
    fn setup(&self) -> Setup {
        self.base.setup()
    }
    async fn provider(&self, owner: &str) -> Result<Box<dyn Provider>> {
        Ok(Box::new(Broken {
            inner: self.base.cloud().provider(owner)?,
            flaw: self.flaw,
        }))
    }
    async fn paged_provider(&self, owner: &str, n: u32) -> Hook<Box<dyn Provider>> {
        let inner = self
            .base
            .cloud()
            .provider(owner)
            .unwrap()
            .with_page_size(n as usize);
        Ok(Box::new(Broken {
            inner,
            flaw: self.flaw,
        }))
    }
    async fn exhaust_stock(&self, t: &str, l: &str) -> Hook<()> {
        self.base.exhaust_stock(t, l).await
    }
    async fn restore_stock(&self, t: &str, l: &str) -> Hook<()> {
        self.base.restore_stock(t, l).await
    }
    async fn lose_next_create_answer(&self) -> Hook<()> {
        self.base.lose_next_create_answer().await
    }
    async fn refuse_next_create_unserved(&self) -> Hook<()> {
        self.base.refuse_next_create_unserved().await
    }
    async fn requests(&self) -> Hook<u64> {
        self.base.requests().await
    }
    async fn put_firewall_rule(&self, rule: FirewallRule) -> Hook<()> {
        self.base.put_firewall_rule(rule).await
    }
    async fn delay_visibility(&self, d: std::time::Duration) -> Hook<()> {
        self.base.delay_visibility(d).await
    }
    async fn admitted_sources(&self, g: &str, l: &str) -> Hook<Option<Vec<String>>> {
        self.base.admitted_sources(g, l).await
    }
}

async fn failed_checks(flaw: Flaw) -> Vec<&'static str> {
    let report = run_all(&BrokenHarness {
        base: MemoryHarness::new(),
        flaw,
    })
    .await;
    report.failed().into_iter().map(|(n, _)| n).collect()
}

#[tokio::test]
async fn suite_catches_a_provider_that_lists_other_owners() {
    let failed = failed_checks(Flaw::ListsOtherOwners).await;
    assert!(failed.contains(&"owner_isolation"), "{failed:?}");
}

#[tokio::test]
async fn suite_catches_a_provider_that_stops_after_the_first_page() {
    let failed = failed_checks(Flaw::FirstPageOnly).await;
    assert_eq!(failed, ["lists_every_page", "survives_delayed_visibility"]);
}

#[tokio::test]
async fn suite_catches_a_provider_that_deletes_foreign_machines() {
    let failed = failed_checks(Flaw::DeletesForeign).await;
    assert_eq!(
        failed,
        [
            "refuses_to_delete_another_owners_machine",
            "survives_delayed_visibility"
        ]
    );
}

#[tokio::test]
async fn suite_catches_a_provider_that_validates_nothing() {
    let failed = failed_checks(Flaw::NoValidation).await;
    assert!(
        failed.contains(&"invalid_input_is_refused_before_any_call"),
        "{failed:?}"
    );
}

#[tokio::test]
async fn suite_catches_a_create_that_is_not_idempotent() {
    let failed = failed_checks(Flaw::NotIdempotent).await;
    assert!(
        failed.contains(&"retried_create_makes_one_machine"),
        "{failed:?}"
    );
}

#[tokio::test]
async fn suite_catches_untruthful_capabilities() {
    let failed = failed_checks(Flaw::ClaimsTooMuch).await;
    assert_eq!(
        failed,
        [
            "refuses_to_change_another_owners_machine",
            "capabilities_are_truthful"
        ]
    );
}

#[tokio::test]
async fn suite_catches_a_delete_that_is_not_idempotent() {
    let failed = failed_checks(Flaw::DeleteNotIdempotent).await;
    assert_eq!(failed, ["delete_twice_and_unknown_id"]);
}

#[tokio::test]
async fn suite_catches_no_stock_as_an_error() {
    let failed = failed_checks(Flaw::NoStockAsError).await;
    assert_eq!(
        failed,
        ["refuses_what_the_catalogue_does_not_offer", "no_stock"]
    );
}

#[tokio::test]
async fn suite_catches_a_wrong_architecture() {
    let failed = failed_checks(Flaw::WrongArch).await;
    assert_eq!(failed, ["arch_of_both_architectures"]);
}

#[tokio::test]
async fn suite_catches_reading_one_machine_through_a_listing() {
    let failed = failed_checks(Flaw::ReadsOneByListing).await;
    assert_eq!(failed, ["reads_one_machine"]);
}

#[tokio::test]
async fn suite_catches_reading_another_owners_machine() {
    let failed = failed_checks(Flaw::ReadsForeign).await;
    assert_eq!(failed, ["reads_one_machine"]);
}

#[tokio::test]
async fn suite_catches_options_honoured_silently_against_the_capabilities() {
    let failed = failed_checks(Flaw::IgnoresOptions).await;
    assert!(failed.contains(&"spec_options"), "{failed:?}");
}

#[tokio::test]
async fn suite_catches_labels_changed_on_another_owners_machine() {
    let failed = failed_checks(Flaw::LabelsForeign).await;
    assert_eq!(failed, ["labels_on_an_existing_machine"]);
}

#[tokio::test]
async fn suite_catches_an_adopted_machine_reported_as_new() {
    let failed = failed_checks(Flaw::AdoptedAsNew).await;
    assert_eq!(
        failed,
        [
            "retried_create_makes_one_machine",
            "adopts_an_earlier_machine_after_a_passing_failure"
        ]
    );
}

#[tokio::test]
async fn suite_catches_an_earlier_machine_claimed_after_a_passing_failure() {
    let failed = failed_checks(Flaw::PassingFailureClaims).await;
    assert_eq!(
        failed,
        ["adopts_an_earlier_machine_after_a_passing_failure"]
    );
}

#[tokio::test]
async fn suite_catches_a_firewall_patch_that_changes_more_than_sources() {
    let failed = failed_checks(Flaw::FirewallPatchesTooMuch).await;
    assert_eq!(failed, ["firewall_rules"]);
}

#[tokio::test]
async fn suite_catches_a_create_that_answers_before_the_cloud_shows_the_machine() {
    let failed = failed_checks(Flaw::CreateBeforeVisible).await;
    assert_eq!(failed, ["survives_delayed_visibility"]);
}

#[tokio::test]
async fn suite_catches_a_provider_that_changes_another_owners_machine() {
    let failed = failed_checks(Flaw::ChangesForeign).await;
    assert_eq!(failed, ["refuses_to_change_another_owners_machine"]);
}

#[tokio::test]
async fn suite_catches_a_read_by_name_that_ignores_the_owner() {
    let failed = failed_checks(Flaw::NamedIgnoresOwner).await;
    assert_eq!(failed, ["reads_a_machine_by_name"]);
}

#[tokio::test]
async fn suite_catches_a_delete_by_name_that_ignores_the_pool() {
    let failed = failed_checks(Flaw::DeleteNamedIgnoresPool).await;
    assert_eq!(failed, ["deletes_what_a_create_made_by_name"]);
}

/// A provider that keeps the default `machine_named` (a listing) passes the check: what every driver
/// runs until it reads by name in its own cheaper way.
#[tokio::test]
async fn the_default_read_by_name_passes_the_check() {
    #[derive(Debug)]
    struct Defaults(MemoryProvider);
    #[async_trait]
    impl Provider for Defaults {
        fn kind(&self) -> &str {
            "defaults"
        }
        fn owner(&self) -> &str {
            self.0.owner()
        }
        async fn arch(&self, t: &str) -> Result<Arch> {
            self.0.arch(t).await
        }
        async fn create(&self, spec: &MachineSpec) -> Result<Created> {
            self.0.create(spec).await
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
    struct DefaultsHarness(MemoryHarness);
    #[async_trait]
    impl Harness for DefaultsHarness {
        fn name(&self) -> String {
            "memory-defaults".into()
        }
        fn setup(&self) -> Setup {
            self.0.setup()
        }
        async fn provider(&self, owner: &str) -> Result<Box<dyn Provider>> {
            Ok(Box::new(Defaults(self.0.cloud().provider(owner)?)))
        }
        async fn requests(&self) -> Hook<u64> {
            self.0.requests().await
        }
    }
    let report = run(
        &DefaultsHarness(MemoryHarness::new()),
        &["reads_a_machine_by_name"],
    )
    .await;
    assert_eq!(
        report.results,
        vec![("reads_a_machine_by_name", Outcome::Passed)]
    );
}

#[tokio::test]
async fn a_single_check_can_be_run_by_name() {
    let report = run(&MemoryHarness::new(), &["lifecycle"]).await;
    assert_eq!(report.results, vec![("lifecycle", Outcome::Passed)]);
}
