//! The forwarding fields of a request to the upstream (SPEC §7.2): `X-Forwarded-For`,
//! `X-Forwarded-Proto`, `X-Forwarded-Host` and `Forwarded`, kept from a trusted proxy and
//! dropped from anybody else, written straight into the request head by the own client
//! (`upstream_client.rs`) or put in the header map for hyper's (`proxy.rs`) and WebSocket
//! handshakes (`websocket.rs`).

use std::net::IpAddr;

use axum::http::{HeaderMap, HeaderName, HeaderValue, header};

use anteroom_core::config::Cidr;
use anteroom_core::ratelimit::client_ip::{is_trusted, push_ipv4};

use crate::client_scheme::ClientScheme;

static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
static X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
static X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

fn is_forwarding(name: &HeaderName) -> bool {
    name == header::FORWARDED
        || name == X_FORWARDED_FOR
        || name == X_FORWARDED_PROTO
        || name == X_FORWARDED_HOST
}

/// Sets `X-Forwarded-For/Proto/Host` and `Forwarded` (see [`Forwarding::take`]).
pub(crate) fn set_forwarding(
    headers: &mut HeaderMap,
    peer: Option<IpAddr>,
    scheme: ClientScheme,
    host: Option<&HeaderValue>,
    trusted_proxies: &[Cidr],
) {
    Forwarding::take(headers, peer, scheme, host, trusted_proxies).insert_into(headers);
}

/// The forwarding fields of a request to the upstream: `X-Forwarded-For`,
/// `X-Forwarded-Proto`, `X-Forwarded-Host` and `Forwarded`. Our own upstream client writes
/// them straight into the request ([`write_lines`](Self::write_lines)); hyper's client and
/// WebSocket handshakes get them in the header map ([`insert_into`](Self::insert_into)).
pub(crate) struct Forwarding {
    /// `X-Forwarded-For` (a trusted proxy's chain and the peer), then `Forwarded` (a trusted
    /// proxy's elements and ours): one text, so one allocation.
    text: String,
    /// Where `X-Forwarded-For` ends in `text`.
    for_end: usize,
    /// `X-Forwarded-Proto` (`http` or `https`), unless a trusted proxy's value stays in the
    /// map.
    proto: Option<&'static str>,
    /// `X-Forwarded-Host`, unless a trusted proxy's value stays in the map.
    host: Option<HeaderValue>,
}

impl Forwarding {
    /// The forwarding fields for a request from `peer` to `host`, taken out of `headers`.
    /// From a trusted proxy the chains it sent are kept and the peer appended (its
    /// `X-Forwarded-Proto/Host` stay in `headers`); from anybody else they are dropped (a
    /// client cannot plant addresses the site would believe).
    pub(crate) fn take(
        headers: &mut HeaderMap,
        peer: Option<IpAddr>,
        scheme: ClientScheme,
        host: Option<&HeaderValue>,
        trusted_proxies: &[Cidr],
    ) -> Forwarding {
        let peer = peer.map(|peer| peer.to_canonical());
        let trusted = peer.is_some_and(|peer| is_trusted(peer, trusted_proxies));
        // Most requests carry none of these: one pass over the names says so.
        let any_sent = headers.keys().any(is_forwarding);
        let kept = any_sent && trusted;
        let mut text = String::with_capacity(144);
        if kept {
            push_joined(&mut text, headers, &X_FORWARDED_FOR);
        }
        let peer_at = text.len();
        push_address(&mut text, peer, false);
        let for_end = text.len();
        if kept {
            push_joined(&mut text, headers, &header::FORWARDED);
        }
        text.push_str("for=");
        match peer {
            // Quoted and bracketed in a `Forwarded` node.
            Some(IpAddr::V6(_)) => push_address(&mut text, peer, true),
            // Written once, as it is in both.
            _ => text.extend_from_within(peer_at..for_end),
        }
        text.push_str(";proto=");
        text.push_str(scheme.as_str());
        if let Some(host) = host.and_then(|host| host.to_str().ok()) {
            text.push_str(";host=\"");
            // Without the quotes and backslashes that would end or escape the quoted string
            // (a host has none: it is one piece, copied whole).
            host.split(['"', '\\']).for_each(|part| text.push_str(part));
            text.push('"');
        }
        let proto = (!kept || !headers.contains_key(&X_FORWARDED_PROTO)).then(|| scheme.as_str());
        let host = host
            .filter(|_| !kept || !headers.contains_key(&X_FORWARDED_HOST))
            .cloned();
        if any_sent {
            headers.remove(&X_FORWARDED_FOR);
            headers.remove(header::FORWARDED);
            if !trusted {
                headers.remove(&X_FORWARDED_PROTO);
                headers.remove(&X_FORWARDED_HOST);
            }
        }
        Forwarding {
            text,
            for_end,
            proto,
            host,
        }
    }

    /// `X-Forwarded-For`'s value.
    fn for_chain(&self) -> &str {
        &self.text[..self.for_end]
    }

    /// `Forwarded`'s value.
    fn forwarded(&self) -> &str {
        &self.text[self.for_end..]
    }

    /// Puts the fields into `headers`.
    pub(crate) fn insert_into(self, headers: &mut HeaderMap) {
        let forwarded = HeaderValue::from_str(self.forwarded());
        if let Ok(value) = HeaderValue::from_str(self.for_chain()) {
            headers.insert(X_FORWARDED_FOR.clone(), value);
        }
        if let Some(proto) = self.proto {
            headers.insert(X_FORWARDED_PROTO.clone(), HeaderValue::from_static(proto));
        }
        if let Some(host) = self.host {
            headers.insert(X_FORWARDED_HOST.clone(), host);
        }
        if let Ok(value) = forwarded {
            headers.insert(header::FORWARDED, value);
        }
    }

    /// Writes the fields as HTTP/1.1 header lines. Their values are text from header values
    /// and addresses, so they hold no line breaks.
    pub(crate) fn write_lines(&self, out: &mut Vec<u8>) {
        let mut line = |name: &[u8], value: &[u8]| {
            out.extend_from_slice(name);
            out.extend_from_slice(value);
            out.extend_from_slice(b"\r\n");
        };
        line(b"x-forwarded-for: ", self.for_chain().as_bytes());
        if let Some(proto) = self.proto {
            line(b"x-forwarded-proto: ", proto.as_bytes());
        }
        if let Some(host) = &self.host {
            line(b"x-forwarded-host: ", host.as_bytes());
        }
        line(b"forwarded: ", self.forwarded().as_bytes());
    }
}

/// Appends the values of `name` joined by `, ` and a trailing `, ` (nothing when it has no
/// non-blank value).
fn push_joined(out: &mut String, headers: &HeaderMap, name: &HeaderName) {
    for value in headers.get_all(name) {
        if let Ok(text) = value.to_str()
            && !text.trim().is_empty()
        {
            out.push_str(text);
            out.push_str(", ");
        }
    }
}

/// Appends the peer's address: `unknown` when there is none; an IPv6 address quoted and
/// bracketed in a `Forwarded` node (`quoted`).
fn push_address(out: &mut String, peer: Option<IpAddr>, quoted: bool) {
    use std::fmt::Write as _;
    // Writing into a String cannot fail.
    match peer {
        None => out.push_str("unknown"),
        Some(IpAddr::V4(v4)) => push_ipv4(out, v4),
        Some(IpAddr::V6(v6)) if quoted => {
            let _ = write!(out, "\"[{v6}]\"");
        }
        Some(IpAddr::V6(v6)) => {
            let _ = write!(out, "{v6}");
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::str::FromStr;

    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.append(
                HeaderName::from_str(name).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        headers
    }

    fn check_forwarding(
        incoming: &[(&str, &str)],
        peer: &str,
        trusted: &[&str],
        expected: &[(&str, &str)],
    ) {
        let trusted: Vec<Cidr> = trusted.iter().map(|cidr| cidr.parse().unwrap()).collect();
        let host = HeaderValue::from_static("shop.example");
        let peer = Some(peer.parse().unwrap());
        let mut map = headers(incoming);
        set_forwarding(&mut map, peer, ClientScheme::Http, Some(&host), &trusted);
        for (name, value) in expected {
            assert_eq!(map.get(*name).unwrap(), value, "{name}");
        }
        // Written as lines (our own client), the upstream sees the same fields once each: the
        // lines, and what stays in the map.
        let mut left = headers(incoming);
        let mut lines = Vec::new();
        Forwarding::take(&mut left, peer, ClientScheme::Http, Some(&host), &trusted)
            .write_lines(&mut lines);
        let lines = String::from_utf8(lines).unwrap();
        let mut seen = HeaderMap::new();
        for line in lines.split_terminator("\r\n") {
            let (name, value) = line.split_once(": ").unwrap();
            seen.append(
                HeaderName::from_str(name).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        for (name, value) in &left {
            if is_forwarding(name) {
                seen.append(name.clone(), value.clone());
            }
        }
        let set: Vec<(&HeaderName, &HeaderValue)> =
            map.iter().filter(|(name, _)| is_forwarding(name)).collect();
        assert_eq!(seen.len(), set.len(), "{lines}");
        for (name, value) in set {
            assert_eq!(
                seen.get_all(name).iter().collect::<Vec<_>>(),
                [value],
                "{name}"
            );
        }
    }

    #[test]
    fn forwarding_headers_are_set_and_appended_only_for_trusted_peers() {
        check_forwarding(
            &[("x-forwarded-for", "6.6.6.6"), ("forwarded", "for=6.6.6.6")],
            "203.0.113.7",
            &["10.0.0.0/8"],
            &[
                ("x-forwarded-for", "203.0.113.7"),
                ("x-forwarded-proto", "http"),
                ("x-forwarded-host", "shop.example"),
                (
                    "forwarded",
                    "for=203.0.113.7;proto=http;host=\"shop.example\"",
                ),
            ],
        );
        check_forwarding(
            &[
                ("x-forwarded-for", "198.51.100.1"),
                ("x-forwarded-proto", "https"),
                ("x-forwarded-host", "www.shop.example"),
                ("forwarded", "for=198.51.100.1;proto=https"),
            ],
            "10.0.0.2",
            &["10.0.0.0/8"],
            &[
                ("x-forwarded-for", "198.51.100.1, 10.0.0.2"),
                ("x-forwarded-proto", "https"),
                ("x-forwarded-host", "www.shop.example"),
                (
                    "forwarded",
                    "for=198.51.100.1;proto=https, for=10.0.0.2;proto=http;host=\"shop.example\"",
                ),
            ],
        );
        let host = HeaderValue::from_static("shop.example\\\"; for=evil\\");
        let mut map = HeaderMap::new();
        set_forwarding(&mut map, None, ClientScheme::Https, Some(&host), &[]);
        assert_eq!(
            map["forwarded"],
            "for=unknown;proto=https;host=\"shop.example; for=evil\""
        );
        assert_eq!(map["x-forwarded-for"], "unknown");
        check_forwarding(
            &[],
            "2001:db8::1",
            &[],
            &[(
                "forwarded",
                "for=\"[2001:db8::1]\";proto=http;host=\"shop.example\"",
            )],
        );
    }
}
