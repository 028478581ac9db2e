//! Start and stop, by the call-by-status matrix, and exec and connect (which need a running shed).

use orca::words;
use serde::{Deserialize, Serialize};

use super::{ApiError, Backend, Caller};
use crate::model::{Op, Queued, Shed, ShedView, Status};

words! {
    /// What a start or stop did.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
    #[serde(rename_all = "snake_case")]
    pub enum Effect {
        /// The status changed (to `starting` or `stopping`).
        Changed = "changed",
        /// Queued behind the cloud operation already running.
        Queued = "queued",
        /// Nothing to do.
        NoChange = "no_change",
    }
}

/// 409 `SHED_FAILED`: shed `name` is in error; `then` says what leaves that state.
fn in_error(name: &str, s: &Shed, then: &str) -> ApiError {
    let reason = s.reason.map(|r| r.as_str()).unwrap_or("");
    ApiError::conflict(
        "SHED_FAILED",
        format!("shed {name:?} is in error (reason {reason}): {then}"),
    )
}

impl Backend {
    /// `POST /api/sheds/{name}/start`, by status: `starting` no change (a queued stop is
    /// cancelled), `running` 409, `stopping` queued, `stopped` starting, `error` 409.
    pub async fn start_shed(
        &self,
        caller: &Caller,
        name: &str,
    ) -> Result<(ShedView, Effect), ApiError> {
        let Shed { id, status, .. } = Self::find(&self.state(), caller, name)?.clone();
        if status == Status::Stopped {
            self.require_firewall(caller).await?;
        }
        let now = self.now();
        let mut st = self.state();
        let Some(s) = st.sheds.get_mut(&id) else {
            return Err(ApiError::not_found(name));
        };
        let effect = match s.status {
            Status::Starting => {
                if s.queued == Some(Queued::Stop) {
                    s.queued = None;
                    self.save(s);
                }
                Effect::NoChange
            }
            Status::Running => {
                return Err(ApiError::conflict(
                    "SHED_RUNNING",
                    format!("shed {name:?} is running"),
                ))
            }
            Status::Stopping => {
                s.queued = Some(Queued::Start);
                self.save(s);
                Effect::Queued
            }
            Status::Stopped => {
                if status != Status::Stopped {
                    // It stopped while the call looked: judge by the last result.
                    if let Some(o) = self.inner.firewall.last().filter(|o| !o.passed) {
                        return Err(self.firewall_refusal(caller, &o));
                    }
                }
                self.check_limits(&st, Some(&id), false)?;
                let s = st.sheds.get_mut(&id).expect("found");
                s.set(Status::Starting, None, now);
                s.op = Some(Op::Start);
                s.start_sent = false;
                s.queued = None;
                self.save(s);
                Effect::Changed
            }
            Status::Error => {
                let then = "its create failed, and only a delete leaves this state";
                return Err(in_error(name, s, then));
            }
        };
        let view = ShedView::from(&st.sheds[&id]);
        drop(st);
        self.bump();
        if effect != Effect::NoChange {
            self.spawn_job(&id);
        }
        Ok((view, effect))
    }

    /// `POST /api/sheds/{name}/stop`, by status: `starting` queued, `running` stopping, `stopping`
    /// no change (a queued start is cancelled), `stopped` 409, `error` 409.
    pub async fn stop_shed(
        &self,
        caller: &Caller,
        name: &str,
    ) -> Result<(ShedView, Effect), ApiError> {
        let now = self.now();
        let mut st = self.state();
        let id = Self::find(&st, caller, name)?.id.clone();
        let s = st.sheds.get_mut(&id).expect("found");
        let effect = match s.status {
            Status::Starting => {
                s.queued = Some(Queued::Stop);
                Effect::Queued
            }
            Status::Running => {
                s.set(Status::Stopping, None, now);
                s.op = Some(Op::Stop);
                s.queued = None;
                Effect::Changed
            }
            Status::Stopping => {
                if s.queued == Some(Queued::Start) {
                    s.queued = None;
                }
                Effect::NoChange
            }
            Status::Stopped => {
                return Err(ApiError::conflict(
                    "SHED_STOPPED",
                    format!("shed {name:?} is stopped"),
                ))
            }
            Status::Error => return Err(in_error(name, s, "only a delete leaves this state")),
        };
        self.save(s);
        let view = ShedView::from(&*s);
        drop(st);
        self.log().info(format!(
            "remote: shed {name} ({id}) stop accepted for client {} ({})",
            caller.name,
            effect.as_str()
        ));
        self.bump();
        self.spawn_job(&id);
        Ok((view, effect))
    }

    /// `POST /api/sheds/{name}/exec` and the connect tunnel: 409 `SHED_NOT_RUNNING` on a shed that is
    /// not running; 501 otherwise (not built in this example).
    pub fn exec_or_connect(&self, caller: &Caller, name: &str, what: &str) -> ApiError {
        let st = self.state();
        match Self::find(&st, caller, name) {
            Err(e) => e,
            Ok(s) if s.status != Status::Running => ApiError::conflict(
                "SHED_NOT_RUNNING",
                format!("shed {name:?} is {}, not running", s.status),
            ),
            Ok(_) => ApiError::unsupported_route(format!(
                "{what} is not built in this example server (the in-VM agent is out of its scope)"
            )),
        }
    }
}
