//! A create: the request checked (every refusal before anything is made), the record written with
//! status `starting` under the lock that decides the limits, and the wait of a JSON create for the
//! cloud to accept the VM.

use orca::spec::quoted;
use serde::{Deserialize, Serialize};

use super::{ApiError, Backend, Caller, State};
use crate::clock::since;
use crate::config::{Size, DISK_GB_RANGE};
use crate::model::{new_id, validate_shed_name, CreateStage, Op, Shed, ShedView, Status};

/// A create request's body (`POST /api/sheds`): every field but the name may be left out.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateRequest {
    /// The shed's name.
    pub name: String,
    /// An `image_aliases` name (default: `default_image`).
    pub image: Option<String>,
    /// At least this many CPUs.
    pub cpus: Option<u32>,
    /// At least this much memory.
    pub memory_mb: Option<u32>,
    /// The boot disk's size in bytes (rounded up to whole GB, 10 to 500 GB).
    pub upper_size_bytes: Option<u64>,
    /// `default` or `isolated`.
    pub network_profile: Option<String>,
    /// Host directory (refused: 422).
    pub local_dir: Option<String>,
    /// Host directories (refused: 422).
    pub add_dirs: Option<Vec<String>>,
    /// Server mounts (a non-empty list is refused: 422).
    pub mounts: Option<Vec<String>>,
    /// A snapshot to start from (refused: 422).
    pub from_snapshot: Option<String>,
    /// Egress profiles (absent or exactly `["off"]`; anything else, `[]` included, is refused: 422).
    pub egress: Option<Vec<String>>,
    /// A repository to clone (not built in this example: 501).
    pub repo: Option<String>,
}

impl CreateRequest {
    /// 422 (or 501 for `repo`) for a field of a feature a remote shed does not have.
    fn refuse_unsupported(&self) -> Result<(), ApiError> {
        let some = |v: &Option<Vec<String>>| v.as_ref().is_some_and(|v| !v.is_empty());
        let text = |v: &Option<String>| v.as_deref().is_some_and(|v| !v.is_empty());
        let egress = self.egress.as_ref().is_some_and(|e| *e != ["off"]);
        let refused = [
            (text(&self.local_dir), "local_dir: a remote shed has no host directories"),
            (some(&self.add_dirs), "add_dirs: a remote shed has no host directories"),
            (some(&self.mounts), "mounts: a remote shed has no server mounts"),
            (text(&self.from_snapshot), "from_snapshot: a remote server has no snapshots"),
            (egress, "egress: a remote server has no egress profiles: only [\"off\"] is accepted, or no egress at all"),
        ];
        if let Some((_, m)) = refused.into_iter().find(|(on, _)| *on) {
            return Err(ApiError::unsupported_field(m));
        }
        if self.repo.is_some() {
            return Err(ApiError::unsupported_route(
                "repo: repository clones are not built in this example server",
            ));
        }
        Ok(())
    }
}

/// 403 when the size is above the caller's caps on CPUs or memory.
fn check_caps(caller: &Caller, size: &Size) -> Result<(), ApiError> {
    if caller.max_cpus.is_some_and(|c| size.cpus > c)
        || caller.max_memory_mb.is_some_and(|m| size.memory_mb > m)
    {
        return Err(ApiError::forbidden(format!(
            "size {} ({} cpus, {} MB) is above client {}'s caps",
            size.name, size.cpus, size.memory_mb, caller.name
        )));
    }
    Ok(())
}

impl Backend {
    /// The size a create gets: `default_size` with neither cpus nor memory, else the smallest size
    /// with at least both.
    pub fn pick_size(&self, cpus: Option<u32>, memory_mb: Option<u32>) -> Result<Size, ApiError> {
        let cfg = &self.inner.cfg;
        if cpus.is_none() && memory_mb.is_none() {
            return Ok(cfg.sizes[&cfg.default_size].clone());
        }
        let (c, m) = (cpus.unwrap_or(0), memory_mb.unwrap_or(0));
        let sizes = cfg.sizes.values();
        let fit = sizes.clone().filter(|s| s.cpus >= c && s.memory_mb >= m);
        let smallest = fit.min_by_key(|s| (s.cpus, s.memory_mb, s.name.clone()));
        smallest.cloned().ok_or_else(|| {
            ApiError::invalid(format!(
                "no configured size has at least {c} cpus and {m} MB of memory; the sizes are {}",
                sizes
                    .map(|s| format!("{} ({} cpus, {} MB)", s.name, s.cpus, s.memory_mb))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })
    }

    /// Checks a create request and makes its record (status `starting`), then starts its job. Every
    /// refusal comes before anything is created. Answers the new shed's ID.
    pub async fn create(&self, caller: &Caller, req: CreateRequest) -> Result<String, ApiError> {
        validate_shed_name(&req.name).map_err(ApiError::invalid)?;
        req.refuse_unsupported()?;
        let profile = self.network_profile(&req)?;
        let size = self.pick_size(req.cpus, req.memory_mb)?;
        let disk_gb = self.disk_gb(&req)?;
        let image = self.image(caller, &req)?;
        check_caps(caller, &size)?;
        self.refuse_existing(&self.state(), &req.name)?;
        self.require_firewall(caller).await?;
        let shed = self.new_shed(caller, &req.name, &size, disk_gb, image, profile);
        let id = shed.id.clone();
        {
            let mut st = self.state();
            self.refuse_existing(&st, &req.name)?;
            self.check_limits(&st, None, true)?;
            self.save(&shed);
            st.sheds.insert(id.clone(), shed);
            st.waiters.insert(id.clone());
        }
        self.log().info(format!(
            "remote: shed {} ({id}) create accepted for client {}",
            req.name, caller.name
        ));
        self.bump();
        self.spawn_job(&id);
        Ok(id)
    }

    /// 409 `SHED_EXISTS` when a shed is named `name` (asked again under the lock that records it).
    fn refuse_existing(&self, st: &State, name: &str) -> Result<(), ApiError> {
        if st.sheds.values().any(|s| s.name == name) {
            return Err(ApiError::conflict(
                "SHED_EXISTS",
                format!("shed {name:?} already exists"),
            ));
        }
        Ok(())
    }

    /// The network profile asked for (`default_profile` when none): the isolated one only where the
    /// firewall does not admit any address.
    fn network_profile(&self, req: &CreateRequest) -> Result<String, ApiError> {
        let cfg = &self.inner.cfg;
        let default = &cfg.default_profile;
        let profile = req.network_profile.as_ref().unwrap_or(default).clone();
        match profile.as_str() {
            "default" => Ok(profile),
            "isolated" if cfg.isolated_available() => Ok(profile),
            "isolated" => Err(ApiError::unsupported_field(
                "network_profile: the isolated profile is unavailable on this server (its firewall admits any address)",
            )),
            other => Err(ApiError::invalid(format!(
                "network_profile: default or isolated, got {}",
                quoted(other)
            ))),
        }
    }

    /// The boot disk: `upper_size_bytes` rounded up to whole GB (GiB, as Compute Engine counts),
    /// 10 to 500 GB; `disk_gb` when none is asked for.
    fn disk_gb(&self, req: &CreateRequest) -> Result<u32, ApiError> {
        const GB: u64 = 1 << 30;
        let Some(bytes) = req.upper_size_bytes else {
            return Ok(self.inner.cfg.disk_gb);
        };
        let gb = bytes.div_ceil(GB);
        let (lo, hi) = DISK_GB_RANGE;
        if gb < u64::from(lo) || gb > u64::from(hi) {
            return Err(ApiError::invalid(format!(
                "upper_size_bytes: the disk is {lo} to {hi} GB, got {gb} GB"
            )));
        }
        Ok(gb as u32)
    }

    /// The image name asked for (`default` when none): one of the server's, and one the caller may
    /// use.
    fn image(&self, caller: &Caller, req: &CreateRequest) -> Result<String, ApiError> {
        let cfg = &self.inner.cfg;
        let image = req.image.clone().unwrap_or_else(|| "default".into());
        let aliases = &cfg.image_aliases;
        if image != "default" && !aliases.contains_key(&image) {
            return Err(ApiError::invalid(format!(
                "image: {} is not an image of this server; its images are default{}",
                quoted(&image),
                aliases.keys().map(|k| format!(", {k}")).collect::<String>()
            )));
        }
        if !caller.may_use(&image, cfg) {
            return Err(ApiError::forbidden(format!(
                "image: client {} may not use {}",
                caller.name,
                quoted(&image)
            )));
        }
        Ok(image)
    }

    /// The record of a new shed, `starting` with its create not sent yet. Its VM runs at most the
    /// larger of `max_run_duration` and the caller's `max_age`.
    fn new_shed(
        &self,
        caller: &Caller,
        name: &str,
        size: &Size,
        disk_gb: u32,
        image: String,
        network_profile: String,
    ) -> Shed {
        let cfg = &self.inner.cfg;
        let max_run = cfg.max_run_duration.max(caller.max_age.unwrap_or_default());
        let now = self.now();
        let id = new_id();
        Shed {
            vm_name: vm_name(&cfg.environment, &id),
            id,
            name: name.to_string(),
            client: caller.name.clone(),
            size: size.name.clone(),
            machine_type: size.machine_type.clone(),
            cpus: size.cpus,
            memory_mb: size.memory_mb,
            disk_gb,
            image,
            network_profile,
            max_run_secs: max_run.as_secs(),
            status: Status::Starting,
            create: CreateStage::NotSent,
            op: Some(Op::Create),
            created_at: now,
            updated_at: now,
            ..Shed::default()
        }
    }

    /// Waits (at most the accept wait, 15 s) for the cloud to accept shed `id`'s VM: the shed, or the
    /// early quota or capacity refusal (then there is no shed).
    ///
    /// However it ends (an answer, or the request dropped because its client went away), the shed
    /// stops being waited for: a refusal after that leaves the shed in `error`.
    pub fn wait_accept<'a>(
        &'a self,
        id: &'a str,
    ) -> impl std::future::Future<Output = Result<ShedView, ApiError>> + 'a {
        /// Forgets the waiter when the wait ends or is dropped (before its first poll included).
        struct Forget<'a>(&'a Backend, &'a str);
        impl Drop for Forget<'_> {
            fn drop(&mut self) {
                self.0.forget_waiter(self.1);
            }
        }
        let forget = Forget(self, id);
        async move {
            let _forget = forget;
            self.accept(id).await
        }
    }

    async fn accept(&self, id: &str) -> Result<ShedView, ApiError> {
        let deadline = self.now()
            + chrono::Duration::from_std(self.inner.timings.accept_wait).unwrap_or_default();
        let mut rx = self.subscribe();
        // A JSON create answers 201 with status starting (the shed as it was accepted): a client
        // reads anything else as "not created". Only an early quota or capacity refusal is
        // answered otherwise (503, no shed). A create that fails for another reason, or a shed
        // deleted, within the wait is seen by polling.
        let as_accepted = |s: &Shed| {
            let mut v = ShedView::from(s);
            v.status = Status::Starting;
            v.status_reason = String::new();
            v
        };
        let mut accepted_view: Option<ShedView> = None;
        loop {
            {
                let mut st = self.state();
                // A stopping server answers at once: nothing changes the shed any more.
                let done = self.now() >= deadline || self.is_stopping();
                let answer = if let Some(e) = st.refused.remove(id) {
                    Some(Err(e))
                } else if let Some(v) = st.accepted.remove(id) {
                    Some(Ok(v))
                } else {
                    match st.sheds.get(id) {
                        None => Some(accepted_view.take().ok_or_else(|| {
                            ApiError::new(
                                404,
                                "NOT_FOUND",
                                "the shed was deleted before its create was answered",
                            )
                        })),
                        Some(s) if s.status != Status::Starting => Some(Ok(as_accepted(s))),
                        Some(s) if s.create == CreateStage::Made || done => Some(Ok(s.into())),
                        Some(s) => {
                            accepted_view.get_or_insert_with(|| as_accepted(s));
                            None
                        }
                    }
                };
                // The waiter is removed under the lock that decides the answer, so that a refusal
                // after this answer finds no waiter and leaves the shed in error.
                if let Some(answer) = answer {
                    st.waiters.remove(id);
                    return answer;
                }
            }
            let left = since(deadline, self.now());
            tokio::select! {
                _ = rx.changed() => {}
                _ = self.inner.clock.sleep(left) => {}
                _ = self.stopped() => {}
            }
        }
    }

    /// Stops waiting for shed `id`'s acceptance (what the end of [`Backend::wait_accept`] does).
    pub fn forget_waiter(&self, id: &str) {
        let mut st = self.state();
        st.waiters.remove(id);
        st.refused.remove(id);
        st.accepted.remove(id);
    }
}

/// The name of shed `id`'s VM in `environment`: unique there, since ids are.
pub(crate) fn vm_name(environment: &str, id: &str) -> String {
    format!("shed-{environment}-{id}")
}
