//! Answer heads both ways: the heads the node writes to visitors, and the heads it reads from
//! the origin, with how the origin's body ends (RFC 9112 §6.3).

use std::mem::MaybeUninit;

use bytes::BytesMut;
use http::header::{CONNECTION, CONTENT_LENGTH, DATE, TRANSFER_ENCODING};
use http::{HeaderMap, HeaderName, StatusCode, Version};

use crate::date::append_now;
use crate::fields::{connection_tokens, header_map, is_hop_by_hop, parse_length, span_in};

/// How an answer's body is framed on the wire to the visitor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AnswerFraming {
    /// No body at all (1xx, 204, 304).
    pub bodiless: bool,
    /// `Content-Length`, when known (never for a bodiless answer).
    pub length: Option<u64>,
    /// `Transfer-Encoding: chunked`.
    pub chunked: bool,
}

impl AnswerFraming {
    /// The framing of an answer with `status` and `headers` whose body has `known_length`
    /// bytes (when the body says), to a client speaking `version`: its length when declared,
    /// else when known; else chunked for HTTP/1.1 (for HTTP/1.0 the body ends with the connection).
    pub fn new(
        status: StatusCode,
        headers: &HeaderMap,
        known_length: Option<u64>,
        version: Version,
    ) -> AnswerFraming {
        let bodiless = status.is_informational()
            || status == StatusCode::NO_CONTENT
            || status == StatusCode::NOT_MODIFIED;
        let length = if bodiless {
            None
        } else {
            // The declared length first: a HEAD answer declares the length of the body it
            // does not carry. A body that then disagrees ends its connection (the writer
            // counts what it sends).
            headers
                .get(CONTENT_LENGTH)
                .and_then(|value| parse_length(value.as_bytes()))
                .or(known_length)
        };
        AnswerFraming {
            bodiless,
            length,
            chunked: !bodiless && length.is_none() && version == Version::HTTP_11,
        }
    }

    /// Appends the status line and header fields of an answer to `out`; the framing and
    /// connection fields are this framing's, and a `Date` is added when the answer has none.
    pub fn write_head(
        self,
        out: &mut Vec<u8>,
        status: StatusCode,
        headers: &HeaderMap,
        keep_alive: bool,
        version: Version,
    ) {
        out.extend_from_slice(b"HTTP/1.1 ");
        out.extend_from_slice(status.as_str().as_bytes());
        out.push(b' ');
        out.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
        out.extend_from_slice(b"\r\n");
        // Whether the answer has its own `Date`, seen on the way (not looked up again).
        let mut dated = false;
        for (name, value) in headers {
            if name == CONNECTION || name == CONTENT_LENGTH || name == TRANSFER_ENCODING {
                continue;
            }
            dated |= name == DATE;
            out.extend_from_slice(name.as_str().as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(value.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        if !dated {
            out.extend_from_slice(b"date: ");
            append_now(out);
            out.extend_from_slice(b"\r\n");
        }
        if let Some(length) = self.length {
            out.extend_from_slice(b"content-length: ");
            out.extend_from_slice(itoa::Buffer::new().format(length).as_bytes());
            out.extend_from_slice(b"\r\n");
        } else if self.chunked {
            out.extend_from_slice(b"transfer-encoding: chunked\r\n");
        }
        if !keep_alive {
            out.extend_from_slice(b"connection: close\r\n");
        } else if version == Version::HTTP_10 {
            out.extend_from_slice(b"connection: keep-alive\r\n");
        }
        out.extend_from_slice(b"\r\n");
    }
}

/// The most header fields an origin's answer may have.
const MAX_ANSWER_HEADERS: usize = 100;

/// The largest answer head read from the origin.
const MAX_ANSWER_HEAD_BYTES: usize = 64 * 1024;

/// An origin's answer head that is not HTTP/1.x, too large, or framed two ways at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the upstream's answer is malformed")]
pub struct MalformedAnswer;

/// How an origin's answer body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFraming {
    /// Exactly this many bytes.
    Length(u64),
    /// Chunked coding.
    Chunked,
    /// No length and not chunked: the body ends when the origin closes the connection.
    UntilClose,
}

/// A parsed answer head from the origin.
#[derive(Debug)]
pub struct AnswerHead {
    /// The status.
    pub status: StatusCode,
    /// The fields that travel on, each value a slice of the head's bytes: never the ones that
    /// concern the origin's connection only (RFC 9110 §7.6.1: `Connection` and the fields it
    /// names, `Transfer-Encoding`, `Keep-Alive` and the rest of the classic set; what they say
    /// is in `framing` and `reusable`), and never a `Content-Length` sent beside a
    /// `Transfer-Encoding` (RFC 9112 §6.3: the coding wins, and the length must not travel
    /// on).
    pub headers: HeaderMap,
    /// How the body ends (before looking at the request method or the status: see
    /// [`AnswerHead::body_framing`]).
    pub framing: BodyFraming,
    /// Whether the origin keeps the connection open after this answer.
    pub reusable: bool,
}

impl AnswerHead {
    /// How this answer's body ends given the request: none after `HEAD` and for 1xx, 204
    /// and 304, whatever the fields say (RFC 9112 §6.3 rules 1 and 2).
    pub fn body_framing(&self, request_was_head: bool) -> BodyFraming {
        if request_was_head
            || self.status.is_informational()
            || self.status == StatusCode::NO_CONTENT
            || self.status == StatusCode::NOT_MODIFIED
        {
            BodyFraming::Length(0)
        } else {
            self.framing
        }
    }
}

/// The answer head at the start of `buffer`, split off it; `None` while incomplete. `spare`
/// is room kept in the header map for fields added later.
///
/// The fields of the origin's connection are read here and left out of the map (the proxy
/// would remove them before the visitor sees the answer): an answer carries no field of
/// another connection however many lines name them, and the map holds only what travels on.
pub fn parse_answer_head(
    buffer: &mut BytesMut,
    spare: usize,
) -> Result<Option<AnswerHead>, MalformedAnswer> {
    // Left uninitialised: httparse writes the fields it finds (filling 100 empty ones first
    // cost more than parsing a small head).
    let mut fields = [const { MaybeUninit::uninit() }; MAX_ANSWER_HEADERS];
    let mut parsed = httparse::Response::new(&mut []);
    let parsing = httparse::ParserConfig::default().parse_response_with_uninit_headers(
        &mut parsed,
        buffer,
        &mut fields,
    );
    let length = match parsing {
        Ok(httparse::Status::Complete(length)) => length,
        Ok(httparse::Status::Partial) if buffer.len() < MAX_ANSWER_HEAD_BYTES => return Ok(None),
        Ok(httparse::Status::Partial) | Err(_) => return Err(MalformedAnswer),
    };
    let version = match parsed.version {
        Some(0) => Version::HTTP_10,
        Some(1) => Version::HTTP_11,
        _ => return Err(MalformedAnswer),
    };
    let status = parsed
        .code
        .and_then(|code| StatusCode::from_u16(code).ok())
        .ok_or(MalformedAnswer)?;
    let mut connection = ConnectionFields::default();
    let mut fields = Vec::with_capacity(parsed.headers.len());
    for field in parsed.headers.iter() {
        let name = HeaderName::from_bytes(field.name.as_bytes()).map_err(|_| MalformedAnswer)?;
        if !connection.took(&name, field.value) {
            fields.push((name, span_in(buffer, field.value)));
        }
    }
    let framing = connection.framing()?;
    if connection.coding.is_some() && connection.lengths.is_some() {
        fields.retain(|(name, _)| name != CONTENT_LENGTH);
    }
    if !connection.named.is_empty() {
        fields.retain(|(name, _)| !connection.named.contains(name));
    }
    let reusable = match version {
        Version::HTTP_11 => !connection.close,
        _ => connection.keep_alive,
    };
    let head = buffer.split_to(length).freeze();
    let headers = header_map(&head, fields, spare).ok_or(MalformedAnswer)?;
    Ok(Some(AnswerHead {
        status,
        headers,
        framing,
        reusable,
    }))
}

/// What an answer head's fields say about the origin's connection and the body's framing.
#[derive(Default)]
struct ConnectionFields<'h> {
    /// `Connection: close`.
    close: bool,
    /// `Connection: keep-alive`.
    keep_alive: bool,
    /// The other fields `Connection` names (hop-by-hop too).
    named: Vec<HeaderName>,
    /// The last `Transfer-Encoding` line.
    coding: Option<&'h [u8]>,
    /// The `Content-Length` value, and whether there was more than one.
    lengths: Option<(&'h [u8], bool)>,
}

impl<'h> ConnectionFields<'h> {
    /// Reads field `name` with `value`: `true` when it concerns the connection only (it is
    /// not passed on).
    fn took(&mut self, name: &HeaderName, value: &'h [u8]) -> bool {
        if name == CONTENT_LENGTH {
            self.lengths = Some(match self.lengths {
                None => (value, false),
                Some((first, _)) => (first, true),
            });
            false
        } else if name == TRANSFER_ENCODING {
            self.coding = Some(value);
            true
        } else if name == CONNECTION {
            for token in connection_tokens(value) {
                if token.eq_ignore_ascii_case(b"close") {
                    self.close = true;
                } else if token.eq_ignore_ascii_case(b"keep-alive") {
                    self.keep_alive = true;
                } else if let Ok(named) = HeaderName::from_bytes(token) {
                    self.named.push(named);
                }
            }
            true
        } else {
            is_hop_by_hop(name)
        }
    }

    /// How the body ends: by its coding when there is one (chunked last means chunked; any
    /// other coding runs until the close), else by its one length, else at the close; two
    /// lengths are malformed.
    fn framing(&self) -> Result<BodyFraming, MalformedAnswer> {
        if let Some(coding) = self.coding {
            let last = coding
                .rsplit(|byte| *byte == b',')
                .next()
                .unwrap_or_default();
            return Ok(if last.trim_ascii().eq_ignore_ascii_case(b"chunked") {
                BodyFraming::Chunked
            } else {
                BodyFraming::UntilClose
            });
        }
        match self.lengths {
            None => Ok(BodyFraming::UntilClose),
            Some((value, false)) => parse_length(value)
                .map(BodyFraming::Length)
                .ok_or(MalformedAnswer),
            Some((_, true)) => Err(MalformedAnswer),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn parsed(text: &str) -> AnswerHead {
        let mut buffer = BytesMut::from(text.as_bytes());
        parse_answer_head(&mut buffer, 0).unwrap().unwrap()
    }

    #[test]
    fn answer_heads_say_how_their_body_ends() {
        let framing = |text: &str| {
            let head = parsed(text);
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
        assert!(parse_answer_head(&mut partial, 0).unwrap().is_none());
        let mut two_lengths = BytesMut::from(
            &b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"[..],
        );
        assert!(parse_answer_head(&mut two_lengths, 0).is_err());
        let mut garbage = BytesMut::from(&b"SSH-2.0-OpenSSH\r\n\r\n"[..]);
        assert!(parse_answer_head(&mut garbage, 0).is_err());
    }

    #[test]
    fn a_length_beside_a_coding_is_dropped() {
        for text in [
            "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
            // Two lengths beside a coding: the coding frames the body, no length travels.
            "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: gzip\r\nContent-Length: 4\r\n\r\n",
        ] {
            let head = parsed(text);
            assert_ne!(head.framing, BodyFraming::Length(3), "{text}");
            assert!(!head.headers.contains_key(CONTENT_LENGTH), "{text}");
            assert!(!head.headers.contains_key(TRANSFER_ENCODING), "{text}");
        }
        // The last coding of the last line decides.
        let head = parsed(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n\r\n",
        );
        assert_eq!(head.framing, BodyFraming::UntilClose);
    }

    #[test]
    fn the_origins_connection_fields_never_travel_on() {
        let head = parsed(
            "HTTP/1.1 200 OK\r\nConnection: keep-alive, X-Secret\r\nx-secret: 1\r\n\
             Connection: x-second-line\r\nX-Second-Line: 2\r\nKeep-Alive: timeout=5\r\n\
             Proxy-Connection: keep-alive\r\nUpgrade: h2c\r\nTrailer: x-t\r\nTE: trailers\r\n\
             Proxy-Authenticate: Basic\r\nProxy-Authorization: Basic eA==\r\n\
             Content-Type: text/plain\r\nContent-Length: 0\r\n\r\n",
        );
        let left: Vec<&str> = head.headers.keys().map(HeaderName::as_str).collect();
        assert_eq!(left, ["content-type", "content-length"]);
        assert!(head.reusable);
        // What `Connection` says still decides whether the connection is reused, on any line
        // and in any case.
        let close = parsed("HTTP/1.1 200 OK\r\nConnection: x-a\r\nConnection: Close\r\n\r\n");
        assert!(!close.reusable);
        assert!(close.headers.is_empty());
        let kept = parsed("HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 0\r\n\r\n");
        assert!(kept.reusable);
        let named_length =
            parsed("HTTP/1.1 200 OK\r\nConnection: content-length\r\nContent-Length: 2\r\n\r\nok");
        assert_eq!(named_length.framing, BodyFraming::Length(2));
        assert!(named_length.headers.is_empty());
    }

    #[test]
    fn bad_field_bytes_and_oversized_heads_are_malformed() {
        let malformed = |bytes: &[u8]| parse_answer_head(&mut BytesMut::from(bytes), 0).is_err();
        assert!(malformed(b"HTTP/1.1 200 OK\r\nx-a: a\x01b\r\n\r\n"));
        assert!(malformed(b"HTTP/1.1 200 OK\r\nConnection: a\x00\r\n\r\n"));
        assert!(malformed(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: a\x7f\r\n\r\n"
        ));
        assert!(malformed(b"HTTP/1.1 200 OK\r\nx a: b\r\n\r\n"));
        assert!(malformed(b"HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\n"));
        assert!(malformed(
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n"
        ));
        assert!(malformed(b"HTTP/2 200 OK\r\n\r\n"));
        let mut long = b"HTTP/1.1 200 OK\r\nx-a: ".to_vec();
        long.resize(MAX_ANSWER_HEAD_BYTES + 1, b'a');
        assert!(malformed(&long));
        let mut many = b"HTTP/1.1 200 OK\r\n".to_vec();
        for _ in 0..=MAX_ANSWER_HEADERS {
            many.extend_from_slice(b"x-a: 1\r\n");
        }
        many.extend_from_slice(b"\r\n");
        assert!(malformed(&many));
    }

    #[test]
    fn head_204_and_304_answers_have_no_body_whatever_they_say() {
        let head = parsed("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n");
        assert_eq!(head.body_framing(true), BodyFraming::Length(0));
        assert_eq!(head.body_framing(false), BodyFraming::Length(5));
        for status in ["204 No Content", "304 Not Modified"] {
            let head = parsed(&format!(
                "HTTP/1.1 {status}\r\nTransfer-Encoding: chunked\r\n\r\n"
            ));
            assert_eq!(head.body_framing(false), BodyFraming::Length(0));
        }
    }

    #[test]
    fn an_answer_head_carries_its_framing_and_a_date() {
        let mut headers = HeaderMap::new();
        headers.insert("content-type", HeaderValue::from_static("text/plain"));
        headers.insert(CONTENT_LENGTH, HeaderValue::from_static("99"));
        let framing = AnswerFraming::new(StatusCode::OK, &headers, Some(5), Version::HTTP_11);
        let mut out = Vec::new();
        framing.write_head(&mut out, StatusCode::OK, &headers, false, Version::HTTP_11);
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ndate: "));
        assert!(text.ends_with(" GMT\r\ncontent-length: 99\r\nconnection: close\r\n\r\n"));
        // An answer with its own `Date`, anywhere among its fields, keeps it and gets no other.
        headers.insert(
            DATE,
            HeaderValue::from_static("Tue, 01 Jan 2030 00:00:00 GMT"),
        );
        headers.insert("x-after", HeaderValue::from_static("1"));
        let mut out = Vec::new();
        framing.write_head(&mut out, StatusCode::OK, &headers, true, Version::HTTP_11);
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text.matches("date: ").count(), 1, "{text}");
        assert!(
            text.contains("date: Tue, 01 Jan 2030 00:00:00 GMT\r\n"),
            "{text}"
        );
    }
}
