//! Ticket token signing and verification.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::digest::KeyInit;
use hmac::{Hmac, Mac as _};
use sha2::Sha256;

use super::*;

const SECRET: [u8; 32] = [42; 32];
const NOW: u64 = 1_700_000_000;

fn claims() -> TicketClaims {
    TicketClaims {
        room: "launch".into(),
        ticket_id: "Ab-_0123456789abcdefgh".into(),
        position: 1234,
        generation: 2,
    }
}

fn signer() -> TicketSigner {
    TicketSigner::from_secret(SECRET)
}

fn check(token: &str, room: &str, expected: Result<TicketClaims, TicketTokenError>) {
    assert_eq!(signer().verify(token, room, NOW), expected, "{token:?}");
}

/// The token a holder of the secret would make for `signed`, in any format.
fn mac_by_hand(signed: &str) -> String {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&SECRET).expect("key");
    mac.update(signed.as_bytes());
    format!(
        "{signed}.{}",
        URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
    )
}

#[test]
fn round_trip() {
    let token = signer().sign(&claims());
    assert_eq!(
        token.split('.').take(5).collect::<Vec<_>>(),
        ["t1", "launch", "Ab-_0123456789abcdefgh", "1234", "2"]
    );
    check(&token, "launch", Ok(claims()));
}

#[test]
fn token_is_cookie_safe() {
    let claims = TicketClaims {
        position: u64::MAX,
        generation: u32::MAX,
        ..claims()
    };
    let token = signer().sign(&claims);
    assert!(
        token
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || b"._-".contains(&byte)),
        "{token}"
    );
    check(&token, "launch", Ok(claims));
}

#[test]
fn mac_is_standard_hmac_sha256() {
    // The pre-keyed state must equal HMAC keyed the ordinary way.
    let token = signer().sign(&claims());
    let (signed, _) = token.rsplit_once('.').expect("mac");
    assert_eq!(token, mac_by_hand(signed));
}

#[test]
fn numbers_are_written_as_display_writes_them() {
    for (position, generation) in [(0, 0), (9, 10), (1234, 2), (u64::MAX, u32::MAX)] {
        let token = signer().sign(&TicketClaims {
            position,
            generation,
            ..claims()
        });
        let signed = format!("t1.launch.Ab-_0123456789abcdefgh.{position}.{generation}");
        assert_eq!(token, mac_by_hand(&signed));
    }
}

#[test]
fn rejects_wrong_room() {
    let token = signer().sign(&claims());
    check(&token, "other", Err(TicketTokenError::WrongRoom));
    check(&token, "launc", Err(TicketTokenError::WrongRoom));
}

#[test]
fn rejects_moved_room() {
    // Rewriting the room inside the token breaks the MAC: tickets cannot move between rooms.
    let token = signer().sign(&claims());
    let moved = token.replacen("t1.launch.", "t1.other.", 1);
    check(&moved, "other", Err(TicketTokenError::Invalid));
}

#[test]
fn rejects_tampered_fields() {
    let token = signer().sign(&claims());
    for (from, to) in [
        (".1234.", ".1."),
        (".1234.", ".01234."),
        (".1234.2.", ".1234.3."),
        ("Ab-_", "Ab-a"),
    ] {
        let tampered = token.replacen(from, to, 1);
        assert_ne!(tampered, token);
        check(&tampered, "launch", Err(TicketTokenError::Invalid));
    }
}

#[test]
fn rejects_tampered_mac() {
    let token = signer().sign(&claims());
    let (signed, mac) = token.rsplit_once('.').expect("mac");
    let mut flipped = mac.as_bytes().to_vec();
    flipped[0] = if flipped[0] == b'A' { b'B' } else { b'A' };
    let flipped = String::from_utf8(flipped).expect("ascii");
    check(
        &format!("{signed}.{flipped}"),
        "launch",
        Err(TicketTokenError::Invalid),
    );
    check(
        &format!("{signed}.{}", &mac[..20]),
        "launch",
        Err(TicketTokenError::Invalid),
    );
    check(
        &format!("{signed}."),
        "launch",
        Err(TicketTokenError::Invalid),
    );
    check(
        &format!("{signed}.{mac}="),
        "launch",
        Err(TicketTokenError::Invalid),
    );
}

#[test]
fn rejects_another_secret() {
    let token = TicketSigner::from_secret([1; 32]).sign(&claims());
    check(&token, "launch", Err(TicketTokenError::Invalid));
}

#[test]
fn rejects_garbage() {
    let long = "x".repeat(10_000);
    for garbage in [
        "",
        ".",
        "t1",
        "t1.launch",
        "not a token",
        "t1.launch.id.1.2.!!!",
        "\u{0}\u{1}",
        long.as_str(),
    ] {
        check(garbage, "launch", Err(TicketTokenError::Invalid));
    }
}

#[test]
fn rejects_genuine_macs_over_other_shapes() {
    // Even with a valid MAC, only the canonical layout is accepted.
    for signed in [
        "t2.launch.id.1.2",
        "t1.launch.id.01.2",
        "t1.launch.id.+1.2",
        "t1.launch.id.1.4294967296",
        "t1.launch.id.18446744073709551616.2",
        "t1.launch.id.1",
        "t1.launch.id.1.2.3",
        "t1..id.1.2",
        "t1.launch..1.2",
    ] {
        check(
            &mac_by_hand(signed),
            "launch",
            Err(TicketTokenError::Invalid),
        );
    }
    check(
        &mac_by_hand("t1.launch.id.0.0"),
        "launch",
        Ok(TicketClaims {
            room: "launch".into(),
            ticket_id: "id".into(),
            position: 0,
            generation: 0,
        }),
    );
}

#[test]
fn debug_hides_the_secret() {
    let debug = format!("{:?}", signer());
    assert!(debug.contains("redacted"));
    assert!(!debug.contains("42"));
}
