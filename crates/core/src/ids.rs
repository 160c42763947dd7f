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

            /// The id as text (what `Display` writes), on the stack: ids are written into
            /// every ticket token and answer.
            pub fn to_text(self) -> IdText {
                IdText::encode(self.0)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.to_text().as_str())
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

/// A ticket or session id as its 22 base64url characters, held on the stack.
#[derive(Clone, Copy)]
pub struct IdText {
    bytes: [u8; 22],
    len: usize,
}

impl IdText {
    fn encode(id: [u8; 16]) -> IdText {
        let mut bytes = [0u8; 22];
        // 16 bytes always take 22 characters, so the slice is never too short.
        let len = URL_SAFE_NO_PAD.encode_slice(id, &mut bytes).unwrap_or(0);
        IdText { bytes, len }
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.bytes[..self.len]).unwrap_or_default()
    }
}

/// Builds the hasher of the engine's maps keyed by ticket and session ids.
///
/// The ids are 128 bits from the store's generator, never chosen by a client (a client names
/// a ticket only through a token signed by anteroom), so they are uniform already: a multiply
/// per word spreads them over the table, and SipHash's defence against chosen keys buys
/// nothing here. Not for keys a client picks (identities, room ids).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RandomIdHash;

impl std::hash::BuildHasher for RandomIdHash {
    type Hasher = RandomIdHasher;

    fn build_hasher(&self) -> RandomIdHasher {
        RandomIdHasher(0)
    }
}

/// The hasher of [`RandomIdHash`].
#[derive(Debug)]
pub(crate) struct RandomIdHasher(u64);

impl std::hash::Hasher for RandomIdHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for word in &mut words {
            if let Ok(word) = <[u8; 8]>::try_from(word) {
                self.write_u64(u64::from_le_bytes(word));
            }
        }
        let rest = words.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            for (to, from) in word.iter_mut().zip(rest) {
                *to = *from;
            }
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    fn write_u64(&mut self, word: u64) {
        // Fx's step (rotate, xor, multiply by an odd constant).
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn write_usize(&mut self, word: usize) {
        self.write_u64(word as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
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
    fn random_ids_spread_over_a_table() {
        use std::hash::BuildHasher as _;
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        let mut buckets = [0u32; 64];
        for _ in 0..64_000 {
            let hash = RandomIdHash.hash_one(TicketId::random(&mut rng));
            // hashbrown picks the bucket from the low bits and the tag from the top seven.
            buckets[(hash % 64) as usize] += 1;
            buckets[(hash >> 58) as usize] += 1;
        }
        let (least, most) = (buckets.iter().min(), buckets.iter().max());
        assert!(
            least.is_some_and(|&n| n > 1_700) && most.is_some_and(|&n| n < 2_300),
            "{buckets:?}"
        );
    }

    #[test]
    fn ticket_ids_round_trip_as_text() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let id = TicketId::random(&mut rng);
        let text = id.to_string();
        assert_eq!(text.len(), 22);
        assert_eq!(text, URL_SAFE_NO_PAD.encode(id.to_bytes()));
        assert_eq!(text.parse::<TicketId>(), Ok(id));
        assert_eq!("short".parse::<TicketId>(), Err(IdError));
        assert_eq!("!!!!!!!!!!!!!!!!!!!!!!".parse::<TicketId>(), Err(IdError));
    }
}
