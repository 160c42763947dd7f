//! Request heads as a visitor sends them: parsed without copying, checked, and told how their
//! body is framed.

use std::mem::MaybeUninit;
use std::ops::Range;

use bytes::{Bytes, BytesMut};
use http::{HeaderName, Method, Request, Uri, Version};
use smallvec::SmallVec;

use crate::bad_head::BadHead;
use crate::fields::{header_map, span_in};
use crate::validity::RequestFields;

/// The largest request head read. Larger heads are answered 431.
pub const MAX_HEAD_BYTES: usize = 16 * 1024;

/// The most header fields a request head may have (hyper's default is 100; browsers send 15).
pub const MAX_HEADERS: usize = 64;

/// The fields of a head noted on the stack while it is parsed; a head with more spills them
/// to the heap.
const INLINE_FIELDS: usize = 16;

/// Request bodies up to this size are read whole before the request is served; larger ones
/// are streamed.
pub const MAX_INLINE_BODY: usize = 64 * 1024;

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
/// values are slices of them (no copy). A head that parses but could be read more than one
/// way is refused ([`check_request`](crate::check_request)): its `Host` and framing fields are
/// read as the fields are, not looked up in the header map afterwards.
pub fn take_head(buffer: &mut BytesMut) -> Result<Option<RequestHead>, BadHead> {
    // Left uninitialised: httparse writes the fields it finds (filling 64 empty ones first
    // cost more than parsing a small head).
    let mut fields = [const { MaybeUninit::uninit() }; MAX_HEADERS];
    let mut parsed = httparse::Request::new(&mut []);
    let length = match parsed.parse_with_uninit_headers(buffer, &mut fields) {
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
    // On the stack for a usual head (wrk sends 2 fields, browsers about 15): a vector here
    // was one allocation a request, freed again once the header map was made.
    let mut fields: SmallVec<[(HeaderName, Range<usize>); INLINE_FIELDS]> = SmallVec::new();
    let mut said = RequestFields::default();
    for field in parsed.headers.iter() {
        let name = HeaderName::from_bytes(field.name.as_bytes()).map_err(|_| BadHead::Malformed)?;
        said.read(&name, field.value);
        fields.push((name, span_in(buffer, field.value)));
    }
    let head = buffer.split_to(length).freeze();
    let uri = Uri::from_maybe_shared(head.slice(target)).map_err(|_| BadHead::Malformed)?;
    // The gateway writes the fields it adds (forwarding, correlation) into the upstream
    // request itself: the map is made for the fields that came, with no room to spare.
    // Drained, not moved: the fields kept inline are not copied whole first.
    let headers = header_map(&head, fields.drain(..), 0).ok_or(BadHead::Malformed)?;
    said.check(version)?;
    let framing = framing(&method, &said);
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

/// How a request's body is framed, or that a streaming server should serve it, from what its
/// fields said (already checked: a lone length is digits only).
fn framing(method: &Method, said: &RequestFields) -> Framing {
    if method == Method::CONNECT || said.needs_streaming() {
        return Framing::ForHyper;
    }
    match said.length() {
        Some(length) if length <= MAX_INLINE_BODY as u64 => Framing::Length(length),
        // A body too large to read whole: streamed.
        _ => Framing::ForHyper,
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
            ("GET / HTTP/1.1\r\nHost: a\r\n\r\n", Framing::Length(0)),
            ("GET / HTTP/1.0\r\n\r\n", Framing::Length(0)),
            (
                "GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n",
                Framing::ForHyper,
            ),
            (
                "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n",
                Framing::ForHyper,
            ),
            (
                "POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n",
                Framing::ForHyper,
            ),
            (
                "CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n",
                Framing::ForHyper,
            ),
            (
                "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 70000\r\n\r\n",
                Framing::ForHyper,
            ),
            (
                "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n",
                Framing::ForHyper,
            ),
            (
                "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 12\r\n\r\n",
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
    fn heads_that_read_two_ways_are_refused_with_their_problem() {
        let check = |text: &str, expected: Option<BadHead>| {
            assert_eq!(head(text).err(), expected, "{text}");
        };
        check("GET / HTTP/1.1\r\nHost: a\r\n\r\n", None);
        check("GET / HTTP/1.1\r\n\r\n", Some(BadHead::Host));
        check(
            "GET / HTTP/1.1\r\nHost: a\r\nhost: b\r\n\r\n",
            Some(BadHead::Host),
        );
        check("GET / HTTP/1.0\r\n\r\n", None);
        check(
            "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
            Some(BadHead::Framing),
        );
        check(
            "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +1\r\n\r\n",
            Some(BadHead::Framing),
        );
        for (bad, code) in [
            (BadHead::Host, "invalid_host"),
            (BadHead::Framing, "invalid_framing"),
        ] {
            let answer = bad.answer().unwrap();
            let text = std::str::from_utf8(answer).unwrap();
            let (head, body) = text.split_once("\r\n\r\n").unwrap();
            assert!(head.starts_with("HTTP/1.1 400 "));
            assert!(head.contains(&format!("content-length: {}\r\n", body.len())));
            assert!(head.ends_with("\r\nconnection: close"));
            assert_eq!(Some(body), bad.problem());
            assert!(body.contains(&format!(r#""code":"{code}""#)));
        }
    }

    /// What httparse refuses, both engines refuse alike (hyper parses with it too).
    #[test]
    fn fields_with_control_characters_or_folds_do_not_parse() {
        let cases = [
            "GET / HTTP/1.1\r\nHost: a\r\nX: a\r\n b\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a\r\nX: a\rb\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a\r\nX: a\0b\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a\r\nX: a\u{1}b\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a\r\nX: a\u{7f}b\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a\r\nX : a\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a\r\nX\0: a\r\n\r\n",
            "GET /\u{1} HTTP/1.1\r\nHost: a\r\n\r\n",
            "GET / HTTP/1.1\rHost: a\r\n\r\n",
        ];
        for text in cases {
            assert_eq!(head(text).err(), Some(BadHead::Malformed), "{text:?}");
        }
        // A tab inside a value is allowed, as is a bare LF ending lines (RFC 9112 §2.2).
        assert!(head("GET / HTTP/1.1\r\nHost: a\r\nX: a\tb\r\n\r\n").is_ok());
        assert!(head("GET / HTTP/1.1\nHost: a\n\n").is_ok());
    }

    #[test]
    fn keep_alive_follows_the_version_and_the_connection_field() {
        let wants = |text: &str| {
            let request = head(text).unwrap().unwrap().request;
            keeps_alive(request.version(), request.headers())
        };
        assert!(wants("GET / HTTP/1.1\r\nHost: a\r\n\r\n"));
        assert!(!wants(
            "GET / HTTP/1.1\r\nHost: a\r\nConnection: Close\r\n\r\n"
        ));
        assert!(!wants(
            "GET / HTTP/1.1\r\nHost: a\r\nConnection: te, close\r\n\r\n"
        ));
        assert!(!wants("GET / HTTP/1.0\r\n\r\n"));
        assert!(wants("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"));
    }

    /// The refusal or framing a head's header map says, read the long way (each name looked
    /// up, as before the fields were read while parsing), for
    /// [`fields_read_while_parsing_decide_as_the_header_map_does`].
    fn decided_by_lookup(
        method: &Method,
        version: Version,
        headers: &http::HeaderMap,
    ) -> Result<Framing, BadHead> {
        use http::header::{CONTENT_LENGTH, EXPECT, TRANSFER_ENCODING, UPGRADE};
        if !crate::has_one_host(version, headers) {
            return Err(BadHead::Host);
        }
        let codings: Vec<_> = headers.get_all(TRANSFER_ENCODING).iter().collect();
        let lengths: Vec<_> = headers.get_all(CONTENT_LENGTH).iter().collect();
        let parsed: Vec<_> = lengths
            .iter()
            .map(|value| crate::parse_length(value.as_bytes()))
            .collect();
        let one_reading = match codings[..] {
            [] => parsed
                .iter()
                .all(|length| length.is_some() && *length == parsed[0]),
            [coding] => {
                lengths.is_empty()
                    && version == Version::HTTP_11
                    && coding
                        .as_bytes()
                        .trim_ascii()
                        .eq_ignore_ascii_case(b"chunked")
            }
            _ => false,
        };
        if !one_reading {
            return Err(BadHead::Framing);
        }
        if method == Method::CONNECT
            || [UPGRADE, EXPECT, TRANSFER_ENCODING]
                .iter()
                .any(|name| headers.contains_key(name))
            || lengths.len() > 1
        {
            return Ok(Framing::ForHyper);
        }
        Ok(match parsed.first() {
            None => Framing::Length(0),
            Some(Some(length)) if *length <= MAX_INLINE_BODY as u64 => Framing::Length(*length),
            Some(_) => Framing::ForHyper,
        })
    }

    /// Every ordering of up to three of these lines, in both versions and two methods: the
    /// `Host` and framing fields `take_head` reads while parsing, and those
    /// [`check_request`](crate::check_request) reads from hyper's header map, refuse and frame
    /// exactly as look-ups in the parsed header map do (this fails when the reading skips a
    /// field, a line, or a spelling).
    #[test]
    fn fields_read_while_parsing_decide_as_the_header_map_does() {
        let lines = [
            "Host: a",
            "hOST: b",
            "Content-Length: 5",
            "content-length: 5",
            "Content-Length: 6",
            "Content-Length: +5",
            "Content-Length: 70000",
            "Transfer-Encoding: chunked",
            "transfer-encoding: gzip, chunked",
            "Upgrade: websocket",
            "EXPECT: 100-continue",
            "X-Host: c",
        ];
        let mut heads: Vec<Vec<&str>> = vec![vec![]];
        let mut last: Vec<Vec<&str>> = vec![vec![]];
        for _ in 0..3 {
            last = last
                .iter()
                .flat_map(|head| lines.iter().map(move |line| [&head[..], &[*line]].concat()))
                .collect();
            heads.extend(last.iter().cloned());
        }
        let mut checked = 0;
        for fields in &heads {
            for (method, version) in [("GET", "1.1"), ("POST", "1.0"), ("CONNECT", "1.1")] {
                let mut text = format!("{method} / HTTP/{version}\r\n");
                for line in fields {
                    text.push_str(line);
                    text.push_str("\r\n");
                }
                text.push_str("\r\n");
                let mut map = http::HeaderMap::new();
                for line in fields {
                    let (name, value) = line.split_once(": ").unwrap();
                    map.append(
                        HeaderName::from_bytes(name.as_bytes()).unwrap(),
                        http::HeaderValue::from_str(value).unwrap(),
                    );
                }
                let version = if version == "1.1" {
                    Version::HTTP_11
                } else {
                    Version::HTTP_10
                };
                let method = Method::from_bytes(method.as_bytes()).unwrap();
                let expected = decided_by_lookup(&method, version, &map);
                assert_eq!(
                    crate::check_request(version, &map).err().as_ref(),
                    expected.as_ref().err(),
                    "{text:?}"
                );
                let taken = head(&text).map(|head| head.unwrap().framing);
                assert_eq!(taken, expected, "{text:?}");
                checked += 1;
            }
        }
        assert_eq!(checked, 3 * (1 + 12 + 144 + 1728));
    }

    /// Heads with fewer, as many and more fields than are noted on the stack (the rest
    /// spill to the heap) keep every field, each name's values in the order they came.
    #[test]
    fn every_field_is_kept_on_either_side_of_the_inline_room() {
        for count in [
            0,
            1,
            INLINE_FIELDS - 1,
            INLINE_FIELDS,
            INLINE_FIELDS + 1,
            MAX_HEADERS - 1,
        ] {
            let mut text = String::from("GET / HTTP/1.1\r\nHost: a\r\n");
            for n in 0..count {
                text.push_str(&format!("X-Field-{}: value-{n}\r\n", n % 5));
            }
            text.push_str("\r\n");
            let head = head(&text).unwrap().unwrap();
            let headers = head.request.headers();
            assert_eq!(headers.len(), count + 1, "{count}");
            for name in 0..5 {
                let values: Vec<String> = headers
                    .get_all(format!("x-field-{name}"))
                    .iter()
                    .map(|value| value.to_str().unwrap().to_owned())
                    .collect();
                let expected: Vec<String> = (0..count)
                    .filter(|n| n % 5 == name)
                    .map(|n| format!("value-{n}"))
                    .collect();
                assert_eq!(values, expected, "{count}");
            }
        }
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
