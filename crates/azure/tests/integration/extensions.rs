//! The extensions through `dyn Provider` against the fake Azure Resource Manager: label changes with
//! the Tags API (a concurrent change is kept), SSH admission (generic group names, the first free
//! priority, every other rule untouched, re-admission of machines, policy denies) and the credit
//! balance of a billing profile.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use orca_fakes::azure::{RESOURCE_GROUP, SUBSCRIPTION, TOKEN};
use orca_fakes::{Fault, Rule};
use orca_machines::labels::Labels;
use orca_machines::{Error, ErrorKind, MachineSpec, Provider};

fn spec(name: &str) -> MachineSpec {
    MachineSpec::new(name, AMD, LOCATION, "lab")
}

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[tokio::test]
async fn labels_change_through_dyn_provider_and_a_concurrent_change_is_kept() {
    let f = fake().await;
    let p: Arc<dyn Provider> = Arc::new(provider(&f, "shed-1").await);
    let m = p
        .create(&spec("shed-a").with_label("shed-state", "creating"))
        .await
        .unwrap()
        .machine()
        .unwrap();
    let ext = p.machine_labels().expect("the azure driver changes labels");
    let after = ext
        .set_labels(&m.id, &labels(&[("shed-state", "ready")]), &[])
        .await
        .unwrap();
    assert_eq!(after.labels["shed-state"], "ready");
    assert_eq!(after.labels["orca-owner"], "shed-1");

    // Another writer tags the VM while this one's change is on its way: both changes stay.
    f.control().inject(Rule::new(
        Some("PATCH".parse().unwrap()),
        "/providers/Microsoft.Resources/tags/default",
        Fault::Latency(Duration::from_millis(300)),
        1,
    ));
    let tags_url = format!(
        "{}/subscriptions/{SUBSCRIPTION}/resourceGroups/{RESOURCE_GROUP}/providers/Microsoft.Compute/virtualMachines/shed-a/providers/Microsoft.Resources/tags/default?api-version=2021-04-01",
        f.url()
    );
    let other = async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let r = reqwest::Client::new()
            .patch(&tags_url)
            .bearer_auth(TOKEN)
            .json(&serde_json::json!({"operation": "Merge", "properties": {"tags": {"cost-centre": "42"}}}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    };
    let set = labels(&[("shed-state", "deleting")]);
    let remove = ["nope".to_string()];
    let (mine, ()) = tokio::join!(ext.set_labels(&m.id, &set, &remove), other);
    mine.unwrap();
    let read = p.machine(&m.id).await.unwrap().unwrap();
    assert_eq!(read.labels["shed-state"], "deleting");
    assert_eq!(
        read.labels.get("cost-centre").map(String::as_str),
        Some("42"),
        "the other writer's tag was lost: {:?}",
        read.labels
    );
    // Removal by name; orca's own tags stay.
    let after = ext
        .set_labels(&m.id, &Labels::new(), &["shed-state".to_string()])
        .await
        .unwrap();
    assert!(
        !after.labels.contains_key("shed-state"),
        "{:?}",
        after.labels
    );
    assert_eq!(after.labels["orca-pool"], "lab");
    assert_eq!(after.labels["cost-centre"], "42");
    // Another owner, an unknown machine, a reserved key.
    let q = provider(&f, "shed-2").await;
    let e = q
        .set_labels(&m.id, &labels(&[("x", "y")]), &[])
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotOwned);
    use orca_machines::MachineLabels;
    let e = ext
        .set_labels("nope-vm", &labels(&[("x", "y")]), &[])
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound);
    let n = f.control().requests();
    let e = ext
        .set_labels(&m.id, &labels(&[("orca-pool", "other")]), &[])
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidSpec);
    assert_eq!(f.control().requests(), n, "refused before any call");
}

#[tokio::test]
async fn admission_takes_the_first_free_priority_touches_no_other_rule_and_readmits_machines() {
    let f = fake().await;
    f.add_nsg(
        RESOURCE_GROUP,
        "hosts-nsg",
        LOCATION,
        &[
            ("https", 100),
            ("vpn", 101),
            ("monitoring", 102),
            ("dns", 104),
        ],
    );
    f.add_subnet(
        RESOURCE_GROUP,
        &format!("{VNET}-{LOCATION}"),
        LOCATION,
        SUBNET,
        Some("hosts-nsg"),
    );
    let before = f.nsg_rules(RESOURCE_GROUP, "hosts-nsg");
    let p: Arc<dyn Provider> = Arc::new(provider(&f, "stado").await);
    let adm = p.ssh_admission().expect("the azure driver admits");
    let sources = vec!["198.51.100.4".to_string(), "203.0.113.0/28".to_string()];
    let a = adm
        .admit_ssh("fleet-hosts", LOCATION, &sources, &[])
        .await
        .unwrap();
    assert!(
        a.group
            .ends_with("/applicationSecurityGroups/fleet-hosts-westeurope"),
        "{}",
        a.group
    );
    let rule = a.rule.clone().expect("the subnet has a security group");
    assert_eq!((rule.name.as_str(), rule.priority), ("fleet-hosts", 103));
    assert!(rule.security_group.ends_with("/hosts-nsg"), "{rule:?}");
    let after = f.nsg_rules(RESOURCE_GROUP, "hosts-nsg");
    assert_eq!(after.len(), before.len() + 1);
    for old in &before {
        assert!(after.contains(old), "rule {} changed", old["name"]);
    }
    let new = after.iter().find(|r| r["name"] == "fleet-hosts").unwrap();
    let np = &new["properties"];
    assert_eq!(np["priority"], 103);
    assert_eq!(np["protocol"], "Tcp");
    assert_eq!(np["destinationPortRange"], "22");
    assert_eq!(
        (np["direction"].as_str(), np["access"].as_str()),
        (Some("Inbound"), Some("Allow"))
    );
    assert_eq!(np["sourceAddressPrefixes"], serde_json::json!(sources));
    assert_eq!(
        np["destinationApplicationSecurityGroups"][0]["id"],
        a.group.as_str()
    );
    assert!(
        np.get("destinationAddressPrefix").is_none(),
        "to the group only"
    );

    // A host made in the group joins it; with its own sources on its own security group.
    let host = p
        .create(
            &spec("host-1")
                .with_admission_group("fleet-hosts")
                .with_ssh_sources(sources.clone()),
        )
        .await
        .unwrap()
        .machine()
        .unwrap();
    let nic = f
        .resource(
            RESOURCE_GROUP,
            "Microsoft.Network/networkInterfaces",
            "host-1-nic",
        )
        .unwrap();
    assert_eq!(
        nic["properties"]["ipConfigurations"][0]["properties"]["applicationSecurityGroups"][0]
            ["id"],
        a.group.as_str()
    );
    // An operator freed priority 100 meanwhile: the admission keeps its own rule's priority, admits
    // the new addresses, and readmits the host (and names the one that is not there).
    f.add_nsg(
        RESOURCE_GROUP,
        "hosts-nsg",
        LOCATION,
        &[
            ("vpn", 101),
            ("monitoring", 102),
            ("fleet-hosts", 103),
            ("dns", 104),
        ],
    );
    let again = adm
        .admit_ssh(
            "fleet-hosts",
            LOCATION,
            &["192.0.2.9".to_string()],
            &[host.id.clone(), "host-gone".to_string()],
        )
        .await
        .unwrap();
    assert_eq!(
        again.rule.unwrap().priority,
        103,
        "an existing rule keeps its priority although 100 is free"
    );
    assert_eq!(again.readmitted, vec![host.id.clone()]);
    assert_eq!(again.missing, vec!["host-gone".to_string()]);
    let own = f.nsg_rules(RESOURCE_GROUP, "host-1-nsg");
    assert_eq!(own.len(), 1, "{own:?}");
    assert_eq!(
        own[0]["properties"]["sourceAddressPrefixes"],
        serde_json::json!(["192.0.2.9"])
    );
    let rules = f.nsg_rules(RESOURCE_GROUP, "hosts-nsg");
    let fleet = rules.iter().find(|r| r["name"] == "fleet-hosts").unwrap();
    assert_eq!(
        fleet["properties"]["sourceAddressPrefixes"],
        serde_json::json!(["192.0.2.9"])
    );

    // Invalid addresses are refused before any call; another owner cannot readmit the host.
    let n = f.control().requests();
    for bad in [
        vec![],
        vec!["not-an-ip".to_string()],
        vec!["1.2.3.4/33".to_string()],
    ] {
        let e = adm
            .admit_ssh("fleet-hosts", LOCATION, &bad, &[])
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidSpec, "{bad:?}");
    }
    let e = adm
        .admit_ssh("Fleet", LOCATION, &sources, &[])
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidSpec);
    assert_eq!(f.control().requests(), n);
    let q = provider(&f, "someone-else").await;
    use orca_machines::SshAdmission;
    let e = q
        .admit_ssh(
            "fleet-hosts",
            LOCATION,
            &sources,
            std::slice::from_ref(&host.id),
        )
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotOwned);
}

#[tokio::test]
async fn admission_without_a_subnet_group_and_under_a_policy_deny() {
    let f = fake().await;
    f.add_subnet(
        RESOURCE_GROUP,
        &format!("{VNET}-northeurope"),
        "northeurope",
        SUBNET,
        None,
    );
    let p = provider(&f, "stado").await;
    use orca_machines::SshAdmission;
    let a = p
        .admit_ssh("fleet", LOCATION, &["198.51.100.4".into()], &[])
        .await
        .unwrap();
    assert_eq!(a.rule, None);
    assert!(f
        .resource(
            RESOURCE_GROUP,
            "Microsoft.Network/applicationSecurityGroups",
            "fleet-westeurope"
        )
        .is_some());
    // A deny answers at the first resource, naming the assignment; nothing after it is made.
    f.deny_policy("Microsoft.Network/applicationSecurityGroups", "deny-asg");
    let before = f.resources(RESOURCE_GROUP);
    f.control().clear_log();
    let e = p
        .admit_ssh("fleet", "northeurope", &["198.51.100.4".into()], &[])
        .await
        .unwrap_err();
    let s = e.to_string();
    assert_eq!(e.kind(), ErrorKind::PermissionDenied);
    assert!(
        s.contains("the application security group fleet-northeurope was not made")
            && s.contains("deny-asg")
            && s.contains("HTTP 403: RequestDisallowedByPolicy"),
        "{s}"
    );
    assert_eq!(e.code(), Some("RequestDisallowedByPolicy"));
    assert_eq!(f.resources(RESOURCE_GROUP), before, "something was made");
    // The subnet is read first (what the admission needs), then the group's PUT is denied.
    assert_eq!(f.control().requests(), 2, "{:?}", f.control().log());
    assert_eq!(f.control().count(&"PUT".parse().unwrap(), "/"), 1);
    // No name of a front-end is the driver's: the group is the caller's.
    assert!(f
        .resources(RESOURCE_GROUP)
        .iter()
        .all(|(_, n)| !n.contains("stado")));
}

// On tokio's paused clock, as the fake's operations are: the second admission's write then meets
// the first one's 50 ms operation however late a loaded machine runs it (on the wall clock, with 8
// tests at once under load, it sometimes came after the operation had ended: no 409). Azure names
// a pause of 1 s before each poll: polls without pause would never let the paused clock move.
#[tokio::test(start_paused = true)]
async fn two_admissions_at_once_meet_another_operation_in_progress_and_both_succeed() {
    let f = fake().await;
    f.add_nsg(RESOURCE_GROUP, "hosts-nsg", LOCATION, &[("https", 100)]);
    f.add_subnet(
        RESOURCE_GROUP,
        &format!("{VNET}-{LOCATION}"),
        LOCATION,
        SUBNET,
        Some("hosts-nsg"),
    );
    // Operations run for 50 ms: the second writer of the same security group meets 409
    // AnotherOperationInProgress, and waits for the first writer's operation to end.
    f.set_operation_time(std::time::Duration::from_millis(50));
    f.set_poll_pause(std::time::Duration::from_secs(1));
    let a = provider(&f, "stado-a").await;
    let b = provider(&f, "stado-b").await;
    use orca_machines::SshAdmission;
    let src = vec!["198.51.100.4".to_string()];
    let (ra, rb) = tokio::join!(
        a.admit_ssh("fleet", LOCATION, &src, &[]),
        b.admit_ssh("fleet", LOCATION, &src, &[])
    );
    let (ra, rb) = (ra.unwrap(), rb.unwrap());
    assert_eq!(ra.rule, rb.rule);
    let conflicts = f.control().log().iter().filter(|l| l.status == 409).count();
    assert!(
        conflicts > 0,
        "the fake never answered 409: {:?}",
        f.control().log()
    );
    let rules = f.nsg_rules(RESOURCE_GROUP, "hosts-nsg");
    assert_eq!(rules.len(), 2, "{rules:?}");
}

#[tokio::test]
async fn the_credit_balance_is_the_billing_profiles_and_absent_without_one() {
    let f = fake().await;
    f.set_credit(BILLING_ACCOUNT, BILLING_PROFILE, 640.25, "EUR");
    let without: Arc<dyn Provider> = Arc::new(provider(&f, "stado").await);
    assert!(without.credit_balance().is_none());
    let with: Arc<dyn Provider> = Arc::new(
        orca_azure::AzureProvider::new(
            settings(&f)
                .billing(BILLING_ACCOUNT, BILLING_PROFILE)
                .build()
                .unwrap(),
            "stado",
        )
        .await
        .unwrap(),
    );
    let b = with.credit_balance().unwrap().balance().await.unwrap();
    assert_eq!((b.amount, b.currency.as_str()), (640.25, "EUR"));
    // The credit runs low: the next read sees it.
    f.set_credit(BILLING_ACCOUNT, BILLING_PROFILE, 3.5, "EUR");
    let b = with.credit_balance().unwrap().balance().await.unwrap();
    assert_eq!(b.amount, 3.5);
    f.set_credit(BILLING_ACCOUNT, BILLING_PROFILE, 640.25, "EUR");
    let log = f.control().log();
    assert!(
        log.last().unwrap().path.starts_with(&format!(
            "/providers/Microsoft.Billing/billingAccounts/{BILLING_ACCOUNT}/billingProfiles/{BILLING_PROFILE}/providers/Microsoft.Consumption/credits/balanceSummary?api-version=2023-05-01"
        )),
        "{log:?}"
    );
    let other: Arc<dyn Provider> = Arc::new(
        orca_azure::AzureProvider::new(
            settings(&f)
                .billing(BILLING_ACCOUNT, "NOPE-0000")
                .build()
                .unwrap(),
            "stado",
        )
        .await
        .unwrap(),
    );
    let e = other.credit_balance().unwrap().balance().await.unwrap_err();
    assert!(matches!(e, Error::NotFound { .. }), "{e:?}");
}

#[tokio::test]
async fn an_admission_naming_another_owners_machine_is_refused_before_any_change() {
    let f = fake().await;
    f.add_nsg(RESOURCE_GROUP, "hosts-nsg", LOCATION, &[("https", 100)]);
    f.add_subnet(
        RESOURCE_GROUP,
        &format!("{VNET}-{LOCATION}"),
        LOCATION,
        SUBNET,
        Some("hosts-nsg"),
    );
    let a = provider(&f, "stado-a").await;
    let b = provider(&f, "stado-b").await;
    use orca_machines::SshAdmission;
    let src = vec!["198.51.100.4".to_string()];
    b.admit_ssh("fleet", LOCATION, &src, &[]).await.unwrap();
    let mine = b
        .create(&spec("host-b").with_admission_group("fleet"))
        .await
        .unwrap()
        .machine()
        .unwrap();
    let theirs = a.create(&spec("host-a")).await.unwrap().machine().unwrap();
    let resources = f.resources(RESOURCE_GROUP);
    let subnet_rules = f.nsg_rules(RESOURCE_GROUP, "hosts-nsg");
    let own_rules = f.nsg_rules(RESOURCE_GROUP, "host-b-nsg");
    let puts = |f: &orca_fakes::azure::FakeAzure| {
        f.control()
            .log()
            .iter()
            .filter(|l| l.method.as_str() != "GET")
            .count()
    };
    let writes = puts(&f);
    // b's own machine first, then a's: the refusal comes before the group, the subnet's rule or b's
    // own machine's rule is written.
    for group in ["fleet", "fleet-new"] {
        let e = b
            .admit_ssh(
                group,
                LOCATION,
                &["192.0.2.55/32".to_string()],
                &[mine.id.clone(), theirs.id.clone()],
            )
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NotOwned, "{e}");
    }
    assert_eq!(puts(&f), writes, "{:?}", f.control().log());
    assert_eq!(f.resources(RESOURCE_GROUP), resources);
    assert_eq!(f.nsg_rules(RESOURCE_GROUP, "hosts-nsg"), subnet_rules);
    assert_eq!(f.nsg_rules(RESOURCE_GROUP, "host-b-nsg"), own_rules);
}

#[tokio::test]
async fn an_admission_where_the_location_has_no_subnet_makes_nothing() {
    use orca_machines::SshAdmission;
    let f = fake().await;
    let p = provider(&f, "stado-a").await;
    let before = f.resources(RESOURCE_GROUP);
    let e = p
        .admit_ssh("fleet", "northeurope", &["198.51.100.4".to_string()], &[])
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    let s = e.to_string();
    assert!(
        s.contains("the application security group fleet-northeurope was not made"),
        "{s}"
    );
    assert!(
        s.contains("/virtualNetworks/orca-net-northeurope/subnets/hosts"),
        "{s}"
    );
    assert_eq!(f.resources(RESOURCE_GROUP), before, "nothing is made");
}
