//! HTTP/1 connections over real sockets, as `anteroom_edge::serve` serves them with its own
//! keep-alive loop: many requests on one connection (pipelined too), HTTP/1.0, `HEAD`,
//! streamed answers in chunks, malformed heads, idle connections at shutdown, and the requests
//! the loop hands to hyper (a large body, a chunked body) still answered on the same
//! connection. The framing checks and the timeouts (SPEC §14.4) run against both engines.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::ConnectInfo;
use axum::routing::{get, post};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use anteroom_core::config::{ConnectionLimits, HttpEngine};
use anteroom_edge::{PublicApp, ServerLimits};

/// `/big` answers this many 64 KiB pieces (64 MiB: more than any socket buffers hold).
const BIG_PIECES: usize = 1024;

const ENGINES: [HttpEngine; 2] = [HttpEngine::Own, HttpEngine::Hyper];

/// How long any one step may take before the test fails.
const PATIENCE: Duration = Duration::from_secs(5);

fn app() -> Router {
    Router::new()
        .route("/hello", get(|| async { "hello" }))
        .route("/echo", post(|body: Bytes| async move { body }))
        .route(
            "/peer",
            get(|ConnectInfo(peer): ConnectInfo<SocketAddr>| async move { peer.ip().to_string() }),
        )
        .route(
            "/stream",
            get(|| async {
                let pieces = ["one ", "two ", "three"]
                    .map(|piece| Ok::<_, std::convert::Infallible>(Bytes::from(piece)));
                Body::from_stream(futures_util::stream::iter(pieces))
            }),
        )
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_millis(500)).await;
                "slow"
            }),
        )
        .route(
            "/big",
            get(|| async {
                let piece = Bytes::from(vec![b'x'; 64 * 1024]);
                let pieces =
                    std::iter::repeat_n(piece, BIG_PIECES).map(Ok::<_, std::convert::Infallible>);
                Body::from_stream(futures_util::stream::iter(pieces))
            }),
        )
        // Bodies as large as the tests send.
        .layer(axum::extract::DefaultBodyLimit::max(1 << 20))
}

struct Server {
    address: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    served: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Server {
    async fn start() -> Server {
        Server::start_with(HttpEngine::Own, ConnectionLimits::default()).await
    }

    async fn start_with(engine: HttpEngine, limits: ConnectionLimits) -> Server {
        Server::start_limited(engine, ServerLimits::new(limits, 1 << 20, Vec::new())).await
    }

    async fn start_limited(engine: HttpEngine, limits: ServerLimits) -> Server {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let app = PublicApp::from(app())
            .with_engine(engine)
            .with_limits(limits);
        let served = tokio::spawn(anteroom_edge::serve(listener, app, async move {
            let _ = stopped.await;
        }));
        Server {
            address,
            stop: Some(stop),
            served,
        }
    }

    async fn connect(&self) -> TcpStream {
        TcpStream::connect(self.address).await.unwrap()
    }

    async fn client(&self) -> Client {
        Client {
            stream: self.connect().await,
            reader: Reader::new(),
        }
    }
}

/// A connection and what was read from it.
struct Client {
    stream: TcpStream,
    reader: Reader,
}

impl Client {
    async fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.unwrap();
    }

    /// The next answer; `head_only` for the answer to a `HEAD`.
    async fn answer(&mut self, head_only: bool) -> Answer {
        self.reader.answer(&mut self.stream, head_only).await
    }

    /// Whether the server closed the connection (with nothing more to read).
    async fn closed(&mut self) -> bool {
        self.reader.closed(&mut self.stream).await
    }
}

/// One answer as read off the wire.
#[derive(Debug)]
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(found, _)| found.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }
}

/// Reads whole answers from a connection, keeping what follows for the next.
struct Reader {
    buffer: Vec<u8>,
}

impl Reader {
    fn new() -> Reader {
        Reader { buffer: Vec::new() }
    }

    async fn more(&mut self, stream: &mut TcpStream) -> usize {
        let mut chunk = [0u8; 4096];
        let read = tokio::time::timeout(PATIENCE, stream.read(&mut chunk))
            .await
            .unwrap()
            .unwrap();
        self.buffer.extend_from_slice(&chunk[..read]);
        read
    }

    /// The next answer; `head_only` for the answer to a `HEAD`.
    async fn answer(&mut self, stream: &mut TcpStream, head_only: bool) -> Answer {
        let (status, headers, length) = loop {
            let mut fields = [httparse::EMPTY_HEADER; 32];
            let mut head = httparse::Response::new(&mut fields);
            if let httparse::Status::Complete(length) = head.parse(&self.buffer).unwrap() {
                let headers = head
                    .headers
                    .iter()
                    .map(|field| {
                        (
                            field.name.to_owned(),
                            String::from_utf8(field.value.to_vec()).unwrap(),
                        )
                    })
                    .collect::<Vec<_>>();
                break (head.code.unwrap(), headers, length);
            }
            assert!(self.more(stream).await > 0, "closed before a whole head");
        };
        self.buffer.drain(..length);
        let mut answer = Answer {
            status,
            headers,
            body: Vec::new(),
        };
        if head_only {
            return answer;
        }
        if answer.header("transfer-encoding") == Some("chunked") {
            loop {
                let Some(end) = self.buffer.windows(2).position(|pair| pair == b"\r\n") else {
                    assert!(self.more(stream).await > 0, "closed inside a chunk size");
                    continue;
                };
                let size =
                    usize::from_str_radix(std::str::from_utf8(&self.buffer[..end]).unwrap(), 16)
                        .unwrap();
                while self.buffer.len() < end + 2 + size + 2 {
                    assert!(self.more(stream).await > 0, "closed inside a chunk");
                }
                answer
                    .body
                    .extend_from_slice(&self.buffer[end + 2..end + 2 + size]);
                self.buffer.drain(..end + 2 + size + 2);
                if size == 0 {
                    return answer;
                }
            }
        }
        let length: usize = answer.header("content-length").unwrap().parse().unwrap();
        while self.buffer.len() < length {
            assert!(self.more(stream).await > 0, "closed inside a body");
        }
        answer.body = self.buffer.drain(..length).collect();
        answer
    }

    /// Whether the server closed the connection (with nothing more to read).
    async fn closed(&mut self, stream: &mut TcpStream) -> bool {
        self.more(stream).await == 0 && self.buffer.is_empty()
    }
}

#[tokio::test]
async fn many_requests_share_one_connection_pipelined_or_not() {
    let server = Server::start().await;
    let mut client = server.client().await;
    // Three requests in one write: answered in order.
    client
        .send(
            b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n\
              POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc\
              GET /peer HTTP/1.1\r\nHost: x\r\n\r\n",
        )
        .await;
    let hello = client.answer(false).await;
    assert_eq!((hello.status, &hello.body[..]), (200, &b"hello"[..]));
    assert!(
        hello
            .header("date")
            .is_some_and(|date| date.ends_with(" GMT"))
    );
    assert_eq!(hello.header("connection"), None);
    let echo = client.answer(false).await;
    assert_eq!((echo.status, &echo.body[..]), (200, &b"abc"[..]));
    let peer = client.answer(false).await;
    assert_eq!(peer.body, b"127.0.0.1");
    // Then one at a time, and the last one asks to close.
    for _ in 0..3 {
        client.send(b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n").await;
        assert_eq!(client.answer(false).await.body, b"hello");
    }
    client
        .send(b"GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await;
    let last = client.answer(false).await;
    assert_eq!(last.header("connection"), Some("close"));
    assert!(client.closed().await);
}

#[tokio::test]
async fn http_1_0_closes_unless_asked_to_keep_alive() {
    let server = Server::start().await;
    let mut client = server.client().await;
    client
        .send(b"GET /hello HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        .await;
    let kept = client.answer(false).await;
    assert_eq!(kept.header("connection"), Some("keep-alive"));
    client.send(b"GET /hello HTTP/1.0\r\n\r\n").await;
    let last = client.answer(false).await;
    assert_eq!(last.body, b"hello");
    assert_eq!(last.header("connection"), Some("close"));
    assert!(client.closed().await);
}

#[tokio::test]
async fn head_answers_carry_no_body_and_the_connection_goes_on() {
    let server = Server::start().await;
    let mut client = server.client().await;
    client
        .send(b"HEAD /hello HTTP/1.1\r\nHost: x\r\n\r\nGET /hello HTTP/1.1\r\nHost: x\r\n\r\n")
        .await;
    let head = client.answer(true).await;
    assert_eq!(head.status, 200);
    assert_eq!(head.header("content-length"), Some("5"));
    // Had the HEAD answer carried a body, this would read it as the next head.
    assert_eq!(client.answer(false).await.body, b"hello");
}

#[tokio::test]
async fn an_answer_of_unknown_length_is_sent_in_chunks() {
    let server = Server::start().await;
    let mut client = server.client().await;
    client
        .send(b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
        .await;
    let streamed = client.answer(false).await;
    assert_eq!(streamed.header("transfer-encoding"), Some("chunked"));
    assert_eq!(streamed.body, b"one two three");
    // An HTTP/1.0 client gets the same body delimited by the end of the connection.
    let mut old = server.connect().await;
    old.write_all(b"GET /stream HTTP/1.0\r\n\r\n")
        .await
        .unwrap();
    let mut everything = Vec::new();
    tokio::time::timeout(PATIENCE, old.read_to_end(&mut everything))
        .await
        .unwrap()
        .unwrap();
    let text = String::from_utf8(everything).unwrap();
    assert!(text.contains("connection: close\r\n"), "{text}");
    assert!(text.ends_with("\r\n\r\none two three"), "{text}");
}

#[tokio::test]
async fn large_and_chunked_request_bodies_are_served_on_the_same_connection() {
    let server = Server::start().await;
    let mut client = server.client().await;
    client.send(b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert_eq!(client.answer(false).await.body, b"hello");
    // 100 KiB: more than the loop reads whole, so hyper takes the connection over.
    let large = vec![b'x'; 100 * 1024];
    let head = format!(
        "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
        large.len()
    );
    client.send(head.as_bytes()).await;
    client.send(&large).await;
    let echo = client.answer(false).await;
    assert_eq!(echo.status, 200);
    assert_eq!(echo.body, large);
    client
        .send(
            b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n\
              3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n\
              GET /hello HTTP/1.1\r\nHost: x\r\n\r\n",
        )
        .await;
    assert_eq!(client.answer(false).await.body, b"abcde");
    assert_eq!(client.answer(false).await.body, b"hello");
    // A chunked body on a fresh connection, as the first request.
    let mut fresh = server.client().await;
    fresh.send(b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nz\r\n0\r\n\r\n").await;
    assert_eq!(fresh.answer(false).await.body, b"z");
}

#[tokio::test]
async fn malformed_and_oversized_heads_are_refused() {
    let server = Server::start().await;
    for (request, status) in [
        (b"GET /hello HTTP/1.1\r\nbad header\r\n\r\n".to_vec(), 400),
        (
            format!(
                "GET /hello HTTP/1.1\r\nX-Big: {}\r\n\r\n",
                "v".repeat(20 * 1024)
            )
            .into_bytes(),
            431,
        ),
    ] {
        let mut client = server.client().await;
        client.send(&request).await;
        let answer = client.answer(false).await;
        assert_eq!(answer.status, status);
        assert!(client.closed().await);
    }
}

#[tokio::test]
async fn idle_connections_close_at_shutdown() {
    let mut server = Server::start().await;
    let mut client = server.client().await;
    client.send(b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert_eq!(client.answer(false).await.body, b"hello");
    let _ = server.stop.take().unwrap().send(());
    assert!(client.closed().await);
    tokio::time::timeout(PATIENCE, &mut server.served)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}

/// Requests whose framing could be read two ways, and what both engines answer: 400 with the
/// problem's code (or none, for what the parser refuses), and the connection closed.
const AMBIGUOUS: &[(&str, Option<&str>)] = &[
    ("GET /hello HTTP/1.1\r\n\r\n", Some("invalid_host")),
    (
        "GET /hello HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n",
        Some("invalid_host"),
    ),
    (
        "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
        None,
    ),
    (
        "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3, 3\r\n\r\nabc",
        None,
    ),
    (
        "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
        Some("invalid_framing"),
    ),
    (
        "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n",
        Some("invalid_framing"),
    ),
    (
        "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        Some("invalid_framing"),
    ),
    (
        "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: identity\r\n\r\n",
        None,
    ),
    (
        "POST /echo HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        None,
    ),
    ("GET /hello HTTP/1.1\r\nHost: x\r\nX: a\r\n b\r\n\r\n", None),
    ("GET /hello HTTP/1.1\r\nHost: x\r\nX: a\rb\r\n\r\n", None),
    ("GET /hello HTTP/1.1\r\nHost: x\r\nX: a\0b\r\n\r\n", None),
    (
        "GET /hello HTTP/1.1\r\nHost: x\r\nX: a\u{1b}b\r\n\r\n",
        None,
    ),
    ("GET /hello HTTP/1.1\r\nHost: x\r\nX : a\r\n\r\n", None),
];

#[tokio::test]
async fn framing_that_reads_two_ways_is_refused_and_closed_by_both_engines() {
    for engine in ENGINES {
        let server = Server::start_with(engine, ConnectionLimits::default()).await;
        for (request, code) in AMBIGUOUS {
            // Each after a good request on the same connection, so a later head is checked too.
            let mut client = server.client().await;
            client
                .send(format!("GET /hello HTTP/1.1\r\nHost: x\r\n\r\n{request}").as_bytes())
                .await;
            assert_eq!(client.answer(false).await.body, b"hello");
            let answer = client.answer(false).await;
            assert_eq!(answer.status, 400, "{engine:?} {request:?}");
            if let Some(code) = code {
                let body = String::from_utf8_lossy(&answer.body);
                assert!(body.contains(code), "{engine:?} {request:?}: {body}");
            }
            assert!(client.closed().await, "{engine:?} {request:?}");
        }
    }
}

/// hyper removes a `Content-Length` beside `Transfer-Encoding` before its service sees the
/// request; the sentry in front of it (`h1/sentry.rs`) reads the head first, so both engines
/// refuse it with 400, close the connection, and the request behind it is never read.
#[tokio::test]
async fn a_length_beside_chunked_is_refused_by_both_engines() {
    let smuggled = "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\nGET /hello HTTP/1.1\r\nHost: x\r\n\r\n";
    for engine in ENGINES {
        let server = Server::start_with(engine, ConnectionLimits::default()).await;
        let mut client = server.client().await;
        client.send(smuggled.as_bytes()).await;
        let answer = client.answer(false).await;
        assert_eq!(answer.status, 400, "{engine:?}");
        assert!(
            String::from_utf8_lossy(&answer.body).contains("invalid_framing"),
            "{engine:?}"
        );
        assert!(client.closed().await, "{engine:?}");
    }
}

#[tokio::test]
async fn repeated_equal_lengths_are_read_as_one_by_both_engines() {
    for engine in ENGINES {
        let server = Server::start_with(engine, ConnectionLimits::default()).await;
        let mut client = server.client().await;
        client
            .send(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabcGET /hello HTTP/1.1\r\nHost: x\r\n\r\n")
            .await;
        assert_eq!(client.answer(false).await.body, b"abc", "{engine:?}");
        assert_eq!(client.answer(false).await.body, b"hello", "{engine:?}");
    }
}

fn short_timeouts() -> ConnectionLimits {
    ConnectionLimits {
        header_timeout: Duration::from_millis(600),
        body_timeout: Duration::from_millis(300),
        idle_timeout: Duration::from_millis(300),
        write_timeout: Duration::from_millis(300),
        ..ConnectionLimits::default()
    }
}

/// How long until the server closes `client`'s connection (it reads and drops what comes).
async fn closed_after(client: &mut Client) -> Duration {
    let started = tokio::time::Instant::now();
    let mut scratch = [0u8; 64 * 1024];
    loop {
        match tokio::time::timeout(PATIENCE, client.stream.read(&mut scratch)).await {
            Ok(Ok(0) | Err(_)) => return started.elapsed(),
            Ok(Ok(_)) => {}
            Err(_) => panic!("the connection stayed open"),
        }
    }
}

#[tokio::test]
async fn idle_slow_head_and_slow_body_connections_are_closed_by_both_engines() {
    for engine in ENGINES {
        let server = Server::start_with(engine, short_timeouts()).await;
        // Idle after an answer: closed after the idle timeout.
        let mut client = server.client().await;
        client.send(b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n").await;
        assert_eq!(client.answer(false).await.body, b"hello");
        let idle = closed_after(&mut client).await;
        assert!(idle < Duration::from_millis(1500), "{engine:?} {idle:?}");
        // Half a head, then a byte now and then: closed after the header timeout.
        let mut client = server.client().await;
        client.send(b"GET /hello HTTP/1.1\r\n").await;
        let started = tokio::time::Instant::now();
        let dribble = async {
            for _ in 0..20 {
                tokio::time::sleep(Duration::from_millis(100)).await;
                if client.stream.write_all(b"X").await.is_err() {
                    break;
                }
            }
        };
        let _ = tokio::time::timeout(Duration::from_secs(3), dribble).await;
        let slow_head = started.elapsed() + closed_after(&mut client).await;
        assert!(
            slow_head < Duration::from_millis(2500),
            "{engine:?} {slow_head:?}"
        );
        // A body that stops arriving: the connection is closed after the body timeout.
        let mut client = server.client().await;
        client
            .send(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc")
            .await;
        let stalled = closed_after(&mut client).await;
        assert!(
            stalled < Duration::from_millis(1500),
            "{engine:?} {stalled:?}"
        );
    }
}

#[tokio::test]
async fn a_client_that_stops_reading_is_closed_after_the_write_timeout_by_both_engines() {
    for engine in ENGINES {
        let server = Server::start_with(engine, short_timeouts()).await;
        let mut client = server.client().await;
        client.send(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n").await;
        // Not reading: the socket buffers fill, the server's writes stall, and it gives up.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let mut everything = Vec::new();
        let read = tokio::time::timeout(PATIENCE, client.stream.read_to_end(&mut everything))
            .await
            .expect("the connection stayed open");
        // Cut short (or reset): the whole answer would be 64 MiB and a last chunk.
        let whole = BIG_PIECES * 64 * 1024;
        assert!(read.is_err() || everything.len() < whole, "{engine:?}");
    }
}

/// An HTTP/2 client that never opens a stream's flow-control window takes no answer, though
/// no write of the server's ever stalls (it has nothing it may write). Must hold on both
/// engines: the connection is closed after the write timeout, and with it what the answer
/// held (here a streamed body; through the gateway, an upstream connection).
#[tokio::test]
async fn an_http2_client_that_opens_no_window_is_closed_after_the_write_timeout() {
    for engine in ENGINES {
        let server = Server::start_with(engine, short_timeouts()).await;
        let stream = hyper_util::rt::TokioIo::new(server.connect().await);
        let (mut sender, connection) =
            hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                .initial_stream_window_size(0)
                .handshake::<_, http_body_util::Empty<Bytes>>(stream)
                .await
                .unwrap();
        let connection = tokio::spawn(connection);
        let request = http::Request::get(format!("http://{}/big", server.address))
            .body(http_body_util::Empty::new())
            .unwrap();
        let response = sender.send_request(request).await.unwrap();
        assert_eq!(response.status(), 200, "{engine:?}");
        // Its body is never read, and no window is ever given for it.
        let started = tokio::time::Instant::now();
        let ended = tokio::time::timeout(PATIENCE, connection).await;
        assert!(ended.is_ok(), "{engine:?}: the connection stayed open");
        assert!(
            started.elapsed() < Duration::from_millis(2500),
            "{engine:?} {:?}",
            started.elapsed()
        );
        drop(response);
    }
}

/// Behind a trusted proxy (the test, on 127.0.0.1), the per-address cap counts each forwarded
/// client's requests in flight, not the proxy's connections: with a cap of 2, three
/// connections of the proxy are served, and a forwarded client's third concurrent request gets
/// 429 `too_many_connections` while its connection stays open.
#[tokio::test]
async fn behind_a_trusted_proxy_the_cap_counts_forwarded_clients_in_both_engines() {
    for engine in ENGINES {
        let config = ConnectionLimits {
            max_connections_per_address: 2,
            ..ConnectionLimits::default()
        };
        let limits = ServerLimits::new(config, 1 << 20, vec!["127.0.0.1/32".parse().unwrap()]);
        let server = Server::start_limited(engine, limits).await;
        let mut clients = Vec::new();
        for _ in 0..3 {
            let mut client = server.client().await;
            client
                .send(b"GET /slow HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 203.0.113.7\r\n\r\n")
                .await;
            // In order, so the third is the one over the cap.
            tokio::time::sleep(Duration::from_millis(50)).await;
            clients.push(client);
        }
        let mut statuses = Vec::new();
        for client in &mut clients {
            statuses.push(client.answer(false).await.status);
        }
        assert_eq!(statuses, [200, 200, 429], "{engine:?}");
        // The proxy's connection goes on; another client is not affected.
        let third = &mut clients[2];
        third
            .send(b"GET /hello HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 203.0.113.8\r\n\r\n")
            .await;
        assert_eq!(third.answer(false).await.body, b"hello", "{engine:?}");
    }
}
