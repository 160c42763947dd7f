//! The proof-of-work gate of a join (SPEC §12), through the public router: no solution, a
//! wrong one, an expired or foreign one and a replayed one are refused and change nothing; a
//! right one joins once; a visitor holding a ticket resumes without a new one; the waiting
//! page serves the solver instead of a place.

use std::time::Duration;

use http::StatusCode;
use serde_json::json;

use anteroom_core::challenge::{ProofOfWork, solve};
use anteroom_core::room::RoomConfig;

use crate::support::{Call, Harness, Reply, room};

/// Easy enough to solve in a test in microseconds, hard enough that a guess rarely works.
const DIFFICULTY: u8 = 10;

fn pow_room(id: &str) -> RoomConfig {
    RoomConfig {
        challenge: Some(ProofOfWork {
            difficulty: DIFFICULTY,
        }),
        ..room(id)
    }
}

async fn challenge(harness: &Harness, room: &str) -> String {
    let reply = harness
        .check(Call::post(&format!("/_anteroom/v1/rooms/{room}/challenge")))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    assert_eq!(reply.number("difficulty"), u64::from(DIFFICULTY));
    assert_eq!(reply.text("algorithm"), "sha256-leading-zero-bits");
    assert_eq!(reply.header("cache-control"), Some("no-store"));
    reply.text("challenge").to_owned()
}

async fn join_with(harness: &Harness, room: &str, token: &str, counter: u64) -> Reply {
    let body = json!({"challenge": {"token": token, "counter": counter}});
    harness
        .check(Call::post(&format!("/_anteroom/v1/rooms/{room}/join")).json(body.to_string()))
        .await
}

#[track_caller]
fn assert_refused(reply: &Reply, code: &str) {
    reply.assert_problem(StatusCode::FORBIDDEN, code);
    assert_eq!(
        reply.text("challenge_url"),
        "/_anteroom/v1/rooms/sale/challenge"
    );
    assert_eq!(
        reply.header("link"),
        Some("</_anteroom/v1/rooms/sale/challenge>; rel=\"challenge\"")
    );
    assert_eq!(reply.set_cookie("anteroom_t_sale"), None);
}

#[tokio::test]
async fn a_join_needs_one_fresh_correct_solution() {
    let harness = Harness::new(vec![pow_room("sale")]).await;
    let before = harness.counters("sale").await;

    let none = harness
        .check(Call::post("/_anteroom/v1/rooms/sale/join"))
        .await;
    assert_refused(&none, "challenge_required");

    let token = challenge(&harness, "sale").await;
    let counter = solve(&token, DIFFICULTY);
    // The smallest solution is `counter`: every smaller counter is wrong.
    let wrong = join_with(&harness, "sale", &token, counter.saturating_sub(1)).await;
    if counter > 0 {
        assert_refused(&wrong, "challenge_failed");
    }
    let malformed = harness
        .check(
            Call::post("/_anteroom/v1/rooms/sale/join")
                .json(json!({"challenge": {"token": token}}).to_string()),
        )
        .await;
    assert_refused(&malformed, "challenge_failed");
    let forged = join_with(&harness, "sale", &token.replacen(".10.", ".1.", 1), 0).await;
    assert_refused(&forged, "challenge_failed");
    assert_eq!(
        harness.counters("sale").await,
        before,
        "refusals change nothing"
    );

    let joined = join_with(&harness, "sale", &token, counter).await;
    assert_eq!(joined.status, StatusCode::OK, "{}", joined.body);
    assert_eq!(joined.number("position"), 1);
    let after_join = harness.counters("sale").await;

    let replayed = join_with(&harness, "sale", &token, counter).await;
    assert_refused(&replayed, "challenge_used");
    assert_eq!(harness.counters("sale").await, after_join);

    // The visitor's own ticket resumes without a new proof: one solution per ticket.
    let resumed = harness
        .check(
            Call::post("/_anteroom/v1/rooms/sale/join")
                .header("x-anteroom-ticket", joined.text("ticket")),
        )
        .await;
    assert_eq!(resumed.status, StatusCode::OK, "{}", resumed.body);
    assert_eq!(resumed.number("position"), 1);
    assert_eq!(harness.counters("sale").await.last_position, 1);
}

#[tokio::test]
async fn expired_and_foreign_challenges_fail() {
    let harness = Harness::new(vec![pow_room("sale"), pow_room("other")]).await;
    let before = harness.counters("sale").await;

    let foreign = challenge(&harness, "other").await;
    let reply = join_with(&harness, "sale", &foreign, solve(&foreign, DIFFICULTY)).await;
    assert_refused(&reply, "challenge_failed");

    let token = challenge(&harness, "sale").await;
    let counter = solve(&token, DIFFICULTY);
    harness.advance(Duration::from_secs(301));
    let reply = join_with(&harness, "sale", &token, counter).await;
    assert_refused(&reply, "challenge_failed");
    assert!(reply.text("detail").contains("expired"), "{}", reply.body);
    assert_eq!(harness.counters("sale").await, before);
}

#[tokio::test]
async fn rooms_without_a_challenge_hand_none_out() {
    let harness = Harness::new(vec![room("sale")]).await;
    let reply = harness
        .check(Call::post("/_anteroom/v1/rooms/sale/challenge"))
        .await;
    reply.assert_problem(StatusCode::NOT_FOUND, "challenge_not_used");
    let reply = harness
        .check(Call::post("/_anteroom/v1/rooms/nope/challenge"))
        .await;
    reply.assert_problem(StatusCode::NOT_FOUND, "room_not_found");
}

#[tokio::test]
async fn the_waiting_page_solves_before_it_joins() {
    let harness = Harness::new(vec![pow_room("sale")]).await;
    let before = harness.counters("sale").await;

    let page = harness.check(Call::get("/_anteroom/wait/sale")).await;
    assert_eq!(page.status, StatusCode::OK);
    let html = page.body.as_str().expect("html");
    assert!(html.contains("data-state=\"challenge\""));
    assert!(html.contains("id=\"anteroom-pow\""), "the worker's source");
    assert!(html.contains("new Worker(url)"));
    assert!(html.contains("needs JavaScript"), "the no-script notice");
    assert_eq!(page.set_cookie("anteroom_t_sale"), None);

    let json = harness
        .check(Call::get("/_anteroom/wait/sale").header("accept", "application/json"))
        .await;
    assert_refused(&json, "challenge_required");
    assert_eq!(harness.counters("sale").await, before, "nobody joined");
}
