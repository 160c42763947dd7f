//! The ticket secrets: the one that makes new ticket tokens, challenges and sealed values, the
//! retired ones that keep verifying what they made until their drop time, and how a token
//! names the secret that made it.
//!
//! The key directory's first secret (`ticket.key`) is the *original* one: tokens it makes name
//! no secret (`t1.`, `c1.`, `s1.`), as every token did before secrets rotated, so tokens
//! issued before an upgrade keep verifying. A rotation adds a *named* secret (`ticket.<id>.key`)
//! whose tokens start with the other version tag and its id (`t2.<id>.`, `c2.<id>.`,
//! `s2.<id>.`). Verification reads the name and uses that one secret: it never tries several,
//! so a rotation costs the hot path nothing.
//!
//! A retired secret carries its drop time. Verification takes the caller's clock and refuses a
//! secret from that second on, so a secret stops verifying at the same moment on every node,
//! whether or not its file has been deleted yet (the key set deletes it at the next rotation,
//! prune or start).

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::digest::KeyInit;
use hmac::{Hmac, Mac as _};
use sha2::Sha256;
use subtle::ConstantTimeEq as _;

use crate::keys::SECRET_LEN;

type HmacSha256 = Hmac<Sha256>;

/// Which secret made a token.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum SecretId {
    /// `ticket.key`: its tokens name no secret.
    Original,
    /// `ticket.<id>.key`: its tokens carry the id.
    Named(String),
}

impl SecretId {
    /// Whether a token naming `name` (`None`: no name, the original secret) means this one.
    fn is_named(&self, name: Option<&str>) -> bool {
        match (self, name) {
            (SecretId::Original, None) => true,
            (SecretId::Named(id), Some(name)) => id == name,
            _ => false,
        }
    }
}

/// One ticket secret as the key directory holds it.
#[derive(Clone)]
pub(crate) struct TicketSecret {
    pub(crate) id: SecretId,
    pub(crate) bytes: [u8; SECRET_LEN],
}

/// The secret that signs and the retired ones that still verify, each with its drop time.
#[derive(Clone)]
pub(crate) struct TicketSecrets {
    pub(crate) signing: TicketSecret,
    /// Retired secrets and the Unix second from which each no longer verifies.
    pub(crate) retired: Vec<(TicketSecret, u64)>,
}

impl TicketSecrets {
    /// The original secret alone, signing.
    pub(crate) fn original(bytes: [u8; SECRET_LEN]) -> TicketSecrets {
        TicketSecrets {
            signing: TicketSecret {
                id: SecretId::Original,
                bytes,
            },
            retired: Vec::new(),
        }
    }
}

/// The version tags of one token format: one for tokens of the original secret, one for tokens
/// that name their secret.
pub(crate) struct Versions {
    pub(crate) original: &'static str,
    pub(crate) named: &'static str,
}

impl Versions {
    /// Appends the start of a token made with `id`: `<original>.` or `<named>.<id>.`.
    pub(crate) fn push_prefix(&self, out: &mut String, id: &SecretId) {
        match id {
            SecretId::Original => out.push_str(self.original),
            SecretId::Named(id) => {
                out.push_str(self.named);
                out.push('.');
                out.push_str(id);
            }
        }
        out.push('.');
    }

    /// Splits a token's start into the secret it names (`None`: the original) and the rest.
    pub(crate) fn split_prefix<'t>(&self, token: &'t str) -> Option<(Option<&'t str>, &'t str)> {
        let (version, rest) = token.split_once('.')?;
        if version == self.original {
            Some((None, rest))
        } else if version == self.named {
            let (id, rest) = rest.split_once('.')?;
            Some((Some(id), rest))
        } else {
            None
        }
    }
}

/// One secret keyed for one use: the HMAC state with its key absorbed, cloned per message.
#[derive(Clone)]
pub(crate) struct MacKey {
    id: SecretId,
    keyed: HmacSha256,
    /// From this Unix second on it no longer verifies; `None` for the signing key.
    drop_at: Option<u64>,
}

impl MacKey {
    fn new(id: SecretId, key: [u8; SECRET_LEN], drop_at: Option<u64>) -> MacKey {
        MacKey {
            id,
            keyed: keyed(key),
            drop_at,
        }
    }

    /// The secret this key was made from.
    pub(crate) fn id(&self) -> &SecretId {
        &self.id
    }

    /// HMAC-SHA256 of `message`.
    pub(crate) fn mac(&self, message: &[u8]) -> [u8; 32] {
        let mut mac = self.keyed.clone();
        mac.update(message);
        mac.finalize().into_bytes().into()
    }

    /// Ends a token: appends `.` and the MAC of everything written before it.
    pub(crate) fn push_mac(&self, token: &mut String) {
        let mac = self.mac(token.as_bytes());
        token.push('.');
        push_mac_text(token, &mac);
    }

    /// Whether `mac_text` is the unpadded base64url MAC of `message`, compared in constant time.
    pub(crate) fn verifies(&self, message: &[u8], mac_text: &str) -> bool {
        // A MAC of 32 bytes is exactly 43 characters; anything else cannot match. The decoder
        // refuses non-zero trailing bits, so no other text decodes to the same MAC.
        let mut presented = [0u8; MAC_TEXT_LEN];
        if mac_text.len() != MAC_TEXT_LEN
            || URL_SAFE_NO_PAD.decode_slice(mac_text, &mut presented) != Ok(32)
        {
            return false;
        }
        bool::from(self.mac(message).as_slice().ct_eq(&presented[..32]))
    }
}

/// Length of a MAC in unpadded base64url: 32 bytes make 43 characters.
const MAC_TEXT_LEN: usize = 43;

/// Appends `mac` in unpadded base64url (without the formatting machinery: every join and
/// status answer signs a token).
pub(crate) fn push_mac_text(out: &mut String, mac: &[u8; 32]) {
    let mut encoded = [0u8; MAC_TEXT_LEN];
    if let Ok(written) = URL_SAFE_NO_PAD.encode_slice(mac, &mut encoded)
        && let Ok(text) = std::str::from_utf8(&encoded[..written])
    {
        out.push_str(text);
    }
}

/// The four `.`-separated fields of a ticket token or a challenge, the first two (a room and
/// an id) not empty; `None` for any other count.
pub(crate) fn four_fields(fields: &str) -> Option<[&str; 4]> {
    let mut fields = fields.split('.');
    let (Some(room), Some(id), Some(third), Some(fourth), None) = (
        fields.next(),
        fields.next(),
        fields.next(),
        fields.next(),
        fields.next(),
    ) else {
        return None;
    };
    (!room.is_empty() && !id.is_empty()).then_some([room, id, third, fourth])
}

/// Every ticket secret keyed for one use, the signing one first.
#[derive(Clone)]
pub(crate) struct MacKeys {
    keys: Vec<MacKey>,
}

impl MacKeys {
    /// `secrets` keyed for a use whose key is `derive(secret)`.
    pub(crate) fn new(
        secrets: &TicketSecrets,
        derive: impl Fn([u8; SECRET_LEN]) -> [u8; SECRET_LEN],
    ) -> MacKeys {
        let signing = MacKey::new(
            secrets.signing.id.clone(),
            derive(secrets.signing.bytes),
            None,
        );
        let retired = secrets.retired.iter().map(|(secret, drop_at)| {
            MacKey::new(secret.id.clone(), derive(secret.bytes), Some(*drop_at))
        });
        MacKeys {
            keys: std::iter::once(signing).chain(retired).collect(),
        }
    }

    /// The key new tokens are made with.
    pub(crate) fn signing(&self) -> &MacKey {
        // `new` always puts the signing key first.
        &self.keys[0]
    }

    /// The fields of `token`, written `<version>[.<secret>].<fields>.<mac>` by
    /// [`MacKey::push_mac`], if the secret it names still verifies at `now_secs` and the MAC
    /// is genuine (compared in constant time); `None` for anything else.
    pub(crate) fn open<'t>(
        &self,
        versions: &Versions,
        token: &'t str,
        now_secs: u64,
    ) -> Option<&'t str> {
        let (signed, mac) = token.rsplit_once('.')?;
        let (secret, fields) = versions.split_prefix(signed)?;
        let key = self.verifying(secret, now_secs)?;
        key.verifies(signed.as_bytes(), mac).then_some(fields)
    }

    /// The key of the secret `name` names (`None`: the original), if it still verifies at
    /// `now_secs`.
    pub(crate) fn verifying(&self, name: Option<&str>, now_secs: u64) -> Option<&MacKey> {
        self.keys
            .iter()
            .find(|key| key.id.is_named(name))
            .filter(|key| key.drop_at.is_none_or(|drop_at| now_secs < drop_at))
    }
}

/// HMAC-SHA256 keyed with `key`. HMAC zero-pads keys shorter than the hash block to the block
/// size, so keying with the padded block is HMAC with `key` itself, and cannot fail.
pub(crate) fn keyed(key: [u8; SECRET_LEN]) -> HmacSha256 {
    let mut block = [0u8; 64];
    block[..key.len()].copy_from_slice(&key);
    <HmacSha256 as KeyInit>::new(&block.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    const TICKETS: Versions = Versions {
        original: "t1",
        named: "t2",
    };

    fn secrets() -> TicketSecrets {
        TicketSecrets {
            signing: TicketSecret {
                id: SecretId::Named("new".into()),
                bytes: [2; SECRET_LEN],
            },
            retired: vec![
                (
                    TicketSecret {
                        id: SecretId::Original,
                        bytes: [1; SECRET_LEN],
                    },
                    100,
                ),
                (
                    TicketSecret {
                        id: SecretId::Named("old".into()),
                        bytes: [3; SECRET_LEN],
                    },
                    50,
                ),
            ],
        }
    }

    #[test]
    fn prefixes_name_their_secret() {
        let mut original = String::new();
        TICKETS.push_prefix(&mut original, &SecretId::Original);
        assert_eq!(original, "t1.");
        let mut named = String::new();
        TICKETS.push_prefix(&mut named, &SecretId::Named("abc".into()));
        assert_eq!(named, "t2.abc.");
        assert_eq!(TICKETS.split_prefix("t1.room.x"), Some((None, "room.x")));
        assert_eq!(
            TICKETS.split_prefix("t2.abc.room.x"),
            Some((Some("abc"), "room.x"))
        );
        for foreign in ["t3.abc.room", "t2abc", "t2", "c1.room", ""] {
            assert_eq!(TICKETS.split_prefix(foreign), None, "{foreign:?}");
        }
    }

    #[test]
    fn retired_secrets_verify_until_their_drop_time() {
        let keys = MacKeys::new(&secrets(), |secret| secret);
        assert_eq!(keys.signing().id(), &SecretId::Named("new".into()));
        let verifies = |name: Option<&str>, now: u64| keys.verifying(name, now).is_some();
        assert!(
            verifies(Some("new"), u64::MAX),
            "the signing secret never drops"
        );
        assert!(verifies(None, 99) && !verifies(None, 100));
        assert!(verifies(Some("old"), 49) && !verifies(Some("old"), 50));
        assert!(!verifies(Some("unknown"), 0));
        assert!(!verifies(Some(""), 0));
    }

    #[test]
    fn each_key_checks_only_its_own_macs() {
        let keys = MacKeys::new(&secrets(), |secret| secret);
        let mut mac = String::new();
        push_mac_text(&mut mac, &keys.signing().mac(b"message"));
        assert_eq!(mac.len(), MAC_TEXT_LEN);
        assert!(keys.signing().verifies(b"message", &mac));
        assert!(!keys.signing().verifies(b"messagf", &mac));
        let original = keys.verifying(None, 0).expect("original verifies");
        assert!(!original.verifies(b"message", &mac));
        assert!(!keys.signing().verifies(b"message", &format!("{mac}A")));
        assert!(!keys.signing().verifies(b"message", &mac[..42]));
    }
}
