//! [`HetznerProvider`]: the [`Provider`] contract on Hetzner Cloud servers.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use hcloud::models::{
    self, Action, CreateServerResponse, GetActionResponse, GetServerResponse, ListActionsResponse,
    ListFirewallsResponse, ListImagesResponse, ListServerTypesResponse, ListServersResponse,
    Server, ServerType,
};
use orca_machines::labels::{self, Labels};
use orca_machines::{
    all_pages, docker_arch, validate_id, validate_owner, validate_pool, Arch, Capabilities,
    Created, Error, Machine, MachineSpec, Page, Price, Provider, Resized, Result, Status,
};
use reqwest::Method;
use serde_json::json;
use tokio::sync::OnceCell;
use tokio::time::Instant;

use crate::client::Client;
use crate::config::{Config, FIREWALL_ENV, IMAGE_ENV};

/// Hetzner Cloud servers as one owner's machines.
pub struct HetznerProvider {
    owner: String,
    config: Config,
    client: Client,
    types: Mutex<HashMap<String, ServerType>>,
    images: Mutex<HashMap<String, i64>>,
    firewall: OnceCell<Option<i64>>,
}

impl std::fmt::Debug for HetznerProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HetznerProvider")
            .field("owner", &self.owner)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Hetzner's word for a server's state onto the shared set.
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

fn cloud_word(s: &models::server::Status) -> String {
    serde_json::to_value(s)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| "unknown".into())
}

fn arch_word(a: models::Architecture) -> &'static str {
    match a {
        models::Architecture::X86 => "x86",
        models::Architecture::Arm => "arm",
    }
}

fn machine_of(s: &Server) -> Machine {
    let labels: Labels = s
        .labels
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let word = cloud_word(&s.status);
    let mut m = Machine::new(s.id.to_string(), &s.name);
    m.status = status_of(&word);
    m.cloud_status = word;
    m.machine_type = s.server_type.name.clone();
    m.location = s.location.name.clone();
    m.address = s
        .public_net
        .ipv4
        .as_ref()
        .map(|v| v.ip.clone())
        .unwrap_or_default();
    m.pool = labels::pool_of(&labels);
    m.labels = labels;
    m
}

fn labels_of(s: &Server) -> Labels {
    s.labels
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn token_rule(field: &str, value: &str) -> Result<()> {
    let ok = !value.is_empty()
        && value.len() <= 63
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.');
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(
            field,
            format!("1 to 63 of letters, digits, '-', '_' and '.', got {value:?}"),
        ))
    }
}

/// A server id: Hetzner's are positive integers.
fn server_id(id: &str) -> Result<i64> {
    validate_id(id)?;
    id.parse::<i64>().ok().filter(|n| *n > 0).ok_or_else(|| {
        Error::invalid(
            "id",
            format!("a Hetzner server id is a positive integer, got {id:?}"),
        )
    })
}

impl HetznerProvider {
    /// A provider for `owner` (empty for none) with `config`. Makes no call.
    pub fn new(owner: &str, config: Config) -> Result<HetznerProvider> {
        validate_owner(owner)?;
        let client = Client::new(&config)?;
        Ok(HetznerProvider {
            owner: owner.to_string(),
            config,
            client,
            types: Mutex::new(HashMap::new()),
            images: Mutex::new(HashMap::new()),
            firewall: OnceCell::new(),
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

    async fn server_type(&self, name: &str) -> Result<ServerType> {
        token_rule("machine_type", name)?;
        if let Some(t) = lock(&self.types).get(name) {
            return Ok(t.clone());
        }
        let r: ListServerTypesResponse = self
            .client
            .call(
                "server_types.list",
                Method::GET,
                "/server_types",
                &[("name", name.to_string())],
                None,
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

    /// The image for `arch`: the configured id as it is, or the configured name looked up for `arch`.
    async fn image_for(&self, arch: models::Architecture) -> Result<String> {
        let image = &self.config.image;
        if image.bytes().all(|b| b.is_ascii_digit()) {
            return Ok(image.clone());
        }
        let key = arch_word(arch).to_string();
        if let Some(id) = lock(&self.images).get(&key) {
            return Ok(id.to_string());
        }
        let r: ListImagesResponse = self
            .client
            .call(
                "images.list",
                Method::GET,
                "/images",
                &[("name", image.clone()), ("architecture", key.clone())],
                None,
            )
            .await?;
        let found = r
            .images
            .iter()
            .find(|i| i.name.as_deref() == Some(image.as_str()) && i.architecture == arch)
            .map(|i| i.id)
            .ok_or_else(|| {
                Error::settings(
                    [IMAGE_ENV],
                    format!("no image {image:?} for architecture {key}"),
                )
            })?;
        lock(&self.images).insert(key, found);
        Ok(found.to_string())
    }

    async fn firewall_id(&self) -> Result<Option<i64>> {
        let Some(name) = self.config.firewall.clone() else {
            return Ok(None);
        };
        self.firewall
            .get_or_try_init(|| async {
                let r: ListFirewallsResponse = self
                    .client
                    .call(
                        "firewalls.list",
                        Method::GET,
                        "/firewalls",
                        &[("name", name.clone())],
                        None,
                    )
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

    async fn get_server(&self, id: i64) -> Result<Option<Server>> {
        match self
            .client
            .call::<GetServerResponse>(
                "servers.get",
                Method::GET,
                &format!("/servers/{id}"),
                &[],
                None,
            )
            .await
        {
            Ok(r) => Ok(r.server.map(|s| *s)),
            Err(Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The server `id` when it is this owner's; `NotOwned` when it is not, `NotFound` when it is gone.
    async fn owned_server(&self, id: &str) -> Result<Server> {
        let n = server_id(id)?;
        let s = self
            .get_server(n)
            .await?
            .ok_or_else(|| Error::not_found(format!("server {id}")))?;
        if !labels::is_owned_by(&labels_of(&s), &self.owner) {
            return Err(Error::NotOwned {
                id: id.to_string(),
                owner: self.owner.clone(),
            });
        }
        Ok(s)
    }

    /// Follows action `action` to its end: `Ok` on success, the action's error otherwise.
    async fn wait_action(&self, action: &Action) -> Result<()> {
        let deadline = Instant::now() + self.config.action_timeout;
        let mut current = action.clone();
        loop {
            match current.status {
                models::action::Status::Success => return Ok(()),
                models::action::Status::Error => {
                    let (code, msg) = current
                        .error
                        .as_ref()
                        .map(|e| (e.code.clone(), e.message.clone()))
                        .unwrap_or_else(|| ("unknown".into(), "no message".into()));
                    return Err(Error::other(format!(
                        "action {} ({}) failed: {code}: {msg}",
                        current.id, current.command
                    )));
                }
                models::action::Status::Running => {}
            }
            if Instant::now() >= deadline {
                return Err(Error::transient(format!(
                    "action {} ({}) still running after {:?}",
                    current.id, current.command, self.config.action_timeout
                )));
            }
            tokio::time::sleep(self.config.action_poll).await;
            let r: GetActionResponse = self
                .client
                .call(
                    "actions.get",
                    Method::GET,
                    &format!("/actions/{}", current.id),
                    &[],
                    None,
                )
                .await?;
            current = *r.action;
        }
    }

    /// Starts an action on server `id` (`poweron`, `shutdown`, ...) and follows it to its end.
    async fn server_action(
        &self,
        id: i64,
        command: &'static str,
        body: Option<serde_json::Value>,
    ) -> Result<()> {
        let r: GetActionResponse = self
            .client
            .call(
                command,
                Method::POST,
                &format!("/servers/{id}/actions/{command}"),
                &[],
                body.as_ref(),
            )
            .await?;
        self.wait_action(&r.action).await
    }

    /// Deletes server `id` and follows the delete to its end; true once it is gone.
    async fn delete_server(&self, id: i64) -> Result<bool> {
        let r = self
            .client
            .call::<models::DeleteServerResponse>(
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
                Ok(true)
            }
            Err(Error::NotFound { .. }) => Ok(true),
            Err(e) => Err(e),
        }
    }

    /// Deletes server `id` whose create action failed with `failed`; answers `failed`, or
    /// [`Error::Leftovers`] naming the server when it could not be deleted.
    async fn remove_failed(&self, id: i64, name: &str, failed: Error) -> Error {
        tracing::warn!(server = id, error = %failed, "create action failed; deleting the server");
        match self.delete_server(id).await {
            Ok(_) => failed,
            Err(e) => Error::Leftovers {
                error: Box::new(failed),
                left: vec![format!("server {id} ({name}): {e}")],
            },
        }
    }

    /// A create whose name is taken: the server of that name when it is this owner's, of this pool,
    /// type and location (a retried create), after its running actions end; else `AlreadyExists`
    /// (`conflict`: the name is known to be taken) or `taken` itself.
    async fn adopt(&self, spec: &MachineSpec, taken: Error, conflict: bool) -> Result<Created> {
        let r: ListServersResponse = self
            .client
            .call(
                "servers.list",
                Method::GET,
                "/servers",
                &[("name", spec.name.clone())],
                None,
            )
            .await?;
        let Some(s) = r.servers.into_iter().find(|s| s.name == spec.name) else {
            return Err(taken);
        };
        let ours = labels::is_in_pool(&labels_of(&s), &spec.pool, &self.owner)
            && s.server_type.name == spec.machine_type
            && s.location.name == spec.location;
        if !ours && !conflict {
            return Err(taken);
        }
        if !ours {
            return Err(Error::already_exists(format!(
                "server {:?} (id {}) exists and is not this owner's machine of pool {:?}",
                spec.name, s.id, spec.pool
            )));
        }
        tracing::info!(server = s.id, name = %spec.name, "adopting the server a lost create made");
        // The running actions, and a create action that already failed: a server whose create failed
        // is removed as `create` removes it, never handed back as made.
        let actions: ListActionsResponse = self
            .client
            .call(
                "servers.actions.list",
                Method::GET,
                &format!("/servers/{}/actions", s.id),
                &[
                    ("status", "running".to_string()),
                    ("status", "error".to_string()),
                ],
                None,
            )
            .await?;
        for a in &actions.actions {
            let is_create = a.command == "create_server";
            if a.status == models::action::Status::Error && !is_create {
                continue;
            }
            if let Err(failed) = self.wait_action(a).await {
                if is_create && !failed.is_retryable() {
                    return Err(self.remove_failed(s.id, &spec.name, failed).await);
                }
                return Err(failed);
            }
        }
        let s = self.get_server(s.id).await?.ok_or_else(|| {
            Error::transient(format!("server {} vanished while adopting it", spec.name))
        })?;
        Ok(Created::Machine(machine_of(&s)))
    }

    fn list_page(
        &self,
        pool: &str,
        page: Option<String>,
    ) -> impl std::future::Future<Output = Result<Page<Machine>>> + '_ {
        let selector = labels::selector(pool, &self.owner);
        let page = page.unwrap_or_else(|| "1".into());
        let per_page = self.config.page_size.to_string();
        let pool = pool.to_string();
        async move {
            let r: ListServersResponse = self
                .client
                .call(
                    "servers.list",
                    Method::GET,
                    "/servers",
                    &[
                        ("label_selector", selector),
                        ("page", page),
                        ("per_page", per_page),
                    ],
                    None,
                )
                .await?;
            let items = r
                .servers
                .iter()
                .filter(|s| labels::is_in_pool(&labels_of(s), &pool, &self.owner))
                .map(machine_of)
                .collect();
            Ok(Page {
                items,
                next: r.meta.pagination.next_page.map(|n| n.to_string()),
            })
        }
    }
}

#[async_trait]
impl Provider for HetznerProvider {
    fn kind(&self) -> &str {
        "hetzner"
    }

    fn owner(&self) -> &str {
        &self.owner
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::ALL
    }

    async fn arch(&self, machine_type: &str) -> Result<Arch> {
        let t = self.server_type(machine_type).await?;
        Ok(docker_arch(arch_word(t.architecture)))
    }

    async fn create(&self, spec: &MachineSpec) -> Result<Created> {
        spec.validate()?;
        let t = self.server_type(&spec.machine_type).await?;
        token_rule("location", &spec.location)?;
        let image = self.image_for(t.architecture).await?;
        let firewall = self.firewall_id().await?;
        let mut request =
            models::CreateServerRequest::new(image, spec.name.clone(), spec.machine_type.clone());
        request.location = Some(spec.location.clone());
        request.labels = Some(
            labels::ownership_labels(&spec.pool, &self.owner)
                .into_iter()
                .collect(),
        );
        request.start_after_create = Some(true);
        if !self.config.ssh_keys.is_empty() {
            request.ssh_keys = Some(self.config.ssh_keys.clone());
        }
        if let Some(f) = firewall {
            request.firewalls = Some(vec![models::CreateServerRequestFirewalls::new(f)]);
        }
        if !spec.user_data.is_empty() {
            request.user_data = Some(spec.user_data.clone());
        }
        let body = serde_json::to_value(&request)
            .map_err(|e| Error::other(format!("cannot encode the create request: {e}")))?;
        // Retrying the POST is safe: names are unique per project, so a repeat of a create whose answer
        // was lost meets `uniqueness_error` and adopts the server the first attempt made.
        let made = self
            .client
            .call::<CreateServerResponse>(
                "servers.create",
                Method::POST,
                "/servers",
                &[],
                Some(&body),
            )
            .await;
        let r = match made {
            Ok(r) => r,
            Err(e @ (Error::NoStock { .. } | Error::Quota { .. })) => {
                // A create retried after a lost answer can meet the stock or the server limit that its
                // first attempt used up: adopt the server that attempt made, when there is one.
                return match self.adopt(spec, e, false).await {
                    Err(Error::NoStock { message, .. }) => Ok(Created::NoStock {
                        machine_type: spec.machine_type.clone(),
                        location: spec.location.clone(),
                        message,
                    }),
                    other => other,
                };
            }
            Err(e @ Error::AlreadyExists { .. }) => return self.adopt(spec, e, true).await,
            Err(e) => return Err(e),
        };
        let id = r.server.id;
        // The create action, then its next actions (the `start_server` of `start_after_create`).
        let mut ended = self.wait_action(&r.action).await;
        for next in &r.next_actions {
            if ended.is_err() {
                break;
            }
            ended = self.wait_action(next).await;
        }
        if let Err(failed) = ended {
            if failed.is_retryable() {
                // Still running (or unreadable): the server stays; a retry of the create adopts it.
                return Err(failed);
            }
            return Err(self.remove_failed(id, &spec.name, failed).await);
        }
        let s = self
            .get_server(id)
            .await?
            .ok_or_else(|| Error::transient(format!("server {id} vanished after its create")))?;
        Ok(Created::Machine(machine_of(&s)))
    }

    async fn machines(&self, pool: &str) -> Result<Vec<Machine>> {
        validate_pool(pool)?;
        all_pages(|page| self.list_page(pool, page)).await
    }

    async fn machine(&self, id: &str) -> Result<Option<Machine>> {
        match self.owned_server(id).await {
            Ok(s) => Ok(Some(machine_of(&s))),
            Err(Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn delete(&self, id: &str) -> Result<bool> {
        let n = server_id(id)?;
        let Some(s) = self.get_server(n).await? else {
            return Ok(true);
        };
        if !labels::is_owned_by(&labels_of(&s), &self.owner) {
            return Err(Error::NotOwned {
                id: id.to_string(),
                owner: self.owner.clone(),
            });
        }
        self.delete_server(n).await
    }

    async fn start(&self, id: &str) -> Result<Machine> {
        let s = self.owned_server(id).await?;
        if cloud_word(&s.status) != "running" {
            self.server_action(s.id, "poweron", None).await?;
        }
        let s = self.owned_server(id).await?;
        Ok(machine_of(&s))
    }

    async fn stop(&self, id: &str) -> Result<Machine> {
        let s = self.owned_server(id).await?;
        if cloud_word(&s.status) != "off" {
            self.server_action(s.id, "shutdown", None).await?;
            // A graceful shutdown only asks the OS (ACPI); wait for it, bounded, then power off.
            let deadline = Instant::now() + self.config.shutdown_timeout;
            loop {
                let now = self.owned_server(id).await?;
                if cloud_word(&now.status) == "off" {
                    return Ok(machine_of(&now));
                }
                if Instant::now() >= deadline {
                    tracing::info!(server = s.id, "graceful shutdown timed out; powering off");
                    self.server_action(s.id, "poweroff", None).await?;
                    break;
                }
                tokio::time::sleep(self.config.action_poll).await;
            }
        }
        let s = self.owned_server(id).await?;
        Ok(machine_of(&s))
    }

    async fn resize(&self, id: &str, machine_type: &str) -> Result<Resized> {
        server_id(id)?;
        token_rule("machine_type", machine_type)?;
        let s = self.owned_server(id).await?;
        if s.server_type.name == machine_type {
            return Ok(Resized {
                machine: machine_of(&s),
                caused_downtime: false,
            });
        }
        let from = self.server_type(&s.server_type.name).await?;
        let to = self.server_type(machine_type).await?;
        if from.architecture != to.architecture {
            return Err(Error::invalid(
                "machine_type",
                format!(
                    "{machine_type} is {}, the server is {}: a resize cannot change the architecture",
                    docker_arch(arch_word(to.architecture)),
                    docker_arch(arch_word(from.architecture))
                ),
            ));
        }
        let was_off = cloud_word(&s.status) == "off";
        if !was_off {
            self.stop(id).await?;
        }
        // Keep the disk as it is, so the server can be resized down again.
        let changed = self
            .server_action(
                s.id,
                "change_type",
                Some(json!({"server_type": machine_type, "upgrade_disk": false})),
            )
            .await;
        if !was_off {
            // Power on again even when the change failed, so a failed resize leaves it as it was.
            let started = self.server_action(s.id, "poweron", None).await;
            changed?;
            started?;
        } else {
            changed?;
        }
        let s = self.owned_server(id).await?;
        Ok(Resized {
            machine: machine_of(&s),
            caused_downtime: !was_off,
        })
    }

    async fn hourly_price(&self, machine_type: &str, location: &str) -> Result<Price> {
        token_rule("location", location)?;
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
}
