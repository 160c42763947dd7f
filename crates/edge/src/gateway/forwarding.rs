//! The forwarding fields of a request to the upstream (SPEC §7.2): `X-Forwarded-For`,
//! `X-Forwarded-Proto`, `X-Forwarded-Host` and `Forwarded`, kept from a trusted proxy and
//! dropped from anybody else, written straight into the request head by the own client
//! (`upstream_client.rs`) or put in the header map for hyper's (`proxy.rs`) and WebSocket
//! handshakes (`websocket.rs`).
//!
//! The site trusts the gateway as its proxy, so every other field by which a proxy tells
//! the site about the visitor (any `X-Forwarded-*`, `X-Real-IP`, `X-Original-*`, the
//! client-address fields of CDNs) reaches it only from a trusted proxy (SPEC §14.1): from
//! anybody else it is dropped, or a visitor could name their own address, prefix or
//! original URI to a site that believes its proxy.

use std::net::IpAddr;

use axum::http::{HeaderMap, HeaderName, HeaderValue, header};
use bytes::Bytes;

use anteroom_core::config::Cidr;
use anteroom_core::ratelimit::client_ip::{is_trusted, push_ipv4_bytes};

use crate::client_scheme::ClientScheme;

static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
static X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
static X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

/// Whether `name` is a field by which a proxy tells the site about the visitor (names in a
/// map are lower case).
fn is_forwarding(name: &HeaderName) -> bool {
    let name = name.as_str();
    name == "forwarded"
        || name.starts_with("x-forwarded-")
        || name.starts_with("x-original-")
        || matches!(
            name,
            "x-real-ip"
                | "x-client-ip"
                | "x-cluster-client-ip"
                | "true-client-ip"
                | "cf-connecting-ip"
                | "fastly-client-ip"
                | "x-envoy-original-path"
                | "x-envoy-external-address"
        )
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
/// them straight into the request ([`write_lines`](Self::write_lines)), from the peer, the
/// scheme and the host, with no text of their own made first (a text made per request was
/// an allocation, or, kept on the stack, a larger request to move from step to step);
/// hyper's client and WebSocket handshakes get them in the header map
/// ([`insert_into`](Self::insert_into)), each value written by the same code.
pub(crate) struct Forwarding {
    /// The peer's address, canonical (`None`: unknown).
    peer: Option<IpAddr>,
    scheme: ClientScheme,
    /// A trusted proxy's `X-Forwarded-For` chain and `Forwarded` elements, each joined with a
    /// trailing `, `, when it sent any (kept to be extended; rare: one allocation then).
    kept: Option<Box<KeptChains>>,
    /// `X-Forwarded-Proto` (`http` or `https`), unless a trusted proxy's value stays in the
    /// map.
    proto: Option<&'static str>,
    /// The request's host: named in `Forwarded` when it is text.
    host: Option<HeaderValue>,
    /// Whether `X-Forwarded-Host` is the host (not when a trusted proxy's value stays in the
    /// map).
    x_forwarded_host: bool,
}

/// What a trusted proxy sent: its chains, each joined with a trailing `, `.
struct KeptChains {
    for_chain: String,
    forwarded: String,
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
        let chains = kept.then(|| {
            let mut chains = KeptChains {
                for_chain: String::new(),
                forwarded: String::new(),
            };
            push_joined(&mut chains.for_chain, headers, &X_FORWARDED_FOR);
            push_joined(&mut chains.forwarded, headers, &header::FORWARDED);
            Box::new(chains)
        });
        let chains =
            chains.filter(|chains| !chains.for_chain.is_empty() || !chains.forwarded.is_empty());
        let proto = (!kept || !headers.contains_key(&X_FORWARDED_PROTO)).then(|| scheme.as_str());
        let x_forwarded_host =
            host.is_some() && (!kept || !headers.contains_key(&X_FORWARDED_HOST));
        let host = host.cloned();
        if any_sent {
            headers.remove(&X_FORWARDED_FOR);
            headers.remove(header::FORWARDED);
            if !trusted {
                let planted: Vec<HeaderName> = headers
                    .keys()
                    .filter(|name| is_forwarding(name))
                    .cloned()
                    .collect();
                for name in planted {
                    headers.remove(name);
                }
            }
        }
        Forwarding {
            peer,
            scheme,
            kept: chains,
            proto,
            host,
            x_forwarded_host,
        }
    }

    /// Writes `X-Forwarded-For`'s value: a trusted proxy's chain, then the peer.
    fn write_for_chain(&self, out: &mut Vec<u8>) {
        if let Some(kept) = &self.kept {
            out.extend_from_slice(kept.for_chain.as_bytes());
        }
        push_address(out, self.peer, false);
    }

    /// Writes `Forwarded`'s value: a trusted proxy's elements, then ours.
    fn write_forwarded(&self, out: &mut Vec<u8>) {
        if let Some(kept) = &self.kept {
            out.extend_from_slice(kept.forwarded.as_bytes());
        }
        out.extend_from_slice(b"for=");
        // Quoted and bracketed in a `Forwarded` node when IPv6.
        push_address(out, self.peer, true);
        out.extend_from_slice(b";proto=");
        out.extend_from_slice(self.scheme.as_str().as_bytes());
        if let Some(host) = self.host.as_ref().filter(|host| host.to_str().is_ok()) {
            out.extend_from_slice(b";host=\"");
            // Without the quotes and backslashes that would end or escape the quoted string
            // (a host has none: it is one piece, copied whole).
            host.as_bytes()
                .split(|byte| *byte == b'"' || *byte == b'\\')
                .for_each(|part| out.extend_from_slice(part));
            out.push(b'"');
        }
    }

    /// Puts the fields into `headers`.
    pub(crate) fn insert_into(self, headers: &mut HeaderMap) {
        let value = |write: &dyn Fn(&mut Vec<u8>)| {
            let mut text = Vec::new();
            write(&mut text);
            HeaderValue::from_maybe_shared(Bytes::from(text))
        };
        let forwarded = value(&|out| self.write_forwarded(out));
        if let Ok(value) = value(&|out| self.write_for_chain(out)) {
            headers.insert(X_FORWARDED_FOR.clone(), value);
        }
        if let Some(proto) = self.proto {
            headers.insert(X_FORWARDED_PROTO.clone(), HeaderValue::from_static(proto));
        }
        if let Some(host) = self.host.filter(|_| self.x_forwarded_host) {
            headers.insert(X_FORWARDED_HOST.clone(), host);
        }
        if let Ok(value) = forwarded {
            headers.insert(header::FORWARDED, value);
        }
    }

    /// Writes the fields as HTTP/1.1 header lines. Their values are text from header values
    /// and addresses, so they hold no line breaks.
    pub(crate) fn write_lines(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"x-forwarded-for: ");
        self.write_for_chain(out);
        out.extend_from_slice(b"\r\n");
        if let Some(proto) = self.proto {
            out.extend_from_slice(b"x-forwarded-proto: ");
            out.extend_from_slice(proto.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        if let Some(host) = self.host.as_ref().filter(|_| self.x_forwarded_host) {
            out.extend_from_slice(b"x-forwarded-host: ");
            out.extend_from_slice(host.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"forwarded: ");
        self.write_forwarded(out);
        out.extend_from_slice(b"\r\n");
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
fn push_address(out: &mut Vec<u8>, peer: Option<IpAddr>, quoted: bool) {
    use std::io::Write as _;
    // Writing into a vector cannot fail.
    match peer {
        None => out.extend_from_slice(b"unknown"),
        Some(IpAddr::V4(v4)) => push_ipv4_bytes(out, v4),
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
