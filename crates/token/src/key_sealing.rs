//! Sealing key-set entries with a key-encryption key, for a store shared by nodes that should
//! not hold signing keys in plain text (Redis, its backups, its replicas).
//!
//! Each entry is sealed on its own with AES-256-GCM under a fresh random 96-bit nonce, and the
//! entry's name is authenticated with it: an entry moved to another name, changed, or sealed
//! under another key does not open. A sealed entry is `k1.` and the unpadded base64url of
//! nonce, ciphertext and tag.

use aes_gcm::aead::{Aead as _, Payload};
use aes_gcm::{Aes256Gcm, KeyInit as _, Nonce};
use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};

use crate::TokenError;

/// The version tag of a sealed entry.
const SEALED_PREFIX: &str = "k1.";
/// Bytes of an AES-GCM nonce.
const NONCE_LEN: usize = 12;
/// Bytes of a key-encryption key.
const KEK_LEN: usize = 32;
/// Binds a sealed entry to its use and name (the associated data).
const CONTEXT: &str = "anteroom key entry v1:";

/// The key that seals the entries of a shared key set.
///
/// ```
/// use anteroom_token::KeyEncryptionKey;
///
/// let kek = KeyEncryptionKey::from_text(&"ab".repeat(32)).unwrap();
/// let sealed = kek.seal("active", "kid1\n");
/// assert!(!sealed.contains("kid1"));
/// assert_eq!(kek.open("active", &sealed).unwrap(), "kid1\n");
/// // Sealed for one name, it does not open as another.
/// assert!(kek.open("ticket.active", &sealed).is_err());
/// ```
pub struct KeyEncryptionKey {
    cipher: Aes256Gcm,
}

impl KeyEncryptionKey {
    /// A key from its text form: 32 bytes as 64 hex digits or in base64 (standard or
    /// url-safe, padded or not), surrounding whitespace ignored, as
    /// `openssl rand -base64 32` or `openssl rand -hex 32` print it.
    pub fn from_text(text: &str) -> Result<KeyEncryptionKey, TokenError> {
        let text = text.trim();
        let bytes = decode_hex(text)
            .or_else(|| {
                [&STANDARD, &STANDARD_NO_PAD, &URL_SAFE, &URL_SAFE_NO_PAD]
                    .into_iter()
                    .find_map(|engine| engine.decode(text).ok())
            })
            .ok_or_else(|| {
                TokenError::KeyEncryptionKey("neither hex nor base64 (of 32 bytes)".into())
            })?;
        if bytes.len() != KEK_LEN {
            return Err(TokenError::KeyEncryptionKey(format!(
                "{} bytes, not {KEK_LEN}",
                bytes.len()
            )));
        }
        let cipher = Aes256Gcm::new_from_slice(&bytes)
            .map_err(|_| TokenError::KeyEncryptionKey(format!("not {KEK_LEN} bytes")))?;
        Ok(KeyEncryptionKey { cipher })
    }

    /// `text` sealed as entry `name`.
    pub fn seal(&self, name: &str, text: &str) -> String {
        let nonce_bytes: [u8; NONCE_LEN] = rand::random();
        let associated = associated_data(name);
        let payload = Payload {
            msg: text.as_bytes(),
            aad: &associated,
        };
        // AES-GCM fails only for messages past 64 GiB; key entries are a few kilobytes.
        let sealed = self
            .cipher
            .encrypt(&Nonce::from(nonce_bytes), payload)
            .unwrap_or_default();
        let mut bytes = Vec::with_capacity(NONCE_LEN + sealed.len());
        bytes.extend_from_slice(&nonce_bytes);
        bytes.extend_from_slice(&sealed);
        format!("{SEALED_PREFIX}{}", URL_SAFE_NO_PAD.encode(bytes))
    }

    /// The text of entry `name` sealed as `sealed`; an error when it was sealed under another
    /// key or for another name, changed, or is not a sealed entry at all.
    pub fn open(&self, name: &str, sealed: &str) -> Result<String, TokenError> {
        let unopenable = || TokenError::Unsealable {
            entry: name.to_owned(),
        };
        let bytes = sealed
            .strip_prefix(SEALED_PREFIX)
            .and_then(|encoded| URL_SAFE_NO_PAD.decode(encoded).ok())
            .filter(|bytes| bytes.len() > NONCE_LEN)
            .ok_or_else(unopenable)?;
        let (nonce, ciphertext) = bytes.split_at(NONCE_LEN);
        let nonce: [u8; NONCE_LEN] = nonce.try_into().map_err(|_| unopenable())?;
        let associated = associated_data(name);
        let payload = Payload {
            msg: ciphertext,
            aad: &associated,
        };
        let text = self
            .cipher
            .decrypt(&Nonce::from(nonce), payload)
            .map_err(|_| unopenable())?;
        String::from_utf8(text).map_err(|_| unopenable())
    }
}

impl std::fmt::Debug for KeyEncryptionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeyEncryptionKey(..)")
    }
}

fn associated_data(name: &str) -> Vec<u8> {
    format!("{CONTEXT}{name}").into_bytes()
}

fn decode_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) || !text.bytes().all(|byte| byte.is_ascii_hexdigit()) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|at| u8::from_str_radix(&text[at..at + 2], 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kek(byte: u8) -> KeyEncryptionKey {
        KeyEncryptionKey::from_text(&STANDARD.encode([byte; KEK_LEN])).expect("kek")
    }

    #[test]
    fn text_forms_of_a_key() {
        let hex = "0f".repeat(32);
        let sealed = KeyEncryptionKey::from_text(&hex)
            .expect("hex")
            .seal("a", "x");
        for text in [
            format!("{}\n", STANDARD.encode([0x0f; 32])),
            URL_SAFE_NO_PAD.encode([0x0f; 32]),
            hex.to_uppercase(),
        ] {
            let kek = KeyEncryptionKey::from_text(&text).expect("decodes");
            assert_eq!(kek.open("a", &sealed).expect("same key"), "x", "{text}");
        }
        for bad in ["", "short", &"ab".repeat(31), &STANDARD.encode([1; 16])] {
            let error = KeyEncryptionKey::from_text(bad).expect_err("refused");
            assert!(matches!(error, TokenError::KeyEncryptionKey(_)), "{bad}");
        }
    }

    #[test]
    fn sealed_entries_hide_and_bind_their_text() {
        let sealer = kek(1);
        let sealed = sealer.seal("k.eddsa.pem", "-----BEGIN PRIVATE KEY-----");
        assert!(sealed.starts_with(SEALED_PREFIX));
        assert!(!sealed.contains("PRIVATE"));
        assert_ne!(
            sealed,
            sealer.seal("k.eddsa.pem", "-----BEGIN PRIVATE KEY-----")
        );
        assert_eq!(
            sealer.open("k.eddsa.pem", &sealed).expect("opens"),
            "-----BEGIN PRIVATE KEY-----"
        );
        let refused = |name: &str, text: &str, key: &KeyEncryptionKey| {
            matches!(key.open(name, text), Err(TokenError::Unsealable { .. }))
        };
        assert!(refused("other", &sealed, &sealer), "another name");
        assert!(refused("k.eddsa.pem", &sealed, &kek(2)), "another key");
        let mut flipped = sealed.clone().into_bytes();
        let last = flipped.len() - 2;
        flipped[last] = if flipped[last] == b'A' { b'B' } else { b'A' };
        let flipped = String::from_utf8(flipped).expect("ascii");
        assert!(refused("k.eddsa.pem", &flipped, &sealer), "changed");
        for junk in ["", "k1.", "k1.AAAA", "plain text", "k2.abc"] {
            assert!(refused("k.eddsa.pem", junk, &sealer), "{junk:?}");
        }
    }
}
