//! `/metrics` on the admin listener (SPEC §8.4): a scrape is valid Prometheus text exposition
//! (checked line by line by a small parser of the format) and holds the expected series.
//! Its own test binary: the recorder is process-wide.

#![allow(clippy::unwrap_used)]

#[allow(dead_code)]
#[path = "../../edge/tests/support/mod.rs"]
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use http::{Method, StatusCode};

use anteroom_admin::{AdminSettings, AdminState, Metrics, admin_router};
use anteroom_core::room::{Mode, RoomConfig};
use anteroom_edge::{Gateway, GatewayOptions};
use anteroom_token::SigningAlgorithm;
use support::{Call, Harness, room};

/// One sample line: name, labels, value.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// Parses the text format (0.0.4), failing on any line that is not valid.
fn parse_exposition(text: &str) -> (Vec<Sample>, BTreeMap<String, String>) {
    let mut samples = Vec::new();
    let mut types = BTreeMap::new();
    let metric_name = |name: &str| {
        let mut chars = name.chars();
        chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    };
    for (number, line) in text.lines().enumerate() {
        let context = format!("line {}: {line:?}", number + 1);
        if line.is_empty() {
            continue;
        }
        if let Some(comment) = line.strip_prefix('#') {
            let words: Vec<&str> = comment.trim_start().splitn(3, ' ').collect();
            match words.as_slice() {
                ["TYPE", name, kind] => {
                    assert!(metric_name(name), "{context}");
                    assert!(
                        ["counter", "gauge", "histogram", "summary", "untyped"].contains(kind),
                        "{context}"
                    );
                    assert!(
                        types
                            .insert((*name).to_owned(), (*kind).to_owned())
                            .is_none(),
                        "TYPE given twice, {context}"
                    );
                }
                ["HELP", name, ..] => assert!(metric_name(name), "{context}"),
                _ => {}
            }
            continue;
        }
        let (series, rest) = match line.find('{') {
            Some(_) => {
                let close = line.rfind('}').unwrap_or_else(|| panic!("{context}"));
                (&line[..close + 1], line[close + 1..].trim())
            }
            None => {
                let (series, rest) = line.split_once(' ').unwrap_or_else(|| panic!("{context}"));
                (series, rest.trim())
            }
        };
        let (name, labels) = match series.split_once('{') {
            None => (series, BTreeMap::new()),
            Some((name, labels)) => {
                let labels = labels
                    .strip_suffix('}')
                    .unwrap_or_else(|| panic!("{context}"));
                let mut parsed = BTreeMap::new();
                let mut rest = labels;
                while !rest.is_empty() {
                    let (label, after) = rest
                        .split_once("=\"")
                        .unwrap_or_else(|| panic!("{context}"));
                    assert!(metric_name(label) && !label.contains(':'), "{context}");
                    // A value runs to the first quote not escaped by a backslash.
                    let mut end = None;
                    let mut escaped = false;
                    for (index, c) in after.char_indices() {
                        match (c, escaped) {
                            ('\\', false) => escaped = true,
                            ('"', false) => {
                                end = Some(index);
                                break;
                            }
                            _ => escaped = false,
                        }
                    }
                    let end = end.unwrap_or_else(|| panic!("{context}"));
                    parsed.insert(label.to_owned(), after[..end].to_owned());
                    rest = after[end + 1..]
                        .strip_prefix(',')
                        .unwrap_or(&after[end + 1..]);
                }
                (name, parsed)
            }
        };
        assert!(metric_name(name), "{context}");
        let mut fields = rest.split_whitespace();
        let value = fields.next().unwrap_or_else(|| panic!("{context}"));
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            "NaN" => f64::NAN,
            number => number
                .parse()
                .unwrap_or_else(|_| panic!("bad value, {context}")),
        };
        if let Some(timestamp) = fields.next() {
            timestamp
                .parse::<i64>()
                .unwrap_or_else(|_| panic!("{context}"));
        }
        assert!(fields.next().is_none(), "{context}");
        samples.push(Sample {
            name: name.to_owned(),
            labels,
            value,
        });
    }
    (samples, types)
}

#[tokio::test]
async fn a_scrape_is_valid_exposition_with_the_expected_series() {
    let mut harness = Harness::new(vec![
        RoomConfig {
            mode: Mode::QueueAll,
            ..room("launch")
        },
        room("quiet"),
    ])
    .await;
    let metrics = Metrics::install(None).unwrap();
    metrics.spawn_upkeep();
    let key_dir = tempfile::tempdir().unwrap();
    let settings = AdminSettings {
        admin_keys: Vec::new(),
        read_keys: Vec::new(),
        key_source: anteroom_api::KeySource::Dir(key_dir.path().to_owned()),
        algorithm: SigningAlgorithm::EdDsa,
        ticket_secret_retention: std::time::Duration::from_secs(3600),
    };
    metrics.watch_gateway(Gateway::new(
        harness.state.clone(),
        GatewayOptions::default(),
    ));
    let admin = AdminState::new(harness.state.clone(), settings, Some(metrics));
    let public = std::mem::replace(&mut harness.app, admin_router(admin.clone()));
    // Three visitors wait in the paused room.
    for _ in 0..3 {
        let request = http::Request::builder()
            .method(Method::POST)
            .uri("/_anteroom/v1/rooms/launch/join")
            .body(axum::body::Body::empty())
            .unwrap();
        let response = tower::ServiceExt::oneshot(public.clone(), request)
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let sampler = tokio::spawn(anteroom_admin::run_admin_sampler(admin.clone(), async {
        let _ = stopped.await;
    }));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let _ = stop.send(());
    sampler.await.unwrap();

    let scrape = harness.check(Call::get("/metrics")).await;
    assert_eq!(scrape.status, StatusCode::OK);
    assert!(
        scrape
            .header("content-type")
            .unwrap()
            .starts_with("text/plain; version=0.0.4")
    );
    let text = scrape.body.as_str().unwrap();
    let (samples, types) = parse_exposition(text);

    let value = |name: &str, room: &str| {
        samples
            .iter()
            .find(|s| s.name == name && s.labels.get("room").map(String::as_str) == Some(room))
            .unwrap_or_else(|| panic!("{name}{{room={room}}} is missing:\n{text}"))
            .value
    };
    assert_eq!(value("anteroom_room_waiting", "launch"), 3.0);
    assert_eq!(value("anteroom_room_joins_total", "launch"), 3.0);
    assert_eq!(value("anteroom_room_waiting", "quiet"), 0.0);
    for gauge in [
        "anteroom_room_waiting",
        "anteroom_room_active",
        "anteroom_room_serving",
        "anteroom_room_admitted_unclaimed",
        "anteroom_sse_connections",
    ] {
        assert_eq!(
            types.get(gauge).map(String::as_str),
            Some("gauge"),
            "{gauge}:\n{text}"
        );
    }
    for counter in [
        "anteroom_room_joins_total",
        "anteroom_room_admissions_total",
        "anteroom_room_no_shows_total",
        "anteroom_room_abandons_total",
        "anteroom_room_completions_total",
        "anteroom_room_passes_total",
    ] {
        assert_eq!(
            types.get(counter).map(String::as_str),
            Some("counter"),
            "{counter}:\n{text}"
        );
        value(counter, "launch");
    }
    assert_eq!(
        types
            .get("anteroom_store_operation_seconds")
            .map(String::as_str),
        Some("histogram"),
        "store latency is a histogram with buckets:\n{text}"
    );
    // The gateway's own measurements: upstream latency by route, WebSocket messages dropped.
    assert_eq!(
        types
            .get("anteroom_upstream_latency_seconds")
            .map(String::as_str),
        Some("histogram"),
        "{text}"
    );
    assert!(
        samples
            .iter()
            .any(|s| s.name == "anteroom_upstream_latency_seconds_bucket"
                && s.labels["le"] == "+Inf"),
        "{text}"
    );
    assert_eq!(
        types
            .get("anteroom_websocket_messages_dropped_total")
            .map(String::as_str),
        Some("counter")
    );
    let buckets: BTreeSet<&str> = samples
        .iter()
        .filter(|s| s.name == "anteroom_store_operation_seconds_bucket")
        .map(|s| s.labels["le"].as_str())
        .collect();
    assert!(buckets.contains("+Inf") && buckets.len() > 5, "{buckets:?}");
}

#[test]
fn the_parser_refuses_what_is_not_exposition() {
    for bad in [
        "name{a=\"1\" 1",
        "9name 1",
        "name one",
        "name{a=1} 1",
        "name 1 2 3",
    ] {
        let result = std::panic::catch_unwind(|| parse_exposition(bad));
        assert!(result.is_err(), "{bad:?} should be refused");
    }
    let (samples, _) = parse_exposition("# HELP x y\n# TYPE x gauge\nx{a=\"q\\\"}\"} 1.5 123\n");
    assert_eq!(samples[0].labels["a"], "q\\\"}");
    assert_eq!(samples[0].value, 1.5);
}
