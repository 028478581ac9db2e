//! The fake's own tests.
use super::*;

#[test]
fn selectors() {
    let l = [("orca", "pool"), ("orca-pool", "lab"), ("orca-owner", "a")];
    let ok = |s: &str| selector_matches(s, &l).unwrap();
    assert!(ok("orca=pool,orca-pool=lab,orca-owner=a"));
    assert!(ok("orca==pool"));
    assert!(!ok("orca=pool,orca-pool=lab,orca-owner=b"));
    assert!(!ok("orca=pool,!orca-owner"));
    assert!(ok("orca-owner"));
    assert!(ok("orca-owner!=b"));
    assert!(!ok("orca-owner!=a"));
    assert!(ok("orca-owner in (a,b),orca=pool"));
    assert!(!ok("orca-owner notin (a, b)"));
    assert!(ok("nothere notin (a)"));
    assert!(!ok("nothere in (a)"));
    assert!(selector_matches("a=b c", &l).is_err());
    assert!(selector_matches("a in (b", &l).is_err());
    assert!(selector_matches("", &l).is_err());
}

#[tokio::test]
async fn pages_auth_and_rate_limit() {
    let fake = FakeHetzner::start_with(Options {
        rate_limit: 5,
        refill_per_second: 0.0,
        ..Options::default()
    })
    .await
    .unwrap();
    for i in 0..3 {
        fake.insert_server(&format!("s{i}"), "cx23", "fsn1", &[("orca", "pool")]);
    }
    let http = reqwest::Client::new();
    let r = http
        .get(format!("{}/servers?per_page=2&page=2", fake.url()))
        .bearer_auth(fake.token())
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["ratelimit-limit"], "5");
    assert_eq!(r.headers()["ratelimit-remaining"], "4");
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["servers"].as_array().unwrap().len(), 1);
    let p = &v["meta"]["pagination"];
    assert_eq!(
        (
            p["page"].as_i64(),
            p["previous_page"].as_i64(),
            p["next_page"].as_i64()
        ),
        (Some(2), Some(1), None)
    );
    assert_eq!(
        (p["last_page"].as_i64(), p["total_entries"].as_i64()),
        (Some(2), Some(3))
    );

    let r = http
        .get(format!("{}/servers", fake.url()))
        .bearer_auth("wrong")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "unauthorized");

    for _ in 0..4 {
        let r = http
            .get(format!("{}/locations", fake.url()))
            .bearer_auth(fake.token())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    let r = http
        .get(format!("{}/locations", fake.url()))
        .bearer_auth(fake.token())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["ratelimit-remaining"], "0");
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "rate_limit_exceeded");
    assert_eq!(fake.rate_limited(), 1);
}

#[tokio::test(start_paused = true)]
async fn create_action_lifecycle_and_errors() {
    let fake = FakeHetzner::start_with(Options {
        action_time: Duration::from_secs(10),
        ..Options::default()
    })
    .await
    .unwrap();
    let http = reqwest::Client::new();
    let post = |body: Value| {
        http.post(format!("{}/servers", fake.url()))
            .bearer_auth(fake.token())
            .json(&body)
            .send()
    };
    let r = post(json!({"name": "a1", "server_type": "cax11", "image": "ubuntu-24.04", "location": "hel1",
                        "labels": {"orca": "pool"}, "ssh_keys": ["orca-test"], "firewalls": [{"firewall": 38}]}))
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["server"]["image"]["architecture"], "arm");
    assert_eq!(v["server"]["status"], "initializing");
    assert_eq!(v["action"]["status"], "running");
    let aid = v["action"]["id"].as_i64().unwrap();
    let get_action = || {
        http.get(format!("{}/actions/{aid}", fake.url()))
            .bearer_auth(fake.token())
            .send()
    };
    tokio::time::advance(Duration::from_secs(9)).await;
    let a: Value = get_action().await.unwrap().json().await.unwrap();
    assert_eq!(
        a["action"]["status"], "running",
        "for its time, however often it is read"
    );
    // The start follows as a next action: it starts when the create ends.
    assert_eq!(v["next_actions"][0]["command"], "start_server");
    let sid = v["next_actions"][0]["id"].as_i64().unwrap();
    let get_start = || {
        http.get(format!("{}/actions/{sid}", fake.url()))
            .bearer_auth(fake.token())
            .send()
    };
    let s: Value = get_start().await.unwrap().json().await.unwrap();
    assert_eq!(s["action"]["status"], "running", "not before the create");
    tokio::time::advance(Duration::from_secs(1)).await;
    let a: Value = get_action().await.unwrap().json().await.unwrap();
    assert_eq!(a["action"]["status"], "success");
    assert_eq!(fake.servers()[0]["status"], "starting");
    tokio::time::advance(Duration::from_secs(9)).await;
    let s: Value = get_start().await.unwrap().json().await.unwrap();
    assert_eq!(
        s["action"]["status"], "running",
        "its own time after the create"
    );
    tokio::time::advance(Duration::from_secs(1)).await;
    let s: Value = get_start().await.unwrap().json().await.unwrap();
    assert_eq!(s["action"]["status"], "success");
    assert_eq!(fake.servers()[0]["status"], "running");

    let r = post(json!({"name": "a1", "server_type": "cx23", "image": "ubuntu-24.04"}))
        .await
        .unwrap();
    assert_eq!(r.status(), 409);
    assert_eq!(
        r.json::<Value>().await.unwrap()["error"]["code"],
        "uniqueness_error"
    );
    fake.set_no_stock("cx23", "nbg1", true);
    let r = post(
        json!({"name": "a2", "server_type": "cx23", "image": "ubuntu-24.04", "location": "nbg1"}),
    )
    .await
    .unwrap();
    assert_eq!(
        r.json::<Value>().await.unwrap()["error"]["code"],
        "resource_unavailable"
    );
    let r = post(
        json!({"name": "a2", "server_type": "cx23", "image": "161547270", "location": "fsn1"}),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 400, "an arm image on an x86 type is refused");
    assert_eq!(fake.servers().len(), 1);
}

async fn call(
    fake: &FakeHetzner,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut req = reqwest::Client::new()
        .request(method, format!("{}{path}", fake.url()))
        .bearer_auth(fake.token());
    if let Some(b) = body {
        req = req.json(&b);
    }
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn servers_show_their_creation_time_reverse_dns_and_private_address_and_no_datacenter() {
    let fake = FakeHetzner::start().await.unwrap();
    let (status, v) = call(
        &fake,
        reqwest::Method::POST,
        "/servers",
        Some(
            json!({"name": "f1", "server_type": "cx23", "image": "ubuntu-24.04",
                    "location": "fsn1", "networks": [77]}),
        ),
    )
    .await;
    assert_eq!(status, 201, "{v}");
    let s = &v["server"];
    assert!(
        s.get("datacenter").is_none(),
        "removed from servers in 2026"
    );
    assert_eq!(s["location"]["name"], "fsn1");
    let created = s["created"].as_str().unwrap();
    assert_eq!(
        created.len(),
        "2026-01-01T00:00:00+00:00".len(),
        "{created}"
    );
    assert_ne!(created, "2026-01-01T00:00:00+00:00", "the time it was made");
    let ip = s["public_net"]["ipv4"]["ip"].as_str().unwrap();
    let rev: Vec<&str> = ip.rsplit('.').collect();
    assert_eq!(
        s["public_net"]["ipv4"]["dns_ptr"],
        format!("static.{}.clients.your-server.de", rev.join("."))
    );
    assert_eq!(s["private_net"][0]["network"], 77);
    assert_eq!(s["private_net"][0]["ip"], "10.0.0.2");
    let (status, v) = call(
        &fake,
        reqwest::Method::POST,
        "/servers",
        Some(
            json!({"name": "f2", "server_type": "cx23", "image": "ubuntu-24.04", "networks": [5]}),
        ),
    )
    .await;
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (400, Some("invalid_input"))
    );
}

#[tokio::test]
async fn an_update_replaces_every_label() {
    let fake = FakeHetzner::start().await.unwrap();
    let id = fake.insert_server("u1", "cx23", "fsn1", &[("a", "1"), ("b", "2")]);
    let (status, v) = call(
        &fake,
        reqwest::Method::PUT,
        &format!("/servers/{id}"),
        Some(json!({"labels": {"b": "3"}})),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["server"]["labels"], json!({"b": "3"}), "not merged");
    let (status, v) = call(
        &fake,
        reqwest::Method::PUT,
        &format!("/servers/{id}"),
        Some(json!({"labels": {"Bad Key": "x"}})),
    )
    .await;
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (400, Some("invalid_input"))
    );
    let (status, _) = call(
        &fake,
        reqwest::Method::PUT,
        "/servers/42",
        Some(json!({"labels": {}})),
    )
    .await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn server_types_carry_per_location_deprecations_and_availability() {
    let fake = FakeHetzner::start().await.unwrap();
    fake.set_no_stock("cx23", "nbg1", true);
    let (_, v) = call(&fake, reqwest::Method::GET, "/server_types", None).await;
    let types = v["server_types"].as_array().unwrap();
    for t in types {
        assert!(t.get("deprecated").is_none(), "the flag is phased out: {t}");
    }
    let by_name = |n: &str| types.iter().find(|t| t["name"] == n).unwrap().clone();
    let old = by_name("cx22");
    assert!(old["locations"][0]["deprecation"]["unavailable_after"].is_string());
    let new = by_name("cx23");
    let loc = |t: &Value, l: &str| {
        t["locations"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["name"] == l)
            .unwrap()
            .clone()
    };
    assert_eq!(loc(&new, "nbg1")["available"], false);
    assert_eq!(loc(&new, "fsn1")["available"], true);
    assert!(loc(&new, "fsn1")["deprecation"].is_null());
    let (status, v) = call(
        &fake,
        reqwest::Method::POST,
        "/servers",
        Some(json!({"name": "d1", "server_type": "cx22", "image": "ubuntu-24.04", "location": "fsn1"})),
    )
    .await;
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (422, Some("invalid_server_type"))
    );
    let (_, v) = call(
        &fake,
        reqwest::Method::POST,
        "/servers",
        Some(json!({"name": "d2", "server_type": "cx23", "image": "ubuntu-24.04", "location": "nbg1"})),
    )
    .await;
    assert_eq!(v["error"]["code"], "resource_unavailable");
    assert_eq!(v["error"]["message"], "error during placement");
}

#[tokio::test(start_paused = true)]
async fn the_visibility_delay_runs_on_tokios_clock() {
    let fake = FakeHetzner::start().await.unwrap();
    fake.set_visibility_delay(std::time::Duration::from_secs(3600));
    let body = json!({"name": "v1", "server_type": "cx23", "image": "ubuntu-24.04"});
    let (status, v) = call(&fake, reqwest::Method::POST, "/servers", Some(body)).await;
    assert_eq!(status, 201);
    let path = format!("/servers/{}", v["server"]["id"].as_i64().unwrap());
    assert_eq!(call(&fake, reqwest::Method::GET, &path, None).await.0, 404);
    // An hour on the paused clock, as the fake's actions count time.
    tokio::time::advance(std::time::Duration::from_secs(3601)).await;
    assert_eq!(call(&fake, reqwest::Method::GET, &path, None).await.0, 200);
}

#[tokio::test]
async fn new_servers_stay_invisible_for_the_delay_but_their_names_are_taken() {
    let fake = FakeHetzner::start().await.unwrap();
    fake.set_visibility_delay(std::time::Duration::from_millis(400));
    let made = |name: &str| json!({"name": name, "server_type": "cx23", "image": "ubuntu-24.04", "labels": {"orca": "pool"}});
    let (status, v) = call(&fake, reqwest::Method::POST, "/servers", Some(made("v1"))).await;
    assert_eq!(status, 201);
    let id = v["server"]["id"].as_i64().unwrap();
    let path = format!("/servers/{id}");
    assert_eq!(call(&fake, reqwest::Method::GET, &path, None).await.0, 404);
    let (_, list) = call(
        &fake,
        reqwest::Method::GET,
        "/servers?label_selector=orca",
        None,
    )
    .await;
    assert_eq!(list["servers"].as_array().unwrap().len(), 0);
    assert_eq!(
        call(
            &fake,
            reqwest::Method::PUT,
            &path,
            Some(json!({"labels": {}}))
        )
        .await
        .0,
        404
    );
    assert_eq!(
        call(&fake, reqwest::Method::DELETE, &path, None).await.0,
        404
    );
    assert_eq!(
        call(
            &fake,
            reqwest::Method::POST,
            &format!("{path}/actions/poweroff"),
            None
        )
        .await
        .0,
        404
    );
    let (status, v) = call(&fake, reqwest::Method::POST, "/servers", Some(made("v1"))).await;
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (409, Some("uniqueness_error"))
    );
    tokio::time::sleep(std::time::Duration::from_millis(450)).await;
    assert_eq!(call(&fake, reqwest::Method::GET, &path, None).await.0, 200);
    fake.set_visibility_delay(std::time::Duration::ZERO);
    let (_, v) = call(&fake, reqwest::Method::POST, "/servers", Some(made("v2"))).await;
    let id = v["server"]["id"].as_i64().unwrap();
    assert_eq!(
        call(&fake, reqwest::Method::GET, &format!("/servers/{id}"), None)
            .await
            .0,
        200,
        "off again for new servers"
    );
}

#[tokio::test]
async fn a_create_action_can_fail_with_the_placement_code() {
    let fake = FakeHetzner::start_with(Options {
        action_time: Duration::ZERO,
        ..Options::default()
    })
    .await
    .unwrap();
    fake.fail_next_create_action_with("placement_error", "error during placement");
    let (_, v) = call(
        &fake,
        reqwest::Method::POST,
        "/servers",
        Some(json!({"name": "p1", "server_type": "cx23", "image": "ubuntu-24.04"})),
    )
    .await;
    let aid = v["action"]["id"].as_i64().unwrap();
    let (_, a) = call(
        &fake,
        reqwest::Method::GET,
        &format!("/actions/{aid}"),
        None,
    )
    .await;
    assert_eq!(a["action"]["status"], "error");
    assert_eq!(a["action"]["error"]["code"], "placement_error");
    assert!(a["action"]["finished"].is_string());
    let id = v["server"]["id"].as_i64().unwrap();
    assert!(fake.set_status(id, "hibernating"));
    assert_eq!(fake.servers()[0]["status"], "hibernating");
}

#[tokio::test]
async fn a_type_change_to_a_type_out_of_stock_is_refused_for_placement() {
    let fake = FakeHetzner::start_with(Options {
        action_time: Duration::ZERO,
        ..Options::default()
    })
    .await
    .unwrap();
    let id = fake.insert_server("ct1", "cx23", "fsn1", &[]);
    assert!(fake.set_status(id, "off"));
    fake.set_no_stock("cx33", "fsn1", true);
    let path = format!("/servers/{id}/actions/change_type");
    let body = json!({"server_type": "cx33", "upgrade_disk": false});
    let (status, v) = call(&fake, reqwest::Method::POST, &path, Some(body.clone())).await;
    assert_eq!(status, 412, "{v}");
    assert_eq!(v["error"]["code"], "resource_unavailable");
    assert_eq!(fake.servers()[0]["server_type"]["name"], "cx23");
    // Elsewhere, or back in stock, the change is accepted.
    fake.set_no_stock("cx33", "fsn1", false);
    let (status, v) = call(&fake, reqwest::Method::POST, &path, Some(body)).await;
    assert_eq!(status, 201, "{v}");
}

#[tokio::test(start_paused = true)]
async fn a_server_is_locked_while_its_action_runs_and_actions_are_read_together() {
    let fake = FakeHetzner::start_with(Options {
        action_time: Duration::from_secs(10),
        ..Options::default()
    })
    .await
    .unwrap();
    let a = fake.insert_server("l1", "cx23", "fsn1", &[]);
    let b = fake.insert_server("l2", "cx23", "fsn1", &[]);
    let post = |id: i64, command: &str| {
        let path = format!("/servers/{id}/actions/{command}");
        let fake = &fake;
        async move { call(fake, reqwest::Method::POST, &path, None).await }
    };
    let (status, first) = post(a, "shutdown").await;
    assert_eq!(status, 201, "{first}");
    let (status, other) = post(b, "poweroff").await;
    assert_eq!(status, 201, "another server is not locked: {other}");
    // While the shutdown runs, another action or a delete of that server is refused, not queued.
    let (_, server) = call(&fake, reqwest::Method::GET, &format!("/servers/{a}"), None).await;
    assert_eq!(server["server"]["locked"], true);
    for (method, path) in [
        (
            reqwest::Method::POST,
            format!("/servers/{a}/actions/poweroff"),
        ),
        (reqwest::Method::DELETE, format!("/servers/{a}")),
    ] {
        let (status, v) = call(&fake, method, &path, None).await;
        assert_eq!(
            (status, v["error"]["code"].as_str()),
            (423, Some("locked")),
            "{path}"
        );
    }
    assert_eq!(fake.action_count(a, "stop_server"), 0);
    // Both actions in one read.
    let (x, y) = (
        first["action"]["id"].as_i64().unwrap(),
        other["action"]["id"].as_i64().unwrap(),
    );
    let both = format!("/actions?id={x}&id={y}");
    let (status, v) = call(&fake, reqwest::Method::GET, &both, None).await;
    assert_eq!(status, 200, "{v}");
    let statuses = |v: &Value| -> Vec<(i64, String)> {
        v["actions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| {
                (
                    a["id"].as_i64().unwrap(),
                    a["status"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    };
    assert_eq!(statuses(&v), [(x, "running".into()), (y, "running".into())]);
    assert_eq!(v["meta"]["pagination"]["total_entries"], 2);
    tokio::time::advance(Duration::from_secs(10)).await;
    let (_, v) = call(&fake, reqwest::Method::GET, &both, None).await;
    assert_eq!(statuses(&v), [(x, "success".into()), (y, "success".into())]);
    assert!(!fake.locked(a));
    assert_eq!(fake.servers()[0]["status"], "off");
    let (status, v) = post(a, "poweron").await;
    assert_eq!(status, 201, "unlocked once the action ended: {v}");
    let (status, v) = call(&fake, reqwest::Method::GET, "/actions", None).await;
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (400, Some("invalid_input")),
        "id is required"
    );
}
