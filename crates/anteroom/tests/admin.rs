//! The admin listener of the real binary (SPEC §8.1): keys checked, and a room created at run
//! time through the admin API is persisted in the embedded store, so it is still there, queue
//! and all, after the process is killed and started again. Two operators changing one room
//! with the same `ETag` cannot overwrite each other, on the embedded store and on Redis with
//! each operator on a node of its own. A session revoked through one node's admin API is
//! refused by another node's gateway within a second (SPEC §8.2).
#![allow(clippy::unwrap_used)]

#[path = "support/admin.rs"]
mod admin_support;
mod support;

use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::get;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use admin_support::{ADMIN_KEY, AdminClient, AdminSite, READ_KEY};
use anteroom_test_support::redis::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_room_created_at_run_time_survives_a_restart() {
    let site = AdminSite::new("");
    let client = support::client();
    let mut server = site.site.start();
    server.wait_ready(&client).await;
    let admin = AdminClient::new(&site.admin_url());
    admin.wait_ready().await;

    // Keys: none, a wrong one, a read-only one on a write.
    let (status, body) = admin.call(Method::GET, "/rooms", None, None).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::UNAUTHORIZED, Some("unauthorized"))
    );
    let (status, _) = admin.call(Method::GET, "/rooms", Some("wrong"), None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, body) = admin
        .call(Method::PUT, "/rooms/late", Some(READ_KEY), Some(json!({})))
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::FORBIDDEN, Some("forbidden"))
    );
    let (status, body) = admin
        .call(Method::GET, "/rooms", Some(READ_KEY), None)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["rooms"], json!([]));

    let (status, body) = admin
        .admin(
            Method::PUT,
            "/rooms/late",
            Some(json!({"max_active": 1, "admit_per_minute": 0, "session_ttl": "20m"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    // Live at once on the public listener: the first visitor enters, the second waits.
    let first = support::join(&client, &server.url(), "late").await;
    assert_eq!(first.state, "admitted");
    let second = support::join(&client, &server.url(), "late").await;
    assert_eq!(second.state, "waiting");
    let (_, paused) = admin.admin(Method::POST, "/rooms/late/pause", None).await;
    assert_eq!(paused["mode"], "queue_all");

    server.kill();
    let mut server = site.site.start();
    server.wait_ready(&client).await;
    admin.wait_ready().await;
    let (status, room) = admin
        .call(Method::GET, "/rooms/late", Some(READ_KEY), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{room}");
    assert_eq!(room["session_ttl"], "20m");
    assert_eq!(room["mode"], "queue_all", "the pause was persisted too");
    let (_, stats) = admin
        .call(Method::GET, "/rooms/late/stats", Some(READ_KEY), None)
        .await;
    assert_eq!(
        (stats["waiting"].as_u64(), stats["active"].as_u64()),
        (Some(1), Some(1))
    );
    let third = support::join(&client, &server.url(), "late").await;
    assert_eq!(third.state, "paused");
    assert_eq!(third.position, 3);
    let (status, _) = admin.admin(Method::DELETE, "/rooms/late", None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let metrics = support::scrape_metrics(&client, &site.admin_url()).await;
    assert!(metrics.contains("anteroom_sse_connections"), "{metrics}");
}

const CONTESTED: &str = r#"
[[room]]
id = "contested"
max_active = 5
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_patches_with_one_etag_let_one_win_on_the_embedded_store() {
    let site = AdminSite::new(CONTESTED);
    let client = support::client();
    let mut server = site.site.start();
    server.wait_ready(&client).await;
    let admin = site.admin_url();
    AdminClient::new(&admin).wait_ready().await;
    one_of_two_patches_wins(&client, &admin, &admin).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_patches_with_one_etag_let_one_win_across_nodes_on_redis() {
    let redis = RedisServer::start();
    let sites = [
        on_redis(AdminSite::new(CONTESTED), &redis.url()),
        on_redis(AdminSite::new(CONTESTED), &redis.url()),
    ];
    let client = support::client();
    let mut servers: Vec<_> = sites.iter().map(|site| site.site.start()).collect();
    for (server, site) in servers.iter_mut().zip(&sites) {
        server.wait_ready(&client).await;
        AdminClient::new(&site.admin_url()).wait_ready().await;
    }
    one_of_two_patches_wins(&client, &sites[0].admin_url(), &sites[1].admin_url()).await;
}

/// The site's config with its rooms in the Redis at `url` instead of the embedded store.
fn on_redis(site: AdminSite, url: &str) -> AdminSite {
    let path = site.site.config_path();
    let text = std::fs::read_to_string(&path).unwrap();
    let embedded = format!(
        "backend = \"embedded\"\npath = {}\n",
        support::toml_string(&site.site.store_path())
    );
    assert!(text.contains(&embedded), "{text}");
    let text = text.replacen(
        &embedded,
        &format!("backend = \"redis\"\nurl = \"{url}\"\n"),
        1,
    );
    std::fs::write(&path, text).unwrap();
    site
}

/// Two operators read the room on `first` and `second` (the same node or two), then both
/// change it at once with the tag they read: one change is made, the other answers 412 with
/// a problem and changes nothing, and both nodes then show the winner's room and tag.
async fn one_of_two_patches_wins(client: &reqwest::Client, first: &str, second: &str) {
    let read = |base: &str| {
        client
            .get(format!("{base}/admin/v1/rooms/contested"))
            .bearer_auth(READ_KEY)
            .send()
    };
    let tag_of =
        |response: &reqwest::Response| response.headers()["etag"].to_str().unwrap().to_owned();
    let tag = tag_of(&read(first).await.unwrap());
    assert_eq!(
        tag_of(&read(second).await.unwrap()),
        tag,
        "every node, one tag"
    );
    let patch = |base: &str, max_active: u64| {
        client
            .patch(format!("{base}/admin/v1/rooms/contested"))
            .bearer_auth(ADMIN_KEY)
            .header("if-match", &tag)
            .json(&json!({"max_active": max_active}))
            .send()
    };
    let (left, right) = tokio::join!(patch(first, 10), patch(second, 20));
    let (left, right) = (left.unwrap(), right.unwrap());
    let (winner, loser, won_with) = match (left.status(), right.status()) {
        (StatusCode::OK, StatusCode::PRECONDITION_FAILED) => (left, right, 10),
        (StatusCode::PRECONDITION_FAILED, StatusCode::OK) => (right, left, 20),
        other => panic!("expected one 200 and one 412, got {other:?}"),
    };
    let new_tag = tag_of(&winner);
    assert_ne!(new_tag, tag);
    assert_eq!(
        loser.headers()["content-type"],
        "application/problem+json",
        "the refusal is a problem"
    );
    let problem: Value = loser.json().await.unwrap();
    assert_eq!(problem["code"], "precondition_failed", "{problem}");
    for base in [first, second] {
        let response = read(base).await.unwrap();
        assert_eq!(tag_of(&response), new_tag);
        let room: Value = response.json().await.unwrap();
        assert_eq!(room["max_active"], won_with, "{room}");
    }
    // The loser's tag is stale for the mode controls too: the room stays open.
    let paused = client
        .post(format!("{second}/admin/v1/rooms/contested/pause"))
        .bearer_auth(ADMIN_KEY)
        .header("if-match", &tag)
        .send()
        .await
        .unwrap();
    assert_eq!(paused.status(), StatusCode::PRECONDITION_FAILED);
    let room: Value = read(first).await.unwrap().json().await.unwrap();
    assert_eq!(room["mode"], "queue");
}

/// A paused room protecting `/site/…` on the upstream `{origin}`: nobody is let in without a
/// pass, and a pass holder goes through.
const PROTECTED: &str = r#"
[upstream]
url = "{origin}"

[[room]]
id = "guarded"
routes = ["/site/**"]
mode = "queue_all"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_revoked_on_one_node_is_refused_by_another_within_a_second() {
    let origin = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin_url = format!("http://{}", origin.local_addr().unwrap());
    let origin_task = tokio::spawn(async move {
        let app = Router::new().route("/site/{*rest}", get(|| async { "from the origin" }));
        let _ = axum::serve(origin, app).await;
    });
    let redis = RedisServer::start();
    let rooms = PROTECTED.replace("{origin}", &origin_url);
    let sites = [
        on_redis(AdminSite::new(&rooms), &redis.url()),
        on_redis(AdminSite::new(&rooms), &redis.url()),
    ];
    let client = support::client();
    let mut servers: Vec<_> = sites.iter().map(|site| site.site.start()).collect();
    for (server, site) in servers.iter_mut().zip(&sites) {
        server.wait_ready(&client).await;
        AdminClient::new(&site.admin_url()).wait_ready().await;
    }
    // Each node signs with keys of its own: the pass comes from the node that checks it, and
    // is revoked through the other one.
    let first = AdminClient::new(&sites[0].admin_url());
    let second = AdminClient::new(&sites[1].admin_url());
    let other_node = servers[1].url();
    let passes = |pass: &str| {
        client
            .get(format!("{other_node}/site/page"))
            .header("x-anteroom-pass", pass)
            .send()
    };
    let through = |answer: reqwest::Response| async move {
        answer.status() == StatusCode::OK
            && answer
                .text()
                .await
                .is_ok_and(|body| body == "from the origin")
    };

    let (status, issued) = second
        .admin(Method::POST, "/rooms/guarded/passes", None)
        .await;
    assert_eq!(status, StatusCode::CREATED, "{issued}");
    let pass = issued["pass"].as_str().unwrap();
    let session = issued["session"].as_str().unwrap();
    // The other node lets the pass through (and caches it), and nobody else.
    assert!(through(passes(pass).await.unwrap()).await, "the pass works");
    assert!(!through(passes("not-a-pass").await.unwrap()).await);

    let (status, revoked) = first
        .admin(
            Method::POST,
            &format!("/rooms/guarded/sessions/{session}/revoke"),
            None,
        )
        .await;
    assert_eq!(
        (status, revoked["state"].as_str()),
        (StatusCode::OK, Some("revoked"))
    );
    let revoked_at = Instant::now();
    while through(passes(pass).await.unwrap()).await {
        assert!(
            revoked_at.elapsed() < Duration::from_secs(1),
            "the other node still honours the revoked pass"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (_, stats) = first
        .admin(Method::GET, "/rooms/guarded/stats?history=0", None)
        .await;
    assert_eq!(stats["active"], 0, "the slot is free: {stats}");
    origin_task.abort();
}
