//! What may refuse a create or a start: the server's limits (`max_running`, `max_sheds`) and the
//! firewall check.

use super::{ApiError, Backend, Caller, State};
use crate::clock::since;
use crate::firewall::Outcome;

impl Backend {
    /// Checks the limits for one more running shed (and, for a new one, one more shed).
    pub(crate) fn check_limits(
        &self,
        st: &State,
        exclude: Option<&str>,
        new_shed: bool,
    ) -> Result<(), ApiError> {
        let limits = self.inner.cfg.limits;
        let others = st.sheds.values().filter(|s| Some(s.id.as_str()) != exclude);
        if new_shed {
            let kept = others.clone().count();
            if kept >= limits.max_sheds as usize {
                return Err(ApiError::new(
                    503,
                    "SERVER_LIMIT_REACHED",
                    format!(
                        "the server keeps at most {} sheds (max_sheds) and keeps {kept}: delete one first",
                        limits.max_sheds
                    ),
                ));
            }
        }
        // `max_running`'s count: sheds whose VM is on, and VMs of deletes older than two minutes.
        let now = self.now();
        let on = others.filter(|s| s.status.counts_as_running()).count();
        let lingering = st
            .deletes
            .values()
            .filter(|m| {
                m.may_have_vm && since(now, m.acknowledged_at) > self.inner.timings.delete_grace
            })
            .count();
        if on + lingering >= limits.max_running as usize {
            let mut m = format!(
                "the server runs at most {} sheds at once (max_running) and {} are running",
                limits.max_running,
                on + lingering
            );
            if lingering > 0 {
                m.push_str(&format!(
                    ", {lingering} of them the VM of a deleted shed that could not be destroyed yet (the server keeps trying; its log has the cloud's error)"
                ));
            }
            m.push_str(": stop one, or try again later");
            return Err(ApiError::new(503, "SERVER_LIMIT_REACHED", m));
        }
        Ok(())
    }

    /// Refuses with `FIREWALL_CHECK_FAILED` while the firewall check fails (running it when its last
    /// result is older than 60 s).
    pub(crate) async fn require_firewall(&self, caller: &Caller) -> Result<(), ApiError> {
        let fw = &self.inner.firewall;
        let o = fw.fresh(self.inner.timings.check_freshness).await;
        if o.passed {
            return Ok(());
        }
        Err(self.firewall_refusal(caller, &o))
    }

    pub(super) fn firewall_refusal(&self, caller: &Caller, o: &Outcome) -> ApiError {
        let message = if caller.is_admin() {
            format!(
                "the firewall check is failing (mode {}, reason {}): {}",
                self.inner.cfg.firewall.mode.as_str(),
                o.reason.map(|r| r.as_str()).unwrap_or(""),
                o.message
            )
        } else {
            o.service_message()
        };
        ApiError::new(503, "FIREWALL_CHECK_FAILED", message)
    }
}
