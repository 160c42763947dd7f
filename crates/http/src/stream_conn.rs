//! A small HTTP/1.1 connection handler for event streams: connections whose first request is
//! `GET /_anteroom/v1/rooms/{room}/events`.
//!
//! hyper keeps an 8 KiB read buffer and an 8 KiB write buffer for each HTTP/1 connection for as
//! long as the connection lives, and a waiting visitor's stream lives for minutes or hours: with
//! thousands of streams those buffers were most of a node's memory (docs/benchmarks.md, "SSE
//! soak"). The accept loop peeks at a new connection's first bytes ([`is_event_stream_request`]);
//! when they open an event stream request, [`serve`] reads the request head into a buffer sized
//! to it, parses it with `httparse`, and hands the request to the same router as every other
//! request (rate limits, the ticket check, the 503 at the node's stream limit: all unchanged).
//! It writes the answer's head, then each event as one chunk from a buffer that lives only for
//! that write, watches the socket for the client leaving, and closes the connection when the
//! answer ends (`Connection: close`), or ends the stream cleanly when the server shuts down.
//!
//! Everything else goes to hyper as before: other requests, HTTP/2, a first segment too short
//! to tell, and a stream asked for on a connection that already served a request.

use std::net::SocketAddr;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::header::{CONNECTION, CONTENT_LENGTH, TRANSFER_ENCODING};
use axum::http::{
    HeaderMap, HeaderName, HeaderValue, Method, Request, Response, StatusCode, Uri, Version,
};
use http_body::Body as _;
use http_body_util::BodyExt as _;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tower::Service as _;

use crate::HEADER_READ_TIMEOUT;

/// How a request line opening an event stream starts, and what follows the room.
const PREFIX: &[u8] = b"GET /_anteroom/v1/rooms/";
const SUFFIX: &[u8] = b"/events";

/// Bytes the accept loop peeks at: a whole event stream request target up to its query (room
/// ids are at most 64 bytes).
pub(crate) const PEEK_BYTES: usize = 128;

/// The largest request head read. An event stream request carries a ticket and cookies; a
/// larger head is answered 431.
const MAX_HEAD_BYTES: usize = 16 * 1024;

/// The most header fields a request head may have (hyper's default is 100; browsers send 15).
const MAX_HEADERS: usize = 64;

/// How much the head buffer grows by at a time.
const READ_STEP: usize = 1024;

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

/// Why a request head was not served.
#[derive(Debug, PartialEq, Eq)]
enum BadHead {
    /// The client closed the connection (or it broke) before the head was complete.
    Closed,
    /// Not an HTTP/1.x request head: 400, as hyper answers.
    Malformed,
    /// More than [`MAX_HEAD_BYTES`] or [`MAX_HEADERS`]: 431, as hyper answers.
    TooLarge,
}

impl BadHead {
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
        }
    }
}

/// Serves one event stream request on `stream` (whose first bytes passed
/// [`is_event_stream_request`]), then closes the connection. `stop` turning `true` ends the
/// stream cleanly (the server is shutting down).
pub(crate) async fn serve(
    mut stream: TcpStream,
    peer: SocketAddr,
    mut router: Router,
    mut stop: watch::Receiver<bool>,
) {
    let head = tokio::select! {
        head = tokio::time::timeout(HEADER_READ_TIMEOUT, read_head(&mut stream)) => head,
        _ = stop.wait_for(|stop| *stop) => return,
    };
    let mut request = match head {
        Ok(Ok(request)) => request,
        Ok(Err(bad)) => {
            if let Some(answer) = bad.answer() {
                let _ = stream.write_all(answer).await;
                let _ = stream.shutdown().await;
            }
            return;
        }
        // A client that sends no whole head within the limit (slow-loris) is closed.
        Err(_elapsed) => return,
    };
    let version = request.version();
    request.extensions_mut().insert(ConnectInfo(peer));
    let response = match router.call(request).await {
        Ok(response) => response,
        Err(never) => match never {},
    };
    if let Err(error) = write_response(&mut stream, response, version, &mut stop).await {
        tracing::debug!(%peer, %error, "event stream ended with an error");
        return;
    }
    let _ = stream.shutdown().await;
}

/// Reads and parses the request head, growing the buffer [`READ_STEP`] at a time.
async fn read_head(stream: &mut TcpStream) -> Result<Request<Body>, BadHead> {
    let mut buffer = Vec::with_capacity(READ_STEP);
    loop {
        if buffer.len() == buffer.capacity() {
            if buffer.len() >= MAX_HEAD_BYTES {
                return Err(BadHead::TooLarge);
            }
            buffer.reserve(READ_STEP);
        }
        match stream.read_buf(&mut buffer).await {
            Ok(0) | Err(_) => return Err(BadHead::Closed),
            Ok(_) => {}
        }
        if let Some(request) = parse_head(&buffer)? {
            return Ok(request);
        }
    }
}

/// The request of a complete head; `None` while the head is incomplete. Bytes after the head
/// (a body, a pipelined request) are never read: the connection closes after the answer.
fn parse_head(bytes: &[u8]) -> Result<Option<Request<Body>>, BadHead> {
    let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut head = httparse::Request::new(&mut fields);
    match head.parse(bytes) {
        Ok(httparse::Status::Partial) => return Ok(None),
        Ok(httparse::Status::Complete(_)) => {}
        Err(httparse::Error::TooManyHeaders) => return Err(BadHead::TooLarge),
        Err(_) => return Err(BadHead::Malformed),
    }
    let version = match head.version {
        Some(0) => Version::HTTP_10,
        Some(1) => Version::HTTP_11,
        _ => return Err(BadHead::Malformed),
    };
    let method = head
        .method
        .and_then(|method| Method::from_bytes(method.as_bytes()).ok())
        .ok_or(BadHead::Malformed)?;
    let uri = head
        .path
        .and_then(|path| Uri::try_from(path).ok())
        .ok_or(BadHead::Malformed)?;
    let mut headers = HeaderMap::with_capacity(head.headers.len());
    for field in head.headers.iter() {
        let name = HeaderName::from_bytes(field.name.as_bytes()).map_err(|_| BadHead::Malformed)?;
        let value = HeaderValue::from_bytes(field.value).map_err(|_| BadHead::Malformed)?;
        headers.append(name, value);
    }
    let mut request = Request::new(Body::empty());
    *request.method_mut() = method;
    *request.uri_mut() = uri;
    *request.version_mut() = version;
    *request.headers_mut() = headers;
    Ok(Some(request))
}

/// Writes the answer: its head, then its body (chunked for HTTP/1.1 when its length is not
/// known, else as it is), until the body ends, the client leaves or `stop` turns `true`.
async fn write_response(
    stream: &mut TcpStream,
    response: Response<Body>,
    version: Version,
    stop: &mut watch::Receiver<bool>,
) -> std::io::Result<()> {
    let (parts, mut body) = response.into_parts();
    let bodiless = parts.status.is_informational()
        || parts.status == StatusCode::NO_CONTENT
        || parts.status == StatusCode::NOT_MODIFIED;
    let length = parts
        .headers
        .get(CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok()?.parse::<u64>().ok())
        .or_else(|| body.size_hint().exact());
    let chunked = !bodiless && length.is_none() && version == Version::HTTP_11;
    stream
        .write_all(&response_head(
            parts.status,
            &parts.headers,
            length,
            chunked,
            bodiless,
        ))
        .await?;
    if bodiless {
        return Ok(());
    }
    loop {
        let frame = tokio::select! {
            frame = body.frame() => frame,
            () = client_gone(stream) => return Ok(()),
            _ = stop.wait_for(|stop| *stop) => None,
        };
        match frame {
            None => {
                if chunked {
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
                if chunked {
                    stream.write_all(&chunk(&data)).await?;
                } else {
                    stream.write_all(&data).await?;
                }
            }
        }
    }
}

/// The status line and header fields of an answer; the framing fields are this module's.
fn response_head(
    status: StatusCode,
    headers: &HeaderMap,
    length: Option<u64>,
    chunked: bool,
    bodiless: bool,
) -> Vec<u8> {
    let mut head = Vec::with_capacity(256);
    head.extend_from_slice(b"HTTP/1.1 ");
    head.extend_from_slice(status.as_str().as_bytes());
    head.push(b' ');
    head.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    head.extend_from_slice(b"\r\n");
    for (name, value) in headers {
        if name == CONNECTION || name == CONTENT_LENGTH || name == TRANSFER_ENCODING {
            continue;
        }
        head.extend_from_slice(name.as_str().as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(value.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    if !bodiless {
        if let Some(length) = length {
            head.extend_from_slice(format!("content-length: {length}\r\n").as_bytes());
        } else if chunked {
            head.extend_from_slice(b"transfer-encoding: chunked\r\n");
        }
    }
    head.extend_from_slice(b"connection: close\r\n\r\n");
    head
}

/// One chunk of a chunked body.
fn chunk(data: &[u8]) -> Vec<u8> {
    let size = format!("{:x}\r\n", data.len());
    let mut chunk = Vec::with_capacity(size.len() + data.len() + 2);
    chunk.extend_from_slice(size.as_bytes());
    chunk.extend_from_slice(data);
    chunk.extend_from_slice(b"\r\n");
    chunk
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

    #[test]
    fn a_head_is_parsed_once_complete() {
        let head = b"GET /_anteroom/v1/rooms/shop/events?ticket=t HTTP/1.1\r\nHost: x\r\nCookie: a=b\r\n\r\n";
        assert_eq!(
            parse_head(&head[..head.len() - 2]).unwrap().map(|_| ()),
            None
        );
        let request = parse_head(head).unwrap().unwrap();
        assert_eq!(request.method(), Method::GET);
        assert_eq!(request.uri(), "/_anteroom/v1/rooms/shop/events?ticket=t");
        assert_eq!(request.version(), Version::HTTP_11);
        assert_eq!(request.headers()["cookie"], "a=b");
        assert_eq!(
            parse_head(b"GET /x HTTP/1.1\r\nbad header\r\n\r\n").unwrap_err(),
            BadHead::Malformed
        );
        let many: String = (0..=MAX_HEADERS).map(|n| format!("h{n}: v\r\n")).collect();
        let too_many = format!("GET /x HTTP/1.1\r\n{many}\r\n");
        assert_eq!(
            parse_head(too_many.as_bytes()).unwrap_err(),
            BadHead::TooLarge
        );
    }

    #[test]
    fn chunks_carry_their_size_in_hex() {
        assert_eq!(chunk(b"data: x\n\n"), b"9\r\ndata: x\n\n\r\n");
        assert_eq!(chunk(&[b'a'; 26])[..4], *b"1a\r\n");
    }
}
