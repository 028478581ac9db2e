//! Error codes, unsupported features, sizes, server information and what a service client is told (the
//! README's "Error codes", "Sizes" and "Server information", and what shed leaves out).

use orca::memory::{FaultKind, Operation};
use orca::ErrorKind;
use shed::backend::CreateRequest;
use shed::probe::ProbeOutcome;
use shed::Status;

use crate::support::{Env, RULE, SOURCE};

#[tokio::test]
async fn server_limits_are_503_server_limit_reached_never_409() {
    let env = Env::build(|c| {
        c.limits.max_running = 2;
        c.limits.max_sheds = 3;
    })
    .await;
    env.running("a").await;
    env.running("b").await;
    let e = env.create("c").await.unwrap_err();
    assert_eq!((e.status, e.code.as_str()), (503, "SERVER_LIMIT_REACHED"));
    assert!(
        e.message.contains("max_running") && e.message.contains("2 are running"),
        "{}",
        e.message
    );
    env.backend.stop_shed(&env.admin(), "b").await.unwrap();
    env.until_status("b", Status::Stopped).await;
    env.running("c").await;
    env.backend.stop_shed(&env.admin(), "c").await.unwrap();
    env.until_status("c", Status::Stopped).await;
    let e = env.create("d").await.unwrap_err();
    assert_eq!((e.status, e.code.as_str()), (503, "SERVER_LIMIT_REACHED"));
    assert!(e.message.contains("max_sheds"), "{}", e.message);
    // A start at max_running is refused the same way.
    env.running_again_ok("b").await;
    let e = env.backend.start_shed(&env.admin(), "c").await.unwrap_err();
    assert_eq!((e.status, e.code.as_str()), (503, "SERVER_LIMIT_REACHED"));
    // The one 409 of a create: the name is taken.
    let e = env.create("a").await.unwrap_err();
    assert_eq!((e.status, e.code.as_str()), (409, "SHED_EXISTS"));
}

impl Env {
    async fn running_again_ok(&self, name: &str) {
        self.backend.start_shed(&self.admin(), name).await.unwrap();
        self.until_status(name, Status::Running).await;
    }
}

#[tokio::test]
async fn a_vm_whose_delete_is_older_than_two_minutes_counts_against_max_running_and_the_message_says_how_many(
) {
    let env = Env::build(|c| c.limits.max_running = 2).await;
    env.running("a").await;
    env.running("b").await;
    env.cloud.inject(
        Operation::Delete,
        FaultKind::Error(ErrorKind::PermissionDenied),
        1_000,
    );
    env.backend.delete_shed(&env.admin(), "a").await.unwrap();
    env.idle().await;
    // Within two minutes the deleted shed's VM does not count.
    env.running("c").await;
    env.backend.delete_shed(&env.admin(), "c").await.unwrap();
    env.idle().await;
    env.advance(125).await;
    let e = env.create("d").await.unwrap_err();
    assert_eq!(e.code, "SERVER_LIMIT_REACHED");
    assert!(
        e.message
            .contains("3 are running, 2 of them the VM of a deleted shed"),
        "{}",
        e.message
    );
    assert_eq!(env.vms().len(), 3, "the VMs still run");
    env.cloud.clear_faults();
    env.pass().await;
    env.until("the destroys are retried", |e| e.vms().len() == 1)
        .await;
    env.until("the markers are gone", |e| e.backend.markers().is_empty())
        .await;
    env.running("d").await;
}

#[tokio::test]
async fn unsupported_create_fields_are_422_before_anything_is_created() {
    let env = Env::new().await;
    let cases: Vec<(&str, CreateRequest)> = vec![
        (
            "local_dir",
            CreateRequest {
                local_dir: Some("/src".into()),
                ..Env::req("a")
            },
        ),
        (
            "add_dirs",
            CreateRequest {
                add_dirs: Some(vec!["/x".into()]),
                ..Env::req("a")
            },
        ),
        (
            "mounts",
            CreateRequest {
                mounts: Some(vec!["cache".into()]),
                ..Env::req("a")
            },
        ),
        (
            "from_snapshot",
            CreateRequest {
                from_snapshot: Some("s1".into()),
                ..Env::req("a")
            },
        ),
        (
            "egress",
            CreateRequest {
                egress: Some(vec!["github".into()]),
                ..Env::req("a")
            },
        ),
        // Anything but exactly ["off"]: an empty list, "off" twice, "off" beside a profile.
        (
            "egress",
            CreateRequest {
                egress: Some(vec![]),
                ..Env::req("a")
            },
        ),
        (
            "egress",
            CreateRequest {
                egress: Some(vec!["off".into(), "off".into()]),
                ..Env::req("a")
            },
        ),
        (
            "egress",
            CreateRequest {
                egress: Some(vec!["off".into(), "github".into()]),
                ..Env::req("a")
            },
        ),
    ];
    for (field, req) in cases {
        let e = env.create_as(&env.admin(), req).await.unwrap_err();
        assert_eq!(
            (e.status, e.code.as_str()),
            (422, "FEATURE_UNSUPPORTED"),
            "{field}"
        );
        assert!(e.message.starts_with(field), "{field}: {}", e.message);
        assert!(env.backend.records().is_empty(), "{field}: nothing is made");
    }
    assert!(env.vms().is_empty() && env.backend.records().is_empty());
    // An omitted or empty mounts stores none; egress ["off"] is what a remote shed has.
    let ok = CreateRequest {
        mounts: Some(vec![]),
        egress: Some(vec!["off".into()]),
        ..Env::req("ok")
    };
    env.create_as(&env.admin(), ok).await.unwrap();
    let repo = CreateRequest {
        repo: Some("https://example.invalid/r.git".into()),
        ..Env::req("r")
    };
    let e = env.create_as(&env.admin(), repo).await.unwrap_err();
    assert_eq!((e.status, e.code.as_str()), (501, "FEATURE_UNSUPPORTED"));
}

#[tokio::test]
async fn sizes_default_smallest_fit_or_400_and_disk_rounding_and_bounds() {
    let env = Env::build(|c| {
        c.limits.max_running = 8;
        c.sizes.insert(
            "mid".into(),
            shed::config::Size {
                name: "mid".into(),
                machine_type: "amd64-large".into(),
                cpus: 4,
                memory_mb: 16384,
            },
        );
    })
    .await;
    let v = env.create("d").await.unwrap();
    assert_eq!(
        (v.size.as_str(), v.cpus, v.memory_mb),
        ("standard", 2, 8192)
    );
    let v = env
        .create_as(
            &env.admin(),
            CreateRequest {
                cpus: Some(3),
                ..Env::req("c3")
            },
        )
        .await
        .unwrap();
    assert_eq!((v.size.as_str(), v.cpus, v.memory_mb), ("mid", 4, 16384));
    let v = env
        .create_as(
            &env.admin(),
            CreateRequest {
                cpus: Some(2),
                memory_mb: Some(20000),
                ..Env::req("m")
            },
        )
        .await
        .unwrap();
    assert_eq!(v.size, "large", "the smallest size with both");
    assert_eq!(env.vm("m").unwrap().machine_type, "amd64-large");
    let e = env
        .create_as(
            &env.admin(),
            CreateRequest {
                cpus: Some(64),
                ..Env::req("big")
            },
        )
        .await
        .unwrap_err();
    assert_eq!((e.status, e.code.as_str()), (400, "INVALID_REQUEST"));
    assert!(e.message.contains("no configured size"), "{}", e.message);

    const GB: u64 = 1 << 30;
    let v = env
        .create_as(
            &env.admin(),
            CreateRequest {
                upper_size_bytes: Some(20 * GB + 1),
                ..Env::req("disk")
            },
        )
        .await
        .unwrap();
    assert_eq!(v.disk_gb, 21, "rounded up to whole GB");
    assert_eq!(
        env.cloud
            .extras(&env.vm("disk").unwrap().id)
            .unwrap()
            .disk_gb,
        Some(21)
    );
    for bytes in [9 * GB, 501 * GB] {
        let e = env
            .create_as(
                &env.admin(),
                CreateRequest {
                    upper_size_bytes: Some(bytes),
                    ..Env::req("bad")
                },
            )
            .await
            .unwrap_err();
        assert_eq!(e.status, 400, "{bytes}");
    }
    let v = env
        .create_as(
            &env.admin(),
            CreateRequest {
                upper_size_bytes: Some(10 * GB),
                ..Env::req("ten")
            },
        )
        .await
        .unwrap();
    assert_eq!(v.disk_gb, 10);
}

#[tokio::test]
async fn a_service_clients_caps_are_checked_against_the_size() {
    let env = Env::new().await;
    let mut c = env.service("ci");
    c.max_cpus = Some(2);
    let e = env
        .create_as(
            &c,
            CreateRequest {
                memory_mb: Some(10000),
                ..Env::req("x")
            },
        )
        .await
        .unwrap_err();
    assert_eq!((e.status, e.code.as_str()), (403, "FORBIDDEN"));
    env.create_as(&c, Env::req("y")).await.unwrap();
    c.images = vec!["cloud".into()];
    let e = env.create_as(&c, Env::req("z")).await.unwrap_err();
    assert_eq!(
        e.status, 403,
        "the default image is not in the client's list"
    );
    let v = env
        .create_as(
            &c,
            CreateRequest {
                image: Some("cloud".into()),
                ..Env::req("z")
            },
        )
        .await
        .unwrap();
    assert_eq!(v.image, "cloud");
    assert_eq!(
        env.cloud
            .extras(&env.vm("z").unwrap().id)
            .unwrap()
            .image
            .as_deref(),
        Some("img-cloud")
    );
}

#[tokio::test]
async fn a_create_without_an_image_is_checked_against_the_policy_as_the_default_image() {
    // The default image is the image of the alias `cloud`: a client limited to `cloud` may omit it.
    let env = Env::build(|c| {
        c.image_aliases
            .insert("cloud".into(), c.default_image.clone());
    })
    .await;
    let mut c = env.service("ci");
    c.images = vec!["cloud".into()];
    let v = env.create_as(&c, Env::req("a")).await.unwrap();
    assert_eq!(v.image, "default");
    assert_eq!(
        env.cloud.extras(&env.vm("a").unwrap().id).unwrap().image,
        Some(env.cfg.default_image.clone())
    );
    let v = env
        .create_as(
            &c,
            CreateRequest {
                image: Some("default".into()),
                ..Env::req("b")
            },
        )
        .await
        .unwrap();
    assert_eq!(v.image, "default");
    // A client limited to another alias still may not use the default image.
    let mut other = env.service("other");
    other.images = vec!["other".into()];
    let e = env.create_as(&other, Env::req("c")).await.unwrap_err();
    assert_eq!((e.status, e.code.as_str()), (403, "FORBIDDEN"));
}

#[tokio::test]
async fn info_reports_remote_its_features_and_topology_isolation() {
    let env =
        Env::build(|c| c.default_image = "projects/secret-proj/global/images/shed-7".into()).await;
    let i = env.backend.info(&env.admin());
    assert_eq!(i.backend, "remote");
    assert_eq!(i.isolation, "topology");
    // async_lifecycle and network_profiles, with service_clients and http_exec as on any server.
    for f in [
        "async_lifecycle",
        "network_profiles",
        "service_clients",
        "http_exec",
    ] {
        assert!(i.features.contains(&f.to_string()), "{f}");
    }
    assert_eq!(i.default_image, "projects/secret-proj/global/images/shed-7");
    assert_eq!(i.network_profiles, vec!["default", "isolated"]);
    let json = serde_json::to_string(&i).unwrap();
    assert!(!json.contains("machine_type"), "{json}");
    for size in env.backend.config().sizes.values() {
        assert!(!json.contains(&size.machine_type), "{json}");
    }
    let s = env.backend.info(&env.service("ci"));
    assert_eq!(
        s.default_image, "shed-7",
        "a service client is not told the project"
    );
}

#[tokio::test]
async fn no_answer_to_a_service_client_names_the_project_zone_or_an_address() {
    let env = Env::new().await;
    let c = env.service("ci");
    let v = env.create_as(&c, Env::req("s")).await.unwrap();
    env.until_status("s", Status::Running).await;
    let vm = env.vm("s").unwrap();
    let all = serde_json::to_string(&(
        v,
        env.backend.list(&c),
        env.backend.get(&c, "s").unwrap(),
        env.backend.info(&c),
    ))
    .unwrap();
    for secret in [
        vm.address.as_str(),
        vm.private_address.as_str(),
        "zone-a",
        vm.id.as_str(),
    ] {
        assert!(!all.contains(secret), "{secret} in {all}");
    }
    // The firewall refusal: an admin is told the rule, sources and expectation; a service client none.
    let mut rule = crate::support::good_rule();
    rule.source_ranges = vec!["198.51.100.9/32".into()];
    env.cloud.put_firewall_rule(rule);
    env.advance(61).await;
    let e = env.create_as(&c, Env::req("t")).await.unwrap_err();
    assert_eq!((e.status, e.code.as_str()), (503, "FIREWALL_CHECK_FAILED"));
    for secret in [RULE, SOURCE, "198.51.100.9", "dev"] {
        assert!(!e.message.contains(secret), "{secret} in {}", e.message);
    }
    let e = env.create("t").await.unwrap_err();
    assert_eq!(e.code, "FIREWALL_CHECK_FAILED");
    for named in [RULE, SOURCE, "198.51.100.9/32"] {
        assert!(e.message.contains(named), "{named} not in {}", e.message);
    }
}

#[tokio::test]
async fn a_service_client_sees_and_acts_on_its_own_sheds_only() {
    let env = Env::new().await;
    env.create_as(&env.service("a"), Env::req("mine"))
        .await
        .unwrap();
    env.create_as(&env.service("b"), Env::req("theirs"))
        .await
        .unwrap();
    let names: Vec<String> = env
        .backend
        .list(&env.service("a"))
        .into_iter()
        .map(|v| v.name)
        .collect();
    assert_eq!(names, vec!["mine"]);
    let e = env
        .backend
        .delete_shed(&env.service("a"), "theirs")
        .await
        .unwrap_err();
    assert_eq!(e.status, 404);
    assert_eq!(env.backend.list(&env.admin()).len(), 2);
}

#[tokio::test]
async fn the_isolated_profile_is_refused_where_the_firewall_admits_any_address() {
    let env = Env::build(|c| {
        c.firewall.mode = shed::config::FirewallMode::Any;
        c.firewall.acknowledge_any = true;
    })
    .await;
    let e = env
        .create_as(
            &env.admin(),
            CreateRequest {
                network_profile: Some("isolated".into()),
                ..Env::req("i")
            },
        )
        .await
        .unwrap_err();
    assert_eq!((e.status, e.code.as_str()), (422, "FEATURE_UNSUPPORTED"));
    assert_eq!(
        env.backend.info(&env.admin()).network_profiles,
        vec!["default"]
    );
    let v = env.create("d").await.unwrap();
    assert_eq!(v.network_profile, "default");
}

#[tokio::test]
async fn bad_names_and_images_are_400() {
    let env = Env::new().await;
    for bad in ["", "Dev", "1x", "a_b", "x-"] {
        let e = env.create(bad).await.unwrap_err();
        assert_eq!(
            (e.status, e.code.as_str()),
            (400, "INVALID_REQUEST"),
            "{bad:?}"
        );
    }
    let e = env
        .create_as(
            &env.admin(),
            CreateRequest {
                image: Some("nope".into()),
                ..Env::req("a")
            },
        )
        .await
        .unwrap_err();
    assert_eq!(e.status, 400);
    assert!(env.vms().is_empty());
    env.probe.set_default(ProbeOutcome::Answered);
}
