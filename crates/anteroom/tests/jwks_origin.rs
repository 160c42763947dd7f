//! An origin verifies anteroom's passes with nothing but the published JWKS (SPEC §1.3, §4),
//! through `jsonwebtoken`'s own verifier rather than anteroom's code: for each signing
//! algorithm a server is started, a visitor is admitted at once, and the pass is checked the
//! way a site would check it.
#![allow(clippy::unwrap_used)]

mod support;

use std::time::Instant;

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::Value;

use support::Site;

const ROOM: &str = "shop";

/// A room with no limits: the first visitor is admitted at once and gets a pass in the join.
const ROOM_CONFIG: &str = r#"
[[room]]
id = "shop"
mode = "queue"
session_ttl = "10m"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn origin_verifies_an_eddsa_pass_with_the_jwks() {
    check("EdDSA", Algorithm::EdDSA).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn origin_verifies_an_es256_pass_with_the_jwks() {
    check("ES256", Algorithm::ES256).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn origin_verifies_an_rs256_pass_with_the_jwks() {
    check("RS256", Algorithm::RS256).await;
}

/// Starts a server signing with `configured`, joins, and verifies the pass as an origin.
async fn check(configured: &str, algorithm: Algorithm) {
    let started = Instant::now();
    // jsonwebtoken picks its crypto backend per process; this one uses RustCrypto.
    let _ = jsonwebtoken::crypto::rust_crypto::DEFAULT_PROVIDER.install_default();
    let site = Site::new();
    site.write_config(configured, ROOM_CONFIG);
    let client = support::client();
    let mut server = site.start();
    server.wait_ready(&client).await;
    let ready_after = started.elapsed();
    let public_url = site.public_url();

    let status = support::join(&client, &server.url(), ROOM).await;
    assert_eq!(status.state, "admitted", "an empty room admits at once");
    let pass = status.pass.expect("an admitted join carries the pass");

    let document: Value = client
        .get(format!("{}/.well-known/jwks.json", server.url()))
        .send()
        .await
        .unwrap()
        .error_for_status()
        .unwrap()
        .json()
        .await
        .unwrap();
    for key in document["keys"].as_array().expect("a JWKS has keys") {
        for private in ["d", "p", "q", "dp", "dq", "qi", "k"] {
            assert!(
                key.get(private).is_none(),
                "the JWKS publishes no private member `{private}`: {key}"
            );
        }
    }
    let jwks: JwkSet = serde_json::from_value(document).unwrap();
    let header = jsonwebtoken::decode_header(&pass).unwrap();
    assert_eq!(
        header.alg, algorithm,
        "the pass is signed with {configured}"
    );
    let kid = header.kid.expect("every pass names its key");
    let jwk = jwks
        .find(&kid)
        .unwrap_or_else(|| panic!("the JWKS lists the pass's key {kid}"));
    let key = DecodingKey::from_jwk(jwk).unwrap();
    let mut validation = Validation::new(algorithm);
    validation.set_audience(&[ROOM]);
    validation.set_issuer(&[public_url.as_str()]);

    let claims = jsonwebtoken::decode::<Value>(&pass, &key, &validation)
        .unwrap_or_else(|error| panic!("jsonwebtoken rejects a genuine {configured} pass: {error}"))
        .claims;
    #[allow(clippy::disallowed_methods)]
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert_eq!(claims["aud"], ROOM);
    assert_eq!(claims["iss"], public_url.as_str());
    let sub = claims["sub"].as_str().expect("sub is the session id");
    assert!(!sub.is_empty());
    assert_eq!(claims["jti"].as_str(), Some(sub), "jti = sub = session id");
    assert_eq!(claims["pos"].as_u64(), Some(status.position));
    assert_eq!(
        claims["pos"].as_u64(),
        Some(1),
        "the first visitor holds position 1"
    );
    assert_eq!(
        claims["gen"].as_u64(),
        Some(1),
        "a fresh room is generation 1"
    );
    assert_eq!(claims["scope"], "room");
    let exp = claims["exp"].as_u64().expect("exp");
    assert!(exp > now, "exp {exp} is in the future (now {now})");
    assert!(
        exp <= now + 10 * 60 + 5,
        "exp {exp} follows session_ttl = 10m"
    );
    let nbf = claims["nbf"].as_u64().expect("nbf");
    let iat = claims["iat"].as_u64().expect("iat");
    assert!(
        nbf <= now + 1 && iat <= now + 1,
        "nbf {nbf} and iat {iat} are not in the future"
    );
    assert!(
        claims.get("uid").is_none_or(Value::is_null),
        "anonymous rooms bind no uid"
    );

    let tampered = support::tamper_payload(&pass);
    let refused = jsonwebtoken::decode::<Value>(&tampered, &key, &validation)
        .expect_err("a pass with a changed payload must not verify");
    assert_eq!(
        refused.kind(),
        &ErrorKind::InvalidSignature,
        "tampering breaks the signature"
    );
    let mut other_room = Validation::new(algorithm);
    other_room.set_audience(&["another-room"]);
    other_room.set_issuer(&[public_url.as_str()]);
    let refused = jsonwebtoken::decode::<Value>(&pass, &key, &other_room)
        .expect_err("a pass for one room is not a pass for another");
    assert_eq!(refused.kind(), &ErrorKind::InvalidAudience);

    eprintln!(
        "jwks_origin {configured}: ready after {ready_after:.2?}, verified after {:.2?}",
        started.elapsed()
    );
}
