//! The on-disk layout of a key directory: listing it, and writing and removing its files
//! atomically.
//!
//! See the crate documentation for the layout itself.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};

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
    pub(crate) path: PathBuf,
}

/// What a key directory holds, by file name; key contents are not read.
#[derive(Debug, Default)]
pub(crate) struct Listing {
    /// Signing key files, sorted by kid.
    pub(crate) keys: Vec<KeyFile>,
    /// Retirement records: kid → (retired at, record path).
    pub(crate) retired: BTreeMap<String, (u64, PathBuf)>,
    /// The kid named by the `active` file, when there is one.
    pub(crate) active: Option<String>,
    /// Ticket secrets: id → secret.
    pub(crate) ticket_secrets: BTreeMap<SecretId, [u8; keys::SECRET_LEN]>,
    /// The id named by `ticket.active`, when there is one.
    pub(crate) ticket_active: Option<String>,
    /// Drop records of retired ticket secrets: id → (drop time, record path).
    pub(crate) ticket_drops: BTreeMap<SecretId, (u64, PathBuf)>,
}

impl Listing {
    /// The key that signs: the one the `active` file names or, when that file is missing
    /// (a crash before it was first written), the only key without a retirement record.
    pub(crate) fn active_kid(&self, dir: &Path) -> Result<&str, TokenError> {
        if let Some(kid) = &self.active {
            return match self.keys.iter().find(|key| &key.kid == kid) {
                Some(key) => Ok(&key.kid),
                None => Err(TokenError::corrupt(
                    dir.join(ACTIVE_FILE),
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
                dir: dir.to_path_buf(),
            }),
            _ => Err(TokenError::NoActiveKey {
                dir: dir.to_path_buf(),
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
    pub(crate) fn ticket_secrets(&self, dir: &Path) -> Result<TicketSecrets, TokenError> {
        let signing_id = self.signing_ticket_secret();
        let Some(signing) = self.ticket_secrets.get(&signing_id) else {
            return Err(match signing_id {
                SecretId::Original => TokenError::MissingTicketKey {
                    path: dir.join(TICKET_KEY_FILE),
                },
                SecretId::Named(id) => TokenError::corrupt(
                    dir.join(TICKET_ACTIVE_FILE),
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

/// Lists `dir`. Files it does not own (other names, dot files, directories) are ignored;
/// files it owns with an unusable name or content are errors naming the file.
pub(crate) fn list(dir: &Path) -> Result<Listing, TokenError> {
    let entries = fs::read_dir(dir).map_err(|error| TokenError::io("reading", dir, error))?;
    let mut listing = Listing::default();
    for entry in entries {
        let entry = entry.map_err(|error| TokenError::io("reading", dir, error))?;
        let path = entry.path();
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        if name.starts_with('.') || !path.is_file() {
            continue;
        }
        if name == ACTIVE_FILE {
            let text = read_text(&path)?;
            let kid = text.trim();
            if !is_valid_kid(kid) {
                return Err(TokenError::corrupt(&path, "does not hold a key id"));
            }
            listing.active = Some(kid.to_owned());
        } else if name == TICKET_ACTIVE_FILE {
            let text = read_text(&path)?;
            let id = text.trim();
            if !is_valid_kid(id) {
                return Err(TokenError::corrupt(
                    &path,
                    "does not hold a ticket secret id",
                ));
            }
            listing.ticket_active = Some(id.to_owned());
        } else if let Some(kid) = name.strip_suffix(RETIRED_SUFFIX) {
            check_kid(kid, &path)?;
            let retired_at = read_unix_time(&path)?;
            listing.retired.insert(kid.to_owned(), (retired_at, path));
        } else if let Some((kid, algorithm)) = parse_key_file_name(&name) {
            check_kid(kid, &path)?;
            if listing.has_kid(kid) {
                return Err(TokenError::corrupt(
                    &path,
                    format!("another key file has the same key id {kid:?}"),
                ));
            }
            listing.keys.push(KeyFile {
                kid: kid.to_owned(),
                algorithm,
                path,
            });
        } else if let Some(id) = ticket_file_id(&name, TICKET_SECRET_SUFFIX, &path)? {
            listing
                .ticket_secrets
                .insert(id, read_ticket_secret(&path)?);
        } else if let Some(id) = ticket_file_id(&name, TICKET_DROP_SUFFIX, &path)? {
            let drop_at = read_unix_time(&path)?;
            listing.ticket_drops.insert(id, (drop_at, path));
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

/// The path of ticket secret `id` in `dir`.
pub(crate) fn ticket_secret_path(dir: &Path, id: &SecretId) -> PathBuf {
    dir.join(ticket_secret_file_name(id))
}

/// Whether `kid` can be a key id: 1 to 64 base64url characters.
pub(crate) fn is_valid_kid(kid: &str) -> bool {
    !kid.is_empty()
        && kid.len() <= 64
        && kid
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_')
}

/// Creates `dir` (owner-only on unix) if it does not exist.
pub(crate) fn create_dir(dir: &Path) -> Result<(), TokenError> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt as _;
        builder.mode(0o700);
    }
    builder
        .create(dir)
        .map_err(|error| TokenError::io("creating", dir, error))
}

/// Writes `dir/name` atomically: a temporary file (owner-only on unix) is written, synced and
/// renamed over the target, so readers see the old content or the new, never a part.
pub(crate) fn write_file(dir: &Path, name: &str, contents: &str) -> Result<(), TokenError> {
    let target = dir.join(name);
    let temporary = dir.join(format!(
        ".{name}.{}.tmp",
        keys::encode_secret(&keys::random_secret()[..6])
    ));
    let result = write_new_file(&temporary, contents)
        .and_then(|()| fs::rename(&temporary, &target))
        .map_err(|error| TokenError::io("writing", &target, error));
    if result.is_err() {
        // Best effort: the write already failed and that is the error worth reporting.
        let _ = fs::remove_file(&temporary);
    }
    result?;
    sync_dir(dir)
}

/// Removes `path`; a file that is already gone is not an error.
pub(crate) fn remove_file(path: &Path) -> Result<(), TokenError> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(error) => Err(TokenError::io("removing", path, error)),
    }
}

fn write_new_file(path: &Path, contents: &str) -> std::io::Result<()> {
    let mut options = fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600);
    }
    let mut file = options.open(path)?;
    file.write_all(contents.as_bytes())?;
    file.sync_all()
}

/// Makes a rename in `dir` durable (unix only; elsewhere directories cannot be opened).
fn sync_dir(dir: &Path) -> Result<(), TokenError> {
    #[cfg(unix)]
    {
        fs::File::open(dir)
            .and_then(|handle| handle.sync_all())
            .map_err(|error| TokenError::io("syncing", dir, error))?;
    }
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

/// The ticket secret a file named `ticket<suffix>` or `ticket.<id><suffix>` belongs to; `None`
/// for other names, an error for a malformed id.
fn ticket_file_id(name: &str, suffix: &str, path: &Path) -> Result<Option<SecretId>, TokenError> {
    let Some(middle) = name
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
        return Err(TokenError::corrupt(
            path,
            "file name does not hold a ticket secret id of 1 to 64 base64url characters",
        ));
    }
    Ok(Some(SecretId::Named(id.to_owned())))
}

fn read_ticket_secret(path: &Path) -> Result<[u8; keys::SECRET_LEN], TokenError> {
    let text = read_text(path)?;
    let secret = keys::decode_secret(&text).map_err(|reason| TokenError::corrupt(path, reason))?;
    secret.try_into().map_err(|secret: Vec<u8>| {
        TokenError::corrupt(
            path,
            format!(
                "ticket secret has {} bytes, not {}",
                secret.len(),
                keys::SECRET_LEN
            ),
        )
    })
}

fn read_unix_time(path: &Path) -> Result<u64, TokenError> {
    read_text(path)?
        .trim()
        .parse::<u64>()
        .map_err(|_| TokenError::corrupt(path, "does not hold a unix time"))
}

fn read_text(path: &Path) -> Result<String, TokenError> {
    fs::read_to_string(path).map_err(|error| TokenError::io("reading", path, error))
}

fn check_kid(kid: &str, path: &Path) -> Result<(), TokenError> {
    if is_valid_kid(kid) {
        Ok(())
    } else {
        Err(TokenError::corrupt(
            path,
            "file name does not start with a key id of 1 to 64 base64url characters",
        ))
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
