//! Runs the core room engine for a set of rooms held in memory, and hands each operation's
//! changed records to a [`Persister`] before the operation is acknowledged.
//!
//! Each room sits behind its own mutex, so operations on one room are serialised (atomic) and
//! different rooms proceed in parallel. The persister is called while the room's lock is still
//! held, which puts a room's writes into the durable log in the order they happened; the lock
//! is released before waiting for the disk, so many operations share one commit. The
//! `delegate_room_store!` macro implements the `RoomStore` trait over a host for each backend
//! that runs the engine in process (memory, embedded).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use anteroom_core::adaptive::LoadSignal;
use anteroom_core::engine::{
    ChangeSet, EngineError, Entry, JoinRequest, RoomSnapshot, RoomState, Session, SessionEnd,
    TickReport, TicketRef,
};
use anteroom_core::room::RoomConfig;
use anteroom_core::{Clock, RoomId, SessionId, Timestamp};
use parking_lot::{Mutex, RwLock};
use rand::SeedableRng;
use rand::rngs::StdRng;

use crate::{ConfigWrite, RoomRecords, SessionListing, SessionQuery, StoreError};

/// A durable write that has been queued; [`Persister::wait_durable_until`] its sequence says
/// when it is on disk.
pub(crate) struct PendingWrite {
    /// The write's place in the backend's log: writes become durable in this order.
    pub(crate) sequence: u64,
}

/// What a backend does to make a room's changes durable.
pub(crate) trait Persister: Send + Sync + 'static {
    /// Queues the records named by `changes` (and the configuration when `config_changed`),
    /// with `events` (outbox payloads of the operation's visitor events, empty while events
    /// are off) in the same write. Called with the room's lock held. `None` means nothing
    /// needs waiting for.
    fn persist(
        &self,
        room: &RoomState,
        changes: &ChangeSet,
        config_changed: bool,
        events: Vec<Vec<u8>>,
    ) -> Result<Option<PendingWrite>, StoreError>;

    /// Queues the deletion of a room and all its records.
    fn persist_deletion(&self, room: &RoomId) -> Result<Option<PendingWrite>, StoreError>;

    /// Resolves once every write up to `sequence` is durable.
    fn wait_durable_until(
        &self,
        sequence: u64,
    ) -> impl std::future::Future<Output = Result<(), StoreError>> + Send;
}

/// One room with the random generator its operations draw from.
pub(crate) struct RoomSlot {
    pub(crate) state: RoomState,
    rng: StdRng,
    deleted: bool,
    /// The origin's latest load signal. Kept in memory only, also by the embedded store: a
    /// signal counts for 30 s and origins push one every few seconds, so a log sync per signal
    /// would cost more than losing one in a restart (the next push brings it back).
    load_signal: Option<LoadSignal>,
    /// The last write queued for this room: an answer that reports its effects (even from an
    /// operation that changed nothing itself) waits until it is durable.
    last_sequence: u64,
}

/// The shared engine host behind [`crate::MemoryStore`] and [`crate::RedbStore`].
pub(crate) struct EngineHost<P> {
    rooms: RwLock<BTreeMap<RoomId, Arc<Mutex<RoomSlot>>>>,
    clock: Arc<dyn Clock>,
    persister: P,
    seed: Option<u64>,
    /// Bumped after every configuration change (creation, replacement, deletion), so callers
    /// may keep configurations until it moves.
    config_version: AtomicU64,
    /// Whether visitor events are written (SPEC §14.9); off until a sink wants them.
    record_events: AtomicBool,
}

impl<P: Persister> EngineHost<P> {
    /// A host over already-restored rooms. With `seed`, random choices are reproducible.
    pub(crate) fn new(
        rooms: Vec<RoomState>,
        clock: Arc<dyn Clock>,
        persister: P,
        seed: Option<u64>,
    ) -> EngineHost<P> {
        let host = EngineHost {
            rooms: RwLock::new(BTreeMap::new()),
            clock,
            persister,
            seed,
            config_version: AtomicU64::new(0),
            record_events: AtomicBool::new(false),
        };
        {
            let mut map = host.rooms.write();
            for state in rooms {
                let id = state.config().id.clone();
                map.insert(id, Arc::new(Mutex::new(host.slot_for(state))));
            }
        }
        host
    }

    pub(crate) fn persister(&self) -> &P {
        &self.persister
    }

    /// From now on every operation's visitor events are handed to the persister.
    pub(crate) fn record_events(&self) {
        self.record_events.store(true, Ordering::Release);
    }

    /// The outbox payloads of `changes`' events, none while events are off.
    fn event_payloads(&self, room: &RoomState, changes: &ChangeSet) -> Vec<Vec<u8>> {
        if changes.events.is_empty() || !self.record_events.load(Ordering::Acquire) {
            return Vec::new();
        }
        crate::visitor_events::encode_all(&room.config().id, &changes.events)
    }

    async fn wait_durable(&self, pending: Option<PendingWrite>) -> Result<(), StoreError> {
        match pending {
            Some(pending) => self.persister.wait_durable_until(pending.sequence).await,
            None => Ok(()),
        }
    }

    fn slot_for(&self, state: RoomState) -> RoomSlot {
        let rng = match self.seed {
            Some(seed) => {
                // Mixing in the room's counters keeps a reopened store from replaying the ids
                // it handed out before.
                let meta = state.meta();
                let history =
                    meta.last_position.rotate_left(17) ^ meta.totals.passes.rotate_left(41);
                StdRng::seed_from_u64(seed ^ hash_room(&state.config().id) ^ history)
            }
            None => StdRng::from_entropy(),
        };
        RoomSlot {
            state,
            rng,
            deleted: false,
            load_signal: None,
            last_sequence: 0,
        }
    }

    fn slot(&self, room: &RoomId) -> Result<Arc<Mutex<RoomSlot>>, StoreError> {
        self.rooms
            .read()
            .get(room)
            .cloned()
            .ok_or_else(|| StoreError::RoomNotFound(room.clone()))
    }

    /// Runs `operation` on the room atomically and waits until its changes are durable.
    pub(crate) async fn apply<T>(
        &self,
        room: &RoomId,
        operation: impl FnOnce(
            &mut RoomState,
            Timestamp,
            &mut StdRng,
            &mut ChangeSet,
        ) -> Result<T, EngineError>,
    ) -> Result<T, StoreError> {
        self.apply_acknowledging(room, |_| false, operation).await
    }

    /// Like [`apply`](Self::apply); when the operation changed nothing itself but
    /// `acknowledges` says its answer reports state (a join resumed, a pass re-returned), the
    /// answer also waits until the room's last queued write is durable, so nothing is
    /// acknowledged that a crash could still take back (I6).
    pub(crate) async fn apply_acknowledging<T>(
        &self,
        room: &RoomId,
        acknowledges: impl FnOnce(&Result<T, EngineError>) -> bool,
        operation: impl FnOnce(
            &mut RoomState,
            Timestamp,
            &mut StdRng,
            &mut ChangeSet,
        ) -> Result<T, EngineError>,
    ) -> Result<T, StoreError> {
        let slot = self.slot(room)?;
        let (result, pending, earlier) = {
            let mut guard = slot.lock();
            if guard.deleted {
                return Err(StoreError::RoomNotFound(room.clone()));
            }
            let now = self.clock.now();
            let mut changes = ChangeSet::default();
            let RoomSlot { state, rng, .. } = &mut *guard;
            let result = operation(state, now, rng, &mut changes);
            let mut earlier = None;
            let pending = if changes.is_empty() {
                if acknowledges(&result) {
                    earlier = Some(guard.last_sequence);
                }
                None
            } else {
                let events = self.event_payloads(&guard.state, &changes);
                let pending = self
                    .persister
                    .persist(&guard.state, &changes, false, events)?;
                if let Some(pending) = &pending {
                    guard.last_sequence = pending.sequence;
                }
                pending
            };
            (result, pending, earlier)
        };
        self.wait_durable(pending).await?;
        if let Some(sequence) = earlier {
            self.persister.wait_durable_until(sequence).await?;
        }
        Ok(result?)
    }

    /// Reads the room under its lock, without changing it.
    pub(crate) fn read<T>(
        &self,
        room: &RoomId,
        read: impl FnOnce(&RoomState) -> T,
    ) -> Result<T, StoreError> {
        let slot = self.slot(room)?;
        let guard = slot.lock();
        if guard.deleted {
            return Err(StoreError::RoomNotFound(room.clone()));
        }
        Ok(read(&guard.state))
    }

    pub(crate) async fn put_room(&self, config: RoomConfig) -> Result<RoomSnapshot, StoreError> {
        let id = config.id.clone();
        let slot = {
            let mut rooms = self.rooms.write();
            rooms
                .entry(id)
                .or_insert_with(|| {
                    Arc::new(Mutex::new(
                        self.slot_for(RoomState::new(config.clone(), self.clock.now())),
                    ))
                })
                .clone()
        };
        let (snapshot, pending) = self.set_config(&mut slot.lock(), config)?;
        self.wait_durable(pending).await?;
        Ok(snapshot)
    }

    /// Replaces the room's configuration only while it is still `expected`: the comparison
    /// and the write happen under the room's lock, so of two writers that read the same
    /// configuration exactly one succeeds.
    pub(crate) async fn replace_room_if(
        &self,
        expected: &RoomConfig,
        config: RoomConfig,
    ) -> Result<ConfigWrite, StoreError> {
        let slot = self.slot(&config.id)?;
        let (snapshot, pending) = {
            let mut guard = slot.lock();
            if guard.deleted {
                return Err(StoreError::RoomNotFound(config.id));
            }
            if guard.state.config() != expected {
                return Ok(ConfigWrite::Changed(guard.state.config().clone()));
            }
            self.set_config(&mut guard, config)?
        };
        self.wait_durable(pending).await?;
        Ok(ConfigWrite::Written(snapshot))
    }

    /// Puts `config` in force on a locked room and queues its durable write.
    fn set_config(
        &self,
        slot: &mut RoomSlot,
        config: RoomConfig,
    ) -> Result<(RoomSnapshot, Option<PendingWrite>), StoreError> {
        let mut changes = ChangeSet::default();
        slot.state
            .set_config(config, self.clock.now(), &mut changes);
        let events = self.event_payloads(&slot.state, &changes);
        let pending = self.persister.persist(&slot.state, &changes, true, events);
        // After the change, never before: a reader that saw the old version and then
        // the new configuration keeps it under the old version and reads it again.
        self.config_version.fetch_add(1, Ordering::AcqRel);
        let pending = pending?;
        if let Some(pending) = &pending {
            slot.last_sequence = pending.sequence;
        }
        Ok((slot.state.snapshot(), pending))
    }

    pub(crate) fn put_load_signal(
        &self,
        room: &RoomId,
        signal: LoadSignal,
    ) -> Result<(), StoreError> {
        let slot = self.slot(room)?;
        let mut guard = slot.lock();
        if guard.deleted {
            return Err(StoreError::RoomNotFound(room.clone()));
        }
        guard.load_signal = Some(signal);
        Ok(())
    }

    pub(crate) fn load_signal(&self, room: &RoomId) -> Result<Option<LoadSignal>, StoreError> {
        let slot = self.slot(room)?;
        let guard = slot.lock();
        if guard.deleted {
            return Err(StoreError::RoomNotFound(room.clone()));
        }
        Ok(guard.load_signal)
    }

    /// Changes whenever a room's configuration is created, replaced or deleted.
    pub(crate) fn config_version(&self) -> u64 {
        self.config_version.load(Ordering::Acquire)
    }

    pub(crate) async fn delete_room(&self, room: &RoomId) -> Result<bool, StoreError> {
        let pending = {
            let mut rooms = self.rooms.write();
            let Some(slot) = rooms.remove(room) else {
                return Ok(false);
            };
            slot.lock().deleted = true;
            self.config_version.fetch_add(1, Ordering::AcqRel);
            self.persister.persist_deletion(room)?
        };
        self.wait_durable(pending).await?;
        Ok(true)
    }

    pub(crate) fn rooms(&self) -> Vec<RoomConfig> {
        let slots: Vec<Arc<Mutex<RoomSlot>>> = self.rooms.read().values().cloned().collect();
        slots
            .iter()
            .map(|slot| slot.lock().state.config().clone())
            .collect()
    }

    pub(crate) async fn join(
        &self,
        room: &RoomId,
        request: JoinRequest,
    ) -> Result<Entry, StoreError> {
        self.apply_acknowledging(
            room,
            |_| true,
            |state, now, rng, changes| state.join(request, now, rng, changes),
        )
        .await
    }

    pub(crate) async fn status(
        &self,
        room: &RoomId,
        ticket: TicketRef,
    ) -> Result<Entry, StoreError> {
        let admitted =
            |result: &Result<Entry, EngineError>| matches!(result, Ok(Entry::Admitted(_)));
        self.apply_acknowledging(room, admitted, |state, now, rng, changes| {
            state.status(ticket, now, rng, changes)
        })
        .await
    }

    /// Leaves; a freed slot is refilled by an immediate tick.
    pub(crate) async fn leave(&self, room: &RoomId, ticket: TicketRef) -> Result<(), StoreError> {
        self.apply(room, |state, now, rng, changes| {
            let freed = state.leave(ticket, now, rng, changes)?;
            if freed {
                state.tick(now, rng, changes);
            }
            Ok(())
        })
        .await
    }

    /// Ends a session; its slot is refilled by an immediate tick (one-in-one-out).
    pub(crate) async fn end_session(
        &self,
        room: &RoomId,
        session: SessionId,
        reason: SessionEnd,
    ) -> Result<Session, StoreError> {
        self.apply_acknowledging(
            room,
            |result| result.is_ok(),
            |state, now, rng, changes| {
                let ended = state.end_session(session, reason, now, changes)?;
                state.tick(now, rng, changes);
                Ok(ended)
            },
        )
        .await
    }

    pub(crate) async fn renew_session(
        &self,
        room: &RoomId,
        session: SessionId,
    ) -> Result<(Session, bool), StoreError> {
        self.apply_acknowledging(
            room,
            |result| result.is_ok(),
            |state, now, _, changes| state.renew_session(session, now, changes),
        )
        .await
    }

    pub(crate) async fn issue_session(
        &self,
        room: &RoomId,
        uid: Option<String>,
        ttl: Duration,
    ) -> Result<Session, StoreError> {
        self.apply(room, |state, now, rng, changes| {
            state.issue_session(uid, ttl, now, rng, changes)
        })
        .await
    }

    pub(crate) async fn tick(&self, room: &RoomId) -> Result<TickReport, StoreError> {
        self.apply(room, |state, now, rng, changes| {
            Ok(state.tick(now, rng, changes))
        })
        .await
    }

    pub(crate) async fn advance(
        &self,
        room: &RoomId,
        count: u64,
    ) -> Result<(u64, RoomSnapshot), StoreError> {
        self.apply(room, |state, now, rng, changes| {
            let admitted = state.advance(count, now, rng, changes);
            Ok((admitted, state.snapshot()))
        })
        .await
    }

    pub(crate) async fn reset(
        &self,
        room: &RoomId,
        purge: bool,
    ) -> Result<RoomSnapshot, StoreError> {
        self.apply(room, |state, now, _, changes| {
            state.reset(purge, now, changes);
            Ok(state.snapshot())
        })
        .await
    }

    pub(crate) fn records(&self, room: &RoomId) -> Result<RoomRecords, StoreError> {
        self.read(room, |state| RoomRecords {
            tickets: state.tickets().collect(),
            sessions: state.sessions().map(Cow::into_owned).collect(),
        })
    }

    /// The page from the room in memory: every session is looked at (no I/O, so the bound
    /// that matters is the answer's size), and only the page is copied.
    pub(crate) fn session_page(
        &self,
        room: &RoomId,
        query: &SessionQuery,
    ) -> Result<SessionListing, StoreError> {
        self.read(room, |state| {
            let mut wanted: Vec<(String, Cow<'_, Session>)> = state
                .sessions()
                .filter(|session| query.filter.matches(session.state))
                .map(|session| (session.id.to_string(), session))
                .filter(|(id, _)| {
                    query
                        .after
                        .as_deref()
                        .is_none_or(|after| id.as_str() > after)
                })
                .collect();
            let limit = query.limit.max(1);
            let more = wanted.len() > limit;
            if more {
                wanted.select_nth_unstable_by(limit, |a, b| a.0.cmp(&b.0));
                wanted.truncate(limit);
            }
            wanted.sort_unstable_by(|a, b| a.0.cmp(&b.0));
            let next_after = more
                .then(|| wanted.last().map(|(id, _)| id.clone()))
                .flatten();
            SessionListing {
                sessions: wanted
                    .into_iter()
                    .map(|(_, session)| session.into_owned())
                    .collect(),
                next_after,
            }
        })
    }
}

/// A stable per-room mix for seeded generators, so rooms do not share one random sequence.
fn hash_room(room: &RoomId) -> u64 {
    room.as_str()
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
        })
}

/// Implements [`crate::RoomStore`] for a wrapper whose field `host` is an [`EngineHost`].
macro_rules! delegate_room_store {
    ($store:ty) => {
        #[async_trait::async_trait]
        impl $crate::RoomStore for $store {
            async fn put_room(
                &self,
                config: anteroom_core::room::RoomConfig,
            ) -> Result<anteroom_core::engine::RoomSnapshot, $crate::StoreError> {
                self.host.put_room(config).await
            }
            async fn replace_room_if(
                &self,
                expected: &anteroom_core::room::RoomConfig,
                config: anteroom_core::room::RoomConfig,
            ) -> Result<$crate::ConfigWrite, $crate::StoreError> {
                self.host.replace_room_if(expected, config).await
            }
            async fn delete_room(
                &self,
                room: &anteroom_core::RoomId,
            ) -> Result<bool, $crate::StoreError> {
                self.host.delete_room(room).await
            }
            async fn rooms(
                &self,
            ) -> Result<Vec<anteroom_core::room::RoomConfig>, $crate::StoreError> {
                Ok(self.host.rooms())
            }
            fn config_version(&self) -> Option<u64> {
                Some(self.host.config_version())
            }
            async fn put_load_signal(
                &self,
                room: &anteroom_core::RoomId,
                signal: anteroom_core::adaptive::LoadSignal,
            ) -> Result<(), $crate::StoreError> {
                self.host.put_load_signal(room, signal)
            }
            async fn load_signal(
                &self,
                room: &anteroom_core::RoomId,
            ) -> Result<Option<anteroom_core::adaptive::LoadSignal>, $crate::StoreError> {
                self.host.load_signal(room)
            }
            fn event_outbox(
                &self,
                limits: $crate::OutboxLimits,
            ) -> Result<std::sync::Arc<dyn $crate::EventOutbox>, $crate::StoreError> {
                // The outbox exists before the first event is handed to it.
                let outbox = self.open_event_outbox(limits)?;
                self.host.record_events();
                Ok(outbox)
            }
            async fn room(
                &self,
                room: &anteroom_core::RoomId,
            ) -> Result<anteroom_core::room::RoomConfig, $crate::StoreError> {
                self.host.read(room, |state| state.config().clone())
            }
            async fn join(
                &self,
                room: &anteroom_core::RoomId,
                request: anteroom_core::engine::JoinRequest,
            ) -> Result<anteroom_core::engine::Entry, $crate::StoreError> {
                self.host.join(room, request).await
            }
            async fn status(
                &self,
                room: &anteroom_core::RoomId,
                ticket: anteroom_core::engine::TicketRef,
            ) -> Result<anteroom_core::engine::Entry, $crate::StoreError> {
                self.host.status(room, ticket).await
            }
            async fn leave(
                &self,
                room: &anteroom_core::RoomId,
                ticket: anteroom_core::engine::TicketRef,
            ) -> Result<(), $crate::StoreError> {
                self.host.leave(room, ticket).await
            }
            async fn end_session(
                &self,
                room: &anteroom_core::RoomId,
                session: anteroom_core::SessionId,
                reason: anteroom_core::engine::SessionEnd,
            ) -> Result<anteroom_core::engine::Session, $crate::StoreError> {
                self.host.end_session(room, session, reason).await
            }
            async fn renew_session(
                &self,
                room: &anteroom_core::RoomId,
                session: anteroom_core::SessionId,
            ) -> Result<(anteroom_core::engine::Session, bool), $crate::StoreError> {
                self.host.renew_session(room, session).await
            }
            async fn session(
                &self,
                room: &anteroom_core::RoomId,
                session: anteroom_core::SessionId,
            ) -> Result<Option<anteroom_core::engine::Session>, $crate::StoreError> {
                self.host.read(room, |state| state.session(session))
            }
            async fn issue_session(
                &self,
                room: &anteroom_core::RoomId,
                uid: Option<String>,
                ttl: std::time::Duration,
            ) -> Result<anteroom_core::engine::Session, $crate::StoreError> {
                self.host.issue_session(room, uid, ttl).await
            }
            async fn tick(
                &self,
                room: &anteroom_core::RoomId,
            ) -> Result<anteroom_core::engine::TickReport, $crate::StoreError> {
                self.host.tick(room).await
            }
            async fn snapshot(
                &self,
                room: &anteroom_core::RoomId,
            ) -> Result<anteroom_core::engine::RoomSnapshot, $crate::StoreError> {
                self.host.read(room, |state| state.snapshot())
            }
            async fn advance(
                &self,
                room: &anteroom_core::RoomId,
                count: u64,
            ) -> Result<(u64, anteroom_core::engine::RoomSnapshot), $crate::StoreError> {
                self.host.advance(room, count).await
            }
            async fn reset(
                &self,
                room: &anteroom_core::RoomId,
                purge: bool,
            ) -> Result<anteroom_core::engine::RoomSnapshot, $crate::StoreError> {
                self.host.reset(room, purge).await
            }
            async fn records(
                &self,
                room: &anteroom_core::RoomId,
            ) -> Result<$crate::RoomRecords, $crate::StoreError> {
                self.host.records(room)
            }
            async fn session_page(
                &self,
                room: &anteroom_core::RoomId,
                query: &$crate::SessionQuery,
            ) -> Result<$crate::SessionListing, $crate::StoreError> {
                self.host.session_page(room, query)
            }
            async fn line_masks(
                &self,
                room: &anteroom_core::RoomId,
            ) -> Result<$crate::LineMasks, $crate::StoreError> {
                self.host.read(room, |state| {
                    $crate::LineMasks::from_positions(state.waiting_positions())
                })
            }
            async fn touch(
                &self,
                room: &anteroom_core::RoomId,
                tickets: &[anteroom_core::engine::TicketRef],
            ) -> Result<u64, $crate::StoreError> {
                self.host
                    .apply(room, |state, now, _, _| {
                        Ok(state.touch_waiting(tickets, now))
                    })
                    .await
            }
        }
    };
}
pub(crate) use delegate_room_store;

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    //! Durability of answers, with a persister whose writes reach "disk" only when the test
    //! says so.

    use super::*;
    use anteroom_core::ManualClock;
    use anteroom_core::room::{Identity, RoomConfig};
    use std::sync::atomic::{AtomicU64, Ordering};
    use tokio::sync::watch;

    /// Holds every write until `release` is called.
    struct HeldPersister {
        next: AtomicU64,
        released: watch::Sender<u64>,
        waiting: Mutex<Vec<u64>>,
    }

    impl HeldPersister {
        fn new() -> HeldPersister {
            HeldPersister {
                next: AtomicU64::new(0),
                released: watch::channel(0).0,
                waiting: Mutex::new(Vec::new()),
            }
        }

        fn queue(&self) -> Option<PendingWrite> {
            let sequence = self.next.fetch_add(1, Ordering::SeqCst) + 1;
            self.waiting.lock().push(sequence);
            Some(PendingWrite { sequence })
        }

        fn release(&self) {
            for sequence in self.waiting.lock().drain(..) {
                self.released
                    .send_modify(|through| *through = (*through).max(sequence));
            }
        }
    }

    impl Persister for HeldPersister {
        fn persist(
            &self,
            _: &RoomState,
            _: &ChangeSet,
            _: bool,
            _: Vec<Vec<u8>>,
        ) -> Result<Option<PendingWrite>, StoreError> {
            Ok(self.queue())
        }

        fn persist_deletion(&self, _: &RoomId) -> Result<Option<PendingWrite>, StoreError> {
            Ok(self.queue())
        }

        async fn wait_durable_until(&self, sequence: u64) -> Result<(), StoreError> {
            let mut released = self.released.subscribe();
            released
                .wait_for(|through| *through >= sequence)
                .await
                .unwrap();
            Ok(())
        }
    }

    #[tokio::test]
    async fn a_resumed_join_is_not_acknowledged_before_the_original_is_durable() {
        let clock = Arc::new(ManualClock::new(Timestamp(1_000_000)));
        let host = Arc::new(EngineHost::new(
            Vec::new(),
            clock,
            HeldPersister::new(),
            Some(1),
        ));
        let room = RoomId::new("r").unwrap();
        let mut config = RoomConfig::with_defaults(room.clone());
        config.identity = Identity::Header("X-User".to_owned());
        let put = tokio::spawn({
            let host = host.clone();
            async move { host.put_room(config).await }
        });
        tokio::task::yield_now().await;
        host.persister().release();
        put.await.unwrap().unwrap();

        let request = JoinRequest {
            identity: Some("alice".to_owned()),
            ..JoinRequest::default()
        };
        let first = tokio::spawn({
            let (host, room, request) = (host.clone(), room.clone(), request.clone());
            async move { host.join(&room, request).await }
        });
        // Let the first join take its place and queue its write.
        while host.persister().waiting.lock().is_empty() {
            tokio::task::yield_now().await;
        }
        let second = tokio::spawn({
            let (host, room) = (host.clone(), room.clone());
            async move { host.join(&room, request).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            !first.is_finished() && !second.is_finished(),
            "nothing is acknowledged before it is durable"
        );
        host.persister().release();
        let (first, second) = (
            first.await.unwrap().unwrap(),
            second.await.unwrap().unwrap(),
        );
        assert_eq!(
            first, second,
            "the second join resumed the first one's ticket"
        );
    }
}
