//! The conformance suite against [`MemoryStore`], the reference backend.

mod conformance;

use std::sync::Arc;

use anteroom_core::ManualClock;
use anteroom_store::{MemoryStore, RoomStore};
use conformance::Backend;

struct Memory;

impl Backend for Memory {
    fn open(&self, clock: Arc<ManualClock>) -> Arc<dyn RoomStore> {
        Arc::new(MemoryStore::with_seed(clock, 7))
    }

    fn is_durable(&self) -> bool {
        false
    }
}

conformance_suite!(Memory);
