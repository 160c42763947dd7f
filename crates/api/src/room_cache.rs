//! This node's copy of the room configurations it serves.
//!
//! Every join, status and page needs its room's configuration. On a store shared by several
//! nodes (Redis) reading it costs a round trip per request, so the node keeps each room's
//! configuration until the store announces a change to it ([`anteroom_store::Notice`]), a
//! notice may have been lost (`Resync`), or `MAX_AGE` (30 s) passed; the ticker's listing of every
//! room refreshes the copies twice a second as well. On a store only this process uses there
//! is nobody else to announce changes: the store's configuration version
//! ([`RoomStore::config_version`]) says when any configuration changed, and the copy is kept
//! until it moves (one atomic read per request instead of a store read and a clone kept).
//! Copies are shared (`Arc`): a request takes a reference, not a clone.
//!
//! Either way the last configuration seen stays known while the store is unreachable: it
//! decides the room's `on_store_error` (SPEC §9.4).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::RwLock;

use anteroom_core::RoomId;
use anteroom_core::room::RoomConfig;
use anteroom_store::{Notices, RoomStore, StoreError};

/// A cached configuration is read again after this long even without a notice.
pub(crate) const MAX_AGE: Duration = Duration::from_secs(30);

/// Room configurations as this node last saw them.
pub(crate) struct RoomConfigsUntilChanged {
    entries: RwLock<HashMap<RoomId, CachedRoom>>,
    /// Present when the store announces changes: only then are fresh copies served.
    notices: Option<Notices>,
    /// Bumped by every invalidation, so a read that raced with one is not kept as fresh.
    epoch: AtomicU64,
}

struct CachedRoom {
    /// Shared with the requests using it: serving a copy is a reference count, not a clone.
    config: Arc<RoomConfig>,
    /// Known from the config file, not (yet) read from the store.
    primed: bool,
    /// Served without asking the store until invalidated or too old.
    fresh_until: Option<Instant>,
    /// The store's configuration version before this copy was read (local stores): served
    /// while the store still reports it.
    version: Option<u64>,
}

impl CachedRoom {
    fn serves(&self, store_version: Option<u64>, notices: bool) -> bool {
        let current = store_version.is_some() && self.version == store_version;
        let fresh = notices && self.fresh_until.is_some_and(|until| Instant::now() < until);
        current || fresh
    }
}

impl RoomConfigsUntilChanged {
    /// A cache over a store with (`Some`) or without change notices.
    pub(crate) fn new(notices: Option<Notices>) -> RoomConfigsUntilChanged {
        RoomConfigsUntilChanged {
            entries: RwLock::new(HashMap::new()),
            notices,
            epoch: AtomicU64::new(0),
        }
    }

    /// The room's configuration: this node's copy while fresh, else the store's (kept).
    pub(crate) async fn get(
        &self,
        store: &dyn RoomStore,
        room: &RoomId,
    ) -> Result<Arc<RoomConfig>, StoreError> {
        let version = store.config_version();
        if let Some(entry) = self.entries.read().get(room)
            && entry.serves(version, self.notices.is_some())
        {
            return Ok(entry.config.clone());
        }
        let epoch = self.epoch.load(Ordering::Acquire);
        match store.room(room).await {
            Ok(config) => {
                let config = Arc::new(config);
                self.keep(config.clone(), epoch, version);
                Ok(config)
            }
            Err(StoreError::RoomNotFound(id)) => {
                self.forget_read(&id);
                Err(StoreError::RoomNotFound(id))
            }
            Err(error) => Err(error),
        }
    }

    /// The last configuration seen for `room`, however old.
    pub(crate) fn last_known(&self, room: &RoomId) -> Option<RoomConfig> {
        self.entries
            .read()
            .get(room)
            .map(|entry| RoomConfig::clone(&entry.config))
    }

    /// Remembers configurations not read from the store (the config file's rooms at start), so
    /// their `on_store_error` is known even if the store never answered; they are not served
    /// as fresh.
    pub(crate) fn prime(&self, configs: impl IntoIterator<Item = RoomConfig>) {
        let mut entries = self.entries.write();
        for config in configs {
            if let Some(notices) = &self.notices {
                notices.follow(&config.id);
            }
            entries.entry(config.id.clone()).or_insert(CachedRoom {
                config: Arc::new(config),
                primed: true,
                fresh_until: None,
                version: None,
            });
        }
    }

    /// Takes a full listing of the store's rooms (read by the ticker): every listed room is
    /// fresh, rooms no longer listed are forgotten. `epoch` and `version` (the store's
    /// configuration version) are read before listing.
    pub(crate) fn replace_all(&self, configs: &[RoomConfig], epoch: u64, version: Option<u64>) {
        let fresh = self.fresh_until(epoch);
        let mut entries = self.entries.write();
        let listed: std::collections::HashSet<&RoomId> =
            configs.iter().map(|config| &config.id).collect();
        entries.retain(|id, _| {
            let keep = listed.contains(id);
            if !keep && let Some(notices) = &self.notices {
                notices.unfollow(id);
            }
            keep
        });
        for config in configs {
            if let Some(notices) = &self.notices {
                notices.follow(&config.id);
            }
            entries.insert(
                config.id.clone(),
                CachedRoom {
                    config: Arc::new(config.clone()),
                    primed: false,
                    fresh_until: fresh,
                    version,
                },
            );
        }
    }

    /// The epoch to pass to [`replace_all`](Self::replace_all), read before listing.
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// The room changed elsewhere: read it again on next use.
    pub(crate) fn invalidate(&self, room: &RoomId) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
        if let Some(entry) = self.entries.write().get_mut(room) {
            entry.fresh_until = None;
        }
    }

    /// Changes may have been missed: read every room again on next use.
    pub(crate) fn invalidate_all(&self) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
        for entry in self.entries.write().values_mut() {
            entry.fresh_until = None;
        }
    }

    fn fresh_until(&self, epoch: u64) -> Option<Instant> {
        let unchanged = self.epoch.load(Ordering::Acquire) == epoch;
        (self.notices.is_some() && unchanged).then(|| Instant::now() + MAX_AGE)
    }

    fn keep(&self, config: Arc<RoomConfig>, epoch: u64, version: Option<u64>) {
        if let Some(notices) = &self.notices {
            notices.follow(&config.id);
        }
        let fresh_until = self.fresh_until(epoch);
        self.entries.write().insert(
            config.id.clone(),
            CachedRoom {
                config,
                primed: false,
                fresh_until,
                version,
            },
        );
    }

    /// The store has no such room. A room known only from the config file is kept: it is
    /// about to be installed (the store was unreachable at start).
    fn forget_read(&self, room: &RoomId) {
        let mut entries = self.entries.write();
        if entries
            .get(room)
            .is_some_and(|entry| entry.fresh_until.is_some() || !entry.primed)
        {
            entries.remove(room);
            if let Some(notices) = &self.notices {
                notices.unfollow(room);
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::Arc;

    use anteroom_core::{ManualClock, Timestamp};
    use anteroom_store::MemoryStore;

    use super::*;

    fn room(max_active: u64) -> RoomConfig {
        let mut config = RoomConfig::with_defaults(RoomId::new("sale").unwrap());
        config.max_active = max_active;
        config
    }

    #[tokio::test]
    async fn a_local_store_s_change_is_read_at_once() {
        let store = MemoryStore::new(Arc::new(ManualClock::new(Timestamp(1_000))));
        let cache = RoomConfigsUntilChanged::new(None);
        let id = RoomId::new("sale").unwrap();
        store.put_room(room(1)).await.unwrap();
        assert_eq!(cache.get(&store, &id).await.unwrap().max_active, 1);
        assert_eq!(cache.get(&store, &id).await.unwrap().max_active, 1);

        store.put_room(room(2)).await.unwrap();
        assert_eq!(cache.get(&store, &id).await.unwrap().max_active, 2);

        store.delete_room(&id).await.unwrap();
        assert!(matches!(
            cache.get(&store, &id).await,
            Err(StoreError::RoomNotFound(_))
        ));
    }

    #[tokio::test]
    async fn a_listing_older_than_a_change_is_not_served() {
        let store = MemoryStore::new(Arc::new(ManualClock::new(Timestamp(1_000))));
        let cache = RoomConfigsUntilChanged::new(None);
        let id = RoomId::new("sale").unwrap();
        store.put_room(room(1)).await.unwrap();
        // The ticker read the version and listed the rooms; a change lands before it keeps them.
        let (epoch, version) = (cache.epoch(), store.config_version());
        let listing = store.rooms().await.unwrap();
        store.put_room(room(2)).await.unwrap();
        cache.replace_all(&listing, epoch, version);
        assert_eq!(cache.get(&store, &id).await.unwrap().max_active, 2);
    }
}
