//! The conformance suite against [`RedbStore`], the embedded durable backend.

mod conformance;

use std::sync::Arc;

use anteroom_core::ManualClock;
use anteroom_store::{RedbStore, RoomStore};
use conformance::Backend;

/// A redb file in its own temporary directory, reopened as often as a test asks.
struct Redb {
    dir: tempfile::TempDir,
}

impl Redb {
    fn new() -> Redb {
        Redb {
            dir: tempfile::tempdir().expect("temporary directory"),
        }
    }
}

impl Backend for Redb {
    fn open(&self, clock: Arc<ManualClock>) -> Arc<dyn RoomStore> {
        let path = self.dir.path().join("anteroom.redb");
        Arc::new(RedbStore::open_with_seed(&path, clock, 7).expect("open redb store"))
    }

    fn is_durable(&self) -> bool {
        true
    }
}

conformance_suite!(Redb::new());
