//! Ticket-secret rotation (SPEC §4, §8.1 `keys/rotate`): a rotation on one node must not log
//! out the visitors already waiting on any node, and a secret it retired must stop opening
//! doors once its retention is over, so a leaked secret can be rotated away.

use std::path::Path;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::Value;

use crate::support::{self, SERVICE_KEY, Server, Site, free_port, key_hash, toml_string};
use crate::{Gate, raw_exchange, raw_status};

use anteroom_test_support::redis::RedisServer;

/// The admin key of the nodes that open an admin listener.
const ADMIN_KEY: &str = "secrets-admin-key-0123456789abcdef";

/// A room where everyone waits: tickets stay in the queue for as long as the test needs them.
const ROOM: &str = r#"
[[room]]
id = "line"
mode = "queue_all"
"#;

/// Writes a node's config: `store` (a `[store]` table), the key directory with
/// `retention`, an admin listener on `admin_port`, and [`ROOM`].
fn write_config(site: &Site, store: &str, keys_dir: &Path, retention: &str, admin_port: u16) {
    let text = format!(
        "[server]\n\
         listen = \"127.0.0.1:{port}\"\n\
         admin_listen = \"127.0.0.1:{admin_port}\"\n\
         public_url = \"{url}\"\n\
         issuer = \"http://anteroom.test\"\n\
         join_rate_limit = false\n\
         \n\
         {store}\n\
         \n\
         [keys]\n\
         dir = {keys}\n\
         algorithm = \"EdDSA\"\n\
         ticket_secret_retention = \"{retention}\"\n\
         \n\
         [auth]\n\
         admin_keys = [\"{admin}\"]\n\
         service_keys = [\"{service}\"]\n\
         \n\
         {ROOM}\n",
        port = site.port,
        url = site.public_url(),
        keys = toml_string(keys_dir),
        admin = key_hash(ADMIN_KEY),
        service = key_hash(SERVICE_KEY),
    );
    std::fs::write(site.config_path(), text).unwrap();
}

/// `GET …/status` with `ticket` in the ticket header: the status code and the JSON body.
async fn status(client: &reqwest::Client, node: &str, ticket: &str) -> (StatusCode, Value) {
    let response = client
        .get(format!("{node}/_anteroom/v1/rooms/line/status"))
        .header("x-anteroom-ticket", ticket)
        .send()
        .await
        .unwrap();
    let code = response.status();
    (code, response.json().await.unwrap_or(Value::Null))
}

/// Waits until `node`'s JWKS lists `kid`: the node has loaded the rotated key directory
/// (signing keys and ticket secrets are one load).
async fn wait_for_kid(client: &reqwest::Client, node: &str, kid: &str) {
    let started = Instant::now();
    loop {
        let jwks: Value = client
            .get(format!("{node}/.well-known/jwks.json"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let listed = jwks["keys"]
            .as_array()
            .is_some_and(|keys| keys.iter().any(|key| key["kid"] == kid));
        if listed {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{node} did not load key {kid}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until `node` re-signs `ticket` with the rotated ticket secret (`t2.`), as every
/// node does within about a second of a rotation.
async fn wait_for_new_secret(client: &reqwest::Client, node: &str, ticket: &str) {
    let started = Instant::now();
    loop {
        let (code, body) = status(client, node, ticket).await;
        assert_eq!(code, StatusCode::OK, "{node}: {body}");
        if body["ticket"]
            .as_str()
            .is_some_and(|fresh| fresh.starts_with("t2."))
        {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{node} did not take the rotated ticket secret: {body}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Asserts that `ticket` still resumes its place on `node`: 200, same position, and the
/// answer hands back a token made with the current secret.
async fn assert_resumes(client: &reqwest::Client, node: &str, ticket: &str, position: u64) {
    let (code, body) = status(client, node, ticket).await;
    assert_eq!(code, StatusCode::OK, "{node}: {body}");
    assert_eq!(body["position"], position, "{node}: {body}");
    let fresh = body["ticket"].as_str().unwrap();
    assert!(
        fresh.starts_with("t2."),
        "re-signed with the new secret: {fresh}"
    );
}

/// The attacker (or just a routine rotation) rotates the keys through the admin API of one
/// node of two sharing a Redis store and a key directory. A visitor who joined before the
/// rotation, holding a ticket token in the format every earlier version issued (`t1.`, no
/// secret id), must keep their place on both nodes; tickets made after it carry the new
/// secret and verify on both nodes too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ticket_from_before_a_rotation_resumes_on_every_node_after_it() {
    let redis = RedisServer::start();
    let keys = tempfile::tempdir().unwrap();
    let client = support::client();
    let store = format!("[store]\nbackend = \"redis\"\nurl = \"{}\"", redis.url());
    let sites = [Site::new(), Site::new()];
    let admin_port = free_port();
    write_config(&sites[0], &store, keys.path(), "1h", admin_port);
    write_config(&sites[1], &store, keys.path(), "1h", free_port());
    // The first node makes the key directory; the second loads it.
    let mut node_a = sites[0].start();
    node_a.wait_ready(&client).await;
    let mut node_b: Server = sites[1].start();
    node_b.wait_ready(&client).await;
    let (a, b) = (node_a.url(), node_b.url());

    let before = support::join(&client, &a, "line").await;
    assert!(before.ticket.starts_with("t1.line."), "{}", before.ticket);

    let rotated: Value = client
        .post(format!(
            "http://127.0.0.1:{admin_port}/admin/v1/keys/rotate"
        ))
        .bearer_auth(ADMIN_KEY)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let kid = rotated["active_kid"].as_str().unwrap();
    wait_for_kid(&client, &b, kid).await;
    // The JWKS lists a new key as soon as its file is there; the other node may have read the
    // directory half written (the key, not yet the switch to it) and follows within a second.
    // The node that rotated signs with the new secret at once (below, without waiting).
    wait_for_new_secret(&client, &b, &before.ticket).await;

    for node in [&a, &b] {
        assert_resumes(&client, node, &before.ticket, before.position).await;
    }
    let after = support::join(&client, &b, "line").await;
    assert!(after.ticket.starts_with("t2."), "{}", after.ticket);
    for node in [&a, &b] {
        assert_resumes(&client, node, &after.ticket, after.position).await;
    }
}

/// The attacker holds a ticket token made with a ticket secret that has since been rotated
/// out (`anteroom keys generate` with a short retention, as after a leak) and its retention
/// has passed. The node must refuse it as `ticket_invalid` (problem+json, 400) whether it
/// comes in the ticket header or in the `ticket` query parameter of the event stream, while
/// tokens of the current secret keep working; before the retention was over, it still resumed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ticket_made_with_a_dropped_secret_is_refused_as_ticket_invalid() {
    let gate = Gate::start(ROOM).await;
    let keys = gate.site.keys_dir();
    let node = gate.url("");
    let old = support::join(&gate.client, &node, "line").await;

    // The drop time is a whole second, so the secret goes between 3 and 4 s from now.
    let retention = Duration::from_secs(4);
    let rotated = support::anteroom()
        .args(["keys", "generate", "--ticket-secret-retention", "4s"])
        .arg("--dir")
        .arg(&keys)
        .output()
        .unwrap();
    let rotated_at = Instant::now();
    assert!(rotated.status.success(), "{rotated:?}");
    wait_for_kid(&gate.client, &node, &support::printed_kid(&rotated)).await;
    let new = support::join(&gate.client, &node, "line").await;
    assert!(new.ticket.starts_with("t2."), "{}", new.ticket);
    if rotated_at.elapsed() < Duration::from_millis(2500) {
        assert_resumes(&gate.client, &node, &old.ticket, old.position).await;
    }

    let margin = Duration::from_millis(1100);
    tokio::time::sleep(retention.saturating_sub(rotated_at.elapsed()) + margin).await;
    let (code, body) = status(&gate.client, &node, &old.ticket).await;
    assert_eq!(code, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["code"], "ticket_invalid", "{body}");
    let request = format!(
        "GET /_anteroom/v1/rooms/line/events?ticket={} HTTP/1.1\r\nHost: {}\r\n\
         Accept: text/event-stream\r\nConnection: close\r\n\r\n",
        old.ticket,
        gate.addr()
    );
    let answer = raw_exchange(&gate.addr(), request.as_bytes()).await;
    assert_eq!(raw_status(&answer), 400, "{answer}");
    assert!(answer.contains("ticket_invalid"), "{answer}");
    assert_resumes(&gate.client, &node, &new.ticket, new.position).await;
}

/// A rotation is asked for with a retention that is not a duration (a typo, or a value an
/// attacker slipped into a script). The CLI must refuse it with the bad-config exit code and
/// a message naming the flag, before it writes anything: the key directory stays as it was.
#[test]
fn a_rotation_with_a_bad_retention_changes_nothing() {
    let site = Site::new();
    let keys = site.keys_dir();
    let dir = keys.to_str().unwrap();
    let first = support::run(&["keys", "generate", "--dir", dir]);
    assert!(first.status.success(), "{first:?}");
    let listing = || {
        let mut names: Vec<String> = std::fs::read_dir(&keys)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    };
    let before = listing();

    let refused = support::run(&[
        "keys",
        "generate",
        "--dir",
        dir,
        "--ticket-secret-retention",
        "forever",
    ]);
    assert_eq!(refused.status.code(), Some(64), "{refused:?}");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("--ticket-secret-retention"), "{stderr}");
    assert_eq!(listing(), before);
}
