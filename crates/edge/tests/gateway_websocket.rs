//! WebSocket message limits through the gateway (SPEC §10.4), over real sockets: a client
//! flooding 1,000 messages a second through a 20-a-second limit gets about 20 a second to the
//! upstream, the rest dropped and counted; a well-behaved client on another connection loses
//! nothing; with `on_exceed = "close"` the flood ends with 1008; a reload's limits apply to
//! connections opened after it. A socket on a protected route lives no longer than its pass: a
//! revocation, a session ended in the store or a room reset closes it with 1008, and it
//! follows the pass the visitor's requests renew, ending with the session when they stop. A
//! socket let through without a pass by a store outage ends once the store answers again.
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Query, State};
use axum::response::Response;
use futures_util::{SinkExt, StreamExt};
use parking_lot::Mutex;
use tokio_tungstenite::tungstenite;

use anteroom_api::{AppState, PublicSettings};
use anteroom_core::config::{OnExceed, UpstreamConfig, WebSocketConfig};
use anteroom_core::engine::SessionEnd;
use anteroom_core::ratelimit::Algorithm;
use anteroom_core::ratelimit::rules::default_params;
use anteroom_core::room::{Mode, RoomConfig};
use anteroom_core::{Clock, ManualClock, RoomId, SessionId, Timestamp};
use anteroom_edge::{Gateway, GatewayOptions, GatewayReload};
use anteroom_store::{MemoryStore, RedisConfig, RedisStore, RoomStore};
use anteroom_test_support::redis::{RedisServer, unique_prefix};
use anteroom_token::{KeySet, SigningAlgorithm};

/// Messages the upstream received, per connection id.
type Received = Arc<Mutex<HashMap<String, u64>>>;

#[derive(serde::Deserialize)]
struct Id {
    id: String,
}

async fn upstream_socket(
    upgrade: WebSocketUpgrade,
    Query(Id { id }): Query<Id>,
    State(received): State<Received>,
) -> Response {
    upgrade.on_upgrade(move |mut socket: WebSocket| async move {
        while let Some(Ok(message)) = socket.recv().await {
            if matches!(message, Message::Text(_) | Message::Binary(_)) {
                *received.lock().entry(id.clone()).or_default() += 1;
            }
        }
    })
}

/// A site refusing a socket: 401 with a challenge, a streamed (chunked) body, and
/// `Anteroom-Release`.
async fn refused_socket() -> Response {
    let chunks = futures_util::stream::iter(["{\"error\":", "\"sign in\"}"])
        .map(|chunk| Ok::<_, std::io::Error>(axum::body::Bytes::from(chunk)));
    Response::builder()
        .status(401)
        .header("www-authenticate", "Bearer")
        .header("anteroom-release", "1")
        .header("content-type", "application/json")
        .body(axum::body::Body::from_stream(chunks))
        .unwrap()
}

/// The upstream, and a gateway in front of it; the gateway's address and its `[upstream]`.
async fn start(
    websocket: WebSocketConfig,
) -> (Gateway, Received, std::net::SocketAddr, UpstreamConfig) {
    let started = start_with(websocket, Vec::new()).await;
    (
        started.gateway,
        started.received,
        started.addr,
        started.upstream,
    )
}

/// What [`start_with`] started.
struct Started {
    gateway: Gateway,
    received: Received,
    addr: std::net::SocketAddr,
    upstream: UpstreamConfig,
    store: Arc<dyn RoomStore>,
    clock: Arc<ManualClock>,
    state: AppState,
}

/// [`start`] with `rooms` in the store, each protecting the routes its `routes` names.
async fn start_with(websocket: WebSocketConfig, rooms: Vec<RoomConfig>) -> Started {
    start_on(websocket, rooms, |clock| Arc::new(MemoryStore::new(clock))).await
}

/// [`start_with`] on the store `open` opens on the node's clock.
async fn start_on(
    websocket: WebSocketConfig,
    rooms: Vec<RoomConfig>,
    open: impl FnOnce(Arc<dyn Clock>) -> Arc<dyn RoomStore>,
) -> Started {
    let received = Received::default();
    let app = axum::Router::new()
        .route("/socket", axum::routing::get(upstream_socket))
        .route("/refused", axum::routing::get(refused_socket))
        .with_state(received.clone());
    let upstream = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream_addr = upstream.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(upstream, app).await });

    let manual_clock = Arc::new(ManualClock::new(Timestamp(1_700_000_000_000)));
    let clock: Arc<dyn Clock> = manual_clock.clone();
    let keys_dir = tempfile::tempdir().unwrap();
    let keys =
        KeySet::load_or_generate(keys_dir.path(), SigningAlgorithm::EdDsa, 1_700_000_000).unwrap();
    let store = open(clock.clone());
    for room in &rooms {
        store.put_room(room.clone()).await.unwrap();
    }
    let settings = PublicSettings {
        public_url: "http://127.0.0.1".to_owned(),
        issuer: "http://127.0.0.1".to_owned(),
        service_keys: Vec::new(),
        trusted_proxies: Vec::new(),
    };
    let state = AppState::new(store.clone(), keys, clock, settings);
    let upstream_config = UpstreamConfig::new(format!("http://{upstream_addr}"));
    let gateway = Gateway::new(
        state.clone(),
        GatewayOptions {
            upstream: Some(upstream_config.clone()),
            websocket: Some(websocket),
            rooms,
            ..GatewayOptions::default()
        },
    );
    let router = anteroom_edge::gateway_router(state.clone(), &gateway);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(anteroom_edge::serve(
        listener,
        router,
        std::future::pending(),
    ));
    std::mem::forget(keys_dir);
    Started {
        gateway,
        received,
        addr,
        upstream: upstream_config,
        store,
        clock: manual_clock,
        state,
    }
}

fn twenty_a_second(on_exceed: OnExceed) -> WebSocketConfig {
    WebSocketConfig {
        limit: Some(default_params(
            Algorithm::TokenBucket,
            20,
            Duration::from_secs(1),
        )),
        on_exceed,
        ..WebSocketConfig::default()
    }
}

/// Sends `count` text messages on connection `id`, one every `every`; the close code the
/// gateway sent, if it closed the connection.
async fn send(addr: std::net::SocketAddr, id: &str, count: u32, every: Duration) -> Option<u16> {
    let url = format!("ws://{addr}/socket?id={id}");
    let (socket, _) = tokio_tungstenite::connect_async(url).await.unwrap();
    let (mut sink, stream) = socket.split();
    let closed = tokio::spawn(close_code(stream));
    let mut ticks = tokio::time::interval(every);
    for n in 0..count {
        ticks.tick().await;
        if sink
            .send(tungstenite::Message::Text(format!("message {n}").into()))
            .await
            .is_err()
        {
            break;
        }
    }
    // Let what was sent arrive before closing.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let _ = sink.send(tungstenite::Message::Close(None)).await;
    tokio::time::timeout(Duration::from_secs(5), closed)
        .await
        .ok()
        .and_then(Result::ok)
        .flatten()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_is_cut_to_the_limit_and_a_polite_client_is_unaffected() {
    let (gateway, received, addr, _) = start(twenty_a_second(OnExceed::Drop)).await;
    // Three seconds: the flood sends 3,000 messages, the polite client 30.
    let started = std::time::Instant::now();
    let flood = async {
        send(addr, "flood", 3_000, Duration::from_millis(1)).await;
        started.elapsed()
    };
    let polite = send(addr, "polite", 30, Duration::from_millis(100));
    let (flood_lasted, _) = tokio::join!(flood, polite);
    tokio::time::sleep(Duration::from_millis(200)).await;

    let received = received.lock().clone();
    let flooded = received.get("flood").copied().unwrap_or(0);
    let stats = gateway.websocket_stats().snapshot();
    // 20 at once (the burst), then 20 a second while the flood lasts (about 3 s, longer on
    // a busy machine; the last 300 ms are the wait before closing).
    let expected = 20.0 + 20.0 * flood_lasted.as_secs_f64();
    eprintln!(
        "flood delivered {flooded} of 3000 in {flood_lasted:?} (about {expected:.0} expected), dropped {}",
        stats.dropped
    );
    assert!(
        (flooded as f64 - expected).abs() <= 20.0,
        "the flood delivered {flooded}, expected about {expected:.0}"
    );
    assert_eq!(
        received.get("polite"),
        Some(&30),
        "the polite client lost nothing"
    );
    assert_eq!(
        stats.dropped + flooded,
        3_000,
        "every message forwarded or dropped: {stats:?}"
    );
    assert_eq!(stats.forwarded, flooded + 30);
    assert_eq!(stats.connections, 2);
    assert_eq!(stats.closed_over_limit, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_exceed_close_ends_the_connection_with_1008() {
    let (gateway, received, addr, _) = start(twenty_a_second(OnExceed::Close)).await;
    let code = send(addr, "flood", 200, Duration::from_millis(1)).await;
    assert_eq!(code, Some(1008));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        received.lock().get("flood"),
        Some(&20),
        "the burst went through"
    );
    assert_eq!(gateway.websocket_stats().snapshot().closed_over_limit, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_limits_connections_opened_after_it() {
    let (gateway, received, addr, upstream) = start(WebSocketConfig::default()).await;
    assert_eq!(
        send(addr, "before", 200, Duration::from_millis(1)).await,
        None
    );
    let reloaded = gateway
        .reload(GatewayReload {
            upstream: Some(upstream),
            websocket: Some(twenty_a_second(OnExceed::Close)),
            ..GatewayReload::default()
        })
        .unwrap();
    assert!(!reloaded.upstream_changed && !reloaded.upstream_needs_restart);
    assert_eq!(
        send(addr, "after", 200, Duration::from_millis(1)).await,
        Some(1008)
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    let received = received.lock().clone();
    assert_eq!(received.get("before"), Some(&200), "no limit before");
    assert_eq!(received.get("after"), Some(&20), "the burst, then closed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handshake_the_site_refuses_gets_the_site_s_answer_not_a_502() {
    let (gateway, _received, addr, _) = start(WebSocketConfig::default()).await;
    // The site has no socket at `/nothing`: it answers the handshake 404.
    let refused = tokio_tungstenite::connect_async(format!("ws://{addr}/nothing")).await;
    match refused {
        Err(tungstenite::Error::Http(answer)) => {
            assert_eq!(answer.status(), 404, "{answer:?}");
        }
        other => panic!("the site's 404 expected: {other:?}"),
    }
    // A refusal whose body is streamed: the status and the challenge reach the visitor, the
    // body the handshake did not read whole does not (nor its chunks as if they were the
    // body), and `Anteroom-Release` is acted on and kept from the visitor.
    match tokio_tungstenite::connect_async(format!("ws://{addr}/refused")).await {
        Err(tungstenite::Error::Http(answer)) => {
            assert_eq!(answer.status(), 401, "{answer:?}");
            assert_eq!(answer.headers()["www-authenticate"], "Bearer");
            assert!(
                answer.headers().get("anteroom-release").is_none(),
                "{answer:?}"
            );
            assert!(
                answer.headers().get("transfer-encoding").is_none(),
                "{answer:?}"
            );
            assert!(answer.headers().get("content-type").is_none(), "{answer:?}");
            let body = answer.body().clone().unwrap_or_default();
            assert!(body.is_empty(), "{:?}", String::from_utf8_lossy(&body));
        }
        other => panic!("the site's 401 expected: {other:?}"),
    }
    // The site's own answers are measured as the site's: no 5xx for adaptive admission to
    // read (a visitor asking for sockets the site does not have would otherwise slow the
    // room's admissions).
    let routes = gateway.route_stats();
    let stats: Vec<_> = routes.iter().map(|route| route.snapshot()).collect();
    assert_eq!(
        stats.iter().map(|route| route.responses).sum::<u64>(),
        2,
        "{stats:?}"
    );
    assert!(
        stats.iter().all(|route| route.server_errors == 0),
        "{stats:?}"
    );
}

/// `launch`, protecting `/socket`: sessions of a minute.
fn launch() -> RoomConfig {
    RoomConfig {
        routes: vec!["/socket".to_owned()],
        session_ttl: Duration::from_secs(60),
        ..RoomConfig::with_defaults(RoomId::new("launch").unwrap())
    }
}

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// The `launch` pass a `Set-Cookie` line sets, if it is one.
fn launch_pass(set_cookie: &str) -> Option<String> {
    let value = set_cookie.strip_prefix("anteroom_p_launch=")?;
    value.split(';').next().map(str::to_owned)
}

/// The session a pass names.
fn session_of(pass: &str) -> SessionId {
    anteroom_test_support::jwt::subject(pass).parse().unwrap()
}

/// A gateway with `launch`, and a socket through it admitted on its handshake: what was
/// started, the room, the socket and its pass.
async fn launch_and_a_socket() -> (Started, RoomId, Socket, String) {
    let started = start_with(WebSocketConfig::default(), vec![launch()]).await;
    let (socket, pass) = admitted_socket(started.addr).await;
    (started, RoomId::new("launch").unwrap(), socket, pass)
}

/// A socket through the gateway to `/socket`, admitted into `launch` on its handshake: the
/// socket, and the pass its handshake's answer set.
async fn admitted_socket(addr: std::net::SocketAddr) -> (Socket, String) {
    let url = format!("ws://{addr}/socket?id=admitted");
    let (socket, answer) = tokio_tungstenite::connect_async(url).await.unwrap();
    let pass = answer
        .headers()
        .get_all("set-cookie")
        .iter()
        .find_map(|cookie| launch_pass(cookie.to_str().ok()?))
        .expect("the handshake's answer admits with a pass");
    (socket, pass)
}

/// A plain request to `/socket` carrying `pass`, as the visitor's page would make beside its
/// socket: the pass it renewed the session with, if it did.
async fn request_with(addr: std::net::SocketAddr, pass: &str) -> Option<String> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "GET /socket HTTP/1.1\r\nHost: shop\r\nCookie: anteroom_p_launch={pass}\r\n\
         Connection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut answer))
        .await
        .unwrap()
        .unwrap();
    let answer = String::from_utf8_lossy(&answer).into_owned();
    assert!(!answer.starts_with("HTTP/1.1 429"), "let through: {answer}");
    answer.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.eq_ignore_ascii_case("set-cookie")
            .then(|| launch_pass(value.trim()))
            .flatten()
    })
}

/// A plain request to `/socket` without a pass, as another visitor's page would make.
async fn request_without_pass(addr: std::net::SocketAddr) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let Ok(mut stream) = tokio::net::TcpStream::connect(addr).await else {
        return;
    };
    let request = b"GET /socket HTTP/1.1\r\nHost: shop\r\nConnection: close\r\n\r\n";
    if stream.write_all(request).await.is_ok() {
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer).await;
    }
}

/// Reads `socket` until the gateway closes it, for at most `within`: the close code, or
/// `None` when it stayed open (messages are answered as they come; nothing is sent).
async fn closed_within(socket: &mut Socket, within: Duration) -> Option<u16> {
    tokio::time::timeout(within, close_code(socket))
        .await
        .ok()
        .flatten()
}

/// Reads `messages` until the connection closes: the close code the gateway sent, if any.
async fn close_code(
    mut messages: impl futures_util::Stream<Item = Result<tungstenite::Message, tungstenite::Error>>
    + Unpin,
) -> Option<u16> {
    while let Some(message) = messages.next().await {
        match message {
            Ok(tungstenite::Message::Close(frame)) => {
                return frame.map(|frame| u16::from(frame.code));
            }
            Ok(_) => {}
            Err(_) => return None,
        }
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_socket_is_closed_within_a_second_or_two_of_a_revocation() {
    let (started, _room, mut socket, pass) = launch_and_a_socket().await;
    assert_eq!(
        closed_within(&mut socket, Duration::from_millis(2_500)).await,
        None,
        "a socket whose session is on stays open"
    );
    // Another node ended the session and said so (SPEC §8.2).
    started.state.revocations().record(session_of(&pass));
    assert_eq!(
        closed_within(&mut socket, Duration::from_secs(3)).await,
        Some(1008),
        "the revocation closes the socket"
    );
    let stats = started.gateway.websocket_stats().snapshot();
    assert_eq!(stats.closed_pass_ended, 1, "{stats:?}");
    assert_eq!(stats.closed_over_limit, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_ended_in_the_store_closes_its_socket_at_the_next_look() {
    let (started, room, mut socket, pass) = launch_and_a_socket().await;
    started
        .store
        .end_session(&room, session_of(&pass), SessionEnd::Completed)
        .await
        .unwrap();
    // Not announced: seen when the socket's session is next looked up in the store (every
    // ten seconds of the node's clock).
    started.clock.advance(Duration::from_secs(10));
    assert_eq!(
        closed_within(&mut socket, Duration::from_secs(3)).await,
        Some(1008)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_room_reset_closes_the_sockets_its_passes_let_through() {
    let (started, room, mut socket, _pass) = launch_and_a_socket().await;
    assert_eq!(
        closed_within(&mut socket, Duration::from_millis(1_500)).await,
        None
    );
    started.store.reset(&room, false).await.unwrap();
    // The gateway's copy of the room is at most a second old (of the node's clock), the pass
    // looked at every second.
    started.clock.advance(Duration::from_secs(1));
    assert_eq!(
        closed_within(&mut socket, Duration::from_secs(4)).await,
        Some(1008)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_socket_lives_while_its_visitor_s_requests_renew_the_session_on_any_node() {
    let (started, room, mut socket, pass) = launch_and_a_socket().await;
    // 40 s on (past half the minute's session), a request of the visitor's page renews the
    // session through this node: the socket holds the new pass.
    started.clock.advance(Duration::from_secs(40));
    let renewed = request_with(started.addr, &pass).await;
    assert!(renewed.is_some(), "renewed through this node");
    // 40 s later another node renews it (the store says so; this node heard nothing).
    started.clock.advance(Duration::from_secs(40));
    let (session, was_renewed) = started
        .store
        .renew_session(&room, session_of(&pass))
        .await
        .unwrap();
    assert!(was_renewed, "{session:?}");
    // Past the end of the pass this node issued (at 100 s) and its leeway: the socket is
    // open while the session runs (to 140 s).
    started.clock.advance(Duration::from_secs(59));
    assert_eq!(
        closed_within(&mut socket, Duration::from_millis(2_500)).await,
        None,
        "renewed on another node: the store says the session runs"
    );
    let snapshot = started.store.snapshot(&room).await.unwrap();
    assert_eq!(snapshot.active, 1, "the session still holds its slot");
    // Nothing renews it again: the socket renews nothing itself, and ends with the session,
    // as the visitor's cookie does.
    started.clock.advance(Duration::from_secs(2));
    assert_eq!(
        closed_within(&mut socket, Duration::from_secs(3)).await,
        Some(1008)
    );
}

/// A socket let through without a pass while its room's store could not be read
/// (`on_store_error = "open"`) lives no longer than the outage: once Redis answers again the
/// room decides, and the socket, which holds no place in it, is closed with 1008.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_socket_let_through_by_an_outage_ends_with_the_outage() {
    let redis = RedisServer::start();
    let url = redis.url();
    let full = RoomConfig {
        // Nobody is let in while the store answers.
        mode: Mode::QueueAll,
        ..launch()
    };
    let started = start_on(WebSocketConfig::default(), vec![full], |clock| {
        let config = RedisConfig::standalone(url)
            .with_key_prefix(unique_prefix())
            .with_timeout(Duration::from_millis(300));
        Arc::new(RedisStore::new(config, Some(clock)).unwrap())
    })
    .await;
    // The gateway reads the room once, then the store goes; the copy is stale past the time
    // a failing store is taken for busy rather than gone.
    request_without_pass(started.addr).await;
    let paused = redis.pause();
    started.clock.advance(Duration::from_secs(6));
    let url = format!("ws://{}/socket?id=outage", started.addr);
    let (mut socket, _answer) = tokio_tungstenite::connect_async(url)
        .await
        .expect("on_store_error = \"open\" lets the handshake through");
    // Other visitors' requests meanwhile: while one of them reads the room again (and waits
    // out the store's bound), the socket's check is given the copy from before the outage.
    let addr = started.addr;
    let traffic = tokio::spawn(async move {
        for _ in 0..50 {
            let _ = tokio::time::timeout(Duration::from_secs(1), request_without_pass(addr)).await;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    assert_eq!(
        closed_within(&mut socket, Duration::from_millis(2_500)).await,
        None,
        "the socket stays open while the outage lasts"
    );
    traffic.abort();
    RedisServer::resume(paused);
    started.clock.advance(Duration::from_secs(2));
    assert_eq!(
        closed_within(&mut socket, Duration::from_secs(4)).await,
        Some(1008),
        "the room decides again once its store answers"
    );
}
