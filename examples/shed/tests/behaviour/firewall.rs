//! The firewall check: each clause and its reason, what a failing check refuses and what it leaves
//! alone, when it runs, its log lines, and the three modes (with auto's echo services and patches).

use orca::memory::{FaultKind, Operation, DEFAULT_NETWORK};
use orca::{ErrorKind, FirewallPorts, FirewallRule, Network};
use shed::config::FirewallMode;
use shed::firewall::FwReason;
use shed::Status;

use crate::support::{good_rule, Env, LogCount as _, RULE, SOURCE, TAG};

type Change = Box<dyn Fn(&mut FirewallRule)>;

async fn reason_of(env: &Env) -> Option<FwReason> {
    env.backend.firewall_check().await.reason
}

#[tokio::test]
async fn each_clause_fails_with_its_reason() {
    let env = Env::new().await;
    assert_eq!(
        reason_of(&env).await,
        None,
        "the rule as shed's README makes it passes"
    );
    let cases: Vec<(FwReason, Change)> = vec![
        (
            FwReason::RuleNetwork,
            Box::new(|r| r.network = "other-net".into()),
        ),
        (
            FwReason::RuleDirection,
            Box::new(|r| r.direction = "EGRESS".into()),
        ),
        (FwReason::RuleDisabled, Box::new(|r| r.disabled = true)),
        (
            FwReason::RuleAllow,
            Box::new(|r| r.allowed = vec![FirewallPorts::new("tcp", ["22", "80"])]),
        ),
        (
            FwReason::RuleAllow,
            Box::new(|r| r.allowed = vec![FirewallPorts::new("tcp", Vec::<String>::new())]),
        ),
        (
            FwReason::RuleAllow,
            Box::new(|r| r.allowed.push(FirewallPorts::new("udp", ["22"]))),
        ),
        (FwReason::RuleTarget, Box::new(|r| r.target_tags = vec![])),
        (
            FwReason::RuleTarget,
            Box::new(|r| r.target_tags.push("web".into())),
        ),
        (
            FwReason::RuleTarget,
            Box::new(|r| r.target_service_accounts = vec!["sa@x".into()]),
        ),
        (
            FwReason::RuleSourceKind,
            Box::new(|r| r.source_tags = vec!["shed-dev".into()]),
        ),
        (
            FwReason::RuleSourceKind,
            Box::new(|r| r.source_service_accounts = vec!["sa@x".into()]),
        ),
        (
            FwReason::RuleSources,
            Box::new(|r| r.source_ranges = vec!["198.51.100.9/32".into()]),
        ),
        (
            FwReason::RuleSources,
            Box::new(|r| r.source_ranges.push("198.51.100.9/32".into())),
        ),
    ];
    for (want, change) in cases {
        let mut r = good_rule();
        change(&mut r);
        env.cloud.put_firewall_rule(r);
        assert_eq!(reason_of(&env).await, Some(want));
    }
    env.cloud.remove_firewall_rule(RULE);
    assert_eq!(reason_of(&env).await, Some(FwReason::RuleMissing));
    env.cloud.put_firewall_rule(good_rule());
    assert_eq!(reason_of(&env).await, None);
    // A bare address is its /32.
    let mut r = good_rule();
    r.source_ranges = vec!["203.0.113.7".into()];
    env.cloud.put_firewall_rule(r);
    assert_eq!(reason_of(&env).await, None);
}

#[tokio::test]
async fn stray_rules_default_network_and_unreadable() {
    let env = Env::new().await;
    let stray = |name: &str, f: &dyn Fn(&mut FirewallRule)| {
        let mut r = FirewallRule::new(name, DEFAULT_NETWORK);
        r.allowed = vec![FirewallPorts::new("tcp", ["8080"])];
        r.source_ranges = vec!["0.0.0.0/0".into()];
        f(&mut r);
        r
    };
    // Ignored: disabled, deny, egress, targeting only a service account, another environment's tag,
    // another network.
    for r in [
        stray("off", &|r| {
            r.target_tags = vec![TAG.into()];
            r.disabled = true
        }),
        stray("deny", &|r| {
            r.allowed.clear();
            r.denied = vec![FirewallPorts::new("all", Vec::<String>::new())];
        }),
        stray("out", &|r| r.direction = "EGRESS".into()),
        stray("sa", &|r| {
            r.target_service_accounts = vec!["build@x".into()]
        }),
        stray("shed-prod-ssh", &|r| {
            r.target_tags = vec!["shed-prod".into()]
        }),
        stray("elsewhere", &|r| r.network = "other-net".into()),
    ] {
        env.cloud.put_firewall_rule(r);
    }
    assert_eq!(reason_of(&env).await, None);
    env.cloud.put_firewall_rule(stray("web", &|r| {
        r.target_tags = vec![TAG.into(), "web".into()]
    }));
    let o = env.backend.firewall_check().await;
    assert_eq!(o.reason, Some(FwReason::StrayRule));
    assert!(o.message.contains("web"), "{}", o.message);
    env.cloud.remove_firewall_rule("web");
    env.cloud.put_firewall_rule(stray("all-instances", &|_| {}));
    assert_eq!(reason_of(&env).await, Some(FwReason::StrayRule));
    env.cloud.remove_firewall_rule("all-instances");

    let mut n = Network::new(DEFAULT_NETWORK);
    n.auto_create_subnetworks = true;
    env.cloud.put_network(n);
    assert_eq!(reason_of(&env).await, Some(FwReason::DefaultNetwork));
    env.cloud.put_network(Network::new(DEFAULT_NETWORK));
    assert_eq!(reason_of(&env).await, None);

    env.cloud.inject(
        Operation::Network,
        FaultKind::Error(ErrorKind::PermissionDenied),
        1,
    );
    let o = env.backend.firewall_check().await;
    assert_eq!(o.reason, Some(FwReason::Unreadable));
    assert!(
        o.message.contains("injected PermissionDenied"),
        "the cloud's error: {}",
        o.message
    );
    env.wrapped
        .no_firewall
        .store(true, std::sync::atomic::Ordering::SeqCst);
    assert_eq!(reason_of(&env).await, Some(FwReason::Unreadable));
}

#[tokio::test]
async fn a_failing_check_refuses_creates_and_starts_only_and_stops_or_deletes_nothing() {
    let env = Env::build(|c| c.limits.max_running = 8).await;
    env.running("run").await;
    env.running("off").await;
    env.backend.stop_shed(&env.admin(), "off").await.unwrap();
    env.until_status("off", Status::Stopped).await;
    let mut r = good_rule();
    r.source_ranges = vec!["198.51.100.9/32".into()];
    env.cloud.put_firewall_rule(r);
    env.pass().await;
    let e = env.create("new").await.unwrap_err();
    assert_eq!((e.status, e.code.as_str()), (503, "FIREWALL_CHECK_FAILED"));
    assert!(
        e.message.contains(
            "firewall rule shed-dev-ssh admits the wrong sources: expected source ranges [203.0.113.7/32], found source ranges [198.51.100.9/32]"
        ),
        "{}",
        e.message
    );
    let e = env
        .backend
        .start_shed(&env.admin(), "off")
        .await
        .unwrap_err();
    assert_eq!(e.code, "FIREWALL_CHECK_FAILED");
    assert_eq!(env.vms().len(), 2);
    assert!(env.backend.records().iter().all(|s| s.name != "new"));
    // stop, delete, list, exec work as before; nothing is stopped or deleted because of it.
    env.pass().await;
    assert_eq!(env.view("run").unwrap().status, Status::Running);
    env.backend.stop_shed(&env.admin(), "run").await.unwrap();
    env.until_status("run", Status::Stopped).await;
    assert_eq!(env.backend.list(&env.admin()).len(), 2);
    env.backend.delete_shed(&env.admin(), "off").await.unwrap();
    env.until("destroyed", |e| e.vms().len() == 1).await;
}

#[tokio::test]
async fn a_create_is_judged_by_the_last_result_for_60_s_and_the_insert_asks_again() {
    let env = Env::new().await;
    env.running("a").await;
    env.pass().await;
    env.cloud.remove_firewall_rule(RULE);
    env.advance(30).await;
    // Within 60 s of the last check the request is accepted; the check just before the insert fails,
    // so nothing is sent and the shed is left in error (firewall).
    // The answer is 201 starting all the same (a JSON create answers the shed as it was accepted);
    // a poll shows the error.
    let v = env.create("b").await.unwrap();
    assert_eq!((v.status, v.status_reason.as_str()), (Status::Starting, ""));
    let v = env.view("b").unwrap();
    assert_eq!(
        (v.status, v.status_reason.as_str()),
        (Status::Error, "firewall")
    );
    assert_eq!(env.vms().len(), 1, "no insert was sent");
    env.advance(61).await;
    let e = env.create("c").await.unwrap_err();
    assert_eq!(e.code, "FIREWALL_CHECK_FAILED");
    assert!(e.message.contains("rule_missing"), "{}", e.message);
    // A repaired rule passes at the next check, with no restart.
    env.cloud.put_firewall_rule(good_rule());
    env.pass().await;
    env.running("c").await;
}

#[tokio::test]
async fn the_result_is_logged_on_change_and_every_ten_minutes_while_failing() {
    let env = Env::new().await;
    let passed =
        format!("remote: firewall check passed (mode static, rule {RULE}, sources {SOURCE})");
    assert_eq!(
        env.backend.log().count(&passed),
        1,
        "{:?}",
        env.backend.log().lines()
    );
    env.pass().await;
    assert_eq!(
        env.backend.log().count(&passed),
        1,
        "not again while unchanged"
    );
    let mut r = good_rule();
    r.source_ranges = vec!["198.51.100.9/32".into()];
    env.cloud.put_firewall_rule(r);
    env.pass().await;
    let failed = "remote: firewall check FAILED (mode static, reason rule_sources): firewall rule shed-dev-ssh admits the wrong sources: expected source ranges [203.0.113.7/32], found source ranges [198.51.100.9/32]. Creates and starts are refused until it passes; stop, delete, list and exec are not affected";
    assert_eq!(
        env.backend.log().count(failed),
        1,
        "{:?}",
        env.backend.log().lines()
    );
    for _ in 0..9 {
        env.advance(60).await;
        env.pass().await;
    }
    assert_eq!(env.backend.log().count(failed), 1, "nine minutes: once");
    env.advance(61).await;
    env.pass().await;
    assert_eq!(env.backend.log().count(failed), 2, "ten minutes: again");
    env.cloud.put_firewall_rule(good_rule());
    env.pass().await;
    assert_eq!(env.backend.log().count(&passed), 2);
}

#[tokio::test]
async fn static_mode_never_changes_the_rule_and_any_mode_does_not_compare_sources() {
    let env = Env::new().await;
    let mut r = good_rule();
    r.source_ranges = vec!["198.51.100.9/32".into()];
    env.cloud.put_firewall_rule(r.clone());
    for _ in 0..3 {
        env.advance(400).await;
        env.pass().await;
    }
    assert_eq!(
        env.cloud.firewall_rule(RULE).unwrap(),
        r,
        "static: never changed"
    );

    let any = Env::build(|c| {
        c.firewall.mode = FirewallMode::Any;
        c.firewall.acknowledge_any = true;
        c.firewall.source_ranges.clear();
    })
    .await;
    let mut r = good_rule();
    r.source_ranges = vec!["0.0.0.0/0".into()];
    any.cloud.put_firewall_rule(r.clone());
    assert_eq!(any.backend.firewall_check().await.reason, None);
    r.allowed.push(FirewallPorts::new("tcp", ["80"]));
    any.cloud.put_firewall_rule(r.clone());
    assert_eq!(
        any.backend.firewall_check().await.reason,
        Some(FwReason::RuleAllow),
        "the rest of the check still runs"
    );
    assert_eq!(any.cloud.firewall_rule(RULE).unwrap(), r);
}

const E1: &str = "https://echo-one.example/";
const E2: &str = "https://echo-two.example/";
const E3: &str = "https://echo-three.example/";

async fn auto_env() -> Env {
    Env::build(|c| {
        c.firewall.mode = FirewallMode::Auto;
        c.firewall.source_ranges.clear();
        c.firewall.echo_urls = vec![E1.into(), E2.into(), E3.into()];
    })
    .await
}

#[tokio::test]
async fn auto_mode_patches_only_the_sources_to_the_agreed_address_reads_back_and_logs() {
    let env = auto_env().await;
    // Never agreed since the server started: address_unknown, and the rule is left alone.
    assert_eq!(reason_of(&env).await, Some(FwReason::AddressUnknown));
    let o = env.backend.firewall_last().unwrap();
    assert!(
        o.message.contains("since the server started"),
        "{}",
        o.message
    );
    assert_eq!(env.cloud.firewall_rule(RULE).unwrap(), good_rule());
    // One service alone never moves the rule.
    env.echo.say(E1, Ok("198.51.100.20"));
    env.echo.say(E2, Err("timeout"));
    env.echo.say(E3, Ok("198.51.100.21"));
    assert_eq!(reason_of(&env).await, Some(FwReason::AddressUnknown));
    // Two agree: the rule's sources become that /32, and nothing else of it changes.
    env.echo.say(E3, Ok("198.51.100.20"));
    let o = env.backend.firewall_check().await;
    assert!(o.passed, "{o:?}");
    let mut want = good_rule();
    want.source_ranges = vec!["198.51.100.20/32".into()];
    assert_eq!(env.cloud.firewall_rule(RULE).unwrap(), want);
    assert!(env.log_has(
        "remote: firewall rule shed-dev-ssh patched: source ranges [203.0.113.7/32] -> [198.51.100.20/32] (read back: [198.51.100.20/32])"
    ));
    // Sources changed again a minute later are not repaired at that check.
    env.advance(60).await;
    env.cloud.put_firewall_rule(good_rule());
    let o = env.backend.firewall_check().await;
    assert_eq!(o.reason, Some(FwReason::RuleSources));
    assert!(
        o.message.contains("not repaired yet: the rule was last patched 1m0s ago and is patched at most once every 5m0s"),
        "{}",
        o.message
    );
    env.advance(241).await;
    assert!(
        env.backend.firewall_check().await.passed,
        "patched again after 5 minutes"
    );
}

#[tokio::test]
async fn auto_mode_never_patches_when_another_clause_fails_or_the_patch_is_refused() {
    let env = auto_env().await;
    env.echo.say(E1, Ok("198.51.100.20"));
    env.echo.say(E2, Ok("198.51.100.20"));
    let mut r = good_rule();
    r.allowed = vec![FirewallPorts::new("tcp", ["2222"])];
    env.cloud.put_firewall_rule(r.clone());
    let o = env.backend.firewall_check().await;
    assert_eq!(o.reason, Some(FwReason::RuleAllow));
    assert_eq!(env.cloud.firewall_rule(RULE).unwrap(), r, "left alone");
    env.cloud.put_firewall_rule(good_rule());
    env.wrapped
        .refuse_patch
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let o = env.backend.firewall_check().await;
    assert_eq!(o.reason, Some(FwReason::RuleSources));
    assert!(o.message.contains("the patch was refused"), "{}", o.message);
    assert_eq!(env.cloud.firewall_rule(RULE).unwrap(), good_rule());
}

#[tokio::test]
async fn auto_mode_believes_no_address_in_unnameable_space_and_forgets_after_15_minutes() {
    let env = auto_env().await;
    env.echo.say(E1, Ok("10.0.0.5"));
    env.echo.say(E2, Ok("10.0.0.5"));
    assert_eq!(reason_of(&env).await, Some(FwReason::AddressUnknown));
    env.echo.say(E1, Ok("198.51.100.20"));
    env.echo.say(E2, Ok("198.51.100.20"));
    assert!(env.backend.firewall_check().await.passed);
    // The services stop agreeing: the last agreed address holds for 15 minutes, then creates and
    // starts are refused with address_unknown and the rule is left alone.
    env.echo.say(E2, Err("503"));
    env.advance(14 * 60).await;
    assert!(env.backend.firewall_check().await.passed);
    env.advance(2 * 60).await;
    let o = env.backend.firewall_check().await;
    assert_eq!(o.reason, Some(FwReason::AddressUnknown));
    assert!(o.message.contains("for 15m0s"), "{}", o.message);
    assert!(
        o.message.contains(E2),
        "the message lists what each said: {}",
        o.message
    );
    let e = env.create("a").await.unwrap_err();
    assert_eq!(e.code, "FIREWALL_CHECK_FAILED");
    assert!(e.message.contains("address_unknown"), "{}", e.message);
}

#[tokio::test]
async fn auto_mode_logs_a_failing_result_once_while_only_the_services_answers_change() {
    let env = auto_env().await;
    let failed = "remote: firewall check FAILED (mode auto, reason address_unknown)";
    assert_eq!(
        env.backend.log().count(failed),
        1,
        "at start-up: {:#?}",
        env.backend.log().lines()
    );
    // The services keep disagreeing, each minute with other answers: the message lists them, the
    // result is the same.
    for i in 0..9u8 {
        env.echo.say(E1, Ok(&format!("198.51.100.{}", 30 + i)));
        env.echo.say(E2, Ok(&format!("198.51.100.{}", 60 + i)));
        env.echo
            .say(E3, Err(if i % 2 == 0 { "timeout" } else { "503" }));
        env.advance(60).await;
        env.pass().await;
    }
    assert_eq!(
        env.backend.log().count(failed),
        1,
        "nine minutes: once; {:#?}",
        env.backend.log().lines()
    );
    env.advance(61).await;
    env.pass().await;
    assert_eq!(env.backend.log().count(failed), 2, "ten minutes: again");
}

#[tokio::test]
async fn auto_mode_logs_a_failing_result_once_while_only_the_time_since_the_patch_changes() {
    let env = auto_env().await;
    env.echo.say(E1, Ok("198.51.100.20"));
    env.echo.say(E2, Ok("198.51.100.20"));
    assert!(env.backend.firewall_check().await.passed);
    // Edited by hand a minute after the patch: not repaired for four minutes, each check saying how
    // long ago the last patch was.
    env.advance(60).await;
    env.cloud.put_firewall_rule(good_rule());
    let failed = "remote: firewall check FAILED (mode auto, reason rule_sources)";
    for minute in 1..=4 {
        let o = env.backend.firewall_check().await;
        assert!(
            o.message
                .contains(&format!("the rule was last patched {minute}m0s ago")),
            "{}",
            o.message
        );
        env.advance(60).await;
    }
    assert_eq!(
        env.backend.log().count(failed),
        1,
        "{:#?}",
        env.backend.log().lines()
    );
    assert!(
        env.backend.firewall_check().await.passed,
        "patched again after 5 minutes"
    );
}

#[tokio::test]
async fn address_unknown_is_the_last_clause_and_holds_with_or_without_the_rule() {
    // address_unknown is the last clause: after stray_rule, default_network and unreadable.
    let env = auto_env().await;
    assert_eq!(reason_of(&env).await, Some(FwReason::AddressUnknown));
    let mut stray = FirewallRule::new("web", DEFAULT_NETWORK);
    stray.allowed = vec![FirewallPorts::new("tcp", ["8080"])];
    stray.source_ranges = vec!["0.0.0.0/0".into()];
    stray.target_tags = vec![TAG.into()];
    env.cloud.put_firewall_rule(stray);
    let o = env.backend.firewall_check().await;
    assert_eq!(o.reason, Some(FwReason::StrayRule));
    assert_eq!(
        o.failed,
        vec![FwReason::StrayRule, FwReason::AddressUnknown]
    );
    env.cloud.remove_firewall_rule("web");

    let mut n = Network::new(DEFAULT_NETWORK);
    n.auto_create_subnetworks = true;
    env.cloud.put_network(n);
    let o = env.backend.firewall_check().await;
    assert_eq!(
        o.failed,
        vec![FwReason::DefaultNetwork, FwReason::AddressUnknown]
    );
    env.cloud.put_network(Network::new(DEFAULT_NETWORK));

    env.cloud.inject(
        Operation::Network,
        FaultKind::Error(ErrorKind::PermissionDenied),
        1,
    );
    let o = env.backend.firewall_check().await;
    assert_eq!(
        o.failed,
        vec![FwReason::Unreadable, FwReason::AddressUnknown]
    );

    // Without the rule, the server still does not know its address.
    env.cloud.remove_firewall_rule(RULE);
    let o = env.backend.firewall_check().await;
    assert_eq!(
        o.failed,
        vec![FwReason::RuleMissing, FwReason::AddressUnknown]
    );
    env.cloud.put_firewall_rule(good_rule());
    assert_eq!(
        env.backend.firewall_check().await.failed,
        vec![FwReason::AddressUnknown]
    );
}

#[tokio::test]
async fn auto_mode_says_the_services_did_not_agree_in_this_check_and_leaves_the_rule() {
    let env = auto_env().await;
    env.echo.say(E1, Ok("198.51.100.20"));
    env.echo.say(E2, Ok("198.51.100.20"));
    assert!(env.backend.firewall_check().await.passed);
    // Six minutes later (past the patch spacing, within the 15 minutes the agreed address is
    // trusted) the rule is edited by hand and the services disagree in this check.
    env.advance(6 * 60).await;
    env.cloud.put_firewall_rule(good_rule());
    env.echo.say(E2, Ok("198.51.100.77"));
    env.echo.say(E3, Err("timeout"));
    let o = env.backend.firewall_check().await;
    assert_eq!(o.reason, Some(FwReason::RuleSources));
    assert!(
        o.message
            .contains("not repaired: the echo services did not agree in this check ("),
        "{}",
        o.message
    );
    assert!(
        o.message.contains(&format!("{E2} said 198.51.100.77")),
        "it lists what each said: {}",
        o.message
    );
    assert_eq!(
        env.cloud.firewall_rule(RULE).unwrap(),
        good_rule(),
        "left alone"
    );
}

#[tokio::test]
async fn a_network_named_default_is_the_default_network() {
    // Custom mode, but named default: still the project's default network.
    let env = Env::on_network("default").await;
    let o = env.backend.firewall_check().await;
    assert_eq!(o.reason, Some(FwReason::DefaultNetwork), "{o:?}");
    assert_eq!(o.failed, vec![FwReason::DefaultNetwork]);
    assert!(o.message.contains("network default"), "{}", o.message);
    let e = env.create("a").await.unwrap_err();
    assert_eq!(e.code, "FIREWALL_CHECK_FAILED");
    assert!(e.message.contains("default_network"), "{}", e.message);
    // The same bench on a network of another name passes.
    let other = Env::on_network("shed-net").await;
    assert!(other.backend.firewall_check().await.passed);
}

#[tokio::test]
async fn a_start_is_judged_by_the_last_result_for_60_s_and_asks_again_after() {
    let env = Env::new().await;
    env.running("a").await;
    env.backend.stop_shed(&env.admin(), "a").await.unwrap();
    env.until_status("a", Status::Stopped).await;
    env.pass().await;
    // The rule goes; within 60 s of the last (passing) result the start is accepted, and the check
    // just before the start call fails: stopped (firewall), nothing sent.
    env.cloud.remove_firewall_rule(RULE);
    env.advance(30).await;
    let (v, _) = env.backend.start_shed(&env.admin(), "a").await.unwrap();
    assert_eq!(v.status, Status::Starting);
    env.until("stopped (firewall)", |e| {
        e.view("a").unwrap().status_reason == "firewall"
    })
    .await;
    assert_eq!(env.view("a").unwrap().status, Status::Stopped);
    assert_eq!(env.vm("a").unwrap().status, orca::Status::Stopped);
    // The rule is back, but the last result (failing) is 30 s old: the start is refused by it.
    env.cloud.put_firewall_rule(good_rule());
    env.advance(30).await;
    let e = env.backend.start_shed(&env.admin(), "a").await.unwrap_err();
    assert_eq!((e.status, e.code.as_str()), (503, "FIREWALL_CHECK_FAILED"));
    // Over 60 s old: the start runs the check again, which passes.
    env.advance(31).await;
    let (v, _) = env.backend.start_shed(&env.admin(), "a").await.unwrap();
    assert_eq!(v.status, Status::Starting);
    env.until_status("a", Status::Running).await;
}
