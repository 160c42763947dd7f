//! Request heads as a visitor sends them: parsed without copying, checked, and told how their
//! body is framed.

use bytes::{Bytes, BytesMut};
use http::header::{CONTENT_LENGTH, EXPECT, HOST, TRANSFER_ENCODING, UPGRADE};
use http::{HeaderMap, HeaderName, Method, Request, Uri, Version};

use crate::fields::{header_map, parse_length, span_in};

/// The largest request head read. Larger heads are answered 431.
pub const MAX_HEAD_BYTES: usize = 16 * 1024;

/// The most header fields a request head may have (hyper's default is 100; browsers send 15).
pub const MAX_HEADERS: usize = 64;

/// Request bodies up to this size are read whole before the request is served; larger ones
/// are streamed.
pub const MAX_INLINE_BODY: usize = 64 * 1024;

/// Why a request head was not served.
#[derive(Debug, PartialEq, Eq)]
pub enum BadHead {
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

impl BadHead {
    /// The problem+json body of [`BadHead::Host`], for an engine that writes its own answer.
    pub const HOST_PROBLEM: &'static str = host_problem!();

    /// The whole answer sent before closing the connection, if any.
    pub fn answer(&self) -> Option<&'static [u8]> {
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

/// Whether a request names one `Host` (RFC 9112 §3.2), or none in HTTP/1.0 and HTTP/2 (whose
/// authority is in the target): with none or several, the route anteroom matches and the
/// virtual host the origin serves could differ.
pub fn has_one_host(version: Version, headers: &HeaderMap) -> bool {
    let mut hosts = headers.get_all(HOST).iter();
    match (hosts.next(), hosts.next()) {
        (Some(_), None) => true,
        (None, _) => version != Version::HTTP_11,
        (Some(_), Some(_)) => false,
    }
}

/// A parsed request head: the request (without a body), its bytes as they came, and what it
/// says about a body.
#[derive(Debug)]
pub struct RequestHead {
    /// The request; its target and header values are slices of `raw`.
    pub request: Request<()>,
    /// The head's bytes (what a server taking over the connection reads first).
    pub raw: Bytes,
    /// How the body is framed.
    pub framing: Framing,
}

/// What a head says about its body and its connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body, or a body of this many bytes (`Content-Length`), at most [`MAX_INLINE_BODY`].
    Length(u64),
    /// Anything a streaming server should take: an upgrade, `CONNECT`, `Expect`, a chunked or
    /// large body, an unusual `Content-Length`.
    ForHyper,
}

/// Parses the request head at the start of `buffer`: `Ok(None)` while it is incomplete. Once
/// complete, the head's bytes are split off `buffer` and the request's target and header
/// values are slices of them (no copy).
pub fn take_head(buffer: &mut BytesMut) -> Result<Option<RequestHead>, BadHead> {
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
    let mut request = Request::new(());
    *request.method_mut() = method;
    *request.uri_mut() = uri;
    *request.version_mut() = version;
    *request.headers_mut() = headers;
    Ok(Some(RequestHead {
        request,
        raw: head,
        framing,
    }))
}

/// How a request's body is framed, or that a streaming server should serve it.
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
        // Several lengths (alike or not): the streaming server decides.
        (Some(_), Some(_)) => Framing::ForHyper,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::fields::keeps_alive;

    fn head(text: &str) -> Result<Option<RequestHead>, BadHead> {
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
        assert_eq!(body, BadHead::HOST_PROBLEM);
        assert!(body.contains(r#""code":"invalid_host""#));
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
}
