//! Answer heads both ways: the heads the node writes to visitors, and the heads it reads from
//! the origin, with how the origin's body ends (RFC 9112 §6.3).

use std::mem::MaybeUninit;
use std::ops::Range;

use bytes::{Bytes, BytesMut};
use http::header::{CONNECTION, CONTENT_LENGTH, DATE, TRANSFER_ENCODING};
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode, Version};

use crate::date::append_now;
use crate::fields::{connection_tokens, is_hop_by_hop_name, parse_length, says_chunked, span_in};

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
    /// The framing of an answer with `status`, `headers` and the `passed` fields whose body
    /// has `known_length` bytes (when the body says), to a client speaking `version`: its
    /// length when declared, else when known; else chunked for HTTP/1.1 (for HTTP/1.0 the
    /// body ends with the connection).
    pub fn new(
        status: StatusCode,
        headers: &HeaderMap,
        passed: &PassedFields,
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
            passed
                .declared_length()
                .or_else(|| {
                    headers
                        .get(CONTENT_LENGTH)
                        .and_then(|value| parse_length(value.as_bytes()))
                })
                .or(known_length)
        };
        AnswerFraming {
            bodiless,
            length,
            chunked: !bodiless && length.is_none() && version == Version::HTTP_11,
        }
    }

    /// Appends the status line and header fields of an answer to `out`: the `passed` fields
    /// first (the origin's, as they came), then those of `headers`; the framing and
    /// connection fields are this framing's, and a `Date` is added when the answer has none.
    pub fn write_head(
        self,
        out: &mut Vec<u8>,
        status: StatusCode,
        passed: &PassedFields,
        headers: &HeaderMap,
        keep_alive: bool,
        version: Version,
    ) {
        out.extend_from_slice(b"HTTP/1.1 ");
        out.extend_from_slice(status.as_str().as_bytes());
        out.push(b' ');
        out.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
        out.extend_from_slice(b"\r\n");
        passed.write(out);
        // Whether the answer has its own `Date`, seen on the way (not looked up again).
        let mut dated = passed.has_date();
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
    /// on). With [`AnswerFields::Passed`], only those the caller reads; the others are in
    /// `passed`.
    pub headers: HeaderMap,
    /// With [`AnswerFields::Passed`], the fields that travel on as they were read, the ones
    /// in `headers` aside; otherwise empty.
    pub passed: PassedFields,
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

/// Where [`parse_answer_head`] puts the fields that travel on.
#[derive(Debug, Clone, Copy)]
pub enum AnswerFields<'n> {
    /// All in the header map, with room for `spare` fields added later.
    Map {
        /// Room kept in the map for fields added later.
        spare: usize,
    },
    /// Those named in `read` (the fields the caller acts on: looks up, replaces, removes) in
    /// the header map; every other one as it was read ([`PassedFields`]): no `HeaderName`
    /// or `HeaderValue` is made for it and nothing is hashed, it is written to the visitor
    /// as it came.
    Passed {
        /// The names the caller reads, in lower case.
        read: &'n [HeaderName],
    },
}

/// An origin's answer fields passed on as they were read: spans of the head's bytes (which
/// httparse checked: no control character, no obs-fold, names that are tokens), the
/// `Content-Length` taken out (its value kept: the visitor's framing says it again).
#[derive(Debug, Clone, Default)]
pub struct PassedFields {
    /// The head's bytes, status line included.
    head: Bytes,
    /// Each field's name and value in `head`, in the order they came.
    lines: Vec<PassedLine>,
    /// The value of the one `Content-Length` that travels on, if any.
    length: Option<u64>,
    /// Whether a `Date` is among the fields.
    dated: bool,
    /// The one field the caller adds after them ([`add_field`](Self::add_field)).
    added: Option<(HeaderName, HeaderValue)>,
}

/// Where one passed field's name and value lie in the head.
#[derive(Debug, Clone)]
struct PassedLine {
    name: Range<usize>,
    value: Range<usize>,
}

impl PassedFields {
    /// Whether no field is passed.
    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// The `Content-Length` the origin declared, when it travels on (a `HEAD` answer declares
    /// the length of a body it does not carry).
    pub fn declared_length(&self) -> Option<u64> {
        self.length
    }

    /// Whether one of the fields is a `Date`.
    pub fn has_date(&self) -> bool {
        self.dated
    }

    /// The fields, name and value, in the order they came (the name in the origin's case).
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.lines.iter().map(|line| {
            (
                &self.head[line.name.clone()],
                &self.head[line.value.clone()],
            )
        })
    }

    /// Has `name: value` written right after the passed fields (it replaces a field added
    /// before): a field the caller sets on every answer (the gateway's request id), so that
    /// an answer whose other fields are all passed needs no header map and no entry hashed
    /// into one. Not for the framing, connection or `Date` fields, which the writer settles.
    pub fn add_field(&mut self, name: HeaderName, value: HeaderValue) {
        self.added = Some((name, value));
    }

    /// Appends the fields to `out` as `name: value` lines, the added one last.
    fn write(&self, out: &mut Vec<u8>) {
        let added = self
            .added
            .iter()
            .map(|(name, value)| (name.as_str().as_bytes(), value.as_bytes()));
        for (name, value) in self.iter().chain(added) {
            out.extend_from_slice(name);
            out.extend_from_slice(b": ");
            out.extend_from_slice(value);
            out.extend_from_slice(b"\r\n");
        }
    }
}

/// The answer head at the start of `buffer`, split off it; `None` while incomplete. `fields`
/// says where the fields that travel on go.
///
/// The fields of the origin's connection are read here and left out (the proxy would remove
/// them before the visitor sees the answer): an answer carries no field of another connection
/// however many lines name them, and the map and the passed fields hold only what travels
/// on.
pub fn parse_answer_head(
    buffer: &mut BytesMut,
    fields: AnswerFields<'_>,
) -> Result<Option<AnswerHead>, MalformedAnswer> {
    // Left uninitialised: httparse writes the fields it finds (filling 100 empty ones first
    // cost more than parsing a small head).
    let mut parsed_fields = [const { MaybeUninit::uninit() }; MAX_ANSWER_HEADERS];
    let mut parsed = httparse::Response::new(&mut []);
    let parsing = httparse::ParserConfig::default().parse_response_with_uninit_headers(
        &mut parsed,
        buffer,
        &mut parsed_fields,
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
    let mut lines = Vec::with_capacity(parsed.headers.len());
    for field in parsed.headers.iter() {
        let name = field.name.as_bytes();
        if !connection.took(name, field.value) {
            lines.push(PassedLine {
                name: span_in(buffer, name),
                value: span_in(buffer, field.value),
            });
        }
    }
    let framing = connection.framing(version)?;
    let coded_length = connection.coding.is_some() && connection.lengths.is_some();
    if coded_length || !connection.named.is_empty() {
        let buffer = &buffer[..];
        lines.retain(|line| {
            let name = &buffer[line.name.clone()];
            let coded = coded_length && name.eq_ignore_ascii_case(b"content-length");
            let named = connection
                .named
                .iter()
                .any(|named| named.eq_ignore_ascii_case(name));
            !coded && !named
        });
    }
    let reusable = match version {
        Version::HTTP_11 => !connection.close,
        _ => connection.keep_alive,
    };
    let head = buffer.split_to(length).freeze();
    let (headers, passed) = match fields {
        AnswerFields::Map { spare } => {
            let mut headers = HeaderMap::with_capacity(lines.len() + spare);
            for line in lines {
                let name = HeaderName::from_bytes(&head[line.name]).map_err(|_| MalformedAnswer)?;
                let value = HeaderValue::from_maybe_shared(head.slice(line.value))
                    .map_err(|_| MalformedAnswer)?;
                headers.append(name, value);
            }
            (headers, PassedFields::default())
        }
        AnswerFields::Passed { read } => pass_fields(head, lines, read, framing)?,
    };
    Ok(Some(AnswerHead {
        status,
        headers,
        passed,
        framing,
        reusable,
    }))
}

/// Splits the fields that travel on (`lines` of `head`) into those named in `read`, made
/// into a header map, and those passed on as they are; the `Content-Length` among them
/// (there is one at most, and then it frames the body) becomes the passed fields' length.
fn pass_fields(
    head: Bytes,
    mut lines: Vec<PassedLine>,
    read: &[HeaderName],
    framing: BodyFraming,
) -> Result<(HeaderMap, PassedFields), MalformedAnswer> {
    let mut headers = HeaderMap::new();
    let mut length = None;
    let mut dated = false;
    let mut failed = false;
    lines.retain(|line| {
        let name = &head[line.name.clone()];
        if name.eq_ignore_ascii_case(b"content-length") {
            if let BodyFraming::Length(declared) = framing {
                length = Some(declared);
            }
            return false;
        }
        if read
            .iter()
            .any(|read| name.eq_ignore_ascii_case(read.as_str().as_bytes()))
        {
            let value = HeaderValue::from_maybe_shared(head.slice(line.value.clone()));
            match (HeaderName::from_bytes(name), value) {
                (Ok(name), Ok(value)) => {
                    headers.append(name, value);
                }
                _ => failed = true,
            }
            return false;
        }
        dated |= name.eq_ignore_ascii_case(b"date");
        true
    });
    if failed {
        return Err(MalformedAnswer);
    }
    let passed = PassedFields {
        head,
        lines,
        length,
        dated,
        added: None,
    };
    Ok((headers, passed))
}

/// What an answer head's fields say about the origin's connection and the body's framing.
#[derive(Default)]
struct ConnectionFields<'h> {
    /// `Connection: close`.
    close: bool,
    /// `Connection: keep-alive`.
    keep_alive: bool,
    /// The other fields `Connection` names (hop-by-hop too), as they were written.
    named: Vec<&'h [u8]>,
    /// The last `Transfer-Encoding` line.
    coding: Option<&'h [u8]>,
    /// How many `Transfer-Encoding` lines there were.
    coding_lines: usize,
    /// The `Content-Length` value, and whether there was more than one.
    lengths: Option<(&'h [u8], bool)>,
}

impl<'h> ConnectionFields<'h> {
    /// Reads field `name` (as it came, in any case) with `value`: `true` when it concerns the
    /// connection only (it is not passed on).
    fn took(&mut self, name: &[u8], value: &'h [u8]) -> bool {
        if name.eq_ignore_ascii_case(b"content-length") {
            self.lengths = Some(match self.lengths {
                None => (value, false),
                Some((first, _)) => (first, true),
            });
            false
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            self.coding = Some(value);
            self.coding_lines += 1;
            true
        } else if name.eq_ignore_ascii_case(b"connection") {
            for token in connection_tokens(value) {
                if token.eq_ignore_ascii_case(b"close") {
                    self.close = true;
                } else if token.eq_ignore_ascii_case(b"keep-alive") {
                    self.keep_alive = true;
                } else {
                    self.named.push(token);
                }
            }
            true
        } else {
            is_hop_by_hop_name(name)
        }
    }

    /// How the body ends: chunked when it says `Transfer-Encoding: chunked`, else by its one
    /// length, else at the close. Two lengths are malformed, and so is any other coding (the
    /// visitor would get the body still coded, with nothing saying so: the gateway asks for
    /// no coding, RFC 9110 §10.1.4) and a coding in an HTTP/1.0 answer (RFC 9112 §6.1: a hop
    /// that did not know it may have passed it on unapplied; hyper's client refuses it too).
    fn framing(&self, version: Version) -> Result<BodyFraming, MalformedAnswer> {
        if let Some(coding) = self.coding {
            let chunked = self.coding_lines == 1 && says_chunked(coding);
            return if chunked && version == Version::HTTP_11 {
                Ok(BodyFraming::Chunked)
            } else {
                Err(MalformedAnswer)
            };
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

    const MAP: AnswerFields<'static> = AnswerFields::Map { spare: 0 };

    const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

    fn parsed(text: &str) -> AnswerHead {
        let mut buffer = BytesMut::from(text.as_bytes());
        parse_answer_head(&mut buffer, MAP).unwrap().unwrap()
    }

    /// The fields of a written head, lower-cased, in order (the status line left out).
    fn written_fields(head: &[u8]) -> Vec<(String, String)> {
        let text = std::str::from_utf8(head).unwrap();
        text.split("\r\n")
            .skip(1)
            .take_while(|line| !line.is_empty())
            .map(|line| {
                let (name, value) = line.split_once(": ").unwrap();
                (name.to_ascii_lowercase(), value.to_owned())
            })
            .collect()
    }

    /// The same fields grouped by name, each name's values in their order (what a reader of
    /// the head sees: the order of different names carries no meaning).
    fn by_name(fields: &[(String, String)]) -> Vec<(String, Vec<String>)> {
        let mut names: Vec<String> = fields.iter().map(|(name, _)| name.clone()).collect();
        names.sort();
        names.dedup();
        names
            .into_iter()
            .map(|name| {
                let values = fields.iter().filter(|(n, _)| *n == name);
                (
                    name.clone(),
                    values.map(|(_, value)| value.clone()).collect(),
                )
            })
            .collect()
    }

    #[test]
    fn passed_fields_are_the_fields_the_map_would_hold() {
        let lines = [
            "Server: nginx/1.26.0",
            "Date: Thu, 26 Nov 2026 20:00:00 GMT",
            "Content-Type: text/plain",
            "Content-Length: 5",
            "content-length: 5",
            "Connection: keep-alive",
            "Connection: X-Secret, close",
            "x-secret: 1",
            "Transfer-Encoding: chunked",
            "Keep-Alive: timeout=5",
            "Set-Cookie: a=1",
            "X-Request-Id: from-the-origin",
            "Anteroom-Release: 1",
            "DATE:Tue, 01 Jan 2030 00:00:00 GMT  ",
            "Proxy-Connection: keep-alive",
            "Connection: content-length",
        ];
        let read = [
            HeaderName::from_static("x-request-id"),
            HeaderName::from_static("anteroom-release"),
        ];
        let mut heads = Vec::new();
        for a in 0..lines.len() {
            heads.push(vec![a]);
            for b in 0..lines.len() {
                heads.push(vec![a, b]);
                for c in 0..lines.len() {
                    heads.push(vec![a, b, c]);
                }
            }
        }
        let mut compared = 0;
        for picked in heads {
            for (status, ending) in [("HTTP/1.1 200 OK", "\r\n"), ("HTTP/1.0 404 No", "\n")] {
                let mut text = format!("{status}{ending}");
                for line in &picked {
                    text.push_str(lines[*line]);
                    text.push_str(ending);
                }
                text.push_str(ending);
                text.push_str("hello");
                let mut in_map = BytesMut::from(text.as_bytes());
                let mut in_passed = in_map.clone();
                let map = parse_answer_head(&mut in_map, MAP);
                let passed =
                    parse_answer_head(&mut in_passed, AnswerFields::Passed { read: &read });
                assert_eq!(in_map, in_passed, "{text:?}");
                let (map, passed) = match (map, passed) {
                    (Ok(Some(map)), Ok(Some(passed))) => (map, passed),
                    (map, passed) => {
                        assert!(map.is_err() && passed.is_err(), "{text:?}");
                        continue;
                    }
                };
                compared += 1;
                assert_eq!(
                    (map.status, map.framing, map.reusable),
                    (passed.status, passed.framing, passed.reusable),
                    "{text:?}"
                );
                // Read fields in the map, in their order; the rest passed, in theirs; the
                // length kept as the passed fields' declared one.
                let pairs = |headers: &HeaderMap| -> Vec<(String, String)> {
                    headers
                        .iter()
                        .map(|(name, value)| {
                            (name.as_str().to_owned(), value.to_str().unwrap().to_owned())
                        })
                        .collect()
                };
                let (read_in_map, rest): (Vec<_>, Vec<_>) = pairs(&map.headers)
                    .into_iter()
                    .partition(|(name, _)| read.iter().any(|read| read == name.as_str()));
                assert_eq!(pairs(&passed.headers), read_in_map, "{text:?}");
                let declared = map
                    .headers
                    .get(CONTENT_LENGTH)
                    .map(|value| value.to_str().unwrap().parse::<u64>().unwrap());
                assert_eq!(passed.passed.declared_length(), declared, "{text:?}");
                assert_eq!(passed.passed.has_date(), map.headers.contains_key(DATE));
                let rest: Vec<_> = rest
                    .into_iter()
                    .filter(|(name, _)| name != "content-length")
                    .collect();
                let as_passed: Vec<(String, String)> = passed
                    .passed
                    .iter()
                    .map(|(name, value)| {
                        let name = std::str::from_utf8(name).unwrap().to_ascii_lowercase();
                        (name, std::str::from_utf8(value).unwrap().to_owned())
                    })
                    .collect();
                assert_eq!(as_passed, by_name_order(&rest, &as_passed), "{text:?}");
                // Written to a visitor, both say the same, with the node's request id set
                // as the gateway sets it for each writer: in the map (replacing the
                // origin's), or added after the passed fields (the origin's taken out of
                // the map).
                let id = HeaderValue::from_static("the-node-s-id");
                let mut map_headers = map.headers.clone();
                map_headers.insert(X_REQUEST_ID, id.clone());
                let mut passed_headers = passed.headers.clone();
                passed_headers.remove(X_REQUEST_ID);
                let mut passed_fields = passed.passed.clone();
                passed_fields.add_field(X_REQUEST_ID, id);
                for keep_alive in [false, true] {
                    let write = |headers: &HeaderMap, passed: &PassedFields| {
                        let framing = AnswerFraming::new(
                            map.status,
                            headers,
                            passed,
                            Some(5),
                            Version::HTTP_11,
                        );
                        let mut out = Vec::new();
                        framing.write_head(
                            &mut out,
                            map.status,
                            passed,
                            headers,
                            keep_alive,
                            Version::HTTP_11,
                        );
                        (framing, out)
                    };
                    let (map_framing, map_out) = write(&map_headers, &map.passed);
                    let (passed_framing, passed_out) = write(&passed_headers, &passed_fields);
                    assert_eq!(map_framing, passed_framing, "{text:?}");
                    let fields = |out: &[u8]| {
                        let mut fields = written_fields(out);
                        // The added `Date` differs from second to second.
                        if !map.headers.contains_key(DATE) {
                            fields.retain(|(name, _)| name != "date");
                        }
                        by_name(&fields)
                    };
                    assert_eq!(fields(&map_out), fields(&passed_out), "{text:?}");
                }
            }
        }
        // Most heads parse (two lengths, a length beside a coding and so on are among them).
        assert!(compared > 5_000, "{compared}");
    }

    /// `fields` in the order the names came in `order` (each name's values in their own
    /// order): the map groups a name's values, the passed fields keep the lines' order.
    fn by_name_order(
        fields: &[(String, String)],
        order: &[(String, String)],
    ) -> Vec<(String, String)> {
        let mut left: Vec<(String, String)> = fields.to_vec();
        let mut ordered = Vec::new();
        for (name, _) in order {
            if let Some(at) = left.iter().position(|(n, _)| n == name) {
                ordered.push(left.remove(at));
            }
        }
        ordered.extend(left);
        ordered
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
            framing("HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\nConnection: close\r\n\r\n"),
            (200, BodyFraming::Chunked, false)
        );
        // Codings the gateway cannot take off, and a coding an HTTP/1.0 hop may have passed
        // on unapplied: the body cannot be read.
        for coded in [
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, chunked\r\n\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n",
            "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n",
        ] {
            let mut head = BytesMut::from(coded.as_bytes());
            assert!(parse_answer_head(&mut head, MAP).is_err(), "{coded:?}");
        }
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
        assert!(parse_answer_head(&mut partial, MAP).unwrap().is_none());
        let mut two_lengths = BytesMut::from(
            &b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"[..],
        );
        assert!(parse_answer_head(&mut two_lengths, MAP).is_err());
        let mut garbage = BytesMut::from(&b"SSH-2.0-OpenSSH\r\n\r\n"[..]);
        assert!(parse_answer_head(&mut garbage, MAP).is_err());
    }

    #[test]
    fn a_length_beside_a_coding_is_dropped() {
        for text in [
            "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
            // Two lengths beside a coding: the coding frames the body, no length travels.
            "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n",
        ] {
            let head = parsed(text);
            assert_eq!(head.framing, BodyFraming::Chunked, "{text}");
            assert!(!head.headers.contains_key(CONTENT_LENGTH), "{text}");
            assert!(!head.headers.contains_key(TRANSFER_ENCODING), "{text}");
        }
        // A coding other than chunked, on one line or two, frames nothing the gateway reads.
        for text in [
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: gzip\r\n\r\n",
        ] {
            let mut head = BytesMut::from(text.as_bytes());
            assert!(parse_answer_head(&mut head, MAP).is_err(), "{text}");
        }
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
        let malformed = |bytes: &[u8]| parse_answer_head(&mut BytesMut::from(bytes), MAP).is_err();
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
        let none = PassedFields::default();
        let framing =
            AnswerFraming::new(StatusCode::OK, &headers, &none, Some(5), Version::HTTP_11);
        let mut out = Vec::new();
        framing.write_head(
            &mut out,
            StatusCode::OK,
            &none,
            &headers,
            false,
            Version::HTTP_11,
        );
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
        framing.write_head(
            &mut out,
            StatusCode::OK,
            &none,
            &headers,
            true,
            Version::HTTP_11,
        );
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text.matches("date: ").count(), 1, "{text}");
        assert!(
            text.contains("date: Tue, 01 Jan 2030 00:00:00 GMT\r\n"),
            "{text}"
        );
    }
}
