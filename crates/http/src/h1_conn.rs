//! HTTP/1.x connections served by a keep-alive loop of our own instead of hyper's server.
//!
//! A waiting room's busiest requests are small: joins, status polls, and proxied requests
//! carrying a pass. For those, hyper's general HTTP/1 server (its dispatcher, the channel that
//! carries a request body, a buffer pair per connection, a boxed service call) cost more than
//! the room's own work (docs/benchmarks.md). This loop reads each request head into one
//! buffer reused for the connection's life, parses it with `httparse`, builds the request
//! without copying the head's bytes (header values and the target are slices of it), hands it
//! to the router (or, in front of a site, straight to the gateway's lane for paths the router
//! would send there), and writes the answer's head and a small body in one write.
//!
//! What it does not serve it hands to hyper together with the bytes it already read, and hyper
//! serves the rest of the connection: upgrades (WebSocket), `CONNECT`, `Expect`, request
//! bodies sent chunked or larger than [`MAX_INLINE_BODY`] (streamed by hyper with bounded
//! memory), and an unusual `Content-Length`. HTTP/2 never reaches this loop (the accept loop
//! sends it to hyper), nor does a connection opening with an event stream (`stream_conn`).
//!
//! An HTTP/1.1 request without exactly one `Host` is answered 400 and its connection closed,
//! by this loop and by hyper's service alike (SPEC §14.4): the route matched here and the
//! virtual host the origin serves must be the same.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::header::{
    CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, DATE, EXPECT, HOST, TRANSFER_ENCODING, UPGRADE,
};
use axum::http::{
    HeaderMap, HeaderName, HeaderValue, Method, Request, Response, StatusCode, Uri, Version,
};
use bytes::{Buf as _, Bytes, BytesMut};
use futures_util::future::Either;
use http_body::Body as _;
use http_body_util::BodyExt as _;
use hyper_util::rt::TokioIo;
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::Watcher;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tower::Service as _;

use crate::deadline::Deadline;
use crate::gateway::SiteLane;
use crate::{HEADER_READ_TIMEOUT, PublicApp};

/// The largest request head read. Larger heads are answered 431.
pub(crate) const MAX_HEAD_BYTES: usize = 16 * 1024;

/// The most header fields a request head may have (hyper's default is 100; browsers send 15).
pub(crate) const MAX_HEADERS: usize = 64;

/// How much the read buffer grows by at a time.
const READ_STEP: usize = 4096;

/// Request bodies up to this size are read whole before the router sees the request; larger
/// ones go to hyper, which streams them.
pub(crate) const MAX_INLINE_BODY: usize = 64 * 1024;

/// Answers whose whole body is known and at most this large are written with their head in one
/// write; larger or streamed bodies are written as their frames come.
const MAX_GATHERED_BODY: usize = 64 * 1024;

/// What a connection handed to hyper needs.
pub(crate) struct HandOver {
    pub(crate) builder: Arc<Builder<hyper_util::rt::TokioExecutor>>,
    pub(crate) watcher: Watcher,
}

/// Why a request head was not served.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum BadHead {
    /// The client closed the connection (or it broke) before the head was complete.
    Closed,
    /// Not an HTTP/1.x request head: 400, as hyper answers.
    Malformed,
    /// More than [`MAX_HEAD_BYTES`] or [`MAX_HEADERS`]: 431, as hyper answers.
    TooLarge,
    /// An HTTP/1.1 request without a `Host`, or any request with several ([`has_one_host`]).
    Host,
}

/// The problem+json body of a request refused for its `Host` (both engines answer it).
macro_rules! host_problem {
    () => {
        r#"{"type":"about:blank","title":"Bad Request","status":400,"code":"invalid_host","detail":"an HTTP/1.1 request must carry exactly one Host header"}"#
    };
}

/// Whether a request names one `Host` (RFC 9112 §3.2), or none in HTTP/1.0 and HTTP/2 (whose
/// authority is in the target): with none or several, the route anteroom matches and the
/// virtual host the origin serves could differ.
pub(crate) fn has_one_host(version: Version, headers: &HeaderMap) -> bool {
    let mut hosts = headers.get_all(HOST).iter();
    match (hosts.next(), hosts.next()) {
        (Some(_), None) => true,
        (None, _) => version != Version::HTTP_11,
        (Some(_), Some(_)) => false,
    }
}

/// The answer to a request without one `Host`, for hyper: 400 problem+json, and the
/// connection closed after it.
fn host_refused() -> Response<Body> {
    let mut response = Response::new(Body::from(host_problem!()));
    *response.status_mut() = StatusCode::BAD_REQUEST;
    let headers = response.headers_mut();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    headers.insert(CONNECTION, HeaderValue::from_static("close"));
    response
}

impl BadHead {
    /// Sends the answer (if any) and closes the connection.
    pub(crate) async fn refuse(&self, stream: &mut TcpStream) {
        if let Some(answer) = self.answer() {
            let _ = stream.write_all(answer).await;
            let _ = stream.shutdown().await;
        }
    }

    /// The answer sent before closing, if any.
    fn answer(&self) -> Option<&'static [u8]> {
        match self {
            BadHead::Closed => None,
            BadHead::Malformed => {
                Some(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
            }
            BadHead::TooLarge => Some(
                b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
            ),
            BadHead::Host => Some(
                concat!(
                    "HTTP/1.1 400 Bad Request\r\ncontent-type: application/problem+json\r\n",
                    "content-length: 145\r\nconnection: close\r\n\r\n",
                    host_problem!()
                )
                .as_bytes(),
            ),
        }
    }
}

/// A parsed request head: the request (with an empty body), its bytes as they came, and what
/// it says about a body.
pub(crate) struct Head {
    pub(crate) request: Request<Body>,
    /// The head's bytes (what hyper reads first when the connection is handed over).
    pub(crate) raw: Bytes,
    pub(crate) framing: Framing,
}

/// What a head says about its body and its connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// No body, or a body of this many bytes (`Content-Length`).
    Length(u64),
    /// Something this loop leaves to hyper (see the module docs).
    ForHyper,
}

/// Parses the request head at the start of `buffer`: `Ok(None)` while it is incomplete. Once
/// complete, the head's bytes are split off `buffer` and the request's target and header
/// values are slices of them (no copy).
pub(crate) fn take_head(buffer: &mut BytesMut) -> Result<Option<Head>, BadHead> {
    let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut parsed = httparse::Request::new(&mut fields);
    let length = match parsed.parse(buffer) {
        Ok(httparse::Status::Partial) => {
            return if buffer.len() >= MAX_HEAD_BYTES {
                Err(BadHead::TooLarge)
            } else {
                Ok(None)
            };
        }
        Ok(httparse::Status::Complete(length)) => length,
        Err(httparse::Error::TooManyHeaders) => return Err(BadHead::TooLarge),
        Err(_) => return Err(BadHead::Malformed),
    };
    let version = match parsed.version {
        Some(0) => Version::HTTP_10,
        Some(1) => Version::HTTP_11,
        _ => return Err(BadHead::Malformed),
    };
    let method = parsed
        .method
        .and_then(|method| Method::from_bytes(method.as_bytes()).ok())
        .ok_or(BadHead::Malformed)?;
    let target = span_in(buffer, parsed.path.ok_or(BadHead::Malformed)?.as_bytes());
    let mut fields = Vec::with_capacity(parsed.headers.len());
    for field in parsed.headers.iter() {
        let name = HeaderName::from_bytes(field.name.as_bytes()).map_err(|_| BadHead::Malformed)?;
        fields.push((name, span_in(buffer, field.value)));
    }
    let head = buffer.split_to(length).freeze();
    let uri = Uri::from_maybe_shared(head.slice(target)).map_err(|_| BadHead::Malformed)?;
    // Nothing is added on the way: the gateway writes the forwarding fields into the upstream
    // request itself.
    let headers = header_map(&head, fields, 0).ok_or(BadHead::Malformed)?;
    let framing = framing(&method, &headers);
    let mut request = Request::new(Body::empty());
    *request.method_mut() = method;
    *request.uri_mut() = uri;
    *request.version_mut() = version;
    *request.headers_mut() = headers;
    Ok(Some(Head {
        request,
        raw: head,
        framing,
    }))
}

/// How a request's body is framed, or that hyper should serve it.
fn framing(method: &Method, headers: &HeaderMap) -> Framing {
    if method == Method::CONNECT
        || headers.contains_key(UPGRADE)
        || headers.contains_key(EXPECT)
        || headers.contains_key(TRANSFER_ENCODING)
    {
        return Framing::ForHyper;
    }
    let mut lengths = headers.get_all(CONTENT_LENGTH).iter();
    match (lengths.next(), lengths.next()) {
        (None, _) => Framing::Length(0),
        (Some(value), None) => match parse_length(value.as_bytes()) {
            Some(length) if length <= MAX_INLINE_BODY as u64 => Framing::Length(length),
            _ => Framing::ForHyper,
        },
        // Several lengths (alike or not): hyper decides.
        (Some(_), Some(_)) => Framing::ForHyper,
    }
}

/// A `Content-Length` value: digits only.
pub(crate) fn parse_length(value: &[u8]) -> Option<u64> {
    if value.is_empty() || value.len() > 19 || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    value.iter().try_fold(0u64, |length, digit| {
        length.checked_mul(10)?.checked_add(u64::from(digit - b'0'))
    })
}

/// Whether a message whose head is `headers` keeps its connection open: HTTP/1.1 unless it
/// says `Connection: close`, HTTP/1.0 only when it says `Connection: keep-alive`.
pub(crate) fn keeps_alive(version: Version, headers: &HeaderMap) -> bool {
    match version {
        Version::HTTP_11 => !connection_says(headers, b"close"),
        _ => connection_says(headers, b"keep-alive"),
    }
}

/// Whether a `Connection` field of `headers` lists `token`.
fn connection_says(headers: &HeaderMap, token: &[u8]) -> bool {
    headers.get_all(CONNECTION).iter().any(|value| {
        value
            .as_bytes()
            .split(|byte| *byte == b',')
            .any(|part| part.trim_ascii().eq_ignore_ascii_case(token))
    })
}

/// Where a part of a parsed head lies in the buffer the head was parsed from.
pub(crate) fn span_in(buffer: &[u8], part: &[u8]) -> std::ops::Range<usize> {
    let start = part.as_ptr() as usize - buffer.as_ptr() as usize;
    start..start + part.len()
}

/// The header map of a head whose bytes are `head`: each value a slice of them (no copy).
/// `spare` is room kept for fields added later.
pub(crate) fn header_map(
    head: &Bytes,
    fields: Vec<(HeaderName, std::ops::Range<usize>)>,
    spare: usize,
) -> Option<HeaderMap> {
    let mut headers = HeaderMap::with_capacity(fields.len() + spare);
    for (name, value) in fields {
        headers.append(
            name,
            HeaderValue::from_maybe_shared(head.slice(value)).ok()?,
        );
    }
    Some(headers)
}

/// Serves the HTTP/1.x requests of `stream` until the client closes it, a request asks to
/// close, `stop` turns `true` (between requests), or a request needs hyper (then hyper serves
/// the rest of the connection, starting with the bytes already read).
pub(crate) async fn serve(
    mut stream: TcpStream,
    peer: SocketAddr,
    app: PublicApp,
    hand_over: HandOver,
    mut stop: watch::Receiver<bool>,
) {
    let PublicApp { mut router, site } = app;
    let mut input = BytesMut::with_capacity(READ_STEP);
    let mut output = Vec::with_capacity(READ_STEP);
    let read_within = || tokio::time::Instant::now() + HEADER_READ_TIMEOUT;
    let mut deadline = Deadline::at(read_within());
    loop {
        // A client that sends no whole head within the limit (slow-loris), or stays idle that
        // long between requests, is closed.
        deadline.set(read_within());
        let head = tokio::select! {
            head = read_head(&mut stream, &mut input) => head,
            () = deadline.passed() => return,
            _ = stop.wait_for(|stop| *stop) => return,
        };
        let Head {
            mut request,
            raw,
            framing,
        } = match head {
            Ok(head) => head,
            Err(bad) => return bad.refuse(&mut stream).await,
        };
        if !has_one_host(request.version(), request.headers()) {
            return BadHead::Host.refuse(&mut stream).await;
        }
        let length = match framing {
            Framing::Length(length) => length,
            Framing::ForHyper => {
                drop(stop);
                let mut replay = Vec::with_capacity(raw.len() + input.len());
                replay.extend_from_slice(&raw);
                replay.extend_from_slice(&input);
                serve_with_hyper(
                    Rewound::new(Bytes::from(replay), stream),
                    peer,
                    router,
                    hand_over,
                );
                return;
            }
        };
        if length > 0 {
            // `length` ≤ MAX_INLINE_BODY: the body is read whole.
            let Ok(length) = usize::try_from(length) else {
                return;
            };
            deadline.set(read_within());
            let read = tokio::select! {
                read = read_at_least(&mut stream, &mut input, length) => read,
                () = deadline.passed() => return,
            };
            if read.is_err() {
                return;
            }
            *request.body_mut() = Body::from(input.split_to(length).freeze());
        }
        let keep_alive = keeps_alive(request.version(), request.headers()) && !*stop.borrow();
        let head_only = request.method() == Method::HEAD;
        let version = request.version();
        request.extensions_mut().insert(ConnectInfo(peer));
        let response = match &site {
            Some(site) if SiteLane::takes(request.uri().path()) => site.handle(request).await,
            _ => match router.call(request).await {
                Ok(response) => response,
                Err(never) => match never {},
            },
        };
        output.clear();
        match write_response(
            &mut stream,
            &mut output,
            response,
            Answer {
                version,
                head_only,
                keep_alive,
            },
            &mut stop,
        )
        .await
        {
            Ok(true) => {}
            Ok(false) => {
                let _ = stream.shutdown().await;
                return;
            }
            Err(error) => {
                tracing::debug!(%peer, %error, "connection ended with an error");
                return;
            }
        }
        // A connection that held a large answer does not keep its buffer.
        if output.capacity() > MAX_GATHERED_BODY + READ_STEP {
            output = Vec::with_capacity(READ_STEP);
        }
    }
}

/// Reads until `input` holds a whole request head, and takes it.
async fn read_head(stream: &mut TcpStream, input: &mut BytesMut) -> Result<Head, BadHead> {
    loop {
        if !input.is_empty()
            && let Some(head) = take_head(input)?
        {
            return Ok(head);
        }
        input.reserve(READ_STEP);
        match stream.read_buf(input).await {
            Ok(0) | Err(_) => return Err(BadHead::Closed),
            Ok(_) => {}
        }
    }
}

/// Reads until `input` holds at least `wanted` bytes.
async fn read_at_least(
    stream: &mut TcpStream,
    input: &mut BytesMut,
    wanted: usize,
) -> io::Result<()> {
    while input.len() < wanted {
        input.reserve(wanted - input.len());
        if stream.read_buf(input).await? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
    }
    Ok(())
}

/// Serves the rest of a connection with hyper (HTTP/1.1 with upgrades, or HTTP/2), in a task
/// of its own, watched by the graceful shutdown.
pub(crate) fn serve_with_hyper<I>(io: I, peer: SocketAddr, router: Router, hand_over: HandOver)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(
        move |mut request: axum::http::Request<hyper::body::Incoming>| {
            if !has_one_host(request.version(), request.headers()) {
                return Either::Left(std::future::ready(Ok(host_refused())));
            }
            request.extensions_mut().insert(ConnectInfo(peer));
            Either::Right(router.clone().call(request))
        },
    );
    let connection = hand_over
        .builder
        .serve_connection_with_upgrades(TokioIo::new(io), service)
        .into_owned();
    let connection = hand_over.watcher.watch(connection);
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::debug!(%peer, error = %error, "connection ended with an error");
        }
    });
}

/// How an answer is written.
#[derive(Debug, Clone, Copy)]
struct Answer {
    /// The request's version: an HTTP/1.0 client gets no chunked body.
    version: Version,
    /// A `HEAD` request: the head only.
    head_only: bool,
    /// Whether the connection may stay open after the answer.
    keep_alive: bool,
}

/// Writes `response`; `Ok(true)` when the connection may serve another request.
async fn write_response(
    stream: &mut TcpStream,
    output: &mut Vec<u8>,
    response: Response<Body>,
    answer: Answer,
    stop: &mut watch::Receiver<bool>,
) -> io::Result<bool> {
    let (parts, mut body) = response.into_parts();
    let framing = AnswerFraming::of(&parts, &body, answer.version);
    let AnswerFraming {
        bodiless,
        length,
        chunked,
    } = framing;
    // Without a length or chunks, the end of the body is the end of the connection.
    let keep_alive = answer.keep_alive
        && (bodiless || length.is_some() || chunked)
        && !connection_says(&parts.headers, b"close");
    write_head(
        output,
        parts.status,
        &parts.headers,
        framing,
        keep_alive,
        answer.version,
    );
    if bodiless || answer.head_only {
        stream.write_all(output).await?;
        return Ok(keep_alive);
    }
    // A whole small body goes out with the head.
    if let Some(length) = length
        && length <= MAX_GATHERED_BODY as u64
    {
        let mut written = 0u64;
        while let Some(frame) = body.frame().await {
            let Ok(data) = frame
                .map_err(|error| io::Error::other(error.to_string()))?
                .into_data()
            else {
                continue;
            };
            written += data.len() as u64;
            if written > length {
                return Err(io::Error::other(
                    "the answer's body is longer than its length",
                ));
            }
            output.extend_from_slice(&data);
        }
        stream.write_all(output).await?;
        return Ok(keep_alive && written == length);
    }
    stream.write_all(output).await?;
    let mut written = 0u64;
    loop {
        let frame = tokio::select! {
            frame = body.frame() => frame,
            // Shutting down: a long answer (an event stream) ends here.
            _ = stop.wait_for(|stop| *stop) => None,
        };
        match frame {
            None => {
                if chunked {
                    stream.write_all(b"0\r\n\r\n").await?;
                }
                return Ok(keep_alive && length.is_none_or(|length| written == length));
            }
            // A broken answer ends without its last chunk, so the client sees it was cut.
            Some(Err(error)) => {
                tracing::debug!(%error, "the answer's body failed");
                return Ok(false);
            }
            Some(Ok(frame)) => {
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                if data.is_empty() {
                    continue;
                }
                written += data.len() as u64;
                if chunked {
                    output.clear();
                    push_chunk(output, &data);
                    stream.write_all(output).await?;
                } else {
                    stream.write_all(&data).await?;
                }
            }
        }
    }
}

/// How an answer's body is framed on the wire.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AnswerFraming {
    /// No body at all (1xx, 204, 304).
    pub(crate) bodiless: bool,
    /// `Content-Length`, when known (never for a bodiless answer).
    pub(crate) length: Option<u64>,
    /// `Transfer-Encoding: chunked`.
    pub(crate) chunked: bool,
}

impl AnswerFraming {
    /// The framing of an answer with head `parts` and `body` to a client speaking `version`:
    /// its length when declared or known; else chunked for HTTP/1.1 (for HTTP/1.0 the body
    /// ends with the connection).
    pub(crate) fn of(parts: &axum::http::response::Parts, body: &Body, version: Version) -> Self {
        let bodiless = parts.status.is_informational()
            || parts.status == StatusCode::NO_CONTENT
            || parts.status == StatusCode::NOT_MODIFIED;
        let length = if bodiless {
            None
        } else {
            parts
                .headers
                .get(CONTENT_LENGTH)
                .and_then(|value| parse_length(value.as_bytes()))
                .or_else(|| body.size_hint().exact())
        };
        AnswerFraming {
            bodiless,
            length,
            chunked: !bodiless && length.is_none() && version == Version::HTTP_11,
        }
    }
}

/// Appends the status line and header fields of an answer to `out`; the framing and
/// connection fields are this module's, and a `Date` is added when the answer has none.
pub(crate) fn write_head(
    out: &mut Vec<u8>,
    status: StatusCode,
    headers: &HeaderMap,
    framing: AnswerFraming,
    keep_alive: bool,
    version: Version,
) {
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    out.extend_from_slice(b"\r\n");
    for (name, value) in headers {
        if name == CONNECTION || name == CONTENT_LENGTH || name == TRANSFER_ENCODING {
            continue;
        }
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if !headers.contains_key(DATE) {
        out.extend_from_slice(b"date: ");
        http_date::append_now(out);
        out.extend_from_slice(b"\r\n");
    }
    if let Some(length) = framing.length {
        out.extend_from_slice(b"content-length: ");
        out.extend_from_slice(itoa::Buffer::new().format(length).as_bytes());
        out.extend_from_slice(b"\r\n");
    } else if framing.chunked {
        out.extend_from_slice(b"transfer-encoding: chunked\r\n");
    }
    if !keep_alive {
        out.extend_from_slice(b"connection: close\r\n");
    } else if version == Version::HTTP_10 {
        out.extend_from_slice(b"connection: keep-alive\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// Appends one chunk of a chunked body to `out`.
pub(crate) fn push_chunk(out: &mut Vec<u8>, data: &[u8]) {
    let mut size = [0u8; 16];
    let mut start = size.len();
    let mut rest = data.len();
    loop {
        start -= 1;
        size[start] = b"0123456789abcdef"[rest % 16];
        rest /= 16;
        if rest == 0 {
            break;
        }
    }
    out.extend_from_slice(&size[start..]);
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// The `Date` header's value, formatted once a second per thread.
mod http_date {
    use std::cell::RefCell;
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    thread_local! {
        static CACHED: RefCell<(u64, [u8; 29])> = const { RefCell::new((u64::MAX, [0; 29])) };
    }

    /// Appends the current time as an HTTP date (`Sun, 06 Nov 1994 08:49:37 GMT`).
    pub(super) fn append_now(out: &mut Vec<u8>) {
        // `Date` is the wall clock by definition (RFC 9110 §6.6.1), as hyper writes it; no
        // admission decision reads it.
        #[allow(clippy::disallowed_methods)]
        let now = SystemTime::now();
        let second = now
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO)
            .as_secs();
        CACHED.with(|cached| {
            let mut cached = cached.borrow_mut();
            if cached.0 != second {
                let text = httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(second));
                if let Ok(bytes) = <[u8; 29]>::try_from(text.as_bytes()) {
                    *cached = (second, bytes);
                }
            }
            out.extend_from_slice(&cached.1);
        });
    }
}

/// A connection whose first bytes were already read: they are read again first.
pub(crate) struct Rewound {
    prefix: Bytes,
    inner: TcpStream,
}

impl Rewound {
    pub(crate) fn new(prefix: Bytes, inner: TcpStream) -> Rewound {
        Rewound { prefix, inner }
    }
}

impl AsyncRead for Rewound {
    fn poll_read(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if !self.prefix.is_empty() {
            let take = self.prefix.len().min(buf.remaining());
            buf.put_slice(&self.prefix[..take]);
            self.prefix.advance(take);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(context, buf)
    }
}

impl AsyncWrite for Rewound {
    fn poll_write(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(context, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(context, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(context)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(context)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn head(text: &str) -> Result<Option<Head>, BadHead> {
        take_head(&mut BytesMut::from(text.as_bytes()))
    }

    #[test]
    fn a_head_is_taken_once_complete_and_the_rest_stays() {
        let text = "POST /a?b=c HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabcGET";
        let mut buffer = BytesMut::from(&text.as_bytes()[..20]);
        assert!(take_head(&mut buffer).unwrap().is_none());
        let mut buffer = BytesMut::from(text.as_bytes());
        let head = take_head(&mut buffer).unwrap().unwrap();
        assert_eq!(head.request.method(), Method::POST);
        assert_eq!(head.request.uri(), "/a?b=c");
        assert_eq!(head.request.headers()["host"], "x");
        assert_eq!(head.framing, Framing::Length(3));
        assert_eq!(&buffer[..], b"abcGET");
    }

    #[test]
    fn what_hyper_should_serve_is_told_apart() {
        let cases = [
            ("GET / HTTP/1.1\r\n\r\n", Framing::Length(0)),
            ("GET / HTTP/1.0\r\n\r\n", Framing::Length(0)),
            (
                "GET / HTTP/1.1\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n",
                Framing::ForHyper,
            ),
            (
                "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
                Framing::ForHyper,
            ),
            (
                "POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n",
                Framing::ForHyper,
            ),
            ("CONNECT a:443 HTTP/1.1\r\n\r\n", Framing::ForHyper),
            (
                "POST / HTTP/1.1\r\nContent-Length: 70000\r\n\r\n",
                Framing::ForHyper,
            ),
            (
                "POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n",
                Framing::ForHyper,
            ),
            (
                "POST / HTTP/1.1\r\nContent-Length: +1\r\n\r\n",
                Framing::ForHyper,
            ),
            (
                "POST / HTTP/1.1\r\nContent-Length: 12\r\n\r\n",
                Framing::Length(12),
            ),
        ];
        for (text, framing) in cases {
            assert_eq!(head(text).unwrap().unwrap().framing, framing, "{text}");
        }
    }

    #[test]
    fn bad_heads_are_refused() {
        assert_eq!(
            head("GET /x HTTP/1.1\r\nbad header\r\n\r\n").err(),
            Some(BadHead::Malformed)
        );
        assert_eq!(
            head("GET /x HTTP/2.0\r\n\r\n").err(),
            Some(BadHead::Malformed)
        );
        let many: String = (0..=MAX_HEADERS).map(|n| format!("h{n}: v\r\n")).collect();
        assert_eq!(
            head(&format!("GET /x HTTP/1.1\r\n{many}\r\n")).err(),
            Some(BadHead::TooLarge)
        );
        let long = format!("GET /x HTTP/1.1\r\nh: {}", "v".repeat(MAX_HEAD_BYTES));
        assert_eq!(head(&long).err(), Some(BadHead::TooLarge));
    }

    #[test]
    fn one_host_is_needed_in_http_1_1() {
        let check = |text: &str, expected: bool| {
            let request = head(text).unwrap().unwrap().request;
            assert_eq!(
                has_one_host(request.version(), request.headers()),
                expected,
                "{text}"
            );
        };
        check("GET / HTTP/1.1\r\nHost: a\r\n\r\n", true);
        check("GET / HTTP/1.1\r\n\r\n", false);
        check("GET / HTTP/1.1\r\nHost: a\r\nhost: b\r\n\r\n", false);
        check("GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n", false);
        check("GET / HTTP/1.0\r\n\r\n", true);
        check("GET / HTTP/1.0\r\nHost: a\r\nHost: b\r\n\r\n", false);
        let answer = BadHead::Host.answer().unwrap();
        let text = std::str::from_utf8(answer).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.contains(&format!("content-length: {}\r\n", body.len())));
        let problem: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(problem["code"], "invalid_host");
    }

    #[test]
    fn keep_alive_follows_the_version_and_the_connection_field() {
        let wants = |text: &str| {
            let request = head(text).unwrap().unwrap().request;
            keeps_alive(request.version(), request.headers())
        };
        assert!(wants("GET / HTTP/1.1\r\n\r\n"));
        assert!(!wants("GET / HTTP/1.1\r\nConnection: Close\r\n\r\n"));
        assert!(!wants("GET / HTTP/1.1\r\nConnection: te, close\r\n\r\n"));
        assert!(!wants("GET / HTTP/1.0\r\n\r\n"));
        assert!(wants("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"));
    }

    #[test]
    fn the_head_is_kept_as_it_came() {
        let text = "POST /a?b=c HTTP/1.1\r\nHost: x\r\nUpgrade: y\r\n\r\nrest";
        let mut buffer = BytesMut::from(text.as_bytes());
        let head = take_head(&mut buffer).unwrap().unwrap();
        assert_eq!(&head.raw[..], &text.as_bytes()[..text.len() - 4]);
        assert_eq!(head.framing, Framing::ForHyper);
    }

    #[test]
    fn numbers_on_the_wire() {
        let mut out = Vec::new();
        push_chunk(&mut out, b"data: x\n\n");
        assert_eq!(out, b"9\r\ndata: x\n\n\r\n");
        out.clear();
        push_chunk(&mut out, &[b'a'; 26]);
        assert_eq!(out[..4], *b"1a\r\n");
        assert_eq!(parse_length(b"0"), Some(0));
        assert_eq!(parse_length(b"65536"), Some(65_536));
        assert_eq!(parse_length(b""), None);
        assert_eq!(parse_length(b"1 "), None);
        assert_eq!(parse_length(b"99999999999999999999"), None);
    }

    #[test]
    fn an_answer_head_carries_its_framing_and_a_date() {
        let mut headers = HeaderMap::new();
        headers.insert("content-type", HeaderValue::from_static("text/plain"));
        headers.insert(CONTENT_LENGTH, HeaderValue::from_static("99"));
        let mut out = Vec::new();
        write_head(
            &mut out,
            StatusCode::OK,
            &headers,
            AnswerFraming {
                bodiless: false,
                length: Some(5),
                chunked: false,
            },
            false,
            Version::HTTP_11,
        );
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ndate: "));
        assert!(text.ends_with(" GMT\r\ncontent-length: 5\r\nconnection: close\r\n\r\n"));
    }
}
