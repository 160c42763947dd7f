//! Which address a request comes from (SPEC §10.2): the peer's, unless the peer is a trusted
//! proxy, in which case the forwarding headers it added are believed, back to the first
//! address that is not a trusted proxy.
//!
//! - `X-Forwarded-For` is read when present; otherwise `Forwarded` (RFC 7239, its `for=`
//!   parameters). Only one of them is read, so a trusted proxy must maintain the one it uses
//!   (every common proxy appends to `X-Forwarded-For` by default).
//! - The chain is walked from the right (the entry the nearest proxy added) and the first
//!   address outside `trusted_proxies` is the client. When every entry is trusted, the
//!   left-most is the client.
//! - An entry that is not an address (garbage, `unknown`, an obfuscated `_name`) reached before
//!   the client is found makes the header untrustworthy: the peer is the client. Entries left
//!   of the client, which the client itself may have written, are never read.
//! - IPv4-mapped IPv6 addresses (`::ffff:192.0.2.1`) are treated as the IPv4 address.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::cidr::Cidr;

/// The client address of a request from `peer` carrying the given `X-Forwarded-For` and
/// `Forwarded` header lines (in the order received).
///
/// ```
/// use anteroom_core::config::Cidr;
/// use anteroom_core::ratelimit::client_ip::client_ip;
///
/// let trusted: Vec<Cidr> = vec!["10.0.0.0/8".parse().expect("valid")];
/// let proxy = "10.0.0.2".parse().expect("valid");
/// let xff = ["198.51.100.9, 203.0.113.7, 10.0.0.1"];
/// assert_eq!(client_ip(proxy, &trusted, &xff, &[]).to_string(), "203.0.113.7");
///
/// // The same header from a peer that is not trusted is ignored.
/// let stranger = "192.0.2.1".parse().expect("valid");
/// assert_eq!(client_ip(stranger, &trusted, &xff, &[]).to_string(), "192.0.2.1");
/// ```
pub fn client_ip(
    peer: IpAddr,
    trusted_proxies: &[Cidr],
    x_forwarded_for: &[&str],
    forwarded: &[&str],
) -> IpAddr {
    let peer = peer.to_canonical();
    if !is_trusted(peer, trusted_proxies) {
        return peer;
    }
    let present = |lines: &[&str]| lines.iter().any(|line| !line.trim().is_empty());
    let chain: Vec<&str> = if present(x_forwarded_for) {
        x_forwarded_for
            .iter()
            .flat_map(|line| line.split(','))
            .collect()
    } else if present(forwarded) {
        let elements: Vec<&str> = forwarded
            .iter()
            .flat_map(|line| split_outside_quotes(line, b','))
            .collect();
        return walk(
            peer,
            trusted_proxies,
            elements.into_iter().rev(),
            forwarded_for,
        );
    } else {
        return peer;
    };
    walk(peer, trusted_proxies, chain.into_iter().rev(), parse_node)
}

/// Walks `entries` right to left: the first untrusted address, else the left-most trusted
/// one; the peer if an entry before that does not parse.
fn walk<'a>(
    peer: IpAddr,
    trusted_proxies: &[Cidr],
    entries: impl Iterator<Item = &'a str>,
    parse: impl Fn(&str) -> Option<IpAddr>,
) -> IpAddr {
    let mut leftmost = peer;
    for entry in entries {
        let Some(ip) = parse(entry) else {
            return peer;
        };
        if !is_trusted(ip, trusted_proxies) {
            return ip;
        }
        leftmost = ip;
    }
    leftmost
}

/// Whether `ip` lies in one of `trusted_proxies`.
pub fn is_trusted(ip: IpAddr, trusted_proxies: &[Cidr]) -> bool {
    trusted_proxies.iter().any(|cidr| cidr.contains(ip))
}

/// The address a client is counted by in per-address caps: an IPv4 address (one mapped into
/// IPv6 included) as itself, an IPv6 address by its /64, as [`ip_key`] keys rate limits by
/// default: one subscriber holds a whole /64, and counting its addresses apart would give it
/// 2^64 times the cap.
///
/// ```
/// use anteroom_core::ratelimit::client_ip::subscriber;
///
/// assert_eq!(subscriber("2001:db8:1:2:aaaa::1".parse().expect("valid")), "2001:db8:1:2::".parse::<std::net::IpAddr>().expect("valid"));
/// assert_eq!(subscriber("::ffff:192.0.2.1".parse().expect("valid")), "192.0.2.1".parse::<std::net::IpAddr>().expect("valid"));
/// ```
pub fn subscriber(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & (u128::MAX << 64))),
    }
}

/// The key part of a client address: an IPv4 address as itself, an IPv6 address by its first
/// `ipv6_prefix` bits (`2001:db8:1:2::/64`), so the many addresses one subscriber holds count
/// as one.
///
/// ```
/// use anteroom_core::ratelimit::client_ip::ip_key;
///
/// assert_eq!(ip_key("2001:db8:1:2:aaaa::1".parse().expect("valid"), 64), "2001:db8:1:2::/64");
/// assert_eq!(ip_key("::ffff:192.0.2.1".parse().expect("valid"), 64), "192.0.2.1");
/// ```
pub fn ip_key(ip: IpAddr, ipv6_prefix: u8) -> String {
    let mut key = String::with_capacity(15);
    // Writing into a String cannot fail.
    let _ = push_ip_key(&mut key, ip, ipv6_prefix);
    key
}

/// Appends [`ip_key`] of `ip` to `key` (a rate-limit counter key being built: a `String`, or
/// text on the stack). Fails only when `key` does.
pub fn push_ip_key(
    key: &mut impl std::fmt::Write,
    ip: IpAddr,
    ipv6_prefix: u8,
) -> std::fmt::Result {
    match ip.to_canonical() {
        IpAddr::V4(v4) => push_ipv4(key, v4),
        IpAddr::V6(v6) if ipv6_prefix >= 128 => write!(key, "{v6}"),
        IpAddr::V6(v6) => {
            let mask = u128::MAX
                .checked_shl(128 - u32::from(ipv6_prefix))
                .unwrap_or(0);
            let network = Ipv6Addr::from(u128::from(v6) & mask);
            write!(key, "{network}/{ipv6_prefix}")
        }
    }
}

/// Appends `ip` in dotted decimal, as `Display` writes it, without the formatting machinery
/// (it runs for every request a per-address rule or the gateway's forwarding headers see),
/// to any text: a `String`, or a buffer kept on the stack. Fails only when `out` does.
///
/// ```
/// let mut text = String::from("for=");
/// anteroom_core::ratelimit::client_ip::push_ipv4(&mut text, "203.0.10.7".parse().expect("valid"))
///     .expect("a String takes any text");
/// assert_eq!(text, "for=203.0.10.7");
/// ```
pub fn push_ipv4(out: &mut impl std::fmt::Write, ip: Ipv4Addr) -> std::fmt::Result {
    let (text, len) = ipv4_digits(ip);
    out.write_str(std::str::from_utf8(&text[..len]).map_err(|_| std::fmt::Error)?)
}

/// Appends `ip` in dotted decimal to bytes (a head being written): as [`push_ipv4`], without
/// checking as text what is ASCII by construction.
///
/// ```
/// let mut head = b"for=".to_vec();
/// anteroom_core::ratelimit::client_ip::push_ipv4_bytes(&mut head, "203.0.10.7".parse().expect("valid"));
/// assert_eq!(head, b"for=203.0.10.7");
/// ```
pub fn push_ipv4_bytes(out: &mut Vec<u8>, ip: Ipv4Addr) {
    let (text, len) = ipv4_digits(ip);
    out.extend_from_slice(&text[..len]);
}

/// `ip` in dotted decimal: the bytes and how many of them are used. Put together first and
/// written once: a write per digit costs a call each.
fn ipv4_digits(ip: Ipv4Addr) -> ([u8; 15], usize) {
    let mut text = [0u8; 15];
    let mut len = 0;
    let mut put = |byte: u8| {
        if let Some(place) = text.get_mut(len) {
            *place = byte;
            len += 1;
        }
    };
    for (index, octet) in ip.octets().into_iter().enumerate() {
        if index > 0 {
            put(b'.');
        }
        if octet >= 100 {
            put(b'0' + octet / 100);
        }
        if octet >= 10 {
            put(b'0' + octet / 10 % 10);
        }
        put(b'0' + octet % 10);
    }
    (text, len)
}

/// One `X-Forwarded-For` entry (or the node of a `for=`): an address, optionally with a port
/// (`192.0.2.1:443`, `[2001:db8::1]:443`, `[2001:db8::1]`).
fn parse_node(entry: &str) -> Option<IpAddr> {
    let text = entry.trim();
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Some(ip.to_canonical());
    }
    if let Ok(socket) = text.parse::<SocketAddr>() {
        return Some(socket.ip().to_canonical());
    }
    if let Some(rest) = text.strip_prefix('[') {
        let (inner, after) = rest.split_once(']')?;
        let port_ok = after.is_empty() || after.strip_prefix(':').is_some_and(is_port);
        return port_ok
            .then(|| inner.parse::<Ipv6Addr>().ok())
            .flatten()
            .map(|ip| IpAddr::V6(ip).to_canonical());
    }
    // RFC 7239 allows an obfuscated port (`192.0.2.1:_abc`).
    let (host, port) = text.rsplit_once(':')?;
    if !is_port(port) {
        return None;
    }
    host.parse::<std::net::Ipv4Addr>().ok().map(IpAddr::V4)
}

fn is_port(port: &str) -> bool {
    !port.is_empty()
        && (port.bytes().all(|b| b.is_ascii_digit())
            || (port.starts_with('_')
                && port[1..]
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')))
}

/// The address in the `for=` parameter of one `Forwarded` element; `None` when there is none
/// or it is not an address.
fn forwarded_for(element: &str) -> Option<IpAddr> {
    let value = split_outside_quotes(element, b';')
        .into_iter()
        .filter_map(|pair| pair.split_once('='))
        .find(|(name, _)| name.trim().eq_ignore_ascii_case("for"))
        .map(|(_, value)| value.trim())?;
    match value.strip_prefix('"') {
        Some(quoted) => parse_node(&unquote(quoted)?),
        None => parse_node(value),
    }
}

/// The content of a quoted-string whose opening quote is already stripped; `None` when it
/// does not end with its closing quote.
fn unquote(quoted: &str) -> Option<String> {
    let mut out = String::with_capacity(quoted.len());
    let mut chars = quoted.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.push(chars.next()?),
            '"' => return chars.as_str().trim().is_empty().then_some(out),
            _ => out.push(c),
        }
    }
    None
}

/// Splits `text` at `separator` where it is not inside a quoted-string.
fn split_outside_quotes(text: &str, separator: u8) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut start = 0;
    let mut in_quotes = false;
    let mut escaped = false;
    for (at, byte) in text.bytes().enumerate() {
        if escaped {
            escaped = false;
            continue;
        }
        match byte {
            b'\\' if in_quotes => escaped = true,
            b'"' => in_quotes = !in_quotes,
            _ if byte == separator && !in_quotes => {
                parts.push(&text[start..at]);
                start = at + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

#[cfg(test)]
mod tests;
