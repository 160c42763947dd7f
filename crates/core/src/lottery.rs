//! The pre-queue lottery of a scheduled sale (SPEC §5.3): the order a seed gives a cohort.
//!
//! The draw must be reproducible by anyone holding the recorded seed, and the Redis scripts
//! re-state it in Lua (`lua/rooms/room.lua`), so the algorithm is fixed here exactly:
//!
//! 1. The stream is ChaCha20 (20 rounds) keyed with the 32-byte seed, nonce (stream) 0,
//!    block counter starting at 0: the keystream's 32-bit little-endian words in order
//!    (`rand_chacha::ChaCha20Rng::from_seed(seed)` and `next_u32`).
//! 2. A number below `n` is drawn by rejection: take the next word `x`, reject it while
//!    `x >= 2^32 - (2^32 mod n)`, answer `x mod n`. Every answer is exactly equally likely.
//! 3. The cohort is listed in position order (join order) and shuffled by Fisher-Yates: for
//!    `i` from `n - 1` down to 1, draw `j` below `i + 1` and swap entries `i` and `j`.
//! 4. The cohort's positions, sorted, are handed out in the shuffled order: the first entry
//!    of the shuffled list gets the lowest position.

use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha20Rng;

/// A lottery seed: 32 bytes, drawn from a cryptographic generator when the draw happens.
pub type Seed = [u8; 32];

/// The shuffled order of a cohort of `n`: entry `k` is the index (in position order) of the
/// member who gets the `k`-th lowest position.
pub fn shuffled_order(seed: &Seed, n: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    let mut stream = ChaCha20Rng::from_seed(*seed);
    for i in (1..n).rev() {
        let j = below(&mut stream, i as u64 + 1) as usize;
        order.swap(i, j);
    }
    order
}

/// A uniform number below `n` (1 ≤ n ≤ 2^32) by rejection over 32-bit words.
fn below(stream: &mut ChaCha20Rng, n: u64) -> u64 {
    const SPAN: u64 = 1 << 32;
    let limit = SPAN - SPAN % n;
    loop {
        let word = u64::from(stream.next_u32());
        if word < limit {
            return word % n;
        }
    }
}

/// The seed as 64 lowercase hex digits (how it is recorded and shown). Written digit by digit:
/// a Redis node sends a seed with every join, and a `format!` per byte cost about 17,000
/// instructions a seed.
pub fn seed_to_hex(seed: &Seed) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut text = String::with_capacity(2 * seed.len());
    for byte in seed {
        text.push(char::from(DIGITS[usize::from(byte >> 4)]));
        text.push(char::from(DIGITS[usize::from(byte & 0x0f)]));
    }
    text
}

/// Reads a seed written by [`seed_to_hex`].
pub fn seed_from_hex(text: &str) -> Option<Seed> {
    if text.len() != 64 || !text.is_ascii() {
        return None;
    }
    let mut seed = [0u8; 32];
    for (index, byte) in seed.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[index * 2..index * 2 + 2], 16).ok()?;
    }
    Some(seed)
}

#[cfg(test)]
mod tests;
