//! Each room's configuration and figures as the gateway uses them: read from the store at most
//! once a second per room (one request refreshes while the others use the copy they have), so
//! protecting a request costs no store read. A reset (new generation) or a room changed through
//! the admin API is seen within a second.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use arc_swap::ArcSwap;
use parking_lot::RwLock;

use anteroom_core::engine::RoomSnapshot;
use anteroom_core::room::{Mode, RoomConfig};
use anteroom_core::{RoomId, Timestamp};
use anteroom_store::{RoomStore, StoreError};

/// How long a copy is used before it is read again.
const FRESH_FOR: Duration = Duration::from_secs(1);

/// The most `requires` levels followed (the config refuses cycles; this bounds rooms changed at
/// run time).
pub(crate) const MAX_REQUIRES_DEPTH: usize = 8;

/// A map by room id. Ids are the operator's (config file, admin API), not the visitors', and
/// every protected request looks its rooms up: ahash rather than SipHash (which cost about 160
/// instructions a lookup, twice a request).
type ByRoom<V> = HashMap<RoomId, V, ahash::RandomState>;

/// A room as last read.
pub(crate) struct RoomInfo {
    pub(crate) config: RoomConfig,
    pub(crate) snapshot: RoomSnapshot,
    read_at: Timestamp,
    refreshing: AtomicBool,
    /// Visitors this node admitted into the room since it was read: each may have taken a
    /// place the figures still show free. While there are any, the room is read again by the
    /// next request.
    joined_here: AtomicU32,
    /// This node queued a visitor since the room was read: it admits nobody at once, whatever
    /// the figures say.
    queued_here: AtomicBool,
}

impl RoomInfo {
    /// Whether a visitor joining now would most likely be admitted at once: nobody waits and
    /// capacity is free (`queue`), or the room only counts (`passthrough`). Figures are at most
    /// a second old, each join this node made since counted as a place taken; the join itself
    /// decides.
    /// A scheduled room is judged by its schedule at `now` (SPEC §5.3).
    pub(crate) fn admits_at_once(&self, now: Timestamp) -> bool {
        if self.queued_here.load(Ordering::Acquire) {
            return false;
        }
        match self.config.mode_at(now) {
            Mode::Passthrough => true,
            Mode::Queue => {
                let joined_here = u64::from(self.joined_here.load(Ordering::Acquire));
                let used = self.snapshot.active + self.snapshot.admitted_unclaimed + joined_here;
                let max_active = self.config.limits_at(now).max_active;
                self.snapshot.waiting == 0 && (max_active == 0 || used < max_active)
            }
            Mode::QueueAll | Mode::Closed => false,
        }
    }

    /// Whether the store answered for the room (this copy was read) less than `within` before
    /// `now`.
    pub(crate) fn read_within(&self, now: Timestamp, within: Duration) -> bool {
        now.since(self.read_at) < within
    }

    /// Whether this copy was read from the store at `at` or later.
    pub(crate) fn read_since(&self, at: Timestamp) -> bool {
        self.read_at >= at
    }
}

/// A copy being read again by one request: marked so while the request reads, and unmarked
/// when it is done or dropped.
struct Refreshing(Arc<RoomInfo>);

impl Drop for Refreshing {
    fn drop(&mut self) {
        self.0.refreshing.store(false, Ordering::Release);
    }
}

/// What the cache knows about a room.
pub(crate) enum RoomLookup {
    /// The room, as of at most a second ago.
    Found(Arc<RoomInfo>),
    /// No such room (deleted after the routes were configured, or lost by the store).
    Missing,
    /// The store cannot be read: the last copy, if any, the room's configuration (from the
    /// last copy or the config file) for the page, and the failure.
    StoreDown {
        last: Option<Arc<RoomInfo>>,
        config: Option<Box<RoomConfig>>,
        error: StoreError,
    },
}

/// The rooms' copies.
pub(crate) struct RoomsReadEverySecond {
    rooms: RwLock<ByRoom<Arc<RoomInfo>>>,
    /// Rooms the store said it does not have, and when: asked again after [`FRESH_FOR`], so
    /// a flood on a lost room's routes costs no store read per request.
    missing: RwLock<ByRoom<Timestamp>>,
    /// The rooms of the config file, for when the store cannot be read before the first copy.
    /// Replaced whole by a reload ([`RoomsReadEverySecond::configure`]).
    configured: ArcSwap<ByRoom<RoomConfig>>,
}

impl RoomsReadEverySecond {
    pub(crate) fn new(configured: Vec<RoomConfig>) -> RoomsReadEverySecond {
        RoomsReadEverySecond {
            rooms: RwLock::new(ByRoom::default()),
            missing: RwLock::new(ByRoom::default()),
            configured: ArcSwap::from_pointee(by_id(configured)),
        }
    }

    /// The room, read again from the store when the copy is older than a second.
    pub(crate) async fn get(
        &self,
        store: &dyn RoomStore,
        room: &RoomId,
        now: Timestamp,
    ) -> RoomLookup {
        if self
            .missing
            .read()
            .get(room)
            .is_some_and(|since| now.since(*since) < FRESH_FOR)
        {
            return RoomLookup::Missing;
        }
        let cached = self.rooms.read().get(room).cloned();
        if let Some(info) = &cached {
            let fresh = now.since(info.read_at) < FRESH_FOR
                && info.joined_here.load(Ordering::Acquire) == 0
                && !info.queued_here.load(Ordering::Acquire);
            // One request refreshes; the others go on with the copy they have.
            if fresh || info.refreshing.swap(true, Ordering::AcqRel) {
                return RoomLookup::Found(info.clone());
            }
        }
        // Whatever becomes of this request (it is dropped when its client leaves), the copy is
        // not left marked as being read: no other request would ever read the room again.
        let _refreshing = cached.clone().map(Refreshing);
        let read = async {
            let config = store.room(room).await?;
            let snapshot = store.snapshot(room).await?;
            Ok::<_, StoreError>((config, snapshot))
        };
        match read.await {
            Ok((config, snapshot)) => self.read(room, config, snapshot, now),
            Err(StoreError::RoomNotFound(_)) => self.went_missing(room, now),
            Err(error) => self.store_down(room, cached, error),
        }
    }

    /// Keeps a room just read from the store.
    fn read(
        &self,
        room: &RoomId,
        config: RoomConfig,
        snapshot: RoomSnapshot,
        now: Timestamp,
    ) -> RoomLookup {
        if self.missing.write().remove(room).is_some() {
            tracing::info!(%room, "the room exists again; its routes are served");
        }
        let info = Arc::new(RoomInfo {
            config,
            snapshot,
            read_at: now,
            refreshing: AtomicBool::new(false),
            joined_here: AtomicU32::new(0),
            queued_here: AtomicBool::new(false),
        });
        self.rooms.write().insert(room.clone(), info.clone());
        RoomLookup::Found(info)
    }

    /// Remembers that the store does not have `room` (said once, when it goes missing).
    fn went_missing(&self, room: &RoomId, now: Timestamp) -> RoomLookup {
        self.rooms.write().remove(room);
        let first = self.missing.write().insert(room.clone(), now).is_none();
        if first {
            tracing::warn!(%room, "a route names a room the store does not have; its routes answer 503 until it exists again");
        }
        RoomLookup::Missing
    }

    /// The store cannot be reached: the last known figures and configuration, if any.
    fn store_down(
        &self,
        room: &RoomId,
        cached: Option<Arc<RoomInfo>>,
        error: StoreError,
    ) -> RoomLookup {
        let config = cached
            .as_ref()
            .map(|info| info.config.clone())
            .or_else(|| self.configured.load().get(room).cloned())
            .map(Box::new);
        RoomLookup::StoreDown {
            last: cached,
            config,
            error,
        }
    }

    /// The configuration of `room` in the config file, if it is there.
    pub(crate) fn configured(&self, room: &RoomId) -> Option<RoomConfig> {
        self.configured.load().get(room).cloned()
    }

    /// The rooms of a reloaded config file.
    pub(crate) fn configure(&self, configured: Vec<RoomConfig>) {
        self.configured.store(Arc::new(by_id(configured)));
    }

    /// Notes that this node joined a visitor to `room`, `admitted` at once or queued, so the
    /// next request reads it again: a copy saying "nobody waits" must not let the next
    /// requests join as if the join just made had changed nothing. The copy itself is kept,
    /// an admission counted against its free places, a queued join making it admit nobody at
    /// once: while one request reads the room again the others go on with it (a crowd's joins
    /// do not each read the room), and should the store fail meanwhile, it is still the room
    /// as last known.
    pub(crate) fn joined(&self, room: &RoomId, admitted: bool) {
        if let Some(info) = self.rooms.read().get(room) {
            if admitted {
                info.joined_here.fetch_add(1, Ordering::AcqRel);
            } else {
                info.queued_here.store(true, Ordering::Release);
            }
        }
        if self.missing.read().contains_key(room) {
            self.missing.write().remove(room);
        }
    }

    /// The rooms whose passes a request on a route naming `rooms` needs, in order: each room's
    /// `requires` (recursively) before the room, each room once. When no room of `rooms`
    /// requires another and none is named twice (nearly every route), that is `rooms` itself,
    /// borrowed: no list is made for each request.
    pub(crate) fn with_requirements<'r>(&self, rooms: &'r [RoomId]) -> Cow<'r, [RoomId]> {
        let copies = self.rooms.read();
        let configured = self.configured.load();
        let requires = |room: &RoomId| -> &[RoomId] {
            copies
                .get(room)
                .map(|info| info.config.requires.as_slice())
                .or_else(|| {
                    configured
                        .get(room)
                        .map(|config| config.requires.as_slice())
                })
                .unwrap_or_default()
        };
        let named_once = |(at, room): (usize, &RoomId)| !rooms[..at].contains(room);
        if rooms.iter().all(|room| requires(room).is_empty())
            && rooms.iter().enumerate().all(named_once)
        {
            return Cow::Borrowed(rooms);
        }
        let mut ordered = Vec::with_capacity(rooms.len());
        for room in rooms {
            add_with_requirements(room, &requires, &mut ordered, 0);
        }
        Cow::Owned(ordered)
    }
}

fn by_id(rooms: Vec<RoomConfig>) -> ByRoom<RoomConfig> {
    rooms
        .into_iter()
        .map(|room| (room.id.clone(), room))
        .collect()
}

fn add_with_requirements<'a>(
    room: &RoomId,
    requires: &impl Fn(&RoomId) -> &'a [RoomId],
    ordered: &mut Vec<RoomId>,
    depth: usize,
) {
    if ordered.contains(room) {
        return;
    }
    if depth < MAX_REQUIRES_DEPTH {
        for required in requires(room) {
            add_with_requirements(required, requires, ordered, depth + 1);
        }
    }
    if !ordered.contains(room) {
        ordered.push(room.clone());
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use anteroom_core::Clock;

    fn id(text: &str) -> RoomId {
        RoomId::new(text).unwrap()
    }

    #[test]
    fn requirements_come_first_and_once() {
        let mut site = RoomConfig::with_defaults(id("site"));
        site.requires = vec![];
        let mut checkout = RoomConfig::with_defaults(id("checkout"));
        checkout.requires = vec![id("site")];
        let mut pay = RoomConfig::with_defaults(id("pay"));
        pay.requires = vec![id("checkout")];
        let cache = RoomsReadEverySecond::new(vec![site, checkout, pay]);
        assert_eq!(
            *cache.with_requirements(&[id("pay")]),
            [id("site"), id("checkout"), id("pay")]
        );
        assert_eq!(
            *cache.with_requirements(&[id("site"), id("checkout")]),
            [id("site"), id("checkout")]
        );
        assert_eq!(*cache.with_requirements(&[id("other")]), [id("other")]);
        // Rooms that require nothing are the route's own list, borrowed; a room named twice
        // still comes once.
        let plain = [id("site"), id("other")];
        assert!(matches!(cache.with_requirements(&plain), Cow::Borrowed(_)));
        assert_eq!(*cache.with_requirements(&plain), plain);
        assert_eq!(
            *cache.with_requirements(&[id("site"), id("other"), id("site")]),
            [id("site"), id("other")]
        );
        assert!(matches!(
            cache.with_requirements(&[id("site"), id("checkout")]),
            Cow::Owned(_)
        ));
    }

    /// A join this node made counts as a place taken until the room is read again, and makes
    /// the next request read it; the copy is kept meanwhile.
    #[tokio::test]
    async fn a_join_here_takes_a_place_in_the_copy_until_the_room_is_read_again() {
        let clock = Arc::new(anteroom_core::ManualClock::new(Timestamp(
            1_700_000_000_000,
        )));
        let store = anteroom_store::MemoryStore::new(clock.clone());
        let room = RoomConfig {
            max_active: 2,
            ..RoomConfig::with_defaults(id("launch"))
        };
        store.put_room(room.clone()).await.unwrap();
        let cache = RoomsReadEverySecond::new(vec![room]);
        let now = clock.now();
        let RoomLookup::Found(first) = cache.get(&store, &id("launch"), now).await else {
            panic!("the room is read");
        };
        assert!(first.admits_at_once(now));
        cache.joined(&id("launch"), true);
        assert!(first.admits_at_once(now), "one place of two taken");
        cache.joined(&id("launch"), true);
        assert!(
            !first.admits_at_once(now),
            "both taken, as far as this node knows"
        );
        // Read again at once (no real join was made: the store's figures say both are free).
        let RoomLookup::Found(again) = cache.get(&store, &id("launch"), now).await else {
            panic!("the room is read");
        };
        assert!(!Arc::ptr_eq(&first, &again), "read again");
        assert!(again.admits_at_once(now));
        let RoomLookup::Found(same) = cache.get(&store, &id("launch"), now).await else {
            panic!("the copy is used");
        };
        assert!(Arc::ptr_eq(&again, &same), "fresh: not read a third time");
        // A queued join: nobody is admitted at once until the room is read again.
        cache.joined(&id("launch"), false);
        assert!(!again.admits_at_once(now));
    }

    /// The request reading a stale copy again is dropped halfway (its client left). Must hold:
    /// the next request reads the room again; the copy is not left marked as being read, which
    /// would have frozen it for good.
    #[tokio::test]
    async fn a_read_dropped_halfway_leaves_the_room_to_be_read_again() {
        use anteroom_test_support::redis::{RedisServer, unique_prefix};
        let server = RedisServer::start();
        let clock = Arc::new(anteroom_core::ManualClock::new(Timestamp(
            1_700_000_000_000,
        )));
        let config = anteroom_store::RedisConfig::standalone(server.url())
            .with_key_prefix(unique_prefix())
            .with_timeout(Duration::from_secs(2));
        let store = anteroom_store::RedisStore::new(config, Some(clock.clone())).unwrap();
        let room = RoomConfig::with_defaults(id("launch"));
        store.put_room(room.clone()).await.unwrap();
        let cache = RoomsReadEverySecond::new(vec![room]);
        let RoomLookup::Found(first) = cache.get(&store, &id("launch"), clock.now()).await else {
            panic!("the room is read");
        };
        clock.advance(Duration::from_secs(2));
        let paused = server.pause();
        let dropped = tokio::time::timeout(
            Duration::from_millis(100),
            cache.get(&store, &id("launch"), clock.now()),
        )
        .await;
        RedisServer::resume(paused);
        assert!(dropped.is_err(), "the read was under way");
        let RoomLookup::Found(again) = cache.get(&store, &id("launch"), clock.now()).await else {
            panic!("the room is read");
        };
        assert!(!Arc::ptr_eq(&first, &again), "read again");
    }
}
