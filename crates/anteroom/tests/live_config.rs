//! Routes and node settings change while the node serves (SPEC §13, §7.1), through the real
//! binary in front of real local origins:
//!
//! - SIGHUP with a new `[[route]]` protects a new path without a restart; a broken file on
//!   SIGHUP changes nothing; a setting that needs a restart is logged as such;
//! - SIGHUP with another `[upstream]` sends the next requests to the new origin;
//! - a room's `routes` changed through the admin API of one node protect the path on another
//!   node sharing the Redis store within a second.
#![allow(clippy::unwrap_used)]

#[path = "support/admin.rs"]
mod admin_support;
mod support;

use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::any;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use admin_support::{AdminClient, AdminSite, start_redis_nodes};
use anteroom_test_support::redis::RedisServer;
use support::{Server, Site};

/// A room whose line never moves: every request that needs it is held back (429 for an API
/// call), so a protected path is told from an open one by its status.
const HELD_ROOM: &str = "[[room]]\nid = \"sale\"\nmode = \"queue_all\"\n";

/// An origin answering its `name` on every path; stops when dropped.
struct Origin {
    url: String,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Origin {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Origin {
    async fn start(name: &'static str) -> Origin {
        let app = Router::new().fallback(any(move || async move { name }));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Origin { url, task }
    }
}

/// `[upstream]` for `origin`, then `rest`.
fn gateway_config(origin: &Origin, rest: &str) -> String {
    format!("[upstream]\nurl = \"{}\"\n\n{rest}", origin.url)
}

/// Sends SIGHUP to `server`.
fn hang_up(server: &Server) {
    let sent = std::process::Command::new("kill")
        .args(["-HUP", &server.pid().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
}

/// Waits until `server`'s log holds `text` `count` times.
async fn wait_for_log(server: &Server, text: &str, count: usize) {
    let started = Instant::now();
    while server.log().matches(text).count() < count {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no {text:?} ×{count} in the log:\n{}",
            server.log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The status and body of an API call (not a navigation) for `path`.
async fn get(client: &reqwest::Client, base: &str, path: &str) -> (StatusCode, String) {
    let response = client
        .get(format!("{base}{path}"))
        .header("accept", "application/json")
        .send()
        .await
        .unwrap();
    let status = response.status();
    (status, response.text().await.unwrap())
}

/// Polls `path` until `wanted` holds for its answer; returns how long that took.
async fn wait_until(
    client: &reqwest::Client,
    base: &str,
    path: &str,
    limit: Duration,
    wanted: impl Fn(StatusCode, &str) -> bool,
) -> Duration {
    let started = Instant::now();
    loop {
        let (status, body) = get(client, base, path).await;
        if wanted(status, &body) {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < limit,
            "{path} still answers {status} {body} after {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn held_back(status: StatusCode, body: &str) -> bool {
    status == StatusCode::TOO_MANY_REQUESTS && body.contains("\"waiting_room\"")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_protects_a_new_path_and_a_broken_file_changes_nothing() {
    let origin = Origin::start("origin").await;
    let site = Site::new();
    let room_only = gateway_config(&origin, HELD_ROOM);
    site.write_config("EdDSA", &room_only);
    // At `info`: the test waits for each reload's line.
    let mut server = site.start_with_log("info");
    let client = support::client();
    server.wait_ready(&client).await;
    let base = server.url();
    assert_eq!(
        get(&client, &base, "/hot/1").await,
        (StatusCode::OK, "origin".to_owned())
    );

    // A new route covering the hot path, a new room with its own `routes`, and a setting only
    // a restart applies.
    let routed = format!(
        "{room_only}\n[[room]]\nid = \"vip\"\nmode = \"queue_all\"\nroutes = [\"/vip/**\"]\n\n\
         [[route]]\nname = \"hot\"\npaths = [\"/hot/**\"]\nrooms = [\"sale\"]\n"
    );
    let path = site.write_config("EdDSA", &routed);
    let text = std::fs::read_to_string(&path).unwrap();
    let text = text.replacen(
        "[server]\n",
        "[server]\ntrusted_proxies = [\"10.0.0.0/8\"]\n",
        1,
    );
    std::fs::write(&path, text).unwrap();
    hang_up(&server);
    wait_for_log(&server, "configuration reloaded", 1).await;
    let (status, body) = get(&client, &base, "/hot/1").await;
    assert!(held_back(status, &body), "{status} {body}");
    let (status, body) = get(&client, &base, "/vip/1").await;
    assert!(held_back(status, &body), "{status} {body}");
    assert_eq!(
        get(&client, &base, "/cold").await,
        (StatusCode::OK, "origin".to_owned())
    );
    let log = server.log();
    assert!(
        log.lines()
            .any(|line| line.contains("needs a restart") && line.contains("trusted_proxies")),
        "{log}"
    );

    // A file with a problem (and without the route): refused whole, the route stays.
    let broken =
        format!("{room_only}\n[[route]]\npaths = [\"/cold/**\"]\nrooms = [\"no-such-room\"]\n");
    site.write_config("EdDSA", &broken);
    hang_up(&server);
    wait_for_log(&server, "configuration not reloaded", 1).await;
    let (status, body) = get(&client, &base, "/hot/2").await;
    assert!(held_back(status, &body), "{status} {body}");
    assert_eq!(
        get(&client, &base, "/cold/1").await,
        (StatusCode::OK, "origin".to_owned())
    );
    assert_eq!(server.log().matches("configuration reloaded").count(), 1);

    // The route removed by a good file: the path is open again.
    site.write_config("EdDSA", &room_only);
    hang_up(&server);
    wait_for_log(&server, "configuration reloaded", 2).await;
    assert_eq!(
        get(&client, &base, "/hot/3").await,
        (StatusCode::OK, "origin".to_owned())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_sends_the_next_requests_to_a_new_upstream() {
    let first = Origin::start("first").await;
    let second = Origin::start("second").await;
    let site = Site::new();
    site.write_config("EdDSA", &gateway_config(&first, HELD_ROOM));
    let mut server = site.start_with_log("info");
    let client = support::client();
    server.wait_ready(&client).await;
    let base = server.url();
    // Keep-alive connections to the first origin are pooled on every serving thread.
    for _ in 0..8 {
        assert_eq!(
            get(&client, &base, "/page").await,
            (StatusCode::OK, "first".to_owned())
        );
    }

    site.write_config("EdDSA", &gateway_config(&second, HELD_ROOM));
    hang_up(&server);
    wait_for_log(&server, "configuration reloaded", 1).await;
    assert!(
        server.log().contains("upstream reloaded"),
        "{}",
        server.log()
    );
    // Every request after the reload, on whichever thread and connection, goes to the new one.
    for _ in 0..16 {
        assert_eq!(
            get(&client, &base, "/page").await,
            (StatusCode::OK, "second".to_owned())
        );
    }
    drop(first);
    assert_eq!(
        get(&client, &base, "/other").await,
        (StatusCode::OK, "second".to_owned())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rooms_routes_changed_on_one_node_protect_the_path_on_another_within_a_second() {
    let origin = Origin::start("origin").await;
    let redis = RedisServer::start();
    let keys = tempfile::tempdir().unwrap();
    let client = support::client();
    let nodes = start_redis_nodes(
        2,
        &redis,
        keys.path(),
        &gateway_config(&origin, HELD_ROOM),
        &client,
    )
    .await;
    let (node_b, admin_a) = (nodes[1].1.url(), &nodes[0].2);
    assert_eq!(
        get(&client, &node_b, "/hot/1").await,
        (StatusCode::OK, "origin".to_owned())
    );

    let (status, body) = admin_a
        .admin(
            Method::PATCH,
            "/rooms/sale",
            Some(json!({"routes": ["/hot/**"]})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let took = wait_until(
        &client,
        &node_b,
        "/hot/1",
        Duration::from_secs(10),
        held_back,
    )
    .await;
    eprintln!("node B protected the path {took:?} after node A's change");
    assert!(took < Duration::from_secs(1), "took {took:?}");
    assert_eq!(
        get(&client, &node_b, "/cold").await,
        (StatusCode::OK, "origin".to_owned())
    );

    // A bad glob is refused and changes nothing; clearing the routes opens the path again.
    let (status, problem) = admin_a
        .admin(
            Method::PATCH,
            "/rooms/sale",
            Some(json!({"routes": ["/hot/a**b"]})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{problem}");
    let (_, room): (StatusCode, Value) = admin_a.admin(Method::GET, "/rooms/sale", None).await;
    assert_eq!(room["routes"], json!(["/hot/**"]), "{room}");
    let (status, body) = admin_a
        .admin(Method::PATCH, "/rooms/sale", Some(json!({"routes": []})))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    wait_until(
        &client,
        &node_b,
        "/hot/1",
        Duration::from_secs(10),
        |status, body| status == StatusCode::OK && body == "origin",
    )
    .await;
}

/// What a webhook receiver got: each request's body.
type Received = std::sync::Arc<std::sync::Mutex<Vec<String>>>;

/// A webhook receiver on a free port; its URL and what it received.
async fn webhook_receiver() -> (String, Received, tokio::task::JoinHandle<()>) {
    let received = Received::default();
    let app = Router::new().fallback(any(
        |axum::extract::State(received): axum::extract::State<Received>, body: String| async move {
            received.lock().unwrap().push(body);
            StatusCode::NO_CONTENT
        },
    ));
    let app = app.with_state(received.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (url, received, task)
}

/// Waits until a delivery mentions room `room`.
async fn wait_for_delivery(received: &Received, room: &str) {
    let started = Instant::now();
    let wanted = format!("\"room\":\"{room}\"");
    while !received
        .lock()
        .unwrap()
        .iter()
        .any(|body| body.contains(&wanted))
    {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no event of room {room} delivered: {:?}",
            received.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_starts_and_stops_event_sinks() {
    let (url, received, receiver) = webhook_receiver().await;
    let site = AdminSite::new("");
    let path = site.site.config_path();
    let without_sinks = std::fs::read_to_string(&path).unwrap();
    let with_sink = format!(
        "{without_sinks}\n[[events.sink]]\nkind = \"webhook\"\nname = \"hook\"\nurl = \"{url}\"\nsecret = \"webhook-secret-0123456789\"\nbatch = 1\n"
    );
    let client = support::client();
    let mut server = site.site.start_with_log("info");
    server.wait_ready(&client).await;
    let admin = AdminClient::new(&site.admin_url());
    admin.wait_ready().await;
    let create = |room: &'static str| {
        let admin = &admin;
        async move {
            let (status, body) = admin
                .admin(Method::PUT, &format!("/rooms/{room}"), Some(json!({})))
                .await;
            assert_eq!(status, StatusCode::CREATED, "{body}");
        }
    };

    // The first sink comes with a reload: events from then on are delivered.
    std::fs::write(&path, &with_sink).unwrap();
    hang_up(&server);
    wait_for_log(&server, "configuration reloaded", 1).await;
    create("first").await;
    wait_for_delivery(&received, "first").await;

    // Removed: its loop stops, and events wait in the outbox.
    std::fs::write(&path, &without_sinks).unwrap();
    hang_up(&server);
    wait_for_log(&server, "configuration reloaded", 2).await;
    create("second").await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let delivered = received.lock().unwrap().clone();
    assert!(
        !delivered
            .iter()
            .any(|body| body.contains("\"room\":\"second\"")),
        "{delivered:?}"
    );

    // Back again: what it missed is delivered (its progress was kept under its name).
    std::fs::write(&path, &with_sink).unwrap();
    hang_up(&server);
    wait_for_log(&server, "configuration reloaded", 3).await;
    wait_for_delivery(&received, "second").await;
    receiver.abort();
}
