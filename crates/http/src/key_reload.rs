//! Keeps a node's signing keys in step with the key directory it shares with other nodes.
//!
//! A key rotation (`POST /admin/v1/keys/rotate` on any node, or `anteroom keys generate`)
//! writes a new key file and changes `active` in the shared directory. Every node looks at the
//! directory once a second and loads the key set again when its listing changed, so passes
//! signed with the new key verify everywhere, and every node's JWKS lists it, within about a
//! second. A pass whose `kid` this node does not know yet makes it look at once (at most once a
//! second, so unknown `kid`s sent on purpose cannot turn into disk reads per request).

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use anteroom_token::KeySet;
use parking_lot::Mutex;
use tokio::time::Instant;

use crate::AppState;

/// How often the directory is looked at, and the least time between two looks.
pub const KEY_DIR_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// The directory and what this node last saw of it.
pub(crate) struct KeyReload {
    dir: PathBuf,
    seen: Mutex<Seen>,
}

struct Seen {
    listing: Option<Listing>,
    checked_at: Option<Instant>,
}

/// Names, sizes and modification times of the directory's files, and the `active` file's
/// content: any rotation or pruning changes it.
#[derive(PartialEq, Eq)]
struct Listing {
    files: Vec<(String, u64, Option<SystemTime>)>,
    active: Vec<u8>,
}

impl KeyReload {
    pub(crate) fn new(dir: PathBuf) -> KeyReload {
        let listing = read_listing(&dir).ok();
        KeyReload {
            dir,
            seen: Mutex::new(Seen {
                listing,
                checked_at: None,
            }),
        }
    }

    /// Whether a look is due (none in the last interval); marks it taken.
    fn take_turn(&self) -> bool {
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

/// Looks at the key directory every [`KEY_DIR_CHECK_INTERVAL`] for as long as the node runs.
/// Does nothing on a node built without a key directory.
pub async fn follow_key_dir(app: AppState) {
    if app.key_reload().is_none() {
        return;
    }
    let mut interval = tokio::time::interval(KEY_DIR_CHECK_INTERVAL);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        reload_if_changed(&app).await;
    }
}

/// Loads the key set again if the directory changed and no look happened in the last
/// interval. Returns whether the keys were replaced.
pub(crate) async fn reload_if_changed(app: &AppState) -> bool {
    let Some(reload) = app.key_reload() else {
        return false;
    };
    if !reload.take_turn() {
        return false;
    }
    let dir = reload.dir.clone();
    let read = tokio::task::spawn_blocking(move || {
        let listing = read_listing(&dir)?;
        Ok::<_, std::io::Error>((listing, dir))
    })
    .await;
    let (listing, dir) = match read {
        Ok(Ok(read)) => read,
        Ok(Err(error)) => {
            tracing::warn!(%error, dir = %reload.dir.display(), "cannot read the key directory; keeping the loaded keys");
            return false;
        }
        Err(error) => {
            tracing::warn!(%error, "key directory check did not finish");
            return false;
        }
    };
    if reload.seen.lock().listing.as_ref() == Some(&listing) {
        return false;
    }
    let loaded = tokio::task::spawn_blocking(move || KeySet::load(&dir)).await;
    match loaded {
        Ok(Ok(keys)) => {
            tracing::info!(
                active_kid = keys.active_kid(),
                kids = keys.kids().len(),
                "signing keys reloaded from the key directory"
            );
            app.set_keys(keys);
            reload.seen.lock().listing = Some(listing);
            true
        }
        // A rotation on another node may be half written: the next look tries again.
        Ok(Err(error)) => {
            tracing::warn!(%error, "the key directory changed but does not load; keeping the loaded keys");
            false
        }
        Err(error) => {
            tracing::warn!(%error, "key reload did not finish");
            false
        }
    }
}

fn read_listing(dir: &Path) -> std::io::Result<Listing> {
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
    Ok(Listing { files, active })
}
