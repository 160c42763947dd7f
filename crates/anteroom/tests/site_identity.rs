//! Signed-in visitors (SPEC §3, §14.1: `identity = "jwt:<claim>"` with `[room.identity_jwt]`)
//! through the real binary: a small site in the test publishes its key set (JWKS) and stands
//! as the upstream; tokens are signed here with `jsonwebtoken`, as a site's login would.
#![allow(clippy::unwrap_used)]

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Json;
use axum::extract::State;
use axum::http::Method;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use reqwest::StatusCode;
use reqwest::header::{AUTHORIZATION, COOKIE};
use serde_json::{Value, json};

use support::{Server, Site, jwt_claims};

const ISSUER: &str = "https://login.test/";

/// The site: its key set at `/jwks.json` (every fetch counted), anything else echoed as the
/// upstream.
#[derive(Clone)]
struct SiteOrigin {
    jwks: Arc<Mutex<Value>>,
    fetches: Arc<AtomicUsize>,
}

impl SiteOrigin {
    /// Serves on a loopback port; returns the origin and its `http://127.0.0.1:<port>`.
    async fn start(keys: &[&SigningKey]) -> (SiteOrigin, String) {
        let origin = SiteOrigin {
            jwks: Arc::new(Mutex::new(key_set(keys))),
            fetches: Arc::new(AtomicUsize::new(0)),
        };
        let app = axum::Router::new()
            .route("/jwks.json", axum::routing::get(serve_key_set))
            .fallback(echo)
            .with_state(origin.clone());
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (origin, url)
    }

    fn publish(&self, keys: &[&SigningKey]) {
        *self.jwks.lock().unwrap() = key_set(keys);
    }

    fn fetches(&self) -> usize {
        self.fetches.load(Ordering::SeqCst)
    }
}

async fn serve_key_set(State(origin): State<SiteOrigin>) -> Json<Value> {
    origin.fetches.fetch_add(1, Ordering::SeqCst);
    Json(origin.jwks.lock().unwrap().clone())
}

async fn echo(method: Method) -> Json<Value> {
    Json(json!({ "method": method.as_str() }))
}

/// An ES256 key of the site, with its `kid`.
struct SigningKey {
    kid: String,
    encoding: EncodingKey,
    public: Value,
}

impl SigningKey {
    fn generate(kid: &str) -> SigningKey {
        let pair = rcgen::KeyPair::generate().unwrap();
        // The uncompressed P-256 point: 0x04, then x and y.
        let point = pair.public_key_raw();
        assert_eq!(point.len(), 65);
        SigningKey {
            kid: kid.to_owned(),
            encoding: EncodingKey::from_ec_pem(pair.serialize_pem().as_bytes()).unwrap(),
            public: json!({
                "kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256", "kid": kid,
                "x": URL_SAFE_NO_PAD.encode(&point[1..33]),
                "y": URL_SAFE_NO_PAD.encode(&point[33..]),
            }),
        }
    }

    /// A token for `subject` with the claims `overrides` replaced (`null` removes one).
    fn sign(&self, subject: &str, overrides: Value) -> String {
        self.sign_as(&self.kid, subject, overrides)
    }

    fn sign_as(&self, kid: &str, subject: &str, overrides: Value) -> String {
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some(kid.to_owned());
        jsonwebtoken::encode(
            &header,
            &claims(subject, "shop-web", overrides),
            &self.encoding,
        )
        .unwrap()
    }
}

fn key_set(keys: &[&SigningKey]) -> Value {
    json!({ "keys": keys.iter().map(|key| key.public.clone()).collect::<Vec<_>>() })
}

/// `iss`, `aud`, `sub`, `email`, `iat` and an `exp` an hour away, with `overrides` applied.
fn claims(subject: &str, audience: &str, overrides: Value) -> Value {
    // The site's clock, not anteroom's: the tests stand in for the site here.
    #[allow(clippy::disallowed_methods)]
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let mut claims = json!({
        "iss": ISSUER, "aud": audience, "sub": subject,
        "email": format!("{subject}@example.test"), "iat": now, "exp": now + 3600,
    });
    for (name, value) in overrides.as_object().unwrap() {
        match value {
            Value::Null => claims.as_object_mut().unwrap().remove(name),
            _ => claims
                .as_object_mut()
                .unwrap()
                .insert(name.clone(), value.clone()),
        };
    }
    claims
}

fn now_secs() -> i64 {
    claims("x", "x", json!({}))["iat"].as_i64().unwrap()
}

/// A server with the rooms `rooms` (`{origin}` and `{secret}` filled in).
async fn start_server(site: &Site, origin: &str, rooms: &str) -> Server {
    let secret_file = site.path().join("site-secret");
    std::fs::write(&secret_file, format!("{HS256_SECRET}\n")).unwrap();
    let rooms = rooms
        .replace("{origin}", origin)
        .replace("{secret}", &support::toml_string(&secret_file));
    site.write_config("EdDSA", &rooms);
    let mut server = site.start();
    server.wait_ready(&support::client()).await;
    server
}

const HS256_SECRET: &str = "a-site-secret-of-at-least-thirty-two-bytes";

const SHOP: &str = r#"
[upstream]
url = "{origin}"

[[room]]
id = "shop"
max_active = 1
identity = "jwt:sub"

[room.identity_jwt]
header = "Authorization"
jwks_url = "{origin}/jwks.json"
issuer = "https://login.test/"
audience = "shop-web"
required = true

[[route]]
paths = ["/account/**"]
rooms = ["shop"]

# A site whose key set cannot be fetched (nothing listens on the discard port).
[[room]]
id = "offline"
identity = "jwt:sub"

[room.identity_jwt]
header = "Authorization"
jwks_url = "http://127.0.0.1:9/jwks.json"
issuer = "https://login.test/"
audience = "shop-web"
required = true
"#;

/// `POST …/join` with `token` as `Authorization: Bearer`; the status and the JSON body.
async fn join_with(server: &Server, room: &str, headers: &[(&str, String)]) -> (StatusCode, Value) {
    let mut request =
        support::client().post(format!("{}/_anteroom/v1/rooms/{room}/join", server.url()));
    for (name, value) in headers {
        request = request.header(*name, value);
    }
    let response = request.send().await.unwrap();
    (response.status(), response.json().await.unwrap())
}

fn bearer(token: &str) -> Vec<(&'static str, String)> {
    vec![(AUTHORIZATION.as_str(), format!("Bearer {token}"))]
}

async fn waiting(server: &Server, room: &str) -> u64 {
    let summary: Value = support::client()
        .get(format!("{}/_anteroom/v1/rooms/{room}", server.url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    summary["waiting"].as_u64().unwrap()
}

/// One place per signed-in user: a user joining again gets their place back, not another,
/// and the pass carries their `sub` as `uid`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_in_user_holds_one_place() {
    let _ = jsonwebtoken::crypto::rust_crypto::DEFAULT_PROVIDER.install_default();
    let key = SigningKey::generate("site-1");
    let (_origin, origin_url) = SiteOrigin::start(&[&key]).await;
    let site = Site::new();
    let server = start_server(&site, &origin_url, SHOP).await;

    let (status, alice) = join_with(&server, "shop", &bearer(&key.sign("alice", json!({})))).await;
    assert_eq!(status, StatusCode::OK, "{alice}");
    assert_eq!(alice["state"], "admitted", "{alice}");
    assert_eq!(jwt_claims(alice["pass"].as_str().unwrap())["uid"], "alice");
    // A new token of the same user (another device, a later login): the same place.
    let again_token = key.sign("alice", json!({"iat": now_secs() + 1}));
    let (_, again) = join_with(&server, "shop", &bearer(&again_token)).await;
    assert_eq!(again["position"], alice["position"], "{again}");
    assert_eq!(
        jwt_claims(again["pass"].as_str().unwrap())["sub"],
        jwt_claims(alice["pass"].as_str().unwrap())["sub"],
        "the same session, no second slot"
    );

    let bob_token = key.sign("bob", json!({}));
    let (_, bob) = join_with(&server, "shop", &bearer(&bob_token)).await;
    assert_eq!(bob["state"], "waiting", "{bob}");
    let (_, bob_again) = join_with(&server, "shop", &bearer(&bob_token)).await;
    assert_eq!(bob_again["position"], bob["position"]);
    assert_eq!(bob_again["ticket"], bob["ticket"]);
    assert_eq!(waiting(&server, "shop").await, 1, "bob waits once");
}

/// Tokens that must not give an identity are refused with a problem saying why, and change
/// nothing in the room.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_site_tokens_are_refused_with_a_clear_problem() {
    let _ = jsonwebtoken::crypto::rust_crypto::DEFAULT_PROVIDER.install_default();
    let key = SigningKey::generate("site-1");
    let stranger = SigningKey::generate("site-1");
    let (_origin, origin_url) = SiteOrigin::start(&[&key]).await;
    let site = Site::new();
    let server = start_server(&site, &origin_url, SHOP).await;
    // Fill the one slot, so a wrongly accepted join would show as a waiting ticket.
    let (status, _) = join_with(&server, "shop", &bearer(&key.sign("alice", json!({})))).await;
    assert_eq!(status, StatusCode::OK);

    let (status, problem) = join_with(&server, "shop", &[]).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{problem}");
    assert_eq!(problem["code"], "identity_required");
    // The waiting page says so to a browser, and takes no place either.
    let page = support::client()
        .get(format!("{}/_anteroom/wait/shop", server.url()))
        .header(reqwest::header::ACCEPT, "text/html")
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::UNAUTHORIZED);
    assert!(
        page.text()
            .await
            .unwrap()
            .contains("Please sign in to the site first")
    );

    let hs256 = {
        let mut header = Header::new(Algorithm::HS256);
        header.kid = Some("site-1".to_owned());
        let claims = claims("mallory", "shop-web", json!({}));
        jsonwebtoken::encode(&header, &claims, &EncodingKey::from_secret(b"guess")).unwrap()
    };
    let cases = [
        (
            key.sign("eve", json!({"iss": "https://other.test/"})),
            "another issuer",
        ),
        (
            key.sign("eve", json!({"aud": "other-web"})),
            "another audience",
        ),
        (
            key.sign("eve", json!({"exp": now_secs() - 120})),
            "has expired",
        ),
        (
            key.sign("eve", json!({"nbf": now_secs() + 600})),
            "not valid yet",
        ),
        (
            key.sign("eve", json!({"sub": null})),
            "no usable `sub` claim",
        ),
        (stranger.sign("eve", json!({})), "does not verify"),
        (
            support::tamper_payload(&key.sign("eve", json!({}))),
            "does not verify",
        ),
        (
            key.sign_as("site-9", "eve", json!({})),
            "a key the site does not publish",
        ),
        (hs256, "signed with HS256"),
        ("not-a-jwt".to_owned(), "not a well-formed JWT"),
    ];
    for (token, reason) in cases {
        let (status, problem) = join_with(&server, "shop", &bearer(&token)).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{reason}: {problem}");
        assert_eq!(problem["code"], "identity_invalid", "{problem}");
        let detail = problem["detail"].as_str().unwrap();
        assert!(detail.contains(reason), "{detail:?} should say {reason:?}");
    }
    assert_eq!(
        waiting(&server, "shop").await,
        0,
        "no refused token took a place"
    );

    // Keys that cannot be had are the node's problem, not the visitor's: 503, try again.
    let response = support::client()
        .post(format!("{}/_anteroom/v1/rooms/offline/join", server.url()))
        .header(
            AUTHORIZATION,
            format!("Bearer {}", key.sign("eve", json!({}))),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(response.headers().contains_key("retry-after"));
    let problem: Value = response.json().await.unwrap();
    assert_eq!(problem["code"], "identity_unavailable", "{problem}");
    assert_eq!(waiting(&server, "offline").await, 0);
}

/// Tokens naming random `kid`s cannot make the node fetch the key set per request; a new key
/// the site publishes (rotation) is picked up once the refetch pause has passed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_rotation_is_picked_up_and_unknown_kids_do_not_flood_the_site() {
    let _ = jsonwebtoken::crypto::rust_crypto::DEFAULT_PROVIDER.install_default();
    let old = SigningKey::generate("2026-old");
    let (origin, origin_url) = SiteOrigin::start(&[&old]).await;
    let site = Site::new();
    let server = start_server(&site, &origin_url, SHOP).await;
    let (status, _) = join_with(&server, "shop", &bearer(&old.sign("alice", json!({})))).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(origin.fetches(), 1);

    let started = Instant::now();
    for attempt in 0..40 {
        let token = old.sign_as(&format!("random-{attempt}"), "mallory", json!({}));
        let (status, _) = join_with(&server, "shop", &bearer(&token)).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
    }
    // One fetch per pause (5 s) at most, whatever the tokens ask for.
    let allowed = 2 + started.elapsed().as_secs() as usize / 5;
    assert!(
        origin.fetches() <= allowed,
        "{} fetches for 40 unknown kids in {:?}",
        origin.fetches(),
        started.elapsed()
    );

    let new = SigningKey::generate("2026-new");
    origin.publish(&[&old, &new]);
    let token = new.sign("bob", json!({}));
    let deadline = Instant::now() + Duration::from_secs(15);
    let bob = loop {
        let (status, body) = join_with(&server, "shop", &bearer(&token)).await;
        if status == StatusCode::OK {
            break body;
        }
        assert_eq!(body["code"], "identity_invalid", "{body}");
        assert!(Instant::now() < deadline, "the new key was never picked up");
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert_eq!(bob["state"], "waiting", "{bob}");
    // The old key still verifies while the site publishes it.
    let (status, _) = join_with(&server, "shop", &bearer(&old.sign("carol", json!({})))).await;
    assert_eq!(status, StatusCode::OK);
}

/// The gateway holds mutating requests to the pass's user: the same pass with another user's
/// token (or none) is refused; reading is not bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutating_requests_must_come_from_the_pass_holder() {
    let _ = jsonwebtoken::crypto::rust_crypto::DEFAULT_PROVIDER.install_default();
    let key = SigningKey::generate("site-1");
    let (_origin, origin_url) = SiteOrigin::start(&[&key]).await;
    let site = Site::new();
    let server = start_server(&site, &origin_url, SHOP).await;
    let alice_token = key.sign("alice", json!({}));
    let (_, alice) = join_with(&server, "shop", &bearer(&alice_token)).await;
    let pass_cookie = format!("anteroom_p_shop={}", alice["pass"].as_str().unwrap());

    let send = |method: reqwest::Method, token: Option<String>| {
        let mut request = support::client()
            .request(method, format!("{}/account/transfer", server.url()))
            .header(COOKIE, pass_cookie.clone());
        if let Some(token) = token {
            request = request.header(AUTHORIZATION, format!("Bearer {token}"));
        }
        request.send()
    };
    let response = send(reqwest::Method::POST, Some(alice_token.clone()))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.json::<Value>().await.unwrap()["method"], "POST");

    let response = send(reqwest::Method::POST, Some(key.sign("mallory", json!({}))))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    assert_eq!(
        response.json::<Value>().await.unwrap()["code"],
        "identity_mismatch"
    );

    let response = send(reqwest::Method::DELETE, None).await.unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        response.json::<Value>().await.unwrap()["code"],
        "identity_required"
    );

    let response = send(reqwest::Method::GET, None).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK, "reading is not bound");

    // A browser arriving without a pass or a sign-in is asked to sign in, in a page.
    let page = support::client()
        .get(format!("{}/account/me", server.url()))
        .header(reqwest::header::ACCEPT, "text/html")
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::UNAUTHORIZED);
    assert!(
        page.text()
            .await
            .unwrap()
            .contains("Please sign in to the site first")
    );
}

const LOBBY: &str = r#"
[[room]]
id = "lobby"
identity = "jwt:email"

[room.identity_jwt]
cookie = "site_session"
hs256_secret_file = {secret}
issuer = "https://login.test/"
audience = "lobby-web"
"#;

/// An HS256 site with `required = false`: signed-in visitors hold one place by their email,
/// visitors without a (valid) token join as anonymous, each a place of their own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hs256_sites_and_anonymous_visitors() {
    let _ = jsonwebtoken::crypto::rust_crypto::DEFAULT_PROVIDER.install_default();
    let site = Site::new();
    let server = start_server(&site, "http://127.0.0.1:9", LOBBY).await;
    let hs256 = |secret: &[u8], subject: &str| {
        let claims = claims(subject, "lobby-web", json!({}));
        let token = jsonwebtoken::encode(
            &Header::new(Algorithm::HS256),
            &claims,
            &EncodingKey::from_secret(secret),
        )
        .unwrap();
        vec![(COOKIE.as_str(), format!("site_session={token}"))]
    };
    let signed_in = hs256(HS256_SECRET.as_bytes(), "dana");
    let (status, dana) = join_with(&server, "lobby", &signed_in).await;
    assert_eq!(status, StatusCode::OK, "{dana}");
    assert_eq!(
        jwt_claims(dana["pass"].as_str().unwrap())["uid"],
        "dana@example.test"
    );
    let (_, again) = join_with(&server, "lobby", &signed_in).await;
    assert_eq!(again["position"], dana["position"]);

    let (status, first) = join_with(&server, "lobby", &[]).await;
    assert_eq!(status, StatusCode::OK, "{first}");
    let (_, second) = join_with(&server, "lobby", &[]).await;
    assert_ne!(
        first["position"], second["position"],
        "two anonymous visitors"
    );
    assert!(
        jwt_claims(first["pass"].as_str().unwrap())
            .get("uid")
            .is_none()
    );
    // A token the site did not sign is no identity: anonymous, never somebody's place.
    let forged = hs256(b"not-the-site-secret-but-long-enough-too", "dana");
    let (status, forged) = join_with(&server, "lobby", &forged).await;
    assert_eq!(status, StatusCode::OK, "{forged}");
    assert_ne!(forged["position"], dana["position"]);
    assert!(
        jwt_claims(forged["pass"].as_str().unwrap())
            .get("uid")
            .is_none()
    );

    // The site changes its secret: SIGHUP reads the file again.
    let rotated = "the-site-rotated-its-secret-to-this-one";
    std::fs::write(site.path().join("site-secret"), rotated).unwrap();
    let status = std::process::Command::new("kill")
        .args(["-HUP", &server.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -HUP");
    let erin = hs256(rotated.as_bytes(), "erin");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, body) = join_with(&server, "lobby", &erin).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        if jwt_claims(body["pass"].as_str().unwrap())["uid"] == "erin@example.test" {
            break;
        }
        assert!(Instant::now() < deadline, "the new secret was never read");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `check-config` reads the secret file and names what is wrong, with the line.
#[test]
fn check_config_reports_identity_problems() {
    let site = Site::new();
    let secret_file = site.path().join("short-secret");
    std::fs::write(&secret_file, "short\n").unwrap();
    let rooms = LOBBY.replace("{secret}", &support::toml_string(&secret_file));
    let config = site.write_config("EdDSA", &rooms);
    let output = support::run(&["check-config", "--config", config.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(64));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("holds 5 bytes; at least 32 are needed"),
        "{stderr}"
    );

    let config = site.write_config(
        "EdDSA",
        "[[room]]\nid = \"lobby\"\nidentity = \"jwt:sub\"\n",
    );
    let output = support::run(&["check-config", "--config", config.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(64));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("needs a [room.identity_jwt] table"),
        "{stderr}"
    );
}
