//! The layout of a key directory: the names of its entries and what each holds, and listing
//! a [`KeyStorage`] by that layout.
//!
//! See the crate documentation for the layout itself.

use std::collections::BTreeMap;

use crate::storage::KeyStorage;
use crate::ticket_secrets::{SecretId, TicketSecret, TicketSecrets};
use crate::{SigningAlgorithm, TokenError, keys};

/// The file naming the active key id.
pub(crate) const ACTIVE_FILE: &str = "active";
/// The file holding the original ticket secret.
pub(crate) const TICKET_KEY_FILE: &str = "ticket.key";
/// The file naming the ticket secret that signs, when a rotation made it.
pub(crate) const TICKET_ACTIVE_FILE: &str = "ticket.active";
/// The suffix of a retirement record, `<kid>.retired`.
const RETIRED_SUFFIX: &str = ".retired";
/// The start of every ticket secret file name.
const TICKET_PREFIX: &str = "ticket";
/// The suffix of a ticket secret file, `ticket.key` or `ticket.<id>.key`.
const TICKET_SECRET_SUFFIX: &str = ".key";
/// The suffix of a ticket secret's drop record, `ticket.expires` or `ticket.<id>.expires`.
const TICKET_DROP_SUFFIX: &str = ".expires";

/// A signing key file found in the directory (not yet parsed).
#[derive(Debug)]
pub(crate) struct KeyFile {
    pub(crate) kid: String,
    pub(crate) algorithm: SigningAlgorithm,
    pub(crate) name: String,
}

/// What a key directory holds, by file name; key contents are not read.
#[derive(Debug, Default)]
pub(crate) struct Listing {
    /// Signing key files, sorted by kid.
    pub(crate) keys: Vec<KeyFile>,
    /// Retirement records: kid → (retired at, record name).
    pub(crate) retired: BTreeMap<String, (u64, String)>,
    /// The kid named by the `active` file, when there is one.
    pub(crate) active: Option<String>,
    /// Ticket secrets: id → secret.
    pub(crate) ticket_secrets: BTreeMap<SecretId, [u8; keys::SECRET_LEN]>,
    /// The id named by `ticket.active`, when there is one.
    pub(crate) ticket_active: Option<String>,
    /// Drop records of retired ticket secrets: id → (drop time, record name).
    pub(crate) ticket_drops: BTreeMap<SecretId, (u64, String)>,
}

impl Listing {
    /// The key that signs: the one the `active` file names or, when that file is missing
    /// (a crash before it was first written), the only key without a retirement record.
    pub(crate) fn active_kid(&self, dir: &(impl KeyStorage + ?Sized)) -> Result<&str, TokenError> {
        if let Some(kid) = &self.active {
            return match self.keys.iter().find(|key| &key.kid == kid) {
                Some(key) => Ok(&key.kid),
                None => Err(TokenError::corrupt(
                    dir.location(ACTIVE_FILE),
                    format!("names key {kid:?}, which has no key file"),
                )),
            };
        }
        let mut live = self
            .keys
            .iter()
            .filter(|key| !self.retired.contains_key(&key.kid));
        match (live.next(), live.next()) {
            (Some(key), None) => Ok(&key.kid),
            _ if self.keys.is_empty() => Err(TokenError::NoSigningKey {
                dir: dir.location(""),
            }),
            _ => Err(TokenError::NoActiveKey {
                dir: dir.location(""),
            }),
        }
    }

    pub(crate) fn has_kid(&self, kid: &str) -> bool {
        self.keys.iter().any(|key| key.kid == kid)
    }

    /// The ticket secret that signs, by name: the one `ticket.active` names, else the
    /// original. Whether its file exists is [`Listing::ticket_secrets`]' concern.
    pub(crate) fn signing_ticket_secret(&self) -> SecretId {
        match &self.ticket_active {
            Some(id) => SecretId::Named(id.clone()),
            None => SecretId::Original,
        }
    }

    /// The ticket secret that signs and every retired one with a drop record. A secret that
    /// neither signs nor has a record never signed anything (a rotation writes the retiring
    /// secret's record before it switches), so it is left out.
    pub(crate) fn ticket_secrets(
        &self,
        dir: &(impl KeyStorage + ?Sized),
    ) -> Result<TicketSecrets, TokenError> {
        let signing_id = self.signing_ticket_secret();
        let Some(signing) = self.ticket_secrets.get(&signing_id) else {
            return Err(match signing_id {
                SecretId::Original => TokenError::MissingTicketKey {
                    path: dir.location(TICKET_KEY_FILE),
                },
                SecretId::Named(id) => TokenError::corrupt(
                    dir.location(TICKET_ACTIVE_FILE),
                    format!("names ticket secret {id:?}, which has no file"),
                ),
            });
        };
        let retired = self
            .ticket_secrets
            .iter()
            .filter(|(id, _)| **id != signing_id)
            .filter_map(|(id, bytes)| {
                let (drop_at, _) = self.ticket_drops.get(id)?;
                let secret = TicketSecret {
                    id: id.clone(),
                    bytes: *bytes,
                };
                Some((secret, *drop_at))
            })
            .collect();
        Ok(TicketSecrets {
            signing: TicketSecret {
                id: signing_id,
                bytes: *signing,
            },
            retired,
        })
    }
}

/// Lists `dir`. Entries it does not own (other names) are ignored; entries it owns with an
/// unusable name or content are errors naming the entry.
pub(crate) fn list(dir: &(impl KeyStorage + ?Sized)) -> Result<Listing, TokenError> {
    let mut listing = Listing::default();
    for name in dir.names()? {
        let entry = Entry { dir, name: &name };
        if name == ACTIVE_FILE {
            let text = dir.read(&name)?;
            let kid = text.trim();
            if !is_valid_kid(kid) {
                return Err(entry.corrupt("does not hold a key id"));
            }
            listing.active = Some(kid.to_owned());
        } else if name == TICKET_ACTIVE_FILE {
            let text = dir.read(&name)?;
            let id = text.trim();
            if !is_valid_kid(id) {
                return Err(entry.corrupt("does not hold a ticket secret id"));
            }
            listing.ticket_active = Some(id.to_owned());
        } else if let Some(kid) = name.strip_suffix(RETIRED_SUFFIX) {
            entry.check_kid(kid)?;
            let retired_at = entry.read_unix_time()?;
            listing
                .retired
                .insert(kid.to_owned(), (retired_at, name.clone()));
        } else if let Some((kid, algorithm)) = parse_key_file_name(&name) {
            entry.check_kid(kid)?;
            if listing.has_kid(kid) {
                return Err(entry.corrupt(format!("another key file has the same key id {kid:?}")));
            }
            listing.keys.push(KeyFile {
                kid: kid.to_owned(),
                algorithm,
                name: name.clone(),
            });
        } else if let Some(id) = entry.ticket_file_id(TICKET_SECRET_SUFFIX)? {
            listing
                .ticket_secrets
                .insert(id, entry.read_ticket_secret()?);
        } else if let Some(id) = entry.ticket_file_id(TICKET_DROP_SUFFIX)? {
            let drop_at = entry.read_unix_time()?;
            listing.ticket_drops.insert(id, (drop_at, name.clone()));
        }
    }
    listing.keys.sort_by(|a, b| a.kid.cmp(&b.kid));
    Ok(listing)
}

/// The file name of key `kid` of `algorithm`.
pub(crate) fn key_file_name(kid: &str, algorithm: SigningAlgorithm) -> String {
    let extension = match algorithm {
        SigningAlgorithm::Hs256 => "key",
        _ => "pem",
    };
    format!("{kid}.{}.{extension}", algorithm.file_tag())
}

/// The file name of the retirement record of key `kid`.
pub(crate) fn retired_file_name(kid: &str) -> String {
    format!("{kid}{RETIRED_SUFFIX}")
}

/// The file name of ticket secret `id`.
pub(crate) fn ticket_secret_file_name(id: &SecretId) -> String {
    ticket_file_name(id, TICKET_SECRET_SUFFIX)
}

/// The file name of the drop record of ticket secret `id`.
pub(crate) fn ticket_drop_file_name(id: &SecretId) -> String {
    ticket_file_name(id, TICKET_DROP_SUFFIX)
}

fn ticket_file_name(id: &SecretId, suffix: &str) -> String {
    match id {
        SecretId::Original => format!("{TICKET_PREFIX}{suffix}"),
        SecretId::Named(id) => format!("{TICKET_PREFIX}.{id}{suffix}"),
    }
}

/// Whether `kid` can be a key id: 1 to 64 base64url characters.
pub(crate) fn is_valid_kid(kid: &str) -> bool {
    !kid.is_empty()
        && kid.len() <= 64
        && kid
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_')
}

/// One entry of a storage being listed: reads it and names it in errors.
struct Entry<'a, S: KeyStorage + ?Sized> {
    dir: &'a S,
    name: &'a str,
}

impl<S: KeyStorage + ?Sized> Entry<'_, S> {
    fn corrupt(&self, reason: impl Into<String>) -> TokenError {
        TokenError::corrupt(self.dir.location(self.name), reason)
    }

    /// The ticket secret an entry named `ticket<suffix>` or `ticket.<id><suffix>` belongs
    /// to; `None` for other names, an error for a malformed id.
    fn ticket_file_id(&self, suffix: &str) -> Result<Option<SecretId>, TokenError> {
        let Some(middle) = self
            .name
            .strip_prefix(TICKET_PREFIX)
            .and_then(|rest| rest.strip_suffix(suffix))
        else {
            return Ok(None);
        };
        if middle.is_empty() {
            return Ok(Some(SecretId::Original));
        }
        let Some(id) = middle.strip_prefix('.') else {
            return Ok(None);
        };
        if !is_valid_kid(id) {
            return Err(self.corrupt(
                "file name does not hold a ticket secret id of 1 to 64 base64url characters",
            ));
        }
        Ok(Some(SecretId::Named(id.to_owned())))
    }

    fn read_ticket_secret(&self) -> Result<[u8; keys::SECRET_LEN], TokenError> {
        let text = self.dir.read(self.name)?;
        let secret = keys::decode_secret(&text).map_err(|reason| self.corrupt(reason))?;
        secret.try_into().map_err(|secret: Vec<u8>| {
            self.corrupt(format!(
                "ticket secret has {} bytes, not {}",
                secret.len(),
                keys::SECRET_LEN
            ))
        })
    }

    fn read_unix_time(&self) -> Result<u64, TokenError> {
        self.dir
            .read(self.name)?
            .trim()
            .parse::<u64>()
            .map_err(|_| self.corrupt("does not hold a unix time"))
    }

    fn check_kid(&self, kid: &str) -> Result<(), TokenError> {
        if is_valid_kid(kid) {
            Ok(())
        } else {
            Err(self
                .corrupt("file name does not start with a key id of 1 to 64 base64url characters"))
        }
    }
}

/// Splits `<kid>.<alg>.pem` / `<kid>.hs256.key` into kid and algorithm.
fn parse_key_file_name(name: &str) -> Option<(&str, SigningAlgorithm)> {
    SigningAlgorithm::ALL.into_iter().find_map(|algorithm| {
        let suffix = key_file_name("", algorithm);
        name.strip_suffix(suffix.as_str())
            .map(|kid| (kid, algorithm))
    })
}
