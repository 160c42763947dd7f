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
pub(crate) enum PassSigner {
    Ed25519(Box<ed25519_dalek::SigningKey>),
    Es256(Box<p256::ecdsa::SigningKey>),
}

impl PassSigner {
    /// The JWS signature of `message` (RFC 7518: Ed25519's 64 bytes; ES256's `r` and `s`,
    /// 32 bytes each, made as `jsonwebtoken` makes them).
    pub(crate) fn sign(&self, message: &[u8]) -> Result<Vec<u8>, String> {
        use ed25519_dalek::Signer as _;
        match self {
            PassSigner::Ed25519(key) => Ok(key.sign(message).to_bytes().to_vec()),
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
    Ok(KeyMaterial {
        algorithm: SigningAlgorithm::EdDsa,
        encoding: EncodingKey::from_ed_der(der.as_bytes()),
        decoding: DecodingKey::from_ed_der(public.as_bytes()),
        public_jwk: Some(jwk),
        signer: Some(PassSigner::Ed25519(Box::new(key))),
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
