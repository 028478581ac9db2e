//! `delete_named`: what a create of a name made, found and removed by name: the instance, and the
//! boot disk a create leaves when its insert found no room and its clean-up could not remove it.

use std::time::Duration;

use crate::common;

use orca_fakes::gce::{FakeGce, ZONE};
use orca_fakes::{Fault, Rule};
use orca_gce::GceProvider;
use orca_machines::{Created, Error, MachineSpec, Provider};
use reqwest::Method;
use serde_json::{Value, json};

use common::{any_zone, provider};

const OTHER_ZONE: &str = "us-central1-a";

fn spec(name: &str) -> MachineSpec {
    MachineSpec::new(name, "e2-small", ZONE, "lab")
}

fn labels(pool: &str, owner: &str) -> Value {
    json!({"orca": "pool", "orca-pool": pool, "orca-owner": owner})
}

/// 403 `forbidden` to the next `times` DELETEs of paths holding `path`.
fn refuse_delete(path: &str, times: u32) -> Rule {
    Rule::new(
        Some(Method::DELETE),
        path,
        Fault::Status {
            status: 403,
            body: json!({"error": {"code": 403, "message": "no", "errors": [{"reason": "forbidden", "domain": "global", "message": "no"}]}}),
            headers: vec![],
        },
        times,
    )
}

/// What the driver's boot disk names of instance `name` start with: the name, cut to 54
/// characters, without a trailing `-`.
fn disk_stem(name: &str) -> &str {
    name.get(..54).unwrap_or(name).trim_end_matches('-')
}

/// A no-stock create of `name` whose clean-up could not remove the boot disk: answers the disk's
/// name.
async fn no_stock_leaving_its_disk(fake: &FakeGce, p: &GceProvider, name: &str) -> String {
    let stem = disk_stem(name);
    fake.exhaust("e2-small", ZONE);
    fake.control()
        .inject(refuse_delete(&format!("/disks/{stem}-"), 1));
    let got = p.create(&spec(name)).await.unwrap();
    fake.restore("e2-small", ZONE);
    let Created::NoStock { message, left, .. } = &got else {
        panic!("{got:?}");
    };
    let disk = fake
        .disk_names(ZONE)
        .into_iter()
        .find(|d| d.starts_with(&format!("{stem}-")))
        .unwrap_or_else(|| panic!("no disk left: {message}"));
    assert!(message.contains(&disk), "{message}");
    // The answer says so in its type, not only in its words.
    assert_eq!(left, &[format!("disk {ZONE}:{disk}")], "{message}");
    assert!(got.may_have_left());
    disk
}

/// A clean no stock says it left nothing.
#[tokio::test]
async fn a_clean_no_stock_leaves_nothing_in_its_answer() {
    let fake = FakeGce::start().await.unwrap();
    let p = provider(&fake, "stack-1").await;
    fake.exhaust("e2-small", ZONE);
    let got = p.create(&spec("vm-clean")).await.unwrap();
    assert!(
        matches!(&got, Created::NoStock { left, .. } if left.is_empty()),
        "{got:?}"
    );
    assert!(!got.may_have_left());
    assert!(fake.disk_names(ZONE).is_empty());
}

#[tokio::test]
async fn the_disk_a_no_stock_create_left_goes_by_name_and_nothing_of_another_owner_pool_or_name() {
    let fake = FakeGce::start().await.unwrap();
    let p = provider(&fake, "stack-1").await;
    let disk = no_stock_leaving_its_disk(&fake, &p, "vm-left").await;
    // Disks of that name's shape of other owners and pools, and disks no create of it made.
    let stack_2 = "vm-left-0000beef";
    let other_pool = "vm-left-0000cafe";
    let no_owner = "vm-left-0000f00d";
    fake.put_disk(ZONE, stack_2, labels("lab", "stack-2"));
    fake.put_disk(ZONE, other_pool, labels("other", "stack-1"));
    fake.put_disk(ZONE, no_owner, json!({"orca": "pool", "orca-pool": "lab"}));
    let never = [
        ("vm-left-0000abcd", json!({"team": "data"})),
        ("vm-left-2-0000abcd", labels("lab", "stack-1")),
        ("vm-left-00001234-0000abcd", labels("lab", "stack-1")),
        ("vm-left", labels("lab", "stack-1")),
    ];
    for (name, l) in &never {
        fake.put_disk(ZONE, name, l.clone());
    }
    let mut standing = fake.disk_names(ZONE);
    // Each owner and pool removes its own disk of that name, and that one alone.
    let callers = [
        (provider(&fake, "stack-2").await, "lab", stack_2),
        (provider(&fake, "").await, "lab", no_owner),
        (provider(&fake, "stack-1").await, "other", other_pool),
        (p, "lab", disk.as_str()),
    ];
    for (q, pool, own) in &callers {
        assert!(q.delete_named(pool, "vm-left").await.unwrap(), "{own}");
        standing.retain(|d| d != own);
        assert_eq!(fake.disk_names(ZONE), standing, "{own}");
        assert!(!q.delete_named(pool, "vm-left").await.unwrap(), "{own}");
    }
    let mut never: Vec<&str> = never.iter().map(|(n, _)| *n).collect();
    never.sort();
    assert_eq!(fake.disk_names(ZONE), never);
}

#[tokio::test]
async fn a_disk_that_cannot_be_removed_is_named_and_a_second_call_removes_it() {
    let fake = FakeGce::start().await.unwrap();
    let p = provider(&fake, "stack-1").await;
    let disk = no_stock_leaving_its_disk(&fake, &p, "vm-stuck").await;
    fake.control()
        .inject(refuse_delete(&format!("/disks/{disk}"), 1));
    let e = p.delete_named("lab", "vm-stuck").await.unwrap_err();
    match &e {
        Error::Leftovers { left, error } => {
            assert_eq!(left, &[format!("disk {ZONE}:{disk}")], "{e}");
            assert!(
                matches!(**error, Error::PermissionDenied { .. }),
                "{error:?}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(fake.disk(ZONE, &disk).is_some());
    assert!(p.delete_named("lab", "vm-stuck").await.unwrap());
    assert!(fake.disk(ZONE, &disk).is_none());
}

#[tokio::test]
async fn a_provider_of_every_zone_removes_the_machine_and_the_disks_of_that_name_in_any_zone() {
    let fake = FakeGce::start().await.unwrap();
    let p = GceProvider::new(any_zone(&fake).page_size(1).build().unwrap(), "stack-1")
        .await
        .unwrap();
    let m = p.create(&spec("vm-both")).await.unwrap().machine().unwrap();
    fake.put_disk(OTHER_ZONE, "vm-both-0000abcd", labels("lab", "stack-1"));
    fake.put_disk(OTHER_ZONE, "vm-both-0000beef", labels("lab", "stack-2"));
    assert!(p.delete_named("lab", "vm-both").await.unwrap());
    assert!(p.machine(&m.id).await.unwrap().is_none());
    assert!(fake.instance_names(ZONE).is_empty());
    assert!(
        fake.disk_names(ZONE).is_empty(),
        "{:?}",
        fake.disk_names(ZONE)
    );
    assert_eq!(fake.disk_names(OTHER_ZONE), ["vm-both-0000beef"]);

    // Nothing of that name: one listing of instances and one of disks, whatever the zones.
    fake.put_disk(ZONE, "vm-else-0000abcd", labels("lab", "stack-1"));
    let one_zone = provider(&fake, "stack-1").await;
    for q in [&p, &one_zone] {
        fake.control().clear_log();
        assert!(!q.delete_named("lab", "vm-both").await.unwrap());
        let log = fake.control().log();
        // (A provider's first call fetches its access token.)
        let paths: Vec<&str> = log
            .iter()
            .map(|l| l.path.as_str())
            .filter(|p| *p != "/token")
            .collect();
        assert_eq!(paths.len(), 2, "{paths:?}");
    }
    assert_eq!(fake.disk_names(ZONE), ["vm-else-0000abcd"]);
}

#[tokio::test]
async fn a_machine_that_cannot_be_removed_is_named() {
    let fake = FakeGce::start().await.unwrap();
    let p = provider(&fake, "stack-1").await;
    let m = p.create(&spec("vm-held")).await.unwrap().machine().unwrap();
    fake.control()
        .inject(refuse_delete("/instances/vm-held", 1));
    let e = p.delete_named("lab", "vm-held").await.unwrap_err();
    match &e {
        Error::Leftovers { left, .. } => {
            assert_eq!(left, &[format!("instance {}", m.id)], "{e}")
        }
        other => panic!("{other:?}"),
    }
    assert!(p.delete_named("lab", "vm-held").await.unwrap());
    assert!(fake.instance_names(ZONE).is_empty());
    assert!(fake.disk_names(ZONE).is_empty());
}

/// Two names of 58 characters alike in their first 54, whose boot disks' names (cut to 54
/// characters) look alike.
fn long_names() -> (String, String) {
    let alike = format!("vm-{}", "x".repeat(51));
    (format!("{alike}-one"), format!("{alike}-two"))
}

fn labels_of_machine(pool: &str, owner: &str, machine: &str) -> Value {
    let mut l = labels(pool, owner);
    l["orca-machine"] = json!(machine);
    l
}

#[tokio::test]
async fn a_loose_boot_disk_goes_with_its_own_name_and_not_with_a_name_alike_in_54_characters() {
    let fake = FakeGce::start().await.unwrap();
    let p = provider(&fake, "stack-1").await;
    let (one, two) = long_names();
    assert_eq!(disk_stem(&one), disk_stem(&two));
    let loose = no_stock_leaving_its_disk(&fake, &p, &one).await;
    let m = p.create(&spec(&two)).await.unwrap().machine().unwrap();
    let held = fake
        .disk_names(ZONE)
        .into_iter()
        .find(|d| *d != loose)
        .unwrap();
    let held_labels = fake.disk(ZONE, &held).unwrap()["labels"].clone();

    // The other name's machine and disk go; the loose disk of the first stays.
    assert!(p.delete_named("lab", &two).await.unwrap());
    assert!(fake.instance_names(ZONE).is_empty());
    assert_eq!(fake.disk_names(ZONE), [loose.as_str()]);
    assert!(!p.delete_named("lab", &two).await.unwrap());
    assert_eq!(fake.disk_names(ZONE), [loose.as_str()]);

    // Each disk names its machine; the machine's own labels are the ones it was given.
    let disk = fake.disk(ZONE, &loose).unwrap();
    assert_eq!(disk["labels"], labels_of_machine("lab", "stack-1", &one));
    assert_eq!(held_labels, labels_of_machine("lab", "stack-1", &two));
    assert_eq!(
        m.labels,
        orca_machines::labels::ownership_labels("lab", "stack-1")
    );

    // Its own name removes it.
    assert!(p.delete_named("lab", &one).await.unwrap());
    assert!(fake.disk_names(ZONE).is_empty());
}

#[tokio::test]
async fn a_provider_of_every_zone_removes_the_disks_that_name_their_machine_and_no_others() {
    let fake = FakeGce::start().await.unwrap();
    let p = GceProvider::new(any_zone(&fake).page_size(1).build().unwrap(), "stack-1")
        .await
        .unwrap();
    let (one, two) = long_names();
    let stem = disk_stem(&one);
    let one_disk = format!("{stem}-0000abcd");
    let two_disk = format!("{stem}-0000beef");
    fake.put_disk(
        OTHER_ZONE,
        &one_disk,
        labels_of_machine("lab", "stack-1", &one),
    );
    fake.put_disk(ZONE, &two_disk, labels_of_machine("lab", "stack-1", &two));
    // Never removed by name: another owner's disk naming the machine; a disk of an older version
    // (no machine label) whose cut name does not tell which machine it was made for; a disk of a
    // short name's shape that names a long machine whose first 54 characters are that name and
    // hyphens.
    let hyphens = format!("vm-1{}x", "-".repeat(50));
    let never = [
        (
            OTHER_ZONE,
            format!("{stem}-0000cafe"),
            labels_of_machine("lab", "stack-2", &one),
        ),
        (ZONE, format!("{stem}-0000f00d"), labels("lab", "stack-1")),
        (
            ZONE,
            "vm-1-0000abcd".to_string(),
            labels_of_machine("lab", "stack-1", &hyphens),
        ),
    ];
    for (zone, disk, l) in &never {
        fake.put_disk(zone, disk, l.clone());
    }
    assert_eq!(disk_stem(&hyphens), "vm-1");

    assert!(p.delete_named("lab", &two).await.unwrap());
    assert!(fake.disk(ZONE, &two_disk).is_none());
    assert!(fake.disk(OTHER_ZONE, &one_disk).is_some());
    assert!(p.delete_named("lab", &one).await.unwrap());
    assert!(fake.disk(OTHER_ZONE, &one_disk).is_none());
    assert!(!p.delete_named("lab", "vm-1").await.unwrap());
    // A long name: one listing of instances and one of disks (filtered on the machine label too,
    // at page size 1 with the pool's other disks standing), whatever the zones.
    for name in [&one, &two] {
        fake.control().clear_log();
        assert!(!p.delete_named("lab", name).await.unwrap(), "{name}");
        let log = fake.control().log();
        let paths: Vec<&str> = log
            .iter()
            .map(|l| l.path.as_str())
            .filter(|p| *p != "/token")
            .collect();
        assert_eq!(paths.len(), 2, "{paths:?}");
    }
    for (zone, disk, _) in &never {
        assert!(fake.disk(zone, disk).is_some(), "{zone}:{disk}");
    }
}

/// Runs a create of `name` on `p` and stops it (drops it, as a caller's timeout does) once Compute
/// Engine has accepted its insert: the fake holds the instance, which reads may not show yet.
async fn stop_once_accepted(fake: &FakeGce, p: &GceProvider, name: &str) {
    let accepted = async {
        while fake.instance(ZONE, name).is_none() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    let spec = spec(name);
    tokio::select! {
        got = p.create(&spec) => panic!("the create answered before it was stopped: {got:?}"),
        () = accepted => {}
    }
}

#[tokio::test]
async fn a_create_stopped_before_it_answered_leaves_a_machine_that_delete_named_removes() {
    let fake = FakeGce::start().await.unwrap();
    let p = provider(&fake, "stack-1").await;
    // Compute Engine shows the new instance late (within the provider's visibility window, 10 s),
    // and the insert's operation runs on after the create is stopped.
    fake.set_visibility_delay(Duration::from_secs(2));
    fake.set_operation_time(Duration::from_secs(1));
    stop_once_accepted(&fake, &p, "vm-stopped").await;
    assert!(p.delete_named("lab", "vm-stopped").await.unwrap());
    assert!(fake.instance(ZONE, "vm-stopped").is_none(), "it stands");
    assert!(
        fake.disk_names(ZONE).is_empty(),
        "{:?}",
        fake.disk_names(ZONE)
    );
    // Removed: the name is an ordinary one again, one listing of instances and one of disks.
    fake.control().clear_log();
    assert!(!p.delete_named("lab", "vm-stopped").await.unwrap());
    let log = fake.control().log();
    let paths: Vec<&str> = log.iter().map(|l| l.path.as_str()).collect();
    assert_eq!(paths.len(), 2, "{paths:?}");
}

#[tokio::test]
async fn an_instance_that_holds_a_boot_disk_of_the_name_unshown_is_read_and_removed() {
    let fake = FakeGce::start().await.unwrap();
    let p = provider(&fake, "stack-1").await;
    fake.set_visibility_delay(Duration::from_secs(2));
    fake.set_operation_time(Duration::from_secs(1));
    stop_once_accepted(&fake, &p, "vm-other").await;
    // Another process (which knows of no stopped create): the boot disk, held by an instance the
    // listing does not show, proves that instance exists.
    let q = provider(&fake, "stack-1").await;
    assert!(q.delete_named("lab", "vm-other").await.unwrap());
    assert!(fake.instance(ZONE, "vm-other").is_none(), "it stands");
    assert!(
        fake.disk_names(ZONE).is_empty(),
        "{:?}",
        fake.disk_names(ZONE)
    );
}

#[tokio::test]
async fn an_instance_not_shown_within_the_window_is_named_so_that_the_caller_calls_again() {
    let fake = FakeGce::start().await.unwrap();
    let p = provider(&fake, "stack-1").await;
    // Shown far later than the other process's window (long beside it, so that a slow run still
    // finds it hidden).
    let delay = Duration::from_secs(3);
    fake.set_visibility_delay(delay);
    stop_once_accepted(&fake, &p, "vm-hidden").await;
    let q = GceProvider::new(
        common::builder(&fake)
            .visibility_window(Duration::from_millis(200))
            .build()
            .unwrap(),
        "stack-1",
    )
    .await
    .unwrap();
    let e = q.delete_named("lab", "vm-hidden").await.unwrap_err();
    match &e {
        Error::Leftovers { left, .. } => assert_eq!(
            left,
            &[format!("instance {ZONE}:vm-hidden (not shown yet)")],
            "{e}"
        ),
        other => panic!("{other:?}"),
    }
    assert!(fake.instance(ZONE, "vm-hidden").is_some());
    // Called again once Compute Engine shows it: removed.
    tokio::time::sleep(delay).await;
    assert!(q.delete_named("lab", "vm-hidden").await.unwrap());
    assert!(fake.instance(ZONE, "vm-hidden").is_none(), "it stands");
    assert!(fake.disk_names(ZONE).is_empty());
}
