//! OpenID Connect tokens (SPEC §11): ID tokens and access tokens, signed like passes with the
//! active key and its `kid`, and sealed values: a payload with an HMAC-SHA256 under the
//! ticket secret, which carry an authorization request through the queue and make up an
//! authorization code.
//!
//! An access token's `scope` is `openid` and a pass's `room`, so neither verifies as the other.
//!
//! A sealed value is `s1.<payload>.<mac>` (unpadded base64url), the MAC taken over
//! `s1.<purpose>.<payload>`; sealed with a rotated ticket secret it is
//! `s2.<secret_id>.<payload>.<mac>`, the MAC over `s2.<secret_id>.<purpose>.<payload>`
//! (`ticket_secrets.rs`). The purpose (say, the kind of value and its room) is not in the
//! value: a value sealed for one purpose never opens for another, and ticket tokens (whose
//! MAC input starts with `t1.` or `t2.`) never open as sealed values or the other way round.
//! Sealed values are authentic, not secret: their payload is readable by whoever holds them.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};

use crate::pass::check_time;
use crate::ticket_secrets::{Versions, push_mac_text};
use crate::{KeySet, PassError, TicketSigner, TokenError};

/// The `scope` claim of every access token; passes say `"room"`, so neither passes for the
/// other.
pub const ACCESS_TOKEN_SCOPE: &str = "openid";

/// The version tags of sealed values: of the original ticket secret, and naming a rotated one.
const SEAL_VERSIONS: Versions = Versions {
    original: "s1",
    named: "s2",
};

/// Longest sealed value accepted.
const MAX_SEALED_LEN: usize = 4 * 1024;

/// The claims of an ID token (OpenID Connect Core §2).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct IdTokenClaims {
    /// Issuer.
    pub iss: String,
    /// Subject: the session id.
    pub sub: String,
    /// Audience: the client id, which is the room id.
    pub aud: String,
    /// Expires at (Unix seconds).
    pub exp: u64,
    /// Issued at (Unix seconds).
    pub iat: u64,
    /// When the visitor was let in: the session's start (Unix seconds).
    pub auth_time: u64,
    /// The `nonce` of the authorization request.
    pub nonce: String,
}

/// The claims of an access token (a JWT in the spirit of RFC 9068, `typ: at+jwt`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct AccessTokenClaims {
    /// Issuer.
    pub iss: String,
    /// Subject: the session id.
    pub sub: String,
    /// Audience: the room id.
    pub aud: String,
    /// The client the token was issued to: the room id.
    pub client_id: String,
    /// Token id: the id of the authorization code it was issued for.
    pub jti: String,
    /// Issued at (Unix seconds).
    pub iat: u64,
    /// Expires at (Unix seconds).
    pub exp: u64,
    /// The room generation of the session (`gen` on the wire).
    pub r#gen: u32,
    /// Always [`ACCESS_TOKEN_SCOPE`].
    pub scope: String,
}

/// Why a sealed value did not open.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid sealed value")]
pub struct SealError;

impl KeySet {
    /// Signs an ID token with the active key (`kid` in the header, `typ: JWT`).
    pub fn sign_id_token(&self, claims: &IdTokenClaims) -> Result<String, TokenError> {
        self.sign_claims(claims, "JWT")
    }

    /// Signs an access token with the active key (`kid` in the header, `typ: at+jwt`).
    pub fn sign_access_token(&self, claims: &AccessTokenClaims) -> Result<String, TokenError> {
        self.sign_claims(claims, "at+jwt")
    }

    /// Verifies an access token as passes are verified (the key named by `kid` decides the
    /// algorithm; `exp` with the leeway at `now_secs`), and checks `iss` and `scope`. The
    /// audience, the session and revocation are for the caller, who knows the rooms.
    ///
    /// ```
    /// use anteroom_token::{AccessTokenClaims, KeySet, PassError, SigningAlgorithm};
    ///
    /// let now = 1_700_000_000;
    /// let dir = tempfile::tempdir().unwrap();
    /// let keys = KeySet::load_or_generate(dir.path(), SigningAlgorithm::EdDsa, now).unwrap();
    /// let claims = AccessTokenClaims {
    ///     iss: "https://q.example".into(),
    ///     sub: "s1".into(),
    ///     aud: "launch".into(),
    ///     client_id: "launch".into(),
    ///     jti: "c1".into(),
    ///     iat: now,
    ///     exp: now + 300,
    ///     r#gen: 1,
    ///     scope: "openid".into(),
    /// };
    /// let token = keys.sign_access_token(&claims).unwrap();
    /// assert_eq!(keys.verify_access_token(&token, "https://q.example", now), Ok(claims));
    /// assert_eq!(keys.verify_access_token(&token, "https://other", now), Err(PassError::WrongIssuer));
    /// assert_eq!(keys.verify_access_token(&token, "https://q.example", now + 400), Err(PassError::Expired));
    /// ```
    pub fn verify_access_token(
        &self,
        token: &str,
        issuer: &str,
        now_secs: u64,
    ) -> Result<AccessTokenClaims, PassError> {
        let claims: AccessTokenClaims = self.verify_signature(token)?;
        check_time(claims.exp, claims.iat, now_secs)?;
        if claims.iss != issuer {
            return Err(PassError::WrongIssuer);
        }
        if claims.scope != ACCESS_TOKEN_SCOPE || claims.client_id != claims.aud {
            return Err(PassError::WrongScope);
        }
        Ok(claims)
    }

    fn sign_claims(&self, claims: &impl Serialize, typ: &str) -> Result<String, TokenError> {
        let key = self.active();
        let mut header = jsonwebtoken::Header::new(key.material.algorithm.jsonwebtoken());
        header.kid = Some(key.kid.clone());
        header.typ = Some(typ.to_owned());
        jsonwebtoken::encode(&header, claims, key.encoding_key())
            .map_err(|error| TokenError::Signing(error.to_string()))
    }
}

impl TicketSigner {
    /// Seals `payload` for `purpose` (which must not contain `.`).
    ///
    /// ```
    /// use anteroom_token::{SealError, TicketSigner};
    ///
    /// let signer = TicketSigner::from_secret([7; 32]);
    /// let sealed = signer.seal("oidc-code.launch", b"payload");
    /// let now = 1_700_000_000;
    /// assert_eq!(signer.unseal("oidc-code.launch", &sealed, now), Ok(b"payload".to_vec()));
    /// assert_eq!(signer.unseal("oidc-code.other", &sealed, now), Err(SealError));
    /// ```
    pub fn seal(&self, purpose: &str, payload: &[u8]) -> String {
        let key = self.keys().signing();
        let mut prefix = String::new();
        SEAL_VERSIONS.push_prefix(&mut prefix, key.id());
        let payload = URL_SAFE_NO_PAD.encode(payload);
        let mac = key.mac(format!("{prefix}{purpose}.{payload}").as_bytes());
        let mut sealed = format!("{prefix}{payload}.");
        push_mac_text(&mut sealed, &mac);
        sealed
    }

    /// Opens a value sealed for `purpose`: checks its MAC in constant time with the ticket
    /// secret it names (which must still verify at `now_secs`) and returns the payload.
    pub fn unseal(&self, purpose: &str, sealed: &str, now_secs: u64) -> Result<Vec<u8>, SealError> {
        if sealed.len() > MAX_SEALED_LEN {
            return Err(SealError);
        }
        let (front, mac) = sealed.rsplit_once('.').ok_or(SealError)?;
        let (secret, payload) = SEAL_VERSIONS.split_prefix(front).ok_or(SealError)?;
        if payload.contains('.') {
            return Err(SealError);
        }
        let key = self.keys().verifying(secret, now_secs).ok_or(SealError)?;
        let prefix = &front[..front.len() - payload.len()];
        if !key.verifies(format!("{prefix}{purpose}.{payload}").as_bytes(), mac) {
            return Err(SealError);
        }
        URL_SAFE_NO_PAD.decode(payload).map_err(|_| SealError)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{PassClaims, PassExpectations, SigningAlgorithm};

    const NOW: u64 = 1_700_000_000;

    fn keys() -> (tempfile::TempDir, KeySet) {
        let dir = tempfile::tempdir().expect("temporary directory");
        let keys =
            KeySet::load_or_generate(dir.path(), SigningAlgorithm::EdDsa, NOW).expect("key set");
        (dir, keys)
    }

    fn access(scope: &str) -> AccessTokenClaims {
        AccessTokenClaims {
            iss: "https://q.example".into(),
            sub: "s1".into(),
            aud: "launch".into(),
            client_id: "launch".into(),
            jti: "c1".into(),
            iat: NOW,
            exp: NOW + 300,
            r#gen: 1,
            scope: scope.into(),
        }
    }

    #[test]
    fn tokens_do_not_pass_for_each_other() {
        let (_dir, keys) = keys();
        let id_token = keys
            .sign_id_token(&IdTokenClaims {
                iss: "https://q.example".into(),
                sub: "s1".into(),
                aud: "launch".into(),
                exp: NOW + 300,
                iat: NOW,
                auth_time: NOW,
                nonce: "n".into(),
            })
            .expect("signed");
        let issuer = "https://q.example";
        assert_eq!(
            keys.verify_access_token(&id_token, issuer, NOW),
            Err(PassError::Malformed)
        );
        let pass = keys
            .sign_pass(&PassClaims {
                iss: issuer.into(),
                aud: "launch".into(),
                sub: "s1".into(),
                jti: "s1".into(),
                iat: NOW,
                nbf: NOW,
                exp: NOW + 300,
                pos: 1,
                r#gen: 1,
                uid: None,
                scope: "room".into(),
            })
            .expect("signed");
        assert!(keys.verify_access_token(&pass, issuer, NOW).is_err());
        let token = keys.sign_access_token(&access("openid")).expect("signed");
        let expect = PassExpectations {
            room: "launch",
            issuer,
            generation: 1,
        };
        assert!(keys.verify_pass(&token, &expect, NOW).is_err());
        let odd = keys.sign_access_token(&access("room")).expect("signed");
        assert_eq!(
            keys.verify_access_token(&odd, issuer, NOW),
            Err(PassError::WrongScope)
        );
    }

    #[test]
    fn sealed_values_are_tamper_evident() {
        let signer = TicketSigner::from_secret([3; 32]);
        let sealed = signer.seal("p", b"{\"a\":1}");
        let (front, mac) = sealed.rsplit_once('.').expect("three parts");
        let tampered = format!("{}.{mac}", front.replace("eyJh", "eyJi"));
        assert_ne!(tampered, sealed);
        assert_eq!(signer.unseal("p", &tampered, NOW), Err(SealError));
        assert_eq!(
            signer.unseal("p", &format!("{sealed}.x"), NOW),
            Err(SealError)
        );
        let other = TicketSigner::from_secret([4; 32]);
        assert_eq!(other.unseal("p", &sealed, NOW), Err(SealError));
        // A ticket token never opens as a sealed value.
        let ticket = signer.sign(&crate::TicketClaims {
            room: "p".into(),
            ticket_id: "abc".into(),
            position: 1,
            generation: 1,
        });
        assert_eq!(signer.unseal("p", &ticket, NOW), Err(SealError));
    }
}
