//! Whether a request head can be read only one way (SPEC §14.4, RFC 9112 §6.3): the checks
//! both HTTP engines apply before a request is served, so a request that a proxy in front of
//! the node, the node itself and the origin behind it could each frame differently (request
//! smuggling) is refused with 400 and its connection closed, whichever engine reads it.
//!
//! The byte-level rules (obs-fold, a bare CR, NUL and other control characters in a field,
//! whitespace before a field's colon) are `httparse`'s, which both engines parse with: such a
//! head never parses, and is answered 400 as malformed. What is checked here is what parses
//! but is ambiguous:
//!
//! - an HTTP/1.1 request without exactly one `Host` ([`has_one_host`]);
//! - `Transfer-Encoding` beside `Content-Length`;
//! - `Transfer-Encoding` other than one line saying exactly `chunked` (a coding list such as
//!   `gzip, chunked`, `chunked, chunked`, `identity`, two lines), or in an HTTP/1.0 request;
//! - a `Content-Length` that is not digits only, or repeated with differing values.
//!
//! Repeated `Content-Length` lines with the same value are read as one (RFC 9110 §8.6 allows
//! it): every reader agrees on the length, and hyper, the other engine, does the same without
//! telling its service that there were several, so refusing them could not be done alike in
//! both engines.

use http::header::{CONTENT_LENGTH, HOST, TRANSFER_ENCODING};
use http::{HeaderMap, Version};

use crate::bad_head::BadHead;
use crate::fields::parse_length;

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

/// Checks a request's `Host` and framing fields (see the module documentation):
/// [`BadHead::Host`] or [`BadHead::Framing`] when it is refused.
pub fn check_request(version: Version, headers: &HeaderMap) -> Result<(), BadHead> {
    if !has_one_host(version, headers) {
        return Err(BadHead::Host);
    }
    if has_one_reading(version, headers) {
        Ok(())
    } else {
        Err(BadHead::Framing)
    }
}

/// Whether the body's framing fields say one thing only.
fn has_one_reading(version: Version, headers: &HeaderMap) -> bool {
    let mut codings = headers.get_all(TRANSFER_ENCODING).iter();
    let mut lengths = headers.get_all(CONTENT_LENGTH).iter();
    match codings.next() {
        // Chunked alone, on one line, in HTTP/1.1 (HTTP/1.0 has no transfer codings).
        Some(coding) => {
            codings.next().is_none()
                && lengths.next().is_none()
                && version == Version::HTTP_11
                && coding
                    .as_bytes()
                    .trim_ascii()
                    .eq_ignore_ascii_case(b"chunked")
        }
        None => {
            let Some(first) = lengths.next() else {
                return true;
            };
            let Some(length) = parse_length(first.as_bytes()) else {
                return false;
            };
            lengths.all(|other| parse_length(other.as_bytes()) == Some(length))
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use http::{HeaderName, HeaderValue};

    use super::*;

    fn check(version: Version, fields: &[(&str, &str)], expected: Result<(), BadHead>) {
        let mut headers = HeaderMap::new();
        for (name, value) in fields {
            headers.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        assert_eq!(check_request(version, &headers), expected, "{fields:?}");
    }

    #[test]
    fn one_reading_of_the_body_is_served() {
        let ok = |fields: &[(&str, &str)]| check(Version::HTTP_11, fields, Ok(()));
        ok(&[("host", "a")]);
        ok(&[("host", "a"), ("content-length", "5")]);
        ok(&[
            ("host", "a"),
            ("content-length", "5"),
            ("content-length", "5"),
        ]);
        ok(&[("host", "a"), ("transfer-encoding", "chunked")]);
        ok(&[("host", "a"), ("transfer-encoding", "Chunked ")]);
        check(Version::HTTP_10, &[("content-length", "0")], Ok(()));
    }

    #[test]
    fn framing_that_reads_two_ways_is_refused() {
        let refused = |fields: &[(&str, &str)]| {
            let mut with_host = vec![("host", "a")];
            with_host.extend_from_slice(fields);
            check(Version::HTTP_11, &with_host, Err(BadHead::Framing));
        };
        refused(&[("content-length", "5"), ("transfer-encoding", "chunked")]);
        refused(&[("transfer-encoding", "chunked"), ("content-length", "5")]);
        refused(&[("content-length", "5"), ("content-length", "6")]);
        refused(&[("content-length", "5, 5")]);
        refused(&[("content-length", "+5")]);
        refused(&[("content-length", "")]);
        refused(&[("transfer-encoding", "gzip, chunked")]);
        refused(&[("transfer-encoding", "chunked, chunked")]);
        refused(&[("transfer-encoding", "chunked, gzip")]);
        refused(&[("transfer-encoding", "identity")]);
        refused(&[
            ("transfer-encoding", "chunked"),
            ("transfer-encoding", "chunked"),
        ]);
        refused(&[
            ("transfer-encoding", "gzip"),
            ("transfer-encoding", "chunked"),
        ]);
        check(
            Version::HTTP_10,
            &[("transfer-encoding", "chunked")],
            Err(BadHead::Framing),
        );
    }

    #[test]
    fn the_host_is_checked_first() {
        check(
            Version::HTTP_11,
            &[("content-length", "5"), ("transfer-encoding", "chunked")],
            Err(BadHead::Host),
        );
    }
}
