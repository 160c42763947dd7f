//! Passes: the JWTs that let a visitor through a room, their claims, and their verification.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::keyset::LoadedKey;
use crate::leeway::LEEWAY_SECS;
use crate::{KeySet, SigningAlgorithm, TokenError, json_text};

/// The only `scope` a room pass carries.
pub const PASS_SCOPE: &str = "room";

/// Longest token considered; passes are a few hundred bytes, so anything longer is refused
/// before any decoding work.
const MAX_TOKEN_LEN: usize = 8 * 1024;

/// The claims of a pass.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct PassClaims {
    /// Issuer: the configured issuer, by default the public base URL.
    pub iss: String,
    /// Audience: the room id.
    pub aud: String,
    /// Subject: the session id.
    pub sub: String,
    /// Token id: the session id.
    pub jti: String,
    /// Issued at (Unix seconds).
    pub iat: u64,
    /// Not before (Unix seconds).
    pub nbf: u64,
    /// Expires at (Unix seconds).
    pub exp: u64,
    /// The ticket position the pass was issued to.
    pub pos: u64,
    /// The room generation the pass belongs to (`gen` on the wire).
    pub r#gen: u32,
    /// The visitor's identity, when the room's identity is not anonymous.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub uid: Option<String>,
    /// Always [`PASS_SCOPE`] for a room pass.
    pub scope: String,
}

impl PassClaims {
    /// The claims borrowed, as [`KeySet::sign_pass_view`] takes them.
    pub fn view(&self) -> PassClaimsView<'_> {
        PassClaimsView {
            iss: &self.iss,
            aud: &self.aud,
            sub: &self.sub,
            jti: &self.jti,
            iat: self.iat,
            nbf: self.nbf,
            exp: self.exp,
            pos: self.pos,
            r#gen: self.r#gen,
            uid: self.uid.as_deref(),
            scope: &self.scope,
        }
    }
}

/// The claims of a pass with their text borrowed: what a pass is signed from, so that a
/// caller holding the session's fields signs without owning copies of them first (every join
/// admitted at once signs a pass). Serialised as [`PassClaims`] is, field for field.
#[derive(Serialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct PassClaimsView<'a> {
    /// Issuer: the configured issuer, by default the public base URL.
    pub iss: &'a str,
    /// Audience: the room id.
    pub aud: &'a str,
    /// Subject: the session id.
    pub sub: &'a str,
    /// Token id: the session id.
    pub jti: &'a str,
    /// Issued at (Unix seconds).
    pub iat: u64,
    /// Not before (Unix seconds).
    pub nbf: u64,
    /// Expires at (Unix seconds).
    pub exp: u64,
    /// The ticket position the pass was issued to.
    pub pos: u64,
    /// The room generation the pass belongs to (`gen` on the wire).
    pub r#gen: u32,
    /// The visitor's identity, when the room's identity is not anonymous.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uid: Option<&'a str>,
    /// Always [`PASS_SCOPE`] for a room pass.
    pub scope: &'a str,
}

impl PassClaimsView<'_> {
    /// The claims owned.
    pub fn to_claims(&self) -> PassClaims {
        PassClaims {
            iss: self.iss.to_owned(),
            aud: self.aud.to_owned(),
            sub: self.sub.to_owned(),
            jti: self.jti.to_owned(),
            iat: self.iat,
            nbf: self.nbf,
            exp: self.exp,
            pos: self.pos,
            r#gen: self.r#gen,
            uid: self.uid.map(str::to_owned),
            scope: self.scope.to_owned(),
        }
    }
}

/// What a pass must say to be accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PassExpectations<'a> {
    /// The room the pass must be for (`aud`).
    pub room: &'a str,
    /// The issuer the pass must come from (`iss`).
    pub issuer: &'a str,
    /// The room's current generation (`gen`).
    pub generation: u32,
}

/// Why a pass was rejected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PassError {
    /// Not a compact JWS with a JSON header and the pass claims.
    #[error("malformed pass")]
    Malformed,
    /// The `kid` names no key of the set (or is missing).
    #[error("pass signed with an unknown key")]
    UnknownKey,
    /// `alg` is `none`, unsupported, or not the algorithm of the key named by `kid`.
    #[error("pass signing algorithm not allowed")]
    AlgorithmNotAllowed,
    /// The signature does not verify.
    #[error("bad pass signature")]
    BadSignature,
    /// `exp` is more than the leeway in the past.
    #[error("pass expired")]
    Expired,
    /// `nbf` is more than the leeway in the future.
    #[error("pass not yet valid")]
    NotYetValid,
    /// `aud` is another room.
    #[error("pass is for another room")]
    WrongAudience,
    /// `iss` is another issuer.
    #[error("pass from another issuer")]
    WrongIssuer,
    /// `gen` is not the room's current generation.
    #[error("pass from another room generation")]
    OldGeneration,
    /// `scope` is not `"room"`.
    #[error("pass has the wrong scope")]
    WrongScope,
}

/// An unverified look inside a token, for people debugging passes.
#[derive(Clone, Debug, PartialEq)]
pub struct Inspection {
    /// The decoded JOSE header.
    pub header: Value,
    /// The decoded claims.
    pub claims: Value,
    /// `Ok` when the signature verifies with a key of this set under the rules of
    /// [`KeySet::verify_pass`]; otherwise why not (`UnknownKey`, `AlgorithmNotAllowed`,
    /// `BadSignature` or `Malformed`).
    pub signature: Result<(), PassError>,
    /// `Ok` when `exp` and `nbf` hold at the time given (with the leeway); otherwise
    /// `Expired`, `NotYetValid`, or `Malformed` when they are missing or not integers.
    pub validity: Result<(), PassError>,
}

impl Inspection {
    /// Whether the signature verifies with this key set.
    pub fn signature_verifies(&self) -> bool {
        self.signature.is_ok()
    }
}

/// Bytes of the longest signature a [`PassSigner`](crate::keys::PassSigner) makes: Ed25519's
/// and ES256's.
const SIGNATURE_MAX_LEN: usize = 64;

impl KeySet {
    /// Signs `claims` with the active key; the header carries `alg`, `kid` and `typ: JWT`.
    pub fn sign_pass(&self, claims: &PassClaims) -> Result<String, TokenError> {
        self.sign_pass_view(&claims.view())
    }

    /// [`sign_pass`](Self::sign_pass) from borrowed claims.
    pub fn sign_pass_view(&self, claims: &PassClaimsView<'_>) -> Result<String, TokenError> {
        let key = self.active();
        let Some(signer) = &key.material.signer else {
            return jsonwebtoken::encode(&key.jws_header(), claims, key.encoding_key())
                .map_err(|error| TokenError::Signing(error.to_string()));
        };
        // The compact serialization (RFC 7515 §7.1) as `jsonwebtoken::encode` writes it, with
        // the key parsed once (`keys.rs`, `PassSigner`), its header encoded once, when the key
        // was loaded, and the claims written in their one layout (`claims_json`) rather than
        // through serde's generic path: the token is written into a buffer of its final size.
        let claims = claims_json(claims);
        let mut token = Vec::with_capacity(
            key.encoded_header.len() + 2 + base64_len(claims.len()) + base64_len(SIGNATURE_MAX_LEN),
        );
        token.extend_from_slice(key.encoded_header.as_bytes());
        token.push(b'.');
        push_base64(&mut token, &claims)?;
        let signature = signer.sign(&token).map_err(TokenError::Signing)?;
        token.push(b'.');
        push_base64(&mut token, &signature)?;
        // Base64url and the header's own base64url text: ASCII throughout.
        String::from_utf8(token)
            .map_err(|_| TokenError::Signing("the pass is not ASCII text".into()))
    }

    /// Verifies a pass: its `alg` must be the algorithm of the key its `kid` names (never
    /// `none`, never HMAC with an asymmetric key), the signature must verify, `exp` and `nbf`
    /// must hold at `now_secs` within [`LEEWAY_SECS`], and `aud`, `iss`, `gen` and `scope`
    /// must match `expect`.
    ///
    /// ```
    /// use anteroom_token::{KeySet, PassClaims, PassError, PassExpectations, SigningAlgorithm};
    ///
    /// let now = 1_700_000_000;
    /// let dir = tempfile::tempdir().unwrap();
    /// let keys = KeySet::load_or_generate(dir.path(), SigningAlgorithm::EdDsa, now).unwrap();
    /// let claims = PassClaims {
    ///     iss: "https://shop.example".into(),
    ///     aud: "launch".into(),
    ///     sub: "s1".into(),
    ///     jti: "s1".into(),
    ///     iat: now,
    ///     nbf: now,
    ///     exp: now + 600,
    ///     pos: 17,
    ///     r#gen: 1,
    ///     uid: None,
    ///     scope: "room".into(),
    /// };
    /// let pass = keys.sign_pass(&claims).unwrap();
    /// let expect = PassExpectations { room: "launch", issuer: "https://shop.example", generation: 1 };
    /// assert_eq!(keys.verify_pass(&pass, &expect, now + 10), Ok(claims));
    /// assert_eq!(keys.verify_pass(&pass, &expect, now + 700), Err(PassError::Expired));
    /// ```
    pub fn verify_pass(
        &self,
        token: &str,
        expect: &PassExpectations<'_>,
        now_secs: u64,
    ) -> Result<PassClaims, PassError> {
        let claims: PassClaims = self.verify_signature(token)?;
        check_time(claims.exp, claims.nbf, now_secs)?;
        if claims.aud != expect.room {
            return Err(PassError::WrongAudience);
        }
        if claims.iss != expect.issuer {
            return Err(PassError::WrongIssuer);
        }
        if claims.r#gen != expect.generation {
            return Err(PassError::OldGeneration);
        }
        if claims.scope != PASS_SCOPE {
            return Err(PassError::WrongScope);
        }
        Ok(claims)
    }

    /// Decodes the header and claims of `token` without trusting them, and reports whether
    /// its signature verifies with this key set and whether it is within its lifetime at
    /// `now_secs`. An error only when the token is not a JWS with JSON header and claims.
    pub fn inspect(&self, token: &str, now_secs: u64) -> Result<Inspection, TokenError> {
        let parts = split(token).ok_or_else(|| {
            TokenError::MalformedToken("not three base64url parts joined by '.'".into())
        })?;
        let header = decode_json_part(parts.header)
            .ok_or_else(|| TokenError::MalformedToken("header is not a JSON object".into()))?;
        let claims = decode_json_part(parts.claims)
            .ok_or_else(|| TokenError::MalformedToken("claims are not a JSON object".into()))?;
        let signature = self.verify_signature::<Value>(token).map(|_| ());
        let validity = match (
            claims.get("exp").and_then(Value::as_u64),
            claims.get("nbf").map_or(Some(0), Value::as_u64),
        ) {
            (Some(exp), Some(nbf)) => check_time(exp, nbf, now_secs),
            _ => Err(PassError::Malformed),
        };
        Ok(Inspection {
            header: Value::Object(header),
            claims: Value::Object(claims),
            signature,
            validity,
        })
    }

    /// Checks the header against the key set and the signature with the named key, and
    /// returns the claims; no claim is checked.
    pub(crate) fn verify_signature<T: DeserializeOwned>(
        &self,
        token: &str,
    ) -> Result<T, PassError> {
        let parts = split(token).ok_or(PassError::Malformed)?;
        let header = decode_json_part(parts.header).ok_or(PassError::Malformed)?;
        // Passes use no header extensions, and a token marking one critical must be refused
        // by a verifier that does not implement it (RFC 7515 §4.1.11).
        if header.contains_key("crit") {
            return Err(PassError::Malformed);
        }
        // The algorithm is judged before the key is looked up, so `none` and foreign
        // algorithms are refused whatever `kid` they name.
        let alg = header
            .get("alg")
            .and_then(Value::as_str)
            .ok_or(PassError::Malformed)?;
        let algorithm = SigningAlgorithm::from_jose(alg).ok_or(PassError::AlgorithmNotAllowed)?;
        let key = header
            .get("kid")
            .and_then(Value::as_str)
            .and_then(|kid| self.find(kid))
            .ok_or(PassError::UnknownKey)?;
        // The key decides the algorithm, never the token: this is what stops a token MAC'd
        // with HS256 over an asymmetric key's public bytes.
        if algorithm != key.material.algorithm {
            return Err(PassError::AlgorithmNotAllowed);
        }
        decode_verified(token, key)
    }
}

/// The three parts of a compact JWS.
struct Parts<'a> {
    header: &'a str,
    claims: &'a str,
}

fn split(token: &str) -> Option<Parts<'_>> {
    if token.len() > MAX_TOKEN_LEN {
        return None;
    }
    let mut parts = token.split('.');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(header), Some(claims), Some(_signature), None) => Some(Parts { header, claims }),
        _ => None,
    }
}

fn decode_json_part(part: &str) -> Option<Map<String, Value>> {
    let bytes = URL_SAFE_NO_PAD.decode(part).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Verifies the signature with jsonwebtoken and decodes the claims. Its time checks read the
/// system clock, so they are off here and done by [`check_time`] against the caller's time.
fn decode_verified<T: DeserializeOwned>(token: &str, key: &LoadedKey) -> Result<T, PassError> {
    let mut validation = jsonwebtoken::Validation::new(key.material.algorithm.jsonwebtoken());
    validation.validate_exp = false;
    validation.validate_nbf = false;
    validation.validate_aud = false;
    validation.required_spec_claims.clear();
    match jsonwebtoken::decode::<T>(token, key.decoding_key(), &validation) {
        Ok(data) => Ok(data.claims),
        Err(error) => Err(map_jsonwebtoken_error(error.kind())),
    }
}

fn map_jsonwebtoken_error(kind: &jsonwebtoken::errors::ErrorKind) -> PassError {
    use jsonwebtoken::errors::ErrorKind;
    match kind {
        ErrorKind::InvalidAlgorithm | ErrorKind::MissingAlgorithm => PassError::AlgorithmNotAllowed,
        ErrorKind::InvalidToken
        | ErrorKind::Base64(_)
        | ErrorKind::Json(_)
        | ErrorKind::Utf8(_)
        | ErrorKind::InvalidClaimFormat(_)
        | ErrorKind::MissingRequiredClaim(_) => PassError::Malformed,
        // Everything else means the signature could not be shown to come from the key.
        _ => PassError::BadSignature,
    }
}

pub(crate) fn check_time(exp: u64, nbf: u64, now_secs: u64) -> Result<(), PassError> {
    // Valid while now < exp (RFC 7519 §4.1.4) and now >= nbf (§4.1.5), each widened by the
    // leeway.
    if now_secs >= exp.saturating_add(LEEWAY_SECS) {
        return Err(PassError::Expired);
    }
    if now_secs.saturating_add(LEEWAY_SECS) < nbf {
        return Err(PassError::NotYetValid);
    }
    Ok(())
}

/// Characters of `len` bytes in unpadded base64url.
fn base64_len(len: usize) -> usize {
    (len * 4).div_ceil(3)
}

/// Appends `bytes` in unpadded base64url, encoded in place at the end of `out`.
fn push_base64(out: &mut Vec<u8>, bytes: &[u8]) -> Result<(), TokenError> {
    let start = out.len();
    out.resize(start + base64_len(bytes.len()), 0);
    let written = URL_SAFE_NO_PAD
        .encode_slice(bytes, &mut out[start..])
        .map_err(|error| TokenError::Signing(error.to_string()))?;
    out.truncate(start + written);
    Ok(())
}

/// The claims' JSON text, byte for byte what `serde_json` writes for them (the members in
/// the order of their declaration, `uid` left out when absent, no spaces), written in the one
/// layout a pass has.
fn claims_json(claims: &PassClaimsView<'_>) -> Vec<u8> {
    // Names, quotes and punctuation take 83 bytes (92 with `uid`), each number at most 20.
    let strings = [claims.iss, claims.aud, claims.sub, claims.jti, claims.scope];
    let mut out = Vec::with_capacity(
        96 + 5 * 20
            + strings.iter().map(|text| text.len()).sum::<usize>()
            + claims.uid.map_or(0, str::len),
    );
    out.extend_from_slice(b"{\"iss\":");
    push_json_string(&mut out, claims.iss);
    out.extend_from_slice(b",\"aud\":");
    push_json_string(&mut out, claims.aud);
    out.extend_from_slice(b",\"sub\":");
    push_json_string(&mut out, claims.sub);
    out.extend_from_slice(b",\"jti\":");
    push_json_string(&mut out, claims.jti);
    let mut digits = itoa::Buffer::new();
    for (name, value) in [
        (&b",\"iat\":"[..], claims.iat),
        (b",\"nbf\":", claims.nbf),
        (b",\"exp\":", claims.exp),
        (b",\"pos\":", claims.pos),
        (b",\"gen\":", u64::from(claims.r#gen)),
    ] {
        out.extend_from_slice(name);
        out.extend_from_slice(digits.format(value).as_bytes());
    }
    if let Some(uid) = claims.uid {
        out.extend_from_slice(b",\"uid\":");
        push_json_string(&mut out, uid);
    }
    out.extend_from_slice(b",\"scope\":");
    push_json_string(&mut out, claims.scope);
    out.push(b'}');
    out
}

/// Appends `text` as a JSON string, quoted and escaped as `serde_json` writes it.
fn push_json_string(out: &mut Vec<u8>, text: &str) {
    out.push(b'"');
    json_text::push_escaped(out, text);
    out.push(b'"');
}

#[cfg(test)]
mod tests;
