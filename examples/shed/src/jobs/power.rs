//! A start's and a stop's cloud call, and the removal of a shed whose VM turned out to be gone.

use orca::{Error, Machine};

use super::refusal;
use crate::backend::Backend;
use crate::model::{Op, Queued, Reason, Status};

impl Backend {
    pub(super) async fn step_power_on(&self, id: &str, vm: &str) {
        let fw = self.inner.firewall.check().await;
        {
            let now = self.now();
            let mut st = self.state();
            let Some(s) = st.sheds.get(id) else { return };
            let name = s.name.clone();
            let refusal = if !fw.passed {
                Some((Reason::Firewall, fw.message.clone()))
            } else {
                self.check_limits(&st, Some(id), false)
                    .err()
                    .map(|e| (Reason::Limit, e.message))
            };
            if let Some((reason, why)) = refusal {
                let s = st.sheds.get_mut(id).expect("present");
                s.fail(Status::Stopped, reason, why.clone(), now);
                self.save(s);
                self.log().warn(format!(
                    "remote: shed {name} ({id}) start not sent ({reason}): {why}"
                ));
                return;
            }
        }
        let r = match self.may_power(id, vm).await {
            Ok(false) => return,
            Ok(true) => self.inner.provider.start(vm).await.map(drop),
            Err(e) => Err(e),
        };
        match r {
            Ok(_) => _ = self.update(id, |s, _| s.start_sent = true),
            Err(Error::NotFound { .. }) => self.gone_if_confirmed(id, vm).await,
            Err(e) => {
                let reason = refusal(&e);
                let name = self.update(id, |s, now| {
                    s.set(Status::Stopped, reason, now);
                    s.detail = Some(e.to_string());
                });
                if name {
                    self.log().warn(format!(
                        "remote: shed {id} start failed{}: {e}",
                        reason.map(|r| format!(" ({r})")).unwrap_or_default()
                    ));
                }
            }
        }
    }

    pub(super) async fn step_power_off(&self, id: &str, vm: &str) {
        let r = match self.may_power(id, vm).await {
            Ok(false) => return,
            Ok(true) => self.inner.provider.stop(vm).await.map(drop),
            Err(e) => Err(e),
        };
        match r {
            Ok(_) => {
                let mut name = String::new();
                let mut start = false;
                self.update(id, |s, now| {
                    let queued = s.queued.take();
                    s.set(Status::Stopped, None, now);
                    name = s.name.clone();
                    if queued == Some(Queued::Start) {
                        s.set(Status::Starting, None, now);
                        s.op = Some(Op::Start);
                        s.start_sent = false;
                        start = true;
                    }
                });
                if start {
                    self.log().info(format!(
                        "remote: shed {name} ({id}) stopped; starting it for the start queued behind the stop"
                    ));
                } else if !name.is_empty() {
                    self.log()
                        .info(format!("remote: shed {name} ({id}) stopped: its VM is off"));
                }
            }
            Err(Error::NotFound { .. }) => self.gone_if_confirmed(id, vm).await,
            Err(e) => {
                self.update(id, |s, _| s.detail = Some(e.to_string()));
                self.log().warn(format!(
                    "remote: shed {id} stop failed (the periodic pass stops it again): {e}"
                ));
            }
        }
    }

    /// Reads the VM a record names by id before a start or stop acts on it: true when it is shed
    /// `id`'s. The id is taken from a file, and the owner every shed server uses reaches the VMs of
    /// every environment, so an id alone never says that a VM is the shed's. A VM that is gone, or
    /// that is not the shed's (which is left alone), ends the record as a gone VM does; a VM of
    /// the shed's own then stands without a record, and the pass handles it as such.
    async fn may_power(&self, id: &str, vm: &str) -> Result<bool, Error> {
        let Some(m) = self.inner.provider.machine(vm).await? else {
            self.vm_gone(id);
            return Ok(false);
        };
        if self.is_shed_vm(&m, id) {
            return Ok(true);
        }
        self.not_its_vm_to_power(id, &m);
        Ok(false)
    }

    fn not_its_vm_to_power(&self, id: &str, m: &Machine) {
        let mut st = self.state();
        if let Some(s) = self.drop_record(&mut st, id) {
            self.log().warn(format!(
                "remote: shed {} ({id}) removed: the VM its record names, {}",
                s.name,
                super::not_its(m)
            ));
        }
    }

    /// Removes shed `id` when a read of its one VM confirms that it is gone.
    pub(crate) async fn gone_if_confirmed(&self, id: &str, vm: &str) {
        match self.inner.provider.machine(vm).await {
            Ok(None) => self.vm_gone(id),
            Ok(Some(_)) => {}
            Err(e) => self
                .log()
                .warn(format!("remote: shed {id}: its VM could not be read: {e}")),
        }
    }

    /// Shed `id`'s VM is gone: a shed in error says so, any other is removed.
    fn vm_gone(&self, id: &str) {
        let mut st = self.state();
        let Some(s) = st.sheds.get_mut(id) else {
            return;
        };
        if s.status == Status::Error {
            s.vm_gone = true;
            self.save(s);
        } else if let Some(s) = self.drop_record(&mut st, id) {
            self.log().info(format!(
                "remote: shed {} ({id}) removed: its VM no longer exists",
                s.name
            ));
        }
    }
}
