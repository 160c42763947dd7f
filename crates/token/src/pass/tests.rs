//! Pass signing and verification, stamped out for each algorithm.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::digest::KeyInit;
use hmac::{Hmac, Mac as _};
use jsonwebtoken::jwk::JwkSet;
use serde_json::{Value, json};
use sha2::Sha256;

use super::LEEWAY_SECS;
use crate::fixtures::{self, EXPECT, NOW, TTL};
use crate::{KeySet, PassClaims, PassError, SigningAlgorithm, TokenError};

/// Verifies `token` at `now` and checks the outcome.
fn check(keys: &KeySet, token: &str, now: u64, expected: Result<&PassClaims, PassError>) {
    let actual = keys.verify_pass(token, &EXPECT, now);
    assert_eq!(actual.as_ref().map_err(Clone::clone), expected);
}

/// Signs claims changed by `change` and checks the verification outcome at [`NOW`].
fn check_claims(
    algorithm: SigningAlgorithm,
    change: impl FnOnce(&mut PassClaims),
    expected: Result<(), PassError>,
) {
    let (_dir, keys) = fixtures::key_set(algorithm);
    let mut claims = fixtures::claims();
    change(&mut claims);
    let token = keys.sign_pass(&claims).expect("sign");
    check(&keys, &token, NOW, expected.map(|()| &claims));
}

/// An HS256 token with the given header members, MAC'd with `secret`.
fn hs256_token(header: Value, claims: &PassClaims, secret: &[u8]) -> String {
    let claims = serde_json::to_value(claims).expect("claims");
    let unsigned = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header.to_string()),
        URL_SAFE_NO_PAD.encode(claims.to_string())
    );
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(secret).expect("hmac key");
    mac.update(unsigned.as_bytes());
    format!(
        "{unsigned}.{}",
        URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
    )
}

/// Replaces one character in the middle of `part` with another base64url character.
fn flip_middle(part: &str) -> String {
    let mut bytes = part.as_bytes().to_vec();
    let middle = bytes.len() / 2;
    bytes[middle] = if bytes[middle] == b'A' { b'B' } else { b'A' };
    String::from_utf8(bytes).expect("ascii")
}

fn round_trip(algorithm: SigningAlgorithm) {
    let (_dir, keys) = fixtures::key_set(algorithm);
    let claims = fixtures::claims();
    let token = keys.sign_pass(&claims).expect("sign");
    let [header, _, _] = fixtures::parts(&token);
    let header = fixtures::decode_part(&header);
    assert_eq!(header["alg"], algorithm.as_str());
    assert_eq!(header["kid"], keys.active_kid());
    assert_eq!(header["typ"], "JWT");
    check(&keys, &token, NOW, Ok(&claims));
}

fn round_trip_with_uid(algorithm: SigningAlgorithm) {
    check_claims(
        algorithm,
        |claims| claims.uid = Some("user-7".into()),
        Ok(()),
    );
}

fn jwks_verifies_independently(algorithm: SigningAlgorithm) {
    let (_dir, keys) = fixtures::key_set(algorithm);
    let claims = fixtures::claims();
    let token = keys.sign_pass(&claims).expect("sign");
    let document = keys.jwks();
    if !algorithm.is_asymmetric() {
        assert_eq!(
            document,
            json!({ "keys": [] }),
            "HS256 keys are never published"
        );
        return;
    }
    let entry = &document["keys"][0];
    assert_eq!(entry["kid"], keys.active_kid());
    assert_eq!(entry["alg"], algorithm.as_str());
    assert_eq!(entry["use"], "sig");
    let expected_members: &[(&str, &str)] = match algorithm {
        SigningAlgorithm::EdDsa => &[("kty", "OKP"), ("crv", "Ed25519")],
        SigningAlgorithm::Es256 => &[("kty", "EC"), ("crv", "P-256")],
        _ => &[("kty", "RSA")],
    };
    for (member, value) in expected_members {
        assert_eq!(entry[member], *value, "{member}");
    }
    for private in ["d", "p", "q", "dp", "dq", "qi", "k"] {
        assert!(
            entry.get(private).is_none(),
            "private member {private} published"
        );
    }

    let set: JwkSet = serde_json::from_value(document.clone()).expect("jwks parses as a JWK set");
    let jwk = set.find(keys.active_kid()).expect("kid in jwks");
    let key = jsonwebtoken::DecodingKey::from_jwk(jwk).expect("decoding key from jwk");
    let mut validation = jsonwebtoken::Validation::new(algorithm.jsonwebtoken());
    validation.validate_exp = false;
    validation.set_audience(&[fixtures::ROOM]);
    validation.set_issuer(&[fixtures::ISSUER]);
    let decoded =
        jsonwebtoken::decode::<PassClaims>(&token, &key, &validation).expect("verifies via jwks");
    assert_eq!(decoded.claims, claims);
}

fn rejects_alg_none(algorithm: SigningAlgorithm) {
    let (_dir, keys) = fixtures::key_set(algorithm);
    let claims = serde_json::to_value(fixtures::claims()).expect("claims");
    for alg in ["none", "None", "NONE"] {
        let header = json!({ "alg": alg, "typ": "JWT", "kid": keys.active_kid() });
        for signature in [&b""[..], b"signature"] {
            let token = fixtures::assemble(&header, &claims, signature);
            check(&keys, &token, NOW, Err(PassError::AlgorithmNotAllowed));
        }
    }
    // Without a kid too: the algorithm is judged first.
    let token = fixtures::assemble(&json!({ "alg": "none" }), &claims, b"");
    check(&keys, &token, NOW, Err(PassError::AlgorithmNotAllowed));
}

fn rejects_other_algorithms(algorithm: SigningAlgorithm) {
    let (_dir, keys) = fixtures::key_set(algorithm);
    let claims = fixtures::claims();
    for alg in ["HS512", "RS512", "PS256", "ES384", "eddsa"] {
        let header = json!({ "alg": alg, "kid": keys.active_kid() });
        let token = hs256_token(header, &claims, b"0123456789abcdef0123456789abcdef");
        check(&keys, &token, NOW, Err(PassError::AlgorithmNotAllowed));
    }
}

fn rejects_algorithm_confusion(algorithm: SigningAlgorithm) {
    let (_dir, keys) = fixtures::key_set(algorithm);
    let claims = fixtures::claims();
    let header = json!({ "alg": "HS256", "typ": "JWT", "kid": keys.active_kid() });
    for secret in public_key_forms(&keys) {
        let token = hs256_token(header.clone(), &claims, &secret);
        // The forgery is a well-formed HS256 token for that secret: a verifier that let the
        // token pick the algorithm would accept it.
        let mut naive = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::HS256);
        naive.validate_exp = false;
        naive.validate_aud = false;
        let naive_key = jsonwebtoken::DecodingKey::from_secret(&secret);
        assert!(jsonwebtoken::decode::<PassClaims>(&token, &naive_key, &naive).is_ok());
        check(&keys, &token, NOW, Err(PassError::AlgorithmNotAllowed));
    }
}

/// The forms an attacker could MAC with: raw public key bytes and the SPKI PEM.
fn public_key_forms(keys: &KeySet) -> Vec<Vec<u8>> {
    use rsa::pkcs8::{EncodePublicKey as _, LineEnding};

    let jwk = &keys.jwks()["keys"][0];
    let member = |name: &str| {
        URL_SAFE_NO_PAD
            .decode(jwk[name].as_str().expect("member"))
            .expect("base64url")
    };
    let (raw, pem) = match keys.algorithm() {
        SigningAlgorithm::EdDsa => {
            let raw: [u8; 32] = member("x").try_into().expect("32 bytes");
            let key = ed25519_dalek::VerifyingKey::from_bytes(&raw).expect("ed25519 key");
            (
                raw.to_vec(),
                key.to_public_key_pem(LineEnding::LF).expect("pem"),
            )
        }
        SigningAlgorithm::Es256 => {
            let raw = [vec![4], member("x"), member("y")].concat();
            let key = p256::PublicKey::from_sec1_bytes(&raw).expect("p256 key");
            (raw, key.to_public_key_pem(LineEnding::LF).expect("pem"))
        }
        SigningAlgorithm::Rs256 => {
            let key = rsa::RsaPublicKey::new(
                rsa::BigUint::from_bytes_be(&member("n")),
                rsa::BigUint::from_bytes_be(&member("e")),
            )
            .expect("rsa key");
            (
                member("n"),
                key.to_public_key_pem(LineEnding::LF).expect("pem"),
            )
        }
        SigningAlgorithm::Hs256 => unreachable!("HS256 has no public key"),
    };
    vec![raw, pem.into_bytes()]
}

fn rejects_asymmetric_alg_with_hmac_kid() {
    // The mirror image: a token claiming EdDSA under the HS256 key's kid.
    let (_dir, keys) = fixtures::key_set(SigningAlgorithm::Hs256);
    let header = json!({ "alg": "EdDSA", "kid": keys.active_kid() });
    let claims = serde_json::to_value(fixtures::claims()).expect("claims");
    let token = fixtures::assemble(&header, &claims, &[0; 64]);
    check(&keys, &token, NOW, Err(PassError::AlgorithmNotAllowed));
}

fn rejects_wrong_audience(algorithm: SigningAlgorithm) {
    check_claims(
        algorithm,
        |claims| claims.aud = "other-room".into(),
        Err(PassError::WrongAudience),
    );
}

fn rejects_wrong_issuer(algorithm: SigningAlgorithm) {
    check_claims(
        algorithm,
        |claims| claims.iss = "https://evil.example".into(),
        Err(PassError::WrongIssuer),
    );
}

fn rejects_other_generations(algorithm: SigningAlgorithm) {
    let (_dir, keys) = fixtures::key_set(algorithm);
    for generation in [fixtures::GENERATION - 1, fixtures::GENERATION + 1] {
        let claims = PassClaims {
            r#gen: generation,
            ..fixtures::claims()
        };
        let token = keys.sign_pass(&claims).expect("sign");
        check(&keys, &token, NOW, Err(PassError::OldGeneration));
    }
}

fn rejects_wrong_scope(algorithm: SigningAlgorithm) {
    check_claims(
        algorithm,
        |claims| claims.scope = "admin".into(),
        Err(PassError::WrongScope),
    );
}

fn expiry_has_leeway(algorithm: SigningAlgorithm) {
    let (_dir, keys) = fixtures::key_set(algorithm);
    let claims = fixtures::claims();
    let token = keys.sign_pass(&claims).expect("sign");
    let exp = claims.exp;
    check(&keys, &token, exp - 1, Ok(&claims));
    check(&keys, &token, exp, Ok(&claims));
    check(&keys, &token, exp + LEEWAY_SECS - 1, Ok(&claims));
    check(&keys, &token, exp + LEEWAY_SECS, Err(PassError::Expired));
    check(&keys, &token, exp + 3600, Err(PassError::Expired));
}

fn not_before_has_leeway(algorithm: SigningAlgorithm) {
    let (_dir, keys) = fixtures::key_set(algorithm);
    let claims = PassClaims {
        nbf: NOW + 100,
        exp: NOW + 100 + TTL,
        ..fixtures::claims()
    };
    let token = keys.sign_pass(&claims).expect("sign");
    check(&keys, &token, NOW, Err(PassError::NotYetValid));
    check(
        &keys,
        &token,
        NOW + 100 - LEEWAY_SECS - 1,
        Err(PassError::NotYetValid),
    );
    check(&keys, &token, NOW + 100 - LEEWAY_SECS, Ok(&claims));
    check(&keys, &token, NOW + 100, Ok(&claims));
}

fn rejects_tampered_payload(algorithm: SigningAlgorithm) {
    let (_dir, keys) = fixtures::key_set(algorithm);
    let token = keys.sign_pass(&fixtures::claims()).expect("sign");
    let [header, claims, signature] = fixtures::parts(&token);

    // A meaningful change: a better position, re-encoded properly.
    let mut changed = fixtures::decode_part(&claims);
    changed["pos"] = json!(1);
    let changed = URL_SAFE_NO_PAD.encode(changed.to_string());
    check(
        &keys,
        &format!("{header}.{changed}.{signature}"),
        NOW,
        Err(PassError::BadSignature),
    );
    // A raw change to the encoded claims.
    let flipped = flip_middle(&claims);
    check(
        &keys,
        &format!("{header}.{flipped}.{signature}"),
        NOW,
        Err(PassError::BadSignature),
    );
}

fn rejects_tampered_signature(algorithm: SigningAlgorithm) {
    let (_dir, keys) = fixtures::key_set(algorithm);
    let token = keys.sign_pass(&fixtures::claims()).expect("sign");
    let [header, claims, signature] = fixtures::parts(&token);
    let flipped = flip_middle(&signature);
    check(
        &keys,
        &format!("{header}.{claims}.{flipped}"),
        NOW,
        Err(PassError::BadSignature),
    );
    check(
        &keys,
        &format!("{header}.{claims}."),
        NOW,
        Err(PassError::BadSignature),
    );
}

fn rejects_unknown_kid(algorithm: SigningAlgorithm) {
    let (_dir, keys) = fixtures::key_set(algorithm);
    let (_other_dir, other_keys) = fixtures::key_set(algorithm);
    let token = other_keys.sign_pass(&fixtures::claims()).expect("sign");
    if keys.active_kid() != other_keys.active_kid() {
        check(&keys, &token, NOW, Err(PassError::UnknownKey));
    }
    // A missing kid names no key either.
    let [header, claims, signature] = fixtures::parts(&token);
    let mut header = fixtures::decode_part(&header);
    header.as_object_mut().expect("object").remove("kid");
    let header = URL_SAFE_NO_PAD.encode(header.to_string());
    check(
        &keys,
        &format!("{header}.{claims}.{signature}"),
        NOW,
        Err(PassError::UnknownKey),
    );
    // As does a kid of the right shape naming nothing.
    let [header, claims, signature] =
        fixtures::parts(&keys.sign_pass(&fixtures::claims()).expect("sign"));
    let mut header = fixtures::decode_part(&header);
    header["kid"] = json!("AAAAAAAAAAA");
    let header = URL_SAFE_NO_PAD.encode(header.to_string());
    check(
        &keys,
        &format!("{header}.{claims}.{signature}"),
        NOW,
        Err(PassError::UnknownKey),
    );
}

macro_rules! algorithm_tests {
    ($($module:ident => $algorithm:expr;)*) => {$(
        mod $module {
            use super::*;

            const ALGORITHM: SigningAlgorithm = $algorithm;

            #[test]
            fn round_trip() { super::round_trip(ALGORITHM) }
            #[test]
            fn round_trip_with_uid() { super::round_trip_with_uid(ALGORITHM) }
            #[test]
            fn jwks_verifies_independently() { super::jwks_verifies_independently(ALGORITHM) }
            #[test]
            fn rejects_alg_none() { super::rejects_alg_none(ALGORITHM) }
            #[test]
            fn rejects_other_algorithms() { super::rejects_other_algorithms(ALGORITHM) }
            #[test]
            fn rejects_wrong_audience() { super::rejects_wrong_audience(ALGORITHM) }
            #[test]
            fn rejects_wrong_issuer() { super::rejects_wrong_issuer(ALGORITHM) }
            #[test]
            fn rejects_other_generations() { super::rejects_other_generations(ALGORITHM) }
            #[test]
            fn rejects_wrong_scope() { super::rejects_wrong_scope(ALGORITHM) }
            #[test]
            fn expiry_has_leeway() { super::expiry_has_leeway(ALGORITHM) }
            #[test]
            fn not_before_has_leeway() { super::not_before_has_leeway(ALGORITHM) }
            #[test]
            fn rejects_tampered_payload() { super::rejects_tampered_payload(ALGORITHM) }
            #[test]
            fn rejects_tampered_signature() { super::rejects_tampered_signature(ALGORITHM) }
            #[test]
            fn rejects_unknown_kid() { super::rejects_unknown_kid(ALGORITHM) }
        }
    )*};
}

algorithm_tests! {
    eddsa => SigningAlgorithm::EdDsa;
    es256 => SigningAlgorithm::Es256;
    rs256 => SigningAlgorithm::Rs256;
    hs256 => SigningAlgorithm::Hs256;
}

#[test]
fn eddsa_rejects_algorithm_confusion() {
    rejects_algorithm_confusion(SigningAlgorithm::EdDsa);
}

#[test]
fn es256_rejects_algorithm_confusion() {
    rejects_algorithm_confusion(SigningAlgorithm::Es256);
}

#[test]
fn rs256_rejects_algorithm_confusion() {
    rejects_algorithm_confusion(SigningAlgorithm::Rs256);
}

#[test]
fn hs256_rejects_asymmetric_alg_under_its_kid() {
    rejects_asymmetric_alg_with_hmac_kid();
}

#[test]
fn rejects_malformed_tokens() {
    let (_dir, keys) = fixtures::key_set(SigningAlgorithm::EdDsa);
    let token = keys.sign_pass(&fixtures::claims()).expect("sign");
    let [header, claims, signature] = fixtures::parts(&token);
    let oversized = "a".repeat(9000);
    let cases = [
        String::new(),
        "garbage".into(),
        "a.b".into(),
        "a.b.c".into(),
        format!("{header}.{claims}"),
        format!("{header}.{claims}.{signature}.extra"),
        format!("!!!.{claims}.{signature}"),
        format!("{}.{claims}.{signature}", URL_SAFE_NO_PAD.encode("[1,2]")),
        format!(
            "{}.{claims}.{signature}",
            URL_SAFE_NO_PAD.encode(r#"{"kid":"x"}"#)
        ),
        format!("{header}.{claims}.{oversized}"),
        {
            let mut critical = fixtures::decode_part(&header);
            critical["crit"] = json!(["exp"]);
            let critical = URL_SAFE_NO_PAD.encode(critical.to_string());
            format!("{critical}.{claims}.{signature}")
        },
    ];
    for case in cases {
        check(&keys, &case, NOW, Err(PassError::Malformed));
    }
}

#[test]
fn rejects_signed_claims_of_the_wrong_shape() {
    // Correctly signed, but not pass claims: the signature is fine, the claims are not.
    let (_dir, keys) = fixtures::key_set(SigningAlgorithm::Hs256);
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256);
    header.kid = Some(keys.active_kid().to_owned());
    let token = jsonwebtoken::encode(
        &header,
        &json!({ "aud": "launch", "exp": NOW + 10 }),
        keys.active().encoding_key(),
    )
    .expect("sign");
    check(&keys, &token, NOW, Err(PassError::Malformed));
}

#[test]
fn claims_use_the_wire_names() {
    let mut claims = fixtures::claims();
    let value = serde_json::to_value(&claims).expect("serialize");
    assert_eq!(value["gen"], fixtures::GENERATION);
    assert!(value.get("uid").is_none(), "uid omitted when anonymous");
    claims.uid = Some("u".into());
    let value = serde_json::to_value(&claims).expect("serialize");
    assert_eq!(value["uid"], "u");
    let keys: Vec<&str> = value
        .as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .collect();
    let mut expected = vec![
        "aud", "exp", "gen", "iat", "iss", "jti", "nbf", "pos", "scope", "sub", "uid",
    ];
    expected.sort_unstable();
    let mut keys = keys;
    keys.sort_unstable();
    assert_eq!(keys, expected);
}

#[test]
fn inspect_reports_signature_and_validity() {
    let (_dir, keys) = fixtures::key_set(SigningAlgorithm::EdDsa);
    let claims = fixtures::claims();
    let token = keys.sign_pass(&claims).expect("sign");

    let inspection = keys.inspect(&token, NOW).expect("inspect");
    assert!(inspection.signature_verifies());
    assert_eq!(inspection.validity, Ok(()));
    assert_eq!(inspection.header["kid"], keys.active_kid());
    assert_eq!(inspection.claims["pos"], claims.pos);

    let later = keys
        .inspect(&token, claims.exp + LEEWAY_SECS)
        .expect("inspect");
    assert!(later.signature_verifies());
    assert_eq!(later.validity, Err(PassError::Expired));

    let (_other_dir, other_keys) = fixtures::key_set(SigningAlgorithm::EdDsa);
    let foreign = other_keys.inspect(&token, NOW).expect("inspect");
    assert_eq!(foreign.signature, Err(PassError::UnknownKey));
    assert_eq!(foreign.claims, inspection.claims);

    let [header, payload, signature] = fixtures::parts(&token);
    let tampered = keys
        .inspect(
            &format!("{header}.{payload}.{}", flip_middle(&signature)),
            NOW,
        )
        .expect("inspect");
    assert_eq!(tampered.signature, Err(PassError::BadSignature));

    let none = fixtures::assemble(&json!({ "alg": "none" }), &json!({ "sub": "x" }), b"");
    let none = keys.inspect(&none, NOW).expect("inspect");
    assert_eq!(none.signature, Err(PassError::AlgorithmNotAllowed));
    assert_eq!(none.validity, Err(PassError::Malformed), "no exp");
}

#[test]
fn inspect_refuses_non_tokens() {
    let (_dir, keys) = fixtures::key_set(SigningAlgorithm::EdDsa);
    for garbage in ["", "x", "a.b.c", "t1.launch.AAAA.1.1.mac"] {
        let result = keys.inspect(garbage, NOW);
        assert!(
            matches!(result, Err(TokenError::MalformedToken(_))),
            "{garbage:?}: {result:?}"
        );
    }
}

/// A pass signed with the key parsed once is, byte for byte, the token `jsonwebtoken` signs
/// with the key file's DER (both curves sign deterministically).
#[test]
fn a_pass_signed_with_the_parsed_key_is_what_jsonwebtoken_signs() {
    for algorithm in [SigningAlgorithm::EdDsa, SigningAlgorithm::Es256] {
        let (_dir, keys) = fixtures::key_set(algorithm);
        let claims = fixtures::claims();
        let key = keys.active();
        let mut header = jsonwebtoken::Header::new(algorithm.jsonwebtoken());
        header.kid = Some(key.kid.clone());
        let expected =
            jsonwebtoken::encode(&header, &claims, key.encoding_key()).expect("jsonwebtoken signs");
        assert_eq!(
            keys.sign_pass(&claims).expect("sign"),
            expected,
            "{algorithm:?}"
        );
    }
}

/// Claims whose text needs every kind of escape JSON has, and some that needs none.
fn awkward_claims() -> Vec<PassClaims> {
    let every_ascii: String = (0u8..=0x7f).map(char::from).collect();
    let mut all = Vec::new();
    for (text, uid) in [
        ("plain", None),
        ("", Some("")),
        (every_ascii.as_str(), Some(every_ascii.as_str())),
        (
            "quote \" backslash \\ slash /",
            Some("tab\tnewline\nreturn\r"),
        ),
        (
            "é ü \u{2028} \u{2029} \u{7f} \u{1F600}",
            Some("\u{0}\u{1f}\u{8}\u{c}"),
        ),
    ] {
        let mut claims = fixtures::claims();
        claims.iss = format!("https://shop.example/{text}");
        claims.sub = text.to_owned();
        claims.jti = text.chars().rev().collect();
        claims.uid = uid.map(str::to_owned);
        claims.scope = text.to_owned();
        all.push(claims);
    }
    let mut extremes = fixtures::claims();
    (extremes.iat, extremes.nbf, extremes.exp, extremes.pos) = (0, 9, u64::MAX, 10);
    extremes.r#gen = u32::MAX;
    all.push(extremes);
    all
}

/// The claims' text written in its one layout is byte for byte what `serde_json` writes.
#[test]
fn claims_are_written_as_serde_json_writes_them() {
    for claims in awkward_claims() {
        let expected = serde_json::to_vec(&claims).expect("serde_json writes the claims");
        assert_eq!(
            String::from_utf8_lossy(&super::claims_json(&claims.view())),
            String::from_utf8_lossy(&expected)
        );
        assert_eq!(claims.view().to_claims(), claims);
    }
}

/// Passes of claims that need escapes are still the tokens `jsonwebtoken` signs, and verify.
#[test]
fn awkward_passes_are_what_jsonwebtoken_signs() {
    for algorithm in [SigningAlgorithm::EdDsa, SigningAlgorithm::Es256] {
        let (_dir, keys) = fixtures::key_set(algorithm);
        let key = keys.active();
        let mut header = jsonwebtoken::Header::new(algorithm.jsonwebtoken());
        header.kid = Some(key.kid.clone());
        for claims in awkward_claims() {
            let expected = jsonwebtoken::encode(&header, &claims, key.encoding_key())
                .expect("jsonwebtoken signs");
            let pass = keys.sign_pass(&claims).expect("sign");
            assert_eq!(pass, expected, "{algorithm:?}");
            let signed: PassClaims = keys.verify_signature(&pass).expect("verifies");
            assert_eq!(signed, claims);
        }
    }
}
