//! Prometheus metrics (SPEC §8.4) through the `metrics` facade, rendered by
//! `metrics-exporter-prometheus` at the admin listener's `/metrics`.
//!
//! The series, their labels and meaning are listed in docs/operating.md ("Metrics"); names
//! are in base units, and the old names it lists as deprecated are set beside their
//! replacements for one release. Besides the facade's series, a scrape renders
//! `anteroom_build_info`, the gateway's own counts and the process series
//! (`process_metrics.rs`) as text, and sets `anteroom_ready` from the readiness check.
//!
//! Requests are counted by [`RequestMetrics`], whose handles are resolved once per listener:
//! the HTTP engine calls [`RequestMetrics::answered`] where each answer's head is ready.
//!
//! Room figures come from the admin sampler, once a second. Room totals live in the store,
//! so on a shared store every node reports the same totals: aggregate with `max`, not `sum`.
//! The gateway and the store-failure record keep their own counts (plain atomics); they are
//! read at scrape time. Anything else recording through the `metrics` facade appears too.
//! Histograms get fixed buckets; the exporter's upkeep
//! runs every few seconds ([`spawn_upkeep`]) so their memory stays bounded.

use std::sync::OnceLock;
use std::time::Duration;

use metrics::{counter, gauge, histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use anteroom_core::RoomId;
use anteroom_core::engine::RoomSnapshot;

use anteroom_api::AppState;
use anteroom_api::ratelimit::RateLimiter;
use anteroom_edge::{Gateway, LATENCY_BUCKETS_MS};

/// Buckets of every latency histogram, in seconds: 0.5 ms to 10 s.
const LATENCY_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// How often the exporter's upkeep runs.
const UPKEEP_INTERVAL: Duration = Duration::from_secs(5);

/// The process's Prometheus recorder and what `/metrics` reads at scrape time.
#[derive(Clone)]
pub struct Metrics {
    handle: PrometheusHandle,
    rate_limiter: Option<RateLimiter>,
    /// The gateway's measurements, once it exists (it is built after the admin listener).
    gateway: std::sync::Arc<OnceLock<Gateway>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

/// Why the recorder could not be installed.
#[derive(Debug, thiserror::Error)]
#[error("cannot install the metrics recorder: {0}")]
pub struct MetricsError(String);

impl Metrics {
    /// Installs the Prometheus recorder for this process (once: later calls share it) and
    /// reads the rate limiter's decisions at scrape time.
    pub fn install(rate_limiter: Option<RateLimiter>) -> Result<Metrics, MetricsError> {
        static HANDLE: OnceLock<Result<PrometheusHandle, String>> = OnceLock::new();
        let handle = HANDLE
            .get_or_init(|| {
                PrometheusBuilder::new()
                    .set_buckets(LATENCY_BUCKETS)
                    .and_then(|builder| {
                        builder.set_buckets_for_metric(
                            Matcher::Suffix("_seconds".to_owned()),
                            LATENCY_BUCKETS,
                        )
                    })
                    .and_then(PrometheusBuilder::install_recorder)
                    .map_err(|error| error.to_string())
            })
            .clone()
            .map_err(MetricsError)?;
        describe();
        anteroom_api::store_timing::resolve_timers();
        Ok(Metrics {
            handle,
            rate_limiter,
            gateway: std::sync::Arc::default(),
        })
    }

    /// Adds the gateway's upstream latency histograms, responses and WebSocket counts to the
    /// scrape (once; later calls are ignored).
    pub fn watch_gateway(&self, gateway: Gateway) {
        let _ = self.gateway.set(gateway);
    }

    /// Runs the exporter's upkeep every few seconds (histogram memory stays bounded) until the
    /// runtime stops.
    pub fn spawn_upkeep(&self) {
        let handle = self.handle.clone();
        tokio::spawn(async move {
            let mut interval = tokio::time::interval(UPKEEP_INTERVAL);
            loop {
                interval.tick().await;
                handle.run_upkeep();
            }
        });
    }

    /// The exposition text (Prometheus text format 0.0.4) of this node.
    pub fn render(&self, app: &AppState) -> String {
        sse_connections(app.hub().connections());
        gauge!("anteroom_sse_max_connections").set(app.hub().max_streams() as f64);
        let failures = app.store_failures().counts();
        // Initialised at zero (the ticker's `rooms` call runs on every node), so the family is
        // there for `rate()` before the first error.
        counter!("anteroom_store_errors_total", "operation" => "rooms").increment(0);
        for (operation, count) in &failures.by_operation {
            counter!("anteroom_store_errors_total", "operation" => *operation).absolute(*count);
        }
        counter!("anteroom_store_failure_let_through_total").absolute(failures.let_through);
        counter!("anteroom_store_failure_refused_total").absolute(failures.refused);
        if let Some(marks) = app.local_marks() {
            gauge!("anteroom_once_marks").set(marks.len() as f64);
            gauge!("anteroom_once_marks_max").set(marks.max_marks() as f64);
            counter!("anteroom_once_marks_full_total").absolute(marks.full_total());
        }
        if let Some(limiter) = &self.rate_limiter {
            for (rule, figures) in limiter.metrics().snapshot() {
                for result in [
                    anteroom_api::ratelimit::RuleResult::Allowed,
                    anteroom_api::ratelimit::RuleResult::Delayed,
                    anteroom_api::ratelimit::RuleResult::Rejected,
                    anteroom_api::ratelimit::RuleResult::ShadowRejected,
                ] {
                    counter!("anteroom_rate_limit_decisions_total",
                        "rule" => rule.clone(), "result" => result.as_str())
                    .absolute(figures.count(result));
                }
                counter!("anteroom_rate_limit_store_errors_total", "rule" => rule.clone())
                    .absolute(figures.store_errors);
            }
            for budget in limiter.metrics().key_budgets() {
                let rule = budget.name().to_owned();
                gauge!("anteroom_rate_limit_keys", "rule" => rule.clone())
                    .set(budget.held() as f64);
                gauge!("anteroom_rate_limit_max_keys", "rule" => rule.clone())
                    .set(budget.max_keys() as f64);
                counter!("anteroom_rate_limit_keys_full_total", "rule" => rule)
                    .absolute(budget.full_total());
            }
        }
        let mut text = self.handle.render();
        if let Some(gateway) = self.gateway.get() {
            render_gateway(gateway, &mut text);
        }
        render_build_info(&mut text);
        crate::process_metrics::render(&mut text);
        text
    }
}

/// The gateway's own measurements, already bucketed: rendered here as text (the facade takes
/// single observations, not bucket counts).
fn render_gateway(gateway: &Gateway, text: &mut String) {
    let routes: Vec<_> = gateway
        .route_stats()
        .iter()
        .map(|route| route.snapshot())
        .collect();
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    render_upstream_latency(&routes, text);
    render_per_route(&routes, text);
    render_websocket(&gateway.websocket_stats().snapshot(), text);
}

/// The `# HELP` and `# TYPE` lines of one series.
fn render_header(text: &mut String, name: &str, kind: &str, help: &str) {
    use std::fmt::Write as _;
    let _ = writeln!(text, "# HELP {name} {help}");
    let _ = writeln!(text, "# TYPE {name} {kind}");
}

/// `anteroom_upstream_latency_seconds`: each route's histogram, buckets made cumulative.
fn render_upstream_latency(routes: &[anteroom_edge::UpstreamStatsSnapshot], text: &mut String) {
    use std::fmt::Write as _;
    render_header(
        text,
        "anteroom_upstream_latency_seconds",
        "histogram",
        "Upstream response time by route.",
    );
    for route in routes {
        let label = escape_label(&route.name);
        let mut cumulative = 0;
        for (bound, count) in LATENCY_BUCKETS_MS.iter().zip(&route.buckets) {
            cumulative += count;
            let le = *bound as f64 / 1000.0;
            let _ = writeln!(
                text,
                "anteroom_upstream_latency_seconds_bucket{{route=\"{label}\",le=\"{le}\"}} {cumulative}"
            );
        }
        let total: u64 = route.buckets.iter().sum();
        let _ = writeln!(
            text,
            "anteroom_upstream_latency_seconds_bucket{{route=\"{label}\",le=\"+Inf\"}} {total}"
        );
        let _ = writeln!(
            text,
            "anteroom_upstream_latency_seconds_sum{{route=\"{label}\"}} {}",
            route.latency_sum.as_secs_f64()
        );
        let _ = writeln!(
            text,
            "anteroom_upstream_latency_seconds_count{{route=\"{label}\"}} {total}"
        );
    }
}

/// The upstream counts and gauge labelled by route.
fn render_per_route(routes: &[anteroom_edge::UpstreamStatsSnapshot], text: &mut String) {
    use std::fmt::Write as _;
    type Pick = fn(&anteroom_edge::UpstreamStatsSnapshot) -> u64;
    let per_route: [(&str, &str, &str, Pick); 3] = [
        (
            "anteroom_upstream_responses_total",
            "counter",
            "Upstream responses by route.",
            |r| r.responses,
        ),
        (
            "anteroom_upstream_server_errors_total",
            "counter",
            "Upstream 5xx responses by route.",
            |r| r.server_errors,
        ),
        (
            "anteroom_upstream_in_flight",
            "gauge",
            "Requests waiting for the upstream, by route.",
            |r| r.in_flight,
        ),
    ];
    for (name, kind, help, pick) in per_route {
        render_header(text, name, kind, help);
        for route in routes {
            let _ = writeln!(
                text,
                "{name}{{route=\"{}\"}} {}",
                escape_label(&route.name),
                pick(route)
            );
        }
    }
}

/// The node's WebSocket counts.
fn render_websocket(websocket: &anteroom_edge::WebSocketStatsSnapshot, text: &mut String) {
    use std::fmt::Write as _;
    let node = [
        (
            "anteroom_websocket_connections_total",
            "counter",
            "WebSocket connections proxied.",
            websocket.connections,
        ),
        (
            "anteroom_websocket_open",
            "gauge",
            "WebSocket connections open.",
            websocket.open,
        ),
        (
            "anteroom_websocket_messages_forwarded_total",
            "counter",
            "WebSocket messages passed to the site.",
            websocket.forwarded,
        ),
        (
            "anteroom_websocket_messages_dropped_total",
            "counter",
            "WebSocket messages over the limit, dropped.",
            websocket.dropped,
        ),
        (
            "anteroom_websocket_closed_over_limit_total",
            "counter",
            "WebSocket connections closed (1008) over the limit.",
            websocket.closed_over_limit,
        ),
        (
            "anteroom_websocket_closed_pass_ended_total",
            "counter",
            "WebSocket connections closed (1008) when a pass they were let through with no longer held.",
            websocket.closed_pass_ended,
        ),
    ];
    for (name, kind, help, value) in node {
        render_header(text, name, kind, help);
        let _ = writeln!(text, "{name} {value}");
    }
}

/// `anteroom_build_info`: always 1, the version in a label (a dashboard joins on it).
fn render_build_info(text: &mut String) {
    use std::fmt::Write as _;
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    let _ = writeln!(
        text,
        "# HELP anteroom_build_info The running build: always 1, its version in a label."
    );
    let _ = writeln!(text, "# TYPE anteroom_build_info gauge");
    let _ = writeln!(
        text,
        "anteroom_build_info{{version=\"{}\"}} 1",
        escape_label(env!("CARGO_PKG_VERSION"))
    );
}

/// A label value in the text format: backslash, quote and newline escaped.
fn escape_label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// What a series measures, for the exporter's `# HELP` and `# TYPE` lines.
#[derive(Clone, Copy)]
enum SeriesKind {
    Counter,
    Gauge,
    /// A histogram of durations in seconds.
    SecondsHistogram,
}

/// The series this node records, described once: kind, name, help text.
const DESCRIPTIONS: &[(SeriesKind, &str, &str)] = &[
    (
        SeriesKind::Gauge,
        "anteroom_room_waiting",
        "Live waiting tickets.",
    ),
    (
        SeriesKind::Gauge,
        "anteroom_room_active",
        "Active sessions.",
    ),
    (
        SeriesKind::Gauge,
        "anteroom_room_serving",
        "Highest admitted position.",
    ),
    (
        SeriesKind::Gauge,
        "anteroom_room_admitted_unclaimed",
        "Admitted tickets that have not claimed their pass.",
    ),
    (
        SeriesKind::Gauge,
        "anteroom_room_admission_rate_per_second",
        "Measured admissions per second.",
    ),
    (
        SeriesKind::Gauge,
        "anteroom_room_admission_rate_per_minute",
        "Deprecated (removed in the next release): anteroom_room_admission_rate_per_second * 60.",
    ),
    (
        SeriesKind::Counter,
        "anteroom_room_joins_total",
        "Tickets created.",
    ),
    (
        SeriesKind::Counter,
        "anteroom_room_admissions_total",
        "Tickets admitted.",
    ),
    (
        SeriesKind::Counter,
        "anteroom_room_no_shows_total",
        "Admitted tickets that never claimed their pass.",
    ),
    (
        SeriesKind::Counter,
        "anteroom_room_abandons_total",
        "Waiting tickets dropped for lack of contact.",
    ),
    (
        SeriesKind::Counter,
        "anteroom_room_left_total",
        "Tickets that left the queue.",
    ),
    (
        SeriesKind::Counter,
        "anteroom_room_passes_total",
        "Passes issued (sessions opened).",
    ),
    (
        SeriesKind::Counter,
        "anteroom_room_completions_total",
        "Sessions completed by the site.",
    ),
    (
        SeriesKind::Counter,
        "anteroom_room_sessions_abandoned_total",
        "Sessions abandoned or revoked.",
    ),
    (
        SeriesKind::Counter,
        "anteroom_room_sessions_expired_total",
        "Sessions that ran out of time.",
    ),
    (
        SeriesKind::Gauge,
        "anteroom_ready",
        "1 when /_anteroom/readyz would answer 200 at this scrape, else 0.",
    ),
    (
        SeriesKind::Gauge,
        "anteroom_sse_connections",
        "Open SSE streams on this node.",
    ),
    (
        SeriesKind::Gauge,
        "anteroom_sse_max_connections",
        "The most SSE streams this node holds ([server] sse_max_streams).",
    ),
    (
        SeriesKind::Counter,
        "anteroom_sse_refused_total",
        "SSE streams refused, by the bound that was full.",
    ),
    (
        SeriesKind::Counter,
        "anteroom_status_from_view_total",
        "Status polls answered from this node's view of the line, and those its view was older than.",
    ),
    (
        SeriesKind::Counter,
        "anteroom_http_requests_total",
        "Requests answered, by listener and status class.",
    ),
    (
        SeriesKind::SecondsHistogram,
        "anteroom_http_request_duration_seconds",
        "Time from a request's head to its answer's head, by listener.",
    ),
    (
        SeriesKind::Counter,
        "anteroom_http_requests_abandoned_total",
        "Requests dropped unanswered because their client closed the connection first, by listener.",
    ),
    (
        SeriesKind::Gauge,
        "anteroom_ticker_lag_seconds",
        "How late the ticker's last round finished after its scheduled start.",
    ),
    (
        SeriesKind::Gauge,
        "anteroom_event_sink_pending_events",
        "Events the sink's last outbox read found waiting, up to one batch (0: caught up).",
    ),
    (
        SeriesKind::Counter,
        "anteroom_event_delivery_failures_total",
        "Event deliveries (log or webhook batches) that failed, by sink.",
    ),
    (
        SeriesKind::Gauge,
        "anteroom_adaptive_rate_per_second",
        "The adaptive room's admission rate (admit_per_minute / 60) after this node's last controller run.",
    ),
    (
        SeriesKind::Gauge,
        "anteroom_adaptive_p95_seconds",
        "The upstream p95 latency the controller last saw.",
    ),
    (
        SeriesKind::Gauge,
        "anteroom_adaptive_error_ratio",
        "The upstream 5xx share (0 to 1) the controller last saw.",
    ),
    (
        SeriesKind::Gauge,
        "anteroom_adaptive_rate_per_minute",
        "Deprecated (removed in the next release): anteroom_adaptive_rate_per_second * 60.",
    ),
    (
        SeriesKind::Gauge,
        "anteroom_adaptive_p95_ms",
        "Deprecated (removed in the next release): anteroom_adaptive_p95_seconds * 1000.",
    ),
    (
        SeriesKind::Gauge,
        "anteroom_adaptive_error_rate",
        "Deprecated (removed in the next release): anteroom_adaptive_error_ratio.",
    ),
    (
        SeriesKind::Gauge,
        "anteroom_adaptive_in_flight",
        "Upstream requests in flight at the controller's last run.",
    ),
    (
        SeriesKind::Counter,
        "anteroom_adaptive_decisions_total",
        "Adaptive controller runs by decision.",
    ),
    (
        SeriesKind::Counter,
        "anteroom_challenges_issued_total",
        "Proof-of-work challenges handed out.",
    ),
    (
        SeriesKind::Counter,
        "anteroom_challenges_solved_total",
        "Joins let in with a correct, unused solution.",
    ),
    (
        SeriesKind::Counter,
        "anteroom_challenges_failed_total",
        "Joins refused by the proof-of-work gate, by reason.",
    ),
    (
        SeriesKind::Counter,
        "anteroom_rate_limit_decisions_total",
        "Rate-limit decisions by rule and result.",
    ),
    (
        SeriesKind::Counter,
        "anteroom_rate_limit_store_errors_total",
        "Rate-limit decisions a rule's store could not make.",
    ),
    (
        SeriesKind::Gauge,
        "anteroom_once_marks",
        "One-time marks (used challenges) this node holds, when they are not in Redis.",
    ),
    (
        SeriesKind::Gauge,
        "anteroom_once_marks_max",
        "The most one-time marks this node holds (max_once_marks).",
    ),
    (
        SeriesKind::Counter,
        "anteroom_once_marks_full_total",
        "Marks refused because this node's one-time marks were full (joins refused with 503).",
    ),
    (
        SeriesKind::Gauge,
        "anteroom_rate_limit_keys",
        "Keys a rule's counters hold in this node's local store.",
    ),
    (
        SeriesKind::Gauge,
        "anteroom_rate_limit_max_keys",
        "The most keys a rule's counters may hold in this node's local store (max_keys).",
    ),
    (
        SeriesKind::Counter,
        "anteroom_rate_limit_keys_full_total",
        "New keys that met their rule's key budget full (refused, or let through uncounted).",
    ),
    (
        SeriesKind::SecondsHistogram,
        "anteroom_store_operation_seconds",
        "Store operations timed by this node, by operation (the request path's, the ticker's and the admin sampler's).",
    ),
    (
        SeriesKind::Counter,
        "anteroom_store_errors_total",
        "Store operations that failed.",
    ),
    (
        SeriesKind::Counter,
        "anteroom_store_failure_let_through_total",
        "Requests let through without a decision while the store failed (on_store_error = open).",
    ),
    (
        SeriesKind::Counter,
        "anteroom_store_failure_refused_total",
        "Requests refused while the store failed (on_store_error = closed).",
    ),
];

fn describe() {
    static DESCRIBED: OnceLock<()> = OnceLock::new();
    DESCRIBED.get_or_init(|| {
        metrics::with_recorder(|recorder| {
            for &(kind, name, help) in DESCRIPTIONS {
                let key = metrics::KeyName::from_const_str(name);
                let help = metrics::SharedString::const_str(help);
                match kind {
                    SeriesKind::Counter => recorder.describe_counter(key, None, help),
                    SeriesKind::Gauge => recorder.describe_gauge(key, None, help),
                    SeriesKind::SecondsHistogram => {
                        recorder.describe_histogram(key, Some(metrics::Unit::Seconds), help)
                    }
                }
            }
        });
    });
}

/// Sets a room's gauges and counters from one snapshot.
pub(crate) fn room_figures(room: &RoomId, snapshot: &RoomSnapshot) {
    let label = room.to_string();
    gauge!("anteroom_room_waiting", "room" => label.clone()).set(snapshot.waiting as f64);
    gauge!("anteroom_room_active", "room" => label.clone()).set(snapshot.active as f64);
    gauge!("anteroom_room_serving", "room" => label.clone()).set(snapshot.serving as f64);
    gauge!("anteroom_room_admitted_unclaimed", "room" => label.clone())
        .set(snapshot.admitted_unclaimed as f64);
    let per_second = snapshot.admission_rate.unwrap_or(0.0);
    gauge!("anteroom_room_admission_rate_per_second", "room" => label.clone()).set(per_second);
    // Deprecated alias, removed in the next release.
    gauge!("anteroom_room_admission_rate_per_minute", "room" => label.clone())
        .set(per_second * 60.0);
    let totals = snapshot.totals;
    let counters = [
        ("anteroom_room_joins_total", totals.joined),
        ("anteroom_room_admissions_total", totals.admitted),
        ("anteroom_room_no_shows_total", totals.no_show),
        ("anteroom_room_abandons_total", totals.abandoned),
        ("anteroom_room_left_total", totals.left),
        ("anteroom_room_passes_total", totals.passes),
        ("anteroom_room_completions_total", totals.completed),
        (
            "anteroom_room_sessions_abandoned_total",
            totals.sessions_abandoned,
        ),
        ("anteroom_room_sessions_expired_total", totals.expired),
    ];
    for (name, value) in counters {
        counter!(name, "room" => label.clone()).absolute(value);
    }
}

/// Open SSE streams on this node.
pub(crate) fn sse_connections(connections: usize) {
    gauge!("anteroom_sse_connections").set(connections as f64);
}

/// Times one store operation.
pub(crate) fn store_latency(operation: &'static str, elapsed: Duration) {
    histogram!("anteroom_store_operation_seconds", "operation" => operation)
        .record(elapsed.as_secs_f64());
}
