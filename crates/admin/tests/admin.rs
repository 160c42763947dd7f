//! The admin API (SPEC §8.1) through `oneshot`: keys and their kinds, rooms created, changed and
//! deleted at run time, controls, stats, session pages, passes by hand, key rotation, the live
//! event feed. Bad requests must change nothing.

#![allow(clippy::unwrap_used)]

#[allow(dead_code)]
#[path = "../../edge/tests/support/mod.rs"]
mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use http::{Method, Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

use anteroom_admin::{AdminSettings, AdminState, admin_router};
use anteroom_core::config::{PageMode, RouteConfig};
use anteroom_core::ratelimit::rules::RequestMatcher;
use anteroom_core::room::{Mode, RoomConfig};
use anteroom_edge::{Gateway, GatewayOptions};
use anteroom_token::{KeySet, PassExpectations, SigningAlgorithm};
use support::{Call, Harness, Reply, START, capped_room, key_hash, room, room_id};

const ADMIN_KEY: &str = "admin-key-0123456789abcdef";
const READ_KEY: &str = "read-only-key-0123456789abcdef";

/// The public harness with its router swapped for the admin router over the same state.
struct Admin {
    harness: Harness,
    public: Router,
    admin: AdminState,
    _key_dir: tempfile::TempDir,
}

impl Admin {
    async fn new(rooms: Vec<RoomConfig>) -> Admin {
        let mut harness = Harness::new(rooms).await;
        let key_dir = tempfile::tempdir().unwrap();
        KeySet::load_or_generate(key_dir.path(), SigningAlgorithm::EdDsa, START.as_secs()).unwrap();
        let settings = AdminSettings {
            admin_keys: vec![key_hash(ADMIN_KEY)],
            read_keys: vec![key_hash(READ_KEY)],
            key_source: anteroom_api::KeySource::Dir(key_dir.path().to_owned()),
            algorithm: SigningAlgorithm::EdDsa,
            ticket_secret_retention: std::time::Duration::from_secs(3600),
        };
        let admin = AdminState::new(harness.state.clone(), settings, None);
        let public = std::mem::replace(&mut harness.app, admin_router(admin.clone()));
        Admin {
            harness,
            public,
            admin,
            _key_dir: key_dir,
        }
    }

    /// An admin call with the read-write key.
    async fn call(&self, call: Call) -> Reply {
        self.harness
            .check(call.header("authorization", &format!("Bearer {ADMIN_KEY}")))
            .await
    }

    /// An admin call with the read-only key.
    async fn read(&self, call: Call) -> Reply {
        self.harness
            .check(call.header("authorization", &format!("Bearer {READ_KEY}")))
            .await
    }

    /// An admin call as given (no key added).
    async fn bare(&self, call: Call) -> Reply {
        self.harness.check(call).await
    }

    async fn public(&self, method: Method, uri: &str) -> (StatusCode, Value) {
        let request = Request::builder()
            .method(method)
            .uri(uri)
            .body(Body::empty())
            .unwrap();
        self.send_public(request).await
    }

    /// [`public`](Self::public) with one header.
    async fn public_with(
        &self,
        method: Method,
        uri: &str,
        (name, value): (&str, String),
    ) -> (StatusCode, Value) {
        let request = Request::builder()
            .method(method)
            .uri(uri)
            .header(name, value)
            .body(Body::empty())
            .unwrap();
        self.send_public(request).await
    }

    async fn send_public(&self, request: Request<Body>) -> (StatusCode, Value) {
        let response = self.public.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    async fn config(&self, id: &str) -> RoomConfig {
        self.harness.store.room(&room_id(id)).await.unwrap()
    }
}

fn put(uri: &str, body: Value) -> Call {
    Call::method(Method::PUT, uri).json(body.to_string())
}

fn patch(uri: &str, body: Value) -> Call {
    Call::method(Method::PATCH, uri).json(body.to_string())
}

#[tokio::test]
async fn calls_without_a_valid_key_are_refused_with_401() {
    let admin = Admin::new(vec![room("a")]).await;
    for call in [
        Call::get("/admin/v1/rooms"),
        Call::get("/admin/v1/rooms/a"),
        Call::get("/admin/v1/rooms/a/stats"),
        Call::post("/admin/v1/rooms/a/pause"),
        Call::get("/admin/v1/events"),
    ] {
        let reply = admin.bare(call).await;
        reply.assert_problem(StatusCode::UNAUTHORIZED, "unauthorized");
        assert!(
            reply
                .header("www-authenticate")
                .unwrap()
                .starts_with("Bearer")
        );
    }
    for wrong in ["Bearer nope", "Basic YWRtaW4=", "Bearer ", ADMIN_KEY] {
        let reply = admin
            .bare(Call::get("/admin/v1/rooms").header("authorization", wrong))
            .await;
        reply.assert_problem(StatusCode::UNAUTHORIZED, "unauthorized");
    }
    // A service key is not an admin key.
    let reply = admin
        .bare(
            Call::get("/admin/v1/rooms")
                .header("authorization", &format!("Bearer {}", support::SERVICE_KEY)),
        )
        .await;
    reply.assert_problem(StatusCode::UNAUTHORIZED, "unauthorized");
    assert_eq!(admin.config("a").await.mode, Mode::Queue);
}

#[tokio::test]
async fn read_only_keys_read_but_never_write() {
    let admin = Admin::new(vec![capped_room("a", 5)]).await;
    assert_eq!(
        admin.read(Call::get("/admin/v1/rooms")).await.status,
        StatusCode::OK
    );
    assert_eq!(
        admin
            .read(Call::get("/admin/v1/rooms/a/stats"))
            .await
            .status,
        StatusCode::OK
    );
    assert_eq!(
        admin
            .read(Call::get("/admin/v1/rooms/a/sessions"))
            .await
            .status,
        StatusCode::OK
    );
    let before = admin.harness.counters("a").await;
    for call in [
        put("/admin/v1/rooms/b", json!({})),
        patch("/admin/v1/rooms/a", json!({"max_active": 1})),
        Call::delete("/admin/v1/rooms/a"),
        Call::post("/admin/v1/rooms/a/pause"),
        Call::post("/admin/v1/rooms/a/close"),
        Call::post("/admin/v1/rooms/a/advance").json(r#"{"count": 1}"#),
        Call::post("/admin/v1/rooms/a/reset"),
        Call::post("/admin/v1/rooms/a/passes"),
        Call::post("/admin/v1/keys/rotate"),
        Call::post("/admin/v1/keys/prune"),
        Call::method(Method::PUT, "/admin/v1/rooms/a/signal").json("{}"),
    ] {
        let reply = admin.read(call).await;
        reply.assert_problem(StatusCode::FORBIDDEN, "forbidden");
    }
    assert_eq!(admin.harness.counters("a").await, before);
    assert_eq!(admin.config("a").await, capped_room("a", 5));
    assert_eq!(admin.harness.store.rooms().await.unwrap().len(), 1);
}

#[tokio::test]
async fn rooms_are_created_replaced_patched_and_deleted_with_section_3_names() {
    let admin = Admin::new(vec![room("tier1")]).await;
    let created = admin
        .call(put(
            "/admin/v1/rooms/launch",
            json!({"max_active": 2, "admit_per_minute": 60, "session_ttl": "15m",
                   "mode": "queue", "requires": ["tier1"]}),
        ))
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    assert_eq!(created.text("id"), "launch");
    assert_eq!(created.text("session_ttl"), "15m");
    assert_eq!(
        created.number("admit_burst"),
        1,
        "default: admit_per_minute / 60"
    );
    assert_eq!(created.body["requires"], json!(["tier1"]));
    // Live at once: the public API already holds visitors to its `requires` (SPEC §14.2).
    let (status, body) = admin
        .public(Method::POST, "/_anteroom/v1/rooms/launch/join")
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(body["code"], "pass_required", "{body}");
    let tier1 = admin.call(Call::post("/admin/v1/rooms/tier1/passes")).await;
    let pass = tier1.text("pass");
    let (status, body) = admin
        .public_with(
            Method::POST,
            "/_anteroom/v1/rooms/launch/join",
            ("cookie", format!("anteroom_p_tier1={pass}")),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");

    let listed = admin.read(Call::get("/admin/v1/rooms")).await;
    let ids: Vec<&str> = listed.body["rooms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|room| room["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["launch", "tier1"]);

    // PUT replaces: absent fields go back to their defaults; the queue stays.
    let replaced = admin
        .call(put(
            "/admin/v1/rooms/launch",
            json!({"id": "launch", "max_active": 9}),
        ))
        .await;
    assert_eq!(replaced.status, StatusCode::OK, "{}", replaced.body);
    assert_eq!(replaced.text("session_ttl"), "10m");
    assert_eq!(replaced.body["requires"], json!([]));
    assert_eq!(admin.harness.counters("launch").await.last_position, 1);

    // PATCH changes only what it names; null puts a field back to its default.
    let patched = admin
        .call(patch(
            "/admin/v1/rooms/launch",
            json!({"admit_per_minute": 120, "session_max": "1h", "max_active": null}),
        ))
        .await;
    assert_eq!(patched.status, StatusCode::OK, "{}", patched.body);
    assert_eq!(
        (
            patched.number("admit_per_minute"),
            patched.number("max_active")
        ),
        (120, 0)
    );
    assert_eq!(patched.text("session_max"), "1h");
    assert_eq!(admin.config("launch").await.admit_per_minute, 120);

    let got = admin.read(Call::get("/admin/v1/rooms/launch")).await;
    assert_eq!(got.body, patched.body);

    // A room that another requires cannot be deleted before the other lets go.
    admin
        .call(patch(
            "/admin/v1/rooms/launch",
            json!({"requires": ["tier1"]}),
        ))
        .await;
    admin
        .call(Call::delete("/admin/v1/rooms/tier1"))
        .await
        .assert_problem(StatusCode::CONFLICT, "room_required");
    let deleted = admin.call(Call::delete("/admin/v1/rooms/launch")).await;
    assert_eq!(deleted.status, StatusCode::NO_CONTENT);
    admin
        .call(Call::get("/admin/v1/rooms/launch"))
        .await
        .assert_problem(StatusCode::NOT_FOUND, "room_not_found");
    admin
        .call(Call::delete("/admin/v1/rooms/launch"))
        .await
        .assert_problem(StatusCode::NOT_FOUND, "room_not_found");
    let (status, _) = admin
        .public(Method::POST, "/_anteroom/v1/rooms/launch/join")
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    admin
        .call(patch("/admin/v1/rooms/nowhere", json!({"max_active": 1})))
        .await
        .assert_problem(StatusCode::NOT_FOUND, "room_not_found");
}

/// `history_retention` is set through PATCH like the other durations, shown back, stored, and
/// an out-of-range value is refused with its field, changing nothing.
#[tokio::test]
async fn history_retention_is_patched_shown_and_bounded() {
    let admin = Admin::new(vec![room("launch")]).await;
    let got = admin.read(Call::get("/admin/v1/rooms/launch")).await;
    assert_eq!(got.text("history_retention"), "1h", "the default is shown");

    let patched = admin
        .call(patch(
            "/admin/v1/rooms/launch",
            json!({"history_retention": "15m"}),
        ))
        .await;
    assert_eq!(patched.status, StatusCode::OK, "{}", patched.body);
    assert_eq!(patched.text("history_retention"), "15m");
    assert_eq!(
        admin.config("launch").await.history_retention,
        Duration::from_secs(900)
    );
    let got = admin.read(Call::get("/admin/v1/rooms/launch")).await;
    assert_eq!(got.body, patched.body);

    for wrong in ["10s", "8d"] {
        let reply = admin
            .call(patch(
                "/admin/v1/rooms/launch",
                json!({"history_retention": wrong}),
            ))
            .await;
        reply.assert_problem(StatusCode::BAD_REQUEST, "invalid_room");
        assert_eq!(
            reply.body["errors"][0]["field"], "history_retention",
            "{}",
            reply.body
        );
    }
    assert_eq!(
        admin.config("launch").await.history_retention,
        Duration::from_secs(900),
        "a refused PATCH changes nothing"
    );

    let reset = admin
        .call(patch(
            "/admin/v1/rooms/launch",
            json!({"history_retention": null}),
        ))
        .await;
    assert_eq!(reset.text("history_retention"), "1h", "null is the default");
}

/// A room taking its identity from the site's token (SPEC §14.1) is created with an
/// `identity_jwt` object, shown back with it, and refused without it.
#[tokio::test]
async fn signed_in_identity_rooms_take_an_identity_jwt_object() {
    let admin = Admin::new(vec![room("a")]).await;
    let identity_jwt = json!({"header": "Authorization",
        "jwks_url": "https://login.example/.well-known/jwks.json",
        "issuer": "https://login.example/", "audience": "shop", "required": true});
    let created = admin
        .call(put(
            "/admin/v1/rooms/shop",
            json!({"identity": "jwt:sub", "identity_jwt": identity_jwt}),
        ))
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    assert_eq!(created.text("identity"), "jwt:sub");
    assert_eq!(created.body["identity_jwt"], identity_jwt);
    // Without a token, the public API refuses the join (required) and nothing is taken.
    let (status, body) = admin
        .public(Method::POST, "/_anteroom/v1/rooms/shop/join")
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert_eq!(body["code"], "identity_required", "{body}");
    assert_eq!(admin.harness.counters("shop").await.last_position, 0);

    let reply = admin
        .call(patch("/admin/v1/rooms/shop", json!({"identity_jwt": null})))
        .await;
    reply.assert_problem(StatusCode::BAD_REQUEST, "invalid_room");
    assert_eq!(
        reply.body["errors"][0]["field"], "identity",
        "{}",
        reply.body
    );
    let reply = admin
        .call(patch(
            "/admin/v1/rooms/shop",
            json!({"identity_jwt": {"header": "Authorization", "jwks_url": "ftp://x"}}),
        ))
        .await;
    reply.assert_problem(StatusCode::BAD_REQUEST, "invalid_room");
    let fields: BTreeSet<&str> = reply.body["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|problem| problem["field"].as_str().unwrap())
        .collect();
    assert_eq!(
        fields,
        BTreeSet::from([
            "identity_jwt.audience",
            "identity_jwt.issuer",
            "identity_jwt.jwks_url"
        ])
    );
    assert_eq!(
        admin.config("shop").await.identity.to_config_string(),
        "jwt:sub"
    );
}

#[tokio::test]
async fn bad_bodies_are_refused_listing_every_problem_and_change_nothing() {
    let admin = Admin::new(vec![capped_room("a", 5), room("b")]).await;
    let before = (admin.config("a").await, admin.harness.counters("a").await);

    let reply = admin
        .call(patch(
            "/admin/v1/rooms/a",
            json!({"max_active": "lots", "session_ttl": "soon", "mode": "fast",
                   "colour": "red", "requires": ["a", "ghost"], "admit_burst": 0}),
        ))
        .await;
    reply.assert_problem(StatusCode::BAD_REQUEST, "invalid_room");
    let fields: BTreeSet<&str> = reply.body["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|problem| problem["field"].as_str().unwrap())
        .collect();
    assert_eq!(
        fields,
        BTreeSet::from([
            "admit_burst",
            "colour",
            "max_active",
            "mode",
            "requires",
            "session_ttl"
        ])
    );
    // Unknown required rooms and cycles are found against the stored rooms.
    admin
        .call(patch("/admin/v1/rooms/b", json!({"requires": ["a"]})))
        .await;
    let cycle = admin
        .call(patch("/admin/v1/rooms/a", json!({"requires": ["b"]})))
        .await;
    cycle.assert_problem(StatusCode::BAD_REQUEST, "invalid_room");
    assert!(
        cycle.body["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("cycle")
    );
    let ghost = admin
        .call(put("/admin/v1/rooms/new", json!({"requires": ["ghost"]})))
        .await;
    ghost.assert_problem(StatusCode::BAD_REQUEST, "invalid_room");

    for (call, code) in [
        (patch("/admin/v1/rooms/a", json!([1, 2])), "invalid_json"),
        (
            Call::method(Method::PATCH, "/admin/v1/rooms/a").json("{not json"),
            "invalid_json",
        ),
        (
            put("/admin/v1/rooms/a", json!({"id": "other"})),
            "invalid_room",
        ),
        (put("/admin/v1/rooms/Bad_Id", json!({})), "invalid_room"),
        (put("/admin/v1/rooms/a", json!({"mode": 3})), "invalid_room"),
        (
            put(
                "/admin/v1/rooms/a",
                json!({"session_max": "1m", "session_ttl": "10m"}),
            ),
            "invalid_room",
        ),
        (Call::post("/admin/v1/rooms/a/advance"), "invalid_body"),
        (
            Call::post("/admin/v1/rooms/a/advance").json(r#"{"count": 0}"#),
            "invalid_body",
        ),
        (
            Call::post("/admin/v1/rooms/a/advance").json(r#"{"count": -1}"#),
            "invalid_body",
        ),
        (
            Call::post("/admin/v1/rooms/a/advance").json(r#"{"count": 1, "x": 1}"#),
            "invalid_body",
        ),
        (
            Call::post("/admin/v1/rooms/a/reset").json(r#"{"purge": "yes"}"#),
            "invalid_body",
        ),
        (
            Call::post("/admin/v1/rooms/a/passes").json(r#"{"ttl": "forever"}"#),
            "invalid_body",
        ),
        (
            Call::post("/admin/v1/rooms/a/passes").json(r#"{"ttl": "30d"}"#),
            "invalid_body",
        ),
        (
            Call::post("/admin/v1/rooms/a/passes").json(r#"{"uid": ""}"#),
            "invalid_body",
        ),
        (
            Call::post("/admin/v1/keys/rotate").json(r#"{"algorithm": "none"}"#),
            "invalid_body",
        ),
    ] {
        admin
            .call(call)
            .await
            .assert_problem(StatusCode::BAD_REQUEST, code);
    }
    let large = admin
        .call(Call::method(Method::PUT, "/admin/v1/rooms/a").json(format!(
            "{{\"page_template\": \"{}\"}}",
            "x".repeat(100_000)
        )))
        .await;
    large.assert_problem(StatusCode::PAYLOAD_TOO_LARGE, "body_too_large");

    assert_eq!(
        (admin.config("a").await, admin.harness.counters("a").await),
        before
    );
    assert_eq!(admin.harness.store.rooms().await.unwrap().len(), 2);
}

#[tokio::test]
async fn adaptive_and_challenge_settings_are_read_checked_and_kept() {
    let admin = Admin::new(vec![room("a")]).await;
    let created = admin
        .call(put(
            "/admin/v1/rooms/b",
            json!({
                "admit_per_minute": 120,
                "adaptive": {"target_p95_ms": 250, "min_per_minute": 60, "max_per_minute": 600},
                "challenge": {"kind": "pow", "difficulty": 16},
            }),
        ))
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    assert_eq!(
        created.body["adaptive"],
        json!({"target_p95_ms": 250, "max_error_rate": 0.05, "min_per_minute": 60,
               "max_per_minute": 600, "interval": "10s"})
    );
    assert_eq!(
        created.body["challenge"],
        json!({"kind": "pow", "difficulty": 16})
    );
    // A patch of another field keeps them; `null` removes one.
    let patched = admin
        .call(patch("/admin/v1/rooms/b", json!({"max_active": 9})))
        .await;
    assert_eq!(
        patched.body["challenge"]["difficulty"], 16,
        "{}",
        patched.body
    );
    let patched = admin
        .call(patch("/admin/v1/rooms/b", json!({"challenge": null})))
        .await;
    assert!(patched.body.get("challenge").is_none(), "{}", patched.body);
    assert_eq!(patched.body["adaptive"]["max_per_minute"], 600);

    // Every problem is named, and nothing changes.
    let before = admin.config("b").await;
    let refused = admin
        .call(patch(
            "/admin/v1/rooms/b",
            json!({
                "adaptive": {"target_p95_ms": 250, "min_per_minute": 600, "max_per_minute": 60},
                "challenge": {"kind": "captcha"},
            }),
        ))
        .await;
    refused.assert_problem(StatusCode::BAD_REQUEST, "invalid_room");
    let fields: Vec<&str> = refused.body["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|error| error["field"].as_str().unwrap())
        .collect();
    assert_eq!(fields, ["adaptive", "challenge"], "{}", refused.body);
    let typo = admin
        .call(patch(
            "/admin/v1/rooms/b",
            json!({"adaptive": {"target": 1}}),
        ))
        .await;
    typo.assert_problem(StatusCode::BAD_REQUEST, "invalid_room");
    assert_eq!(admin.config("b").await, before);
}

#[tokio::test]
async fn pause_resume_close_and_open_change_the_mode_live() {
    let admin = Admin::new(vec![capped_room("a", 100)]).await;
    let paused = admin.call(Call::post("/admin/v1/rooms/a/pause")).await;
    assert_eq!(paused.status, StatusCode::OK);
    assert_eq!(paused.text("mode"), "queue_all");
    let (_, joined) = admin
        .public(Method::POST, "/_anteroom/v1/rooms/a/join")
        .await;
    assert_eq!(joined["state"], "paused", "nobody is admitted while paused");
    assert_eq!(admin.harness.tick("a").await.admitted, 0);

    let resumed = admin.call(Call::post("/admin/v1/rooms/a/resume")).await;
    assert_eq!(resumed.text("mode"), "queue");
    assert_eq!(admin.harness.tick("a").await.admitted, 1);

    let closed = admin.call(Call::post("/admin/v1/rooms/a/close")).await;
    assert_eq!(closed.text("mode"), "closed");
    let (status, body) = admin
        .public(Method::POST, "/_anteroom/v1/rooms/a/join")
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, Some("room_closed"))
    );
    let opened = admin.call(Call::post("/admin/v1/rooms/a/open")).await;
    assert_eq!(opened.text("mode"), "queue");
    assert_eq!(admin.config("a").await.max_active, 100, "other fields kept");
    admin
        .call(Call::post("/admin/v1/rooms/ghost/pause"))
        .await
        .assert_problem(StatusCode::NOT_FOUND, "room_not_found");
}

#[tokio::test]
async fn advance_admits_within_the_line_and_capacity() {
    let admin = Admin::new(vec![RoomConfig {
        mode: Mode::QueueAll,
        ..capped_room("a", 3)
    }])
    .await;
    for _ in 0..5 {
        admin
            .public(Method::POST, "/_anteroom/v1/rooms/a/join")
            .await;
    }
    let advanced = admin
        .call(Call::post("/admin/v1/rooms/a/advance").json(r#"{"count": 10}"#))
        .await;
    assert_eq!(advanced.status, StatusCode::OK, "{}", advanced.body);
    assert_eq!(advanced.number("admitted"), 3, "bounded by capacity");
    assert_eq!(advanced.number("serving"), 3);
    assert_eq!(advanced.number("next_position"), 6);
    assert_eq!(advanced.number("waiting"), 2);
    let again = admin
        .call(Call::post("/admin/v1/rooms/a/advance").json(r#"{"count": 1}"#))
        .await;
    assert_eq!(again.number("admitted"), 0, "no free slot");
}

#[tokio::test]
async fn reset_starts_a_new_generation() {
    let admin = Admin::new(vec![capped_room("a", 1)]).await;
    for _ in 0..3 {
        admin
            .public(Method::POST, "/_anteroom/v1/rooms/a/join")
            .await;
    }
    let reset = admin
        .call(Call::post("/admin/v1/rooms/a/reset").json(r#"{"purge": true}"#))
        .await;
    assert_eq!(reset.status, StatusCode::OK, "{}", reset.body);
    assert_eq!(reset.number("generation"), 2);
    assert_eq!((reset.number("waiting"), reset.number("active")), (0, 0));
    let plain = admin.call(Call::post("/admin/v1/rooms/a/reset")).await;
    assert_eq!(plain.number("generation"), 3);
}

#[tokio::test]
async fn passes_issued_by_hand_verify_and_count_as_sessions() {
    let admin = Admin::new(vec![room("a")]).await;
    let issued = admin
        .call(Call::post("/admin/v1/rooms/a/passes").json(r#"{"uid": "vip-1", "ttl": "30m"}"#))
        .await;
    assert_eq!(issued.status, StatusCode::CREATED, "{}", issued.body);
    let claims = admin
        .harness
        .keys()
        .verify_pass(
            issued.text("pass"),
            &PassExpectations {
                room: "a",
                issuer: support::ISSUER,
                generation: 1,
            },
            START.as_secs(),
        )
        .unwrap();
    assert_eq!(claims.sub, issued.text("session"));
    assert_eq!(claims.uid.as_deref(), Some("vip-1"));
    assert_eq!(claims.exp, START.as_secs() + 1800);
    assert_eq!(admin.harness.counters("a").await.active, 1);
    let default_ttl = admin.call(Call::post("/admin/v1/rooms/a/passes")).await;
    assert_eq!(default_ttl.status, StatusCode::CREATED);
}

#[tokio::test]
async fn passes_by_hand_are_refused_when_every_slot_is_taken() {
    let admin = Admin::new(vec![capped_room("a", 1)]).await;
    let first = admin.call(Call::post("/admin/v1/rooms/a/passes")).await;
    assert_eq!(first.status, StatusCode::CREATED);
    admin
        .call(Call::post("/admin/v1/rooms/a/passes"))
        .await
        .assert_problem(StatusCode::CONFLICT, "room_full");
    assert_eq!(admin.harness.counters("a").await.active, 1);
}

#[tokio::test]
async fn session_pages_never_exceed_the_limit_and_walk_every_session_once() {
    let admin = Admin::new(vec![room("a")]).await;
    let mut issued = BTreeSet::new();
    for _ in 0..23 {
        let pass = admin.call(Call::post("/admin/v1/rooms/a/passes")).await;
        issued.insert(pass.text("session").to_owned());
    }
    // Three of them end: they leave the `active` listing.
    let ended: Vec<String> = issued.iter().take(3).cloned().collect();
    for session in &ended {
        let reply = admin
            .harness
            .store
            .end_session(
                &room_id("a"),
                session.parse().unwrap(),
                anteroom_core::engine::SessionEnd::Completed,
            )
            .await;
        reply.unwrap();
    }
    let walk = |state: &'static str, limit: usize| {
        let admin = &admin;
        async move {
            let mut seen = Vec::new();
            let mut cursor: Option<String> = None;
            let mut pages = 0;
            loop {
                let mut uri = format!("/admin/v1/rooms/a/sessions?state={state}&limit={limit}");
                if let Some(cursor) = &cursor {
                    uri.push_str(&format!("&cursor={cursor}"));
                }
                let page = admin.read(Call::get(&uri)).await;
                assert_eq!(page.status, StatusCode::OK, "{}", page.body);
                let sessions = page.body["sessions"].as_array().unwrap();
                assert!(sessions.len() <= limit, "a page holds at most the limit");
                seen.extend(
                    sessions
                        .iter()
                        .map(|s| s["id"].as_str().unwrap().to_owned()),
                );
                pages += 1;
                match page.body["next_cursor"].as_str() {
                    Some(next) => cursor = Some(next.to_owned()),
                    None => break,
                }
                assert!(pages < 100, "the walk ends");
            }
            seen
        }
    };
    for limit in [1, 5, 20, 500] {
        let active = walk("active", limit).await;
        let unique: BTreeSet<String> = active.iter().cloned().collect();
        assert_eq!(active.len(), unique.len(), "nothing twice (limit {limit})");
        let expected: BTreeSet<String> = issued
            .iter()
            .filter(|id| !ended.contains(id))
            .cloned()
            .collect();
        assert_eq!(
            unique, expected,
            "every active session once (limit {limit})"
        );
    }
    let completed: BTreeSet<String> = walk("completed", 2).await.into_iter().collect();
    assert_eq!(completed, ended.iter().cloned().collect());
    let default_page = admin.read(Call::get("/admin/v1/rooms/a/sessions")).await;
    assert_eq!(default_page.body["sessions"].as_array().unwrap().len(), 23);
    assert_eq!(default_page.body["next_cursor"], Value::Null);
    let states: Vec<&str> = default_page.body["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|session| session["state"].as_str().unwrap())
        .collect();
    assert_eq!(
        states.iter().filter(|state| **state == "completed").count(),
        3
    );
    assert_eq!(
        states.iter().filter(|state| **state == "active").count(),
        20
    );

    for bad in [
        "limit=0",
        "limit=501",
        "limit=x",
        "state=gone",
        "cursor=%2F..",
        "other=1",
    ] {
        admin
            .read(Call::get(&format!("/admin/v1/rooms/a/sessions?{bad}")))
            .await
            .assert_problem(StatusCode::BAD_REQUEST, "invalid_query");
    }
}

#[tokio::test]
async fn stats_show_the_figures_and_the_sampled_history() {
    let admin = Admin::new(vec![RoomConfig {
        mode: Mode::QueueAll,
        ..room("a")
    }])
    .await;
    for _ in 0..4 {
        admin
            .public(Method::POST, "/_anteroom/v1/rooms/a/join")
            .await;
    }
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let sampler = tokio::spawn(anteroom_admin::run_admin_sampler(
        admin.admin.clone(),
        async {
            let _ = stopped.await;
        },
    ));
    // The sampler keeps one sample per second of the (manual) clock.
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(1_100)).await;
        admin.harness.advance(Duration::from_secs(1));
    }
    let _ = stop.send(());
    sampler.await.unwrap();
    let stats = admin.read(Call::get("/admin/v1/rooms/a/stats")).await;
    assert_eq!(stats.status, StatusCode::OK, "{}", stats.body);
    assert_eq!(stats.number("waiting"), 4);
    assert_eq!(stats.number("next_position"), 5);
    assert_eq!(stats.text("mode"), "queue_all");
    assert_eq!(stats.body["totals"]["joined"], 4);
    let waiting = stats.body["history"]["waiting"].as_array().unwrap();
    assert!(waiting.len() >= 2, "{}", stats.body["history"]);
    assert!(waiting.iter().all(|n| n == 4));
    let short = admin
        .read(Call::get("/admin/v1/rooms/a/stats?history=1"))
        .await;
    assert_eq!(short.body["history"]["at"].as_array().unwrap().len(), 1);
    admin
        .read(Call::get("/admin/v1/rooms/a/stats?history=3601"))
        .await
        .assert_problem(StatusCode::BAD_REQUEST, "invalid_query");
}

#[tokio::test]
async fn the_history_charts_the_upstream_latency_of_the_rooms_routes() {
    let admin = Admin::new(vec![room("a"), room("b")]).await;
    let route = |name: &str, room: &str| RouteConfig {
        name: name.to_owned(),
        matcher: RequestMatcher::default()
            .with_paths([format!("/{room}/**").as_str()])
            .unwrap(),
        rooms: vec![room_id(room)],
        rate_limits: Vec::new(),
        bypass: false,
        page: PageMode::default(),
    };
    let gateway = Gateway::new(
        admin.harness.state.clone(),
        GatewayOptions {
            routes: vec![route("room-a", "a"), route("room-b", "b")],
            ..GatewayOptions::default()
        },
    );
    admin.admin.set_gateway(gateway.clone());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let sampler = tokio::spawn(anteroom_admin::run_admin_sampler(
        admin.admin.clone(),
        async {
            let _ = stopped.await;
        },
    ));
    // Room a's route answers 19 times in 40 ms and once in 400 ms between two samples.
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    admin.harness.advance(Duration::from_secs(1));
    let stats_a = gateway.route_stats()[0].clone();
    for _ in 0..19 {
        stats_a.record(Duration::from_millis(40), false);
    }
    stats_a.record(Duration::from_millis(400), false);
    for _ in 0..2 {
        tokio::time::sleep(Duration::from_millis(1_100)).await;
        admin.harness.advance(Duration::from_secs(1));
    }
    let _ = stop.send(());
    sampler.await.unwrap();

    let history = |room: &str| {
        let admin = &admin;
        let uri = format!("/admin/v1/rooms/{room}/stats");
        async move { admin.read(Call::get(&uri)).await.body["history"].clone() }
    };
    let a = history("a").await;
    let samples = a["at"].as_array().unwrap().len();
    assert!(samples >= 3, "{a}");
    let responses: Vec<u64> = a["upstream_responses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_u64().unwrap())
        .collect();
    assert_eq!(responses.iter().sum::<u64>(), 20, "{a}");
    let second = responses.iter().position(|&n| n == 20).unwrap();
    // Quantiles to within 10 %: the bound of the fine bucket holding them.
    let p50 = a["upstream_p50_ms"][second].as_f64().unwrap();
    let p95 = a["upstream_p95_ms"][second].as_f64().unwrap();
    assert!((40.0..44.0).contains(&p50), "median {p50}");
    assert!(
        (40.0..44.0).contains(&p95),
        "p95 {p95}: 19 of 20 took 40 ms"
    );
    // Seconds without answers have no latency; room b's route was idle throughout.
    for (index, &count) in responses.iter().enumerate() {
        if count == 0 {
            assert!(a["upstream_p95_ms"][index].is_null(), "{a}");
        }
    }
    let b = history("b").await;
    let idle = b["upstream_p95_ms"].as_array().unwrap();
    assert_eq!(idle.len(), b["at"].as_array().unwrap().len());
    assert!(idle.iter().all(Value::is_null), "{b}");
}

#[tokio::test]
async fn key_rotation_swaps_the_signing_key_live() {
    let admin = Admin::new(vec![room("a")]).await;
    let before = admin.harness.keys().active_kid().to_owned();
    let rotated = admin.call(Call::post("/admin/v1/keys/rotate")).await;
    assert_eq!(rotated.status, StatusCode::OK, "{}", rotated.body);
    let kid = rotated.text("active_kid").to_owned();
    assert_ne!(kid, before);
    assert_eq!(admin.harness.keys().active_kid(), kid);
    let (_, jwks) = admin.public(Method::GET, "/.well-known/jwks.json").await;
    assert_eq!(jwks["keys"][0]["kid"], kid.as_str());
    let again = admin
        .call(Call::post("/admin/v1/keys/rotate").json(r#"{"algorithm": "ES256"}"#))
        .await;
    assert_eq!(again.text("algorithm"), "ES256");
    assert_eq!(
        again.body["kids"].as_array().unwrap().len(),
        3,
        "old keys still verify"
    );
}

#[tokio::test]
async fn key_prune_removes_only_keys_whose_passes_have_all_expired() {
    // A room whose passes outlive any pass issued by hand: its lifetime sets the horizon.
    let mut long = room("a");
    long.session_ttl = Duration::from_secs(30 * 24 * 3600);
    let admin = Admin::new(vec![long]).await;
    let rotated = admin.call(Call::post("/admin/v1/keys/rotate")).await;
    let new = rotated.text("active_kid").to_owned();
    let old = rotated.body["kids"][1].as_str().unwrap().to_owned();
    let keep_secs =
        30 * 24 * 3600 + anteroom_token::LEEWAY_SECS + anteroom_token::NODE_CLOCK_SKEW_SECS;

    admin.harness.advance(Duration::from_secs(keep_secs - 1));
    let kept = admin.call(Call::post("/admin/v1/keys/prune")).await;
    assert_eq!(kept.status, StatusCode::OK, "{}", kept.body);
    assert_eq!(kept.body["keep_secs"], keep_secs);
    assert_eq!(kept.body["removed"], json!([]));
    assert_eq!(
        kept.body["kept"][0],
        json!({"kid": new, "reason": "active"})
    );
    assert_eq!(kept.body["kept"][1]["kid"], old.as_str());
    assert_eq!(kept.body["kept"][1]["reason"], "passes_may_be_valid");
    assert_eq!(kept.body["kept"][1]["retired_at"], "2023-11-14T22:13:20Z");
    assert_eq!(kept.body["kept"][1]["prunable_at"], "2023-12-14T22:14:20Z");
    let (_, jwks) = admin.public(Method::GET, "/.well-known/jwks.json").await;
    assert_eq!(jwks["keys"].as_array().unwrap().len(), 2);

    admin.harness.advance(Duration::from_secs(1));
    let pruned = admin.call(Call::post("/admin/v1/keys/prune")).await;
    assert_eq!(pruned.body["removed"], json!([old]));
    assert_eq!(
        pruned.body["kept"],
        json!([{"kid": new, "reason": "active"}])
    );
    let (_, jwks) = admin.public(Method::GET, "/.well-known/jwks.json").await;
    assert_eq!(
        jwks["keys"].as_array().unwrap().len(),
        1,
        "the old key left the JWKS"
    );
    assert_eq!(jwks["keys"][0]["kid"], new.as_str());
    assert_eq!(admin.harness.keys().kids(), [new]);
}

#[tokio::test]
async fn signals_are_checked_and_unknown_paths_are_problems() {
    let admin = Admin::new(vec![room("a")]).await;
    admin
        .call(Call::method(Method::PUT, "/admin/v1/rooms/a/signal").json("{}"))
        .await
        .assert_problem(StatusCode::BAD_REQUEST, "invalid_body");
    admin
        .call(Call::method(Method::PUT, "/admin/v1/rooms/a/signal").json(r#"{"p95_ms": 12.5}"#))
        .await
        .assert_problem(StatusCode::CONFLICT, "not_adaptive");
    admin
        .call(Call::get("/admin/v1/nothing"))
        .await
        .assert_problem(StatusCode::NOT_FOUND, "not_found");
    admin
        .call(Call::post("/admin/v1/rooms"))
        .await
        .assert_problem(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed");
    let panel = admin.bare(Call::get("/")).await;
    assert_eq!(panel.status, StatusCode::OK);
    assert!(
        panel
            .header("content-type")
            .unwrap()
            .starts_with("text/html")
    );
    let document = admin.bare(Call::get("/admin/v1/openapi.json")).await;
    assert_eq!(document.status, StatusCode::OK);
    assert!(document.body["paths"]["/admin/v1/rooms/{room}"].is_object());
}

#[tokio::test]
async fn the_event_feed_streams_what_operators_do() {
    let admin = Admin::new(vec![room("a")]).await;
    let request = Request::builder()
        .uri("/admin/v1/events")
        .header("authorization", format!("Bearer {READ_KEY}"))
        .body(Body::empty())
        .unwrap();
    let response = admin.harness.app.clone().oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let mut body = response.into_body();
    admin.call(Call::post("/admin/v1/rooms/a/pause")).await;
    let mut text = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !text.contains("room.updated") {
        let frame = tokio::time::timeout_at(deadline, body.frame())
            .await
            .expect("an event within 5 s")
            .unwrap()
            .unwrap();
        if let Ok(data) = frame.into_data() {
            text.push_str(&String::from_utf8_lossy(&data));
        }
    }
    assert!(text.contains("event: room.updated"), "{text}");
    assert!(text.contains("\"action\":\"pause\""), "{text}");
}

#[tokio::test]
async fn rooms_take_their_oidc_client_through_the_api() {
    let admin = Admin::new(vec![room("a")]).await;
    let secret = format!("sha256:{}", "ab".repeat(32));
    let client = json!({"client_secret": secret,
                        "redirect_uris": ["https://app.example/cb"], "code_ttl": "30s"});
    let patched = admin
        .call(patch("/admin/v1/rooms/a", json!({"oidc": client.clone()})))
        .await;
    assert_eq!(patched.status, StatusCode::OK, "{}", patched.body);
    assert_eq!(patched.body["oidc"], client);
    let stored = admin.config("a").await.oidc.unwrap();
    assert_eq!(stored.redirect_uris, ["https://app.example/cb"]);
    assert_eq!(stored.code_ttl, std::time::Duration::from_secs(30));

    // Every problem of the client is listed, and nothing changes.
    let reply = admin
        .call(patch(
            "/admin/v1/rooms/a",
            json!({"oidc": {"client_secret": "plain", "redirect_uris": ["/cb"]}}),
        ))
        .await;
    reply.assert_problem(StatusCode::BAD_REQUEST, "invalid_room");
    let fields: BTreeSet<&str> = reply.body["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|problem| problem["field"].as_str().unwrap())
        .collect();
    assert_eq!(
        fields,
        BTreeSet::from(["oidc.client_secret", "oidc.redirect_uris"])
    );
    let unknown = admin
        .call(patch("/admin/v1/rooms/a", json!({"oidc": {"secret": "x"}})))
        .await;
    unknown.assert_problem(StatusCode::BAD_REQUEST, "invalid_room");
    assert_eq!(admin.config("a").await.oidc, Some(stored));

    // `null` takes the client away.
    let cleared = admin
        .call(patch("/admin/v1/rooms/a", json!({"oidc": null})))
        .await;
    assert_eq!(cleared.status, StatusCode::OK, "{}", cleared.body);
    assert!(admin.config("a").await.oidc.is_none());
}

#[tokio::test]
async fn schedules_are_set_shown_and_checked_through_the_api() {
    let admin = Admin::new(vec![room("a")]).await;
    let event = json!({"prequeue_at": "2026-12-01T09:30:00Z", "opens_at": "2026-12-01T10:00:00Z",
                       "closes_at": "2026-12-01T12:00:00Z", "shuffle": true, "max_active": 50});
    let reply = admin
        .call(put(
            "/admin/v1/rooms/a",
            json!({"schedule": [event], "before": "closed"}),
        ))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    let shown = admin.call(Call::get("/admin/v1/rooms/a")).await;
    assert_eq!(
        shown.body["schedule"][0]["opens_at"],
        "2026-12-01T10:00:00Z"
    );
    assert_eq!(shown.body["schedule"][0]["shuffle"], true);
    assert_eq!(shown.body["before"], "closed");
    assert_eq!(admin.config("a").await.schedule.events.len(), 1);

    let before = admin.config("a").await;
    let reply = admin
        .call(patch(
            "/admin/v1/rooms/a",
            json!({"schedule": [{"opens_at": "2026-12-01T10:00:00Z", "closes_at": "noon"}],
                   "after": "open"}),
        ))
        .await;
    reply.assert_problem(StatusCode::BAD_REQUEST, "invalid_room");
    let fields: BTreeSet<&str> = reply.body["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|problem| problem["field"].as_str().unwrap())
        .collect();
    assert_eq!(fields, BTreeSet::from(["after", "schedule[0].closes_at"]));
    assert_eq!(
        admin.config("a").await,
        before,
        "a refused change changes nothing"
    );
}

/// The room's `ETag` as a GET answers it.
async fn etag_of(admin: &Admin, room: &str) -> String {
    let reply = admin
        .read(Call::get(&format!("/admin/v1/rooms/{room}")))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    reply.header("etag").unwrap().to_owned()
}

#[tokio::test]
async fn writes_with_a_stale_etag_answer_412_and_change_nothing() {
    let admin = Admin::new(vec![capped_room("a", 5)]).await;
    let first = etag_of(&admin, "a").await;
    assert!(first.starts_with('"') && first.ends_with('"'), "{first}");
    assert_eq!(
        etag_of(&admin, "a").await,
        first,
        "the same room, the same tag"
    );

    // A write with the current tag succeeds and answers the new one, which GET then shows.
    let patched = admin
        .call(patch("/admin/v1/rooms/a", json!({"max_active": 6})).header("if-match", &first))
        .await;
    assert_eq!(patched.status, StatusCode::OK, "{}", patched.body);
    let second = patched.header("etag").unwrap().to_owned();
    assert_ne!(second, first);
    assert_eq!(etag_of(&admin, "a").await, second);

    // Every write with the old tag is refused as a problem, and the room stays as it is.
    let before = admin.config("a").await;
    for call in [
        patch("/admin/v1/rooms/a", json!({"max_active": 7})),
        put("/admin/v1/rooms/a", json!({"max_active": 8})),
        Call::post("/admin/v1/rooms/a/pause"),
        Call::post("/admin/v1/rooms/a/close"),
    ] {
        let reply = admin.call(call.header("if-match", &first)).await;
        reply.assert_problem(StatusCode::PRECONDITION_FAILED, "precondition_failed");
        assert!(reply.text("detail").contains(&second), "{}", reply.body);
    }
    // A weak tag never matches; a malformed header is refused rather than ignored.
    let weak = format!("W/{second}");
    let reply = admin
        .call(Call::post("/admin/v1/rooms/a/pause").header("if-match", &weak))
        .await;
    reply.assert_problem(StatusCode::PRECONDITION_FAILED, "precondition_failed");
    for bad in ["not-quoted", "*, \"x\""] {
        let reply = admin
            .call(patch("/admin/v1/rooms/a", json!({"max_active": 9})).header("if-match", bad))
            .await;
        reply.assert_problem(StatusCode::BAD_REQUEST, "invalid_if_match");
    }
    assert_eq!(admin.config("a").await, before);
    assert_eq!(etag_of(&admin, "a").await, second);

    // One of several tags, or `*`, matches; the mode controls answer the new tag.
    let paused = admin
        .call(
            Call::post("/admin/v1/rooms/a/pause")
                .header("if-match", &format!("\"other\", {second}")),
        )
        .await;
    assert_eq!(paused.status, StatusCode::OK, "{}", paused.body);
    assert_eq!(paused.text("mode"), "queue_all");
    let third = paused.header("etag").unwrap().to_owned();
    assert_eq!(etag_of(&admin, "a").await, third);
    let resumed = admin
        .call(Call::post("/admin/v1/rooms/a/resume").header("if-match", "*"))
        .await;
    assert_eq!(resumed.status, StatusCode::OK, "{}", resumed.body);

    // Without If-Match a write still goes through (atomically, over the version in force).
    let unconditional = admin
        .call(patch("/admin/v1/rooms/a", json!({"admit_per_minute": 60})))
        .await;
    assert_eq!(
        unconditional.status,
        StatusCode::OK,
        "{}",
        unconditional.body
    );
    let config = admin.config("a").await;
    assert_eq!((config.max_active, config.admit_per_minute), (6, 60));

    // A conditional PUT never re-creates a room someone deleted.
    let gone = admin
        .call(put("/admin/v1/rooms/gone", json!({})).header("if-match", "*"))
        .await;
    gone.assert_problem(StatusCode::PRECONDITION_FAILED, "precondition_failed");
    let missing = admin.read(Call::get("/admin/v1/rooms/gone")).await;
    missing.assert_problem(StatusCode::NOT_FOUND, "room_not_found");
}

#[tokio::test]
async fn concurrent_patches_with_one_etag_let_exactly_one_win() {
    let admin = Admin::new(vec![capped_room("a", 5)]).await;
    let tag = etag_of(&admin, "a").await;
    let (left, right) = tokio::join!(
        admin.call(patch("/admin/v1/rooms/a", json!({"max_active": 10})).header("if-match", &tag)),
        admin.call(patch("/admin/v1/rooms/a", json!({"max_active": 20})).header("if-match", &tag)),
    );
    let (winner, loser, won_with) = match (left.status, right.status) {
        (StatusCode::OK, StatusCode::PRECONDITION_FAILED) => (left, right, 10),
        (StatusCode::PRECONDITION_FAILED, StatusCode::OK) => (right, left, 20),
        other => panic!("expected one 200 and one 412, got {other:?}"),
    };
    loser.assert_problem(StatusCode::PRECONDITION_FAILED, "precondition_failed");
    assert_eq!(admin.config("a").await.max_active, won_with);
    assert_eq!(etag_of(&admin, "a").await, winner.header("etag").unwrap());
}

#[tokio::test]
async fn one_session_is_revoked_by_id() {
    let admin = Admin::new(vec![room("a")]).await;
    let kept = admin.call(Call::post("/admin/v1/rooms/a/passes")).await;
    let revoked = admin.call(Call::post("/admin/v1/rooms/a/passes")).await;
    let session = revoked.text("session").to_owned();
    let uri = format!("/admin/v1/rooms/a/sessions/{session}/revoke");

    // A read-only key cannot revoke.
    let refused = admin.read(Call::post(&uri)).await;
    refused.assert_problem(StatusCode::FORBIDDEN, "forbidden");
    assert_eq!(admin.harness.counters("a").await.active, 2);

    let reply = admin.call(Call::post(&uri)).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    assert_eq!(reply.text("id"), session);
    assert_eq!(reply.text("state"), "revoked");
    // Its slot is free at once, this node refuses it from now on, the other one is untouched.
    assert_eq!(admin.harness.counters("a").await.active, 1);
    let id = session.parse().unwrap();
    assert!(admin.harness.state.revocations().contains(&id));
    let listed = admin
        .read(Call::get("/admin/v1/rooms/a/sessions?state=revoked"))
        .await;
    let ids: Vec<&str> = listed.body["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| item["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [session.as_str()]);
    let still = admin
        .read(Call::get("/admin/v1/rooms/a/sessions?state=active"))
        .await;
    assert_eq!(still.body["sessions"][0]["id"], kept.body["session"]);

    // Again: nothing changes, the answer says how it ended.
    let again = admin.call(Call::post(&uri)).await;
    assert_eq!(
        (again.status, again.text("state")),
        (StatusCode::OK, "revoked")
    );
    assert_eq!(admin.harness.counters("a").await.active, 1);

    // Unknown or impossible ids, unknown rooms.
    for (uri, code) in [
        (
            "/admin/v1/rooms/a/sessions/AAAAAAAAAAAAAAAAAAAAAA/revoke".to_owned(),
            "session_not_found",
        ),
        (
            "/admin/v1/rooms/a/sessions/not-an-id/revoke".to_owned(),
            "session_not_found",
        ),
        (
            format!("/admin/v1/rooms/nope/sessions/{session}/revoke"),
            "room_not_found",
        ),
    ] {
        let reply = admin.call(Call::post(&uri)).await;
        reply.assert_problem(StatusCode::NOT_FOUND, code);
    }
    assert_eq!(admin.harness.counters("a").await.active, 1);
}
