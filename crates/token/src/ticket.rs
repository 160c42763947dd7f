//! Ticket tokens: a waiting visitor's place in a queue, bound to its room by a MAC.
//!
//! A ticket token is `t1.<room>.<ticket_id>.<position>.<generation>.<mac>`, where `mac` is the
//! unpadded base64url HMAC-SHA256 of everything before the last `.` under the key directory's
//! ticket secret. Room ids (`[a-z0-9][a-z0-9-]{0,63}`) and ticket ids (base64url) hold no `.`,
//! so the token is made only of `[A-Za-z0-9._-]` and can travel as a cookie, header or query
//! parameter unescaped. The `t1` prefix versions the format. Ticket tokens carry no expiry:
//! the store decides whether a ticket is still live, and the generation lets a reset reject
//! old ones.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::digest::KeyInit;
use hmac::{Hmac, Mac as _};
use sha2::Sha256;
use subtle::ConstantTimeEq as _;

type HmacSha256 = Hmac<Sha256>;

/// The format version at the start of every ticket token.
const VERSION: &str = "t1";
/// Longest ticket token accepted; far above any well-formed one (about 180 bytes).
const MAX_TOKEN_LEN: usize = 512;
/// Room up to 64 bytes, id 22, two numbers and the 43-byte MAC fit without growing.
const TOKEN_CAPACITY: usize = 192;
/// Length of the MAC in unpadded base64url: 32 bytes make 43 characters.
const MAC_TEXT_LEN: usize = 43;

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
/// assert_eq!(signer.verify(&token, "launch"), Ok(claims));
/// assert_eq!(signer.verify(&token, "other"), Err(TicketTokenError::WrongRoom));
/// ```
#[derive(Clone)]
pub struct TicketSigner {
    /// HMAC state with the key already absorbed; cloned for each token.
    keyed: HmacSha256,
}

impl TicketSigner {
    /// A signer using `secret` as the HMAC key.
    pub fn from_secret(secret: [u8; 32]) -> TicketSigner {
        // HMAC zero-pads keys shorter than the hash block to the block size, so keying with
        // the padded block is HMAC with `secret` itself, and cannot fail.
        let mut block = [0u8; 64];
        block[..secret.len()].copy_from_slice(&secret);
        TicketSigner {
            keyed: <HmacSha256 as KeyInit>::new(&block.into()),
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
        let mut token = String::with_capacity(TOKEN_CAPACITY);
        token.push_str(VERSION);
        token.push('.');
        token.push_str(room);
        token.push('.');
        token.push_str(ticket_id);
        token.push('.');
        push_decimal(&mut token, position);
        token.push('.');
        push_decimal(&mut token, u64::from(generation));
        let mac = self.mac(token.as_bytes());
        token.push('.');
        let mut encoded = [0u8; MAC_TEXT_LEN];
        if let Ok(written) = URL_SAFE_NO_PAD.encode_slice(mac, &mut encoded)
            && let Ok(text) = std::str::from_utf8(&encoded[..written])
        {
            token.push_str(text);
        }
        token
    }

    /// Checks `token`'s MAC (in constant time) and that it was issued for `room`.
    pub fn verify(&self, token: &str, room: &str) -> Result<TicketClaims, TicketTokenError> {
        if token.len() > MAX_TOKEN_LEN {
            return Err(TicketTokenError::Invalid);
        }
        let (signed, mac) = token.rsplit_once('.').ok_or(TicketTokenError::Invalid)?;
        let mac = URL_SAFE_NO_PAD
            .decode(mac)
            .map_err(|_| TicketTokenError::Invalid)?;
        let expected = self.mac(signed.as_bytes());
        if !bool::from(expected.as_slice().ct_eq(&mac)) {
            return Err(TicketTokenError::Invalid);
        }
        // The MAC is genuine, so the fields are as this signer wrote them; parse them anyway
        // rather than trust that no other format ever shared the secret.
        let claims = parse_fields(signed).ok_or(TicketTokenError::Invalid)?;
        if claims.room != room {
            return Err(TicketTokenError::WrongRoom);
        }
        Ok(claims)
    }

    pub(crate) fn mac(&self, message: &[u8]) -> [u8; 32] {
        let mut mac = self.keyed.clone();
        mac.update(message);
        mac.finalize().into_bytes().into()
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

/// Reads `t1.<room>.<ticket_id>.<position>.<generation>`.
fn parse_fields(signed: &str) -> Option<TicketClaims> {
    let mut fields = signed.split('.');
    let (Some(VERSION), Some(room), Some(ticket_id), Some(position), Some(generation), None) = (
        fields.next(),
        fields.next(),
        fields.next(),
        fields.next(),
        fields.next(),
        fields.next(),
    ) else {
        return None;
    };
    if room.is_empty() || ticket_id.is_empty() {
        return None;
    }
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
