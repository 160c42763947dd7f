//! The request path in the one spelling a node matches and forwards (SPEC §14.3).
//!
//! Servers disagree about paths: Tomcat and Spring drop `;parameters` from each segment, IIS
//! reads `\` as `/` and ignores case, some origins keep `%2F` encoded while others decode it,
//! Express matches `..` without resolving it, and a chain of proxies may decode twice. A path
//! that any of them would read as another route than ours is refused ([`AmbiguousPath`]);
//! every other path is put in one canonical form, which is what routes match and what the
//! origin receives, so no origin can resolve it to a route the gateway did not check.
//!
//! Refused, raw or percent-encoded in any hex case:
//! - `/` encoded (`%2F`), `\` (literal or `%5C`): a segment boundary only some servers see;
//! - `;` (literal or `%3B`): a parameter to Tomcat, Jetty and Spring, which drop it;
//! - `.` and `..` segments (`%2e%2E` included): resolved by some servers, not by others;
//! - `%25`: an encoded `%` reads as another path to anything that decodes twice;
//! - control characters (`%00`, `%0D%0A`, …): C servers cut the path at NUL, loggers split it;
//! - `%` not followed by two hex digits (IIS's `%u0062` among them), and encodings that do not
//!   decode to UTF-8 (overlong `%C0%AE` is `.` to lax decoders);
//! - raw characters that have no place in a request target (space, `#`, `?`, non-ASCII).
//!
//! The canonical form: empty segments merged (`//a` is `/a`, as nginx and Tomcat read it), a
//! trailing `/` kept (matching ignores it anyway), encoded unreserved characters (letters,
//! digits, `-._~`) decoded, every other encoding kept with upper-case hex. The query is not
//! part of the path and is forwarded as it came.
//!
//! What is not refused: non-ASCII text (valid UTF-8, percent-encoded) and ASCII case; routes
//! for origins that ignore case say `case_insensitive = true`.
//!
//! The `paths` fuzz target (`crates/core/fuzz/`, nightly, run by `scripts/fuzz`) holds the
//! canonical form to models of Tomcat-, IIS- and nginx-style readings.

use std::borrow::Cow;

/// Why a path was refused: servers would read it differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum AmbiguousPath {
    /// The path does not start with `/` (`*`, an empty path).
    #[error("the path must start with '/'")]
    NotAbsolute,
    /// `%2F`: a `/` some servers decode and others keep.
    #[error("the path holds an encoded '/' (%2F)")]
    EncodedSlash,
    /// `\` or `%5C`: a `/` to IIS and Windows.
    #[error("the path holds a backslash, literal or encoded (%5C)")]
    Backslash,
    /// `;` or `%3B`: a segment parameter to Tomcat, Jetty and Spring.
    #[error("the path holds a ';' (a segment parameter to some servers), literal or encoded")]
    SegmentParameter,
    /// A `.` or `..` segment, plain or encoded.
    #[error("the path holds a '.' or '..' segment, plain or encoded")]
    DotSegment,
    /// `%25`: decoded twice, it reads as another path.
    #[error("the path holds an encoded '%' (%25)")]
    EncodedPercent,
    /// A control character, encoded (`%00`) or raw.
    #[error("the path holds a control character (such as %00)")]
    ControlCharacter,
    /// A `%` not followed by two hex digits.
    #[error("the path holds a '%' not followed by two hex digits")]
    MalformedEncoding,
    /// Percent-encodings that do not decode to UTF-8.
    #[error("the path's percent-encodings do not decode to UTF-8")]
    InvalidUtf8,
    /// A raw character with no place in a request target (space, `#`, `?`, non-ASCII).
    #[error("the path holds a character that must be percent-encoded")]
    InvalidCharacter,
}

/// The path (without its query) in canonical form, or why it is refused. An already canonical
/// path, the common case, is returned as it is, without allocating.
///
/// ```
/// use anteroom_core::request_path::{AmbiguousPath, canonical_path};
///
/// assert_eq!(canonical_path("/events/1/book").unwrap(), "/events/1/book");
/// assert_eq!(canonical_path("//events/%31/b%6fok/").unwrap(), "/events/1/book/");
/// assert_eq!(canonical_path("/caf%c3%a9").unwrap(), "/caf%C3%A9");
/// assert_eq!(canonical_path("/events/1/book;x=1"), Err(AmbiguousPath::SegmentParameter));
/// assert_eq!(canonical_path("/static/%2e%2E/book"), Err(AmbiguousPath::DotSegment));
/// ```
pub fn canonical_path(path: &str) -> Result<Cow<'_, str>, AmbiguousPath> {
    if !path.starts_with('/') {
        return Err(AmbiguousPath::NotAbsolute);
    }
    let mut needs_rewrite = false;
    for byte in path.bytes() {
        match byte {
            b'%' => needs_rewrite = true,
            _ => check_raw(byte)?,
        }
    }
    let mut segments = path[1..].split('/').peekable();
    while let Some(segment) = segments.next() {
        match segment {
            "." | ".." => return Err(AmbiguousPath::DotSegment),
            // `//`: merged. A last empty segment is the trailing `/`, which stays.
            "" if segments.peek().is_some() => needs_rewrite = true,
            _ => {}
        }
    }
    if !needs_rewrite {
        return Ok(Cow::Borrowed(path));
    }
    rewrite(path).map(Cow::Owned)
}

/// Why a byte is refused in a path whether it comes raw or percent-encoded; `None` when it
/// may appear.
fn refused_in_any_form(byte: u8) -> Option<AmbiguousPath> {
    match byte {
        b'\\' => Some(AmbiguousPath::Backslash),
        b';' => Some(AmbiguousPath::SegmentParameter),
        0x00..=0x1F | 0x7F => Some(AmbiguousPath::ControlCharacter),
        _ => None,
    }
}

/// A raw (not percent-encoded) byte of a path: refused or let through as it is.
fn check_raw(byte: u8) -> Result<(), AmbiguousPath> {
    if let Some(reason) = refused_in_any_form(byte) {
        return Err(reason);
    }
    match byte {
        b' ' | b'#' | b'?' | 0x80..=0xFF => Err(AmbiguousPath::InvalidCharacter),
        _ => Ok(()),
    }
}

/// The canonical form of a path that starts with `/` and whose raw bytes passed
/// [`check_raw`]: segment by segment, each decoded to check it and re-encoded canonically.
fn rewrite(path: &str) -> Result<String, AmbiguousPath> {
    let mut out = String::with_capacity(path.len());
    let mut decoded = Vec::new();
    let mut segments = path[1..].split('/').peekable();
    while let Some(segment) = segments.next() {
        let last = segments.peek().is_none();
        if segment.is_empty() {
            if last {
                out.push('/');
            }
            continue;
        }
        out.push('/');
        decoded.clear();
        push_segment(segment.as_bytes(), &mut out, &mut decoded)?;
        if decoded == b"." || decoded == b".." {
            return Err(AmbiguousPath::DotSegment);
        }
        if std::str::from_utf8(&decoded).is_err() {
            return Err(AmbiguousPath::InvalidUtf8);
        }
    }
    if out.is_empty() {
        out.push('/');
    }
    Ok(out)
}

/// Appends one segment's canonical spelling to `out`, and its decoded bytes to `decoded`.
fn push_segment(
    segment: &[u8],
    out: &mut String,
    decoded: &mut Vec<u8>,
) -> Result<(), AmbiguousPath> {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut at = 0;
    while at < segment.len() {
        let byte = segment[at];
        if byte != b'%' {
            // Raw bytes were checked: printable ASCII.
            out.push(char::from(byte));
            decoded.push(byte);
            at += 1;
            continue;
        }
        let (Some(high), Some(low)) = (
            segment.get(at + 1).and_then(|digit| hex_value(*digit)),
            segment.get(at + 2).and_then(|digit| hex_value(*digit)),
        ) else {
            return Err(AmbiguousPath::MalformedEncoding);
        };
        let value = high * 16 + low;
        if let Some(reason) = refused_in_any_form(value) {
            return Err(reason);
        }
        match value {
            b'/' => return Err(AmbiguousPath::EncodedSlash),
            b'%' => return Err(AmbiguousPath::EncodedPercent),
            _ if is_unreserved(value) => out.push(char::from(value)),
            _ => {
                out.push('%');
                out.push(char::from(HEX[usize::from(value >> 4)]));
                out.push(char::from(HEX[usize::from(value & 0x0F)]));
            }
        }
        decoded.push(value);
        at += 3;
    }
    Ok(())
}

/// RFC 3986 §2.3: characters whose encoded and plain forms mean the same to every server.
fn is_unreserved(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~')
}

fn hex_value(byte: u8) -> Option<u8> {
    char::from(byte)
        .to_digit(16)
        .and_then(|digit| u8::try_from(digit).ok())
}

#[cfg(test)]
mod tests;
