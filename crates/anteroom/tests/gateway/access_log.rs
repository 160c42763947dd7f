//! The access log through the real binary (SPEC §14.6): one JSON line per request to the site,
//! with the request id, client, room, decision, upstream status, durations and bytes.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::Value;

use crate::{Gate, HTML, JSON, Jar};

const LOGGED_SITE: &str = r#"
[log]
access = "json"

[upstream]
url = "{upstream}"

[[room]]
id = "shop"
max_active = 1
session_ttl = "10m"

[[rate_limit]]
name = "search"
key = ["ip"]
limit = 1
period = "1m"

[[rate_limit]]
name = "reports"
key = ["ip"]
limit = 1
period = "1m"
status = 503

[[route]]
paths = ["/search/**"]
rate_limits = ["search"]

[[route]]
paths = ["/reports/**"]
rate_limits = ["reports"]

[[route]]
paths = ["/**"]
rooms = ["shop"]
"#;

/// The access log line of the request that got `request_id`, once it is written.
pub(crate) async fn line_of(gate: &Gate, request_id: &str) -> Value {
    let started = Instant::now();
    loop {
        let found = gate
            .server
            .stdout()
            .lines()
            .map(|line| serde_json::from_str::<Value>(line).expect("a JSON line"))
            .find(|line| line["request_id"] == request_id);
        if let Some(line) = found {
            return line;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no line for {request_id}:\n{}",
            gate.server.stdout()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Sends a GET of `path`; its status and the line logged for it.
async fn logged(gate: &Gate, path: &str, jar: &mut Jar, accept: &str) -> (StatusCode, Value) {
    let response = gate
        .send(reqwest::Method::GET, path, jar, accept, &[])
        .await;
    let status = response.status();
    let request_id = response.headers()["x-request-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let line = line_of(gate, &request_id).await;
    assert_eq!(line["status"], status.as_u16(), "{line}");
    assert_eq!(line["client"], "127.0.0.1", "{line}");
    assert_eq!(line["method"], "GET", "{line}");
    assert_eq!(line["trace_id"].as_str().unwrap().len(), 32, "{line}");
    assert!(line["duration_ms"].as_f64().unwrap() >= 0.0, "{line}");
    assert!(line["time"].as_str().unwrap().ends_with('Z'), "{line}");
    (status, line)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_json_line_per_request_with_its_decision() {
    let gate = Gate::start(LOGGED_SITE).await;

    // Admitted on the spot, then passed with the pass; the query string is not logged.
    let mut first = Jar::default();
    let (status, admitted) = logged(&gate, "/products?token=secret", &mut first, HTML).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(admitted["path"], "/products", "{admitted}");
    assert_eq!(admitted["decision"], "admitted", "{admitted}");
    assert_eq!(admitted["room"], "shop");
    assert_eq!(admitted["upstream_status"], 200);
    assert!(admitted["upstream_duration_ms"].as_f64().unwrap() > 0.0);
    assert!(admitted["bytes"].as_u64().unwrap() > 0, "{admitted}");
    let (_, passed) = logged(&gate, "/products", &mut first, HTML).await;
    assert_eq!(passed["decision"], "passed", "{passed}");
    assert_eq!(passed["room"], "shop");
    assert_eq!(passed["upstream_status"], 200);

    // The room is full: the next visitor is queued and nothing reaches the upstream.
    let mut second = Jar::default();
    let (_, queued) = logged(&gate, "/products", &mut second, HTML).await;
    assert_eq!(queued["decision"], "queued", "{queued}");
    assert_eq!(queued["room"], "shop");
    assert_eq!(queued["upstream_status"], Value::Null);
    assert_eq!(queued["upstream_duration_ms"], Value::Null);

    // The route's rate limit: the first search goes through, the second is limited.
    let mut searcher = Jar::default();
    let (_, bypass) = logged(&gate, "/search/a", &mut searcher, JSON).await;
    assert_eq!(bypass["decision"], "bypass", "{bypass}");
    assert_eq!(bypass["upstream_status"], 200);
    let (status, limited) = logged(&gate, "/search/b", &mut searcher, JSON).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(limited["decision"], "limited", "{limited}");
    assert_eq!(limited["upstream_status"], Value::Null);

    // A rule refusing with a status of its own is still a rate limit, not another refusal.
    let (_, bypass) = logged(&gate, "/reports/a", &mut searcher, JSON).await;
    assert_eq!(bypass["upstream_status"], 200, "{bypass}");
    let (status, limited) = logged(&gate, "/reports/b", &mut searcher, JSON).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(limited["decision"], "limited", "{limited}");
    assert_eq!(limited["upstream_status"], Value::Null);
}

/// One rule with a `match` that the route names too, on a node behind a trusted proxy (the
/// test, on 127.0.0.1): the rule is decided once per request in front of the gateway (on the
/// own engine, with the connection carried beside the request rather than in its
/// extensions), the route's step does not count it again, and each forwarded client counts
/// apart and is the client the access log names.
const ONE_RULE_BEHIND_A_PROXY: &str = r#"
[log]
access = "json"

[upstream]
url = "{upstream}"

[[rate_limit]]
name = "per-ip"
match = { paths = ["/**"] }
key = ["ip"]
limit = 2
period = "1m"

[[route]]
paths = ["/**"]
rate_limits = ["per-ip"]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_counts_each_forwarded_client_once_per_request() {
    let name = crate::support::test_engine();
    let gate = Gate::start_with(
        r#"trusted_proxies = ["127.0.0.1/32"]"#,
        ONE_RULE_BEHIND_A_PROXY,
    )
    .await;
    let from = |client: &'static str| [("x-forwarded-for", client)];
    let mut statuses = Vec::new();
    for client in ["203.0.113.1", "203.0.113.1", "203.0.113.2", "203.0.113.1"] {
        let response = gate
            .send(
                reqwest::Method::GET,
                "/a",
                &mut Jar::default(),
                JSON,
                &from(client),
            )
            .await;
        let status = response.status();
        statuses.push(status.as_u16());
        if status != StatusCode::OK {
            // Refused in front of the gateway: no line of its own.
            continue;
        }
        let request_id = response.headers()["x-request-id"]
            .to_str()
            .unwrap()
            .to_owned();
        let line = line_of(&gate, &request_id).await;
        assert_eq!(line["client"], client, "{name}: {line}");
    }
    // Counted twice, the first client's second request would have been refused.
    assert_eq!(statuses, [200, 200, 200, 429], "{name}");
}
