//! The reference backend: rooms in process memory, gone when the process ends. Its event
//! outbox is a [`MemoryOutbox`] the store appends to under the room's lock.

use std::sync::{Arc, OnceLock};

use anteroom_core::Clock;
use anteroom_core::RoomId;
use anteroom_core::engine::{ChangeSet, RoomState};

use crate::engine_host::{EngineHost, PendingWrite, Persister, delegate_room_store};
use crate::{EventOutbox, MemoryOutbox, OutboxLimits, StoreError};

/// Rooms in memory: the reference every other backend is held to.
pub struct MemoryStore {
    host: EngineHost<Volatile>,
}

impl MemoryStore {
    /// An empty store reading time from `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> MemoryStore {
        MemoryStore {
            host: EngineHost::new(Vec::new(), clock, Volatile::default(), None),
        }
    }

    /// An empty store whose random choices (ids, random-order admissions) follow `seed`.
    pub fn with_seed(clock: Arc<dyn Clock>, seed: u64) -> MemoryStore {
        MemoryStore {
            host: EngineHost::new(Vec::new(), clock, Volatile::default(), Some(seed)),
        }
    }

    fn open_event_outbox(&self, limits: OutboxLimits) -> Result<Arc<dyn EventOutbox>, StoreError> {
        let outbox = self
            .host
            .persister()
            .outbox
            .get_or_init(|| Arc::new(MemoryOutbox::new(limits)));
        Ok(outbox.clone())
    }
}

/// Persists nothing; keeps visitor events in memory once an outbox is asked for.
#[derive(Default)]
pub(crate) struct Volatile {
    outbox: OnceLock<Arc<MemoryOutbox>>,
}

impl Persister for Volatile {
    fn persist(
        &self,
        _: &RoomState,
        _: &ChangeSet,
        _: bool,
        events: Vec<Vec<u8>>,
    ) -> Result<Option<PendingWrite>, StoreError> {
        if let Some(outbox) = self.outbox.get()
            && !events.is_empty()
        {
            outbox.push(events);
        }
        Ok(None)
    }

    fn persist_deletion(&self, _: &RoomId) -> Result<Option<PendingWrite>, StoreError> {
        Ok(None)
    }

    async fn wait_durable_until(&self, _: u64) -> Result<(), StoreError> {
        Ok(())
    }
}

delegate_room_store!(MemoryStore);
