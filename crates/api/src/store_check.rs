//! The store's part of readiness (`readiness.rs`): the rooms installed in the store, asked at
//! most once every [`STORE_CHECK_STANDS`]. `readyz` needs no key, and each answer would
//! otherwise read every room from the store (on Redis a round trip a room), which anyone could
//! repeat as fast as they can send.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anteroom_core::RoomId;
use anteroom_store::RoomStore;

/// How long the store's answer to readiness stands.
const STORE_CHECK_STANDS: Duration = Duration::from_secs(1);

/// The store's part of readiness; readiness asked meanwhile waits for the one check under
/// way, or takes the last one.
#[derive(Default)]
pub(crate) struct StoreCheck {
    last: tokio::sync::Mutex<Option<(Instant, Installed)>>,
}

/// The rooms installed in the store; `None` when it did not answer.
pub(crate) type Installed = Option<Arc<BTreeSet<RoomId>>>;

impl StoreCheck {
    /// The rooms `store` holds, as it said at most [`STORE_CHECK_STANDS`] ago.
    pub(crate) async fn installed(&self, store: &dyn RoomStore) -> Installed {
        let mut last = self.last.lock().await;
        if let Some((at, installed)) = last.as_ref()
            && at.elapsed() < STORE_CHECK_STANDS
        {
            return installed.clone();
        }
        let installed = match store.rooms().await {
            Ok(rooms) => Some(Arc::new(rooms.into_iter().map(|room| room.id).collect())),
            Err(error) => {
                // The detail (servers, timeouts) is for the log, not for anyone who can reach
                // the public listener.
                tracing::debug!(%error, "readiness: the store does not answer");
                None
            }
        };
        *last = Some((Instant::now(), installed.clone()));
        installed
    }
}
