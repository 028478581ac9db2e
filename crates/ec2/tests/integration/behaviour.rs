//! Request-level behaviour against moto through the fault-injecting proxy: what moto does not model
//! (ClientToken, capacity, quota and throttling errors) and what the conformance suite cannot see (the
//! parameters of each call, the image chosen, the root volume, paging by reservation).

use crate::common;

use std::collections::BTreeSet;
use std::time::Duration;

use aws_sdk_ec2::types::{ResourceType, Tag, TagSpecification};
use common::{Fault, Proxy, ZONE, ec2_error, ec2_error_body, env, made, rule, xml_answer};
use orca_ec2::client_token;
use orca_machines::{Arch, Created, Error, ErrorKind, MachineSpec, Provider, RetryPolicy, Status};

#[tokio::test]
async fn client_token_is_stable_across_retries() {
    let Some(e) = env("client_token_is_stable_across_retries").await else {
        return;
    };
    let p = e.provider("owner-1").await;
    let spec = e.spec("tok-1");
    let want = client_token("owner-1", &e.pool, "tok-1", None);

    // Two failures that never reach EC2, then success: three RunInstances, one token.
    e.proxy.inject(rule(
        "RunInstances",
        ec2_error(503, "ServiceUnavailable"),
        2,
    ));
    let m = made(p.create(&spec).await.unwrap());
    let runs = e.proxy.of("RunInstances");
    assert_eq!(
        runs.len(),
        3,
        "two refused attempts and one that went through"
    );
    for r in &runs {
        assert_eq!(r.params.get("ClientToken"), Some(&want));
    }

    // A whole create that gives up, then a new create (a caller's retry, a restarted process): the same
    // token again.
    let spec2 = e.spec("tok-2");
    e.proxy
        .inject(rule("RunInstances", ec2_error(500, "InternalError"), 7));
    let err = p.create(&spec2).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Transient, "{err}");
    let p2 = e.provider("owner-1").await;
    made(p2.create(&spec2).await.unwrap());
    let tokens: Vec<String> = e
        .proxy
        .of("RunInstances")
        .iter()
        .skip(3)
        .map(|r| r.params["ClientToken"].clone())
        .collect();
    assert_eq!(
        tokens.len(),
        8,
        "seven refused attempts, then the new create's one"
    );
    assert!(
        tokens
            .iter()
            .all(|t| *t == client_token("owner-1", &e.pool, "tok-2", None)),
        "{tokens:?}"
    );

    // A lost answer: the machine was made; the retry re-sends RunInstances with the same token, and
    // EC2 answers the instance the lost attempt made (this call's own: made, not adopted).
    let before = e.proxy.count("RunInstances");
    e.proxy.inject(rule("RunInstances", Fault::DropAnswer, 1));
    let lost = match p.create(&e.spec("tok-3")).await.unwrap() {
        Created::Machine(m) => m,
        other => panic!("a create whose first answer was lost gave {other:?}"),
    };
    let runs = e.proxy.of("RunInstances");
    assert_eq!(runs.len(), before + 2, "the lost attempt and its retry");
    assert_eq!(
        runs[before].params["ClientToken"],
        runs[before + 1].params["ClientToken"]
    );
    // A create of the same spec later is answered the same instance, adopted: not made now.
    match p.create(&e.spec("tok-3")).await.unwrap() {
        Created::Adopted(m) => assert_eq!(m.id, lost.id),
        other => panic!("a repeated create gave {other:?}"),
    }
    // Also from another provider (a restarted process) that never saw it.
    match e
        .provider("owner-1")
        .await
        .create(&e.spec("tok-3"))
        .await
        .unwrap()
    {
        Created::Adopted(m) => assert_eq!(m.id, lost.id),
        other => panic!("a repeated create from a fresh provider gave {other:?}"),
    }

    let listed = p.machines(&e.pool).await.unwrap();
    let mut names: Vec<&str> = listed.iter().map(|m| m.name.as_str()).collect();
    names.sort();
    assert_eq!(names, ["tok-1", "tok-2", "tok-3"], "one machine per name");
    assert!(listed.iter().any(|x| x.id == m.id));
    for m in listed {
        assert!(p.delete(&m.id).await.unwrap());
    }
}

/// A name made and deleted again and again (a program that reuses its names: keeper's
/// `<name>-<index>`, a host recreated): each create follows the ClientTokens past every terminated
/// instance EC2 still answers for them, however many there are.
#[tokio::test]
async fn a_name_made_and_deleted_many_times_is_made_again() {
    let Some(e) = env("a_name_made_and_deleted_many_times_is_made_again").await else {
        return;
    };
    let p = e.provider("owner-1").await;
    let mut ids = Vec::new();
    for round in 0..6 {
        let m = match p.create(&e.spec("again-1")).await {
            Ok(Created::Machine(m)) => m,
            other => panic!("round {round}: the name made again gave {other:?}"),
        };
        assert!(!ids.contains(&m.id), "round {round}: a new instance");
        ids.push(m.id.clone());
        assert!(p.delete(&m.id).await.unwrap());
    }
}

#[tokio::test]
async fn a_token_that_names_a_terminated_instance_moves_on() {
    let Some(e) = env("a_token_that_names_a_terminated_instance_moves_on").await else {
        return;
    };
    let p = e.provider("owner-1").await;
    // A name made, deleted and made again: EC2 answers the ClientToken with the instance it made the
    // first time, terminated (a token outlives its instance by at least a day).
    let first = made(p.create(&e.spec("gen-1")).await.unwrap());
    assert!(p.delete(&first.id).await.unwrap());
    let before = e.proxy.count("RunInstances");
    let second = match p.create(&e.spec("gen-1")).await.unwrap() {
        Created::Machine(m) => m,
        other => panic!("the name made again gave {other:?}"),
    };
    assert_ne!(second.id, first.id);
    let runs = &e.proxy.of("RunInstances")[before..];
    assert_eq!(runs.len(), 2, "the old token, then the next generation's");
    assert_eq!(
        runs[0].params["ClientToken"],
        client_token("owner-1", &e.pool, "gen-1", None)
    );
    // The next token is derived from the terminated instance's id: the same on every retry.
    assert_eq!(
        runs[1].params["ClientToken"],
        client_token("owner-1", &e.pool, "gen-1", Some(&first.id))
    );
    let listed = p.machines(&e.pool).await.unwrap();
    assert_eq!(
        listed.iter().map(|m| m.id.as_str()).collect::<Vec<_>>(),
        [second.id.as_str()]
    );
    assert!(p.delete(&second.id).await.unwrap());
}

#[tokio::test]
async fn a_create_of_the_same_name_with_other_settings_is_refused() {
    let Some(e) = env("a_create_of_the_same_name_with_other_settings_is_refused").await else {
        return;
    };
    let p = e.provider("owner-1").await;
    let m = made(p.create(&e.spec("same-1")).await.unwrap());
    let other = MachineSpec::new("same-1", "t3.small", ZONE, &e.pool);
    let err = p.create(&other).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::AlreadyExists, "{err}");
    assert!(err.to_string().contains(&m.id), "{err}");
    assert!(p.delete(&m.id).await.unwrap());
}

#[tokio::test]
async fn a_token_used_before_with_other_parameters_moves_on() {
    let Some(e) = env("a_token_used_before_with_other_parameters_moves_on").await else {
        return;
    };
    let p = e.provider("owner-1").await;
    // A name made and deleted, then made again with other user data (or after Canonical published a
    // newer image): EC2 answers the old token with IdempotentParameterMismatch, though no machine of
    // that name lives. The create goes on under a token of its own, the same for the same request.
    let first = client_token("owner-1", &e.pool, "again-1", None);
    let m = made(p.create(&e.spec("again-1")).await.unwrap());
    assert!(p.delete(&m.id).await.unwrap());
    let spec = e
        .spec("again-1")
        .with_user_data("#cloud-config\n# second life\n");
    let tokens = |before: usize| -> Vec<String> {
        e.proxy.of("RunInstances")[before..]
            .iter()
            .map(|r| r.params["ClientToken"].clone())
            .collect()
    };
    let before = e.proxy.count("RunInstances");
    let second = match p.create(&spec).await.unwrap() {
        Created::Machine(m) => m,
        other => panic!("{other:?}"),
    };
    let round = tokens(before);
    assert_eq!(
        round.len(),
        2,
        "the old token, then one of its own: {round:?}"
    );
    assert_eq!(round[0], first);
    let salted = round[1].clone();
    assert_ne!(salted, first);
    assert_eq!(
        e.proxy.of("RunInstances")[before].code.as_deref(),
        Some("IdempotentParameterMismatch")
    );
    assert_eq!(p.machines(&e.pool).await.unwrap().len(), 1);
    assert!(p.delete(&second.id).await.unwrap());

    // The same request again: the same salted token, which now names a terminated instance, so the
    // generation after it.
    let before = e.proxy.count("RunInstances");
    let third = made(p.create(&spec).await.unwrap());
    let round = tokens(before);
    assert_eq!(
        round,
        [
            first.clone(),
            salted.clone(),
            client_token("owner-1", &e.pool, "again-1", Some(&second.id))
        ]
    );
    assert!(p.delete(&third.id).await.unwrap());

    // Other parameters again: another token.
    let before = e.proxy.count("RunInstances");
    let fourth = made(
        p.create(&e.spec("again-1").with_user_data("#cloud-config\n# third\n"))
            .await
            .unwrap(),
    );
    let round = tokens(before);
    assert_eq!(round.len(), 2, "{round:?}");
    assert_ne!(round[1], salted);
    assert!(p.delete(&fourth.id).await.unwrap());
}

/// A name made with user data A and deleted, then made with user data B (its first token answered
/// IdempotentParameterMismatch: the machine stands under a salted token), then created with user
/// data A again. EC2 answers the first token with A's terminated instance, and the token of the
/// generation after it was never sent: a create that sent it at once would launch a second live
/// machine of the name. It adopts the standing one instead, or refuses it when it is of another
/// type, and sends no further RunInstances.
#[tokio::test]
async fn a_moved_token_adopts_the_names_machine_under_another_token() {
    let Some(e) = env("a_moved_token_adopts_the_names_machine_under_another_token").await else {
        return;
    };
    let p = e.provider("owner-1").await;
    let a = e.spec("gen-1").with_user_data("#cloud-config\n# a\n");
    let b = e.spec("gen-1").with_user_data("#cloud-config\n# b\n");
    let gone = made(p.create(&a).await.unwrap());
    assert!(p.delete(&gone.id).await.unwrap());
    let standing = match p.create(&b).await.unwrap() {
        Created::Machine(m) => m,
        other => panic!("{other:?}"),
    };
    let before = e.proxy.count("RunInstances");
    match p.create(&a).await.unwrap() {
        Created::Adopted(m) => assert_eq!(m.id, standing.id),
        other => panic!("the standing machine adopted, not {other:?}"),
    }
    let first = client_token("owner-1", &e.pool, "gen-1", None);
    let sent: Vec<String> = e.proxy.of("RunInstances")[before..]
        .iter()
        .map(|r| r.params["ClientToken"].clone())
        .collect();
    assert_eq!(sent, [first], "only the first token was sent");
    let named: Vec<String> = p
        .machines(&e.pool)
        .await
        .unwrap()
        .into_iter()
        .filter(|m| m.name == "gen-1")
        .map(|m| m.id)
        .collect();
    assert_eq!(named, std::slice::from_ref(&standing.id));
    assert!(p.delete(&standing.id).await.unwrap());

    // The same with a label changed, and the standing machine of another type: refused.
    let small = MachineSpec::new("gen-2", "t3.small", ZONE, &e.pool);
    let gone = made(p.create(&small).await.unwrap());
    assert!(p.delete(&gone.id).await.unwrap());
    let mut other = e.spec("gen-2");
    other.labels.insert("role".into(), "b".into());
    let standing = made(p.create(&other).await.unwrap());
    let before = e.proxy.count("RunInstances");
    let err = p.create(&small).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::AlreadyExists, "{err}");
    assert!(err.to_string().contains(&standing.id), "{err}");
    assert_eq!(e.proxy.count("RunInstances") - before, 1);
    let named: Vec<String> = p
        .machines(&e.pool)
        .await
        .unwrap()
        .into_iter()
        .filter(|m| m.name == "gen-2")
        .map(|m| m.id)
        .collect();
    assert_eq!(named, std::slice::from_ref(&standing.id));
    assert!(p.delete(&standing.id).await.unwrap());
}

#[tokio::test]
async fn capacity_is_no_stock() {
    let Some(e) = env("capacity_is_no_stock").await else {
        return;
    };
    let p = e.provider("owner-1").await;
    for (status, code) in [
        (500, "InsufficientInstanceCapacity"),
        (500, "InsufficientHostCapacity"),
    ] {
        let before = e.proxy.count("RunInstances");
        e.proxy
            .inject(rule("RunInstances", ec2_error(status, code), 1));
        match p.create(&e.spec("cap-1")).await.unwrap() {
            Created::NoStock {
                machine_type,
                location,
                message,
                ..
            } => {
                assert_eq!(
                    (machine_type.as_str(), location.as_str()),
                    ("t3.micro", ZONE)
                );
                assert!(message.contains(code), "{message}");
            }
            other => panic!("{code} gave {other:?}"),
        }
        assert_eq!(
            e.proxy.count("RunInstances"),
            before + 1,
            "no stock is not retried"
        );
    }
    assert!(p.machines(&e.pool).await.unwrap().is_empty());
}

#[tokio::test]
async fn quota_is_not_capacity() {
    let Some(e) = env("quota_is_not_capacity").await else {
        return;
    };
    let p = e.provider("owner-1").await;
    for code in ["InstanceLimitExceeded", "VcpuLimitExceeded"] {
        let before = e.proxy.count("RunInstances");
        e.proxy
            .inject(rule("RunInstances", ec2_error(400, code), 1));
        match p.create(&e.spec("quota-1")).await {
            Err(Error::Quota { message, .. }) => assert!(message.contains(code), "{message}"),
            other => panic!("{code} gave {other:?}"),
        }
        assert_eq!(
            e.proxy.count("RunInstances"),
            before + 1,
            "quota is not retried"
        );
    }
    assert!(p.machines(&e.pool).await.unwrap().is_empty());
}

#[tokio::test]
async fn throttling_is_backed_off() {
    let Some(e) = env("throttling_is_backed_off").await else {
        return;
    };
    let initial = Duration::from_millis(80);
    let policy = RetryPolicy {
        max_retries: 4,
        initial_backoff: initial,
        max_backoff: Duration::from_secs(2),
        max_elapsed: Duration::from_secs(30),
        ..RetryPolicy::default()
    };
    let p = common::provider(e.builder().retry(policy), "owner-1")
        .await
        .unwrap();
    e.proxy.inject(rule(
        "RunInstances",
        ec2_error(503, "RequestLimitExceeded"),
        3,
    ));
    let m = made(p.create(&e.spec("slow-1")).await.unwrap());
    let runs = e.proxy.of("RunInstances");
    assert_eq!(
        runs.len(),
        4,
        "three throttled attempts, then the one that went through"
    );
    // Equal jitter: the wait before retry r is at least half of initial * 2^r.
    for (r, pair) in runs.windows(2).enumerate() {
        let gap = pair[1].at - pair[0].at;
        let floor = initial * 2u32.pow(r as u32) / 2;
        assert!(
            gap >= floor,
            "retry {r} came after {gap:?}, under {floor:?}"
        );
    }
    let token = &runs[0].params["ClientToken"];
    assert!(runs.iter().all(|r| &r.params["ClientToken"] == token));

    // A listing is throttled too, and backed off the same way.
    e.proxy.inject(rule(
        "DescribeInstances",
        ec2_error(503, "RequestLimitExceeded"),
        2,
    ));
    assert_eq!(p.machines(&e.pool).await.unwrap().len(), 1);

    // Throttled for longer than the policy allows: the caller hears it, with its meaning.
    e.proxy.inject(rule(
        "DescribeInstances",
        ec2_error(503, "RequestLimitExceeded"),
        100,
    ));
    let before = e.proxy.count("DescribeInstances");
    let err = p.machines(&e.pool).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Throttled, "{err}");
    assert_eq!(
        e.proxy.count("DescribeInstances"),
        before + 5,
        "bounded: 1 + 4 retries"
    );
    e.proxy.clear("DescribeInstances");
    assert!(p.delete(&m.id).await.unwrap());
}

#[tokio::test]
async fn other_errors_have_their_meaning() {
    let Some(e) = env("other_errors_have_their_meaning").await else {
        return;
    };
    let p = e.provider("owner-1").await;
    let cases = [
        (401, "AuthFailure", ErrorKind::Unauthenticated),
        (403, "UnauthorizedOperation", ErrorKind::PermissionDenied),
    ];
    for (status, code, kind) in cases {
        e.proxy
            .inject(rule("DescribeInstances", ec2_error(status, code), 1));
        let err = p.machines(&e.pool).await.unwrap_err();
        assert_eq!(err.kind(), kind, "{code}: {err}");
        assert!(!err.to_string().contains(common::SECRET));
    }
}

#[tokio::test]
async fn create_sends_everything_in_one_call() {
    let Some(e) = env("create_sends_everything_in_one_call").await else {
        return;
    };
    let p = e.provider("owner-1").await;
    let user_data = "#cloud-config\nruncmd: [echo hello]\n";
    let spec = e.spec("all-1").with_user_data(user_data);
    let m = made(p.create(&spec).await.unwrap());
    let runs = e.proxy.of("RunInstances");
    assert_eq!(runs.len(), 1);
    let q = &runs[0].params;
    assert_eq!(q["SubnetId"], e.seed.subnets[ZONE]);
    assert_eq!(q["SecurityGroupId.1"], e.seed.security_group);
    assert_eq!(q["IamInstanceProfile.Name"], e.seed.instance_profile);
    assert_eq!(q["InstanceType"], "t3.micro");
    assert_eq!((q["MinCount"].as_str(), q["MaxCount"].as_str()), ("1", "1"));
    assert_eq!(q["BlockDeviceMapping.1.Ebs.DeleteOnTermination"], "true");
    assert_eq!(
        aws_smithy_types::base64::decode(&q["UserData"]).unwrap(),
        user_data.as_bytes()
    );
    // The tags are in this same call, for the instance and its volume.
    let tags = |n: u32| -> Vec<(String, String)> {
        let mut v = Vec::new();
        for i in 1.. {
            let Some(k) = q.get(&format!("TagSpecification.{n}.Tag.{i}.Key")) else {
                break;
            };
            v.push((
                k.clone(),
                q[&format!("TagSpecification.{n}.Tag.{i}.Value")].clone(),
            ));
        }
        v.sort();
        v
    };
    let want = vec![
        ("Name".to_string(), "all-1".to_string()),
        ("orca".into(), "pool".into()),
        ("orca-owner".into(), "owner-1".into()),
        ("orca-pool".into(), e.pool.clone()),
    ];
    assert_eq!(q["TagSpecification.1.ResourceType"], "instance");
    assert_eq!(tags(1), want);
    assert_eq!(q["TagSpecification.2.ResourceType"], "volume");
    assert_eq!(tags(2), want);
    assert_eq!(e.proxy.count("CreateTags"), 0, "no second call for tags");

    // What EC2 (moto) made of it.
    let ec2 = common::sdk(&e.seed.moto).await;
    let ud = ec2
        .describe_instance_attribute()
        .instance_id(&m.id)
        .attribute(aws_sdk_ec2::types::InstanceAttributeName::UserData)
        .send()
        .await
        .unwrap();
    let ud = ud.user_data().and_then(|v| v.value()).unwrap();
    assert_eq!(
        aws_smithy_types::base64::decode(ud).unwrap(),
        user_data.as_bytes()
    );
    let inst = ec2
        .describe_instances()
        .instance_ids(&m.id)
        .send()
        .await
        .unwrap()
        .reservations()[0]
        .instances()[0]
        .clone();
    let root = inst
        .block_device_mappings()
        .iter()
        .find(|b| b.device_name() == inst.root_device_name())
        .and_then(|b| b.ebs())
        .expect("a root volume");
    assert_eq!(root.delete_on_termination(), Some(true));
    let volume = root.volume_id().unwrap().to_string();
    assert_eq!(m.location, ZONE);
    assert_eq!(m.machine_type, "t3.micro");
    assert_eq!(
        m.labels.get("orca-owner").map(String::as_str),
        Some("owner-1")
    );

    // Delete takes the root volume with it.
    assert!(p.delete(&m.id).await.unwrap());
    let vols = ec2
        .describe_volumes()
        .filters(
            aws_sdk_ec2::types::Filter::builder()
                .name("volume-id")
                .values(&volume)
                .build(),
        )
        .send()
        .await
        .unwrap();
    assert!(vols.volumes().is_empty(), "root volume {volume} is left");
}

#[tokio::test]
async fn image_is_canonicals_newest_for_the_arch_and_cached() {
    let Some(e) = env("image_is_canonicals_newest_for_the_arch_and_cached").await else {
        return;
    };
    let p = e.provider("owner-1").await;
    let amd = made(p.create(&e.spec("img-1")).await.unwrap());
    let arm = made(
        p.create(&MachineSpec::new("img-2", "t4g.micro", ZONE, &e.pool))
            .await
            .unwrap(),
    );
    made(p.create(&e.spec("img-3")).await.unwrap());
    let images: Vec<String> = e
        .proxy
        .of("RunInstances")
        .iter()
        .map(|r| r.params["ImageId"].clone())
        .collect();
    // scripts/moto/amis.json: the 20250610 builds are the newest of Canonical's; a lookalike of
    // another owner is newer still and must never be picked.
    assert_eq!(
        images,
        [
            "ami-0b1e2a3d4c5f60a02",
            "ami-0b1e2a3d4c5f60b02",
            "ami-0b1e2a3d4c5f60a02"
        ]
    );
    assert_eq!(
        e.proxy.count("DescribeImages"),
        2,
        "one lookup per architecture"
    );
    let q = &e.proxy.of("DescribeImages")[0].params;
    assert_eq!(q["Owner.1"], "099720109477");
    assert_eq!(
        e.proxy.count("DescribeInstanceTypes"),
        2,
        "one lookup per machine type"
    );
    assert_eq!(p.arch("t4g.micro").await.unwrap(), Arch::Arm64);
    assert_eq!(e.proxy.count("DescribeInstanceTypes"), 2, "cached");

    // An image override is checked against the type's architecture.
    let arm_for_amd = common::provider(
        e.builder().image(Arch::Amd64, "ami-0b1e2a3d4c5f60b02"),
        "owner-1",
    )
    .await
    .unwrap();
    let err = arm_for_amd.create(&e.spec("img-4")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidSettings, "{err}");
    assert!(err.to_string().contains("ORCA_EC2_IMAGES"), "{err}");
    let older = common::provider(
        e.builder().image(Arch::Amd64, "ami-0b1e2a3d4c5f60a01"),
        "owner-1",
    )
    .await
    .unwrap();
    made(older.create(&e.spec("img-5")).await.unwrap());
    assert_eq!(
        e.proxy.of("RunInstances").last().unwrap().params["ImageId"],
        "ami-0b1e2a3d4c5f60a01"
    );
    for m in p.machines(&e.pool).await.unwrap() {
        p.delete(&m.id).await.unwrap();
    }
    let _ = (amd, arm);
}

#[tokio::test]
async fn listing_reads_every_page_by_instance() {
    let Some(e) = env("listing_reads_every_page_by_instance").await else {
        return;
    };
    let p = e.provider("owner-1").await;
    let mut want = Vec::new();
    for i in 0..3 {
        want.push(made(p.create(&e.spec(&format!("page-{i}"))).await.unwrap()).id);
    }
    // One reservation of three instances, as another tool using the same tags would make it: EC2
    // pages by instance, so a page may end inside a reservation.
    let ec2 = common::sdk(&e.seed.moto).await;
    let tag = |k: &str, v: &str| Tag::builder().key(k).value(v).build();
    let out = ec2
        .run_instances()
        .image_id("ami-0b1e2a3d4c5f60a02")
        .instance_type(aws_sdk_ec2::types::InstanceType::T3Micro)
        .min_count(3)
        .max_count(3)
        .subnet_id(&e.seed.subnets[ZONE])
        .tag_specifications(
            TagSpecification::builder()
                .resource_type(ResourceType::Instance)
                .tags(tag("orca", "pool"))
                .tags(tag("orca-pool", &e.pool))
                .tags(tag("orca-owner", "owner-1"))
                .tags(tag("Name", "batch"))
                .build(),
        )
        .send()
        .await
        .unwrap();
    want.extend(
        out.instances()
            .iter()
            .map(|i| i.instance_id().unwrap().to_string()),
    );
    for i in 3..7 {
        want.push(made(p.create(&e.spec(&format!("page-{i}"))).await.unwrap()).id);
    }
    // Another owner's machines fill no page of ours.
    let other = e.provider("owner-2").await;
    made(other.create(&e.spec("theirs-1")).await.unwrap());
    want.sort();

    let paged = common::provider(e.builder().page_size(5), "owner-1")
        .await
        .unwrap();
    let before = e.proxy.count("DescribeInstances");
    let mut got: Vec<String> = paged
        .machines(&e.pool)
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.id)
        .collect();
    got.sort();
    assert_eq!(got, want);
    // 10 instances of ours, 5 a page: 2 pages, the second asked with the first's token; the batch's
    // reservation is split between them.
    let pages = &e.proxy.of("DescribeInstances")[before..];
    assert_eq!(pages.len(), 2, "{} pages", pages.len());
    assert!(!pages[0].params.contains_key("NextToken"));
    assert!(pages[1].params.contains_key("NextToken"));
    assert!(pages.iter().all(|s| s.params["MaxResults"] == "5"));
    for m in p.machines(&e.pool).await.unwrap() {
        p.delete(&m.id).await.unwrap();
    }
    for m in other.machines(&e.pool).await.unwrap() {
        other.delete(&m.id).await.unwrap();
    }
}

#[tokio::test]
async fn delete_refuses_what_is_not_ours() {
    let Some(e) = env("delete_refuses_what_is_not_ours").await else {
        return;
    };
    let ec2 = common::sdk(&e.seed.moto).await;
    let out = ec2
        .run_instances()
        .image_id("ami-0b1e2a3d4c5f60a02")
        .min_count(1)
        .max_count(1)
        .subnet_id(&e.seed.subnets[ZONE])
        .send()
        .await
        .unwrap();
    let id = out.instances()[0].instance_id().unwrap().to_string();
    for owner in ["owner-1", ""] {
        let p = e.provider(owner).await;
        match p.delete(&id).await {
            Err(Error::NotOwned { .. }) => {}
            other => panic!("deleting an untagged instance as {owner:?} gave {other:?}"),
        }
        for r in [
            p.stop(&id).await.map(|_| ()),
            p.start(&id).await.map(|_| ()),
        ] {
            assert!(matches!(r, Err(Error::NotOwned { .. })), "{r:?}");
        }
    }
    assert_eq!(e.proxy.count("TerminateInstances"), 0);
    assert_eq!(e.proxy.count("StopInstances"), 0);
    ec2.terminate_instances()
        .instance_ids(&id)
        .send()
        .await
        .unwrap();
    // Gone (terminated by someone else) is gone.
    assert!(e.provider("owner-1").await.delete(&id).await.unwrap());
}

#[tokio::test]
async fn states_stop_start_and_resize() {
    let Some(e) = env("states_stop_start_and_resize").await else {
        return;
    };
    let p = e.provider("owner-1").await;
    let m = made(p.create(&e.spec("st-1")).await.unwrap());
    assert!(
        matches!(m.status, Status::Starting | Status::Running),
        "{:?}",
        m.status
    );

    let stopped = p.stop(&m.id).await.unwrap();
    assert_eq!(
        (stopped.status, stopped.cloud_status.as_str()),
        (Status::Stopped, "stopped")
    );
    let listed = p.machines(&e.pool).await.unwrap();
    assert_eq!(listed[0].status, Status::Stopped);

    // A stopped machine is resized without downtime and stays stopped.
    let r = p.resize(&m.id, "t3.small").await.unwrap();
    assert!(!r.caused_downtime);
    assert_eq!(
        (r.machine.machine_type.as_str(), r.machine.status),
        ("t3.small", Status::Stopped)
    );

    let started = p.start(&m.id).await.unwrap();
    assert!(matches!(started.status, Status::Starting | Status::Running));

    // A running one is stopped, changed and started again.
    let before_stop = e.proxy.count("StopInstances");
    let r = p.resize(&m.id, "t3.medium").await.unwrap();
    assert!(r.caused_downtime);
    assert_eq!(r.machine.machine_type, "t3.medium");
    assert!(matches!(
        r.machine.status,
        Status::Starting | Status::Running
    ));
    assert_eq!(e.proxy.count("StopInstances"), before_stop + 1);
    let modify = e.proxy.of("ModifyInstanceAttribute");
    assert_eq!(
        modify.last().unwrap().params["InstanceType.Value"],
        "t3.medium"
    );

    // EC2 refuses an arm64 type for an amd64 image (moto would not): refused before any change.
    let calls = e.proxy.count("ModifyInstanceAttribute") + e.proxy.count("StopInstances");
    let err = p.resize(&m.id, "t4g.micro").await.unwrap_err();
    assert!(
        matches!(err, Error::InvalidSpec { ref field, .. } if field == "machine_type"),
        "{err}"
    );
    assert_eq!(
        e.proxy.count("ModifyInstanceAttribute") + e.proxy.count("StopInstances"),
        calls
    );

    // An unknown location is refused before any call.
    let n = e.proxy.requests();
    let err = p
        .create(&MachineSpec::new("st-2", "t3.micro", "mars-1a", &e.pool))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::InvalidSpec { ref field, .. } if field == "location"),
        "{err}"
    );
    assert_eq!(e.proxy.requests(), n);

    assert!(p.delete(&m.id).await.unwrap());
    assert!(p.machines(&e.pool).await.unwrap().is_empty());
}

/// EC2 refuses a call on an instance whose state does not allow it yet (`IncorrectInstanceState`: a
/// stop of an instance still pending, a type change of one still stopping, where its reads lag) until
/// that state passes: such a call is waited for as one on a busy resource, and the resize goes
/// through.
#[tokio::test]
async fn a_call_refused_for_the_instance_state_is_waited_for() {
    let Some(e) = env("a_call_refused_for_the_instance_state_is_waited_for").await else {
        return;
    };
    let p = e.provider("owner-1").await;
    let m = made(p.create(&e.spec("st-1")).await.unwrap());
    for action in ["StopInstances", "ModifyInstanceAttribute", "StartInstances"] {
        e.proxy
            .inject(rule(action, ec2_error(400, "IncorrectInstanceState"), 1));
    }
    let r = p.resize(&m.id, "t3.small").await.unwrap();
    assert_eq!(r.machine.machine_type, "t3.small");
    for action in ["StopInstances", "ModifyInstanceAttribute", "StartInstances"] {
        assert_eq!(
            e.proxy.count(action),
            2,
            "{action}: refused once, then sent again"
        );
    }
    let listed = p.machines(&e.pool).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].machine_type, "t3.small");
}

/// RunInstances answers a subnet or security group of the settings that does not exist with
/// `InvalidSubnetID.NotFound` or `InvalidGroup.NotFound`: the setting that names it is wrong, and the
/// error says which, as a missing key's does (nothing is made).
#[tokio::test]
async fn a_subnet_or_security_group_ec2_does_not_know_is_the_setting_named() {
    let Some(e) = env("a_subnet_or_security_group_ec2_does_not_know_is_the_setting_named").await
    else {
        return;
    };
    let p = e.provider("owner-1").await;
    for (code, key) in [
        ("InvalidSubnetID.NotFound", "ORCA_EC2_SUBNETS"),
        ("InvalidGroup.NotFound", "ORCA_EC2_SECURITY_GROUP"),
    ] {
        e.proxy
            .inject(rule("RunInstances", ec2_error(400, code), 1));
        match p.create(&e.spec("set-1")).await.unwrap_err() {
            Error::InvalidSettings { keys, message } => {
                assert_eq!(keys, [key], "{message}");
                assert!(message.contains(code), "{message}");
            }
            other => panic!("{code}: a settings error naming {key} expected, got {other:?}"),
        }
    }
    assert!(p.machines(&e.pool).await.unwrap().is_empty());
}

/// A create tells the instance it made from an earlier create's by EC2's launch time against when
/// it first sent its token. EC2 writes that time by its own clock, and this machine's may be seconds
/// off (AWS signatures allow minutes): read against the local clock alone, a clock 3 s ahead took
/// every new machine for an earlier create's (`Adopted`). The driver reads EC2's clock from its
/// answers' `Date`; a clock behind EC2's is no trouble either, and an earlier create's machine is
/// still adopted either way.
#[tokio::test]
async fn a_clock_off_from_ec2s_still_tells_a_new_machine_from_an_adopted_one() {
    let Some(e) = env("a_clock_off_from_ec2s_still_tells_a_new_machine_from_an_adopted_one").await
    else {
        return;
    };
    for (offset, name) in [(-3, "ahead-1"), (3, "behind-1")] {
        e.proxy.set_clock_offset(offset);
        let p = e.provider("owner-1").await;
        match p.create(&e.spec(name)).await.unwrap() {
            Created::Machine(m) => assert_eq!(m.name, name),
            other => panic!("EC2's clock {offset} s from this one's: {other:?}"),
        }
        // Another process's create of the same name: the machine is the first one's.
        let again = e.provider("owner-1").await;
        match again.create(&e.spec(name)).await.unwrap() {
            Created::Adopted(m) => assert_eq!(m.name, name),
            other => panic!("EC2's clock {offset} s from this one's, again: {other:?}"),
        }
    }
    assert_eq!(e.proxy.count("RunInstances"), 4);
}

#[tokio::test]
async fn a_resize_to_a_type_out_of_stock_goes_back_and_runs_again() {
    let Some(e) = env("a_resize_to_a_type_out_of_stock_goes_back_and_runs_again").await else {
        return;
    };
    let p = e.provider("owner-1").await;
    let m = made(p.create(&e.spec("rs-1")).await.unwrap());
    // EC2 changes the type of a stopped machine, then has no capacity to start it on that type.
    e.proxy.inject(rule(
        "StartInstances",
        ec2_error(500, "InsufficientInstanceCapacity"),
        1,
    ));
    let err = p.resize(&m.id, "t3.small").await.unwrap_err();
    let Error::NoStock {
        machine_type,
        location,
        ..
    } = &err
    else {
        panic!("{err:?}")
    };
    assert_eq!(
        (machine_type.as_str(), location.as_str()),
        ("t3.small", ZONE)
    );
    let listed = p.machines(&e.pool).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(
        listed[0].machine_type, "t3.micro",
        "back to the type it had"
    );
    assert!(
        matches!(listed[0].status, Status::Starting | Status::Running),
        "running again, not left stopped: {:?}",
        listed[0].status
    );
    // A start without stock is no stock of that type in that zone too.
    p.stop(&m.id).await.unwrap();
    e.proxy.inject(rule(
        "StartInstances",
        ec2_error(500, "InsufficientInstanceCapacity"),
        1,
    ));
    let err = p.start(&m.id).await.unwrap_err();
    let Error::NoStock {
        machine_type,
        location,
        ..
    } = &err
    else {
        panic!("{err:?}")
    };
    assert_eq!(
        (machine_type.as_str(), location.as_str()),
        ("t3.micro", ZONE)
    );
    assert!(p.delete(&m.id).await.unwrap());
}

#[tokio::test]
async fn a_machines_own_disk_size_and_image_reach_ec2() {
    let Some(e) = env("a_machines_own_disk_size_and_image_reach_ec2").await else {
        return;
    };
    let p = e.provider("owner-1").await;
    // An older Canonical build than the one the driver picks by itself (scripts/moto/amis.json).
    let ami = "ami-0b1e2a3d4c5f60a01";
    let spec = e.spec("own-1").with_disk_gb(24).with_image(ami);
    let m = made(p.create(&spec).await.unwrap());
    let runs = e.proxy.of("RunInstances");
    assert_eq!(runs.len(), 1);
    let q = &runs[0].params;
    assert_eq!(q["ImageId"], ami);
    assert_eq!(q["BlockDeviceMapping.1.Ebs.VolumeSize"], "24");

    // What EC2 (moto) made of it: the instance runs that image on a root volume of that size.
    let ec2 = common::sdk(&e.seed.moto).await;
    let inst = ec2
        .describe_instances()
        .instance_ids(&m.id)
        .send()
        .await
        .unwrap()
        .reservations()[0]
        .instances()[0]
        .clone();
    assert_eq!(inst.image_id(), Some(ami));
    let volume = inst
        .block_device_mappings()
        .iter()
        .find(|b| b.device_name() == inst.root_device_name())
        .and_then(|b| b.ebs())
        .and_then(|b| b.volume_id())
        .expect("a root volume")
        .to_string();
    let vols = ec2
        .describe_volumes()
        .volume_ids(&volume)
        .send()
        .await
        .unwrap();
    assert_eq!(vols.volumes()[0].size(), Some(24), "root volume {volume}");

    // Without them, the driver's own choice: the newest Canonical image, and no size of its own.
    let plain = made(p.create(&e.spec("own-2")).await.unwrap());
    let q = &e.proxy.of("RunInstances")[1].params;
    assert_eq!(q["ImageId"], "ami-0b1e2a3d4c5f60a02");
    assert_ne!(
        q.get("BlockDeviceMapping.1.Ebs.VolumeSize")
            .map(String::as_str),
        Some("24")
    );
    for id in [m.id, plain.id] {
        assert!(p.delete(&id).await.unwrap());
    }
}

#[tokio::test]
async fn a_create_waits_while_ec2_does_not_know_a_new_instance_profile() {
    let Some(e) = env("a_create_waits_while_ec2_does_not_know_a_new_instance_profile").await else {
        return;
    };
    // IAM made the profile a moment ago: EC2 refuses it as unknown for a while (from the first
    // RunInstances on, however late the create's lookups let it come).
    e.proxy.refuse_new_profile(Duration::from_millis(800));
    let p = e.provider("owner-1").await;
    let m = made(p.create(&e.spec("profile-1")).await.unwrap());
    let runs = e.proxy.of("RunInstances");
    let refused = runs
        .iter()
        .filter(|s| s.code.as_deref() == Some("InvalidParameterValue"))
        .count();
    assert!(refused >= 1, "EC2 never refused the profile: {runs:?}");
    assert_eq!(runs.len(), refused + 1, "one RunInstances made the machine");
    assert_eq!(runs.last().unwrap().status, 200);
    let tokens: BTreeSet<&str> = runs
        .iter()
        .map(|s| s.params["ClientToken"].as_str())
        .collect();
    assert_eq!(tokens.len(), 1, "every attempt with the same ClientToken");
    assert_eq!(p.machines(&e.pool).await.unwrap().len(), 1);
    assert!(p.delete(&m.id).await.unwrap());
}

#[tokio::test]
async fn other_invalid_parameters_are_refused_at_once_and_the_profile_wait_ends() {
    let Some(e) =
        env("other_invalid_parameters_are_refused_at_once_and_the_profile_wait_ends").await
    else {
        return;
    };
    let p = common::provider(
        e.builder().new_profile_wait(Duration::from_millis(500)),
        "owner-1",
    )
    .await
    .unwrap();
    // Another parameter EC2 refuses: no waiting.
    e.proxy.inject(rule(
        "RunInstances",
        xml_answer(
            400,
            ec2_error_body(
                "InvalidParameterValue",
                "Value (x) for parameter userData is invalid. Invalid BASE64 encoding of user data.",
            ),
        ),
        1,
    ));
    let err = p.create(&e.spec("other-1")).await.unwrap_err();
    assert_eq!(err.code(), Some("InvalidParameterValue"), "{err}");
    assert_eq!(e.proxy.count("RunInstances"), 1, "refused at once");
    // A profile EC2 goes on refusing: sent again until the wait ends, then refused naming it.
    e.proxy.refuse_new_profile(Duration::from_secs(600));
    let err = p.create(&e.spec("never-1")).await.unwrap_err();
    assert_eq!(err.code(), Some("InvalidParameterValue"), "{err}");
    assert!(err.to_string().contains(&e.seed.instance_profile), "{err}");
    assert!(
        e.proxy.count("RunInstances") >= 3,
        "the profile's refusal was sent again"
    );
    assert!(p.machines(&e.pool).await.unwrap().is_empty());
}

/// EC2 ends an instance at launch for a reason it names in the state reason: no capacity for the
/// type in the zone is no stock there (an autoscaler moves on to another offering), a volume limit is
/// a quota, and EC2's own internal error is worth another try (the retry makes a new instance under
/// the next ClientToken).
#[tokio::test]
async fn a_launch_ended_for_capacity_quota_or_internal_error_says_which() {
    let Some(e) = env("a_launch_ended_for_capacity_quota_or_internal_error_says_which").await
    else {
        return;
    };
    let p = e.provider("owner-1").await;
    e.proxy.fail_launches_for(
        1,
        "Server.InsufficientInstanceCapacity",
        "Insufficient capacity.",
    );
    match p.create(&e.spec("cap-1")).await.unwrap() {
        Created::NoStock {
            machine_type,
            location,
            message,
            left,
        } => {
            assert_eq!(
                (machine_type.as_str(), location.as_str()),
                ("t3.micro", ZONE)
            );
            assert!(message.contains("Insufficient capacity"), "{message}");
            assert!(left.is_empty(), "{left:?}");
        }
        other => panic!("no stock expected, got {other:?}"),
    }

    e.proxy
        .fail_launches_for(1, "Client.VolumeLimitExceeded", "Volume limit exceeded.");
    let err = p.create(&e.spec("vol-1")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Quota, "{err:?}");
    assert!(err.to_string().contains("Volume limit exceeded"), "{err}");

    e.proxy
        .fail_launches_for(1, "Server.InternalError", "Internal error on launch");
    let err = p.create(&e.spec("int-1")).await.unwrap_err();
    assert!(err.is_retryable(), "{err:?}");
    assert!(err.may_have_acted(), "{err:?}");
    let m = made(p.create(&e.spec("int-1")).await.unwrap());
    assert_eq!(m.status, Status::Running, "{m:?}");
    let live: Vec<_> = p
        .machines(&e.pool)
        .await
        .unwrap()
        .into_iter()
        .filter(|m| m.status != Status::Deleting)
        .map(|m| m.name)
        .collect();
    assert_eq!(live, ["int-1"]);
}

#[tokio::test]
async fn a_govcloud_region_boots_canonicals_govcloud_image() {
    let Some(moto) = common::moto("a_govcloud_region_boots_canonicals_govcloud_image") else {
        return;
    };
    // Each partition has its own accounts: Canonical publishes GovCloud's images from another one
    // (moto holds every image of scripts/moto/amis.json in every region).
    const GOV_REGION: &str = "us-gov-west-1";
    const GOV_IMAGE: &str = "ami-0b1e2a3d4c5f60c02";
    let seed = common::seed_in(&moto, GOV_REGION).await;
    let proxy = Proxy::start(&moto).await;
    let p = common::provider(
        common::builder(&seed, &proxy.url).region(GOV_REGION),
        "owner-1",
    )
    .await
    .unwrap();
    let zone = seed.subnets.keys().next().unwrap();
    let pool = format!("g{:06x}", fastrand::u32(..0xff_ffff));
    let spec = MachineSpec::new("gov-1", "t3.micro", zone, &pool);
    let m = made(p.create(&spec).await.unwrap());
    let asked = proxy.of("DescribeImages");
    assert_eq!(asked[0].params["Owner.1"], "513442679011", "{asked:?}");
    let runs = proxy.of("RunInstances");
    assert_eq!(runs.last().unwrap().params["ImageId"], GOV_IMAGE);
    assert!(p.delete(&m.id).await.unwrap());
}

#[tokio::test]
async fn machine_named_is_one_filtered_listing() {
    let Some(e) = env("machine_named_is_one_filtered_listing").await else {
        return;
    };
    let p = e.provider("owner-1").await;
    let m = made(p.create(&e.spec("named-1")).await.unwrap());
    made(p.create(&e.spec("named-2")).await.unwrap());
    let other = e.provider("owner-2").await;
    let before = e.proxy.count("DescribeInstances");
    let found = p.machine_named(&e.pool, "named-1").await.unwrap();
    assert_eq!(found.map(|f| f.id), Some(m.id.clone()));
    let reads = &e.proxy.of("DescribeInstances")[before..];
    assert_eq!(reads.len(), 1, "one request: {reads:?}");
    assert!(
        reads[0].params.values().any(|v| v == "tag:Name"),
        "filtered by name: {:?}",
        reads[0].params
    );
    assert!(
        other
            .machine_named(&e.pool, "named-1")
            .await
            .unwrap()
            .is_none()
    );
    assert!(p.machine_named(&e.pool, "absent").await.unwrap().is_none());
    let err = p.machine_named(&e.pool, "Not A Name").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidSpec, "{err}");
    for m in p.machines(&e.pool).await.unwrap() {
        p.delete(&m.id).await.unwrap();
    }
}

/// A create whose RunInstances made the instance and whose read of it is then throttled past the
/// retry policy fails as throttled, but never as "made nothing": the name has a machine, and a
/// caller that gave the name up would leave that machine unknown (or make the name twice).
#[tokio::test]
async fn a_create_throttled_after_ec2_made_its_instance_did_not_make_nothing() {
    let Some(e) = env("a_create_throttled_after_ec2_made_its_instance_did_not_make_nothing").await
    else {
        return;
    };
    let p = e.provider("owner-1").await;
    e.proxy.inject(rule(
        "DescribeInstances",
        ec2_error(503, "RequestLimitExceeded"),
        1_000,
    ));
    let err = p.create(&e.spec("thr-1")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Throttled, "{err}");
    assert!(
        !err.made_nothing(),
        "the instance was made before the throttled read: {err}"
    );
    e.proxy.clear("DescribeInstances");
    let m = p.machine_named(&e.pool, "thr-1").await.unwrap();
    assert!(m.is_some(), "the instance stands under its name");
}

/// EC2 terminates an instance that fails at launch (a volume it cannot make, a KMS key it may not
/// use) within seconds of RunInstances, with a state reason. A create whose own instance is gone
/// that way made no machine: it fails with EC2's reason (marked as one that may have acted), and a
/// retry after a lost answer, which meets its own instance terminated, launches no other one under
/// the next ClientToken.
#[tokio::test]
async fn a_launch_that_fails_is_an_error_with_its_reason() {
    let Some(e) = env("a_launch_that_fails_is_an_error_with_its_reason").await else {
        return;
    };
    let p = e.provider("owner-1").await;
    let live_named = |name: &'static str| {
        let p = &p;
        let pool = e.pool.clone();
        async move {
            p.machines(&pool)
                .await
                .unwrap()
                .into_iter()
                .filter(|m| m.name == name && m.status != Status::Deleting)
                .count()
        }
    };
    e.proxy.fail_launches(1);
    let err = p.create(&e.spec("dies-1")).await.unwrap_err();
    assert!(err.may_have_acted(), "{err:?}");
    assert!(err.to_string().contains("User initiated shutdown"), "{err}");
    assert_eq!(e.proxy.count("RunInstances"), 1);
    assert_eq!(live_named("dies-1").await, 0);

    // The answer lost: the retry of the same token meets this call's instance terminated.
    e.proxy.fail_launches(1);
    e.proxy.inject(rule("RunInstances", Fault::DropAnswer, 1));
    let before = e.proxy.count("RunInstances");
    let err = p.create(&e.spec("dies-2")).await.unwrap_err();
    assert!(err.may_have_acted(), "{err:?}");
    assert!(err.to_string().contains("User initiated shutdown"), "{err}");
    let first = client_token("owner-1", &e.pool, "dies-2", None);
    let sent: Vec<String> = e.proxy.of("RunInstances")[before..]
        .iter()
        .map(|r| r.params["ClientToken"].clone())
        .collect();
    assert_eq!(sent, [first.clone(), first], "no next generation");
    assert_eq!(live_named("dies-2").await, 0);
}
