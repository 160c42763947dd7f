//! What the admin tests share: a site whose config opens the admin listener on a free port
//! with an admin key and a read-only key, an admin API client, and nodes with their admin
//! listeners on one Redis store.
//!
//! Every test file that compiles this module uses only part of it.
#![allow(dead_code)]

use std::path::Path;
use std::time::Duration;

use anteroom_test_support::redis::RedisServer;
use reqwest::{Method, StatusCode};
use serde_json::Value;

use crate::support::{Server, Site, client, free_port, key_hash, toml_string};

/// The admin key the sites accept.
pub(crate) const ADMIN_KEY: &str = "test-admin-key-0123456789abcdef";
/// The read-only key the sites accept.
pub(crate) const READ_KEY: &str = "test-read-key-0123456789abcdef";

/// A site whose config also opens the admin listener (on a port of its own) with both keys.
pub(crate) struct AdminSite {
    pub(crate) site: Site,
    pub(crate) admin_port: u16,
}

impl AdminSite {
    /// A new site; `rooms` are `[[room]]` tables.
    pub(crate) fn new(rooms: &str) -> AdminSite {
        let site = Site::new();
        let admin_port = free_port();
        let auth = format!(
            "admin_keys = [\"{}\"]\nread_keys = [\"{}\"]\n\n{rooms}",
            key_hash(ADMIN_KEY),
            key_hash(READ_KEY)
        );
        let path = site.write_config("EdDSA", &auth);
        let text = std::fs::read_to_string(&path).expect("read the config back");
        // The shared config opens the admin listener on any free port; this site names its own.
        let text = text.replacen(
            "admin_listen = \"127.0.0.1:0\"\n",
            &format!("admin_listen = \"127.0.0.1:{admin_port}\"\n"),
            1,
        );
        assert!(
            text.contains(&format!(":{admin_port}\"")),
            "the config names the admin port"
        );
        std::fs::write(&path, text).expect("write the config");
        AdminSite { site, admin_port }
    }

    /// `http://127.0.0.1:<admin port>`.
    pub(crate) fn admin_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.admin_port)
    }
}

/// Calls the admin API with a key.
pub(crate) struct AdminClient {
    client: reqwest::Client,
    base: String,
}

impl AdminClient {
    pub(crate) fn new(base: &str) -> AdminClient {
        AdminClient {
            client: client(),
            base: base.to_owned(),
        }
    }

    /// Waits until the admin listener answers (it starts right after the public one).
    pub(crate) async fn wait_ready(&self) {
        let started = std::time::Instant::now();
        while started.elapsed() < std::time::Duration::from_secs(20) {
            if self
                .client
                .get(format!("{}/admin/v1/openapi.json", self.base))
                .send()
                .await
                .is_ok_and(|response| response.status().is_success())
            {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        panic!("the admin listener at {} did not answer", self.base);
    }

    /// `method path` with `key` (none when `None`) and an optional JSON body.
    pub(crate) async fn call(
        &self,
        method: Method,
        path: &str,
        key: Option<&str>,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut request = self
            .client
            .request(method, format!("{}/admin/v1{path}", self.base));
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.expect("admin API call");
        let status = response.status();
        let body = response.json().await.unwrap_or(Value::Null);
        (status, body)
    }

    /// With the admin key.
    pub(crate) async fn admin(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        self.call(method, path, Some(ADMIN_KEY), body).await
    }
}

/// Starts `count` nodes with their admin listeners on one Redis store and one key directory
/// (`keys`); `rooms` are `[[room]]` tables.
pub(crate) async fn start_redis_nodes(
    count: usize,
    redis: &RedisServer,
    keys: &Path,
    rooms: &str,
    client: &reqwest::Client,
) -> Vec<(AdminSite, Server, AdminClient)> {
    let mut nodes = Vec::new();
    for index in 0..count {
        let site = AdminSite::new(rooms);
        share_store_and_keys(&site, redis, keys);
        let mut server = site.site.start();
        server.wait_ready(client).await;
        let admin = AdminClient::new(&site.admin_url());
        admin.wait_ready().await;
        nodes.push((site, server, admin));
        if index == 0 {
            // The next node loads the keys the first one made.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    nodes
}

/// Rewrites `site`'s config to use `redis` and the key directory `keys` in place of its own
/// embedded store and keys.
fn share_store_and_keys(site: &AdminSite, redis: &RedisServer, keys: &Path) {
    let path = site.site.config_path();
    let text = std::fs::read_to_string(&path).expect("read the config back");
    let embedded = format!(
        "backend = \"embedded\"\npath = {}\n",
        toml_string(&site.site.store_path())
    );
    let shared = format!("backend = \"redis\"\nurl = \"{}\"\n", redis.url());
    let text = text.replacen(&embedded, &shared, 1).replacen(
        &toml_string(&site.site.keys_dir()),
        &toml_string(keys),
        1,
    );
    assert!(text.contains("backend = \"redis\""), "{text}");
    std::fs::write(&path, text).expect("write the config");
}
