//! Header fields with a meaning for the connection itself: lengths, keep-alive, and the
//! hop-by-hop fields a proxy removes (RFC 9110 §7.6.1).

use std::ops::Range;

use bytes::Bytes;
use http::header::{CONNECTION, TRANSFER_ENCODING};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Version};

/// A `Content-Length` value: digits only (no sign, no spaces, no list).
pub fn parse_length(value: &[u8]) -> Option<u64> {
    if value.is_empty() || value.len() > 19 || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    value.iter().try_fold(0u64, |length, digit| {
        length.checked_mul(10)?.checked_add(u64::from(digit - b'0'))
    })
}

/// Whether a request with `method` and a body of `body_length` bytes carries a
/// `Content-Length`: any body says its length, and so does an empty POST, PUT or PATCH (a
/// method that expects one; RFC 9110 §8.6).
pub fn request_states_length(method: &Method, body_length: u64) -> bool {
    body_length > 0 || matches!(*method, Method::POST | Method::PUT | Method::PATCH)
}

/// Whether a message whose head is `headers` keeps its connection open: HTTP/1.1 unless it
/// says `Connection: close`, HTTP/1.0 only when it says `Connection: keep-alive`.
pub fn keeps_alive(version: Version, headers: &HeaderMap) -> bool {
    match version {
        Version::HTTP_11 => !connection_says(headers, b"close"),
        _ => connection_says(headers, b"keep-alive"),
    }
}

/// Whether any `Connection` field of `headers` lists `token`.
pub fn connection_says(headers: &HeaderMap, token: &[u8]) -> bool {
    headers.get_all(CONNECTION).iter().any(|value| {
        connection_tokens(value.as_bytes()).any(|part| part.eq_ignore_ascii_case(token))
    })
}

/// The tokens of one `Connection` line, trimmed, empty ones left out.
pub(crate) fn connection_tokens(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value
        .split(|byte| *byte == b',')
        .map(<[u8]>::trim_ascii)
        .filter(|token| !token.is_empty())
}

/// Where a part of a parsed head lies in the buffer the head was parsed from.
pub fn span_in(buffer: &[u8], part: &[u8]) -> Range<usize> {
    let start = part.as_ptr() as usize - buffer.as_ptr() as usize;
    start..start + part.len()
}

/// The header map of a head whose bytes are `head`: each value a slice of them (no copy).
/// `spare` is room kept for fields added later.
pub fn header_map<F>(head: &Bytes, fields: F, spare: usize) -> Option<HeaderMap>
where
    F: IntoIterator<Item = (HeaderName, Range<usize>)>,
    F::IntoIter: ExactSizeIterator,
{
    let fields = fields.into_iter();
    let mut headers = HeaderMap::with_capacity(fields.len() + spare);
    for (name, value) in fields {
        headers.append(
            name,
            HeaderValue::from_maybe_shared(head.slice(value)).ok()?,
        );
    }
    Some(headers)
}

/// Whether a `Transfer-Encoding` value says exactly `chunked`: the one coding this crate
/// reads, for requests and answers alike.
pub(crate) fn says_chunked(coding: &[u8]) -> bool {
    coding.trim_ascii().eq_ignore_ascii_case(b"chunked")
}

/// Whether `headers` carry one `Transfer-Encoding` line saying exactly `chunked` (an answer
/// read by another HTTP stack, which took off that coding and no other).
pub fn only_chunked(headers: &HeaderMap) -> bool {
    let mut codings = headers.get_all(TRANSFER_ENCODING).iter();
    matches!(
        (codings.next(), codings.next()),
        (Some(coding), None) if says_chunked(coding.as_bytes())
    )
}

/// Removes the fields that concern one connection only (RFC 9110 §7.6.1): every `Connection`
/// field (all of its lines, not only the first) and the fields they name, and the classic
/// hop-by-hop set. Most messages carry one or none: passes over the names find them without
/// hashing each name of the set.
pub fn remove_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(CONNECTION)
        .iter()
        .flat_map(|value| value.as_bytes().split(|byte| *byte == b','))
        .map(<[u8]>::trim_ascii)
        // The usual tokens name no field of their own (`keep-alive` goes below anyway).
        .filter(|token| {
            !token.is_empty()
                && !token.eq_ignore_ascii_case(b"keep-alive")
                && !token.eq_ignore_ascii_case(b"close")
        })
        .filter_map(|token| HeaderName::from_bytes(token).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    // Without allocating: each pass finds one present name, most messages have one or none.
    while let Some(name) = headers.keys().find(|name| is_hop_by_hop(name)).cloned() {
        headers.remove(name);
    }
}

/// Whether the field named `name` (in any case, as it came on the wire) always concerns one
/// connection only: `Connection`, `Keep-Alive`, `Proxy-Authenticate`, `Proxy-Authorization`,
/// `Proxy-Connection`, `TE`, `Trailer`, `Transfer-Encoding` and `Upgrade`.
pub(crate) fn is_hop_by_hop_name(name: &[u8]) -> bool {
    // By length first: most names are none of these, and are told so by one comparison.
    let set: &[&[u8]] = match name.len() {
        2 => &[b"te"],
        7 => &[b"trailer", b"upgrade"],
        10 => &[b"connection", b"keep-alive"],
        16 => &[b"proxy-connection"],
        17 => &[b"transfer-encoding"],
        18 => &[b"proxy-authenticate"],
        19 => &[b"proxy-authorization"],
        _ => return false,
    };
    set.iter().any(|hop| name.eq_ignore_ascii_case(hop))
}

/// Whether `name` is one of the fields that always concern one connection only (the set
/// [`is_hop_by_hop_name`] names).
pub(crate) fn is_hop_by_hop(name: &HeaderName) -> bool {
    is_hop_by_hop_name(name.as_str().as_bytes())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        map
    }

    #[test]
    fn hop_by_hop_fields_are_removed_from_every_connection_line() {
        let mut map = headers(&[
            ("connection", "keep-alive, x-secret"),
            ("connection", "x-second-line"),
            ("keep-alive", "timeout=5"),
            ("x-secret", "1"),
            ("x-second-line", "1"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "h2c"),
            ("proxy-authorization", "Basic x"),
            ("te", "trailers"),
            ("accept", "*/*"),
        ]);
        remove_hop_by_hop(&mut map);
        let left: Vec<&str> = map.keys().map(HeaderName::as_str).collect();
        assert_eq!(left, ["accept"]);
    }

    #[test]
    fn hop_by_hop_names_are_told_in_any_case() {
        let hop_by_hop = [
            "connection",
            "keep-alive",
            "proxy-authenticate",
            "proxy-authorization",
            "proxy-connection",
            "te",
            "trailer",
            "transfer-encoding",
            "upgrade",
        ];
        let end_to_end = [
            "content-length",
            "content-type",
            "tes",
            "t",
            "trailers",
            "upgrade-insecure-requests",
            "x-connection",
            "keep-alives",
            "date",
        ];
        for (names, expected) in [(hop_by_hop, true), (end_to_end, false)] {
            for name in names {
                assert_eq!(is_hop_by_hop(&HeaderName::from_static(name)), expected);
                for spelling in [name.to_owned(), name.to_ascii_uppercase()] {
                    assert_eq!(
                        is_hop_by_hop_name(spelling.as_bytes()),
                        expected,
                        "{spelling}"
                    );
                }
            }
        }
    }

    #[test]
    fn lengths_are_digits_only() {
        assert_eq!(parse_length(b"0"), Some(0));
        assert_eq!(parse_length(b"65536"), Some(65_536));
        assert_eq!(parse_length(b""), None);
        assert_eq!(parse_length(b"1 "), None);
        assert_eq!(parse_length(b"+1"), None);
        assert_eq!(parse_length(b"1,1"), None);
        assert_eq!(parse_length(b"99999999999999999999"), None);
    }
}
