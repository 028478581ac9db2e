//! The firewall check: the rule `shed-<environment>-ssh` and its
//! network must be as expected before the server asks the cloud for a VM or starts one. The server never
//! makes or removes a rule; in mode `auto` it changes one thing, the rule's source ranges, under the
//! conditions its `auto` module states.
//!
//! A [`FirewallCheck`] keeps the last result ([`Outcome`]); the periodic pass runs it, and so does a
//! create or start whose last result is older than 60 s. It writes its log lines (`remote: firewall check passed ...`, `... FAILED ...`) when the result
//! changes and every ten minutes while it fails.

use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use orca::{words, Provider, Timestamp};

use crate::backend::lock;
use crate::clock::{since, Clock};
use crate::config::FirewallMode;
use crate::echo::Echo;
use crate::log::ServerLog;
use crate::netaddr::{normalise, Cidr};

mod auto;
mod clauses;

use clauses::Read;

words! {
    /// Why the check failed: the first clause that failed, in the order the README lists them. Its
    /// word is the log's and the 503 message's.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum FwReason {
        /// The rule does not exist.
        RuleMissing = "rule_missing",
        /// It is on another network.
        RuleNetwork = "rule_network",
        /// It is not an ingress rule.
        RuleDirection = "rule_direction",
        /// It is disabled.
        RuleDisabled = "rule_disabled",
        /// It allows something other than exactly tcp:22.
        RuleAllow = "rule_allow",
        /// It does not target exactly the tag `shed-<environment>`.
        RuleTarget = "rule_target",
        /// It admits by source tags or service accounts.
        RuleSourceKind = "rule_source_kind",
        /// Its source ranges are not the expected set.
        RuleSources = "rule_sources",
        /// Another enabled ingress allow rule applies to the sheds.
        StrayRule = "stray_rule",
        /// The network is the project's default network.
        DefaultNetwork = "default_network",
        /// The rules could not be read.
        Unreadable = "unreadable",
        /// Mode auto: the server does not know its public address.
        AddressUnknown = "address_unknown",
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
        lock(&self.last).clone()
    }

    /// The last result when it is at most `max_age` old, else a new check's.
    pub async fn fresh(&self, max_age: Duration) -> Outcome {
        let mut st = self.state.lock().await;
        match self.last() {
            Some(last) if since(self.clock.now(), last.at) <= max_age => last,
            _ => self.run(&mut st).await,
        }
    }

    /// Runs the check now.
    pub async fn check(&self) -> Outcome {
        let mut st = self.state.lock().await;
        self.run(&mut st).await
    }

    async fn run(&self, st: &mut CheckState) -> Outcome {
        let now = self.clock.now();
        let mut outcome = self.evaluate(st, now).await;
        self.report(st, &outcome, now);
        outcome.at = now;
        *lock(&self.last) = Some(outcome.clone());
        outcome
    }

    /// Reads the rule, every rule of the project and the network.
    async fn read(&self) -> Result<Read, String> {
        let Some(fw) = self.provider.firewall_rules() else {
            return Err(format!(
                "the {} provider cannot read firewall rules",
                self.provider.kind()
            ));
        };
        let name = &self.want.rule_name;
        let rule = fw.rule(name).await.map_err(|e| e.to_string())?;
        let rules = fw.rules().await.map_err(|e| e.to_string())?;
        let network = fw.network().await.map_err(|e| e.to_string())?;
        Ok(Read {
            rule,
            rules,
            network,
            net_name: fw.network_name(),
        })
    }

    /// One check: (mode auto) the echo services asked, the cloud read, every clause, and (mode
    /// auto) the repair of the sources when they are all that fails.
    async fn evaluate(&self, st: &mut CheckState, now: Timestamp) -> Outcome {
        let answers = match self.want.mode {
            FirewallMode::Auto => Some(self.believe(st, now).await),
            _ => None,
        };
        let expected = self.expected(st, now);
        let read = match self.read().await {
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
        let out = self.clauses(&read, &expected, st, now, answers.as_ref());
        if self.want.mode == FirewallMode::Auto && out.failed.contains(&FwReason::RuleSources) {
            return self.repair(st, now, out, answers.as_ref()).await;
        }
        out
    }

    /// The expected sources: `None` in mode any; in mode auto, `Some([])` when the address is unknown.
    fn expected(&self, st: &CheckState, now: Timestamp) -> Option<Vec<String>> {
        let ranges = &self.want.source_ranges;
        match self.want.mode {
            FirewallMode::Any => None,
            FirewallMode::Static => Some(ranges.iter().map(|c| c.to_string()).collect()),
            FirewallMode::Auto => Some(
                st.agreement
                    .filter(|(_, at)| since(now, *at) <= self.timings.address_trust)
                    .map(|(a, _)| vec![Cidr::host(a).to_string()])
                    .unwrap_or_default(),
            ),
        }
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
        let due = |(k, at): &(LogKey, Timestamp)| {
            *k != key || (!o.passed && since(now, *at) >= self.timings.log_repeat)
        };
        if !st.logged.as_ref().is_none_or(due) {
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
