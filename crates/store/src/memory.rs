//! The reference backend: rooms in process memory, gone when the process ends.

use std::sync::Arc;

use anteroom_core::Clock;
use anteroom_core::RoomId;
use anteroom_core::engine::{ChangeSet, RoomState};

use crate::StoreError;
use crate::engine_host::{EngineHost, PendingWrite, Persister, delegate_room_store};

/// Rooms in memory: the reference every other backend is held to.
pub struct MemoryStore {
    host: EngineHost<Volatile>,
}

impl MemoryStore {
    /// An empty store reading time from `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> MemoryStore {
        MemoryStore {
            host: EngineHost::new(Vec::new(), clock, Volatile, None),
        }
    }

    /// An empty store whose random choices (ids, random-order admissions) follow `seed`.
    pub fn with_seed(clock: Arc<dyn Clock>, seed: u64) -> MemoryStore {
        MemoryStore {
            host: EngineHost::new(Vec::new(), clock, Volatile, Some(seed)),
        }
    }
}

/// Persists nothing.
pub(crate) struct Volatile;

impl Persister for Volatile {
    fn persist(
        &self,
        _: &RoomState,
        _: &ChangeSet,
        _: bool,
    ) -> Result<Option<PendingWrite>, StoreError> {
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
