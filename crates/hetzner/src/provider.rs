//! [`HetznerProvider`]: the [`Provider`] contract on Hetzner Cloud servers.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use orca_machines::chrono::{DateTime, Utc};
use orca_machines::kit::{self, lock, read_until_seen, Attempts, Recent, StoppedCreates};
use orca_machines::labels;
use orca_machines::provider::first_made;
use orca_machines::spec::validate_token;
use orca_machines::{
    all_pages, docker_arch, validate_id, validate_name, validate_owner, validate_pool, Arch,
    Capabilities, Created, Error, Machine, MachineLabels, MachineSpec, Page, Price, Provider,
    Resized, Result, SpecOptions, Status,
};
use reqwest::Method;
use serde_json::json;
use tokio::sync::OnceCell;
use tokio::time::Instant;

use crate::actions::Poller;
use crate::client::Client;
use crate::config::{Config, FIREWALL_ENV, IMAGE_ENV, NETWORK_ENV};
use crate::model::{
    Action, ActionAnswer, Actions, CreatedServer, Deleted, Firewalls, ImageAnswer, Images,
    Networks, Server, ServerAnswer, ServerType, ServerTypes, Servers,
};

/// The driver's kind.
pub(crate) const KIND: &str = "hetzner";

/// The label a create writes on its server, with a random token of its own: when the create meets
/// a server of that name (`uniqueness_error`, or the stock or server limit its own earlier attempt
/// used up), the label tells whether this call made it (an attempt whose answer was lost) or an
/// earlier one did. Hetzner has no idempotency token to tell them apart. The driver's bookkeeping,
/// not a label: never in [`Machine::labels`]. The `.` (which Hetzner's label keys allow) keeps it
/// out of the label keys a caller can set ([`orca_machines::spec::LABEL_KEY_RULE`]), so no caller's
/// label is ever taken for it.
pub const CREATE_LABEL: &str = "orca.create";

/// How many times a listing of a pool is read while servers come and go under it.
const LISTING_TRIES: usize = 3;

/// A fresh token for [`CREATE_LABEL`]: 32 hex digits, a valid Hetzner label value.
fn create_token() -> String {
    format!("{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..))
}

/// What a power or type action came to: its action, to follow; or the state it was to reach, which
/// the server shows already.
enum Made {
    Running(Action),
    Reached,
}

/// Hetzner Cloud servers as one owner's machines.
pub struct HetznerProvider {
    owner: String,
    pub(crate) config: Config,
    pub(crate) client: Client,
    types: Mutex<HashMap<String, ServerType>>,
    /// Image ids by (image name, architecture).
    images: Mutex<HashMap<(String, String), i64>>,
    firewall: OnceCell<Option<i64>>,
    network: OnceCell<Option<i64>>,
    /// Held while a server type or an image is looked up, so that concurrent first creates make one
    /// lookup, not one each.
    lookup: tokio::sync::Mutex<()>,
    /// The actions its calls wait for, read together.
    poller: Poller,
    /// Servers this provider made and has not seen in a read yet: a "not found" for one of them is
    /// confirmed within the visibility window before it is believed.
    unseen: Recent<i64>,
    /// Creates stopped before they answered: `delete_named` of such a name reads again within the
    /// visibility window before it believes "nothing there".
    stopped: StoppedCreates,
}

impl std::fmt::Debug for HetznerProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HetznerProvider")
            .field("owner", &self.owner)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// Hetzner's word for a server's state onto the shared set; a word it does not know (a status added
/// later) is [`Status::Unknown`], the word itself kept in `cloud_status`.
pub fn status_of(cloud: &str) -> Status {
    match cloud {
        "initializing" | "starting" | "rebuilding" => Status::Starting,
        // A live migration keeps the server running.
        "running" | "migrating" => Status::Running,
        "stopping" => Status::Stopping,
        "off" => Status::Stopped,
        "deleting" => Status::Deleting,
        _ => Status::Unknown,
    }
}

/// A server id: Hetzner's are positive integers.
pub(crate) fn server_id(id: &str) -> Result<i64> {
    validate_id(id)?;
    id.parse::<i64>().ok().filter(|n| *n > 0).ok_or_else(|| {
        Error::invalid(
            "id",
            format!("a Hetzner server id is a positive integer, got {id:?}"),
        )
    })
}

/// A date of a deprecation notice, as `YYYY-MM-DD` (or as given when it does not parse).
fn day(t: &str) -> String {
    DateTime::parse_from_rfc3339(t)
        .map(|d| d.format("%Y-%m-%d").to_string())
        .unwrap_or_else(|_| t.to_string())
}

/// A growing pause between reads that wait for a server to show: 50 ms doubling to 1 s.
fn pause(n: u32) -> Duration {
    Duration::from_millis(50)
        .saturating_mul(1 << n.min(5))
        .min(Duration::from_secs(1))
}

impl HetznerProvider {
    /// A provider for `owner` (empty for none) with `config`. Makes no call.
    pub async fn new(config: Config, owner: &str) -> Result<HetznerProvider> {
        validate_owner(owner)?;
        let client = Client::new(&config)?;
        let unseen = Recent::new(config.visibility_window);
        let stopped = StoppedCreates::new(config.visibility_window);
        Ok(HetznerProvider {
            owner: owner.to_string(),
            config,
            client,
            types: Mutex::new(HashMap::new()),
            images: Mutex::new(HashMap::new()),
            firewall: OnceCell::new(),
            network: OnceCell::new(),
            lookup: tokio::sync::Mutex::new(()),
            poller: Poller::default(),
            unseen,
            stopped,
        })
    }

    /// The settings.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// How many calls waited for the project's rate limit so far, and how long in all.
    pub fn pacing_stats(&self) -> (u64, Duration) {
        self.client.pacer.stats()
    }

    /// The machine a server is, with every fact Hetzner reports.
    pub(crate) fn machine_of(&self, s: &Server) -> Machine {
        let mut labels = s.labels.clone();
        labels.remove(CREATE_LABEL);
        let mut m = Machine::new(s.id.to_string(), &s.name);
        m.status = status_of(&s.status);
        m.cloud_status = s.status.clone();
        m.machine_type = s.server_type.name.clone();
        m.location = s.location.name.clone();
        if let Some(v4) = &s.public_net.ipv4 {
            m.address = v4.ip.clone();
            m.fqdn = v4.dns_ptr.trim_end_matches('.').to_string();
        }
        // The address in the configured network, else the first private one.
        let network = self.network.get().copied().flatten();
        m.private_address = s
            .private_net
            .iter()
            .find(|n| Some(n.network) == network)
            .or_else(|| s.private_net.first())
            .map(|n| n.ip.clone())
            .unwrap_or_default();
        m.created_at = DateTime::parse_from_rfc3339(&s.created)
            .ok()
            .map(|d| d.with_timezone(&Utc));
        m.pool = labels::pool_of(&labels);
        m.labels = labels;
        m
    }

    pub(crate) async fn server_type(&self, name: &str) -> Result<ServerType> {
        validate_token("machine_type", name)?;
        if let Some(t) = lock(&self.types).get(name) {
            return Ok(t.clone());
        }
        let _one = self.lookup.lock().await;
        if let Some(t) = lock(&self.types).get(name) {
            return Ok(t.clone());
        }
        let r: ServerTypes = self
            .client
            .get(
                "server_types.list",
                "/server_types",
                &[("name", name.to_string())],
            )
            .await?;
        let t = r
            .server_types
            .into_iter()
            .find(|t| t.name == name)
            .ok_or_else(|| Error::not_found(format!("server type {name}")))?;
        lock(&self.types).insert(name.to_string(), t.clone());
        Ok(t)
    }

    /// [`HetznerProvider::server_type`] for a create: a type Hetzner does not know is bad input
    /// naming the machine type.
    async fn type_to_make(&self, name: &str) -> Result<ServerType> {
        self.server_type(name).await.map_err(|e| match e {
            Error::NotFound { .. } => {
                Error::invalid("machine_type", format!("Hetzner has no server type {name}"))
            }
            other => other,
        })
    }

    /// Whether Hetzner knows location `name` (one `locations.list` filtered by name).
    async fn location_known(&self, name: &str) -> Result<bool> {
        let r: serde_json::Value = self
            .client
            .get(
                "locations.list",
                "/locations",
                &[("name", name.to_string())],
            )
            .await?;
        Ok(r["locations"]
            .as_array()
            .is_some_and(|l| l.iter().any(|l| l["name"] == name)))
    }

    /// The image `image` for architecture `arch`: an id read to see that it is of `arch`, a name
    /// looked up for `arch`; cached. An image that is not found, or of another architecture, is
    /// bad input naming the image (or the image setting, when `image` is the settings' own).
    async fn image_for(&self, image: &str, arch: &str, from_spec: bool) -> Result<String> {
        let key = (image.to_string(), arch.to_string());
        if let Some(id) = lock(&self.images).get(&key) {
            return Ok(id.to_string());
        }
        let _one = self.lookup.lock().await;
        if let Some(id) = lock(&self.images).get(&key) {
            return Ok(id.to_string());
        }
        let refused = |why: String| {
            if from_spec {
                Error::invalid("image", why)
            } else {
                Error::settings([IMAGE_ENV], why)
            }
        };
        if image.bytes().all(|b| b.is_ascii_digit()) {
            let path = format!("/images/{image}");
            let r: ImageAnswer = match self.client.get("images.get", &path, &[]).await {
                Err(Error::NotFound { .. }) => return Err(refused(format!("no image {image}"))),
                other => other?,
            };
            if r.image.architecture != arch {
                return Err(refused(format!(
                    "image {image} is of architecture {}, the server type's is {arch}",
                    r.image.architecture
                )));
            }
            lock(&self.images).insert(key, r.image.id);
            return Ok(image.to_string());
        }
        let r: Images = self
            .client
            .get(
                "images.list",
                "/images",
                &[
                    ("name", image.to_string()),
                    ("architecture", arch.to_string()),
                ],
            )
            .await?;
        let found = r
            .images
            .iter()
            .find(|i| i.name.as_deref() == Some(image) && i.architecture == arch)
            .map(|i| i.id)
            .ok_or_else(|| refused(format!("no image {image:?} for architecture {arch}")))?;
        lock(&self.images).insert(key, found);
        Ok(found.to_string())
    }

    async fn firewall_id(&self) -> Result<Option<i64>> {
        let Some(name) = self.config.firewall.clone() else {
            return Ok(None);
        };
        self.firewall
            .get_or_try_init(|| async {
                let r: Firewalls = self
                    .client
                    .get("firewalls.list", "/firewalls", &[("name", name.clone())])
                    .await?;
                r.firewalls
                    .iter()
                    .find(|f| f.name == name)
                    .map(|f| Some(f.id))
                    .ok_or_else(|| {
                        Error::settings([FIREWALL_ENV], format!("no firewall named {name:?}"))
                    })
            })
            .await
            .copied()
    }

    async fn network_id(&self) -> Result<Option<i64>> {
        let Some(name) = self.config.network.clone() else {
            return Ok(None);
        };
        self.network
            .get_or_try_init(|| async {
                if let Ok(id) = name.parse::<i64>() {
                    return Ok(Some(id));
                }
                let r: Networks = self
                    .client
                    .get("networks.list", "/networks", &[("name", name.clone())])
                    .await?;
                r.networks
                    .iter()
                    .find(|n| n.name == name)
                    .map(|n| Some(n.id))
                    .ok_or_else(|| {
                        Error::settings([NETWORK_ENV], format!("no network named {name:?}"))
                    })
            })
            .await
            .copied()
    }

    /// One read of server `id`: `None` on 404. A server seen is no longer "unseen".
    async fn get_server(&self, id: i64) -> Result<Option<Server>> {
        match self
            .client
            .get::<ServerAnswer>("servers.get", &format!("/servers/{id}"), &[])
            .await
        {
            Ok(r) => {
                self.unseen.forget(&id);
                Ok(Some(r.server))
            }
            Err(Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Server `id` as the cloud shows it now: `None` once it is gone. A "not found" for a server this
    /// provider made and has not seen yet is confirmed by later reads within the visibility window.
    async fn read_server(&self, id: i64) -> Result<Option<Server>> {
        let until = self.unseen.unseen_until(&id).unwrap_or_else(Instant::now);
        read_until_seen(until, pause, || self.get_server(id)).await
    }

    /// The server `id` when it is this owner's; `NotOwned` when it is not, `NotFound` when it is gone.
    pub(crate) async fn owned_server(&self, id: &str) -> Result<Server> {
        let n = server_id(id)?;
        let s = self
            .read_server(n)
            .await?
            .ok_or_else(|| Error::not_found(format!("server {id}")).with_code("not_found"))?;
        kit::check_owned(id, &s.labels, &self.owner)?;
        Ok(s)
    }

    /// Follows action `action` to its end, read together with every other action this provider
    /// waits for ([`Poller`]: one read every `poll_interval`), for at most `operation_timeout`: `Ok`
    /// on success, the action's error (classified by its code) otherwise.
    async fn wait_action(&self, action: &Action) -> Result<()> {
        self.wait_action_end(action).await?
    }

    /// As [`Self::wait_action`], telling an action that ended (inner) from one whose end is not
    /// known (outer: a failed read, or still running at `operation_timeout`).
    async fn wait_action_end(&self, action: &Action) -> Result<Result<()>> {
        self.poller
            .wait_end(
                &self.client,
                action,
                self.config.poll_interval,
                self.config.operation_timeout,
            )
            .await
    }

    /// Starts an action on server `id` (`poweron`, `shutdown`, `poweroff`, `change_type`) and follows
    /// it to its end. Hetzner's actions carry no idempotency token: a second POST would make a second
    /// action (or meet `locked`). So after an attempt the cloud may have served (its answer lost),
    /// the retry first looks for the action that attempt made, or for the state it reached.
    async fn server_action(
        &self,
        id: i64,
        command: &'static str,
        body: Option<serde_json::Value>,
    ) -> Result<()> {
        let attempts = Attempts::new();
        let path = format!("/servers/{id}/actions/{command}");
        let target = body
            .as_ref()
            .and_then(|b| b.get("server_type"))
            .and_then(|t| t.as_str())
            .map(str::to_string);
        let (attempts, path, body, target) = (&attempts, &path, &body, &target);
        let made = kit::call(KIND, command, &self.client.retry, move || async move {
            if attempts.may_have_made() {
                if let Some(made) = self.made_before(id, command, target.as_deref()).await? {
                    return Ok(made);
                }
            }
            let r = self
                .client
                .once::<ActionAnswer>(command, Method::POST, path, &[], body.as_ref())
                .await;
            attempts.record(&r);
            r.map(|r| Made::Running(r.action))
        })
        .await?;
        match made {
            Made::Running(action) => self.wait_action(&action).await,
            Made::Reached => Ok(()),
        }
    }

    /// What an earlier attempt of `command` on server `id` (whose answer was lost) made: its action,
    /// still running (the server's running action of that kind), or the state it reached (`target`:
    /// the type a `change_type` changes to); `None` when neither shows, so the action is sent again.
    async fn made_before(
        &self,
        id: i64,
        command: &str,
        target: Option<&str>,
    ) -> Result<Option<Made>> {
        let kind = match command {
            "poweron" => "start_server",
            "poweroff" => "stop_server",
            "shutdown" => "shutdown_server",
            "change_type" => "change_server_type",
            _ => return Ok(None),
        };
        let running: Actions = self
            .client
            .get(
                "servers.actions.list",
                &format!("/servers/{id}/actions"),
                &[("status", "running".to_string())],
            )
            .await?;
        if let Some(a) = running.actions.into_iter().find(|a| a.command == kind) {
            tracing::info!(
                server = id,
                action = a.id,
                "following the action a lost answer made"
            );
            return Ok(Some(Made::Running(a)));
        }
        let Some(s) = self.get_server(id).await? else {
            return Err(Error::not_found(format!("server {id}")).with_code("not_found"));
        };
        let reached = match command {
            "poweron" => s.status == "running",
            "change_type" => Some(s.server_type.name.as_str()) == target,
            // A shutdown the OS ignored reaches nothing: it is asked again.
            _ => s.status == "off",
        };
        Ok(reached.then_some(Made::Reached))
    }

    /// Deletes server `id` and follows the delete to its end; true once it is gone.
    async fn delete_server(&self, id: i64) -> Result<bool> {
        let r = self
            .client
            .call::<Deleted>(
                "servers.delete",
                Method::DELETE,
                &format!("/servers/{id}"),
                &[],
                None,
            )
            .await;
        match r {
            Ok(r) => {
                if let Some(a) = r.action {
                    self.wait_action(&a).await?;
                }
                self.unseen.forget(&id);
                Ok(true)
            }
            Err(Error::NotFound { .. }) if !self.unseen.contains(&id) => Ok(true),
            Err(Error::NotFound { .. }) => Err(Error::transient(format!(
                "server {id} was made a moment ago and is not visible to delete yet"
            ))
            .with_code("not_found")),
            Err(e) => Err(e),
        }
    }

    /// Deletes server `id` whose create failed with `failed`; answers `failed`, naming the server
    /// when it could not be deleted ([`Error::with_leftovers`]: no stock and quota stay what they
    /// are, anything else becomes [`Error::Leftovers`]).
    async fn remove_failed(&self, id: i64, name: &str, failed: Error) -> Error {
        tracing::warn!(server = id, error = %failed, "create failed; deleting the server");
        match self.delete_server(id).await {
            Ok(_) => failed,
            Err(e) => failed.with_leftovers(vec![format!("server {id} ({name}): {e}")]),
        }
    }

    /// A create whose name is taken: the server of that name when it is this owner's, of this pool,
    /// type and location (a retried create), after its running actions end; else `AlreadyExists`
    /// (`conflict`: the name is known to be taken) or `taken` itself. The server is this call's own
    /// ([`Created::Machine`]: an attempt whose answer was lost made it) only when it carries this
    /// call's `token` in [`CREATE_LABEL`]; else an earlier call made it ([`Created::Adopted`]),
    /// however this call's attempts failed (a 503 may come before Hetzner acted).
    async fn adopt(
        &self,
        spec: &MachineSpec,
        taken: Error,
        conflict: bool,
        token: &str,
    ) -> Result<Created> {
        // A name the cloud says is taken may belong to a server made a moment ago that listings do
        // not show yet: look again within the visibility window before answering. No stock after
        // a lost answer is looked up once: nothing proves a server was made, and a wait of the
        // whole window at every such refusal would hold the caller's fallback to other offerings.
        let deadline = Instant::now() + self.config.visibility_window;
        let mut n = 0;
        let found = loop {
            let r: Servers = self
                .client
                .get("servers.list", "/servers", &[("name", spec.name.clone())])
                .await?;
            if let Some(s) = r.servers.into_iter().find(|s| s.name == spec.name) {
                break Some(s);
            }
            if !conflict || Instant::now() >= deadline {
                break None;
            }
            tokio::time::sleep(pause(n)).await;
            n += 1;
        };
        let Some(s) = found else {
            return Err(taken);
        };
        let ours = labels::is_in_pool(&self.machine_of(&s).labels, &spec.pool, &self.owner)
            && s.server_type.name == spec.machine_type
            && s.location.name == spec.location;
        if !ours && !conflict {
            return Err(taken);
        }
        if !ours {
            return Err(Error::already_exists(format!(
                "server {:?} (id {}) exists and is not this owner's machine of pool {:?}",
                spec.name, s.id, spec.pool
            ))
            .with_code("uniqueness_error"));
        }
        let own = s.labels.get(CREATE_LABEL).map(String::as_str) == Some(token);
        tracing::info!(server = s.id, name = %spec.name, own, "taking over the server of that name");
        // The running actions, and a create action that already failed: a server whose create failed
        // is removed as `create` removes it, never handed back as made.
        let actions: Actions = self
            .client
            .get(
                "servers.actions.list",
                &format!("/servers/{}/actions", s.id),
                &[
                    ("status", "running".to_string()),
                    ("status", "error".to_string()),
                ],
            )
            .await?;
        for a in &actions.actions {
            // The create's own actions: the create, and, on a server this very call made (its
            // token), the start that `start_after_create` runs after it: a server that could not
            // start is a failed create, as `create` reads it. On an earlier call's server a start
            // may be any later power-on of a machine in use, which is no failed create.
            let is_create = a.command == "create_server" || (own && a.command == "start_server");
            if a.status == "error" && !is_create {
                continue;
            }
            match self.wait_action_end(a).await? {
                Ok(()) => {}
                // A create action that ended in error, whatever its code, made no machine: its
                // server goes, so that the name frees for the next try.
                Err(failed) if is_create => {
                    let e = self.remove_failed(s.id, &spec.name, failed).await;
                    return kit::no_stock_of(spec, e);
                }
                Err(failed) => return Err(failed),
            }
        }
        let s = self.read_server(s.id).await?.ok_or_else(|| {
            Error::transient(format!("server {} vanished while adopting it", spec.name))
        })?;
        let m = self.machine_of(&s);
        Ok(if own {
            Created::Machine(m)
        } else {
            Created::Adopted(m)
        })
    }

    /// [`HetznerProvider::adopt`]; when the refusal `taken` followed an attempt that may have made
    /// the server, a failure to take it over says the create may have acted (its server may
    /// stand), never that it made nothing.
    async fn take_over(
        &self,
        spec: &MachineSpec,
        taken: Error,
        conflict: bool,
        token: &str,
    ) -> Result<Created> {
        let acted = taken.may_have_acted();
        let r = self.adopt(spec, taken, conflict, token).await;
        match r {
            Err(e) if acted => Err(e.with_may_have_acted()),
            other => other,
        }
    }

    /// [`Provider::create`], under the guard that notes it when it is stopped before it answers.
    async fn make(&self, spec: &MachineSpec, unanswered: &kit::CreateGuard<'_>) -> Result<Created> {
        spec.validate()?;
        self.capabilities().check_spec(KIND, spec)?;
        validate_token("location", &spec.location)?;
        let t = self.type_to_make(&spec.machine_type).await?;
        if !t.offered_in(&spec.location) {
            return self.not_offered(spec, &t).await;
        }
        Self::check_deprecation(&t, &spec.location)?;
        let image = match &spec.image {
            Some(i) => self.image_for(i, &t.architecture, true).await?,
            None => {
                self.image_for(&self.config.image, &t.architecture, false)
                    .await?
            }
        };
        let firewall = self.firewall_id().await?;
        let network = self.network_id().await?;
        let mut labels = labels::ownership_labels(&spec.pool, &self.owner);
        labels.extend(spec.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
        // This call's token, told apart from an earlier call's when the name is met taken.
        let token = create_token();
        labels.insert(CREATE_LABEL.to_string(), token.clone());
        let mut body = json!({
            "name": spec.name,
            "server_type": spec.machine_type,
            "image": image,
            "location": spec.location,
            "labels": labels,
            "start_after_create": true,
        });
        if !self.config.ssh_keys.is_empty() {
            body["ssh_keys"] = json!(self.config.ssh_keys);
        }
        if let Some(f) = firewall {
            body["firewalls"] = json!([{ "firewall": f }]);
        }
        if let Some(n) = network {
            body["networks"] = json!([n]);
        }
        if !spec.user_data.is_empty() {
            body["user_data"] = json!(spec.user_data);
        }
        // Retrying the POST is safe: names are unique per project, so a repeat of a create whose answer
        // was lost meets `uniqueness_error` and takes over the server the first attempt made, which
        // carries this call's token.
        unanswered.sending();
        let made = self
            .client
            .call::<CreatedServer>("servers.create", Method::POST, "/servers", &[], Some(&body))
            .await;
        let r = match made {
            Ok(r) => r,
            Err(e @ (Error::NoStock { .. } | Error::Quota { .. })) => {
                // A create retried after a lost answer can meet the stock or the server limit that its
                // first attempt used up: take over the server that attempt made, when there is one.
                return match self.take_over(spec, e, false, &token).await {
                    Err(e @ Error::NoStock { .. }) => kit::no_stock_of(spec, e),
                    other => other,
                };
            }
            Err(e @ Error::AlreadyExists { .. }) => {
                return self.take_over(spec, e, true, &token).await;
            }
            Err(e) => return Err(e),
        };
        let id = r.server.id;
        self.unseen.note(id);
        // The create action, then its next actions (the `start_server` of `start_after_create`).
        let mut ended = self.wait_action_end(&r.action).await;
        for next in &r.next_actions {
            if !matches!(ended, Ok(Ok(()))) {
                break;
            }
            ended = self.wait_action_end(next).await;
        }
        match ended {
            Ok(Ok(())) => {}
            // Still running (or unreadable): the server stays; a retry of the create adopts it.
            // Never "made nothing", even when the read was refused (throttled): the server exists.
            Err(unknown) => return Err(unknown.with_may_have_acted()),
            // Ended in error, whatever its code: the create failed, and its server goes so that the
            // name frees (a passing code stays retryable: the next try makes a new server). One
            // that failed for placement or capacity is no stock.
            Ok(Err(failed)) => {
                let e = self.remove_failed(id, &spec.name, failed).await;
                return kit::no_stock_of(spec, e);
            }
        }
        let s = self
            .wait_visible(id)
            .await
            .map_err(Error::with_may_have_acted)?;
        Ok(Created::Machine(self.machine_of(&s)))
    }

    /// Waits, within the visibility window, until server `id` (made by this provider) shows in reads.
    async fn wait_visible(&self, id: i64) -> Result<Server> {
        self.read_server(id).await?.ok_or_else(|| {
            Error::transient(format!(
                "server {id} was made but is not visible after {:?}; a retry of the create adopts it",
                self.config.visibility_window
            ))
        })
    }

    /// This owner's servers of `pool`, every page ([`all_pages`]), each once, and whether the
    /// listing held still while it was read: its total the same on the last page as on the first
    /// (`Some(true)`), or not (`Some(false)`); `None` when pages came without a total (the API
    /// gives none when it does not know it) and there was more than one.
    async fn list_pool(&self, pool: &str) -> Result<(Vec<Machine>, Option<bool>)> {
        // The first page's total, the latest page's, and how many pages were read.
        let totals = std::sync::Mutex::new((None, None, 0));
        let listed = all_pages(|page| {
            let totals = &totals;
            async move {
                let (page, total) = self.list_page(pool, page).await?;
                let mut t = lock(totals);
                t.0.get_or_insert(total);
                t.1 = Some(total);
                t.2 += 1;
                Ok(page)
            }
        })
        .await?;
        let held = match *lock(&totals) {
            (_, _, pages) if pages <= 1 => Some(true),
            (Some(Some(first)), Some(Some(last)), _) => Some(first == last),
            _ => None,
        };
        let mut seen = std::collections::HashSet::new();
        let once = listed.into_iter().filter(|m| seen.insert(m.id.clone()));
        Ok((once.collect(), held))
    }

    /// One page of this owner's servers of `pool`, and the listing's total as that page gives it.
    async fn list_page(
        &self,
        pool: &str,
        page: Option<String>,
    ) -> Result<(Page<Machine>, Option<i64>)> {
        let r: Servers = self
            .client
            .get(
                "servers.list",
                "/servers",
                &[
                    ("label_selector", labels::selector(pool, &self.owner)),
                    ("page", page.unwrap_or_else(|| "1".into())),
                    ("per_page", self.config.page_size.to_string()),
                ],
            )
            .await?;
        let items = r
            .servers
            .iter()
            .map(|s| self.machine_of(s))
            .filter(|m| labels::is_in_pool(&m.labels, pool, &self.owner))
            .collect();
        let next = r.meta.pagination.next_page.map(|n| n.to_string());
        Ok((Page { items, next }, r.meta.pagination.total_entries))
    }

    /// The answer to a create of type `t` where it is not offered, before any create: no stock there
    /// (for good, so that a caller moves on to another offering), or bad input naming the location
    /// when Hetzner does not know it at all.
    async fn not_offered(&self, spec: &MachineSpec, t: &ServerType) -> Result<Created> {
        let location = &spec.location;
        if !self.location_known(location).await? {
            return Err(Error::invalid(
                "location",
                format!("Hetzner has no location {location}"),
            ));
        }
        let offered: Vec<&str> = t.locations.iter().map(|l| l.name.as_str()).collect();
        Ok(kit::no_stock(
            spec,
            format!(
                "server type {} is not offered in {location} (it is in {})",
                t.name,
                offered.join(", ")
            ),
        ))
    }

    /// Refuses a type that can no longer be ordered in the spec's location (or anywhere), before
    /// any create: one whose deprecation's `unavailable_after` is past, or that carries only the
    /// old flag, with no date to go by. Hetzner announces a deprecation months ahead and sells the
    /// type until that date, so a type announced is still made (with a warning).
    fn check_deprecation(t: &ServerType, location: &str) -> Result<()> {
        if let Some(d) = t.deprecation_in(location) {
            let until = DateTime::parse_from_rfc3339(&d.unavailable_after).ok();
            if let Some(until) = until.filter(|u| *u > Utc::now()) {
                tracing::warn!(
                    server_type = %t.name,
                    location,
                    unavailable_after = %until,
                    "server type is deprecated: orderable until its unavailable_after"
                );
                return Ok(());
            }
            let when = if d.unavailable_after.is_empty() {
                String::new()
            } else {
                format!(
                    " (announced {}, not orderable after {})",
                    day(&d.announced),
                    day(&d.unavailable_after)
                )
            };
            return Err(Error::invalid(
                "machine_type",
                format!(
                    "server type {} is deprecated in {location}{when}: choose a type on sale today",
                    t.name
                ),
            ));
        }
        Ok(())
    }
}

#[async_trait]
impl Provider for HetznerProvider {
    fn kind(&self) -> &str {
        KIND
    }

    fn owner(&self) -> &str {
        &self.owner
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::NONE
            .with_start_stop(true)
            .with_resize(true)
            .with_hourly_price(true)
            .with_power_times(false)
            .with_private_address(self.config.network.is_some())
            .with_options(SpecOptions::NONE.with("labels", true).with("image", true))
    }

    async fn arch(&self, machine_type: &str) -> Result<Arch> {
        let t = self.server_type(machine_type).await?;
        Ok(docker_arch(&t.architecture))
    }

    async fn create(&self, spec: &MachineSpec) -> Result<Created> {
        // A create dropped once Hetzner accepted its POST leaves a server that reads may not show
        // yet: its name is noted, so that `delete_named` of it looks again.
        let unanswered = self.stopped.start(&spec.pool, &spec.name);
        let answer = self.make(spec, &unanswered).await;
        unanswered.answered();
        answer
    }

    async fn machines(&self, pool: &str) -> Result<Vec<Machine>> {
        validate_pool(pool)?;
        // Pages are read by offset: a server made or deleted between two page reads moves the
        // ones after it by a place, and one would be missed or shown twice. A listing whose total
        // changed on the way is read again; after a few in a row, the last one is answered.
        // Without totals, two listings in a row that show the same servers stand for one that held
        // still.
        let mut listed = self.list_pool(pool).await?;
        for _ in 1..LISTING_TRIES {
            if listed.1 == Some(true) {
                break;
            }
            let again = self.list_pool(pool).await?;
            let ids = |l: &[Machine]| {
                let mut ids: Vec<String> = l.iter().map(|m| m.id.clone()).collect();
                ids.sort();
                ids
            };
            let agree = again.1.is_none() && ids(&again.0) == ids(&listed.0);
            listed = again;
            if agree {
                listed.1 = Some(true);
            }
        }
        Ok(listed.0)
    }

    async fn machine(&self, id: &str) -> Result<Option<Machine>> {
        match self.owned_server(id).await {
            Ok(s) => Ok(Some(self.machine_of(&s))),
            Err(Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// One `GET /servers?name=..` (names are unique per project), the server checked for this
    /// owner's and the pool's labels.
    async fn machine_named(&self, pool: &str, name: &str) -> Result<Option<Machine>> {
        validate_pool(pool)?;
        validate_name(name)?;
        let r: Servers = self
            .client
            .get("servers.list", "/servers", &[("name", name.to_string())])
            .await?;
        Ok(first_made(
            r.servers
                .iter()
                .filter(|s| s.name == name)
                .map(|s| self.machine_of(s))
                .filter(|m| labels::is_in_pool(&m.labels, pool, &self.owner)),
        ))
    }

    async fn delete(&self, id: &str) -> Result<bool> {
        let n = server_id(id)?;
        let Some(s) = self.read_server(n).await? else {
            return Ok(true);
        };
        kit::check_owned(id, &s.labels, &self.owner)?;
        self.delete_server(n).await
    }

    /// The trait's default (the server `machine_named` finds, deleted), but a "none" for a name a
    /// create of this provider left when it was stopped before it answered is read again within
    /// the visibility window: that create's server may not show yet. Other names cost the one read.
    async fn delete_named(&self, pool: &str, name: &str) -> Result<bool> {
        validate_pool(pool)?;
        validate_name(name)?;
        let found = self
            .stopped
            .find(pool, name, pause, || async {
                Ok(self.machine_named(pool, name).await?.into_iter().collect())
            })
            .await?;
        let removed = match found.first() {
            Some(m) => self.delete(&m.id).await?,
            None => false,
        };
        self.stopped.forget(pool, name);
        Ok(removed)
    }

    async fn start(&self, id: &str) -> Result<Machine> {
        let s = self.owned_server(id).await?;
        if s.status != "running" {
            self.server_action(s.id, "poweron", None)
                .await
                .map_err(|e| e.with_placement(&s.server_type.name, &s.location.name))?;
        }
        let s = self.owned_server(id).await?;
        Ok(self.machine_of(&s))
    }

    async fn stop(&self, id: &str) -> Result<Machine> {
        let s = self.owned_server(id).await?;
        if s.status != "off" {
            self.server_action(s.id, "shutdown", None).await?;
            // A graceful shutdown only asks the OS (ACPI); wait for it, bounded, then power off.
            let deadline = Instant::now() + self.config.shutdown_timeout;
            loop {
                let now = self.owned_server(id).await?;
                if now.status == "off" {
                    return Ok(self.machine_of(&now));
                }
                if Instant::now() >= deadline {
                    tracing::info!(server = s.id, "graceful shutdown timed out; powering off");
                    self.server_action(s.id, "poweroff", None).await?;
                    break;
                }
                tokio::time::sleep(self.config.poll_interval).await;
            }
        }
        let s = self.owned_server(id).await?;
        Ok(self.machine_of(&s))
    }

    async fn resize(&self, id: &str, machine_type: &str) -> Result<Resized> {
        server_id(id)?;
        validate_token("machine_type", machine_type)?;
        let s = self.owned_server(id).await?;
        if s.server_type.name == machine_type {
            return Ok(Resized::new(self.machine_of(&s), false));
        }
        let from = self.server_type(&s.server_type.name).await?;
        let to = self.server_type(machine_type).await?;
        if docker_arch(&from.architecture) != docker_arch(&to.architecture) {
            return Err(Error::invalid(
                "machine_type",
                format!(
                    "{machine_type} is {}, the server is {}: a resize cannot change the architecture",
                    docker_arch(&to.architecture),
                    docker_arch(&from.architecture)
                ),
            ));
        }
        // A type that cannot be ordered where the server is, refused before the server is stopped:
        // the change would fail after the downtime. Not offered there is no stock there, as for a
        // create.
        let location = &s.location.name;
        if !to.offered_in(location) {
            return Err(Error::no_stock(
                machine_type,
                location,
                format!("server type {machine_type} is not offered in {location}"),
            ));
        }
        Self::check_deprecation(&to, location)?;
        let was_off = s.status == "off";
        if !was_off {
            self.stop(id).await?;
        }
        // Keep the disk as it is, so the server can be resized down again. No stock is of the new
        // type, where the server is.
        let changed = self
            .server_action(
                s.id,
                "change_type",
                Some(json!({"server_type": machine_type, "upgrade_disk": false})),
            )
            .await
            .map_err(|e| e.with_placement(machine_type, location));
        if !was_off {
            // Power on again even when the change failed, so a failed resize leaves it as it was.
            let now = if changed.is_ok() {
                machine_type
            } else {
                s.server_type.name.as_str()
            };
            let started = self
                .server_action(s.id, "poweron", None)
                .await
                .map_err(|e| e.with_placement(now, location));
            changed?;
            started?;
        } else {
            changed?;
        }
        let s = self.owned_server(id).await?;
        Ok(Resized::new(self.machine_of(&s), !was_off))
    }

    async fn hourly_price(&self, machine_type: &str, location: &str) -> Result<Price> {
        validate_token("location", location)?;
        let t = self.server_type(machine_type).await?;
        let p = t
            .prices
            .iter()
            .find(|p| p.location == location)
            .ok_or_else(|| {
                Error::not_found(format!(
                    "a price of {machine_type} in {location} (not offered there)"
                ))
            })?;
        let hourly: f64 = p.price_hourly.net.trim().parse().map_err(|_| {
            Error::other(format!(
                "unreadable price {:?} for {machine_type}",
                p.price_hourly.net
            ))
        })?;
        Ok(Price::new(hourly, "EUR"))
    }

    fn machine_labels(&self) -> Option<&dyn MachineLabels> {
        Some(self)
    }
}
