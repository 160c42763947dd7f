//! Ticket tokens (`TicketSigner::verify`): never a panic, only tokens a signer made verify,
//! claims round-trip, and a one-byte change never verifies.
#![no_main]

use anteroom_token::TicketClaims;
use anteroom_token_fuzz::{NOW, ROOM, dotless_non_empty, fixture, one_byte_changed};
use libfuzzer_sys::arbitrary::{self, Arbitrary as _, Unstructured};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(token) = std::str::from_utf8(data) {
        check_presented(token);
    }
    let _ = check_signed(&mut Unstructured::new(data));
});

/// Whatever verifies is exactly what the secret it names makes for its claims.
fn check_presented(token: &str) {
    let fixture = fixture();
    let Ok(claims) = fixture.keys.ticket_signer().verify(token, ROOM, NOW) else {
        return;
    };
    let remade = if token.starts_with("t1.") {
        fixture.original_tickets.sign(&claims)
    } else {
        fixture.keys.ticket_signer().sign(&claims)
    };
    assert_eq!(remade, token, "accepted a token no signer makes");
}

fn check_signed(input: &mut Unstructured<'_>) -> arbitrary::Result<()> {
    let fixture = fixture();
    let claims = TicketClaims {
        room: dotless_non_empty(input)?,
        ticket_id: dotless_non_empty(input)?,
        position: u64::arbitrary(input)?,
        generation: u32::arbitrary(input)?,
    };
    let signer = if bool::arbitrary(input)? {
        &fixture.original_tickets
    } else {
        fixture.keys.ticket_signer()
    };
    let token = signer.sign(&claims);
    // Tokens longer than the verifier's cap (rooms and ids the node never makes) are refused.
    if token.len() <= 512 {
        let verified = fixture
            .keys
            .ticket_signer()
            .verify(&token, &claims.room, NOW);
        assert_eq!(verified.as_ref(), Ok(&claims), "{token}");
    }
    if let Some(changed) = one_byte_changed(&token, input)? {
        let verified = fixture
            .keys
            .ticket_signer()
            .verify(&changed, &claims.room, NOW);
        assert!(verified.is_err(), "{token} changed to {changed} verifies");
    }
    Ok(())
}
