//! The on-disk layout of a key directory: listing it, and writing and removing its files
//! atomically.
//!
//! See the crate documentation for the layout itself.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use crate::{SigningAlgorithm, TokenError, keys};

/// The file naming the active key id.
pub(crate) const ACTIVE_FILE: &str = "active";
/// The file holding the ticket MAC secret.
pub(crate) const TICKET_KEY_FILE: &str = "ticket.key";
/// The suffix of a retirement record, `<kid>.retired`.
const RETIRED_SUFFIX: &str = ".retired";

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
    /// The ticket secret, when `ticket.key` exists.
    pub(crate) ticket_secret: Option<[u8; keys::SECRET_LEN]>,
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
        } else if name == TICKET_KEY_FILE {
            let text = read_text(&path)?;
            let secret =
                keys::decode_secret(&text).map_err(|reason| TokenError::corrupt(&path, reason))?;
            let secret: [u8; keys::SECRET_LEN] = secret.try_into().map_err(|secret: Vec<u8>| {
                TokenError::corrupt(
                    &path,
                    format!(
                        "ticket secret has {} bytes, not {}",
                        secret.len(),
                        keys::SECRET_LEN
                    ),
                )
            })?;
            listing.ticket_secret = Some(secret);
        } else if let Some(kid) = name.strip_suffix(RETIRED_SUFFIX) {
            check_kid(kid, &path)?;
            let text = read_text(&path)?;
            let retired_at = text
                .trim()
                .parse::<u64>()
                .map_err(|_| TokenError::corrupt(&path, "does not hold a unix time"))?;
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
