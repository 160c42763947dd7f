//! Where a key set's files are kept: a directory on disk, or [`KeyRecords`], named entries a
//! caller loads from somewhere else (a shared store) and writes back.
//!
//! The key-set logic (`keyset.rs`, `key_dir.rs`) sees only [`KeyStorage`]: the same layout of
//! named entries, the same rotation, retirement and pruning, whichever holds them.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use crate::{TokenError, keys};

/// A flat set of named text entries that holds a key set (the layout is in the crate
/// documentation).
///
/// Implemented for a directory ([`Path`], [`PathBuf`]) and for [`KeyRecords`].
pub trait KeyStorage {
    /// Makes the storage ready to be written (creates the directory, owner-only on unix).
    fn create(&self) -> Result<(), TokenError>;
    /// The names of every entry; dot files and directories are left out.
    fn names(&self) -> Result<Vec<String>, TokenError>;
    /// The text of entry `name`.
    fn read(&self, name: &str) -> Result<String, TokenError>;
    /// Replaces entry `name` with `contents`, all at once: readers see the old text or the
    /// new, never a part.
    fn write(&self, name: &str, contents: &str) -> Result<(), TokenError>;
    /// Removes entry `name`; one that is already gone is not an error.
    fn remove(&self, name: &str) -> Result<(), TokenError>;
    /// Where entry `name` is (the whole storage for `""`), for error messages.
    fn location(&self, name: &str) -> PathBuf;
}

impl KeyStorage for Path {
    fn create(&self) -> Result<(), TokenError> {
        let mut builder = fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::DirBuilderExt as _;
            builder.mode(0o700);
        }
        builder
            .create(self)
            .map_err(|error| TokenError::io("creating", self, error))
    }

    fn names(&self) -> Result<Vec<String>, TokenError> {
        let entries = fs::read_dir(self).map_err(|error| TokenError::io("reading", self, error))?;
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|error| TokenError::io("reading", self, error))?;
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            if !name.starts_with('.') && entry.path().is_file() {
                names.push(name);
            }
        }
        Ok(names)
    }

    fn read(&self, name: &str) -> Result<String, TokenError> {
        let path = self.join(name);
        fs::read_to_string(&path).map_err(|error| TokenError::io("reading", path, error))
    }

    /// A temporary file (owner-only on unix) is written, synced and renamed over the target.
    fn write(&self, name: &str, contents: &str) -> Result<(), TokenError> {
        let target = self.join(name);
        let temporary = self.join(format!(
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
        sync_dir(self)
    }

    fn remove(&self, name: &str) -> Result<(), TokenError> {
        let path = self.join(name);
        match fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(error) => Err(TokenError::io("removing", path, error)),
        }
    }

    fn location(&self, name: &str) -> PathBuf {
        self.join(name)
    }
}

impl KeyStorage for PathBuf {
    fn create(&self) -> Result<(), TokenError> {
        self.as_path().create()
    }

    fn names(&self) -> Result<Vec<String>, TokenError> {
        self.as_path().names()
    }

    fn read(&self, name: &str) -> Result<String, TokenError> {
        self.as_path().read(name)
    }

    fn write(&self, name: &str, contents: &str) -> Result<(), TokenError> {
        self.as_path().write(name, contents)
    }

    fn remove(&self, name: &str) -> Result<(), TokenError> {
        self.as_path().remove(name)
    }

    fn location(&self, name: &str) -> PathBuf {
        self.as_path().location(name)
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

/// A key set's entries held in memory: loaded by the caller from wherever it keeps them, and
/// changed by [`KeySet`](crate::KeySet) operations, which record what they changed so the
/// caller can write back exactly that ([`KeyRecords::changes`]).
///
/// ```
/// use anteroom_token::{KeyRecords, KeySet, SigningAlgorithm};
///
/// let records = KeyRecords::new("shared keys", Default::default());
/// let keys = KeySet::load_or_generate(&records, SigningAlgorithm::EdDsa, 1_700_000_000).unwrap();
/// let changes = records.changes();
/// assert_eq!(changes["active"].as_deref(), Some(format!("{}\n", keys.active_kid()).as_str()));
///
/// // Another node loads the same entries and signs with the same key.
/// let written = changes.into_iter().filter_map(|(name, text)| Some((name, text?))).collect();
/// let elsewhere = KeySet::load(&KeyRecords::new("shared keys", written)).unwrap();
/// assert_eq!(elsewhere.active_kid(), keys.active_kid());
/// ```
#[derive(Debug)]
pub struct KeyRecords {
    /// Names the records in error messages (a file path for a directory).
    label: String,
    state: Mutex<RecordState>,
}

#[derive(Debug, Default)]
struct RecordState {
    entries: BTreeMap<String, String>,
    /// Entry → its new text, or `None` when removed; only entries changed since `new`.
    changes: BTreeMap<String, Option<String>>,
}

impl KeyRecords {
    /// Records holding `entries` (name → text), called `label` in error messages.
    pub fn new(label: impl Into<String>, entries: BTreeMap<String, String>) -> KeyRecords {
        KeyRecords {
            label: label.into(),
            state: Mutex::new(RecordState {
                entries,
                changes: BTreeMap::new(),
            }),
        }
    }

    /// Every entry written (`Some(text)`) or removed (`None`) since [`KeyRecords::new`].
    pub fn changes(&self) -> BTreeMap<String, Option<String>> {
        self.state().changes.clone()
    }

    fn state(&self) -> MutexGuard<'_, RecordState> {
        // The state is two maps changed together under the lock; a panic elsewhere cannot
        // leave them half changed, so a poisoned lock holds usable data.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl KeyStorage for KeyRecords {
    fn create(&self) -> Result<(), TokenError> {
        Ok(())
    }

    fn names(&self) -> Result<Vec<String>, TokenError> {
        Ok(self.state().entries.keys().cloned().collect())
    }

    fn read(&self, name: &str) -> Result<String, TokenError> {
        self.state().entries.get(name).cloned().ok_or_else(|| {
            TokenError::io(
                "reading",
                self.location(name),
                std::io::ErrorKind::NotFound.into(),
            )
        })
    }

    fn write(&self, name: &str, contents: &str) -> Result<(), TokenError> {
        let mut state = self.state();
        state.entries.insert(name.to_owned(), contents.to_owned());
        state
            .changes
            .insert(name.to_owned(), Some(contents.to_owned()));
        Ok(())
    }

    fn remove(&self, name: &str) -> Result<(), TokenError> {
        let mut state = self.state();
        if state.entries.remove(name).is_some() {
            state.changes.insert(name.to_owned(), None);
        }
        Ok(())
    }

    fn location(&self, name: &str) -> PathBuf {
        if name.is_empty() {
            PathBuf::from(&self.label)
        } else {
            PathBuf::from(format!("{} entry {name}", self.label))
        }
    }
}
