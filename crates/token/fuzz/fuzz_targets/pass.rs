//! Passes (`KeySet::verify_pass`, `KeySet::inspect`): never a panic, only passes a key of the
//! set signed verify, claims round-trip, and a one-byte change never verifies.
#![no_main]

use anteroom_token::{KeySet, PASS_SCOPE, PassClaims, PassExpectations};
use anteroom_token_fuzz::{
    EDDSA_KID, GENERATION, ISSUER, NOW, ROOM, dotless, fixture, one_byte_changed,
};
use libfuzzer_sys::arbitrary::{self, Arbitrary as _, Unstructured};
use libfuzzer_sys::fuzz_target;

const EXPECT: PassExpectations<'static> = PassExpectations {
    room: ROOM,
    issuer: ISSUER,
    generation: GENERATION,
};

fuzz_target!(|data: &[u8]| {
    if let Ok(token) = std::str::from_utf8(data) {
        check_presented(token);
    }
    let _ = check_signed(&mut Unstructured::new(data));
});

/// Whatever verifies is exactly what the key its `kid` names signs for its claims.
fn check_presented(token: &str) {
    let fixture = fixture();
    let _ = fixture.keys.inspect(token, NOW);
    let Ok(claims) = fixture.keys.verify_pass(token, &EXPECT, NOW) else {
        return;
    };
    let signer = if kid_of(token).as_deref() == Some(EDDSA_KID) {
        &fixture.keys
    } else {
        &fixture.hs256_keys
    };
    let remade = signer.sign_pass(&claims).expect("sign");
    assert_eq!(remade, token, "accepted a pass no key signs");
}

fn kid_of(token: &str) -> Option<String> {
    let inspection = fixture().keys.inspect(token, NOW).ok()?;
    Some(inspection.header.get("kid")?.as_str()?.to_owned())
}

fn check_signed(input: &mut Unstructured<'_>) -> arbitrary::Result<()> {
    let fixture = fixture();
    let session = dotless(input)?;
    let lifetime = u64::arbitrary(input)? % 100_000;
    let claims = PassClaims {
        iss: ISSUER.into(),
        aud: ROOM.into(),
        sub: session.clone(),
        jti: session,
        iat: NOW - u64::arbitrary(input)? % 1000,
        nbf: NOW - u64::arbitrary(input)? % 1000,
        exp: NOW + 1 + lifetime,
        pos: u64::arbitrary(input)?,
        r#gen: GENERATION,
        uid: <Option<String>>::arbitrary(input)?,
        scope: PASS_SCOPE.into(),
    };
    let signer: &KeySet = if bool::arbitrary(input)? {
        &fixture.keys
    } else {
        &fixture.hs256_keys
    };
    let token = signer.sign_pass(&claims).expect("sign");
    // Passes over the verifier's 8 KiB cap (claims the node never makes) are refused.
    if token.len() <= 8 * 1024 {
        let verified = fixture.keys.verify_pass(&token, &EXPECT, NOW);
        assert_eq!(verified.as_ref(), Ok(&claims), "{token}");
    }
    if let Some(changed) = one_byte_changed(&token, input)? {
        let verified = fixture.keys.verify_pass(&changed, &EXPECT, NOW);
        assert!(verified.is_err(), "{token} changed to {changed} verifies");
    }
    Ok(())
}
