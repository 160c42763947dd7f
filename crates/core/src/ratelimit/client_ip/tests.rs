//! Client address resolution: trusted and untrusted peers, both forwarding headers, malformed
//! input, IPv4-mapped addresses, and IPv6 prefix keys; plus a property test that no header
//! makes the parser panic or invent an address.

#![allow(clippy::unwrap_used)]

use std::net::IpAddr;

use proptest::prelude::*;

use super::*;

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

fn cidrs(list: &[&str]) -> Vec<Cidr> {
    list.iter().map(|text| text.parse().unwrap()).collect()
}

/// The client of a request from `peer` with these headers, behind `trusted`, is `expected`.
fn check(peer: &str, trusted: &[&str], xff: &[&str], forwarded: &[&str], expected: &str) {
    let found = client_ip(ip(peer), &cidrs(trusted), xff, forwarded);
    assert_eq!(
        found,
        ip(expected),
        "peer {peer}, trusted {trusted:?}, X-Forwarded-For {xff:?}, Forwarded {forwarded:?}"
    );
}

const PROXIES: &[&str] = &["10.0.0.0/8", "2001:db8:ffff::/48"];

#[test]
fn untrusted_peers_are_the_client_whatever_they_send() {
    check("203.0.113.7", &[], &["198.51.100.1"], &[], "203.0.113.7");
    check(
        "203.0.113.7",
        PROXIES,
        &["198.51.100.1"],
        &[],
        "203.0.113.7",
    );
    check(
        "203.0.113.7",
        PROXIES,
        &[],
        &["for=198.51.100.1"],
        "203.0.113.7",
    );
    check(
        "2001:db8::5",
        PROXIES,
        &["198.51.100.1"],
        &[],
        "2001:db8::5",
    );
}

#[test]
fn trusted_peers_are_believed_back_to_the_first_untrusted_address() {
    // The nearest proxy appended the client; the client's own entries are never read.
    check("10.0.0.2", PROXIES, &["203.0.113.7"], &[], "203.0.113.7");
    check(
        "10.0.0.2",
        PROXIES,
        &["1.1.1.1, 203.0.113.7"],
        &[],
        "203.0.113.7",
    );
    // Several trusted hops are skipped.
    check(
        "10.0.0.2",
        PROXIES,
        &["198.51.100.9, 203.0.113.7, 10.1.1.1, 10.2.2.2"],
        &[],
        "203.0.113.7",
    );
    // Several header lines read as one list, in order.
    check(
        "10.0.0.2",
        PROXIES,
        &["198.51.100.9, 203.0.113.7", "10.1.1.1"],
        &[],
        "203.0.113.7",
    );
    // A chain of proxies only: the left-most is the client.
    check(
        "10.0.0.2",
        PROXIES,
        &["10.3.3.3, 10.1.1.1"],
        &[],
        "10.3.3.3",
    );
    // A trusted peer without forwarding headers is itself the client.
    check("10.0.0.2", PROXIES, &[], &[], "10.0.0.2");
    check("10.0.0.2", PROXIES, &["   "], &[], "10.0.0.2");
    // IPv6 proxies and clients.
    check(
        "2001:db8:ffff::1",
        PROXIES,
        &["2001:db8:1::7"],
        &[],
        "2001:db8:1::7",
    );
}

#[test]
fn addresses_with_ports_and_brackets() {
    check(
        "10.0.0.2",
        PROXIES,
        &["203.0.113.7:51234"],
        &[],
        "203.0.113.7",
    );
    check(
        "10.0.0.2",
        PROXIES,
        &["[2001:db8:1::7]:443"],
        &[],
        "2001:db8:1::7",
    );
    check(
        "10.0.0.2",
        PROXIES,
        &["[2001:db8:1::7]"],
        &[],
        "2001:db8:1::7",
    );
}

#[test]
fn forwarded_is_read_when_there_is_no_x_forwarded_for() {
    check(
        "10.0.0.2",
        PROXIES,
        &[],
        &["for=192.0.2.60;proto=http;by=203.0.113.43"],
        "192.0.2.60",
    );
    check(
        "10.0.0.2",
        PROXIES,
        &[],
        &[r#"for=198.51.100.1, for="[2001:db8:cafe::17]:4711", For=10.9.9.9"#],
        "2001:db8:cafe::17",
    );
    // Quoted values may hold commas and semicolons without splitting the list.
    check(
        "10.0.0.2",
        PROXIES,
        &[],
        &[r#"for=192.0.2.60;ext="a,b;c", for=10.1.1.1"#],
        "192.0.2.60",
    );
    check(
        "10.0.0.2",
        PROXIES,
        &[],
        &["for=192.0.2.60:_port1", "for=10.1.1.1"],
        "192.0.2.60",
    );
    // X-Forwarded-For wins when both are present.
    check(
        "10.0.0.2",
        PROXIES,
        &["203.0.113.7"],
        &["for=192.0.2.60"],
        "203.0.113.7",
    );
}

#[test]
fn malformed_headers_fall_back_to_the_peer() {
    for xff in [
        "not-an-address",
        "203.0.113.7,",
        "unknown",
        "203.0.113.7 198.51.100.1",
        "[2001:db8::1",
        "300.1.1.1",
        "203.0.113.7:port",
    ] {
        check("10.0.0.2", PROXIES, &[xff], &[], "10.0.0.2");
    }
    for forwarded in [
        "for=unknown",
        "for=_hidden",
        "proto=https",
        "for=\"[2001:db8::1]:443",
        "for",
        "for=192.0.2.60 junk",
    ] {
        check("10.0.0.2", PROXIES, &[], &[forwarded], "10.0.0.2");
    }
    // Garbage left of the client, where only the client could have written it, is not read.
    check(
        "10.0.0.2",
        PROXIES,
        &["garbage, 203.0.113.7"],
        &[],
        "203.0.113.7",
    );
    check(
        "10.0.0.2",
        PROXIES,
        &[],
        &["for=garbage, for=203.0.113.7"],
        "203.0.113.7",
    );
}

#[test]
fn ipv4_mapped_addresses_are_ipv4() {
    check("::ffff:203.0.113.7", PROXIES, &[], &[], "203.0.113.7");
    // A mapped peer inside an IPv4 trusted range is trusted.
    check(
        "::ffff:10.0.0.2",
        PROXIES,
        &["203.0.113.7"],
        &[],
        "203.0.113.7",
    );
    check(
        "10.0.0.2",
        PROXIES,
        &["::ffff:203.0.113.7"],
        &[],
        "203.0.113.7",
    );
    // A mapped entry inside the trusted range is skipped like its IPv4 form.
    check(
        "10.0.0.2",
        PROXIES,
        &["203.0.113.7, ::ffff:10.1.1.1"],
        &[],
        "203.0.113.7",
    );
}

#[test]
fn ipv6_clients_are_keyed_by_prefix() {
    let check_key = |address: &str, prefix: u8, expected: &str| {
        assert_eq!(ip_key(ip(address), prefix), expected, "{address} /{prefix}");
    };
    check_key("203.0.113.7", 64, "203.0.113.7");
    check_key("::ffff:203.0.113.7", 64, "203.0.113.7");
    check_key("2001:db8:1:2:3:4:5:6", 64, "2001:db8:1:2::/64");
    check_key("2001:db8:1:2:ffff::1", 64, "2001:db8:1:2::/64");
    check_key("2001:db8:1:2:3:4:5:6", 56, "2001:db8:1::/56");
    check_key("2001:db8:1:2:3:4:5:6", 48, "2001:db8:1::/48");
    check_key("2001:db8:1:2:3:4:5:6", 128, "2001:db8:1:2:3:4:5:6");
    check_key("2001:db8:1:2:3:4:5:6", 1, "::/1");
    check_key("::1", 64, "::/64");
}

fn header_text() -> impl Strategy<Value = String> {
    prop_oneof![
        // Arbitrary text.
        any::<String>(),
        // Text made of the characters these headers are made of.
        "[0-9a-fA-F:.\\[\\], ;=\"\\\\_forFOR]{0,60}",
        // Lists of real addresses, some with ports.
        prop::collection::vec(any::<IpAddr>(), 0..6).prop_map(|ips| {
            ips.iter()
                .map(IpAddr::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        }),
    ]
}

proptest! {
    #[test]
    fn no_header_makes_the_parser_panic(
        peer in any::<IpAddr>(),
        xff in prop::collection::vec(header_text(), 0..3),
        forwarded in prop::collection::vec(header_text(), 0..3),
        trust_peer in any::<bool>(),
    ) {
        let trusted: Vec<Cidr> = if trust_peer {
            vec![peer.to_canonical().to_string().parse().unwrap()]
        } else {
            Vec::new()
        };
        let xff: Vec<&str> = xff.iter().map(String::as_str).collect();
        let forwarded: Vec<&str> = forwarded.iter().map(String::as_str).collect();
        let found = client_ip(peer, &trusted, &xff, &forwarded);
        // Never an IPv4-mapped IPv6 address.
        prop_assert_eq!(found, found.to_canonical());
        if !trust_peer {
            prop_assert_eq!(found, peer.to_canonical());
        }
        let _ = ip_key(found, 64);
    }

    #[test]
    fn the_right_most_untrusted_address_is_the_client(
        chain in prop::collection::vec(any::<IpAddr>(), 1..6),
        with_ports in any::<bool>(),
    ) {
        // Only the peer is trusted: the last entry of the chain is the client.
        let peer = ip("10.0.0.2");
        let trusted = cidrs(&["10.0.0.2/32"]);
        let entries: Vec<String> = chain
            .iter()
            .map(|address| match (with_ports, address) {
                (false, _) => address.to_string(),
                (true, IpAddr::V4(v4)) => format!("{v4}:8080"),
                (true, IpAddr::V6(v6)) => format!("[{v6}]:8080"),
            })
            .collect();
        let last = chain.last().unwrap().to_canonical();
        let expected = if is_trusted(last, &trusted) {
            // The chain ends with the proxy itself: walk on to the left.
            chain
                .iter()
                .rev()
                .map(|address| address.to_canonical())
                .find(|address| !is_trusted(*address, &trusted))
                .unwrap_or_else(|| chain[0].to_canonical())
        } else {
            last
        };
        let line = entries.join(", ");
        prop_assert_eq!(client_ip(peer, &trusted, &[line.as_str()], &[]), expected);
        let quoted: Vec<String> = entries.iter().map(|entry| format!("for=\"{entry}\"")).collect();
        let forwarded = quoted.join(", ");
        prop_assert_eq!(client_ip(peer, &trusted, &[], &[forwarded.as_str()]), expected);
    }
}

#[test]
fn ipv4_addresses_are_written_as_display_writes_them() {
    for octet in 0..=255u8 {
        for ip in [
            Ipv4Addr::new(octet, 0, 9, 10),
            Ipv4Addr::new(99, octet, 100, 255),
            Ipv4Addr::new(1, 20, octet, octet),
        ] {
            let mut text = String::new();
            push_ipv4(&mut text, ip).unwrap();
            assert_eq!(text, ip.to_string());
            let mut bytes = Vec::new();
            push_ipv4_bytes(&mut bytes, ip);
            assert_eq!(bytes, ip.to_string().as_bytes());
        }
    }
}
