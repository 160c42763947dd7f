//! The public JSON API (SPEC §6.1) driven through the router: joins, status polls, leaving,
//! the room summary, the JWKS and the backend's session endpoints, with the invariants of
//! SPEC §2 that a client can observe from outside.
#![allow(clippy::unwrap_used)]

#[path = "public_api/challenge.rs"]
mod challenge;
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use http::{Method, StatusCode};
use serde_json::json;

use anteroom_core::SessionId;
use anteroom_core::engine::{SessionEnd, SessionState};
use anteroom_core::room::{Identity, Mode, RoomConfig};
use anteroom_token::{PassClaims, PassExpectations};

use support::{Call, Harness, ISSUER, Reply, SERVICE_KEY, START, capped_room, room, room_id};

/// The members of a waiting (or paused) status answer, exactly.
const WAITING_MEMBERS: &[&str] = &[
    "room",
    "state",
    "ticket",
    "position",
    "ahead",
    "serving",
    "waiting",
    "eta_seconds",
    "eta_basis",
    "next_poll_ms",
];

/// What an admitted status answer adds.
const ADMITTED_EXTRA_MEMBERS: &[&str] = &["pass", "pass_expires_at", "redirect"];

fn waiting_members() -> BTreeSet<String> {
    WAITING_MEMBERS
        .iter()
        .map(|name| (*name).to_owned())
        .collect()
}

fn admitted_members() -> BTreeSet<String> {
    WAITING_MEMBERS
        .iter()
        .chain(ADMITTED_EXTRA_MEMBERS)
        .map(|name| (*name).to_owned())
        .collect()
}

fn join_uri(room: &str) -> String {
    format!("/_anteroom/v1/rooms/{room}/join")
}

fn status_uri(room: &str) -> String {
    format!("/_anteroom/v1/rooms/{room}/status")
}

fn ticket_uri(room: &str) -> String {
    format!("/_anteroom/v1/rooms/{room}/ticket")
}

fn session_uri(room: &str, session: &str, action: &str) -> String {
    format!("/_anteroom/v1/rooms/{room}/sessions/{session}/{action}")
}

fn ticket_cookie(room: &str) -> String {
    format!("anteroom_t_{room}")
}

/// A fresh visitor joins `room`; the join must succeed.
async fn join(harness: &Harness, room: &str) -> Reply {
    let reply = harness.check(Call::post(&join_uri(room))).await;
    assert_eq!(reply.status, StatusCode::OK, "join {room}: {}", reply.body);
    reply
}

/// The status of the ticket `token`, presented as the `X-Anteroom-Ticket` header.
async fn status(harness: &Harness, room: &str, token: &str) -> Reply {
    harness
        .check(Call::get(&status_uri(room)).header("x-anteroom-ticket", token))
        .await
}

/// Leaves with the ticket `token` in the room's cookie.
async fn leave(harness: &Harness, room: &str, token: &str) -> Reply {
    harness
        .check(Call::delete(&ticket_uri(room)).cookie(&ticket_cookie(room), token))
        .await
}

/// Ends a session through the backend endpoint with the right service key.
async fn end_session(harness: &Harness, room: &str, session: &str, action: &str) -> Reply {
    harness
        .check(
            Call::post(&session_uri(room, session, action))
                .header("authorization", &format!("Bearer {SERVICE_KEY}")),
        )
        .await
}

/// The verified claims of the pass in an admitted answer.
fn pass_claims(harness: &Harness, reply: &Reply, room: &str, generation: u32) -> PassClaims {
    let expect = PassExpectations {
        room,
        issuer: ISSUER,
        generation,
    };
    harness
        .keys()
        .verify_pass(reply.text("pass"), &expect, harness.now_secs())
        .unwrap()
}

/// The session id (`sub`) of the pass in an admitted answer.
fn session_of(harness: &Harness, reply: &Reply, room: &str) -> String {
    pass_claims(harness, reply, room, 1).sub
}

/// Splits a `Set-Cookie` line into `name=value` and its attributes (lowercased names).
fn cookie_attributes(line: &str) -> (String, BTreeMap<String, String>) {
    let mut parts = line.split(';').map(str::trim);
    let pair = parts.next().unwrap().to_owned();
    let attributes = parts
        .map(|part| match part.split_once('=') {
            Some((name, value)) => (name.to_ascii_lowercase(), value.to_owned()),
            None => (part.to_ascii_lowercase(), String::new()),
        })
        .collect();
    (pair, attributes)
}

/// Asserts `line` sets `name=value` with the hardened attributes; returns its `Max-Age`.
#[track_caller]
fn assert_hardened_cookie(line: &str, name: &str, value: &str, secure: bool) -> u64 {
    let (pair, attributes) = cookie_attributes(line);
    assert_eq!(pair, format!("{name}={value}"), "{line}");
    let mut expected: BTreeSet<&str> = ["path", "max-age", "httponly", "samesite"].into();
    if secure {
        expected.insert("secure");
    }
    assert_eq!(
        attributes
            .keys()
            .map(String::as_str)
            .collect::<BTreeSet<_>>(),
        expected,
        "{line}"
    );
    assert_eq!(attributes["path"], "/", "{line}");
    assert_eq!(attributes["samesite"], "Lax", "{line}");
    attributes["max-age"].parse().unwrap()
}

/// Unix seconds of an RFC 3339 timestamp.
fn rfc3339_secs(text: &str) -> u64 {
    let moment = time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|_| panic!("not RFC 3339: {text}"));
    u64::try_from(moment.unix_timestamp()).unwrap()
}

/// The answer without `next_poll_ms`, which carries random jitter.
fn without_jitter(reply: &Reply) -> serde_json::Value {
    let mut body = reply.body.clone();
    body.as_object_mut().unwrap().remove("next_poll_ms");
    body
}

/// A room of `max_active = 1` whose slot is taken by a first visitor; returns that visitor's
/// answer.
async fn fill_the_only_slot(harness: &Harness, room: &str) -> Reply {
    let first = join(harness, room).await;
    assert_eq!(first.text("state"), "admitted");
    first
}

// ---------------------------------------------------------------------------------------------
// join

#[tokio::test]
async fn join_into_a_free_room_admits_at_once_with_a_pass_and_hardened_cookies() {
    let harness = Harness::new(vec![room("sale")]).await;

    let reply = join(&harness, "sale").await;

    assert_eq!(reply.members(), admitted_members(), "{}", reply.body);
    assert_eq!(reply.text("room"), "sale");
    assert_eq!(reply.text("state"), "admitted");
    assert_eq!(reply.number("position"), 1);
    assert_eq!(reply.number("ahead"), 0);
    assert_eq!(reply.number("serving"), 1);
    assert_eq!(reply.number("waiting"), 0);
    assert_eq!(reply.text("redirect"), "/");
    let poll = reply.number("next_poll_ms");
    assert!((1_600..=2_400).contains(&poll), "next_poll_ms {poll}");
    assert_eq!(reply.header("cache-control"), Some("no-store"));
    assert_eq!(reply.header("content-type"), Some("application/json"));

    let claims = pass_claims(&harness, &reply, "sale", 1);
    let session_ttl = 600;
    assert_eq!(claims.exp, START.as_secs() + session_ttl);
    assert_eq!(rfc3339_secs(reply.text("pass_expires_at")), claims.exp);

    let ticket_line = reply.set_cookie("anteroom_t_sale").unwrap();
    let ticket_max_age =
        assert_hardened_cookie(ticket_line, "anteroom_t_sale", reply.text("ticket"), true);
    assert!(ticket_max_age > 0);
    let pass_line = reply.set_cookie("anteroom_p_sale").unwrap();
    let pass_max_age =
        assert_hardened_cookie(pass_line, "anteroom_p_sale", reply.text("pass"), true);
    assert_eq!(pass_max_age, session_ttl);

    let counters = harness.counters("sale").await;
    assert_eq!((counters.last_position, counters.active), (1, 1));
    assert_eq!(counters.totals.passes, 1);
}

#[tokio::test]
async fn cookies_are_not_secure_behind_plain_http() {
    let harness = Harness::with_public_url("http://localhost:8080", vec![room("sale")]).await;

    let reply = join(&harness, "sale").await;

    assert_eq!(reply.text("state"), "admitted");
    let ticket_line = reply.set_cookie("anteroom_t_sale").unwrap();
    assert_hardened_cookie(ticket_line, "anteroom_t_sale", reply.text("ticket"), false);
    let pass_line = reply.set_cookie("anteroom_p_sale").unwrap();
    assert_hardened_cookie(pass_line, "anteroom_p_sale", reply.text("pass"), false);
}

#[tokio::test]
async fn join_into_a_full_room_waits_with_exactly_the_status_fields() {
    let harness = Harness::new(vec![capped_room("sale", 1)]).await;
    fill_the_only_slot(&harness, "sale").await;

    let reply = join(&harness, "sale").await;

    assert_eq!(reply.members(), waiting_members(), "{}", reply.body);
    assert_eq!(reply.text("room"), "sale");
    assert_eq!(reply.text("state"), "waiting");
    assert_eq!(reply.number("position"), 2);
    assert_eq!(reply.number("ahead"), 0);
    assert_eq!(reply.number("serving"), 1);
    assert_eq!(reply.number("waiting"), 1);
    assert_eq!(reply.header("cache-control"), Some("no-store"));
    let line = reply.set_cookie("anteroom_t_sale").unwrap();
    assert_hardened_cookie(line, "anteroom_t_sale", reply.text("ticket"), true);
    assert_eq!(reply.set_cookie("anteroom_p_sale"), None);
    // Next in line, told a wait of 0 s: polled again within 2 s (the schedule's 2 s ± 20 %,
    // brought forward to the wait shown but never sooner than 2 s).
    assert_eq!(reply.number("eta_seconds"), 0, "{}", reply.body);
    let poll = reply.number("next_poll_ms");
    assert!((1_600..=2_000).contains(&poll), "next_poll_ms {poll}");

    // Nobody has been admitted by the admitter yet, so the rate is unknown: somebody with
    // people ahead gets the estimate of the room's configured pace, one slot turning over
    // every idle session lifetime (10 min), and is told so.
    let behind = join(&harness, "sale").await;
    assert_eq!(behind.number("ahead"), 1);
    assert_eq!(behind.number("eta_seconds"), 600, "{}", behind.body);
    assert_eq!(behind.text("eta_basis"), "configured");
    // A wait longer than the schedule's interval leaves the schedule (2 s ± 20 %).
    let poll = behind.number("next_poll_ms");
    assert!((1_600..=2_400).contains(&poll), "next_poll_ms {poll}");
}

#[tokio::test]
async fn joining_again_with_the_ticket_resumes_the_same_place() {
    let harness = Harness::new(vec![capped_room("sale", 1)]).await;
    fill_the_only_slot(&harness, "sale").await;
    let first = join(&harness, "sale").await;
    let token = first.text("ticket");
    let before = harness.counters("sale").await;

    let by_cookie = harness
        .check(Call::post(&join_uri("sale")).cookie("anteroom_t_sale", token))
        .await;
    let by_header = harness
        .check(Call::post(&join_uri("sale")).header("x-anteroom-ticket", token))
        .await;

    for again in [&by_cookie, &by_header] {
        assert_eq!(again.status, StatusCode::OK, "{}", again.body);
        assert_eq!(again.text("state"), "waiting");
        assert_eq!(again.number("position"), 2);
        assert_eq!(again.text("ticket"), token);
    }
    assert_eq!(harness.counters("sale").await, before);
}

#[tokio::test]
async fn joining_again_once_admitted_returns_the_same_session() {
    let harness = Harness::new(vec![room("sale")]).await;
    let first = join(&harness, "sale").await;

    let again = harness
        .check(Call::post(&join_uri("sale")).cookie("anteroom_t_sale", first.text("ticket")))
        .await;

    assert_eq!(again.status, StatusCode::OK);
    assert_eq!(again.text("state"), "admitted");
    assert_eq!(again.number("position"), 1);
    assert_eq!(
        session_of(&harness, &again, "sale"),
        session_of(&harness, &first, "sale")
    );
    let counters = harness.counters("sale").await;
    assert_eq!((counters.last_position, counters.active), (1, 1));
    assert_eq!(counters.totals.passes, 1);
}

#[tokio::test]
async fn the_return_path_becomes_the_redirect_once_admitted() {
    let harness = Harness::new(vec![capped_room("sale", 1)]).await;
    let body = json!({"return": "/shop/cart?x=1"}).to_string();

    // Admitted at once: the redirect is in the join answer.
    let first = harness
        .check(Call::post(&join_uri("sale")).json(body.clone()))
        .await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(first.text("state"), "admitted");
    assert_eq!(first.text("redirect"), "/shop/cart?x=1");

    // Queued: the path is remembered until the ticket is let in.
    let second = harness
        .check(Call::post(&join_uri("sale")).json(body))
        .await;
    assert_eq!(second.text("state"), "waiting");
    assert!(second.body.get("redirect").is_none(), "{}", second.body);
    let session = session_of(&harness, &first, "sale");
    assert_eq!(
        end_session(&harness, "sale", &session, "complete")
            .await
            .status,
        StatusCode::OK
    );
    let admitted = status(&harness, "sale", second.text("ticket")).await;
    assert_eq!(admitted.text("state"), "admitted");
    assert_eq!(admitted.text("redirect"), "/shop/cart?x=1");
}

#[tokio::test]
async fn join_refuses_return_paths_that_leave_the_site() {
    let harness = Harness::new(vec![capped_room("sale", 1)]).await;
    fill_the_only_slot(&harness, "sale").await;
    let before = harness.counters("sale").await;
    let too_long = format!("/{}", "a".repeat(3_000));
    let attempts = [
        "https://evil.example",
        "//evil.example",
        "/\\evil",
        "/\\/evil.example",
        "/\t/evil.example",
        "/shop\u{7}cart",
        "/shop\ncart",
        "javascript:alert(1)",
        "evil.example/path",
        "",
        too_long.as_str(),
    ];

    for attempt in attempts {
        let body = json!({"return": attempt}).to_string();
        let reply = harness
            .check(Call::post(&join_uri("sale")).json(body))
            .await;
        reply.assert_problem(StatusCode::BAD_REQUEST, "invalid_return");
        assert_eq!(reply.set_cookie("anteroom_t_sale"), None, "{attempt:?}");
    }
    assert_eq!(harness.counters("sale").await, before);
}

#[tokio::test]
async fn a_queue_all_room_answers_paused_and_admits_nobody() {
    let brake = RoomConfig {
        mode: Mode::QueueAll,
        ..room("brake")
    };
    let harness = Harness::new(vec![brake]).await;

    let joined = join(&harness, "brake").await;
    assert_eq!(joined.members(), waiting_members(), "{}", joined.body);
    assert_eq!(joined.text("state"), "paused");
    assert_eq!(joined.number("position"), 1);

    harness.advance(Duration::from_secs(2));
    assert_eq!(harness.tick("brake").await.admitted, 0);
    let polled = status(&harness, "brake", joined.text("ticket")).await;
    assert_eq!(polled.status, StatusCode::OK);
    assert_eq!(polled.text("state"), "paused");
    assert_eq!(harness.counters("brake").await.active, 0);
}

/// Once admission is paused nobody moves, so the status shows no estimate (SPEC §5.5: null
/// while the rate is zero), where it showed one a moment before.
#[tokio::test]
async fn a_paused_room_shows_no_estimate() {
    let brake = RoomConfig {
        session_ttl: Duration::from_secs(30),
        ..capped_room("brake", 1)
    };
    let harness = Harness::new(vec![brake.clone()]).await;
    assert_eq!(join(&harness, "brake").await.text("state"), "admitted");
    join(&harness, "brake").await;
    let third = join(&harness, "brake").await;
    // The first session expires and the admitter lets the second visitor in: a measured rate.
    harness.advance(Duration::from_secs(40));
    assert_eq!(harness.tick("brake").await.admitted, 1);
    let waiting = status(&harness, "brake", third.text("ticket")).await;
    assert_eq!(waiting.text("state"), "waiting");
    assert!(waiting.body["eta_seconds"].is_u64(), "{}", waiting.body);
    assert_eq!(waiting.text("eta_basis"), "measured");

    harness
        .store
        .put_room(RoomConfig {
            mode: Mode::QueueAll,
            ..brake
        })
        .await
        .unwrap();
    let paused = status(&harness, "brake", third.text("ticket")).await;
    assert_eq!(paused.text("state"), "paused");
    assert_eq!(paused.number("ahead"), 0);
    assert!(paused.body["eta_seconds"].is_null(), "{}", paused.body);
    assert!(paused.body["eta_basis"].is_null(), "{}", paused.body);
}

#[tokio::test]
async fn a_closed_room_refuses_joins_without_changing_anything() {
    let closed = RoomConfig {
        mode: Mode::Closed,
        ..room("shut")
    };
    let harness = Harness::new(vec![closed]).await;
    let before = harness.counters("shut").await;

    let reply = harness.check(Call::post(&join_uri("shut"))).await;

    reply.assert_problem(StatusCode::SERVICE_UNAVAILABLE, "room_closed");
    assert_eq!(reply.set_cookie("anteroom_t_shut"), None);
    assert_eq!(harness.counters("shut").await, before);
}

#[tokio::test]
async fn unknown_and_invalid_rooms_are_not_found() {
    let harness = Harness::new(vec![room("sale")]).await;

    for name in ["nope", "Bad_Room", "-dash", "x".repeat(65).as_str()] {
        let joined = harness.check(Call::post(&join_uri(name))).await;
        joined.assert_problem(StatusCode::NOT_FOUND, "room_not_found");
        let summary = harness
            .check(Call::get(&format!("/_anteroom/v1/rooms/{name}")))
            .await;
        summary.assert_problem(StatusCode::NOT_FOUND, "room_not_found");
    }
    assert_eq!(harness.counters("sale").await.last_position, 0);
}

#[tokio::test]
async fn bad_join_bodies_are_refused_without_changing_anything() {
    let harness = Harness::new(vec![capped_room("sale", 1)]).await;
    fill_the_only_slot(&harness, "sale").await;
    let before = harness.counters("sale").await;
    let malformed = [
        "{",
        "{\"return\": ",
        "not json",
        "null",
        "[]",
        "{\"return\": 5}",
        "{\"return\": \"/a\"} trailing",
    ];

    for text in malformed {
        let reply = harness
            .check(Call::post(&join_uri("sale")).json(text))
            .await;
        reply.assert_problem(StatusCode::BAD_REQUEST, "invalid_json");
    }
    let not_utf8 = harness
        .check(Call::post(&join_uri("sale")).bytes(vec![0xff, 0xfe, 0x7b]))
        .await;
    not_utf8.assert_problem(StatusCode::BAD_REQUEST, "invalid_json");

    let unknown_field = harness
        .check(Call::post(&join_uri("sale")).json(r#"{"retrun": "/cart"}"#))
        .await;
    assert_eq!(unknown_field.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        unknown_field.header("content-type"),
        Some("application/problem+json")
    );

    let huge = json!({"return": format!("/{}", "a".repeat(17 * 1024))}).to_string();
    let too_large = harness
        .check(Call::post(&join_uri("sale")).json(huge))
        .await;
    too_large.assert_problem(StatusCode::PAYLOAD_TOO_LARGE, "body_too_large");

    assert_eq!(harness.counters("sale").await, before);
}

#[tokio::test]
async fn empty_and_blank_join_bodies_are_plain_joins() {
    let harness = Harness::new(vec![capped_room("sale", 1)]).await;
    fill_the_only_slot(&harness, "sale").await;

    let empty = harness.check(Call::post(&join_uri("sale")).json("")).await;
    let blank = harness
        .check(Call::post(&join_uri("sale")).json(" \n\t "))
        .await;
    let object = harness
        .check(Call::post(&join_uri("sale")).json("{}"))
        .await;

    let positions: Vec<u64> = [&empty, &blank, &object]
        .iter()
        .map(|reply| {
            assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
            reply.number("position")
        })
        .collect();
    assert_eq!(positions, [2, 3, 4]);
}

#[tokio::test]
async fn an_identity_room_binds_one_ticket_per_user_and_puts_it_in_the_pass() {
    let members = RoomConfig {
        identity: Identity::Header("X-User-Id".to_owned()),
        ..capped_room("members", 1)
    };
    let harness = Harness::new(vec![members]).await;
    let join_as = |user: &'static str| Call::post(&join_uri("members")).header("x-user-id", user);

    // Without the header, nobody gets in or in line.
    let before = harness.counters("members").await;
    let anonymous = harness.check(Call::post(&join_uri("members"))).await;
    anonymous.assert_problem(StatusCode::BAD_REQUEST, "identity_required");
    let blank = harness.check(join_as("  ")).await;
    blank.assert_problem(StatusCode::BAD_REQUEST, "identity_required");
    assert_eq!(harness.counters("members").await, before);

    // The first user takes the slot; the pass names them.
    let carol = harness.check(join_as("carol")).await;
    assert_eq!(carol.text("state"), "admitted");
    assert_eq!(
        pass_claims(&harness, &carol, "members", 1).uid.as_deref(),
        Some("carol")
    );

    // The same user joining twice, without a cookie, keeps one place.
    let alice = harness.check(join_as("alice")).await;
    let alice_again = harness.check(join_as("alice")).await;
    assert_eq!(alice.text("state"), "waiting");
    assert_eq!(alice_again.number("position"), alice.number("position"));
    assert_eq!(alice_again.text("ticket"), alice.text("ticket"));
    let bob = harness.check(join_as("bob")).await;
    assert_eq!(bob.number("position"), alice.number("position") + 1);
    assert_eq!(harness.counters("members").await.last_position, 3);

    // Once let in, alice's pass carries her identity.
    let carol_session = pass_claims(&harness, &carol, "members", 1).sub;
    end_session(&harness, "members", &carol_session, "complete").await;
    let admitted = status(&harness, "members", alice.text("ticket")).await;
    assert_eq!(admitted.text("state"), "admitted");
    let claims = pass_claims(&harness, &admitted, "members", 1);
    assert_eq!(claims.uid.as_deref(), Some("alice"));
    assert_eq!(claims.pos, alice.number("position"));
}

// ---------------------------------------------------------------------------------------------
// status

#[tokio::test]
async fn status_reads_the_ticket_from_cookie_header_or_query() {
    let harness = Harness::new(vec![capped_room("sale", 1)]).await;
    fill_the_only_slot(&harness, "sale").await;
    let joined = join(&harness, "sale").await;
    let token = joined.text("ticket");

    let by_cookie = harness
        .check(Call::get(&status_uri("sale")).cookie("anteroom_t_sale", token))
        .await;
    let by_header = status(&harness, "sale", token).await;
    let by_query = harness
        .check(Call::get(&format!("{}?ticket={token}", status_uri("sale"))))
        .await;

    for reply in [&by_cookie, &by_header, &by_query] {
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
        assert_eq!(reply.members(), waiting_members());
        assert_eq!(reply.header("cache-control"), Some("no-store"));
        assert_eq!(without_jitter(reply), without_jitter(&by_cookie));
    }
    assert_eq!(by_cookie.text("ticket"), token);
    assert_eq!(by_cookie.number("position"), 2);
}

#[tokio::test]
async fn polling_keeps_a_ticket_alive_and_silence_abandons_it() {
    let config = RoomConfig {
        ticket_idle_ttl: Duration::from_secs(60),
        ..capped_room("poll", 1)
    };
    let harness = Harness::new(vec![config]).await;
    fill_the_only_slot(&harness, "poll").await;
    let joined = join(&harness, "poll").await;
    let token = joined.text("ticket");

    for _ in 0..2 {
        harness.advance(Duration::from_secs(31));
        let polled = status(&harness, "poll", token).await;
        assert_eq!(polled.status, StatusCode::OK);
        assert_eq!(polled.text("state"), "waiting");
    }
    assert_eq!(harness.tick("poll").await.abandoned, 0);
    let still = status(&harness, "poll", token).await;
    assert_eq!(still.text("state"), "waiting");
    assert_eq!(still.number("position"), 2);
    assert_eq!(harness.counters("poll").await.waiting, 1);

    harness.advance(Duration::from_secs(61));
    assert_eq!(harness.tick("poll").await.abandoned, 1);
    let gone = status(&harness, "poll", token).await;
    gone.assert_problem(StatusCode::GONE, "ticket_expired");
    let counters = harness.counters("poll").await;
    assert_eq!((counters.waiting, counters.totals.abandoned), (0, 1));

    // Coming back after being abandoned means joining again at the back.
    let back = harness
        .check(Call::post(&join_uri("poll")).cookie("anteroom_t_poll", token))
        .await;
    assert_eq!(back.status, StatusCode::OK);
    assert_eq!(back.number("position"), 3);
}

#[tokio::test]
async fn status_without_a_valid_ticket_is_refused_without_changing_anything() {
    let harness = Harness::new(vec![capped_room("sale", 1), room("other")]).await;
    fill_the_only_slot(&harness, "sale").await;
    let joined = join(&harness, "sale").await;
    let token = joined.text("ticket").to_owned();
    let foreign = join(&harness, "other").await.text("ticket").to_owned();
    let before = harness.counters("sale").await;

    let missing = harness.check(Call::get(&status_uri("sale"))).await;
    missing.assert_problem(StatusCode::BAD_REQUEST, "ticket_missing");
    let empty_cookie = harness
        .check(Call::get(&status_uri("sale")).cookie("anteroom_t_sale", ""))
        .await;
    empty_cookie.assert_problem(StatusCode::BAD_REQUEST, "ticket_missing");
    // Another room's cookie is not this room's ticket.
    let other_cookie = harness
        .check(Call::get(&status_uri("sale")).cookie("anteroom_t_other", &foreign))
        .await;
    other_cookie.assert_problem(StatusCode::BAD_REQUEST, "ticket_missing");

    let fields: Vec<&str> = token.split('.').collect();
    assert_eq!(fields.len(), 6, "{token}");
    let with_field = |index: usize, value: &str| {
        let mut copy = fields.clone();
        copy[index] = value;
        copy.join(".")
    };
    let other_ticket = with_field(2, "AAAAAAAAAAAAAAAAAAAAAA");
    let moved_forward = with_field(3, "1");
    let other_generation = with_field(4, "2");
    let mac = fields[5];
    let first = if mac.starts_with('A') { "B" } else { "A" };
    let flipped_mac = with_field(5, &format!("{first}{}", &mac[1..]));
    let forged = "t1.sale.AAAAAAAAAAAAAAAAAAAAAA.1.1.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
    let over_long = format!("{token}{}", "A".repeat(10_000));
    let invalid = [
        "garbage",
        "t1",
        forged,
        other_ticket.as_str(),
        moved_forward.as_str(),
        other_generation.as_str(),
        flipped_mac.as_str(),
        over_long.as_str(),
        foreign.as_str(),
    ];

    for bad in invalid {
        let by_header = status(&harness, "sale", bad).await;
        by_header.assert_problem(StatusCode::BAD_REQUEST, "ticket_invalid");
        let by_cookie = harness
            .check(Call::get(&status_uri("sale")).cookie("anteroom_t_sale", bad))
            .await;
        by_cookie.assert_problem(StatusCode::BAD_REQUEST, "ticket_invalid");
    }
    assert_eq!(harness.counters("sale").await, before);
}

#[tokio::test]
async fn a_ticket_that_left_is_gone() {
    let harness = Harness::new(vec![capped_room("sale", 1)]).await;
    fill_the_only_slot(&harness, "sale").await;
    let joined = join(&harness, "sale").await;

    assert_eq!(
        leave(&harness, "sale", joined.text("ticket")).await.status,
        StatusCode::NO_CONTENT
    );

    let reply = status(&harness, "sale", joined.text("ticket")).await;
    reply.assert_problem(StatusCode::GONE, "ticket_expired");
}

#[tokio::test]
async fn a_reset_expires_old_tickets_and_a_join_starts_over() {
    let harness = Harness::new(vec![capped_room("sale", 1)]).await;
    let first = fill_the_only_slot(&harness, "sale").await;
    let waiting = join(&harness, "sale").await;

    harness.store.reset(&room_id("sale"), false).await.unwrap();

    let old_waiting = status(&harness, "sale", waiting.text("ticket")).await;
    old_waiting.assert_problem(StatusCode::GONE, "ticket_expired");
    let old_admitted = status(&harness, "sale", first.text("ticket")).await;
    old_admitted.assert_problem(StatusCode::GONE, "ticket_expired");

    // The old cookie does not resume anything: a fresh ticket, further on, in the new
    // generation (the reset freed the slot, so it is let in at once).
    let again = harness
        .check(Call::post(&join_uri("sale")).cookie("anteroom_t_sale", waiting.text("ticket")))
        .await;
    assert_eq!(again.status, StatusCode::OK);
    assert_eq!(again.number("position"), 3);
    assert_eq!(again.text("state"), "admitted");
    assert_eq!(pass_claims(&harness, &again, "sale", 2).r#gen, 2);
}

#[tokio::test]
async fn status_issues_the_pass_once_admitted_and_the_same_one_again() {
    let config = RoomConfig {
        session_ttl: Duration::from_secs(60),
        ..capped_room("drop", 1)
    };
    let harness = Harness::new(vec![config]).await;
    fill_the_only_slot(&harness, "drop").await;
    let joined = join(&harness, "drop").await;
    let cookie = ("anteroom_t_drop", joined.text("ticket").to_owned());

    // The first session runs out; the admitter gives its slot to the waiting ticket.
    harness.advance(Duration::from_secs(61));
    let report = harness.tick("drop").await;
    assert_eq!((report.expired, report.admitted), (1, 1));
    let counters = harness.counters("drop").await;
    assert_eq!((counters.active, counters.admitted_unclaimed), (0, 1));

    let admitted = harness
        .check(Call::get(&status_uri("drop")).cookie(cookie.0, &cookie.1))
        .await;
    assert_eq!(admitted.status, StatusCode::OK, "{}", admitted.body);
    assert_eq!(admitted.members(), admitted_members(), "{}", admitted.body);
    assert_eq!(admitted.text("state"), "admitted");
    assert_eq!(admitted.number("position"), 2);
    assert_eq!(admitted.number("ahead"), 0);
    assert_eq!(admitted.number("serving"), 2);

    let claims = pass_claims(&harness, &admitted, "drop", 1);
    let now = harness.now_secs();
    assert_eq!(claims.aud, "drop");
    assert_eq!(claims.iss, ISSUER);
    assert_eq!(claims.sub, claims.jti);
    assert_eq!(claims.pos, 2);
    assert_eq!(claims.r#gen, 1);
    assert_eq!(claims.scope, "room");
    assert_eq!(claims.uid, None);
    assert_eq!((claims.iat, claims.nbf, claims.exp), (now, now, now + 60));
    assert_eq!(rfc3339_secs(admitted.text("pass_expires_at")), claims.exp);
    let line = admitted.set_cookie("anteroom_p_drop").unwrap();
    assert_eq!(
        assert_hardened_cookie(line, "anteroom_p_drop", admitted.text("pass"), true),
        60
    );

    let session_id: SessionId = claims.sub.parse().unwrap();
    let session = harness
        .store
        .session(&room_id("drop"), session_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(session.state, SessionState::Active);
    assert_eq!(session.position, 2);
    let counters = harness.counters("drop").await;
    assert_eq!((counters.active, counters.admitted_unclaimed), (1, 0));

    // Asking again (I7): the same session, no second slot.
    harness.advance(Duration::from_secs(5));
    let again = harness
        .check(Call::get(&status_uri("drop")).cookie(cookie.0, &cookie.1))
        .await;
    assert_eq!(again.text("state"), "admitted");
    assert_eq!(pass_claims(&harness, &again, "drop", 1).sub, claims.sub);
    let rejoin = harness
        .check(Call::post(&join_uri("drop")).cookie(cookie.0, &cookie.1))
        .await;
    assert_eq!(pass_claims(&harness, &rejoin, "drop", 1).sub, claims.sub);
    let counters = harness.counters("drop").await;
    assert_eq!((counters.active, counters.admitted_unclaimed), (1, 0));
    assert_eq!(counters.totals.passes, 2);
}

// ---------------------------------------------------------------------------------------------
// ahead (I5)

/// One visitor of the `ahead` scenario, as the test models it.
struct Visitor {
    name: &'static str,
    token: String,
    position: u64,
    /// Still in line (not admitted, left or abandoned).
    waiting: bool,
    /// The last `ahead` they were shown.
    last_ahead: u64,
}

/// Polls every waiting visitor except `skip` and checks that `ahead` is exactly the number of
/// waiting visitors before them and never grew.
async fn check_aheads(harness: &Harness, room: &str, visitors: &mut [Visitor], skip: &[&str]) {
    let positions: Vec<u64> = visitors
        .iter()
        .filter(|visitor| visitor.waiting)
        .map(|visitor| visitor.position)
        .collect();
    for visitor in visitors
        .iter_mut()
        .filter(|visitor| visitor.waiting && !skip.contains(&visitor.name))
    {
        let reply = status(harness, room, &visitor.token).await;
        assert_eq!(
            reply.status,
            StatusCode::OK,
            "{}: {}",
            visitor.name,
            reply.body
        );
        assert_eq!(reply.text("state"), "waiting", "{}", visitor.name);
        let ahead = reply.number("ahead");
        let expected = positions.iter().filter(|&&p| p < visitor.position).count() as u64;
        assert_eq!(ahead, expected, "{} at {}", visitor.name, visitor.position);
        assert!(ahead <= visitor.last_ahead, "{}'s ahead grew", visitor.name);
        assert_eq!(reply.number("waiting"), positions.len() as u64);
        visitor.last_ahead = ahead;
    }
}

/// Marks the lowest waiting visitor as let in, checks that its status now says so, and
/// returns its session id.
async fn next_is_admitted(harness: &Harness, room: &str, visitors: &mut [Visitor]) -> String {
    let next = visitors
        .iter_mut()
        .filter(|visitor| visitor.waiting)
        .min_by_key(|visitor| visitor.position)
        .unwrap();
    next.waiting = false;
    let reply = status(harness, room, &next.token).await;
    assert_eq!(reply.text("state"), "admitted", "{}", next.name);
    session_of(harness, &reply, room)
}

#[tokio::test]
async fn ahead_is_exact_and_never_grows() {
    let config = RoomConfig {
        ticket_idle_ttl: Duration::from_secs(60),
        ..capped_room("line", 1)
    };
    let harness = Harness::new(vec![config]).await;
    let first = fill_the_only_slot(&harness, "line").await;
    let mut visitors = Vec::new();
    for (index, name) in ["b", "c", "d", "e", "f"].into_iter().enumerate() {
        let reply = join(&harness, "line").await;
        assert_eq!(reply.number("ahead"), index as u64, "{name}");
        visitors.push(Visitor {
            name,
            token: reply.text("ticket").to_owned(),
            position: reply.number("position"),
            waiting: true,
            last_ahead: reply.number("ahead"),
        });
    }
    check_aheads(&harness, "line", &mut visitors, &[]).await;

    // Someone in the middle leaves.
    assert_eq!(
        leave(&harness, "line", &visitors[2].token).await.status,
        StatusCode::NO_CONTENT
    );
    visitors[2].waiting = false;
    check_aheads(&harness, "line", &mut visitors, &[]).await;

    // A newcomer goes to the back.
    let g = join(&harness, "line").await;
    assert_eq!(g.number("ahead"), 4);
    visitors.push(Visitor {
        name: "g",
        token: g.text("ticket").to_owned(),
        position: g.number("position"),
        waiting: true,
        last_ahead: 4,
    });
    check_aheads(&harness, "line", &mut visitors, &[]).await;

    // The session in the room ends; the front of the line is let in.
    let session = session_of(&harness, &first, "line");
    assert_eq!(
        end_session(&harness, "line", &session, "complete")
            .await
            .status,
        StatusCode::OK
    );
    let b_session = next_is_admitted(&harness, "line", &mut visitors).await;
    check_aheads(&harness, "line", &mut visitors, &[]).await;

    // "e" stops polling and is abandoned; nobody counts it any more.
    for _ in 0..2 {
        harness.advance(Duration::from_secs(35));
        check_aheads(&harness, "line", &mut visitors, &["e"]).await;
    }
    assert_eq!(harness.tick("line").await.abandoned, 1);
    let e = visitors
        .iter_mut()
        .find(|visitor| visitor.name == "e")
        .unwrap();
    e.waiting = false;
    status(&harness, "line", &e.token)
        .await
        .assert_problem(StatusCode::GONE, "ticket_expired");
    check_aheads(&harness, "line", &mut visitors, &[]).await;

    // Another session ends; the next one goes in.
    assert_eq!(
        end_session(&harness, "line", &b_session, "abandon")
            .await
            .status,
        StatusCode::OK
    );
    next_is_admitted(&harness, "line", &mut visitors).await;
    check_aheads(&harness, "line", &mut visitors, &[]).await;
    let still_waiting: Vec<&str> = visitors
        .iter()
        .filter(|visitor| visitor.waiting)
        .map(|visitor| visitor.name)
        .collect();
    assert_eq!(still_waiting, ["f", "g"]);
}

// ---------------------------------------------------------------------------------------------
// leave

#[tokio::test]
async fn leaving_clears_the_cookie_and_hands_an_admitted_slot_on_at_once() {
    let harness = Harness::new(vec![capped_room("shop", 1)]).await;
    let first = fill_the_only_slot(&harness, "shop").await;
    let second = join(&harness, "shop").await;
    let third = join(&harness, "shop").await;
    // The first session ends: the second ticket is let in but has not claimed its pass.
    let session = session_of(&harness, &first, "shop");
    end_session(&harness, "shop", &session, "complete").await;
    let counters = harness.counters("shop").await;
    assert_eq!((counters.active, counters.admitted_unclaimed), (0, 1));

    let left = leave(&harness, "shop", second.text("ticket")).await;

    assert_eq!(left.status, StatusCode::NO_CONTENT);
    assert_eq!(left.body, serde_json::Value::Null);
    let line = left.set_cookie("anteroom_t_shop").unwrap();
    assert_eq!(assert_hardened_cookie(line, "anteroom_t_shop", "", true), 0);
    // The same operation handed the slot to the third ticket.
    let counters = harness.counters("shop").await;
    assert_eq!((counters.admitted_unclaimed, counters.waiting), (1, 0));
    assert_eq!(counters.totals.left, 1);
    let third_status = status(&harness, "shop", third.text("ticket")).await;
    assert_eq!(third_status.text("state"), "admitted");

    // Leaving twice is still a 204; the ticket stays gone.
    let again = leave(&harness, "shop", second.text("ticket")).await;
    assert_eq!(again.status, StatusCode::NO_CONTENT);
    assert_eq!(harness.counters("shop").await.totals.left, 1);
    status(&harness, "shop", second.text("ticket"))
        .await
        .assert_problem(StatusCode::GONE, "ticket_expired");
}

#[tokio::test]
async fn leaving_the_line_frees_the_place() {
    let harness = Harness::new(vec![capped_room("shop", 1)]).await;
    fill_the_only_slot(&harness, "shop").await;
    let waiting = join(&harness, "shop").await;
    let behind = join(&harness, "shop").await;
    assert_eq!(behind.number("ahead"), 1);

    let by_header = harness
        .check(
            Call::delete(&ticket_uri("shop")).header("x-anteroom-ticket", waiting.text("ticket")),
        )
        .await;

    assert_eq!(by_header.status, StatusCode::NO_CONTENT);
    assert_eq!(harness.counters("shop").await.waiting, 1);
    assert_eq!(
        status(&harness, "shop", behind.text("ticket"))
            .await
            .number("ahead"),
        0
    );
}

#[tokio::test]
async fn leaving_without_a_valid_ticket_is_refused() {
    let harness = Harness::new(vec![capped_room("shop", 1), room("other")]).await;
    fill_the_only_slot(&harness, "shop").await;
    join(&harness, "shop").await;
    let foreign = join(&harness, "other").await;
    let before = harness.counters("shop").await;

    let missing = harness.check(Call::delete(&ticket_uri("shop"))).await;
    missing.assert_problem(StatusCode::BAD_REQUEST, "ticket_missing");
    for bad in ["garbage", foreign.text("ticket")] {
        let reply = leave(&harness, "shop", bad).await;
        reply.assert_problem(StatusCode::BAD_REQUEST, "ticket_invalid");
    }
    assert_eq!(harness.counters("shop").await, before);
}

// ---------------------------------------------------------------------------------------------
// room summary and JWKS

#[tokio::test]
async fn the_room_summary_is_public_and_briefly_cacheable() {
    let config = RoomConfig {
        admit_per_minute: 120,
        ..capped_room("info", 1)
    };
    let harness = Harness::new(vec![config]).await;
    fill_the_only_slot(&harness, "info").await;
    join(&harness, "info").await;
    join(&harness, "info").await;

    let reply = harness.check(Call::get("/_anteroom/v1/rooms/info")).await;

    assert_eq!(reply.status, StatusCode::OK);
    let expected: BTreeSet<String> = [
        "room",
        "mode",
        "serving",
        "waiting",
        "active",
        "admit_per_minute",
        "eta_seconds_for_new",
    ]
    .iter()
    .map(|name| (*name).to_owned())
    .collect();
    assert_eq!(reply.members(), expected, "{}", reply.body);
    assert_eq!(reply.text("room"), "info");
    assert_eq!(reply.text("mode"), "queue");
    assert_eq!(reply.number("serving"), 1);
    assert_eq!(reply.number("waiting"), 2);
    assert_eq!(reply.number("active"), 1);
    assert_eq!(reply.number("admit_per_minute"), 120);
    assert!(
        reply.body["eta_seconds_for_new"].is_null(),
        "{}",
        reply.body
    );
    assert_eq!(reply.header("cache-control"), Some("public, max-age=1"));
    assert_eq!(reply.header("content-type"), Some("application/json"));
    assert_eq!(reply.set_cookie("anteroom_t_info"), None);
}

#[tokio::test]
async fn the_jwks_lists_the_key_that_signs_passes() {
    let harness = Harness::new(vec![room("sale")]).await;
    let joined = join(&harness, "sale").await;
    let inspection = harness
        .keys()
        .inspect(joined.text("pass"), harness.now_secs())
        .unwrap();
    let kid = inspection.header["kid"].as_str().unwrap().to_owned();

    let reply = harness.check(Call::get("/.well-known/jwks.json")).await;

    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.body["keys"][0]["kid"], kid.as_str());
    assert_eq!(inspection.header["alg"], "EdDSA");
    for key in reply.body["keys"].as_array().unwrap() {
        assert!(
            key.get("d").is_none(),
            "private key material published: {key}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// backend session endpoints

#[tokio::test]
async fn ending_a_session_needs_the_service_key() {
    let harness = Harness::new(vec![capped_room("svc", 1)]).await;
    let first = fill_the_only_slot(&harness, "svc").await;
    join(&harness, "svc").await;
    let session = session_of(&harness, &first, "svc");
    let before = harness.counters("svc").await;

    for action in ["complete", "abandon"] {
        let uri = session_uri("svc", &session, action);
        let refused = [
            Call::post(&uri),
            Call::post(&uri).header("authorization", "Bearer not-the-key"),
            Call::post(&uri).header("authorization", &format!("Basic {SERVICE_KEY}")),
            Call::post(&uri).header("authorization", SERVICE_KEY),
            Call::post(&uri).header("authorization", "Bearer "),
        ];
        for call in refused {
            let reply = harness.check(call).await;
            reply.assert_problem(StatusCode::UNAUTHORIZED, "unauthorized");
        }
    }
    assert_eq!(harness.counters("svc").await, before);
}

#[tokio::test]
async fn completing_a_session_frees_its_slot_and_revokes_it() {
    let harness = Harness::new(vec![capped_room("svc", 1)]).await;
    let first = fill_the_only_slot(&harness, "svc").await;
    let second = join(&harness, "svc").await;
    let third = join(&harness, "svc").await;
    let session = session_of(&harness, &first, "svc");

    let completed = end_session(&harness, "svc", &session, "complete").await;

    assert_eq!(completed.status, StatusCode::OK, "{}", completed.body);
    assert_eq!(
        completed.body,
        json!({"room": "svc", "session": session, "state": "completed"})
    );
    let stored = harness
        .store
        .session(&room_id("svc"), session.parse().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(
            stored.state,
            SessionState::Ended {
                reason: SessionEnd::Completed,
                ..
            }
        ),
        "{stored:?}"
    );
    // The slot was refilled by the same request.
    let counters = harness.counters("svc").await;
    assert_eq!((counters.active, counters.admitted_unclaimed), (0, 1));
    let second_status = status(&harness, "svc", second.text("ticket")).await;
    assert_eq!(second_status.text("state"), "admitted");

    // Completing again changes nothing.
    let before = harness.counters("svc").await;
    let again = end_session(&harness, "svc", &session, "complete").await;
    assert_eq!(again.status, StatusCode::OK);
    assert_eq!(again.body["state"], "completed");
    assert_eq!(harness.counters("svc").await, before);

    // Abandoning works the same way.
    let second_session = session_of(&harness, &second_status, "svc");
    let abandoned = end_session(&harness, "svc", &second_session, "abandon").await;
    assert_eq!(abandoned.status, StatusCode::OK);
    assert_eq!(abandoned.body["state"], "abandoned");
    let stored = harness
        .store
        .session(&room_id("svc"), second_session.parse().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(
            stored.state,
            SessionState::Ended {
                reason: SessionEnd::Abandoned,
                ..
            }
        ),
        "{stored:?}"
    );
    let third_status = status(&harness, "svc", third.text("ticket")).await;
    assert_eq!(third_status.text("state"), "admitted");
    let counters = harness.counters("svc").await;
    assert_eq!((counters.active, counters.admitted_unclaimed), (1, 0));
    assert_eq!(
        (
            counters.totals.completed,
            counters.totals.sessions_abandoned
        ),
        (1, 1)
    );
}

#[tokio::test]
async fn unknown_sessions_and_rooms_are_not_found() {
    let harness = Harness::new(vec![room("svc"), room("other")]).await;
    let foreign = join(&harness, "other").await;
    let foreign_session = session_of(&harness, &foreign, "other");
    let before = harness.counters("svc").await;
    let unknown = SessionId::from_bytes([7; 16]).to_string();

    for action in ["complete", "abandon"] {
        for session in [
            unknown.as_str(),
            "malformed",
            "%20",
            foreign_session.as_str(),
        ] {
            let reply = end_session(&harness, "svc", session, action).await;
            reply.assert_problem(StatusCode::NOT_FOUND, "session_not_found");
        }
        let no_room = end_session(&harness, "nope", &unknown, action).await;
        no_room.assert_problem(StatusCode::NOT_FOUND, "room_not_found");
    }
    assert_eq!(harness.counters("svc").await, before);
    let other = harness.counters("other").await;
    assert_eq!((other.active, other.totals.completed), (1, 0));
}

// ---------------------------------------------------------------------------------------------
// the rest of the reserved prefix

#[tokio::test]
async fn unknown_paths_are_problem_json_not_found() {
    let harness = Harness::new(vec![room("sale")]).await;

    for path in [
        "/_anteroom/",
        "/_anteroom/nope",
        "/_anteroom/v1",
        "/_anteroom/v1/rooms",
        "/_anteroom/v1/rooms/sale/nope",
        "/_anteroom/v2/rooms/sale/join",
    ] {
        let reply = harness.check(Call::get(path)).await;
        reply.assert_problem(StatusCode::NOT_FOUND, "not_found");
    }
    let reply = harness
        .check(Call::post("/_anteroom/v1/rooms/sale/sessions/x/finish"))
        .await;
    reply.assert_problem(StatusCode::NOT_FOUND, "not_found");
}

#[tokio::test]
async fn no_request_is_answered_with_a_server_error() {
    let harness = Harness::new(vec![room("sale")]).await;
    let joined = join(&harness, "sale").await;
    let token = joined.text("ticket");
    let paths = [
        "/_anteroom/v1/rooms/sale/join".to_owned(),
        "/_anteroom/v1/rooms/sale/status".to_owned(),
        "/_anteroom/v1/rooms/sale/ticket".to_owned(),
        "/_anteroom/v1/rooms/sale".to_owned(),
        "/_anteroom/v1/rooms/sale/sessions/x/complete".to_owned(),
        "/_anteroom/healthz".to_owned(),
        "/.well-known/jwks.json".to_owned(),
        format!("/_anteroom/v1/rooms/sale/status?ticket={token}&ticket=x"),
        "/_anteroom/v1/rooms/sale/status?ticket=%FF".to_owned(),
    ];
    let methods = [
        Method::GET,
        Method::POST,
        Method::PUT,
        Method::DELETE,
        Method::PATCH,
        Method::HEAD,
        Method::OPTIONS,
    ];

    // `check` fails on any 500.
    for path in &paths {
        for method in &methods {
            let call = Call::method(method.clone(), path)
                .cookie("anteroom_t_sale", token)
                .json("{\"return\": \"/x\"}");
            let reply = harness.check(call).await;
            assert!(
                reply.status.as_u16() < 500,
                "{method} {path}: {}",
                reply.status
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// regressions found while testing the public API

#[tokio::test]
async fn regression_a_ticket_of_another_user_never_resumes_in_an_identity_room() {
    let members = RoomConfig {
        identity: Identity::Header("X-User-Id".to_owned()),
        ..capped_room("members", 1)
    };
    let harness = Harness::new(vec![members]).await;
    harness
        .check(Call::post(&join_uri("members")).header("x-user-id", "carol"))
        .await;
    let bob = harness
        .check(Call::post(&join_uri("members")).header("x-user-id", "bob"))
        .await;
    // Alice on bob's browser: bob's ticket cookie must not hand her bob's place.
    let alice = harness
        .check(
            Call::post(&join_uri("members"))
                .header("x-user-id", "alice")
                .cookie(&ticket_cookie("members"), bob.text("ticket")),
        )
        .await;
    assert_eq!(alice.status, StatusCode::OK);
    assert_ne!(alice.text("ticket"), bob.text("ticket"));
    assert_eq!(alice.number("position"), bob.number("position") + 1);
}

#[tokio::test]
async fn regression_over_long_identities_are_refused_not_truncated() {
    let members = RoomConfig {
        identity: Identity::Header("X-User-Id".to_owned()),
        ..capped_room("members", 1)
    };
    let harness = Harness::new(vec![members]).await;
    let before = harness.counters("members").await;
    let long = "u".repeat(301);
    let reply = harness
        .check(Call::post(&join_uri("members")).header("x-user-id", &long))
        .await;
    reply.assert_problem(StatusCode::BAD_REQUEST, "identity_invalid");
    assert_eq!(harness.counters("members").await, before);
}

#[tokio::test]
async fn regression_leaving_with_a_pass_gives_the_slot_up_and_revokes_the_pass() {
    let harness = Harness::new(vec![capped_room("exit", 1)]).await;
    let holder = fill_the_only_slot(&harness, "exit").await;
    let waiting = join(&harness, "exit").await;
    let session = session_of(&harness, &holder, "exit");
    let reply = leave(&harness, "exit", holder.text("ticket")).await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT);
    // The slot went to the next visitor in the same operation, and the pass no longer counts.
    assert_eq!(
        status(&harness, "exit", waiting.text("ticket"))
            .await
            .text("state"),
        "admitted"
    );
    let stored = harness
        .store
        .session(&room_id("exit"), session.parse().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_ne!(stored.state, anteroom_core::engine::SessionState::Active);
    status(&harness, "exit", holder.text("ticket"))
        .await
        .assert_problem(StatusCode::GONE, "ticket_expired");
}

#[tokio::test]
async fn regression_a_join_with_an_unverifiable_ticket_starts_afresh() {
    let harness = Harness::new(vec![capped_room("fresh", 1)]).await;
    let reply = harness
        .check(Call::post(&join_uri("fresh")).cookie(&ticket_cookie("fresh"), "garbage"))
        .await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.number("position"), 1);
    let cookie = reply.header("set-cookie").unwrap();
    assert!(
        cookie.starts_with(&format!("{}=t1.", ticket_cookie("fresh"))),
        "{cookie}"
    );
}

#[tokio::test]
async fn regression_wrong_methods_and_bad_queries_are_problem_json() {
    let harness = Harness::new(vec![room("sale")]).await;
    harness
        .check(Call::get(&join_uri("sale")))
        .await
        .assert_problem(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed");
    harness
        .check(Call::get(&format!(
            "{}?ticket=a&ticket=b",
            status_uri("sale")
        )))
        .await
        .assert_problem(StatusCode::BAD_REQUEST, "invalid_query");
}

#[tokio::test]
async fn regression_unauthorized_answers_say_how_to_authenticate() {
    let harness = Harness::new(vec![capped_room("svc", 1)]).await;
    let first = fill_the_only_slot(&harness, "svc").await;
    let session = session_of(&harness, &first, "svc");
    let reply = harness
        .check(Call::post(&session_uri("svc", &session, "complete")))
        .await;
    reply.assert_problem(StatusCode::UNAUTHORIZED, "unauthorized");
    assert_eq!(
        reply.header("www-authenticate"),
        Some("Bearer realm=\"anteroom\"")
    );
}

#[tokio::test]
async fn readyz_needs_the_configured_rooms_and_says_503_while_draining() {
    let harness = Harness::new(vec![room("launch")]).await;
    let ready = harness.check(Call::get("/_anteroom/readyz")).await;
    assert_eq!(ready.status, StatusCode::OK);
    assert_eq!(ready.body["status"], "ready");

    // A room of the config file the store does not hold yet: not ready, and named.
    harness.state.know_rooms([room("launch"), room("encore")]);
    let missing = harness.check(Call::get("/_anteroom/readyz")).await;
    assert_eq!(missing.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(missing.body["code"], "not_ready");
    assert!(
        missing.body["detail"].as_str().unwrap().contains("encore"),
        "{}",
        missing.body
    );
    harness.store.put_room(room("encore")).await.unwrap();
    // The store's answer stands for a second (readiness needs no key: it must not read every
    // room from the store on each request).
    let cached = harness.check(Call::get("/_anteroom/readyz")).await;
    assert_eq!(cached.status, StatusCode::SERVICE_UNAVAILABLE);
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let installed = harness.check(Call::get("/_anteroom/readyz")).await;
    assert_eq!(installed.status, StatusCode::OK);

    harness.state.start_draining();
    let draining = harness.check(Call::get("/_anteroom/readyz")).await;
    assert_eq!(draining.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        draining.body["detail"]
            .as_str()
            .unwrap()
            .contains("draining"),
        "{}",
        draining.body
    );
    // Alive all along.
    let alive = harness.check(Call::get("/_anteroom/healthz")).await;
    assert_eq!(alive.status, StatusCode::OK);
}

/// Another site tries to knock a waiting visitor out of the line: links and forms that name a
/// ticket of the attacker's in the URL, and a join or leave sent cross-site. Must hold: the
/// answers about a ticket named in the URL set and clear no cookie, a leave clears the cookie
/// only when the cookie named the ticket that left, requests that change the line and that a
/// browser sent for another site are refused with 403, and the visitor keeps their place.
#[tokio::test]
async fn another_site_cannot_replace_or_clear_a_visitor_s_ticket_cookie() {
    let harness = Harness::new(vec![capped_room("sale", 1)]).await;
    fill_the_only_slot(&harness, "sale").await;
    let visitor = join(&harness, "sale").await;
    let own = visitor.text("ticket").to_owned();
    let attacker = join(&harness, "sale").await;
    let theirs = attacker.text("ticket").to_owned();
    let cookie = ticket_cookie("sale");

    let shown = harness
        .check(Call::get(&format!("{}?ticket={theirs}", status_uri("sale"))).cookie(&cookie, &own))
        .await;
    assert_eq!(shown.status, StatusCode::OK, "{}", shown.body);
    assert_eq!(
        shown.set_cookie(&cookie),
        None,
        "a status of the URL's ticket"
    );
    let joined = harness
        .check(Call::post(&format!("{}?ticket={theirs}", join_uri("sale"))).cookie(&cookie, &own))
        .await;
    assert_eq!(joined.status, StatusCode::OK, "{}", joined.body);
    assert_eq!(joined.text("ticket"), theirs);
    assert_eq!(
        joined.set_cookie(&cookie),
        None,
        "a join of the URL's ticket"
    );

    let left = harness
        .check(
            Call::post(&format!("/_anteroom/v1/rooms/sale/leave?ticket={theirs}"))
                .cookie(&cookie, &own),
        )
        .await;
    assert_eq!(left.status, StatusCode::NO_CONTENT);
    assert_eq!(
        left.set_cookie(&cookie),
        None,
        "the visitor's cookie is theirs"
    );

    for call in [
        Call::post(&join_uri("sale")),
        Call::post("/_anteroom/v1/rooms/sale/leave").cookie(&cookie, &own),
        Call::delete(&ticket_uri("sale")).cookie(&cookie, &own),
    ] {
        let refused = harness
            .check(call.header("sec-fetch-site", "cross-site"))
            .await;
        refused.assert_problem(StatusCode::FORBIDDEN, "cross_site_request");
        assert_eq!(refused.set_cookie(&cookie), None);
    }
    let still = status(&harness, "sale", &own).await;
    assert_eq!(still.text("state"), "waiting", "{}", still.body);

    // The waiting page's own leave (same origin, the cookie's ticket) clears the cookie.
    let left = harness
        .check(
            Call::post("/_anteroom/v1/rooms/sale/leave")
                .cookie(&cookie, &own)
                .header("sec-fetch-site", "same-origin"),
        )
        .await;
    assert_eq!(left.status, StatusCode::NO_CONTENT);
    assert!(left.set_cookie(&cookie).is_some(), "cleared");
}
