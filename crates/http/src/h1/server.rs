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
//! bodies sent chunked or larger than [`anteroom_h1::MAX_INLINE_BODY`] (streamed by hyper with bounded
//! memory), and an unusual `Content-Length`. HTTP/2 never reaches this loop (the accept loop
//! sends it to hyper), nor does a connection opening with an event stream (`stream.rs`).
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
use axum::http::header::{CONNECTION, CONTENT_TYPE};
use axum::http::{HeaderValue, Method, Response, StatusCode, Version};
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

use anteroom_h1::{
    AnswerFraming, BadHead, Framing, RequestHead, connection_says, has_one_host, keeps_alive,
    push_chunk, take_head,
};

use super::HEADER_READ_TIMEOUT;
use crate::PublicApp;
use crate::deadline::Deadline;
use crate::gateway::SiteLane;

/// How much the read buffer grows by at a time.
const READ_STEP: usize = 4096;

/// Answers whose whole body is known and at most this large are written with their head in one
/// write; larger or streamed bodies are written as their frames come.
const MAX_GATHERED_BODY: usize = 64 * 1024;

/// What a connection handed to hyper needs.
pub(crate) struct HandOver {
    pub(crate) builder: Arc<Builder<hyper_util::rt::TokioExecutor>>,
    pub(crate) watcher: Watcher,
}

/// The answer to a request without one `Host`, for hyper: 400 problem+json, and the
/// connection closed after it.
fn host_refused() -> Response<Body> {
    let mut response = Response::new(Body::from(BadHead::HOST_PROBLEM));
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
    if let Some(answer) = bad.answer() {
        let _ = stream.write_all(answer).await;
        let _ = stream.shutdown().await;
    }
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
    let PublicApp {
        mut router, site, ..
    } = app;
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
        let RequestHead {
            request,
            raw,
            framing,
        } = match head {
            Ok(head) => head,
            Err(bad) => return refuse(&bad, &mut stream).await,
        };
        let mut request = request.map(|()| Body::empty());
        if !has_one_host(request.version(), request.headers()) {
            return refuse(&BadHead::Host, &mut stream).await;
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
async fn read_head(stream: &mut TcpStream, input: &mut BytesMut) -> Result<RequestHead, BadHead> {
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
    let framing = AnswerFraming::new(
        parts.status,
        &parts.headers,
        body.size_hint().exact(),
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
        &parts.headers,
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
                // An answer longer than the length its head declared would put bytes on the
                // connection that the client reads as the next answer: cut it off instead.
                if length.is_some_and(|length| written > length) {
                    return Err(io::Error::other(
                        "the answer's body is longer than its length",
                    ));
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
