//! `delete_named`: what a create of a name made, found and removed by name: the instance, and the
//! boot disk a create leaves when its insert found no room and its clean-up could not remove it.

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

/// A no-stock create of `name` whose clean-up could not remove the boot disk: answers the disk's
/// name.
async fn no_stock_leaving_its_disk(fake: &FakeGce, p: &GceProvider, name: &str) -> String {
    fake.exhaust("e2-small", ZONE);
    fake.control()
        .inject(refuse_delete(&format!("/disks/{name}-"), 1));
    let got = p.create(&spec(name)).await.unwrap();
    fake.restore("e2-small", ZONE);
    let Created::NoStock { message, left, .. } = &got else {
        panic!("{got:?}");
    };
    let disk = fake
        .disk_names(ZONE)
        .into_iter()
        .find(|d| d.starts_with(&format!("{name}-")))
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
