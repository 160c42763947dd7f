//! HTTP/1.x connections served by a keep-alive loop of our own instead of hyper's server.
//!
//! A waiting room's busiest requests are small: joins, status polls, and proxied requests
//! carrying a pass. For those, hyper's general HTTP/1 server (its dispatcher, the channel that
//! carries a request body, a buffer pair per connection, a boxed service call) cost more than
//! the room's own work (docs/benchmarks.md). This loop reads each request head into one
//! buffer reused for the connection's life, parses it with `anteroom_h1`, builds the request
//! without copying the head's bytes (header values and the target are slices of it), hands it
//! to the router (or, in front of a site, straight to the gateway's lane for paths the router
//! would send there), and writes the answer's head and a small body in one write.
//!
//! What it does not serve it hands to hyper together with the bytes it already read, and hyper
//! serves the rest of the connection: upgrades (WebSocket), `CONNECT`, `Expect`, request
//! bodies sent chunked or larger than [`anteroom_h1::MAX_INLINE_BODY`] (streamed by hyper with bounded
//! memory), and an unusual `Content-Length`. HTTP/2 never reaches this loop (the accept loop
//! sends it to hyper), nor does a connection opening with an event stream (`stream.rs`).
//!
//! A request without exactly one `Host` (HTTP/1.1) or whose framing fields could be read more
//! than one way is answered 400 and its connection closed, by this loop and by hyper's service
//! alike (SPEC §14.4, [`anteroom_h1::check_request`]): the route matched here, the body a proxy
//! in front delimits and the virtual host the origin serves must all be the same.
//!
//! A request to the public listener whose client leaves before its answer is not answered:
//! while the answer is pending, the loop watches the client's side ([`unless_abandoned`]), and
//! an end of file (a half-close too, as nginx reads one for a proxied request) or a reset drops
//! the answer's future (a join queued for Redis is withdrawn, one sent is taken back, the
//! origin's exchange is closed) and the connection, counted as abandoned. hyper's HTTP/1 server
//! does the same for what it serves (it reads the connection while a request waits), and its
//! HTTP/2 server drops a request whose stream or connection ends.
//!
//! Timeouts (`[server]`, SPEC §14.4): a connection's first head must arrive within
//! `header_timeout` of the accept; a kept-alive connection waits `idle_timeout` for the first
//! byte of its next request, which then has `header_timeout` to complete its head; a body
//! read here fails when no byte arrives for `body_timeout` (per read, as nginx's
//! `client_body_timeout`), its buffer growing as bytes come rather than reserved up front for
//! the declared length; writes are timed by [`ClientIo`]. Under hyper, its
//! `header_read_timeout` is `header_timeout` (timed from the end of the previous answer, so
//! the wait and the head share it), [`ClientIo::watch_idle`] adds `idle_timeout`, and
//! [`TimedBody`] gives request bodies `body_timeout`.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::header::{CONNECTION, CONTENT_TYPE};
use axum::http::{HeaderValue, Method, Response, StatusCode, Version};
use bytes::{Buf as _, Bytes, BytesMut};
use http_body::Body as _;
use http_body_util::BodyExt as _;
use hyper_util::rt::TokioIo;
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::Watcher;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tower::Service as _;

use anteroom_core::config::ConnectionLimits;
use anteroom_h1::{
    AnswerFraming, BadHead, Framing, PassedFields, RequestHead, check_request, connection_says,
    keeps_alive, push_chunk, take_head,
};

use super::bodies::{Holding, TimedBody};
use super::client_io::{ClientIo, InFlight};
use super::delivery::Deliveries;
use super::sentry::Sentry;
use crate::client_scheme::ClientScheme;
use crate::deadline::Deadline;
use crate::gateway::SiteLane;
use crate::public_app::PublicApp;
use crate::request_metrics::{Listener, RequestMetrics};
use crate::server_limits::{AddressPermit, ServerLimits, over_address_cap};
use crate::visitor::Visitor;
use anteroom_api::ratelimit::resolve_client_ip;

/// A client connection as the own loop holds it: plain TCP, or TLS over it.
pub(crate) type Client<S = TcpStream> = ClientIo<S>;

/// What a client connection runs on.
pub(crate) trait Transport: AsyncRead + AsyncWrite + Unpin + Send + 'static {
    /// The TCP connection itself when nothing sits between it and HTTP: a kept-alive
    /// connection then waits for its next request without a read buffer.
    fn as_tcp(&self) -> Option<&TcpStream>;

    /// Plain HTTP or HTTP over TLS.
    fn scheme(&self) -> ClientScheme;
}

impl Transport for TcpStream {
    fn as_tcp(&self) -> Option<&TcpStream> {
        Some(self)
    }

    fn scheme(&self) -> ClientScheme {
        ClientScheme::Http
    }
}

/// A TLS connection as the listener accepts it.
pub(crate) type TlsClient = tokio_rustls::server::TlsStream<TcpStream>;

impl Transport for TlsClient {
    /// rustls may hold bytes it already decrypted: only a read tells whether more came.
    fn as_tcp(&self) -> Option<&TcpStream> {
        None
    }

    fn scheme(&self) -> ClientScheme {
        ClientScheme::Https
    }
}

/// How much the read buffer grows by at a time.
const READ_STEP: usize = 4096;

/// Answers whose whole body is known and at most this large are written with their head in one
/// write; larger or streamed bodies are written as their frames come.
const MAX_GATHERED_BODY: usize = 64 * 1024;

/// What a connection handed to hyper needs.
pub(crate) struct HandOver {
    pub(crate) builder: Arc<Builder<hyper_util::rt::TokioExecutor>>,
    pub(crate) watcher: Watcher,
    pub(crate) limits: ServerLimits,
    /// The listener's request series.
    pub(crate) requests: &'static RequestMetrics,
}

/// The answer to a request hyper parsed but [`check_request`] refuses: 400 problem+json, and
/// the connection closed after it.
fn refused_by_hyper(problem: &'static str) -> Response<Body> {
    let mut response = Response::new(Body::from(problem));
    *response.status_mut() = StatusCode::BAD_REQUEST;
    let headers = response.headers_mut();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    headers.insert(CONNECTION, HeaderValue::from_static("close"));
    response
}

/// Sends the answer to a refused head (if any) and closes the connection.
pub(crate) async fn refuse<S: AsyncWrite + Unpin>(bad: &BadHead, stream: &mut S) {
    // Whatever the client sent after the refused head is not read.
    if let Some(answer) = bad.answer() {
        let _ = stream.write_all(answer).await;
        let _ = stream.shutdown().await;
    }
}

/// Serves the HTTP/1.x requests of `stream` until the client closes it, a request asks to
/// close, `stop` turns `true` (between requests), or a request needs hyper (then hyper serves
/// the rest of the connection, starting with the bytes already read).
pub(crate) async fn serve<S: Transport>(
    mut stream: Client<S>,
    peer: SocketAddr,
    app: PublicApp,
    hand_over: HandOver,
    mut stop: watch::Receiver<bool>,
) {
    let PublicApp {
        mut router,
        site,
        listener,
        ..
    } = app;
    // Only the public listener's requests are dropped when their client leaves: an admin
    // change goes on to its audit event once begun (few requests, and a change without its
    // event would be worse than the work saved).
    let watched = listener == Listener::Public;
    let timeouts = hand_over.limits.timeouts;
    let scheme = stream.get_ref().scheme();
    let mut input = BytesMut::new();
    let mut output = Vec::with_capacity(READ_STEP);
    // The first head is timed from the accept.
    let mut deadline = Deadline::at(within(timeouts.header_timeout));
    // The server's stop, waited for by one future for the connection's life: a wait begun
    // for each request put a waiter on the watch's list and took it off again (about 0.6k
    // instructions a request). It ends when the server stops or its sender is gone.
    let mut stopping = stop.clone();
    let mut stopped = std::pin::pin!(async move {
        let _ = stopping.wait_for(|stop| *stop).await;
    });
    let mut first = true;
    loop {
        let head = next_head(
            &mut stream,
            &mut input,
            &mut deadline,
            stopped.as_mut(),
            timeouts,
            first,
        );
        let Some(head) = head.await else { return };
        first = false;
        let head = match head {
            Ok(head) => head,
            Err(bad) => return refuse(&bad, &mut stream).await,
        };
        let started = std::time::Instant::now();
        let mut request = head.request.map(|()| Body::empty());
        let length = match head.framing {
            Framing::Length(length) => length,
            Framing::ForHyper => {
                drop(stop);
                return hand_to_hyper(stream, &head.raw, &input, (peer, scheme), router, hand_over);
            }
        };
        if length > 0 {
            let read = read_inline_body(&mut stream, &mut input, length, &mut deadline, timeouts);
            let Some(body) = read.await else { return };
            *request.body_mut() = body;
        }
        let answer = Answer::to(&request, &stop);
        // The per-address permit is held until the answer is written.
        let limits = &hand_over.limits;
        // Pinned here and watched through a reference: the answer's future is large, and
        // moving it into the watch's future cost a copy of it a request.
        let answering = std::pin::pin!(answer_request(
            &mut router,
            &site,
            limits,
            (peer, scheme),
            request
        ));
        let Some((response, passed, _permit)) =
            unless_abandoned(answering, &mut stream, &mut input, watched).await
        else {
            // The client is gone: the answer's work was dropped unfinished (a queued join
            // withdrawn, a sent one taken back, the origin's exchange closed) and nobody is
            // left to answer.
            hand_over.requests.abandoned();
            return;
        };
        hand_over.requests.answered(response.status(), started);
        output.clear();
        let answered = (response, passed);
        let written = write_response(&mut stream, &mut output, answered, answer, &mut stop);
        if !goes_on(written.await, &mut stream, peer).await {
            return;
        }
        release_large_buffers(&mut input, &mut output);
    }
}

/// Whether the connection serves another request after an answer was written (`written`):
/// if not, it is shut down, or, when the write failed, left.
#[inline]
async fn goes_on<S: Transport>(
    written: io::Result<bool>,
    stream: &mut Client<S>,
    peer: SocketAddr,
) -> bool {
    match written {
        Ok(true) => true,
        Ok(false) => {
            let _ = stream.shutdown().await;
            false
        }
        Err(error) => {
            tracing::debug!(%peer, %error, "connection ended with an error");
            false
        }
    }
}

/// A deadline `timeout` from now.
#[inline]
fn within(timeout: std::time::Duration) -> tokio::time::Instant {
    tokio::time::Instant::now() + timeout
}

/// The connection's next request head; `None` when the connection is to end without an answer:
/// the client closed it or kept it idle past `idle_timeout`, sent no whole head within the
/// deadline (slow-loris), or the server is stopping (`stopped` ended; it is not polled
/// again then, as the connection ends).
#[inline]
async fn next_head<S: Transport>(
    stream: &mut Client<S>,
    input: &mut BytesMut,
    deadline: &mut Deadline,
    mut stopped: Pin<&mut impl Future<Output = ()>>,
    timeouts: ConnectionLimits,
    first: bool,
) -> Option<Result<RequestHead, BadHead>> {
    if !first && input.is_empty() {
        // Kept alive: the next request's first byte must come within the idle timeout.
        deadline.set(within(timeouts.idle_timeout));
        // `biased`: polled in the order written (each branch ends or waits on its own, so
        // none starves the others), which spares the random start `select!` draws for
        // every request.
        tokio::select! {
            biased;
            came = next_bytes(stream, input) => if !came { return None },
            () = deadline.passed() => return None,
            () = stopped.as_mut() => return None,
        }
        deadline.set(within(timeouts.header_timeout));
    }
    tokio::select! {
        biased;
        head = read_head(stream, input) => Some(head),
        () = deadline.passed() => None,
        () = stopped => None,
    }
}

/// Hands the connection to hyper, which reads the bytes already read (the head `raw` and what
/// followed it in `input`) first.
fn hand_to_hyper<S: Transport>(
    mut stream: Client<S>,
    raw: &[u8],
    input: &[u8],
    client: (SocketAddr, ClientScheme),
    router: Router,
    hand_over: HandOver,
) {
    let mut replay = Vec::with_capacity(raw.len() + input.len());
    replay.extend_from_slice(raw);
    replay.extend_from_slice(input);
    let requests = Arc::new(InFlight::default());
    stream.watch_idle(hand_over.limits.timeouts.idle_timeout, requests.clone());
    let rewound = Rewound::new(Bytes::from(replay), stream);
    serve_with_hyper(rewound, client, router, hand_over, requests);
}

/// Reads a body of `length` bytes (at most [`anteroom_h1::MAX_INLINE_BODY`]) whole; `None`
/// when the connection broke or went quiet for `body_timeout`.
#[inline]
async fn read_inline_body<S: Transport>(
    stream: &mut Client<S>,
    input: &mut BytesMut,
    length: u64,
    deadline: &mut Deadline,
    timeouts: ConnectionLimits,
) -> Option<Body> {
    let length = usize::try_from(length).ok()?;
    read_body(stream, input, length, deadline, timeouts.body_timeout)
        .await
        .ok()?;
    Some(Body::from(input.split_to(length).freeze()))
}

/// Answers the request from `peer` over `scheme`: in front of a site, paths the router would send to the
/// gateway go to its lane directly (with the origin's fields the lane passes as read, and the
/// visitor beside the request), the rest to the router (the visitor in the request's
/// extensions, where the router's handlers read it). Behind a trusted proxy, the per-address cap counts the forwarded client's
/// requests: the permit is returned to be held while the answer is written.
#[inline]
async fn answer_request(
    router: &mut Router,
    site: &Option<SiteLane>,
    limits: &ServerLimits,
    (peer, scheme): (SocketAddr, ClientScheme),
    mut request: axum::http::Request<Body>,
) -> (Response<Body>, PassedFields, Option<AddressPermit>) {
    let permit = match forwarded_client_permit(limits, peer, &request) {
        Err(OverAddressCap) => return (over_address_cap(), PassedFields::default(), None),
        Ok(permit) => permit,
    };
    let mut visitor = Visitor::new(peer, scheme);
    let (response, passed) = match site {
        Some(site) if SiteLane::takes(request.uri().path()) => {
            site.handle(request, &mut visitor).await
        }
        _ => {
            visitor.mark(request.extensions_mut());
            match router.call(request).await {
                Ok(response) => (response, PassedFields::default()),
                Err(never) => match never {},
            }
        }
    };
    (response, passed, permit)
}

/// `answer` unless the client closes its side of the connection before it is ready: then
/// `None`, and `answer` is dropped unfinished. A close is an end of file (a half-close too,
/// as nginx reads it for a proxied request) or a broken connection. Unless `watched` (the
/// admin listener), the client's side is not looked at and `answer` always runs to its end.
///
/// The answer is polled first, so one ready at once never touches the connection. While it
/// waits, the client's side is watched until it sends anything: bytes that come (a pipelined
/// next request) are the client's, still there, and the watch ends, so a client cannot keep
/// the loop reading. On plain TCP the watch only peeks, leaving them in the socket; over TLS,
/// where only a read sees a close, the one byte read is kept at the end of `input` (empty
/// while watching: bytes already read after the request end the watch before it starts).
#[inline]
async fn unless_abandoned<S: Transport, T>(
    mut answer: Pin<&mut impl Future<Output = T>>,
    stream: &mut Client<S>,
    input: &mut BytesMut,
    watched: bool,
) -> Option<T> {
    let mut watching = watched && input.is_empty();
    std::future::poll_fn(|context| {
        if let Poll::Ready(answered) = answer.as_mut().poll(context) {
            return Poll::Ready(Some(answered));
        }
        if watching {
            match poll_client_side(stream, input, context) {
                Poll::Pending => {}
                Poll::Ready(ClientSide::Sent) => watching = false,
                Poll::Ready(ClientSide::Closed) => return Poll::Ready(None),
            }
        }
        Poll::Pending
    })
    .await
}

/// What the client's side of a connection showed while an answer waited.
enum ClientSide {
    /// Bytes: the client is there.
    Sent,
    /// An end of file or a broken connection.
    Closed,
}

/// Polls the client's side of the connection for one byte (see [`unless_abandoned`]).
fn poll_client_side<S: Transport>(
    stream: &mut Client<S>,
    input: &mut BytesMut,
    context: &mut Context<'_>,
) -> Poll<ClientSide> {
    let mut byte = [0u8; 1];
    let mut buffer = ReadBuf::new(&mut byte);
    let polled = match stream.get_ref().as_tcp() {
        Some(tcp) => tcp.poll_peek(context, &mut buffer).map_ok(|_peeked| ()),
        None => {
            let read = Pin::new(&mut *stream).poll_read(context, &mut buffer);
            // A read byte is the start of the next request: it is kept in order.
            input.extend_from_slice(buffer.filled());
            read
        }
    };
    match polled {
        Poll::Pending => Poll::Pending,
        Poll::Ready(Ok(())) if !buffer.filled().is_empty() => Poll::Ready(ClientSide::Sent),
        Poll::Ready(_) => Poll::Ready(ClientSide::Closed),
    }
}

/// Drops buffers grown past their usual size: a connection that held a large answer does not
/// keep its output buffer, nor one that read a large body its input buffer while it waits for
/// the next request.
#[inline]
fn release_large_buffers(input: &mut BytesMut, output: &mut Vec<u8>) {
    if output.capacity() > MAX_GATHERED_BODY + READ_STEP {
        *output = Vec::with_capacity(READ_STEP);
    }
    if input.is_empty() && input.capacity() > READ_STEP {
        *input = BytesMut::new();
    }
}

/// A forwarded client holds its per-address cap of requests in flight.
struct OverAddressCap;

/// The count of a request forwarded by a trusted proxy against its client's per-address cap:
/// `Ok(None)` when the peer is no trusted proxy.
fn forwarded_client_permit<B>(
    limits: &ServerLimits,
    peer: SocketAddr,
    request: &axum::http::Request<B>,
) -> Result<Option<AddressPermit>, OverAddressCap> {
    if !limits.is_from_proxy(peer) {
        return Ok(None);
    }
    let client = resolve_client_ip(request.headers(), peer.ip(), limits.trusted_proxies());
    match limits.admit_request(client) {
        Some(permit) => Ok(Some(permit)),
        None => Err(OverAddressCap),
    }
}

/// Waits for a kept-alive connection's next bytes: on plain TCP without reading them (an idle
/// connection holds no buffer), otherwise by reading them into `input`. `false` when the
/// connection closed or broke.
async fn next_bytes<S: Transport>(stream: &mut Client<S>, input: &mut BytesMut) -> bool {
    if let Some(tcp) = stream.get_ref().as_tcp() {
        return tcp.readable().await.is_ok();
    }
    input.reserve(READ_STEP);
    matches!(stream.read_buf(input).await, Ok(read) if read > 0)
}

/// Reads until `input` holds a whole request head, and takes it.
async fn read_head<S: Transport>(
    stream: &mut Client<S>,
    input: &mut BytesMut,
) -> Result<RequestHead, BadHead> {
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

/// Reads until `input` holds at least `wanted` bytes, growing it as they come (a declared
/// length reserves nothing before its bytes arrive); fails when no byte arrives for
/// `timeout`.
async fn read_body<S: Transport>(
    stream: &mut Client<S>,
    input: &mut BytesMut,
    wanted: usize,
    deadline: &mut Deadline,
    timeout: std::time::Duration,
) -> io::Result<()> {
    while input.len() < wanted {
        input.reserve(READ_STEP.min(wanted - input.len()));
        deadline.set(tokio::time::Instant::now() + timeout);
        tokio::select! {
            biased;
            read = stream.read_buf(input) => if read? == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            },
            () = deadline.passed() => return Err(io::ErrorKind::TimedOut.into()),
        }
    }
    Ok(())
}

/// Serves the rest of a connection with hyper (HTTP/1.1 with upgrades, or HTTP/2), in a task
/// of its own, watched by the graceful shutdown. `requests` is what the connection's
/// [`ClientIo`] watches for idleness: the service counts every request in it until its answer's
/// body is done.
pub(crate) fn serve_with_hyper<I>(
    io: I,
    (peer, scheme): (SocketAddr, ClientScheme),
    router: Router,
    hand_over: HandOver,
    requests: Arc<InFlight>,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let limits = hand_over.limits.clone();
    let write_timeout = limits.timeouts.write_timeout;
    let counted = hand_over.requests;
    let requests_watched = requests.clone();
    let deliveries = Deliveries::new();
    let answers = deliveries.clone();
    let service =
        hyper::service::service_fn(move |request: axum::http::Request<hyper::body::Incoming>| {
            let started = std::time::Instant::now();
            let in_flight = requests.start();
            let requests = requests.clone();
            let checked =
                check_for_hyper(&limits, peer, &request).map_err(HyperRefusal::into_response);
            let body_timeout = limits.timeouts.body_timeout;
            let mut router = router.clone();
            let answers = answers.clone();
            // Only HTTP/2 answers are watched: an HTTP/1 client that stops taking an answer
            // stalls a write (timed by `ClientIo`), and hyper takes an HTTP/1 answer's body in
            // large pieces, which a slow but honest reader may take longer than the bound to
            // drain. A HEAD's answer carries no body for hyper to ask for.
            let watched = request.version() == Version::HTTP_2 && request.method() != Method::HEAD;
            async move {
                let permit = match checked {
                    Ok(permit) => permit,
                    Err(refused) => {
                        counted.answered(refused.status(), started);
                        return Ok(refused);
                    }
                };
                // The sentry reads nothing after an upgrade's or `CONNECT`'s head (after a
                // switch, the bytes are not HTTP/1): one not switched ends the connection.
                // (HTTP/2's extended `CONNECT` streams share no bytes with the next request.)
                let switches = request.version() <= Version::HTTP_11
                    && (request.method() == Method::CONNECT
                        || request.headers().contains_key(axum::http::header::UPGRADE));
                let mut request = request.map(|body| Body::new(TimedBody::new(body, body_timeout)));
                request.extensions_mut().insert(ConnectInfo(peer));
                if scheme == ClientScheme::Https {
                    request.extensions_mut().insert(scheme);
                }
                // hyper drops this future when the client closes the connection first.
                let unanswered = Unanswered(counted);
                let mut response = router.call(request).await?;
                std::mem::forget(unanswered);
                counted.answered(response.status(), started);
                if response.status() == StatusCode::SWITCHING_PROTOCOLS {
                    requests.switched();
                } else if switches {
                    response
                        .headers_mut()
                        .insert(CONNECTION, HeaderValue::from_static("close"));
                }
                let bodiless = !watched
                    || response.status().is_informational()
                    || matches!(
                        response.status(),
                        StatusCode::NO_CONTENT | StatusCode::NOT_MODIFIED
                    );
                Ok::<_, std::convert::Infallible>(response.map(|body| {
                    let body = Holding::new(body, (in_flight, permit));
                    if bodiless {
                        Body::new(body)
                    } else {
                        // Watched for the client taking it (an HTTP/2 client can stop taking
                        // answers without stopping a write).
                        Body::new(answers.watch(body))
                    }
                }))
            }
        });
    let connection = hand_over
        .builder
        .serve_connection_with_upgrades(TokioIo::new(Sentry::new(io, requests_watched)), service)
        .into_owned();
    let connection = hand_over.watcher.watch(connection);
    tokio::spawn(async move {
        tokio::select! {
            ended = connection => {
                if let Err(error) = ended {
                    tracing::debug!(%peer, error = %error, "connection ended with an error");
                }
            }
            // Dropping the connection closes it, its answers and what they hold.
            () = deliveries.stalled(write_timeout) => {
                tracing::debug!(%peer, "closing a connection whose client took no answer for the write timeout");
            }
        }
    });
}

/// Counts a request hyper serves as abandoned if it is dropped before its answer is ready
/// (forgotten once it is).
struct Unanswered(&'static RequestMetrics);

impl Drop for Unanswered {
    fn drop(&mut self) {
        self.0.abandoned();
    }
}

/// What the own loop checks before a request is served, for a request hyper parsed: its
/// framing and host ([`check_request`]) and the per-address cap; the refusal to send if one
/// fails.
fn check_for_hyper<B>(
    limits: &ServerLimits,
    peer: SocketAddr,
    request: &axum::http::Request<B>,
) -> Result<Option<AddressPermit>, HyperRefusal> {
    match check_request(request.version(), request.headers()) {
        Err(bad) => Err(HyperRefusal::Head(
            bad.problem().unwrap_or(BadHead::FRAMING_PROBLEM),
        )),
        Ok(()) => forwarded_client_permit(limits, peer, request)
            .map_err(|OverAddressCap| HyperRefusal::OverAddressCap),
    }
}

/// Why a request hyper parsed is refused.
enum HyperRefusal {
    /// Its head: the problem+json to answer.
    Head(&'static str),
    OverAddressCap,
}

impl HyperRefusal {
    fn into_response(self) -> Response<Body> {
        match self {
            HyperRefusal::Head(problem) => refused_by_hyper(problem),
            HyperRefusal::OverAddressCap => over_address_cap(),
        }
    }
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

impl Answer {
    /// How the answer to `request` is written; the connection is not kept alive once the
    /// server is stopping.
    #[inline]
    fn to<B>(request: &axum::http::Request<B>, stop: &watch::Receiver<bool>) -> Answer {
        Answer {
            version: request.version(),
            head_only: request.method() == Method::HEAD,
            keep_alive: keeps_alive(request.version(), request.headers()) && !*stop.borrow(),
        }
    }
}

/// Writes `response` with the origin's fields `passed` as read; `Ok(true)` when the
/// connection may serve another request.
async fn write_response<S: Transport>(
    stream: &mut Client<S>,
    output: &mut Vec<u8>,
    (response, passed): (Response<Body>, PassedFields),
    answer: Answer,
    stop: &mut watch::Receiver<bool>,
) -> io::Result<bool> {
    let (parts, body) = response.into_parts();
    // The answer to a HEAD has an empty body but says the length a GET would have had.
    let known_length = if answer.head_only {
        None
    } else {
        body.size_hint().exact()
    };
    let framing = AnswerFraming::new(
        parts.status,
        &parts.headers,
        &passed,
        known_length,
        answer.version,
    );
    let AnswerFraming {
        bodiless,
        length,
        chunked,
    } = framing;
    // Without a length or chunks, the end of the body is the end of the connection.
    let keep_alive = answer.keep_alive
        && (bodiless || length.is_some() || chunked)
        && !connection_says(&parts.headers, b"close");
    framing.write_head(
        output,
        parts.status,
        &passed,
        &parts.headers,
        keep_alive,
        answer.version,
    );
    // The head is written: the origin's head it was read from is let go before the body.
    drop(passed);
    if bodiless || answer.head_only {
        stream.write_all(output).await?;
        return Ok(keep_alive);
    }
    // A whole small body goes out with the head.
    if let Some(length) = length
        && length <= MAX_GATHERED_BODY as u64
    {
        let whole = gather_body(body, output, length).await?;
        stream.write_all(output).await?;
        return Ok(keep_alive && whole);
    }
    stream.write_all(output).await?;
    let whole = stream_body(stream, output, body, length, chunked, stop).await?;
    Ok(keep_alive && whole)
}

/// Appends a body of at most `length` bytes to `output` (after the head); `Ok(false)` when it
/// was shorter than `length`.
#[inline]
async fn gather_body(mut body: Body, output: &mut Vec<u8>, length: u64) -> io::Result<bool> {
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
            return Err(longer_than_declared());
        }
        output.extend_from_slice(&data);
    }
    Ok(written == length)
}

/// Writes a body as its frames come (in chunks when `chunked`), until it ends or the server
/// stops; `Ok(true)` when it ended whole and the connection may go on.
async fn stream_body<S: Transport>(
    stream: &mut Client<S>,
    output: &mut Vec<u8>,
    mut body: Body,
    length: Option<u64>,
    chunked: bool,
    stop: &mut watch::Receiver<bool>,
) -> io::Result<bool> {
    let mut written = 0u64;
    loop {
        let frame = tokio::select! {
            frame = body.frame() => frame,
            // Shutting down: a long answer (an event stream) ends here.
            _ = stop.wait_for(|stop| *stop) => None,
        };
        let data = match frame {
            None => {
                if chunked {
                    stream.write_all(b"0\r\n\r\n").await?;
                }
                return Ok(length.is_none_or(|length| written == length));
            }
            // A broken answer ends without its last chunk, so the client sees it was cut.
            Some(Err(error)) => {
                tracing::debug!(%error, "the answer's body failed");
                return Ok(false);
            }
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) if !data.is_empty() => data,
                _ => continue,
            },
        };
        written += data.len() as u64;
        // An answer longer than the length its head declared would put bytes on the
        // connection that the client reads as the next answer: cut it off instead.
        if length.is_some_and(|length| written > length) {
            return Err(longer_than_declared());
        }
        if chunked {
            output.clear();
            push_chunk(output, &data);
            stream.write_all(output).await?;
        } else {
            stream.write_all(&data).await?;
        }
    }
}

fn longer_than_declared() -> io::Error {
    io::Error::other("the answer's body is longer than its length")
}

/// A connection whose first bytes were already read: they are read again first.
pub(crate) struct Rewound<S> {
    prefix: Bytes,
    inner: S,
}

impl<S> Rewound<S> {
    pub(crate) fn new(prefix: Bytes, inner: S) -> Rewound<S> {
        Rewound { prefix, inner }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Rewound<S> {
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

impl<S: AsyncWrite + Unpin> AsyncWrite for Rewound<S> {
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
