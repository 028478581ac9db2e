//! [`AzureProvider`]: the [`Provider`] contract on Azure Resource Manager.
//!
//! A machine is a VM named by the spec's name (its orca id is that name: unique in the resource
//! group), with `<name>-ip` (static Standard public address with a DNS name), `<name>-nsg` (its own
//! security group admitting the SSH sources on TCP 22 only), `<name>-nic` (interface in
//! `<vnet>-<location>/<subnet>`, in the admission group's application security group when the spec
//! names one) and the OS disk `<name>-osdisk`. The VM owns its interface, address and disk
//! (`deleteOption: Delete`): deleting the VM deletes them, so a VM that failed is removed with what it
//! holds (Azure reserves a failed VM's interface for about 180 s and refuses to delete it on its
//! own). The VM, address, security group and interface carry the ownership tags; the OS disk, made by
//! Azure from the VM, carries none.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine as _;
use futures::StreamExt;
use orca_machines::kit::{self, lock};
use orca_machines::labels::{is_in_pool, is_owned_by, ownership_labels, pool_of, Labels};
use orca_machines::spec::validate_token;
use orca_machines::{
    docker_arch, validate_id, validate_name, validate_owner, validate_pool, Arch, Capabilities,
    Created, CreditBalance, Error, Machine, MachineLabels, MachineSpec, Price, Provider, Resized,
    Result, SpecOptions, SshAdmission, Status,
};
use reqwest::Method;
use serde_json::{json, Value};
use tokio::time::Instant;

use crate::client::{decode, Client, Condition, COMPUTE_API, DISKS_API, NETWORK_API, SKUS_API};
use crate::config::{Config, ImageUrn, URN_RULE};
use crate::model::{ImageVersion, InstanceView, Nic, PublicIp, Sku, Tagged, Vm, VmSize};

/// The driver's kind.
pub const KIND: &str = "azure";

/// The longest machine name: the resources add `-osdisk` to it.
pub const MAX_NAME: usize = 58;

/// The largest OS disk Azure makes (GiB).
pub const MAX_OS_DISK_GB: u32 = 4095;

/// The name of the inbound SSH rule on a machine's own security group.
pub const SSH_RULE: &str = "orca-ssh";

/// The tag a create writes on its VM, with a random token of its own: when the VM's `PUT` meets a
/// VM of that name (412), the tag tells whether this call made it (an attempt whose answer was
/// lost) or an earlier one did. The driver's bookkeeping, not a label: never in
/// [`Machine::labels`]. The `.` keeps it out of the label keys a caller can set
/// ([`orca_machines::spec::LABEL_KEY_RULE`]), so no caller's label is ever taken for it.
pub const CREATE_TAG: &str = "orca.create";

/// Machines on Azure, as one owner's.
#[derive(Clone)]
pub struct AzureProvider {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) config: Config,
    pub(crate) client: Client,
    pub(crate) owner: String,
    /// The size catalogue of each location read so far: size (lower case) -> architecture.
    skus: Mutex<HashMap<String, Arc<HashMap<String, Arch>>>>,
    /// The architecture of each marketplace image read so far, by location and URN (lower case).
    image_archs: Mutex<HashMap<String, Arch>>,
    /// Whether Azure sells each size read so far in any region (lower case).
    sold: Mutex<HashMap<String, bool>>,
    /// Machines this provider made, and when: a "not found" for one of them is not believed at once.
    recent: kit::Recent<String>,
    /// Creates stopped once Azure may hold their VM, before they answered, by pool and name.
    stopped: kit::StoppedCreates,
}

impl std::fmt::Debug for AzureProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AzureProvider")
            .field("owner", &self.inner.owner)
            .field("config", &self.inner.config)
            .finish()
    }
}

mod catalogue;
mod core;
mod create;
mod delete;
mod list;
mod named;
mod resize;

// The shared pieces, for the operations' modules and the extensions.
pub(crate) use self::core::*;

impl AzureProvider {
    /// A provider for `owner` (empty for none) with `config`. No network call.
    pub async fn new(config: Config, owner: &str) -> Result<AzureProvider> {
        validate_owner(owner)?;
        let token = config.token_source()?;
        let client = Client::new(&config, token)?;
        let recent = kit::Recent::new(config.visibility_window);
        let stopped = kit::StoppedCreates::new(config.visibility_window);
        Ok(AzureProvider {
            inner: Arc::new(Inner {
                config,
                client,
                owner: owner.to_string(),
                skus: Mutex::new(HashMap::new()),
                image_archs: Mutex::new(HashMap::new()),
                sold: Mutex::new(HashMap::new()),
                recent,
                stopped,
            }),
        })
    }

    /// The settings in use.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    pub(crate) fn client(&self) -> &Client {
        &self.inner.client
    }

    pub(crate) fn cfg(&self) -> &Config {
        &self.inner.config
    }

    pub(crate) fn owner_name(&self) -> &str {
        &self.inner.owner
    }
}

fn capabilities() -> Capabilities {
    Capabilities::NONE
        .with_start_stop(true)
        .with_resize(true)
        .with_hourly_price(true)
        // Azure reports no start or stop time: the instance view's power state has none, and the
        // provisioning state's time is that of any last change (a tag included).
        .with_power_times(false)
        .with_private_address(true)
        .with_options(
            SpecOptions::ALL
                .with("network_tags", false)
                .with("max_run_duration", false),
        )
}

#[async_trait]
impl Provider for AzureProvider {
    fn kind(&self) -> &str {
        KIND
    }

    fn owner(&self) -> &str {
        &self.inner.owner
    }

    fn capabilities(&self) -> Capabilities {
        capabilities()
    }

    async fn arch(&self, machine_type: &str) -> Result<Arch> {
        self.arch_of(machine_type).await
    }

    async fn create(&self, spec: &MachineSpec) -> Result<Created> {
        // A create dropped once Azure may hold its VM leaves a VM that reads may not show yet: its
        // name is noted, so that `delete_named` of it looks again.
        let unanswered = self.inner.stopped.start(&spec.pool, &spec.name);
        let answer = self.create_machine(spec, &unanswered).await;
        unanswered.answered();
        answer
    }

    async fn machines(&self, pool: &str) -> Result<Vec<Machine>> {
        self.list_pool(pool).await
    }

    async fn machine(&self, id: &str) -> Result<Option<Machine>> {
        self.read_machine(id).await
    }

    async fn machine_named(&self, pool: &str, name: &str) -> Result<Option<Machine>> {
        self.machine_by_name(pool, name).await
    }

    async fn delete(&self, id: &str) -> Result<bool> {
        self.delete_machine(id).await
    }

    async fn delete_named(&self, pool: &str, name: &str) -> Result<bool> {
        self.delete_by_name(pool, name).await
    }

    async fn start(&self, id: &str) -> Result<Machine> {
        self.power(id, "start").await
    }

    async fn stop(&self, id: &str) -> Result<Machine> {
        self.power(id, "deallocate").await
    }

    async fn resize(&self, id: &str, machine_type: &str) -> Result<Resized> {
        self.resize_machine(id, machine_type).await
    }

    async fn hourly_price(&self, machine_type: &str, location: &str) -> Result<Price> {
        validate_token("machine_type", machine_type)?;
        validate_token("location", location)?;
        self.price(machine_type, location).await
    }

    fn machine_labels(&self) -> Option<&dyn MachineLabels> {
        Some(self)
    }

    fn ssh_admission(&self) -> Option<&dyn SshAdmission> {
        Some(self)
    }

    fn credit_balance(&self) -> Option<&dyn CreditBalance> {
        self.cfg()
            .billing
            .as_ref()
            .map(|_| self as &dyn CreditBalance)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_labels_start_with_a_letter_and_are_long_enough() {
        assert_eq!(dns_label("orca-lab-7"), "orca-lab-7");
        assert_eq!(dns_label("a"), "vm-a");
        assert_eq!(dns_label("7x"), "vm-7x");
        assert_eq!(dns_label("0ab"), "vm-0ab");
        assert!(dns_label(&"a".repeat(MAX_NAME)).len() <= 63);
        assert!(dns_label(&format!("0{}", "a".repeat(MAX_NAME - 1))).len() <= 63);
    }

    #[test]
    fn leftovers_are_named_by_kind_and_name() {
        let gone = Left::because(Res::new(Part::Vm, "vm-a"), &Error::other("locked"));
        let standing = Left::standing(Res::new(Part::Interface, "vm-a-nic"));
        assert_eq!(gone.to_string(), "VM vm-a (locked)");
        assert_eq!(standing.to_string(), "interface vm-a-nic");
        // A machine whose name reads like a kind is still told by its kind.
        let odd = Left::standing(Res::new(Part::PublicIp, "vm-x"));
        assert_ne!(odd.res.part, Part::Vm);
        assert_eq!(odd.to_string(), "public IP vm-x");
    }

    #[test]
    fn capabilities_deny_what_azure_cannot_do() {
        let c = capabilities();
        assert!(!c.power_times && c.private_address);
        assert!(!c.options.network_tags && !c.options.max_run_duration);
        assert!(c.options.labels && c.options.admission_group && c.options.ssh_sources);
    }
}
