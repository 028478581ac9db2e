//! Keeping records and the cloud in step: the periodic pass (the seed's "Keeping records and the cloud
//! in step" table) and, with `startup`, the reconciliation of a server that starts (the seed's "Server
//! restarts" list).
//!
//! A pass runs the firewall check, lists the environment's VMs once, and corrects what differs for
//! sheds with no job in flight. It destroys a VM only for an acknowledged delete, a failed create, or a
//! create abandoned (labelled `creating` 15 minutes after the cloud made it, with no record); any other
//! VM it does not know is left alone.

use std::collections::HashMap;

use orca::{Machine, Status as VmStatus};

use crate::backend::{Backend, CLIENT_LABEL, ID_LABEL, NAME_LABEL, SIZE_LABEL, STATE_LABEL};
use crate::clock::{go_duration, since};
use crate::jobs::{readable, stop_reason};
use crate::model::{
    validate_shed_name, CreateStage, DeleteMarker, Op, Queued, Reason, Shed, Status,
};

fn is_on(m: &Machine) -> bool {
    matches!(m.status, VmStatus::Running | VmStatus::Starting)
}

impl Backend {
    /// One pass over the cloud (with `startup`: the start-up reconciliation).
    pub async fn pass(&self, startup: bool) {
        let _serial = self.inner.pass_lock.lock().await;
        self.inner.firewall.check().await;
        let vms = match self
            .inner
            .provider
            .machines(&self.inner.cfg.environment)
            .await
        {
            Ok(v) => v,
            Err(e) => {
                self.inner.log.warn(format!(
                    "remote: the environment's VMs could not be listed (nothing is changed; the next pass looks again): {e}"
                ));
                self.unreadable_pass(startup);
                self.bump();
                return;
            }
        };
        let mut by_id: HashMap<String, Machine> = HashMap::new();
        for m in vms {
            if let Some(id) = m.labels.get(ID_LABEL).cloned() {
                by_id.insert(id, m);
            }
        }
        let (records, markers) = {
            let st = self.state();
            let records: Vec<Shed> = st
                .sheds
                .values()
                .filter(|s| !st.jobs.contains(&s.id))
                .cloned()
                .collect();
            let markers: Vec<DeleteMarker> = st
                .deletes
                .values()
                .filter(|m| !st.jobs.contains(&m.id))
                .cloned()
                .collect();
            (records, markers)
        };
        for m in &markers {
            self.pass_marker(m, by_id.get(&m.id), startup).await;
        }
        for s in &records {
            self.pass_record(s, by_id.get(&s.id)).await;
        }
        let known: Vec<String> = {
            let st = self.state();
            st.sheds.keys().chain(st.deletes.keys()).cloned().collect()
        };
        for (id, m) in &by_id {
            if !known.contains(id) {
                self.pass_orphan(id, m, startup).await;
            }
        }
        self.bump();
    }

    /// A pass whose listing failed: starting sheds say `cloud_unreadable`; at start-up the jobs of
    /// `starting` and `stopping` records resume (they read the cloud themselves).
    fn unreadable_pass(&self, startup: bool) {
        let ids: Vec<(String, Status)> = {
            let now = self.now();
            let mut st = self.state();
            let idle: Vec<String> = st
                .sheds
                .keys()
                .filter(|id| !st.jobs.contains(*id))
                .cloned()
                .collect();
            let mut out = Vec::new();
            for id in idle {
                let s = st.sheds.get_mut(&id).expect("listed");
                if s.status == Status::Starting && s.create == CreateStage::Made {
                    let op = s.op;
                    s.set(Status::Starting, Some(Reason::CloudUnreadable), now);
                    s.op = op;
                    let snap = s.clone();
                    self.save(&snap);
                }
                out.push((id, s.status));
            }
            out
        };
        if startup {
            for (id, status) in ids {
                if matches!(status, Status::Starting | Status::Stopping) {
                    self.spawn_job(&id);
                }
            }
        }
    }

    /// Applies `f` to shed `id` if it still has status `seen` and no job; writes it.
    fn apply(&self, id: &str, seen: Status, f: impl FnOnce(&mut Shed, orca::Timestamp)) -> bool {
        let now = self.now();
        let mut st = self.state();
        if st.jobs.contains(id) {
            return false;
        }
        let Some(s) = st.sheds.get_mut(id) else {
            return false;
        };
        if s.status != seen {
            return false;
        }
        f(s, now);
        let snap = s.clone();
        self.save(&snap);
        true
    }

    async fn pass_marker(&self, m: &DeleteMarker, vm: Option<&Machine>, startup: bool) {
        match vm {
            Some(vm) if !readable(vm) => {
                let mut st = self.state();
                if let Some(mk) = st.deletes.get_mut(&m.id) {
                    if !mk.foreign_labels || mk.vm_id.is_none() {
                        mk.foreign_labels = true;
                        mk.vm_id = Some(vm.id.clone());
                        let snap = mk.clone();
                        self.save_marker(&snap);
                    }
                }
            }
            Some(vm) => {
                let age = since(self.now(), m.acknowledged_at);
                if startup || age > self.inner.timings.delete_grace {
                    {
                        let mut st = self.state();
                        if let Some(mk) = st.deletes.get_mut(&m.id) {
                            mk.vm_id = Some(vm.id.clone());
                            mk.foreign_labels = false;
                            let snap = mk.clone();
                            self.save_marker(&snap);
                        }
                    }
                    if !startup {
                        self.inner.log.info(format!(
                            "remote: shed {} ({}): retrying the destroy of its VM, deleted {} ago",
                            m.name,
                            m.id,
                            go_duration(age)
                        ));
                    }
                    self.spawn_job(&m.id);
                }
            }
            None => {
                let gone = match &m.vm_id {
                    Some(vm) => matches!(self.inner.provider.machine(vm).await, Ok(None)),
                    None => true,
                };
                if gone {
                    let mut st = self.state();
                    if st.jobs.contains(&m.id) {
                        return;
                    }
                    if self.drop_marker(&mut st, &m.id).is_some() {
                        self.inner.log.info(format!(
                            "remote: shed {} ({}) deleted: its VM is gone",
                            m.name, m.id
                        ));
                    }
                }
            }
        }
    }

    async fn pass_record(&self, s: &Shed, vm: Option<&Machine>) {
        let id = s.id.as_str();
        let window = self.inner.timings.run_limit_window;
        let now = self.now();
        if let Some(m) = vm {
            if !readable(m) {
                // Another version's labels: nothing is changed; a starting shed says why it waits.
                self.apply(id, s.status, |r, now| {
                    r.foreign_labels = true;
                    if r.status == Status::Starting {
                        let op = r.op;
                        r.set(Status::Starting, Some(Reason::CloudUnreadable), now);
                        r.op = op;
                    }
                });
                return;
            }
        }
        match (s.status, vm) {
            (Status::Starting, _) if s.op == Some(Op::Create) && s.create != CreateStage::Made => {
                self.spawn_job(id);
            }
            (Status::Running | Status::Stopped | Status::Stopping | Status::Starting, None) => {
                if let Some(vm) = &s.vm_id {
                    self.gone_if_confirmed(id, vm).await;
                }
            }
            (Status::Running, Some(m)) => match m.status {
                VmStatus::Stopped => {
                    let reason = stop_reason(m, now, window);
                    if self.apply(id, Status::Running, |r, now| {
                        r.set(Status::Stopped, Some(reason), now);
                        r.foreign_labels = false;
                    }) {
                        self.inner.log.info(format!(
                            "remote: shed {} ({id}) stopped ({reason}): its VM was stopped by the cloud or outside shed",
                            s.name
                        ));
                    }
                }
                VmStatus::Stopping => {
                    self.apply(id, Status::Running, |r, now| {
                        r.set(Status::Stopping, None, now);
                        r.op = Some(Op::ExternalStop);
                    });
                }
                _ => {
                    self.apply(id, Status::Running, |r, _| {
                        r.foreign_labels = false;
                        if r.vm_id.is_none() {
                            r.vm_id = Some(m.id.clone());
                        }
                    });
                    if is_on(m) && m.labels.get(STATE_LABEL).map(String::as_str) != Some("ready") {
                        self.label_ready(id, &m.id).await;
                    }
                }
            },
            (Status::Stopped, Some(m)) => {
                if is_on(m)
                    && self.apply(id, Status::Stopped, |r, now| {
                        r.set(Status::Starting, None, now);
                        r.op = Some(Op::Probe);
                        r.foreign_labels = false;
                    })
                {
                    self.inner.log.info(format!(
                        "remote: shed {} ({id}): its VM was started outside shed; probing its agent",
                        s.name
                    ));
                    self.spawn_job(id);
                }
            }
            (Status::Stopping, Some(m)) => {
                let external = s.op == Some(Op::ExternalStop);
                match m.status {
                    VmStatus::Stopped => {
                        let reason = external.then(|| stop_reason(m, now, window));
                        let mut start = false;
                        self.apply(id, Status::Stopping, |r, now| {
                            r.set(Status::Stopped, reason, now);
                            // A start queued behind the stop acts once the VM is stopped.
                            if r.queued.take() == Some(Queued::Start) {
                                r.set(Status::Starting, None, now);
                                r.op = Some(Op::Start);
                                r.start_sent = false;
                                start = true;
                            }
                        });
                        if start {
                            self.inner.log.info(format!(
                                "remote: shed {} ({id}) stopped; starting it for the start queued behind the stop",
                                s.name
                            ));
                            self.spawn_job(id);
                        }
                    }
                    VmStatus::Stopping => {}
                    _ if external => {
                        if self.apply(id, Status::Stopping, |r, now| {
                            r.set(Status::Starting, None, now);
                            r.op = Some(Op::Probe);
                            // The VM is on again: a queued start has nothing left to do.
                            r.queued = None;
                        }) {
                            self.spawn_job(id);
                        }
                    }
                    _ => {
                        // A stop that failed: stop it again.
                        self.spawn_job(id);
                    }
                }
            }
            (Status::Starting, Some(_)) => {
                self.apply(id, Status::Starting, |r, now| {
                    r.foreign_labels = false;
                    if r.reason == Some(Reason::CloudUnreadable) {
                        let op = r.op;
                        r.set(Status::Starting, None, now);
                        r.op = op;
                    }
                });
                self.spawn_job(id);
            }
            (Status::Error, Some(m)) => {
                self.apply(id, Status::Error, |r, _| {
                    r.vm_id = Some(m.id.clone());
                    r.vm_gone = false;
                });
                self.spawn_job(id);
            }
            (Status::Error, None) => {
                if s.vm_gone {
                    return;
                }
                match &s.vm_id {
                    Some(vm) => self.gone_if_confirmed(id, vm).await,
                    None => {
                        self.apply(id, Status::Error, |r, _| r.vm_gone = true);
                    }
                }
            }
        }
    }

    async fn pass_orphan(&self, id: &str, m: &Machine, startup: bool) {
        if !readable(m) {
            return;
        }
        let state = m.labels.get(STATE_LABEL).map(String::as_str).unwrap_or("");
        let age = m.created_at.map(|c| since(self.now(), c));
        let destroy_why = match state {
            "deleting" => Some("it is labelled deleting".to_string()),
            "creating" if age.is_some_and(|a| a >= self.inner.timings.orphan_age) => Some(format!(
                "it is still labelled creating {} after the cloud made it, with no record: a create nobody will finish",
                go_duration(age.unwrap_or_default())
            )),
            _ => None,
        };
        if let Some(why) = destroy_why {
            match self.inner.provider.delete(&m.id).await {
                Ok(_) => self
                    .inner
                    .log
                    .info(format!("remote: VM {} destroyed: {why}", m.name)),
                Err(e) => self.inner.log.warn(format!(
                    "remote: VM {} could not be destroyed ({why}); the next pass tries again: {e}",
                    m.name
                )),
            }
            return;
        }
        if startup && state == "ready" {
            self.adopt(id, m);
        }
    }

    /// Adopts a VM labelled `ready` that has no record, under its own shed ID.
    fn adopt(&self, id: &str, m: &Machine) {
        let cfg = &self.inner.cfg;
        let name = m.labels.get(NAME_LABEL).cloned().unwrap_or_default();
        if validate_shed_name(&name).is_err() {
            self.inner.log.warn(format!(
                "remote: VM {} is labelled ready but has no valid {NAME_LABEL}; it is left alone",
                m.name
            ));
            return;
        }
        let now = self.now();
        let size_name = m.labels.get(SIZE_LABEL).cloned().unwrap_or_default();
        let size = cfg.sizes.get(&size_name);
        let on = is_on(m);
        let shed = Shed {
            id: id.to_string(),
            name: name.clone(),
            client: m
                .labels
                .get(CLIENT_LABEL)
                .cloned()
                .unwrap_or_else(|| "local".into()),
            size: size_name.clone(),
            machine_type: m.machine_type.clone(),
            cpus: size.map(|s| s.cpus).unwrap_or(0),
            memory_mb: size.map(|s| s.memory_mb).unwrap_or(0),
            disk_gb: cfg.disk_gb,
            image: "default".into(),
            network_profile: cfg.default_profile.clone(),
            max_run_secs: m.max_run_duration.unwrap_or(cfg.max_run_duration).as_secs(),
            status: if on {
                Status::Starting
            } else {
                Status::Stopped
            },
            reason: None,
            vm_name: m.name.clone(),
            vm_id: Some(m.id.clone()),
            create: CreateStage::Made,
            op: on.then_some(Op::Probe),
            queued: None,
            start_sent: false,
            vm_gone: false,
            foreign_labels: false,
            created_at: m.created_at.unwrap_or(now),
            updated_at: now,
            detail: None,
        };
        {
            let mut st = self.state();
            if st.sheds.values().any(|s| s.name == name) {
                self.inner.log.warn(format!(
                    "remote: VM {} is labelled ready for shed {name}, but a shed of that name exists; it is left alone",
                    m.name
                ));
                return;
            }
            self.save(&shed);
            st.sheds.insert(id.to_string(), shed);
        }
        self.inner.log.info(format!(
            "remote: adopted VM {} as shed {name} ({id}), {}",
            m.name,
            if on { "probing its agent" } else { "stopped" }
        ));
        if on {
            self.spawn_job(id);
        }
    }
}
