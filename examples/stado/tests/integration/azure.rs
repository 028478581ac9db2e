//! The key steps of create, list, delete and reap against orca's Azure driver and the fake Resource Manager API
//! (`orca_fakes::azure`), with the provider built from stado's own bindings as `--provider azure` builds
//! it, and the simulated fleet as the host channel.
//!
//! The credit gate reads the balance the fake serves for the billing account and profile the lab's
//! profile names (`azure.billing_account`, `azure.billing_profile`; [`FakeAzure::set_credit`]), through
//! the driver, so the fault run faults that read as well.

use crate::common;

use std::sync::Arc;

use common::{declared, request};
use orca::Provider;
use orca_fakes::azure::{FakeAzure, RESOURCE_GROUP, SUBSCRIPTION, TOKEN};
use orca_fakes::control::{Fault, Rule};
use stado::channel::{FakeFleet, FirstBoot};
use stado::profile::Profile;
use stado::registry::Registry;
use stado::{Stado, Verdict};

const LOCATION: &str = "westeurope";
const SIZE: &str = "Standard_B2s";

/// The billing account and profile whose credit the gate reads (`azure.billing_account`,
/// `azure.billing_profile`), and the fake serves.
const BILLING_ACCOUNT: &str = "1234:5678";
const BILLING_PROFILE: &str = "2468";

struct Lab {
    _dir: tempfile::TempDir,
    azure: Arc<FakeAzure>,
    fleet: FakeFleet,
    s: Stado,
}

/// The fake with the location's subnet `stado-net-westeurope/hosts` carrying the security group
/// `hosts-nsg` (with `rules` of another team), and stado on it.
async fn lab(rules: &[(&str, u32)]) -> Lab {
    let azure = FakeAzure::start().await.unwrap();
    azure.add_nsg(RESOURCE_GROUP, "hosts-nsg", LOCATION, rules);
    azure.add_subnet(
        RESOURCE_GROUP,
        &format!("stado-net-{LOCATION}"),
        LOCATION,
        "hosts",
        Some("hosts-nsg"),
    );
    lab_in(Arc::new(azure)).await
}

/// stado in a home of its own on the resource group of `azure`.
async fn lab_in(azure: Arc<FakeAzure>) -> Lab {
    let dir = tempfile::tempdir().unwrap();
    let home = common::home(dir.path(), "azure");
    let mut p = Profile::load(&home).unwrap();
    p.set("azure.endpoint", &azure.url()).unwrap();
    p.set("azure.prices_endpoint", &azure.url()).unwrap();
    p.set("azure.billing_account", BILLING_ACCOUNT).unwrap();
    p.set("azure.billing_profile", BILLING_PROFILE).unwrap();
    p.save(&home).unwrap();
    azure.set_credit(BILLING_ACCOUNT, BILLING_PROFILE, 100.0, "USD");
    let fleet = FakeFleet::default();
    let s = common::stado_on(home, "azure", azure_provider(&p).await, &fleet);
    Lab {
        _dir: dir,
        azure,
        fleet,
        s,
    }
}

/// The provider as `stado --provider azure` builds it: the profile's bindings on the driver's keys,
/// the credential from the environment (here a static token).
async fn azure_provider(p: &Profile) -> Arc<dyn Provider> {
    let settings = stado::azure::settings(p, |k| match k {
        "ORCA_AZURE_ACCESS_TOKEN" => Some(TOKEN.to_string()),
        // The fake finishes its operations at once: poll it often.
        "ORCA_POLL_INTERVAL" => Some("20ms".to_string()),
        // Its reads show a new VM at once: a delete of a create stopped before it answered waits
        // 2 s, not the default minute, for that VM to show.
        "ORCA_VISIBILITY_WINDOW" => Some("2s".to_string()),
        _ => None,
    });
    orca::of_with("azure", &p.owner(), &settings).await.unwrap()
}

impl Lab {
    async fn create(&self, name: &str) -> stado::CreateReport {
        self.s.create(&request(name, LOCATION, SIZE)).await
    }
    fn resources(&self) -> Vec<(String, String)> {
        self.azure.resources(RESOURCE_GROUP)
    }
    /// The resources a host is made of.
    fn host_resources(&self, name: &str) -> Vec<(String, String)> {
        self.resources()
            .into_iter()
            .filter(|(_, n)| n == name || n.starts_with(&format!("{name}-")))
            .collect()
    }
    fn vm_id(&self, name: &str) -> String {
        declared(&self.s)
            .into_iter()
            .find(|(n, _)| n == name)
            .unwrap()
            .1
    }
    /// The VMs of the resource group, as (name, orca id = name), sorted.
    fn vms(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .resources()
            .into_iter()
            .filter(|(t, _)| t == "Microsoft.Compute/virtualMachines")
            .map(|(_, n)| n)
            .collect();
        v.sort();
        v
    }
}

fn error(r: &stado::CreateReport) -> String {
    r.error
        .as_ref()
        .map(|e| e.message().to_string())
        .unwrap_or_default()
}

fn declared_names(s: &Stado) -> Vec<String> {
    declared(s).into_iter().map(|(n, _)| n).collect()
}

#[tokio::test]
async fn a_host_is_made_of_address_security_group_interface_and_vm_and_admitted_at_the_first_free_priority(
) {
    let lab = lab(&[("team-a", 100), ("team-b", 101), ("team-c", 102)]).await;
    let r = lab.create("h1").await;
    assert!(r.ok, "{:?}\n{:#?}", r.error, r.steps);
    assert_eq!(r.admission[0].priority, Some(103));
    assert!(
        r.admission[0]
            .group
            .ends_with(&format!("stado-cloud-hosts-{LOCATION}")),
        "{}",
        r.admission[0].group
    );
    let rules = lab.azure.nsg_rules(RESOURCE_GROUP, "hosts-nsg");
    let ours = rules
        .iter()
        .find(|r| r["name"] == "stado-cloud-hosts")
        .unwrap();
    assert_eq!(ours["properties"]["priority"], 103);
    for (name, p) in [("team-a", 100), ("team-b", 101), ("team-c", 102)] {
        let r = rules.iter().find(|r| r["name"] == name).unwrap();
        assert_eq!(r["properties"]["priority"], p, "{name} left as it was");
    }
    let mut kinds: Vec<String> = lab
        .host_resources("h1")
        .into_iter()
        .map(|(t, _)| t)
        .collect();
    kinds.sort();
    for t in [
        "Microsoft.Compute/virtualMachines",
        "Microsoft.Network/networkInterfaces",
        "Microsoft.Network/networkSecurityGroups",
        "Microsoft.Network/publicIPAddresses",
    ] {
        assert!(kinds.iter().any(|k| k == t), "{t} in {kinds:?}");
    }
    let pip = lab
        .azure
        .resource(
            RESOURCE_GROUP,
            "Microsoft.Network/publicIPAddresses",
            "h1-ip",
        )
        .unwrap();
    assert_eq!(pip["properties"]["publicIPAllocationMethod"], "Static");
    assert_eq!(pip["sku"]["name"], "Standard");
    let reg = Registry::load(&lab.s.home).unwrap();
    let c = reg.target("h1").unwrap().cloud.clone().unwrap();
    assert_eq!(c.address, pip["properties"]["ipAddress"].as_str().unwrap());
    assert!(c.hourly_usd > 0.0);
    assert!(
        lab.azure.custom_data(RESOURCE_GROUP, "h1").is_some(),
        "cloud-init went with the VM"
    );
}

/// Retail Prices quote Standard_B2s differently in each location (the fake's: westeurope 0.0458,
/// northeurope 0.0416, eastus 0.0395 USD an hour): a host made in eastus, the cheapest, is priced at
/// the highest any configured location quotes, westeurope's, which is neither its own location nor
/// the first configured one, and that hour is what the gate takes and the registry records.
#[tokio::test]
async fn the_size_is_priced_at_the_highest_hour_any_configured_location_quotes() {
    let lab = lab(&[]).await;
    lab.azure
        .add_subnet(RESOURCE_GROUP, "stado-net-eastus", "eastus", "hosts", None);
    let mut p = Profile::load(&lab.s.home).unwrap();
    p.set("azure.locations", "northeurope,westeurope").unwrap();
    p.save(&lab.s.home).unwrap();
    let r = lab.s.create(&request("h1", "eastus", SIZE)).await;
    assert!(r.ok, "{:?}", r.error);
    let price = r.price.clone().unwrap();
    let quotes: Vec<(&str, f64)> = price.quotes.iter().map(|(l, h)| (l.as_str(), *h)).collect();
    assert_eq!(
        quotes,
        [
            ("eastus", 0.0395),
            ("northeurope", 0.0416),
            ("westeurope", 0.0458)
        ]
    );
    assert_eq!(
        (price.priced_in.as_str(), price.hourly_usd),
        ("westeurope", 0.0458)
    );
    assert_eq!(
        r.steps[1].lines[0],
        format!("projected hourly burn: 0.0458 USD (h1 {SIZE} at 0.0458 USD, priced in westeurope, the highest of eastus, northeurope, westeurope; 0 cloud host(s) already running at 0.00 USD)")
    );
    assert_eq!(r.credit.as_ref().unwrap().after, 100.0 - 0.0458);
    let reg = Registry::load(&lab.s.home).unwrap();
    let c = reg.target("h1").unwrap().cloud.clone().unwrap();
    assert_eq!((c.priced_in.as_str(), c.hourly_usd), ("westeurope", 0.0458));
    assert_eq!(c.location, "eastus");
}

#[tokio::test]
async fn refusals_before_anything_is_made() {
    let lab = lab(&[]).await;
    let before = lab.resources();
    // Missing bindings.
    let mut p = Profile::load(&lab.s.home).unwrap();
    p.unset("azure.subnet");
    p.save(&lab.s.home).unwrap();
    assert_eq!(
        error(&lab.create("h1").await),
        "a cloud host on Azure is addressed with bindings this deployment does not declare: azure.subnet; stado config set declares each."
    );
    p.set("azure.subnet", "hosts").unwrap();
    p.save(&lab.s.home).unwrap();
    // A name already registered.
    assert_eq!(
        error(&lab.create("build-host").await),
        "target 'build-host' is already registered"
    );
    // The credit gate.
    lab.azure
        .set_credit(BILLING_ACCOUNT, BILLING_PROFILE, 20.01, "USD");
    let e = error(&lab.create("h1").await);
    assert!(e.starts_with(&format!("creating cloud host h1 ({SIZE}) in {LOCATION} is refused: the Azure credit balance 20.01 USD less one hour of {SIZE} (")), "{e}");
    assert!(
        e.contains("is not above the floor 20.00 USD (the operator's ruling R-1: "),
        "{e}"
    );
    lab.azure
        .set_credit(BILLING_ACCOUNT, BILLING_PROFILE, 100.0, "USD");
    // A subscription whose billing account and profile the profile does not name: the Azure driver
    // has no credit to read, and the gate names the two keys that declare it.
    let mut unbilled = Profile::load(&lab.s.home).unwrap();
    unbilled.unset("azure.billing_account");
    unbilled.unset("azure.billing_profile");
    let s = common::stado_on(
        lab.s.home.clone(),
        "azure",
        azure_provider(&unbilled).await,
        &lab.fleet,
    );
    unbilled.save(&lab.s.home).unwrap();
    let r = s.create(&request("h1", LOCATION, SIZE)).await;
    assert_eq!(
        error(&r),
        "the Azure credit gate has no balance to read: a real subscription's credit is read from a billing profile of a billing account, and this deployment names none; stado config set azure.billing_account <account id> and stado config set azure.billing_profile <profile id> declare them"
    );
    assert_eq!(r.error.as_ref().unwrap().code(), "refused");
    let mut p = Profile::load(&lab.s.home).unwrap();
    p.set("azure.billing_account", BILLING_ACCOUNT).unwrap();
    p.set("azure.billing_profile", BILLING_PROFILE).unwrap();
    p.save(&lab.s.home).unwrap();
    // No admit_from.
    let mut reg = Registry::load(&lab.s.home).unwrap();
    reg.cloud_hosts.admit_from = None;
    common::save_registry(&lab.s.home, &reg);
    assert!(error(&lab.create("h1").await).starts_with("the registry names no host whose address a cloud host admits (cloud_hosts.admit_from is absent)"));
    reg.cloud_hosts.admit_from = Some(vec!["build-host".into()]);
    common::save_registry(&lab.s.home, &reg);
    // An admit_from host that does not answer.
    lab.fleet
        .update("build-host", |h| h.answers = false)
        .unwrap();
    assert!(error(&lab.create("h1").await)
        .starts_with("the admit_from host build-host did not tell its public address"));
    assert_eq!(lab.resources(), before, "nothing was made");
}

#[tokio::test]
async fn a_policy_deny_answers_at_the_application_security_group_naming_the_assignment() {
    let lab = lab(&[]).await;
    let before = lab.resources();
    lab.azure.deny_policy(
        "Microsoft.Network/applicationSecurityGroups",
        "deny-asg-assignment",
    );
    const POLICY: &str = "/subscriptions/00000000-0000-4000-8000-0000000000a2/providers/Microsoft.Authorization/policyAssignments/deny-asg-assignment";
    let r = lab.create("h1").await;
    // The refusal's template, whole: the application security group stado-cloud-hosts-<location> was
    // not made: … HTTP 403: RequestDisallowedByPolicy … naming the assignment; said once.
    assert_eq!(
        error(&r),
        format!(
            "the application security group stado-cloud-hosts-{LOCATION} was not made: permission denied: put application security group stado-cloud-hosts-{LOCATION}: policy assignment deny-asg-assignment (Deny Microsoft.Network/applicationSecurityGroups; {POLICY}) denied the request: HTTP 403: RequestDisallowedByPolicy: Resource 'stado-cloud-hosts-{LOCATION}' was disallowed by policy. Policy identifiers: '[{{\"policyAssignment\":{{\"name\":\"Deny Microsoft.Network/applicationSecurityGroups\",\"id\":\"{POLICY}\"}},\"policyDefinition\":{{\"name\":\"Not allowed resource types\"}}}}]'. [put application security group stado-cloud-hosts-{LOCATION}]"
        )
    );
    assert_eq!(r.error.as_ref().unwrap().code(), "denied");
    assert_eq!(lab.resources(), before, "nothing is created");
    assert!(!lab.s.home.fleet_key("h1").exists());
}

/// A location whose subnet does not exist is refused naming the subnet, before anything is made:
/// the application security group of the location included. Nothing of the host is made, no key
/// minted, nothing declared.
#[tokio::test]
async fn a_location_without_its_subnet_is_refused_naming_the_subnet_and_leaves_nothing() {
    let lab = lab(&[]).await;
    let before = lab.resources();
    let r = lab.s.create(&request("h1", "northeurope", SIZE)).await;
    let e = error(&r);
    assert!(!r.ok);
    assert!(
        e.contains("/virtualNetworks/stado-net-northeurope/subnets/hosts"),
        "the subnet is named: {e}"
    );
    let left: Vec<(String, String)> = lab
        .resources()
        .into_iter()
        .filter(|x| !before.contains(x))
        .collect();
    assert_eq!(left, vec![], "nothing is left behind: {e}");
    assert!(!e.contains("may stand"), "nothing stands to be named: {e}");
    assert!(!lab.s.home.fleet_key("h1").exists());
    assert!(declared(&lab.s).is_empty());
}

/// A credential Azure does not take is refused naming every credential source stado tries, in order,
/// before anything is made.
#[tokio::test]
async fn a_credential_that_does_not_work_names_every_source_stado_tries() {
    let lab = lab(&[]).await;
    let before = lab.resources();
    let p = Profile::load(&lab.s.home).unwrap();
    let settings = stado::azure::settings(&p, |k| match k {
        "ORCA_AZURE_ACCESS_TOKEN" => Some("not-the-fakes-token".to_string()),
        "ORCA_POLL_INTERVAL" => Some("20ms".to_string()),
        _ => None,
    });
    let provider = orca::of_with("azure", &p.owner(), &settings).await.unwrap();
    let s = common::stado_on(lab.s.home.clone(), "azure", provider, &lab.fleet);
    let r = s.create(&request("h1", LOCATION, SIZE)).await;
    let e = error(&r);
    assert!(
        e.starts_with("the Azure credit balance could not be read: unauthenticated: "),
        "{e}"
    );
    assert!(
        e.ends_with("; stado takes the Azure credential from its environment, trying in this order: ORCA_AZURE_ACCESS_TOKEN (a bearer token); AZURE_CLIENT_SECRET with AZURE_TENANT_ID and AZURE_CLIENT_ID (a service principal); AZURE_FEDERATED_TOKEN_FILE with AZURE_TENANT_ID and AZURE_CLIENT_ID (a workload identity); a managed identity (IDENTITY_ENDPOINT or MSI_ENDPOINT, else the metadata service of the Azure VM stado runs on); the Azure CLI (az login); ORCA_AZURE_CREDENTIAL picks one of them"),
        "{e}"
    );
    assert!(!e.contains("not-the-fakes-token"), "never the token: {e}");
    assert_eq!(lab.resources(), before, "nothing was made");
}

/// A 403 for the next PUT whose path holds `path`.
fn deny_next_put(lab: &Lab, path: &str) {
    lab.azure.control().inject(Rule::new(
        Some(axum::http::Method::PUT),
        path,
        Fault::Status {
            status: 403,
            body: serde_json::json!({"error": {"code": "AuthorizationFailed", "message": "The client does not have authorization to perform this action."}}),
            headers: Vec::new(),
        },
        1,
    ));
}

/// A deny after the application security group was made (the subnet's own security group's rule, a
/// declared host's readmission) does not say the group was not made.
#[tokio::test]
async fn a_deny_after_the_application_security_group_does_not_say_it_was_not_made() {
    let lab = lab(&[]).await;
    let asg = (
        "Microsoft.Network/applicationSecurityGroups".to_string(),
        format!("stado-cloud-hosts-{LOCATION}"),
    );
    deny_next_put(
        &lab,
        "/networkSecurityGroups/hosts-nsg/securityRules/stado-cloud-hosts",
    );
    let r = lab.create("h1").await;
    let e = error(&r);
    assert_eq!(r.error.as_ref().unwrap().code(), "denied");
    assert_eq!(
        e,
        format!(
            "admitting the fleet's addresses on SSH in {LOCATION} failed: permission denied: the rule stado-cloud-hosts of security group /subscriptions/{SUBSCRIPTION}/resourceGroups/{RESOURCE_GROUP}/providers/Microsoft.Network/networkSecurityGroups/hosts-nsg was not written: put security rule stado-cloud-hosts: AuthorizationFailed: The client does not have authorization to perform this action. [put security rule stado-cloud-hosts]; the application security group stado-cloud-hosts-{LOCATION} may stand: an admission makes it first, and stado keeps it (one per location, never deleted)"
        )
    );
    assert!(
        lab.resources().contains(&asg),
        "the group was made, and named"
    );
    assert!(declared(&lab.s).is_empty());

    assert!(lab.create("h1").await.ok);
    deny_next_put(&lab, "/networkSecurityGroups/h1-nsg/securityRules/");
    let r = lab.create("h2").await;
    assert_eq!(r.error.as_ref().unwrap().code(), "denied");
    assert_eq!(
        error(&r),
        format!(
            "admitting the fleet's addresses on SSH in {LOCATION} failed: permission denied: the rule orca-ssh of security group h1-nsg was not written: put security rule: AuthorizationFailed: The client does not have authorization to perform this action. [put security rule]"
        )
    );
    assert_eq!(declared_names(&lab.s), vec!["h1".to_string()]);
}

#[tokio::test]
async fn a_failure_after_the_address_security_group_and_interface_leaves_nothing_behind() {
    let lab = lab(&[]).await;
    let r = lab.create("h0").await;
    assert!(r.ok, "{:?}", r.error);
    let before = lab.resources();
    // The VM is refused by policy after its address, security group and interface were made.
    lab.azure
        .deny_policy("Microsoft.Compute/virtualMachines", "deny-vm-assignment");
    let e = error(&lab.create("h1").await);
    assert!(e.starts_with("cloud host h1 was not made: "), "{e}");
    assert!(e.contains("deny-vm-assignment"), "{e}");
    assert_eq!(
        lab.resources(),
        before,
        "the address, security group and interface were removed"
    );
    assert!(!lab.s.home.fleet_key("h1").exists());
    lab.azure.clear_policies();
    // An allocation failure of the VM itself: a failed VM, removed with the rest.
    lab.azure
        .fail_allocation(SIZE, LOCATION, "AllocationFailed");
    let r = lab.create("h1").await;
    assert!(!r.ok);
    assert_eq!(lab.resources(), before, "{}", error(&r));
    assert_eq!(declared_names(&lab.s), vec!["h0".to_string()]);
}

/// Step 6 fails at the VM (a policy deny) after the address, security group and interface were made,
/// and the interface cannot be removed (a delete lock, which keeps the security group and the address
/// attached to it): the failure names each of them, and Azure holds those and nothing else of the host.
#[tokio::test]
async fn a_step_six_failure_that_leaves_something_behind_names_it() {
    let lab = lab(&[]).await;
    let before = lab.resources();
    lab.azure
        .deny_policy("Microsoft.Compute/virtualMachines", "deny-vm-assignment");
    lab.azure.refuse_delete("h1-nic");
    let r = lab.create("h1").await;
    let e = error(&r);
    assert_eq!(r.error.as_ref().unwrap().code(), "leftovers", "{e}");
    assert!(e.starts_with("cloud host h1 was not made: "), "{e}");
    assert!(e.contains("deny-vm-assignment"), "{e}");
    // The interface is locked, and the security group and the address stay attached to it.
    let (_, left) = e
        .split_once("; could not remove: ")
        .unwrap_or_else(|| panic!("{e}"));
    assert!(
        left.starts_with("interface h1-nic (delete interface h1-nic: HTTP 409: ScopeLocked: "),
        "{left}"
    );
    assert!(left.contains("), security group h1-nsg (delete security group h1-nsg: HTTP 400: InUseNetworkSecurityGroupCannotBeDeleted: "), "{left}");
    assert!(left.contains("), public IP h1-ip (delete public IP h1-ip: HTTP 400: PublicIPAddressCannotBeDeleted: "), "{left}");
    let step = r.steps.last().unwrap();
    assert_eq!((step.step, step.ok), (6, false));
    let left: Vec<_> = lab
        .resources()
        .into_iter()
        .filter(|r| !before.contains(r) && !r.0.contains("applicationSecurityGroups"))
        .collect();
    let held = |t: &str, n: &str| (format!("Microsoft.Network/{t}"), n.to_string());
    assert_eq!(
        left,
        vec![
            held("networkInterfaces", "h1-nic"),
            held("networkSecurityGroups", "h1-nsg"),
            held("publicIPAddresses", "h1-ip"),
        ]
    );
    assert!(!lab.s.home.fleet_key("h1").exists());
    // Azure still holds pieces of the host: it stays declared, for delete, list and reap.
    assert_still_creating(&lab, "h1", &e);
}

/// The host `name` is declared `creating` after a create that failed with `e`, which says so.
fn assert_still_creating(lab: &Lab, name: &str, e: &str) {
    assert!(
        e.ends_with(&format!("; {name} stays declared (creating): stado cloud host delete {name} removes what Azure may hold of it")),
        "{e}"
    );
    assert_eq!(declared(&lab.s), vec![(name.to_string(), String::new())]);
    let decl = Registry::load(&lab.s.home)
        .unwrap()
        .target(name)
        .unwrap()
        .cloud
        .clone()
        .unwrap();
    assert_eq!(decl.state, stado::registry::CloudState::Creating);
}

/// No stock (the VM's allocation fails) while the interface cannot be removed (a delete lock): the
/// driver answers no stock naming what its clean-up could not remove, and stado says so instead of
/// claiming that nothing was left behind.
#[tokio::test]
async fn no_stock_whose_clean_up_left_something_names_it() {
    let lab = lab(&[]).await;
    lab.azure
        .fail_allocation(SIZE, LOCATION, "AllocationFailed");
    lab.azure.refuse_delete("h1-nic");
    let r = lab.create("h1").await;
    let e = error(&r);
    assert_eq!(r.error.as_ref().unwrap().code(), "no_stock", "{e}");
    assert!(
        e.starts_with(&format!(
            "Azure has no {SIZE} to give in {LOCATION} right now: "
        )),
        "{e}"
    );
    assert!(!e.contains("nothing was left behind"), "{e}");
    let (_, left) = e
        .split_once("the clean-up could not remove: ")
        .unwrap_or_else(|| panic!("{e}"));
    assert!(left.contains("interface h1-nic ("), "{e}");
    // What the message names is what Azure still holds of the host.
    let held = lab.host_resources("h1");
    assert!(!held.is_empty());
    for (_, name) in &held {
        assert!(
            left.contains(&format!(" {name} ")) || left.contains(&format!(" {name},")),
            "{name} is not named: {e}"
        );
    }
    assert!(!lab.s.home.fleet_key("h1").exists());
    assert_still_creating(&lab, "h1", &e);
    // list shows it, its failed VM found by its name; once the lock is lifted, delete removes that
    // VM and what it holds, then the declaration.
    let l = lab.s.list().await.unwrap();
    assert_eq!(
        (
            l.hosts[0].name.as_str(),
            l.hosts[0].creating,
            l.hosts[0].vm_id.as_str()
        ),
        ("h1", true, "h1")
    );
    lab.azure.allow_delete("h1-nic");
    let d = lab.s.delete("h1").await.unwrap();
    assert_eq!(d.vm_id, "h1");
    assert_eq!(lab.host_resources("h1"), vec![], "nothing of h1 stands");
    assert!(declared(&lab.s).is_empty());
}

/// The pieces a host is made of before its VM (public address, security group, interface), by
/// the names the driver gives them.
fn pieces_of(name: &str) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = [
        ("networkInterfaces", "nic"),
        ("networkSecurityGroups", "nsg"),
        ("publicIPAddresses", "ip"),
    ]
    .iter()
    .map(|(t, s)| (format!("Microsoft.Network/{t}"), format!("{name}-{s}")))
    .collect();
    v.sort();
    v
}

/// A create stopped after the address, security group and interface were made and before its VM,
/// whether it failed there and could not remove them (a policy deny of the VM, a delete lock on the
/// interface) or was killed while its VM's `PUT` waited: the host stays declared `creating`,
/// and `stado cloud host delete NAME` removes the pieces by the host's name, then the declaration.
#[tokio::test]
async fn delete_removes_the_pieces_of_a_create_stopped_before_its_vm() {
    let lab = lab(&[]).await;
    let sorted = |mut v: Vec<(String, String)>| {
        v.sort();
        v
    };
    // Failed at the VM, the clean-up refused.
    lab.azure
        .deny_policy("Microsoft.Compute/virtualMachines", "deny-vm-assignment");
    lab.azure.refuse_delete("h1-nic");
    let r = lab.create("h1").await;
    assert_still_creating(&lab, "h1", &error(&r));
    assert_eq!(sorted(lab.host_resources("h1")), pieces_of("h1"));
    lab.azure.clear_policies();
    lab.azure.allow_delete("h1-nic");
    let d = lab.s.delete("h1").await.unwrap();
    assert_eq!((d.vm_id.as_str(), d.deleted), ("", true));
    assert_eq!(lab.host_resources("h1"), vec![], "no piece of h1 stands");
    assert!(declared(&lab.s).is_empty());

    // Killed while its VM's PUT is refused, and retried, for as long as another operation holds
    // the VM's name (which ends soon after, so that nothing waits on it for long).
    lab.azure.hold(
        RESOURCE_GROUP,
        "Microsoft.Compute/virtualMachines",
        "h2",
        std::time::Duration::from_secs(2),
    );
    let s = lab.s.clone();
    let create = tokio::spawn(async move { s.create(&request("h2", LOCATION, SIZE)).await });
    let control = lab.azure.control().clone();
    while control.count(&axum::http::Method::PUT, "/virtualMachines/h2") == 0 {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    create.abort();
    assert!(create.await.unwrap_err().is_cancelled());
    assert_eq!(sorted(lab.host_resources("h2")), pieces_of("h2"));
    assert_eq!(declared(&lab.s), vec![("h2".to_string(), String::new())]);
    lab.s.delete("h2").await.unwrap();
    assert_eq!(lab.host_resources("h2"), vec![], "no piece of h2 stands");
    assert!(declared(&lab.s).is_empty());
}

/// Step 6 fails at the VM (a policy deny) and the driver's clean-up cannot remove the interface
/// once (a delete lock lifted right after), and so neither the security group nor the address
/// attached to it: stado's sweep removes them by the host's name, says so, and the host is not
/// left declared.
#[tokio::test]
async fn the_sweep_of_a_failed_create_removes_the_pieces_its_clean_up_left() {
    let lab = lab(&[]).await;
    lab.azure
        .deny_policy("Microsoft.Compute/virtualMachines", "deny-vm-assignment");
    lab.azure.control().inject(Rule::new(
        Some(axum::http::Method::DELETE),
        "/networkInterfaces/h1-nic",
        Fault::Status {
            status: 409,
            body: serde_json::json!({"error": {"code": "ScopeLocked", "message": "The scope cannot perform delete operation because following scope(s) are locked."}}),
            headers: Vec::new(),
        },
        1,
    ));
    let r = lab.create("h1").await;
    let e = error(&r);
    assert!(e.starts_with("cloud host h1 was not made: "), "{e}");
    assert!(e.contains("; could not remove: interface h1-nic ("), "{e}");
    assert!(
        e.ends_with("; what it had left of that name was removed after all"),
        "{e}"
    );
    assert_eq!(lab.host_resources("h1"), vec![], "no piece of h1 stands");
    assert!(declared(&lab.s).is_empty());
    assert!(!lab.s.home.fleet_key("h1").exists());
}

#[tokio::test]
async fn enrolment_failure_deletes_the_host_and_an_unclean_boot_keeps_it_declared() {
    let lab = lab(&[]).await;
    let before = lab.resources();
    lab.fleet.update("h1", |h| h.answers = false).unwrap();
    let e = error(&lab.create("h1").await);
    assert!(
        e.starts_with("cloud host h1 could not be enrolled: "),
        "{e}"
    );
    assert!(
        e.ends_with("; it was deleted again, since nothing would return it"),
        "{e}"
    );
    let after: Vec<_> = lab
        .resources()
        .into_iter()
        .filter(|(t, _)| !t.contains("applicationSecurityGroups"))
        .collect();
    let was: Vec<_> = before
        .into_iter()
        .filter(|(t, _)| !t.contains("applicationSecurityGroups"))
        .collect();
    assert_eq!(
        after, was,
        "the VM, its disk, interface, security group and address are gone"
    );
    lab.fleet
        .update("h2", |h| h.first_boot = FirstBoot::Error)
        .unwrap();
    let e = error(&lab.create("h2").await);
    assert!(
        e.contains("see /var/log/cloud-init-output.log on the host"),
        "{e}"
    );
    assert_eq!(declared_names(&lab.s), vec!["h2".to_string()]);
    assert_eq!(lab.vms(), vec!["h2".to_string()]);
}

#[tokio::test]
async fn readmission_list_delete_and_reap() {
    let lab = lab(&[]).await;
    assert!(lab.create("h1").await.ok);
    lab.fleet
        .update("build-host", |h| h.egress = Some("203.0.113.250".into()))
        .unwrap();
    let r = lab.create("h2").await;
    assert!(r.ok, "{:?}", r.error);
    assert_eq!(r.admission[0].readmitted, vec!["h1".to_string()]);
    let nsg = lab.azure.nsg_rules(RESOURCE_GROUP, "h1-nsg");
    let text = serde_json::to_string(&nsg).unwrap();
    assert!(
        text.contains("203.0.113.250"),
        "h1's own security group admits the new address: {text}"
    );

    // List: an absent VM (deleted outside stado) and a running one.
    lab.s.provider.delete(&lab.vm_id("h1")).await.unwrap();
    let l = lab.s.list().await.unwrap();
    let states: Vec<(&str, &str)> = l
        .hosts
        .iter()
        .map(|h| (h.name.as_str(), h.state.as_str()))
        .collect();
    assert_eq!(states, [("h1", "absent"), ("h2", "running")]);
    assert_eq!(l.running, 1);
    lab.s.delete("h1").await.unwrap();

    // Delete with a resource Azure keeps: the entry stays, and deleting again retries.
    lab.azure.refuse_delete("h2-nsg");
    let e = lab.s.delete("h2").await.unwrap_err();
    assert!(
        e.message()
            .starts_with("h2 is still registered because Azure did not release everything: "),
        "{e}"
    );
    assert!(e.message().contains("security group h2-nsg"), "{e}");
    assert_eq!(
        lab.host_resources("h2"),
        vec![(
            "Microsoft.Network/networkSecurityGroups".to_string(),
            "h2-nsg".to_string()
        )]
    );
    assert_eq!(declared_names(&lab.s), vec!["h2".to_string()]);
    lab.azure.allow_delete("h2-nsg");
    lab.s.delete("h2").await.unwrap();
    assert!(lab.host_resources("h2").is_empty());
    assert!(declared(&lab.s).is_empty());

    // Reap: busy, idle, reapable, unread, and --apply.
    for n in ["r1", "r2", "r3", "r4"] {
        assert!(lab.create(n).await.ok, "{n}");
    }
    lab.fleet.update("r1", |h| h.runs = 1).unwrap();
    lab.fleet.update("r4", |h| h.answers = false).unwrap();
    lab.fleet
        .advance(std::time::Duration::from_secs(40 * 60))
        .unwrap();
    let now = lab.fleet.now();
    lab.fleet
        .update("r2", |h| {
            h.run_area_changed = Some(now - chrono::Duration::minutes(3))
        })
        .unwrap();
    let r = lab.s.reap(true).await.unwrap();
    let v = |n: &str| r.hosts.iter().find(|h| h.name == n).unwrap().clone();
    assert_eq!(v("r1").verdict, Verdict::Busy);
    assert_eq!(v("r2").verdict, Verdict::Idle);
    assert_eq!(
        (v("r3").verdict, v("r3").action),
        (Verdict::Reapable, Some(stado::reap::Action::Reaped))
    );
    assert_eq!(v("r4").verdict, Verdict::Unread);
    assert!(
        lab.host_resources("r3").is_empty(),
        "reaped as delete deletes"
    );
    assert_eq!(declared_names(&lab.s), vec!["r1", "r2", "r4"]);
}

/// Another team's VM in the same subnet (made through the Azure driver under another owner): its
/// interface, security group and VM are left exactly as they were by create, readmission, reap and
/// delete, and so is the other team's rule on the subnet's security group.
#[tokio::test]
async fn every_other_interface_in_the_subnet_is_left_as_it_was() {
    let lab = lab(&[("team-a", 100)]).await;
    let p = Profile::load(&lab.s.home).unwrap();
    let settings = stado::azure::settings(&p, |k| match k {
        "ORCA_AZURE_ACCESS_TOKEN" => Some(TOKEN.to_string()),
        "ORCA_POLL_INTERVAL" => Some("20ms".to_string()),
        _ => None,
    });
    let team = orca::of_with("azure", "team-b", &settings).await.unwrap();
    let spec = orca::MachineSpec::new("other", SIZE, LOCATION, "team-b").with_ssh_key(
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHd0yP6xyD4g5ZrOX3nCwqZt1mTx6cVv9d4cN5f2a1bQ team-b",
    );
    assert!(matches!(
        team.create(&spec).await.unwrap(),
        orca::Created::Machine(_)
    ));
    let theirs = |lab: &Lab| {
        [
            ("Microsoft.Network/networkInterfaces", "other-nic"),
            ("Microsoft.Network/networkSecurityGroups", "other-nsg"),
            ("Microsoft.Network/publicIPAddresses", "other-ip"),
            ("Microsoft.Compute/virtualMachines", "other"),
        ]
        .map(|(t, n)| {
            lab.azure
                .resource(RESOURCE_GROUP, t, n)
                .unwrap_or_else(|| panic!("{t} {n}"))
        })
    };
    let team_rule = |lab: &Lab| {
        lab.azure
            .nsg_rules(RESOURCE_GROUP, "hosts-nsg")
            .into_iter()
            .find(|r| r["name"] == "team-a")
            .unwrap()
    };
    let was = theirs(&lab);
    let rule = team_rule(&lab);
    assert!(
        serde_json::to_string(&was[0])
            .unwrap()
            .contains(&format!("stado-net-{LOCATION}/subnets/hosts")),
        "the other team's interface is in the subnet"
    );
    assert!(lab.create("h1").await.ok);
    assert_eq!(theirs(&lab), was, "after create");
    let r = lab.create("h2").await;
    assert!(r.ok, "{:?}", r.error);
    assert_eq!(r.admission[0].readmitted, vec!["h1".to_string()]);
    assert_eq!(theirs(&lab), was, "after a create that readmitted h1");
    lab.s.reap(false).await.unwrap();
    assert_eq!(theirs(&lab), was, "after reap");
    lab.s.delete("h1").await.unwrap();
    lab.s.delete("h2").await.unwrap();
    assert_eq!(theirs(&lab), was, "after delete");
    assert_eq!(team_rule(&lab), rule);
}

/// Two operators with stado homes of their own in one resource group: the second one's create of a
/// name the first one holds is refused and leaves the first one's host as it was.
#[tokio::test]
async fn a_stado_never_adopts_or_deletes_another_homes_host_of_the_same_name() {
    let a = lab(&[]).await;
    assert!(a.create("h1").await.ok);
    let held = a.host_resources("h1");
    let b = lab_in(a.azure.clone()).await;
    let r = b.create("h1").await;
    let e = error(&r);
    assert!(!r.ok, "b made h1 over a's");
    assert!(
        e.starts_with("a VM named h1 already stands in Azure and is not this stado home's"),
        "{e}"
    );
    assert_eq!(a.host_resources("h1"), held, "a's host is as it was");
    assert!(declared(&b.s).is_empty());
    assert_eq!(declared_names(&a.s), vec!["h1".to_string()]);
    assert!(b.create("h2").await.ok, "{}", error(&b.create("h2").await));
    b.s.delete("h2").await.unwrap();
    a.s.delete("h1").await.unwrap();
    assert!(a.host_resources("h1").is_empty());
}

/// A host deleted outside stado whose name another home then takes: the VM of that id is no longer
/// this home's. The readmission of declared hosts reports it absent and leaves it alone, so this
/// home's creates go on (another home's VM is never readmitted, nor its firewall touched).
#[tokio::test]
async fn a_declared_host_whose_name_another_home_took_does_not_stop_creates() {
    let a = lab(&[]).await;
    assert!(a.create("h1").await.ok);
    a.s.provider.delete(&a.vm_id("h1")).await.unwrap();
    let b = lab_in(a.azure.clone()).await;
    assert!(b.create("h1").await.ok, "{}", error(&b.create("h1").await));
    let theirs = a.host_resources("h1");
    let r = a.create("h2").await;
    assert!(r.ok, "{}", error(&r));
    assert_eq!(a.host_resources("h1"), theirs, "b's host is as it was");
    a.s.delete("h2").await.unwrap();
    b.s.delete("h1").await.unwrap();
}

/// Faults on every call, over and over: a schedule for the next `requests` requests to the fake (of
/// any method, on any path), each one served as it is, answered 503 or 429 (with `Retry-After: 0`),
/// or served and its answer dropped, about one in three faulty, in an order drawn from `seed`.
fn faults_on_every_call(control: &orca_fakes::control::Control, seed: u64, requests: u32) {
    let status = |status: u16, code: &str| Fault::Status {
        status,
        body: serde_json::json!({"error": {"code": code, "message": "injected"}}),
        headers: vec![("Retry-After".into(), "0".into())],
    };
    let mut x = seed;
    let mut passes = 0;
    for _ in 0..requests {
        // A linear congruential generator: the same schedule on every run.
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let fault = match (x >> 33) % 9 {
            0 => status(503, "ServiceUnavailable"),
            1 => status(429, "TooManyRequests"),
            2 => Fault::DropAnswer,
            _ => {
                passes += 1;
                continue;
            }
        };
        if passes > 0 {
            control.inject(Rule::new(
                None,
                "",
                Fault::Latency(std::time::Duration::ZERO),
                passes,
            ));
            passes = 0;
        }
        control.inject(Rule::new(None, "", fault, 1));
    }
}

impl Lab {
    /// Resources of the resource group beyond `base` that belong to no declared host (application
    /// security groups aside: they are shared and kept).
    fn leaked(&self, base: &[(String, String)]) -> Vec<(String, String)> {
        let declared = declared_names(&self.s);
        self.resources()
            .into_iter()
            .filter(|r| !base.contains(r) && !r.0.contains("applicationSecurityGroups"))
            .filter(|(_, n)| {
                !declared
                    .iter()
                    .any(|d| n == d || n.starts_with(&format!("{d}-")))
            })
            .collect()
    }

    /// The registry matches Azure and nothing leaked.
    fn check(&self, base: &[(String, String)], after: &str) {
        assert_eq!(declared_names(&self.s), self.vms(), "after {after}");
        let leaked = self.leaked(base);
        assert!(leaked.is_empty(), "after {after}: leaked {leaked:?}");
    }
}

/// Transient errors (503, 429) and dropped answers on every Azure call, all along: hosts are created
/// and deleted, most creates and every delete succeed, nothing leaks, and the registry matches Azure
/// after every command.
#[tokio::test]
async fn a_fault_run_on_azure_leaks_nothing() {
    let lab = lab(&[]).await;
    let base: Vec<_> = lab.resources();
    let control = lab.azure.control().clone();
    let served = control.requests();
    // Enough for the whole run (it takes about 350 requests).
    faults_on_every_call(&control, 7, 20_000);
    let mut made = Vec::new();
    let mut created = 0;
    let rounds = 6;
    for round in 0..rounds {
        let name = format!("f{round}");
        let r = lab.create(&name).await;
        lab.check(&base, &format!("create {name}: {:?}", r.error));
        if r.ok {
            created += 1;
            made.push(name);
        }
        if round % 2 == 1 && !made.is_empty() {
            let victim = made.remove(0);
            let d = lab.s.delete(&victim).await;
            assert!(d.is_ok(), "delete {victim}: {d:?}");
            lab.check(&base, &format!("delete {victim}"));
        }
    }
    assert!(
        created * 2 > rounds,
        "most creates succeed: {created} of {rounds}"
    );
    for n in made {
        let d = lab.s.delete(&n).await;
        assert!(d.is_ok(), "delete {n}: {d:?}");
        lab.check(&base, &format!("delete {n}"));
    }
    let calls = control.requests() - served;
    let faulty = control
        .log()
        .iter()
        .skip(usize::try_from(served).unwrap())
        .filter(|l| l.status == 503 || l.status == 429)
        .count();
    control.clear_faults();
    assert!(
        faulty * 10 > usize::try_from(calls).unwrap(),
        "faults all along: {faulty} of {calls} calls answered 503 or 429"
    );
    assert!(declared(&lab.s).is_empty());
    let left: Vec<_> = lab
        .resources()
        .into_iter()
        .filter(|r| !base.contains(r) && !r.0.contains("applicationSecurityGroups"))
        .collect();
    assert!(left.is_empty(), "nothing leaked: {left:?}");
}

/// A target identifier longer than the 58 characters Azure's driver takes (its resources' names add
/// a suffix to the VM's) is refused at step 1, before any call to the cloud: nothing is priced,
/// admitted, minted or declared, so nothing is left that delete could not remove.
#[tokio::test]
async fn a_name_longer_than_azure_takes_is_refused_before_any_call() {
    let lab = lab(&[]).await;
    let before = lab.resources();
    let calls = lab.azure.control().requests();
    let name = "h".repeat(60);
    let r = lab.create(&name).await;
    assert_eq!(r.error.as_ref().unwrap().code(), "refused");
    assert_eq!(
        error(&r),
        format!("'{name}' is 60 characters long: a cloud host's name is at most 58 on Azure (the names of its VM's pieces add a suffix to it)")
    );
    assert_eq!(r.steps.len(), 1);
    assert_eq!(lab.azure.control().requests(), calls, "no call to Azure");
    assert_eq!(lab.resources(), before);
    assert!(declared(&lab.s).is_empty());
    assert!(!lab.s.home.fleet_key(&name).exists());
    // 58 is taken.
    let r = lab.create(&"h".repeat(58)).await;
    assert!(r.ok, "{:?}", r.error);
}

/// A create the driver refuses before any call (an image name it does not take: `InvalidSpec`,
/// which made nothing) drops the host's declaration even when the pool cannot be read afterwards:
/// nothing of the name can stand, so no sweep is needed to know it.
#[tokio::test]
async fn a_create_refused_before_any_call_leaves_no_declaration_even_when_azure_cannot_be_read() {
    let lab = lab(&[]).await;
    let mut p = Profile::load(&lab.s.home).unwrap();
    // The profile takes four parts; the driver refuses '+' in an image name before any call.
    p.set("azure.image_urn", "Canonical:ubuntu+24:server:latest")
        .unwrap();
    p.save(&lab.s.home).unwrap();
    // Every read of the VM's name fails from now on.
    lab.azure.control().inject(Rule::new(
        Some(axum::http::Method::GET),
        "/virtualMachines/h1",
        Fault::Status {
            status: 500,
            body: serde_json::json!({"error": {"code": "InternalServerError", "message": "down"}}),
            headers: Vec::new(),
        },
        10_000,
    ));
    let r = lab.create("h1").await;
    let e = error(&r);
    assert!(e.starts_with("cloud host h1 was not made: "), "{e}");
    assert!(!e.contains("stays declared"), "{e}");
    assert!(declared(&lab.s).is_empty(), "{e}");
    assert!(!lab.s.home.fleet_key("h1").exists());
    assert_eq!(lab.vms(), Vec::<String>::new());
}

/// A host an older stado declared `creating` under a name longer than Azure takes (its create was
/// refused by the driver, which refuses to look the name up too) is deleted without asking Azure.
#[tokio::test]
async fn a_creating_host_of_a_name_longer_than_azure_takes_is_deleted() {
    let lab = lab(&[]).await;
    let name = "h".repeat(60);
    let mut reg = Registry::load(&lab.s.home).unwrap();
    let mut t = stado::registry::Target::new(&name, "");
    t.cloud = Some(stado::registry::CloudDecl {
        provider: "azure".into(),
        location: LOCATION.into(),
        size: SIZE.into(),
        disk_gb: 64,
        hourly_usd: 0.05,
        priced_in: LOCATION.into(),
        idle_minutes: 30,
        address: String::new(),
        vm_id: String::new(),
        created_at: chrono::Utc::now(),
        state: stado::registry::CloudState::Creating,
    });
    reg.put_target(t);
    common::save_registry(&lab.s.home, &reg);
    let d = lab.s.delete(&name).await.unwrap();
    assert!(d.deleted);
    assert!(declared(&lab.s).is_empty());
}

/// A price lookup that fails passingly (Retail Prices answering 503) says so, and that it may pass
/// when tried again: it is no refusal of the size, which only an answer that the size has no price
/// makes.
#[tokio::test]
async fn a_price_lookup_that_fails_passingly_is_no_refusal_of_the_size() {
    let lab = lab(&[]).await;
    let before = lab.resources();
    lab.azure.control().inject(Rule::new(
        Some(axum::http::Method::GET),
        "/api/retail/prices",
        Fault::Status {
            status: 503,
            body: serde_json::json!({"Error": {"Code": "ServiceUnavailable", "Message": "try later"}}),
            headers: vec![("Retry-After".into(), "0".into())],
        },
        10_000,
    ));
    let r = lab.create("h1").await;
    let e = error(&r);
    assert!(!e.contains("has no on-demand price"), "{e}");
    assert!(
        e.starts_with(&format!(
            "the price of {SIZE} in {LOCATION} could not be read from Azure (Retail Prices): "
        )),
        "{e}"
    );
    assert!(e.ends_with("; this may pass when tried again"), "{e}");
    assert_eq!(r.error.as_ref().unwrap().code(), "unavailable");
    assert_eq!(lab.resources(), before);
    assert!(declared(&lab.s).is_empty());
}
