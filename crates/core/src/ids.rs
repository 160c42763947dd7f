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

/// The hash of a room's ticket map: like [`RandomIdHash`] it takes the id's random bits as they
/// are, but arranged so that the slot a table of `2^slot_bits` slots picks (hashbrown takes
/// the low bits) is the top of the id's first eight bytes read big-endian: ids in their byte
/// order land in the table front to back. A restore inserts millions of tickets in that order
/// (the store's key order), so it fills the table as a stream instead of with a cache and TLB
/// miss at a random place per ticket. The other bits mix in the id's second half. A table grown
/// past its `slot_bits` takes one more bit (random as well) and spreads as evenly, only out of
/// order. Not for keys a client picks.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct IdOrderHash {
    slot_bits: u32,
}

impl IdOrderHash {
    /// For a map made with room for `capacity` entries: hashbrown gives it the next power of
    /// two above 8/7 of that in slots. (Were its rule another, only the order would be lost.)
    pub(crate) fn for_capacity(capacity: usize) -> IdOrderHash {
        let slots = (capacity.saturating_mul(8) / 7).max(1);
        IdOrderHash {
            slot_bits: slots
                .checked_next_power_of_two()
                .map_or(usize::BITS - 1, usize::trailing_zeros),
        }
    }
}

impl std::hash::BuildHasher for IdOrderHash {
    type Hasher = IdOrderHasher;

    fn build_hasher(&self) -> IdOrderHasher {
        IdOrderHasher {
            slot_bits: self.slot_bits,
            hash: 0,
        }
    }
}

/// The hasher of [`IdOrderHash`].
#[derive(Debug)]
pub(crate) struct IdOrderHasher {
    slot_bits: u32,
    hash: u64,
}

impl std::hash::Hasher for IdOrderHasher {
    fn write(&mut self, bytes: &[u8]) {
        let (Some(first), Some(second)) = (bytes.first_chunk::<8>(), bytes.get(8..16)) else {
            // Not an id: mixed in whole, in no particular order.
            let mut fallback = RandomIdHasher(self.hash);
            fallback.write(bytes);
            self.hash = fallback.finish();
            return;
        };
        let mut low = [0u8; 8];
        low.copy_from_slice(second);
        let top = u64::from_be_bytes(*first).rotate_left(self.slot_bits);
        let rest = u64::from_le_bytes(low)
            .checked_shl(self.slot_bits)
            .unwrap_or(0);
        self.hash ^= top ^ rest;
    }

    fn write_usize(&mut self, _length: usize) {
        // The length an array's bytes come after: always 16 for an id.
    }

    fn finish(&self) -> u64 {
        self.hash
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
    fn ids_in_byte_order_fill_a_table_front_to_back() {
        use std::collections::HashMap;
        use std::hash::BuildHasher as _;
        let mut rng = rand::rngs::StdRng::seed_from_u64(12);
        let mut ids: Vec<TicketId> = (0..50_000).map(|_| TicketId::random(&mut rng)).collect();
        ids.sort_unstable();
        let hash = IdOrderHash::for_capacity(ids.len());
        // The slots of hashbrown's table for 50,000: 57,142 rounded up.
        let slots = 65_536u64;
        assert_eq!(hash.slot_bits, 16);
        let picked: Vec<u64> = ids.iter().map(|id| hash.hash_one(id) % slots).collect();
        assert!(picked.is_sorted(), "slots follow the ids' order");
        let mut counts = [0u32; 64];
        for id in &ids {
            counts[(hash.hash_one(id) >> 58) as usize] += 1;
        }
        let (least, most) = (counts.iter().min(), counts.iter().max());
        assert!(
            least.is_some_and(|&n| n > 600) && most.is_some_and(|&n| n < 1_000),
            "the tag's bits spread: {counts:?}"
        );
        let mut map = HashMap::with_capacity_and_hasher(ids.len(), hash);
        for (index, id) in ids.iter().enumerate() {
            map.insert(*id, index);
        }
        assert!(ids.iter().enumerate().all(|(index, id)| map[id] == index));
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
