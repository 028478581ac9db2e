//! The firewall check (the seed's "The firewall check"): the rule `shed-<environment>-ssh` and its
//! network must be as expected before the server asks the cloud for a VM or starts one. The server never
//! makes or removes a rule; in mode `auto` it changes one thing, the rule's source ranges, under the
//! seed's conditions.
//!
//! A [`FirewallCheck`] keeps the last result ([`Outcome`]); the periodic pass runs it, and so does a
//! create or start whose last result is older than 60 s. It writes the seed's log lines when the result
//! changes and every ten minutes while it fails.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use orca::{FirewallRule, Network, Provider, Timestamp};

use crate::clock::{go_duration, since, Clock};
use crate::config::FirewallMode;
use crate::echo::Echo;
use crate::log::ServerLog;
use crate::netaddr::{forbidden_space, normalise, Cidr};

/// Why the check failed (the seed's clause table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FwReason {
    /// The rule does not exist.
    RuleMissing,
    /// It is on another network.
    RuleNetwork,
    /// It is not an ingress rule.
    RuleDirection,
    /// It is disabled.
    RuleDisabled,
    /// It allows something other than exactly tcp:22.
    RuleAllow,
    /// It does not target exactly the tag `shed-<environment>`.
    RuleTarget,
    /// It admits by source tags or service accounts.
    RuleSourceKind,
    /// Its source ranges are not the expected set.
    RuleSources,
    /// Another enabled ingress allow rule applies to the sheds.
    StrayRule,
    /// The network is the project's default network.
    DefaultNetwork,
    /// The rules could not be read.
    Unreadable,
    /// Mode auto: the server does not know its public address.
    AddressUnknown,
}

impl FwReason {
    /// The seed's word.
    pub fn as_str(self) -> &'static str {
        match self {
            FwReason::RuleMissing => "rule_missing",
            FwReason::RuleNetwork => "rule_network",
            FwReason::RuleDirection => "rule_direction",
            FwReason::RuleDisabled => "rule_disabled",
            FwReason::RuleAllow => "rule_allow",
            FwReason::RuleTarget => "rule_target",
            FwReason::RuleSourceKind => "rule_source_kind",
            FwReason::RuleSources => "rule_sources",
            FwReason::StrayRule => "stray_rule",
            FwReason::DefaultNetwork => "default_network",
            FwReason::Unreadable => "unreadable",
            FwReason::AddressUnknown => "address_unknown",
        }
    }
}

/// The result of one check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// When it ran.
    pub at: Timestamp,
    /// Whether every clause held.
    pub passed: bool,
    /// The first clause that failed.
    pub reason: Option<FwReason>,
    /// Every clause that failed, in the table's order.
    pub failed: Vec<FwReason>,
    /// For an admin: which rule, what was expected and what was found (empty when it passed).
    pub message: String,
    /// The rule's source ranges as read.
    pub sources: Vec<String>,
}

impl Outcome {
    /// The message a service client gets: the code's meaning without the rule, its sources or any
    /// address.
    pub fn service_message(&self) -> String {
        format!(
            "the server's firewall check is failing (reason {}); creates and starts are refused until it passes: try again later",
            self.reason.map(|r| r.as_str()).unwrap_or("unknown")
        )
    }
}

/// What the check compares against.
#[derive(Debug, Clone)]
pub struct Expectation {
    /// The mode.
    pub mode: FirewallMode,
    /// Static mode: the configured sources.
    pub source_ranges: Vec<Cidr>,
    /// Auto mode: the echo services.
    pub echo_urls: Vec<String>,
    /// `shed-<environment>-ssh`.
    pub rule_name: String,
    /// `shed-<environment>`.
    pub tag: String,
}

/// The durations of the check, on the server's clock.
#[derive(Debug, Clone, Copy)]
pub struct FirewallTimings {
    /// At most one patch this often (5 min).
    pub patch_spacing: Duration,
    /// A failing result is logged again this often (10 min).
    pub log_repeat: Duration,
    /// An address the services agreed on is trusted this long (15 min).
    pub address_trust: Duration,
}

impl Default for FirewallTimings {
    fn default() -> Self {
        FirewallTimings {
            patch_spacing: Duration::from_secs(300),
            log_repeat: Duration::from_secs(600),
            address_trust: Duration::from_secs(900),
        }
    }
}

/// What makes two results the same for the log: not the message, whose text can change from one
/// check to the next while the result does not (auto mode's time since the last patch, or the echo
/// services' answers).
#[derive(Debug, Clone, PartialEq, Eq)]
struct LogKey {
    passed: bool,
    mode: FirewallMode,
    reason: Option<FwReason>,
    failed: Vec<FwReason>,
    rule: String,
    expected: Option<Vec<String>>,
    sources: Vec<String>,
}

#[derive(Debug, Default)]
struct CheckState {
    /// The last result logged, and when.
    logged: Option<(LogKey, Timestamp)>,
    last_patch: Option<Timestamp>,
    agreement: Option<(Ipv4Addr, Timestamp)>,
    started: Option<Timestamp>,
}

/// The firewall check with its memory (last result, last patch, last agreed address).
#[derive(Debug)]
pub struct FirewallCheck {
    want: Expectation,
    provider: Arc<dyn Provider>,
    echo: Arc<dyn Echo>,
    clock: Arc<dyn Clock>,
    log: ServerLog,
    timings: FirewallTimings,
    state: tokio::sync::Mutex<CheckState>,
    last: Mutex<Option<Outcome>>,
}

fn list(v: &[String]) -> String {
    format!("[{}]", v.join(" "))
}

fn ports(v: &[orca::FirewallPorts]) -> Vec<String> {
    v.iter()
        .flat_map(|p| {
            if p.ports.is_empty() {
                vec![p.protocol.to_ascii_lowercase()]
            } else {
                p.ports
                    .iter()
                    .map(|port| format!("{}:{port}", p.protocol.to_ascii_lowercase()))
                    .collect()
            }
        })
        .collect()
}

fn last_segment(s: &str) -> &str {
    s.trim_end_matches('/').rsplit('/').next().unwrap_or(s)
}

/// What the echo services said in one check.
#[derive(Debug, Clone)]
struct Answers {
    agreed: Option<Ipv4Addr>,
    said: Vec<(String, Result<Ipv4Addr, String>)>,
}

impl Answers {
    fn describe(&self) -> String {
        self.said
            .iter()
            .map(|(u, r)| match r {
                Ok(a) => format!("{u} said {a}"),
                Err(e) => format!("{u}: {e}"),
            })
            .collect::<Vec<_>>()
            .join("; ")
    }
}

impl FirewallCheck {
    /// A check of `want` through `provider`'s firewall extension.
    pub fn new(
        want: Expectation,
        provider: Arc<dyn Provider>,
        echo: Arc<dyn Echo>,
        clock: Arc<dyn Clock>,
        log: ServerLog,
        timings: FirewallTimings,
    ) -> Self {
        FirewallCheck {
            want,
            provider,
            echo,
            clock,
            log,
            timings,
            state: tokio::sync::Mutex::new(CheckState::default()),
            last: Mutex::new(None),
        }
    }

    /// The last result, if the check ever ran.
    pub fn last(&self) -> Option<Outcome> {
        self.last.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The last result when it is at most `max_age` old, else a new check's.
    pub async fn fresh(&self, max_age: Duration) -> Outcome {
        let mut st = self.state.lock().await;
        if let Some(last) = self.last() {
            if since(self.clock.now(), last.at) <= max_age {
                return last;
            }
        }
        self.run(&mut st).await
    }

    /// Runs the check now.
    pub async fn check(&self) -> Outcome {
        let mut st = self.state.lock().await;
        self.run(&mut st).await
    }

    async fn believe(&self, st: &mut CheckState, now: Timestamp) -> Answers {
        let asks = self.want.echo_urls.iter().map(|u| async move {
            let r = self.echo.ask(u).await;
            (u.clone(), r)
        });
        let said: Vec<(String, Result<Ipv4Addr, String>)> = futures::future::join_all(asks).await;
        let mut votes: BTreeMap<Ipv4Addr, usize> = BTreeMap::new();
        for (_, r) in &said {
            if let Ok(a) = r {
                if forbidden_space(&Cidr::host(*a)).is_none() {
                    *votes.entry(*a).or_default() += 1;
                }
            }
        }
        let best = votes.values().copied().max().unwrap_or(0);
        let top: Vec<Ipv4Addr> = votes
            .iter()
            .filter(|(_, n)| **n == best)
            .map(|(a, _)| *a)
            .collect();
        let agreed = (best >= 2 && top.len() == 1).then(|| top[0]);
        if let Some(a) = agreed {
            st.agreement = Some((a, now));
        }
        Answers { agreed, said }
    }

    async fn run(&self, st: &mut CheckState) -> Outcome {
        let now = self.clock.now();
        st.started.get_or_insert(now);
        let mut outcome = self.evaluate(st, now).await;
        self.report(st, &outcome, now);
        outcome.at = now;
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Some(outcome.clone());
        outcome
    }

    async fn read(
        &self,
    ) -> Result<(Option<FirewallRule>, Vec<FirewallRule>, Network, String), String> {
        let Some(fw) = self.provider.firewall_rules() else {
            return Err(format!(
                "the {} provider cannot read firewall rules",
                self.provider.kind()
            ));
        };
        let rule = fw
            .rule(&self.want.rule_name)
            .await
            .map_err(|e| e.to_string())?;
        let rules = fw.rules().await.map_err(|e| e.to_string())?;
        let network = fw.network().await.map_err(|e| e.to_string())?;
        Ok((rule, rules, network, fw.network_name()))
    }

    async fn evaluate(&self, st: &mut CheckState, now: Timestamp) -> Outcome {
        let answers = if self.want.mode == FirewallMode::Auto {
            Some(self.believe(st, now).await)
        } else {
            None
        };
        let expected = self.expected(st, now);
        let (rule, rules, network, net_name) = match self.read().await {
            Ok(r) => r,
            Err(e) => {
                // Every clause that failed, in the table's order: address_unknown comes after.
                let mut failed = vec![FwReason::Unreadable];
                if self
                    .address_unknown(&expected, st, answers.as_ref())
                    .is_some()
                {
                    failed.push(FwReason::AddressUnknown);
                }
                return Outcome {
                    at: now,
                    passed: false,
                    reason: Some(FwReason::Unreadable),
                    failed,
                    message: format!("the firewall rules could not be read: {e}"),
                    sources: Vec::new(),
                };
            }
        };
        let mut out = self.clauses(
            rule.as_ref(),
            &rules,
            &network,
            &net_name,
            &expected,
            st,
            now,
            answers.as_ref(),
        );
        // Mode auto repairs the sources, and nothing else, when every other clause holds.
        if self.want.mode == FirewallMode::Auto && out.failed.contains(&FwReason::RuleSources) {
            let why_not = if out.failed.len() > 1 {
                let other = out
                    .failed
                    .iter()
                    .find(|r| **r != FwReason::RuleSources)
                    .map(|r| r.as_str())
                    .unwrap_or("");
                Some(format!("not repaired: the rule also fails {other}, and its sources are patched only when every other clause passes"))
            } else if answers.as_ref().and_then(|a| a.agreed).is_none() {
                Some(format!(
                    "not repaired: the echo services did not agree in this check ({})",
                    answers.as_ref().map(Answers::describe).unwrap_or_default()
                ))
            } else {
                st.last_patch
                    .filter(|at| since(now, *at) < self.timings.patch_spacing)
                    .map(|at| {
                        format!(
                            "not repaired yet: the rule was last patched {} ago and is patched at most once every {}",
                            go_duration(since(now, at)),
                            go_duration(self.timings.patch_spacing)
                        )
                    })
            };
            match why_not {
                Some(w) => out.message = format!("{}; {w}", out.message),
                None => {
                    let addr = answers.as_ref().and_then(|a| a.agreed).expect("agreed");
                    let new = vec![Cidr::host(addr).to_string()];
                    let old = out.sources.clone();
                    st.last_patch = Some(now);
                    let fw = self.provider.firewall_rules().expect("read above");
                    let patched = fw.set_source_ranges(&self.want.rule_name, &new).await;
                    match patched {
                        Ok(_) => {
                            // Read it back, as the cloud holds it now.
                            match self.read().await {
                                Ok((rule, rules, network, net_name)) => {
                                    let found = rule.as_ref().map(|r| r.source_ranges.clone()).unwrap_or_default();
                                    self.log.info(format!(
                                        "remote: firewall rule {} patched: source ranges {} -> {} (read back: {})",
                                        self.want.rule_name,
                                        list(&old),
                                        list(&new),
                                        list(&found)
                                    ));
                                    let expected = self.expected(st, now);
                                    out = self.clauses(rule.as_ref(), &rules, &network, &net_name, &expected, st, now, answers.as_ref());
                                }
                                Err(e) => {
                                    out = Outcome {
                                        at: now,
                                        passed: false,
                                        reason: Some(FwReason::Unreadable),
                                        failed: vec![FwReason::Unreadable],
                                        message: format!("the firewall rules could not be read back after the patch: {e}"),
                                        sources: Vec::new(),
                                    }
                                }
                            }
                        }
                        Err(e) => {
                            out.message = format!(
                                "{}; not repaired: the patch was refused (auto mode needs the extra roles gce-setup.sh --print --firewall-auto prints): {e}",
                                out.message
                            );
                        }
                    }
                }
            }
        }
        out
    }

    /// The expected sources: `None` in mode any; in mode auto, `Some([])` when the address is unknown.
    fn expected(&self, st: &CheckState, now: Timestamp) -> Option<Vec<String>> {
        match self.want.mode {
            FirewallMode::Any => None,
            FirewallMode::Static => Some(
                self.want
                    .source_ranges
                    .iter()
                    .map(|c| c.to_string())
                    .collect(),
            ),
            FirewallMode::Auto => Some(
                st.agreement
                    .filter(|(_, at)| since(now, *at) <= self.timings.address_trust)
                    .map(|(a, _)| vec![Cidr::host(a).to_string()])
                    .unwrap_or_default(),
            ),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn clauses(
        &self,
        rule: Option<&FirewallRule>,
        rules: &[FirewallRule],
        network: &Network,
        net_name: &str,
        expected: &Option<Vec<String>>,
        st: &CheckState,
        now: Timestamp,
        answers: Option<&Answers>,
    ) -> Outcome {
        let name = &self.want.rule_name;
        let tag = &self.want.tag;
        let mut failed: Vec<(FwReason, String)> = Vec::new();
        let sources: Vec<String> = rule.map(|r| r.source_ranges.clone()).unwrap_or_default();
        match rule {
            None => failed.push((
                FwReason::RuleMissing,
                format!("firewall rule {name} does not exist: expected an ingress rule on network {net_name} allowing tcp:22 to the tag {tag}, found no rule of that name"),
            )),
            Some(r) => {
                if last_segment(&r.network) != last_segment(net_name) {
                    failed.push((
                        FwReason::RuleNetwork,
                        format!("firewall rule {name} is on the wrong network: expected network {net_name}, found network {}", last_segment(&r.network)),
                    ));
                }
                if !r.is_ingress() {
                    failed.push((
                        FwReason::RuleDirection,
                        format!("firewall rule {name} is not an ingress rule: expected direction INGRESS, found direction {}", r.direction),
                    ));
                }
                if r.disabled {
                    failed.push((
                        FwReason::RuleDisabled,
                        format!("firewall rule {name} is disabled: expected it enabled, found it disabled"),
                    ));
                }
                let allowed = ports(&r.allowed);
                if allowed != ["tcp:22"] || !r.denied.is_empty() {
                    failed.push((
                        FwReason::RuleAllow,
                        format!(
                            "firewall rule {name} allows the wrong traffic: expected allowed [tcp:22] and nothing else, found allowed {} denied {}",
                            list(&allowed),
                            list(&ports(&r.denied))
                        ),
                    ));
                }
                if r.target_tags != [tag.clone()] || !r.target_service_accounts.is_empty() {
                    failed.push((
                        FwReason::RuleTarget,
                        format!(
                            "firewall rule {name} targets the wrong instances: expected target tags [{tag}], found target tags {} target service accounts {}",
                            list(&r.target_tags),
                            list(&r.target_service_accounts)
                        ),
                    ));
                }
                if !r.source_tags.is_empty() || !r.source_service_accounts.is_empty() {
                    failed.push((
                        FwReason::RuleSourceKind,
                        format!(
                            "firewall rule {name} admits by more than address: expected source ranges only, found source tags {} source service accounts {}",
                            list(&r.source_tags),
                            list(&r.source_service_accounts)
                        ),
                    ));
                }
                match expected {
                    // Mode any compares no sources; mode auto cannot while its address is unknown
                    // (address_unknown, the table's last clause, below).
                    None => {}
                    Some(want) if want.is_empty() => {}
                    Some(want) => {
                        let mut found: Vec<String> = r.source_ranges.iter().map(|s| normalise(s)).collect();
                        found.sort();
                        found.dedup();
                        let mut want = want.clone();
                        want.sort();
                        if found != want {
                            let mut m = format!(
                                "firewall rule {name} admits the wrong sources: expected source ranges {}, found source ranges {}",
                                list(&want),
                                list(&r.source_ranges)
                            );
                            if self.want.mode == FirewallMode::Auto {
                                m = format!("{m} (the server's public address is {})", want.join(" "));
                            }
                            failed.push((FwReason::RuleSources, m));
                        }
                    }
                }
            }
        }
        let strays: Vec<&FirewallRule> = rules
            .iter()
            .filter(|r| r.name != *name)
            .filter(|r| last_segment(&r.network) == last_segment(net_name))
            .filter(|r| !r.disabled && r.is_ingress() && !r.allowed.is_empty())
            .filter(|r| {
                r.target_tags.contains(tag)
                    || (r.target_tags.is_empty() && r.target_service_accounts.is_empty())
            })
            .collect();
        if let Some(s) = strays.first() {
            let names: Vec<String> = strays.iter().map(|r| r.name.clone()).collect();
            failed.push((
                FwReason::StrayRule,
                format!(
                    "firewall rule {} also admits traffic to the sheds: expected no other enabled ingress allow rule on network {net_name} applying to the tag {tag} or to every instance, found {} (the first allows {} from {} to {})",
                    s.name,
                    list(&names),
                    list(&ports(&s.allowed)),
                    list(&s.source_ranges),
                    if s.target_tags.is_empty() { "every instance".to_string() } else { list(&s.target_tags) }
                ),
            ));
        }
        if network.name == "default" || network.auto_create_subnetworks {
            failed.push((
                FwReason::DefaultNetwork,
                format!(
                    "network {} is the project's default network: expected a custom-mode network of the environment's own, found {} ({} mode)",
                    network.name,
                    network.name,
                    if network.auto_create_subnetworks { "auto" } else { "custom" }
                ),
            ));
        }
        if let Some(m) = self.address_unknown(expected, st, answers) {
            failed.push((FwReason::AddressUnknown, m));
        }
        Outcome {
            at: now,
            passed: failed.is_empty(),
            reason: failed.first().map(|(r, _)| *r),
            failed: failed.iter().map(|(r, _)| *r).collect(),
            message: failed.first().map(|(_, m)| m.clone()).unwrap_or_default(),
            sources,
        }
    }

    /// Mode auto without an address the echo services agreed on (the clause `address_unknown`): why.
    fn address_unknown(
        &self,
        expected: &Option<Vec<String>>,
        st: &CheckState,
        answers: Option<&Answers>,
    ) -> Option<String> {
        if self.want.mode != FirewallMode::Auto || !expected.as_ref().is_some_and(Vec::is_empty) {
            return None;
        }
        let never = answers.is_some() && st.agreement.is_none();
        Some(format!(
            "the server does not know its public address: the echo services have not agreed on it {}: expected at least two services reporting the same public IPv4 address, found: {}",
            if never { "since the server started".to_string() } else { format!("for {}", go_duration(self.timings.address_trust)) },
            answers.map(Answers::describe).unwrap_or_default()
        ))
    }

    /// Logs `o` when the result changed (by [`LogKey`]), and again every ten minutes while it fails.
    fn report(&self, st: &mut CheckState, o: &Outcome, now: Timestamp) {
        let mut sources: Vec<String> = o.sources.iter().map(|s| normalise(s)).collect();
        sources.sort();
        let key = LogKey {
            passed: o.passed,
            mode: self.want.mode,
            reason: o.reason,
            failed: o.failed.clone(),
            rule: self.want.rule_name.clone(),
            expected: self.expected(st, now),
            sources,
        };
        let due = match &st.logged {
            None => true,
            Some((k, at)) => *k != key || (!o.passed && since(now, *at) >= self.timings.log_repeat),
        };
        if !due {
            return;
        }
        st.logged = Some((key, now));
        let mode = self.want.mode.as_str();
        if o.passed {
            self.log.info(format!(
                "remote: firewall check passed (mode {mode}, rule {}, sources {})",
                self.want.rule_name,
                o.sources.join(", ")
            ));
        } else {
            self.log.warn(format!(
                "remote: firewall check FAILED (mode {mode}, reason {}): {}. Creates and starts are refused until it passes; stop, delete, list and exec are not affected",
                o.reason.map(|r| r.as_str()).unwrap_or(""),
                o.message
            ));
        }
    }
}
