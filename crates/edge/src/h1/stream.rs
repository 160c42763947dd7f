//! A small HTTP/1.1 connection handler for event streams: connections whose first request is
//! `GET /_anteroom/v1/rooms/{room}/events`.
//!
//! hyper keeps an 8 KiB read buffer and an 8 KiB write buffer for each HTTP/1 connection for as
//! long as the connection lives, and a waiting visitor's stream lives for minutes or hours: with
//! thousands of streams those buffers were most of a node's memory (docs/benchmarks.md, "SSE
//! soak"). The accept loop peeks at a new connection's first bytes ([`is_event_stream_request`]);
//! when they open an event stream request, [`serve`] reads the request head into a buffer sized
//! to it, parses it with `anteroom_h1`, and hands the request to the same router as every other
//! request (rate limits, the ticket check, the 503 at the node's stream limit: all unchanged).
//! It writes the answer's head, then each event as one chunk from a buffer that lives only for
//! that write, watches the socket for the client leaving, and closes the connection when the
//! answer ends (`Connection: close`), or ends the stream cleanly when the server shuts down.
//!
//! Everything else goes to `server.rs` (or hyper): other requests, HTTP/2, a first segment too
//! short to tell, and a stream asked for on a connection that already served a request.

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Request, Response, Version};
use bytes::BytesMut;
use http_body::Body as _;
use http_body_util::BodyExt as _;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tower::Service as _;

use anteroom_h1::{AnswerFraming, BadHead, PassedFields, push_chunk, take_head};

use super::server::{Client, refuse};
use crate::request_metrics::RequestMetrics;

/// How much the head buffer grows by at a time: small, as the stream keeps its connection for
/// long.
const READ_STEP: usize = 1024;

/// How a request line opening an event stream starts, and what follows the room.
const PREFIX: &[u8] = b"GET /_anteroom/v1/rooms/";
const SUFFIX: &[u8] = b"/events";

/// Bytes the accept loop peeks at: a whole event stream request target up to its query (room
/// ids are at most 64 bytes).
pub(crate) const PEEK_BYTES: usize = 128;

/// Whether a connection's first bytes open an event stream request: `GET`, the events path of
/// one room, then the end of the path (a space or a query).
pub(crate) fn is_event_stream_request(start: &[u8]) -> bool {
    let Some(rest) = start.strip_prefix(PREFIX) else {
        return false;
    };
    let Some(room_len) = rest
        .iter()
        .position(|byte| matches!(byte, b'/' | b' ' | b'?'))
    else {
        return false;
    };
    if room_len == 0 {
        return false;
    }
    let Some(after) = rest[room_len..].strip_prefix(SUFFIX) else {
        return false;
    };
    matches!(after.first(), Some(b' ' | b'?'))
}

/// Serves one event stream request on `stream` (whose first bytes passed
/// [`is_event_stream_request`]), then closes the connection; its answer counts in
/// `requests`. `stop` turning `true` ends the stream cleanly (the server is shutting down).
pub(crate) async fn serve(
    mut stream: Client,
    peer: SocketAddr,
    router: Router,
    requests: &'static RequestMetrics,
    header_timeout: Duration,
    mut stop: watch::Receiver<bool>,
) {
    // Boxed, and gone once answered: a task is as large as its future's largest state, and the
    // stream lives for hours without the request's.
    let answer = Box::pin(answer(
        &mut stream,
        peer,
        router,
        requests,
        header_timeout,
        &mut stop,
    ))
    .await;
    let Some((response, version)) = answer else {
        return;
    };
    let (framing, head, body) = start_answer(response, version);
    if let Err(error) = write_response(&mut stream, &framing, head, body, &mut stop).await {
        tracing::debug!(%peer, %error, "event stream ended with an error");
        return;
    }
    let _ = stream.shutdown().await;
}

/// Reads the request and routes it: the answer and the request's HTTP version, or `None` when
/// the connection is done (closed, too slow, refused, or the server stopping).
async fn answer(
    stream: &mut Client,
    peer: SocketAddr,
    mut router: Router,
    requests: &'static RequestMetrics,
    header_timeout: Duration,
    stop: &mut watch::Receiver<bool>,
) -> Option<(Response<Body>, Version)> {
    let head = tokio::select! {
        head = tokio::time::timeout(header_timeout, read_head(stream)) => head,
        _ = stop.wait_for(|stop| *stop) => return None,
    };
    let mut request = match head {
        Ok(Ok(request)) => request,
        Ok(Err(bad)) => {
            refuse(&bad, stream).await;
            return None;
        }
        // A client that sends no whole head within the limit (slow-loris) is closed.
        Err(_elapsed) => return None,
    };
    let started = std::time::Instant::now();
    let version = request.version();
    request.extensions_mut().insert(ConnectInfo(peer));
    let response = match router.call(request).await {
        Ok(response) => response,
        Err(never) => match never {},
    };
    requests.answered(response.status(), started);
    Some((response, version))
}

/// Reads and parses the request head. Bytes after the head (a body, a pipelined request) are
/// never served: the connection closes after the answer.
/// The head is checked as the connection loop checks it ([`take_head`]).
async fn read_head(stream: &mut Client) -> Result<Request<Body>, BadHead> {
    let mut buffer = BytesMut::with_capacity(READ_STEP);
    loop {
        if buffer.len() == buffer.capacity() {
            buffer.reserve(READ_STEP);
        }
        match stream.read_buf(&mut buffer).await {
            Ok(0) | Err(_) => return Err(BadHead::Closed),
            Ok(_) => {}
        }
        if let Some(head) = take_head(&mut buffer)? {
            return Ok(head.request.map(|()| Body::empty()));
        }
    }
}

/// The answer's framing (chunked for HTTP/1.1 when its length is not known), its head and its
/// body. The answer's fields (a header map of several hundred bytes) are not kept for the
/// stream's life.
fn start_answer(response: Response<Body>, version: Version) -> (AnswerFraming, Vec<u8>, Body) {
    let (parts, body) = response.into_parts();
    // An event stream's answer is the node's own: no origin fields passed as read.
    let none = PassedFields::default();
    let framing = AnswerFraming::new(
        parts.status,
        &parts.headers,
        &none,
        body.size_hint().exact(),
        version,
    );
    let mut head = Vec::with_capacity(256);
    framing.write_head(
        &mut head,
        parts.status,
        &none,
        &parts.headers,
        false,
        version,
    );
    (framing, head, body)
}

/// Writes the answer: its `head`, then its body as `framing` says, until the body ends, the
/// client leaves or `stop` turns `true`.
async fn write_response(
    stream: &mut Client,
    framing: &AnswerFraming,
    head: Vec<u8>,
    mut body: Body,
    stop: &mut watch::Receiver<bool>,
) -> std::io::Result<()> {
    stream.write_all(&head).await?;
    // The head's buffer is not kept for the stream's life either.
    drop(head);
    if framing.bodiless {
        return Ok(());
    }
    loop {
        let frame = tokio::select! {
            frame = body.frame() => frame,
            () = client_gone(stream.get_ref()) => return Ok(()),
            _ = stop.wait_for(|stop| *stop) => None,
        };
        match frame {
            None => {
                if framing.chunked {
                    stream.write_all(b"0\r\n\r\n").await?;
                }
                return Ok(());
            }
            // A broken answer ends without its last chunk, so the client sees it was cut.
            Some(Err(error)) => {
                tracing::debug!(%error, "the answer's body failed");
                return Ok(());
            }
            Some(Ok(frame)) => {
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                if data.is_empty() {
                    continue;
                }
                if framing.chunked {
                    let mut framed = Vec::with_capacity(data.len() + 16);
                    push_chunk(&mut framed, &data);
                    stream.write_all(&framed).await?;
                } else {
                    stream.write_all(&data).await?;
                }
            }
        }
    }
}

/// Resolves when the client closed its side of the connection or the connection broke. Bytes
/// it sends meanwhile (nothing an event stream answers) are read and dropped.
async fn client_gone(stream: &TcpStream) {
    let mut scratch = [0u8; 64];
    loop {
        if stream.readable().await.is_err() {
            return;
        }
        match stream.try_read(&mut scratch) {
            Ok(0) => return,
            Ok(_) => {}
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => return,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// A stream's task is as large as this future and lives as long as the visitor waits
    /// (docs/benchmarks.md, "SSE soak"): the request's state must not stay in it.
    #[tokio::test]
    async fn a_streams_task_keeps_only_the_body_loops_state() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let _client = TcpStream::connect(address).await.unwrap();
        let (accepted, peer) = listener.accept().await.unwrap();
        let stream = Client::new(accepted, None, Duration::from_secs(1));
        let (_stop, stop) = watch::channel(false);
        let requests = RequestMetrics::of(crate::request_metrics::Listener::Public);
        let serving = serve(
            stream,
            peer,
            Router::new(),
            requests,
            Duration::from_secs(1),
            stop,
        );
        // 1,240 B in a release build, 1,776 B while it held the request's state.
        let size = std::mem::size_of_val(&serving);
        assert!(size <= 1_400, "the stream's future grew to {size} B");
    }

    #[test]
    fn event_stream_requests_are_told_from_their_first_bytes() {
        let yes = [
            &b"GET /_anteroom/v1/rooms/shop/events HTTP/1.1\r\n"[..],
            b"GET /_anteroom/v1/rooms/shop/events?ticket=abc HTTP/1.1\r\n",
            b"GET /_anteroom/v1/rooms/a/events ",
        ];
        for start in yes {
            assert!(is_event_stream_request(start), "{start:?}");
        }
        let no = [
            &b"GET /_anteroom/v1/rooms/shop/status HTTP/1.1\r\n"[..],
            b"GET /_anteroom/v1/rooms/shop/eventsx HTTP/1.1\r\n",
            b"GET /_anteroom/v1/rooms//events HTTP/1.1\r\n",
            b"GET /_anteroom/v1/rooms/shop/events/more HTTP/1.1\r\n",
            b"POST /_anteroom/v1/rooms/shop/events HTTP/1.1\r\n",
            b"HEAD /_anteroom/v1/rooms/shop/events HTTP/1.1\r\n",
            // Too short to tell: hyper serves it.
            b"GET /_anteroom/v1/rooms/shop/events",
            b"GET /_anteroom/v1/rooms/sh",
            b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
            b"",
        ];
        for start in no {
            assert!(!is_event_stream_request(start), "{start:?}");
        }
    }
}
