//! The admin listener of the real binary (SPEC §8.1): keys checked, and a room created at run
//! time through the admin API is persisted in the embedded store, so it is still there, queue
//! and all, after the process is killed and started again.
#![allow(clippy::unwrap_used)]

#[path = "support/admin.rs"]
mod admin_support;
mod support;

use reqwest::{Method, StatusCode};
use serde_json::json;

use admin_support::{AdminClient, AdminSite, READ_KEY};

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
    let metrics = client
        .get(format!("{}/metrics", site.admin_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(metrics.status(), StatusCode::OK);
    assert!(
        metrics
            .text()
            .await
            .unwrap()
            .contains("anteroom_sse_connections")
    );
}
