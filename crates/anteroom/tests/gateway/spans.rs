//! Span export (SPEC §14.6): the real binary with `[tracing] otlp_endpoint` sends its request
//! spans to an OTLP/HTTP receiver started here, in a trusted proxy's trace (an untrusted
//! client's trace context is replaced by the node's own trace), and tells the upstream its
//! span as the parent.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::routing::post;
use serde_json::Value;

use crate::{Gate, JSON, Jar, echoed};

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

/// An OTLP/HTTP receiver: keeps every JSON body POSTed to `/v1/traces`.
struct Receiver {
    url: String,
    bodies: Arc<Mutex<Vec<Value>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Receiver {
    async fn start() -> Receiver {
        let bodies = Arc::new(Mutex::new(Vec::new()));
        let app = Router::new()
            .route("/v1/traces", post(receive))
            .with_state(bodies.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/v1/traces", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Receiver { url, bodies, task }
    }

    /// The first span received in `trace_id`, waiting for the batch (sent within the SDK's
    /// 5 s schedule).
    async fn span_in(&self, trace_id: &str, gate: &Gate) -> Value {
        let started = Instant::now();
        loop {
            let found = self
                .spans()
                .into_iter()
                .find(|span| span["traceId"] == trace_id);
            if let Some(span) = found {
                return span;
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "no span received in {trace_id}; log:\n{}",
                gate.server.log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Every span received so far.
    fn spans(&self) -> Vec<Value> {
        let bodies = self.bodies.lock().unwrap();
        let mut spans = Vec::new();
        for body in bodies.iter() {
            for resource in body["resourceSpans"].as_array().into_iter().flatten() {
                for scope in resource["scopeSpans"].as_array().into_iter().flatten() {
                    spans.extend(scope["spans"].as_array().into_iter().flatten().cloned());
                }
            }
        }
        spans
    }
}

async fn receive(State(bodies): State<Arc<Mutex<Vec<Value>>>>, body: String) -> &'static str {
    let value: Value = serde_json::from_str(&body).expect("an OTLP/JSON body");
    bodies.lock().unwrap().push(value);
    "{}"
}

/// The config of a site that exports its spans to `receiver`.
fn traced_site(receiver: &Receiver) -> String {
    format!(
        "[tracing]\notlp_endpoint = \"{}\"\n\n[upstream]\nurl = \"{{upstream}}\"\n",
        receiver.url
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_spans_reach_the_otlp_receiver_in_a_trusted_proxy_s_trace() {
    let receiver = Receiver::start().await;
    let gate = Gate::start_with(
        r#"trusted_proxies = ["127.0.0.1/32"]"#,
        &traced_site(&receiver),
    )
    .await;
    let mut jar = Jar::default();
    let traceparent = format!("00-{TRACE_ID}-{CLIENT_SPAN}-01");
    let response = gate
        .send(
            reqwest::Method::GET,
            "/page",
            &mut jar,
            JSON,
            &[("traceparent", &traceparent)],
        )
        .await;
    let request_id = response.headers()["x-request-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let echo = echoed(response).await.expect("proxied");
    let forwarded = echo["headers"]["traceparent"].as_str().unwrap().to_owned();
    // Same trace; the node's span is the upstream's parent.
    assert_eq!(&forwarded[3..35], TRACE_ID, "{forwarded}");
    let node_span = &forwarded[36..52];
    assert_ne!(node_span, CLIENT_SPAN);

    let span = receiver.span_in(TRACE_ID, &gate).await;
    assert_eq!(span["spanId"], node_span, "{span}");
    assert_eq!(span["parentSpanId"], CLIENT_SPAN, "{span}");
    let attributes = span["attributes"].to_string();
    assert!(attributes.contains(&request_id), "{span}");
    assert!(attributes.contains("http.response.status_code"), "{span}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_client_cannot_switch_off_its_span_or_choose_its_trace() {
    let receiver = Receiver::start().await;
    let gate = Gate::start(&traced_site(&receiver)).await;
    let mut jar = Jar::default();
    // "Not sampled": believed, it would keep the request's span out of the export.
    let traceparent = format!("00-{TRACE_ID}-{CLIENT_SPAN}-00");
    let response = gate
        .send(
            reqwest::Method::GET,
            "/page",
            &mut jar,
            JSON,
            &[("traceparent", &traceparent), ("tracestate", "vendor=abc")],
        )
        .await;
    let echo = echoed(response).await.expect("proxied");
    let forwarded = echo["headers"]["traceparent"].as_str().unwrap().to_owned();
    let node_trace = &forwarded[3..35];
    assert_ne!(node_trace, TRACE_ID, "{forwarded}");
    assert!(
        forwarded.ends_with("-01"),
        "the node sampled it: {forwarded}"
    );
    assert!(echo["headers"].get("tracestate").is_none(), "{echo}");

    let span = receiver.span_in(node_trace, &gate).await;
    assert_eq!(span["spanId"], &forwarded[36..52], "{span}");
    assert!(
        span.get("parentSpanId")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty),
        "a root span: {span}"
    );
}
