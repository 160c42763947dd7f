//! Adaptive admission end to end (SPEC §5.4): the real binary's gateway in front of a local
//! origin that slows down with the sessions it serves, the controller run every second
//! (`interval = "1s"`; the default is 10 s), and the origin's pushed load signal.
//!
//! With `ANTEROOM_WRITE_ADAPTIVE_SVG=1` the settling test also draws the rate and the
//! latency over time into `docs/adaptive.svg`.
//!
//! Several nodes on one Redis: the pushed signal is kept in the store, so every node's
//! controller uses a signal sent to any of them, and one decision per interval is applied.
#![allow(clippy::unwrap_used)]

#[path = "support/admin.rs"]
mod admin_support;
mod support;

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::routing::get;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use admin_support::{AdminClient, AdminSite, start_redis_nodes};
use anteroom_test_support::redis::RedisServer;

/// The origin's latency: `BASE_MS + PER_REQUEST_MS` for each request it is working on.
const BASE_MS: u64 = 20;
const PER_REQUEST_MS: u64 = 15;
/// How long a visitor keeps using the site once admitted.
const SESSION: Duration = Duration::from_secs(3);
/// Would-be visitors, each joining again after their session.
const VISITORS: usize = 30;
const TARGET_P95_MS: u64 = 200;
const MIN_PER_MINUTE: u64 = 60;
const MAX_PER_MINUTE: u64 = 600;

/// The tests of this file take turns: the settling test measures latency on a 2-core machine,
/// and other gateways and origins working beside it skew what it measures (in one run beside
/// them it settled at a p95 of 285 ms for a 200 ms target).
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// An origin whose every answer takes `BASE_MS + PER_REQUEST_MS × requests in progress`:
/// the more sessions it serves at once, the slower it gets.
struct Origin {
    addr: std::net::SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Origin {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn slow_down(State(in_flight): State<Arc<AtomicU64>>) -> &'static str {
    let busy = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    tokio::time::sleep(Duration::from_millis(BASE_MS + PER_REQUEST_MS * busy)).await;
    in_flight.fetch_sub(1, Ordering::SeqCst);
    "ok"
}

impl Origin {
    async fn start() -> Origin {
        let app = Router::new()
            .route("/shop/{*rest}", get(slow_down))
            .with_state(Arc::new(AtomicU64::new(0)));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Origin { addr, task }
    }
}

/// Latencies the visitors saw, with when each answer came (seconds since the start).
type Samples = Arc<Mutex<Vec<(f64, f64)>>>;

/// One would-be visitor, over and over: join, poll until admitted, use the site for
/// `SESSION` with the pass, then join again as somebody new.
async fn visitor(base: String, stop: Arc<AtomicBool>, started: Instant, samples: Samples) {
    let client = support::client();
    while !stop.load(Ordering::Relaxed) {
        let Ok(answer) = client
            .post(format!("{base}/_anteroom/v1/rooms/shop/join"))
            .send()
            .await
        else {
            continue;
        };
        let Ok(mut status) = answer.json::<Value>().await else {
            continue;
        };
        while status["state"] == "waiting" && !stop.load(Ordering::Relaxed) {
            tokio::time::sleep(Duration::from_millis(250)).await;
            let ticket = status["ticket"].as_str().unwrap_or_default().to_owned();
            match client
                .get(format!("{base}/_anteroom/v1/rooms/shop/status"))
                .header("x-anteroom-ticket", ticket)
                .send()
                .await
            {
                Ok(answer) => match answer.json::<Value>().await {
                    Ok(next) => status = next,
                    Err(_) => break,
                },
                Err(_) => break,
            }
        }
        let Some(pass) = status["pass"].as_str().map(str::to_owned) else {
            continue;
        };
        let session = Instant::now();
        while session.elapsed() < SESSION && !stop.load(Ordering::Relaxed) {
            let sent = Instant::now();
            let answer = client
                .get(format!("{base}/shop/item"))
                .header("x-anteroom-pass", &pass)
                .send()
                .await;
            if answer.is_ok_and(|answer| answer.status() == StatusCode::OK) {
                let latency = sent.elapsed().as_secs_f64() * 1000.0;
                samples
                    .lock()
                    .unwrap()
                    .push((started.elapsed().as_secs_f64(), latency));
            }
        }
    }
}

fn p95(mut latencies: Vec<f64>) -> Option<f64> {
    if latencies.is_empty() {
        return None;
    }
    latencies.sort_by(f64::total_cmp);
    let rank = ((latencies.len() as f64) * 0.95).ceil() as usize;
    latencies.get(rank.max(1) - 1).copied()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rate_settles_where_the_origin_meets_its_latency_target() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let origin = Origin::start().await;
    let site = AdminSite::new(&format!(
        "[upstream]\n\
         url = \"http://{addr}\"\n\
         \n\
         [[room]]\n\
         id = \"shop\"\n\
         routes = [\"/shop/**\"]\n\
         admit_per_minute = {MIN_PER_MINUTE}\n\
         \n\
         [room.adaptive]\n\
         target_p95_ms = {TARGET_P95_MS}\n\
         min_per_minute = {MIN_PER_MINUTE}\n\
         max_per_minute = {MAX_PER_MINUTE}\n\
         interval = \"1s\"\n",
        addr = origin.addr
    ));
    let client = support::client();
    let mut server = site.site.start();
    server.wait_ready(&client).await;
    let admin = AdminClient::new(&site.admin_url());
    admin.wait_ready().await;

    let started = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let samples: Samples = Arc::default();
    let visitors: Vec<_> = (0..VISITORS)
        .map(|_| {
            tokio::spawn(visitor(
                server.url(),
                stop.clone(),
                started,
                samples.clone(),
            ))
        })
        .collect();

    // Once a second: the rate in force and what the controller saw.
    let mut seconds = Vec::new();
    let run_for = Duration::from_secs(20);
    while started.elapsed() < run_for {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let (status, stats) = admin
            .admin(Method::GET, "/rooms/shop/stats?history=0", None)
            .await;
        assert_eq!(status, StatusCode::OK, "{stats}");
        let rate = stats["admit_per_minute"].as_u64().unwrap();
        assert!(
            (MIN_PER_MINUTE..=MAX_PER_MINUTE).contains(&rate),
            "the rate {rate} left its bounds"
        );
        seconds.push((
            started.elapsed().as_secs_f64(),
            rate,
            stats["adaptive"]["p95_ms"].as_f64(),
        ));
    }
    stop.store(true, Ordering::Relaxed);
    for visitor in visitors {
        let _ = visitor.await;
    }

    let samples = samples.lock().unwrap().clone();
    // Settled: the last 8 seconds, as the visitors saw the origin.
    let settled: Vec<f64> = samples
        .iter()
        .filter(|(at, _)| *at >= run_for.as_secs_f64() - 8.0)
        .map(|(_, latency)| *latency)
        .collect();
    let settled_p95 = p95(settled.clone()).expect("requests in the last seconds");
    let target = TARGET_P95_MS as f64;
    eprintln!(
        "settled p95 {settled_p95:.0} ms over {} requests; rates {:?}",
        settled.len(),
        seconds.iter().map(|(_, rate, _)| *rate).collect::<Vec<_>>()
    );
    assert!(
        (target * 0.75..=target * 1.25).contains(&settled_p95),
        "the settled p95 {settled_p95:.0} ms is not within 25 % of {target} ms"
    );
    let (_, last_rate, _) = seconds.last().copied().unwrap();
    assert!(
        last_rate > MIN_PER_MINUTE,
        "the rate went up from the minimum"
    );

    let metrics = support::scrape_metrics(&client, &site.admin_url()).await;
    assert!(
        metrics.contains(&format!(
            "anteroom_adaptive_rate_per_minute{{room=\"shop\"}} {last_rate}"
        )) || metrics.contains("anteroom_adaptive_rate_per_minute{room=\"shop\"}"),
        "{metrics}"
    );
    assert!(metrics.contains("anteroom_adaptive_p95_ms{room=\"shop\"}"));
    assert!(metrics.contains("anteroom_adaptive_decisions_total{room=\"shop\",decision="));

    if std::env::var_os("ANTEROOM_WRITE_ADAPTIVE_SVG").is_some() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/adaptive.svg");
        std::fs::write(path, plot(&samples, &seconds, target)).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_interval_publishes_no_p95_rather_than_zero() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let origin = Origin::start().await;
    let site = AdminSite::new(&format!(
        "[upstream]\n\
         url = \"http://{addr}\"\n\
         \n\
         [[room]]\n\
         id = \"quiet\"\n\
         routes = [\"/quiet/**\"]\n\
         \n\
         [room.adaptive]\n\
         target_p95_ms = 100\n\
         min_per_minute = 60\n\
         max_per_minute = 600\n\
         interval = \"200ms\"\n",
        addr = origin.addr
    ));
    let client = support::client();
    let mut server = site.site.start();
    server.wait_ready(&client).await;
    let admin = AdminClient::new(&site.admin_url());
    admin.wait_ready().await;

    // Nobody visits the room's routes: the controller runs and measures nothing.
    let started = Instant::now();
    let adaptive = loop {
        let (_, stats) = admin.admin(Method::GET, "/rooms/quiet/stats", None).await;
        if stats["adaptive"]["decision"] == "idle" {
            break stats["adaptive"].clone();
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no idle run: {stats}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(adaptive["responses"], 0, "{adaptive}");
    assert!(adaptive["p95_ms"].is_null(), "{adaptive}");
    let metrics = support::scrape_metrics(&client, &site.admin_url()).await;
    for gauge in ["anteroom_adaptive_p95_seconds", "anteroom_adaptive_p95_ms"] {
        let line = format!("{gauge}{{room=\"quiet\"}} NaN");
        assert!(
            metrics.lines().any(|each| each == line),
            "no `{line}` in:\n{metrics}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_origin_outside_the_gateway_pushes_its_signal() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let site = AdminSite::new(
        "[[room]]\n\
         id = \"api\"\n\
         admit_per_minute = 300\n\
         \n\
         [room.adaptive]\n\
         target_p95_ms = 100\n\
         min_per_minute = 60\n\
         max_per_minute = 600\n\
         interval = \"200ms\"\n\
         \n\
         [[room]]\n\
         id = \"plain\"\n",
    );
    let client = support::client();
    let mut server = site.site.start();
    server.wait_ready(&client).await;
    let admin = AdminClient::new(&site.admin_url());
    admin.wait_ready().await;
    let rate = |stats: &Value| stats["admit_per_minute"].as_u64().unwrap();

    // Bad signals are refused and change nothing.
    for (body, code) in [
        (json!({"p95_ms": -1}), "invalid_signal"),
        (json!({"p95_ms": 10, "error_rate": 2}), "invalid_signal"),
        (json!({"p95": 10}), "invalid_body"),
    ] {
        let (status, problem) = admin
            .admin(Method::PUT, "/rooms/api/signal", Some(body))
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{problem}");
        assert_eq!(problem["code"], code, "{problem}");
    }
    let (status, problem) = admin
        .admin(
            Method::PUT,
            "/rooms/plain/signal",
            Some(json!({"p95_ms": 10})),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{problem}");
    assert_eq!(problem["code"], "not_adaptive");
    let (status, _) = admin
        .admin(
            Method::PUT,
            "/rooms/nope/signal",
            Some(json!({"p95_ms": 10})),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (_, stats) = admin.admin(Method::GET, "/rooms/api/stats", None).await;
    assert_eq!(rate(&stats), 300);

    // A slow origin: the rate comes down (and never below the minimum).
    let push = |p95: f64| {
        let admin = &admin;
        async move {
            let (status, body) = admin
                .admin(
                    Method::PUT,
                    "/rooms/api/signal",
                    Some(json!({"p95_ms": p95, "error_rate": 0.0, "in_flight": 7})),
                )
                .await;
            assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
        }
    };
    let wait_for = |wanted: fn(u64) -> bool| {
        let admin = &admin;
        async move {
            let started = Instant::now();
            loop {
                let (_, stats) = admin.admin(Method::GET, "/rooms/api/stats", None).await;
                let now = stats["admit_per_minute"].as_u64().unwrap();
                if wanted(now) {
                    return stats;
                }
                assert!(
                    started.elapsed() < Duration::from_secs(10),
                    "the rate stayed at {now}: {stats}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    push(400.0).await;
    let stats = wait_for(|rate| rate == 60).await;
    assert_eq!(stats["adaptive"]["source"], "signal", "{stats}");
    assert_eq!(stats["adaptive"]["p95_ms"], 400.0);
    assert_eq!(stats["adaptive"]["in_flight"], 7);
    // A fast one: it goes up again.
    push(20.0).await;
    let stats = wait_for(|rate| rate > 100).await;
    assert_eq!(stats["adaptive"]["decision"], "increase", "{stats}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_on_one_redis_apply_one_decision_per_interval() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let redis = RedisServer::start();
    let keys = tempfile::tempdir().unwrap();
    // Steps of 100 a minute (5 % of 60..2060), a decision every half second.
    let rooms = "[[room]]\n\
                 id = \"api\"\n\
                 admit_per_minute = 300\n\
                 \n\
                 [room.adaptive]\n\
                 target_p95_ms = 100\n\
                 min_per_minute = 60\n\
                 max_per_minute = 2060\n\
                 interval = \"500ms\"\n";
    let client = support::client();
    let nodes = start_redis_nodes(2, &redis, keys.path(), rooms, &client).await;

    // Both nodes hear the same fast origin, and both run the controller every interval.
    let started = Instant::now();
    let mut decisions = std::collections::BTreeSet::new();
    while started.elapsed() < Duration::from_secs(3) {
        for (_, _, admin) in &nodes {
            let (status, body) = admin
                .admin(
                    Method::PUT,
                    "/rooms/api/signal",
                    Some(json!({"p95_ms": 10})),
                )
                .await;
            assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
            let (_, stats) = admin.admin(Method::GET, "/rooms/api/stats", None).await;
            if let Some(decision) = stats["adaptive"]["decision"].as_str() {
                decisions.insert(decision.to_owned());
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let (_, stats) = nodes[0]
        .2
        .admin(Method::GET, "/rooms/api/stats", None)
        .await;
    let rate = stats["admit_per_minute"].as_u64().unwrap();
    let steps = (rate - 300) / 100;
    let intervals = (elapsed / 0.5).ceil() as u64 + 1;
    eprintln!(
        "{steps} steps in {elapsed:.1} s ({intervals} intervals at most); decisions seen {decisions:?}"
    );
    assert!(steps >= 2, "the rate went up: {rate}");
    assert!(
        steps <= intervals,
        "{steps} increases in {intervals} intervals: the nodes stacked their decisions"
    );
    assert!(
        decisions.contains("other_node"),
        "one node left the interval to the other: {decisions:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signal_sent_to_one_node_reaches_every_node_s_controller_within_a_second() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let redis = RedisServer::start();
    let keys = tempfile::tempdir().unwrap();
    let rooms = "[[room]]\n\
                 id = \"api\"\n\
                 admit_per_minute = 300\n\
                 \n\
                 [room.adaptive]\n\
                 target_p95_ms = 100\n\
                 min_per_minute = 60\n\
                 max_per_minute = 600\n\
                 interval = \"200ms\"\n";
    let client = support::client();
    let nodes = start_redis_nodes(2, &redis, keys.path(), rooms, &client).await;
    let (admin_a, admin_b) = (&nodes[0].2, &nodes[1].2);
    // Nothing pushed yet: node B's controller has no input (no route, no signal, just started).
    let (_, stats) = admin_b.admin(Method::GET, "/rooms/api/stats", None).await;
    assert_eq!(stats["adaptive"], Value::Null, "{stats}");

    let (status, body) = admin_a
        .admin(
            Method::PUT,
            "/rooms/api/signal",
            Some(json!({"p95_ms": 400.0, "error_rate": 0.25, "in_flight": 9})),
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let pushed = Instant::now();
    let stats = loop {
        let (_, stats) = admin_b.admin(Method::GET, "/rooms/api/stats", None).await;
        if stats["adaptive"]["source"] == "signal" {
            break stats;
        }
        assert!(
            pushed.elapsed() < Duration::from_secs(10),
            "node B never saw the signal: {stats}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let took = pushed.elapsed();
    eprintln!("node B's controller used node A's signal {took:?} after it was pushed");
    assert!(took < Duration::from_secs(1), "took {took:?}");
    let adaptive = &stats["adaptive"];
    assert_eq!(adaptive["p95_ms"], 400.0, "{stats}");
    assert_eq!(adaptive["error_rate"], 0.25, "{stats}");
    assert_eq!(adaptive["in_flight"], 9, "{stats}");
    // One of the two nodes decided the interval; either way the rate went down.
    assert!(
        ["decrease", "floor", "other_node"].contains(&adaptive["decision"].as_str().unwrap()),
        "{stats}"
    );
}

/// The rate (left axis) and the visitors' p95 latency per second (right axis) over time, as
/// an SVG document.
fn plot(samples: &[(f64, f64)], seconds: &[(f64, u64, Option<f64>)], target_ms: f64) -> String {
    let (width, height, left, right, top, bottom) = (760.0, 360.0, 60.0, 60.0, 40.0, 40.0);
    let end = seconds.last().map_or(1.0, |(at, _, _)| *at).max(1.0);
    let max_rate = MAX_PER_MINUTE as f64;
    let max_ms = target_ms * 2.0;
    let x = |at: f64| left + (width - left - right) * at / end;
    let y_rate = |rate: f64| height - bottom - (height - top - bottom) * rate / max_rate;
    let y_ms = |ms: f64| height - bottom - (height - top - bottom) * ms.min(max_ms) / max_ms;
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" \
         font-family=\"sans-serif\" font-size=\"12\">"
    );
    let _ = writeln!(
        svg,
        "<rect width=\"{width}\" height=\"{height}\" fill=\"white\"/>\
         <text x=\"{left}\" y=\"20\" font-size=\"14\">Adaptive admission: rate (blue, left) and \
         visitors' p95 latency per second (red, right); target {target_ms} ms dashed</text>"
    );
    // Axes and their labels.
    let _ = writeln!(
        svg,
        "<line x1=\"{left}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>",
        height - bottom,
        width - right,
        height - bottom
    );
    for tick in 0..=4 {
        let rate = max_rate * f64::from(tick) / 4.0;
        let ms = max_ms * f64::from(tick) / 4.0;
        let y = y_rate(rate);
        let _ = writeln!(
            svg,
            "<line x1=\"{left}\" y1=\"{y}\" x2=\"{}\" y2=\"{y}\" stroke=\"#ddd\"/>\
             <text x=\"{}\" y=\"{}\" text-anchor=\"end\" fill=\"#2563eb\">{rate:.0}/min</text>\
             <text x=\"{}\" y=\"{}\" fill=\"#dc2626\">{ms:.0} ms</text>",
            width - right,
            left - 4.0,
            y + 4.0,
            width - right + 4.0,
            y + 4.0
        );
    }
    let mut second = 0.0;
    while second <= end {
        let _ = writeln!(
            svg,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{second:.0} s</text>",
            x(second),
            height - bottom + 16.0
        );
        second += 5.0;
    }
    let target_y = y_ms(target_ms);
    let _ = writeln!(
        svg,
        "<line x1=\"{left}\" y1=\"{target_y}\" x2=\"{}\" y2=\"{target_y}\" stroke=\"#dc2626\" \
         stroke-dasharray=\"6 4\"/>",
        width - right
    );
    let rate_points: Vec<String> = seconds
        .iter()
        .map(|(at, rate, _)| format!("{:.1},{:.1}", x(*at), y_rate(*rate as f64)))
        .collect();
    let _ = writeln!(
        svg,
        "<polyline fill=\"none\" stroke=\"#2563eb\" stroke-width=\"2\" points=\"{}\"/>",
        rate_points.join(" ")
    );
    let mut latency_points = Vec::new();
    let whole_seconds = end.ceil() as usize;
    for second in 0..whole_seconds {
        let window: Vec<f64> = samples
            .iter()
            .filter(|(at, _)| *at >= second as f64 && *at < second as f64 + 1.0)
            .map(|(_, latency)| *latency)
            .collect();
        if let Some(p95) = p95(window) {
            latency_points.push(format!("{:.1},{:.1}", x(second as f64 + 0.5), y_ms(p95)));
        }
    }
    let _ = writeln!(
        svg,
        "<polyline fill=\"none\" stroke=\"#dc2626\" stroke-width=\"2\" points=\"{}\"/>",
        latency_points.join(" ")
    );
    svg.push_str("</svg>\n");
    svg
}
