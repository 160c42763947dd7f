//! The visitors' HTTP/1.1 client: keep-alive connections to each node, driven by the visitor's
//! own task, heads and chunked bodies read with `anteroom_h1`.
//!
//! The simulator shares two cores with the nodes and Redis, so what it spends per request is
//! taken from the system it measures (docs/benchmarks.md, "Flash crowd"). reqwest parsed each
//! request's URL, went through hyper's pool and handed every request to the connection's own
//! task through a channel and its answer back through another. Here the visitor's task takes
//! an idle connection of its worker (or opens one), writes the request in one write, reads
//! the answer into the connection's buffer and, once the body ended cleanly with nothing
//! after it, puts the connection back.
//!
//! An idle connection is reused only while the node has neither closed it nor sent anything
//! on it since its last answer (asked of the socket without blocking), and only within
//! [`POOL_IDLE`], well inside a node's default `idle_timeout` (30 s). An idempotent request
//! (the status poll, the leave, the site's pages) that failed before any byte of its answer on
//! a reused connection (the node closed it as the request went out) is sent once more on a new
//! one; a join never is (RFC 9110 §9.2.2: a node that read it may have queued the visitor, and
//! a second join would put a ticket nobody holds in the line the crowd measures).

use std::fmt;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::task::{Context, Waker};
use std::time::Duration;

use anteroom_h1::{AnswerFields, BodyFraming, ChunkedDecoder, Decoded, parse_answer_head};
use bytes::{Bytes, BytesMut};
use http::{HeaderMap, HeaderName, Method, StatusCode, Uri, header};
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpSocket, TcpStream};
use tokio::time::Instant;

/// The answer fields a visitor reads; the others are skipped unparsed.
const READ_FIELDS: [HeaderName; 3] = [header::RETRY_AFTER, header::AGE, header::SET_COOKIE];

/// How much a connection's read buffer grows by at a time.
const READ_STEP: usize = 4 * 1024;

/// The longest a connection stays in the pool unused.
const POOL_IDLE: Duration = Duration::from_secs(20);

/// The most idle connections kept per node; more are closed when they come back.
const MAX_IDLE: usize = 4_096;

/// The largest answer body read whole (statuses and problems are a few hundred bytes).
const MAX_BODY: usize = 1 << 20;

/// Why a request got no answer, by kind (the report counts errors by these names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClientError {
    /// No answer within the request's time.
    Timeout,
    /// No connection could be opened.
    Connect,
    /// The connection failed, or the answer's head was malformed.
    Transport,
    /// The answer's body was cut short, malformed or too large.
    Body,
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ClientError::Timeout => "timeout",
            ClientError::Connect => "connect",
            ClientError::Transport => "transport",
            ClientError::Body => "body",
        })
    }
}

/// One node the visitors talk to.
struct Node {
    address: SocketAddr,
    /// The `Host` field's value.
    host: String,
    /// Idle connections, the most recently used last.
    idle: Mutex<Vec<Idle>>,
}

struct Idle {
    connection: Connection,
    since: Instant,
}

/// One keep-alive connection and what has been read on it but not yet used.
struct Connection {
    stream: TcpStream,
    buffer: BytesMut,
}

/// The keep-alive connections of one worker process to every node.
pub(crate) struct Client {
    nodes: Vec<Node>,
    /// The loopback address the worker connects from (each worker its own, so each has its
    /// own local ports).
    source: IpAddr,
}

/// A request to one node, written as it is built.
pub(crate) struct Request {
    node: usize,
    /// Whether it may be sent again after a failure (RFC 9110 §9.2.2).
    idempotent: bool,
    bytes: Vec<u8>,
    /// A field value held a line break (a value the node gave, such as a ticket): the request
    /// is not sent, as no field may smuggle another line into it.
    broken: bool,
}

impl Request {
    /// Adds the field `name: value`.
    pub(crate) fn field(mut self, name: &str, value: &str) -> Request {
        self.broken |= value.bytes().any(|byte| byte == b'\r' || byte == b'\n');
        self.bytes.extend_from_slice(name.as_bytes());
        self.bytes.extend_from_slice(b": ");
        self.bytes.extend_from_slice(value.as_bytes());
        self.bytes.extend_from_slice(b"\r\n");
        self
    }
}

/// An answer read whole.
pub(crate) struct Answer {
    pub(crate) status: StatusCode,
    /// The fields in [`READ_FIELDS`].
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
}

/// An answer whose body is read as it comes (an event stream).
pub(crate) struct Streaming {
    connection: Connection,
    body: BodyState,
    /// Whether the node keeps the connection open after this answer.
    reusable: bool,
}

enum BodyState {
    Length(u64),
    Chunked(ChunkedDecoder),
    UntilClose,
    Ended,
}

impl Client {
    /// A client of the nodes at `targets` (`http://host:port`, checked by the caller to be
    /// loopback), connecting from `source`.
    pub(crate) async fn new(targets: &[String], source: IpAddr) -> io::Result<Client> {
        let mut nodes = Vec::with_capacity(targets.len());
        for target in targets {
            let authority = target
                .parse::<Uri>()
                .ok()
                .and_then(|uri| uri.authority().cloned())
                .ok_or_else(|| {
                    io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!("{target} names no host"),
                    )
                })?;
            let host = authority.as_str().to_owned();
            let port = authority.port_u16().unwrap_or(80);
            let address = tokio::net::lookup_host((authority.host(), port))
                .await?
                .find(|address| address.is_ipv4() == source.is_ipv4())
                .ok_or_else(|| {
                    io::Error::new(
                        io::ErrorKind::NotFound,
                        format!("{host} has no address of the source's family"),
                    )
                })?;
            nodes.push(Node {
                address,
                host,
                idle: Mutex::new(Vec::new()),
            });
        }
        Ok(Client { nodes, source })
    }

    /// A request `method target` to node `node` (an index into the targets), its `Host`
    /// field written.
    pub(crate) fn request(&self, node: usize, method: &Method, target: &str) -> Request {
        let host = self.nodes.get(node).map_or("", |node| node.host.as_str());
        let mut bytes = Vec::with_capacity(256 + target.len());
        bytes.extend_from_slice(method.as_str().as_bytes());
        bytes.push(b' ');
        bytes.extend_from_slice(target.as_bytes());
        bytes.extend_from_slice(b" HTTP/1.1\r\nhost: ");
        bytes.extend_from_slice(host.as_bytes());
        bytes.extend_from_slice(b"\r\n");
        Request {
            node,
            idempotent: method.is_idempotent(),
            bytes,
            broken: false,
        }
    }

    /// Sends `request` and reads its answer whole, within `timeout`.
    pub(crate) async fn send(
        &self,
        request: Request,
        timeout: Duration,
    ) -> Result<Answer, ClientError> {
        let node = self.node_for(&request)?;
        let exchange = async {
            let (status, headers, mut streaming) = self.open(node, request).await?;
            let body = streaming.read_whole().await?;
            if streaming.at_clean_end() {
                give_back(node, streaming.connection);
            }
            Ok(Answer {
                status,
                headers,
                body,
            })
        };
        tokio::time::timeout(timeout, exchange)
            .await
            .unwrap_or(Err(ClientError::Timeout))
    }

    /// Sends `request` and reads its answer's head; the body is read as it comes
    /// ([`Streaming::chunk`]), and the connection closes with it.
    pub(crate) async fn stream(
        &self,
        request: Request,
    ) -> Result<(StatusCode, HeaderMap, Streaming), ClientError> {
        let node = self.node_for(&request)?;
        self.open(node, request).await
    }

    /// The node `request` goes to, unless it cannot be sent: an unknown node, or a field
    /// value with a line break.
    fn node_for(&self, request: &Request) -> Result<&Node, ClientError> {
        if request.broken {
            return Err(ClientError::Transport);
        }
        self.nodes.get(request.node).ok_or(ClientError::Connect)
    }

    /// Writes `request` on an idle connection or a new one and reads the answer's head; when
    /// the request is idempotent, a reused connection that fails before any byte of the
    /// answer is replaced once.
    async fn open(
        &self,
        node: &Node,
        request: Request,
    ) -> Result<(StatusCode, HeaderMap, Streaming), ClientError> {
        let mut bytes = request.bytes;
        bytes.extend_from_slice(b"\r\n");
        if let Some(connection) = take_idle(node) {
            match exchange_head(connection, &bytes).await {
                Ok(opened) => return Ok(opened),
                Err(Failed::BeforeAnswer) if request.idempotent => {}
                Err(Failed::BeforeAnswer) => return Err(ClientError::Transport),
                Err(Failed::After(error)) => return Err(error),
            }
        }
        let connection = self.connect(node).await?;
        exchange_head(connection, &bytes)
            .await
            .map_err(|failed| match failed {
                Failed::BeforeAnswer => ClientError::Transport,
                Failed::After(error) => error,
            })
    }

    async fn connect(&self, node: &Node) -> Result<Connection, ClientError> {
        let socket = if node.address.is_ipv4() {
            TcpSocket::new_v4()
        } else {
            TcpSocket::new_v6()
        }
        .map_err(|_| ClientError::Connect)?;
        socket
            .bind(SocketAddr::new(self.source, 0))
            .map_err(|_| ClientError::Connect)?;
        let stream = socket
            .connect(node.address)
            .await
            .map_err(|_| ClientError::Connect)?;
        stream.set_nodelay(true).map_err(|_| ClientError::Connect)?;
        Ok(Connection {
            stream,
            buffer: BytesMut::with_capacity(READ_STEP),
        })
    }
}

/// How an exchange on one connection failed.
enum Failed {
    /// Before any byte of the answer: the request may be sent again on a new connection.
    BeforeAnswer,
    After(ClientError),
}

/// Writes `request` on `connection` and reads the answer's head, past any interim (1xx)
/// answer.
async fn exchange_head(
    mut connection: Connection,
    request: &[u8],
) -> Result<(StatusCode, HeaderMap, Streaming), Failed> {
    if connection.stream.write_all(request).await.is_err() {
        return Err(Failed::BeforeAnswer);
    }
    let mut heard = false;
    loop {
        match parse_answer_head(
            &mut connection.buffer,
            AnswerFields::Passed { read: &READ_FIELDS },
        ) {
            Ok(Some(head)) if head.status == StatusCode::SWITCHING_PROTOCOLS => {
                // No request of a visitor asks for an upgrade.
                return Err(Failed::After(ClientError::Transport));
            }
            Ok(Some(head)) if head.status.is_informational() => {
                // An interim answer came: the request was read, so it is never sent again.
                heard = true;
                continue;
            }
            Ok(Some(head)) => {
                let (body, reusable) = match head.body_framing(false) {
                    BodyFraming::Length(0) => (BodyState::Ended, head.reusable),
                    BodyFraming::Length(length) => (BodyState::Length(length), head.reusable),
                    BodyFraming::Chunked => {
                        (BodyState::Chunked(ChunkedDecoder::default()), head.reusable)
                    }
                    // Its end is the connection's.
                    BodyFraming::UntilClose => (BodyState::UntilClose, false),
                };
                let streaming = Streaming {
                    connection,
                    body,
                    reusable,
                };
                return Ok((head.status, head.headers, streaming));
            }
            Ok(None) => {}
            Err(_) => return Err(Failed::After(ClientError::Transport)),
        }
        match read_more(&mut connection).await {
            Ok(0) | Err(_) if !heard => return Err(Failed::BeforeAnswer),
            Ok(0) | Err(_) => return Err(Failed::After(ClientError::Transport)),
            Ok(_) => heard = true,
        }
    }
}

async fn read_more(connection: &mut Connection) -> io::Result<usize> {
    connection.buffer.reserve(READ_STEP);
    connection.stream.read_buf(&mut connection.buffer).await
}

impl Streaming {
    /// The next piece of the body; `None` at its end.
    pub(crate) async fn chunk(&mut self) -> Result<Option<Bytes>, ClientError> {
        loop {
            match &mut self.body {
                BodyState::Ended => return Ok(None),
                BodyState::Length(remaining) => {
                    if !self.connection.buffer.is_empty() {
                        let take = usize::try_from(*remaining)
                            .unwrap_or(usize::MAX)
                            .min(self.connection.buffer.len());
                        *remaining -= take as u64;
                        if *remaining == 0 {
                            self.body = BodyState::Ended;
                        }
                        return Ok(Some(self.connection.buffer.split_to(take).freeze()));
                    }
                }
                BodyState::Chunked(decoder) => match decoder.next(&mut self.connection.buffer) {
                    Ok(Decoded::Data(data)) => return Ok(Some(data)),
                    Ok(Decoded::End) => {
                        self.body = BodyState::Ended;
                        return Ok(None);
                    }
                    Ok(Decoded::NeedMore) => {}
                    Err(_) => return Err(ClientError::Body),
                },
                BodyState::UntilClose => {
                    if !self.connection.buffer.is_empty() {
                        let all = self.connection.buffer.len();
                        return Ok(Some(self.connection.buffer.split_to(all).freeze()));
                    }
                }
            }
            match read_more(&mut self.connection).await {
                Ok(0) if matches!(self.body, BodyState::UntilClose) => {
                    self.body = BodyState::Ended;
                    return Ok(None);
                }
                Ok(0) | Err(_) => return Err(ClientError::Body),
                Ok(_) => {}
            }
        }
    }

    /// The whole body (at most [`MAX_BODY`] bytes).
    pub(crate) async fn read_whole(&mut self) -> Result<Bytes, ClientError> {
        let mut whole = BytesMut::new();
        while let Some(piece) = self.chunk().await? {
            if whole.is_empty() && matches!(self.body, BodyState::Ended) {
                // The usual answer: the body came whole in one piece.
                return Ok(piece);
            }
            if whole.len() + piece.len() > MAX_BODY {
                return Err(ClientError::Body);
            }
            whole.extend_from_slice(&piece);
        }
        Ok(whole.freeze())
    }

    /// Whether the body ended with nothing after it, so the connection may carry the next
    /// request.
    fn at_clean_end(&self) -> bool {
        self.reusable && matches!(self.body, BodyState::Ended) && self.connection.buffer.is_empty()
    }
}

/// The most recently used idle connection of `node` that is younger than [`POOL_IDLE`] and
/// quiet (the node has neither closed it nor sent anything since its last answer); the others
/// met on the way, and those past [`POOL_IDLE`] at the bottom of the pool, are closed.
fn take_idle(node: &Node) -> Option<Connection> {
    let mut idle = node.idle.lock();
    while let Some(newest) = idle.pop() {
        if newest.since.elapsed() >= POOL_IDLE {
            // The rest are older still.
            idle.clear();
            return None;
        }
        if is_quiet(&newest.connection.stream) {
            let expired = idle
                .iter()
                .take_while(|oldest| oldest.since.elapsed() >= POOL_IDLE)
                .count();
            idle.drain(..expired);
            return Some(newest.connection);
        }
    }
    None
}

/// Puts `connection` back in `node`'s pool.
fn give_back(node: &Node, connection: Connection) {
    let mut idle = node.idle.lock();
    if idle.len() < MAX_IDLE {
        idle.push(Idle {
            connection,
            since: Instant::now(),
        });
    }
}

/// Whether nothing has arrived on `stream` (no bytes, no end): first as the runtime last saw
/// the socket (no system call), then, when it says readable, by a read that must not block.
fn is_quiet(stream: &TcpStream) -> bool {
    let mut context = Context::from_waker(Waker::noop());
    if stream.poll_read_ready(&mut context).is_pending() {
        return true;
    }
    let mut probe = [0u8; 1];
    matches!(stream.try_read(&mut probe), Err(error) if error.kind() == io::ErrorKind::WouldBlock)
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use tokio::net::TcpListener;

    use super::*;

    /// A node that answers each connection's requests with `answers` in turn (one per request
    /// head read), then reads one more request and closes the connection without answering it;
    /// where `answers` says [`CLOSE`] it closes the connection at once, and an answer starting
    /// with [`LATE`] is sent a moment after the one before, unasked. Counts the connections it
    /// accepted.
    async fn node(answers: Vec<&'static str>) -> (String, Arc<AtomicUsize>) {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .expect("a free port");
        let target = format!("http://{}", listener.local_addr().expect("its address"));
        let accepted = Arc::new(AtomicUsize::new(0));
        let counted = accepted.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                let answers = answers.clone();
                tokio::spawn(async move {
                    let mut read = Vec::new();
                    for answer in answers.into_iter().chain([UNANSWERED]) {
                        if answer == CLOSE {
                            return;
                        }
                        if let Some(late) = answer.strip_prefix(LATE) {
                            tokio::time::sleep(Duration::from_millis(20)).await;
                            if stream.write_all(late.as_bytes()).await.is_err() {
                                return;
                            }
                            continue;
                        }
                        while !read.windows(4).any(|window| window == b"\r\n\r\n") {
                            let mut chunk = [0u8; 1024];
                            match stream.read(&mut chunk).await {
                                Ok(0) | Err(_) => return,
                                Ok(count) => read.extend_from_slice(&chunk[..count]),
                            }
                        }
                        read.clear();
                        if answer == UNANSWERED {
                            return;
                        }
                        if stream.write_all(answer.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (target, accepted)
    }

    async fn client(target: &str) -> Client {
        Client::new(&[target.to_owned()], IpAddr::V4(Ipv4Addr::LOCALHOST))
            .await
            .expect("a client")
    }

    async fn get(client: &Client) -> Result<Answer, ClientError> {
        let request = client
            .request(0, &Method::GET, "/")
            .field("accept", "text/plain");
        client.send(request, Duration::from_secs(5)).await
    }

    const OK: &str = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\nage: 1\r\n\r\nok";

    /// Where the node closes the connection at once.
    const CLOSE: &str = "";

    /// The node reads a request and closes the connection instead of answering it.
    const UNANSWERED: &str = "-";

    /// The start of an answer the node sends unasked.
    const LATE: &str = "late:";

    #[tokio::test]
    async fn a_kept_alive_connection_carries_the_next_request() {
        let (target, accepted) = node(vec![OK, OK, OK]).await;
        let client = client(&target).await;
        for _ in 0..3 {
            let answer = get(&client).await.expect("an answer");
            assert_eq!(answer.status, StatusCode::OK);
            assert_eq!(&answer.body[..], b"ok");
            assert!(answer.headers.contains_key(header::AGE));
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_connection_the_node_closed_while_idle_is_replaced() {
        // Each connection answers once, then the node closes it without saying so.
        let (target, accepted) = node(vec![OK, CLOSE]).await;
        let client = client(&target).await;
        for _ in 0..3 {
            let answer = get(&client).await.expect("an answer");
            assert_eq!(&answer.body[..], b"ok");
            // The close arrives while the connection is idle, as between a visitor's polls.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn an_idle_connection_the_node_sent_late_bytes_on_is_not_taken() {
        let late = "late:HTTP/1.1 500 Late\r\ncontent-length: 0\r\n\r\n";
        let (target, accepted) = node(vec![OK, late, OK]).await;
        let client = client(&target).await;
        assert_eq!(&get(&client).await.expect("an answer").body[..], b"ok");
        // The late answer arrives while the connection is idle.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let answer = get(&client).await.expect("an answer");
        assert_eq!(answer.status, StatusCode::OK, "the late answer was taken");
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_join_the_node_closes_on_unanswered_is_not_sent_again() {
        let (target, accepted) = node(vec![OK]).await;
        let client = client(&target).await;
        let join = || client.request(0, &Method::POST, "/join");
        let first = client.send(join(), Duration::from_secs(5)).await;
        assert_eq!(&first.expect("an answer").body[..], b"ok");
        let second = client.send(join(), Duration::from_secs(5)).await;
        assert!(matches!(second, Err(ClientError::Transport)));
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn interim_answers_are_passed_over() {
        let interim = "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
        let (target, accepted) = node(vec![interim, OK]).await;
        let client = client(&target).await;
        let answer = get(&client).await.expect("an answer");
        assert_eq!(
            (answer.status, &answer.body[..]),
            (StatusCode::OK, &b"ok"[..])
        );
        assert_eq!(&get(&client).await.expect("an answer").body[..], b"ok");
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_body_that_ends_with_the_connection_is_read_and_the_connection_not_reused() {
        let until_close = "HTTP/1.1 200 OK\r\n\r\nok";
        let (target, accepted) = node(vec![until_close, CLOSE]).await;
        let client = client(&target).await;
        for _ in 0..2 {
            assert_eq!(&get(&client).await.expect("an answer").body[..], b"ok");
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_field_value_with_a_line_break_is_not_sent() {
        let (target, accepted) = node(vec![OK]).await;
        let client = client(&target).await;
        let request = client
            .request(0, &Method::GET, "/")
            .field("x-anteroom-ticket", "t\r\nx-smuggled: 1");
        let refused = client.send(request, Duration::from_secs(5)).await;
        assert!(matches!(refused, Err(ClientError::Transport)));
        assert_eq!(accepted.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn a_request_the_node_closes_on_unanswered_is_sent_again_on_a_new_connection() {
        // Each connection answers once and closes on the next request.
        let (target, accepted) = node(vec![OK]).await;
        let client = client(&target).await;
        for _ in 0..3 {
            let answer = get(&client).await.expect("an answer despite the close");
            assert_eq!(&answer.body[..], b"ok");
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn a_chunked_body_is_read_whole_and_the_connection_reused() {
        let chunked = "HTTP/1.1 503 Service Unavailable\r\ntransfer-encoding: chunked\r\nretry-after: 7\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
        let (target, accepted) = node(vec![chunked, OK]).await;
        let client = client(&target).await;
        let answer = get(&client).await.expect("an answer");
        assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(&answer.body[..], b"abcde");
        assert_eq!(
            answer
                .headers
                .get(header::RETRY_AFTER)
                .map(|v| v.as_bytes()),
            Some(&b"7"[..])
        );
        assert_eq!(&get(&client).await.expect("an answer").body[..], b"ok");
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_connection_out_of_step_or_closing_is_not_reused() {
        let closing = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok";
        let too_long = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nokEXTRA";
        for first in [closing, too_long] {
            let (target, accepted) = node(vec![first, OK]).await;
            let client = client(&target).await;
            assert_eq!(&get(&client).await.expect("an answer").body[..], b"ok");
            assert_eq!(&get(&client).await.expect("an answer").body[..], b"ok");
            assert_eq!(accepted.load(Ordering::SeqCst), 2, "after {first:?}");
        }
    }

    #[tokio::test]
    async fn a_stream_is_read_as_it_comes() {
        let events = "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n6\r\nevent:\r\n";
        let (target, _) = node(vec![events, CLOSE]).await;
        let client = client(&target).await;
        let request = client.request(0, &Method::GET, "/events");
        let (status, _, mut body) = client.stream(request).await.expect("a stream");
        assert_eq!(status, StatusCode::OK);
        assert_eq!(
            body.chunk().await.expect("a piece").as_deref(),
            Some(&b"event:"[..])
        );
        // The node closes the connection mid-stream: the stream ends in an error.
        assert_eq!(body.chunk().await, Err(ClientError::Body));
    }

    #[tokio::test]
    async fn no_answer_in_time_and_no_node_are_told_apart() {
        let silent = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .expect("a free port");
        let target = format!("http://{}", silent.local_addr().expect("its address"));
        let client = client(&target).await;
        let request = client.request(0, &Method::GET, "/");
        let timed_out = client.send(request, Duration::from_millis(200)).await;
        assert!(matches!(timed_out, Err(ClientError::Timeout)));
        drop(silent);
        let request = client.request(0, &Method::GET, "/");
        let refused = client.send(request, Duration::from_secs(5)).await;
        assert!(matches!(refused, Err(ClientError::Connect)));
    }
}
