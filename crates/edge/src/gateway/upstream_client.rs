//! A keep-alive HTTP/1.1 client of our own to the upstream, for requests whose body is already
//! in memory (no body, or a small one read whole by `h1/server.rs`): nearly every request a gateway
//! proxies.
//!
//! hyper's pooled client hands each request to the connection's own task through a channel
//! and streams every answer through another; for a small request and a small answer that
//! machinery cost more than the proxying (docs/benchmarks.md, "Gateway"). Here the visitor's
//! task drives the upstream connection itself: it takes an idle connection from the worker's
//! pool (or opens one), writes the request head and body in one write, reads the answer's
//! head into the connection's buffer and parses it with `anteroom_h1`. An answer whose body has
//! already arrived whole (a `Content-Length` body in the same read, the usual case) is
//! answered from that buffer and the connection goes back to the pool at once; a longer or
//! chunked body streams, read as the visitor's connection takes it, and the connection goes
//! back once the body ended cleanly.
//!
//! A connection is reused only while it is in step with the origin (SPEC §14.4): bytes left in
//! its buffer after an answer (a body longer than its length, a body after a HEAD, 204 or 304
//! answer, anything after a chunked body's end) keep it from the pool, and before an idle
//! connection is taken from the pool the socket itself is asked, without blocking, whether the
//! origin has sent anything since (late bytes) or closed it: either way it is closed, never
//! read as the next visitor's answer. A request that failed before any byte of its answer came
//! is sent once more on a new connection when its method is idempotent. Under `[upstream]
//! max_connections` a request holds a permit of the node's cap while it uses a connection, and
//! every open connection is counted (`gateway/connection_cap.rs`).
//!
//! Requests with a streamed body (large uploads, chunked, HTTP/2 clients' bodies) and h2c
//! upstreams keep using hyper's client (`proxy.rs`).

use std::collections::VecDeque;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::header::{CONTENT_LENGTH, HOST, TRANSFER_ENCODING};
use axum::http::{HeaderMap, Method, Response};
use bytes::BytesMut;
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;

use anteroom_h1::{
    AnswerFields, AnswerHead, BodyFraming, ChunkedDecoder, Decoded, PassedFields,
    parse_answer_head, request_states_length,
};

use super::connection_cap::{ConnectionCap, IdleConnections, OpenSlot};
use super::forwarding::Forwarding;
use super::upstream_stream::UpstreamStream;
use crate::correlation::Correlation;
use crate::deadline::Deadline;
use crate::tls::UpstreamTls;

/// How much a connection's read buffer grows by at a time.
const READ_STEP: usize = 8 * 1024;

/// Idle connections a pool keeps; more are closed when they come back.
const MAX_IDLE: usize = 512;

/// Room in a request's buffer for what [`write_request`] writes beside the visitor's fields:
/// the request line's method and version, the ids and trace context, the forwarding fields
/// and the length (about 300 bytes through no proxy; a trusted proxy's longer chains may
/// grow the buffer).
const ADDED_ROOM: usize = 512;

/// What the client needs to know of the upstream (from `[upstream]`).
#[derive(Debug, Clone)]
pub(crate) struct UpstreamTarget {
    /// `host:port`.
    pub(crate) address: String,
    pub(crate) connect_timeout: Duration,
    /// How long a body may make no progress, either way: also how long writing a request
    /// may take (an origin that stops reading).
    pub(crate) idle_timeout: Duration,
    pub(crate) pool_idle_timeout: Duration,
    pub(crate) max_response_body: Option<u64>,
    /// `[upstream] max_connections`, shared by the node's pools.
    pub(crate) cap: Option<Arc<ConnectionCap>>,
    /// For an `https://` upstream: how TLS is spoken to it.
    pub(crate) tls: Option<UpstreamTls>,
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
    /// The upstream did not read the request within the idle timeout.
    #[error("the upstream did not read the request in time")]
    WriteTimeout,
    /// Every connection `[upstream] max_connections` allows stayed in use for the header
    /// timeout.
    #[error("every connection to the upstream is in use")]
    Busy,
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
    stream: UpstreamStream,
    buffer: BytesMut,
    deadline: Deadline,
    /// Its place in the count of open connections under `[upstream] max_connections`, freed
    /// when it closes.
    _open: Option<OpenSlot>,
    /// While in use, the request's permit under `[upstream] max_connections` (after `_open`:
    /// a connection closing frees its place before its permit lets the next request in).
    permit: Option<OwnedSemaphorePermit>,
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
        let pool = Arc::new(UpstreamPool {
            target,
            idle: Mutex::new(VecDeque::new()),
        });
        if let Some(cap) = &pool.target.cap {
            cap.register(&pool);
        }
        pool
    }

    /// The most recently used idle connection younger than `pool_idle_timeout` that the
    /// origin has neither closed nor sent anything on since its last answer; older ones and
    /// those are closed.
    fn take_idle(&self) -> Option<Connection> {
        let mut idle = self.idle.lock();
        let idle_timeout = self.target.pool_idle_timeout;
        while let Some(mut newest) = idle.pop_back() {
            if newest.since.elapsed() >= idle_timeout {
                // The rest are older still.
                idle.clear();
                return None;
            }
            if newest.connection.stream.is_quiet() {
                // Close those past the timeout from the front.
                while idle
                    .front()
                    .is_some_and(|oldest| oldest.since.elapsed() >= idle_timeout)
                {
                    idle.pop_front();
                }
                return Some(newest.connection);
            }
            tracing::debug!("an idle upstream connection was closed or sent late bytes");
        }
        None
    }

    /// Pools `connection` after a complete answer. Bytes left in its buffer mean the origin
    /// sent more than the answer: it is out of step, and closed.
    fn give_back(&self, mut connection: Connection) {
        if !connection.buffer.is_empty() {
            return;
        }
        // Pooled before the permit is freed: the request it lets in finds the connection.
        let permit = connection.permit.take();
        let mut idle = self.idle.lock();
        if idle.len() < MAX_IDLE {
            idle.push_back(Idle {
                connection,
                since: Instant::now(),
            });
        }
        drop(idle);
        drop(permit);
    }

    /// A connection for one request, by `answer_by`: under `[upstream] max_connections` once
    /// a permit is free; an idle one unless `fresh`, else a new one.
    async fn checkout(&self, answer_by: Instant, fresh: bool) -> Result<Connection, UpstreamError> {
        let permit = match &self.target.cap {
            Some(cap) => Some(
                cap.acquire(answer_by)
                    .await
                    .map_err(|_| UpstreamError::Busy)?,
            ),
            None => None,
        };
        let idle = if fresh { None } else { self.take_idle() };
        let mut connection = match idle {
            Some(connection) => connection,
            None => self.connect(answer_by).await?,
        };
        connection.permit = permit;
        Ok(connection)
    }

    /// Opens a connection within `connect_timeout`, and before `answer_by` (when that comes
    /// first, the answer's head has timed out).
    async fn connect(&self, answer_by: Instant) -> Result<Connection, UpstreamError> {
        let open = match &self.target.cap {
            Some(cap) => Some(
                cap.open_slot(answer_by)
                    .await
                    .map_err(|_| UpstreamError::Busy)?,
            ),
            None => None,
        };
        let connect_by = Instant::now() + self.target.connect_timeout;
        let stream = tokio::time::timeout_at(
            connect_by.min(answer_by),
            UpstreamStream::connect(self.target.address.as_str(), self.target.tls.as_ref()),
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
        Ok(Connection {
            stream,
            buffer: BytesMut::with_capacity(READ_STEP),
            deadline: Deadline::at(answer_by),
            _open: open,
            permit: None,
        })
    }

    /// Sends one request (`headers` already prepared for the upstream, `Host` included, then
    /// the `forwarding` fields; any `Content-Length` is replaced by the body's) and reads the
    /// answer's head, which must come within `head_timeout` (waiting for a connection and
    /// connecting included); its fields come out as `fields` says (those passed as read
    /// beside the answer). A request that failed before any byte of its answer came is sent
    /// once more on a new connection when its method is idempotent (RFC 9110 §9.2.2: the
    /// origin may have closed the connection as the request went out, or may not have).
    pub(crate) async fn send(
        self: &Arc<Self>,
        outgoing: OwnRequest<'_>,
        head_timeout: Duration,
        fields: AnswerFields<'_>,
    ) -> Result<(Response<Body>, PassedFields), UpstreamError> {
        let OwnRequest {
            method,
            target,
            headers,
            added,
            body,
        } = outgoing;
        let answer_by = Instant::now() + head_timeout;
        // Sized for the whole request: a buffer grown while it is written copies it again.
        let mut request = Vec::with_capacity(request_capacity(target, headers, body.len()));
        write_request(&mut request, method, target, headers, added, &body);
        let connection = self.checkout(answer_by, false).await?;
        match self
            .exchange(connection, method, &request, answer_by, fields)
            .await
        {
            Ok(answer) => Ok(answer),
            Err(Failure::BeforeAnswer(error)) if is_idempotent(method) => {
                tracing::debug!(%error, "the upstream connection failed before answering; retrying");
                let connection = self.checkout(answer_by, true).await?;
                self.exchange(connection, method, &request, answer_by, fields)
                    .await
                    .map_err(Failure::into_error)
            }
            Err(failure) => Err(failure.into_error()),
        }
    }

    async fn exchange(
        self: &Arc<Self>,
        mut connection: Connection,
        method: &Method,
        request: &[u8],
        answer_by: Instant,
        fields: AnswerFields<'_>,
    ) -> Result<(Response<Body>, PassedFields), Failure> {
        let head = connection
            .send_and_read_head(request, answer_by, self.target.idle_timeout, fields)
            .await?;
        let framing = head.body_framing(method == Method::HEAD);
        let AnswerHead {
            status,
            headers,
            passed,
            reusable,
            ..
        } = head;
        let reusable = reusable && framing != BodyFraming::UntilClose;
        let mut response = Response::new(Body::empty());
        *response.status_mut() = status;
        *response.headers_mut() = headers;
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
                if reusable {
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
        Ok((response, passed))
    }
}

impl IdleConnections for UpstreamPool {
    /// Closes the connection idle the longest, if any: its place under `[upstream]
    /// max_connections` goes to a request of another serving thread.
    fn close_oldest_idle(&self) -> bool {
        self.idle.lock().pop_front().is_some()
    }
}

impl Connection {
    /// Writes `request`, which the origin must read within `write_timeout` (and before
    /// `answer_by`), then reads the answer's head (its fields as `fields` says), which must
    /// come by `answer_by`.
    async fn send_and_read_head(
        &mut self,
        request: &[u8],
        answer_by: Instant,
        write_timeout: Duration,
        fields: AnswerFields<'_>,
    ) -> Result<AnswerHead, Failure> {
        let Connection {
            stream,
            buffer,
            deadline,
            ..
        } = self;
        let write_by = answer_by.min(Instant::now() + write_timeout);
        deadline.set(write_by);
        // `biased` here and below: the work first, then its deadline, without the random
        // start `select!` draws otherwise (see `h1/server.rs`).
        tokio::select! {
            biased;
            written = stream.write_all(request) => written.map_err(Failure::BeforeAnswer)?,
            () = deadline.passed() => {
                return Err(Failure::After(if write_by < answer_by {
                    UpstreamError::WriteTimeout
                } else {
                    UpstreamError::HeadTimeout
                }));
            }
        }
        deadline.set(answer_by);
        tokio::select! {
            biased;
            head = read_head(stream, buffer, fields) => head,
            () = deadline.passed() => Err(Failure::After(UpstreamError::HeadTimeout)),
        }
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

/// A request whose body is in memory, as the own client sends it.
pub(crate) struct OwnRequest<'a> {
    pub(crate) method: &'a Method,
    /// The path and query.
    pub(crate) target: &'a str,
    /// The visitor's fields as the upstream gets them (`Host` included).
    pub(crate) headers: &'a HeaderMap,
    pub(crate) added: AddedFields<'a>,
    pub(crate) body: Bytes,
}

/// The fields the gateway adds to a request after the visitor's: written into the head as
/// lines, never put in the request's header map.
#[derive(Clone, Copy)]
pub(crate) struct AddedFields<'a> {
    /// `X-Request-Id` and the trace context.
    pub(crate) correlation: &'a Correlation,
    /// `X-Forwarded-*` and `Forwarded`.
    pub(crate) forwarding: &'a Forwarding,
}

/// The room [`write_request`] needs for a request to `target` with the visitor's `headers`
/// and a body of `body` bytes: the visitor's fields as written, the host twice more (in
/// `X-Forwarded-Host` and `Forwarded`), and [`ADDED_ROOM`].
fn request_capacity(target: &str, headers: &HeaderMap, body: usize) -> usize {
    let fields: usize = headers
        .iter()
        .map(|(name, value)| {
            let again = if name == HOST { 2 * value.len() } else { 0 };
            name.as_str().len() + value.len() + b": \r\n".len() + again
        })
        .sum();
    target.len() + fields + ADDED_ROOM + body
}

/// The request's head and body, as the upstream reads them.
fn write_request(
    out: &mut Vec<u8>,
    method: &Method,
    target: &str,
    headers: &HeaderMap,
    added: AddedFields<'_>,
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
    added.correlation.write_lines(out);
    added.forwarding.write_lines(out);
    if request_states_length(method, body.len() as u64) {
        out.extend_from_slice(b"content-length: ");
        out.extend_from_slice(itoa::Buffer::new().format(body.len()).as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
}

/// Reads the answer's head (skipping interim 1xx answers) and splits it off the buffer.
async fn read_head(
    stream: &mut UpstreamStream,
    buffer: &mut BytesMut,
    fields: AnswerFields<'_>,
) -> Result<AnswerHead, Failure> {
    let mut answered = false;
    loop {
        if !buffer.is_empty() {
            match parse_answer_head(buffer, fields)
                .map_err(|_| Failure::After(UpstreamError::Malformed))?
            {
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
            let idle = self.pool.target.idle_timeout;
            match read_piece(&mut self.state, connection, idle).await? {
                Piece::Again => {}
                Piece::Data(data) if data.is_empty() => {}
                Piece::Data(data) => return self.counted(data).map(Some),
                Piece::End => {
                    if let Some(connection) = self.connection.take()
                        && self.reusable
                    {
                        self.pool.give_back(connection);
                    }
                    return Ok(None);
                }
            }
        }
    }

    /// `data`, counted against `max_response_body`: past it, the connection is dropped and
    /// the body fails.
    #[inline]
    fn counted(&mut self, data: Bytes) -> Result<Bytes, BodyFailure> {
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
        Ok(data)
    }
}

/// What one read of a body gave.
enum Piece {
    Data(Bytes),
    /// The body ended.
    End,
    /// More bytes were read: decode again.
    Again,
}

/// Reads the next piece of a body framed as `state` says from `connection`.
#[inline]
async fn read_piece(
    state: &mut ReadState,
    connection: &mut Connection,
    idle: Duration,
) -> Result<Piece, BodyFailure> {
    Ok(match state {
        ReadState::Done => Piece::End,
        ReadState::Length(0) => {
            *state = ReadState::Done;
            Piece::End
        }
        ReadState::Length(remaining) => {
            if connection.buffer.is_empty() {
                fill(connection, idle, false).await?;
            }
            let take = (*remaining).min(connection.buffer.len() as u64);
            *remaining -= take;
            let take = usize::try_from(take).map_err(|_| BodyFailure::Malformed)?;
            Piece::Data(connection.buffer.split_to(take).freeze())
        }
        ReadState::UntilClose => {
            if connection.buffer.is_empty() && !fill(connection, idle, true).await? {
                *state = ReadState::Done;
                Piece::End
            } else {
                Piece::Data(connection.buffer.split().freeze())
            }
        }
        ReadState::Chunked(decoder) => match decoder
            .next(&mut connection.buffer)
            .map_err(|_| BodyFailure::Malformed)?
        {
            Decoded::Data(data) => Piece::Data(data),
            Decoded::End => {
                *state = ReadState::Done;
                Piece::End
            }
            Decoded::NeedMore => {
                fill(connection, idle, false).await?;
                Piece::Again
            }
        },
    })
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
        ..
    } = connection;
    buffer.reserve(READ_STEP);
    deadline.set(Instant::now() + idle);
    let read = tokio::select! {
        biased;
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use axum::http::{HeaderName, HeaderValue, StatusCode};

    use super::*;
    use crate::client_scheme::ClientScheme;

    const IN_MAP: AnswerFields<'static> = AnswerFields::Map { spare: 2 };

    /// A pool to `address` over plain TCP, without a cap or a body limit, whose answers may
    /// go quiet for `idle_timeout`.
    fn plain_pool(address: String, idle_timeout: Duration) -> Arc<UpstreamPool> {
        UpstreamPool::new(UpstreamTarget {
            address,
            connect_timeout: Duration::from_secs(5),
            idle_timeout,
            pool_idle_timeout: Duration::from_secs(60),
            max_response_body: None,
            cap: None,
            tls: None,
        })
    }

    /// The fields a request from no known peer adds: a new request id, forwarding from
    /// `unknown`.
    fn fields_of_an_unknown_peer() -> (Forwarding, Correlation) {
        let forwarding =
            Forwarding::take(&mut HeaderMap::new(), None, ClientScheme::Http, None, &[]);
        (forwarding, Correlation::take(&mut HeaderMap::new(), false))
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
        let pool = plain_pool(address, Duration::from_millis(200));
        let (forwarding, correlation) = fields_of_an_unknown_peer();
        let added = AddedFields {
            correlation: &correlation,
            forwarding: &forwarding,
        };
        let headers = HeaderMap::new();
        let send = || {
            let outgoing = OwnRequest {
                method: &Method::GET,
                target: "/",
                headers: &headers,
                added,
                body: Bytes::new(),
            };
            pool.send(outgoing, Duration::from_millis(300), IN_MAP)
        };
        let started = Instant::now();
        let (response, _) = send().await.unwrap();
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

    /// Each request is written whole and alone: the second request on a kept-alive
    /// connection carries nothing of the larger first, and when that connection breaks
    /// before answering, the idempotent request sent again on a new one is the same bytes.
    #[tokio::test]
    async fn each_request_is_written_afresh_on_a_kept_connection_and_on_a_retry() {
        use tokio::io::AsyncReadExt as _;

        /// Reads until `buffer` ends with `end`.
        async fn read_until(stream: &mut tokio::net::TcpStream, end: &[u8]) -> Vec<u8> {
            let mut buffer = Vec::new();
            while !buffer.ends_with(end) {
                let mut piece = [0u8; 4096];
                let read = stream.read(&mut piece).await.unwrap();
                assert!(read > 0, "closed after {buffer:?}");
                buffer.extend_from_slice(&piece[..read]);
            }
            buffer
        }

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let upstream = tokio::spawn(async move {
            let (mut first, _) = listener.accept().await.unwrap();
            let large = read_until(&mut first, b"the-first-body").await;
            first
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                .await
                .unwrap();
            let small = read_until(&mut first, b"\r\n\r\n").await;
            // Broken before any answer: the idempotent request goes again on a new one.
            drop(first);
            let (mut second, _) = listener.accept().await.unwrap();
            let again = read_until(&mut second, b"\r\n\r\n").await;
            second
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                .await
                .unwrap();
            (large, small, again)
        });
        let pool = plain_pool(address, Duration::from_secs(5));
        let (forwarding, correlation) = fields_of_an_unknown_peer();
        let added = AddedFields {
            correlation: &correlation,
            forwarding: &forwarding,
        };
        let mut large_headers = HeaderMap::new();
        large_headers.insert(
            "x-large",
            HeaderValue::from_static("a-value-of-some-length"),
        );
        let long_target = "/a-first-target-longer-than-the-second";
        let outgoing = OwnRequest {
            method: &Method::POST,
            target: long_target,
            headers: &large_headers,
            added,
            body: Bytes::from_static(b"the-first-body"),
        };
        let (first, _) = pool
            .send(outgoing, Duration::from_secs(5), IN_MAP)
            .await
            .unwrap();
        assert_eq!(first.status(), StatusCode::OK);
        // Read whole, so that its connection is back in the pool for the next request.
        let body = http_body_util::BodyExt::collect(first.into_body())
            .await
            .unwrap();
        assert_eq!(body.to_bytes(), "ok");
        let small_headers = HeaderMap::new();
        let outgoing = OwnRequest {
            method: &Method::GET,
            target: "/2",
            headers: &small_headers,
            added,
            body: Bytes::new(),
        };
        let (second, _) = pool
            .send(outgoing, Duration::from_secs(5), IN_MAP)
            .await
            .unwrap();
        assert_eq!(second.status(), StatusCode::OK);
        let (large, small, again) = upstream.await.unwrap();
        assert!(large.starts_with(b"POST /a-first-target"), "{large:?}");
        let mut expected = Vec::new();
        write_request(
            &mut expected,
            &Method::GET,
            "/2",
            &small_headers,
            added,
            b"",
        );
        assert_eq!(small, expected);
        assert_eq!(again, expected);
    }

    /// The origin's connection fields (and the fields `Connection` names) stay with its
    /// connection; a coding drops the length beside it; the answer's own fields travel on.
    #[tokio::test]
    async fn the_origins_connection_fields_stay_with_its_connection() {
        use tokio::io::AsyncReadExt as _;

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        // Each connection gets the one answer, then is held open.
        let upstream = tokio::spawn(async move {
            loop {
                let (mut stream, _) = listener.accept().await.unwrap();
                let mut request = vec![0u8; 4096];
                let _ = stream.read(&mut request).await.unwrap();
                stream
                    .write_all(
                        b"HTTP/1.1 200 OK\r\nConnection: keep-alive, X-Secret\r\nx-secret: 1\r\n\
                          Keep-Alive: timeout=5\r\nUpgrade: h2c\r\nProxy-Connection: x\r\n\
                          X-Kept: yes\r\nX-Request-Id: origin\r\nContent-Length: 9\r\n\
                          Transfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
                    )
                    .await
                    .unwrap();
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_secs(5)).await;
                    drop(stream);
                });
            }
        });
        let (forwarding, correlation) = fields_of_an_unknown_peer();
        let added = AddedFields {
            correlation: &correlation,
            forwarding: &forwarding,
        };
        let read = [HeaderName::from_static("x-request-id")];
        // In the map, or passed as read beside the one field read: the same fields either way.
        for fields in [IN_MAP, AnswerFields::Passed { read: &read }] {
            let pool = plain_pool(address.clone(), Duration::from_secs(5));
            let outgoing = OwnRequest {
                method: &Method::GET,
                target: "/",
                headers: &HeaderMap::new(),
                added,
                body: Bytes::new(),
            };
            let (response, passed) = pool
                .send(outgoing, Duration::from_secs(5), fields)
                .await
                .unwrap();
            let mut names: Vec<String> = response
                .headers()
                .keys()
                .map(|name| name.as_str().to_owned())
                .collect();
            names.extend(
                passed
                    .iter()
                    .map(|(name, _)| String::from_utf8_lossy(name).to_ascii_lowercase()),
            );
            names.sort();
            assert_eq!(names, ["x-kept", "x-request-id"], "{fields:?}");
            if let AnswerFields::Passed { .. } = fields {
                assert_eq!(
                    response.headers().len(),
                    1,
                    "only the field read is in the map"
                );
                assert_eq!(response.headers()["x-request-id"], "origin");
            }
            let body = axum::body::to_bytes(response.into_body(), 1024)
                .await
                .unwrap();
            assert_eq!(body, "ok");
        }
        upstream.abort();
    }

    /// A visitor's request through no proxy (new ids, a long pass cookie, an IPv6 peer, a
    /// long host) fits the buffer sized for it.
    #[test]
    fn a_request_is_written_without_growing_its_buffer() {
        let mut headers = HeaderMap::new();
        let host = format!("{}.example", "h".repeat(200));
        headers.insert("host", HeaderValue::from_str(&host).unwrap());
        let cookie = format!("anteroom_p_sale={}", "j".repeat(2_000));
        headers.insert("cookie", HeaderValue::from_str(&cookie).unwrap());
        let forwarding = Forwarding::take(
            &mut HeaderMap::new(),
            Some("2001:db8:ffff:ffff:ffff:ffff:ffff:ffff".parse().unwrap()),
            ClientScheme::Https,
            Some(&HeaderValue::from_str(&host).unwrap()),
            &[],
        );
        let correlation = Correlation::take(&mut HeaderMap::new(), false);
        let added = AddedFields {
            correlation: &correlation,
            forwarding: &forwarding,
        };
        let target = format!("/{}", "p".repeat(500));
        for body in [&b""[..], b"a small body"] {
            let mut out = Vec::with_capacity(request_capacity(&target, &headers, body.len()));
            let room = out.capacity();
            write_request(&mut out, &Method::POST, &target, &headers, added, body);
            assert_eq!(out.capacity(), room, "{} bytes", out.len());
        }
    }

    #[test]
    fn a_request_carries_its_own_length() {
        let mut headers = HeaderMap::new();
        headers.insert("host", HeaderValue::from_static("site"));
        headers.insert(CONTENT_LENGTH, HeaderValue::from_static("999"));
        let forwarding = Forwarding::take(
            &mut HeaderMap::new(),
            Some("192.0.2.1".parse().unwrap()),
            ClientScheme::Http,
            None,
            &[],
        );
        // A trusted proxy's ids, so that the lines are known.
        let mut sent = HeaderMap::new();
        sent.insert("x-request-id", HeaderValue::from_static("lb-1"));
        let trace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        sent.insert("traceparent", HeaderValue::from_static(trace));
        let correlation = Correlation::take(&mut sent, true);
        let added = AddedFields {
            correlation: &correlation,
            forwarding: &forwarding,
        };
        let forwarded = format!(
            "x-request-id: lb-1\r\ntraceparent: {trace}\r\n\
             x-forwarded-for: 192.0.2.1\r\nx-forwarded-proto: http\r\n\
             forwarded: for=192.0.2.1;proto=http\r\n"
        );
        let mut out = Vec::with_capacity(request_capacity("/a?b", &headers, 3));
        let room = out.capacity();
        write_request(&mut out, &Method::POST, "/a?b", &headers, added, b"xyz");
        assert_eq!(out.capacity(), room, "written without growing");
        assert_eq!(
            String::from_utf8(out.clone()).unwrap(),
            format!("POST /a?b HTTP/1.1\r\nhost: site\r\n{forwarded}content-length: 3\r\n\r\nxyz")
        );
        out.clear();
        write_request(&mut out, &Method::GET, "/", &HeaderMap::new(), added, b"");
        assert_eq!(
            String::from_utf8(out).unwrap(),
            format!("GET / HTTP/1.1\r\n{forwarded}\r\n")
        );
    }
}
