//! What real EC2 does that moto does not, taught to the proxy (`orca_fakes::moto`), and what the
//! driver makes of it: eventual consistency after RunInstances, MaxResults bounds, short and empty
//! pages when filtering, `Unsupported` for a type a zone does not offer, `LaunchTime` as the last
//! start, and per-key tag changes.

use crate::common;

use std::time::Duration;

use aws_sdk_ec2::types::InstanceStateName;
use common::{Fault, ZONE, ZONE_WITHOUT_T4G, ec2_error, env, made, own_env, rule};
use orca_machines::labels::Labels;
use orca_machines::{Created, Error, ErrorKind, MachineSpec, Provider, RetryPolicy, Status};

/// The state moto holds for `id`, behind the proxy's back.
async fn state_in_moto(moto: &str, id: &str) -> InstanceStateName {
    let out = common::sdk(moto)
        .await
        .describe_instances()
        .instance_ids(id)
        .send()
        .await
        .unwrap();
    out.reservations()[0].instances()[0]
        .state()
        .and_then(|s| s.name())
        .cloned()
        .unwrap()
}

#[tokio::test]
async fn a_create_answers_only_once_ec2_shows_the_instance() {
    let Some(e) = env("a_create_answers_only_once_ec2_shows_the_instance").await else {
        return;
    };
    let p = e.provider("owner-1").await;
    e.proxy.set_visibility_delay(Duration::from_millis(800));
    // Its first look misses the instance even when a loaded machine makes it come late.
    e.proxy.miss_first_look();
    let m = match p.create(&e.spec("vis-1")).await.unwrap() {
        Created::Machine(m) => m,
        other => panic!("{other:?}"),
    };
    // The very next read by anyone, through the same (eventually consistent) EC2, finds it.
    let raw = common::sdk(&e.proxy.url).await;
    let seen = raw.describe_instances().instance_ids(&m.id).send().await;
    assert!(
        seen.is_ok(),
        "the create answered before EC2 showed {}: {seen:?}",
        m.id
    );
    // The delay was in force: EC2 did not show the new instance to the create's first look (a
    // listing of the pool filtered on its id), and the create looked again.
    let looks = e
        .proxy
        .of("DescribeInstances")
        .into_iter()
        .filter(|s| s.params.values().any(|v| v == &m.id))
        .count();
    assert!(looks >= 3, "{looks} look(s): the delay was not met");
    assert_eq!(m.status, Status::Running, "the machine as EC2 shows it");
    assert!(p.delete(&m.id).await.unwrap());
}

#[tokio::test]
async fn a_listing_right_after_a_create_finds_the_machine() {
    let Some(e) = env("a_listing_right_after_a_create_finds_the_machine").await else {
        return;
    };
    // EC2 shows a new instance to a read by id before its tags reach the tag filters a listing
    // uses.
    e.proxy.set_tag_filter_lag(Duration::from_millis(800));
    e.proxy.miss_first_look();
    let p = e.provider("owner-1").await;
    let m = made(p.create(&e.spec("tagged-1")).await.unwrap());
    let listed = p.machines(&e.pool).await.unwrap();
    assert_eq!(
        listed.iter().map(|x| x.id.as_str()).collect::<Vec<_>>(),
        [m.id.as_str()],
        "a listing right after the create"
    );
    // The create waited with the listing's own filters and the id, one request a look.
    let reads = e.proxy.of("DescribeInstances");
    let waits: Vec<_> = reads
        .iter()
        .filter(|s| s.params.values().any(|v| v == "instance-id"))
        .collect();
    assert!(waits.len() >= 2, "the lag was met: {} look(s)", waits.len());
    for w in waits {
        assert!(
            w.params.values().any(|v| v == &m.id)
                && w.params.values().any(|v| v == "tag:orca-pool"),
            "{:?}",
            w.params
        );
    }
    assert!(p.delete(&m.id).await.unwrap());
}

#[tokio::test]
async fn the_first_look_misses_a_new_instance_however_late_it_comes() {
    let Some(e) = env("the_first_look_misses_a_new_instance_however_late_it_comes").await else {
        return;
    };
    // Windows over long before anyone looks, as on a machine too loaded to look in time.
    e.proxy.set_visibility_delay(Duration::from_millis(1));
    e.proxy.set_tag_filter_lag(Duration::from_millis(1));
    e.proxy.miss_first_look();
    let raw = common::sdk(&e.proxy.url).await;
    let run = |name: &'static str| {
        raw.run_instances()
            .image_id("ami-0b1e2a3d4c5f60a02")
            .instance_type(aws_sdk_ec2::types::InstanceType::T3Micro)
            .min_count(1)
            .max_count(1)
            .subnet_id(&e.seed.subnets[common::ZONE])
            .tag_specifications(orca_tags("owner-1", &e.pool, name))
            .send()
    };
    let id = |out: aws_sdk_ec2::operation::run_instances::RunInstancesOutput| {
        out.instances()[0].instance_id().unwrap().to_string()
    };
    let by_id = id(run("late-1").await.unwrap());
    let by_tag = id(run("late-2").await.unwrap());
    tokio::time::sleep(Duration::from_millis(50)).await;
    // A read by id misses the first once, then finds it.
    let read = || raw.describe_instances().instance_ids(&by_id).send();
    let first = read().await.unwrap_err();
    assert_eq!(
        first.as_service_error().and_then(|s| s.meta().code()),
        Some("InvalidInstanceID.NotFound")
    );
    assert!(read().await.is_ok(), "the second read finds it");
    let listed = || async {
        let out = raw
            .describe_instances()
            .filters(
                aws_sdk_ec2::types::Filter::builder()
                    .name("tag:orca-pool")
                    .values(&e.pool)
                    .build(),
            )
            .send()
            .await
            .unwrap();
        let ids: Vec<String> = out
            .reservations()
            .iter()
            .flat_map(|r| r.instances())
            .filter_map(|i| i.instance_id().map(str::to_string))
            .collect();
        ids
    };
    // A listing filtered on a tag misses both once: the first for its tag window, the second for
    // both windows. Then it finds both, and a read by id finds the second at once.
    assert_eq!(
        listed().await,
        Vec::<String>::new(),
        "the first tag listing"
    );
    let mut second = listed().await;
    second.sort();
    let mut both = vec![by_id.clone(), by_tag.clone()];
    both.sort();
    assert_eq!(second, both, "the second tag listing");
    let read = raw.describe_instances().instance_ids(&by_tag).send().await;
    assert!(read.is_ok(), "a read by id after the listing: {read:?}");
    for id in [by_id, by_tag] {
        raw.terminate_instances()
            .instance_ids(id)
            .send()
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn a_not_found_for_a_machine_made_lately_is_read_again() {
    let Some(e) = env("a_not_found_for_a_machine_made_lately_is_read_again").await else {
        return;
    };
    let p = e.provider("owner-1").await;
    let m = made(p.create(&e.spec("fresh-1")).await.unwrap());
    // EC2 shows the instance to one call and not (yet) to the next: the next read misses it
    // however late it comes on a loaded machine.
    e.proxy.miss_first_look();
    e.proxy.hide(&m.id, Duration::from_millis(500));
    let before = e.proxy.count("DescribeInstances");
    let read = p.machine(&m.id).await.unwrap();
    assert_eq!(read.map(|r| r.id), Some(m.id.clone()));
    assert!(
        e.proxy.count("DescribeInstances") - before >= 2,
        "read again after a not found"
    );
    // A change answered "not found" for it is made again (after a read that still shows it).
    e.proxy.inject(
        rule(
            "StopInstances",
            ec2_error(400, "InvalidInstanceID.NotFound"),
            2,
        )
        .when_form("InstanceId.1", &m.id),
    );
    let stopped = p.stop(&m.id).await.unwrap();
    assert_eq!(stopped.status, Status::Stopped);
    assert_eq!(e.proxy.count("StopInstances"), 3);
    // Another provider that did not make it confirms EC2's "not found" too, within its shorter
    // window, and believes it only when EC2 keeps it up that long.
    let other = e.provider("owner-1").await;
    e.proxy.hide(&m.id, Duration::from_secs(30));
    let before = e.proxy.count("DescribeInstances");
    assert_eq!(other.machine(&m.id).await.unwrap(), None);
    assert!(e.proxy.count("DescribeInstances") - before >= 2);
    e.proxy.hide(&m.id, Duration::ZERO);
    assert!(p.delete(&m.id).await.unwrap());
}

/// The tags orca puts on a machine of `owner` in `pool` named `name`.
fn orca_tags(owner: &str, pool: &str, name: &str) -> aws_sdk_ec2::types::TagSpecification {
    let tag = |k: &str, v: &str| aws_sdk_ec2::types::Tag::builder().key(k).value(v).build();
    aws_sdk_ec2::types::TagSpecification::builder()
        .resource_type(aws_sdk_ec2::types::ResourceType::Instance)
        .tags(tag("orca", "pool"))
        .tags(tag("orca-pool", pool))
        .tags(tag("orca-owner", owner))
        .tags(tag("Name", name))
        .build()
}

#[tokio::test]
async fn a_not_found_is_confirmed_for_an_instance_another_provider_made() {
    let Some(e) = env("a_not_found_is_confirmed_for_an_instance_another_provider_made").await
    else {
        return;
    };
    // owner-1's machine, made a moment ago by another process (RunInstances through the same,
    // eventually consistent EC2): EC2 does not show it yet.
    let hidden = Duration::from_millis(700);
    e.proxy.set_visibility_delay(hidden);
    let raw = common::sdk(&e.proxy.url).await;
    let out = raw
        .run_instances()
        .image_id("ami-0b1e2a3d4c5f60a02")
        .instance_type(aws_sdk_ec2::types::InstanceType::T3Micro)
        .min_count(1)
        .max_count(1)
        .subnet_id(&e.seed.subnets[common::ZONE])
        .tag_specifications(orca_tags("owner-1", &e.pool, "elsewhere-1"))
        .send()
        .await
        .unwrap();
    e.proxy.set_visibility_delay(Duration::ZERO);
    let id = out.instances()[0].instance_id().unwrap().to_string();
    // Another owner's delete while EC2 hides it: not "gone", but not this owner's; nothing changes.
    let other = e.provider("owner-2").await;
    match other.delete(&id).await {
        Err(Error::NotOwned { .. }) => {}
        r => panic!("another owner's delete of a fresh instance gave {r:?}, not NotOwned"),
    }
    assert_eq!(e.proxy.count("TerminateInstances"), 0);
    assert_eq!(
        state_in_moto(&e.seed.moto, &id).await,
        InstanceStateName::Running,
        "the instance keeps running"
    );
    // Nor is it "none" to another owner's read.
    e.proxy.hide(&id, hidden);
    match other.machine(&id).await {
        Err(Error::NotOwned { .. }) => {}
        r => panic!("another owner's read of a fresh instance gave {r:?}, not NotOwned"),
    }
    // The same owner after a restart (a provider that did not make it): its delete really deletes.
    e.proxy.hide(&id, hidden);
    let restarted = e.provider("owner-1").await;
    assert!(restarted.delete(&id).await.unwrap());
    assert_eq!(
        state_in_moto(&e.seed.moto, &id).await,
        InstanceStateName::Terminated,
        "delete answered true: the instance must be terminated"
    );
    // An unknown id is still gone (true), once a few reads within the window have confirmed it.
    let before = e.proxy.count("DescribeInstances");
    assert!(other.delete("i-0123456789abcdef0").await.unwrap());
    let reads = e.proxy.count("DescribeInstances") - before;
    assert!((2..=64).contains(&reads), "{reads} reads");
}

#[tokio::test]
async fn a_pending_instance_an_earlier_create_made_is_adopted() {
    let Some(e) = env("a_pending_instance_an_earlier_create_made_is_adopted").await else {
        return;
    };
    // EC2 keeps a new instance pending while it boots (moto does not: the proxy does); long enough
    // that the later creates still find it pending however slowly a loaded machine runs them.
    e.proxy.keep_pending(Duration::from_secs(30));
    let spec = e.spec("pend-1");
    let first = match e.provider("owner-1").await.create(&spec).await.unwrap() {
        Created::Machine(m) => m,
        other => panic!("a first create gave {other:?}"),
    };
    assert_eq!(first.status, Status::Starting, "pending as EC2 shows it");
    // EC2's launch times have whole seconds, and so do the `Date` headers that show its clock: the
    // next creates begin two seconds later.
    tokio::time::sleep(Duration::from_millis(2100)).await;
    // The same create from a restarted process while the instance is still pending: EC2 answers
    // the ClientToken with it, pending as a new one would be; an earlier call made it.
    match e.provider("owner-1").await.create(&spec).await.unwrap() {
        Created::Adopted(m) => assert_eq!(
            (m.id.as_str(), m.status),
            (first.id.as_str(), Status::Starting)
        ),
        other => panic!("a repeated create of a pending instance gave {other:?}"),
    }
    // A throttled first attempt (429-like: EC2 served nothing) does not make it this call's.
    e.proxy.inject(rule(
        "RunInstances",
        ec2_error(503, "RequestLimitExceeded"),
        1,
    ));
    let before = e.proxy.count("RunInstances");
    match e.provider("owner-1").await.create(&spec).await.unwrap() {
        Created::Adopted(m) => assert_eq!(m.id, first.id),
        other => panic!("a create throttled then answered a pending instance gave {other:?}"),
    }
    assert_eq!(e.proxy.count("RunInstances"), before + 2);
    let p = e.provider("owner-1").await;
    assert_eq!(p.machines(&e.pool).await.unwrap().len(), 1, "one machine");
    assert!(p.delete(&first.id).await.unwrap());
}

#[tokio::test]
async fn delete_never_believes_a_not_found_from_terminate() {
    let Some(e) = env("delete_never_believes_a_not_found_from_terminate").await else {
        return;
    };
    let p = e.provider("owner-1").await;
    let m = made(p.create(&e.spec("term-1")).await.unwrap());
    e.proxy.inject(
        rule(
            "TerminateInstances",
            ec2_error(400, "InvalidInstanceID.NotFound"),
            2,
        )
        .when_form("InstanceId.1", &m.id),
    );
    assert!(p.delete(&m.id).await.unwrap());
    assert_eq!(
        state_in_moto(&e.seed.moto, &m.id).await,
        InstanceStateName::Terminated,
        "delete answered true: the instance must be terminated"
    );
    assert_eq!(e.proxy.count("TerminateInstances"), 3);

    // EC2 never confirms within the window: the delete is not "gone", and the instance still runs.
    let quick = common::provider(
        e.builder().visibility_window(Duration::from_millis(300)),
        "owner-1",
    )
    .await
    .unwrap();
    let m = made(quick.create(&e.spec("term-2")).await.unwrap());
    e.proxy.inject(
        rule(
            "TerminateInstances",
            ec2_error(400, "InvalidInstanceID.NotFound"),
            u32::MAX,
        )
        .when_form("InstanceId.1", &m.id),
    );
    let err = quick.delete(&m.id).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Transient, "{err}");
    assert_eq!(err.code(), Some("InvalidInstanceID.NotFound"), "{err}");
    assert_eq!(
        state_in_moto(&e.seed.moto, &m.id).await,
        InstanceStateName::Running
    );
    e.proxy.clear("TerminateInstances");
    assert!(quick.delete(&m.id).await.unwrap());
}

#[tokio::test]
async fn max_results_is_five_to_one_thousand() {
    let Some(e) = env("max_results_is_five_to_one_thousand").await else {
        return;
    };
    // EC2 refuses a page size outside 5 to 1000; the proxy does as EC2 (moto accepts any).
    let raw = common::sdk(&e.proxy.url).await;
    for bad in [1, 4, 1001] {
        let r = raw.describe_instances().max_results(bad).send().await;
        let code = r
            .as_ref()
            .err()
            .and_then(|e| aws_sdk_ec2::error::ProvideErrorMetadata::code(e));
        assert_eq!(
            code,
            Some("InvalidParameterValue"),
            "MaxResults {bad}: {r:?}"
        );
    }
    for good in [5, 1000] {
        raw.describe_instances()
            .max_results(good)
            .send()
            .await
            .unwrap();
    }
    // The driver never asks for less: its settings refuse it before any call.
    let n = e.proxy.requests();
    let err = e.builder().page_size(4).build().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidSettings, "{err}");
    assert_eq!(e.proxy.requests(), n);
}

#[tokio::test]
async fn unsupported_is_no_stock_only_for_a_type_the_zone_does_not_offer() {
    let Some(e) = env("unsupported_is_no_stock_only_for_a_type_the_zone_does_not_offer").await
    else {
        return;
    };
    let p = e.provider("owner-1").await;
    // EC2 does not offer t4g in us-east-1e: Unsupported, which is no stock there (try elsewhere).
    let spec = MachineSpec::new("arm-1", "t4g.micro", ZONE_WITHOUT_T4G, &e.pool);
    match p.create(&spec).await.unwrap() {
        Created::NoStock {
            machine_type,
            location,
            message,
            ..
        } => {
            assert_eq!(
                (machine_type.as_str(), location.as_str()),
                ("t4g.micro", ZONE_WITHOUT_T4G)
            );
            assert!(message.contains("Unsupported"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(e.proxy.count("DescribeInstanceTypeOfferings"), 1);
    // Unsupported for a type the zone offers is a configuration EC2 refuses: an error saying so, with
    // EC2's code and words, not no stock (an autoscaler would hide it by falling back).
    e.proxy
        .inject(rule("RunInstances", ec2_error(400, "Unsupported"), 1));
    let err = p.create(&e.spec("conf-1")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Other, "{err}");
    assert_eq!(err.code(), Some("Unsupported"));
    let text = err.to_string();
    assert!(
        text.contains("offers t3.micro in us-east-1a") && text.contains("configuration"),
        "{text}"
    );
    assert!(p.machines(&e.pool).await.unwrap().is_empty());
}

#[tokio::test]
async fn power_times_are_the_last_start_and_stop() {
    let Some(e) = env("power_times_are_the_last_start_and_stop").await else {
        return;
    };
    let p = e.provider("owner-1").await;
    let m = made(p.create(&e.spec("pow-1")).await.unwrap());
    let created = m.created_at.expect("created_at");
    // Made and started at once (EC2's times have whole seconds; the volume is attached just after
    // the launch).
    let launched = m.started_at.expect("started_at");
    assert!(
        (created - launched).num_seconds().abs() <= 1,
        "created {created}, launched {launched}"
    );
    assert_eq!(m.stopped_at, None);
    assert!(m.fqdn.ends_with(".amazonaws.com"), "{}", m.fqdn);
    assert!(m.private_address.parse::<std::net::Ipv4Addr>().is_ok());
    // EC2's times have whole seconds: a second apart, so that the next ones differ.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let stopped = p.stop(&m.id).await.unwrap();
    let stop_at = stopped.stopped_at.expect("stopped_at of a stopped machine");
    assert!(stop_at > created, "{stop_at} after {created}");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    p.start(&m.id).await.unwrap();
    let read = p.machine(&m.id).await.unwrap().unwrap();
    let started = read.started_at.expect("started_at");
    assert!(started > stop_at, "started {started}, stopped {stop_at}");
    assert_eq!(read.stopped_at, None, "running again");
    assert_eq!(
        read.created_at,
        Some(created),
        "made once, whatever its starts"
    );
    assert!(p.delete(&m.id).await.unwrap());
}

#[tokio::test]
async fn labels_change_per_key_and_keep_another_writers() {
    let Some(e) = env("labels_change_per_key_and_keep_another_writers").await else {
        return;
    };
    let p = e.provider("owner-1").await;
    let m = made(
        p.create(&e.spec("lab-1").with_label("shed-state", "creating"))
            .await
            .unwrap(),
    );
    assert_eq!(m.labels["shed-state"], "creating");
    let ext = p.machine_labels().expect("EC2 changes tags");
    // Another writer tags the instance meanwhile.
    let raw = common::sdk(&e.seed.moto).await;
    raw.create_tags()
        .resources(&m.id)
        .tags(
            aws_sdk_ec2::types::Tag::builder()
                .key("backup")
                .value("daily")
                .build(),
        )
        .send()
        .await
        .unwrap();
    let set = Labels::from([("shed-state".to_string(), "ready".to_string())]);
    let after = ext.set_labels(&m.id, &set, &[]).await.unwrap();
    assert_eq!(after.labels["shed-state"], "ready");
    assert_eq!(after.labels["backup"], "daily", "another writer's tag kept");
    // One call per change, naming only the keys changed.
    let create = e.proxy.of("CreateTags");
    assert_eq!(create.len(), 1);
    let keys: Vec<&String> = create[0]
        .params
        .iter()
        .filter(|(k, _)| k.starts_with("Tag.") && k.ends_with(".Key"))
        .map(|(_, v)| v)
        .collect();
    assert_eq!(keys, ["shed-state"]);
    let after = ext
        .set_labels(&m.id, &Labels::new(), &["shed-state".to_string()])
        .await
        .unwrap();
    assert!(!after.labels.contains_key("shed-state"));
    assert_eq!(after.labels["backup"], "daily");
    assert_eq!(after.name, "lab-1");
    // orca's tags and Name are refused before any call.
    let n = e.proxy.requests();
    for (set, remove) in [
        (
            Labels::from([("Name".to_string(), "x".to_string())]),
            vec![],
        ),
        (Labels::new(), vec!["Name".to_string()]),
        (Labels::new(), vec!["orca-pool".to_string()]),
        (
            Labels::from([("orca".to_string(), "x".to_string())]),
            vec![],
        ),
    ] {
        match ext.set_labels(&m.id, &set, &remove).await {
            Err(Error::InvalidSpec { field, .. }) => assert_eq!(field, "labels"),
            other => panic!("{set:?} {remove:?} gave {other:?}"),
        }
    }
    assert_eq!(e.proxy.requests(), n);
    assert!(p.delete(&m.id).await.unwrap());
}

#[tokio::test]
async fn a_create_and_a_listing_read_every_page_when_ec2_pages_short() {
    // On a moto of its own: each scanned page looks at five instances of the region, and the shared
    // moto's region holds every other test's instances (a create waiting 20 s for its instance to
    // show timed out there once, with the other binaries running beside it).
    let Some(e) = own_env("a_create_and_a_listing_read_every_page_when_ec2_pages_short").await
    else {
        return;
    };
    // Instances that are not the pool's, made before: a filtered listing's first pages look at
    // them and find none of ours.
    let ec2 = common::sdk(&e.seed.moto).await;
    let theirs: Vec<String> = ec2
        .run_instances()
        .image_id("ami-0b1e2a3d4c5f60a02")
        .min_count(6)
        .max_count(6)
        .subnet_id(&e.seed.subnets[ZONE])
        .send()
        .await
        .unwrap()
        .instances()
        .iter()
        .map(|i| i.instance_id().unwrap().to_string())
        .collect();
    e.proxy.page_by_scan(5);
    let p = e.provider("owner-1").await;
    let before = e.proxy.count("DescribeInstances");
    let m = made(p.create(&e.spec("scan-1")).await.unwrap());
    let listed = p.machines(&e.pool).await.unwrap();
    assert_eq!(
        listed.iter().map(|x| x.id.as_str()).collect::<Vec<_>>(),
        [m.id.as_str()],
        "a listing after the create"
    );
    // EC2 (the proxy) did page short: some filtered page came with a token for the next.
    let followed = e.proxy.of("DescribeInstances")[before..]
        .iter()
        .filter(|s| s.params.contains_key("NextToken"))
        .count();
    assert!(followed >= 2, "{followed} page(s) read after a first one");
    assert!(p.delete(&m.id).await.unwrap());
    ec2.terminate_instances()
        .set_instance_ids(Some(theirs))
        .send()
        .await
        .unwrap();
}

#[tokio::test]
async fn a_create_with_other_parameters_after_a_lost_one_makes_no_second_machine() {
    let Some(e) =
        env("a_create_with_other_parameters_after_a_lost_one_makes_no_second_machine").await
    else {
        return;
    };
    // Tag filters find a new instance only a while after reads by id do.
    e.proxy.set_tag_filter_lag(Duration::from_secs(4));
    let p = e.provider("owner-1").await;
    // Every answer of the first create's RunInstances is lost: EC2 made the machine, the caller
    // never learns it.
    let attempts = RetryPolicy::fast().max_retries + 1;
    e.proxy
        .inject(rule("RunInstances", Fault::DropAnswer, attempts));
    let quick = common::provider(
        e.builder().visibility_window(Duration::from_millis(300)),
        "owner-1",
    )
    .await
    .unwrap();
    let first = quick.create(&e.spec("dup-1")).await;
    assert!(first.is_err(), "{first:?}");
    e.proxy.clear("RunInstances");
    // The same name again with another label: the same ClientToken with other parameters
    // (IdempotentParameterMismatch), while the tag filters do not show the first machine yet.
    let mut spec = e.spec("dup-1");
    spec.labels.insert("role".into(), "b".into());
    let second = p.create(&spec).await.unwrap();
    assert!(matches!(second, Created::Adopted(_)), "{second:?}");
    // moto itself, past the proxy's lag: one machine of that name.
    let truth = common::provider(common::builder(&e.seed, &e.seed.moto), "owner-1")
        .await
        .unwrap();
    let named: Vec<String> = truth
        .machines(&e.pool)
        .await
        .unwrap()
        .into_iter()
        .filter(|m| m.name == "dup-1")
        .map(|m| m.id)
        .collect();
    assert_eq!(named.len(), 1, "{named:?}");
    for id in named {
        truth.delete(&id).await.unwrap();
    }
}

/// A name made and deleted, then made again by a create whose answers were all lost (its instance
/// stands under the second generation's ClientToken, derived from the deleted one's id), then
/// created once more with other parameters while tag filters do not show that instance yet. EC2
/// answers the first generation's token with IdempotentParameterMismatch and its instance is
/// terminated: the create follows the generations to the standing instance and adopts it, rather
/// than making a second machine of the name under a token of its own.
#[tokio::test]
async fn a_reused_names_lost_create_is_adopted_by_a_create_with_other_parameters() {
    let Some(e) =
        env("a_reused_names_lost_create_is_adopted_by_a_create_with_other_parameters").await
    else {
        return;
    };
    let p = e.provider("owner-1").await;
    let gone = made(p.create(&e.spec("dup-2")).await.unwrap());
    assert!(p.delete(&gone.id).await.unwrap());
    // Tag filters find a new instance only a while after reads by id do.
    e.proxy.set_tag_filter_lag(Duration::from_secs(4));
    // The first generation's token names the deleted instance; every answer under the second
    // generation's is lost.
    let second = orca_ec2::client_token("owner-1", &e.pool, "dup-2", Some(&gone.id));
    let attempts = RetryPolicy::fast().max_retries + 1;
    e.proxy.inject(
        rule("RunInstances", Fault::DropAnswer, attempts).when_form("ClientToken", &second),
    );
    let quick = common::provider(
        e.builder().visibility_window(Duration::from_millis(300)),
        "owner-1",
    )
    .await
    .unwrap();
    let lost = quick.create(&e.spec("dup-2")).await;
    assert!(lost.is_err(), "{lost:?}");
    e.proxy.clear("RunInstances");
    let mut spec = e.spec("dup-2");
    spec.labels.insert("role".into(), "b".into());
    let again = p.create(&spec).await.unwrap();
    assert!(matches!(again, Created::Adopted(_)), "{again:?}");
    let truth = common::provider(common::builder(&e.seed, &e.seed.moto), "owner-1")
        .await
        .unwrap();
    let named: Vec<String> = truth
        .machines(&e.pool)
        .await
        .unwrap()
        .into_iter()
        .filter(|m| m.name == "dup-2" && m.status != Status::Deleting)
        .map(|m| m.id)
        .collect();
    assert_eq!(named.len(), 1, "{named:?}");
    for id in named {
        truth.delete(&id).await.unwrap();
    }
}
