//! Event streams over real sockets (SPEC §6.2): a connection whose first request opens a stream
//! is served by the server loop's own small HTTP/1.1 handler, not hyper. These tests speak raw
//! HTTP/1.1 to `anteroom_edge::serve` on a loopback port and check what a client sees: the
//! head, the chunked events, the admission, the 503 at the stream limit, the node noticing a
//! client that left, malformed heads, and the streams ending at shutdown.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use http::{Method, Request, StatusCode};
use http_body_util::BodyExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tower::ServiceExt;

use anteroom_api::{AppState, NodeOptions, PublicSettings, public_router};
use anteroom_core::config::SseLimits;
use anteroom_core::engine::{Entry, JoinRequest, SessionEnd};
use anteroom_core::room::RoomConfig;
use anteroom_core::{Clock, ManualClock, RoomId, Timestamp};
use anteroom_store::{MemoryStore, RoomStore};
use anteroom_token::{KeySet, SigningAlgorithm};

const START: Timestamp = Timestamp(1_700_000_000_000);

/// How long any one step may take before the test fails.
const PATIENCE: Duration = Duration::from_secs(5);

/// A node serving the public router on a loopback port, with one room that lets one visitor
/// in at a time.
struct Node {
    state: AppState,
    store: Arc<dyn RoomStore>,
    room: RoomId,
    address: std::net::SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    served: tokio::task::JoinHandle<std::io::Result<()>>,
    _keys: tempfile::TempDir,
}

impl Node {
    async fn start(max_sse_connections: usize) -> Node {
        let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(START));
        let store: Arc<dyn RoomStore> = Arc::new(MemoryStore::new(clock.clone()));
        let room = RoomId::new("shop").unwrap();
        let mut config = RoomConfig::with_defaults(room.clone());
        config.max_active = 1;
        store.put_room(config).await.unwrap();
        let keys_dir = tempfile::tempdir().unwrap();
        let keys =
            KeySet::load_or_generate(keys_dir.path(), SigningAlgorithm::EdDsa, START.as_secs())
                .unwrap();
        let settings = PublicSettings {
            public_url: "http://127.0.0.1".to_owned(),
            issuer: "http://127.0.0.1".to_owned(),
            service_keys: Vec::new(),
            trusted_proxies: Vec::new(),
        };
        let options = NodeOptions {
            sse: SseLimits {
                max_streams: max_sse_connections,
                ..SseLimits::default()
            },
            ..NodeOptions::default()
        };
        let state = AppState::with_options(store.clone(), keys, clock, settings, options);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let served = tokio::spawn(anteroom_edge::serve(
            listener,
            public_router(state.clone()),
            async move {
                let _ = stopped.await;
            },
        ));
        Node {
            state,
            store,
            room,
            address,
            stop: Some(stop),
            served,
            _keys: keys_dir,
        }
    }

    /// Joins through the router; the ticket token of the visitor.
    async fn join(&self) -> (String, serde_json::Value) {
        let request = Request::builder()
            .method(Method::POST)
            .uri("/_anteroom/v1/rooms/shop/join")
            .body(Body::empty())
            .unwrap();
        let response = public_router(self.state.clone())
            .oneshot(request)
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let body = response.into_body().collect().await.unwrap().to_bytes();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        (body["ticket"].as_str().unwrap().to_owned(), body)
    }

    /// Takes the room's one slot; the session to end to let the next visitor in.
    async fn fill(&self) -> anteroom_core::SessionId {
        match self
            .store
            .join(&self.room, JoinRequest::default())
            .await
            .unwrap()
        {
            Entry::Admitted(admitted) => admitted.session.id,
            Entry::Waiting(_) => panic!("an empty room admits at once"),
        }
    }

    /// Ends `session` (the next visitor is admitted) and refreshes the node's room view, as the
    /// ticker does.
    async fn let_next_in(&self, session: anteroom_core::SessionId) {
        self.store
            .end_session(&self.room, session, SessionEnd::Completed)
            .await
            .unwrap();
        self.store.tick(&self.room).await.unwrap();
        self.state.hub().refresh(&*self.store, &self.room).await;
    }

    async fn connect(&self) -> TcpStream {
        TcpStream::connect(self.address).await.unwrap()
    }

    /// Opens a stream for `ticket` with the request sent in one write.
    async fn open_stream(&self, ticket: &str) -> TcpStream {
        let mut stream = self.connect().await;
        stream
            .write_all(stream_request(ticket).as_bytes())
            .await
            .unwrap();
        stream
    }

    async fn wait_for_connections(&self, expected: usize) {
        let started = Instant::now();
        while self.state.hub().connections() != expected {
            assert!(
                started.elapsed() < PATIENCE,
                "{} streams open, expected {expected}",
                self.state.hub().connections()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

fn stream_request(ticket: &str) -> String {
    format!(
        "GET /_anteroom/v1/rooms/shop/events HTTP/1.1\r\nHost: shop.example\r\n\
         Accept: text/event-stream\r\nX-Anteroom-Ticket: {ticket}\r\n\r\n"
    )
}

/// Reads until `needle` has arrived (or the connection closed), within [`PATIENCE`].
async fn read_until(stream: &mut TcpStream, received: &mut Vec<u8>, needle: &str) {
    let deadline = Instant::now() + PATIENCE;
    while !String::from_utf8_lossy(received).contains(needle) {
        let mut buffer = [0u8; 4096];
        let read = tokio::time::timeout_at(deadline.into(), stream.read(&mut buffer))
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "no {needle:?} within {PATIENCE:?}; got:\n{}",
                    String::from_utf8_lossy(received)
                )
            })
            .unwrap();
        assert_ne!(
            read,
            0,
            "closed before {needle:?}; got:\n{}",
            String::from_utf8_lossy(received)
        );
        received.extend_from_slice(&buffer[..read]);
    }
}

/// Reads until the server closes the connection, within [`PATIENCE`].
async fn read_to_close(stream: &mut TcpStream, received: &mut Vec<u8>) {
    tokio::time::timeout(PATIENCE, stream.read_to_end(received))
        .await
        .expect("the server closes the connection")
        .unwrap();
}

/// The head of an answer, lower-cased, and what follows it.
fn split_head(received: &[u8]) -> (String, String) {
    let text = String::from_utf8_lossy(received);
    let (head, rest) = text.split_once("\r\n\r\n").unwrap();
    (head.to_ascii_lowercase(), rest.to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_tells_the_place_then_the_admission_and_closes() {
    let node = Node::start(10).await;
    let first = node.fill().await;
    let (ticket, joined) = node.join().await;
    assert_eq!(joined["state"], "waiting");

    let mut stream = node.open_stream(&ticket).await;
    let mut received = Vec::new();
    read_until(&mut stream, &mut received, "event: status").await;
    read_until(&mut stream, &mut received, "\n\n\r\n").await;
    let (head, body) = split_head(&received);
    assert!(head.starts_with("http/1.1 200 ok\r\n"), "{head}");
    for field in [
        "content-type: text/event-stream",
        "cache-control: no-cache",
        "x-accel-buffering: no",
        "transfer-encoding: chunked",
        "connection: close",
    ] {
        assert!(head.contains(field), "no {field:?} in\n{head}");
    }
    assert!(!head.contains("content-length"), "{head}");
    // One chunk: its size in hex, then the event with the reconnection delay.
    let (size, event) = body.split_once("\r\n").unwrap();
    let size = usize::from_str_radix(size, 16).unwrap();
    assert_eq!(&event[size..size + 2], "\r\n", "the chunk is {size} bytes");
    assert!(event.contains("retry: 3000"), "{event}");
    assert!(
        event.contains(&format!("\"ticket\":\"{ticket}\"")),
        "{event}"
    );
    assert!(event.contains("\"ahead\":0"), "{event}");
    node.wait_for_connections(1).await;

    node.let_next_in(first).await;
    let mut rest = Vec::new();
    read_to_close(&mut stream, &mut rest).await;
    let rest = String::from_utf8_lossy(&rest);
    assert!(rest.contains("event: admitted"), "{rest}");
    assert!(rest.contains("\"pass\":\""), "{rest}");
    assert!(rest.ends_with("\r\n0\r\n\r\n"), "the body ends: {rest:?}");
    node.wait_for_connections(0).await;
}

/// Before the room has admitted anybody through its admitter, the stream's estimate comes from
/// the configured pace (one slot turning over every 10 min session lifetime) and says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_estimates_from_the_configured_pace_before_anything_is_measured() {
    let node = Node::start(10).await;
    node.fill().await;
    node.join().await;
    let (ticket, joined) = node.join().await;
    assert_eq!(joined["ahead"], 1);
    assert_eq!(joined["eta_seconds"], 600, "{joined}");
    assert_eq!(joined["eta_basis"], "configured", "{joined}");

    let mut stream = node.open_stream(&ticket).await;
    let mut received = Vec::new();
    read_until(&mut stream, &mut received, "event: status").await;
    read_until(&mut stream, &mut received, "\n\n\r\n").await;
    let (_, body) = split_head(&received);
    assert!(body.contains("\"eta_seconds\":600"), "{body}");
    assert!(body.contains("\"eta_basis\":\"configured\""), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_lets_go_of_a_stream_whose_client_left() {
    let node = Node::start(10).await;
    node.fill().await;
    let (ticket, _) = node.join().await;
    let mut stream = node.open_stream(&ticket).await;
    let mut received = Vec::new();
    read_until(&mut stream, &mut received, "event: status").await;
    node.wait_for_connections(1).await;
    drop(stream);
    node.wait_for_connections(0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_stream_limit_the_answer_is_503_with_retry_after() {
    let node = Node::start(1).await;
    node.fill().await;
    let (first, _) = node.join().await;
    let (second, _) = node.join().await;
    let mut open = node.open_stream(&first).await;
    read_until(&mut open, &mut Vec::new(), "event: status").await;

    let mut refused = node.open_stream(&second).await;
    let mut received = Vec::new();
    read_to_close(&mut refused, &mut received).await;
    let (head, body) = split_head(&received);
    assert!(
        head.starts_with("http/1.1 503 service unavailable\r\n"),
        "{head}"
    );
    assert!(head.contains("retry-after: 5"), "{head}");
    assert!(
        head.contains("content-type: application/problem+json"),
        "{head}"
    );
    assert!(
        head.contains(&format!("content-length: {}", body.len())),
        "{head}"
    );
    let problem: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(problem["code"], "too_many_connections");
    assert_eq!(node.state.hub().connections(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_heads_are_refused_and_a_bad_ticket_is_a_problem() {
    let node = Node::start(10).await;
    let mut stream = node.connect().await;
    stream
        .write_all(b"GET /_anteroom/v1/rooms/shop/events HTTP/1.1\r\nno colon here\r\n\r\n")
        .await
        .unwrap();
    let mut received = Vec::new();
    read_to_close(&mut stream, &mut received).await;
    let (head, _) = split_head(&received);
    assert!(head.starts_with("http/1.1 400 bad request\r\n"), "{head}");

    let mut stream = node.connect().await;
    let cookie = "c".repeat(20 * 1024);
    stream
        .write_all(
            format!("GET /_anteroom/v1/rooms/shop/events HTTP/1.1\r\nCookie: {cookie}\r\n\r\n")
                .as_bytes(),
        )
        .await
        .unwrap();
    let mut received = Vec::new();
    read_to_close(&mut stream, &mut received).await;
    let (head, _) = split_head(&received);
    assert!(head.starts_with("http/1.1 431 "), "{head}");

    let mut stream = node.open_stream("not-a-ticket").await;
    let mut received = Vec::new();
    read_to_close(&mut stream, &mut received).await;
    let (head, body) = split_head(&received);
    assert!(head.starts_with("http/1.1 400 bad request\r\n"), "{head}");
    let problem: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(problem["code"], "ticket_invalid", "{problem}");
    assert_eq!(node.state.hub().connections(), 0);
}

/// A stream request whose first segment is too short to tell what it is goes to hyper, which
/// serves it like any other request (keep-alive, no `connection: close`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_asked_for_in_pieces_is_served_by_hyper() {
    let node = Node::start(10).await;
    node.fill().await;
    let (ticket, _) = node.join().await;
    let request = stream_request(&ticket);
    let mut stream = node.connect().await;
    stream.write_all(&request.as_bytes()[..20]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    stream.write_all(&request.as_bytes()[20..]).await.unwrap();
    let mut received = Vec::new();
    read_until(&mut stream, &mut received, "event: status").await;
    let (head, _) = split_head(&received);
    assert!(head.starts_with("http/1.1 200 ok\r\n"), "{head}");
    assert!(head.contains("content-type: text/event-stream"), "{head}");
    assert!(!head.contains("connection: close"), "{head}");
    node.wait_for_connections(1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_open_streams_without_waiting_for_the_drain_timeout() {
    let mut node = Node::start(10).await;
    node.fill().await;
    let (ticket, _) = node.join().await;
    let mut stream = node.open_stream(&ticket).await;
    let mut received = Vec::new();
    read_until(&mut stream, &mut received, "event: status").await;

    let stopping = Instant::now();
    node.stop.take().unwrap().send(()).unwrap();
    read_to_close(&mut stream, &mut received).await;
    let text = String::from_utf8_lossy(&received);
    assert!(text.ends_with("\r\n0\r\n\r\n"), "the body ends: {text:?}");
    tokio::time::timeout(PATIENCE, &mut node.served)
        .await
        .expect("serve returns")
        .unwrap()
        .unwrap();
    assert!(
        stopping.elapsed() < PATIENCE,
        "stopped after {:?}",
        stopping.elapsed()
    );
}
