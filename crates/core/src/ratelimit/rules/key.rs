//! The parts a rule's counter key is made of, and the key itself.
//!
//! A key is the rule's name followed by each part's value, separated by `|`. Values are
//! escaped (`%` → `%25`, `|` → `%7C`, `#` → `%23`) so two different requests can never make
//! the same key, and a value longer than [`MAX_KEY_PART_LEN`] bytes is replaced by `#` and its
//! SHA-256 (128 bits, hex), so a client cannot make the store hold arbitrarily long keys.

use std::fmt;

use sha2::{Digest, Sha256};

use super::matcher::is_token;
use super::request_view::RequestView;
use crate::ratelimit::client_ip::push_ip_key;

/// Values longer than this many bytes are hashed in the key.
pub const MAX_KEY_PART_LEN: usize = 128;

/// One part of a rule's counter key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum KeyPart {
    /// `ip`: the client address (IPv6 by the rule's prefix).
    Ip,
    /// `header:<Name>`: the first value of a request header (name stored in lower case).
    Header(String),
    /// `cookie:<name>`: a cookie's value.
    Cookie(String),
    /// `claim:<name>`: a claim of the request's verified token.
    Claim(String),
    /// `path`: the normalised request path.
    Path,
    /// `host`: the normalised host.
    Host,
}

/// Why a key part was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid key part {0:?}: expected \"ip\", \"header:<Name>\", \"cookie:<name>\", \"claim:<name>\", \"path\" or \"host\""
)]
pub struct KeyPartError(pub String);

impl std::str::FromStr for KeyPart {
    type Err = KeyPartError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let error = || KeyPartError(text.to_owned());
        let part = match text.split_once(':') {
            None => match text {
                "ip" => KeyPart::Ip,
                "path" => KeyPart::Path,
                "host" => KeyPart::Host,
                _ => return Err(error()),
            },
            Some(("header", name)) if is_token(name) => KeyPart::Header(name.to_ascii_lowercase()),
            // Cookie names are tokens too (RFC 6265 §4.1.1).
            Some(("cookie", name)) if is_token(name) => KeyPart::Cookie(name.to_owned()),
            Some(("claim", name)) if is_claim_name(name) => KeyPart::Claim(name.to_owned()),
            Some(_) => return Err(error()),
        };
        Ok(part)
    }
}

impl fmt::Display for KeyPart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyPart::Ip => f.write_str("ip"),
            KeyPart::Header(name) => write!(f, "header:{name}"),
            KeyPart::Cookie(name) => write!(f, "cookie:{name}"),
            KeyPart::Claim(name) => write!(f, "claim:{name}"),
            KeyPart::Path => f.write_str("path"),
            KeyPart::Host => f.write_str("host"),
        }
    }
}

/// Claim names are JSON member names; anything printable without spaces is accepted.
fn is_claim_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= 64 && name.bytes().all(|b| b.is_ascii_graphic())
}

/// Writes the key of `request` under a rule named `rule` keyed by `parts` into `key` (a
/// `String`, or text on the stack for a request decided at once); `None` when a part is
/// missing or empty, and then what was written is no key.
pub(super) fn write_key(
    rule: &str,
    parts: &[KeyPart],
    ipv6_prefix: u8,
    request: &impl RequestView,
    key: &mut impl fmt::Write,
) -> Option<()> {
    key.write_str(rule).ok()?;
    for part in parts {
        key.write_char('|').ok()?;
        match part {
            KeyPart::Ip => push_ip_key(key, request.client_ip(), ipv6_prefix).ok()?,
            KeyPart::Header(name) => push_value(key, request.header(name)?.trim())?,
            KeyPart::Cookie(name) => push_value(key, request.cookie(name)?)?,
            KeyPart::Claim(name) => push_value(key, request.claim(name)?)?,
            KeyPart::Path => push_value(key, request.path())?,
            KeyPart::Host => push_value(key, request.host()?)?,
        }
    }
    Some(())
}

/// Appends `value` escaped (or hashed when long); `None` for an empty value.
fn push_value(key: &mut impl fmt::Write, value: &str) -> Option<()> {
    if value.is_empty() {
        return None;
    }
    if value.len() > MAX_KEY_PART_LEN {
        key.write_char('#').ok()?;
        for byte in &Sha256::digest(value.as_bytes())[..16] {
            write!(key, "{byte:02x}").ok()?;
        }
        return Some(());
    }
    // The runs between the bytes escaped are written whole (the escaped ones are ASCII, so
    // they never split a character).
    let mut rest = value;
    while let Some(at) = rest.find(['%', '|', '#']) {
        let (run, escaped) = rest.split_at(at);
        key.write_str(run).ok()?;
        let escape = match escaped.as_bytes().first() {
            Some(b'%') => "%25",
            Some(b'|') => "%7C",
            _ => "%23",
        };
        key.write_str(escape).ok()?;
        rest = escaped.get(1..)?;
    }
    key.write_str(rest).ok()
}
