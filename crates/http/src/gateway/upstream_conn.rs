//! A keep-alive HTTP/1.1 client of our own to the upstream, for requests whose body is already
//! in memory (no body, or a small one read whole by `h1_conn`): nearly every request a gateway
//! proxies.
//!
//! hyper's pooled client hands each request to the connection's own task through a channel
//! and streams every answer through another; for a small request and a small answer that
//! machinery cost more than the proxying (docs/benchmarks.md, "Gateway"). Here the visitor's
//! task drives the upstream connection itself: it takes an idle connection from the worker's
//! pool (or opens one), writes the request head and body in one write, reads the answer's
//! head into the connection's buffer and parses it with `httparse`. An answer whose body has
//! already arrived whole (a `Content-Length` body in the same read, the usual case) is
//! answered from that buffer and the connection goes back to the pool at once; a longer or
//! chunked body streams, read as the visitor's connection takes it, and the connection goes
//! back once the body ended cleanly.
//!
//! Requests with a streamed body (large uploads, chunked, HTTP/2 clients' bodies) and h2c
//! upstreams keep using hyper's client (`proxy.rs`).

use std::collections::VecDeque;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::header::{CONTENT_LENGTH, TRANSFER_ENCODING};
use axum::http::{HeaderMap, HeaderName, Method, Response, StatusCode, Version};
use bytes::BytesMut;
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::proxy::Forwarding;
use crate::deadline::Deadline;
use crate::h1_conn::{header_map, keeps_alive, parse_length, span_in};

/// The most header fields an upstream answer may have.
const MAX_HEADERS: usize = 100;

/// The largest answer head read from the upstream.
const MAX_HEAD_BYTES: usize = 64 * 1024;

/// How much a connection's read buffer grows by at a time.
const READ_STEP: usize = 8 * 1024;

/// Idle connections a pool keeps; more are closed when they come back.
const MAX_IDLE: usize = 512;

/// What the client needs to know of the upstream (from `[upstream]`).
#[derive(Debug, Clone)]
pub(crate) struct UpstreamTarget {
    /// `host:port`.
    pub(crate) address: String,
    pub(crate) connect_timeout: Duration,
    pub(crate) idle_timeout: Duration,
    pub(crate) pool_idle_timeout: Duration,
    pub(crate) max_response_body: Option<u64>,
}

/// Why a request could not be proxied.
#[derive(Debug, thiserror::Error)]
pub(crate) enum UpstreamError {
    /// No connection could be opened.
    #[error("cannot connect to the upstream: {0}")]
    Connect(io::Error),
    /// Opening a connection took longer than `connect_timeout`.
    #[error("connecting to the upstream timed out")]
    ConnectTimeout,
    /// The answer's head did not come within the header timeout.
    #[error("the upstream's answer did not come in time")]
    HeadTimeout,
    /// The connection failed while the request was written or the answer's head read.
    #[error("the upstream connection failed: {0}")]
    Io(io::Error),
    /// The answer's head is not HTTP/1.x, or too large.
    #[error("the upstream's answer is malformed")]
    Malformed,
}

/// Why a streamed answer body was cut off.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BodyFailure {
    #[error("the upstream's body made no progress within the idle timeout")]
    Idle,
    #[error("the upstream's body is larger than the configured limit")]
    TooLarge,
    #[error("the upstream's chunked body is malformed")]
    Malformed,
    #[error("the upstream connection failed in the body: {0}")]
    Io(io::Error),
}

/// One connection to the upstream with its read buffer, and the deadline of what it waits for
/// (an answer's head, or the next piece of a streamed body): one timer for the connection's
/// life.
struct Connection {
    stream: TcpStream,
    buffer: BytesMut,
    deadline: Deadline,
}

struct Idle {
    connection: Connection,
    since: Instant,
}

/// The idle connections of one serving thread (each router has its own pool).
pub(crate) struct UpstreamPool {
    target: UpstreamTarget,
    idle: Mutex<VecDeque<Idle>>,
}

impl UpstreamPool {
    pub(crate) fn new(target: UpstreamTarget) -> Arc<UpstreamPool> {
        Arc::new(UpstreamPool {
            target,
            idle: Mutex::new(VecDeque::new()),
        })
    }

    /// The most recently used idle connection younger than `pool_idle_timeout`; older ones
    /// are closed.
    fn take_idle(&self) -> Option<Connection> {
        let mut idle = self.idle.lock();
        let idle_timeout = self.target.pool_idle_timeout;
        let newest = idle.pop_back()?;
        if newest.since.elapsed() < idle_timeout {
            // The rest are older: close those past the timeout from the front.
            while idle
                .front()
                .is_some_and(|oldest| oldest.since.elapsed() >= idle_timeout)
            {
                idle.pop_front();
            }
            Some(newest.connection)
        } else {
            idle.clear();
            None
        }
    }

    fn give_back(&self, mut connection: Connection) {
        connection.buffer.clear();
        let mut idle = self.idle.lock();
        if idle.len() < MAX_IDLE {
            idle.push_back(Idle {
                connection,
                since: Instant::now(),
            });
        }
    }

    /// Opens a connection within `connect_timeout`, and before `answer_by` (when that comes
    /// first, the answer's head has timed out).
    async fn connect(&self, answer_by: Instant) -> Result<Connection, UpstreamError> {
        let connect_by = Instant::now() + self.target.connect_timeout;
        let stream = tokio::time::timeout_at(
            connect_by.min(answer_by),
            TcpStream::connect(self.target.address.as_str()),
        )
        .await
        .map_err(|_| {
            if answer_by < connect_by {
                UpstreamError::HeadTimeout
            } else {
                UpstreamError::ConnectTimeout
            }
        })?
        .map_err(UpstreamError::Connect)?;
        let _ = stream.set_nodelay(true);
        Ok(Connection {
            stream,
            buffer: BytesMut::with_capacity(READ_STEP),
            deadline: Deadline::at(answer_by),
        })
    }

    /// Sends one request (`headers` already prepared for the upstream, `Host` included, then
    /// the `forwarding` fields; any `Content-Length` is replaced by the body's) and reads the
    /// answer's head, which
    /// must come within `head_timeout` (connecting included). A request that failed on a
    /// reused connection before any answer came is sent once more on a new connection when
    /// its method is idempotent (the pooled connection may have been closed by the upstream
    /// meanwhile).
    pub(crate) async fn send(
        self: &Arc<Self>,
        method: &Method,
        target: &str,
        headers: &HeaderMap,
        forwarding: &Forwarding,
        body: Bytes,
        head_timeout: Duration,
    ) -> Result<Response<Body>, UpstreamError> {
        let answer_by = Instant::now() + head_timeout;
        let mut request = Vec::with_capacity(512 + body.len());
        write_request(&mut request, method, target, headers, forwarding, &body);
        if let Some(connection) = self.take_idle() {
            match self.exchange(connection, method, &request, answer_by).await {
                Ok(response) => return Ok(response),
                Err(Failure::BeforeAnswer(error)) if is_idempotent(method) => {
                    tracing::debug!(%error, "a pooled upstream connection failed; retrying");
                }
                Err(failure) => return Err(failure.into_error()),
            }
        }
        let connection = self.connect(answer_by).await?;
        self.exchange(connection, method, &request, answer_by)
            .await
            .map_err(Failure::into_error)
    }

    async fn exchange(
        self: &Arc<Self>,
        mut connection: Connection,
        method: &Method,
        request: &[u8],
        answer_by: Instant,
    ) -> Result<Response<Body>, Failure> {
        connection.deadline.set(answer_by);
        let Connection {
            stream,
            buffer,
            deadline,
        } = &mut connection;
        let head = tokio::select! {
            head = async {
                stream.write_all(request).await.map_err(Failure::BeforeAnswer)?;
                read_head(stream, buffer).await
            } => head?,
            () = deadline.passed() => return Err(Failure::After(UpstreamError::HeadTimeout)),
        };
        let bodiless = method == Method::HEAD
            || head.status == StatusCode::NO_CONTENT
            || head.status == StatusCode::NOT_MODIFIED;
        let framing = if bodiless {
            BodyFraming::Length(0)
        } else {
            head.framing
        };
        let reusable = head.reusable && framing != BodyFraming::UntilClose;
        let mut response = Response::new(Body::empty());
        *response.status_mut() = head.status;
        *response.headers_mut() = head.headers;
        match framing {
            BodyFraming::Length(length)
                if connection.buffer.len() as u64 >= length
                    && self
                        .target
                        .max_response_body
                        .is_none_or(|limit| length <= limit) =>
            {
                // The whole body came with the head (or there is none).
                let Ok(length) = usize::try_from(length) else {
                    return Err(Failure::After(UpstreamError::Malformed));
                };
                let body = connection.buffer.split_to(length).freeze();
                // Bytes beyond the answer: the connection is out of step; close it.
                if reusable && connection.buffer.is_empty() {
                    self.give_back(connection);
                }
                if !body.is_empty() {
                    *response.body_mut() = Body::from(body);
                }
            }
            framing => {
                let reader = BodyReader {
                    pool: self.clone(),
                    connection: Some(connection),
                    state: match framing {
                        BodyFraming::Length(length) => ReadState::Length(length),
                        BodyFraming::Chunked => ReadState::Chunked(ChunkedDecoder::default()),
                        BodyFraming::UntilClose => ReadState::UntilClose,
                    },
                    reusable,
                    seen: 0,
                };
                *response.body_mut() = Body::from_stream(reader.into_stream());
            }
        }
        Ok(response)
    }
}

fn is_idempotent(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::PUT | Method::DELETE | Method::TRACE
    )
}

/// Where an exchange failed: before any answer came (a retry may help), or after.
enum Failure {
    BeforeAnswer(io::Error),
    After(UpstreamError),
}

impl Failure {
    fn into_error(self) -> UpstreamError {
        match self {
            Failure::BeforeAnswer(error) => UpstreamError::Io(error),
            Failure::After(error) => error,
        }
    }
}

/// The request's head and body, as the upstream reads them.
fn write_request(
    out: &mut Vec<u8>,
    method: &Method,
    target: &str,
    headers: &HeaderMap,
    forwarding: &Forwarding,
    body: &[u8],
) {
    out.extend_from_slice(method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    for (name, value) in headers {
        if name == CONTENT_LENGTH || name == TRANSFER_ENCODING {
            continue;
        }
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    forwarding.write_lines(out);
    let needs_length =
        !body.is_empty() || matches!(*method, Method::POST | Method::PUT | Method::PATCH);
    if needs_length {
        out.extend_from_slice(b"content-length: ");
        out.extend_from_slice(itoa::Buffer::new().format(body.len()).as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
}

/// How an answer's body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BodyFraming {
    Length(u64),
    Chunked,
    /// No length and not chunked: the body ends when the upstream closes the connection.
    UntilClose,
}

/// A parsed answer head.
struct AnswerHead {
    status: StatusCode,
    headers: HeaderMap,
    framing: BodyFraming,
    /// Whether the upstream keeps the connection open after this answer.
    reusable: bool,
}

/// Reads the answer's head (skipping interim 1xx answers) and splits it off the buffer.
async fn read_head(stream: &mut TcpStream, buffer: &mut BytesMut) -> Result<AnswerHead, Failure> {
    let mut answered = false;
    loop {
        if !buffer.is_empty() {
            match parse_head(buffer).map_err(Failure::After)? {
                Some(head) if head.status.is_informational() => continue,
                Some(head) => return Ok(head),
                None => {}
            }
        }
        buffer.reserve(READ_STEP);
        match stream.read_buf(buffer).await {
            Ok(0) if !answered => {
                return Err(Failure::BeforeAnswer(io::ErrorKind::UnexpectedEof.into()));
            }
            Ok(0) => {
                return Err(Failure::After(UpstreamError::Io(
                    io::ErrorKind::UnexpectedEof.into(),
                )));
            }
            Ok(_) => answered = true,
            Err(error) if !answered => return Err(Failure::BeforeAnswer(error)),
            Err(error) => return Err(Failure::After(UpstreamError::Io(error))),
        }
    }
}

/// The answer head at the start of `buffer`, split off it; `None` while incomplete.
fn parse_head(buffer: &mut BytesMut) -> Result<Option<AnswerHead>, UpstreamError> {
    let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut parsed = httparse::Response::new(&mut fields);
    let length = match parsed.parse(buffer) {
        Ok(httparse::Status::Complete(length)) => length,
        Ok(httparse::Status::Partial) if buffer.len() < MAX_HEAD_BYTES => return Ok(None),
        Ok(httparse::Status::Partial) | Err(_) => return Err(UpstreamError::Malformed),
    };
    let version = match parsed.version {
        Some(0) => Version::HTTP_10,
        Some(1) => Version::HTTP_11,
        _ => return Err(UpstreamError::Malformed),
    };
    let status = parsed
        .code
        .and_then(|code| StatusCode::from_u16(code).ok())
        .ok_or(UpstreamError::Malformed)?;
    let mut fields = Vec::with_capacity(parsed.headers.len());
    for field in parsed.headers.iter() {
        let name =
            HeaderName::from_bytes(field.name.as_bytes()).map_err(|_| UpstreamError::Malformed)?;
        fields.push((name, span_in(buffer, field.value)));
    }
    let head = buffer.split_to(length).freeze();
    // Room for the cookies and rate-limit fields the gateway may add to the answer.
    let headers = header_map(&head, fields, 2).ok_or(UpstreamError::Malformed)?;
    let reusable = keeps_alive(version, &headers);
    let framing = if let Some(coding) = headers.get_all(TRANSFER_ENCODING).iter().next_back() {
        // RFC 9112 §6.3: chunked last means chunked; any other coding runs until the close.
        let last = coding
            .as_bytes()
            .rsplit(|byte| *byte == b',')
            .next()
            .unwrap_or_default();
        if last.trim_ascii().eq_ignore_ascii_case(b"chunked") {
            BodyFraming::Chunked
        } else {
            BodyFraming::UntilClose
        }
    } else {
        let mut lengths = headers.get_all(CONTENT_LENGTH).iter();
        match (lengths.next(), lengths.next()) {
            (None, _) => BodyFraming::UntilClose,
            (Some(value), None) => {
                BodyFraming::Length(parse_length(value.as_bytes()).ok_or(UpstreamError::Malformed)?)
            }
            (Some(_), Some(_)) => return Err(UpstreamError::Malformed),
        }
    };
    Ok(Some(AnswerHead {
        status,
        headers,
        framing,
        reusable,
    }))
}

/// What is left to read of a streamed body.
enum ReadState {
    Length(u64),
    Chunked(ChunkedDecoder),
    UntilClose,
    Done,
}

/// A streamed answer body: reads the upstream connection as the visitor takes the body, and
/// gives the connection back to the pool once the body ended cleanly.
struct BodyReader {
    pool: Arc<UpstreamPool>,
    connection: Option<Connection>,
    state: ReadState,
    reusable: bool,
    seen: u64,
}

impl BodyReader {
    fn into_stream(self) -> impl futures_util::Stream<Item = Result<Bytes, BodyFailure>> + Send {
        futures_util::stream::try_unfold(self, |mut reader| async move {
            Ok(reader.next_data().await?.map(|data| (data, reader)))
        })
    }

    /// The next piece of the body; `None` at its end.
    async fn next_data(&mut self) -> Result<Option<Bytes>, BodyFailure> {
        loop {
            let Some(connection) = self.connection.as_mut() else {
                return Ok(None);
            };
            let piece = match &mut self.state {
                ReadState::Done => None,
                ReadState::Length(0) => {
                    self.state = ReadState::Done;
                    None
                }
                ReadState::Length(remaining) => {
                    if connection.buffer.is_empty() {
                        fill(connection, self.pool.target.idle_timeout, false).await?;
                    }
                    let take = (*remaining).min(connection.buffer.len() as u64);
                    *remaining -= take;
                    let take = usize::try_from(take).map_err(|_| BodyFailure::Malformed)?;
                    Some(connection.buffer.split_to(take).freeze())
                }
                ReadState::UntilClose => {
                    if connection.buffer.is_empty()
                        && !fill(connection, self.pool.target.idle_timeout, true).await?
                    {
                        self.state = ReadState::Done;
                        None
                    } else {
                        Some(connection.buffer.split().freeze())
                    }
                }
                ReadState::Chunked(decoder) => match decoder.next(&mut connection.buffer)? {
                    Decoded::Data(data) => Some(data),
                    Decoded::End => {
                        self.state = ReadState::Done;
                        None
                    }
                    Decoded::NeedMore => {
                        fill(connection, self.pool.target.idle_timeout, false).await?;
                        continue;
                    }
                },
            };
            match piece {
                Some(data) if data.is_empty() => continue,
                Some(data) => {
                    self.seen += data.len() as u64;
                    if self
                        .pool
                        .target
                        .max_response_body
                        .is_some_and(|limit| self.seen > limit)
                    {
                        self.connection = None;
                        return Err(BodyFailure::TooLarge);
                    }
                    return Ok(Some(data));
                }
                None => {
                    if let Some(connection) = self.connection.take()
                        && self.reusable
                        && connection.buffer.is_empty()
                    {
                        self.pool.give_back(connection);
                    }
                    return Ok(None);
                }
            }
        }
    }
}

/// Reads more of the body into the buffer within the idle timeout; `Ok(false)` at the end of
/// the connection when that ends the body (`eof_ends`), an error otherwise.
async fn fill(
    connection: &mut Connection,
    idle: Duration,
    eof_ends: bool,
) -> Result<bool, BodyFailure> {
    let Connection {
        stream,
        buffer,
        deadline,
    } = connection;
    buffer.reserve(READ_STEP);
    deadline.set(Instant::now() + idle);
    let read = tokio::select! {
        read = stream.read_buf(buffer) => read,
        () = deadline.passed() => return Err(BodyFailure::Idle),
    };
    match read {
        Err(error) => Err(BodyFailure::Io(error)),
        Ok(0) if eof_ends => Ok(false),
        Ok(0) => Err(BodyFailure::Io(io::ErrorKind::UnexpectedEof.into())),
        Ok(_) => Ok(true),
    }
}

/// What the chunked decoder found in the buffer.
#[derive(Debug, PartialEq, Eq)]
enum Decoded {
    Data(Bytes),
    /// The last chunk and the trailers were read.
    End,
    NeedMore,
}

/// A chunked body's decoder (RFC 9112 §7.1): chunk sizes with extensions ignored, trailers
/// read and dropped.
#[derive(Debug, Default)]
struct ChunkedDecoder {
    state: ChunkState,
}

#[derive(Debug, Default)]
enum ChunkState {
    /// At a chunk-size line.
    #[default]
    Size,
    /// Inside a chunk's data.
    Data(u64),
    /// After a chunk's data: its CRLF.
    DataEnd,
    /// After the last chunk: trailer lines until an empty one.
    Trailers,
}

/// The longest chunk-size line (size and extensions) accepted.
const MAX_CHUNK_LINE: usize = 4096;

impl ChunkedDecoder {
    fn next(&mut self, buffer: &mut BytesMut) -> Result<Decoded, BodyFailure> {
        loop {
            match &mut self.state {
                ChunkState::Size => {
                    let Some(line) = take_line(buffer)? else {
                        return Ok(Decoded::NeedMore);
                    };
                    let digits = line
                        .split(|byte| *byte == b';')
                        .next()
                        .unwrap_or_default()
                        .trim_ascii();
                    if digits.is_empty() || digits.len() > 15 {
                        return Err(BodyFailure::Malformed);
                    }
                    let mut size = 0u64;
                    for digit in digits {
                        let value = char::from(*digit)
                            .to_digit(16)
                            .ok_or(BodyFailure::Malformed)?;
                        size = size * 16 + u64::from(value);
                    }
                    self.state = if size == 0 {
                        ChunkState::Trailers
                    } else {
                        ChunkState::Data(size)
                    };
                }
                ChunkState::Data(remaining) => {
                    if buffer.is_empty() {
                        return Ok(Decoded::NeedMore);
                    }
                    let take = (*remaining).min(buffer.len() as u64);
                    *remaining -= take;
                    if *remaining == 0 {
                        self.state = ChunkState::DataEnd;
                    }
                    let take = usize::try_from(take).map_err(|_| BodyFailure::Malformed)?;
                    return Ok(Decoded::Data(buffer.split_to(take).freeze()));
                }
                ChunkState::DataEnd => {
                    if buffer.len() < 2 {
                        return Ok(Decoded::NeedMore);
                    }
                    if &buffer[..2] != b"\r\n" {
                        return Err(BodyFailure::Malformed);
                    }
                    let _ = buffer.split_to(2);
                    self.state = ChunkState::Size;
                }
                ChunkState::Trailers => {
                    let Some(line) = take_line(buffer)? else {
                        return Ok(Decoded::NeedMore);
                    };
                    if line.is_empty() {
                        return Ok(Decoded::End);
                    }
                }
            }
        }
    }
}

/// The next CRLF-terminated line (without its CRLF), split off `buffer`.
fn take_line(buffer: &mut BytesMut) -> Result<Option<Bytes>, BodyFailure> {
    match buffer.windows(2).position(|pair| pair == b"\r\n") {
        Some(end) => {
            let line = buffer.split_to(end).freeze();
            let _ = buffer.split_to(2);
            Ok(Some(line))
        }
        None if buffer.len() > MAX_CHUNK_LINE => Err(BodyFailure::Malformed),
        None => Ok(None),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn decode_in_pieces(wire: &[u8], piece: usize) -> Result<Vec<u8>, BodyFailure> {
        let mut decoder = ChunkedDecoder::default();
        let mut buffer = BytesMut::new();
        let mut body = Vec::new();
        let mut pieces = wire.chunks(piece);
        loop {
            match decoder.next(&mut buffer)? {
                Decoded::Data(data) => body.extend_from_slice(&data),
                Decoded::End => return Ok(body),
                Decoded::NeedMore => match pieces.next() {
                    Some(more) => buffer.extend_from_slice(more),
                    None => return Err(BodyFailure::Io(io::ErrorKind::UnexpectedEof.into())),
                },
            }
        }
    }

    #[test]
    fn chunked_bodies_decode_however_they_are_split() {
        let wire =
            b"5;ext=1\r\nhello\r\n1A\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nx-trailer: 1\r\n\r\n";
        for piece in [1, 2, 3, 7, wire.len()] {
            assert_eq!(
                decode_in_pieces(wire, piece).unwrap(),
                b"helloabcdefghijklmnopqrstuvwxyz",
                "pieces of {piece}"
            );
        }
        assert!(matches!(
            decode_in_pieces(b"zz\r\n", 4),
            Err(BodyFailure::Malformed)
        ));
        assert!(matches!(
            decode_in_pieces(b"2\r\nabX\r\n", 9),
            Err(BodyFailure::Malformed)
        ));
        assert!(matches!(
            decode_in_pieces(b"2\r\nab\r\n", 9),
            Err(BodyFailure::Io(_))
        ));
    }

    #[test]
    fn answer_heads_say_how_their_body_ends() {
        let framing = |text: &str| {
            let mut buffer = BytesMut::from(text.as_bytes());
            let head = parse_head(&mut buffer).unwrap().unwrap();
            (head.status.as_u16(), head.framing, head.reusable)
        };
        assert_eq!(
            framing("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n"),
            (200, BodyFraming::Length(5), true)
        );
        assert_eq!(
            framing(
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\nConnection: close\r\n\r\n"
            ),
            (200, BodyFraming::Chunked, false)
        );
        assert_eq!(
            framing("HTTP/1.0 200 OK\r\n\r\n"),
            (200, BodyFraming::UntilClose, false)
        );
        assert_eq!(
            framing(
                "HTTP/1.0 404 Not Found\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n"
            ),
            (404, BodyFraming::Length(0), true)
        );
        let mut partial = BytesMut::from(&b"HTTP/1.1 200 OK\r\nContent-Le"[..]);
        assert!(parse_head(&mut partial).unwrap().is_none());
        let mut two_lengths = BytesMut::from(
            &b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"[..],
        );
        assert!(parse_head(&mut two_lengths).is_err());
        let mut garbage = BytesMut::from(&b"SSH-2.0-OpenSSH\r\n\r\n"[..]);
        assert!(parse_head(&mut garbage).is_err());
    }

    #[tokio::test]
    async fn a_streamed_body_that_stalls_fails_after_the_idle_timeout_and_heads_after_theirs() {
        use futures_util::StreamExt as _;
        use tokio::io::AsyncReadExt as _;

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        // The upstream answers the first request with 3 of 10 body bytes and stalls; the
        // second request gets no answer at all.
        let upstream = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut request = vec![0u8; 4096];
            let _ = stream.read(&mut request).await.unwrap();
            stream
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc")
                .await
                .unwrap();
            let (mut second, _) = listener.accept().await.unwrap();
            let _ = second.read(&mut request).await.unwrap();
            tokio::time::sleep(Duration::from_secs(5)).await;
            drop((stream, second));
        });
        let pool = UpstreamPool::new(UpstreamTarget {
            address,
            connect_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_millis(200),
            pool_idle_timeout: Duration::from_secs(60),
            max_response_body: None,
        });
        let forwarding = Forwarding::take(&mut HeaderMap::new(), None, None, &[]);
        let headers = HeaderMap::new();
        let send = || {
            pool.send(
                &Method::GET,
                "/",
                &headers,
                &forwarding,
                Bytes::new(),
                Duration::from_millis(300),
            )
        };
        let started = Instant::now();
        let response = send().await.unwrap();
        let mut body = response.into_body().into_data_stream();
        assert_eq!(body.next().await.unwrap().unwrap(), "abc");
        assert!(
            body.next().await.unwrap().is_err(),
            "the stalled body fails"
        );
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_millis(200) && waited < Duration::from_secs(3),
            "{waited:?}"
        );
        // The stalled connection is not pooled: the next request opens another, whose head
        // never comes.
        let started = Instant::now();
        assert!(matches!(send().await, Err(UpstreamError::HeadTimeout)));
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_millis(300) && waited < Duration::from_secs(3),
            "{waited:?}"
        );
        upstream.abort();
    }

    #[test]
    fn a_request_carries_its_own_length() {
        let mut headers = HeaderMap::new();
        headers.insert("host", HeaderValue::from_static("site"));
        headers.insert(CONTENT_LENGTH, HeaderValue::from_static("999"));
        let forwarding = Forwarding::take(
            &mut HeaderMap::new(),
            Some("192.0.2.1".parse().unwrap()),
            None,
            &[],
        );
        let forwarded = "x-forwarded-for: 192.0.2.1\r\nx-forwarded-proto: http\r\n\
                         forwarded: for=192.0.2.1;proto=http\r\n";
        let mut out = Vec::new();
        write_request(
            &mut out,
            &Method::POST,
            "/a?b",
            &headers,
            &forwarding,
            b"xyz",
        );
        assert_eq!(
            String::from_utf8(out.clone()).unwrap(),
            format!("POST /a?b HTTP/1.1\r\nhost: site\r\n{forwarded}content-length: 3\r\n\r\nxyz")
        );
        out.clear();
        write_request(
            &mut out,
            &Method::GET,
            "/",
            &HeaderMap::new(),
            &forwarding,
            b"",
        );
        assert_eq!(
            String::from_utf8(out).unwrap(),
            format!("GET / HTTP/1.1\r\n{forwarded}\r\n")
        );
    }
}
