//! Key material: generating keys, reading them from their file text, and describing the
//! public half as a JWK.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{DecodingKey, EncodingKey};
use rand::RngCore as _;
use rand::rngs::OsRng;
// ed25519-dalek, p256 and rsa share one `pkcs8` crate, so these traits serve all three.
use rsa::pkcs8::{DecodePrivateKey as _, EncodePrivateKey as _, LineEnding};
use serde_json::{Map, Value, json};

use crate::SigningAlgorithm;

/// Bytes of randomness in a generated HS256 secret or ticket secret.
pub(crate) const SECRET_LEN: usize = 32;

/// Bits of a generated RSA modulus; also the smallest modulus accepted on load.
const RSA_BITS: usize = 2048;

/// One key, ready to sign and verify.
pub(crate) struct KeyMaterial {
    pub(crate) algorithm: SigningAlgorithm,
    pub(crate) encoding: EncodingKey,
    pub(crate) decoding: DecodingKey,
    /// The public key as JWK members (`kty`, `crv`, `x`, …) without `kid`, `alg`, `use`;
    /// `None` for HS256, whose key is secret.
    pub(crate) public_jwk: Option<Map<String, Value>>,
    /// The private key parsed once, for the curves: `jsonwebtoken` parses `encoding`'s DER
    /// again on every signature, and an Ed25519 key's parse derives its public key, a
    /// scalar multiplication as dear as the signature itself. Every pass is signed here.
    pub(crate) signer: Option<PassSigner>,
}

/// A parsed private key that signs a JWS's signing input.
///
/// Ed25519 signs with AWS-LC (through `aws-lc-rs`), whose x86_64 and aarch64 builds do the
/// curve's field arithmetic in assembly: the same RFC 8032 signature (deterministic, so the
/// same 64 bytes as ed25519-dalek's for the same key and message) in less than half the time
/// (docs/benchmarks.md, "A join admitted at once: the pass signed with AWS-LC"). Every pass of
/// a join admitted at once is one signature. Key files are still read and written by
/// ed25519-dalek, which also gives the JWK and the verifying key.
pub(crate) enum PassSigner {
    Ed25519(Box<aws_lc_rs::signature::Ed25519KeyPair>),
    Es256(Box<p256::ecdsa::SigningKey>),
}

impl PassSigner {
    /// The JWS signature of `message` (RFC 7518: Ed25519's 64 bytes; ES256's `r` and `s`,
    /// 32 bytes each, made as `jsonwebtoken` makes them).
    pub(crate) fn sign(&self, message: &[u8]) -> Result<Vec<u8>, String> {
        match self {
            PassSigner::Ed25519(key) => key
                .try_sign(message)
                .map(|signature| signature.as_ref().to_vec())
                .map_err(|_| "Ed25519 signing failed".to_owned()),
            PassSigner::Es256(key) => key
                .sign_recoverable(message)
                .map(|(signature, _)| signature.to_vec())
                .map_err(|error| error.to_string()),
        }
    }
}

/// Generates a new key of `algorithm` and returns the text of its key file.
pub(crate) fn generate(algorithm: SigningAlgorithm) -> Result<String, String> {
    match algorithm {
        SigningAlgorithm::EdDsa => {
            let key = ed25519_dalek::SigningKey::generate(&mut OsRng);
            let pem = key
                .to_pkcs8_pem(LineEnding::LF)
                .map_err(|error| error.to_string())?;
            Ok(pem.to_string())
        }
        SigningAlgorithm::Es256 => {
            let key = p256::SecretKey::random(&mut OsRng);
            let pem = key
                .to_pkcs8_pem(LineEnding::LF)
                .map_err(|error| error.to_string())?;
            Ok(pem.to_string())
        }
        SigningAlgorithm::Rs256 => {
            let key =
                rsa::RsaPrivateKey::new(&mut OsRng, RSA_BITS).map_err(|error| error.to_string())?;
            let pem = key
                .to_pkcs8_pem(LineEnding::LF)
                .map_err(|error| error.to_string())?;
            Ok(pem.to_string())
        }
        SigningAlgorithm::Hs256 => Ok(format!("{}\n", encode_secret(&random_secret()))),
    }
}

/// Reads a key of `algorithm` from the text of its key file.
pub(crate) fn parse(algorithm: SigningAlgorithm, text: &str) -> Result<KeyMaterial, String> {
    match algorithm {
        SigningAlgorithm::EdDsa => parse_ed25519(text),
        SigningAlgorithm::Es256 => parse_p256(text),
        SigningAlgorithm::Rs256 => parse_rsa(text),
        SigningAlgorithm::Hs256 => parse_hmac(text),
    }
}

/// A fresh random secret from the operating system.
pub(crate) fn random_secret() -> [u8; SECRET_LEN] {
    let mut secret = [0u8; SECRET_LEN];
    OsRng.fill_bytes(&mut secret);
    secret
}

/// The file form of a secret: unpadded base64url.
pub(crate) fn encode_secret(secret: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(secret)
}

/// Reads a secret in file form (surrounding whitespace and `=` padding tolerated).
pub(crate) fn decode_secret(text: &str) -> Result<Vec<u8>, String> {
    let trimmed = text.trim().trim_end_matches('=');
    URL_SAFE_NO_PAD
        .decode(trimmed)
        .map_err(|error| format!("not base64url: {error}"))
}

fn parse_ed25519(text: &str) -> Result<KeyMaterial, String> {
    let key = ed25519_dalek::SigningKey::from_pkcs8_pem(text)
        .map_err(|error| format!("not a PKCS#8 Ed25519 private key: {error}"))?;
    let der = key.to_pkcs8_der().map_err(|error| error.to_string())?;
    let public = key.verifying_key();
    let mut jwk = Map::new();
    jwk.insert("kty".into(), json!("OKP"));
    jwk.insert("crv".into(), json!("Ed25519"));
    jwk.insert("x".into(), json!(URL_SAFE_NO_PAD.encode(public.as_bytes())));
    // AWS-LC derives the public key from the seed again and refuses a pair that differs.
    let signer = aws_lc_rs::signature::Ed25519KeyPair::from_seed_and_public_key(
        key.as_bytes(),
        public.as_bytes(),
    )
    .map_err(|error| format!("Ed25519 key refused by the signer: {error}"))?;
    Ok(KeyMaterial {
        algorithm: SigningAlgorithm::EdDsa,
        encoding: EncodingKey::from_ed_der(der.as_bytes()),
        decoding: DecodingKey::from_ed_der(public.as_bytes()),
        public_jwk: Some(jwk),
        signer: Some(PassSigner::Ed25519(Box::new(signer))),
    })
}

fn parse_p256(text: &str) -> Result<KeyMaterial, String> {
    use p256::elliptic_curve::sec1::ToEncodedPoint as _;

    let key = p256::SecretKey::from_pkcs8_pem(text)
        .map_err(|error| format!("not a PKCS#8 P-256 private key: {error}"))?;
    let der = key.to_pkcs8_der().map_err(|error| error.to_string())?;
    let point = key.public_key().to_encoded_point(false);
    let (Some(x), Some(y)) = (point.x(), point.y()) else {
        return Err("public key is the point at infinity".into());
    };
    let mut jwk = Map::new();
    jwk.insert("kty".into(), json!("EC"));
    jwk.insert("crv".into(), json!("P-256"));
    jwk.insert("x".into(), json!(URL_SAFE_NO_PAD.encode(x)));
    jwk.insert("y".into(), json!(URL_SAFE_NO_PAD.encode(y)));
    Ok(KeyMaterial {
        algorithm: SigningAlgorithm::Es256,
        encoding: EncodingKey::from_ec_der(der.as_bytes()),
        decoding: DecodingKey::from_ec_der(point.as_bytes()),
        public_jwk: Some(jwk),
        signer: Some(PassSigner::Es256(Box::new(key.into()))),
    })
}

fn parse_rsa(text: &str) -> Result<KeyMaterial, String> {
    use rsa::pkcs1::EncodeRsaPrivateKey as _;
    use rsa::traits::PublicKeyParts as _;

    let key = rsa::RsaPrivateKey::from_pkcs8_pem(text)
        .map_err(|error| format!("not a PKCS#8 RSA private key: {error}"))?;
    key.validate()
        .map_err(|error| format!("invalid RSA key: {error}"))?;
    if key.size() * 8 < RSA_BITS {
        return Err(format!(
            "RSA modulus of {} bits is shorter than {RSA_BITS}",
            key.size() * 8
        ));
    }
    // jsonwebtoken signs RS256 with a PKCS#1 DER private key.
    let der = key.to_pkcs1_der().map_err(|error| error.to_string())?;
    let modulus = key.n().to_bytes_be();
    let exponent = key.e().to_bytes_be();
    let mut jwk = Map::new();
    jwk.insert("kty".into(), json!("RSA"));
    jwk.insert("n".into(), json!(URL_SAFE_NO_PAD.encode(&modulus)));
    jwk.insert("e".into(), json!(URL_SAFE_NO_PAD.encode(&exponent)));
    Ok(KeyMaterial {
        algorithm: SigningAlgorithm::Rs256,
        encoding: EncodingKey::from_rsa_der(der.as_bytes()),
        decoding: DecodingKey::from_rsa_raw_components(&modulus, &exponent),
        public_jwk: Some(jwk),
        signer: None,
    })
}

fn parse_hmac(text: &str) -> Result<KeyMaterial, String> {
    let secret = decode_secret(text)?;
    if secret.len() < SECRET_LEN {
        return Err(format!(
            "HS256 secret has {} bytes, fewer than {SECRET_LEN}",
            secret.len()
        ));
    }
    Ok(KeyMaterial {
        algorithm: SigningAlgorithm::Hs256,
        encoding: EncodingKey::from_secret(&secret),
        decoding: DecodingKey::from_secret(&secret),
        public_jwk: None,
        signer: None,
    })
}

#[cfg(test)]
mod tests {
    use ed25519_dalek::{Signer as _, Verifier as _};

    use super::*;

    /// The Ed25519 private key of RFC 8410 §10.3: a PKCS#8 v1 file with no public key in it,
    /// as `openssl genpkey -algorithm ED25519` writes (generated keys are v2, with it).
    const RFC8410_KEY: &str = "-----BEGIN PRIVATE KEY-----\n\
        MC4CAQAwBQYDK2VwBCIEINTuctv5E1hK1bbY8fdp+K06/nwoy/HU++CXqI9EdVhC\n\
        -----END PRIVATE KEY-----\n";

    /// AWS-LC signs what ed25519-dalek signs, byte for byte, and the signature verifies with the
    /// public key the JWKS publishes: for keys in both PKCS#8 forms and messages of every length
    /// a pass's signing input has, and none.
    #[test]
    fn ed25519_signatures_are_ed25519_dalek_signatures() {
        let mut files = vec![RFC8410_KEY.to_owned()];
        for _ in 0..16 {
            files.push(generate(SigningAlgorithm::EdDsa).expect("generate an Ed25519 key"));
        }
        for file in &files {
            let reference =
                ed25519_dalek::SigningKey::from_pkcs8_pem(file).expect("dalek reads it");
            let material = parse(SigningAlgorithm::EdDsa, file).expect("the key loads");
            let signer = material.signer.as_ref().expect("Ed25519 keys sign");
            assert!(matches!(signer, PassSigner::Ed25519(_)));
            let jwk_x = material.public_jwk.as_ref().expect("public JWK")["x"].clone();
            assert_eq!(
                jwk_x,
                json!(URL_SAFE_NO_PAD.encode(reference.verifying_key().as_bytes()))
            );
            for length in [0usize, 1, 63, 64, 330, 1000] {
                let message: Vec<u8> = (0..length).map(|i| (i * 31 + length) as u8).collect();
                let signature = signer.sign(&message).expect("signs");
                assert_eq!(signature, reference.sign(&message).to_bytes().to_vec());
                let signature = ed25519_dalek::Signature::from_slice(&signature).expect("64 bytes");
                reference
                    .verifying_key()
                    .verify(&message, &signature)
                    .expect("verifies");
            }
        }
    }

    #[test]
    fn a_file_that_is_not_an_ed25519_key_is_refused() {
        let p256 = generate(SigningAlgorithm::Es256).expect("generate a P-256 key");
        for text in ["", "not a key", p256.as_str()] {
            let error = parse(SigningAlgorithm::EdDsa, text).err().expect("refused");
            assert!(
                error.starts_with("not a PKCS#8 Ed25519 private key"),
                "{error}"
            );
        }
    }
}
