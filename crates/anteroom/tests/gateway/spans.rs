//! Span export (SPEC §14.6): the real binary with `[tracing] otlp_endpoint` sends its request
//! spans to an OTLP/HTTP receiver started here, in the client's trace, and tells the upstream
//! its span as the parent.

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_spans_reach_the_otlp_receiver_in_the_clients_trace() {
    let receiver = Receiver::start().await;
    let config = format!(
        "[tracing]\notlp_endpoint = \"{}\"\n\n[upstream]\nurl = \"{{upstream}}\"\n",
        receiver.url
    );
    let gate = Gate::start(&config).await;
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

    // The batch goes out within the SDK's schedule (5 s).
    let started = Instant::now();
    let span = loop {
        let found = receiver
            .spans()
            .into_iter()
            .find(|span| span["traceId"] == TRACE_ID);
        if let Some(span) = found {
            break span;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no span received; log:\n{}",
            gate.server.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(span["spanId"], node_span, "{span}");
    assert_eq!(span["parentSpanId"], CLIENT_SPAN, "{span}");
    let attributes = span["attributes"].to_string();
    assert!(attributes.contains(&request_id), "{span}");
    assert!(attributes.contains("http.response.status_code"), "{span}");
}
