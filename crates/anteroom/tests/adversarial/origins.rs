//! Hostile origins (SPEC §14.4): the gateway in front of an origin that speaks raw bytes and
//! frames its answers badly on purpose. Every visitor asks for `/v/N` and each answer names
//! its N (in an `x-for` field and in the body); what the origin sends beyond an answer is a
//! complete stale answer naming the same N, so a visitor that ever reads it, or any other
//! visitor's bytes, fails its check. Visitors come one after another, on fresh connections
//! and on one kept-alive connection, and every case runs on both HTTP engines.
//!
//! Before: behind an origin that wrote a few bytes too many after a HEAD answer, each visitor
//! received the answer meant for the one before; an origin that closed an idle connection
//! turned the next POST into a 502.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

use super::{Gate, on_engine, with_server_lines};

/// Both engines, by their config name.
const ENGINES: [&str; 2] = ["own", "hyper"];

/// How the origin misbehaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hostility {
    /// A chunked body with a false `Content-Length` beside its `Transfer-Encoding`.
    LengthBesideCoding,
    /// A stale answer right behind a HEAD, 204 or 304 answer (`/v/N?head`, `?204`, `?304`):
    /// in the same write for even N, 10 ms later for odd N (as a server writing the head and
    /// then the body would).
    BytesAfterBodiless,
    /// A body of this many bytes followed by a stale answer, as [`BytesAfterBodiless`] sends
    /// it.
    OverLong(usize),
    /// A stale answer 50 ms after a complete answer.
    Late,
    /// Half the body, then the connection closed.
    CloseMidBody,
    /// A well-formed answer, and the connection closed once idle for one second.
    IdleClose,
    /// A well-formed answer after 300 ms; to `/v/N?dribble`, at once but with the body one
    /// byte every 150 ms.
    Slow,
    /// A well-formed answer carrying fields of the origin's connection (and fields its
    /// `Connection` lines name) and `Anteroom-Release`.
    ConnectionFields,
    /// A well-formed answer carrying its own `X-Request-Id`, `Date`, two `Set-Cookie` and a
    /// field on two lines, in mixed case ([`OWN_FIELDS`]).
    OwnFields,
    /// A chunked body whose last chunk is followed by trailer lines for ever, a kilobyte every
    /// 10 ms.
    EndlessTrailers,
    /// A chunked body coded with gzip too (`Transfer-Encoding: gzip, chunked`), which nobody
    /// asked for.
    CodedBody,
    /// An HTTP/1.0 answer framed by `Transfer-Encoding: chunked`, keeping the connection alive.
    ChunkedHttp10,
}

/// What the origin saw.
#[derive(Default)]
struct Seen {
    open: AtomicUsize,
    most_open: AtomicUsize,
    answering: AtomicUsize,
    most_answering: AtomicUsize,
}

/// Counts one into `now` while it lives, noting the highest count in `most`.
struct Counted<'a>(&'a AtomicUsize);

impl<'a> Counted<'a> {
    fn new(now: &'a AtomicUsize, most: &AtomicUsize) -> Counted<'a> {
        let count = now.fetch_add(1, Ordering::SeqCst) + 1;
        most.fetch_max(count, Ordering::SeqCst);
        Counted(now)
    }
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A hostile origin on 127.0.0.1; stops when dropped.
struct Origin {
    url: String,
    seen: Arc<Seen>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Origin {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Origin {
    async fn start(hostility: Hostility) -> Origin {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Seen::default());
        let counts = seen.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let counts = counts.clone();
                tokio::spawn(async move { serve(stream, hostility, &counts).await });
            }
        });
        Origin { url, seen, task }
    }
}

/// Answers the requests of one connection as `hostility` says.
async fn serve(mut stream: TcpStream, hostility: Hostility, seen: &Seen) {
    let _open = Counted::new(&seen.open, &seen.most_open);
    let mut buffer = Vec::new();
    loop {
        let idle_limit = if hostility == Hostility::IdleClose {
            Duration::from_secs(1)
        } else {
            Duration::from_secs(30)
        };
        let Ok(Some((method, target))) =
            tokio::time::timeout(idle_limit, read_request(&mut stream, &mut buffer))
                .await
                .unwrap_or(Ok(None))
        else {
            return;
        };
        let _answering = Counted::new(&seen.answering, &seen.most_answering);
        let (path, query) = target.split_once('?').unwrap_or((&target, ""));
        let n = path.strip_prefix("/v/").unwrap_or("?");
        let stale_later = n.parse::<usize>().is_ok_and(|n| n % 2 == 1);
        let body = format!("for v/{n}");
        let stale = {
            let stale_body = format!("stale for v/{n}");
            format!(
                "HTTP/1.1 200 OK\r\nx-for: stale v/{n}\r\ncontent-length: {}\r\n\r\n{stale_body}",
                stale_body.len()
            )
        };
        let head = |status: &str, fields: &str| {
            format!("HTTP/1.1 {status}\r\nx-for: v/{n}\r\n{fields}\r\n").into_bytes()
        };
        let length = |body: &str| format!("content-length: {}\r\n", body.len());
        let mut answer: Vec<u8> = match hostility {
            Hostility::LengthBesideCoding => {
                let mut answer = head(
                    "200 OK",
                    "content-length: 3\r\ntransfer-encoding: chunked\r\n",
                );
                answer.extend(format!("{:x}\r\n{body}\r\n0\r\n\r\n", body.len()).bytes());
                answer
            }
            Hostility::BytesAfterBodiless => {
                let status = match query {
                    "204" => "204 No Content",
                    "304" => "304 Not Modified",
                    _ => "200 OK",
                };
                assert_eq!(method == "HEAD", query == "head", "{method} {target}");
                head(status, &length(&body))
            }
            Hostility::OverLong(size) => {
                let body = sized_body(&body, size);
                let mut answer = head("200 OK", &length(&body));
                answer.extend(body.bytes());
                answer
            }
            Hostility::CloseMidBody => {
                let mut answer = head("200 OK", &length(&format!("{body}{body}")));
                answer.extend(body.bytes());
                let _ = stream.write_all(&answer).await;
                return;
            }
            Hostility::Slow if query == "dribble" => {
                let _ = stream.write_all(&head("200 OK", &length(&body))).await;
                for byte in body.bytes() {
                    tokio::time::sleep(Duration::from_millis(150)).await;
                    if stream.write_all(&[byte]).await.is_err() {
                        return;
                    }
                }
                continue;
            }
            Hostility::ConnectionFields => {
                let mut answer = head("200 OK", &format!("{CONNECTION_FIELDS}{}", length(&body)));
                answer.extend(body.bytes());
                answer
            }
            Hostility::OwnFields => {
                let mut answer = head("200 OK", &format!("{OWN_FIELDS}{}", length(&body)));
                answer.extend(body.bytes());
                answer
            }
            Hostility::EndlessTrailers => {
                let mut answer = head("200 OK", "transfer-encoding: chunked\r\n");
                answer.extend(format!("{:x}\r\n{body}\r\n0\r\n", body.len()).bytes());
                if stream.write_all(&answer).await.is_err() {
                    return;
                }
                let trailer = format!("x-t: {}\r\n", "v".repeat(1000));
                while stream.write_all(trailer.as_bytes()).await.is_ok() {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                return;
            }
            Hostility::CodedBody => {
                let mut answer = head("200 OK", "transfer-encoding: gzip, chunked\r\n");
                answer.extend(format!("{:x}\r\n{body}\r\n0\r\n\r\n", body.len()).bytes());
                answer
            }
            Hostility::ChunkedHttp10 => format!(
                "HTTP/1.0 200 OK\r\nx-for: v/{n}\r\nconnection: keep-alive\r\n\
                 transfer-encoding: chunked\r\n\r\n{:x}\r\n{body}\r\n0\r\n\r\n",
                body.len()
            )
            .into_bytes(),
            Hostility::Late | Hostility::IdleClose | Hostility::Slow => {
                if hostility == Hostility::Slow {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                }
                let mut answer = head("200 OK", &length(&body));
                answer.extend(body.bytes());
                answer
            }
        };
        let stale_after = match hostility {
            Hostility::Late => Some(Duration::from_millis(50)),
            Hostility::BytesAfterBodiless | Hostility::OverLong(_) if stale_later => {
                Some(Duration::from_millis(10))
            }
            Hostility::BytesAfterBodiless | Hostility::OverLong(_) => {
                answer.extend(stale.bytes());
                None
            }
            _ => None,
        };
        if stream.write_all(&answer).await.is_err() {
            return;
        }
        if let Some(pause) = stale_after {
            tokio::time::sleep(pause).await;
            let _ = stream.write_all(stale.as_bytes()).await;
        }
    }
}

/// `body` padded with `.` to `size` bytes (at least `body`).
fn sized_body(body: &str, size: usize) -> String {
    let mut sized = body.to_owned();
    while sized.len() < size {
        sized.push('.');
    }
    sized
}

/// Reads one request (its head and a `Content-Length` body) from `stream`: its method and
/// target, or `None` at the end of the connection.
async fn read_request(
    stream: &mut TcpStream,
    buffer: &mut Vec<u8>,
) -> std::io::Result<Option<(String, String)>> {
    loop {
        if let Some(end) = find(buffer, b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buffer[..end]).into_owned();
            let body_length: usize =
                field(&head, "content-length").map_or(0, |value| value.parse().unwrap());
            while buffer.len() < end + 4 + body_length {
                if stream.read_buf(buffer).await? == 0 {
                    return Ok(None);
                }
            }
            buffer.drain(..end + 4 + body_length);
            let mut words = head.split(' ');
            let method = words.next().unwrap_or_default().to_owned();
            let target = words.next().unwrap_or_default().to_owned();
            return Ok(Some((method, target)));
        }
        if stream.read_buf(buffer).await? == 0 {
            return Ok(None);
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

/// The value of the header field `name` in `head`, if any.
fn field<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.split("\r\n").skip(1).find_map(|line| {
        let (field, value) = line.split_once(':')?;
        field
            .trim()
            .eq_ignore_ascii_case(name)
            .then_some(value.trim())
    })
}

/// The values of every header field `name` in `head`, in order.
fn fields<'a>(head: &'a str, name: &str) -> Vec<&'a str> {
    head.split("\r\n")
        .skip(1)
        .filter_map(|line| {
            let (field, value) = line.split_once(':')?;
            field
                .trim()
                .eq_ignore_ascii_case(name)
                .then_some(value.trim())
        })
        .collect()
}

/// One answer as a visitor read it.
#[derive(Debug)]
struct Answer {
    status: u16,
    head: String,
    body: Vec<u8>,
    /// The connection ended before the body did.
    cut: bool,
}

/// A visitor's connection to the gateway, read byte for byte.
struct Visitor {
    stream: TcpStream,
    buffer: Vec<u8>,
}

impl Visitor {
    async fn connect(gate: &Gate) -> Visitor {
        Visitor {
            stream: TcpStream::connect(gate.addr()).await.unwrap(),
            buffer: Vec::new(),
        }
    }

    /// Sends `method target` (with `body`, if any) and reads the answer.
    async fn ask(&mut self, method: &str, target: &str, body: &str) -> Answer {
        self.try_ask(method, target, body)
            .await
            .expect("the connection ended before an answer")
    }

    /// [`ask`](Self::ask), `None` when the connection ends before an answer's head.
    async fn try_ask(&mut self, method: &str, target: &str, body: &str) -> Option<Answer> {
        let request = format!(
            "{method} {target} HTTP/1.1\r\nhost: shop.example\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        self.stream.write_all(request.as_bytes()).await.unwrap();
        tokio::time::timeout(Duration::from_secs(10), self.read_answer(method == "HEAD"))
            .await
            .expect("an answer within 10 s")
    }

    async fn read_answer(&mut self, to_head: bool) -> Option<Answer> {
        let end = loop {
            if let Some(end) = find(&self.buffer, b"\r\n\r\n") {
                break end;
            }
            if !self.fill().await {
                return None;
            }
        };
        let head = String::from_utf8_lossy(&self.buffer[..end]).into_owned();
        self.buffer.drain(..end + 4);
        let status = head.split(' ').nth(1).unwrap().parse().unwrap();
        let mut answer = Answer {
            status,
            head,
            body: Vec::new(),
            cut: false,
        };
        if to_head || status == 204 || status == 304 {
            return Some(answer);
        }
        if field(&answer.head, "transfer-encoding").is_some() {
            self.read_chunked(&mut answer).await;
        } else if let Some(length) = field(&answer.head, "content-length") {
            let length: usize = length.parse().unwrap();
            while self.buffer.len() < length {
                if !self.fill().await {
                    answer.cut = true;
                    answer.body = std::mem::take(&mut self.buffer);
                    return Some(answer);
                }
            }
            answer.body = self.buffer.drain(..length).collect();
        } else {
            while self.fill().await {}
            answer.body = std::mem::take(&mut self.buffer);
        }
        Some(answer)
    }

    async fn read_chunked(&mut self, answer: &mut Answer) {
        loop {
            let line_end = loop {
                if let Some(end) = find(&self.buffer, b"\r\n") {
                    break end;
                }
                if !self.fill().await {
                    answer.cut = true;
                    return;
                }
            };
            let size =
                usize::from_str_radix(std::str::from_utf8(&self.buffer[..line_end]).unwrap(), 16)
                    .unwrap();
            while self.buffer.len() < line_end + 2 + size + 2 {
                if !self.fill().await {
                    answer.cut = true;
                    return;
                }
            }
            answer
                .body
                .extend_from_slice(&self.buffer[line_end + 2..line_end + 2 + size]);
            self.buffer.drain(..line_end + 2 + size + 2);
            if size == 0 {
                return;
            }
        }
    }

    /// Reads more; `false` at the end of the connection.
    async fn fill(&mut self) -> bool {
        matches!(self.stream.read_buf(&mut self.buffer).await, Ok(read) if read > 0)
    }

    /// Nothing more arrives within 200 ms: the connection stays silent or ends.
    async fn nothing_more(&mut self) -> bool {
        if !self.buffer.is_empty() {
            return false;
        }
        let mut extra = [0u8; 256];
        match tokio::time::timeout(Duration::from_millis(200), self.stream.read(&mut extra)).await {
            Err(_) | Ok(Ok(0) | Err(_)) => true,
            Ok(Ok(_)) => false,
        }
    }
}

/// The gateway on `engine` in front of `origin` (no rooms), with `server` and `upstream`
/// lines added to its `[server]` and `[upstream]` sections; the header timeout is 3 s unless
/// `upstream` says.
async fn gate_with(engine: &str, origin: &Origin, server: &str, upstream: &str) -> Gate {
    let header_timeout = if upstream.contains("header_timeout") {
        ""
    } else {
        "header_timeout = \"3s\"\n"
    };
    Gate::start_edited(
        &format!(
            "[upstream]\nurl = \"{}\"\nidle_timeout = \"3s\"\n{header_timeout}{upstream}\n",
            origin.url
        ),
        |text| with_server_lines(&on_engine(&text, engine), server),
    )
    .await
}

async fn gate(engine: &str, origin: &Origin) -> Gate {
    gate_with(engine, origin, "", "").await
}

/// What visitor `n` asks: method and target.
type Ask = fn(usize) -> (&'static str, String);

fn get(n: usize) -> (&'static str, String) {
    ("GET", format!("/v/{n}"))
}

/// Checks that visitor `n`'s answer is its own and whole: `x-for: v/n`, and unless it is
/// `bodiless` (HEAD, 204, 304) status 200, the body `for v/n` padded to `size`, and a
/// `Content-Length`, when there is one, that is the body's.
fn check_own(n: usize, answer: &Answer, size: usize, bodiless: bool, engine: &str) {
    let context = format!("visitor {n} on {engine}: {answer:?}");
    assert!(!answer.cut, "{context}");
    assert_eq!(
        field(&answer.head, "x-for"),
        Some(format!("v/{n}").as_str()),
        "{context}"
    );
    if bodiless {
        return;
    }
    assert_eq!(answer.status, 200, "{context}");
    assert_eq!(
        answer.body,
        sized_body(&format!("for v/{n}"), size).into_bytes(),
        "{context}"
    );
    if let Some(length) = field(&answer.head, "content-length") {
        assert_eq!(length, answer.body.len().to_string(), "{context}");
    }
}

/// Eight visitors one after another, 120 ms apart (late bytes arrive in between): four on
/// fresh connections, four on one kept-alive connection; each must get its own answer and
/// nothing after it.
async fn visitors_get_their_own(gate: &Gate, engine: &str, ask: Ask, size: usize) {
    for n in 0..4 {
        let mut visitor = Visitor::connect(gate).await;
        let (method, target) = ask(n);
        let answer = visitor.ask(method, &target, "").await;
        check_bodiless(n, &answer, method, &target, size, engine);
        assert!(visitor.nothing_more().await, "visitor {n} on {engine}");
        tokio::time::sleep(Duration::from_millis(120)).await;
    }
    let mut visitor = Visitor::connect(gate).await;
    for n in 4..8 {
        let (method, target) = ask(n);
        let answer = visitor.ask(method, &target, "").await;
        check_bodiless(n, &answer, method, &target, size, engine);
        tokio::time::sleep(Duration::from_millis(120)).await;
    }
    assert!(
        visitor.nothing_more().await,
        "the kept-alive visitor on {engine}"
    );
}

/// [`check_own`] for what visitor `n` asked: a HEAD, 204 or 304 answer has the status asked
/// for and no body.
fn check_bodiless(
    n: usize,
    answer: &Answer,
    method: &str,
    target: &str,
    size: usize,
    engine: &str,
) {
    let expected = match target.split_once('?').map(|(_, query)| query) {
        Some("204") => 204,
        Some("304") => 304,
        _ => 200,
    };
    assert_eq!(answer.status, expected, "{method} {target} on {engine}");
    let bodiless = method == "HEAD" || expected != 200;
    if bodiless {
        assert!(answer.body.is_empty(), "{method} {target} on {engine}");
    }
    check_own(n, answer, size, bodiless, engine);
}

/// Runs `visitors_get_their_own` on both engines in front of an origin `hostility`.
async fn check_hostility(hostility: Hostility, ask: Ask, size: usize) {
    for engine in ENGINES {
        let origin = Origin::start(hostility).await;
        let gate = gate(engine, &origin).await;
        visitors_get_their_own(&gate, engine, ask, size).await;
    }
}

/// The fields [`Hostility::ConnectionFields`] adds to its answers.
const CONNECTION_FIELDS: &str = "Connection: keep-alive, X-Secret\r\nx-secret: 1\r\n\
    connection: x-second-line\r\nx-second-line: 2\r\nKeep-Alive: timeout=5\r\n\
    Proxy-Connection: keep-alive\r\nUpgrade: h2c\r\nTrailer: x-t\r\nTE: trailers\r\n\
    Anteroom-Release: 1\r\n";

/// The origin's answers carry its connection's fields, fields its `Connection` lines name, and
/// `Anteroom-Release`. Must hold: each visitor gets its own answer with none of them, on fresh
/// and on kept-alive connections (the origin's connection is reused as its `keep-alive` says).
#[tokio::test]
async fn the_origins_connection_fields_never_reach_the_visitor() {
    let hidden = [
        "connection",
        "x-secret",
        "x-second-line",
        "keep-alive",
        "proxy-connection",
        "upgrade",
        "trailer",
        "te",
        "anteroom-release",
    ];
    for engine in ENGINES {
        let origin = Origin::start(Hostility::ConnectionFields).await;
        let gate = gate(engine, &origin).await;
        let mut visitor = Visitor::connect(&gate).await;
        for n in 0..3 {
            let (method, target) = get(n);
            let answer = visitor.ask(method, &target, "").await;
            check_own(n, &answer, 0, false, engine);
            for name in hidden {
                assert_eq!(
                    field(&answer.head, name),
                    None,
                    "{name} on {engine}: {answer:?}"
                );
            }
        }
    }
}

/// The fields [`Hostility::OwnFields`] adds to its answers.
const OWN_FIELDS: &str = "X-Request-Id: from-the-origin\r\nSet-Cookie: o=1\r\n\
    DATE: Tue, 01 Jan 2030 00:00:00 GMT\r\nx-multi: a\r\nset-cookie: p=2\r\nX-Multi: b\r\n";

/// The origin's answers carry fields the gateway passes on as they came, one it replaces
/// (`X-Request-Id`) and one it would otherwise add (`Date`). Must hold on both engines, on
/// fresh and kept-alive connections: each visitor gets its own answer with the origin's
/// fields once each, values of one name in the order sent, the node's request id alone, the
/// origin's `Date` and no other, one `Content-Length`.
#[tokio::test]
async fn the_origins_own_fields_reach_the_visitor_once() {
    for engine in ENGINES {
        let origin = Origin::start(Hostility::OwnFields).await;
        let gate = gate(engine, &origin).await;
        for fresh in [true, false] {
            let mut visitor = Visitor::connect(&gate).await;
            for n in 0..3 {
                if fresh && n > 0 {
                    visitor = Visitor::connect(&gate).await;
                }
                let (method, target) = get(n);
                let answer = visitor.ask(method, &target, "").await;
                check_own(n, &answer, 0, false, engine);
                let context = format!("visitor {n} on {engine}: {answer:?}");
                let ids = fields(&answer.head, "x-request-id");
                assert_eq!(ids.len(), 1, "{context}");
                assert_ne!(ids[0], "from-the-origin", "{context}");
                assert_eq!(
                    fields(&answer.head, "set-cookie"),
                    ["o=1", "p=2"],
                    "{context}"
                );
                assert_eq!(fields(&answer.head, "x-multi"), ["a", "b"], "{context}");
                assert_eq!(
                    fields(&answer.head, "date"),
                    ["Tue, 01 Jan 2030 00:00:00 GMT"],
                    "{context}"
                );
                assert_eq!(fields(&answer.head, "content-length").len(), 1, "{context}");
            }
        }
    }
}

/// The origin frames a chunked body with a false `Content-Length: 3` beside its coding. Must
/// hold: each visitor gets the whole decoded body under a framing of its own (no length of 3).
#[tokio::test]
async fn a_length_beside_a_coding_never_frames_the_visitors_answer() {
    check_hostility(Hostility::LengthBesideCoding, get, 0).await;
}

/// The origin sends a complete stale answer right behind HEAD, 204 and 304 answers. Must
/// hold: each visitor gets its own status and fields and no body; the stale answer reaches
/// nobody (the connection it came on is never reused).
#[tokio::test]
async fn bytes_after_a_bodiless_answer_reach_nobody() {
    fn ask(n: usize) -> (&'static str, String) {
        match n % 3 {
            0 => ("HEAD", format!("/v/{n}?head")),
            1 => ("GET", format!("/v/{n}?204")),
            _ => ("GET", format!("/v/{n}?304")),
        }
    }
    check_hostility(Hostility::BytesAfterBodiless, ask, 0).await;
}

/// The origin's bodies run past their `Content-Length` into a stale answer, small ones and
/// ones past 64 KiB (the streamed paths). Must hold: each visitor gets exactly the declared
/// bytes of its own body, never the extra ones.
#[tokio::test]
async fn an_over_long_body_is_cut_at_its_length() {
    check_hostility(Hostility::OverLong(20), get, 20).await;
    check_hostility(Hostility::OverLong(100 * 1024), get, 100 * 1024).await;
}

/// The origin sends a stale answer 50 ms after each complete answer, while its connection
/// sits in the gateway's pool. Must hold: the next visitor gets its own answer (the pooled
/// connection is checked before reuse and closed).
#[tokio::test]
async fn late_bytes_on_an_idle_connection_reach_nobody() {
    check_hostility(Hostility::Late, get, 0).await;
}

/// The origin closes the connection halfway through each body. Must hold: each visitor sees
/// its own answer cut off (or a 502, or its connection closed before an answer: the own
/// engine writes a small answer whole or not at all), never another's bytes.
#[tokio::test]
async fn a_body_cut_off_by_the_origin_is_cut_off_for_its_visitor_only() {
    for engine in ENGINES {
        let origin = Origin::start(Hostility::CloseMidBody).await;
        let gate = gate(engine, &origin).await;
        for n in 0..4 {
            let mut visitor = Visitor::connect(&gate).await;
            let Some(answer) = visitor.try_ask("GET", &format!("/v/{n}"), "").await else {
                continue;
            };
            let own = format!("for v/{n}");
            if answer.status == 200 {
                assert!(answer.cut, "visitor {n} on {engine}: {answer:?}");
                assert!(
                    own.as_bytes().starts_with(&answer.body)
                        || answer.body.starts_with(own.as_bytes()),
                    "visitor {n} on {engine}: {answer:?}"
                );
                assert!(answer.body.len() <= own.len(), "{answer:?}");
            } else {
                assert_eq!(answer.status, 502, "visitor {n} on {engine}: {answer:?}");
            }
        }
    }
}

/// The origin follows an answer's last chunk with trailer lines for ever, each arriving well
/// within the idle timeout. Must hold: the visitor's answer ends (cut off, or a 502) within
/// seconds, and the gateway lets go of the origin's connection (it had read trailers for as
/// long as the origin sent them, holding the visitor's request open).
#[tokio::test]
async fn endless_trailers_end_the_answer() {
    for engine in ENGINES {
        let origin = Origin::start(Hostility::EndlessTrailers).await;
        let gate = gate(engine, &origin).await;
        let mut visitor = Visitor::connect(&gate).await;
        if let Some(answer) = visitor.try_ask("GET", "/v/0", "").await {
            assert!(
                answer.status == 502 || (answer.status == 200 && answer.cut),
                "on {engine}: {answer:?}"
            );
        }
        let mut let_go = false;
        for _ in 0..50 {
            if origin.seen.open.load(Ordering::SeqCst) == 0 {
                let_go = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(let_go, "the origin's connection is let go on {engine}");
    }
}

/// The origin codes its answers with gzip under the chunks (`Transfer-Encoding: gzip,
/// chunked`, which the gateway never asks for), or frames an HTTP/1.0 answer with
/// `chunked`. Must hold: both engines answer 502 rather than pass on a body still coded with
/// nothing saying so, or read a 1.0 hop's framing.
#[tokio::test]
async fn answers_the_gateway_cannot_decode_are_502() {
    for hostility in [Hostility::CodedBody, Hostility::ChunkedHttp10] {
        for engine in ENGINES {
            let origin = Origin::start(hostility).await;
            let gate = gate(engine, &origin).await;
            for n in 0..2 {
                let mut visitor = Visitor::connect(&gate).await;
                let answer = visitor.ask("GET", &format!("/v/{n}"), "").await;
                assert_eq!(answer.status, 502, "{hostility:?} on {engine}: {answer:?}");
            }
        }
    }
}

/// The origin closes connections idle for one second (as Node and gunicorn do after a few).
/// Must hold: a POST after a longer pause gets its answer, on a fresh and on a kept-alive
/// visitor connection: the closed pooled connection is never used for it (a POST is not
/// retried, so using it would be a 502).
#[tokio::test]
async fn a_post_after_the_origin_closed_an_idle_connection_is_answered() {
    for engine in ENGINES {
        let origin = Origin::start(Hostility::IdleClose).await;
        let gate = gate(engine, &origin).await;
        let mut kept = Visitor::connect(&gate).await;
        for round in 0..2 {
            let first = 4 * round;
            let mut visitor = Visitor::connect(&gate).await;
            let answer = visitor.ask("GET", &format!("/v/{first}"), "").await;
            check_own(first, &answer, 0, false, engine);
            let answer = kept.ask("GET", &format!("/v/{}", first + 1), "").await;
            check_own(first + 1, &answer, 0, false, engine);
            tokio::time::sleep(Duration::from_millis(1_500)).await;
            let mut visitor = Visitor::connect(&gate).await;
            let answer = visitor
                .ask("POST", &format!("/v/{}", first + 2), "order=1")
                .await;
            check_own(first + 2, &answer, 0, false, engine);
            let answer = kept
                .ask("POST", &format!("/v/{}", first + 3), "order=2")
                .await;
            check_own(first + 3, &answer, 0, false, engine);
        }
    }
}

/// Six visitors at once ask a slow origin (300 ms an answer) through a gateway allowed one
/// connection to it (one serving thread). Must hold: the origin never answers two requests at
/// once (and, on the engine's own client, never has two connections open), and with a header
/// timeout long enough for the line every visitor is answered. Then one visitor's answer
/// streams for a second: five visitors asking meanwhile wait their 500 ms header timeout in
/// line and get 503 `upstream_busy`, and the first still gets its whole answer.
#[tokio::test]
async fn max_connections_caps_the_connections_to_the_origin() {
    for engine in ENGINES {
        let origin = Origin::start(Hostility::Slow).await;
        let gate = gate_with(engine, &origin, ONE_THREAD, &cap("5s")).await;
        let statuses = at_once(&gate, 0..6).await;
        assert_eq!(statuses, [200; 6], "{engine}");
        assert_eq!(
            origin.seen.most_answering.load(Ordering::SeqCst),
            1,
            "{engine}"
        );
        if engine == "own" {
            assert_eq!(origin.seen.most_open.load(Ordering::SeqCst), 1, "{engine}");
        }

        let origin = Origin::start(Hostility::Slow).await;
        let gate = gate_with(engine, &origin, ONE_THREAD, &cap("500ms")).await;
        let holder = async {
            let mut visitor = Visitor::connect(&gate).await;
            let answer = visitor.ask("GET", "/v/0?dribble", "").await;
            check_own(0, &answer, 0, false, engine);
        };
        let others = async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            at_once(&gate, 1..6).await
        };
        let ((), statuses) = tokio::join!(holder, others);
        assert_eq!(statuses, [503; 5], "{engine}");
        assert_eq!(
            origin.seen.most_answering.load(Ordering::SeqCst),
            1,
            "{engine}"
        );
    }
}

const ONE_THREAD: &str = "workers = 1";

/// One connection to the origin, waited for up to `header_timeout`.
fn cap(header_timeout: &str) -> String {
    format!("max_connections = 1\nheader_timeout = \"{header_timeout}\"")
}

/// Visitors `numbers` asking at once; their statuses (a 503 must be `upstream_busy`).
async fn at_once(gate: &Gate, numbers: std::ops::Range<usize>) -> Vec<u16> {
    let asks = numbers.map(|n| async move {
        let mut visitor = Visitor::connect(gate).await;
        let answer = visitor.ask("GET", &format!("/v/{n}"), "").await;
        if answer.status == 503 {
            let body = String::from_utf8_lossy(&answer.body);
            assert!(body.contains("\"upstream_busy\""), "{body}");
        } else {
            check_own(n, &answer, 0, false, "");
        }
        answer.status
    });
    futures_util::future::join_all(asks).await
}

/// A visitor starts a chunked upload to the site and stops sending. Must hold: the visitor
/// gets 408 once `body_timeout` has passed, on both engines, and the site is not counted a
/// 5xx (`anteroom_upstream_server_errors_total`, which adaptive admission reads: by stalling
/// uploads a visitor could otherwise slow a room's admissions). Before: 502 `upstream_failed`,
/// counted as the site's.
#[tokio::test]
async fn a_stalled_upload_is_the_visitors_408_not_the_sites_5xx() {
    for engine in ENGINES {
        let admin_port = super::support::free_port();
        let gate = Gate::start_edited("[upstream]\nurl = \"{upstream}\"\n", |text| {
            with_server_lines(&on_engine(&text, engine), "body_timeout = \"1s\"").replacen(
                "admin_listen = \"127.0.0.1:0\"",
                &format!("admin_listen = \"127.0.0.1:{admin_port}\""),
                1,
            )
        })
        .await;
        // A streamed upload, and a small one hyper reads (it waits for `100 Continue`).
        let uploads: [&[u8]; 2] = [
            b"POST /upload HTTP/1.1\r\nhost: shop.example\r\n\
              transfer-encoding: chunked\r\n\r\n3\r\nabc\r\n",
            b"POST /upload HTTP/1.1\r\nhost: shop.example\r\n\
              expect: 100-continue\r\ncontent-length: 10\r\n\r\nabc",
        ];
        for upload in uploads {
            let mut stream = TcpStream::connect(gate.addr()).await.unwrap();
            stream.write_all(upload).await.unwrap();
            let mut answer = Vec::new();
            // Until a whole head that is not `100 Continue`.
            let answered = |text: &str| {
                text.match_indices("HTTP/1.1 ").any(|(at, _)| {
                    !text[at..].starts_with("HTTP/1.1 100") && text[at..].contains("\r\n\r\n")
                })
            };
            let head = async {
                while !answered(&String::from_utf8_lossy(&answer)) {
                    if !matches!(stream.read_buf(&mut answer).await, Ok(read) if read > 0) {
                        break;
                    }
                }
            };
            let _ = tokio::time::timeout(Duration::from_secs(10), head).await;
            let answer = String::from_utf8_lossy(&answer);
            let last = answer
                .split("HTTP/1.1 ")
                .filter(|head| !head.starts_with("100"))
                .find(|head| !head.is_empty())
                .unwrap_or("");
            assert!(last.starts_with("408"), "on {engine}: {answer}");
        }
        let admin_url = format!("http://127.0.0.1:{admin_port}");
        let metrics = super::support::scrape_metrics(&gate.client, &admin_url).await;
        let server_errors: Vec<&str> = metrics
            .lines()
            .filter(|line| line.starts_with("anteroom_upstream_server_errors_total"))
            .collect();
        assert!(!server_errors.is_empty(), "{metrics}");
        assert!(
            server_errors.iter().all(|line| line.ends_with(" 0")),
            "on {engine}: {server_errors:?}"
        );
    }
}
