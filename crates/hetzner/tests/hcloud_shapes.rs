//! The fake answers in the shapes the `hcloud` crate's own generated API reads: every endpoint the
//! driver uses, called through `hcloud::apis` with `base_path_mapping` pointed at the fake.

use hcloud::apis::configuration::Configuration;
use hcloud::apis::{
    actions_api, firewalls_api, images_api, locations_api, server_types_api, servers_api,
    ssh_keys_api,
};
use orca_fakes::hetzner::FakeHetzner;

fn configuration(fake: &FakeHetzner, token: &str) -> Configuration {
    let mut cfg = Configuration::new();
    cfg.base_path_mapping
        .insert("https://api.hetzner.cloud/v1".into(), fake.url());
    cfg.bearer_access_token = Some(token.to_string());
    cfg
}

#[tokio::test]
async fn every_answer_reads_as_hcloud_models() {
    let fake = FakeHetzner::start().await.unwrap();
    let cfg = configuration(&fake, &fake.token());

    let mut req = hcloud::models::CreateServerRequest::new(
        "ubuntu-24.04".into(),
        "shape-1".into(),
        "cax11".into(),
    );
    req.location = Some("hel1".into());
    req.ssh_keys = Some(vec!["orca-test".into()]);
    req.firewalls = Some(vec![hcloud::models::CreateServerRequestFirewalls::new(38)]);
    req.labels = Some([("orca".to_string(), "pool".to_string())].into());
    let made = servers_api::create_server(
        &cfg,
        servers_api::CreateServerParams {
            create_server_request: req,
        },
    )
    .await
    .unwrap();
    assert_eq!(made.server.name, "shape-1");
    assert_eq!(
        made.server.image.as_ref().unwrap().architecture,
        hcloud::models::Architecture::Arm
    );
    let id = made.server.id;

    let running = servers_api::list_actions_for_server(
        &cfg,
        servers_api::ListActionsForServerParams {
            id,
            status: Some(vec!["running".into()]),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    // The create action and its next action, the start.
    assert_eq!(running.actions.len(), 2);
    assert_eq!(made.next_actions.len(), 1);
    assert_eq!(made.next_actions[0].command, "start_server");
    let action = actions_api::get_action(&cfg, actions_api::GetActionParams { id: made.action.id })
        .await
        .unwrap();
    assert_eq!(action.action.command, "create_server");

    let listed = servers_api::list_servers(
        &cfg,
        servers_api::ListServersParams {
            label_selector: Some("orca=pool".into()),
            per_page: Some(1),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(listed.servers.len(), 1);
    assert_eq!(listed.meta.pagination.total_entries, Some(1));
    let got = servers_api::get_server(&cfg, servers_api::GetServerParams { id })
        .await
        .unwrap();
    assert!(got.server.unwrap().public_net.ipv4.is_some());

    let types = server_types_api::list_server_types(&cfg, Default::default())
        .await
        .unwrap();
    assert!(types.server_types.iter().any(|t| t.name == "cax11"
        && t.architecture == hcloud::models::Architecture::Arm
        && t.prices.iter().any(|p| p.location == "hel1")));
    let images = images_api::list_images(
        &cfg,
        images_api::ListImagesParams {
            name: Some("ubuntu-24.04".into()),
            architecture: Some("arm".into()),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(images.images.len(), 1);
    let locations = locations_api::list_locations(&cfg, Default::default())
        .await
        .unwrap();
    assert!(locations.locations.iter().any(|l| l.name == "hel1"));
    let keys = ssh_keys_api::list_ssh_keys(&cfg, Default::default())
        .await
        .unwrap();
    assert_eq!(keys.ssh_keys[0].name, "orca-test");
    let fws = firewalls_api::list_firewalls(&cfg, Default::default())
        .await
        .unwrap();
    assert_eq!(
        fws.firewalls[0].applied_to.len(),
        1,
        "applied to the server"
    );

    let gone = servers_api::delete_server(&cfg, servers_api::DeleteServerParams { id })
        .await
        .unwrap();
    assert_eq!(gone.action.unwrap().command, "delete_server");

    // Errors: the typed error body, with the real code.
    let missing = servers_api::get_server(&cfg, servers_api::GetServerParams { id: 42 })
        .await
        .unwrap_err();
    let hcloud::apis::Error::ResponseError(r) = missing else {
        panic!("{missing:?}")
    };
    assert_eq!(r.status.as_u16(), 404);
    match r.entity {
        Some(servers_api::GetServerError::DefaultResponse(e)) => {
            assert_eq!(e.error.code, "not_found")
        }
        other => panic!("{other:?}"),
    }
    let denied = locations_api::list_locations(&configuration(&fake, "wrong"), Default::default())
        .await
        .unwrap_err();
    let hcloud::apis::Error::ResponseError(r) = denied else {
        panic!("{denied:?}")
    };
    assert_eq!(r.status.as_u16(), 401);
    assert!(r.content.contains("\"unauthorized\""), "{}", r.content);
}
