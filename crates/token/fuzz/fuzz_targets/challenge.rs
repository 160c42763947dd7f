//! Proof-of-work challenges (`ChallengeSigner::verify`): never a panic, only challenges a
//! signer made verify, claims round-trip, and a one-byte change never verifies.
#![no_main]

use anteroom_token::ChallengeClaims;
use anteroom_token_fuzz::{NOW, ROOM, dotless_non_empty, fixture, one_byte_changed};
use libfuzzer_sys::arbitrary::{self, Arbitrary as _, Unstructured};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(challenge) = std::str::from_utf8(data) {
        check_presented(challenge);
    }
    let _ = check_signed(&mut Unstructured::new(data));
});

/// Whatever verifies is exactly what the secret it names makes for its claims.
fn check_presented(challenge: &str) {
    let fixture = fixture();
    let Ok(claims) = fixture.keys.challenge_signer().verify(challenge, ROOM, NOW) else {
        return;
    };
    let remade = if challenge.starts_with("c1.") {
        fixture.original_challenges.sign(&claims)
    } else {
        fixture.keys.challenge_signer().sign(&claims)
    };
    assert_eq!(remade, challenge, "accepted a challenge no signer makes");
}

fn check_signed(input: &mut Unstructured<'_>) -> arbitrary::Result<()> {
    let fixture = fixture();
    let claims = ChallengeClaims {
        room: dotless_non_empty(input)?,
        nonce: dotless_non_empty(input)?,
        // Not yet expired at NOW.
        expires_at: NOW + 1 + u64::arbitrary(input)? % (u64::MAX - NOW - 1),
        difficulty: u8::arbitrary(input)?,
    };
    let signer = if bool::arbitrary(input)? {
        &fixture.original_challenges
    } else {
        fixture.keys.challenge_signer()
    };
    let challenge = signer.sign(&claims);
    // Challenges longer than the verifier's cap (rooms the node never makes) are refused.
    if challenge.len() <= 256 {
        let verified = fixture
            .keys
            .challenge_signer()
            .verify(&challenge, &claims.room, NOW);
        assert_eq!(verified.as_ref(), Ok(&claims), "{challenge}");
    }
    if let Some(changed) = one_byte_changed(&challenge, input)? {
        let verified = fixture
            .keys
            .challenge_signer()
            .verify(&changed, &claims.room, NOW);
        assert!(
            verified.is_err(),
            "{challenge} changed to {changed} verifies"
        );
    }
    Ok(())
}
