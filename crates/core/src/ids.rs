//! Identifiers: validated room ids, and random 128-bit ticket and session ids written as
//! base64url without padding.

use std::fmt;
use std::str::FromStr;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rand::Rng;

/// A room id: `[a-z0-9][a-z0-9-]{0,63}`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RoomId(String);

/// Why a room id was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid room id {0:?}: use 1-64 characters of a-z, 0-9 and '-', starting with a letter or digit"
)]
pub struct RoomIdError(pub String);

impl RoomId {
    /// Validates `text` as a room id.
    pub fn new(text: &str) -> Result<RoomId, RoomIdError> {
        let bytes = text.as_bytes();
        let valid_char = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-';
        let valid = !bytes.is_empty()
            && bytes.len() <= 64
            && bytes[0] != b'-'
            && bytes.iter().all(valid_char);
        if valid {
            Ok(RoomId(text.to_owned()))
        } else {
            Err(RoomIdError(text.to_owned()))
        }
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for RoomId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for RoomId {
    type Err = RoomIdError;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        RoomId::new(text)
    }
}

/// Why a ticket or session id was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid id: expected 22 base64url characters")]
pub struct IdError;

macro_rules! random_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name([u8; 16]);

        impl $name {
            /// A fresh id from `rng` (callers pass a cryptographically secure generator).
            pub fn random(rng: &mut impl Rng) -> Self {
                $name(rng.r#gen())
            }

            /// The id's raw bytes.
            pub fn to_bytes(self) -> [u8; 16] {
                self.0
            }

            /// An id from its raw bytes.
            pub fn from_bytes(bytes: [u8; 16]) -> Self {
                $name(bytes)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&URL_SAFE_NO_PAD.encode(self.0))
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({})", stringify!($name), self)
            }
        }

        impl FromStr for $name {
            type Err = IdError;
            fn from_str(text: &str) -> Result<Self, Self::Err> {
                if text.len() != 22 {
                    return Err(IdError);
                }
                let decoded = URL_SAFE_NO_PAD.decode(text).map_err(|_| IdError)?;
                let bytes: [u8; 16] = decoded.try_into().map_err(|_| IdError)?;
                Ok($name(bytes))
            }
        }
    };
}

random_id!(
    /// A ticket's id: 128 random bits.
    TicketId
);
random_id!(
    /// A session's id (also the pass's `sub` and `jti`): 128 random bits.
    SessionId
);

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn room_ids() {
        for good in ["a", "launch", "sale-2026", "0", &"x".repeat(64)] {
            assert!(RoomId::new(good).is_ok(), "{good}");
        }
        for bad in ["", "-a", "Launch", "a_b", "a/b", &"x".repeat(65), "é"] {
            assert!(RoomId::new(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn ticket_ids_round_trip_as_text() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let id = TicketId::random(&mut rng);
        let text = id.to_string();
        assert_eq!(text.len(), 22);
        assert_eq!(text.parse::<TicketId>(), Ok(id));
        assert_eq!("short".parse::<TicketId>(), Err(IdError));
        assert_eq!("!!!!!!!!!!!!!!!!!!!!!!".parse::<TicketId>(), Err(IdError));
    }
}
