//! The webhook event sink of the real binary (SPEC §8.4): the receiver is down for the first
//! 20 s and anteroom is killed (SIGKILL) and started again in the middle; once the receiver
//! is up every event arrives at least once, in batches signed with HMAC-SHA256.
#![allow(clippy::unwrap_used)]

#[path = "support/admin.rs"]
mod admin_support;
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use reqwest::Method;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use admin_support::{AdminClient, AdminSite};

const SECRET: &str = "webhook-secret-0123456789";

/// How long the receiver stays down.
const RECEIVER_DOWN_FOR: Duration = Duration::from_secs(20);

/// What the receiver got: each request's signature header, delivery header and body.
type Received = Arc<Mutex<Vec<(String, String, Vec<u8>)>>>;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_event_arrives_signed_despite_a_receiver_outage_and_a_restart() {
    tokio::time::timeout(Duration::from_secs(120), run())
        .await
        .expect("the test finishes within two minutes");
}

async fn run() {
    let receiver_port = support::free_port();
    let site = AdminSite::new(&format!(
        "[[events.sink]]\nkind = \"webhook\"\nname = \"hook\"\n\
         url = \"http://127.0.0.1:{receiver_port}/hook\"\nsecret = \"{SECRET}\"\nbatch = 3\n"
    ));
    let started = Instant::now();
    let client = support::client();
    let mut server = site.site.start();
    server.wait_ready(&client).await;
    let admin = AdminClient::new(&site.admin_url());
    admin.wait_ready().await;

    let room = json!({"max_active": 5});
    assert_eq!(
        admin
            .admin(Method::PUT, "/rooms/first", Some(room.clone()))
            .await
            .0,
        StatusCode::CREATED
    );
    admin.admin(Method::POST, "/rooms/first/pause", None).await;
    admin.admin(Method::POST, "/rooms/first/resume", None).await;
    admin
        .admin(
            Method::POST,
            "/rooms/first/advance",
            Some(json!({"count": 2})),
        )
        .await;
    let (status, _) = admin.admin(Method::POST, "/rooms/first/passes", None).await;
    assert_eq!(status, StatusCode::CREATED);

    // Killed with everything undelivered, then started again.
    server.kill();
    let mut server = site.site.start();
    server.wait_ready(&client).await;
    admin.wait_ready().await;
    assert_eq!(
        admin
            .admin(Method::PUT, "/rooms/second", Some(room))
            .await
            .0,
        StatusCode::CREATED
    );
    assert_eq!(
        admin.admin(Method::DELETE, "/rooms/first", None).await.0,
        StatusCode::NO_CONTENT
    );

    tokio::time::sleep(RECEIVER_DOWN_FOR.saturating_sub(started.elapsed())).await;
    let received: Received = Arc::default();
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", receiver_port))
        .await
        .unwrap();
    let app = axum::Router::new()
        .route("/hook", axum::routing::post(receive))
        .with_state(received.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let expected: BTreeSet<(String, String, String)> = [
        ("room.updated", "first", "created"),
        ("room.updated", "first", "pause"),
        ("room.updated", "first", "resume"),
        ("counter.advanced", "first", ""),
        ("pass.issued", "first", ""),
        ("room.updated", "second", "created"),
        ("room.updated", "first", "deleted"),
    ]
    .iter()
    .map(|(kind, room, action)| ((*kind).to_owned(), (*room).to_owned(), (*action).to_owned()))
    .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    let events = loop {
        let events = events_of(&received);
        let seen: BTreeSet<(String, String, String)> = events
            .values()
            .map(|event| {
                (
                    event["type"].as_str().unwrap_or_default().to_owned(),
                    event["room"].as_str().unwrap_or_default().to_owned(),
                    event["data"]["action"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                )
            })
            .collect();
        if expected.is_subset(&seen) {
            break events;
        }
        assert!(
            Instant::now() < deadline,
            "missing events {:?}; log:\n{}",
            expected.difference(&seen).collect::<Vec<_>>(),
            server.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    // Every event carries a unique id (32 hex digits), what receivers deduplicate on; the
    // pass by hand is the store's event, with its session.
    assert!(
        events
            .keys()
            .all(|id| id.len() == 32 && id.chars().all(|c| c.is_ascii_hexdigit()))
    );
    let pass = events
        .values()
        .find(|event| event["type"] == "pass.issued")
        .unwrap();
    assert_eq!(pass["data"]["session"].as_str().unwrap().len(), 22);
    // Every request is signed with the secret over its timestamp and body.
    for (signature, delivery, body) in received.lock().unwrap().iter() {
        let (timestamp, mac) = signature
            .strip_prefix("t=")
            .and_then(|rest| rest.split_once(",v1="))
            .unwrap_or_else(|| panic!("signature header {signature:?}"));
        let signed = [timestamp.as_bytes(), b".", body].concat();
        assert_eq!(
            mac,
            hex(&hmac_sha256(SECRET.as_bytes(), &signed)),
            "a valid signature"
        );
        let timestamp: u64 = timestamp.parse().unwrap();
        // The receiver's own clock, as a real receiver checks the timestamp.
        #[allow(clippy::disallowed_methods)]
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        assert!(now.abs_diff(timestamp) < 120, "a fresh timestamp");
        let batch: Value = serde_json::from_slice(body).unwrap();
        let batch = batch["events"].as_array().unwrap();
        assert!(batch.len() <= 3, "at most `batch` events per request");
        let first = batch.first().unwrap()["id"].as_str().unwrap();
        let last = batch.last().unwrap()["id"].as_str().unwrap();
        assert_eq!(delivery, &format!("{first}-{last}"));
    }
}

async fn receive(
    State(received): State<Received>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> StatusCode {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    received.lock().unwrap().push((
        header("anteroom-signature"),
        header("anteroom-delivery"),
        body.to_vec(),
    ));
    StatusCode::NO_CONTENT
}

/// Every event received, by id (a repeated delivery keeps one).
fn events_of(received: &Received) -> BTreeMap<String, Value> {
    let mut events = BTreeMap::new();
    for (_, _, body) in received.lock().unwrap().iter() {
        let batch: Value = serde_json::from_slice(body).unwrap();
        for event in batch["events"].as_array().unwrap() {
            events.insert(event["id"].as_str().unwrap().to_owned(), event.clone());
        }
    }
    events
}

/// HMAC-SHA256 (RFC 2104), written out here so the test does not trust anteroom's own.
fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    let mut block = [0u8; 64];
    if key.len() > 64 {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let inner_key: Vec<u8> = block.iter().map(|byte| byte ^ 0x36).collect();
    let outer_key: Vec<u8> = block.iter().map(|byte| byte ^ 0x5c).collect();
    let inner = Sha256::digest([inner_key.as_slice(), message].concat());
    Sha256::digest([outer_key.as_slice(), &inner[..]].concat()).into()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// A receiver over TLS on loopback with a self-signed certificate for 127.0.0.1; returns its
/// port, the certificate (PEM) and what it receives.
async fn https_receiver() -> (u16, String, Received) {
    let certified = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap();
    let certificate_pem = certified.cert.pem();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(certified.signing_key.serialize_der().into());
    let tls = rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![certified.cert.der().clone()], key)
    .unwrap();
    let received: Received = Arc::default();
    let app = axum::Router::new()
        .route("/hook", axum::routing::post(receive))
        .with_state(received.clone());
    let port = support::serve_tls(tls, app).await;
    (port, certificate_pem, received)
}

/// An https receiver is reached over TLS when its certificate is trusted (here through the
/// sink's `ca_file`), and never without: anteroom does not post events to a receiver it
/// cannot authenticate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_reach_an_https_receiver_only_when_its_certificate_is_trusted() {
    let (port, certificate_pem, received) = https_receiver().await;
    let roots = tempfile::tempdir().unwrap();
    let ca_file = roots.path().join("receiver.pem");
    std::fs::write(&ca_file, certificate_pem).unwrap();
    let sink = |trust: &str| {
        format!(
            "[[events.sink]]\nkind = \"webhook\"\nname = \"hook\"\n\
             url = \"https://127.0.0.1:{port}/hook\"\nsecret = \"{SECRET}\"\n{trust}"
        )
    };

    // Not trusted: the system's authorities do not vouch for a self-signed certificate.
    let untrusted = AdminSite::new(&sink(""));
    let client = support::client();
    let mut server = untrusted.site.start();
    server.wait_ready(&client).await;
    let admin = AdminClient::new(&untrusted.admin_url());
    admin.wait_ready().await;
    let (status, _) = admin
        .admin(Method::PUT, "/rooms/tls", Some(json!({"max_active": 5})))
        .await;
    assert_eq!(status, StatusCode::CREATED);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        received.lock().unwrap().is_empty(),
        "nothing is posted to an unauthenticated receiver"
    );
    server.kill();

    let trusted = AdminSite::new(&sink(&format!(
        "ca_file = {}\n",
        support::toml_string(&ca_file)
    )));
    let mut server = trusted.site.start();
    server.wait_ready(&client).await;
    let admin = AdminClient::new(&trusted.admin_url());
    admin.wait_ready().await;
    let (status, _) = admin
        .admin(Method::PUT, "/rooms/tls", Some(json!({"max_active": 5})))
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let created = events_of(&received).values().any(|event| {
            event["type"] == "room.updated"
                && event["room"] == "tls"
                && event["data"]["action"] == "created"
        });
        if created {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the trusted receiver gets the events; log:\n{}",
            server.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for (signature, _, body) in received.lock().unwrap().iter() {
        let (timestamp, mac) = signature
            .strip_prefix("t=")
            .and_then(|rest| rest.split_once(",v1="))
            .unwrap();
        let signed = [timestamp.as_bytes(), b".", body].concat();
        assert_eq!(mac, hex(&hmac_sha256(SECRET.as_bytes(), &signed)));
    }
}
