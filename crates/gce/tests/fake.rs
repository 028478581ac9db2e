//! The Compute Engine driver against the fake Compute Engine API (crates/fakes): the conformance suite
//! with every hook, and the behaviour the issue names (credentials redacted, firewall rules read and
//! patched, failed operations leave nothing, run duration and tags reach the insert, retries, labels).

use std::time::Duration;

use async_trait::async_trait;
use orca_fakes::gce::{FakeGce, NETWORK, PROJECT, SSH_RULE, SUBNET, TEST_ONLY_RSA_KEY_PEM, ZONE};
use orca_fakes::{Fault, Rule};
use orca_gce::{Config, ConfigBuilder, CreateOptions, GceProvider};
use orca_machines::conformance::{run_all, Harness, Hook, Setup};
use orca_machines::labels::Labels;
use orca_machines::{Created, Error, MachineSpec, Provider, RetryPolicy, Status};
use reqwest::Method;
use serde_json::json;

fn builder(fake: &FakeGce) -> ConfigBuilder {
    Config::builder()
        .project(PROJECT)
        .zone(ZONE)
        .network(NETWORK)
        .subnet(SUBNET)
        .credentials_json(fake.service_account_json())
        .endpoint(fake.endpoint())
        .retry(RetryPolicy::fast())
}

async fn provider(fake: &FakeGce, owner: &str) -> GceProvider {
    GceProvider::new(builder(fake).build().unwrap(), owner)
        .await
        .unwrap()
}

struct GceHarness {
    fake: FakeGce,
}

#[async_trait]
impl Harness for GceHarness {
    fn name(&self) -> String {
        "gce-fake".into()
    }

    fn setup(&self) -> Setup {
        Setup {
            amd64_type: "e2-small".into(),
            arm64_type: "t2a-standard-1".into(),
            location: ZONE.into(),
            resize_to: "e2-medium".into(),
            unknown_id: "orca-no-such-vm-zz9".into(),
            image: "projects/ubuntu-os-cloud/global/images/family/ubuntu-2404-lts-amd64".into(),
        }
    }

    async fn provider(&self, owner: &str) -> orca_machines::Result<Box<dyn Provider>> {
        Ok(Box::new(
            GceProvider::new(builder(&self.fake).build()?, owner).await?,
        ))
    }

    async fn paged_provider(&self, owner: &str, page_size: u32) -> Hook<Box<dyn Provider>> {
        let config = builder(&self.fake).page_size(page_size).build().unwrap();
        Ok(Box::new(GceProvider::new(config, owner).await.unwrap()))
    }

    async fn exhaust_stock(&self, machine_type: &str, location: &str) -> Hook<()> {
        self.fake.exhaust(machine_type, location);
        Ok(())
    }

    async fn restore_stock(&self, machine_type: &str, location: &str) -> Hook<()> {
        self.fake.restore(machine_type, location);
        Ok(())
    }

    async fn lose_next_create_answer(&self) -> Hook<()> {
        self.fake.control().inject(Rule::new(
            Some(Method::POST),
            "/instances?requestId=",
            Fault::DropAnswer,
            1,
        ));
        Ok(())
    }

    async fn requests(&self) -> Hook<u64> {
        Ok(self.fake.control().requests())
    }
}

#[tokio::test]
async fn conformance_against_the_fake() {
    let h = GceHarness {
        fake: FakeGce::start().await.unwrap(),
    };
    let report = run_all(&h).await;
    report.assert_passed();
    assert!(
        report.skipped().is_empty(),
        "skipped: {:?}",
        report.skipped()
    );
    // Every machine the suite made is gone, and so is every disk.
    assert!(h.fake.instance_names(ZONE).is_empty());
    assert!(h.fake.disk_names(ZONE).is_empty());
}

fn spec(name: &str, machine_type: &str) -> MachineSpec {
    MachineSpec::new(name, machine_type, ZONE, "lab")
        .with_user_data("#cloud-config\nruncmd: [true]\n")
}

#[tokio::test]
async fn run_duration_tags_user_data_labels_and_image_reach_the_insert() {
    let fake = FakeGce::start().await.unwrap();
    let p = GceProvider::new(
        builder(&fake)
            .network_tags(["shed-test"])
            .max_run_duration(Duration::from_secs(24 * 3600))
            .disk_gb(50)
            .build()
            .unwrap(),
        "stack-1",
    )
    .await
    .unwrap();
    let m = p
        .create(&spec("vm-arm", "t2a-standard-1"))
        .await
        .unwrap()
        .machine()
        .unwrap();
    assert_eq!(m.status, Status::Running);
    assert!(m.address.starts_with("203.0.113."), "{}", m.address);
    let vm = fake.instance(ZONE, "vm-arm").unwrap();
    assert_eq!(vm["scheduling"]["maxRunDuration"]["seconds"], "86400");
    assert_eq!(vm["scheduling"]["instanceTerminationAction"], "STOP");
    assert_eq!(vm["tags"]["items"], json!(["shed-test"]));
    assert_eq!(vm["metadata"]["items"][0]["key"], "user-data");
    assert_eq!(
        vm["metadata"]["items"][0]["value"],
        "#cloud-config\nruncmd: [true]\n"
    );
    assert_eq!(
        vm["labels"],
        json!({"orca": "pool", "orca-pool": "lab", "orca-owner": "stack-1"})
    );
    assert_eq!(vm["disks"][0]["autoDelete"], true);
    assert_eq!(vm["disks"][0]["diskSizeGb"], "50");
    let insert = &fake.insert_bodies()[0];
    assert_eq!(
        insert["disks"][0]["initializeParams"]["sourceImage"],
        "projects/ubuntu-os-cloud/global/images/family/ubuntu-2404-lts-arm64"
    );
    assert!(
        vm["networkInterfaces"][0]["subnetwork"]
            .as_str()
            .unwrap()
            .ends_with("/regions/europe-west1/subnetworks/orca-subnet"),
        "{}",
        vm["networkInterfaces"][0]
    );

    // Per-machine options override the settings, and extra labels go into the insert itself.
    let mut labels = Labels::new();
    labels.insert("shed-state".into(), "creating".into());
    let opts = CreateOptions {
        network_tags: Some(vec!["a-tag".into(), "b-tag".into()]),
        max_run_duration: Some(Duration::from_secs(600)),
        labels,
        ..CreateOptions::default()
    };
    p.create_with(&spec("vm-amd", "e2-small"), &opts)
        .await
        .unwrap();
    let vm = fake.instance(ZONE, "vm-amd").unwrap();
    assert_eq!(vm["scheduling"]["maxRunDuration"]["seconds"], "600");
    assert_eq!(vm["tags"]["items"], json!(["a-tag", "b-tag"]));
    assert_eq!(vm["labels"]["shed-state"], "creating");
    assert_eq!(
        fake.insert_bodies()[1]["disks"][0]["initializeParams"]["sourceImage"],
        "projects/ubuntu-os-cloud/global/images/family/ubuntu-2404-lts-amd64"
    );

    // orca's own labels cannot be overridden, and bad options are refused before any call.
    let before = fake.control().requests();
    let mut bad = Labels::new();
    bad.insert("orca-owner".into(), "someone-else".into());
    for opts in [
        CreateOptions {
            labels: bad,
            ..CreateOptions::default()
        },
        CreateOptions {
            network_tags: Some(vec!["Bad_Tag".into()]),
            ..CreateOptions::default()
        },
        CreateOptions {
            max_run_duration: Some(Duration::from_secs(5)),
            ..CreateOptions::default()
        },
    ] {
        let e = p.create_with(&spec("vm-x", "e2-small"), &opts).await;
        assert!(matches!(e, Err(Error::InvalidSpec { .. })), "{e:?}");
    }
    let e = p
        .create(&MachineSpec::new("vm-x", "e2-small", "us-east1-b", "lab"))
        .await;
    assert!(
        matches!(e, Err(Error::InvalidSpec { ref field, .. }) if field == "location"),
        "{e:?}"
    );
    let e = p
        .create(&MachineSpec::new("9vm", "e2-small", ZONE, "lab"))
        .await;
    assert!(
        matches!(e, Err(Error::InvalidSpec { ref field, .. }) if field == "name"),
        "{e:?}"
    );
    assert_eq!(
        fake.control().requests(),
        before,
        "refused input made calls"
    );
}

#[tokio::test]
async fn a_failed_operation_leaves_no_instance_or_disk() {
    let fake = FakeGce::start().await.unwrap();
    let p = provider(&fake, "stack-1").await;
    fake.fail_next_insert("INTERNAL_ERROR", "the insert failed half-way");
    let e = p.create(&spec("vm-fail", "e2-small")).await.unwrap_err();
    assert!(e.to_string().contains("INTERNAL_ERROR"), "{e}");
    assert!(!matches!(e, Error::Leftovers { .. }), "{e}");
    assert!(
        fake.instance_names(ZONE).is_empty(),
        "{:?}",
        fake.instance_names(ZONE)
    );
    assert!(
        fake.disk_names(ZONE).is_empty(),
        "{:?}",
        fake.disk_names(ZONE)
    );
    // The clean-up deleted the instance (its boot disk went with it: autoDelete) and checked the disk.
    assert_eq!(
        fake.control().count(&Method::DELETE, "/instances/vm-fail"),
        1
    );
    assert_eq!(fake.control().count(&Method::GET, "/disks/vm-fail"), 1);

    // No stock: the operation fails and leaves the boot disk; the create answers NoStock, scoped to
    // the type and zone, and removes the disk.
    fake.exhaust("e2-small", ZONE);
    let got = p.create(&spec("vm-nostock", "e2-small")).await.unwrap();
    assert!(
        matches!(&got, Created::NoStock { machine_type, location, message }
            if machine_type == "e2-small" && location == ZONE && message.contains("ZONE_RESOURCE_POOL_EXHAUSTED")),
        "{got:?}"
    );
    assert!(
        fake.disk_names(ZONE).is_empty(),
        "{:?}",
        fake.disk_names(ZONE)
    );
    assert_eq!(
        fake.control().count(&Method::DELETE, "/disks/vm-nostock"),
        1
    );
    // Another type in the same zone still has stock.
    p.create(&spec("vm-other", "e2-medium"))
        .await
        .unwrap()
        .machine()
        .unwrap();
    fake.restore("e2-small", ZONE);
    // The same create once stock is back: its request id names the failed insert, so the driver
    // inserts again under a fresh one and makes the machine.
    let m = p
        .create(&spec("vm-nostock", "e2-small"))
        .await
        .unwrap()
        .machine()
        .expect("made once stock is back");
    assert_eq!(m.status, Status::Running);
    p.delete("vm-nostock").await.unwrap();

    // The _WITH_DETAILS form is no stock too.
    fake.exhaust_with_details("e2-standard-8", ZONE);
    let got = p
        .create(&spec("vm-details", "e2-standard-8"))
        .await
        .unwrap();
    assert!(
        matches!(&got, Created::NoStock { message, .. } if message.contains("_WITH_DETAILS")),
        "{got:?}"
    );
    fake.restore("e2-standard-8", ZONE);

    // Quota is not capacity: in the operation, and as a synchronous 403.
    fake.exceed_quota(1);
    let e = p.create(&spec("vm-quota", "e2-small")).await.unwrap_err();
    assert!(matches!(e, Error::Quota { .. }), "{e:?}");
    fake.control().inject(Rule::new(
        Some(Method::POST),
        "/instances?requestId=",
        Fault::Status {
            status: 403,
            body: json!({"error": {"code": 403, "message": "Quota 'CPUS' exceeded.  Limit: 8.0 in region europe-west1.", "errors": [{"reason": "quotaExceeded", "domain": "usageLimits", "message": "Quota 'CPUS' exceeded.  Limit: 8.0 in region europe-west1."}]}}),
            headers: vec![],
        },
        1,
    ));
    let e = p.create(&spec("vm-quota", "e2-small")).await.unwrap_err();
    assert!(
        matches!(e, Error::Quota { ref message, .. } if message.contains("CPUS")),
        "{e:?}"
    );
    assert_eq!(fake.instance_names(ZONE), vec!["vm-other".to_string()]);

    // A clean-up that cannot finish names what is left.
    fake.fail_next_insert("INTERNAL_ERROR", "half-way");
    fake.control().inject(Rule::new(
        Some(Method::DELETE),
        "/instances/vm-left",
        Fault::Status {
            status: 403,
            body: json!({"error": {"code": 403, "message": "no", "errors": [{"reason": "forbidden", "domain": "global", "message": "no"}]}}),
            headers: vec![],
        },
        1,
    ));
    let e = p.create(&spec("vm-left", "e2-small")).await.unwrap_err();
    match e {
        Error::Leftovers { left, .. } => {
            assert!(left.contains(&"instance vm-left".to_string()), "{left:?}")
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_lost_insert_answer_makes_one_vm_and_throttling_is_retried() {
    let fake = FakeGce::start().await.unwrap();
    let p = provider(&fake, "stack-1").await;
    fake.control().inject(Rule::new(
        Some(Method::POST),
        "/instances?requestId=",
        Fault::DropAnswer,
        1,
    ));
    let m = p
        .create(&spec("vm-1", "e2-small"))
        .await
        .unwrap()
        .machine()
        .unwrap();
    assert_eq!(m.name, "vm-1");
    assert_eq!(
        fake.control().count(&Method::POST, "/instances?requestId="),
        2
    );
    assert_eq!(
        fake.insert_bodies().len(),
        1,
        "the repeated insert was de-duplicated"
    );
    assert_eq!(fake.instance_names(ZONE), vec!["vm-1".to_string()]);
    // The same create again, from a new call, adopts the machine (409 then a read).
    let again = p
        .create(&spec("vm-1", "e2-small"))
        .await
        .unwrap()
        .machine()
        .unwrap();
    assert_eq!(again.id, m.id);
    // ...but another owner's create of that name is refused, not adopted.
    let other = provider(&fake, "stack-2").await;
    let e = other.create(&spec("vm-1", "e2-small")).await;
    assert!(matches!(e, Err(Error::AlreadyExists { .. })), "{e:?}");

    // 429 with Retry-After and a 503 are retried by the shared policy.
    fake.control().inject(Rule::new(
        Some(Method::GET),
        "/instances?",
        Fault::Status {
            status: 429,
            body: json!({"error": {"code": 429, "message": "Rate Limit Exceeded", "errors": [{"reason": "rateLimitExceeded", "domain": "usageLimits", "message": "Rate Limit Exceeded"}]}}),
            headers: vec![("Retry-After".into(), "0".into())],
        },
        1,
    ));
    fake.control().inject(Rule::new(
        Some(Method::GET),
        "/instances?",
        Fault::Status {
            status: 503,
            body: json!({"error": {"code": 503, "message": "backend", "errors": [{"reason": "backendError", "domain": "global", "message": "backend"}]}}),
            headers: vec![],
        },
        1,
    ));
    let before = fake.control().count(&Method::GET, "/instances?");
    assert_eq!(p.machines("lab").await.unwrap().len(), 1);
    assert_eq!(
        fake.control().count(&Method::GET, "/instances?") - before,
        3
    );

    // Latency on the operation and slow operations: still followed to the end.
    fake.set_operation_steps(5);
    fake.control().inject(Rule::new(
        None,
        "/operations/",
        Fault::Latency(Duration::from_millis(20)),
        2,
    ));
    let m2 = p
        .create(&spec("vm-2", "e2-small"))
        .await
        .unwrap()
        .machine()
        .unwrap();
    assert_eq!(m2.status, Status::Running);

    // A machine made, deleted, and made again under the same spec: the stale request id is noticed.
    assert!(p.delete("vm-2").await.unwrap());
    let m3 = p
        .create(&spec("vm-2", "e2-small"))
        .await
        .unwrap()
        .machine()
        .unwrap();
    assert_eq!(m3.name, "vm-2");
    assert!(fake.instance("europe-west1-b", "vm-2").is_some());
}

#[tokio::test]
async fn listing_maps_statuses_reads_labels_and_skips_foreign_machines() {
    let fake = FakeGce::start().await.unwrap();
    let p = GceProvider::new(builder(&fake).page_size(1).build().unwrap(), "stack-1")
        .await
        .unwrap();
    for n in ["vm-a", "vm-b", "vm-c"] {
        p.create(&spec(n, "e2-small")).await.unwrap();
    }
    // A machine nobody labelled, and one with orca's labels but no owner.
    fake.put_instance(ZONE, "stranger", "e2-small", json!({"env": "prod"}));
    fake.put_instance(
        ZONE,
        "ownerless",
        "e2-small",
        json!({"orca": "pool", "orca-pool": "lab"}),
    );
    fake.set_instance_status(ZONE, "vm-a", "SUSPENDED");
    fake.set_instance_status(ZONE, "vm-b", "STAGING");
    let before = fake.control().count(&Method::GET, "/instances?");
    let mut ms = p.machines("lab").await.unwrap();
    assert_eq!(
        fake.control().count(&Method::GET, "/instances?") - before,
        3,
        "one page per machine"
    );
    ms.sort_by(|a, b| a.name.cmp(&b.name));
    let got: Vec<(&str, Status, &str)> = ms
        .iter()
        .map(|m| (m.name.as_str(), m.status, m.cloud_status.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("vm-a", Status::Stopped, "SUSPENDED"),
            ("vm-b", Status::Starting, "STAGING"),
            ("vm-c", Status::Running, "RUNNING")
        ]
    );
    let log = fake.control().log();
    let list = log
        .iter()
        .find(|l| l.method == Method::GET && l.path.contains("/instances?"))
        .unwrap();
    assert!(list.path.contains("maxResults=1"), "{}", list.path);
    assert!(list.path.contains("labels.orca-owner"), "{}", list.path);

    // The empty owner sees only the ownerless machine.
    let none = provider(&fake, "").await;
    let ms = none.machines("lab").await.unwrap();
    assert_eq!(
        ms.iter().map(|m| m.name.as_str()).collect::<Vec<_>>(),
        ["ownerless"]
    );
    for id in ["stranger", "vm-a"] {
        assert!(
            matches!(none.delete(id).await, Err(Error::NotOwned { .. })),
            "{id}"
        );
    }
    assert!(matches!(
        p.delete("stranger").await,
        Err(Error::NotOwned { .. })
    ));
    assert!(matches!(
        p.stop("stranger").await,
        Err(Error::NotOwned { .. })
    ));
    assert!(fake.instance(ZONE, "stranger").is_some());
    assert!(matches!(
        p.delete("Not_A_Name").await,
        Err(Error::InvalidSpec { .. })
    ));
}

#[tokio::test]
async fn labels_can_be_set_on_an_existing_vm() {
    let fake = FakeGce::start().await.unwrap();
    let p = provider(&fake, "stack-1").await;
    let mut creating = Labels::new();
    creating.insert("shed-state".into(), "creating".into());
    p.create_with(
        &spec("vm-l", "e2-small"),
        &CreateOptions {
            labels: creating,
            ..CreateOptions::default()
        },
    )
    .await
    .unwrap();
    let mut ready = Labels::new();
    ready.insert("shed-state".into(), "ready".into());
    ready.insert("shed-id".into(), "s-42".into());
    // Someone else changed the labels first: the fingerprint is stale once, and the driver reads again.
    fake.control().inject(Rule::new(
        Some(Method::POST),
        "/setLabels",
        Fault::Status {
            status: 412,
            body: json!({"error": {"code": 412, "message": "Labels fingerprint either invalid or resource labels have changed", "errors": [{"reason": "conditionNotMet", "domain": "global", "message": "Labels fingerprint either invalid or resource labels have changed", "location": "If-Match", "locationType": "header"}]}}),
            headers: vec![],
        },
        1,
    ));
    let m = p.set_labels("vm-l", &ready, &[]).await.unwrap();
    assert_eq!(
        m.labels.get("shed-state").map(String::as_str),
        Some("ready")
    );
    assert_eq!(
        m.labels.get("orca-owner").map(String::as_str),
        Some("stack-1")
    );
    assert_eq!(fake.control().count(&Method::POST, "/setLabels"), 2);
    let listed = p.machines("lab").await.unwrap();
    assert_eq!(
        listed[0].labels.get("shed-id").map(String::as_str),
        Some("s-42")
    );
    let m = p
        .set_labels("vm-l", &Labels::new(), &["shed-id"])
        .await
        .unwrap();
    assert!(!m.labels.contains_key("shed-id"));
    assert_eq!(m.pool, "lab");
    // orca's labels are not for changing, and another owner may not label the machine.
    let before = fake.control().requests();
    assert!(p
        .set_labels("vm-l", &Labels::new(), &["orca-pool"])
        .await
        .is_err());
    assert_eq!(fake.control().requests(), before);
    let other = provider(&fake, "stack-2").await;
    assert_eq!(p.machine("vm-l").await.unwrap().unwrap().name, "vm-l");
    assert!(p.machine("vm-gone").await.unwrap().is_none());
    assert!(matches!(
        other.machine("vm-l").await,
        Err(Error::NotOwned { .. })
    ));
    assert!(matches!(
        other
            .set_labels("vm-l", &Labels::new(), &["shed-state"])
            .await,
        Err(Error::NotOwned { .. })
    ));
}

#[tokio::test]
async fn firewall_rules_are_read_and_patched() {
    let fake = FakeGce::start().await.unwrap();
    fake.put_firewall(json!({
        "name": "stray-allow-all", "network": NETWORK, "direction": "INGRESS", "priority": 900,
        "allowed": [{"IPProtocol": "all"}], "sourceRanges": ["10.0.0.0/8"],
    }));
    let p = GceProvider::new(builder(&fake).page_size(1).build().unwrap(), "stack-1")
        .await
        .unwrap();
    let rules = p.firewall_rules().await.unwrap();
    let mut names: Vec<&str> = rules.iter().map(|r| r.name.as_str()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [SSH_RULE, "stray-allow-all"],
        "the default network's rule is not listed"
    );
    assert_eq!(
        fake.control().count(&Method::GET, "/global/firewalls?"),
        3,
        "three rules, page size 1"
    );
    let rule = p.firewall_rule(SSH_RULE).await.unwrap().unwrap();
    assert_eq!(rule.direction, "INGRESS");
    assert!(!rule.disabled);
    assert_eq!(rule.allowed[0].protocol, "tcp");
    assert_eq!(rule.allowed[0].ports, ["22"]);
    assert_eq!(rule.target_tags, ["shed-test"]);
    assert_eq!(rule.source_ranges, ["203.0.113.7/32"]);
    assert_eq!(rule.network_name(), NETWORK);
    assert!(p.firewall_rule("no-such-rule").await.unwrap().is_none());

    let patched = p
        .set_firewall_source_ranges(SSH_RULE, &["198.51.100.9/32"])
        .await
        .unwrap();
    assert_eq!(patched.source_ranges, ["198.51.100.9/32"]);
    assert_eq!(patched.allowed, rule.allowed, "nothing else changed");
    assert_eq!(patched.target_tags, rule.target_tags);
    let stored = fake.firewall(SSH_RULE).unwrap();
    assert_eq!(stored["sourceRanges"], json!(["198.51.100.9/32"]));
    assert_eq!(stored["targetTags"], json!(["shed-test"]));
    assert_eq!(fake.control().count(&Method::PATCH, "/firewalls/"), 1);

    let before = fake.control().requests();
    for bad in [&["0.0.0.0/33"][..], &["not-an-ip"], &[]] {
        assert!(matches!(
            p.set_firewall_source_ranges(SSH_RULE, bad).await,
            Err(Error::InvalidSpec { .. })
        ));
    }
    assert_eq!(fake.control().requests(), before);

    let net = p.network().await.unwrap();
    assert_eq!(net.name, NETWORK);
    assert!(!net.auto_create_subnetworks);
}

#[tokio::test]
async fn credentials_never_appear_in_any_output() {
    let fake = FakeGce::start().await.unwrap();
    // A key marker that must never be printed: a line of the test key's material.
    let secret_line = TEST_ONLY_RSA_KEY_PEM.lines().nth(3).unwrap();
    assert!(secret_line.len() > 40);
    let config = builder(&fake).build().unwrap();
    let p = GceProvider::new(config.clone(), "stack-1").await.unwrap();
    for text in [
        format!("{config:?}"),
        format!("{p:?}"),
        format!("{:?}", config.credentials),
    ] {
        assert!(!text.contains(secret_line), "{text}");
        assert!(!text.contains("PRIVATE KEY"), "{text}");
        assert!(
            text.contains("redacted") || text.contains("GceProvider"),
            "{text}"
        );
    }
    // A refused token, and an unreachable token endpoint, answer errors without the key.
    let broken = fake
        .service_account_json()
        .replace(&fake.token_uri(), "http://127.0.0.1:9/token");
    // Two credential sources: named, not echoed.
    let e = builder(&fake).credentials_json(broken).build().unwrap_err();
    assert!(
        matches!(e, Error::InvalidSettings { ref keys, .. } if keys == &["credentials"]),
        "{e:?}"
    );
    assert!(!format!("{e} {e:?}").contains(secret_line));
    let broken = fake
        .service_account_json()
        .replace(&fake.token_uri(), &format!("{}/elsewhere", fake.url()));
    let q = GceProvider::new(
        Config::builder()
            .project(PROJECT)
            .zone(ZONE)
            .network(NETWORK)
            .subnet(SUBNET)
            .credentials_json(broken)
            .endpoint(fake.endpoint())
            .retry(RetryPolicy::NEVER)
            .build()
            .unwrap(),
        "stack-1",
    )
    .await
    .unwrap();
    let e = q.machines("lab").await.unwrap_err();
    let t = format!("{e} {e:?}");
    assert!(!t.contains(secret_line), "{t}");
    assert!(
        matches!(e, Error::Unauthenticated { .. } | Error::Transient { .. }),
        "{e:?}"
    );
    // A bad key file is named, not printed.
    let bad = Config::builder()
        .project(PROJECT)
        .zone(ZONE)
        .network(NETWORK)
        .subnet(SUBNET)
        .credentials_json(
            json!({"type": "service_account", "private_key": "-----BEGIN PRIVATE KEY-----\nTOPSECRETMATERIAL\n-----END PRIVATE KEY-----\n", "client_email": "a@b", "token_uri": "http://127.0.0.1:9/t"})
                .to_string(),
        )
        .build()
        .unwrap();
    let e = GceProvider::new(bad, "x").await.unwrap_err();
    assert!(!format!("{e} {e:?}").contains("TOPSECRETMATERIAL"), "{e:?}");
    assert!(matches!(e, Error::InvalidSettings { .. }), "{e:?}");
}

#[tokio::test]
async fn arch_is_read_and_cached_and_resize_keeps_the_architecture() {
    let fake = FakeGce::start().await.unwrap();
    let p = provider(&fake, "stack-1").await;
    assert_eq!(p.arch("c4a-standard-1").await.unwrap().as_str(), "arm64");
    assert_eq!(p.arch("e2-standard-8").await.unwrap().as_str(), "amd64");
    let n = fake.control().count(&Method::GET, "/machineTypes/");
    p.arch("c4a-standard-1").await.unwrap();
    assert_eq!(fake.control().count(&Method::GET, "/machineTypes/"), n);
    assert!(matches!(
        p.arch("zz-none").await,
        Err(Error::NotFound { .. })
    ));

    p.create(&spec("vm-r", "e2-small")).await.unwrap();
    let e = p.resize("vm-r", "t2a-standard-2").await;
    assert!(matches!(e, Err(Error::InvalidSpec { .. })), "{e:?}");
    let r = p.resize("vm-r", "e2-standard-2").await.unwrap();
    assert!(r.caused_downtime);
    assert_eq!(r.machine.machine_type, "e2-standard-2");
    assert_eq!(r.machine.status, Status::Running);
    let stopped = p.stop("vm-r").await.unwrap();
    assert_eq!(stopped.status, Status::Stopped);
    let r = p.resize("vm-r", "e2-small").await.unwrap();
    assert!(!r.caused_downtime);
    assert_eq!(r.machine.status, Status::Stopped);
    assert!(matches!(
        p.hourly_price("e2-small", ZONE).await,
        Err(Error::Unsupported { .. })
    ));
}

#[tokio::test]
async fn a_disk_of_the_same_name_is_already_exists_not_a_passing_failure() {
    // Compute Engine names the boot disk after the instance. A disk of that name left by another tool
    // (or kept from an earlier machine) makes the insert conflict on the disk: that lasts, so it is
    // AlreadyExists, not a transient error a caller would retry forever; and the disk is left alone.
    let fake = FakeGce::start().await.unwrap();
    let p = GceProvider::new(
        builder(&fake).retry(RetryPolicy::NEVER).build().unwrap(),
        "stack-1",
    )
    .await
    .unwrap();
    fake.put_disk(ZONE, "vm-disk", json!({"team": "data"}));
    let e = p.create(&spec("vm-disk", "e2-small")).await.unwrap_err();
    assert!(matches!(e, Error::AlreadyExists { .. }), "{e:?}");
    assert!(e.to_string().contains("disks/vm-disk"), "{e}");
    assert!(fake.instance_names(ZONE).is_empty());
    assert_eq!(fake.disk_names(ZONE), vec!["vm-disk".to_string()]);
    assert_eq!(fake.control().count(&Method::DELETE, "/disks/"), 0);
}

#[tokio::test]
async fn an_operations_wait_that_answers_at_once_is_not_called_in_a_tight_loop() {
    // operations.wait is best effort: it may answer at once with the operation still running. The
    // driver then pauses before it asks again, rather than spending the project's API quota in a loop.
    let fake = FakeGce::start().await.unwrap();
    let p = GceProvider::new(
        builder(&fake)
            .operation_timeout(Duration::from_secs(2))
            .build()
            .unwrap(),
        "stack-1",
    )
    .await
    .unwrap();
    let m = p
        .create(&spec("vm-wait", "e2-small"))
        .await
        .unwrap()
        .machine()
        .unwrap();
    fake.answer_waits_early(u32::MAX);
    fake.control().clear_log();
    let e = p.stop(&m.id).await.unwrap_err();
    assert!(e.is_retryable(), "{e:?}");
    let waits = fake.control().count(&Method::POST, "/wait");
    assert!(
        (2..=12).contains(&waits),
        "{waits} operations.wait calls in 2 s"
    );
    fake.answer_waits_early(0);
}

#[tokio::test]
async fn a_stale_request_id_never_deletes_a_machine_made_since() {
    // An earlier create of this spec failed (no stock); since then another create made a machine of
    // that name (another type). Creating the first spec again repeats its request id, which answers
    // the old failed operation: the clean-up after it must not delete the machine made since.
    let fake = FakeGce::start().await.unwrap();
    let p = provider(&fake, "stack-1").await;
    fake.exhaust("e2-small", ZONE);
    let got = p.create(&spec("vm-same", "e2-small")).await.unwrap();
    assert!(matches!(got, Created::NoStock { .. }), "{got:?}");
    fake.restore("e2-small", ZONE);
    let other = p
        .create(&spec("vm-same", "e2-medium"))
        .await
        .unwrap()
        .machine()
        .unwrap();
    assert_eq!(other.machine_type, "e2-medium");
    fake.control().clear_log();
    let e = p.create(&spec("vm-same", "e2-small")).await.unwrap_err();
    assert!(matches!(e, Error::AlreadyExists { .. }), "{e:?}");
    assert_eq!(
        fake.control().count(&Method::DELETE, "/instances/vm-same"),
        0
    );
    let vm = fake
        .instance(ZONE, "vm-same")
        .expect("the machine made since is kept");
    assert!(vm["machineType"].as_str().unwrap().ends_with("/e2-medium"));
    assert_eq!(vm["status"], "RUNNING");

    // The same with an earlier create that succeeded: its machine was deleted and another made under
    // the name since. The old, successful operation does not make that machine this create's.
    p.create(&spec("vm-twice", "e2-small"))
        .await
        .unwrap()
        .machine()
        .unwrap();
    p.delete("vm-twice").await.unwrap();
    p.create(&spec("vm-twice", "e2-medium"))
        .await
        .unwrap()
        .machine()
        .unwrap();
    let got = p.create(&spec("vm-twice", "e2-small")).await;
    assert!(matches!(got, Err(Error::AlreadyExists { .. })), "{got:?}");
    let vm = fake.instance(ZONE, "vm-twice").unwrap();
    assert!(vm["machineType"].as_str().unwrap().ends_with("/e2-medium"));
}
