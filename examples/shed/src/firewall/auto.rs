//! Mode auto: the server's public address, believed when two echo services agree on it, and the
//! repair of the rule's source ranges (only them) to that one /32, at most once every 5 minutes and
//! only when every other clause holds.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use orca::Timestamp;

use super::{list, CheckState, FirewallCheck, FwReason, Outcome};
use crate::clock::{go_duration, since};
use crate::netaddr::{forbidden_space, Cidr};

/// What the echo services said in one check.
#[derive(Debug, Clone)]
pub(super) struct Answers {
    /// The address at least two services reported, and more than any other.
    pub(super) agreed: Option<Ipv4Addr>,
    /// What each service said.
    pub(super) said: Vec<(String, Result<Ipv4Addr, String>)>,
}

impl Answers {
    pub(super) fn describe(&self) -> String {
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
    /// Asks every echo service. An address in space a rule could not name (private, loopback, ...)
    /// gets no vote; the agreed address is remembered with when it was agreed.
    pub(super) async fn believe(&self, st: &mut CheckState, now: Timestamp) -> Answers {
        let urls = self.want.echo_urls.iter();
        let asks = urls.map(|u| async move { (u.clone(), self.echo.ask(u).await) });
        let said = futures::future::join_all(asks).await;
        let mut votes: BTreeMap<Ipv4Addr, usize> = BTreeMap::new();
        let said_ok = said.iter().filter_map(|(_, r)| r.as_ref().ok());
        for a in said_ok.filter(|a| forbidden_space(&Cidr::host(**a)).is_none()) {
            *votes.entry(*a).or_default() += 1;
        }
        let best = votes.values().copied().max().unwrap_or(0);
        let top: Vec<_> = votes.iter().filter(|(_, n)| **n == best).collect();
        let agreed = (best >= 2 && top.len() == 1).then(|| *top[0].0);
        if let Some(a) = agreed {
            st.agreement = Some((a, now));
        }
        Answers { agreed, said }
    }

    /// `out` failed on its sources (mode auto): patches them when it may, and answers the result
    /// as read back; otherwise `out`, its message saying why the rule was not repaired.
    pub(super) async fn repair(
        &self,
        st: &mut CheckState,
        now: Timestamp,
        mut out: Outcome,
        answers: Option<&Answers>,
    ) -> Outcome {
        let agreed = answers.and_then(|a| a.agreed);
        match (self.why_not_repaired(&out, st, now, answers), agreed) {
            (None, Some(addr)) => self.patch(st, now, out, addr, answers).await,
            (why, _) => {
                out.message = format!("{}; {}", out.message, why.unwrap_or_default());
                out
            }
        }
    }

    /// Why the sources may not be patched now: another clause fails, the services did not agree in
    /// this check, or the last patch is under the patch spacing (5 minutes) old.
    fn why_not_repaired(
        &self,
        out: &Outcome,
        st: &CheckState,
        now: Timestamp,
        answers: Option<&Answers>,
    ) -> Option<String> {
        if let Some(other) = out.failed.iter().find(|r| **r != FwReason::RuleSources) {
            return Some(format!(
                "not repaired: the rule also fails {}, and its sources are patched only when every other clause passes",
                other.as_str()
            ));
        }
        if answers.and_then(|a| a.agreed).is_none() {
            return Some(format!(
                "not repaired: the echo services did not agree in this check ({})",
                answers.map(Answers::describe).unwrap_or_default()
            ));
        }
        st.last_patch
            .filter(|at| since(now, *at) < self.timings.patch_spacing)
            .map(|at| {
                format!(
                    "not repaired yet: the rule was last patched {} ago and is patched at most once every {}",
                    go_duration(since(now, at)),
                    go_duration(self.timings.patch_spacing)
                )
            })
    }

    /// Sets the rule's source ranges to `addr`'s /32, reads the rule back and logs old and new.
    async fn patch(
        &self,
        st: &mut CheckState,
        now: Timestamp,
        mut out: Outcome,
        addr: Ipv4Addr,
        answers: Option<&Answers>,
    ) -> Outcome {
        let new = vec![Cidr::host(addr).to_string()];
        let old = out.sources.clone();
        st.last_patch = Some(now);
        let fw = self.provider.firewall_rules().expect("read before");
        if let Err(e) = fw.set_source_ranges(&self.want.rule_name, &new).await {
            out.message = format!(
                "{}; not repaired: the patch was refused (auto mode needs the two roles of shed's README, \"The Compute Engine project\"): {e}",
                out.message
            );
            return out;
        }
        // Read it back, as the cloud holds it now.
        match self.read().await {
            Ok(read) => {
                let expected = self.expected(st, now);
                let out = self.clauses(&read, &expected, st, now, answers);
                self.log.info(format!(
                    "remote: firewall rule {} patched: source ranges {} -> {} (read back: {})",
                    self.want.rule_name,
                    list(&old),
                    list(&new),
                    list(&out.sources)
                ));
                out
            }
            Err(e) => Outcome {
                at: now,
                passed: false,
                reason: Some(FwReason::Unreadable),
                failed: vec![FwReason::Unreadable],
                message: format!("the firewall rules could not be read back after the patch: {e}"),
                sources: Vec::new(),
            },
        }
    }
}
