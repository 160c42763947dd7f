//! Where a node's signing keys live, and the operations on them that every entry point shares
//! (start-up, `keys/rotate`, `keys/prune`, the reload loop, the CLI): a key directory, or the
//! entries of a key set shared through the store's Redis, sealed with a key-encryption key,
//! for nodes without a shared disk.
//!
//! In Redis, an operation reads every entry at one version, opens them with the
//! key-encryption key, runs the same key-set code as a directory would (on
//! [`KeyRecords`]), seals what it changed and writes that back only if no other node changed
//! the entries meanwhile; if one did, it starts again from what that node wrote. An entry the
//! key-encryption key does not open is an error, never a reason to make new keys: a node
//! started with the wrong key-encryption key stops instead of signing with keys no other node
//! knows.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;
use tokio::time::Instant;

use anteroom_core::room::RoomConfig;
use anteroom_store::{RedisConfig, RedisKeyEntries, StoreError};
use anteroom_token::{
    KeyEncryptionKey, KeyRecords, KeySet, KeyStorage, PruneReport, SigningAlgorithm, TokenError,
    prune_horizon_secs,
};

/// The longest a pass issued by hand (`POST /admin/v1/rooms/{room}/passes`) may live.
pub const MAX_HAND_ISSUED_PASS_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// How long OIDC ID and access tokens live. Short: userinfo checks the session on every call
/// anyway, and a client that needs longer asks the visitor through the room again.
pub(crate) const OIDC_TOKEN_TTL: Duration = Duration::from_secs(300);

/// How often the keys are looked at, and the least time between two looks.
pub(crate) const KEY_DIR_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// How many times an operation on shared keys starts again after another node changed them
/// first, before it gives up.
const MAX_ATTEMPTS: usize = 5;

/// Where the signing keys are kept. Cheap to clone.
#[derive(Clone)]
pub enum KeySource {
    /// A key directory (shared by nodes on one disk, or this node's own).
    Dir(PathBuf),
    /// Entries in Redis, sealed.
    Redis(Arc<RedisKeys>),
}

impl std::fmt::Debug for KeySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

/// The key set's entries in Redis and the key that seals them.
pub struct RedisKeys {
    entries: RedisKeyEntries,
    kek: KeyEncryptionKey,
}

/// What changes whenever the keys do: a directory's listing, or the entries' version.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Fingerprint {
    Dir(DirListing),
    Redis(u64),
}

/// Why keys could not be loaded or changed.
#[derive(Debug, thiserror::Error)]
pub enum KeySourceError {
    /// A key entry or file is unusable, or does not open with the key-encryption key.
    #[error(transparent)]
    Token(#[from] TokenError),
    /// Redis did not answer.
    #[error("the signing keys in redis: {0}")]
    Store(#[from] StoreError),
    /// Other nodes kept changing the shared keys while this one tried.
    #[error(
        "the signing keys in redis changed on other nodes {MAX_ATTEMPTS} times in a row; try again"
    )]
    Contended,
    /// The blocking work (key generation, file writes) did not finish.
    #[error("key work did not finish: {0}")]
    Task(#[from] tokio::task::JoinError),
}

impl KeySource {
    /// Keys in the Redis of `config`, sealed with `kek`; connects on first use.
    pub fn redis(config: &RedisConfig, kek: KeyEncryptionKey) -> Result<KeySource, StoreError> {
        Ok(KeySource::Redis(Arc::new(RedisKeys {
            entries: RedisKeyEntries::new(config)?,
            kek,
        })))
    }

    /// Loads the keys, making the first key (and ticket secret) when there are none.
    pub async fn load_or_generate(
        &self,
        algorithm: SigningAlgorithm,
        now_secs: u64,
    ) -> Result<KeySet, KeySourceError> {
        self.change(move |storage| KeySet::load_or_generate(storage, algorithm, now_secs))
            .await
    }

    /// Loads the keys as they are.
    pub async fn load(&self) -> Result<KeySet, KeySourceError> {
        match self {
            KeySource::Dir(dir) => {
                let dir = dir.clone();
                Ok(tokio::task::spawn_blocking(move || KeySet::load(&dir)).await??)
            }
            KeySource::Redis(redis) => {
                let (_, records) = redis.read().await?;
                // Parsing keys (RSA especially) must not hold up the runtime either.
                Ok(tokio::task::spawn_blocking(move || KeySet::load(&records)).await??)
            }
        }
    }

    /// Makes a new active key of `algorithm` and rotates the ticket secret (see
    /// [`KeySet::rotate`]).
    pub async fn rotate(
        &self,
        algorithm: SigningAlgorithm,
        ticket_secret_retention: Duration,
        now_secs: u64,
    ) -> Result<KeySet, KeySourceError> {
        self.change(move |storage| {
            KeySet::rotate(storage, algorithm, ticket_secret_retention, now_secs)
        })
        .await
    }

    /// Deletes the keys retired at least `keep_secs` ago (see [`KeySet::prune`]); returns the
    /// key set after, and what was removed and kept.
    pub async fn prune(
        &self,
        keep_secs: u64,
        now_secs: u64,
    ) -> Result<(KeySet, PruneReport), KeySourceError> {
        self.change(move |storage| {
            let report = KeySet::prune(storage, keep_secs, now_secs)?;
            Ok((KeySet::load(storage)?, report))
        })
        .await
    }

    /// Says where the keys are, for logs and errors.
    pub fn describe(&self) -> String {
        match self {
            KeySource::Dir(dir) => dir.display().to_string(),
            KeySource::Redis(redis) => format!("redis key {}", redis.entries.entries_key()),
        }
    }

    /// What changes whenever the keys do.
    pub(crate) async fn fingerprint(&self) -> Result<Fingerprint, KeySourceError> {
        match self {
            KeySource::Dir(dir) => {
                let dir = dir.clone();
                let read = tokio::task::spawn_blocking(move || {
                    DirListing::read(&dir).map_err(|source| TokenError::Io {
                        action: "reading",
                        path: dir,
                        source,
                    })
                });
                Ok(Fingerprint::Dir(read.await??))
            }
            KeySource::Redis(redis) => Ok(Fingerprint::Redis(redis.entries.version().await?)),
        }
    }

    /// Runs `operation` on the keys where they are; in Redis, writes back what it changed,
    /// starting again when another node changed the keys first.
    async fn change<T: Send + 'static>(
        &self,
        operation: impl Fn(&dyn KeyStorage) -> Result<T, TokenError> + Send + Clone + 'static,
    ) -> Result<T, KeySourceError> {
        match self {
            KeySource::Dir(dir) => {
                let dir = dir.clone();
                // Key generation (RSA especially) and file writes must not hold up the runtime.
                Ok(tokio::task::spawn_blocking(move || operation(&dir)).await??)
            }
            KeySource::Redis(redis) => {
                for _ in 0..MAX_ATTEMPTS {
                    let (version, records) = redis.read().await?;
                    let operation = operation.clone();
                    let (done, records) = tokio::task::spawn_blocking(move || {
                        operation(&records).map(|done| (done, records))
                    })
                    .await??;
                    let changes = records.changes();
                    if changes.is_empty() || redis.write(version, &changes).await? {
                        return Ok(done);
                    }
                }
                Err(KeySourceError::Contended)
            }
        }
    }
}

impl RedisKeys {
    /// Every entry, opened, and the version it was read at.
    async fn read(&self) -> Result<(u64, KeyRecords), KeySourceError> {
        let read = self.entries.load().await?;
        let mut opened = BTreeMap::new();
        for (name, sealed) in read.entries {
            let text = self.kek.open(&name, &sealed)?;
            opened.insert(name, text);
        }
        Ok((
            read.version,
            KeyRecords::new(format!("redis key {}", self.entries.entries_key()), opened),
        ))
    }

    /// Seals `changes` and writes them if the entries are still at `version`.
    async fn write(
        &self,
        version: u64,
        changes: &BTreeMap<String, Option<String>>,
    ) -> Result<bool, KeySourceError> {
        let sealed = changes
            .iter()
            .map(|(name, text)| {
                let sealed = text.as_deref().map(|text| self.kek.seal(name, text));
                (name.clone(), sealed)
            })
            .collect();
        Ok(self.entries.apply(version, &sealed).await?)
    }
}

/// Where the keys are and what this node last saw of them.
pub(crate) struct KeyReload {
    pub(crate) source: KeySource,
    pub(crate) seen: Mutex<Seen>,
}

pub(crate) struct Seen {
    pub(crate) fingerprint: Option<Fingerprint>,
    checked_at: Option<Instant>,
}

/// Names, sizes and modification times of a key directory's files, and the `active` file's
/// content: any rotation or pruning changes it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct DirListing {
    files: Vec<(String, u64, Option<SystemTime>)>,
    active: Vec<u8>,
}

impl KeyReload {
    pub(crate) fn new(source: KeySource) -> KeyReload {
        KeyReload {
            source,
            seen: Mutex::new(Seen {
                fingerprint: None,
                checked_at: None,
            }),
        }
    }

    /// Whether a look is due (none in the last interval); marks it taken.
    pub(crate) fn take_turn(&self) -> bool {
        let mut seen = self.seen.lock();
        let now = Instant::now();
        if seen
            .checked_at
            .is_some_and(|at| now.duration_since(at) < KEY_DIR_CHECK_INTERVAL)
        {
            return false;
        }
        seen.checked_at = Some(now);
        true
    }
}

impl DirListing {
    pub(crate) fn read(dir: &Path) -> std::io::Result<DirListing> {
        let mut files = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let metadata = entry.metadata()?;
            if !metadata.is_file() {
                continue;
            }
            files.push((
                entry.file_name().to_string_lossy().into_owned(),
                metadata.len(),
                metadata.modified().ok(),
            ));
        }
        files.sort();
        let active = match std::fs::read(dir.join("active")) {
            Ok(content) => content,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(error) => return Err(error),
        };
        Ok(DirListing { files, active })
    }
}

/// How long after a key stops signing a pass it signed can still be valid, in seconds: the
/// longest lifetime of any pass (a room's `session_ttl`, a pass issued by hand, an ID or
/// access token) plus the verification leeway and clock skew.
pub fn key_retention_secs(rooms: &[RoomConfig]) -> u64 {
    let longest = rooms
        .iter()
        .map(|room| room.session_ttl)
        .chain([MAX_HAND_ISSUED_PASS_TTL, OIDC_TOKEN_TTL])
        .max()
        .unwrap_or(MAX_HAND_ISSUED_PASS_TTL);
    prune_horizon_secs(longest.as_secs())
}
