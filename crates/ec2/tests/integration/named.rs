//! `delete_named`: what creates of a name made, found by what does not lag (the create's
//! ClientToken) and by the tag-filtered listing, removed whole; nothing of another owner or pool
//! touched; its requests counted.

use crate::common;

use std::time::Duration;

use aws_sdk_ec2::types::{InstanceStateName, InstanceType, Tag, TagSpecification};
use common::{ZONE, env};
use orca_ec2::client_token;
use orca_machines::{ErrorKind, Provider};

/// The state moto itself holds for `id` (behind the proxy, past its lags).
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

/// orca's tags of `owner`'s machine `name` in `pool`.
fn orca_tags(owner: &str, pool: &str, name: &str) -> TagSpecification {
    let tag = |k: &str, v: &str| Tag::builder().key(k).value(v).build();
    TagSpecification::builder()
        .resource_type(aws_sdk_ec2::types::ResourceType::Instance)
        .tags(tag("orca", "pool"))
        .tags(tag("orca-pool", pool))
        .tags(tag("orca-owner", owner))
        .tags(tag("Name", name))
        .build()
}

/// An instance made behind the driver's back (RunInstances through the proxy) with `tags` and,
/// when given, a ClientToken: its id.
async fn run_raw(e: &common::Env, tags: TagSpecification, token: Option<String>) -> String {
    let out = common::sdk(&e.proxy.url)
        .await
        .run_instances()
        .image_id("ami-0b1e2a3d4c5f60a02")
        .instance_type(InstanceType::T3Micro)
        .min_count(1)
        .max_count(1)
        .subnet_id(&e.seed.subnets[ZONE])
        .tag_specifications(tags)
        .set_client_token(token)
        .send()
        .await
        .unwrap();
    out.instances()[0].instance_id().unwrap().to_string()
}

/// The ids of `owner`'s live instances of `name` in `pool`, as moto itself shows them.
async fn live_in_moto(e: &common::Env, owner: &str, name: &str) -> Vec<String> {
    let truth = common::provider(common::builder(&e.seed, &e.seed.moto), owner)
        .await
        .unwrap();
    let mut ids: Vec<String> = truth
        .machines(&e.pool)
        .await
        .unwrap()
        .into_iter()
        .filter(|m| m.name == name && m.status != orca_machines::Status::Deleting)
        .map(|m| m.id)
        .collect();
    ids.sort();
    ids
}

/// A create that EC2 answered but whose instance tag filters did not show within the window fails
/// (and says it may have made something); `delete_named` of its name then finds the instance by
/// its ClientToken, which does not lag, and removes it.
#[tokio::test]
async fn delete_named_removes_what_tag_filters_do_not_show_yet() {
    let Some(e) = env("delete_named_removes_what_tag_filters_do_not_show_yet").await else {
        return;
    };
    // Far longer than the test runs, even on a loaded machine: the reads below must meet the lag.
    e.proxy.set_tag_filter_lag(Duration::from_secs(60));
    let quick = common::provider(
        e.builder().visibility_window(Duration::from_millis(300)),
        "owner-1",
    )
    .await
    .unwrap();
    let failed = quick.create(&e.spec("lag-1")).await.unwrap_err();
    assert!(!failed.made_nothing(), "{failed}");
    let made = live_in_moto(&e, "owner-1", "lag-1").await;
    assert_eq!(
        made.len(),
        1,
        "the failed create made one instance: {made:?}"
    );
    // The tag filters do not show it yet: a read by name alone finds nothing.
    let by_name = quick.machine_named(&e.pool, "lag-1").await.unwrap();
    assert!(by_name.is_none(), "{by_name:?}");
    // What the contract tells the caller to do after such a failure, still within the lag.
    assert!(
        quick.delete_named(&e.pool, "lag-1").await.unwrap(),
        "delete_named answered that nothing was there while {} stands",
        made[0]
    );
    assert_eq!(
        state_in_moto(&e.seed.moto, &made[0]).await,
        InstanceStateName::Terminated
    );
    // Nothing of it is left: a second call finds nothing.
    assert!(!quick.delete_named(&e.pool, "lag-1").await.unwrap());
}

/// A name made, deleted and made again: the new instance is under the next generation of the
/// ClientToken (derived from the terminated one's id). `delete_named` follows the generations as a
/// create does, and finds it before tag filters show it.
#[tokio::test]
async fn delete_named_follows_the_token_to_a_later_generation() {
    let Some(e) = env("delete_named_follows_the_token_to_a_later_generation").await else {
        return;
    };
    let p = e.provider("owner-1").await;
    let first = common::made(p.create(&e.spec("gen-1")).await.unwrap());
    assert!(p.delete(&first.id).await.unwrap());
    // Far longer than the test runs, even on a loaded machine: the reads below must meet the lag.
    e.proxy.set_tag_filter_lag(Duration::from_secs(60));
    let quick = common::provider(
        e.builder().visibility_window(Duration::from_millis(300)),
        "owner-1",
    )
    .await
    .unwrap();
    let failed = quick.create(&e.spec("gen-1")).await.unwrap_err();
    assert!(!failed.made_nothing(), "{failed}");
    let made = live_in_moto(&e, "owner-1", "gen-1").await;
    assert_eq!(made.len(), 1, "{made:?}");
    let before = e.proxy.requests();
    assert!(quick.delete_named(&e.pool, "gen-1").await.unwrap());
    assert_eq!(
        state_in_moto(&e.seed.moto, &made[0]).await,
        InstanceStateName::Terminated
    );
    // The first generation's token (its instance terminated), the second's, the tag listing,
    // TerminateInstances and the read that sees it terminated.
    let sent = &e.proxy.log()[before as usize..];
    let actions: Vec<&str> = sent.iter().map(|s| s.action.as_str()).collect();
    assert_eq!(actions.len(), 5, "{actions:?}");
    let tokens: Vec<String> = sent
        .iter()
        .flat_map(|s| s.params.iter())
        .filter(|(k, _)| k.contains(".Value."))
        .map(|(_, v)| v.clone())
        .filter(|v| v.starts_with("orca-"))
        .collect();
    assert!(
        tokens.contains(&client_token("owner-1", &e.pool, "gen-1", Some(&first.id))),
        "the second generation's token was asked for: {tokens:?}"
    );
}

/// Every instance of this owner's pool with that name goes (not only the first made), and nothing
/// of another owner, another pool or another name, even one that carries this name's ClientToken.
#[tokio::test]
async fn delete_named_removes_every_instance_of_the_name_and_nothing_else() {
    let Some(e) = env("delete_named_removes_every_instance_of_the_name_and_nothing_else").await
    else {
        return;
    };
    let p = e.provider("owner-1").await;
    let ours = [
        run_raw(&e, orca_tags("owner-1", &e.pool, "twin-1"), None).await,
        run_raw(&e, orca_tags("owner-1", &e.pool, "twin-1"), None).await,
    ];
    let other_pool = format!("{}-b", e.pool);
    // Another owner's instance under this owner's token for the name (a token is the caller's to
    // give): found by the token, refused by its tags.
    let token = client_token("owner-1", &e.pool, "twin-1", None);
    let theirs = [
        run_raw(&e, orca_tags("owner-2", &e.pool, "twin-1"), Some(token)).await,
        run_raw(&e, orca_tags("owner-1", &other_pool, "twin-1"), None).await,
        run_raw(&e, orca_tags("owner-1", &e.pool, "twin-2"), None).await,
    ];
    assert!(p.delete_named(&e.pool, "twin-1").await.unwrap());
    for id in &ours {
        assert_eq!(
            state_in_moto(&e.seed.moto, id).await,
            InstanceStateName::Terminated,
            "{id} of the name"
        );
    }
    for id in &theirs {
        assert_eq!(
            state_in_moto(&e.seed.moto, id).await,
            InstanceStateName::Running,
            "{id} is not this owner's of that pool and name"
        );
    }
    assert!(!p.delete_named(&e.pool, "twin-1").await.unwrap());
    let ec2 = common::sdk(&e.seed.moto).await;
    ec2.terminate_instances()
        .set_instance_ids(Some(theirs.to_vec()))
        .send()
        .await
        .unwrap();
}

/// The requests of a `delete_named`: the ClientToken's lookup and the tag listing when nothing is
/// there (2), then TerminateInstances and the read that sees it terminated for one instance (4).
/// Pool and name are checked before any call.
#[tokio::test]
async fn delete_named_requests_are_counted() {
    let Some(e) = env("delete_named_requests_are_counted").await else {
        return;
    };
    let p = e.provider("owner-1").await;
    let before = e.proxy.requests();
    assert!(!p.delete_named(&e.pool, "count-1").await.unwrap());
    let sent = &e.proxy.log()[before as usize..];
    let actions: Vec<&str> = sent.iter().map(|s| s.action.as_str()).collect();
    assert_eq!(actions, ["DescribeInstances"; 2], "nothing there");
    assert!(
        sent.iter()
            .any(|s| s.params.values().any(|v| v == "client-token")),
        "by the ClientToken: {sent:?}"
    );
    assert!(
        sent.iter()
            .any(|s| s.params.values().any(|v| v == "tag:Name")),
        "by the tags: {sent:?}"
    );
    let m = common::made(p.create(&e.spec("count-1")).await.unwrap());
    let before = e.proxy.requests();
    assert!(p.delete_named(&e.pool, "count-1").await.unwrap());
    let actions: Vec<String> = e.proxy.log()[before as usize..]
        .iter()
        .map(|s| s.action.clone())
        .collect();
    assert_eq!(
        actions,
        [
            "DescribeInstances",
            "DescribeInstances",
            "TerminateInstances",
            "DescribeInstances"
        ],
        "one standing"
    );
    assert_eq!(
        state_in_moto(&e.seed.moto, &m.id).await,
        InstanceStateName::Terminated
    );
    let before = e.proxy.requests();
    for (pool, name, field) in [
        ("a,b", "count-1", "pool"),
        (e.pool.as_str(), "Not-A-Name", "name"),
    ] {
        let err = p.delete_named(pool, name).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidSpec, "{err}");
        assert!(err.to_string().contains(field), "{err}");
    }
    assert_eq!(e.proxy.requests(), before, "no request for invalid input");
}

/// A create stopped (dropped, as a caller's timeout does) once EC2 made its instance, which reads
/// do not show yet: `delete_named` of its name reads again within the visibility window and
/// removes it, where one read would have answered "nothing there".
#[tokio::test]
async fn delete_named_removes_the_instance_of_a_create_stopped_before_it_answered() {
    let Some(e) =
        env("delete_named_removes_the_instance_of_a_create_stopped_before_it_answered").await
    else {
        return;
    };
    // Within the provider's visibility window (20 s).
    e.proxy.set_visibility_delay(Duration::from_secs(3));
    let p = e.provider("owner-1").await;
    let spec = e.spec("stopped-1");
    let made = async {
        loop {
            let made = live_in_moto(&e, "owner-1", "stopped-1").await;
            if !made.is_empty() {
                return made;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let made = tokio::select! {
        got = p.create(&spec) => panic!("the create answered before it was stopped: {got:?}"),
        made = made => made,
    };
    assert_eq!(made.len(), 1, "{made:?}");
    assert!(
        p.delete_named(&e.pool, "stopped-1").await.unwrap(),
        "delete_named answered that nothing was there while {} stands",
        made[0]
    );
    assert_eq!(
        state_in_moto(&e.seed.moto, &made[0]).await,
        InstanceStateName::Terminated
    );
    assert!(!p.delete_named(&e.pool, "stopped-1").await.unwrap());
}
