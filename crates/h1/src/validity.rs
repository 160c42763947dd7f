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

use http::header::{CONTENT_LENGTH, EXPECT, HOST, TRANSFER_ENCODING, UPGRADE};
use http::{HeaderMap, HeaderName, Version};

use crate::bad_head::BadHead;
use crate::fields::{parse_length, says_chunked};

/// Whether a request names one `Host` (RFC 9112 §3.2), or none in HTTP/1.0 and HTTP/2 (whose
/// authority is in the target): with none or several, the route anteroom matches and the
/// virtual host the origin serves could differ.
pub fn has_one_host(version: Version, headers: &HeaderMap) -> bool {
    one_host(version, headers.get_all(HOST).iter().take(2).count())
}

/// [`has_one_host`] for a request that named `hosts` of them.
fn one_host(version: Version, hosts: usize) -> bool {
    match hosts {
        0 => version != Version::HTTP_11,
        1 => true,
        _ => false,
    }
}

/// Checks a request's `Host` and framing fields (see the module documentation):
/// [`BadHead::Host`] or [`BadHead::Framing`] when it is refused.
pub fn check_request(version: Version, headers: &HeaderMap) -> Result<(), BadHead> {
    let mut fields = RequestFields::default();
    for name in [HOST, TRANSFER_ENCODING, CONTENT_LENGTH] {
        for value in headers.get_all(&name) {
            fields.read(&name, value.as_bytes());
        }
    }
    fields.check(version)
}

/// What a request head's fields say about its `Host` and its body, gathered field by field as
/// the head is parsed (`take_head` reads them there instead of looking each name up in the
/// header map afterwards).
#[derive(Debug, Default)]
pub(crate) struct RequestFields {
    /// How many `Host` lines.
    hosts: usize,
    /// How many `Transfer-Encoding` lines.
    codings: usize,
    /// Whether the only `Transfer-Encoding` line says exactly `chunked`.
    chunked: bool,
    /// How many `Content-Length` lines.
    lengths: usize,
    /// The first `Content-Length`, when it is digits only.
    length: Option<u64>,
    /// Whether a later `Content-Length` says something else than the first (or is not digits).
    lengths_differ: bool,
    /// Whether an `Upgrade` or an `Expect` field came.
    upgrade_or_expect: bool,
}

impl RequestFields {
    /// Takes note of field `name` with `value`, when it is one of those that matter here.
    pub(crate) fn read(&mut self, name: &HeaderName, value: &[u8]) {
        if *name == HOST {
            self.hosts += 1;
        } else if *name == CONTENT_LENGTH {
            let length = parse_length(value);
            if self.lengths == 0 {
                self.length = length;
            } else if length.is_none() || length != self.length {
                self.lengths_differ = true;
            }
            self.lengths += 1;
        } else if *name == TRANSFER_ENCODING {
            self.codings += 1;
            self.chunked = says_chunked(value);
        } else if *name == UPGRADE || *name == EXPECT {
            self.upgrade_or_expect = true;
        }
    }

    /// [`BadHead::Host`] or [`BadHead::Framing`] when the request is refused (see the module
    /// documentation).
    pub(crate) fn check(&self, version: Version) -> Result<(), BadHead> {
        if !one_host(version, self.hosts) {
            return Err(BadHead::Host);
        }
        if self.has_one_reading(version) {
            Ok(())
        } else {
            Err(BadHead::Framing)
        }
    }

    /// Whether the body's framing fields say one thing only.
    fn has_one_reading(&self, version: Version) -> bool {
        if self.codings > 0 {
            // Chunked alone, on one line, in HTTP/1.1 (HTTP/1.0 has no transfer codings).
            return self.codings == 1
                && self.lengths == 0
                && version == Version::HTTP_11
                && self.chunked;
        }
        self.lengths == 0 || (self.length.is_some() && !self.lengths_differ)
    }

    /// Whether a streaming server should serve the request rather than the one that reads a
    /// small body whole: an upgrade, `Expect`, a coded body, or several lengths (alike, as
    /// differing ones are refused: hyper reads them as one and forwards one).
    pub(crate) fn needs_streaming(&self) -> bool {
        self.upgrade_or_expect || self.codings > 0 || self.lengths > 1
    }

    /// The body's length as its one `Content-Length` says (no field: none), when it is digits
    /// only; the head was [`check`](Self::check)ed first.
    pub(crate) fn length(&self) -> Option<u64> {
        if self.lengths == 0 {
            Some(0)
        } else {
            self.length
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
