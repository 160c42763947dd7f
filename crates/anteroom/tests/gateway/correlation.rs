//! `X-Request-Id` and the W3C trace context through the real binary to a real upstream
//! (SPEC §14.6); `ANTEROOM_TEST_HTTP_ENGINE` picks the engine, as for every gateway test.

use reqwest::StatusCode;

use crate::{Gate, JSON, Jar, echoed};

const PLAIN_SITE: &str = r#"
[upstream]
url = "{upstream}"
"#;

const LOGGED_SITE: &str = r#"
[log]
access = "json"

[upstream]
url = "{upstream}"
"#;

const TRUSTED_LOOPBACK: &str = r#"trusted_proxies = ["127.0.0.1/32"]"#;

const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";

/// A request with `headers`: the id the visitor got back and the headers the upstream got.
async fn sent(gate: &Gate, headers: &[(&str, &str)]) -> (String, serde_json::Value) {
    let mut jar = Jar::default();
    let response = gate
        .send(reqwest::Method::GET, "/page", &mut jar, JSON, headers)
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    let returned = response.headers()["x-request-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let echo = echoed(response).await.expect("proxied");
    (returned, echo["headers"].clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_id_from_an_untrusted_peer_is_replaced_and_reaches_the_origin() {
    let name = crate::support::test_engine();
    let gate = Gate::start(PLAIN_SITE).await;
    let (returned, upstream) = sent(&gate, &[("x-request-id", "forged-by-client")]).await;
    assert_ne!(returned, "forged-by-client", "{name}");
    assert_eq!(returned.len(), 32, "{name}: {returned}");
    assert!(returned.bytes().all(|byte| byte.is_ascii_hexdigit()));
    assert_eq!(upstream["x-request-id"], returned.as_str(), "{name}");
    // Each request gets its own.
    let (again, _) = sent(&gate, &[]).await;
    assert_ne!(again, returned, "{name}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_id_from_a_trusted_proxy_is_kept_unless_it_is_odd() {
    let name = crate::support::test_engine();
    let gate = Gate::start_with(TRUSTED_LOOPBACK, PLAIN_SITE).await;
    let (returned, upstream) = sent(&gate, &[("x-request-id", "lb-7f3a.42")]).await;
    assert_eq!(returned, "lb-7f3a.42", "{name}");
    assert_eq!(upstream["x-request-id"], "lb-7f3a.42", "{name}");
    let long = "x".repeat(129);
    let (returned, upstream) = sent(&gate, &[("x-request-id", &long)]).await;
    assert_ne!(returned, long, "{name}");
    assert_eq!(upstream["x-request-id"], returned.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trusted_proxy_s_traceparent_keeps_its_trace_and_an_invalid_one_is_replaced() {
    let name = crate::support::test_engine();
    let gate = Gate::start_with(TRUSTED_LOOPBACK, PLAIN_SITE).await;
    let (_, upstream) = sent(
        &gate,
        &[("traceparent", TRACEPARENT), ("tracestate", "vendor=abc")],
    )
    .await;
    let forwarded = upstream["traceparent"].as_str().unwrap();
    assert_eq!(&forwarded[3..35], TRACE_ID, "{name}: {forwarded}");
    assert_eq!(upstream["tracestate"], "vendor=abc", "{name}");

    let zero = "00-00000000000000000000000000000000-00f067aa0ba902b7-01";
    let (_, upstream) = sent(&gate, &[("traceparent", zero), ("tracestate", "v=1")]).await;
    let replaced = upstream["traceparent"].as_str().unwrap();
    assert_ne!(replaced, zero, "{name}");
    assert!(
        replaced.starts_with("00-") && replaced.len() == 55,
        "{replaced}"
    );
    assert_ne!(&replaced[3..35], "0".repeat(32), "{name}");
    assert!(upstream.get("tracestate").is_none(), "{name}: {upstream}");

    // Without one, the node starts a trace.
    let (_, upstream) = sent(&gate, &[]).await;
    assert_eq!(upstream["traceparent"].as_str().unwrap().len(), 55);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_client_s_trace_context_is_replaced_upstream_and_in_the_access_log() {
    let name = crate::support::test_engine();
    let gate = Gate::start(LOGGED_SITE).await;
    let (request_id, upstream) = sent(
        &gate,
        &[("traceparent", TRACEPARENT), ("tracestate", "vendor=abc")],
    )
    .await;
    let forwarded = upstream["traceparent"].as_str().unwrap();
    assert_eq!(forwarded.len(), 55, "{name}: {forwarded}");
    assert_ne!(&forwarded[3..35], TRACE_ID, "{name}: {forwarded}");
    assert!(upstream.get("tracestate").is_none(), "{name}: {upstream}");
    // The access log records the node's trace, the one the origin was told.
    let line = crate::access_log::line_of(&gate, &request_id).await;
    assert_eq!(line["trace_id"], &forwarded[3..35], "{name}: {line}");
}
