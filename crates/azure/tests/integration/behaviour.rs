//! The driver's own behaviour against the fake Azure Resource Manager: what a create makes, clean-up
//! of failed creates, policy denies, delete order and leftovers, listing, lost answers, retries,
//! prices and redaction.

use crate::common;

use common::*;
use orca_fakes::azure::{RESOURCE_GROUP, TOKEN};
use orca_fakes::{Fault, Rule};
use orca_machines::{Created, Error, ErrorKind, MachineSpec, Provider, Status};

const VNET_TYPE: &str = "Microsoft.Network/virtualNetworks";

fn spec(name: &str, size: &str) -> MachineSpec {
    MachineSpec::new(name, size, LOCATION, "lab")
        .with_user_data("#cloud-config\nruncmd: [echo hi]\n")
}

/// Everything in the resource group but the virtual network.
fn stray(f: &orca_fakes::azure::FakeAzure) -> Vec<(String, String)> {
    f.resources(RESOURCE_GROUP)
        .into_iter()
        .filter(|(t, _)| t != VNET_TYPE)
        .collect()
}

fn puts(f: &orca_fakes::azure::FakeAzure) -> Vec<String> {
    f.control()
        .log()
        .into_iter()
        .filter(|l| l.method.as_str() == "PUT")
        .map(|l| l.path)
        .collect()
}

#[tokio::test]
async fn create_makes_the_four_resources_tagged_with_key_custom_data_and_disk_deleted_with_the_vm()
{
    let f = fake().await;
    let p = provider(&f, "stack-1").await;
    let m = p
        .create(&spec("vm-a-x", AMD))
        .await
        .unwrap()
        .machine()
        .unwrap();
    assert_eq!(m.status, Status::Running);
    assert!(!m.address.is_empty(), "no address");
    let mut kinds: Vec<String> = stray(&f)
        .into_iter()
        .map(|(t, n)| format!("{t}/{n}"))
        .collect();
    kinds.sort();
    assert_eq!(
        kinds,
        vec![
            "Microsoft.Compute/disks/vm-a-x-osdisk",
            "Microsoft.Compute/virtualMachines/vm-a-x",
            "Microsoft.Network/networkInterfaces/vm-a-x-nic",
            "Microsoft.Network/networkSecurityGroups/vm-a-x-nsg",
            "Microsoft.Network/publicIPAddresses/vm-a-x-ip",
        ]
    );
    let vm = f
        .resource(
            RESOURCE_GROUP,
            "Microsoft.Compute/virtualMachines",
            "vm-a-x",
        )
        .unwrap();
    assert_eq!(vm["tags"]["orca"], "pool");
    assert_eq!(vm["tags"]["orca-pool"], "lab");
    assert_eq!(vm["tags"]["orca-owner"], "stack-1");
    let p_ = &vm["properties"];
    // The VM owns its disk, interface and (through the interface) its address.
    assert_eq!(p_["storageProfile"]["osDisk"]["deleteOption"], "Delete");
    assert_eq!(
        p_["networkProfile"]["networkInterfaces"][0]["properties"]["deleteOption"],
        "Delete"
    );
    assert_eq!(p_["storageProfile"]["imageReference"]["sku"], "server");
    assert_eq!(
        p_["osProfile"]["linuxConfiguration"]["ssh"]["publicKeys"][0]["keyData"],
        SSH_KEY
    );
    assert_eq!(
        p_["osProfile"]["linuxConfiguration"]["disablePasswordAuthentication"],
        true
    );
    let pip = f
        .resource(
            RESOURCE_GROUP,
            "Microsoft.Network/publicIPAddresses",
            "vm-a-x-ip",
        )
        .unwrap();
    assert_eq!(pip["sku"]["name"], "Standard");
    assert_eq!(pip["properties"]["publicIPAllocationMethod"], "Static");
    assert_eq!(pip["properties"]["deleteOption"], "Delete");
    assert_eq!(pip["properties"]["ipAddress"], m.address.as_str());
    // The facts are Azure's: the address's DNS name (a label scoped to the resource group, so
    // unique), the interface's private address, the VM's creation time.
    assert_eq!(
        pip["properties"]["dnsSettings"]["domainNameLabel"],
        "vm-a-x"
    );
    assert_eq!(
        pip["properties"]["dnsSettings"]["domainNameLabelScope"],
        "ResourceGroupReuse"
    );
    assert_eq!(pip["properties"]["dnsSettings"]["fqdn"], m.fqdn.as_str());
    assert!(
        m.fqdn.starts_with("vm-a-x-") && m.fqdn.ends_with(".westeurope.cloudapp.azure.com"),
        "{}",
        m.fqdn
    );
    assert_eq!(
        vm["properties"]["timeCreated"]
            .as_str()
            .map(|t| t.parse::<orca_machines::Timestamp>().unwrap()),
        m.created_at
    );
    let nsg = f
        .resource(
            RESOURCE_GROUP,
            "Microsoft.Network/networkSecurityGroups",
            "vm-a-x-nsg",
        )
        .unwrap();
    let rules = nsg["properties"]["securityRules"].as_array().unwrap();
    assert_eq!(rules.len(), 1, "{rules:?}");
    assert_eq!(rules[0]["properties"]["destinationPortRange"], "22");
    assert_eq!(rules[0]["properties"]["protocol"], "Tcp");
    assert_eq!(
        rules[0]["properties"]["sourceAddressPrefixes"],
        serde_json::json!(["203.0.113.7/32"])
    );
    let nic = f
        .resource(
            RESOURCE_GROUP,
            "Microsoft.Network/networkInterfaces",
            "vm-a-x-nic",
        )
        .unwrap();
    let subnet = nic["properties"]["ipConfigurations"][0]["properties"]["subnet"]["id"]
        .as_str()
        .unwrap();
    assert_eq!(
        nic["properties"]["ipConfigurations"][0]["properties"]["privateIPAddress"],
        m.private_address.as_str()
    );
    assert!(
        subnet.ends_with("/virtualNetworks/orca-net-westeurope/subnets/hosts"),
        "{subnet}"
    );
    for r in [&pip, &nsg, &nic] {
        assert_eq!(r["tags"]["orca-owner"], "stack-1", "{r}");
    }
    // Custom data went in base64 (the fake, like Azure, never returns it, but keeps it for tests).
    use base64::Engine as _;
    let cd = f
        .custom_data(RESOURCE_GROUP, "vm-a-x")
        .expect("custom data");
    let cd = base64::engine::general_purpose::STANDARD
        .decode(cd)
        .unwrap();
    assert_eq!(
        String::from_utf8(cd).unwrap(),
        spec("vm-a-x", AMD).user_data
    );
    assert!(vm["properties"]["osProfile"]["customData"].is_null());
    let vm_puts: Vec<_> = puts(&f)
        .into_iter()
        .filter(|p| p.contains("virtualMachines"))
        .collect();
    assert_eq!(vm_puts.len(), 1);
}

#[tokio::test]
async fn an_arm64_size_gets_the_arm64_image() {
    let f = fake().await;
    let p = provider(&f, "stack-1").await;
    let m = p
        .create(&spec("arm-a", ARM))
        .await
        .unwrap()
        .machine()
        .unwrap();
    assert_eq!(m.machine_type, ARM);
    let vm = f
        .resource(RESOURCE_GROUP, "Microsoft.Compute/virtualMachines", "arm-a")
        .unwrap();
    assert_eq!(
        vm["properties"]["storageProfile"]["imageReference"]["sku"],
        "server-arm64"
    );
}

#[tokio::test]
async fn a_create_failing_at_the_vm_step_leaves_no_address_interface_or_security_group() {
    let f = fake().await;
    let p = provider(&f, "stack-1").await;
    for code in [
        "AllocationFailed",
        "ZonalAllocationFailed",
        "OverconstrainedAllocationRequest",
    ] {
        f.fail_allocation(AMD, LOCATION, code);
        match p.create(&spec("vm-b", AMD)).await {
            Ok(Created::NoStock {
                machine_type,
                location,
                message,
                left,
            }) => {
                assert_eq!((machine_type.as_str(), location.as_str()), (AMD, LOCATION));
                assert!(message.contains(code), "{message}");
                assert!(left.is_empty(), "{left:?}");
            }
            other => panic!("{code}: {other:?}"),
        }
        assert_eq!(stray(&f), vec![], "after {code}");
        f.restore_stock(AMD, LOCATION);
    }
    // Quota at the VM step: an error, and the network resources are gone too.
    f.exceed_quota(AMD);
    let e = p.create(&spec("vm-b", AMD)).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Quota, "{e}");
    assert_eq!(e.code(), Some("OperationNotAllowed"));
    assert_eq!(stray(&f), vec![]);
    // A size not offered: no stock, refused at the PUT itself.
    f.sku_not_available(ARM, LOCATION);
    assert!(matches!(
        p.create(&spec("vm-c", ARM)).await,
        Ok(Created::NoStock { .. })
    ));
    assert_eq!(stray(&f), vec![]);
}

/// A VM whose own create operation Azure ends `Failed` with a code it marks retryable is no machine
/// to hand back: the create removes it with what it made for it and stays retryable, and the retry
/// makes a new VM (before, everything stayed and the retry adopted the failed VM as a machine).
#[tokio::test]
async fn a_vm_whose_create_fails_retryably_goes_with_what_was_made_for_it() {
    let f = fake().await;
    let p = provider(&f, "stack-1").await;
    for code in [
        "RetryableError",
        "InternalServerError",
        "OperationPreempted",
    ] {
        f.fail_allocation(AMD, LOCATION, code);
        let e = p.create(&spec("vm-r", AMD)).await.unwrap_err();
        assert!(e.is_retryable(), "{code}: {e}");
        assert_eq!(e.code(), Some(code), "{e}");
        assert_eq!(stray(&f), vec![], "after {code}: {e}");
        f.restore_stock(AMD, LOCATION);
    }
    match p.create(&spec("vm-r", AMD)).await {
        Ok(Created::Machine(m)) => assert!(
            !m.cloud_status.to_ascii_lowercase().contains("failed"),
            "{m:?}"
        ),
        other => panic!("the retry gave {other:?}"),
    }
    assert_eq!(stray(&f).len(), 5, "{:?}", stray(&f));
}

#[tokio::test]
async fn a_failed_create_names_what_it_could_not_remove() {
    let f = fake().await;
    let p = provider(&f, "stack-1").await;
    // No stock stays no stock when the clean-up leaves something behind: an
    // autoscaler falls back on Created::NoStock, and the message names what remains.
    f.fail_allocation(AMD, LOCATION, "AllocationFailed");
    f.refuse_delete("vm-d-nsg");
    match p.create(&spec("vm-d", AMD)).await {
        Ok(Created::NoStock {
            machine_type,
            location,
            message,
            left,
        }) => {
            assert_eq!((machine_type.as_str(), location.as_str()), (AMD, LOCATION));
            assert_eq!(left.len(), 1, "{left:?}");
            assert!(left[0].starts_with("security group vm-d-nsg "), "{left:?}");
            assert!(message.contains("Allocation failed"), "{message}");
            assert!(
                message.contains("could not remove: security group vm-d-nsg"),
                "{message}"
            );
            assert!(!message.contains("interface"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        stray(&f),
        vec![(
            "Microsoft.Network/networkSecurityGroups".to_string(),
            "vm-d-nsg".to_string()
        )]
    );
    // Deleting the machine's name removes what remains, as the message says.
    f.allow_delete("vm-d-nsg");
    assert!(p.delete_named("lab", "vm-d").await.unwrap());
    assert_eq!(stray(&f), vec![]);
    f.restore_stock(AMD, LOCATION);

    // A quota stays a quota, naming what remains.
    f.exceed_quota(AMD);
    f.refuse_delete("vm-d-ip");
    let e = p.create(&spec("vm-d", AMD)).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Quota, "{e}");
    assert_eq!(e.code(), Some("OperationNotAllowed"));
    assert!(
        e.to_string()
            .contains("could not remove: public IP vm-d-ip"),
        "{e}"
    );
    assert_eq!(
        stray(&f),
        vec![(
            "Microsoft.Network/publicIPAddresses".to_string(),
            "vm-d-ip".to_string()
        )]
    );

    // Any other failure with leftovers is still Leftovers.
    f.allow_delete("vm-d-ip");
    assert!(p.delete_named("lab", "vm-d").await.unwrap());
    f.deny_policy("Microsoft.Compute/virtualMachines", "deny-vms");
    f.refuse_delete("vm-d-nsg");
    let e = p.create(&spec("vm-d", AMD)).await.unwrap_err();
    let Error::Leftovers { error, left } = &e else {
        panic!("{e:?}")
    };
    assert_eq!(error.kind(), ErrorKind::PermissionDenied);
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(left[0].starts_with("security group vm-d-nsg"), "{left:?}");
}

/// What an earlier failed create could not remove is adopted by the next create of that name;
/// when the VM that create makes fails too, those pieces went only with that VM and are removed
/// with it: only an adopted VM (a machine that stands) keeps what it uses.
#[tokio::test]
async fn a_failed_create_removes_the_leftovers_of_an_earlier_one_it_adopted() {
    let f = fake().await;
    let p = provider(&f, "stack-1").await;
    f.fail_allocation(AMD, LOCATION, "AllocationFailed");
    f.refuse_delete("vm-l-nsg");
    match p.create(&spec("vm-l", AMD)).await {
        Ok(Created::NoStock { message, .. }) => {
            assert!(message.contains("security group vm-l-nsg"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        stray(&f),
        vec![(
            "Microsoft.Network/networkSecurityGroups".to_string(),
            "vm-l-nsg".to_string()
        )]
    );
    f.allow_delete("vm-l-nsg");
    match p.create(&spec("vm-l", AMD)).await {
        Ok(Created::NoStock { message, .. }) => {
            assert!(!message.contains("could not remove"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(stray(&f), vec![]);
}

/// A failed VM that cannot be deleted (its interface is delete-locked, and a VM's delete takes it)
/// keeps its OS disk: the no-stock answer names the disk beside the VM and each network resource,
/// exactly what Azure still holds.
#[tokio::test]
async fn a_failed_vm_that_stands_names_its_os_disk_too() {
    let f = fake().await;
    let p = provider(&f, "stack-1").await;
    f.fail_allocation(AMD, LOCATION, "AllocationFailed");
    f.refuse_delete("vm-e-nic");
    let message = match p.create(&spec("vm-e", AMD)).await {
        Ok(Created::NoStock { message, .. }) => message,
        other => panic!("{other:?}"),
    };
    let (_, left) = message
        .split_once("the clean-up could not remove: ")
        .unwrap_or_else(|| panic!("{message}"));
    let held = stray(&f);
    assert_eq!(held.len(), 5, "{held:?}");
    for (_, name) in &held {
        assert!(
            left.starts_with(&format!("VM {name} ")) || left.contains(&format!(" {name}")),
            "{name} is not named: {message}"
        );
    }
    assert!(left.contains("OS disk vm-e-osdisk"), "{message}");
    // Deleting the machine's name removes it all once the lock is gone.
    f.allow_delete("vm-e-nic");
    assert!(p.delete("vm-e").await.unwrap());
    assert_eq!(stray(&f), vec![]);
}

#[tokio::test]
async fn a_policy_deny_creates_nothing_and_names_the_assignment() {
    let f = fake().await;
    let p = provider(&f, "stack-1").await;
    f.deny_policy("Microsoft.Network/publicIPAddresses", "deny-public-ips");
    let e = p.create(&spec("vm-e", AMD)).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::PermissionDenied, "{e}");
    assert!(e.to_string().contains("deny-public-ips"), "{e}");
    assert_eq!(
        e.code(),
        Some("RequestDisallowedByPolicy"),
        "the cloud's code is kept"
    );
    assert_eq!(
        puts(&f).len(),
        1,
        "the deny answers at the first PUT: {:?}",
        puts(&f)
    );
    assert_eq!(stray(&f), vec![]);
    // A deny of VMs answers at the fourth PUT: what was made before is removed.
    f.clear_policies();
    f.deny_policy("Microsoft.Compute/virtualMachines", "deny-vms");
    let e = p.create(&spec("vm-e", AMD)).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::PermissionDenied, "{e}");
    assert!(e.to_string().contains("deny-vms"), "{e}");
    assert_eq!(stray(&f), vec![]);
}

#[tokio::test]
async fn delete_removes_all_four_resources_in_order_and_retries_what_remains() {
    let f = fake().await;
    let p = provider(&f, "stack-1").await;
    let m = p
        .create(&spec("vm-f", AMD))
        .await
        .unwrap()
        .machine()
        .unwrap();
    f.control().clear_log();
    assert!(p.delete(&m.id).await.unwrap());
    assert_eq!(
        stray(&f),
        vec![],
        "VM, disk, interface, security group and address are gone"
    );
    let deletes: Vec<String> = f
        .control()
        .log()
        .into_iter()
        .filter(|l| l.method.as_str() == "DELETE")
        .map(|l| {
            l.path
                .split('?')
                .next()
                .unwrap()
                .rsplit('/')
                .next()
                .unwrap()
                .to_string()
        })
        .collect();
    // The VM takes its interface, address and disk with it; only its security group is its own.
    assert_eq!(deletes, vec!["vm-f", "vm-f-nsg"]);
    // A machine this provider deleted is believed gone at once: one read of the VM and one of its
    // interface, no waiting for it to show.
    let n = f.control().requests();
    assert!(p.machine(&m.id).await.unwrap().is_none());
    assert_eq!(f.control().requests() - n, 2, "{:?}", f.control().log());

    // A resource that refuses deletion is named; the VM is gone, so deleting by name removes it.
    let m = p
        .create(&spec("vm-g", AMD))
        .await
        .unwrap()
        .machine()
        .unwrap();
    f.refuse_delete("vm-g-nsg");
    let e = p.delete(&m.id).await.unwrap_err();
    let Error::Leftovers { left, .. } = &e else {
        panic!("{e:?}")
    };
    assert_eq!(left.len(), 1);
    assert!(left[0].starts_with("security group vm-g-nsg"), "{left:?}");
    assert!(
        e.to_string()
            .contains(r#"delete_named("lab", "vm-g") removes the rest"#),
        "{e}"
    );
    assert_eq!(
        stray(&f),
        vec![(
            "Microsoft.Network/networkSecurityGroups".to_string(),
            "vm-g-nsg".to_string()
        )]
    );
    assert!(p.machines("lab").await.unwrap().is_empty());
    f.allow_delete("vm-g-nsg");
    assert!(p.delete_named("lab", &m.id).await.unwrap());
    assert_eq!(stray(&f), vec![]);
}

#[tokio::test]
async fn delete_leaves_other_owners_resources_alone() {
    let f = fake().await;
    let a = provider(&f, "stack-a").await;
    let b = provider(&f, "stack-b").await;
    a.create(&spec("vm-h", AMD))
        .await
        .unwrap()
        .machine()
        .unwrap();
    assert_eq!(
        b.delete("vm-h").await.unwrap_err().kind(),
        ErrorKind::NotOwned
    );
    // The same name by another owner is refused, and a's resources stay as they were.
    let e = b.create(&spec("vm-h", AMD)).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::AlreadyExists, "{e}");
    assert_eq!(stray(&f).len(), 5);
    assert_eq!(a.machines("lab").await.unwrap().len(), 1);
}

#[tokio::test]
async fn a_lost_vm_put_answer_makes_one_vm() {
    let f = fake().await;
    let p = provider(&f, "stack-1").await;
    f.lose_next_vm_put_answer();
    let first = p.create(&spec("vm-i", AMD)).await;
    let m = match first {
        Ok(Created::Machine(m)) => m,
        Err(e) if e.is_retryable() => p
            .create(&spec("vm-i", AMD))
            .await
            .unwrap()
            .machine()
            .unwrap(),
        other => panic!("{other:?}"),
    };
    assert_eq!(m.name, "vm-i");
    let vms: Vec<_> = stray(&f)
        .into_iter()
        .filter(|(t, _)| t.ends_with("virtualMachines"))
        .collect();
    assert_eq!(vms.len(), 1);
    assert_eq!(p.machines("lab").await.unwrap().len(), 1);
    // The retried PUT met the VM (412) and took it as its own: this call made it.
    let vm_puts = f
        .control()
        .count(&"PUT".parse().unwrap(), "/virtualMachines/vm-i");
    assert_eq!(vm_puts, 2);
    // A later create of the same spec adopts it: made by an earlier call, not new.
    match p.create(&spec("vm-i", AMD)).await.unwrap() {
        Created::Adopted(again) => assert_eq!(again.id, m.id),
        other => panic!("a repeated create gave {other:?}"),
    }
    assert_eq!(stray(&f).len(), 5);
}

#[tokio::test]
async fn listing_reads_pages_and_each_pool_vms_state_and_maps_power_states() {
    let f = fake().await;
    let p = provider(&f, "stack-1").await;
    let other = provider(&f, "stack-2").await;
    for i in 0..5 {
        p.create(&spec(&format!("vm-l{i}"), AMD)).await.unwrap();
    }
    other.create(&spec("vm-other", AMD)).await.unwrap();
    p.stop("vm-l0").await.unwrap();
    f.set_page_size(2);
    f.control().clear_log();
    let got = p.machines("lab").await.unwrap();
    assert_eq!(got.len(), 5);
    let calls = f.control().requests();
    // 6 VMs in pages of 2 = 3 pages; the state of each of the 5 pool VMs; 6 interfaces and 6
    // addresses in pages of 2 = 3 + 3 pages.
    assert_eq!(calls, 14, "{:?}", f.control().log());
    let l0 = got.iter().find(|m| m.id == "vm-l0").unwrap();
    assert_eq!(l0.status, Status::Stopped);
    assert_eq!(l0.cloud_status, "PowerState/deallocated");
    assert!(
        got.iter()
            .all(|m| !m.address.is_empty() && !m.private_address.is_empty() && !m.fqdn.is_empty()),
        "{got:?}"
    );
    assert!(got.iter().all(|m| m.created_at.is_some()), "{got:?}");
    assert!(got
        .iter()
        .filter(|m| m.id != "vm-l0")
        .all(|m| m.status == Status::Running));
}

// On tokio's paused clock, as the fake's operations and the driver's pauses are: each operation
// runs 3 s and Azure names a pause of 1 s before each poll, so each is polled 3 times however
// promptly a loaded machine runs the test. (On the wall clock, with operations of 30 ms polled
// without pause, 8 tests at once under load saw as few as 6 polls in all.)
#[tokio::test(start_paused = true)]
async fn operations_in_progress_are_followed_and_throttling_is_retried() {
    let f = fake().await;
    f.set_operation_time(std::time::Duration::from_secs(3));
    f.set_poll_pause(std::time::Duration::from_secs(1));
    let p = provider(&f, "stack-1").await;
    f.control().inject(Rule::new(
        Some("PUT".parse().unwrap()),
        "publicIPAddresses",
        Fault::Status {
            status: 429,
            body: serde_json::json!({"error": {"code": "TooManyRequests", "message": "slow down"}}),
            headers: vec![("Retry-After".into(), "0".into())],
        },
        1,
    ));
    f.control().inject(Rule::new(
        Some("GET".parse().unwrap()),
        "/operations/",
        Fault::Status {
            status: 503,
            body: serde_json::json!({"error": {"code": "ServiceUnavailable", "message": "try later"}}),
            headers: vec![],
        },
        1,
    ));
    let m = p
        .create(&spec("vm-j", AMD))
        .await
        .unwrap()
        .machine()
        .unwrap();
    assert_eq!(m.status, Status::Running);
    let polls = f.control().count(&"GET".parse().unwrap(), "/operations/");
    assert!(
        polls >= 4 * 3,
        "each of 4 operations polled 3 times: {polls}"
    );
}

#[tokio::test]
async fn an_operation_still_running_past_the_operation_timeout_is_a_passing_failure_naming_it() {
    let f = fake().await;
    let p = provider(&f, "stack-1").await;
    let m = p
        .create(&spec("vm-o", AMD))
        .await
        .unwrap()
        .machine()
        .unwrap();
    // Every poll answers the operation still running; each pauses 2 ms at least before it, so the
    // 1000 answers cannot all be read within 50 ms.
    f.control().inject(Rule::new(
        Some("GET".parse().unwrap()),
        "/operations/",
        Fault::Status {
            status: 200,
            body: serde_json::json!({"name": "op", "status": "InProgress"}),
            headers: vec![],
        },
        1000,
    ));
    let slow = orca_azure::AzureProvider::new(
        settings(&f)
            .operation_timeout(std::time::Duration::from_millis(50))
            .build()
            .unwrap(),
        "stack-1",
    )
    .await
    .unwrap();
    let e = slow.stop(&m.id).await.unwrap_err();
    assert!(e.is_retryable(), "{e}");
    assert_eq!(e.operation(), Some("deallocate VM"), "{e}");
    assert!(e.to_string().contains("goes on in the cloud"), "{e}");
}

#[tokio::test]
async fn hourly_price_is_the_linux_on_demand_hour() {
    let f = fake().await;
    f.set_page_size(1);
    let p = provider(&f, "").await;
    let price = p.hourly_price(AMD, LOCATION).await.unwrap();
    assert_eq!(price.currency, "USD");
    assert!((price.hourly - 0.0458).abs() < 1e-9, "{price:?}");
    let e = p.hourly_price("Standard_Nope", LOCATION).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound);
    let e = p
        .hourly_price("Standard_B2s' or 'a", LOCATION)
        .await
        .unwrap_err();
    assert_eq!(
        e.kind(),
        ErrorKind::InvalidSpec,
        "quotes never reach the filter"
    );
}

#[tokio::test]
async fn resize_reports_downtime_only_when_running() {
    let f = fake().await;
    let p = provider(&f, "stack-1").await;
    let m = p
        .create(&spec("vm-k", AMD))
        .await
        .unwrap()
        .machine()
        .unwrap();
    let r = p.resize(&m.id, "Standard_D2s_v5").await.unwrap();
    assert!(r.caused_downtime);
    assert_eq!(r.machine.machine_type, "Standard_D2s_v5");
    p.stop(&m.id).await.unwrap();
    let r = p.resize(&m.id, AMD).await.unwrap();
    assert!(!r.caused_downtime);
    assert_eq!(r.machine.status, Status::Stopped);
    let e = p.resize(&m.id, ARM).await.unwrap_err();
    assert_eq!(
        e.kind(),
        ErrorKind::InvalidSpec,
        "an amd64 disk cannot boot an arm64 size: {e}"
    );
}

#[tokio::test]
async fn credentials_are_redacted_and_a_bad_token_is_unauthenticated() {
    let f = fake().await;
    let secret = "eyJ0eXAiOiJKV1QiLCJhbGciOiJSUzI1NiJ9.SECRET-TOKEN-VALUE";
    let s = settings(&f).token(secret).build().unwrap();
    let p = orca_azure::AzureProvider::new(s.clone(), "stack-1")
        .await
        .unwrap();
    let e = p.machines("lab").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unauthenticated, "{e}");
    for shown in [
        format!("{p:?}"),
        format!("{s:?}"),
        e.to_string(),
        format!("{e:?}"),
    ] {
        assert!(!shown.contains("SECRET-TOKEN-VALUE"), "{shown}");
    }
    let client_secret = orca_azure::Credential::ClientSecret {
        tenant_id: "72f988bf-86f1-41af-91ab-2d7cd011db47".into(),
        client_id: "app".into(),
        secret: "hunter2-client-secret".to_string().into(),
    };
    let s = settings(&f).credential(client_secret).build().unwrap();
    let p = orca_azure::AzureProvider::new(s, "stack-1").await.unwrap();
    assert!(!format!("{p:?}").contains("hunter2"));
    // The right token works: the token check is real.
    let ok = provider(&f, "stack-1").await;
    assert!(ok.machines("lab").await.unwrap().is_empty());
    assert!(!format!("{ok:?}").contains(TOKEN));
}

#[tokio::test]
async fn a_foreign_resource_of_the_same_name_is_refused_and_left_untouched() {
    let f = fake().await;
    // An operator's security group that happens to carry a machine's derived name, without orca's tags.
    f.add_nsg(RESOURCE_GROUP, "vm-z-nsg", LOCATION, &[("https", 100)]);
    let before = f.resource(
        RESOURCE_GROUP,
        "Microsoft.Network/networkSecurityGroups",
        "vm-z-nsg",
    );
    let p = provider(&f, "stack-1").await;
    let e = p.create(&spec("vm-z", AMD)).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::AlreadyExists, "{e}");
    assert_eq!(
        f.resource(
            RESOURCE_GROUP,
            "Microsoft.Network/networkSecurityGroups",
            "vm-z-nsg"
        ),
        before,
        "the foreign group was changed"
    );
    // The address made before it was removed again; the foreign group is all that is there.
    assert_eq!(
        stray(&f),
        vec![(
            "Microsoft.Network/networkSecurityGroups".to_string(),
            "vm-z-nsg".to_string()
        )]
    );
    // And delete of that name leaves the foreign group alone too.
    assert!(p.delete("vm-z").await.unwrap());
    assert_eq!(stray(&f).len(), 1);
}

#[tokio::test]
async fn a_lost_network_put_answer_is_retried_without_a_second_resource() {
    let f = fake().await;
    let p = provider(&f, "stack-1").await;
    f.control().inject(Rule::new(
        Some("PUT".parse().unwrap()),
        "/networkInterfaces/",
        Fault::DropAnswer,
        1,
    ));
    let m = p
        .create(&spec("vm-n", AMD))
        .await
        .unwrap()
        .machine()
        .unwrap();
    assert_eq!(m.status, Status::Running);
    // The retry met the first PUT's operation still running (409 AnotherOperationInProgress, a
    // passing failure) until it ended, then was served once more: one interface.
    let nic_puts: Vec<u16> = f
        .control()
        .log()
        .into_iter()
        .filter(|l| l.method.as_str() == "PUT" && l.path.contains("/networkInterfaces/vm-n-nic"))
        .map(|l| l.status)
        .collect();
    assert_eq!(
        nic_puts.iter().filter(|s| **s < 300).count(),
        2,
        "{nic_puts:?}"
    );
    assert!(
        nic_puts.iter().all(|s| *s < 300 || *s == 409),
        "{nic_puts:?}"
    );
    assert_eq!(stray(&f).len(), 5);
}

// On tokio's paused clock, as the test above: operations of 2 s, each polled twice (a pause of 1 s
// before each poll), the four of a create 8 times, however promptly a loaded machine runs it.
#[tokio::test(start_paused = true)]
async fn operations_followed_by_location_alone() {
    let f = fake().await;
    f.set_location_only(true);
    f.set_operation_time(std::time::Duration::from_secs(2));
    f.set_poll_pause(std::time::Duration::from_secs(1));
    let p = provider(&f, "stack-1").await;
    let m = p
        .create(&spec("vm-loc", AMD))
        .await
        .unwrap()
        .machine()
        .unwrap();
    assert_eq!(m.status, Status::Running);
    assert!(
        f.control()
            .count(&"GET".parse().unwrap(), "/operationResults/")
            >= 8
    );
    assert_eq!(
        f.control().count(&"GET".parse().unwrap(), "/operations/"),
        0
    );
    let stopped = p.stop(&m.id).await.unwrap();
    assert_eq!(stopped.status, Status::Stopped);
    // A failed operation answers its error at the Location: still no stock, still cleaned up.
    f.fail_allocation(AMD, LOCATION, "AllocationFailed");
    assert!(matches!(
        p.create(&spec("vm-loc2", AMD)).await,
        Ok(Created::NoStock { .. })
    ));
    f.restore_stock(AMD, LOCATION);
    assert!(p.delete(&m.id).await.unwrap());
    assert_eq!(stray(&f), vec![]);
}

#[tokio::test]
async fn a_create_that_keeps_failing_passingly_leaves_nothing_when_no_vm_was_made() {
    let f = fake().await;
    let p = provider(&f, "stack-1").await;
    let unavailable = |path: &str| {
        Rule::new(
            Some("PUT".parse().unwrap()),
            path,
            Fault::Status {
                status: 503,
                body: serde_json::json!({"error": {"code": "ServiceUnavailable", "message": "busy"}}),
                headers: vec![],
            },
            100,
        )
    };
    f.control().inject(unavailable("/virtualMachines/"));
    let e = p.create(&spec("vm-u", AMD)).await.unwrap_err();
    assert!(e.is_retryable(), "{e}");
    assert_eq!(
        stray(&f),
        vec![],
        "no VM was made: its address, group and interface are removed"
    );
    f.control().clear_faults();
    // The retry makes it.
    p.create(&spec("vm-u", AMD))
        .await
        .unwrap()
        .machine()
        .unwrap();
    assert_eq!(stray(&f).len(), 5);
}

/// A security group an earlier delete left (its removal refused) is adopted by the next create of
/// the name with that create's SSH sources, never the earlier machine's.
#[tokio::test]
async fn a_security_group_left_by_a_delete_is_given_the_new_machines_sources() {
    let f = fake().await;
    let p = provider(&f, "stack-1").await;
    f.refuse_delete("vm-s-nsg");
    let m = p
        .create(&spec("vm-s", AMD).with_ssh_sources(["198.51.100.0/24"]))
        .await
        .unwrap()
        .machine()
        .unwrap();
    let e = p.delete(&m.id).await.unwrap_err();
    assert!(e.to_string().contains("vm-s-nsg"), "{e}");
    f.allow_delete("vm-s-nsg");
    let again = p
        .create(&spec("vm-s", AMD).with_ssh_sources(["203.0.113.9"]))
        .await
        .unwrap();
    assert!(matches!(again, Created::Machine(_)), "{again:?}");
    let rules = f.nsg_rules(RESOURCE_GROUP, "vm-s-nsg");
    assert_eq!(rules.len(), 1, "{rules:?}");
    assert_eq!(
        rules[0]["properties"]["sourceAddressPrefixes"],
        serde_json::json!(["203.0.113.9"]),
        "the new machine's sources, not the earlier one's"
    );
}

/// A create of the name of a standing machine never changes that machine's network: not when it
/// is refused (another size), nor when it adopts it (another provider of the owner).
#[tokio::test]
async fn a_create_meeting_a_standing_machine_leaves_its_network_as_it_is() {
    let f = fake().await;
    let p = provider(&f, "stack-1").await;
    let first = ["198.51.100.0/24"];
    p.create(&spec("vm-t", AMD).with_ssh_sources(first))
        .await
        .unwrap();
    let sources = || {
        f.nsg_rules(RESOURCE_GROUP, "vm-t-nsg")[0]["properties"]["sourceAddressPrefixes"].clone()
    };
    let e = p
        .create(&spec("vm-t", ARM).with_ssh_sources(["203.0.113.9"]))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::AlreadyExists, "{e}");
    assert_eq!(sources(), serde_json::json!(first));
    let other = provider(&f, "stack-1").await;
    let again = other
        .create(&spec("vm-t", AMD).with_ssh_sources(["203.0.113.9"]))
        .await
        .unwrap();
    assert!(matches!(again, Created::Adopted(_)), "{again:?}");
    assert_eq!(sources(), serde_json::json!(first));
}

#[tokio::test]
async fn every_honoured_option_reaches_azure_and_the_others_are_refused_before_any_call() {
    let f = fake().await;
    let p = provider(&f, "stack-1").await;
    let fleet_key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFleetKeyOfTheCallerNotReal00 fleet";
    let s = spec("vm-o", AMD)
        .with_label("role", "builder")
        .with_label("empty", "")
        .with_disk_gb(64)
        .with_ssh_key(fleet_key)
        .with_image("Canonical:0001-com-ubuntu-server-jammy:22_04-lts-gen2:latest")
        .with_ssh_sources(["198.51.100.0/24", "203.0.113.9"]);
    let m = p.create(&s).await.unwrap().machine().unwrap();
    assert_eq!(m.labels["role"], "builder");
    assert_eq!(m.labels["empty"], "");
    let vm = f
        .resource(RESOURCE_GROUP, "Microsoft.Compute/virtualMachines", "vm-o")
        .unwrap();
    let props = &vm["properties"];
    assert_eq!(props["storageProfile"]["osDisk"]["diskSizeGB"], 64);
    let disk = f
        .resource(RESOURCE_GROUP, "Microsoft.Compute/disks", "vm-o-osdisk")
        .unwrap();
    assert_eq!(disk["properties"]["diskSizeGB"], 64);
    assert_eq!(
        props["storageProfile"]["imageReference"],
        serde_json::json!({"publisher": "Canonical", "offer": "0001-com-ubuntu-server-jammy",
            "sku": "22_04-lts-gen2", "version": "latest"})
    );
    let keys: Vec<&str> = props["osProfile"]["linuxConfiguration"]["ssh"]["publicKeys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            assert_eq!(k["path"], "/home/orca/.ssh/authorized_keys");
            k["keyData"].as_str().unwrap()
        })
        .collect();
    assert_eq!(keys, [SSH_KEY, fleet_key]);
    for (ty, name) in [
        ("Microsoft.Compute/virtualMachines", "vm-o"),
        ("Microsoft.Network/networkInterfaces", "vm-o-nic"),
        ("Microsoft.Network/publicIPAddresses", "vm-o-ip"),
        ("Microsoft.Network/networkSecurityGroups", "vm-o-nsg"),
    ] {
        let r = f.resource(RESOURCE_GROUP, ty, name).unwrap();
        assert_eq!(r["tags"]["role"], "builder", "{ty}");
        assert_eq!(r["tags"]["orca-owner"], "stack-1", "{ty}");
    }
    let rules = f.nsg_rules(RESOURCE_GROUP, "vm-o-nsg");
    assert_eq!(rules.len(), 1, "{rules:?}");
    assert_eq!(
        rules[0]["properties"]["sourceAddressPrefixes"],
        serde_json::json!(["198.51.100.0/24", "203.0.113.9"]),
        "exactly the spec's sources, not the provider's"
    );

    // What Azure cannot do, and what is wrong, is refused before any call.
    let n = f.control().requests();
    for (s, kind) in [
        (
            spec("vm-p", AMD).with_network_tag("web"),
            ErrorKind::Unsupported,
        ),
        (
            spec("vm-p", AMD).with_max_run_duration(std::time::Duration::from_secs(3600)),
            ErrorKind::Unsupported,
        ),
        (
            spec("vm-p", AMD).with_image("ubuntu-24.04"),
            ErrorKind::InvalidSpec,
        ),
        (spec("vm-p", AMD).with_disk_gb(5000), ErrorKind::InvalidSpec),
        (spec(&"v".repeat(59), AMD), ErrorKind::InvalidSpec),
    ] {
        let e = p.create(&s).await.unwrap_err();
        assert_eq!(e.kind(), kind, "{s:?}: {e}");
    }
    let keyless = orca_azure::AzureProvider::new(
        settings(&f)
            .with_config(orca_azure::ConfigKey::SshPublicKey, "")
            .build()
            .unwrap(),
        "stack-1",
    )
    .await
    .unwrap();
    match keyless.create(&spec("vm-p", AMD)).await {
        Err(Error::InvalidSpec { field, .. }) => assert_eq!(field, "ssh_keys"),
        other => panic!("a create with no SSH key gave {other:?}"),
    }
    assert_eq!(f.control().requests(), n, "a refusal made a call");
    // With the spec's key alone it is made.
    keyless
        .create(&spec("vm-p", AMD).with_ssh_key(fleet_key))
        .await
        .unwrap()
        .machine()
        .unwrap();
}

#[tokio::test]
async fn errors_keep_the_operation_the_retries_the_code_and_the_cause() {
    use std::error::Error as _;
    let f = fake().await;
    // Nothing listens there: a passing failure, retried, with the transport's error as its cause.
    let closed = common::refusing_port();
    let addr = closed.local_addr().unwrap();
    let p = orca_azure::AzureProvider::new(
        settings(&f)
            .arm_endpoint(format!("http://{addr}"))
            .build()
            .unwrap(),
        "stack-1",
    )
    .await
    .unwrap();
    let e = p.machines("lab").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Transient, "{e}");
    assert_eq!(e.operation(), Some("list VMs"));
    assert_eq!(e.retries(), 6, "{e}");
    assert!(e.source().is_some(), "the cause is kept: {e:?}");
    // A cloud error keeps Azure's code, what a caller matches on.
    let p = provider(&f, "stack-1").await;
    f.control().inject(Rule::new(
        Some("GET".parse().unwrap()),
        "/virtualMachines?",
        Fault::Status {
            status: 403,
            body: serde_json::json!({"error": {"code": "AuthorizationFailed", "message": "no read"}}),
            headers: vec![],
        },
        1,
    ));
    let e = p.machines("lab").await.unwrap_err();
    assert_eq!(
        (e.kind(), e.code(), e.operation()),
        (
            ErrorKind::PermissionDenied,
            Some("AuthorizationFailed"),
            Some("list VMs")
        )
    );
}

#[tokio::test]
async fn a_throttled_then_refused_vm_put_adopts_an_earlier_calls_vm() {
    let f = fake().await;
    let p = provider(&f, "stack-1").await;
    let first = p.create(&spec("vm-t", AMD)).await.unwrap();
    assert!(!first.is_adopted());
    // A later create: its first VM PUT is throttled (429: not served), its second meets the VM
    // (412). No attempt of this call can have made it: it is an earlier call's.
    f.control().inject(Rule::new(
        Some("PUT".parse().unwrap()),
        "/virtualMachines/vm-t",
        Fault::Status {
            status: 429,
            body: serde_json::json!({"error": {"code": "TooManyRequests", "message": "slow down"}}),
            headers: vec![("Retry-After".into(), "0".into())],
        },
        1,
    ));
    match p.create(&spec("vm-t", AMD)).await.unwrap() {
        Created::Adopted(m) => assert_eq!(m.id, "vm-t"),
        other => panic!("a 429 then a 412 gave {other:?}, not Adopted"),
    }
    let vm_puts = f
        .control()
        .count(&"PUT".parse().unwrap(), "/virtualMachines/vm-t");
    assert_eq!(vm_puts, 3, "{:?}", f.control().log());
    assert_eq!(stray(&f).len(), 5);
}

#[tokio::test]
async fn a_machine_of_another_size_or_location_is_not_adopted() {
    let f = fake().await;
    f.add_subnet(
        RESOURCE_GROUP,
        &format!("{VNET}-northeurope"),
        "northeurope",
        SUBNET,
        None,
    );
    let p = provider(&f, "stack-1").await;
    let m = p
        .create(&spec("vm-z", AMD))
        .await
        .unwrap()
        .machine()
        .unwrap();
    let before = stray(&f);
    let vm_before = f
        .resource(RESOURCE_GROUP, "Microsoft.Compute/virtualMachines", "vm-z")
        .unwrap();
    // The same name and pool but another size: not the machine asked for.
    let e = p
        .create(&spec("vm-z", "Standard_D2s_v5"))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::AlreadyExists, "{e}");
    assert!(e.to_string().contains("Standard_B2s"), "{e}");
    // The same name and size in another location: its address, group and interface are in
    // westeurope, and so is the VM.
    let e = p
        .create(&MachineSpec::new("vm-z", AMD, "northeurope", "lab"))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::AlreadyExists, "{e}");
    assert!(e.to_string().contains("westeurope"), "{e}");
    // Nothing of the machine changed or went.
    assert_eq!(stray(&f), before);
    assert_eq!(
        f.resource(RESOURCE_GROUP, "Microsoft.Compute/virtualMachines", "vm-z")
            .unwrap(),
        vm_before
    );
    let read = p.machine(&m.id).await.unwrap().unwrap();
    assert_eq!(
        (read.machine_type.as_str(), read.status),
        (AMD, Status::Running)
    );
    // The same spec still adopts it.
    assert!(p.create(&spec("vm-z", AMD)).await.unwrap().is_adopted());
}

#[tokio::test]
async fn a_running_vm_whose_cluster_lacks_the_size_is_deallocated_resized_and_started() {
    let f = fake().await;
    let p = provider(&f, "stack-1").await;
    let m = p
        .create(&spec("vm-r", AMD))
        .await
        .unwrap()
        .machine()
        .unwrap();
    // The VM's hardware cluster offers B-series only: Azure refuses to resize it in place.
    f.limit_cluster(RESOURCE_GROUP, "vm-r", &[AMD]);
    f.control().clear_log();
    let r = p.resize(&m.id, "Standard_D2s_v5").await.unwrap();
    assert!(r.caused_downtime);
    assert_eq!(
        (r.machine.machine_type.as_str(), r.machine.status),
        ("Standard_D2s_v5", Status::Running)
    );
    let calls: Vec<String> = f
        .control()
        .log()
        .into_iter()
        .filter(|l| !l.path.contains("/operations/"))
        .map(|l| {
            let path = l.path.split('?').next().unwrap_or("").to_string();
            let tail = path.rsplit("/virtualMachines/").next().unwrap_or("");
            format!("{} {tail}", l.method)
        })
        .collect();
    let pos = |c: &str| {
        calls
            .iter()
            .position(|x| x == c)
            .unwrap_or_else(|| panic!("no {c} in {calls:?}"))
    };
    assert!(
        pos("GET vm-r/vmSizes") < pos("POST vm-r/deallocate")
            && pos("POST vm-r/deallocate") < pos("PATCH vm-r")
            && pos("PATCH vm-r") < pos("POST vm-r/start"),
        "{calls:?}"
    );
    // A size the cluster offers is taken in place: no deallocation.
    f.limit_cluster(
        RESOURCE_GROUP,
        "vm-r",
        &["Standard_D2s_v5", "Standard_D4s_v5"],
    );
    f.control().clear_log();
    let r = p.resize(&m.id, "Standard_D4s_v5").await.unwrap();
    assert!(r.caused_downtime, "Azure restarts a running VM it resizes");
    assert_eq!(r.machine.machine_type, "Standard_D4s_v5");
    assert_eq!(
        f.control()
            .count(&"POST".parse().unwrap(), "/virtualMachines/vm-r/deallocate"),
        0
    );
}

#[tokio::test]
async fn a_delete_lock_on_the_interface_or_address_blocks_the_vms_delete() {
    let f = fake().await;
    let p = provider(&f, "stack-1").await;
    for (name, locked) in [("vm-q1", "vm-q1-nic"), ("vm-q2", "vm-q2-ip")] {
        p.create(&spec(name, AMD)).await.unwrap();
        let before = stray(&f);
        // The VM would take its interface and address with it: a lock on either refuses the
        // VM's delete, and nothing goes.
        f.refuse_delete(locked);
        let e = p.delete(name).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Leftovers, "{e}");
        let s = e.to_string();
        assert!(
            s.contains(&format!("VM {name}")) && s.contains("ScopeLocked"),
            "{s}"
        );
        assert_eq!(stray(&f), before, "something went despite the lock");
        assert_eq!(p.machine(name).await.unwrap().unwrap().id, name);
        f.allow_delete(locked);
        assert!(p.delete(name).await.unwrap());
    }
    assert!(stray(&f).is_empty(), "{:?}", stray(&f));
}

/// A raw call on the fake, as an operator's tool would make it; answers the status and the body,
/// after following the operation it started to its end, which must succeed.
async fn raw(
    f: &orca_fakes::azure::FakeAzure,
    method: reqwest::Method,
    path: &str,
    body: Option<serde_json::Value>,
) -> (u16, serde_json::Value) {
    let (status, body, end) = raw_ending(f, method, path, body).await;
    if let Some(s) = end {
        assert_eq!(s["status"], "Succeeded", "{s}");
    }
    (status, body)
}

/// [`raw`], answering also the final status of the operation it started (none when it started
/// none), whatever that is.
async fn raw_ending(
    f: &orca_fakes::azure::FakeAzure,
    method: reqwest::Method,
    path: &str,
    body: Option<serde_json::Value>,
) -> (u16, serde_json::Value, Option<serde_json::Value>) {
    let http = reqwest::Client::new();
    let mut r = http
        .request(method, format!("{}{path}", f.url()))
        .bearer_auth(TOKEN);
    if let Some(b) = body {
        r = r.json(&b);
    }
    let r = r.send().await.unwrap();
    let status = r.status().as_u16();
    let op = r
        .headers()
        .get("azure-asyncoperation")
        .map(|v| v.to_str().unwrap().to_string());
    let body = r.json().await.unwrap_or(serde_json::Value::Null);
    let mut end = None;
    if let Some(op) = op {
        loop {
            let s: serde_json::Value = http
                .get(&op)
                .bearer_auth(TOKEN)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            if s["status"] != "InProgress" {
                end = Some(s);
                break;
            }
        }
    }
    (status, body, end)
}

/// An earlier create's VM that Azure marks Failed (an update it could not allocate, a refused start
/// or resize, a failed extension) is still that machine: a repeated create answers it as it is and
/// removes nothing, neither the VM nor what the VM holds.
#[tokio::test]
async fn a_repeated_create_of_a_failed_vm_answers_it_and_removes_nothing() {
    let f = fake().await;
    let p = provider(&f, "stack-1").await;
    p.create(&spec("vm-z", AMD))
        .await
        .unwrap()
        .machine()
        .unwrap();
    let held = stray(&f);
    assert_eq!(held.len(), 5, "{held:?}");
    // An update Azure cannot allocate leaves the VM in provisioning state Failed.
    let path = format!(
        "/subscriptions/{}/resourceGroups/{RESOURCE_GROUP}/providers/Microsoft.Compute/virtualMachines/vm-z?api-version=2024-07-01",
        orca_fakes::azure::SUBSCRIPTION
    );
    let (_, vm) = raw(&f, reqwest::Method::GET, &path, None).await;
    f.fail_allocation(AMD, LOCATION, "AllocationFailed");
    let (_, _, end) = raw_ending(&f, reqwest::Method::PUT, &path, Some(vm)).await;
    assert_eq!(end.unwrap()["status"], "Failed");
    let (_, vm) = raw(&f, reqwest::Method::GET, &path, None).await;
    assert_eq!(vm["properties"]["provisioningState"], "Failed", "{vm}");

    match p.create(&spec("vm-z", AMD)).await {
        Ok(Created::Adopted(m)) => {
            assert_eq!(m.id, "vm-z");
            assert_eq!(m.status, Status::Unknown, "{m:?}");
            assert!(
                m.cloud_status.to_ascii_lowercase().contains("failed"),
                "{m:?}"
            );
        }
        other => panic!("{other:?}"),
    }
    // A listing says so too, whatever power state Azure keeps beside the failure.
    let listed = p.machines("lab").await.unwrap();
    let m = listed.iter().find(|m| m.id == "vm-z").unwrap();
    assert_eq!(m.status, Status::Unknown, "{m:?}");
    assert!(m.cloud_status.contains("ProvisioningState/Failed"), "{m:?}");
    assert_eq!(
        stray(&f),
        held,
        "the repeated create removed what it adopted"
    );
    assert!(
        !f.control()
            .log()
            .iter()
            .any(|l| l.method.as_str() == "DELETE"),
        "a create deleted something"
    );
}

/// A repeated create that fails before it reaches the VM (here its read of the interface is
/// refused) has adopted the standing machine's address and security group: they stay, as the VM
/// that uses them does.
#[tokio::test]
async fn a_repeated_create_failing_before_the_vm_removes_none_of_the_machines_pieces() {
    let f = fake().await;
    let p = provider(&f, "stack-1").await;
    p.create(&spec("vm-y", AMD))
        .await
        .unwrap()
        .machine()
        .unwrap();
    let held = stray(&f);
    assert_eq!(held.len(), 5, "{held:?}");
    f.control().inject(Rule::new(
        Some("GET".parse().unwrap()),
        "/networkInterfaces/vm-y-nic",
        Fault::Status {
            status: 403,
            body: serde_json::json!({"error": {"code": "AuthorizationFailed", "message": "no read"}}),
            headers: vec![],
        },
        1,
    ));
    let e = p.create(&spec("vm-y", AMD)).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::PermissionDenied, "{e}");
    assert_eq!(
        stray(&f),
        held,
        "the failed create removed a piece of a standing machine"
    );
    assert!(
        !f.control()
            .log()
            .iter()
            .any(|l| l.method.as_str() == "DELETE"),
        "a create deleted something"
    );
}

/// A 500 on the next `PUT` of VM `name`: a passing failure before Azure acted on it.
fn vm_put_server_error(name: &str) -> Rule {
    Rule::new(
        Some("PUT".parse().unwrap()),
        &format!("/virtualMachines/{name}"),
        Fault::Status {
            status: 500,
            body: serde_json::json!({"error": {"code": "InternalServerError", "message": "try again"}}),
            headers: vec![],
        },
        1,
    )
}

/// The statuses of the `PUT`s of VM `name` in the log.
fn vm_puts(f: &orca_fakes::azure::FakeAzure, name: &str) -> Vec<u16> {
    let path = format!("/virtualMachines/{name}?");
    f.control()
        .log()
        .into_iter()
        .filter(|l| l.method.as_str() == "PUT" && l.path.contains(&path))
        .map(|l| l.status)
        .collect()
}

/// A create whose first VM `PUT` fails passingly before Azure acts on it (a 500) and whose retry
/// meets a VM (412) did not make that VM: an earlier create did, and it is adopted, not new.
#[tokio::test]
async fn a_vm_met_after_a_passing_failure_that_made_nothing_is_adopted_not_new() {
    let f = fake().await;
    let p = provider(&f, "stack-1").await;
    p.create(&spec("vm-w", AMD))
        .await
        .unwrap()
        .machine()
        .unwrap();
    let held = stray(&f);
    f.control().clear_log();
    f.control().inject(vm_put_server_error("vm-w"));
    match p.create(&spec("vm-w", AMD)).await {
        Ok(Created::Adopted(m)) => assert_eq!(m.status, Status::Running, "{m:?}"),
        other => panic!("a 500 then a 412 on an earlier call's VM gave {other:?}"),
    }
    assert_eq!(vm_puts(&f, "vm-w"), vec![500, 412]);
    assert_eq!(stray(&f), held);
}

/// The same for an earlier create's VM that Azure marks Failed and that carries no create tag (as
/// one an older driver made): it is that create's machine, answered as it is, and neither it nor
/// what it holds is removed.
#[tokio::test]
async fn a_failed_vm_met_after_a_passing_failure_that_made_nothing_is_answered_and_kept() {
    let f = fake().await;
    let p = provider(&f, "stack-1").await;
    p.create(&spec("vm-v", AMD))
        .await
        .unwrap()
        .machine()
        .unwrap();
    let held = stray(&f);
    assert_eq!(held.len(), 5, "{held:?}");
    // An update Azure cannot allocate leaves the VM in provisioning state Failed; the update
    // keeps orca's ownership tags alone.
    let path = format!(
        "/subscriptions/{}/resourceGroups/{RESOURCE_GROUP}/providers/Microsoft.Compute/virtualMachines/vm-v?api-version=2024-07-01",
        orca_fakes::azure::SUBSCRIPTION
    );
    let (_, mut vm) = raw(&f, reqwest::Method::GET, &path, None).await;
    let tags = vm["tags"].as_object_mut().unwrap();
    tags.retain(|k, _| ["orca", "orca-pool", "orca-owner"].contains(&k.as_str()));
    f.fail_allocation(AMD, LOCATION, "AllocationFailed");
    let (_, _, end) = raw_ending(&f, reqwest::Method::PUT, &path, Some(vm)).await;
    assert_eq!(end.unwrap()["status"], "Failed");

    f.control().clear_log();
    f.control().inject(vm_put_server_error("vm-v"));
    match p.create(&spec("vm-v", AMD)).await {
        Ok(Created::Adopted(m)) => {
            assert_eq!(m.id, "vm-v");
            assert!(
                m.cloud_status.to_ascii_lowercase().contains("failed"),
                "{m:?}"
            );
        }
        other => panic!("a 500 then a 412 on an earlier call's failed VM gave {other:?}"),
    }
    assert_eq!(vm_puts(&f, "vm-v"), vec![500, 412]);
    assert_eq!(
        stray(&f),
        held,
        "the create removed an earlier call's machine"
    );
    assert!(
        !f.control()
            .log()
            .iter()
            .any(|l| l.method.as_str() == "DELETE"),
        "a create deleted something"
    );
}

/// A VM the create's own attempt made, whose answer was lost, carries that create's token: the
/// retried `PUT` meets it (412) and it is this call's, answered as new, and removed with what the
/// call made when Azure fails it.
#[tokio::test]
async fn a_vm_the_calls_own_lost_attempt_made_is_its_own() {
    let f = fake().await;
    let p = provider(&f, "stack-1").await;
    f.lose_next_vm_put_answer();
    match p.create(&spec("vm-g1", AMD)).await {
        Ok(Created::Machine(m)) => assert_eq!(m.id, "vm-g1"),
        other => panic!("a lost answer then a 412 on this call's VM gave {other:?}"),
    }
    assert_eq!(vm_puts(&f, "vm-g1").last(), Some(&412));
    assert_eq!(stray(&f).len(), 5);

    // Azure fails the VM the lost attempt made: it is this call's, removed with its pieces.
    f.fail_allocation(AMD, LOCATION, "AllocationFailed");
    f.lose_next_vm_put_answer();
    match p.create(&spec("vm-g2", AMD)).await {
        Ok(Created::NoStock { message, .. }) => {
            assert!(!message.contains("could not remove"), "{message}")
        }
        other => panic!("this call's failed VM gave {other:?}"),
    }
    assert_eq!(vm_puts(&f, "vm-g2").last(), Some(&412));
    let left: Vec<_> = stray(&f)
        .into_iter()
        .filter(|(_, n)| n.starts_with("vm-g2"))
        .collect();
    assert_eq!(left, vec![]);
}

/// Each create writes a token of its own on its VM (the `orca.create` tag), and only there: it is
/// the driver's bookkeeping, never one of the machine's labels, however the machine is read.
#[tokio::test]
async fn the_create_token_is_a_tag_of_the_vm_alone_and_never_a_label() {
    use orca_machines::MachineLabels as _;
    let f = fake().await;
    let p = provider(&f, "stack-1").await;
    let s = spec("vm-c1", AMD).with_label("role", "builder");
    let made = p.create(&s).await.unwrap().machine().unwrap();
    p.create(&spec("vm-c2", AMD))
        .await
        .unwrap()
        .machine()
        .unwrap();
    let token = |name: &str| {
        f.resource(RESOURCE_GROUP, "Microsoft.Compute/virtualMachines", name)
            .unwrap()["tags"]["orca.create"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_default()
    };
    let (t1, t2) = (token("vm-c1"), token("vm-c2"));
    assert_eq!(t1.len(), 36, "a random (version 4) UUID: {t1:?}");
    assert_ne!(t1, t2, "two creates share a token");
    for (kind, name) in stray(&f) {
        let tags = &f.resource(RESOURCE_GROUP, &kind, &name).unwrap()["tags"];
        if !kind.ends_with("virtualMachines") {
            assert!(tags.get("orca.create").is_none(), "{kind}/{name}: {tags}");
        }
    }
    let expected: orca_machines::labels::Labels = [
        ("orca", "pool"),
        ("orca-owner", "stack-1"),
        ("orca-pool", "lab"),
        ("role", "builder"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let read = p.machine("vm-c1").await.unwrap().unwrap();
    let named = p.machine_named("lab", "vm-c1").await.unwrap().unwrap();
    let listed = p.machines("lab").await.unwrap();
    let listed = listed.iter().find(|m| m.id == "vm-c1").unwrap();
    let adopted = match p.create(&s).await.unwrap() {
        Created::Adopted(m) => m,
        other => panic!("a repeated create gave {other:?}"),
    };
    for m in [&made, &read, &named, listed, &adopted] {
        assert_eq!(m.labels, expected, "{m:?}");
    }
    let labelled = p
        .set_labels(
            "vm-c1",
            &orca_machines::labels::Labels::new(),
            &["role".to_string()],
        )
        .await
        .unwrap();
    assert!(!labelled.labels.contains_key("orca.create"), "{labelled:?}");
    assert_eq!(token("vm-c1"), t1, "a label change lost the token");
    // No caller can set or remove it: it is not a label key.
    let set = orca_machines::labels::Labels::from([("orca.create".to_string(), "x".to_string())]);
    let e = p.set_labels("vm-c1", &set, &[]).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidSpec, "{e}");
    let e = p
        .set_labels(
            "vm-c1",
            &orca_machines::labels::Labels::new(),
            &["orca.create".to_string()],
        )
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidSpec, "{e}");
    let e = p
        .create(&spec("vm-c3", AMD).with_label("orca.create", "x"))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidSpec, "{e}");
    assert_eq!(token("vm-c1"), t1);
}

/// What an earlier failed create left (here its security group) is adopted by the next create of
/// that name. When that create's VM `PUT` keeps failing passingly and Azure holds no VM of that
/// name, the create made no VM: it removes what it made, and what it adopted stays as it was.
#[tokio::test]
async fn a_create_whose_vm_put_keeps_failing_passingly_keeps_what_it_adopted() {
    let f = fake().await;
    let p = provider(&f, "stack-1").await;
    f.fail_allocation(AMD, LOCATION, "AllocationFailed");
    f.refuse_delete("vm-q-nsg");
    match p.create(&spec("vm-q", AMD)).await {
        Ok(Created::NoStock { message, .. }) => {
            assert!(message.contains("security group vm-q-nsg"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    f.allow_delete("vm-q-nsg");
    f.restore_stock(AMD, LOCATION);
    let left = stray(&f);
    assert_eq!(
        left,
        vec![(
            "Microsoft.Network/networkSecurityGroups".to_string(),
            "vm-q-nsg".to_string()
        )]
    );

    f.control().clear_log();
    f.control().inject(Rule::new(
        Some("PUT".parse().unwrap()),
        "/virtualMachines/vm-q",
        Fault::Status {
            status: 503,
            body: serde_json::json!({"error": {"code": "ServiceUnavailable", "message": "busy"}}),
            headers: vec![],
        },
        100,
    ));
    let e = p.create(&spec("vm-q", AMD)).await.unwrap_err();
    assert!(e.is_retryable(), "{e}");
    assert!(vm_puts(&f, "vm-q").iter().all(|s| *s == 503));
    assert_eq!(
        stray(&f),
        left,
        "the create removed what it adopted, or left what it made"
    );
    let deleted: Vec<String> = f
        .control()
        .log()
        .into_iter()
        .filter(|l| l.method.as_str() == "DELETE")
        .map(|l| l.path)
        .collect();
    assert!(
        !deleted.iter().any(|d| d.contains("/vm-q-nsg")),
        "{deleted:?}"
    );

    // The retried create adopts the group again and makes the machine.
    f.control().clear_faults();
    p.create(&spec("vm-q", AMD))
        .await
        .unwrap()
        .machine()
        .unwrap();
    assert_eq!(stray(&f).len(), 5);
}

#[tokio::test]
async fn an_os_disk_the_vms_delete_leaves_is_deleted_and_confirmed_gone() {
    let f = fake().await;
    let p = provider(&f, "stack-1").await;
    let rg = format!(
        "/subscriptions/{}/resourceGroups/{RESOURCE_GROUP}/providers/Microsoft.Compute",
        orca_fakes::azure::SUBSCRIPTION
    );
    for name in ["vm-s", "vm-t"] {
        p.create(&spec(name, AMD)).await.unwrap();
        // An operator (or an older tool) set the OS disk to stay when the VM goes.
        let (st, b) = raw(
            &f,
            reqwest::Method::PATCH,
            &format!("{rg}/virtualMachines/{name}?api-version=2024-07-01"),
            Some(serde_json::json!({"properties": {"storageProfile": {"osDisk": {"deleteOption": "Detach"}}}})),
        )
        .await;
        assert_eq!(st, 200, "{b}");
        assert_eq!(
            b["properties"]["storageProfile"]["osDisk"]["deleteOption"],
            "Detach"
        );
        // Attached to its VM, the disk cannot be deleted on its own.
        let (st, b) = raw(
            &f,
            reqwest::Method::DELETE,
            &format!("{rg}/disks/{name}-osdisk?api-version=2024-03-02"),
            None,
        )
        .await;
        assert_eq!(
            (st, b["error"]["code"].as_str()),
            (409, Some("OperationNotAllowed")),
            "{b}"
        );
    }
    f.control().clear_log();
    assert!(p.delete("vm-s").await.unwrap());
    let of_s: Vec<_> = stray(&f)
        .into_iter()
        .filter(|(_, n)| n.starts_with("vm-s"))
        .collect();
    assert_eq!(of_s, vec![], "the OS disk stayed behind");
    assert_eq!(
        f.control()
            .count(&reqwest::Method::DELETE, "/disks/vm-s-osdisk"),
        1
    );

    // A disk that refuses its delete is named, and deleting the machine by name removes it.
    f.refuse_delete("vm-t-osdisk");
    let e = p.delete("vm-t").await.unwrap_err();
    let Error::Leftovers { left, .. } = &e else {
        panic!("{e:?}")
    };
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(left[0].starts_with("OS disk vm-t-osdisk"), "{left:?}");
    assert_eq!(
        stray(&f),
        vec![(
            "Microsoft.Compute/disks".to_string(),
            "vm-t-osdisk".to_string()
        )]
    );
    assert!(e.to_string().contains("delete_named"), "{e}");
    f.allow_delete("vm-t-osdisk");
    assert!(p.delete_named("lab", "vm-t").await.unwrap());
    assert_eq!(stray(&f), vec![]);
    // Another owner's delete of that name never touches a disk that is not its own.
    let other = provider(&f, "stack-2").await;
    p.create(&spec("vm-u", AMD)).await.unwrap();
    raw(
        &f,
        reqwest::Method::PATCH,
        &format!("{rg}/virtualMachines/vm-u?api-version=2024-07-01"),
        Some(serde_json::json!({"properties": {"storageProfile": {"osDisk": {"deleteOption": "Detach"}}}})),
    )
    .await;
    f.refuse_delete("vm-u-osdisk");
    assert!(p.delete("vm-u").await.is_err());
    f.allow_delete("vm-u-osdisk");
    assert!(other.delete("vm-u").await.unwrap());
    assert_eq!(
        stray(&f),
        vec![(
            "Microsoft.Compute/disks".to_string(),
            "vm-u-osdisk".to_string()
        )]
    );
    assert!(p.delete_named("lab", "vm-u").await.unwrap());
    assert_eq!(stray(&f), vec![]);
}

#[tokio::test]
async fn automatic_managed_identity_asks_for_the_client_id_among_several_identities() {
    // An Azure VM with two user-assigned identities and no system-assigned one: the metadata
    // service answers a token request without `client_id` with 400, so the automatic choice must
    // name the identity AZURE_CLIENT_ID gives.
    const A: &str = "11111111-1111-4111-8111-111111111111";
    const B: &str = "22222222-2222-4222-8222-222222222222";
    let f = fake().await;
    f.set_user_assigned_identities(&[A, B]);
    let auto = |client_id: Option<&str>| {
        let mut s = settings(&f).credential(orca_azure::Credential::Auto);
        if let Some(c) = client_id {
            s = s.with_config(orca_azure::ConfigKey::ClientId, c);
        }
        s.build().unwrap()
    };
    let p = orca_azure::AzureProvider::new(auto(Some(B)), "stack-1")
        .await
        .unwrap();
    assert!(p.machines("lab").await.unwrap().is_empty());
    let asked: Vec<String> = f
        .control()
        .log()
        .into_iter()
        .filter(|l| l.path.starts_with("/metadata/identity/oauth2/token"))
        .map(|l| l.path)
        .collect();
    assert!(
        asked
            .last()
            .is_some_and(|q| q.contains(&format!("client_id={B}"))),
        "{asked:?}"
    );
    // Without it, the metadata service refuses to choose (and the Azure CLI is tried next).
    let p = orca_azure::AzureProvider::new(auto(None), "stack-1")
        .await
        .unwrap();
    let e = p.machines("lab").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unauthenticated, "{e}");
    assert!(
        e.to_string()
            .contains("Multiple user assigned identities exist"),
        "{e}"
    );
    // An identity the VM does not have is not found.
    let p = orca_azure::AzureProvider::new(
        auto(Some("33333333-3333-4333-8333-333333333333")),
        "stack-1",
    )
    .await
    .unwrap();
    let e = p.machines("lab").await.unwrap_err();
    assert!(e.to_string().contains("Identity not found"), "{e}");
}

#[tokio::test]
async fn paging_links_of_the_same_origin_spelled_otherwise_are_followed_and_others_refused() {
    // Azure writes `https://management.azure.com:443/...` into the links of a client that called
    // `https://management.azure.com`: the same origin, spelled otherwise. The
    // fake's origin always carries its port, so here the endpoint is `http://localhost:<port>`
    // and the links say `http://LocalHost:<port>`.
    let f = fake().await;
    let port = url::Url::parse(&f.url()).unwrap().port().unwrap();
    let endpoint = format!("http://localhost:{port}");
    let p = orca_azure::AzureProvider::new(
        settings(&f)
            .arm_endpoint(&endpoint)
            .prices_endpoint(&endpoint)
            .build()
            .unwrap(),
        "stack-1",
    )
    .await
    .unwrap();
    for n in ["vm-p1", "vm-p2", "vm-p3"] {
        p.create(&spec(n, AMD)).await.unwrap();
    }
    f.set_page_size(1);
    f.set_link_origin(Some(&format!("http://LocalHost:{port}")));
    f.control().clear_log();
    let mut names: Vec<String> = p
        .machines("lab")
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.name)
        .collect();
    names.sort();
    assert_eq!(names, ["vm-p1", "vm-p2", "vm-p3"]);
    let get = reqwest::Method::GET;
    assert_eq!(
        f.control().count(&get, "virtualMachines?api-version"),
        3,
        "every page of the VM list: {:?}",
        f.control().log()
    );
    // Retail Prices' NextPageLink likewise: the Linux row is among several rows, a page each.
    let price = p.hourly_price(AMD, LOCATION).await.unwrap();
    assert!((price.hourly - 0.0458).abs() < 1e-9, "{price:?}");
    assert!(
        f.control().count(&get, "/api/retail/prices") > 1,
        "{:?}",
        f.control().log()
    );
    // A link to another origin (the same server by another name) is not followed: the token
    // goes to the endpoint's origin only.
    f.set_link_origin(Some(&format!("http://127.0.0.1:{port}")));
    let e = p.machines("lab").await.unwrap_err();
    assert!(e.to_string().contains("outside its endpoints"), "{e}");
    f.set_link_origin(None);
    assert_eq!(p.machines("lab").await.unwrap().len(), 3);
}

#[tokio::test]
async fn a_left_os_disk_whose_tagging_and_delete_failed_is_found_by_the_retried_delete() {
    let f = fake().await;
    let p = provider(&f, "stack-1").await;
    let rg = format!(
        "/subscriptions/{}/resourceGroups/{RESOURCE_GROUP}/providers/Microsoft.Compute",
        orca_fakes::azure::SUBSCRIPTION
    );
    p.create(&spec("vm-w", AMD)).await.unwrap();
    let (st, b) = raw(
        &f,
        reqwest::Method::PATCH,
        &format!("{rg}/virtualMachines/vm-w?api-version=2024-07-01"),
        Some(serde_json::json!({"properties": {"storageProfile": {"osDisk": {"deleteOption": "Detach"}}}})),
    )
    .await;
    assert_eq!(st, 200, "{b}");
    let refused = |code: &str| Fault::Status {
        status: 403,
        body: serde_json::json!({"error": {"code": code, "message": "not now"}}),
        headers: vec![],
    };
    // Tagging the disk fails once, and so does its delete.
    f.control().inject(Rule::new(
        Some(reqwest::Method::PATCH),
        "/disks/vm-w-osdisk",
        refused("AuthorizationFailed"),
        1,
    ));
    f.control().inject(Rule::new(
        Some(reqwest::Method::DELETE),
        "/disks/vm-w-osdisk",
        refused("AuthorizationFailed"),
        1,
    ));
    let disk = (
        "Microsoft.Compute/disks".to_string(),
        "vm-w-osdisk".to_string(),
    );
    // Every delete either names what stands or answers true with nothing left; the disk goes. Once
    // the VM is gone, what remains is deleted by name (a delete by id no longer finds the VM).
    let mut done = false;
    let mut vm_gone = false;
    for attempt in 1..=3 {
        let deleted = if vm_gone {
            p.delete_named("lab", "vm-w").await
        } else {
            p.delete("vm-w").await
        };
        match deleted {
            Ok(gone) => {
                assert!(gone, "attempt {attempt}");
                assert_eq!(
                    stray(&f),
                    vec![],
                    "attempt {attempt}: true with the disk standing"
                );
                done = true;
                break;
            }
            Err(Error::Leftovers { left, .. }) => {
                assert!(
                    left.iter().any(|l| l.starts_with("OS disk vm-w-osdisk")),
                    "attempt {attempt}: {left:?}"
                );
                vm_gone = !left.iter().any(|l| l.starts_with("VM vm-w"));
                assert!(
                    stray(&f).contains(&disk),
                    "attempt {attempt}: {:?}",
                    stray(&f)
                );
            }
            Err(e) => panic!("attempt {attempt}: {e:?}"),
        }
    }
    assert!(
        done,
        "three deletes did not remove the disk: {:?}",
        stray(&f)
    );
    // Both faults fired: the disk was tagged and deleted only after them.
    assert_eq!(
        f.control()
            .count(&reqwest::Method::PATCH, "/disks/vm-w-osdisk"),
        2
    );
    assert_eq!(
        f.control()
            .count(&reqwest::Method::DELETE, "/disks/vm-w-osdisk"),
        2
    );
}

/// A create whose VM `PUT` Azure accepted, and whose polls of the VM's operation are then throttled,
/// fails as throttled but never as "made nothing": the VM stands (the read after the failure shows
/// it), and a caller that gave the name up would leave it unknown.
#[tokio::test]
async fn a_create_throttled_after_the_vm_was_made_did_not_make_nothing() {
    let f = fake().await;
    let p = provider(&f, "stack-1").await;
    // Only the VM's operation (Microsoft.Compute): the network resources before it are made as usual.
    f.control().inject(Rule::new(
        Some("GET".parse().unwrap()),
        "/providers/Microsoft.Compute/locations/westeurope/operations/",
        Fault::Status {
            status: 429,
            body: serde_json::json!({"error": {"code": "TooManyRequests", "message": "slow down"}}),
            headers: vec![("Retry-After".into(), "0".into())],
        },
        1_000,
    ));
    let e = p.create(&spec("vm-t", AMD)).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Throttled, "{e}");
    assert!(
        !e.made_nothing(),
        "the VM was made before the throttled polls: {e}"
    );
    f.control().clear_faults();
    assert!(p.machine_named("lab", "vm-t").await.unwrap().is_some());
}

/// An id is a raw segment of the VM's URL: `.` or `..` there would make `machine` read, and
/// `delete` act on, the VM collection or the resource group. Both are refused before any call.
#[tokio::test]
async fn dot_segment_ids_are_refused_before_any_call() {
    let f = fake().await;
    let p = provider(&f, "stack-1").await;
    for id in [".", ".."] {
        let e = p.machine(id).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidSpec, "{id}: {e}");
        assert!(e.to_string().contains("id"), "{e}");
        let e = p.delete(id).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidSpec, "{id}: {e}");
    }
    assert_eq!(f.control().log().len(), 0, "{:?}", f.control().log());
}

/// A create whose VM `PUT` Azure accepted and whose operation then outlasts the operation timeout
/// (a passing failure), while reads do not show the new VM yet: a read or a delete of the VM
/// answers 404 then, which is no proof that it is gone. The VM stands, so the failure says it may
/// have acted and names the VM, nothing it still uses is removed, and a retried create adopts it.
#[tokio::test]
async fn a_vm_made_before_a_passing_failure_is_not_believed_gone_while_reads_lag() {
    let f = fake().await;
    f.set_visibility_delay(std::time::Duration::from_secs(3));
    // Every poll of the VM's operation answers it still running.
    f.control().inject(Rule::new(
        Some("GET".parse().unwrap()),
        "/providers/Microsoft.Compute/locations/westeurope/operations/",
        Fault::Status {
            status: 200,
            body: serde_json::json!({"name": "op", "status": "InProgress"}),
            headers: vec![],
        },
        1_000,
    ));
    let p = orca_azure::AzureProvider::new(
        settings(&f)
            .operation_timeout(std::time::Duration::from_millis(300))
            .build()
            .unwrap(),
        "stack-1",
    )
    .await
    .unwrap();
    let e = p.create(&spec("vm-r1", AMD)).await.unwrap_err();
    f.control().clear_faults();
    assert!(!e.made_nothing(), "{e}");
    let vm = (
        "Microsoft.Compute/virtualMachines".to_string(),
        "vm-r1".to_string(),
    );
    let stands = f.resources(RESOURCE_GROUP).contains(&vm);
    match &e {
        Error::Leftovers { left, .. } => assert!(
            !stands || left.iter().any(|l| l.starts_with("VM vm-r1")),
            "the VM stands and the leftovers do not name it: {left:?}"
        ),
        e => {
            assert!(stands, "{e}");
            assert!(e.is_retryable(), "{e}");
            assert!(e.to_string().contains("VM vm-r1 stands"), "{e}");
            assert_eq!(stray(&f).len(), 5, "{:?}", stray(&f));
            // A retried create adopts it once reads show it, and a delete removes everything.
            let again = p.create(&spec("vm-r1", AMD)).await.unwrap();
            assert!(matches!(again, Created::Adopted(_)), "{again:?}");
            assert!(p.delete("vm-r1").await.unwrap());
            assert_eq!(stray(&f), vec![]);
        }
    }
}

/// A failed create's clean-up deletes the VM it made even while reads do not show that VM yet:
/// the 404 its delete meets then is no proof it is gone, so the VM is read until it shows and
/// deleted, and nothing of the machine stays.
#[tokio::test]
async fn a_failed_vm_that_reads_do_not_show_yet_is_removed_once_they_do() {
    let f = fake().await;
    f.set_visibility_delay(std::time::Duration::from_secs(1));
    f.fail_allocation(AMD, LOCATION, "AllocationFailed");
    let p = provider(&f, "stack-1").await;
    match p.create(&spec("vm-r3", AMD)).await {
        Ok(Created::NoStock { left, message, .. }) => {
            assert!(left.is_empty(), "{message}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(stray(&f), vec![], "the failed VM or what it holds stayed");
}

/// A failed VM whose `PUT` Azure accepted and that reads still do not show once the visibility
/// window has passed is not taken for gone: the no-stock answer names it (and its OS disk) among
/// what remains, and a delete by name removes it all once reads show it.
#[tokio::test]
async fn a_failed_vm_that_reads_never_show_is_named_as_left() {
    let f = fake().await;
    f.set_visibility_delay(std::time::Duration::from_secs(4));
    f.fail_allocation(AMD, LOCATION, "AllocationFailed");
    let p = orca_azure::AzureProvider::new(
        settings(&f)
            .visibility_window(std::time::Duration::from_millis(500))
            .build()
            .unwrap(),
        "stack-1",
    )
    .await
    .unwrap();
    let message = match p.create(&spec("vm-r4", AMD)).await {
        Ok(Created::NoStock { message, .. }) => message,
        other => panic!("{other:?}"),
    };
    let (_, left) = message
        .split_once("the clean-up could not remove: ")
        .unwrap_or_else(|| panic!("{message}"));
    assert!(left.starts_with("VM vm-r4 ("), "{message}");
    assert!(
        left.contains("within the visibility window (500ms): it may stand"),
        "{message}"
    );
    assert!(left.contains("OS disk vm-r4-osdisk"), "{message}");
    assert_eq!(stray(&f).len(), 5, "{:?}", stray(&f));
    tokio::time::sleep(std::time::Duration::from_secs(4)).await;
    assert!(p.delete_named("lab", "vm-r4").await.unwrap());
    assert_eq!(stray(&f), vec![]);
}

/// Resource Manager answers every call into a resource group that does not exist with 404
/// `ResourceGroupNotFound`, and every call into an unknown subscription with 404
/// `SubscriptionNotFound`. Neither says that a machine is gone: read as "not found", a delete of a
/// live machine answered done and a read answered none, and an autoscaler would drop from its
/// record machines that run on. Each is the setting that names the group or the subscription.
#[tokio::test]
async fn a_resource_group_or_subscription_that_does_not_exist_is_the_setting_named() {
    let f = fake().await;
    let settings_error = |e: Error, key: &str| match e {
        Error::InvalidSettings { keys, message } => {
            assert!(keys.iter().any(|k| k == key), "{keys:?}: {message}");
        }
        other => panic!("a settings error naming {key} expected, got {other:?}"),
    };
    let made = provider(&f, "owner-1").await;
    let m = match made.create(&spec("web-1", AMD)).await.unwrap() {
        Created::Machine(m) => m,
        other => panic!("{other:?}"),
    };

    let wrong_group = orca_azure::AzureProvider::new(
        settings(&f).resource_group("rg-typo").build().unwrap(),
        "owner-1",
    )
    .await
    .expect("provider");
    const GROUP: &str = "ORCA_AZURE_RESOURCE_GROUP";
    settings_error(wrong_group.delete(&m.id).await.unwrap_err(), GROUP);
    settings_error(wrong_group.machine(&m.id).await.unwrap_err(), GROUP);
    settings_error(wrong_group.machines("lab").await.unwrap_err(), GROUP);
    settings_error(
        wrong_group.delete_named("lab", "web-1").await.unwrap_err(),
        GROUP,
    );

    let wrong_subscription = orca_azure::AzureProvider::new(
        settings(&f)
            .subscription_id("11111111-2222-3333-4444-555555555555")
            .build()
            .unwrap(),
        "owner-1",
    )
    .await
    .expect("provider");
    const SUBSCRIPTION: &str = "ORCA_AZURE_SUBSCRIPTION_ID";
    settings_error(
        wrong_subscription.delete(&m.id).await.unwrap_err(),
        SUBSCRIPTION,
    );
    settings_error(
        wrong_subscription.machine(&m.id).await.unwrap_err(),
        SUBSCRIPTION,
    );

    // The machine was never touched.
    let listed = made.machines("lab").await.unwrap();
    assert_eq!(
        listed.iter().map(|m| m.name.as_str()).collect::<Vec<_>>(),
        ["web-1"]
    );
}

/// Azure refuses a VM whose OS disk would take the name of a disk that exists (409
/// `ConflictingUserInput`, "Only CreateOption.Attach is supported"): the disk is another's (another
/// tool's, another owner's), so the create fails naming it, leaves that disk as it was and removes
/// what it made for the VM.
#[tokio::test]
async fn a_disk_of_the_os_disks_name_is_left_alone_and_named() {
    let f = fake().await;
    let p = provider(&f, "stack-1").await;
    let path = format!(
        "/subscriptions/{}/resourceGroups/{RESOURCE_GROUP}/providers/Microsoft.Compute/disks/web-9-osdisk?api-version=2024-03-02",
        orca_fakes::azure::SUBSCRIPTION
    );
    let disk = serde_json::json!({"location": LOCATION, "tags": {"team": "data"},
        "properties": {"creationData": {"createOption": "Empty"}, "diskSizeGB": 64}});
    let (status, _) = raw(&f, reqwest::Method::PUT, &path, Some(disk)).await;
    assert!(status < 300, "{status}");
    let before = stray(&f);

    let err = p.create(&spec("web-9", AMD)).await.unwrap_err();
    assert!(err.to_string().contains("web-9-osdisk"), "{err}");
    assert!(!err.is_retryable(), "{err:?}");
    assert_eq!(stray(&f), before, "only the disk that was there");
    let (_, disk) = raw(&f, reqwest::Method::GET, &path, None).await;
    assert_eq!(disk["tags"], serde_json::json!({"team": "data"}), "{disk}");
    assert_eq!(disk["properties"]["diskSizeGB"], 64, "{disk}");
    assert!(disk.get("managedBy").is_none_or(|m| m.is_null()), "{disk}");
}

/// A delete of a VM whose create is still running preempts it: Azure ends the create's operation
/// `Canceled` with `OperationPreempted`. The create then fails saying the VM was deleted while it
/// was being made, as a passing failure (a retry makes a new one once it is gone), never that the
/// VM stands for a retry to adopt.
#[tokio::test(start_paused = true)]
async fn a_create_whose_vm_is_deleted_meanwhile_says_so() {
    let f = fake().await;
    f.set_operation_time(std::time::Duration::from_secs(30));
    let p = provider(&f, "stack-1").await;
    let making = {
        let p = p.clone();
        tokio::spawn(async move { p.create(&spec("vm-p", AMD)).await })
    };
    let vm_made = |f: &orca_fakes::azure::FakeAzure| {
        f.resources(RESOURCE_GROUP)
            .iter()
            .any(|(t, n)| t == "Microsoft.Compute/virtualMachines" && n == "vm-p")
    };
    while !vm_made(&f) {
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
    assert!(p.delete("vm-p").await.unwrap());
    let err = making.await.unwrap().unwrap_err();
    assert!(err.is_retryable(), "{err:?}");
    let said = err.to_string();
    assert!(said.contains("deleted while"), "{said}");
    assert!(!said.contains("stands"), "{said}");
    assert!(!vm_made(&f));
}
