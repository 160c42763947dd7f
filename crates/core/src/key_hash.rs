//! SHA-256 hashes of API keys as written in `[auth]`: `"sha256:<64 hex digits>"`.

use std::fmt;
use std::str::FromStr;

/// The SHA-256 digest of an API key. The config holds digests, never keys; whoever checks a
/// presented key hashes it and compares the digests in constant time.
///
/// ```
/// use anteroom_core::config::KeyHash;
///
/// let text = format!("sha256:{}", "ab".repeat(32));
/// let hash: KeyHash = text.parse().expect("valid");
/// assert_eq!(hash.0, [0xab; 32]);
/// assert_eq!(hash.to_string(), text);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeyHash(pub [u8; 32]);

/// Why a key hash was refused.
///
/// The message does not repeat the text: a key written there by mistake must not reach the logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid key hash: expected \"sha256:\" followed by the 64 hex digits of the key's SHA-256 digest (the key itself does not belong in the config)"
)]
pub struct KeyHashError;

impl FromStr for KeyHash {
    type Err = KeyHashError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let hex = input.strip_prefix("sha256:").ok_or(KeyHashError)?;
        if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(KeyHashError);
        }
        let mut digest = [0u8; 32];
        for (byte, pair) in digest.iter_mut().zip(hex.as_bytes().chunks_exact(2)) {
            let pair = std::str::from_utf8(pair).map_err(|_| KeyHashError)?;
            *byte = u8::from_str_radix(pair, 16).map_err(|_| KeyHashError)?;
        }
        Ok(KeyHash(digest))
    }
}

impl fmt::Display for KeyHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("sha256:")?;
        self.0.iter().try_for_each(|byte| write!(f, "{byte:02x}"))
    }
}
