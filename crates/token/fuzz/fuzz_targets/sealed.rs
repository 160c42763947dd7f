//! Sealed values (`TicketSigner::unseal`, the OpenID Connect requests and codes): never a
//! panic, only values a signer sealed open, payloads round-trip, and a one-byte change never
//! opens.
#![no_main]

use anteroom_token_fuzz::{NOW, fixture, one_byte_changed};
use libfuzzer_sys::arbitrary::{self, Arbitrary as _, Unstructured};
use libfuzzer_sys::fuzz_target;

/// The purpose the presented values are opened for.
const PURPOSE: &str = "oidc-code:launch";

fuzz_target!(|data: &[u8]| {
    if let Ok(sealed) = std::str::from_utf8(data) {
        check_presented(sealed);
    }
    let _ = check_sealed(&mut Unstructured::new(data));
});

/// Whatever opens is exactly what the secret it names seals for its payload.
fn check_presented(sealed: &str) {
    let fixture = fixture();
    let Ok(payload) = fixture.keys.ticket_signer().unseal(PURPOSE, sealed, NOW) else {
        return;
    };
    let remade = if sealed.starts_with("s1.") {
        fixture.original_tickets.seal(PURPOSE, &payload)
    } else {
        fixture.keys.ticket_signer().seal(PURPOSE, &payload)
    };
    assert_eq!(remade, sealed, "opened a value no signer seals");
}

fn check_sealed(input: &mut Unstructured<'_>) -> arbitrary::Result<()> {
    let fixture = fixture();
    let purpose = String::arbitrary(input)?;
    // Sealed values carry small JSON documents; the opener refuses anything over 4 KiB.
    let payload = <Vec<u8>>::arbitrary(input)?;
    let payload = &payload[..payload.len().min(2048)];
    let signer = if bool::arbitrary(input)? {
        &fixture.original_tickets
    } else {
        fixture.keys.ticket_signer()
    };
    let sealed = signer.seal(&purpose, payload);
    let opened = fixture.keys.ticket_signer().unseal(&purpose, &sealed, NOW);
    assert_eq!(opened.as_deref(), Ok(payload), "{sealed}");
    if let Some(changed) = one_byte_changed(&sealed, input)? {
        let opened = fixture.keys.ticket_signer().unseal(&purpose, &changed, NOW);
        assert!(opened.is_err(), "{sealed} changed to {changed} opens");
    }
    Ok(())
}
