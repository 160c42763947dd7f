//! A scheduled sale over HTTP (SPEC §5.3): closed before its pre-queue, a `prequeue` status
//! with `ahead: null` and the opening time, a waiting page that counts down, an event stream
//! that tells the drawn place once the sale opens; and priority access codes (§12) on the
//! join API and the waiting page.

#![allow(clippy::unwrap_used)]

#[allow(dead_code)]
mod support;

use std::time::Duration;

use axum::body::Body;
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::Value;
use tower::ServiceExt;

use anteroom_core::Timestamp;
use anteroom_core::room::{Event, IdleMode, RoomConfig, Schedule};

use support::{Call, Harness, Reply, START, room};

/// Pre-queue from +10 s, open from +20 s, closed at +1 h; closed before and after.
fn sale() -> RoomConfig {
    RoomConfig {
        schedule: Schedule {
            events: vec![Event {
                prequeue_at: Timestamp(START.0 + 10_000),
                opens_at: Timestamp(START.0 + 20_000),
                closes_at: Timestamp(START.0 + 3_600_000),
                shuffle: true,
                max_active: Some(1),
                admit_per_minute: None,
                admit_burst: None,
            }],
            before: IdleMode::Closed,
            after: IdleMode::Closed,
        },
        ..room("sale")
    }
}

async fn join(harness: &Harness) -> Reply {
    harness
        .check(Call::post("/_anteroom/v1/rooms/sale/join"))
        .await
}

#[tokio::test]
async fn a_sale_is_closed_then_prequeues_then_draws() {
    let harness = Harness::new(vec![sale()]).await;
    let refused = join(&harness).await;
    refused.assert_problem(StatusCode::SERVICE_UNAVAILABLE, "room_closed");
    assert_eq!(harness.counters("sale").await.last_position, 0);

    harness.advance(Duration::from_secs(10));
    let mut tickets = Vec::new();
    for _ in 0..3 {
        let joined = join(&harness).await;
        assert_eq!(joined.status, StatusCode::OK, "{}", joined.body);
        assert_eq!(joined.text("state"), "prequeue");
        assert_eq!(joined.body["ahead"], Value::Null);
        assert_eq!(joined.body["eta_seconds"], Value::Null);
        assert_eq!(joined.text("opens_at"), "2023-11-14T22:13:40Z");
        tickets.push(joined.text("ticket").to_owned());
    }
    // The page resumes the ticket its cookie names (it would join a new one otherwise).
    let page = harness
        .check(Call::get("/_anteroom/wait/sale?lang=en").cookie("anteroom_t_sale", &tickets[0]))
        .await;
    assert_eq!(page.status, StatusCode::OK);
    let html = page.body.as_str().unwrap();
    assert!(html.contains("opens in 0:10"), "the page counts down");
    assert!(html.contains("data-state=\"prequeue\""));
    assert_eq!(harness.tick("sale").await.admitted, 0);

    harness.advance(Duration::from_secs(10));
    // The opening draws the order; the event lets one in at a time.
    assert_eq!(harness.tick("sale").await.admitted, 1);
    let mut aheads = Vec::new();
    for token in &tickets {
        let polled = harness
            .check(Call::get("/_anteroom/v1/rooms/sale/status").header("x-anteroom-ticket", token))
            .await;
        match polled.text("state") {
            "admitted" => aheads.push(None),
            "waiting" => aheads.push(Some(polled.number("ahead"))),
            other => panic!("unexpected state {other}: {}", polled.body),
        }
    }
    aheads.sort();
    assert_eq!(aheads, vec![None, Some(0), Some(1)]);
    let stats = harness
        .store
        .snapshot(&support::room_id("sale"))
        .await
        .unwrap();
    let draw = stats.draw.unwrap();
    assert_eq!((draw.cohort, draw.through_position), (3, 3));
}

#[tokio::test]
async fn the_event_stream_tells_the_drawn_place_once_the_sale_opens() {
    let harness = Harness::new(vec![sale()]).await;
    harness.advance(Duration::from_secs(10));
    let token = join(&harness).await.text("ticket").to_owned();
    join(&harness).await;
    // Open one second from now, in the test's time and in real time alike.
    harness.advance(Duration::from_millis(9_000));
    let request = Request::builder()
        .uri(format!("/_anteroom/v1/rooms/sale/events?ticket={token}"))
        .body(Body::empty())
        .unwrap();
    let response = harness.app.clone().oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let mut body = response.into_body();
    let mut next_status = async || -> Value {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        let mut text = String::new();
        loop {
            let frame = tokio::time::timeout_at(deadline, body.frame())
                .await
                .expect("an event within 5 s")
                .unwrap()
                .unwrap();
            if let Ok(data) = frame.into_data() {
                text.push_str(&String::from_utf8_lossy(&data));
            }
            if let Some(line) = text.lines().find_map(|line| line.strip_prefix("data: ")) {
                return serde_json::from_str(line).unwrap();
            }
        }
    };
    let first = next_status().await;
    assert_eq!(first["state"], "prequeue", "{first}");
    assert_eq!(first["ahead"], Value::Null);
    harness.advance(Duration::from_millis(1_000));
    let opened = next_status().await;
    assert!(
        opened["state"] == "waiting" || opened["state"] == "admitted",
        "{opened}"
    );
    let draw = harness
        .store
        .snapshot(&support::room_id("sale"))
        .await
        .unwrap()
        .draw
        .expect("the stream's status call drew the lottery");
    assert_eq!(draw.cohort, 2);
    if opened["state"] == "waiting" {
        assert!(opened["ahead"].as_u64().unwrap() <= 1, "{opened}");
    }
}

#[tokio::test]
async fn a_priority_code_joins_the_lane_once_and_a_bad_one_changes_nothing() {
    let vip = RoomConfig {
        max_active: 1,
        priority: vec![anteroom_core::room::PriorityCodes {
            hashes: vec![anteroom_core::room::priority_code_hash("GOLD-1")],
            uses: 1,
        }],
        ..room("vip")
    };
    let harness = Harness::new(vec![vip]).await;
    let join_with = |code: &'static str| {
        Call::post("/_anteroom/v1/rooms/vip/join")
            .json(format!("{{\"priority_code\": \"{code}\"}}"))
    };
    let first = harness
        .check(Call::post("/_anteroom/v1/rooms/vip/join"))
        .await;
    assert_eq!(first.text("state"), "admitted");
    let regular = harness
        .check(Call::post("/_anteroom/v1/rooms/vip/join"))
        .await;
    assert_eq!(regular.text("state"), "waiting");
    let before = harness.counters("vip").await;
    harness
        .check(join_with("SILVER"))
        .await
        .assert_problem(StatusCode::FORBIDDEN, "invalid_priority_code");
    assert_eq!(harness.counters("vip").await, before);
    let gold = harness.check(join_with("GOLD-1")).await;
    assert_eq!(gold.status, StatusCode::OK, "{}", gold.body);
    assert_eq!(gold.text("state"), "waiting");
    assert_eq!(gold.number("ahead"), 0);
    let before = harness.counters("vip").await;
    harness
        .check(join_with("GOLD-1"))
        .await
        .assert_problem(StatusCode::FORBIDDEN, "invalid_priority_code");
    assert_eq!(
        harness.counters("vip").await,
        before,
        "used up: nothing changes"
    );
    // The waiting page takes the code from an invitation link, and refuses a bad one.
    let page = harness
        .check(Call::get("/_anteroom/wait/vip?code=SILVER"))
        .await;
    assert_eq!(page.status, StatusCode::FORBIDDEN);
    assert_eq!(harness.counters("vip").await, before);
    // The slot frees: the priority ticket goes first, although it joined last.
    let session = first.text("ticket").to_owned();
    harness
        .check(Call::delete("/_anteroom/v1/rooms/vip/ticket").cookie("anteroom_t_vip", &session))
        .await;
    harness.advance(Duration::from_secs(1));
    harness.tick("vip").await;
    let polled = harness
        .check(
            Call::get("/_anteroom/v1/rooms/vip/status")
                .header("x-anteroom-ticket", gold.text("ticket")),
        )
        .await;
    assert_eq!(polled.text("state"), "admitted");
    let polled = harness
        .check(
            Call::get("/_anteroom/v1/rooms/vip/status")
                .header("x-anteroom-ticket", regular.text("ticket")),
        )
        .await;
    assert_eq!(polled.text("state"), "waiting");
}
