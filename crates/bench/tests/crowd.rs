//! `anteroom-bench crowd` against a fake room whose admissions are known in advance, so the
//! simulator's figures can be held to what the room really did.
//!
//! The fake speaks the public API (join, status, events, a protected path that forwards to the
//! simulator's origin) on two listeners sharing one room (two "nodes"). It admits positions in
//! batches of four, one batch every four seconds, except position 7, which it holds back to
//! the fourth batch (an inversion of FIFO order), shows position 5 three more people ahead
//! once (an `ahead` increase), and shows every ETA at 1.5 times the true remaining wait. Even
//! positions get an event stream, odd ones are refused (503) and poll. Batches are far enough
//! apart that a pair in different batches is in a provable order when the visitor admitted
//! later polls, and a pair in one batch is a tie, so the expected Kendall counts follow from
//! the schedule; and
//! sessions (2 s) of one batch overlap while batches do not, so the origin must see the
//! largest batch as its most sessions at once. The room says `max_active = 4`, which that
//! batch of five breaks: the run must exit with status 2.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anteroom_test_support::ports::free_port;
use axum::Json;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::time::Instant;

const VISITORS: u64 = 24;
const BATCH: u64 = 4;
const BATCH_GAP: f64 = 4.0;
const HELD_BACK: u64 = 7;
const HELD_TO_BATCH: u64 = 3;
const AHEAD_BUMPED: u64 = 5;

/// The batch in which the fake admits `position`.
fn batch_of(position: u64) -> u64 {
    if position == HELD_BACK {
        HELD_TO_BATCH
    } else {
        (position - 1) / BATCH
    }
}

struct Fake {
    start: Instant,
    origin: String,
    client: reqwest::Client,
    state: Mutex<FakeState>,
}

#[derive(Default)]
struct FakeState {
    next_position: u64,
    /// When the first batch is admitted (seconds since `start`), set by the first join.
    first_batch_at: Option<f64>,
    /// Statuses shown per position (the bump goes into the first one after the join).
    shown: HashMap<u64, u32>,
}

impl Fake {
    fn now(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    fn admitted_at(&self, state: &FakeState, position: u64) -> Option<f64> {
        state
            .first_batch_at
            .map(|first| first + batch_of(position) as f64 * BATCH_GAP)
    }

    /// The status of `position` now, counting it as shown.
    fn status(&self, position: u64) -> Value {
        let now = self.now();
        let mut state = self.state.lock();
        let first_batch_at = state.first_batch_at;
        let admitted = |p: u64| {
            first_batch_at.is_some_and(|first| first + batch_of(p) as f64 * BATCH_GAP <= now)
        };
        let my_admission = self.admitted_at(&state, position).unwrap_or(f64::INFINITY);
        if admitted(position) {
            let claims = URL_SAFE_NO_PAD.encode(json!({"sub": format!("s{position}")}).to_string());
            return json!({"room": "fake", "state": "admitted", "ticket": format!("t{position}"),
                "position": position, "ahead": 0, "serving": position, "waiting": 0,
                "eta_seconds": null, "next_poll_ms": 1000, "pass": format!("h.{claims}.sig")});
        }
        let joined = state.next_position;
        let mut ahead = (1..position).filter(|&p| !admitted(p)).count() as u64;
        let shown = state.shown.entry(position).or_default();
        *shown += 1;
        if position == AHEAD_BUMPED && *shown == 2 {
            ahead += 3;
        }
        let serving = (1..=joined).filter(|&p| admitted(p)).max().unwrap_or(0);
        let waiting = (1..=joined).filter(|&p| !admitted(p)).count();
        let eta = (my_admission.is_finite()).then(|| ((my_admission - now) * 1.5).round() as u64);
        json!({"room": "fake", "state": "waiting", "ticket": format!("t{position}"),
            "position": position, "ahead": ahead, "serving": serving, "waiting": waiting,
            "eta_seconds": eta, "next_poll_ms": 1000})
    }
}

fn position_of(headers: &HeaderMap, query: &HashMap<String, String>) -> Option<u64> {
    headers
        .get("x-anteroom-ticket")
        .and_then(|value| value.to_str().ok())
        .or(query.get("ticket").map(String::as_str))?
        .strip_prefix('t')?
        .parse()
        .ok()
}

async fn join(State(fake): State<Arc<Fake>>) -> Json<Value> {
    let position = {
        let mut state = fake.state.lock();
        state.next_position += 1;
        if state.first_batch_at.is_none() {
            state.first_batch_at = Some(fake.now() + 2.0);
        }
        state.next_position
    };
    // The join answer counts as the first status shown.
    Json(fake.status(position))
}

async fn status(
    State(fake): State<Arc<Fake>>,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    match position_of(&headers, &query) {
        Some(position) => Json(fake.status(position)).into_response(),
        None => StatusCode::GONE.into_response(),
    }
}

async fn events(
    State(fake): State<Arc<Fake>>,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let Some(position) = position_of(&headers, &query) else {
        return StatusCode::GONE.into_response();
    };
    if position % 2 == 1 {
        let problem = json!({"code": "too_many_connections", "status": 503});
        return (StatusCode::SERVICE_UNAVAILABLE, Json(problem)).into_response();
    }
    let stream = futures_util::stream::unfold(Some(String::new()), move |last| {
        let fake = fake.clone();
        async move {
            let mut last = last?;
            loop {
                tokio::time::sleep(Duration::from_millis(100)).await;
                let body = fake.status(position);
                if body["state"] == "admitted" {
                    let event = Event::default().event("admitted").data(body.to_string());
                    return Some((Ok::<_, Infallible>(event), None));
                }
                let text = body.to_string();
                if text != last {
                    last.clone_from(&text);
                    return Some((Ok(Event::default().event("status").data(text)), Some(last)));
                }
            }
        }
    });
    Sse::new(stream).into_response()
}

/// The protected path: forwards the visitor's request to the simulator's origin.
async fn protected(State(fake): State<Arc<Fake>>, headers: HeaderMap) -> Response {
    let mut request = fake.client.get(format!("{}/shop/", fake.origin));
    for name in ["x-anteroom-pass", "x-crowd-release"] {
        if let Some(value) = headers.get(name) {
            request = request.header(name, value.as_bytes());
        }
    }
    match request.send().await {
        Ok(answer) => StatusCode::from_u16(answer.status().as_u16())
            .unwrap_or(StatusCode::BAD_GATEWAY)
            .into_response(),
        Err(_) => StatusCode::BAD_GATEWAY.into_response(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_simulator_reports_what_the_fake_room_did() {
    let origin: SocketAddr = format!("127.0.0.1:{}", free_port())
        .parse()
        .expect("an address");
    let fake = Arc::new(Fake {
        start: Instant::now(),
        origin: format!("http://{origin}"),
        client: reqwest::Client::builder()
            .no_proxy()
            .build()
            .expect("a client"),
        state: Mutex::new(FakeState::default()),
    });
    let router = axum::Router::new()
        .route("/_anteroom/v1/rooms/fake/join", post(join))
        .route("/_anteroom/v1/rooms/fake/status", get(status))
        .route("/_anteroom/v1/rooms/fake/events", get(events))
        .route("/shop/", get(protected))
        .with_state(fake.clone());
    let mut targets = Vec::new();
    for _ in 0..2 {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a listener");
        targets.push(format!(
            "http://{}",
            listener.local_addr().expect("an address")
        ));
        let router = router.clone();
        tokio::spawn(async move { axum::serve(listener, router).await });
    }

    let dir = tempfile::tempdir().expect("a temporary directory");
    let scenario = dir.path().join("fake.toml");
    std::fs::write(
        &scenario,
        format!(
            "name = \"fake room\"\nvisitors = {VISITORS}\nseed = 3\ntime_limit = \"60s\"\n\
             visitors_per_worker = 12\n\
             [arrival]\nshape = \"spike\"\nover = \"500ms\"\n\
             [room]\nid = \"fake\"\nmax_active = 4\nadmit_per_minute = 60\n\
             [behaviour]\nsession = {{ distribution = \"uniform\", min = \"2s\", max = \"2s\" }}\n\
             think = [\"200ms\", \"300ms\"]\npath = \"/shop/\"\n\
             [origin]\nlatency = \"5ms\"\n"
        ),
    )
    .expect("the scenario is written");
    let out = dir.path().join("report");
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_anteroom-bench"));
    command
        .arg("crowd")
        .arg("--scenario")
        .arg(&scenario)
        .arg("--out")
        .arg(&out)
        .args(["--origin", &origin.to_string()]);
    for target in &targets {
        command.args(["--target", target]);
    }
    // The run bounds itself (time_limit); the fake keeps serving on this runtime meanwhile.
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .expect("the run ends")
        .expect("the simulator runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        output.status.code(),
        Some(2),
        "broken invariants give status 2:\n{stderr}"
    );

    let summary: Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("summary.json")).expect("a summary"),
    )
    .expect("JSON");
    assert_eq!(summary["settings"]["room"]["max_active"], 4);
    assert_eq!(
        summary["settings"]["behaviour"]["think"],
        json!(["200ms", "300ms"])
    );
    assert_eq!(summary["workers"], 2);
    assert_eq!(summary["nodes"], 2);
    assert_eq!(summary["joined"], VISITORS);
    assert_eq!(summary["queued"], VISITORS);
    assert_eq!(summary["admitted"], VISITORS, "{summary:#}");
    assert_eq!(summary["outcomes"]["completed"], VISITORS);
    assert_eq!(summary["followed_sse"], VISITORS / 2);
    assert_eq!(summary["sse_refused"], VISITORS / 2);
    assert_eq!(summary["errors"], json!({}), "{summary:#}");

    // Kendall counts from the schedule. Only polls bound an admission from below (SSE events
    // carry no time for their view), so a pair is known in order when the one admitted later
    // polls (odd positions), and then its batch decides; every other pair is a tie.
    let (mut concordant, mut discordant, mut ties) = (0u64, 0u64, 0u64);
    for earlier in 1..=VISITORS {
        for later in earlier + 1..=VISITORS {
            let polls = |position: u64| position % 2 == 1;
            match batch_of(earlier).cmp(&batch_of(later)) {
                std::cmp::Ordering::Less if polls(later) => concordant += 1,
                std::cmp::Ordering::Greater if polls(earlier) => discordant += 1,
                _ => ties += 1,
            }
        }
    }
    let order = &summary["order"];
    assert_eq!(order["concordant"], concordant, "{order:#}");
    assert_eq!(order["discordant"], discordant, "{order:#}");
    assert_eq!(order["ties"], ties, "{order:#}");
    let tau = (concordant as f64 - discordant as f64) / (concordant + discordant) as f64;
    let measured_tau = order["tau"].as_f64().expect("a tau");
    assert!((measured_tau - tau).abs() < 1e-9, "{measured_tau} vs {tau}");
    assert!(
        order["inversions"]
            .as_array()
            .expect("inversions")
            .iter()
            .all(|inversion| inversion["earlier"] == HELD_BACK),
        "{order:#}"
    );
    assert!(
        order["passed_over"].as_u64().expect("a count") > 0,
        "position 7 was shown waiting after serving passed it"
    );

    // Exactly one `ahead` increase: position 5, by 3.
    assert_eq!(summary["ahead_increase_count"], 1);
    let increase = &summary["ahead_increases"][0];
    assert_eq!(increase["position"], AHEAD_BUMPED);
    assert_eq!(
        increase["to"].as_u64().expect("to") - increase["from"].as_u64().expect("from"),
        3
    );

    // The fake admits four every four seconds: 60 per minute. Visitors see admissions up to
    // a poll interval (1 s) late, over a window of about 20 s.
    let rate = summary["admission"]["measured_per_minute"]
        .as_f64()
        .expect("a rate");
    assert!((45.0..=75.0).contains(&rate), "admission rate {rate}");

    // Every ETA shown is 1.5 times the true remaining wait; the actual wait a visitor sees is
    // that wait plus up to about a second: the relative error is a bit under 50 %.
    let eta = &summary["eta"]["overall"];
    let median = eta["median"].as_f64().expect("a median");
    assert!(eta["count"].as_u64().expect("a count") > 50, "{eta:#}");
    assert!((0.30..=0.55).contains(&median), "median ETA error {median}");
    assert_eq!(summary["eta"]["after_first_minute"]["count"], 0);

    // The largest batch (five: its own four and position 7) is the most sessions at once.
    let origin_figures = &summary["origin"];
    assert_eq!(
        origin_figures["max_active"],
        BATCH + 1,
        "{origin_figures:#}"
    );
    assert_eq!(origin_figures["sessions"], VISITORS);
    assert_eq!(origin_figures["released"], VISITORS);
    assert_eq!(origin_figures["without_pass"], 0);

    let checks = summary["checks"].as_array().expect("checks");
    let failed: Vec<&str> = checks
        .iter()
        .filter(|check| check["invariant"] == true && check["met"] == false)
        .filter_map(|check| check["name"].as_str())
        .collect();
    assert_eq!(failed.len(), 4, "{failed:?}");

    let report = std::fs::read_to_string(out.join("report.md")).expect("a report");
    assert!(report.contains("**FAIL**"), "{report}");
    for chart in ["queue.svg", "admissions.svg", "active.svg", "eta.svg"] {
        let svg = std::fs::read_to_string(out.join(chart)).expect("a chart");
        assert!(svg.starts_with("<svg"), "{chart}");
        assert!(report.contains(chart), "{chart} linked");
    }
}
