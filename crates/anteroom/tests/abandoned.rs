//! Requests whose client leaves before the answer: the node drops the request's
//! work, closes the connection without answering and counts it
//! (`anteroom_http_requests_abandoned_total`), as nginx does for a proxied request whose client
//! closed (499). A join held up in Redis whose client left leaves nothing behind once Redis
//! runs again (no ticket nobody holds, later admitted as a no-show, no session holding a
//! place); a proxied request whose client left is dropped at the origin. A leave or a backend's
//! session end whose client closes while Redis holds it up is still made (a leave in a task of
//! its own, an end through its room's queue, which sends it whether or not its caller waits;
//! a leave also when the node has to connect to Redis again first), and the place it frees is
//! not held for someone gone. A client
//! that stays, or sends its next request while the first waits (pipelining, a half-close after
//! it included), is answered as before, in order. Run with either engine
//! (`ANTEROOM_TEST_HTTP_ENGINE`).
#![allow(clippy::unwrap_used)]

mod support;

use std::time::{Duration, Instant};

use anteroom_test_support::redis::RedisServer;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use support::slow_origin::{Fate, SLOW_BODY, SlowOrigin};
use support::{SERVICE_KEY, Server, Site, client, free_port, key_hash, test_engine, toml_string};

/// How long Redis is held up while a join waits for it: far within the store's bound (2 s),
/// so a join the node did not drop would be answered, and its ticket kept, once Redis runs.
const HELD_UP: Duration = Duration::from_millis(500);

/// A join as a raw request (a new visitor, no body).
const JOIN: &[u8] =
    b"POST /_anteroom/v1/rooms/shop/join HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n";

/// A request the node proxies to the slow origin.
const SLOW: &[u8] = b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n";

/// The admin key the node accepts.
const ADMIN_KEY: &str = "abandoned-test-admin-key-0123456789";

/// A request the node answers at once (`ok`).
const HEALTHZ: &[u8] = b"GET /_anteroom/healthz HTTP/1.1\r\nHost: x\r\n\r\n";

/// A node on its own Redis in front of a slow origin, with a room `shop` that admits joins
/// at once (`max_active = 10`): each join's pass is issued with its answer, and its session
/// holds one of the room's active places.
struct Node {
    _site: Site,
    server: Server,
    redis: RedisServer,
    admin_port: u16,
    port: u16,
}

impl Node {
    async fn start(origin: &SlowOrigin) -> Node {
        let redis = RedisServer::start();
        let site = Site::new();
        let admin_port = free_port();
        let text = format!(
            "[server]\n\
             listen = \"127.0.0.1:{port}\"\n\
             admin_listen = \"127.0.0.1:{admin_port}\"\n\
             public_url = \"{url}\"\n\
             http_engine = \"{engine}\"\n\
             join_rate_limit = false\n\
             \n\
             [upstream]\n\
             url = \"{origin}\"\n\
             \n\
             [store]\n\
             backend = \"redis\"\n\
             url = \"{redis}\"\n\
             \n\
             [keys]\n\
             dir = {keys}\n\
             algorithm = \"EdDSA\"\n\
             \n\
             [auth]\n\
             service_keys = [\"{service}\"]\n\
             admin_keys = [\"{admin}\"]\n\
             \n\
             [[room]]\n\
             id = \"shop\"\n\
             max_active = 10\n",
            port = site.port,
            url = site.public_url(),
            engine = test_engine(),
            origin = origin.url(),
            redis = redis.url(),
            keys = toml_string(&site.keys_dir()),
            service = key_hash(SERVICE_KEY),
            admin = key_hash(ADMIN_KEY),
        );
        std::fs::write(site.config_path(), text).unwrap();
        let mut server = site.start();
        server.wait_ready(&client()).await;
        let port = site.port;
        Node {
            _site: site,
            server,
            redis,
            admin_port,
            port,
        }
    }

    /// A new connection to the public listener, `request` sent on it.
    async fn send(&self, request: &[u8]) -> TcpStream {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).await.unwrap();
        stream.write_all(request).await.unwrap();
        stream
    }

    /// The room's active sessions in Redis.
    fn active(&self) -> u64 {
        self.redis
            .cli(&["ZCARD", "anteroom:{shop}:active"])
            .trim()
            .parse()
            .unwrap()
    }

    /// `anteroom_http_requests_abandoned_total` of the public listener.
    async fn abandoned(&self) -> u64 {
        self.metric("anteroom_http_requests_abandoned_total{listener=\"public\"}")
            .await
    }

    /// The value of the sample `series` (name and labels) in the node's metrics.
    async fn metric(&self, series: &str) -> u64 {
        let admin_url = format!("http://127.0.0.1:{}", self.admin_port);
        let text = support::scrape_metrics(&client(), &admin_url).await;
        text.lines()
            .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
            .unwrap_or_else(|| panic!("no {series} in:\n{text}"))
            .trim()
            .parse()
            .unwrap()
    }
}

/// Reads from `stream` until `done` holds for what came, within 10 s; what came.
async fn read_until(stream: &mut TcpStream, done: impl Fn(&str) -> bool) -> String {
    let mut answer = Vec::new();
    let mut buffer = [0u8; 4096];
    let reading = async {
        while !done(&String::from_utf8_lossy(&answer)) {
            let read = stream.read(&mut buffer).await.unwrap();
            assert!(
                read > 0,
                "closed early: {:?}",
                String::from_utf8_lossy(&answer)
            );
            answer.extend_from_slice(&buffer[..read]);
        }
    };
    tokio::time::timeout(Duration::from_secs(10), reading)
        .await
        .unwrap_or_else(|_| panic!("no whole answer: {:?}", String::from_utf8_lossy(&answer)));
    String::from_utf8_lossy(&answer).into_owned()
}

/// Waits up to `limit` for the room's active sessions to be `count`; the last count seen.
async fn active_becomes(node: &Node, count: u64, limit: Duration) -> u64 {
    let started = Instant::now();
    loop {
        let active = node.active();
        if active == count || started.elapsed() > limit {
            return active;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Sends `request` on a new connection while Redis is held up, closes the connection before
/// Redis runs again (as a page that sent a beacon and went away, or a backend's client that
/// timed out), then lets Redis run.
async fn sent_and_left_while_redis_holds_it_up(node: &Node, request: &[u8]) {
    let paused = node.redis.pause();
    let stream = node.send(request).await;
    tokio::time::sleep(HELD_UP / 2).await;
    drop(stream);
    tokio::time::sleep(HELD_UP / 2).await;
    RedisServer::resume(paused);
}

#[tokio::test]
async fn a_join_whose_client_leaves_while_redis_holds_it_up_leaves_no_ticket() {
    let origin = SlowOrigin::start(Duration::from_secs(1)).await;
    let node = Node::start(&origin).await;
    // A first join loads the room into the node; it is admitted.
    let first = support::join(&client(), &node.server.url(), "shop").await;
    assert_eq!(first.state, "admitted");
    assert_eq!(node.active(), 1);

    // The visitor gives up (a browser closed, a client timed out).
    sent_and_left_while_redis_holds_it_up(&node, JOIN).await;

    // A join the node kept would run now and its session hold a place nobody uses; the node
    // took it back (or never sent it).
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        active_becomes(&node, 1, Duration::from_secs(5)).await,
        1,
        "the abandoned join's session was kept; log:\n{}",
        node.server.log()
    );
    assert_eq!(node.abandoned().await, 1);
    // The room goes on.
    let next = support::join(&client(), &node.server.url(), "shop").await;
    assert_eq!(next.state, "admitted");
    assert_eq!(node.active(), 2);
}

#[tokio::test]
async fn a_join_whose_client_stays_is_answered_once_redis_runs() {
    let origin = SlowOrigin::start(Duration::from_secs(1)).await;
    let node = Node::start(&origin).await;
    let first = support::join(&client(), &node.server.url(), "shop").await;
    assert_eq!(first.state, "admitted");

    let paused = node.redis.pause();
    let mut stream = node.send(JOIN).await;
    tokio::time::sleep(HELD_UP).await;
    RedisServer::resume(paused);

    let answer = read_until(&mut stream, |text| {
        text.contains("\"ticket\"") && text.ends_with('}')
    })
    .await;
    assert!(answer.starts_with("HTTP/1.1 200 "), "{answer}");
    assert!(answer.contains("\"state\":\"admitted\""), "{answer}");
    assert_eq!(node.active(), 2);
    assert_eq!(node.abandoned().await, 0);
}

#[tokio::test]
async fn a_request_sent_while_the_answer_waits_is_answered_after_it() {
    let origin = SlowOrigin::start(Duration::from_millis(300)).await;
    let node = Node::start(&origin).await;
    let both =
        |text: &str| text.matches("HTTP/1.1 200 ").count() == 2 && text.ends_with("\r\n\r\nok");

    // The next request comes while the first waits for the origin: the first is answered,
    // then the next, on a connection kept open.
    let mut stream = node.send(SLOW).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    stream.write_all(HEALTHZ).await.unwrap();
    let answers = read_until(&mut stream, both).await;
    assert!(
        answers.find(SLOW_BODY).unwrap() < answers.rfind("HTTP/1.1 200 ").unwrap(),
        "answered out of order: {answers}"
    );
    stream.write_all(HEALTHZ).await.unwrap();
    read_until(&mut stream, |text| text.ends_with("\r\n\r\nok")).await;

    // Several sent at once.
    let mut stream = node.send(&[SLOW, HEALTHZ, SLOW].concat()).await;
    let three = read_until(&mut stream, |text| {
        text.matches("HTTP/1.1 200 ").count() == 3 && text.ends_with(SLOW_BODY)
    })
    .await;
    assert!(three.find("\r\n\r\nok").unwrap() < three.rfind(SLOW_BODY).unwrap());
    // hyper's HTTP/1 server reads the end of the connection while it answers a pipelined
    // request and drops the requests after it; the own engine answers what came before the
    // end.
    if test_engine() == "own" {
        // The next request comes while the first waits, then the client shuts its side: it has
        // sent everything, and both answers are its.
        let mut stream = node.send(SLOW).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        stream.write_all(HEALTHZ).await.unwrap();
        stream.shutdown().await.unwrap();
        let answers = read_until(&mut stream, both).await;
        let slow = answers.find(SLOW_BODY).unwrap();
        let second = answers.rfind("HTTP/1.1 200 ").unwrap();
        assert!(slow < second, "answered out of order: {answers}");

        // The same with both requests in one write.
        let mut stream = node.send(&[SLOW, HEALTHZ].concat()).await;
        stream.shutdown().await.unwrap();
        let answers = read_until(&mut stream, both).await;
        assert!(answers.find(SLOW_BODY).unwrap() < answers.rfind("HTTP/1.1 200 ").unwrap());
    }
    let slow_requests = if test_engine() == "own" { 5 } else { 3 };
    assert_eq!(
        origin.fates(slow_requests, Duration::from_secs(5)).await,
        vec![Fate::Answered; slow_requests]
    );
    assert_eq!(node.abandoned().await, 0);
}

#[tokio::test]
async fn a_proxied_request_whose_client_leaves_is_dropped_at_the_origin() {
    let origin = SlowOrigin::start(Duration::from_secs(4)).await;
    let node = Node::start(&origin).await;
    let stream = node.send(SLOW).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    drop(stream);
    // The origin sees the node close its connection well before it would answer.
    assert_eq!(
        origin.fates(1, Duration::from_secs(3)).await,
        vec![Fate::ClosedBefore],
        "log:\n{}",
        node.server.log()
    );
    assert_eq!(node.abandoned().await, 1);

    // A half-close alone is a client gone too (as nginx reads it).
    let mut stream = node.send(SLOW).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    stream.shutdown().await.unwrap();
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(3), stream.read_to_end(&mut rest)).await;
    assert!(
        matches!(read, Ok(Ok(0))),
        "closed without an answer: {read:?} {:?}",
        String::from_utf8_lossy(&rest)
    );
    assert_eq!(
        origin.fates(2, Duration::from_secs(3)).await,
        vec![Fate::ClosedBefore; 2]
    );
    assert_eq!(node.abandoned().await, 2);
}

/// What the own engine hands to hyper (HTTP/2, a chunked request body) is dropped the same
/// way when its client leaves: hyper drops a request's future when its connection ends (on
/// HTTP/1 it reads the connection while a request waits, as the own engine does).
#[tokio::test]
async fn requests_served_by_hyper_are_dropped_when_their_client_leaves() {
    let origin = SlowOrigin::start(Duration::from_secs(4)).await;
    let node = Node::start(&origin).await;
    let url = format!("http://127.0.0.1:{}/slow", node.port);
    let curl = |extra: &[&str]| {
        std::process::Command::new("curl")
            .args(["--silent", "--max-time", "0.5"])
            .args(extra)
            .arg(&url)
            .status()
            .unwrap()
    };
    // curl gives up after half a second and closes the connection.
    assert!(!curl(&["--http2-prior-knowledge"]).success());
    assert!(
        !curl(&[
            "--http1.1",
            "-H",
            "Transfer-Encoding: chunked",
            "--data",
            "body"
        ])
        .success()
    );
    assert_eq!(
        origin.fates(2, Duration::from_secs(3)).await,
        vec![Fate::ClosedBefore; 2],
        "log:\n{}",
        node.server.log()
    );
    assert_eq!(node.abandoned().await, 2);
}

/// The admin listener's requests run to their end when their client leaves (an admin change
/// goes on to its audit event once begun). The admin listener is served by the own engine
/// whatever `http_engine` says.
#[tokio::test]
async fn an_admin_request_whose_client_leaves_runs_to_its_end() {
    let origin = SlowOrigin::start(Duration::from_secs(1)).await;
    let node = Node::start(&origin).await;
    let answered = "anteroom_http_requests_total{listener=\"admin\",class=\"2xx\"}";
    let before = node.metric(answered).await;
    let paused = node.redis.pause();
    let request = format!(
        "GET /admin/v1/rooms/shop/stats HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {ADMIN_KEY}\r\n\r\n"
    );
    let mut stream = TcpStream::connect(("127.0.0.1", node.admin_port))
        .await
        .unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    tokio::time::sleep(HELD_UP / 2).await;
    let mut byte = [0u8; 1];
    let early = stream.try_read(&mut byte);
    assert!(
        matches!(&early, Err(error) if error.kind() == std::io::ErrorKind::WouldBlock),
        "answered while Redis was stopped: {early:?}"
    );
    drop(stream);
    tokio::time::sleep(HELD_UP / 2).await;
    RedisServer::resume(paused);
    tokio::time::sleep(Duration::from_secs(1)).await;
    // The scrape itself is counted once its answer is written, after the sample is read.
    let after = node.metric(answered).await;
    let dropped = node
        .metric("anteroom_http_requests_abandoned_total{listener=\"admin\"}")
        .await;
    assert_eq!((after - before, dropped), (2, 0));
}

/// A leave is the visitor's last word (a page's `sendBeacon` on its way out): the visitor
/// does not wait to hear it was made, and a place kept for someone gone would hold up the
/// line behind it. It is made even when the connection closes before its answer.
#[tokio::test]
async fn a_leave_whose_client_closes_before_its_answer_is_made() {
    let origin = SlowOrigin::start(Duration::from_secs(1)).await;
    let node = Node::start(&origin).await;
    let beacon = admitted_visitors_beacon(&node).await;
    sent_and_left_while_redis_holds_it_up(&node, beacon.as_bytes()).await;
    assert_place_freed(&node).await;
}

/// The same when the node's connection to Redis is gone as the beacon comes: the leave waits
/// for the node to connect again, which it cannot while Redis is held up, and the visitor's
/// connection closes first. The leave is made once Redis is back.
#[tokio::test]
async fn a_leave_that_comes_while_the_store_reconnects_is_made_once_it_is_back() {
    let origin = SlowOrigin::start(Duration::from_secs(1)).await;
    let node = Node::start(&origin).await;
    let beacon = admitted_visitors_beacon(&node).await;
    // The node's command connections are cut (a Redis restart, a network blip), and Redis
    // is held up before the node can connect again.
    node.redis.cli(&["CLIENT", "KILL", "TYPE", "normal"]);
    sent_and_left_while_redis_holds_it_up(&node, beacon.as_bytes()).await;
    assert_place_freed(&node).await;
}

/// The leave beacon (`POST …/leave`, as `navigator.sendBeacon` sends it) of a visitor who has
/// just joined and been admitted.
async fn admitted_visitors_beacon(node: &Node) -> String {
    let visitor = support::join(&client(), &node.server.url(), "shop").await;
    assert_eq!(visitor.state, "admitted");
    assert_eq!(node.active(), 1);
    format!(
        "POST /_anteroom/v1/rooms/shop/leave?ticket={} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
        visitor.ticket
    )
}

/// Fails unless the room's one active place is freed within 5 s.
async fn assert_place_freed(node: &Node) {
    assert_eq!(
        active_becomes(node, 0, Duration::from_secs(5)).await,
        0,
        "the visitor who left still holds a place; log:\n{}",
        node.server.log()
    );
}

/// A backend's end of a session frees its place however soon the backend's client gives up
/// on the answer.
#[tokio::test]
async fn a_session_end_whose_client_closes_before_its_answer_is_made() {
    let origin = SlowOrigin::start(Duration::from_secs(1)).await;
    let node = Node::start(&origin).await;
    let visitor = support::join(&client(), &node.server.url(), "shop").await;
    let pass = visitor.pass.expect("an admitted visitor's pass");
    let session = support::jwt_claims(&pass)["sub"]
        .as_str()
        .expect("the pass's session")
        .to_owned();
    assert_eq!(node.active(), 1);

    let end = format!(
        "POST /_anteroom/v1/rooms/shop/sessions/{session}/complete HTTP/1.1\r\nHost: x\r\n\
         Authorization: Bearer {SERVICE_KEY}\r\nContent-Length: 0\r\n\r\n"
    );
    sent_and_left_while_redis_holds_it_up(&node, end.as_bytes()).await;

    assert_eq!(
        active_becomes(&node, 0, Duration::from_secs(5)).await,
        0,
        "the ended session still holds a place; log:\n{}",
        node.server.log()
    );
}
