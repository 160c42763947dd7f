//! `[[rate_limit]]` end to end: the real binary, the real config parser and real sockets.
//! Joins over the limit are refused with the rate-limit headers, forwarded clients count
//! apart only behind a trusted proxy, SIGHUP swaps the rules without a restart, and two nodes
//! on a Redis Cluster share redis rules whose keys live in different slots, a request refused
//! by one rule consuming nothing from the others (redis or local).
#![allow(clippy::unwrap_used)]

mod support;

use std::time::{Duration, Instant};

use anteroom_test_support::redis::RedisCluster;
use support::{Site, client, key_hash, toml_string};

/// A config with one room, `trusted_proxies`, and a per-IP join limit of `limit` a minute.
fn write_config(site: &Site, trusted_proxies: &str, limit: u64) {
    let text = format!(
        r#"[server]
listen = "127.0.0.1:{port}"
public_url = "{url}"
trusted_proxies = {trusted_proxies}

[store]
backend = "embedded"
path = {store}

[keys]
dir = {keys}

[auth]
service_keys = ["{service}"]

[[room]]
id = "launch"

[[rate_limit]]
name = "join-per-ip"
match = {{ paths = ["/_anteroom/v1/rooms/*/join"], methods = ["POST"] }}
key = ["ip"]
algorithm = "sliding_log"
limit = {limit}
period = "1m"
"#,
        port = site.port,
        url = site.public_url(),
        store = toml_string(&site.store_path()),
        keys = toml_string(&site.keys_dir()),
        service = key_hash(support::SERVICE_KEY),
    );
    std::fs::write(site.config_path(), text).unwrap();
}

/// Joins `launch` as the client `forwarded_for` says (if any); the status and the response.
async fn join(
    client: &reqwest::Client,
    base: &str,
    forwarded_for: Option<&str>,
) -> reqwest::Response {
    let mut request = client.post(format!("{base}/_anteroom/v1/rooms/launch/join"));
    if let Some(address) = forwarded_for {
        request = request.header("x-forwarded-for", address);
    }
    request.send().await.unwrap()
}

async fn statuses(
    client: &reqwest::Client,
    base: &str,
    forwarded_for: Option<&str>,
    count: usize,
) -> Vec<u16> {
    let mut found = Vec::new();
    for _ in 0..count {
        found.push(join(client, base, forwarded_for).await.status().as_u16());
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn joins_over_the_limit_are_refused_with_the_rate_limit_headers() {
    let site = Site::new();
    write_config(&site, "[]", 2);
    let mut server = site.start();
    let client = client();
    server.wait_ready(&client).await;
    let base = server.url();

    let first = join(&client, &base, None).await;
    assert_eq!(first.status(), 200);
    assert_eq!(
        first.headers()["ratelimit-policy"],
        "\"join-per-ip\";q=2;w=60"
    );
    assert_eq!(first.headers()["x-ratelimit-remaining"], "1");
    assert_eq!(join(&client, &base, None).await.status(), 200);

    let refused = join(&client, &base, None).await;
    assert_eq!(refused.status(), 429);
    let headers = refused.headers().clone();
    assert_eq!(headers["content-type"], "application/problem+json");
    let retry_after: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry_after), "Retry-After {retry_after}");
    assert_eq!(
        headers["ratelimit"].to_str().unwrap(),
        format!("\"join-per-ip\";r=0;t={retry_after}")
    );
    assert_eq!(headers["x-ratelimit-remaining"], "0");
    let body: serde_json::Value = refused.json().await.unwrap();
    assert_eq!(body["code"], "rate_limited");

    // Without trusted proxies, X-Forwarded-For changes nothing: the peer is the client.
    assert_eq!(
        statuses(&client, &base, Some("198.51.100.1"), 1).await,
        vec![429]
    );
    // Other endpoints are not limited by the join rule.
    let summary = client
        .get(format!("{base}/_anteroom/v1/rooms/launch"))
        .send()
        .await
        .unwrap();
    assert_eq!(summary.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarded_clients_count_apart_behind_a_trusted_proxy_and_sighup_reloads_the_rules() {
    let site = Site::new();
    // The test connects from 127.0.0.1: it plays the proxy.
    write_config(&site, "[\"127.0.0.1/32\"]", 1);
    let mut server = site.start();
    let client = client();
    server.wait_ready(&client).await;
    let base = server.url();

    assert_eq!(
        statuses(&client, &base, Some("198.51.100.1"), 2).await,
        vec![200, 429]
    );
    assert_eq!(
        statuses(&client, &base, Some("198.51.100.2"), 2).await,
        vec![200, 429]
    );
    // The client's own entries left of the one the proxy appended are not believed.
    assert_eq!(
        statuses(&client, &base, Some("203.0.113.99, 198.51.100.1"), 1).await,
        vec![429]
    );

    // Raise the limit and reload: the window's count carries on under the new limit.
    write_config(&site, "[\"127.0.0.1/32\"]", 3);
    let hangup = std::process::Command::new("kill")
        .args(["-HUP", &server.pid().to_string()])
        .status()
        .unwrap();
    assert!(hangup.success());
    let started = Instant::now();
    for fresh in 10.. {
        // Each try is a fresh client, allowed either way; the policy shows which rules ran.
        let answer = join(&client, &base, Some(&format!("198.51.100.{fresh}"))).await;
        assert_eq!(answer.status(), 200);
        if answer.headers()["ratelimit-policy"] == "\"join-per-ip\";q=3;w=60" {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the reload did not take; log:\n{}",
            server.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        statuses(&client, &base, Some("198.51.100.1"), 3).await,
        vec![200, 200, 429]
    );
}

/// A node's config on the Redis Cluster `nodes`: a local rule and two redis rules, keyed
/// apart (per client, per path), so their keys carry different hash tags and a request both
/// apply to is reserved then refunded across them.
fn write_cluster_config(site: &Site, nodes: &[String]) {
    let nodes: Vec<String> = nodes.iter().map(|url| format!("\"{url}\"")).collect();
    let text = format!(
        r#"[server]
listen = "127.0.0.1:{port}"
admin_listen = "127.0.0.1:0"
public_url = "{url}"

[store]
backend = "redis"
cluster = [{nodes}]

[keys]
dir = {keys}

[auth]
service_keys = ["{service}"]

[[rate_limit]]
name = "node-per-ip"
match = {{ paths = ["/limited/**", "/local/**"] }}
key = ["ip"]
algorithm = "sliding_log"
limit = 3
period = "1m"

[[rate_limit]]
name = "shared-per-ip"
match = {{ paths = ["/limited/**", "/shared/**"] }}
key = ["ip"]
algorithm = "sliding_log"
limit = 4
period = "1m"
store = "redis"

[[rate_limit]]
name = "once-per-path"
match = {{ paths = ["/limited/**"] }}
key = ["path"]
algorithm = "gcra"
limit = 1
period = "1h"
store = "redis"
"#,
        port = site.port,
        url = site.public_url(),
        nodes = nodes.join(", "),
        keys = toml_string(&site.keys_dir()),
        service = key_hash(support::SERVICE_KEY),
    );
    std::fs::write(site.config_path(), text).unwrap();
}

/// Whether each GET of `path` on the node at `bases[i % len]` was let through (anything but
/// 429).
async fn passed(client: &reqwest::Client, bases: &[String], paths: &[&str]) -> Vec<bool> {
    let mut found = Vec::new();
    for (index, path) in paths.iter().enumerate() {
        let base = &bases[index % bases.len()];
        let response = client.get(format!("{base}{path}")).send().await.unwrap();
        found.push(response.status() != 429);
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_on_a_redis_cluster_share_limits_and_refusals_consume_nothing() {
    let cluster = RedisCluster::start();
    let client = client();
    let sites = [Site::new(), Site::new()];
    for site in &sites {
        write_cluster_config(site, &cluster.urls());
    }
    let mut servers = Vec::new();
    for site in &sites {
        let mut server = site.start();
        server.wait_ready(&client).await;
        servers.push(server);
    }
    let bases: Vec<String> = servers.iter().map(|server| server.url()).collect();

    // `once-per-path` lets /limited/once through once across both nodes; the three refusals
    // (on both nodes) are reserved on `shared-per-ip` in another slot and handed back, and
    // `node-per-ip` hands back what each node's local counter took.
    let once = ["/limited/once"; 4];
    assert_eq!(
        passed(&client, &bases, &once).await,
        [true, false, false, false]
    );
    // So the shared rule counted one request: three more pass, on either node.
    let shared = ["/shared/a"; 4];
    assert_eq!(
        passed(&client, &bases, &shared).await,
        [true, true, true, false]
    );
    // And each node's local rule: node 0 counted one (two left), node 1 none (three left).
    let local = ["/local/a"; 3];
    assert_eq!(
        passed(&client, &bases[..1], &local).await,
        [true, true, false]
    );
    let local = ["/local/a"; 4];
    assert_eq!(
        passed(&client, &bases[1..], &local).await,
        [true, true, true, false]
    );
    for server in &servers {
        let log = server.log();
        assert!(!log.contains("panicked"), "a node panicked:\n{log}");
        assert!(!log.contains("refund failed"), "a refund failed:\n{log}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_built_in_join_limit_needs_no_config() {
    let site = Site::new();
    // The shared test config switches the built-in limit off; this site keeps it.
    let path = site.write_config("EdDSA", "[[room]]\nid = \"launch\"\n");
    let text = std::fs::read_to_string(&path).unwrap();
    let text = text.replacen("join_rate_limit = false\n", "", 1);
    assert!(
        !text.contains("[[rate_limit]]") && !text.contains("join_rate_limit ="),
        "no rule is configured"
    );
    std::fs::write(&path, text).unwrap();
    let mut server = site.start();
    let client = client();
    server.wait_ready(&client).await;
    let base = server.url();

    // Ten joins a minute per address, all ten at once.
    let first = join(&client, &base, None).await;
    assert_eq!(first.status(), 200);
    assert_eq!(
        first.headers()["ratelimit-policy"],
        "\"join-per-ip\";q=10;w=60"
    );
    assert_eq!(
        statuses(&client, &base, None, 9).await,
        vec![200; 9],
        "the burst of ten"
    );
    let refused = join(&client, &base, None).await;
    assert_eq!(refused.status(), 429);
    assert_eq!(refused.headers()["x-ratelimit-remaining"], "0");
    let retry_after: u64 = refused.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    // One join comes back every six seconds.
    assert!((1..=6).contains(&retry_after), "Retry-After {retry_after}");
    let body: serde_json::Value = refused.json().await.unwrap();
    assert_eq!(body["code"], "rate_limited");
}
