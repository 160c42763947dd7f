//! The proof of work a room may ask for before a join (SPEC §12).
//!
//! The server hands out a signed challenge (a short text; see `anteroom-token`), and the client
//! finds a `counter` such that SHA-256 of the challenge's bytes followed by the counter in
//! decimal ASCII starts with `difficulty` zero bits. Checking a solution costs one hash;
//! finding one costs about `2^difficulty` hashes (262,144 at the default 18).

use sha2::{Digest, Sha256};

/// The default difficulty (SPEC §12).
pub const DEFAULT_DIFFICULTY: u8 = 18;
/// The highest difficulty a room may ask for: about 2^32 hashes, hours in a browser.
pub const MAX_DIFFICULTY: u8 = 32;

/// A room's `challenge` setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProofOfWork {
    /// Leading zero bits asked for, 1..=[`MAX_DIFFICULTY`].
    pub difficulty: u8,
}

/// The number of leading zero bits of `digest`.
pub fn leading_zero_bits(digest: &[u8]) -> u32 {
    let mut bits = 0;
    for byte in digest {
        bits += byte.leading_zeros();
        if *byte != 0 {
            break;
        }
    }
    bits
}

/// SHA-256 of `challenge` followed by `counter` in decimal ASCII.
pub fn work_digest(challenge: &str, counter: u64) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(challenge.as_bytes());
    hasher.update(counter.to_string().as_bytes());
    hasher.finalize().into()
}

/// Whether `counter` solves `challenge` at `difficulty`.
///
/// ```
/// use anteroom_core::challenge::{solve, solves};
///
/// let counter = solve("c1.example", 8);
/// assert!(solves("c1.example", counter, 8));
/// assert!(!solves("c1.other", counter, 30));
/// ```
pub fn solves(challenge: &str, counter: u64, difficulty: u8) -> bool {
    leading_zero_bits(&work_digest(challenge, counter)) >= u32::from(difficulty)
}

/// The smallest counter that solves `challenge` at `difficulty`: what a client does, for
/// tests and load tools.
pub fn solve(challenge: &str, difficulty: u8) -> u64 {
    (0..u64::MAX)
        .find(|counter| solves(challenge, *counter, difficulty))
        .unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_leading_zero_bits() {
        assert_eq!(leading_zero_bits(&[0xff]), 0);
        assert_eq!(leading_zero_bits(&[0x00, 0x80]), 8);
        assert_eq!(leading_zero_bits(&[0x00, 0x00, 0x01]), 23);
        assert_eq!(leading_zero_bits(&[0x0f, 0x00]), 4);
        assert_eq!(leading_zero_bits(&[0; 4]), 32);
    }

    #[test]
    fn the_digest_is_sha256_of_challenge_then_decimal_counter() {
        // Challenge "ab" with counter 1 hashes the three bytes "ab1".
        let expected: [u8; 32] = Sha256::digest(b"ab1").into();
        assert_eq!(work_digest("ab", 1), expected);
    }

    #[test]
    fn solutions_meet_the_difficulty_and_others_do_not() {
        for difficulty in [1, 4, 12] {
            let counter = solve("c1.room.nonce", difficulty);
            assert!(solves("c1.room.nonce", counter, difficulty));
            assert!(
                (0..counter).all(|smaller| !solves("c1.room.nonce", smaller, difficulty)),
                "the smallest solution"
            );
        }
    }
}
