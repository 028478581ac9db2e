//! Every step, refusal and message of the cloud host commands against the in-memory provider and the
//! simulated fleet.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::{declared, request, shown, WORDS};
use orca::memory::{FaultKind, MemoryCloud, Operation};
use orca::{ErrorKind, MachineSpec, Provider};
use stado::channel::{FakeFleet, FirstBoot};
use stado::profile::{Profile, Selection};
use stado::registry::Registry;
use stado::{Stado, Verdict};

struct Lab {
    _dir: tempfile::TempDir,
    cloud: MemoryCloud,
    fleet: FakeFleet,
    s: Stado,
}

fn lab() -> Lab {
    lab_on(MemoryCloud::new(), None)
}

/// stado in a home of its own on `cloud`, its machines made under the home's owner (or `owner`).
fn lab_on(cloud: MemoryCloud, owner: Option<&str>) -> Lab {
    let dir = tempfile::tempdir().unwrap();
    let home = common::home(dir.path(), "fake");
    if let Some(o) = owner {
        let mut p = Profile::load(&home).unwrap();
        p.set("owner", o).unwrap();
        p.save(&home).unwrap();
    }
    let provider: Arc<dyn Provider> = Arc::new(cloud.provider(&common::owner(&home)).unwrap());
    let fleet = FakeFleet::default().with_cloud(cloud.clone());
    let s = common::stado_on(home, "fake", provider, &fleet);
    Lab {
        _dir: dir,
        cloud,
        fleet,
        s,
    }
}

impl Lab {
    async fn create(&self, name: &str) -> stado::CreateReport {
        self.s.create(&request(name, "zone-a", "amd64-small")).await
    }

    /// The machines of stado's pool in the cloud, as (name, id), sorted.
    fn in_cloud(&self) -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = self
            .cloud
            .all_machines()
            .into_iter()
            .map(|m| (m.name, m.id))
            .collect();
        v.sort();
        v
    }

    fn set_profile(&self, key: &str, value: Option<&str>) {
        let mut p = Profile::load(&self.s.home).unwrap();
        match value {
            Some(v) => p.set(key, v).unwrap(),
            None => {
                p.unset(key);
            }
        }
        p.save(&self.s.home).unwrap();
    }

    fn vm_id(&self, name: &str) -> String {
        declared(&self.s)
            .into_iter()
            .find(|(n, _)| n == name)
            .unwrap()
            .1
    }
}

fn error(r: &stado::CreateReport) -> String {
    r.error
        .as_ref()
        .map(|e| e.message().to_string())
        .unwrap_or_default()
}

#[tokio::test]
async fn a_created_host_is_declared_enrolled_and_booted_in_nine_steps() {
    let lab = lab();
    let r = lab.create("h1").await;
    assert!(r.ok, "{:?}", r.error);
    assert_eq!(
        r.steps.iter().map(|s| s.step).collect::<Vec<_>>(),
        (1..=9).collect::<Vec<u8>>()
    );
    let names: Vec<&str> = r.steps.iter().map(|s| s.name).collect();
    assert_eq!(
        names,
        [
            "name",
            "price",
            "egress",
            "admission",
            "fleet_key",
            "resources",
            "enrol",
            "record",
            "first_boot"
        ]
    );
    let reg = Registry::load(&lab.s.home).unwrap();
    let t = reg.target("h1").unwrap();
    let c = t.cloud.as_ref().unwrap();
    let m = lab
        .cloud
        .all_machines()
        .into_iter()
        .find(|m| m.name == "h1")
        .unwrap();
    assert_eq!(
        (
            c.provider.as_str(),
            c.location.as_str(),
            c.size.as_str(),
            c.disk_gb
        ),
        ("fake", "zone-a", "amd64-small", 64)
    );
    assert_eq!(
        (c.hourly_usd, c.priced_in.as_str(), c.idle_minutes),
        (0.0832, "zone-a", 30)
    );
    assert_eq!(
        (c.address.as_str(), c.vm_id.as_str(), Some(c.created_at)),
        (m.address.as_str(), m.id.as_str(), m.created_at)
    );
    assert_eq!(t.user.as_deref(), Some("stado"));
    // The VM holds the fleet key's public half, admits the fleet's address, joins the group.
    let extras = lab.cloud.extras(&m.id).unwrap();
    let public = std::fs::read_to_string(lab.s.home.fleet_key_pub("h1")).unwrap();
    assert_eq!(extras.ssh_keys, vec![public.trim().to_string()]);
    let egress = FakeFleet::default_egress("build-host");
    assert_eq!(extras.ssh_sources, vec![format!("{egress}/32")]);
    assert_eq!(
        extras.admission_group.as_deref(),
        Some("stado-cloud-hosts-zone-a")
    );
    assert_eq!(extras.disk_gb, Some(64));
    assert!(extras.user_data_len > 0);
    // The host key stado minted is pinned under the target's name.
    let pinned = std::fs::read_to_string(lab.s.home.pinned_host_key("h1")).unwrap();
    assert!(pinned.starts_with("h1 ssh-ed25519 "), "{pinned}");
    let v = r.versions.as_ref().unwrap();
    assert!(v.rustc.starts_with("rustc "), "{v:?}");
    assert_eq!((v.node.as_str(), v.npm.as_str()), ("v18.19.1", "9.2.0"));
    let lines = common::lines(&r);
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("first boot: cloud-init done; rustc ")),
        "{lines:?}"
    );
}

#[tokio::test]
async fn missing_bindings_are_refused_naming_every_missing_key() {
    let lab = lab();
    lab.set_profile("azure.vnet", None);
    lab.set_profile("azure.vm_username", None);
    let want = "a cloud host on Azure is addressed with bindings this deployment does not declare: azure.vnet, azure.vm_username; stado config set declares each.";
    let r = lab.create("h1").await;
    assert_eq!(error(&r), want);
    assert!(r.steps.is_empty(), "refused before the first step");
    assert_eq!(lab.s.list().await.unwrap_err().message(), want);
    assert_eq!(lab.s.delete("h1").await.unwrap_err().message(), want);
    assert_eq!(lab.s.reap(true).await.unwrap_err().message(), want);
    assert_eq!(lab.cloud.requests(), 0, "no cloud call");
    assert!(lab.cloud.all_machines().is_empty());
}

/// Writes `value` under `key` straight into the profile file, as a hand edit would, past `config set`.
fn edit_profile_by_hand(lab: &Lab, key: &str, value: serde_json::Value) {
    let path = lab.s.home.profile_path();
    let mut p: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    p[key] = value;
    std::fs::write(&path, serde_json::to_vec_pretty(&p).unwrap()).unwrap();
}

#[tokio::test]
async fn a_hand_edited_profile_value_is_refused_on_load_naming_the_key_and_the_file() {
    let lab = lab();
    let path = lab.s.home.profile_path().display().to_string();
    for (key, value, good) in [
        (
            "api.url",
            "https://x'; touch /tmp/owned; echo '",
            "https://stado.example",
        ),
        (
            "api.url",
            "https://ci:hunter22@stado.example",
            "https://stado.example",
        ),
        (
            "azure.vm_username",
            "stado\n  - [touch, /tmp/owned]",
            "stado",
        ),
    ] {
        edit_profile_by_hand(&lab, key, value.into());
        let e = error(&lab.create("h1").await);
        assert!(e.contains(key) && e.contains(&path), "{key}: {e}");
        assert!(
            !e.contains("hunter22"),
            "a password in a URL is never shown: {e}"
        );
        assert_eq!(
            lab.fleet.host("build-host").commands,
            0,
            "{key}: no command reached a host"
        );
        assert_eq!(lab.cloud.requests(), 0, "{key}: no cloud call");
        let e = Profile::load(&lab.s.home).unwrap_err();
        assert!(e.message().contains(key), "{e}");
        // The command the refusal names mends it.
        stado::profile::config_set(&lab.s.home, key, good).unwrap();
        Profile::load(&lab.s.home).unwrap();
    }
    assert!(lab.create("h1").await.ok, "the profile set again is used");
}

#[tokio::test]
async fn a_provider_not_enabled_is_refused_and_the_environment_selects_for_one_invocation() {
    let mut lab = lab();
    lab.set_profile("providers_disabled", Some("fake"));
    let e = error(&lab.create("h1").await);
    assert!(e.starts_with("the provider fake is not enabled in this profile (providers: fake; providers_disabled: fake)"), "{e}");
    lab.s.selection = Selection {
        providers: Some("fake".into()),
        disabled: Some(String::new()),
    };
    assert!(
        lab.create("h1").await.ok,
        "WC_PROVIDERS / WC_DISABLED_PROVIDERS select fake for this invocation"
    );
    lab.s.selection = Selection {
        providers: Some("azure".into()),
        disabled: None,
    };
    assert!(lab
        .s
        .list()
        .await
        .unwrap_err()
        .message()
        .contains("as WC_PROVIDERS / WC_DISABLED_PROVIDERS select them"));
}

#[tokio::test]
async fn a_name_already_registered_or_not_an_identifier_is_refused_first() {
    let lab = lab();
    let r = lab.create("build-host").await;
    assert_eq!(error(&r), "target 'build-host' is already registered");
    assert_eq!(r.steps.len(), 1);
    assert!(!r.steps[0].ok);
    let r = lab.create("Build_Host").await;
    assert_eq!(
        error(&r),
        "'Build_Host' is not a target identifier (1 to 63 of a-z, 0-9 and '-', not starting or ending with '-')"
    );
    assert!(lab.create("h1").await.ok);
    assert_eq!(
        error(&lab.create("h1").await),
        "target 'h1' is already registered"
    );
    assert_eq!(lab.in_cloud().len(), 1);
}

#[tokio::test]
async fn the_credit_gate_passes_with_the_operators_words_and_counts_every_declared_host() {
    let lab = lab();
    let r = lab.create("h1").await;
    assert_eq!(r.steps[1].lines, vec![
        "projected hourly burn: 0.0832 USD (h1 amd64-small at 0.0832 USD, priced in zone-a; 0 cloud host(s) already running at 0.00 USD)".to_string(),
        format!("credit: balance 100.00 USD, 99.9168 USD after one hour of all of them, above the floor 20.00 USD (the operator's ruling R-1: \"{WORDS}\")"),
    ]);
    lab.set_profile("azure.locations", Some("zone-a,zone-b"));
    let r = lab.s.create(&request("h2", "zone-b", "amd64-large")).await;
    assert!(r.ok, "{:?}", r.error);
    assert_eq!(
        r.steps[1].lines[0],
        "projected hourly burn: 0.416 USD (h2 amd64-large at 0.3328 USD, priced in zone-a, the highest of zone-a, zone-b; 1 cloud host(s) already running at 0.0832 USD)"
    );
    assert_eq!(
        r.steps[1].lines[1],
        format!("credit: balance 100.00 USD, 99.584 USD after one hour of all of them, above the floor 20.00 USD (the operator's ruling R-1: \"{WORDS}\")")
    );
    let c = r.credit.unwrap();
    assert_eq!(
        (c.balance, c.floor, c.ruling.as_str()),
        (100.0, 20.0, "R-1")
    );
}

#[tokio::test]
async fn the_credit_gate_refuses_when_what_remains_is_not_above_the_floor() {
    let lab = lab();
    assert!(lab.create("h1").await.ok);
    // 20.1664 less 0.0832 (the new host) and 0.0832 (h1) leaves exactly the floor: not above it.
    lab.cloud.set_credit(20.1664, "USD");
    let r = lab.create("h2").await;
    assert_eq!(
        error(&r),
        format!("creating cloud host h2 (amd64-small) in zone-a is refused: the Azure credit balance 20.1664 USD less one hour of amd64-small (0.0832 USD) and one hour of the machines already running (0.0832 USD) is not above the floor 20.00 USD (the operator's ruling R-1: \"{WORDS}\"); 20.00 USD would remain")
    );
    assert_eq!(r.error.as_ref().unwrap().code(), "credit");
    assert!(
        r.steps[1].lines[0].starts_with("projected hourly burn: 0.1664 USD"),
        "the burn is printed before the refusal"
    );
    assert_eq!(
        r.steps.len(),
        2,
        "stops at the gate: no egress asked, nothing made"
    );
    assert_eq!(lab.in_cloud().len(), 1);
    assert!(!lab.s.home.fleet_key("h2").exists());
    lab.cloud.set_credit(20.1665, "USD");
    assert!(
        lab.create("h2").await.ok,
        "a hundredth of a cent above the floor passes"
    );
    // A ruling missing from the profile is named.
    lab.set_profile("azure.credit_floor.words", None);
    let e = error(&lab.create("h3").await);
    assert!(
        e.contains("the Azure credit gate has no floor ruling from the operator")
            && e.contains("azure.credit_floor.words"),
        "{e}"
    );
}

#[tokio::test]
async fn without_admit_from_nothing_is_created() {
    let lab = lab();
    let mut reg = Registry::load(&lab.s.home).unwrap();
    reg.cloud_hosts.admit_from = None;
    common::save_registry(&lab.s.home, &reg);
    let r = lab.create("h1").await;
    assert!(
        error(&r).starts_with("the registry names no host whose address a cloud host admits (cloud_hosts.admit_from is absent); "),
        "{}",
        error(&r)
    );
    assert_eq!(r.steps.last().unwrap().step, 3);
    reg.cloud_hosts.admit_from = Some(vec![]);
    common::save_registry(&lab.s.home, &reg);
    assert!(error(&lab.create("h1").await).contains("(cloud_hosts.admit_from is empty)"));
    reg.cloud_hosts.admit_from = Some(vec!["nowhere".into()]);
    common::save_registry(&lab.s.home, &reg);
    assert!(error(&lab.create("h1").await)
        .starts_with("cloud_hosts.admit_from names nowhere, which is not a registered target"));
    assert!(lab.cloud.all_machines().is_empty());
    assert!(lab.cloud.admission_groups().is_empty(), "nothing admitted");
}

#[tokio::test]
async fn an_admit_from_host_that_does_not_answer_stops_create_before_anything_is_made() {
    let lab = lab();
    lab.fleet
        .update("build-host", |h| h.answers = false)
        .unwrap();
    let r = lab.create("h1").await;
    assert_eq!(
        error(&r),
        "the admit_from host build-host did not tell its public address (curl of https://stado.example/api/egress over its host channel): ssh: connect to host 192.0.2.10 port 22: Connection timed out"
    );
    assert!(lab.cloud.admission_groups().is_empty());
    assert!(lab.cloud.all_machines().is_empty());
    assert!(!lab.s.home.fleet_key("h1").exists());
}

#[tokio::test]
async fn the_egress_is_recorded_with_the_time_it_was_read() {
    let lab = lab();
    lab.fleet
        .update("build-host", |h| h.egress = Some("203.0.113.77".into()))
        .unwrap();
    let before = chrono::Utc::now();
    assert!(lab.create("h1").await.ok);
    let reg = Registry::load(&lab.s.home).unwrap();
    let e = &reg.cloud_hosts.egress["build-host"];
    assert_eq!(e.address, "203.0.113.77");
    assert!(e.read_at >= before && e.read_at <= chrono::Utc::now());
    let list = lab.s.list().await.unwrap();
    assert_eq!(
        list.egress["build-host"].address, "203.0.113.77",
        "list --json carries cloud_hosts.egress"
    );
}

/// A host channel that holds back one host's answers for a while and notes when it gave them.
#[derive(Debug)]
struct Slow {
    inner: FakeFleet,
    slow: String,
    answered: std::sync::Mutex<Vec<chrono::DateTime<chrono::Utc>>>,
}

#[async_trait::async_trait]
impl stado::channel::HostChannel for Slow {
    async fn run(
        &self,
        host: &stado::registry::Target,
        command: &str,
        timeout: Duration,
    ) -> Result<stado::channel::Output, String> {
        if host.name != self.slow {
            return self.inner.run(host, command, timeout).await;
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
        let out = self.inner.run(host, command, timeout).await;
        self.answered.lock().unwrap().push(chrono::Utc::now());
        out
    }
}

#[tokio::test]
async fn each_egress_is_stamped_when_its_answer_came_not_when_the_last_one_did() {
    let mut lab = lab();
    let mut reg = Registry::load(&lab.s.home).unwrap();
    let mut far = stado::registry::Target::new("far-host", "192.0.2.20");
    far.user = Some("ci".into());
    reg.put_target(far);
    reg.cloud_hosts.admit_from = Some(vec!["build-host".into(), "far-host".into()]);
    common::save_registry(&lab.s.home, &reg);
    let slow = Arc::new(Slow {
        inner: lab.fleet.clone(),
        slow: "far-host".into(),
        answered: Default::default(),
    });
    lab.s.channel = slow.clone();
    assert!(lab.create("h1").await.ok);
    let far_answered = slow.answered.lock().unwrap()[0];
    let egress = Registry::load(&lab.s.home).unwrap().cloud_hosts.egress;
    assert!(
        egress["build-host"].read_at < far_answered,
        "build-host's address was read before far-host answered: {:?} vs {far_answered}",
        egress["build-host"].read_at
    );
    assert!(egress["far-host"].read_at >= far_answered);
}

#[tokio::test]
async fn the_rule_takes_the_first_free_priority_when_100_to_102_are_taken() {
    let lab = lab();
    for (name, p) in [("team-a", 100), ("team-b", 101), ("team-c", 102)] {
        lab.cloud.put_subnet_rule("zone-a", name, p, true);
    }
    lab.cloud
        .put_subnet_rule("zone-a", "egress-only", 103, false);
    let before: Vec<_> = lab.cloud.subnet_group("zone-a").rules;
    let r = lab.create("h1").await;
    assert!(r.ok, "{:?}", r.error);
    assert_eq!(
        r.admission[0].priority,
        Some(103),
        "an outbound rule holds no inbound priority"
    );
    assert_eq!(r.admission[0].rule.as_deref(), Some("stado-cloud-hosts"));
    let after = lab.cloud.subnet_group("zone-a").rules;
    for rule in &before {
        assert!(after.contains(rule), "{rule:?} was left as it was");
    }
    let ours = after
        .iter()
        .find(|r| r.name == "stado-cloud-hosts")
        .unwrap();
    assert_eq!(
        ours.sources,
        vec![format!("{}/32", FakeFleet::default_egress("build-host"))]
    );
    assert_eq!(ours.to_group.as_deref(), Some("stado-cloud-hosts-zone-a"));
    assert!(
        r.steps[3].lines[0].contains("rule stado-cloud-hosts at priority 103"),
        "{:?}",
        r.steps[3].lines
    );
    // A subnet without a security group of its own gets no rule; the group still is made.
    lab.cloud.set_subnet_security_group("zone-b", false);
    let r = lab.s.create(&request("h2", "zone-b", "amd64-small")).await;
    assert!(r.ok);
    assert_eq!(r.admission[0].rule, None);
    assert!(lab
        .cloud
        .admission_groups()
        .contains(&"stado-cloud-hosts-zone-b".to_string()));
}

#[tokio::test]
async fn every_declared_host_is_readmitted_with_the_new_addresses() {
    let lab = lab();
    assert!(lab.create("h1").await.ok);
    assert!(
        lab.s
            .create(&request("h2", "zone-b", "amd64-small"))
            .await
            .ok
    );
    lab.fleet
        .update("build-host", |h| h.egress = Some("203.0.113.200".into()))
        .unwrap();
    let r = lab.create("h3").await;
    assert!(r.ok, "{:?}", r.error);
    for name in ["h1", "h2", "h3"] {
        let x = lab.cloud.extras(&lab.vm_id(name)).unwrap();
        assert_eq!(
            x.ssh_sources,
            vec!["203.0.113.200/32".to_string()],
            "{name}"
        );
    }
    let zone_a = r.admission.iter().find(|a| a.location == "zone-a").unwrap();
    assert_eq!(zone_a.readmitted, vec!["h1".to_string()]);
    let zone_b = r.admission.iter().find(|a| a.location == "zone-b").unwrap();
    assert_eq!(zone_b.readmitted, vec!["h2".to_string()]);
    for loc in ["zone-a", "zone-b"] {
        let rule = lab
            .cloud
            .subnet_group(loc)
            .rules
            .into_iter()
            .find(|r| r.name == "stado-cloud-hosts")
            .unwrap();
        assert_eq!(rule.sources, vec!["203.0.113.200/32".to_string()], "{loc}");
    }
    // A declared host whose VM is gone is named, not an error.
    lab.cloud.operator_delete(&lab.vm_id("h2"));
    let r = lab.create("h4").await;
    assert!(r.ok);
    let zone_b = r.admission.iter().find(|a| a.location == "zone-b").unwrap();
    assert_eq!(zone_b.absent, vec!["h2".to_string()]);
}

#[tokio::test]
async fn a_policy_deny_answers_at_the_first_resource_and_nothing_is_created() {
    let lab = lab();
    lab.cloud.inject(
        Operation::Network,
        FaultKind::Error(ErrorKind::PermissionDenied),
        1,
    );
    let r = lab.create("h1").await;
    let e = error(&r);
    // The in-memory provider's deny does not say which step it stopped at, so stado does not claim
    // the group was not made: it names the admission, and the group it may have made.
    assert_eq!(
        e,
        "admitting the fleet's addresses on SSH in zone-a failed: permission denied: injected PermissionDenied [admit_ssh]; the application security group stado-cloud-hosts-zone-a may stand: an admission makes it first, and stado keeps it (one per location, never deleted)"
    );
    assert_eq!(r.error.as_ref().unwrap().code(), "denied");
    assert!(lab.cloud.all_machines().is_empty());
    assert!(lab.cloud.admission_groups().is_empty());
    assert!(
        !lab.s.home.fleet_key("h1").exists(),
        "not even the fleet key"
    );
    assert!(declared(&lab.s).is_empty());
}

#[tokio::test]
async fn a_failure_after_the_vm_was_made_leaves_nothing_behind() {
    let lab = lab();
    // The VM is made but its answer is lost, and the adoption's read fails: the driver gives up
    // with the VM standing. stado finds it by name and deletes it.
    lab.cloud
        .inject(Operation::Create, FaultKind::LoseAnswer, 1);
    lab.cloud
        .inject(Operation::List, FaultKind::Error(ErrorKind::Other), 1);
    let r = lab.create("h1").await;
    let e = error(&r);
    assert!(e.starts_with("cloud host h1 was not made: "), "{e}");
    assert!(
        e.ends_with("; 1 VM(s) of that name it made after all were deleted"),
        "{e}"
    );
    assert!(lab.cloud.all_machines().is_empty());
    assert!(!lab.s.home.fleet_key("h1").exists() && !lab.s.home.fleet_key_pub("h1").exists());
    assert!(declared(&lab.s).is_empty());
    // A refused VM (quota) leaves nothing either, and says why.
    lab.cloud
        .inject(Operation::Create, FaultKind::Error(ErrorKind::Quota), 1);
    let e = error(&lab.create("h1").await);
    assert!(
        e.starts_with("cloud host h1 was not made: quota exceeded"),
        "{e}"
    );
    assert!(lab.cloud.all_machines().is_empty());
    assert!(declared(&lab.s).is_empty(), "a refusal made nothing");
    // No stock: nothing left behind, and the refusal says why.
    lab.cloud.set_stock("amd64-small", "zone-a", 0);
    let r = lab.create("h1").await;
    assert!(
        error(&r).starts_with("Azure has no amd64-small to give in zone-a right now: "),
        "{}",
        error(&r)
    );
    assert!(lab.cloud.all_machines().is_empty());
    assert!(declared(&lab.s).is_empty(), "no stock made nothing");
}

/// The VM is made but its answer is lost, and neither the driver's adoption nor stado's clean-up
/// can read the pool: the cloud may hold the VM, so the host stays declared `creating` (its keys
/// go, as a host that is never enrolled needs none). list shows its VM, found by its name, and
/// delete removes the VM and the declaration.
#[tokio::test]
async fn a_failure_that_may_have_left_a_vm_keeps_the_host_declared_for_delete_to_resolve() {
    let lab = lab();
    lab.cloud
        .inject(Operation::Create, FaultKind::LoseAnswer, 1);
    lab.cloud
        .inject(Operation::List, FaultKind::Error(ErrorKind::Other), 4);
    let r = lab.create("h1").await;
    lab.cloud.clear_faults();
    let e = error(&r);
    assert!(e.starts_with("cloud host h1 was not made: "), "{e}");
    assert!(
        e.contains(
            "; Azure still holds: whatever VM named h1 it made (the pool could not be read: "
        ),
        "{e}"
    );
    assert!(
        e.ends_with("; h1 stays declared (creating): stado cloud host delete h1 removes what Azure may hold of it"),
        "{e}"
    );
    let made = lab.in_cloud();
    assert_eq!(made.len(), 1, "the VM was made (and is billed)");
    let decl = Registry::load(&lab.s.home)
        .unwrap()
        .target("h1")
        .unwrap()
        .cloud
        .clone()
        .unwrap();
    assert_eq!(decl.state, stado::registry::CloudState::Creating);
    assert!(!lab.s.home.fleet_key("h1").exists());
    let l = lab.s.list().await.unwrap();
    let row = serde_json::to_value(&l.hosts[0]).unwrap();
    assert_eq!(
        (
            row["name"].as_str(),
            row["creating"].as_bool(),
            row["vm_id"].as_str()
        ),
        (Some("h1"), Some(true), Some(made[0].1.as_str())),
        "{row}"
    );
    lab.s.delete("h1").await.unwrap();
    assert!(lab.cloud.all_machines().is_empty());
    assert!(declared(&lab.s).is_empty());
}

#[tokio::test]
async fn a_host_that_cannot_be_enrolled_is_deleted_again() {
    let lab = lab();
    lab.fleet.update("h1", |h| h.answers = false).unwrap();
    let r = lab.create("h1").await;
    let e = error(&r);
    assert!(
        e.starts_with("cloud host h1 could not be enrolled: ssh: connect to host 198.51.100."),
        "{e}"
    );
    assert!(
        e.ends_with("; it was deleted again, since nothing would return it"),
        "{e}"
    );
    assert_eq!(r.steps.last().unwrap().step, 7);
    assert!(lab.cloud.all_machines().is_empty());
    assert!(declared(&lab.s).is_empty());
    assert!(!lab.s.home.fleet_key("h1").exists() && !lab.s.home.pinned_host_key("h1").exists());
}

#[tokio::test]
async fn a_host_that_cannot_be_enrolled_nor_deleted_stays_declared_so_that_delete_retries() {
    let lab = lab();
    lab.fleet.update("h1", |h| h.answers = false).unwrap();
    lab.cloud
        .inject(Operation::Delete, FaultKind::Error(ErrorKind::Other), 1);
    let r = lab.create("h1").await;
    let e = error(&r);
    assert!(
        e.contains("could not be enrolled")
            && e.contains("it stays declared: stado cloud host delete h1 retries"),
        "{e}"
    );
    assert_eq!(declared(&lab.s).len(), 1);
    assert_eq!(
        declared(&lab.s),
        lab.in_cloud(),
        "the registry matches the cloud"
    );
    lab.s.delete("h1").await.unwrap();
    assert!(lab.cloud.all_machines().is_empty() && declared(&lab.s).is_empty());
}

/// Starts creating `name` and kills the create (drops it) once it waits for the host to enrol:
/// after its VM was made, before it could record the host whole.
async fn kill_at_enrolment(lab: &mut Lab, name: &str) {
    lab.fleet.update(name, |h| h.answers = false).unwrap();
    // The host never answers; on Azure enrolment waits up to 600 s for it.
    lab.s.timing.enrol = Duration::from_secs(600);
    let enrolling = Arc::new(tokio::sync::Notify::new());
    let said = enrolling.clone();
    lab.s.progress = Some(Arc::new(move |l: &str| {
        if l.starts_with("[7/9]") {
            said.notify_one();
        }
    }));
    let req = request(name, "zone-a", "amd64-small");
    tokio::select! {
        r = lab.s.create(&req) => {
            panic!("the create of {name} finished: {:?}", r.error)
        }
        _ = enrolling.notified() => {}
    }
    lab.s.progress = None;
    lab.s.timing = stado::Timing::quick();
    lab.fleet.update(name, |h| h.answers = true).unwrap();
}

#[tokio::test]
async fn a_create_killed_after_its_vm_was_made_leaves_a_declared_host_that_delete_and_reap_remove()
{
    let mut lab = lab();
    kill_at_enrolment(&mut lab, "h1").await;
    assert_eq!(lab.in_cloud().len(), 1, "the VM was made (and is billed)");
    assert_eq!(
        declared(&lab.s),
        lab.in_cloud(),
        "the VM is declared from the moment it was made"
    );
    let decl = Registry::load(&lab.s.home)
        .unwrap()
        .target("h1")
        .unwrap()
        .cloud
        .clone()
        .unwrap();
    assert_eq!(decl.state, stado::registry::CloudState::Enrolling);
    // list shows it, and what it costs.
    let l = lab.s.list().await.unwrap();
    assert_eq!(l.hosts.len(), 1);
    assert_eq!(
        (l.hosts[0].state.as_str(), l.hosts[0].enrolling),
        ("running", true)
    );
    assert_eq!(l.running, 1);
    assert!(
        l.lines().iter().any(|x| x.contains("running (enrolling)")),
        "{:?}",
        l.lines()
    );
    // A new create counts its hour and refuses its name.
    assert_eq!(
        error(&lab.create("h1").await),
        "target 'h1' is already registered"
    );
    // delete removes it.
    lab.s.delete("h1").await.unwrap();
    assert!(lab.cloud.all_machines().is_empty());
    assert!(declared(&lab.s).is_empty());
    assert!(!lab.s.home.fleet_key("h1").exists());

    // reap sees one too: a create that stopped before enrolment finished is reapable at once (no
    // create holds the registry), and --apply returns it.
    kill_at_enrolment(&mut lab, "h2").await;
    assert_eq!(declared(&lab.s), lab.in_cloud());
    let r = lab.s.reap(false).await.unwrap();
    let h2 = r.hosts.iter().find(|h| h.name == "h2").unwrap();
    assert_eq!(h2.verdict, Verdict::Reapable);
    assert!(
        h2.cause
            .as_deref()
            .unwrap()
            .starts_with("its create stopped before the host was enrolled"),
        "{h2:?}"
    );
    assert_eq!(
        lab.in_cloud().len(),
        1,
        "without --apply nothing is deleted"
    );
    let r = lab.s.reap(true).await.unwrap();
    assert_eq!(
        r.hosts[0].action,
        Some(stado::reap::Action::Reaped),
        "{:?}",
        r.hosts
    );
    assert!(lab.cloud.all_machines().is_empty());
    assert!(declared(&lab.s).is_empty());
    // The name is free again, and a create that finishes records its host whole.
    let done = lab.create("h2").await;
    assert!(done.ok, "{:?}", done.error);
    let decl = Registry::load(&lab.s.home)
        .unwrap()
        .target("h2")
        .unwrap()
        .cloud
        .clone()
        .unwrap();
    assert_eq!(decl.state, stado::registry::CloudState::Ready);
}

/// Stops a create of `name` (its future dropped, as Ctrl-C drops it) once the cloud has made its VM
/// but before the create heard so: step 6, which takes minutes on Azure.
async fn stop_while_the_vm_is_made(lab: &Lab, faults: &orca::layer::Faults, name: &str) {
    use orca::layer::{Op, Point};
    faults.hold(Op::Create, Point::After);
    let before = faults.entered(Op::Create, Point::After);
    let s = lab.s.clone();
    let req = request(name, "zone-a", "amd64-small");
    let create = tokio::spawn(async move { s.create(&req).await });
    faults
        .until_entered(Op::Create, Point::After, before + 1)
        .await;
    create.abort();
    assert!(create.await.unwrap_err().is_cancelled());
    faults.release(Op::Create, Point::After);
}

#[tokio::test]
async fn a_create_stopped_while_its_vm_is_made_leaves_a_host_that_list_delete_reap_and_create_resolve(
) {
    let mut lab = lab();
    let faults = orca::layer::Faults::new();
    lab.s.provider = Arc::new(orca::layer::Layered::new(
        lab.s.provider.clone(),
        faults.clone(),
    ));
    stop_while_the_vm_is_made(&lab, &faults, "h1").await;
    let made = lab.in_cloud();
    assert_eq!(made.len(), 1, "the VM was made (and is billed)");
    let names: Vec<String> = declared(&lab.s).into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        ["h1"],
        "the host is declared before its VM is asked for"
    );
    // list finds its VM by its name.
    let l = lab.s.list().await.unwrap();
    let row = serde_json::to_value(&l.hosts[0]).unwrap();
    assert_eq!(
        (
            row["state"].as_str(),
            row["creating"].as_bool(),
            row["vm_id"].as_str()
        ),
        (Some("running"), Some(true), Some(made[0].1.as_str())),
        "{row}"
    );
    assert_eq!(l.running, 1);
    // delete removes its VM and the keys its create minted.
    lab.s.delete("h1").await.unwrap();
    assert!(lab.cloud.all_machines().is_empty());
    assert!(declared(&lab.s).is_empty());
    assert!(!lab.s.home.fleet_key("h1").exists());

    // reap --apply returns one at once.
    stop_while_the_vm_is_made(&lab, &faults, "h2").await;
    let r = lab.s.reap(true).await.unwrap();
    assert_eq!(
        r.hosts
            .iter()
            .map(|h| (h.name.as_str(), h.action))
            .collect::<Vec<_>>(),
        [("h2", Some(stado::reap::Action::Reaped))],
        "{:?}",
        r.hosts
    );
    assert!(lab.cloud.all_machines().is_empty());
    assert!(declared(&lab.s).is_empty());

    // A create of the same name again deletes what the stopped one made, and makes it anew.
    stop_while_the_vm_is_made(&lab, &faults, "h3").await;
    let old = lab.in_cloud();
    let r = lab.create("h3").await;
    assert!(r.ok, "{:?}", r.error);
    let now = lab.in_cloud();
    assert_eq!(now.len(), 1);
    assert_ne!(now[0].1, old[0].1, "the stopped create's VM was deleted");
    assert_eq!(declared(&lab.s), now);
}

/// A host declared `creating` is removed by its name through the provider's `delete_named` (which
/// removes the pieces a create makes beside its VM with the VM), and so is what a failed create's
/// clean-up finds; when the VM of that name is another home's (of the same owner), nothing is
/// removed by the name: that VM, and what stands beside it, are its home's.
#[tokio::test]
async fn a_creating_host_is_removed_by_its_name_unless_another_homes_vm_holds_it() {
    use orca::layer::{Layered, Op, Point, Recorder};
    let cloud = MemoryCloud::new();
    let mut a = lab_on(cloud.clone(), None);
    let faults = orca::layer::Faults::new();
    let recorder = Recorder::new();
    a.s.provider = Arc::new(Layered::new(
        Layered::new(a.s.provider.clone(), faults.clone()),
        recorder.clone(),
    ));
    stop_while_the_vm_is_made(&a, &faults, "h1").await;
    a.s.delete("h1").await.unwrap();
    assert_eq!(recorder.count(Op::DeleteNamed), 1);
    assert!(cloud.all_machines().is_empty() && declared(&a.s).is_empty());

    // A failed create's clean-up: the VM made after all is found, and removed by its name.
    cloud.inject(Operation::Create, FaultKind::LoseAnswer, 1);
    cloud.inject(Operation::List, FaultKind::Error(ErrorKind::Other), 1);
    let e = error(&a.create("h1").await);
    assert!(
        e.ends_with("VM(s) of that name it made after all were deleted"),
        "{e}"
    );
    assert_eq!(recorder.count(Op::DeleteNamed), 2);
    assert!(cloud.all_machines().is_empty() && declared(&a.s).is_empty());

    // Stopped before the cloud was asked for its VM; meanwhile a home given a's owner made h2.
    faults.hold(Op::Create, Point::Before);
    let before = faults.entered(Op::Create, Point::Before);
    let s = a.s.clone();
    let create =
        tokio::spawn(async move { s.create(&request("h2", "zone-a", "amd64-small")).await });
    faults
        .until_entered(Op::Create, Point::Before, before + 1)
        .await;
    create.abort();
    assert!(create.await.unwrap_err().is_cancelled());
    faults.release(Op::Create, Point::Before);
    let c = lab_on(cloud.clone(), Some(&common::owner(&a.s.home)));
    assert!(c.create("h2").await.ok);
    let theirs = c.in_cloud();
    a.s.delete("h2").await.unwrap();
    assert_eq!(
        recorder.count(Op::DeleteNamed),
        2,
        "nothing removed by the name"
    );
    assert_eq!(c.in_cloud(), theirs, "the other home's VM stands");
    assert!(declared(&a.s).is_empty());
    assert_eq!(declared(&c.s), theirs);
}

/// A create whose registry lock was taken from it (its lock file removed, so that another stado
/// locked a new one) writes nothing more: what the new holder wrote stands.
#[tokio::test]
async fn a_create_that_lost_the_registry_lock_writes_nothing_over_the_next_holder() {
    use orca::layer::{Op, Point};
    let mut lab = lab();
    let faults = orca::layer::Faults::new();
    lab.s.provider = Arc::new(orca::layer::Layered::new(
        lab.s.provider.clone(),
        faults.clone(),
    ));
    faults.hold(Op::Create, Point::After);
    let s = lab.s.clone();
    let create =
        tokio::spawn(async move { s.create(&request("h1", "zone-a", "amd64-small")).await });
    faults.until_entered(Op::Create, Point::After, 1).await;
    let registry = lab.s.home.registry_path();
    std::fs::remove_file(orca::fs::FileLock::path_for(&registry)).unwrap();
    // Another stado takes the lock anew, and writes the registry (the egress it measured).
    lab.s.reap(false).await.unwrap();
    let written = std::fs::read(&registry).unwrap();
    faults.release(Op::Create, Point::After);
    let r = create.await.unwrap();
    assert!(!r.ok, "the create went on without its lock");
    let e = error(&r);
    assert!(e.contains("lock"), "{e}");
    assert_eq!(
        std::fs::read(&registry).unwrap(),
        written,
        "{e}: the new holder's registry stands"
    );
    assert!(
        lab.in_cloud().is_empty(),
        "{e}: the VM it could not declare was deleted"
    );
}

#[tokio::test]
async fn a_host_presenting_another_key_than_the_pinned_one_is_never_read() {
    let lab = lab();
    assert!(lab.create("h1").await.ok);
    lab.fleet.advance(Duration::from_secs(3600)).unwrap();
    // The host now presents a key stado did not pin (a rebuilt VM, a man in the middle).
    let other = stado::keys::KeyPair::generate("other")
        .unwrap()
        .public_key_only();
    lab.fleet
        .update("h1", |h| h.host_key = Some(other))
        .unwrap();
    let rep = lab.s.reap(true).await.unwrap();
    let row = rep.hosts.iter().find(|h| h.name == "h1").unwrap();
    assert_eq!(
        row.verdict,
        Verdict::Unread,
        "never judged idle, so never reaped"
    );
    assert_eq!(row.cause.as_deref(), Some("Host key verification failed."));
    assert_eq!(lab.in_cloud().len(), 1);
}

#[tokio::test]
async fn an_unclean_first_boot_is_refused_naming_the_log_on_the_host() {
    let lab = lab();
    lab.fleet
        .update("h1", |h| h.first_boot = FirstBoot::Error)
        .unwrap();
    let r = lab.create("h1").await;
    assert_eq!(
        error(&r),
        "the first boot of cloud host h1 did not finish cleanly (cloud-init status: error); see /var/log/cloud-init-output.log on the host. h1 stays declared: stado cloud host delete h1 returns it"
    );
    assert_eq!(r.steps.last().unwrap().step, 9);
    assert_eq!(
        declared(&lab.s),
        lab.in_cloud(),
        "declared, so that delete and reap return it"
    );
    lab.fleet.update("h2", |h| h.toolchain = false).unwrap();
    let e = error(&lab.create("h2").await);
    assert!(
        e.starts_with("the first boot of cloud host h2 did not finish cleanly ($HOME/.cargo/bin/rustc --version answered: sh: 1: /home/stado/.cargo/bin/rustc: not found); see /var/log/cloud-init-output.log on the host."),
        "{e}"
    );
    lab.fleet
        .update("h3", |h| h.first_boot = FirstBoot::Degraded)
        .unwrap();
    assert!(error(&lab.create("h3").await).contains("(cloud-init status: degraded done)"));
}

#[tokio::test]
async fn list_shows_running_deallocated_absent_and_unread_hosts_and_the_burn_of_the_running() {
    let lab = lab();
    for n in ["h1", "h2", "h3"] {
        assert!(lab.create(n).await.ok);
    }
    lab.cloud.operator_delete(&lab.vm_id("h1"));
    lab.cloud.operator_stop(&lab.vm_id("h2"));
    let l = lab.s.list().await.unwrap();
    let states: Vec<(&str, &str)> = l
        .hosts
        .iter()
        .map(|h| (h.name.as_str(), h.state.as_str()))
        .collect();
    assert_eq!(
        states,
        [("h1", "absent"), ("h2", "deallocated"), ("h3", "running")]
    );
    assert_eq!((l.running, l.hourly_burn_usd), (1, 0.0832));
    let lines = l.lines();
    assert!(
        lines[0].starts_with("NAME") && lines[0].contains("CREATED"),
        "{lines:?}"
    );
    assert_eq!(lines.last().unwrap(), "hourly burn: 0.0832 USD (1 running)");
    let j = serde_json::to_value(&l).unwrap();
    for k in [
        "command",
        "provider",
        "hosts",
        "running",
        "hourly_burn_usd",
        "egress",
    ] {
        assert!(j.get(k).is_some(), "{k} in {j}");
    }
    for k in [
        "name",
        "state",
        "location",
        "size",
        "address",
        "hourly_usd",
        "idle_minutes",
        "created_at",
        "vm_id",
    ] {
        assert!(j["hosts"][0].get(k).is_some(), "{k}");
    }
    lab.cloud.inject(
        Operation::List,
        FaultKind::Error(ErrorKind::PermissionDenied),
        1,
    );
    let l = lab.s.list().await.unwrap();
    let unread: Vec<_> = l.hosts.iter().filter(|h| h.state == "unread").collect();
    assert_eq!(unread.len(), 1);
    assert!(
        unread[0]
            .cause
            .as_deref()
            .unwrap()
            .starts_with("permission denied"),
        "{unread:?}"
    );
    assert!(l
        .lines()
        .iter()
        .any(|x| x.contains("unread: permission denied")));
}

#[tokio::test]
async fn delete_refuses_a_name_the_registry_declares_no_cloud_host_for() {
    let lab = lab();
    let e = lab.s.delete("h9").await.unwrap_err();
    assert_eq!(
        e.message(),
        "the registry declares no Azure cloud host h9 (it declares none)"
    );
    assert!(lab.create("h1").await.ok);
    assert!(lab.create("h2").await.ok);
    assert_eq!(
        lab.s.delete("h9").await.unwrap_err().message(),
        "the registry declares no Azure cloud host h9 (it declares h1, h2)"
    );
    assert_eq!(
        lab.s.delete("build-host").await.unwrap_err().message(),
        "the registry declares no Azure cloud host build-host (it declares h1, h2)",
        "a fleet host is no cloud host"
    );
    let r = lab.s.delete("h1").await.unwrap();
    assert!(r.deleted);
    assert_eq!(lab.in_cloud().len(), 1);
    assert_eq!(declared(&lab.s), lab.in_cloud());
    assert!(!lab.s.home.fleet_key("h1").exists() && !lab.s.home.pinned_host_key("h1").exists());
    assert!(Registry::load(&lab.s.home).unwrap().target("h1").is_none());
}

#[tokio::test]
async fn a_resource_the_cloud_keeps_keeps_the_entry_and_deleting_again_retries() {
    let lab = lab();
    assert!(lab.create("h1").await.ok);
    lab.cloud
        .inject(Operation::Delete, FaultKind::Error(ErrorKind::Leftovers), 1);
    let e = lab.s.delete("h1").await.unwrap_err();
    assert!(
        e.message()
            .starts_with("h1 is still registered because Azure did not release everything: "),
        "{e}"
    );
    assert!(e.message().ends_with("; deleting it again retries"), "{e}");
    assert_eq!(declared(&lab.s).len(), 1);
    assert!(
        lab.s.home.fleet_key("h1").exists(),
        "the key stays with the entry"
    );
    lab.s.delete("h1").await.unwrap();
    assert!(declared(&lab.s).is_empty() && lab.cloud.all_machines().is_empty());
    assert!(!lab.s.home.fleet_key("h1").exists());
}

/// The idle minutes a host idle since `since` can be judged at, when the hosts' clock read `before`
/// just before the reap and `after` just after it (the reading and the judgement count whole
/// seconds).
fn idle_range(
    since: chrono::DateTime<chrono::Utc>,
    before: chrono::DateTime<chrono::Utc>,
    after: chrono::DateTime<chrono::Utc>,
) -> std::ops::RangeInclusive<u64> {
    let minutes = |t: chrono::DateTime<chrono::Utc>| {
        u64::try_from(t.timestamp() - since.timestamp()).unwrap() / 60
    };
    minutes(before)..=minutes(after)
}

#[tokio::test]
async fn reap_judges_busy_idle_reapable_and_unread_and_apply_returns_the_reapable() {
    let lab = lab();
    for n in ["busy-run", "busy-cargo", "idle", "quiet", "gone", "down"] {
        assert!(lab.create(n).await.ok, "{n}");
    }
    lab.fleet.update("busy-run", |h| h.runs = 1).unwrap();
    lab.fleet.update("busy-cargo", |h| h.procs = 2).unwrap();
    lab.fleet.update("down", |h| h.answers = false).unwrap();
    lab.cloud.operator_delete(&lab.vm_id("gone"));
    lab.fleet.advance(Duration::from_secs(31 * 60)).unwrap();
    // "idle" saw a run end just now: idle since its run area changed, not since it was made.
    let now = lab.fleet.now();
    lab.fleet
        .update("idle", |h| {
            h.run_area_changed = Some(now - chrono::Duration::minutes(5))
        })
        .unwrap();
    lab.fleet
        .update("build-host", |h| h.egress = Some("203.0.113.99".into()))
        .unwrap();
    // A slow machine: a minute passes between setting the scene and reading it. Real time passes on
    // the hosts' clock too, so the idle minutes are judged against the clock readings around the
    // reap, never as exact numbers.
    lab.fleet.advance(Duration::from_secs(61)).unwrap();
    let quiet_made = Registry::load(&lab.s.home)
        .unwrap()
        .target("quiet")
        .unwrap()
        .cloud
        .clone()
        .unwrap()
        .created_at;

    let before = lab.fleet.now();
    let r = lab.s.reap(false).await.unwrap();
    let after = lab.fleet.now();
    let verdict = |n: &str| r.hosts.iter().find(|h| h.name == n).unwrap().clone();
    assert_eq!(verdict("busy-run").verdict, Verdict::Busy);
    assert_eq!(verdict("busy-cargo").verdict, Verdict::Busy);
    let idle = verdict("idle");
    assert_eq!(idle.verdict, Verdict::Idle);
    let five_ago = now - chrono::Duration::minutes(5);
    assert!(
        idle_range(five_ago, before, after).contains(&idle.idle_for_minutes.unwrap()),
        "{idle:?}"
    );
    assert!(
        idle.idle_for_minutes.unwrap() >= 6,
        "the slow minute counts"
    );
    let quiet = verdict("quiet");
    assert_eq!(
        quiet.verdict,
        Verdict::Reapable,
        "idle since it was made, past its 30 minutes"
    );
    assert!(
        idle_range(quiet_made, before, after).contains(&quiet.idle_for_minutes.unwrap()),
        "{quiet:?}"
    );
    assert_eq!(verdict("gone").verdict, Verdict::Unread);
    assert!(verdict("gone").cause.unwrap().ends_with("is absent"));
    assert_eq!(
        verdict("down").verdict,
        Verdict::Unread,
        "a host that cannot be read is never judged idle"
    );
    assert!(verdict("down")
        .cause
        .unwrap()
        .contains("Connection timed out"));
    assert!(!r.failed());
    assert_eq!(
        lab.in_cloud().len(),
        5,
        "without --apply nothing is deleted"
    );
    // Reap measured and readmitted the fleet's new address everywhere.
    assert_eq!(
        Registry::load(&lab.s.home).unwrap().cloud_hosts.egress["build-host"].address,
        "203.0.113.99"
    );
    let x = lab.cloud.extras(&lab.vm_id("quiet")).unwrap();
    assert_eq!(x.ssh_sources, vec!["203.0.113.99/32".to_string()]);
    let lines = r.lines();
    assert!(
        lines.iter().any(|l| l
            == "busy-run: busy (1 run(s) in ~/.stado/work/runs, 0 cargo or rustc process(es))"),
        "{lines:?}"
    );
    let want = format!(
        "quiet: reapable for {} minute(s) of 30",
        quiet.idle_for_minutes.unwrap()
    );
    assert!(lines.contains(&want), "{want} in {lines:?}");

    let before = lab.fleet.now();
    let r = lab.s.reap(true).await.unwrap();
    let after = lab.fleet.now();
    let quiet = r.hosts.iter().find(|h| h.name == "quiet").unwrap();
    assert_eq!(quiet.action, Some(stado::reap::Action::Reaped));
    let minutes = quiet.idle_for_minutes.unwrap();
    assert!(idle_range(quiet_made, before, after).contains(&minutes));
    assert!(r
        .hosts
        .iter()
        .filter(|h| h.name != "quiet")
        .all(|h| h.action.is_none()));
    assert!(!lab.in_cloud().iter().any(|(n, _)| n == "quiet"));
    assert!(!declared(&lab.s).iter().any(|(n, _)| n == "quiet"));
    assert!(!lab.s.home.fleet_key("quiet").exists());
    let logs = r.log_lines();
    assert!(
        logs.contains(&format!(
            "cloud-host reaper: reaped quiet (idle {minutes} minute(s), past its 30)"
        )),
        "{logs:?}"
    );
    assert!(
        logs.iter()
            .any(|l| l.starts_with("cloud-host reaper: could not read down: ")),
        "{logs:?}"
    );
    assert!(!r.failed());

    // A reap whose delete fails is reap_failed, and the pass fails.
    lab.fleet.advance(Duration::from_secs(60 * 60)).unwrap();
    lab.cloud
        .inject(Operation::Delete, FaultKind::Error(ErrorKind::Other), 1);
    let r = lab.s.reap(true).await.unwrap();
    let idle = r.hosts.iter().find(|h| h.name == "idle").unwrap();
    assert_eq!(idle.action, Some(stado::reap::Action::ReapFailed));
    assert!(idle
        .action_cause
        .as_deref()
        .unwrap()
        .starts_with("idle is still registered because Azure did not release everything"));
    assert!(r.failed());
    assert!(r
        .log_lines()
        .iter()
        .any(|l| l.starts_with("cloud-host reaper: failed to reap idle: ")));
    // The host whose VM an operator deleted stays declared (unread) until delete removes its entry.
    lab.s.delete("gone").await.unwrap();
    assert_eq!(
        declared(&lab.s),
        lab.in_cloud(),
        "the registry matches the cloud"
    );
}

#[tokio::test]
async fn a_second_stado_writing_the_registry_at_once_is_refused_not_merged() {
    let lab = lab();
    let held = lab.s.home.lock(&lab.s.home.registry_path()).unwrap();
    let r = lab.create("h1").await;
    assert_eq!(r.error.as_ref().unwrap().code(), "busy");
    assert!(error(&r).contains("is being written by another stado right now; nothing was changed"));
    assert_eq!(lab.s.delete("h1").await.unwrap_err().code(), "busy");
    assert_eq!(lab.s.reap(true).await.unwrap_err().code(), "busy");
    assert!(lab.s.list().await.is_ok(), "reading needs no lock");
    assert_eq!(lab.cloud.requests(), 0);
    drop(held);
    // Two creates at once (the first one slowed down by the cloud): one makes its host, the other
    // is refused.
    lab.cloud.inject(
        Operation::Catalogue,
        FaultKind::Latency(Duration::from_millis(100)),
        1,
    );
    let (a, b) = tokio::join!(lab.create("h1"), lab.create("h2"));
    let codes: Vec<_> = [&a, &b]
        .iter()
        .map(|r| r.error.as_ref().map(|e| e.code()))
        .collect();
    assert!(
        codes.contains(&None) && codes.contains(&Some("busy")),
        "{codes:?}"
    );
    assert_eq!(declared(&lab.s), lab.in_cloud());
}

#[tokio::test]
async fn a_vm_left_by_a_create_that_did_not_finish_is_replaced() {
    let lab = lab();
    // An earlier create of this home made the VM and stopped (a crash before it was recorded):
    // same name, pool, size and location, this home's owner and label.
    let p = lab.cloud.provider(&common::owner(&lab.s.home)).unwrap();
    let old = p
        .create(
            &MachineSpec::new("h1", "amd64-small", "zone-a", "stado-cloud-hosts")
                .with_label("stado-home", lab.s.home.id()),
        )
        .await
        .unwrap()
        .machine()
        .unwrap();
    let r = lab.create("h1").await;
    assert!(r.ok, "{:?}", r.error);
    let now = lab.in_cloud();
    assert_eq!(now.len(), 1);
    assert_ne!(
        now[0].1, old.id,
        "the old VM, whose key is lost, was deleted and a new one made"
    );
}

/// Two operators, each with a stado home of their own, in one cloud (one resource group).
#[tokio::test]
async fn a_stado_never_adopts_or_deletes_another_homes_host_of_the_same_name() {
    let cloud = MemoryCloud::new();
    let a = lab_on(cloud.clone(), None);
    let b = lab_on(cloud.clone(), None);
    assert!(a.create("h1").await.ok);
    let a_vm = a.vm_id("h1");
    let r = b.create("h1").await;
    let e = error(&r);
    assert!(!r.ok, "b made h1 over a's");
    assert!(
        e.starts_with("a VM named h1 already stands in Azure and is not this stado home's"),
        "{e}"
    );
    assert_eq!(r.error.as_ref().unwrap().code(), "exists");
    assert!(
        cloud.all_machines().iter().any(|m| m.id == a_vm),
        "a's VM still stands"
    );
    assert_eq!(declared(&a.s), vec![("h1".to_string(), a_vm.clone())]);
    assert!(declared(&b.s).is_empty());
    assert!(!b.s.home.fleet_key("h1").exists());
    // b's hosts of other names are b's own, and each deletes only its own.
    assert!(b.create("h2").await.ok);
    b.s.delete("h2").await.unwrap();
    assert!(cloud.all_machines().iter().any(|m| m.id == a_vm));

    // Even when a third home is given the same owner as a's (`stado config set owner`), its create
    // neither adopts nor deletes a's VM: a VM of that name that does not carry its home is refused.
    let c = lab_on(cloud.clone(), Some(&common::owner(&a.s.home)));
    let e = error(&c.create("h1").await);
    assert!(
        e.starts_with("a VM named h1 already stands in Azure and is not this stado home's"),
        "{e}"
    );
    // And its clean-up after a failed create (the answer lost, the adoption's read failed) leaves
    // a's VM alone too.
    cloud.inject(Operation::Create, FaultKind::LoseAnswer, 1);
    cloud.inject(Operation::List, FaultKind::Error(ErrorKind::Other), 1);
    let e = error(&c.create("h1").await);
    assert!(
        e.starts_with(&format!(
            "a VM named h1 already stands in Azure and is not this stado home's (VM {a_vm}; it carries the stado home {}",
            a.s.home.id()
        )),
        "{e}"
    );
    assert!(!e.contains("were deleted"), "{e}");
    assert!(
        cloud.all_machines().iter().any(|m| m.id == a_vm),
        "{e}: a's VM still stands"
    );
    assert!(declared(&c.s).is_empty());
    // A registry that names a's VM (copied from a's home, say) does not make it c's to delete.
    let mut reg = Registry::load(&c.s.home).unwrap();
    reg.put_target(
        Registry::load(&a.s.home)
            .unwrap()
            .target("h1")
            .unwrap()
            .clone(),
    );
    common::save_registry(&c.s.home, &reg);
    let e = c.s.delete("h1").await.unwrap_err();
    assert!(
        e.message().starts_with(&format!(
            "h1 is still registered: its VM {a_vm} is not this stado home's (it carries the stado home {}",
            a.s.home.id()
        )),
        "{e}"
    );
    assert_eq!(e.code(), "not_this_home");
    assert!(cloud.all_machines().iter().any(|m| m.id == a_vm));
    a.s.delete("h1").await.unwrap();
    assert!(cloud.all_machines().is_empty());
}

/// A VM read that fails says nothing of whose the VM is: delete waits for a read, never guesses.
#[tokio::test]
async fn a_failed_read_never_lets_delete_remove_another_homes_vm() {
    let cloud = MemoryCloud::new();
    let a = lab_on(cloud.clone(), None);
    assert!(a.create("h1").await.ok);
    let a_vm = a.vm_id("h1");
    // A home given a's owner, whose registry names a's VM (copied from a's home, say).
    let c = lab_on(cloud.clone(), Some(&common::owner(&a.s.home)));
    let mut reg = Registry::load(&c.s.home).unwrap();
    reg.put_target(
        Registry::load(&a.s.home)
            .unwrap()
            .target("h1")
            .unwrap()
            .clone(),
    );
    common::save_registry(&c.s.home, &reg);
    // A failure the provider does not retry: the read answers nothing.
    cloud.inject(Operation::List, FaultKind::Error(ErrorKind::Other), 1);
    let e = c.s.delete("h1").await.unwrap_err();
    assert!(
        cloud.all_machines().iter().any(|m| m.id == a_vm),
        "{e}: a's VM still stands"
    );
    assert!(
        e.message().starts_with(&format!(
            "h1 is still registered: its VM {a_vm} could not be read"
        )),
        "{e}"
    );
    assert_eq!(declared(&c.s), vec![("h1".to_string(), a_vm.clone())]);
    // Read again, it is named as another home's and left alone.
    let e = c.s.delete("h1").await.unwrap_err();
    assert_eq!(e.code(), "not_this_home", "{e}");
    assert!(cloud.all_machines().iter().any(|m| m.id == a_vm));
}

#[tokio::test]
async fn no_output_carries_a_private_key() {
    let lab = lab();
    let r = lab.create("h1").await;
    let text = shown(&r, &common::lines(&r));
    let private = std::fs::read_to_string(lab.s.home.fleet_key("h1")).unwrap();
    for line in private.lines().filter(|l| !l.starts_with("-----")) {
        assert!(
            !text.contains(line),
            "the fleet key's private half was shown"
        );
    }
    assert!(
        !text.contains("PRIVATE KEY"),
        "no private key at all (the host key's travels in user data only)"
    );
    let list = lab.s.list().await.unwrap();
    assert!(!shown(&list, &list.lines()).contains("PRIVATE KEY"));
    let j = serde_json::to_value(&r).unwrap();
    for k in [
        "command",
        "ok",
        "name",
        "provider",
        "location",
        "size",
        "disk_gb",
        "idle_minutes",
        "steps",
        "price",
        "credit",
        "egress",
        "admission",
        "fleet_key",
        "host",
        "versions",
        "error",
    ] {
        assert!(j.get(k).is_some(), "{k}");
    }
}

/// Transient errors and lost answers on every cloud call: hosts are created and deleted, nothing
/// leaks, and the registry matches the cloud after every command.
#[tokio::test]
async fn a_fault_run_leaks_nothing_and_the_registry_always_matches_the_cloud() {
    let lab = lab();
    let mut made = Vec::new();
    for round in 0..8u32 {
        let name = format!("f{round}");
        lab.cloud
            .inject(Operation::Any, FaultKind::Error(ErrorKind::Transient), 2);
        lab.cloud.inject(Operation::Any, FaultKind::LoseAnswer, 1);
        lab.cloud
            .inject(Operation::Create, FaultKind::LoseAnswer, 1);
        lab.cloud
            .inject(Operation::Network, FaultKind::LoseAnswer, 1);
        lab.cloud.inject(
            Operation::Account,
            FaultKind::Error(ErrorKind::Throttled),
            1,
        );
        lab.cloud.inject(
            Operation::Catalogue,
            FaultKind::Error(ErrorKind::Transient),
            1,
        );
        let r = lab.create(&name).await;
        assert_eq!(
            declared(&lab.s),
            lab.in_cloud(),
            "after create {name}: {:?}",
            r.error
        );
        if r.ok {
            made.push(name.clone());
        }
        if round % 2 == 1 {
            let victim = made.remove(0);
            lab.cloud
                .inject(Operation::Any, FaultKind::Error(ErrorKind::Transient), 2);
            lab.cloud
                .inject(Operation::Delete, FaultKind::LoseAnswer, 1);
            lab.cloud.inject(Operation::List, FaultKind::LoseAnswer, 1);
            let d = lab.s.delete(&victim).await;
            assert!(d.is_ok(), "{d:?}");
            assert_eq!(declared(&lab.s), lab.in_cloud(), "after delete {victim}");
        }
        lab.cloud.clear_faults();
    }
    assert!(made.len() >= 3, "most creates survive the faults: {made:?}");
    lab.cloud.inject(Operation::Any, FaultKind::LoseAnswer, 3);
    for n in made {
        lab.s.delete(&n).await.unwrap();
        assert_eq!(declared(&lab.s), lab.in_cloud());
    }
    assert!(lab.cloud.all_machines().is_empty(), "nothing leaked");
    let keys: Vec<_> = std::fs::read_dir(lab.s.home.keys_dir()).unwrap().collect();
    assert!(keys.is_empty(), "no fleet key outlives its host");
    let _ = Profile::load(&lab.s.home).unwrap();
}

/// A fleet key the user minted with `stado fleet key generate NAME`, or a host key pinned by hand,
/// belongs to a target of the user's own: a create of that name refuses before anything is made, and
/// neither replaces nor deletes the key.
#[tokio::test]
async fn create_never_replaces_nor_deletes_a_key_it_did_not_mint() {
    let lab = lab();
    let mine = stado::keys::generate_fleet_key(&lab.s.home, "h1").unwrap();
    let private = std::fs::read(&mine.private).unwrap();
    let public = std::fs::read(&mine.public).unwrap();
    let r = lab.create("h1").await;
    assert!(!r.ok, "the create took the name of a key it did not mint");
    assert_eq!(
        error(&r),
        format!(
            "target h1 has a key already ({}, {}); stado mints keys only for a new target and never replaces one: choose another name, or remove them if they are left over",
            mine.private.display(),
            mine.public.display()
        )
    );
    assert_eq!(r.error.as_ref().unwrap().code(), "refused");
    assert_eq!((r.steps.len(), r.steps[0].name), (1, "name"));
    assert_eq!(std::fs::read(&mine.private).unwrap(), private);
    assert_eq!(std::fs::read(&mine.public).unwrap(), public);
    assert!(lab.in_cloud().is_empty(), "nothing was made");
    assert!(declared(&lab.s).is_empty());

    // A host key pinned by hand for a target not registered yet is left as it was too.
    let pinned = stado::keys::pin_host_key(&lab.s.home, "h2", "ssh-ed25519 AAAAmine").unwrap();
    let r = lab.create("h2").await;
    assert!(!r.ok);
    assert!(
        error(&r).starts_with(&format!(
            "target h2 has a key already ({});",
            pinned.display()
        )),
        "{}",
        error(&r)
    );
    assert_eq!(
        std::fs::read_to_string(&pinned).unwrap(),
        "h2 ssh-ed25519 AAAAmine\n"
    );
    assert!(!lab.s.home.fleet_key("h2").exists());
    assert!(lab.in_cloud().is_empty());
}

/// A fleet key minted by someone else while the create runs (after it checked the name, before it
/// minted its own) is kept: the create fails at its fleet key step, and removes nothing.
#[tokio::test]
async fn a_key_minted_while_create_runs_is_kept_and_the_create_stops() {
    let mut lab = lab();
    let home = lab.s.home.clone();
    lab.s.progress = Some(Arc::new(move |l: &str| {
        if l.starts_with("[5/9]") {
            stado::keys::generate_fleet_key(&home, "h1").unwrap();
        }
    }));
    let r = lab.create("h1").await;
    lab.s.progress = None;
    assert!(!r.ok, "the create replaced a key minted beside it");
    let failed = r.steps.last().unwrap();
    assert_eq!((failed.name, failed.ok), ("fleet_key", false));
    assert!(
        error(&r).starts_with("target h1 has a key already ("),
        "{}",
        error(&r)
    );
    let public = std::fs::read_to_string(lab.s.home.fleet_key_pub("h1")).unwrap();
    let private = std::fs::read_to_string(lab.s.home.fleet_key("h1")).unwrap();
    let parsed = ssh_key::PrivateKey::from_openssh(&private).unwrap();
    assert_eq!(
        parsed.public_key().to_openssh().unwrap(),
        public.trim(),
        "one key, whole"
    );
    assert!(lab.in_cloud().is_empty(), "nothing was made");
}

/// One machine option taken away from the capabilities of the provider it layers.
#[derive(Debug)]
struct Lacking(&'static str);

impl orca::layer::Layer for Lacking {
    fn capabilities(&self, inner: orca::Capabilities) -> orca::Capabilities {
        let mut c = inner;
        c.options = c.options.with(self.0, false);
        c
    }
}

/// A provider that cannot make what a cloud host needs is refused before any call to the cloud: no
/// admission group is made for a host that could never be created.
#[tokio::test]
async fn a_provider_that_cannot_make_a_cloud_host_is_refused_before_any_cloud_call() {
    let mut lab = lab();
    let inner = lab.cloud.provider(&common::owner(&lab.s.home)).unwrap();
    lab.s.provider = Arc::new(orca::layer::Layered::new(inner, Lacking("disk_gb")));
    let r = lab.create("h1").await;
    assert_eq!(
        error(&r),
        "the fake provider cannot make a cloud host: it does not honour the machine option(s) disk_gb"
    );
    assert_eq!(lab.cloud.requests(), 0, "no cloud call");
    assert!(lab.cloud.admission_groups().is_empty());
    assert!(!lab.s.home.fleet_key("h1").exists());
}

/// A host declared on another provider is no host of this one: delete says on which provider it is
/// declared and how to delete it there, and touches nothing.
#[tokio::test]
async fn delete_names_the_provider_a_host_of_another_provider_is_declared_on() {
    let lab = lab();
    assert!(lab.create("t1").await.ok);
    let mut reg = Registry::load(&lab.s.home).unwrap();
    let mut t = reg.target("t1").unwrap().clone();
    t.cloud.as_mut().unwrap().provider = "azure".into();
    reg.put_target(t);
    common::save_registry(&lab.s.home, &reg);
    let e = lab.s.delete("t1").await.unwrap_err();
    assert_eq!(
        e.message(),
        "the registry declares no fake cloud host t1: t1 is a cloud host of the provider azure (stado cloud host delete t1 --provider azure deletes it)"
    );
    assert_eq!(e.code(), "refused");
    assert_eq!(lab.in_cloud().len(), 1, "nothing was deleted");
    assert!(Registry::load(&lab.s.home).unwrap().target("t1").is_some());
}

/// A provider the profile disables is refused with the change that enables it: the profile's
/// providers_disabled, or the environment's selection for this invocation, never a `config set
/// providers` that would change nothing.
#[tokio::test]
async fn a_disabled_provider_is_refused_with_the_hint_that_enables_it() {
    let mut lab = lab();
    lab.set_profile("providers_disabled", Some("fake"));
    let e = lab.s.list().await.unwrap_err();
    assert_eq!(
        e.message(),
        "the provider fake is not enabled in this profile (providers: fake; providers_disabled: fake); stado config unset providers_disabled enables it"
    );
    lab.set_profile("providers_disabled", Some("azure,fake"));
    assert!(lab
        .s
        .list()
        .await
        .unwrap_err()
        .message()
        .ends_with("; stado config set providers_disabled azure enables it"));
    lab.set_profile("providers_disabled", None);
    lab.set_profile("providers", Some("azure"));
    assert!(lab
        .s
        .list()
        .await
        .unwrap_err()
        .message()
        .ends_with("; stado config set providers azure,fake enables it"));
    lab.s.selection = Selection {
        providers: Some("azure".into()),
        disabled: Some("fake".into()),
    };
    let e = lab.s.list().await.unwrap_err();
    assert!(
        e.message().ends_with("as WC_PROVIDERS / WC_DISABLED_PROVIDERS select them for this invocation; this invocation enables it when WC_PROVIDERS names fake and WC_DISABLED_PROVIDERS does not name fake"),
        "{e}"
    );
}

/// A location the cloud does not have is refused as an unknown location, naming the ones it has,
/// before any call to the cloud.
#[tokio::test]
async fn an_unknown_location_is_refused_naming_the_known_ones() {
    let lab = lab();
    let r = lab.s.create(&request("h1", "zone-q", "amd64-small")).await;
    assert_eq!(
        error(&r),
        "--location zone-q: the fake cloud has no such location; its locations are zone-a, zone-b, zone-c"
    );
    assert_eq!(r.error.as_ref().unwrap().code(), "invalid");
    assert_eq!(lab.cloud.requests(), 0, "no cloud call");
}

/// A host whose first boot did not finish cleanly stays declared, and list says so beside its power
/// state.
#[tokio::test]
async fn a_host_whose_first_boot_failed_shows_it_in_list() {
    let lab = lab();
    lab.fleet
        .update("h1", |h| h.first_boot = FirstBoot::Error)
        .unwrap();
    assert!(!lab.create("h1").await.ok);
    assert!(lab.create("h2").await.ok);
    let l = lab.s.list().await.unwrap();
    let row = |n: &str| l.hosts.iter().find(|h| h.name == n).unwrap().clone();
    assert_eq!(
        (row("h1").state.as_str(), row("h1").first_boot_failed),
        ("running", true)
    );
    assert!(!row("h2").first_boot_failed);
    let lines = l.lines();
    assert!(
        lines
            .iter()
            .any(|x| x.starts_with("h1 ") && x.contains("running (first boot failed)")),
        "{lines:?}"
    );
    assert!(!lines
        .iter()
        .any(|x| x.starts_with("h2 ") && x.contains("first boot")));
    let j = serde_json::to_value(&l).unwrap();
    assert_eq!(j["hosts"][0]["first_boot_failed"], true);
}

/// The owner names the machines a home reads and deletes: changing it (set or unset) while hosts
/// are declared would strand them (reads answer not owned, and a `creating` host's delete finds
/// nothing and drops its entry while its VM runs), so it is refused naming them until they are
/// deleted.
#[tokio::test]
async fn the_owner_is_not_changed_while_cloud_hosts_are_declared() {
    let lab = lab_on(MemoryCloud::new(), Some("team-a"));
    assert!(lab.create("h1").await.ok);
    let home = &lab.s.home;
    let refusal = "the owner of this stado home's machines cannot change while the registry declares cloud hosts made under it (h1): they would be left unreachable; stado cloud host delete each first";
    let e = stado::profile::config_set(home, "owner", "team-b").unwrap_err();
    assert_eq!((e.message(), e.code()), (refusal, "refused"));
    let e = stado::profile::config_unset(home, "owner").unwrap_err();
    assert_eq!((e.message(), e.code()), (refusal, "refused"));
    assert_eq!(common::owner(home), "team-a");
    // The same owner again changes nothing, and other keys are set as ever.
    stado::profile::config_set(home, "owner", "team-a").unwrap();
    stado::profile::config_set(home, "api.url", "https://stado.example").unwrap();
    lab.s.delete("h1").await.unwrap();
    stado::profile::config_set(home, "owner", "team-b").unwrap();
    assert_eq!(common::owner(home), "team-b");
    assert!(stado::profile::config_unset(home, "owner").unwrap());
}

/// An ssh program that cannot run (no OpenSSH, a wrong `STADO_SSH`) is found before anything is
/// priced, admitted or made: no VM is billed for an enrolment that could never pass.
#[tokio::test]
async fn an_ssh_that_cannot_run_stops_create_before_any_vm() {
    let lab = lab();
    let provider: Arc<dyn Provider> =
        Arc::new(lab.cloud.provider(&common::owner(&lab.s.home)).unwrap());
    let s = Stado::with(
        lab.s.home.clone(),
        "fake",
        provider,
        Arc::new(stado::channel::OpenSsh::with_program("/nonexistent/ssh")),
    );
    let r = s.create(&request("h1", "zone-a", "amd64-small")).await;
    let e = r.error.as_ref().unwrap();
    assert!(
        e.message().starts_with(
            "cloud host h1 cannot be reached over SSH from here: could not run /nonexistent/ssh: "
        ),
        "{}",
        e.message()
    );
    assert!(r.steps.is_empty(), "{:?}", r.steps);
    assert_eq!(lab.in_cloud(), vec![]);
    assert!(declared(&s).is_empty());
    assert!(!s.home.fleet_key("h1").exists());
}

/// A channel whose enrolment finds the pinned host key gone (removed under it): a failure that
/// no retry mends.
#[derive(Debug)]
struct PinLost {
    inner: FakeFleet,
    home: stado::Home,
    enrols: std::sync::atomic::AtomicUsize,
}

#[async_trait::async_trait]
impl stado::channel::HostChannel for PinLost {
    async fn run(
        &self,
        host: &stado::registry::Target,
        command: &str,
        timeout: Duration,
    ) -> Result<stado::channel::Output, String> {
        if command != stado::channel::commands::ENROL {
            return self.inner.run(host, command, timeout).await;
        }
        self.enrols
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let pinned = self.home.pinned_host_key(&host.name);
        let _ = std::fs::remove_file(&pinned);
        Err(format!(
            "the pinned host key of {} ({}) is missing; stado connects only to pinned hosts",
            host.name,
            pinned.display()
        ))
    }
}

/// Enrolment stops at once on a failure that cannot pass (the pinned host key gone), instead of
/// retrying it until its time is up while the VM is billed.
#[tokio::test]
async fn enrolment_stops_at_once_when_the_pinned_host_key_is_gone() {
    let mut lab = lab();
    let channel = Arc::new(PinLost {
        inner: lab.fleet.clone(),
        home: lab.s.home.clone(),
        enrols: Default::default(),
    });
    lab.s.channel = channel.clone();
    lab.s.timing.enrol = Duration::from_secs(2);
    let r = lab.create("h1").await;
    let e = r.error.as_ref().unwrap().message();
    assert!(
        e.starts_with("cloud host h1 could not be enrolled: the pinned host key of h1 ("),
        "{e}"
    );
    assert_eq!(
        channel.enrols.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "tried once"
    );
    assert_eq!(lab.in_cloud(), vec![], "the VM was deleted again");
    assert!(declared(&lab.s).is_empty());
}

/// A channel of the fleet that changes the home's owner, as another stado's `config set owner`
/// would, when a create asks whether it can reach hosts: between the create's first checks and its
/// steps.
#[derive(Debug)]
struct OwnerChangedMeanwhile {
    fleet: FakeFleet,
    home: stado::Home,
}

#[async_trait::async_trait]
impl stado::channel::HostChannel for OwnerChangedMeanwhile {
    async fn run(
        &self,
        host: &stado::registry::Target,
        command: &str,
        timeout: Duration,
    ) -> Result<stado::channel::Output, String> {
        stado::channel::HostChannel::run(&self.fleet, host, command, timeout).await
    }

    fn can_run(&self, paths: &[&std::path::Path]) -> Result<(), String> {
        // Refused when the create holds the registry's lock already: that is the point.
        let _ = stado::profile::config_set(&self.home, "owner", "team-b");
        stado::channel::HostChannel::can_run(&self.fleet, paths)
    }
}

/// A create never declares a host under an owner the home no longer has: the owner it makes the
/// host under is read while it holds the registry's lock, which a change of the owner takes too.
#[tokio::test]
async fn a_create_never_declares_a_host_under_an_owner_changed_meanwhile() {
    let cloud = MemoryCloud::new();
    let lab = lab_on(cloud.clone(), Some("team-a"));
    let provider: Arc<dyn Provider> = Arc::new(cloud.provider("team-a").unwrap());
    let channel = OwnerChangedMeanwhile {
        fleet: lab.fleet.clone(),
        home: lab.s.home.clone(),
    };
    let mut s = Stado::with(lab.s.home.clone(), "fake", provider, Arc::new(channel));
    s.sim = Some(lab.fleet.clone());
    let r = s.create(&request("h1", "zone-a", "amd64-small")).await;
    let owner = common::owner(&lab.s.home);
    if r.ok {
        assert_eq!(
            owner, "team-a",
            "h1 was made under team-a; the home's owner is now {owner}"
        );
    } else {
        assert!(declared(&s).is_empty(), "{:?}", r.error);
        assert!(cloud.all_machines().is_empty(), "{:?}", r.error);
    }
}
