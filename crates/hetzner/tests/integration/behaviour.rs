//! The Hetzner driver's own behaviour against the fake Hetzner API: one create call with everything in
//! it, the image of the type's architecture, no stock, failed create actions, adoption, rate-limit pacing and 429 storms, selectors that cannot widen, stop's bounded wait.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use axum::http::Method;
use orca_fakes::hetzner::{FakeHetzner, Options};
use orca_fakes::{Fault, Rule};
use orca_hetzner::HetznerProvider;
use orca_machines::{Created, Error, MachineSpec, Provider, RetryPolicy, Status};

/// The label a create writes its token in (the driver's `CREATE_LABEL`).
const CREATE_LABEL: &str = "orca.create";

fn spec(name: &str, t: &str, loc: &str, pool: &str) -> MachineSpec {
    MachineSpec::new(name, t, loc, pool).with_user_data("#cloud-config\nruncmd: [echo hi]\n")
}

#[tokio::test]
async fn create_is_one_call_with_everything_in_it() {
    let fake = FakeHetzner::start().await.unwrap();
    let p = common::provider(&fake, "stack-1").await;
    let before = fake.control().count(&Method::POST, "/v1/servers");
    let m = p
        .create(&spec("arm-1", "cax11", "fsn1", "lab"))
        .await
        .unwrap()
        .machine()
        .expect("stock");
    assert_eq!(
        fake.control().count(&Method::POST, "/v1/servers") - before,
        1,
        "one create call"
    );
    let servers = fake.servers();
    assert_eq!(servers.len(), 1);
    let s = &servers[0];
    assert_eq!(
        s["image"]["architecture"], "arm",
        "an arm type gets the arm image"
    );
    assert_eq!(s["image"]["name"], "ubuntu-24.04");
    assert_eq!(s["labels"]["orca"], "pool");
    assert_eq!(s["labels"]["orca-pool"], "lab");
    assert_eq!(s["labels"]["orca-owner"], "stack-1");
    assert_eq!(
        s["public_net"]["firewalls"][0]["id"], 38,
        "the firewall is applied"
    );
    let id: i64 = m.id.parse().unwrap();
    assert_eq!(fake.ssh_keys_of(id), vec!["orca-test"]);
    assert_eq!(
        fake.user_data(id).as_deref(),
        Some("#cloud-config\nruncmd: [echo hi]\n")
    );
    assert_eq!(m.status, Status::Running, "the create action has finished");
    assert_eq!(m.address, s["public_net"]["ipv4"]["ip"].as_str().unwrap());
    assert!(!m.address.is_empty());
    assert_eq!(m.machine_type, "cax11");
    // An x86 type gets the x86 image; the image lookups are cached per architecture.
    let images_before = fake.control().count(&Method::GET, "/v1/images");
    p.create(&spec("x86-1", "cx23", "fsn1", "lab"))
        .await
        .unwrap();
    p.create(&spec("x86-2", "cx23", "fsn1", "lab"))
        .await
        .unwrap();
    assert_eq!(fake.servers()[1]["image"]["architecture"], "x86");
    assert_eq!(
        fake.control().count(&Method::GET, "/v1/images") - images_before,
        1
    );
    assert_eq!(p.machines("lab").await.unwrap().len(), 3);
}

#[tokio::test]
async fn no_stock_and_not_offered_in_this_location() {
    let fake = FakeHetzner::start().await.unwrap();
    let p = common::provider(&fake, "s").await;
    fake.set_no_stock("cx23", "nbg1", true);
    match p.create(&spec("n1", "cx23", "nbg1", "lab")).await.unwrap() {
        Created::NoStock {
            machine_type,
            location,
            message,
            ..
        } => {
            assert_eq!((machine_type.as_str(), location.as_str()), ("cx23", "nbg1"));
            assert!(message.contains("error during placement"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    // Scoped to type and location: another location has stock.
    assert!(matches!(
        p.create(&spec("n1", "cx23", "fsn1", "lab")).await.unwrap(),
        Created::Machine(_)
    ));
    assert_eq!(fake.servers().len(), 1);
    // A type that is never offered in a location is no stock there, for good, before any create
    // call, so that a caller moves on to another offering as the other drivers' callers do.
    let posts = fake.control().count(&Method::POST, "/v1/servers");
    match p.create(&spec("n2", "cax11", "ash", "lab")).await.unwrap() {
        Created::NoStock {
            machine_type,
            location,
            message,
            left,
        } => {
            assert_eq!((machine_type.as_str(), location.as_str()), ("cax11", "ash"));
            assert!(message.contains("not offered in ash"), "{message}");
            assert!(left.is_empty(), "{left:?}");
        }
        other => panic!("{other:?}"),
    }
    // A location Hetzner does not know, and an unknown type, are bad input naming the field,
    // before any create call.
    let e = p
        .create(&spec("n3", "cax11", "zz9", "lab"))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, Error::InvalidSpec { field, .. } if field == "location"),
        "{e:?}"
    );
    let e = p
        .create(&spec("n3", "zz99", "fsn1", "lab"))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, Error::InvalidSpec { field, .. } if field == "machine_type"),
        "{e:?}"
    );
    assert_eq!(fake.control().count(&Method::POST, "/v1/servers"), posts);
}

#[tokio::test]
async fn a_failed_create_action_leaves_no_server() {
    let fake = FakeHetzner::start().await.unwrap();
    let p = common::provider(&fake, "s").await;
    fake.fail_next_create_action("the host failed to boot the image");
    let e = p
        .create(&spec("f1", "cx23", "fsn1", "lab"))
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains("the host failed to boot the image"),
        "{e}"
    );
    assert!(fake.servers().is_empty(), "{:?}", fake.servers());
    assert_eq!(fake.control().count(&Method::DELETE, "/v1/servers/"), 1);
    // And the name is free again.
    assert!(p
        .create(&spec("f1", "cx23", "fsn1", "lab"))
        .await
        .unwrap()
        .machine()
        .is_some());
}

#[tokio::test]
async fn a_failed_create_whose_clean_up_fails_names_the_leftover() {
    let fake = FakeHetzner::start().await.unwrap();
    let config = common::builder(&fake)
        .retry(RetryPolicy::NEVER)
        .build()
        .unwrap();
    let p = HetznerProvider::new(config, "s").await.unwrap();
    p.arch("cx23").await.unwrap();
    fake.fail_next_create_action("boom");
    fake.control().inject(Rule::new(
        Some(Method::DELETE),
        "/v1/servers/",
        Fault::Status {
            status: 503,
            body: serde_json::json!({"error": {"code": "service_error", "message": "try later"}}),
            headers: vec![],
        },
        1,
    ));
    match p.create(&spec("f2", "cx23", "fsn1", "lab")).await {
        Err(Error::Leftovers { error, left }) => {
            assert!(error.to_string().contains("boom"));
            assert_eq!(left.len(), 1);
            let id = fake.servers()[0]["id"].as_i64().unwrap();
            assert!(left[0].contains(&format!("server {id}")), "{left:?}");
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn no_stock_or_quota_whose_clean_up_fails_stays_the_outcome_naming_the_server() {
    for (code, quota) in [
        ("resource_unavailable", false),
        ("resource_limit_exceeded", true),
    ] {
        let fake = FakeHetzner::start().await.unwrap();
        let config = common::builder(&fake)
            .retry(RetryPolicy::NEVER)
            .build()
            .unwrap();
        let p = HetznerProvider::new(config, "s").await.unwrap();
        fake.fail_next_create_action_with(code, "error during placement");
        fake.control().inject(Rule::new(
            Some(Method::DELETE),
            "/v1/servers/",
            Fault::Status {
                status: 503,
                body: serde_json::json!({"error": {"code": "service_error", "message": "try later"}}),
                headers: vec![],
            },
            1,
        ));
        let got = p.create(&spec("ns-1", "cx23", "fsn1", "lab")).await;
        let id = fake.servers()[0]["id"].as_i64().unwrap();
        let server = format!("server {id}");
        match got {
            Ok(Created::NoStock {
                machine_type,
                location,
                message,
                left,
            }) if !quota => {
                assert_eq!((machine_type.as_str(), location.as_str()), ("cx23", "fsn1"));
                assert_eq!(left.len(), 1, "{message}");
                assert!(left[0].starts_with(&server), "{left:?}");
                assert!(message.contains("error during placement"), "{message}");
                assert!(message.contains(&server), "{message}");
            }
            Err(Error::Quota { message, .. }) if quota => {
                assert!(message.contains("error during placement"), "{message}");
                assert!(message.contains(&server), "{message}");
            }
            other => panic!("{code}: {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_create_action_that_ended_in_a_passing_error_frees_the_name() {
    let fake = FakeHetzner::start().await.unwrap();
    let p = common::provider(&fake, "s").await;
    fake.fail_next_create_action_with("service_error", "the host went away");
    let e = p
        .create(&spec("f1", "cx23", "fsn1", "lab"))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("the host went away"), "{e}");
    assert!(fake.servers().is_empty(), "{:?}", fake.servers());
    // The name is free again: the next create makes the machine.
    let again = p.create(&spec("f1", "cx23", "fsn1", "lab")).await.unwrap();
    assert!(matches!(again, Created::Machine(_)), "{again:?}");
    assert_eq!(fake.servers().len(), 1);
}

#[tokio::test]
async fn a_taken_name_is_adopted_only_when_it_is_ours() {
    let fake = FakeHetzner::start().await.unwrap();
    let a = common::provider(&fake, "owner-a").await;
    let b = common::provider(&fake, "owner-b").await;
    let first = a
        .create(&spec("same", "cx23", "fsn1", "lab"))
        .await
        .unwrap()
        .machine()
        .unwrap();
    // The same spec again (a retried create): the same server, adopted from the earlier call.
    let again = a
        .create(&spec("same", "cx23", "fsn1", "lab"))
        .await
        .unwrap();
    assert!(again.is_adopted(), "{again:?}");
    assert_eq!(first.id, again.machine().unwrap().id);
    // Another owner, another pool, or a server of another tool: already exists, nothing adopted.
    for (p, pool) in [(&b, "lab"), (&a, "other")] {
        let e = p
            .create(&spec("same", "cx23", "fsn1", pool))
            .await
            .unwrap_err();
        assert!(matches!(e, Error::AlreadyExists { .. }), "{e:?}");
    }
    fake.insert_server("foreign", "cx23", "fsn1", &[("team", "web")]);
    let e = a
        .create(&spec("foreign", "cx23", "fsn1", "lab"))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::AlreadyExists { .. }), "{e:?}");
    assert_eq!(fake.servers().len(), 2);
}

#[tokio::test]
async fn foreign_servers_are_neither_listed_nor_deleted_nor_changed() {
    let fake = FakeHetzner::start().await.unwrap();
    let p = common::provider(&fake, "me").await;
    let other = fake.insert_server(
        "theirs",
        "cx23",
        "fsn1",
        &[
            ("orca", "pool"),
            ("orca-pool", "lab"),
            ("orca-owner", "you"),
        ],
    );
    let plain = fake.insert_server("plain", "cx23", "fsn1", &[]);
    assert!(p.machines("lab").await.unwrap().is_empty());
    for id in [other, plain] {
        let id = id.to_string();
        assert!(matches!(p.delete(&id).await, Err(Error::NotOwned { .. })));
        assert!(matches!(p.stop(&id).await, Err(Error::NotOwned { .. })));
        assert!(matches!(p.start(&id).await, Err(Error::NotOwned { .. })));
        assert!(matches!(
            p.resize(&id, "cx33").await,
            Err(Error::NotOwned { .. })
        ));
    }
    assert_eq!(fake.control().count(&Method::DELETE, "/v1/servers"), 0);
    assert_eq!(fake.control().count(&Method::POST, "/actions/"), 0);
    assert_eq!(fake.servers().len(), 2);
}

#[tokio::test]
async fn a_selector_widening_value_is_refused_before_any_request() {
    let fake = FakeHetzner::start().await.unwrap();
    let p = common::provider(&fake, "me").await;
    for bad in [
        "lab,orca-owner!=me",
        "lab,!orca-owner",
        "x in (a,b)",
        "lab ",
        "",
        "a=b",
    ] {
        match p.machines(bad).await {
            Err(Error::InvalidSpec { field, .. }) => assert_eq!(field, "pool"),
            other => panic!("machines({bad:?}) gave {other:?}"),
        }
        match p.create(&spec("ok-name", "cx23", "fsn1", bad)).await {
            Err(Error::InvalidSpec { field, .. }) => assert_eq!(field, "pool"),
            other => panic!("create in {bad:?} gave {other:?}"),
        }
    }
    for owner in ["a,orca=pool", "!x", "x y", "Owner"] {
        let e = HetznerProvider::new(common::builder(&fake).build().unwrap(), owner)
            .await
            .unwrap_err();
        assert!(
            matches!(e, Error::InvalidSpec { ref field, .. } if field == "owner"),
            "{e:?}"
        );
    }
    for bad in ["12,13", "0", "-1", "abc", "1 2"] {
        assert!(
            matches!(p.delete(bad).await, Err(Error::InvalidSpec { .. })),
            "{bad}"
        );
    }
    for bad in ["cx23,cx33", "cx 22", ""] {
        assert!(
            matches!(p.arch(bad).await, Err(Error::InvalidSpec { .. })),
            "{bad}"
        );
    }
    assert_eq!(fake.control().requests(), 0, "{:?}", fake.control().log());
}

/// 429s injected in front of the fake (with Retry-After and the RateLimit headers).
fn throttle(fake: &FakeHetzner, times: u32) {
    let reset = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 1;
    fake.control().inject(Rule::new(
        None,
        "/v1/",
        Fault::Status {
            status: 429,
            body: serde_json::json!({"error": {"code": "rate_limit_exceeded", "message": "limit of requests per hour reached", "details": {}}}),
            headers: vec![
                ("Retry-After".into(), "0.02".into()),
                ("RateLimit-Limit".into(), "3600".into()),
                ("RateLimit-Remaining".into(), "0".into()),
                ("RateLimit-Reset".into(), reset.to_string()),
            ],
        },
        times,
    ));
}

#[tokio::test]
async fn a_429_storm_is_retried_within_bounds_not_blindly() {
    let fake = FakeHetzner::start().await.unwrap();
    let p = common::provider(&fake, "me").await;
    // A short storm: each 429 is waited out once, then the call succeeds.
    throttle(&fake, 3);
    assert!(p.machines("lab").await.unwrap().is_empty());
    assert_eq!(fake.control().requests(), 4, "three 429s and one success");
    // A long storm: the shared policy gives up after its retries, with the cloud's wait.
    fake.control().clear_log();
    throttle(&fake, 1000);
    let e = p.machines("lab").await.unwrap_err();
    assert!(matches!(e, Error::Throttled { .. }), "{e:?}");
    assert_eq!(e.retry_after(), Some(Duration::from_millis(20)));
    assert_eq!(
        fake.control().requests(),
        u64::from(RetryPolicy::fast().max_retries) + 1,
        "bounded: the first attempt and the policy's retries, no more"
    );
    fake.control().clear_faults();
}

#[tokio::test]
async fn calls_are_paced_from_the_rate_limit_headers() {
    // A small budget: 10 requests, refilled at 4 a second.
    let opts = Options {
        rate_limit: 10,
        refill_per_second: 4.0,
        ..Options::default()
    };
    let burst = 20;

    // Unpaced, a burst spends the budget and meets 429s (retried by the policy).
    let fake = FakeHetzner::start_with(opts.clone()).await.unwrap();
    let unpaced = Arc::new(
        HetznerProvider::new(common::builder(&fake).pacing(false).build().unwrap(), "me")
            .await
            .unwrap(),
    );
    unpaced.machines("lab").await.unwrap();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..burst {
        let p = unpaced.clone();
        tasks.spawn(async move { p.machines("lab").await.map(|_| ()) });
    }
    while let Some(r) = tasks.join_next().await {
        let _ = r.unwrap();
    }
    assert!(fake.rate_limited() > 0, "the unpaced burst met no 429");

    // Paced, the same burst keeps within the budget: no 429, one request a call.
    let fake = FakeHetzner::start_with(opts).await.unwrap();
    let paced = Arc::new(
        HetznerProvider::new(
            common::builder(&fake).rate_reserve(0.0).build().unwrap(),
            "me",
        )
        .await
        .unwrap(),
    );
    paced.machines("lab").await.unwrap();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..burst {
        let p = paced.clone();
        tasks.spawn(async move { p.machines("lab").await.map(|_| ()) });
    }
    while let Some(r) = tasks.join_next().await {
        r.unwrap().unwrap();
    }
    assert_eq!(fake.rate_limited(), 0, "a paced burst met 429s");
    assert_eq!(fake.control().requests(), burst as u64 + 1);
    let (waits, _) = paced.pacing_stats();
    assert!(waits >= 10, "only {waits} call(s) waited for the refill");
}

#[tokio::test]
async fn a_reserve_is_left_for_other_tools() {
    for (reserve, kept) in [(0.5, 10.0), (0.0, 0.0)] {
        let fake = FakeHetzner::start_with(Options {
            rate_limit: 20,
            refill_per_second: 10.0,
            ..Options::default()
        })
        .await
        .unwrap();
        let p = HetznerProvider::new(
            common::builder(&fake)
                .rate_reserve(reserve)
                .build()
                .unwrap(),
            "me",
        )
        .await
        .unwrap();
        for _ in 0..15 {
            p.machines("lab").await.unwrap();
        }
        let (waits, _) = p.pacing_stats();
        if kept > 0.0 {
            // Half the bucket (10) is kept for other tools: past it, calls wait for the refill.
            assert!(waits >= 1, "no call waited");
            assert!(
                fake.low_water() >= kept - 1.0,
                "the bucket fell to {}",
                fake.low_water()
            );
        } else {
            // Without a reserve, 15 calls fit in the bucket of 20: nobody waits.
            assert_eq!(waits, 0);
            assert!(fake.low_water() < 10.0);
        }
        assert_eq!(fake.rate_limited(), 0);
    }
}

#[tokio::test]
async fn stop_waits_for_shutdown_then_powers_off() {
    let fake = FakeHetzner::start().await.unwrap();
    let p = common::provider(&fake, "me").await;
    let m = p
        .create(&spec("s1", "cx23", "fsn1", "lab"))
        .await
        .unwrap()
        .machine()
        .unwrap();
    // A graceful shutdown that works: no poweroff.
    let stopped = p.stop(&m.id).await.unwrap();
    assert_eq!(
        (stopped.status, stopped.cloud_status.as_str()),
        (Status::Stopped, "off")
    );
    assert_eq!(fake.control().count(&Method::POST, "/actions/poweroff"), 0);
    let started = p.start(&m.id).await.unwrap();
    assert_eq!(started.status, Status::Running);
    // An OS that ignores ACPI: the bounded wait ends in a poweroff.
    fake.ignore_shutdown(true);
    let stopped = p.stop(&m.id).await.unwrap();
    assert_eq!(stopped.status, Status::Stopped);
    assert_eq!(fake.control().count(&Method::POST, "/actions/poweroff"), 1);
    // Resize of a stopped server: no downtime, stays stopped; of a running one: downtime.
    let r = p.resize(&m.id, "cx33").await.unwrap();
    assert!(!r.caused_downtime);
    assert_eq!(
        (r.machine.machine_type.as_str(), r.machine.status),
        ("cx33", Status::Stopped)
    );
    fake.ignore_shutdown(false);
    p.start(&m.id).await.unwrap();
    let r = p.resize(&m.id, "cx23").await.unwrap();
    assert!(r.caused_downtime);
    assert_eq!(
        (r.machine.machine_type.as_str(), r.machine.status),
        ("cx23", Status::Running)
    );
    // Across architectures: refused before any change.
    let e = p.resize(&m.id, "cax11").await.unwrap_err();
    assert!(matches!(e, Error::InvalidSpec { .. }), "{e:?}");
}

#[tokio::test]
async fn prices_arch_and_statuses() {
    let fake = FakeHetzner::start().await.unwrap();
    let p = common::provider(&fake, "me").await;
    let fsn = p.hourly_price("cx23", "fsn1").await.unwrap();
    let hel = p.hourly_price("cx23", "hel1").await.unwrap();
    assert_eq!(fsn.currency, "EUR");
    assert!((fsn.hourly - 0.006).abs() < 1e-9, "{fsn:?}");
    assert!(hel.hourly > fsn.hourly, "prices are per location");
    assert!(matches!(
        p.hourly_price("cax11", "ash").await,
        Err(Error::NotFound { .. })
    ));
    assert_eq!(p.arch("cax21").await.unwrap().as_str(), "arm64");
    assert_eq!(p.arch("ccx13").await.unwrap().as_str(), "amd64");
    for (word, status) in [
        ("initializing", Status::Starting),
        ("starting", Status::Starting),
        ("running", Status::Running),
        ("stopping", Status::Stopping),
        ("off", Status::Stopped),
        ("deleting", Status::Deleting),
        ("migrating", Status::Running),
        ("rebuilding", Status::Starting),
        ("unknown", Status::Unknown),
    ] {
        assert_eq!(orca_hetzner::status_of(word), status, "{word}");
    }
}

#[tokio::test]
async fn listing_reads_every_page_in_ceil_n_over_50_requests() {
    let fake = FakeHetzner::start().await.unwrap();
    for i in 0..120 {
        fake.insert_server(
            &format!("m{i}"),
            "cx23",
            "fsn1",
            &[("orca", "pool"), ("orca-pool", "big"), ("orca-owner", "me")],
        );
    }
    let p = common::provider(&fake, "me").await;
    let got = p.machines("big").await.unwrap();
    assert_eq!(got.len(), 120);
    assert_eq!(fake.control().requests(), 3, "ceil(120/50) pages");
    let log = fake.control().log();
    assert!(log[0].path.contains("per_page=50"), "{}", log[0].path);
    assert!(
        log[0]
            .path
            .contains("label_selector=orca%3Dpool%2Corca-pool%3Dbig%2Corca-owner%3Dme"),
        "{}",
        log[0].path
    );
}

#[tokio::test]
async fn a_lost_create_answer_is_adopted_after_its_action() {
    let fake = FakeHetzner::start_with(Options {
        action_time: Duration::from_millis(300),
        ..Options::default()
    })
    .await
    .unwrap();
    let p = common::provider(&fake, "me").await;
    fake.control().inject(Rule::new(
        Some(Method::POST),
        "/v1/servers",
        Fault::DropAnswer,
        1,
    ));
    let m = p
        .create(&spec("lost-1", "cx23", "fsn1", "lab"))
        .await
        .unwrap()
        .machine()
        .unwrap();
    assert_eq!(fake.servers().len(), 1);
    assert_eq!(
        m.status,
        Status::Running,
        "the create action was followed to its end"
    );
    assert_eq!(fake.control().count(&Method::POST, "/v1/servers"), 2);
}

/// A create whose answer was lost, and whose server's `start_server` then fails, is a failed
/// create when its retry takes the server over, as when the answer came: the server goes and the
/// error names the start's failure, whether the start is still running when the retry meets it or
/// already ended (before, the retry handed back the stopped server as made, or failed and left it).
#[tokio::test]
async fn a_takeover_of_a_server_whose_start_failed_removes_it() {
    for action_time in [Duration::from_millis(400), Duration::ZERO] {
        let fake = FakeHetzner::start_with(Options {
            action_time,
            ..Options::default()
        })
        .await
        .unwrap();
        let p = common::provider(&fake, "me").await;
        fake.fail_next_start_after_create("no host could start the server");
        fake.control().inject(Rule::new(
            Some(Method::POST),
            "/v1/servers",
            Fault::DropAnswer,
            1,
        ));
        let got = p.create(&spec("lost-s", "cx23", "fsn1", "lab")).await;
        match &got {
            Err(e) => assert!(
                e.to_string().contains("no host could start the server"),
                "{action_time:?}: {e:?}"
            ),
            Ok(other) => panic!("{action_time:?}: {other:?}"),
        }
        assert!(
            fake.servers().is_empty(),
            "{action_time:?}: {:?}",
            fake.servers()
        );
    }
}

/// A create whose first POST made the server but lost its answer meets the name taken on its
/// retry; when the reads that would take the server over fail too (a storm of 429s), the error
/// says the create may have made something: the caller must not give the name up while its
/// server stands.
#[tokio::test]
async fn a_takeover_that_cannot_read_after_a_lost_answer_never_says_made_nothing() {
    let fake = FakeHetzner::start().await.unwrap();
    let p = common::provider(&fake, "me").await;
    fake.control().inject(Rule::new(
        Some(Method::POST),
        "/v1/servers",
        Fault::DropAnswer,
        1,
    ));
    fake.control().inject(Rule::new(
        Some(Method::GET),
        "/v1/servers",
        Fault::Status {
            status: 429,
            body: serde_json::json!({"error": {"code": "rate_limit_exceeded", "message": "limit of requests per hour reached", "details": {}}}),
            headers: vec![("Retry-After".into(), "0.01".into())],
        },
        1000,
    ));
    let e = p
        .create(&spec("lost-2", "cx23", "fsn1", "lab"))
        .await
        .unwrap_err();
    fake.control().clear_faults();
    assert_eq!(fake.servers().len(), 1, "the first POST made the server");
    assert!(!e.made_nothing(), "{e:?}");
    assert!(e.may_have_acted(), "{e:?}");
}

#[tokio::test]
async fn passing_failures_are_retried_by_the_shared_policy() {
    let fake = FakeHetzner::start().await.unwrap();
    // A request timeout no loopback round trip on a loaded machine comes near: every count of
    // requests below is exact.
    let p = HetznerProvider::new(
        common::builder(&fake)
            .request_timeout(Duration::from_secs(2))
            .build()
            .unwrap(),
        "me",
    )
    .await
    .unwrap();
    // Two 503s, then the answer.
    fake.control().inject(Rule::new(
        Some(Method::GET),
        "/v1/servers",
        Fault::Status {
            status: 503,
            body: serde_json::json!({"error": {"code": "service_error", "message": "try again"}}),
            headers: vec![],
        },
        2,
    ));
    assert!(p.machines("lab").await.unwrap().is_empty());
    assert_eq!(fake.control().requests(), 3);
    // An answer slower than the request timeout, then a quick one.
    fake.control().clear_log();
    fake.control().inject(Rule::new(
        Some(Method::GET),
        "/v1/servers",
        Fault::Latency(Duration::from_secs(30)),
        1,
    ));
    assert!(p.machines("lab").await.unwrap().is_empty());
    // A 4xx that is not passing is not retried.
    fake.control().clear_log();
    fake.control().inject(Rule::new(
        Some(Method::GET),
        "/v1/servers",
        Fault::Status {
            status: 403,
            body: serde_json::json!({"error": {"code": "forbidden", "message": "read-only token"}}),
            headers: vec![],
        },
        5,
    ));
    let e = p.machines("lab").await.unwrap_err();
    assert!(matches!(e, Error::PermissionDenied { .. }), "{e:?}");
    assert_eq!(fake.control().requests(), 1);
    fake.control().clear_faults();
}

#[tokio::test]
async fn a_lost_create_answer_whose_action_fails_leaves_no_server() {
    // The first POST makes the server and its answer is lost; the retry meets `uniqueness_error` and
    // adopts the server, whose create action then fails: the server is removed, not handed back.
    let fake = FakeHetzner::start_with(Options {
        action_time: Duration::from_millis(200),
        ..Options::default()
    })
    .await
    .unwrap();
    let p = common::provider(&fake, "me").await;
    fake.fail_next_create_action("the host failed to boot the image");
    fake.control().inject(Rule::new(
        Some(Method::POST),
        "/v1/servers",
        Fault::DropAnswer,
        1,
    ));
    let e = p
        .create(&spec("lost-2", "cx23", "fsn1", "lab"))
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains("the host failed to boot the image"),
        "{e:?}"
    );
    assert_eq!(fake.control().count(&Method::POST, "/v1/servers"), 2);
    assert!(fake.servers().is_empty(), "{:?}", fake.servers());
    assert!(p.machines("lab").await.unwrap().is_empty());
}

#[tokio::test]
async fn a_failed_resize_powers_the_server_on_again() {
    // change_type can fail after the server was stopped for it (no stock of the new type, a disk too
    // large for it): the server is started again rather than left off.
    let fake = FakeHetzner::start().await.unwrap();
    let p = common::provider(&fake, "me").await;
    let m = p
        .create(&spec("rs-1", "cx23", "fsn1", "lab"))
        .await
        .unwrap()
        .machine()
        .unwrap();
    fake.control().inject(Rule::new(
        Some(Method::POST),
        "/actions/change_type",
        Fault::Status {
            status: 412,
            body: serde_json::json!({"error": {"code": "resource_unavailable", "message": "server type cx33 is not available in this location"}}),
            headers: vec![],
        },
        1,
    ));
    assert!(p.resize(&m.id, "cx33").await.is_err());
    let s = &fake.servers()[0];
    assert_eq!(s["status"], "running", "{s}");
    assert_eq!(s["server_type"]["name"], "cx23");
}

/// A resize to a type that cannot be ordered where the server is (one not offered in its location,
/// or deprecated past its date) is refused before the server is stopped: nothing to gain from the
/// downtime (before, the server was shut down, the change refused, and the server started again).
#[tokio::test]
async fn a_resize_to_a_type_not_orderable_there_is_refused_before_any_stop() {
    let fake = FakeHetzner::start().await.unwrap();
    let p = common::provider(&fake, "me").await;
    let us = p
        .create(&spec("rs-us", "cpx22", "ash", "lab"))
        .await
        .unwrap()
        .machine()
        .unwrap();
    let eu = p
        .create(&spec("rs-eu", "cx23", "fsn1", "lab"))
        .await
        .unwrap()
        .machine()
        .unwrap();
    let shutdowns = || fake.control().count(&Method::POST, "/actions/shutdown");
    // cx23 is sold in the European locations only.
    let e = p.resize(&us.id, "cx23").await.unwrap_err();
    assert!(
        matches!(&e, Error::NoStock { machine_type, location, .. } if machine_type == "cx23" && location == "ash"),
        "{e:?}"
    );
    // cx22's deprecation date is past.
    let e = p.resize(&eu.id, "cx22").await.unwrap_err();
    assert!(
        matches!(&e, Error::InvalidSpec { field, .. } if field == "machine_type"),
        "{e:?}"
    );
    assert_eq!(shutdowns(), 0);
    for s in fake.servers() {
        assert_eq!(s["status"], "running", "{s}");
    }
}

#[tokio::test]
async fn a_retried_create_that_meets_the_limit_its_first_attempt_reached_adopts_that_server() {
    // The first POST makes the server and its answer is lost; the retry is refused because of what
    // that server used up (the project's server limit, or the last of the stock), before the name is
    // checked. The server the first attempt made is adopted: not reported as quota or no stock and
    // left running.
    for (status, code, message) in [
        (403, "resource_limit_exceeded", "server limit exceeded"),
        (
            412,
            "resource_unavailable",
            "server type cx23 is not available in this location",
        ),
    ] {
        let fake = FakeHetzner::start().await.unwrap();
        let p = common::provider(&fake, "me").await;
        fake.control().inject(Rule::new(
            Some(Method::POST),
            "/v1/servers",
            Fault::DropAnswer,
            1,
        ));
        fake.control().inject(Rule::new(
            Some(Method::POST),
            "/v1/servers",
            Fault::Status {
                status,
                body: serde_json::json!({"error": {"code": code, "message": message}}),
                headers: vec![],
            },
            1,
        ));
        let got = p.create(&spec("lim-1", "cx23", "fsn1", "lab")).await;
        let m = match got {
            Ok(Created::Machine(m)) => m,
            other => panic!("{code}: {other:?}"),
        };
        assert_eq!(fake.servers().len(), 1, "{code}");
        assert_eq!(m.id, fake.servers()[0]["id"].to_string(), "{code}");
        assert_eq!(fake.control().count(&Method::POST, "/v1/servers"), 2);
    }
    // Without a server of that name, the answers stay what they were.
    let fake = FakeHetzner::start().await.unwrap();
    let p = common::provider(&fake, "me").await;
    fake.set_no_stock("cx23", "fsn1", true);
    assert!(matches!(
        p.create(&spec("lim-2", "cx23", "fsn1", "lab")).await,
        Ok(Created::NoStock { .. })
    ));
    fake.control().inject(Rule::new(
        Some(Method::POST),
        "/v1/servers",
        Fault::Status {
            status: 403,
            body: serde_json::json!({"error": {"code": "resource_limit_exceeded", "message": "server limit exceeded"}}),
            headers: vec![],
        },
        1,
    ));
    let e = p
        .create(&spec("lim-3", "cx33", "fsn1", "lab"))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Quota { .. }), "{e:?}");
    assert!(fake.servers().is_empty());
}

#[tokio::test]
async fn create_follows_its_next_actions_and_a_failed_start_leaves_no_server() {
    // Hetzner answers a create with the create action and, in `next_actions`, the `start_server` that
    // follows it: the machine is made once both have ended.
    let fake = FakeHetzner::start_with(Options {
        action_time: Duration::from_millis(200),
        ..Options::default()
    })
    .await
    .unwrap();
    let p = common::provider(&fake, "me").await;
    let m = p
        .create(&spec("nx-1", "cx23", "fsn1", "lab"))
        .await
        .unwrap()
        .machine()
        .unwrap();
    assert_eq!(m.status, Status::Running, "{m:?}");
    // A start that fails: the create failed, and its server is removed.
    fake.fail_next_start_after_create("no host could start the server");
    let e = p
        .create(&spec("nx-2", "cx23", "fsn1", "lab"))
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains("no host could start the server"),
        "{e:?}"
    );
    let names: Vec<String> = fake
        .servers()
        .iter()
        .map(|s| s["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["nx-1"]);
}

#[tokio::test]
async fn concurrent_first_creates_look_the_type_and_image_up_once() {
    let fake = FakeHetzner::start().await.unwrap();
    let p = Arc::new(common::provider(&fake, "me").await);
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..10 {
        let p = p.clone();
        tasks.spawn(async move {
            p.create(&spec(&format!("c{i}"), "cx23", "fsn1", "lab"))
                .await
                .map(|_| ())
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.unwrap().unwrap();
    }
    assert_eq!(fake.control().count(&Method::GET, "/v1/server_types"), 1);
    assert_eq!(fake.control().count(&Method::GET, "/v1/images"), 1);
    assert_eq!(fake.servers().len(), 10);
}

#[tokio::test]
async fn only_a_passing_failure_makes_a_found_server_this_calls_own() {
    // A 429 is not served: a create whose first attempt was throttled and whose retry meets
    // `uniqueness_error` found a server an EARLIER call made (adopted), not one of its own.
    let fake = FakeHetzner::start().await.unwrap();
    let p = common::provider(&fake, "me").await;
    let first = p
        .create(&spec("att-1", "cx23", "fsn1", "lab"))
        .await
        .unwrap();
    assert!(matches!(first, Created::Machine(_)), "{first:?}");
    throttle(&fake, 1);
    let again = p
        .create(&spec("att-1", "cx23", "fsn1", "lab"))
        .await
        .unwrap();
    assert!(again.is_adopted(), "a 429 then a 409 gave {again:?}");
    assert_eq!(
        again.machine().unwrap().id,
        first.machine().unwrap().id,
        "the same server"
    );
    // A lost answer may have been served: the server its retry finds is this call's own, also when
    // a 429 came between them.
    fake.control().inject(Rule::new(
        Some(Method::POST),
        "/v1/servers",
        Fault::DropAnswer,
        1,
    ));
    throttle(&fake, 1);
    let lost = p
        .create(&spec("att-2", "cx23", "fsn1", "lab"))
        .await
        .unwrap();
    assert!(
        matches!(lost, Created::Machine(_)),
        "a lost answer then a 409 gave {lost:?}"
    );
    assert_eq!(fake.servers().len(), 2);
}

#[tokio::test]
async fn a_503_the_cloud_answered_unserved_does_not_make_an_earlier_server_this_calls_own() {
    // A 503 may come before Hetzner acted: the server the retry meets is this call's own only when
    // it carries this call's token, which the earlier call's server does not.
    let fake = FakeHetzner::start().await.unwrap();
    let p = common::provider(&fake, "me").await;
    let first = p
        .create(&spec("tok-1", "cx23", "fsn1", "lab"))
        .await
        .unwrap()
        .machine()
        .unwrap();
    let unavailable = || Fault::Status {
        status: 503,
        body: serde_json::json!({"error": {"code": "unavailable", "message": "try later", "details": {}}}),
        headers: vec![],
    };
    fake.control().inject(Rule::new(
        Some(Method::POST),
        "/v1/servers",
        unavailable(),
        1,
    ));
    let posts = fake.control().count(&Method::POST, "/v1/servers");
    let again = p
        .create(&spec("tok-1", "cx23", "fsn1", "lab"))
        .await
        .unwrap();
    assert!(again.is_adopted(), "a 503 then a 409 gave {again:?}");
    let again = again.machine().unwrap();
    assert_eq!(again.id, first.id);
    assert_eq!(
        fake.control().count(&Method::POST, "/v1/servers") - posts,
        2
    );
    assert_eq!(fake.servers().len(), 1);
    // The token rides on the server as the label orca.create, and never shows as a machine's label.
    let token = fake.servers()[0]["labels"][CREATE_LABEL].clone();
    assert!(token.as_str().is_some_and(|t| !t.is_empty()), "{token}");
    let read = p.machine(&first.id).await.unwrap().unwrap();
    for m in [first.clone(), again, read]
        .into_iter()
        .chain(p.machines("lab").await.unwrap())
    {
        assert!(!m.labels.contains_key(CREATE_LABEL), "{:?}", m.labels);
    }
    // A label change by the caller works and keeps the token.
    let mut set = orca_machines::labels::Labels::new();
    set.insert("team".into(), "web".into());
    let changed = p
        .machine_labels()
        .unwrap()
        .set_labels(&first.id, &set, &[])
        .await
        .unwrap();
    assert_eq!(changed.labels.get("team").map(String::as_str), Some("web"));
    assert!(!changed.labels.contains_key(CREATE_LABEL));
    assert_eq!(fake.servers()[0]["labels"][CREATE_LABEL], token);
    // Each call has a token of its own: a second server carries another.
    p.create(&spec("tok-2", "cx23", "fsn1", "lab"))
        .await
        .unwrap();
    let tokens: Vec<_> = fake
        .servers()
        .iter()
        .map(|s| s["labels"][CREATE_LABEL].clone())
        .collect();
    assert_ne!(tokens[0], tokens[1], "{tokens:?}");
}

#[tokio::test]
async fn no_stock_from_a_resize_or_a_start_names_the_type_and_the_location() {
    let fake = FakeHetzner::start().await.unwrap();
    let p = common::provider(&fake, "me").await;
    let m = p
        .create(&spec("ns-1", "cx23", "hel1", "lab"))
        .await
        .unwrap()
        .machine()
        .unwrap();
    // The new type cannot be placed: no stock of the NEW type, where the server is; the server runs
    // again on its old type.
    fake.set_no_stock("cx33", "hel1", true);
    match p.resize(&m.id, "cx33").await {
        Err(Error::NoStock {
            machine_type,
            location,
            message,
            ..
        }) => {
            assert_eq!((machine_type.as_str(), location.as_str()), ("cx33", "hel1"));
            assert!(message.contains("error during placement"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    let s = &fake.servers()[0];
    assert_eq!(
        (s["status"].as_str(), s["server_type"]["name"].as_str()),
        (Some("running"), Some("cx23"))
    );
    // A start that cannot be placed (Hetzner keeps a stopped server's place, so this is rare; the
    // failure is answered here with the placement code): no stock of the server's own type there.
    p.stop(&m.id).await.unwrap();
    fake.control().inject(Rule::new(
        Some(Method::POST),
        "/actions/poweron",
        Fault::Status {
            status: 412,
            body: serde_json::json!({"error": {"code": "resource_unavailable", "message": "error during placement", "details": {}}}),
            headers: vec![],
        },
        1,
    ));
    match p.start(&m.id).await {
        Err(e @ Error::NoStock { .. }) => {
            let Error::NoStock {
                machine_type,
                location,
                ..
            } = &e
            else {
                unreachable!()
            };
            assert_eq!((machine_type.as_str(), location.as_str()), ("cx23", "hel1"));
            assert_eq!(e.code(), Some("resource_unavailable"), "the code is kept");
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn an_action_that_does_not_end_in_time_is_a_passing_failure_and_its_server_stays() {
    // Actions are followed by the kit's poll: every `poll_interval`, for at most `operation_timeout`;
    // then a passing failure naming the action (it goes on in the cloud, and a retried create
    // adopts the server).
    let fake = FakeHetzner::start_with(Options {
        action_time: Duration::from_secs(3600),
        ..Options::default()
    })
    .await
    .unwrap();
    let config = common::builder(&fake)
        .poll_interval(Duration::from_millis(50))
        .operation_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let p = HetznerProvider::new(config, "me").await.unwrap();
    let e = p
        .create(&spec("slow-1", "cx23", "fsn1", "lab"))
        .await
        .unwrap_err();
    assert!(e.is_retryable(), "{e:?}");
    assert!(e.to_string().contains("create_server"), "{e}");
    assert_eq!(e.operation(), Some("create_server"));
    let reads = fake.control().count(&Method::GET, "/v1/actions");
    assert!(
        (1..=21).contains(&reads),
        "at most one read every 50 ms for 1 s, not a tight loop: {reads}"
    );
    assert_eq!(fake.servers().len(), 1, "the server is not removed");
}

#[tokio::test]
async fn a_machines_own_image_reaches_the_server() {
    let fake = FakeHetzner::start().await.unwrap();
    let p = common::provider(&fake, "stack-1").await;
    // By name, for each architecture: the fake resolves it to that architecture's build.
    for (name, t, arch) in [("deb-x86", "cx23", "x86"), ("deb-arm", "cax11", "arm")] {
        let m = p
            .create(&spec(name, t, "fsn1", "lab").with_image("debian-12"))
            .await
            .unwrap()
            .machine()
            .expect("stock");
        let s = fake
            .servers()
            .into_iter()
            .find(|s| s["id"].as_i64() == m.id.parse().ok())
            .unwrap();
        assert_eq!(s["image"]["name"], "debian-12", "{name}");
        assert_eq!(s["image"]["architecture"], arch, "{name}");
    }
    // By id: the image itself (debian-12 for arm in the fake's catalogue).
    let m = p
        .create(&spec("deb-id", "cax11", "fsn1", "lab").with_image("114690389"))
        .await
        .unwrap()
        .machine()
        .expect("stock");
    let s = fake
        .servers()
        .into_iter()
        .find(|s| s["id"].as_i64() == m.id.parse().ok())
        .unwrap();
    assert_eq!(s["image"]["id"], 114690389);
    // An image that does not exist is refused as the spec's image, and no server is asked for.
    let posts = fake.control().count(&Method::POST, "/v1/servers");
    let e = p
        .create(&spec("deb-none", "cx23", "fsn1", "lab").with_image("no-such-os"))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, Error::InvalidSpec { field, .. } if field == "image"),
        "{e:?}"
    );
    assert_eq!(fake.control().count(&Method::POST, "/v1/servers"), posts);
    assert_eq!(fake.servers().len(), 3);
}

#[tokio::test]
async fn errors_keep_the_operation_the_retries_the_code_and_the_cause() {
    use std::error::Error as _;
    let fake = FakeHetzner::start().await.unwrap();
    let p = common::provider(&fake, "stack-1").await;
    // Every answer dropped: a passing failure, retried as often as the policy allows (fast: 6), with
    // the transport's error as its cause.
    fake.control().clear_log();
    fake.control().inject(Rule::new(
        Some(Method::GET),
        "/v1/servers",
        Fault::DropAnswer,
        100,
    ));
    let e = p.machines("lab").await.unwrap_err();
    assert!(matches!(e, Error::Transient { .. }), "{e:?}");
    assert_eq!(e.operation(), Some("servers.list"));
    assert_eq!(e.retries(), 6, "{e}");
    assert_eq!(
        fake.control().requests(),
        7,
        "the first try and six retries"
    );
    assert!(e.source().is_some(), "the cause is kept: {e:?}");
    assert!(e.is_retryable());
    fake.control().clear_faults();
    // Hetzner's own error: its code is kept, what a caller matches on; retried until the budget ends.
    fake.control().inject(Rule::new(
        Some(Method::GET),
        "/v1/servers",
        Fault::Status {
            status: 503,
            body: serde_json::json!({"error": {"code": "unavailable", "message": "try later"}}),
            headers: vec![],
        },
        100,
    ));
    let e = p.machines("lab").await.unwrap_err();
    assert_eq!(e.code(), Some("unavailable"), "{e:?}");
    assert_eq!(e.retries(), 6, "{e}");
    fake.control().clear_faults();
    // An answer that is not Hetzner's JSON: not retried, the decoder's error kept as the cause.
    fake.control().inject(Rule::new(
        Some(Method::GET),
        "/v1/servers",
        Fault::Text {
            status: 200,
            content_type: "application/json".into(),
            body: "{\"servers\": [".into(),
        },
        1,
    ));
    let e = p.machines("lab").await.unwrap_err();
    assert!(matches!(e, Error::Other { .. }), "{e:?}");
    assert_eq!(e.retries(), 0, "{e}");
    assert!(
        e.source()
            .is_some_and(|s| s.downcast_ref::<serde_json::Error>().is_some()),
        "the decoder's error is the cause: {e:?}"
    );
    assert_eq!(e.operation(), Some("servers.list"));
}

/// A create whose server Hetzner made, and whose waits on it are then throttled, fails as throttled
/// but never as "made nothing": a caller that gave the name up would leave the server unknown.
#[tokio::test]
async fn a_create_throttled_after_the_server_was_made_did_not_make_nothing() {
    let fake = FakeHetzner::start().await.unwrap();
    let config = common::builder(&fake)
        .retry(RetryPolicy::NEVER)
        .build()
        .unwrap();
    let p = HetznerProvider::new(config, "s").await.unwrap();
    p.arch("cx23").await.unwrap();
    let throttled = || Fault::Status {
        status: 429,
        body: serde_json::json!({"error": {"code": "rate_limit_exceeded", "message": "slow down"}}),
        headers: vec![],
    };
    for path in ["/v1/actions", "/v1/servers/"] {
        fake.control()
            .inject(Rule::new(Some(Method::GET), path, throttled(), 1_000));
    }
    let err = p
        .create(&spec("thr-1", "cx23", "fsn1", "lab"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), orca_machines::ErrorKind::Throttled, "{err}");
    assert!(
        !err.made_nothing(),
        "the server was made before the throttled reads: {err}"
    );
    fake.control().clear_faults();
    assert!(p.machine_named("lab", "thr-1").await.unwrap().is_some());
}

#[tokio::test]
async fn a_create_stopped_before_it_answered_leaves_a_server_that_delete_named_removes() {
    // The create's actions run on after Hetzner accepted its POST, and the new server shows late
    // (within the provider's visibility window, 30 s).
    let fake = FakeHetzner::start_with(Options {
        action_time: Duration::from_secs(1),
        ..Options::default()
    })
    .await
    .unwrap();
    fake.set_visibility_delay(Duration::from_secs(3));
    let p = common::provider(&fake, "me").await;
    let made = spec("web-stopped", "cx23", "fsn1", "lab");
    // Stopped (dropped, as a caller's timeout does) once Hetzner has accepted the create.
    let accepted = async {
        while fake.servers().is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::select! {
        got = p.create(&made) => panic!("the create answered before it was stopped: {got:?}"),
        () = accepted => {}
    }
    assert!(p.delete_named("lab", "web-stopped").await.unwrap());
    assert!(fake.servers().is_empty(), "{:?}", fake.servers());
    // Removed: the name is an ordinary one again, one read.
    fake.control().clear_log();
    assert!(!p.delete_named("lab", "web-stopped").await.unwrap());
    assert_eq!(fake.control().log().len(), 1);
}

/// A server deleted between two page reads moves the servers after it a place back, onto a page
/// already read: a listing whose total changed on the way is read again, so that no server of the
/// pool is missed (the scaler would take it for gone) and none is shown twice.
#[tokio::test]
async fn a_listing_the_pool_changed_under_is_read_again() {
    let fake = FakeHetzner::start().await.unwrap();
    let p = HetznerProvider::new(common::builder(&fake).page_size(1).build().unwrap(), "me")
        .await
        .unwrap();
    for n in ["page-1", "page-2", "page-3"] {
        p.create(&spec(n, "cx23", "fsn1", "lab")).await.unwrap();
    }
    fake.delete_after_page(1);
    let mut listed: Vec<String> = p
        .machines("lab")
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.name)
        .collect();
    listed.sort();
    assert_eq!(listed, ["page-2", "page-3"]);
}

/// The same when the API gives no totals (its pagination schema: "can be null if unknown"): a
/// listing of several pages is read again until two in a row agree, rather than taken to have held
/// still because two unknown totals compare equal.
#[tokio::test]
async fn a_listing_without_totals_is_read_until_two_agree() {
    let fake = FakeHetzner::start().await.unwrap();
    let p = HetznerProvider::new(common::builder(&fake).page_size(1).build().unwrap(), "me")
        .await
        .unwrap();
    for n in ["page-1", "page-2", "page-3"] {
        p.create(&spec(n, "cx23", "fsn1", "lab")).await.unwrap();
    }
    fake.hide_totals();
    fake.delete_after_page(1);
    let mut listed: Vec<String> = p
        .machines("lab")
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.name)
        .collect();
    listed.sort();
    assert_eq!(listed, ["page-2", "page-3"]);
}
