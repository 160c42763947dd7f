//! The signing keys' lifecycle through the real binary: pruning (`anteroom keys prune` and
//! `POST /admin/v1/keys/prune`) removes exactly the retired keys no pass can still need, and
//! a key set shared by nodes through Redis alone (no shared disk), sealed with a
//! key-encryption key: passes and rotations made on one node reach the other, Redis never
//! holds a key in plain text, and a node with the wrong key-encryption key refuses to start.
#![allow(clippy::unwrap_used)]

#[path = "support/admin.rs"]
mod admin_support;
mod support;

use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use admin_support::{ADMIN_KEY, AdminClient, AdminSite, READ_KEY};
use anteroom_test_support::redis::RedisServer;
use anteroom_token::KeyEncryptionKey;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use support::{Site, free_port, key_hash, printed_kid, run, toml_string};

const EXIT_BAD_CONFIG: i32 = 64;

/// How long a key stays after it stops signing when no room's passes outlive those issued by
/// hand: 7 days, plus the 30 s verification leeway and 30 s clock skew.
const KEEP_SECS: u64 = 7 * 24 * 3600 + 60;

/// A room of three whose passes live ten minutes (less than a pass issued by hand may): the
/// shared-keys test takes all three places, so its verify calls pass on the pass alone.
const ROOM: &str = r#"
[[room]]
id = "shop"
routes = ["/shop/**"]
max_active = 3
session_ttl = "10m"
"#;

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn keys_command(command: &str, config: &Path) -> Output {
    let output = run(&["keys", command, "--config", config.to_str().unwrap()]);
    assert_eq!(
        output.status.code(),
        Some(0),
        "keys {command}: {}",
        stderr(&output)
    );
    output
}

/// Moves the retirement of `kid` in `dir` back by `secs`, as if it had been rotated out that
/// much earlier.
fn age_retirement(dir: &Path, kid: &str, secs: u64) {
    let record = dir.join(format!("{kid}.retired"));
    let retired_at: u64 = std::fs::read_to_string(&record)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    std::fs::write(&record, format!("{}\n", retired_at - secs)).unwrap();
}

#[test]
fn keys_prune_removes_a_retired_key_only_once_its_passes_have_expired() {
    let site = Site::new();
    let config = site.write_config("EdDSA", ROOM);
    let dir = site.keys_dir();
    let first = printed_kid(&keys_command("generate", &config));
    let second = printed_kid(&keys_command("generate", &config));

    // Just rotated: the old key may still have signed a valid pass.
    let kept = stdout(&keys_command("prune", &config));
    assert!(kept.contains(&format!("kept {second}: active")), "{kept}");
    assert!(
        kept.contains(&format!("kept {first}: retired at ")),
        "{kept}"
    );
    assert!(!kept.contains("removed"), "{kept}");
    assert!(
        kept.contains("keys stay 7d1m after they stop signing"),
        "{kept}"
    );

    // A minute short of the horizon it stays; past it, it goes, and only it.
    age_retirement(&dir, &first, KEEP_SECS - 60);
    let still = stdout(&keys_command("prune", &config));
    assert!(!still.contains("removed"), "{still}");
    assert!(dir.join(format!("{first}.eddsa.pem")).is_file());
    age_retirement(&dir, &first, 120);
    let pruned = stdout(&keys_command("prune", &config));
    assert!(
        pruned.contains(&format!(
            "removed {first}: no pass it signed can still be valid"
        )),
        "{pruned}"
    );
    assert!(
        pruned.contains(&format!("kept {second}: active")),
        "{pruned}"
    );
    assert!(!dir.join(format!("{first}.eddsa.pem")).exists());
    assert!(!dir.join(format!("{first}.retired")).exists());
    assert!(dir.join(format!("{second}.eddsa.pem")).is_file());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_api_prunes_and_every_listener_stops_publishing_the_key() {
    let site = AdminSite::new(ROOM);
    let mut server = site.site.start();
    let client = support::client();
    server.wait_ready(&client).await;
    let admin = AdminClient::new(&site.admin_url());
    admin.wait_ready().await;

    let (status, rotated) = admin.admin(Method::POST, "/keys/rotate", None).await;
    assert_eq!(status, StatusCode::OK, "{rotated}");
    let new = rotated["active_kid"].as_str().unwrap().to_owned();
    let old = rotated["kids"][1].as_str().unwrap().to_owned();

    let (status, kept) = admin.admin(Method::POST, "/keys/prune", None).await;
    assert_eq!(status, StatusCode::OK, "{kept}");
    assert_eq!(kept["removed"], json!([]));
    assert_eq!(kept["keep_secs"], KEEP_SECS);
    assert_eq!(kept["kept"][0], json!({"kid": new, "reason": "active"}));
    assert_eq!(kept["kept"][1]["kid"], old.as_str());
    assert_eq!(kept["kept"][1]["reason"], "passes_may_be_valid");

    age_retirement(&site.site.keys_dir(), &old, KEEP_SECS);
    let (status, pruned) = admin.admin(Method::POST, "/keys/prune", None).await;
    assert_eq!(status, StatusCode::OK, "{pruned}");
    assert_eq!(pruned["removed"], json!([old]));
    assert_eq!(pruned["kept"], json!([{"kid": new, "reason": "active"}]));
    assert_eq!(jwks_kids(&client, &server.url()).await, [new]);

    let (status, _) = admin
        .call(Method::POST, "/keys/prune", Some(READ_KEY), None)
        .await;
    assert_eq!(
        status,
        StatusCode::FORBIDDEN,
        "a read-only key cannot prune"
    );
}

// Keys shared through Redis --------------------------------------------------------------------

/// A node of its own disk (its `[keys] dir` is never used) whose keys are in `redis`, sealed
/// with the key-encryption key in `kek` (written to the site's own file).
struct RedisNode {
    site: Site,
    admin_port: u16,
}

impl RedisNode {
    fn new(redis: &RedisServer, kek: &str) -> RedisNode {
        let site = Site::new();
        let admin_port = free_port();
        let kek_file = site.path().join("kek");
        std::fs::write(&kek_file, kek).unwrap();
        let text = format!(
            "[server]\n\
             listen = \"127.0.0.1:{port}\"\n\
             admin_listen = \"127.0.0.1:{admin_port}\"\n\
             public_url = \"{url}\"\n\
             issuer = \"http://anteroom.test\"\n\
             join_rate_limit = false\n\
             trusted_proxies = [\"127.0.0.1/32\"]\n\
             \n\
             [store]\n\
             backend = \"redis\"\n\
             url = \"{redis_url}\"\n\
             \n\
             [keys]\n\
             dir = {dir}\n\
             storage = \"redis\"\n\
             kek_file = {kek_file}\n\
             \n\
             [auth]\n\
             admin_keys = [\"{admin}\"]\n\
             \n\
             {ROOM}\n",
            port = site.port,
            url = site.public_url(),
            redis_url = redis.url(),
            dir = toml_string(&site.keys_dir()),
            kek_file = toml_string(&kek_file),
            admin = key_hash(ADMIN_KEY),
        );
        std::fs::write(site.config_path(), text).unwrap();
        RedisNode { site, admin_port }
    }

    fn admin(&self) -> AdminClient {
        AdminClient::new(&format!("http://127.0.0.1:{}", self.admin_port))
    }
}

/// 32 bytes in hex, as `openssl rand -hex 32` prints them.
const KEK: &str = "6a1f0c3e9b8d7a6f5e4d3c2b1a09f8e7d6c5b4a39281706f5e4d3c2b1a098877\n";
const OTHER_KEK: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

/// The kids a node's JWKS lists.
async fn jwks_kids(client: &reqwest::Client, node: &str) -> Vec<String> {
    let jwks: Value = client
        .get(format!("{node}/.well-known/jwks.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    jwks["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|key| key["kid"].as_str().unwrap().to_owned())
        .collect()
}

/// A pass from joining the room on `node` (the room admits everyone at once).
async fn pass_from(client: &reqwest::Client, node: &str) -> String {
    let joined: Value = client
        .post(format!("{node}/_anteroom/v1/rooms/shop/join"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    joined["pass"].as_str().unwrap().to_owned()
}

/// The status of `node`'s verify endpoint for a request to the room's pages with `pass`.
async fn verify_on(client: &reqwest::Client, node: &str, pass: &str) -> u16 {
    client
        .get(format!("{node}/_anteroom/verify"))
        .header("x-original-uri", "/shop/cart")
        .header("cookie", format!("anteroom_p_shop={pass}"))
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// Every entry of the shared key set as Redis holds it.
fn raw_entries(redis: &RedisServer) -> Vec<(String, String)> {
    // Piped, redis-cli prints one field or value a line (sealed values have no line breaks).
    let listing = redis.cli(&["HGETALL", "anteroom:{keys}:entries"]);
    let values: Vec<String> = listing.lines().map(str::to_owned).collect();
    values
        .chunks(2)
        .map(|pair| (pair[0].clone(), pair[1].clone()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_share_sealed_keys_through_redis_without_a_shared_disk() {
    let redis = RedisServer::start();
    let client = support::client();
    let node_a = RedisNode::new(&redis, KEK);
    let node_b = RedisNode::new(&redis, KEK);
    let mut server_a = node_a.site.start();
    server_a.wait_ready(&client).await;
    let mut server_b = node_b.site.start();
    server_b.wait_ready(&client).await;
    let (url_a, url_b) = (server_a.url(), server_b.url());

    // One key set: node B loaded what node A made, and verifies A's passes.
    let first = jwks_kids(&client, &url_a).await;
    assert_eq!(first.len(), 1);
    assert_eq!(jwks_kids(&client, &url_b).await, first);
    let pass = pass_from(&client, &url_a).await;
    assert_eq!(support::jwt_header(&pass)["kid"], first[0].as_str());
    assert_eq!(verify_on(&client, &url_b, &pass).await, 200);
    assert!(
        !node_a.site.keys_dir().exists() && !node_b.site.keys_dir().exists(),
        "no key touches either node's disk"
    );

    // Redis holds only sealed entries: no key, secret or kid in plain text; each opens with
    // the key-encryption key.
    let kek = KeyEncryptionKey::from_text(KEK).unwrap();
    let entries = raw_entries(&redis);
    let names: Vec<&str> = entries.iter().map(|(name, _)| name.as_str()).collect();
    assert!(names.contains(&"active"), "{names:?}");
    assert!(names.contains(&"ticket.key"), "{names:?}");
    let key_entry = format!("{}.eddsa.pem", first[0]);
    assert!(names.contains(&key_entry.as_str()), "{names:?}");
    for (name, sealed) in &entries {
        assert!(sealed.starts_with("k1."), "{name} is sealed: {sealed}");
        let opened = kek.open(name, sealed).unwrap();
        assert!(
            !sealed.contains(opened.trim()),
            "{name} is not in plain text"
        );
    }
    let pem = kek
        .open(
            &key_entry,
            &entries
                .iter()
                .find(|(name, _)| *name == key_entry)
                .unwrap()
                .1,
        )
        .unwrap();
    assert!(
        pem.contains("PRIVATE KEY"),
        "the sealed entry is the private key"
    );
    let raw = redis.cli(&["HGETALL", "anteroom:{keys}:entries"]);
    assert!(!raw.contains("PRIVATE"), "{raw}");
    let base64_body: String = pem
        .lines()
        .filter(|line| !line.starts_with("-----"))
        .collect();
    assert!(
        !raw.contains(&base64_body),
        "the private key's bytes are not in redis"
    );

    // A rotation on node A reaches node B within two seconds: B publishes and verifies the
    // new key, and A's new passes carry it.
    let (status, rotated) = node_a
        .admin()
        .admin(Method::POST, "/keys/rotate", None)
        .await;
    assert_eq!(status, StatusCode::OK, "{rotated}");
    let rotated_at = Instant::now();
    let new_kid = rotated["active_kid"].as_str().unwrap().to_owned();
    loop {
        let kids = jwks_kids(&client, &url_b).await;
        if kids.first() == Some(&new_kid) {
            assert!(kids.contains(&first[0]), "the old key still verifies");
            break;
        }
        assert!(
            rotated_at.elapsed() < Duration::from_secs(2),
            "node B does not publish the rotated key after {:?}",
            rotated_at.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let new_pass = pass_from(&client, &url_a).await;
    assert_eq!(support::jwt_header(&new_pass)["kid"], new_kid.as_str());
    assert_eq!(verify_on(&client, &url_b, &new_pass).await, 200);
    assert_eq!(
        verify_on(&client, &url_b, &pass).await,
        200,
        "old passes still verify"
    );
    // Node B signs with the new key too.
    let pass_b = pass_from(&client, &url_b).await;
    assert_eq!(support::jwt_header(&pass_b)["kid"], new_kid.as_str());
    assert_eq!(verify_on(&client, &url_a, &pass_b).await, 200);
    assert_eq!(
        verify_on(&client, &url_b, "not-a-pass").await,
        401,
        "the room is full: only a pass lets a visitor through"
    );

    // The CLI works on the keys in Redis too: nothing to prune just after a rotation.
    let pruned = stdout(&keys_command("prune", &node_b.site.config_path()));
    assert!(
        pruned.contains(&format!("kept {new_kid}: active")),
        "{pruned}"
    );
    assert!(
        pruned.contains(&format!("kept {}: retired at ", first[0])),
        "{pruned}"
    );
    assert!(!pruned.contains("removed"), "{pruned}");
    let inspected = run(&[
        "token",
        "inspect",
        &pass,
        "--config",
        node_b.site.config_path().to_str().unwrap(),
    ]);
    assert_eq!(inspected.status.code(), Some(0), "{}", stderr(&inspected));
    assert!(stdout(&inspected).contains("signature: valid"));

    // A node with another key-encryption key stops at start-up, saying why, and changes
    // nothing in Redis.
    let before = redis.cli(&["GET", "anteroom:{keys}:version"]);
    let stranger = RedisNode::new(&redis, OTHER_KEK);
    let mut refused = stranger.site.start();
    let status = refused
        .wait_exit(Duration::from_secs(20))
        .expect("a node with the wrong key-encryption key exits");
    assert_eq!(status.code(), Some(EXIT_BAD_CONFIG), "{}", refused.log());
    let log = refused.log();
    assert!(log.contains("kek_file"), "{log}");
    assert!(log.contains("does not open key entry"), "{log}");
    assert_eq!(redis.cli(&["GET", "anteroom:{keys}:version"]), before);
    assert_eq!(jwks_kids(&client, &url_a).await.len(), 2);

    // check-config reads the key-encryption key file too.
    std::fs::write(stranger.site.path().join("kek"), "not a key").unwrap();
    let checked = run(&[
        "check-config",
        "--config",
        stranger.site.config_path().to_str().unwrap(),
    ]);
    assert_eq!(checked.status.code(), Some(EXIT_BAD_CONFIG));
    assert!(
        stderr(&checked).contains("unusable key-encryption key"),
        "{}",
        stderr(&checked)
    );
    std::fs::remove_file(stranger.site.path().join("kek")).unwrap();
    let checked = run(&[
        "check-config",
        "--config",
        stranger.site.config_path().to_str().unwrap(),
    ]);
    assert_eq!(checked.status.code(), Some(EXIT_BAD_CONFIG));
    assert!(
        stderr(&checked).contains("[keys] kek_file: cannot read"),
        "{}",
        stderr(&checked)
    );
}
