//! Proof-of-work challenges (SPEC §12): stateless, signed by the node, checked by any node.
//!
//! A challenge is `c1.<room>.<nonce>.<expires>.<difficulty>.<mac>`: the room it is for, 16
//! random bytes (base64url), the second it expires (Unix time), the leading zero bits asked
//! for, and the unpadded base64url HMAC-SHA256 of everything before the last `.`; made with a
//! rotated ticket secret it is `c2.<secret_id>.<room>…` (`ticket_secrets.rs`). The MAC key
//! is derived from the key directory's ticket secret (HMAC of a fixed label), so a challenge
//! can never pass as a ticket token or the other way round, and every node sharing the key
//! directory accepts every node's challenges. Only the server knows whether a challenge was
//! already used; that is the caller's concern (SPEC §12: one solution per ticket).

use std::fmt;

use hmac::Mac as _;

use crate::ticket_secrets::{self, MacKeys, TicketSecrets, Versions};

/// The version tags of challenges: of the original ticket secret, and naming a rotated one.
const VERSIONS: Versions = Versions {
    original: "c1",
    named: "c2",
};
/// Longest challenge accepted; a well-formed one is under 170 bytes.
const MAX_CHALLENGE_LEN: usize = 256;
/// The label the challenge key is derived with.
const KEY_LABEL: &[u8] = b"anteroom challenge key v1";

/// What a challenge says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChallengeClaims {
    /// The room it is for.
    pub room: String,
    /// Random bytes, base64url (no `.`), that make it unique.
    pub nonce: String,
    /// When it expires, in seconds since the epoch.
    pub expires_at: u64,
    /// The leading zero bits a solution needs.
    pub difficulty: u8,
}

/// Why a challenge was rejected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ChallengeError {
    /// Not a challenge, or its MAC does not match.
    #[error("invalid challenge")]
    Invalid,
    /// A genuine challenge for another room.
    #[error("the challenge is for another room")]
    WrongRoom,
    /// A genuine challenge past its expiry.
    #[error("the challenge has expired")]
    Expired,
}

/// Signs and verifies challenges.
///
/// ```
/// use anteroom_token::{ChallengeClaims, ChallengeError, ChallengeSigner};
///
/// let signer = ChallengeSigner::from_secret([7; 32]);
/// let claims = ChallengeClaims {
///     room: "launch".into(),
///     nonce: "AAAAAAAAAAAAAAAAAAAAAA".into(),
///     expires_at: 1_000,
///     difficulty: 18,
/// };
/// let challenge = signer.sign(&claims);
/// assert!(challenge.starts_with("c1.launch.AAAAAAAAAAAAAAAAAAAAAA.1000.18."));
/// assert_eq!(signer.verify(&challenge, "launch", 999), Ok(claims));
/// assert_eq!(signer.verify(&challenge, "launch", 1_000), Err(ChallengeError::Expired));
/// assert_eq!(signer.verify(&challenge, "other", 999), Err(ChallengeError::WrongRoom));
/// ```
#[derive(Clone)]
pub struct ChallengeSigner {
    keys: MacKeys,
}

impl ChallengeSigner {
    /// A signer whose key is derived from `secret` (the original ticket secret, alone).
    pub fn from_secret(secret: [u8; 32]) -> ChallengeSigner {
        ChallengeSigner::from_secrets(&TicketSecrets::original(secret))
    }

    pub(crate) fn from_secrets(secrets: &TicketSecrets) -> ChallengeSigner {
        ChallengeSigner {
            keys: MacKeys::new(secrets, derive_key),
        }
    }

    /// The challenge for `claims` (`room` and `nonce` must hold no `.`).
    pub fn sign(&self, claims: &ChallengeClaims) -> String {
        let key = self.keys.signing();
        let mut challenge = String::new();
        VERSIONS.push_prefix(&mut challenge, key.id());
        challenge.push_str(&format!(
            "{}.{}.{}.{}",
            claims.room, claims.nonce, claims.expires_at, claims.difficulty
        ));
        key.push_mac(&mut challenge);
        challenge
    }

    /// Checks the MAC (in constant time) with the ticket secret the challenge names (which
    /// must still verify at `now_secs`), the room, and that it has not expired at `now_secs`.
    pub fn verify(
        &self,
        challenge: &str,
        room: &str,
        now_secs: u64,
    ) -> Result<ChallengeClaims, ChallengeError> {
        if challenge.len() > MAX_CHALLENGE_LEN {
            return Err(ChallengeError::Invalid);
        }
        let fields = self
            .keys
            .open(&VERSIONS, challenge, now_secs)
            .ok_or(ChallengeError::Invalid)?;
        let claims = parse_fields(fields).ok_or(ChallengeError::Invalid)?;
        if claims.room != room {
            return Err(ChallengeError::WrongRoom);
        }
        if now_secs >= claims.expires_at {
            return Err(ChallengeError::Expired);
        }
        Ok(claims)
    }
}

impl fmt::Debug for ChallengeSigner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChallengeSigner")
            .field("key", &"[redacted]")
            .finish()
    }
}

/// The challenge key of a ticket secret: its HMAC of a fixed label.
fn derive_key(secret: [u8; 32]) -> [u8; 32] {
    let mut derive = ticket_secrets::keyed(secret);
    derive.update(KEY_LABEL);
    derive.finalize().into_bytes().into()
}

/// Reads `<room>.<nonce>.<expires>.<difficulty>`.
fn parse_fields(fields: &str) -> Option<ChallengeClaims> {
    let [room, nonce, expires, difficulty] = ticket_secrets::four_fields(fields)?;
    Some(ChallengeClaims {
        room: room.to_owned(),
        nonce: nonce.to_owned(),
        expires_at: expires.parse().ok()?,
        difficulty: difficulty.parse().ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims() -> ChallengeClaims {
        ChallengeClaims {
            room: "launch".into(),
            nonce: "bm9uY2Vub25jZW5vbmNl".into(),
            expires_at: 500,
            difficulty: 4,
        }
    }

    #[test]
    fn altered_or_foreign_challenges_are_invalid() {
        let signer = ChallengeSigner::from_secret([1; 32]);
        let challenge = signer.sign(&claims());
        let easier = challenge.replacen(".4.", ".1.", 1);
        assert_eq!(
            signer.verify(&easier, "launch", 0),
            Err(ChallengeError::Invalid)
        );
        let other = ChallengeSigner::from_secret([2; 32]);
        assert_eq!(
            other.verify(&challenge, "launch", 0),
            Err(ChallengeError::Invalid)
        );
        assert_eq!(
            signer.verify("garbage", "launch", 0),
            Err(ChallengeError::Invalid)
        );
    }

    #[test]
    fn a_ticket_token_is_not_a_challenge() {
        let secret = [3; 32];
        let ticket = crate::TicketSigner::from_secret(secret).sign(&crate::TicketClaims {
            room: "launch".into(),
            ticket_id: "abc".into(),
            position: 1,
            generation: 1,
        });
        assert_eq!(
            ChallengeSigner::from_secret(secret).verify(&ticket, "launch", 0),
            Err(ChallengeError::Invalid)
        );
    }
}
