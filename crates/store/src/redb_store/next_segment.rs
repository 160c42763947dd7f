//! The next log segment, prepared ahead of its turn: a thread writes its header and zeros and
//! syncs them while the current segment fills, so that starting a segment between two commits
//! is a rename and a directory sync, not a file created, synced, and then grown by a chunk of
//! zeros written and synced inside the next commit.
//!
//! One preparation at a time: the writer asks for the next one only once it has taken the
//! last, so the file renamed into place is always the one whose handle it holds.

use std::path::Path;
use std::sync::mpsc;
use std::thread::JoinHandle;

use super::wal::{self, PreparedSegment, WalError};
use crate::StoreError;

/// How big a segment is prepared at most: a larger `checkpoint_bytes` grows its segments a
/// chunk at a time past this, as the first segment does.
const MAX_PREPARED_BYTES: u64 = 128 << 20;

/// The writer's side of the preparing thread.
pub(super) struct SegmentPreparer {
    requests: Option<mpsc::Sender<u64>>,
    prepared: mpsc::Receiver<Result<PreparedSegment, WalError>>,
    /// A preparation was asked for and its result not taken yet.
    pending: bool,
    thread: Option<JoinHandle<()>>,
}

impl SegmentPreparer {
    /// Starts the thread that prepares segments beside `store`.
    pub(super) fn start(store: &Path) -> Result<SegmentPreparer, StoreError> {
        let (requests, request_receiver) = mpsc::channel::<u64>();
        let (result_sender, prepared) = mpsc::channel();
        let store = store.to_owned();
        let thread = std::thread::Builder::new()
            .name("anteroom-redb-prepare".to_owned())
            .spawn(move || prepare_on_request(&store, &request_receiver, &result_sender))
            .map_err(|e| StoreError::backend("cannot start the store's segment thread", e))?;
        Ok(SegmentPreparer {
            requests: Some(requests),
            prepared,
            pending: false,
            thread: Some(thread),
        })
    }

    /// Asks for a segment sized for `checkpoint_bytes` of log, unless one is on its way.
    pub(super) fn request(&mut self, checkpoint_bytes: u64) {
        if self.pending {
            return;
        }
        let size = checkpoint_bytes
            .saturating_add(wal::PREALLOCATION_CHUNK)
            .min(MAX_PREPARED_BYTES);
        if let Some(requests) = &self.requests {
            self.pending = requests.send(size).is_ok();
        }
    }

    /// The prepared segment, if it is ready. A preparation that failed is reported here and
    /// asked for again next time (the segment is then created on the commit path, as before).
    pub(super) fn take(&mut self) -> Option<PreparedSegment> {
        match self.prepared.try_recv() {
            Ok(Ok(segment)) => {
                self.pending = false;
                Some(segment)
            }
            Ok(Err(error)) => {
                self.pending = false;
                tracing::warn!(%error, "the embedded store could not prepare its next log segment");
                None
            }
            Err(_) => None,
        }
    }

    /// Stops the thread; it removes a segment prepared and never taken.
    pub(super) fn stop(mut self) {
        self.requests.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn prepare_on_request(
    store: &Path,
    requests: &mpsc::Receiver<u64>,
    results: &mpsc::Sender<Result<PreparedSegment, WalError>>,
) {
    while let Ok(size) = requests.recv() {
        if results.send(PreparedSegment::write(store, size)).is_err() {
            break;
        }
    }
    if let Err(error) = wal::remove_if_present(&wal::prepared_path(store)) {
        tracing::warn!(%error, "the embedded store could not remove its unused log segment");
    }
}
