//! Ticket tokens: a waiting visitor's place in a queue, bound to its room by a MAC.
//!
//! A ticket token is `t1.<room>.<ticket_id>.<position>.<generation>.<mac>` when the original
//! ticket secret made it, and `t2.<secret_id>.<room>.<ticket_id>.<position>.<generation>.<mac>`
//! when a rotated one did (`ticket_secrets.rs`); `mac` is the unpadded base64url HMAC-SHA256 of
//! everything before the last `.` under that secret (compared in constant time). Room ids
//! (`[a-z0-9][a-z0-9-]{0,63}`), ticket ids and secret ids (base64url) hold no `.`, so the token
//! is made only of `[A-Za-z0-9._-]` and can travel as a cookie, header or query parameter
//! unescaped.
//!
//! Ticket tokens carry no expiry: the store decides whether a ticket is still live (a waiting
//! visitor keeps it for as long as they keep contact), and the generation lets a reset reject
//! old ones. So no token lifetime bounds how long a retired secret must keep verifying; the
//! rotation names that time instead (`[keys] ticket_secret_retention`).

use std::fmt;

use crate::ticket_secrets::{MacKeys, TicketSecrets, Versions, four_fields};

/// The version tags of ticket tokens: of the original secret, and naming a rotated one.
const VERSIONS: Versions = Versions {
    original: "t1",
    named: "t2",
};
/// Longest ticket token accepted; far above any well-formed one (about 200 bytes).
const MAX_TOKEN_LEN: usize = 512;
/// Secret id 11 bytes, room up to 64, id 22, two numbers and the 43-byte MAC fit without
/// growing.
const TOKEN_CAPACITY: usize = 208;

/// What a ticket token says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TicketClaims {
    /// The room the ticket queues for.
    pub room: String,
    /// The ticket's random id (base64url, no `.`).
    pub ticket_id: String,
    /// The ticket's position in the room's queue.
    pub position: u64,
    /// The room generation the ticket was issued in.
    pub generation: u32,
}

/// Why a ticket token was rejected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TicketTokenError {
    /// Not a ticket token, or its MAC does not match: forged, altered or garbage.
    #[error("invalid ticket token")]
    Invalid,
    /// A genuine ticket token for another room.
    #[error("ticket token is for another room")]
    WrongRoom,
}

/// Signs and verifies ticket tokens with HMAC-SHA256.
///
/// ```
/// use anteroom_token::{TicketClaims, TicketSigner, TicketTokenError};
///
/// let signer = TicketSigner::from_secret([7; 32]);
/// let claims = TicketClaims {
///     room: "launch".into(),
///     ticket_id: "AAAAAAAAAAAAAAAAAAAA-_".into(),
///     position: 42,
///     generation: 1,
/// };
/// let token = signer.sign(&claims);
/// assert!(token.starts_with("t1.launch.AAAAAAAAAAAAAAAAAAAA-_.42.1."));
/// let now = 1_700_000_000;
/// assert_eq!(signer.verify(&token, "launch", now), Ok(claims));
/// assert_eq!(signer.verify(&token, "other", now), Err(TicketTokenError::WrongRoom));
/// ```
///
/// The signer of a [`KeySet`](crate::KeySet) signs with the directory's current ticket
/// secret and verifies with it and every retired secret until that one's drop time.
#[derive(Clone)]
pub struct TicketSigner {
    keys: MacKeys,
}

impl TicketSigner {
    /// A signer using `secret` as the HMAC key: the original secret, alone.
    pub fn from_secret(secret: [u8; 32]) -> TicketSigner {
        TicketSigner::from_secrets(&TicketSecrets::original(secret))
    }

    pub(crate) fn from_secrets(secrets: &TicketSecrets) -> TicketSigner {
        TicketSigner {
            keys: MacKeys::new(secrets, |secret| secret),
        }
    }

    /// The ticket token for `claims`.
    ///
    /// `claims.room` and `claims.ticket_id` must not contain `.`; room and ticket ids as
    /// the rest of anteroom makes them never do.
    pub fn sign(&self, claims: &TicketClaims) -> String {
        self.sign_fields(
            &claims.room,
            &claims.ticket_id,
            claims.position,
            claims.generation,
        )
    }

    /// [`sign`](Self::sign) from the fields themselves, so a caller holding typed ids signs
    /// without building owned claims first (every join and status answer signs one).
    pub fn sign_fields(
        &self,
        room: &str,
        ticket_id: &str,
        position: u64,
        generation: u32,
    ) -> String {
        // Pieces pushed one by one: every join and status answer signs a token, and the
        // formatting machinery cost more than the fields themselves.
        let key = self.keys.signing();
        let mut token = String::with_capacity(TOKEN_CAPACITY);
        VERSIONS.push_prefix(&mut token, key.id());
        token.push_str(room);
        token.push('.');
        token.push_str(ticket_id);
        token.push('.');
        push_decimal(&mut token, position);
        token.push('.');
        push_decimal(&mut token, u64::from(generation));
        key.push_mac(&mut token);
        token
    }

    /// Checks `token`'s MAC (in constant time) with the secret it names, that this secret
    /// still verifies at `now_secs`, and that the token was issued for `room`.
    pub fn verify(
        &self,
        token: &str,
        room: &str,
        now_secs: u64,
    ) -> Result<TicketClaims, TicketTokenError> {
        if token.len() > MAX_TOKEN_LEN {
            return Err(TicketTokenError::Invalid);
        }
        let fields = self
            .keys
            .open(&VERSIONS, token, now_secs)
            .ok_or(TicketTokenError::Invalid)?;
        // The MAC is genuine, so the fields are as this signer wrote them; parse them anyway
        // rather than trust that no other format ever shared the secret.
        let claims = parse_fields(fields).ok_or(TicketTokenError::Invalid)?;
        if claims.room != room {
            return Err(TicketTokenError::WrongRoom);
        }
        Ok(claims)
    }

    /// The keys sealed values are made and opened with (`oidc.rs`).
    pub(crate) fn keys(&self) -> &MacKeys {
        &self.keys
    }
}

impl fmt::Debug for TicketSigner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TicketSigner")
            .field("secret", &"[redacted]")
            .finish()
    }
}

/// Appends `value` in decimal, as `Display` writes it (without the formatting machinery).
fn push_decimal(out: &mut String, value: u64) {
    out.push_str(itoa::Buffer::new().format(value));
}

/// Reads `<room>.<ticket_id>.<position>.<generation>`.
fn parse_fields(fields: &str) -> Option<TicketClaims> {
    let [room, ticket_id, position, generation] = four_fields(fields)?;
    Some(TicketClaims {
        room: room.to_owned(),
        ticket_id: ticket_id.to_owned(),
        position: parse_decimal(position)?,
        generation: parse_decimal(generation)?,
    })
}

/// Parses a canonical unsigned decimal (digits only, no sign, no leading zero).
fn parse_decimal<T: std::str::FromStr>(text: &str) -> Option<T> {
    let canonical = !text.is_empty()
        && text.bytes().all(|byte| byte.is_ascii_digit())
        && (text == "0" || !text.starts_with('0'));
    if canonical { text.parse().ok() } else { None }
}

#[cfg(test)]
mod tests;
