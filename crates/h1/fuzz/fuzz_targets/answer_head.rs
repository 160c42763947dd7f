//! Fuzz target `answer_head`: [`parse_answer_head`] and [`AnswerHead::body_framing`] on
//! whatever an origin might send never panic; no field of the origin's connection stays in
//! the head (`Connection`, `Transfer-Encoding`, `Keep-Alive`, ...), and a `Content-Length`
//! stays only when it frames the body (the visitor's connection must not be framed by a
//! length a coding overrides); a head is split off the front of the input and the body's
//! bytes are left. The same head read with its fields passed as read
//! ([`AnswerFields::Passed`]) parses or fails alike, with the same framing, the same fields
//! (those read in the map, the others passed, the length kept aside), and a head written to
//! the visitor from it parses again with the same fields as one written from the map, with
//! the node's request id set both ways (in the map, or added after the passed fields).
#![no_main]

use anteroom_h1::{
    AnswerFields, AnswerFraming, AnswerHead, BodyFraming, PassedFields, parse_answer_head,
};
use bytes::BytesMut;
use http::header::{CONNECTION, CONTENT_LENGTH, DATE, TE, TRAILER, TRANSFER_ENCODING, UPGRADE};
use http::{HeaderMap, HeaderName, HeaderValue, Version};

const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
use libfuzzer_sys::fuzz_target;

/// The fields of a written head, lower-cased, grouped by name (each name's values in order).
fn written_fields(head: &[u8]) -> Vec<(String, Vec<Vec<u8>>)> {
    let mut fields = [httparse::EMPTY_HEADER; 256];
    let mut parsed = httparse::Response::new(&mut fields);
    let status = parsed.parse(head).expect("a written head parses");
    assert!(status.is_complete(), "a written head is whole");
    let mut named: Vec<(String, Vec<Vec<u8>>)> = Vec::new();
    for field in parsed.headers.iter() {
        let name = field.name.to_ascii_lowercase();
        match named.iter_mut().find(|(known, _)| *known == name) {
            Some((_, values)) => values.push(field.value.to_vec()),
            None => named.push((name, vec![field.value.to_vec()])),
        }
    }
    named.sort();
    named
}

fn written(
    head: &AnswerHead,
    headers: &HeaderMap,
    passed: &PassedFields,
    keep_alive: bool,
) -> (AnswerFraming, Vec<u8>) {
    let framing = AnswerFraming::new(head.status, headers, passed, None, Version::HTTP_11);
    let mut out = Vec::new();
    framing.write_head(
        &mut out,
        head.status,
        passed,
        headers,
        keep_alive,
        Version::HTTP_11,
    );
    (framing, out)
}

fn pairs(headers: &HeaderMap) -> Vec<(String, Vec<u8>)> {
    headers
        .iter()
        .map(|(name, value)| (name.as_str().to_owned(), value.as_bytes().to_vec()))
        .collect()
}

fuzz_target!(|data: &[u8]| {
    let read = [
        HeaderName::from_static("x-request-id"),
        HeaderName::from_static("anteroom-release"),
    ];
    let mut passed_buffer = BytesMut::from(data);
    let passed = parse_answer_head(&mut passed_buffer, AnswerFields::Passed { read: &read });
    let mut buffer = BytesMut::from(data);
    let parsed = parse_answer_head(&mut buffer, AnswerFields::Map { spare: 2 });
    assert_eq!(parsed.is_err(), passed.is_err());
    assert_eq!(buffer, passed_buffer);
    let (Ok(Some(head)), Ok(Some(passed))) = (parsed, passed) else {
        return;
    };
    assert!(data.ends_with(&buffer[..]), "the rest was not left whole");
    for name in [CONNECTION, TRANSFER_ENCODING, TE, TRAILER, UPGRADE] {
        assert!(!head.headers.contains_key(&name));
        assert!(!passed.headers.contains_key(&name));
    }
    assert!(!head.headers.contains_key("keep-alive"));
    if head.headers.contains_key(CONTENT_LENGTH) {
        assert!(matches!(head.framing, BodyFraming::Length(_)));
    }
    for request_was_head in [false, true] {
        let framing = head.body_framing(request_was_head);
        let bodiless = request_was_head
            || head.status.is_informational()
            || head.status.as_u16() == 204
            || head.status.as_u16() == 304;
        if bodiless {
            assert_eq!(framing, BodyFraming::Length(0));
        } else {
            assert_eq!(framing, head.framing);
        }
    }

    // Passed as read: the same answer.
    assert_eq!(
        (head.status, head.framing, head.reusable),
        (passed.status, passed.framing, passed.reusable)
    );
    let (read_in_map, rest): (Vec<_>, Vec<_>) = pairs(&head.headers)
        .into_iter()
        .partition(|(name, _)| read.iter().any(|read| read == name.as_str()));
    assert_eq!(pairs(&passed.headers), read_in_map);
    let mut rest: Vec<_> = rest
        .into_iter()
        .filter(|(name, _)| name != "content-length")
        .collect();
    let mut as_passed: Vec<(String, Vec<u8>)> = passed
        .passed
        .iter()
        .map(|(name, value)| {
            let name = String::from_utf8(name.to_ascii_lowercase()).expect("a token");
            (name, value.to_vec())
        })
        .collect();
    rest.sort();
    as_passed.sort();
    assert_eq!(rest, as_passed);
    let declared = head
        .headers
        .get(CONTENT_LENGTH)
        .map(|value| anteroom_h1::parse_length(value.as_bytes()).expect("a length"));
    assert_eq!(passed.passed.declared_length(), declared);
    assert_eq!(passed.passed.has_date(), head.headers.contains_key(DATE));
    // The node's request id as the gateway sets it for each writer: in the map, replacing
    // the origin's; or added after the passed fields, the origin's taken out of the map.
    let id = HeaderValue::from_static("the-node-s-id");
    let mut map_headers = head.headers.clone();
    map_headers.insert(X_REQUEST_ID, id.clone());
    let mut passed_headers = passed.headers.clone();
    passed_headers.remove(X_REQUEST_ID);
    let mut passed_fields = passed.passed.clone();
    passed_fields.add_field(X_REQUEST_ID, id);
    for keep_alive in [false, true] {
        let (map_framing, map_out) = written(&head, &map_headers, &head.passed, keep_alive);
        let (passed_framing, passed_out) =
            written(&passed, &passed_headers, &passed_fields, keep_alive);
        assert_eq!(map_framing, passed_framing);
        let strip_date = |mut fields: Vec<(String, Vec<Vec<u8>>)>| {
            // A `Date` the writer adds reads the clock: compared only when the origin sent one.
            if !head.headers.contains_key(DATE) {
                fields.retain(|(name, _)| name != "date");
            }
            fields
        };
        let from_map = strip_date(written_fields(&map_out));
        let from_passed = strip_date(written_fields(&passed_out));
        assert_eq!(from_map, from_passed);
    }
    // No field of the origin's connection is passed (the writer's own framing and connection
    // fields are its own, written from the framing, and compared above).
    for (name, _) in passed.passed.iter() {
        let name = name.to_ascii_lowercase();
        assert!(
            !matches!(
                name.as_slice(),
                b"connection"
                    | b"transfer-encoding"
                    | b"keep-alive"
                    | b"te"
                    | b"trailer"
                    | b"upgrade"
                    | b"proxy-connection"
                    | b"proxy-authenticate"
                    | b"proxy-authorization"
                    | b"content-length"
            ),
            "{name:?}"
        );
    }
});
