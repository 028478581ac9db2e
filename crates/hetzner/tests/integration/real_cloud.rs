//! What the real Hetzner Cloud does that a kinder fake hid, and the facts of contract v2 as Hetzner
//! reports them: each test runs against the fake taught the real behaviour first.

use crate::common;

use std::time::Duration;

use axum::http::Method;
use orca_fakes::hetzner::FakeHetzner;
use orca_hetzner::HetznerProvider;
use orca_machines::labels::Labels;
use orca_machines::{Created, Error, MachineSpec, Provider, Status};

fn spec(name: &str, t: &str, loc: &str, pool: &str) -> MachineSpec {
    MachineSpec::new(name, t, loc, pool)
}

#[tokio::test]
async fn a_new_status_word_or_a_phased_out_field_fails_no_listing_and_no_read() {
    // The fake answers server types without the phased-out `deprecated` flag (the strict generated
    // models refused every such answer: "missing field `deprecated`") and a server in a status the
    // reference does not list yet.
    let fake = FakeHetzner::start().await.unwrap();
    let p = common::provider(&fake, "me").await;
    assert_eq!(p.arch("cx23").await.unwrap().as_str(), "amd64");
    let m = p
        .create(&spec("new-1", "cx23", "fsn1", "lab"))
        .await
        .unwrap()
        .machine()
        .unwrap();
    assert!(fake.set_status(m.id.parse().unwrap(), "hibernating"));
    let listed = p.machines("lab").await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (listed[0].status, listed[0].cloud_status.as_str()),
        (Status::Unknown, "hibernating"),
        "the cloud's word is kept"
    );
    let read = p.machine(&m.id).await.unwrap().unwrap();
    assert_eq!(read.cloud_status, "hibernating");
    assert!(fake.servers()[0].get("datacenter").is_none());
    assert!(p.delete(&m.id).await.unwrap());
}

#[tokio::test]
async fn a_deprecated_type_is_refused_before_the_create() {
    let fake = FakeHetzner::start().await.unwrap();
    let p = common::provider(&fake, "me").await;
    for old in ["cx22", "cx32"] {
        let e = p
            .create(&spec("old-1", old, "fsn1", "lab"))
            .await
            .unwrap_err();
        match &e {
            Error::InvalidSpec { field, rule } => {
                assert_eq!(field, "machine_type");
                assert!(rule.contains("deprecated in fsn1"), "{rule}");
                assert!(rule.contains("2026-01-01"), "names the date: {rule}");
            }
            other => panic!("{old}: {other:?}"),
        }
    }
    assert_eq!(fake.control().count(&Method::POST, "/v1/servers"), 0);
    assert!(fake.servers().is_empty());
    // A type never offered in a location is answered before the create too (no stock there).
    let got = p
        .create(&spec("us-1", "cax11", "ash", "lab"))
        .await
        .unwrap();
    assert!(matches!(got, Created::NoStock { .. }), "{got:?}");
    assert_eq!(fake.control().count(&Method::POST, "/v1/servers"), 0);
}

/// A type whose deprecation Hetzner has announced is still sold until its `unavailable_after`: a
/// create of it makes the server, as Hetzner's own create takes it.
#[tokio::test]
async fn a_type_announced_deprecated_is_ordered_until_it_becomes_unavailable() {
    let fake = FakeHetzner::start().await.unwrap();
    let ahead = (orca_machines::chrono::Utc::now() + orca_machines::chrono::Duration::days(90))
        .to_rfc3339();
    fake.deprecate("cx23", "2026-11-01T09:00:00+00:00", &ahead);
    let p = common::provider(&fake, "me").await;
    let got = p
        .create(&spec("soon-old", "cx23", "fsn1", "lab"))
        .await
        .unwrap();
    assert!(matches!(got, Created::Machine(_)), "{got:?}");
    assert_eq!(fake.servers().len(), 1);
}

#[tokio::test]
async fn a_create_action_that_fails_for_placement_or_capacity_is_no_stock() {
    for code in ["placement_error", "resource_unavailable"] {
        let fake = FakeHetzner::start().await.unwrap();
        let p = common::provider(&fake, "me").await;
        fake.fail_next_create_action_with(code, "error during placement");
        match p.create(&spec("pl-1", "cx23", "fsn1", "lab")).await {
            Ok(Created::NoStock {
                machine_type,
                location,
                message,
                ..
            }) => {
                assert_eq!((machine_type.as_str(), location.as_str()), ("cx23", "fsn1"));
                assert!(message.contains("error during placement"), "{message}");
            }
            other => panic!("{code}: {other:?}"),
        }
        assert!(
            fake.servers().is_empty(),
            "{code}: the failed server is removed"
        );
    }
    // Any other failed create action stays an error.
    let fake = FakeHetzner::start().await.unwrap();
    let p = common::provider(&fake, "me").await;
    fake.fail_next_create_action("the host failed to boot the image");
    let e = p
        .create(&spec("pl-2", "cx23", "fsn1", "lab"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some("action_failed"), "{e:?}");
}

#[tokio::test]
async fn machine_facts_are_hetzners() {
    let fake = FakeHetzner::start().await.unwrap();
    let p = common::provider(&fake, "me").await;
    let caps = p.capabilities();
    assert!(caps.private_address, "a network is set");
    assert!(!caps.power_times, "Hetzner reports no power times");
    assert_eq!(caps.options.names(), ["labels", "image"]);
    let before = orca_machines::chrono::Utc::now() - orca_machines::chrono::Duration::seconds(5);
    let m = p
        .create(&spec("facts-1", "cax11", "fsn1", "lab"))
        .await
        .unwrap()
        .machine()
        .unwrap();
    let s = &fake.servers()[0];
    assert!(m.created_at.unwrap() >= before, "{:?}", m.created_at);
    assert_eq!(m.fqdn, s["public_net"]["ipv4"]["dns_ptr"].as_str().unwrap());
    assert!(m.fqdn.ends_with(".clients.your-server.de"), "{}", m.fqdn);
    assert_eq!(
        m.private_address,
        s["private_net"][0]["ip"].as_str().unwrap()
    );
    assert_eq!(
        s["private_net"][0]["network"], 77,
        "attached in the create call"
    );
    assert_eq!((m.started_at, m.stopped_at), (None, None));

    // Without a network: no claim, and no address.
    let fake2 = FakeHetzner::start().await.unwrap();
    let no_net = HetznerProvider::new(
        orca_hetzner::Config::builder()
            .token(fake2.token())
            .endpoint(fake2.url())
            .poll_interval(Duration::from_millis(1))
            .build()
            .unwrap(),
        "me",
    )
    .await
    .unwrap();
    assert!(!no_net.capabilities().private_address);
    let m = no_net
        .create(&spec("facts-2", "cx23", "fsn1", "lab"))
        .await
        .unwrap()
        .machine()
        .unwrap();
    assert_eq!(m.private_address, "");
    assert!(fake2.servers()[0]["private_net"]
        .as_array()
        .unwrap()
        .is_empty());
}

#[tokio::test]
async fn options_labels_and_image_are_honoured_the_rest_refused_before_any_call() {
    let fake = FakeHetzner::start().await.unwrap();
    let p = common::provider(&fake, "me").await;
    let m = p
        .create(
            &spec("opt-1", "cax11", "fsn1", "lab")
                .with_label("team", "web")
                .with_image("debian-12"),
        )
        .await
        .unwrap()
        .machine()
        .unwrap();
    assert_eq!(m.labels["team"], "web");
    assert_eq!(m.labels["orca-pool"], "lab");
    let s = &fake.servers()[0];
    assert_eq!(
        (
            s["image"]["name"].as_str(),
            s["image"]["architecture"].as_str()
        ),
        (Some("debian-12"), Some("arm"))
    );
    // An image that does not exist for the type's architecture is the spec's fault.
    let e = p
        .create(&spec("opt-2", "cx23", "fsn1", "lab").with_image("no-such-os"))
        .await
        .unwrap_err();
    assert!(
        matches!(e, Error::InvalidSpec { ref field, .. } if field == "image"),
        "{e:?}"
    );
    let before = fake.control().requests();
    for s in [
        spec("opt-3", "cx23", "fsn1", "lab").with_disk_gb(80),
        spec("opt-3", "cx23", "fsn1", "lab").with_network_tag("web"),
        spec("opt-3", "cx23", "fsn1", "lab").with_max_run_duration(Duration::from_secs(3600)),
        spec("opt-3", "cx23", "fsn1", "lab").with_ssh_sources(["203.0.113.7/32"]),
        spec("opt-3", "cx23", "fsn1", "lab").with_admission_group("g"),
        spec("opt-3", "cx23", "fsn1", "lab").with_ssh_key(
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOrcaTestKeyNotARealOne0000000000 t",
        ),
    ] {
        let e = p.create(&s).await.unwrap_err();
        assert!(matches!(e, Error::Unsupported { .. }), "{s:?}: {e:?}");
    }
    assert_eq!(fake.control().requests(), before, "refused before any call");
}

#[tokio::test]
async fn labels_change_on_an_existing_server_in_one_write_of_every_label() {
    let fake = FakeHetzner::start().await.unwrap();
    let p = common::provider(&fake, "me").await;
    let other = common::provider(&fake, "you").await;
    let m = p
        .create(&spec("lab-1", "cx23", "fsn1", "lab").with_label("keep", "yes"))
        .await
        .unwrap()
        .machine()
        .unwrap();
    let ext = p.machine_labels().expect("hetzner changes labels");
    let set = Labels::from([("shed-state".to_string(), "ready".to_string())]);
    let puts = fake.control().count(&Method::PUT, "/v1/servers/");
    let after = ext.set_labels(&m.id, &set, &[]).await.unwrap();
    assert_eq!(fake.control().count(&Method::PUT, "/v1/servers/") - puts, 1);
    let s = &fake.servers()[0];
    for (k, v) in [
        ("shed-state", "ready"),
        ("keep", "yes"),
        ("orca", "pool"),
        ("orca-pool", "lab"),
        ("orca-owner", "me"),
    ] {
        assert_eq!(s["labels"][k], v, "{k} after the write: {}", s["labels"]);
        assert_eq!(after.labels[k], v);
    }
    let after = ext
        .set_labels(&m.id, &Labels::new(), &["keep".to_string()])
        .await
        .unwrap();
    assert!(!after.labels.contains_key("keep"));
    // Nothing to change: no write.
    let puts = fake.control().count(&Method::PUT, "/v1/servers/");
    ext.set_labels(&m.id, &set, &[]).await.unwrap();
    assert_eq!(fake.control().count(&Method::PUT, "/v1/servers/"), puts);
    // Another owner's server: refused, nothing written.
    let e = other
        .machine_labels()
        .unwrap()
        .set_labels(&m.id, &set, &[])
        .await
        .unwrap_err();
    assert!(matches!(e, Error::NotOwned { .. }), "{e:?}");
    assert_eq!(fake.control().count(&Method::PUT, "/v1/servers/"), puts);
}

#[tokio::test]
async fn a_create_answers_only_once_its_server_shows_and_a_fresh_404_is_not_believed() {
    let fake = FakeHetzner::start().await.unwrap();
    let p = common::provider(&fake, "me").await;
    let other = common::provider(&fake, "you").await;
    fake.set_visibility_delay(Duration::from_millis(600));
    let m = p
        .create(&spec("vis-1", "cx23", "fsn1", "lab"))
        .await
        .unwrap()
        .machine()
        .unwrap();
    // Every other client sees it at once.
    let e = other.delete(&m.id).await.unwrap_err();
    assert!(matches!(e, Error::NotOwned { .. }), "{e:?}");
    assert_eq!(p.machines("lab").await.unwrap().len(), 1);
    assert!(p.delete(&m.id).await.unwrap());
    assert!(fake.servers().is_empty());
}
