//! The metrics an SRE alerts on (SPEC §14.7), against the real binary: after joins, gateway
//! requests (one answered 5xx by the origin), an SSE stream and a failing event sink, a scrape
//! of the admin listener holds every §14.7 series, every family has HELP and TYPE, every name
//! follows Prometheus' conventions (base units, counters ending `_total`) except the
//! documented deprecated aliases, and every series named by the shipped rules
//! (deploy/prometheus) and dashboard (deploy/grafana) is one the node exports. The shipped
//! rules pass `promtool check rules` and their unit tests (`promtool test rules`).
#![allow(clippy::unwrap_used)]

// This test uses the admin client only to wait for the listener.
#[path = "support/admin.rs"]
mod admin_support;
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use axum::Router;
use axum::http::StatusCode as AxumStatus;
use axum::routing::get;
use reqwest::StatusCode;

use admin_support::{AdminClient, AdminSite};

/// Old names kept one release as deprecated aliases (docs/operating.md), exempt from the
/// naming rules.
const DEPRECATED_ALIASES: &[&str] = &[
    "anteroom_adaptive_rate_per_minute",
    "anteroom_adaptive_p95_ms",
    "anteroom_adaptive_error_rate",
    "anteroom_room_admission_rate_per_minute",
];

/// The §14.7 series a node with a gateway, an adaptive room and an event sink exports.
const REQUIRED: &[&str] = &[
    "anteroom_build_info",
    "anteroom_ready",
    "process_resident_memory_bytes",
    "process_open_fds",
    "process_max_fds",
    "anteroom_http_requests_total",
    "anteroom_http_request_duration_seconds",
    "anteroom_store_operation_seconds",
    "anteroom_store_errors_total",
    "anteroom_ticker_lag_seconds",
    "anteroom_event_delivery_failures_total",
    "anteroom_event_sink_pending_events",
    "anteroom_sse_connections",
    "anteroom_sse_max_connections",
    "anteroom_upstream_server_errors_total",
    "anteroom_upstream_latency_seconds",
    "anteroom_room_waiting",
    "anteroom_room_admissions_total",
    "anteroom_room_admission_rate_per_second",
    "anteroom_adaptive_rate_per_second",
    "anteroom_adaptive_p95_seconds",
    "anteroom_adaptive_error_ratio",
];

/// One metric family of a scrape: its TYPE, whether it has HELP and its HELP text.
#[derive(Debug, Default)]
struct Family {
    kind: Option<String>,
    help: Option<String>,
    samples: usize,
}

/// The families of a text exposition, by name; sample lines are filed under their family
/// (a histogram's `_bucket`, `_sum` and `_count` under the histogram).
fn families(text: &str) -> BTreeMap<String, Family> {
    let mut families: BTreeMap<String, Family> = BTreeMap::new();
    for line in text.lines().filter(|line| !line.is_empty()) {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            families.entry(name.to_owned()).or_default().help = Some(help.to_owned());
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            families.entry(name.to_owned()).or_default().kind = Some(kind.to_owned());
        } else if !line.starts_with('#') {
            let name = line.split(['{', ' ']).next().unwrap();
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .filter_map(|suffix| name.strip_suffix(suffix))
                .find(|base| {
                    families
                        .get(*base)
                        .is_some_and(|family| family.kind.as_deref() == Some("histogram"))
                })
                .unwrap_or(name);
            families.entry(family.to_owned()).or_default().samples += 1;
        }
    }
    families
}

/// What is wrong with a family's name and type, if anything.
fn convention_breach(name: &str, family: &Family) -> Option<String> {
    let kind = family.kind.as_deref()?;
    let units = ["_seconds", "_bytes", "_ratio", "_total", "_info"];
    if [
        "_ms",
        "_milliseconds",
        "_minutes",
        "_per_minute",
        "_rate",
        "_percent",
    ]
    .iter()
    .any(|bad| name.ends_with(bad))
        || name.contains("_per_minute")
    {
        return Some("not in base units".to_owned());
    }
    match kind {
        "counter" if !name.ends_with("_total") => Some("a counter not ending in _total".to_owned()),
        "gauge" | "histogram" if name.ends_with("_total") => {
            Some(format!("a {kind} ending in _total"))
        }
        "histogram"
            if (name.contains("latency") || name.contains("duration"))
                && !name.ends_with("_seconds") =>
        {
            Some("a time histogram not in seconds".to_owned())
        }
        _ if name.contains("latency") || name.contains("lag") || name.contains("p95") => units
            .iter()
            .all(|unit| !name.ends_with(unit))
            .then(|| "a time without its unit".to_owned()),
        _ => None,
    }
}

/// The `anteroom_*` and `process_*` names a PromQL text mentions (read roughly: every token
/// of name characters starting so), a histogram's `_bucket`/`_sum`/`_count` taken back to the
/// histogram when the scrape has it.
fn series_named(promql: &str, scraped: &BTreeMap<String, Family>) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let bytes = promql.as_bytes();
    let is_name = |byte: u8| byte.is_ascii_alphanumeric() || byte == b'_';
    let mut start = 0;
    while start < bytes.len() {
        if !is_name(bytes[start])
            || (start > 0 && (is_name(bytes[start - 1]) || bytes[start - 1] == b':'))
        {
            start += 1;
            continue;
        }
        let end = (start..bytes.len())
            .find(|&index| !is_name(bytes[index]) && bytes[index] != b':')
            .unwrap_or(bytes.len());
        let token = &promql[start..end];
        if (token.starts_with("anteroom_") || token.starts_with("process_")) && !token.contains(':')
        {
            let histogram = ["_bucket", "_sum", "_count"]
                .iter()
                .filter_map(|suffix| token.strip_suffix(suffix))
                .find(|base| scraped.contains_key(*base));
            names.insert(histogram.unwrap_or(token).to_owned());
        }
        start = end;
    }
    names
}

fn deploy_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy")
}

/// The PromQL of the shipped rules: every `expr:` of rules.yml and alerts.yml with the lines
/// that continue it (block scalars).
fn rule_expressions() -> Vec<String> {
    let mut expressions = Vec::new();
    for file in ["rules.yml", "alerts.yml"] {
        let text = std::fs::read_to_string(deploy_dir().join("prometheus").join(file)).unwrap();
        let mut current: Option<(usize, String)> = None;
        for line in text.lines() {
            let indent = line.len() - line.trim_start().len();
            if let Some((expr_indent, expr)) = &mut current {
                if indent > *expr_indent && !line.trim().is_empty() {
                    expr.push(' ');
                    expr.push_str(line.trim());
                    continue;
                }
                expressions.push(std::mem::take(expr));
                current = None;
            }
            if let Some(rest) = line.trim_start().strip_prefix("expr:") {
                let rest = rest.trim().trim_start_matches(['>', '|']).to_owned();
                current = Some((indent, rest));
            }
        }
        if let Some((_, expr)) = current {
            expressions.push(expr);
        }
    }
    expressions
}

/// The PromQL of the shipped dashboard: every panel target and template query.
fn dashboard_expressions() -> Vec<String> {
    let path = deploy_dir().join("grafana/anteroom.json");
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut expressions = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            expressions.push(target["expr"].as_str().unwrap().to_owned());
        }
    }
    for variable in dashboard["templating"]["list"].as_array().unwrap() {
        if let Some(query) = variable["query"]["query"].as_str() {
            expressions.push(query.to_owned());
        }
    }
    expressions
}

/// A local origin: `/` answers 200, `/broken` 500.
async fn start_origin() -> std::net::SocketAddr {
    let app = Router::new().route("/", get(|| async { "origin" })).route(
        "/broken",
        get(|| async { (AxumStatus::INTERNAL_SERVER_ERROR, "broken") }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_scrape_follows_the_conventions_and_holds_what_the_rules_and_dashboard_use() {
    let origin = start_origin().await;
    // Nothing listens on the sink's port: every delivery fails.
    let dead_port = support::free_port();
    let site = AdminSite::new(&format!(
        "[upstream]\n\
         url = \"http://{origin}\"\n\
         \n\
         [[room]]\n\
         id = \"shop\"\n\
         routes = [\"/shop/**\"]\n\
         max_active = 1\n\
         admit_per_minute = 60\n\
         \n\
         [room.adaptive]\n\
         target_p95_ms = 500\n\
         min_per_minute = 10\n\
         max_per_minute = 600\n\
         interval = \"1s\"\n\
         \n\
         [[events.sink]]\n\
         kind = \"webhook\"\n\
         name = \"hook\"\n\
         url = \"http://127.0.0.1:{dead_port}/hook\"\n\
         secret = \"a-secret-of-sixteen-or-more\"\n\
         timeout = \"1s\"\n"
    ));
    let client = support::client();
    let mut server = site.site.start();
    server.wait_ready(&client).await;
    AdminClient::new(&site.admin_url()).wait_ready().await;
    let base = server.url();

    // Traffic: joins (the second waits), gateway requests outside the room, one answered 5xx
    // by the origin, and an SSE stream held open across scrapes.
    support::join(&client, &base, "shop").await;
    let waiting = support::join(&client, &base, "shop").await;
    assert_eq!(waiting.state, "waiting");
    let page = client.get(format!("{base}/")).send().await.unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    let broken = client.get(format!("{base}/broken")).send().await.unwrap();
    assert_eq!(broken.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let stream = client
        .get(format!("{base}/_anteroom/v1/rooms/shop/events"))
        .header("x-anteroom-ticket", &waiting.ticket)
        .timeout(Duration::from_secs(60))
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), StatusCode::OK);

    // The sampler, the adaptive controller and the sink's first failure each take a moment.
    let started = Instant::now();
    let (text, scraped) = loop {
        let text = support::scrape_metrics(&client, &site.admin_url()).await;
        let scraped = families(&text);
        let missing: Vec<_> = REQUIRED
            .iter()
            .filter(|name| scraped.get(**name).is_none_or(|family| family.samples == 0))
            .collect();
        if missing.is_empty() {
            break (text, scraped);
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "series still missing: {missing:?}\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    drop(stream);

    let mut breaches = Vec::new();
    for (name, family) in &scraped {
        if family.kind.is_none() {
            breaches.push(format!("{name}: no TYPE"));
        }
        if family.help.as_deref().is_none_or(str::is_empty) {
            breaches.push(format!("{name}: no HELP"));
        }
        if family.samples == 0 {
            breaches.push(format!("{name}: no sample"));
        }
        if DEPRECATED_ALIASES.contains(&name.as_str()) {
            if !family
                .help
                .as_deref()
                .is_some_and(|help| help.starts_with("Deprecated"))
            {
                breaches.push(format!(
                    "{name}: an alias that does not say it is deprecated"
                ));
            }
        } else if let Some(breach) = convention_breach(name, family) {
            breaches.push(format!("{name}: {breach}"));
        }
    }
    assert!(breaches.is_empty(), "{breaches:#?}");
    for alias in DEPRECATED_ALIASES {
        assert!(
            scraped.contains_key(*alias),
            "the alias {alias} is still exported"
        );
    }
    // The request series count both listeners by status class: the 5xx the origin answered
    // passed through the public listener, the scrapes through the admin one.
    for sample in [
        "anteroom_http_requests_total{listener=\"public\",class=\"5xx\"}",
        "anteroom_http_requests_total{listener=\"public\",class=\"2xx\"}",
        "anteroom_http_requests_total{listener=\"admin\",class=\"2xx\"}",
    ] {
        assert!(text.contains(sample), "{sample} in\n{text}");
    }
    assert!(text.contains("anteroom_sse_connections 1"), "{text}");
    // Store latency is timed on the request path (the joins), not only by the sampler.
    for operation in ["join", "tick", "snapshot"] {
        let sample = format!("anteroom_store_operation_seconds_count{{operation=\"{operation}\"}}");
        assert!(text.contains(&sample), "{sample} in\n{text}");
    }

    let exported: BTreeSet<&String> = scraped.keys().collect();
    let rules = rule_expressions();
    let dashboard = dashboard_expressions();
    assert!(
        rules.len() >= 19,
        "every rule's expression was read: {rules:?}"
    );
    for expression in rules.iter().chain(&dashboard) {
        let named = series_named(expression, &scraped);
        assert!(
            !named.is_empty() || expression.contains("anteroom:") || expression.contains("up{"),
            "{expression} names a series"
        );
        for name in named {
            assert!(
                exported.contains(&name),
                "{name} (in {expression}) is not exported"
            );
        }
    }
}

#[test]
fn the_shipped_rules_pass_promtool_check_and_their_unit_tests() {
    let dir = deploy_dir().join("prometheus");
    let check = std::process::Command::new("promtool")
        .args(["check", "rules", "rules.yml", "alerts.yml"])
        .current_dir(&dir)
        .output()
        .expect("promtool (Debian's prometheus package) runs");
    assert!(
        check.status.success(),
        "{}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
    let test = std::process::Command::new("promtool")
        .args(["test", "rules", "tests.yml"])
        .current_dir(&dir)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&test.stdout);
    assert!(
        test.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&test.stderr)
    );
    assert!(said.contains("SUCCESS"), "{said}");
    // Every alert has a unit test.
    let alerts = std::fs::read_to_string(dir.join("alerts.yml")).unwrap();
    let tests = std::fs::read_to_string(dir.join("tests.yml")).unwrap();
    for alert in alerts
        .lines()
        .filter_map(|line| line.trim().strip_prefix("- alert: "))
    {
        assert!(
            tests.contains(&format!("alertname: {alert}\n")),
            "{alert} has a unit test"
        );
    }
}
