//! A VM of the environment that no record or delete marker names: destroyed when it is labelled
//! `deleting`, or still `creating` long after the cloud made it (a create nobody will finish);
//! adopted at start-up when it is `ready`; left alone otherwise.

use orca::Machine;

use super::is_on;
use crate::backend::{Backend, CLIENT_LABEL, NAME_LABEL, SIZE_LABEL, STATE_LABEL};
use crate::clock::{go_duration, since};
use crate::jobs::readable;
use crate::model::{validate_shed_name, CreateStage, Op, Shed, Status};

impl Backend {
    pub(super) async fn pass_orphan(&self, id: &str, m: &Machine, startup: bool) {
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
                    .log()
                    .info(format!("remote: VM {} destroyed: {why}", m.name)),
                Err(e) => self.log().warn(format!(
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
            self.log().warn(format!(
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
            vm_name: m.name.clone(),
            vm_id: Some(m.id.clone()),
            create: CreateStage::Made,
            op: on.then_some(Op::Probe),
            created_at: m.created_at.unwrap_or(now),
            updated_at: now,
            ..Shed::default()
        };
        {
            let mut st = self.state();
            if st.sheds.values().any(|s| s.name == name) {
                self.log().warn(format!(
                    "remote: VM {} is labelled ready for shed {name}, but a shed of that name exists; it is left alone",
                    m.name
                ));
                return;
            }
            self.save(&shed);
            st.sheds.insert(id.to_string(), shed);
        }
        self.log().info(format!(
            "remote: adopted VM {} as shed {name} ({id}), {}",
            m.name,
            if on { "probing its agent" } else { "stopped" }
        ));
        if on {
            self.spawn_job(id);
        }
    }
}
